/**
 * A Steward test harness: real Temporal (dev server), a real database, the real worker and
 * ingress, and the scripted OpenAI-compatible model server. One bundle per suite; a fresh
 * task queue per harness.
 */
import type { KnowledgeIndex } from '../../domain/knowledge/index-store.js';
import { createPromptLayers } from '../../domain/knowledge/prompt-layers.js';
import { createWorkspaceService, type WorkspaceService } from '../../services/workspaces.js';
import { createKnowledgeService, type KnowledgeService } from '../../services/knowledge.js';
import { createTaskService, type TaskService } from '../../services/tasks.js';
import { createLimiter, createSpend, DEFAULT_LIMITS, type LimitSettings } from '../../domain/limits.js';
import { sessionStartOptions } from '../../services/chat/session-start.js';
import { randomUUID } from 'node:crypto';
import { after, before } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { DefaultLogger, Runtime, type Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { Db } from '../../domain/db.js';
import type { McpTools } from '../../domain/mcp/tools.js';
import type { ToolPolicy } from '../../activities/index.js';
import type { ActionOptions } from '../../domain/actions.js';
import { DEFAULT_REPO_CHANGE_SETTINGS, type RepoChangeSettings } from '../../activities/changes.js';
import { createChangeService, type ChangeService } from '../../services/changes.js';
import { createObjectiveService, type ObjectiveService } from '../../services/objectives.js';
import { createModelRegistry, withSpend, type ModelProvidersConfig, type ModelSpend } from '../../domain/model.js';
import type { Senders } from '../../domain/outbox.js';
import { createIngress, type AttachmentLimits, type IngressDeps, type IngressResult, type IngressRuntime } from '../../services/chat/intake.js';
import type { RateLimits } from '../../common/roles.js';
import { sessionWorkflowId } from '../../common/ids.js';
import { DEFAULT_SYSTEM_PROMPT } from '../../config/index.js';
import { buildWorkflowBundle } from '../../workers/bundle.js';
import { createStewardWorker } from '../../workers/main.js';

// Keep test output readable: the SDK's own logs at WARN and above only.
try {
  Runtime.install({
    logger: new DefaultLogger('WARN', (entry) => {
      // the repo queue's worker is activity-only by design: its start-up notice is noise
      if (entry.message.startsWith('No workflows registered')) return;
      console.error(`[${entry.level}] ${entry.message}`, entry.meta ?? '');
    }),
  });
} catch {
  // already installed in this process
}

let bundlePromise: Promise<WorkflowBundleWithSourceMap> | undefined;
/** The workflow bundle, built once per test process. */
export function testBundle(): Promise<WorkflowBundleWithSourceMap> {
  bundlePromise ??= buildWorkflowBundle(quietLogger);
  return bundlePromise;
}

const quietLogger = {
  trace: () => undefined,
  debug: () => undefined,
  info: () => undefined,
  warn: () => undefined,
  error: (message: string) => console.error(message),
  log: () => undefined,
};

export interface HarnessOptions {
  /** The `/console` command's links (a BrowserSignIn's person links). */
  consoleLink?: IngressDeps['consoleLink'];
  env: TestWorkflowEnvironment;
  db: Db;
  providers: ModelProvidersConfig;
  /** The task queue of the worker and its sessions (default: a fresh one). */
  taskQueue?: string;
  model?: string;
  maxSteps?: number;
  maxTurnsPerRun?: number;
  maxCachedWorkflows?: number;
  /** Chat platform senders (given to the worker's activities and to ingress). */
  senders?: Senders;
  toolPolicy?: ToolPolicy;
  /** Proposed actions: SMTP, the HTTP policy, the command allowlist. */
  actions?: ActionOptions;
  rateLimits?: RateLimits;
  /** The limits of the paths that cause model calls (triage, objective runs); DEFAULT_LIMITS for the rest, `rateLimits` for turns. */
  limits?: Partial<LimitSettings>;
  pairingTtlMs?: number;
  attachments?: AttachmentLimits;
  /** Repository changes: activity settings and the change service's clarify deadline. */
  repoChanges?: Partial<RepoChangeSettings> & { clarifyTimeoutMs?: number; maxQuestions?: number };
  runLink?: (workflowId: string) => string | undefined;
  /** The operator's prompt file (STEWARD_PROMPT_FILE). */
  promptFile?: string;
  /** Workspaces: their folders under `dataDir`, the knowledge index (given to the background worker). */
  workspaces?: { dataDir: string; knowledge: () => Promise<KnowledgeIndex>; skillsDir?: string; memoryApproval?: 'members' | 'all' | 'none' };
  /** Tools from MCP servers (given to the chat and background workers' activities). */
  mcp?: McpTools;
  /** The heartbeat's states, for an admin's /status. */
  heartbeat?: () => Promise<import('../../domain/heartbeat.js').PartState[]>;
  /** How old a redelivered command's unfinished record must be before it runs again (ingress). */
  commandRetryAfterMs?: number;
  /** The model budget every model call reserves from (instead of STEWARD_TOKEN_BUDGET's, `limits.tokens`). */
  spend?: ModelSpend;
  /** STEWARD_BUDGET_WAIT of the harness's sessions (absent: the workflow's default). */
  budgetWaitMs?: number;
}

export interface Harness {
  taskQueue: string;
  /** The HTTP account of this harness's chats (unique per harness). */
  account: string;
  chatId: string;
  sessionId: string;
  ingress: IngressRuntime;
  /** Repositories and changes (the service behind /change, the API and the CLI). */
  changes: ChangeService;
  /** Objectives on Temporal Schedules (the service behind /objective, the API and the CLI). */
  objectives: ObjectiveService;
  /** Workspaces (the service behind /workspace, /search and /open), when the options asked for them. */
  workspaces?: WorkspaceService;
  /** Skills and memories (the service behind /skills and /memory), with workspaces. */
  knowledge?: KnowledgeService;
  /** Triage and tasks (the service behind /tasks, /task, /route, /triage and the API); its workflows run on the background queue. */
  tasks: TaskService;
  /** The background queue objective runs (workflows, turns, activities) run on. */
  backgroundQueue: string;
  worker: Worker;
  send(text: string, opts?: { chatId?: string; user?: string; id?: string }): Promise<IngressResult>;
  /** Wait until the transcript holds a message matching the predicate. */
  waitForMessage(pred: (m: { role: string; text: string }) => boolean, opts?: { chatId?: string; timeoutMs?: number }): Promise<{ role: string; text: string }>;
  sessionIdOf(chatId: string): string;
}

/** Run `fn` with a worker on a fresh task queue; the worker stops when `fn` settles. */
export async function withHarness<T>(opts: HarnessOptions, fn: (h: Harness) => Promise<T>): Promise<T> {
  const taskQueue = opts.taskQueue ?? `test-${randomUUID()}`;
  const account = `acct-${randomUUID().slice(0, 8)}`;
  // one limiter for every path that causes a model call, as in the started platform; every model call reserves from the spend budget when one is set
  const limits: LimitSettings = { ...DEFAULT_LIMITS, turns: opts.rateLimits ?? {}, ...opts.limits };
  const limiter = createLimiter({ db: opts.db, settings: limits, ...(opts.senders ? { senders: opts.senders } : {}) });
  const registry = createModelRegistry(opts.providers);
  const models = opts.spend ? withSpend(registry, opts.spend) : limits.tokens ? withSpend(registry, createSpend({ db: opts.db, budget: limits.tokens, ...(opts.senders ? { senders: opts.senders } : {}) })) : registry;
  const worker = await createStewardWorker({
    connection: opts.env.nativeConnection,
    namespace: opts.env.namespace ?? 'default',
    taskQueue,
    workflowBundle: await testBundle(),
    deps: {
      db: opts.db,
      models,
      systemPrompt: DEFAULT_SYSTEM_PROMPT,
      heartbeatEveryMs: 100,
      limits,
      ...(opts.senders ? { senders: opts.senders } : {}),
      ...(opts.toolPolicy ? { toolPolicy: opts.toolPolicy } : {}),
      ...(opts.actions ? { actions: opts.actions } : {}),
      startRepoChange: (req, by, origin) => changes.startChange(req, by, origin),
      ...(opts.runLink ? { runLink: opts.runLink } : {}),
      defaultModel: opts.model ?? 'openai-compatible:test-model',
      repoChanges: {
        ...DEFAULT_REPO_CHANGE_SETTINGS,
        defaultModel: opts.model ?? 'openai-compatible:test-model',
        ...(opts.repoChanges ?? {}),
      },
      ...(opts.workspaces ? { knowledge: opts.workspaces.knowledge } : {}),
      ...(opts.workspaces?.skillsDir ? { skillsDir: opts.workspaces.skillsDir } : {}),
      ...(opts.workspaces?.memoryApproval ? { memoryApproval: opts.workspaces.memoryApproval } : {}),
      ...(opts.promptFile ? { promptFile: opts.promptFile } : {}),
      ...(opts.mcp ? { mcp: opts.mcp } : {}),
    },
    ...(opts.maxCachedWorkflows !== undefined ? { maxCachedWorkflows: opts.maxCachedWorkflows } : {}),
  });
  // repo changes' activities on an activity-only worker, objectives on a full background worker, as in the started platform
  const activityWorker = async (queue: string, workflows = false) =>
    createStewardWorker({
      connection: opts.env.nativeConnection,
      namespace: opts.env.namespace ?? 'default',
      taskQueue: queue,
      ...(workflows ? { workflowBundle: await testBundle() } : { activitiesOnly: true }),
      deps: {
        db: opts.db,
        models,
        systemPrompt: DEFAULT_SYSTEM_PROMPT,
        heartbeatEveryMs: 100,
        limits,
        defaultModel: opts.model ?? 'openai-compatible:test-model',
        ...(opts.senders ? { senders: opts.senders } : {}),
        ...(opts.toolPolicy ? { toolPolicy: opts.toolPolicy } : {}),
        ...(opts.actions ? { actions: opts.actions } : {}),
        startRepoChange: (req, by, origin) => changes.startChange(req, by, origin),
        ...(opts.runLink ? { runLink: opts.runLink } : {}),
        repoChanges: { ...DEFAULT_REPO_CHANGE_SETTINGS, defaultModel: opts.model ?? 'openai-compatible:test-model', ...(opts.repoChanges ?? {}) },
        ...(opts.workspaces ? { knowledge: opts.workspaces.knowledge } : {}),
        ...(opts.mcp ? { mcp: opts.mcp } : {}),
      },
    });
  const repoQueue = `${taskQueue}-repo`;
  const backgroundQueue = `${taskQueue}-background`;
  const repoWorker = await activityWorker(repoQueue);
  // objectives: their run workflows, turns and activities all on the background queue
  const backgroundWorker = await activityWorker(backgroundQueue, true);
  const objectives = createObjectiveService({
    client: opts.env.client,
    db: opts.db,
    taskQueue: backgroundQueue,
    maxSteps: opts.maxSteps ?? 4,
    ...(opts.runLink ? { runLink: opts.runLink } : {}),
  });
  const changes = createChangeService({
    client: opts.env.client,
    db: opts.db,
    limiter,
    taskQueue,
    activityQueue: repoQueue,
    ...(opts.repoChanges?.clarifyTimeoutMs !== undefined ? { clarifyTimeoutMs: opts.repoChanges.clarifyTimeoutMs } : {}),
    ...(opts.repoChanges?.maxQuestions !== undefined ? { maxQuestions: opts.repoChanges.maxQuestions } : {}),
    ...(opts.runLink ? { runLink: opts.runLink } : {}),
  });
  const workspaces = opts.workspaces
    ? createWorkspaceService({ client: opts.env.client, db: opts.db, taskQueue: backgroundQueue, dataDir: opts.workspaces.dataDir, knowledge: opts.workspaces.knowledge })
    : undefined;
  const knowledge = workspaces ? createKnowledgeService({ ...(opts.toolPolicy?.forbidSelfApproval === false ? { forbidSelfApproval: false } : {}), db: opts.db, knowledge: opts.workspaces!.knowledge, ...(opts.workspaces!.skillsDir ? { skillsDir: opts.workspaces!.skillsDir } : {}), workspaces }) : undefined;
  const sessionLimits = { maxSteps: opts.maxSteps ?? 4, maxTurnsPerRun: opts.maxTurnsPerRun ?? 100, ...(opts.budgetWaitMs !== undefined ? { budgetWaitMs: opts.budgetWaitMs } : {}) };
  const tasks = createTaskService({
    client: opts.env.client,
    db: opts.db,
    taskQueue: backgroundQueue,
    defaultModel: opts.model ?? 'openai-compatible:test-model',
    sessionStart: (conversation, binding) => sessionStartOptions({ taskQueue, defaultModel: opts.model ?? 'openai-compatible:test-model', limits: sessionLimits }, conversation, binding),
    limiter,
  });
  const ingress = createIngress({
    changes,
    objectives,
    tasks,
    ...(workspaces && knowledge ? { workspaces, knowledge } : {}),
    ...(opts.heartbeat ? { heartbeat: opts.heartbeat } : {}),
    promptLayers: createPromptLayers({ db: opts.db, systemPrompt: DEFAULT_SYSTEM_PROMPT, ...(opts.promptFile ? { operatorFile: opts.promptFile } : {}) }),
    client: opts.env.client,
    db: opts.db,
    taskQueue,
    defaultModel: opts.model ?? 'openai-compatible:test-model',
    configuredProviders: () => models.configuredProviders(),
    limits: sessionLimits,
    ...(opts.senders ? { senders: opts.senders } : {}),
    limiter,
    ...(opts.pairingTtlMs !== undefined ? { pairingTtlMs: opts.pairingTtlMs } : {}),
    ...(opts.attachments ? { attachments: opts.attachments } : {}),
    ...(opts.commandRetryAfterMs !== undefined ? { commandRetryAfterMs: opts.commandRetryAfterMs } : {}),
    ...(opts.consoleLink ? { consoleLink: opts.consoleLink } : {}),
  });
  const chatId = `chat-${randomUUID().slice(0, 8)}`;
  const sessionIdOf = (c: string) => sessionWorkflowId({ platform: 'http', account, chatId: c });
  const h: Harness = {
    taskQueue,
    account,
    chatId,
    sessionId: sessionIdOf(chatId),
    ingress,
    changes,
    objectives,
    tasks,
    ...(workspaces && knowledge ? { workspaces, knowledge } : {}),
    backgroundQueue,
    worker,
    sessionIdOf,
    send: (text, o = {}) =>
      ingress.handle({
        id: o.id ?? randomUUID(),
        platform: 'http',
        account,
        chatId: o.chatId ?? chatId,
        user: o.user ?? 'tester',
        text,
        at: new Date().toISOString(),
      }),
    async waitForMessage(pred, o = {}) {
      const deadline = Date.now() + (o.timeoutMs ?? 20_000);
      const sid = sessionIdOf(o.chatId ?? chatId);
      for (;;) {
        const rows = await ingress.transcript(sid, { limit: 1000 });
        const found = rows.find(pred);
        if (found) return found;
        if (Date.now() > deadline) {
          throw new Error(`timed out waiting for a message; transcript: ${JSON.stringify(rows.map((r) => [r.role, r.text.slice(0, 80)]))}`);
        }
        await sleep(50);
      }
    },
  };
  return worker.runUntil(repoWorker.runUntil(backgroundWorker.runUntil(fn(h))));
}

export async function waitFor<T>(probe: () => Promise<T | undefined> | T | undefined, what: string, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

export interface TestStack {
  readonly env: TestWorkflowEnvironment;
  readonly model: import('./model-server.js').ModelServer;
  readonly db: Db;
  readonly database: import('./db.js').TestDatabase;
}

/**
 * Inside a `describe`: start the Temporal dev server, the scripted model server and a fresh
 * test database before its tests, and stop them after. Fields are valid inside tests.
 */
export function useStack(kind?: import('./db.js').TestDatabaseKind): TestStack {
  let env: TestWorkflowEnvironment | undefined;
  let model: import('./model-server.js').ModelServer | undefined;
  let database: import('./db.js').TestDatabase | undefined;
  const need = <T>(v: T | undefined, what: string): T => {
    if (v === undefined) throw new Error(`the test stack's ${what} is not started (use it inside a test)`);
    return v;
  };
  before(async () => {
    const { createTestEnvironment } = await import('./temporal.js');
    const { startModelServer } = await import('./model-server.js');
    const { testDatabases } = await import('./db.js');
    env = await createTestEnvironment();
    model = await startModelServer();
    database = await (kind ?? testDatabases()[0]!).create();
  });
  after(async () => {
    await model?.close();
    await database?.cleanup();
    await env?.teardown();
  });
  return {
    get env() {
      return need(env, 'Temporal server');
    },
    get model() {
      return need(model, 'model server');
    },
    get db() {
      return need(database, 'database').db;
    },
    get database() {
      return need(database, 'database');
    },
  };
}
