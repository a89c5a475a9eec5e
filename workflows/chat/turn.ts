/**
 * The turn workflow: one conversation turn as its own workflow. An objective's run starts one
 * per run (on the background queue); chat sessions started them for every turn before the
 * patch `steward-inline-turn` and now run the same loop inside the session (see session.ts),
 * so this type also replays those older histories. The loop itself is in turn-loop.ts.
 * Deterministic: no I/O here, only activities.
 */
import { setHandler, workflowInfo } from '@temporalio/workflow';
import { approvalDecisionUpdate, turnSteerSignal, turnStatusQuery } from '../messages.js';
import { TurnLoop } from './turn-loop.js';
import type { TurnInput, TurnResult } from '../types.js';

export { NON_RETRYABLE_MODEL_ERRORS } from './turn-loop.js';

export async function turnWorkflow(input: TurnInput): Promise<TurnResult> {
  const loop = new TurnLoop(input, { startedAt: new Date(workflowInfo().startTime.getTime()).toISOString() });
  setHandler(turnSteerSignal, (note) => loop.steer(note));
  setHandler(turnStatusQuery, () => loop.status);
  setHandler(approvalDecisionUpdate, (d) => loop.decideApproval(d), { validator: (d) => loop.validateApproval(d) });
  return loop.run();
}
