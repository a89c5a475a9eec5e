/**
 * Steward's workflow threads: the SDK's own (threaded, reused V8 context), started from
 * workers/workflow-thread.cjs so that a call into a workflow sandbox does not make a thread of
 * its own. The SDK passes its deadlock limit (`isolateExecutionTimeout`, 5 s) to every
 * `vm.runInContext`, and Node enforces such a timeout with a watchdog thread created and
 * joined per call: about 150 µs of CPU a call on this machine kind, and a turn makes dozens of
 * calls. Here the thread reports each call in shared memory and the main thread keeps the
 * limit over all of them with one timer per thread: a call still running after the limit is a
 * workflow stuck in a synchronous loop (or an activation far too heavy), and its thread is
 * stopped with an error that names it. The SDK fails the workers on that thread (their pending
 * activations are rejected), so their tasks go to the other workers; where the SDK's watchdog
 * would instead fail only that workflow task and keep the thread. Steward's workflows are its own
 * code, so this is a bug guard, not a sandbox limit for user code.
 *
 * STEWARD_WORKFLOW_WATCHDOG=per-call keeps the SDK's per-call watchdog (createStewardWorker then
 * uses the SDK's Worker); the SDK's debug mode does too.
 *
 * The SDK has no public way to start its workflow threads from a script of one's own: what this
 * takes from its internals is all in workers/sdk-internals.cjs, which checks it when it loads
 * (why the threads stay, what they measured and how to remove them: docs/performance.md).
 */
import { createHash } from 'node:crypto';
import { Worker as NodeThread } from 'node:worker_threads';
import { fileURLToPath } from 'node:url';
import type { Logger } from '@temporalio/common';
import { Worker } from '@temporalio/worker';
// every SDK internal these threads rely on, checked when it loads (docs/performance.md)
import {
  createThreadedWorkflowCreator,
  type SdkCompiledWorkerOptions as CompiledWorkerOptions,
  type SdkWorkflowBundle as WorkflowBundleWithSourceMapAndFilename,
  type SdkWorkflowCreator as WorkflowCreator,
} from './sdk-internals.cjs';

const THREAD_SCRIPT = fileURLToPath(new URL('./workflow-thread.cjs', import.meta.url));
/**
 * The young generation of a workflow thread's heap, in MB (V8's default lets it grow to 48
 * under load, and it stays at that size while the thread idles). Activations allocate briefly
 * and a 12 MB young generation collects them as well: with it, the all-in-one process held
 * 347-351 MB after 1,000 idle sessions against 373-385 MB (the thread's heap 50-51 against
 * 75-77 MB), at the same turns per second (96-104 against 97-105; bench/memory.ts and
 * bench/turn-overhead.ts with BENCH_SECONDS=30, 2 alternating rounds each).
 */
export const WORKFLOW_THREAD_YOUNG_GENERATION_MB = 12;

/** How often the main thread looks at each workflow thread's running call. */
export const SUPERVISE_EVERY_MS = 250;

/** STEWARD_WORKFLOW_WATCHDOG (config/index.ts): `thread` or `per-call`. */
export type WorkflowWatchdog = 'thread' | 'per-call';

/**
 * How Steward's workflow threads run their sandboxes.
 *
 * stackTraces (STEWARD_WORKFLOW_STACK_TRACES, off by default): the SDK's promise hook, which
 * records where every promise a workflow makes was made, so that the `__stack_trace` query (the
 * Temporal UI's Stack Trace tab) can show where a running workflow waits. It formats a stack
 * trace for every promise, through the bundle's source map: under chat load about 30% of the
 * workflow thread's busy samples (a CPU profile of bench/turn-overhead.ts's phases), and without
 * it sustained turns/s rose 7.6% (95.0 against 88.3, medians of 3 alternating rounds with
 * BENCH_SECONDS=30). Off, the query answers that stack traces are not enabled on this worker;
 * the run's history, pending activities and search attributes are in the UI as before.
 */
export interface WorkflowThreadSettings {
  stackTraces: boolean;
}

