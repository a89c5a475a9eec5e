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
 * the usage of the current period is kept. A change (set, remove) wakes the chat turns waiting
 * on the budget (`wakeBudgetWaiters`, services/budgets/waiters.ts, when given): they try their
 * model step again.
 *
 * `raise` raises a budget for its current period only (domain/budgets/raises.ts): admins only,
 * never by a person whose call the budget refused in the period (no self-raise), receipted
 * `budget.raised` (a refusal `budget.raise.refused`), then the runs waiting for the budget are
 * woken through the injected `wakeBudgetWaiters`. The chat's `/budget raise`, the admins'
 * Raise button (services/chat/budgets.ts), POST /api/v1/budgets/{id}/raise and
 * `steward budgets raise` all call it. `visibleTo` is what `/budget` shows a person.
 */
import { z } from 'zod';
import type { Db } from '../domain/db.js';
import { BudgetDefinitionError, budgetTransaction, definitionRecord, deleteBudget, noteBudgetsChanged, parseBudgetDefinition, readBudget, writeBudget, type Budget, type BudgetDefinition } from '../domain/budgets/definitions.js';
import { budgetsWithUsage, budgetUsage, ENV_BUDGET_ID, type BudgetUsageRow } from '../domain/budgets/ledger.js';
import { describeRenewal, periodName, periodOf } from '../domain/budgets/periods.js';
import { formatMoney } from '../domain/budgets/prices.js';
import { BudgetRaiseError, raiseBudget, RaiseAmountSchema, refusedPeople } from '../domain/budgets/raises.js';
import { receiptsByKeys, writeReceipt, writeReceiptIn } from '../domain/receipts.js';
import { directSql } from '../domain/sql.js';
import { isAdmin, type Actor } from '../common/roles.js';
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
    /** What admins raised this period by (it ends with the period). */
    raised: { tokens: number; money: number };
    /** What a call may still take (the limit and the period's raise, less used and reserved; 0 at least); null where the budget does not limit. */
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
  const left = (limit: number | null, raised: number, used: number, reserved: number) => (limit === null ? null : Math.max(0, limit + raised - used - reserved));
  const leftMicros = left(b.micros, u.raisedMicros, u.usedMicros, u.reservedMicros);
  return {
    ...definitionView(b),
    usage: {
      period: periodName(b),
      periodStart: u.period.start.toISOString(),
      renewsAt: u.period.end ? u.period.end.toISOString() : null,
      renews: u.period.end ? describeRenewal(b, u.period.end) : null,
      used: { tokens: u.usedTokens, money: usd(u.usedMicros) },
      reserved: { tokens: u.reservedTokens, money: usd(u.reservedMicros) },
      raised: { tokens: u.raisedTokens, money: usd(u.raisedMicros) },
      left: { tokens: left(b.tokens, u.raisedTokens, u.usedTokens, u.reservedTokens), money: leftMicros === null ? null : usd(leftMicros) },
    },
  };
}

function refuseEnvBudget(id: string, what: string): void {
  if (id === ENV_BUDGET_ID) throw new ServiceInputError(`The budget ${ENV_BUDGET_ID} is the STEWARD_TOKEN_BUDGET setting's: ${what} the setting (nothing changed)`, 409);
}

/** A raise as the caller asks for it (checked by zod: a bad field changes nothing). */
const RaiseInputSchema = z.strictObject({
  budgetId: z.string().trim().min(1, 'budgetId: the budget to raise').max(200),
  tokens: z.unknown().optional(),
  money: z.unknown().optional(),
  /** The period the raise is meant for (a button's): refused when the budget is in another period by now. */
  periodStart: z.coerce.date().optional(),
  /** Raise at most once under this key (a notice's button: its budget and period); a second raise under it is refused. */
  once: z.string().min(1).max(300).optional(),
});

