/**
 * The console's Objectives page in a real browser (headless Debian Chromium driven by
 * playwright-core) against `./steward start` (the embedded Temporal dev server and SQLite) with
 * the scripted model server:
 *  - the list shows an objective's schedule, time zone, state and next run, linked to its page;
 *  - Pause (with a note) and Resume, by keyboard, change the Temporal Schedule itself (asked
 *    through the Temporal client: paused, its note), shown in place without a reload;
 *  - Trigger now starts one run, which reaches the recent runs (linked to its run in `/ui` and
 *    to the chat it reports into);
 *  - a backfill whose end is before its start is refused in place (400) and starts nothing;
 *  - a person below the operator role is refused by the service (409, in place) and the
 *    schedule stays as it was: the console mounted in-process with that person as the actor,
 *    on the same Temporal server and database;
 *  - axe-core finds no serious or critical violation on the list or the objective's page; at
 *    375 px nothing overflows sideways.
 * Screenshots go to test-artifacts/console/ (gitignored).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { Client, Connection } from '@temporalio/client';
import { Hono } from 'hono';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { createConsoleRoutes } from '../../adapters/console/app.js';
import { BrowserSignIn } from '../../adapters/http/sign-in.js';
import { codecDataConverter, resolveCodecKeys, StewardCodec } from '../../common/codec.js';
import { objectiveScheduleId } from '../../common/objectives.js';
import type { Actor } from '../../common/roles.js';
import { createDb, type Db } from '../../domain/db.js';
import { createObjectiveService } from '../../services/objectives.js';
import type { ConsoleChats } from '../../services/console.js';
import { artifactDir, browserSkip, launchChromium, saveScreenshot } from '../helpers/browser.js';
import { needs } from '../helpers/requirements.js';
import { lastUserText, startModelServer, type ModelServer } from '../helpers/model-server.js';
import type { Spawned } from '../helpers/process.js';
import { freeStewardPorts, startEnv, startSteward, stopSteward, type StewardPorts } from '../helpers/started-steward.js';
import { seriousAxeViolations } from '../helpers/console-browser.js';

const TOKEN = 'console-objectives-e2e-token-0123456789';
const tag = Date.now().toString(36);
const CHAT = `objectives-${tag}`;
const NAME = `digest-${tag}`;
const MODEL = 'openai-compatible:console-objectives-model';

/** Nothing on the page is wider than the window. */
async function noSidewaysOverflow(page: Page): Promise<void> {
  const r = await page.evaluate(() => {
    const w = globalThis as unknown as { document: { documentElement: { scrollWidth: number } }; innerWidth: number };
    return { scroll: w.document.documentElement.scrollWidth, inner: w.innerWidth };
  });
  assert.ok(r.scroll <= r.inner, `the page is ${r.scroll} px wide in a ${r.inner} px window`);
}

