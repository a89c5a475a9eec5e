/**
 * Skills and memories over HTTP (bearer token = the operator):
 *   GET /api/v1/skills?workspace= (the operator's skills with a workspace's: name, version, source),
 *   GET /api/v1/memories/export?workspace=|chatId=&platform=&account= (JSONL: each memory with
 *   its provenance and receipts), POST /api/v1/memories/{id}/approve|reject,
 *   DELETE /api/v1/memories/{id} (forget: out of the index).
 * Inputs are validated by the knowledge service before anything changes.
 */
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { answer, errorResponses, json, reply } from './common.js';
import { OPERATOR } from '../../common/roles.js';
import { KnowledgeInputError, type KnowledgeService } from '../../services/knowledge.js';
import { ChatRefSchema, WorkspaceNameSchema } from '../../services/workspaces.js';

const errors = errorResponses('KnowledgeError');
const Loose = z.record(z.string(), z.unknown());
const IdParam = z.object({ id: z.string().min(1).max(64).openapi({ param: { name: 'id', in: 'path' } }) });
const ExportQuery = z.object({
  workspace: z.string().max(64).optional(),
  chatId: z.string().max(200).optional(),
  platform: z.string().max(32).optional(),
  account: z.string().max(200).optional(),
});

export function registerMemoryRoutes(app: OpenAPIHono, knowledge: KnowledgeService): void {
  const sec = [{ bearer: [] }];
  const workspaceOf = (raw: string | undefined): string | undefined => {
    if (raw === undefined) return undefined;
    const r = WorkspaceNameSchema.safeParse(raw);
    if (!r.success) throw new KnowledgeInputError(`workspace: ${r.error.issues[0]!.message}`);
    return r.data;
  };

  app.openapi(
    createRoute({ method: 'get', path: '/api/v1/skills', summary: "The skills: the operator's, with a workspace's when named (the workspace's win on a name)", security: sec, request: { query: z.object({ workspace: z.string().max(64).optional() }) }, responses: { 200: json(Loose, 'Skills'), ...errors } }),
    async (c) => {
      const r = await answer(async () => {
        const ws = workspaceOf(c.req.valid('query').workspace);
        const cat = await knowledge.skillsOf(ws);
        return { skills: cat.skills.map(({ body: _body, ...s }) => s), problems: cat.problems };
      });
      return reply(c as never, r) as never;
    },
  );
  app.openapi(
    createRoute({
      method: 'get',
      path: '/api/v1/memories/export',
      summary: "Memories as JSON lines (a workspace's, a chat's, or all), each with its provenance and the receipts of its proposal, decision and forgetting",
      security: sec,
      request: { query: ExportQuery },
      responses: { 200: { content: { 'application/x-ndjson': { schema: z.string() } }, description: 'JSON lines' }, ...errors },
    }),
    async (c) => {
      const r = await answer(async () => {
        const q = c.req.valid('query');
        const workspace = workspaceOf(q.workspace);
        if (workspace && q.chatId) throw new KnowledgeInputError('name a workspace or a chat, not both');
        const chat = q.chatId ? ChatRefSchema.safeParse({ chatId: q.chatId, ...(q.platform ? { platform: q.platform } : {}), ...(q.account ? { account: q.account } : {}) }) : undefined;
        if (chat && !chat.success) throw new KnowledgeInputError(`the chat: ${chat.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
        return knowledge.exportJsonl({ ...(workspace ? { workspace } : {}), ...(chat?.success ? { chat: chat.data } : {}) });
      });
      if (!r.ok) return c.json({ error: r.error }, r.status) as never;
      return c.body(r.value, 200, { 'content-type': 'application/x-ndjson; charset=utf-8' }) as never;
    },
  );
  for (const decision of ['approve', 'reject'] as const) {
    app.openapi(
      createRoute({ method: 'post', path: `/api/v1/memories/{id}/${decision}`, summary: decision === 'approve' ? 'Approve a pending memory: it is recalled from then on' : 'Reject a pending memory', security: sec, request: { params: IdParam }, responses: { 200: json(Loose, 'Decided'), ...errors } }),
      async (c) => reply(c as never, await answer(() => knowledge.decide(c.req.valid('param').id, decision, OPERATOR))) as never,
    );
  }
  app.openapi(
    createRoute({ method: 'delete', path: '/api/v1/memories/{id}', summary: 'Forget a memory: out of the index at once (the row stays, forgotten, for the export)', security: sec, request: { params: IdParam }, responses: { 200: json(Loose, 'Forgotten'), ...errors } }),
    async (c) => reply(c as never, await answer(() => knowledge.forget(c.req.valid('param').id, OPERATOR))) as never,
  );
}
