/**
 * End to end: the started stack (`./steward start`, embedded Temporal, the scripted model
 * server) encrypts every payload it stores. A message carrying a planted secret goes through
 * the HTTP API and the model saves the secret as a note (so it is in the payloads of the turn's
 * tool call, which runs inside the session workflow: the turn is no workflow of its own); the
 * raw histories read from the server without the codec hold neither the secret nor the reply
 * anywhere, while the session's history decoded shows the turn's activities and holds the
 * secret. The codec endpoint decodes
 * them for the operator (bearer token, the browser sign-in cookie from the token form or a
 * one-time link, `temporal workflow show --codec-endpoint`), and CORS admits the embedded UI's
 * own origins only. The embedded UI, served through the API at `/ui`, is pointed at the
 * same origin's `/codec` (the browser check is test/e2e/temporal-ui.test.ts).
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { Connection } from '@temporalio/client';
import { loadConfig } from '../../config/index.js';
import { adminCommand } from '../../platform/admin-cli.js';
import { findTemporalCli } from '../../platform/temporal-server.js';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';
import type { Spawned } from '../helpers/process.js';
import { freeStewardPorts, startEnv, startSteward, stopSteward } from '../helpers/started-steward.js';

const run = promisify(execFile);
const TOKEN = 'codec-e2e-token-0123456789abcdef';
const SECRET = `sk-live-${randomBytes(12).toString('hex')}`;
const REPLY = `Noted, the reply marker is ${randomBytes(8).toString('hex')}.`;
const CHAT = `codec-${randomBytes(4).toString('hex')}`;

interface JsonPayload {
  metadata?: Record<string, string>;
  data?: string;
}

/** Every payload-shaped object (`{metadata, data}`) in a JSON document, with the path to it. */
function payloadsIn(doc: unknown, at = ''): Array<{ path: string; payload: JsonPayload }> {
  const out: Array<{ path: string; payload: JsonPayload }> = [];
  const walk = (v: unknown, p: string) => {
    if (Array.isArray(v)) v.forEach((x, i) => walk(x, `${p}[${i}]`));
    else if (v && typeof v === 'object') {
      const o = v as Record<string, unknown>;
      if (o.metadata && typeof o.metadata === 'object' && ('data' in o || 'encoding' in (o.metadata as object))) out.push({ path: p, payload: o as JsonPayload });
      else for (const [k, x] of Object.entries(o)) walk(x, `${p}.${k}`);
    }
  };
  walk(doc, at);
  return out;
}

const b64 = (s: string | undefined) => Buffer.from(s ?? '', 'base64').toString('utf8');
const encodingOf = (p: JsonPayload) => b64(p.metadata?.encoding);

