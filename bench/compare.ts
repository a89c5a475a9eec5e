/**
 * Steward against the plain-Temporal floor, in one run: BENCH_ROUNDS rounds (3), each running
 * bench/floor.ts and then bench/turn-overhead.ts as processes of their own (so each process's
 * memory is its own), alternating which goes first; every round is printed, then the medians
 * and the ratios of the medians (Steward / floor; for throughput, Steward / floor as well, so
 * higher is better there and lower everywhere else). Every BENCH_* setting is passed to both.
 * Prints JSON. Not a test.
 *
 *   npm run bench:compare
 *   BENCH_ROUNDS=5 BENCH_SECONDS=30 npm run bench:compare
 *   BENCH_IDLE_SESSIONS=2000 BENCH_WAKE_SESSIONS=50 npm run bench:compare   (a smaller scale phase: bench/phases.ts)
 *
 * `--cluster` (or BENCH_SHAPE=cluster): the same comparison on the production shape. Each side
 * gets a fresh 2-node Temporal cluster on PostgreSQL for its round (bench/cluster-shape.ts: the
 * code of `steward cluster up`, the Temporal part only for the floor), so the ratio is Steward's
 * cost on that shape. The idle-sessions phase (RSS, wake-up) is skipped there: Steward's memory
 * is spread over three processes and the floor's is one.
 *
 *   npm run bench:compare -- --cluster
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { STEWARD_NODE_FLAGS } from '../platform/node-options.js';
import { floorEnvOf, runJsonProcess, stewardEnv, type Json } from './sides.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const ROUNDS = Math.max(1, Number(process.env.BENCH_ROUNDS ?? 3));
const unknownArgs = process.argv.slice(2).filter((a) => a !== '--cluster');
if (unknownArgs.length) throw new Error(`bench/compare.ts: unknown argument ${unknownArgs.join(' ')} (only --cluster)`);
const CLUSTER = process.argv.includes('--cluster') || process.env.BENCH_SHAPE === 'cluster';
/** What the children are given besides the environment: on the cluster, the shape, and no idle-sessions phase. */
const shapeEnv: Record<string, string> = CLUSTER ? { BENCH_SHAPE: 'cluster', BENCH_IDLE_SESSIONS: '0', BENCH_SETTLE_SECONDS: '0' } : {};

// Steward with its own Node options and environment, the floor with the defaults (bench/sides.ts),
// or with Steward's environment too when BENCH_FLOOR_ENV=steward (to see what the setting alone gives the floor).
const floorEnv = floorEnvOf(process.env.BENCH_FLOOR_ENV === 'steward');

function run(script: string, nodeFlags: readonly string[], processEnv: Record<string, string | undefined>): Promise<Json> {
  return runJsonProcess({ label: script, script: path.join(here, script), nodeFlags, env: { ...processEnv, ...shapeEnv } });
}

/** The figures compared, as paths into each benchmark's JSON. */
const ALL_METRICS: Record<string, string> = {
  p50_ms_1_conversation: 'latency_1_conversation.p50_ms',
  p99_ms_1_conversation: 'latency_1_conversation.p99_ms',
  p50_ms_n_conversations: 'latency_n_conversations.p50_ms',
  p99_ms_n_conversations: 'latency_n_conversations.p99_ms',
  turns_per_s: 'sustained.turns_per_s',
  rss_mb_idle_sessions: 'idle_sessions.process_rss_mb',
  rss_growth_mb_idle_sessions: 'idle_sessions.rss_growth_for_idle_sessions_mb',
  idle_sessions_per_s: 'idle_sessions.sessions_per_s',
  p50_ms_wake_after_idle: 'wake_after_idle.p50_ms',
  p99_ms_wake_after_idle: 'wake_after_idle.p99_ms',
  history_events_per_turn: 'per_turn.history_events',
  workflow_tasks_per_turn: 'per_turn.workflow_tasks',
  // the sustained phase's CPU per turn by part (bench/proc-cpu.ts): whose CPU a throughput ratio is
  ...Object.fromEntries(['process', 'main_thread', 'temporal_core', 'other_threads', 'child_processes'].map((k) => [`cpu_ms_per_turn_sustained_${k}`, `sustained.cpu_ms_per_turn.${k}`])),
};
/** Not on the cluster: the idle-sessions phase is not run there, and its CPU is measured by part of the cluster instead. */
const NOT_ON_CLUSTER = ['rss_mb_idle_sessions', 'rss_growth_mb_idle_sessions', 'p50_ms_wake_after_idle', ...Object.keys(ALL_METRICS).filter((m) => m.startsWith('cpu_ms_per_turn_sustained_'))];
/** On the cluster: CPU ms per turn of each part (bench/cluster-shape.ts), over all the phases' turns. */
const CLUSTER_CPU: Record<string, string> = {
  ...Object.fromEntries(['total', 'temporal_nodes', 'postgres', 'frontend_balancer', 'steward_processes', 'bench_process'].map((k) => [`cpu_ms_per_turn_${k}`, `cpu_ms_per_turn.${k}`])),
  // Steward's side only (null for the floor)
  ...Object.fromEntries(['api', 'worker', 'repo-worker'].map((k) => [`cpu_ms_per_turn_steward_${k.replace('-', '_')}`, `cpu_ms_per_turn.by_steward_process.${k}`])),
};
const METRICS = CLUSTER ? { ...Object.fromEntries(Object.entries(ALL_METRICS).filter(([m]) => !NOT_ON_CLUSTER.includes(m))), ...CLUSTER_CPU } : ALL_METRICS;

