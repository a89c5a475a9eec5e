/**
 * `steward cluster up|down|status`: the production shape on one machine. A Temporal cluster of
 * two server processes (each running every service, with their own gRPC and membership ports)
 * on PostgreSQL with SQL visibility, built from the Go module at the version docker-compose.yml
 * pins (scripts/temporal-build.sh, cached); Steward's database on the same PostgreSQL; and
 * Steward as the compose file's `api`, `worker` and `repo-worker` processes, with the compose
 * file's environment (platform/cluster-plan.ts). Processes run detached; their pids, ports and
 * logs are in the cluster directory (default .data/cluster), so `down` and `status` find them
 * from another shell. `up` starts what is not running and leaves the rest: after a node was
 * killed, `up` brings it back.
 */
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Connection } from '@temporalio/client';
import protoModule from '@temporalio/proto';
import pg from 'pg';
import { z } from 'zod';
import {
  DYNAMIC_CONFIG_YAML,
  nodeConfigYaml,
  nodePorts,
  processEnvironment,
  readComposeTopology,
  type NodePorts,
  type SqlTarget,
  type StewardService,
} from './cluster-plan.js';
import { joined, ringStanding, type NodeMembership, type RingStanding } from './cluster-membership.js';
import { ensureSearchAttributes } from './temporal-server.js';
import { runCommand, type CliContext, type HandlersOf } from './cli-commands.js';
import { STEWARD_NODE_FLAGS, stewardProcessEnv } from './node-options.js';
import { portFree } from './ports.js';

export class ClusterError extends Error {
  override name = 'ClusterError';
}

const REPO_ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');

const StateSchema = z.object({
  version: z.string(),
  binDir: z.string(),
  basePort: z.number(),
  namespace: z.string(),
  pgUrl: z.string(),
  dbPrefix: z.string(),
  nodes: z.array(z.object({ index: z.number(), pid: z.number().nullable(), started: z.number().nullable().default(null), config: z.string(), log: z.string(), ports: z.record(z.string(), z.number()) })),
  /** The frontend address every Steward process uses: a balancer over the nodes' frontends (platform/frontend-proxy.ts). */
  frontend: z.object({ pid: z.number().nullable(), started: z.number().nullable().default(null), port: z.number(), log: z.string() }),
  processes: z.array(z.object({ service: z.string(), pid: z.number().nullable(), started: z.number().nullable().default(null), log: z.string(), temporalAddress: z.string(), httpPort: z.number() })),
});
export type ClusterState = z.infer<typeof StateSchema>;

export interface ClusterOptions {
  /** The cluster's directory: state, configs, logs, Steward's data. */
  dir: string;
  composeFile: string;
  nodes: number;
  basePort: number;
  /** The api process's HTTP port (compose publishes 8787). */
  apiPort: number;
  /** A PostgreSQL superuser URL; default: the project's local PostgreSQL (scripts/pg.sh). */
  pgUrl?: string;
  /** Prefix of the three databases (temporal, temporal_visibility, steward). */
  dbPrefix: string;
  env: Record<string, string | undefined>;
  say: (line: string) => void;
  /** How long a started node may take to join the others' ring (default 30 s). */
  joinTimeoutMs?: number;
  /**
   * The Temporal part only (nodes, namespace, frontend): no Steward database or processes. For a
   * plain Temporal application on the same cluster shape (bench/cluster-shape.ts: the floor).
   */
  temporalOnly?: boolean;
}

const statePath = (dir: string) => path.join(dir, 'state.json');

export function readState(dir: string): ClusterState | undefined {
  if (!existsSync(statePath(dir))) return undefined;
  return StateSchema.parse(JSON.parse(readFileSync(statePath(dir), 'utf8')));
}

/** Write the state whole or not at all (a new file renamed over the old): `status` may read it while `up` writes. */
function writeState(dir: string, s: ClusterState): void {
  const tmp = `${statePath(dir)}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(s, null, 2)}\n`, { mode: 0o600 });
  chmodSync(tmp, 0o600); // it holds the database URL
  renameSync(tmp, statePath(dir));
}

/** Is `pid` a live process (not a zombie)? */
export function alive(pid: number | null): boolean {
  if (!pid) return false;
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return !/\) Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return true;
  }
}

/** When a process started (clock ticks since boot, /proc/<pid>/stat field 22): with the pid, it names one process. */
function startTimeOf(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]);
  } catch {
    return null;
  }
}

/** Is this recorded process still the one the cluster started (not a later process that got its pid)? */
export function running(p: { pid: number | null; started: number | null }): boolean {
  return alive(p.pid) && (p.started === null || startTimeOf(p.pid!) === p.started);
}

/** Record a process the cluster started. */
function started(p: { pid: number | null; started: number | null }, pid: number): void {
  p.pid = pid;
  p.started = startTimeOf(pid);
}

/** Refuse to start when one of `ports` is taken by something else, naming the port and what it is for. */
async function checkPorts(ports: Array<[string, number]>): Promise<void> {
  for (const [what, port] of ports) {
    if (!(await portFree(port))) throw new ClusterError(`port ${port} (${what}) is in use by another process: stop it, or choose other ports with --base-port / --api-port`);
  }
}

