/**
 * The all-in-one start: Temporal (embedded dev server unless TEMPORAL_ADDRESS is set), the
 * database (migrated at start), the worker, the HTTP API. Returns a handle that shuts all of
 * it down in order.
 */
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { access, chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Client, type Connection } from '@temporalio/client';
import type { DataConverter } from '@temporalio/common';
import { DefaultLogger, Runtime, type LogLevel, type NativeConnection, type Worker, type WorkflowBundleOption } from '@temporalio/worker';
import type { Logger } from 'pino';
import { createDb, migrateDatabase, tuneDb, type Db } from '../domain/db.js';
import type { ActivityDeps } from '../activities/index.js';

import { createModelRegistry, withSpend, type ModelRegistry, type ModelSpend } from '../domain/model.js';
import type { Senders } from '../domain/outbox.js';
import { countSessions } from '../domain/store/sessions.js';
import { createHttpApp, startHttpServer, type HttpDeps } from '../adapters/http/app.js';
import { AuthBackoff } from '../adapters/http/backoff.js';
import { createCodecRoutes } from '../adapters/http/codec.js';
import { BrowserSignIn } from '../adapters/http/sign-in.js';
import { createTemporalUiProxy } from '../adapters/http/temporal-ui.js';
import { chatEventHtml, createConsoleRoutes } from '../adapters/console/app.js';
import { createConsoleChats } from '../services/console.js';
import { createReceiptService } from '../services/receipts.js';
import { StewardCodec, codecDataConverter, resolveCodecKeys } from '../common/codec.js';
import { createIngress, type Ingress } from '../services/chat/intake.js';
import { createForkService } from '../services/replays/fork.js';
import { createConsolePersons } from '../services/auth.js';
import { isAdmin } from '../common/roles.js';
import type { Context } from 'hono';
import { createOpenHarnessRoutes } from '../adapters/openharness/engine.js';
import { EMBEDDED_UI_PATH, QUEUE_ROLES, temporalUiBase, type QueueRole, type StewardConfig } from '../config/index.js';
import { createChangeService, type ChangeService } from '../services/changes.js';
import { createObjectiveService, type ObjectiveService } from '../services/objectives.js';
import { createWorkspaceService, type WorkspaceService } from '../services/workspaces.js';
import { closeKnowledgeIndexes, knowledgeIndexOpener } from '../domain/knowledge/open.js';
import { embedderFor } from '../domain/knowledge/embedder.js';
import { createPromptLayers } from '../domain/knowledge/prompt-layers.js';
import { createKnowledgeService, type KnowledgeService } from '../services/knowledge.js';
import { createOperatorInbox } from '../services/decisions.js';
import { createChatLive } from '../services/chat/live.js';
import { policyWhatIf } from '../domain/changes/what-if.js';
import { createHeartbeat, inboxProbes, mcpProbes, modelProbe, type Heartbeat, type HeartbeatProbe, type ProbeSource } from '../domain/heartbeat.js';
import { channelProbe, databaseProbe, queueProbe, temporalProbe } from './heartbeat-probes.js';
import { databaseKind } from '../domain/db.js';
import { createTaskService, type TaskService } from '../services/tasks.js';
import { startResumingHandoffs } from '../services/handoff.js';
import { createLimiter, createSpend, type LimitSettings } from '../domain/limits.js';
import { budgetStandings, startSweepingExpired } from '../domain/budgets/ledger.js';
import { applyBudgetsFile } from '../domain/budgets/file.js';
import { sessionStartOptions } from '../services/chat/session-start.js';
import { createMcpService, type McpService } from '../services/mcp.js';
import { createMcpTools, type McpTools } from '../domain/mcp/tools.js';
import { syncConfigMcpServers } from '../domain/store/mcp.js';
import { startObjectiveWatchers } from '../adapters/objectives/watchers.js';
import { startWorkspaceWatchers } from '../adapters/workspaces/watchers.js';
import { startInboundEmail } from '../adapters/inbound-email.js';
import { startWorkspaceInboxes } from '../adapters/workspace-inbox.js';
import { buildWorkflowBundleFile, tracingBundlePath } from '../workers/bundle.js';
import { createStewardWorker, type StewardWorkerOptions } from '../workers/main.js';
import { createReplayActivities } from '../activities/replays.js';
import { replayQueueOf } from '../common/ids.js';
import { createPriceTable } from '../domain/budgets/prices.js';
import { compactWorkflowThreads } from '../workers/workflow-threads.js';
import { workerVersioningFor } from '../workers/versioning.js';
import { setBudgetStandings, setModelPrices } from '../common/metrics.js';
import { installTracing, renderMetrics, sdkMetricsTelemetry, startMetricsServer, useSdkMetrics, type MetricsServer, type Tracing } from './telemetry.js';
import { createSenders, runLinker, startChannels, type RunningChannel } from './channels.js';
import { freePort } from './ports.js';
import { openHistoryArchive } from './history-archive.js';
import { connectTemporal, ensureSearchAttributes, startEmbeddedTemporal } from './temporal-server.js';
import { wakeBudgetWaiters } from '../services/budgets/waiters.js';
import { createBudgetService, type BudgetService } from '../services/budgets.js';
import { createReplayService, replayStoreOf, type ReplayService } from '../services/replays.js';
import { replayReportFormats } from '../domain/replays/formats.js';
import { unavailableFeatures, type UnavailableFeature } from './capabilities.js';
import { startIdleMemoryRelease, type IdleReleaseOptions } from './idle-memory.js';
import { startMallocTrim, trimMalloc } from './malloc-trim.js';

export interface RunningSteward {
  apiUrl: string;
  /** The codec endpoint (`<apiUrl>/codec`) for the Temporal UI and `temporal --codec-endpoint`. */
  codecUrl: string;
  apiToken: string;
  apiTokenGenerated: boolean;
  temporalAddress: string;
  /** The Temporal UI: the embedded one served at `<apiUrl>/ui`, when this process started it. */
  temporalUiUrl?: string;
  /** A one-time link that signs a browser in and opens that UI (single use, within an hour). */
  temporalUiSignInUrl?: string;
  namespace: string;
  dataDir: string;
  databaseUrl: string;
  model: string;
  modelConfigured: boolean;
  /** Chat platforms receiving messages, with their bot accounts. */
  channels: Array<{ platform: string; account: string }>;
  /** What this machine cannot do (no sandbox, no git), for the banner; empty for `steward api`. */
  unavailable: UnavailableFeature[];
  db: Db;
  client: Client;
  /** Emits `transcript` (session id, role) whenever a message lands in a session's transcript. */
  events: EventEmitter<{ transcript: [sessionId: string, role: 'user' | 'assistant' | 'system'] }>;
  stop(): Promise<void>;
}

