/**
 * The operator's administration API (bearer token = the operator): identities and roles,
 * chat bindings, pairing requests and action approvals. Identities and bindings go through
 * the administration service (services/admin.ts), as the CLI's `steward identities` and
 * `bindings` do, and that service writes their receipts; `steward pairing` and `approvals`
 * call these routes. Every request body is validated with zod before anything changes.
 */
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { errorResponses, json } from './common.js';
import type { Db } from '../../domain/db.js';
import type { ApprovalRecord, BindingRow, IdentityRow } from '../../domain/governance.js';
import { OPERATOR } from '../../common/roles.js';
import { createAdminService, type AdminService } from '../../services/admin.js';
import { ServiceInputError } from '../../services/requests.js';
import { ROLES, RoleSchema } from '../../common/roles.js';
import { ChatIdSchema, ModelRefSchema } from '../../common/schemas.js';
import type { Ingress } from '../../services/chat/intake.js';

const errors = errorResponses('AdminError');
/** The bearer token (the operator) every admin route asks for. */
const sec = [{ bearer: [] }];
const body = <T extends z.ZodType>(schema: T) => ({ body: { content: { 'application/json': { schema } }, required: true } });

const GovernedPlatform = z.enum(['telegram', 'discord', 'openharness']);
const UserId = ChatIdSchema;

const AccountBody = z.object({ platform: GovernedPlatform, userId: UserId, displayName: z.string().max(200).optional() }).strict();
const IdentityView = z
  .object({
    id: z.string(),
    name: z.string(),
    role: z.enum(ROLES),
    createdAt: z.string(),
    accounts: z.array(z.object({ platform: z.string(), userId: z.string(), displayName: z.string().nullable(), dmChatId: z.string().nullable() })),
  })
  .openapi('Identity');
const NewIdentityBody = z
  .object({ name: z.string().trim().min(1).max(200), role: RoleSchema, accounts: z.array(AccountBody).min(1).max(10) })
  .strict()
  .openapi('NewIdentity');
const PatchIdentityBody = z
  .object({ name: z.string().trim().min(1).max(200).optional(), role: RoleSchema.optional() })
  .strict()
  .refine((b) => b.name !== undefined || b.role !== undefined, 'nothing to change: give name and/or role');

const BindingView = z
  .object({
    id: z.string(),
    platform: z.string(),
    account: z.string(),
    chatId: z.string(),
    name: z.string().nullable(),
    mode: z.enum(['mention', 'all']),
    model: z.string().nullable(),
    adminChannel: z.boolean(),
    createdAt: z.string(),
  })
  .openapi('Binding');
const NewBindingBody = z
  .object({
    platform: GovernedPlatform,
    account: z.union([ChatIdSchema, z.literal('*')]).default('*'),
    chatId: ChatIdSchema,
    mode: z.enum(['mention', 'all']).optional(),
    name: z.string().regex(/^[a-z0-9][a-z0-9_-]{0,31}$/, 'a name uses lowercase letters, digits, - and _ (up to 32)').optional(),
    model: ModelRefSchema.optional(),
    adminChannel: z.boolean().optional(),
  })
  .strict()
  .openapi('NewBinding');

const PairingView = z
  .object({ id: z.string(), platform: z.string(), userId: z.string(), displayName: z.string(), status: z.string(), expiresAt: z.string(), createdAt: z.string() })
  .openapi('Pairing');
const ApprovalView = z
  .object({
    id: z.string(),
    workflowId: z.string(),
    sessionId: z.string(),
    tool: z.string(),
    summary: z.string(),
    payload: z.unknown(),
    risk: z.string(),
    status: z.string(),
    requestedBy: z.string().nullable(),
    decidedBy: z.string().nullable(),
    reason: z.string().nullable(),
    deadline: z.string(),
    createdAt: z.string(),
  })
  .openapi('Approval');
const Decision = z.object({ applied: z.boolean(), message: z.string() }).openapi('Decision');
const Code = z.object({ code: z.string().regex(/^[A-Za-z0-9-]{4,16}$/).openapi({ param: { name: 'code', in: 'path' } }) });
const IdParam = z.object({ id: z.string().min(1).max(64).openapi({ param: { name: 'id', in: 'path' } }) });

