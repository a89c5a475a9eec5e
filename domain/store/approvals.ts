/**
 * The store of approvals: a proposal waiting for an admin (Approval), where the admins were
 * asked (ApprovalNotice, read to edit those posts when it is settled). Every Prisma query on
 * those tables from the activities lives here; domain/governance.ts reads and lists them for
 * the API and chat.
 */
import type { Approval } from '../../generated/prisma/sqlite/client.js';
import type { Db } from '../db.js';

export type { Approval as ApprovalRow };

/** A proposal as first recorded (status pending). */
export interface NewApproval {
  id: string;
  workflowId: string;
  runId: string | null;
  sessionId: string;
  turnId: string;
  toolCallId: string;
  tool: string;
  summary: string;
  payload: string;
  requestHash?: string;
  risk: string;
  requestedBy: string | null;
  deadline: Date;
}

/** The approval with this id, recorded now if it is not yet (a retry finds the first one). */
export async function ensureApproval(db: Db, a: NewApproval): Promise<Approval> {
  return (await db.approval.findUnique({ where: { id: a.id } })) ?? (await createApproval(db, a));
}

/** Record a proposal (status pending). */
export async function createApproval(db: Db, a: NewApproval): Promise<Approval> {
  return db.approval.create({ data: { ...a, status: 'pending' } });
}

export async function findApprovalRow(db: Db, id: string): Promise<Approval | null> {
  return db.approval.findUnique({ where: { id } });
}

export async function loadApprovalRow(db: Db, id: string): Promise<Approval> {
  return db.approval.findUniqueOrThrow({ where: { id } });
}

/** Record the decision, only while the approval is still pending (the first decision wins). */
export async function decideApproval(db: Db, id: string, d: { status: string; decidedBy: string; reason: string | null }): Promise<void> {
  await db.approval.updateMany({ where: { id, status: 'pending' }, data: { status: d.status, decidedBy: d.decidedBy, reason: d.reason, decidedAt: new Date() } });
}

/** Where the admins were asked to decide this approval. */
export async function approvalNotices(db: Db, approvalId: string): Promise<Array<{ platform: string; account: string; chatId: string; deliveryKey: string }>> {
  return db.approvalNotice.findMany({ where: { approvalId }, select: { platform: true, account: true, chatId: true, deliveryKey: true } });
}

/** The approvals asked for these tool calls (by turn and call id). */
export async function approvalsOfCalls(db: Db, calls: Array<{ turnId: string; toolCallId: string }>): Promise<Array<{ turnId: string; toolCallId: string; status: string; decidedBy: string | null }>> {
  if (calls.length === 0) return [];
  return db.approval.findMany({ where: { toolCallId: { in: [...new Set(calls.map((c) => c.toolCallId))] } }, select: { turnId: true, toolCallId: true, status: true, decidedBy: true } });
}
