/**
 * The turn benchmarks cannot rot: `bench/compare.ts` runs once with tiny settings (one round,
 * a few turns each), the floor and Steward both answer every turn, and the JSON it prints
 * carries every figure and ratio the README's Performance section reports. Figures are not
 * checked: this is not a timed test.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

describe('bench/compare.ts', () => {
  it('runs the floor and Steward through the same phases and prints medians and ratios as JSON', () => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', 'bench/compare.ts'], {
      cwd: root,
      encoding: 'utf8',
      timeout: 240_000,
      env: {
        ...process.env,
        BENCH_ROUNDS: '1',
        BENCH_SECONDS: '1',
        BENCH_IDLE_SESSIONS: '3',
        BENCH_IDLE_CONCURRENCY: '2',
        BENCH_WAKE_SESSIONS: '2',
        BENCH_SEQUENTIAL_TURNS: '3',
        BENCH_CONCURRENCY: '2',
        BENCH_CONCURRENT_TURNS: '2',
        BENCH_WARMUP_TURNS: '1',
        BENCH_SETTLE_SECONDS: '1',
      },
    });
    assert.equal(r.status, 0, r.stderr.split('\n').filter((l) => !l.includes('[INFO]')).slice(-30).join('\n'));
    const out = JSON.parse(r.stdout) as {
      rounds: number;
      per_round: Array<{ floor: Record<string, number>; steward: Record<string, number> }>;
      median: { floor: Record<string, number>; steward: Record<string, number> };
      ratio_steward_to_floor: Record<string, number | null>;
    };
    assert.equal(out.rounds, 1);
    assert.equal(out.per_round.length, 1);
    const metrics = ['p50_ms_1_conversation', 'p99_ms_1_conversation', 'p50_ms_n_conversations', 'turns_per_s', 'rss_mb_idle_sessions', 'idle_sessions_per_s', 'p50_ms_wake_after_idle', 'p99_ms_wake_after_idle', 'history_events_per_turn', 'workflow_tasks_per_turn'];
    for (const m of metrics) {
      for (const side of ['floor', 'steward'] as const) assert.ok(Number.isFinite(out.median[side][m]) && out.median[side][m]! > 0, `${side} ${m}: ${out.median[side][m]}`);
      assert.ok(typeof out.ratio_steward_to_floor[m] === 'number', `ratio ${m}`);
    }
    // whose CPU a turn is (bench/proc-cpu.ts): each side's process by thread, and its Temporal server
    for (const side of ['floor', 'steward'] as const) {
      const cpu = (k: string) => out.median[side][`cpu_ms_per_turn_sustained_${k}`]!;
      for (const k of ['main_thread', 'temporal_core', 'other_threads', 'child_processes']) assert.ok(Number.isFinite(cpu(k)) && cpu(k) >= 0, `${side} ${k}: ${cpu(k)}`);
      assert.ok(cpu('main_thread') > 0 && cpu('child_processes') > 0, `${side}: the main thread and the dev server worked in the sustained phase (${cpu('main_thread')}, ${cpu('child_processes')})`);
      assert.ok(Math.abs(cpu('process') - (cpu('main_thread') + cpu('temporal_core') + cpu('other_threads'))) < 0.2, `${side}: the process is its threads`);
    }
    // the floor's shape: one update, one activity per turn
    assert.ok(out.median.floor.workflow_tasks_per_turn! >= 1 && out.median.floor.workflow_tasks_per_turn! <= 3, `floor workflow tasks per turn ${out.median.floor.workflow_tasks_per_turn}`);
  });
});