/** The Temporal server and SQL tool at `version`, built if needed (scripts/temporal-build.sh). */
function ensureBinaries(version: string, env: Record<string, string | undefined>): string {
  const r = spawnSync('bash', [path.join(REPO_ROOT, 'scripts/temporal-build.sh'), version], { env: env as NodeJS.ProcessEnv, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  if (r.error) throw new ClusterError(`scripts/temporal-build.sh could not run: ${r.error.message}`);
  const dir = (r.stdout ?? '').trim().split('\n').at(-1) ?? '';
  if (r.status !== 0 || !dir) throw new ClusterError(`the Temporal server ${version} could not be built (scripts/temporal-build.sh exited ${r.status})`);
  return dir;
}

/** The superuser URL of the PostgreSQL to use: given, or the project's local one, started. */
function postgresUrl(opts: ClusterOptions): string {
  if (opts.pgUrl) return opts.pgUrl;
  const script = path.join(REPO_ROOT, 'scripts/pg.sh');
  const started = spawnSync('bash', [script, 'start'], { env: opts.env as NodeJS.ProcessEnv, encoding: 'utf8' });
  if (started.status !== 0) throw new ClusterError(`PostgreSQL could not be started (scripts/pg.sh start): ${started.stderr.trim() || `exit ${started.status}`}`);
  const url = spawnSync('bash', [script, 'url'], { env: opts.env as NodeJS.ProcessEnv, encoding: 'utf8' });
  if (url.status !== 0 || !url.stdout.trim()) throw new ClusterError(`the local PostgreSQL's URL is unknown (scripts/pg.sh url): ${url.stderr.trim() || `exit ${url.status}`}`);
  return url.stdout.trim();
}

function sqlTarget(url: string, database: string): SqlTarget {
  const u = new URL(url);
  return { host: u.hostname, port: Number(u.port || 5432), user: decodeURIComponent(u.username), password: decodeURIComponent(u.password), database };
}

/** Run a query on `database`; an unreachable server is a ClusterError naming it. */
async function query<T extends pg.QueryResultRow>(url: string, database: string, sql: string, params: unknown[] = []): Promise<T[]> {
  const u = new URL(url);
  u.pathname = `/${database}`;
  const client = new pg.Client({ connectionString: u.toString(), connectionTimeoutMillis: 5000 });
  try {
    await client.connect();
  } catch (err) {
    throw new ClusterError(`PostgreSQL is unreachable at ${u.hostname}:${u.port || 5432} (database ${database}): ${(err as Error).message}`);
  }
  try {
    return (await client.query<T>(sql, params)).rows;
  } finally {
    await client.end();
  }
}

const versionOf = (v: string) => v.split('.').map(Number);
const newer = (a: string, b: string) => {
  const [x, y] = [versionOf(a), versionOf(b)];
  for (let i = 0; i < Math.max(x.length, y.length); i++) if ((x[i] ?? 0) !== (y[i] ?? 0)) return (x[i] ?? 0) > (y[i] ?? 0);
  return false;
};

/** The newest schema version in a versioned schema directory (its `vX.Y` folders). */
export function schemaTarget(dir: string): string {
  const versions = readdirSync(dir).filter((d) => /^v\d+\.\d+$/.test(d)).map((d) => d.slice(1));
  return versions.reduce((a, b) => (newer(b, a) ? b : a), '0.0');
}

/** The schema version recorded in a Temporal database, undefined before its schema was set up. */
async function schemaVersion(url: string, database: string): Promise<string | undefined> {
  const exists = await query(url, database, "SELECT 1 FROM information_schema.tables WHERE table_name = 'schema_version'");
  if (exists.length === 0) return undefined;
  const rows = await query<{ curr_version: string }>(url, database, 'SELECT curr_version FROM schema_version LIMIT 1');
  return rows[0]?.curr_version;
}

/** Create the two Temporal databases when missing and bring their schemas to the binary's version (temporal-sql-tool). */
async function prepareTemporalSchemas(binDir: string, url: string, prefix: string, say: (s: string) => void): Promise<void> {
  for (const [name, kind] of [[`${prefix}temporal`, 'temporal'], [`${prefix}temporal_visibility`, 'visibility']] as const) {
    const t = sqlTarget(url, name);
    const tool = (...args: string[]) => {
      // the password by environment, not on the command line (where ps shows it)
      const r = spawnSync(path.join(binDir, 'temporal-sql-tool'), ['--plugin', 'postgres12', '--ep', t.host, '-p', String(t.port), '-u', t.user, '--db', name, ...args], { encoding: 'utf8', env: { PATH: process.env.PATH ?? '', SQL_PASSWORD: t.password } });
      if (r.status !== 0) throw new ClusterError(`temporal-sql-tool ${args[0]} on ${name} failed: ${(r.stderr || r.stdout).trim().split('\n').slice(-3).join(' ')}`);
    };
    const dbs = await query(url, 'postgres', 'SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (dbs.length === 0) tool('create-database');
    const dir = path.join(binDir, 'schema/postgresql/v12', kind, 'versioned');
    const target = schemaTarget(dir);
    const before = await schemaVersion(url, name);
    if (before === undefined) tool('setup-schema', '-v', '0.0');
    if (before === undefined || newer(target, before)) {
      tool('update-schema', '-d', dir);
      say(`schema ${name}: ${before ?? 'new'} -> ${target}`);
    }
  }
}

/** What `status` finds wrong with the Temporal schemas: a database behind the binary's schema version. */
async function schemaProblems(state: ClusterState): Promise<string[]> {
  const out: string[] = [];
  for (const [name, kind] of [[`${state.dbPrefix}temporal`, 'temporal'], [`${state.dbPrefix}temporal_visibility`, 'visibility']] as const) {
    const target = schemaTarget(path.join(state.binDir, 'schema/postgresql/v12', kind, 'versioned'));
    const v = await schemaVersion(state.pgUrl, name);
    if (v === undefined) out.push(`${name} has no schema: run steward cluster up`);
    else if (newer(target, v)) out.push(`${name} is at schema ${v}, behind ${target} that server ${state.version} needs: run steward cluster up (it updates the schema)`);
  }
  return out;
}

async function ensureDatabase(url: string, name: string): Promise<void> {
  if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new ClusterError(`database name ${name}: lowercase letters, digits and _ only`);
  const dbs = await query(url, 'postgres', 'SELECT 1 FROM pg_database WHERE datname = $1', [name]);
  if (dbs.length === 0) await query(url, 'postgres', `CREATE DATABASE ${name}`);
}

/** Start a detached process with its output in `log`; returns its pid. */
function startDetached(cmd: string, args: string[], env: NodeJS.ProcessEnv, log: string, cwd = REPO_ROOT): number {
  const fd = openSync(log, 'a');
  try {
    const child = spawn(cmd, args, { cwd, env, detached: true, stdio: ['ignore', fd, fd] });
    child.unref();
    if (!child.pid) throw new ClusterError(`${path.basename(cmd)} did not start`);
    return child.pid;
  } finally {
    closeSync(fd);
  }
}

/** A log line as a person reads it: the Temporal server's JSON lines without their stack traces. */
function readable(line: string): string {
  if (!line.startsWith('{')) return line;
  try {
    const j = JSON.parse(line) as { level?: string; msg?: string; error?: string };
    return `${j.level ?? ''} ${j.msg ?? ''}${j.error ? `: ${j.error}` : ''}`.trim();
  } catch {
    return line;
  }
}

const logTail = (log: string, lines = 8) => (existsSync(log) && statSync(log).size > 0 ? readFileSync(log, 'utf8').trim().split('\n').slice(-lines).map(readable).join('\n') : '(nothing logged at level warn or above)');

/**
 * Wait until `check` passes; a process that died meanwhile, or the deadline, is a ClusterError
 * with its log's tail (`why` says what the deadline means, when the caller knows better).
 */
async function waitFor(what: string, pid: number, log: string, timeoutMs: number, check: () => Promise<boolean>, why?: string | (() => string)): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (!alive(pid)) throw new ClusterError(`${what} exited while starting; the end of ${log}:\n${logTail(log)}`);
    if (await check().catch(() => false)) return;
    if (Date.now() > deadline) {
      const reason = typeof why === 'function' ? why() : (why ?? `was not ready within ${timeoutMs / 1000} s`);
      throw new ClusterError(`${what} ${reason}; the end of ${log}:\n${logTail(log)}`);
    }
    await sleep(500);
  }
}

async function frontendHealthy(port: number): Promise<boolean> {
  const connection = await Connection.connect({ address: `127.0.0.1:${port}`, connectTimeout: 2000 });
  try {
    const r = await connection.healthService.check({});
    return r.status === 1; // SERVING
  } finally {
    await connection.close();
  }
}

/** A node's membership addresses (one per service), as the ring names its members. */
function membershipOf(node: ClusterState['nodes'][number]): NodeMembership {
  const p = node.ports as unknown as NodePorts;
  return {
    node: node.index + 1,
    frontendPort: p.frontend,
    addresses: [p.frontendMembership, p.historyMembership, p.matchingMembership, p.workerMembership].map((port) => `127.0.0.1:${port}`),
  };
}

/** Why a node is not in one ring with the others, in words ('' when it is). */
function ringProblem(s: RingStanding, nodes: NodeMembership[]): string {
  if (!s.answered) return `it does not answer the admin API on 127.0.0.1:${nodes.find((n) => n.node === s.node)!.frontendPort}`;
  const parts: string[] = [];
  for (const other of s.lacks) {
    const o = nodes.find((n) => n.node === other)!;
    parts.push(`it does not reach node ${other}'s members (${o.addresses.join(', ')})`);
  }
  const silent = s.lackedBy.filter((o) => !s.lacks.includes(o));
  if (silent.length) parts.push(`node${silent.length > 1 ? 's' : ''} ${silent.join(', ')} do${silent.length > 1 ? '' : 'es'} not list it`);
  return parts.join('; ');
}

/**
 * Start the Temporal nodes that are not running, each with its own config, one at a time (the
 * first one up initialises the cluster's metadata, the others join it). A node is ready when it
 * serves and has joined: its own view of the ring and the earlier nodes' views hold each other
 * (a node that could not reach the others serves a ring of its own, which is not joining).
 */
async function startNodes(state: ClusterState, opts: ClusterOptions, store: SqlTarget, visibility: SqlTarget): Promise<void> {
  const dynamicConfig = path.join(opts.dir, 'dynamicconfig.yaml');
  writeFileSync(dynamicConfig, DYNAMIC_CONFIG_YAML);
  for (const node of state.nodes) {
    const ports = node.ports as unknown as NodePorts;
    const name = `temporal node ${node.index + 1}`;
    const wasRunning = running(node);
    if (!wasRunning) {
      await checkPorts(Object.entries(ports).map(([k, v]) => [`node ${node.index + 1} ${k}`, v]));
      writeFileSync(node.config, nodeConfigYaml({ ports, store, visibility, dynamicConfigFile: dynamicConfig, clusterAddress: `127.0.0.1:${state.nodes[0]!.ports.frontend}`, shards: 4 }));
      chmodSync(node.config, 0o600); // it holds the database password
      started(node, startDetached(path.join(state.binDir, 'temporal-server'), ['--config-file', node.config, '--allow-no-auth', 'start'], { PATH: opts.env.PATH ?? '' }, node.log));
      writeState(opts.dir, state);
      opts.say(`${name}: pid ${node.pid}, frontend 127.0.0.1:${ports.frontend}`);
      await waitFor(name, node.pid!, node.log, 90_000, () => frontendHealthy(ports.frontend));
    } else {
      // a node that runs should answer at once: one that does not is hung (or stopped)
      await waitFor(name, node.pid!, node.log, 15_000, () => frontendHealthy(ports.frontend), `runs (pid ${node.pid}) but does not answer on 127.0.0.1:${ports.frontend}: hung or stopped? (kill it, then cluster up)`);
    }
    const members = state.nodes.slice(0, node.index + 1).map(membershipOf);
    let standing: RingStanding[] = [];
    const joinTimeoutMs = opts.joinTimeoutMs ?? 30_000;
    await waitFor(name, node.pid!, node.log, joinTimeoutMs, async () => {
      standing = await ringStanding(members);
      return standing.every(joined);
    }, () => {
      const problems = standing.filter((s) => !joined(s)).map((s) => `node ${s.node}: ${ringProblem(s, members)}`);
      return `has not joined the cluster within ${joinTimeoutMs / 1000} s (${problems.join('; ') || 'no answer'}): a member it cannot reach (hung, stopped, or behind a firewall) keeps it in a ring of its own`;
    });
  }
}

/** The default namespace (compose: TEMPORAL_NAMESPACE) and Steward's search attributes on the cluster. */
async function prepareNamespace(state: ClusterState): Promise<void> {
  const connection = await Connection.connect({ address: `127.0.0.1:${state.nodes[0]!.ports.frontend}` });
  try {
    try {
      await connection.workflowService.describeNamespace({ namespace: state.namespace });
    } catch {
      await connection.workflowService.registerNamespace({ namespace: state.namespace, workflowExecutionRetentionPeriod: protoModule.google.protobuf.Duration.fromObject({ seconds: 3 * 24 * 3600 }) });
    }
    const deadline = Date.now() + 30_000;
    for (;;) {
      try {
        await ensureSearchAttributes(connection, state.namespace);
        return;
      } catch (err) {
        if (Date.now() > deadline) throw new ClusterError(`namespace ${state.namespace} is not ready: ${(err as Error).message}`);
        await sleep(500);
      }
    }
  } finally {
    await connection.close();
  }
}

/** The balancer in front of the nodes' frontends (platform/frontend-proxy.ts), unless it runs; wait until it passes a health check through. */
async function startFrontend(state: ClusterState, opts: ClusterOptions): Promise<void> {
  const f = state.frontend;
  if (!running(f)) {
    await checkPorts([['the cluster frontend', f.port]]);
    const targets = state.nodes.map((n) => String(n.ports.frontend));
    started(f, startDetached(process.execPath, ['--import', 'tsx', path.join(REPO_ROOT, 'platform/frontend-proxy.ts'), String(f.port), ...targets], { PATH: opts.env.PATH ?? '' }, f.log));
    writeState(opts.dir, state);
    opts.say(`frontend 127.0.0.1:${f.port} (balancing over ${state.nodes.length} nodes): pid ${f.pid}`);
  }
  await waitFor('the cluster frontend', f.pid!, f.log, 60_000, () => frontendHealthy(f.port));
}

/** Secrets the compose file requires (STEWARD_API_TOKEN, STEWARD_CODEC_KEYS): the operator's, else generated once and kept in the cluster directory. */
function clusterSecrets(dir: string, env: Record<string, string | undefined>): Record<string, string> {
  const file = path.join(dir, 'secrets.json');
  const kept = existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as Record<string, string>) : {};
  const secrets = {
    STEWARD_API_TOKEN: env.STEWARD_API_TOKEN || kept.STEWARD_API_TOKEN || randomBytes(24).toString('base64url'),
    STEWARD_CODEC_KEYS: env.STEWARD_CODEC_KEYS || kept.STEWARD_CODEC_KEYS || `k1:${randomBytes(32).toString('base64')}`,
  };
  writeFileSync(file, JSON.stringify(secrets), { mode: 0o600 });
  return secrets;
}