/** The API token: STEWARD_API_TOKEN, else the one saved in the data directory, else a new one. */
export async function resolveApiToken(config: StewardConfig): Promise<{ token: string; generated: boolean }> {
  if (config.http.apiToken) return { token: config.http.apiToken, generated: false };
  const file = path.join(config.dataDir, 'api-token');
  try {
    const saved = (await readFile(file, 'utf8')).trim();
    if (saved.length >= 16) return { token: saved, generated: false };
  } catch {
    // none saved yet
  }
  const token = randomBytes(24).toString('base64url');
  await writeFile(file, `${token}\n`, { mode: 0o600 });
  await chmod(file, 0o600);
  return { token, generated: true };
}

/**
 * STEWARD_IDLE_MEMORY_RELEASE (platform/idle-memory.ts): the main heap, then each workflow
 * thread's, then the C allocator (unless STEWARD_MALLOC_TRIM_INTERVAL is off).
 */
function idleReleaseOptions(config: StewardConfig, log: Logger): IdleReleaseOptions {
  return {
    quietMs: config.idleMemoryReleaseMs,
    log,
    threads: () => compactWorkflowThreads(),
    ...(config.mallocTrimEveryMs > 0 ? { trim: () => void trimMalloc() } : {}),
  };
}

export function redactUrl(url: string): string {
  return url.replace(/\/\/([^:/@]+):([^@]+)@/, '//$1:***@');
}

/**
 * Route the Temporal SDK's logs into Steward's structured log, and have its metrics exported
 * for `/metrics` (Core's Prometheus exporter on a free loopback port, scraped by Steward).
 */
export async function installTemporalRuntime(log: Logger): Promise<void> {
  const levels: Record<LogLevel, 'trace' | 'debug' | 'info' | 'warn' | 'error'> = { TRACE: 'trace', DEBUG: 'debug', INFO: 'info', WARN: 'warn', ERROR: 'error' };
  const metricsAddress = `127.0.0.1:${await freePort()}`;
  try {
    Runtime.install({
      logger: new DefaultLogger('WARN', (entry) => {
        // the repo queue's worker is activity-only by design: its start-up notice is not a warning
        if (entry.message.startsWith('No workflows registered')) return;
        log[levels[entry.level]]({ sdk: entry.meta }, entry.message);
      }),
      telemetryOptions: sdkMetricsTelemetry(metricsAddress),
    });
    useSdkMetrics(metricsAddress);
  } catch {
    // a runtime is already installed in this process (its metrics, if any, are not Steward's to serve)
  }
}

/** The workers' part of tracing: activity interceptors, the workflow spans' sink, and whether new runs trace. */
function workerTelemetry(tracing: Tracing): Pick<StewardWorkerOptions, 'interceptors' | 'sinks' | 'traceNewRuns'> {
  return { ...(tracing.workerInterceptors ? { interceptors: tracing.workerInterceptors } : {}), sinks: tracing.sinks, traceNewRuns: tracing.enabled };
}

/** The knowledge index of this Steward: hybrid search when STEWARD_EMBEDDING_MODEL names a model (a failing one is logged); its embeddings spend from the model budget. */
function knowledgeOf(config: StewardConfig, log?: Logger, spend?: ModelSpend) {
  const embedder = embedderFor({ embeddingModel: createModelRegistry(config.model.providers).embeddingModel, ...(spend ? { spend } : {}) }, config.retrieval.embeddingModel);
  return knowledgeIndexOpener(config.databaseUrl, config.dataDir, { ...(embedder ? { embedder } : {}), ...(log ? { warn: (detail: Record<string, unknown>, message: string) => log.warn(detail, message) } : {}) });
}

/** The limits of every path that causes a model call (domain/limits.ts), from the one config section that holds them. */
export function limitSettings(config: StewardConfig): LimitSettings {
  return {
    turns: config.governance.rateLimits,
    triage: config.governance.triageLimits,
    objectiveRuns: config.governance.objectiveRunLimit,
    ...(config.governance.tokenBudget ? { tokens: config.governance.tokenBudget } : {}),
  };
}

/**
 * The workers' model registry: every model call reserves from the budget ledger while any budget
 * exists (defined by `steward budgets`, the API, STEWARD_BUDGETS_FILE (applied here first: a bad
 * file stops the start), or STEWARD_TOKEN_BUDGET as the installation's; unset, that budget is
 * removed), and the expired reservations (a crashed worker's) are swept every minute until
 * `cleanups` run.
 */
async function modelsWithBudget(config: StewardConfig, db: Db, senders: Senders, cleanups: Cleanups, log: Logger): Promise<ModelRegistry> {
  const applied = await applyBudgetsFile(db, config.governance.budgetsFile);
  if (applied.created.length + applied.changed.length + applied.removed.length > 0) log.info({ file: config.governance.budgetsFile, ...applied, unchanged: applied.unchanged.length }, 'budgets applied from STEWARD_BUDGETS_FILE');
  const models = createModelRegistry(config.model.providers);
  const ledger = createSpend({ db, budget: limitSettings(config).tokens ?? null, senders, prices: config.model.prices });
  cleanups.push(startSweepingExpired(ledger, log));
  return withSpend(models, ledger);
}

