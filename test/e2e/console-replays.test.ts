/**
 * The console's Replays page in a real browser (headless Debian Chromium driven by
 * playwright-core) against `./steward start` with the scripted model server, the Temporal dev
 * server and its UI; a chat of two real turns is the record:
 *  - a member signed in through their own console link sees no Replays page (nav, 403) and cannot
 *    start one (403); nothing starts;
 *  - the start form refuses a bad selection, an out-of-range count and an unknown model with the
 *    replay service's message, keeps what was typed, and starts nothing: no workflow with a
 *    `replay:` id exists in Temporal and the service lists no replay;
 *  - "Replay" beside a reply of the chat page opens the form with that turn; under another model
 *    (the scripted model answers it differently) the replay runs through the replay service to
 *    its end on the page without a reload, and its report shows the changed reply side by side
 *    with the line diff (removed, added and context lines), the summary counts, the run's link
 *    into /ui; the reply's markup is shown as text and the API token it carries is masked; the
 *    JSON, Markdown and JSONL downloads are the API's report, which the API masks too;
 *  - a replay under a slow model is cancelled from its page: the page and the list (open in
 *    another tab, polling while one runs) show it cancelled without a reload;
 *  - "Fork from here" on the second reply creates the new chat (the fork service): its link is
 *    shown, and the new chat's transcript holds the first turn and not the second;
 *  - axe-core finds no serious or critical violation on the pages; at 375 px nothing overflows.
 * Screenshots go to test-artifacts/console-replays/ (gitignored).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Connection, Client } from '@temporalio/client';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { BrowserSignIn } from '../../adapters/http/sign-in.js';
import { artifactDir, browserSkip, launchChromium, saveScreenshot } from '../helpers/browser.js';
import { apiCaller, seriousAxeViolations, sidewaysWidth, until } from '../helpers/console-browser.js';
import { lastUserText, startModelServer, type ModelServer, type RecordedRequest, type ScriptedReply } from '../helpers/model-server.js';
import { spawnProcess, type Spawned } from '../helpers/process.js';
import { needs } from '../helpers/requirements.js';
import { freeStewardPorts, startEnv, startSteward, stopSteward, type StewardPorts } from '../helpers/started-steward.js';

const TOKEN = 'console-replays-e2e-token-0123456789abcdef';
const tag = Date.now().toString(36);
const CHAT = `replays-${tag}`;
const MODEL = 'openai-compatible:console-replays-model';
const MASK = "[Steward's secret STEWARD_API_TOKEN]";

/** The scripted model: the configured model answers each question; `other-model` otherwise (with markup and the API token); `slow-model` takes two minutes. */
function script(req: RecordedRequest): ScriptedReply {
  const model = (req.body as { model?: string }).model;
  const user = lastUserText(req.body);
  const question = /(first|second) question/.exec(user)?.[0] ?? 'something';
  if (model === 'slow-model') return { text: 'too late', firstTokenDelayMs: 120_000 };
  if (model === 'other-model') return { text: `Counterfactual answer with <b>markup</b> and ${TOKEN}.\nThe same last line.` };
  return { text: `Recorded answer to the ${question}.\nThe same last line.` };
}

