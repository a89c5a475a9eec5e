/**
 * A `steward cluster` for a test: its own directory, a free port range, databases with a prefix
 * of its own on the test PostgreSQL, the scripted model server; `up` (blocking or not), `down`
 * and the state file; `clusterMissing` says why a machine cannot run one.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { readState, type ClusterState } from '../../platform/cluster.js';
import { nodePorts, readComposeTopology } from '../../platform/cluster-plan.js';
import { BLOCKS_LOW, KEPT_LOW, portFree } from '../../platform/ports.js';
import type { ModelServer } from './model-server.js';
import { freePort, repoRoot } from './process.js';

export const CLUSTER_TOKEN = 'cluster-token-0123456789abcdef';
export const clusterVersion = readComposeTopology(readFileSync(path.join(repoRoot, 'docker-compose.yml'), 'utf8')).temporalVersion;
const binDir = path.join(process.env.STEWARD_CACHE_DIR ?? path.join(homedir(), '.cache/steward'), 'temporal-server', clusterVersion);

/** Why this machine cannot run a test cluster (undefined: it can). */
export function clusterMissing(): string | undefined {
  if (!process.env.STEWARD_TEST_PG_URL) return 'needs PostgreSQL (./steward test starts one when Debian postgresql is installed)';
  if (!existsSync(path.join(binDir, 'temporal-server'))) {
    return `needs the Temporal server ${clusterVersion} built from its Go module: scripts/temporal-build.sh ${clusterVersion} (./steward test builds it when Go is installed; about 4 minutes the first time)`;
  }
  return undefined;
}

/**
 * A base port whose two nodes' ports, the frontend's and Steward's are all free (below 32768:
 * Temporal keeps members' ports as SQL smallints), in the blocks' range that `freePort` and
 * `freeKeptPort` never draw from: a node killed by a test gets its ports back when it restarts.
 */
export async function freeBase(): Promise<number> {
  const slots = Math.floor((KEPT_LOW - 1 - 212 - BLOCKS_LOW) / 40);
  for (let i = 0; i < 50; i++) {
    const base = BLOCKS_LOW + 40 * Math.floor(Math.random() * slots);
    const ports = [0, 1].flatMap((n) => Object.values(nodePorts(base, n))).concat([100, 200, 201, 202, 210, 211, 212].map((d) => base + d));
    let ok = true;
    for (const p of ports) if (!(await portFree(p))) ok = false;
    if (ok) return base;
  }
  throw new Error('no free port range');
}

export interface TestCluster {
  dir: string;
  prefix: string;
  base: number;
  apiPort: number;
  pgUrl: string;
  state(): ClusterState;
  /** `steward cluster <args> --dir <dir>`, blocking. */
  run(...args: string[]): { status: number | null; stdout: string; stderr: string };
  /** `cluster up` with this cluster's ports, blocking. */
  up(): { status: number | null; stdout: string; stderr: string };
  /** `cluster up` without blocking the event loop (work in this process goes on meanwhile). */
  upAsync(...extra: string[]): Promise<{ status: number | null; stderr: string }>;
  /** `steward cluster <args> --dir <dir>` without blocking the event loop. */
  runAsync(...args: string[]): Promise<{ status: number | null; stderr: string }>;
  api(): string;
  /** The tail of each Steward process's log. */
  logs(): string;
  /** `cluster down`, the databases dropped, the directory removed. */
  destroy(): Promise<void>;
}

export async function createTestCluster(model: ModelServer, extraEnv: Record<string, string> = {}): Promise<TestCluster> {
  const dir = mkdtempSync(path.join(tmpdir(), 'steward-cluster-'));
  const prefix = `c${Math.random().toString(36).slice(2, 8)}_`;
  const base = await freeBase();
  const apiPort = await freePort();
  const pgUrl = process.env.STEWARD_TEST_PG_URL!;
  const env = () => ({ ...process.env, STEWARD_MODEL: 'openai-compatible:cluster-model', STEWARD_MODEL_BASE_URL: model.baseURL, STEWARD_API_TOKEN: CLUSTER_TOKEN, STEWARD_LOG_LEVEL: 'warn', ...extraEnv });
  const cli = (...args: string[]) => [path.join(repoRoot, 'platform/main.ts'), 'cluster', ...args, '--dir', dir];
  const upArgs = () => ['up', '--base-port', String(base), '--api-port', String(apiPort), '--pg-url', pgUrl, '--db-prefix', prefix];
  const run = (...args: string[]) => spawnSync(process.execPath, ['--import', 'tsx', ...cli(...args)], { cwd: repoRoot, env: env(), encoding: 'utf8', timeout: 600_000 });
  const c: TestCluster = {
    dir,
    prefix,
    base,
    apiPort,
    pgUrl,
    state: () => readState(dir)!,
    run,
    up: () => run(...upArgs()),
    upAsync: (...extra: string[]) => c.runAsync(...upArgs(), ...extra),
    runAsync: (...args: string[]) =>
      new Promise((resolve) => {
        const child = spawn(process.execPath, ['--import', 'tsx', ...cli(...args)], { cwd: repoRoot, env: env(), stdio: ['ignore', 'ignore', 'pipe'] });
        let stderr = '';
        child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
        child.on('exit', (status) => resolve({ status, stderr }));
      }),
    api: () => `http://127.0.0.1:${apiPort}`,
    logs: () => {
      const s = readState(dir);
      return (s?.processes ?? []).map((p) => `--- ${p.service}\n${existsSync(p.log) ? readFileSync(p.log, 'utf8').slice(-1500) : ''}`).join('\n');
    },
    async destroy() {
      if (existsSync(path.join(dir, 'state.json'))) run('down');
      const admin = new pg.Client({ connectionString: pgUrl });
      await admin.connect();
      try {
        for (const db of ['temporal', 'temporal_visibility', 'steward']) await admin.query(`DROP DATABASE IF EXISTS "${prefix}${db}" WITH (FORCE)`);
      } finally {
        await admin.end();
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return c;
}
