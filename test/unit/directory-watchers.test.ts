/** Directories watched for changes (adapters/directory-watchers.ts), against the real file system. */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
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

  for (const mode of ['watch', 'poll'] as const) {
    it(`${mode}: reports files and links, never .git/ or a link's target; a new directory's files; a removed directory; the root made again`, { timeout: 60_000 }, async () => {
      const dir = mkdtempSync(path.join(base, `${mode}-`));
      const outside = mkdtempSync(path.join(base, `${mode}-outside-`));
      const batches: Array<{ id: string; files: Array<[string, string, string | undefined, string | undefined]> }> = [];
      const w = await startDirectoryWatchers({
        what: 'directory',
        noun: 'a directory',
        mode,
        pollMs: 100,
        debounceMs: 300,
        reconcileMs: 600_000,
        list: async () => new Map([['d', dir]]),
        deliver: async (_id, batchId, p) => void batches.push({ id: batchId, files: p.files.map((f) => [f.path, f.change, f.kind, f.text]) }),
      });
      /** The batches after `fn`, once they have settled. */
      /** Each path with its change and kind, once, in order (a burst may settle as more than one batch). */
      const entries = (bs: typeof batches) => [...new Set(bs.flatMap((b) => b.files.map((f) => JSON.stringify(f.slice(0, 3)))))].sort().map((e) => JSON.parse(e) as unknown);
      const after = async (fn: () => void, quiet = 1_200) => {
        const n = batches.length;
        fn();
        for (let waited = 0; waited < 5_000; waited += 50) {
          await sleep(50);
          if (batches.length > n && waited >= quiet) break;
        }
        return batches.slice(n);
      };
      try {
        assert.deepEqual(w.watching(), [{ id: 'd', path: dir, mode }]);
        const T = new Date('2026-01-02T03:04:05.000Z');
        const first = await after(() => {
          writeFileSync(path.join(dir, 'a.txt'), 'hello\n');
          utimesSync(path.join(dir, 'a.txt'), T, T);
        });
        assert.deepEqual(first.flatMap((b) => b.files), [['a.txt', 'changed', 'file', 'hello\n']]);
        assert.match(first[0]!.id, /^file:[0-9a-f]{40}$/);
        if (mode === 'watch') {
          // the same content and mtime written again: reported (every inotify event counts), with the same id
          const again = await after(() => {
            writeFileSync(path.join(dir, 'a.txt'), 'hello\n');
            utimesSync(path.join(dir, 'a.txt'), T, T);
          });
          assert.deepEqual(again.map((b) => b.id), [first[0]!.id]);
        }
        assert.deepEqual(
          await after(() => {
            mkdirSync(path.join(dir, '.git', 'refs'), { recursive: true });
            writeFileSync(path.join(dir, '.git', 'HEAD'), 'ref\n');
          }),
          [],
          '.git/ is never reported',
        );
        const deep = await after(() => {
          mkdirSync(path.join(dir, 'docs', 'deep'), { recursive: true });
          writeFileSync(path.join(dir, 'docs', 'deep', 'plan.md'), '# plan\n');
        });
        assert.deepEqual(entries(deep), [['docs/deep/plan.md', 'changed', 'file']], 'a new directory is reported by its files');
        writeFileSync(path.join(outside, 'secret.txt'), 'TOP SECRET\n');
        const links = await after(() => {
          symlinkSync(outside, path.join(dir, 'out'));
          symlinkSync(path.join(outside, 'secret.txt'), path.join(dir, 'secret-link'));
        });
        assert.deepEqual(entries(links), [['out', 'changed', 'symlink'], ['secret-link', 'changed', 'symlink']]);
        assert.ok(links.every((b) => b.files.every((f) => f[3] === undefined)), 'the target of a link is never read');
        assert.deepEqual(await after(() => writeFileSync(path.join(outside, 'secret.txt'), 'TOP SECRET, changed\n')), [], 'a link is never followed');
        const removed = await after(() => rmSync(path.join(dir, 'docs'), { recursive: true }));
        assert.deepEqual(entries(removed), [['docs', 'deleted', null], ['docs/deep', 'deleted', null], ['docs/deep/plan.md', 'deleted', null]]);
        // the root removed and made again: watched anew on the next refresh
        await after(() => {
          rmSync(dir, { recursive: true });
          mkdirSync(dir);
        });
        await w.refresh();
        assert.deepEqual(w.watching(), [{ id: 'd', path: dir, mode }]);
        const anew = await after(() => writeFileSync(path.join(dir, 'b.txt'), 'three\n'));
        assert.deepEqual(entries(anew), [['b.txt', 'changed', 'file']]);
      } finally {
        await w.stop();
      }
    });
  }

  it('watches at most maxDirs directories per root; deeper ones are not watched', { timeout: 60_000 }, async () => {
    const dir = mkdtempSync(path.join(base, 'bounded-'));
    for (const d of ['a', 'b', 'c', 'd']) mkdirSync(path.join(dir, d));
    const seen: string[] = [];
    const w = await startDirectoryWatchers({
      what: 'directory',
      noun: 'a directory',
      maxDirs: 3,
      debounceMs: 100,
      reconcileMs: 600_000,
      list: async () => new Map([['d', dir]]),
      deliver: async (_id, _b, p) => void seen.push(...p.files.map((f) => f.path)),
    });
    try {
      for (const d of ['a', 'b', 'c', 'd']) writeFileSync(path.join(dir, d, 'f.txt'), d);
      writeFileSync(path.join(dir, 'top.txt'), 'top');
      await sleep(1_000);
      assert.ok(seen.includes('top.txt'), JSON.stringify(seen));
      assert.equal(seen.filter((p) => p.endsWith('/f.txt')).length, 2, `the root and two directories below it are watched: ${JSON.stringify(seen)}`);
    } finally {
      await w.stop();
    }
  });
});
