/**
 * Forking a chat (docs/replay.md "Fork a chat") against the real stack (Temporal dev server,
 * both databases, the scripted model server): a chat with three turns, forked before turn 3
 * through the API: the new chat's transcript holds turns 1-2 and the fork's line only; its next
 * message is answered from a prompt that holds turns 1-2 and not turn 3; the original's
 * transcript and history are unchanged by the fork and it still answers with its whole context.
 * Bad input (an unknown chat or turn, a turn of another chat, a new chat id in use, a bad body)
 * is refused with nothing written or started; a retried request (the same Idempotency-Key, or
 * the same new chat id) answers the same and the `chat.forked` receipt is written once, and one
 * after a first call that stopped between its claim and the session's start starts it. The CLI
 * forks through the running API. And through `./steward start` (the wiring of the route, the
 * payload codec on): the turn's state is read from a history whose payloads are encrypted.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Connection } from '@temporalio/client';
import { createHttpApp, startHttpServer } from '../../adapters/http/app.js';
import { loadConfig } from '../../config/index.js';
import { adminCommand } from '../../platform/admin-cli.js';
import { transcriptBeforeTurn, turnStartOf, writeFork } from '../../domain/replays/fork.js';
import { createForkService, ForkError } from '../../services/replays/fork.js';
import { armFaultPoint, InjectedFault } from '../../common/fault-points.js';
import { OPERATOR } from '../../common/roles.js';
import { sessionStartOptions } from '../../services/chat/session-start.js';
import { sessionWorkflow } from '../../workflows/chat/session.js';
import { testDatabases } from '../helpers/db.js';
import { lastUserText, startModelServer, type ModelServer, type RecordedRequest } from '../helpers/model-server.js';
import type { Spawned } from '../helpers/process.js';
import { freeStewardPorts, startEnv, startSteward, stopSteward, type StewardPorts } from '../helpers/started-steward.js';
import { useStack, waitFor, withHarness, type Harness } from '../helpers/steward.js';

const TOKEN = 'fork-test-token';
const tag = () => randomBytes(3).toString('hex');

for (const database of testDatabases()) {
  describe(`fork a chat (${database.name})`, () => {
    const stack = useStack(database);

    it('forks before turn 3: the new chat has turns 1-2 and answers from them; the original is untouched; bad input starts nothing; a retry forks once', async () => {
      stack.model.setDefault((req) => ({ text: `noted: ${lastUserText(req.body).replace(/<[^>]*>/g, '').trim().slice(-40)}` }));
      await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } } }, async (h: Harness) => {
        const t = tag();
        const words = { one: `alpha-${t}`, two: `bravo-${t}`, three: `charlie-${t}`, four: `delta-${t}`, five: `echo-${t}` };
        const say = async (text: string, chatId = h.chatId) => {
          await h.send(text, { chatId });
          await h.waitForMessage((m) => m.role === 'assistant' && m.text.includes(text), { chatId });
        };
        await say(words.one);
        await say(words.two);
        await say(words.three);
        const turns = (await stack.db.receipt.findMany({ where: { kind: 'turn.start', sessionId: h.sessionId }, orderBy: { id: 'asc' } })).map((r) => (JSON.parse(r.data) as { turnId: string }).turnId);
        assert.equal(turns.length, 3);
        const other = `other-${t}`;
        await say(`foxtrot-${t}`, other);
        const otherTurn = (await stack.db.receipt.findFirstOrThrow({ where: { kind: 'turn.start', sessionId: h.sessionIdOf(other) } })).data;
        const otherTurnId = (JSON.parse(otherTurn) as { turnId: string }).turnId;

        const forks = createForkService({ client: stack.env.client, db: stack.db, taskQueue: h.taskQueue, defaultModel: 'openai-compatible:test-model', limits: { maxSteps: 4, maxTurnsPerRun: 100 }, account: h.account });
        const app = createHttpApp({ ingress: h.ingress, apiToken: TOKEN, account: h.account, health: async () => ({ ok: true, checks: {} }), forks });
        const post = async (chatId: string, body: unknown, headers: Record<string, string> = {}) => {
          const res = await app.request(`/api/v1/chats/${encodeURIComponent(chatId)}/fork`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json', ...headers }, body: typeof body === 'string' ? body : JSON.stringify(body) });
          return { status: res.status, json: (await res.json()) as Record<string, unknown> };
        };
        const original = async () => (await h.ingress.transcript(h.sessionId, { limit: 1000 })).map((m) => [m.role, m.text]);
        const historyLength = async () => (await stack.env.client.workflow.getHandle(h.sessionId).fetchHistory()).events?.length ?? 0;
        const counts = async () => ({ sessions: await stack.db.session.count(), messages: await stack.db.message.count(), forked: await stack.db.receipt.count({ where: { kind: 'chat.forked' } }) });
        const before = { transcript: await original(), history: await historyLength(), counts: await counts() };

        // refused, nothing written or started
        const refusals: Array<[string, unknown, number, RegExp]> = [
          [`nobody-${t}`, { turnId: turns[2] }, 404, /no http chat nobody-/],
          [h.chatId, { turnId: `${h.sessionId}:turn:9:deadbeef` }, 404, /no turn .* is recorded/],
          [h.chatId, { turnId: otherTurnId }, 404, /is not a turn of http chat/],
          [h.chatId, { turnId: turns[2], newChatId: other }, 409, /in use/],
          [h.chatId, { turnId: turns[2], newChatId: h.chatId }, 409, /the chat being forked/],
          [h.chatId, { newChatId: `x-${t}` }, 400, /turnId/],
          [h.chatId, { turnId: turns[2], colour: 'blue' }, 400, /colour|unrecognized/i],
          [h.chatId, { turnId: turns[2], newChatId: 'has space' }, 400, /newChatId/],
          [h.chatId, '{"turnId": ', 400, /./],
        ];
        for (const [chat, body, status, message] of refusals) {
          const r = await post(chat, body);
          assert.equal(r.status, status, `${JSON.stringify(body)}: ${JSON.stringify(r.json)}`);
          assert.match(String(r.json.error), message);
        }
        assert.deepEqual(await counts(), before.counts, 'a refused fork writes nothing');
        const refusedTarget = await stack.env.client.workflow.getHandle(h.sessionIdOf(`x-${t}`)).describe().then(
          () => true,
          () => false,
        );
        assert.equal(refusedTarget, false, 'a refused fork starts no session');

        // the fork, before turn 3, retried with the same key
        const key = `fork-${t}`;
        const first = await post(h.chatId, { turnId: turns[2] }, { 'idempotency-key': key });
        assert.equal(first.status, 201, JSON.stringify(first.json));
        const again = await post(h.chatId, { turnId: turns[2] }, { 'idempotency-key': key });
        assert.equal(again.status, 201, JSON.stringify(again.json));
        assert.deepEqual(again.json, first.json, 'a retry answers the same');
        const newChat = String(first.json.chatId);
        const newSession = String(first.json.sessionId);
        assert.equal(newSession, h.sessionIdOf(newChat));
        assert.deepEqual(first.json.forkedFrom, { sessionId: h.sessionId, turnId: turns[2] });
        assert.equal(await stack.db.receipt.count({ where: { kind: 'chat.forked', sessionId: newSession } }), 1, 'the receipt is written once');
        const receipt = await stack.db.receipt.findFirstOrThrow({ where: { kind: 'chat.forked', sessionId: newSession } });
        assert.equal(receipt.actor, 'operator');
        assert.deepEqual(JSON.parse(receipt.data).sourceSessionId, h.sessionId);

        // the new chat: turns 1-2 and the fork's line
        const forked = await h.ingress.transcript(newSession, { limit: 1000 });
        const texts = forked.map((m) => m.text).join('\n');
        assert.ok(texts.includes(words.one) && texts.includes(words.two), texts);
        assert.ok(!texts.includes(words.three), `turn 3 is not in the fork: ${texts}`);
        assert.equal(forked.filter((m) => m.role === 'user').length, 2);
        assert.equal(forked.filter((m) => m.role === 'assistant').length, 2);
        assert.equal(forked.at(-1)?.role, 'system');
        assert.match(forked.at(-1)!.text, new RegExp(`Forked from http chat ${h.chatId} just before turn ${turns[2]!.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: 4 earlier messages copied`));

        // the original: untouched by the fork
        assert.deepEqual(await original(), before.transcript, "the original's transcript is unchanged");
        assert.equal(await historyLength(), before.history, "the original's history is unchanged");

        // the fork answers from turns 1-2
        const sent = stack.model.requests.length;
        await say(words.four, newChat);
        const asked = stack.model.requests.slice(sent).find((r: RecordedRequest) => JSON.stringify(r.body).includes(words.four));
        assert.ok(asked, 'the fork asked the model');
        const prompt = JSON.stringify(asked.body);
        assert.ok(prompt.includes(words.one) && prompt.includes(words.two), "the fork's prompt holds turns 1-2");
        assert.ok(!prompt.includes(words.three), "the fork's prompt does not hold turn 3");

        // the original still answers, with its whole context
        const sent2 = stack.model.requests.length;
        await say(words.five);
        const asked2 = stack.model.requests.slice(sent2).find((r: RecordedRequest) => JSON.stringify(r.body).includes(words.five));
        assert.ok(asked2);
        const prompt2 = JSON.stringify(asked2.body);
        assert.ok(prompt2.includes(words.three) && !prompt2.includes(words.four), "the original's prompt holds its own turn 3, not the fork's message");

        // the same new chat id again: the same answer; another turn to it: refused
        const named = `named-${t}`;
        const n1 = await post(h.chatId, { turnId: turns[1], newChatId: named });
        assert.equal(n1.status, 201, JSON.stringify(n1.json));
        assert.deepEqual((await post(h.chatId, { turnId: turns[1], newChatId: named })).json, n1.json);
        assert.equal((await post(h.chatId, { turnId: turns[2], newChatId: named })).status, 409);
        assert.equal(await stack.db.receipt.count({ where: { kind: 'chat.forked', sessionId: h.sessionIdOf(named) } }), 1);
        const namedTexts = (await h.ingress.transcript(h.sessionIdOf(named))).map((m) => m.text).join('\n');
        assert.ok(namedTexts.includes(words.one) && !namedTexts.includes(words.two), namedTexts);

        // the session's start is the fork's ledger: one run per new chat, whoever races to it
        const runsOf = async (sessionId: string) => {
          const runs: string[] = [];
          for await (const w of stack.env.client.workflow.list({ query: `WorkflowId = ${JSON.stringify(sessionId)}` })) runs.push(w.runId);
          return runs;
        };
        const messagesOf = (sessionId: string) => stack.db.message.count({ where: { sessionId } });
        // three times at once with one key: one chat, one session, one claim, nothing copied twice
        const raceKey = `race-${t}`;
        const raced = await Promise.all([0, 1, 2].map(() => post(h.chatId, { turnId: turns[1] }, { 'idempotency-key': raceKey })));
        assert.deepEqual(
          raced.map((r) => r.status),
          [201, 201, 201],
          JSON.stringify(raced.map((r) => r.json)),
        );
        assert.deepEqual(raced[1]!.json, raced[0]!.json);
        assert.deepEqual(raced[2]!.json, raced[0]!.json);
        const racedSession = String(raced[0]!.json.sessionId);
        assert.equal(await stack.db.receipt.count({ where: { kind: 'chat.forked', sessionId: racedSession } }), 1);
        assert.equal(await messagesOf(racedSession), 3, 'turn 1 and the fork line, once');
        assert.equal((await waitFor(async () => ((await runsOf(racedSession)).length > 0 ? runsOf(racedSession) : undefined), 'the raced session listed')).length, 1, 'one session run');
        // two forks of different turns to one new chat id at once: one wins, the other is refused and writes nothing
        const contested = `contested-${t}`;
        const both = await Promise.all([post(h.chatId, { turnId: turns[1], newChatId: contested }), post(h.chatId, { turnId: turns[2], newChatId: contested })]);
        assert.deepEqual(both.map((r) => r.status).sort(), [201, 409], JSON.stringify(both.map((r) => r.json)));
        const winner = both.find((r) => r.status === 201)!;
        assert.match(String(both.find((r) => r.status === 409)!.json.error), /in use/);
        assert.equal(await stack.db.receipt.count({ where: { kind: 'chat.forked', sessionId: h.sessionIdOf(contested) } }), 1);
        assert.equal(await messagesOf(h.sessionIdOf(contested)), Number(winner.json.copied) + 1, "the winner's transcript only");
        // a session another start put under the chat id first (a message's, before it wrote anything): refused, nothing written
        const taken = `taken-${t}`;
        const takenStart = sessionStartOptions({ taskQueue: h.taskQueue, defaultModel: 'openai-compatible:test-model', limits: { maxSteps: 4, maxTurnsPerRun: 100 } }, { platform: 'http', account: h.account, chatId: taken });
        await stack.env.client.workflow.start(sessionWorkflow, takenStart);
        const refusedTaken = await post(h.chatId, { turnId: turns[1], newChatId: taken });
        assert.equal(refusedTaken.status, 409, JSON.stringify(refusedTaken.json));
        assert.match(String(refusedTaken.json.error), /in use/);
        assert.equal(await stack.db.receipt.count({ where: { kind: 'chat.forked', sessionId: h.sessionIdOf(taken) } }), 0);
        assert.equal(await messagesOf(h.sessionIdOf(taken)), 0);
        // a call that stopped after the session's start, before its claim and transcript: the retry (its key) finishes it
        const crashKey = `crash-${t}`;
        const disarm = armFaultPoint('fork.started');
        try {
          await assert.rejects(forks.fork(OPERATOR, { chatId: h.chatId, turnId: turns[1] }, { key: `api:${OPERATOR.id}:${crashKey}` }), (err: unknown) => err instanceof InjectedFault);
        } finally {
          disarm();
        }
        const retried = await post(h.chatId, { turnId: turns[1] }, { 'idempotency-key': crashKey });
        assert.equal(retried.status, 201, JSON.stringify(retried.json));
        const retriedSession = String(retried.json.sessionId);
        assert.equal(await stack.db.receipt.count({ where: { kind: 'chat.forked', sessionId: retriedSession } }), 1);
        assert.equal(await messagesOf(retriedSession), 3);
        assert.equal((await runsOf(retriedSession)).length, 1, 'the first call’s session, not a second');
        assert.ok(!(await forks.fork(OPERATOR, { chatId: h.chatId, turnId: turns[2], newChatId: String(retried.json.chatId) }).then(() => true, (err: unknown) => !(err instanceof ForkError))), 'another turn to that chat is refused');

        // a first call that stopped after its claim (the transcript written, no session started): the retry starts it
        const stopped = `stopped-${t}`;
        const turn2 = (await turnStartOf(stack.db, turns[1]!))!;
        const turn2Message = await stack.db.message.findFirstOrThrow({ where: { sessionId: h.sessionId, role: 'user', text: { contains: words.two } } });
        const partial = await transcriptBeforeTurn(stack.db, h.sessionId, turn2, [turn2Message.key]);
        const claimed = await writeFork(stack.db, {
          actor: 'operator',
          source: { sessionId: h.sessionId, platform: 'http', account: h.account, chatId: h.chatId, turnId: turns[1]! },
          target: { sessionId: h.sessionIdOf(stopped), platform: 'http', account: h.account, chatId: stopped },
          entries: partial.entries,
          truncated: false,
        });
        assert.deepEqual(claimed, { claimed: true, copied: 2 });
        const resumed = await post(h.chatId, { turnId: turns[1], newChatId: stopped });
        assert.equal(resumed.status, 201, JSON.stringify(resumed.json));
        assert.equal(resumed.json.copied, 2);
        assert.equal(await stack.db.receipt.count({ where: { kind: 'chat.forked', sessionId: h.sessionIdOf(stopped) } }), 1);
        assert.equal((await h.ingress.transcript(h.sessionIdOf(stopped))).length, 3, 'nothing copied twice');
        const sent3 = stack.model.requests.length;
        await say(`kilo-${t}`, stopped);
        const prompt3 = JSON.stringify(stack.model.requests.slice(sent3).find((r: RecordedRequest) => JSON.stringify(r.body).includes(`kilo-${t}`))?.body);
        assert.ok(prompt3.includes(words.one) && !prompt3.includes(words.two), "the resumed fork's prompt holds turn 1 only");

        // the CLI, through the running API
        const server = await startHttpServer(app, { host: '127.0.0.1', port: 0 });
        try {
          const out: string[] = [];
          const err: string[] = [];
          const io = { config: () => loadConfig({}, tmpdir()), out: (x: string) => void out.push(x), err: (x: string) => void err.push(x), api: { url: server.url, token: TOKEN } };
          assert.equal(await adminCommand('replay', ['fork', '--chat', h.chatId, '--turn', turns[1]!, '--new-chat', `cli-${t}`], io), 0, err.join(''));
          assert.match(out.join(''), new RegExp(`into chat cli-${t} \\(2 messages copied`));
          assert.equal(await adminCommand('replay', ['fork', '--chat', h.chatId, '--turn', turns[1]!, '--new-chat', other], io), 1, 'in use');
          assert.match(err.join(''), /in use/);
          assert.equal(await adminCommand('replay', ['fork', '--chat', 'bad chat', '--turn', turns[1]!], io), 2);
          await waitFor(async () => ((await stack.env.client.workflow.getHandle(h.sessionIdOf(`cli-${t}`)).describe()).status.name === 'RUNNING' ? true : undefined), 'the CLI fork runs');
        } finally {
          await server.close();
        }
      });
    });
  });
}

describe('fork a chat in the started stack (payload codec on)', () => {
  let model: ModelServer;
  let steward: Spawned & { api: string };
  let dataDir: string;
  let ports: StewardPorts;
  const token = 'fork-e2e-token-0123456789abcdef';

  before(async () => {
    model = await startModelServer();
    model.setDefault((req) => ({ text: `noted: ${lastUserText(req.body).replace(/<[^>]*>/g, '').trim().slice(-40)}` }));
    dataDir = mkdtempSync(path.join(tmpdir(), 'steward-fork-'));
    ports = await freeStewardPorts();
    steward = await startSteward(startEnv({ dataDir, ports, token, model: 'openai-compatible:e2e-model', modelBaseURL: model.baseURL }), 120_000);
    await steward.waitForOutput(/Steward is running/, 120_000);
  });
  after(async () => {
    await stopSteward(steward);
    await model?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('forks before turn 2 through the API: the state comes from an encrypted history, the fork answers from turn 1 only', async () => {
    const api = steward.api;
    const auth = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
    const transcript = async (chat: string) =>
      ((await (await fetch(`${api}/api/v1/chats/${chat}/messages`, { headers: auth })).json()) as { messages: Array<{ role: string; text: string }> }).messages;
    const say = async (chat: string, text: string) => {
      assert.equal((await fetch(`${api}/api/v1/chats/${chat}/messages`, { method: 'POST', headers: auth, body: JSON.stringify({ text }) })).status, 202);
      for (let i = 0; i < 300; i++) {
        if ((await transcript(chat)).some((m) => m.role === 'assistant' && m.text.includes(text))) return;
        await sleep(100);
      }
      assert.fail(`no reply to ${text} in ${chat}: ${steward.output().slice(-2000)}`);
    };
    const t = tag();
    const chat = `codec-${t}`;
    await say(chat, `golf-${t}`);
    await say(chat, `hotel-${t}`);

    // the turn's id from the session's first run; its model step's input is encrypted in history
    const sessionId = `session:http:default:${chat}`;
    const connection = await Connection.connect({ address: `127.0.0.1:${ports.temporal}` });
    let turnId: string;
    try {
      const described = await connection.workflowService.describeWorkflowExecution({ namespace: 'default', execution: { workflowId: sessionId } });
      const runId = described.workflowExecutionInfo?.firstRunId || described.workflowExecutionInfo?.execution?.runId || '';
      turnId = `${sessionId}:turn:2:${runId.slice(0, 8)}`;
      const h = await connection.workflowService.getWorkflowExecutionHistory({ namespace: 'default', execution: { workflowId: sessionId }, maximumPageSize: 1000 });
      const steps = (h.history?.events ?? []).filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'modelStep');
      assert.ok(steps.length >= 2);
      for (const e of steps) {
        const p = e.activityTaskScheduledEventAttributes?.input?.payloads?.[0];
        assert.equal(Buffer.from(p?.metadata?.encoding ?? new Uint8Array()).toString(), 'binary/encrypted');
      }
    } finally {
      await connection.close();
    }

    const doc = (await (await fetch(`${api}/api/openapi.json`)).json()) as { paths: Record<string, unknown> };
    assert.ok(doc.paths['/api/v1/chats/{chatId}/fork'], 'the route is in the OpenAPI document');
    const r = await fetch(`${api}/api/v1/chats/${chat}/fork`, { method: 'POST', headers: auth, body: JSON.stringify({ turnId, newChatId: `${chat}-b` }) });
    const body = (await r.json()) as { chatId: string; copied: number };
    assert.equal(r.status, 201, JSON.stringify(body));
    assert.equal(body.copied, 2);
    const forked = (await transcript(`${chat}-b`)).map((m) => m.text).join('\n');
    assert.ok(forked.includes(`golf-${t}`) && !forked.includes(`hotel-${t}`), forked);

    const sent = model.requests.length;
    await say(`${chat}-b`, `india-${t}`);
    const prompt = JSON.stringify(model.requests.slice(sent).find((q) => JSON.stringify(q.body).includes(`india-${t}`))?.body);
    assert.ok(prompt.includes(`golf-${t}`) && !prompt.includes(`hotel-${t}`), prompt.slice(0, 2000));
  });
});
