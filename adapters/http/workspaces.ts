/**
 * Workspaces over HTTP (bearer token = the operator):
 *   POST /api/v1/workspaces (201) {"name", "folder"?}, GET /api/v1/workspaces,
 *   GET /api/v1/workspaces/{name} (with its index), POST /api/v1/workspaces/{name}/reindex (202) {"paths"?},
 *   POST /api/v1/workspaces/{name}/chats {"chatId", "platform"?, "account"?} (bind a chat),
 *   DELETE /api/v1/workspaces/{name}/chats {"chatId", ...} (unbind it),
 *   GET /api/v1/workspaces/{name}/search?q=&limit= (no model), GET /api/v1/workspaces/{name}/file?path=
 *   PUT /api/v1/workspaces/{name}/inbox {"host", "port"?, "tls"?, "user", "passwordRef", "folder"?} (the IMAP inbox),
 *   GET /api/v1/workspaces/{name}/inbox (settings and state), DELETE /api/v1/workspaces/{name}/inbox
 * Bodies are validated by the workspace service before anything changes.
 */
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { answer, errorResponses, json, parsedJsonBody, reply } from './common.js';
import { OPERATOR } from '../../common/roles.js';
import { WorkspaceInputError, type WorkspaceService } from '../../services/workspaces.js';

const errors = errorResponses('WorkspaceError');
const Loose = z.record(z.string(), z.unknown());
const anyJson = { body: { content: { 'application/json': { schema: z.unknown().openapi({ type: 'object' }) } }, required: true } };
const NameParam = z.object({ name: z.string().min(1).max(64).openapi({ param: { name: 'name', in: 'path' } }) });
const CreateBody = z.strictObject({ name: z.string(), folder: z.string().min(1).max(4096).optional() });
const ReindexBody = z.strictObject({ paths: z.array(z.string().min(1).max(1024)).max(1000).optional() });

