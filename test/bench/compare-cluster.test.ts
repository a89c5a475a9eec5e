/**
 * The cluster comparison cannot rot: `bench/compare.ts --cluster` runs once with tiny settings
 * (one round, a few turns each), the floor and Steward each on a fresh 2-node Temporal cluster
 * on PostgreSQL, both answer every turn, and the JSON carries every figure and ratio
 * docs/performance.md reports for the production shape. Figures are not checked: this is not a
 * timed test. Needs what the cluster suites need (the file name matches test.sh's cluster
 * pattern, so `./steward test` builds the Temporal server for it); skipped, saying why, without.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { clusterMissing } from '../helpers/cluster.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const missing = clusterMissing();

/** Databases the benchmark's clusters made (prefix b<6 chars>_): none may be left. */
async function benchDatabases(): Promise<string[]> {
  const c = new pg.Client({ connectionString: process.env.STEWARD_TEST_PG_URL });
  await c.connect();
  try {
    return (await c.query<{ datname: string }>("SELECT datname FROM pg_database WHERE datname ~ '^b[a-z0-9]{6}_(temporal|temporal_visibility|steward)$'")).rows.map((r) => r.datname);
  } finally {
    await c.end();
  }
}

describe('bench/compare.ts --cluster', { skip: missing }, () => {
  it('runs the floor and Steward on fresh clusters through the same phases and prints medians, spreads and ratios as JSON', async () => {
    const before = await benchDatabases();
    const r = spawnSync(process.execPath, ['--import', 'tsx', 'bench/compare.ts', '--cluster'], {
      cwd: root,
      encoding: 'utf8',
      timeout: 300_000,
      env: {
        ...process.env,
        BENCH_ROUNDS: '1',
        BENCH_SECONDS: '1',
        BENCH_SEQUENTIAL_TURNS: '3',
        BENCH_CONCURRENCY: '2',
        BENCH_CONCURRENT_TURNS: '2',
        BENCH_WARMUP_TURNS: '1',
      },
    });
    assert.equal(r.status, 0, r.stderr.split('\n').filter((l) => !l.includes('[INFO]')).slice(-30).join('\n'));
    const out = JSON.parse(r.stdout) as {
      shape: string;
      rounds: number;
      per_round: Array<{ floor: Record<string, number>; steward: Record<string, number> }>;
      median: { floor: Record<string, number>; steward: Record<string, number> };
      spread: { floor: Record<string, [number, number]>; steward: Record<string, [number, number]> };
      ratio_steward_to_floor: Record<string, number | null>;
      targets: Record<string, string>;
    };
    assert.equal(out.shape, 'cluster');
    assert.equal(out.per_round.length, 1);
    const metrics = ['p50_ms_1_conversation', 'p99_ms_1_conversation', 'p50_ms_n_conversations', 'p99_ms_n_conversations', 'turns_per_s', 'history_events_per_turn', 'workflow_tasks_per_turn'];
    for (const m of metrics) {
      for (const side of ['floor', 'steward'] as const) {
        assert.ok(Number.isFinite(out.median[side][m]) && out.median[side][m]! > 0, `${side} ${m}: ${out.median[side][m]}`);
        assert.equal(out.spread[side][m]!.length, 2, `${side} ${m} spread`);
      }
      assert.ok(typeof out.ratio_steward_to_floor[m] === 'number', `ratio ${m}`);
    }
    // the idle-sessions phase is not run on the cluster, and says so by its absence
    assert.equal(out.median.steward.rss_mb_idle_sessions, undefined);
    assert.deepEqual(Object.keys(out.targets).sort(), ['p50_ms_1_conversation', 'p50_ms_n_conversations', 'p99_ms_1_conversation', 'turns_per_s']);
    // the floor's shape on the cluster too: one update, one activity per turn
    assert.ok(out.median.floor.workflow_tasks_per_turn! >= 1 && out.median.floor.workflow_tasks_per_turn! <= 3, `floor workflow tasks per turn ${out.median.floor.workflow_tasks_per_turn}`);
    // each side's cluster was taken down with its databases
    assert.deepEqual((await benchDatabases()).filter((d) => !before.includes(d)), []);
  });
});