/** The prebuilt workflow bundle the image carries (Dockerfile: workers/bundle.ts), built into the cluster directory. */
function buildBundle(dir: string, env: Record<string, string | undefined>): string {
  const file = path.join(dir, 'workflow-bundle.js');
  const r = spawnSync(process.execPath, ['--import', 'tsx', path.join(REPO_ROOT, 'workers/bundle.ts'), file], { cwd: REPO_ROOT, env: env as NodeJS.ProcessEnv, encoding: 'utf8' });
  if (r.status !== 0) throw new ClusterError(`the workflow bundle could not be built: ${(r.stderr || r.stdout).trim().split('\n').slice(-3).join(' ')}`);
  return file;
}

/** Start the Steward processes that are not running, with their compose environment; wait until each is ready. */
async function startStewardProcesses(state: ClusterState, opts: ClusterOptions): Promise<void> {
  const topology = readComposeTopology(readFileSync(opts.composeFile, 'utf8'));
  const secrets = clusterSecrets(opts.dir, opts.env);
  // what the image sets (Dockerfile ENV) besides the compose environment
  const image = state.processes.some((p) => !running(p)) ? { NODE_ENV: 'production', STEWARD_WORKFLOW_BUNDLE: buildBundle(opts.dir, opts.env) } : {};
  const stewardDb = new URL(state.pgUrl);
  stewardDb.pathname = `/${state.dbPrefix}steward`;
  const logStart = new Map<string, number>();
  for (const [i, p] of topology.processes.entries()) {
    const entry = state.processes.find((x) => x.service === p.service)!;
    if (running(entry)) continue;
    const metricsPort = state.basePort + 200 + i;
    await checkPorts([[`${p.service} HTTP`, entry.httpPort], ...(p.environment.STEWARD_METRICS_PORT ? ([[`${p.service} metrics`, metricsPort]] as Array<[string, number]>) : [])]);
    const env = processEnvironment(p, { ...opts.env, ...secrets }, { temporalAddress: entry.temporalAddress, databaseUrl: stewardDb.toString(), dataDir: path.join(opts.dir, 'data', p.service), httpPort: entry.httpPort, metricsPort });
    mkdirSync(env.STEWARD_DATA_DIR!, { recursive: true });
    const childEnv = { PATH: opts.env.PATH ?? '', HOME: opts.env.HOME ?? '', ...stewardProcessEnv(opts.env), ...image, ...env };
    // readiness is judged on what this start writes, not on an earlier run's lines in the same log
    logStart.set(entry.service, existsSync(entry.log) ? statSync(entry.log).size : 0);
    started(entry, startDetached(process.execPath, [...STEWARD_NODE_FLAGS, '--import', 'tsx', path.join(REPO_ROOT, 'platform/main.ts'), ...p.args], childEnv, entry.log));
    writeState(opts.dir, state);
    opts.say(`steward ${p.service} (${p.args.join(' ')}): pid ${entry.pid}, Temporal ${entry.temporalAddress}`);
  }
  for (const entry of state.processes) {
    const from = logStart.get(entry.service) ?? 0;
    const ready = entry.service === 'api' ? () => httpOk(`http://127.0.0.1:${entry.httpPort}/healthz`) : async () => /^Steward worker polling /m.test(readFileSync(entry.log, 'utf8').slice(from));
    await waitFor(`steward ${entry.service}`, entry.pid!, entry.log, 120_000, ready);
  }
}

