/**
 * What the operator inbox (services/decisions.ts) reads: the rows waiting for a decision,
 * and those decided since a time, of approvals, pairing requests, memories and tasks.
 */
import type { Db } from '../db.js';
import { findApproval, type ApprovalRecord } from '../governance.js';
import type { MemoryRow } from '../knowledge/memory.js';

/** An approval as the inbox reads it: governance's record of it. */
export type ApprovalDecisionRow = ApprovalRecord;

export interface PairingDecisionRow {
  id: string;
  tokenHash: string;
  platform: string;
  userId: string;
  displayName: string;
  status: string;
  role: string | null;
  expiresAt: Date;
  decidedBy: string | null;
  decidedAt: Date | null;
  createdAt: Date;
}

export interface TaskDecisionRow {
  id: string;
  platform: string;
  chatId: string;
  sender: string;
  text: string;
  lane: string;
  priority: string;
  dueAt: Date | null;
  status: string;
  createdAt: Date;
  closedAt: Date | null;
}

export const pendingOrDecidedApprovals = async (db: Db, since: Date): Promise<ApprovalDecisionRow[]> =>
  db.approval.findMany({ where: { OR: [{ status: 'pending' }, { decidedAt: { gte: since } }] }, orderBy: { createdAt: 'desc' }, take: 200 });

/** One approval by id (governance's lookup). */
export const approvalRow = findApproval;

export const pendingOrDecidedPairings = async (db: Db, since: Date, now: Date): Promise<PairingDecisionRow[]> =>
  db.pairing.findMany({ where: { OR: [{ status: 'pending', expiresAt: { gt: now } }, { decidedAt: { gte: since } }] }, orderBy: { createdAt: 'desc' }, take: 100 });

export const pairingRow = async (db: Db, id: string): Promise<PairingDecisionRow | null> => db.pairing.findUnique({ where: { id } });

export const pendingOrDecidedMemories = async (db: Db, since: Date): Promise<MemoryRow[]> =>
  (await db.memory.findMany({ where: { OR: [{ status: 'pending' }, { decidedAt: { gte: since } }] }, orderBy: { createdAt: 'desc' }, take: 200 })) as unknown as MemoryRow[];

export const memoryRow = async (db: Db, id: string): Promise<MemoryRow | null> => (await db.memory.findUnique({ where: { id } })) as unknown as MemoryRow | null;

export const openOrClosedTasks = async (db: Db, since: Date): Promise<TaskDecisionRow[]> =>
  db.task.findMany({ where: { OR: [{ status: 'open' }, { closedAt: { gte: since } }] }, orderBy: { createdAt: 'desc' }, take: 200 });

export const taskRow = async (db: Db, id: string): Promise<TaskDecisionRow | null> => db.task.findUnique({ where: { id } });

/** The requester set recorded with an approval's request (undefined: none recorded). */
export async function recordedRequesters(db: Db, approvalId: string): Promise<string[] | undefined> {
  const r = await db.receipt.findUnique({ where: { key: `approval:${approvalId}:requested` } });
  if (!r) return undefined;
  const data = JSON.parse(r.data) as { requesters?: unknown };
  return Array.isArray(data.requesters) ? data.requesters.filter((x): x is string => typeof x === 'string') : undefined;
}

export const identityName = async (db: Db, id: string): Promise<string | undefined> => (await db.identity.findUnique({ where: { id } }))?.name;

export const sessionChat = async (db: Db, id: string): Promise<{ platform: string; chatId: string } | null> => db.session.findUnique({ where: { id }, select: { platform: true, chatId: true } });
