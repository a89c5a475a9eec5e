/**
 * The chaos engine: real Steward worker processes (`./steward worker`), a persistent Temporal
 * dev server, the real database, ingress and services in this process, the scripted model
 * server; chat turns in several chats, a governed repo change and an objective on a short
 * interval run while faults are injected from a seeded PRNG:
 *
 *  - kill -9 of a random worker process while work is in flight, then a replacement;
 *  - SIGKILL of the Temporal dev server and a restart on the same port and SQLite file;
 *  - rolling restarts: each worker in turn gets its replacement, then SIGTERM;
 *  - duplicate inbound deliveries of one platform message id, concurrently and later,
 *    through the real dedup path of ingress.
 *
 * The fault loop is bounded by count and wall time; afterwards the work is given a bounded
 * time to settle and every message sent is accounted for: exactly one reply (and one outbox
 * delivery) is ok, none is lost, more than one is doubled. Everything listens on 127.0.0.1;
 * every child process is killed and every temporary directory removed at the end.
 *
 * Used by test/e2e/chaos.test.ts (short form) and scripts/chaos.ts (full form).
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client, Connection } from '@temporalio/client';
import type { Db } from '../../domain/db.js';
import { OPERATOR } from '../../domain/governance.js';
import { createChangeService } from '../../services/changes.js';
import { createIngress, type IngressResult } from '../../services/chat/intake.js';
import { createObjectiveService } from '../../services/objectives.js';
import { codecDataConverter, formatCodecKeys, generateCodecKey, StewardCodec } from '../../common/codec.js';
import { sessionWorkflowId } from '../../common/ids.js';
import { objectiveScheduleId } from '../../common/objectives.js';
import type { InboundMessage } from '../../common/schemas.js';
import { buildWorkflowBundle } from '../../workers/bundle.js';
import { changeModel, offeredTools, GREETING_DRAFT } from '../helpers/change-model.js';
import { testDatabases, type TestDatabase } from '../helpers/db.js';
import { createGitFixture, gitInput, type GitFixture } from '../helpers/git-fixture.js';
import { lastUserText, startModelServer, type ModelServer, type RecordedRequest, type ScriptedReply } from '../helpers/model-server.js';
import { spawnProcess, type Spawned } from '../helpers/process.js';
import { persistentTemporal, type PersistentTemporal } from '../helpers/temporal-process.js';

export type { PersistentTemporal };

/** A group of identical worker processes polling the same queue roles. */
export interface WorkerGroup {
  /** Queue roles (`interactive,background,repo`), given as STEWARD_WORKER_QUEUES. */
  queues: string;
  count: number;
}

export interface ChaosOptions {
  /** PRNG seed (a 32-bit integer); random when not given. Printed so a run can be repeated. */
  seed?: number;
  /** kill -9 of a worker process (each followed by a replacement). */
  kills: number;
  /** SIGKILL + restart of the Temporal dev server. */
  serverRestarts: number;
  /** Rolling restarts of every worker process. */
  rollingRestarts: number;
  /** Duplicate-delivery faults (each: one concurrent double delivery and one later redelivery). */
  duplicates: number;
  /** Repo changes started during the chaos (at least 1). */
  changes?: number;
  /** Chats sending turns concurrently (each waits for its reply before the next message). */
  chats?: number;
  /** Worker processes (`steward worker --queues ...`); default 2 for chat, 2 for objectives and repo work. */
  workerGroups?: WorkerGroup[];
  /** Objective interval (Temporal Schedule `every`). */
  objectiveEvery?: string;
  /** Pause between faults, drawn uniformly from this range (ms). */
  gapMs?: [number, number];
  /** Temporal downtime per server restart, drawn from this range (ms). */
  downtimeMs?: [number, number];
  /** First-token delay of every model answer, drawn from this range (ms). */
  modelDelayMs?: [number, number];
  /** Wall-time bound of the fault loop (ms); it stops early when reached. */
  maxFaultMs: number;
  /** Bound on waiting for the work to settle after the faults (ms). */
  settleMs?: number;
  /**
   * Bound on the whole run (ms), set-up included: the fault loop stops early so that the
   * settling and the verdict fit (a test runner's per-file timeout). Default: no bound besides
   * the others.
   */
  budgetMs?: number;
  /** Bound on one message's reply while the chaos runs (ms). */
  replyTimeoutMs?: number;
  /** Keep every worker's output and the Temporal server's log here (the rest is removed). */
  logDir?: string;
  /** Progress lines; default silent. */
  log?: (line: string) => void;
  /**
   * The Temporal service to run on, already started; a server fault is its `stop('SIGKILL')`
   * and `start()` (for a cluster: kill -9 of one node, then the node back). Default: a dev
   * server of this run's own, on SQLite, stopped at the end.
   */
  temporal?: PersistentTemporal;
  /** What a server fault is called in the progress lines (default "Temporal dev server"). */
  temporalName?: string;
}

