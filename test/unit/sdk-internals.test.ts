/**
 * workers/sdk-internals.cjs, the one module that reaches the Temporal SDK's internals (for
 * Steward's workflow threads): against the installed SDK every internal it relies on is there
 * with the shape it uses; an SDK upgrade fails here, loudly, naming what moved or changed and
 * the SDK version, before a worker starts on it.
 */
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { describe, it } from 'node:test';
import { assertSdkInternals, EXPECTED_SDK_VERSION, findSdkInternalsProblems, INTERNALS, SDK_VERSION } from '../../workers/sdk-internals.cjs';

const require = createRequire(import.meta.url);

describe('the SDK internals of the workflow threads (workers/sdk-internals.cjs)', () => {
  it('finds every internal it relies on in the installed SDK, with the shape it uses', () => {
    assert.deepEqual(findSdkInternalsProblems(), []);
    assert.doesNotThrow(() => assertSdkInternals());
    assert.ok(INTERNALS.length >= 4, 'the internals are listed');
  });

  it('was written against the installed SDK version (an upgrade: re-read the internals, then update EXPECTED_SDK_VERSION)', () => {
    const installed = (require('@temporalio/worker/package.json') as { version: string }).version;
    assert.equal(SDK_VERSION, installed);
    assert.equal(
      installed,
      EXPECTED_SDK_VERSION,
      `the Temporal SDK is ${installed}, workers/sdk-internals.cjs was written against ${EXPECTED_SDK_VERSION}: check what it takes from the SDK (docs/performance.md, "Steward's workflow threads") and update EXPECTED_SDK_VERSION`,
    );
  });

  it('names each internal that moved or changed, and the SDK version', () => {
    const moved = (module: string): unknown => {
      const real = require(module) as Record<string, unknown>;
      if (module.endsWith('/threaded-vm.js')) {
        // WorkerThreadClient gone, the creator's pool constructor given a second parameter
        const creator = real.ThreadedVMWorkflowCreator as { prototype: object; create: unknown };
        const changed = Object.assign(function ThreadedVMWorkflowCreator(_clients: unknown, _more: unknown) {}, { create: creator.create });
        changed.prototype = creator.prototype;
        return { ThreadedVMWorkflowCreator: changed };
      }
      if (module.endsWith('/vm-shared.js')) return { globalHandlers: {} };
      if (module === '@temporalio/worker') return { Worker: { createWorkflowCreator: (a: unknown) => a } };
      return real;
    };
    const resolve = (module: string): string => {
      if (module.endsWith('/workflow-worker-thread.js')) throw new Error('Cannot find module');
      return require.resolve(module);
    };
    const problems = findSdkInternalsProblems(moved, resolve);
    const text = problems.join('\n');
    assert.match(text, /threaded-vm\.js WorkerThreadClient: missing/);
    assert.match(text, /threaded-vm\.js ThreadedVMWorkflowCreator: takes 2 parameters, expected 1/);
    assert.match(text, /vm-shared\.js globalHandlers\.setPromiseHook: missing/);
    assert.match(text, /workflow-worker-thread\.js: not found/);
    assert.match(text, /@temporalio\/worker Worker\.createWorkflowCreator: takes 1 parameters, expected 3/);
    assert.match(text, /Worker\.createWorkflowCreator: no longer has "workflowThreadPoolSize"/);
    assert.throws(
      () => assertSdkInternals(problems),
      (err: Error) => {
        assert.match(err.message, new RegExp(`changed in @temporalio/worker ${SDK_VERSION.replace(/\./g, '\\.')}`));
        assert.match(err.message, /WorkerThreadClient: missing/);
        assert.match(err.message, /docs\/performance\.md/);
        return true;
      },
    );
  });
});
