/**
 * Steward as an OpenHarness v1 Harness Engine: `POST /api/openharness/v1`.
 *
 * A shell authenticates with `Authorization: Bearer <token>` (a shell token from
 * shells.ts, or the operator's STEWARD_API_TOKEN, which acts as the operator); no secret is
 * ever read from the body. A request carrying `context.user_intent` is one inbound message
 * of the conversation named by `context.session_id` (+ `conversation_id`) of that shell; its
 * `request_id` is the idempotency key, so a retried request never starts a second turn and
 * gets the same answer. The answer comes back in the same response when the turn finishes
 * within `waitMs`; otherwise the response carries a continuation (`response.continuation`)
 * and the shell resumes with `context.continuation.continuation_token` (a long poll; resuming
 * is idempotent: it returns the whole answer so far each time). A request with both a
 * user_intent and a continuation token is a new message (the token is not used). A turn
 * waiting for an admin's approval answers with a `request_approval` directive.
 *
 * Which messages answer a request: the assistant and system messages after the inbound
 * message, up to the final message of the turn that took it. Messages of a turn that had
 * already started when the message arrived (it answers earlier messages) and the answers to
 * other requests' commands are left out.
 *
 * Forward compatibility: unknown fields at any level are ignored (zod loose objects); known
 * fields of the wrong type are refused with `invalid_request` before anything is recorded.
 *
 * Error codes (`response.error.code`; every answer, errors included, is a schema-valid
 * OpenHarness response envelope):
 *
 * | code                         | HTTP | retryable | when                                                                      |
 * |------------------------------|------|-----------|---------------------------------------------------------------------------|
 * | invalid_request              | 400  | false     | malformed JSON, not an object, no `request`, a known field of the wrong   |
 * |                              | 413  |           | type, an empty user_intent, neither user_intent nor a continuation token, |
 * |                              | 415  |           | a request_id reused for another text; 413 body too large; 415 not JSON;   |
 * |                              | 405  |           | 405 a method other than POST. Nothing is recorded.                        |
 * | unauthorized                 | 401  | false     | missing, unknown or revoked bearer token                                 |
 * | rate_limited                 | 429  | true      | too many wrong bearer tokens from this address (adapters/http/backoff.ts):|
 * |                              |      |           | `Retry-After` and details.retry_after_seconds say when to try again; the  |
 * |                              |      |           | operator's token from loopback is never refused this way                  |
 * | protocol_version_unsupported | 400  | false     | protocol_version has a major other than 1 (details list what is served)   |
 * | forbidden                    | 200  | false     | ingress refused the sender: its role may not do this (a viewer talking,   |
 * |                              |      |           | a member's admin command), or the shell's identity is gone                |
 * | rate_limited                 | 200  | true      | the role's turn rate limit is used up (the message says when to retry)    |
 * | continuation_invalid         | 200  | false     | unknown, malformed or expired continuation token, or another shell's     |
 * | internal_error               | 500  | true      | an unexpected failure (Temporal or the database unreachable)              |
 * | engine_timeout               |  -   |     -     | never sent: a slow turn is answered with a continuation, not an error     |
 *
 * Directives: `render_message` (payload `text`, `message`, `fallback_message`, Markdown),
 * `request_approval` (`requires_user_approval: true`, `risk_tier`, `deadline_ms`, payload
 * with the approval id, summary, redacted proposed input and the commands that decide it),
 * `noop` (payload text `still working`, with the continuation).
 *
 * What is recorded and read (the message handed to ingress, the answer read from the
 * transcript, continuations) is the OpenHarness service's (services/openharness.ts); shell tokens
 * are services/shells.ts. This module parses and answers the protocol: authentication, the
 * envelope, capabilities, directives and the HTTP status of each error.
 *
 * Privacy: the text of a request or reply is never logged, except an intent at debug level
 * when the shell marks `environment_state.privacy_tier: 'public'`; a `secret` request logs
 * ids only (not even error messages).
 */