export interface ChaosResult {
  seed: number;
  database: 'sqlite' | 'postgres';
  turnsSent: number;
  lost: number;
  doubled: number;
  /** Outbox deliveries (Delivery rows, status sent) per message: 0 lost / >1 doubled. */
  deliveriesLost: number;
  deliveriesDoubled: number;
  /** Messages the (retrying) client never got accepted within its bound: counted as lost. */
  neverAccepted: number;
  /** Ingress calls that failed (Temporal down, a worker gone) and were delivered again. */
  redeliveredAfterError: number;
  kills: number;
  /** Kills that landed while a model request was in flight. */
  killsMidRequest: number;
  serverRestarts: number;
  rollingRestarts: number;
  /** Worker processes stopped by SIGTERM in rolling restarts, and how many exited cleanly (code 0). */
  gracefulStops: number;
  gracefulClean: number;
  /** Worker processes that died without being told to (each was replaced). */
  unexpectedExits: number;
  workersStarted: number;
  /** Deliveries of a message id that was delivered before, and how many ingress answered as duplicates. */
  duplicates: number;
  deduplicated: number;
  changesStarted: number;
  changesOk: number;
  objectiveRuns: number;
  objectiveRunsOk: number;
  /** Nominal times that ran more than once (must be 0). */
  objectiveDuplicateNominal: number;
  /** Runs that started but did not end as done. */
  objectiveRunsNotOk: number;
  /** Work trees of repo activities that a kill left behind in the workers' TMPDIR (removed at the end). */
  leftoverWorkTrees: number;
  modelRequests: number;
  modelRequestsAborted: number;
  faultMs: number;
  durationMs: number;
  /** Human-readable reasons the verdict is not clean (empty when clean). */
  problems: string[];
}

/** The summary line the suite and the script print. */
export function summaryLine(r: ChaosResult): string {
  return (
    `chaos: turns sent ${r.turnsSent}, lost ${r.lost}, doubled ${r.doubled}; kills ${r.kills}; server restarts ${r.serverRestarts}; ` +
    `rolling restarts ${r.rollingRestarts}; duplicates ${r.duplicates} (deduplicated ${r.deduplicated}); changes ${r.changesOk} ok; ` +
    `objective runs ${r.objectiveRunsOk} ok`
  );
}

/** mulberry32: a small seeded PRNG, uniform in [0, 1). */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const MODEL = 'openai-compatible:chaos-model';
export const DEFAULT_WORKER_GROUPS: WorkerGroup[] = [
  { queues: 'interactive', count: 2 },
  { queues: 'background,repo', count: 2 },
];
const OP = { id: OPERATOR.id, name: OPERATOR.name };
const MARKER = /\[chaos:([a-z0-9-]+)\]/;
const SEED_FILES = {
  'greeting.txt': 'Hello\n',
  'test.sh': '#!/bin/sh\ngrep -q "Hello, Steward" greeting.txt || { echo "greeting.txt does not greet Steward" >&2; exit 1; }\necho "greeting ok"\n',
  'README.md': '# chaos\n',
};
const CHANGE_TOOLS = ['submit_task_draft', 'submit_plan', 'write_file'];

interface WorkerProc {
  n: number;
  group: number;
  proc: Spawned;
  ready: boolean;
  /** Stopped (or killed) on purpose: its exit is not a failure. */
  expected: boolean;
}

interface SentMessage {
  marker: string;
  chat: number;
  sessionId: string;
  msg: InboundMessage;
  accepted: boolean;
}

type Fault = 'kill' | 'server' | 'rolling' | 'dup' | 'change';

