/**
 * The outbox: every outbound message gets a row keyed by an idempotency key before it is
 * sent, and each platform message it is sent as (a long reply is split into parts) is
 * recorded when it has gone out, so a retried delivery sends only what is still missing and
 * never posts a part twice. For the HTTP API and the CLI the transcript is the channel; chat
 * platforms register a ChannelSender.
 *
 * The one window left is a crash between a platform accepting a part and the row recording
 * it. Discord closes it (every part carries a nonce Discord enforces); Telegram has no such
 * key, so there a part whose outcome is unknown is sent again.
 */
import type { ConversationKey } from '../common/ids.js';
import type { AttachmentRef, Platform } from '../common/schemas.js';
import { getBlob } from './blobs.js';
import type { Db } from './db.js';
import { isUniqueViolation } from './prisma-errors.js';
import { maskHeldSecrets } from './secrets.js';
import { directSql, sqlInt } from './sql.js';

/** A button under a message (Telegram inline keyboard, Discord components). */
export interface Button {
  /** Opaque callback data, at most 64 bytes (Telegram's limit). */
  id: string;
  label: string;
  style?: 'primary' | 'danger' | 'secondary';
}

export interface OutboundMessage {
  key: string;
  sessionId: string;
  conversation: ConversationKey;
  kind: 'reply' | 'notice';
  /** Markdown; each platform renders it in its own dialect. */
  text: string;
  /** What the transcript keeps instead of `text`, when the text holds a secret (a pairing code). */
  recordAs?: string;
  turnId?: string;
  attachments?: AttachmentRef[];
  /** Rows of buttons, shown under the last part. */
  buttons?: Button[][];
}

export interface OutboundFile extends AttachmentRef {
  data: Buffer;
}

export interface OutboundPart {
  index: number;
  count: number;
  /** Markdown of this part (the sender renders it). */
  text: string;
  /** Files go with the last part. */
  files: OutboundFile[];
  buttons?: Button[][];
  /** Stable per part: a platform that supports idempotent sends uses it (Discord's nonce). */
  idempotencyKey: string;
}

/** Sends on one chat platform. Implementations throw DeliveryError for platform failures. */
export interface ChannelSender {
  /** Split Markdown into the parts this platform sends, within its message limit. Deterministic. */
  split(text: string): string[];
  /** Send one part; resolves with the platform's message id. */
  send(conversation: ConversationKey, part: OutboundPart): Promise<string>;
  /** Replace the text (and buttons: `null` removes them) of one of the bot's own messages. */
  edit(conversation: ConversationKey, externalId: string, text: string, buttons?: Button[][] | null): Promise<void>;
  /** Delete one of the bot's own messages. */
  remove(conversation: ConversationKey, externalId: string): Promise<void>;
  /** Least time between two edits of one message (platform rate limits). */
  editIntervalMs: number;
}

export type Senders = Partial<Record<Platform, ChannelSender>>;

