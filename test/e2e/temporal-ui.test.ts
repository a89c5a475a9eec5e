/**
 * The Temporal UI as Steward's run inspector, in a real browser: `./steward start` with the
 * embedded dev server, its Web UI and the payload codec on, chat turns through the HTTP API,
 * then headless Chromium (the system's chromium, driven by playwright-core):
 *  - filters the runs by Steward's search attributes (StewardChat, StewardKind) and sees
 *    exactly the expected workflows;
 *  - opens the turn without signing in to the codec endpoint and sees only ciphertext;
 *  - signs in at `<api>/codec/login`, turns on "Include cross-origin credentials" in the UI's
 *    Codec Server settings, and sees the turn's decoded input and result;
 *  - follows run links Steward gives and lands on exactly that run.
 * Screenshots go to test-artifacts/temporal-ui/ (gitignored); their paths are printed.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import type { Browser, BrowserContext, Locator, Page } from 'playwright-core';
import { artifactDir, browserSkip, launchChromium, saveScreenshot } from '../helpers/browser.js';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';
import { freePort, spawnProcess, type Spawned } from '../helpers/process.js';

const TOKEN = 'ui-e2e-token-0123456789abcdef';
const NAMESPACE = 'default';
const tag = Date.now().toString(36);
const CHAT = `ui-${tag}`;
const OTHER_CHAT = `ui-other-${tag}`;
/** Objective runs start turns in their own chat, away from the chats filtered below. */
const OBJECTIVE_CHAT = `ui-objective-${tag}`;
/** The sender's name travels in the turn's input (the message text stays in the database). */
const USER = `inspector-${tag}`;
const REPLY = `Inspected reply ${tag}.`;
const sessionOf = (chat: string) => `session:http:default:${chat}`;
const ROW = '[data-testid="workflows-summary-configurable-table-row"]';

