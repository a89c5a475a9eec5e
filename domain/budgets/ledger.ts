/**
 * The budget ledger: the one mechanism every model call goes through (the model registry's
 * `spend`, domain/model.ts). Before a call, `reserve` holds the call's worst case (its input
 * tokens plus its output cap, and their price) against EVERY budget that applies: the
 * installation's and each scope of the call (its chat, each person of its requester set, its
 * objective, workspace, repository). After the call, `settle` replaces the hold by the usage the
 * provider reported.
 *
 * - All or nothing: one transaction holds the call against every budget, each by a conditional
 *   increment of the period's usage row (`used + reserved + amount <= limit + raised`, and nothing
 *   once `used + reserved` reaches it; `raised` is what admins raised the period by, raises.ts),
 *   in the order of the budgets' ids. On SQLite the
 *   transactions of a process run one at a time (and the database lock orders processes); on
 *   PostgreSQL the row lock makes a concurrent increment wait and re-check the condition
 *   (READ COMMITTED), so two calls never both take the last of a budget. A budget that does not
 *   take it undoes the increments made before it in the same transaction: nothing stays held.
 * - Keyed: the reservation's row is keyed by the step's key (a retried activity's reserve finds
 *   it and holds nothing more, while it is not settled); settling marks it settled once (a
 *   second settle, or a settle of an unknown or expired key, does nothing). A key reserved again
 *   after its settle is a new call (the activity failed after its model call and is retried):
 *   it is reserved under the key's next attempt (`<key>#2`, ...), and the ticket names it.
 * - A crashed worker's reservation expires (`reservationTtlMs`) and `sweepExpired` settles it to
 *   its worst case, once.
 * - Refused: ModelBudgetExceededError with the budget (scope, id, period, what is left, when it
 *   renews); a `limit.refused` receipt for each refusal, the call's people recorded as refused
 *   on the budget for the period (they may not raise it: raises.ts), and once per budget and
 *   period a `budget.exhausted` receipt and a notice to the admins with a Raise button.
 * - Receipts: `budget.reserved`, `budget.settled` (keyed by the step's key: written once), each
 *   in the transaction of what it records (one commit a reserve, one a settle: a receipt never
 *   exists without its change, nor a change without its receipt).
 * - Money: from the price table (prices.ts); a model without a price counts tokens only (money
 *   limits do not apply to it; `unpricedModels` lists the ones seen).
 * - STEWARD_TOKEN_BUDGET: the installation budget `env:STEWARD_TOKEN_BUDGET` in tokens over the
 *   setting's fixed window, kept equal to the setting (`installationTokens`).
 *
 * No Temporal imports: the model step (domain/model.ts) calls it.
 */
import { z } from 'zod';
import type { BudgetGaugeRow } from '../../common/metrics.js';
import type { RateLimit } from '../../common/roles.js';
import type { Db } from '../db.js';
import { notifyAdmins } from '../governance.js';
import { ModelBudgetExceededError, type ModelSpend, type SpendRequest, type SpendScopes, type SpendTicket, type SpendUsage } from '../model.js';
import type { Senders } from '../outbox.js';
import { isUniqueViolation } from '../prisma-errors.js';
import { writeReceipt, writeReceiptIn, type ReceiptInput } from '../receipts.js';
import { directSql, sqlDate, sqlInt, type SqlRow, type SqlRunner } from '../sql.js';
import { BUDGET_COLUMNS, budgetFromRow, budgetsChangedCount, budgetTransaction, listBudgets, noteBudgetsChanged, removeBudget, type Budget } from './definitions.js';
import { describeRenewal, periodName, periodOf, type Period } from './periods.js';
import { costMicros, formatMoney, worstCaseMicros, type PriceTable } from './prices.js';
import { raiseButtons, recordRefusal } from './raises.js';

/** The id of STEWARD_TOKEN_BUDGET's installation budget. */
export const ENV_BUDGET_ID = 'env:STEWARD_TOKEN_BUDGET';

/** How long a reservation holds before the sweep takes it for a crashed worker's (longer than any one model call). */
export const DEFAULT_RESERVATION_TTL_MS = 30 * 60_000;
/** How long the ledger trusts what it read of whether any budget exists (a budget defined elsewhere applies within it). */
const BUDGETS_SEEN_MS = 5_000;

/** The attempts of one step's key that each reserve anew once the one before was settled (a retried activity's own calls). */
const MAX_ATTEMPT_KEYS = 50;