async function httpOk(url: string): Promise<boolean> {
  const r = await fetch(url, { signal: AbortSignal.timeout(2000) });
  return r.ok;
}

/** The state of a cluster about to start: what was there (pids kept), or a new plan. */
function planState(opts: ClusterOptions, version: string, binDir: string, pgUrl: string, namespace: string): ClusterState {
  const before = readState(opts.dir);
  if (before && (before.basePort !== opts.basePort || before.nodes.length !== opts.nodes || before.dbPrefix !== opts.dbPrefix || before.processes.find((p) => p.service === 'api')?.httpPort !== opts.apiPort)) {
    const live = [...before.nodes, before.frontend, ...before.processes].some((p) => running(p));
    if (live) throw new ClusterError(`a cluster with other settings runs from ${opts.dir} (base port ${before.basePort}, ${before.nodes.length} nodes, API port ${before.processes.find((p) => p.service === 'api')?.httpPort}, prefix "${before.dbPrefix}"): steward cluster down first`);
  }
  const keep = <T extends { pid: number | null; started: number | null }>(p: T | undefined) => ({ pid: p?.pid ?? null, started: p?.started ?? null });
  const nodes = Array.from({ length: opts.nodes }, (_, index) => ({
    index,
    ...keep(before?.nodes[index]),
    config: path.join(opts.dir, `node${index + 1}.yaml`),
    log: path.join(opts.dir, 'logs', `node${index + 1}.log`),
    ports: nodePorts(opts.basePort, index) as unknown as Record<string, number>,
  }));
  const frontend = { ...keep(before?.frontend), port: opts.basePort + 100, log: path.join(opts.dir, 'logs', 'frontend.log') };
  const services: StewardService[] = ['api', 'worker', 'repo-worker'];
  const processes = services.map((service, i) => ({
    service,
    ...keep(before?.processes.find((p) => p.service === service)),
    log: path.join(opts.dir, 'logs', `${service}.log`),
    // every process reaches Temporal through the balancer, as behind a deployment's load balancer
    temporalAddress: `127.0.0.1:${frontend.port}`,
    httpPort: service === 'api' ? opts.apiPort : opts.basePort + 210 + i,
  }));
  return { version, binDir, basePort: opts.basePort, namespace, pgUrl, dbPrefix: opts.dbPrefix, nodes, frontend, processes };
}

