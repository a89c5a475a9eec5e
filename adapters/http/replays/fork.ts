/**
 * Fork a chat over HTTP (bearer token = the operator; docs/replay.md "Fork a chat"):
 *   POST /api/v1/chats/{chatId}/fork  {"turnId", "newChatId"?, "platform"?, "account"?}
 *        201 {chatId, sessionId, forkedFrom, copied}: a new HTTP chat whose session starts from
 *        the chat's state just before that turn. Idempotency-Key: a retry (without newChatId)
 *        names the same new chat and answers the same; with newChatId a retry answers the same.
 * Refusals: 400 (bad body), 404 (no such chat or turn, or a turn of another chat), 409 (the new
 * chat id is in use, or the turn's state can no longer be read): nothing is written or started.
 */
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { ChatIdParam, errorResponses, json, jsonBody } from '../common.js';
import { OPERATOR } from '../../../common/roles.js';
import { ForkError, type ForkService } from '../../../services/replays/fork.js';

const errors = errorResponses('ForkError');

const ForkBody = z
  .object({
    turnId: z.string().openapi({ description: 'The turn to fork before (its id, as receipts and `steward trace` show it)' }),
    newChatId: z.string().optional().openapi({ description: 'The new HTTP chat id (default: derived from the chat id, the same for the same Idempotency-Key)' }),
    platform: z.string().optional().openapi({ description: "The forked chat's platform (default http)" }),
    account: z.string().optional().openapi({ description: "The forked chat's account (default: the API's)" }),
  })
  .openapi('ForkRequest');

const ForkResult = z
  .object({
    chatId: z.string(),
    sessionId: z.string(),
    forkedFrom: z.object({ sessionId: z.string(), turnId: z.string() }),
    copied: z.number().int().openapi({ description: 'Transcript entries copied into the new chat' }),
  })
  .openapi('ForkResult');

export function registerForkRoutes(app: OpenAPIHono, forks: ForkService): void {
  app.openapi(
    createRoute({
      method: 'post',
      path: '/api/v1/chats/{chatId}/fork',
      summary: "Start a new HTTP chat from this chat's state just before a turn (its working set and transcript up to there); the chat itself is untouched",
      security: [{ bearer: [] }],
      request: {
        params: ChatIdParam,
        headers: z.object({ 'idempotency-key': z.string().min(1).max(200).optional() }),
        // read again whole and checked by the service (zod, strict), as for the CLI
        body: { content: { 'application/json': { schema: ForkBody } }, required: true },
      },
      responses: { 201: json(ForkResult, 'Forked'), 403: json(z.object({ error: z.string() }), 'Not an admin'), ...errors },
    }),
    async (c) => {
      const b = await jsonBody(c);
      if (!b.ok || typeof b.value !== 'object' || b.value === null || Array.isArray(b.value)) return c.json({ error: 'the body is a JSON object: {"turnId", "newChatId"?}' }, 400);
      const idem = c.req.valid('header')['idempotency-key'];
      try {
        const r = await forks.fork(OPERATOR, { ...(b.value as Record<string, unknown>), chatId: c.req.valid('param').chatId }, idem !== undefined ? { key: `api:${OPERATOR.id}:${idem}` } : {});
        return c.json(r, 201);
      } catch (err) {
        if (err instanceof ForkError) return c.json({ error: err.message }, err.status);
        throw err;
      }
    },
  );
}
