/**
 * The sandbox every command from an agent runs in: bubblewrap (bwrap) with fresh namespaces.
 *
 * What a sandboxed process sees and may do:
 * - its own user, mount, pid, ipc, uts, cgroup and network namespaces (`--unshare-all`): no network at all
 *   (only a loopback of its own), no other processes, a hostname of its own;
 * - a root that is an empty, read-only tmpfs holding only: /usr read-only (plus the merged-usr links
 *   /bin /lib /lib64 /sbin, or read-only binds where they are real directories), a handful of /etc files
 *   that programs need (dynamic loader, alternatives, passwd/group, nsswitch, CA certificates, time zone,
 *   hosts/services/protocols), a fresh /proc and /dev, a tmpfs /tmp and a tmpfs HOME (/home/sandbox), the
 *   operator's extra read-only paths, and the work tree read-write at its own (real) path. Nothing else of
 *   the host: not /root, /home, /work, /var, the host's /tmp, nor the rest of /etc (in particular not
 *   /etc/gitconfig, where CI images keep credential helpers and `insteadOf` URLs carrying tokens);
 * - an environment built from nothing: PATH, HOME, TMPDIR, LANG, TERM and the request's own variables.
 *   It is handed to bwrap as bwrap's environment rather than with `--setenv`, so values never appear on a
 *   command line (`/proc/<pid>/cmdline` is readable by every local user, `environ` only by the owner);
 * - no capabilities: `--cap-drop ALL`, bwrap's no_new_privs (setuid programs do not elevate), and no
 *   nested user namespaces (`--disable-userns`) where bwrap supports it. Checked, not assumed:
 *   `sandboxAvailable` runs a probe and refuses the sandbox unless CapEff inside is zero;
 * - a new session (`--new-session`: no TIOCSTI into the caller's terminal), and death with its parent
 *   (`--die-with-parent`); on timeout or abort the whole process group of bwrap is SIGKILLed, and with it
 *   the sandbox's pid namespace, so every descendant dies too.
 *
 * Root: when Steward runs as root, bwrap runs privileged and by default the sandboxed process would be
 * uid 0 with full capabilities. We add `--unshare-user --uid 65534 --gid 65534` (and `--cap-drop ALL`),
 * so inside it is "nobody" with CapEff = CapPrm = CapBnd = 0. Found on this machine: the user namespace
 * bwrap builds maps that inside uid onto the CALLER's uid, i.e. host uid 0, so the kernel still checks file
 * permissions as the owner of root's files: a 0600 root-owned file that is visible in the sandbox is
 * readable (it cannot be written: every bind but the work tree is read-only). That is why containment rests
 * on what is mounted, not on file modes: nothing secret may be visible (hence the minimal /etc). Where a
 * root-run Steward wants file modes enforced as well, it can pass `runAs` (an unprivileged host uid/gid,
 * which must be able to write the work tree, e.g. after a `chown -R`): bwrap is then started as that user
 * and root-only files stay unreadable even in read-only binds. Run as a normal user, the sandboxed process
 * keeps that user's uid (bwrap maps it onto itself) and has no capabilities.
 *
 * Fail closed: bwrap missing, too old, unable to create the namespaces, or the probe seeing any capability
 * ⇒ SandboxRefusedError('unavailable'); nothing is ever run outside the sandbox.
 *
 * No Temporal imports: this module is used by activities and tools alike.
 */
