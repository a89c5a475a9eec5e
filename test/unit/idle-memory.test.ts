/**
 * STEWARD_IDLE_MEMORY_RELEASE (platform/idle-memory.ts): once the process has gone quiet after
 * growing, its heaps are compacted (the main thread's, each workflow thread's) and the memory
 * goes back. Against the real V8 heap, real threads and the real event loop.
 */
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Worker as NodeThread } from 'node:worker_threads';
import { describe, it } from 'node:test';
import { loadConfig } from '../../config/index.js';
import { compactHeap, startIdleMemoryRelease, v8Gc, type IdleRelease } from '../../platform/idle-memory.js';
import { compactWorkflowThread, workflowThreadState } from '../../workers/workflow-threads.js';

const THREAD_SCRIPT = fileURLToPath(new URL('../../workers/workflow-thread.cjs', import.meta.url));
const MB = 1024 * 1024;
const silent = { info: () => {}, warn: () => {} };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** What a load leaves: many objects, of which a few (one in 50) stay, spread over the old generation's pages. */
function fragmentHeap(): unknown[] {
  let objects: unknown[] = [];
  for (let i = 0; i < 400_000; i++) objects.push({ a: i, b: `x${i}`, c: [i, i + 1, i + 2] });
  objects = objects.filter((_, i) => i % 50 === 0);
  return objects;
}

/** Keep the event loop busy (well past 5% utilization) for `ms`, in slices. */
async function busyFor(ms: number): Promise<void> {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    const slice = performance.now() + 40;
    while (performance.now() < slice) {
      // spin
    }
    await new Promise((r) => setImmediate(r));
  }
}

async function until(what: string, check: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

describe('idle memory release', () => {
  it("takes V8's gc() without leaving it to this context or to contexts made later", () => {
    const before = typeof (globalThis as { gc?: unknown }).gc;
    assert.equal(typeof v8Gc(), 'function');
    assert.equal(v8Gc(), v8Gc(), 'taken once');
    assert.equal(typeof (globalThis as { gc?: unknown }).gc, before, "this context's globals are as they were");
    // (a process started with --expose-gc gives every context one, and v8Gc uses the global)
    if (before === 'undefined') assert.equal(runInNewContext('typeof gc'), 'undefined', 'a context made afterwards (a workflow sandbox) has no gc');
  });

  it('compacts a fragmented heap: the pages a full collection keeps for a few survivors go back', () => {
    const kept = fragmentHeap();
    (v8Gc() as unknown as (o: object) => void)({ type: 'major', execution: 'sync' });
    const afterFull = v8.getHeapStatistics().total_heap_size;
    const ms = compactHeap();
    const afterCompaction = v8.getHeapStatistics().total_heap_size;
    assert.ok(kept.length === 8_000);
    assert.ok(afterFull - afterCompaction > 30 * MB, `the heap shrank from ${(afterFull / MB).toFixed(1)} MB to ${(afterCompaction / MB).toFixed(1)} MB`);
    assert.ok(ms >= 0);
  });

  it('releases once the loop has been quiet for the period, never while it is busy, and again only after growth', { timeout: 60_000 }, async () => {
    const releases: IdleRelease[] = [];
    let threadCompactions = 0;
    let trims = 0;
    const r = startIdleMemoryRelease({
      quietMs: 400,
      checkEveryMs: 50,
      minGrowthMb: 24,
      log: silent,
      threads: async () => ++threadCompactions,
      trim: () => void trims++,
      onRelease: (x) => releases.push(x),
    });
    try {
      // the first quiet period after start releases (nothing released yet)
      await until('the first release', () => r.releases === 1);
      assert.equal(releases.length, 1);
      assert.deepEqual([threadCompactions, trims], [1, 1], 'the threads compacted and the allocator trimmed after the main heap');
      assert.equal(releases[0]!.threads, 1);

      // busy: no release however long, even with the heap grown
      let kept = fragmentHeap();
      const grown = kept.length;
      await busyFor(1_500);
      assert.equal(r.releases, 1, 'no release while the loop is busy');

      // quiet after growth: a release, and the RSS it leaves is no more than before it
      kept = [];
      await until('the release after the load', () => r.releases === 2);
      assert.ok(grown > 0 && kept.length === 0);
      assert.ok(releases[1]!.rssAfterMb <= releases[1]!.rssBeforeMb, `RSS ${releases[1]!.rssBeforeMb} -> ${releases[1]!.rssAfterMb} MB`);

      // quiet without growth: nothing more to give back
      await sleep(1_500);
      assert.equal(r.releases, 2, 'no release without growth since the last');
    } finally {
      r.stop();
    }
  });

  it('off (0) never releases', async () => {
    const r = startIdleMemoryRelease({ quietMs: 0, checkEveryMs: 20, minGrowthMb: 0, log: silent });
    await sleep(300);
    assert.equal(r.releases, 0);
    r.stop();
  });

  it('a workflow thread compacts its own heap when asked, each time; a thread that does not answer is reported', { timeout: 30_000 }, async () => {
    const state = workflowThreadState();
    const thread = new NodeThread(THREAD_SCRIPT, { workerData: { stewardCalls: state.buffer } });
    try {
      await new Promise((r) => thread.once('online', r));
      assert.equal(await compactWorkflowThread(state), true);
      assert.equal(await compactWorkflowThread(state), true);
      assert.deepEqual([Atomics.load(state, 2), Atomics.load(state, 3)], [2, 2], 'asked twice, compacted twice');
    } finally {
      await thread.terminate();
    }
    // a thread held in a synchronous loop cannot answer within the limit
    const stuck = workflowThreadState();
    const spinning = new NodeThread('for (;;) {}', { eval: true });
    try {
      assert.equal(await compactWorkflowThread(stuck, 200), false);
    } finally {
      await spinning.terminate();
    }
  });

  it('STEWARD_IDLE_MEMORY_RELEASE: 5s by default, off or 0 turns it off, a bad value is refused with the variable named', () => {
    assert.equal(loadConfig({}).idleMemoryReleaseMs, 5_000);
    assert.equal(loadConfig({ STEWARD_IDLE_MEMORY_RELEASE: '1m' }).idleMemoryReleaseMs, 60_000);
    assert.equal(loadConfig({ STEWARD_IDLE_MEMORY_RELEASE: 'off' }).idleMemoryReleaseMs, 0);
    assert.equal(loadConfig({ STEWARD_IDLE_MEMORY_RELEASE: '0' }).idleMemoryReleaseMs, 0);
    assert.throws(() => loadConfig({ STEWARD_IDLE_MEMORY_RELEASE: 'soon' }), /STEWARD_IDLE_MEMORY_RELEASE.*from 1s to 1h/);
    assert.throws(() => loadConfig({ STEWARD_IDLE_MEMORY_RELEASE: '100ms' }), /STEWARD_IDLE_MEMORY_RELEASE/);
    assert.throws(() => loadConfig({ STEWARD_IDLE_MEMORY_RELEASE: '2h' }), /STEWARD_IDLE_MEMORY_RELEASE/);
  });
});
