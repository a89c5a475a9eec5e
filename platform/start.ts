/**
 * The all-in-one start: Temporal (embedded dev server unless TEMPORAL_ADDRESS is set), the
 * database (migrated at start), the worker, the HTTP API. Returns a handle that shuts all of
 * it down in order.
 */
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Client } from '@temporalio/client';
import { DefaultLogger, Runtime, type LogLevel, type NativeConnection, type Worker } from '@temporalio/worker';
import type { Logger } from 'pino';
import { createDb, migrateDatabase, tuneDb, type Db } from '../activities/db.js';
import type { ActivityDeps } from '../activities/index.js';

import { createModelRegistry } from '../activities/model.js';
import { createHttpApp, startHttpServer } from '../adapters/http/app.js';
import { createIngress } from '../adapters/ingress.js';
import { createOpenHarnessRoutes } from '../adapters/openharness/engine.js';
import type { StewardConfig } from '../config/index.js';
import { createChangeService } from '../adapters/changes.js';
import { createObjectiveService } from '../adapters/objectives.js';
import { startObjectiveWatchers } from '../adapters/objective-watchers.js';
import { startInboundEmail } from '../adapters/inbound-email.js';
import { buildWorkflowBundle } from '../workers/bundle.js';
import { createStewardWorker } from '../workers/main.js';
import { createSenders, runLinker, startChannels, type RunningChannel } from './channels.js';
import { connectTemporal, ensureSearchAttributes, startEmbeddedTemporal } from './temporal-server.js';

export interface RunningSteward {
  apiUrl: string;
  apiToken: string;
  apiTokenGenerated: boolean;
  temporalAddress: string;
  temporalUiUrl?: string;
  namespace: string;
  dataDir: string;
  databaseUrl: string;
  model: string;
  modelConfigured: boolean;
  /** Chat platforms receiving messages, with their bot accounts. */
  channels: Array<{ platform: string; account: string }>;
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

export function redactUrl(url: string): string {
  return url.replace(/\/\/([^:/@]+):([^@]+)@/, '//$1:***@');
}

/** Route the Temporal SDK's logs into Steward's structured log. */
export function installTemporalRuntime(log: Logger): void {
  const levels: Record<LogLevel, 'trace' | 'debug' | 'info' | 'warn' | 'error'> = { TRACE: 'trace', DEBUG: 'debug', INFO: 'info', WARN: 'warn', ERROR: 'error' };
  try {
    Runtime.install({
      logger: new DefaultLogger('WARN', (entry) => {
        // the repo queue's worker is activity-only by design: its start-up notice is not a warning
        if (entry.message.startsWith('No workflows registered')) return;
        log[levels[entry.level]]({ sdk: entry.meta }, entry.message);
      }),
    });
  } catch {
    // a runtime is already installed in this process
  }
}

/** What the worker's activities need from configuration besides the database and models. */
function activityOptions(config: StewardConfig, uiUrl: string | undefined): Pick<ActivityDeps, 'toolPolicy' | 'runLink' | 'repoChanges' | 'actions'> {
  const runLink = runLinker(config.temporalUiUrl ?? uiUrl, config.temporal.namespace);
  const rc = config.repoChanges;
  return {
    toolPolicy: { approvalTools: config.governance.approvalTools, approvalTimeoutMs: config.governance.approvalTimeoutMs },
    ...(runLink ? { runLink } : {}),
    repoChanges: {
      globalPolicy: rc.globalPolicy,
      sandboxRoBinds: rc.sandboxRoBinds,
      githubApiUrl: rc.githubApiUrl,
      defaultModel: config.model.default,
      agentMaxSteps: rc.agentMaxSteps,
    },
    actions: config.actions,
  };
}

/**
 * The workers of this process: the interactive queue (sessions, turns, repo-change workflows,
 * chat activities), the background queue (objective runs: their workflows, turns and
 * activities) and the repo queue (repo changes' activities only: no workflow thread), so
 * neither scheduled work nor a long coding agent competes with chat for workers.
 */
async function workersFor(config: StewardConfig, connection: NativeConnection, deps: ActivityDeps): Promise<Worker[]> {
  const base = { connection, namespace: config.temporal.namespace, deps };
  const workflowBundle = await buildWorkflowBundle();
  const out = [await createStewardWorker({ ...base, taskQueue: config.temporal.taskQueue, maxCachedWorkflows: config.temporal.maxCachedWorkflows, workflowBundle })];
  if (config.temporal.backgroundTaskQueue !== config.temporal.taskQueue) {
    // objective runs: workflows, their turns and activities, so scheduled work never competes with chat
    out.push(await createStewardWorker({ ...base, taskQueue: config.temporal.backgroundTaskQueue, maxCachedWorkflows: Math.min(100, config.temporal.maxCachedWorkflows), workflowBundle }));
  }
  if (config.repoChanges.taskQueue !== config.temporal.taskQueue && config.repoChanges.taskQueue !== config.temporal.backgroundTaskQueue) {
    out.push(await createStewardWorker({ ...base, taskQueue: config.repoChanges.taskQueue, activitiesOnly: true }));
  }
  return out;
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

export async function startSteward(config: StewardConfig, log: Logger): Promise<RunningSteward> {
  installTemporalRuntime(log);
  const cleanups: Array<() => Promise<void>> = [];
  const stopAll = async () => {
    for (const fn of cleanups.reverse().splice(0)) {
      try {
        await fn();
      } catch (err) {
        log.warn({ err }, 'shutdown step failed');
      }
    }
  };
  const events = new EventEmitter<{ transcript: [sessionId: string, role: 'user' | 'assistant' | 'system'] }>();
  events.setMaxListeners(0);
  const onTranscript = (sessionId: string, role: 'user' | 'assistant' | 'system') => events.emit('transcript', sessionId, role);
  try {
    await mkdir(config.dataDir, { recursive: true });
    const { token, generated } = await resolveApiToken(config);

    // Temporal
    let address: string;
    let uiUrl: string | undefined;
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
      });
      cleanups.push(() => server.stop());
      address = server.address;
      uiUrl = server.uiUrl;
    }
    const { connection, nativeConnection } = await connectTemporal(config.temporal, address);
    cleanups.push(() => connection.close());
    cleanups.push(() => nativeConnection.close());
    if (config.temporal.address) await ensureSearchAttributes(connection, config.temporal.namespace);
    const client = new Client({ connection, namespace: config.temporal.namespace });

