/**
 * What-if over HTTP (bearer token = the operator): POST /api/v1/policy/what-if
 * {"policy": {"repoPolicy"?, "approvalTools"?}, "since"?: ISO time, "repo"?: name} -> 200 with
 * the report (past repository changes and tool calls whose decision the proposed policy would
 * change, with the reasons under both). Reads only; writes nothing.
 */
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { errorResponses, json } from './common.js';
import { WhatIfPolicySchema, type WhatIfReport } from '../../services/changes.js';

const errors = errorResponses('PolicyError');
const Loose = z.record(z.string(), z.unknown());
const WhatIfBody = z.strictObject({
  policy: WhatIfPolicySchema,
  since: z.iso.datetime({ offset: true, error: 'since: an ISO time such as 2026-11-01T00:00:00Z' }).optional(),
  repo: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, 'repo: a registered repository name').optional(),
});
export type WhatIfRequest = z.infer<typeof WhatIfBody>;

export function registerPolicyRoutes(app: OpenAPIHono, whatIf: (r: { policy: WhatIfRequest['policy']; since?: Date; repo?: string }) => Promise<WhatIfReport>): void {
  app.openapi(
    createRoute({
      method: 'post',
      path: '/api/v1/policy/what-if',
      summary: 'Past decisions under the policy in force and a proposed one (repoPolicy: the gate over recorded changes; approvalTools: past tool calls); writes nothing',
      security: [{ bearer: [] }],
      request: { body: { content: { 'application/json': { schema: z.unknown().openapi({ type: 'object' }) } }, required: true } },
      responses: { 200: json(Loose, 'The report'), ...errors },
    }),
    async (c) => {
      let raw: unknown;
      try {
        raw = JSON.parse(await c.req.text());
      } catch {
        return c.json({ error: 'malformed JSON in the request body' }, 400) as never;
      }
      const r = WhatIfBody.safeParse(raw);
      if (!r.success) return c.json({ error: r.error.issues.map((i) => `${i.path.join('.') || '(body)'}: ${i.message}`).join('; ') }, 400) as never;
      const report = await whatIf({ policy: r.data.policy, ...(r.data.since ? { since: new Date(r.data.since) } : {}), ...(r.data.repo ? { repo: r.data.repo } : {}) });
      return c.json(report as unknown as Record<string, unknown>, 200) as never;
    },
  );
}
