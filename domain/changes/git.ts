/**
 * Git for agent work trees: resolve a branch, clone at a commit, and turn whatever the agent left in the
 * work tree into a patch (or a list of changed files to build a GitHub tree from).
 *
 * Real git, spawned directly (never through a shell), with an environment built from nothing: no user or
 * system config (GIT_CONFIG_GLOBAL=/dev/null, GIT_CONFIG_NOSYSTEM=1), no prompts (GIT_TERMINAL_PROMPT=0,
 * ssh in batch mode), a fixed identity "Steward <steward@localhost>", and `-c` settings that switch off
 * everything that would run a program or read a file of someone else's choosing (hooks, fsmonitor, user
 * excludes/attributes files, unknown transports).
 *
 * Where the repository lives. The work tree is handed to an agent, which may rewrite anything in it. A
 * `.git` directory inside the work tree would be the agent's to edit too: a `core.fsmonitor` or
 * `core.hooksPath` in .git/config, a hook, an `alias`, a `diff.external`, a `filter.*.clean` driver, or a
 * `core.worktree` pointing elsewhere would run code or lie to us the next time Steward runs git there, on
 * the host and outside the sandbox. Overriding each of those with `-c` is whack-a-mole. So the clone keeps
 * its git directory OUTSIDE the work tree (`git clone --separate-git-dir`), in a sibling directory
 * (`.<name>.steward-git/repo.git`, mode 0700) that the sandbox never mounts: the agent cannot read or write
 * it. Every later command names that directory and the work tree explicitly (`--git-dir`, `--work-tree`),
 * so the `.git` file the clone leaves in the work tree (or a `.git` directory an agent puts in its place)
 * is never consulted; git never adds a path named `.git` either. The `-c` overrides stay as a second
 * layer. What remains agent-controlled is content git reads by design: .gitignore (decides which new files
 * count) and .gitattributes. For the latter, `$GIT_DIR/info/attributes` (which outranks every in-tree
 * .gitattributes) turns off all content conversion (text/eol/ident/filter/working-tree-encoding), so the
 * patch carries exactly the bytes on disk and a `filter=` can never name a driver; drivers would need
 * config, which only we write.
 *
 * No Temporal imports.
 */
import { spawn } from 'node:child_process';
import { isUtf8 } from 'node:buffer';
import { chmod, lstat, mkdir, mkdtemp, readdir, readFile, readlink, rm, rmdir, writeFile } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import { basename, dirname, isAbsolute, join, resolve } from 'node:path';
import { compareWithGit, parseGitPatchHeaders, parseUnifiedDiff, type GitPatchHeaders, type ParsedDiff } from '../../common/changes/policy.js';

export type GitErrorCode = 'failed' | 'branch-not-found' | 'commit-not-found' | 'bad-argument' | 'timeout';

export class GitError extends Error {
  readonly code: GitErrorCode;
  /** the git command, credentials in URLs removed */
  readonly command: string;
  readonly exitCode: number | null;
  /** the end of git's stderr, credentials in URLs removed */
  readonly stderrTail: string;
  constructor(code: GitErrorCode, command: string, message: string, exitCode: number | null = null, stderrTail = '') {
    const cmd = redact(command);
    const tail = redact(stderrTail);
    super(`${redact(message)} [${cmd}]${tail ? `: ${tail}` : ''}`);
    this.name = 'GitError';
    this.code = code;
    this.command = cmd;
    this.exitCode = exitCode;
    this.stderrTail = tail;
  }
}

/** The branch does not exist on the remote. */
export class BranchNotFoundError extends GitError {
  constructor(command: string, branch: string) {
    super('branch-not-found', command, `branch ${JSON.stringify(branch)} not found on the remote`);
    this.name = 'BranchNotFoundError';
  }
}

export type ChangeStatus = 'A' | 'M' | 'D' | 'R' | 'T';
export interface ChangedFile {
  path: string;
  status: ChangeStatus;
  /** the git mode after the change (absent for deletions) */
  mode?: string;
}
export type GitFileMode = '100644' | '100755' | '120000' | '040000' | '160000';