import { spawn } from 'node:child_process';
import { lstatSync, readlinkSync, realpathSync, statSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { argvRefusal } from '../common/argv.js';

export interface SandboxRequest {
  /** program + args; argv[0] a bare program name (resolved via the sandbox PATH) or an absolute path */
  argv: string[];
  /** absolute path; the only writable place; becomes the cwd (mounted at its real path) */
  workTree: string;
  /** relative to workTree (default '.'); must stay inside it, symbolic links included */
  cwd?: string;
  /** program basenames that may be run as argv[0]; '*' allows any */
  allowlist: readonly string[];
  /** kill the whole sandbox (process group) after this; result.timedOut */
  timeoutMs: number;
  /** stdout+stderr kept beyond this are dropped (the TAIL is kept), result.truncated */
  maxOutputBytes: number;
  /** extra variables (names validated); nothing else from process.env leaks in */
  env?: Record<string, string>;
  stdin?: string;
  /** extra read-only paths made visible at the same path (e.g. a toolchain dir), operator-configured */
  roBinds?: readonly string[];
  /** abort kills the sandbox at once; result.aborted */
  signal?: AbortSignal;
  /**
   * Only when Steward runs as root: start bwrap as this unprivileged host user, so that file modes are
   * enforced against the sandbox too (see the module comment). The work tree must be writable by it.
   */
  runAs?: { uid: number; gid: number };
  /**
   * Share the host's network (`--share-net`, and /etc/resolv.conf visible): only for a long-lived
   * server whose registration allows it (MCP servers); commands from agents never get it.
   */
  network?: boolean;
}

export interface SandboxResult {
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  aborted: boolean;
  stdoutTail: string;
  stderrTail: string;
  /** total bytes the sandbox wrote to stdout and stderr, kept or not */
  outputBytes: number;
  truncated: boolean;
  durationMs: number;
}

export type SandboxRefusal = 'not-allowlisted' | 'cwd-outside' | 'unavailable' | 'bad-request';

export class SandboxRefusedError extends Error {
  readonly reason: SandboxRefusal;
  constructor(reason: SandboxRefusal, message: string) {
    super(`sandbox refused (${reason}): ${message}`);
    this.name = 'SandboxRefusedError';
    this.reason = reason;
  }
}

/** The uid/gid a root-run sandbox is mapped to inside its user namespace ("nobody"/"nogroup"). */
export const SANDBOX_UID = 65534;
export const SANDBOX_GID = 65534;
/** HOME inside the sandbox: a tmpfs of its own. */
export const SANDBOX_HOME = '/home/sandbox';
export const SANDBOX_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

const BWRAP_CANDIDATES = ['/usr/bin/bwrap', '/usr/local/bin/bwrap', '/bin/bwrap'];
const TMP_SIZE = 1024 * 1024 * 1024; // tmpfs is memory: cap /tmp and HOME
const HOME_SIZE = 512 * 1024 * 1024;
/** /etc entries programs need; nothing else of the host's /etc is visible. */
const ETC_ENTRIES = [
  'ld.so.cache',
  'ld.so.conf',
  'ld.so.conf.d',
  'alternatives',
  'passwd',
  'group',
  'nsswitch.conf',
  'hosts',
  'services',
  'protocols',
  'ssl/certs',
  'ssl/openssl.cnf',
  'ca-certificates',
  'ca-certificates.conf',
  'localtime',
  'timezone',
  'os-release',
  'debian_version',
];
const MERGED_USR_LINKS = ['/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32'];
/** Host paths a work tree or an extra bind may never be (or be under, for the first three). */
const FORBIDDEN_UNDER = ['/proc', '/sys', '/dev'];
const FORBIDDEN_EXACT = new Set(['/', '/usr', '/etc', '/bin', '/sbin', '/lib', '/lib64', '/boot', '/tmp', '/home', '/root', '/var']);
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** How this machine's bwrap is run; settled by the probe in sandboxAvailable. */
interface Profile {
  /** pass --unshare-user explicitly (needed for --uid/--gid and --disable-userns) */
  userns: boolean;
  disableUserns: boolean;
  tmpfsSize: boolean;
  /** how bwrap reports on fd 3 that the namespaces exist ("child-pid") */
  statusFlag: '--json-status-fd' | '--info-fd';
}
const STRONGEST: Profile = { userns: true, disableUserns: true, tmpfsSize: true, statusFlag: '--json-status-fd' };
let settledProfile: Profile | undefined;
let availability: Promise<{ ok: true; bwrap: string; version: string } | { ok: false; reason: string }> | undefined;

const isRoot = (): boolean => typeof process.getuid === 'function' && process.getuid() === 0;

function refuse(reason: SandboxRefusal, message: string): never {
  throw new SandboxRefusedError(reason, message);
}

function findBwrap(): string | undefined {
  for (const p of BWRAP_CANDIDATES) {
    try {
      const st = statSync(p);
      if (st.isFile() && (st.mode & 0o111) !== 0) return p;
    } catch {
      // not there
    }
  }
  return undefined;
}

function isUnder(path: string, dir: string): boolean {
  const rel = relative(dir, path);
  return rel === '' || (!rel.startsWith('..') && !isAbsolute(rel));
}

function forbiddenHostPath(p: string): boolean {
  return FORBIDDEN_EXACT.has(p) || FORBIDDEN_UNDER.some((d) => p === d || p.startsWith(d + sep));
}

function realPath(p: string, what: string): string {
  let real: string;
  try {
    real = realpathSync(p);
  } catch {
    return refuse('bad-request', `${what} does not exist: ${p}`);
  }
  return real;
}

interface Checked {
  argv: string[];
  workTree: string; // real path
  cwd: string; // real path inside workTree
  roBinds: Array<{ src: string; dest: string }>;
  env: Record<string, string>;
  network: boolean;
}

/** Validates a request (allowlist first: a refused program gets no further). Sync: sandboxArgs is sync. */
function check(req: SandboxRequest): Checked {
  if (!Array.isArray(req.argv)) refuse('bad-request', 'argv is empty');
  // the same rule registration applies to repositories' checks and agent commands (common/argv.ts)
  const argvProblem = argvRefusal(req.argv);
  if (argvProblem) refuse('bad-request', argvProblem);
  const program = req.argv[0] ?? '';
  // The allowlist is a first gate only, against the obvious (an agent calling `curl`, `ssh`, `sudo`): it
  // looks at basename(argv[0]) and nothing more. It is not the containment: an allowlisted shell,
  // interpreter, `make`, `npm` or `git` can run anything that exists inside the sandbox, and an absolute
  // path whose basename is allowlisted may name a file the agent wrote into the work tree. Containment is
  // the namespaces and the mounts above; anything a command can reach is assumed reachable by the agent.
  const name = basename(program);
  if (!req.allowlist.includes('*') && !req.allowlist.includes(name)) {
    refuse('not-allowlisted', `program ${JSON.stringify(name)} is not on the allowlist`);
  }
  if (!Number.isFinite(req.timeoutMs) || req.timeoutMs <= 0) refuse('bad-request', 'timeoutMs must be a positive number');
  if (!Number.isInteger(req.maxOutputBytes) || req.maxOutputBytes < 0) refuse('bad-request', 'maxOutputBytes must be a non-negative integer');
  if (req.runAs !== undefined) {
    const { uid, gid } = req.runAs;
    if (!Number.isInteger(uid) || !Number.isInteger(gid) || uid <= 0 || gid <= 0) refuse('bad-request', 'runAs needs a non-root uid and gid');
    if (!isRoot()) refuse('bad-request', 'runAs needs Steward to run as root');
  }

  if (typeof req.workTree !== 'string' || !isAbsolute(req.workTree)) refuse('bad-request', 'workTree must be an absolute path');
  const workTree = realPath(req.workTree, 'workTree');
  if (!statSync(workTree).isDirectory()) refuse('bad-request', `workTree is not a directory: ${req.workTree}`);
  if (forbiddenHostPath(workTree)) refuse('bad-request', `workTree may not be ${workTree}`);

  const cwdRel = req.cwd ?? '.';
  if (typeof cwdRel !== 'string' || isAbsolute(cwdRel) || cwdRel.includes('\0')) refuse('cwd-outside', `cwd must be relative to the work tree: ${String(cwdRel)}`);
  const cwdLexical = resolve(workTree, cwdRel);
  if (!isUnder(cwdLexical, workTree)) refuse('cwd-outside', `cwd leaves the work tree: ${cwdRel}`);
  let cwd: string;
  try {
    cwd = realpathSync(cwdLexical);
  } catch {
    return refuse('bad-request', `cwd does not exist: ${cwdRel}`);
  }
  if (!isUnder(cwd, workTree)) refuse('cwd-outside', `cwd leaves the work tree through a symbolic link: ${cwdRel}`);
  if (!statSync(cwd).isDirectory()) refuse('bad-request', `cwd is not a directory: ${cwdRel}`);

  const roBinds: Array<{ src: string; dest: string }> = [];
  for (const p of req.roBinds ?? []) {
    if (typeof p !== 'string' || !isAbsolute(p)) refuse('bad-request', `roBinds entries must be absolute paths: ${String(p)}`);
    const dest = resolve(p);
    const src = realPath(dest, 'roBinds entry');
    if (dest === '/' || src === '/' || FORBIDDEN_UNDER.some((d) => src === d || src.startsWith(d + sep) || dest === d || dest.startsWith(d + sep))) {
      refuse('bad-request', `roBinds may not expose ${p}`);
    }
    if (dest === workTree) refuse('bad-request', 'roBinds may not cover the work tree itself');
    roBinds.push({ src, dest });
  }

  const env: Record<string, string> = {
    PATH: SANDBOX_PATH,
    HOME: SANDBOX_HOME,
    TMPDIR: '/tmp',
    LANG: 'C.UTF-8',
    TERM: 'dumb',
  };
  for (const [k, v] of Object.entries(req.env ?? {})) {
    if (!ENV_NAME.test(k)) refuse('bad-request', `bad environment variable name: ${JSON.stringify(k)}`);
    if (typeof v !== 'string' || v.includes('\0')) refuse('bad-request', `bad value for environment variable ${k}`);
    env[k] = v;
  }
  return { argv: req.argv, workTree, cwd, roBinds, env, network: req.network === true };
}

function buildArgs(c: Checked, profile: Profile, runAs: SandboxRequest['runAs']): string[] {
  const args: string[] = [profile.statusFlag, '3', '--unshare-all'];
  if (c.network) args.push('--share-net');
  if (profile.userns) args.push('--unshare-user');
  if (profile.userns && profile.disableUserns) args.push('--disable-userns');
  // As root (and not started as another user) bwrap is privileged: map to nobody in a user namespace of
  // its own so the process has no capabilities (and drop them all in any case).
  if (profile.userns && isRoot() && runAs === undefined) args.push('--uid', String(SANDBOX_UID), '--gid', String(SANDBOX_GID));
  args.push('--cap-drop', 'ALL', '--die-with-parent', '--new-session', '--hostname', 'sandbox');

  args.push('--ro-bind', '/usr', '/usr');
  for (const link of MERGED_USR_LINKS) {
    try {
      const st = lstatSync(link);
      if (st.isSymbolicLink()) args.push('--symlink', readlinkSync(link), link);
      else if (st.isDirectory()) args.push('--ro-bind', link, link);
    } catch {
      // absent on this system
    }
  }
  for (const entry of ETC_ENTRIES) {
    const p = `/etc/${entry}`;
    try {
      const st = lstatSync(p);
      // keep symbolic links as links (e.g. /etc/localtime -> /usr/share/zoneinfo/..., read by tools for the zone name)
      if (st.isSymbolicLink()) args.push('--symlink', readlinkSync(p), p);
      else args.push('--ro-bind', p, p);
    } catch {
      // absent on this system
    }
  }
  if (c.network) {
    // name resolution for a server allowed on the network
    for (const p of ['/etc/resolv.conf', '/etc/gai.conf']) {
      try {
        args.push('--ro-bind', realpathSync(p), p);
      } catch {
        // absent on this system
      }
    }
  }
  args.push('--proc', '/proc', '--dev', '/dev');
  if (profile.tmpfsSize) args.push('--size', String(TMP_SIZE));
  args.push('--tmpfs', '/tmp');
  if (profile.tmpfsSize) args.push('--size', String(HOME_SIZE));
  args.push('--tmpfs', SANDBOX_HOME);

  // Extra read-only binds and the work tree, parents before children so none hides another.
  const mounts = [
    ...c.roBinds.map((b) => ({ flag: '--ro-bind', src: b.src, dest: b.dest })),
    { flag: '--bind', src: c.workTree, dest: c.workTree },
  ];
  const depth = (p: string) => p.split('/').filter(Boolean).length;
  mounts.sort((a, b) => depth(a.dest) - depth(b.dest));
  for (const m of mounts) args.push(m.flag, m.src, m.dest);

  args.push('--remount-ro', '/', '--chdir', c.cwd, '--', ...c.argv);
  return args;
}

/**
 * The bwrap arguments (without the bwrap executable itself) a request runs with, for tests and docs.
 * Throws SandboxRefusedError for a request runSandboxed would refuse. The environment is not in here:
 * see `sandboxEnv`.
 */
export function sandboxArgs(req: SandboxRequest): string[] {
  return buildArgs(check(req), settledProfile ?? STRONGEST, req.runAs);
}

/** The complete environment of a sandboxed process (nothing else is inherited). */
export function sandboxEnv(req: SandboxRequest): Record<string, string> {
  return check(req).env;
}

interface RawRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs a short command and collects everything (for the probe and `--version`). */
function runRaw(file: string, args: string[], timeoutMs: number): Promise<RawRun> {
  return new Promise((resolvePromise) => {
    const child = spawn(file, args, { stdio: ['ignore', 'pipe', 'pipe', 'pipe'], env: { PATH: SANDBOX_PATH, LANG: 'C.UTF-8' }, detached: true });
    let stdout = '';
    let stderr = '';
    child.stdout?.setEncoding('utf8').on('data', (d: string) => (stdout = (stdout + d).slice(-65536)));
    child.stderr?.setEncoding('utf8').on('data', (d: string) => (stderr = (stderr + d).slice(-65536)));
    const timer = setTimeout(() => killGroup(child.pid), timeoutMs);
    child.on('error', (err) => {
      clearTimeout(timer);
      resolvePromise({ code: null, signal: null, stdout, stderr: stderr + String(err) });
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolvePromise({ code, signal, stdout, stderr });
    });
  });
}

function killGroup(pid: number | undefined): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
}

