/**
 * Upgrade across a deploy with Worker Versioning, on the real dev server, from the build
 * before chat turns ran inside the session to the build where they do. Build A runs each chat
 * turn as a child turn workflow (the session with the patch `steward-inline-turn` switched
 * off); it is current and a session runs turns on it. While a turn is in flight, build B (the
 * inline turns, and a session that writes a memo at each turn's start, a change that would not
 * replay A's histories) starts and becomes current. The in-flight child turn finishes on A
 * (pinned), the session continues as new onto B at once after it, later turns run inside the
 * session on B (their activities scheduled by the session, named by turn, on B's worker), an
 * idle session still on A is woken and moves too, A drains and is shut down. The next deploy
 * (build C, marked likewise) finds a turn in flight inside the session on B: it finishes on B
 * and the session moves to C after it. Every message got exactly one reply, under the reply
 * key of its turn.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import type { Client } from '@temporalio/client';
import type { WorkerDeploymentVersion } from '@temporalio/common';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, type Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { createModelRegistry } from '../../domain/model.js';
import { createIngress, type Ingress } from '../../services/chat/intake.js';
import { ConfigError, DEFAULT_SYSTEM_PROMPT, loadConfig } from '../../config/index.js';
import { freePort } from '../../platform/ports.js';
import { DEV_SERVER_DYNAMIC_CONFIG, findTemporalCli } from '../../platform/temporal-server.js';
import { ALL_SEARCH_ATTRIBUTES } from '../../workflows/search-attributes.js';
import { bundleOptions } from '../../workers/bundle.js';
import { createStewardWorker } from '../../workers/main.js';
import {
  countPinned,
  describeDeployment,
  resolveWorkerVersioning,
  serverSupportsWorkerDeployments,
  setCurrentVersion,
  versionString,
  waitForDrained,
  wakeSessionsOn,
  workerVersioningFor,
} from '../../workers/versioning.js';
import { testDatabases, type TestDatabase } from '../helpers/db.js';
import { lastUserText, startModelServer, type ModelServer, type RecordedRequest } from '../helpers/model-server.js';
import { repoRoot } from '../helpers/process.js';
import { testBundle, waitFor } from '../helpers/steward.js';

const quietLogger = { trace: () => undefined, debug: () => undefined, info: () => undefined, warn: () => undefined, log: () => undefined, error: (m: string) => console.error(m) };

/**
 * A build of the workflows with the session changed by `edits` (each [from, to] must apply):
 * a copy of session.ts beside an index that takes the other workflows from the repository.
 */
async function bundleWithSession(dir: string, build: string, edits: Array<[string, string]>): Promise<WorkflowBundleWithSourceMap> {
  const root = path.resolve(repoRoot);
  const wf = path.join(root, 'workflows');
  const chat = path.join(wf, 'chat');
  let session = readFileSync(path.join(chat, 'session.ts'), 'utf8')
    .replaceAll("from '../../", `from '${root}/`)
    .replaceAll("from '../", `from '${wf}/`)
    .replaceAll("from './", `from '${chat}/`);
  for (const [from, to] of edits) {
    assert.ok(session.includes(from), `build ${build}: the session has ${JSON.stringify(from)}`);
    session = session.replace(from, to);
  }
  writeFileSync(path.join(dir, `session-${build}.ts`), session);
  writeFileSync(
    path.join(dir, `index-${build}.ts`),
    [
      `export { sessionWorkflow } from './session-${build}.ts';`,
      `export { turnWorkflow } from '${chat}/turn.ts';`,
      `export { repoChangeWorkflow } from '${wf}/changes/repo-change.ts';`,
      `export { objectiveRunWorkflow } from '${wf}/objectives/objective.ts';`,
      '',
    ].join('\n'),
  );
  return bundleWorkflowCode({
    ...bundleOptions,
    workflowsPath: path.join(dir, `index-${build}.ts`),
    logger: quietLogger,
    // the copy lives outside the repository: resolve packages from the repository's node_modules
    webpackConfigHook: (c) => ({ ...c, resolve: { ...c.resolve, modules: [...(c.resolve?.modules ?? []), path.join(repoRoot, 'node_modules')] } }),
  });
}

