/**
 * The session workflow (the live chat path) alone: Steward's real workflow bundle on the real
 * Temporal dev server, its activities replaced by stubs that record each call (with the run it
 * came from, and whether it ran as a local activity) and answer as each test scripts. The turn
 * runs inside the session (no child workflow), /stop cancels the model step in flight and keeps
 * the queue, /steer reaches the next model step, and a message queued during a run's last turn
 * is carried into the next run and answered there once. session.test.ts runs the same workflow
 * on the real activities, database and model double.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Context } from '@temporalio/activity';
import { WorkflowUpdateFailedError, type WorkflowHandle } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import proto from '@temporalio/proto';
import { replyKey, sessionWorkflowId, turnWorkflowId, type ConversationKey } from '../../common/ids.js';
import { ApplicationFailure } from '@temporalio/common';
import { budgetRaisedSignal, inboundSignal, replyGateQuery, statusQuery, steerUpdate, stopSignal } from '../../workflows/messages.js';
import { BudgetAttr } from '../../workflows/search-attributes.js';
import { sessionWorkflow } from '../../workflows/chat/session.js';
import type { InboundRef, SessionInput } from '../../workflows/types.js';
import type { ModelStepResult } from '../../activities/index.js';
import { createTestEnvironment } from '../helpers/temporal.js';
import { delivered, reply, until, USAGE, withStubbedWorker, type Call, type Stubs } from './stubbed-worker.js';


const { EventType } = proto.temporal.api.enums.v1;
type HistoryEvent = proto.temporal.api.history.v1.IHistoryEvent;


/** A promise the test opens when it wants a stubbed step to finish. */
function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((r) => (open = r));
  return { wait, open };
}

/**
 * A model step that waits until it is cancelled (at most 30 s, then answers `h-too-late`),
 * heartbeating every 100 ms as the real one does, so /stop reaches it; `onBeat` sees each beat,
 * `onCancelled` the cancellation, rethrown.
 */
async function untilCancelled(step: number, hooks: { onBeat?: () => void; onCancelled?: (err: Error) => void } = {}): Promise<ModelStepResult> {
  const ctx = Context.current();
  const beat = setInterval(() => {
    hooks.onBeat?.();
    ctx.heartbeat({ step });
  }, 100);
  try {
    await Promise.race([ctx.cancelled, new Promise((r) => setTimeout(r, 30_000))]);
    return reply('h-too-late');
  } catch (err) {
    hooks.onCancelled?.(err as Error);
    throw err;
  } finally {
    clearInterval(beat);
  }
}

const eventTypes = (events: HistoryEvent[]) => events.map((e) => EventType[e.eventType ?? 0]);
const scheduledActivities = (events: HistoryEvent[]) => events.flatMap((e) => (e.activityTaskScheduledEventAttributes ? [e.activityTaskScheduledEventAttributes.activityType?.name] : []));
const localActivityMarkers = (events: HistoryEvent[]) => events.filter((e) => e.markerRecordedEventAttributes?.markerName === 'core_local_activity').length;

