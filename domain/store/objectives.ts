/**
 * The store of objectives: every query on Objective (the definition), ObjectiveRun (one run,
 * scheduled or started by an event) and ObjectiveEvent (an event remembered for good, so a
 * redelivery is a duplicate), and the two writes a run makes into its destination chat (the
 * chat's session, the prompt as the turn's inbound message). Plain rows in and out; the rules
 * (validation, schedules, receipts) live in the objective service and the run activities.
 */
import type { ConversationKey } from '../../common/ids.js';
import type { Objective, ObjectiveEvent, ObjectiveRun } from '../../generated/prisma/sqlite/client.js';
import type { Db } from '../db.js';
import { writeReceiptIn, type ReceiptInput } from '../receipts.js';
import { directSql } from '../sql.js';

export type ObjectiveRow = Objective;
export type ObjectiveRunRow = ObjectiveRun;
export type ObjectiveEventRow = ObjectiveEvent;

/** What a new objective is made of (the store sets skipBefore, createdAt and updatedAt). */
export type NewObjectiveRow = Omit<ObjectiveRow, 'skipBefore' | 'createdAt' | 'updatedAt'>;

/** The fields a change may set. */
export type ObjectiveChanges = Partial<
  Pick<ObjectiveRow, 'prompt' | 'schedule' | 'overlap' | 'catchupWindowMs' | 'pauseOnFailure' | 'model' | 'watchPath' | 'inboundEmail' | 'webhookSecretRef'>
>;

// --- objectives

/** An objective by its id, or null. */
export function findObjective(db: Db, id: string): Promise<ObjectiveRow | null> {
  return db.objective.findUnique({ where: { id } });
}

/** An objective by its name, or null. */
export function findObjectiveByName(db: Db, name: string): Promise<ObjectiveRow | null> {
  return db.objective.findUnique({ where: { name } });
}

/** An objective by its id, else by its name, or null. */
export async function findObjectiveByIdOrName(db: Db, idOrName: string): Promise<ObjectiveRow | null> {
  return (await findObjective(db, idOrName)) ?? (await findObjectiveByName(db, idOrName));
}

/** The objective whose inbound address this is (exactly as given), or null. */
export function findInboundEmailOwner(db: Db, address: string): Promise<Pick<ObjectiveRow, 'id' | 'name' | 'paused'> | null> {
  return db.objective.findUnique({ where: { inboundEmail: address }, select: { id: true, name: true, paused: true } });
}

/** Every objective, by name. */
export function listObjectives(db: Db): Promise<ObjectiveRow[]> {
  return db.objective.findMany({ orderBy: { name: 'asc' } });
}

/** The objectives with a watched directory that are not paused. */
export async function listWatchedObjectives(db: Db): Promise<Array<{ id: string; watchPath: string }>> {
  const rows = await db.objective.findMany({ where: { watchPath: { not: null }, paused: false }, select: { id: true, watchPath: true } });
  return rows.map((r) => ({ id: r.id, watchPath: r.watchPath! }));
}

/** Record a new objective; a name or inbound address taken already is a unique violation. */
export function insertObjective(db: Db, row: NewObjectiveRow): Promise<ObjectiveRow> {
  return db.objective.create({ data: row });
}

/** Change an objective's definition; an inbound address taken already is a unique violation. */
export function updateObjective(db: Db, id: string, changes: ObjectiveChanges): Promise<ObjectiveRow> {
  return db.objective.update({ where: { id }, data: changes });
}

/** Record that the objective is paused, or no longer. */
export function setObjectivePaused(db: Db, id: string, paused: boolean): Promise<ObjectiveRow> {
  return db.objective.update({ where: { id }, data: { paused } });
}

/** Runs of the objective scheduled before `at` are to be skipped. */
export function skipObjectiveRunsBefore(db: Db, id: string, at: Date): Promise<ObjectiveRow> {
  return db.objective.update({ where: { id }, data: { skipBefore: at } });
}

/** Delete the objective's record (its runs and events stay, for the record). */
export async function deleteObjective(db: Db, id: string): Promise<void> {
  await db.objective.delete({ where: { id } });
}

// --- runs

/** The objective's most recent run, or null. */
export function latestObjectiveRun(db: Db, objectiveId: string): Promise<ObjectiveRunRow | null> {
  return db.objectiveRun.findFirst({ where: { objectiveId }, orderBy: { createdAt: 'desc' } });
}

/** The objective's most recent runs, newest first. */
export function recentObjectiveRuns(db: Db, objectiveId: string, take: number): Promise<ObjectiveRunRow[]> {
  return db.objectiveRun.findMany({ where: { objectiveId }, orderBy: { createdAt: 'desc' }, take });
}