/**
 * Build A, the build before chat turns ran inside the session: the inline-turn patch switched
 * off, so every turn starts as a child turn workflow (and no patch marker is recorded), as the
 * sessions of that build did.
 */
const bundleBuildA = (dir: string) => bundleWithSession(dir, 'a', [['if (patched(INLINE_TURN_PATCH)) {', 'if (false as boolean) {']]);

/**
 * Build B: the current workflows (turns inline), except that the session records
 * `stewardBuild: B` in its memo at the start of every turn (a new command: not
 * replay-compatible with A's histories, so only pinning keeps A's running sessions correct).
 */
const bundleMarked = (dir: string, build: 'B' | 'C') =>
  bundleWithSession(dir, build.toLowerCase(), [
    ['  upsertSearchAttributes,\n', '  upsertMemo,\n  upsertSearchAttributes,\n'],
    ['    const batch = state.takeBatch();\n', `    upsertMemo({ stewardBuild: '${build}' });\n    const batch = state.takeBatch();\n`],
  ]);

/** A JSON payload's value (this test's workers use the default data converter: plain JSON). */
function jsonOf(p: { metadata?: Record<string, Uint8Array> | null; data?: Uint8Array | null } | null | undefined): unknown {
  if (!p?.data) return undefined;
  assert.equal(Buffer.from(p.metadata?.encoding ?? []).toString(), 'json/plain');
  return JSON.parse(Buffer.from(p.data).toString('utf8'));
}

interface RunInfo {
  runId: string;
  /** Build ids of the workers that completed this run's workflow tasks, in order. */
  builds: string[];
  /** Child turn workflow ids this run started (build A's turns). */
  childTurns: string[];
  /** Ids of the turns that ran inside this run (build B's), from their model steps' input, in order. */
  inlineTurns: string[];
  /** The summaries of the activities this run scheduled, in order. */
  summaries: string[];
  /** Identities of the workers that ran this run's activities. */
  activityWorkers: string[];
  /** `stewardBuild` memo values this run upserted. */
  memo: unknown[];
  continuedAs?: string;
}

/** One run's workflow tasks (by build), its children and its turns' activities, from the server's history. */
async function runInfo(client: Client, workflowId: string, runId: string): Promise<RunInfo> {
  const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
  const info: RunInfo = { runId, builds: [], childTurns: [], inlineTurns: [], summaries: [], activityWorkers: [], memo: [] };
  for (const e of history.events ?? []) {
    const done = e.workflowTaskCompletedEventAttributes;
    if (done) info.builds.push(done.deploymentVersion?.buildId ?? done.workerDeploymentVersion ?? '(unversioned)');
    const child = e.startChildWorkflowExecutionInitiatedEventAttributes;
    if (child?.workflowId) info.childTurns.push(child.workflowId);
    const activity = e.activityTaskScheduledEventAttributes;
    if (activity) {
      if (e.userMetadata?.summary) info.summaries.push(String(jsonOf(e.userMetadata.summary)));
      if (activity.activityType?.name === 'modelStep') {
        const turnId = (jsonOf(activity.input?.payloads?.[0]) as { turnId?: string }).turnId;
        if (turnId && !info.inlineTurns.includes(turnId)) info.inlineTurns.push(turnId);
      }
    }
    const started = e.activityTaskStartedEventAttributes;
    if (started?.identity && !info.activityWorkers.includes(started.identity)) info.activityWorkers.push(started.identity);
    const memo = e.workflowPropertiesModifiedEventAttributes?.upsertedMemo?.fields?.stewardBuild;
    if (memo) info.memo.push(jsonOf(memo));
    const can = e.workflowExecutionContinuedAsNewEventAttributes;
    if (can?.newExecutionRunId) info.continuedAs = can.newExecutionRunId;
  }
  return info;
}

