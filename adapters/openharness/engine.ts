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
 * Privacy: the text of a request or reply is never logged, except an intent at debug level
 * when the shell marks `environment_state.privacy_tier: 'public'`; a `secret` request logs
 * ids only (not even error messages).
 */
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import type { EventEmitter } from 'node:events';
import { Hono, type Context } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { Db } from '../../domain/db.js';
import { pendingApprovalsOfSession, sha256, type PendingApproval } from '../../domain/governance.js';
import { receiptIdByKey, receiptIdsByKeys } from '../../domain/receipts.js';
import { deleteContinuation, extendContinuation, findContinuation, insertContinuation, pruneExpiredContinuations } from '../../domain/store/shells.js';
import { messageByKey, messageKeyAt, repliesAfter, systemMessagesAfter, type TranscriptRow } from '../../domain/transcript.js';
import { parseText } from '../../common/commands.js';
import { sessionWorkflowId, type ConversationKey } from '../../common/ids.js';
import { AttachmentRefSchema, MAX_MESSAGE_CHARS } from '../../common/schemas.js';
import { AuthBackoff, retryAfterSeconds } from '../http/backoff.js';
import { sameSecret } from '../http/sign-in.js';
import { inboundKey, OPERATOR_USER_ID, type Ingress, type IngressResult, type RejectReason } from '../../services/chat/intake.js';
import { verifyShellToken } from './shells.js';

export const OPENHARNESS_PATH = '/api/openharness/v1';
/** The highest protocol version served (answered in every response). */
export const PROTOCOL_VERSION = '1.0.0';
export const SUPPORTED_PROTOCOL_VERSIONS: readonly string[] = [PROTOCOL_VERSION];
/** The shell id (and chat account) of requests authenticated with the operator's token. */
export const OPERATOR_SHELL_ID = 'operator';
/** Largest request body (bytes): a message of MAX_MESSAGE_CHARS plus the envelope. */
export const MAX_OPENHARNESS_BODY_BYTES = MAX_MESSAGE_CHARS * 4 + 64 * 1024;
/** How long a continuation token stays valid after it was issued or last used. */
export const DEFAULT_CONTINUATION_TTL_MS = 60 * 60_000;

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
  /** How long a continuation token lives after issue or last use (default one hour). */
  continuationTtlMs?: number;
  /** Back-off on wrong bearer tokens per client address (share the HTTP app's); default: one of its own. */
  backoff?: AuthBackoff;
}

interface Principal {
  shellId: string;
  name: string;
  /** The ingress user id: the shell id, or OPERATOR_USER_ID. */
  userId: string;
  /** The chat account the shell's conversations live under. */
  account: string;
}

interface AnswerState {
  /** The turn that took the message has delivered its final message. */
  done: boolean;
  rows: TranscriptRow[];
  /** Approvals the turn waits for (only when not done). */
  approvals: PendingApproval[];
}

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
const CONTINUATION_RE = /^ohc_[A-Za-z0-9_-]{43}$/;

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

/**
 * The answer to a retried request_id whose command was answered without a transcript entry
 * (a pairing request): the first answer is not kept, so a retry says so and changes nothing.
 */
function unrecordedRetry(intent: string): string {
  const parsed = parseText(intent);
  if (parsed.kind === 'command' && parsed.command.kind === 'pair') {
    return 'This request_id already asked to pair, and that answer is not kept: a pairing code lives only in the answer that issued it (Steward keeps its hash). If the answer was lost, send /pair again with a new request_id; a new code replaces the old one.';
  }
  return 'This request_id was already handled; its answer is not kept. Send the command again with a new request_id.';
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
  ingress: Ingress;
  now: () => number;
  pollMs: number;
  ttlMs: number;
  backoff: AuthBackoff;
  supportedCapabilities: Record<string, unknown>;
}

