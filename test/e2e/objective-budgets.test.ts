/**
 * An objective whose model budget is spent skips its runs (issue 34), on SQLite and PostgreSQL,
 * with the real Temporal dev server, the real worker and ledger, and the scripted model reporting
 * fixed usage:
 * - a run spends the objective's budget; the next run asks the ledger before its turn, is skipped
 *   with its receipt (the budget, when it renews) and calls no model; the objective's status says
 *   `skipped: budget <id> spent until <renewal>` through the service, the HTTP API, the CLI and
 *   chat; in the next period the budget is not spent; raised with defineBudget, runs happen again;
 * - a run whose turn the ledger refuses mid-way (the budget is not spent, but the call does not
 *   fit) is recorded the same way: skipped, not failed, so the schedule does not pause on failure.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomInt } from 'node:crypto';
import { tmpdir } from 'node:os';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createHttpApp, startHttpServer } from '../../adapters/http/app.js';
import { loadConfig } from '../../config/index.js';
import { defineBudget, removeBudget } from '../../domain/budgets/definitions.js';
import { createIdentity, OPERATOR } from '../../domain/governance.js';
import { createSpend } from '../../domain/limits.js';
import { objectiveSpentBudget } from '../../domain/objectives/runs.js';
import { adminCommand } from '../../platform/admin-cli.js';
import { testDatabases } from '../helpers/db.js';
import { lastUserText, type RecordedRequest } from '../helpers/model-server.js';
import { objectiveRuns } from '../helpers/objective-runs.js';
import { recordingSender } from '../helpers/recording-sender.js';
import { useStack, withHarness } from '../helpers/steward.js';

const OP = { id: OPERATOR.id, name: OPERATOR.name };
const tag = () => randomBytes(3).toString('hex');
/** A triggered run's id is its objective's and the second it was triggered in: two triggers are a second apart. */
const nextSecond = () => sleep(1_100);

/** The next midnight UTC after now: when a day budget in UTC renews. */
function nextUtcMidnight(): Date {
  const d = new Date();
  return new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() + 1));
}

