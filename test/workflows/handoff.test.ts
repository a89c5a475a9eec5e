/**
 * The handoff of a chat message (services/handoff.ts) against the real Temporal dev server and
 * the session workflow on a real worker:
 *  - with a worker polling, a message goes in by update-with-start: the update (its id the
 *    message's key) is accepted in the session's history, no signal is sent, the handoff is
 *    marked `update`, and the message is answered once;
 *  - the same key handed over again gets the first update's outcome from the server (the update
 *    id is the key): nothing is written to the history, and no second reply comes;
 *  - with no worker polling, the handoff waits `acceptMs` for the update, then signals (durable
 *    at once) and is marked `signal`; when a worker comes, the message is answered once, and the
 *    update left waiting on the server reaches the session, finds the key taken and is refused
 *    (no accepted update in the history);
 *  - `acceptMs: 0` signals at once; the same key handed over again by update is refused by the
 *    update's validator (the key was taken by the signal): marked `duplicate`, nothing written.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { defaultPayloadConverter } from '@temporalio/common';
import { sessionWorkflowId, type ConversationKey } from '../../common/ids.js';
import { handOverMessage, handedKey } from '../../services/handoff.js';
import { sessionStartOptions } from '../../services/chat/session-start.js';
import { recordInbound } from '../../domain/transcript.js';
import { ensureSession } from '../../domain/store/sessions.js';
import { testDatabases } from '../helpers/db.js';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';
import { waitFor, withHarness } from '../helpers/steward.js';
import { createTestEnvironment } from '../helpers/temporal.js';

const database = testDatabases()[0]!;

describe('the handoff of a chat message', () => {
  let env: TestWorkflowEnvironment;
  let model: ModelServer;
  let dbh: Awaited<ReturnType<typeof database.create>>;

  before(async () => {
    env = await createTestEnvironment();
    model = await startModelServer();
    model.setDefault(() => ({ text: 'A reply.' }));
    dbh = await database.create();
  });
  after(async () => {
    await model?.close();
    await dbh?.cleanup();
    await env?.teardown();
  });

  const providers = () => ({ openaiCompatible: { baseURL: model.baseURL } });
  const limits = { maxSteps: 4, maxTurnsPerRun: 100, budgetWaitMs: 0 };

  /** The session's inbound messages in its history: accepted updates (with their ids) and signals. */
  async function inboundEvents(sessionId: string) {
    const events = (await env.client.workflow.getHandle(sessionId).fetchHistory()).events ?? [];
    const updates = events.flatMap((e) => {
      const req = e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest;
      return req?.input?.name === 'inbound' ? [req.meta?.updateId ?? ''] : [];
    });
    const signals = events.flatMap((e) => {
      const a = e.workflowExecutionSignaledEventAttributes;
      return a?.signalName === 'inbound' ? [defaultPayloadConverter.fromPayload<{ key: string }>(a.input!.payloads![0]!).key] : [];
    });
    return { updates, signals, count: events.length };
  }

  /** The session's history once it stops growing (the turn's last tasks done). */
  async function settled(sessionId: string) {
    let last = await inboundEvents(sessionId);
    for (;;) {
      await sleep(400);
      const now = await inboundEvents(sessionId);
      if (now.count === last.count) return now;
      last = now;
    }
  }

  const handedWay = async (key: string) => {
    const r = await dbh.db.receipt.findFirst({ where: { key: handedKey(key) } });
    return r ? (JSON.parse(r.data) as { way?: string }).way : undefined;
  };
  const replies = async (sessionId: string) => dbh.db.message.count({ where: { sessionId, role: 'assistant' } });

  it('with a worker: the message goes in by update, answered once; handed over again, the server answers with the first update and nothing is written', async () => {
    await withHarness({ env, db: dbh.db, providers: providers() }, async (h) => {
      const conversation: ConversationKey = { platform: 'http', account: h.account, chatId: h.chatId };
      const first = await h.send('hello by update', { id: 'm1' });
      assert.equal(first.kind, 'message');
      await h.waitForMessage((m) => m.role === 'assistant');
      const handed = await dbh.db.receipt.findMany({ where: { sessionId: h.sessionId, kind: 'ingress.handed' } });
      assert.equal(handed.length, 1);
      const key = (JSON.parse(handed[0]!.data) as { messageKey: string }).messageKey;
      assert.equal(await handedWay(key), 'update');
      const before = await settled(h.sessionId);
      assert.deepEqual(before.updates, [key], 'one accepted update, its id the message key');
      assert.deepEqual(before.signals, [], 'no signal');

      // the same key again (a redelivery whose mark was lost): the server answers with the first
      // update of that id on the run (its outcome), nothing new
      const again = await handOverMessage(env.client, dbh.db, { ref: { key, user: 'tester', at: new Date().toISOString() }, start: sessionStartOptions({ taskQueue: h.taskQueue, defaultModel: 'openai-compatible:test-model', limits }, conversation) });
      assert.equal(again.way, 'update');
      await sleep(500);
      const afterAgain = await inboundEvents(h.sessionId);
      assert.deepEqual(afterAgain.updates, [key]);
      assert.equal(afterAgain.count, before.count, 'nothing written to the history by the refused update');
      assert.equal(await replies(h.sessionId), 1, 'answered once');
    });
  });

  it('with no worker polling: the handoff waits acceptMs, then signals; a worker that comes answers once, and the update left waiting is refused', async () => {
    const taskQueue = `handoff-${randomUUID()}`;
    const account = `acct-${randomUUID().slice(0, 8)}`;
    const conversation: ConversationKey = { platform: 'http', account, chatId: 'no-worker' };
    const sessionId = sessionWorkflowId(conversation);
    const key = `${sessionId}:k1`;
    await ensureSession(dbh.db, sessionId, conversation);
    await recordInbound(dbh.db, { key, sessionId, text: 'hello while no worker polls', user: 'tester', identityId: null, command: false });
    const started = Date.now();
    const r = await handOverMessage(env.client, dbh.db, { ref: { key, user: 'tester', at: new Date().toISOString() }, start: sessionStartOptions({ taskQueue, defaultModel: 'openai-compatible:test-model', limits }, conversation), acceptMs: 600 });
    const took = Date.now() - started;
    assert.equal(r.way, 'signal');
    assert.ok(took >= 550 && took < 10_000, `waited about acceptMs, then signalled (${took} ms)`);
    assert.equal(await handedWay(key), 'signal');
    assert.deepEqual((await inboundEvents(sessionId)).signals, [key], 'the signal is in the history before any worker came');

    await withHarness({ env, db: dbh.db, providers: providers(), taskQueue }, async () => {
      await waitFor(async () => ((await replies(sessionId)) >= 1 ? true : undefined), 'the reply');
      await sleep(1_000);
      const events = await inboundEvents(sessionId);
      assert.deepEqual(events.signals, [key]);
      assert.deepEqual(events.updates, [], 'the update left waiting was refused, not accepted');
      assert.equal(await replies(sessionId), 1, 'answered once');
    });
  });

  it('acceptMs 0: the message is signalled at once; handed over again by update, the validator refuses the key taken', async () => {
    await withHarness({ env, db: dbh.db, providers: providers() }, async (h) => {
      const conversation: ConversationKey = { platform: 'http', account: h.account, chatId: h.chatId };
      const key = `${h.sessionId}:k0`;
      await recordInbound(dbh.db, { key, sessionId: h.sessionId, text: 'hello by signal', user: 'tester', identityId: null, command: false });
      const r = await handOverMessage(env.client, dbh.db, { ref: { key, user: 'tester', at: new Date().toISOString() }, start: sessionStartOptions({ taskQueue: h.taskQueue, defaultModel: 'openai-compatible:test-model', limits }, conversation), acceptMs: 0 });
      assert.equal(r.way, 'signal');
      await waitFor(async () => ((await replies(h.sessionId)) >= 1 ? true : undefined), 'the reply');
      const events = await settled(h.sessionId);
      assert.deepEqual(events.signals, [key]);
      assert.deepEqual(events.updates, []);
      // handed over again by update: the validator finds the key taken (by the signal) and refuses it
      const again = await handOverMessage(env.client, dbh.db, { ref: { key, user: 'tester', at: new Date().toISOString() }, start: sessionStartOptions({ taskQueue: h.taskQueue, defaultModel: 'openai-compatible:test-model', limits }, conversation) });
      assert.equal(again.way, 'duplicate');
      await sleep(500);
      const afterAgain = await inboundEvents(h.sessionId);
      assert.deepEqual(afterAgain.updates, [], 'the refused update is not in the history');
      assert.equal(afterAgain.count, events.count, 'nothing written');
      assert.equal(await replies(h.sessionId), 1, 'answered once');
    });
  });
});
