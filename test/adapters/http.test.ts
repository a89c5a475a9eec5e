/**
 * The HTTP layer through a real HTTP server with a recording Ingress: status codes, that
 * rejected requests never reach ingress, idempotency, response shapes and the OpenAPI
 * document. (The real ingress behind it is covered by the end-to-end tests.)
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createHttpApp, startHttpServer } from '../../adapters/http/app.js';
import type { Ingress, SessionStatusView } from '../../services/chat/intake.js';
import { ObjectiveInputError, type ObjectiveService } from '../../services/objectives.js';
import type { InboundMessage } from '../../common/schemas.js';

const TOKEN = 'http-test-token-0123456789';

const unused: Pick<Ingress, 'handleAction' | 'decidePairing' | 'decideApproval'> = {
  handleAction: async () => {
    throw new Error('unused');
  },
  decidePairing: async () => {
    throw new Error('unused');
  },
  decideApproval: async () => {
    throw new Error('unused');
  },
};

function recordingIngress() {
  const calls: InboundMessage[] = [];
  const ingress: Ingress = {
    async handle(msg) {
      calls.push(msg);
      return { workflowId: `session:http:${msg.account}:${msg.chatId}`, kind: msg.text.startsWith('/') ? 'command' : 'message', duplicate: false, ...(msg.text === '/help' ? { reply: 'Commands: ...' } : {}) };
    },
    async transcript(sessionId, opts) {
      return [
        { seq: 1, role: 'user', text: `hello ${sessionId}`, at: '2026-11-22T00:00:00.000Z', user: 'u' },
        { seq: 2, role: 'assistant', text: `after=${opts?.afterSeq ?? '-'} limit=${opts?.limit ?? '-'}`, at: '2026-11-22T00:00:01.000Z' },
      ];
    },
    async status(sessionId): Promise<SessionStatusView> {
      return { workflowId: sessionId, exists: true, running: null, queueLength: 0, model: 'openai:gpt-4.1', think: 'off', tokens: { input: 1, output: 2, total: 3 }, turns: 1 };
    },
    ...unused,
  };
  return { ingress, calls };
}

describe('HTTP API', () => {
  const rec = recordingIngress();
  let healthy = true;
  let server: { url: string; close(): Promise<void> };
  before(async () => {
    const app = createHttpApp({ ingress: rec.ingress, apiToken: TOKEN, health: async () => ({ ok: healthy, checks: { worker: healthy ? 'RUNNING' : 'STOPPED' } }) });
    server = await startHttpServer(app, { host: '127.0.0.1', port: 0 });
  });
  after(async () => {
    await server.close();
  });

  const post = (path: string, body: string, headers: Record<string, string> = {}) =>
    fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}`, ...headers }, body });

  it('accepts a message and passes a normalised inbound message to ingress', async () => {
    const r = await post('/api/v1/chats/room-1/messages', JSON.stringify({ text: 'hi', user: 'alice' }), { 'idempotency-key': 'abc-1' });
    assert.equal(r.status, 202);
    assert.deepEqual(await r.json(), { workflowId: 'session:http:default:room-1', kind: 'message', duplicate: false });
    const call = rec.calls.at(-1);
    assert.equal(call?.id, 'abc-1');
    assert.equal(call?.platform, 'http');
    assert.equal(call?.chatId, 'room-1');
    assert.equal(call?.user, 'alice');
    assert.ok(call && !Number.isNaN(Date.parse(call.at)));
    const c = await post('/api/v1/chats/room-1/messages', JSON.stringify({ text: '/help' }));
    assert.deepEqual(await c.json(), { workflowId: 'session:http:default:room-1', kind: 'command', duplicate: false, reply: 'Commands: ...' });
    assert.equal(rec.calls.at(-1)?.user, 'api');
    assert.notEqual(rec.calls.at(-1)?.id, 'abc-1');
  });

  it('rejects bad requests without calling ingress', async () => {
    const before = rec.calls.length;
    const cases: Array<[Promise<Response>, number, RegExp]> = [
      [post('/api/v1/chats/room/messages', '{"text": '), 400, /malformed JSON/],
      [post('/api/v1/chats/room/messages', JSON.stringify({ text: '' })), 400, /text: text must not be empty/],
      [post('/api/v1/chats/room/messages', JSON.stringify({ text: 'x'.repeat(32_001) })), 400, /longer than 32000/],
      [post('/api/v1/chats/room/messages', JSON.stringify({ text: 'hi', extra: 1 })), 400, /invalid request/],
      [post('/api/v1/chats/room/messages', JSON.stringify({ txt: 'hi' })), 400, /text/],
      [post('/api/v1/chats/bad%20room/messages', JSON.stringify({ text: 'hi' })), 400, /chatId/],
      [post('/api/v1/chats/room/messages', 'text=hi', { 'content-type': 'application/x-www-form-urlencoded' }), 415, /application\/json/],
      [post('/api/v1/chats/room/messages', JSON.stringify({ text: 'x'.repeat(140_000) })), 413, /larger than/],
      [post('/api/v1/chats/room/messages', JSON.stringify({ text: 'hi' }), { authorization: '' }), 401, /bearer token/],
      [post('/api/v1/chats/room/messages', JSON.stringify({ text: 'hi' }), { authorization: `Bearer ${TOKEN}x` }), 401, /bearer token/],
      [fetch(`${server.url}/api/v1/chats/room/messages`), 401, /bearer token/],
      [fetch(`${server.url}/api/v1/nope`, { headers: { authorization: `Bearer ${TOKEN}` } }), 404, /no route/],
    ];
    for (const [pending, status, re] of cases) {
      const r = await pending;
      const body = (await r.json()) as { error: string };
      assert.equal(r.status, status, body.error);
      assert.match(body.error, re);
    }
    assert.equal(rec.calls.length, before);
  });

  it('serves the transcript and status', async () => {
    const auth = { authorization: `Bearer ${TOKEN}` };
    const t = await fetch(`${server.url}/api/v1/chats/room-2/messages?after=5&limit=10`, { headers: auth });
    assert.equal(t.status, 200);
    const tb = (await t.json()) as { messages: Array<{ role: string; text: string; at: string }> };
    assert.equal(tb.messages[0]?.text, 'hello session:http:default:room-2');
    assert.equal(tb.messages[1]?.text, 'after=5 limit=10');
    const bad = await fetch(`${server.url}/api/v1/chats/room-2/messages?limit=0`, { headers: auth });
    assert.equal(bad.status, 400);
    const s = await fetch(`${server.url}/api/v1/chats/room-2/status`, { headers: auth });
    assert.equal(s.status, 200);
    assert.equal(((await s.json()) as SessionStatusView).workflowId, 'session:http:default:room-2');
  });

  it('reports health', async () => {
    healthy = true;
    assert.equal((await fetch(`${server.url}/healthz`)).status, 200);
    healthy = false;
    const r = await fetch(`${server.url}/healthz`);
    assert.equal(r.status, 503);
    assert.deepEqual(await r.json(), { ok: false, checks: { worker: 'STOPPED' } });
    healthy = true;
  });

  it('publishes an OpenAPI document generated from the request schemas', async () => {
    const r = await fetch(`${server.url}/api/openapi.json`);
    assert.equal(r.status, 200);
    const doc = (await r.json()) as {
      openapi: string;
      paths: Record<string, Record<string, { security?: unknown[] }>>;
      components: { schemas: Record<string, { properties?: Record<string, { maxLength?: number; minLength?: number }> }>; securitySchemes: Record<string, unknown> };
    };
    assert.equal(doc.openapi, '3.1.0');
    for (const p of ['/api/v1/chats/{chatId}/messages', '/api/v1/chats/{chatId}/status', '/healthz']) assert.ok(doc.paths[p], p);
    assert.ok(doc.paths['/api/v1/chats/{chatId}/messages']?.post?.security);
    assert.equal(doc.components.schemas.PostMessage?.properties?.text?.maxLength, 32_000);
    assert.equal(doc.components.schemas.PostMessage?.properties?.text?.minLength, 1);
    assert.ok(doc.components.securitySchemes.bearer);
  });
});

describe('HTTP API: action routes take an empty body as no options', () => {
  const calls: Array<{ action: string; id: string; input?: unknown; overlap?: string }> = [];
  const view = (id: string) => ({ id, name: id });
  // a recording objective service (the real one is covered by test/e2e/objectives.test.ts)
  const objectives = {
    pause: async (id: string) => (calls.push({ action: 'pause', id }), view(id)),
    resume: async (id: string) => (calls.push({ action: 'resume', id }), view(id)),
    skipMissed: async (id: string) => (calls.push({ action: 'skip-missed', id }), view(id)),
    trigger: async (id: string, _by: unknown, overlap?: string) => (calls.push({ action: 'trigger', id, ...(overlap ? { overlap } : {}) }), view(id)),
    backfill: async (id: string, input: unknown) => {
      calls.push({ action: 'backfill', id, input });
      if (typeof input !== 'object' || input === null || !('start' in input)) throw new ObjectiveInputError('invalid backfill: expected {"start", "end"}');
      return view(id);
    },
  } as unknown as ObjectiveService;
  let server: { url: string; close(): Promise<void> };
  before(async () => {
    server = await startHttpServer(createHttpApp({ ingress: recordingIngress().ingress, apiToken: TOKEN, health: async () => ({ ok: true, checks: {} }), objectives }), { host: '127.0.0.1', port: 0 });
  });
  after(async () => {
    await server.close();
  });
  const post = (path: string, body: string | undefined, type: string | undefined) =>
    fetch(`${server.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, ...(type ? { 'content-type': type } : {}) }, ...(body !== undefined ? { body } : {}) });

  it('answers an action sent with Content-Type: application/json and no body (as curl users send it) like one with no body at all', async () => {
    for (const action of ['pause', 'resume', 'trigger', 'skip-missed'] as const) {
      for (const [body, type] of [[undefined, 'application/json'], ['', 'application/json'], ['  \n', 'application/json; charset=utf-8'], [undefined, undefined], ['{}', 'application/json']] as const) {
        calls.length = 0;
        const r = await post(`/api/v1/objectives/daily/${action}`, body, type);
        assert.equal(r.status, 200, `${action} with body ${JSON.stringify(body)} and type ${type}: ${await r.clone().text()}`);
        assert.deepEqual(calls, [{ action, id: 'daily' }]);
      }
    }
    // options still count, and bad ones are still refused
    calls.length = 0;
    assert.equal((await post('/api/v1/objectives/daily/trigger', '{"overlap":"allow-all"}', 'application/json')).status, 200);
    assert.deepEqual(calls, [{ action: 'trigger', id: 'daily', overlap: 'allow-all' }]);
    assert.equal((await post('/api/v1/objectives/daily/trigger', '{"overlap":"nope"}', 'application/json')).status, 400);
    const malformed = await post('/api/v1/objectives/daily/pause', '{oops', 'application/json');
    assert.equal(malformed.status, 400);
    assert.match(((await malformed.json()) as { error: string }).error, /malformed JSON/);
    assert.equal((await post('/api/v1/objectives/daily/pause', 'x', 'text/plain')).status, 415);
    // backfill needs its range: an empty body is no options, and so an invalid backfill
    calls.length = 0;
    const backfill = await post('/api/v1/objectives/daily/backfill', undefined, 'application/json');
    assert.equal(backfill.status, 400);
    assert.match(((await backfill.json()) as { error: string }).error, /invalid backfill/);
    assert.deepEqual(calls, [{ action: 'backfill', id: 'daily', input: {} }]);
  });

  it('the OpenAPI document says the action body is optional and that an empty one means no options', async () => {
    const doc = (await (await fetch(`${server.url}/api/openapi.json`)).json()) as { paths: Record<string, Record<string, { requestBody?: { required?: boolean; description?: string } }>> };
    for (const action of ['pause', 'resume', 'trigger', 'backfill', 'skip-missed']) {
      const body = doc.paths[`/api/v1/objectives/{id}/${action}`]?.post?.requestBody;
      assert.ok(body, action);
      assert.notEqual(body.required, true, `${action}: the body is optional`);
      assert.match(body.description ?? '', /An empty body \(with or without Content-Type: application\/json\) means no options/, action);
    }
  });
});
