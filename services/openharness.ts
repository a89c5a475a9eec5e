/**
 * The OpenHarness feature's conversation side: a shell's message handed to ingress as one
 * inbound message of its conversation, and the answer to it read from the transcript (waiting
 * for it up to `waitMs`, else a continuation to resume with). The HTTP adapter
 * (adapters/openharness/engine.ts) parses the protocol, authenticates the shell
 * (services/shells.ts) and serialises what this returns as OpenHarness directives; everything
 * it reads or records goes through here.
 *
 * Which messages answer a request: the assistant and system messages after the inbound
 * message, up to the final message of the turn that took it. Messages of a turn that had
 * already started when the message arrived (it answers earlier messages) and the answers to
 * other requests' commands are left out. A turn waiting for an admin's approval answers with
 * the approvals it waits for.
 *
 * Continuation tokens (`ohc_` + 32 random bytes) are stored as their SHA-256, bound to the
 * shell they were issued to; a token expires `continuationTtlMs` after it was issued or last
 * used (sliding).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { EventEmitter } from 'node:events';
import { parseText } from '../common/commands.js';
import { inboundMessageKey, sessionWorkflowId, type ConversationKey } from '../common/ids.js';
import type { Db } from '../domain/db.js';
import { pendingApprovalsOfSession, sha256, type PendingApproval } from '../domain/governance.js';
import { receiptIdByKey, receiptIdsByKeys } from '../domain/receipts.js';
import { deleteContinuation, extendContinuation, findContinuation, insertContinuation, pruneExpiredContinuations } from '../domain/store/shells.js';
import { messageByKey, messageKeyAt, repliesAfter, systemMessagesAfter, type TranscriptRow } from '../domain/transcript.js';
import type { Ingress, IngressResult, RejectReason } from './chat/intake.js';

export type { PendingApproval } from '../domain/governance.js';
export type { TranscriptRow } from '../domain/transcript.js';

/** How long a continuation token stays valid after it was issued or last used. */
export const DEFAULT_CONTINUATION_TTL_MS = 60 * 60_000;

export interface OpenHarnessServiceDeps {
  ingress: Ingress;
  db: Db;
  /** How long a request waits for the turn's answer before answering with a continuation. */
  waitMs: number;
  /** How often the transcript is read while waiting (default 250 ms; 1 s as a safety net when `events` is given). */
  pollMs?: number;
  /** Transcript notifications (platform/start.ts `events`): a waiting request wakes at once. */
  events?: EventEmitter<{ transcript: [sessionId: string, role: string] }>;
  now?: () => number;
  /** How long a continuation token lives after issue or last use (default one hour). */
  continuationTtlMs?: number;
}

/** The shell a request comes from (authenticated by the adapter). */
export interface ShellPrincipal {
  shellId: string;
  name: string;
  /** The ingress user id: the shell id, or the operator's. */
  userId: string;
  /** The chat account the shell's conversations live under. */
  account: string;
}

/** A continuation: the answer to a message of this session, resumed with the token. */
export interface Continuation {
  sessionId: string;
  token: string;
  expiresAt: Date;
}

/** One part of an answer, in order. */
export type AnswerPart =
  /** A transcript message: the turn's reply, a session notice, or a command's answer. */
  | { kind: 'message'; row: TranscriptRow; as: 'reply' | 'notice' | 'command' }
  /** A text that is not in the transcript. */
  | { kind: 'text'; text: string; as: 'command' | 'notice' }
  /** An approval the turn waits for (`at`: when it was read, for the time left). */
  | { kind: 'approval'; approval: PendingApproval; at: number }
  /** The turn is still working: resume with the continuation. */
  | { kind: 'working' };

export interface Outcome {
  parts: AnswerPart[];
  continuation?: Continuation;
}

export type RefusalReason = 'invalid' | 'forbidden' | 'rate-limited' | 'continuation-invalid';

/** A message or a resume that is refused: nothing was recorded (or ingress refused it). */
export class OpenHarnessRefusal extends Error {
  constructor(
    readonly reason: RefusalReason,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
  }
}

interface AnswerState {
  /** The turn that took the message has delivered its final message. */
  done: boolean;
  rows: TranscriptRow[];
  /** Approvals the turn waits for (only when not done). */
  approvals: PendingApproval[];
}

