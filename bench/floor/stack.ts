/**
 * The plain-Temporal floor's stack (bench/floor.ts, bench/memory.ts): the embedded dev server
 * with Steward's flags, the scripted model server, and the conversation worker of
 * ./workflows.ts in this process with BENCH_CACHE cached workflows. `turn(chatId)` sends one
 * message by update-with-start and resolves with the reply.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, Connection, WithStartWorkflowOperation } from '@temporalio/client';
import { bundleWorkflowCode, NativeConnection, Worker } from '@temporalio/worker';
import { startEmbeddedTemporal } from '../../platform/temporal-server.js';
import { startModelServer } from '../../test/helpers/model-server.js';
import { freePort } from '../../test/helpers/process.js';
import { benchShape, CLUSTER_WORKER_CACHE, startFloorCluster, type CpuSnapshot } from '../cluster-shape.js';
import { createFloorActivities } from './activities.js';
import { floorConversation, sayUpdate } from './workflows.js';

const here = path.dirname(fileURLToPath(import.meta.url));
/** The floor worker's task queue. */
export const FLOOR_TASK_QUEUE = 'floor';

const silent = { trace() {}, debug() {}, info() {}, warn() {}, error() {}, log() {} } as never;

export interface FloorStack {
  client: Client;
  cache: number;
  turn(chatId: string): Promise<string>;
  /** On the cluster (BENCH_SHAPE=cluster): CPU time so far of its parts and of this process. */
  cpu?: () => CpuSnapshot;
  stop(): Promise<void>;
}

export async function startFloorStack(dataDirPrefix = 'steward-floor-'): Promise<FloorStack> {
  const cluster = benchShape() === 'cluster';
  const cache = cluster ? CLUSTER_WORKER_CACHE : Number(process.env.BENCH_CACHE ?? process.env.STEWARD_WORKER_MAX_CACHED_WORKFLOWS ?? 200);
  const model = await startModelServer({ keepRequests: false });
  const dataDir = mkdtempSync(path.join(tmpdir(), dataDirPrefix));
  const temporal = cluster ? await startFloorCluster() : await startEmbeddedTemporal({ dataDir, port: await freePort(), uiPort: await freePort(), ui: false, namespace: 'default' });
  const namespace = temporal.namespace;
  const connection = await Connection.connect({ address: temporal.address });
  const nativeConnection = await NativeConnection.connect({ address: temporal.address });
  const client = new Client({ connection, namespace });
  const taskQueue = FLOOR_TASK_QUEUE;
  const workflowBundle = await bundleWorkflowCode({ workflowsPath: path.join(here, 'workflows.ts'), logger: silent });
  const worker = await Worker.create({
    connection: nativeConnection,
    namespace,
    taskQueue,
    workflowBundle,
    activities: createFloorActivities(model.baseURL),
    maxCachedWorkflows: cache,
  });
  const running = worker.run();
  return {
    client,
    cache,
    ...('cpu' in temporal ? { cpu: temporal.cpu } : {}),
    turn: (chatId) =>
      client.workflow.executeUpdateWithStart(sayUpdate, {
        args: [`ping ${chatId}`],
        startWorkflowOperation: new WithStartWorkflowOperation(floorConversation, { workflowId: `floor-${chatId}`, taskQueue, workflowIdConflictPolicy: 'USE_EXISTING' }),
      }),
    async stop() {
      worker.shutdown();
      await running;
      await nativeConnection.close();
      await connection.close();
      await temporal.stop();
      await model.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
