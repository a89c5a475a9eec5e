/**
 * Steward's Node options and process environment (platform/node-options.ts): the launcher, the
 * image, the processes `steward cluster` starts and the test command all pass the same ones, and
 * on the Node that bootstrap installs they take effect (AsyncLocalStorage without its promise
 * hook; glibc's malloc arenas capped; the main thread's young generation bounded at 64 MB semi-spaces).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { nodeFlags, STEWARD_MALLOC_ARENA_MAX, STEWARD_MAX_SEMI_SPACE_MB, STEWARD_NODE_FLAGS, stewardProcessEnv } from '../../platform/node-options.js';
import { repoRoot } from '../helpers/process.js';

const read = (f: string) => readFileSync(path.join(repoRoot, f), 'utf8');

/** Whether AsyncLocalStorage in a node started with `flags` (and no NODE_OPTIONS) runs on a promise hook (Node's async_hooks implementation has `_propagate`). */
function alsOnPromiseHook(flags: readonly string[]): boolean {
  const env = { ...process.env, NODE_OPTIONS: '' };
  const r = spawnSync(process.execPath, [...flags, '-p', "typeof new (require('node:async_hooks').AsyncLocalStorage)()._propagate"], { env, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stderr, '', 'no warning printed');
  return r.stdout.trim() === 'function';
}

/**
 * The young generation of a node started with `flags` (and no NODE_OPTIONS) under a load of
 * objects that live a while (as a turn's do), in MB: the largest the new space grew to, and its
 * size after Steward's idle compaction (platform/idle-memory.ts, compactHeap).
 */
function youngGeneration(flags: readonly string[]): { grewTo: number; afterCompaction: number } {
  const script = `
import v8 from 'node:v8';
import { compactHeap } from './platform/idle-memory.ts';
const newSpace = () => v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space').space_size / 1048576;
const live = [];
let grewTo = 0;
for (let i = 0; i < 3e6; i++) {
  live.push({ i, parts: [i] });
  if (live.length > 200000) live.splice(0, 100000);
  if (i % 5000 === 0) grewTo = Math.max(grewTo, newSpace());
}
live.length = 0;
compactHeap();
console.log(JSON.stringify({ grewTo, afterCompaction: newSpace() }));`;
  const r = spawnSync(process.execPath, [...flags, '--import', 'tsx', '--input-type=module', '-e', script], { cwd: repoRoot, env: { ...process.env, NODE_OPTIONS: '' }, encoding: 'utf8', timeout: 120_000 });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout.trim()) as { grewTo: number; afterCompaction: number };
}

/**
 * glibc's arenas in a node whose six worker threads each allocate (each such thread gets an
 * arena of its own, up to the cap): the read-write mappings that start on a 64 MiB boundary,
 * where glibc places every arena beyond the main one (V8 places a few of its own there too, the
 * same number either way).
 */
function arenaMappings(env: NodeJS.ProcessEnv): number {
  const script = `
const { Worker, isMainThread, parentPort } = require('node:worker_threads');
if (!isMainThread) {
  const keep = [];
  for (let i = 0; i < 2000; i++) keep.push(Buffer.alloc(1000 + (i % 7) * 100));
  parentPort.postMessage(keep.length);
  setTimeout(() => {}, 2000);
} else {
  let done = 0;
  const threads = Array.from({ length: 6 }, () => new Worker(process.env.ARENA_PROBE, { eval: true }));
  for (const t of threads) t.on('message', () => {
    if (++done < threads.length) return;
    let n = 0;
    for (const l of require('node:fs').readFileSync('/proc/self/maps', 'utf8').split('\\n')) {
      const m = /^([0-9a-f]+)-[0-9a-f]+ rw-p 00000000 00:00 0\\s*$/.exec(l);
      if (m && BigInt('0x' + m[1]) % (64n << 20n) === 0n) n++;
    }
    console.log(n);
    for (const t of threads) t.terminate();
  });
}`;
  const r = spawnSync(process.execPath, ['-e', script], { env: { ...env, ARENA_PROBE: script }, encoding: 'utf8', timeout: 60_000 });
  assert.equal(r.status, 0, r.stderr);
  return Number(r.stdout.trim());
}

