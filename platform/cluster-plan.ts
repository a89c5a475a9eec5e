/**
 * The plan of `steward cluster`: the production shape of docker-compose.yml on one machine. The
 * Temporal server's version comes from the compose file's `temporal` image, and each Steward
 * process's command and environment from its service's `command` and `environment` (the
 * `x-steward` block merged in), so the compose file and this plan cannot drift. Only what a
 * container network gives for free is replaced: the hosts (`temporal:7233`, `steward-db`), the
 * ports (one machine, so each process gets its own) and the data directory.
 *
 * Pure: reads text, returns data; platform/cluster.ts runs it.
 */
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';

/** The Steward services of docker-compose.yml that `steward cluster` runs, in start order. */
export const STEWARD_SERVICES = ['api', 'worker', 'repo-worker'] as const;
export type StewardService = (typeof STEWARD_SERVICES)[number];

export class ClusterPlanError extends Error {
  override name = 'ClusterPlanError';
}

const ServiceSchema = z.object({
  image: z.string().optional(),
  command: z.array(z.string()).optional(),
  environment: z.record(z.string(), z.union([z.string(), z.number(), z.boolean(), z.null()])).optional(),
});
const ComposeSchema = z.object({ services: z.record(z.string(), ServiceSchema) });

/** A Steward process as the compose file describes it: its `steward` arguments and environment (uninterpolated). */
export interface ComposeProcess {
  service: StewardService;
  args: string[];
  environment: Record<string, string>;
}

export interface ComposeTopology {
  /** The Temporal server version of the `temporal` service's image (temporalio/server:X.Y.Z). */
  temporalVersion: string;
  processes: ComposeProcess[];
}

/** Read docker-compose.yml: the Temporal version and the Steward services (anchors and merges resolved). */
export function readComposeTopology(text: string): ComposeTopology {
  let doc: unknown;
  try {
    doc = parseYaml(text, { merge: true });
  } catch (err) {
    throw new ClusterPlanError(`docker-compose.yml is not valid YAML: ${(err as Error).message}`);
  }
  const parsed = ComposeSchema.safeParse(doc);
  if (!parsed.success) throw new ClusterPlanError(`docker-compose.yml: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  const services = parsed.data.services;
  const image = services.temporal?.image ?? '';
  const version = /^temporalio\/server:(\d+\.\d+\.\d+)$/.exec(image)?.[1];
  if (!version) throw new ClusterPlanError(`docker-compose.yml: the temporal service's image must be temporalio/server:X.Y.Z (found ${image || 'none'})`);
  const processes = STEWARD_SERVICES.map((service): ComposeProcess => {
    const s = services[service];
    if (!s) throw new ClusterPlanError(`docker-compose.yml has no ${service} service`);
    const environment = Object.fromEntries(Object.entries(s.environment ?? {}).map(([k, v]) => [k, v === null ? '' : String(v)]));
    return { service, args: s.command ?? ['start'], environment };
  });
  return { temporalVersion: version, processes };
}

/**
 * Compose's variable interpolation: `${VAR}`, `${VAR:-default}`, `${VAR-default}`,
 * `${VAR:?message}` (an error when unset or empty), `$$` for a dollar.
 */
export function interpolate(value: string, env: Record<string, string | undefined>, where: string): string {
  return value.replace(/\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?)([-?])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)/g, (m, name?: string, colon?: string, op?: string, arg?: string, bare?: string) => {
    if (m === '$$') return '$';
    if (bare) return env[bare] ?? '';
    const v = env[name!];
    const missing = colon ? v === undefined || v === '' : v === undefined;
    if (!op) return v ?? '';
    if (!missing) return v!;
    if (op === '-') return arg ?? '';
    throw new ClusterPlanError(`${where}: ${arg || `${name} is not set`}`);
  });
}

/** The ports of one Temporal node: every service's gRPC and membership port, HTTP, metrics and pprof. */
export interface NodePorts {
  frontend: number;
  frontendMembership: number;
  http: number;
  history: number;
  historyMembership: number;
  matching: number;
  matchingMembership: number;
  worker: number;
  workerMembership: number;
  metrics: number;
  pprof: number;
}

/** Ports per node: node i's block starts at `base + 20 i` (frontend), membership ports 300 below. */
export function nodePorts(base: number, index: number): NodePorts {
  const b = base + 20 * index;
  return {
    frontend: b,
    history: b + 1,
    matching: b + 2,
    worker: b + 6,
    http: b + 10,
    frontendMembership: b - 300,
    historyMembership: b - 299,
    matchingMembership: b - 298,
    workerMembership: b - 294,
    metrics: b + 12,
    pprof: b + 13,
  };
}