/** A platform refused or failed a call. `permanent`: retrying cannot help (chat gone, bot blocked). */
export class DeliveryError extends Error {
  override readonly name = 'DeliveryError';
  readonly retryAfterMs: number | undefined;
  readonly permanent: boolean;
  readonly status: number | undefined;
  constructor(message: string, opts: { retryAfterMs?: number; permanent?: boolean; status?: number; cause?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.retryAfterMs = opts.retryAfterMs;
    this.permanent = opts.permanent ?? false;
    this.status = opts.status;
  }
}

export interface DeliveryOutcome {
  /** False when the key had already been delivered (nothing was sent this time) or delivery failed for good. */
  sent: boolean;
  messageSeq: number;
  /** Platform message ids of the parts, in order (empty for transcript-only channels). */
  externalIds: string[];
  /** Set when the platform refused the message for good (the reason). */
  failed?: string;
}

async function loadFiles(db: Db, refs: AttachmentRef[] | undefined): Promise<OutboundFile[]> {
  const out: OutboundFile[] = [];
  for (const ref of refs ?? []) out.push({ ...ref, data: (await getBlob(db, ref.hash)).data });
  return out;
}

async function partIds(db: Db, key: string): Promise<string[]> {
  const parts = await db.deliveryPart.findMany({ where: { key, status: 'sent' }, orderBy: { part: 'asc' } });
  return parts.flatMap((p) => (p.externalId ? [p.externalId] : []));
}

export async function deliverOnce(db: Db, senders: Senders, input: OutboundMessage): Promise<DeliveryOutcome> {
  // every chat view masks the secrets Steward holds (domain/secrets.ts): replies, notices, approval requests
  const msg: OutboundMessage = { ...input, text: maskHeldSecrets(input.text), ...(input.recordAs !== undefined ? { recordAs: maskHeldSecrets(input.recordAs) } : {}) };
  const sender = senders[msg.conversation.platform];
  // A channel without a sender (the HTTP API reads the transcript) has its message delivered
  // once it is recorded: the delivery is written as sent.
  const recordOnly = !sender;
  // The first attempt records the message and its delivery together (one transaction of two
  // direct statements, domain/sql.ts: every turn's answer passes here); a retry finds them by
  // the key's unique violation (no read before the write on the common path). The delivery's
  // message is the message with the same key.
  let messageSeq: number;
  try {
    const now = new Date();
    messageSeq = await directSql(db).transaction(async (tx) => {
      const [message] = await tx.query('INSERT INTO "Message" ("key", "sessionId", "role", "text", "turnId", "attachments", "createdAt") VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING "seq"', [
        msg.key,
        msg.sessionId,
        msg.kind === 'reply' ? 'assistant' : 'system',
        msg.recordAs ?? msg.text,
        msg.turnId ?? null,
        msg.attachments?.length ? JSON.stringify(msg.attachments) : null,
        now,
      ]);
      await tx.execute('INSERT INTO "Delivery" ("key", "sessionId", "platform", "account", "chatId", "kind", "status", "attempts", "sentAt", "createdAt") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)', [
        msg.key,
        msg.sessionId,
        msg.conversation.platform,
        msg.conversation.account,
        msg.conversation.chatId,
        msg.kind,
        recordOnly ? 'sent' : 'pending',
        recordOnly ? 1 : 0,
        recordOnly ? now : null,
        now,
      ]);
      return sqlInt(message?.seq);
    });
  } catch (err) {
    if (!isUniqueViolation(err)) throw err;
    const row = await db.delivery.findUniqueOrThrow({ where: { key: msg.key } });
    messageSeq = row.messageSeq ?? (await db.message.findUnique({ where: { key: msg.key }, select: { seq: true } }))?.seq ?? 0;
    if (row.status === 'sent' || row.status === 'failed') {
      return { sent: false, messageSeq, externalIds: await partIds(db, msg.key), ...(row.status === 'failed' ? { failed: 'delivery failed earlier' } : {}) };
    }
  }
  if (recordOnly) return { sent: true, messageSeq, externalIds: [] };
  const externalIds: string[] = [];
  const parts = sender.split(msg.text);
  const done = new Map((await db.deliveryPart.findMany({ where: { key: msg.key } })).map((p) => [p.part, p]));
  const files = await loadFiles(db, msg.attachments);
  for (let index = 0; index < parts.length; index++) {
    const previous = done.get(index);
    if (previous?.status === 'sent') {
      if (previous.externalId) externalIds.push(previous.externalId);
      continue;
    }
    const last = index === parts.length - 1;
    // claimed by this attempt alone: a concurrent attempt of the same key (a retry that started
    // while the first still ran, two notices under one key) waits for it instead of sending again
    const claim = await claimPart(db, msg.key, index);
    if (claim.sent) {
      if (claim.externalId) externalIds.push(claim.externalId);
      continue;
    }
    let externalId: string;
    try {
      externalId = await sender.send(msg.conversation, {
        index,
        count: parts.length,
        text: parts[index] ?? '',
        files: last ? files : [],
        ...(last && msg.buttons?.length ? { buttons: msg.buttons } : {}),
        idempotencyKey: `${msg.key}#${index}`,
      });
    } catch (err) {
      // the request failed: the part is free for the next attempt at once (no lease to wait out)
      await db.deliveryPart.update({ where: { key_part: { key: msg.key, part: index } }, data: { status: 'unsent' } });
      await db.delivery.update({ where: { key: msg.key }, data: { attempts: { increment: 1 } } });
      if (err instanceof DeliveryError && err.permanent) {
        await db.delivery.update({ where: { key: msg.key }, data: { status: 'failed' } });
        return { sent: false, messageSeq, externalIds, failed: err.message };
      }
      throw err;
    }
    await db.deliveryPart.update({ where: { key_part: { key: msg.key, part: index } }, data: { status: 'sent', externalId } });
    externalIds.push(externalId);
  }
  await db.delivery.update({
    where: { key: msg.key },
    data: { status: 'sent', attempts: { increment: 1 }, sentAt: new Date(), externalId: externalIds[0] ?? null },
  });
  return { sent: true, messageSeq, externalIds };
}

/**
 * How long a part marked `sending` counts as in flight in another attempt. Past it the attempt
 * is taken as dead (its worker crashed after the request may have gone out) and the part is
 * sent again, with the same idempotency key: at least once to the platform, never twice from
 * two live attempts.
 */
export const SENDING_LEASE_MS = 15_000;
const CLAIM_POLL_MS = 100;

/**
 * Claim one part of a delivery for this attempt: the first attempt creates its row as
 * `sending` (one statement); a later one takes a part whose send failed (`unsent`) or whose
 * `sending` lease ran out, waits while another attempt holds it, and skips it once it is sent.
 */
async function claimPart(db: Db, key: string, part: number): Promise<{ sent: false } | { sent: true; externalId: string | null }> {
  for (;;) {
    try {
      await db.deliveryPart.create({ data: { key, part, status: 'sending' } });
      return { sent: false };
    } catch (err) {
      if (!isUniqueViolation(err)) throw err;
    }
    const stale = new Date(Date.now() - SENDING_LEASE_MS);
    const taken = await db.deliveryPart.updateMany({
      where: { key, part, OR: [{ status: { notIn: ['sent', 'sending'] } }, { status: 'sending', updatedAt: { lt: stale } }] },
      data: { status: 'sending' },
    });
    if (taken.count === 1) return { sent: false };
    const row = await db.deliveryPart.findUnique({ where: { key_part: { key, part } } });
    if (row?.status === 'sent') return { sent: true, externalId: row.externalId };
    await new Promise((resolve) => setTimeout(resolve, CLAIM_POLL_MS));
  }
}

export interface PanelUpdate {
  turnId: string;
  conversation: ConversationKey;
  text: string;
  /** Wait out the edit interval instead of skipping the update (e.g. "waiting for approval"). */
  important?: boolean;
}

export type PanelOutcome = 'posted' | 'edited' | 'unchanged' | 'throttled' | 'unsupported' | 'cleared' | 'none';

/**
 * Show a running turn's progress in one platform message, edited in place: the first update
 * posts it, later ones edit it, at most once per the platform's edit interval (an update that
 * comes sooner is skipped, or for an important one, waited for).
 */
export async function updatePanel(db: Db, senders: Senders, update: PanelUpdate, sleep: (ms: number) => Promise<void>): Promise<PanelOutcome> {
  // the progress line ("Waiting for an admin to approve: ...") is a view too
  const u: PanelUpdate = { ...update, text: maskHeldSecrets(update.text) };
  const sender = senders[u.conversation.platform];
  if (!sender) return 'unsupported';
  const row = await db.progressPanel.findUnique({ where: { turnId: u.turnId } });
  if (row?.status === 'cleared') return 'cleared';
  if (!row || !row.externalId) {
    await db.progressPanel.upsert({
      where: { turnId: u.turnId },
      create: { turnId: u.turnId, platform: u.conversation.platform, account: u.conversation.account, chatId: u.conversation.chatId, text: u.text, status: 'open' },
      update: { text: u.text },
    });
    const externalId = await sender.send(u.conversation, { index: 0, count: 1, text: u.text, files: [], idempotencyKey: `${u.turnId}:panel` });
    await db.progressPanel.update({ where: { turnId: u.turnId }, data: { externalId, text: u.text } });
    return 'posted';
  }
  if (row.text === u.text) return 'unchanged';
  const wait = row.updatedAt.getTime() + sender.editIntervalMs - Date.now();
  if (wait > 0) {
    if (!u.important) return 'throttled';
    await sleep(wait);
  }
  await sender.edit(u.conversation, row.externalId, u.text);
  await db.progressPanel.update({ where: { turnId: u.turnId }, data: { text: u.text } });
  return 'edited';
}

/** Remove a turn's progress panel (the reply has landed). */
export async function clearPanel(db: Db, senders: Senders, turnId: string, conversation: ConversationKey): Promise<PanelOutcome> {
  const row = await db.progressPanel.findUnique({ where: { turnId } });
  if (!row || row.status === 'cleared') return 'none';
  const sender = senders[conversation.platform];
  if (sender && row.externalId) {
    try {
      await sender.remove(conversation, row.externalId);
    } catch (err) {
      // already gone (deleted by someone, or a retry of this very call): nothing to remove
      if (!(err instanceof DeliveryError && err.permanent)) throw err;
    }
  }
  await db.progressPanel.update({ where: { turnId }, data: { status: 'cleared' } });
  return 'cleared';
}

/** The last part of a delivery that was sent (its platform message id is what a later edit targets). */
export async function lastSentPart(db: Db, key: string): Promise<{ externalId: string | null } | null> {
  return db.deliveryPart.findFirst({ where: { key, status: 'sent' }, orderBy: { part: 'desc' }, select: { externalId: true } });
}
