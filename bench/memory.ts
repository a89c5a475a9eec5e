/**
 * Where the worker's memory goes per cached idle session. Runs the all-in-one stack
 * (bench/stack.ts, as bench/turn-overhead.ts does) or the plain-Temporal floor (bench/floor.ts's
 * worker) in this process, makes N idle sessions (one turn each, after a warm-up and a first
 * batch), and prints JSON: RSS and its growth over the N sessions, the main thread's V8 heap by
 * space, external and array buffers, native contexts, /proc/self/smaps_rollup, and the
 * workflow threads' heaps (the sandboxes run there, in isolates of their own, which
 * process.memoryUsage() does not count). Not a test.
 *
 *   node --expose-gc --import tsx bench/memory.ts                         (Steward, 1000 sessions)
 *   BENCH_TARGET=floor node --expose-gc --import tsx bench/memory.ts      (the floor)
 *
 * MALLOC_ARENA_MAX is read from the environment the process starts in (scripts/bootstrap.sh
 * exports Steward's value): unset it for the floor to run on glibc's defaults, as bench:compare does.
 *
 * BENCH_IDLE_SESSIONS (1000), BENCH_CONCURRENCY (50 sessions at once), BENCH_CACHE (the
 * workflow cache; else STEWARD_WORKER_MAX_CACHED_WORKFLOWS, else 200), STEWARD_WORKFLOW_BUNDLE
 * (a prebuilt bundle; else Steward bundles from source at start, as `steward start` does).
 * For analysis (such runs' RSS is not comparable with plain ones): BENCH_THREAD_HEAPS=gc (the
 * threads' heaps after a full GC), BENCH_HEAP_SNAPSHOT=/tmp/x (heap snapshots at the end:
 * /tmp/x-main.heapsnapshot, /tmp/x-thread<i>.heapsnapshot), BENCH_SMAPS=/tmp/x (copies of
 * /proc/self/smaps), BENCH_KILL_AFTER=1 (SIGKILL after printing, for a native heap profiler such
 * as heaptrack: what is live then shows as leaked; the embedded Temporal server is left running).
 */
import { readFileSync, writeFileSync, writeSync } from 'node:fs';
import v8 from 'node:v8';
import { applyHeapGrowthSetting } from '../platform/heap-growth.js';
import { applySourceMapSetting } from '../platform/source-maps.js';
import { phaseSettings } from './phases.js';

const TARGET = process.env.BENCH_TARGET ?? 'steward';

// as Steward's entry point does (platform/main.ts): no source maps unless STEWARD_SOURCE_MAPS, set before the rest loads
applySourceMapSetting();
// and for Steward only, as its entry point does: the heap grows at most STEWARD_HEAP_GROWTH_PERCENT
// past its live objects (the floor keeps V8's default, as in bench:compare)
if (TARGET !== 'floor') applyHeapGrowthSetting();
const N = Number(process.env.BENCH_IDLE_SESSIONS ?? 1000);
const BATCH = Number(process.env.BENCH_CONCURRENCY ?? 50);
const mb = (n: number) => +(n / 1024 / 1024).toFixed(1);

// The workflow threads of every worker this process creates (the sandboxes live there, in
// isolates of their own: process.memoryUsage() reports the main thread's heap only): Steward's
// (workers/workflow-threads.ts) and those the SDK's Worker makes (the floor, or per-call).
type ThreadLike = { getHeapStatistics?: () => Promise<v8.HeapInfo>; getHeapSnapshot: () => Promise<NodeJS.ReadableStream> };
const sdkThreads: ThreadLike[] = [];
const { workflowThreads } = await import('../workers/workflow-threads.js');
const allThreads = (): ThreadLike[] => [...sdkThreads, ...workflowThreads()];
{
  const { Worker } = await import('@temporalio/worker');
  const W = Worker as unknown as { createWorkflowCreator: (...a: unknown[]) => Promise<unknown> };
  const original = W.createWorkflowCreator.bind(W);
  W.createWorkflowCreator = async (...a: unknown[]) => {
    const creator = (await original(...a)) as { workerThreadClients?: Array<{ workerThread: ThreadLike }> };
    for (const c of creator.workerThreadClients ?? []) sdkThreads.push(c.workerThread);
    return creator;
  };
}

