/**
 * Which past chat turns a replay re-runs (issue 36, docs/replay.md "Starting a replay"): a
 * selection is validated (ReplaySelectionSchema) and resolved here to turn ids, newest first, at
 * most MAX_REPLAY_TURNS. A turn is what the turn loop records: a `turn.start` receipt (keyed
 * `<turnId>:start`, written by the first model step) and, once it answered, a `turn.end` receipt
 * (keyed `<turnId>:end`, written with the delivery of its reply or notice); both carry the
 * session's id. Only turns that ended are selected: a running, stopped or failed turn has no
 * reply to compare with. An objective's runs name their turn (ObjectiveRun.turnId).
 *
 * The request's schemas (ReplaySelectionSchema, ReplayAlternativeSchema) are common/replays.ts's:
 * one definition for the service, the report and the tests; this module resolves a validated
 * selection.
 */
import { hash53, sessionWorkflowId } from '../../common/ids.js';
import { MAX_REPLAY_TURNS, type ReplaySelection } from '../../common/replays.js';
import type { Platform } from '../../common/schemas.js';
import type { Db } from '../db.js';
import { findObjectiveByIdOrName } from '../store/objectives.js';

/** A sample draws from at most this many of the newest turns of its window. */
export const MAX_SAMPLE_POOL = 20_000;

/** The selection resolved: turn ids newest first, and whether more turns matched than a replay takes. */
export interface ResolvedSelection {
  turnIds: string[];
  truncated: boolean;
  /** The selection as resolved (a sample's seed filled in, a chat's platform and account). */
  selection: ReplaySelection;
}

/** A selection that names no turn (unknown turn, objective or chat; nothing in the window): the message says which. */
export class SelectionError extends Error {}

const END = ':end';
const PAGE = 500;

/** The ended turns among receipts, as turn ids (`<turnId>:end` keys), in the order given. */
const endedTurnIds = (rows: Array<{ key: string | null }>) => rows.flatMap((r) => (r.key?.endsWith(END) ? [r.key.slice(0, -END.length)] : []));

/** The newest `take` turns that ended in the window (of one session, or of all), by their turn.end receipts. */
async function endedTurns(db: Db, where: { sessionId?: string; since?: Date; until?: Date }, take: number): Promise<string[]> {
  const rows = await db.receipt.findMany({
    where: {
      kind: 'turn.end',
      ...(where.sessionId ? { sessionId: where.sessionId } : {}),
      ...(where.since || where.until ? { createdAt: { ...(where.since ? { gte: where.since } : {}), ...(where.until ? { lt: where.until } : {}) } } : {}),
    },
    orderBy: { id: 'desc' },
    take,
    select: { key: true },
  });
  return endedTurnIds(rows);
}

/** Which of these turns ended (their turn.end receipt exists), in the order given. */
async function whichEnded(db: Db, turnIds: string[]): Promise<string[]> {
  const ended = new Set<string>();
  for (let i = 0; i < turnIds.length; i += PAGE) {
    const keys = turnIds.slice(i, i + PAGE).map((t) => `${t}${END}`);
    for (const t of endedTurnIds(await db.receipt.findMany({ where: { key: { in: keys } }, select: { key: true } }))) ended.add(t);
  }
  return turnIds.filter((t) => ended.has(t));
}

const when = (iso: string | undefined) => (iso === undefined ? undefined : new Date(iso));
const windowText = (since: string | undefined, until: string | undefined) => (since && until ? `between ${since} and ${until}` : since ? `since ${since}` : until ? `before ${until}` : 'at all');

/**
 * Resolve a validated selection to turn ids, newest first, at most `max` (MAX_REPLAY_TURNS).
 * Throws SelectionError when it names no turn. `account` is the HTTP API's account (a chat's default).
 */
