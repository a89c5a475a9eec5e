/**
 * The store of live drafts: the text of a chat turn's model step as the model streams it, one
 * row per session (a session runs one turn, and a turn one model step, at a time). The worker
 * writes it (domain/live-drafts.ts throttles the writes) and deletes it when the step ends; the
 * API process reads it for the chat event stream's `partial` events. A row is never a record of
 * anything: the reply is (the transcript).
 */
import type { Db } from '../db.js';

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
