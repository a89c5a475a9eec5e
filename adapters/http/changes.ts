/**
 * Repositories and governed changes over HTTP (bearer token = the operator):
 *   POST /api/v1/repos, GET /api/v1/repos, GET/DELETE /api/v1/repos/{name}
 *   POST /api/v1/changes (202 with its id; Idempotency-Key: a retry finds the first call's change), GET /api/v1/changes, GET /api/v1/changes/{id},
 *   GET /api/v1/changes/{id}/patch (text/x-diff, git apply-able; a patch that was not promoted
 *   only with ?include=refused, and always with the change's status and verdict in headers),
 *   POST /api/v1/changes/{id}/answer
 * Bodies are validated (zod) by the change service before anything changes.
 */
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { errorResponses, json } from './common.js';
import { OPERATOR } from '../../common/roles.js';
import { ChangeInputError, type ChangeService } from '../../services/changes.js';

const errors = errorResponses('ChangeError');
/** The body is validated by the service (one schema for API, CLI and chat), so the route takes any JSON. */
const anyJson = { body: { content: { 'application/json': { schema: z.unknown().openapi({ type: 'object' }) } }, required: true } };
const Loose = z.record(z.string(), z.unknown());
const NameParam = z.object({ name: z.string().min(1).max(64).openapi({ param: { name: 'name', in: 'path' } }) });
const IdParam = z.object({ id: z.string().regex(/^chg-[a-f0-9]{12}$/, 'a change id looks like chg-0123456789ab').openapi({ param: { name: 'id', in: 'path' } }) });