/** What the worker's activities need from configuration besides the database and models. */
function activityOptions(config: StewardConfig, log?: Logger, spend?: ModelSpend): Pick<ActivityDeps, 'toolPolicy' | 'runLink' | 'repoChanges' | 'actions' | 'knowledge' | 'retrieval' | 'promptFile' | 'skillsDir' | 'memoryApproval' | 'memoryRecall' | 'streamModel' | 'limits'> {
  const runLink = runLinker(temporalUiBase(config), config.temporal.namespace);
  const rc = config.repoChanges;
  return {
    limits: limitSettings(config),
    toolPolicy: { approvalTools: config.governance.approvalTools, approvalTimeoutMs: config.governance.approvalTimeoutMs, forbidSelfApproval: config.governance.forbidSelfApproval },
    ...(runLink ? { runLink } : {}),
    repoChanges: {
      globalPolicy: rc.globalPolicy,
      sandboxRoBinds: rc.sandboxRoBinds,
      githubApiUrl: rc.githubApiUrl,
      defaultModel: config.model.default,
      agentMaxSteps: rc.agentMaxSteps,
    },
    actions: config.actions,
    knowledge: knowledgeOf(config, log, spend),
    retrieval: config.retrieval,
    ...(config.model.promptFile ? { promptFile: config.model.promptFile } : {}),
    skillsDir: config.knowledge.skillsDir,
    memoryApproval: config.knowledge.memoryApproval,
    memoryRecall: config.knowledge.memoryRecall,
    streamModel: config.model.stream,
  };
}

/**
 * The MCP client of this process (its servers' connections, closed at shutdown); with `sync`,
 * the STEWARD_MCP_CONFIG file's servers are written to the database first.
 */
async function startMcp(config: StewardConfig, db: Db, log: Logger, cleanups: Cleanups, sync: boolean): Promise<McpTools> {
  if (sync) {
    const r = await syncConfigMcpServers(db, config.mcp.servers);
    if (r.conflicts.length) log.warn({ servers: r.conflicts, file: config.mcp.configFile }, 'MCP servers of STEWARD_MCP_CONFIG are also registered through the API: the API registration is kept');
    if (r.added.length + r.updated.length + r.removed.length > 0) log.info({ ...r, file: config.mcp.configFile }, 'MCP servers from STEWARD_MCP_CONFIG');
  }
  const mcp = createMcpTools({ db, dataDir: config.dataDir, warn: (detail, message) => log.warn(detail, message) });
  cleanups.push(() => mcp.close());
  return mcp;
}

/** The task queue each queue role polls. */
export function queueOf(config: StewardConfig, role: QueueRole): string {
  return role === 'interactive' ? config.temporal.taskQueue : role === 'background' ? config.temporal.backgroundTaskQueue : config.repoChanges.taskQueue;
}

/**
 * The payload codec of every client and worker: STEWARD_CODEC_KEYS, else the key kept in
 * `<dataDir>/codec-keys.json` (generated there on first start when the codec is on). With
 * STEWARD_CODEC=off nothing new is encrypted, but payloads encrypted earlier still decode.
 */
export async function payloadCodecFor(config: StewardConfig, log?: Logger): Promise<{ codec: StewardCodec; dataConverter: DataConverter }> {
  const { keys, source, file } = await resolveCodecKeys({ ...(config.codec.keys ? { keys: config.codec.keys } : {}), dataDir: config.dataDir, generate: config.codec.enabled });
  if (source === 'generated') log?.info({ file, keyId: keys[0]?.id }, 'generated the payload encryption key: back it up (without it, stored histories cannot be read)');
  if (source !== 'config' && config.codec.enabled && config.temporal.address) {
    log?.warn({ file }, 'STEWARD_CODEC_KEYS is unset: using the key file of this data directory; every Steward process of a deployment needs the same keys');
  }
  const codec = new StewardCodec({ keys, compressAboveBytes: config.codec.compressAboveBytes, encrypt: config.codec.enabled });
  return { codec, dataConverter: codecDataConverter(codec) };
}

/**
 * The workflow bundle: the prebuilt one (STEWARD_WORKFLOW_BUNDLE) when set, else bundled from
 * source by a child process into a temporary file (`dispose` removes it once the workers have
 * read it), so the bundler's memory is not this process's.
 */
async function workflowBundleFor(config: StewardConfig, tracing: boolean): Promise<{ bundle: WorkflowBundleOption; dispose(): void }> {
  // a worker that traces runs the bundle with the tracing interceptors (workers/bundle.ts)
  const file = config.workers.bundlePath && (tracing ? tracingBundlePath(config.workers.bundlePath) : config.workers.bundlePath);
  if (!file) {
    const built = await buildWorkflowBundleFile({ tracing });
    return { bundle: { codePath: built.file }, dispose: built.dispose };
  }
  try {
    await access(file);
  } catch {
    throw new Error(`STEWARD_WORKFLOW_BUNDLE: no bundle at ${file}; build one with \`node --import tsx workers/bundle.ts ${file}\` or unset it to bundle from source`);
  }
  return { bundle: { codePath: file }, dispose: () => undefined };
}

/**
 * The workers of this process, one per task queue of the given roles: the interactive queue
 * (sessions, turns, repo-change workflows, chat activities), the background queue (objective
 * runs: their workflows, turns and activities) and the repo queue (repo changes' activities
 * only: no workflow thread), so neither scheduled work nor a long coding agent competes with
 * chat for workers. Roles that share a task queue share its worker.
 */
async function workersFor(
  config: StewardConfig,
  connection: NativeConnection,
  deps: ActivityDeps,
  opts: {
    roles: readonly QueueRole[];
    dataConverter: DataConverter;
    telemetry: Pick<StewardWorkerOptions, 'interceptors' | 'sinks' | 'traceNewRuns'>;
    /** Worker Versioning: this build's deployment version (every queue's worker); unversioned when absent. */
    workerDeploymentOptions?: StewardWorkerOptions['workerDeploymentOptions'];
  },
): Promise<Worker[]> {
  const { roles, dataConverter, telemetry, workerDeploymentOptions } = opts;
  const byQueue = new Map<string, QueueRole[]>();
  for (const role of roles) {
    const queue = queueOf(config, role);
    byQueue.set(queue, [...(byQueue.get(queue) ?? []), role]);
  }
  let bundle: { bundle: WorkflowBundleOption; dispose(): void } | undefined;
  const out: Worker[] = [];
  try {
    for (const [taskQueue, queueRoles] of byQueue) {
      const activitiesOnly = queueRoles.every((r) => r === 'repo');
      const slots = Math.max(0, ...queueRoles.map((r) => config.workers.concurrency[r] ?? 0));
      // the background worker keeps fewer workflows cached: objective runs are short-lived
      const cached = queueRoles.includes('interactive') ? config.temporal.maxCachedWorkflows : Math.min(100, config.temporal.maxCachedWorkflows);
      out.push(
        await createStewardWorker({
          connection,
          namespace: config.temporal.namespace,
          deps,
          taskQueue,
          dataConverter,
          ...telemetry,
          ...(workerDeploymentOptions ? { workerDeploymentOptions } : {}),
          ...(activitiesOnly
            ? { activitiesOnly: true }
            : { workflowBundle: (bundle ??= await workflowBundleFor(config, opts.telemetry.traceNewRuns === true)).bundle, maxCachedWorkflows: cached, workflowWatchdog: config.temporal.workflowWatchdog, workflowStackTraces: config.temporal.workflowStackTraces }),
          ...(slots > 0 ? { concurrency: { maxConcurrentActivityTaskExecutions: slots, maxConcurrentWorkflowTaskExecutions: slots } } : {}),
        }),
      );
    }
    if (roles.includes('background')) out.push(await replayWorkerFor(config, connection, deps, { dataConverter, telemetry, ...(workerDeploymentOptions ? { workerDeploymentOptions } : {}) }));
  } finally {
    // every worker has read the bundle (Worker.create loads it)
    bundle?.dispose();
  }
  return out;
}

