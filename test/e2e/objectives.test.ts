/**
 * Objectives end to end on the Temporal dev server's real Schedules: runs report into the
 * chat's transcript like any turn; pause, resume, trigger now, backfill across DST changes,
 * skip missed runs, overlap policies with a slow run, a failing objective pausing itself and
 * telling the admins with its run link, delete; every change receipted; never a run twice.
 */
import assert from 'node:assert/strict';
import { createHmac, randomBytes, randomInt } from 'node:crypto';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { ScheduleNotFoundError } from '@temporalio/client';
import { tmpdir } from 'node:os';
import { OPERATOR, createIdentity } from '../../domain/governance.js';
import { createHttpApp, startHttpServer } from '../../adapters/http/app.js';
import { loadConfig } from '../../config/index.js';
import { adminCommand } from '../../platform/admin-cli.js';
import { objectiveScheduleId } from '../../common/objectives.js';
import { lastUserText, type RecordedRequest } from '../helpers/model-server.js';
import { recordingSender } from '../helpers/recording-sender.js';
import { useStack, waitFor, withHarness, type Harness, type HarnessOptions } from '../helpers/steward.js';
import { objectiveRuns } from '../helpers/objective-runs.js';

const OP = { id: OPERATOR.id, name: OPERATOR.name };
const tag = () => randomBytes(3).toString('hex');

