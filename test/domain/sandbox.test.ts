/**
 * The bubblewrap sandbox, attacked: every test is an attempt to get out (write, read, connect, outlive,
 * flood) and asserts the concrete thing the attempt would have produced did not happen on the host.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { chmod, chown, mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { homedir, networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { runSandboxed, sandboxArgs, spawnSandboxed, sandboxAvailable, SandboxRefusedError, type SandboxRequest, type SandboxResult } from '../../domain/sandbox.js';
import { needs } from '../helpers/requirements.js';

const isRoot = process.getuid?.() === 0;
const have = (p: string) => existsSync(p);

/** Host processes whose command line contains `marker` (to prove nothing outlived the sandbox). */
function hostProcessesWith(marker: string): number[] {
  const pids: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const cmd = readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0').join(' ');
      if (cmd.includes(marker)) pids.push(Number(name));
    } catch {
      // exited meanwhile
    }
  }
  return pids;
}

/** Waits (bounded) until no host process carries `marker`; returns those left. */
async function waitGone(marker: string, ms = 5000): Promise<number[]> {
  const deadline = Date.now() + ms;
  let left = hostProcessesWith(marker);
  while (left.length > 0 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    left = hostProcessesWith(marker);
  }
  return left;
}

describe('sandbox (bubblewrap)', { skip: await needs('bubblewrap') }, () => {
  let base: string; // host temp dir: base/work is the work tree, base/sibling is not mounted
  let work: string;
  let sibling: string;
  const cleanup: string[] = [];

  const req = (argv: string[], extra: Partial<SandboxRequest> = {}): SandboxRequest => ({
    argv,
    workTree: work,
    allowlist: ['sh', 'cat', 'env', 'id', 'sleep', 'yes', 'seq', 'touch', 'ls', 'pwd', 'bash', 'curl', 'python3', 'node'],
    timeoutMs: 20_000,
    maxOutputBytes: 1 << 20,
    ...extra,
  });
  const sh = (script: string, extra: Partial<SandboxRequest> = {}): Promise<SandboxResult> => runSandboxed(req(['sh', '-c', script], extra));

  before(async () => {
    const avail = await sandboxAvailable();
    assert.ok(avail.ok, `bubblewrap sandbox unavailable: ${avail.ok ? '' : avail.reason}`);
    base = await mkdtemp(join(tmpdir(), 'steward-sandbox-test-'));
    cleanup.push(base);
    work = join(base, 'work');
    sibling = join(base, 'sibling');
    await mkdir(work);
    await mkdir(sibling);
    await writeFile(join(sibling, 'keep.txt'), 'original\n');
  });

  after(async () => {
    for (const d of cleanup) await rm(d, { recursive: true, force: true });
  });

  it('builds the sandbox it documents: fresh namespaces, minimal read-only system, no host /etc, /root, /home, /var, /tmp', () => {
    const args = sandboxArgs(req(['true'], { allowlist: ['true'] }));
    for (const flag of ['--unshare-all', '--die-with-parent', '--new-session', '--proc', '--dev']) assert.ok(args.includes(flag), flag);
    assert.deepEqual(args.slice(args.indexOf('--cap-drop'), args.indexOf('--cap-drop') + 2), ['--cap-drop', 'ALL']);
    assert.ok(args.join(' ').includes(`--bind ${work} ${work}`));
    assert.ok(args.join(' ').includes(`--chdir ${work} -- true`));
    // the only read-write bind is the work tree; nothing of the host's /etc wholesale, nor homes, /var, /tmp
    const binds = args.flatMap((a, i) => (a === '--bind' || a === '--ro-bind' || a === '--dev-bind' ? [`${a} ${args[i + 1]}`] : []));
    assert.deepEqual(binds.filter((b) => b.startsWith('--bind ')), [`--bind ${work}`]);
    assert.equal(binds.filter((b) => b.startsWith('--dev-bind')).length, 0);
    for (const hidden of ['/', '/etc', '/root', '/home', '/var', '/tmp', '/work', '/run', '/etc/shadow', '/etc/gitconfig', '/etc/ssl/private']) {
      assert.ok(!binds.includes(`--ro-bind ${hidden}`), `host ${hidden} must not be bound`);
    }
    if (isRoot) assert.ok(args.join(' ').includes('--uid 65534 --gid 65534'), 'as root the sandbox maps to an unprivileged uid');
  });

  it('runs with no capabilities at all, not as root, and cannot remount the system read-write', async () => {
    const r = await sh('grep -E "^Cap(Inh|Prm|Eff|Bnd|Amb):" /proc/self/status; echo "uid=$(id -u)"; mount -o remount,rw /usr 2>/dev/null && echo REMOUNTED; echo x > /usr/steward-escape 2>/dev/null && echo WROTE_USR; true');
    assert.equal(r.exitCode, 0, r.stderrTail);
    for (const cap of ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb']) assert.match(r.stdoutTail, new RegExp(`^${cap}:\\s*0{16}$`, 'm'));
    const uid = Number(/uid=(\d+)/.exec(r.stdoutTail)?.[1]);
    assert.notEqual(uid, 0);
    if (!isRoot) assert.equal(uid, process.getuid?.());
    assert.doesNotMatch(r.stdoutTail, /REMOUNTED|WROTE_USR/);
    assert.equal(existsSync('/usr/steward-escape'), false);
  });

  it('sees no host processes and cannot create nested user namespaces', async () => {
    const r = await sh('ls /proc; (command -v unshare >/dev/null && unshare -U true 2>/dev/null && echo NESTED_USERNS) || true');
    const pids = r.stdoutTail.split('\n').filter((l) => /^\d+$/.test(l)).map(Number);
    assert.ok(pids.length > 0 && pids.length < 10, `pids seen: ${pids.join(',')}`);
    assert.ok(!pids.includes(process.pid) || process.pid < 10);
    if (sandboxArgs(req(['true'], { allowlist: ['true'] })).includes('--disable-userns')) assert.doesNotMatch(r.stdoutTail, /NESTED_USERNS/);
  });

  it('cannot write outside the work tree: /etc, /usr, the host /tmp, a sibling of the work tree, ../', async () => {
    const tag = `steward-escape-${process.pid}-${Date.now()}`;
    const targets = [`/etc/${tag}`, `/usr/${tag}`, `/usr/bin/${tag}`, `/tmp/${tag}`, join(sibling, 'keep.txt'), join(sibling, tag), join(base, tag), `../${tag}`, `../sibling/${tag}`, `/${tag}`];
    const script = targets.map((t) => `if echo pwned > '${t}' 2>/dev/null; then echo "WROTE ${t}"; else echo "BLOCKED ${t}"; fi`).join('\n');
    const r = await sh(script);
    assert.equal(r.exitCode, 0, r.stderrTail);
    // read-only system and a sibling that is not even there: refused inside
    for (const t of [`/etc/${tag}`, `/usr/${tag}`, `/usr/bin/${tag}`, join(sibling, 'keep.txt'), join(sibling, tag), `../sibling/${tag}`, `/${tag}`]) {
      assert.match(r.stdoutTail, new RegExp(`^BLOCKED ${t.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`, 'm'));
    }
    // /tmp and the work tree's parent exist only in the sandbox's own tmpfs: whatever lands there is gone
    for (const hostPath of [`/etc/${tag}`, `/usr/${tag}`, `/usr/bin/${tag}`, join(tmpdir(), tag), `/tmp/${tag}`, join(sibling, tag), join(base, tag), `/${tag}`]) {
      assert.equal(existsSync(hostPath), false, `${hostPath} appeared on the host`);
    }
    assert.equal(await readFile(join(sibling, 'keep.txt'), 'utf8'), 'original\n');
  });

  it('writes inside the work tree (and in cwd) persist on the host', async () => {
    const r = await sh('mkdir -p sub/deeper && printf hello > sub/deeper/f && chmod +x sub/deeper/f && cd sub && pwd');
    assert.equal(r.exitCode, 0, r.stderrTail);
    assert.equal(r.stdoutTail.trim(), join(work, 'sub'));
    assert.equal(await readFile(join(work, 'sub/deeper/f'), 'utf8'), 'hello');
    const st = await stat(join(work, 'sub/deeper/f'));
    assert.ok(st.mode & 0o100);
    assert.equal(st.uid, process.getuid?.());
    const inCwd = await runSandboxed(req(['pwd'], { cwd: 'sub/deeper' }));
    assert.equal(inCwd.stdoutTail.trim(), join(work, 'sub/deeper'));
    const stdin = await runSandboxed(req(['cat'], { stdin: 'from stdin\n' }));
    assert.equal(stdin.stdoutTail, 'from stdin\n');
  });

  it('leaks no secret: not from process.env, not from the host HOME, not from /root', async () => {
    const secret = `s3cr3t-${Math.random().toString(36).slice(2)}`;
    process.env.STEWARD_TEST_SECRET = secret;
    const homeSecret = join(homedir(), '.steward-test-secret');
    const planted = [homeSecret];
    const rootSecret = `/root/.steward-test-secret-${process.pid}`;
    if (isRoot && rootSecret !== homeSecret) planted.push(rootSecret);
    try {
      for (const p of planted) {
        await writeFile(p, `${secret}\n`, { mode: 0o600 });
      }
      const r = await sh(
        `env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'; echo "HOME=$HOME"; ls -A "$HOME"; ${planted.map((p) => `cat '${p}' 2>&1 || echo "UNREADABLE ${p}"`).join('; ')}; ls /root 2>&1; ls ${JSON.stringify(homedir())} 2>&1; true`,
        { env: { GIVEN: 'visible' } },
      );
      assert.equal(r.exitCode, 0, r.stderrTail);
      assert.ok(!r.stdoutTail.includes(secret) && !r.stderrTail.includes(secret), 'the secret reached the sandbox');
      assert.doesNotMatch(r.stdoutTail, /STEWARD_TEST_SECRET/);
      for (const p of planted) assert.match(r.stdoutTail, new RegExp(`UNREADABLE ${p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));
      assert.match(r.stdoutTail, /^GIVEN=visible$/m);
      assert.match(r.stdoutTail, /^HOME=\/home\/sandbox$/m);
      // the environment is exactly ours
      const names = r.stdoutTail.split('\n').slice(0, 12).filter((l) => /^[A-Z_]+=/.test(l)).map((l) => l.split('=')[0]);
      for (const n of names) assert.ok(['PATH', 'HOME', 'TMPDIR', 'LANG', 'TERM', 'GIVEN', 'PWD', 'OLDPWD', 'SHLVL', '_'].includes(n ?? ''), `unexpected variable ${n}`);
      // values given in env never appear on bwrap's (world-readable) command line
      assert.ok(!sandboxArgs(req(['env'], { env: { TOKEN: secret } })).some((a) => a.includes(secret)));
    } finally {
      delete process.env.STEWARD_TEST_SECRET;
      for (const p of planted) await rm(p, { force: true });
    }
  });

  it('cannot read a root-only (0600) host file: invisible when not bound; mode-protected when bound and run as an unprivileged host user', async () => {
    const secretDir = await mkdtemp(join(tmpdir(), 'steward-sandbox-secret-'));
    cleanup.push(secretDir);
    const secretFile = join(secretDir, 'secret');
    await writeFile(secretFile, 'root-only-secret\n', { mode: 0o600 });
    const r = await sh(`cat '${secretFile}' 2>&1; ls '${secretDir}' 2>&1; true`);
    assert.doesNotMatch(r.stdoutTail, /root-only-secret/);
    assert.match(r.stdoutTail, /No such file or directory/);

    // bound read-only: never writable, whoever runs it
    const bound = await sh(`echo tampered > '${secretFile}' 2>&1 || echo BLOCKED`, { roBinds: [secretDir] });
    assert.match(bound.stdoutTail, /BLOCKED/);
    assert.equal(await readFile(secretFile, 'utf8'), 'root-only-secret\n');

    if (!isRoot) return; // a normal user cannot plant a file of root's
    // As root, the sandbox's uid maps onto host uid 0, so a visible 0600 file of root's is readable (hence the
    // minimal mounts). With runAs, bwrap runs as an unprivileged host user and file modes apply again.
    await chmod(secretDir, 0o755);
    const nobodyTree = await mkdtemp(join(tmpdir(), 'steward-sandbox-nobody-'));
    cleanup.push(nobodyTree);
    await chown(nobodyTree, 65534, 65534);
    const asNobody = await runSandboxed({
      ...req(['sh', '-c', `cat '${secretFile}' 2>&1; grep CapEff /proc/self/status; echo written > mine && cat mine`]),
      workTree: nobodyTree,
      roBinds: [secretDir],
      runAs: { uid: 65534, gid: 65534 },
    });
    assert.doesNotMatch(asNobody.stdoutTail, /root-only-secret/);
    assert.match(asNobody.stdoutTail, /Permission denied/);
    assert.match(asNobody.stdoutTail, /^CapEff:\s*0{16}$/m);
    assert.match(asNobody.stdoutTail, /^written$/m);
    assert.equal((await stat(join(nobodyTree, 'mine'))).uid, 65534);
  });

  it('reaches no network: a server on the host (loopback and its other addresses) sees no connection', async () => {
    const connections: Socket[] = [];
    const server: Server = createServer((s) => {
      connections.push(s);
      s.destroy();
    });
    await new Promise<void>((r) => server.listen(0, '0.0.0.0', r));
    const port = (server.address() as { port: number }).port;
    try {
      const hosts = ['127.0.0.1', ...Object.values(networkInterfaces()).flatMap((l) => (l ?? []).filter((a) => a.family === 'IPv4' && !a.internal).map((a) => a.address))];
      const attempts: string[] = [];
      for (const h of hosts) {
        if (have('/usr/bin/bash') || have('/bin/bash')) attempts.push(`bash -c 'exec 3<>/dev/tcp/${h}/${port}' 2>/dev/null && echo CONNECTED bash ${h}`);
        if (have('/usr/bin/curl')) attempts.push(`curl -s -m 3 -o /dev/null http://${h}:${port}/; rc=$?; [ $rc -eq 7 ] || [ $rc -eq 28 ] || echo CONNECTED curl ${h} rc=$rc`);
        if (have('/usr/bin/python3')) attempts.push(`python3 -c "import socket; socket.create_connection(('${h}', ${port}), 3); print('CONNECTED python3 ${h}')" 2>/dev/null`);
        if (have('/usr/bin/node')) attempts.push(`node -e "require('net').connect(${port}, '${h}').on('connect', () => { console.log('CONNECTED node ${h}'); process.exit(0) }).on('error', () => process.exit(1))" 2>/dev/null`);
      }
      assert.ok(attempts.length > 0, 'no client program in /usr/bin to try the network with');
      const r = await sh(`cat /proc/net/dev; ${attempts.join('; ')}; true`, { timeoutMs: 60_000 });
      assert.equal(r.exitCode, 0, r.stderrTail);
      assert.doesNotMatch(r.stdoutTail, /CONNECTED/);
      // the only interface in the sandbox is its own loopback
      const ifaces = r.stdoutTail.split('\n').filter((l) => /^\s*[\w.-]+:\s+\d/.test(l)).map((l) => l.trim().split(':')[0]);
      assert.deepEqual(ifaces, ['lo']);
      await new Promise((r) => setTimeout(r, 200));
      assert.equal(connections.length, 0, 'the host server was reached from the sandbox');
      // control: the server does count connections
      await new Promise<void>((resolve, reject) => {
        const c = connect(port, '127.0.0.1', () => {
          c.destroy();
          resolve();
        });
        c.once('error', reject);
      });
      await new Promise((r) => setTimeout(r, 100));
      assert.equal(connections.length, 1);
    } finally {
      await new Promise((r) => server.close(r));
    }
  });

  it('refuses a program not on the allowlist before anything runs (and bad cwd, argv, env)', async () => {
    const marker = join(work, 'should-not-exist');
    for (const argv of [['touch', marker], ['/usr/bin/touch', marker], ['sh', '-c', `touch ${marker}`]]) {
      await assert.rejects(runSandboxed(req(argv, { allowlist: ['ls'] })), (e: unknown) => e instanceof SandboxRefusedError && e.reason === 'not-allowlisted');
    }
    assert.equal(existsSync(marker), false);
    await assert.rejects(runSandboxed(req(['./touch', marker], { allowlist: ['touch'] })), (e: unknown) => e instanceof SandboxRefusedError && e.reason === 'bad-request');
    await assert.rejects(runSandboxed(req(['ls'], { cwd: '..' })), (e: unknown) => e instanceof SandboxRefusedError && e.reason === 'cwd-outside');
    await assert.rejects(runSandboxed(req(['ls'], { cwd: '/etc' })), (e: unknown) => e instanceof SandboxRefusedError && e.reason === 'cwd-outside');
    await symlink(sibling, join(work, 'escape-link'));
    await assert.rejects(runSandboxed(req(['ls'], { cwd: 'escape-link' })), (e: unknown) => e instanceof SandboxRefusedError && e.reason === 'cwd-outside');
    await assert.rejects(runSandboxed(req(['ls'], { env: { 'BAD-NAME': 'x' } })), (e: unknown) => e instanceof SandboxRefusedError && e.reason === 'bad-request');
    await assert.rejects(runSandboxed(req(['ls'], { workTree: '/' })), (e: unknown) => e instanceof SandboxRefusedError && e.reason === 'bad-request');
    await assert.rejects(runSandboxed(req(['ls'], { roBinds: ['/'] })), (e: unknown) => e instanceof SandboxRefusedError && e.reason === 'bad-request');
    await rm(join(work, 'escape-link'));
  });

  it('a timeout kills the whole tree, background and setsid children included, within the limit', async () => {
    const marker = '37.4242';
    const r = await sh(`sleep ${marker} & setsid sleep ${marker} & (sleep ${marker} &) ; sh -c 'while :; do :; done' & sleep ${marker}`, { timeoutMs: 1000 });
    assert.equal(r.timedOut, true);
    assert.equal(r.exitCode, null);
    assert.equal(r.signal, 'SIGKILL');
    assert.ok(r.durationMs >= 900 && r.durationMs < 4000, `took ${r.durationMs} ms`);
    assert.deepEqual(await waitGone(`sleep ${marker}`), []);
    const loop = await runSandboxed(req(['sh', '-c', 'while :; do :; done'], { timeoutMs: 500 }));
    assert.equal(loop.timedOut, true);
    assert.ok(loop.durationMs < 3500);
  });

  it('an abort kills the sandbox at once; an already aborted signal runs nothing', async () => {
    const marker = '38.4242';
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 300);
    const r = await sh(`sleep ${marker} & sleep ${marker}`, { signal: ac.signal, timeoutMs: 30_000 });
    assert.equal(r.aborted, true);
    assert.equal(r.timedOut, false);
    assert.ok(r.durationMs < 3000, `took ${r.durationMs} ms`);
    assert.deepEqual(await waitGone(`sleep ${marker}`), []);
    const pre = new AbortController();
    pre.abort();
    const none = await sh(`touch ${join(work, 'aborted-marker')}`, { signal: pre.signal });
    assert.equal(none.aborted, true);
    assert.equal(existsSync(join(work, 'aborted-marker')), false);
  });

  it('an output flood is cut to its tail, counted in full, within maxOutputBytes over both streams', async () => {
    const r = await sh('seq 1 200000; echo END', { maxOutputBytes: 1000 });
    assert.equal(r.exitCode, 0);
    let expected = 4; // "END\n"
    for (let i = 1; i <= 200000; i++) expected += String(i).length + 1;
    assert.equal(r.outputBytes, expected);
    assert.equal(r.truncated, true);
    assert.ok(r.stdoutTail.endsWith('199999\n200000\nEND\n'));
    assert.ok(Buffer.byteLength(r.stdoutTail) <= 1000);
    const both = await sh('seq 1 100000; seq 1 100000 >&2; echo OUT-END; echo ERR-END >&2', { maxOutputBytes: 1000 });
    assert.ok(Buffer.byteLength(both.stdoutTail) + Buffer.byteLength(both.stderrTail) <= 1000);
    assert.ok(both.stdoutTail.endsWith('OUT-END\n') && both.stderrTail.endsWith('ERR-END\n'));
    assert.ok(Buffer.byteLength(both.stdoutTail) >= 400 && Buffer.byteLength(both.stderrTail) >= 400, 'both streams keep a fair share');
    const small = await sh('echo tiny; seq 1 100000 >&2', { maxOutputBytes: 1000 });
    assert.equal(small.stdoutTail, 'tiny\n');
    assert.equal(Buffer.byteLength(small.stderrTail), 1000 - 5, 'what one stream does not need the other gets');
    const endless = await runSandboxed(req(['yes'], { maxOutputBytes: 4096, timeoutMs: 1000 }));
    assert.equal(endless.timedOut, true);
    assert.ok(endless.outputBytes > 100_000);
    assert.equal(endless.stdoutTail.length, 4096);
    assert.match(endless.stdoutTail, /^(y\n)+$/);
  });

  it('a long-lived sandbox (MCP servers): the same sandbox with stdio pipes; network only when asked for', async () => {
    assert.ok(!sandboxArgs(req(['true'], { allowlist: ['true'] })).includes('--share-net'));
    const net = sandboxArgs(req(['true'], { allowlist: ['true'], network: true }));
    assert.ok(net.includes('--share-net') && net.indexOf('--share-net') > net.indexOf('--unshare-all'), 'the network is shared back after --unshare-all');
    const proc = await spawnSandboxed({ argv: ['sh', '-c', 'read line; echo "got $line in $(pwd) as $(id -u)"; cat'], workTree: work, allowlist: ['*'] });
    let out = '';
    proc.stdout.on('data', (b: Buffer) => (out += b.toString()));
    proc.stdin.write('hello\n');
    await waitUntil(() => out.includes('got hello'));
    assert.match(out, new RegExp(`got hello in ${work} as ${isRoot ? 65534 : process.getuid!()}`));
    proc.stdin.write('echoed back\n');
    await waitUntil(() => out.includes('echoed back'));
    proc.kill();
    const end = await proc.exited;
    assert.ok(end.signal === 'SIGKILL' || end.code !== 0);
    await assert.rejects(spawnSandboxed({ argv: ['true'], workTree: '/tmp', allowlist: ['*'] }), /workTree may not be/);
  });
});

async function waitUntil(p: () => boolean, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!p()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 20));
  }
}