/** The deps with their defaults applied. */
interface Ctx {
  deps: OpenHarnessServiceDeps;
  db: Db;
  ingress: Ingress;
  now: () => number;
  pollMs: number;
  ttlMs: number;
}

const CONTINUATION_RE = /^ohc_[A-Za-z0-9_-]{43}$/;

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
function subscribe(events: OpenHarnessServiceDeps['events'], sessionId: string) {
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
async function waitUntil<T>(e: Ctx, sessionId: string, deadline: number, signal: AbortSignal | undefined, read: () => Promise<T>, ready: (v: T) => boolean): Promise<T> {
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
async function issueContinuation(e: Ctx, shellId: string, sessionId: string, afterSeq: number): Promise<Continuation> {
  const token = `ohc_${randomBytes(32).toString('base64url')}`;
  const expiresAt = new Date(e.now() + e.ttlMs);
  await pruneExpiredContinuations(e.db, new Date(e.now()));
  await insertContinuation(e.db, { tokenHash: sha256(token), shellId, sessionId, afterSeq, expiresAt });
  return { sessionId, token, expiresAt };
}

/** The conversation and message a shell's continuation token resumes (its expiry slides); a refusal when it cannot be used. */
async function resolveContinuation(e: Ctx, principal: ShellPrincipal, token: string): Promise<{ afterSeq: number; continuation: Continuation }> {
  const invalid = (why: string) => new OpenHarnessRefusal('continuation-invalid', why);
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
  return { afterSeq: row.afterSeq, continuation: { sessionId: row.sessionId, token, expiresAt } };
}

// ---------------------------------------------------------------------------------------
// Answers

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

/** Wait for the answer to the message at `afterSeq`. */
async function answer(e: Ctx, principal: ShellPrincipal, sessionId: string, afterSeq: number, signal: AbortSignal | undefined, existing?: Continuation): Promise<Outcome> {
  const state = await waitUntil(e, sessionId, e.now() + e.deps.waitMs, signal, () => readAnswer(e.db, sessionId, afterSeq), (s) => s.done || s.approvals.length > 0);
  const messages: AnswerPart[] = state.rows.map((row) => ({ kind: 'message', row, as: row.role === 'assistant' ? 'reply' : row.key.startsWith('in:') ? 'command' : 'notice' }));
  if (state.done) return { parts: messages };
  const continuation = existing ?? (await issueContinuation(e, principal.shellId, sessionId, afterSeq));
  if (state.approvals.length > 0) {
    return { parts: [...messages, ...state.approvals.map((approval): AnswerPart => ({ kind: 'approval', approval, at: e.now() }))], continuation };
  }
  return { parts: [{ kind: 'working' }], continuation };
}

/** A command without an immediate answer (/stop, /new): the session's notice, if it comes soon. */
async function commandFollowUp(e: Ctx, sessionId: string, afterSeq: number, signal: AbortSignal | undefined): Promise<Outcome> {
  const rows = await waitUntil(
    e,
    sessionId,
    e.now() + Math.min(e.deps.waitMs, 5_000),
    signal,
    async () => (await systemMessagesAfter(e.db, sessionId, afterSeq, 20)).filter((r) => !r.key.startsWith('in:')),
    (r) => r.length > 0,
  );
  if (rows.length > 0) return { parts: rows.map((row) => ({ kind: 'message', row, as: 'notice' })) };
  return { parts: [{ kind: 'text', text: 'Done: the session answers in its transcript.', as: 'command' }] };
}

/** The refusal of a message ingress refused. */
function refusalFor(result: IngressResult): OpenHarnessRefusal {
  const reason: RejectReason | undefined = result.reason;
  const details = { reason: reason ?? 'unknown' };
  switch (reason) {
    case 'rate-limited':
      return new OpenHarnessRefusal('rate-limited', result.reply ?? 'Too many messages: try again later.', details);
    case 'invalid':
      return new OpenHarnessRefusal('invalid', result.reply ?? 'The message was not accepted.', details);
    case 'unknown-sender':
      return new OpenHarnessRefusal('forbidden', "Steward does not know this shell's identity any more (it was removed): send /pair to ask an admin for access (the code comes back in the answer), or ask the operator to issue a new shell token.", details);
    default:
      return new OpenHarnessRefusal('forbidden', result.reply ?? 'Steward refused this message.', details);
  }
}

/** A message of a shell's conversation (`chatId`), keyed by its request id. */
export interface ShellMessage {
  chatId: string;
  /** The request_id (the idempotency key); a new id when the request has none. */
  requestId?: string;
  intent: string;
}

/** Hand the message to ingress as one inbound message of the conversation, then wait for its answer. */
async function message(e: Ctx, principal: ShellPrincipal, m: ShellMessage, signal: AbortSignal | undefined): Promise<{ outcome: Outcome; sessionId: string }> {
  const { chatId, intent } = m;
  const conversation: ConversationKey = { platform: 'openharness', account: principal.account, chatId };
  const sessionId = sessionWorkflowId(conversation);
  const id = m.requestId ?? randomUUID();
  const key = inboundMessageKey({ platform: 'openharness', account: principal.account, chatId, id });
  const result = await e.ingress.handle(
    { id, platform: 'openharness', account: principal.account, chatId, user: principal.name, userId: principal.userId, chatType: 'dm', text: intent, at: new Date(e.now()).toISOString() },
    { deliverReply: false },
  );
  if (result.kind === 'rejected') throw refusalFor(result);
  if (result.kind === 'ignored') return { sessionId, outcome: { parts: [{ kind: 'text', text: 'Steward did not take this message.', as: 'notice' }] } };

  let seq = result.seq;
  if (result.duplicate) {
    const stored = await messageByKey(e.db, key);
    if (stored && stored.text !== intent) {
      throw new OpenHarnessRefusal('invalid', 'invalid request: this request_id was already used for a different user_intent; use a new request_id for a new message', { request_id: id });
    }
    seq ??= stored?.seq;
  }
  if (seq === undefined && result.kind === 'command') {
    // A command answered without a transcript entry: /pair from a shell Steward does not
    // know (its identity was removed). Its reply holds the pairing code, which lives only in
    // this answer (Steward keeps its hash), so it is answered here and never through the outbox.
    return { sessionId, outcome: { parts: [{ kind: 'text', text: result.reply ?? unrecordedRetry(intent), as: 'command' }] } };
  }
  if (seq === undefined) throw new Error('ingress recorded the message without a transcript seq');

  if (result.kind === 'command') {
    let reply = result.reply;
    if (reply === undefined && result.duplicate) reply = (await messageByKey(e.db, `${key}:reply`))?.text;
    if (reply !== undefined) return { sessionId, outcome: { parts: [{ kind: 'text', text: reply, as: 'command' }] } };
    return { sessionId, outcome: await commandFollowUp(e, sessionId, seq, signal) };
  }
  return { sessionId, outcome: await answer(e, principal, sessionId, seq, signal) };
}

/** The OpenHarness conversation service: a shell's messages in, their answers out. */
export function createOpenHarnessService(deps: OpenHarnessServiceDeps) {
  const e: Ctx = {
    deps,
    db: deps.db,
    ingress: deps.ingress,
    now: deps.now ?? (() => Date.now()),
    pollMs: Math.max(10, deps.pollMs ?? (deps.events ? 1000 : 250)),
    ttlMs: deps.continuationTtlMs ?? DEFAULT_CONTINUATION_TTL_MS,
  };
  return {
    /** How long a continuation token lives after issue or last use. */
    ttlMs: e.ttlMs,
    /** A user_intent: one inbound message of the conversation, and its answer so far. */
    message: (principal: ShellPrincipal, m: ShellMessage, signal?: AbortSignal) => message(e, principal, m, signal),
    /** A continuation token: resume waiting for the answer it names. */
    async resume(principal: ShellPrincipal, token: string, signal?: AbortSignal): Promise<{ outcome: Outcome; sessionId: string }> {
      const c = await resolveContinuation(e, principal, token);
      return { sessionId: c.continuation.sessionId, outcome: await answer(e, principal, c.continuation.sessionId, c.afterSeq, signal, c.continuation) };
    },
  };
}

export type OpenHarnessService = ReturnType<typeof createOpenHarnessService>;