describe('objectives on Temporal Schedules', () => {
  const stack = useStack();
  const opts = (extra: Partial<HarnessOptions> = {}): HarnessOptions => ({
    env: stack.env,
    db: stack.db,
    providers: { openaiCompatible: { baseURL: stack.model.baseURL } },
    runLink: (id) => `http://127.0.0.1:8233/namespaces/default/workflows/${encodeURIComponent(id)}`,
    ...extra,
  });
  const { runsOf, settled } = objectiveRuns(() => stack.db);
  const reply = (marker: string, text: string) => (req: RecordedRequest) => (lastUserText(req.body).includes(marker) ? { text } : { text: 'ok' });

  it('runs on its schedule into the chat; pause, resume, trigger and delete behave and are receipted', async () => {
    await withHarness(opts(), async (h: Harness) => {
      const name = `digest-${tag()}`;
      stack.model.setDefault(reply(name, `digest for ${name}`));
      const created = await h.objectives.create({ name, prompt: `Summarise the day (${name})`, chatId: h.chatId, platform: 'http', account: h.account, schedule: { every: '2s' } }, OP);
      assert.equal(created.paused, false);
      assert.ok(created.nextRuns.length > 0, 'the next run is known');
      // a scheduled run reports into the chat's transcript like any turn
      await h.waitForMessage((m) => m.role === 'assistant' && m.text === `digest for ${name}`, { timeoutMs: 20_000 });
      const runs1 = await settled(created.id, 1);
      assert.equal(runs1[0]?.status, 'done');
      assert.ok(runs1[0]?.scheduledAt, 'a scheduled run knows its scheduled time');
      const listed = (await h.objectives.list()).find((o) => o.id === created.id);
      assert.equal(listed?.lastRun?.status, 'done');
      assert.ok((listed?.nextRuns.length ?? 0) > 0);

      const paused = await h.objectives.pause(name, OP);
      assert.equal(paused.paused, true);
      assert.deepEqual(paused.nextRuns, []);
      await sleep(1000);
      const before = (await runsOf(created.id)).length;
      await sleep(4500);
      assert.equal((await runsOf(created.id)).length, before, 'no runs while paused');

      // trigger now works while paused
      await h.objectives.trigger(created.id, OP);
      await settled(created.id, before + 1);

      await h.objectives.resume(name, OP);
      await settled(created.id, before + 2, 20_000);

      // never a run twice: one workflow per scheduled time
      const all = await runsOf(created.id);
      assert.equal(new Set(all.map((r) => r.id)).size, all.length);
      const times = all.map((r) => r.scheduledAt?.toISOString()).filter(Boolean);
      assert.equal(new Set(times).size, times.length);

      assert.equal(await h.objectives.remove(name, OP), true);
      await assert.rejects(stack.env.client.schedule.getHandle(objectiveScheduleId(created.id)).describe(), ScheduleNotFoundError);
      const receipts = await stack.db.receipt.findMany({ where: { kind: 'objective.change', workflowId: objectiveScheduleId(created.id) }, orderBy: { id: 'asc' } });
      assert.deepEqual(receipts.map((r) => (JSON.parse(r.data) as { action: string }).action), ['create', 'pause', 'trigger', 'resume', 'delete']);
      const pauseReceipt = JSON.parse(receipts[1]!.data) as { by: string; before: { paused: boolean }; after: { paused: boolean } };
      assert.deepEqual([pauseReceipt.by, pauseReceipt.before.paused, pauseReceipt.after.paused], [OP.name, false, true]);
    });
  });

  it('fires at the right times across DST changes in its time zone (backfill over the change)', async () => {
    await withHarness(opts(), async (h) => {
      stack.model.setDefault(() => ({ text: 'morning report' }));
      const cases = [
        // Europe/Berlin moves to summer time on 2026-03-29: 09:00 is 08:00Z before, 07:00Z after
        { tz: 'Europe/Berlin', start: '2026-03-27T00:00:00Z', end: '2026-03-31T00:00:00Z', want: ['2026-03-27T08:00:00.000Z', '2026-03-28T08:00:00.000Z', '2026-03-29T07:00:00.000Z', '2026-03-30T07:00:00.000Z'] },
        // America/New_York leaves daylight time on 2026-11-01: 09:00 is 13:00Z before, 14:00Z after
        { tz: 'America/New_York', start: '2026-10-30T00:00:00Z', end: '2026-11-03T00:00:00Z', want: ['2026-10-30T13:00:00.000Z', '2026-10-31T13:00:00.000Z', '2026-11-01T14:00:00.000Z', '2026-11-02T14:00:00.000Z'] },
      ];
      for (const c of cases) {
        const o = await h.objectives.create({ name: `morning-${tag()}`, prompt: 'Morning report', chatId: h.chatId, account: h.account, schedule: { cron: '0 9 * * *', timezone: c.tz }, paused: true }, OP);
        await h.objectives.backfill(o.id, { start: c.start, end: c.end }, OP);
        const runs = await settled(o.id, c.want.length);
        assert.deepEqual(runs.map((r) => r.scheduledAt?.toISOString()).sort(), c.want, c.tz);
        assert.ok(runs.every((r) => r.status === 'done'));
        await h.objectives.remove(o.id, OP);
      }
    });
  });

  it('skip missed runs: runs scheduled before the skip are recorded as skipped and never reach the model', async () => {
    await withHarness(opts(), async (h) => {
      const name = `hourly-${tag()}`;
      stack.model.setDefault(reply(name, 'should not run'));
      const o = await h.objectives.create({ name, prompt: `Hourly check (${name})`, chatId: h.chatId, account: h.account, schedule: { every: '1h' }, paused: true }, OP);
      const requests = stack.model.requests.length;
      await h.objectives.skipMissed(o.id, OP);
      const now = Date.now();
      await h.objectives.backfill(o.id, { start: new Date(now - 3.5 * 3_600_000).toISOString(), end: new Date(now - 60_000).toISOString() }, OP);
      const runs = await settled(o.id, 3);
      assert.ok(runs.every((r) => r.status === 'skipped'), JSON.stringify(runs.map((r) => r.status)));
      assert.equal(stack.model.requests.slice(requests).filter((r) => lastUserText(r.body).includes(name)).length, 0);
      await h.objectives.remove(o.id, OP);
    });
  });

  it('overlap policies with a slow run: skip drops the second, allow-all runs both', async () => {
    await withHarness(opts(), async (h) => {
      const name = `slow-${tag()}`;
      stack.model.setDefault((req) => (lastUserText(req.body).includes(name) ? { text: 'slow answer', firstTokenDelayMs: 2500 } : { text: 'ok' }));
      const o = await h.objectives.create({ name, prompt: `Slow work (${name})`, chatId: h.chatId, account: h.account, schedule: { every: '1h' }, paused: true, overlap: 'skip' }, OP);
      await h.objectives.trigger(o.id, OP);
      await waitFor(async () => ((await runsOf(o.id)).length === 1 ? true : undefined), 'the first run');
      await sleep(1100);
      await h.objectives.trigger(o.id, OP); // skipped: one is running
      await settled(o.id, 1);
      await sleep(1000);
      assert.equal((await runsOf(o.id)).length, 1, 'skip: the second trigger started nothing');

      await h.objectives.update(o.id, { overlap: 'allow-all' }, OP);
      await h.objectives.trigger(o.id, OP);
      await waitFor(async () => ((await runsOf(o.id)).length === 2 ? true : undefined), 'the second run');
      // a run's id carries its nominal time to the second: two triggers within one second are one run
      await sleep(1100);
      await h.objectives.trigger(o.id, OP);
      const runs = await settled(o.id, 3);
      assert.equal(runs.length, 3, 'allow-all: both ran');
      await h.objectives.remove(o.id, OP);
    });
  });

  it('a failing objective pauses itself (pause on failure) and tells the admins with the run link', async () => {
    const sender = recordingSender();
    await withHarness(opts({ senders: { telegram: sender } }), async (h) => {
      const adminId = String(randomInt(1e8, 1e9));
      const account = String(randomInt(1e8, 1e9));
      await createIdentity(stack.db, { name: 'Ada', role: 'admin', accounts: [{ platform: 'telegram', userId: adminId, dmChatId: adminId, dmAccount: account }], createdBy: 'test' });
      const name = `broken-${tag()}`;
      stack.model.setDefault((req) => (lastUserText(req.body).includes(name) ? { status: 400, errorBody: { error: { message: 'bad request', type: 'invalid_request_error' } } } : { text: 'ok' }));
      const o = await h.objectives.create({ name, prompt: `Break (${name})`, chatId: h.chatId, account: h.account, schedule: { every: '3s' }, pauseOnFailure: true }, OP);
      const runs = await settled(o.id, 1);
      assert.equal(runs[0]?.status, 'failed');
      const post = await sender.waitForPost((p) => p.chatId === adminId && p.text.includes(`Objective ${name} failed`));
      assert.match(post.text, /Run: http:\/\/127\.0\.0\.1:8233\/namespaces\/default\/workflows\/objective-run/);
      // the run itself failed in Temporal, so the schedule paused
      await waitFor(async () => ((await stack.env.client.schedule.getHandle(objectiveScheduleId(o.id)).describe()).state.paused ? true : undefined), 'the schedule to pause');
      // the chat was told too (the turn's notice)
      await h.waitForMessage((m) => m.role === 'system' && /model call failed/i.test(m.text));
      await h.objectives.remove(o.id, OP);
    });
  });

  it('limits: runs over the objective\'s budget are skipped, never reach the model, are receipted, and the admins are told once', async () => {
    const sender = recordingSender();
    await withHarness(opts({ senders: { telegram: sender }, limits: { objectiveRuns: { count: 2, windowMs: 3_600_000 } } }), async (h) => {
      const adminId = String(randomInt(1e8, 1e9));
      const account = String(randomInt(1e8, 1e9));
      await createIdentity(stack.db, { name: 'Ada', role: 'admin', accounts: [{ platform: 'telegram', userId: adminId, dmChatId: adminId, dmAccount: account }], createdBy: 'test' });
      const name = `capped-${tag()}`;
      stack.model.setDefault(reply(name, `report of ${name}`));
      const requests = stack.model.requests.length;
      const o = await h.objectives.create({ name, prompt: `Report (${name})`, chatId: h.chatId, account: h.account, schedule: { every: '1h' }, paused: true, overlap: 'allow-all' }, OP);
      for (let i = 0; i < 4; i++) {
        await h.objectives.trigger(o.id, OP);
        // a run's id carries its nominal time to the second
        await sleep(1100);
      }
      const runs = await settled(o.id, 4);
      assert.deepEqual(runs.map((r) => r.status).sort(), ['done', 'done', 'skipped', 'skipped'], JSON.stringify(runs));
      assert.equal(stack.model.requests.slice(requests).filter((r) => lastUserText(r.body).includes(name)).length, 2, 'a skipped run calls no model');
      const refused = (await stack.db.receipt.findMany({ where: { kind: 'limit.refused' } })).map((r) => JSON.parse(r.data) as { limit: string; scope?: string }).filter((d) => d.scope === `objective:${o.id}`);
      assert.equal(refused.length, 2);
      const skips = (await stack.db.receipt.findMany({ where: { kind: 'objective.run', key: { endsWith: ':skip' } } })).map((r) => JSON.parse(r.data) as { objectiveId: string; skipped: string }).filter((d) => d.objectiveId === o.id);
      assert.ok(skips.length === 2 && skips.every((d) => /over its limit of 2 runs per hour/.test(d.skipped)), JSON.stringify(skips));
      await sender.waitForPost((p) => p.chatId === adminId && p.text.includes(`objective ${name} ran 2 times`));
      await sleep(300);
      assert.equal(sender.posts.filter((p) => p.chatId === adminId && p.text.includes('Objective limit') && p.text.includes(name)).length, 1, 'told once');
      await h.objectives.remove(o.id, OP);
    });
  });

  it('managed from chat, the HTTP API and the CLI', async () => {
    await withHarness(opts(), async (h) => {
      const TOKEN = 'objectives-test-token-0123456789';
      const server = await startHttpServer(createHttpApp({ ingress: h.ingress, apiToken: TOKEN, health: async () => ({ ok: true, checks: {} }), objectives: h.objectives }), { host: '127.0.0.1', port: 0 });
      const api = (method: string, route: string, body?: unknown) =>
        fetch(`${server.url}${route}`, { method, headers: { authorization: `Bearer ${TOKEN}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) }, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
      const out: string[] = [];
      const err: string[] = [];
      const io = { config: () => loadConfig({}, tmpdir()), out: (x: string) => void out.push(x), err: (x: string) => void err.push(x), api: { url: server.url, token: TOKEN } };
      try {
        stack.model.setDefault(() => ({ text: 'ok' }));
        // chat: add in this chat, list, pause, show
        const chatName = `chat-${tag()}`;
        const added = await h.send(`/objective add ${chatName} 1h tz=Europe/Berlin Summarise the news`);
        assert.match(added.reply ?? '', new RegExp(`Objective ${chatName} added: it reports here`));
        assert.match((await h.send('/objectives')).reply ?? '', new RegExp(`${chatName}: every 1h \\(Europe/Berlin\\)`));
        assert.match((await h.send(`/objective pause ${chatName}`)).reply ?? '', /paused/);
        assert.match((await h.send(`/objective show ${chatName}`)).reply ?? '', /paused/);
        assert.match((await h.send(`/objective add ${chatName} soon x`)).reply ?? '', /give the schedule first/);
        const viaChat = await stack.db.objective.findUniqueOrThrow({ where: { name: chatName } });
        assert.deepEqual([viaChat.platform, viaChat.account, viaChat.chatId], ['http', h.account, h.chatId]);

        // HTTP API
        const apiName = `api-${tag()}`;
        assert.equal((await api('POST', '/api/v1/objectives', { name: apiName })).status, 400);
        const created = await api('POST', '/api/v1/objectives', { name: apiName, prompt: 'Check the queue', chatId: h.chatId, account: h.account, schedule: { every: '1h' }, overlap: 'buffer-one', catchupWindow: '10m', paused: true });
        assert.equal(created.status, 201);
        const id = ((await created.json()) as { id: string }).id;
        assert.equal((await api('POST', '/api/v1/objectives', { name: apiName, prompt: 'x', chatId: h.chatId, schedule: { every: '1h' } })).status, 409);
        assert.equal((await api('PATCH', `/api/v1/objectives/${id}`, { overlap: 'allow-all' })).status, 200);
        assert.equal((await api('PATCH', `/api/v1/objectives/${id}`, {})).status, 400);
        // an action sent with Content-Type: application/json and no body: no options
        const bare = (action: string) => fetch(`${server.url}/api/v1/objectives/${id}/${action}`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' } });
        const resumed = await bare('resume');
        assert.equal(resumed.status, 200, await resumed.clone().text());
        assert.equal(((await resumed.json()) as { paused: boolean }).paused, false);
        assert.equal(((await (await bare('pause')).json()) as { paused: boolean }).paused, true);
        assert.equal((await api('POST', `/api/v1/objectives/${id}/trigger`, { overlap: 'nope' })).status, 400);
        assert.equal((await api('POST', `/api/v1/objectives/${id}/trigger`)).status, 200);
        await settled(id, 1);
        const shown = (await (await api('GET', `/api/v1/objectives/${apiName}`)).json()) as { overlap: string; runs: unknown[]; lastRun: { status: string } };
        assert.deepEqual([shown.overlap, shown.runs.length, shown.lastRun.status], ['allow-all', 1, 'done']);
        assert.equal((await api('GET', '/api/v1/objectives/nope')).status, 404);

        // the CLI, through the same API
        const cliName = `cli-${tag()}`;
        assert.equal(await adminCommand('objectives', ['add', cliName, '--chat', h.chatId, '--account', h.account, '--cron', '0 9 * * 1-5', '--timezone', 'America/New_York', '--prompt', 'Plan the day', '--paused'], io), 0);
        assert.equal(await adminCommand('objectives', ['add', `${cliName}-x`, '--chat', h.chatId, '--every', 'often', '--prompt', 'x'], io), 2);
        assert.equal(await adminCommand('objectives', ['list'], io), 0);
        assert.match(out.join(''), new RegExp(`${cliName}.*cron 0 9 \\* \\* 1-5.*America/New_York`));
        assert.equal(await adminCommand('objectives', ['resume', cliName], io), 0);
        assert.equal(await adminCommand('objectives', ['skip-missed', cliName], io), 0);
        assert.equal(await adminCommand('objectives', ['backfill', cliName, '--start', '2026-11-02T00:00:00Z', '--end', '2026-11-03T00:00:00Z'], io), 0);
        const cliObj = await stack.db.objective.findUniqueOrThrow({ where: { name: cliName } });
        const skipped = await settled(cliObj.id, 1);
        assert.equal(skipped[0]?.status, 'skipped', 'the backfilled run was before the skip');
        for (const n of [chatName, apiName, cliName]) assert.equal(await adminCommand('objectives', ['delete', n], io), 0);
        assert.equal(await stack.db.objective.count({ where: { name: { in: [chatName, apiName, cliName] } } }), 0);
      } finally {
        await server.close();
      }
    });
  });

  it('event triggers: a signed HTTP call and a repository push run the objective once per event id', async () => {
    await withHarness(opts(), async (h) => {
      const TOKEN = 'objectives-hook-token-0123456789';
      const secret = `hook-${randomBytes(24).toString('hex')}`;
      process.env.STEWARD_HOOK_OBJECTIVES_TEST = secret;
      const server = await startHttpServer(createHttpApp({ ingress: h.ingress, apiToken: TOKEN, health: async () => ({ ok: true, checks: {} }), objectives: h.objectives }), { host: '127.0.0.1', port: 0 });
      const hmac = (content: string, key = secret) => `sha256=${createHmac('sha256', key).update(content).digest('hex')}`;
      /** Steward's scheme: the signature covers the timestamp, the event id and the body. */
      const signed = (body: string, eventId: string, key = secret) => {
        const ts = String(Math.floor(Date.now() / 1000));
        return { 'x-steward-timestamp': ts, 'x-steward-event-id': eventId, 'x-steward-signature': hmac(`${ts}.${eventId}.${body}`, key) };
      };
      const hook = (name: string, body: string, headers: Record<string, string>) => fetch(`${server.url}/hooks/objectives/${name}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
      try {
        const name = `on-push-${tag()}`;
        const seen: string[] = [];
        stack.model.setDefault((req) => {
          const text = lastUserText(req.body);
          if (text.includes(name)) seen.push(text);
          return { text: 'reviewed the push' };
        });
        const o = await h.objectives.create({ name, prompt: `Review what was pushed (${name})`, chatId: h.chatId, account: h.account, webhook: { secretRef: 'env:STEWARD_HOOK_OBJECTIVES_TEST' } }, OP);
        assert.equal(o.webhook, true);
        assert.deepEqual(o.nextRuns, [], 'no schedule: it runs on events and triggers only');

        const body = JSON.stringify({ text: 'release notes are ready', marker: 'evt-one' });
        assert.equal((await hook(name, body, signed(body, 'e1', 'wrong'))).status, 401);
        const { 'x-steward-event-id': _id, ...noId } = signed(body, 'e1');
        assert.equal((await hook(name, body, noId)).status, 400, 'an event id is required');
        assert.equal((await hook('nobody', body, signed(body, 'e1'))).status, 401, 'an unknown name: the same answer as a bad signature');
        assert.equal(await stack.db.objectiveRun.count({ where: { objectiveId: o.id } }), 0, 'refused events run nothing');

        const first = await hook(name, body, signed(body, 'e1'));
        assert.equal(first.status, 202);
        const again = await hook(name, body, signed(body, 'e1'));
        assert.equal(again.status, 200);
        assert.equal(((await again.json()) as { duplicate: boolean }).duplicate, true);

        // a GitHub push webhook: its own signature (over the body) and delivery headers
        const push = JSON.stringify({ ref: 'refs/heads/main', after: 'abc123', marker: 'evt-push' });
        const pushed = await hook(name, push, { 'x-hub-signature-256': hmac(push), 'x-github-delivery': '72d3162e-cc78-11e3-81ab-4c9367dc0958', 'x-github-event': 'push' });
        assert.equal(pushed.status, 202);

        const runs = await settled(o.id, 2);
        assert.equal(runs.length, 2, 'one run per event id');
        assert.ok(runs.every((r) => r.status === 'done'));
        assert.ok(seen.some((t) => t.includes('evt-one') && t.includes('<event source="http" id="e1">')), 'the payload reached the model as data');
        assert.ok(seen.some((t) => t.includes('evt-push') && t.includes('source="github push"')));
        await h.waitForMessage((m) => m.role === 'assistant' && m.text === 'reviewed the push');

        await h.objectives.pause(o.id, OP);
        const late = JSON.stringify({ marker: 'late' });
        assert.equal((await hook(name, late, signed(late, 'e9'))).status, 409);
        assert.equal(await stack.db.objectiveEvent.count({ where: { objectiveId: o.id } }), 2);
        await h.objectives.remove(o.id, OP);
      } finally {
        delete process.env.STEWARD_HOOK_OBJECTIVES_TEST;
        await server.close();
      }
    });
  });

  it('bad input changes nothing', async () => {
    await withHarness(opts(), async (h) => {
      const n0 = await stack.db.objective.count();
      const base = { name: `bad-${tag()}`, prompt: 'x', chatId: h.chatId, account: h.account };
      for (const bad of [
        { ...base, schedule: {} },
        { ...base, schedule: { every: '2s', cron: '* * * * *' } },
        { ...base, schedule: { every: 'often' } },
        { ...base, schedule: { every: '1h', timezone: 'Mars/Olympus' } },
        { ...base, schedule: { every: '1h' }, overlap: 'sometimes' },
        { ...base, schedule: { cron: 'not a cron' } },
        { ...base, name: 'Bad Name', schedule: { every: '1h' } },
        { ...base, schedule: { every: '1h' }, platform: 'telegram', chatId: '-100999' },
      ]) {
        await assert.rejects(h.objectives.create(bad, OP), /invalid objective|not bound|refused the schedule|expected/, JSON.stringify(bad));
      }
      assert.equal(await stack.db.objective.count(), n0);
      const o = await h.objectives.create({ ...base, schedule: { every: '1h' }, paused: true }, OP);
      await assert.rejects(h.objectives.update(o.id, { schedule: { cron: '61 * * * *' } }, OP), /refused the schedule|invalid/);
      assert.deepEqual((await h.objectives.show(o.id)).schedule, { every: '1h' }, 'unchanged');
      await assert.rejects(h.objectives.backfill(o.id, { start: '2026-01-02T00:00:00Z', end: '2026-01-01T00:00:00Z' }, OP), /start must be before end/);
      await h.objectives.remove(o.id, OP);
    });
  });
});