const DEFAULT_WORKFLOW_THREAD_SETTINGS: Readonly<WorkflowThreadSettings> = Object.freeze({ stackTraces: false });

/** The workflow threads Steward's workers have started in this process and that still run, with their shared state (workflow-thread.cjs). */
const live = new Map<NodeThread, Int32Array>();
export function workflowThreads(): NodeThread[] {
  return [...live.keys()];
}

/** The shared state of a new workflow thread: see workflow-thread.cjs. */
export function workflowThreadState(): Int32Array {
  return new Int32Array(new SharedArrayBuffer(4 * Int32Array.BYTES_PER_ELEMENT));
}

/**
 * Ask a workflow thread to compact its heap (platform/idle-memory.ts) and wait up to `timeoutMs`
 * for it to say it has; whether it did. The thread does it between activations.
 */
export async function compactWorkflowThread(state: Int32Array, timeoutMs = 5_000): Promise<boolean> {
  const done = Atomics.load(state, 3);
  Atomics.add(state, 2, 1);
  Atomics.notify(state, 2);
  const wait = Atomics.waitAsync(state, 3, done, timeoutMs);
  await wait.value;
  return Atomics.load(state, 3) !== done;
}

/** Compact every live workflow thread's heap, one after the other; how many did. */
export async function compactWorkflowThreads(timeoutMs?: number): Promise<number> {
  let compacted = 0;
  for (const state of [...live.values()]) if (await compactWorkflowThread(state, timeoutMs)) compacted++;
  return compacted;
}

export interface StuckCall {
  thread: number;
  limitMs: number;
  ranMs: number;
}

/**
 * Watch one workflow thread's calls (`calls`: [running, started] as workflow-thread.cjs writes
 * them): when one call has run for `limitMs`, log an error and stop the thread. The timer does not
 * keep the process alive and ends with the thread.
 */
export function superviseWorkflowThread(
  thread: NodeThread,
  calls: Int32Array,
  opts: { limitMs: number; logger: Logger; index: number; onStuck?: (s: StuckCall) => void; everyMs?: number },
): void {
  let watched = -1;
  let since = 0;
  const timer = setInterval(() => {
    if (Atomics.load(calls, 0) === 0) {
      watched = -1;
      return;
    }
    const started = Atomics.load(calls, 1);
    const now = performance.now();
    if (started !== watched) {
      watched = started;
      since = now;
      return;
    }
    const ranMs = Math.round(now - since);
    if (ranMs < opts.limitMs) return;
    clearInterval(timer);
    const stuck = { thread: opts.index, limitMs: opts.limitMs, ranMs };
    opts.logger.error(
      `Workflow thread ${opts.index} has run one workflow activation for ${ranMs} ms, past the ${opts.limitMs} ms limit ` +
        '(a workflow in a synchronous loop, or an activation far too heavy): stopping the thread; the workers on it fail and their tasks go to other workers',
      { ...stuck },
    );
    opts.onStuck?.(stuck);
    void thread.terminate();
  }, opts.everyMs ?? SUPERVISE_EVERY_MS);
  timer.unref();
  thread.once('exit', () => clearInterval(timer));
}

/**
 * Start `count` supervised workflow threads and initialise them as the SDK does. The bundle is
 * sent from initThreads, which no closure of this function reaches: a closure here lives as
 * long as its thread (the `exit` listener), and with the bundle in their shared scope the main
 * thread kept the bundle's code (7 MB) for the life of the process.
 */
async function createSupervisedCreator(bundle: WorkflowBundleWithSourceMapAndFilename, options: CompiledWorkerOptions, logger: Logger, settings: WorkflowThreadSettings): Promise<WorkflowCreator> {
  const count = options.workflowThreadPoolSize;
  const threads = Array.from({ length: count }, (_, index) => {
    const calls = workflowThreadState();
    const thread = new NodeThread(THREAD_SCRIPT, {
      workerData: { stewardCalls: calls.buffer, stewardStackTraces: settings.stackTraces },
      resourceLimits: { maxYoungGenerationSizeMb: WORKFLOW_THREAD_YOUNG_GENERATION_MB },
    });
    live.set(thread, calls);
    thread.once('exit', () => live.delete(thread));
    superviseWorkflowThread(thread, calls, { limitMs: options.isolateExecutionTimeoutMs, logger, index });
    return thread;
  });
  return initThreads(threads, bundle, options, logger);
}