const IDENTITY = { name: 'Steward', email: 'steward@localhost' };
const NETWORK_TIMEOUT_MS = 10 * 60_000;
const LOCAL_TIMEOUT_MS = 5 * 60_000;
const MAX_OUTPUT = 512 * 1024 * 1024;
const SHA = /^[0-9a-f]{40}(?:[0-9a-f]{24})?$/;
const ATTRIBUTES = [
  '# Steward: the bytes in the work tree are the bytes in the repository (no conversion, no filter drivers)',
  '* -text -eol -ident -filter -working-tree-encoding',
  '',
].join('\n');

/** Everything git is told on every command: nothing runs, nothing of the user's is read. */
const HARDENING = [
  'core.hooksPath=/dev/null',
  'core.fsmonitor=false',
  'core.untrackedCache=false',
  'core.excludesFile=/dev/null',
  'core.attributesFile=/dev/null',
  'core.quotePath=true',
  'core.autocrlf=false',
  'core.safecrlf=false',
  'core.askPass=',
  'credential.helper=',
  'protocol.allow=never',
  'protocol.file.allow=always',
  'protocol.https.allow=always',
  'protocol.http.allow=always',
  'protocol.ssh.allow=always',
  'submodule.recurse=false',
  'fetch.recurseSubmodules=false',
  'gc.auto=0',
  'maintenance.auto=false',
  'advice.detachedHead=false',
  'init.defaultBranch=main',
  'color.ui=false',
  'diff.noprefix=false',
  'diff.mnemonicPrefix=false',
  'diff.relative=false',
  'apply.whitespace=nowarn',
].flatMap((kv) => ['-c', kv]);

/** Removes user:password@ from anything that looks like a URL. */
function redact(text: string): string {
  return text.replace(/([a-z][a-z0-9+.-]*:\/\/)[^/@\s]*@/gi, '$1***@');
}

function gitEnv(): Record<string, string> {
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin',
    // ssh reads ~/.ssh for keys and known hosts; git itself reads nothing of HOME (see the -c settings)
    HOME: process.env.HOME ?? '/nonexistent',
    LANG: 'C',
    LC_ALL: 'C',
    GIT_TERMINAL_PROMPT: '0',
    GIT_CONFIG_GLOBAL: '/dev/null',
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_SSH_COMMAND: 'ssh -o BatchMode=yes',
    GIT_AUTHOR_NAME: IDENTITY.name,
    GIT_AUTHOR_EMAIL: IDENTITY.email,
    GIT_COMMITTER_NAME: IDENTITY.name,
    GIT_COMMITTER_EMAIL: IDENTITY.email,
  };
  // what reaching a remote may legitimately need from the operator's environment
  for (const k of ['SSH_AUTH_SOCK', 'SSL_CERT_FILE', 'SSL_CERT_DIR', 'http_proxy', 'https_proxy', 'no_proxy', 'all_proxy', 'HTTP_PROXY', 'HTTPS_PROXY', 'NO_PROXY', 'ALL_PROXY']) {
    const v = process.env[k];
    if (v !== undefined) env[k] = v;
  }
  return env;
}

interface GitRun {
  code: number | null;
  stdout: Buffer;
  stderr: string;
}

interface GitOpts {
  cwd?: string;
  input?: Buffer;
  timeoutMs?: number;
  /** --git-dir/--work-tree for a Steward work tree */
  repo?: { gitDir: string; workTree: string };
}

function describe(args: readonly string[]): string {
  return `git ${args.join(' ')}`;
}

