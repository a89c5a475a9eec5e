/**
 * Session and turn workflows against the real Temporal dev server, a real database and the
 * scripted OpenAI-compatible model server, through the real provider code.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { defaultPayloadConverter } from '@temporalio/common';
import proto from '@temporalio/proto';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { CONTINUE_ON_MESSAGE_PATCH } from '../../workflows/chat/session.js';
import { DELIVER_IN_STEP_PATCH } from '../../workflows/chat/turn-loop.js';
import { statusQuery } from '../../workflows/messages.js';
import { armFaultPoint, faultPointArmed } from '../../common/fault-points.js';
import { UserAttr } from '../../workflows/search-attributes.js';
import { testDatabases } from '../helpers/db.js';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';
import { waitFor, withHarness } from '../helpers/steward.js';
import { createTestEnvironment } from '../helpers/temporal.js';

const { EventType } = proto.temporal.api.enums.v1;

for (const database of testDatabases()) {
  describe(`session workflow (${database.name})`, () => {
    let env: TestWorkflowEnvironment;
    let model: ModelServer;
    let dbh: Awaited<ReturnType<typeof database.create>>;

    before(async () => {
      env = await createTestEnvironment();
      model = await startModelServer();
      dbh = await database.create();
    });
    after(async () => {
      await model?.close();
      await dbh?.cleanup();
      await env?.teardown();
    });

    const providers = () => ({ openaiCompatible: { baseURL: model.baseURL } });
    const lastUserContent = (body: unknown): string => {
      const msgs = (body as { messages: Array<{ role: string; content: unknown }> }).messages;
      return JSON.stringify(msgs);
    };

    it('runs a turn and delivers the reply exactly once', async () => {
      await withHarness({ env: env, db: dbh.db, providers: providers() }, async (h) => {
        model.enqueue({ chunks: ['Hello ', 'from ', 'the model.'] });
        const r = await h.send('hi there');
        assert.equal(r.workflowId, h.sessionId);
        assert.equal(r.kind, 'message');
        const reply = await h.waitForMessage((m) => m.role === 'assistant');
        assert.equal(reply.text, 'Hello from the model.');

        const deliveries = await dbh.db.delivery.findMany({ where: { sessionId: h.sessionId } });
        assert.equal(deliveries.length, 1);
        assert.equal(deliveries[0]?.status, 'sent');
        const assistantRows = await dbh.db.message.count({ where: { sessionId: h.sessionId, role: 'assistant' } });
        assert.equal(assistantRows, 1);

        const kinds = (await dbh.db.receipt.findMany({ where: { sessionId: h.sessionId }, orderBy: { id: 'asc' } })).map((r) => r.kind);
        for (const k of ['ingress', 'turn.start', 'model.call', 'delivery', 'turn.end']) assert.ok(kinds.includes(k), `receipt ${k} in ${kinds.join(',')}`);
        // the turn runs inside the session: its receipts name the session run and the turn
        const modelCall = await dbh.db.receipt.findFirstOrThrow({ where: { sessionId: h.sessionId, kind: 'model.call' } });
        assert.equal(modelCall.workflowId, h.sessionId);
        assert.ok(modelCall.runId);
        assert.match(String((JSON.parse(modelCall.data) as { turnId?: string }).turnId), /:turn:1:/);

        // The same message id again is a duplicate: nothing new is started.
        const again = await h.send('hi there', { id: 'fixed-id' });
        assert.equal(again.duplicate, false);
        const dup = await h.send('hi there', { id: 'fixed-id' });
        assert.equal(dup.duplicate, true);
      });
    });

    it('/stop cancels a slow model step within a second and keeps the queue', async () => {
      await withHarness({ env, db: dbh.db, providers: providers() }, async (h) => {
        const before = model.requests.length;
        model.enqueue({ text: 'too late', firstTokenDelayMs: 30_000 });
        model.enqueue({ text: 'answer to the queued message' });
        await h.send('please think slowly');
        await model.waitForRequest(before + 1, 15_000);
        await h.send('a queued follow-up');
        const status = await h.ingress.status(h.sessionId);
        assert.equal(status.queueLength, 1);
        const abortedBefore = model.aborted;
        const t0 = Date.now();
        await h.send('/stop');
        await h.waitForMessage((m) => m.role === 'system' && m.text.startsWith('Stopped the running turn'));
        const elapsed = Date.now() - t0;
        assert.ok(elapsed < 1000, `stop took ${elapsed} ms`);
        await waitFor(() => model.aborted > abortedBefore || undefined, 'the model request to be aborted', 5000);
        const stopped = await h.waitForMessage((m) => m.text.startsWith('Stopped the running turn'));
        assert.match(stopped.text, /1 queued message kept/);
        // The queued message is answered next; the stopped turn never replies.
        const reply = await h.waitForMessage((m) => m.role === 'assistant');
        assert.equal(reply.text, 'answer to the queued message');
        const rows = await h.ingress.transcript(h.sessionId);
        assert.ok(!rows.some((m) => m.text === 'too late'));
      });
    });

    it('a command run again by a redelivery (its answer was never recorded) does not stop, reset or steer twice: the session takes its key once', async () => {
      await withHarness({ env, db: dbh.db, providers: providers(), commandRetryAfterMs: 0 }, async (h) => {
        /** The process died after the command's effect, before its answer was recorded: the redelivery runs it again. */
        const unanswered = async (id: string) => {
          const row = await dbh.db.message.findFirstOrThrow({ where: { sessionId: h.sessionId, key: { endsWith: `:${id}` } } });
          await dbh.db.receipt.deleteMany({ where: { key: `${row.key}:command` } });
        };
        // /stop stops the first turn
        let before = model.requests.length;
        model.enqueue({ text: 'too late', firstTokenDelayMs: 30_000 });
        await h.send('think slowly');
        await model.waitForRequest(before + 1, 15_000);
        await h.send('/stop', { id: 'stop-1' });
        await h.waitForMessage((m) => m.role === 'system' && m.text.startsWith('Stopped the running turn'));
        // the same /stop, run again while the next turn runs, stops nothing
        await unanswered('stop-1');
        before = model.requests.length;
        model.enqueue({ text: 'the second turn answered', firstTokenDelayMs: 1500 });
        await h.send('a second question');
        await model.waitForRequest(before + 1, 15_000);
        const again = await h.send('/stop', { id: 'stop-1' });
        assert.deepEqual([again.kind, again.duplicate], ['command', false], 'the command ran again');
        const reply = await h.waitForMessage((m) => m.role === 'assistant');
        assert.equal(reply.text, 'the second turn answered');
        assert.equal((await h.ingress.transcript(h.sessionId, { limit: 100 })).filter((m) => m.text.startsWith('Stopped the running turn')).length, 1, 'one stop');

        // /steer: the same steering run again is received once
        const steer = await h.send('/steer be brief', { id: 'steer-1' });
        assert.match(steer.reply ?? '', /next turn/);
        await unanswered('steer-1');
        const steerAgain = await h.send('/steer be brief', { id: 'steer-1' });
        // within a run the server answers the repeated update id with the first outcome; across runs the session drops the key
        assert.match(steerAgain.reply ?? '', /received before|next turn/);
        assert.equal((await env.client.workflow.getHandle(h.sessionId).query(statusQuery)).pendingSteers, 1, 'one steering note waits');

        // /new: the same reset run again does not reset the new task
        const handle = env.client.workflow.getHandle(h.sessionId);
        await h.send('/new', { id: 'new-1' });
        await waitFor(async () => ((await handle.query(statusQuery)).generation >= 1 ? true : undefined), 'the new task');
        const generation = (await handle.query(statusQuery)).generation;
        await unanswered('new-1');
        await h.send('/new', { id: 'new-1' });
        await new Promise((r) => setTimeout(r, 1500));
        assert.equal((await handle.query(statusQuery)).generation, generation, '/new run again starts no second task');
      });
    });

    it('/steer during a turn changes the next model request', async () => {
      await withHarness({ env, db: dbh.db, providers: providers() }, async (h) => {
        const before = model.requests.length;
        model.enqueue({ text: 'draft answer', firstTokenDelayMs: 1500 });
        model.enqueue({ text: 'Réponse en français' });
        await h.send('explain durable execution');
        await model.waitForRequest(before + 1, 15_000);
        const r = await h.send('/steer answer in French');
        assert.match(r.reply ?? '', /running turn/);
        const reply = await h.waitForMessage((m) => m.role === 'assistant');
        assert.equal(reply.text, 'Réponse en français');
        const first = model.requests[before];
        const second = model.requests[before + 1];
        assert.ok(first && second);
        assert.doesNotMatch(lastUserContent(first.body), /answer in French/);
        assert.match(lastUserContent(second.body), /answer in French/);
        assert.match(lastUserContent(second.body), /draft answer/);
        // the steering was taken in before the first step's answer: the session said no to its
        // delivery (steward-deliver-in-step) and the second step, asked again, delivered
        const gateReceipts = await dbh.db.receipt.findMany({ where: { sessionId: h.sessionId, kind: 'model.call' }, orderBy: { id: 'asc' } });
        assert.equal(gateReceipts.length, 2);
        assert.equal((await dbh.db.message.count({ where: { sessionId: h.sessionId, role: 'assistant' } })), 1, 'one reply: the draft never went out');
      });
    });

    it('a /stop sent while the last model step runs keeps its answer from going out, whichever reaches the step first (the cancellation or the answer)', async () => {
      await withHarness({ env, db: dbh.db, providers: providers() }, async (h) => {
        const before = model.requests.length;
        model.enqueue({ text: 'never sent', firstTokenDelayMs: 400 });
        model.enqueue({ text: 'after the stop' });
        await h.send('answer slowly');
        await model.waitForRequest(before + 1, 15_000);
        await h.send('/stop');
        await h.waitForMessage((m) => m.text.startsWith('Stopped the running turn'));
        // the stop's receipt was written before it was sent: a step that answers first sees it and asks the session
        const marks = await dbh.db.receipt.findMany({ where: { sessionId: h.sessionId, kind: 'session.command' } });
        assert.deepEqual(marks.map((r) => (JSON.parse(r.data) as { command: string }).command), ['stop']);
        await h.send('and now?');
        const reply = await h.waitForMessage((m) => m.role === 'assistant');
        assert.equal(reply.text, 'after the stop');
        assert.ok(!(await h.ingress.transcript(h.sessionId, { limit: 100 })).some((m) => m.text === 'never sent'), 'the stopped turn never replied');
      });
    });

    it("a step that delivered the reply and died before it completed is retried without asking the model again: one reply, the step's usage once (steward-deliver-in-step)", async () => {
      await withHarness({ env, db: dbh.db, providers: providers() }, async (h) => {
        const before = model.requests.length;
        model.enqueue({ text: 'delivered once', usage: { prompt_tokens: 11, completion_tokens: 7 } });
        const disarm = armFaultPoint('step.delivered');
        try {
          await h.send('answer me');
          const reply = await h.waitForMessage((m) => m.role === 'assistant');
          assert.equal(reply.text, 'delivered once');
          const turnId = (await dbh.db.message.findFirstOrThrow({ where: { sessionId: h.sessionId, role: 'assistant' } })).turnId!;
          // the retried attempt completes the step: the turn ends and its status has the step's usage
          await waitFor(async () => (await env.client.workflow.getHandle(h.sessionId).query(statusQuery)).running === null || undefined, 'the turn to end', 15_000);
          assert.equal(faultPointArmed(), undefined, 'the first attempt died after its delivery');
          assert.equal(model.requests.length - before, 1, 'the model was asked once');
          const calls = await dbh.db.receipt.findMany({ where: { sessionId: h.sessionId, kind: 'model.call' } });
          assert.deepEqual(calls.map((r) => r.key), [`${turnId}:model:1:1`], 'one model call, by the first attempt');
          assert.equal(await dbh.db.message.count({ where: { sessionId: h.sessionId, role: 'assistant' } }), 1);
          assert.equal(await dbh.db.delivery.count({ where: { sessionId: h.sessionId } }), 1);
          const end = await dbh.db.receipt.findUniqueOrThrow({ where: { key: `${turnId}:end` } });
          assert.deepEqual((JSON.parse(end.data) as { usage: unknown }).usage, { input: 11, output: 7, total: 18 });
          const status = await env.client.workflow.getHandle(h.sessionId).query(statusQuery);
          assert.deepEqual(status.tokens, { input: 11, output: 7, total: 18 }, "the retried step reports the first attempt's usage");
          const history = await env.client.workflow.getHandle(h.sessionId).fetchHistory();
          const started = (history.events ?? []).filter((e) => e.activityTaskStartedEventAttributes);
          assert.equal(started.at(-1)?.activityTaskStartedEventAttributes?.attempt, 2, 'the step completed on its second attempt');
        } finally {
          disarm();
        }
      });
    });

    it('a step whose delivery fails leaves the reply to the turn, which delivers it under the same key, once (steward-deliver-in-step)', async () => {
      await withHarness({ env, db: dbh.db, providers: providers() }, async (h) => {
        model.enqueue({ text: 'through the turn' });
        const disarm = armFaultPoint('step.delivering');
        try {
          await h.send('answer me too');
          const reply = await h.waitForMessage((m) => m.role === 'assistant');
          assert.equal(reply.text, 'through the turn');
          assert.equal(faultPointArmed(), undefined, "the step's delivery failed");
          const summaries = async () =>
            ((await env.client.workflow.getHandle(h.sessionId).fetchHistory()).events ?? [])
              .map((e) => e.userMetadata?.summary)
              .filter((p): p is NonNullable<typeof p> => !!p)
              .map((p) => defaultPayloadConverter.fromPayload<string>(p as never));
          await waitFor(async () => (await summaries()).includes('Turn 1: reply') || undefined, "the turn's delivery marker", 10_000);
          assert.equal(await dbh.db.message.count({ where: { sessionId: h.sessionId, role: 'assistant' } }), 1);
          assert.equal(await dbh.db.delivery.count({ where: { sessionId: h.sessionId } }), 1);
        } finally {
          disarm();
        }
      });
    });

    it('/steer with no running turn guides the next turn; an empty /steer is rejected', async () => {
      await withHarness({ env, db: dbh.db, providers: providers() }, async (h) => {
        const bad = await h.send('/steer');
        assert.match(bad.reply ?? '', /usage: \/steer/);
        const r = await h.send('/steer be brief');
        assert.match(r.reply ?? '', /next turn/);
        const before = model.requests.length;
        await h.send('what is Temporal?');
        await h.waitForMessage((m) => m.role === 'assistant');
        assert.match(lastUserContent(model.requests[before]?.body), /be brief/);
      });
    });

    it('/status reports the running turn and step; /model and /think change settings', async () => {
      await withHarness({ env, db: dbh.db, providers: providers() }, async (h) => {
        const idle = await h.send('/status');
        assert.match(idle.reply ?? '', /No session yet/);
        const before = model.requests.length;
        model.enqueue({ text: 'slow', firstTokenDelayMs: 1500 });
        await h.send('take your time');
        await model.waitForRequest(before + 1, 15_000);
        const s = await h.ingress.status(h.sessionId);
        assert.ok(s.running, 'a turn is running');
        assert.equal(s.running.step, 1);
        assert.equal(s.running.phase, 'model');
        assert.equal(s.queueLength, 0);
        assert.equal(s.model, 'openai-compatible:test-model');
        const text = await h.send('/status');
        assert.match(text.reply ?? '', /step 1 \(model\)/);
        await h.waitForMessage((m) => m.role === 'assistant');
        // The reply lands just before the turn workflow completes; then the session is idle.
        const done = await waitFor(async () => {
          const st = await h.ingress.status(h.sessionId);
          return st.running === null ? st : undefined;
        }, 'the session to be idle');
        assert.ok(done.tokens.total > 0, 'token use is counted');

        const m = await h.send('/model openai-compatible:other-model');
        assert.match(m.reply ?? '', /model is now openai-compatible:other-model/);
        const unconfigured = await h.send('/model anthropic:claude-sonnet-4-5');
        assert.match(unconfigured.reply ?? '', /ANTHROPIC_API_KEY/);
        const bad = await h.send('/model nonsense');
        assert.match(bad.reply ?? '', /usage: \/model/);
        const t = await h.send('/think high');
        assert.match(t.reply ?? '', /thinking is now high/);
        const n = model.requests.length;
        await h.send('next');
        await h.waitForMessage((x) => x.role === 'assistant' && x.text.includes('next'));
        const body = model.requests[n]?.body as { model: string; reasoning_effort?: string };
        assert.equal(body.model, 'other-model');
        assert.equal(body.reasoning_effort, 'high');
        const unknown = await h.send('/frobnicate');
        assert.match(unknown.reply ?? '', /Unknown command \/frobnicate[\s\S]*\/stop/);
      });
    });

    it('/new starts fresh: continue-as-new with no context carried', async () => {
      await withHarness({ env, db: dbh.db, providers: providers() }, async (h) => {
        model.enqueue({ text: 'The secret word is noted.' });
        await h.send('remember the word PINEAPPLE');
        await h.waitForMessage((m) => m.role === 'assistant');
        const handle = env.client.workflow.getHandle(h.sessionId);
        const firstRun = (await handle.describe()).runId;
        await h.send('/new');
        await h.waitForMessage((m) => m.role === 'system' && m.text.startsWith('New task started'));
        const fresh = env.client.workflow.getHandle(h.sessionId);
        await waitFor(async () => ((await fresh.describe()).runId !== firstRun ? true : undefined), 'a new run');
        const st = await fresh.query(statusQuery);
        assert.equal(st.generation, 1);
        const before = model.requests.length;
        await h.send('what was the word?');
        await h.waitForMessage((m) => m.role === 'assistant' && m.text.includes('what was the word'));
        assert.doesNotMatch(lastUserContent(model.requests[before]?.body), /PINEAPPLE/);
      });
    });

    it('continues as new after the configured number of turns, keeping a bounded working set', async () => {
      await withHarness({ env, db: dbh.db, providers: providers(), maxTurnsPerRun: 2 }, async (h) => {
        for (const word of ['one', 'two', 'three']) {
          await h.send(`message ${word}`);
          await h.waitForMessage((m) => m.role === 'assistant' && m.text.includes(`message ${word}`));
        }
        const st = await env.client.workflow.getHandle(h.sessionId).query(statusQuery);
        assert.ok(st.generation >= 1, `generation ${st.generation}`);
        assert.equal(st.turnsStarted, 3);
        // The third turn still saw the first two (carried as references).
        const third = model.requests.at(-1);
        assert.match(lastUserContent(third?.body), /message one/);
        assert.match(lastUserContent(third?.body), /message two/);
      });
    });

    /** The event types of a run's history and the patches it recorded. */
    const runHistory = async (workflowId: string, runId: string) => {
      const events = (await env.client.workflow.getHandle(workflowId, runId).fetchHistory()).events ?? [];
      const patches = events
        .filter((e) => e.markerRecordedEventAttributes?.markerName === 'core_patch')
        .map((e) => defaultPayloadConverter.fromPayload<{ id: string }>(e.markerRecordedEventAttributes!.details!['patch-data']!.payloads![0]!).id);
      const types = events.map((e) => e.eventType);
      const count = (t: (typeof types)[number]) => types.filter((x) => x === t).length;
      // the messages the run took in: by update (the handoff's way while a worker accepts) or by signal
      const inbound = events.filter((e) => e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.name === 'inbound' || e.workflowExecutionSignaledEventAttributes?.signalName === 'inbound').length;
      return { types, patches, count, inbound };
    };

    it('a session that has run its turns carries the next message into its next run, without a failed workflow task', async () => {
      await withHarness({ env, db: dbh.db, providers: providers(), maxTurnsPerRun: 2 }, async (h) => {
        for (const word of ['one', 'two']) {
          await h.send(`message ${word}`);
          await h.waitForMessage((m) => m.role === 'assistant' && m.text.includes(`message ${word}`));
        }
        const first = await env.client.workflow.getHandle(h.sessionId).describe();
        // the next message right after the last reply, while the task that delivered it may
        // still be completing: the run continues as new in the task that takes the message in
        await h.send('message three');
        await h.waitForMessage((m) => m.role === 'assistant' && m.text.includes('message three'));
        const st = await env.client.workflow.getHandle(h.sessionId).query(statusQuery);
        assert.equal(st.generation, 1);
        assert.equal(st.turnsStarted, 3);
        const run = await runHistory(h.sessionId, first.runId);
        assert.ok(run.patches.includes(CONTINUE_ON_MESSAGE_PATCH), `the run recorded ${CONTINUE_ON_MESSAGE_PATCH} (${run.patches.join(', ')})`);
        assert.equal(run.types.at(-1), EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW, 'the first run continued as new');
        assert.equal(run.count(EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED), 0, 'no workflow task failed (so the worker did not replay the run)');
        assert.equal(run.inbound, 3, 'the first run took in the third message and carried it');
        assert.equal(run.count(EventType.EVENT_TYPE_TIMER_FIRED), 0, 'before its grace ended');
      });
    });

    it('a session that has run its turns and hears nothing continues as new after the grace, and the next run answers', async () => {
      await withHarness({ env, db: dbh.db, providers: providers(), maxTurnsPerRun: 2 }, async (h) => {
        for (const word of ['one', 'two']) {
          await h.send(`message ${word}`);
          await h.waitForMessage((m) => m.role === 'assistant' && m.text.includes(`message ${word}`));
        }
        const handle = env.client.workflow.getHandle(h.sessionId);
        const first = await handle.describe();
        // CONTINUE_GRACE (2 s) later the run continues as new on its own
        await waitFor(async () => ((await handle.describe()).runId !== first.runId ? true : undefined), 'the next run', 15_000);
        const run = await runHistory(h.sessionId, first.runId);
        assert.equal(run.types.at(-1), EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW);
        assert.equal(run.count(EventType.EVENT_TYPE_TIMER_FIRED), 1, "the grace's timer");
        assert.equal(run.inbound, 2);
        assert.equal(run.count(EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED), 0);
        await h.send('message three');
        await h.waitForMessage((m) => m.role === 'assistant' && m.text.includes('message three'));
        const st = await handle.query(statusQuery);
        assert.equal(st.generation, 1);
        assert.equal(st.turnsStarted, 3);
        // the third turn still saw the first two (carried as references)
        assert.match(lastUserContent(model.requests.at(-1)?.body), /message one/);
      });
    });

    /** The runs of a session, oldest first (visibility lists the closed ones once they are indexed). */
    const runsOf = async (workflowId: string, atLeast: number): Promise<string[]> =>
      waitFor(async () => {
        const runs: Array<{ runId: string; startTime: Date }> = [];
        for await (const w of env.client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) runs.push({ runId: w.runId, startTime: w.startTime });
        return runs.length >= atLeast ? runs.sort((a, b) => a.startTime.getTime() - b.startTime.getTime()).map((r) => r.runId) : undefined;
      }, `${atLeast} runs of ${workflowId}`, 15_000);

    it('messages sent the moment the previous reply is written, at every continue-as-new, are each answered once, with no failed workflow task', async () => {
      // One turn a run: every message meets a run that has run its turns, within a few ms of the
      // reply the run's last task delivered (its task may still be completing): the run takes it
      // in and carries it into the next. A signal or a continue-as-new that raced it would fail
      // a workflow task, which this counts.
      const words = ['alpha', 'bravo', 'charlie', 'delta', 'echo', 'foxtrot'];
      await withHarness({ env, db: dbh.db, providers: providers(), maxTurnsPerRun: 1 }, async (h) => {
        for (const word of words) {
          await h.send(`message ${word}`);
          // a tight poll of the transcript, to send the next message within a few ms of the reply
          const deadline = Date.now() + 20_000;
          while (!(await h.ingress.transcript(h.sessionId, { limit: 1000 })).some((m) => m.role === 'assistant' && m.text.includes(`message ${word}`))) {
            assert.ok(Date.now() < deadline, `the reply to ${word}`);
            await new Promise((r) => setTimeout(r, 2));
          }
        }
        const rows = await h.ingress.transcript(h.sessionId, { limit: 1000 });
        for (const word of words) assert.equal(rows.filter((m) => m.role === 'assistant' && m.text.includes(`message ${word}`)).length, 1, `${word} answered once`);
        // the last run continues as new once its grace has passed: query once it has
        const st = await waitFor(async () => {
          const s = await env.client.workflow.getHandle(h.sessionId).query(statusQuery);
          return s.generation === words.length ? s : undefined;
        }, 'the run after the last reply');
        assert.equal(st.turnsStarted, words.length);
        const runs = await runsOf(h.sessionId, words.length + 1);
        let inbound = 0;
        for (const runId of runs.slice(0, words.length)) {
          const run = await runHistory(h.sessionId, runId);
          assert.equal(run.types.at(-1), EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW, `run ${runId} continued as new`);
          assert.equal(run.count(EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED), 0, `no workflow task of run ${runId} failed (the worker replayed nothing)`);
          inbound += run.inbound;
        }
        assert.equal(inbound, words.length, 'each message taken in by one run');
      });
    });

    it('answers with setup help when no model provider is configured', async () => {
      await withHarness({ env, db: dbh.db, providers: {}, model: 'openai:gpt-4.1' }, async (h) => {
        await h.send('hello?');
        const reply = await h.waitForMessage((m) => m.role === 'system');
        assert.match(reply.text, /OPENAI_API_KEY/);
      });
    });

    it('marks sessions with search attributes and names each turn in the history for the Temporal UI', async () => {
      await withHarness({ env, db: dbh.db, providers: providers() }, async (h) => {
        await h.send('index me', { user: 'ada' });
        await h.waitForMessage((m) => m.role === 'assistant');
        await h.send('me too', { user: 'grace' });
        await h.waitForMessage((m) => m.role === 'assistant' && m.text.includes('me too'));
        const found = await waitFor(async () => {
          const ids: string[] = [];
          for await (const wf of env.client.workflow.list({ query: `StewardChat = "${h.chatId}" AND StewardKind = "session"` })) ids.push(wf.workflowId);
          return ids.length > 0 ? ids : undefined;
        }, 'the session to be visible by its chat', 15_000);
        assert.deepEqual(found, [h.sessionId]);
        // names never go into search attributes (they are not encrypted); API callers have no identity
        const described = await env.client.workflow.getHandle(h.sessionId).describe();
        assert.equal(described.typedSearchAttributes.get(UserAttr), undefined);
        // no workflow per turn: the turns are in the session's history, named by their summaries
        const turns: string[] = [];
        for await (const wf of env.client.workflow.list({ query: `StewardChat = "${h.chatId}" AND StewardKind = "turn"` })) turns.push(wf.workflowId);
        assert.deepEqual(turns, []);
        // each turn's model step delivered its reply (steward-deliver-in-step): no reply marker
        // after it (the step's completion is recorded just after its delivery)
        let history = await env.client.workflow.getHandle(h.sessionId).fetchHistory();
        const summariesOf = (hist: typeof history) =>
          (hist.events ?? [])
            .map((e) => e.userMetadata?.summary)
            .filter((p): p is NonNullable<typeof p> => !!p)
            .map((p) => defaultPayloadConverter.fromPayload<string>(p as never));
        const completedSteps = (hist: typeof history) => (hist.events ?? []).filter((e) => e.activityTaskCompletedEventAttributes).length;
        await waitFor(async () => {
          history = await env.client.workflow.getHandle(h.sessionId).fetchHistory();
          return completedSteps(history) >= 2 || undefined;
        }, "the second turn's model step to complete", 10_000);
        const summaries = summariesOf(history);
        for (const want of [/^Turn 1: model step 1 /, /^Turn 2: model step 1 /]) {
          assert.ok(summaries.some((x) => want.test(x)), `${want} among ${summaries.join(' | ')}`);
        }
        assert.ok(!summaries.some((x) => /: reply$/.test(x)), `no reply delivered by a local activity among ${summaries.join(' | ')}`);
        const markers = (history.events ?? []).filter((e) => e.markerRecordedEventAttributes?.markerName === 'core_patch');
        const patches = markers.map((e) => defaultPayloadConverter.fromPayload<{ id: string }>(e.markerRecordedEventAttributes!.details!['patch-data']!.payloads![0] as never).id);
        assert.ok(patches.includes(DELIVER_IN_STEP_PATCH), `the deliver-in-step patch marker among ${patches.join(', ')}`);
        assert.ok(markers.length >= 1, 'the inline-turn patch marker is recorded');
      });
    });
  });
}
