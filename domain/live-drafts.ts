/**
 * The live draft of a chat turn's model step: the text the model has streamed so far, kept in the
 * database (the LiveDraft table, one row per session: a session runs one turn, and a turn one
 * model step, at a time) so that the chat event stream, served by the API process (another
 * process in the cluster shape), can send it as `partial` events (services/chat/live.ts reads it).
 * A row is never a record of anything: the reply is (the transcript).
 *
 * Written throttled so the turn's hot path stays as it is: nothing before the step has streamed
 * for `startAfterMs` (400 ms; a short answer writes nothing at all), then at most one write every
 * `everyMs` (300 ms), one at a time, each with the newest text; deleted when the step ends (only
 * when something was written). Held secrets are masked before the text is written, and an end that
 * could be the start of one is held back (domain/secrets.ts, maskHeldSecretsGrowing). A failed
 * write is reported to `onError` and never fails the step: the draft is a preview, the reply is
 * the record.
 *
 * No Temporal imports.
 */
import type { Db } from './db.js';
import { maskHeldSecretsGrowing } from './secrets.js';

// ---- the store ----

export interface LiveDraftRow {
  sessionId: string;
  turnId: string;
  /** The model step's key (`model:<turnId>:<step>`). */
  stepKey: string;
  text: string;
  updatedAt: Date;
}

/** Write (or replace) the session's draft. */
export async function writeLiveDraft(db: Db, d: Omit<LiveDraftRow, 'updatedAt'>, at = new Date()): Promise<void> {
  await db.liveDraft.upsert({
    where: { sessionId: d.sessionId },
    create: { sessionId: d.sessionId, turnId: d.turnId, stepKey: d.stepKey, text: d.text, updatedAt: at },
    update: { turnId: d.turnId, stepKey: d.stepKey, text: d.text, updatedAt: at },
  });
}

/** Delete the session's draft if it is still the draft of this step (a later step's is left alone). */
export async function clearLiveDraft(db: Db, sessionId: string, stepKey: string): Promise<void> {
  await db.liveDraft.deleteMany({ where: { sessionId, stepKey } });
}

/** The session's draft, if a step is streaming (or a crashed one left it). */
export async function findLiveDraft(db: Db, sessionId: string): Promise<LiveDraftRow | null> {
  return db.liveDraft.findUnique({ where: { sessionId } });
}

// ---- the throttled writer ----

/** No write before the step has streamed this long (ms). */
export const DRAFT_START_AFTER_MS = 400;
/** At most one write per this many ms. */
export const DRAFT_EVERY_MS = 300;
/** The draft keeps at most this many characters (the start of the answer). */
export const DRAFT_MAX_CHARS = 100_000;

export interface ThrottleOptions {
  write(text: string): Promise<void>;
  clear(): Promise<void>;
  startAfterMs?: number;
  everyMs?: number;
  onError?: (err: unknown) => void;
}

export interface DraftWriter {
  /** The text so far (called for each streamed chunk). */
  update(text: string): void;
  /** The step ended: no more writes; waits for the one in flight, then deletes the draft if one was written. */
  finish(): Promise<void>;
}

/** The throttle alone (the writes and the delete given): see the module comment. */
export function throttledDraft(o: ThrottleOptions): DraftWriter {
  const startAfter = o.startAfterMs ?? DRAFT_START_AFTER_MS;
  const every = o.everyMs ?? DRAFT_EVERY_MS;
  const fail = (err: unknown) => o.onError?.(err);
  let firstAt: number | undefined;
  let lastWriteAt = 0;
  let latest: string | undefined;
  let written: string | undefined;
  let attempted = false;
  let finished = false;
  let timer: NodeJS.Timeout | undefined;
  let inFlight: Promise<void> | undefined;

  const schedule = () => {
    if (finished || timer || inFlight || latest === undefined || firstAt === undefined) return;
    const due = Math.max(firstAt + startAfter, lastWriteAt + every);
    timer = setTimeout(flush, Math.max(0, due - Date.now()));
    timer.unref?.();
  };
  const flush = () => {
    timer = undefined;
    if (finished || latest === undefined) return;
    const text = latest;
    latest = undefined;
    if (text === written) return;
    attempted = true;
    inFlight = o
      .write(text)
      .then(() => {
        written = text;
      }, fail)
      .finally(() => {
        inFlight = undefined;
        lastWriteAt = Date.now();
        schedule();
      });
  };
  return {
    update(text) {
      if (finished) return;
      firstAt ??= Date.now();
      latest = text.length > DRAFT_MAX_CHARS ? text.slice(0, DRAFT_MAX_CHARS) : text;
      schedule();
    },
    async finish() {
      finished = true;
      if (timer) clearTimeout(timer);
      timer = undefined;
      await inFlight;
      if (attempted) await o.clear().catch(fail);
    },
  };
}

/** The draft of one model step of a session's turn, written to the store (masked, throttled). */
export function liveDraftWriter(db: Db, step: { sessionId: string; turnId: string; stepKey: string }, opts: { startAfterMs?: number; everyMs?: number; onError?: (err: unknown) => void } = {}): DraftWriter {
  return throttledDraft({
    ...opts,
    write: (text) => writeLiveDraft(db, { ...step, text: maskHeldSecretsGrowing(text) }),
    clear: () => clearLiveDraft(db, step.sessionId, step.stepKey),
  });
}