/**
 * The replay queue's worker (`<background queue>-replay`), beside the background worker: the
 * replay implementations of the turn loop's activities (activities/replays.ts, docs/replay.md),
 * activities only. Replays are background work: at most 4 activities at once.
 */
function replayWorkerFor(
  config: StewardConfig,
  connection: NativeConnection,
  deps: ActivityDeps,
  opts: { dataConverter: DataConverter; telemetry: Pick<StewardWorkerOptions, 'interceptors' | 'sinks' | 'traceNewRuns'>; workerDeploymentOptions?: StewardWorkerOptions['workerDeploymentOptions'] },
): Promise<Worker> {
  const backgroundQueue = config.temporal.backgroundTaskQueue;
  return createStewardWorker({
    connection,
    namespace: config.temporal.namespace,
    deps,
    taskQueue: replayQueueOf(backgroundQueue),
    dataConverter: opts.dataConverter,
    ...opts.telemetry,
    ...(opts.workerDeploymentOptions ? { workerDeploymentOptions: opts.workerDeploymentOptions } : {}),
    activitiesOnly: true,
    activities: createReplayActivities({
      ...deps,
      maxSteps: config.model.maxSteps,
      backgroundQueue,
      prices: createPriceTable(config.model.prices).all(),
      ...(config.replay.historiesDir ? { archive: openHistoryArchive(config.replay.historiesDir) } : {}),
    }),
    concurrency: { maxConcurrentActivityTaskExecutions: 4 },
  });
}

/** A client of the configured namespace with the payload codec and, when configured, tracing. */
function clientFor(config: StewardConfig, connection: Connection, dataConverter: DataConverter, tracing: Tracing): Client {
  return new Client({ connection, namespace: config.temporal.namespace, dataConverter, ...(tracing.clientInterceptors ? { interceptors: tracing.clientInterceptors } : {}) });
}

/** The change service (chat /change, the API, and approved start_repo_change actions). */
function changeServiceFor(config: StewardConfig, client: Client, db: Db, runLink: ((workflowId: string) => string | undefined) | undefined, log: Logger) {
  return createChangeService({
    client,
    db,
    limiter: createLimiter({ db, settings: limitSettings(config) }),
    taskQueue: config.temporal.taskQueue,
    activityQueue: config.repoChanges.taskQueue,
    clarifyTimeoutMs: config.repoChanges.clarifyTimeoutMs,
    maxQuestions: config.repoChanges.maxQuestions,
    ...(runLink ? { runLink } : {}),
    log,
  });
}

function runWorkers(workers: Worker[], log: Logger): { done: Promise<void>; stop(): Promise<void> } {
  const runs = workers.map((w) => w.run());
  for (const r of runs) r.catch((err: unknown) => log.error({ err }, 'worker stopped with an error'));
  const done = Promise.allSettled(runs).then(() => undefined);
  return {
    done,
    async stop() {
      for (const w of workers) if (w.getState() === 'RUNNING') w.shutdown();
      await done;
    },
  };
}

export interface StartOptions {
  /**
   * `all` (the default): everything in one process, with an embedded Temporal server unless
   * TEMPORAL_ADDRESS is set. `api`: the HTTP API, chat adapters and event triggers without
   * workers (`steward api`), against TEMPORAL_ADDRESS; `steward worker` processes do the work.
   */
  role?: 'all' | 'api';
}

/** Shutdown steps, in the order they were added (they run last first). */
type Cleanups = Array<() => Promise<void>>;

/** Runs every shutdown step once, the last added first; a step that fails is logged and the others still run. */
async function runCleanups(cleanups: Cleanups, log: Logger): Promise<void> {
  for (const fn of cleanups.reverse().splice(0)) {
    try {
      await fn();
    } catch (err) {
      log.warn({ err }, 'shutdown step failed');
    }
  }
}

/** Temporal reached from this process, and the embedded UI's upstream when this process started the dev server with its UI. */
interface TemporalConnections {
  address: string;
  uiUpstream: string | undefined;
  connection: Connection;
  nativeConnection: NativeConnection;
}

/**
 * Temporal: the configured cluster (its search attributes ensured), else the embedded dev server,
 * whose Web UI listens on loopback under /ui and is served through the API's origin (<api>/ui),
 * where its relative codec endpoint (/codec) is the API's own. Connected; the server's stop and
 * the connections' closes join the shutdown steps.
 */
async function startTemporal(config: StewardConfig, log: Logger, cleanups: Cleanups): Promise<TemporalConnections> {
  let address: string;
  let uiUpstream: string | undefined;
  if (config.temporal.address) {
    address = config.temporal.address;
  } else {
    const server = await startEmbeddedTemporal({
      dataDir: config.dataDir,
      port: config.temporal.embedded.port,
      uiPort: config.temporal.embedded.uiPort,
      ui: config.temporal.embedded.ui,
      namespace: config.temporal.namespace,
      ...(config.temporal.embedded.cliPath ? { cliPath: config.temporal.embedded.cliPath } : {}),
      log,
      uiCodecEndpoint: '/codec',
      uiPublicPath: EMBEDDED_UI_PATH,
    });
    cleanups.push(() => server.stop());
    address = server.address;
    if (server.uiUrl) uiUpstream = new URL(server.uiUrl).origin;
  }
  const { connection, nativeConnection } = await connectTemporal(config.temporal, address);
  cleanups.push(() => connection.close());
  cleanups.push(() => nativeConnection.close());
  if (config.temporal.address) await ensureSearchAttributes(connection, config.temporal.namespace);
  return { address, uiUpstream, connection, nativeConnection };
}