/** `cluster up`: everything that is not running, started; returns the state. */
export async function clusterUp(opts: ClusterOptions): Promise<ClusterState> {
  if (!Number.isInteger(opts.nodes) || opts.nodes < 1 || opts.nodes > 5) throw new ClusterError('--nodes: 1 to 5');
  if (!/^[a-z0-9_]*$/.test(opts.dbPrefix)) throw new ClusterError(`--db-prefix: lowercase letters, digits and _ only (got ${JSON.stringify(opts.dbPrefix)})`);
  // Temporal keeps its members' ports in a SQL smallint
  const highest = Math.max(...Array.from({ length: opts.nodes }, (_, i) => Object.values(nodePorts(opts.basePort, i))).flat(), opts.basePort + 212);
  if (!Number.isInteger(opts.basePort) || opts.basePort - 300 < 1024 || highest > 32767) throw new ClusterError(`--base-port: between 1324 and ${32767 - 212 - 20 * (opts.nodes - 1)} (Temporal stores its members' ports as 16-bit numbers)`);
  const topology = readComposeTopology(readFileSync(opts.composeFile, 'utf8'));
  mkdirSync(path.join(opts.dir, 'logs'), { recursive: true });
  const binDir = ensureBinaries(topology.temporalVersion, opts.env);
  const pgUrl = postgresUrl(opts);
  await query(pgUrl, 'postgres', 'SELECT 1');
  await prepareTemporalSchemas(binDir, pgUrl, opts.dbPrefix, opts.say);
  if (!opts.temporalOnly) await ensureDatabase(pgUrl, `${opts.dbPrefix}steward`);
  const namespace = topology.processes[0]!.environment.TEMPORAL_NAMESPACE || 'default';
  const state = planState(opts, topology.temporalVersion, binDir, pgUrl, namespace);
  writeState(opts.dir, state);
  await startNodes(state, opts, sqlTarget(pgUrl, `${opts.dbPrefix}temporal`), sqlTarget(pgUrl, `${opts.dbPrefix}temporal_visibility`));
  await prepareNamespace(state);
  await startFrontend(state, opts);
  if (!opts.temporalOnly) await startStewardProcesses(state, opts);
  return state;
}

