/**
 * Reading the audit receipts: one filter (a chat's sessions, a person, a change, a run, a kind, a
 * time window), checked by zod, and two ways to read it: `export` (oldest first, the whole
 * filter as JSONL, page by page on the id so a large table is never held in memory) and `page`
 * (newest first, at most PAGE_MAX rows, with the cursor of the next page). `steward receipts
 * export` (platform/ops-cli.ts) and the console's Receipts page and its Export JSONL link
 * (adapters/console/budgets.tsx) both call this module, so the file the page exports is the
 * file the CLI writes for the same filter.
 *
 * Rows come from domain/receipts.ts `listReceipts`, which masks every secret Steward holds
 * (domain/secrets.ts) on the way out, as every view does.
 */
import { z } from 'zod';
import { parseDuration } from '../config/index.js';
import type { Db } from '../domain/db.js';
import { listReceipts, type ReceiptFilter, type ReceiptRecord } from '../domain/receipts.js';
import { sessionIdsOfChat } from '../domain/store/sessions.js';

/** An ISO time, or a duration back from `now` (`2h` is two hours ago). */
export function parseInstant(text: string, now = Date.now()): Date | undefined {
  const t = text.trim();
  if (/^\d+(\.\d+)?\s*(ms|s|m|h|d)$/.test(t)) {
    const ms = parseDuration(t);
    return ms === undefined ? undefined : new Date(now - ms);
  }
  if (/^\d+(\.\d+)?\s*w$/.test(t)) return new Date(now - Number.parseFloat(t) * 7 * 86_400_000);
  if (!/^\d{4}-\d{2}-\d{2}/.test(t)) return undefined;
  const d = new Date(t);
  return Number.isNaN(d.getTime()) ? undefined : d;
}

/** A time argument (`--since`): parseInstant's forms. */
export const Instant = (flag: string) =>
  z.string().transform((v, ctx) => {
    const d = parseInstant(v);
    if (!d) {
      ctx.addIssue({ code: 'custom', message: `${flag}: expected an ISO time (2026-11-23T10:00:00Z) or a duration such as 90s, 15m, 2h, 7d; got ${JSON.stringify(v)}` });
      return z.NEVER;
    }
    return d;
  });

export const wholeNumber = (flag: string, min: number) =>
  z
    .string()
    .regex(/^\d+$/, `${flag}: expected a whole number`)
    .transform(Number)
    .refine((n) => n >= min && Number.isSafeInteger(n), `${flag}: expected a whole number of at least ${min}`);

export const Id = (flag: string) => z.string().trim().min(1, `${flag}: expected a value`).max(500, `${flag}: too long`);

/**
 * The receipts filter as text (the CLI's flags, a GET form's fields): `--chat` a chat id (every
 * session of it) or a session id, `--person` the actor (an identity id, `api`, `cli`), `--change`
 * a change id (its workflow's receipts), `--run` a workflow id or run id.
 */
export const ExportArgsSchema = z
  .object({
    since: Instant('--since').optional(),
    until: Instant('--until').optional(),
    chat: Id('--chat').optional(),
    session: Id('--session').optional(),
    person: Id('--person').optional(),
    change: Id('--change').optional(),
    run: Id('--run').optional(),
    kind: z.string().regex(/^[a-z.-]+$/, '--kind: expected a receipt kind such as ingress, model.call, approval.decision').optional(),
    limit: wholeNumber('--limit', 1).optional(),
    after: wholeNumber('--after', 0).optional(),
  })
  .refine((a) => !(a.since && a.until) || a.since < a.until, { message: '--since must be before --until' })
  .refine((a) => !(a.change && a.run) || a.change === a.run, { message: '--change and --run name different runs: give one' });
export type ExportArgs = z.infer<typeof ExportArgsSchema>;

/** The filter's fields without the paging ones (what a page and its export share). */
export type ReceiptQuery = Omit<ExportArgs, 'limit' | 'after'>;

