/**
 * Restart: objectives keep their promises across downtime. A persistent Temporal dev server
 * (SQLite file, fixed port) and a Steward worker run two objectives every 3 s; then the
 * worker stops and the server is killed (SIGKILL) for 15 s, longer than several intervals;
 * then both start again on the same port and file. Missed runs follow the catch-up policy,
 * none is doubled, none is lost, and the schedules keep firing.
 *
 * What Temporal does (its legacy scheduler workflow, `temporal-sys-scheduler:<schedule id>`,
 * which the dev server of CLI 1.9 / Server 1.32 runs: service/worker/scheduler/workflow.go):
 *  - The scheduler remembers the last time it processed (the last action before the stop).
 *    On its first workflow task after the restart it takes `now` = that task's
 *    WorkflowTaskStarted time and walks every nominal time t in (last processed, now]:
 *    if `now - t > catchupWindow` the time is dropped and counted in
 *    `numActionsMissedCatchupWindow`; otherwise it is buffered with the overlap policy.
 *  - The buffer then follows the overlap policy: with nothing running the first buffered
 *    start runs; `buffer-all` keeps the others and runs them one after another as each
 *    finishes; `skip` drops the others at once (counted in `numActionsSkippedOverlap`).
 *  - Each run's workflow id is the prefix plus its nominal time (to the second) with the
 *    reuse policy REJECT_DUPLICATE, so a nominal time can never start twice.
 *  - Interval specs (`every`, phase 0) fire at the multiples of the interval since the epoch.
 * So this test reads the scheduler's exact wake-up time from its history and computes which
 * nominal times must have run, been missed or been skipped, and checks the ObjectiveRun rows
 * (one per run, keyed by the run's workflow id, with its `scheduledAt`) and the schedule's
 * counters against that: the partition is exact, every nominal time is accounted for once.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, describe, it } from 'node:test';
import { Client, Connection, type ScheduleDescription } from '@temporalio/client';
import proto from '@temporalio/proto';
import { NativeConnection, type Worker } from '@temporalio/worker';
import type { Db } from '../../domain/db.js';
import { OPERATOR } from '../../domain/governance.js';
import { createModelRegistry } from '../../domain/model.js';
import { createObjectiveService, type ObjectiveService } from '../../services/objectives.js';
import { objectiveScheduleId } from '../../common/objectives.js';
import { DEFAULT_SYSTEM_PROMPT } from '../../config/index.js';
import { findTemporalCli } from '../../platform/temporal-server.js';
import { createStewardWorker } from '../../workers/main.js';
import { testDatabases, type TestDatabase } from '../helpers/db.js';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';
import { testBundle } from '../helpers/steward.js';
import { persistentTemporal, type PersistentTemporal } from '../helpers/temporal-process.js';

const OP = { id: OPERATOR.id, name: OPERATOR.name };
const MODEL = 'openai-compatible:restart-model';
const INTERVAL_MS = 3_000;
const WINDOW_A_MS = 60_000; // A: catchupWindow 1m, overlap buffer-all
const WINDOW_B_MS = 10_000; // B: catchupWindow 10s (the schema's and Temporal's minimum), overlap skip
/** From the kill of the server to its new start, at least: longer than B's window and several intervals. */
const DOWNTIME_MS = 15_000;
/** Where in the interval the server is started again (see the restart below). */
const RESTART_PHASE_MS = 1_300;
const SCHEDULER_PREFIX = 'temporal-sys-scheduler:';
const { EventType } = proto.temporal.api.enums.v1;

const database = testDatabases()[0]!; // SQLite: the database is not what restarts here
const iso = (ms: number) => new Date(ms).toISOString();
/** The nominal times of an `every` spec in (from, to]: multiples of the interval since the epoch. */
function grid(fromExclusive: number, toInclusive: number): number[] {
  const out: number[] = [];
  for (let t = (Math.floor(fromExclusive / INTERVAL_MS) + 1) * INTERVAL_MS; t <= toInclusive; t += INTERVAL_MS) out.push(t);
  return out;
}

interface Workers {
  stop(): Promise<void>;
}

