/**
 * platform/temporal-retry.ts on a real server: an update-with-start that reaches a run while it
 * continues as new is refused ("workflow is closing", RESOURCE_EXHAUSTED) and lands on the next
 * run when retried. Steward's connection retries it at once; the SDK's own connection waits its
 * RESOURCE_EXHAUSTED backoff (1 s x 1.7, less 20% jitter at most). If the server or the SDK
 * changes either side, this fails and says which.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client, WithStartWorkflowOperation, type Connection } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { loadConfig } from '../../config/index.js';
import { connectTemporal } from '../../platform/temporal-server.js';
import { createTestEnvironment } from '../helpers/temporal.js';
import { closingProbe, goSignal, touchUpdate } from './fixtures/closing-probe.js';

const require = createRequire(import.meta.url);
const quiet = { trace() {}, debug() {}, info() {}, warn() {}, error() {}, log() {} } as never;

describe('update-with-start on a run that is continuing as new (dev server)', () => {
  let env: TestWorkflowEnvironment;
  let bundle: WorkflowBundleWithSourceMap;
  let connection: Connection;

  before(async () => {
    env = await createTestEnvironment();
    bundle = await bundleWorkflowCode({ workflowsPath: require.resolve('./fixtures/closing-probe.ts'), logger: quiet });
    const c = await connectTemporal(loadConfig({}).temporal, env.address);
    await c.nativeConnection.close();
    connection = c.connection;
  });
  after(async () => {
    await connection?.close();
    await env?.teardown();
  });

  /** Send `go`, then, while the run holds its last task open, update-with-start through `client`: how long it took and where it landed. */
  async function raceTheClose(client: Client, taskQueue: string): Promise<{ ms: number; generation: number; landedOnNewRun: boolean }> {
    const workflowId = `closing-${randomUUID()}`;
    const first = await env.client.workflow.start(closingProbe, { taskQueue, workflowId, args: [0] });
    // the first task has run (the handlers are set) before the run is told to close
    assert.equal(await env.client.workflow.getHandle(workflowId).executeUpdate(touchUpdate, { args: ['ready'] }), 0);
    await first.signal(goSignal);
    await sleep(200); // within the 600 ms the last task is held open
    const t0 = Date.now();
    const op = new WithStartWorkflowOperation(closingProbe, { taskQueue, workflowId, args: [0], workflowIdConflictPolicy: 'USE_EXISTING' });
    const handle = await client.workflow.startUpdateWithStart(touchUpdate, { args: ['race'], waitForStage: 'ACCEPTED', startWorkflowOperation: op });
    const generation = await handle.result();
    return { ms: Date.now() - t0, generation, landedOnNewRun: handle.workflowRunId !== first.firstExecutionRunId };
  }

  it("lands on the next run at once through Steward's connection, where the SDK's default retry waits over a second", async () => {
    const taskQueue = `closing-${randomUUID()}`;
    const worker = await Worker.create({ connection: env.nativeConnection, taskQueue, workflowBundle: bundle, activities: { hold: (ms: number) => sleep(ms) } });
    await worker.runUntil(async () => {
      const ours = await raceTheClose(new Client({ connection, namespace: env.namespace ?? 'default' }), taskQueue);
      assert.equal(ours.generation, 1, 'answered by the next run');
      assert.ok(ours.landedOnNewRun);
      // the held task's remaining ~400 ms, the retry's ~25 ms and the new run's first task
      assert.ok(ours.ms < 1_200, `Steward's connection took ${ours.ms} ms`);
      const sdk = await raceTheClose(env.client, taskQueue);
      assert.equal(sdk.generation, 1);
      assert.ok(sdk.ms >= 1_300, `the SDK's own connection took ${sdk.ms} ms: if it no longer waits, platform/temporal-retry.ts may go`);
    });
  });
});