/** Runs git; resolves whatever the exit code (callers decide), rejects on timeout or spawn failure. */
function runGit(args: readonly string[], opts: GitOpts = {}): Promise<GitRun> {
  const full = [...HARDENING, ...(opts.repo ? [`--git-dir=${opts.repo.gitDir}`, `--work-tree=${opts.repo.workTree}`] : []), ...args];
  const command = describe(args);
  return new Promise((resolvePromise, rejectPromise) => {
    const child = spawn('git', full, {
      cwd: opts.cwd ?? opts.repo?.workTree ?? tmpdir(),
      env: gitEnv(),
      stdio: [opts.input ? 'pipe' : 'ignore', 'pipe', 'pipe'],
      detached: true,
    });
    const out: Buffer[] = [];
    let outLen = 0;
    let overflow = false;
    let stderr = '';
    let timedOut = false;
    const killAll = () => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        child.kill('SIGKILL');
      }
    };
    const timer = setTimeout(() => {
      timedOut = true;
      killAll();
    }, opts.timeoutMs ?? LOCAL_TIMEOUT_MS);
    child.stdout?.on('data', (b: Buffer) => {
      outLen += b.length;
      if (outLen > MAX_OUTPUT) {
        overflow = true;
        killAll();
        return;
      }
      out.push(b);
    });
    child.stderr?.on('data', (b: Buffer) => {
      stderr = (stderr + b.toString('utf8')).slice(-4000);
    });
    if (opts.input && child.stdin) {
      child.stdin.on('error', () => undefined);
      child.stdin.end(opts.input);
    }
    child.on('error', (err) => {
      clearTimeout(timer);
      rejectPromise(new GitError('failed', command, `could not run git: ${err.message}`));
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      if (timedOut) rejectPromise(new GitError('timeout', command, 'git timed out', null, tail(stderr)));
      else if (overflow) rejectPromise(new GitError('failed', command, `git wrote more than ${MAX_OUTPUT} bytes`, null, tail(stderr)));
      else resolvePromise({ code, stdout: Buffer.concat(out), stderr });
    });
  });
}

function tail(s: string): string {
  return s.trim().slice(-2000);
}

/** Runs git and throws a GitError unless it exits 0. */
async function gitOk(args: readonly string[], opts: GitOpts = {}): Promise<Buffer> {
  const r = await runGit(args, opts);
  if (r.code !== 0) throw new GitError('failed', describe(args), `git exited ${String(r.code)}`, r.code, tail(r.stderr));
  return r.stdout;
}

function checkUrl(url: string): void {
  if (typeof url !== 'string' || url === '' || url.startsWith('-') || /[\0\n\r]/.test(url)) {
    throw new GitError('bad-argument', 'git', `not a repository URL or path: ${JSON.stringify(redact(String(url)))}`);
  }
}

function checkSha(sha: string, what: string): void {
  if (typeof sha !== 'string' || !SHA.test(sha)) throw new GitError('bad-argument', 'git', `${what} must be a full lowercase commit id: ${JSON.stringify(String(sha))}`);
}

async function checkBranch(branch: string): Promise<void> {
  if (typeof branch !== 'string' || branch === '' || branch.startsWith('-') || /[\0\n\r]/.test(branch)) {
    throw new GitError('bad-argument', 'git check-ref-format', `not a branch name: ${JSON.stringify(String(branch))}`);
  }
  const r = await runGit(['check-ref-format', `refs/heads/${branch}`]);
  if (r.code !== 0) throw new GitError('bad-argument', 'git check-ref-format', `not a branch name: ${JSON.stringify(branch)}`);
}

/**
 * Where the git directory of the work tree `dir` lives: a 0700 sibling directory that the sandbox never
 * mounts. (A caller that wants the agent to be able to `git log` may bind it read-only into the sandbox.)
 */
export function gitHolderFor(dir: string): string {
  const abs = resolve(dir);
  return join(dirname(abs), `.${basename(abs)}.steward-git`);
}
export function gitDirFor(dir: string): string {
  return join(gitHolderFor(dir), 'repo.git');
}

async function repoOf(dir: string): Promise<{ gitDir: string; workTree: string }> {
  const workTree = resolve(dir);
  const gitDir = gitDirFor(workTree);
  try {
    const st = await lstat(join(gitDir, 'HEAD'));
    if (!st.isFile()) throw new Error('HEAD is not a file');
  } catch {
    throw new GitError('bad-argument', 'git', `not a work tree cloned by cloneAt (no ${gitDir}): ${workTree}`);
  }
  return { gitDir, workTree };
}

async function isEmptyOrMissing(p: string): Promise<'missing' | 'empty' | 'used'> {
  try {
    const st = await lstat(p);
    if (!st.isDirectory()) return 'used';
    return (await readdir(p)).length === 0 ? 'empty' : 'used';
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'missing';
    throw err;
  }
}

/** The commit a branch points at on the remote (`git ls-remote`). BranchNotFoundError when it has none. */
export async function resolveBranch(url: string, branch: string): Promise<string> {
  checkUrl(url);
  await checkBranch(branch);
  const ref = `refs/heads/${branch}`;
  const args = ['ls-remote', '--refs', '--', url, ref];
  const out = await gitOk(args, { timeoutMs: NETWORK_TIMEOUT_MS });
  for (const line of out.toString('utf8').split('\n')) {
    const [sha, name] = line.split('\t');
    if (name === ref && sha !== undefined && SHA.test(sha)) return sha;
  }
  throw new BranchNotFoundError(describe(args), branch);
}

