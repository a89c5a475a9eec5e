/**
 * The operator inbox over HTTP (bearer token = the operator, who sees everything):
 *   GET  /api/v1/inbox?kind=  everything waiting for a decision (and what was decided in the
 *        last day, with who decided and how), newest first, filterable by kind (`mcp`: MCP
 *        servers a worker found down, listed with their last error and no decision);
 *   POST /api/v1/inbox/{id}/decision  {"decision", "reason"?, "role"?, "code"?}: decided through
 *        the service the chat buttons, commands, CLI and the other routes use for that kind.
 * Refusals: 400 (bad id or body), 404 (no such item), 409 (refused by the rules: a role that
 * may not, a self-approval, a wrong pairing code, or already decided): nothing changes.
 */
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { answer, errorResponses, json, parsedJsonBody, reply } from './common.js';
import { OPERATOR } from '../../common/roles.js';
import { INBOX_DECISIONS, INBOX_KINDS, type OperatorInbox } from '../../services/decisions.js';

const errors = errorResponses('InboxError');
const sec = [{ bearer: [] }];

const Item = z
  .object({
    id: z.string().openapi({ example: 'approval:apr-1a2b3c4d5e6f' }),
    kind: z.enum(INBOX_KINDS),
    created: z.string(),
    askedBy: z.string().nullable(),
    title: z.string(),
    text: z.string().openapi({ description: "The whole request; for an approval, the text the chat shows the admins" }),
    status: z.string(),
    actions: z.array(z.enum(INBOX_DECISIONS)).openapi({ description: 'What the asker may do with it now' }),
    notes: z.array(z.string()).openapi({ description: 'Why an action is not offered' }),
    mine: z.boolean().optional().openapi({ description: 'The asker asked for or shaped it (people below admin see only these)' }),
    decided: z.object({ by: z.string().nullable(), at: z.string().nullable(), how: z.string(), reason: z.string().optional() }).nullable(),
  })
  .openapi('InboxItem');

const DecisionBody = z
  .object({
    decision: z.enum(INBOX_DECISIONS),
    reason: z.string().min(1).max(500).optional(),
    role: z.string().optional().openapi({ description: 'pairing approve: the role to give' }),
    code: z.string().optional().openapi({ description: "pairing: the requester's code (never stored or shown)" }),
  })
  .openapi('InboxDecision');

const IdParam = z.object({ id: z.string().min(1).max(200).openapi({ param: { name: 'id', in: 'path' }, example: 'memory:m-1a2b3c4d' }) });

export function registerInboxRoutes(app: OpenAPIHono, inbox: OperatorInbox): void {
  app.openapi(
    createRoute({
      method: 'get',
      path: '/api/v1/inbox',
      summary: 'Everything waiting for a decision (approvals, changes waiting for promotion, pairing requests, pending memories, open tasks, MCP servers found down), newest first',
      security: sec,
      request: { query: z.object({ kind: z.string().max(32).optional().openapi({ param: { name: 'kind', in: 'query' }, description: INBOX_KINDS.join(', ') }) }) },
      responses: { 200: json(z.object({ items: z.array(Item) }), 'The inbox'), ...errors },
    }),
    async (c) => reply(c as never, await answer(async () => ({ items: await inbox.list(OPERATOR, c.req.valid('query')) }))) as never,
  );
  app.openapi(
    createRoute({
      method: 'post',
      path: '/api/v1/inbox/{id}/decision',
      summary: 'Decide an item in place, through the same service as every other surface (accepted once)',
      security: sec,
      request: {
        params: IdParam,
        // read and checked by the service (zod), so every surface refuses the same way
        body: { content: { 'application/json': { schema: DecisionBody } }, required: true },
      },
      responses: { 200: json(z.object({ applied: z.literal(true), message: z.string(), item: Item.nullable() }), 'Decided'), ...errors },
    }),
    async (c) => reply(c as never, await answer(async () => inbox.decide(OPERATOR, c.req.param('id'), await parsedJsonBody(c)))) as never,
  );
}