export async function resolveSelection(db: Db, selection: ReplaySelection, opts: { account: string; max?: number; randomSeed?: () => number }): Promise<ResolvedSelection> {
  const max = Math.min(opts.max ?? MAX_REPLAY_TURNS, MAX_REPLAY_TURNS);
  if ('turnId' in selection) {
    const [start, end] = await Promise.all([db.receipt.findUnique({ where: { key: `${selection.turnId}:start` }, select: { id: true } }), db.receipt.findUnique({ where: { key: `${selection.turnId}${END}` }, select: { id: true } })]);
    if (!start) throw new SelectionError(`no turn ${selection.turnId}: no turn.start receipt names it (a turn id looks like session:http:default:support:turn:3:1a2b3c4d)`);
    if (!end) throw new SelectionError(`turn ${selection.turnId} has not ended (no turn.end receipt): a running, stopped or failed turn has no reply to compare with`);
    return { turnIds: [selection.turnId], truncated: false, selection };
  }
  if ('chatId' in selection) {
    const platform: Platform = selection.platform ?? 'http';
    const account = selection.account ?? opts.account;
    const sessionId = sessionWorkflowId({ platform, account, chatId: selection.chatId });
    const ids = await endedTurns(db, { sessionId, since: new Date(selection.since), until: new Date(selection.until) }, max + 1);
    if (ids.length === 0) {
      const known = await db.session.findUnique({ where: { id: sessionId }, select: { id: true } });
      throw new SelectionError(known ? `chat ${platform}/${account}/${selection.chatId} has no turn that ended ${windowText(selection.since, selection.until)}` : `no chat ${platform}/${account}/${selection.chatId}: Steward has no session for it`);
    }
    return { turnIds: ids.slice(0, max), truncated: ids.length > max, selection: { ...selection, platform, account } };
  }
  if ('objectiveId' in selection) {
    const objective = await findObjectiveByIdOrName(db, selection.objectiveId);
    if (!objective) throw new SelectionError(`no objective ${selection.objectiveId}`);
    const want = Math.min(selection.last, max);
    const turns: string[] = [];
    // the objective's runs newest first, page by page, until `want` of them ended (skipped runs name no turn)
    for (let skip = 0; turns.length < want; skip += PAGE) {
      const runs = await db.objectiveRun.findMany({ where: { objectiveId: objective.id, turnId: { not: null } }, orderBy: [{ createdAt: 'desc' }, { id: 'desc' }], skip, take: PAGE, select: { turnId: true } });
      turns.push(...(await whichEnded(db, runs.map((r) => r.turnId!))));
      if (runs.length < PAGE) break;
    }
    if (turns.length === 0) throw new SelectionError(`objective ${objective.name} has no run whose turn ended`);
    return { turnIds: turns.slice(0, want), truncated: selection.last > max, selection: { ...selection, objectiveId: objective.id } };
  }
  const s = selection.sample;
  const seed = s.seed ?? (opts.randomSeed ?? (() => Math.floor(Math.random() * 2 ** 31)))();
  // the pool: the newest ended turns of the window, at most MAX_SAMPLE_POOL; the draw: the `size` turns of the smallest hash under the seed (the same seed and pool, the same turns)
  const pool = await endedTurns(db, { ...(s.since ? { since: when(s.since)! } : {}), ...(s.until ? { until: when(s.until)! } : {}) }, MAX_SAMPLE_POOL);
  if (pool.length === 0) throw new SelectionError(`no turn ended ${windowText(s.since, s.until)}`);
  const size = Math.min(s.size, max);
  const order = new Map(pool.map((t, i) => [t, i]));
  const drawn = pool
    .map((t) => ({ t, h: hash53(t, seed) }))
    .sort((a, b) => a.h - b.h || (a.t < b.t ? -1 : 1))
    .slice(0, size)
    .map((x) => x.t)
    .sort((a, b) => order.get(a)! - order.get(b)!);
  return { turnIds: drawn, truncated: s.size > max, selection: { sample: { ...s, seed } } };
}