/** The worker as the platform runs it: workflows on the interactive queue, objectives' activities on an activity-only background worker. */
async function startWorkers(address: string, db: Db, models: ReturnType<typeof createModelRegistry>, taskQueue: string, backgroundQueue: string): Promise<Workers> {
  const connection = await NativeConnection.connect({ address });
  const deps = { db, models, systemPrompt: DEFAULT_SYSTEM_PROMPT, heartbeatEveryMs: 100, defaultModel: MODEL };
  const created: Worker[] = [];
  try {
    created.push(await createStewardWorker({ connection, namespace: 'default', taskQueue, workflowBundle: await testBundle(), deps }));
    created.push(await createStewardWorker({ connection, namespace: 'default', taskQueue: backgroundQueue, workflowBundle: await testBundle(), deps }));
  } catch (err) {
    await connection.close();
    throw err;
  }
  const running = Promise.allSettled(created.map((w) => w.run()));
  let stopped: Promise<void> | undefined;
  return {
    stop() {
      stopped ??= (async () => {
        for (const w of created) if (w.getState() === 'RUNNING') w.shutdown();
        const results = await running;
        await connection.close();
        const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
        if (failed) throw failed.reason;
      })();
      return stopped;
    },
  };
}

/** A protobuf Timestamp in epoch milliseconds. */
function timestampMs(ts: { seconds?: { toString(): string } | number | null; nanos?: number | null } | null | undefined): number {
  if (!ts) throw new Error('an event without its time');
  return Number(String(ts.seconds ?? 0)) * 1000 + Math.floor((ts.nanos ?? 0) / 1_000_000);
}

/**
 * The scheduler's `now` on its first workflow task after `afterMs`: the WorkflowTaskStarted time
 * of the first completed workflow task (a timed-out sticky attempt has no Started event of its own).
 */
async function schedulerWakeAfter(client: Client, scheduleId: string, afterMs: number): Promise<number> {
  const history = await client.workflow.getHandle(`${SCHEDULER_PREFIX}${scheduleId}`).fetchHistory();
  let started: number | undefined;
  for (const e of history.events ?? []) {
    if (e.eventType === EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED) started = timestampMs(e.eventTime);
    if (e.eventType === EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED && started !== undefined && started >= afterMs) return started;
  }
  throw new Error(`the scheduler of ${scheduleId} has no workflow task after ${iso(afterMs)}`);
}

