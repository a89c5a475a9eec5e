/**
 * The repo-change workflow: a governed chain in which no single step discovers work, edits
 * code, approves its own output and publishes it.
 *
 *   intake (task draft; one clarifying question at a time, answered by update, with a deadline)
 *   -> planner (a model step; the plan is shown in chat and as this run's current details)
 *   -> isolated worker (coding agent in a throwaway clone under bubblewrap; output: a patch)
 *   -> validation gate (patch on a clean base in a second clone, policy, configured checks)
 *   -> approval (when the repository's policy asks for a human; never the requester)
 *   -> promotion gate (single writer per repository; clean-base check or revalidation;
 *      a patch artifact or a draft PR)
 *
 * Each step is its own activity with its own timeout and retry policy. Deterministic: no I/O
 * here. The request, records and artifacts live in the database and blob store (claim-check);
 * history carries ids, hashes and verdicts.
 */
import {
  ActivityCancellationType,
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  condition,
  isCancellation,
  proxyActivities,
  setCurrentDetails,
  setHandler,
  upsertSearchAttributes,
} from '@temporalio/workflow';
import type { createActivities } from '../../activities/index.js';
import { approvalIdFor } from '../../common/ids.js';
import { ApprovalBook, settlement, steererOf } from '../approvals.js';
import { approvalDecisionUpdate, changeAnswerUpdate, changeStatusQuery, changeSteerSignal } from '../messages.js';
import { GateAttr } from '../search-attributes.js';
import type { ChangeStatusView, RepoChangeInput, RepoChangeOutcome } from '../types.js';

type Activities = ReturnType<typeof createActivities>;

const NON_RETRYABLE = ['ModelBadRequest', 'ModelAuth', 'ModelNotFound', 'ModelNotConfigured', 'ChangeRefused', 'ChangeInvalid'];

/**
 * The activity proxies of one change. Its activities run on the repo task queue when the input
 * names one (the coding agent and the gates never hold a chat worker's activity slots), while the
 * workflow's own short tasks run wherever the workflow runs.
 */
function changeActivities(taskQueue: string | undefined) {
  const q = taskQueue ? { taskQueue } : {};
  /** Intake and planner: one model step each, retried like a turn's model step. */
  const modelActs = proxyActivities<Activities>({
    ...q,
    startToCloseTimeout: '10 minutes',
    heartbeatTimeout: '30 seconds',
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 4, nonRetryableErrorTypes: NON_RETRYABLE },
  });

  /** Chat notices and records: quick, retried until the platform answers. */
  const noteActs = proxyActivities<Activities>({
    ...q,
    startToCloseTimeout: '1 minute',
    retry: { initialInterval: '500 milliseconds', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 20 },
  });

  /**
   * The isolated worker: long, heartbeating, cancelled at once by /stop (the sandbox is killed
   * and the work tree removed). A retry starts again from a fresh clone of the same base. Five
   * attempts for attempts that were lost (the worker died, so its heartbeats stopped); the
   * work's own error is retried only when it ends the first attempt (the activity makes it final from the second:
   * WORK_OWN_ERROR_ATTEMPTS in activities/changes.ts). Replay does not compare an activity's
   * options: the corpus' change histories, recorded with two attempts, replay unchanged.
   */
  const workActs = proxyActivities<Activities>({
    ...q,
    startToCloseTimeout: '2 hours',
    heartbeatTimeout: '1 minute',
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry: { initialInterval: '5 seconds', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 5, nonRetryableErrorTypes: NON_RETRYABLE },
  });

  /** The validation gate: a second clone, the checks in the sandbox. */
  const gateActs = proxyActivities<Activities>({
    ...q,
    startToCloseTimeout: '1 hour',
    heartbeatTimeout: '1 minute',
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry: { initialInterval: '2 seconds', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 3, nonRetryableErrorTypes: NON_RETRYABLE },
  });

  /** The promotion gate: waits its turn for the repository's single-writer lease, then publishes. */
  const promoteActs = proxyActivities<Activities>({
    ...q,
    startToCloseTimeout: '1 hour',
    heartbeatTimeout: '1 minute',
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry: { initialInterval: '2 seconds', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 10, nonRetryableErrorTypes: NON_RETRYABLE },
  });
  return { modelActs, noteActs, workActs, gateActs, promoteActs };
}