export function registerChangeRoutes(app: OpenAPIHono, changes: ChangeService): void {
  const sec = [{ bearer: [] }];
  const by = { id: OPERATOR.id, name: OPERATOR.name };
  const fail = (err: unknown) => {
    if (err instanceof ChangeInputError) return { error: err.message, status: err.status };
    throw err;
  };
  async function body(c: { req: { text(): Promise<string> } }): Promise<{ ok: true; value: unknown } | { ok: false }> {
    try {
      return { ok: true, value: JSON.parse(await c.req.text()) };
    } catch {
      return { ok: false };
    }
  }

  app.openapi(
    createRoute({ method: 'post', path: '/api/v1/repos', summary: 'Register (or replace) a repository: clone URL, default branch, checks, policy, agent, GitHub target', security: sec, request: anyJson, responses: { 201: json(Loose, 'Registered'), 200: json(Loose, 'Replaced'), ...errors } }),
    async (c) => {
      const b = await body(c);
      if (!b.ok) return c.json({ error: 'malformed JSON in the request body' }, 400);
      try {
        const r = await changes.registerRepo(b.value, by);
        return r.created ? c.json(r.repo as unknown as Record<string, unknown>, 201) : c.json(r.repo as unknown as Record<string, unknown>, 200);
      } catch (err) {
        const f = fail(err);
        return c.json({ error: f.error }, f.status);
      }
    },
  );

  app.openapi(
    createRoute({ method: 'get', path: '/api/v1/repos', summary: 'Registered repositories', security: sec, responses: { 200: json(z.object({ repos: z.array(Loose) }), 'Repositories'), ...errors } }),
    async (c) => c.json({ repos: (await changes.listRepos()) as unknown as Array<Record<string, unknown>> }, 200),
  );

  app.openapi(
    createRoute({ method: 'get', path: '/api/v1/repos/{name}', summary: 'One repository', security: sec, request: { params: NameParam }, responses: { 200: json(Loose, 'Repository'), ...errors } }),
    async (c) => {
      const r = await changes.getRepo(c.req.valid('param').name);
      return r ? c.json(r as unknown as Record<string, unknown>, 200) : c.json({ error: 'no such repository' }, 404);
    },
  );

  app.openapi(
    createRoute({ method: 'delete', path: '/api/v1/repos/{name}', summary: 'Forget a repository (its changes stay on record)', security: sec, request: { params: NameParam }, responses: { 200: json(z.object({ deleted: z.boolean() }), 'Deleted'), ...errors } }),
    async (c) => {
      const deleted = await changes.removeRepo(c.req.valid('param').name, by);
      return deleted ? c.json({ deleted }, 200) : c.json({ error: 'no such repository' }, 404);
    },
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/api/v1/changes',
      summary: 'Start a governed change: {"repo", "request", "base"?}; 202 with its id. A retry with the same Idempotency-Key answers with the change the first call started (and starts nothing new)',
      security: sec,
      request: { ...anyJson, headers: z.object({ 'idempotency-key': z.string().min(1).max(200).optional() }) },
      responses: { 202: json(z.object({ id: z.string(), workflowId: z.string(), runUrl: z.string().nullable() }), 'Started'), ...errors },
    }),
    async (c) => {
      const b = await body(c);
      if (!b.ok) return c.json({ error: 'malformed JSON in the request body' }, 400);
      try {
        const idem = c.req.valid('header')['idempotency-key'];
        return c.json(await changes.startChange(b.value, by, undefined, idem !== undefined ? { key: `api:${by.id}:${idem}` } : {}), 202);
      } catch (err) {
        const f = fail(err);
        return c.json({ error: f.error }, f.status);
      }
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/api/v1/changes',
      summary: 'Recent changes, newest first',
      security: sec,
      request: { query: z.object({ repo: z.string().max(64).optional().openapi({ param: { name: 'repo', in: 'query' } }) }) },
      responses: { 200: json(z.object({ changes: z.array(Loose) }), 'Changes'), ...errors },
    }),
    async (c) => {
      const { repo } = c.req.valid('query');
      return c.json({ changes: (await changes.listChanges(repo ? { repo } : {})) as unknown as Array<Record<string, unknown>> }, 200);
    },
  );

  app.openapi(
    createRoute({ method: 'get', path: '/api/v1/changes/{id}', summary: 'A change: phase, task draft, plan, gate verdict with evidence, result, report', security: sec, request: { params: IdParam }, responses: { 200: json(Loose, 'Change'), ...errors } }),
    async (c) => {
      const v = await changes.getChange(c.req.valid('param').id);
      return v ? c.json(v as unknown as Record<string, unknown>, 200) : c.json({ error: 'no such change' }, 404);
    },
  );

  const patchHeaders = {
    'x-steward-change-status': z.string().openapi({ description: 'The change: running, done, failed, refused or cancelled' }),
    'x-steward-gate-verdict': z.string().openapi({ description: "The validation gate's verdict: pass, fail, or none (the gate has not run)" }),
    'x-steward-promoted': z.string().openapi({ description: 'true when the patch passed the gates and was promoted (patch artifact or draft PR)' }),
  };
  app.openapi(
    createRoute({
      method: 'get',
      path: '/api/v1/changes/{id}/patch',
      summary:
        "The change's patch (git apply-able), stored by content hash. A patch that was not promoted (the change was refused, failed, was cancelled or is still running) is served only with ?include=refused; the headers always say the change's status and gate verdict",
      security: sec,
      request: {
        params: IdParam,
        query: z.object({
          include: z.enum(['refused']).optional().openapi({ param: { name: 'include', in: 'query' }, description: 'refused: also serve a patch that was not promoted' }),
        }),
      },
      responses: {
        200: { content: { 'text/x-diff': { schema: z.string() } }, headers: z.object(patchHeaders), description: 'The patch (promoted, or asked for with ?include=refused)' },
        ...errors,
        409: { ...errors[409], headers: z.object(patchHeaders), description: 'The change was not promoted: ask with ?include=refused to get its patch anyway' },
      },
    }),
    async (c) => {
      const id = c.req.valid('param').id;
      const p = await changes.getPatch(id);
      if (!p) return c.json({ error: 'no patch for this change (no such change, or its agent has not produced one)' }, 404);
      const headers = { 'x-steward-change-status': p.status, 'x-steward-gate-verdict': p.verdict ?? 'none', 'x-steward-promoted': String(p.promoted) };
      if (!p.promoted && c.req.valid('query').include !== 'refused') {
        const why = [`status ${p.status}`, `gate verdict ${p.verdict ?? 'none'}${p.reasons.length ? ` (${p.reasons.join('; ')})` : ''}`, ...(p.error ? [p.error] : [])].join(', ');
        return c.json({ error: `change ${id} was not promoted (${why}): its patch is served only on request, with ?include=refused` }, 409, headers);
      }
      return c.body(p.patch, 200, { 'content-type': 'text/x-diff; charset=utf-8', etag: `"sha256-${p.hash}"`, 'x-content-sha256': p.hash, ...headers });
    },
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/api/v1/changes/{id}/answer',
      summary: "Answer the change's clarifying question: {\"text\"}",
      security: sec,
      request: { params: IdParam, ...anyJson },
      responses: { 200: json(z.object({ message: z.string() }), 'Accepted'), ...errors },
    }),
    async (c) => {
      const b = await body(c);
      if (!b.ok) return c.json({ error: 'malformed JSON in the request body' }, 400);
      try {
        return c.json({ message: await changes.answer(c.req.valid('param').id, b.value, by) }, 200);
      } catch (err) {
        const f = fail(err);
        return c.json({ error: f.error }, f.status);
      }
    },
  );
}
