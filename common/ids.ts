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

/** The transcript key of an inbound message (its platform's message id within the chat): what ingress dedups by. */
export function inboundMessageKey(msg: { platform: string; account: string; chatId: string; id: string }): string {
  return `in:${msg.platform}:${msg.account}:${msg.chatId}:${msg.id}`;
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

/** The outbox key of the notice a turn stopped by /stop ends with (a stopped turn writes no end receipt). */
export function stoppedKey(turnId: string): string {
  return `${turnId}:stopped`;
}

/** 53 bits of a string's hash (cyrb53): deterministic and pure, for ids workflows derive. */
export function hash53(text: string, seed = 0): number {
  let h1 = 0xdeadbeef ^ seed;
  let h2 = 0x41c6ce57 ^ seed;
  for (let i = 0; i < text.length; i++) {
    const ch = text.charCodeAt(i);
    h1 = Math.imul(h1 ^ ch, 2654435761);
    h2 = Math.imul(h2 ^ ch, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return 4294967296 * (2097151 & h2) + (h1 >>> 0);
}

const ID_ALPHABET = 'abcdefghjkmnpqrstuvwxyz23456789';

/**
 * A proposed action's approval id: short enough to type (`/approve-action k3m9x2q7`), the same
 * for the same proposal, so the turn workflow knows it before the admins are asked and a
 * retried activity finds its row.
 */
export function approvalIdFor(turnId: string, toolCallId: string): string {
  let n = hash53(`${turnId}\u0000${toolCallId}`);
  let id = '';
  for (let i = 0; i < 8; i++) {
    id += ID_ALPHABET[n % ID_ALPHABET.length];
    n = Math.floor(n / ID_ALPHABET.length);
  }
  return id;
}

/**
 * The transcript key of an objective run's prompt. Only Steward writes it (inbound messages are
 * keyed `in:...`), and the text under it is composed through the one wrapper (the admin's prompt
 * neutralised, then the event's own block), so the prompt keeps that block real.
 */
export function objectiveRunMessageKey(runId: string): string {
  return `objective:${runId}`;
}

export function isObjectiveRunMessageKey(key: string): boolean {
  return key.startsWith('objective:');
}

/** The replay's activities run on `<background queue>-replay` (e.g. `steward-background-replay`; common/replay.ts). */
export const REPLAY_QUEUE_SUFFIX = '-replay';

/** The replay task queue of a background queue. */
export function replayQueueOf(backgroundQueue: string): string {
  return `${backgroundQueue}${REPLAY_QUEUE_SUFFIX}`;
}

/**
 * The turn id a replayed turn runs under: `replay:<replay id>:<recorded turn id>`. The replay's
 * activities read the replay and the recorded turn from it; no production key (receipts, the
 * outbox, approvals, spend reservations) can collide with it.
 */
export function replayTurnId(replayId: string, turnId: string): string {
  return `replay:${replayId}:${turnId}`;
}

/** The replay id and the recorded turn id of a replayed turn's id, or undefined for any other turn. */
export function parseReplayTurnId(id: string): { replayId: string; turnId: string } | undefined {
  const m = /^replay:([^:]+):(.+)$/.exec(id);
  return m ? { replayId: m[1]!, turnId: m[2]! } : undefined;
}