describe('objectives across a restart of the worker and the Temporal server', { skip: findTemporalCli() ? false : 'no temporal CLI' }, () => {
  let dir: string | undefined;
  let server: PersistentTemporal | undefined;
  let model: ModelServer | undefined;
  let dbh: TestDatabase | undefined;
  let workers: Workers | undefined;
  let clientConnection: Connection | undefined;

  after(async () => {
    const steps: Array<[string, () => unknown]> = [
      ['workers', () => workers?.stop()],
      ['client', () => clientConnection?.close()],
      ['temporal', () => server?.stop('SIGKILL')],
      ['model server', () => model?.close()],
      ['database', () => dbh?.cleanup()],
      ['temp dir', () => dir && rmSync(dir, { recursive: true, force: true })],
    ];
    for (const [what, step] of steps) {
      try {
        await step();
      } catch (err) {
        console.error(`cleanup of the ${what} failed:`, err);
      }
    }
  });

  it('missed runs follow the catch-up policy; none is doubled, none is lost; the schedules keep firing', { timeout: 150_000 }, async () => {
    const began = Date.now();
    dir = mkdtempSync(path.join(tmpdir(), 'steward-objectives-restart-'));
    server = await persistentTemporal({ dir: path.join(dir, 'temporal') });
    await server.start();
    model = await startModelServer();
    model.setDefault(() => ({ text: 'tick' }));
    dbh = await database.create();
    const db = dbh.db;
    const models = createModelRegistry({ openaiCompatible: { baseURL: model.baseURL } });
    const tag = randomBytes(3).toString('hex');
    const taskQueue = `restart-${tag}`;
    const backgroundQueue = `${taskQueue}-background`;
    await testBundle();

    const connectService = async (): Promise<{ client: Client; objectives: ObjectiveService }> => {
      clientConnection = await Connection.connect({ address: server!.address });
      const client = new Client({ connection: clientConnection, namespace: 'default' });
      return { client, objectives: createObjectiveService({ client, db, taskQueue: backgroundQueue, maxSteps: 4 }) };
    };
    workers = await startWorkers(server.address, db, models, taskQueue, backgroundQueue);
    let { client, objectives } = await connectService();

    const common = { prompt: 'Say tick', chatId: `restart-${tag}`, platform: 'http' as const, account: `acct-${tag}`, schedule: { every: '3s' } };
    const A = await objectives.create({ ...common, name: `restart-a-${tag}`, catchupWindow: '1m', overlap: 'buffer-all' }, OP);
    const B = await objectives.create({ ...common, name: `restart-b-${tag}`, catchupWindow: '10s', overlap: 'skip' }, OP);
    const runsOf = (id: string) => db.objectiveRun.findMany({ where: { objectiveId: id }, orderBy: { createdAt: 'asc' } });
    const timesOf = (rows: Awaited<ReturnType<typeof runsOf>>) => rows.map((r) => r.scheduledAt!.getTime()).sort((x, y) => x - y);
    const describeOf = (id: string) => client.schedule.getHandle(objectiveScheduleId(id)).describe();

    /**
     * Wait for a moment 0.6-1.8 s after a nominal time at which `ready(tick)` holds, so the
     * next nominal time is more than a second away; returns that nominal time.
     */
    const quietTick = async (what: string, ready: (tick: number) => Promise<boolean>, timeoutMs: number): Promise<number> => {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        const tick = Math.floor(Date.now() / INTERVAL_MS) * INTERVAL_MS;
        const phase = Date.now() - tick;
        if (phase >= 600 && phase <= 1800 && (await ready(tick)) && Date.now() - tick <= 2000) return tick;
        await sleep(50);
      }
      const state = await Promise.all([A, B].map(async (o) => (await runsOf(o.id)).map((r) => `${r.scheduledAt?.toISOString()} ${r.status}`)));
      throw new Error(`timed out waiting for ${what}; runs: ${JSON.stringify(state)}`);
    };
    /** The run of `tick` is done and its workflow closed, and no other run is in flight. */
    const idleAt = async (id: string, tick: number, minRuns: number): Promise<boolean> => {
      const rows = await runsOf(id);
      const last = rows.find((r) => r.scheduledAt?.getTime() === tick);
      if (rows.length < minRuns || !last || last.status !== 'done' || rows.some((r) => r.status === 'running')) return false;
      return (await client.workflow.getHandle(last.id).describe()).status.name !== 'RUNNING';
    };

    // 1. a few runs, then stop right after a nominal time whose runs are done: nothing is in
    //    flight (else `skip` would drop every catch-up run because one is still "running")
    const lastBefore = await quietTick('a few runs and a quiet moment', async (tick) => (await idleAt(A.id, tick, 2)) && (await idleAt(B.id, tick, 2)), 45_000);
    const stopping = Date.now();
    await workers.stop();
    workers = undefined;
    await clientConnection!.close();
    clientConnection = undefined;
    const killedAt = Date.now();
    await server.stop('SIGKILL');
    // nothing past `lastBefore` was processed before the kill
    assert.ok(killedAt < lastBefore + INTERVAL_MS, `the server was killed ${killedAt - lastBefore} ms after ${iso(lastBefore)}, past the next nominal time`);

    // 2. down for longer than several intervals, then the same server (port, SQLite file) and new workers
    // The restart is spawned 1.3 s after a nominal time: the scheduler wakes about a second
    // later (its timer fires as the server comes up), about 2-3 s after a nominal time, so no
    // nominal time lies within a second of the edge of B's 10 s window (edge phase: 1 s).
    const restartAt = Math.ceil((killedAt + DOWNTIME_MS - RESTART_PHASE_MS) / INTERVAL_MS) * INTERVAL_MS + RESTART_PHASE_MS;
    await sleep(restartAt - Date.now());
    const { spawnedAt, readyAt } = await server.start();
    workers = await startWorkers(server.address, db, models, taskQueue, backgroundQueue);
    ({ client, objectives } = await connectService());

    // 3. settle: both have run normally after the restart, every action taken has its (finished)
    //    run, A's buffer is empty; then pause both right after a nominal time so the counters stop
    const bufferSize = (d: ScheduleDescription) => Number(d.raw.info?.bufferSize ?? 0);
    const settledAt = async (id: string, tick: number): Promise<boolean> => {
      const [rows, d] = await Promise.all([runsOf(id), describeOf(id)]);
      return (
        tick >= readyAt + 2 * INTERVAL_MS &&
        rows.length === d.info.numActionsTaken &&
        bufferSize(d) === 0 &&
        rows.every((r) => r.status !== 'running') &&
        rows.some((r) => r.scheduledAt?.getTime() === tick)
      );
    };
    const lastTick = await quietTick('the runs to settle after the restart', async (tick) => (await settledAt(A.id, tick)) && (await settledAt(B.id, tick)), 60_000);
    await objectives.pause(A.id, OP);
    await objectives.pause(B.id, OP);
    await sleep(500);
    const [rowsA, rowsB, dA, dB] = await Promise.all([runsOf(A.id), runsOf(B.id), describeOf(A.id), describeOf(B.id)]);
    const wakeA = await schedulerWakeAfter(client, objectiveScheduleId(A.id), spawnedAt);
    const wakeB = await schedulerWakeAfter(client, objectiveScheduleId(B.id), spawnedAt);

    // --- never doubled: one run per run id and per nominal time, and one per action taken
    for (const [name, rows, d] of [['A', rowsA, dA], ['B', rowsB, dB]] as const) {
      assert.equal(new Set(rows.map((r) => r.id)).size, rows.length, `${name}: a run id twice`);
      assert.ok(rows.every((r) => r.scheduledAt), `${name}: every scheduled run knows its nominal time`);
      const times = timesOf(rows);
      assert.equal(new Set(times).size, times.length, `${name}: a nominal time ran twice: ${times.map(iso).join(', ')}`);
      assert.equal(d.info.numActionsTaken, rows.length, `${name}: actions taken and runs recorded differ`);
      assert.ok(rows.every((r) => r.status === 'done'), `${name}: ${JSON.stringify(rows.map((r) => r.status))}`);
      // the first run is the first nominal time after the schedule was created, the last the one before the pause
      assert.equal(times[0], grid(d.info.createdAt.getTime(), d.info.createdAt.getTime() + INTERVAL_MS)[0], `${name}: first run`);
      assert.equal(times.at(-1), lastTick, `${name}: last run`);
      assert.equal(d.state.paused, true);
    }
    const timesA = timesOf(rowsA);
    const timesB = timesOf(rowsB);
    // the scheduler was woken by the restart, not before it, and soon after it
    for (const wake of [wakeA, wakeB]) assert.ok(wake >= spawnedAt && wake < readyAt + 20_000, `woke at ${iso(wake)}, server back at ${iso(readyAt)}`);

    // --- A (catch-up window 1m, buffer-all): every nominal time of the downtime ran, once, after the restart
    const missedA = grid(lastBefore, wakeA);
    assert.ok(missedA.length >= 4, `A missed ${missedA.length}`);
    assert.ok(wakeA - missedA[0]! <= WINDOW_A_MS, 'precondition: the whole downtime lies within A\'s window');
    assert.deepEqual(timesA.map(iso), grid(timesA[0]! - 1, lastTick).map(iso), 'A: every nominal time from the first to the last ran exactly once (none lost)');
    const caughtA = rowsA.filter((r) => missedA.includes(r.scheduledAt!.getTime()));
    assert.equal(caughtA.length, missedA.length);
    assert.ok(caughtA.every((r) => r.createdAt.getTime() >= spawnedAt), 'A: the missed runs ran after the restart');
    assert.equal(dA.info.numActionsMissedCatchupWindow, 0);
    assert.equal(dA.info.numActionsSkippedOverlap, 0);
    assert.ok(timesA.some((t) => t > wakeA), 'A fires normally after the restart');

    // --- B (catch-up window 10s, skip): times more than 10 s before the wake-up are dropped and
    // counted; of those within the window (all missed too, as the downtime is longer than the
    // window) only the earliest runs, the rest are skipped as overlapping it
    const missedB = grid(lastBefore, wakeB);
    const outsideB = missedB.filter((t) => wakeB - t > WINDOW_B_MS);
    const insideB = missedB.filter((t) => wakeB - t <= WINDOW_B_MS);
    assert.ok(outsideB.length >= 1 && insideB.length >= 3, `precondition: ${outsideB.length} outside, ${insideB.length} inside B's window`);
    const caughtB = timesB.filter((t) => missedB.includes(t));
    assert.deepEqual(caughtB.map(iso), [iso(insideB[0]!)], 'B: exactly one catch-up run, the earliest nominal time within the window');
    assert.equal(dB.info.numActionsMissedCatchupWindow, outsideB.length, 'B: the times outside the window are counted as missed');
    // every nominal time from B's first to its last is a run, missed (outside the window) or skipped
    const noRunB = grid(timesB[0]! - 1, lastTick).filter((t) => !timesB.includes(t));
    const skippedB = noRunB.filter((t) => !outsideB.includes(t));
    assert.ok(insideB.slice(1).every((t) => skippedB.includes(t)));
    assert.equal(dB.info.numActionsSkippedOverlap, skippedB.length, `B: skipped ${skippedB.map(iso).join(', ')}`);
    // Nominal times skipped besides the catch-up batch: a tick that came while an earlier run was
    // still in flight, typically the caught-up run, which Temporal starts at the wake-up, before
    // the new worker polls. That is what `skip` means; each such tick must have had a run open.
    const skippedOtherwise = skippedB.filter((t) => !insideB.includes(t));
    const closeTimes = await Promise.all(
      rowsB.map(async (r) => ({ at: r.scheduledAt!.getTime(), closed: (await client.workflow.getHandle(r.id).describe()).closeTime?.getTime() ?? Infinity })),
    );
    for (const t of skippedOtherwise) {
      assert.ok(closeTimes.some((c) => c.at < t && c.closed > t), `B skipped ${iso(t)} though no run was in flight then`);
    }
    const caughtAction = dB.info.recentActions.find((a) => a.scheduledAt.getTime() === insideB[0]);
    assert.ok(caughtAction, 'B: the catch-up run is among the recent actions');
    assert.ok(Math.abs(caughtAction.takenAt.getTime() - wakeB) < 2_000, `B: the catch-up run was taken at ${iso(caughtAction.takenAt.getTime())}, woke at ${iso(wakeB)}`);
    assert.ok(timesB.some((t) => t > wakeB), 'B fires normally after the restart');

    console.log(
      `restart: downtime ${((readyAt - killedAt) / 1000).toFixed(1)} s (killed ${iso(killedAt)}, back ${iso(readyAt)}; schedulers woke at ${iso(wakeA)} / ${iso(wakeB)}); ` +
        `A (1m, buffer-all): ${missedA.length} missed, ${caughtA.length} caught up, 0 doubled, 0 lost, ${rowsA.length} runs in all; ` +
        `B (10s, skip): ${missedB.length} missed, ${outsideB.length} outside the window (numActionsMissedCatchupWindow ${dB.info.numActionsMissedCatchupWindow}), ` +
        `${caughtB.length} caught up (${iso(caughtB[0]!)}), ${insideB.length - 1} skipped as overlapping it, ${skippedOtherwise.length} other skips (a run in flight), 0 doubled, ${rowsB.length} runs in all; ` +
        `${((Date.now() - began) / 1000).toFixed(1)} s`,
    );
    console.log(
      `restart: last run before the stop ${iso(lastBefore)}, workers stopped in ${killedAt - stopping} ms, server killed ${killedAt - lastBefore} ms after it; ` +
        `server spawned ${iso(spawnedAt)}; B's catch-up action taken ${caughtAction.takenAt.getTime() - wakeB} ms after its wake-up; ` +
        `B outside ${outsideB.map(iso).join(' ')}, inside ${insideB.map(iso).join(' ')}, other skips ${skippedOtherwise.map(iso).join(' ') || '-'}`,
    );
  });
});
