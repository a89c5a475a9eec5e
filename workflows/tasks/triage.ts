/**
 * Triage of one group message (workflow id `triage:<message key>`, started by the ingress for a
 * message of a bound chat with triage on that does not address the agent; the message never
 * waits on it). A model step classifies it (retried a few times: a model may answer better the
 * next time), an activity records the decision (receipt; a task unless noise; the routing post
 * to the admin channel), and a task with a due time gets its reminder: a workflow of its own
 * (`task-reminder:<task id>`) that outlives this one. Deterministic: no I/O here.
 */
import { ActivityFailure, ApplicationFailure, ParentClosePolicy, proxyActivities, startChild } from '@temporalio/workflow';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';
import type { createActivities } from '../../activities/index.js';
import type { TriageMessage } from '../../activities/tasks.js';
import { taskReminderWorkflow } from './reminder.js';
import { ChatAttr, KindAttr, PlatformAttr } from '../search-attributes.js';

type Activities = ReturnType<typeof createActivities>;

export interface TriageInput {
  message: TriageMessage;
  /** The activities' task queue (the workflow's own when absent). */
  activityQueue?: string;
}

export interface TriageResult {
  class?: string;
  taskId?: string;
  failed?: string;
}

function reasonOf(err: unknown): string {
  let e: unknown = err;
  while ((e instanceof ActivityFailure || e instanceof ApplicationFailure) && e.cause) e = e.cause;
  return e instanceof Error ? e.message : String(e);
}

/** The classification was refused by a model budget (the ledger told the admins once already). */
function refusedByBudget(err: unknown): boolean {
  for (let e: unknown = err; e instanceof ActivityFailure || e instanceof ApplicationFailure; e = e.cause) {
    if (e instanceof ApplicationFailure && e.type === 'ModelBudgetExceeded') return true;
  }
  return false;
}

export async function triageWorkflow(input: TriageInput): Promise<TriageResult> {
  const queue = input.activityQueue ? { taskQueue: input.activityQueue } : {};
  const classify = proxyActivities<Activities>({
    ...queue,
    startToCloseTimeout: '2 minutes',
    retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 3 },
  });
  const acts = proxyActivities<Activities>({
    ...queue,
    startToCloseTimeout: '1 minute',
    retry: { initialInterval: '500 milliseconds', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 20 },
  });
  let result;
  try {
    result = await classify.triageClassify(input.message);
  } catch (err) {
    const failed = reasonOf(err);
    // the activity's input only (no new command): replay-safe
    await acts.triageFailed({ message: input.message, error: failed, ...(refusedByBudget(err) ? { budget: true } : {}) });
    return { failed };
  }
  const decision = await acts.triageRecord({ message: input.message, result });
  if (decision.taskId && decision.dueAt) {
    try {
      await startChild(taskReminderWorkflow, {
        workflowId: `task-reminder:${decision.taskId}`,
        args: [{ taskId: decision.taskId, dueAt: decision.dueAt, ...queue }],
        // the reminder outlives this workflow: it sleeps until the task is due
        parentClosePolicy: ParentClosePolicy.ABANDON,
        typedSearchAttributes: [
          { key: PlatformAttr, value: input.message.conversation.platform },
          { key: ChatAttr, value: input.message.conversation.chatId },
          { key: KindAttr, value: 'task-reminder' },
        ],
        staticSummary: `Reminder of task ${decision.taskId}`,
      });
    } catch (err) {
      // a reminder of this task runs already (it was handed a new due time meanwhile)
      if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
    }
  }
  return { class: result.classification.class, ...(decision.taskId ? { taskId: decision.taskId } : {}) };
}
