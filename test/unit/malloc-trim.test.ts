/**
 * STEWARD_MALLOC_TRIM_INTERVAL (platform/malloc-trim.ts): glibc's free memory goes back to the
 * system. Measured in a child process that leaves freed memory inside glibc's arena the way a
 * compilation zone under a live allocation does: RSS stays up after the frees and comes down
 * with the trim.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { loadConfig } from '../../config/index.js';
import { mallocTrimFunction, startMallocTrim, trimMalloc } from '../../platform/malloc-trim.js';
import { repoRoot } from '../helpers/process.js';

/** RSS (MB) of a child after it mallocs about 200 MB in 2 KB pieces, frees all but every 64th, and (with `trim`) trims. */
function freedButKept(trim: boolean): { allocatedMb: number; freedMb: number; afterMb: number; trimmed?: { released: boolean; ms: number } } {
  const script = `
    import { trimMalloc } from './platform/malloc-trim.ts';
    const rss = () => process.memoryUsage().rss / 1048576;
    // Buffer.allocUnsafeSlow: its own malloc each, below glibc's mmap threshold, so from the arena
    let pieces = Array.from({ length: 100000 }, () => Buffer.allocUnsafeSlow(2048).fill(1));
    const allocatedMb = rss();
    // every 64th piece stays: what is freed between them cannot go back from the arena's top
    const kept = pieces.filter((_, i) => i % 64 === 0);
    pieces = [];
    for (let i = 0; i < 4; i++) globalThis.gc();
    await new Promise((r) => setTimeout(r, 200));
    const freedMb = rss();
    const trimmed = ${trim ? 'trimMalloc()' : 'undefined'};
    console.log(JSON.stringify({ allocatedMb, freedMb, afterMb: rss(), trimmed, kept: kept.length }));`;
  const env: NodeJS.ProcessEnv = { ...process.env, NODE_OPTIONS: '' };
  const r = spawnSync(process.execPath, ['--expose-gc', '--import', 'tsx', '--input-type=module', '-e', script], { cwd: repoRoot, env, encoding: 'utf8', timeout: 120_000 });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout.trim()) as ReturnType<typeof freedButKept>;
}

describe('malloc trim', () => {
  it('reaches glibc here (Linux with glibc), and a trim with little to give back is quick', () => {
    const { fn, why } = mallocTrimFunction();
    assert.ok(fn, `malloc_trim is not available: ${why}`);
    const r = trimMalloc();
    assert.ok(r);
    assert.equal(typeof r.released, 'boolean');
    assert.ok(r.ms < 50, `one trim took ${r.ms} ms`);
  });

  it('gives back what glibc keeps after frees: RSS stays up without the trim and comes down with it', () => {
    const kept = freedButKept(false);
    const trimmed = freedButKept(true);
    const line = `allocated ${kept.allocatedMb.toFixed(0)} MB; after the frees ${kept.freedMb.toFixed(0)} MB kept without trim, ${trimmed.freedMb.toFixed(0)} -> ${trimmed.afterMb.toFixed(0)} MB with it (${trimmed.trimmed?.ms.toFixed(1)} ms)`;
    console.log(line);
    // glibc keeps most of the ~190 MB freed without the trim
    assert.ok(kept.freedMb > kept.allocatedMb - 60, line);
    assert.equal(trimmed.trimmed?.released, true, line);
    assert.ok(trimmed.afterMb < trimmed.freedMb - 100, line);
  });

  it('trims on its timer until stopped, and never with the interval off', async () => {
    const logged: string[] = [];
    const log = { info: (_o: object, msg: string) => logged.push(msg), warn: (_o: object, msg: string) => logged.push(msg) };
    const trimmer = startMallocTrim({ everyMs: 40, firstAfterMs: 5, log });
    await new Promise((r) => setTimeout(r, 300));
    trimmer.stop();
    const made = trimmer.trims;
    assert.ok(made >= 3, `${made} trims in 300 ms at 40 ms`);
    await new Promise((r) => setTimeout(r, 150));
    assert.equal(trimmer.trims, made, 'no trim after stop');
    const off = startMallocTrim({ everyMs: 0, log });
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(off.trims, 0);
    assert.deepEqual(logged, []);
  });

  it('STEWARD_MALLOC_TRIM_INTERVAL: 10s by default, off or 0 turns it off, a bad value is refused with the variable named', () => {
    assert.equal(loadConfig({}).mallocTrimEveryMs, 10_000);
    assert.equal(loadConfig({ STEWARD_MALLOC_TRIM_INTERVAL: '5m' }).mallocTrimEveryMs, 300_000);
    assert.equal(loadConfig({ STEWARD_MALLOC_TRIM_INTERVAL: 'off' }).mallocTrimEveryMs, 0);
    assert.equal(loadConfig({ STEWARD_MALLOC_TRIM_INTERVAL: '0' }).mallocTrimEveryMs, 0);
    assert.throws(() => loadConfig({ STEWARD_MALLOC_TRIM_INTERVAL: 'often' }), /STEWARD_MALLOC_TRIM_INTERVAL.*from 1s to 24h/);
    assert.throws(() => loadConfig({ STEWARD_MALLOC_TRIM_INTERVAL: '100ms' }), /STEWARD_MALLOC_TRIM_INTERVAL/);
  });
});
