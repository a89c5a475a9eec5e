/**
 * Identities, bindings, pairing and approvals in the database: the records the fail-closed
 * ingress and the approval flow decide by. Nothing here trusts chat text: roles, bindings and
 * policy change only through role-checked commands, the CLI and the API.
 */
import { createHash, randomInt, randomUUID } from 'node:crypto';
import { sessionWorkflowId, type ConversationKey } from '../common/ids.js';
import { mayGrant, RoleSchema, type Actor, type Role } from '../common/roles.js';
import type { Platform } from '../common/schemas.js';
import type { Db } from './db.js';
import { deliverOnce, type Button, type Senders } from './outbox.js';
import { isUniqueViolation } from './prisma-errors.js';

// Who is acting lives in common/roles.ts (adapters take it from there); kept here for the domain's callers.
export { OPERATOR, type Actor } from '../common/roles.js';

/** Platforms whose senders are people Steward must know (fail closed). */
export const GOVERNED_PLATFORMS: readonly Platform[] = ['telegram', 'discord', 'openharness'];

export function isGoverned(platform: Platform): boolean {
  return GOVERNED_PLATFORMS.includes(platform);
}

export function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

function toRole(value: string): Role {
  const r = RoleSchema.safeParse(value);
  // a role outside the catalog in the database gets the least rights
  return r.success ? r.data : 'viewer';
}

export async function findActor(db: Db, platform: Platform, userId: string): Promise<Actor | undefined> {
  const account = await db.platformAccount.findUnique({ where: { platform_userId: { platform, userId } }, include: { identity: true } });
  if (!account) return undefined;
  return { kind: 'person', id: account.identity.id, name: account.identity.name, role: toRole(account.identity.role) };
}

/** Remember where a known person can be reached directly (their DM with the bot). */
export async function rememberDm(db: Db, platform: Platform, userId: string, account: string, chatId: string): Promise<void> {
  await db.platformAccount.updateMany({ where: { platform, userId, OR: [{ dmChatId: null }, { dmChatId: { not: chatId } }] }, data: { dmChatId: chatId, dmAccount: account } });
}

export interface BindingRecord {
  id: string;
  platform: string;
  account: string;
  chatId: string;
  name: string | null;
  mode: 'mention' | 'all';
  model: string | null;
  adminChannel: boolean;
}

function toBinding(b: { id: string; platform: string; account: string; chatId: string; name: string | null; mode: string; model: string | null; adminChannel: boolean }): BindingRecord {
  return { ...b, mode: b.mode === 'all' ? 'all' : 'mention' };
}

export type BindingLookup = { kind: 'bound'; binding: BindingRecord } | { kind: 'unbound' } | { kind: 'ambiguous'; bindings: BindingRecord[] };

/**
 * The binding of a chat: one for this bot account, or one for every account ("*"). Both at
 * once is ambiguous (two bindings claim the chat with their own settings): fail closed until
 * an admin removes one.
 */
export async function lookupBinding(db: Db, platform: Platform, account: string, chatId: string): Promise<BindingLookup> {
  const rows = await db.binding.findMany({ where: { platform, chatId, account: { in: [account, '*'] } } });
  if (rows.length === 0) return { kind: 'unbound' };
  if (rows.length > 1) return { kind: 'ambiguous', bindings: rows.map(toBinding) };
  return { kind: 'bound', binding: toBinding(rows[0]!) };
}

export interface BindInput {
  platform: Platform;
  account: string;
  chatId: string;
  mode?: 'mention' | 'all';
  name?: string;
  model?: string;
  adminChannel?: boolean;
  createdBy: string;
}

export class GovernanceError extends Error {
  override readonly name = 'GovernanceError';
}

