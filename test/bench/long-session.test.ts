/**
 * The long-session benchmark cannot rot: `bench/long-session.ts` runs once with tiny settings
 * (one round, 30 turns a side, a continue-as-new every 10 turns), the floor and Steward both
 * answer every turn and continue as new, and the JSON it prints carries every figure, ratio
 * and the boundary's timeline that docs/performance.md describes. Figures are not checked:
 * this is not a timed test (runs this short are also started late by the server's
 * continue-as-new minimum interval).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

describe('bench/long-session.ts', () => {
  it('runs the floor and Steward through one long conversation each and prints the continue-as-new turns, ratios and a timeline as JSON', () => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', 'bench/long-session.ts'], {
      cwd: root,
      encoding: 'utf8',
      timeout: 240_000,
      env: { ...process.env, LONG_ROUNDS: '1', LONG_TURNS: '30', LONG_WINDOW: '10', STEWARD_SESSION_MAX_TURNS: '10' },
    });
    assert.equal(r.status, 0, r.stderr.split('\n').filter((l) => !l.includes('[INFO]')).slice(-30).join('\n'));
    const out = JSON.parse(r.stdout) as {
      rounds: number;
      turns: number;
      per_round: Array<{ floor: Record<string, number>; steward: Record<string, number> }>;
      median: { floor: Record<string, number | null>; steward: Record<string, number | null> };
      ratio_steward_to_floor: Record<string, number | null>;
      boundary_timeline_last_round: { floor: string[]; steward: string[] };
    };
    assert.equal(out.rounds, 1);
    assert.equal(out.turns, 30);
    assert.equal(out.per_round.length, 1);
    const figures = ['all', 'first_100', 'can_turns', 'after_can_turns', 'others'].flatMap((g) => [`${g}_p50_ms`, `${g}_p99_ms`]);
    for (const side of ['floor', 'steward'] as const) {
      for (const f of [...figures, 'can_p99_to_others_p50', 'whole_p50_to_first_100_p50', 'can_turns_workflow_tasks', 'others_wft_wait_ms', 'max_run_history_events']) {
        const v = out.median[side][f];
        assert.ok(typeof v === 'number' && v > 0, `${side} ${f}: ${v}`);
      }
      // 30 turns, a continue-as-new every 10: each side continued as new at least twice
      assert.ok(out.median[side].runs! >= 3, `${side} runs: ${out.median[side].runs}`);
      const timeline = out.boundary_timeline_last_round[side];
      assert.ok(timeline.some((l) => l.includes('WORKFLOW_EXECUTION_CONTINUED_AS_NEW')), `${side} timeline:\n${timeline.join('\n')}`);
      assert.ok(timeline.some((l) => l.includes("reply seen")), `${side} timeline:\n${timeline.join('\n')}`);
    }
    for (const f of figures) assert.ok(typeof out.ratio_steward_to_floor[f] === 'number', `ratio ${f}`);
  });
});
