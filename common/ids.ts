/** Deterministic identifiers. Pure. */
import type { Platform } from './schemas.js';

export interface ConversationKey {
  platform: Platform;
  account: string;
  chatId: string;
}

/** One session workflow per conversation: platform + account + chat. */
export function sessionWorkflowId(key: ConversationKey): string {
  return `session:${key.platform}:${key.account}:${key.chatId}`;
}

/**
 * A turn's workflow id. `epoch` is the first run id of the session's continue-as-new chain,
 * so a session that was terminated and started again never reuses an old turn's id (and so
 * never hits an old turn's outbox key).
 */
export function turnWorkflowId(sessionId: string, epoch: string, turnNumber: number): string {
  return `${sessionId}:turn:${turnNumber}:${epoch.slice(0, 8)}`;
}

/** Idempotency key of the outbound message that ends a turn. */
export function replyKey(turnId: string): string {
  return `${turnId}:reply`;
}