/** How long settled reservations are kept (a retry of a step within it finds its reservation). */
export const DEFAULT_RETAIN_SETTLED_MS = 7 * 24 * 3_600_000;
const SWEEP_BATCH = 200;
const SWEEP_BATCHES = 50;
/** How many usage rows a ledger remembers to exist (it forgets them all past it). */
const ROWS_SEEN_KEPT = 10_000;

export interface BudgetLedgerOptions {
  db: Db;
  prices: PriceTable;
  /** The clock (ms); Date.now by default. */
  now?: () => number;
  /** How long a reservation holds before `sweepExpired` settles it to its worst case. */
  reservationTtlMs?: number;
  /** How long settled reservations are kept (then `sweepExpired` removes them). */
  retainSettledMs?: number;
  /** Where the admins hear, once per budget and period, that a budget ran out. */
  senders?: Senders;
  /**
   * STEWARD_TOKEN_BUDGET: a limit makes the installation budget `env:STEWARD_TOKEN_BUDGET` equal
   * to it (tokens per the setting's window); null removes that budget; undefined leaves it as it is.
   */
  installationTokens?: RateLimit | null;
}

/** The ledger: the model registry's spend, and its upkeep. */
export interface BudgetLedger extends ModelSpend {
  /** Settle every reservation past its expiry (a crashed worker's) to its worst case, once; remove settled ones past their retention. The number settled. */
  sweepExpired(): Promise<number>;
  /** The models this ledger reserved for that have no price (they count tokens only). */
  unpricedModels(): string[];
}

const count = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);
const id = z.string().trim().min(1).max(200);
const SpendRequestSchema = z.object({
  key: z.string().min(1).max(500),
  model: z.string().min(1).max(200),
  inputTokens: count,
  maxOutputTokens: count,
  scopes: z.object({
    chat: id.optional(),
    people: z.array(id).max(1000).optional(),
    objective: id.optional(),
    workspace: id.optional(),
    repository: id.optional(),
  }),
  kind: z.enum(['chat', 'objective', 'triage', 'change-intake', 'change-plan', 'coding-agent', 'embedding', 'replay', 'other']),
});
const SpendUsageSchema = z.object({ inputTokens: count, outputTokens: count, cachedInputTokens: count.optional() });
const HoldsSchema = z.array(z.object({ budget: z.string(), period: z.string() }));

interface Hold {
  budget: Budget;
  period: Period;
}

interface ReservationRow {
  key: string;
  model: string;
  tokens: number;
  micros: number | null;
  holds: Array<{ budget: string; period: string }>;
}

function reservationFromRow(r: SqlRow): ReservationRow {
  return { key: String(r.key), model: String(r.model), tokens: sqlInt(r.tokens), micros: r.micros === null ? null : sqlInt(r.micros), holds: HoldsSchema.parse(JSON.parse(String(r.holds))) };
}

/** Who a budget is for, in a sentence: "the installation", "chat b1". */
const scopeText = (b: Budget) => (b.scope === 'installation' ? 'the installation' : `${b.scope} ${b.scopeId ?? ''}`.trim());

/** STEWARD_TOKEN_BUDGET's installation budget made equal to the setting (removed for null, left alone for undefined). */
async function syncEnvBudget(db: Db, setting: RateLimit | null | undefined): Promise<void> {
  if (setting === undefined) return;
  if (setting === null) {
    await removeBudget(db, ENV_BUDGET_ID);
    return;
  }
  const fields = { scope: 'installation', scopeId: null, tokens: BigInt(setting.count), micros: null, period: 'window', timezone: 'UTC', windowSeconds: Math.max(1, Math.round(setting.windowMs / 1000)), source: 'env' };
  try {
    await db.budget.upsert({ where: { id: ENV_BUDGET_ID }, create: { id: ENV_BUDGET_ID, ...fields }, update: fields });
  } catch (err) {
    if (!isUniqueViolation(err)) throw err; // made by another process at the same moment
  }
  noteBudgetsChanged();
}