function identityView(i: IdentityRow) {
  const role = RoleSchema.safeParse(i.role);
  return {
    id: i.id,
    name: i.name,
    role: role.success ? role.data : ('viewer' as const),
    createdAt: i.createdAt.toISOString(),
    accounts: i.accounts.map((a) => ({ platform: a.platform, userId: a.userId, displayName: a.displayName, dmChatId: a.dmChatId })),
  };
}

function bindingView(b: BindingRow) {
  return { ...b, mode: b.mode === 'all' ? ('all' as const) : ('mention' as const), createdAt: b.createdAt.toISOString() };
}

function approvalView(a: ApprovalRecord) {
  let payload: unknown = a.payload;
  try {
    payload = JSON.parse(a.payload);
  } catch {
    // keep the text
  }
  return {
    id: a.id,
    workflowId: a.workflowId,
    sessionId: a.sessionId,
    tool: a.tool,
    summary: a.summary,
    payload,
    risk: a.risk,
    status: a.status,
    requestedBy: a.requestedBy,
    decidedBy: a.decidedBy,
    reason: a.reason,
    deadline: a.deadline.toISOString(),
    createdAt: a.createdAt.toISOString(),
  };
}

export interface AdminDeps {
  db: Db;
  ingress: Ingress;
}

/** Register the administration routes (identities, bindings, pairings, approvals, in this order). */
export function registerAdminRoutes(app: OpenAPIHono, deps: AdminDeps): void {
  const admin = createAdminService(deps.db);
  registerIdentityRoutes(app, admin);
  registerBindingRoutes(app, admin);
  registerPairingRoutes(app, admin, deps.ingress);
  registerApprovalRoutes(app, admin, deps.ingress);
}

/** GET/POST /api/v1/identities, PATCH/DELETE /api/v1/identities/{id}: people and their roles. */
function registerIdentityRoutes(app: OpenAPIHono, admin: AdminService): void {
  app.openapi(
    createRoute({ method: 'get', path: '/api/v1/identities', summary: 'People Steward knows, with their roles and platform accounts', security: sec, responses: { 200: json(z.object({ identities: z.array(IdentityView) }), 'Identities'), ...errors } }),
    async (c) => {
      const rows = await admin.listIdentities();
      return c.json({ identities: rows.map(identityView) }, 200);
    },
  );

  app.openapi(
    createRoute({ method: 'post', path: '/api/v1/identities', summary: 'Add a person with a role and their platform accounts (e.g. the first overlord)', security: sec, request: body(NewIdentityBody), responses: { 201: json(IdentityView, 'Created'), ...errors } }),
    async (c) => {
      const b = c.req.valid('json');
      try {
        const { id } = await admin.addIdentity(OPERATOR, { name: b.name, role: b.role, accounts: b.accounts });
        const row = await admin.findIdentity(id);
        if (!row) throw new Error(`identity ${id} is gone right after it was created`);
        return c.json(identityView(row), 201);
      } catch (err) {
        if (err instanceof ServiceInputError && err.status === 409) return c.json({ error: err.message }, 409);
        throw err;
      }
    },
  );

  app.openapi(
    createRoute({ method: 'patch', path: '/api/v1/identities/{id}', summary: "Change a person's name or role", security: sec, request: { params: IdParam, ...body(PatchIdentityBody) }, responses: { 200: json(IdentityView, 'Changed'), ...errors } }),
    async (c) => {
      const { id } = c.req.valid('param');
      const b = c.req.valid('json');
      const r = await admin.changeIdentity(OPERATOR, id, { ...(b.name ? { name: b.name } : {}), ...(b.role ? { role: b.role } : {}) });
      if (!r) return c.json({ error: `no identity ${id}` }, 404);
      return c.json(identityView(r.after), 200);
    },
  );

  app.openapi(
    createRoute({ method: 'delete', path: '/api/v1/identities/{id}', summary: 'Forget a person (their platform accounts become unknown senders)', security: sec, request: { params: IdParam }, responses: { 200: json(z.object({ deleted: z.boolean() }), 'Deleted'), ...errors } }),
    async (c) => {
      const { id } = c.req.valid('param');
      if (!(await admin.removeIdentity(OPERATOR, id))) return c.json({ error: `no identity ${id}` }, 404);
      return c.json({ deleted: true }, 200);
    },
  );
}

