/**
 * The console's Repository changes page in a real browser (headless Debian Chromium driven by
 * playwright-core) against `./steward start` with the scripted model server and a local bare git
 * repository as the change's remote (real Temporal, database, git and bubblewrap):
 *  - a change whose intake lacks its scope waits with one clarifying question; the page shows it,
 *    the answer typed and sent by keyboard goes through the change service's answer (the
 *    workflow's update), and the page follows the change (no reload) until it is done;
 *  - from the list (filtered by state, newest first) to the change: its timeline, draft, plan,
 *    gate verdict with its check, and its patch drawn as a diff with the removed and added lines;
 *  - an answer when no question is open is refused in place (409), an empty one is 400, a POST
 *    without the CSRF token changes nothing (403); the raw patch downloads;
 *  - axe-core finds no serious or critical violation on the list and the change; at 375 px
 *    nothing overflows sideways; the list is usable by keyboard.
 * Screenshots go to test-artifacts/console/ (gitignored).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { artifactDir, browserSkip, launchChromium, saveScreenshot } from '../helpers/browser.js';
import { changeModel, GREETING_DRAFT } from '../helpers/change-model.js';
import { createGitFixture, type GitFixture } from '../helpers/git-fixture.js';
import { preloadOpenApi, startGitHubDouble, type GitHubDouble } from '../helpers/github-double.js';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';
import type { Spawned } from '../helpers/process.js';
import { needs } from '../helpers/requirements.js';
import { freeStewardPorts, startEnv, startSteward, stopSteward } from '../helpers/started-steward.js';
import { apiCaller, until } from '../helpers/console-browser.js';

const require = createRequire(import.meta.url);
/** The page's document, as code evaluated in the browser sees it (this file is compiled without the DOM library). */
interface PageDocument {
  documentElement: { scrollWidth: number; clientWidth: number };
  activeElement: { textContent: string | null; getAttribute(name: string): string | null } | null;
}

const TOKEN = 'console-changes-e2e-token-0123456789';
const GH_TOKEN = `ghs_${'c0ffee'.repeat(6)}`;
const MODEL = 'openai-compatible:console-changes-model';
const REPO = `demo-${Date.now().toString(36)}`;
const SEED = {
  'greeting.txt': 'Hello\n',
  'test.sh': '#!/bin/sh\ngrep -q "Hello, Steward" greeting.txt || { echo "greeting.txt does not greet Steward" >&2; exit 1; }\necho "greeting ok"\n',
  'README.md': '# demo\n',
};

async function axeSerious(p: Page): Promise<Array<{ id: string; impact: string; help: string }>> {
  await p.addScriptTag({ path: require.resolve('axe-core/axe.min.js') });
  const violations = await p.evaluate(async () => {
    const axe = (globalThis as unknown as { axe: { run(): Promise<{ violations: Array<{ id: string; impact: string; help: string }> }> } }).axe;
    return (await axe.run()).violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help }));
  });
  return violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
}

