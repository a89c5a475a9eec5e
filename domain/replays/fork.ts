/**
 * Fork a chat (docs/replay.md "Fork a chat"): what the database holds of it. The session's
 * state just before a turn comes from the turn's first model step in Temporal history
 * (services/replays/fork.ts reads it); this module finds the turn, picks the transcript entries
 * that came before it, and writes the fork's claim in one transaction: the `chat.forked`
 * receipt (keyed by the new session, so a retry or a second fork to the same chat id finds it),
 * the new session's row and its transcript (the copied entries, then a line saying where the
 * chat was forked from). The original chat is only read.
 */
import { z } from 'zod';
import { ChatIdSchema, PlatformSchema } from '../../common/schemas.js';
import type { Db } from '../db.js';
import { writeReceiptIn } from '../receipts.js';
import { directSql } from '../sql.js';
import type { WorkingSet } from '../../workflows/types.js';

/** At most this many transcript entries are copied into a fork (the most recent before the turn). */
export const MAX_FORK_MESSAGES = 5000;

/** What a fork is asked for: the chat (an HTTP chat id, or a platform and account with it), the turn, and optionally the new chat's id. */
export const ForkRequestSchema = z
  .object({
    chatId: ChatIdSchema,
    platform: PlatformSchema.optional(),
    account: z.string().min(1).max(128).regex(/^[A-Za-z0-9._@+=-]+$/, 'only letters, digits and . _ @ + = - are allowed').optional(),
    turnId: z.string().min(1).max(400),
    newChatId: ChatIdSchema.optional(),
  })
  .strict();
export type ForkRequest = z.infer<typeof ForkRequestSchema>;

/** The receipt key that claims a new chat for a fork: one per new session. */
export const forkReceiptKey = (newSessionId: string) => `fork:${newSessionId}`;

/** The transcript key of a copied entry in the fork (transcript keys are unique across chats). */
export const forkedMessageKey = (newSessionId: string, key: string) => `fork:${newSessionId}:${key}`;

/** The line that ends the copied part of a fork's transcript. */
export function forkMarkerText(from: { chatId: string; platform: string; turnId: string }, copied: number, truncated: boolean): string {
  const what = `${copied} earlier message${copied === 1 ? '' : 's'} copied${truncated ? ` (the most recent ${MAX_FORK_MESSAGES})` : ''}`;
  return `Forked from ${from.platform} chat ${from.chatId} just before turn ${from.turnId}: ${what}; what follows is new.`;
}

/** A turn as its `turn.start` receipt recorded it: the run that ran its first model step. */
export interface TurnStartRecord {
  receiptId: number;
  turnId: string;
  sessionId: string | null;
  workflowId: string | null;
  runId: string | null;
  at: Date;
}

export async function turnStartOf(db: Db, turnId: string): Promise<TurnStartRecord | null> {
  const r = await db.receipt.findUnique({ where: { key: `${turnId}:start` }, select: { id: true, kind: true, sessionId: true, workflowId: true, runId: true, createdAt: true } });
  if (!r || r.kind !== 'turn.start') return null;
  return { receiptId: r.id, turnId, sessionId: r.sessionId, workflowId: r.workflowId, runId: r.runId, at: r.createdAt };
}

/** The claim of a fork already made to this new session: its source and turn. */
export interface ForkClaim {
  sourceSessionId: string;
  turnId: string;
  chatId: string;
  sessionId: string;
  copied: number;
}

export async function forkClaimOf(db: Db, newSessionId: string): Promise<ForkClaim | null> {
  const r = await db.receipt.findUnique({ where: { key: forkReceiptKey(newSessionId) }, select: { data: true } });
  if (!r) return null;
  const d = JSON.parse(r.data) as Record<string, unknown>;
  return { sourceSessionId: String(d.sourceSessionId), turnId: String(d.turnId), chatId: String(d.chatId), sessionId: String(d.sessionId), copied: Number(d.copied ?? 0) };
}

/** Whether a session id holds anything already: a session row or a transcript entry. */
export async function sessionHasRecords(db: Db, sessionId: string): Promise<boolean> {
  if (await db.session.findUnique({ where: { id: sessionId }, select: { id: true } })) return true;
  return (await db.message.findFirst({ where: { sessionId }, select: { seq: true } })) !== null;
}

/** A transcript entry to copy, as stored. */
export interface StoredEntry {
  seq: number;
  key: string;
  role: string;
  text: string;
  user: string | null;
  command: boolean;
  attachments: string | null;
  turnId: string | null;
  createdAt: Date;
}

/**
 * The transcript entries of `sessionId` that the conversation held when the turn began: every
 * entry before the first message the turn answered, and the replies and notices of earlier
 * turns delivered after it (a message can arrive while the turn before is still running), but
 * not the turn's own messages nor anything said after them. A turn without messages of its own
 * in this transcript is cut at its start time. At most MAX_FORK_MESSAGES, the most recent.
 */