/**
 * A fresh clone of `url` into `dir` (missing or empty), checked out detached at `commitSha`, its git
 * directory outside the work tree (see gitDirFor). Local paths and file:// URLs are cloned through the
 * transport (`--no-local`): no hard links into, and no symbolic links out of, the source repository.
 * Afterwards `origin` is removed (and with it every remote-tracking ref), as are reflogs and FETCH_HEAD,
 * so neither the work tree nor its repository holds a route back to the remote.
 */
export async function cloneAt(url: string, commitSha: string, dir: string, opts: { branch?: string } = {}): Promise<void> {
  checkUrl(url);
  checkSha(commitSha, 'commitSha');
  if (opts.branch !== undefined) await checkBranch(opts.branch);
  const workTree = resolve(dir);
  const holder = gitHolderFor(workTree);
  const gitDir = gitDirFor(workTree);
  const dirState = await isEmptyOrMissing(workTree);
  if (dirState === 'used') throw new GitError('bad-argument', 'git clone', `clone target is not empty: ${workTree}`);
  if ((await isEmptyOrMissing(holder)) === 'used') throw new GitError('bad-argument', 'git clone', `git directory already in use: ${holder}`);
  await mkdir(dirname(workTree), { recursive: true });
  await mkdir(holder, { recursive: true, mode: 0o700 });
  await chmod(holder, 0o700);
  const repo = { gitDir, workTree };
  try {
    const cloneArgs = ['clone', '--quiet', '--no-checkout', '--no-local', `--separate-git-dir=${gitDir}`];
    if (opts.branch !== undefined) cloneArgs.push('--branch', opts.branch, '--single-branch');
    cloneArgs.push('--', url, workTree);
    await gitOk(cloneArgs, { cwd: holder, timeoutMs: NETWORK_TIMEOUT_MS });
    const has = async () => (await runGit(['cat-file', '-e', `${commitSha}^{commit}`], { repo })).code === 0;
    if (!(await has())) {
      // not on the cloned branch(es): ask for the commit itself (servers allow reachable commits)
      await runGit(['fetch', '--quiet', '--no-tags', 'origin', commitSha], { repo, timeoutMs: NETWORK_TIMEOUT_MS });
      if (!(await has())) throw new GitError('commit-not-found', 'git cat-file', `commit ${commitSha} is not in the repository`);
    }
    await mkdir(join(gitDir, 'info'), { recursive: true });
    await writeFile(join(gitDir, 'info', 'attributes'), ATTRIBUTES);
    await gitOk(['checkout', '--quiet', '--force', '--detach', commitSha], { repo });
    await gitOk(['remote', 'remove', 'origin'], { repo });
    await rm(join(gitDir, 'logs'), { recursive: true, force: true });
    await rm(join(gitDir, 'FETCH_HEAD'), { force: true });
  } catch (err) {
    await rm(holder, { recursive: true, force: true }).catch(() => undefined);
    if (dirState === 'missing') await rm(workTree, { recursive: true, force: true }).catch(() => undefined);
    else await emptyDir(workTree).catch(() => undefined);
    throw err;
  }
}

async function emptyDir(dir: string): Promise<void> {
  for (const name of await readdir(dir)) await rm(join(dir, name), { recursive: true, force: true });
}

/** Stages everything in the work tree (new, modified, deleted, mode changes), in the index outside it. */
async function stageAll(repo: { gitDir: string; workTree: string }): Promise<void> {
  await gitOk(['add', '--all', '--', '.'], { repo });
}

const DIFF_FLAGS = ['--binary', '--full-index', '--no-renames', '--no-ext-diff', '--no-textconv', '--no-color', '--src-prefix=a/', '--dst-prefix=b/'];

/**
 * Everything the agent left changed relative to `baseSha`, as a patch `git apply --index` takes: new
 * (untracked, not ignored) files, deletions, modifications, mode changes and symbolic links, binary files
 * base85-encoded. When a text file is not valid UTF-8 the patch is rebuilt with every file in binary form,
 * so that the string returned carries the bytes exactly.
 */
