'use strict';
/**
 * The one module of Steward that reaches the Temporal SDK's internals (its `lib/` modules and
 * the worker's protected `createWorkflowCreator`): what Steward's workflow threads need
 * (workers/workflow-threads.ts, workers/workflow-thread.cjs; why they exist, their measured
 * worth and how to remove them: docs/performance.md, "Steward's workflow threads"). Nothing else
 * may import an SDK `lib/` module (eslint.config.js SDK_INTERNALS_MODULE,
 * test/unit/sdk-surface.test.ts).
 *
 * When this module loads (in the main thread) it checks every internal it relies on: present, and of the shape it
 * uses (classes and their methods, functions and the number of their parameters, the workflow
 * thread's init message, the thread's entry module). Anything moved or changed throws an error
 * that names each difference and the SDK version, so an SDK upgrade that moves them fails the
 * first worker start and test/unit/sdk-internals.test.ts, never silently. The version it was
 * written against is EXPECTED_SDK_VERSION; a different version that passes every check runs.
 */
const SDK_PACKAGE = '@temporalio/worker';
/** The SDK version these internals were read from (test/unit/sdk-internals.test.ts says when it changes). */
const EXPECTED_SDK_VERSION = '1.24.0';
const SDK_VERSION = require(`${SDK_PACKAGE}/package.json`).version;

/** Every internal used, where it lives and the shape relied on. */
const INTERNALS = [
  {
    module: `${SDK_PACKAGE}/lib/workflow/threaded-vm.js`,
    checks: [
      { name: 'WorkerThreadClient', kind: 'class', arity: 3, methods: { send: 1, destroy: 0 } },
      { name: 'ThreadedVMWorkflowCreator', kind: 'class', arity: 1, methods: { createWorkflow: 1, destroy: 0 } },
      // the init message every workflow thread is sent, as the SDK's own create sends it
      {
        name: 'ThreadedVMWorkflowCreator.create',
        kind: 'source',
        includes: ["type: 'init'", 'workflowBundle', 'isolateExecutionTimeoutMs', 'reuseV8Context', 'registeredActivityNames', 'hasPatchActivationCallback', "require.resolve('./workflow-worker-thread')"],
      },
    ],
  },
  {
    module: `${SDK_PACKAGE}/lib/workflow/vm-shared.js`,
    checks: [{ name: 'globalHandlers.setPromiseHook', kind: 'function', arity: 0 }],
  },
  {
    module: `${SDK_PACKAGE}/lib/workflow/workflow-worker-thread.js`,
    // the thread's entry: only resolved here (requiring it starts a workflow thread)
    checks: [{ name: '', kind: 'resolvable' }],
  },
  {
    module: SDK_PACKAGE,
    checks: [
      { name: 'Worker.createWorkflowCreator', kind: 'function', arity: 3 },
      { name: 'Worker.createWorkflowCreator', kind: 'source', includes: ['debugMode', 'workflowThreadPoolSize', 'isolateExecutionTimeoutMs', 'reuseV8Context', 'patchActivationCallback'] },
    ],
  },
];

function lookup(root, name) {
  return name.split('.').reduce((v, k) => (v == null ? undefined : v[k]), root);
}

/**
 * The differences between the SDK as loaded (`load(module)` returns a module's exports; `resolve`
 * whether a module exists) and what this module relies on: one line each, empty when none.
 */