export async function transcriptBeforeTurn(db: Db, sessionId: string, turn: TurnStartRecord, inboundKeys: readonly string[]): Promise<{ entries: StoredEntry[]; truncated: boolean }> {
  const select = { seq: true, key: true, role: true, text: true, user: true, command: true, attachments: true, turnId: true, createdAt: true } as const;
  const own = new Set(inboundKeys);
  const ownRows = inboundKeys.length ? await db.message.findMany({ where: { sessionId, key: { in: [...own] } }, select: { seq: true } }) : [];
  const cut = ownRows.length ? Math.min(...ownRows.map((r) => r.seq)) : undefined;
  const before = await db.message.findMany({
    where: { sessionId, ...(cut !== undefined ? { seq: { lt: cut } } : { createdAt: { lt: turn.at } }) },
    orderBy: { seq: 'desc' },
    take: MAX_FORK_MESSAGES + 1,
    select,
  });
  const truncated = before.length > MAX_FORK_MESSAGES;
  const entries = before.slice(0, MAX_FORK_MESSAGES).reverse();
  if (cut !== undefined) {
    // earlier turns' answers that came after the turn's first message: a turn id whose start is before this turn's
    const later = await db.message.findMany({ where: { sessionId, seq: { gt: cut }, turnId: { not: null } }, orderBy: { seq: 'asc' }, take: 100, select });
    const earlier = new Map<string, boolean>();
    for (const row of later) {
      const t = row.turnId!;
      if (t === turn.turnId || own.has(row.key)) continue;
      if (!earlier.has(t)) earlier.set(t, ((await turnStartOf(db, t))?.receiptId ?? Infinity) < turn.receiptId);
      if (earlier.get(t)) entries.push(row);
    }
  }
  return { entries: entries.filter((e) => !own.has(e.key)), truncated };
}

/** The working set with every transcript key that was copied replaced by its copy's key (the rest still name the original's entries, which prompts read by key). */
export function remapWorkingSet(ws: WorkingSet, map: ReadonlyMap<string, string>): WorkingSet {
  const m = (k: string) => map.get(k) ?? k;
  return {
    ...(ws.goalKey ? { goalKey: m(ws.goalKey) } : {}),
    notes: [...ws.notes],
    recentTurns: ws.recentTurns.map((t) => ({ inbound: t.inbound.map(m), ...(t.reply ? { reply: m(t.reply) } : {}) })),
    ...(ws.skills ? { skills: { ...ws.skills } } : {}),
  };
}

export interface ForkWrite {
  actor: string;
  source: { sessionId: string; platform: string; account: string; chatId: string; turnId: string };
  target: { sessionId: string; platform: 'http'; account: string; chatId: string };
  entries: StoredEntry[];
  truncated: boolean;
}

/**
 * Claim the new session and write its transcript, in one transaction: the `chat.forked`
 * receipt first (its key is the claim: taken, nothing is written and `claimed` is false), the
 * session's row, the copied entries (new keys, no identity: a copy is not a message that person
 * sent again, and counts against no rate limit; times kept), then the fork's line.
 */
export async function writeFork(db: Db, f: ForkWrite): Promise<{ claimed: boolean; copied: number }> {
  const marker = forkMarkerText({ chatId: f.source.chatId, platform: f.source.platform, turnId: f.source.turnId }, f.entries.length, f.truncated);
  return directSql(db).transaction(async (tx) => {
    const claimed = await writeReceiptIn(tx, {
      key: forkReceiptKey(f.target.sessionId),
      kind: 'chat.forked',
      workflowId: f.target.sessionId,
      sessionId: f.target.sessionId,
      actor: f.actor,
      data: {
        sourceSessionId: f.source.sessionId,
        sourcePlatform: f.source.platform,
        sourceAccount: f.source.account,
        sourceChatId: f.source.chatId,
        turnId: f.source.turnId,
        sessionId: f.target.sessionId,
        chatId: f.target.chatId,
        account: f.target.account,
        copied: f.entries.length,
        truncated: f.truncated,
      },
    });
    if (!claimed) return { claimed: false, copied: 0 };
    const now = new Date();
    await tx.execute('INSERT INTO "Session" ("id", "platform", "account", "chatId", "createdAt", "updatedAt") VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT ("id") DO NOTHING', [
      f.target.sessionId,
      f.target.platform,
      f.target.account,
      f.target.chatId,
      now,
      now,
    ]);
    for (const e of f.entries) {
      await tx.execute('INSERT INTO "Message" ("key", "sessionId", "role", "text", "user", "identityId", "command", "attachments", "turnId", "createdAt") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)', [
        forkedMessageKey(f.target.sessionId, e.key),
        f.target.sessionId,
        e.role,
        e.text,
        e.user,
        null,
        e.command,
        e.attachments,
        null,
        e.createdAt,
      ]);
    }
    await tx.execute('INSERT INTO "Message" ("key", "sessionId", "role", "text", "turnId", "createdAt") VALUES (?, ?, ?, ?, ?, ?)', [forkedMessageKey(f.target.sessionId, 'forked'), f.target.sessionId, 'system', marker, null, now]);
    return { claimed: true, copied: f.entries.length };
  });
}