/** A raise that was applied. */
export interface RaiseResult {
  budget: BudgetView;
  /** This raise (null where it gave none of the unit). */
  raise: { tokens: number | null; money: number | null };
  /** The period's raise in total after it. */
  raisedInPeriod: { tokens: number; money: number };
  /** How many waiting turns were woken (null: no waker, or it failed). */
  woken: number | null;
  /** The outcome in a sentence, for chat. */
  message: string;
}

export interface BudgetServiceOptions {
  now?: () => number;
  /**
   * Wake the runs waiting for this budget (services/budgets/waiters.ts with the Temporal client):
   * called after a raise, a set and a remove. How many were woken. Absent (no Temporal at hand):
   * the waiting turns re-check by themselves.
   */
  wakeBudgetWaiters?: (budgetId: string) => Promise<number>;
  /** Told when waking fails after a set or remove (the change stands: the turns re-check by themselves). */
  onWakeError?: (budgetId: string, err: unknown) => void;
}

export type BudgetService = ReturnType<typeof createBudgetService>;

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
      await wake(id);
      return { created: !before, budget: budgetView(after, await budgetUsage(db, after, now())) };
    },

    /**
     * The budgets a person may see: every budget for an admin (and the operator); for anyone
     * else the installation's, their own (person scope: their identity) and their chat's (chat
     * scope: `chat`, the chat's binding id).
     */
    async visibleTo(by: Actor, chat?: string): Promise<BudgetView[]> {
      const sees = (b: Budget) => isAdmin(by.role) || b.scope === 'installation' || (b.scope === 'person' && b.scopeId === by.id) || (b.scope === 'chat' && chat !== undefined && b.scopeId === chat);
      return (await budgetsWithUsage(db, now())).filter(({ budget }) => sees(budget)).map(({ budget, usage }) => budgetView(budget, usage));
    },

    /**
     * Raise a budget for its current period by tokens and/or money (USD): admins only, and not
     * by a person whose call the budget refused in this period (no self-raise). A bad field
     * throws ServiceInputError (400); an unknown budget 404; a refusal by these rules, or a
     * `periodStart` that is no longer the budget's period, 409 and a `budget.raise.refused`
     * receipt. Nothing changes on a refusal. Applied: a `budget.raised` receipt (who, how much,
     * the period), then the runs waiting for the budget are woken (`wakeBudgetWaiters`).
     */
    async raise(input: { budgetId: string; tokens?: number; money?: number; periodStart?: Date | string; once?: string; by: Actor }): Promise<RaiseResult> {
      const { by, ...rest } = input;
      const parsed = RaiseInputSchema.safeParse(rest);
      if (!parsed.success) throw new ServiceInputError(`Raise refused (nothing changed): ${parsed.error.issues.map((i) => `${i.path.length ? `${i.path.map(String).join('.')}: ` : ''}${i.message}`).join('; ')}.`);
      const { budgetId, periodStart, once } = parsed.data;
      const amount = RaiseAmountSchema.safeParse({ ...(parsed.data.tokens === undefined ? {} : { tokens: parsed.data.tokens }), ...(parsed.data.money === undefined ? {} : { money: parsed.data.money }) });
      if (!amount.success) throw new ServiceInputError(`Raise refused (nothing changed): ${amount.error.issues.map((i) => `${i.path.length ? `${i.path.map(String).join('.')}: ` : ''}${i.message}`).join('; ')}.`);
      const refuse = async (why: string, status: 404 | 409 = 409): Promise<never> => {
        await writeReceipt(db, { kind: 'budget.raise.refused', actor: by.id, data: { budget: budgetId, by: by.name, ...amount.data, why } });
        throw new ServiceInputError(why, status);
      };
      if (!isAdmin(by.role)) return refuse(`Raising a budget needs the admin role; you are ${by.role === 'operator' ? 'an' : 'a'} ${by.role}. Nothing changed.`);
      const at = now();
      const b = await readBudget(directSql(db), budgetId);
      if (!b) throw new ServiceInputError(`No budget has the id ${budgetId}.`, 404);
      const period = periodOf(b, at);
      if (periodStart && periodStart.getTime() !== period.start.getTime()) {
        return refuse(`The period of ${b.id} that began ${periodStart.toISOString()} is over (the budget renewed${period.start.getTime() > periodStart.getTime() ? ` at ${describeRenewal(b, period.start)}` : ''}); nothing changed.`);
      }
      if (by.kind === 'person' && (await refusedPeople(db, b.id, period)).includes(by.id)) {
        return refuse(`You may not raise ${b.id}: it refused a model call of yours in this period (no self-raise); another admin can. Nothing changed.`);
      }
      if (amount.data.tokens !== undefined && b.tokens === null) throw new ServiceInputError(`Raise refused (nothing changed): the budget ${b.id} does not limit tokens.`);
      if (amount.data.money !== undefined && b.micros === null) throw new ServiceInputError(`Raise refused (nothing changed): the budget ${b.id} does not limit money.`);
      const raise = { tokens: amount.data.tokens ?? null, money: amount.data.money ?? null };
      // the receipt commits with the raise (one transaction); under a `once` key it is the claim (a second click finds it taken and raises nothing)
      const receipt = {
        ...(once ? { key: `budget.raised:${once}` } : {}),
        kind: 'budget.raised' as const,
        actor: by.id,
        data: {
          budget: b.id,
          scope: b.scope,
          ...(b.scopeId ? { scopeId: b.scopeId } : {}),
          by: by.name,
          ...(raise.tokens === null ? {} : { tokens: raise.tokens }),
          ...(raise.money === null ? {} : { money: raise.money }),
          period: periodName(b),
          periodStart: period.start.toISOString(),
          renewsAt: period.end ? period.end.toISOString() : null,
        },
      };
      let raised;
      try {
        raised = await raiseBudget(db, { budgetId: b.id, ...amount.data, at }, receipt);
      } catch (err) {
        if (err instanceof BudgetRaiseError) throw new ServiceInputError(err.message);
        throw err;
      }
      if (raised === 'receipted-before') {
        const [first] = await receiptsByKeys(db, [`budget.raised:${once}`]);
        const by1 = (first?.data as { by?: unknown } | undefined)?.by;
        const who = typeof by1 === 'string' ? by1 : 'an admin';
        throw new ServiceInputError(`Already raised by ${who} from this notice for this period; /budget raise ${b.id} <amount> raises it more. Nothing changed.`, 409);
      }
      if (!raised) throw new ServiceInputError(`No budget has the id ${budgetId}.`, 404);
      let woken: number | null = null;
      if (opts.wakeBudgetWaiters) woken = await opts.wakeBudgetWaiters(b.id).catch(() => null);
      const view = budgetView(b, await budgetUsage(db, b, at));
      const amountText = [raise.tokens === null ? undefined : `${raise.tokens} tokens`, raise.money === null ? undefined : formatMoney(Math.round(raise.money * 1_000_000))].filter(Boolean).join(' and ');
      const leftText = [view.usage.left.tokens === null ? undefined : `${view.usage.left.tokens} tokens`, view.usage.left.money === null ? undefined : formatMoney(Math.round(view.usage.left.money * 1_000_000))].filter(Boolean).join(' and ');
      const until = view.usage.renews ? `until ${view.usage.renews}` : 'in total (it does not renew)';
      const wokeText = woken ? ` ${woken} waiting turn${woken === 1 ? '' : 's'} woken.` : '';
      return {
        budget: view,
        raise,
        raisedInPeriod: { tokens: raised.raisedTokens, money: usd(raised.raisedMicros) },
        woken,
        message: `Raised ${b.id} by ${amountText} ${until}: ${leftText} left now.${wokeText}`,
      };
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
      if (removed) {
        noteBudgetsChanged();
        await wake(id);
      }
      return removed;
    },
  };
}