/** Every budget that applies to a call of these scopes (the installation's always), by id. */
async function budgetsFor(db: Db, scopes: SpendScopes): Promise<Budget[]> {
  const where = [`"scope" = 'installation'`];
  const values: string[] = [];
  const one = (scope: string, v: string | undefined) => {
    if (v === undefined) return;
    where.push(`("scope" = '${scope}' AND "scopeId" = ?)`);
    values.push(v);
  };
  one('chat', scopes.chat);
  one('objective', scopes.objective);
  one('workspace', scopes.workspace);
  one('repository', scopes.repository);
  const people = [...new Set(scopes.people ?? [])];
  if (people.length > 0) {
    where.push(`("scope" = 'person' AND "scopeId" IN (${people.map(() => '?').join(', ')}))`);
    values.push(...people);
  }
  const rows = await directSql(db).query(`SELECT ${BUDGET_COLUMNS} FROM "Budget" WHERE ${where.join(' OR ')}`, values);
  return rows.map(budgetFromRow).sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

async function reservation(db: Db, key: string): Promise<(ReservationRow & { settled: boolean }) | undefined> {
  const [r] = await directSql(db).query('SELECT "key", "model", "tokens", "micros", "holds", "settledAt" FROM "BudgetReservation" WHERE "key" = ?', [key]);
  return r ? { ...reservationFromRow(r), settled: r.settledAt !== null } : undefined;
}

/** Hold `tokens` and `micros` against one budget's period: the conditional increment. True when it fit. `rowSeen`: the period's usage row is known to exist (not inserted first). */
async function hold(tx: SqlRunner, h: Hold, tokens: number, micros: number | null, rowSeen = false): Promise<boolean> {
  const { budget: b, period: p } = h;
  if (!rowSeen) await tx.execute('INSERT INTO "BudgetUsage" ("budgetId", "periodStart", "periodEnd") VALUES (?, ?, ?) ON CONFLICT ("budgetId", "periodStart") DO NOTHING', [b.id, p.start, p.end ?? null]);
  const fits: string[] = [];
  const values: Array<number | string | Date> = [tokens, micros ?? 0, b.id, p.start];
  if (b.tokens !== null) {
    fits.push('"usedTokens" + "reservedTokens" + ? <= ? + "raisedTokens"', '"usedTokens" + "reservedTokens" < ? + "raisedTokens"');
    values.push(tokens, b.tokens, b.tokens);
  }
  // a money limit applies only to a priced model's call
  if (b.micros !== null && micros !== null) {
    fits.push('"usedMicros" + "reservedMicros" + ? <= ? + "raisedMicros"', '"usedMicros" + "reservedMicros" < ? + "raisedMicros"');
    values.push(micros, b.micros, b.micros);
  }
  const changed = await tx.execute(
    `UPDATE "BudgetUsage" SET "reservedTokens" = "reservedTokens" + ?, "reservedMicros" = "reservedMicros" + ? WHERE "budgetId" = ? AND "periodStart" = ?${fits.map((f) => ` AND ${f}`).join('')}`,
    values,
  );
  return changed === 1;
}

/**
 * The reservation's row and its holds on every budget, in one transaction: all of them, or
 * (a budget that does not take it) none, the budget that refused returned. A key reserved
 * before is the same reservation: nothing more is held.
 */
async function holdAll(db: Db, r: { key: string; model: string; kind: string; tokens: number; micros: number | null; expiresAt: Date; at: Date }, holds: Hold[], receipt: ReceiptInput & { key: string }, rowsSeen: Set<string>): Promise<{ refused?: Hold; duplicate?: true }> {
  const holdsJson = JSON.stringify(holds.map((h) => ({ budget: h.budget.id, period: h.period.start.toISOString() })));
  return budgetTransaction(db, async (tx) => {
    const claimed = await tx.execute(
      'INSERT INTO "BudgetReservation" ("key", "model", "kind", "tokens", "micros", "holds", "expiresAt", "createdAt") VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT ("key") DO NOTHING',
      [r.key, r.model, r.kind, r.tokens, r.micros, holdsJson, r.expiresAt, r.at],
    );
    // reserved before (a retried step, or the same step at the same moment): the same reservation
    if (claimed !== 1) return { duplicate: true };
    // the `budget.reserved` receipt commits with the reservation; written before the holds, so
    // the usage rows stay locked (PostgreSQL) for no longer than the holds and the commit
    const receipted = await writeReceiptIn(tx, receipt);
    const held: Hold[] = [];
    for (const h of holds) {
      // a usage row this ledger held on before is not inserted again; should it be gone since (its
      // budget removed and defined anew), the increment finds no row and is tried again after the insert
      const row = `${h.budget.id}\n${h.period.start.getTime()}`;
      const seen = rowsSeen.has(row);
      if ((await hold(tx, h, r.tokens, r.micros, seen)) || (seen && (await hold(tx, h, r.tokens, r.micros)))) {
        if (rowsSeen.size >= ROWS_SEEN_KEPT) rowsSeen.clear();
        rowsSeen.add(row);
        held.push(h);
        continue;
      }
      // all or nothing: what this call held is released and its reservation removed, in the same
      // transaction (committed, not rolled back: on SQLite a rollback would also undo statements
      // other callers ran on the shared connection meanwhile)
      for (const done of held) {
        await tx.execute('UPDATE "BudgetUsage" SET "reservedTokens" = "reservedTokens" - ?, "reservedMicros" = "reservedMicros" - ? WHERE "budgetId" = ? AND "periodStart" = ?', [r.tokens, r.micros ?? 0, done.budget.id, done.period.start]);
      }
      await tx.execute('DELETE FROM "BudgetReservation" WHERE "key" = ?', [r.key]);
      if (receipted) await tx.execute('DELETE FROM "Receipt" WHERE "key" = ?', [receipt.key]);
      return { refused: h };
    }
    return {};
  });
}

/**
 * Settle a reservation: marked settled (once; false when it already was), and each of its
 * holds replaced by what was used, in one transaction.
 */
async function settleRow(db: Db, r: ReservationRow, usedTokens: number, usedMicros: number, at: number, receipt: ReceiptInput & { key: string }): Promise<boolean> {
  // in the order reservations lock usage rows (budget id, then period): no two transactions wait on each other in a circle
  const holds = [...r.holds].sort((a, b) => (a.budget < b.budget ? -1 : a.budget > b.budget ? 1 : a.period < b.period ? -1 : a.period > b.period ? 1 : 0));
  return budgetTransaction(db, async (tx) => {
    const marked = await tx.execute('UPDATE "BudgetReservation" SET "settledAt" = ?, "settledTokens" = ?, "settledMicros" = ? WHERE "key" = ? AND "settledAt" IS NULL', [new Date(at), usedTokens, usedMicros, r.key]);
    if (marked !== 1) return false;
    // the `budget.settled` receipt commits with the settlement (before the usage rows are locked)
    await writeReceiptIn(tx, receipt);
    for (const h of holds) {
      await tx.execute(
        'UPDATE "BudgetUsage" SET "reservedTokens" = "reservedTokens" - ?, "usedTokens" = "usedTokens" + ?, "reservedMicros" = "reservedMicros" - ?, "usedMicros" = "usedMicros" + ? WHERE "budgetId" = ? AND "periodStart" = ?',
        [r.tokens, usedTokens, r.micros ?? 0, usedMicros, h.budget, new Date(h.period)],
      );
    }
    return true;
  });
}

/** What people read of a refusal: the error's message and the admins' notice. */
function refusalTexts(b: Budget, p: Period, model: string, need: { tokens: number; micros: number | null }, spent: { tokens: number; micros: number }, left: { tokens?: number; micros?: number }): { message: string; notice: string } {
  const name = periodName(b);
  const renewal = p.end ? describeRenewal(b, p.end) : undefined;
  if (b.id === ENV_BUDGET_ID) {
    return {
      message: `Not called: the model budget of ${b.tokens} tokens per ${name} (STEWARD_TOKEN_BUDGET) has ${left.tokens} left, and a call to ${model} may need ${need.tokens}: no model is called until ${renewal}.`,
      notice: `**Model budget**: ${spent.tokens} of ${b.tokens} tokens per ${name} are spent (STEWARD_TOKEN_BUDGET); calls that do not fit are refused until ${renewal}.`,
    };
  }
  const amounts = (t: number | null | undefined, m: number | null | undefined) => [t == null ? undefined : `${t} tokens`, m == null ? undefined : formatMoney(m)].filter(Boolean).join(' and ');
  const per = b.period === 'none' ? 'in total' : `per ${name}${b.period === 'window' ? '' : ` (${b.timezone})`}`;
  const until = renewal ? `until ${renewal}` : 'until it is raised';
  const which = `the budget of ${scopeText(b)}, ${amounts(b.tokens, b.micros)} ${per},`;
  return {
    message: `Not called: ${which} has ${amounts(left.tokens, left.micros)} left, and a call to ${model} may need ${need.tokens} tokens${need.micros === null ? '' : ` (${formatMoney(need.micros)})`}: no model is called for it ${until}.`,
    notice: `**Model budget**: ${which} is spent (${amounts(b.tokens === null ? undefined : spent.tokens, b.micros === null ? undefined : spent.micros)}); model calls for it that do not fit are refused ${until}.`,
  };
}

/** A refused call: what is left, the receipts, the admins told once per budget and period, and the error. */
async function refuse(db: Db, senders: Senders | undefined, req: SpendRequest, h: Hold, need: { tokens: number; micros: number | null }, at: number): Promise<never> {
  const { budget: b, period: p } = h;
  const [u] = await directSql(db).query('SELECT "usedTokens", "reservedTokens", "usedMicros", "reservedMicros", "raisedTokens", "raisedMicros" FROM "BudgetUsage" WHERE "budgetId" = ? AND "periodStart" = ?', [b.id, p.start]);
  const spent = { tokens: u ? sqlInt(u.usedTokens) + sqlInt(u.reservedTokens) : 0, micros: u ? sqlInt(u.usedMicros) + sqlInt(u.reservedMicros) : 0 };
  // the period's raise (raises.ts) counts as limit
  const raised = { tokens: u ? sqlInt(u.raisedTokens) : 0, micros: u ? sqlInt(u.raisedMicros) : 0 };
  const leftUnits = { ...(b.tokens === null ? {} : { tokens: Math.max(0, b.tokens + raised.tokens - spent.tokens) }), ...(b.micros === null ? {} : { micros: Math.max(0, b.micros + raised.micros - spent.micros) }) };
  const left = { ...(leftUnits.tokens === undefined ? {} : { tokens: leftUnits.tokens }), ...(leftUnits.micros === undefined ? {} : { money: leftUnits.micros / 1_000_000 }) };
  const { message, notice } = refusalTexts(b, p, req.model, need, spent, leftUnits);
  const detail = {
    budget: b.id,
    scope: b.scope,
    ...(b.scopeId ? { scopeId: b.scopeId } : {}),
    period: periodName(b),
    periodStart: p.start.toISOString(),
    ...(p.end ? { renewsAt: p.end.toISOString() } : {}),
    left,
  };
  const limit = b.id === ENV_BUDGET_ID ? 'tokens' : 'budget';
  // whose call it refused: they may not raise it for this period (no self-raise)
  await recordRefusal(db, b.id, p, req.scopes.people ?? [], at);
  await writeReceipt(db, { kind: 'limit.refused', actor: 'model-budget', data: { limit, ...detail, model: req.model, kind: req.kind, need: { tokens: need.tokens, ...(need.micros === null ? {} : { micros: need.micros }) } } });
  // the first refusal of the budget's period: receipted and told once
  if (await writeReceipt(db, { key: `budget.exhausted:${b.id}:${p.start.getTime()}`, kind: 'budget.exhausted', actor: 'model-budget', data: detail })) {
    await notifyAdmins(db, senders ?? {}, { key: `budget:${b.id}:${p.start.getTime()}`, text: notice, buttons: raiseButtons(b, p) }).catch(() => undefined);
  }
  throw new ModelBudgetExceededError(message, { budget: b.id, scope: b.scope, ...(b.scopeId ? { id: b.scopeId } : {}), period: periodName(b), left, ...(p.end ? { renewsAt: p.end.toISOString() } : {}) });
}

/** The budget ledger over the database (see the module comment). */
export function createBudgetLedger(opts: BudgetLedgerOptions): BudgetLedger {
  const { db, prices } = opts;
  const now = opts.now ?? Date.now;
  const ttl = opts.reservationTtlMs ?? DEFAULT_RESERVATION_TTL_MS;
  const retain = opts.retainSettledMs ?? DEFAULT_RETAIN_SETTLED_MS;
  const unpriced = new Set<string>();
  // what each ticket this ledger handed out reserves, so its settle needs no read (a ticket made
  // elsewhere, `{ key }`, is read from the database); the reservation row is only ever changed by
  // its settle, which marks it settled once, so what was held here stays what the row holds
  const reserved = new WeakMap<SpendTicket, ReservationRow>();
  // the usage rows (budget, period start) this ledger held on: they exist, a reservation needs not insert them
  const rowsSeen = new Set<string>();
  const ticketFor = (key: string, r: ReservationRow | undefined): SpendTicket => {
    const ticket: SpendTicket = { key };
    if (r) reserved.set(ticket, r);
    return ticket;
  };
  // STEWARD_TOKEN_BUDGET's budget made equal to the setting once per ledger (again after a failure)
  let envReady: Promise<void> | undefined;
  const ready = () =>
    (envReady ??= syncEnvBudget(db, opts.installationTokens).catch((err: unknown) => {
      envReady = undefined;
      throw err;
    }));

  // the scopes budgets exist for, read at most every BUDGETS_SEEN_MS (and again after a budget
  // change of this process): a Steward without budgets reserves nothing, and one with only
  // installation budgets needs not look up a call's other scopes
  let seen: { at: number; version: number; scopes: Promise<ReadonlySet<string>> } | undefined;
  const budgetScopes = (): Promise<ReadonlySet<string>> => {
    const at = Date.now();
    const version = budgetsChangedCount();
    if (!seen || at - seen.at > BUDGETS_SEEN_MS || seen.version !== version) {
      seen = {
        at,
        version,
        scopes: ready()
          .then(async () => new Set((await directSql(db).query('SELECT DISTINCT "scope" FROM "Budget"', [])).map((r) => String(r.scope))))
          .catch((err: unknown) => {
            seen = undefined;
            throw err;
          }),
      };
    }
    return seen.scopes;
  };

  return {
    applies: async () => (await budgetScopes()).size > 0,
    scoped: async () => [...(await budgetScopes())].some((scope) => scope !== 'installation'),

    async reserve(input) {
      const req = SpendRequestSchema.parse(input) as SpendRequest;
      const ticket: SpendTicket = { key: req.key };
      await ready();
      const at = now();
      const budgets = await budgetsFor(db, req.scopes);
      if (budgets.length === 0) return ticket; // no budget applies: nothing to hold
      const price = prices.priceOf(req.model);
      if (!price) unpriced.add(req.model);
      const tokens = req.inputTokens + req.maxOutputTokens;
      const micros = price ? worstCaseMicros(price, req.inputTokens, req.maxOutputTokens) : null;
      const holds: Hold[] = budgets.map((budget) => ({ budget, period: periodOf(budget, at) }));
      // The step's key: reserved before and not settled (a retry after its worker died
      // mid-call), the same reservation; reserved and settled before (the step's call was made
      // and the activity failed after it), the retry makes a call of its own, reserved under the
      // key's next attempt (`<key>#2`, `#3`, ...).
      let key = req.key;
      for (let attempt = 2; ; attempt++) {
        const receipt = {
          key: `budget.reserved:${key}`,
          kind: 'budget.reserved',
          actor: 'model-budget',
          data: { key, model: req.model, kind: req.kind, tokens, ...(micros === null ? {} : { micros }), budgets: budgets.map((b) => b.id) },
        } as const;
        const outcome = await holdAll(db, { key, model: req.model, kind: req.kind, tokens, micros, expiresAt: new Date(at + ttl), at: new Date(at) }, holds, receipt, rowsSeen);
        if (outcome.duplicate) {
          const prior = await reservation(db, key);
          if (prior?.settled && attempt <= MAX_ATTEMPT_KEYS) {
            key = `${req.key}#${attempt}`;
            continue;
          }
          return ticketFor(key, prior && !prior.settled ? prior : undefined);
        }
        if (outcome.refused) return refuse(db, opts.senders, req, outcome.refused, { tokens, micros }, at);
        return ticketFor(key, { key, model: req.model, tokens, micros, holds: holds.map((h) => ({ budget: h.budget.id, period: h.period.start.toISOString() })) });
      }
    },

    async settle(ticket, input) {
      const usage: SpendUsage = SpendUsageSchema.parse(input);
      // the reservation as this ledger made or found it (no read), else as the database has it
      const held = reserved.get(ticket);
      const r = held?.key === ticket.key ? held : await reservation(db, ticket.key);
      // unknown (nothing was held), or settled already (a second settle, or expired and swept;
      // for a reservation this ledger holds, the settle's conditional mark finds that out)
      if (!r || ('settled' in r && r.settled)) return;
      const price = prices.priceOf(r.model);
      const usedTokens = usage.inputTokens + usage.outputTokens;
      // an unpriced call counts no money; a call whose price went away since counts its worst case
      const usedMicros = r.micros === null ? 0 : price ? costMicros(price, usage) : r.micros;
      await settleRow(db, r, usedTokens, usedMicros, now(), {
        key: `budget.settled:${r.key}`,
        kind: 'budget.settled',
        actor: 'model-budget',
        data: { key: r.key, model: r.model, tokens: usedTokens, ...(r.micros === null ? {} : { micros: usedMicros }), reserved: { tokens: r.tokens, ...(r.micros === null ? {} : { micros: r.micros }) } },
      });
    },

    async sweepExpired() {
      const at = now();
      let settled = 0;
      for (let batch = 0; batch < SWEEP_BATCHES; batch++) {
        const rows = (await directSql(db).query(`SELECT "key", "model", "tokens", "micros", "holds" FROM "BudgetReservation" WHERE "settledAt" IS NULL AND "expiresAt" < ? ORDER BY "expiresAt" LIMIT ${SWEEP_BATCH}`, [new Date(at)])).map(reservationFromRow);
        for (const r of rows) {
          // a crashed worker's call: it may have used all it could
          const receipt = { key: `budget.settled:${r.key}`, kind: 'budget.settled', actor: 'model-budget', data: { key: r.key, model: r.model, tokens: r.tokens, ...(r.micros === null ? {} : { micros: r.micros }), expired: true } } as const;
          if (await settleRow(db, r, r.tokens, r.micros ?? 0, at, receipt)) settled++;
        }
        if (rows.length < SWEEP_BATCH) break;
      }
      await directSql(db).execute('DELETE FROM "BudgetReservation" WHERE "settledAt" IS NOT NULL AND "settledAt" < ?', [new Date(at - retain)]);
      return settled;
    },

    unpricedModels: () => [...unpriced].sort(),
  };
}

/** When a reservation of the ledger was made and is due (for views and tests). */
export async function reservationOf(db: Db, key: string): Promise<{ tokens: number; micros: number | null; expiresAt: Date; settledAt: Date | null; settledTokens: number | null; settledMicros: number | null } | undefined> {
  const [r] = await directSql(db).query('SELECT "tokens", "micros", "expiresAt", "settledAt", "settledTokens", "settledMicros" FROM "BudgetReservation" WHERE "key" = ?', [key]);
  if (!r) return undefined;
  const n = (v: unknown) => (v === null || v === undefined ? null : sqlInt(v));
  return { tokens: sqlInt(r.tokens), micros: n(r.micros), expiresAt: sqlDate(r.expiresAt), settledAt: r.settledAt === null ? null : sqlDate(r.settledAt), settledTokens: n(r.settledTokens), settledMicros: n(r.settledMicros) };
}

/** One budget's use in the period containing `at`: used and reserved, tokens and micro-USD (zeros when nothing was reserved yet). */
export async function budgetUsage(db: Db, budget: Budget, at: number = Date.now()): Promise<{ period: Period; usedTokens: number; reservedTokens: number; usedMicros: number; reservedMicros: number; raisedTokens: number; raisedMicros: number }> {
  const period = periodOf(budget, at);
  const [u] = await directSql(db).query('SELECT "usedTokens", "reservedTokens", "usedMicros", "reservedMicros", "raisedTokens", "raisedMicros" FROM "BudgetUsage" WHERE "budgetId" = ? AND "periodStart" = ?', [budget.id, period.start]);
  return {
    period,
    usedTokens: u ? sqlInt(u.usedTokens) : 0,
    reservedTokens: u ? sqlInt(u.reservedTokens) : 0,
    usedMicros: u ? sqlInt(u.usedMicros) : 0,
    reservedMicros: u ? sqlInt(u.reservedMicros) : 0,
    raisedTokens: u ? sqlInt(u.raisedTokens) : 0,
    raisedMicros: u ? sqlInt(u.raisedMicros) : 0,
  };
}

/** One budget's use in its current period, as `budgetUsage` reads it. */
export type BudgetUsageRow = Awaited<ReturnType<typeof budgetUsage>>;

/** How many budgets' usage rows one statement reads. */
const USAGE_BATCH = 200;

/**
 * Every budget (by scope and id) with its use in the period containing `at`: the one read behind
 * the budget gauges (`budgetStandings`) and the API's and CLI's list (services/budgets.ts): the
 * budgets, then their current periods' usage rows in one statement per USAGE_BATCH budgets.
 */
export async function budgetsWithUsage(db: Db, at: number = Date.now()): Promise<Array<{ budget: Budget; usage: BudgetUsageRow }>> {
  const budgets = (await listBudgets(db)).map((budget) => ({ budget, period: periodOf(budget, at) }));
  const found = new Map<string, SqlRow>();
  for (let i = 0; i < budgets.length; i += USAGE_BATCH) {
    const batch = budgets.slice(i, i + USAGE_BATCH);
    const rows = await directSql(db).query(
      `SELECT "budgetId", "usedTokens", "reservedTokens", "usedMicros", "reservedMicros", "raisedTokens", "raisedMicros" FROM "BudgetUsage" WHERE ${batch.map(() => '("budgetId" = ? AND "periodStart" = ?)').join(' OR ')}`,
      batch.flatMap((b) => [b.budget.id, b.period.start]),
    );
    for (const r of rows) found.set(String(r.budgetId), r);
  }
  return budgets.map(({ budget, period }) => {
    const u = found.get(budget.id);
    const n = (v: unknown) => (u ? sqlInt(v) : 0);
    return { budget, usage: { period, usedTokens: n(u?.usedTokens), reservedTokens: n(u?.reservedTokens), usedMicros: n(u?.usedMicros), reservedMicros: n(u?.reservedMicros), raisedTokens: n(u?.raisedTokens), raisedMicros: n(u?.raisedMicros) } };
  });
}

/** Every budget's standing in its current period: for the budget gauges (common/metrics.ts). */
export async function budgetStandings(db: Db, at: number = Date.now()): Promise<BudgetGaugeRow[]> {
  return (await budgetsWithUsage(db, at)).map(({ budget: b, usage: u }) => ({
    budget: b.id,
    scope: b.scope,
    scopeId: b.scopeId ?? '',
    period: periodName(b),
    used: { tokens: u.usedTokens, usd: u.usedMicros / 1_000_000 },
    reserved: { tokens: u.reservedTokens, usd: u.reservedMicros / 1_000_000 },
    // the period's limit: the budget's, plus the period's raise
    limit: { tokens: b.tokens === null ? null : b.tokens + u.raisedTokens, usd: b.micros === null ? null : (b.micros + u.raisedMicros) / 1_000_000 },
  }));
}

/** The models calls were reserved for without a price (they counted tokens only), from every process: for `doctor`. */
export async function unpricedModelsSeen(db: Db): Promise<string[]> {
  return (await directSql(db).query('SELECT DISTINCT "model" FROM "BudgetReservation" WHERE "micros" IS NULL ORDER BY "model"', [])).map((r) => String(r.model));
}

/**
 * Sweep the expired reservations every `everyMs` (a minute by default): a crashed worker's
 * reservation is settled to its worst case within a minute of its expiry. Returns the stop.
 */
export function startSweepingExpired(ledger: Pick<BudgetLedger, 'sweepExpired'>, log: { info(o: object, m: string): void; warn(o: object, m: string): void }, everyMs = 60_000): () => Promise<void> {
  let running: Promise<void> = Promise.resolve();
  const timer = setInterval(() => {
    running = running.then(async () => {
      try {
        const n = await ledger.sweepExpired();
        if (n > 0) log.info({ settled: n }, 'expired budget reservations were settled to their worst case');
      } catch (err) {
        log.warn({ err }, 'the sweep of expired budget reservations failed');
      }
    });
  }, everyMs);
  timer.unref();
  return async () => {
    clearInterval(timer);
    await running;
  };
}

/** A budget that refuses every call now: what is used and held in its period has reached its limit. */
export interface SpentBudget {
  id: string;
  scope: Budget['scope'];
  scopeId: string | null;
  /** day, week, month, none (a total), or the window's length. */
  period: string;
  /** When its period renews; null for a total (it renews only when it is raised). */
  renewsAt: Date | null;
  /** When it renews, for people: `2026-11-29 00:00 UTC`, or `it is raised` for a total. */
  until: string;
}

/**
 * The budgets that apply to a call of these scopes (the installation's always) and are spent in
 * the period containing `at`: used and held have reached the limit (tokens, or money), so the
 * ledger refuses every call for them (`reserve` takes nothing once `used + reserved` reaches the
 * limit) until the period renews or the limit is raised. Read-only (no row is made or locked);
 * by budget id. For a run that asks before it starts whether any of its calls could be made
 * (an objective's run: domain/objectives/runs.ts).
 */
export async function spentBudgets(db: Db, scopes: SpendScopes, at: number = Date.now()): Promise<SpentBudget[]> {
  const spent: SpentBudget[] = [];
  for (const b of await budgetsFor(db, scopes)) {
    const u = await budgetUsage(db, b, at);
    // the limit `reserve` holds against: the budget's, plus the period's raise
    const tokensSpent = b.tokens !== null && u.usedTokens + u.reservedTokens >= b.tokens + u.raisedTokens;
    const moneySpent = b.micros !== null && u.usedMicros + u.reservedMicros >= b.micros + u.raisedMicros;
    if (!tokensSpent && !moneySpent) continue;
    spent.push({
      id: b.id,
      scope: b.scope,
      scopeId: b.scopeId,
      period: periodName(b),
      renewsAt: u.period.end ?? null,
      until: u.period.end ? describeRenewal(b, u.period.end) : 'it is raised',
    });
  }
  return spent;
}
