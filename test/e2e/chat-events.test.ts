/**
 * The chat event stream (`GET /api/v1/chats/{id}/events`) beyond the transcript and the status,
 * against `./steward start` (API and worker in one process; the draft still goes through the
 * database, as it does between `steward api` and `steward worker`) with the scripted model
 * server streaming slowly (STEWARD_MODEL_STREAM=true):
 *  - a slowly streamed reply gives at least two `partial` events with growing text before the
 *    `message` with the whole reply, then an empty `partial` (the draft is over); the same as
 *    HTML fragments with `format=html`;
 *  - a held secret (the API token) streamed over several chunks never shows in a `partial`
 *    event, whole or begun: masked once whole, its start held back before;
 *  - a turn waiting for an approval gives an `approval` event with the request text exactly as
 *    the inbox (and the chat) shows it, then one with the decision after it is approved through
 *    the API; the HTML fragment links to the inbox;
 *  - a `steward api` process without workers, on the same Temporal server and database, streams
 *    the partial text of a turn the other process's worker runs (the cluster shape);
 *  - the OpenAPI document describes the route (path, `after`, `format`, `Last-Event-ID`,
 *    text/event-stream and each event's data schema);
 *  - in Chromium, under the console's CSP: the chat page shows the reply as it is typed, then
 *    the reply in the transcript with the typing area emptied; the approval box with the request
 *    text and the inbox link, then its decision; axe-core finds no serious or critical violation
 *    with the box shown, and nothing overflows 375 px.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createRequire } from 'node:module';
import { after, before, describe, it } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { artifactDir, browserSkip, launchChromium, saveScreenshot } from '../helpers/browser.js';
import { needs } from '../helpers/requirements.js';
import { lastUserText, startModelServer, type ModelServer } from '../helpers/model-server.js';
import { freePort, spawnProcess, type Spawned } from '../helpers/process.js';
import { freeStewardPorts, startEnv, startSteward, stopSteward, type StewardPorts } from '../helpers/started-steward.js';

const require = createRequire(import.meta.url);
const TOKEN = 'chat-events-e2e-token-0123456789abcdef';
const tag = Date.now().toString(36);
const MODEL = 'openai-compatible:chat-events-e2e-model';

interface SseEvent {
  id?: string;
  event?: string;
  data: string;
}

/** An open event stream, read in the background into `events`; `waitFor` waits for a condition on them. */
async function openStream(url: string, headers: Record<string, string>) {
  const ac = new AbortController();
  const res = await fetch(url, { headers, signal: ac.signal });
  assert.equal(res.status, 200, res.status === 200 ? '' : await res.text());
  assert.match(res.headers.get('content-type') ?? '', /text\/event-stream/);
  const events: SseEvent[] = [];
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  const reading = (async () => {
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += decoder.decode(value, { stream: true });
      let i: number;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const e: SseEvent = { data: '' };
        const data: string[] = [];
        for (const line of block.split('\n')) {
          if (line.startsWith('id: ')) e.id = line.slice(4);
          else if (line.startsWith('event: ')) e.event = line.slice(7);
          else if (line.startsWith('data: ')) data.push(line.slice(6));
          else if (line === 'data:') data.push('');
        }
        if (data.length || e.event) events.push({ ...e, data: data.join('\n') });
      }
    }
  })().catch(() => undefined);
  return {
    events,
    async waitFor<T>(what: string, probe: (events: SseEvent[]) => T | undefined, timeoutMs = 60_000): Promise<T> {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        const v = probe(events);
        if (v !== undefined) return v;
        await sleep(50);
      }
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; events: ${JSON.stringify(events.map((e) => e.event))}`);
    },
    async close() {
      ac.abort();
      await reading;
    },
  };
}

const of = (events: SseEvent[], type: string) => events.filter((e) => e.event === type);
const browserOff = browserSkip() || (await needs('chromium'));

describe('the chat event stream: partial text and approvals', { timeout: 600_000 }, () => {
  let model: ModelServer | undefined;
  let steward: (Spawned & { api: string }) | undefined;
  let dataDir = '';
  let api = '';
  let ports: StewardPorts | undefined;
  let env: NodeJS.ProcessEnv = {};
  const auth = { authorization: `Bearer ${TOKEN}` };

  const call = async (method: string, route: string, body?: unknown) => {
    const r = await fetch(`${api}${route}`, {
      method,
      headers: { ...auth, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await r.text();
    return { status: r.status, body: (text ? JSON.parse(text) : {}) as Record<string, unknown> };
  };
  const send = async (chat: string, text: string) => {
    const r = await call('POST', `/api/v1/chats/${chat}/messages`, { text });
    assert.equal(r.status, 202, JSON.stringify(r.body));
  };
  /** A stream of the chat, open (its first status event came) before anything is sent. */
  const stream = async (chat: string, format?: 'html') => {
    const s = await openStream(`${api}/api/v1/chats/${chat}/events${format ? `?format=${format}` : ''}`, auth);
    await s.waitFor('the first status event', (ev) => (of(ev, 'status').length > 0 ? true : undefined), 30_000);
    return s;
  };

  before(async () => {
    model = await startModelServer();
    model.setDefault((req) => ({ text: `Reply to: ${lastUserText(req.body)}` }));
    dataDir = mkdtempSync(path.join(tmpdir(), 'steward-chat-events-e2e-'));
    ports = await freeStewardPorts();
    env = startEnv({
      dataDir,
      ports,
      token: TOKEN,
      model: MODEL,
      modelBaseURL: model.baseURL,
      // stream model steps (partial text); HTTP actions may reach the model server (the approved action's target)
      extra: { STEWARD_MODEL_STREAM: 'true', STEWARD_ACTION_HTTP_ALLOW_HOSTS: '127.0.0.1' },
    });
    steward = await startSteward(env);
    api = steward.api;
    await steward.waitForOutput(/Steward is running/, 60_000);
  });

  after(async () => {
    await stopSteward(steward);
    await model?.close();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it('a slowly streamed reply gives growing partial events before the message with the whole reply (JSON and HTML)', async () => {
    const chat = `partial-${tag}`;
    const chunks = Array.from({ length: 14 }, (_, i) => `part ${i + 1} of the slow answer. `);
    const whole = chunks.join('');
    const json = await stream(chat);
    const html = await stream(chat, 'html');
    try {
      model!.enqueue({ chunks, chunkDelayMs: 200, match: (req) => lastUserText(req.body).includes(`slow ${tag}`) });
      await send(chat, `slow ${tag}`);
      const reply = await json.waitFor('the reply', (ev) => ev.findIndex((e) => e.event === 'message' && (JSON.parse(e.data) as { role: string }).role === 'assistant') + 1 || undefined);
      const at = reply - 1;
      const message = JSON.parse(json.events[at]!.data) as { text: string };
      assert.equal(message.text, whole);
      const before = json.events.slice(0, at).filter((e) => e.event === 'partial').map((e) => JSON.parse(e.data) as { turnId: string; stepKey: string; text: string });
      const texts = before.map((p) => p.text).filter((t) => t !== '');
      assert.ok(texts.length >= 2, `at least two partial events before the reply (got ${texts.length})`);
      for (let i = 0; i < texts.length; i++) {
        assert.ok(whole.startsWith(texts[i]!), `partial ${i} is the start of the reply: ${JSON.stringify(texts[i])}`);
        if (i > 0) assert.ok(texts[i]!.length > texts[i - 1]!.length, 'each partial has more text than the one before');
      }
      assert.ok(texts.at(-1)!.length < whole.length, 'the partials came while the reply was being written');
      assert.match(before[0]!.stepKey, /^model:.+:1$/);
      assert.ok(json.events.every((e) => e.event !== 'partial' || e.id === undefined), 'partial events carry no id');
      // the draft is over once the reply came: an empty partial
      await json.waitFor('the empty partial after the reply', (ev) => (ev.slice(at).some((e) => e.event === 'partial' && (JSON.parse(e.data) as { text: string }).text === '') ? true : undefined), 10_000);
      // the same as HTML fragments: the text in a span (escaped), the reply as a transcript item
      const fragments = await html.waitFor('the reply as HTML', (ev) => {
        const i = ev.findIndex((e) => e.event === 'message' && e.data.includes('data-role="assistant"'));
        return i >= 0 ? ev.slice(0, i).filter((e) => e.event === 'partial' && e.data !== '') : undefined;
      });
      assert.ok(fragments.length >= 2, `at least two partial fragments before the reply (got ${fragments.length})`);
      assert.ok(fragments.every((f) => /^<span class="partial" data-step="model:[^"]+">part 1 of the slow answer\./.test(f.data)), fragments[0]?.data);
    } finally {
      await json.close();
      await html.close();
    }
  });

  it('a held secret streamed over several chunks never shows in a partial event', async () => {
    const chat = `secret-${tag}`;
    const half = Math.floor(TOKEN.length / 2);
    const chunks = ['The token you asked about is ', TOKEN.slice(0, 6), TOKEN.slice(6, half), TOKEN.slice(half), ' and that is all.', ...Array.from({ length: 6 }, (_, i) => ` More words ${i}.`)];
    const s = await stream(chat);
    try {
      model!.enqueue({ chunks, chunkDelayMs: 250, match: (req) => lastUserText(req.body).includes(`secret ${tag}`) });
      await send(chat, `secret ${tag}`);
      await s.waitFor('the reply', (ev) => (ev.some((e) => e.event === 'message' && (JSON.parse(e.data) as { role: string }).role === 'assistant') ? true : undefined));
      const partials = of(s.events, 'partial').map((e) => (JSON.parse(e.data) as { text: string }).text);
      assert.ok(partials.filter((t) => t !== '').length >= 2, `partial events came (${partials.length})`);
      for (const t of partials) {
        assert.ok(!t.includes(TOKEN.slice(0, 6)), `no partial shows the secret or its start: ${JSON.stringify(t)}`);
        assert.ok(!t.includes(TOKEN.slice(half)), `no partial shows the secret's end: ${JSON.stringify(t)}`);
      }
      assert.ok(partials.some((t) => t.includes("[Steward's secret STEWARD_API_TOKEN]")), `a partial after the whole secret came shows it masked: ${JSON.stringify(partials)}`);
      const reply = of(s.events, 'message').map((e) => JSON.parse(e.data) as { role: string; text: string }).find((m) => m.role === 'assistant')!;
      assert.ok(!reply.text.includes(TOKEN) && reply.text.includes("[Steward's secret STEWARD_API_TOKEN]"), 'the reply is masked as every delivery is');
    } finally {
      await s.close();
    }
  });

  it('a turn waiting for an approval gives an approval event with the request text, then one with the decision', async () => {
    const chat = `approval-${tag}`;
    const url = `${model!.baseURL}/models`;
    const json = await stream(chat);
    const html = await stream(chat, 'html');
    try {
      model!.enqueue({ toolCalls: [{ id: `call_${tag}`, name: 'http_request', arguments: JSON.stringify({ method: 'GET', url }) }], match: (req) => lastUserText(req.body).includes(`fetch ${tag}`) });
      model!.enqueue({ text: `Fetched ${tag}.`, match: (req) => JSON.stringify(req.body).includes(`call_${tag}`) });
      await send(chat, `fetch ${tag}`);
      const pending = await json.waitFor('the pending approval', (ev) => of(ev, 'approval').map((e) => JSON.parse(e.data) as { id: string; status: string; text: string; decided: unknown })[0]);
      assert.equal(pending.status, 'pending');
      assert.equal(pending.decided, null);
      assert.match(pending.id, /^[A-Za-z0-9._:-]+$/);
      assert.ok(pending.text.includes(url), `the request names what it does: ${pending.text}`);
      // exactly the inbox's text (the chat's approval request, rebuilt from the stored proposal)
      const items = (await call('GET', '/api/v1/inbox?kind=approval')).body.items as Array<{ id: string; text: string }>;
      assert.equal(items.find((i) => i.id === `approval:${pending.id}`)?.text, pending.text);
      const fragment = await html.waitFor('the pending approval as HTML', (ev) => of(ev, 'approval')[0]?.data);
      assert.ok(fragment.includes(`href="/console/inbox?kind=approval#approval:${pending.id}"`), fragment);
      assert.ok(fragment.includes('data-status="pending"'), fragment);

      const decided = await call('POST', `/api/v1/inbox/${encodeURIComponent(`approval:${pending.id}`)}/decision`, { decision: 'approve' });
      assert.equal(decided.status, 200, JSON.stringify(decided.body));
      const approved = await json.waitFor('the approval decided', (ev) => of(ev, 'approval').map((e) => JSON.parse(e.data) as { id: string; status: string; text: string; decided: { by: string | null; how: string } | null }).find((a) => a.status !== 'pending'));
      assert.equal(approved.id, pending.id);
      assert.equal(approved.status, 'approved');
      assert.ok(approved.decided?.by, 'who decided');
      assert.equal(approved.decided?.how, 'approved');
      await html.waitFor('the decision as HTML', (ev) => (of(ev, 'approval').some((e) => e.data.includes('data-status="approved"')) ? true : undefined));
      // the turn goes on to its reply
      await json.waitFor('the reply after the approved action', (ev) => (of(ev, 'message').some((e) => (JSON.parse(e.data) as { text: string }).text === `Fetched ${tag}.`) ? true : undefined));
      assert.equal(of(json.events, 'approval').length, 2, 'one event when it waits, one when it is decided');
    } finally {
      await json.close();
      await html.close();
    }
  });

  it('the chat page shows the reply as it is typed, then the reply; the approval with its inbox link, then its decision (Chromium)', { skip: browserOff }, async () => {
    const chat = `page-${tag}`;
    const signInLink = async () => ((await (await fetch(`${api}/codec/links`, { method: 'POST', headers: auth })).json()) as { url: string }).url;
    let browser: Browser | undefined;
    try {
      browser = await launchChromium();
      const context = await browser.newContext({ viewport: { width: 375, height: 800 } });
      context.setDefaultTimeout(30_000);
      const page: Page = await context.newPage();
      await page.goto(`${await signInLink()}?next=${encodeURIComponent(`/console/chats/${chat}`)}`, { waitUntil: 'domcontentloaded' });
      assert.equal(new URL(page.url()).pathname, `/console/chats/${chat}`);
      await page.locator('#status', { hasText: 'No session yet' }).waitFor();
      await page.waitForFunction(() => (globalThis as unknown as { htmx?: { createEventSource?: unknown } }).htmx?.createEventSource !== undefined);
      await sleep(1000);

      // the reply as it is typed, then in the transcript
      const chunks = Array.from({ length: 14 }, (_, i) => `Typed <b>${i + 1}</b>. `);
      const whole = chunks.join('');
      model!.enqueue({ chunks, chunkDelayMs: 200, match: (req) => lastUserText(req.body).includes(`typed ${tag}`) });
      await send(chat, `typed ${tag}`);
      await page.locator('#typing .partial', { hasText: 'Typed <b>1</b>.' }).waitFor({ timeout: 60_000 });
      const typed = await page.locator('#typing .partial').textContent();
      assert.ok(typed && whole.startsWith(typed) && typed.length < whole.length, `the typing area shows the reply so far, as text: ${typed}`);
      assert.equal(await page.locator('#typing b').count(), 0, 'the text is escaped, not markup');
      await page.locator('#transcript li[data-role="assistant"]', { hasText: whole.trim() }).waitFor({ timeout: 60_000 });
      for (let i = 0; i < 100 && (await page.locator('#typing').textContent()) !== ''; i++) await sleep(100);
      assert.equal(await page.locator('#typing').textContent(), '', 'the typing area is emptied once the reply came');

      // the approval box, then its decision
      const url = `${model!.baseURL}/models`;
      model!.enqueue({ toolCalls: [{ id: `call_page_${tag}`, name: 'http_request', arguments: JSON.stringify({ method: 'GET', url }) }], match: (req) => lastUserText(req.body).includes(`page fetch ${tag}`) });
      model!.enqueue({ text: `Page fetched ${tag}.`, match: (req) => JSON.stringify(req.body).includes(`call_page_${tag}`) });
      await send(chat, `page fetch ${tag}`);
      const box = page.locator('#approval .approval[data-status="pending"]');
      await box.waitFor({ timeout: 60_000 });
      const id = (await box.getAttribute('data-approval'))!;
      assert.ok((await box.locator('.approval-text').textContent())?.includes(url));
      assert.equal(await box.locator('a').getAttribute('href'), `/console/inbox?kind=approval#approval:${id}`);
      const overflow = await page.evaluate(() => {
        const root = (globalThis as unknown as { document: { documentElement: { scrollWidth: number; clientWidth: number } } }).document.documentElement;
        return root.scrollWidth - root.clientWidth;
      });
      assert.ok(overflow <= 0, `nothing overflows 375 px (${overflow} px over)`);
      console.log(`screenshot: ${await saveScreenshot(page, artifactDir('console'), 'chat-approval')}`);

      // axe-core, with the box shown (a context that lets the scan's script in; the stream sends the waiting approval at once)
      const scan = await browser.newContext({ bypassCSP: true, viewport: { width: 1280, height: 900 } });
      try {
        const p = await scan.newPage();
        await p.goto(`${await signInLink()}?next=${encodeURIComponent(`/console/chats/${chat}`)}`, { waitUntil: 'domcontentloaded' });
        await p.locator('#approval .approval').waitFor({ timeout: 30_000 });
        await p.addScriptTag({ path: require.resolve('axe-core/axe.min.js') });
        const violations = await p.evaluate(async () => {
          const axe = (globalThis as unknown as { axe: { run(): Promise<{ violations: Array<{ id: string; impact: string; help: string }> }> } }).axe;
          return (await axe.run()).violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help }));
        });
        assert.deepEqual(violations.filter((v) => v.impact === 'serious' || v.impact === 'critical'), []);
      } finally {
        await scan.close();
      }

      const decided = await call('POST', `/api/v1/inbox/${encodeURIComponent(`approval:${id}`)}/decision`, { decision: 'approve' });
      assert.equal(decided.status, 200, JSON.stringify(decided.body));
      await page.locator(`#approval .approval[data-approval="${id}"][data-status="approved"]`, { hasText: 'approved by' }).waitFor({ timeout: 30_000 });
      await page.locator('#transcript li[data-role="assistant"]', { hasText: `Page fetched ${tag}.` }).waitFor({ timeout: 60_000 });
    } finally {
      await browser?.close().catch(() => undefined);
    }
  });

  it('a `steward api` process without workers (the cluster shape) streams the partial text of a turn the other process works', async () => {
    // the API role against the started Steward's Temporal server and database: its stream reads
    // what the worker of the other process writes
    const apiOnly = spawnProcess('./steward', ['api'], { ...env, TEMPORAL_ADDRESS: `127.0.0.1:${ports!.temporal}`, STEWARD_HTTP_PORT: String(await freePort()) });
    try {
      const url = (await apiOnly.waitForOutput(/API:\s+(http:\/\/\S+)/, 180_000))[1] ?? '';
      const health = (await (await fetch(`${url}/healthz`)).json()) as { checks: Record<string, string> };
      assert.match(health.checks.worker ?? '', /none in this process/);
      const chat = `cluster-${tag}`;
      const chunks = Array.from({ length: 12 }, (_, i) => `piece ${i + 1}. `);
      const s = await openStream(`${url}/api/v1/chats/${chat}/events`, auth);
      try {
        await s.waitFor('the first status event', (ev) => (of(ev, 'status').length > 0 ? true : undefined), 30_000);
        model!.enqueue({ chunks, chunkDelayMs: 200, match: (req) => lastUserText(req.body).includes(`cluster ${tag}`) });
        await send(chat, `cluster ${tag}`);
        const at = await s.waitFor('the reply', (ev) => ev.findIndex((e) => e.event === 'message' && (JSON.parse(e.data) as { role: string }).role === 'assistant') + 1 || undefined);
        const texts = s.events.slice(0, at - 1).filter((e) => e.event === 'partial').map((e) => (JSON.parse(e.data) as { text: string }).text).filter((t) => t !== '');
        assert.ok(texts.length >= 2, `partial events from the other process's worker (got ${texts.length})`);
        assert.ok(texts.every((t) => chunks.join('').startsWith(t)));
      } finally {
        await s.close();
      }
    } finally {
      apiOnly.kill('SIGTERM');
      await Promise.race([apiOnly.exited, sleep(20_000)]);
      apiOnly.kill('SIGKILL');
    }
  });

  it('the OpenAPI document describes the event stream', async () => {
    const doc = (await (await fetch(`${api}/api/openapi.json`)).json()) as {
      paths: Record<string, { get?: { parameters?: Array<{ name: string; in: string }>; responses?: Record<string, { content?: Record<string, { schema?: unknown }> }> } }>;
      components?: { schemas?: Record<string, unknown> };
    };
    const route = doc.paths['/api/v1/chats/{chatId}/events']?.get;
    assert.ok(route, 'the route is in the document');
    const params = (route.parameters ?? []).map((p) => `${p.in}:${p.name}`).sort();
    assert.deepEqual(params, ['header:Last-Event-ID', 'path:chatId', 'query:after', 'query:format']);
    assert.ok(route.responses?.['200']?.content?.['text/event-stream']?.schema, 'a text/event-stream response with its schema');
    for (const name of ['ChatEventMessage', 'ChatEventStatus', 'ChatEventPartial', 'ChatEventApproval']) assert.ok(doc.components?.schemas?.[name], `${name} is described`);
  });
});
