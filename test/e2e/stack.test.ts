/**
 * End to end: start the stack as the README does (`./steward start` on embedded defaults,
 * with the scripted OpenAI-compatible model server as the model), send a message through
 * the HTTP API and get the model's reply; bad requests get a 4xx and start nothing.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';
import type { Spawned } from '../helpers/process.js';
import { freeStewardPorts, startEnv, startSteward, stopSteward } from '../helpers/started-steward.js';

const TOKEN = 'e2e-token-0123456789abcdef';

describe('the started stack', () => {
  let model: ModelServer;
  let steward: Spawned;
  let api: string;
  let dataDir: string;
  let stewardEnv: NodeJS.ProcessEnv;

  before(async () => {
    model = await startModelServer();
    dataDir = mkdtempSync(path.join(tmpdir(), 'steward-e2e-'));
    stewardEnv = startEnv({ dataDir, ports: await freeStewardPorts(), token: TOKEN, model: 'openai-compatible:e2e-model', modelBaseURL: model.baseURL });
    const started = await startSteward(stewardEnv, 120_000);
    steward = started;
    api = started.api;
    await steward.waitForOutput(/Temporal UI:\s+http:\/\/127\.0\.0\.1:\d+\/codec\/login\//);
  });

  after(async () => {
    await stopSteward(steward);
    await model?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const post = (chat: string, body: string, headers: Record<string, string> = {}) =>
    fetch(`${api}/api/v1/chats/${chat}/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}`, ...headers },
      body,
    });
  const transcript = async (chat: string) => {
    const r = await fetch(`${api}/api/v1/chats/${chat}/messages`, { headers: { authorization: `Bearer ${TOKEN}` } });
    assert.equal(r.status, 200);
    return ((await r.json()) as { messages: Array<{ role: string; text: string; at: string }> }).messages;
  };

  it('is healthy once the worker polls and Temporal answers', async () => {
    const r = await fetch(`${api}/healthz`);
    assert.equal(r.status, 200);
    const body = (await r.json()) as { ok: boolean };
    assert.equal(body.ok, true);
  });

  it('serves the Temporal Web UI at <api>/ui, opened signed in by the link it prints', async () => {
    const link = /Temporal UI:\s+(http:\/\/\S+)/.exec(steward.output())?.[1] ?? '';
    assert.ok(link.startsWith(`${api}/codec/login/`), link);
    const signIn = await fetch(link, { redirect: 'manual' });
    assert.equal(signIn.status, 303);
    assert.equal(signIn.headers.get('location'), '/ui/');
    const cookie = (signIn.headers.get('set-cookie') ?? '').split(';')[0]!;
    const r = await fetch(`${api}/ui/`, { headers: { cookie, accept: 'text/html' } });
    assert.equal(r.status, 200);
    assert.match(await r.text(), /<html/i);
    // without the sign-in: the sign-in form
    assert.equal((await fetch(`${api}/ui/`, { headers: { accept: 'text/html' }, redirect: 'manual' })).status, 303);
  });

  it('prints where everything is', () => {
    const out = steward.output();
    assert.match(out, /Data dir:\s+\S*steward-e2e-/);
    assert.match(out, /Model:\s+openai-compatible:e2e-model/);
    assert.match(out, /Database:\s+file:/);
  });

  it('takes a message through the HTTP API and records the model reply', async () => {
    model.enqueue({ chunks: ['Hello ', 'from ', 'end to end.'] });
    const r = await post('e2e-chat', JSON.stringify({ text: 'hello steward', user: 'alice' }));
    assert.equal(r.status, 202);
    const body = (await r.json()) as { workflowId: string };
    assert.equal(body.workflowId, 'session:http:default:e2e-chat');
    let messages: Array<{ role: string; text: string }> = [];
    for (let i = 0; i < 200; i++) {
      messages = await transcript('e2e-chat');
      if (messages.some((m) => m.role === 'assistant')) break;
      await sleep(100);
    }
    assert.deepEqual(
      messages.map((m) => [m.role, m.text]),
      [
        ['user', 'hello steward'],
        ['assistant', 'Hello from end to end.'],
      ],
    );
    const status = await fetch(`${api}/api/v1/chats/e2e-chat/status`, { headers: { authorization: `Bearer ${TOKEN}` } });
    assert.equal(status.status, 200);
    const s = (await status.json()) as { exists: boolean; turns: number };
    assert.equal(s.exists, true);
    assert.equal(s.turns, 1);
  });

  it('rejects malformed, oversized and unauthenticated requests and starts nothing', async () => {
    const requests = model.requests.length;
    const malformed = await post('bad-chat', '{"text": "unterminated');
    assert.equal(malformed.status, 400);
    assert.match(((await malformed.json()) as { error: string }).error, /JSON/i);
    const oversized = await post('bad-chat', JSON.stringify({ text: 'x'.repeat(200_000) }));
    assert.equal(oversized.status, 413);
    const tooLong = await post('bad-chat', JSON.stringify({ text: 'x'.repeat(40_000) }));
    assert.ok(tooLong.status === 400 || tooLong.status === 422, `status ${tooLong.status}`);
    const empty = await post('bad-chat', JSON.stringify({ text: '' }));
    assert.ok(empty.status === 400 || empty.status === 422);
    const noToken = await fetch(`${api}/api/v1/chats/bad-chat/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ text: 'hi' }),
    });
    assert.equal(noToken.status, 401);
    const wrongToken = await post('bad-chat', JSON.stringify({ text: 'hi' }), { authorization: 'Bearer nope' });
    assert.equal(wrongToken.status, 401);
    const badChat = await post('bad%20chat', JSON.stringify({ text: 'hi' }));
    assert.ok(badChat.status === 400 || badChat.status === 422);

    assert.deepEqual(await transcript('bad-chat'), []);
    const st = (await (await fetch(`${api}/api/v1/chats/bad-chat/status`, { headers: { authorization: `Bearer ${TOKEN}` } })).json()) as { exists: boolean };
    assert.equal(st.exists, false, 'no session workflow was started');
    assert.equal(model.requests.length, requests);
  });

  it('serves an OpenAPI description generated from the schemas', async () => {
    const r = await fetch(`${api}/api/openapi.json`);
    assert.equal(r.status, 200);
    const doc = (await r.json()) as { paths: Record<string, unknown> };
    assert.ok(doc.paths['/api/v1/chats/{chatId}/messages']);
  });

  it('shuts down cleanly on Ctrl-C', async () => {
    steward.kill('SIGINT');
    const { code } = await steward.exited;
    assert.equal(code, 0);
    assert.match(steward.output(), /Steward stopped\./);
  });

  it('keeps sessions and transcripts across a restart on the same data directory', async () => {
    steward = await startSteward(stewardEnv, 120_000);
    await steward.waitForOutput(/Steward is running/, 120_000);
    const before = await transcript('e2e-chat');
    assert.equal(before.length, 2);
    const st = (await (await fetch(`${api}/api/v1/chats/e2e-chat/status`, { headers: { authorization: `Bearer ${TOKEN}` } })).json()) as { exists: boolean; turns: number };
    assert.equal(st.exists, true, 'the session workflow survived the restart');
    assert.equal(st.turns, 1);
    model.enqueue({ text: 'still here' });
    assert.equal((await post('e2e-chat', JSON.stringify({ text: 'are you still there?' }))).status, 202);
    let messages: Array<{ role: string; text: string }> = [];
    for (let i = 0; i < 200; i++) {
      messages = await transcript('e2e-chat');
      if (messages.filter((m) => m.role === 'assistant').length === 2) break;
      await sleep(100);
    }
    assert.equal(messages.at(-1)?.text, 'still here');
    const history = model.requests.at(-1)?.body as { messages: Array<{ content: unknown }> };
    assert.match(JSON.stringify(history.messages), /hello steward/, 'the new turn still sees the earlier one');
  });
});
