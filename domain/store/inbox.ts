/**
 * The store of workspaces' IMAP inboxes: WorkspaceInbox (the operator's settings, with the
 * password by reference only, and the poll's state: UIDVALIDITY, the last UID handled, the last
 * error) and InboxMessage (each message handled, by (UIDVALIDITY, UID) and by its key, so a
 * message is stored once). Plain rows in and out; the rules live in services/inbox.ts and the
 * poller (adapters/workspace-inbox.ts).
 */
import type { ConversationKey } from '../../common/ids.js';
import type { Platform } from '../../common/schemas.js';
import type { WorkspaceInbox } from '../../generated/prisma/sqlite/client.js';
import type { Db } from '../db.js';
import { isUniqueViolation } from '../prisma-errors.js';

export type WorkspaceInboxRow = WorkspaceInbox;

/** The settings the operator gives (the state is the poller's). */
export interface InboxSettings {
  host: string;
  port: number;
  tls: 'implicit' | 'starttls' | 'none';
  user: string;
  passwordRef: string;
  folder: string;
}

export function findInbox(db: Db, workspace: string): Promise<WorkspaceInboxRow | null> {
  return db.workspaceInbox.findUnique({ where: { workspace } });
}

export function listInboxes(db: Db): Promise<WorkspaceInboxRow[]> {
  return db.workspaceInbox.findMany({ orderBy: { workspace: 'asc' } });
}

/**
 * Set a workspace's inbox. A different mailbox (host, user or folder changed) starts from its
 * first message again (Message-IDs already stored are still not stored twice); the last error
 * goes, as the next poll will tell.
 */
export async function upsertInbox(db: Db, workspace: string, s: InboxSettings, by: string | null): Promise<WorkspaceInboxRow> {
  const before = await findInbox(db, workspace);
  const otherMailbox = !before || before.host !== s.host || before.user !== s.user || before.folder !== s.folder;
  return db.workspaceInbox.upsert({
    where: { workspace },
    create: { workspace, ...s, createdBy: by },
    update: { ...s, lastError: null, lastErrorAt: null, ...(otherMailbox ? { uidValidity: null, lastUid: 0n } : {}) },
  });
}

export async function deleteInbox(db: Db, workspace: string): Promise<boolean> {
  return (await db.workspaceInbox.deleteMany({ where: { workspace } })).count > 0;
}

/** The folder's UIDVALIDITY changed (or was first seen): the UIDs handled so far mean nothing. */
export async function resetInboxUids(db: Db, workspace: string, uidValidity: bigint): Promise<void> {
  await db.workspaceInbox.updateMany({ where: { workspace }, data: { uidValidity, lastUid: 0n } });
}

/** Remember a UID as handled (never moves back). */
export async function advanceInboxUid(db: Db, workspace: string, uidValidity: bigint, uid: bigint): Promise<void> {
  await db.workspaceInbox.updateMany({ where: { workspace, uidValidity, lastUid: { lt: uid } }, data: { lastUid: uid } });
}

export async function markInboxOk(db: Db, workspace: string): Promise<void> {
  await db.workspaceInbox.updateMany({ where: { workspace }, data: { lastError: null, lastErrorAt: null, lastSuccessAt: new Date() } });
}

/** A poll went through (the folder read). */
export async function markInboxPolled(db: Db, workspace: string): Promise<void> {
  await db.workspaceInbox.updateMany({ where: { workspace }, data: { lastSuccessAt: new Date() } });
}

/** Record a failed poll; returns whether the inbox was fine before (a new failure). */
export async function markInboxFailed(db: Db, workspace: string, error: string): Promise<boolean> {
  const fresh = await db.workspaceInbox.updateMany({ where: { workspace, lastError: null }, data: { lastError: error, lastErrorAt: new Date() } });
  if (fresh.count === 0) await db.workspaceInbox.updateMany({ where: { workspace }, data: { lastError: error } });
  return fresh.count > 0;
}

export function findInboxMessageByUid(db: Db, workspace: string, uidValidity: bigint, uid: bigint) {
  return db.inboxMessage.findUnique({ where: { workspace_uidValidity_uid: { workspace, uidValidity, uid } } });
}

export function findInboxMessageByKey(db: Db, workspace: string, messageKey: string) {
  return db.inboxMessage.findUnique({ where: { workspace_messageKey: { workspace, messageKey } } });
}

/**
 * Record a message as handled and its UID as the last one, together. False when its key was
 * recorded already (the same message under another UID meanwhile): the UID still advances.
 */
export async function recordInboxMessage(
  db: Db,
  m: { workspace: string; uidValidity: bigint; uid: bigint; messageKey: string; status: 'stored' | 'failed'; path: string | null },
): Promise<boolean> {
  try {
    await db.$transaction([
      db.inboxMessage.create({ data: m }),
      db.workspaceInbox.updateMany({ where: { workspace: m.workspace, uidValidity: m.uidValidity, lastUid: { lt: m.uid } }, data: { lastUid: m.uid } }),
    ]);
    return true;
  } catch (err) {
    if (!isUniqueViolation(err)) throw err;
    await advanceInboxUid(db, m.workspace, m.uidValidity, m.uid);
    return false;
  }
}

export async function countInboxMessages(db: Db, workspace: string): Promise<{ stored: number; failed: number }> {
  const [stored, failed] = await Promise.all([
    db.inboxMessage.count({ where: { workspace, status: 'stored' } }),
    db.inboxMessage.count({ where: { workspace, status: 'failed' } }),
  ]);
  return { stored, failed };
}

/** The chats bound to a workspace. */
export async function workspaceChats(db: Db, workspace: string): Promise<ConversationKey[]> {
  const rows = await db.workspaceBinding.findMany({ where: { workspace }, orderBy: { createdAt: 'asc' } });
  return rows.map((r) => ({ platform: r.platform as Platform, account: r.account, chatId: r.chatId }));
}