describe('Node options', () => {
  it('the launcher, the image, steward cluster and the test command pass the same options', () => {
    // bootstrap computes them for the Node it found; the launcher and the test command use its list
    const fromBootstrap = spawnSync('bash', ['-c', 'source scripts/bootstrap.sh >/dev/null 2>&1; printf %s "$STEWARD_NODE_FLAGS"'], { cwd: repoRoot, encoding: 'utf8', timeout: 120_000 });
    assert.equal(fromBootstrap.stdout.split(' ').filter(Boolean).join(' '), STEWARD_NODE_FLAGS.join(' '), 'scripts/bootstrap.sh and platform/node-options.ts agree for this Node');
    const launcher = read('steward').split('\n').find((l) => l.startsWith('exec node '));
    assert.match(launcher ?? '', /^exec node \$STEWARD_NODE_FLAGS /, './steward passes them');
    assert.match(read('scripts/test.sh'), /for flag in \$\{STEWARD_NODE_FLAGS:-\}; do/, 'scripts/test.sh passes them to every process of the run');
    assert.match(read('platform/cluster.ts'), /startDetached\(process\.execPath, \[\.\.\.STEWARD_NODE_FLAGS, /, 'steward cluster starts Steward with them');
    // the image pins Node 22, and names the Node 22 list
    const dockerfile = read('Dockerfile');
    const image = /^ARG NODE_IMAGE=node:(\d+)/m.exec(dockerfile);
    assert.ok(image, 'the Dockerfile pins a Node major version');
    const entrypoint = dockerfile.split('\n').find((l) => l.startsWith('ENTRYPOINT '));
    const entry = JSON.parse(entrypoint!.slice('ENTRYPOINT '.length)) as string[];
    for (const flag of nodeFlags(Number(image[1]))) assert.ok(entry.includes(flag), `the image's ENTRYPOINT passes ${flag}`);
    assert.deepEqual(nodeFlags(22), ['--experimental-async-context-frame', '--max-semi-space-size=64']);
    assert.deepEqual(nodeFlags(24), ['--max-semi-space-size=64'], 'Node 24 refuses the async context frame flag: they are its default');
  });

  it('the launcher, the image and steward cluster start Steward with glibc\'s arenas capped, unless the environment says otherwise', () => {
    const { MALLOC_ARENA_MAX: _, ...without } = process.env;
    const exported = spawnSync('bash', ['-c', 'source scripts/bootstrap.sh >/dev/null 2>&1; printf %s "$MALLOC_ARENA_MAX"'], { cwd: repoRoot, env: without, encoding: 'utf8', timeout: 120_000 });
    assert.equal(exported.stdout, STEWARD_MALLOC_ARENA_MAX, 'scripts/bootstrap.sh exports the same value');
    const kept = spawnSync('bash', ['-c', 'source scripts/bootstrap.sh >/dev/null 2>&1; printf %s "$MALLOC_ARENA_MAX"'], { cwd: repoRoot, env: { ...without, MALLOC_ARENA_MAX: '4' }, encoding: 'utf8', timeout: 120_000 });
    assert.equal(kept.stdout, '4', "the environment's own value wins");
    assert.deepEqual(stewardProcessEnv({}), { MALLOC_ARENA_MAX: STEWARD_MALLOC_ARENA_MAX });
    assert.deepEqual(stewardProcessEnv({ MALLOC_ARENA_MAX: '4' }), { MALLOC_ARENA_MAX: '4' });
    assert.match(read('Dockerfile'), new RegExp(`^\\s+MALLOC_ARENA_MAX=${STEWARD_MALLOC_ARENA_MAX} \\\\$`, 'm'), 'the image sets it');
    assert.match(read('platform/cluster.ts'), /const childEnv = \{[^}]*\.\.\.stewardProcessEnv\(opts\.env\)/, 'steward cluster passes it');
  });

  it('the arena cap takes effect: fewer arenas than glibc makes by default', { skip: process.platform !== 'linux' || !(process.report.getReport() as { header?: { glibcVersionRuntime?: string } }).header?.glibcVersionRuntime ? 'glibc only' : false }, () => {
    const { MALLOC_ARENA_MAX: _, ...without } = process.env;
    const byDefault = arenaMappings(without);
    const capped = arenaMappings({ ...without, ...stewardProcessEnv({}) });
    // glibc's default is 8 per core: each of the six threads gets its own arena
    assert.ok(byDefault >= capped + 4, `${byDefault} mappings by default, ${capped} capped`);
  });

  it('they take effect: the main thread\'s young generation grows past V8\'s default under load, and the idle compaction shrinks it again', () => {
    assert.ok(STEWARD_NODE_FLAGS.includes(`--max-semi-space-size=${STEWARD_MAX_SEMI_SPACE_MB}`));
    const byDefault = youngGeneration([]);
    // V8 grows the new space by its own heuristics (survival, allocation rate): on a loaded
    // machine one run may not grow it; the bound is shown by the largest of three
    const runs = [youngGeneration(STEWARD_NODE_FLAGS)];
    while (runs.length < 3 && Math.max(...runs.map((r) => r.grewTo)) <= byDefault.grewTo) runs.push(youngGeneration(STEWARD_NODE_FLAGS));
    const steward = runs.reduce((a, b) => (b.grewTo > a.grewTo ? b : a));
    // the new space holds two semi-spaces: V8's default bound is 16 MB each
    assert.ok(byDefault.grewTo <= 32, `by default the new space grew to ${byDefault.grewTo} MB`);
    assert.ok(steward.grewTo > byDefault.grewTo, `with Steward's options it grew to ${steward.grewTo} MB, by default ${byDefault.grewTo} MB`);
    assert.ok(steward.grewTo <= 2 * STEWARD_MAX_SEMI_SPACE_MB, `within the bound: ${steward.grewTo} MB`);
    assert.ok(steward.afterCompaction <= 2, `the idle compaction left ${steward.afterCompaction} MB of new space`);
  });

  it('they take effect: AsyncLocalStorage on async context frames, without the promise hook', () => {
    // Node 22 and 23 keep it on a promise hook by default; from Node 24 on frames are the default
    if (Number(process.versions.node.split('.')[0]) < 24) assert.equal(alsOnPromiseHook([]), true, "Node's default on this version");
    assert.equal(alsOnPromiseHook(STEWARD_NODE_FLAGS), false, 'with Steward\'s options (none on Node 24 and later)');
  });
});
