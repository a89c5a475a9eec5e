/**
 * Git for agent work trees against real git and real (bare) repositories: clone at a commit, the patch of
 * everything an agent left behind, applying it elsewhere, and an agent that tampers with `.git`.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, lstat, mkdir, readFile, readlink, rm, stat, symlink, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  applyPatch,
  BranchNotFoundError,
  changedFiles,
  cloneAt,
  diffWorkTree,
  fileMode,
  GitError,
  gitDirFor,
  gitHolderFor,
  makeTempDir,
  readFileAtWorkTree,
  removeDir,
  resolveBranch,
} from '../../domain/changes/git.js';
import { runSandboxed, sandboxAvailable } from '../../domain/sandbox.js';
import { needs } from '../helpers/requirements.js';

/** Why the sandboxed tests are skipped here (outside CI; with CI=true they run and fail), or false. */
const noSandbox = await needs('bubblewrap');

const gitEnv = {
  PATH: process.env.PATH ?? '/usr/bin:/bin',
  HOME: '/nonexistent',
  GIT_CONFIG_GLOBAL: '/dev/null',
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_AUTHOR_NAME: 'Test',
  GIT_AUTHOR_EMAIL: 'test@example.invalid',
  GIT_COMMITTER_NAME: 'Test',
  GIT_COMMITTER_EMAIL: 'test@example.invalid',
};
/** Plain git for setting up fixtures (and for the "what an unprotected git would do" control). */
const g = (cwd: string, ...args: string[]): string => execFileSync('git', args, { cwd, env: gitEnv, stdio: ['ignore', 'pipe', 'pipe'] }).toString().trim();
/** Git on a Steward work tree, through its outside git directory. */
const gw = (dir: string, ...args: string[]): string => g(dir, `--git-dir=${gitDirFor(dir)}`, `--work-tree=${dir}`, ...args);

const BINARY = Buffer.from([0, 1, 2, 3, 255, 254, 0, 10, 13, 0x80, 0x81, 0, 42]);

