/**
 * The handoff of intake: how an accepted input reaches the workflow that acts on it, exactly
 * once, whatever instant a process dies. Temporal is the ledger of what was handed over; a
 * database row only says an input was accepted, never that it was handed over.
 *
 * - A message (chat, API, OpenHarness, a task handed to the agent) is recorded under its key,
 *   then handed to its session with that key (the session's id is deterministic), then marked
 *   handed over (an `ingress.handed` receipt, written only after the handoff succeeded). The
 *   handoff is an update-with-start (`inbound`, the update's id the message's key) that waits
 *   up to `acceptMs` for a worker to accept it: accepted, the message is in the session's
 *   history. Not accepted in time (no worker polls, or it is busy), refused by a worker that
 *   does not know the update, or failed, the same message goes by signal-with-start, durable at
 *   once. A redelivery of a recorded key that is not marked is handed over again with the same
 *   key; the session takes a key once (a bounded set of recent keys carried across
 *   continue-as-new, workflows/chat/session-state.ts): the update's validator refuses a key it
 *   took (an answer meaning "already handed over", nothing written to the history) and the
 *   signal's handler drops it, so a message that came both ways, or before a crash and again
 *   after it, is answered once.
 * - A run (an objective's event run: webhook, file change, email; a group message's triage) has a
 *   workflow id derived from its input and starts with REJECT_DUPLICATE: a second start, while
 *   the run lives or after it closed, is refused by Temporal and means "already handed over";
 *   the mark (a keyed receipt) is written after the start (services/objectives.ts,
 *   services/tasks.ts).
 * - Where no redelivery comes, a sweep (`startResumingHandoffs`: at start, then every minute)
 *   hands over chat messages accepted but not marked (the ingress's sweep) and starts event runs
 *   recorded but not marked (the objective service's). A task's hand is finished by handing it
 *   again (the task stays open until its message was handed over).
 * - A command is not handed over but run in the request; it is done once its answer is recorded
 *   (services/chat/pipeline.ts): a redelivery before that runs it again. A command that makes
 *   something (/change, /task) derives the id of what it makes from the message's key and
 *   starts its run with `startRunOnce`, so the rerun finds the first run's change or task.
 *
 * The checkpoints of test/e2e/intake-faults.test.ts (common/fault-points.ts) sit between the
 * steps.
 */
import { WithStartWorkflowOperation, WorkflowExecutionAlreadyStartedError, WorkflowUpdateFailedError, type Client, type WorkflowStartOptions } from '@temporalio/client';
import { ApplicationFailure, type Workflow } from '@temporalio/common';
import { faultPoint } from '../common/fault-points.js';
import type { Db } from '../domain/db.js';
import { receiptExists, writeReceipt, type ReceiptInput } from '../domain/receipts.js';
import { DUPLICATE_MESSAGE_FAILURE, inboundSignal, inboundUpdate } from '../workflows/messages.js';
import { sessionWorkflow } from '../workflows/chat/session.js';
import type { InboundRef } from '../workflows/types.js';

/**
 * The window of a sweep of handoffs that did not complete (the process stopped between the
 * record and the handoff, and no redelivery came: Discord does not redeliver, a Telegram update
 * whose handler failed is confirmed, a webhook sender may not retry).
 */
export interface ResumeOptions {
  /** Only inputs accepted at least this long ago (default 30 s: a handoff on its way is left to finish). */
  olderThanMs?: number;
  /** Only inputs accepted within this long (default 10 minutes). */
  withinMs?: number;
}

export const RESUME_PAGE = 500;
export const RESUME_MAX_PAGES = 200;

export function resumeWindow(opts: ResumeOptions, now = Date.now()): { from: Date; to: Date } {
  return { from: new Date(now - (opts.withinMs ?? 10 * 60_000)), to: new Date(now - (opts.olderThanMs ?? 30_000)) };
}

/** The key of the mark a handed-over message gets. */
export const handedKey = (messageKey: string): string => `${messageKey}:handed`;

/** Whether the message recorded under `messageKey` was handed over to its session. */
export function wasHandedOver(db: Db, messageKey: string): Promise<boolean> {
  return receiptExists(db, handedKey(messageKey));
}

/** How long a handoff waits for a worker to accept the message's update before it signals instead (STEWARD_HANDOFF_ACCEPT_MS). */
export const DEFAULT_HANDOFF_ACCEPT_MS = 2_000;