/** Send `signal` to the process's group (its children too), else to the process; a process already gone is fine. */
function signalGroup(pid: number, signal: NodeJS.Signals): void {
  for (const target of [-pid, pid]) {
    try {
      process.kill(target, signal);
      return;
    } catch {
      // no such group (or process): try the next, or it is gone
    }
  }
}

/** Stop one process the cluster started: SIGTERM to its group, then SIGKILL to the group after `graceMs`. */
async function stopProcess(p: { pid: number | null; started: number | null }, graceMs: number): Promise<void> {
  if (!running(p)) return;
  const pid = p.pid!;
  signalGroup(pid, 'SIGTERM');
  const deadline = Date.now() + graceMs;
  while (alive(pid) && Date.now() < deadline) await sleep(100);
  // whatever of the group is left (children of a process that exited)
  signalGroup(pid, 'SIGKILL');
}

/** `cluster down`: Steward's processes first, then the Temporal nodes. The databases stay. */
export async function clusterDown(dir: string, say: (s: string) => void): Promise<void> {
  const state = readState(dir);
  if (!state) throw new ClusterError(`no cluster in ${dir}`);
  for (const p of state.processes) await stopProcess(p, 10_000);
  await stopProcess(state.frontend, 5_000);
  for (const n of state.nodes) await stopProcess(n, 10_000);
  for (const p of state.processes) p.pid = null;
  state.frontend.pid = null;
  for (const n of state.nodes) n.pid = null;
  writeState(dir, state);
  say(`stopped ${state.processes.length} Steward processes and ${state.nodes.length} Temporal nodes (databases kept; cluster up starts them again)`);
}

/** What `cluster restart` can roll: the Temporal nodes, or one of Steward's processes. */
export const RESTART_TARGETS = ['nodes', 'worker', 'repo-worker', 'api'] as const;
export type RestartTarget = (typeof RESTART_TARGETS)[number];

