/**
 * Counterfactual replays (docs/replay.md): one row per replay, its selection and alternative as
 * asked, the turns they resolved to, and the report's blob once the replay workflow saved it.
 */
import type { ReplayAlternative, ReplayStatus } from '../../common/replays.js';
import type { Db } from '../db.js';
import { isUniqueViolation } from '../prisma-errors.js';

export interface ReplayRow {
  id: string;
  status: ReplayStatus;
  /** The selection as asked (JSON-decoded). */
  selection: unknown;
  alternative: ReplayAlternative;
  turnIds: string[];
  turnCount: number;
  reportHash: string | null;
  error: string | null;
  requestedBy: string | null;
  workflowId: string | null;
  createdAt: Date;
  finishedAt: Date | null;
}

/** The row as the database holds it: the JSON fields as text. */
type RawRow = Omit<ReplayRow, 'status' | 'selection' | 'alternative' | 'turnIds'> & { status: string; selection: string; alternative: string; turnIds: string };

function toRow(r: RawRow): ReplayRow {
  return {
    ...r,
    status: r.status as ReplayStatus,
    selection: JSON.parse(r.selection) as unknown,
    alternative: JSON.parse(r.alternative) as ReplayAlternative,
    turnIds: JSON.parse(r.turnIds) as string[],
  };
}

export interface NewReplay {
  id: string;
  selection: unknown;
  alternative: ReplayAlternative;
  turnIds: string[];
  requestedBy?: string;
  workflowId?: string;
}

/** A replay that starts now (status `running`). */
export async function createReplay(db: Db, r: NewReplay): Promise<ReplayRow> {
  const row = await db.replay.create({
    data: {
      id: r.id,
      status: 'running',
      selection: JSON.stringify(r.selection),
      alternative: JSON.stringify(r.alternative),
      turnIds: JSON.stringify(r.turnIds),
      turnCount: r.turnIds.length,
      requestedBy: r.requestedBy ?? null,
      workflowId: r.workflowId ?? null,
    },
  });
  return toRow(row);
}

/**
 * The replay's row as its workflow started it, written at most once: a row already there (the
 * service's, or the workflow's own on a retried activity) is kept as it is. The replay workflow
 * calls it first thing (activities/replays.ts `recordReplay`), so a row exists whatever instant
 * the API that started it stopped at; the service may call it too, right after the start.
 */
export async function upsertReplay(db: Db, r: NewReplay): Promise<ReplayRow> {
  const existing = await getReplay(db, r.id);
  if (existing) return existing;
  try {
    return await createReplay(db, r);
  } catch (err) {
    // the same row written at the same moment by the other writer (service or workflow)
    if (!isUniqueViolation(err)) throw err;
    const row = await getReplay(db, r.id);
    if (!row) throw err;
    return row;
  }
}

export async function getReplay(db: Db, id: string): Promise<ReplayRow | undefined> {
  const row = await db.replay.findUnique({ where: { id } });
  return row ? toRow(row) : undefined;
}

/** The newest replays first. */
export async function listReplays(db: Db, opts: { limit?: number; beforeCreatedAt?: Date } = {}): Promise<ReplayRow[]> {
  const rows = await db.replay.findMany({
    ...(opts.beforeCreatedAt ? { where: { createdAt: { lt: opts.beforeCreatedAt } } } : {}),
    orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
    take: Math.min(Math.max(opts.limit ?? 50, 1), 500),
  });
  return rows.map(toRow);
}

/**
 * The replay ended: its status, and the report's blob when one was saved. A replay that already
 * ended keeps its first ending (a cancelled replay's late report changes nothing but the report
 * hash, when it had none).
 */
export async function finishReplay(db: Db, id: string, end: { status: Exclude<ReplayStatus, 'running'>; reportHash?: string; error?: string }): Promise<ReplayRow | undefined> {
  const current = await db.replay.findUnique({ where: { id } });
  if (!current) return undefined;
  if (current.status !== 'running') {
    if (end.reportHash && !current.reportHash) await db.replay.update({ where: { id }, data: { reportHash: end.reportHash } });
    return getReplay(db, id);
  }
  const row = await db.replay.update({
    where: { id },
    data: { status: end.status, finishedAt: new Date(), ...(end.reportHash ? { reportHash: end.reportHash } : {}), ...(end.error ? { error: end.error.slice(0, 2000) } : {}) },
  });
  return toRow(row);
}