/** Run the chaos; always cleans up. Throws only when the stack cannot be set up at all. */
export async function runChaos(opts: ChaosOptions): Promise<ChaosResult> {
  const began = Date.now();
  const seed = (opts.seed ?? randomBytes(4).readUInt32BE(0)) >>> 0;
  const rnd = prng(seed);
  const between = ([lo, hi]: [number, number]) => lo + Math.floor(rnd() * Math.max(0, hi - lo));
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const log = (line: string) => opts.log?.(`[chaos +${((Date.now() - began) / 1000).toFixed(1)}s] ${line}`);
  const chats = opts.chats ?? 3;
  const groups = opts.workerGroups ?? DEFAULT_WORKER_GROUPS;
  const changesWanted = Math.max(1, opts.changes ?? 1);
  const settleMs = opts.settleMs ?? 120_000;
  const replyTimeoutMs = opts.replyTimeoutMs ?? 150_000;
  const gap = opts.gapMs ?? [1500, 4000];
  const downtime = opts.downtimeMs ?? [1000, 4000];
  const modelDelay = opts.modelDelayMs ?? [100, 2000];
  const problems: string[] = [];
  const tag = randomBytes(3).toString('hex');
  const taskQueue = `chaos-${tag}`;
  log(`seed ${seed}; queue ${taskQueue}`);

  const dir = mkdtempSync(path.join(tmpdir(), 'steward-chaos-'));
  const workerTmp = path.join(dir, 'tmp');
  mkdirSync(workerTmp);
  const kind = testDatabases().at(-1)!; // PostgreSQL when STEWARD_TEST_PG_URL is set, else SQLite
  let server: PersistentTemporal | undefined;
  let model: ModelServer | undefined;
  let dbh: TestDatabase | undefined;
  let connection: Connection | undefined;
  let fixture: GitFixture | undefined;
  const workers: WorkerProc[] = [];
  let stopping = false;
  /** Set when the settle bound is reached: every loop and wait stops at once. */
  let halted = false;

  // should this process die before the finally below (a test runner's timeout, Ctrl-C), the
  // worker processes die with it (the Temporal server has its own exit hook) and so do the files
  const killAll = () => {
    for (const w of workers) w.proc.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  };
  const onSignal = (signal: NodeJS.Signals) => {
    killAll();
    process.exit(signal === 'SIGINT' ? 130 : 143);
  };
  process.on('exit', killAll);
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);

  const result: ChaosResult = {
    seed,
    database: kind.name,
    turnsSent: 0,
    lost: 0,
    doubled: 0,
    deliveriesLost: 0,
    deliveriesDoubled: 0,
    neverAccepted: 0,
    redeliveredAfterError: 0,
    kills: 0,
    killsMidRequest: 0,
    serverRestarts: 0,
    rollingRestarts: 0,
    gracefulStops: 0,
    gracefulClean: 0,
    unexpectedExits: 0,
    workersStarted: 0,
    duplicates: 0,
    deduplicated: 0,
    changesStarted: 0,
    changesOk: 0,
    objectiveRuns: 0,
    objectiveRunsOk: 0,
    objectiveDuplicateNominal: 0,
    objectiveRunsNotOk: 0,
    leftoverWorkTrees: 0,
    modelRequests: 0,
    modelRequestsAborted: 0,
    faultMs: 0,
    durationMs: 0,
    problems,
  };

  try {
    // --- the stack
    if (opts.temporal) server = opts.temporal;
    else {
      server = await persistentTemporal({ dir: path.join(dir, 'temporal') });
      await server.start();
    }
    model = await startModelServer();
    const m = model;
    const agent = changeModel({ intake: () => GREETING_DRAFT, agent: [{ name: 'write_file', args: { path: 'greeting.txt', content: 'Hello, Steward\n' } }] });
    m.setDefault((req: RecordedRequest): ScriptedReply => {
      const delay = between(modelDelay);
      if (offeredTools(req).some((t) => CHANGE_TOOLS.includes(t))) return { ...agent(req), firstTokenDelayMs: delay };
      // the turn's own message comes last in the user content (the task's first request, when it has left the recent turns, is quoted before it)
      const marker = [...lastUserText(req.body).matchAll(new RegExp(MARKER.source, 'g'))].at(-1)?.[1];
      return marker ? { chunks: ['ack ', `[chaos:${marker}]`], firstTokenDelayMs: delay, chunkDelayMs: 50 } : { text: 'tick', firstTokenDelayMs: delay };
    });
    dbh = await kind.create();
    const db: Db = dbh.db;
    const bundleFile = path.join(dir, 'workflow-bundle.js');
    writeFileSync(bundleFile, (await buildWorkflowBundle()).code);
    fixture = createGitFixture(SEED_FILES, { executable: ['test.sh'] });
    const fx = fixture;

    // one payload codec key for this process and every worker: payloads are encrypted as in a deployment
    const codecKey = generateCodecKey();
    connection = await Connection.connect({ address: server.address });
    const client = new Client({ connection, namespace: 'default', dataConverter: codecDataConverter(new StewardCodec({ keys: [codecKey] })) });
    const backgroundQueue = `${taskQueue}-background`;
    const repoQueue = `${taskQueue}-repo`;
    const ingress = createIngress({
      client,
      db,
      taskQueue,
      defaultModel: MODEL,
      configuredProviders: () => ['openai-compatible'],
      limits: { maxSteps: 4, maxTurnsPerRun: 100 },
    });
    const changes = createChangeService({ client, db, taskQueue, activityQueue: repoQueue });
    const objectives = createObjectiveService({ client, db, taskQueue: backgroundQueue, maxSteps: 4 });
    const account = `chaos-${tag}`;

    // --- worker processes
    const workerEnv: NodeJS.ProcessEnv = {
      ...process.env,
      TEMPORAL_ADDRESS: server.address,
      TEMPORAL_NAMESPACE: 'default',
      STEWARD_TASK_QUEUE: taskQueue,
      STEWARD_BACKGROUND_TASK_QUEUE: backgroundQueue,
      STEWARD_REPO_TASK_QUEUE: repoQueue,
      STEWARD_WORKFLOW_BUNDLE: bundleFile,
      DATABASE_URL: dbh.url,
      STEWARD_DATA_DIR: dir,
      STEWARD_MODEL: MODEL,
      STEWARD_MODEL_BASE_URL: m.baseURL,
      STEWARD_LOG_LEVEL: 'warn',
      STEWARD_CODEC_KEYS: formatCodecKeys([codecKey]),
      TMPDIR: workerTmp,
    };
    let workerSeq = 0;
    const spawnWorker = (group: number): WorkerProc => {
      const g = groups[group]!;
      // `steward worker` without the launcher's install check (./steward may run npm ci when
      // package.json changed, which must never race between processes): node runs it directly
      const proc = spawnProcess(process.execPath, ['--import', 'tsx', 'platform/main.ts', 'worker', '--queues', g.queues], workerEnv);
      const w: WorkerProc = { n: ++workerSeq, group, proc, ready: false, expected: false };
      workers.push(w);
      result.workersStarted++;
      proc.waitForOutput(/Steward worker polling/, 180_000).then(
        () => {
          w.ready = true;
          log(`worker #${w.n} (${g.queues}) ready`);
        },
        (err: unknown) => {
          const replace = !w.expected && !stopping;
          if (replace) problems.push(`worker #${w.n} did not start: ${String(err).slice(0, 600)}`);
          w.expected = true;
          proc.kill('SIGKILL');
          if (replace && result.workersStarted < 200) spawnWorker(group);
        },
      );
      void proc.exited.then((exit) => {
        w.ready = false;
        if (w.expected || stopping) return;
        result.unexpectedExits++;
        log(`worker #${w.n} exited unexpectedly (${exit.code ?? exit.signal}); replacing it`);
        problems.push(`worker #${w.n} exited on its own (${exit.code ?? exit.signal}): ${proc.output().slice(-800)}`);
        if (result.workersStarted < 200) spawnWorker(group);
      });
      return w;
    };
    const live = (group?: number) => workers.filter((w) => !w.expected && (group === undefined || w.group === group) && w.proc.child.exitCode === null && w.proc.child.signalCode === null);
    const readyIn = (group: number) => live(group).filter((w) => w.ready);
    const waitUntil = async (cond: () => boolean | Promise<boolean>, ms: number, step = 100): Promise<boolean> => {
      const deadline = Date.now() + ms;
      while (Date.now() < deadline && !halted) {
        if (await cond()) return true;
        await sleep(step);
      }
      return cond();
    };
    groups.forEach((g, i) => {
      for (let k = 0; k < g.count; k++) spawnWorker(i);
    });
    if (!(await waitUntil(() => groups.every((g, i) => readyIn(i).length === g.count), 240_000, 200))) {
      throw new Error(`the worker processes did not all start: ${problems.join('; ')}`);
    }

    // --- the repository and the objective
    const repoName = `chaos-${tag}`;
    await changes.registerRepo({ name: repoName, cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }] }, OP);
    const changeChat = `change-${tag}`;
    const changeConv = { platform: 'http' as const, account, chatId: changeChat };
    const objectiveChat = `objective-${tag}`;
    const objective = await objectives.create(
      { name: `chaos-${tag}`, prompt: 'Say tick', chatId: objectiveChat, platform: 'http', account, schedule: { every: opts.objectiveEvery ?? '6s' } },
      OP,
    );
    log(`objective ${objective.id} every ${opts.objectiveEvery ?? '6s'}; repo ${repoName}`);

    // --- load: chats, each one message at a time
    const sent: SentMessage[] = [];
    const chatSessions: string[] = [];
    let faultsDone = false;
    let concurrentDupsWanted = 0;
    const deliver = async (msg: InboundMessage, deadlineMs: number): Promise<IngressResult | undefined> => {
      while (Date.now() < deadlineMs && !halted) {
        try {
          return await ingress.handle(msg);
        } catch {
          // the platform's redelivery of a message its webhook did not take
          result.redeliveredAfterError++;
          await sleep(500 + Math.floor(Math.random() * 1000));
        }
      }
      return undefined;
    };
    const replies = (s: SentMessage) => db.message.count({ where: { sessionId: s.sessionId, role: 'assistant', text: { contains: `[chaos:${s.marker}]` } } });
    const chatLoop = async (chat: number) => {
      const chatId = `chat-${tag}-${chat}`;
      const sessionId = sessionWorkflowId({ platform: 'http', account, chatId });
      chatSessions.push(sessionId);
      for (let i = 0; !faultsDone && !halted; i++) {
        const marker = `${chat}-${i}-${randomBytes(2).toString('hex')}`;
        const msg: InboundMessage = { id: `m-${marker}`, platform: 'http', account, chatId, user: `user${chat}`, text: `Message ${i} of chat ${chat} [chaos:${marker}]`, at: new Date().toISOString() };
        const s: SentMessage = { marker, chat, sessionId, msg, accepted: false };
        sent.push(s);
        const deadline = Date.now() + replyTimeoutMs;
        let first: IngressResult | undefined;
        if (concurrentDupsWanted > 0) {
          concurrentDupsWanted--;
          // the same platform message delivered twice at once
          const pair = await Promise.allSettled([ingress.handle(msg), ingress.handle(msg)]);
          const ok = pair.flatMap((p) => (p.status === 'fulfilled' ? [p.value] : []));
          if (ok.length === 2) {
            result.duplicates++;
            if (ok.filter((r) => r.duplicate).length === 1) result.deduplicated++;
            else problems.push(`concurrent double delivery of ${msg.id}: duplicate flags ${ok.map((r) => r.duplicate).join(',')}`);
            first = ok.find((r) => !r.duplicate) ?? ok[0];
          } else {
            // a delivery failed (the server was down): the redelivery below settles it
            concurrentDupsWanted++;
            result.redeliveredAfterError += 2 - ok.length;
          }
        }
        first ??= await deliver(msg, deadline);
        if (!first) {
          if (halted) break;
          result.neverAccepted++;
          problems.push(`message ${msg.id} was never accepted by ingress`);
          continue;
        }
        if (first.kind !== 'message') problems.push(`message ${msg.id} taken as ${first.kind} (${first.reason ?? ''})`);
        s.accepted = true;
        // one at a time: the next message waits for this one's reply (queued messages share a turn)
        if (!(await waitUntil(async () => (await replies(s)) > 0, Math.max(0, deadline - Date.now()), 200))) {
          log(`no reply to ${msg.id} within ${replyTimeoutMs} ms; moving on`);
        }
      }
    };

    // --- faults
    const faults: Fault[] = [
      ...Array<Fault>(opts.kills).fill('kill'),
      ...Array<Fault>(opts.serverRestarts).fill('server'),
      ...Array<Fault>(opts.rollingRestarts).fill('rolling'),
      ...Array<Fault>(opts.duplicates).fill('dup'),
      ...Array<Fault>(Math.max(0, changesWanted - 1)).fill('change'),
    ];
    for (let i = faults.length - 1; i > 0; i--) {
      const j = Math.floor(rnd() * (i + 1));
      [faults[i], faults[j]] = [faults[j]!, faults[i]!];
    }
    // the first change starts before the first fault, so faults land on it
    faults.unshift('change');
    const changeIds: string[] = [];
    const startChange = async () => {
      for (let attempt = 0; attempt < 5; attempt++) {
        try {
          const { id } = await changes.startChange({ repo: repoName, request: 'Make the greeting say Hello, Steward' }, OP, {
            conversation: changeConv,
            sessionId: sessionWorkflowId(changeConv),
          });
          changeIds.push(id);
          result.changesStarted++;
          log(`change ${id} started`);
          return;
        } catch (err) {
          log(`change did not start (${String(err).slice(0, 200)}); again`);
          await sleep(2000);
        }
      }
      problems.push('a repo change could not be started');
    };
    const inFlight = () => m.requests.length - m.completed - m.aborted;
    const kill = async () => {
      // a chat worker only while another one runs, so turns keep moving; any other worker at any time
      const candidates = () => groups.flatMap((g, i) => (readyIn(i).length >= (g.queues.split(',').includes('interactive') ? 2 : 1) ? readyIn(i) : []));
      if (!(await waitUntil(() => candidates().length > 0, 120_000, 200))) {
        problems.push('kill skipped: no worker could be killed for 2 minutes');
        return;
      }
      // aim at work in flight: wait (bounded) for a model request to be open
      await waitUntil(() => inFlight() > 0, 4000, 50);
      const alive = candidates();
      if (alive.length === 0) return;
      const victim = pick(alive);
      const mid = inFlight() > 0;
      victim.expected = true;
      victim.proc.kill('SIGKILL');
      await victim.proc.exited;
      result.kills++;
      if (mid) result.killsMidRequest++;
      log(`kill -9 worker #${victim.n} (${groups[victim.group]!.queues})${mid ? ' with a model request in flight' : ''}; ${result.kills} kills`);
      spawnWorker(victim.group);
    };
    const restartServer = async () => {
      const srv = server!;
      await srv.stop('SIGKILL');
      const down = between(downtime);
      log(`${opts.temporalName ?? 'Temporal dev server'} killed (-9); down for ${down} ms`);
      await sleep(down);
      await srv.start();
      result.serverRestarts++;
      log(`${opts.temporalName ?? 'Temporal dev server'} back`);
    };
    const rolling = async () => {
      const current = groups.flatMap((_, i) => live(i));
      log(`rolling restart of ${current.length} workers`);
      for (const old of current) {
        if (old.expected || old.proc.child.exitCode !== null || old.proc.child.signalCode !== null) continue;
        const fresh = spawnWorker(old.group);
        if (!(await waitUntil(() => fresh.ready || fresh.expected, 180_000, 200))) problems.push(`rolling: worker #${fresh.n} did not get ready`);
        old.expected = true;
        old.proc.kill('SIGTERM');
        const timer = setTimeout(() => old.proc.kill('SIGKILL'), 60_000);
        const exit = await old.proc.exited;
        clearTimeout(timer);
        result.gracefulStops++;
        if (exit.code === 0) result.gracefulClean++;
        else problems.push(`rolling: worker #${old.n} did not stop cleanly on SIGTERM (${exit.code ?? exit.signal})`);
      }
      result.rollingRestarts++;
      log(`rolling restart ${result.rollingRestarts} done`);
    };
    const later: Array<Promise<void>> = [];
    const duplicate = () => {
      concurrentDupsWanted++;
      const earlier = sent.filter((s) => s.accepted);
      if (earlier.length === 0) return;
      const s = pick(earlier);
      // the same message id again, later: ingress must answer it as a duplicate
      later.push(
        (async () => {
          const r = await deliver(s.msg, Date.now() + replyTimeoutMs);
          if (!r) return;
          result.duplicates++;
          if (r.duplicate) result.deduplicated++;
          else problems.push(`redelivered ${s.msg.id} was not taken as a duplicate`);
        })().catch((err: unknown) => {
          problems.push(`redelivery failed: ${String(err).slice(0, 300)}`);
        }),
      );
      log(`duplicate deliveries: ${s.msg.id} again, and the next new message twice at once`);
    };

    const loops = Array.from({ length: chats }, (_, i) =>
      chatLoop(i).catch((err: unknown) => {
        problems.push(`chat ${i} stopped: ${String(err).slice(0, 500)}`);
      }),
    );
    // warm-up: every chat has had a reply
    await waitUntil(async () => {
      for (let c = 0; c < chats; c++) {
        const first = sent.find((s) => s.chat === c);
        if (!first || (await replies(first)) === 0) return false;
      }
      return true;
    }, 120_000, 200);
    const faultStart = Date.now();
    log(`faults: ${faults.length} (${faults.join(' ')})`);
    // the verdict needs time after the faults: the settle bound, within the whole run's budget
    const faultsUntil = Math.min(faultStart + opts.maxFaultMs, opts.budgetMs !== undefined ? began + opts.budgetMs - settleMs - 10_000 : Infinity);
    for (const f of faults) {
      if (Date.now() > faultsUntil) {
        log(`fault loop stopped at its wall-time bound after ${((Date.now() - faultStart) / 1000).toFixed(0)} s`);
        problems.push(`the fault loop reached its wall-time bound before every fault ran (${result.kills}/${opts.kills} kills, ${result.serverRestarts}/${opts.serverRestarts} server restarts, ${result.rollingRestarts}/${opts.rollingRestarts} rolling restarts)`);
        break;
      }
      if (f === 'kill') await kill();
      else if (f === 'server') await restartServer();
      else if (f === 'rolling') await rolling();
      else if (f === 'dup') duplicate();
      else await startChange();
      await sleep(between(gap));
    }
    result.faultMs = Date.now() - faultStart;
    faultsDone = true;
    log(`faults done in ${(result.faultMs / 1000).toFixed(1)} s; settling`);

    // --- settle (bounded)
    const settleDeadline = Date.now() + settleMs;
    await objectives.pause(objective.id, OP).catch((err: unknown) => problems.push(`pausing the objective failed: ${String(err)}`));
    await Promise.race([Promise.all([...loops, ...later]), sleep(Math.max(0, settleDeadline - Date.now()))]);
    halted = true; // loops still waiting stop now (their messages are judged below)
    await Promise.all([...loops, ...later]);
    halted = false;
    const runsOf = () => db.objectiveRun.findMany({ where: { objectiveId: objective.id } });
    const changeDone = async () => {
      for (const id of changeIds) {
        const c = await changes.getChange(id);
        if (!c || c.status === 'running') return false;
      }
      return true;
    };
    // the schedule's runs still going: one started before the pause may not have recorded itself yet
    const scheduleRunning = async () => {
      try {
        return (await client.schedule.getHandle(objectiveScheduleId(objective.id)).describe()).info.runningActions.length > 0;
      } catch {
        return true; // the server is not answering yet: not settled
      }
    };
    await waitUntil(
      async () => (await changeDone()) && !(await scheduleRunning()) && (await runsOf()).every((r) => r.status !== 'running'),
      Math.max(15_000, settleDeadline - Date.now()),
      500,
    );
    // nothing more arrives
    await sleep(3000);

    // --- verdict: turns
    for (const s of sent) {
      if (!s.accepted) continue;
      result.turnsSent++;
      const rows = await db.message.findMany({ where: { sessionId: s.sessionId, role: 'assistant', text: { contains: `[chaos:${s.marker}]` } }, select: { seq: true, key: true } });
      if (rows.length === 0) result.lost++;
      if (rows.length > 1) result.doubled++;
      const deliveries = await db.delivery.count({ where: { key: { in: rows.map((r) => r.key) }, status: 'sent' } });
      if (deliveries === 0) result.deliveriesLost++;
      if (deliveries > 1) result.deliveriesDoubled++;
      const userRows = await db.message.count({ where: { key: `in:http:${account}:${s.msg.chatId}:${s.msg.id}` } });
      if (userRows !== 1) problems.push(`message ${s.msg.id} is in the transcript ${userRows} times`);
    }
    result.lost += result.neverAccepted;
    const pendingDeliveries = await db.delivery.count({ where: { sessionId: { in: chatSessions }, status: { not: 'sent' } } });
    if (pendingDeliveries > 0) problems.push(`${pendingDeliveries} outbox deliveries of these chats are not sent`);
    if (result.lost) problems.push(`${result.lost} turns lost`);
    if (result.doubled) problems.push(`${result.doubled} turns doubled`);
    if (result.deliveriesLost || result.deliveriesDoubled) problems.push(`outbox: ${result.deliveriesLost} lost, ${result.deliveriesDoubled} doubled`);
    if (result.deduplicated !== result.duplicates) problems.push(`duplicates: ${result.duplicates} delivered, ${result.deduplicated} deduplicated`);

    // --- verdict: repo changes
    const changeSession = sessionWorkflowId(changeConv);
    for (const id of changeIds) {
      const c = await changes.getChange(id);
      const patch = await changes.getPatch(id);
      const ends = await db.receipt.count({ where: { workflowId: id, kind: 'change.end' } });
      const told = await db.message.count({ where: { sessionId: changeSession, text: { contains: `Change ${id} is done` } } });
      let applies = false;
      if (patch && createHash('sha256').update(patch.patch).digest('hex') === patch.hash) {
        const check = fx.cloneAt(fx.head());
        try {
          gitInput(check, patch.patch, 'apply', '-');
          applies = readFileSync(path.join(check, 'greeting.txt'), 'utf8') === 'Hello, Steward\n';
        } catch {
          applies = false;
        }
      }
      const ok = c?.status === 'done' && c.result?.kind === 'patch' && applies && ends === 1 && told === 1;
      if (ok) result.changesOk++;
      else problems.push(`change ${id}: status ${c?.status}/${c?.phase} (${c?.error ?? ''}), result ${c?.result?.kind}, patch applies ${applies}, end receipts ${ends}, done notices ${told}`);
    }

    // --- verdict: objective runs
    const runs = await runsOf();
    result.objectiveRuns = runs.length;
    const nominal = runs.flatMap((r) => (r.scheduledAt ? [r.scheduledAt.getTime()] : []));
    result.objectiveDuplicateNominal = nominal.length - new Set(nominal).size;
    for (const r of runs) {
      const replies = r.turnId ? await db.message.count({ where: { turnId: r.turnId, role: 'assistant' } }) : 0;
      // a run that is done posted its turn's reply once
      if (r.status === 'done' && replies === 1) result.objectiveRunsOk++;
      else {
        result.objectiveRunsNotOk++;
        problems.push(`objective run ${r.id}: ${r.status}${r.error ? ` (${r.error.slice(0, 200)})` : ''}, ${replies} replies`);
      }
    }
    if (result.objectiveDuplicateNominal) problems.push(`${result.objectiveDuplicateNominal} objective nominal times ran twice`);
    if (runs.length === 0) problems.push('no objective run happened');
    result.modelRequests = m.requests.length;
    result.modelRequestsAborted = m.aborted;
    result.leftoverWorkTrees = readdirSync(workerTmp).filter((n) => /^steward-(work|gate|promote)-/.test(n)).length;
  } finally {
    stopping = true;
    process.removeListener('exit', killAll);
    process.removeListener('SIGINT', onSignal);
    process.removeListener('SIGTERM', onSignal);
    for (const w of workers) {
      w.expected = true;
      w.proc.kill('SIGKILL');
    }
    await Promise.all(workers.map((w) => w.proc.exited));
    if (opts.logDir) {
      try {
        mkdirSync(opts.logDir, { recursive: true });
        for (const w of workers) writeFileSync(path.join(opts.logDir, `worker-${w.n}.log`), w.proc.output());
        if (server) writeFileSync(path.join(opts.logDir, 'temporal.log'), server.logTail(100_000));
      } catch (err) {
        problems.push(`keeping the logs failed: ${String(err)}`);
      }
    }
    const steps: Array<[string, () => unknown]> = [
      ['client', () => connection?.close()],
      ['temporal', () => (opts.temporal ? undefined : server?.stop('SIGKILL'))],
      ['model server', () => model?.close()],
      ['database', () => dbh?.cleanup()],
      ['git fixture', () => fixture?.cleanup()],
      ['temp dir', () => rmSync(dir, { recursive: true, force: true })],
    ];
    for (const [what, step] of steps) {
      try {
        await step();
      } catch (err) {
        problems.push(`cleanup of the ${what} failed: ${String(err)}`);
      }
    }
    result.durationMs = Date.now() - began;
  }
  return result;
}
