/**
 * Budget definitions: which scope a budget limits, by how much (tokens and/or USD) and per
 * which period. Checked by zod before anything is written: a bad field throws and changes
 * nothing. The ledger (ledger.ts) reads them on every reservation, so a change applies to the
 * next model call; the usage of the current period is kept (raising a limit lets calls through
 * at once).
 */
import { z } from 'zod';
import type { Db } from '../db.js';
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

/** The definition was refused: what is wrong with it. Nothing was changed. */
export class BudgetDefinitionError extends Error {
  override readonly name = 'BudgetDefinitionError';
}

type BudgetRow = { id: string; scope: string; scopeId: string | null; tokens: bigint | number | null; micros: bigint | number | null; period: string; timezone: string; windowSeconds: number | null; source: string };

const num = (v: bigint | number | null): number | null => (v === null ? null : Number(v));

export function budgetOf(r: BudgetRow): Budget {
  return { id: r.id, scope: r.scope as BudgetScope, scopeId: r.scopeId, tokens: num(r.tokens), micros: num(r.micros), period: r.period as Budget['period'], timezone: r.timezone, windowSeconds: r.windowSeconds, source: r.source };
}

/** Define (or redefine, by id) a budget; throws BudgetDefinitionError and changes nothing when a field is bad. */
export async function defineBudget(db: Db, input: unknown, source: 'file' | 'api' | 'cli' = 'api'): Promise<Budget> {
  const r = BudgetDefinitionSchema.safeParse(input);
  if (!r.success) {
    throw new BudgetDefinitionError(`Budget refused (nothing changed): ${r.error.issues.map((i) => `${i.path.length ? i.path.map(String).join('.') : '(the budget)'}: ${i.message}`).join('; ')}.`);
  }
  const b = r.data;
  const fields = {
    scope: b.scope,
    scopeId: b.scopeId ?? null,
    tokens: b.tokens === undefined ? null : BigInt(b.tokens),
    micros: b.money === undefined ? null : BigInt(Math.round(b.money * 1_000_000)),
    period: b.period,
    timezone: b.timezone,
    windowSeconds: null,
    source,
  };
  const row = await db.budget.upsert({ where: { id: b.id }, create: { id: b.id, ...fields }, update: fields });
  return budgetOf(row);
}

/** Remove a budget and its usage (explicitly: SQLite may not enforce the cascade); false when there was none. */
export async function removeBudget(db: Db, id: string): Promise<boolean> {
  const [, , removed] = await db.$transaction([db.budgetRefusal.deleteMany({ where: { budgetId: id } }), db.budgetUsage.deleteMany({ where: { budgetId: id } }), db.budget.deleteMany({ where: { id } })]);
  return removed.count > 0;
}

/** Every budget, by scope and id. */
export async function listBudgets(db: Db): Promise<Budget[]> {
  return (await db.budget.findMany({ orderBy: [{ scope: 'asc' }, { scopeId: 'asc' }, { id: 'asc' }] })).map(budgetOf);
}
