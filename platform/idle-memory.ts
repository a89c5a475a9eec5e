/**
 * Give memory back once a process goes quiet: STEWARD_IDLE_MEMORY_RELEASE (default 5s; off: never).
 *
 * Under load a turn's objects live across its awaits, survive the young generation's
 * collections and end up in the old generation, spread over many pages. V8's full collection
 * frees them but moves only the emptiest pages' survivors, so the pages where a few objects
 * still live stay committed: after bench/memory.ts's 1,000 idle sessions the all-in-one
 * process's main heap held 91 MB of pages for 80 MB of objects, and RSS stayed there. V8's
 * memory reducer, which would compact them, waits for a low allocation rate that a Steward
 * process's timers and pollers never let it see (`--trace-memory-reducer`: "high alloc" at every
 * check while the process idled). A collection that compacts every fragmented page (V8's
 * last-resort flavour of `gc()`) took that process from 339 to 281 MB in 100 ms.
 *
 * So once the main thread's event loop has been nearly idle for the quiet period, and the
 * process's RSS has grown by at least `minGrowthMb` since the last release, Steward compacts the
 * main thread's heap, asks each workflow thread to compact its own (workers/workflow-threads.ts),
 * then trims the C allocator (platform/malloc-trim.ts), which gets what the collections freed.
 * The collection holds the thread it runs on for 10-100 ms, which is why it waits for quiet.
 */
import { performance, type EventLoopUtilization } from 'node:perf_hooks';
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';

/** V8's `gc()` (what `--expose-gc` gives a script), with the options this module uses. */
export type GcFunction = (options: { type: 'major'; execution: 'sync'; flavor: 'last-resort' }) => void;

let gcFunction: GcFunction | undefined;

/**
 * V8's `gc()`: the global one when Node was started with --expose-gc, else taken without it:
 * the flag is set for as long as one new context takes to be made and unset again, so no other
 * context (a workflow sandbox, the process's global) gets a `gc` it did not have.
 */
export function v8Gc(): GcFunction {
  if (gcFunction) return gcFunction;
  const global = (globalThis as { gc?: unknown }).gc;
  if (typeof global === 'function') return (gcFunction = global as GcFunction);
  v8.setFlagsFromString('--expose-gc');
  try {
    gcFunction = runInNewContext('gc') as GcFunction;
  } finally {
    v8.setFlagsFromString('--no-expose-gc');
  }
  return gcFunction;
}

/** Compact this thread's heap: every fragmented page's survivors moved, the emptied pages given back. How long it took (ms). */
export function compactHeap(): number {
  const t0 = performance.now();
  v8Gc()({ type: 'major', execution: 'sync', flavor: 'last-resort' });
  return performance.now() - t0;
}

export interface IdleReleaseLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

export interface IdleRelease {
  rssBeforeMb: number;
  rssAfterMb: number;
  /** How long the main thread's compaction held it. */
  mainMs: number;
  /** Workflow threads that compacted their heaps. */
  threads: number;
}

export interface IdleReleaseOptions {
  /** How long the main thread's event loop must have been nearly idle; 0: never release. */
  quietMs: number;
  log: IdleReleaseLog;
  /** Compact the workflow threads' heaps; resolves with how many did. */
  threads?: () => Promise<number>;
  /** Trim the C allocator after the collections (platform/malloc-trim.ts's trimMalloc). */
  trim?: () => void;
  /** RSS growth since the last release below which there is nothing worth the pause (MB; default 16). */
  minGrowthMb?: number;
  /** Event loop utilization over one check above which the loop is busy (default 0.05). */
  busyUtilization?: number;
  /** How often the loop's utilization is read (ms; default 1000). */
  checkEveryMs?: number;
  /** Told of each release (for tests). */
  onRelease?: (r: IdleRelease) => void;
}

export interface IdleMemoryRelease {
  /** Releases made so far. */
  readonly releases: number;
  stop(): void;
}

const mb = (bytes: number) => Math.round((bytes / 1048576) * 10) / 10;

/** Watch the main thread's event loop on a timer that does not keep the process alive, and release memory after each quiet period that follows growth. */
export function startIdleMemoryRelease(opts: IdleReleaseOptions): IdleMemoryRelease {
  const state = { releases: 0, stopped: false, running: false, timer: undefined as NodeJS.Timeout | undefined };
  const handle: IdleMemoryRelease = {
    get releases() {
      return state.releases;
    },
    stop() {
      state.stopped = true;
      if (state.timer) clearInterval(state.timer);
    },
  };
  if (opts.quietMs <= 0) return handle;
  const minGrowth = (opts.minGrowthMb ?? 16) * 1024 * 1024;
  const busy = opts.busyUtilization ?? 0.05;
  let last: EventLoopUtilization = performance.eventLoopUtilization();
  let quietSince = performance.now();
  let baseline = 0; // the RSS the last release left (0: none yet, so the start's own garbage goes too)

  const release = async () => {
    state.running = true;
    try {
      const before = process.memoryUsage.rss();
      const mainMs = compactHeap();
      const threads = opts.threads ? await opts.threads() : 0;
      opts.trim?.();
      const after = process.memoryUsage.rss();
      baseline = after;
      state.releases += 1;
      const r: IdleRelease = { rssBeforeMb: mb(before), rssAfterMb: mb(after), mainMs: Math.round(mainMs), threads };
      opts.log.info({ ...r }, 'idle: memory given back');
      opts.onRelease?.(r);
    } catch (err) {
      opts.log.warn({ err: err instanceof Error ? err.message : String(err) }, 'idle: memory release failed');
      baseline = process.memoryUsage.rss();
    } finally {
      state.running = false;
      // what the release itself did is not load
      last = performance.eventLoopUtilization();
    }
  };

  state.timer = setInterval(() => {
    if (state.stopped || state.running) return;
    const now = performance.now();
    const current = performance.eventLoopUtilization();
    const elu = performance.eventLoopUtilization(current, last);
    last = current;
    if (elu.utilization > busy) {
      quietSince = now;
      return;
    }
    if (now - quietSince < opts.quietMs) return;
    if (process.memoryUsage.rss() < baseline + minGrowth) return;
    void release();
  }, opts.checkEveryMs ?? 1000);
  state.timer.unref();
  return handle;
}
