/**
 * Turns waiting on a budget: a chat turn whose model step a budget refused waits for a raise
 * (workflows/chat/turn-loop.ts, patch `steward-budget-wait`), and its session names the budget in
 * the `StewardBudget` search attribute while it waits. `wakeBudgetWaiters` finds those runs
 * through Temporal's visibility and signals each `budgetRaised`: the turn tries its step again
 * (a new reservation) and waits on when the budget still does not fit.
 *
 * Called after every change that may let a waiting turn go on: a budget set or removed
 * (services/budgets.ts, behind PUT/DELETE /api/v1/budgets and `steward budgets set|remove`)
 * and a raise for the period. A run that finished between the list and the signal is skipped.
 * Visibility is eventually consistent: a run that started waiting a moment before the list may
 * be missed; the waiting turn re-checks by itself (BUDGET_RECHECK_MS), so it is late, never lost.
 */
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { budgetRaisedSignal } from '../../workflows/messages.js';
import { BudgetAttr } from '../../workflows/search-attributes.js';

/** At most this many waiting runs are signalled per call (the list is paged). */
export const MAX_WOKEN = 1000;

/** A value inside a visibility query's single quotes. */
function quoted(v: string): string {
  return `'${v.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
}

/** The visibility query of the running runs that wait on `budgetId`. */
export function budgetWaitersQuery(budgetId: string): string {
  return `${BudgetAttr.name} = ${quoted(budgetId)} AND ExecutionStatus = 'Running'`;
}

/**
 * Signal `budgetRaised` to every running run whose `StewardBudget` names `budgetId`; the number
 * signalled. A run that ended meanwhile is skipped; any other failure is thrown (the caller
 * decides whether a change stands without the wake-up: the turns re-check by themselves).
 */
export async function wakeBudgetWaiters(client: Client, namespace: string, budgetId: string): Promise<number> {
  const query = budgetWaitersQuery(budgetId);
  let woken = 0;
  let nextPageToken: Uint8Array | undefined;
  do {
    const page = await client.workflowService.listWorkflowExecutions({ namespace, query, pageSize: 100, ...(nextPageToken ? { nextPageToken } : {}) });
    for (const run of page.executions ?? []) {
      const workflowId = run.execution?.workflowId;
      if (!workflowId) continue;
      try {
        // the run that waits (not a later run of the same workflow id: that one does not wait on it)
        await client.workflow.getHandle(workflowId, run.execution?.runId ?? undefined).signal(budgetRaisedSignal, { budgetId });
        woken++;
      } catch (err) {
        if (!(err instanceof WorkflowNotFoundError)) throw err;
      }
      if (woken >= MAX_WOKEN) return woken;
    }
    nextPageToken = page.nextPageToken && page.nextPageToken.length > 0 ? page.nextPageToken : undefined;
  } while (nextPageToken);
  return woken;
}
