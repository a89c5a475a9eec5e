/**
 * The HTTP API (a contract other tools rely on): messages in, transcript and status out,
 * health, and an OpenAPI description generated from the same zod schemas that validate
 * requests. Every rejected request is answered before anything reaches ingress.
 */
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { createRoute, OpenAPIHono, z } from '@hono/zod-openapi';
import { bodyLimit } from 'hono/body-limit';
import { HTTPException } from 'hono/http-exception';
import type { Context, MiddlewareHandler } from 'hono';
import type { Logger } from 'pino';
import { sessionWorkflowId } from '../../common/ids.js';
import { MAX_MESSAGE_CHARS } from '../../common/schemas.js';
import type { Ingress } from '../../services/chat/intake.js';
import { registerAdminRoutes, type AdminDeps } from './admin.js';
import { registerBudgetRoutes } from './budgets.js';
import { createBudgetService, type BudgetService } from '../../services/budgets.js';
import { AuthBackoff, backoffMessage, retryAfterSeconds } from './backoff.js';
import { bearerMatches, type BrowserSignIn } from './sign-in.js';
import { CHAT_EVENTS_PATH, registerChatEventRoutes, type ChatEventOptions } from './events.js';
import { registerChangeRoutes } from './changes.js';
import { registerObjectiveRoutes } from './objectives.js';
import { registerWorkspaceRoutes } from './workspaces.js';
import { registerMemoryRoutes } from './memories.js';
import { registerPolicyRoutes } from './policy.js';
import { registerHeartbeatRoutes } from './heartbeat.js';
import type { PartState } from '../../domain/heartbeat.js';
import type { WhatIfReport, WhatIfPolicy } from '../../domain/changes/what-if.js';
import { registerTaskRoutes } from './tasks.js';
import type { TaskService } from '../../services/tasks.js';
import { registerMcpRoutes } from './mcp.js';
import { registerForkRoutes } from './replays/fork.js';
import type { ForkService } from '../../services/replays/fork.js';
import { registerInboxRoutes } from './decisions.js';
import type { OperatorInbox } from '../../services/decisions.js';
import type { McpService } from '../../services/mcp.js';
import type { KnowledgeService } from '../../services/knowledge.js';
import type { WorkspaceService } from '../../services/workspaces.js';
import type { ObjectiveService } from '../../services/objectives.js';
import type { ChangeService } from '../../services/changes.js';
import { registerReplayRoutes } from './replays.js';
import type { ReplayService } from '../../services/replays.js';
import { ChatIdParam, TranscriptEntrySchema } from './common.js';

/** Largest request body accepted (bytes); larger bodies are refused while being read. */
export const MAX_BODY_BYTES = MAX_MESSAGE_CHARS * 4 + 4096;

const ErrorSchema = z
  .object({
    error: z.string(),
    issues: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
  })
  .openapi('Error');

const PostMessageBody = z
  .object({
    text: z
      .string()
      .min(1, 'text must not be empty')
      .max(MAX_MESSAGE_CHARS, `text is longer than ${MAX_MESSAGE_CHARS} characters`)
      .refine((t) => t.trim().length > 0, 'text must not be empty'),
    user: z.string().min(1).max(200).optional(),
  })
  .strict()
  .openapi('PostMessage');

const PostMessageResult = z
  .object({
    workflowId: z.string(),
    kind: z.enum(['message', 'command', 'rejected', 'ignored']),
    duplicate: z.boolean(),
    reply: z.string().optional(),
    reason: z.string().optional(),
    seq: z.number().int().optional(),
  })
  .openapi('PostMessageResult');

const TranscriptQuery = z.object({
  limit: z.coerce.number().int().min(1).max(1000).optional().openapi({ param: { name: 'limit', in: 'query' } }),
  after: z.coerce.number().int().min(0).optional().openapi({ param: { name: 'after', in: 'query' }, description: 'only entries after this seq' }),
});

const Transcript = z
  .object({
    messages: z.array(TranscriptEntrySchema),
  })
  .openapi('Transcript');

const Status = z
  .object({
    workflowId: z.string(),
    exists: z.boolean(),
    running: z
      .object({ turnId: z.string(), step: z.number(), phase: z.string(), startedAt: z.string(), tool: z.string().optional(), approvalId: z.string().optional() })
      .nullable(),
    queueLength: z.number(),
    model: z.string(),
    think: z.string(),
    tokens: z.object({ input: z.number(), output: z.number(), total: z.number() }),
    turns: z.number(),
  })
  .openapi('SessionStatus');

const Health = z.object({ ok: z.boolean(), checks: z.record(z.string(), z.string()) }).openapi('Health');

