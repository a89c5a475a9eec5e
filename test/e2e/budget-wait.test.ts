/**
 * A chat turn refused by a budget waits for a raise (issue 34): the real worker, the Temporal dev
 * server, the database (SQLite and PostgreSQL), the budget ledger over the database's budgets
 * and the scripted model server. The turn tells the chat at once which budget refused it, what
 * is left and when it renews, names the budget in its session's `StewardBudget` search
 * attribute, and waits; a raise through PUT /api/v1/budgets (the budget service, which wakes
 * the waiting runs through services/budgets/waiters.ts) lets its step go through, and the reply
 * arrives once; so does one through `steward budgets set`, and an admin's raise for the period. No raise within the wait: the turn ends with the refusal's message (outcome
 * `budget-refused`, receipted). /stop ends the wait at once. No model is called while it waits.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { createHttpApp } from '../../adapters/http/app.js';
import { loadConfig } from '../../config/index.js';
import { adminCommand } from '../../platform/admin-cli.js';
import type { Actor } from '../../common/roles.js';
import { bindChat, OPERATOR } from '../../domain/governance.js';
import { createSpend } from '../../domain/limits.js';
import type { Db } from '../../domain/db.js';
import { budgetWaitersQuery, wakeBudgetWaiters } from '../../services/budgets/waiters.js';
import { createBudgetService } from '../../services/budgets.js';
import type { Ingress } from '../../services/chat/intake.js';
import { statusQuery } from '../../workflows/messages.js';
import { BudgetAttr } from '../../workflows/search-attributes.js';
import { lastUserText } from '../helpers/model-server.js';
import { testDatabases } from '../helpers/db.js';
import { useStack, waitFor, withHarness, type Harness, type TestStack } from '../helpers/steward.js';

const OP = { id: OPERATOR.id, name: OPERATOR.name };
const TOKEN = 'budget-wait-test-token-0123456789';

/** The runs that wait on `budgetId`, as visibility lists them. */
async function waiters(stack: TestStack, budgetId: string): Promise<string[]> {
  const ids: string[] = [];
  for await (const wf of stack.env.client.workflow.list({ query: budgetWaitersQuery(budgetId) })) ids.push(wf.workflowId);
  return ids;
}

/** The session's `StewardBudget` (undefined once cleared). */
async function budgetAttr(stack: TestStack, h: Harness): Promise<string[] | undefined> {
  return (await stack.env.client.workflow.getHandle(h.sessionId).describe()).typedSearchAttributes.get(BudgetAttr);
}

/** A tight budget on the harness's chat: a turn's worst case (its answer cap alone is 4096 tokens) does not fit. */
async function tightChatBudget(db: Db, h: Harness, id: string): Promise<void> {
  const binding = await bindChat(db, { platform: 'http', account: h.account, chatId: h.chatId, createdBy: 'test' });
  await createBudgetService(db).set(OP, id, { scope: 'chat', scopeId: binding.id, tokens: 100, period: 'day', timezone: 'UTC' }, 'api');
}

const turnEnds = async (db: Db, sessionId: string) =>
  (await db.receipt.findMany({ where: { kind: 'turn.end', sessionId } })).map((r) => JSON.parse(r.data) as { kind: string; outcome?: string });