/**
 * The workflow threads' heaps. With `gc`, after a full GC (taking a heap snapshot forces one; the
 * snapshot is written to a file when a prefix is given); otherwise as they are.
 */
async function threadHeaps(gc: boolean, snapshotPrefix?: string) {
  const out = [];
  for (const [i, t] of allThreads().entries()) {
    if (gc) {
      const stream = await t.getHeapSnapshot();
      if (snapshotPrefix) {
        const { createWriteStream } = await import('node:fs');
        const { pipeline } = await import('node:stream/promises');
        await pipeline(stream, createWriteStream(`${snapshotPrefix}-thread${i}.heapsnapshot`));
      } else {
        for await (const _ of stream) void _;
      }
    }
    const h = await t.getHeapStatistics?.();
    if (h) out.push({ heapTotal: mb(h.total_heap_size), heapUsed: mb(h.used_heap_size), external: mb(h.external_memory), malloced: mb(h.malloced_memory), native_contexts: h.number_of_native_contexts, detached_contexts: h.number_of_detached_contexts });
  }
  return out;
}

/** The process's mappings summed (MB): resident, anonymous (heaps, malloc), file-backed. */
function smaps(): Record<string, number> {
  try {
    const out: Record<string, number> = {};
    for (const line of readFileSync('/proc/self/smaps_rollup', 'utf8').split('\n')) {
      const m = /^(\w+):\s+(\d+) kB/.exec(line);
      if (m && ['Rss', 'Anonymous', 'Private_Dirty', 'Shared_Clean', 'Private_Clean'].includes(m[1]!)) out[m[1]!] = +(Number(m[2]) / 1024).toFixed(1);
    }
    return out;
  } catch {
    return {};
  }
}

/** /proc/self/smaps, kept as is for offline analysis when BENCH_SMAPS names a file prefix. */
function dumpSmaps(label: string): void {
  const prefix = process.env.BENCH_SMAPS;
  if (!prefix) return;
  try {
    writeFileSync(`${prefix}-${label}.smaps`, readFileSync('/proc/self/smaps', 'utf8'));
  } catch {
    // not Linux
  }
}

function threadCount(): number | undefined {
  try {
    return Number(/^Threads:\s+(\d+)/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1]);
  } catch {
    return undefined;
  }
}

/**
 * The process's memory now. The workflow threads' heaps are read after the process's figures, as
 * they are; with BENCH_THREAD_HEAPS=gc (or BENCH_HEAP_SNAPSHOT) after a full GC of each thread,
 * whose heap snapshot allocates a lot and moves RSS: the figures of such a run are not
 * comparable with those of one without.
 */
async function snapshot(label: string, snapshotPrefix?: string) {
  // BENCH_SETTLE_SECONDS, as bench/phases.ts waits (past Steward's malloc trim interval): how long the process idles first
  await new Promise((r) => setTimeout(r, phaseSettings().settleSeconds * 1000));
  const gc = (globalThis as { gc?: () => void }).gc;
  gc?.();
  gc?.();
  const m = process.memoryUsage();
  const h = v8.getHeapStatistics();
  const sm = smaps();
  dumpSmaps(label);
  const threads = threadCount();
  const threadGc = process.env.BENCH_THREAD_HEAPS === 'gc' || !!snapshotPrefix;
  const workflowThreads = await threadHeaps(threadGc, snapshotPrefix);
  // what a full GC of the workflow threads gives back
  if (threadGc) await new Promise((r) => setTimeout(r, 2000));
  const rssAfterThreadGc = threadGc ? mb(process.memoryUsage().rss) : undefined;
  const spaces = Object.fromEntries(v8.getHeapSpaceStatistics().map((s) => [s.space_name, { size: mb(s.space_size), used: mb(s.space_used_size) }]));
  return {
    rss: mb(m.rss),
    heapTotal: mb(m.heapTotal),
    heapUsed: mb(m.heapUsed),
    external: mb(m.external),
    arrayBuffers: mb(m.arrayBuffers),
    native_contexts: h.number_of_native_contexts,
    detached_contexts: h.number_of_detached_contexts,
    malloced: mb(h.malloced_memory),
    peak_malloced: mb(h.peak_malloced_memory),
    smaps: sm,
    threads,
    workflow_threads: workflowThreads,
    ...(rssAfterThreadGc !== undefined ? { rss_after_thread_gc: rssAfterThreadGc } : {}),
    spaces,
  };
}

