/**
 * The store of sessions: one row per conversation's session (its id is the session workflow's
 * id), made sure of when the first message arrives; rows are never deleted.
 */
import type { ConversationKey } from '../../common/ids.js';
import type { Db } from '../db.js';

/** The session's conversation, if the session is known. */
export async function findSession(db: Db, id: string): Promise<{ id: string; platform: string; account: string; chatId: string } | null> {
  return db.session.findUnique({ where: { id }, select: { id: true, platform: true, account: true, chatId: true } });
}

/** Make sure the session's row exists (an existing one is left as it is). */
export async function ensureSession(db: Db, id: string, conversation: ConversationKey): Promise<void> {
  await db.session.upsert({ where: { id }, create: { id, platform: conversation.platform, account: conversation.account, chatId: conversation.chatId }, update: {} });
}

/** The ids of the sessions of a chat id (on any platform), at most `limit`. */
export async function sessionIdsOfChat(db: Db, chatId: string, limit = 1000): Promise<string[]> {
  return (await db.session.findMany({ where: { chatId }, select: { id: true }, take: limit })).map((r) => r.id);
}

/** How many sessions there are (also a cheap probe that the database answers). */
export async function countSessions(db: Db): Promise<number> {
  return db.session.count();
}