describe('the console: repository changes', { skip: browserSkip() || (await needs('chromium')) || (await needs('bubblewrap')), timeout: 600_000 }, () => {
  let model: ModelServer | undefined;
  let steward: Spawned | undefined;
  let browser: Browser | undefined;
  let fx: GitFixture | undefined;
  let prFx: GitFixture | undefined;
  let approvalFx: GitFixture | undefined;
  let gh: GitHubDouble | undefined;
  let api = '';
  let dataDir = '';
  let changeId = '';
  const shots = artifactDir('console');

  const call = apiCaller(() => api, TOKEN);
  const change = async (id: string) => (await call('GET', `/api/v1/changes/${id}`)).body as { status: string; phase: string; question: string | null; error: string | null };
  /** A browser context signed in through a fresh one-time link (as the banner's). */
  const signedIn = async (opts: { width: number; height: number; bypassCSP?: boolean }, next: string): Promise<{ context: BrowserContext; page: Page }> => {
    const context = await browser!.newContext({ viewport: { width: opts.width, height: opts.height }, ...(opts.bypassCSP ? { bypassCSP: true } : {}) });
    context.setDefaultTimeout(30_000);
    const page = await context.newPage();
    const link = ((await (await fetch(`${api}/codec/links`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` } })).json()) as { url: string }).url;
    await page.goto(`${link}?next=${encodeURIComponent(next)}`, { waitUntil: 'domcontentloaded' });
    assert.equal(new URL(page.url()).pathname, next.split('?')[0]);
    return { context, page };
  };
  const noSidewaysOverflow = async (p: Page, what: string) => {
    const o = await p.evaluate(() => {
      const d = (globalThis as unknown as { document: PageDocument }).document;
      return { scroll: d.documentElement.scrollWidth, client: d.documentElement.clientWidth };
    });
    assert.ok(o.scroll <= o.client, `${what}: the page is ${o.scroll} px wide in a ${o.client} px window`);
  };

  before(async () => {
    browser = await launchChromium();
    model = await startModelServer();
    // the intake lacks the scope the first time (one question), and has it after the answer
    model.setDefault(changeModel({ intake: (_req, round) => (round === 0 ? { ...GREETING_DRAFT, scope: [] } : GREETING_DRAFT), agent: [{ name: 'write_file', args: { path: 'greeting.txt', content: 'Hello, Steward\n' } }] }));
    fx = createGitFixture(SEED, { executable: ['test.sh'] });
    prFx = createGitFixture(SEED, { executable: ['test.sh'] });
    approvalFx = createGitFixture(SEED, { executable: ['test.sh'] });
    preloadOpenApi();
    gh = await startGitHubDouble({
      token: GH_TOKEN,
      repos: [
        { owner: 'acme', repo: `${REPO}-pr`, bareDir: prFx.bare, defaultBranch: 'main' },
        { owner: 'acme', repo: `${REPO}-ok`, bareDir: approvalFx.bare, defaultBranch: 'main' },
      ],
    });
    dataDir = mkdtempSync(path.join(tmpdir(), 'steward-console-changes-e2e-'));
    const env = startEnv({ dataDir, ports: await freeStewardPorts(), token: TOKEN, model: MODEL, modelBaseURL: model.baseURL, extra: { STEWARD_TEMPORAL_UI: 'true', STEWARD_TEMPORAL_UI_URL: '', STEWARD_GITHUB_API_URL: gh.baseUrl, TEST_GH_TOKEN: GH_TOKEN } });
    steward = await startSteward(env);
    api = (steward as Spawned & { api: string }).api;
    await steward.waitForOutput(/Steward is running/, 60_000);
    const reg = await call('POST', '/api/v1/repos', { name: REPO, cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }] });
    assert.equal(reg.status, 201, JSON.stringify(reg.body));
  });

  after(async () => {
    await browser?.close().catch(() => undefined);
    await stopSteward(steward);
    await model?.close();
    await gh?.close();
    for (const f of [fx, prFx, approvalFx]) f?.cleanup();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it('answers a clarifying question from the page and follows the change, without a reload, until it is done', async () => {
    const started = await call('POST', '/api/v1/changes', { repo: REPO, request: 'Fix the greeting' });
    assert.equal(started.status, 202, JSON.stringify(started.body));
    changeId = String(started.body.id);
    await until('the clarifying question', async () => ((await change(changeId)).phase === 'clarify' ? true : undefined), 90_000);
    // the page with its question form passes axe-core too (a context that lets axe's script in)
    const scan = await signedIn({ width: 1280, height: 900, bypassCSP: true }, `/console/changes/${changeId}`);
    try {
      await scan.page.locator('#answer-form').waitFor();
      assert.deepEqual(await axeSerious(scan.page), [], 'a change waiting for an answer');
    } finally {
      await scan.context.close();
    }

    const { context, page } = await signedIn({ width: 1280, height: 900 }, `/console/changes/${changeId}`);
    try {
      await page.locator('#state', { hasText: 'waiting for an answer' }).waitFor();
      assert.match(await page.locator('#question').innerText(), /Which files or directories may the change touch\?/);
      assert.match(await page.locator('#timeline').innerText(), /Clarifying question/);
      await page.waitForFunction(() => (globalThis as unknown as { htmx?: unknown }).htmx !== undefined);
      console.log(`screenshot: ${await saveScreenshot(page, shots, 'change-question')}`);
      // by keyboard: the answer typed, Tab to the button, Enter
      await page.locator('#answer-text').focus();
      await page.keyboard.type('only greeting.txt');
      await page.keyboard.press('Tab');
      assert.equal(await page.evaluate(() => (globalThis as unknown as { document: PageDocument }).document.activeElement?.textContent?.trim()), 'Answer');
      await page.keyboard.press('Enter');
      await page.locator('#answer-result', { hasText: /continues with your answer/ }).waitFor();
      assert.equal(new URL(page.url()).pathname, `/console/changes/${changeId}`, 'answered in place');
      // the page follows the change as it moves on (its live part redrawn), to its end
      await page.locator('#state[data-status="done"]').waitFor({ timeout: 120_000 });
      assert.equal(await page.locator('#answer-form').count(), 0, 'the question is gone once answered');
      const timeline = await page.locator('#timeline').innerText();
      for (const stage of ['Requested', 'Clarifying question', 'Answered', 'Plan', 'Agent run', 'Validation gate', 'Promotion', 'Ended']) assert.match(timeline, new RegExp(stage), `${stage} in the timeline:\n${timeline}`);
      assert.equal((await change(changeId)).status, 'done');
      console.log(`screenshot: ${await saveScreenshot(page, shots, 'change')}`);
    } finally {
      await context.close();
    }
  });

  it("opens a change from the list (filtered by state) and shows its draft, plan, gate evidence and the diff's added and removed lines", async () => {
    const { context, page } = await signedIn({ width: 1280, height: 900 }, '/console/changes');
    try {
      const row = page.locator('table.changes tbody tr', { hasText: changeId });
      await row.waitFor();
      assert.match(await row.innerText(), new RegExp(`${REPO}[\\s\\S]*done[\\s\\S]*the operator[\\s\\S]*ago`));
      // the state filter is a GET form
      await page.locator('#state-filter').selectOption('failed');
      await page.locator('form.controls button[type="submit"]').click();
      await page.waitForURL(/state=failed/);
      assert.equal(await page.locator('table.changes tbody tr', { hasText: changeId }).count(), 0);
      await page.goto(`${api}/console/changes?state=done`);
      await page.locator(`a[href="/console/changes/${changeId}"]`).click();
      await page.waitForURL(new RegExp(`/console/changes/${changeId}$`));

      assert.match(await page.locator('#h-draft + dl').innerText(), /Make the greeting say Hello, Steward[\s\S]*greeting\.txt/);
      assert.match(await page.locator('section[aria-labelledby="h-plan"]').innerText(), /Edit the file[\s\S]*Run the check/);
      const gate = await page.locator('section[aria-labelledby="h-gate"]').innerText();
      assert.match(gate, /Pass/);
      assert.match(gate, /passed\s+test\s+sh test\.sh · exit 0/);
      await page.locator('section[aria-labelledby="h-gate"] details summary').first().click();
      assert.match(await page.locator('pre.output').first().innerText(), /greeting ok/);

      // the diff: one file, its removed and its added line, with their numbers
      const file = page.locator('.diff-file', { hasText: 'greeting.txt' });
      await file.waitFor();
      const del = file.locator('tr.diff-del');
      const add = file.locator('tr.diff-add');
      assert.equal(await del.count(), 1);
      assert.equal(await add.count(), 1);
      assert.equal(await del.locator('td.code').textContent(), '-removed: Hello');
      assert.equal(await add.locator('td.code').textContent(), '+added: Hello, Steward');
      assert.equal((await del.locator('td.ln').first().innerText()).trim(), '1');
      assert.equal((await add.locator('td.ln').nth(1).innerText()).trim(), '1');
      // the raw patch artifact, as the API serves it
      const raw = await context.request.get(`${api}/console/changes/${changeId}/patch`);
      assert.equal(raw.status(), 200);
      assert.equal(raw.headers()['x-steward-promoted'], 'true');
      assert.match(await raw.text(), /^-Hello\n\+Hello, Steward$/m);
      const apiPatch = await fetch(`${api}/api/v1/changes/${changeId}/patch`, { headers: { authorization: `Bearer ${TOKEN}` } });
      assert.equal(await raw.text(), await apiPatch.text());
      console.log(`screenshot: ${await saveScreenshot(page, shots, 'change-diff')}`);
    } finally {
      await context.close();
    }
  });

  it('refuses an answer in place when no question is open (409), an empty one (400), and one without the CSRF token (403)', async () => {
    const { context, page } = await signedIn({ width: 1280, height: 900 }, `/console/changes/${changeId}`);
    try {
      const csrf = (JSON.parse((await page.locator('body').getAttribute('hx-headers')) ?? '{}') as Record<string, string>)['X-CSRF-Token'] ?? '';
      assert.ok(csrf);
      const late = await context.request.post(`${api}/console/changes/${changeId}/answer`, { headers: { 'x-csrf-token': csrf, 'hx-request': 'true' }, form: { text: 'too late' } });
      assert.equal(late.status(), 409);
      assert.match(await late.text(), /Refused: .*(not waiting|ended)/);
      // a plain form's refusal: the change's page, with the reason where the answer goes
      const plain = await context.request.post(`${api}/console/changes/${changeId}/answer`, { form: { text: 'too late', _csrf: csrf } });
      assert.equal(plain.status(), 409);
      assert.match(await plain.text(), /id="answer-result"[^>]*>Refused: /);
      const empty = await context.request.post(`${api}/console/changes/${changeId}/answer`, { headers: { 'x-csrf-token': csrf, 'hx-request': 'true' }, form: { text: '   ' } });
      assert.equal(empty.status(), 400);
      assert.match(await empty.text(), /write an answer first/);
      const forged = await context.request.post(`${api}/console/changes/${changeId}/answer`, { form: { text: 'forged' } });
      assert.equal(forged.status(), 403);
      // none of them reached the change: one answer on record, the page's
      await page.reload({ waitUntil: 'domcontentloaded' });
      const timeline = await page.locator('#timeline').innerText();
      assert.equal(timeline.match(/Answered/g)?.length, 1, timeline);
      // bad ids and filters
      assert.equal((await context.request.get(`${api}/console/changes/chg-000000000000`)).status(), 404);
      assert.equal((await context.request.get(`${api}/console/changes/not-an-id`)).status(), 404);
      assert.equal((await context.request.get(`${api}/console/changes?state=bogus`)).status(), 400);
    } finally {
      await context.close();
    }
  });

  it('shows a draft PR change with its pull request, and links a change waiting for promotion approval to the inbox', async () => {
    for (const [name, bare, promotion] of [[`${REPO}-pr`, prFx!.bare, 'draft-pr'], [`${REPO}-ok`, approvalFx!.bare, 'draft-pr-after-approval']] as const) {
      const r = await call('POST', '/api/v1/repos', { name, cloneUrl: bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }], policy: { promotion }, github: { owner: 'acme', repo: name, tokenRef: 'env:TEST_GH_TOKEN' } });
      assert.equal(r.status, 201, JSON.stringify(r.body));
    }
    const pr = String((await call('POST', '/api/v1/changes', { repo: `${REPO}-pr`, request: 'Make the greeting say Hello, Steward' })).body.id);
    const waiting = String((await call('POST', '/api/v1/changes', { repo: `${REPO}-ok`, request: 'Make the greeting say Hello, Steward' })).body.id);
    const done = await until('the draft PR', async () => {
      const c = await change(pr);
      return c.status !== 'running' ? c : undefined;
    }, 120_000);
    assert.equal(done.status, 'done', `${done.phase}: ${done.error}`);
    await until('the promotion approval', async () => ((await change(waiting)).phase === 'approval' ? true : undefined), 120_000);
    assert.equal(gh!.pulls.length, 1);
    gh!.assertNoViolations();

    // bypassCSP: for axe's script only
    const { context, page } = await signedIn({ width: 1280, height: 900, bypassCSP: true }, `/console/changes/${pr}`);
    try {
      const link = page.locator('#pr-link');
      assert.equal(await link.innerText(), `Draft pull request #${gh!.pulls[0]!.number}`);
      assert.match((await link.getAttribute('href')) ?? '', new RegExp(`/acme/${REPO}-pr/pull/${gh!.pulls[0]!.number}$`));
      assert.match(await page.locator('#timeline').innerText(), /Promotion draft PR/);

      await page.goto(`${api}/console/changes/${waiting}`);
      assert.equal(await page.locator('#state').innerText(), 'waiting for promotion approval');
      assert.equal(await page.locator('#approval-wait a').getAttribute('href'), '/console/inbox?kind=change');
      assert.match(await page.locator('#timeline').innerText(), /Approval asked/);
      assert.deepEqual(await axeSerious(page), [], 'a change waiting for promotion approval');
      // the list's filter finds it, and only it
      await page.goto(`${api}/console/changes?state=needs-approval`);
      assert.deepEqual(await page.locator('table.changes tbody tr a').allInnerTexts(), [waiting]);
      // newest first
      await page.goto(`${api}/console/changes`);
      assert.deepEqual((await page.locator('table.changes tbody tr a').allInnerTexts()).slice(0, 3), [waiting, pr, changeId]);
    } finally {
      await context.close();
    }
  });

  it('the list and the change pass axe-core, fit a 375 px screen and work by keyboard', async () => {
    const scan = await signedIn({ width: 1280, height: 900, bypassCSP: true }, '/console/changes');
    try {
      for (const route of ['/console/changes', `/console/changes/${changeId}`]) {
        await scan.page.goto(`${api}${route}`, { waitUntil: 'domcontentloaded' });
        assert.deepEqual(await axeSerious(scan.page), [], route);
      }
    } finally {
      await scan.context.close();
    }
    const phone = await signedIn({ width: 375, height: 800 }, '/console/changes');
    try {
      await noSidewaysOverflow(phone.page, 'the list');
      await phone.page.goto(`${api}/console/changes/${changeId}`, { waitUntil: 'domcontentloaded' });
      await phone.page.locator('.diff-file').waitFor();
      await noSidewaysOverflow(phone.page, 'the change');
      console.log(`screenshot: ${await saveScreenshot(phone.page, shots, 'change-phone')}`);
      // by keyboard: Tab from the top reaches the change's link; Enter opens it
      await phone.page.goto(`${api}/console/changes`, { waitUntil: 'domcontentloaded' });
      let reached = false;
      for (let i = 0; i < 40 && !reached; i++) {
        await phone.page.keyboard.press('Tab');
        reached = (await phone.page.evaluate(() => (globalThis as unknown as { document: PageDocument }).document.activeElement?.getAttribute('href') ?? '')) === `/console/changes/${changeId}`;
      }
      assert.ok(reached, "Tab reaches the change's link");
      await phone.page.keyboard.press('Enter');
      await phone.page.waitForURL(new RegExp(`/console/changes/${changeId}$`));
    } finally {
      await phone.context.close();
    }
  });
});