/** The database, migrated and tuned; its disconnect joins the shutdown steps. */
async function openDatabase(databaseUrl: string, cleanups: Cleanups, log: Logger): Promise<Db> {
  await migrateDatabase(databaseUrl);
  const db = createDb(databaseUrl);
  cleanups.push(() => db.$disconnect());
  cleanups.push(await tuneDb(db, databaseUrl, { log }));
  // the budget gauges read the ledger when /metrics is scraped
  setBudgetStandings(() => budgetStandings(db));
  return db;
}

/**
 * The all-in-one process's workers, one per task queue of every role, running (none for
 * `steward api`); their stop joins the shutdown steps. The all-in-one start replaces its only
 * build at restart: unversioned unless STEWARD_WORKER_VERSIONING=on.
 */
async function startLocalWorkers(
  config: StewardConfig,
  role: 'all' | 'api',
  temporal: Pick<TemporalConnections, 'connection' | 'nativeConnection'>,
  deps: ActivityDeps,
  opts: { dataConverter: DataConverter; tracing: Tracing; log: Logger; cleanups: Cleanups },
): Promise<Worker[]> {
  const { dataConverter, tracing, log, cleanups } = opts;
  const versioning = role === 'api' ? undefined : await workerVersioningFor(config.workers.versioning, temporal.connection, config.temporal.namespace, log, { allInOne: true });
  const workers =
    role === 'api'
      ? []
      : await workersFor(config, temporal.nativeConnection, deps, {
          roles: QUEUE_ROLES,
          dataConverter,
          telemetry: workerTelemetry(tracing),
          ...(versioning?.options ? { workerDeploymentOptions: versioning.options } : {}),
        });
  const running = runWorkers(workers, log);
  void versioning?.afterStart();
  cleanups.push(() => running.stop());
  return workers;
}

/** Objective event triggers: changed files in watched workspaces, and inbound email when configured; their stops join the shutdown steps. */
async function startObjectiveTriggers(config: StewardConfig, db: Db, objectives: ObjectiveService, log: Logger, cleanups: Cleanups): Promise<void> {
  const watchers = await startObjectiveWatchers({ db, objectives, log });
  cleanups.push(() => watchers.stop());
  if (config.inboundSmtp) {
    const smtp = await startInboundEmail({ db, objectives, ...config.inboundSmtp, log });
    cleanups.push(() => smtp.close());
  }
}

/** The health check of the API: each worker's state (the interactive queue's as `worker`), Temporal's and the database's. */
function healthCheck(config: StewardConfig, role: 'all' | 'api', workers: Worker[], connection: Connection, db: Db): HttpDeps['health'] {
  return async () => {
    const checks: Record<string, string> = {};
    // the interactive queue's worker as `worker`, the others (background, repo) by task queue
    for (const w of workers) checks[w.options.taskQueue === config.temporal.taskQueue ? 'worker' : `worker:${w.options.taskQueue}`] = w.getState();
    if (role === 'api') checks.worker = 'none in this process (steward api)';
    try {
      await connection.healthService.check({});
      checks.temporal = 'ok';
    } catch (err) {
      checks.temporal = `unreachable: ${(err as Error).message}`;
    }
    try {
      await countSessions(db);
      checks.database = 'ok';
    } catch (err) {
      checks.database = `error: ${(err as Error).message}`;
    }
    return { ok: workers.every((w) => w.getState() === 'RUNNING') && checks.temporal === 'ok' && checks.database === 'ok', checks };
  };
}

/** Budgets: one service for the API and chat (/budget, the Raise button); a change or a raise wakes the turns waiting on the budget. */
function budgetServiceFor(config: StewardConfig, client: Client, db: Db, log: Logger): BudgetService {
  return createBudgetService(db, {
    wakeBudgetWaiters: (budgetId) => wakeBudgetWaiters(client, config.temporal.namespace, budgetId),
    onWakeError: (budgetId, err) => log.warn({ err, budgetId }, 'waking the turns waiting on a budget failed (they re-check by themselves)'),
  });
}

/** What the HTTP app serves from: the ingress, the services, and what the codec endpoint and the embedded UI need. */
/** What the heartbeat probes at start (the chat platforms' probes join once they run). */
function heartbeatProbesFor(config: StewardConfig, connection: Parameters<typeof temporalProbe>[0], address: string, client: Client, db: Db): Array<HeartbeatProbe | ProbeSource> {
  return [
    temporalProbe(connection, address),
    databaseProbe(db, databaseKind(config.databaseUrl)),
    ...[...new Set(QUEUE_ROLES.map((r) => queueOf(config, r)))].map((name) => queueProbe(client, config.temporal.namespace, { name, role: QUEUE_ROLES.filter((r) => queueOf(config, r) === name).join('+') })),
    modelProbe(db),
    inboxProbes(db),
    mcpProbes(db),
  ];
}

/** The browser sign-in, and the `/console` command's links: on STEWARD_PUBLIC_URL, else on the address the API listens on (known once it does). */
function browserSignIn(config: StewardConfig, token: string) {
  const signIn = new BrowserSignIn({ apiToken: token });
  let base = config.publicUrl;
  return {
    signIn,
    consoleLink: (identityId: string) => (base ? { url: `${base}/console/login/${signIn.issuePersonLink(identityId).token}`, expiresInMinutes: Math.round(signIn.linkTtlMs / 60_000) } : undefined),
    listening: (url: string) => {
      base ??= url;
    },
  };
}

