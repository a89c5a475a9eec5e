/**
 * The activities of an objective's run: record it (or skip it, e.g. when a model budget of its
 * turn is spent), put its prompt into the destination chat's transcript as the turn's inbound
 * message, and record the result (a turn a budget refused: skipped); a failed run tells the
 * admins with the run's link. Keyed by the run's workflow id: a retry repeats
 * nothing. The work is domain/objectives/runs.ts; these name the workflow execution and turn a
 * vanished run into a non-retryable failure.
 */
import { activityInfo } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { Logger } from 'pino';
import type { Db } from '../domain/db.js';
import type { Limiter } from '../domain/limits.js';
import { finishObjectiveRun, prepareObjectiveRun, type FinishRunInput, type FinishRunResult, type PrepareRunInput, type PrepareRunResult, type RunExecution } from '../domain/objectives/runs.js';
import type { Senders } from '../domain/outbox.js';

export type { FinishRunResult, PrepareRunResult } from '../domain/objectives/runs.js';

export interface ObjectiveDeps {
  db: Db;
  senders: Senders;
  defaultModel: string;
  /** The limits of the paths that cause model calls: a run claims one use of its objective's budget. */
  limiter?: Limiter;
  /** Model budgets are enforced (the model registry reserves from the ledger): a run whose budget is spent is skipped before its turn. */
  budgets?: boolean;
  log?: Logger;
  runLink?: (workflowId: string) => string | undefined;
  onTranscript?: (sessionId: string, role: 'user' | 'assistant' | 'system') => void;
}

/** The workflow execution the current activity runs for. */
function execution(): RunExecution {
  const info = activityInfo();
  return info.workflowExecution ? { workflowId: info.workflowExecution.workflowId, runId: info.workflowExecution.runId } : {};
}

export function createObjectiveActivities(deps: ObjectiveDeps) {
  const { db } = deps;
  return {
    /** Record the run; skip it when the objective is gone, its scheduled time was chosen to be skipped, or a budget of its turn is spent. */
    async objectivePrepareRun(input: PrepareRunInput): Promise<PrepareRunResult> {
      return prepareObjectiveRun(db, input, {
        execution,
        defaultModel: deps.defaultModel,
        onTranscript: deps.onTranscript,
        senders: deps.senders,
        ...(deps.limiter ? { limiter: deps.limiter } : {}),
        ...(deps.budgets ? { budgets: true } : {}),
      });
    },

    /** Record the result; a failed run tells the admins (admin channel, else their DMs) with its link; a turn a budget refused is a skipped run. */
    async objectiveFinishRun(input: FinishRunInput): Promise<FinishRunResult> {
      const ended = await finishObjectiveRun(db, deps.senders, input, { execution, runLink: deps.runLink });
      if (!ended) throw ApplicationFailure.create({ type: 'ObjectiveGone', message: `no run ${input.runId}`, nonRetryable: true });
      return ended;
    },
  };
}
