/**
 * Budget definitions: which scope a budget limits, by how much (tokens and/or USD) and per
 * which period. Checked by zod before anything is written: a bad field throws and changes
 * nothing. The ledger (ledger.ts) reads them on every reservation, so a change applies to the
 * next model call; the usage of the current period is kept (raising a limit lets calls through
 * at once).
 */
import { z } from 'zod';
import type { Db } from '../db.js';
import { directSql, sqlInt, type SqlRow, type SqlRunner } from '../sql.js';
import { BUDGET_PERIODS, isTimeZone, type BudgetPeriod } from './periods.js';

export const BUDGET_SCOPES = ['installation', 'chat', 'person', 'objective', 'workspace', 'repository'] as const;
export type BudgetScope = (typeof BUDGET_SCOPES)[number];

/** A budget as it is defined (money in USD; stored as micro-USD). */
export const BudgetDefinitionSchema = z
  .strictObject({
    id: z.string().trim().min(1).max(200).regex(/^[A-Za-z0-9._:@/-]+$/, 'letters, digits and . _ : @ / - only'),
    scope: z.enum(BUDGET_SCOPES),
    /** The binding, identity, objective, workspace or repository id; none for the installation. */
    scopeId: z.string().trim().min(1).max(200).optional(),
    /** Tokens per period. */
    tokens: z.number().int().positive().max(Number.MAX_SAFE_INTEGER).optional(),
    /** USD per period. */
    money: z.number().finite().positive().max(1e9).optional(),
    period: z.enum(BUDGET_PERIODS).default('none'),
    timezone: z
      .string()
      .trim()
      .default('UTC')
      .refine(isTimeZone, { message: 'not an IANA time zone (e.g. UTC, Europe/Berlin, America/New_York)' }),
  })
  .superRefine((b, ctx) => {
    if (b.scope === 'installation' && b.scopeId !== undefined) ctx.addIssue({ code: 'custom', path: ['scopeId'], message: 'the installation budget has no scope id' });
    if (b.scope !== 'installation' && b.scopeId === undefined) ctx.addIssue({ code: 'custom', path: ['scopeId'], message: `a ${b.scope} budget names its ${b.scope} (scopeId)` });
    if (b.tokens === undefined && b.money === undefined) ctx.addIssue({ code: 'custom', path: ['tokens'], message: 'a budget limits tokens, money or both' });
  });
export type BudgetDefinitionInput = z.input<typeof BudgetDefinitionSchema>;
export type BudgetDefinition = z.output<typeof BudgetDefinitionSchema>;

/** Where a budget was defined: a budget file (STEWARD_BUDGETS_FILE), the API, the CLI. */
export type BudgetSource = 'file' | 'api' | 'cli';

/** A budget as the ledger reads it. */
export interface Budget {
  id: string;
  scope: BudgetScope;
  scopeId: string | null;
  /** Tokens per period; null: not limited. */
  tokens: number | null;
  /** Micro-USD per period; null: not limited. */
  micros: number | null;
  period: BudgetPeriod | 'window';
  timezone: string;
  windowSeconds: number | null;
  /** env (STEWARD_TOKEN_BUDGET), file, api, cli. */
  source: string;
}

/** A budget's definition as receipts and views record it: money in USD (no usage). */
export function definitionRecord(b: Budget): { id: string; scope: BudgetScope; scopeId: string | null; tokens: number | null; money: number | null; period: Budget['period']; timezone: string; windowSeconds: number | null; source: string } {
  return { id: b.id, scope: b.scope, scopeId: b.scopeId, tokens: b.tokens, money: b.micros === null ? null : b.micros / 1_000_000, period: b.period, timezone: b.timezone, windowSeconds: b.windowSeconds, source: b.source };
}

/** The definition was refused: what is wrong with it. Nothing was changed. */
export class BudgetDefinitionError extends Error {
  override readonly name = 'BudgetDefinitionError';
}

type BudgetRow = { id: string; scope: string; scopeId: string | null; tokens: bigint | number | null; micros: bigint | number | null; period: string; timezone: string; windowSeconds: number | null; source: string };

const num = (v: bigint | number | null): number | null => (v === null ? null : Number(v));

export function budgetOf(r: BudgetRow): Budget {
  return { id: r.id, scope: r.scope as BudgetScope, scopeId: r.scopeId, tokens: num(r.tokens), micros: num(r.micros), period: r.period as Budget['period'], timezone: r.timezone, windowSeconds: r.windowSeconds, source: r.source };
}

/** What is wrong with a definition, each field named (`tokens: ...; timezone: ...`). */
export function definitionIssues(issues: ReadonlyArray<{ path: ReadonlyArray<PropertyKey>; message: string }>): string {
  return issues.map((i) => `${i.path.length ? i.path.map(String).join('.') : '(the budget)'}: ${i.message}`).join('; ');
}

/** A definition checked by the schema; throws BudgetDefinitionError naming each bad field. */
export function parseBudgetDefinition(input: unknown): BudgetDefinition {
  const r = BudgetDefinitionSchema.safeParse(input);
  if (!r.success) throw new BudgetDefinitionError(`Budget refused (nothing changed): ${definitionIssues(r.error.issues)}.`);
  return r.data;
}

/** How often a budget transaction is begun again after SQLite's SQLITE_BUSY (see budgetTransaction). */
const BUSY_ATTEMPTS = 8;

