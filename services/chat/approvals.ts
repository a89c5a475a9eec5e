/**
 * Decisions on the actions that wait for approval, from chat (/approve-action, /deny-action),
 * its buttons, the CLI and the API: only an admin decides, the decision goes to the run that
 * waits for it (an update, accepted once), and a refusal is receipted.
 */
import { WorkflowNotFoundError, WorkflowUpdateFailedError, type Client } from '@temporalio/client';
import type { Db } from '../../domain/db.js';
import { adminChannelExists, findActor, findApproval, lookupBinding, parseApprovalButton, type Actor } from '../../domain/governance.js';
import { writeReceipt } from '../../domain/receipts.js';
import { isAdmin } from '../../common/roles.js';
import type { NormalizedInbound } from '../../common/schemas.js';
import { approvalDecisionUpdate } from '../../workflows/messages.js';

/** A button click (Telegram callback query, Discord component interaction). */
export interface InboundAction {
  platform: NormalizedInbound['platform'];
  account: string;
  chatId: string;
  chatType: 'dm' | 'group';
  userId: string;
  user: string;
  /** The button's id (e.g. `apr:<id>:y`). */
  data: string;
  /** Platform id of the click, for the receipt. */
  id: string;
}

export interface ActionResult {
  /** Shown to the clicker (a toast or an ephemeral reply). */
  reply: string;
  /** True when the click changed something. */
  applied: boolean;
}


/** An admin's decision on an approval, handed to the run that waits for it; refusals are receipted. */
export async function decideApprovalAs(db: Db, client: Client, id: string, decision: 'approve' | 'deny', by: Actor, reason?: string): Promise<ActionResult> {
  const refuse = async (why: string, data: Record<string, unknown> = {}): Promise<ActionResult> => {
    await writeReceipt(db, { kind: 'approval.refused', actor: by.id, data: { approvalId: id, decision, by: by.name, why, ...data } });
    return { reply: why, applied: false };
  };
  if (!isAdmin(by.role)) return refuse(`Deciding approvals needs the admin role; you are ${by.role === 'operator' ? 'an' : 'a'} ${by.role}.`);
  const row = await findApproval(db, id);
  if (!row) return refuse(`No approval has the id ${id}.`);
  if (row.status !== 'pending') {
    const what = row.status === 'expired' ? 'expired (denied at its deadline)' : `already ${row.status}${row.decidedBy ? ` by ${row.decidedBy}` : ''}`;
    return refuse(`Approval ${row.id} was ${what}; nothing changed.`, { status: row.status });
  }
  try {
    const r = await client.workflow.getHandle(row.workflowId).executeUpdate(approvalDecisionUpdate, {
      args: [{ approvalId: row.id, decision, by: by.id, byName: by.name, ...(reason ? { reason } : {}) }],
    });
    return { reply: `Approval ${row.id} (${row.summary}): ${r.message}`, applied: true };
  } catch (err) {
    if (err instanceof WorkflowUpdateFailedError) return refuse(`Not applied: ${err.cause?.message ?? err.message}.`);
    if (err instanceof WorkflowNotFoundError) return refuse(`The run that waited for approval ${row.id} has ended; nothing changed.`);
    throw err;
  }
}


/** An Approve/Deny button pressed on a chat platform: only a paired admin decides, in the admin channel when there is one. */
export async function handleApprovalButton(db: Db, action: InboundAction, decide: (id: string, decision: 'approve' | 'deny', by: Actor) => Promise<ActionResult>): Promise<ActionResult> {
  const actor = await findActor(db, action.platform, action.userId);
  const receiptKey = `act:${action.platform}:${action.id}`;
  if (!actor) {
    await writeReceipt(db, { key: receiptKey, kind: 'ingress.rejected', actor: action.userId, data: { platform: action.platform, chatId: action.chatId, reason: 'unknown-sender', action: action.data } });
    return { reply: 'Steward does not know you: only paired admins can decide.', applied: false };
  }
  const button = parseApprovalButton(action.data);
  if (!button) return { reply: 'This button is not Steward’s (or is out of date).', applied: false };
  if (action.chatType === 'group' && isAdmin(actor.role) && (await adminChannelExists(db))) {
    const found = await lookupBinding(db, action.platform, action.account, action.chatId);
    if (found.kind !== 'bound' || !found.binding.adminChannel) return { reply: 'Approvals are decided in the admin channel.', applied: false };
  }
  return decide(button.id, button.decision, actor);
}
