/**
 * How far V8 lets a Steward process's heap grow past its live objects before the next full
 * collection: STEWARD_HEAP_GROWTH_PERCENT (default 25: up to 1.25x; 0 leaves it to V8).
 *
 * V8's own choice grows the old generation up to 4x when it collects quickly, and a full
 * collection leaves most of those pages allocated until the memory reducer runs, seconds after
 * the load has gone. Under bench/turn-overhead.ts's load the all-in-one process kept 420 MB of
 * old space for 130 MB of live objects, about 1,100 MB of RSS after 1,000 idle sessions; with
 * 25% it kept 660-730 MB, at the same turns per second (3 runs each). More frequent full
 * collections are the price: their marking runs on V8's helper threads.
 *
 * Applied by the entry points (platform/main.ts, the benchmarks) before the rest loads, and
 * to the whole process: the workflow threads' isolates read the same V8 flag. A bad value is
 * left to the configuration's check (config/index.ts), which refuses it with the variable named.
 */
import v8 from 'node:v8';
import { DEFAULT_HEAP_GROWTH_PERCENT, MAX_HEAP_GROWTH_PERCENT } from '../common/heap-growth.js';

/** Apply STEWARD_HEAP_GROWTH_PERCENT; the percent applied, or undefined when the value is not a whole number from 0 to MAX_HEAP_GROWTH_PERCENT (nothing applied). */
export function applyHeapGrowthSetting(env: Record<string, string | undefined> = process.env): number | undefined {
  const raw = (env.STEWARD_HEAP_GROWTH_PERCENT ?? '').trim();
  const percent = raw === '' ? DEFAULT_HEAP_GROWTH_PERCENT : Number(raw);
  if (!Number.isInteger(percent) || percent < 0 || percent > MAX_HEAP_GROWTH_PERCENT) return undefined;
  v8.setFlagsFromString(`--heap-growing-percent=${percent}`);
  return percent;
}
