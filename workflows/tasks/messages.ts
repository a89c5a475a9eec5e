/** The messages of the task workflows, declared once for the workflows and the task service. */
import { defineSignal } from '@temporalio/workflow';

/** A task changed: its due time moved (re-routed), or it ended (handed to the agent, closed). */
export interface TaskChange {
  /** The new due time (ISO). */
  dueAt?: string;
  /** The task was handed or closed: nothing to remind of. */
  ended?: boolean;
}

export const taskChangedSignal = defineSignal<[TaskChange]>('taskChanged');
