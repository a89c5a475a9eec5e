/**
 * Raising a spent budget for its current period, and who may not (no self-raise).
 *
 * - `raiseBudget` adds tokens and/or money to the period a budget is in at an instant: the
 *   period's usage row keeps `raisedTokens`/`raisedMicros`, and the ledger's conditional
 *   increment (ledger.ts `hold`) counts `limit + raised`. The raise ends with the period (the
 *   next period's row starts at zero raised); the budget's definition is not changed.
 * - The ledger records the people (identity ids of the call's `scopes.people`) whose call a
 *   budget refused in a period (`recordRefusal`), at most MAX_REFUSED_PEOPLE per budget and
 *   period; `refusedPeople` lists them, and the raise service (services/budgets.ts) refuses a
 *   raise by one of them.
 * - The admins' notice of a spent budget carries a Raise button (`raiseButtons`): its callback
 *   data names the budget by a short hash of its id and the period by its start, well within
 *   Telegram's 64 bytes; `parseRaiseButton` reads it back.
 *
 * No Temporal imports.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import type { Db } from '../db.js';
import type { Button } from '../outbox.js';
import { writeReceiptIn, type ReceiptInput } from '../receipts.js';
import { directSql, sqlInt } from '../sql.js';
import { budgetTransaction, listBudgets, type Budget } from './definitions.js';
import { periodOf, type Period } from './periods.js';
import { formatMoney } from './prices.js';

/** The refused people kept per budget and period (a requester set is small; this only bounds the table). */
export const MAX_REFUSED_PEOPLE = 200;
/** The people of one refused call that are recorded. */
const MAX_REFUSED_PER_CALL = 50;

/** A raise: tokens and/or USD, at least one, each positive. */
export const RaiseAmountSchema = z
  .strictObject({
    tokens: z.number().int('tokens: a whole number').positive('tokens: more than 0').max(Number.MAX_SAFE_INTEGER).optional(),
    money: z.number().finite().positive('money: more than 0').max(1e9).refine((m) => Math.round(m * 1_000_000) >= 1, 'money: at least $0.000001').optional(),
  })
  .refine((r) => r.tokens !== undefined || r.money !== undefined, { message: 'a raise gives tokens, money or both' });
export type RaiseAmount = z.infer<typeof RaiseAmountSchema>;

/** The raise was refused: what is wrong with it. Nothing was changed. */
export class BudgetRaiseError extends Error {
  override readonly name = 'BudgetRaiseError';
}

/** What one period of a budget has been raised by, in total. */
export interface PeriodRaise {
  budget: Budget;
  period: Period;
  /** The period's raise after this one (tokens, micro-USD). */
  raisedTokens: number;
  raisedMicros: number;
}

/** A raise of one budget for the period it is in at `at` (ms). */
export interface RaiseRequest {
  budgetId: string;
  tokens?: number;
  money?: number;
  at: number;
}

/**
 * Raise the budget `budgetId` for the period it is in at `at` (ms) by `tokens` and/or `money`
 * (USD). Undefined when there is no such budget; BudgetRaiseError (nothing changed) for a bad
 * amount, or a unit the budget does not limit. `receipt` (the service's `budget.raised`) is
 * written in the raise's transaction; when its key was written before, nothing is raised and
 * the answer is 'receipted-before'.
 */
export async function raiseBudget(db: Db, input: RaiseRequest): Promise<PeriodRaise | undefined>;
export async function raiseBudget(db: Db, input: RaiseRequest, receipt: ReceiptInput): Promise<PeriodRaise | 'receipted-before' | undefined>;
export async function raiseBudget(db: Db, input: RaiseRequest, receipt?: ReceiptInput): Promise<PeriodRaise | 'receipted-before' | undefined> {
  const amount = RaiseAmountSchema.safeParse({ ...(input.tokens === undefined ? {} : { tokens: input.tokens }), ...(input.money === undefined ? {} : { money: input.money }) });
  if (!amount.success) throw new BudgetRaiseError(`Raise refused (nothing changed): ${amount.error.issues.map((i) => i.message).join('; ')}.`);
  const at = z.number().finite().nonnegative().parse(input.at);
  const budget = (await listBudgets(db)).find((b) => b.id === input.budgetId);
  if (!budget) return undefined;
  const { tokens = 0, money } = amount.data;
  const micros = money === undefined ? 0 : Math.round(money * 1_000_000);
  if (tokens > 0 && budget.tokens === null) throw new BudgetRaiseError(`Raise refused (nothing changed): the budget ${budget.id} does not limit tokens.`);
  if (micros > 0 && budget.micros === null) throw new BudgetRaiseError(`Raise refused (nothing changed): the budget ${budget.id} does not limit money.`);
  if (tokens === 0 && micros === 0) throw new BudgetRaiseError('Raise refused (nothing changed): the amount rounds to nothing.');
  const period = periodOf(budget, at);
  const row = await budgetTransaction(db, async (tx) => {
    // the receipt commits with the raise, never without it; under a key written before (a second click of one notice) nothing is raised
    if (receipt && !(await writeReceiptIn(tx, receipt))) return 'receipted-before' as const;
    await tx.execute('INSERT INTO "BudgetUsage" ("budgetId", "periodStart", "periodEnd") VALUES (?, ?, ?) ON CONFLICT ("budgetId", "periodStart") DO NOTHING', [budget.id, period.start, period.end ?? null]);
    await tx.execute('UPDATE "BudgetUsage" SET "raisedTokens" = "raisedTokens" + ?, "raisedMicros" = "raisedMicros" + ? WHERE "budgetId" = ? AND "periodStart" = ?', [tokens, micros, budget.id, period.start]);
    const [r] = await tx.query('SELECT "raisedTokens", "raisedMicros" FROM "BudgetUsage" WHERE "budgetId" = ? AND "periodStart" = ?', [budget.id, period.start]);
    return r;
  });
  if (row === 'receipted-before') return row;
  return { budget, period, raisedTokens: row ? sqlInt(row.raisedTokens) : tokens, raisedMicros: row ? sqlInt(row.raisedMicros) : micros };
}

