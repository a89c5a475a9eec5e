/**
 * Steward's Node options (platform/node-options.ts): the launcher, the image, the processes
 * `steward cluster` starts and the test command all pass the same ones, and on the Node that
 * bootstrap installs they take effect (AsyncLocalStorage without its promise hook).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { nodeFlags, STEWARD_NODE_FLAGS } from '../../platform/node-options.js';
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
    assert.deepEqual(nodeFlags(22), ['--experimental-async-context-frame']);
    assert.deepEqual(nodeFlags(24), [], 'Node 24 refuses the flag: async context frames are its default');
  });

  it('they take effect: AsyncLocalStorage on async context frames, without the promise hook', () => {
    // Node 22 and 23 keep it on a promise hook by default; from Node 24 on frames are the default
    if (Number(process.versions.node.split('.')[0]) < 24) assert.equal(alsOnPromiseHook([]), true, "Node's default on this version");
    assert.equal(alsOnPromiseHook(STEWARD_NODE_FLAGS), false, 'with Steward\'s options (none on Node 24 and later)');
  });
});
