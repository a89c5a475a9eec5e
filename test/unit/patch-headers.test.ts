/**
 * git's reading of a patch's headers (domain/git.ts `patchHeaders`: `git apply --numstat
 * --summary -z`, parsed by common/changes/policy's zod parser) against real git, and its
 * agreement with the gate's own parser (`compareWithGit`).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { compareWithGit, parseGitPatchHeaders, parseUnifiedDiff } from '../../common/changes/policy.js';
import { patchHeaders, readPatch } from '../../domain/changes/git.js';

describe('patch headers read by git', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'steward-patch-headers-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const git = (...args: string[]) => execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@example.com', ...args], { cwd: dir, encoding: 'utf8' });

  it('gives each file with its line counts, creations, deletions and mode changes, as the gate parser reads them', async () => {
    git('init', '-q');
    writeFileSync(path.join(dir, 'x.txt'), 'a\nb\n');
    writeFileSync(path.join(dir, 'gone.txt'), 'bye\n');
    writeFileSync(path.join(dir, 'run.sh'), 'echo\n');
    writeFileSync(path.join(dir, 'b.bin'), Buffer.from([0, 1, 2]));
    git('add', '-A');
    git('commit', '-qm', 'base');
    writeFileSync(path.join(dir, 'x.txt'), 'a\nc\nd\n');
    rmSync(path.join(dir, 'gone.txt'));
    chmodSync(path.join(dir, 'run.sh'), 0o755);
    writeFileSync(path.join(dir, 'b.bin'), Buffer.from([0, 3, 4, 5]));
    writeFileSync(path.join(dir, 'tab\there é.txt'), 'new\n');
    symlinkSync('x.txt', path.join(dir, 'link'));
    git('add', '-A');
    const patch = git('diff', '--cached', '--binary', '--full-index');
    const r = await patchHeaders(patch);
    assert.ok(r.ok, JSON.stringify(r));
    const byPath = Object.fromEntries(r.headers.files.map((f) => [f.path, [f.additions, f.deletions]]));
    assert.deepEqual(byPath, { 'b.bin': [null, null], 'gone.txt': [0, 1], link: [1, 0], 'run.sh': [0, 0], 'tab\there é.txt': [1, 0], 'x.txt': [2, 1] });
    assert.equal(r.headers.summary, [' delete mode 100644 gone.txt', ' create mode 120000 link', ' mode change 100644 => 100755 run.sh', ' create mode 100644 tab\there é.txt', ''].join('\n'));
    const files = parseUnifiedDiff(patch);
    assert.deepEqual(files.errors, []);
    assert.deepEqual(compareWithGit(files, r.headers), [], 'git and the gate parser agree');
  });

  it('reads renames and copies the way git folds their names, with their similarity and mode', async () => {
    git('add', '-A');
    git('commit', '-qm', 'second');
    execFileSync('mkdir', ['-p', path.join(dir, 'docs', 'a')]);
    writeFileSync(path.join(dir, 'docs', 'a', 'notes.md'), 'one\ntwo\nthree\nfour\nfive\n');
    git('add', '-A');
    git('commit', '-qm', 'third');
    execFileSync('mkdir', ['-p', path.join(dir, 'docs', 'b')]);
    git('mv', 'docs/a/notes.md', 'docs/b/notes.md');
    git('mv', 'x.txt', 'y.txt');
    chmodSync(path.join(dir, 'y.txt'), 0o755);
    git('add', '-A');
    const patch = git('diff', '--cached', '--binary', '--full-index', '-M');
    const r = await patchHeaders(patch);
    assert.ok(r.ok, JSON.stringify(r));
    assert.equal(r.headers.summary, ' rename docs/{a/notes.md => b/notes.md} (100%)\n rename x.txt => y.txt (100%)\n mode change 100644 => 100755\n');
    const files = parseUnifiedDiff(patch);
    assert.deepEqual(files.errors, []);
    assert.deepEqual(compareWithGit(files, r.headers), []);
    // a record that says otherwise (another mode, another source) is caught
    assert.match(compareWithGit(files.map((f) => ({ ...f, oldPath: f.oldPath === 'x.txt' ? 'z.txt' : f.oldPath })), r.headers)[0]?.message ?? '', /renames, copies or modes differ/);
    assert.match(compareWithGit(files.map((f) => ({ ...f, newMode: '100644' })), r.headers)[0]?.message ?? '', /modes differ/);
  });

  it('agrees with the gate parser on every kind of change git makes (readPatch adds no error)', async () => {
    const repo = mkdtempSync(path.join(os.tmpdir(), 'steward-patch-kinds-'));
    try {
      const g = (...args: string[]) => execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@example.com', '-c', 'core.quotepath=true', ...args], { cwd: repo, encoding: 'utf8' });
      const at = (p: string) => path.join(repo, p);
      g('init', '-q');
      execFileSync('mkdir', ['-p', at('src/deep/er'), at('lib')]);
      writeFileSync(at('src/deep/er/a.ts'), Array.from({ length: 30 }, (_, i) => `line ${i}\n`).join(''));
      writeFileSync(at('crlf.txt'), 'one\r\ntwo\r\n');
      writeFileSync(at('no-newline.txt'), 'end');
      writeFileSync(at('pic.bin'), Buffer.from([0, 1, 2, 3]));
      writeFileSync(at('old.bin'), Buffer.from([0, 9]));
      writeFileSync(at('to-link.txt'), 'text\n');
      writeFileSync(at('copied.md'), Array.from({ length: 20 }, (_, i) => `para ${i}\n`).join(''));
      symlinkSync('crlf.txt', at('retarget'));
      g('add', '-A');
      g('commit', '-qm', 'base');
      writeFileSync(at('crlf.txt'), 'one\r\nTWO\r\nthree\r\n');
      writeFileSync(at('no-newline.txt'), 'end, still no newline');
      writeFileSync(at('pic.bin'), Buffer.from([0, 1, 2, 4, 5]));
      rmSync(at('old.bin'));
      rmSync(at('to-link.txt'));
      symlinkSync('crlf.txt', at('to-link.txt'));
      rmSync(at('retarget'));
      symlinkSync('no-newline.txt', at('retarget'));
      g('mv', 'src/deep/er/a.ts', 'lib/a.ts');
      writeFileSync(at('lib/a.ts'), Array.from({ length: 30 }, (_, i) => `line ${i === 3 ? 'three' : i}\n`).join(''));
      writeFileSync(at('copy of copied.md'), Array.from({ length: 20 }, (_, i) => `para ${i}\n`).join('') + 'more\n');
      writeFileSync(at('with "quotes" and\ttab é.txt'), 'x\n');
      writeFileSync(at('empty.txt'), '');
      chmodSync(at('copied.md'), 0o755);
      g('add', '-A');
      const seen: string[] = [];
      for (const flags of [['-M'], ['-M', '-C', '--find-copies-harder'], ['--no-renames'], ['-B', '-M']]) {
        const patch = g('diff', '--cached', '--binary', '--full-index', ...flags);
        const files = parseUnifiedDiff(patch);
        assert.deepEqual(files.errors, [], `the gate parser reads the patch of ${flags.join(' ')}`);
        const read = await readPatch(patch);
        assert.deepEqual(read.errors, [], `git agrees with the gate parser on ${flags.join(' ')}`);
        assert.deepEqual([...read], [...files], 'the records are the parser\'s');
        seen.push(...files.map((f) => `${f.status}${f.isSymlink ? ' link' : ''}${f.binary ? ' binary' : ''}`));
      }
      for (const kind of ['renamed', 'copied', 'added', 'deleted', 'modified', 'modified binary', 'modified link', 'added link', 'deleted binary']) assert.ok(seen.includes(kind), `the patches hold a ${kind} file (${[...new Set(seen)].join(', ')})`);
    } finally {
      rmSync(repo, { recursive: true, force: true });
    }
  });

  it('says where the two readers disagree, and what git refuses', async () => {
    const patch = 'diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1,2 @@\n-a\n+b\n+c\n';
    const r = await patchHeaders(patch);
    assert.ok(r.ok, JSON.stringify(r));
    const files = parseUnifiedDiff(patch);
    const lying = files.map((f) => ({ ...f, additions: 1 }));
    assert.match(compareWithGit(lying, r.headers)[0]?.message ?? '', /git reads the patch differently: "x" has 2 added and 1 deleted lines/);
    const bad = await patchHeaders('garbage\n@@ -1 +1 @@\n-a\n+b\n');
    assert.equal(bad.ok, false);
    assert.match(bad.ok ? '' : bad.error, /patch fragment without header/);
  });

  it('refuses output that is not what git writes', () => {
    assert.equal(parseGitPatchHeaders('1\t0\tx\0').ok, true);
    assert.equal(parseGitPatchHeaders('').ok, true);
    assert.equal(parseGitPatchHeaders('one\t0\tx\0').ok, false);
    assert.equal(parseGitPatchHeaders('1\t0\tx\0something else\n').ok, false);
  });
});
