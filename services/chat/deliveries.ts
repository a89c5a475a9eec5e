/**
 * What the chat feature sends, and the contract of the platform senders that send it.
 *
 * - The intake's own messages (a command's answer, a refusal, a pairing notice) go out through
 *   the outbox here: keyed, so each is sent once, and recorded in the transcript.
 * - The platform senders (adapters/telegram/sender.ts, adapters/discord/sender.ts) implement
 *   `ChannelSender` and report a failed call as a `DeliveryError` (permanent, or retry after);
 *   the outbox (domain/outbox.ts) drives them and keeps each part's state.
 */
import type { Logger } from 'pino';
import type { Db } from '../../domain/db.js';
import { deliverOnce, type Button, type Senders } from '../../domain/outbox.js';
import { sessionWorkflowId, type ConversationKey } from '../../common/ids.js';
import type { InboundMessage } from '../../common/schemas.js';
import { inboundKey } from './keys.js';
import type { IngressResult } from './intake.js';

export { DeliveryError } from '../../domain/outbox.js';
export type { Button, ChannelSender, OutboundFile, OutboundPart, Senders } from '../../domain/outbox.js';

/** What sending a chat message needs: the store, the platform senders, and who hears of it. */
export interface DeliveryContext {
  db: Db;
  senders: Senders;
  log?: Logger;
  /** Called after a message lands in a transcript (live updates for adapters). */
  onTranscript?: (sessionId: string, role: 'user' | 'assistant' | 'system') => void;
}

/** Send a notice to one conversation through the outbox (keyed: sent once); a failure is logged. */
export async function deliverNotice(ctx: DeliveryContext, conversation: ConversationKey, key: string, text: string, buttons?: Button[][]): Promise<void> {
  const sessionId = sessionWorkflowId(conversation);
  try {
    await deliverOnce(ctx.db, ctx.senders, { key, sessionId, conversation, kind: 'notice', text, ...(buttons ? { buttons } : {}) });
    ctx.onTranscript?.(sessionId, 'system');
  } catch (err) {
    ctx.log?.warn({ err, key }, 'notice could not be delivered');
  }
}

/**
 * The intake's own answer (a command's reply, a refusal) sent back to the chat it came from,
 * where a sender for its platform is registered. 'failed': it did not reach the chat (logged).
 */
export async function deliverAnswer(ctx: DeliveryContext, raw: InboundMessage, result: IngressResult): Promise<'sent' | 'none' | 'failed'> {
  if (!result.reply || !ctx.senders[raw.platform]) return 'none';
  const conversation: ConversationKey = { platform: raw.platform, account: raw.account, chatId: raw.chatId };
  let failed: unknown;
  try {
    const out = await deliverOnce(ctx.db, ctx.senders, {
      key: `${inboundKey(raw)}:answer`,
      sessionId: result.workflowId,
      conversation,
      kind: 'notice',
      text: result.reply,
      ...(result.replyRecordAs ? { recordAs: result.replyRecordAs } : {}),
    });
    if (out.sent) ctx.onTranscript?.(result.workflowId, 'system');
    if (out.failed) failed = out.failed;
  } catch (err) {
    failed = err;
  }
  if (failed === undefined) return 'sent';
  ctx.log?.warn({ err: failed, platform: raw.platform, chatId: raw.chatId }, 'the answer could not be delivered');
  return 'failed';
}