const pick = (j: Json, p: string): number => {
  let v: unknown = j;
  for (const k of p.split('.')) v = (v as Json | undefined)?.[k];
  return typeof v === 'number' ? v : NaN;
};
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

const rounds: Array<{ round: number; order: string[]; floor: Record<string, number>; steward: Record<string, number> }> = [];
for (let r = 1; r <= ROUNDS; r++) {
  const order = r % 2 === 1 ? ['floor', 'steward'] : ['steward', 'floor'];
  const got: Record<string, Json> = {};
  for (const which of order) got[which] = which === 'floor' ? await run('floor.ts', [], floorEnv) : await run('turn-overhead.ts', STEWARD_NODE_FLAGS, stewardEnv);
  const figures = (j: Json) => Object.fromEntries(Object.entries(METRICS).map(([name, p]) => [name, pick(j, p)]));
  const round = { round: r, order, floor: figures(got.floor!), steward: figures(got.steward!) };
  rounds.push(round);
  console.error(`round ${r}/${ROUNDS}: ${JSON.stringify(round)}`);
}

const medians = (side: 'floor' | 'steward') => Object.fromEntries(Object.keys(METRICS).map((m) => [m, +median(rounds.map((r) => r[side][m]!)).toFixed(1)]));
const floor = medians('floor');
const steward = medians('steward');
const ratios = Object.fromEntries(Object.keys(METRICS).map((m) => [m, floor[m] ? +(steward[m]! / floor[m]!).toFixed(2) : null]));
/** Each side's lowest and highest figure over the rounds, and each round's ratio: how much a side moves between rounds. */
const spread = (side: 'floor' | 'steward') => Object.fromEntries(Object.keys(METRICS).map((m) => [m, [Math.min(...rounds.map((r) => r[side][m]!)), Math.max(...rounds.map((r) => r[side][m]!))]]));
const roundRatios = Object.fromEntries(Object.keys(METRICS).map((m) => [m, rounds.map((r) => (r.floor[m] ? +(r.steward[m]! / r.floor[m]!).toFixed(2) : null))]));
/** Issue 37's targets on the dev server (the 50 conversations' in every round: ratio_per_round). */
const DEV_TARGETS = {
  p50_ms_1_conversation: '<= 1.5',
  p99_ms_1_conversation: '<= 1.25',
  p50_ms_n_conversations: '<= 1.2 in every round',
  turns_per_s: '>= 0.9',
  rss_mb_idle_sessions: '<= 0.5 (at BENCH_IDLE_SESSIONS, 10,000 by default, both at BENCH_CACHE)',
  p50_ms_wake_after_idle: '<= 1.2 (BENCH_WAKE_SESSIONS of the idle sessions, 200 by default, woken one at a time)',
  history_events_per_turn: '<= 1.5',
  workflow_tasks_per_turn: '<= 1.5',
};
const CLUSTER_TARGETS = {
  p50_ms_1_conversation: '<= 1.3',
  p99_ms_1_conversation: '<= 1.3',
  p50_ms_n_conversations: '<= 1.3',
  turns_per_s: '>= 0.8',
};
console.log(
  JSON.stringify(
    {
      bench: 'compare',
      shape: CLUSTER ? 'cluster' : 'dev',
      ...(CLUSTER ? { note: 'each side on a fresh 2-node Temporal cluster on PostgreSQL (bench/cluster-shape.ts); the idle-sessions phase (RSS, wake-up) is skipped on the cluster' } : {}),
      rounds: ROUNDS,
      settings: Object.fromEntries(Object.entries(process.env).filter(([k]) => k.startsWith('BENCH_'))),
      node_flags: { floor: [], steward: STEWARD_NODE_FLAGS },
      process_env: { floor: Object.fromEntries(Object.entries(floorEnv).filter(([, v]) => v !== undefined)), steward: stewardEnv },
      per_round: rounds,
      median: { floor, steward },
      spread: { floor: spread('floor'), steward: spread('steward') },
      ratio_steward_to_floor: ratios,
      ratio_per_round: roundRatios,
      targets: CLUSTER ? CLUSTER_TARGETS : DEV_TARGETS,
    },
    null,
    2,
  ),
);
