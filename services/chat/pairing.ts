/**
 * Pairing: how an unknown person comes to be known. `/pair` in a direct message issues a
 * one-time expiring code (Steward keeps its hash) and tells the admins; an admin approves it
 * with a role, or denies it (chat, CLI, API), and the requester is told. Anything else from an
 * unknown sender hears only how to pair, and only in a direct message.
 */
import { decidePairing, notifyAdmins, requestPairing, withdrawUndeliveredPairing, type Actor, type PairingDecision } from '../../domain/governance.js';
import { receiptExists, writeReceipt } from '../../domain/receipts.js';
import type { ConversationKey } from '../../common/ids.js';
import { isAdmin, type Role } from '../../common/roles.js';
import { deliverNotice, type DeliveryContext } from './deliveries.js';
import type { IngressResult } from './intake.js';
import type { Accepted, IngressSteps } from './pipeline.js';

const HOW_TO_PAIR = 'Steward does not know you yet. Send /pair here to ask for access: you get a code, and an admin approves it.';

/** Authenticate: an unknown sender gets a pairing code for /pair in a direct message, and nothing but how to pair otherwise. */
export async function authenticate(s: IngressSteps, a: Accepted): Promise<IngressResult> {
  const { msg, workflowId, command, key, dm } = a;
  if (!(command?.kind === 'pair' && dm && msg.userId)) {
    return s.reject(msg, workflowId, 'unknown-sender', dm ? HOW_TO_PAIR : undefined, command ? { command: command.kind } : {});
  }
  if (await receiptExists(s.db, `${key}:pairing`)) {
    return { workflowId, kind: 'command', duplicate: true };
  }
  const issued = await requestPairing(s.db, { platform: msg.platform, account: msg.account, userId: msg.userId, chatId: msg.chatId, displayName: msg.user }, s.pairingTtlMs);
  await writeReceipt(s.db, {
    key: `${key}:pairing`,
    kind: 'pairing.requested',
    workflowId,
    actor: msg.userId,
    data: { platform: msg.platform, userId: msg.userId, name: msg.user, ...(issued.ok ? { expiresAt: issued.expiresAt.toISOString() } : { refused: issued.reason }) },
  });
  if (!issued.ok) return { workflowId, kind: 'rejected', duplicate: false, reason: 'rate-limited', reply: issued.message };
  await notifyAdmins(s.db, s.senders, {
    key: `pairing:${msg.platform}:${msg.userId}:${issued.expiresAt.getTime()}`,
    text: `**Pairing request** from ${msg.user} (${msg.platform} user ${msg.userId}). If you expect them, ask for their code and approve it with /approve <code> <role>, or deny it with /deny <code>.`,
  }).catch((err: unknown) => s.deps.log?.warn({ err }, 'pairing notice not delivered'));
  const minutes = Math.round(s.pairingTtlMs / 60_000);
  return s.issuedCode(issued.code, {
    workflowId,
    kind: 'command',
    duplicate: false,
    reply: `Your pairing code is ${issued.code}. Give it to a Steward admin: they approve it with /approve ${issued.code} <role> within ${minutes} minute${minutes === 1 ? '' : 's'}. The code works once.`,
    // the code lives only in the requester's chat; Steward keeps its hash
    replyRecordAs: `A pairing code was issued (valid ${minutes} minute${minutes === 1 ? '' : 's'}).`,
  });
}

/** An admin's decision on a pairing code, receipted; the requester is told in the chat they asked from. */
export async function decidePairingAs(ctx: DeliveryContext, code: string, decision: { approve: Role } | 'deny', by: Actor): Promise<PairingDecision> {
  if (!isAdmin(by.role)) return { ok: false, reason: 'forbidden', message: 'Deciding pairing requests needs the admin role.' };
  const r = await decidePairing(ctx.db, code, decision, by);
  await writeReceipt(ctx.db, {
    kind: 'pairing.decision',
    actor: by.id,
    data: r.ok
      ? { pairingId: r.pairing.id, platform: r.pairing.platform, userId: r.pairing.userId, decision: r.pairing.status, role: r.pairing.role, by: by.name }
      : { refused: r.reason, by: by.name },
  });
  if (r.ok) {
    const requester: ConversationKey = { platform: r.pairing.platform, account: r.pairing.account, chatId: r.pairing.chatId };
    await deliverNotice(
      ctx,
      requester,
      `pairing:${r.pairing.id}:${r.pairing.status}`,
      r.pairing.status === 'approved'
        ? `You are paired: Steward knows you as ${r.pairing.displayName}, with the ${r.pairing.role ?? 'member'} role. Say hello, or send /help.`
        : 'Your pairing request was denied.',
    );
  }
  return r;
}

/** A pairing code whose answer reached nobody is withdrawn, so the failed send uses up no request. */
export async function withdrawUndelivered(ctx: DeliveryContext, code: string): Promise<void> {
  await withdrawUndeliveredPairing(ctx.db, code);
}