    // Database
    await migrateDatabase(config.databaseUrl);
    const db = createDb(config.databaseUrl);
    cleanups.push(() => db.$disconnect());
    await tuneDb(db, config.databaseUrl);

    // Worker
    const models = createModelRegistry(config.model.providers);
    const senders = createSenders(config, log);
    const runLink = runLinker(config.temporalUiUrl ?? uiUrl, config.temporal.namespace);
    const changes = createChangeService({
      client,
      db,
      taskQueue: config.temporal.taskQueue,
      activityQueue: config.repoChanges.taskQueue,
      clarifyTimeoutMs: config.repoChanges.clarifyTimeoutMs,
      maxQuestions: config.repoChanges.maxQuestions,
      ...(runLink ? { runLink } : {}),
      log,
    });
    const workers = await workersFor(config, nativeConnection, {
      db,
      models,
      systemPrompt: config.model.systemPrompt,
      log,
      onTranscript,
      senders,
      ...activityOptions(config, uiUrl),
      // an approved start_repo_change goes through the change service
      startRepoChange: (req, by, origin) => changes.startChange(req, by, origin),
    });
    const worker = workers[0]!;
    const running = runWorkers(workers, log);
    cleanups.push(() => running.stop());
    const objectives = createObjectiveService({
      client,
      db,
      taskQueue: config.temporal.backgroundTaskQueue,
      maxSteps: config.model.maxSteps,
      ...(runLink ? { runLink } : {}),
    });
    // Objective event triggers: changed files in watched workspaces, inbound email
    const watchers = await startObjectiveWatchers({ db, objectives, log });
    cleanups.push(() => watchers.stop());
    if (config.inboundSmtp) {
      const smtp = await startInboundEmail({ db, objectives, ...config.inboundSmtp, log });
      cleanups.push(() => smtp.close());
    }