/** Create or change a binding. A name is unique per platform. */
export async function bindChat(db: Db, input: BindInput): Promise<BindingRecord> {
  if (input.name) {
    const clash = await db.binding.findFirst({ where: { name: input.name, NOT: { platform: input.platform, account: input.account, chatId: input.chatId } } });
    if (clash) throw new GovernanceError(`the name "${input.name}" is already used by ${clash.platform} chat ${clash.chatId}`);
  }
  const data = {
    ...(input.mode ? { mode: input.mode } : {}),
    ...(input.name !== undefined ? { name: input.name } : {}),
    ...(input.model !== undefined ? { model: input.model } : {}),
    ...(input.adminChannel !== undefined ? { adminChannel: input.adminChannel } : {}),
  };
  const row = await db.binding.upsert({
    where: { platform_account_chatId: { platform: input.platform, account: input.account, chatId: input.chatId } },
    create: { id: randomUUID(), platform: input.platform, account: input.account, chatId: input.chatId, mode: input.mode ?? 'mention', createdBy: input.createdBy, ...data },
    update: data,
  });
  return toBinding(row);
}

export async function unbindChat(db: Db, platform: Platform, account: string, chatId: string): Promise<number> {
  const r = await db.binding.deleteMany({ where: { platform, chatId, account: { in: [account, '*'] } } });
  return r.count;
}

export async function adminChannelExists(db: Db): Promise<boolean> {
  return (await db.binding.count({ where: { adminChannel: true } })) > 0;
}

/** A binding as stored (the mode as written, and when it was made). */
export interface BindingRow {
  id: string;
  platform: string;
  account: string;
  chatId: string;
  name: string | null;
  mode: string;
  model: string | null;
  adminChannel: boolean;
  createdAt: Date;
}

const BINDING_SELECT = { id: true, platform: true, account: true, chatId: true, name: true, mode: true, model: true, adminChannel: true, createdAt: true } as const;

/** Every binding, oldest first. */
export async function listBindings(db: Db): Promise<BindingRow[]> {
  return db.binding.findMany({ select: BINDING_SELECT, orderBy: { createdAt: 'asc' } });
}

/** One binding by id. */
export async function findBinding(db: Db, id: string): Promise<BindingRow | undefined> {
  return (await db.binding.findUnique({ where: { id }, select: BINDING_SELECT })) ?? undefined;
}

/** Remove a binding by id; false when there was none. */
export async function deleteBinding(db: Db, id: string): Promise<boolean> {
  return (await db.binding.deleteMany({ where: { id } })).count > 0;
}

// ---------------------------------------------------------------------------------------
// Identities

export interface NewIdentity {
  name: string;
  role: Role;
  accounts: Array<{ platform: Platform; userId: string; displayName?: string; dmChatId?: string; dmAccount?: string }>;
  createdBy: string;
}

