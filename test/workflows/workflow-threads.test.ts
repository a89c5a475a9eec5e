/**
 * Steward's workflow threads (workers/workflow-threads.ts): sandbox calls without a watchdog
 * thread each, the deadlock limit kept by the main thread instead. A real worker on the dev
 * server runs workflows on them; a workflow that never yields has its thread stopped with an
 * error that names it; the supervisor alone, on real threads, tells one long call from many
 * short ones. Stack traces of workflow promises are there only when asked for; the worker's
 * patch activation callback is asked as on the SDK's threads.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import { after, before, describe, it } from 'node:test';
import { Worker as NodeThread } from 'node:worker_threads';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, DefaultLogger, Runtime, type LogEntry, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { loadConfig } from '../../config/index.js';
import { createStewardWorker } from '../../workers/main.js';
import { StewardWorker, stewardWorkerClass, superviseWorkflowThread, WORKFLOW_THREAD_YOUNG_GENERATION_MB, workflowThreads, type StuckCall } from '../../workers/workflow-threads.js';
import { createTestEnvironment } from '../helpers/temporal.js';
import { echoProbe, patchProbe, spinProbe, waitProbe } from './fixtures/thread-probe.js';

const require = createRequire(import.meta.url);
const quiet = { trace() {}, debug() {}, info() {}, warn() {}, error: console.error, log() {} };

const until = async (what: string, check: () => boolean, ms = 15_000) => {
  for (const end = Date.now() + ms; Date.now() < end; ) {
    if (check()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  assert.fail(`timed out waiting for ${what}`);
};

/**
 * A thread that writes the shared call state as workflow-thread.cjs does: `calls` calls of
 * `callMs` each (busy-waiting), then one that never ends when `hang` is set.
 */
function fakeWorkflowThread(calls: Int32Array, opts: { callMs: number; count: number; hang: boolean }): NodeThread {
  const code = `
    const { workerData } = require('node:worker_threads');
    const calls = new Int32Array(workerData.calls);
    const busy = (ms) => { const end = Date.now() + ms; while (Date.now() < end); };
    for (let i = 0; i < workerData.count; i++) {
      Atomics.add(calls, 1, 1); Atomics.store(calls, 0, 1);
      busy(workerData.callMs);
      Atomics.store(calls, 0, 0);
    }
    if (workerData.hang) { Atomics.add(calls, 1, 1); Atomics.store(calls, 0, 1); for (;;); }`;
  return new NodeThread(code, { eval: true, workerData: { calls: calls.buffer, ...opts } });
}

