/** The conversation transcript: what users sent and what was delivered to them. */
import type { Db } from './db.js';
import { isUniqueViolation } from './prisma-errors.js';
import { directSql, sqlDate, sqlInt } from './sql.js';

export type TranscriptRole = 'user' | 'assistant' | 'system';

export interface TranscriptRow {
  seq: number;
  key: string;
  role: TranscriptRole;
  text: string;
  user: string | null;
  turnId: string | null;
  /** JSON array of attachment references, when the message carried files. */
  attachments: string | null;
  at: string;
  /** The sender's identity (governed chat platforms), when known. */
  identityId?: string | null;
}

function toRow(r: { seq: number; key: string; role: string; text: string; user: string | null; turnId: string | null; attachments: string | null; createdAt: Date; identityId?: string | null }): TranscriptRow {
  const role: TranscriptRole = r.role === 'assistant' || r.role === 'system' ? r.role : 'user';
  return { seq: r.seq, key: r.key, role, text: r.text, user: r.user, turnId: r.turnId, attachments: r.attachments, at: r.createdAt.toISOString(), ...(r.identityId ? { identityId: r.identityId } : {}) };
}

export async function readTranscript(db: Db, sessionId: string, opts: { afterSeq?: number; limit?: number } = {}): Promise<TranscriptRow[]> {
  const limit = Math.min(Math.max(opts.limit ?? 200, 1), 1000);
  if (opts.afterSeq !== undefined) {
    const rows = await db.message.findMany({
      where: { sessionId, seq: { gt: opts.afterSeq } },
      orderBy: { seq: 'asc' },
      take: limit,
    });
    return rows.map(toRow);
  }
  // The newest `limit` messages, oldest first.
  const rows = await db.message.findMany({ where: { sessionId }, orderBy: { seq: 'desc' }, take: limit });
  return rows.reverse().map(toRow);
}

/** Messages by transcript key, in the order of `keys` (missing keys are skipped). Every model step reads its turn's messages so: a direct statement (domain/sql.ts). */
export async function messagesByKeys(db: Db, keys: string[]): Promise<TranscriptRow[]> {
  if (keys.length === 0) return [];
  const rows = await directSql(db).query(
    `SELECT "seq", "key", "role", "text", "user", "turnId", "attachments", "createdAt", "identityId" FROM "Message" WHERE "key" IN (${keys.map(() => '?').join(', ')})`,
    keys,
  );
  const byKey = new Map(
    rows.map((r) => {
      const row = toRow({ seq: sqlInt(r.seq), key: String(r.key), role: String(r.role), text: String(r.text), user: r.user as string | null, turnId: r.turnId as string | null, attachments: r.attachments as string | null, createdAt: sqlDate(r.createdAt), identityId: r.identityId as string | null });
      return [row.key, row];
    }),
  );
  return keys.flatMap((k) => {
    const row = byKey.get(k);
    return row ? [row] : [];
  });
}

/** The sequence number of the message recorded under `key`, if there is one. */
export async function recordedSeq(db: Db, key: string): Promise<number | undefined> {
  return (await db.message.findUnique({ where: { key }, select: { seq: true } }))?.seq;
}

/** An inbound message as the ingress records it. */
export interface InboundMessage {
  key: string;
  sessionId: string;
  text: string;
  user: string;
  identityId: string | null;
  command: boolean;
  /** JSON array of attachment references. */
  attachments?: string;
}

/** Record an inbound message once: its sequence number, or `duplicate` when its key was recorded before. Every turn starts so: a direct statement (domain/sql.ts). */
export async function recordInbound(db: Db, m: InboundMessage): Promise<{ seq: number } | { duplicate: true }> {
  try {
    const [row] = await directSql(db).query(
      'INSERT INTO "Message" ("key", "sessionId", "role", "text", "user", "identityId", "command", "attachments", "createdAt") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING "seq"',
      [m.key, m.sessionId, 'user', m.text, m.user, m.identityId, m.command, m.attachments ?? null, new Date()],
    );
    return { seq: sqlInt(row?.seq) };
  } catch (err) {
    if (isUniqueViolation(err)) return { duplicate: true };
    throw err;
  }
}

/** Record a system line in a transcript once; false when its key was recorded before. */
export async function recordSystemMessage(db: Db, sessionId: string, key: string, text: string): Promise<boolean> {
  try {
    await db.message.create({ data: { key, sessionId, role: 'system', text } });
    return true;
  } catch (err) {
    if (isUniqueViolation(err)) return false;
    throw err;
  }
}

/** How many messages (not commands) a person sent since `since` (the rate limit). */
export async function messagesSince(db: Db, identityId: string, since: Date): Promise<number> {
  return db.message.count({ where: { identityId, command: false, createdAt: { gt: since } } });
}

/** When the oldest of a person's messages (not commands) since `since` came. */
export async function oldestMessageSince(db: Db, identityId: string, since: Date): Promise<Date | undefined> {
  const r = await db.message.findFirst({ where: { identityId, command: false, createdAt: { gt: since } }, orderBy: { createdAt: 'asc' }, select: { createdAt: true } });
  return r?.createdAt;
}

const ROW_SELECT = { seq: true, key: true, role: true, text: true, user: true, turnId: true, attachments: true, createdAt: true } as const;

/** The key of the message at `seq` of a session (an inbound message's idempotency key). */
export async function messageKeyAt(db: Db, sessionId: string, seq: number): Promise<string | undefined> {
  const row = await db.message.findFirst({ where: { sessionId, seq }, select: { key: true } });
  return row?.key;
}

/** One message by its transcript key. */
export async function messageByKey(db: Db, key: string): Promise<TranscriptRow | undefined> {
  const row = await db.message.findUnique({ where: { key }, select: ROW_SELECT });
  return row ? toRow(row) : undefined;
}

/** What was said to the conversation after `afterSeq` (assistant and system messages), oldest first. */
export async function repliesAfter(db: Db, sessionId: string, afterSeq: number, limit: number): Promise<TranscriptRow[]> {
  const rows = await db.message.findMany({ where: { sessionId, seq: { gt: afterSeq }, role: { not: 'user' } }, orderBy: { seq: 'asc' }, take: limit, select: ROW_SELECT });
  return rows.map(toRow);
}

/** The system messages (notices, command answers) after `afterSeq`, oldest first. */
export async function systemMessagesAfter(db: Db, sessionId: string, afterSeq: number, limit: number): Promise<TranscriptRow[]> {
  const rows = await db.message.findMany({ where: { sessionId, seq: { gt: afterSeq }, role: 'system' }, orderBy: { seq: 'asc' }, take: limit, select: ROW_SELECT });
  return rows.map(toRow);
}

/** The sessions with the newest messages, newest first: the console's list of chats. */
export async function recentSessions(db: Db, limit = 50): Promise<{ sessionId: string; lastAt: string; messages: number }[]> {
  const rows = await db.message.groupBy({ by: ['sessionId'], _max: { createdAt: true }, _count: { _all: true }, orderBy: { _max: { createdAt: 'desc' } }, take: Math.min(Math.max(limit, 1), 500) });
  return rows.map((r) => ({ sessionId: r.sessionId, lastAt: (r._max.createdAt ?? new Date(0)).toISOString(), messages: r._count._all }));
}
