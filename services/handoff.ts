/**
 * The handoff of intake: how an accepted input reaches the workflow that acts on it, exactly
 * once, whatever instant a process dies. Temporal is the ledger of what was handed over; a
 * database row only says an input was accepted, never that it was handed over.
 *
 * - A message (chat, API, OpenHarness, a task handed to the agent) is recorded under its key,
 *   then signalled to its session with that key (signal-with-start: the session's id is
 *   deterministic), then marked handed over (an `ingress.handed` receipt, written only after
 *   the signal succeeded). A redelivery of a recorded key that is not marked is signalled again
 *   with the same key; the session drops a key it has already queued or answered (a bounded set
 *   of recent keys carried across continue-as-new, workflows/chat/session-state.ts), so a
 *   signal that did arrive before the crash is not answered twice.
 * - An event run (webhook, file change, email) has a workflow id derived from the event id and
 *   starts with REJECT_DUPLICATE: a second start, while the run lives or after it closed, is
 *   refused by Temporal and means "already handed over"; the mark (its `objective.run`
 *   receipt, keyed) is written after the start (services/objectives.ts).
 *
 * The checkpoints of test/e2e/intake-faults.test.ts (common/fault-points.ts) sit between the
 * steps.
 */
import { WorkflowExecutionAlreadyStartedError, type Client, type WorkflowStartOptions } from '@temporalio/client';
import type { Workflow } from '@temporalio/common';
import { faultPoint } from '../common/fault-points.js';
import type { Db } from '../domain/db.js';
import { receiptExists, writeReceipt, type ReceiptInput } from '../domain/receipts.js';
import { inboundSignal } from '../workflows/messages.js';
import { sessionWorkflow } from '../workflows/chat/session.js';
import type { InboundRef } from '../workflows/types.js';

/** The key of the mark a handed-over message gets. */
export const handedKey = (messageKey: string): string => `${messageKey}:handed`;

/** Whether the message recorded under `messageKey` was handed over to its session. */
export function wasHandedOver(db: Db, messageKey: string): Promise<boolean> {
  return receiptExists(db, handedKey(messageKey));
}

/**
 * Hand a recorded message to its session (signal-with-start, keyed by the message's key), then
 * mark it handed over. Safe to repeat for the same key: the session takes a key once.
 */
export async function handOverMessage(
  client: Client,
  db: Db,
  h: { ref: InboundRef; start: WorkflowStartOptions<typeof sessionWorkflow> & { workflowId: string }; actor?: string },
): Promise<{ runId: string }> {
  const handle = await client.workflow.signalWithStart(sessionWorkflow, { ...h.start, signal: inboundSignal, signalArgs: [h.ref] });
  faultPoint('handoff.signalled');
  await writeReceipt(db, {
    key: handedKey(h.ref.key),
    kind: 'ingress.handed',
    workflowId: h.start.workflowId,
    runId: handle.signaledRunId,
    sessionId: h.start.workflowId,
    ...(h.actor ? { actor: h.actor } : {}),
    data: { messageKey: h.ref.key },
  });
  faultPoint('handoff.marked');
  return { runId: handle.signaledRunId };
}

/**
 * Start a run whose workflow id is derived from what it handles, at most once: a run with that
 * id that runs or ran (REJECT_DUPLICATE) counts as started. Then the mark (a keyed receipt).
 */
export async function startRunOnce<W extends Workflow>(client: Client, db: Db, workflow: W, options: WorkflowStartOptions<W>, mark: ReceiptInput & { key: string }): Promise<{ started: boolean }> {
  let started = true;
  try {
    await client.workflow.start(workflow, { ...options, workflowIdReusePolicy: 'REJECT_DUPLICATE' });
  } catch (err) {
    if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
    started = false;
  }
  faultPoint('event.started');
  await writeReceipt(db, mark);
  faultPoint('event.marked');
  return { started };
}