/** GET/POST /api/v1/bindings, DELETE /api/v1/bindings/{id}: the chats Steward answers in. */
function registerBindingRoutes(app: OpenAPIHono, admin: AdminService): void {
  app.openapi(
    createRoute({ method: 'get', path: '/api/v1/bindings', summary: 'Chats Steward answers in', security: sec, responses: { 200: json(z.object({ bindings: z.array(BindingView) }), 'Bindings'), ...errors } }),
    async (c) => {
      const rows = await admin.listBindings();
      return c.json({ bindings: rows.map(bindingView) }, 200);
    },
  );

  app.openapi(
    createRoute({ method: 'post', path: '/api/v1/bindings', summary: 'Bind a chat (or change its binding)', security: sec, request: body(NewBindingBody), responses: { 201: json(BindingView, 'Bound'), ...errors } }),
    async (c) => {
      const b = c.req.valid('json');
      try {
        const r = await admin.bind(OPERATOR, {
          platform: b.platform,
          account: b.account,
          chatId: b.chatId,
          ...(b.mode ? { mode: b.mode } : {}),
          ...(b.name ? { name: b.name } : {}),
          ...(b.model ? { model: b.model } : {}),
          ...(b.adminChannel !== undefined ? { adminChannel: b.adminChannel } : {}),
        });
        const row = await admin.findBinding(r.id);
        if (!row) throw new Error(`binding ${r.id} is gone right after it was made`);
        return c.json(bindingView(row), 201);
      } catch (err) {
        if (err instanceof ServiceInputError && err.status === 409) return c.json({ error: err.message }, 409);
        throw err;
      }
    },
  );

  app.openapi(
    createRoute({ method: 'delete', path: '/api/v1/bindings/{id}', summary: 'Remove a binding', security: sec, request: { params: IdParam }, responses: { 200: json(z.object({ deleted: z.boolean() }), 'Removed'), ...errors } }),
    async (c) => {
      const { id } = c.req.valid('param');
      if (!(await admin.unbind(OPERATOR, id))) return c.json({ error: `no binding ${id}` }, 404);
      return c.json({ deleted: true }, 200);
    },
  );
}

/** Decide a pairing code as the operator (the requester is told): the status and body to answer with. */
async function decidePairingAsOperator(ingress: Ingress, code: string, decision: { approve: (typeof ROLES)[number] } | 'deny') {
  const r = await ingress.decidePairing(code, decision, OPERATOR);
  if (!r.ok) return { status: r.reason === 'unknown' ? (404 as const) : (409 as const), body: { error: r.message } };
  return {
    status: 200 as const,
    body: { applied: true, message: `${r.pairing.displayName} (${r.pairing.platform} user ${r.pairing.userId}): ${r.pairing.status}${r.pairing.role ? ` as ${r.pairing.role}` : ''}` },
  };
}

