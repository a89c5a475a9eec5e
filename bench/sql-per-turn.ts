/**
 * SQL statements per chat turn on SQLite: runs turns one after another on the all-in-one
 * stack (bench/stack.ts) and counts the statements better-sqlite3 executes, grouped by
 * statement, with the time SQLite took for them (microseconds per turn, wall clock around each
 * call into better-sqlite3). Prints JSON. Not a test.
 *
 *   node --import tsx bench/sql-per-turn.ts            (BENCH_TURNS=100, after 5 warm-up turns)
 */
import Database from 'better-sqlite3';
import { startBenchStack } from './stack.js';

const TURNS = Math.max(1, Number(process.env.BENCH_TURNS ?? 100));
if (process.env.DATABASE_URL && !process.env.DATABASE_URL.startsWith('file:')) throw new Error('bench/sql-per-turn.ts counts SQLite statements: unset DATABASE_URL');

let counting = false;
const counts = new Map<string, number>();
const micros = new Map<string, number>();
// Statements are prepared once and kept (domain/db.ts reusePreparedStatements), so the
// count is taken where a statement executes: run, all, get and iterate of better-sqlite3's
// Statement.
type Executes = Record<'run' | 'all' | 'get' | 'iterate', (this: { source: string }, ...args: unknown[]) => unknown>;
const probe = new Database(':memory:');
const statementProto = Object.getPrototypeOf(probe.prepare('SELECT 1')) as Executes;
probe.close();
for (const method of ['run', 'all', 'get', 'iterate'] as const) {
  const original = statementProto[method];
  statementProto[method] = function (this: { source: string }, ...args: unknown[]) {
    if (!counting) return original.apply(this, args);
    // the statement's kind and table, not its columns
    const k = this.source.replace(/\s+/g, ' ').replace(/^(INSERT INTO|UPDATE|DELETE FROM) (\S+).*$/, '$1 $2').replace(/^SELECT .*? FROM (\S+).*$/, 'SELECT FROM $1');
    counts.set(k, (counts.get(k) ?? 0) + 1);
    const t0 = process.hrtime.bigint();
    try {
      return original.apply(this, args);
    } finally {
      micros.set(k, (micros.get(k) ?? 0) + Number(process.hrtime.bigint() - t0) / 1000);
    }
  };
}

const stack = await startBenchStack();
try {
  for (let i = 0; i < 5; i++) await stack.turn('warmup');
  await new Promise((r) => setTimeout(r, 300));
  counting = true;
  for (let i = 0; i < TURNS; i++) await stack.turn('counted');
  await new Promise((r) => setTimeout(r, 300)); // the last turn's closing writes
  counting = false;
  const total = [...counts.values()].reduce((a, b) => a + b, 0);
  const byStatement = Object.fromEntries([...counts].sort((a, b) => b[1] - a[1]).map(([k, n]) => [k, +(n / TURNS).toFixed(2)]));
  const us = [...micros.values()].reduce((a, b) => a + b, 0);
  const usByStatement = Object.fromEntries([...micros].sort((a, b) => b[1] - a[1]).map(([k, t]) => [k, Math.round(t / TURNS)]));
  console.log(
    JSON.stringify(
      { bench: 'sql-per-turn', turns: TURNS, statements_per_turn: +(total / TURNS).toFixed(2), per_turn_by_statement: byStatement, sqlite_us_per_turn: Math.round(us / TURNS), sqlite_us_per_turn_by_statement: usByStatement },
      null,
      2,
    ),
  );
} finally {
  await stack.stop();
}
