/**
 * The console's Knowledge and tools page in a real browser (headless Debian Chromium driven by
 * playwright-core) against `./steward start` with the scripted model server, a workspace folder
 * with a few files, an operator skill, and server-everything (the MCP server from npm) over
 * Streamable HTTP:
 *  - the page shows the workspace's index state (files, sections, indexing done, when); a search
 *    typed with the keyboard finds a planted word in place (htmx), the plain GET form finds it on
 *    the workspace's page, and a document's markup comes back as text; Reindex runs in place; an
 *    indexing run terminated in Temporal shows as failed with how, and Reindex mends it;
 *  - the MCP server's tools are listed with their approval policy and read-only mark, a server
 *    that cannot be reached says so in place (409); the
 *    heartbeat's parts and the skills are shown;
 *  - memories the agent proposed: the pending one links to the inbox, the approved one is
 *    forgotten in place (out of the recall), and forgetting it again is refused in place (409);
 *    bad input is 400 and changes nothing;
 *  - axe-core finds no serious or critical violation; at 375 px nothing overflows sideways.
 * Screenshots go to test-artifacts/console/ (gitignored).
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Client, Connection } from '@temporalio/client';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { artifactDir, browserSkip, launchChromium, saveScreenshot } from '../helpers/browser.js';
import { startEverythingHttp } from '../helpers/mcp-servers.js';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';
import type { Spawned } from '../helpers/process.js';
import { needs } from '../helpers/requirements.js';
import { freeStewardPorts, startEnv, startSteward, stopSteward } from '../helpers/started-steward.js';
import { seriousAxeViolations, until } from '../helpers/console-browser.js';

const TOKEN = 'console-knowledge-e2e-token-0123456789';
const tag = Date.now().toString(36);
const WS = `kb-${tag}`;
const PLANTED = `zephyrquartz${tag}`;
const CHAT = `kb-chat-${tag}`;
const MODEL = 'openai-compatible:console-knowledge-model';

describe('the console: knowledge and tools', { skip: browserSkip() || (await needs('chromium')), timeout: 600_000 }, () => {
  let model: ModelServer | undefined;
  let everything: Awaited<ReturnType<typeof startEverythingHttp>> | undefined;
  let steward: Spawned | undefined;
  let browser: Browser | undefined;
  let context: BrowserContext | undefined;
  let page: Page | undefined;
  let api = '';
  let dataDir = '';
  const shots = artifactDir('console');
  const memories = { approved: '', pending: '' };
  /** The files the index holds, as the API says (the page must say the same). */
  let documents = 0;
  let temporalAddress = '';

  const call = async (method: string, route: string, body?: unknown) => {
    const r = await fetch(`${api}${route}`, {
      method,
      headers: { authorization: `Bearer ${TOKEN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await r.text();
    return { status: r.status, text };
  };
  const signInLink = async () => {
    const r = await fetch(`${api}/codec/links`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` } });
    return ((await r.json()) as { url: string }).url;
  };
  const memoryRows = async () =>
    (await call('GET', `/api/v1/memories/export?workspace=${WS}`)).text
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { id: string; text: string; status: string });
  /** The page's CSRF token (htmx sends it from the body's hx-headers). */
  const csrfOf = async (p: Page) => (JSON.parse((await p.locator('body').getAttribute('hx-headers')) ?? '{}') as { 'X-CSRF-Token': string })['X-CSRF-Token'];

  before(async () => {
    browser = await launchChromium();
    model = await startModelServer();
    model.setDefault(() => ({ text: 'Noted.' }));
    everything = await startEverythingHttp();
    dataDir = mkdtempSync(path.join(tmpdir(), 'steward-console-kb-'));
    const folder = path.join(dataDir, 'kb-folder');
    mkdirSync(path.join(folder, 'notes'), { recursive: true });
    writeFileSync(path.join(folder, 'notes', 'deploy.md'), `# Deploying\n\nThe release train is called ${PLANTED}. It leaves on Tuesdays.\n`);
    writeFileSync(path.join(folder, 'notes', 'markup.md'), `# Markup\n\nmarkupword${tag} <script>document.title='owned'</script> <b>bold</b>\n`);
    writeFileSync(path.join(folder, 'readme.txt'), 'A workspace for the console test.\n');
    mkdirSync(path.join(folder, 'skills', 'rollback'), { recursive: true });
    writeFileSync(path.join(folder, 'skills', 'rollback', 'SKILL.md'), '---\nname: rollback\ndescription: Roll back a failed deployment\n---\nRevert the release, then tell the channel.\n');
    const skillsDir = path.join(dataDir, 'skills');
    mkdirSync(path.join(skillsDir, 'triage'), { recursive: true });
    writeFileSync(path.join(skillsDir, 'triage', 'SKILL.md'), '---\nname: triage\ndescription: Sort incoming reports by urgency\nroles: [admin]\n---\nRead, rank, reply.\n');
    const ports = await freeStewardPorts();
    temporalAddress = `127.0.0.1:${ports.temporal}`;
    const env = startEnv({
      dataDir,
      ports,
      token: TOKEN,
      model: MODEL,
      modelBaseURL: model.baseURL,
      extra: { STEWARD_TEMPORAL_UI: 'true', STEWARD_TEMPORAL_UI_URL: '', STEWARD_SKILLS_DIR: skillsDir, STEWARD_MEMORY_APPROVAL: 'all' },
    });
    const started = await startSteward(env);
    steward = started;
    api = started.api;
    await steward.waitForOutput(/Steward is running/, 60_000);

    // the workspace (indexed by the background worker), the MCP server, a chat bound to the workspace
    const ws = await call('POST', '/api/v1/workspaces', { name: WS, folder });
    assert.equal(ws.status, 201, ws.text);
    const reg = await call('POST', '/api/v1/mcp/servers', { name: 'every', transport: 'http', url: everything.url, allowTools: ['echo', 'get-sum'], readOnlyTools: ['echo'] });
    assert.equal(reg.status, 201, reg.text);
    const down = await call('POST', '/api/v1/mcp/servers', { name: 'gone', transport: 'http', url: 'http://127.0.0.1:9/mcp' });
    assert.equal(down.status, 201, down.text);
    const bound = await call('POST', `/api/v1/workspaces/${WS}/chats`, { chatId: CHAT });
    assert.equal(bound.status, 200, bound.text);

    // two memories proposed by the agent (both wait: STEWARD_MEMORY_APPROVAL=all); one approved
    model.enqueue({
      toolCalls: [
        { id: 'call_a', name: 'remember', arguments: JSON.stringify({ text: `The build server is called ${tag}-alpha.`, kind: 'fact', scope: 'workspace' }) },
        { id: 'call_b', name: 'remember', arguments: JSON.stringify({ text: `Deploys need <two> reviewers ${tag}.`, kind: 'fact', scope: 'workspace' }) },
      ],
    });
    model.enqueue({ text: 'Noted.' });
    const sent = await call('POST', `/api/v1/chats/${CHAT}/messages`, { text: 'Remember two things' });
    assert.equal(sent.status, 202, sent.text);
    const rows = await until('the two memories', async () => {
      const r = await memoryRows();
      return r.length >= 2 ? r : undefined;
    }, 90_000);
    memories.approved = rows.find((m) => m.text.includes('alpha'))!.id;
    memories.pending = rows.find((m) => m.text.includes('reviewers'))!.id;
    const approved = await call('POST', `/api/v1/memories/${memories.approved}/approve`);
    assert.equal(approved.status, 200, approved.text);

    // the index has the files
    documents = await until('the workspace indexed', async () => {
      const r = await call('GET', `/api/v1/workspaces/${WS}`);
      const body = JSON.parse(r.text) as { index?: { documents: number; state?: string } };
      return body.index && body.index.documents >= 3 && body.index.state === 'done' ? body.index.documents : undefined;
    }, 90_000);

    context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    context.setDefaultTimeout(30_000);
    page = await context.newPage();
    await page.goto(`${await signInLink()}?next=${encodeURIComponent('/console/knowledge')}`, { waitUntil: 'domcontentloaded' });
    assert.equal(new URL(page.url()).pathname, '/console/knowledge');
  });

  after(async () => {
    await browser?.close().catch(() => undefined);
    await stopSteward(steward);
    await everything?.stop();
    await model?.close();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it("shows the workspace's index state, skills and heartbeat parts", async () => {
    const card = page!.locator(`#ws-${WS}`);
    assert.equal(await card.locator('[data-field="documents"]').innerText(), String(documents));
    assert.match(await card.locator('[data-field="indexing"]').innerText(), /^done/);
    assert.match(await card.locator('[data-field="last-indexed"] time').getAttribute('datetime') ?? '', /^\d{4}-\d\d-\d\dT/);
    assert.ok(Number(await card.locator('[data-field="chunks"]').innerText()) >= 3);
    // the operator's skill, with who may use it
    const triage = page!.locator('table.skills tr', { hasText: 'triage' });
    assert.match(await triage.innerText(), /Sort incoming reports by urgency[\s\S]*the operator's skills folder[\s\S]*admin/);
    // the heartbeat: the database and Temporal parts, with their last success
    await page!.locator('table.heartbeat tr[data-part]').first().waitFor();
    const parts = await page!.locator('table.heartbeat tr[data-part]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-part')));
    assert.ok(parts.length >= 2, JSON.stringify(parts));
  });

  it('a search typed with the keyboard finds the planted word in place; markup in a document comes back as text', async () => {
    // keyboard only: Tab to the workspace's search box, type, Enter
    const box = page!.locator(`#ws-${WS} input[name="q"]`);
    let reached = false;
    for (let i = 0; i < 80 && !reached; i++) {
      await page!.keyboard.press('Tab');
      reached = await box.evaluate((el) => el === (globalThis as unknown as { document: { activeElement: unknown } }).document.activeElement);
    }
    assert.ok(reached, 'the search box is reachable with Tab');
    await page!.keyboard.type(PLANTED);
    await page!.keyboard.press('Enter');
    const hit = page!.locator(`#hits-${WS} li`, { hasText: 'notes/deploy.md' });
    await hit.waitFor();
    assert.match(await hit.innerText(), new RegExp(`release train is called ${PLANTED}`));
    assert.match(await hit.innerText(), /score \d/);
    assert.equal(new URL(page!.url()).pathname, '/console/knowledge', 'in place, no navigation');

    await box.fill(`markupword${tag}`);
    await box.press('Enter');
    const marked = page!.locator(`#hits-${WS} li`, { hasText: 'notes/markup.md' });
    await marked.waitFor();
    assert.match(await marked.innerText(), /<script>document\.title='owned'<\/script> <b>bold<\/b>/);
    assert.equal(await page!.locator(`#hits-${WS} script, #hits-${WS} b`).count(), 0);
    assert.notEqual(await page!.title(), 'owned');
  });

  it("the plain GET form finds it on the workspace's page; bad input is 400", async () => {
    const p = await context!.newPage();
    try {
      const r = await p.goto(`${api}/console/knowledge/workspaces/${WS}?q=${PLANTED}`, { waitUntil: 'domcontentloaded' });
      assert.equal(r?.status(), 200);
      await p.locator(`#hits-${WS} li`, { hasText: 'notes/deploy.md' }).waitFor();
      assert.equal(await p.locator(`#state-${WS} [data-field="documents"]`).innerText(), String(documents));
      // the workspace's own skill
      assert.match(await p.locator('table.skills').innerText(), /rollback[\s\S]*Roll back a failed deployment[\s\S]*workspace/);
      const tooLong = await p.goto(`${api}/console/knowledge/workspaces/${WS}?q=${'x'.repeat(501)}`);
      assert.equal(tooLong?.status(), 400);
      assert.match(await p.locator(`#hits-${WS}`).innerText(), /at most 500 characters/);
      const unknown = await p.goto(`${api}/console/knowledge/workspaces/no-such-${tag}`);
      assert.equal(unknown?.status(), 404);
      const badName = await p.goto(`${api}/console/knowledge/workspaces/Bad%20Name`);
      assert.equal(badName?.status(), 404);
    } finally {
      await p.close();
    }
    const empty = await context!.request.get(`${api}/console/knowledge/workspaces/${WS}/search?q=`, { headers: { 'hx-request': 'true' } });
    assert.equal(empty.status(), 400);
    assert.match(await empty.text(), /say what to search for/);
  });

  it('Reindex runs in place and the index state follows it', async () => {
    const before = (await call('GET', `/api/v1/workspaces/${WS}`)).text;
    const startedBefore = (JSON.parse(before) as { index: { startedAt?: string } }).index.startedAt;
    const card = page!.locator(`#ws-${WS}`);
    await card.locator('button', { hasText: 'Reindex' }).click();
    await card.locator(`#reindex-${WS}`, { hasText: `Indexing ${WS} again.` }).waitFor();
    // a new indexing run, then done again (the state polls itself)
    await until('a new indexing run', async () => {
      const st = (JSON.parse((await call('GET', `/api/v1/workspaces/${WS}`)).text) as { index: { startedAt?: string } }).index;
      return st.startedAt && st.startedAt !== startedBefore ? true : undefined;
    }, 30_000);
    await card.locator(`#state-${WS}[data-state="done"]`).waitFor({ timeout: 60_000 });
    assert.equal(await card.locator('[data-field="documents"]').innerText(), String(documents));
  });

  it('an indexing run terminated in Temporal shows as failed, with how; Reindex mends it', async () => {
    const connection = await Connection.connect({ address: temporalAddress });
    try {
      const client = new Client({ connection });
      // a run that waits out its settling second, terminated before it indexes
      const r = await call('POST', `/api/v1/workspaces/${WS}/reindex`, {});
      assert.equal(r.status, 202, r.text);
      await client.workflow.getHandle(`workspace-index:${WS}`).terminate(`stopped by the test ${tag}`);
    } finally {
      await connection.close();
    }
    await page!.reload({ waitUntil: 'domcontentloaded' });
    const card = page!.locator(`#ws-${WS}`);
    assert.equal(await card.locator(`#state-${WS}`).getAttribute('data-state'), 'failed');
    assert.match(await card.locator('[data-field="indexing"]').innerText(), new RegExp(`failed: terminated: stopped by the test ${tag}`));
    await card.locator('button', { hasText: 'Reindex' }).click();
    await card.locator(`#state-${WS}[data-state="done"]`).waitFor({ timeout: 60_000 });
  });

  it("lists the MCP server's tools with their approval policy and read-only mark", async () => {
    const server = page!.locator('#mcp-every');
    assert.match(await server.locator('dl').innerText(), /http/);
    const echo = server.locator('table.tools tr[data-tool="echo"]');
    await echo.waitFor({ timeout: 60_000 });
    assert.match(await echo.innerText(), /every\.echo[\s\S]*yes[\s\S]*never[\s\S]*read-only/);
    const sum = server.locator('table.tools tr[data-tool="get-sum"]');
    assert.match(await sum.innerText(), /every\.get-sum[\s\S]*yes[\s\S]*always/);
    assert.doesNotMatch(await sum.innerText(), /read-only/);
    assert.match(await server.locator('table.tools tr[data-tool="get-env"]').innerText(), /no: not on the allowTools list/);
    console.log(`screenshot: ${await saveScreenshot(page!, shots, 'knowledge')}`);
    // a server that cannot be reached: said in place, the rest of the page unharmed
    const gone = page!.locator('#mcp-gone');
    await gone.locator('.tools-slot .error').waitFor({ timeout: 60_000 });
    assert.match(await gone.locator('.tools-slot').innerText(), /the MCP server gone is unavailable/);
    // the server's own page lists them too (no htmx)
    const p = await context!.newPage();
    try {
      const r = await p.goto(`${api}/console/knowledge/mcp/every`);
      assert.equal(r?.status(), 200);
      assert.ok((await p.locator('table.tools tr[data-tool]').count()) >= 3);
      assert.equal((await p.goto(`${api}/console/knowledge/mcp/nothing-here`))?.status(), 404);
    } finally {
      await p.close();
    }
  });

  it('memories: the pending one links to the inbox; Forget works in place; forgetting again is refused in place (409)', async () => {
    const pending = page!.locator(`#memory-${memories.pending}`);
    assert.equal(await pending.getAttribute('data-status'), 'pending');
    assert.equal(await pending.locator('a', { hasText: 'Decide in the inbox' }).getAttribute('href'), '/console/inbox?kind=memory');
    assert.match(await pending.innerText(), /Deploys need <two> reviewers/);
    const row = page!.locator(`#memory-${memories.approved}`);
    assert.equal(await row.getAttribute('data-status'), 'active');
    assert.match(await row.innerText(), /approved[\s\S]*proposed for/);
    // by keyboard: focus the button, Enter
    await row.locator('button', { hasText: 'Forget' }).focus();
    await page!.keyboard.press('Enter');
    await page!.locator(`#memory-${memories.approved}[data-status="forgotten"]`).waitFor();
    assert.match(await page!.locator(`#memory-${memories.approved}`).innerText(), /Forgotten: no longer recalled/);
    assert.equal((await memoryRows()).find((m) => m.id === memories.approved)?.status, 'forgotten');

    // again (a second tab's stale button): refused in place, nothing changes
    const csrf = await csrfOf(page!);
    const again = await context!.request.post(`${api}/console/knowledge/memories/${memories.approved}/forget`, { headers: { 'x-csrf-token': csrf, 'hx-request': 'true' } });
    assert.equal(again.status(), 409);
    assert.match(await again.text(), new RegExp(`<tr id="memory-${memories.approved}"[\\s\\S]*Refused: memory ${memories.approved} is forgotten already`));
    const plain = await context!.request.post(`${api}/console/knowledge/memories/${memories.approved}/forget`, { form: { _csrf: csrf }, maxRedirects: 0 });
    assert.equal(plain.status(), 409);
    // bad input: 400; the pending one is untouched
    const bad = await context!.request.post(`${api}/console/knowledge/memories/nope/forget`, { headers: { 'x-csrf-token': csrf, 'hx-request': 'true' } });
    assert.equal(bad.status(), 400);
    assert.match(await bad.text(), /a memory id looks like/);
    // without the CSRF token: refused before anything
    const forged = await context!.request.post(`${api}/console/knowledge/memories/${memories.pending}/forget`, { headers: { 'hx-request': 'true' } });
    assert.equal(forged.status(), 403);
    assert.equal((await memoryRows()).find((m) => m.id === memories.pending)?.status, 'pending');
  });

  it('no serious or critical axe violation; nothing overflows at 375 px', async () => {
    const routes = ['/console/knowledge', `/console/knowledge/workspaces/${WS}?q=${PLANTED}`, '/console/knowledge/mcp/every'];
    // axe is injected as a script, which the console's CSP (rightly) refuses: this context bypasses CSP for the scan only
    const scan = await browser!.newContext({ bypassCSP: true, viewport: { width: 1280, height: 900 } });
    const narrow = await browser!.newContext({ viewport: { width: 375, height: 800 } });
    try {
      const p = await scan.newPage();
      await p.goto(`${await signInLink()}?next=%2Fconsole%2Fknowledge`);
      for (const route of routes) {
        await p.goto(`${api}${route}`, { waitUntil: 'domcontentloaded' });
        if (route === '/console/knowledge') await p.locator('#mcp-every table.tools').waitFor({ timeout: 60_000 });
        const bad = await seriousAxeViolations(p);
        assert.deepEqual(bad, [], `${route}: ${JSON.stringify(bad)}`);
      }
      const n = await narrow.newPage();
      await n.goto(`${await signInLink()}?next=%2Fconsole%2Fknowledge`);
      for (const route of routes) {
        await n.goto(`${api}${route}`, { waitUntil: 'domcontentloaded' });
        if (route === '/console/knowledge') await n.locator('#mcp-every table.tools').waitFor({ timeout: 60_000 });
        const { scroll, width } = await n.evaluate(() => {
          const root = (globalThis as unknown as { document: { documentElement: { scrollWidth: number; clientWidth: number } } }).document.documentElement;
          return { scroll: root.scrollWidth, width: root.clientWidth };
        });
        assert.ok(scroll <= width, `${route}: ${scroll} px of content in a ${width} px window`);
        if (route === '/console/knowledge') console.log(`screenshot: ${await saveScreenshot(n, shots, 'knowledge-375')}`);
      }
    } finally {
      await scan.close();
      await narrow.close();
    }
  });
});
