/**
 * Audit receipts. Each receipt names its workflow and run; receipts written by activities
 * carry a key so a retried activity writes its receipt once.
 */
import type { Db } from './db.js';
import { isUniqueViolation } from './prisma-errors.js';
import { maskHeldSecrets, maskHeldSecretsDeep } from './secrets.js';
import { directSql, sqlInt, type SqlRunner } from './sql.js';

export type ReceiptKind =
  | 'ingress'
  | 'ingress.handed'
  | 'command'
  | 'session.command'
  | 'turn.start'
  | 'chat.forked'
  | 'turn.end'
  | 'model.call'
  | 'delivery'
  | 'ingress.rejected'
  | 'tool.call'
  | 'action.started'
  | 'action.result'
  | 'approval.requested'
  | 'approval.decision'
  | 'approval.refused'
  | 'pairing.requested'
  | 'pairing.decision'
  | 'binding.change'
  | 'identity.change'
  | 'shell.change'
  | 'repo.change'
  | 'change.start'
  | 'change.intake'
  | 'change.question'
  | 'change.answer'
  | 'change.plan'
  | 'change.work'
  | 'change.steer'
  | 'sandbox.blocked'
  | 'gate.verdict'
  | 'promotion'
  | 'change.end'
  | 'objective.change'
  | 'objective.run'
  | 'auth.backoff'
  | 'auth.sign-in'
  | 'knowledge.context'
  | 'prompt.change'
  | 'skill.used'
  | 'memory.propose'
  | 'memory.decision'
  | 'memory.forget'
  | 'memory.recall'
  | 'heartbeat.degraded'
  | 'heartbeat.recovered'
  | 'inbox.change'
  | 'inbox.message'
  | 'task.triage'
  | 'task.classify'
  | 'task.create'
  | 'task.route'
  | 'task.hand'
  | 'task.close'
  | 'task.remind'
  | 'mcp.change'
  | 'limit.refused'
  | 'budget.reserved'
  | 'budget.settled'
  | 'budget.exhausted'
  | 'budget.change'
  | 'budget.raised'
  | 'budget.raise.refused'
  | 'replay.end';

export interface ReceiptInput {
  key?: string;
  kind: ReceiptKind;
  workflowId?: string;
  runId?: string;
  sessionId?: string;
  actor?: string;
  data: Record<string, unknown>;
}

const RECEIPT_ROW = '(?, ?, ?, ?, ?, ?, ?, ?)';

/**
 * Insert receipts in one statement. Receipts are the turn path's most frequent write (four a
 * turn), so this is a plain INSERT sent to the driver adapter (domain/sql.ts: the same SQL on
 * SQLite and PostgreSQL, the same column values a model query writes).
 */
function insertReceipts(db: Db, rs: ReceiptInput[]): Promise<number> {
  const at = new Date();
  const values = rs.flatMap((r) => receiptValues(r, at));
  const rows = rs.length === 1 ? RECEIPT_ROW : Array.from(rs, () => RECEIPT_ROW).join(', ');
  return directSql(db).execute(`INSERT INTO "Receipt" ("key", "kind", "workflowId", "runId", "sessionId", "actor", "data", "createdAt") VALUES ${rows}`, values);
}

function receiptValues(r: ReceiptInput, at: Date) {
  // a view like any other: no secret Steward holds is written in clear (domain/secrets.ts)
  return [r.key ?? null, r.kind, r.workflowId ?? null, r.runId ?? null, r.sessionId ?? null, r.actor ?? null, JSON.stringify(maskHeldSecretsDeep(r.data)), at];
}

/**
 * Write a receipt with the statements of a transaction (domain/sql.ts `transaction`), so it
 * commits with the change it records and never without it: false when its key was already
 * written. A key taken is not an error here (ON CONFLICT DO NOTHING): on PostgreSQL a failed
 * statement would abort the whole transaction.
 */
export async function writeReceiptIn(tx: SqlRunner, r: ReceiptInput): Promise<boolean> {
  const changed = await tx.execute(`INSERT INTO "Receipt" ("key", "kind", "workflowId", "runId", "sessionId", "actor", "data", "createdAt") VALUES ${RECEIPT_ROW} ON CONFLICT ("key") DO NOTHING`, receiptValues(r, new Date()));
  return changed === 1;
}

/** Write a receipt; false when its key was already written (a retried activity), true otherwise. */
export async function writeReceipt(db: Db, r: ReceiptInput): Promise<boolean> {
  try {
    await insertReceipts(db, [r]);
  } catch (err) {
    if (r.key && isUniqueViolation(err)) return false; // already written by an earlier attempt
    throw err;
  }
  return true;
}

/**
 * Write receipts together (one statement when none was written before); for each, as
 * `writeReceipt`: false when its key was already written. A retried activity finds a key
 * taken and writes them one by one.
 */
export async function writeReceipts(db: Db, rs: ReceiptInput[]): Promise<boolean[]> {
  if (rs.length === 0) return [];
  try {
    await insertReceipts(db, rs);
    return rs.map(() => true);
  } catch (err) {
    if (!isUniqueViolation(err)) throw err;
  }
  const written: boolean[] = [];
  for (const r of rs) written.push(await writeReceipt(db, r));
  return written;
}

export interface ReceiptRecord {
  id: number;
  kind: string;
  workflowId: string | null;
  runId: string | null;
  sessionId: string | null;
  actor: string | null;
  data: unknown;
  at: string;
}