export async function diffWorkTree(dir: string, baseSha: string): Promise<{ patch: string; files: string[] }> {
  checkSha(baseSha, 'baseSha');
  const repo = await repoOf(dir);
  await stageAll(repo);
  let patch = await gitOk(['diff', '--cached', ...DIFF_FLAGS, baseSha, '--'], { repo });
  if (!isUtf8(patch)) {
    const attrs = join(repo.gitDir, 'info', 'attributes');
    await writeFile(attrs, `${ATTRIBUTES}* -diff\n`);
    try {
      patch = await gitOk(['diff', '--cached', ...DIFF_FLAGS, baseSha, '--'], { repo });
    } finally {
      await writeFile(attrs, ATTRIBUTES);
    }
  }
  const names = await gitOk(['diff', '--cached', '--name-only', '-z', '--no-renames', baseSha, '--'], { repo });
  const files = names.toString('utf8').split('\0').filter((s) => s !== '');
  return { patch: patch.toString('utf8'), files };
}

/** Applies a patch to the work tree and index (`git apply --index`); with `check`, only says whether it would. */
export async function applyPatch(dir: string, patch: string, opts: { check?: boolean } = {}): Promise<{ ok: true } | { ok: false; error: string }> {
  const repo = await repoOf(dir);
  const args = ['apply', '--index', '--binary', '--whitespace=nowarn', ...(opts.check ? ['--check'] : []), '-'];
  const r = await runGit(args, { repo, input: Buffer.from(patch, 'utf8') });
  if (r.code === 0) return { ok: true };
  return { ok: false, error: redact(tail(r.stderr)) || `git apply exited ${String(r.code)}` };
}

/** What changed relative to `baseSha` (renames as a deletion plus an addition), with the new modes. */
export async function changedFiles(dir: string, baseSha: string): Promise<ChangedFile[]> {
  checkSha(baseSha, 'baseSha');
  const repo = await repoOf(dir);
  await stageAll(repo);
  const raw = await gitOk(['diff', '--cached', '--raw', '-z', '--no-renames', '--full-index', baseSha, '--'], { repo });
  const parts = raw.toString('utf8').split('\0');
  const result: ChangedFile[] = [];
  for (let i = 0; i + 1 < parts.length; i += 2) {
    const meta = parts[i] ?? '';
    const path = parts[i + 1] ?? '';
    // ":<old mode> <new mode> <old sha> <new sha> <status>"
    const m = /^:(\d{6}) (\d{6}) [0-9a-f]+ [0-9a-f]+ ([A-Z])\d*$/.exec(meta);
    if (!m || path === '') throw new GitError('failed', 'git diff --raw', `unexpected output: ${JSON.stringify(meta)}`);
    const status = m[3] as string;
    if (!['A', 'M', 'D', 'R', 'T'].includes(status)) throw new GitError('failed', 'git diff --raw', `unexpected status ${status} for ${path}`);
    result.push(status === 'D' ? { path, status: 'D' } : { path, status: status as ChangeStatus, mode: m[2] as string });
  }
  return result;
}

/**
 * Resolves a repository-relative path inside the work tree without following symbolic links on the way
 * (a link the agent made must not lead Steward to read a host file). The last component is not followed.
 */
async function safePath(dir: string, path: string, what: string): Promise<string> {
  const root = resolve(dir);
  const segments = typeof path === 'string' ? path.split('/') : [];
  if (typeof path !== 'string' || path === '' || isAbsolute(path) || path.includes('\0') || segments.some((s) => s === '' || s === '.' || s === '..' || s === '.git')) {
    throw new GitError('bad-argument', what, `not a repository path: ${JSON.stringify(String(path))}`);
  }
  let cur = root;
  for (const seg of segments.slice(0, -1)) {
    cur = join(cur, seg);
    const st = await lstat(cur).catch(() => undefined);
    if (!st?.isDirectory()) throw new GitError('bad-argument', what, `${path}: ${seg} is not a directory in the work tree`);
  }
  return join(root, path);
}

/**
 * The content git would record for a work-tree path: a regular file's bytes, or a symbolic link's
 * target (never what it points at).
 */
