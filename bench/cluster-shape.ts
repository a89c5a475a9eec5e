/**
 * The production shape for the turn benchmarks (BENCH_SHAPE=cluster; bench/compare.ts --cluster):
 * a fresh `steward cluster` for each run, started by the same code as `steward cluster up`
 * (platform/cluster.ts clusterUp): two Temporal nodes built from the Go module on PostgreSQL,
 * the cluster's namespace with Steward's search attributes, and the frontend balancer in front
 * of the nodes. For Steward, its api, worker and repo-worker processes with the compose
 * environment; for the plain-Temporal floor (bench/floor.ts), the Temporal part only
 * (`temporalOnly`), so both sides run on the same nodes, the same PostgreSQL and the same
 * namespace settings and the ratio is Steward's cost. Its databases have a prefix of their
 * own and are dropped when it stops.
 *
 * PostgreSQL: STEWARD_TEST_PG_URL (a superuser URL), else the project's local one (scripts/pg.sh,
 * started if needed). The Temporal server: scripts/temporal-build.sh at docker-compose.yml's
 * version (cached; built the first time, several minutes).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import pg from 'pg';
import { sessionWorkflowId } from '../common/ids.js';
import { clusterDown, clusterUp, type ClusterState } from '../platform/cluster.js';
import { freeBase } from '../test/helpers/cluster.js';
import { startModelServer } from '../test/helpers/model-server.js';
import { freePort, repoRoot } from '../test/helpers/process.js';
import { sessionCost, type PhaseResults } from './phases.js';
import { cpuMs, statFields } from './proc-cpu.js';

/** BENCH_SHAPE: `dev` (default: the embedded dev server) or `cluster`. */
export function benchShape(env: NodeJS.ProcessEnv = process.env): 'dev' | 'cluster' {
  const s = env.BENCH_SHAPE ?? 'dev';
  if (s !== 'dev' && s !== 'cluster') throw new Error(`BENCH_SHAPE: expected dev or cluster, got ${JSON.stringify(s)}`);
  return s;
}

/** The workflow cache of Steward's worker on the cluster (the compose environment leaves STEWARD_WORKER_MAX_CACHED_WORKFLOWS at its default): the floor's too. */
export const CLUSTER_WORKER_CACHE = 200;

/** What the JSON of a cluster run says about the Temporal side. */
export const CLUSTER_TEMPORAL = 'steward cluster: 2 Temporal nodes (Go module build) on PostgreSQL, through the frontend balancer';

const say = (line: string) => process.stderr.write(`bench cluster: ${line}\n`);

function postgresUrl(): string {
  if (process.env.STEWARD_TEST_PG_URL) return process.env.STEWARD_TEST_PG_URL;
  const script = path.join(repoRoot, 'scripts/pg.sh');
  const started = spawnSync('bash', [script, 'start'], { encoding: 'utf8' });
  if (started.status !== 0) throw new Error(`PostgreSQL could not be started (scripts/pg.sh start): ${started.stderr.trim()}`);
  return spawnSync('bash', [script, 'url'], { encoding: 'utf8' }).stdout.trim();
}

/** The PostgreSQL server listening on `port`: its postmaster and live backends, and the backends it reaped. */
function postgresCpuMs(port: string): number {
  let postmaster: number | undefined;
  const procs = readdirSync('/proc').filter((d) => /^\d+$/.test(d));
  for (const d of procs) {
    try {
      const cmd = readFileSync(`/proc/${d}/cmdline`, 'utf8').split('\0');
      if (cmd[0]?.endsWith('/postgres') && cmd.includes('-p') && cmd[cmd.indexOf('-p') + 1] === port) postmaster = Number(d);
    } catch {
      // gone
    }
  }
  if (!postmaster) return NaN;
  let total = cpuMs(postmaster, true);
  for (const d of procs) if (statFields(`/proc/${d}/stat`)?.f[1] === postmaster) total += cpuMs(Number(d));
  return total;
}

/** CPU time so far (ms) of the cluster's parts: the Temporal nodes, the frontend balancer, PostgreSQL (shared by both sides, but only one side runs at a time), Steward's processes, this process. */
export type CpuSnapshot = Record<'temporal_nodes' | 'frontend_balancer' | 'postgres' | 'steward_processes' | 'bench_process', number> & { steward?: Record<string, number> };