export interface ReceiptFilter {
  sessionId?: string;
  /** Any of these sessions (a chat's sessions); an empty list matches nothing. */
  sessionIds?: string[];
  /** Receipts of this workflow id or run id. */
  run?: string;
  /** Receipts whose actor is this (a person's identity id, `api`, `cli`, `operator`). */
  actor?: string;
  kind?: string;
  /** Written at or after this time. */
  since?: Date;
  /** Written before this time. */
  until?: Date;
  afterId?: number;
  /** Only receipts older than this id (a newest-first page's cursor). */
  beforeId?: number;
  /** Oldest first (the export's order, the default) or newest first. */
  order?: 'asc' | 'desc';
  limit?: number;
}

/** Receipts in order, for export as JSONL (one page: page on with `afterId`, or `beforeId` newest first). */
export async function listReceipts(db: Db, opts: ReceiptFilter = {}): Promise<ReceiptRecord[]> {
  const rows = await db.receipt.findMany({
    where: {
      ...(opts.sessionId ? { sessionId: opts.sessionId } : {}),
      ...(opts.sessionIds ? { sessionId: { in: opts.sessionIds } } : {}),
      ...(opts.run ? { OR: [{ workflowId: opts.run }, { runId: opts.run }] } : {}),
      ...(opts.actor ? { actor: opts.actor } : {}),
      ...(opts.kind ? { kind: opts.kind } : {}),
      ...(opts.since || opts.until ? { createdAt: { ...(opts.since ? { gte: opts.since } : {}), ...(opts.until ? { lt: opts.until } : {}) } } : {}),
      ...(opts.afterId || opts.beforeId ? { id: { ...(opts.afterId ? { gt: opts.afterId } : {}), ...(opts.beforeId ? { lt: opts.beforeId } : {}) } } : {}),
    },
    orderBy: { id: opts.order ?? 'asc' },
    take: Math.min(opts.limit ?? 1000, 10_000),
  });
  return rows.map((r) => ({
    id: r.id,
    kind: r.kind,
    workflowId: r.workflowId,
    runId: r.runId,
    sessionId: r.sessionId,
    actor: r.actor,
    // rows written before a secret was held are masked on the way out too
    data: JSON.parse(maskHeldSecrets(r.data)) as unknown,
    at: r.createdAt.toISOString(),
  }));
}

/** Receipts of one kind written in [from, to) whose data holds `marker`, oldest first, after `afterId` (one page of `limit`). */
export async function receiptsOfKindBetween(db: Db, kind: ReceiptKind, from: Date, to: Date, marker: string, afterId: number, limit: number): Promise<Array<{ id: number; key: string | null; data: string }>> {
  // The first page starts past the newest receipt of the kind from well before the window (a
  // minute's margin for clocks of several processes): found backwards through the (kind, id)
  // index, it costs the receipts of the window, not every receipt of the kind ever written.
  const start = afterId > 0 ? afterId : ((await db.receipt.findFirst({ where: { kind, createdAt: { lt: new Date(from.getTime() - 60_000) } }, orderBy: { id: 'desc' }, select: { id: true } }))?.id ?? 0);
  return db.receipt.findMany({
    where: { kind, id: { gt: start }, createdAt: { gte: from, lt: to }, data: { contains: marker } },
    orderBy: { id: 'asc' },
    take: limit,
    select: { id: true, key: true, data: true },
  });
}

/** Whether a receipt was written under `key`. */
export async function receiptExists(db: Db, key: string): Promise<boolean> {
  return (await receiptIdByKey(db, key)) !== undefined;
}

/** The ids of the receipts written under these keys, by key (keys never written are absent). */
export async function receiptIdsByKeys(db: Db, keys: string[]): Promise<Map<string, number>> {
  if (keys.length === 0) return new Map();
  const rows = await db.receipt.findMany({ where: { key: { in: keys } }, select: { key: true, id: true } });
  return new Map(rows.flatMap((r) => (r.key ? [[r.key, r.id] as const] : [])));
}

/**
 * How many `session.command` receipts a session has: one for each /steer, /stop and /new sent
 * to it (keyed by the command's message, written before it is sent; services/chat/commands.ts).
 */
export async function sessionCommandsSent(db: Db, sessionId: string): Promise<number> {
  const [row] = await directSql(db).query('SELECT COUNT(*) AS "n" FROM "Receipt" WHERE "sessionId" = ? AND "kind" = ?', [sessionId, 'session.command']);
  return sqlInt(row?.n);
}

/** The receipts written under these keys, oldest first. */
export async function receiptsByKeys(db: Db, keys: string[]): Promise<Array<ReceiptRecord & { key: string }>> {
  if (keys.length === 0) return [];
  const rows = await db.receipt.findMany({ where: { key: { in: keys } }, orderBy: { id: 'asc' } });
  return rows.map((r) => ({ id: r.id, key: r.key ?? '', kind: r.kind, workflowId: r.workflowId, runId: r.runId, sessionId: r.sessionId, actor: r.actor, data: JSON.parse(maskHeldSecrets(r.data)) as unknown, at: r.createdAt.toISOString() }));
}

/** The id of the receipt written under `key`. */
export async function receiptIdByKey(db: Db, key: string): Promise<number | undefined> {
  const row = await db.receipt.findUnique({ where: { key }, select: { id: true } });
  return row?.id;
}