function diff(a: Awaited<ReturnType<typeof snapshot>>, b: Awaited<ReturnType<typeof snapshot>>) {
  const d = (x: number, y: number) => +(y - x).toFixed(1);
  return {
    rss: d(a.rss, b.rss),
    heapTotal: d(a.heapTotal, b.heapTotal),
    heapUsed: d(a.heapUsed, b.heapUsed),
    external: d(a.external, b.external),
    arrayBuffers: d(a.arrayBuffers, b.arrayBuffers),
    malloced: d(a.malloced, b.malloced),
    native_contexts: b.native_contexts - a.native_contexts,
    workflow_threads_heapTotal: d(a.workflow_threads.reduce((n, t) => n + t.heapTotal, 0), b.workflow_threads.reduce((n, t) => n + t.heapTotal, 0)),
    workflow_threads_heapUsed: d(a.workflow_threads.reduce((n, t) => n + t.heapUsed, 0), b.workflow_threads.reduce((n, t) => n + t.heapUsed, 0)),
    spaces_used: Object.fromEntries(Object.keys(b.spaces).map((k) => [k, d(a.spaces[k]?.used ?? 0, b.spaces[k]!.used)])),
    spaces_size: Object.fromEntries(Object.keys(b.spaces).map((k) => [k, d(a.spaces[k]?.size ?? 0, b.spaces[k]!.size)])),
  };
}

let turn: (chatId: string) => Promise<unknown>;
let stop: () => Promise<void>;
let cache: number;

if (TARGET === 'floor') {
  const { startFloorStack } = await import('./floor/stack.js');
  const floor = await startFloorStack('steward-mem-');
  cache = floor.cache;
  turn = (chatId) => floor.turn(chatId);
  stop = () => floor.stop();
} else {
  const { startBenchStack } = await import('./stack.js');
  // STEWARD_WORKFLOW_BUNDLE: a prebuilt bundle (else bundled from source at start, as `steward start` does)
  const stack = await startBenchStack(process.env.STEWARD_WORKFLOW_BUNDLE ? { STEWARD_WORKFLOW_BUNDLE: process.env.STEWARD_WORKFLOW_BUNDLE } : {});
  cache = stack.cache;
  turn = (chatId) => stack.turn(chatId);
  stop = () => stack.stop();
}

try {
  const started = await snapshot('started');
  for (let i = 0; i < 20; i++) await turn('warmup');
  // the cache's steady state for the warm-up's workflow kinds: a first batch of sessions
  await Promise.all(Array.from({ length: BATCH }, (_, k) => turn(`pre-${k}`)));
  const before = await snapshot('before');
  const t0 = performance.now();
  for (let i = 0; i < N; i += BATCH) {
    await Promise.all(Array.from({ length: Math.min(BATCH, N - i) }, (_, k) => turn(`idle-${i + k}`)));
  }
  const seconds = (performance.now() - t0) / 1000;
  const after = await snapshot('after', process.env.BENCH_HEAP_SNAPSHOT);
  if (process.env.BENCH_HEAP_SNAPSHOT) v8.writeHeapSnapshot(`${process.env.BENCH_HEAP_SNAPSHOT}-main.heapsnapshot`);
  const growth = diff(before, after);
  // written at once (not console.log): BENCH_KILL_AFTER ends the process right after
  writeSync(
    1,
    JSON.stringify(
      {
        bench: 'memory',
        target: TARGET,
        cache,
        idle_sessions: N,
        seconds: +seconds.toFixed(1),
        rss_mb: after.rss,
        rss_growth_mb: growth.rss,
        rss_growth_per_cached_workflow_mb: +(growth.rss / Math.min(cache, N)).toFixed(2),
        started,
        before,
        after,
        growth,
      },
      null,
      2,
    ) + '\n',
  );
  // BENCH_KILL_AFTER: end at once, so a native heap profiler (heaptrack) sees what is live now as leaked
  if (process.env.BENCH_KILL_AFTER) process.kill(process.pid, 'SIGKILL');
} finally {
  await stop();
}