/**
 * `cluster restart`: a rolling restart, one process at a time, each back (serving and in the
 * ring, or polling, or answering) before the next stops. A Temporal node is stopped with SIGTERM
 * (it leaves the ring and hands its shards over) while the other serves. A Steward process is
 * stopped with SIGTERM (a worker finishes what it runs, then exits) and started again with the
 * compose environment; with one process per role, its task queues wait in Temporal meanwhile
 * and nothing is lost. Default: every Steward process (worker, repo-worker, then api).
 */
export async function clusterRestart(dir: string, targets: RestartTarget[], env: Record<string, string | undefined>, say: (s: string) => void, joinTimeoutMs?: number): Promise<ClusterState> {
  const state = readState(dir);
  if (!state) throw new ClusterError(`no cluster in ${dir} (steward cluster up starts one)`);
  const api = state.processes.find((p) => p.service === 'api')!;
  const opts: ClusterOptions = { dir, composeFile: path.join(REPO_ROOT, 'docker-compose.yml'), nodes: state.nodes.length, basePort: state.basePort, apiPort: api.httpPort, pgUrl: state.pgUrl, dbPrefix: state.dbPrefix, env, say, ...(joinTimeoutMs ? { joinTimeoutMs } : {}) };
  const down = [...state.nodes, state.frontend, ...state.processes].filter((p) => !running(p)).length;
  if (down > 0) throw new ClusterError(`${down} of the cluster's processes are not running: cluster up first (a rolling restart needs the others serving)`);
  const order = RESTART_TARGETS.filter((t) => targets.includes(t));
  for (const target of order) {
    if (target === 'nodes') {
      for (const node of state.nodes) {
        const was = node.pid;
        await stopProcess(node, 30_000);
        node.pid = null;
        writeState(dir, state);
        say(`temporal node ${node.index + 1}: stopped (pid ${was})`);
        // the kernel lets go of a dead process's ports a moment after it exits
        const ports = Object.values(node.ports);
        const until = Date.now() + 10_000;
        while (Date.now() < until && !(await Promise.all(ports.map((p) => portFree(p)))).every(Boolean)) await sleep(200);
        await startNodes(state, opts, sqlTarget(state.pgUrl, `${state.dbPrefix}temporal`), sqlTarget(state.pgUrl, `${state.dbPrefix}temporal_visibility`));
      }
      continue;
    }
    const entry = state.processes.find((p) => p.service === target)!;
    const was = entry.pid;
    await stopProcess(entry, 60_000);
    entry.pid = null;
    writeState(dir, state);
    say(`steward ${target}: stopped (pid ${was})`);
    await startStewardProcesses(state, opts);
  }
  return state;
}

export interface ClusterStatus {
  ok: boolean;
  nodes: Array<{ node: number; pid: number | null; running: boolean; serving: boolean; joined: boolean; ring?: string; frontend: string }>;
  frontend: { pid: number | null; running: boolean; serving: boolean; address: string };
  processes: Array<{ service: string; pid: number | null; running: boolean; temporal: string; http?: string }>;
  problems: string[];
}

/** `cluster status`: each process running or not, each node serving and joined, the schemas' versions. */
export async function clusterStatus(dir: string): Promise<ClusterStatus> {
  const state = readState(dir);
  if (!state) throw new ClusterError(`no cluster in ${dir} (steward cluster up starts one)`);
  const problems: string[] = [];
  try {
    problems.push(...(await schemaProblems(state)));
  } catch (err) {
    problems.push((err as Error).message);
  }
  // the ring as the running nodes see it
  const members = state.nodes.filter((n) => running(n)).map(membershipOf);
  const standing = await ringStanding(members);
  const nodes = await Promise.all(
    state.nodes.map(async (n) => {
      const up = running(n);
      const serving = up && (await frontendHealthy(n.ports.frontend!).catch(() => false));
      const s = standing.find((x) => x.node === n.index + 1);
      const ring = s ? ringProblem(s, members) : '';
      return { node: n.index + 1, pid: n.pid, running: up, serving, joined: s !== undefined && joined(s), ...(ring ? { ring } : {}), frontend: `127.0.0.1:${n.ports.frontend}` };
    }),
  );
  const frontendRunning = running(state.frontend);
  const frontend = { pid: state.frontend.pid, running: frontendRunning, serving: frontendRunning && (await frontendHealthy(state.frontend.port).catch(() => false)), address: `127.0.0.1:${state.frontend.port}` };
  if (!frontend.serving) problems.push(`the cluster frontend ${frontend.address} is ${frontend.running ? 'not serving (no node answers through it)' : 'not running'}`);
  const processes = state.processes.map((p) => ({ service: p.service, pid: p.pid, running: running(p), temporal: p.temporalAddress, ...(p.service === 'api' ? { http: `http://127.0.0.1:${p.httpPort}` } : {}) }));
  for (const n of nodes) if (!n.running || !n.serving || !n.joined) problems.push(`temporal node ${n.node} is ${!n.running ? 'not running' : !n.serving ? 'not serving' : `not in one ring with the others: ${n.ring ?? 'no answer'}`}`);
  for (const p of processes) if (!p.running) problems.push(`steward ${p.service} is not running`);
  return { ok: problems.length === 0, nodes, frontend, processes, problems };
}