/** Poll until probe returns a value (not undefined), at most timeoutMs. */
async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number, everyMs = 250): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (let i = 0; Date.now() < deadline && i < 10_000; i++) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    await sleep(everyMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`);
}

/** The workflow ids the UI's workflow list shows (from each row's link to its run). */
async function listedWorkflowIds(page: Page): Promise<string[]> {
  const hrefs = await page.locator(`${ROW} a[href*="/workflows/"]`).evaluateAll((links) => links.map((a) => a.getAttribute('href') ?? ''));
  const ids = new Set<string>();
  for (const href of hrefs) {
    const m = /\/namespaces\/[^/]+\/workflows\/([^/?#]+)/.exec(href);
    if (m?.[1]) ids.add(decodeURIComponent(m[1]));
  }
  return [...ids].sort();
}

describe('the Temporal UI as the run inspector', { skip: browserSkip(), timeout: 600_000 }, () => {
  let model: ModelServer | undefined;
  let steward: Spawned | undefined;
  let browser: Browser | undefined;
  let api = '';
  let ui = '';
  let dataDir = '';
  let turnId = '';
  let otherTurnId = '';
  let statusReply = '';
  /** The API serves the codec endpoint (and so payloads are encrypted). */
  let codecOn = false;
  const shots = artifactDir('temporal-ui');

  const call = async (method: string, route: string, body?: unknown) => {
    const r = await fetch(`${api}${route}`, {
      method,
      headers: { authorization: `Bearer ${TOKEN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await r.text();
    return { status: r.status, body: (text ? JSON.parse(text) : {}) as Record<string, unknown> };
  };
  const send = async (chat: string, text: string) => {
    const r = await call('POST', `/api/v1/chats/${chat}/messages`, { text, user: USER });
    assert.equal(r.status, 202, JSON.stringify(r.body));
    return r.body as { workflowId: string; kind: string; reply?: string };
  };
  const assistantReplies = async (chat: string) => {
    const r = await call('GET', `/api/v1/chats/${chat}/messages`);
    return (r.body.messages as Array<{ role: string; text: string }>).filter((m) => m.role === 'assistant').map((m) => m.text);
  };
  const runningTurn = async (chat: string) => {
    const r = await call('GET', `/api/v1/chats/${chat}/status`);
    return (r.body as { running?: { turnId: string } | null }).running?.turnId;
  };

  /** A fresh page in its own browser context (its own cookies and local storage). */
  const newPage = async (): Promise<{ context: BrowserContext; page: Page }> => {
    assert.ok(browser, 'the browser is running');
    const context = await browser.newContext({ viewport: { width: 1440, height: 1000 } });
    context.setDefaultTimeout(30_000);
    context.setDefaultNavigationTimeout(60_000);
    return { context, page: await context.newPage() };
  };

  before(async () => {
    // fail early (before starting the platform) when there is no browser to drive
    browser = await launchChromium();
    model = await startModelServer();
    dataDir = mkdtempSync(path.join(tmpdir(), 'steward-ui-e2e-'));
    const [httpPort, temporalPort, uiPort] = [await freePort(), await freePort(), await freePort()];
    steward = spawnProcess('./steward', ['start'], {
      ...process.env,
      STEWARD_DATA_DIR: dataDir,
      STEWARD_HTTP_PORT: String(httpPort),
      STEWARD_TEMPORAL_PORT: String(temporalPort),
      STEWARD_TEMPORAL_UI: 'true',
      STEWARD_TEMPORAL_UI_PORT: String(uiPort),
      STEWARD_TEMPORAL_UI_URL: '',
      STEWARD_API_TOKEN: TOKEN,
      STEWARD_MODEL: 'openai-compatible:ui-e2e-model',
      STEWARD_MODEL_BASE_URL: model.baseURL,
      STEWARD_LOG_LEVEL: 'warn',
      // the codec on, with the key generated in the data dir and CORS for the embedded UI
      STEWARD_CODEC: 'on',
      STEWARD_CODEC_KEYS: '',
      STEWARD_CODEC_CORS_ORIGINS: '',
      DATABASE_URL: '',
      TEMPORAL_ADDRESS: '',
    });
    api = (await steward.waitForOutput(/API:\s+(http:\/\/\S+)/, 180_000))[1] ?? '';
    ui = ((await steward.waitForOutput(/Temporal UI:\s+(http:\/\/\S+)/, 60_000))[1] ?? '').replace(/\/$/, '');
    await steward.waitForOutput(/Steward is running/, 60_000);
    codecOn = (await fetch(`${api}/codec/login`)).status === 200;
    try {
      await startTurns();
    } catch (err) {
      // the platform's own warnings and errors, not the failed status queries of the polling above
      const lines = steward.output().split('\n').filter((l) => /WARN|ERROR|"level":(40|50|60)/.test(l) && !l.includes('"msg":"request failed"'));
      throw new Error(`${(err as Error).message}\nsteward warnings and errors:\n${lines.slice(-20).map((l) => l.slice(0, 600)).join('\n')}`);
    }
  });

  async function startTurns(): Promise<void> {
    const m = model!;
    // a turn held at the model long enough to ask /status while it runs
    m.enqueue({ text: REPLY, firstTokenDelayMs: 6_000, match: (req) => JSON.stringify(req.body).includes(`hello ${tag}`) });
    await send(CHAT, `hello ${tag}`);
    turnId = await until('the turn to run', () => runningTurn(CHAT), 60_000, 100);
    const status = await send(CHAT, '/status');
    assert.equal(status.kind, 'command');
    statusReply = status.reply ?? '';
    await until('the reply', async () => ((await assistantReplies(CHAT)).includes(REPLY) ? true : undefined), 60_000);

    // a second chat: the chat filter must leave its runs out
    m.enqueue({ text: `other ${tag}`, firstTokenDelayMs: 1_500, match: (req) => JSON.stringify(req.body).includes(`other chat ${tag}`) });
    await send(OTHER_CHAT, `other chat ${tag}`);
    otherTurnId = await until('the other turn to run', () => runningTurn(OTHER_CHAT), 60_000, 100);
    await until('the other reply', async () => ((await assistantReplies(OTHER_CHAT)).length > 0 ? true : undefined), 60_000);
  }

  after(async () => {
    await browser?.close().catch(() => undefined);
    steward?.kill('SIGINT');
    if (steward) {
      const stopped = await Promise.race([steward.exited.then(() => true), sleep(30_000).then(() => false)]);
      if (!stopped) {
        steward.kill('SIGKILL');
        await steward.exited;
      }
    }
    await model?.close();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  /** Open the workflow list filtered by a visibility query (`?query=`) and wait until it shows `expected`. */
  async function openFiltered(page: Page, query: string, expected: string[]): Promise<string[]> {
    const url = `${ui}/namespaces/${NAMESPACE}/workflows?query=${encodeURIComponent(query)}`;
    const want = JSON.stringify([...expected].sort());
    let shown: string[] = [];
    // visibility is eventually consistent: reload a few times before giving up
    for (let attempt = 0; attempt < 6; attempt++) {
      await page.goto(url, { waitUntil: 'domcontentloaded' });
      try {
        await page.locator(ROW).first().waitFor({ timeout: 20_000 });
        await until(`${expected.length} rows`, async () => ((shown = await listedWorkflowIds(page)).length >= expected.length ? true : undefined), 5_000);
      } catch {
        shown = await listedWorkflowIds(page).catch(() => []);
      }
      if (JSON.stringify(shown) === want) return shown;
      await sleep(1_000);
    }
    return shown;
  }

  /** From the list filtered to the chat's turns, open the turn; answers its Input/Result panel. */
  async function openTurn(page: Page): Promise<Locator> {
    const listed = await openFiltered(page, `StewardChat="${CHAT}" AND StewardKind="turn"`, [turnId]);
    assert.deepEqual(listed, [turnId]);
    await page.locator(`${ROW} a[href*="/workflows/${encodeURIComponent(turnId)}/"]`).first().click();
    await page.locator('[data-testid="workflow-id-heading"]').filter({ hasText: turnId }).waitFor({ timeout: 30_000 });
    const io = page.locator('[data-testid="input-and-result"]');
    await io.waitFor({ timeout: 30_000 });
    return io;
  }

  /** Wait until the panel's text satisfies ok; on timeout save a screenshot and show the text. */
  async function waitForPanel(page: Page, io: Locator, what: string, ok: (text: string) => boolean, shot: string): Promise<string> {
    try {
      return await until(what, async () => {
        const text = await io.innerText();
        return ok(text) ? text : undefined;
      }, 30_000);
    } catch (err) {
      await saveScreenshot(page, shots, `${shot}-FAILED`);
      throw new Error(`${(err as Error).message}; the Input/Result panel shows:\n${(await io.innerText().catch(() => '')).slice(0, 3000)}`);
    }
  }

  it('filters the runs by a Steward search attribute and shows exactly the expected ones', async () => {
    const { context, page } = await newPage();
    try {
      const expected = [sessionOf(CHAT), turnId].sort();
      const shown = await openFiltered(page, `StewardChat="${CHAT}"`, expected);
      await saveScreenshot(page, shots, 'list-filtered-by-chat');
      assert.deepEqual(shown, expected, 'the chat filter shows its session and its turn, and nothing of the other chat');

      const turns = await openFiltered(page, `StewardKind="turn" AND StewardChat IN ("${CHAT}", "${OTHER_CHAT}")`, [turnId, otherTurnId]);
      await saveScreenshot(page, shots, 'list-filtered-by-kind');
      assert.deepEqual(turns, [turnId, otherTurnId].sort(), 'the kind filter shows the turns, not the sessions');
    } finally {
      await context.close();
    }
  });

  it('without a codec sign-in, the opened turn shows only ciphertext', async () => {
    assert.ok(codecOn, 'the API serves the codec sign-in at /codec/login (payloads are encrypted)');
    const { context, page } = await newPage();
    try {
      const refused = page.waitForResponse((r) => r.url().startsWith(`${api}/codec/decode`), { timeout: 60_000 });
      const io = await openTurn(page);
      assert.equal((await refused).status(), 401, 'the codec endpoint refuses the browser that has not signed in');
      // the input shows as the raw payload data: one quoted base64 string
      const text = await waitForPanel(page, io, 'the encrypted input', (s) => /Input\s*"[A-Za-z0-9+/=]{40,}"/.test(s), 'turn-encrypted');
      await saveScreenshot(page, shots, 'turn-opened-encrypted');
      for (const plain of [USER, CHAT, '"outcome"', `${turnId}:reply`]) assert.ok(!text.includes(plain), `${plain} is not readable without the codec`);
      assert.ok(await page.locator('[data-testid="data-encoder-status-error"]').isVisible(), 'the UI reports that the codec server could not decode');
    } finally {
      await context.close();
    }
  });

  it('signed in at /codec/login with cross-origin credentials on, the opened turn shows its decoded input and result', async () => {
    assert.ok(codecOn, 'the API serves the codec sign-in at /codec/login');
    const { context, page } = await newPage();
    try {
      // the operator signs in once per browser: an HttpOnly cookie for <api>/codec
      await page.goto(`${api}/codec/login`);
      await page.locator('#token').fill(TOKEN);
      await Promise.all([page.waitForURL(`${api}/codec/login`, { waitUntil: 'load' }), page.locator('button[type="submit"]').click()]);
      await page.locator('#signed-in').waitFor({ timeout: 15_000 });
      const cookie = (await context.cookies(`${api}/codec/decode`)).find((c) => c.name === 'steward_codec');
      assert.ok(cookie?.httpOnly, 'the sign-in set the HttpOnly codec cookie');

      // the UI's Codec Server settings: this browser's endpoint, with cross-origin credentials
      await page.goto(`${ui}/namespaces/${NAMESPACE}/workflows`, { waitUntil: 'domcontentloaded' });
      await page.locator('[data-testid^="data-encoder-status"]').first().click();
      const dialog = page.locator('[role="dialog"]:visible, dialog[open]').filter({ has: page.locator('[data-testid="data-encoder-title"]') }).first();
      await dialog.waitFor({ timeout: 15_000 });
      await dialog.locator('[data-testid="use-local-endpoint-input"]').check();
      await dialog.locator('#data-encoder-endpoint-input').fill(`${api}/codec`);
      await dialog.locator('[data-testid="data-encoder-include-credentials"]').click();
      assert.equal(await dialog.locator('#pass-access-credentials').isChecked(), true, 'Include cross-origin credentials is on');
      await saveScreenshot(page, shots, 'codec-settings');
      await dialog.locator('[data-testid="confirm-modal-button"]').click();
      await dialog.waitFor({ state: 'hidden', timeout: 15_000 });
      const stored = await page.evaluate(() => ({ includeCredentials: localStorage.getItem('includeCredentials'), override: localStorage.getItem('overrideRemoteCodecConfiguration') }));
      assert.deepEqual(stored, { includeCredentials: 'true', override: 'true' }, 'the UI keeps the setting in this browser');

      const decoded = page.waitForResponse((r) => r.url().startsWith(`${api}/codec/decode`), { timeout: 60_000 });
      const io = await openTurn(page);
      assert.equal((await decoded).status(), 200, 'the codec endpoint decodes for the signed-in browser');
      const text = await waitForPanel(page, io, 'the decoded input and result', (s) => s.includes(USER) && s.includes(`${turnId}:reply`), 'turn-decoded');
      await saveScreenshot(page, shots, 'turn-opened-decoded');
      const flat = text.replace(/\s+/g, '');
      assert.ok(flat.includes(`"chatId":"${CHAT}"`), 'the input names the chat');
      assert.ok(flat.includes(`"user":"${USER}"`), 'the input names the sender');
      assert.ok(flat.includes('"outcome":"replied"'), 'the result says the turn replied');
      assert.ok(flat.includes(`"replyKey":"${turnId}:reply"`), 'the result holds the reply key');
    } finally {
      await context.close();
    }
  });

  it('answers /status with the running turn', () => {
    assert.match(statusReply, /^Running: turn 1, step \d+ \(model\)/, statusReply);
    assert.match(turnId, new RegExp(`^${sessionOf(CHAT)}:turn:1:`));
  });

  /** Follow a run link in a fresh page and wait until the UI shows that workflow. */
  async function followRunLink(link: string, workflowId: string, shot: string): Promise<void> {
    assert.ok(link.startsWith(`${ui}/namespaces/${NAMESPACE}/workflows/`), `${link} points at the embedded UI`);
    const { context, page } = await newPage();
    try {
      await page.goto(link, { waitUntil: 'domcontentloaded' });
      const heading = page.locator('[data-testid="workflow-id-heading"]');
      await heading
        .filter({ hasText: workflowId })
        .waitFor({ timeout: 45_000 })
        .catch(async (err: Error) => {
          await saveScreenshot(page, shots, `${shot}-FAILED`);
          throw new Error(`${err.message}; the page at ${page.url()} shows: ${(await page.locator('main').innerText().catch(() => '')).slice(0, 1500)}`);
        });
      await saveScreenshot(page, shots, shot);
      assert.equal((await heading.innerText()).replace(/\s+/g, ''), workflowId.replace(/\s+/g, ''), 'the page is that run and no other');
      // the link names the workflow only; the UI settles on its latest run
      assert.ok(decodeURIComponent(new URL(page.url()).pathname).startsWith(`/namespaces/${NAMESPACE}/workflows/${workflowId}/`), page.url());
    } finally {
      await context.close();
    }
  }

  it('a run link Steward gives (an objective run, as in its failure notice) opens exactly that run', async () => {
    const name = `ui-objective-${tag}`;
    const created = await call('POST', '/api/v1/objectives', { name, prompt: `Objective ${tag}`, chatId: OBJECTIVE_CHAT, schedule: { every: '1h' }, paused: true });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = String(created.body.id);
    const triggered = await call('POST', `/api/v1/objectives/${id}/trigger`, {});
    assert.ok(triggered.status >= 200 && triggered.status < 300, JSON.stringify(triggered.body));
    const run = await until(
      'the objective run and its link',
      async () => {
        const o = (await call('GET', `/api/v1/objectives/${id}`)).body as { lastRun?: { id: string; status: string } | null; runUrl?: string | null };
        return o.lastRun && o.runUrl && o.lastRun.status !== 'running' ? { id: o.lastRun.id, url: o.runUrl } : undefined;
      },
      90_000,
      500,
    );
    await followRunLink(run.url, run.id, 'link-opened-objective-run');
  });

  it('the link in /status opens the running turn', async () => {
    const link = /https?:\/\/\S+/.exec(statusReply)?.[0];
    assert.ok(link, `/status gives the running turn's run link: ${statusReply}`);
    await followRunLink(link, turnId, 'link-opened-status-turn');
  });
});