describe('the payload codec on the started stack', () => {
  let model: ModelServer;
  let steward: Spawned;
  let api: string;
  let dataDir: string;
  let temporalAddress: string;
  let uiPort: number;
  let cli: string;
  const histories = new Map<string, string>(); // workflow id -> raw `workflow show --output json`

  before(async () => {
    cli = findTemporalCli() ?? '';
    assert.ok(cli, 'the temporal CLI is installed');
    model = await startModelServer();
    dataDir = mkdtempSync(path.join(tmpdir(), 'steward-codec-e2e-'));
    const ports = await freeStewardPorts();
    uiPort = ports.ui;
    temporalAddress = `127.0.0.1:${ports.temporal}`;
    const started = await startSteward(
      startEnv({
        dataDir,
        ports,
        token: TOKEN,
        model: 'openai-compatible:codec-model',
        modelBaseURL: model.baseURL,
        // on by default, with a key generated into the data directory: nothing codec-related set
        extra: { STEWARD_CODEC: '', STEWARD_CODEC_KEYS: '', STEWARD_CODEC_CORS_ORIGINS: '' },
      }),
    );
    steward = started;
    api = started.api;
  });

  after(async () => {
    await stopSteward(steward);
    await model?.close();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  const show = async (workflowId: string, extra: string[] = []) => {
    const { stdout } = await run(cli, ['workflow', 'show', '-w', workflowId, '--address', temporalAddress, '--namespace', 'default', '--output', 'json', ...extra], {
      timeout: 30_000,
      maxBuffer: 64 * 1024 * 1024,
    });
    return stdout;
  };
  const codecPost = (what: 'encode' | 'decode', body: string, headers: Record<string, string> = {}) =>
    fetch(`${api}/codec/${what}`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-namespace': 'default', ...headers }, body });

  it('keeps the generated key in the data directory, readable by its owner only', () => {
    assert.equal(statSync(path.join(dataDir, 'codec-keys.json')).mode & 0o777, 0o600);
  });

  it('stores no plaintext of a planted secret or of the reply in any history', async () => {
    // The message and reply texts stay in Steward's database (histories carry their keys and
    // hashes); the secret reaches the session's history through a tool call: the saved note is
    // in the tool activity's result.
    model.enqueue({ toolCalls: [{ id: 'call_secret', name: 'save_note', arguments: JSON.stringify({ note: `the key is ${SECRET}` }) }] });
    model.enqueue({ chunks: [REPLY.slice(0, 10), REPLY.slice(10)] });
    const r = await fetch(`${api}/api/v1/chats/${CHAT}/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` },
      body: JSON.stringify({ text: `please keep my key ${SECRET} safe`, user: 'alice' }),
    });
    assert.equal(r.status, 202);
    let messages: Array<{ role: string; text: string }> = [];
    for (let i = 0; i < 300 && !messages.some((x) => x.role === 'assistant'); i++) {
      await sleep(100);
      const t = await fetch(`${api}/api/v1/chats/${CHAT}/messages`, { headers: { authorization: `Bearer ${TOKEN}` } });
      messages = ((await t.json()) as { messages: typeof messages }).messages;
    }
    assert.equal(messages.find((x) => x.role === 'assistant')?.text, REPLY, steward.output().slice(-4000));
    // the model saw the plaintext: the workers decode what they need
    assert.ok(JSON.stringify(model.requests.at(-1)?.body).includes(SECRET));

    // every workflow on the server (the session, ...), read raw: no codec anywhere
    const connection = await Connection.connect({ address: temporalAddress });
    let ids: string[] = [];
    try {
      const list = await connection.workflowService.listWorkflowExecutions({ namespace: 'default', pageSize: 100, query: '' });
      ids = [...new Set((list.executions ?? []).map((e) => e.execution?.workflowId ?? ''))].filter(Boolean);
      // the gRPC answer itself, bytes and all
      for (const id of ids) {
        const h = await connection.workflowService.getWorkflowExecutionHistory({ namespace: 'default', execution: { workflowId: id }, maximumPageSize: 1000 });
        const bytes = Buffer.from(JSON.stringify(h.history, (_k, v: unknown) => (v instanceof Uint8Array ? Buffer.from(v).toString('latin1') : v)), 'utf8');
        assert.ok(!bytes.includes(SECRET), `${id}: the secret is in the raw gRPC history`);
        assert.ok(!bytes.includes(REPLY), `${id}: the reply is in the raw gRPC history`);
      }
    } finally {
      await connection.close();
    }
    assert.ok(ids.includes(`session:http:default:${CHAT}`), `workflows: ${ids.join(', ')}`);
    assert.deepEqual(ids.filter((id) => id.includes(':turn:')), [], `the turn runs inside the session, no workflow of its own: ${ids.join(', ')}`);

    let encrypted = 0;
    let stepResults = 0;
    for (const id of ids) {
      const raw = await show(id);
      histories.set(id, raw);
      assert.ok(!raw.includes(SECRET), `${id}: the secret is in the raw history`);
      assert.ok(!raw.includes(REPLY), `${id}: the reply is in the raw history`);
      for (const { path: at, payload } of payloadsIn(JSON.parse(raw))) {
        const data = b64(payload.data);
        assert.ok(!data.includes(SECRET) && !data.includes(REPLY), `${id} ${at}: plaintext in a payload`);
        // Not encrypted, by design of Temporal and the SDK: search attributes (the server indexes
        // them), headers (trace context), the SDK's own patch markers (a patch id) and local
        // activity markers' bookkeeping (the SDK core writes it: ids, type, attempt, times; the
        // local activity's result beside it is encrypted). Everything else is encrypted (and none
        // of those holds the secret: checked above).
        if (/searchAttributes|indexedFields|\.header\.fields\./.test(at) || /markerRecordedEventAttributes\.details\.patch-data/.test(at)) continue;
        if (/markerRecordedEventAttributes\.details\.data\./.test(at)) {
          const keys = Object.keys(JSON.parse(data) as object);
          const bookkeeping = ['seq', 'attempt', 'activity_id', 'activity_type', 'complete_time', 'backoff', 'original_schedule_time'];
          assert.deepEqual(keys.filter((k) => !bookkeeping.includes(k)), [], `${id} ${at}: a local activity marker's bookkeeping only: ${data}`);
          continue;
        }
        assert.equal(encodingOf(payload), 'binary/encrypted', `${id} ${at}: ${encodingOf(payload)}`);
        assert.ok(b64(payload.metadata?.['steward-key-id']).length > 0);
        if (/activityTaskCompletedEventAttributes\.result/.test(at)) stepResults++;
        encrypted++;
      }
    }
    assert.ok(encrypted >= 4, `encrypted payloads seen: ${encrypted}`);
    // the model step delivered the reply (steward-deliver-in-step): its result is in the history, encrypted
    assert.ok(stepResults >= 1, "the model step's result is in the session history, encrypted");
  });

  it('stores failure messages encrypted too (the failure converter encodes them)', async () => {
    const FAIL_SECRET = `fail-${randomBytes(10).toString('hex')}`;
    const chat = `${CHAT}-fail`;
    // every model call of this chat is refused with a message carrying the secret
    model.setDefault((req) =>
      JSON.stringify(req.body).includes(chat) || JSON.stringify(req.body).includes('provoke a failure')
        ? { status: 400, errorBody: { error: { message: `bad request: ${FAIL_SECRET}`, type: 'invalid_request_error' } } }
        : { text: 'ok' },
    );
    try {
      const r = await fetch(`${api}/api/v1/chats/${chat}/messages`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` },
        body: JSON.stringify({ text: 'provoke a failure', user: 'alice' }),
      });
      assert.equal(r.status, 202);
      // the turn ends (its model call refused): the chat is told, after the session recorded the failure
      let told: Array<{ role: string; text: string }> = [];
      for (let i = 0; i < 240 && !told.some((m) => m.role !== 'user'); i++) {
        await sleep(500);
        const t = await fetch(`${api}/api/v1/chats/${chat}/messages`, { headers: { authorization: `Bearer ${TOKEN}` } });
        told = ((await t.json()) as { messages: typeof told }).messages;
      }
      assert.match(told.find((m) => m.role !== 'user')?.text ?? '', /model call failed/, `the chat's turn ended: ${steward.output().slice(-2000)}`);
    } finally {
      model.setDefault(() => ({ text: "ok" }));
    }
    const connection = await Connection.connect({ address: temporalAddress });
    try {
      const list = await connection.workflowService.listWorkflowExecutions({ namespace: 'default', pageSize: 100, query: `StewardChat = '${chat}'` });
      const ids = [...new Set((list.executions ?? []).map((e) => e.execution?.workflowId ?? ''))].filter(Boolean);
      assert.deepEqual(ids, [`session:http:default:${chat}`], "the chat's session is listed, and no turn workflow");
      let failures = 0;
      let failedModelSteps = 0;
      for (const id of ids) {
        const h = await connection.workflowService.getWorkflowExecutionHistory({ namespace: 'default', execution: { workflowId: id }, maximumPageSize: 1000 });
        const text = JSON.stringify(h.history, (_k, v: unknown) => (v instanceof Uint8Array ? Buffer.from(v).toString('latin1') : v));
        assert.ok(!text.includes(FAIL_SECRET), `${id}: the failure message is in the raw history`);
        failures += text.split('"Encoded failure"').length - 1;
        // the refused model step is the session's own activity, failed in its history
        const scheduled = new Map<string, string>();
        for (const e of h.history?.events ?? []) {
          const a = e.activityTaskScheduledEventAttributes;
          if (a) scheduled.set(String(e.eventId), a.activityType?.name ?? '');
          const failed = e.activityTaskFailedEventAttributes;
          if (failed && scheduled.get(String(failed.scheduledEventId)) === 'modelStep') {
            failedModelSteps++;
            assert.equal(failed.failure?.message, 'Encoded failure', 'the failed model step carries its message encoded');
          }
        }
      }
      assert.ok(failures > 0, 'a failure was recorded, with its message encoded');
      assert.ok(failedModelSteps > 0, "the session's history shows the turn's failed model step");
    } finally {
      await connection.close();
    }
  });

  it('decodes for an operator with the bearer token, and for nobody else', async () => {
    const all = [...histories.values()].flatMap((raw) => payloadsIn(JSON.parse(raw)).map((x) => x.payload)).filter((p) => encodingOf(p) === 'binary/encrypted');
    assert.ok(all.length > 0);
    const body = JSON.stringify({ payloads: all });
    const ok = await codecPost('decode', body, { authorization: `Bearer ${TOKEN}` });
    assert.equal(ok.status, 200);
    const decoded = ((await ok.json()) as { payloads: JsonPayload[] }).payloads;
    assert.equal(decoded.length, all.length);
    assert.ok(decoded.every((p) => encodingOf(p) !== 'binary/encrypted'));
    const plain = decoded.map((p) => b64(p.data)).join('\n');
    assert.ok(plain.includes(SECRET), 'the decoded payloads hold the secret');
    assert.ok(plain.includes(`"turnId":"session:http:default:${CHAT}:turn:1:`), "the decoded payloads hold the turn's activity inputs, with its turn id");

    // encode then decode round-trips, and the encoded form is encrypted
    const hello = { metadata: { encoding: Buffer.from('json/plain').toString('base64') }, data: Buffer.from('"hello codec"').toString('base64') };
    const enc = (await (await codecPost('encode', JSON.stringify({ payloads: [hello] }), { authorization: `Bearer ${TOKEN}` })).json()) as { payloads: JsonPayload[] };
    assert.equal(encodingOf(enc.payloads[0]!), 'binary/encrypted');
    const dec = (await (await codecPost('decode', JSON.stringify(enc), { authorization: `Bearer ${TOKEN}` })).json()) as { payloads: JsonPayload[] };
    assert.deepEqual(dec.payloads[0], hello);

    // unauthenticated, wrong token: 401 and nothing decoded
    const refused: Array<Record<string, string>> = [{}, { authorization: 'Bearer wrong-token-0123456789' }, { authorization: TOKEN }, { cookie: 'steward_codec=v1.9999999999.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' }];
    for (const headers of refused) {
      const r = await codecPost('decode', body, headers);
      assert.equal(r.status, 401, JSON.stringify(headers));
      const text = await r.text();
      assert.ok(!text.includes(SECRET));
    }
    // bad bodies: 400 with a clear message; not JSON: 415
    const bad = async (b: string, status: number, re: RegExp) => {
      const r = await codecPost('decode', b, { authorization: `Bearer ${TOKEN}` });
      assert.equal(r.status, status, b);
      assert.match(((await r.json()) as { error: string }).error, re);
    };
    await bad('{"payloads": [', 400, /malformed JSON/);
    await bad('{"payloads": "nope"}', 400, /payloads/);
    await bad('{"payloads": [{"metadata": {"encoding": "not base64!"}, "data": ""}]}', 400, /payloads\.0\.metadata\.encoding: expected base64/);
    await bad('{}', 400, /payloads/);
    const typed = await fetch(`${api}/codec/decode`, { method: 'POST', headers: { 'content-type': 'text/plain', authorization: `Bearer ${TOKEN}` }, body });
    assert.equal(typed.status, 415);
    // a payload of a key the server does not hold: a clear error naming the key id
    const foreign = { metadata: { encoding: Buffer.from('binary/encrypted').toString('base64'), 'steward-key-id': Buffer.from('retired-key').toString('base64') }, data: randomBytes(40).toString('base64') };
    await bad(JSON.stringify({ payloads: [foreign] }), 422, /key id "retired-key", which is not in the keyring/);
  });

  it("shows the session's history, the turn's activities in it, in plaintext through `temporal workflow show --codec-endpoint --codec-auth`", async () => {
    const sessionId = `session:http:default:${CHAT}`;
    const out = await show(sessionId, ['--codec-endpoint', `${api}/codec`, '--codec-auth', `Bearer ${TOKEN}`]);
    const doc = JSON.parse(out) as { events?: Array<Record<string, { activityType?: { name?: string } } | undefined> & { userMetadata?: { summary?: JsonPayload } }> };
    assert.ok(!payloadsIn(doc).some((p) => encodingOf(p.payload) === 'binary/encrypted'), `${sessionId}: everything decoded`);
    const seen = out + payloadsIn(doc).map((p) => b64(p.payload.data)).join('\n');
    assert.ok(seen.includes(SECRET), 'the secret is shown decoded');
    // the turn's activities, each with its summary (what the UI lists), decoded
    const scheduled = (doc.events ?? [])
      .filter((e) => e.activityTaskScheduledEventAttributes)
      .map((e) => `${e.activityTaskScheduledEventAttributes?.activityType?.name}: ${b64(e.userMetadata?.summary?.data)}`);
    assert.deepEqual(
      scheduled,
      ['modelStep: "Turn 1: model step 1 (openai-compatible:codec-model)"', 'runTool: "Turn 1: tool save_note"', 'modelStep: "Turn 1: model step 2 (openai-compatible:codec-model)"'],
      "the session's history lists the turn's activities by their summaries",
    );
    // a wrong token gets nothing decoded
    const denied = await show(sessionId, ['--codec-endpoint', `${api}/codec`, '--codec-auth', 'Bearer wrong']).catch((err: { stdout?: string; stderr?: string }) => `${err.stdout ?? ''}${err.stderr ?? ''}`);
    assert.ok(!denied.includes(SECRET));
  });

  it('answers CORS for the UI origin only', async () => {
    const preflight = (origin: string) =>
      fetch(`${api}/codec/decode`, {
        method: 'OPTIONS',
        headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type,x-namespace' },
      });
    for (const origin of [`http://127.0.0.1:${uiPort}`, `http://localhost:${uiPort}`]) {
      const r = await preflight(origin);
      assert.equal(r.status, 204, origin);
      assert.equal(r.headers.get('access-control-allow-origin'), origin);
      assert.equal(r.headers.get('access-control-allow-credentials'), 'true');
      assert.match(r.headers.get('access-control-allow-headers') ?? '', /x-namespace/);
      assert.match(r.headers.get('access-control-allow-headers') ?? '', /authorization/);
      assert.match(r.headers.get('access-control-allow-methods') ?? '', /POST/);
    }
    const evil = await preflight('http://evil.example');
    assert.notEqual(evil.status, 204);
    assert.equal(evil.headers.get('access-control-allow-origin'), null);
    assert.equal(evil.headers.get('access-control-allow-credentials'), null);
    // the actual request: the allowed origin gets the header, another origin does not
    const body = JSON.stringify({ payloads: [] });
    const fromUi = await codecPost('decode', body, { authorization: `Bearer ${TOKEN}`, origin: `http://127.0.0.1:${uiPort}` });
    assert.equal(fromUi.headers.get('access-control-allow-origin'), `http://127.0.0.1:${uiPort}`);
    const fromEvil = await codecPost('decode', body, { authorization: `Bearer ${TOKEN}`, origin: 'http://evil.example' });
    assert.equal(fromEvil.headers.get('access-control-allow-origin'), null);
  });

  it('signs a browser in with the token (an HttpOnly cookie), sends it on to the UI, and decodes with the cookie', async () => {
    const form = await fetch(`${api}/codec/login?next=${encodeURIComponent('/ui/namespaces/default/workflows')}`);
    assert.equal(form.status, 200);
    const formHtml = await form.text();
    assert.match(formHtml, /<form method="post" action="\/codec\/login">[\s\S]*name="token"/);
    assert.match(formHtml, /name="next" value="\/ui\/namespaces\/default\/workflows"/);

    const wrong = await fetch(`${api}/codec/login`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'token=not-the-token', redirect: 'manual' });
    assert.equal(wrong.status, 401);
    assert.equal(wrong.headers.get('set-cookie'), null);

    const signIn = (next?: string) =>
      fetch(`${api}/codec/login`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ token: TOKEN, ...(next ? { next } : {}) }).toString(), redirect: 'manual' });
    const login = await signIn();
    assert.equal(login.status, 303, 'a browser that signed in is sent to the UI Steward serves');
    assert.equal(login.headers.get('location'), '/ui/');
    assert.equal((await signIn('/ui/namespaces/default/workflows?query=x')).headers.get('location'), '/ui/namespaces/default/workflows?query=x', 'or back where it came from');
    for (const away of ['https://evil.example/ui/', '//evil.example/ui/', '/api/v1/repos', '/ui/../api/v1/repos', '/ui/%2E%2e/api/v1/repos', '/uix']) {
      assert.equal((await signIn(away)).headers.get('location'), '/ui/', `never away from the UI: ${away}`);
    }
    const setCookie = login.headers.get('set-cookie') ?? '';
    assert.match(setCookie, /^steward_codec=v1\.\d+\.[A-Za-z0-9_-]+;/);
    assert.match(setCookie, /HttpOnly/i);
    assert.match(setCookie, /SameSite=Lax/i);
    assert.match(setCookie, /Path=\/(;|$)/, 'for the codec endpoint and the UI under the same origin');
    assert.ok(!setCookie.includes(TOKEN), 'the cookie is not the token');
    const cookie = setCookie.split(';')[0]!;

    const enc = (await (await codecPost('encode', JSON.stringify({ payloads: [{ metadata: { encoding: Buffer.from('json/plain').toString('base64') }, data: Buffer.from(`"${SECRET}"`).toString('base64') }] }), { authorization: `Bearer ${TOKEN}` })).json()) as { payloads: JsonPayload[] };
    const viaCookie = await codecPost('decode', JSON.stringify(enc), { cookie, origin: `http://127.0.0.1:${uiPort}` });
    assert.equal(viaCookie.status, 200);
    assert.equal(viaCookie.headers.get('access-control-allow-credentials'), 'true');
    assert.equal(b64(((await viaCookie.json()) as { payloads: JsonPayload[] }).payloads[0]?.data), `"${SECRET}"`);
    // an altered cookie is refused
    const altered = cookie.replace(/.$/, (ch) => (ch === 'A' ? 'B' : 'A'));
    assert.equal((await codecPost('decode', JSON.stringify(enc), { cookie: altered })).status, 401);
  });

  it('issues one-time sign-in links to the operator only; a link signs in once', async () => {
    assert.equal((await fetch(`${api}/codec/links`, { method: 'POST' })).status, 401);
    assert.equal((await fetch(`${api}/codec/links`, { method: 'POST', headers: { authorization: 'Bearer wrong' } })).status, 401);
    const issued = await fetch(`${api}/codec/links`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` } });
    assert.equal(issued.status, 201);
    const link = (await issued.json()) as { url: string; expiresAt: string; ui: string };
    assert.match(link.url, new RegExp(`^${api.replace(/[.]/g, '\\.')}/codec/login/[A-Za-z0-9_-]{43}$`));
    assert.equal(link.ui, `${api}/ui/`);
    const ttl = Date.parse(link.expiresAt) - Date.now();
    assert.ok(ttl > 55 * 60_000 && ttl <= 60 * 60_000, `valid for an hour: ${link.expiresAt}`);

    assert.equal((await fetch(link.url, { method: 'HEAD', redirect: 'manual' })).status, 200, 'a HEAD does not use the link up');
    const first = await fetch(link.url, { redirect: 'manual' });
    assert.equal(first.status, 303);
    assert.equal(first.headers.get('location'), '/ui/');
    assert.match(first.headers.get('set-cookie') ?? '', /^steward_codec=v1\./);
    const cookie = (first.headers.get('set-cookie') ?? '').split(';')[0]!;
    const ui = await fetch(`${api}/ui/api/v1/settings`, { headers: { cookie } });
    assert.equal(ui.status, 200, 'the cookie opens the UI behind Steward');

    const second = await fetch(link.url, { redirect: 'manual' });
    assert.equal(second.status, 401, 'a link works once');
    assert.equal(second.headers.get('set-cookie'), null);
    assert.match(await second.text(), /used already or has expired/);

    // `steward ui` prints a new one
    const out: string[] = [];
    const err: string[] = [];
    const io = (token: string) => ({ config: () => loadConfig({}, tmpdir()), out: (x: string) => void out.push(x), err: (x: string) => void err.push(x), api: { url: api, token } });
    assert.equal(await adminCommand('ui', [], io(TOKEN)), 0);
    const printed = new RegExp(`^(${api.replace(/[.]/g, '\\.')}/codec/login/[A-Za-z0-9_-]{43})\n  \\(it signs the browser in and opens ${api.replace(/[.]/g, '\\.')}/ui/; it works once, until \\S+\\)\n$`).exec(out.join(''));
    assert.ok(printed, out.join(''));
    assert.equal((await fetch(printed[1]!, { redirect: 'manual' })).status, 303, 'the printed link signs in');
    assert.equal(await adminCommand('ui', [], io('not-the-token')), 2);
    assert.match(err.join(''), /API token was refused/);
  });

  it("points the embedded Temporal UI at the same origin's codec endpoint and serves it at <api>/ui", async () => {
    // the dev server's own UI (loopback) runs under /ui with a relative codec endpoint
    const r = await fetch(`http://127.0.0.1:${uiPort}/ui/api/v1/settings`);
    assert.equal(r.status, 200);
    const settings = (await r.json()) as { Codec?: { Endpoint?: string; IncludeCredentials?: boolean } };
    assert.equal(settings.Codec?.Endpoint, '/codec', 'relative: the origin the browser is on, Steward\'s');
    // through Steward: only signed in
    assert.equal((await fetch(`${api}/ui/api/v1/settings`)).status, 401);
    const page = await fetch(`${api}/ui/`, { headers: { accept: 'text/html' }, redirect: 'manual' });
    assert.equal(page.status, 303);
    assert.equal(page.headers.get('location'), `/codec/login?next=${encodeURIComponent('/ui/')}`);
  });
});