const errors = {
  400: { content: { 'application/json': { schema: ErrorSchema } }, description: 'Malformed or invalid request' },
  401: { content: { 'application/json': { schema: ErrorSchema } }, description: 'Missing or wrong bearer token' },
  429: { content: { 'application/json': { schema: ErrorSchema } }, description: 'Too many wrong credentials from this address: wait for Retry-After seconds' },
};

const postMessage = createRoute({
  method: 'post',
  path: '/api/v1/chats/{chatId}/messages',
  summary: 'Send a message (or a /command) to the chat session',
  security: [{ bearer: [] }],
  request: {
    params: ChatIdParam,
    headers: z.object({ 'idempotency-key': z.string().min(1).max(200).optional() }),
    body: { content: { 'application/json': { schema: PostMessageBody } }, required: true },
  },
  responses: {
    202: { content: { 'application/json': { schema: PostMessageResult } }, description: 'Accepted: queued for the session, or the command was handled' },
    ...errors,
    413: { content: { 'application/json': { schema: ErrorSchema } }, description: 'Body too large' },
    415: { content: { 'application/json': { schema: ErrorSchema } }, description: 'Not JSON' },
  },
});

const getMessages = createRoute({
  method: 'get',
  path: '/api/v1/chats/{chatId}/messages',
  summary: "The chat's transcript",
  security: [{ bearer: [] }],
  request: { params: ChatIdParam, query: TranscriptQuery },
  responses: { 200: { content: { 'application/json': { schema: Transcript } }, description: 'Transcript, oldest first' }, ...errors },
});

const getStatus = createRoute({
  method: 'get',
  path: '/api/v1/chats/{chatId}/status',
  summary: "The session's status (running turn and step, queue, model, tokens)",
  security: [{ bearer: [] }],
  request: { params: ChatIdParam },
  responses: { 200: { content: { 'application/json': { schema: Status } }, description: 'Status' }, ...errors },
});

const health = createRoute({
  method: 'get',
  path: '/healthz',
  summary: 'Health: ok once the worker polls and Temporal and the database answer',
  responses: {
    200: { content: { 'application/json': { schema: Health } }, description: 'Healthy' },
    503: { content: { 'application/json': { schema: Health } }, description: 'Not (yet) healthy' },
  },
});

export interface HttpDeps {
  ingress: Ingress;
  apiToken: string;
  health: () => Promise<{ ok: boolean; checks: Record<string, string> }>;
  log?: Logger;
  /** The account name HTTP chats belong to. */
  account?: string;
  /** The administration API (identities, bindings, pairing, approvals, budgets). */
  admin?: Omit<AdminDeps, 'ingress'>;
  /** Repositories and governed changes. */
  changes?: ChangeService;
  /** Objectives on Temporal Schedules. */
  objectives?: ObjectiveService;
  workspaces?: WorkspaceService;
  /** Skills and memories (/api/v1/skills, /api/v1/memories). */
  knowledge?: KnowledgeService;
  /** The heartbeat (/api/v1/heartbeat): each part's state and last success. */
  heartbeat?: { current(maxAgeMs?: number): Promise<PartState[]> };
  /** Policy what-if (/api/v1/policy/what-if): past decisions under a proposed policy. */
  policyWhatIf?: (r: { policy: WhatIfPolicy; since?: Date; repo?: string }) => Promise<WhatIfReport>;
  /** MCP servers (/api/v1/mcp/servers). */
  mcp?: McpService;
  /** Triage and tasks (/api/v1/tasks, /api/v1/bindings/{id}/triage). */
  tasks?: TaskService;
  /** The operator inbox (/api/v1/inbox): everything waiting for a decision, decided in place. */
  inbox?: OperatorInbox;
  /** Counterfactual replay (/api/v1/replays): past turns re-run under an alternative, effects answered from the record. */
  replays?: ReplayService;
  /** Budgets (/api/v1/budgets), with the admin API; absent: one over the admin API's database. */
  budgets?: BudgetService;
  /** Forks of chats (POST /api/v1/chats/{chatId}/fork). */
  forks?: ForkService;
  /** Prometheus metrics in text format, served on `GET /metrics` behind the API token. */
  metrics?: () => Promise<{ contentType: string; body: string }>;
  /** Middleware giving each API request a trace span (OpenTelemetry), when tracing is on. */
  tracing?: MiddlewareHandler;
  /**
   * Back-off on wrong credentials per client address (backoff.ts); share one with the codec
   * and OpenHarness routes mounted on this app. Default: one of its own with default settings.
   */
  backoff?: AuthBackoff;
  /** The browser sign-in: its cookie is accepted (besides the token) on the chat event stream, for the console. */
  signIn?: BrowserSignIn;
  /** Whether the request's console sign-in is a person with the admin role now (accepted on the chat event stream like the operator's). */
  consoleAdmin?: (c: Context) => Promise<boolean>;
  /** The chat event stream's settings (`GET /api/v1/chats/{id}/events`, events.ts). */
  chatEvents?: Omit<ChatEventOptions, 'ingress' | 'account'>;
}

