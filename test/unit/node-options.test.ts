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
import { STEWARD_NODE_FLAGS } from '../../platform/node-options.js';
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
    const launcher = read('steward').split('\n').find((l) => l.startsWith('exec node '));
    const entrypoint = read('Dockerfile').split('\n').find((l) => l.startsWith('ENTRYPOINT '));
    const testCommand = read('scripts/test.sh');
    assert.ok(launcher && entrypoint);
    const entry = JSON.parse(entrypoint.slice('ENTRYPOINT '.length)) as string[];
    assert.ok(STEWARD_NODE_FLAGS.length > 0);
    for (const flag of STEWARD_NODE_FLAGS) {
      assert.ok(launcher.split(' ').includes(flag), `./steward passes ${flag}`);
      assert.ok(entry.includes(flag), `the image's ENTRYPOINT passes ${flag}`);
      assert.match(testCommand, new RegExp(`export NODE_OPTIONS=.*${flag}`), `scripts/test.sh passes ${flag}`);
    }
    assert.match(read('platform/cluster.ts'), /startDetached\(process\.execPath, \[\.\.\.STEWARD_NODE_FLAGS, /, 'steward cluster starts Steward with them');
  });

  it('they take effect: AsyncLocalStorage on async context frames, without the promise hook', () => {
    // Node 22 and 23 keep it on a promise hook by default; from Node 24 on frames are the default
    if (Number(process.versions.node.split('.')[0]) < 24) assert.equal(alsOnPromiseHook([]), true, "Node's default on this version");
    assert.equal(alsOnPromiseHook(STEWARD_NODE_FLAGS), false);
  });
});
