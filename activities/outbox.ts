/**
 * The outbox: every outbound message gets a row keyed by an idempotency key before it is
 * sent, and is marked sent afterwards, so a retried delivery never sends twice. For the HTTP
 * API and the CLI the transcript is the channel; chat platforms register a sender.
 */
import type { ConversationKey } from '../common/ids.js';
import type { Platform } from '../common/schemas.js';
import type { Db } from './db.js';
import { isUniqueViolation } from './prisma-errors.js';

export interface OutboundMessage {
  key: string;
  sessionId: string;
  conversation: ConversationKey;
  kind: 'reply' | 'notice';
  text: string;
  turnId?: string;
}

/** Sends one message on a chat platform; returns the platform's message id. */
export type Sender = (msg: OutboundMessage) => Promise<string | undefined>;
export type Senders = Partial<Record<Platform, Sender>>;

export interface DeliveryOutcome {
  /** False when the key had already been delivered: nothing was sent this time. */
  sent: boolean;
  messageSeq: number;
}

export async function deliverOnce(db: Db, senders: Senders, msg: OutboundMessage): Promise<DeliveryOutcome> {
  let row = await db.delivery.findUnique({ where: { key: msg.key } });
  if (row?.status === 'sent') return { sent: false, messageSeq: row.messageSeq ?? 0 };
  if (!row) {
    try {
      row = await db.$transaction(async (tx) => {
        const message = await tx.message.create({
          data: {
            key: msg.key,
            sessionId: msg.sessionId,
            role: msg.kind === 'reply' ? 'assistant' : 'system',
            text: msg.text,
            turnId: msg.turnId ?? null,
          },
        });
        return tx.delivery.create({
          data: {
            key: msg.key,
            sessionId: msg.sessionId,
            platform: msg.conversation.platform,
            chatId: msg.conversation.chatId,
            kind: msg.kind,
            status: 'pending',
            messageSeq: message.seq,
          },
        });
      });
    } catch (err) {
      if (!isUniqueViolation(err)) throw err;
      row = await db.delivery.findUniqueOrThrow({ where: { key: msg.key } });
      if (row.status === 'sent') return { sent: false, messageSeq: row.messageSeq ?? 0 };
    }
  }
  const sender = senders[msg.conversation.platform];
  const externalId = sender ? await sender(msg) : undefined;
  await db.delivery.update({
    where: { key: msg.key },
    data: { status: 'sent', attempts: { increment: 1 }, sentAt: new Date(), externalId: externalId ?? null },
  });
  return { sent: true, messageSeq: row.messageSeq ?? 0 };
}