/** The SDK's thread clients over the threads, sent its init message (workers/sdk-internals.cjs). */
function initThreads(threads: NodeThread[], bundle: WorkflowBundleWithSourceMapAndFilename, options: CompiledWorkerOptions, logger: Logger): Promise<WorkflowCreator> {
  return createThreadedWorkflowCreator(threads, bundle, options, logger);
}

/**
 * Workers of one process that run the same bundle with the same settings share its workflow
 * threads (the all-in-one process runs the interactive and the background queue's workflows
 * from one bundle): one isolate, one copy of the bundle's modules, one thread. Runs are keyed
 * by run id in the thread, so the workers' runs never meet; the threads end with the last worker.
 */
interface SharedThreads {
  creator: Promise<WorkflowCreator>;
  users: number;
}
const shared = new Map<string, SharedThreads>();

function sharingKey(bundle: WorkflowBundleWithSourceMapAndFilename, options: CompiledWorkerOptions, settings: WorkflowThreadSettings): string {
  return JSON.stringify([
    settings.stackTraces,
    bundle.filename,
    options.workflowThreadPoolSize,
    options.isolateExecutionTimeoutMs,
    options.reuseV8Context ?? true,
    [...options.activities.keys()].sort(),
    options.patchActivationCallback !== undefined,
  ]);
}

async function sharedCreator(bundle: WorkflowBundleWithSourceMapAndFilename, options: CompiledWorkerOptions, logger: Logger, settings: WorkflowThreadSettings): Promise<WorkflowCreator> {
  // the same code: its digest, taken once per worker start (the code itself is megabytes)
  const key = `${sharingKey(bundle, options, settings)} ${createHash('sha256').update(bundle.code).digest('hex')}`;
  let entry = shared.get(key);
  if (!entry) {
    entry = { creator: createSupervisedCreator(bundle, options, logger, settings), users: 0 };
    shared.set(key, entry);
    entry.creator.catch(() => shared.delete(key));
  }
  entry.users++;
  const threads = await entry.creator;
  const held = entry;
  let destroyed = false;
  return {
    createWorkflow: (createOptions) => threads.createWorkflow(createOptions),
    async destroy() {
      if (destroyed) return;
      destroyed = true;
      if (--held.users > 0) return;
      if (shared.get(key) === held) shared.delete(key);
      await threads.destroy();
    },
  };
}

/** The SDK's Worker with Steward's workflow threads (see the module's comment), shared by the workers of a process that can share them. */
export class StewardWorker extends Worker {
  /** The settings of the workflow threads this class's workers run on (stewardWorkerClass makes a class with others). */
  static readonly threadSettings: Readonly<WorkflowThreadSettings> = DEFAULT_WORKFLOW_THREAD_SETTINGS;

  /** The SDK's hook for its workflow creator (protected; its shape is checked by workers/sdk-internals.cjs). */
  protected static override async createWorkflowCreator(...args: Parameters<typeof Worker.createWorkflowCreator>): ReturnType<typeof Worker.createWorkflowCreator> {
    const [bundle, options, logger] = args;
    if (options.debugMode) return super.createWorkflowCreator(bundle, options, logger);
    // the SDK's own creator (sdk-internals.cjs builds it from the SDK's classes), typed there by the shape Steward uses
    return (await sharedCreator(bundle, options, logger, this.threadSettings)) as unknown as Awaited<ReturnType<typeof Worker.createWorkflowCreator>>;
  }
}

/** StewardWorker with these workflow thread settings. */
export function stewardWorkerClass(settings: WorkflowThreadSettings): typeof StewardWorker {
  const fixed = Object.freeze({ ...settings });
  return class extends StewardWorker {
    static override readonly threadSettings = fixed;
  };
}
