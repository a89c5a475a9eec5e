/**
 * Counterfactual replay (issue 36, docs/replay.md): start a replay of past chat turns under an
 * alternative configuration, list replays, fetch one and its report, cancel one. One service for
 * the HTTP API and the CLI (which calls the API). A request is checked whole before anything
 * starts: the actor may replay (admins, overlords and the operator), the body, the selection and
 * the alternative are valid (common/replays.ts, resolved by domain/replays/select.ts), the
 * alternative's model is of a configured provider, and the selection names at least one turn
 * that ended. A refused request writes no row and starts no workflow.
 *
 * Temporal is the ledger of the handoff, the Replay row a projection: the replay workflow
 * (`replay:<id>` on the background queue, REJECT_DUPLICATE) is started FIRST, and the run writes
 * its own row at its start (workflows/replays/replay.ts); the service upserts the same row right
 * after the start only so that the replay is listed at once. A start keyed by an idempotency key
 * (the API's Idempotency-Key, one per `steward replay turns`) has its replay id derived from the
 * actor and the key: a retry finds the run the first call started (its answer is in the run's
 * memo) and starts nothing. Reading a replay whose row still says running asks Temporal whether
 * its run ended without writing its end (terminated, timed out), and projects that.
 */
import { createHash, randomBytes } from 'node:crypto';
import { WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError, type Client } from '@temporalio/client';
import { z } from 'zod';
import { faultPoint } from '../common/fault-points.js';
import { parseModelRef, type Provider } from '../common/schemas.js';
import { isAdmin, type Actor } from '../common/roles.js';
import {
  DEFAULT_REPLAY_CONCURRENCY,
  MAX_REPLAY_CONCURRENCY,
  ReplayAlternativeSchema,
  ReplaySelectionSchema,
  type ReplayAlternative,
  type ReplaySelection,
  type ReplayStatus,
  type ReplayTurnsInput,
} from '../common/replays.js';
import type { Db } from '../domain/db.js';
import { getBlobText } from '../domain/blobs.js';
import { maskHeldSecretsDeep } from '../domain/secrets.js';
import { resolveSelection, SelectionError } from '../domain/replays/select.js';
import { KindAttr } from '../workflows/search-attributes.js';
import { PROVIDER_SETUP } from './chat/commands.js';
import { ServiceInputError } from './requests.js';
import { finishReplay, getReplay, listReplays, upsertReplay, type ReplayRow } from '../domain/store/replays.js';

/** A replay request refused (bad input, unknown replay, not allowed): nothing was started or changed. */
export class ReplayInputError extends ServiceInputError {}

export type { ReplayStatus } from '../common/replays.js';
/** A Replay row as the store gives it (domain/store/replays.ts). */
export type { ReplayRow };

/**
 * The Replay rows, as the replay's store (domain/store/replays.ts: upsertReplay, getReplay,
 * listReplays, finishReplay over the database) provides them to the service.
 */
export interface ReplayStore {
  /** The row of a replay whose run started (status running), unless the run wrote it already. */
  upsert(row: { id: string; selection: ReplaySelection; alternative: ReplayAlternative; turnIds: string[]; requestedBy: string; workflowId: string }): Promise<unknown>;
  get(id: string): Promise<ReplayRow | null | undefined>;
  /** Newest first. */
  list(opts: { limit: number }): Promise<ReplayRow[]>;
  finish(id: string, end: { status: 'failed' | 'cancelled'; error?: string }): Promise<unknown>;
}

/** The replays' store over the database (domain/store/replays.ts). */
export function replayStoreOf(db: Db): ReplayStore {
  return {
    upsert: (r) => upsertReplay(db, r),
    get: (id) => getReplay(db, id),
    list: (o) => listReplays(db, o),
    finish: (id, end) => finishReplay(db, id, end),
  };
}

/** A report as Markdown and as JSONL (domain/replays/report.ts). */
export interface ReplayReportFormats {
  markdown(report: unknown): string;
  jsonl(report: unknown): string;
}

export type { ReplayTurnsInput } from '../common/replays.js';

export const REPLAY_WORKFLOW = 'replayTurnsWorkflow';
export const replayWorkflowId = (replayId: string) => `replay:${replayId}`;

/** What a start answers; the run carries it in its memo, so a keyed retry answers the same. */
export interface ReplayStarted {
  id: string;
  workflowId: string;
  turns: number;
  truncated: boolean;
  selection: ReplaySelection;
}
interface StartMemo {
  replayStart: { turns: number; truncated: boolean; selection: ReplaySelection };
}

