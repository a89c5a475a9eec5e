/**
 * Budgets: list them with their current period's usage, define or change one, remove one. The
 * HTTP routes (adapters/http/budgets.ts) and the CLI (`steward budgets`, platform/admin-cli.ts)
 * call these functions, and every change writes its `budget.change` receipt here (before and
 * after), so each surface writes the same receipts; only the actor differs (the API's
 * operator, `cli` for the command line) and the budget's `source` (api, cli).
 *
 * A definition is checked by the budget's zod schema (domain/budgets/definitions.ts): a bad
 * field is refused with ServiceInputError (400) and changes nothing. STEWARD_TOKEN_BUDGET's
 * installation budget belongs to the setting: changing or removing it here is refused (409).
 * The ledger reads budgets on every reservation, so a change applies to the next model call;
 * the usage of the current period is kept. A change wakes the chat turns waiting on the budget
 * (`wakeBudgetWaiters`, services/budget-waiters.ts, when given): they try their model step again.
 */
import type { Db } from '../domain/db.js';
import { BudgetDefinitionError, defineBudget, listBudgets, removeBudget, type Budget } from '../domain/budgets/definitions.js';
import { budgetUsage, ENV_BUDGET_ID } from '../domain/budgets/ledger.js';
import { describeRenewal, periodName } from '../domain/budgets/periods.js';
import { writeReceipt } from '../domain/receipts.js';
import { ServiceInputError, type Requester } from './requests.js';

/** Tokens and USD (null: not limited). */
export interface Amounts {
  tokens: number | null;
  money: number | null;
}

/** A budget as the API and the CLI show it: its definition and its current period's usage. */
export interface BudgetView {
  id: string;
  scope: Budget['scope'];
  scopeId: string | null;
  /** Tokens per period; null: not limited. */
  tokens: number | null;
  /** USD per period; null: not limited. */
  money: number | null;
  /** day, week, month, none (a total), or window (STEWARD_TOKEN_BUDGET's fixed window). */
  period: Budget['period'];
  timezone: string;
  windowSeconds: number | null;
  /** env (STEWARD_TOKEN_BUDGET), file, api, cli. */
  source: string;
  usage: {
    /** The current period's name for people: day, week, month, none, or the window ("hour"). */
    period: string;
    periodStart: string;
    /** When the period renews; null for a total. */
    renewsAt: string | null;
    /** The renewal on the budget's wall clock (`2026-11-29 00:00 Europe/Berlin`); null for a total. */
    renews: string | null;
    used: { tokens: number; money: number };
    /** Held by calls not settled yet. */
    reserved: { tokens: number; money: number };
    /** What a call may still take (0 at least); null where the budget does not limit. */
    left: Amounts;
  };
}

/** A budget's definition as receipts record it (no usage). */
export type BudgetDefinitionView = Omit<BudgetView, 'usage'>;

const usd = (micros: number) => micros / 1_000_000;

function definitionView(b: Budget): BudgetDefinitionView {
  return { id: b.id, scope: b.scope, scopeId: b.scopeId, tokens: b.tokens, money: b.micros === null ? null : usd(b.micros), period: b.period, timezone: b.timezone, windowSeconds: b.windowSeconds, source: b.source };
}

async function budgetView(db: Db, b: Budget, at: number): Promise<BudgetView> {
  const u = await budgetUsage(db, b, at);
  const left = (limit: number | null, used: number, reserved: number) => (limit === null ? null : Math.max(0, limit - used - reserved));
  const leftMicros = left(b.micros, u.usedMicros, u.reservedMicros);
  return {
    ...definitionView(b),
    usage: {
      period: periodName(b),
      periodStart: u.period.start.toISOString(),
      renewsAt: u.period.end ? u.period.end.toISOString() : null,
      renews: u.period.end ? describeRenewal(b, u.period.end) : null,
      used: { tokens: u.usedTokens, money: usd(u.usedMicros) },
      reserved: { tokens: u.reservedTokens, money: usd(u.reservedMicros) },
      left: { tokens: left(b.tokens, u.usedTokens, u.reservedTokens), money: leftMicros === null ? null : usd(leftMicros) },
    },
  };
}