    // HTTP API
    const ingress = createIngress({
      client,
      db,
      taskQueue: config.temporal.taskQueue,
      defaultModel: config.model.default,
      configuredProviders: () => models.configuredProviders(),
      limits: { maxSteps: config.model.maxSteps, maxTurnsPerRun: config.session.maxTurnsPerRun },
      log,
      onTranscript,
      senders,
      pairingTtlMs: config.governance.pairingTtlMs,
      rateLimits: config.governance.rateLimits,
      attachments: config.governance.attachments,
      changes,
      objectives,
    });
    const app = createHttpApp({
      ingress,
      apiToken: token,
      log,
      admin: { db },
      changes,
      objectives,
      health: async () => {
        const checks: Record<string, string> = {};
        checks.worker = worker.getState();
        // the other queues' workers (background, repo), by task queue
        for (const w of workers.slice(1)) checks[`worker:${w.options.taskQueue}`] = w.getState();
        try {
          await connection.healthService.check({});
          checks.temporal = 'ok';
        } catch (err) {
          checks.temporal = `unreachable: ${(err as Error).message}`;
        }
        try {
          await db.session.count();
          checks.database = 'ok';
        } catch (err) {
          checks.database = `error: ${(err as Error).message}`;
        }
        return { ok: workers.every((w) => w.getState() === 'RUNNING') && checks.temporal === 'ok' && checks.database === 'ok', checks };
      },
    });
    // OpenHarness shells: its own bearer tokens (and the operator's), outside /api/v1
    app.route('/', createOpenHarnessRoutes({ ingress, db, operatorToken: token, waitMs: config.openharness.waitMs, events, log }));
    const http = await startHttpServer(app, { host: config.http.host, port: config.http.port });
    cleanups.push(() => http.close());

    // Chat platforms (stopped first on shutdown, so nothing new arrives while the worker drains)
    const channels: RunningChannel[] = await startChannels(config, { ingress, senders, db, log });
    for (const ch of channels) cleanups.push(() => ch.stop());

    return {
      apiUrl: http.url,
      apiToken: token,
      apiTokenGenerated: generated,
      temporalAddress: address,
      ...(uiUrl ? { temporalUiUrl: uiUrl } : {}),
      namespace: config.temporal.namespace,
      dataDir: config.dataDir,
      databaseUrl: config.databaseUrl,
      model: config.model.default,
      modelConfigured: models.isConfigured(config.model.default),
      channels: channels.map((c) => ({ platform: c.platform, account: c.account })),
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
 * database and polls the interactive task queue until stopped.
 */
export async function startWorkerOnly(config: StewardConfig, log: Logger): Promise<{ stop(): Promise<void>; done: Promise<void> }> {
  installTemporalRuntime(log);
  if (!config.temporal.address) throw new Error('TEMPORAL_ADDRESS: expected host:port of the Temporal frontend the worker should poll');
  const { connection, nativeConnection } = await connectTemporal(config.temporal, config.temporal.address);
  await migrateDatabase(config.databaseUrl);
  const db = createDb(config.databaseUrl);
  await tuneDb(db, config.databaseUrl);
  const models = createModelRegistry(config.model.providers);
  const runLink = runLinker(config.temporalUiUrl, config.temporal.namespace);
  // an approved start_repo_change starts the change from here too
  const changes = createChangeService({
    client: new Client({ connection, namespace: config.temporal.namespace }),
    db,
    taskQueue: config.temporal.taskQueue,
    activityQueue: config.repoChanges.taskQueue,
    clarifyTimeoutMs: config.repoChanges.clarifyTimeoutMs,
    maxQuestions: config.repoChanges.maxQuestions,
    ...(runLink ? { runLink } : {}),
    log,
  });
  const workers = await workersFor(config, nativeConnection, {
    db,
    models,
    systemPrompt: config.model.systemPrompt,
    log,
    senders: createSenders(config, log),
    ...activityOptions(config, undefined),
    startRepoChange: (req, by, origin) => changes.startChange(req, by, origin),
  });
  const running = runWorkers(workers, log);
  const done = running.done.finally(async () => {
    await db.$disconnect();
    await nativeConnection.close();
    await connection.close();
  });
  return {
    done,
    async stop() {
      await running.stop();
      await done;
    },
  };
}

