/**
 * One run of an objective, started by its Temporal Schedule (or trigger / backfill). Its
 * workflow id is the objective's prefix plus the scheduled time (Temporal appends it), so a
 * scheduled time is never run twice. The run records itself, skips when the operator chose to
 * skip missed runs, runs the prompt as a turn (a child workflow: the same agent loop, tools and
 * approvals as chat) whose reply goes to the objective's chat through the outbox, and records
 * the result. A failed run fails the workflow, so the schedule's pause-on-failure applies, and
 * the admins are told with the run's link. A model budget of its turn spent: the run is skipped
 * before its turn (the prepare activity), or, refused mid-way, recorded as skipped (not a
 * failure: the schedule goes on, and runs again once the budget renews or is raised).
 * Deterministic: no I/O here.
 */
import {
  ApplicationFailure,
  CancellationScope,
  ChildWorkflowFailure,
  executeChild,
  isCancellation,
  patched,
  proxyActivities,
  workflowInfo,
} from '@temporalio/workflow';
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import type { createActivities } from '../../activities/index.js';
import type { ObjectiveRunInput, ObjectiveRunResult } from '../../common/objectives.js';
import { ChatAttr, KindAttr, PlatformAttr } from '../search-attributes.js';
import { turnWorkflow } from '../chat/turn.js';

type Activities = ReturnType<typeof createActivities>;

/**
 * A turn refused by a model budget (outcome `budget-refused`, or `failed` at a budget's refusal)
 * makes a skipped run: the run completes instead of failing (no pause on failure, no failure
 * notice). Runs that recorded their end before it failed, and replay so.
 */
export const OBJECTIVE_BUDGET_SKIP_PATCH = 'steward-objective-budget-skip';

/** Set by the Temporal server on runs a schedule starts. */
const ScheduledStartAttr = defineSearchAttributeKey('TemporalScheduledStartTime', SearchAttributeType.DATETIME);

function reasonOf(err: unknown): string {
  let e: unknown = err;
  while ((e instanceof ChildWorkflowFailure || e instanceof ApplicationFailure) && e.cause) e = e.cause;
  return e instanceof Error ? e.message : String(e);
}

export async function objectiveRunWorkflow(input: ObjectiveRunInput): Promise<ObjectiveRunResult> {
  const info = workflowInfo();
  const acts = proxyActivities<Activities>({
    ...(input.activityQueue ? { taskQueue: input.activityQueue } : {}),
    startToCloseTimeout: '1 minute',
    retry: { initialInterval: '500 milliseconds', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 20, nonRetryableErrorTypes: ['ObjectiveGone'] },
  });
  const scheduledAt = info.typedSearchAttributes.get(ScheduledStartAttr);
  const prep = await acts.objectivePrepareRun({
    objectiveId: input.objectiveId,
    runId: info.workflowId,
    ...(scheduledAt ? { scheduledAt: new Date(scheduledAt.getTime()).toISOString() } : {}),
    ...(input.event ? { event: input.event } : {}),
    maxSteps: input.maxSteps,
  });
  if (prep.kind === 'skip') return { status: 'skipped', reason: prep.reason };

  let failure: string | undefined;
  let outcome: string | undefined;
  try {
    const result = await executeChild(turnWorkflow, {
      workflowId: prep.turn.turnId,
      args: [{ ...prep.turn, ...(input.activityQueue ? { activityQueue: input.activityQueue } : {}) }],
      typedSearchAttributes: [
        { key: PlatformAttr, value: prep.turn.conversation.platform },
        { key: ChatAttr, value: prep.turn.conversation.chatId },
        { key: KindAttr, value: 'turn' },
      ],
      staticSummary: `Objective ${prep.name}: turn`,
    });
    outcome = result.outcome;
    if (result.outcome !== 'replied') failure = `the turn ended ${result.outcome}`;
  } catch (err) {
    if (isCancellation(err)) {
      await CancellationScope.nonCancellable(() => acts.objectiveFinishRun({ runId: info.workflowId, status: 'failed', reason: 'cancelled' }));
      throw err;
    }
    failure = reasonOf(err);
  }
  if (failure !== undefined) {
    // a turn a model budget refused makes a skipped run, not a failed one (runs recorded before this patch failed)
    const budgetSkip = (outcome === 'failed' || outcome === 'budget-refused') && patched(OBJECTIVE_BUDGET_SKIP_PATCH);
    const ended = await acts.objectiveFinishRun({ runId: info.workflowId, status: 'failed', reason: failure, ...(outcome ? { outcome } : {}), ...(budgetSkip ? { skipOnBudget: true } : {}) });
    if (budgetSkip && ended.status === 'skipped') return { status: 'skipped', turnId: prep.turn.turnId, ...(outcome ? { outcome } : {}), ...(ended.reason ? { reason: ended.reason } : {}) };
    // failing the run lets the schedule pause on failure, and shows it failed in the UI
    throw ApplicationFailure.create({ type: 'ObjectiveRunFailed', message: `objective ${prep.name}: ${failure}`, nonRetryable: true });
  }
  await acts.objectiveFinishRun({ runId: info.workflowId, status: 'done', outcome: outcome ?? 'replied' });
  return { status: 'done', turnId: prep.turn.turnId, ...(outcome ? { outcome } : {}) };
}