/** The budget `id` as the ledger reads it, or undefined. */
async function findBudget(db: Db, id: string): Promise<Budget | undefined> {
  return (await listBudgets(db)).find((b) => b.id === id);
}

function refuseEnvBudget(id: string, what: string): void {
  if (id === ENV_BUDGET_ID) throw new ServiceInputError(`The budget ${ENV_BUDGET_ID} is the STEWARD_TOKEN_BUDGET setting's: ${what} the setting (nothing changed)`, 409);
}

export type BudgetService = ReturnType<typeof createBudgetService>;

export interface BudgetServiceOptions {
  now?: () => number;
  /**
   * Wake the turns waiting on a budget (services/budget-waiters.ts with the Temporal client);
   * the number woken. Absent (no Temporal at hand): the waiting turns re-check by themselves.
   */
  wakeBudgetWaiters?: (budgetId: string) => Promise<number>;
  /** Told when waking fails (the change stands: the turns re-check by themselves). */
  onWakeError?: (budgetId: string, err: unknown) => void;
}

export function createBudgetService(db: Db, opts: BudgetServiceOptions = {}) {
  const now = opts.now ?? Date.now;
  /** The change is made and receipted: wake its waiting turns (a failure does not undo it). */
  const wake = async (id: string): Promise<void> => {
    if (!opts.wakeBudgetWaiters) return;
    try {
      await opts.wakeBudgetWaiters(id);
    } catch (err) {
      opts.onWakeError?.(id, err);
    }
  };
  return {
    /** Every budget with its current period's usage, by scope and id. */
    async list(): Promise<BudgetView[]> {
      const at = now();
      return Promise.all((await listBudgets(db)).map((b) => budgetView(db, b, at)));
    },

    /** One budget with its current period's usage, or undefined. */
    async get(id: string): Promise<BudgetView | undefined> {
      const b = await findBudget(db, id);
      return b ? budgetView(db, b, now()) : undefined;
    },

    /**
     * Define the budget `id` or change it (the whole definition: what is not given takes its
     * default). `input` is checked by the budget's schema; a bad field throws ServiceInputError
     * (400) and changes nothing. Receipted `budget.change` with before (null when new) and after.
     */
    async set(by: Requester, id: string, input: unknown, source: 'api' | 'cli'): Promise<{ created: boolean; budget: BudgetView }> {
      if (input === null || typeof input !== 'object' || Array.isArray(input)) throw new ServiceInputError('Budget refused (nothing changed): expected an object {"scope", "scopeId"?, "tokens"?, "money"?, "period"?, "timezone"?}.');
      if ('id' in input && (input as { id: unknown }).id !== id) throw new ServiceInputError(`Budget refused (nothing changed): id: the body's id differs from ${id}.`);
      refuseEnvBudget(id, 'change');
      const before = await findBudget(db, id);
      let after: Budget;
      try {
        after = await defineBudget(db, { ...input, id }, source);
      } catch (err) {
        if (err instanceof BudgetDefinitionError) throw new ServiceInputError(err.message);
        throw err;
      }
      await writeReceipt(db, { kind: 'budget.change', actor: by.id, data: { action: 'set', budget: id, before: before ? definitionView(before) : null, after: definitionView(after) } });
      await wake(id);
      return { created: !before, budget: await budgetView(db, after, now()) };
    },

    /** Remove the budget `id` and its usage; undefined when there is none. Receipted `budget.change`. */
    async remove(by: Requester, id: string): Promise<BudgetDefinitionView | undefined> {
      refuseEnvBudget(id, 'unset');
      const before = await findBudget(db, id);
      if (!before || !(await removeBudget(db, id))) return undefined;
      const view = definitionView(before);
      await writeReceipt(db, { kind: 'budget.change', actor: by.id, data: { action: 'remove', budget: id, before: view, after: null } });
      await wake(id);
      return view;
    },
  };
}