/** Every run of a session, first to latest. */
async function sessionRuns(client: Client, sessionId: string): Promise<RunInfo[]> {
  const first = (await client.workflow.getHandle(sessionId).describe()).raw.workflowExecutionInfo?.firstRunId;
  assert.ok(first, 'the session has a first run');
  const runs: RunInfo[] = [];
  for (let runId: string | undefined = first; runId && runs.length < 50; ) {
    const r: RunInfo = await runInfo(client, sessionId, runId);
    runs.push(r);
    runId = r.continuedAs;
  }
  return runs;
}

/** The build a (closed or running) child turn workflow ran on, and the workers that ran it and its activities. */
async function turnBuild(client: Client, turnId: string): Promise<{ pinnedTo?: string; builds: string[]; identities: string[]; activityWorkers: string[]; status: string }> {
  const handle = client.workflow.getHandle(turnId);
  const d = await handle.describe();
  const history = await handle.fetchHistory();
  const builds: string[] = [];
  const identities = new Set<string>();
  const activityWorkers = new Set<string>();
  for (const e of history.events ?? []) {
    const done = e.workflowTaskCompletedEventAttributes;
    if (done) {
      builds.push(done.deploymentVersion?.buildId ?? '(unversioned)');
      if (done.identity) identities.add(done.identity);
    }
    const started = e.activityTaskStartedEventAttributes;
    if (started?.identity) activityWorkers.add(started.identity);
  }
  return {
    ...(d.raw.workflowExecutionInfo?.versioningInfo?.deploymentVersion?.buildId ? { pinnedTo: d.raw.workflowExecutionInfo.versioningInfo.deploymentVersion.buildId } : {}),
    builds,
    identities: [...identities],
    activityWorkers: [...activityWorkers],
    status: d.status.name,
  };
}

