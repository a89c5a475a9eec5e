/**
 * The phases every turn benchmark runs, in the same order with the same settings, so that
 * Steward (bench/turn-overhead.ts) and the plain-Temporal floor (bench/floor.ts) are measured
 * alike: warm-up, one conversation turn after turn, N conversations at once, a sustained
 * phase, then the scale phase: idle sessions, the process's memory, and some of those sessions
 * woken. `turn(chatId)` sends one message and resolves with its latency in milliseconds once
 * the reply exists.
 *
 * Settings (environment): BENCH_SECONDS (sustained phase, 60), BENCH_SEQUENTIAL_TURNS (200),
 * BENCH_CONCURRENCY (50), BENCH_CONCURRENT_TURNS (10 per conversation), BENCH_WARMUP_TURNS (20),
 * and for the scale phase (issue 37: 10,000 idle sessions, then 200 of them woken):
 * - BENCH_IDLE_SESSIONS (10000): sessions made with one turn each, BENCH_IDLE_CONCURRENCY (50) at
 *   a time (lanes that each take the next session as soon as their last one answered);
 * - BENCH_SETTLE_SECONDS (12): how long the process idles after them before its memory is read
 *   (past Steward's malloc trim interval, STEWARD_MALLOC_TRIM_INTERVAL's 10s, so the figure is an
 *   idle process's; the floor idles as long);
 * - BENCH_WAKE_SESSIONS (200): the oldest idle sessions, woken one after the other with one
 *   turn each. With more idle sessions than the workflow cache (BENCH_CACHE, 200) plus the woken
 *   ones, each woken session has left the cache: its first turn replays its history on a worker
 *   that no longer holds it (`wake_after_idle.evicted` says whether that held);
 * - BENCH_WAKE_PAUSE_MS (0): a pause before each woken session's turn. Back to back (0), each
 *   wake starts as the previous turn's last tasks pass the server's transfer queue, whose reads
 *   come at most every 50 ms (docs/performance.md, "Where the one-conversation tail comes from");
 *   with a pause longer than that (300), each wake is an arrival on its own, as chats wake.
 */
import { cpus } from 'node:os';
import type { Client } from '@temporalio/client';
import { threadCpu, threadCpuPerTurn, type ThreadCpu } from './proc-cpu.js';

export interface PhaseSettings {
  seconds: number;
  idleSessions: number;
  sequentialTurns: number;
  concurrency: number;
  concurrentTurns: number;
  warmupTurns: number;
  settleSeconds: number;
  idleConcurrency: number;
  wakeSessions: number;
  wakePauseMs: number;
}

export function phaseSettings(env: NodeJS.ProcessEnv = process.env): PhaseSettings {
  const n = (name: string, fallback: number) => {
    const v = Number(env[name] ?? fallback);
    if (!Number.isFinite(v) || v < 0) throw new Error(`${name}: expected a number of 0 or more, got ${env[name]}`);
    return v;
  };
  return {
    seconds: n('BENCH_SECONDS', 60),
    idleSessions: n('BENCH_IDLE_SESSIONS', 10_000),
    sequentialTurns: Math.max(1, n('BENCH_SEQUENTIAL_TURNS', 200)),
    concurrency: Math.max(1, n('BENCH_CONCURRENCY', 50)),
    concurrentTurns: Math.max(1, n('BENCH_CONCURRENT_TURNS', 10)),
    warmupTurns: n('BENCH_WARMUP_TURNS', 20),
    settleSeconds: n('BENCH_SETTLE_SECONDS', 12),
    idleConcurrency: Math.max(1, n('BENCH_IDLE_CONCURRENCY', 50)),
    wakeSessions: n('BENCH_WAKE_SESSIONS', 200),
    wakePauseMs: n('BENCH_WAKE_PAUSE_MS', 0),
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
  /**
   * `cpu_ms_per_turn`: CPU per turn of the sustained phase by part (bench/proc-cpu.ts: this
   * process's main thread, the SDK core's threads, its other threads, and its child processes,
   * the embedded Temporal server); null where /proc is not there.
   */
  sustained: { seconds: number; conversations: number; turns: number; turns_per_s: number; cpu_ms_per_turn: (ThreadCpu & { process: number }) | null };
  idle_sessions: {
    sessions: number;
    /** How long making the idle sessions took, and how many a second. */
    seconds: number;
    sessions_per_s: number;
    process_rss_mb: number;
    heap_used_mb: number;
    rss_growth_for_idle_sessions_mb: number;
  };
  /**
   * Latency of the first turn of an idle session woken after the others were made (the oldest
   * ones, one at a time); `evicted`: more sessions were made after them than the cache holds.
   */
  wake_after_idle: LatencyStats & { sessions: number; evicted: boolean; first_ms: number; slowest_at: number };
}

/** Run `task(i)` for i in [0, n) on `lanes` lanes, each taking the next index as soon as its last task finished. */
export async function inLanes(n: number, lanes: number, task: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(lanes, n) }, async () => {
      while (next < n) await task(next++);
    }),
  );
}