async function probe(): Promise<{ ok: true; bwrap: string; version: string } | { ok: false; reason: string }> {
  if (process.platform !== 'linux') return { ok: false, reason: `bubblewrap sandboxing needs Linux (this is ${process.platform})` };
  const bwrap = findBwrap();
  if (bwrap === undefined) return { ok: false, reason: `bwrap not found (looked at ${BWRAP_CANDIDATES.join(', ')}); install bubblewrap` };
  const ver = await runRaw(bwrap, ['--version'], 10_000);
  const version = /bubblewrap\s+(\S+)/.exec(ver.stdout)?.[1];
  if (ver.code !== 0 || version === undefined) return { ok: false, reason: `${bwrap} --version failed: ${ver.stderr.trim().slice(-500)}` };
  const help = await runRaw(bwrap, ['--help'], 10_000);
  const helpText = help.stdout + help.stderr;
  for (const needed of ['--unshare-all', '--die-with-parent', '--new-session', '--cap-drop', '--remount-ro', '--chdir']) {
    if (!helpText.includes(needed)) return { ok: false, reason: `bwrap ${version} lacks ${needed}; a newer bubblewrap is needed` };
  }
  const tmpfsSize = helpText.includes('--size');
  const statusFlag = helpText.includes('--json-status-fd') ? ('--json-status-fd' as const) : ('--info-fd' as const);
  const disable = helpText.includes('--disable-userns');
  // strongest first; a profile is accepted only if the probe inside shows no effective capabilities
  const candidates: Profile[] = [
    ...(disable ? [{ userns: true, disableUserns: true, tmpfsSize, statusFlag }] : []),
    { userns: true, disableUserns: false, tmpfsSize, statusFlag },
    { userns: false, disableUserns: false, tmpfsSize, statusFlag },
  ];
  const dir = await mkdtemp(join(tmpdir(), 'steward-sandbox-probe-'));
  const failures: string[] = [];
  try {
    const c = check({ argv: ['cat', '/proc/self/status'], workTree: dir, allowlist: ['cat'], timeoutMs: 10_000, maxOutputBytes: 65536 });
    for (const profile of candidates) {
      const run = await runRaw(bwrap, buildArgs(c, profile, undefined), 15_000);
      const capEff = /^CapEff:\s*([0-9a-f]+)$/m.exec(run.stdout)?.[1];
      if (run.code === 0 && capEff !== undefined && /^0+$/.test(capEff)) {
        settledProfile = profile;
        return { ok: true, bwrap, version };
      }
      failures.push(run.code === 0 ? `capabilities left inside (CapEff ${capEff ?? '?'})` : run.stderr.trim().slice(-300) || `exit ${String(run.code ?? run.signal)}`);
    }
  } finally {
    await rm(dir, { recursive: true, force: true }).catch(() => undefined);
  }
  return { ok: false, reason: `bwrap ${version} cannot build the sandbox here: ${failures.join(' | ')}` };
}

