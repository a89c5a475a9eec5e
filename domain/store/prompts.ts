/** The store of chats' own prompt layers (ChatPrompt). Plain rows in and out. */
import type { ConversationKey } from '../../common/ids.js';
import type { ChatPrompt } from '../../generated/prisma/sqlite/client.js';
import type { Db } from '../db.js';

const key = (chat: ConversationKey) => ({ platform_account_chatId: { platform: chat.platform, account: chat.account, chatId: chat.chatId } });

/** The chat's prompt layer, or null. */
export function findChatPrompt(db: Db, chat: ConversationKey): Promise<ChatPrompt | null> {
  return db.chatPrompt.findUnique({ where: key(chat) });
}

/** Set the chat's prompt layer (replacing it). */
export async function upsertChatPrompt(db: Db, chat: ConversationKey, text: string, by: string | null): Promise<void> {
  const ids = { platform: chat.platform, account: chat.account, chatId: chat.chatId };
  await db.chatPrompt.upsert({ where: key(chat), create: { ...ids, text, updatedBy: by }, update: { text, updatedBy: by } });
}

/** Clear the chat's prompt layer; false when it had none. */
export async function deleteChatPrompt(db: Db, chat: ConversationKey): Promise<boolean> {
  const r = await db.chatPrompt.deleteMany({ where: { platform: chat.platform, account: chat.account, chatId: chat.chatId } });
  return r.count > 0;
}