/**
 * Start the replay workflow: `replayTurnsWorkflow` by name on the background queue, workflow id
 * `replay:<replayId>`, kind `replay`, at most once (REJECT_DUPLICATE: a run with this id, running
 * or ended, throws WorkflowExecutionAlreadyStartedError). The run writes its own Replay row from
 * this input; the start's answer rides in its memo.
 */
export async function startReplayWorkflow(client: Client, taskQueue: string, input: ReplayTurnsInput, answer?: { truncated: boolean }): Promise<void> {
  const memo: StartMemo | undefined = input.selection !== undefined ? { replayStart: { turns: input.turnIds.length, truncated: answer?.truncated ?? false, selection: input.selection as ReplaySelection } } : undefined;
  await client.workflow.start(REPLAY_WORKFLOW, {
    taskQueue,
    workflowId: replayWorkflowId(input.replayId),
    args: [input],
    workflowIdReusePolicy: 'REJECT_DUPLICATE',
    typedSearchAttributes: [{ key: KindAttr, value: 'replay' }],
    ...(memo ? { memo: memo as unknown as Record<string, unknown> } : {}),
    staticSummary: `Replay ${input.replayId} of ${input.turnIds.length} turn${input.turnIds.length === 1 ? '' : 's'}`,
  });
}

export interface ReplayServiceDeps {
  db: Db;
  client: Client;
  /** The background task queue (the replay workflow runs there). */
  taskQueue: string;
  /** The HTTP API's account: a chat selection's default. */
  account: string;
  configuredProviders: () => Provider[];
  store: ReplayStore;
  formats: ReplayReportFormats;
}

export type ReplayFormat = 'json' | 'markdown' | 'jsonl';

export interface ReplayView {
  id: string;
  workflowId: string;
  status: ReplayStatus;
  turnCount: number;
  selection: unknown;
  alternative: unknown;
  requestedBy: string | null;
  createdAt: string;
  finishedAt: string | null;
  error?: string;
}

export interface ReplayService {
  /** `key`: the request's idempotency key (the API's Idempotency-Key): the same actor and key, the same replay. */
  start(actor: Actor, body: unknown, opts?: { key?: string }): Promise<ReplayStarted>;
  list(actor: Actor, query?: { limit?: unknown }): Promise<ReplayView[]>;
  get(actor: Actor, id: unknown): Promise<ReplayView>;
  report(actor: Actor, id: unknown, format?: unknown): Promise<{ format: 'json'; replay: ReplayView; report: unknown } | { format: 'markdown' | 'jsonl'; text: string }>;
  cancel(actor: Actor, id: unknown): Promise<{ id: string; status: 'cancelling' }>;
}

const StartBody = z.strictObject({
  selection: z.unknown().optional(),
  alternative: z.unknown().optional(),
  concurrency: z
    .number({ error: `concurrency: expected a whole number from 1 to ${MAX_REPLAY_CONCURRENCY}` })
    .int(`concurrency: expected a whole number from 1 to ${MAX_REPLAY_CONCURRENCY}`)
    .min(1, `concurrency: expected a whole number from 1 to ${MAX_REPLAY_CONCURRENCY}`)
    .max(MAX_REPLAY_CONCURRENCY, `concurrency: at most ${MAX_REPLAY_CONCURRENCY} turns at once`)
    .optional(),
});
const ReplayIdSchema = z.string().trim().regex(/^rp[a-z0-9]{6,32}$/, 'a replay id looks like rpk3m9x2q7ab');
const FormatSchema = z.enum(['json', 'markdown', 'jsonl'], { error: 'format: expected json, markdown or jsonl' });
const LimitSchema = z.coerce.number().int().min(1).max(500);

/** The first issue of a failed parse, as one line naming its field. */
function issueText(prefix: string, err: z.ZodError): string {
  const i = err.issues[0];
  if (!i) return `${prefix}: invalid`;
  const at = i.path.map(String).join('.');
  // the selection's messages name their field already
  return `${prefix}: ${at && !i.message.startsWith(at) && !i.message.startsWith(String(i.path.at(-1))) ? `${at}: ` : ''}${i.message}`;
}