describe('git for agent work trees', () => {
  let root: string;
  let bare: string;
  let seed: string;
  let c1: string; // first commit on main
  let base: string; // main's tip: the base the agent works from
  let feature: string; // a commit only on the branch "feature"
  let n = 0;
  const fresh = () => join(root, `wt-${++n}`);

  before(async () => {
    root = await makeTempDir('steward-git-test-');
    bare = join(root, 'origin.git');
    seed = join(root, 'seed');
    g(root, 'init', '-q', '--bare', '-b', 'main', bare);
    g(root, 'init', '-q', '-b', 'main', seed);
    await writeFile(join(seed, 'mod.txt'), 'line 1\nline 2\nline 3\n');
    await writeFile(join(seed, 'del.txt'), 'to be deleted\n');
    g(seed, 'add', '-A');
    g(seed, 'commit', '-q', '-m', 'first');
    c1 = g(seed, 'rev-parse', 'HEAD');
    await writeFile(join(seed, 'run.sh'), '#!/bin/sh\necho run\n');
    await writeFile(join(seed, 'bin.dat'), BINARY);
    await writeFile(join(seed, 'typechange.txt'), 'a file that becomes a link\n');
    await mkdir(join(seed, 'dir'));
    await writeFile(join(seed, 'dir', 'keep.txt'), 'kept\n');
    await writeFile(join(seed, '.gitignore'), 'ignored.log\n');
    g(seed, 'add', '-A');
    g(seed, 'commit', '-q', '-m', 'second');
    base = g(seed, 'rev-parse', 'HEAD');
    g(seed, 'checkout', '-q', '-b', 'feature');
    await writeFile(join(seed, 'feature.txt'), 'feature\n');
    g(seed, 'add', '-A');
    g(seed, 'commit', '-q', '-m', 'feature');
    feature = g(seed, 'rev-parse', 'HEAD');
    g(seed, 'push', '-q', bare, 'main', 'feature');
  });

  after(async () => {
    await removeDir(root);
  });

  it('resolves a branch to its commit (path and file:// URL); a missing branch is a typed error', async () => {
    assert.equal(await resolveBranch(bare, 'main'), base);
    assert.equal(await resolveBranch(`file://${bare}`, 'feature'), feature);
    await assert.rejects(resolveBranch(bare, 'no-such-branch'), (e: unknown) => e instanceof BranchNotFoundError && e instanceof GitError && e.code === 'branch-not-found');
    await assert.rejects(resolveBranch(bare, '--upload-pack=touch /tmp/x'), (e: unknown) => e instanceof GitError && e.code === 'bad-argument');
    await assert.rejects(resolveBranch('--upload-pack=touch /tmp/x', 'main'), (e: unknown) => e instanceof GitError && e.code === 'bad-argument');
    // transports that run commands are off
    const marker = join(root, 'ext-transport-ran');
    await assert.rejects(resolveBranch(`ext::sh -c touch% ${marker}`, 'main'), (e: unknown) => e instanceof GitError && e.code === 'failed');
    await assert.rejects(cloneAt(`ext::sh -c touch% ${marker}`, base, fresh()), (e: unknown) => e instanceof GitError);
    assert.equal(existsSync(marker), false);
  });

  it('never puts credentials from a URL into an error', async () => {
    const err = await resolveBranch('http://user:hunter2-token@127.0.0.1:9/repo.git', 'main').then(
      () => assert.fail('expected a failure'),
      (e: unknown) => e,
    );
    assert.ok(err instanceof GitError);
    assert.equal(err.code, 'failed');
    for (const text of [err.message, err.command, err.stderrTail]) assert.ok(!text.includes('hunter2'), text);
    assert.match(err.command, /^git ls-remote/);
  });

  it('clones at a commit, detached, with the git directory outside the work tree and no remote left', async () => {
    const dir = fresh();
    await cloneAt(bare, base, dir);
    assert.equal(gw(dir, 'rev-parse', 'HEAD'), base);
    assert.throws(() => gw(dir, 'symbolic-ref', '-q', 'HEAD')); // detached
    assert.equal(gw(dir, 'remote'), '');
    assert.doesNotMatch(await readFile(join(gitDirFor(dir), 'config'), 'utf8'), /url|origin/);
    assert.equal(existsSync(join(gitDirFor(dir), 'FETCH_HEAD')), false);
    assert.equal(await readFile(join(dir, 'mod.txt'), 'utf8'), 'line 1\nline 2\nline 3\n');
    assert.deepEqual(await readFile(join(dir, 'bin.dat')), BINARY);
    // the work tree holds at most a .git FILE naming the outside directory; that directory is private
    assert.ok((await lstat(join(dir, '.git'))).isFile());
    assert.ok(!gitDirFor(dir).startsWith(`${dir}/`));
    assert.equal((await stat(gitHolderFor(dir))).mode & 0o777, 0o700);
    assert.equal(gw(dir, 'status', '--porcelain'), '');
  });

  it('clones through a file:// URL, an older commit, a named branch, and a commit not on the branch cloned', async () => {
    const old = fresh();
    await cloneAt(`file://${bare}`, c1, old);
    assert.equal(gw(old, 'rev-parse', 'HEAD'), c1);
    assert.equal(existsSync(join(old, 'run.sh')), false);
    const branch = fresh();
    await cloneAt(bare, feature, branch, { branch: 'feature' });
    assert.equal(await readFile(join(branch, 'feature.txt'), 'utf8'), 'feature\n');
    const offBranch = fresh();
    await cloneAt(`file://${bare}`, feature, offBranch, { branch: 'main' });
    assert.equal(gw(offBranch, 'rev-parse', 'HEAD'), feature);
  });

  it('refuses a used target, and cleans up after a commit that does not exist so a retry can succeed', async () => {
    const used = fresh();
    await mkdir(used);
    await writeFile(join(used, 'x'), 'x');
    await assert.rejects(cloneAt(bare, base, used), (e: unknown) => e instanceof GitError && e.code === 'bad-argument');
    const dir = fresh();
    await assert.rejects(cloneAt(bare, 'f'.repeat(40), dir), (e: unknown) => e instanceof GitError && e.code === 'commit-not-found');
    assert.equal(existsSync(dir), false);
    assert.equal(existsSync(gitHolderFor(dir)), false);
    await cloneAt(bare, base, dir);
    assert.equal(gw(dir, 'rev-parse', 'HEAD'), base);
    await assert.rejects(cloneAt(bare, 'not-a-sha', fresh()), (e: unknown) => e instanceof GitError && e.code === 'bad-argument');
  });

  /** What an agent does to a work tree: every kind of change. */
  async function agentEdits(dir: string): Promise<void> {
    await writeFile(join(dir, 'mod.txt'), 'line 1\nline two, changed\nline 3\n');
    await unlink(join(dir, 'del.txt'));
    await writeFile(join(dir, 'new.txt'), 'brand new\n');
    await mkdir(join(dir, 'newdir', 'nested'), { recursive: true });
    await writeFile(join(dir, 'newdir', 'nested', 'deep.txt'), 'deep\n');
    await chmod(join(dir, 'run.sh'), 0o755);
    await writeFile(join(dir, 'bin.dat'), Buffer.concat([BINARY, Buffer.from([0, 0, 7])]));
    await writeFile(join(dir, 'new.bin'), Buffer.from([0, 159, 146, 150, 0, 255]));
    await unlink(join(dir, 'typechange.txt'));
    await symlink('dir/keep.txt', join(dir, 'typechange.txt'));
    await symlink('/etc/passwd', join(dir, 'link-out'));
    await writeFile(join(dir, 'ignored.log'), 'ignored by .gitignore\n');
  }

  it('diffs everything the agent left (new, deleted, modified, executable, binary, links), and the patch rebuilds the same tree elsewhere', async () => {
    const dir = fresh();
    await cloneAt(bare, base, dir);
    await agentEdits(dir);
    const { patch, files } = await diffWorkTree(dir, base);
    assert.deepEqual(
      [...files].sort(),
      ['bin.dat', 'del.txt', 'link-out', 'mod.txt', 'new.bin', 'new.txt', 'newdir/nested/deep.txt', 'run.sh', 'typechange.txt'],
    );
    assert.match(patch, /^deleted file mode 100644$/m);
    assert.match(patch, /^new file mode 100644$/m);
    assert.match(patch, /^old mode 100644\nnew mode 100755$/m);
    assert.match(patch, /^new file mode 120000$/m);
    assert.match(patch, /^GIT binary patch$/m);
    assert.match(patch, /^\+line two, changed$/m);
    assert.doesNotMatch(patch, /ignored by \.gitignore/);

    const other = fresh();
    await cloneAt(bare, base, other);
    assert.deepEqual(await applyPatch(other, patch, { check: true }), { ok: true });
    assert.equal(gw(other, 'status', '--porcelain'), '', '--check changes nothing');
    assert.deepEqual(await applyPatch(other, patch), { ok: true });
    assert.equal(gw(other, 'write-tree'), gw(dir, 'write-tree'));
    assert.deepEqual(await readFile(join(other, 'bin.dat')), await readFile(join(dir, 'bin.dat')));
    assert.deepEqual(await readFile(join(other, 'new.bin')), Buffer.from([0, 159, 146, 150, 0, 255]));
    assert.ok((await stat(join(other, 'run.sh'))).mode & 0o100);
    assert.equal(await readlink(join(other, 'typechange.txt')), 'dir/keep.txt');
    assert.equal(existsSync(join(other, 'del.txt')), false);
  });

  it('carries a text file that is not UTF-8 byte for byte', async () => {
    const dir = fresh();
    await cloneAt(bare, base, dir);
    const latin1 = Buffer.from('caf\xe9 cr\xe8me\n', 'latin1');
    await writeFile(join(dir, 'latin1.txt'), latin1);
    await writeFile(join(dir, 'mod.txt'), 'utf-8 stays readable: café\n');
    const { patch } = await diffWorkTree(dir, base);
    const other = fresh();
    await cloneAt(bare, base, other);
    assert.deepEqual(await applyPatch(other, patch), { ok: true });
    assert.deepEqual(await readFile(join(other, 'latin1.txt')), latin1);
    assert.equal(await readFile(join(other, 'mod.txt'), 'utf8'), 'utf-8 stays readable: café\n');
  });

  it('--check reports a patch that conflicts, and leaves the tree alone', async () => {
    const dir = fresh();
    await cloneAt(bare, base, dir);
    await writeFile(join(dir, 'mod.txt'), 'line 1\nline two, changed\nline 3\n');
    const { patch } = await diffWorkTree(dir, base);
    const other = fresh();
    await cloneAt(bare, base, other);
    await writeFile(join(other, 'mod.txt'), 'somebody else rewrote this\n');
    gw(other, 'add', '-A');
    const checked = await applyPatch(other, patch, { check: true });
    assert.equal(checked.ok, false);
    assert.match(checked.ok ? '' : checked.error, /mod\.txt/);
    assert.equal(await readFile(join(other, 'mod.txt'), 'utf8'), 'somebody else rewrote this\n');
    const applied = await applyPatch(other, patch);
    assert.equal(applied.ok, false);
  });

  it('lists changed files with statuses and modes, and reads them as git would record them', async () => {
    const dir = fresh();
    await cloneAt(bare, base, dir);
    await agentEdits(dir);
    const changes = await changedFiles(dir, base);
    const byPath = Object.fromEntries(changes.map((c) => [c.path, c]));
    assert.deepEqual(byPath['new.txt'], { path: 'new.txt', status: 'A', mode: '100644' });
    assert.deepEqual(byPath['mod.txt'], { path: 'mod.txt', status: 'M', mode: '100644' });
    assert.deepEqual(byPath['del.txt'], { path: 'del.txt', status: 'D' });
    assert.deepEqual(byPath['run.sh'], { path: 'run.sh', status: 'M', mode: '100755' });
    assert.deepEqual(byPath['typechange.txt'], { path: 'typechange.txt', status: 'T', mode: '120000' });
    assert.deepEqual(byPath['link-out'], { path: 'link-out', status: 'A', mode: '120000' });
    assert.equal(byPath['ignored.log'], undefined);
    assert.equal(changes.length, 9);

    assert.deepEqual(await readFileAtWorkTree(dir, 'bin.dat'), Buffer.concat([BINARY, Buffer.from([0, 0, 7])]));
    // a link is read as its target, never followed to a host file
    assert.equal((await readFileAtWorkTree(dir, 'link-out')).toString(), '/etc/passwd');
    assert.equal(await fileMode(dir, 'run.sh'), '100755');
    assert.equal(await fileMode(dir, 'mod.txt'), '100644');
    assert.equal(await fileMode(dir, 'link-out'), '120000');
    await symlink('/etc', join(dir, 'etc-link'));
    for (const bad of ['etc-link/passwd', '../seed/mod.txt', '/etc/passwd', '.git', 'dir/../../x', '']) {
      await assert.rejects(readFileAtWorkTree(dir, bad), (e: unknown) => e instanceof GitError && e.code === 'bad-argument', bad);
    }
  });

  it('an agent tampering with .git (hooks, fsmonitor, a .git file pointing elsewhere, filter attributes) runs nothing and changes nothing', async () => {
    const dir = fresh();
    await cloneAt(bare, base, dir);
    const marker = join(root, `pwned-${process.pid}`);
    const evil = join(dir, 'evil.sh');
    await writeFile(evil, `#!/bin/sh\necho "$0 $*" >> '${marker}'\nexit 0\n`, { mode: 0o755 });
    // 1. an evil repository inside the work tree, and the .git file pointed at it
    const evilGit = join(dir, 'evil-gitdir');
    g(dir, 'init', '-q', '--bare', evilGit);
    g(dir, `--git-dir=${evilGit}`, 'config', 'core.fsmonitor', evil);
    g(dir, `--git-dir=${evilGit}`, 'config', 'core.bare', 'false');
    await writeFile(join(evilGit, 'hooks', 'post-index-change'), `#!/bin/sh\n'${evil}' hook\n`, { mode: 0o755 });
    await writeFile(join(dir, '.git'), `gitdir: ${evilGit}\n`);
    // control: a git that trusts the work tree runs the agent's program
    g(dir, 'status', '--porcelain');
    assert.ok(existsSync(marker), 'the control did not fire: the tampering would not have been dangerous');
    await rm(marker);
    // 2. attributes naming a filter driver, and a .git DIRECTORY with hooks and config
    await writeFile(join(dir, '.gitattributes'), '* filter=evil diff=evil\n');
    await writeFile(join(dir, 'mod.txt'), 'changed by the agent\n');
    const { patch, files } = await diffWorkTree(dir, base);
    const changes = await changedFiles(dir, base);
    assert.equal(existsSync(marker), false, 'a program of the agent ran');
    assert.ok(files.includes('mod.txt') && files.includes('.gitattributes') && files.includes('evil.sh'));
    assert.ok(!files.some((f) => f === '.git' || f.startsWith('.git/')));
    assert.ok(changes.every((c) => !c.path.startsWith('.git/') && c.path !== '.git'));
    assert.match(patch, /^\+changed by the agent$/m);

    await rm(join(dir, '.git'), { force: true });
    await mkdir(join(dir, '.git', 'hooks'), { recursive: true });
    await writeFile(join(dir, '.git', 'config'), `[core]\n\tfsmonitor = ${evil}\n\thooksPath = .git/hooks\n\tworktree = /\n[alias]\n\tdiff = !${evil}\n`);
    await writeFile(join(dir, '.git', 'HEAD'), 'ref: refs/heads/main\n');
    for (const hook of ['post-commit', 'pre-commit', 'post-checkout', 'post-index-change']) await writeFile(join(dir, '.git', 'hooks', hook), `#!/bin/sh\n'${evil}' ${hook}\n`, { mode: 0o755 });
    const again = await diffWorkTree(dir, base);
    assert.equal(again.patch, patch);
    assert.equal(existsSync(marker), false, 'a program of the agent ran');
    // and our repository still applies cleanly elsewhere
    const other = fresh();
    await cloneAt(bare, base, other);
    assert.deepEqual(await applyPatch(other, again.patch), { ok: true });
    assert.equal(await readFile(join(other, 'mod.txt'), 'utf8'), 'changed by the agent\n');
    assert.equal(existsSync(marker), false);
  });

  it('the git directory is out of the sandboxed agent\'s reach', { skip: noSandbox }, async () => {
    const avail = await sandboxAvailable();
    assert.ok(avail.ok, avail.ok ? '' : avail.reason);
    const dir = fresh();
    await cloneAt(bare, base, dir);
    const gitDir = gitDirFor(dir);
    const r = await runSandboxed({
      argv: ['sh', '-c', `cat '${gitDir}/config' 2>&1; echo '[core] fsmonitor = /bin/false' >> '${gitDir}/config' 2>&1 || echo BLOCKED; ls -a`],
      workTree: dir,
      allowlist: ['sh'],
      timeoutMs: 10_000,
      maxOutputBytes: 65536,
    });
    assert.match(r.stdoutTail, /No such file or directory/);
    assert.match(r.stdoutTail, /BLOCKED/);
    assert.doesNotMatch(await readFile(join(gitDir, 'config'), 'utf8'), /fsmonitor/);
  });

  it('makes private temp dirs and removes them (with their git directory), tolerating read-only and missing ones', async () => {
    const tmp = await makeTempDir('steward-git-test-tmp-');
    assert.ok(tmp.startsWith(tmpdir()));
    assert.equal((await stat(tmp)).mode & 0o777, 0o700);
    const dir = join(tmp, 'work');
    await cloneAt(bare, base, dir);
    await mkdir(join(dir, 'locked', 'inner'), { recursive: true });
    await writeFile(join(dir, 'locked', 'inner', 'f'), 'x');
    await chmod(join(dir, 'locked', 'inner'), 0o500);
    await chmod(join(dir, 'locked'), 0o500);
    await removeDir(dir);
    assert.equal(existsSync(dir), false);
    assert.equal(existsSync(gitHolderFor(dir)), false);
    await removeDir(dir); // again: nothing there
    await removeDir(tmp);
    assert.equal(existsSync(tmp), false);
    await assert.rejects(makeTempDir('../escape'), (e: unknown) => e instanceof GitError);
  });
});
