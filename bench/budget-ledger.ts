/**
 * The budget ledger's cost per model call: what a budgeted model step adds to the database work
 * of an unbudgeted one. Each call does what a model step does around its model call
 * (domain/model.ts runModelStep): asks the ledger whether any budget applies, reserves and
 * settles when one does, and writes its `model.call` receipt. The floor is the same loop on a
 * database with no budget (the ledger then reserves nothing); the budgeted loop has the
 * installation's budget (as STEWARD_TOKEN_BUDGET, bench:compare's budget) and, with
 * BENCH_SCOPES=1, a chat and a person budget too (three holds a call). Calls run in BENCH_LANES
 * concurrent lanes (1: one after another; 50: the 50-conversation scenario's concurrency),
 * rounds alternating floor and budget; medians. On SQLite and, when BENCH_PG_URL or
 * STEWARD_TEST_PG_URL names a server (an admin URL: it creates databases), PostgreSQL.
 * Prints JSON. Not a test.
 *
 *   node --import tsx bench/budget-ledger.ts   (BENCH_CALLS=2000 per round, BENCH_ROUNDS=5, BENCH_LANES=1,50)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { defineBudget } from '../domain/budgets/definitions.js';
import { createBudgetLedger, type BudgetLedger } from '../domain/budgets/ledger.js';
import { createPriceTable } from '../domain/budgets/prices.js';
import { createDb, migrateDatabase, tuneDb, type Db } from '../domain/db.js';
import type { SpendScopes } from '../domain/model.js';
import { writeReceipt } from '../domain/receipts.js';
import { createPgDatabase } from '../test/helpers/db.js';

const int = (name: string, fallback: number) => Math.max(1, Number(process.env[name] ?? fallback) || fallback);
const CALLS = int('BENCH_CALLS', 2000);
const ROUNDS = int('BENCH_ROUNDS', 5);
const LANES = (process.env.BENCH_LANES ?? '1,50').split(',').map((s) => Math.max(1, Number(s) || 1));
const SCOPES = process.env.BENCH_SCOPES === '1';
const pgUrl = process.env.BENCH_PG_URL ?? process.env.STEWARD_TEST_PG_URL;

const MODEL = 'openai:gpt-4.1-mini';
const scopes: SpendScopes = { chat: 'bench-chat', people: ['bench-person'] };

interface Side {
  db: Db;
  ledger: BudgetLedger;
  drop(): Promise<void>;
}

async function open(kind: 'sqlite' | 'postgres', budgeted: boolean): Promise<Side> {
  let url: string;
  let discard: () => Promise<void>;
  if (kind === 'sqlite') {
    const dir = mkdtempSync(path.join(tmpdir(), 'steward-bench-ledger-'));
    url = `file:${path.join(dir, 'bench.db')}`;
    discard = async () => rmSync(dir, { recursive: true, force: true });
  } else {
    const made = await createPgDatabase(pgUrl!);
    url = made.url;
    discard = made.drop;
  }
  await migrateDatabase(url);
  const db = createDb(url);
  await tuneDb(db, url);
  if (budgeted) {
    // large enough never to refuse: the bench measures the bookkeeping, not refusals
    await defineBudget(db, { id: 'bench-installation', scope: 'installation', tokens: Number.MAX_SAFE_INTEGER, period: 'day' });
    if (SCOPES) {
      await defineBudget(db, { id: 'bench-chat', scope: 'chat', scopeId: 'bench-chat', tokens: Number.MAX_SAFE_INTEGER, money: 1e9, period: 'month', timezone: 'Europe/Berlin' });
      await defineBudget(db, { id: 'bench-person', scope: 'person', scopeId: 'bench-person', money: 1e9, period: 'week' });
    }
  }
  const ledger = createBudgetLedger({ db, prices: createPriceTable() });
  return {
    db,
    ledger,
    async drop() {
      await db.$disconnect();
      await discard();
    },
  };
}

let seq = 0;

/** One model step's database work around its (absent) model call. */
async function step(side: Side): Promise<void> {
  const key = `bench-step-${++seq}`;
  const budgeted = (await side.ledger.applies?.()) ?? true;
  const ticket = budgeted ? await side.ledger.reserve({ key, model: MODEL, inputTokens: 1200, maxOutputTokens: 800, scopes, kind: 'chat' }) : undefined;
  await writeReceipt(side.db, { key: `model.call:${key}`, kind: 'model.call', actor: 'bench', data: { model: MODEL, inputTokens: 1100, outputTokens: 300 } });
  if (ticket) await side.ledger.settle(ticket, { inputTokens: 1100, outputTokens: 300 });
}

/** Calls per second over `CALLS` calls in `lanes` concurrent lanes. */
async function round(side: Side, lanes: number): Promise<number> {
  const per = Math.ceil(CALLS / lanes);
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: lanes }, async () => {
      for (let i = 0; i < per; i++) await step(side);
    }),
  );
  return (per * lanes) / ((performance.now() - t0) / 1000);
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

async function measure(kind: 'sqlite' | 'postgres'): Promise<Record<string, unknown>> {
  const floor = await open(kind, false);
  const budget = await open(kind, true);
  try {
    // warm: prepared statements, the ledger's caches, the pool
    await round(floor, 4);
    await round(budget, 4);
    const out: Record<string, unknown> = {};
    for (const lanes of LANES) {
      const f: number[] = [];
      const b: number[] = [];
      for (let r = 0; r < ROUNDS; r++) {
        // alternate which goes first, so neither always runs on a warmer machine
        if (r % 2 === 0) {
          f.push(await round(floor, lanes));
          b.push(await round(budget, lanes));
        } else {
          b.push(await round(budget, lanes));
          f.push(await round(floor, lanes));
        }
      }
      const fm = median(f);
      const bm = median(b);
      out[`lanes_${lanes}`] = {
        floor_calls_per_s: Math.round(fm),
        budget_calls_per_s: Math.round(bm),
        // how much longer a budgeted call's database work takes than the floor's (1.0: no cost)
        ratio: +(fm / bm).toFixed(2),
        // the budget's own cost per call, in microseconds of wall clock
        budget_us_per_call: Math.round(1e6 / bm - 1e6 / fm),
      };
    }
    return out;
  } finally {
    await floor.drop();
    await budget.drop();
  }
}

const result: Record<string, unknown> = { bench: 'budget-ledger', calls_per_round: CALLS, rounds: ROUNDS, holds_per_call: SCOPES ? 3 : 1 };
result.sqlite = await measure('sqlite');
result.postgresql = pgUrl ? await measure('postgres') : 'not measured (set BENCH_PG_URL or STEWARD_TEST_PG_URL)';
console.log(JSON.stringify(result, null, 2));
