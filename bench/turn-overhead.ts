/**
 * Platform overhead per turn, with a zero-latency scripted model (the OpenAI-compatible test
 * server echoing at once): message in through the HTTP API -> reply recorded in the
 * transcript. Runs the all-in-one stack in this process on the embedded Temporal dev server
 * (bench/stack.ts), through the same phases as the plain-Temporal floor (bench/floor.ts,
 * bench/phases.ts). Prints JSON. Not a test: figures depend on the machine; compare them with
 * the floor run beside them (bench/compare.ts).
 *
 *   node --expose-gc --import tsx bench/turn-overhead.ts            (60 s sustained phase)
 *   BENCH_SECONDS=10 BENCH_IDLE_SESSIONS=200 node --expose-gc --import tsx bench/turn-overhead.ts
 *   BENCH_SHAPE=cluster ...   (`steward cluster`'s processes on a fresh 2-node cluster on PostgreSQL:
 *                              bench/cluster-shape.ts; this process drives the API and hosts the model)
 */
import { applyHeapGrowthSetting } from '../platform/heap-growth.js';
import { applySourceMapSetting } from '../platform/source-maps.js';

// as Steward's entry point does (platform/main.ts): no source maps unless STEWARD_SOURCE_MAPS, set before the rest loads
applySourceMapSetting();
// as Steward's entry point does: the heap grows at most STEWARD_HEAP_GROWTH_PERCENT past its live objects
applyHeapGrowthSetting();
const { phaseSettings, runPhases } = await import('./phases.js');
const { startBenchStack } = await import('./stack.js');
const { benchShape, CLUSTER_TEMPORAL, cpuPerTurn, phaseTurns, startClusterBenchStack } = await import('./cluster-shape.js');

const HISTORY_TURNS = 10;
const settings = phaseSettings();
const cluster = benchShape() === 'cluster';
const stack = cluster ? await startClusterBenchStack() : await startBenchStack();

try {
  const cpuBefore = 'cpu' in stack ? stack.cpu() : undefined;
  const results = await runPhases((chatId) => stack.turn(chatId), stack.cache, settings);
  const cpuAfter = 'cpu' in stack ? stack.cpu() : undefined;
  for (let i = 0; i < HISTORY_TURNS; i++) await stack.turn('history');
  await new Promise((r) => setTimeout(r, 500)); // the last turn's closing tasks
  const cost = await stack.sessionCost('history');
  console.log(
    JSON.stringify(
      {
        bench: 'turn-overhead',
        cache: stack.cache,
        deployment: benchShape(),
        database: 'config' in stack && stack.config.databaseUrl.startsWith('file:') ? 'sqlite' : 'postgresql',
        temporal: cluster ? CLUSTER_TEMPORAL : 'embedded dev server (SQLite)',
        ...results,
        ...(cpuBefore && cpuAfter ? { cpu_ms_per_turn: cpuPerTurn(cpuBefore, cpuAfter, phaseTurns(results)) } : {}),
        per_turn: { history_events: +(cost.events / HISTORY_TURNS).toFixed(1), workflow_tasks: +(cost.workflowTasks / HISTORY_TURNS).toFixed(1), turns: HISTORY_TURNS },
        note: cluster
          ? 'steward cluster: api, worker and repo-worker processes with the compose environment; the reply is heard from the database (bench/cluster-shape.ts)'
          : 'API, worker and ingress in one process (the all-in-one start); the Temporal server is a separate process',
      },
      null,
      2,
    ),
  );
} finally {
  await stack.stop();
}
