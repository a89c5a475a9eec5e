/**
 * Counterfactual replay (docs/replay.md): `replayTurnsWorkflow` runs on the background queue and
 * replays past turns, a child `replayTurnWorkflow` per turn (at most `concurrency` at once).
 * Each child runs the PRODUCTION turn loop (TurnLoop) with its activities sent to the replay
 * queue (`<background queue>-replay`), where the replay implementations of the same activities
 * answer every effect from the record (activities/replays.ts). Cancelling the replay cancels its
 * children; the report of what was replayed is saved either way.
 *
 * Temporal is the ledger of a replay, its Replay row a projection: the run writes its own row
 * first (`recordReplay`, an idempotent upsert: the row exists whatever instant the API that
 * started the run stopped at) and its end last: `done` or `cancelled` with the report, `failed`
 * with the reason when anything else ends it (`failReplay`). Runs started before this are told
 * by the `steward-replay-row` patch and keep their commands.
 * Deterministic: no I/O here, only activities.
 */
import { CancellationScope, condition, executeChild, isCancellation, patched, proxyActivities, setHandler, upsertSearchAttributes, workflowInfo } from '@temporalio/workflow';
import type { ReplayActivities } from '../../activities/replays.js';
import { replayQueueOf } from '../../common/ids.js';
import type { ReplayAlternative, ReplaySummary, ReplayTurnsInput } from '../../common/replays.js';
import { turnStatusQuery } from '../messages.js';
import { KindAttr } from '../search-attributes.js';
import { TurnLoop } from '../chat/turn-loop.js';
import type { TurnResult } from '../types.js';

/** A replayed turn's end: the loop's, or `stopped` where the record's /stop came. */
export type ReplayedTurnResult = Omit<TurnResult, 'outcome'> & { outcome: TurnResult['outcome'] | 'stopped' };

/** Replayed turns take the record's later steering and its /stop at the steps they came in. */
export const REPLAY_INPUTS_PATCH = 'steward-replay-inputs';

/** The replay queue of the queue this workflow runs on (the background queue). */
function replayQueue(): string {
  return replayQueueOf(workflowInfo().taskQueue);
}

function replayActs() {
  return proxyActivities<ReplayActivities>({
    taskQueue: replayQueue(),
    startToCloseTimeout: '5 minutes',
    retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 5, nonRetryableErrorTypes: ['ReplayNotFound', 'NotAReplay', 'NotReplayable'] },
  });
}

export interface ReplayTurnInput {
  replayId: string;
  /** The recorded turn's id. */
  turnId: string;
  /** What the replay changes (the activities read it from the Replay row; here for the Temporal UI). */
  alternative: ReplayAlternative;
}

export interface ReplayTurnResult {
  /** The turn's report (JSON, common/replays.ts ReplayTurnReportSchema) as a blob. */
  reportHash: string;
  replayable: boolean;
  changed: boolean;
}

/**
 * One replayed turn: the recorded turn's input under the replayed id, run by the production loop
 * on the replay queue. An approval the policy under test asks for is answered at once (approve):
 * the replayed `runTool` then tells the model what the record told it (the recorded result, or
 * the recorded refusal), so the loop never waits and nobody is asked.
 */
