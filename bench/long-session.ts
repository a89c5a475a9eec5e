/**
 * One conversation of many turns (LONG_TURNS, 10,000): does a long session keep its latency?
 * The session continues as new every STEWARD_SESSION_MAX_TURNS turns (100 by default) with a
 * bounded working set; this measures the turns in windows of LONG_WINDOW (1,000), the turns
 * that started a new run against the others, and the history a run keeps. Prints JSON. Not a
 * test.
 *
 *   node --expose-gc --import tsx bench/long-session.ts
 *   LONG_TURNS=2000 LONG_WINDOW=500 node --expose-gc --import tsx bench/long-session.ts
 */
import { statusQuery } from '../workflows/messages.js';
import { sessionWorkflowId } from '../common/ids.js';
import { stats } from './phases.js';
import { startBenchStack } from './stack.js';

const positive = (name: string, fallback: number): number => {
  const v = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(v) || v < 1) throw new Error(`${name}: expected a positive whole number, got ${process.env[name]}`);
  return v;
};
const TURNS = positive('LONG_TURNS', 10_000);
const WINDOW = positive('LONG_WINDOW', 1_000);
const CHAT = 'long';
const stack = await startBenchStack();

try {
  const handle = stack.steward.client.workflow.getHandle(sessionWorkflowId({ platform: 'http', account: 'default', chatId: CHAT }));
  const latencies: number[] = [];
  const firstOfRun: number[] = [];
  const others: number[] = [];
  let generation = -1;
  for (let i = 0; i < TURNS; i++) {
    const ms = await stack.turn(CHAT);
    latencies.push(ms);
    // the first turn a run answered: the run that continued as new took it in
    const g = (await handle.query(statusQuery)).generation;
    (g !== generation && i > 0 ? firstOfRun : others).push(ms);
    generation = g;
  }
  const windows = [];
  for (let from = 0; from < TURNS; from += WINDOW) {
    const s = stats(latencies.slice(from, from + WINDOW));
    windows.push({ turns: `${from + 1}-${Math.min(TURNS, from + WINDOW)}`, p50_ms: s.p50_ms, p99_ms: s.p99_ms });
  }
  const last = await handle.fetchHistory();
  console.log(
    JSON.stringify(
      {
        bench: 'long-session',
        turns: TURNS,
        runs: generation + 1,
        max_turns_per_run: stack.config.session.maxTurnsPerRun,
        windows,
        p50_first_to_last_window: +((windows.at(-1)?.p50_ms ?? 0) / (windows[0]?.p50_ms || 1)).toFixed(2),
        first_turn_of_a_run: stats(firstOfRun),
        other_turns: stats(others),
        last_run_history_events: last.events?.length ?? 0,
      },
      null,
      2,
    ),
  );
} finally {
  await stack.stop();
}