export async function createIdentity(db: Db, input: NewIdentity): Promise<{ id: string }> {
  const id = randomUUID();
  try {
    await db.identity.create({
      data: {
        id,
        name: input.name,
        role: input.role,
        createdBy: input.createdBy,
        accounts: {
          create: input.accounts.map((a) => ({
            platform: a.platform,
            userId: a.userId,
            displayName: a.displayName ?? null,
            dmChatId: a.dmChatId ?? null,
            dmAccount: a.dmAccount ?? null,
          })),
        },
      },
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw new GovernanceError('one of these platform accounts already belongs to someone');
    throw err;
  }
  return { id };
}

/** An identity as stored, with its platform accounts (the role as written: see toRole). */
export interface IdentityRow {
  id: string;
  name: string;
  role: string;
  createdAt: Date;
  accounts: Array<{ platform: string; userId: string; displayName: string | null; dmChatId: string | null }>;
}

const IDENTITY_SELECT = {
  id: true,
  name: true,
  role: true,
  createdAt: true,
  accounts: { select: { platform: true, userId: true, displayName: true, dmChatId: true } },
} as const;

/** Every identity with its platform accounts, oldest first. */
export async function listIdentities(db: Db): Promise<IdentityRow[]> {
  return db.identity.findMany({ select: IDENTITY_SELECT, orderBy: { createdAt: 'asc' } });
}

/** One identity with its platform accounts. */
export async function findIdentity(db: Db, id: string): Promise<IdentityRow | undefined> {
  return (await db.identity.findUnique({ where: { id }, select: IDENTITY_SELECT })) ?? undefined;
}

/** Change an identity's name and/or role; the identity afterwards (throws when there is none). */
export async function updateIdentity(db: Db, id: string, change: { name?: string; role?: Role }): Promise<IdentityRow> {
  return db.identity.update({ where: { id }, data: { ...(change.name ? { name: change.name } : {}), ...(change.role ? { role: change.role } : {}) }, select: IDENTITY_SELECT });
}

/** Forget an identity (its platform accounts go with it); false when there was none. */
export async function deleteIdentity(db: Db, id: string): Promise<boolean> {
  return (await db.identity.deleteMany({ where: { id } })).count > 0;
}

/** The names and roles of these identities (ids that match none are left out). */
export async function findIdentitiesByIds(db: Db, ids: string[]): Promise<Array<{ id: string; name: string; role: string }>> {
  return db.identity.findMany({ where: { id: { in: ids } }, select: { id: true, name: true, role: true } });
}

// ---------------------------------------------------------------------------------------
// Pairing

const CODE_ALPHABET = 'ABCDEFGHJKLMNPQRSTUVWXYZ23456789';
/** Pairing requests one platform account may make per day. */
export const PAIRING_REQUESTS_PER_DAY = 3;

export function newPairingCode(): string {
  let code = '';
  for (let i = 0; i < 8; i++) code += CODE_ALPHABET[randomInt(CODE_ALPHABET.length)];
  return code;
}

export interface PairingRequester {
  platform: Platform;
  account: string;
  userId: string;
  chatId: string;
  displayName: string;
}

export type PairingIssue = { ok: true; code: string; expiresAt: Date } | { ok: false; reason: 'limited'; message: string };

/** Issue a one-time pairing code (stored hashed); an earlier pending code of the same person is replaced. */
export async function requestPairing(db: Db, who: PairingRequester, ttlMs: number, now = new Date()): Promise<PairingIssue> {
  const since = new Date(now.getTime() - 86_400_000);
  // a code that never reached its requester (the send failed) does not use up a request
  const recent = await db.pairing.count({ where: { platform: who.platform, userId: who.userId, createdAt: { gt: since }, status: { not: 'undelivered' } } });
  if (recent >= PAIRING_REQUESTS_PER_DAY) {
    return { ok: false, reason: 'limited', message: `You have asked to pair ${recent} times today; the limit is ${PAIRING_REQUESTS_PER_DAY}. Try again tomorrow.` };
  }
  await db.pairing.updateMany({ where: { platform: who.platform, userId: who.userId, status: 'pending' }, data: { status: 'replaced' } });
  const code = newPairingCode();
  const expiresAt = new Date(now.getTime() + ttlMs);
  await db.pairing.create({
    data: { id: randomUUID(), tokenHash: sha256(code), platform: who.platform, account: who.account, userId: who.userId, chatId: who.chatId, displayName: who.displayName, status: 'pending', expiresAt },
  });
  return { ok: true, code, expiresAt };
}

/**
 * A pairing code whose answer could not be delivered: it can never be used (nobody saw it), so
 * it is withdrawn and does not count against the requester's daily limit. Only a pending code.
 */
export async function withdrawUndeliveredPairing(db: Db, code: string): Promise<boolean> {
  const r = await db.pairing.updateMany({ where: { tokenHash: sha256(code), status: 'pending' }, data: { status: 'undelivered' } });
  return r.count === 1;
}

export interface PairingRecord {
  id: string;
  platform: Platform;
  account: string;
  userId: string;
  chatId: string;
  displayName: string;
  status: string;
  role: string | null;
  expiresAt: Date;
  decidedBy: string | null;
  createdAt: Date;
}

export type PairingDecision =
  | { ok: true; pairing: PairingRecord; identityId?: string }
  | { ok: false; reason: 'unknown' | 'expired' | 'used' | 'forbidden' | 'already-paired'; message: string };

/**
 * Approve (with a role) or deny a pairing code. A code works once: a second use, an expired
 * code or an unknown one is refused with the reason, and nothing changes.
 */
export async function decidePairing(db: Db, code: string, decision: { approve: Role } | 'deny', by: Actor, now = new Date()): Promise<PairingDecision> {
  const row = await db.pairing.findUnique({ where: { tokenHash: sha256(code.trim().toUpperCase()) } });
  if (!row) return { ok: false, reason: 'unknown', message: 'No pairing request has this code.' };
  const pairing = row as PairingRecord;
  if (row.status !== 'pending') {
    const how = row.status === 'approved' ? `already approved${row.decidedBy ? ` by ${row.decidedBy}` : ''}` : row.status === 'denied' ? `already denied${row.decidedBy ? ` by ${row.decidedBy}` : ''}` : row.status === 'replaced' ? 'replaced by a newer request' : row.status;
    return { ok: false, reason: row.status === 'expired' ? 'expired' : 'used', message: `This pairing code cannot be used again: ${how}.` };
  }
  if (row.expiresAt.getTime() <= now.getTime()) {
    await db.pairing.updateMany({ where: { id: row.id, status: 'pending' }, data: { status: 'expired' } });
    return { ok: false, reason: 'expired', message: `This pairing code expired at ${row.expiresAt.toISOString()}; ${row.displayName} can send /pair again.` };
  }
  if (decision !== 'deny' && !mayGrant(by.role, decision.approve)) {
    return { ok: false, reason: 'forbidden', message: `An ${by.role} cannot give the ${decision.approve} role.` };
  }
  const status = decision === 'deny' ? 'denied' : 'approved';
  try {
    return await db.$transaction(async (tx) => {
      const claimed = await tx.pairing.updateMany({
        where: { id: row.id, status: 'pending' },
        data: { status, decidedBy: by.name, decidedAt: now, ...(decision !== 'deny' ? { role: decision.approve } : {}) },
      });
      if (claimed.count !== 1) throw new GovernanceError('used');
      if (decision === 'deny') return { ok: true as const, pairing: { ...pairing, status } };
      const existing = await tx.platformAccount.findUnique({ where: { platform_userId: { platform: row.platform, userId: row.userId } } });
      if (existing) throw new GovernanceError('already-paired');
      const identityId = randomUUID();
      await tx.identity.create({
        data: {
          id: identityId,
          name: row.displayName,
          role: decision.approve,
          createdBy: by.id,
          accounts: { create: [{ platform: row.platform, userId: row.userId, displayName: row.displayName, dmChatId: row.chatId, dmAccount: row.account }] },
        },
      });
      return { ok: true as const, pairing: { ...pairing, status, role: decision.approve }, identityId };
    });
  } catch (err) {
    if (err instanceof GovernanceError && err.message === 'used') return { ok: false, reason: 'used', message: 'This pairing code was just used by someone else.' };
    if (err instanceof GovernanceError && err.message === 'already-paired') {
      return { ok: false, reason: 'already-paired', message: `${row.displayName} is already paired.` };
    }
    throw err;
  }
}

export async function pendingPairings(db: Db, now = new Date()): Promise<PairingRecord[]> {
  const rows = await db.pairing.findMany({ where: { status: 'pending', expiresAt: { gt: now } }, orderBy: { createdAt: 'asc' }, take: 100 });
  return rows as PairingRecord[];
}

// ---------------------------------------------------------------------------------------
// Approvals

export interface ApprovalRecord {
  id: string;
  workflowId: string;
  sessionId: string;
  turnId: string;
  tool: string;
  summary: string;
  payload: string;
  risk: string;
  requestedBy: string | null;
  status: string;
  decidedBy: string | null;
  reason: string | null;
  deadline: Date;
  createdAt: Date;
  decidedAt: Date | null;
}

export async function findApproval(db: Db, id: string): Promise<ApprovalRecord | null> {
  return (await db.approval.findUnique({ where: { id: id.toLowerCase() } })) as ApprovalRecord | null;
}

export async function listApprovals(db: Db, opts: { status?: string; limit?: number } = {}): Promise<ApprovalRecord[]> {
  return (await db.approval.findMany({
    where: opts.status ? { status: opts.status } : {},
    orderBy: { createdAt: 'desc' },
    take: Math.min(opts.limit ?? 100, 1000),
  })) as ApprovalRecord[];
}

/** A pending approval as a shell is shown it. */
export type PendingApproval = Pick<ApprovalRecord, 'id' | 'turnId' | 'tool' | 'summary' | 'payload' | 'risk' | 'deadline'>;

/** The approvals a session's turns wait for, oldest first. */
export async function pendingApprovalsOfSession(db: Db, sessionId: string): Promise<PendingApproval[]> {
  return db.approval.findMany({
    where: { sessionId, status: 'pending' },
    orderBy: { createdAt: 'asc' },
    select: { id: true, turnId: true, tool: true, summary: true, payload: true, risk: true, deadline: true },
  });
}

export function approvalButtons(id: string): Button[][] {
  return [[{ id: `apr:${id}:y`, label: 'Approve', style: 'primary' }, { id: `apr:${id}:n`, label: 'Deny', style: 'danger' }]];
}

/** Parse a button id made by approvalButtons. */
export function parseApprovalButton(data: string): { id: string; decision: 'approve' | 'deny' } | undefined {
  const m = /^apr:([a-z0-9]{4,16}):([yn])$/.exec(data);
  return m ? { id: m[1]!, decision: m[2] === 'y' ? 'approve' : 'deny' } : undefined;
}

// ---------------------------------------------------------------------------------------
// Notifications to admins

export interface NoticeTarget {
  conversation: ConversationKey;
  deliveryKey: string;
  externalIds: string[];
}

/** The conversations admin notifications go to: the admin channel(s), else every admin's DM. */
export async function adminConversations(db: Db, senders: Senders): Promise<ConversationKey[]> {
  const channels = await db.binding.findMany({ where: { adminChannel: true }, orderBy: { createdAt: 'asc' } });
  const reachable = (p: string): p is Platform => Object.hasOwn(senders, p);
  if (channels.length > 0) {
    return channels.filter((c) => reachable(c.platform)).map((c) => ({ platform: c.platform as Platform, account: c.account === '*' ? 'default' : c.account, chatId: c.chatId }));
  }
  const admins = await db.platformAccount.findMany({
    where: { dmChatId: { not: null }, identity: { role: { in: ['admin', 'overlord'] } } },
    orderBy: { createdAt: 'asc' },
  });
  return admins
    .filter((a) => reachable(a.platform) && a.dmChatId)
    .map((a) => ({ platform: a.platform as Platform, account: a.dmAccount ?? 'default', chatId: a.dmChatId! }));
}

/** Send a notification to the admins (outbox-keyed per target, so a retry posts nothing twice). */
export async function notifyAdmins(db: Db, senders: Senders, note: { key: string; text: string; buttons?: Button[][] }): Promise<NoticeTarget[]> {
  const out: NoticeTarget[] = [];
  for (const conversation of await adminConversations(db, senders)) {
    const deliveryKey = `${note.key}:${conversation.platform}:${conversation.chatId}`;
    const r = await deliverOnce(db, senders, {
      key: deliveryKey,
      sessionId: sessionWorkflowId(conversation),
      conversation,
      kind: 'notice',
      text: note.text,
      ...(note.buttons ? { buttons: note.buttons } : {}),
    });
    out.push({ conversation, deliveryKey, externalIds: r.externalIds });
  }
  return out;
}

/**
 * Ask the admins to decide an approval (admin channel, else their DMs) with Approve/Deny
 * buttons, and remember where each request was posted so the post can show the decision.
 * Keyed by the approval id: a retry posts nothing twice.
 */
export async function askAdminsToApprove(db: Db, senders: Senders, approvalId: string, text: string): Promise<NoticeTarget[]> {
  const targets = await notifyAdmins(db, senders, { key: `approval:${approvalId}`, text, buttons: approvalButtons(approvalId) });
  for (const t of targets) {
    await db.approvalNotice.upsert({
      where: { approvalId_deliveryKey: { approvalId, deliveryKey: t.deliveryKey } },
      create: { approvalId, deliveryKey: t.deliveryKey, platform: t.conversation.platform, account: t.conversation.account, chatId: t.conversation.chatId },
      update: {},
    });
  }
  return targets;
}
