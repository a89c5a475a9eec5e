/**
 * What one model step costs this process, by how it is called: Steward's step streamed
 * (STEWARD_MODEL_STREAM=true), Steward's step as one plain request (the default), and the
 * floor, a bare fetch of chat/completions as bench/floor/activities.ts makes it. Each is
 * called BENCH_CALLS times (600; 10 at once) against the scripted zero-latency model server in
 * this process, in BENCH_ROUNDS alternating rounds (5); prints the medians of CPU time (user +
 * system, this process, the model server's side included) per call as JSON, and their ratios
 * to the floor. Not a test.
 *
 *   node --import tsx bench/model-call.ts
 */
import { createModelRegistry, runModelStep } from '../domain/model.js';
import { startModelServer } from '../test/helpers/model-server.js';

const CALLS = Math.max(10, Number(process.env.BENCH_CALLS ?? 600));
const ROUNDS = Math.max(1, Number(process.env.BENCH_ROUNDS ?? 5));
const AT_ONCE = 10;

const model = await startModelServer();
const registry = createModelRegistry({ openaiCompatible: { baseURL: model.baseURL } });
const messages = [{ role: 'user' as const, content: 'ping' }];
const ref = 'openai-compatible:bench';

const ways: Record<string, () => Promise<unknown>> = {
  floor_fetch: async () => {
    const r = await fetch(`${model.baseURL}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'bench', messages }) });
    return r.json();
  },
  steward_plain: () => runModelStep(registry, { model: ref, think: 'off', messages }),
  steward_streamed: () => runModelStep(registry, { model: ref, think: 'off', messages }, { stream: true }),
};

const cpuUs: Record<string, number[]> = {};
try {
  for (let round = 0; round < ROUNDS; round++) {
    const order = Object.keys(ways);
    if (round % 2 === 1) order.reverse();
    for (const name of order) {
      const call = ways[name]!;
      for (let i = 0; i < 20; i++) await call(); // warm
      const c0 = process.cpuUsage();
      await Promise.all(Array.from({ length: AT_ONCE }, async () => {
        for (let i = 0; i < CALLS / AT_ONCE; i++) await call();
      }));
      const c = process.cpuUsage(c0);
      (cpuUs[name] ??= []).push((c.user + c.system) / CALLS);
    }
  }
} finally {
  await model.close();
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const medians = Object.fromEntries(Object.entries(cpuUs).map(([k, v]) => [k, Math.round(median(v))]));
console.log(
  JSON.stringify(
    {
      bench: 'model-call',
      calls: CALLS,
      rounds: ROUNDS,
      cpu_us_per_call_median: medians,
      ratio_to_floor: Object.fromEntries(Object.entries(medians).map(([k, v]) => [k, +(v / medians.floor_fetch!).toFixed(2)])),
    },
    null,
    2,
  ),
);
