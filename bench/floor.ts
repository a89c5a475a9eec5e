/**
 * The plain-Temporal floor of a chat turn: the conversation of bench/floor/workflows.ts
 * (update-with-start -> workflow -> one chat/completions activity), on the same embedded dev
 * server flags, the same scripted model server, the same workflow cache size and the same
 * phases (bench/phases.ts) as bench/turn-overhead.ts. Client and worker in this process, as
 * Steward's all-in-one start has them. Prints JSON. Not a test.
 *
 *   node --expose-gc --import tsx bench/floor.ts
 *   BENCH_SECONDS=10 BENCH_IDLE_SESSIONS=200 node --expose-gc --import tsx bench/floor.ts
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, Connection, WithStartWorkflowOperation } from '@temporalio/client';
import { bundleWorkflowCode, NativeConnection, Worker } from '@temporalio/worker';
import { startEmbeddedTemporal } from '../platform/temporal-server.js';
import { startModelServer } from '../test/helpers/model-server.js';
import { freePort } from '../test/helpers/process.js';
import { createFloorActivities } from './floor/activities.js';
import { floorConversation, sayUpdate } from './floor/workflows.js';
import { historyCost, phaseSettings, runPhases } from './phases.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const CACHE = Number(process.env.BENCH_CACHE ?? process.env.STEWARD_WORKER_MAX_CACHED_WORKFLOWS ?? 200);
const HISTORY_TURNS = 10;
const settings = phaseSettings();

const model = await startModelServer();
const dataDir = mkdtempSync(path.join(tmpdir(), 'steward-floor-'));
const temporal = await startEmbeddedTemporal({ dataDir, port: await freePort(), uiPort: await freePort(), ui: false, namespace: 'default' });
const connection = await Connection.connect({ address: temporal.address });
const nativeConnection = await NativeConnection.connect({ address: temporal.address });
const client = new Client({ connection, namespace: 'default' });
const taskQueue = 'floor';
const workflowBundle = await bundleWorkflowCode({ workflowsPath: path.join(here, 'floor', 'workflows.ts'), logger: { trace() {}, debug() {}, info() {}, warn() {}, error() {}, log() {} } as never });
const worker = await Worker.create({
  connection: nativeConnection,
  namespace: 'default',
  taskQueue,
  workflowBundle,
  activities: createFloorActivities(model.baseURL),
  maxCachedWorkflows: CACHE,
});
const running = worker.run();

async function turn(chatId: string): Promise<number> {
  const t0 = performance.now();
  const reply = await client.workflow.executeUpdateWithStart(sayUpdate, {
    args: [`ping ${chatId}`],
    startWorkflowOperation: new WithStartWorkflowOperation(floorConversation, { workflowId: `floor-${chatId}`, taskQueue, workflowIdConflictPolicy: 'USE_EXISTING' }),
  });
  if (!reply) throw new Error('no reply');
  return performance.now() - t0;
}

try {
  const results = await runPhases(turn, settings);
  // server work per turn: a fresh conversation of HISTORY_TURNS turns
  for (let i = 0; i < HISTORY_TURNS; i++) await turn('history');
  const h = await client.workflow.getHandle('floor-history').fetchHistory();
  const cost = historyCost([h as never]);
  console.log(
    JSON.stringify(
      {
        bench: 'floor',
        shape: 'update-with-start -> conversation workflow -> one chat/completions activity',
        cache: CACHE,
        temporal: 'embedded dev server (SQLite), Steward\'s flags',
        ...results,
        per_turn: { history_events: +(cost.events / HISTORY_TURNS).toFixed(1), workflow_tasks: +(cost.workflowTasks / HISTORY_TURNS).toFixed(1), turns: HISTORY_TURNS },
      },
      null,
      2,
    ),
  );
} finally {
  worker.shutdown();
  await running;
  await nativeConnection.close();
  await connection.close();
  await temporal.stop();
  await model.close();
  rmSync(dataDir, { recursive: true, force: true });
}