function findSdkInternalsProblems(load = require, resolve = require.resolve) {
  const problems = [];
  for (const { module, checks } of INTERNALS) {
    if (checks.some((c) => c.kind === 'resolvable')) {
      try {
        resolve(module);
      } catch {
        problems.push(`${module}: not found`);
      }
      continue;
    }
    let exports;
    try {
      exports = load(module);
    } catch (err) {
      problems.push(`${module}: cannot be loaded (${err && err.message ? String(err.message).split('\n')[0] : String(err)})`);
      continue;
    }
    for (const check of checks) {
      const where = `${module} ${check.name}`;
      const value = lookup(exports, check.name);
      if (typeof value !== 'function') {
        problems.push(`${where}: missing (expected a ${check.kind === 'class' ? 'class' : 'function'}, found ${value === undefined ? 'nothing' : typeof value})`);
        continue;
      }
      if (check.arity !== undefined && value.length !== check.arity) problems.push(`${where}: takes ${value.length} parameters, expected ${check.arity}`);
      if (check.kind === 'class') {
        for (const [method, arity] of Object.entries(check.methods)) {
          const m = value.prototype && value.prototype[method];
          if (typeof m !== 'function') problems.push(`${where}.prototype.${method}: missing`);
          else if (m.length !== arity) problems.push(`${where}.prototype.${method}: takes ${m.length} parameters, expected ${arity}`);
        }
      }
      if (check.kind === 'source') {
        const source = Function.prototype.toString.call(value);
        for (const text of check.includes) if (!source.includes(text)) problems.push(`${where}: no longer has ${JSON.stringify(text)}`);
      }
    }
  }
  return problems;
}

/** Throws, naming every difference and the SDK version, when the SDK's internals are not what Steward's workflow threads rely on. */
function assertSdkInternals(problems = findSdkInternalsProblems()) {
  if (problems.length === 0) return;
  throw new Error(
    `Steward's workflow threads (workers/sdk-internals.cjs) rely on Temporal SDK internals that changed in ${SDK_PACKAGE} ${SDK_VERSION} ` +
      `(written against ${EXPECTED_SDK_VERSION}):\n- ${problems.join('\n- ')}\n` +
      'Adapt workers/sdk-internals.cjs to the new SDK, or remove Steward\'s workflow threads (docs/performance.md says how); ' +
      'STEWARD_WORKFLOW_WATCHDOG=per-call runs the SDK\'s own threads meanwhile.',
  );
}

// checked in the main thread, which loads this module before it starts any workflow thread (a
// workflow thread takes only its own part, runSdkWorkflowThread, and loads nothing more)
if (require('node:worker_threads').isMainThread) assertSdkInternals();

/**
 * The SDK's workflow creator over workflow threads Steward started (node:worker_threads Workers
 * running workers/workflow-thread.cjs): each wrapped in the SDK's thread client, sent the SDK's
 * init message, then pooled as the SDK pools its own.
 */
async function createThreadedWorkflowCreator(threads, bundle, options, logger) {
  const threadedVm = require(`${SDK_PACKAGE}/lib/workflow/threaded-vm.js`);
  const clients = threads.map((thread) => new threadedVm.WorkerThreadClient(thread, logger, options.patchActivationCallback));
  const init = {
    type: 'init',
    workflowBundle: bundle,
    isolateExecutionTimeoutMs: options.isolateExecutionTimeoutMs,
    reuseV8Context: options.reuseV8Context ?? true,
    registeredActivityNames: new Set(options.activities.keys()),
    hasPatchActivationCallback: options.patchActivationCallback !== undefined,
  };
  await Promise.all(clients.map((client) => client.send(init)));
  return new threadedVm.ThreadedVMWorkflowCreator(clients);
}

/**
 * In a workflow thread (workers/workflow-thread.cjs), after its own changes: leave out the SDK's
 * promise hook unless stack traces are asked for, then run the SDK's workflow thread.
 */
function runSdkWorkflowThread({ stackTraces }) {
  if (stackTraces !== true) {
    require(`${SDK_PACKAGE}/lib/workflow/vm-shared.js`).globalHandlers.setPromiseHook = function withoutPromiseHook() {};
  }
  require(`${SDK_PACKAGE}/lib/workflow/workflow-worker-thread.js`);
}

module.exports = {
  SDK_VERSION,
  EXPECTED_SDK_VERSION,
  INTERNALS,
  findSdkInternalsProblems,
  assertSdkInternals,
  createThreadedWorkflowCreator,
  runSdkWorkflowThread,
};
