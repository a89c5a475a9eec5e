/**
 * The console's Budgets and receipts page in a real browser (headless Debian Chromium driven by
 * playwright-core) against `./steward start` with the scripted model and a budget from
 * STEWARD_BUDGETS_FILE, after a few turns so there is usage and there are receipts:
 *  - the budget's usage shows as the API reads it (used tokens, a labelled meter);
 *  - a raise from the page, made with the keyboard, takes effect (read back through the API) and
 *    the keyboard focus stays on the amount; a
 *    raise for a period that is over is refused in place (409) and an empty one (400), and
 *    neither changes anything;
 *  - the receipts filter for a chat lists its receipts newest first, page by page through the
 *    "next page" links, exactly the rows `steward receipts export --chat` gives (the real CLI);
 *    the Export JSONL link downloads exactly those rows (each line parsed), as
 *    application/x-ndjson with Content-Disposition attachment;
 *  - axe-core finds no serious or critical violation on either page; at 375px nothing overflows.
 * Screenshots go to test-artifacts/console-budgets/ (gitignored).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { artifactDir, browserSkip, launchChromium, saveScreenshot } from '../helpers/browser.js';
import { needs } from '../helpers/requirements.js';
import { lastUserText, startModelServer, type ModelServer } from '../helpers/model-server.js';
import { spawnProcess, type Spawned } from '../helpers/process.js';
import { freeStewardPorts, startEnv, startSteward, stopSteward } from '../helpers/started-steward.js';
import { apiCaller, seriousAxeViolations, until } from '../helpers/console-browser.js';

const TOKEN = 'console-budgets-e2e-token-0123456789abcdef';
const tag = Date.now().toString(36);
const CHAT = `budgets-${tag}`;
const OTHER = `other-${tag}`;
const BUDGET = 'console-team';
const MODEL = 'openai-compatible:console-budgets-model';

interface Receipt {
  id: number;
  kind: string;
  sessionId: string | null;
  actor: string | null;
  data: unknown;
  at: string;
}
interface BudgetJson {
  id: string;
  usage: { used: { tokens: number }; raised: { tokens: number }; left: { tokens: number | null } };
}

const parseJsonl = (text: string): Receipt[] =>
  text
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as Receipt);

describe('the console: budgets and receipts', { skip: browserSkip() || (await needs('chromium')), timeout: 600_000 }, () => {
  let model: ModelServer | undefined;
  let steward: Spawned | undefined;
  let browser: Browser | undefined;
  let context: BrowserContext | undefined;
  let page: Page | undefined;
  let api = '';
  let dataDir = '';
  let env: NodeJS.ProcessEnv = {};
  const shots = artifactDir('console-budgets');

  const call = apiCaller(() => api, TOKEN);
  const budget = async () => ((await call('GET', '/api/v1/budgets')).body.budgets as BudgetJson[]).find((b) => b.id === BUDGET)!;
  const replies = async (chat: string) => (((await call('GET', `/api/v1/chats/${chat}/messages`)).body.messages ?? []) as Array<{ role: string }>).filter((m) => m.role === 'assistant').length;
  const idle = async (chat: string) => !((await call('GET', `/api/v1/chats/${chat}/status`)).body as { running?: unknown }).running;
  /** A browser signed in through a fresh one-time link, landing on `next`. */
  const signedIn = async (ctx: BrowserContext, next: string) => {
    const link = (await call('POST', '/codec/links')).body.url as string;
    const p = await ctx.newPage();
    await p.goto(`${link}?next=${encodeURIComponent(next)}`, { waitUntil: 'domcontentloaded' });
    assert.equal(new URL(p.url()).pathname, next.split('?')[0]);
    return p;
  };
  /** `steward receipts export` (the real CLI) against the started Steward's database. */
  const cliExport = async (args: string[]): Promise<Receipt[]> => {
    const p = spawnProcess(process.execPath, ['--import', 'tsx', 'platform/main.ts', 'receipts', 'export', ...args], { ...env, STEWARD_LOG_LEVEL: 'warn' });
    let stdout = '';
    let stderr = '';
    p.child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
    p.child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => p.kill('SIGKILL'), 120_000);
    const { code } = await p.exited;
    clearTimeout(timer);
    assert.equal(code, 0, stderr);
    return parseJsonl(stdout);
  };

  before(async () => {
    browser = await launchChromium();
    model = await startModelServer();
    model.setDefault((req) => ({ text: `Reply to: ${lastUserText(req.body)}` }));
    dataDir = mkdtempSync(path.join(tmpdir(), 'steward-console-budgets-e2e-'));
    const file = path.join(dataDir, 'budgets.json');
    writeFileSync(file, JSON.stringify({ budgets: [{ id: BUDGET, scope: 'installation', tokens: 1_000_000, period: 'day', timezone: 'UTC' }] }));
    env = startEnv({ dataDir, ports: await freeStewardPorts(), token: TOKEN, model: MODEL, modelBaseURL: model.baseURL, extra: { STEWARD_BUDGETS_FILE: file, STEWARD_TEMPORAL_UI_URL: '' } });
    const started = await startSteward(env);
    steward = started;
    api = started.api;
    await steward.waitForOutput(/Steward is running/, 60_000);
    // a few turns: usage on the budget, receipts for two chats
    for (const [i, chat] of [CHAT, CHAT, OTHER, CHAT].entries()) {
      const r = await call('POST', `/api/v1/chats/${chat}/messages`, { text: `turn ${i} ${tag}` });
      assert.equal(r.status, 202, JSON.stringify(r.body));
      const want = [CHAT, CHAT, OTHER, CHAT].slice(0, i + 1).filter((c) => c === chat).length;
      await until(`reply ${i}`, async () => ((await replies(chat)) >= want ? true : undefined), 90_000);
    }
    await until('both chats idle', async () => ((await idle(CHAT)) && (await idle(OTHER)) ? true : undefined), 30_000);
    context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    context.setDefaultTimeout(30_000);
  });

  after(async () => {
    await context?.close().catch(() => undefined);
    await browser?.close().catch(() => undefined);
    await stopSteward(steward);
    await model?.close();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it("shows the budget's usage as the API reads it", async () => {
    const b = await until('usage on the budget', async () => {
      const x = await budget();
      return x.usage.used.tokens > 0 ? x : undefined;
    }, 30_000);
    page = await signedIn(context!, '/console/budgets');
    const card = page.locator('section.budget', { has: page.locator('h2', { hasText: BUDGET }) });
    await card.waitFor();
    const text = (await card.innerText()).replace(/\s+/g, ' ');
    assert.match(text, /Scope installation/);
    assert.match(text, /Limit 1,000,000 tokens per day/);
    assert.ok(text.includes(`Used ${b.usage.used.tokens.toLocaleString('en-US')} tokens`), text);
    assert.ok(text.includes(`Left ${b.usage.left.tokens!.toLocaleString('en-US')} tokens`), text);
    // the meter carries the numbers and is named by its text
    const meter = card.locator('meter');
    assert.equal(Number(await meter.getAttribute('max')), 1_000_000);
    assert.equal(Number(await meter.getAttribute('value')), b.usage.used.tokens);
    const label = await page.locator(`#${await meter.getAttribute('aria-labelledby')}`).innerText();
    assert.match(label, /tokens: .* of 1,000,000 tokens taken \(\d+%\), .* left/);
    await saveScreenshot(page, shots, 'budgets');
  });

  it('a raise made on the page with the keyboard takes effect; a stale period or no amount is refused in place and changes nothing', async () => {
    const p = page!;
    const card = p.locator('section.budget', { has: p.locator('h2', { hasText: BUDGET }) });
    const input = card.locator('input[name="tokens"]');
    // reach the amount with Tab alone (bounded), type it, Enter submits
    await p.locator('body').click({ position: { x: 1, y: 1 } });
    let reached = false;
    for (let i = 0; i < 80 && !reached; i++) {
      await p.keyboard.press('Tab');
      reached = await input.evaluate((el) => el === el.ownerDocument.activeElement);
    }
    assert.ok(reached, 'the Raise amount is reachable by Tab');
    await p.keyboard.type('5000');
    const answered = p.waitForResponse((r) => r.url().endsWith('/console/budgets/raise'));
    await p.keyboard.press('Enter');
    assert.equal((await answered).status(), 200);
    await card.locator('[role="status"]', { hasText: `Raised ${BUDGET} by 5000 tokens` }).waitFor();
    assert.equal(new URL(p.url()).pathname, '/console/budgets', 'answered in place');
    // the card was swapped in place and the keyboard stays where it was (htmx keeps focus by id)
    assert.ok(await card.locator('input[name="tokens"]').evaluate((el) => el === el.ownerDocument.activeElement), 'focus stays on the amount after the answer');
    const raised = await budget();
    assert.equal(raised.usage.raised.tokens, 5000);
    assert.match((await card.innerText()).replace(/\s+/g, ' '), /Raised this period 5,000 tokens/);

    // the period the page showed is over (as after a renewal): the service refuses, 409, in place
    const fresh = p.locator('section.budget', { has: p.locator('h2', { hasText: BUDGET }) });
    await fresh.locator('input[name="periodStart"]').evaluate((el) => el.setAttribute('value', '2020-01-01T00:00:00.000Z'));
    await fresh.locator('input[name="tokens"]').fill('7000');
    const refused = p.waitForResponse((r) => r.url().endsWith('/console/budgets/raise'));
    await fresh.locator('button', { hasText: 'Raise' }).click();
    assert.equal((await refused).status(), 409);
    await fresh.locator('.error[role="status"]', { hasText: 'is over' }).waitFor();
    // nothing given: 400, in place
    const empty = p.waitForResponse((r) => r.url().endsWith('/console/budgets/raise'));
    await p.locator('section.budget', { has: p.locator('h2', { hasText: BUDGET }) }).locator('button', { hasText: 'Raise' }).click();
    assert.equal((await empty).status(), 400);
    await p.locator('section.budget .error[role="status"]', { hasText: 'Give tokens, USD or both' }).waitFor();
    assert.equal((await budget()).usage.raised.tokens, 5000, 'the refusals changed nothing');
  });

  it("lists a chat's receipts newest first, page by page, exactly as `steward receipts export --chat` gives them; Export JSONL downloads the same rows", async () => {
    const p = page!;
    const expected = await cliExport(['--chat', CHAT]);
    assert.ok(expected.length > 6, `a few turns give several receipts (${expected.length})`);
    assert.ok(expected.every((r) => r.sessionId !== null && r.sessionId.includes(CHAT)), 'the CLI gives the chat only');
    const other = await cliExport(['--chat', OTHER]);
    assert.ok(other.length > 0);

    // the filter form, by keyboard: the chat, then Enter
    await p.goto(`${api}/console/receipts`, { waitUntil: 'domcontentloaded' });
    await p.locator('input[name="chat"]').focus();
    await p.keyboard.type(CHAT);
    await Promise.all([p.waitForURL(/\/console\/receipts\?/), p.keyboard.press('Enter')]);
    assert.equal(new URL(p.url()).searchParams.get('chat'), CHAT);
    const firstIds = await p.locator('#receipts tbody tr').evaluateAll((rows) => rows.map((r) => Number(r.id.slice(2))));
    assert.deepEqual(firstIds, expected.map((r) => r.id).reverse().slice(0, 50));
    const firstRow = p.locator('#receipts tbody tr').first();
    const newest = expected.at(-1)!;
    assert.equal((await firstRow.locator('td').nth(1).innerText()).trim(), newest.kind);
    await saveScreenshot(p, shots, 'receipts');

    // small pages: every row once, newest first, through the "next page" links (bounded)
    await p.goto(`${api}/console/receipts?chat=${encodeURIComponent(CHAT)}&size=4`, { waitUntil: 'domcontentloaded' });
    const seen: number[] = [];
    for (let i = 0; i < 50; i++) {
      const ids = await p.locator('#receipts tbody tr').evaluateAll((rows) => rows.map((r) => Number(r.id.slice(2))));
      assert.ok(ids.length <= 4, 'at most size rows a page');
      seen.push(...ids);
      const next = p.locator('#next-page');
      if ((await next.count()) === 0) break;
      await Promise.all([p.waitForURL(/before=/), next.click()]);
    }
    assert.deepEqual(seen, expected.map((r) => r.id).reverse());

    // Export JSONL: a download of exactly the CLI's rows, in its order
    await p.goto(`${api}/console/receipts?chat=${encodeURIComponent(CHAT)}`, { waitUntil: 'domcontentloaded' });
    const [download] = await Promise.all([p.waitForEvent('download'), p.locator('#export').click()]);
    const file = await download.path();
    const downloaded = parseJsonl(readFileSync(file, 'utf8'));
    assert.deepEqual(downloaded, expected);
    assert.match(download.suggestedFilename(), /^receipts-.*\.jsonl$/);
    // the same link read as an API client (the bearer token): its headers
    const href = await p.locator('#export').getAttribute('href');
    const res = await fetch(`${api}${href}`, { headers: { authorization: `Bearer ${TOKEN}` } });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^application\/x-ndjson/);
    assert.match(res.headers.get('content-disposition') ?? '', /^attachment; filename="receipts-/);
    assert.deepEqual(parseJsonl(await res.text()), expected);

    // a kind within the chat: the CLI's rows of that kind
    const kind = 'model.call';
    const models = await cliExport(['--chat', CHAT, '--kind', kind]);
    assert.ok(models.length >= 3);
    const kindRes = await fetch(`${api}/console/receipts/export?chat=${encodeURIComponent(CHAT)}&kind=${kind}`, { headers: { authorization: `Bearer ${TOKEN}` } });
    assert.deepEqual(parseJsonl(await kindRes.text()), models);
    // a bad filter: refused, nothing listed or exported
    await p.goto(`${api}/console/receipts?since=last+tuesday`, { waitUntil: 'domcontentloaded' });
    await p.locator('#filter-error', { hasText: 'since' }).waitFor();
    assert.equal(await p.locator('#receipts').count(), 0);
    assert.equal((await fetch(`${api}/console/receipts/export?since=soon`, { headers: { authorization: `Bearer ${TOKEN}` } })).status, 400);
  });

  it('both pages pass an axe-core scan with no serious or critical violation, and nothing overflows at 375px', async () => {
    // axe is injected as a script, which the console's CSP (rightly) refuses: this context bypasses CSP for the scan only
    const scan = await browser!.newContext({ bypassCSP: true, viewport: { width: 1280, height: 900 } });
    const narrow = await browser!.newContext({ viewport: { width: 375, height: 800 } });
    try {
      const routes = ['/console/budgets', `/console/receipts?chat=${encodeURIComponent(CHAT)}`];
      const p = await signedIn(scan, '/console/budgets');
      for (const route of routes) {
        await p.goto(`${api}${route}`, { waitUntil: 'domcontentloaded' });
        // the details of a receipt open, so they are scanned too
        if (route.startsWith('/console/receipts')) await p.locator('#receipts details').first().evaluate((d) => d.setAttribute('open', ''));
        const bad = await seriousAxeViolations(p);
        assert.deepEqual(bad, [], `${route}: ${JSON.stringify(bad)}`);
      }
      const n = await signedIn(narrow, '/console/budgets');
      for (const route of routes) {
        await n.goto(`${api}${route}`, { waitUntil: 'domcontentloaded' });
        if (route.startsWith('/console/receipts')) {
          for (const d of await n.locator('#receipts details').all()) await d.evaluate((el) => el.setAttribute('open', ''));
        }
        const { scroll, width } = await n.evaluate<{ scroll: number; width: number }>('({ scroll: document.documentElement.scrollWidth, width: document.documentElement.clientWidth })');
        assert.ok(scroll <= width, `${route} overflows at 375px: ${scroll} > ${width}`);
        await saveScreenshot(n, shots, `narrow-${route.split('?')[0]!.split('/').at(-1)}`);
      }
    } finally {
      await scan.close();
      await narrow.close();
    }
  });
});
