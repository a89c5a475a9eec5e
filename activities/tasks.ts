/**
 * The activities of triage and tasks: classify one group message with a model step, record the
 * decision (receipt, task, routing post), record a failed classification, and remind the admins
 * of a task that came due. Thin wrappers over domain/tasks/triage.ts: they name the workflow
 * execution, pass the cancellation signal to the model call, and turn a model error that no
 * retry can mend into a non-retryable failure.
 */
import { activityInfo, Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { Db } from '../domain/db.js';
import { classifyModelError, type ModelRegistry } from '../domain/model.js';
import type { Senders } from '../domain/outbox.js';
import { classifyMessage, recordTriage, recordTriageFailure, remindTask, TriageAnswerError, type ClassifyResult, type ReminderOutcome, type TriageDecision, type TriageMessage } from '../domain/tasks/triage.js';

export type { ClassifyResult, ReminderOutcome, TriageDecision, TriageMessage } from '../domain/tasks/triage.js';

export interface TaskActivityDeps {
  db: Db;
  models: ModelRegistry;
  senders: Senders;
}

function execution(): { workflowId?: string; runId?: string } {
  const info = activityInfo();
  return info.workflowExecution ? { workflowId: info.workflowExecution.workflowId, runId: info.workflowExecution.runId } : {};
}

export function createTaskActivities(deps: TaskActivityDeps) {
  const { db, senders } = deps;
  return {
    /** One model step: the message's class, priority and due window (validated). */
    async triageClassify(m: TriageMessage): Promise<ClassifyResult> {
      try {
        return await classifyMessage(db, deps.models, m, Context.current().cancellationSignal);
      } catch (err) {
        if (err instanceof TriageAnswerError) throw ApplicationFailure.retryable(err.message, 'TriageAnswerInvalid');
        const c = classifyModelError(err);
        if (!c.retryable) throw ApplicationFailure.nonRetryable(c.message, c.type);
        throw ApplicationFailure.retryable(c.message, c.type);
      }
    },

    /** Record the decision: receipt, task (not for noise), routing post to the admins. */
    async triageRecord(input: { message: TriageMessage; result: ClassifyResult }): Promise<TriageDecision> {
      return recordTriage(db, senders, input.message, input.result, execution());
    },

    /** The classification failed for good: receipted, the admins told (of a budget's refusal: once, by the ledger). */
    async triageFailed(input: { message: TriageMessage; error: string; budget?: boolean }): Promise<void> {
      await recordTriageFailure(db, senders, input.message, input.error, execution(), { budget: input.budget === true });
    },

    /** The task came due: remind the admins once if it is still open; or say it ended, or is due later. */
    async taskRemind(input: { taskId: string }): Promise<ReminderOutcome> {
      return remindTask(db, senders, input.taskId, execution());
    },
  };
}
