/**
 * Triage and tasks over HTTP (bearer token = the operator):
 *   GET /api/v1/tasks?status=&lane=&limit=, POST /api/v1/tasks (201), GET /api/v1/tasks/{id},
 *   POST /api/v1/tasks/{id}/route|hand|close,
 *   GET|PUT /api/v1/bindings/{id}/triage (triage of a bound chat: on or off, its model).
 * Bodies are validated by the task service (one schema for API, CLI and chat) before anything
 * changes; an action's body is optional where it takes no options.
 */
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { bodyLimit } from 'hono/body-limit';
import { answer, errorResponses, json, jsonBody, reply } from './common.js';
import { OPERATOR } from '../../common/roles.js';
import { CLASSES, LANES, PRIORITIES, TASK_STATUSES } from '../../common/tasks.js';
import { TaskInputError, type TaskService } from '../../services/tasks.js';

const errors = errorResponses('TaskError');
const Loose = z.record(z.string(), z.unknown());
const IdParam = z.object({ id: z.string().min(1).max(64).openapi({ param: { name: 'id', in: 'path' } }) });
const anyJson = (required: boolean, description: string) => ({
  body: { content: { 'application/json': { schema: { type: 'object' as const, description } } }, required, ...(required ? {} : { description: `Optional. ${description} An empty body means no options.` }) },
});
const MAX_BODY = 64 * 1024;

export function registerTaskRoutes(app: OpenAPIHono, tasks: TaskService): void {
  const sec = [{ bearer: [] }];
  const by = { id: OPERATOR.id, name: OPERATOR.name };
  // bodies are small JSON
  app.on(['POST', 'PUT'], ['/api/v1/tasks', '/api/v1/tasks/*', '/api/v1/bindings/*/triage'], bodyLimit({ maxSize: MAX_BODY, onError: (c) => c.json({ error: `request body is larger than ${MAX_BODY} bytes` }, 413) }), async (c, next) => {
    const length = Number(c.req.header('content-length') ?? '0');
    const type = c.req.header('content-type') ?? '';
    if ((length > 0 || c.req.header('transfer-encoding')) && !/^application\/json\b/i.test(type)) return c.json({ error: 'expected Content-Type: application/json' }, 415);
    await next();
    return undefined;
  });

  app.openapi(
    createRoute({
      method: 'get',
      path: '/api/v1/tasks',
      summary: 'Tasks, oldest first: open ones unless status says otherwise',
      security: sec,
      request: { query: z.object({ status: z.string().max(16).optional().openapi({ description: [...TASK_STATUSES, 'all'].join(', ') }), lane: z.string().max(16).optional().openapi({ description: LANES.join(', ') }), limit: z.string().max(8).optional() }) },
      responses: { 200: json(z.object({ tasks: z.array(Loose) }), 'Tasks'), ...errors },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const r = await answer(async () => ({ tasks: await tasks.list({ ...(q.status ? { status: q.status } : {}), ...(q.lane ? { lane: q.lane } : {}), ...(q.limit ? { limit: q.limit } : {}) }) }));
      return reply(c as never, r) as never;
    },
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/api/v1/tasks',
      summary: `Make a task by hand: {"text", "chatId", "platform"?, "account"?, "lane"? (${LANES.join(', ')}), "priority"? (${PRIORITIES.join(', ')}), "due"? (4h, 2d or an ISO time), "assignee"?}`,
      security: sec,
      request: anyJson(true, 'The task.'),
      responses: { 201: json(Loose, 'Made'), ...errors },
    }),
    async (c) => {
      const b = await jsonBody(c);
      if (!b.ok) return c.json({ error: 'malformed JSON in the request body' }, 400) as never;
      return reply(c as never, await answer(() => tasks.create(b.value, by)), 201) as never;
    },
  );

  app.openapi(
    createRoute({ method: 'get', path: '/api/v1/tasks/{id}', summary: 'One task', security: sec, request: { params: IdParam }, responses: { 200: json(Loose, 'Task'), ...errors } }),
    async (c) => reply(c as never, await answer(() => tasks.show(c.req.valid('param').id))) as never,
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/api/v1/tasks/{id}/route',
      summary: `Override the routing of an open task: {"class" (${CLASSES.join(', ')}; noise closes it), "priority"?, "due"?}`,
      security: sec,
      request: { params: IdParam, ...anyJson(true, 'The new lane, priority and due window.') },
      responses: { 200: json(Loose, 'Routed'), ...errors },
    }),
    async (c) => {
      const b = await jsonBody(c);
      if (!b.ok) return c.json({ error: 'malformed JSON in the request body' }, 400) as never;
      return reply(c as never, await answer(() => tasks.route(c.req.valid('param').id, b.value, by))) as never;
    },
  );

  app.openapi(
    createRoute({ method: 'post', path: '/api/v1/tasks/{id}/hand', summary: "Hand an open task to the agent: a turn in the task's chat with its text as the message", security: sec, request: { params: IdParam, ...anyJson(false, 'This action takes no options.') }, responses: { 200: json(Loose, 'Handed'), ...errors } }),
    async (c) => {
      const b = await jsonBody(c, true);
      if (!b.ok) return c.json({ error: 'malformed JSON in the request body' }, 400) as never;
      const r = await answer(async () => {
        const opts = z.strictObject({}).safeParse(b.value);
        if (!opts.success) throw new TaskInputError('hand takes no options');
        return tasks.hand(c.req.valid('param').id, by);
      });
      return reply(c as never, r) as never;
    },
  );

  app.openapi(
    createRoute({ method: 'post', path: '/api/v1/tasks/{id}/close', summary: 'Close an open or handed task: {"note"?}', security: sec, request: { params: IdParam, ...anyJson(false, '{"note"?}: why, for the receipt.') }, responses: { 200: json(Loose, 'Closed'), ...errors } }),
    async (c) => {
      const b = await jsonBody(c, true);
      if (!b.ok) return c.json({ error: 'malformed JSON in the request body' }, 400) as never;
      const r = await answer(async () => {
        const opts = z.strictObject({ note: z.string().trim().min(1).max(500).optional() }).safeParse(b.value);
        if (!opts.success) throw new TaskInputError(`invalid close: ${opts.error.issues[0]?.message ?? 'expected {"note"?}'}`);
        return tasks.close(c.req.valid('param').id, by, opts.data.note);
      });
      return reply(c as never, r) as never;
    },
  );

  app.openapi(
    createRoute({ method: 'get', path: '/api/v1/bindings/{id}/triage', summary: "A binding's triage: on or off, and its model", security: sec, request: { params: IdParam }, responses: { 200: json(Loose, 'Triage'), ...errors } }),
    async (c) => reply(c as never, await answer(() => tasks.triage(c.req.valid('param').id))) as never,
  );

  app.openapi(
    createRoute({
      method: 'put',
      path: '/api/v1/bindings/{id}/triage',
      summary: 'Switch triage of a bound chat: {"enabled", "model"? (provider:model)}: its messages that do not address Steward are classified into tasks',
      security: sec,
      request: { params: IdParam, ...anyJson(true, '{"enabled": boolean, "model"?: "provider:model"}') },
      responses: { 200: json(Loose, 'Set'), ...errors },
    }),
    async (c) => {
      const b = await jsonBody(c);
      if (!b.ok) return c.json({ error: 'malformed JSON in the request body' }, 400) as never;
      return reply(c as never, await answer(() => tasks.setTriage(c.req.valid('param').id, b.value, by))) as never;
    },
  );
}