export interface SqlTarget {
  host: string;
  port: number;
  user: string;
  password: string;
  database: string;
}

/** A Temporal node's configuration (all services in one process; SQL persistence and visibility on PostgreSQL). */
export function nodeConfigYaml(opts: { ports: NodePorts; store: SqlTarget; visibility: SqlTarget; dynamicConfigFile: string; clusterAddress: string; shards: number; logLevel?: string }): string {
  const { ports: p } = opts;
  const sql = (t: SqlTarget, conns: number) =>
    [
      `      sql:`,
      `        pluginName: "postgres12"`,
      `        databaseName: ${JSON.stringify(t.database)}`,
      `        connectAddr: ${JSON.stringify(`${t.host}:${t.port}`)}`,
      `        connectProtocol: "tcp"`,
      `        user: ${JSON.stringify(t.user)}`,
      `        password: ${JSON.stringify(t.password)}`,
      `        maxConns: ${conns}`,
      `        maxIdleConns: ${conns}`,
      `        maxConnLifetime: "1h"`,
    ].join('\n');
  const service = (name: string, grpc: number, membership: number, extra = '') =>
    `  ${name}:\n    rpc:\n      grpcPort: ${grpc}\n      membershipPort: ${membership}\n      bindOnLocalHost: true${extra}`;
  return `# Written by steward cluster: one node of a Temporal cluster (every service in this process).
log:
  stdout: true
  level: ${opts.logLevel ?? 'warn'}
persistence:
  defaultStore: postgres-default
  visibilityStore: postgres-visibility
  numHistoryShards: ${opts.shards}
  datastores:
    postgres-default:
${sql(opts.store, 20)}
    postgres-visibility:
${sql(opts.visibility, 4)}
global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: "127.0.0.1"
  pprof:
    port: ${p.pprof}
  metrics:
    prometheus:
      framework: "tally"
      timerType: "histogram"
      listenAddress: "127.0.0.1:${p.metrics}"
services:
${service('frontend', p.frontend, p.frontendMembership, `\n      httpPort: ${p.http}`)}
${service('history', p.history, p.historyMembership)}
${service('matching', p.matching, p.matchingMembership)}
${service('worker', p.worker, p.workerMembership)}
clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: "active"
  currentClusterName: "active"
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: "frontend"
      rpcAddress: ${JSON.stringify(opts.clusterAddress)}
dcRedirectionPolicy:
  policy: "noop"
dynamicConfigClient:
  filepath: ${JSON.stringify(opts.dynamicConfigFile)}
  pollInterval: "10s"
`;
}

/**
 * The cluster's dynamic configuration. Server 1.32's defaults already enable what Steward uses
 * (updates, update-with-start, eager start, Worker Versioning); search attributes added by
 * `cluster up` are read fresh at once (the compose setup's development-sql.yaml does the same).
 */
export const DYNAMIC_CONFIG_YAML = `system.forceSearchAttributesCacheRefreshOnRead:
  - value: true
`;

/** What a Steward process of the cluster is given beyond its compose environment. */
export interface ProcessSite {
  temporalAddress: string;
  databaseUrl: string;
  dataDir: string;
  httpPort: number;
  metricsPort: number;
}

/**
 * A Steward process's environment: the compose service's, interpolated against `env` (the
 * operator's environment and the cluster's generated secrets), with the container network's
 * hosts and ports replaced by this machine's.
 */
export function processEnvironment(p: ComposeProcess, env: Record<string, string | undefined>, site: ProcessSite): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(p.environment)) out[k] = interpolate(v, env, `docker-compose.yml, service ${p.service}, ${k}`);
  out.TEMPORAL_ADDRESS = site.temporalAddress;
  out.DATABASE_URL = site.databaseUrl;
  out.STEWARD_DATA_DIR = site.dataDir;
  out.STEWARD_HTTP_HOST = '127.0.0.1';
  out.STEWARD_HTTP_PORT = String(site.httpPort);
  if ('STEWARD_METRICS_PORT' in out) {
    out.STEWARD_METRICS_PORT = String(site.metricsPort);
    out.STEWARD_METRICS_HOST = '127.0.0.1';
  }
  return out;
}
