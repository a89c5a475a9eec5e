/**
 * The phases every turn benchmark runs, in the same order with the same settings, so that
 * Steward (bench/turn-overhead.ts) and the plain-Temporal floor (bench/floor.ts) are measured
 * alike: warm-up, one conversation turn after turn, N conversations at once, a sustained
 * phase, then idle sessions and the process's memory. `turn(chatId)` sends one message and
 * resolves with its latency in milliseconds once the reply exists.
 *
 * Settings (environment): BENCH_SECONDS (sustained phase, 60), BENCH_IDLE_SESSIONS (1000),
 * BENCH_SEQUENTIAL_TURNS (200), BENCH_CONCURRENCY (50), BENCH_CONCURRENT_TURNS (10 per
 * conversation), BENCH_WARMUP_TURNS (20), BENCH_SETTLE_SECONDS (12: how long the process idles
 * after the idle sessions before its memory is read; past Steward's malloc trim interval,
 * STEWARD_MALLOC_TRIM_INTERVAL's 10s, so the figure is an idle process's; the floor idles as long).
 */
import { cpus } from 'node:os';

export interface PhaseSettings {
  seconds: number;
  idleSessions: number;
  sequentialTurns: number;
  concurrency: number;
  concurrentTurns: number;
  warmupTurns: number;
  settleSeconds: number;
}

export function phaseSettings(env: NodeJS.ProcessEnv = process.env): PhaseSettings {
  const n = (name: string, fallback: number) => {
    const v = Number(env[name] ?? fallback);
    if (!Number.isFinite(v) || v < 0) throw new Error(`${name}: expected a number of 0 or more, got ${env[name]}`);
    return v;
  };
  return {
    seconds: n('BENCH_SECONDS', 60),
    idleSessions: n('BENCH_IDLE_SESSIONS', 1000),
    sequentialTurns: Math.max(1, n('BENCH_SEQUENTIAL_TURNS', 200)),
    concurrency: Math.max(1, n('BENCH_CONCURRENCY', 50)),
    concurrentTurns: Math.max(1, n('BENCH_CONCURRENT_TURNS', 10)),
    warmupTurns: n('BENCH_WARMUP_TURNS', 20),
    settleSeconds: n('BENCH_SETTLE_SECONDS', 12),
  };
}

export interface LatencyStats {
  turns: number;
  p50_ms: number;
  p90_ms: number;
  p99_ms: number;
  max_ms: number;
}

export function stats(ms: number[]): LatencyStats {
  const s = [...ms].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? 0;
  return { turns: s.length, p50_ms: +q(0.5).toFixed(1), p90_ms: +q(0.9).toFixed(1), p99_ms: +q(0.99).toFixed(1), max_ms: +(s.at(-1) ?? 0).toFixed(1) };
}

export const mb = (n: number) => +(n / 1024 / 1024).toFixed(1);

export interface PhaseResults {
  node: string;
  cpus: number;
  settings: PhaseSettings;
  latency_1_conversation: LatencyStats;
  latency_n_conversations: LatencyStats & { conversations: number };
  sustained: { seconds: number; conversations: number; turns: number; turns_per_s: number };
  idle_sessions: { sessions: number; process_rss_mb: number; heap_used_mb: number; rss_growth_for_idle_sessions_mb: number };
  /** Latency of the first turn of a session that has been idle while the idle sessions were made (it may have left the cache). */
  wake_after_idle: LatencyStats;
}

/** Run the phases against `turn`; the caller prints the results with its own fields. */
export async function runPhases(turn: (chatId: string) => Promise<number>, s: PhaseSettings = phaseSettings()): Promise<PhaseResults> {
  for (let i = 0; i < s.warmupTurns; i++) await turn('warmup');

  const one: number[] = [];
  for (let i = 0; i < s.sequentialTurns; i++) one.push(await turn('one'));

  const many: number[] = [];
  await Promise.all(
    Array.from({ length: s.concurrency }, async (_, c) => {
      for (let i = 0; i < s.concurrentTurns; i++) many.push(await turn(`conc-${c}`));
    }),
  );

  let sustained = 0;
  const until = performance.now() + s.seconds * 1000;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: s.concurrency }, async (_, c) => {
      while (performance.now() < until) {
        await turn(`sustain-${c}`);
        sustained++;
      }
    }),
  );
  const elapsed = Math.max(0.001, (performance.now() - t0) / 1000);

  const memBefore = process.memoryUsage();
  for (let i = 0; i < s.idleSessions; i += s.concurrency) {
    await Promise.all(Array.from({ length: Math.min(s.concurrency, s.idleSessions - i) }, (_, k) => turn(`idle-${i + k}`)));
  }
  await new Promise((r) => setTimeout(r, s.settleSeconds * 1000));
  (globalThis as { gc?: () => void }).gc?.();
  const memAfter = process.memoryUsage();

  // sessions that went idle before the idle phase: the cache may have evicted them
  const wake: number[] = [];
  for (let c = 0; c < Math.min(s.concurrency, 20); c++) wake.push(await turn(`conc-${c}`));

  return {
    node: process.version,
    cpus: cpus().length,
    settings: s,
    latency_1_conversation: stats(one),
    latency_n_conversations: { ...stats(many), conversations: s.concurrency },
    sustained: { seconds: +elapsed.toFixed(1), conversations: s.concurrency, turns: sustained, turns_per_s: +(sustained / elapsed).toFixed(1) },
    idle_sessions: {
      sessions: s.idleSessions + s.concurrency * 2 + 2,
      process_rss_mb: mb(memAfter.rss),
      heap_used_mb: mb(memAfter.heapUsed),
      rss_growth_for_idle_sessions_mb: mb(memAfter.rss - memBefore.rss),
    },
    wake_after_idle: stats(wake),
  };
}

/** History events and workflow tasks in a list of histories (each as `temporal workflow show -o json` or the client's fetchHistory gives it). */
export function historyCost(histories: Array<{ events?: Array<{ eventType?: unknown } | null> | null }>): { events: number; workflowTasks: number } {
  let events = 0;
  let workflowTasks = 0;
  for (const h of histories) {
    for (const e of h.events ?? []) {
      events++;
      const t = String(e?.eventType ?? '');
      // EventType.WORKFLOW_TASK_COMPLETED is 7 in the proto enum; by name in JSON
      if (t === '7' || t === 'WorkflowTaskCompleted' || t === 'EVENT_TYPE_WORKFLOW_TASK_COMPLETED') workflowTasks++;
    }
  }
  return { events, workflowTasks };
}