import { createHash } from 'node:crypto';
import type { EventEmitter } from 'node:events';
import { Hono, type Context } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { Db } from '../../domain/db.js';
import { AttachmentRefSchema, MAX_MESSAGE_CHARS } from '../../common/schemas.js';
import {
  createOpenHarnessService,
  OpenHarnessRefusal,
  type AnswerPart,
  type Continuation,
  type OpenHarnessService,
  type Outcome,
  type PendingApproval,
  type RefusalReason,
  type ShellPrincipal,
  type TranscriptRow,
} from '../../services/openharness.js';
import { verifyShellToken } from '../../services/shells.js';
import { AuthBackoff, retryAfterSeconds } from '../http/backoff.js';
import { sameSecret } from '../http/sign-in.js';
import { OPERATOR_USER_ID, type Ingress } from '../../services/chat/intake.js';

export const OPENHARNESS_PATH = '/api/openharness/v1';
/** The highest protocol version served (answered in every response). */
export const PROTOCOL_VERSION = '1.0.0';
export const SUPPORTED_PROTOCOL_VERSIONS: readonly string[] = [PROTOCOL_VERSION];
/** The shell id (and chat account) of requests authenticated with the operator's token. */
export const OPERATOR_SHELL_ID = 'operator';
/** Largest request body (bytes): a message of MAX_MESSAGE_CHARS plus the envelope. */
export const MAX_OPENHARNESS_BODY_BYTES = MAX_MESSAGE_CHARS * 4 + 64 * 1024;

export const CAPABILITY_APPROVAL = 'openharness.ui.approval';
export const CAPABILITY_CONTINUATION = 'openharness.continuation';

export type ErrorCode =
  | 'invalid_request'
  | 'unauthorized'
  | 'forbidden'
  | 'rate_limited'
  | 'protocol_version_unsupported'
  | 'continuation_invalid'
  | 'internal_error';

const RETRYABLE: Record<ErrorCode, boolean> = {
  invalid_request: false,
  unauthorized: false,
  forbidden: false,
  rate_limited: true,
  protocol_version_unsupported: false,
  continuation_invalid: false,
  internal_error: true,
};

/** Capabilities a shell may ask for that Steward cannot honour, and why. */
const DENIED_CAPABILITIES: Record<string, string> = {
  'openharness.streaming': 'Steward answers each request with one response; a turn that takes longer answers with a continuation token to resume with.',
  'openharness.actions.parallel': 'Steward sends its directives to be processed in order (execution: sequential) only.',
  'openharness.attachments.upload': 'Steward does not take attachments over OpenHarness; send the content as text.',
  'openharness.ui.rich_cards': 'Steward answers with Markdown text (render_message), not cards.',
};

// ---------------------------------------------------------------------------------------
// Wire types (what Steward sends)

export interface ActionDirective {
  action_type: 'render_message' | 'request_approval' | 'noop';
  priority?: 'low' | 'normal' | 'high' | 'critical';
  execution?: 'sequential' | 'parallel';
  risk_tier?: 'safe' | 'caution' | 'dangerous';
  requires_user_approval?: boolean;
  deadline_ms?: number;
  payload?: Record<string, unknown>;
}

export interface CapabilityDenial {
  capability: string;
  code: 'not_supported';
  message: string;
}

export interface ContinuationRef {
  /** The conversation's session workflow id. */
  run_id: string;
  continuation_token: string;
  expires_at: string;
}

export interface OpenHarnessError {
  code: ErrorCode;
  message: string;
  retryable: boolean;
  details?: Record<string, unknown>;
}

export interface OpenHarnessResponse {
  protocol_version: string;
  request_id?: string;
  correlation_id?: string;
  supported_protocol_versions: string[];
  supported_capabilities: Record<string, unknown>;
  capability_denials: CapabilityDenial[];
  response: {
    status: 'success' | 'error';
    engine_latency_ms: number;
    action_directives?: ActionDirective[];
    error?: OpenHarnessError;
    continuation?: ContinuationRef;
  };
}

// ---------------------------------------------------------------------------------------
// Request schema (loose objects: unknown fields are kept out of the way, never refused)

const SEMVER_RE = /^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$/;

