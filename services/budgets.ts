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
 * the usage of the current period is kept.
 */
import type { Db } from '../domain/db.js';
import { BudgetDefinitionError, budgetTransaction, definitionRecord, deleteBudget, noteBudgetsChanged, parseBudgetDefinition, readBudget, writeBudget, type Budget, type BudgetDefinition } from '../domain/budgets/definitions.js';
import { budgetsWithUsage, budgetUsage, ENV_BUDGET_ID, type BudgetUsageRow } from '../domain/budgets/ledger.js';
import { describeRenewal, periodName } from '../domain/budgets/periods.js';
import { writeReceiptIn } from '../domain/receipts.js';
import { directSql } from '../domain/sql.js';
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
  return definitionRecord(b);
}

function budgetView(b: Budget, u: BudgetUsageRow): BudgetView {
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

function refuseEnvBudget(id: string, what: string): void {
  if (id === ENV_BUDGET_ID) throw new ServiceInputError(`The budget ${ENV_BUDGET_ID} is the STEWARD_TOKEN_BUDGET setting's: ${what} the setting (nothing changed)`, 409);
}

export type BudgetService = ReturnType<typeof createBudgetService>;

export function createBudgetService(db: Db, opts: { now?: () => number } = {}) {
  const now = opts.now ?? Date.now;
  return {
    /** Every budget with its current period's usage, by scope and id. */
    async list(): Promise<BudgetView[]> {
      return (await budgetsWithUsage(db, now())).map(({ budget, usage }) => budgetView(budget, usage));
    },

    /** One budget with its current period's usage, or undefined. */
    async get(id: string): Promise<BudgetView | undefined> {
      const b = await readBudget(directSql(db), id);
      return b ? budgetView(b, await budgetUsage(db, b, now())) : undefined;
    },

    /**
     * Define the budget `id` or change it (the whole definition: what is not given takes its
     * default). `input` is checked by the budget's schema; a bad field throws ServiceInputError
     * (400) and changes nothing. Receipted `budget.change` with before (null when new) and
     * after, in the transaction that writes it (never a change without its receipt).
     */
    async set(by: Requester, id: string, input: unknown, source: 'api' | 'cli'): Promise<{ created: boolean; budget: BudgetView }> {
      if (input === null || typeof input !== 'object' || Array.isArray(input)) throw new ServiceInputError('Budget refused (nothing changed): expected an object {"scope", "scopeId"?, "tokens"?, "money"?, "period"?, "timezone"?}.');
      if ('id' in input && (input as { id: unknown }).id !== id) throw new ServiceInputError(`Budget refused (nothing changed): id: the body's id differs from ${id}.`);
      refuseEnvBudget(id, 'change');
      let definition: BudgetDefinition;
      try {
        definition = parseBudgetDefinition({ ...input, id });
      } catch (err) {
        if (err instanceof BudgetDefinitionError) throw new ServiceInputError(err.message);
        throw err;
      }
      const { before, after } = await budgetTransaction(db, async (tx) => {
        const before = await readBudget(tx, id);
        const after = await writeBudget(tx, definition, source);
        await writeReceiptIn(tx, { kind: 'budget.change', actor: by.id, data: { action: 'set', budget: id, before: before ? definitionView(before) : null, after: definitionView(after) } });
        return { before, after };
      });
      noteBudgetsChanged();
      return { created: !before, budget: budgetView(after, await budgetUsage(db, after, now())) };
    },

    /** Remove the budget `id` and its usage; undefined when there is none. Receipted `budget.change` in the same transaction. */
    async remove(by: Requester, id: string): Promise<BudgetDefinitionView | undefined> {
      refuseEnvBudget(id, 'unset');
      const removed = await budgetTransaction(db, async (tx) => {
        const before = await readBudget(tx, id);
        if (!before || !(await deleteBudget(tx, id))) return undefined;
        const view = definitionView(before);
        await writeReceiptIn(tx, { kind: 'budget.change', actor: by.id, data: { action: 'remove', budget: id, before: view, after: null } });
        return view;
      });
      if (removed) noteBudgetsChanged();
      return removed;
    },
  };
}
