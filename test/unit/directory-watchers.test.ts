/** Directories watched for changes (adapters/directory-watchers.ts), against the real file system. */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, describe, it } from 'node:test';
import { startDirectoryWatchers, type FileEventPayload } from '../../adapters/directory-watchers.js';

describe('directory watchers', () => {
  const base = mkdtempSync(path.join(os.tmpdir(), 'steward-dirwatch-'));
  after(() => rmSync(base, { recursive: true, force: true }));

  it('reports a directory as watched only once its watch is in place: a file written at once is seen', { timeout: 60_000 }, async () => {
    const dirs = new Map<string, string>();
    const delivered: string[] = [];
    const w = await startDirectoryWatchers({
      what: 'directory',
      noun: 'a directory',
      list: async () => new Map(dirs),
      deliver: async (id: string, _batch: string, p: FileEventPayload) => void delivered.push(...p.files.map((f) => `${id}/${f.path}`)),
      debounceMs: 20,
      // no reconcile of its own during the test: only refresh() adds a directory
      reconcileMs: 600_000,
    });
    try {
      for (let i = 0; i < 8; i++) {
        const id = `d${i}`;
        const dir = mkdtempSync(path.join(base, `${id}-`));
        dirs.set(id, dir);
        const refreshed = w.refresh();
        // the moment the directory is reported as watched, write into it
        for (let spins = 0; !w.watching().some((x) => x.id === id); spins++) {
          assert.ok(spins < 100_000, 'the directory is watched after a refresh');
          await new Promise((r) => setImmediate(r));
        }
        assert.equal(w.watching().find((x) => x.id === id)?.mode, 'watch');
        writeFileSync(path.join(dir, 'a.txt'), 'hello');
        await refreshed;
        for (let waited = 0; !delivered.includes(`${id}/a.txt`); waited += 20) {
          assert.ok(waited < 5_000, `the file written into ${id} as soon as it was reported watched is delivered (got ${JSON.stringify(delivered)})`);
          await sleep(20);
        }
      }
    } finally {
      await w.stop();
    }
  });
});