/** The chat id of the i-th idle session. */
export const idleChat = (i: number) => `idle-${i}`;

/** Run the phases against `turn` on a worker that caches `cache` workflows; the caller prints the results with its own fields. */
export async function runPhases(turn: (chatId: string) => Promise<number>, cache: number, s: PhaseSettings = phaseSettings()): Promise<PhaseResults> {
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
  const cpu0 = threadCpu();
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
  const cpu = threadCpuPerTurn(cpu0, threadCpu(), sustained);

  const memBefore = process.memoryUsage();
  const idleStart = performance.now();
  await inLanes(s.idleSessions, s.idleConcurrency, (i) => turn(idleChat(i)));
  const idleSeconds = Math.max(0.001, (performance.now() - idleStart) / 1000);
  await new Promise((r) => setTimeout(r, s.settleSeconds * 1000));
  (globalThis as { gc?: () => void }).gc?.();
  const memAfter = process.memoryUsage();

  // the oldest idle sessions, one at a time: each has left the cache when more were made after it than it holds
  const woken = Array.from({ length: Math.min(s.wakeSessions, s.idleSessions) }, (_, i) => idleChat(i));
  const wake: number[] = [];
  for (const chat of woken) {
    if (s.wakePauseMs > 0) await new Promise((r) => setTimeout(r, s.wakePauseMs));
    wake.push(await turn(chat));
  }

  return {
    node: process.version,
    cpus: cpus().length,
    settings: s,
    latency_1_conversation: stats(one),
    latency_n_conversations: { ...stats(many), conversations: s.concurrency },
    sustained: { seconds: +elapsed.toFixed(1), conversations: s.concurrency, turns: sustained, turns_per_s: +(sustained / elapsed).toFixed(1), cpu_ms_per_turn: cpu },
    idle_sessions: {
      sessions: s.idleSessions + s.concurrency * 2 + 2,
      seconds: +idleSeconds.toFixed(1),
      sessions_per_s: +(s.idleSessions / idleSeconds).toFixed(1),
      process_rss_mb: mb(memAfter.rss),
      heap_used_mb: mb(memAfter.heapUsed),
      rss_growth_for_idle_sessions_mb: mb(memAfter.rss - memBefore.rss),
    },
    wake_after_idle: {
      ...stats(wake),
      sessions: woken.length,
      evicted: s.idleSessions - woken.length >= cache,
      // the first wake comes after the settle: a cost of the process's idling shows there
      first_ms: +(wake[0] ?? 0).toFixed(1),
      slowest_at: wake.indexOf(Math.max(...wake)),
    },
  };
}

/**
 * What a session cost in Temporal: its runs (by visibility; the current run when none is listed
 * yet) and every child they started, as history events and workflow tasks (historyCost).
 */
export async function sessionCost(client: Client, sessionId: string): Promise<{ events: number; workflowTasks: number; runs: number }> {
  const seen = new Set<string>();
  const histories: Array<{ events?: Array<{ eventType?: unknown } | null> | null }> = [];
  let runs = 0;
  const visit = async (workflowId: string, runId?: string): Promise<void> => {
    const key = `${workflowId}/${runId ?? ''}`;
    if (seen.has(key)) return;
    seen.add(key);
    const h = await client.workflow.getHandle(workflowId, runId).fetchHistory();
    histories.push(h as never);
    for (const e of h.events ?? []) {
      const child = e.startChildWorkflowExecutionInitiatedEventAttributes;
      if (child?.workflowId) await visit(child.workflowId);
    }
  };
  for await (const wf of client.workflow.list({ query: `WorkflowId = "${sessionId}"` })) {
    runs++;
    await visit(wf.workflowId, wf.runId);
  }
  if (runs === 0) {
    runs = 1; // not visible yet: the current run
    await visit(sessionId);
  }
  return { ...historyCost(histories), runs };
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
