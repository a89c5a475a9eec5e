/**
 * The Temporal UI as Steward's run inspector, in a real browser: `./steward start` with the
 * embedded dev server, its Web UI served through Steward's own origin at `<api>/ui` and the
 * payload codec on, chat turns through the HTTP API (each turn runs inside its conversation's
 * session workflow), then headless Chromium (the system's chromium, driven by playwright-core),
 * each page in a fresh browser profile:
 *  - opens the one-time sign-in link the start banner prints and, with nothing set in the UI,
 *    finds the chat's session by its chat and sees its decoded input and, in its event
 *    history, the turn's activities by their summaries (the model step, whose decoded result
 *    says it delivered the reply), the model step's decoded input with the turn id and the sender in the
 *    decoded inbound update (the message's handoff; the UI calls the same origin's /codec with the sign-in cookie);
 *    the link works once;
 *  - without the sign-in gets no plaintext: the UI at `<api>/ui` sends it to the sign-in form,
 *    its API and the codec endpoint answer 401, and the dev server's own UI port shows only
 *    ciphertext (the session's input, the activities' summaries);
 *  - filters the runs by Steward's search attributes (StewardChat; StewardUser, the identity
 *    ids of the people who wrote, here an OpenHarness shell's; StewardKind) and sees exactly
 *    the expected sessions, and no turn workflow;
 *  - follows run links Steward gives (signing in with the API token on the way) and lands on
 *    exactly that run: an objective's run, and the session a running turn runs in.
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
import { needs } from '../helpers/requirements.js';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';
import { spawnProcess, type Spawned } from '../helpers/process.js';
import { freeStewardPorts, startEnv, startSteward, stopSteward } from '../helpers/started-steward.js';
import { apiCaller, until } from '../helpers/console-browser.js';

const TOKEN = 'ui-e2e-token-0123456789abcdef';
const NAMESPACE = 'default';
const tag = Date.now().toString(36);
const CHAT = `ui-${tag}`;
const OTHER_CHAT = `ui-other-${tag}`;
/** Objective runs start turns in their own chat, away from the chats filtered below. */
const OBJECTIVE_CHAT = `ui-objective-${tag}`;
/** The sender's name travels in the inbound update (the message text stays in the database). */
const USER = `inspector-${tag}`;
/**
 * A person (an OpenHarness shell, with an identity of its own) writes in a third conversation:
 * the session lists their identity id in StewardUser. Messages through the HTTP API are the
 * operator's, who has no identity, so the two chats above list nobody.
 */
const SHELL = `ui-shell-${tag}`;
const PERSON_CHAT = `ui-person-${tag}`;
const MODEL = 'openai-compatible:ui-e2e-model';
const REPLY = `Inspected reply ${tag}.`;
const sessionOf = (chat: string) => `session:http:default:${chat}`;
const ROW = '[data-testid="workflows-summary-configurable-table-row"]';
/** A row of a workflow's event history (the Event History tab). */
const EVENT_ROW = '[data-testid="event-summary-row"]';
const EVENTS = '[data-testid="event-summary-table"]';
const flat = (text: string) => text.replace(/\s+/g, '');

/** Poll until probe returns a value (not undefined), at most timeoutMs. */
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

