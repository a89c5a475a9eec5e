/**
 * Budgets declared in a file (STEWARD_BUDGETS_FILE): JSON of the form
 * `{ "budgets": [ { "id", "scope", "scopeId"?, "tokens"?, "money"?, "period"?, "timezone"? }, ... ] }`,
 * each definition checked by the same schema as the API's PUT /api/v1/budgets/{id} and
 * `steward budgets set` (definitions.ts).
 *
 * Applied at start by every process that runs the ledger (platform/start.ts), in one transaction
 * (the setting unset: as a file that lists none):
 * - the whole file is checked first; a bad field refuses the file with an error naming it
 *   (`budgets[1] (team-chat).timezone: ...`) and nothing is changed;
 * - each budget it lists is defined as it says (source `file`), whoever defined that id before;
 *   one that is already so is not written again;
 * - a budget the file defined earlier (source `file`) that it no longer lists is removed, with
 *   its usage; budgets defined through the API or the CLI, and STEWARD_TOKEN_BUDGET's, are left
 *   alone;
 * - each change writes its `budget.change` receipt (actor `file`) in the same transaction.
 * Processes starting together apply it one after the other (on PostgreSQL a transaction lock; on
 * SQLite the database's write lock), so the second finds nothing to change.
 */
import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import type { Db } from '../db.js';
import { writeReceiptIn } from '../receipts.js';
import { directSql } from '../sql.js';
import { BUDGET_COLUMNS, BudgetDefinitionSchema, budgetFromDefinition, budgetFromRow, budgetTransaction, definitionRecord, deleteBudget, noteBudgetsChanged, writeBudget, type Budget, type BudgetDefinition } from './definitions.js';
import { ENV_BUDGET_ID } from './ledger.js';

/** Serialises processes applying the file at once on PostgreSQL (pg_advisory_xact_lock). */
const PG_APPLY_LOCK = 3_400_034;

export const BudgetsFileSchema = z
  .strictObject({ budgets: z.array(BudgetDefinitionSchema).max(10_000) })
  .superRefine((f, ctx) => {
    const seen = new Set<string>();
    f.budgets.forEach((b, i) => {
      if (b.id === ENV_BUDGET_ID) ctx.addIssue({ code: 'custom', path: ['budgets', i, 'id'], message: `${ENV_BUDGET_ID} is the STEWARD_TOKEN_BUDGET setting's budget: set it there` });
      if (seen.has(b.id)) ctx.addIssue({ code: 'custom', path: ['budgets', i, 'id'], message: `${b.id} is listed twice` });
      seen.add(b.id);
    });
  });

/** The budgets file was refused: what is wrong with it. Nothing was changed. */
export class BudgetsFileError extends Error {
  override readonly name = 'BudgetsFileError';
}

/** What applying the file changed, by budget id. */
export interface BudgetsFileOutcome {
  created: string[];
  changed: string[];
  removed: string[];
  unchanged: string[];
}

/** The field a zod issue names, with the budget's index and id: `budgets[1] (team-chat).timezone`. */
function fieldOf(path: ReadonlyArray<PropertyKey>, input: unknown): string {
  if (path[0] !== 'budgets' || typeof path[1] !== 'number') return path.length ? path.map(String).join('.') : '(the file)';
  const list = (input as { budgets?: unknown }).budgets;
  const entry = Array.isArray(list) ? (list[path[1]] as { id?: unknown } | undefined) : undefined;
  const id = entry && typeof entry === 'object' && typeof entry.id === 'string' ? ` (${entry.id})` : '';
  const rest = path.slice(2).map(String);
  return `budgets[${path[1]}]${id}${rest.length ? `.${rest.join('.')}` : ''}`;
}

/** The file's text checked whole: its budgets, or BudgetsFileError naming every bad field. */
export function parseBudgetsFile(text: string, file: string): BudgetDefinition[] {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new BudgetsFileError(`STEWARD_BUDGETS_FILE ${file} refused (nothing changed): not JSON: ${(err as Error).message}`);
  }
  const r = BudgetsFileSchema.safeParse(raw);
  if (!r.success) {
    throw new BudgetsFileError(`STEWARD_BUDGETS_FILE ${file} refused (nothing changed): ${r.error.issues.map((i) => `${fieldOf(i.path, raw)}: ${i.message}`).join('; ')}.`);
  }
  return r.data.budgets;
}

const same = (a: Budget, b: Budget) => JSON.stringify(definitionRecord(a)) === JSON.stringify(definitionRecord(b));

/**
 * Apply the budgets of `file` (see the module comment); without a file (the setting unset), the
 * budgets a file defined before are removed. Throws BudgetsFileError, changing nothing, when the
 * file is unreadable or a field is bad.
 */
export async function applyBudgetsFile(db: Db, file: string | undefined): Promise<BudgetsFileOutcome> {
  let budgets: BudgetDefinition[] = [];
  if (file !== undefined) {
    let text: string;
    try {
      text = await readFile(file, 'utf8');
    } catch (err) {
      throw new BudgetsFileError(`STEWARD_BUDGETS_FILE ${file} cannot be read (nothing changed): ${(err as Error).message}`);
    }
    budgets = parseBudgetsFile(text, file);
  }
  const provider = directSql(db).provider;
  const outcome = await budgetTransaction(db, async (tx) => {
    if (provider === 'postgres') await tx.execute(`SELECT 1 FROM pg_advisory_xact_lock(${PG_APPLY_LOCK})`, []);
    const stored = new Map((await tx.query(`SELECT ${BUDGET_COLUMNS} FROM "Budget" ORDER BY "id"`, [])).map((r) => [String(r.id), budgetFromRow(r)] as const));
    const outcome: BudgetsFileOutcome = { created: [], changed: [], removed: [], unchanged: [] };
    const receipt = (action: 'set' | 'remove', id: string, before: Budget | undefined, after: Budget | undefined) =>
      writeReceiptIn(tx, { kind: 'budget.change', actor: 'file', data: { action, budget: id, before: before ? definitionRecord(before) : null, after: after ? definitionRecord(after) : null, file: file ?? null } });
    for (const definition of budgets) {
      const before = stored.get(definition.id);
      if (before && same(before, budgetFromDefinition(definition, 'file'))) {
        outcome.unchanged.push(definition.id);
        continue;
      }
      const after = await writeBudget(tx, definition, 'file');
      await receipt('set', definition.id, before, after);
      (before ? outcome.changed : outcome.created).push(definition.id);
    }
    const listed = new Set(budgets.map((b) => b.id));
    for (const b of stored.values()) {
      if (b.source !== 'file' || listed.has(b.id)) continue;
      if (await deleteBudget(tx, b.id)) {
        await receipt('remove', b.id, b, undefined);
        outcome.removed.push(b.id);
      }
    }
    return outcome;
  });
  if (outcome.created.length + outcome.changed.length + outcome.removed.length > 0) noteBudgetsChanged();
  return outcome;
}