describe('the session workflow with stubbed activities (dev server)', () => {
  let env: TestWorkflowEnvironment;

  before(async () => {
    env = await createTestEnvironment();
  });
  after(async () => {
    await env?.teardown();
  });

  /**
   * Run `body` with a worker on a fresh queue whose activities are `stubs` (each call recorded,
   * in order); the sessions it started are terminated before the worker stops (a session never
   * ends by itself).
   */
  async function withWorker(
    stubs: Stubs,
    body: (ctx: { taskQueue: string; calls: Call[]; started: Array<WorkflowHandle<typeof sessionWorkflow>> }) => Promise<void>,
  ): Promise<void> {
    const started: Array<WorkflowHandle<typeof sessionWorkflow>> = [];
    await withStubbedWorker(
      env,
      stubs,
      {
        queuePrefix: 'session-stubbed',
        // as Steward's worker (workers/main.ts): a heartbeat reaches the server at least this often, so /stop reaches a model step at once
        workerOptions: { maxHeartbeatThrottleInterval: '300 milliseconds', defaultHeartbeatThrottleInterval: '300 milliseconds' },
      },
      async ({ taskQueue, calls }) => {
        try {
          await body({ taskQueue, calls, started });
        } finally {
          for (const h of started) await h.terminate('test over').catch(() => undefined);
        }
      },
    );
  }

  /** A conversation of its own per test, its session's input, and a way to send it a message (signal-with-start, as the ingress does). */
  function conversation(taskQueue: string, started: Array<WorkflowHandle<typeof sessionWorkflow>>, over: { platform?: ConversationKey['platform']; maxTurnsPerRun?: number; budgetWaitMs?: number } = {}) {
    const key: ConversationKey = { platform: over.platform ?? 'http', account: 'default', chatId: `c-${randomUUID().slice(0, 8)}` };
    const workflowId = sessionWorkflowId(key);
    const input: SessionInput = {
      conversation: key,
      settings: { model: 'openai-compatible:stub', think: 'off' },
      limits: { maxTurnsPerRun: over.maxTurnsPerRun ?? 50, maxSteps: 4, ...(over.budgetWaitMs !== undefined ? { budgetWaitMs: over.budgetWaitMs } : {}) },
    };
    let n = 0;
    const send = async (user = 'pat', key = `in-${++n}`): Promise<InboundRef> => {
      const ref: InboundRef = { key, user, identityId: `id-${user}`, at: new Date().toISOString() };
      const handle = await env.client.workflow.signalWithStart(sessionWorkflow, { workflowId, taskQueue, args: [input], signal: inboundSignal, signalArgs: [ref] });
      if (started.length === 0) started.push(handle);
      return ref;
    };
    const handle = () => env.client.workflow.getHandle<typeof sessionWorkflow>(workflowId);
    const history = async (runId?: string) => (await env.client.workflow.getHandle(workflowId, runId).fetchHistory()).events ?? [];
    return { workflowId, input, send, handle, history };
  }

  const named = (calls: Call[], name: string) => calls.filter((c) => c.name === name);

  it('runs the turn inside the session: one model step in the session’s own history, the reply delivered once under the turn’s key (local activities)', async () => {
    await withWorker(
      {
        modelStep: async () => reply('h-reply'),
        deliver: async () => delivered,
        updateProgress: async () => 'ok',
        clearProgress: async () => 'ok',
      },
      async ({ taskQueue, calls, started }) => {
        const chat = conversation(taskQueue, started, { platform: 'telegram' });
        await chat.send('pat');
        await until('the panel cleared', () => named(calls, 'clearProgress').length === 1);
        assert.deepEqual(
          calls.map((c) => c.name),
          ['updateProgress', 'modelStep', 'deliver', 'clearProgress'],
        );
        const runId = (await chat.handle().describe()).runId;
        const turnId = turnWorkflowId(chat.workflowId, runId, 1);
        // every call came from the session's own run: no child workflow runs the turn
        assert.ok(calls.every((c) => c.runId === runId), 'each activity ran for the session run');
        const step = named(calls, 'modelStep')[0]!;
        assert.equal(step.local, false, 'the model step is a regular activity (heartbeats, cancellation)');
        assert.equal(step.input.turnId, turnId);
        assert.deepEqual(step.input.inbound, ['in-1']);
        assert.deepEqual(step.input.requesters, ['id-pat']);
        const deliver = named(calls, 'deliver')[0]!;
        assert.equal(deliver.local, true, 'the reply goes out as a local activity');
        assert.deepEqual([deliver.input.kind, deliver.input.blobHash, deliver.input.key], ['reply', 'h-reply', replyKey(turnId)]);
        assert.ok(['updateProgress', 'clearProgress'].every((n) => named(calls, n)[0]!.local), 'the panel is edited with local activities');

        await until('the turn recorded in history', async () => localActivityMarkers(await chat.history()) === 3);
        const events = await chat.history();
        const types = eventTypes(events);
        assert.ok(!types.includes('EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED'), 'no child workflow');
        assert.deepEqual(scheduledActivities(events), ['modelStep'], 'the one regular activity is the model step');
        assert.ok(types.includes('EVENT_TYPE_ACTIVITY_TASK_COMPLETED'));
        const status = await chat.handle().query(statusQuery);
        assert.deepEqual([status.running, status.queueLength, status.turnsStarted, status.tokens], [null, 0, 1, USAGE]);
      },
    );
  });

  it('/stop cancels the model step in flight (the activity sees it), keeps the queue, and the queued message is answered next', async () => {
    let step = 0;
    const cancelled: string[] = [];
    let beats = 0;
    await withWorker(
      {
        modelStep: async (input) => {
          if (++step > 1) return reply(`h-answer-${step}`);
          // the first step waits until it is cancelled, heartbeating as the real one does
          return untilCancelled(input.step, {
            onBeat: () => beats++,
            onCancelled: (err) => cancelled.push(`${input.turnId}: ${err.name}`),
          });
        },
        deliver: async () => delivered,
        updateProgress: async () => 'ok',
        clearProgress: async () => 'ok',
      },
      async ({ taskQueue, calls, started }) => {
        const chat = conversation(taskQueue, started, { platform: 'telegram' });
        await chat.send('pat');
        await until('the first model step', () => named(calls, 'modelStep').length === 1);
        await chat.send('pat');
        await until('the follow-up queued', async () => (await chat.handle().query(statusQuery)).queueLength === 1);
        // past its first heartbeat (sent at once): later ones are the throttled ones
        await until('the step heartbeating', () => beats >= 5);
        const t0 = Date.now();
        await chat.handle().signal(stopSignal, { by: 'pat', key: 'stop-1' });
        await until('the stop noticed', () => named(calls, 'deliver').length === 1);
        const stoppedIn = Date.now() - t0;
        await until('the queued message answered, its panel cleared', () => named(calls, 'clearProgress').length === 2);
        const runId = (await chat.handle().describe()).runId;
        const turn1 = turnWorkflowId(chat.workflowId, runId, 1);
        const turn2 = turnWorkflowId(chat.workflowId, runId, 2);
        assert.deepEqual(cancelled, [`${turn1}: CancelledFailure`], 'the model step saw its cancellation');
        // the cancellation reaches the step with a heartbeat's answer (the stub beats every 100 ms, the worker sends one
        // every 300 ms at most; without that throttle setting a beat waits 8 s, 80% of the step's heartbeat timeout)
        assert.ok(stoppedIn < 3_000, `stopped in ${stoppedIn} ms`);

        assert.deepEqual(
          calls.map((c) => c.name),
          ['updateProgress', 'modelStep', 'clearProgress', 'deliver', 'updateProgress', 'modelStep', 'deliver', 'clearProgress'],
        );
        const [stopped, answer] = named(calls, 'deliver').map((c) => c.input);
        assert.deepEqual([stopped!.kind, stopped!.key, stopped!.text], ['notice', `${turn1}:stopped`, 'Stopped the running turn. 1 queued message kept.']);
        assert.deepEqual([answer!.kind, answer!.key, answer!.blobHash], ['reply', replyKey(turn2), 'h-answer-2']);
        assert.deepEqual(named(calls, 'modelStep')[1]!.input.inbound, ['in-2'], 'the kept message is the next turn’s batch');
        assert.ok(!named(calls, 'deliver').some((c) => c.input.key === replyKey(turn1)), 'the stopped turn never replies');

        const types = eventTypes(await chat.history());
        for (const t of ['EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED', 'EVENT_TYPE_ACTIVITY_TASK_CANCELED']) assert.ok(types.includes(t), `${t} in the session's history`);
        assert.ok(!types.includes('EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED'));
        // a /stop the ingress delivers again (the same key) stops nothing, and nothing runs: no "nothing to stop" notice either
        await chat.handle().signal(stopSignal, { by: 'pat', key: 'stop-1' });
        await chat.handle().signal(stopSignal, { by: 'pat', key: 'stop-2' });
        await until('the second stop answered', () => named(calls, 'deliver').length === 3);
        assert.equal(named(calls, 'deliver')[2]!.input.text, 'Nothing is running to stop. 0 messages queued.');
        const status = await chat.handle().query(statusQuery);
        assert.deepEqual([status.running, status.queueLength, status.turnsStarted], [null, 0, 2]);
      },
    );
  });

  it('a stopped turn is over before its notice is delivered: the status shows no running turn, a steer goes to the next turn and a second /stop finds nothing running', async () => {
    const notice = gate();
    await withWorker(
      {
        modelStep: async (input) => {
          if (input.step > 1 || input.inbound.includes('in-2')) return reply('h-answer');
          return untilCancelled(input.step);
        },
        // the stop's notice is held until the test has looked at the session meanwhile
        deliver: async (input) => {
          if (String(input.key).endsWith(':stopped')) await notice.wait;
          return delivered;
        },
        updateProgress: async () => 'ok',
        clearProgress: async () => 'ok',
      },
      async ({ taskQueue, calls, started }) => {
        const chat = conversation(taskQueue, started, { platform: 'telegram' });
        await chat.send('pat');
        await until('the model step', () => named(calls, 'modelStep').length === 1);
        assert.ok((await chat.handle().query(statusQuery)).running, 'the turn runs');
        await chat.handle().signal(stopSignal, { by: 'pat', key: 'stop-1' });
        await until('the stop notice being delivered', () => named(calls, 'deliver').length === 1);
        try {
          // the notice has not been delivered: the turn is over all the same
          const status = await chat.handle().query(statusQuery);
          assert.equal(status.running, null, 'no running turn while the stop notice is delivered');
          const steer = await chat.handle().executeUpdate(steerUpdate, { args: [{ text: 'shorter please', by: 'pat' }] });
          assert.equal(steer.appliedTo, 'next-turn', 'a steer meanwhile guides the next turn, not the stopped one');
          await chat.handle().signal(stopSignal, { by: 'pat', key: 'stop-2' });
        } finally {
          // held no longer (a failed assertion must not leave the worker waiting on it)
          notice.open();
        }
        await until('the second stop answered', () => named(calls, 'deliver').length === 2);
        assert.equal(named(calls, 'deliver')[0]!.input.text, 'Stopped the running turn. 0 queued messages kept.');
        assert.equal(named(calls, 'deliver')[1]!.input.text, 'Nothing is running to stop. 0 messages queued.');
        // the steer reaches the next turn's first model step
        await chat.send('pat');
        await until('the next turn answered', () => named(calls, 'deliver').length === 3);
        const next = named(calls, 'modelStep')[1]!.input;
        assert.deepEqual(next.inbound, ['in-2']);
        assert.deepEqual(next.steers, ['shorter please']);
      },
    );
  });

  it('/steer during a turn answers running-turn and reaches the next model step’s input; between turns it guides the next turn', async () => {
    const first = gate();
    let step = 0;
    await withWorker(
      {
        modelStep: async () => {
          if (++step === 1) await first.wait;
          return reply(`h-step-${step}`);
        },
        deliver: async () => delivered,
      },
      async ({ taskQueue, calls, started }) => {
        const chat = conversation(taskQueue, started);
        await chat.send('pat');
        await until('the first model step', () => named(calls, 'modelStep').length === 1);
        const r = await chat.handle().executeUpdate(steerUpdate, { args: [{ text: '  shorter, please ', by: 'Bo', byId: 'id-bo', key: 'steer-1' }] });
        assert.equal(r.appliedTo, 'running-turn');
        const again = await chat.handle().executeUpdate(steerUpdate, { args: [{ text: 'shorter, please', by: 'Bo', byId: 'id-bo', key: 'steer-1' }] });
        assert.equal(again.appliedTo, 'duplicate', 'the same /steer delivered again is taken once');
        await assert.rejects(
          chat.handle().executeUpdate(steerUpdate, { args: [{ text: '   ', by: 'Bo' }] }),
          (err: Error) => err instanceof WorkflowUpdateFailedError && /steering text is empty/.test(String(err.cause?.message)),
        );
        first.open();
        await until('the reply', () => named(calls, 'deliver').length === 1);
        const runId = (await chat.handle().describe()).runId;
        const turn1 = turnWorkflowId(chat.workflowId, runId, 1);
        assert.deepEqual(
          calls.map((c) => c.name),
          ['modelStep', 'modelStep', 'deliver'],
          'the steering arrived during the step: one more step before the reply goes out',
        );
        const [s1, s2] = named(calls, 'modelStep').map((c) => c.input);
        assert.deepEqual(s1!.steers, []);
        assert.deepEqual([s2!.step, s2!.steers, s2!.draftHash], [2, ['shorter, please'], 'h-step-1']);
        assert.deepEqual(s2!.requesters, ['id-pat', 'id-bo'], 'the steerer joins the turn’s requester set');
        const d = named(calls, 'deliver')[0]!.input;
        assert.deepEqual([d.key, d.blobHash], [replyKey(turn1), 'h-step-2']);

        // no turn running: the note waits for the next turn and reaches its first step
        await until('the session idle', async () => (await chat.handle().query(statusQuery)).running === null);
        const idle = await chat.handle().executeUpdate(steerUpdate, { args: [{ text: 'be brief', by: 'Cy', byId: 'id-cy', key: 'steer-2' }] });
        assert.equal(idle.appliedTo, 'next-turn');
        assert.equal((await chat.handle().query(statusQuery)).pendingSteers, 1);
        await chat.send('pat');
        await until('the second reply', () => named(calls, 'deliver').length === 2);
        const s3 = named(calls, 'modelStep')[2]!.input;
        assert.deepEqual([s3.step, s3.steers, s3.inbound, s3.requesters], [1, ['be brief'], ['in-2'], ['id-pat', 'id-cy']]);
        assert.equal((await chat.handle().query(statusQuery)).pendingSteers, 0);
      },
    );
  });

  it('a step that ends the turn delivers the reply itself when the session says it may (steward-deliver-in-step); steering or a /stop the session took in first leaves the delivery to the turn', async () => {
    const gates: Array<{ turn: number; step: number; may: boolean }> = [];
    const held = [gate(), gate()];
    let steps = 0;
    await withWorker(
      {
        modelStep: async (input) => {
          const n = ++steps;
          // steps 2 (turn 2's first) and 4 (turn 3's) wait until the test has steered or stopped
          if (n === 2) await held[0]!.wait;
          if (n === 4) await held[1]!.wait;
          const turn = Number(/:turn:(\d+):/.exec(input.turnId)?.[1]);
          const ask = (step: number, turnId = input.turnId) => Context.current().client.workflow.getHandle(Context.current().info.workflowExecution!.workflowId).query(replyGateQuery, { turnId, step });
          // as the real step does: ask, and deliver only on yes (a wrong step or turn is never a yes)
          assert.equal(await ask(input.step + 1), false, 'the session says no for a step that is not running');
          assert.equal(await ask(input.step, `${input.turnId}x`), false, 'nor for another turn');
          const may = await ask(input.step);
          gates.push({ turn, step: input.step, may });
          return may ? { ...reply(`h-${n}`), delivered: true } : reply(`h-${n}`);
        },
        deliver: async () => delivered,
        updateProgress: async () => 'ok',
        clearProgress: async () => 'ok',
      },
      async ({ taskQueue, calls, started }) => {
        const chat = conversation(taskQueue, started, { platform: 'telegram' });
        await chat.send('pat');
        await until('the first turn over', async () => (await chat.handle().query(statusQuery)).turnsStarted === 1 && (await chat.handle().query(statusQuery)).running === null);
        const runId = (await chat.handle().describe()).runId;
        const turn1 = turnWorkflowId(chat.workflowId, runId, 1);
        assert.deepEqual(gates, [{ turn: 1, step: 1, may: true }]);
        assert.deepEqual(
          calls.map((c) => c.name),
          ['updateProgress', 'modelStep'],
          'the step delivered the reply and cleared the panel: no delivery and no panel activity after it',
        );
        assert.deepEqual(named(calls, 'modelStep')[0]!.input.deliverFinal, { key: replyKey(turn1), usageBefore: { input: 0, output: 0, total: 0 }, commandsTaken: 0, clearPanel: true });
        assert.equal(localActivityMarkers(await chat.history()), 1, 'one local activity marker: the panel before the step');
        assert.deepEqual((await chat.handle().query(statusQuery)).tokens, USAGE, "the step's usage counts");

        // steering taken in while the step runs: the session says no, one more step, and that step delivers
        await chat.send('pat');
        await until('turn 2 step 1', () => named(calls, 'modelStep').length === 2);
        assert.equal((await chat.handle().executeUpdate(steerUpdate, { args: [{ text: 'shorter', by: 'Bo', byId: 'id-bo', key: 'steer-1', marked: true }] })).appliedTo, 'running-turn');
        // the same steering again (a redelivery) and one its sender did not mark are not counted
        assert.equal((await chat.handle().executeUpdate(steerUpdate, { args: [{ text: 'shorter', by: 'Bo', byId: 'id-bo', key: 'steer-1', marked: true }] })).appliedTo, 'duplicate');
        assert.equal((await chat.handle().executeUpdate(steerUpdate, { args: [{ text: 'and plain', by: 'Bo', byId: 'id-bo', key: 'steer-2' }] })).appliedTo, 'running-turn');
        held[0]!.open();
        await until('turn 2 over', async () => (await chat.handle().query(statusQuery)).running === null && named(calls, 'modelStep').length === 3);
        const s3 = named(calls, 'modelStep')[2]!.input;
        assert.deepEqual([s3.step, s3.steers, s3.draftHash], [2, ['shorter', 'and plain'], 'h-2']);
        assert.deepEqual((s3.deliverFinal as { usageBefore: unknown }).usageBefore, USAGE, "the turn's usage before its second step");
        assert.equal((s3.deliverFinal as { commandsTaken?: number }).commandsTaken, 1, 'the marked steering counted once');
        assert.deepEqual(gates.slice(1), [{ turn: 2, step: 1, may: false }, { turn: 2, step: 2, may: true }]);
        assert.equal(named(calls, 'deliver').length, 0, 'the steered turn replied from its second step');

        // a /stop taken in while the step runs: the session says no, the turn is stopped, no reply
        await chat.send('pat');
        await until('turn 3 step 1', () => named(calls, 'modelStep').length === 4);
        await chat.handle().signal(stopSignal, { by: 'pat', key: 'stop-1', marked: true });
        await until("the stop taken in (the step's cancellation requested)", async () => eventTypes(await chat.history()).includes('EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED'));
        held[1]!.open();
        await until('the stop notice', () => named(calls, 'deliver').length === 1);
        const turn3 = turnWorkflowId(chat.workflowId, runId, 3);
        assert.deepEqual(gates.at(-1), { turn: 3, step: 1, may: false });
        const notice = named(calls, 'deliver')[0]!.input;
        assert.deepEqual([notice.kind, notice.key], ['notice', `${turn3}:stopped`]);
        assert.ok(!calls.some((c) => c.name === 'deliver' && c.input.key === replyKey(turn3)), 'the stopped turn never replies');
      },
    );
  });

  it('continue-as-new: a message queued during the last turn of a run is carried into the next run and answered there, once', async () => {
    const first = gate();
    let step = 0;
    await withWorker(
      {
        modelStep: async () => {
          if (++step === 1) await first.wait;
          return reply(`h-answer-${step}`);
        },
        deliver: async () => delivered,
      },
      async ({ taskQueue, calls, started }) => {
        const chat = conversation(taskQueue, started, { maxTurnsPerRun: 1 });
        await chat.send('pat');
        await until('the first model step', () => named(calls, 'modelStep').length === 1);
        const runA = (await chat.handle().describe()).runId;
        await chat.send('ada');
        await until('the second message queued', async () => (await chat.handle().query(statusQuery)).queueLength === 1);
        first.open();
        await until('the carried message answered', () => named(calls, 'deliver').length === 2);

        const runB = named(calls, 'modelStep')[1]!.runId;
        assert.notEqual(runB, runA, 'the carried message is answered in the next run');
        const eventsA = await chat.history(runA);
        const last = eventsA.at(-1)!;
        assert.equal(EventType[last.eventType ?? 0], 'EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW');
        assert.equal(last.workflowExecutionContinuedAsNewEventAttributes?.newExecutionRunId, runB);
        assert.deepEqual(scheduledActivities(eventsA), ['modelStep'], 'run A ran one turn');

        const [m1, m2] = named(calls, 'modelStep');
        assert.deepEqual([m1!.runId, m1!.input.inbound], [runA, ['in-1']]);
        assert.deepEqual([m2!.runId, m2!.input.inbound], [runB, ['in-2']]);
        // the turn count goes on across runs, and the turn id keeps the session's first run id (its epoch)
        const turn2 = turnWorkflowId(chat.workflowId, runA, 2);
        assert.equal(m2!.input.turnId, turn2);
        const [d1, d2] = named(calls, 'deliver');
        assert.deepEqual([d1!.runId, d1!.input.key], [runA, replyKey(turnWorkflowId(chat.workflowId, runA, 1))]);
        assert.deepEqual([d2!.runId, d2!.input.key, d2!.input.blobHash], [runB, replyKey(turn2), 'h-answer-2']);
        // the carried working set: the next run's turn sees the first turn
        assert.deepEqual((m2!.input.workingSet as { recentTurns: unknown[] }).recentTurns, [
          { inbound: ['in-1'], reply: replyKey(turnWorkflowId(chat.workflowId, runA, 1)) },
        ]);

        // run B has run its turn too: with no message within the grace it continues as new on its own, carrying nothing to answer
        await until('a third run', async () => ![runA, runB].includes((await chat.handle().describe()).runId), 10_000);
        const status = await chat.handle().query(statusQuery);
        assert.deepEqual([status.queueLength, status.turnsStarted, status.generation, status.running], [0, 2, 2, null]);
        // a redelivery of the carried message's signal is not answered again: its key was carried as taken
        await chat.send('ada', 'in-2');
        await chat.send('pat', 'in-3');
        await until('the third message answered', () => named(calls, 'deliver').length === 3);
        assert.deepEqual(
          named(calls, 'modelStep').map((c) => c.input.inbound),
          [['in-1'], ['in-2'], ['in-3']],
          'each message answered once',
        );
        assert.deepEqual(
          named(calls, 'deliver').map((c) => c.input.kind),
          ['reply', 'reply', 'reply'],
        );
      },
    );
  });
  /** The model activity's refusal by a budget, as activities/chat.ts raises it (its details name the budget). */
  const refused = (budget: string) =>
    ApplicationFailure.create({
      type: 'ModelBudgetExceeded',
      nonRetryable: true,
      message: `Not called: the budget of chat c-1, 100 tokens per day (UTC), has 100 tokens left, and a call to openai-compatible:stub may need 4500 tokens: no model is called for it until 2099-01-01 00:00 UTC.`,
      details: [{ budget, scope: 'chat', id: 'c-1', period: 'day', left: { tokens: 100 }, renewsAt: '2099-01-01T00:00:00.000Z' }],
    });

  it('a step refused by a budget: the chat is told, the run names the budget, a budgetRaised signal for it (not for another) retries the step, and the reply goes out once', async () => {
    let raised = false;
    await withWorker(
      {
        modelStep: async () => {
          if (!raised) throw refused('b-chat');
          return reply('h-after');
        },
        deliver: async () => delivered,
        updateProgress: async () => 'ok',
        clearProgress: async () => 'ok',
      },
      async ({ taskQueue, calls, started }) => {
        const chat = conversation(taskQueue, started, { platform: 'telegram', budgetWaitMs: 10 * 60_000 });
        await chat.send('pat');
        await until('the chat told', () => named(calls, 'deliver').length === 1);
        const told = named(calls, 'deliver')[0]!.input;
        assert.equal(told.kind, 'notice');
        assert.equal(told.turnId, undefined, 'not the turn\'s end');
        assert.match(String(told.text), /^Waiting for a budget: Not called: .* An admin was asked to raise the budget b-chat; this turn goes on as soon as it is raised or renews, and waits up to 10 minutes \(\/stop ends it now\)\.$/);
        // the panel is updated after the notice goes out: waited for, not read at once
        await until('the panel says so', () => named(calls, 'updateProgress').some((c) => String(c.input.text).includes('Waiting for the budget b-chat')));
        const status = await chat.handle().query(statusQuery);
        assert.equal(status.running?.turn?.phase, 'budget');
        assert.equal(status.running?.turn?.budget, 'b-chat');
        assert.deepEqual((await chat.handle().describe()).typedSearchAttributes.get(BudgetAttr), ['b-chat']);
        // another budget's raise: not this turn's
        await chat.handle().signal(budgetRaisedSignal, { budgetId: 'b-other' });
        await new Promise((r) => setTimeout(r, 500));
        assert.equal(named(calls, 'modelStep').length, 1, 'still waiting');
        raised = true;
        await chat.handle().signal(budgetRaisedSignal, { budgetId: 'b-chat' });
        await until('the reply', () => named(calls, 'deliver').some((c) => c.input.kind === 'reply'));
        await until('the panel cleared', () => named(calls, 'clearProgress').length === 1);
        assert.equal(named(calls, 'modelStep').length, 2, 'the same step once more');
        assert.equal(named(calls, 'modelStep')[1]!.input.step, 1);
        assert.deepEqual(named(calls, 'deliver').map((c) => c.input.kind), ['notice', 'reply']);
        await until('the run no longer naming the budget', async () => (await chat.handle().describe()).typedSearchAttributes.get(BudgetAttr) === undefined);
      },
    );
  });

  it('a budget not raised within the wait: the same step is tried once more at its end, then the turn ends budget-refused with the message; /stop ends a wait at once', async () => {
    await withWorker(
      {
        modelStep: async () => {
          throw refused('b-day');
        },
        deliver: async () => delivered,
      },
      async ({ taskQueue, calls, started }) => {
        const chat = conversation(taskQueue, started, { budgetWaitMs: 2000 });
        await chat.send('pat');
        await until('the turn ended', () => named(calls, 'deliver').some((c) => c.input.turnId !== undefined), 20_000);
        const [told, end] = named(calls, 'deliver').map((c) => c.input);
        assert.match(String(told!.text), /^Waiting for a budget: /);
        assert.equal(end!.kind, 'notice');
        assert.equal(end!.outcome, 'budget-refused');
        assert.match(String(end!.text), /^No reply: the budget b-day was not raised within 2 seconds\. Not called: the budget of chat c-1, 100 tokens per day \(UTC\), has 100 tokens left, .*until 2099-01-01 00:00 UTC\.$/);
        assert.doesNotMatch(String(end!.text), /The model call failed/);
        assert.equal(named(calls, 'modelStep').length, 2, 'refused, then tried once more at the end of the wait');
        await until('the run no longer naming the budget', async () => (await chat.handle().describe()).typedSearchAttributes.get(BudgetAttr) === undefined);

        // another conversation's turn, stopped while it waits
        const other = conversation(taskQueue, started, { budgetWaitMs: 10 * 60_000 });
        const before = named(calls, 'modelStep').length;
        await other.send('pat');
        await until('the turn waits', async () => (await other.handle().query(statusQuery)).running?.turn?.phase === 'budget');
        const asked = Date.now();
        await other.handle().signal(stopSignal, { by: 'pat' });
        await until('stopped', () => named(calls, 'deliver').some((c) => String(c.input.text).startsWith('Stopped the running turn')), 10_000);
        assert.ok(Date.now() - asked < 10_000, 'at once, not at the end of the wait');
        assert.equal(named(calls, 'modelStep').length, before + 1);
        assert.equal((await other.handle().query(statusQuery)).running, null);
        await until('the run no longer naming the budget', async () => (await other.handle().describe()).typedSearchAttributes.get(BudgetAttr) === undefined);
      },
    );
  });
});