for (const kind of testDatabases()) {
  describe(`an objective whose budget is spent skips its runs (${kind.name})`, () => {
    const stack = useStack(kind);
    const { settled } = objectiveRuns(() => stack.db);

    it('a spent budget skips the run before its turn (receipted, no model call), the status says so everywhere; the next period or a raise lets runs happen again', { timeout: 120_000 }, async () => {
      const name = `budgeted-${tag()}`;
      const budgetId = `obj-budget-${tag()}`;
      // the run's model call reports 19,000 + 1,000 tokens: the 20,000-token budget is spent by it
      stack.model.setDefault((req: RecordedRequest) => (lastUserText(req.body).includes(name) ? { text: `report of ${name}`, usage: { prompt_tokens: 19_000, completion_tokens: 1_000 } } : { text: 'ok' }));
      const ledger = createSpend({ db: stack.db, budget: null });
      const sender = recordingSender();
      await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, spend: ledger, senders: { telegram: sender } }, async (h) => {
        const adminId = String(randomInt(1e8, 1e9));
        await createIdentity(stack.db, { name: 'Ada', role: 'admin', accounts: [{ platform: 'telegram', userId: adminId, dmChatId: adminId, dmAccount: String(randomInt(1e8, 1e9)) }], createdBy: 'test' });
        const o = await h.objectives.create({ name, prompt: `Report the queue (${name})`, platform: 'http', account: h.account, chatId: h.chatId, schedule: { cron: '0 0 1 1 *' }, paused: true }, OP);
        await defineBudget(stack.db, { id: budgetId, scope: 'objective', scopeId: o.id, tokens: 20_000, period: 'day' });
        // active (its schedule's next run is on January 1st: the runs here are triggered)
        await h.objectives.resume(o.id, OP);
        assert.equal((await h.objectives.show(o.id)).status, 'active');
        const calls = () => stack.model.requests.filter((r) => lastUserText(r.body).includes(name)).length;

        // the first run spends the budget
        await h.objectives.trigger(o.id, OP);
        const [first] = await settled(o.id, 1, 60_000);
        assert.equal(first?.status, 'done', first?.error ?? '');
        assert.equal(calls(), 1);
        const renews = nextUtcMidnight();
        const until = `${renews.toISOString().slice(0, 10)} 00:00 UTC`;
        const status = `skipped: budget ${budgetId} spent until ${until}`;

        // the status says so before the next run: the service, the chat's objective commands
        const shown = await h.objectives.show(o.id);
        assert.equal(shown.status, status);
        assert.deepEqual(shown.spentBudget, { id: budgetId, scope: 'objective', scopeId: o.id, period: 'day', renewsAt: renews.toISOString() });

        // the next run is skipped before its turn: its record, its receipt, no model call
        await nextSecond();
        await h.objectives.trigger(o.id, OP);
        const runs = await settled(o.id, 2, 60_000);
        const second = runs[1]!;
        assert.deepEqual([second.status, second.outcome, second.error, second.turnId], ['skipped', 'budget', status, null]);
        assert.equal(calls(), 1, 'a skipped run calls no model');
        const receipt = await stack.db.receipt.findUniqueOrThrow({ where: { key: `objective-run:${second.id}:skip` } });
        assert.equal(receipt.kind, 'objective.run');
        assert.deepEqual(JSON.parse(receipt.data), {
          objectiveId: o.id,
          name,
          // a run the schedule was triggered for has the time it was triggered at
          scheduledAt: second.scheduledAt?.toISOString() ?? null,
          skipped: status,
          reason: 'budget',
          budget: budgetId,
          scope: 'objective',
          scopeId: o.id,
          period: 'day',
          renewsAt: renews.toISOString(),
        });
        const result: unknown = await stack.env.client.workflow.getHandle(second.id).result();
        assert.deepEqual(result, { status: 'skipped', reason: status });
        // the admins are told (once per objective, budget and period)
        const told = await sender.waitForPost((p) => p.chatId === adminId && p.text.includes(`Objective ${name} skipped`));
        assert.ok(told.text.includes(`the model budget ${budgetId} (objective ${o.id}) is spent; its runs are skipped until ${until}`), told.text);

        // chat: the list and the show
        assert.match((await h.send('/objectives')).reply ?? '', new RegExp(`${name}: cron 0 0 1 1 \\*.*, ${status.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}, last skipped`));
        assert.ok(((await h.send(`/objective show ${name}`)).reply ?? '').includes(`Status: ${status}`));

        // the HTTP API and the CLI (through the same API)
        const TOKEN = 'objective-budgets-token-0123456789';
        const server = await startHttpServer(createHttpApp({ ingress: h.ingress, apiToken: TOKEN, health: async () => ({ ok: true, checks: {} }), objectives: h.objectives }), { host: '127.0.0.1', port: 0 });
        try {
          const got = await fetch(`${server.url}/api/v1/objectives/${o.id}`, { headers: { authorization: `Bearer ${TOKEN}` } });
          const body = (await got.json()) as { status: string; lastRun: { status: string; error: string } };
          assert.deepEqual([body.status, body.lastRun.status, body.lastRun.error], [status, 'skipped', status]);
          const out: string[] = [];
          const io = { config: () => loadConfig({}, tmpdir()), out: (x: string) => void out.push(x), err: (x: string) => void out.push(x), api: { url: server.url, token: TOKEN } };
          assert.equal(await adminCommand('objectives', ['list'], io), 0);
          assert.ok(out.join('').split('\n').some((l) => l.includes(name) && l.includes('skipped') && l.includes(status)), out.join(''));
        } finally {
          await server.close();
        }

        // in the next period the budget is not spent
        const row = { id: o.id, platform: 'http', account: h.account, chatId: h.chatId };
        assert.equal(await objectiveSpentBudget(stack.db, row, renews.getTime() + 1), undefined);
        assert.equal((await objectiveSpentBudget(stack.db, row))?.id, budgetId);

        // raised: the status is active again and the next run calls the model
        await defineBudget(stack.db, { id: budgetId, scope: 'objective', scopeId: o.id, tokens: 100_000, period: 'day' });
        assert.equal((await h.objectives.show(o.id)).status, 'active');
        await nextSecond();
        await h.objectives.trigger(o.id, OP);
        const after = await settled(o.id, 3, 60_000);
        assert.equal(after[2]?.status, 'done', after[2]?.error ?? '');
        assert.equal(calls(), 2);
        await h.objectives.remove(o.id, OP);
      });
      await removeBudget(stack.db, budgetId);
    });

    it('a turn the ledger refuses mid-way is recorded as a skipped run naming the budget, not a failure: the schedule does not pause', { timeout: 120_000 }, async () => {
      const name = `refused-${tag()}`;
      const budgetId = `obj-small-${tag()}`;
      stack.model.setDefault(() => ({ text: 'ok' }));
      const ledger = createSpend({ db: stack.db, budget: null });
      await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, spend: ledger }, async (h) => {
        const o = await h.objectives.create({ name, prompt: `Report the queue (${name})`, platform: 'http', account: h.account, chatId: h.chatId, schedule: { cron: '0 0 1 1 *' }, paused: true, pauseOnFailure: true }, OP);
        // 100 tokens are not spent, but no call fits in them (its output cap alone is larger)
        await defineBudget(stack.db, { id: budgetId, scope: 'objective', scopeId: o.id, tokens: 100, period: 'day' });
        await h.objectives.resume(o.id, OP);
        const before = stack.model.requests.length;
        await h.objectives.trigger(o.id, OP);
        const [run] = await settled(o.id, 1, 60_000);
        const status = `skipped: budget ${budgetId} spent until ${nextUtcMidnight().toISOString().slice(0, 10)} 00:00 UTC`;
        assert.deepEqual([run?.status, run?.outcome, run?.error], ['skipped', 'budget', status]);
        assert.equal(stack.model.requests.filter((r) => lastUserText(r.body).includes(name)).length, 0, 'the refused call reached no model');
        assert.ok(stack.model.requests.length >= before);
        const end = await stack.db.receipt.findUniqueOrThrow({ where: { key: `objective-run:${run!.id}:end` } });
        assert.deepEqual(JSON.parse(end.data), {
          objectiveId: o.id,
          name,
          status: 'skipped',
          // the turn ends budget-refused at the ledger's refusal (patch steward-budget-wait; `failed` before it)
          outcome: 'budget-refused',
          skipped: status,
          reason: 'budget',
          budget: budgetId,
          scope: 'objective',
          scopeId: o.id,
          period: 'day',
          renewsAt: nextUtcMidnight().toISOString(),
        });
        const result: unknown = await stack.env.client.workflow.getHandle(run!.id).result();
        assert.deepEqual(result, { status: 'skipped', turnId: `${run!.id}:turn`, outcome: 'budget-refused', reason: status });
        const view = await h.objectives.show(o.id);
        assert.equal(view.paused, false, 'a skipped run does not pause the schedule on failure');
        assert.deepEqual([view.lastRun?.status, view.lastRun?.error], ['skipped', status]);
        await h.objectives.remove(o.id, OP);
      });
      await removeBudget(stack.db, budgetId);
    });
  });
}
