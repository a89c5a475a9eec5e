/**
 * A real IMAP server for tests: Debian's Dovecot (`dovecot-imapd`) with a throwaway
 * configuration in a temporary directory (its own base_dir, state and log; a passwd-file user
 * database; Maildir mail; plain IMAP on 127.0.0.1 at a free port, no TLS). As root its processes
 * run as Debian's `dovecot` and `dovenull` users (Dovecot refuses root), otherwise as the
 * current user. Messages arrive by IMAP APPEND, or as files written into the Maildir's `new/`
 * (which works while the server is down).
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { chmod, chown, mkdir, mkdtemp, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { userInfo, tmpdir } from 'node:os';
import path from 'node:path';
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { ImapFlow } from 'imapflow';
import { freeKeptPort } from '../../platform/ports.js';

export const DOVECOT = '/usr/sbin/dovecot';

/** Why Dovecot cannot be used here, or undefined. */
export function dovecotMissing(): string | undefined {
  return existsSync(DOVECOT) ? undefined : 'needs Dovecot (apt-get install dovecot-imapd; ./steward test installs it when it can)';
}

export interface Dovecot {
  host: string;
  port: number;
  user: string;
  password: string;
  /** Add a message to the user's INBOX by IMAP APPEND. */
  append(raw: string | Buffer): Promise<void>;
  /** Add a message by writing it into the Maildir's `new/` (the server need not run). */
  deliverFile(raw: string | Buffer): Promise<void>;
  /** The number of messages in the Maildir (new/ and cur/). */
  count(): Promise<number>;
  start(): Promise<void>;
  /** Stop it hard (SIGKILL to its whole process group: open connections drop) and wait until the port is closed. */
  kill(): Promise<void>;
  close(): Promise<void>;
}

const portOpen = (port: number) =>
  new Promise<boolean>((resolve) => {
    const s = connect({ host: '127.0.0.1', port }, () => {
      s.destroy();
      resolve(true);
    });
    s.on('error', () => resolve(false));
  });

/** Whether an IMAP server answers on the port with its greeting (`* OK`), not merely something listening. */
const imapGreets = (port: number) =>
  new Promise<boolean>((resolve) => {
    let got = '';
    const s = connect({ host: '127.0.0.1', port });
    const done = (ok: boolean) => {
      clearTimeout(timer);
      s.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), 2_000);
    s.on('data', (d: Buffer) => {
      got += d.toString('latin1');
      if (got.includes('\n')) done(/^\* OK/.test(got));
    });
    s.on('error', () => done(false));
    s.on('close', () => done(false));
  });

