/**
 * Give the C allocator's free memory back to the system: glibc's `malloc_trim(0)`, once the
 * process has started and then every STEWARD_MALLOC_TRIM_INTERVAL (default 10s; off: never).
 *
 * Most of a Steward process's memory that is neither a V8 heap nor code is glibc's: V8 compiles
 * scripts and WebAssembly (the workflow bundle, Prisma's query compiler) in zones it mallocs and
 * frees, the Temporal core and gRPC buffer in it, and the threads allocate beside each other.
 * glibc keeps the pages of what is freed inside its arenas (it returns only free space at an
 * arena's top, past a threshold it raises itself), so a freed compilation zone under a live
 * allocation stays resident for the life of the process. `malloc_trim(0)` walks every arena and
 * returns the free pages wherever they are. A `steward worker` was 296 MB after start and 204
 * MB after one trim (docs/performance.md's git history, run G).
 *
 * The call goes through koffi (a C FFI with prebuilt binaries): Node itself has no way to call it.
 * Where there is no glibc (musl, macOS) or koffi cannot load, trimming is off and says so once.
 */
import { createRequire } from 'node:module';

export interface MallocTrimLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/** One trim: what it returned (1: memory went back to the system) and how long it held the allocator. */
export interface TrimResult {
  released: boolean;
  ms: number;
}

type TrimFn = (pad: number) => number;

let loaded: { fn?: TrimFn; why?: string } | undefined;

/** glibc's malloc_trim through koffi, or why it is not there (loaded once per process). */
export function mallocTrimFunction(): { fn?: TrimFn; why?: string } {
  if (loaded) return loaded;
  if (process.platform !== 'linux') return (loaded = { why: `no glibc on ${process.platform}` });
  try {
    // koffi is CommonJS with a native part: required, not imported, so a machine without its binary only loses trimming;
    // libc.so.6 is glibc's name (musl's C library has another), so loading it is the check for glibc
    const koffi = createRequire(import.meta.url)('koffi') as { load(lib: string): { func(signature: string): TrimFn } };
    return (loaded = { fn: koffi.load('libc.so.6').func('int malloc_trim(size_t pad)') });
  } catch (err) {
    return (loaded = { why: `no glibc malloc_trim here (koffi loading libc.so.6): ${err instanceof Error ? err.message : String(err)}` });
  }
}

/** Trim now; undefined when trimming is not available here. */
export function trimMalloc(): TrimResult | undefined {
  const { fn } = mallocTrimFunction();
  if (!fn) return undefined;
  const t0 = performance.now();
  const released = fn(0) === 1;
  return { released, ms: performance.now() - t0 };
}

export interface MallocTrimmer {
  /** Trims made so far. */
  readonly trims: number;
  stop(): void;
}

/**
 * Trim after `firstAfterMs` (the start's compilations done) and then every `everyMs`, on timers
 * that do not keep the process alive. `everyMs` 0: never (the returned trimmer does nothing).
 */
export function startMallocTrim(opts: { everyMs: number; firstAfterMs?: number; log: MallocTrimLog }): MallocTrimmer {
  const state = { trims: 0, timer: undefined as NodeJS.Timeout | undefined, stopped: false };
  const trimmer: MallocTrimmer = {
    get trims() {
      return state.trims;
    },
    stop() {
      state.stopped = true;
      if (state.timer) clearTimeout(state.timer);
    },
  };
  if (opts.everyMs <= 0) return trimmer;
  const { fn, why } = mallocTrimFunction();
  if (!fn) {
    opts.log.info({ reason: why }, 'STEWARD_MALLOC_TRIM_INTERVAL: the C allocator is not trimmed here');
    return trimmer;
  }
  const tick = (delay: number) => {
    if (state.stopped) return;
    state.timer = setTimeout(() => {
      const r = trimMalloc();
      state.trims += 1;
      if (r && r.ms > 100) opts.log.warn({ ms: Math.round(r.ms) }, 'malloc_trim held the C allocator for over 100 ms');
      tick(opts.everyMs);
    }, delay);
    state.timer.unref();
  };
  tick(opts.firstAfterMs ?? Math.min(opts.everyMs, 5_000));
  return trimmer;
}