export function cpuSnapshot(c: BenchCluster): CpuSnapshot {
  const u = process.cpuUsage();
  return {
    temporal_nodes: c.state.nodes.reduce((a, n) => a + cpuMs(n.pid), 0),
    frontend_balancer: cpuMs(c.state.frontend.pid),
    postgres: postgresCpuMs(new URL(c.state.pgUrl).port || '5432'),
    steward_processes: c.state.processes.reduce((a, p) => a + cpuMs(p.pid, true), 0),
    bench_process: (u.user + u.system) / 1000,
    ...(c.api ? { steward: Object.fromEntries(c.state.processes.map((p) => [p.service, cpuMs(p.pid, true)])) } : {}),
  };
}

/** CPU ms per turn of each part between two snapshots, and their total. */
export function cpuPerTurn(before: CpuSnapshot, after: CpuSnapshot, turns: number): Record<string, number | Record<string, number>> {
  const per = (a: Record<string, number>, b: Record<string, number>) => Object.fromEntries(Object.keys(a).map((k) => [k, +((b[k]! - a[k]!) / Math.max(1, turns)).toFixed(2)]));
  const { steward: sBefore, ...parts } = before;
  const { steward: sAfter, ...partsAfter } = after;
  const p = per(parts, partsAfter);
  return { ...p, total: +Object.values(p).reduce((a, b) => a + b, 0).toFixed(2), ...(sBefore && sAfter ? { by_steward_process: per(sBefore, sAfter) } : {}) };
}

export interface BenchCluster {
  /** The frontend balancer's address (host:port): what every client and worker dials. */
  address: string;
  namespace: string;
  state: ClusterState;
  /** Steward's API (absent for the Temporal part only). */
  api?: string;
  /** Steward's database on the cluster's PostgreSQL (absent for the Temporal part only). */
  stewardDbUrl?: string;
  stop(): Promise<void>;
}

/** Start a fresh cluster: Temporal only, or with Steward's processes (their environment from `env`: the model, the API token). */
export async function startBenchCluster(opts: { steward: false } | { steward: true; env: Record<string, string> }): Promise<BenchCluster> {
  const dir = mkdtempSync(path.join(tmpdir(), 'steward-bench-cluster-'));
  const dbPrefix = `b${Math.random().toString(36).slice(2, 8)}_`;
  const pgUrl = postgresUrl();
  const apiPort = await freePort();
  const stop = async () => {
    if (existsSync(path.join(dir, 'state.json'))) await clusterDown(dir, say);
    const admin = new pg.Client({ connectionString: pgUrl });
    await admin.connect();
    try {
      for (const db of ['temporal', 'temporal_visibility', 'steward']) await admin.query(`DROP DATABASE IF EXISTS "${dbPrefix}${db}" WITH (FORCE)`);
    } finally {
      await admin.end();
    }
    rmSync(dir, { recursive: true, force: true });
  };
  let state: ClusterState;
  try {
    state = await clusterUp({
      dir,
      composeFile: path.join(repoRoot, 'docker-compose.yml'),
      nodes: 2,
      basePort: await freeBase(),
      apiPort,
      pgUrl,
      dbPrefix,
      env: opts.steward ? { ...process.env, STEWARD_LOG_LEVEL: 'warn', ...opts.env } : process.env,
      say,
      temporalOnly: !opts.steward,
    });
  } catch (err) {
    await stop().catch(() => undefined);
    throw err;
  }
  const stewardDb = new URL(pgUrl);
  stewardDb.pathname = `/${dbPrefix}steward`;
  return {
    address: `127.0.0.1:${state.frontend.port}`,
    namespace: state.namespace,
    state,
    ...(opts.steward ? { api: `http://127.0.0.1:${apiPort}`, stewardDbUrl: stewardDb.toString() } : {}),
    stop,
  };
}

/** The API token the cluster's Steward is started with. */
const TOKEN = 'bench-token-0123456789abcdef';

export interface ClusterBenchStack {
  cache: number;
  cluster: BenchCluster;
  cpu(): CpuSnapshot;
  turn(chatId: string): Promise<number>;
  /** History events and workflow tasks of a chat's session: every run of it and every workflow they started. */
  sessionCost(chatId: string): Promise<{ events: number; workflowTasks: number; runs: number }>;
  stop(): Promise<void>;
}