/** GET /api/v1/pairings, POST /api/v1/pairings/{code}/approve|deny: pairing requests. */
function registerPairingRoutes(app: OpenAPIHono, admin: AdminService, ingress: Ingress): void {
  app.openapi(
    createRoute({ method: 'get', path: '/api/v1/pairings', summary: 'Pending pairing requests (codes are never shown: the requester has theirs)', security: sec, responses: { 200: json(z.object({ pairings: z.array(PairingView) }), 'Pending'), ...errors } }),
    async (c) => {
      const rows = await admin.pendingPairings();
      return c.json(
        { pairings: rows.map((p) => ({ id: p.id, platform: p.platform, userId: p.userId, displayName: p.displayName, status: p.status, expiresAt: p.expiresAt.toISOString(), createdAt: p.createdAt.toISOString() })) },
        200,
      );
    },
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/api/v1/pairings/{code}/approve',
      summary: 'Approve a pairing code with a role (the requester is told)',
      security: sec,
      request: { params: Code, ...body(z.object({ role: RoleSchema }).strict()) },
      responses: { 200: json(Decision, 'Decided'), ...errors },
    }),
    async (c) => {
      const r = await decidePairingAsOperator(ingress, c.req.valid('param').code, { approve: c.req.valid('json').role });
      return r.status === 200 ? c.json(r.body, 200) : c.json(r.body, r.status);
    },
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/api/v1/pairings/{code}/deny',
      summary: 'Deny a pairing code (the requester is told)',
      security: sec,
      request: { params: Code, body: { content: { 'application/json': { schema: { type: 'object' as const } } }, required: false, description: 'Optional: no options. An empty body (with or without Content-Type: application/json) means no options.' } },
      responses: { 200: json(Decision, 'Decided'), ...errors },
    }),
    async (c) => {
      const r = await decidePairingAsOperator(ingress, c.req.valid('param').code, 'deny');
      return r.status === 200 ? c.json(r.body, 200) : c.json(r.body, r.status);
    },
  );
}

/** GET /api/v1/approvals, POST /api/v1/approvals/{id}/approve|deny: actions agents proposed. */
function registerApprovalRoutes(app: OpenAPIHono, admin: AdminService, ingress: Ingress): void {
  app.openapi(
    createRoute({
      method: 'get',
      path: '/api/v1/approvals',
      summary: 'Actions agents proposed (pending first by default)',
      security: sec,
      request: { query: z.object({ status: z.enum(['pending', 'approved', 'denied', 'expired', 'cancelled']).optional().openapi({ param: { name: 'status', in: 'query' } }) }) },
      responses: { 200: json(z.object({ approvals: z.array(ApprovalView) }), 'Approvals'), ...errors },
    }),
    async (c) => {
      const { status } = c.req.valid('query');
      const rows = await admin.listApprovals(status ? { status } : {});
      return c.json({ approvals: rows.map(approvalView) }, 200);
    },
  );

  for (const action of ['approve', 'deny'] as const) {
    app.openapi(
      createRoute({
        method: 'post',
        path: `/api/v1/approvals/{id}/${action}`,
        summary: action === 'approve' ? 'Approve a waiting action (accepted once)' : 'Deny a waiting action (accepted once)',
        security: sec,
        request: {
          params: IdParam,
          // read by the handler itself (a plain schema: no validator parses the body first)
          body: {
            content: { 'application/json': { schema: action === 'deny' ? { type: 'object' as const, properties: { reason: { type: 'string' as const, minLength: 1, maxLength: 500 } }, additionalProperties: false } : { type: 'object' as const } } },
            required: false,
            description: `Optional${action === 'deny' ? ': {"reason"?}' : ': no options'}. An empty body (with or without Content-Type: application/json) means no options.`,
          },
        },
        responses: { 200: json(Decision, 'Applied'), ...errors },
      }),
      async (c) => {
        const { id } = c.req.valid('param');
        let reason: string | undefined;
        if (action === 'deny') {
          const raw = await c.req.text();
          if (raw.trim()) {
            let parsedJson: unknown;
            try {
              parsedJson = JSON.parse(raw);
            } catch {
              return c.json({ error: 'malformed JSON in the request body' }, 400);
            }
            const parsed = z.object({ reason: z.string().trim().min(1).max(500).optional() }).strict().safeParse(parsedJson);
            if (!parsed.success) return c.json({ error: `invalid request: ${parsed.error.issues[0]?.message ?? 'expected {"reason": string}'}` }, 400);
            reason = parsed.data.reason;
          }
        }
        const r = await ingress.decideApproval(id, action, OPERATOR, reason);
        if (!r.applied) return c.json({ error: r.reply }, /No approval has the id/.test(r.reply) ? 404 : 409);
        return c.json({ applied: true, message: r.reply }, 200);
      },
    );
  }
}
