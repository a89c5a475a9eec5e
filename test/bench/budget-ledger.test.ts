/**
 * The budget ledger benchmark cannot rot: `bench/budget-ledger.ts` runs once with tiny settings
 * on SQLite (and PostgreSQL when the suite has one) and prints its figures and ratios as JSON.
 * Figures are not checked: this is not a timed test.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

describe('bench/budget-ledger.ts', () => {
  it('reserves and settles beside its floor (no budget), printing JSON', () => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', 'bench/budget-ledger.ts'], {
      cwd: root,
      encoding: 'utf8',
      timeout: 120_000,
      env: { ...process.env, BENCH_CALLS: '40', BENCH_ROUNDS: '1', BENCH_LANES: '1,4', BENCH_SCOPES: '1' },
    });
    assert.equal(r.status, 0, r.stderr.slice(-3000));
    type Lanes = { floor_calls_per_s: number; budget_calls_per_s: number; ratio: number };
    const out = JSON.parse(r.stdout) as { bench: string; holds_per_call: number; sqlite: Record<string, Lanes>; postgresql: Record<string, Lanes> | string };
    assert.equal(out.bench, 'budget-ledger');
    assert.equal(out.holds_per_call, 3);
    const sides = [out.sqlite, ...(typeof out.postgresql === 'string' ? [] : [out.postgresql])];
    if (process.env.STEWARD_TEST_PG_URL) assert.equal(sides.length, 2, 'PostgreSQL measured too');
    for (const side of sides) {
      for (const lanes of ['lanes_1', 'lanes_4']) {
        const m = side[lanes];
        assert.ok(m, lanes);
        for (const k of ['floor_calls_per_s', 'budget_calls_per_s', 'ratio'] as const) assert.ok(Number.isFinite(m[k]) && m[k] > 0, `${lanes}.${k}`);
      }
    }
  });
});