describe('upgrade across a deploy (Worker Versioning)', () => {
  let env: TestWorkflowEnvironment;
  let model: ModelServer;
  let database: TestDatabase;
  let dir: string;
  const running: Array<{ worker: Worker; run: Promise<void> }> = [];

  before(async () => {
    const cli = findTemporalCli();
    env = await TestWorkflowEnvironment.createLocal({
      server: {
        ...(cli ? { executable: { type: 'existing-path' as const, path: cli } } : {}),
        ip: '127.0.0.1',
        log: { format: 'pretty', level: 'error' },
        searchAttributes: ALL_SEARCH_ATTRIBUTES,
        extraArgs: [
          // drainage is re-checked every second here (minutes by default), so `describe` shows it at once
          ...[...DEV_SERVER_DYNAMIC_CONFIG, 'matching.wv.VersionDrainageStatusRefreshInterval="1s"', 'matching.wv.VersionDrainageStatusVisibilityGracePeriod="1s"'].flatMap((v) => [
            '--dynamic-config-value',
            v,
          ]),
          '--http-port',
          String(await freePort()),
          '--metrics-port',
          String(await freePort()),
        ],
      },
    });
    model = await startModelServer();
    database = await testDatabases()[0]!.create();
    dir = mkdtempSync(path.join(tmpdir(), 'steward-upgrade-'));
  });
  after(async () => {
    for (const r of running) if (r.worker.getState() === 'RUNNING') r.worker.shutdown();
    await Promise.allSettled(running.map((r) => r.run));
    await model?.close();
    await database?.cleanup();
    await env?.teardown();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('keeps the in-flight child turn on A, moves the session to B at continue-as-new where turns run inside it, drains A; an inline turn in flight stays on B across the next deploy; every message answered once', { timeout: 300_000 }, async () => {
    const client = env.client;
    const namespace = env.namespace ?? 'default';
    const taskQueue = `upgrade-${randomUUID()}`;
    const deploymentName = `steward-${randomUUID().slice(0, 8)}`;
    const vA: WorkerDeploymentVersion = { deploymentName, buildId: 'A' };
    const vB: WorkerDeploymentVersion = { deploymentName, buildId: 'B' };
    const vC: WorkerDeploymentVersion = { deploymentName, buildId: 'C' };

    // capability detection: the dev server serves Worker Deployments; `on` resolves to versioned options
    assert.equal((await serverSupportsWorkerDeployments(client.connection, namespace)).supported, true);
    const decisionA = await resolveWorkerVersioning({ mode: 'on', deploymentName, buildId: 'A' }, client.connection, namespace);
    assert.ok(decisionA.enabled);
    assert.deepEqual(decisionA.options, { useWorkerVersioning: true, version: vA, defaultVersioningBehavior: 'PINNED' });
    assert.deepEqual(await resolveWorkerVersioning({ mode: 'auto', deploymentName }, client.connection, namespace), { enabled: false, reason: 'no STEWARD_BUILD_ID is set' });

    const [bundleA, bundleB, bundleC] = await Promise.all([bundleBuildA(dir), bundleMarked(dir, 'B'), bundleMarked(dir, 'C')]);
    assert.notEqual(bundleA.code, bundleB.code);
    assert.notEqual(bundleB.code, bundleC.code);

    // the model answers `echo: <the chat message(s) of the turn>`
    const bodies = (req: RecordedRequest) => [...lastUserText(req.body).matchAll(/<chat_message[^>]*>\n?([\s\S]*?)\n?<\/chat_message>/g)].map((m) => m[1]!.trim());
    model.setDefault((req) => ({ text: `echo: ${bodies(req).join(' + ')}` }));
    const models = createModelRegistry({ openaiCompatible: { baseURL: model.baseURL } });
    const logged: Array<{ level: string; msg: string; obj: object }> = [];
    const log = {
      info: (obj: object, msg: string) => void logged.push({ level: 'info', msg, obj }),
      warn: (obj: object, msg: string) => void logged.push({ level: 'warn', msg, obj }),
      error: (obj: object, msg: string) => void logged.push({ level: 'error', msg, obj }),
    };
    // the all-in-one start stays unversioned under `auto`, whatever the build id
    assert.equal((await workerVersioningFor({ mode: 'auto', ...vA }, client.connection, namespace, log, { allInOne: true })).options, undefined);
    // a worker process: versioned, as `steward worker` starts it
    const startBuild = async (bundle: WorkflowBundleWithSourceMap, version: WorkerDeploymentVersion) => {
      const versioning = await workerVersioningFor({ mode: 'auto', ...version }, client.connection, namespace, log);
      assert.ok(versioning.decision.enabled, versioning.decision.reason);
      const worker = await createStewardWorker({
        connection: env.nativeConnection,
        namespace,
        taskQueue,
        workflowBundle: bundle,
        identity: `steward-build-${version.buildId}`,
        deps: { db: database.db, models, systemPrompt: DEFAULT_SYSTEM_PROMPT, heartbeatEveryMs: 100, defaultModel: 'openai-compatible:test-model' },
        workerDeploymentOptions: versioning.options,
      });
      const entry = { worker, run: worker.run() };
      running.push(entry);
      await versioning.afterStart();
      return entry;
    };

    const ingress: Ingress = createIngress({
      client,
      db: database.db,
      taskQueue,
      defaultModel: 'openai-compatible:test-model',
      configuredProviders: () => ['openai-compatible'],
      // far from the limit: the session continues as new because the current version changed
      limits: { maxSteps: 4, maxTurnsPerRun: 100 },
    });
    const account = `acct-${randomUUID().slice(0, 8)}`;
    const send = (chatId: string, text: string) =>
      ingress.handle({ id: randomUUID(), platform: 'http', account, chatId, user: 'tester', text, at: new Date().toISOString() });
    const replies = async (sessionId: string) => (await ingress.transcript(sessionId, { limit: 1000 })).filter((m) => m.role === 'assistant').map((m) => m.text.trim());
    const waitForReply = async (sessionId: string, text: string, timeoutMs = 60_000) => {
      try {
        await waitFor(async () => ((await replies(sessionId)).includes(text) ? true : undefined), `the reply "${text}" in ${sessionId}`, timeoutMs);
      } catch (err) {
        const rows = await ingress.transcript(sessionId, { limit: 1000 });
        throw new Error(`${(err as Error).message}; transcript: ${JSON.stringify(rows.map((r) => [r.role, r.text.slice(0, 100)]))}`);
      }
    };

    // --- build A: the first versioned deploy makes itself current
    const a = await startBuild(bundleA, vA);
    assert.ok(logged.some((l) => l.msg.startsWith('this build is now the current version')), JSON.stringify(logged));
    assert.equal((await describeDeployment(client, deploymentName))?.currentBuildId, 'A');
    // a second start of A (or of another build) with onlyIfUnset leaves the current version alone
    assert.deepEqual(await setCurrentVersion(client, vA, { onlyIfUnset: true }), { changed: false, currentBuildId: 'A' });

    const chat = `chat-${randomUUID().slice(0, 8)}`;
    const idleChat = `idle-${randomUUID().slice(0, 8)}`;
    const s1 = (await send(chat, 'm1')).workflowId;
    await waitForReply(s1, 'echo: m1');
    const s2 = (await send(idleChat, 'i1')).workflowId;
    await waitForReply(s2, 'echo: i1');

    // --- a turn in flight on A (its model answers slowly) while B is deployed and made current
    const before = model.requests.length;
    model.enqueue({ text: 'echo: m2', firstTokenDelayMs: 6000, match: (req) => bodies(req).includes('m2') });
    await send(chat, 'm2');
    await model.waitForRequest(before + 1, 30_000);
    await startBuild(bundleB, vB);
    // B registered but does not take over by itself: the operator makes it current
    const notice = logged.find((l) => l.level === 'warn' && l.msg.startsWith('this build registered but is not current'));
    assert.ok(notice && 'command' in notice.obj && String(notice.obj.command).includes(`--deployment-name ${deploymentName} --build-id B`), JSON.stringify(logged));
    assert.equal((await describeDeployment(client, deploymentName))?.currentBuildId, 'A');
    const madeB = await setCurrentVersion(client, vB, { timeoutMs: 60_000 });
    assert.deepEqual(madeB, { changed: true, previousBuildId: 'A', currentBuildId: 'B' });
    // a message during the in-flight turn: queued in the session on A, answered after it moves to B
    await send(chat, 'm3');
    assert.equal((await replies(s1)).includes('echo: m2'), false, 'm2 was still in flight when B became current');

    await waitForReply(s1, 'echo: m2');
    await waitForReply(s1, 'echo: m3');
    await send(chat, 'm4');
    await waitForReply(s1, 'echo: m4');

    // the session: run 1 entirely on A, continued as new, run 2 entirely on B
    const runs = await sessionRuns(client, s1);
    assert.equal(runs.length, 2, `two runs of the session (${JSON.stringify(runs)})`);
    const [run1, run2] = runs as [RunInfo, RunInfo];
    assert.ok(run1.builds.length > 0 && run1.builds.every((b) => b === 'A'), `run 1 on A: ${run1.builds.join(',')}`);
    assert.ok(run2.builds.length > 0 && run2.builds.every((b) => b === 'B'), `run 2 on B: ${run2.builds.join(',')}`);
    const s1Now = await client.workflow.getHandle(s1).describe();
    assert.equal(s1Now.raw.workflowExecutionInfo?.versioningInfo?.deploymentVersion?.buildId, 'B');
    const turnIdOf = (n: number) => new RegExp(`^${s1.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:turn:${n}:[0-9a-f]{8}$`);

    // run 1 (A): turns 1 and 2 as child turn workflows, nothing inline, none of B's memo
    assert.equal(run1.childTurns.length, 2, `turns 1 and 2 started as children in run 1: ${run1.childTurns.join(', ')}`);
    run1.childTurns.forEach((id, i) => assert.match(id, turnIdOf(i + 1)));
    assert.deepEqual(run1.inlineTurns, [], 'no turn ran inside run 1');
    assert.deepEqual(run1.memo, [], "run 1 never ran B's session code");
    // turn 2 was in flight during the deploy: it and turn 1 ran only on A, their activities too
    for (const id of run1.childTurns) {
      const t = await turnBuild(client, id);
      assert.equal(t.status, 'COMPLETED', id);
      assert.deepEqual(t.builds.filter((b) => b !== 'A'), [], `${id} ran only on A`);
      assert.equal(t.pinnedTo, 'A', id);
      assert.deepEqual(t.identities, ['steward-build-A'], id);
      assert.deepEqual(t.activityWorkers, ['steward-build-A'], `${id}: its activities ran on A's worker`);
    }

    // run 2 (B): turns 3 and 4 inside the session, numbered on from run 1 under the same epoch,
    // their activities scheduled by the session with the turn's summary and run on B's worker
    assert.deepEqual(run2.childTurns, [], 'no child turn workflow in run 2');
    assert.equal(run2.inlineTurns.length, 2, `turns 3 and 4 ran inside run 2: ${run2.inlineTurns.join(', ')}`);
    run2.inlineTurns.forEach((id, i) => assert.match(id, turnIdOf(i + 3)));
    const epoch = (id: string) => id.split(':').at(-1);
    assert.equal(epoch(run2.inlineTurns[0]!), epoch(run1.childTurns[0]!), 'one session epoch across the upgrade');
    assert.deepEqual(run2.summaries, ['Turn 3: model step 1 (openai-compatible:test-model)', 'Turn 4: model step 1 (openai-compatible:test-model)']);
    assert.deepEqual(run2.activityWorkers, ['steward-build-B'], "run 2's activities ran on B's worker");
    assert.deepEqual(run2.memo, ['B', 'B'], "B's session code started each of run 2's turns");

    // --- the idle session is still pinned to A until it wakes; the wake moves it to B
    assert.equal((await client.workflow.getHandle(s2).describe()).raw.workflowExecutionInfo?.versioningInfo?.deploymentVersion?.buildId, 'A');
    assert.ok((await countPinned(client, vA)) >= 1, 'A has pinned work left (the idle session)');
    const woken = await wakeSessionsOn(client, vA);
    assert.deepEqual(woken, [s2]);
    assert.equal(await waitForDrained(client, vA, 30_000), 0, `no workflow is left on ${versionString(vA)}`);
    assert.equal((await client.workflow.getHandle(s2).describe()).raw.workflowExecutionInfo?.versioningInfo?.deploymentVersion?.buildId, 'B');
    // what an operator watches: the server reports A drained
    await waitFor(async () => ((await describeDeployment(client, deploymentName))?.versions.find((v) => v.buildId === 'A')?.drainage === 'drained' ? true : undefined), 'A reported drained', 60_000);
    const state = await describeDeployment(client, deploymentName);
    assert.equal(state?.currentBuildId, 'B');

    // --- A shuts down; everything keeps working on B alone
    a.worker.shutdown();
    await a.run;
    await send(chat, 'm5');
    await waitForReply(s1, 'echo: m5');
    await send(idleChat, 'i2');
    await waitForReply(s2, 'echo: i2');

    // the idle session's turn on B ran inside it: its second run started no child
    const s2Runs = await sessionRuns(client, s2);
    assert.equal(s2Runs.length, 2, `the idle session continued as new once (${JSON.stringify(s2Runs)})`);
    assert.equal(s2Runs[0]!.childTurns.length, 1, "i1's turn was a child on A");
    assert.deepEqual(s2Runs[1]!.childTurns, []);
    assert.equal(s2Runs[1]!.inlineTurns.length, 1, "i2's turn ran inside the session on B");
    assert.ok(s2Runs[1]!.builds.every((b) => b === 'B'), `on B: ${s2Runs[1]!.builds.join(',')}`);

    // --- the next deploy, inline turns on both sides: a turn in flight inside the session on B
    // while C becomes current finishes there, and the session moves to C right after it
    const beforeC = model.requests.length;
    model.enqueue({ text: 'echo: m6', firstTokenDelayMs: 6000, match: (req) => bodies(req).includes('m6') });
    await send(chat, 'm6');
    await model.waitForRequest(beforeC + 1, 30_000);
    const inFlight = await ingress.status(s1);
    assert.match(inFlight.running?.turnId ?? '', turnIdOf(6), `turn 6 runs: ${JSON.stringify(inFlight.running)}`);
    assert.equal(inFlight.running?.phase, 'model', 'the session answers for its inline turn (step and phase)');
    await startBuild(bundleC, vC);
    assert.deepEqual(await setCurrentVersion(client, vC, { timeoutMs: 60_000 }), { changed: true, previousBuildId: 'B', currentBuildId: 'C' });
    await send(chat, 'm7');
    assert.equal((await replies(s1)).includes('echo: m6'), false, 'm6 was still in flight when C became current');
    await waitForReply(s1, 'echo: m6');
    await waitForReply(s1, 'echo: m7');
    const runsC = await sessionRuns(client, s1);
    assert.equal(runsC.length, 3, `a third run of the session (${JSON.stringify(runsC)})`);
    const [, run2Done, run3] = runsC as [RunInfo, RunInfo, RunInfo];
    assert.ok(run2Done.builds.every((b) => b === 'B'), `run 2 stayed on B to its end: ${run2Done.builds.join(',')}`);
    assert.equal(run2Done.inlineTurns.length, 4, `turns 3 to 6 ran inside run 2: ${run2Done.inlineTurns.join(', ')}`);
    assert.match(run2Done.inlineTurns.at(-1)!, turnIdOf(6), 'the in-flight turn 6 finished in run 2, on B');
    assert.deepEqual(run2Done.memo, ['B', 'B', 'B', 'B']);
    assert.ok(run3.builds.length > 0 && run3.builds.every((b) => b === 'C'), `run 3 on C: ${run3.builds.join(',')}`);
    assert.equal(run3.inlineTurns.length, 1);
    assert.match(run3.inlineTurns[0]!, turnIdOf(7));
    assert.deepEqual(run3.memo, ['C']);
    assert.deepEqual(run3.activityWorkers, ['steward-build-C']);

    // --- exactly one reply per message, none lost, none repeated, each under its turn's reply key
    await sleep(1000);
    assert.deepEqual((await replies(s1)).sort(), ['echo: m1', 'echo: m2', 'echo: m3', 'echo: m4', 'echo: m5', 'echo: m6', 'echo: m7']);
    assert.deepEqual((await replies(s2)).sort(), ['echo: i1', 'echo: i2']);
    const keys = async (sessionId: string) => (await database.db.delivery.findMany({ where: { sessionId }, select: { key: true } })).map((d) => d.key).sort();
    const s1Turns = runsC.flatMap((r) => [...r.childTurns, ...r.inlineTurns]);
    assert.equal(s1Turns.length, 7, `seven turns: ${s1Turns.join(', ')}`);
    assert.deepEqual(await keys(s1), s1Turns.map((t) => `${t}:reply`).sort());
    assert.deepEqual(await keys(s2), [...s2Runs[0]!.childTurns, ...s2Runs[1]!.inlineTurns].map((t) => `${t}:reply`).sort());
  });

  // A version registers one task queue at a time (a worker per queue); the server refuses to make
  // it current while the current version has queues the new one does not poll yet.
  it('makes a version current once all its task queues poll', { timeout: 120_000 }, async () => {
    const client = env.client;
    const deploymentName = `steward-q-${randomUUID().slice(0, 8)}`;
    const queues = [`queues-a-${randomUUID()}`, `queues-b-${randomUUID()}`];
    const models = createModelRegistry({ openaiCompatible: { baseURL: model.baseURL } });
    const start = async (buildId: string, taskQueue: string) => {
      const worker = await createStewardWorker({
        connection: env.nativeConnection,
        namespace: env.namespace ?? 'default',
        taskQueue,
        workflowBundle: await testBundle(),
        identity: `queues-${buildId}`,
        deps: { db: database.db, models, systemPrompt: DEFAULT_SYSTEM_PROMPT, defaultModel: 'openai-compatible:test-model' },
        workerDeploymentOptions: { useWorkerVersioning: true, version: { deploymentName, buildId }, defaultVersioningBehavior: 'PINNED' },
      });
      running.push({ worker, run: worker.run() });
    };
    for (const q of queues) await start('X', q);
    assert.deepEqual(await setCurrentVersion(client, { deploymentName, buildId: 'X' }, { timeoutMs: 30_000 }), { changed: true, currentBuildId: 'X' });
    // a session running on each queue makes both of X's queues active
    for (const q of queues) {
      const handle = await client.workflow.start('sessionWorkflow', {
        taskQueue: q,
        workflowId: `queues-session-${randomUUID()}`,
        args: [{ conversation: { platform: 'http', account: 'queues', chatId: q }, settings: { model: 'openai-compatible:test-model', think: 'off' }, limits: { maxSteps: 4, maxTurnsPerRun: 100 } }],
      });
      await waitFor(async () => ((await handle.describe()).historyLength > 3 ? true : undefined), `${handle.workflowId} to take its first task`, 20_000);
    }

    // Y polls one queue: the switch waits until the second queue's worker starts
    await start('Y', queues[0]!);
    let settled = false;
    const switching = setCurrentVersion(client, { deploymentName, buildId: 'Y' }, { timeoutMs: 60_000 }).finally(() => (settled = true));
    await sleep(2000);
    assert.equal(settled, false, 'Y is not made current while it polls one of two queues');
    await start('Y', queues[1]!);
    assert.deepEqual(await switching, { changed: true, previousBuildId: 'X', currentBuildId: 'Y' });
    assert.equal((await describeDeployment(client, deploymentName))?.currentBuildId, 'Y');
  });
});

describe('versioning configuration', () => {
  it('defaults to auto with the deployment `steward` and no build id', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'steward-upgrade-cfg-'));
    try {
      assert.deepEqual(loadConfig({}, dir).workers.versioning, { mode: 'auto', deploymentName: 'steward' });
      assert.deepEqual(loadConfig({ STEWARD_WORKER_VERSIONING: 'on', STEWARD_BUILD_ID: 'v1.2+abc', STEWARD_DEPLOYMENT_NAME: 'chat_bots' }, dir).workers.versioning, {
        mode: 'on',
        deploymentName: 'chat_bots',
        buildId: 'v1.2+abc',
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses bad values, naming the variable', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'steward-upgrade-cfg-'));
    try {
      const cases: Array<[Record<string, string>, RegExp]> = [
        [{ STEWARD_WORKER_VERSIONING: 'yes' }, /STEWARD_WORKER_VERSIONING: expected auto, on or off/],
        [{ STEWARD_WORKER_VERSIONING: 'on' }, /STEWARD_BUILD_ID: expected the build id of this image when STEWARD_WORKER_VERSIONING=on/],
        [{ STEWARD_BUILD_ID: 'steward:1' }, /STEWARD_BUILD_ID: expected a build id/],
        [{ STEWARD_DEPLOYMENT_NAME: 'my.deploy' }, /STEWARD_DEPLOYMENT_NAME: expected a deployment name/],
      ];
      for (const [env, re] of cases) {
        assert.throws(() => loadConfig(env, dir), (err: unknown) => err instanceof ConfigError && re.test(err.message), JSON.stringify(env));
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