interface ApiAppParts {
  ingress: Ingress;
  /** The browser sign-in (the operator's cookie and links, people's console links). */
  signIn: BrowserSignIn;
  /** Budgets (/api/v1/budgets): their changes and raises wake the turns waiting on them, as chat's do. */
  client: Client;
  token: string;
  db: Db;
  changes: ChangeService;
  objectives: ObjectiveService;
  workspaces: WorkspaceService;
  knowledge: KnowledgeService;
  heartbeat: Heartbeat;
  tasks: TaskService;
  mcp: McpService;
  health: HttpDeps['health'];
  /** Counterfactual replay (/api/v1/replays): services/replays.ts over the replay's store and report formats. */
  replays?: ReplayService;
  codec: StewardCodec;
  events: RunningSteward['events'];
  tracing: Tracing;
  uiUpstream: string | undefined;
  log: Logger;
}

/**
 * The HTTP app: the API (one back-off on wrong credentials for the API, the codec endpoint,
 * shells and webhooks), the OpenHarness shells, the codec endpoint and the embedded UI behind the
 * browser sign-in. Returns the sign-in too, for the UI's one-time link.
 */
function createApiApp(config: StewardConfig, parts: ApiAppParts): { app: ReturnType<typeof createHttpApp> } {
  const { ingress, client, token, db, changes, objectives, workspaces, knowledge, heartbeat, tasks, mcp, health, codec, events, tracing, uiUpstream, signIn, log, replays } = parts;
  const backoff = new AuthBackoff({ ...config.http.backoff, trustedProxies: config.http.trustedProxies, db, log });
  const persons = createConsolePersons(db);
  const consoleAdmin = async (c: Context): Promise<boolean> => {
    const id = signIn.personOfRequest(c);
    const who = id !== undefined ? await persons.actorOf(id) : undefined;
    return who !== undefined && isAdmin(who.role);
  };
  const runLink = runLinker(temporalUiBase(config), config.temporal.namespace);
  const inbox = createOperatorInbox({
    db,
    ingress,
    knowledge,
    tasks,
    ...(config.actions.heldSecrets ? { heldSecrets: config.actions.heldSecrets } : {}),
    ...(config.actions.smtp ? { smtpFrom: config.actions.smtp.from } : {}),
    ...(runLink ? { runLink } : {}),
  });
  const budgets = budgetServiceFor(config, client, db, log);
  const forks = createForkService({
    client,
    db,
    taskQueue: config.temporal.taskQueue,
    defaultModel: config.model.default,
    limits: { maxSteps: config.model.maxSteps, maxTurnsPerRun: config.session.maxTurnsPerRun, budgetWaitMs: config.session.budgetWaitMs },
  });
  const app = createHttpApp({
    ingress,
    apiToken: token,
    signIn,
    consoleAdmin,
    chatEvents: { html: chatEventHtml, live: createChatLive({ db, inbox, ...(config.actions.heldSecrets ? { heldSecrets: config.actions.heldSecrets } : {}) }) },
    log,
    backoff,
    metrics: renderMetrics,
    ...(tracing.httpMiddleware ? { tracing: tracing.httpMiddleware } : {}),
    admin: { db },
    budgets,
    changes,
    objectives,
    workspaces,
    knowledge,
    tasks,
    mcp,
    heartbeat,
    inbox,
    forks,
    ...(replays ? { replays } : {}),
    policyWhatIf: (r) =>
      policyWhatIf(db, {
        proposed: r.policy,
        current: { repoPolicy: config.repoChanges.globalPolicy, approvalTools: config.governance.approvalTools },
        ...(r.since ? { since: r.since } : {}),
        ...(r.repo ? { repo: r.repo } : {}),
        secret: (name) => process.env[name],
      }),
    health,
  });
  // OpenHarness shells: its own bearer tokens (and the operator's), outside /api/v1
  app.route('/', createOpenHarnessRoutes({ ingress, db, operatorToken: token, waitMs: config.openharness.waitMs, events, log, backoff }));
  // The codec endpoint for the Temporal UI and `temporal --codec-endpoint` (operator token or
  // the browser sign-in), and the embedded UI behind the same sign-in
  const uiPort = config.temporal.embedded.uiPort;
  const corsOrigins = config.codec.corsOrigins ?? [
    `http://127.0.0.1:${uiPort}`,
    `http://localhost:${uiPort}`,
    ...(config.temporalUiUrl ? [new URL(config.temporalUiUrl).origin] : []),
  ];
  app.route('/', createCodecRoutes({ codec, apiToken: token, corsOrigins, log, backoff, signIn, db, ...(uiUpstream ? { uiPath: EMBEDDED_UI_PATH } : {}) }));
  if (uiUpstream) app.route('/', createTemporalUiProxy({ basePath: EMBEDDED_UI_PATH, upstream: uiUpstream, signIn, backoff, log }));
  // the operator console (docs/console.md), behind the same sign-in
  const chats = createConsoleChats({ ingress, db, account: 'default' });
  app.route('/', createConsoleRoutes({ apiToken: token, signIn, persons, chats, services: { changes, objectives, workspaces, knowledge, heartbeat, mcp, tasks, inbox, budgets, forks, ...(replays ? { replays } : {}), receipts: createReceiptService(db) }, backoff, log, namespace: config.temporal.namespace, ...(uiUpstream ? { uiPath: EMBEDDED_UI_PATH } : {}) }));
  return { app };
}

