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

/**
 * The floor of a long conversation (bench/long-session.ts): the same conversation, continuing
 * as new after `maxTurns` messages (or when Temporal suggests it), as a Steward session does
 * every STEWARD_SESSION_MAX_TURNS turns. The smallest way plain Temporal has: a counter, then
 * continue-as-new once the handlers have finished (in the task that returns the last reply).
 */
export async function floorLongConversation(maxTurns: number): Promise<void> {
  let turns = 0;
  setHandler(sayUpdate, (text) => {
    turns++;
    return chat(text);
  });
  await condition(() => turns >= maxTurns || workflowInfo().continueAsNewSuggested);
  await condition(allHandlersFinished);
  await continueAsNew<typeof floorLongConversation>(maxTurns);
}
