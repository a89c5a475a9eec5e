/**
 * The heartbeat over HTTP (bearer token = the operator): GET /api/v1/heartbeat -> 200 with each
 * part's state (ok or degraded), since when, its last success and what was seen; `ok` is true
 * when every part is. Checked again when the last round is more than 5 s old; no model call.
 */
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { errorResponses, json } from './common.js';
import type { PartState } from '../../domain/heartbeat.js';

const errors = errorResponses('HeartbeatError');
const Part = z.object({ part: z.string(), state: z.enum(['ok', 'degraded']), detail: z.string(), since: z.string(), lastOkAt: z.string().nullable(), checkedAt: z.string(), notified: z.boolean() });

export function registerHeartbeatRoutes(app: OpenAPIHono, heartbeat: { current(maxAgeMs?: number): Promise<PartState[]> }): void {
  app.openapi(
    createRoute({ method: 'get', path: '/api/v1/heartbeat', summary: "Each part's state (Temporal, the database, the task queues' workers, chat connections, the model provider, MCP servers, IMAP inboxes) with its last success", security: [{ bearer: [] }], responses: { 200: json(z.object({ ok: z.boolean(), parts: z.array(Part) }), 'The parts'), ...errors } }),
    async (c) => {
      const parts = await heartbeat.current();
      return c.json({ ok: parts.every((p) => p.state === 'ok'), parts }, 200);
    },
  );
}
