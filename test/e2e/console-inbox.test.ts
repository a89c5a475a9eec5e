/**
 * The console's Inbox page in a real browser (headless Debian Chromium driven by playwright-core)
 * against `./steward start` with the scripted model server, an MCP server that went down (server-
 * everything over HTTP, killed before the start) and a local HTTP server the approved action calls:
 *  - a chat turn proposes an HTTP request; the operator approves it on the Inbox page (htmx, in
 *    place) and the reply arrives in the chat's live transcript page (SSE) without a reload; the
 *    item then shows who decided, when and how, and a second approval is refused in place (409);
 *  - a decision without the CSRF token changes nothing (403); without JavaScript the filter is a
 *    GET form and a decision a plain form POST that comes back to the list;
 *  - by keyboard: Tab reaches the reason field and the decide buttons, Enter denies;
 *  - axe-core finds no serious or critical violation on the inbox with items; at 375 px wide
 *    nothing overflows.
 * Screenshots go to test-artifacts/console-inbox/ (gitignored); with STEWARD_DOCS_SCREENSHOTS=1
 * the inbox's goes to docs/images/console-inbox.png (1000 px wide, three items).
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { artifactDir, browserSkip, launchChromium, saveScreenshot } from '../helpers/browser.js';
import { startEverythingHttp } from '../helpers/mcp-servers.js';
import { lastUserText, startModelServer, type ModelServer } from '../helpers/model-server.js';
import { repoRoot, spawnProcess, type Spawned } from '../helpers/process.js';
import { BrowserSignIn } from '../../adapters/http/sign-in.js';
import { needs } from '../helpers/requirements.js';
import { freeStewardPorts, startEnv, startSteward, stopSteward } from '../helpers/started-steward.js';
import { apiCaller, seriousAxeViolations, until } from '../helpers/console-browser.js';

const TOKEN = 'console-inbox-e2e-token-0123456789abcdef';
const tag = Date.now().toString(36);
const CHAT = `inbox-${tag}`;
const MCP_NAME = 'tickets';

/** An item's element on the Inbox page (by its inbox id). */
const itemOf = (page: Page, id: string) => page.locator(`li.inbox-item[data-id="${id}"]`);

/**
 * For the per-person sign-in tests (a member, or the admin who shaped the proposal): `page` is
 * signed in as that person; the inbox item `itemId` (e.g. `approval:apr-...`) must not offer
 * Approve, must say why in its notes, and an approval sent as the page would send it (htmx, with
 * the page's CSRF token, into the item) must be refused in place: 409, the reason shown in the
 * item (`reason` matches it), and the item still pending.
 */
export async function assertApproveRefusedInPlace(page: Page, origin: string, itemId: string, reason: RegExp): Promise<void> {
  await page.goto(`${origin}/console/inbox`, { waitUntil: 'domcontentloaded' });
  const item = itemOf(page, itemId);
  await item.waitFor();
  assert.equal(await item.locator('button[data-decision="approve"]').count(), 0, 'Approve is not offered');
  const status = await item.getAttribute('data-status');
  await page.waitForFunction(() => (globalThis as unknown as { htmx?: unknown }).htmx !== undefined);
  const answered = page.waitForResponse((r) => r.request().method() === 'POST' && r.url().endsWith(`/console/inbox/${encodeURIComponent(itemId)}/decision`));
  // what an Approve button would send, had it been offered: htmx's request from the item, its CSRF header from the page
  await page.evaluate(
    ([id]) => {
      const h = (globalThis as unknown as { htmx: { ajax(verb: string, path: string, ctx: Record<string, unknown>): Promise<void> } }).htmx;
      const li = (globalThis as unknown as { document: { querySelector(s: string): unknown } }).document.querySelector(`li.inbox-item[data-id="${id}"]`);
      void h.ajax('POST', `/console/inbox/${encodeURIComponent(id!)}/decision`, { source: li, target: li, swap: 'outerHTML', values: { decision: 'approve' } });
    },
    [itemId],
  );
  const res = await answered;
  assert.equal(res.status(), 409, `refused by the rules: ${await res.text()}`);
  const refusal = itemOf(page, itemId).locator('.error[role="alert"]');
  await refusal.waitFor();
  assert.match(await refusal.innerText(), /^Refused: /);
  assert.match(await refusal.innerText(), reason);
  assert.equal(await itemOf(page, itemId).getAttribute('data-status'), status, 'nothing changed');
}

