/**
 * Which past chat turns a replay re-runs (issue 36, docs/replay.md "Starting a replay"): a
 * selection is validated (ReplaySelectionSchema) and resolved here to turn ids, newest first, at
 * most MAX_REPLAY_TURNS. A turn is what the turn loop records: a `turn.start` receipt (keyed
 * `<turnId>:start`, written by the first model step) and, once it answered, a `turn.end` receipt
 * (keyed `<turnId>:end`, written with the delivery of its reply or notice); both carry the
 * session's id. Only turns that ended are selected: a running, stopped or failed turn has no
 * reply to compare with. An objective's runs name their turn (ObjectiveRun.turnId).
 *
 * The alternative (ReplayAlternativeSchema) is validated here too; whether its model's provider
 * is configured is the caller's check (the model registry knows, services/replays.ts).
 * These are the request's schemas, with errors that name what is wrong; the replay keeps the
 * same fields in its own (common/replays.ts). Two copies of one shape: to be made one.
 */
import { z } from 'zod';
import { hash53, sessionWorkflowId } from '../../common/ids.js';
import { ModelRefSchema, PlatformSchema, type Platform } from '../../common/schemas.js';
import { TOOL_NAMES } from '../../common/tools.js';
import type { Db } from '../db.js';
import { findObjectiveByIdOrName } from '../store/objectives.js';

/** At most this many turns in one replay, and this many replayed at once. */
export const MAX_REPLAY_TURNS = 500;
export const MAX_REPLAY_CONCURRENCY = 8;
export const DEFAULT_REPLAY_CONCURRENCY = 2;
/** A sample draws from at most this many of the newest turns of its window. */
export const MAX_SAMPLE_POOL = 20_000;

const KINDS = ['turnId', 'chatId', 'objectiveId', 'sample'] as const;
const KIND_TEXT = 'turnId, chatId (with since and until), objectiveId (with last) or sample ({size, since?, until?, seed?})';

/** An ISO time with its offset (2026-11-28T10:00:00Z), kept as given. */
const isoTime = (what: string) => z.iso.datetime({ offset: true, error: `${what}: expected an ISO time with its offset, e.g. 2026-11-28T10:00:00Z` });
const shortId = (what: string) => z.string({ error: `${what}: expected a string` }).trim().min(1, `${what} is empty`).max(300, `${what} is longer than 300 characters`);
const count = (what: string) =>
  z
    .number({ error: `${what}: expected a whole number from 1 to ${MAX_REPLAY_TURNS}` })
    .int(`${what}: expected a whole number from 1 to ${MAX_REPLAY_TURNS}`)
    .min(1, `${what}: expected a whole number from 1 to ${MAX_REPLAY_TURNS}`)
    .max(MAX_REPLAY_TURNS, `${what}: at most ${MAX_REPLAY_TURNS} turns per replay`);

const inverted = (w: { since?: string | undefined; until?: string | undefined }) => w.since === undefined || w.until === undefined || Date.parse(w.since) < Date.parse(w.until);
const INVERTED = { message: 'the window is empty or inverted: since must be before until' };

const TurnSelection = z.strictObject({ turnId: shortId('turnId') });
const ChatSelection = z
  .strictObject({
    chatId: shortId('chatId'),
    platform: PlatformSchema.optional(),
    account: shortId('account').optional(),
    since: isoTime('since'),
    until: isoTime('until'),
  })
  .refine(inverted, INVERTED);
const ObjectiveSelection = z.strictObject({ objectiveId: shortId('objectiveId'), last: count('last') });
const SampleSelection = z.strictObject({
  sample: z
    .strictObject({
      size: count('sample.size'),
      since: isoTime('sample.since').optional(),
      until: isoTime('sample.until').optional(),
      seed: z.number({ error: 'sample.seed: expected a whole number' }).int('sample.seed: expected a whole number').min(0, 'sample.seed: expected a whole number from 0').max(4_294_967_295, "sample.seed: at most 4294967295").optional(),
    })
    .refine(inverted, INVERTED),
});

