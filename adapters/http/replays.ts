/**
 * Counterfactual replay over HTTP (bearer token = the operator; docs/replay.md):
 *   POST /api/v1/replays (202: the replay's id and turn count; Idempotency-Key: a retry with the
 *   same key answers with the replay the first call started and starts nothing), GET /api/v1/replays,
 *   GET /api/v1/replays/{id} (?format=json|markdown|jsonl), POST /api/v1/replays/{id}/cancel.
 * The body is checked whole by the replay service (services/replays.ts) before anything starts.
 */
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { answer, errorResponses, json, parsedJsonBody, reply } from './common.js';
import { OPERATOR } from '../../common/roles.js';
import type { ReplayService } from '../../services/replays.js';

const errors = errorResponses('ReplayError');
const Loose = z.record(z.string(), z.unknown());
const IdParam = z.object({ id: z.string().min(1).max(64).openapi({ param: { name: 'id', in: 'path' }, example: 'rpk3m9x2q7ab' }) });

const START_BODY =
  '{"selection": one of {"turnId"} | {"chatId", "platform"?, "account"?, "since", "until"} | {"objectiveId", "last"} | {"sample": {"size", "since"?, "until"?, "seed"?}}, ' +
  '"alternative"?: {"model"? (provider:model), "systemPrompt"?, "promptLayers"?, "skills"? (on|off), "retrieval"?, "approvalTools"?, "toolPolicy"?}, "concurrency"? (1 to 8)}';

export function registerReplayRoutes(app: OpenAPIHono, replays: ReplayService): void {
  const sec = [{ bearer: [] }];
  const by = OPERATOR;

  app.openapi(
    createRoute({
      method: 'post',
      path: '/api/v1/replays',
      summary: 'Replay past chat turns under an alternative (model, prompt, skills, retrieval, approval policy) with every effect answered from the record',
      description: `${START_BODY}. A bad selection, an unknown model or a selection that names no turn is refused (400) and starts nothing. A retry with the same Idempotency-Key answers with the replay the first call started (and starts nothing new).`,
      security: sec,
      request: {
        headers: z.object({ 'idempotency-key': z.string().min(1).max(200).optional() }),
        body: { content: { 'application/json': { schema: { type: 'object' as const, description: START_BODY } } }, required: true },
      },
      responses: { 202: json(z.object({ id: z.string(), workflowId: z.string(), turns: z.number().int(), truncated: z.boolean(), selection: Loose }), 'Started'), ...errors },
    }),
    async (c) => {
      const idem = c.req.valid('header')['idempotency-key'];
      return reply(c as never, await answer(async () => replays.start(by, await parsedJsonBody(c), idem !== undefined ? { key: idem } : {})), 202) as never;
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/api/v1/replays',
      summary: 'Replays, newest first',
      security: sec,
      request: { query: z.object({ limit: z.string().max(8).optional().openapi({ description: '1 to 500 (default 50)' }) }) },
      responses: { 200: json(z.object({ replays: z.array(Loose) }), 'Replays'), ...errors },
    }),
    async (c) => {
      const q = c.req.valid('query');
      return reply(c as never, await answer(async () => ({ replays: await replays.list(by, q.limit === undefined ? {} : { limit: q.limit }) }))) as never;
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/api/v1/replays/{id}',
      summary: 'One replay: its state and report (JSON), or the report as Markdown or JSONL',
      security: sec,
      request: { params: IdParam, query: z.object({ format: z.string().max(16).optional().openapi({ description: 'json (default), markdown or jsonl' }) }) },
      responses: {
        200: {
          content: { 'application/json': { schema: Loose }, 'text/markdown': { schema: z.string() }, 'application/x-ndjson': { schema: z.string() } },
          description: 'The replay (JSON: {replay, report}; the report is null until it ends)',
        },
        ...errors,
      },
    }),
    async (c) => {
      const r = await answer(() => replays.report(by, c.req.valid('param').id, c.req.valid('query').format));
      if (!r.ok) return reply(c as never, r) as never;
      const v = r.value;
      if (v.format === 'json') return c.json({ replay: v.replay, report: v.report }, 200) as never;
      return c.body(v.text, 200, { 'content-type': v.format === 'markdown' ? 'text/markdown; charset=utf-8' : 'application/x-ndjson; charset=utf-8' }) as never;
    },
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/api/v1/replays/{id}/cancel',
      summary: 'Cancel a running replay (its turns still running are cancelled; the report keeps what was replayed)',
      security: sec,
      request: { params: IdParam },
      responses: { 202: json(z.object({ id: z.string(), status: z.literal('cancelling') }), 'Cancelling'), ...errors },
    }),
    async (c) => reply(c as never, await answer(() => replays.cancel(by, c.req.valid('param').id)), 202) as never,
  );
}