const VersionProbe = z.looseObject({
  protocol_version: z
    .string({ error: (iss) => (iss.input === undefined ? 'protocol_version is required (a semver string such as 1.0.0)' : 'protocol_version must be a string') })
    .regex(SEMVER_RE, 'protocol_version must be a semver string such as 1.0.0'),
});

const str = z.string();
const extensions = z.record(z.string(), z.unknown());

const ContextSchema = z.looseObject({
  session_id: z.string().min(1, 'session_id must not be empty').max(512, 'session_id is at most 512 characters').optional(),
  conversation_id: z.string().min(1, 'conversation_id must not be empty').max(512, 'conversation_id is at most 512 characters').optional(),
  user_intent: z.string().max(MAX_MESSAGE_CHARS, `user_intent is longer than ${MAX_MESSAGE_CHARS} characters`).optional(),
  task_hint: z.looseObject({ sop_id: str.optional(), plugin_id: str.optional(), business_key: str.optional() }).optional(),
  continuation: z
    .looseObject({ run_id: str.optional(), sop_id: str.optional(), continuation_token: z.string().max(512).optional() })
    .optional(),
  environment_state: z
    .looseObject({
      privacy_tier: z.enum(['public', 'restricted', 'secret'], { error: 'privacy_tier is one of public, restricted, secret' }).optional(),
      os: str.optional(),
      active_window: str.optional(),
      screen_hash: str.optional(),
    })
    .optional(),
  attachments: z
    .array(
      z.looseObject({
        ref_id: str.optional(),
        uri: str.optional(),
        asset_id: str.optional(),
        mime_type: str.optional(),
        filename: str.optional(),
        size_bytes: z.number().int().min(0).optional(),
      }),
    )
    .optional(),
  shell: z
    .looseObject({ shell_kind: z.string().min(1).optional(), shell_version: str.optional(), locale: str.optional(), timezone: str.optional() })
    .optional(),
  extensions: extensions.optional(),
});

export const OpenHarnessRequestSchema = z.looseObject({
  protocol_version: z.string().regex(SEMVER_RE),
  request_id: z.string().min(1, 'request_id must not be empty').max(200, 'request_id is at most 200 characters').optional(),
  correlation_id: z.string().min(1, 'correlation_id must not be empty').max(1024, 'correlation_id is at most 1024 characters').optional(),
  capabilities: z.record(z.string().min(1, 'a capability key must not be empty'), z.unknown()).optional(),
  request: z.looseObject(
    {
      auth: z.looseObject({ tenant_id: str.optional(), credential_ref: str.optional(), session_id: str.optional() }).optional(),
      context: ContextSchema.optional(),
      extensions: extensions.optional(),
    },
    { error: (iss) => (iss.input === undefined ? 'request is required (an object with context.user_intent or context.continuation)' : 'request must be an object') },
  ),
});
export type OpenHarnessRequest = z.output<typeof OpenHarnessRequestSchema>;

// ---------------------------------------------------------------------------------------

export interface OpenHarnessDeps {
  ingress: Ingress;
  db: Db;
  /** The operator's API token (STEWARD_API_TOKEN): accepted as a shell acting as the operator. */
  operatorToken: string;
  /** How long a request waits for the turn's answer before answering with a continuation. */
  waitMs: number;
  /** How often the transcript is read while waiting (default 250 ms; 1 s as a safety net when `events` is given). */
  pollMs?: number;
  /** Transcript notifications (platform/start.ts `events`): a waiting request wakes at once. */
  events?: EventEmitter<{ transcript: [sessionId: string, role: string] }>;
  log?: Logger;
  now?: () => number;
  /** How long a continuation token lives after issue or last use (default one hour, services/openharness.ts). */
  continuationTtlMs?: number;
  /** Back-off on wrong bearer tokens per client address (share the HTTP app's); default: one of its own. */
  backoff?: AuthBackoff;
}

/** A request refused with this status and error code. */
class Refusal extends Error {
  constructor(
    readonly status: ContentfulStatusCode,
    readonly code: ErrorCode,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
  }
}

const CHAT_ID_RE = /^[A-Za-z0-9._@+=-]{1,128}$/;