/** --join-timeout: whole seconds, 5 to 600. */
function joinTimeout(value: string | undefined): number {
  const n = Number(value);
  if (!/^\d+$/.test(value ?? '') || n < 5 || n > 600) throw new ClusterError(`--join-timeout: whole seconds from 5 to 600 (got ${JSON.stringify(value)})`);
  return n * 1000;
}

type ClusterIo = { out: (s: string) => void; err: (s: string) => void };
type ClusterHandlers = HandlersOf<'cluster', ClusterIo>;

/** A cluster subcommand; a refusal (ClusterError) prints why and exits 1. */
function clusterSub<V extends { dir?: string }>(sub: string, run: (dir: string, ctx: CliContext<V, ClusterIo>, say: (s: string) => void) => Promise<number>) {
  return async (ctx: CliContext<V, ClusterIo>): Promise<number> => {
    const dir = path.resolve(ctx.values.dir ?? path.join(process.env.STEWARD_DATA_DIR ?? path.join(REPO_ROOT, '.data'), 'cluster'));
    try {
      return await run(dir, ctx, (s) => ctx.io.err(`cluster: ${s}\n`));
    } catch (err) {
      if (!(err instanceof ClusterError)) throw err;
      ctx.io.err(`steward cluster ${sub}: ${err.message}\n`);
      return 1;
    }
  };
}

const CLUSTER = {
  up: clusterSub<Parameters<ClusterHandlers['cluster']['up']>[0]['values']>('up', async (dir, { values, io }, say) => {
    const state = await clusterUp({
      dir,
      composeFile: path.join(REPO_ROOT, 'docker-compose.yml'),
      nodes: Number(values.nodes ?? '2'),
      basePort: Number(values['base-port'] ?? '7233'),
      apiPort: Number(values['api-port'] ?? '8787'),
      ...(values['pg-url'] ? { pgUrl: values['pg-url'] } : {}),
      dbPrefix: values['db-prefix'] ?? '',
      env: process.env,
      say,
      joinTimeoutMs: joinTimeout(values['join-timeout'] ?? '30'),
    });
    const api = state.processes.find((p) => p.service === 'api')!;
    io.out(`Steward is running on a ${state.nodes.length}-node Temporal ${state.version} cluster on PostgreSQL: API http://127.0.0.1:${api.httpPort} (token in ${path.join(dir, 'secrets.json')}), Temporal at 127.0.0.1:${state.frontend.port} (nodes ${state.nodes.map((n) => `127.0.0.1:${n.ports.frontend}`).join(', ')}).\n`);
    return 0;
  }),
  restart: clusterSub<Parameters<ClusterHandlers['cluster']['restart']>[0]['values']>('restart', async (dir, { args: named, values, io }, say) => {
    const targets = named.length === 0 ? ['worker', 'repo-worker', 'api'] : named.includes('all') ? [...RESTART_TARGETS] : named;
    const unknown = targets.filter((t) => !(RESTART_TARGETS as readonly string[]).includes(t));
    if (unknown.length) throw new ClusterError(`restart: unknown ${unknown.join(', ')} (one or more of ${RESTART_TARGETS.join(', ')}, or all)`);
    const state = await clusterRestart(dir, targets as RestartTarget[], process.env, say, joinTimeout(values['join-timeout'] ?? '30'));
    io.out(`restarted ${RESTART_TARGETS.filter((t) => targets.includes(t)).join(', ')}, one at a time; running: ${state.processes.map((p) => `${p.service} pid ${p.pid}`).join(', ')}; nodes ${state.nodes.map((n) => `pid ${n.pid}`).join(', ')}\n`);
    return 0;
  }),
  down: clusterSub('down', async (dir, _ctx, say) => {
    await clusterDown(dir, say);
    return 0;
  }),
  status: clusterSub<Parameters<ClusterHandlers['cluster']['status']>[0]['values']>('status', async (dir, { values, io }) => {
    const s = await clusterStatus(dir);
    if (values.json) io.out(`${JSON.stringify(s, null, 2)}\n`);
    else {
      for (const n of s.nodes) io.out(`temporal node ${n.node}  ${n.running ? `pid ${n.pid}` : 'stopped'}  ${n.frontend}  ${n.serving ? 'serving' : 'not serving'}, ${n.joined ? 'joined' : 'not joined'}\n`);
      io.out(`frontend        ${s.frontend.running ? `pid ${s.frontend.pid}` : 'stopped'}  ${s.frontend.address}  ${s.frontend.serving ? 'serving' : 'not serving'}\n`);
      for (const p of s.processes) io.out(`steward ${p.service.padEnd(11)} ${p.running ? `pid ${p.pid}` : 'stopped'}  Temporal ${p.temporal}${p.http ? `  ${p.http}` : ''}\n`);
      for (const p of s.problems) io.out(`problem: ${p}\n`);
    }
    return s.ok ? 0 : 1;
  }),
} satisfies ClusterHandlers['cluster'];

/** `steward cluster ...` from the command line (commander parses it from the command table); the exit code. */
export function clusterCommand(args: readonly string[], io: ClusterIo): Promise<number> {
  return runCommand('cluster', args, io, { cluster: CLUSTER });
}