/** Rows per database read of an export. */
const EXPORT_PAGE = 500;
/** The most rows a newest-first page holds. */
export const PAGE_MAX = 100;

/** The sessions a `--chat` value names: a session id as is, else every session of that chat id. */
async function sessionsOf(db: Db, chat: string): Promise<string[]> {
  if (chat.startsWith('session:')) return [chat];
  return sessionIdsOfChat(db, chat, 1000);
}

/** The domain filter of a query; undefined when it can match nothing (a chat with no session). */
async function filterOf(db: Db, q: ReceiptQuery): Promise<ReceiptFilter | undefined> {
  const run = q.change ?? q.run;
  const filter: ReceiptFilter = {
    ...(q.kind ? { kind: q.kind } : {}),
    ...(q.since ? { since: q.since } : {}),
    ...(q.until ? { until: q.until } : {}),
    ...(run ? { run } : {}),
    ...(q.person ? { actor: q.person } : {}),
  };
  const chat = q.chat ?? q.session;
  if (chat) filter.sessionIds = await sessionsOf(db, chat);
  return filter.sessionIds?.length === 0 ? undefined : filter;
}

/** The matching receipts as JSONL chunks, oldest first, one database page at a time (`limit` and `after` as the CLI's). */
export async function* receiptLines(db: Db, args: ExportArgs): AsyncGenerator<string, number> {
  const filter = await filterOf(db, args);
  if (!filter) return 0;
  let afterId = args.after ?? 0;
  let left = args.limit ?? Number.POSITIVE_INFINITY;
  let written = 0;
  while (left > 0) {
    const want = Math.min(EXPORT_PAGE, left);
    const rows = await listReceipts(db, { ...filter, afterId, limit: want });
    if (rows.length === 0) break;
    yield rows.map((r) => `${JSON.stringify(r)}\n`).join('');
    written += rows.length;
    left -= rows.length;
    afterId = rows.at(-1)!.id;
    if (rows.length < want) break; // the last page
  }
  return written;
}

/**
 * Write the matching receipts as JSONL, page by page (keyset on the id), awaiting each write so
 * a slow reader holds the export back. Returns how many were written.
 */
export async function exportReceipts(db: Db, args: ExportArgs, write: (s: string) => void | Promise<void>): Promise<number> {
  const lines = receiptLines(db, args);
  for (;;) {
    const next = await lines.next();
    if (next.done) return next.value;
    await write(next.value);
  }
}

/** A newest-first page: its rows and the cursor of the next (older) page, if there is one. */
export interface ReceiptPage {
  rows: ReceiptRecord[];
  /** Pass as `before` for the next page. */
  next: number | undefined;
}

export type ReceiptService = ReturnType<typeof createReceiptService>;

export function createReceiptService(db: Db) {
  return {
    /** Whether a chat id (or session id) names any session. */
    async chatKnown(chat: string): Promise<boolean> {
      return (await sessionsOf(db, chat)).length > 0;
    },
    /** The export (see receiptLines): oldest first, the whole filter. */
    lines(args: ExportArgs): AsyncGenerator<string, number> {
      return receiptLines(db, args);
    },
    export(args: ExportArgs, write: (s: string) => void | Promise<void>): Promise<number> {
      return exportReceipts(db, args, write);
    },
    /** One page, newest first: at most `size` (1..PAGE_MAX) rows older than the receipt `before`. */
    async page(q: ReceiptQuery, opts: { before?: number; size: number }): Promise<ReceiptPage> {
      const filter = await filterOf(db, q);
      if (!filter) return { rows: [], next: undefined };
      const size = Math.max(1, Math.min(PAGE_MAX, Math.floor(opts.size)));
      const rows = await listReceipts(db, { ...filter, ...(opts.before ? { beforeId: opts.before } : {}), order: 'desc', limit: size + 1 });
      const more = rows.length > size;
      const page = more ? rows.slice(0, size) : rows;
      return { rows: page, next: more ? page.at(-1)!.id : undefined };
    },
  };
}
