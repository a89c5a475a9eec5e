/**
 * The turn workflow: the agent loop of one conversation turn. One model step per activity
 * (streamed and heartbeating in the activity), a step budget, and the reply delivered
 * through the outbox under a key derived from the turn id, so it is sent once.
 * Deterministic: no I/O here, only activities.
 */
import {
  ActivityCancellationType,
  ActivityFailure,
  ApplicationFailure,
  isCancellation,
  proxyActivities,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import type { createActivities } from '../activities/index.js';
import { replyKey } from '../common/ids.js';
import { turnSteerSignal, turnStatusQuery } from './messages.js';
import type { SteerNote, TokenUsage, TurnInput, TurnResult, TurnStatus } from './types.js';

type Activities = ReturnType<typeof createActivities>;

/** Error types the model activity raises that retrying cannot fix. */
export const NON_RETRYABLE_MODEL_ERRORS = ['ModelBadRequest', 'ModelAuth', 'ModelNotFound', 'ModelNotConfigured'];

const modelActs = proxyActivities<Activities>({
  startToCloseTimeout: '10 minutes',
  // The activity heartbeats several times a second while it waits and streams, so a dead
  // worker is noticed within this timeout and /stop reaches the activity at once.
  heartbeatTimeout: '10 seconds',
  cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
  retry: {
    initialInterval: '1 second',
    backoffCoefficient: 2,
    maximumInterval: '30 seconds',
    maximumAttempts: 5,
    nonRetryableErrorTypes: NON_RETRYABLE_MODEL_ERRORS,
  },
});

const outboxActs = proxyActivities<Activities>({
  startToCloseTimeout: '1 minute',
  retry: { initialInterval: '500 milliseconds', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 20 },
});

function addUsage(a: TokenUsage, b: TokenUsage): TokenUsage {
  return { input: a.input + b.input, output: a.output + b.output, total: a.total + b.total };
}

function failureMessage(err: unknown): string {
  let e: unknown = err;
  while (e instanceof ActivityFailure && e.cause) e = e.cause;
  if (e instanceof ApplicationFailure || e instanceof Error) return e.message;
  return String(e);
}

export async function turnWorkflow(input: TurnInput): Promise<TurnResult> {
  const { turnId } = input;
  const status: TurnStatus = {
    turnId,
    step: 0,
    phase: 'starting',
    startedAt: new Date(workflowInfo().startTime.getTime()).toISOString(),
    usage: { input: 0, output: 0, total: 0 },
  };
  const incoming: SteerNote[] = [...input.steers];
  const applied: SteerNote[] = [];
  setHandler(turnSteerSignal, (note) => {
    incoming.push(note);
  });
  setHandler(turnStatusQuery, () => status);

  const base = {
    sessionId: input.sessionId,
    turnId,
    conversation: input.conversation,
    inbound: input.inbound.map((m) => m.key),
    workingSet: input.workingSet,
    settings: input.settings,
  };

  let draftHash: string | undefined;
  let finalHash: string | undefined;
  let notice: string | undefined;
  let outcome: TurnResult['outcome'] = 'budget-exhausted';

  try {
    for (let step = 1; step <= input.maxSteps; step++) {
      applied.push(...incoming.splice(0));
      status.step = step;
      status.phase = 'model';
      const result = await modelActs.modelStep({
        ...base,
        step,
        steers: applied.map((s) => s.text),
        ...(draftHash ? { draftHash } : {}),
      });
      status.usage = addUsage(status.usage, result.usage);
      if (result.kind === 'not-configured') {
        notice = result.message;
        outcome = 'not-configured';
        break;
      }
      draftHash = result.outputHash;
      // Steering that arrived while this step ran is taken in by one more step before the
      // reply goes out, so a reply never ignores guidance the user gave during the turn.
      if (incoming.length > 0 && step < input.maxSteps) continue;
      finalHash = result.outputHash;
      outcome = 'replied';
      break;
    }
    if (!finalHash && !notice) {
      if (draftHash) {
        finalHash = draftHash;
        outcome = 'replied';
      } else {
        notice = `This turn used its budget of ${input.maxSteps} model steps without a reply.`;
      }
    }
  } catch (err) {
    if (isCancellation(err)) {
      status.phase = 'stopping';
      throw err;
    }
    outcome = 'failed';
    notice = `The model call failed: ${failureMessage(err)}`;
  }

  status.phase = 'delivering';
  const key = replyKey(turnId);
  await outboxActs.deliver({
    key,
    sessionId: input.sessionId,
    conversation: input.conversation,
    turnId,
    kind: finalHash ? 'reply' : 'notice',
    ...(finalHash ? { blobHash: finalHash } : { text: notice ?? '' }),
    usage: status.usage,
    steps: status.step,
  });
  status.phase = 'done';
  return {
    outcome,
    usage: status.usage,
    steps: status.step,
    replyKey: key,
    unappliedSteers: incoming.splice(0),
  };
}