const ALPHABET = 'abcdefghjkmnpqrstuvwxyz23456789';
const idOf = (bytes: Uint8Array, n: number) => `rp${[...bytes.subarray(0, n)].map((b) => ALPHABET[b % ALPHABET.length]).join('')}`;
const newReplayId = () => idOf(randomBytes(10), 10);
/** The replay id of a keyed start: the same for the same actor and key, in newReplayId's alphabet (longer: no clash with a random one). */
export const replayIdFor = (actorId: string, key: string) => idOf(createHash('sha256').update(`replay:${actorId}:${key}`).digest(), 16);

function view(r: ReplayRow): ReplayView {
  return {
    id: r.id,
    workflowId: replayWorkflowId(r.id),
    status: r.status,
    turnCount: r.turnCount,
    selection: r.selection,
    alternative: r.alternative,
    requestedBy: r.requestedBy,
    createdAt: r.createdAt.toISOString(),
    finishedAt: r.finishedAt?.toISOString() ?? null,
    ...(r.error ? { error: r.error } : {}),
  };
}

export function createReplayService(deps: ReplayServiceDeps): ReplayService {
  const { db, store } = deps;

  const mayReplay = (actor: Actor) => {
    if (!isAdmin(actor.role)) throw new ReplayInputError(`Replaying turns needs the admin role; you are ${actor.role === 'operator' ? 'an' : 'a'} ${actor.role}. Nothing was started.`, 409);
  };

  /** The alternative, with its model's provider configured. */
  function alternativeOf(raw: unknown): ReplayAlternative {
    const alt = ReplayAlternativeSchema.safeParse(raw ?? {});
    if (!alt.success) throw new ReplayInputError(issueText('invalid alternative', alt.error));
    if (alt.data.model !== undefined) {
      const { provider } = parseModelRef(alt.data.model);
      if (!deps.configuredProviders().includes(provider)) throw new ReplayInputError(`unknown model ${alt.data.model}: the ${provider} provider is not configured (${PROVIDER_SETUP[provider]} and restart Steward)`);
    }
    return alt.data;
  }

  /** The answer of a replay whose run was started (by a first call with the same key): from the run's memo, else its row; undefined: no run. */
  async function startedAs(id: string): Promise<ReplayStarted | undefined> {
    const workflowId = replayWorkflowId(id);
    let memo: Partial<StartMemo> | undefined;
    try {
      memo = (await deps.client.workflow.getHandle(workflowId).describe()).memo as Partial<StartMemo> | undefined;
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) return undefined;
      throw err;
    }
    const m = memo?.replayStart;
    if (m) return { id, workflowId, turns: m.turns, truncated: m.truncated, selection: m.selection };
    const r = await store.get(id);
    return r ? { id, workflowId, turns: r.turnCount, truncated: false, selection: r.selection as ReplaySelection } : { id, workflowId, turns: 0, truncated: false, selection: {} as ReplaySelection };
  }

  /**
   * A row that says running, as its run's ledger says: a run that ended without writing its end
   * (terminated, timed out; or its last activity failed) ends the row too; a row whose run
   * Temporal does not know ends failed.
   */
  async function reconciled(r: ReplayRow): Promise<ReplayRow> {
    if (r.status !== 'running') return r;
    let status: string;
    try {
      status = (await deps.client.workflow.getHandle(replayWorkflowId(r.id)).describe()).status.name;
    } catch (err) {
      if (!(err instanceof WorkflowNotFoundError)) return r; // Temporal unreachable: the row as it is
      status = 'NOT_FOUND';
    }
    if (status === 'RUNNING' || status === 'CONTINUED_AS_NEW' || status === 'COMPLETED') return r; // a completed run wrote its end before it completed
    const end = status === 'CANCELLED' ? { status: 'cancelled' as const } : { status: 'failed' as const, error: status === 'NOT_FOUND' ? 'the replay workflow is not in Temporal' : `the replay workflow ended ${status.toLowerCase().replace(/_/g, ' ')} without recording its end` };
    await store.finish(r.id, end);
    return (await store.get(r.id)) ?? r;
  }

  async function row(actor: Actor, rawId: unknown): Promise<ReplayRow> {
    mayReplay(actor);
    const id = ReplayIdSchema.safeParse(rawId);
    if (!id.success) throw new ReplayInputError(issueText('invalid replay id', id.error));
    const r = await store.get(id.data);
    if (!r) throw new ReplayInputError(`no replay ${id.data}`, 404);
    return reconciled(r);
  }

  return {
    async start(actor, body, opts = {}) {
      mayReplay(actor);
      const id = opts.key !== undefined ? replayIdFor(actor.id, opts.key) : newReplayId();
      // a keyed retry whose first call started its run: that replay, whatever this body says
      if (opts.key !== undefined) {
        const first = await startedAs(id);
        if (first) return first;
      }
      const b = StartBody.safeParse(body);
      if (!b.success) throw new ReplayInputError(b.error.issues[0]?.code === 'unrecognized_keys' || b.error.issues[0]?.code === 'invalid_type' ? `invalid request: expected {"selection", "alternative"?, "concurrency"?}; ${b.error.issues[0].message}` : issueText('invalid request', b.error));
      if (b.data.selection === undefined) throw new ReplayInputError('invalid request: a selection is required ({"selection": {...}})');
      const sel = ReplaySelectionSchema.safeParse(b.data.selection);
      if (!sel.success) throw new ReplayInputError(issueText('invalid selection', sel.error));
      const alternative = alternativeOf(b.data.alternative);
      let resolved;
      try {
        resolved = await resolveSelection(db, sel.data, { account: deps.account });
      } catch (err) {
        if (err instanceof SelectionError) throw new ReplayInputError(`nothing to replay: ${err.message}`);
        throw err;
      }
      const workflowId = replayWorkflowId(id);
      // the handoff: the run, started once under its id; it writes its own row
      try {
        await startReplayWorkflow(
          deps.client,
          deps.taskQueue,
          { replayId: id, turnIds: resolved.turnIds, alternative, concurrency: b.data.concurrency ?? DEFAULT_REPLAY_CONCURRENCY, selection: resolved.selection, requestedBy: actor.name },
          { truncated: resolved.truncated },
        );
      } catch (err) {
        if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
        // the same key at the same moment (or a first call that got this far): its replay, never a second
        const first = await startedAs(id);
        if (first) return first;
        throw new ReplayInputError(`replay ${id} was started already, but its run cannot be read: try GET /api/v1/replays/${id}`, 409);
      }
      faultPoint('replay.started');
      // listed at once (the run writes the same row; whichever comes first is kept)
      await store.upsert({ id, selection: resolved.selection, alternative, turnIds: resolved.turnIds, requestedBy: actor.name, workflowId });
      return { id, workflowId, turns: resolved.turnIds.length, truncated: resolved.truncated, selection: resolved.selection };
    },

    async list(actor, query = {}) {
      mayReplay(actor);
      const limit = query.limit === undefined ? 50 : LimitSchema.safeParse(query.limit);
      if (typeof limit !== 'number' && !limit.success) throw new ReplayInputError('limit: expected a whole number from 1 to 500');
      const rows = await store.list({ limit: typeof limit === 'number' ? limit : limit.data });
      return (await Promise.all(rows.map(reconciled))).map(view);
    },

    async get(actor, id) {
      return view(await row(actor, id));
    },

    async report(actor, id, rawFormat) {
      const r = await row(actor, id);
      const f = FormatSchema.safeParse(rawFormat ?? 'json');
      if (!f.success) throw new ReplayInputError(f.error.issues[0]?.message ?? 'format: expected json, markdown or jsonl');
      // every secret Steward holds is masked in every view of the report (the API, the CLI, the
      // console: all read it here); the kept blob stays as recorded
      const report = r.reportHash ? maskHeldSecretsDeep(JSON.parse(await getBlobText(db, r.reportHash)) as unknown) : null;
      if (f.data === 'json') return { format: 'json', replay: view(r), report };
      if (report === null) {
        throw new ReplayInputError(
          r.status === 'running' ? `replay ${r.id} is still running (${r.turnCount} turns): its report is ready when it ends (?format=json shows its state)` : `replay ${r.id} ended ${r.status} without a report${r.error ? `: ${r.error}` : ''}`,
          409,
        );
      }
      return { format: f.data, text: f.data === 'markdown' ? deps.formats.markdown(report) : deps.formats.jsonl(report) };
    },

    async cancel(actor, id) {
      const r = await row(actor, id);
      if (r.status !== 'running') throw new ReplayInputError(`replay ${r.id} is not running (${r.status}): nothing to cancel`, 409);
      try {
        // the workflow cancels its children and records the replay as cancelled with what it has
        await deps.client.workflow.getHandle(replayWorkflowId(r.id)).cancel();
      } catch (err) {
        if (!(err instanceof WorkflowNotFoundError)) throw err;
        throw new ReplayInputError(`replay ${r.id} has no running workflow (it has just ended): nothing to cancel`, 409);
      }
      return { id: r.id, status: 'cancelling' };
    },
  };
}