export async function readFileAtWorkTree(dir: string, path: string): Promise<Buffer> {
  const full = await safePath(dir, path, 'read');
  const st = await lstat(full).catch(() => undefined);
  if (st === undefined) throw new GitError('bad-argument', 'read', `${path}: no such file in the work tree`);
  if (st.isSymbolicLink()) return readlink(full, { encoding: 'buffer' });
  if (!st.isFile()) throw new GitError('bad-argument', 'read', `${path}: not a regular file or symbolic link`);
  return readFile(full);
}

/** The git mode of a work-tree path, from the file system (executable = the owner's x bit, as git does). */
export async function fileMode(dir: string, path: string): Promise<GitFileMode> {
  const full = await safePath(dir, path, 'mode');
  const st = await lstat(full).catch(() => undefined);
  if (st === undefined) throw new GitError('bad-argument', 'mode', `${path}: no such file in the work tree`);
  if (st.isSymbolicLink()) return '120000';
  if (st.isDirectory()) return (await lstat(join(full, '.git')).catch(() => undefined)) ? '160000' : '040000';
  if (!st.isFile()) throw new GitError('bad-argument', 'mode', `${path}: not a regular file or symbolic link`);
  return st.mode & 0o100 ? '100755' : '100644';
}

/** A new private (0700) directory under the OS temp directory. */
export async function makeTempDir(prefix: string): Promise<string> {
  if (!/^[A-Za-z0-9._-]*$/.test(prefix)) throw new GitError('bad-argument', 'mkdtemp', `bad temp dir prefix: ${JSON.stringify(prefix)}`);
  const dir = await mkdtemp(join(tmpdir(), prefix));
  await chmod(dir, 0o700);
  return dir;
}

/**
 * Removes a directory tree (and the git directory cloneAt put beside it), tolerating whatever is missing.
 * Directories an agent made unwritable are made writable first. Never throws; refuses / , HOME and TMPDIR.
 */
export async function removeDir(dir: string): Promise<void> {
  if (typeof dir !== 'string' || dir === '') return;
  const abs = resolve(dir);
  if (abs === '/' || abs === resolve(homedir()) || abs === resolve(tmpdir())) return;
  for (const target of [abs, gitHolderFor(abs)]) {
    try {
      await rm(target, { recursive: true, force: true, maxRetries: 2 });
    } catch {
      await makeWritable(target).catch(() => undefined);
      await rm(target, { recursive: true, force: true }).catch(() => undefined);
      await rmdir(target).catch(() => undefined);
    }
  }
}

async function makeWritable(dir: string): Promise<void> {
  const st = await lstat(dir).catch(() => undefined);
  if (!st?.isDirectory()) return;
  await chmod(dir, 0o700).catch(() => undefined);
  for (const name of await readdir(dir).catch(() => [] as string[])) await makeWritable(join(dir, name));
}

/**
 * git's own reading of a patch's headers (`git apply --numstat --summary -z`, nothing applied):
 * its files with their line counts, creations, deletions and mode changes, checked by
 * common/repo-policy's zod parser; an error when git cannot read the patch.
 */
export async function patchHeaders(patch: string): Promise<{ ok: true; headers: GitPatchHeaders } | { ok: false; error: string }> {
  const r = await runGit(['apply', '--numstat', '--summary', '-z', '-'], { input: Buffer.from(patch, 'utf8') });
  if (r.code !== 0) return { ok: false, error: redact(tail(r.stderr)) || `git apply exited ${String(r.code)}` };
  return parseGitPatchHeaders(r.stdout.toString('utf8'));
}

/**
 * A patch as the gate reads it: the repository change policy's records (parseUnifiedDiff: names,
 * modes, hunks, added lines), with git's reading of its headers (`patchHeaders`: files, line
 * counts, creations, deletions, renames, copies, modes) held against them. A patch git cannot
 * read, or reads differently, gets parse errors (the gate's `unparseable`); a patch the parser
 * already refused, or one without files, is left as it was.
 */
export async function readPatch(patch: string): Promise<ParsedDiff> {
  const files = parseUnifiedDiff(patch);
  if (files.errors.length > 0 || files.length === 0) return files;
  const git = await patchHeaders(patch);
  const errors = git.ok ? compareWithGit(files, git.headers) : [{ line: 0, message: `git cannot read the patch: ${git.error}` }];
  return Object.assign([...files], { errors });
}