export async function startDovecot(opts: { user?: string; password?: string } = {}): Promise<Dovecot> {
  const user = opts.user ?? 'ops';
  const password = opts.password ?? `pw-${randomBytes(8).toString('hex')}`;
  const dir = await mkdtemp(path.join(tmpdir(), 'steward-dovecot-'));
  await chmod(dir, 0o755);
  // a port the server takes again after a kill: drawn where no other suite's freePort draws
  const port = await freeKeptPort();
  const root = process.getuid?.() === 0;
  const me = userInfo().username;
  const internal = root ? 'dovecot' : me;
  const login = root ? 'dovenull' : me;
  const group = root ? 'dovecot' : execFileSync('id', ['-gn'], { encoding: 'utf8' }).trim();
  const maildir = path.join(dir, 'mail', user);
  for (const d of ['new', 'cur', 'tmp']) await mkdir(path.join(maildir, d), { recursive: true });
  await mkdir(path.join(dir, 'home', user), { recursive: true });
  await writeFile(path.join(dir, 'passwd'), `${user}:{PLAIN}${password}::::::\n`);
  const conf = `protocols = imap
listen = 127.0.0.1
base_dir = ${dir}/run
state_dir = ${dir}/state
instance_name = steward-test-${port}
log_path = ${dir}/dovecot.log
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
auth_failure_delay = 0
default_internal_user = ${internal}
default_internal_group = ${group}
default_login_user = ${login}
first_valid_uid = 1
mail_location = maildir:${dir}/mail/%u
passdb {
  driver = passwd-file
  args = scheme=PLAIN username_format=%u ${dir}/passwd
}
userdb {
  driver = passwd-file
  args = username_format=%u ${dir}/passwd
  default_fields = uid=${internal} gid=${group} home=${dir}/home/%u
}
service imap-login {
  inet_listener imap {
    address = 127.0.0.1
    port = ${port}
  }
  inet_listener imaps {
    port = 0
  }
  chroot =
}
service anvil {
  chroot =
}
service auth {
  unix_listener auth-userdb {
    mode = 0666
  }
}
`;
  await writeFile(path.join(dir, 'dovecot.conf'), conf);
  if (root) {
    for (const p of [path.join(dir, 'mail'), maildir, ...['new', 'cur', 'tmp'].map((d) => path.join(maildir, d)), path.join(dir, 'home'), path.join(dir, 'home', user)]) {
      await chown(p, uidOf('dovecot'), gidOf('dovecot'));
    }
  }

  let child: ChildProcess | undefined;
  const start = async () => {
    // a process group of its own: a kill takes its children (logins, IMAP sessions) too, as a crash of the machine would
    child = spawn(DOVECOT, ['-F', '-c', path.join(dir, 'dovecot.conf')], { stdio: 'ignore', detached: true });
    const deadline = Date.now() + 15_000;
    while (!(await imapGreets(port))) {
      if (child.exitCode !== null || Date.now() > deadline) throw new Error(`Dovecot did not start on port ${port} (see ${dir}/dovecot.log)`);
      await sleep(50);
    }
  };
  const stopWith = async (signal: NodeJS.Signals) => {
    const c = child;
    child = undefined;
    if (!c || c.exitCode !== null) return;
    const exited = new Promise<void>((resolve) => c.once('exit', () => resolve()));
    if (signal === 'SIGKILL' && c.pid !== undefined) process.kill(-c.pid, 'SIGKILL');
    else c.kill(signal);
    await exited;
    const deadline = Date.now() + 10_000;
    while ((await portOpen(port)) && Date.now() < deadline) await sleep(50);
    // its children notice the master is gone and exit; the pid file stays after a kill
    await rm(path.join(dir, 'run', 'master.pid'), { force: true });
  };
  await start();
  const server: Dovecot = {
    host: '127.0.0.1',
    port,
    user,
    password,
    async append(raw) {
      const c = new ImapFlow({ host: '127.0.0.1', port, secure: false, doSTARTTLS: false, auth: { user, pass: password }, logger: false });
      await c.connect();
      try {
        await c.append('INBOX', raw);
      } finally {
        await c.logout().catch(() => c.close());
      }
    },
    async deliverFile(raw) {
      const name = `${Date.now()}.M${randomBytes(6).toString('hex')}P${process.pid}.steward`;
      await writeFile(path.join(maildir, 'tmp', name), raw);
      await rename(path.join(maildir, 'tmp', name), path.join(maildir, 'new', name));
      if (root) await chown(path.join(maildir, 'new', name), uidOf('dovecot'), gidOf('dovecot')).catch(() => undefined);
    },
    async count() {
      return (await readdir(path.join(maildir, 'new'))).length + (await readdir(path.join(maildir, 'cur'))).length;
    },
    start,
    kill: () => stopWith('SIGKILL'),
    async close() {
      await stopWith('SIGTERM');
      await rm(dir, { recursive: true, force: true });
    },
  };
  return server;
}

function idOf(name: string, field: 2 | 3): number {
  // /etc/passwd: name:x:uid:gid:...
  const line = readFileSync('/etc/passwd', 'utf8').split('\n').find((l) => l.startsWith(`${name}:`));
  if (!line) throw new Error(`no user ${name} (Debian's dovecot-core package creates it)`);
  return Number(line.split(':')[field]);
}
const uidOf = (name: string) => idOf(name, 2);
const gidOf = (name: string) => idOf(name, 3);
