/**
 * A task's reminder (workflow id `task-reminder:<task id>`): a Temporal timer until the task is
 * due, then one reminder in the admin channel if the task is still open (the activity decides
 * from the task's row, and marks it, so it reminds once). A re-routed task's new due time
 * arrives as a signal and restarts the timer; a task handed to the agent or closed ends the
 * workflow (signal). Not a polling loop: one timer per due time. Deterministic: no I/O here.
 */
import { condition, proxyActivities, setHandler } from '@temporalio/workflow';
import type { createActivities } from '../../activities/index.js';
import { taskChangedSignal, type TaskChange } from './messages.js';

type Activities = ReturnType<typeof createActivities>;

export interface TaskReminderInput {
  taskId: string;
  /** When the task is due (ISO). */
  dueAt: string;
  /** The activities' task queue (the workflow's own when absent). */
  taskQueue?: string;
}

export interface TaskReminderResult {
  outcome: 'reminded' | 'ended';
  status?: string;
}

/** Rounds of "due later" before the workflow gives up (a task re-routed again and again). */
const MAX_ROUNDS = 100;

export async function taskReminderWorkflow(input: TaskReminderInput): Promise<TaskReminderResult> {
  const acts = proxyActivities<Activities>({
    ...(input.taskQueue ? { taskQueue: input.taskQueue } : {}),
    startToCloseTimeout: '1 minute',
    retry: { initialInterval: '500 milliseconds', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 20 },
  });
  let due = Date.parse(input.dueAt);
  let ended = false;
  let changed = false;
  // set before the first await: a signal-with-start's signal is not lost
  setHandler(taskChangedSignal, (c: TaskChange) => {
    if (c.ended) ended = true;
    if (c.dueAt !== undefined && !Number.isNaN(Date.parse(c.dueAt))) due = Date.parse(c.dueAt);
    changed = true;
  });
  for (let round = 0; round < MAX_ROUNDS; round++) {
    changed = false;
    const wait = due - Date.now();
    if (!ended && wait > 0) await condition(() => ended || changed, wait);
    if (ended) return { outcome: 'ended', status: 'handed or closed' };
    if (changed) continue;
    const r = await acts.taskRemind({ taskId: input.taskId });
    if (r.kind === 'reminded') return { outcome: 'reminded' };
    if (r.kind === 'ended') return { outcome: 'ended', status: r.status };
    due = Date.parse(r.dueAt);
  }
  return { outcome: 'ended', status: 'rescheduled too often' };
}