/**
 * Remember that the budget refused a call of these people in this period (its usage row
 * exists: the refused hold made it). Refusals of the budget's earlier periods are dropped.
 */
export async function recordRefusal(db: Db, budgetId: string, period: Period, people: readonly string[], at: number): Promise<void> {
  const ids = [...new Set(people)].slice(0, MAX_REFUSED_PER_CALL);
  if (ids.length === 0) return;
  const sql = directSql(db);
  await sql.execute('DELETE FROM "BudgetRefusal" WHERE "budgetId" = ? AND "periodStart" < ?', [budgetId, period.start]);
  const [c] = await sql.query('SELECT count(*) AS "n" FROM "BudgetRefusal" WHERE "budgetId" = ? AND "periodStart" = ?', [budgetId, period.start]);
  let room = MAX_REFUSED_PEOPLE - (c ? sqlInt(c.n) : 0);
  for (const id of ids) {
    if (room <= 0) break;
    room -= await sql.execute('INSERT INTO "BudgetRefusal" ("budgetId", "periodStart", "identityId", "at") VALUES (?, ?, ?, ?) ON CONFLICT ("budgetId", "periodStart", "identityId") DO NOTHING', [budgetId, period.start, id, new Date(at)]);
  }
}

/** The people whose call the budget refused in the period. */
export async function refusedPeople(db: Db, budgetId: string, period: Period): Promise<string[]> {
  const rows = await directSql(db).query('SELECT "identityId" FROM "BudgetRefusal" WHERE "budgetId" = ? AND "periodStart" = ? ORDER BY "identityId"', [budgetId, period.start]);
  return rows.map((r) => String(r.identityId));
}

/** A budget's limit for people: "1000 tokens", "$2.00", "1000 tokens and $2.00". */
export function limitText(b: Pick<Budget, 'tokens' | 'micros'>): string {
  return [b.tokens === null ? undefined : `${b.tokens} tokens`, b.micros === null ? undefined : formatMoney(b.micros)].filter(Boolean).join(' and ');
}

const BUTTON_RE = /^bgr:([0-9a-f]{16}):([0-9a-z]{1,12})$/;
const budgetHash = (id: string) => createHash('sha256').update(id).digest('hex').slice(0, 16);

/** The Raise button of a spent budget's notice: raise it by its own limit for this period. */
export function raiseButtons(b: Budget, p: Period): Button[][] {
  return [[{ id: `bgr:${budgetHash(b.id)}:${p.start.getTime().toString(36)}`, label: `Raise by ${limitText(b)} for this ${b.period === 'none' ? 'total' : b.period === 'window' ? 'window' : b.period}`, style: 'primary' }]];
}

/** A Raise button's data read back: the budget it names (by the hash of its id) and the period's start. */
export async function parseRaiseButton(db: Db, data: string): Promise<{ budget: Budget; periodStart: Date } | { budget?: undefined; periodStart?: undefined } | undefined> {
  const m = BUTTON_RE.exec(data);
  if (!m) return undefined;
  const start = parseInt(m[2]!, 36);
  const budget = (await listBudgets(db)).find((b) => budgetHash(b.id) === m[1]);
  return budget ? { budget, periodStart: new Date(start) } : {};
}

/** Whether data is a Raise button's (whatever budget it names). */
export const isRaiseButton = (data: string): boolean => BUTTON_RE.test(data);