/**
 * The chat id of a shell conversation: a plain session id that is already a valid chat id is
 * used as it is (readable in the Temporal UI); anything else (a conversation_id, characters
 * outside [A-Za-z0-9._@+=-], more than 128 characters, or the reserved `oh-` prefix) maps to
 * `oh-` + 40 hex digits of a SHA-256 of both ids. Deterministic and collision-free in practice.
 */
export function chatIdFor(sessionId: string, conversationId?: string): string {
  if (conversationId === undefined && CHAT_ID_RE.test(sessionId) && !sessionId.startsWith('oh-')) return sessionId;
  return `oh-${createHash('sha256').update(JSON.stringify([sessionId, conversationId ?? null])).digest('hex').slice(0, 40)}`;
}

function bearer(header: string | undefined): string | undefined {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
  return m?.[1];
}

function issuesText(issues: readonly z.core.$ZodIssue[]): { message: string; issues: Array<{ path: string; message: string }> } {
  const list = issues.map((i) => ({ path: i.path.map(String).join('.') || '(body)', message: i.message }));
  return { message: `invalid request: ${list.map((i) => `${i.path}: ${i.message}`).join('; ')}`, issues: list };
}

function riskTier(risk: string): 'safe' | 'caution' | 'dangerous' {
  return risk === 'safe' || risk === 'dangerous' ? risk : 'caution';
}

function asked(value: unknown): boolean {
  return value !== false && value !== null && value !== undefined;
}

function parseAttachments(raw: string | null): Array<Record<string, unknown>> {
  if (!raw) return [];
  try {
    const p = AttachmentRefSchema.array().safeParse(JSON.parse(raw));
    return p.success ? p.data.map((a) => ({ ref_id: a.hash, filename: a.name, mime_type: a.mediaType, size_bytes: a.size })) : [];
  } catch {
    return [];
  }
}

function renderMessage(row: TranscriptRow, kind: 'reply' | 'notice' | 'command'): ActionDirective {
  const files = parseAttachments(row.attachments);
  return {
    action_type: 'render_message',
    priority: 'normal',
    execution: 'sequential',
    risk_tier: 'safe',
    payload: {
      text: row.text,
      message: row.text,
      fallback_message: row.text,
      format: 'markdown',
      kind,
      role: row.role === 'assistant' ? 'assistant' : 'system',
      seq: row.seq,
      at: row.at,
      ...(files.length ? { attachments: files } : {}),
    },
  };
}

function textMessage(text: string, kind: 'command' | 'notice'): ActionDirective {
  return {
    action_type: 'render_message',
    priority: 'normal',
    execution: 'sequential',
    risk_tier: 'safe',
    payload: { text, message: text, fallback_message: text, format: 'markdown', kind, role: 'system' },
  };
}

// ---------------------------------------------------------------------------------------
// The engine: what its functions share

/** The deps with their defaults applied, shared by the engine's functions. */
interface Engine {
  deps: OpenHarnessDeps;
  db: Db;
  /** The conversation side: messages in, answers out. */
  service: OpenHarnessService;
  now: () => number;
  backoff: AuthBackoff;
  supportedCapabilities: Record<string, unknown>;
}

/** Apply the defaults of the deps (clock, poll interval, continuation lifetime, back-off). */
function engineOf(deps: OpenHarnessDeps): Engine {
  const service = createOpenHarnessService({
    ingress: deps.ingress,
    db: deps.db,
    waitMs: deps.waitMs,
    ...(deps.pollMs !== undefined ? { pollMs: deps.pollMs } : {}),
    ...(deps.events ? { events: deps.events } : {}),
    ...(deps.now ? { now: deps.now } : {}),
    ...(deps.continuationTtlMs !== undefined ? { continuationTtlMs: deps.continuationTtlMs } : {}),
  });
  const ttlMs = service.ttlMs;
  return {
    deps,
    db: deps.db,
    service,
    now: deps.now ?? (() => Date.now()),
    backoff: deps.backoff ?? new AuthBackoff({ db: deps.db, log: deps.log }),
    supportedCapabilities: {
      [CAPABILITY_APPROVAL]: { decided_by: 'admin', approve: '/approve-action <id>', deny: '/deny-action <id> [reason]' },
      [CAPABILITY_CONTINUATION]: { ttl_ms: ttlMs, wait_ms: deps.waitMs },
    },
  };
}