/** Apply the defaults of the deps (clock, poll interval, continuation lifetime, back-off). */
function engineOf(deps: OpenHarnessDeps): Engine {
  const ttlMs = deps.continuationTtlMs ?? DEFAULT_CONTINUATION_TTL_MS;
  return {
    deps,
    db: deps.db,
    ingress: deps.ingress,
    now: deps.now ?? (() => Date.now()),
    pollMs: Math.max(10, deps.pollMs ?? (deps.events ? 1000 : 250)),
    ttlMs,
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
async function authenticate(e: Engine, header: string | undefined): Promise<Principal | undefined> {
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
// Reading the answer of a turn

const TURN_END_RE = /^:turn:(\d+):([^:]+):(reply|stopped|failed)$/;

/** The turn a transcript row belongs to (its turnId column, or a session notice keyed by a turn). */
function turnOf(sessionId: string, row: TranscriptRow): { turnId: string; end: boolean } | undefined {
  if (row.key.startsWith(`${sessionId}:turn:`)) {
    const m = TURN_END_RE.exec(row.key.slice(sessionId.length));
    if (m) return { turnId: `${sessionId}:turn:${m[1]}:${m[2]}`, end: true };
  }
  return row.turnId ? { turnId: row.turnId, end: false } : undefined;
}

/**
 * What the conversation has answered to the inbound message at `afterSeq` so far: the
 * assistant and system messages after it up to the end of the turn that took it, and the
 * approvals that turn waits for. Messages of turns that had started before the message
 * arrived (they answer earlier messages) and answers to other requests' commands are left
 * out.
 */
async function readAnswer(db: Db, sessionId: string, afterSeq: number): Promise<AnswerState> {
  const inbound = await messageKeyAt(db, sessionId, afterSeq);
  const marker = inbound !== undefined ? await receiptIdByKey(db, `${inbound}:ingress`) : undefined;
  const own = inbound !== undefined ? `${inbound}:` : undefined;
  const rows = await repliesAfter(db, sessionId, afterSeq, 500);
  const pending = await pendingApprovalsOfSession(db, sessionId);
  const turnIds = new Set<string>();
  for (const r of rows) {
    const t = turnOf(sessionId, r);
    if (t) turnIds.add(t.turnId);
  }
  for (const a of pending) turnIds.add(a.turnId);
  const earlier = new Set<string>();
  if (marker !== undefined && turnIds.size > 0) {
    const starts = await receiptIdsByKeys(db, [...turnIds].map((t) => `${t}:start`));
    for (const [key, id] of starts) if (id < marker) earlier.add(key.slice(0, -':start'.length));
  }
  const approvals = pending.filter((a) => !earlier.has(a.turnId));
  const asked = new Set(approvals.map((a) => `approval:${a.id}:asked`));
  const out: TranscriptRow[] = [];
  let done = false;
  for (const r of rows) {
    if (r.key.startsWith('in:') && !(own && r.key.startsWith(own))) continue; // another request's command answer
    if (asked.has(r.key)) continue; // the request_approval directive says it
    const t = turnOf(sessionId, r);
    if (t && earlier.has(t.turnId)) continue;
    out.push(r);
    if (t?.end) {
      done = true;
      break;
    }
  }
  return { done, rows: out, approvals: done ? [] : approvals };
}

/** Wakes on a transcript event of the session (when events are given), a poll tick or an abort. */
function subscribe(events: OpenHarnessDeps['events'], sessionId: string) {
  let dirty = false;
  let wakeUp: (() => void) | undefined;
  const onEvent = (sid: string) => {
    if (sid !== sessionId) return;
    dirty = true;
    wakeUp?.();
  };
  events?.on('transcript', onEvent);
  return {
    next(ms: number, signal: AbortSignal | undefined): Promise<void> {
      if (dirty || signal?.aborted) {
        dirty = false;
        return Promise.resolve();
      }
      return new Promise<void>((resolve) => {
        const finish = () => {
          clearTimeout(timer);
          signal?.removeEventListener('abort', finish);
          wakeUp = undefined;
          dirty = false;
          resolve();
        };
        const timer = setTimeout(finish, Math.max(0, ms));
        wakeUp = finish;
        signal?.addEventListener('abort', finish, { once: true });
      });
    },
    close() {
      events?.off('transcript', onEvent);
      wakeUp?.();
    },
  };
}

/** Read until `ready` holds, the deadline passes or the client goes away; returns the last read. */
async function waitUntil<T>(e: Engine, sessionId: string, deadline: number, signal: AbortSignal | undefined, read: () => Promise<T>, ready: (v: T) => boolean): Promise<T> {
  const sub = subscribe(e.deps.events, sessionId);
  try {
    for (;;) {
      const v = await read();
      const left = deadline - e.now();
      if (ready(v) || left <= 0 || signal?.aborted) return v;
      await sub.next(Math.min(e.pollMs, left), signal);
    }
  } finally {
    sub.close();
  }
}

// ---------------------------------------------------------------------------------------
// Continuations

/** Issue a continuation token for the answer to the message at `afterSeq` (expired ones are dropped first). */
async function issueContinuation(e: Engine, shellId: string, sessionId: string, afterSeq: number): Promise<ContinuationRef> {
  const token = `ohc_${randomBytes(32).toString('base64url')}`;
  const expiresAt = new Date(e.now() + e.ttlMs);
  await pruneExpiredContinuations(e.db, new Date(e.now()));
  await insertContinuation(e.db, { tokenHash: sha256(token), shellId, sessionId, afterSeq, expiresAt });
  return { run_id: sessionId, continuation_token: token, expires_at: expiresAt.toISOString() };
}

/** The conversation and message a shell's continuation token resumes (its expiry slides); a Refusal when it cannot be used. */
async function resolveContinuation(e: Engine, principal: Principal, token: string): Promise<{ sessionId: string; afterSeq: number; ref: ContinuationRef }> {
  const invalid = (why: string) => new Refusal(200, 'continuation_invalid', why);
  const unknown = 'This continuation token is unknown to Steward for this shell (it was never issued to it, or its shell token was revoked); send the message again.';
  if (!CONTINUATION_RE.test(token)) throw invalid(unknown);
  const row = await findContinuation(e.db, sha256(token));
  if (!row || row.shellId !== principal.shellId) throw invalid(unknown);
  if (row.expiresAt.getTime() <= e.now()) {
    await deleteContinuation(e.db, row.tokenHash);
    throw invalid(`This continuation token expired at ${row.expiresAt.toISOString()}; send the message again (a retried request_id returns its answer).`);
  }
  // sliding expiry: a shell that keeps resuming keeps its token
  const expiresAt = new Date(e.now() + e.ttlMs);
  await extendContinuation(e.db, row.tokenHash, expiresAt);
  return { sessionId: row.sessionId, afterSeq: row.afterSeq, ref: { run_id: row.sessionId, continuation_token: token, expires_at: expiresAt.toISOString() } };
}

// ---------------------------------------------------------------------------------------
// Answers

interface Outcome {
  directives: ActionDirective[];
  continuation?: ContinuationRef;
}

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

/** Wait for the answer to the message at `afterSeq` and turn it into directives. */
async function answer(e: Engine, principal: Principal, sessionId: string, afterSeq: number, signal: AbortSignal | undefined, existing?: ContinuationRef): Promise<Outcome> {
  const state = await waitUntil(e, sessionId, e.now() + e.deps.waitMs, signal, () => readAnswer(e.db, sessionId, afterSeq), (s) => s.done || s.approvals.length > 0);
  const messages = state.rows.map((r) => renderMessage(r, r.role === 'assistant' ? 'reply' : r.key.startsWith('in:') ? 'command' : 'notice'));
  if (state.done) return { directives: messages };
  const continuation = existing ?? (await issueContinuation(e, principal.shellId, sessionId, afterSeq));
  if (state.approvals.length > 0) {
    return { directives: [...messages, ...state.approvals.map((a) => approvalDirective(a, continuation, e.now()))], continuation };
  }
  return { directives: [stillWorking(continuation)], continuation };
}

/** A command without an immediate answer (/stop, /new): the session's notice, if it comes soon. */
async function commandFollowUp(e: Engine, sessionId: string, afterSeq: number, signal: AbortSignal | undefined): Promise<Outcome> {
  const rows = await waitUntil(
    e,
    sessionId,
    e.now() + Math.min(e.deps.waitMs, 5_000),
    signal,
    async () => (await systemMessagesAfter(e.db, sessionId, afterSeq, 20)).filter((r) => !r.key.startsWith('in:')),
    (r) => r.length > 0,
  );
  if (rows.length > 0) return { directives: rows.map((r) => renderMessage(r, 'notice')) };
  return { directives: [textMessage('Done: the session answers in its transcript.', 'command')] };
}

/** The error answer to a message ingress refused. */
function refusalFor(result: IngressResult): Refusal {
  const reason: RejectReason | undefined = result.reason;
  const details = { reason: reason ?? 'unknown' };
  switch (reason) {
    case 'rate-limited':
      return new Refusal(200, 'rate_limited', result.reply ?? 'Too many messages: try again later.', details);
    case 'invalid':
      return new Refusal(400, 'invalid_request', result.reply ?? 'The message was not accepted.', details);
    case 'unknown-sender':
      return new Refusal(200, 'forbidden', "Steward does not know this shell's identity any more (it was removed): send /pair to ask an admin for access (the code comes back in the answer), or ask the operator to issue a new shell token.", details);
    default:
      return new Refusal(200, 'forbidden', result.reply ?? 'Steward refused this message.', details);
  }
}

/** A user_intent: hand it to ingress as one inbound message of the conversation, then wait for its answer. */
async function handleMessage(e: Engine, principal: Principal, req: OpenHarnessRequest, intent: string, signal: AbortSignal | undefined): Promise<{ outcome: Outcome; sessionId: string }> {
  const context = req.request.context ?? {};
  if (!context.session_id) throw new Refusal(400, 'invalid_request', 'invalid request: request.context.session_id is required with a user_intent (it names the conversation)');
  const chatId = chatIdFor(context.session_id, context.conversation_id);
  const conversation: ConversationKey = { platform: 'openharness', account: principal.account, chatId };
  const sessionId = sessionWorkflowId(conversation);
  const id = req.request_id ?? randomUUID();
  const key = inboundKey({ platform: 'openharness', account: principal.account, chatId, id });
  const result = await e.ingress.handle(
    { id, platform: 'openharness', account: principal.account, chatId, user: principal.name, userId: principal.userId, chatType: 'dm', text: intent, at: new Date(e.now()).toISOString() },
    { deliverReply: false },
  );
  if (result.kind === 'rejected') throw refusalFor(result);
  if (result.kind === 'ignored') return { sessionId, outcome: { directives: [textMessage('Steward did not take this message.', 'notice')] } };

  let seq = result.seq;
  if (result.duplicate) {
    const stored = await messageByKey(e.db, key);
    if (stored && stored.text !== intent) {
      throw new Refusal(400, 'invalid_request', 'invalid request: this request_id was already used for a different user_intent; use a new request_id for a new message', { request_id: id });
    }
    seq ??= stored?.seq;
  }
  if (seq === undefined && result.kind === 'command') {
    // A command answered without a transcript entry: /pair from a shell Steward does not
    // know (its identity was removed). Its reply holds the pairing code, which lives only in
    // this answer (Steward keeps its hash), so it is answered here and never through the outbox.
    return { sessionId, outcome: { directives: [textMessage(result.reply ?? unrecordedRetry(intent), 'command')] } };
  }
  if (seq === undefined) throw new Error('ingress recorded the message without a transcript seq');

  if (result.kind === 'command') {
    let reply = result.reply;
    if (reply === undefined && result.duplicate) reply = (await messageByKey(e.db, `${key}:reply`))?.text;
    if (reply !== undefined) return { sessionId, outcome: { directives: [textMessage(reply, 'command')] } };
    return { sessionId, outcome: await commandFollowUp(e, sessionId, seq, signal) };
  }
  return { sessionId, outcome: await answer(e, principal, sessionId, seq, signal) };
}

/** A continuation token: resume waiting for the answer it names. */
async function handleResume(e: Engine, principal: Principal, token: string, signal: AbortSignal | undefined): Promise<{ outcome: Outcome; sessionId: string }> {
  const c = await resolveContinuation(e, principal, token);
  return { sessionId: c.sessionId, outcome: await answer(e, principal, c.sessionId, c.afterSeq, signal, c.ref) };
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
  principal: Principal | undefined;
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
function refuseUnadmitted(e: Engine, c: Context, env: Envelope, a: Admission): Response | Principal {
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
async function serve(e: Engine, c: Context, env: Envelope, principal: Principal, req: OpenHarnessRequest): Promise<Response> {
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
    const r = intent !== undefined ? await handleMessage(e, principal, req, intent, c.req.raw.signal) : await handleResume(e, principal, token ?? '', c.req.raw.signal);
    sessionId = r.sessionId;
    const directives = r.outcome.directives;
    e.deps.log?.info(
      { ...logBase, sessionId, status: 'success', directives: directives.map((d) => d.action_type), continuation: r.outcome.continuation !== undefined, ms: e.now() - env.started },
      'openharness request',
    );
    return c.json(envelopeBody(e, env, { status: 'success', action_directives: directives, ...(r.outcome.continuation ? { continuation: r.outcome.continuation } : {}) }), 200);
  } catch (err) {
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
