/**
 * `./steward start` as the end-to-end suites run it: an environment of its own (data directory,
 * ports, API token, the scripted model, the embedded SQLite and Temporal), the process spawned
 * from the repository root, and the wait for its `API:` banner line.
 */
import { freeKeptPort } from '../../platform/ports.js';
import { spawnProcess, type Spawned } from './process.js';

export interface StewardPorts {
  http: number;
  temporal: number;
  ui: number;
}

/** Three free ports: the HTTP API, the embedded Temporal server, its UI. */
export async function freeStewardPorts(): Promise<StewardPorts> {
  return { http: await freeKeptPort(), temporal: await freeKeptPort(), ui: await freeKeptPort() };
}

/** The environment of a started Steward: this process's, with the test's own settings on top (`extra` last). */
export function startEnv(o: { dataDir: string; ports: StewardPorts; token: string; model: string; modelBaseURL: string; extra?: NodeJS.ProcessEnv }): NodeJS.ProcessEnv {
  return {
    ...process.env,
    STEWARD_DATA_DIR: o.dataDir,
    STEWARD_HTTP_PORT: String(o.ports.http),
    STEWARD_TEMPORAL_PORT: String(o.ports.temporal),
    STEWARD_TEMPORAL_UI_PORT: String(o.ports.ui),
    STEWARD_API_TOKEN: o.token,
    STEWARD_MODEL: o.model,
    STEWARD_MODEL_BASE_URL: o.modelBaseURL,
    STEWARD_LOG_LEVEL: 'warn',
    // the embedded SQLite database and Temporal dev server, whatever the outer environment says
    DATABASE_URL: '',
    TEMPORAL_ADDRESS: '',
    ...o.extra,
  };
}

/** `./steward start` with `env`, once it prints its API address (`api`). */
export async function startSteward(env: NodeJS.ProcessEnv, timeoutMs = 180_000): Promise<Spawned & { api: string }> {
  const steward = spawnProcess('./steward', ['start'], env);
  const api = (await steward.waitForOutput(/API:\s+(http:\/\/\S+)/, timeoutMs))[1] ?? '';
  return Object.assign(steward, { api });
}

/** Ctrl-C, and its exit; killed outright when it has not stopped within `graceMs`. */
export async function stopSteward(steward: Spawned | undefined, graceMs = 30_000): Promise<{ code: number | null; signal: NodeJS.Signals | null } | undefined> {
  if (!steward) return undefined;
  steward.kill('SIGINT');
  let timer: NodeJS.Timeout | undefined;
  const stopped = await Promise.race([steward.exited.then(() => true), new Promise<boolean>((r) => (timer = setTimeout(() => r(false), graceMs)))]);
  clearTimeout(timer);
  if (!stopped) steward.kill('SIGKILL');
  return steward.exited;
}