// ---------------------------------------------------------------------------------------
// Auth and capabilities

/** The shell a bearer header authenticates (the operator's token acts as the operator); undefined when none. */
async function authenticate(e: Engine, header: string | undefined): Promise<ShellPrincipal | undefined> {
  const token = bearer(header);
  if (!token) return undefined;
  if (e.deps.operatorToken && sameSecret(token, e.deps.operatorToken)) {
    return { shellId: OPERATOR_SHELL_ID, name: 'operator', userId: OPERATOR_USER_ID, account: OPERATOR_SHELL_ID };
  }
  const shell = await verifyShellToken(e.db, token);
  return shell ? { shellId: shell.shellId, name: shell.name, userId: shell.shellId, account: shell.shellId } : undefined;
}

/** The capabilities asked for that Steward cannot honour (and ignored attachments), with why. */
function denialsFor(e: Engine, capabilities: Record<string, unknown> | undefined, attachments: number): CapabilityDenial[] {
  const out: CapabilityDenial[] = [];
  for (const [key, value] of Object.entries(capabilities ?? {})) {
    if (!asked(value) || Object.hasOwn(e.supportedCapabilities, key)) continue;
    out.push({ capability: key, code: 'not_supported', message: DENIED_CAPABILITIES[key] ?? `Steward does not know the capability "${key}".` });
  }
  if (attachments > 0 && !out.some((d) => d.capability === 'openharness.attachments.upload')) {
    out.push({
      capability: 'openharness.attachments.upload',
      code: 'not_supported',
      message: `Steward does not take attachments over OpenHarness: ${attachments} attachment reference${attachments === 1 ? ' was' : 's were'} ignored; send the content as text.`,
    });
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Answers as directives

/** The request_approval directive for an approval the turn waits for (`nowMs` sets its deadline_ms). */
function approvalDirective(a: PendingApproval, continuation: ContinuationRef, nowMs: number): ActionDirective {
  let proposed: unknown = a.payload;
  try {
    proposed = JSON.parse(a.payload) as unknown;
  } catch {
    // keep the stored text
  }
  const text = [
    `Approval needed (${a.id}): the agent wants to ${a.summary}.`,
    `An admin approves with /approve-action ${a.id} or denies with /deny-action ${a.id} [reason] before ${a.deadline.toISOString()} (denied if nobody decides).`,
  ].join('\n');
  return {
    action_type: 'request_approval',
    priority: 'high',
    execution: 'sequential',
    risk_tier: riskTier(a.risk),
    requires_user_approval: true,
    deadline_ms: Math.max(0, Math.round(a.deadline.getTime() - nowMs)),
    payload: {
      approval_id: a.id,
      tool: a.tool,
      summary: a.summary,
      proposed_payload: proposed,
      deadline: a.deadline.toISOString(),
      decided_by: 'admin',
      approve: { user_intent: `/approve-action ${a.id}` },
      deny: { user_intent: `/deny-action ${a.id} [reason]` },
      text,
      message: text,
      fallback_message: text,
      continuation,
    },
  };
}

/** The noop directive of a turn still working, with the continuation to resume with. */
function stillWorking(continuation: ContinuationRef): ActionDirective {
  return {
    action_type: 'noop',
    priority: 'low',
    execution: 'sequential',
    risk_tier: 'safe',
    payload: {
      text: 'still working',
      message: 'Steward is still working on this; resume with the continuation token to get the answer.',
      fallback_message: 'Still working…',
      continuation,
    },
  };
}

/** The wire form of a continuation. */
function continuationRef(c: Continuation): ContinuationRef {
  return { run_id: c.sessionId, continuation_token: c.token, expires_at: c.expiresAt.toISOString() };
}

/** An answer part as a directive. */
function directiveOf(part: AnswerPart, continuation: ContinuationRef | undefined): ActionDirective {
  switch (part.kind) {
    case 'message':
      return renderMessage(part.row, part.as);
    case 'text':
      return textMessage(part.text, part.as);
    case 'approval':
      return approvalDirective(part.approval, continuation!, part.at);
    case 'working':
      return stillWorking(continuation!);
  }
}

/** The directives (and continuation) of an answer. */
function directivesOf(outcome: Outcome): { directives: ActionDirective[]; continuation?: ContinuationRef } {
  const continuation = outcome.continuation ? continuationRef(outcome.continuation) : undefined;
  return { directives: outcome.parts.map((p) => directiveOf(p, continuation)), ...(continuation ? { continuation } : {}) };
}

const REFUSALS: Record<RefusalReason, { status: ContentfulStatusCode; code: ErrorCode }> = {
  invalid: { status: 400, code: 'invalid_request' },
  forbidden: { status: 200, code: 'forbidden' },
  'rate-limited': { status: 200, code: 'rate_limited' },
  'continuation-invalid': { status: 200, code: 'continuation_invalid' },
};

/** A user_intent: one inbound message of the conversation its session_id (+ conversation_id) names. */
async function handleMessage(e: Engine, principal: ShellPrincipal, req: OpenHarnessRequest, intent: string, signal: AbortSignal | undefined): Promise<{ outcome: Outcome; sessionId: string }> {
  const context = req.request.context ?? {};
  if (!context.session_id) throw new Refusal(400, 'invalid_request', 'invalid request: request.context.session_id is required with a user_intent (it names the conversation)');
  const chatId = chatIdFor(context.session_id, context.conversation_id);
  return e.service.message(principal, { chatId, intent, ...(req.request_id !== undefined ? { requestId: req.request_id } : {}) }, signal);
}

// ---------------------------------------------------------------------------------------
// HTTP: envelopes, errors and the request's steps

interface Envelope {
  requestId?: string;
  correlationId?: string;
  denials: CapabilityDenial[];
  started: number;
}

/** The response envelope around `response` (ids echoed, versions, capabilities, latency). */
function envelopeBody(e: Engine, env: Envelope, response: Omit<OpenHarnessResponse['response'], 'engine_latency_ms'>): OpenHarnessResponse {
  return {
    protocol_version: PROTOCOL_VERSION,
    ...(env.requestId !== undefined ? { request_id: env.requestId } : {}),
    ...(env.correlationId !== undefined ? { correlation_id: env.correlationId } : {}),
    supported_protocol_versions: [...SUPPORTED_PROTOCOL_VERSIONS],
    supported_capabilities: e.supportedCapabilities,
    capability_denials: env.denials,
    response: { ...response, engine_latency_ms: Math.max(0, e.now() - env.started) },
  };
}

/** An error answer (a schema-valid envelope with status error). */
function fail(e: Engine, c: Context, env: Envelope, status: ContentfulStatusCode, code: ErrorCode, message: string, details?: Record<string, unknown>, headers?: Record<string, string>): Response {
  return c.json(envelopeBody(e, env, { status: 'error', error: { code, message, retryable: RETRYABLE[code], ...(details ? { details } : {}) } }), status, headers);
}

/** Ids echoed even in answers to requests that are otherwise refused (when they are well-formed). */
function echoIds(raw: unknown): Pick<Envelope, 'requestId' | 'correlationId'> {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return {};
  const r = raw as Record<string, unknown>;
  const ok = (v: unknown, max: number): v is string => typeof v === 'string' && v.length >= 1 && [...v].length <= max; // code points, as the schema counts
  return { ...(ok(r.request_id, 200) ? { requestId: r.request_id } : {}), ...(ok(r.correlation_id, 1024) ? { correlationId: r.correlation_id } : {}) };
}

interface Admission {
  client: ReturnType<AuthBackoff['client']>;
  header: string | undefined;
  /** How long this address must still wait after wrong tokens (0: it may try). */
  wait: number;
  principal: ShellPrincipal | undefined;
}

/** Who is asking: the bearer token checked, unless the address must wait after wrong tokens. */
async function admit(e: Engine, c: Context): Promise<Admission> {
  const client = e.backoff.client(c);
  const header = c.req.header('authorization');
  const presented = bearer(header);
  // the operator's token from loopback never waits; anyone else waits without a token check
  const wait = e.backoff.waitMs(client, presented !== undefined && e.deps.operatorToken !== '' && sameSecret(presented, e.deps.operatorToken));
  const principal = wait > 0 ? undefined : await authenticate(e, header);
  return { client, header, wait, principal };
}

/** The body as JSON (`malformed` when it is not). */
async function readJson(c: Context): Promise<{ raw: unknown; malformed: boolean }> {
  const text = await c.req.text();
  try {
    return { raw: JSON.parse(text) as unknown, malformed: false };
  } catch {
    return { raw: undefined, malformed: true };
  }
}

/** The 429 or 401 answer to a request that is not admitted, else its principal (a right operator token clears the address's back-off). */
function refuseUnadmitted(e: Engine, c: Context, env: Envelope, a: Admission): Response | ShellPrincipal {
  if (a.wait > 0) {
    const seconds = retryAfterSeconds(a.wait);
    e.deps.log?.info({ requestId: env.requestId, correlationId: env.correlationId, code: 'rate_limited', reason: 'auth-backoff' }, 'openharness request refused');
    return fail(e, c, env, 429, 'rate_limited', `Too many wrong bearer tokens from this address: try again in ${seconds} second${seconds === 1 ? '' : 's'}.`, { reason: 'auth-backoff', retry_after_seconds: seconds }, { 'retry-after': String(seconds) });
  }
  if (!a.principal) {
    if (a.header) e.backoff.failure(a.client, 'openharness'); // no credential at all is not a guess
    e.deps.log?.info({ requestId: env.requestId, correlationId: env.correlationId, code: 'unauthorized' }, 'openharness request refused');
    return fail(e, c, env, 401, 'unauthorized', 'Missing or wrong bearer token: send Authorization: Bearer <shell token>.', undefined, { 'www-authenticate': 'Bearer' });
  }
  if (a.principal.shellId === OPERATOR_SHELL_ID) e.backoff.success(a.client); // a shell token does not clear the address's record
  return a.principal;
}

/** The validated request, or the 415/400 answer (content type, JSON, protocol version, schema). */
function parseRequest(e: Engine, c: Context, env: Envelope, raw: unknown, malformed: boolean): Response | OpenHarnessRequest {
  const type = c.req.header('content-type');
  if (type !== undefined && !/^application\/([a-z0-9.+-]*\+)?json\b/i.test(type)) {
    return fail(e, c, env, 415, 'invalid_request', 'invalid request: expected Content-Type: application/json');
  }
  if (malformed) return fail(e, c, env, 400, 'invalid_request', 'invalid request: malformed JSON in the request body');
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    return fail(e, c, env, 400, 'invalid_request', 'invalid request: the body must be a JSON object (an OpenHarness request envelope)');
  }

  const version = VersionProbe.safeParse(raw);
  if (!version.success) {
    const { message, issues } = issuesText(version.error.issues);
    return fail(e, c, env, 400, 'invalid_request', message, { issues });
  }
  const major = Number(version.data.protocol_version.split('.')[0]);
  if (major !== 1) {
    return fail(e, c, env, 400, 'protocol_version_unsupported', `Steward serves OpenHarness ${SUPPORTED_PROTOCOL_VERSIONS.join(', ')}; protocol_version ${version.data.protocol_version} is not supported.`, {
      requested: version.data.protocol_version,
      supported_protocol_versions: [...SUPPORTED_PROTOCOL_VERSIONS],
    });
  }

  const parsed = OpenHarnessRequestSchema.safeParse(raw);
  if (!parsed.success) {
    const { message, issues } = issuesText(parsed.error.issues);
    return fail(e, c, env, 400, 'invalid_request', message, { issues });
  }
  return parsed.data;
}

/** Handle a valid request (a message or a resume) and answer it: success, a refusal or an internal error. */
async function serve(e: Engine, c: Context, env: Envelope, principal: ShellPrincipal, req: OpenHarnessRequest): Promise<Response> {
  const context = req.request.context ?? {};
  env.denials = denialsFor(e, req.capabilities, context.attachments?.length ?? 0);
  const tier = context.environment_state?.privacy_tier;
  const logBase = { requestId: env.requestId, correlationId: env.correlationId, shell: principal.shellId };

  const intent = context.user_intent;
  const token = context.continuation?.continuation_token;
  if (intent !== undefined && intent.trim() === '') return fail(e, c, env, 400, 'invalid_request', 'invalid request: request.context.user_intent must not be empty');
  if (intent === undefined && token === undefined) {
    return fail(e, c, env, 400, 'invalid_request', 'invalid request: send request.context.user_intent (a message) or request.context.continuation.continuation_token (to resume a turn)');
  }
  if (tier === 'public' && intent !== undefined) e.deps.log?.debug({ ...logBase, intent: intent.slice(0, 200) }, 'openharness intent');

  let sessionId: string | undefined;
  try {
    const r = intent !== undefined ? await handleMessage(e, principal, req, intent, c.req.raw.signal) : await e.service.resume(principal, token ?? '', c.req.raw.signal);
    sessionId = r.sessionId;
    const outcome = directivesOf(r.outcome);
    const directives = outcome.directives;
    e.deps.log?.info(
      { ...logBase, sessionId, status: 'success', directives: directives.map((d) => d.action_type), continuation: outcome.continuation !== undefined, ms: e.now() - env.started },
      'openharness request',
    );
    return c.json(envelopeBody(e, env, { status: 'success', action_directives: directives, ...(outcome.continuation ? { continuation: outcome.continuation } : {}) }), 200);
  } catch (thrown) {
    const err = thrown instanceof OpenHarnessRefusal ? new Refusal(REFUSALS[thrown.reason].status, REFUSALS[thrown.reason].code, thrown.message, thrown.details) : thrown;
    if (err instanceof Refusal) {
      e.deps.log?.info({ ...logBase, sessionId, status: 'error', code: err.code, ms: e.now() - env.started }, 'openharness request refused');
      return fail(e, c, env, err.status, err.code, err.message, err.details);
    }
    const error = err instanceof Error ? err : new Error(String(err));
    e.deps.log?.error({ ...logBase, sessionId, ...(tier === 'secret' ? { errName: error.name } : { err: error }) }, 'openharness request failed');
    return fail(e, c, env, 500, 'internal_error', 'Steward failed to handle the request; retry with the same request_id.');
  }
}

/** POST /api/openharness/v1: admit, parse, serve. */
async function handlePost(e: Engine, c: Context): Promise<Response> {
  const env: Envelope = { denials: [], started: e.now() };
  const admission = await admit(e, c);
  const { raw, malformed } = await readJson(c);
  Object.assign(env, echoIds(raw));
  const principal = refuseUnadmitted(e, c, env, admission);
  if (principal instanceof Response) return principal;
  const req = parseRequest(e, c, env, raw, malformed);
  if (req instanceof Response) return req;
  return serve(e, c, env, principal, req);
}

/** The OpenHarness engine's routes: POST /api/openharness/v1 (other methods: 405). */
export function createOpenHarnessRoutes(deps: OpenHarnessDeps): Hono {
  const e = engineOf(deps);
  const app = new Hono();

  app.onError((err, c) => {
    deps.log?.error({ errName: err.name }, 'openharness: unexpected failure');
    return fail(e, c, { denials: [], started: e.now() }, 500, 'internal_error', 'Steward failed to handle the request; retry with the same request_id.');
  });

  app.post(
    OPENHARNESS_PATH,
    bodyLimit({
      maxSize: MAX_OPENHARNESS_BODY_BYTES,
      // the rest of the body is not read: the connection closes rather than being reused
      onError: (c) =>
        fail(e, c, { denials: [], started: e.now() }, 413, 'invalid_request', `invalid request: the body is larger than ${MAX_OPENHARNESS_BODY_BYTES} bytes`, undefined, { connection: 'close' }),
    }),
    (c) => handlePost(e, c),
  );

  app.on(['GET', 'PUT', 'PATCH', 'DELETE'], OPENHARNESS_PATH, (c) =>
    fail(e, c, { denials: [], started: e.now() }, 405, 'invalid_request', `invalid request: ${OPENHARNESS_PATH} takes POST only`, undefined, { allow: 'POST' }),
  );

  return app;
}