export async function startSteward(config: StewardConfig, log: Logger, opts: StartOptions = {}): Promise<RunningSteward> {
  const role = opts.role ?? 'all';
  if (role === 'api' && !config.temporal.address) {
    throw new Error('TEMPORAL_ADDRESS: `steward api` serves a Temporal cluster that workers poll; set host:port of its frontend (or use `steward start` for all in one)');
  }
  await installTemporalRuntime(log);
  setModelPrices(config.model.prices);
  const tracing = installTracing({ ...(config.telemetry.tracesUrl ? { tracesUrl: config.telemetry.tracesUrl } : {}), serviceName: config.telemetry.serviceName }, log);
  const cleanups: Cleanups = [];
  // the last step of shutdown: spans still buffered go out
  cleanups.push(() => tracing.flush());
  const stopAll = () => runCleanups(cleanups, log);
  const events = new EventEmitter<{ transcript: [sessionId: string, role: 'user' | 'assistant' | 'system'] }>();
  events.setMaxListeners(0);
  const onTranscript = (sessionId: string, role: 'user' | 'assistant' | 'system') => events.emit('transcript', sessionId, role);
  try {
    await mkdir(config.dataDir, { recursive: true });
    const { token, generated } = await resolveApiToken(config);
    const { codec, dataConverter } = await payloadCodecFor(config, log);
    // what this machine cannot do (probed meanwhile; the workers' features, so not for `steward api`)
    const unavailable = role === 'api' ? Promise.resolve([]) : unavailableFeatures();

    const temporal = await startTemporal(config, log, cleanups);
    const { address, uiUpstream, connection } = temporal;
    const client = clientFor(config, connection, dataConverter, tracing);
    const db = await openDatabase(config.databaseUrl, cleanups, log);
    const mcp = await startMcp(config, db, log, cleanups, true);

    // Worker
    const senders = await createSenders(config, log);
    const models = await modelsWithBudget(config, db, senders, cleanups, log);
    const runLink = runLinker(temporalUiBase(config), config.temporal.namespace);
    const changes = changeServiceFor(config, client, db, runLink, log);
    const workers = await startLocalWorkers(config, role, temporal, {
      db,
      models,
      systemPrompt: config.model.systemPrompt,
      log,
      onTranscript,
      senders,
      ...activityOptions(config, log, models.spend),
      mcp,
      // an approved start_repo_change goes through the change service
      startRepoChange: (req, by, origin) => changes.startChange(req, by, origin),
    }, { dataConverter, tracing, log, cleanups });
    const objectives = createObjectiveService({
      client,
      db,
      taskQueue: config.temporal.backgroundTaskQueue,
      maxSteps: config.model.maxSteps,
      webhookToleranceMs: config.webhooks.toleranceMs,
      log,
      ...(runLink ? { runLink } : {}),
    });
    await startObjectiveTriggers(config, db, objectives, log, cleanups);
    const workspaces = createWorkspaceService({ db, client, taskQueue: config.temporal.backgroundTaskQueue, dataDir: config.dataDir, knowledge: knowledgeOf(config, log, models.spend) });
    cleanups.push(() => closeKnowledgeIndexes());
    const knowledge = createKnowledgeService({ db, knowledge: knowledgeOf(config, log, models.spend), skillsDir: config.knowledge.skillsDir, workspaces, forbidSelfApproval: config.governance.forbidSelfApproval });
    const workspaceWatchers = await startWorkspaceWatchers({ workspaces, log });
    cleanups.push(() => workspaceWatchers.stop());
    // the index is derived: catch up on what changed while nothing watched (and rebuild a new layout)
    void Promise.all([workspaces.catchUp(), knowledge.reindexMemories()]).then(
      ([names, memories]) => log.info({ workspaces: names.length, memories }, 'knowledge index caught up'),
      (err: unknown) => log.warn({ err }, 'catching up the knowledge index failed'),
    );
    // workspaces' IMAP inboxes: polled by the process that runs the background role (none connects until one is set)
    if (role === 'all') {
      const inboxes = await startWorkspaceInboxes({ db, workspaces, objectives, senders, log });
      cleanups.push(() => inboxes.stop());
    }

    // Triage and tasks: their workflows on the background queue; a task handed to the agent is a turn in its chat
    const sessionLimits = { maxSteps: config.model.maxSteps, maxTurnsPerRun: config.session.maxTurnsPerRun, budgetWaitMs: config.session.budgetWaitMs };
    // one limiter for every path that causes a model call (messages, tasks, triage; objective runs in the workers)
    const limiter = createLimiter({ db, settings: limitSettings(config), senders });
    const tasks = createTaskService({
      client,
      db,
      limiter,
      taskQueue: config.temporal.backgroundTaskQueue,
      defaultModel: config.model.default,
      sessionStart: (conversation, binding) => sessionStartOptions({ taskQueue: config.temporal.taskQueue, defaultModel: config.model.default, limits: sessionLimits }, conversation, binding),
      handoffAcceptMs: config.session.handoffAcceptMs,
      log,
    });

    // the heartbeat: each part's state and last success; a lasting degradation (and its end) told to the admins
    const heartbeatProbes = heartbeatProbesFor(config, connection, address, client, db);
    const heartbeat = createHeartbeat({ db, senders, probes: heartbeatProbes, thresholdMs: config.heartbeat.thresholdMs });
    // HTTP API
    const { signIn, consoleLink, listening } = browserSignIn(config, token);
    const ingress = createIngress({
      consoleLink,
      budgets: budgetServiceFor(config, client, db, log),
      heartbeat: () => heartbeat.current(),
      client,
      db,
      taskQueue: config.temporal.taskQueue,
      defaultModel: config.model.default,
      configuredProviders: () => models.configuredProviders(),
      limits: sessionLimits,
      handoffAcceptMs: config.session.handoffAcceptMs,
      log,
      onTranscript,
      senders,
      pairingTtlMs: config.governance.pairingTtlMs,
      limiter,
      attachments: config.governance.attachments,
      changes,
      objectives,
      workspaces,
      knowledge,
      tasks,
      promptLayers: createPromptLayers({ db, systemPrompt: config.model.systemPrompt, ...(config.model.promptFile ? { operatorFile: config.model.promptFile } : {}) }),
      ...(runLink ? { runLink } : {}),
    });
    // intake: what was accepted but not handed over (the process stopped in between, and no
    // redelivery came) is handed over at start and every minute, once (services/handoff.ts)
    cleanups.push(startResumingHandoffs({ messages: (o) => ingress.resumeHandoffs(o), events: (o) => objectives.resumeEventRuns(o) }, log));
    const health = healthCheck(config, role, workers, connection, db);
    const replays = createReplayService({ db, client, taskQueue: config.temporal.backgroundTaskQueue, account: 'default', configuredProviders: () => models.configuredProviders(), store: replayStoreOf(db), formats: replayReportFormats });
    const { app } = createApiApp(config, { ingress, signIn, client, token, db, changes, objectives, workspaces, knowledge, heartbeat, tasks, mcp: createMcpService({ db, manager: mcp.manager, changed: () => mcp.forgetRegistrations() }), health, codec, events, tracing, uiUpstream, log, replays });
    const http = await startHttpServer(app, { host: config.http.host, port: config.http.port });
    listening(http.url);
    cleanups.push(() => http.close());
    const uiSignInUrl = uiUpstream ? `${http.url}/codec/login/${signIn.issueLink().token}` : undefined;
    if (config.telemetry.metrics.port !== undefined) {
      const metricsServer = await startMetricsServer({ host: config.telemetry.metrics.host, port: config.telemetry.metrics.port, log });
      cleanups.push(() => metricsServer.close());
    }

    // Chat platforms (stopped first on shutdown, so nothing new arrives while the worker drains)
    const channels: RunningChannel[] = await startChannels(config, { ingress, senders, db, log });
    for (const ch of channels) cleanups.push(() => ch.stop());
    heartbeatProbes.push(...channels.map((c) => channelProbe(c.platform, c.account, c.connected)));
    cleanups.push(heartbeat.start(config.heartbeat.intervalMs, log));
    const missing = await unavailable;
    for (const u of missing) log.warn({ features: u.features, reason: u.reason, fix: u.fix }, 'unavailable on this machine');
    // what start-up compiled and freed goes back to the system, and so on every STEWARD_MALLOC_TRIM_INTERVAL
    const trimmer = startMallocTrim({ everyMs: config.mallocTrimEveryMs, log });
    cleanups.push(async () => trimmer.stop());
    // and what a load left in the heaps' pages once the process goes quiet
    const idleRelease = startIdleMemoryRelease(idleReleaseOptions(config, log));
    cleanups.push(async () => idleRelease.stop());

    return {
      apiUrl: http.url,
      codecUrl: `${http.url}/codec`,
      apiToken: token,
      apiTokenGenerated: generated,
      temporalAddress: address,
      ...(uiUpstream ? { temporalUiUrl: `${http.url}${EMBEDDED_UI_PATH}` } : {}),
      ...(uiSignInUrl ? { temporalUiSignInUrl: uiSignInUrl } : {}),
      namespace: config.temporal.namespace,
      dataDir: config.dataDir,
      databaseUrl: config.databaseUrl,
      model: config.model.default,
      modelConfigured: models.isConfigured(config.model.default),
      channels: channels.map((c) => ({ platform: c.platform, account: c.account })),
      unavailable: missing,
      db,
      client,
      events,
      stop: stopAll,
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

/**
 * A worker process alone (`steward worker`): connects to TEMPORAL_ADDRESS, migrates the
 * database and polls the queues of its roles (STEWARD_WORKER_QUEUES, `--queues`) until stopped.
 */
export async function startWorkerOnly(
  config: StewardConfig,
  log: Logger,
): Promise<{ stop(): Promise<void>; done: Promise<void>; queues: Array<{ role: QueueRole; taskQueue: string }> }> {
  await installTemporalRuntime(log);
  setModelPrices(config.model.prices);
  if (!config.temporal.address) throw new Error('TEMPORAL_ADDRESS: expected host:port of the Temporal frontend the worker should poll');
  const tracing = installTracing({ ...(config.telemetry.tracesUrl ? { tracesUrl: config.telemetry.tracesUrl } : {}), serviceName: config.telemetry.serviceName }, log);
  const { dataConverter } = await payloadCodecFor(config, log);
  const { connection, nativeConnection } = await connectTemporal(config.temporal, config.temporal.address);
  await migrateDatabase(config.databaseUrl);
  const db = createDb(config.databaseUrl);
  const stopCheckpoints = await tuneDb(db, config.databaseUrl, { log });
  setBudgetStandings(() => budgetStandings(db));
  const runLink = runLinker(temporalUiBase(config), config.temporal.namespace);
  // an approved start_repo_change starts the change from here too
  const client = clientFor(config, connection, dataConverter, tracing);
  const changes = changeServiceFor(config, client, db, runLink, log);
  const senders = await createSenders(config, log);
  const mcpCleanups: Cleanups = [];
  const models = await modelsWithBudget(config, db, senders, mcpCleanups, log);
  const mcp = await startMcp(config, db, log, mcpCleanups, false);
  // versioned when STEWARD_BUILD_ID is set and the server supports Worker Deployments (STEWARD_WORKER_VERSIONING)
  const versioning = await workerVersioningFor(config.workers.versioning, connection, config.temporal.namespace, log);
  const workers = await workersFor(config, nativeConnection, {
    db,
    models,
    systemPrompt: config.model.systemPrompt,
    log,
    senders,
    ...activityOptions(config, log, models.spend),
    mcp,
    startRepoChange: (req, by, origin) => changes.startChange(req, by, origin),
  }, { roles: config.workers.queues, dataConverter, telemetry: workerTelemetry(tracing), ...(versioning.options ? { workerDeploymentOptions: versioning.options } : {}) });
  // a worker process's metrics listener (STEWARD_METRICS_PORT): unauthenticated, for an internal interface
  const metricsServer: MetricsServer | undefined =
    config.telemetry.metrics.port !== undefined ? await startMetricsServer({ host: config.telemetry.metrics.host, port: config.telemetry.metrics.port, log }) : undefined;
  // workspaces' IMAP inboxes: polled by the process of the background role
  const inboxes = config.workers.queues.includes('background')
    ? await startWorkspaceInboxes({
        db,
        workspaces: createWorkspaceService({ db, client, taskQueue: config.temporal.backgroundTaskQueue, dataDir: config.dataDir, knowledge: knowledgeIndexOpener(config.databaseUrl, config.dataDir) }),
        objectives: createObjectiveService({ client, db, taskQueue: config.temporal.backgroundTaskQueue, maxSteps: config.model.maxSteps, log, ...(runLink ? { runLink } : {}) }),
        senders,
        log,
      })
    : undefined;
  const running = runWorkers(workers, log);
  const trimmer = startMallocTrim({ everyMs: config.mallocTrimEveryMs, log });
  const idleRelease = startIdleMemoryRelease(idleReleaseOptions(config, log));
  // the first versioned deploy makes itself current; later builds wait for the operator (docs/upgrades.md)
  void versioning.afterStart();
  const done = running.done.finally(async () => {
    trimmer.stop();
    idleRelease.stop();
    await inboxes?.stop();
    await runCleanups(mcpCleanups, log);
    await metricsServer?.close();
    await tracing.flush();
    await stopCheckpoints();
    await db.$disconnect();
    await nativeConnection.close();
    await connection.close();
  });
  return {
    done,
    queues: config.workers.queues.map((role) => ({ role, taskQueue: queueOf(config, role) })),
    async stop() {
      await running.stop();
      await done;
    },
  };
}

