/**
 * Objectives over HTTP (bearer token = the operator):
 *   POST /api/v1/objectives (201), GET /api/v1/objectives, GET/PATCH/DELETE /api/v1/objectives/{id},
 *   POST /api/v1/objectives/{id}/{pause|resume|trigger|backfill|skip-missed}
 * The bearer token is the operator's, who passes every role rule (the service's; the console
 * passes the person signed in).
 * `{id}` is the objective's id or name. Bodies are validated by the objective service (one
 * schema for API, CLI and chat) before anything changes. An action's body is optional: an empty
 * one (even sent with `Content-Type: application/json`, as curl users do) means no options.
 */
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { answer, errorResponses, json, jsonBody } from './common.js';
import { OPERATOR } from '../../common/roles.js';
import { OVERLAP_POLICIES } from '../../common/objectives.js';
import { ObjectiveInputError, type ObjectiveService } from '../../services/objectives.js';

const errors = errorResponses('ObjectiveError');
const Loose = z.record(z.string(), z.unknown());
const anyJson = (required: boolean) => ({ body: { content: { 'application/json': { schema: z.unknown().openapi({ type: 'object' }) } }, required } });
/**
 * An action's options: optional, and read by the handler itself (a plain OpenAPI schema, so no
 * validator parses the body first): an empty body, with or without `Content-Type:
 * application/json`, means no options.
 */
const optionalOptions = (description: string) => ({
  body: {
    content: { 'application/json': { schema: { type: 'object' as const, description } } },
    required: false,
    description: `Optional. ${description} An empty body (with or without Content-Type: application/json) means no options.`,
  },
});
const IdParam = z.object({ id: z.string().min(1).max(64).openapi({ param: { name: 'id', in: 'path' } }) });

export function registerObjectiveRoutes(app: OpenAPIHono, objectives: ObjectiveService): void {
  const sec = [{ bearer: [] }];
  const by = { id: OPERATOR.id, name: OPERATOR.name };

  app.openapi(
    createRoute({
      method: 'post',
      path: '/api/v1/objectives',
      summary: `Create an objective: {"name", "prompt", "chatId", "platform"?, "account"?, "schedule"?: {"cron"?|"every"?, "timezone"?, "jitter"?}, "webhook"?: {"secretRef"}, "watch"?: {"path"}, "inboundEmail"? (a schedule or at least one trigger), "overlap"? (${OVERLAP_POLICIES.join(', ')}), "catchupWindow"?, "pauseOnFailure"?, "model"?, "paused"?}`,
      security: sec,
      request: anyJson(true),
      responses: { 201: json(Loose, 'Created'), ...errors },
    }),
    async (c) => {
      const b = await jsonBody(c);
      if (!b.ok) return c.json({ error: 'malformed JSON in the request body' }, 400);
      const r = await answer(() => objectives.create(b.value, by));
      return r.ok ? c.json(r.value as unknown as Record<string, unknown>, 201) : c.json({ error: r.error }, r.status);
    },
  );

  app.openapi(
    createRoute({ method: 'get', path: '/api/v1/objectives', summary: 'Objectives with their next run and last result', security: sec, responses: { 200: json(z.object({ objectives: z.array(Loose) }), 'Objectives'), ...errors } }),
    async (c) => c.json({ objectives: (await objectives.list()) as unknown as Array<Record<string, unknown>> }, 200),
  );

  app.openapi(
    createRoute({ method: 'get', path: '/api/v1/objectives/{id}', summary: 'One objective with its recent runs', security: sec, request: { params: IdParam }, responses: { 200: json(Loose, 'Objective'), ...errors } }),
    async (c) => {
      const r = await answer(() => objectives.show(c.req.valid('param').id));
      return r.ok ? c.json(r.value as unknown as Record<string, unknown>, 200) : c.json({ error: r.error }, r.status);
    },
  );

  app.openapi(
    createRoute({ method: 'patch', path: '/api/v1/objectives/{id}', summary: 'Change its prompt, schedule, overlap, catch-up window, pause on failure or model', security: sec, request: { params: IdParam, ...anyJson(true) }, responses: { 200: json(Loose, 'Changed'), ...errors } }),
    async (c) => {
      const b = await jsonBody(c);
      if (!b.ok) return c.json({ error: 'malformed JSON in the request body' }, 400);
      const r = await answer(() => objectives.update(c.req.valid('param').id, b.value, by));
      return r.ok ? c.json(r.value as unknown as Record<string, unknown>, 200) : c.json({ error: r.error }, r.status);
    },
  );

  app.openapi(
    createRoute({ method: 'delete', path: '/api/v1/objectives/{id}', summary: 'Delete the objective and its schedule (its runs stay on record)', security: sec, request: { params: IdParam }, responses: { 200: json(z.object({ deleted: z.boolean() }), 'Deleted'), ...errors } }),
    async (c) => {
      const r = await answer(() => objectives.remove(c.req.valid('param').id, by));
      return r.ok ? c.json({ deleted: r.value }, 200) : c.json({ error: r.error }, r.status);
    },
  );

  for (const action of ['pause', 'resume', 'trigger', 'backfill', 'skip-missed'] as const) {
    app.openapi(
      createRoute({
        method: 'post',
        path: `/api/v1/objectives/{id}/${action}`,
        summary:
          action === 'backfill'
            ? 'Run what a past time range would have run: {"start", "end", "overlap"?}'
            : action === 'trigger'
              ? 'Run now: {"overlap"?} (default the objective\'s policy)'
              : action === 'skip-missed'
                ? 'Skip runs scheduled before now that have not started (after downtime)'
                : `${action[0]!.toUpperCase()}${action.slice(1)} the schedule`,
        security: sec,
        request: {
          params: IdParam,
          ...optionalOptions(
            action === 'backfill'
              ? '{"start", "end", "overlap"?}: the time range (required) and the overlap policy.'
              : action === 'trigger'
                ? '{"overlap"?}: the overlap policy of this run.'
                : action === 'skip-missed'
                  ? 'This action takes no options.'
                  : '{"note"?}: why (at most 500 characters), kept with the schedule and in the receipt.',
          ),
        },
        responses: { 200: json(Loose, 'Done'), ...errors },
      }),
      async (c) => {
        const id = c.req.valid('param').id;
        const b = await jsonBody(c, true);
        if (!b.ok) return c.json({ error: 'malformed JSON in the request body' }, 400);
        const r = await answer(async () => {
          switch (action) {
            case 'pause':
            case 'resume': {
              // the note is checked by the service; a body without one means none (as before notes)
              const note = typeof b.value === 'object' && b.value !== null && !Array.isArray(b.value) ? (b.value as { note?: unknown }).note : undefined;
              return action === 'pause' ? objectives.pause(id, by, note) : objectives.resume(id, by, note);
            }
            case 'skip-missed':
              return objectives.skipMissed(id, by);
            case 'backfill':
              return objectives.backfill(id, b.value, by);
            case 'trigger': {
              const parsed = z.strictObject({ overlap: z.enum(OVERLAP_POLICIES).optional() }).safeParse(b.value);
              if (!parsed.success) throw new ObjectiveInputError(`invalid trigger: ${parsed.error.issues[0]?.message ?? 'expected {"overlap"?}'}`);
              return objectives.trigger(id, by, parsed.data.overlap);
            }
          }
        });
        return r.ok ? c.json(r.value as unknown as Record<string, unknown>, 200) : c.json({ error: r.error }, r.status);
      },
    );
  }
}