describe('the console: objectives', { skip: browserSkip() || (await needs('chromium')), timeout: 600_000 }, () => {
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
  let objectiveId = '';
  const shots = artifactDir('console');

  const call = async (method: string, route: string, body?: unknown) => {
    const r = await fetch(`${api}${route}`, {
      method,
      headers: { authorization: `Bearer ${TOKEN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await r.text();
    return { status: r.status, body: (text ? JSON.parse(text) : {}) as Record<string, unknown> };
  };
  const signInLink = async (next: string) => {
    const r = await fetch(`${api}/codec/links`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` } });
    return `${((await r.json()) as { url: string }).url}?next=${encodeURIComponent(next)}`;
  };
  const schedule = () => client!.schedule.getHandle(objectiveScheduleId(objectiveId)).describe();
  const runsOf = async () => ((await call('GET', `/api/v1/objectives/${objectiveId}`)).body.runs ?? []) as Array<{ id: string; status: string }>;

  before(async () => {
    browser = await launchChromium();
    model = await startModelServer();
    model.setDefault((req) => ({ text: `Digest: ${lastUserText(req.body).slice(0, 40)}` }));
    dataDir = mkdtempSync(path.join(tmpdir(), 'steward-console-objectives-'));
    ports = await freeStewardPorts();
    const env = startEnv({ dataDir, ports, token: TOKEN, model: MODEL, modelBaseURL: model.baseURL, extra: { STEWARD_TEMPORAL_UI: 'true', STEWARD_TEMPORAL_UI_URL: '' } });
    const started = await startSteward(env);
    steward = started;
    api = started.api;
    await steward.waitForOutput(/Steward is running/, 60_000);
    connection = await Connection.connect({ address: `127.0.0.1:${ports.temporal}` });
    // Steward's payload codec (the keys it generated in its data directory) reads the schedule's action
    const { keys } = await resolveCodecKeys({ dataDir, generate: false });
    client = new Client({ connection, namespace: 'default', dataConverter: codecDataConverter(new StewardCodec({ keys })) });
    // a daily schedule: nothing runs by itself while the test runs
    const created = await call('POST', '/api/v1/objectives', { name: NAME, prompt: `Write the morning digest (${tag})`, chatId: CHAT, platform: 'http', schedule: { cron: '0 9 * * *', timezone: 'Europe/Berlin' } });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    objectiveId = created.body.id as string;
  });

  after(async () => {
    await browser?.close().catch(() => undefined);
    await connection?.close().catch(() => undefined);
    await stopSteward(steward);
    await model?.close();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it('lists the objective with its schedule, time zone, state and next run, linked to its page', async () => {
    context = await browser!.newContext({ viewport: { width: 1280, height: 900 } });
    context.setDefaultTimeout(30_000);
    page = await context.newPage();
    await page.goto(await signInLink('/console/objectives'), { waitUntil: 'domcontentloaded' });
    assert.equal(new URL(page.url()).pathname, '/console/objectives');
    const row = page.locator(`#objectives tr[data-objective="${objectiveId}"]`);
    await row.waitFor();
    const text = await row.innerText();
    assert.match(text, new RegExp(NAME));
    assert.match(text, /cron 0 9 \* \* \*/);
    assert.match(text, /Europe\/Berlin/);
    assert.match(text, /active/);
    const next = (await schedule()).info.nextActionTimes[0]!;
    assert.equal(await row.locator('time').first().getAttribute('datetime'), next.toISOString(), 'the next run is the schedule\'s');
    assert.match(text, /none yet/);
    // keyboard: the objective's link is reached and followed with Enter
    await row.locator('a').focus();
    await page.keyboard.press('Enter');
    await page.waitForURL(`**/console/objectives/${objectiveId}`);
    await page.locator('#objective-status').waitFor();
    assert.match(await page.locator('.settings').innerText(), /Europe\/Berlin/);
    await page.waitForFunction(() => (globalThis as unknown as { htmx?: unknown }).htmx !== undefined);
    assert.equal(await page.locator(`.settings a[href="/console/chats/${CHAT}"]`).count(), 1, 'the chat it reports into is linked');
  });

  it('Pause (with a note) and Resume, by keyboard, change the Temporal Schedule, shown in place', async () => {
    const p = page!;
    const url = p.url();
    assert.equal((await schedule()).state.paused, false);
    await p.locator('#pause-note').focus();
    await p.keyboard.type(`quiet week ${tag}`);
    await p.keyboard.press('Tab');
    assert.equal(await p.evaluate(() => (globalThis as unknown as { document: { activeElement: { id: string } | null } }).document.activeElement?.id), 'pause');
    await p.keyboard.press('Enter');
    await p.locator('#action-result', { hasText: 'Paused' }).waitFor();
    await p.locator('#objective-status [data-state="paused"]').waitFor();
    const paused = await schedule();
    assert.equal(paused.state.paused, true, 'the Temporal Schedule is paused');
    assert.match(paused.state.note ?? '', new RegExp(`quiet week ${tag}`));
    assert.match(await p.locator('#objective-status').innerText(), new RegExp(`quiet week ${tag}`));
    assert.match(await p.locator('#next-runs').innerText(), /None while paused/);
    assert.equal(p.url(), url, 'no reload');

    await p.keyboard.press('Tab');
    assert.equal(await p.evaluate(() => (globalThis as unknown as { document: { activeElement: { id: string } | null } }).document.activeElement?.id), 'resume');
    await p.keyboard.press('Space');
    await p.locator('#action-result', { hasText: 'Resumed' }).waitFor();
    await p.locator('#objective-status [data-state="active"]').waitFor();
    assert.equal((await schedule()).state.paused, false, 'the Temporal Schedule runs again');
    assert.ok((await p.locator('#next-runs li').count()) > 0);
    assert.equal((await call('GET', `/api/v1/objectives/${objectiveId}`)).body.paused, false);

    // the same actions as plain forms (no htmx): the same change, then back to the objective's page
    const csrf = await p.locator('input[name="_csrf"]').first().inputValue();
    for (const [action, paused] of [['pause', true], ['resume', false]] as const) {
      const r = await context!.request.post(`${api}/console/objectives/${objectiveId}/${action}`, { form: { _csrf: csrf, ...(action === 'pause' ? { note: 'plain pause' } : {}) }, maxRedirects: 0 });
      assert.equal(r.status(), 303, action);
      assert.equal(r.headers()['location'], `/console/objectives/${objectiveId}`);
      const s = await schedule();
      assert.equal(s.state.paused, paused, action);
      assert.match(s.state.note ?? '', action === 'pause' ? /paused by the operator: plain pause/ : /resumed by the operator/);
    }
  });

  it('Trigger now starts one run, which reaches the recent runs with links to the run and the chat', async () => {
    const p = page!;
    model!.enqueue({ text: `Triggered digest ${tag}.`, match: (req) => lastUserText(req.body).includes(tag) });
    const before = (await schedule()).info.numActionsTaken;
    await p.locator('#trigger').click();
    await p.locator('#action-result', { hasText: 'Triggered' }).waitFor();
    // the page polls its state: the run arrives without a reload
    const row = p.locator('#recent-runs tr[data-run]');
    await row.first().waitFor({ timeout: 60_000 });
    assert.equal(await row.count(), 1);
    const runId = (await row.first().getAttribute('data-run'))!;
    assert.match(runId, new RegExp(`^objective-run:${objectiveId}`));
    assert.equal(await row.first().locator('a').getAttribute('href'), `/ui/namespaces/default/workflows/${encodeURIComponent(runId)}`);
    await p.locator('#recent-runs .run-done').waitFor({ timeout: 60_000 });
    assert.equal((await runsOf()).length, 1);
    assert.equal((await schedule()).info.numActionsTaken, before + 1);
    console.log(`screenshot: ${await saveScreenshot(p, shots, 'objective')}`);
  });

  it('a backfill whose end is before its start is refused in place and starts nothing', async () => {
    const p = page!;
    const taken = (await schedule()).info.numActionsTaken;
    const runs = (await runsOf()).length;
    await p.locator('#backfill-start').fill('2026-01-02T00:00');
    await p.locator('#backfill-end').fill('2026-01-01T00:00');
    await p.locator('#backfill').click();
    const answer = p.locator('#action-result [data-status="400"]');
    await answer.waitFor();
    assert.match(await answer.innerText(), /start must be before end/);
    // a value that is no time at all: 400 from the page's own check, also nothing started
    const csrf = await p.locator('input[name="_csrf"]').first().inputValue();
    const bad = await context!.request.post(`${api}/console/objectives/${objectiveId}/backfill`, { form: { _csrf: csrf, start: 'yesterday', end: '2026-01-01T00:00' } });
    assert.equal(bad.status(), 400);
    assert.match(await bad.text(), /expected a date and time/);
    await sleep(2000);
    assert.equal((await schedule()).info.numActionsTaken, taken, 'the schedule took no action');
    assert.equal((await runsOf()).length, runs, 'no run started');
  });

  it('a person below the operator role is refused by the service (409, in place) and the schedule stays as it was', async () => {
    const db: Db = createDb(`file:${path.join(dataDir, 'steward.db')}`);
    try {
      const objectives = createObjectiveService({ client: client!, db, taskQueue: 'unused-refused-before-any-start', maxSteps: 4 });
      const member: Actor = { kind: 'person', id: `member-${tag}`, name: 'Mia Member', role: 'member' };
      const unused = async () => {
        throw new Error('not used by the objectives page');
      };
      const chats: ConsoleChats = { list: unused, transcript: unused, status: unused, stop: unused, steer: unused };
      const app = new Hono();
      app.route('/', createConsoleRoutes({ apiToken: TOKEN, signIn: new BrowserSignIn({ apiToken: TOKEN }), chats, services: { objectives }, actorOf: () => member }));
      const post = (action: string, htmx: boolean) =>
        app.request(`http://127.0.0.1/console/objectives/${objectiveId}/${action}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/x-www-form-urlencoded', ...(htmx ? { 'hx-request': 'true' } : {}) },
          body: new URLSearchParams(action === 'backfill' ? { start: '2026-01-01T00:00', end: '2026-01-02T00:00' } : {}).toString(),
        });
      for (const action of ['pause', 'trigger', 'backfill']) {
        const r = await post(action, true);
        assert.equal(r.status, 409, action);
        assert.match(await r.text(), /managing objectives needs the operator role; you are a member/);
      }
      const plain = await post('pause', false);
      assert.equal(plain.status, 409);
      assert.match(await plain.text(), /<h1>Objective/);
      const s = await schedule();
      assert.equal(s.state.paused, false, 'still running');
      assert.equal((await runsOf()).length, 1, 'no run started');
      // the operator (the API's bearer token) is not refused
      assert.equal((await call('POST', `/api/v1/objectives/${objectiveId}/pause`, { note: 'by the API' })).status, 200);
      assert.equal((await schedule()).state.paused, true);
      assert.equal((await call('POST', `/api/v1/objectives/${objectiveId}/resume`)).status, 200);
    } finally {
      await db.$disconnect();
    }
  });

  it('the list and the objective pass an axe-core scan and fit a 375 px screen', async () => {
    // axe is injected as a script, which the console's CSP (rightly) refuses: this context bypasses CSP for the scan only
    const scan = await browser!.newContext({ bypassCSP: true, viewport: { width: 1280, height: 900 } });
    try {
      const p = await scan.newPage();
      await p.goto(await signInLink('/console/objectives'), { waitUntil: 'domcontentloaded' });
      for (const route of ['/console/objectives', `/console/objectives/${objectiveId}`]) {
        await p.goto(`${api}${route}`, { waitUntil: 'domcontentloaded' });
        const bad = await seriousAxeViolations(p);
        assert.deepEqual(bad, [], `${route}: ${JSON.stringify(bad)}`);
      }
    } finally {
      await scan.close();
    }
    const phone = await browser!.newContext({ viewport: { width: 375, height: 800 } });
    try {
      const p = await phone.newPage();
      await p.goto(await signInLink('/console/objectives'), { waitUntil: 'domcontentloaded' });
      await p.locator('#objectives').waitFor();
      await noSidewaysOverflow(p);
      await p.goto(`${api}/console/objectives/${objectiveId}`, { waitUntil: 'domcontentloaded' });
      await p.locator('#recent-runs tr[data-run]').first().waitFor();
      await noSidewaysOverflow(p);
      console.log(`screenshot: ${await saveScreenshot(p, shots, 'objective-375')}`);
    } finally {
      await phone.close();
    }
  });
});