describe('workflow threads', () => {
  it('STEWARD_WORKFLOW_WATCHDOG: thread by default, per-call, anything else refused', () => {
    const watchdog = (v?: string) => loadConfig({ ...(v === undefined ? {} : { STEWARD_WORKFLOW_WATCHDOG: v }) }).temporal.workflowWatchdog;
    assert.equal(watchdog(), 'thread');
    assert.equal(watchdog('thread'), 'thread');
    assert.equal(watchdog('per-call'), 'per-call');
    assert.throws(() => watchdog('off'), /STEWARD_WORKFLOW_WATCHDOG.*expected thread \(the default\) or per-call/);
  });

  it('STEWARD_WORKFLOW_STACK_TRACES: off by default, on, anything else refused', () => {
    const traces = (v?: string) => loadConfig({ ...(v === undefined ? {} : { STEWARD_WORKFLOW_STACK_TRACES: v }) }).temporal.workflowStackTraces;
    assert.equal(traces(), false);
    assert.equal(traces('off'), false);
    assert.equal(traces('on'), true);
    assert.throws(() => traces('yes'), /STEWARD_WORKFLOW_STACK_TRACES.*expected on or off \(the default\)/);
  });

  it('the supervisor stops a thread whose one call runs past the limit, not one making many short calls', async () => {
    const logged: string[] = [];
    const logger = { ...quiet, error: (m: string) => void logged.push(m) };
    // many calls of 40 ms for 1.2 s in all, against a limit of 300 ms: never stopped
    const shortCalls = new Int32Array(new SharedArrayBuffer(8));
    const busy = fakeWorkflowThread(shortCalls, { callMs: 40, count: 30, hang: false });
    const stuckShort: StuckCall[] = [];
    superviseWorkflowThread(busy, shortCalls, { limitMs: 300, logger, index: 0, everyMs: 20, onStuck: (s) => stuckShort.push(s) });
    const busyExit = await new Promise<number>((resolve) => busy.once('exit', resolve));
    assert.equal(busyExit, 0, 'the thread of short calls ran to its end');
    assert.deepEqual(stuckShort, []);
    assert.ok(Atomics.load(shortCalls, 1) >= 30, 'it made its calls');

    // a few short calls, then one that never returns: stopped after the limit
    const hangCalls = new Int32Array(new SharedArrayBuffer(8));
    const hung = fakeWorkflowThread(hangCalls, { callMs: 10, count: 5, hang: true });
    const stuck: StuckCall[] = [];
    const t0 = Date.now();
    superviseWorkflowThread(hung, hangCalls, { limitMs: 300, logger, index: 3, everyMs: 20, onStuck: (s) => stuck.push(s) });
    await new Promise((resolve) => hung.once('exit', resolve));
    const took = Date.now() - t0;
    assert.equal(stuck.length, 1);
    assert.equal(stuck[0]!.thread, 3);
    assert.ok(stuck[0]!.ranMs >= 300, `ran ${stuck[0]!.ranMs} ms before it was stopped`);
    assert.ok(took < 5_000, `stopped within seconds (${took} ms)`);
    assert.match(logged.join('\n'), /Workflow thread 3 has run one workflow activation for \d+ ms, past the 300 ms limit/);
  });

  describe('on a worker (dev server)', () => {
    let env: TestWorkflowEnvironment;
    let bundle: WorkflowBundleWithSourceMap;
    const errors: string[] = [];

    before(async () => {
      // the worker's logger is the runtime's: installed before the test environment creates it
      Runtime.install({
        logger: new DefaultLogger('ERROR', (entry: LogEntry) => {
          if (entry.level === 'ERROR') errors.push(entry.message);
        }),
      });
      env = await createTestEnvironment();
      bundle = await bundleWorkflowCode({ workflowsPath: require.resolve('./fixtures/thread-probe.ts'), logger: quiet });
    });
    after(async () => {
      await env?.teardown();
    });

    it('runs workflows on its own threads; a workflow that never yields has its thread stopped, the error names it, and the worker fails', async () => {
      const taskQueue = `threads-${randomUUID()}`;
      const worker = await StewardWorker.create({ connection: env.nativeConnection, taskQueue, workflowBundle: bundle, maxCachedWorkflows: 10 });
      // the SDK's deadlock limit, 5 s (isolateExecutionTimeout), kept by the main thread
      assert.equal(workflowThreads().length, 1, "the worker's one workflow thread is Steward's");
      // its young generation bounded (a heap that grows to V8's default under load keeps it while idle)
      assert.equal(workflowThreads()[0]!.resourceLimits?.maxYoungGenerationSizeMb, WORKFLOW_THREAD_YOUNG_GENERATION_MB);
      const running = worker.run();
      let outcome: 'ran' | Error | undefined;
      running.then(
        () => (outcome = 'ran'),
        (err: Error) => (outcome = err),
      );

      const echoed = await env.client.workflow.execute(echoProbe, { taskQueue, workflowId: `echo-${randomUUID()}`, args: ['hi'] });
      assert.equal(echoed, 'echo: hi');

      const spin = await env.client.workflow.start(spinProbe, { taskQueue, workflowId: `spin-${randomUUID()}` });
      await until('the stuck thread error', () => errors.some((m) => m.includes('Workflow thread 0 has run one workflow activation')), 30_000);
      assert.match(errors.join('\n'), /past the 5000 ms limit/);
      await until('the worker to stop', () => outcome !== undefined, 30_000);
      assert.ok(outcome instanceof Error, `the worker fails (${String(outcome)})`);
      assert.equal(workflowThreads().length, 0, 'the stopped thread is gone');
      await spin.terminate('test done');
    });

    it("two workers of one process with the same bundle share one workflow thread; it lives until the last stops", async () => {
      const queues = [`threads-a-${randomUUID()}`, `threads-b-${randomUUID()}`];
      const [a, b] = await Promise.all(queues.map((taskQueue) => StewardWorker.create({ connection: env.nativeConnection, taskQueue, workflowBundle: bundle, maxCachedWorkflows: 10 })));
      assert.equal(workflowThreads().length, 1, 'one thread for both workers');
      const runA = a!.run();
      const runB = b!.run();
      const echo = (taskQueue: string, text: string) => env.client.workflow.execute(echoProbe, { taskQueue, workflowId: `echo-${randomUUID()}`, args: [text] });
      assert.deepEqual(await Promise.all([echo(queues[0]!, 'a'), echo(queues[1]!, 'b'), echo(queues[0]!, 'a2')]), ['echo: a', 'echo: b', 'echo: a2']);
      a!.shutdown();
      await runA;
      assert.equal(workflowThreads().length, 1, 'the other worker still has it');
      assert.equal(await echo(queues[1]!, 'b2'), 'echo: b2');
      b!.shutdown();
      await runB;
      await until('the shared thread to end', () => workflowThreads().length === 0);
    });

    it('stack traces of workflow promises: the __stack_trace query says they are off by default, and shows where a workflow waits when they are on', async () => {
      const stackTrace = async (WorkerClass: typeof StewardWorker): Promise<string> => {
        const taskQueue = `threads-stack-${randomUUID()}`;
        const worker = await WorkerClass.create({ connection: env.nativeConnection, taskQueue, workflowBundle: bundle, maxCachedWorkflows: 10 });
        return worker.runUntil(async () => {
          const handle = await env.client.workflow.start(waitProbe, { taskQueue, workflowId: `wait-${randomUUID()}` });
          try {
            // the workflow runs on these threads as usual
            assert.equal(await env.client.workflow.execute(echoProbe, { taskQueue, workflowId: `echo-${randomUUID()}`, args: ['traced?'] }), 'echo: traced?');
            return await handle.query<string>('__stack_trace').then(
              (trace) => `trace: ${trace}`,
              (err: Error) => `refused: ${err.message}`,
            );
          } finally {
            await handle.terminate('test done');
          }
        });
      };
      assert.equal(StewardWorker.threadSettings.stackTraces, false);
      const off = await stackTrace(StewardWorker);
      assert.match(off, /^refused: .*Workflow stack traces are not enabled on this worker/);
      const on = await stackTrace(stewardWorkerClass({ stackTraces: true }));
      assert.match(on, /^trace: [\s\S]*waitProbe/, 'the stack shows the workflow function it waits in');
    });

    it("new runs' patches are decided by the worker's patch activation callback, asked as on the SDK's own threads", async () => {
      const run = async (WorkerClass: typeof StewardWorker) => {
        const asked: string[] = [];
        const taskQueue = `threads-patch-${randomUUID()}`;
        const worker = await WorkerClass.create({
          connection: env.nativeConnection,
          taskQueue,
          workflowBundle: bundle,
          maxCachedWorkflows: 10,
          patchActivationCallback: ({ patchId }) => {
            asked.push(patchId);
            return patchId !== 'probe-off';
          },
        });
        const answers = await worker.runUntil(env.client.workflow.execute(patchProbe, { taskQueue, workflowId: `patch-${randomUUID()}` }));
        return { answers, asked };
      };
      // the SDK's way: a round trip to the callback on the main thread for each patch
      assert.deepEqual(await run(StewardWorker), { answers: [false, true], asked: ['probe-off', 'probe-on'] });
    });

    it("per-call: createStewardWorker uses the SDK's Worker and its own threads", async () => {
      const taskQueue = `threads-sdk-${randomUUID()}`;
      const worker = await createStewardWorker({ connection: env.nativeConnection, namespace: 'default', taskQueue, deps: { models: {} } as never, workflowBundle: bundle, workflowWatchdog: 'per-call' }); // no activity runs: the echo probe is a workflow alone
      assert.ok(!(worker instanceof StewardWorker));
      assert.equal(workflowThreads().length, 0, 'no thread of Steward');
      await worker.runUntil(async () => {
        assert.equal(await env.client.workflow.execute(echoProbe, { taskQueue, workflowId: `echo-${randomUUID()}`, args: ['sdk'] }), 'echo: sdk');
      });
    });
  });
});