/** Whether commands can be sandboxed here (probed once, then cached). */
export function sandboxAvailable(): Promise<{ ok: true; bwrap: string; version: string } | { ok: false; reason: string }> {
  availability ??= probe().catch((err: unknown) => ({ ok: false as const, reason: `probe failed: ${String(err)}` }));
  return availability;
}

/** Keeps the last `cap` bytes written to it, and counts them all. */
class Tail {
  private chunks: Buffer[] = [];
  private kept = 0;
  total = 0;
  constructor(private readonly cap: number) {}
  push(b: Buffer): void {
    this.total += b.length;
    if (this.cap === 0 || b.length === 0) return;
    if (b.length >= this.cap) {
      this.chunks = [b.subarray(b.length - this.cap)];
      this.kept = this.cap;
      return;
    }
    this.chunks.push(b);
    this.kept += b.length;
    for (let first = this.chunks[0]; first !== undefined && this.kept - first.length >= this.cap; first = this.chunks[0]) {
      this.chunks.shift();
      this.kept -= first.length;
    }
  }
  get size(): number {
    return Math.min(this.kept, this.cap);
  }
  /** The last n bytes as text, not starting inside a UTF-8 sequence. */
  text(n: number): string {
    if (n <= 0) return '';
    const all = Buffer.concat(this.chunks);
    let start = Math.max(0, all.length - n);
    const limit = Math.min(all.length, start + 3);
    while (start > 0 && start < limit && ((all[start] ?? 0) & 0xc0) === 0x80) start++;
    return all.subarray(start).toString('utf8');
  }
}