/**
 * A transaction of the budgets' tables (the ledger's reservations and settles, definitions with
 * their receipts), on SQLite's shared connection begun again (a few times) when SQLite
 * refused its first write with SQLITE_BUSY. A read before that write (the transaction's own, or
 * another caller's that ran on the connection between the transaction's BEGIN and its first
 * statement: the adapter hands the transaction over asynchronously) gives the transaction a
 * snapshot; once another process has written since, SQLite refuses to upgrade it. That can only
 * happen before the transaction wrote anything (its first write takes the write lock until its
 * commit), so it changed nothing.
 */
export async function budgetTransaction<T>(db: Db, fn: (tx: SqlRunner) => Promise<T>): Promise<T> {
  const sql = directSql(db);
  for (let attempt = 1; ; attempt++) {
    try {
      return await sql.transaction(fn);
    } catch (err) {
      const busy = sql.provider === 'sqlite' && err instanceof Error && (err.cause as { originalCode?: unknown } | undefined)?.originalCode === 'SQLITE_BUSY';
      if (!busy || attempt >= BUSY_ATTEMPTS) throw err;
      await new Promise((r) => setTimeout(r, attempt * Math.random() * 5));
    }
  }
}

let budgetsVersion = 0;

/** Called once a change of budgets is committed: a ledger of this process reads which budgets exist again before its next call (budgetsChangedCount). */
export function noteBudgetsChanged(): void {
  budgetsVersion++;
}

/** How many committed budget changes this process has made (a ledger's cache of which budgets exist is good while it stays the same; other processes' changes within its 5 s). */
export function budgetsChangedCount(): number {
  return budgetsVersion;
}

/** The Budget table's columns the ledger and the views read. */
export const BUDGET_COLUMNS = '"id", "scope", "scopeId", "tokens", "micros", "period", "timezone", "windowSeconds", "source"';

/** A Budget row read with domain/sql.ts (BUDGET_COLUMNS). */
export function budgetFromRow(r: SqlRow): Budget {
  const n = (v: unknown) => (v === null || v === undefined ? null : sqlInt(v));
  return budgetOf({
    id: String(r.id),
    scope: String(r.scope),
    scopeId: r.scopeId === null ? null : String(r.scopeId),
    tokens: n(r.tokens),
    micros: n(r.micros),
    period: String(r.period),
    timezone: String(r.timezone),
    windowSeconds: n(r.windowSeconds),
    source: String(r.source),
  });
}

/** The budget `id` as it is stored now (in a transaction: as that transaction sees it). */
export async function readBudget(sql: SqlRunner, id: string): Promise<Budget | undefined> {
  const [r] = await sql.query(`SELECT ${BUDGET_COLUMNS} FROM "Budget" WHERE "id" = ?`, [id]);
  return r ? budgetFromRow(r) : undefined;
}

/** A checked definition as the ledger reads a budget (money as micro-USD). */
export function budgetFromDefinition(b: BudgetDefinition, source: BudgetSource): Budget {
  return { id: b.id, scope: b.scope, scopeId: b.scopeId ?? null, tokens: b.tokens ?? null, micros: b.money === undefined ? null : Math.round(b.money * 1_000_000), period: b.period, timezone: b.timezone, windowSeconds: null, source };
}

/** Write a checked definition (created, or replaced by id), with the statements of `sql` (a transaction's, to commit it with its receipt). */
export async function writeBudget(sql: SqlRunner, b: BudgetDefinition, source: BudgetSource): Promise<Budget> {
  const at = new Date();
  const budget = budgetFromDefinition(b, source);
  await sql.execute(
    `INSERT INTO "Budget" (${BUDGET_COLUMNS}, "createdAt", "updatedAt") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT ("id") DO UPDATE SET "scope" = excluded."scope", "scopeId" = excluded."scopeId", "tokens" = excluded."tokens", "micros" = excluded."micros", "period" = excluded."period", "timezone" = excluded."timezone", "windowSeconds" = excluded."windowSeconds", "source" = excluded."source", "updatedAt" = excluded."updatedAt"`,
    [budget.id, budget.scope, budget.scopeId, budget.tokens, budget.micros, budget.period, budget.timezone, budget.windowSeconds, budget.source, at, at],
  );
  return budget;
}

/** Delete a budget and its usage with the statements of `sql` (a transaction's); false when there was none. */
export async function deleteBudget(sql: SqlRunner, id: string): Promise<boolean> {
  await sql.execute('DELETE FROM "BudgetRefusal" WHERE "budgetId" = ?', [id]);
  await sql.execute('DELETE FROM "BudgetUsage" WHERE "budgetId" = ?', [id]);
  return (await sql.execute('DELETE FROM "Budget" WHERE "id" = ?', [id])) > 0;
}

/** Define (or redefine, by id) a budget; throws BudgetDefinitionError and changes nothing when a field is bad. */
export async function defineBudget(db: Db, input: unknown, source: BudgetSource = 'api'): Promise<Budget> {
  const b = parseBudgetDefinition(input);
  const budget = await writeBudget(directSql(db), b, source);
  noteBudgetsChanged();
  return budget;
}

/** Remove a budget and its usage (explicitly: SQLite may not enforce the cascade); false when there was none. */
export async function removeBudget(db: Db, id: string): Promise<boolean> {
  const [, , removed] = await db.$transaction([db.budgetRefusal.deleteMany({ where: { budgetId: id } }), db.budgetUsage.deleteMany({ where: { budgetId: id } }), db.budget.deleteMany({ where: { id } })]);
  if (removed.count > 0) noteBudgetsChanged();
  return removed.count > 0;
}

/** Every budget, by scope and id. */
export async function listBudgets(db: Db): Promise<Budget[]> {
  return (await db.budget.findMany({ orderBy: [{ scope: 'asc' }, { scopeId: 'asc' }, { id: 'asc' }] })).map(budgetOf);
}