describe('the console: Replays page', { skip: browserSkip() || (await needs('chromium')), timeout: 900_000 }, () => {
  let model: ModelServer | undefined;
  let steward: Spawned | undefined;
  let browser: Browser | undefined;
  let context: BrowserContext | undefined;
  let page: Page | undefined;
  let connection: Connection | undefined;
  let client: Client | undefined;
  let api = '';
  let dataDir = '';
  let ports: StewardPorts | undefined;
  let env: NodeJS.ProcessEnv = {};
  let replayId = '';
  const shots = artifactDir('console-replays');
  const call = apiCaller(() => api, TOKEN);

  /** The workflows whose id starts with `replay:`, as Temporal's visibility lists them (raw: their memos are encrypted by Steward's codec). */
  const replayRuns = async () => {
    const r = await client!.workflowService.listWorkflowExecutions({ namespace: 'default', query: 'WorkflowId STARTS_WITH "replay:"' });
    return (r.executions ?? []).map((e) => e.execution?.workflowId ?? '');
  };
  const replaysListed = async () => ((await call('GET', '/api/v1/replays')).body.replays ?? []) as Array<{ id: string; status: string }>;
  const replies = async (chat: string) => (((await call('GET', `/api/v1/chats/${chat}/messages`)).body.messages ?? []) as Array<{ role: string; text: string }>).filter((m) => m.role === 'assistant');
  const idle = async (chat: string) => !((await call('GET', `/api/v1/chats/${chat}/status`)).body as { running?: unknown }).running;
  /** A browser page signed in as the operator through a fresh one-time link, landing on `next`. */
  const signedIn = async (ctx: BrowserContext, next: string) => {
    const link = (await call('POST', '/codec/links')).body.url as string;
    const p = await ctx.newPage();
    await p.goto(`${link}?next=${encodeURIComponent(next)}`, { waitUntil: 'domcontentloaded' });
    assert.equal(new URL(p.url()).pathname, next.split('?')[0]);
    return p;
  };
  /** The start form filled and sent (the page as it answers: a replay's page, or the form again with the service's refusal). */
  const submitForm = async (p: Page, fields: Record<string, string>, kind = 'turn') => {
    await p.goto(`${api}/console/replays/new${fields.turnId ? `?turnId=${encodeURIComponent(fields.turnId)}` : ''}`, { waitUntil: 'domcontentloaded' });
    await p.locator(`input[name="kind"][value="${kind}"]`).check();
    for (const [name, value] of Object.entries(fields)) await p.locator(`#f-${name}`).fill(value);
    const answered = p.waitForResponse((r) => r.request().method() === 'POST' && new URL(r.url()).pathname === '/console/replays');
    await p.locator('#start').click();
    const res = await answered;
    await p.waitForLoadState('domcontentloaded');
    return res.status();
  };
  /** A replay started from the form for `turnId` under `model` (the turn's end is recorded just after its reply: the service says so until then). */
  const startFromForm = async (p: Page, turnId: string, alternativeModel: string): Promise<string> =>
    until(
      'the replay started',
      async () => {
        const status = await submitForm(p, { turnId, model: alternativeModel });
        const m = /\/console\/replays\/(rp[a-z0-9]+)$/.exec(new URL(p.url()).pathname);
        if (m) return m[1]!;
        assert.equal(status, 400);
        assert.match(await p.locator('#start-error').innerText(), /has not ended|no turn/);
        return undefined;
      },
      30_000,
      500,
    );
  /** The turn ids of the chat's replies, as the chat page's Replay links carry them. */
  const turnIdsOnChatPage = async (p: Page) =>
    (await p.locator('#transcript li[data-role="assistant"] a.replay-turn-link').evaluateAll((as) => as.map((a) => a.getAttribute('href') ?? ''))).map((h) => new URL(h, 'http://x').searchParams.get('turnId') ?? '');

  before(async () => {
    browser = await launchChromium();
    model = await startModelServer();
    model.setDefault(script);
    dataDir = mkdtempSync(path.join(tmpdir(), 'steward-console-replays-e2e-'));
    ports = await freeStewardPorts();
    env = startEnv({ dataDir, ports, token: TOKEN, model: MODEL, modelBaseURL: model.baseURL, extra: { STEWARD_TEMPORAL_UI: 'true', STEWARD_TEMPORAL_UI_URL: '' } });
    const started = await startSteward(env);
    steward = started;
    api = started.api;
    await steward.waitForOutput(/Steward is running/, 60_000);
    connection = await Connection.connect({ address: `127.0.0.1:${ports.temporal}` });
    client = new Client({ connection, namespace: 'default' });
    // the record: two turns of one chat
    for (const [i, q] of ['first question', 'second question'].entries()) {
      const r = await call('POST', `/api/v1/chats/${CHAT}/messages`, { text: `The ${q}, please (${tag})` });
      assert.equal(r.status, 202, JSON.stringify(r.body));
      await until(`reply ${i + 1}`, async () => ((await replies(CHAT)).length > i ? true : undefined), 90_000);
      await until('the chat idle', async () => ((await idle(CHAT)) ? true : undefined), 30_000);
    }
    context = await browser.newContext({ viewport: { width: 1280, height: 900 }, acceptDownloads: true });
    context.setDefaultTimeout(30_000);
    page = await signedIn(context, '/console/replays');
  });

  after(async () => {
    await context?.close().catch(() => undefined);
    await browser?.close().catch(() => undefined);
    await connection?.close().catch(() => undefined);
    await stopSteward(steward);
    await model?.close();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it('a member signed in as themselves sees no Replays page and cannot start one', async () => {
    const issue = spawnProcess('./steward', ['shells', 'issue', `mia-${tag}`, '--role', 'member'], env);
    assert.equal((await issue.exited).code, 0, issue.output());
    const identity = /\(id \S+, identity (\S+)\)/.exec(issue.output())?.[1];
    assert.ok(identity, issue.output());
    const members = await browser!.newContext({ viewport: { width: 1000, height: 900 } });
    try {
      const mia = await members.newPage();
      await mia.goto(`${api}/console/login/${new BrowserSignIn({ apiToken: TOKEN }).issuePersonLink(identity).token}`, { waitUntil: 'domcontentloaded' });
      assert.match(await mia.locator('#viewer').innerText(), /\(member\)/);
      assert.ok(!(await mia.locator('nav a').allInnerTexts()).includes('Replays'), 'no Replays in her nav');
      for (const route of ['/console/replays', '/console/replays/new', '/console/replays/rpabcdefgh23']) {
        assert.equal((await members.request.get(`${api}${route}`, { maxRedirects: 0 })).status(), 403, route);
      }
      // a start sent by hand with her own CSRF token: refused before the service is reached
      const csrf = JSON.parse((await mia.locator('body').getAttribute('hx-headers')) ?? '{}') as Record<string, string>;
      const forged = await members.request.post(`${api}/console/replays`, { headers: csrf, form: { kind: 'turn', turnId: 'x' }, maxRedirects: 0 });
      assert.equal(forged.status(), 403, await forged.text());
      assert.match(await forged.text(), /for admins/);
      const fork = await members.request.post(`${api}/console/chats/${CHAT}/fork`, { headers: csrf, form: { turnId: 'x' }, maxRedirects: 0 });
      assert.equal(fork.status(), 403);
    } finally {
      await members.close();
    }
    assert.deepEqual(await replayRuns(), []);
  });

  it('the start form refuses a bad selection or an unknown model with the service\'s message, keeps the fields, and starts nothing', async () => {
    const p = page!;
    const cases: Array<[string, Record<string, string>, RegExp]> = [
      ['turn', { turnId: `session:http:default:${CHAT}:turn:9:ffffffff` }, /nothing to replay: no turn session:http:default:.*:turn:9:ffffffff/],
      ['objective', { objectiveId: 'digest', last: '0' }, /last: expected a whole number from 1 to 500/],
      ['chat', { chatId: CHAT, since: 'last tuesday' }, /since: expected an ISO time/],
      ['turn', { turnId: 'anything', model: 'anthropic:claude-sonnet-4' }, /the anthropic provider is not configured/],
    ];
    for (const [kind, fields, message] of cases) {
      assert.equal(await submitForm(p, fields, kind), 400, `${kind} ${JSON.stringify(fields)}`);
      assert.match(await p.locator('#start-error[role="alert"]').innerText(), message);
      assert.match(await p.locator('#start-error').innerText(), /^Not started: /);
      for (const [name, value] of Object.entries(fields)) assert.equal(await p.locator(`#f-${name}`).inputValue(), value, `${name} kept`);
      assert.equal(await p.locator(`input[name="kind"][value="${kind}"]`).isChecked(), true);
    }
    await saveScreenshot(p, shots, 'refused');
    assert.deepEqual(await replayRuns(), [], 'no replay workflow in Temporal');
    assert.deepEqual(await replaysListed(), [], 'no replay listed');
    await p.goto(`${api}/console/replays`, { waitUntil: 'domcontentloaded' });
    await p.getByText('No replays yet.').waitFor();
  });

  it("replays a chat's turn from its Replay link under another model: the report shows the changed reply side by side with its diff, escaped and masked, and downloads as the API's formats", async () => {
    const p = page!;
    await p.goto(`${api}/console/chats/${CHAT}`, { waitUntil: 'domcontentloaded' });
    const turns = await turnIdsOnChatPage(p);
    assert.equal(turns.length, 2, 'each reply offers its turn');
    assert.ok(turns.every((t) => t.startsWith(`session:http:default:${CHAT}:turn:`)), turns.join(' '));
    await Promise.all([p.waitForURL(/\/console\/replays\/new\?turnId=/), p.locator('#transcript li[data-role="assistant"] a.replay-turn-link').first().click()]);
    assert.equal(await p.locator('#f-turnId').inputValue(), turns[0], 'the form carries the turn');
    assert.equal(await p.locator('input[name="kind"][value="turn"]').isChecked(), true);

    replayId = await startFromForm(p, turns[0]!, 'openai-compatible:other-model');
    const runs = await replayRuns();
    assert.ok(runs.includes(`replay:${replayId}`) && runs.every((w) => w.startsWith(`replay:${replayId}`)), `one replay started: ${runs.join(' ')}`);
    // the page follows the replay to its end without a reload
    await p.locator('#replay[data-status="done"]').waitFor({ timeout: 180_000 });
    assert.equal(new URL(p.url()).pathname, `/console/replays/${replayId}`);
    assert.match(await p.locator('#alternative').innerText(), /model openai-compatible:other-model/);
    const count = async (k: string) => (await p.locator(`#summary [data-count="${k}"]`).innerText()).trim();
    assert.equal(await count('total'), '1');
    assert.equal(await count('changed'), '1');
    assert.equal(await count('replies'), '1');
    assert.match(await count('not-replayable'), /^0/);

    const turn = p.locator('section.replay-turn').first();
    assert.equal(await turn.getAttribute('data-changed'), 'true');
    assert.equal(await turn.locator('.side.recorded pre.reply').innerText(), 'Recorded answer to the first question.\nThe same last line.');
    const cf = await turn.locator('.side.counterfactual pre.reply').innerText();
    assert.equal(cf, `Counterfactual answer with <b>markup</b> and ${MASK}.\nThe same last line.`, 'the markup as text, the token masked');
    assert.equal(await turn.locator('.side.counterfactual pre.reply b').count(), 0, 'no element made of the reply');
    // the line diff, drawn as the console draws a patch
    assert.match(await turn.locator('table.diff tr.diff-del').first().innerText(), /Recorded answer to the first question\./);
    assert.match(await turn.locator('table.diff tr.diff-add').first().innerText(), /Counterfactual answer with <b>markup<\/b>/);
    assert.match(await turn.locator('table.diff tr.diff-ctx').first().innerText(), /The same last line\./);
    assert.ok(!(await p.content()).includes(TOKEN), 'the API token shows nowhere on the page');
    // its run in the Temporal UI
    assert.equal(await p.locator('#run-link').getAttribute('href'), `/ui/namespaces/default/workflows/${encodeURIComponent(`replay:${replayId}`)}`);
    await saveScreenshot(p, shots, 'report');

    // the downloads: the API's formats, masked as the API serves them (the service masks every view)
    const fromApi = async (format: string) => (await fetch(`${api}/api/v1/replays/${replayId}?format=${format}`, { headers: { authorization: `Bearer ${TOKEN}` } })).text();
    for (const [id, format] of [['#download-markdown', 'markdown'], ['#download-jsonl', 'jsonl'], ['#download-json', 'json']] as const) {
      const [download] = await Promise.all([p.waitForEvent('download'), p.locator(id).click()]);
      const text = readFileSync(await download.path(), 'utf8');
      assert.ok(!text.includes(TOKEN), `${format}: masked`);
      const apiText = await fromApi(format);
      assert.ok(!apiText.includes(TOKEN), `${format}: the API masks it too`);
      if (format === 'json') assert.deepEqual(JSON.parse(text), JSON.parse(apiText));
      else assert.equal(text, apiText, format);
      assert.match(download.suggestedFilename(), new RegExp(`^replay-${replayId}\\.(md|jsonl|json)$`));
    }
    // the list: the replay with its state and what it changed
    await p.goto(`${api}/console/replays`, { waitUntil: 'domcontentloaded' });
    const row = p.locator(`table.replays tr[data-id="${replayId}"]`);
    assert.equal(await row.getAttribute('data-status'), 'done');
    const text = (await row.innerText()).replace(/\s+/g, ' ');
    assert.match(text, /done/);
    assert.match(text, /model openai-compatible:other-model/);
    assert.match(text, /the operator/);
    assert.match(text, new RegExp(`turn ${turns[0]!.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));
  });

  it('cancels a running replay from its page: the page and the list (in another tab) show it cancelled without a reload', async () => {
    const p = page!;
    await p.goto(`${api}/console/chats/${CHAT}`, { waitUntil: 'domcontentloaded' });
    const turns = await turnIdsOnChatPage(p);
    const asked = model!.requests.length;
    const id = await startFromForm(p, turns[1]!, 'openai-compatible:slow-model');
    await p.locator('#replay[data-status="running"]').waitFor();
    const list = await context!.newPage();
    try {
      await list.goto(`${api}/console/replays`, { waitUntil: 'domcontentloaded' });
      const row = list.locator(`table.replays tr[data-id="${id}"]`);
      assert.equal(await row.getAttribute('data-status'), 'running');
      assert.equal(await list.locator('#replays').getAttribute('hx-trigger'), 'every 2s', 'the list polls while one runs');
      await until('the slow model call', async () => (model!.requests.slice(asked).some((q) => (q.body as { model?: string }).model === 'slow-model') ? true : undefined), 60_000, 200);
      const answered = p.waitForResponse((r) => r.request().method() === 'POST' && r.url().endsWith(`/console/replays/${id}/cancel`));
      await p.locator('#cancel').click();
      assert.equal((await answered).status(), 200);
      await p.locator('#replay[data-status="cancelled"]').waitFor({ timeout: 90_000 });
      assert.equal(await p.locator('#cancel').count(), 0, 'no Cancel once it ended');
      await list.locator(`table.replays tr[data-id="${id}"][data-status="cancelled"]`).waitFor({ timeout: 30_000 });
      assert.equal(new URL(list.url()).pathname, '/console/replays');
      await saveScreenshot(p, shots, 'cancelled');
    } finally {
      await list.close();
    }
    assert.equal((await replaysListed()).find((r) => r.id === id)?.status, 'cancelled');
    // a replay that ended is not cancelled again: the service's refusal, in place
    const csrf = JSON.parse((await p.locator('body').getAttribute('hx-headers')) ?? '{}') as Record<string, string>;
    const again = await context!.request.post(`${api}/console/replays/${id}/cancel`, { headers: { ...csrf, 'hx-request': 'true' } });
    assert.equal(again.status(), 409);
    assert.match(await again.text(), /is not running \(cancelled\)/);
  });

  it('"Fork from here" on a reply creates the new chat through the fork service and links it', async () => {
    const p = page!;
    await p.goto(`${api}/console/chats/${CHAT}`, { waitUntil: 'domcontentloaded' });
    await p.waitForFunction(() => (globalThis as unknown as { htmx?: unknown }).htmx !== undefined);
    await saveScreenshot(p, shots, 'chat');
    const second = p.locator('#transcript li[data-role="assistant"]').nth(1);
    const answered = p.waitForResponse((r) => r.request().method() === 'POST' && r.url().endsWith(`/console/chats/${CHAT}/fork`));
    await second.locator('button.fork').click();
    assert.equal((await answered).status(), 200);
    const link = second.locator('.forked a');
    await link.waitFor();
    const newChat = (await link.innerText()).trim();
    assert.match(newChat, new RegExp(`^${CHAT}-fork-`));
    assert.equal(new URL(p.url()).pathname, `/console/chats/${CHAT}`, 'answered in place');
    await Promise.all([p.waitForURL(new RegExp(`/console/chats/${newChat}$`)), link.click()]);
    const transcript = await p.locator('#transcript').innerText();
    assert.match(transcript, /The first question, please/);
    assert.match(transcript, /Recorded answer to the first question/);
    assert.doesNotMatch(transcript, /second question/, 'the new chat starts before the turn forked from');
    const original = (((await call('GET', `/api/v1/chats/${CHAT}/messages`)).body.messages ?? []) as unknown[]).length;
    assert.equal(original, 4, 'the original chat is untouched');
    await saveScreenshot(p, shots, 'forked');
  });

  it('passes an axe-core scan with no serious or critical violation, and nothing overflows at 375 px', async () => {
    const routes = ['/console/replays', '/console/replays/new', `/console/replays/${replayId}`, `/console/chats/${CHAT}`];
    // axe is injected as a script, which the console's CSP (rightly) refuses: this context bypasses CSP for the scan only
    const scan = await browser!.newContext({ bypassCSP: true, viewport: { width: 1280, height: 900 } });
    const narrow = await browser!.newContext({ viewport: { width: 375, height: 800 } });
    try {
      const s = await signedIn(scan, '/console/replays');
      for (const route of routes) {
        await s.goto(`${api}${route}`, { waitUntil: 'domcontentloaded' });
        const bad = await seriousAxeViolations(s);
        assert.deepEqual(bad, [], `${route}: ${JSON.stringify(bad)}`);
      }
      const n = await signedIn(narrow, '/console/replays');
      for (const route of routes) {
        await n.goto(`${api}${route}`, { waitUntil: 'domcontentloaded' });
        const w = await sidewaysWidth(n);
        assert.ok(w.scroll <= w.client, `${route} overflows at 375 px: ${w.scroll} > ${w.client}`);
        if (route.includes(replayId)) await saveScreenshot(n, shots, 'report-375');
      }
    } finally {
      await scan.close();
      await narrow.close();
    }
  });
});