/**
 * Steward on a fresh cluster, driven as the all-in-one bench drives it (bench/stack.ts): one
 * message in through the HTTP API (the api process), resolved once the turn's reply is recorded.
 * The worker runs in its own process here, so the moment is heard from the database: a trigger
 * the bench adds to the Receipt table notifies (pg_notify) when a turn's end receipt is written,
 * which the worker does in the same step as it records the reply (activities/chat.ts deliver:
 * the all-in-one bench's `transcript` event fires right after it), and the bench LISTENs. No
 * polling delay is counted.
 */
export async function startClusterBenchStack(): Promise<ClusterBenchStack> {
  const model = await startModelServer({ keepRequests: false });
  let cluster: BenchCluster;
  try {
    cluster = await startBenchCluster({ steward: true, env: { STEWARD_MODEL: 'openai-compatible:bench', STEWARD_MODEL_BASE_URL: model.baseURL, STEWARD_API_TOKEN: TOKEN } });
  } catch (err) {
    await model.close();
    throw err;
  }
  const listener = new pg.Client({ connectionString: cluster.stewardDbUrl });
  const connection = await Connection.connect({ address: cluster.address });
  const client = new Client({ connection, namespace: cluster.namespace });
  const replies = new Map<string, number>();
  const waiters = new Map<string, Array<{ n: number; resolve: () => void }>>();
  try {
    await listener.connect();
    await listener.query(`CREATE OR REPLACE FUNCTION bench_turn_end() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.kind = 'turn.end' AND NEW."sessionId" IS NOT NULL THEN PERFORM pg_notify('bench_turn_end', NEW."sessionId"); END IF;
        RETURN NEW;
      END $$`);
    await listener.query('CREATE TRIGGER bench_turn_end AFTER INSERT ON "Receipt" FOR EACH ROW EXECUTE FUNCTION bench_turn_end()');
    listener.on('notification', (m) => {
      const sessionId = m.payload ?? '';
      const n = (replies.get(sessionId) ?? 0) + 1;
      replies.set(sessionId, n);
      const list = waiters.get(sessionId) ?? [];
      for (const w of list.filter((x) => x.n <= n)) w.resolve();
      waiters.set(sessionId, list.filter((x) => x.n > n));
    });
    await listener.query('LISTEN bench_turn_end');
  } catch (err) {
    await listener.end().catch(() => undefined);
    await connection.close();
    await cluster.stop();
    await model.close();
    throw err;
  }
  const waitReply = (sessionId: string, n: number) =>
    new Promise<void>((resolve) => {
      if ((replies.get(sessionId) ?? 0) >= n) return resolve();
      waiters.set(sessionId, [...(waiters.get(sessionId) ?? []), { n, resolve }]);
    });
  const sessionOf = (chatId: string) => sessionWorkflowId({ platform: 'http', account: 'default', chatId });
  const sent = new Map<string, number>();

  return {
    cache: CLUSTER_WORKER_CACHE,
    cluster,
    cpu: () => cpuSnapshot(cluster),
    async turn(chatId) {
      const sessionId = sessionOf(chatId);
      const expected = (sent.get(sessionId) ?? 0) + 1;
      sent.set(sessionId, expected);
      const t0 = performance.now();
      const r = await fetch(`${cluster.api}/api/v1/chats/${chatId}/messages`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` },
        body: JSON.stringify({ text: `ping ${expected}` }),
      });
      if (r.status !== 202) throw new Error(`POST answered ${r.status}: ${await r.text()}`);
      await r.arrayBuffer();
      await waitReply(sessionId, expected);
      return performance.now() - t0;
    },
    sessionCost: (chatId) => sessionCost(client, sessionOf(chatId)),
    async stop() {
      await listener.end().catch(() => undefined);
      await connection.close();
      await cluster.stop();
      await model.close();
    },
  };
}

/** Temporal's side of a fresh cluster for the floor (bench/floor/stack.ts): its frontend's address, its processes' CPU, and how to stop it. */
export async function startFloorCluster(): Promise<{ address: string; namespace: string; cpu(): CpuSnapshot; stop(): Promise<void> }> {
  const c = await startBenchCluster({ steward: false });
  return { address: c.address, namespace: c.namespace, cpu: () => cpuSnapshot(c), stop: () => c.stop() };
}

/** Turns the phases ran (bench/phases.ts runPhases' results, the idle-sessions phase off as on the cluster): what the CPU is divided by. */
export function phaseTurns(r: PhaseResults): number {
  return r.settings.warmupTurns + r.latency_1_conversation.turns + r.latency_n_conversations.turns + r.sustained.turns + r.settings.idleSessions + r.wake_after_idle.turns;
}
