'use strict';
/**
 * A workflow thread of Steward's workers (workers/workflow-threads.ts starts it): the Temporal
 * SDK's own workflow thread, with one change. The SDK runs every call into a workflow sandbox
 * with `vm` `runInContext(..., { timeout })`, and Node makes a watchdog thread for each such
 * call (about 150 µs a call, dozens of calls a turn). Here the calls run without that per-call
 * watchdog, and say in shared memory when a call starts and ends: the main thread keeps the
 * same deadlock limit over them (superviseWorkflowThread).
 *
 * It also compacts its heap when the main thread asks (platform/idle-memory.ts: once the
 * process has gone quiet), which only this thread can do for its own isolate, and leaves the
 * SDK's promise hook (stack traces of workflow promises) out unless workerData.stewardStackTraces
 * (through workers/sdk-internals.cjs, the one module that touches SDK internals).
 *
 * The shared state (workerData.stewardCalls, an Int32Array over a SharedArrayBuffer):
 *   [0] 1 while a call into a sandbox runs, else 0
 *   [1] how many calls have started (wraps), so the supervisor tells one long call from many
 *   [2] how many compactions the main thread has asked for
 *   [3] how many this thread has made (the main thread waits on it)
 */
const v8 = require('node:v8');
const vm = require('node:vm');
const { workerData } = require('node:worker_threads');

const calls = new Int32Array(workerData.stewardCalls);
const runInContext = vm.Script.prototype.runInContext;
let depth = 0;

vm.Script.prototype.runInContext = function runWithoutWatchdogThread(context, options) {
  if (options === undefined || options === null || options.timeout === undefined) return runInContext.call(this, context, options);
  const { timeout: _limitKeptByTheMainThread, ...rest } = options;
  if (depth++ === 0) {
    Atomics.add(calls, 1, 1);
    Atomics.store(calls, 0, 1);
  }
  try {
    return runInContext.call(this, context, rest);
  } finally {
    if (--depth === 0) Atomics.store(calls, 0, 0);
  }
};

/**
 * V8's gc(), as platform/idle-memory.ts takes it: the thread's own when the process was started
 * with --expose-gc, else with the flag set only while one new context is made, here before the
 * SDK makes the sandbox's, so no workflow sees a `gc`.
 */
let gc = globalThis.gc;
function gcFunction() {
  if (typeof gc === 'function') return gc;
  v8.setFlagsFromString('--expose-gc');
  try {
    gc = vm.runInNewContext('gc');
  } finally {
    v8.setFlagsFromString('--no-expose-gc');
  }
  return typeof gc === 'function' ? gc : undefined;
}
gcFunction();

// from 0, as the main thread starts it: a request made before this line ran is seen at once
let compactionsAsked = 0;
function awaitCompaction() {
  const wait = Atomics.waitAsync(calls, 2, compactionsAsked);
  Promise.resolve(wait.value).then(() => {
    compactionsAsked = Atomics.load(calls, 2);
    try {
      gcFunction()?.({ type: 'major', execution: 'sync', flavor: 'last-resort' });
    } catch {
      // a compaction is worth having, never worth failing the thread's workflows for
    }
    Atomics.add(calls, 3, 1);
    Atomics.notify(calls, 3);
    awaitCompaction();
  });
}
awaitCompaction();

// the SDK's workflow thread, with the promise hook left out unless stack traces are asked for
// (workers/workflow-threads.ts, WorkflowThreadSettings): the SDK internals it takes are all in
// workers/sdk-internals.cjs, which checks them when it loads
require('./sdk-internals.cjs').runSdkWorkflowThread({ stackTraces: workerData.stewardStackTraces === true });
