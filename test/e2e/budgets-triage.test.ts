/**
 * Triage in a flooded group stops classifying at its budget (issue 34), on SQLite and
 * PostgreSQL: a bound group with triage on and a token budget on its binding worth a few
 * classifications; 20 messages arrive at once. The real worker, Temporal, the budget ledger
 * (the started platform's: on, no STEWARD_TOKEN_BUDGET) and the scripted model reporting fixed
 * usage. The triage limiter is set out of the way (its own test is in tasks.test.ts): what
 * stops the classifying here is the budget.
 * - the model is asked at most as often as the budget holds: every classification reserved
 *   first, the budget's use is the calls' reported usage, never over its limit (the worst case is
 *   held before each call, so the overshoot bound of one reservation is met with none), and no
 *   call is made once it is spent;
 * - every message is still accepted: each has its triage workflow, and each ends receipted
 *   (`task.classify`: its class, or the refusal naming the budget);
 * - the refusals are receipted (`limit.refused`, for the budget, kind triage, one per refused
 *   message) and the admins are told once that the budget is spent, not once per refused
 *   message (a "Triage failed" notice each, before: 16 posts for this flood).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it } from 'node:test';
import { defineBudget } from '../../domain/budgets/definitions.js';
import { budgetUsage } from '../../domain/budgets/ledger.js';
import { bindChat, createIdentity } from '../../domain/governance.js';
import { createSpend } from '../../domain/limits.js';
import { testDatabases } from '../helpers/db.js';
import { recordingSender } from '../helpers/recording-sender.js';
import { useStack, withHarness } from '../helpers/steward.js';

const FLOOD = 20;
/** What the scripted classifier reports for each classification: 450 tokens. */
const USAGE = { prompt_tokens: 250, completion_tokens: 200 };
const PER_CALL = USAGE.prompt_tokens + USAGE.completion_tokens;
/** The group's budget: four classifications' worth of reported usage. */
const LIMIT = 4 * PER_CALL + 100;

