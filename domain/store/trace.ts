/**
 * The reads `steward trace` makes to put a message, a turn or a run back together: receipts by
 * key, kind, run and workflow, the transcript's inbound messages, and approval ids. Read only.
 */
import type { Message, Receipt } from '../../generated/prisma/sqlite/client.js';
import type { Db } from '../db.js';

export type { Receipt as ReceiptRow, Message as MessageRow };

const ASC = { id: 'asc' } as const;

export async function receiptByKey(db: Db, key: string): Promise<Receipt | null> {
  return db.receipt.findUnique({ where: { key } });
}

/** Receipts under these keys, oldest first. */
export async function receiptsByKeys(db: Db, keys: string[]): Promise<Receipt[]> {
  return db.receipt.findMany({ where: { key: { in: keys } }, orderBy: ASC });
}

/** The newest ingress receipts whose data names the platform message id `messageId` (a candidate list: the caller checks). */
export async function ingressReceiptsNaming(db: Db, messageId: string, limit: number): Promise<Receipt[]> {
  return db.receipt.findMany({ where: { kind: 'ingress', data: { contains: `"messageId":${JSON.stringify(messageId)}` } }, orderBy: { id: 'desc' }, take: limit });
}

export async function messageByTranscriptKey(db: Db, key: string): Promise<Message | null> {
  return db.message.findUnique({ where: { key } });
}

/** Inbound (user) messages whose transcript key ends with the platform message id. */
export async function inboundMessagesEndingWith(db: Db, messageId: string, limit: number): Promise<Message[]> {
  return db.message.findMany({ where: { role: 'user', key: { endsWith: `:${messageId}`, startsWith: 'in:' } }, take: limit });
}

/** The run ids a workflow's receipts name, in the order they first appear. */
export async function runIdsOfWorkflow(db: Db, workflowId: string, limit: number): Promise<string[]> {
  const rows = await db.receipt.findMany({ where: { workflowId, runId: { not: null } }, select: { runId: true }, orderBy: ASC, distinct: ['runId'], take: limit });
  return rows.map((r) => r.runId).filter((r): r is string => r !== null);
}

/** The workflow a run id's receipts name. */
export async function workflowOfRunId(db: Db, runId: string): Promise<string | undefined> {
  return (await db.receipt.findFirst({ where: { runId }, select: { workflowId: true } }))?.workflowId ?? undefined;
}

/** The first receipt of a turn (keyed by it) that names its workflow and run. */
export async function firstRunReceiptOfTurn(db: Db, turnId: string): Promise<Receipt | null> {
  return db.receipt.findFirst({ where: { key: { startsWith: `${turnId}:` }, workflowId: { not: null }, runId: { not: null } }, orderBy: ASC });
}

/**
 * Receipts of these approvals: the refused decisions on them and, `keyed`, those keyed
 * `approval:<id>:...`. Up to 20 rows per approval and kind, in all.
 */
export async function approvalReceipts(db: Db, ids: string[], opts: { keyed: boolean }): Promise<Receipt[]> {
  if (ids.length === 0) return [];
  const where = ids.flatMap((id) => [
    { kind: 'approval.refused', data: { contains: `"approvalId":${JSON.stringify(id)}` } },
    ...(opts.keyed ? [{ key: { startsWith: `approval:${id}:` } }] : []),
  ]);
  return db.receipt.findMany({ where: { OR: where }, orderBy: ASC, take: 20 * where.length });
}

/** The turn.start receipts of a session after an ingress receipt (by id) or a time. */
export async function turnStartsAfter(db: Db, sessionId: string, after: { id: number } | { at: Date }, limit: number): Promise<Receipt[]> {
  return db.receipt.findMany({
    where: { kind: 'turn.start', sessionId, ...('id' in after ? { id: { gt: after.id } } : { createdAt: { gte: after.at } }) },
    orderBy: ASC,
    take: limit,
  });
}

/** A turn's receipts: keyed by the turn, or written in its session naming it. */
export async function receiptsOfTurn(db: Db, turnId: string, sessionId: string, limit: number): Promise<Receipt[]> {
  return db.receipt.findMany({
    where: { OR: [{ key: { startsWith: `${turnId}:` } }, { sessionId, data: { contains: `"turnId":${JSON.stringify(turnId)}` } }] },
    orderBy: ASC,
    take: limit,
  });
}

/** The receipts of these runs, or of every run of a workflow. */
export async function receiptsOfRuns(db: Db, of: { runIds: string[] } | { workflowId: string }, limit: number): Promise<Receipt[]> {
  return db.receipt.findMany({ where: 'runIds' in of ? { runId: { in: of.runIds } } : { workflowId: of.workflowId }, orderBy: ASC, take: limit });
}

/** The ids of the approvals a turn asked for. */
export async function approvalIdsOfTurn(db: Db, turnId: string, limit: number): Promise<string[]> {
  return (await db.approval.findMany({ where: { turnId }, select: { id: true }, take: limit })).map((a) => a.id);
}

/** The ids of the approvals asked for in a workflow. */
export async function approvalIdsOfWorkflow(db: Db, workflowId: string, limit: number): Promise<string[]> {
  return (await db.approval.findMany({ where: { workflowId }, select: { id: true }, take: limit })).map((a) => a.id);
}
