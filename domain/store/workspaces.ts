/**
 * The store of workspaces: Workspace (a name and its folder) and WorkspaceBinding (a chat's
 * workspace). Plain rows in and out; the rules (names, folders, who may) live in the
 * workspace service.
 */
import type { ConversationKey } from '../../common/ids.js';
import type { Workspace, WorkspaceBinding } from '../../generated/prisma/sqlite/client.js';
import type { Db } from '../db.js';
import { isUniqueViolation } from '../prisma-errors.js';

export type WorkspaceRow = Workspace;
export type WorkspaceBindingRow = WorkspaceBinding;

/** A workspace by its name, or null. */
export function findWorkspace(db: Db, name: string): Promise<WorkspaceRow | null> {
  return db.workspace.findUnique({ where: { name } });
}

/** Every workspace with the number of chats bound to it, by name. */
export async function listWorkspaces(db: Db): Promise<Array<WorkspaceRow & { chats: number }>> {
  const rows = await db.workspace.findMany({ orderBy: { name: 'asc' }, include: { _count: { select: { bindings: true } } } });
  return rows.map(({ _count, ...w }) => ({ ...w, chats: _count.bindings }));
}

/** Create a workspace; false when the name is taken. */
export async function insertWorkspace(db: Db, row: Pick<WorkspaceRow, 'name' | 'root' | 'createdBy'>): Promise<boolean> {
  try {
    await db.workspace.create({ data: row });
    return true;
  } catch (err) {
    if (isUniqueViolation(err)) return false;
    throw err;
  }
}

/** The chat's workspace binding, or null. */
export function findWorkspaceBinding(db: Db, chat: ConversationKey): Promise<WorkspaceBindingRow | null> {
  return db.workspaceBinding.findUnique({ where: { platform_account_chatId: { platform: chat.platform, account: chat.account, chatId: chat.chatId } } });
}

/** Bind a chat to a workspace (replacing its binding). */
export async function upsertWorkspaceBinding(db: Db, chat: ConversationKey, workspace: string, by: string | null): Promise<void> {
  const key = { platform: chat.platform, account: chat.account, chatId: chat.chatId };
  await db.workspaceBinding.upsert({ where: { platform_account_chatId: key }, create: { ...key, workspace, createdBy: by }, update: { workspace, createdBy: by } });
}

/** Unbind a chat; false when it had no workspace. */
export async function deleteWorkspaceBinding(db: Db, chat: ConversationKey): Promise<boolean> {
  const r = await db.workspaceBinding.deleteMany({ where: { platform: chat.platform, account: chat.account, chatId: chat.chatId } });
  return r.count > 0;
}