/** A run by its id (its workflow id), or null. */
export function findObjectiveRun(db: Db, id: string): Promise<ObjectiveRunRow | null> {
  return db.objectiveRun.findUnique({ where: { id } });
}

/** Record a run as running (with its turn) or skipped (with why, when given), once: a run recorded already is left as it is. */
export async function recordRunStarted(
  db: Db,
  run: { id: string; objectiveId: string; scheduledAt: Date | null; status: 'running'; turnId: string },
): Promise<void> {
  await db.objectiveRun.upsert({ where: { id: run.id }, create: run, update: {} });
}

/**
 * Record a run skipped before its turn, with its receipt, in one transaction (as
 * `recordRunFinished`); a run recorded already keeps what was recorded.
 */
export async function recordRunSkipped(db: Db, run: { id: string; objectiveId: string; scheduledAt: Date | null; outcome?: string; error?: string }, receipt: ReceiptInput): Promise<void> {
  const at = new Date();
  await directSql(db).transaction(async (tx) => {
    await tx.execute(
      'INSERT INTO "ObjectiveRun" ("id", "objectiveId", "scheduledAt", "status", "turnId", "outcome", "error", "createdAt", "updatedAt") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT ("id") DO NOTHING',
      [run.id, run.objectiveId, run.scheduledAt, 'skipped', null, run.outcome ?? null, run.error ?? null, at, at],
    );
    await writeReceiptIn(tx, receipt);
  });
}

/**
 * Record how a run ended (skipped: its turn was refused by a model budget). The end and its receipt, in one transaction: a reader that sees the run finished finds its
 * receipt, and a process that dies between them leaves neither (the retried activity writes both;
 * the receipt's key is taken at most once).
 */
export async function recordRunFinished(db: Db, id: string, end: { status: 'done' | 'failed' | 'skipped'; outcome: string | null; error: string | null }, receipt: ReceiptInput): Promise<void> {
  await directSql(db).transaction(async (tx) => {
    await tx.execute('UPDATE "ObjectiveRun" SET "status" = ?, "outcome" = ?, "error" = ?, "updatedAt" = ? WHERE "id" = ?', [end.status, end.outcome, end.error, new Date(), id]);
    await writeReceiptIn(tx, receipt);
  });
}

/** The destination chat's session exists (a run's prompt and reply are written into it). */
export async function ensureRunSession(db: Db, sessionId: string, conversation: ConversationKey): Promise<void> {
  await db.session.upsert({ where: { id: sessionId }, create: { id: sessionId, ...conversation }, update: {} });
}

/** Put a run's prompt into its chat's transcript as the turn's inbound message; a key recorded already is a unique violation. */
export async function recordRunPrompt(db: Db, m: { key: string; sessionId: string; text: string; user: string; turnId: string }): Promise<void> {
  await db.message.create({ data: { ...m, role: 'user' } });
}

// --- events

/** The event the objective took with this id (or body key), or null. */
export function findObjectiveEvent(db: Db, objectiveId: string, eventId: string): Promise<ObjectiveEventRow | null> {
  return db.objectiveEvent.findUnique({ where: { objectiveId_eventId: { objectiveId, eventId } } });
}

/** A GitHub event the objective took with this body (by its content hash), or null. */
export function findGithubEventByBody(db: Db, objectiveId: string, payloadHash: string): Promise<ObjectiveEventRow | null> {
  return db.objectiveEvent.findFirst({ where: { objectiveId, payloadHash, source: { startsWith: 'github' } } });
}

/** Events recorded in [from, to), oldest first, after `afterId` (one page of `limit`). */
export async function objectiveEventsBetween(db: Db, from: Date, to: Date, afterId: number, limit: number): Promise<ObjectiveEventRow[]> {
  // the first page starts past the newest event from well before the window (found backwards by
  // id): the sweep reads the window's events, not every event ever remembered
  const start = afterId > 0 ? afterId : ((await db.objectiveEvent.findFirst({ where: { createdAt: { lt: new Date(from.getTime() - 60_000) } }, orderBy: { id: 'desc' }, select: { id: true } }))?.id ?? 0);
  return db.objectiveEvent.findMany({ where: { id: { gt: start }, createdAt: { gte: from, lt: to } }, orderBy: { id: 'asc' }, take: limit });
}

/** Remember an event and the run it starts; one remembered already is a unique violation. */
export async function recordObjectiveEvent(db: Db, e: { objectiveId: string; eventId: string; source: string; payloadHash: string; runId: string }): Promise<void> {
  await db.objectiveEvent.create({ data: e });
}