/**
 * Runs argv in the sandbox and reports how it ended. Throws SandboxRefusedError before anything runs for a
 * refused request, and 'unavailable' if the sandbox cannot be built. Output is both streams' tails within
 * maxOutputBytes together: each stream gets at least half if it needs it, the other the rest.
 */
export async function runSandboxed(req: SandboxRequest): Promise<SandboxResult> {
  const checked = check(req);
  const avail = await sandboxAvailable();
  if (!avail.ok) refuse('unavailable', avail.reason);
  const args = buildArgs(checked, settledProfile ?? STRONGEST, req.runAs);
  const started = performance.now();
  const emptyResult = (aborted: boolean): SandboxResult => ({
    exitCode: null,
    signal: null,
    timedOut: false,
    aborted,
    stdoutTail: '',
    stderrTail: '',
    outputBytes: 0,
    truncated: false,
    durationMs: 0,
  });
  if (req.signal?.aborted) return emptyResult(true);

  const out = new Tail(req.maxOutputBytes);
  const err = new Tail(req.maxOutputBytes);
  return new Promise<SandboxResult>((resolvePromise, rejectPromise) => {
    const child = spawn(avail.bwrap, args, {
      // bwrap gets exactly the sandbox's environment and passes it on; the status pipe (fd 3) tells us
      // whether the namespaces were built, and is not inherited by the sandboxed program
      stdio: [req.stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe', 'pipe'],
      env: checked.env,
      detached: true, // a process group of its own, killed as a whole
      ...(req.runAs ? { uid: req.runAs.uid, gid: req.runAs.gid } : {}),
    });
    let timedOut = false;
    let aborted = false;
    let namespacesUp = false; // bwrap reported a child pid: the namespaces exist
    let settled = false;
    let status = '';
    const kill = () => killGroup(child.pid);
    const timer = setTimeout(() => {
      timedOut = true;
      kill();
    }, req.timeoutMs);
    const onAbort = () => {
      aborted = true;
      kill();
    };
    req.signal?.addEventListener('abort', onAbort, { once: true });
    let exitGrace: NodeJS.Timeout | undefined;
    const cleanup = () => {
      clearTimeout(timer);
      if (exitGrace) clearTimeout(exitGrace);
      req.signal?.removeEventListener('abort', onAbort);
    };

    child.stdout?.on('data', (b: Buffer) => out.push(b));
    child.stderr?.on('data', (b: Buffer) => err.push(b));
    const statusStream = child.stdio[3];
    if (statusStream && 'on' in statusStream) {
      statusStream.on('data', (b: Buffer) => {
        status = (status + b.toString('utf8')).slice(0, 65536);
        if (status.includes('"child-pid"')) namespacesUp = true;
      });
      statusStream.on('error', () => undefined);
    }
    if (req.stdin !== undefined && child.stdin) {
      child.stdin.on('error', () => undefined); // the program may exit without reading it (EPIPE)
      child.stdin.end(req.stdin);
    }

    const finish = (code: number | null, sig: NodeJS.Signals | null) => {
      if (settled) return;
      settled = true;
      cleanup();
      const durationMs = Math.round(performance.now() - started);
      if (!namespacesUp && !timedOut && !aborted) {
        const why = err.text(2000).trim() || `bwrap exited ${String(code ?? sig)}`;
        rejectPromise(new SandboxRefusedError('unavailable', `bwrap could not build the sandbox: ${why}`));
        return;
      }
      const max = req.maxOutputBytes;
      const half = Math.floor(max / 2);
      const outN = Math.min(out.size, Math.max(half, max - err.size));
      const errN = Math.min(err.size, max - outN);
      const outputBytes = out.total + err.total;
      resolvePromise({
        exitCode: timedOut || aborted ? null : code,
        signal: timedOut || aborted ? 'SIGKILL' : sig,
        timedOut,
        aborted,
        stdoutTail: out.text(outN),
        stderrTail: err.text(errN),
        outputBytes,
        truncated: outputBytes > outN + errN,
        durationMs,
      });
    };
    child.on('error', (e) => {
      if (settled) return;
      settled = true;
      cleanup();
      kill();
      rejectPromise(new SandboxRefusedError('unavailable', `could not start bwrap: ${e.message}`));
    });
    child.on('exit', (code, sig) => {
      // every process of the sandbox dies with its pid namespace; should a pipe still be held open
      // somewhere, do not wait for it for long
      exitGrace = setTimeout(() => {
        child.stdout?.destroy();
        child.stderr?.destroy();
        finish(code, sig);
      }, 2000);
    });
    child.on('close', (code, sig) => finish(code, sig));
  });
}

/** A long-lived request: no time limit of its own and its stdio kept open (MCP servers over stdio). */
export type LongSandboxRequest = Omit<SandboxRequest, 'timeoutMs' | 'maxOutputBytes' | 'stdin' | 'signal'> & {
  /** stderr kept for diagnostics (the tail; default 8 KiB). */
  maxStderrBytes?: number;
  /** How long bwrap may take to build the sandbox (default 15 s). */
  startTimeoutMs?: number;
};

/** A sandboxed process that keeps running, its stdin and stdout as pipes. */
export interface SandboxedProcess {
  pid: number;
  stdin: NodeJS.WritableStream & { destroyed: boolean };
  stdout: NodeJS.ReadableStream;
  /** The last bytes the process wrote to stderr. */
  stderrTail(): string;
  /** Settles when the sandbox has exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Kill the whole sandbox (bwrap's process group, and with it the sandbox's pid namespace). */
  kill(): void;
}

/**
 * Starts argv in the same sandbox as `runSandboxed` (the same checks, arguments and environment)
 * and returns once bwrap has built the namespaces, with stdin and stdout as pipes for a protocol
 * spoken over them. Throws SandboxRefusedError for a refused request, an unavailable sandbox, or
 * a sandbox bwrap could not build.
 */
export async function spawnSandboxed(req: LongSandboxRequest): Promise<SandboxedProcess> {
  const checked = check({ ...req, timeoutMs: 1, maxOutputBytes: 0 });
  const avail = await sandboxAvailable();
  if (!avail.ok) refuse('unavailable', avail.reason);
  const args = buildArgs(checked, settledProfile ?? STRONGEST, req.runAs);
  const child = spawn(avail.bwrap, args, {
    stdio: ['pipe', 'pipe', 'pipe', 'pipe'],
    env: checked.env,
    detached: true,
    ...(req.runAs ? { uid: req.runAs.uid, gid: req.runAs.gid } : {}),
  });
  const err = new Tail(req.maxStderrBytes ?? 8192);
  child.stderr?.on('data', (b: Buffer) => err.push(b));
  // an error of a pipe (the server gone while we write: EPIPE) is seen through `exited`, never thrown
  child.stdin?.on('error', () => undefined);
  child.stdout?.on('error', () => undefined);
  child.stderr?.on('error', () => undefined);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolvePromise) => {
    child.on('exit', (code, signal) => resolvePromise({ code, signal }));
    child.on('error', () => resolvePromise({ code: null, signal: null }));
  });
  await new Promise<void>((resolvePromise, rejectPromise) => {
    let status = '';
    let done = false;
    const finish = (error?: Error) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (error) {
        killGroup(child.pid);
        rejectPromise(error);
      } else resolvePromise();
    };
    const timer = setTimeout(() => finish(new SandboxRefusedError('unavailable', 'bwrap did not build the sandbox in time')), req.startTimeoutMs ?? 15_000);
    const statusStream = child.stdio[3];
    if (statusStream && 'on' in statusStream) {
      statusStream.on('data', (b: Buffer) => {
        status = (status + b.toString('utf8')).slice(0, 65536);
        if (status.includes('"child-pid"')) finish();
      });
      statusStream.on('error', () => undefined);
    }
    child.on('error', (e) => finish(new SandboxRefusedError('unavailable', `could not start bwrap: ${e.message}`)));
    void exited.then(({ code, signal }) => {
      const why = err.text(2000).trim() || `bwrap exited ${String(code ?? signal)}`;
      finish(new SandboxRefusedError('unavailable', `bwrap could not build the sandbox: ${why}`));
    });
  });
  return {
    pid: child.pid ?? -1,
    stdin: child.stdin!,
    stdout: child.stdout!,
    stderrTail: () => err.text(req.maxStderrBytes ?? 8192),
    exited,
    kill: () => killGroup(child.pid),
  };
}