/** How a message reached its session: accepted by update, refused by update as taken before, or signalled. */
export type HandoffWay = 'update' | 'duplicate' | 'signal';

/**
 * Hand a recorded message to its session (update-with-start keyed by the message's key, else
 * signal-with-start), then mark it handed over. Safe to repeat for the same key: the session
 * takes a key once.
 */
export async function handOverMessage(
  client: Client,
  db: Db,
  h: { ref: InboundRef; start: WorkflowStartOptions<typeof sessionWorkflow> & { workflowId: string }; actor?: string; acceptMs?: number },
): Promise<{ runId: string; way: HandoffWay }> {
  const delivered = (await byUpdate(client, h)) ?? { runId: (await client.workflow.signalWithStart(sessionWorkflow, { ...h.start, signal: inboundSignal, signalArgs: [h.ref] })).signaledRunId, way: 'signal' as const };
  faultPoint('handoff.delivered');
  await writeReceipt(db, {
    key: handedKey(h.ref.key),
    kind: 'ingress.handed',
    workflowId: h.start.workflowId,
    runId: delivered.runId,
    sessionId: h.start.workflowId,
    ...(h.actor ? { actor: h.actor } : {}),
    data: { messageKey: h.ref.key, way: delivered.way },
  });
  faultPoint('handoff.marked');
  return delivered;
}

/**
 * The message by update-with-start, waiting up to `acceptMs` for a worker to accept it: its run
 * and way, or undefined when it was not accepted (the caller signals). An update left waiting
 * on the server may still reach the session later: it finds the key taken (by the signal) and
 * is refused.
 */
async function byUpdate(client: Client, h: { ref: InboundRef; start: WorkflowStartOptions<typeof sessionWorkflow> & { workflowId: string }; acceptMs?: number }): Promise<{ runId: string; way: HandoffWay } | undefined> {
  const acceptMs = h.acceptMs ?? DEFAULT_HANDOFF_ACCEPT_MS;
  if (acceptMs <= 0) return undefined;
  const startWorkflowOperation = new WithStartWorkflowOperation(sessionWorkflow, { ...h.start, workflowIdConflictPolicy: 'USE_EXISTING' });
  let runId = '';
  try {
    await client.withDeadline(Date.now() + acceptMs, async () => {
      const handle = await client.workflow.startUpdateWithStart(inboundUpdate, { args: [h.ref], updateId: h.ref.key, waitForStage: 'ACCEPTED', startWorkflowOperation });
      runId = handle.workflowRunId ?? '';
      // the handler queues at once: its outcome (or the validator's refusal) came with the acceptance
      await handle.result();
    });
    return { runId, way: 'update' };
  } catch (err) {
    if (err instanceof WorkflowUpdateFailedError && err.cause instanceof ApplicationFailure && err.cause.type === DUPLICATE_MESSAGE_FAILURE) return { runId, way: 'duplicate' };
    return undefined;
  }
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
  faultPoint('run.started');
  await writeReceipt(db, mark);
  faultPoint('run.marked');
  return { started };
}

/**
 * Run the sweeps of handoffs that did not complete: once at start over the last day (the
 * process may have been down a while), then every `everyMs` over the last 10 minutes. A sweep's
 * failure is logged; the next one tries again. Returns the stop.
 */
export function startResumingHandoffs(
  sweeps: Record<string, (opts: ResumeOptions) => Promise<number>>,
  log: { info(o: object, m: string): void; warn(o: object, m: string): void },
  everyMs = 60_000,
): () => Promise<void> {
  let running: Promise<void> = Promise.resolve();
  const sweep = (withinMs: number) => {
    running = running.then(async () => {
      for (const [what, run] of Object.entries(sweeps)) {
        try {
          const n = await run({ withinMs });
          if (n > 0) log.info({ what, handedOver: n }, 'accepted inputs whose handoff did not complete were handed over');
        } catch (err) {
          log.warn({ err, what }, 'the sweep of handoffs that did not complete failed');
        }
      }
    });
  };
  sweep(24 * 60 * 60_000);
  const timer = setInterval(() => sweep(10 * 60_000), everyMs);
  timer.unref();
  return async () => {
    clearInterval(timer);
    await running;
  };
}