for (const kind of testDatabases()) {
  describe(`a chat turn refused by a budget waits for a raise (${kind.name})`, () => {
    const stack = useStack(kind);
    const providers = () => ({ openaiCompatible: { baseURL: stack.model.baseURL } });
    const answer = () =>
      stack.model.setDefault((req) => ({ text: `answer: ${lastUserText(req.body).slice(0, 40)}`, usage: { prompt_tokens: 100, completion_tokens: 50 } }));

    it('tells the chat and waits; a raise through PUT /api/v1/budgets wakes it and the reply arrives once', { timeout: 120_000 }, async () => {
      answer();
      const id = `chat-wait-${randomUUID().slice(0, 6)}`;
      const namespace = stack.env.namespace ?? 'default';
      // the API as `steward start` wires it: a budget change wakes the turns waiting on it
      const app = createHttpApp({
        ingress: {} as Ingress,
        apiToken: TOKEN,
        health: async () => ({ ok: true, checks: {} }),
        admin: { db: stack.db },
        budgets: createBudgetService(stack.db, { wakeBudgetWaiters: (budgetId) => wakeBudgetWaiters(stack.env.client, namespace, budgetId) }),
      });
      await withHarness({ env: stack.env, db: stack.db, providers: providers(), spend: createSpend({ db: stack.db, budget: null }), budgetWaitMs: 5 * 60_000 }, async (h) => {
        await tightChatBudget(stack.db, h, id);
        const calls = stack.model.requests.length;
        await h.send('hello under budget');
        const told = await h.waitForMessage((m) => m.role === 'system' && m.text.startsWith('Waiting for a budget'), { timeoutMs: 30_000 });
        // the budget, what is left, when it renews, that an admin was asked, how long it waits
        assert.match(told.text, new RegExp(`budget ${id}`));
        assert.match(told.text, /has 100 tokens left/);
        assert.match(told.text, /until \d{4}-\d\d-\d\d 00:00 UTC/);
        assert.match(told.text, /An admin was asked to raise/);
        assert.match(told.text, /waits up to 5 minutes \(\/stop ends it now\)/);
        assert.doesNotMatch(told.text, /The model call failed/);
        const status = await stack.env.client.workflow.getHandle(h.sessionId).query(statusQuery);
        assert.equal(status.running?.turn?.phase, 'budget');
        assert.equal(status.running?.turn?.budget, id);
        assert.deepEqual(await budgetAttr(stack, h), [id]);
        // listed by the budget (the signal's path), before the raise: the wake-up, not a re-check, lets it go on
        await waitFor(async () => ((await waiters(stack, id)).includes(h.sessionId) ? true : undefined), 'the waiting session in visibility', 30_000);
        assert.equal(stack.model.requests.length, calls, 'no model is called while it waits');

        const res = await app.request(`/api/v1/budgets/${encodeURIComponent(id)}`, {
          method: 'PUT',
          headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
          body: JSON.stringify({ scope: 'chat', scopeId: (await stack.db.binding.findFirstOrThrow({ where: { account: h.account, chatId: h.chatId } })).id, tokens: 1_000_000, period: 'day', timezone: 'UTC' }),
        });
        assert.equal(res.status, 200, await res.text());
        await h.waitForMessage((m) => m.role === 'assistant' && m.text.startsWith('answer: ') && m.text.includes('hello under'), { timeoutMs: 30_000 });
        await waitFor(async () => ((await stack.env.client.workflow.getHandle(h.sessionId).query(statusQuery)).running === null ? true : undefined), 'the turn to end', 20_000);
        const rows = await h.ingress.transcript(h.sessionId, { limit: 100 });
        assert.equal(rows.filter((r) => r.role === 'assistant').length, 1, 'the reply arrives exactly once');
        assert.equal(rows.filter((r) => r.role === 'system').length, 1, 'told once');
        assert.equal(stack.model.requests.length, calls + 1, 'one model call, after the raise');
        await waitFor(async () => ((await budgetAttr(stack, h)) === undefined ? true : undefined), 'the run no longer naming the budget (the task after the turn\'s last local activity)', 20_000);
        assert.deepEqual(await waiters(stack, id).then((w) => w.filter((x) => x === h.sessionId)), []);
        const usage = await stack.db.budgetUsage.findFirstOrThrow({ where: { budgetId: id } });
        assert.equal(Number(usage.usedTokens), 150, 'the step reserved once the budget was raised and settled to its usage');
        assert.deepEqual((await turnEnds(stack.db, h.sessionId)).map((t) => t.kind), ['reply']);
      });
    });

    it('an admin\'s raise for the period wakes the waiting turn; the raise counts it as woken and the reply arrives once', { timeout: 120_000 }, async () => {
      answer();
      const id = `chat-raise-${randomUUID().slice(0, 6)}`;
      const budgets = createBudgetService(stack.db, { wakeBudgetWaiters: (budgetId) => wakeBudgetWaiters(stack.env.client, stack.env.namespace ?? 'default', budgetId) });
      const admin: Actor = { kind: 'person', id: `id-${randomUUID().slice(0, 8)}`, name: 'Ada', role: 'admin' };
      await withHarness({ env: stack.env, db: stack.db, providers: providers(), spend: createSpend({ db: stack.db, budget: null }), budgetWaitMs: 5 * 60_000 }, async (h) => {
        await tightChatBudget(stack.db, h, id);
        const calls = stack.model.requests.length;
        await h.send('hello, raise me');
        await h.waitForMessage((m) => m.role === 'system' && m.text.startsWith('Waiting for a budget'), { timeoutMs: 30_000 });
        await waitFor(async () => ((await waiters(stack, id)).includes(h.sessionId) ? true : undefined), 'the waiting session in visibility', 30_000);
        const r = await budgets.raise({ budgetId: id, tokens: 10_000, by: admin });
        assert.equal(r.woken, 1, r.message);
        await h.waitForMessage((m) => m.role === 'assistant' && m.text.includes('hello, rais'), { timeoutMs: 30_000 });
        await waitFor(async () => ((await budgetAttr(stack, h)) === undefined ? true : undefined), 'the run no longer naming the budget', 20_000);
        assert.equal((await h.ingress.transcript(h.sessionId, { limit: 100 })).filter((x) => x.role === 'assistant').length, 1, 'the reply arrives exactly once');
        assert.equal(stack.model.requests.length, calls + 1);
        const usage = await stack.db.budgetUsage.findFirstOrThrow({ where: { budgetId: id } });
        assert.equal(Number(usage.usedTokens), 150, 'reserved within the raise and settled to its usage');
        assert.equal(Number(usage.raisedTokens), 10_000);
      });
    });

    it('no raise within the wait: the turn ends with the budget, what is left and when it renews (outcome budget-refused)', { timeout: 120_000 }, async () => {
      answer();
      const id = `chat-late-${randomUUID().slice(0, 6)}`;
      await withHarness({ env: stack.env, db: stack.db, providers: providers(), spend: createSpend({ db: stack.db, budget: null }), budgetWaitMs: 2000 }, async (h) => {
        await tightChatBudget(stack.db, h, id);
        const calls = stack.model.requests.length;
        await h.send('hello again');
        await h.waitForMessage((m) => m.role === 'system' && m.text.startsWith('Waiting for a budget'), { timeoutMs: 30_000 });
        const end = await h.waitForMessage((m) => m.role === 'system' && m.text.startsWith('No reply'), { timeoutMs: 30_000 });
        assert.match(end.text, new RegExp(`^No reply: the budget ${id} was not raised within 2 seconds\\. Not called: the budget of chat [0-9a-f-]+, 100 tokens per day \\(UTC\\), has 100 tokens left, .*until \\d{4}-\\d\\d-\\d\\d 00:00 UTC\\.$`));
        assert.doesNotMatch(end.text, /The model call failed/);
        assert.equal(stack.model.requests.length, calls, 'no model was called');
        await waitFor(async () => ((await turnEnds(stack.db, h.sessionId)).length > 0 ? true : undefined), 'the turn.end receipt', 20_000);
        const ends = await turnEnds(stack.db, h.sessionId);
        assert.deepEqual(ends.map((t) => [t.kind, t.outcome]), [['notice', 'budget-refused']]);
        await waitFor(async () => ((await budgetAttr(stack, h)) === undefined ? true : undefined), 'the run no longer naming the budget (the task after the turn\'s last local activity)', 20_000);
      });
    });

    it('`steward budgets set` raising the limit wakes the waiting turn through the configured Temporal', { timeout: 120_000 }, async () => {
      answer();
      const id = `chat-cli-${randomUUID().slice(0, 6)}`;
      const dir = mkdtempSync(path.join(tmpdir(), 'steward-budget-wait-'));
      try {
        const config = loadConfig({ DATABASE_URL: stack.database.url, STEWARD_DATA_DIR: dir, TEMPORAL_ADDRESS: stack.env.address, TEMPORAL_NAMESPACE: stack.env.namespace ?? 'default' }, dir);
        const cli = async (...args: string[]) => {
          const out: string[] = [];
          const err: string[] = [];
          const code = await adminCommand('budgets', args, { config: () => config, out: (x) => void out.push(x), err: (x) => void err.push(x) });
          return { code, out: out.join(''), err: err.join('') };
        };
        await withHarness({ env: stack.env, db: stack.db, providers: providers(), spend: createSpend({ db: stack.db, budget: null }), budgetWaitMs: 5 * 60_000 }, async (h) => {
          await tightChatBudget(stack.db, h, id);
          await h.send('hello from the command line');
          await h.waitForMessage((m) => m.role === 'system' && m.text.startsWith('Waiting for a budget'), { timeoutMs: 30_000 });
          await waitFor(async () => ((await waiters(stack, id)).includes(h.sessionId) ? true : undefined), 'the waiting session in visibility', 30_000);
          const binding = await stack.db.binding.findFirstOrThrow({ where: { account: h.account, chatId: h.chatId } });
          const r = await cli('set', id, '--scope', 'chat', '--scope-id', binding.id, '--tokens', '1000000', '--period', 'day', '--timezone', 'UTC');
          assert.equal(r.code, 0, r.err);
          assert.equal(r.err, '');
          await h.waitForMessage((m) => m.role === 'assistant' && m.text.includes('hello from'), { timeoutMs: 30_000 });
          assert.equal((await h.ingress.transcript(h.sessionId, { limit: 100 })).filter((x) => x.role === 'assistant').length, 1);
        });
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it('/stop during the wait ends the turn at once', { timeout: 120_000 }, async () => {
      answer();
      const id = `chat-stop-${randomUUID().slice(0, 6)}`;
      await withHarness({ env: stack.env, db: stack.db, providers: providers(), spend: createSpend({ db: stack.db, budget: null }), budgetWaitMs: 10 * 60_000 }, async (h) => {
        await tightChatBudget(stack.db, h, id);
        await h.send('hello, then stop');
        await h.waitForMessage((m) => m.role === 'system' && m.text.startsWith('Waiting for a budget'), { timeoutMs: 30_000 });
        const asked = Date.now();
        await h.send('/stop');
        await h.waitForMessage((m) => m.role === 'system' && m.text.startsWith('Stopped the running turn'), { timeoutMs: 15_000 });
        assert.ok(Date.now() - asked < 15_000, 'at once, not at the end of the wait');
        const status = await stack.env.client.workflow.getHandle(h.sessionId).query(statusQuery);
        assert.equal(status.running, null);
        await waitFor(async () => ((await budgetAttr(stack, h)) === undefined ? true : undefined), 'the run no longer naming the budget (the task after the turn\'s last local activity)', 20_000);
        assert.equal((await h.ingress.transcript(h.sessionId, { limit: 100 })).filter((r) => r.role === 'assistant').length, 0);
      });
    });
  });
}
