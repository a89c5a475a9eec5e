/**
 * Budgets over HTTP (bearer token = the operator): GET /api/v1/budgets (each with its current
 * period's usage), PUT /api/v1/budgets/{id} (define or change one: the whole definition),
 * DELETE /api/v1/budgets/{id}, POST /api/v1/budgets/{id}/raise (raise it for its current period
 * by tokens and/or USD: the operator is an admin). Through the budget service (services/budgets.ts), as
 * `steward budgets` is, which checks the definition with the budget's zod schema (a bad field:
 * 400, nothing changed) and writes the `budget.change` receipts. An id with `/` goes
 * percent-encoded (`%2F`).
 */
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { bodyLimit } from 'hono/body-limit';
import { answer, errorResponses, json, parsedJsonBody, reply } from './common.js';
import { OPERATOR } from '../../common/roles.js';
import type { BudgetService } from '../../services/budgets.js';
import { ServiceInputError } from '../../services/requests.js';

const errors = errorResponses('BudgetError');
const sec = [{ bearer: [] }];

const Amount = z.object({ tokens: z.number(), money: z.number() });
const BudgetView = z
  .object({
    id: z.string(),
    scope: z.enum(['installation', 'chat', 'person', 'objective', 'workspace', 'repository']),
    scopeId: z.string().nullable(),
    tokens: z.number().nullable().openapi({ description: 'tokens per period; null: not limited' }),
    money: z.number().nullable().openapi({ description: 'USD per period; null: not limited' }),
    period: z.enum(['day', 'week', 'month', 'none', 'window']),
    timezone: z.string(),
    windowSeconds: z.number().nullable(),
    source: z.string().openapi({ description: 'env (STEWARD_TOKEN_BUDGET), file, api, cli' }),
    usage: z.object({
      period: z.string(),
      periodStart: z.string(),
      renewsAt: z.string().nullable(),
      renews: z.string().nullable().openapi({ description: "the renewal on the budget's wall clock" }),
      used: Amount,
      reserved: Amount.openapi({ description: 'held by calls not settled yet' }),
      raised: Amount.openapi({ description: 'what admins raised this period by (it ends with the period)' }),
      left: z.object({ tokens: z.number().nullable(), money: z.number().nullable() }),
    }),
  })
  .openapi('Budget');

/** The definition's body, for the OpenAPI document only: the service checks it with the budget's schema (domain/budgets/definitions.ts). */
const DefinitionBody = {
  type: 'object' as const,
  required: ['scope'],
  additionalProperties: false,
  properties: {
    scope: { type: 'string' as const, enum: ['installation', 'chat', 'person', 'objective', 'workspace', 'repository'] },
    scopeId: { type: 'string' as const, description: 'the binding, identity, objective, workspace or repository id; none for the installation' },
    tokens: { type: 'integer' as const, minimum: 1, description: 'tokens per period' },
    money: { type: 'number' as const, exclusiveMinimum: 0, description: 'USD per period' },
    period: { type: 'string' as const, enum: ['day', 'week', 'month', 'none'], default: 'none' },
    timezone: { type: 'string' as const, default: 'UTC', description: 'an IANA time zone' },
  },
};
/** A raise's body, for the OpenAPI document only: the service checks it (services/budgets.ts `raise`). */
const RaiseBody = {
  type: 'object' as const,
  additionalProperties: false,
  minProperties: 1,
  properties: {
    tokens: { type: 'integer' as const, minimum: 1, description: 'tokens added to the current period' },
    money: { type: 'number' as const, exclusiveMinimum: 0, description: 'USD added to the current period' },
    periodStart: { type: 'string' as const, format: 'date-time', description: "the period meant (usage.periodStart): refused (409) when the budget has renewed since" },
  },
};
const RaiseResult = z
  .object({
    budget: BudgetView,
    raise: z.object({ tokens: z.number().nullable(), money: z.number().nullable() }),
    raisedInPeriod: Amount.openapi({ description: "the current period's raise in total" }),
    woken: z.number().nullable().openapi({ description: 'waiting turns woken (null: none could be)' }),
    message: z.string(),
  })
  .openapi('BudgetRaise');
const IdParam = z.object({ id: z.string().min(1).max(200).openapi({ param: { name: 'id', in: 'path' } }) });

export function registerBudgetRoutes(app: OpenAPIHono, budgets: BudgetService): void {
  // a definition is small, and JSON
  app.on(['PUT', 'POST'], '/api/v1/budgets/*', bodyLimit({ maxSize: 64 * 1024, onError: (c) => c.json({ error: 'request body is larger than 65536 bytes' }, 413) }), async (c, next) => {
    if (!/^application\/json\b/i.test(c.req.header('content-type') ?? '')) return c.json({ error: 'expected Content-Type: application/json' }, 415);
    await next();
    return undefined;
  });
  app.openapi(
    createRoute({ method: 'get', path: '/api/v1/budgets', summary: "Budgets, each with its current period's usage (used, reserved, left, when it renews)", security: sec, responses: { 200: json(z.object({ budgets: z.array(BudgetView) }), 'Budgets'), ...errors } }),
    async (c) => c.json({ budgets: await budgets.list() }, 200),
  );

  app.openapi(
    createRoute({
      method: 'put',
      path: '/api/v1/budgets/{id}',
      summary: 'Define a budget or change it (the whole definition); a bad field changes nothing',
      security: sec,
      request: { params: IdParam, body: { content: { 'application/json': { schema: DefinitionBody } }, required: true } },
      responses: { 200: json(BudgetView, 'Changed'), 201: json(BudgetView, 'Defined'), ...errors },
    }),
    async (c) => {
      const { id } = c.req.valid('param');
      const r = await answer(async () => budgets.set(OPERATOR, id, await parsedJsonBody(c), 'api'));
      return (r.ok ? c.json(r.value.budget, r.value.created ? 201 : 200) : reply(c, r)) as never;
    },
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/api/v1/budgets/{id}/raise',
      summary: 'Raise a budget for its current period (tokens and/or USD; it ends with the period); a bad field changes nothing',
      security: sec,
      request: { params: IdParam, body: { content: { 'application/json': { schema: RaiseBody } }, required: true } },
      responses: { 200: json(RaiseResult, 'Raised'), ...errors },
    }),
    async (c) => {
      const { id } = c.req.valid('param');
      const r = await answer(async () => {
        const body = await parsedJsonBody(c);
        if (body === null || typeof body !== 'object' || Array.isArray(body)) throw new ServiceInputError('Raise refused (nothing changed): expected an object {"tokens"?, "money"?}.');
        if ('budgetId' in body || 'by' in body || 'once' in body) throw new ServiceInputError('Raise refused (nothing changed): the body gives tokens, money and periodStart only.');
        return budgets.raise({ ...(body as { tokens?: number; money?: number; periodStart?: string }), budgetId: id, by: OPERATOR });
      });
      return reply(c, r) as never;
    },
  );

  app.openapi(
    createRoute({ method: 'delete', path: '/api/v1/budgets/{id}', summary: 'Remove a budget and its usage', security: sec, request: { params: IdParam }, responses: { 200: json(z.object({ deleted: z.boolean() }), 'Removed'), ...errors } }),
    async (c) => {
      const { id } = c.req.valid('param');
      const r = await answer(() => budgets.remove(OPERATOR, id));
      if (r.ok && !r.value) return c.json({ error: `no budget ${id}` }, 404) as never;
      return (r.ok ? c.json({ deleted: true }, 200) : reply(c, r)) as never;
    },
  );
}