for (const kind of testDatabases()) {
  describe(`triage in a flooded group stops at its budget (${kind.name})`, () => {
    const stack = useStack(kind);

    it(`${FLOOD} group messages at once: classified while the group's budget holds, the rest accepted and receipted, none classified once it is spent`, { timeout: 120_000 }, async () => {
      const sender = recordingSender();
      const isTriage = (body: unknown) => JSON.stringify(body).includes('Classify the message');
      stack.model.setDefault((req) => (isTriage(req.body) ? { text: '{"class": "task", "priority": "p2"}', usage: USAGE, firstTokenDelayMs: 50 } : { text: 'not a classification' }));
      const account = `bot${randomUUID().slice(0, 6)}`;
      const group = `-700${Date.now() % 1e9}`;
      const admins = `-800${Date.now() % 1e9}`;
      const stamp = String(Date.now() % 1e6);
      const members = await Promise.all(
        Array.from({ length: 4 }, async (_, i) => {
          const m = { id: `83${stamp}${i}`, name: `Member${i}` };
          await createIdentity(stack.db, { name: m.name, role: 'member', accounts: [{ platform: 'telegram', userId: m.id }], createdBy: 'test' });
          return m;
        }),
      );
      const binding = await bindChat(stack.db, { platform: 'telegram', account, chatId: group, name: 'flooded', createdBy: 'test' });
      await bindChat(stack.db, { platform: 'telegram', account, chatId: admins, adminChannel: true, createdBy: 'test' });
      const budget = await defineBudget(stack.db, { id: `triage-${binding.id}`, scope: 'chat', scopeId: binding.id, tokens: LIMIT, period: 'day' });
      // the started platform's ledger (domain/limits.ts createSpend); the triage limiter out of the way
      const spend = createSpend({ db: stack.db, budget: null, senders: { telegram: sender } });
      const limits = { triage: { perGroup: { count: 1000, windowMs: 3_600_000 }, perSender: { count: 1000, windowMs: 3_600_000 } } };
      await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, senders: { telegram: sender }, limits, spend }, async (h) => {
        await h.tasks.setTriage(binding.id, { enabled: true }, { id: 'operator', name: 'the operator' });
        const send = (who: { id: string; name: string }, text: string) =>
          h.ingress.handle({ id: randomUUID(), platform: 'telegram', account, chatId: group, chatType: 'group', addressed: false, user: who.name, userId: who.id, text, at: new Date().toISOString() });
        const classifications = () => stack.model.requests.filter((r) => isTriage(r.body)).length;
        const before = classifications();

        const sent = await Promise.all(Array.from({ length: FLOOD }, (_, i) => send(members[i % members.length]!, `flood ${i}: the build is red again`)));
        // every message accepted: a triage workflow each, none refused at the door
        assert.ok(sent.every((r) => r.triage && !r.triage.refused && !r.triage.duplicate), JSON.stringify(sent.map((r) => r.triage)));
        assert.equal(new Set(sent.map((r) => r.triage!.workflowId)).size, FLOOD);
        const results = await Promise.all(sent.map((r) => stack.env.client.workflow.getHandle(r.triage!.workflowId).result() as Promise<{ class?: string; failed?: string }>));
        const classified = results.filter((r) => r.class);
        const refused = results.filter((r) => r.failed);
        assert.equal(classified.length + refused.length, FLOOD);

        // the model was asked once per classified message, and no more than the budget holds
        const calls = classifications() - before;
        assert.equal(calls, classified.length, 'one model call per classified message, none for a refused one');
        assert.ok(calls >= 1 && calls <= Math.floor(LIMIT / PER_CALL), `calls: ${calls}`);
        assert.ok(refused.length >= FLOOD - Math.floor(LIMIT / PER_CALL), 'the budget stopped the flood');
        for (const r of refused) assert.match(r.failed!, new RegExp(`^Not called: the budget of chat ${binding.id}, ${LIMIT} tokens per day \\(UTC\\), has \\d+ tokens left`));

        // every call reserved first and settled to its usage; nothing held; never over the limit
        const reservations = await stack.db.budgetReservation.findMany({ where: { kind: 'triage' } });
        assert.equal(reservations.length, calls);
        assert.ok(reservations.every((x) => x.settledAt !== null && Number(x.settledTokens) === PER_CALL));
        const u = await budgetUsage(stack.db, budget);
        assert.deepEqual([u.usedTokens, u.reservedTokens], [calls * PER_CALL, 0]);
        assert.ok(u.usedTokens <= LIMIT, 'the overshoot bound: none (the worst case is held before each call)');

        // every message receipted with its outcome; the refusals receipted for the budget
        const receipts = async (k: string) => (await stack.db.receipt.findMany({ where: { kind: k } })).map((x) => JSON.parse(x.data) as Record<string, unknown>);
        const classify = (await receipts('task.classify')).filter((d) => d.chatId === group);
        assert.equal(classify.length, FLOOD, 'each message ends receipted');
        assert.equal(classify.filter((d) => typeof d.failed === 'string' && d.failed.includes(`the budget of chat ${binding.id}`) && d.refusedBy === 'budget').length, refused.length);
        const limitRefused = (await receipts('limit.refused')).filter((d) => d.budget === budget.id);
        assert.equal(limitRefused.length, refused.length, 'one refusal receipt per refused classification');
        assert.ok(limitRefused.every((d) => d.kind === 'triage' && d.limit === 'budget'));
        assert.equal((await receipts('budget.exhausted')).filter((d) => d.budget === budget.id).length, 1);
        assert.equal(await stack.db.task.count({ where: { chatId: group } }), calls);

        // the admins: the budget told once, not each refused message (a flood would post a notice per message)
        await sleep(500);
        const posts = sender.posts.filter((p) => p.chatId === admins);
        assert.equal(posts.filter((p) => p.text.includes('**Model budget**') && p.text.includes(`chat ${binding.id}`)).length, 1, 'the budget is told once');
        assert.equal(posts.filter((p) => p.text.includes('**Triage failed**')).length, 0, 'no notice per refused message');
        assert.equal(posts.filter((p) => p.text.includes('**Triage**:')).length, calls, 'one routing post per task');

        // after the flood, messages one at a time: classified while one more worst case fits, then
        // refused at the budget (what is left is less than the call may need), and no model is asked
        let late: { failed?: string } | undefined;
        let lateCalls = 0;
        for (let i = 0; i < 6 && !late?.failed; i++) {
          const r = await send(members[i % members.length]!, `flood late ${i}: still red`);
          assert.ok(r.triage && !r.triage.refused);
          late = (await stack.env.client.workflow.getHandle(r.triage.workflowId).result()) as { failed?: string };
          if (!late.failed) lateCalls++;
        }
        assert.match(late?.failed ?? '', /^Not called: the budget of chat /, 'the budget stops the classifying');
        const last = (await receipts('limit.refused')).filter((d) => d.budget === budget.id).at(-1) as { left: { tokens: number }; need: { tokens: number } };
        assert.ok(last.left.tokens < last.need.tokens, `refused because it does not fit: ${JSON.stringify(last)}`);
        assert.equal(classifications() - before, calls + lateCalls, 'no call for the refused message');
        const total = calls + lateCalls;
        assert.ok(total <= Math.floor(LIMIT / PER_CALL), `at most the budget's worth of classifications: ${total}`);
        const end = await budgetUsage(stack.db, budget);
        assert.deepEqual([end.usedTokens, end.reservedTokens], [total * PER_CALL, 0]);
        assert.ok(end.usedTokens <= LIMIT);
        assert.equal(await stack.db.task.count({ where: { chatId: group } }), total);
      });
    });
  });
}