export function registerWorkspaceRoutes(app: OpenAPIHono, workspaces: WorkspaceService): void {
  const sec = [{ bearer: [] }];
  const by = { id: OPERATOR.id, name: OPERATOR.name };
  function parsed<T>(schema: z.ZodType<T>, value: unknown): T {
    const r = schema.safeParse(value);
    if (!r.success) throw new WorkspaceInputError(r.error.issues.map((i) => `${i.path.join('.') || '(body)'}: ${i.message}`).join('; '));
    return r.data;
  }

  app.openapi(
    createRoute({ method: 'post', path: '/api/v1/workspaces', summary: 'Create a workspace: {"name", "folder"? (an existing absolute directory; default: under the data directory)}; its files are indexed', security: sec, request: anyJson, responses: { 201: json(Loose, 'Created'), ...errors } }),
    async (c) => {
      const r = await answer(async () => {
        const b = parsed(CreateBody, await parsedJsonBody(c, true));
        return workspaces.create(b.name, b.folder, by);
      });
      return reply(c as never, r, 201) as never;
    },
  );
  app.openapi(
    createRoute({ method: 'get', path: '/api/v1/workspaces', summary: 'Workspaces with their folder and number of chats', security: sec, responses: { 200: json(z.object({ workspaces: z.array(Loose) }), 'Workspaces'), ...errors } }),
    async (c) => c.json({ workspaces: (await workspaces.list()) as unknown as Array<Record<string, unknown>> }, 200),
  );
  app.openapi(
    createRoute({ method: 'get', path: '/api/v1/workspaces/{name}', summary: 'A workspace with its index: documents, sections and the last indexing run', security: sec, request: { params: NameParam }, responses: { 200: json(Loose, 'Workspace'), ...errors } }),
    async (c) => {
      const { name } = c.req.valid('param');
      const r = await answer(async () => ({ ...(await workspaces.show(name)), index: await workspaces.indexStatus(name) }));
      return reply(c as never, r) as never;
    },
  );
  app.openapi(
    createRoute({ method: 'post', path: '/api/v1/workspaces/{name}/reindex', summary: 'Index the workspace again: {"paths"?} (workspace paths; none: every file)', security: sec, request: { params: NameParam, ...anyJson }, responses: { 202: json(Loose, 'Accepted'), ...errors } }),
    async (c) => {
      const { name } = c.req.valid('param');
      const r = await answer(async () => {
        const b = parsed(ReindexBody, await parsedJsonBody(c, true));
        await workspaces.show(name);
        await workspaces.reindex(name, b.paths ? { paths: b.paths } : {});
        return { workspace: name, reindexing: b.paths ?? 'all' };
      });
      return reply(c as never, r, 202) as never;
    },
  );
  for (const method of ['post', 'delete'] as const) {
    app.openapi(
      createRoute({
        method,
        path: '/api/v1/workspaces/{name}/chats',
        summary: method === 'post' ? 'Bind a chat to the workspace: {"chatId", "platform"? (http), "account"? (default)}' : 'Unbind a chat from the workspace: {"chatId", "platform"?, "account"?}',
        security: sec,
        request: { params: NameParam, ...anyJson },
        responses: { 200: json(Loose, 'Done'), ...errors },
      }),
      async (c) => {
        const { name } = c.req.valid('param');
        const r = await answer(async () => {
          const chat = workspaces.chatOf(await parsedJsonBody(c, true));
          if (method === 'post') return { workspace: (await workspaces.bind(chat, name, by)).name, chat };
          const current = await workspaces.forChat(chat);
          if (!current || current.name !== name) throw new WorkspaceInputError(`that chat does not use workspace ${name}`, 404);
          await workspaces.unbind(chat);
          return { workspace: null, chat };
        });
        return reply(c as never, r) as never;
      },
    );
  }
  const inboxSummary: Record<'put' | 'get' | 'delete', string> = {
    put: 'Set the workspace\'s IMAP inbox: {"host", "port"? (993 with tls implicit, else 143), "tls"? (implicit|starttls|none: loopback only), "user", "passwordRef" (env:STEWARD_INBOX_<NAME>), "folder"? (INBOX)}',
    get: 'The workspace\'s IMAP inbox: settings (the password as its reference), UIDVALIDITY, last UID, last error, messages stored and failed',
    delete: 'Remove the workspace\'s IMAP inbox (the documents it wrote stay)',
  };
  for (const method of ['put', 'get', 'delete'] as const) {
    app.openapi(
      createRoute({ method, path: '/api/v1/workspaces/{name}/inbox', summary: inboxSummary[method], security: sec, request: { params: NameParam, ...(method === 'put' ? anyJson : {}) }, responses: { 200: json(Loose, 'Inbox'), ...errors } }),
      async (c) => {
        const { name } = c.req.valid('param');
        const r = await answer(async () => {
          if (method === 'put') return (await workspaces.inbox.set(name, await parsedJsonBody(c, true), by)) as unknown as Record<string, unknown>;
          if (method === 'get') return (await workspaces.inbox.show(name)) as unknown as Record<string, unknown>;
          return workspaces.inbox.clear(name, by);
        });
        return reply(c as never, r) as never;
      },
    );
  }
  app.openapi(
    createRoute({
      method: 'get',
      path: '/api/v1/workspaces/{name}/search',
      summary: 'Search the workspace (no model): the best sections with path, heading, lines and text',
      security: sec,
      request: { params: NameParam, query: z.object({ q: z.string().openapi({ param: { name: 'q', in: 'query' } }), limit: z.string().optional().openapi({ param: { name: 'limit', in: 'query' } }) }) },
      responses: { 200: json(Loose, 'Hits'), ...errors },
    }),
    async (c) => {
      const { name } = c.req.valid('param');
      const { q, limit } = c.req.valid('query');
      const r = await answer(() => workspaces.searchIn(name, q, limit === undefined ? 5 : Number(limit)));
      return reply(c as never, r) as never;
    },
  );
  app.openapi(
    createRoute({
      method: 'get',
      path: '/api/v1/workspaces/{name}/file',
      summary: 'A text file of the workspace by its workspace path (up to 16 KB; a path or link out of it is refused)',
      security: sec,
      request: { params: NameParam, query: z.object({ path: z.string().openapi({ param: { name: 'path', in: 'query' } }) }) },
      responses: { 200: json(Loose, 'File'), ...errors },
    }),
    async (c) => {
      const { name } = c.req.valid('param');
      const r = await answer(() => workspaces.openIn(name, c.req.valid('query').path));
      return reply(c as never, r) as never;
    },
  );
}