export async function replayTurnWorkflow(input: ReplayTurnInput): Promise<ReplayTurnResult> {
  const acts = replayActs();
  const loaded = await acts.loadReplayTurn({ replayId: input.replayId, turnId: input.turnId });
  if (!loaded.replayable) return { reportHash: loaded.reportHash, replayable: false, changed: false };
  const loop = new TurnLoop(loaded.turnInput, { startedAt: new Date(workflowInfo().startTime.getTime()).toISOString() });
  setHandler(turnStatusQuery, () => loop.status);
  let done = false;
  const answered = new Set<string>();
  // a cancelled replay cancels this wait too: it ends with the loop, never as an unhandled rejection
  const answer = (async () => {
    for (;;) {
      await condition(() => done || (loop.status.approvalId !== undefined && !answered.has(loop.status.approvalId)));
      if (done) return;
      const approvalId = loop.status.approvalId!;
      answered.add(approvalId);
      const d = { approvalId, decision: 'approve' as const, by: 'replay', byName: 'the replay (answered from the record)' };
      try {
        loop.validateApproval(d);
        loop.decideApproval(d);
      } catch {
        // already decided (cannot happen here: nobody else reaches this run)
      }
    }
  })().catch(() => undefined);
  // the record's steering and /stop, at the steps they came in (REPLAY_INPUTS_PATCH: replays
  // started before it gave the loop the turn's first steering only, and never stopped it)
  const steering = loaded.steering ?? [];
  const last = loaded.turnInput.inbound.at(-1);
  const stop = loaded.stop;
  const scope = new CancellationScope();
  let stopped = false;
  if ((steering.length > 0 || stop) && patched(REPLAY_INPUTS_PATCH)) {
    void (async () => {
      for (const s of steering) {
        // taken in by step `beforeStep`: given while the step before runs, as it came in the record
        await condition(() => done || loop.status.step >= s.beforeStep - 1);
        if (done) return;
        // the steerer, as for the turn's first steering: the batch's last sender (docs/replay.md)
        for (const text of s.texts) loop.steer({ text, by: last?.user ?? 'replay', ...(last?.identityId ? { byId: last.identityId } : {}) });
      }
    })().catch(() => undefined);
    if (stop) {
      void (async () => {
        // in the step's model call, or once its call is answered (an approval, a tool)
        await condition(() => done || (stop.inFlight ? loop.status.step >= stop.step : loop.status.step > stop.step || (loop.status.step === stop.step && loop.status.phase !== 'model')));
        if (done) return;
        stopped = true;
        scope.cancel();
      })().catch(() => undefined);
    }
  }
  let result: ReplayedTurnResult;
  try {
    result = await scope.run(() => loop.run());
  } catch (err) {
    if (!(stopped && isCancellation(err))) throw err;
    result = { outcome: 'stopped', usage: loop.status.usage, steps: loop.status.step, unappliedSteers: [] };
  } finally {
    done = true;
  }
  await answer;
  const r = await acts.reportReplayTurn({ replayId: input.replayId, turnId: input.turnId, result });
  return { reportHash: r.reportHash, replayable: true, changed: r.changed };
}

/** What the replay returns: its report's blob and the sum. */
export interface ReplayTurnsResult {
  reportHash: string;
  summary: ReplaySummary;
}

/**
 * A replay: one child per turn, at most `concurrency` at once, then the report saved through
 * `saveReplayReport` (also when the replay is cancelled: the turns replayed so far).
 */
export async function replayTurnsWorkflow(input: ReplayTurnsInput): Promise<ReplayTurnsResult> {
  upsertSearchAttributes([{ key: KindAttr, value: 'replay' }]);
  const info = workflowInfo();
  const acts = replayActs();
  // the run writes its own row and its failure (runs started before this did neither)
  const owned = patched('steward-replay-row');
  const turns: Array<{ turnId: string; reportHash?: string; error?: string }> = input.turnIds.map((turnId) => ({ turnId }));
  try {
    if (owned) {
      await CancellationScope.nonCancellable(() =>
        acts.recordReplay({ replayId: input.replayId, workflowId: info.workflowId, turnIds: input.turnIds, alternative: input.alternative, selection: input.selection ?? null, ...(input.requestedBy !== undefined ? { requestedBy: input.requestedBy } : {}) }),
      );
    }
    let next = 0;
    const lane = async (): Promise<void> => {
      while (next < input.turnIds.length) {
        const i = next++;
        const turnId = input.turnIds[i]!;
        try {
          const r = await executeChild(replayTurnWorkflow, {
            workflowId: `${info.workflowId}:turn:${i + 1}`,
            args: [{ replayId: input.replayId, turnId, alternative: input.alternative }],
            taskQueue: info.taskQueue,
            typedSearchAttributes: [{ key: KindAttr, value: 'replay' }],
            staticSummary: `Replay ${input.replayId}: turn ${i + 1} of ${input.turnIds.length}`,
          });
          turns[i] = { turnId, reportHash: r.reportHash };
        } catch (err) {
          if (isCancellation(err)) throw err;
          turns[i] = { turnId, error: err instanceof Error ? (err.cause instanceof Error ? err.cause.message : err.message) : String(err) };
        }
      }
    };
    const lanes = Math.max(1, Math.min(input.concurrency, input.turnIds.length));
    let cancelled: unknown;
    try {
      await Promise.all(Array.from({ length: lanes }, () => lane()));
    } catch (err) {
      if (!isCancellation(err)) throw err;
      cancelled = err;
    }
    const saved = await CancellationScope.nonCancellable(() => acts.saveReplayReport({ replayId: input.replayId, status: cancelled ? 'cancelled' : 'done', turns }));
    // the report is kept; a cancelled replay's run ends cancelled, as it was asked
    if (cancelled) throw cancelled;
    return saved;
  } catch (err) {
    // anything else that ends the run: the row says failed, with the reason (a cancellation was recorded above)
    if (owned && !isCancellation(err)) {
      const reason = err instanceof Error ? (err.cause instanceof Error ? `${err.message}: ${err.cause.message}` : err.message) : String(err);
      await CancellationScope.nonCancellable(() => acts.failReplay({ replayId: input.replayId, error: reason }));
    }
    throw err;
  }
}