const BRANCHES = { turnId: TurnSelection, chatId: ChatSelection, objectiveId: ObjectiveSelection, sample: SampleSelection } as const;

export type ReplaySelection = z.infer<typeof TurnSelection> | z.infer<typeof ChatSelection> | z.infer<typeof ObjectiveSelection> | z.infer<typeof SampleSelection>;

/**
 * Which past turns to replay: exactly one of one turn (`turnId`); a chat in a time window
 * (`chatId`, `platform`? default http, `account`? default the HTTP API's, `since`, `until`); an
 * objective's last N runs (`objectiveId` (its id or name), `last`); a sample of N turns across
 * chats (`sample: {size, since?, until?, seed?}`, the same seed draws the same turns). No kind or
 * two kinds are refused by name, before the kind's own fields are checked.
 */
export const ReplaySelectionSchema = z
  .record(z.string(), z.unknown(), { error: `a selection is an object naming one of ${KIND_TEXT}` })
  .transform((v, ctx): ReplaySelection => {
    const named = KINDS.filter((k) => k in v);
    if (named.length !== 1) {
      ctx.addIssue({ code: 'custom', message: named.length === 0 ? `a selection names one of ${KIND_TEXT}` : `a selection names exactly one kind; got ${named.join(' and ')}` });
      return z.NEVER;
    }
    const r = BRANCHES[named[0]!].safeParse(v);
    if (!r.success) {
      for (const i of r.error.issues) ctx.addIssue({ code: 'custom', message: i.message, path: i.path });
      return z.NEVER;
    }
    return r.data;
  });

/** A tool of the approval list: Steward's own, an MCP tool as server.tool or server.*, or * for every tool (as STEWARD_APPROVAL_TOOLS). */
const ApprovalToolSchema = z
  .string()
  .trim()
  .refine((n) => n === '*' || (TOOL_NAMES as string[]).includes(n) || /^[a-z][a-z0-9-]{0,23}\.([A-Za-z0-9_-]{1,64}|\*)$/.test(n), {
    error: (i) => `unknown tool ${String(i.input)}: tools are ${TOOL_NAMES.join(', ')}, MCP tools as server.tool or server.* (or * for all)`,
  });
const ApprovalTools = z.array(ApprovalToolSchema).max(500, 'at most 500 tools in an approval list');
const PromptText = (what: string) => z.string({ error: `${what}: expected text` }).max(64 * 1024, `${what} is longer than 64 KB`);

/** What a replay changes; `{}` replays under the current configuration (the record must then be reproduced). */
export const ReplayAlternativeSchema = z.strictObject({
  /** provider:model; its provider must be configured (checked by the service). */
  model: ModelRefSchema.optional(),
  /** Replaces the whole system prompt (every layer). */
  systemPrompt: PromptText('systemPrompt').optional(),
  /** Replaces the named layers' text ('' drops a layer). */
  promptLayers: z
    .strictObject({ steward: PromptText('promptLayers.steward').optional(), operator: PromptText('promptLayers.operator').optional(), workspace: PromptText('promptLayers.workspace').optional(), chat: PromptText('promptLayers.chat').optional() })
    .optional(),
  skills: z.enum(['on', 'off'], { error: 'skills: expected on or off' }).optional(),
  retrieval: z
    .strictObject({
      enabled: z.boolean().optional(),
      results: z.number().int().min(0).max(50).optional(),
      excerptBytes: z.number().int().min(0).max(64 * 1024).optional(),
      totalBytes: z.number().int().min(0).max(256 * 1024).optional(),
    })
    .optional(),
  /** The approval list under test (short for toolPolicy.approvalTools; both given: this one). */
  approvalTools: ApprovalTools.optional(),
  toolPolicy: z.strictObject({ approvalTools: ApprovalTools.optional(), forbidSelfApproval: z.boolean().optional() }).optional(),
});
export type ReplayAlternative = z.infer<typeof ReplayAlternativeSchema>;

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