describe('the Temporal UI as the run inspector', { skip: browserSkip() || (await needs('chromium')), timeout: 600_000 }, () => {
  let model: ModelServer | undefined;
  let steward: Spawned | undefined;
  let browser: Browser | undefined;
  let api = '';
  /** The UI as Steward serves it: `<api>/ui`. */
  let ui = '';
  /** The one-time sign-in link the banner printed. */
  let bannerLink = '';
  /** The dev server's own UI port (loopback), behind the proxy. */
  let uiPort = 0;
  let dataDir = '';
  let turnId = '';
  let statusReply = '';
  /** The person's identity id and their session (see SHELL). */
  let personIdentity = '';
  let personSession = '';
  let stewardEnv: NodeJS.ProcessEnv = {};
  const shots = artifactDir('temporal-ui');

  const call = apiCaller(() => api, TOKEN);
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

  /** A fresh page in its own browser context (its own cookies and local storage: a fresh profile). */
  const newPage = async (): Promise<{ context: BrowserContext; page: Page }> => {
    assert.ok(browser, 'the browser is running');
    const context = await browser.newContext({ viewport: { width: 1440, height: 1000 } });
    context.setDefaultTimeout(30_000);
    context.setDefaultNavigationTimeout(60_000);
    return { context, page: await context.newPage() };
  };
  /** A one-time sign-in link, as `./steward ui` asks for one. */
  const freshLink = async (): Promise<string> => {
    const r = await fetch(`${api}/codec/links`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` } });
    assert.equal(r.status, 201);
    const body = (await r.json()) as { url: string; ui: string };
    assert.equal(body.ui, `${ui}/`);
    return body.url;
  };
  /** A fresh page signed in through a one-time link (it lands on the UI). */
  const signedInPage = async (): Promise<{ context: BrowserContext; page: Page }> => {
    const p = await newPage();
    await p.page.goto(await freshLink(), { waitUntil: 'domcontentloaded' });
    assert.ok(p.page.url().startsWith(`${ui}/`), `the link lands on the UI: ${p.page.url()}`);
    return p;
  };

  before(async () => {
    // fail early (before starting the platform) when there is no browser to drive
    browser = await launchChromium();
    model = await startModelServer();
    dataDir = mkdtempSync(path.join(tmpdir(), 'steward-ui-e2e-'));
    const ports = await freeStewardPorts();
    uiPort = ports.ui;
    stewardEnv = startEnv({
      dataDir,
      ports,
      token: TOKEN,
      model: MODEL,
      modelBaseURL: model.baseURL,
      extra: {
        STEWARD_TEMPORAL_UI: 'true',
        STEWARD_TEMPORAL_UI_URL: '',
        // the codec on, with the key generated in the data dir and the default CORS origins
        STEWARD_CODEC: 'on',
        STEWARD_CODEC_KEYS: '',
        STEWARD_CODEC_CORS_ORIGINS: '',
      },
    });
    const started = await startSteward(stewardEnv);
    steward = started;
    api = started.api;
    const banner = await steward.waitForOutput(/Temporal UI:\s+(http:\/\/\S+)\s+\(opens (http:\/\/\S+) signed in/, 60_000);
    bannerLink = banner[1] ?? '';
    ui = (banner[2] ?? '').replace(/\/$/, '');
    await steward.waitForOutput(/Steward is running/, 60_000);
    assert.equal(ui, `${api}/ui`, 'the UI is served through the API origin');
    assert.match(bannerLink, new RegExp(`^${api.replace(/[.]/g, '\\.')}/codec/login/[A-Za-z0-9_-]{43}$`), 'the banner prints a one-time sign-in link');
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

    // a second chat: the chat filter must leave its session out
    m.enqueue({ text: `other ${tag}`, match: (req) => JSON.stringify(req.body).includes(`other chat ${tag}`) });
    await send(OTHER_CHAT, `other chat ${tag}`);
    await until('the other reply', async () => ((await assistantReplies(OTHER_CHAT)).length > 0 ? true : undefined), 60_000);

    // a person writes in a third conversation, through an OpenHarness shell of their own
    const issue = spawnProcess('./steward', ['shells', 'issue', SHELL], stewardEnv);
    assert.equal((await issue.exited).code, 0, issue.output());
    const issued = /\(id (\S+), identity (\S+)\)\.[\s\S]*\n(oh_[A-Za-z0-9_-]{43})\n/.exec(issue.output());
    assert.ok(issued, `the shell is issued: ${issue.output()}`);
    const [, shellId, identityId, shellToken] = issued as unknown as [string, string, string, string];
    personIdentity = identityId;
    personSession = `session:openharness:${shellId}:${PERSON_CHAT}`;
    m.enqueue({ text: `person ${tag}`, match: (req) => JSON.stringify(req.body).includes(`person writes ${tag}`) });
    const r = await fetch(`${api}/api/openharness/v1`, {
      method: 'POST',
      headers: { authorization: `Bearer ${shellToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ protocol_version: '1.0.0', request_id: `ui-${tag}`, request: { context: { session_id: PERSON_CHAT, user_intent: `person writes ${tag}` } } }),
    });
    const answer = await r.text();
    assert.equal(r.status, 200, answer);
    assert.ok(answer.includes(`person ${tag}`), `the person got the reply: ${answer.slice(0, 1000)}`);
  }

  after(async () => {
    await browser?.close().catch(() => undefined);
    await stopSteward(steward);
    await model?.close();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  /** Open the workflow list filtered by a visibility query (`?query=`) and wait until it shows `expected`. */
  async function openFiltered(page: Page, query: string, expected: string[], base = ui): Promise<string[]> {
    const url = `${base}/namespaces/${NAMESPACE}/workflows?query=${encodeURIComponent(query)}`;
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

  /** From the list filtered to the chat's runs, open its session; answers its Input/Result panel. */
  async function openSession(page: Page, base = ui): Promise<Locator> {
    const session = sessionOf(CHAT);
    const listed = await openFiltered(page, `StewardChat="${CHAT}"`, [session], base);
    assert.deepEqual(listed, [session], "the chat filter finds the chat's session, and no turn workflow");
    await page.locator(`${ROW} a[href*="/workflows/${encodeURIComponent(session)}/"]`).first().click();
    await page.locator('[data-testid="workflow-id-heading"]').filter({ hasText: session }).waitFor({ timeout: 30_000 });
    const io = page.locator('[data-testid="input-and-result"]');
    await io.waitFor({ timeout: 30_000 });
    return io;
  }

  /** Open the run's Event History tab and wait until it lists `activityType` (answers the table). */
  async function openHistory(page: Page, activityType: string, shot: string): Promise<Locator> {
    await page.locator('[data-testid="history-tab"]').click();
    const events = page.locator(EVENTS);
    try {
      await page.locator(EVENT_ROW).filter({ hasText: activityType }).first().waitFor({ timeout: 30_000 });
    } catch (err) {
      await saveScreenshot(page, shots, `${shot}-FAILED`);
      throw new Error(`${(err as Error).message}; the event history shows:\n${(await events.innerText().catch(() => '')).slice(0, 3000)}`);
    }
    return events;
  }

  /** Wait until the text of `shown` (named `where`) satisfies ok; on timeout save a screenshot and show the text. */
  async function waitForText(where: string, page: Page, shown: Locator, what: string, ok: (text: string) => boolean, shot: string): Promise<string> {
    try {
      return await until(what, async () => {
        const text = await shown.innerText();
        return ok(text) ? text : undefined;
      }, 30_000);
    } catch (err) {
      await saveScreenshot(page, shots, `${shot}-FAILED`);
      throw new Error(`${(err as Error).message}; ${where} shows:\n${(await shown.innerText().catch(() => '')).slice(0, 4000)}`);
    }
  }
  const waitForEvents = waitForText.bind(null, 'the event history');
  const waitForPanel = waitForText.bind(null, 'the Input/Result panel');

  it("the link the banner printed opens the UI in a fresh browser, signed in: the chat's session, its decoded input, the turn's activities by their summaries in its history", async () => {
    const { context, page } = await newPage();
    try {
      await page.goto(bannerLink, { waitUntil: 'domcontentloaded' });
      assert.ok(page.url().startsWith(`${ui}/`), `the link signs in and lands on the UI: ${page.url()}`);
      const cookie = (await context.cookies(api)).find((c) => c.name === 'steward_codec');
      assert.ok(cookie?.httpOnly, 'the link set the HttpOnly sign-in cookie');
      assert.ok(!page.url().includes(bannerLink.split('/').pop()!), 'the token is not in the UI address');

      const decoded = page.waitForResponse((r) => r.url().startsWith(`${api}/codec/decode`), { timeout: 60_000 });
      const io = await openSession(page);
      assert.equal((await decoded).status(), 200, "the UI decodes through the same origin's codec endpoint with the cookie");
      const input = await waitForPanel(page, io, "the session's decoded input", (t) => flat(t).includes(`"chatId":"${CHAT}"`), 'session-decoded');
      assert.ok(flat(input).includes(`"model":"${MODEL}"`), 'the input holds the session settings');
      assert.match(input, /Results will appear upon completion/, 'the session runs on (no result)');

      // the event history: the turn's activities, each named by its (decoded) summary
      const events = await openHistory(page, 'modelStep', 'session-history');
      await waitForEvents(
        page,
        events,
        "the turn's activities with their summaries",
        (t) => t.includes(`Turn 1: model step 1 (${MODEL})`),
        'session-history-summaries',
      );
      const rowOf = (text: string) => page.locator(EVENT_ROW).filter({ hasText: text }).first();
      assert.match(await rowOf(`Turn 1: model step 1 (${MODEL})`).innerText(), /Activity Task Scheduled[\s\S]*modelStep/, 'the model step: an activity the session scheduled');
      assert.doesNotMatch(await events.innerText(), /turnWorkflow|Start Child Workflow/i, 'no child turn workflow');
      // opened, the model step shows its decoded input: the turn it belongs to
      await rowOf(`Turn 1: model step 1 (${MODEL})`).click();
      await waitForEvents(page, events, "the model step's decoded input", (t) => flat(t).includes(`"turnId":"${turnId}"`), 'model-step-decoded');
      // and its decoded result: the step delivered the reply (steward-deliver-in-step; no delivery activity after it)
      await page.locator(EVENT_ROW).filter({ hasText: 'Activity Task Completed' }).first().click();
      await waitForEvents(page, events, "the model step's decoded result", (t) => flat(t).includes('"delivered":true'), 'model-step-delivered');
      await saveScreenshot(page, shots, 'session-history-decoded');
      // and the message's handoff (the inbound update, services/handoff.ts) names the sender
      await page.locator(EVENT_ROW).filter({ hasText: 'Workflow Execution Update Accepted' }).filter({ hasText: 'inbound' }).last().click();
      await waitForEvents(page, events, 'the decoded inbound message', (t) => flat(t).includes(`"user":"${USER}"`), 'inbound-decoded');
      assert.equal(await page.locator('[data-testid="data-encoder-status-error"]').count(), 0, 'no codec error is shown');
      const stored = await page.evaluate(() => ({ includeCredentials: localStorage.getItem('includeCredentials'), override: localStorage.getItem('overrideRemoteCodecConfiguration') }));
      assert.deepEqual(stored, { includeCredentials: null, override: null }, 'nothing was set in the UI');
    } finally {
      await context.close();
    }
    // the link works once
    const again = await newPage();
    try {
      const r = await again.page.goto(bannerLink, { waitUntil: 'domcontentloaded' });
      assert.equal(r?.status(), 401, 'a used link is refused');
      await again.page.locator('#link-refused').waitFor({ timeout: 15_000 });
      assert.deepEqual((await again.context.cookies(api)).filter((c) => c.name === 'steward_codec'), [], 'and signs nobody in');
    } finally {
      await again.context.close();
    }
  });

  it('a browser without the sign-in gets no plaintext: the sign-in form instead of the UI, 401 from its API and the codec, ciphertext on the dev server\'s own port', async () => {
    const { context, page } = await newPage();
    try {
      const runPath = `/ui/namespaces/${NAMESPACE}/workflows/${encodeURIComponent(sessionOf(CHAT))}`;
      await page.goto(`${api}${runPath}`, { waitUntil: 'domcontentloaded' });
      const at = new URL(page.url());
      assert.equal(at.pathname, '/codec/login', `sent to the sign-in form: ${page.url()}`);
      assert.equal(at.searchParams.get('next'), runPath, 'and back to the run afterwards');
      await page.locator('#token').waitFor();
      const shown = await page.locator('body').innerText();
      for (const plain of [USER, CHAT, REPLY, turnId]) assert.ok(!shown.includes(plain), `${plain} is not shown`);
      // the UI's API and the codec endpoint, called from this page, refuse it
      const calls = await page.evaluate(
        async ([uiApi, codec]) => {
          const history = await fetch(uiApi!);
          const decode = await fetch(codec!, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"payloads":[]}' });
          return { history: history.status, historyBody: await history.text(), decode: decode.status };
        },
        [`${ui}/api/v1/namespaces/${NAMESPACE}/workflows/${encodeURIComponent(sessionOf(CHAT))}/history`, `${api}/codec/decode`],
      );
      assert.equal(calls.history, 401, "the UI's API behind Steward needs the sign-in");
      assert.ok(!calls.historyBody.includes(USER), 'and gives nothing away');
      assert.equal(calls.decode, 401, 'the codec endpoint needs the sign-in');
    } finally {
      await context.close();
    }

    // the dev server's own UI (loopback only, what Steward proxies): its codec endpoint is
    // relative (/codec), which that origin does not serve, so payloads stay ciphertext
    const direct = await newPage();
    try {
      const io = await openSession(direct.page, `http://127.0.0.1:${uiPort}/ui`);
      const text = await waitForPanel(direct.page, io, 'the encrypted input', (t) => /Input\s*"[A-Za-z0-9+/=]{40,}"/.test(t), 'session-encrypted');
      for (const plain of [USER, CHAT, MODEL]) assert.ok(!text.includes(plain), `${plain} is not readable without the codec`);
      // the history lists the activities, but neither their summaries nor their inputs are readable
      const events = await openHistory(direct.page, 'modelStep', 'session-history-encrypted');
      await saveScreenshot(direct.page, shots, 'session-opened-encrypted');
      const history = await events.innerText();
      for (const plain of ['Turn 1:', USER, turnId]) assert.ok(!history.includes(plain), `${plain} is not readable in the history without the codec`);
    } finally {
      await direct.context.close();
    }
  });

  it('filters the runs by Steward search attributes (chat, user, kind) and shows exactly the expected sessions', async () => {
    const { context, page } = await signedInPage();
    try {
      const [session, other] = [sessionOf(CHAT), sessionOf(OTHER_CHAT)];
      const byChat = await openFiltered(page, `StewardChat="${CHAT}"`, [session]);
      await saveScreenshot(page, shots, 'list-filtered-by-chat');
      assert.deepEqual(byChat, [session], 'the chat filter shows its session (its turn runs inside it: no turn workflow), and nothing of the other chat');

      const byUser = await openFiltered(page, `StewardUser="${personIdentity}"`, [personSession]);
      await saveScreenshot(page, shots, 'list-filtered-by-user');
      assert.deepEqual(byUser, [personSession], 'the user filter (an identity id) shows the session the person wrote in, and nothing of the operator\'s chats');
      const byPersonAndChat = await openFiltered(page, `StewardUser="${personIdentity}" AND StewardChat="${PERSON_CHAT}"`, [personSession]);
      assert.deepEqual(byPersonAndChat, [personSession], 'user and chat together');

      const all = [session, other, personSession].sort();
      const sessions = await openFiltered(page, `StewardKind="session" AND StewardChat IN ("${CHAT}", "${OTHER_CHAT}", "${PERSON_CHAT}")`, all);
      await saveScreenshot(page, shots, 'list-filtered-by-kind');
      assert.deepEqual(sessions, all, 'the kind filter shows the sessions');
    } finally {
      await context.close();
    }
  });

  it('answers /status with the running turn', () => {
    assert.match(statusReply, /^Running: turn 1, step \d+ \(model\)/, statusReply);
    assert.match(turnId, new RegExp(`^${sessionOf(CHAT)}:turn:1:`));
  });

  /**
   * Follow a run link in a fresh page and wait until the UI shows that workflow. `signIn`: `link`
   * signs the browser in with a one-time link first; `form` follows the run link unsigned and
   * signs in with the API token on the form it is sent to, which sends it on to the run.
   */
  async function followRunLink(link: string, workflowId: string, shot: string, signIn: 'link' | 'form'): Promise<void> {
    assert.ok(link.startsWith(`${ui}/namespaces/${NAMESPACE}/workflows/`), `${link} points at the UI Steward serves`);
    const { context, page } = signIn === 'link' ? await signedInPage() : await newPage();
    try {
      await page.goto(link, { waitUntil: 'domcontentloaded' });
      if (signIn === 'form') {
        assert.equal(new URL(page.url()).pathname, '/codec/login', `an unsigned browser is sent to the sign-in form: ${page.url()}`);
        await page.locator('#token').fill(TOKEN);
        await Promise.all([page.waitForURL((u) => u.pathname.startsWith('/ui/'), { waitUntil: 'domcontentloaded' }), page.locator('button[type="submit"]').click()]);
      }
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
      assert.ok(decodeURIComponent(new URL(page.url()).pathname).startsWith(`/ui/namespaces/${NAMESPACE}/workflows/${workflowId}/`), page.url());
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
    await followRunLink(run.url, run.id, 'link-opened-objective-run', 'link');
  });

  it('the link in /status opens the session the running turn runs in, after the sign-in form', async () => {
    const link = /https?:\/\/\S+/.exec(statusReply)?.[0];
    assert.ok(link, `/status gives the running turn's run link: ${statusReply}`);
    assert.equal(link, `${ui}/namespaces/${NAMESPACE}/workflows/${encodeURIComponent(sessionOf(CHAT))}`, "the link names the session's workflow (the turn id is no workflow)");
    await followRunLink(link, sessionOf(CHAT), 'link-opened-status-session', 'form');
  });
});
