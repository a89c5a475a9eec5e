/**
 * The plain-Temporal floor of a chat turn: the conversation of bench/floor/workflows.ts
 * (update-with-start -> workflow -> one chat/completions activity), on the same embedded dev
 * server flags, the same scripted model server, the same workflow cache size and the same
 * phases (bench/phases.ts) as bench/turn-overhead.ts. Client and worker in this process, as
 * Steward's all-in-one start has them. Prints JSON. Not a test.
 *
 *   node --expose-gc --import tsx bench/floor.ts
 *   BENCH_SECONDS=10 BENCH_IDLE_SESSIONS=200 node --expose-gc --import tsx bench/floor.ts
 *   BENCH_SHAPE=cluster ...   (on a fresh 2-node cluster on PostgreSQL: bench/cluster-shape.ts)
 */
import { applySourceMapSetting } from '../platform/source-maps.js';

// as Steward's entry point does (platform/main.ts): no source maps unless STEWARD_SOURCE_MAPS, set before the rest loads
applySourceMapSetting();
const { startFloorStack } = await import('./floor/stack.js');
const { historyCost, phaseSettings, runPhases } = await import('./phases.js');
const { benchShape, CLUSTER_TEMPORAL, cpuPerTurn, phaseTurns } = await import('./cluster-shape.js');

const HISTORY_TURNS = 10;
const settings = phaseSettings();
const stack = await startFloorStack();

async function turn(chatId: string): Promise<number> {
  const t0 = performance.now();
  const reply = await stack.turn(chatId);
  if (!reply) throw new Error('no reply');
  return performance.now() - t0;
}

try {
  const cpuBefore = stack.cpu?.();
  const results = await runPhases(turn, stack.cache, settings);
  const cpuAfter = stack.cpu?.();
  // server work per turn: a fresh conversation of HISTORY_TURNS turns
  for (let i = 0; i < HISTORY_TURNS; i++) await turn('history');
  const h = await stack.client.workflow.getHandle('floor-history').fetchHistory();
  const cost = historyCost([h as never]);
  console.log(
    JSON.stringify(
      {
        bench: 'floor',
        shape: 'update-with-start -> conversation workflow -> one chat/completions activity',
        cache: stack.cache,
        deployment: benchShape(),
        temporal: benchShape() === 'cluster' ? CLUSTER_TEMPORAL : 'embedded dev server (SQLite), Steward\'s flags',
        ...results,
        ...(cpuBefore && cpuAfter ? { cpu_ms_per_turn: cpuPerTurn(cpuBefore, cpuAfter, phaseTurns(results)) } : {}),
        per_turn: { history_events: +(cost.events / HISTORY_TURNS).toFixed(1), workflow_tasks: +(cost.workflowTasks / HISTORY_TURNS).toFixed(1), turns: HISTORY_TURNS },
      },
      null,
      2,
    ),
  );
} finally {
  await stack.stop();
}