describe('the console: Inbox page', { skip: browserSkip() || (await needs('chromium')), timeout: 600_000 }, () => {
  let model: ModelServer | undefined;
  let steward: Spawned | undefined;
  let browser: Browser | undefined;
  let web: { server: Server; port: number; hits: string[] } | undefined;
  let api = '';
  let dataDir = '';
  let stewardEnv: NodeJS.ProcessEnv = {};
  const shots = artifactDir('console-inbox');

  const call = apiCaller(() => api, TOKEN);
  type Item = { id: string; kind: string; status: string; text: string; actions: string[]; decided: { by: string | null } | null };
  const items = async (kind?: string) => ((await call('GET', `/api/v1/inbox${kind ? `?kind=${kind}` : ''}`)).body.items ?? []) as Item[];
  const send = async (text: string) => {
    const r = await call('POST', `/api/v1/chats/${CHAT}/messages`, { text });
    assert.equal(r.status, 202, JSON.stringify(r.body));
  };
  const transcript = async () => ((await call('GET', `/api/v1/chats/${CHAT}/messages`)).body.messages ?? []) as Array<{ role: string; text: string }>;
  const signInLink = async (next: string) => {
    const r = await fetch(`${api}/codec/links`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` } });
    return `${((await r.json()) as { url: string }).url}?next=${encodeURIComponent(next)}`;
  };
  /** A chat turn that proposes POST <web>/<path>; the model answers `reply` once the call is decided. Returns the pending approval's inbox item. */
  const propose = async (word: string, reply: string): Promise<Item> => {
    const before = new Set((await items('approval')).map((i) => i.id));
    // the proposing step (this message's), then the step after the decision (its tool result there)
    model!.enqueue({ toolCalls: [{ id: `call_${word}`, name: 'http_request', arguments: JSON.stringify({ method: 'POST', url: `http://127.0.0.1:${web!.port}/${word}-${tag}`, body: 'go' }) }], match: (req) => lastUserText(req.body).includes(`${word} ${tag}`) });
    model!.enqueue({ text: reply, match: (req) => JSON.stringify(req.body).includes(`call_${word}`) && (req.body as { messages?: Array<{ role: string }> }).messages?.some((m) => m.role === 'tool') === true });
    await send(`${word} ${tag}`);
    return until('the approval in the inbox', async () => (await items('approval')).find((i) => !before.has(i.id) && i.status === 'pending'), 60_000, 200);
  };

  before(async () => {
    browser = await launchChromium();
    model = await startModelServer();
    model.setDefault((req) => ({ text: `Reply to: ${lastUserText(req.body)}` }));
    const hits: string[] = [];
    const server = createServer((req, res) => {
      hits.push(`${req.method} ${req.url}`);
      req.resume();
      req.on('end', () => res.writeHead(200, { 'content-type': 'text/plain' }).end('deployed'));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    web = { server, port: (server.address() as AddressInfo).port, hits };
    dataDir = mkdtempSync(path.join(tmpdir(), 'steward-console-inbox-e2e-'));
    // an MCP server that went down: server-everything over HTTP, gone before Steward first uses it
    const everything = await startEverythingHttp();
    await everything.stop();
    const mcpConfig = path.join(dataDir, 'mcp.json');
    writeFileSync(mcpConfig, JSON.stringify({ servers: [{ name: MCP_NAME, transport: 'http', url: everything.url, readOnlyTools: ['echo'] }] }));
    const env = startEnv({
      dataDir,
      ports: await freeStewardPorts(),
      token: TOKEN,
      model: 'openai-compatible:console-inbox-e2e-model',
      modelBaseURL: model.baseURL,
      extra: { STEWARD_TEMPORAL_UI: 'true', STEWARD_TEMPORAL_UI_URL: '', STEWARD_ACTION_HTTP_ALLOW_HOSTS: '127.0.0.1', STEWARD_MCP_CONFIG: mcpConfig },
    });
    stewardEnv = env;
    const started = await startSteward(env);
    steward = started;
    api = started.api;
    await steward.waitForOutput(/Steward is running/, 60_000);
  });

  after(async () => {
    await browser?.close().catch(() => undefined);
    await stopSteward(steward);
    await model?.close();
    web?.server.closeAllConnections();
    await new Promise<void>((resolve) => (web ? web.server.close(() => resolve()) : resolve()));
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  let context: BrowserContext | undefined;
  let approved: Item | undefined;
  let taskId = '';

  it('approve a proposed action on the Inbox page: decided in place, and the reply arrives in the live transcript without a reload', async () => {
    context = await browser!.newContext({ viewport: { width: 1000, height: 900 } });
    context.setDefaultTimeout(30_000);
    // the chat's live transcript, open before anything happens
    const chat = await context.newPage();
    await chat.goto(await signInLink(`/console/chats/${CHAT}`), { waitUntil: 'domcontentloaded' });
    assert.equal(new URL(chat.url()).pathname, `/console/chats/${CHAT}`);
    await chat.waitForFunction(() => (globalThis as unknown as { htmx?: { createEventSource?: unknown } }).htmx?.createEventSource !== undefined);
    await sleep(1000);

    // an open task, and the proposal (its turn also finds the MCP server down)
    const task = await call('POST', '/api/v1/tasks', { text: `Renew the TLS certificate of the status page before Friday (${tag})`, chatId: `ops-${tag}` });
    assert.equal(task.status, 201, JSON.stringify(task.body));
    taskId = `task:${String(task.body.id)}`;
    const item = await propose('deploy', `Deployed from the inbox (${tag}).`);
    await until('the MCP server listed as down', async () => ((await items('mcp')).some((i) => i.id === `mcp:${MCP_NAME}`) ? true : undefined), 60_000, 200);
    assert.deepEqual(item.actions, ['approve', 'deny']);
    assert.equal(web!.hits.length, 0, 'nothing sent before the approval');

    const inbox = await context.newPage();
    await inbox.goto(`${api}/console/inbox`, { waitUntil: 'domcontentloaded' });
    const li = itemOf(inbox, item.id);
    // the request exactly as the chat shows it (the service's text, escaped, preformatted)
    assert.equal(await li.locator('pre.request').innerText(), item.text);
    assert.match(item.text, new RegExp(`POST http://127\\.0\\.0\\.1:${web!.port}/deploy-${tag}`));
    await itemOf(inbox, taskId).waitFor();
    const mcp = itemOf(inbox, `mcp:${MCP_NAME}`);
    assert.match(await mcp.locator('pre.request').innerText(), new RegExp(`The MCP server ${MCP_NAME} \\(http, registered through the STEWARD_MCP_CONFIG file\\) was found down`));
    assert.equal(await mcp.locator('button').count(), 0, 'nothing to decide on an MCP server');
    assert.ok(await mcp.locator('a[href="/console/knowledge"]').count());
    // newest first
    const created = await inbox.locator('li.inbox-item > article > p.meta > time').evaluateAll((ts) => ts.map((t) => (t as unknown as { getAttribute(n: string): string }).getAttribute('datetime')));
    assert.deepEqual(created, [...created].sort().reverse());
    await inbox.waitForFunction(() => (globalThis as unknown as { htmx?: unknown }).htmx !== undefined);

    // the docs' screenshot: an inbox with three items
    if (process.env.STEWARD_DOCS_SCREENSHOTS === '1') {
      const dir = path.join(repoRoot, 'docs', 'images');
      mkdirSync(dir, { recursive: true });
      await inbox.screenshot({ path: path.join(dir, 'console-inbox.png'), fullPage: true });
    } else await saveScreenshot(inbox, shots, 'inbox');

    const url = inbox.url();
    await li.locator('button[data-decision="approve"]').click();
    await inbox.locator(`li.inbox-item[data-id="${item.id}"][data-status="approved"]`).waitFor({ timeout: 30_000 });
    assert.equal(inbox.url(), url, 'decided in place');
    assert.match(await itemOf(inbox, item.id).locator('.decided').innerText(), /^Decided: approved by the operator at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC/);
    assert.match(await itemOf(inbox, item.id).locator('.done[role="status"]').innerText(), /Approved: the action runs now/);
    assert.equal(await itemOf(inbox, item.id).locator('button').count(), 0, 'nothing more to decide');

    // the reply, in the transcript page opened before, by its event stream
    await chat.bringToFront();
    await chat.locator('#transcript li[data-role="assistant"]', { hasText: `Deployed from the inbox (${tag}).` }).waitFor({ timeout: 60_000 });
    assert.equal(new URL(chat.url()).pathname, `/console/chats/${CHAT}`, 'no reload');
    assert.deepEqual(web!.hits, [`POST /deploy-${tag}`], 'the approved request ran once');
    approved = item;
    await chat.close();
    await inbox.close();
  });

  it('after deciding, the item shows who decided; a second approval is refused in place (409) and changes nothing', async () => {
    assert.ok(approved);
    const page = await context!.newPage();
    await page.goto(`${api}/console/inbox?kind=approval`, { waitUntil: 'domcontentloaded' });
    const li = itemOf(page, approved.id);
    assert.equal(await li.getAttribute('data-status'), 'approved');
    assert.match(await li.locator('.decided').innerText(), /approved by the operator/);
    const listed = (await items('approval')).find((i) => i.id === approved!.id);
    assert.equal(listed?.decided?.by, 'the operator');
    // an Approve sent again (as from a page opened before the decision): refused in place, the item as it is
    await assertApproveRefusedInPlace(page, api, approved.id, /Approval \S+ was already approved by the operator; nothing changed\./);
    assert.equal(await itemOf(page, approved.id).getAttribute('data-status'), 'approved');
    assert.equal(web!.hits.length, 1, 'ran once');
    await page.close();
  });

  it('a decision without the CSRF token changes nothing; without JavaScript the filter and a decision work as plain forms', async () => {
    const url = `${api}/console/inbox/${encodeURIComponent(taskId)}/decision`;
    assert.equal((await context!.request.post(url, { form: { decision: 'close' }, maxRedirects: 0 })).status(), 403);
    assert.equal((await context!.request.post(url, { form: { decision: 'close', _csrf: 'forged' }, maxRedirects: 0 })).status(), 403);
    assert.equal((await context!.request.post(url, { headers: { 'x-csrf-token': 'forged', 'hx-request': 'true' }, form: { decision: 'close' }, maxRedirects: 0 })).status(), 403);
    await sleep(300);
    assert.equal((await items('task')).find((i) => i.id === taskId)?.status, 'open', 'the forged requests changed nothing');

    const cookies = await context!.cookies();
    const plain = await browser!.newContext({ javaScriptEnabled: false, viewport: { width: 1000, height: 900 } });
    try {
      await plain.addCookies(cookies);
      const page = await plain.newPage();
      await page.goto(`${api}/console/inbox`, { waitUntil: 'domcontentloaded' });
      await page.locator('#inbox-kind').selectOption('task');
      await page.getByRole('button', { name: 'Filter' }).click();
      await page.waitForURL(/\/console\/inbox\?kind=task$/);
      assert.equal(await page.locator('li.inbox-item:not([data-kind="task"])').count(), 0, 'tasks only');
      const li = itemOf(page, taskId);
      await li.locator('input[name="reason"]').fill('renewed by hand');
      await li.locator('button[data-decision="close"]').click();
      await page.waitForURL(/\/console\/inbox\?kind=task#item-task-/);
      assert.equal(await itemOf(page, taskId).getAttribute('data-status'), 'closed');
      assert.match(await itemOf(page, taskId).locator('.decided').innerText(), /Decided: closed/);
      // a plain form's refusal: the list again (409), the reason in the item
      const csrf = await page.locator('form[action="/console/sign-out"] input[name="_csrf"]').inputValue();
      const again = await plain.request.post(url, { form: { decision: 'close', _csrf: csrf, back: 'task' }, maxRedirects: 0 });
      assert.equal(again.status(), 409);
      const html = await again.text();
      assert.match(html, /<p class="error" role="alert">Refused: [^<]*closed/);
      assert.ok(html.includes(`data-id="${taskId}"`));
    } finally {
      await plain.close();
    }
    assert.equal((await items('task')).find((i) => i.id === taskId)?.status, 'closed');
  });

  it('by keyboard: Tab reaches the reason field and the decide buttons; Enter denies, in place', async () => {
    const item = await propose('rollback', `Not rolled back (${tag}).`);
    const page = await context!.newPage();
    await page.goto(`${api}/console/inbox`, { waitUntil: 'domcontentloaded' });
    await page.waitForFunction(() => (globalThis as unknown as { htmx?: unknown }).htmx !== undefined);
    const focused = () => page.evaluate(() => {
      const el = (globalThis as unknown as { document: { activeElement: { closest(s: string): { getAttribute(n: string): string | null } | null; getAttribute(n: string): string | null } | null } }).document.activeElement;
      return { item: el?.closest('li.inbox-item')?.getAttribute('data-id') ?? null, name: el?.getAttribute('name') ?? null, decision: el?.getAttribute('data-decision') ?? null };
    });
    let at = await focused();
    for (let i = 0; i < 200 && !(at.item === item.id && at.name === 'reason'); i++) {
      await page.keyboard.press('Tab');
      at = await focused();
    }
    assert.deepEqual([at.item, at.name], [item.id, 'reason'], 'Tab reaches the reason field');
    await page.keyboard.type('not during the freeze');
    await page.keyboard.press('Tab');
    assert.deepEqual(await focused(), { item: item.id, name: 'decision', decision: 'approve' }, 'then Approve');
    await page.keyboard.press('Tab');
    assert.deepEqual(await focused(), { item: item.id, name: 'decision', decision: 'deny' }, 'then Deny');
    await page.keyboard.press('Enter');
    await page.locator(`li.inbox-item[data-id="${item.id}"][data-status="denied"]`).waitFor({ timeout: 30_000 });
    assert.match(await itemOf(page, item.id).locator('.decided').innerText(), /Decided: denied by the operator at .* \(reason: not during the freeze\)/);
    await until('the model told of the denial', async () => ((await transcript()).some((m) => m.role === 'assistant' && m.text === `Not rolled back (${tag}).`) ? true : undefined), 60_000, 200);
    assert.ok(!web!.hits.some((h) => h.includes('rollback')), 'a denied request never runs');
    await page.close();
  });

  it('the inbox with items passes an axe-core scan (no serious or critical violation) and does not overflow at 375 px', async () => {
    // a pending item too, so that the scan sees the decide form
    const t = await call('POST', '/api/v1/tasks', { text: `Archive last quarter's incident notes (${tag})`, chatId: `ops-${tag}` });
    assert.equal(t.status, 201);
    const scan = await browser!.newContext({ bypassCSP: true, viewport: { width: 1280, height: 900 } });
    try {
      const p = await scan.newPage();
      await p.goto(await signInLink('/console/inbox'), { waitUntil: 'domcontentloaded' });
      for (const route of ['/console/inbox', '/console/inbox?kind=approval', '/console/inbox?kind=widgets']) {
        await p.goto(`${api}${route}`, { waitUntil: 'domcontentloaded' });
        if (route === '/console/inbox') assert.ok((await p.locator('li.inbox-item').count()) >= 4, 'items to scan');
        const bad = await seriousAxeViolations(p);
        assert.deepEqual(bad, [], `${route}: ${JSON.stringify(bad)}`);
      }
    } finally {
      await scan.close();
    }
    const narrow = await context!.newPage();
    await narrow.setViewportSize({ width: 375, height: 800 });
    await narrow.goto(`${api}/console/inbox`, { waitUntil: 'domcontentloaded' });
    const width = await narrow.evaluate(() => {
      const d = (globalThis as unknown as { document: { documentElement: { scrollWidth: number; clientWidth: number } } }).document.documentElement;
      return { scroll: d.scrollWidth, client: d.clientWidth };
    });
    assert.ok(width.scroll <= width.client, `no horizontal overflow at 375 px (${width.scroll} > ${width.client})`);
    await saveScreenshot(narrow, shots, 'inbox-375');
    await narrow.close();
    await context!.close();
  });
  it('people signed in as themselves: the admin who shaped a proposal may not approve it in the page, and a member may not approve at all', async () => {
    /** A person with an OpenHarness shell of their own (`steward shells issue NAME --role R`): their identity and token. */
    const shell = async (name: string, role: string) => {
      const issue = spawnProcess('./steward', ['shells', 'issue', name, '--role', role], stewardEnv);
      assert.equal((await issue.exited).code, 0, issue.output());
      const m = /\(id (\S+), identity (\S+)\)\.[\s\S]*\n(oh_[A-Za-z0-9_-]{43})\n/.exec(issue.output());
      assert.ok(m, `the shell is issued: ${issue.output()}`);
      return { identity: m[2]!, token: m[3]! };
    };
    const ada = await shell(`ada-${tag}`, 'admin');
    const mia = await shell(`mia-${tag}`, 'member');
    // Ada asks for the deploy through her shell: the proposal is hers
    const before = new Set((await items('approval')).map((i) => i.id));
    model!.enqueue({ toolCalls: [{ id: 'call_ada', name: 'http_request', arguments: JSON.stringify({ method: 'POST', url: `http://127.0.0.1:${web!.port}/ada-${tag}`, body: 'go' }) }], match: (req) => lastUserText(req.body).includes(`ada deploys ${tag}`) });
    const r = await fetch(`${api}/api/openharness/v1`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ada.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ protocol_version: '1.0.0', request_id: `ada-${tag}`, request: { context: { session_id: `ada-${tag}`, user_intent: `ada deploys ${tag}` } } }),
    });
    assert.equal(r.status, 200, await r.text());
    const proposal = await until('Ada\'s proposal in the inbox', async () => (await items('approval')).find((i) => !before.has(i.id) && i.status === 'pending'), 60_000, 200);

    // each person signs in with their own one-time link (what `/console` in a DM gives: signed with the API token)
    const links = new BrowserSignIn({ apiToken: TOKEN });
    const people = await browser!.newContext({ viewport: { width: 1000, height: 900 } });
    const members = await browser!.newContext({ viewport: { width: 1000, height: 900 } });
    try {
      const adaPage = await people.newPage();
      await adaPage.goto(`${api}/console/login/${links.issuePersonLink(ada.identity).token}`, { waitUntil: 'domcontentloaded' });
      assert.match(await adaPage.locator('#viewer').innerText(), new RegExp(`ada-${tag} \\(admin\\)`));
      // Ada shaped it: the page offers no Approve, says why, and an approve sent anyway is refused in place (409)
      await assertApproveRefusedInPlace(adaPage, api, proposal.id, /Not applied/);
      assert.match(await itemOf(adaPage, proposal.id).locator('.notes').innerText(), /You shaped this proposal, so you may not approve it/);

      const miaPage = await members.newPage();
      await miaPage.goto(`${api}/console/login/${links.issuePersonLink(mia.identity).token}`, { waitUntil: 'domcontentloaded' });
      assert.equal(new URL(miaPage.url()).pathname, '/console/inbox', 'a member lands on their inbox');
      assert.match(await miaPage.locator('#viewer').innerText(), new RegExp(`mia-${tag} \\(member\\)`));
      assert.deepEqual(await miaPage.locator('nav a').allInnerTexts(), ['Inbox'], 'the nav shows a member their inbox alone');
      assert.equal(await itemOf(miaPage, proposal.id).count(), 0, "a member does not see others' requests");
      assert.equal((await members.request.get(`${api}/console/chats`, { maxRedirects: 0 })).status(), 403, 'nor the admin pages');
      // an approval sent by hand with her own CSRF token: refused by the rules (409), nothing changes
      const csrf = JSON.parse((await miaPage.locator('body').getAttribute('hx-headers')) ?? '{}') as Record<string, string>;
      const forged = await members.request.post(`${api}/console/inbox/${encodeURIComponent(proposal.id)}/decision`, { headers: { ...csrf, 'hx-request': 'true' }, form: { decision: 'approve' }, maxRedirects: 0 });
      assert.equal(forged.status(), 409, await forged.text());
      assert.match(await forged.text(), /admin role/);
      // the chat event stream takes an admin's sign-in, not a member's
      const stream = async (ctx: BrowserContext) => {
        const cookie = (await ctx.cookies()).map((k) => `${k.name}=${k.value}`).join('; ');
        const ac = new AbortController();
        try {
          return (await fetch(`${api}/api/v1/chats/${CHAT}/events`, { headers: { cookie }, signal: ac.signal })).status;
        } finally {
          ac.abort();
        }
      };
      assert.equal(await stream(people), 200, "an admin's sign-in reads the event stream");
      assert.equal(await stream(members), 401, "a member's does not");
      // and a second use of a link signs nobody in
      const used = links.issuePersonLink(mia.identity).token;
      assert.equal((await members.request.get(`${api}/console/login/${used}`, { maxRedirects: 0 })).status(), 303);
      assert.equal((await members.request.get(`${api}/console/login/${used}`, { maxRedirects: 0 })).status(), 401);
    } finally {
      await people.close();
      await members.close();
    }
    assert.equal((await items('approval')).find((i) => i.id === proposal.id)?.status, 'pending', 'still waiting: neither refusal decided it');
    assert.equal(web!.hits.filter((h) => h.includes(`/ada-${tag}`)).length, 0, 'nothing ran');
    // the operator denies it, so the turn ends
    assert.equal((await call('POST', `/api/v1/inbox/${encodeURIComponent(proposal.id)}/decision`, { decision: 'deny', reason: 'test over' })).status, 200);
  });
});
