'use strict';
/**
 * A workflow thread of Steward's workers (workers/workflow-threads.ts starts it): the Temporal
 * SDK's own workflow thread, with one change. The SDK runs every call into a workflow sandbox
 * with `vm` `runInContext(..., { timeout })`, and Node makes a watchdog thread for each such
 * call (about 150 µs a call, dozens of calls a turn). Here the calls run without that per-call
 * watchdog, and say in shared memory when a call starts and ends: the main thread keeps the
 * same deadlock limit over them (superviseWorkflowThread).
 *
 * The shared state (workerData.stewardCalls, an Int32Array over a SharedArrayBuffer):
 *   [0] 1 while a call into a sandbox runs, else 0
 *   [1] how many calls have started (wraps), so the supervisor tells one long call from many
 */
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

require('@temporalio/worker/lib/workflow/workflow-worker-thread.js');