export function createHttpApp(deps: HttpDeps) {
  const account = deps.account ?? 'default';
  const backoff = deps.backoff ?? new AuthBackoff({ db: deps.admin?.db, log: deps.log });
  /** The API token check, through the back-off: the refusal, or undefined when the request may go on. */
  const refuseToken = (c: Context): Response | undefined => {
    const client = backoff.client(c);
    const header = c.req.header('authorization');
    const ok = bearerMatches(header, deps.apiToken);
    const wait = backoff.waitMs(client, ok);
    if (wait > 0) return c.json({ error: backoffMessage(wait) }, 429, { 'retry-after': String(retryAfterSeconds(wait)) });
    if (!ok) {
      if (header) backoff.failure(client, 'api'); // no credential at all is not a guess
      return c.json({ error: 'missing or wrong bearer token' }, 401, { 'www-authenticate': 'Bearer' });
    }
    backoff.success(client);
    return undefined;
  };
  const app = new OpenAPIHono({
    defaultHook: (result, c) => {
      if (!result.success) {
        const issues = result.error.issues.map((i) => ({ path: i.path.join('.'), message: i.message }));
        return c.json({ error: `invalid request: ${issues.map((i) => `${i.path || '(body)'}: ${i.message}`).join('; ')}`, issues }, 400);
      }
      return undefined;
    },
  });

  app.onError((err, c) => {
    if (err instanceof HTTPException) {
      const status = err.status;
      const message = /malformed json/i.test(err.message) ? 'malformed JSON in the request body' : err.message;
      return c.json({ error: message }, status);
    }
    deps.log?.error({ err }, 'request failed');
    return c.json({ error: 'internal error' }, 500);
  });
  app.notFound((c) => c.json({ error: `no route for ${c.req.method} ${new URL(c.req.url).pathname}` }, 404));

  if (deps.tracing) {
    app.use('/api/v1/*', deps.tracing);
    app.use('/hooks/*', deps.tracing);
  }
  if (deps.metrics) {
    const metrics = deps.metrics;
    // Scrapers send the API token (Prometheus: `authorization: { credentials: <token> }`), or
    // scrape the unauthenticated listener of STEWARD_METRICS_PORT on an internal interface.
    app.get('/metrics', async (c) => {
      const refused = refuseToken(c);
      if (refused) return refused;
      const m = await metrics();
      return c.body(m.body, 200, { 'content-type': m.contentType });
    });
  }
  app.use('/api/v1/*', async (c, next) => {
    // the console reads the chat event stream with its sign-in cookie (a GET: it changes nothing)
    if (deps.signIn && c.req.method === 'GET' && CHAT_EVENTS_PATH.test(new URL(c.req.url).pathname) && !c.req.header('authorization')) {
      if (deps.signIn.signedIn(c) || (deps.consoleAdmin && (await deps.consoleAdmin(c)))) {
        await next();
        return undefined;
      }
    }
    const refused = refuseToken(c);
    if (refused) return refused;
    await next();
    return undefined;
  });
  app.post(
    '/api/v1/chats/:chatId/messages',
    bodyLimit({ maxSize: MAX_BODY_BYTES, onError: (c) => c.json({ error: `request body is larger than ${MAX_BODY_BYTES} bytes` }, 413) }),
    async (c, next) => {
      const type = c.req.header('content-type') ?? '';
      if (!/^application\/json\b/i.test(type)) return c.json({ error: 'expected Content-Type: application/json' }, 415);
      await next();
      return undefined;
    },
  );
  // Administration bodies are small; one with content must be JSON.
  app.on(['POST', 'PATCH'], ['/api/v1/identities/*', '/api/v1/identities', '/api/v1/bindings', '/api/v1/pairings/*', '/api/v1/approvals/*', '/api/v1/repos', '/api/v1/changes', '/api/v1/changes/*', '/api/v1/objectives', '/api/v1/objectives/*', '/api/v1/inbox/*', '/api/v1/chats/:chatId/fork', '/api/v1/replays', '/api/v1/replays/*'], bodyLimit({ maxSize: 64 * 1024, onError: (c) => c.json({ error: 'request body is larger than 65536 bytes' }, 413) }), async (c, next) => {
    const length = Number(c.req.header('content-length') ?? '0');
    const type = c.req.header('content-type') ?? '';
    if ((length > 0 || c.req.header('transfer-encoding')) && !/^application\/json\b/i.test(type)) return c.json({ error: 'expected Content-Type: application/json' }, 415);
    await next();
    return undefined;
  });
  registerChatEventRoutes(app, { ...deps.chatEvents, ingress: deps.ingress, account, ...(deps.log ? { log: deps.log } : {}) });
  if (deps.admin) registerAdminRoutes(app, { ...deps.admin, ingress: deps.ingress });
  if (deps.admin) registerBudgetRoutes(app, deps.budgets ?? createBudgetService(deps.admin.db));
  if (deps.changes) registerChangeRoutes(app, deps.changes);
  if (deps.workspaces) registerWorkspaceRoutes(app, deps.workspaces);
  if (deps.knowledge) registerMemoryRoutes(app, deps.knowledge);
  if (deps.policyWhatIf) registerPolicyRoutes(app, deps.policyWhatIf);
  if (deps.heartbeat) registerHeartbeatRoutes(app, deps.heartbeat);
  if (deps.tasks) registerTaskRoutes(app, deps.tasks);
  if (deps.mcp) registerMcpRoutes(app, deps.mcp);
  if (deps.inbox) registerInboxRoutes(app, deps.inbox);
  if (deps.forks) registerForkRoutes(app, deps.forks);
  if (deps.replays) registerReplayRoutes(app, deps.replays);
  if (deps.objectives) {
    registerObjectiveRoutes(app, deps.objectives);
    const objectives = deps.objectives;
    // Event triggers: signed by the objective's shared secret instead of the API token. A
    // wrong signature (the service's 401) counts as a wrong credential of the sender's address.
    app.post(
      '/hooks/objectives/:name',
      bodyLimit({ maxSize: 256 * 1024, onError: (c) => c.json({ error: 'request body is larger than 262144 bytes' }, 413) }),
      async (c) => {
        const name = c.req.param('name');
        if (!/^[a-z0-9][a-z0-9_-]{0,63}$/.test(name)) return c.json({ error: 'no objective takes events under this name' }, 404);
        const client = backoff.client(c);
        const wait = backoff.waitMs(client);
        if (wait > 0) return c.json({ error: backoffMessage(wait) }, 429, { 'retry-after': String(retryAfterSeconds(wait)) });
        const r = await objectives.receiveEvent(name, await c.req.text(), (h) => c.req.header(h));
        // a wrong signature is a guess; a call that presents none is not counted (as on the other surfaces)
        const signed = c.req.header('x-steward-signature') !== undefined || c.req.header('x-hub-signature-256') !== undefined;
        if ('error' in r && r.status === 401 && signed) backoff.failure(client, 'webhook');
        return 'error' in r ? c.json({ error: r.error }, r.status) : c.json({ runId: r.runId, duplicate: r.duplicate }, r.status);
      },
    );
  }

  app.openapi(postMessage, async (c) => {
    const { chatId } = c.req.valid('param');
    const body = c.req.valid('json');
    const idem = c.req.valid('header')['idempotency-key'];
    const result = await deps.ingress.handle({
      id: idem ?? randomUUID(),
      platform: 'http',
      account,
      chatId,
      user: body.user ?? 'api',
      text: body.text,
      at: new Date().toISOString(),
    });
    return c.json(result, 202);
  });

  app.openapi(getMessages, async (c) => {
    const { chatId } = c.req.valid('param');
    const q = c.req.valid('query');
    const sessionId = sessionWorkflowId({ platform: 'http', account, chatId });
    const messages = await deps.ingress.transcript(sessionId, {
      ...(q.limit !== undefined ? { limit: q.limit } : {}),
      ...(q.after !== undefined ? { afterSeq: q.after } : {}),
    });
    return c.json({ messages }, 200);
  });

  app.openapi(getStatus, async (c) => {
    const { chatId } = c.req.valid('param');
    return c.json(await deps.ingress.status(sessionWorkflowId({ platform: 'http', account, chatId })), 200);
  });

  app.openapi(health, async (c) => {
    const h = await deps.health();
    return c.json(h, h.ok ? 200 : 503);
  });

  app.openAPIRegistry.registerComponent('securitySchemes', 'bearer', { type: 'http', scheme: 'bearer' });
  app.doc31('/api/openapi.json', {
    openapi: '3.1.0',
    info: { title: 'Steward API', version: '1.0.0', description: 'Send messages to agent sessions and read their transcripts.' },
  });
  return app;
}

export async function startHttpServer(app: { fetch: (req: Request) => Response | Promise<Response> }, opts: { host: string; port: number }): Promise<{ url: string; close(): Promise<void> }> {
  return new Promise((resolve, reject) => {
    const server = serve({ fetch: app.fetch, hostname: opts.host, port: opts.port }, (info: AddressInfo) => {
      const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
      resolve({
        url: `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${info.port}`,
        close: () =>
          new Promise<void>((res) => {
            const s = server as unknown as { closeAllConnections?: () => void; close(cb: () => void): void };
            s.close(() => res());
            s.closeAllConnections?.();
          }),
      });
    });
    server.once('error', reject);
  });
}