function failureMessage(err: unknown): string {
  let e: unknown = err;
  while (e instanceof ActivityFailure && e.cause) e = e.cause;
  if (e instanceof ApplicationFailure || e instanceof Error) return e.message;
  return String(e);
}

function failureType(err: unknown): string | undefined {
  let e: unknown = err;
  while (e instanceof ActivityFailure && e.cause) e = e.cause;
  return e instanceof ApplicationFailure ? (e.type ?? undefined) : undefined;
}

/**
 * The `shapedBy` of a change's model steps' input: everyone who shaped it (its requester set: the
 * requester, the proposing turn's requester set, answerers, steerers), whom its model calls are
 * spent for; none while only the requester did. Activity inputs only (not compared on replay): no patch.
 */
function shapedBy(approvals: ApprovalBook): { shapedBy?: string[] } {
  const set = approvals.requesterSet();
  return set.length > 1 ? { shapedBy: set } : {};
}

export async function repoChangeWorkflow(input: RepoChangeInput): Promise<RepoChangeOutcome> {
  const { changeId } = input;
  const { modelActs, noteActs, workActs, gateActs, promoteActs } = changeActivities(input.activityQueue);
  const status: ChangeStatusView = { changeId, phase: 'intake', steers: 0 };
  let answer: { text: string; by: string; byName: string } | undefined;
  // everyone who shaped the change: its requester (for a change a turn proposed, every sender
  // and steerer of that turn), whoever answers its questions and whoever steers its coding
  // agent; none may approve its promotion
  const approvals = new ApprovalBook({
    what: 'change',
    requesters: [...new Set([input.requestedBy.id, ...(input.requesters ?? [])])],
    selfApprovalRefusal: 'the requester may not approve their own change, nor may anyone who shaped it (the turn that proposed it, an answer, steering) (policy forbidSelfApproval)',
  });

  setHandler(changeStatusQuery, () => ({ ...status }));
  setHandler(changeSteerSignal, (note) => {
    status.steers++;
    // read by the approval's validator (not run on replay) and the steps' inputs (not compared on replay): no patch needed
    approvals.addRequester(steererOf(note));
  });
  setHandler(
    changeAnswerUpdate,
    (a) => {
      answer = a;
      // whoever answers a clarifying question shapes the change too
      approvals.addRequester(a.by);
      delete status.question;
      return { message: 'Thanks: the change continues with your answer.' };
    },
    {
      validator: (a) => {
        if (status.phase !== 'clarify' || status.question === undefined || answer !== undefined) {
          throw new Error(`change ${changeId} is not waiting for an answer (it is in its ${status.phase} phase)`);
        }
        if (!a.text.trim()) throw new Error('the answer is empty');
      },
    },
  );
  setHandler(
    approvalDecisionUpdate,
    (d) => {
      approvals.decide(d);
      return {
        approvalId: d.approvalId,
        decision: d.decision,
        message: d.decision === 'approve' ? 'Approved: the change goes to promotion.' : `Denied: the change is not promoted${d.reason ? ` (${d.reason})` : ''}.`,
      };
    },
    // accepted once; the requester may not approve their own change where the policy says so
    { validator: (d) => approvals.validate(d) },
  );

  const finish = (outcome: RepoChangeOutcome) =>
    noteActs.changeFinish({
      changeId,
      status: outcome.status,
      phase: outcome.phase,
      ...(outcome.reason ? { reason: outcome.reason } : {}),
    });

  try {
    // ---- intake: nothing executes before it is closed ----
    const answers: string[] = [];
    let intake = await modelActs.changeIntake({ changeId, answers, ...shapedBy(approvals) });
    let asked = 0;
    while (intake.status === 'needs_clarification') {
      if (asked >= input.maxQuestions || !intake.question) {
        if (intake.plannable) break;
        const outcome: RepoChangeOutcome = { status: 'failed', phase: 'intake', reason: `intake did not close: ${intake.gap ?? 'questions remain'}` };
        await finish(outcome);
        return outcome;
      }
      asked++;
      status.phase = 'clarify';
      status.question = intake.question;
      await noteActs.changeAsk({ changeId, question: intake.question, round: asked });
      const got = await condition(() => answer !== undefined, input.clarifyTimeoutMs);
      delete status.question;
      if (!got || !answer) {
        if (intake.plannable) {
          await noteActs.changeNote({ changeId, key: `q${asked}:timeout`, text: `No answer before the deadline: continuing on the stated assumptions.` });
          break;
        }
        const outcome: RepoChangeOutcome = { status: 'failed', phase: 'clarify', reason: `no answer to the clarifying question before the deadline: ${intake.question}` };
        await finish(outcome);
        return outcome;
      }
      answers.push(answer.text);
      answer = undefined;
      status.phase = 'intake';
      intake = await modelActs.changeIntake({ changeId, answers, ...shapedBy(approvals) });
    }

    // ---- planner ----
    status.phase = 'plan';
    const plan = await modelActs.changePlan({ changeId, ...shapedBy(approvals) });
    setCurrentDetails(plan.details);

    // ---- isolated worker ----
    status.phase = 'work';
    const work = await workActs.changeWork({ changeId, ...shapedBy(approvals) });
    if (!work.patchHash) {
      const outcome: RepoChangeOutcome = { status: 'failed', phase: 'work', reason: `the coding agent left no change (${work.summary})` };
      await finish(outcome);
      return outcome;
    }

    // ---- validation gate ----
    status.phase = 'validate';
    const verdict = await gateActs.changeValidate({ changeId, baseSha: work.baseSha, patchHash: work.patchHash });
    upsertSearchAttributes([{ key: GateAttr, value: verdict.verdict }]);
    if (verdict.verdict !== 'pass') {
      const outcome: RepoChangeOutcome = { status: 'refused', phase: 'validate', reason: verdict.reasons.join('; '), patchHash: work.patchHash };
      await finish(outcome);
      return outcome;
    }

    // ---- approval (where the policy asks for a human) ----
    if (verdict.promotion === 'draft-pr-after-approval') {
      status.phase = 'approval';
      const id = approvalIdFor(changeId, 'promote');
      approvals.expect(id, verdict.forbidSelfApproval);
      status.approvalId = id;
      const req = await noteActs.changeRequestApproval({ changeId, approvalId: id, timeoutMs: verdict.approvalTimeoutMs });
      const d = await approvals.wait(id, req.timeoutMs, () =>
        noteActs.settleApproval({ approvalId: id, decision: 'cancelled', by: 'stop', byName: 'the change was stopped' }),
      );
      const settled = await noteActs.settleApproval(settlement(id, d));
      delete status.approvalId;
      if (d.decision !== 'approve') {
        const outcome: RepoChangeOutcome = { status: 'refused', phase: 'approval', reason: `promotion ${settled.reason}`, patchHash: work.patchHash };
        await finish(outcome);
        return outcome;
      }
    }

    // ---- promotion gate ----
    status.phase = 'promote';
    const promoted = await promoteActs.changePromote({ changeId, baseSha: work.baseSha, patchHash: work.patchHash, promotion: verdict.promotion });
    if (promoted.kind === 'refused') {
      const outcome: RepoChangeOutcome = { status: 'refused', phase: 'promote', reason: promoted.reason, patchHash: work.patchHash };
      await finish(outcome);
      return outcome;
    }
    status.phase = 'done';
    const outcome: RepoChangeOutcome = {
      status: 'done',
      phase: 'done',
      patchHash: promoted.result.patchHash,
      ...(promoted.result.pr ? { prUrl: promoted.result.pr.url } : {}),
    };
    await finish(outcome);
    return outcome;
  } catch (err) {
    if (isCancellation(err)) {
      const phase = status.phase;
      status.phase = 'cancelled';
      await CancellationScope.nonCancellable(() => finish({ status: 'cancelled', phase, reason: 'stopped' }));
      throw err;
    }
    const outcome: RepoChangeOutcome = {
      status: failureType(err) === 'ChangeRefused' ? 'refused' : 'failed',
      phase: status.phase,
      reason: failureMessage(err),
    };
    await finish(outcome);
    return outcome;
  }
}
