/**
 * The floor: the smallest conversation a plain Temporal application would write. One
 * workflow per conversation, reached with update-with-start; each message is an update whose
 * handler runs one chat/completions activity and returns the reply. It continues as new when
 * Temporal suggests it. No Steward code.
 */
import { allHandlersFinished, condition, continueAsNew, defineUpdate, proxyActivities, setHandler, workflowInfo } from '@temporalio/workflow';
import type { createFloorActivities } from './activities.js';

export const sayUpdate = defineUpdate<string, [string]>('say');

const { chat } = proxyActivities<ReturnType<typeof createFloorActivities>>({ startToCloseTimeout: '1 minute' });

export async function floorConversation(): Promise<void> {
  setHandler(sayUpdate, (text) => chat(text));
  await condition(() => workflowInfo().continueAsNewSuggested);
  await condition(allHandlersFinished);
  await continueAsNew<typeof floorConversation>();
}
