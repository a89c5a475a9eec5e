/**
 * Raising a spent budget for its period (domain/budgets/raises.ts, services/budgets.ts `raise`)
 * on SQLite and PostgreSQL: after a raise a refused reservation fits, and the raise ends with
 * the period; the ledger records whose call a budget refused and the service refuses their raise
 * (no self-raise); only admins raise; a bad amount, an unknown budget, a unit the budget does not
 * limit or a period that is over changes nothing; a raise is receipted `budget.raised` and wakes
 * the waiting runs through the injected waker; a notice's button raises once.
 *
 * PostgreSQL runs when STEWARD_TEST_PG_URL is set (scripts/pg.sh start; scripts/pg.sh url).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { defineBudget, listBudgets, removeBudget, type Budget } from '../../domain/budgets/definitions.js';
import { budgetUsage, createBudgetLedger, spentBudgets, type BudgetLedger } from '../../domain/budgets/ledger.js';
import { createPriceTable } from '../../domain/budgets/prices.js';
import { periodOf } from '../../domain/budgets/periods.js';
import { BudgetRaiseError, MAX_REFUSED_PEOPLE, parseRaiseButton, raiseBudget, raiseButtons, recordRefusal, refusedPeople } from '../../domain/budgets/raises.js';
import type { Db } from '../../domain/db.js';
import { ModelBudgetExceededError, type SpendRequest } from '../../domain/model.js';
import type { Actor } from '../../common/roles.js';
import { createBudgetService, type BudgetService } from '../../services/budgets.js';
import { ServiceInputError } from '../../services/requests.js';
import { testDatabases, type TestDatabase } from '../helpers/db.js';

const HOUR = 3_600_000;
const NOON = Date.parse('2026-11-28T12:00:00Z');
const MINI = 'openai:gpt-4.1-mini'; // 1000 in + 500 out = 1500 tokens, 1200 micro-USD

let n = 0;
const fresh = (p: string) => `${p}-${++n}-${Math.random().toString(36).slice(2, 8)}`;
const request = (over: Partial<SpendRequest> & Pick<SpendRequest, 'scopes'>): SpendRequest => ({ key: fresh('step'), model: MINI, inputTokens: 1000, maxOutputTokens: 500, kind: 'chat', ...over });
const person = (role: Actor['role'], id = fresh('id')): Actor => ({ kind: 'person', id, name: `${role}-${id}`, role });

async function budget(db: Db, id: string): Promise<Budget> {
  const b = (await listBudgets(db)).find((x) => x.id === id);
  assert.ok(b, `budget ${id}`);
  return b;
}

const receipts = async (db: Db, kind: string, budgetId: string) =>
  (await db.receipt.findMany({ where: { kind }, orderBy: { id: 'asc' } })).map((r) => ({ key: r.key, actor: r.actor, data: JSON.parse(r.data) as Record<string, unknown> })).filter((r) => r.data.budget === budgetId);

/** The period's usage row as stored (raised included), or zeros. */
async function row(db: Db, id: string, at: number) {
  const u = await budgetUsage(db, await budget(db, id), at);
  return { used: u.usedTokens, reserved: u.reservedTokens, raisedTokens: u.raisedTokens, raisedMicros: u.raisedMicros, start: u.period.start.toISOString() };
}

for (const database of testDatabases()) {
  describe(`budget raises (${database.name})`, () => {
    let t: TestDatabase;
    let clock = NOON;
    let ledger: BudgetLedger;
    let woken: string[];
    let service: BudgetService;
    before(async () => {
      t = await database.create();
      ledger = createBudgetLedger({ db: t.db, prices: createPriceTable(), now: () => clock });
      woken = [];
      service = createBudgetService(t.db, {
        now: () => clock,
        wakeBudgetWaiters: async (id) => {
          woken.push(id);
          return 2;
        },
      });
    });
    after(async () => {
      await t?.cleanup();
    });

    it('after a raise a refused reservation fits; the raise ends with the period', async () => {
      clock = NOON;
      const chat = fresh('chat');
      const id = fresh('b-chat');
      await defineBudget(t.db, { id, scope: 'chat', scopeId: chat, tokens: 3000, period: 'day' });
      await ledger.reserve(request({ scopes: { chat } }));
      await ledger.reserve(request({ scopes: { chat } }));
      const third = request({ scopes: { chat } });
      await assert.rejects(ledger.reserve(third), ModelBudgetExceededError);
      assert.deepEqual((await spentBudgets(t.db, { chat }, clock)).map((b) => b.id), [id], 'spent before the raise');

      const r = await raiseBudget(t.db, { budgetId: id, tokens: 1500, at: clock });
      assert.deepEqual(await spentBudgets(t.db, { chat }, clock), [], 'the raise counts: not spent (an objective run would not skip)');
      assert.equal(r?.raisedTokens, 1500);
      assert.equal(r?.period.start.toISOString(), '2026-11-28T00:00:00.000Z');
      // the same call (a new attempt of the refused step) fits now, and exactly: nothing more does
      await ledger.reserve(third);
      await assert.rejects(ledger.reserve(request({ scopes: { chat }, inputTokens: 0, maxOutputTokens: 1 })), (err: unknown) => {
        assert.ok(err instanceof ModelBudgetExceededError);
        assert.deepEqual(err.budget?.left, { tokens: 0 });
        return true;
      });
      assert.deepEqual(await row(t.db, id, clock), { used: 0, reserved: 4500, raisedTokens: 1500, raisedMicros: 0, start: '2026-11-28T00:00:00.000Z' });

      // a second raise adds to the first
      assert.equal((await raiseBudget(t.db, { budgetId: id, tokens: 100, at: clock }))?.raisedTokens, 1600);
      // the refusal message counts the raise in what is left
      await assert.rejects(ledger.reserve(request({ scopes: { chat } })), (err: unknown) => err instanceof ModelBudgetExceededError && /has 100 tokens left/.test(err.message));

      // the next day: the limit alone again (two calls fit, the third does not), nothing raised
      clock = NOON + 24 * HOUR;
      await ledger.reserve(request({ scopes: { chat } }));
      await ledger.reserve(request({ scopes: { chat } }));
      await assert.rejects(ledger.reserve(request({ scopes: { chat } })), ModelBudgetExceededError);
      assert.deepEqual(await row(t.db, id, clock), { used: 0, reserved: 3000, raisedTokens: 0, raisedMicros: 0, start: '2026-11-29T00:00:00.000Z' });
      // the day before keeps what it had
      assert.equal((await row(t.db, id, NOON)).raisedTokens, 1600);
    });

    it('money: a raise in USD lets a priced call through; a bad amount or a unit the budget does not limit changes nothing', async () => {
      clock = NOON;
      const who = fresh('person');
      const id = fresh('b-money');
      await defineBudget(t.db, { id, scope: 'person', scopeId: who, money: 0.002, period: 'week' }); // one call (1200 micro-USD)
      await ledger.reserve(request({ scopes: { people: [who] } }));
      const second = request({ scopes: { people: [who] } });
      await assert.rejects(ledger.reserve(second), ModelBudgetExceededError);
      for (const bad of [{ tokens: 0 }, { tokens: -5 }, { tokens: 1.5 }, { money: 0 }, { money: 1e-9 }, { money: Number.NaN }, {}, { tokens: 1000 } /* not limited */]) {
        await assert.rejects(raiseBudget(t.db, { budgetId: id, ...bad, at: clock }), BudgetRaiseError, JSON.stringify(bad));
      }
      assert.equal((await row(t.db, id, clock)).raisedMicros, 0, 'nothing changed');
      assert.equal(await raiseBudget(t.db, { budgetId: fresh('none'), tokens: 5, at: clock }), undefined, 'no such budget');
      assert.equal((await raiseBudget(t.db, { budgetId: id, money: 0.001, at: clock }))?.raisedMicros, 1000);
      await ledger.reserve(second);
      // the raise's receipt commits with it: a key written before (a notice's second click) raises nothing
      const claim = { key: fresh('budget.raised:claim'), kind: 'budget.raised' as const, actor: 'test', data: { budget: id } };
      assert.equal((await raiseBudget(t.db, { budgetId: id, money: 0.002, at: clock }, claim)) !== 'receipted-before', true);
      assert.equal(await raiseBudget(t.db, { budgetId: id, money: 0.002, at: clock }, claim), 'receipted-before');
      assert.equal((await row(t.db, id, clock)).raisedMicros, 3000, 'raised once under the one key');
    });

    it('the ledger records whose call a budget refused, per period and bounded; they are forgotten with the period and the budget', async () => {
      clock = NOON;
      const chat = fresh('chat');
      const [p1, p2, p3] = [fresh('p'), fresh('p'), fresh('p')];
      const id = fresh('b-chat');
      await defineBudget(t.db, { id, scope: 'chat', scopeId: chat, tokens: 1500, period: 'day' });
      await ledger.reserve(request({ scopes: { chat, people: [p3] } }));
      await assert.rejects(ledger.reserve(request({ scopes: { chat, people: [p1, p2] } })), ModelBudgetExceededError);
      await assert.rejects(ledger.reserve(request({ scopes: { chat, people: [p1] } })), ModelBudgetExceededError);
      const b = await budget(t.db, id);
      assert.deepEqual(await refusedPeople(t.db, id, periodOf(b, clock)), [p1, p2].sort(), 'the people of the refused calls, once each; not the one whose call fit');

      // bounded: a flood of people is kept to MAX_REFUSED_PEOPLE per budget and period
      const many = Array.from({ length: 50 }, () => fresh('q'));
      for (let i = 0; i < 6; i++) await recordRefusal(t.db, id, periodOf(b, clock), many.map((m) => `${m}-${i}`), clock);
      assert.equal((await refusedPeople(t.db, id, periodOf(b, clock))).length, MAX_REFUSED_PEOPLE);

      // a new period: a refusal there drops the earlier period's
      clock = NOON + 24 * HOUR;
      await ledger.reserve(request({ scopes: { chat } }));
      await assert.rejects(ledger.reserve(request({ scopes: { chat, people: [p3] } })), ModelBudgetExceededError);
      assert.deepEqual(await refusedPeople(t.db, id, periodOf(b, clock)), [p3]);
      assert.deepEqual(await refusedPeople(t.db, id, periodOf(b, NOON)), []);
      // removing the budget removes them
      await removeBudget(t.db, id);
      assert.equal(await t.db.budgetRefusal.count({ where: { budgetId: id } }), 0);
    });

    it('the service: only admins raise, never the person whose call it refused; refusals are receipted and change nothing', async () => {
      clock = NOON;
      const chat = fresh('chat');
      const id = fresh('b-chat');
      await defineBudget(t.db, { id, scope: 'chat', scopeId: chat, tokens: 1500, period: 'day' });
      const hitter = person('admin');
      const other = person('admin');
      await ledger.reserve(request({ scopes: { chat } }));
      await assert.rejects(ledger.reserve(request({ scopes: { chat, people: [hitter.id] } })), ModelBudgetExceededError);
      const unchanged = async () => assert.deepEqual(await row(t.db, id, clock), { used: 0, reserved: 1500, raisedTokens: 0, raisedMicros: 0, start: '2026-11-28T00:00:00.000Z' });
      const status = (code: number, pattern: RegExp) => (err: unknown) => {
        assert.ok(err instanceof ServiceInputError, String(err));
        assert.equal(err.status, code, err.message);
        assert.match(err.message, pattern);
        return true;
      };

      for (const role of ['operator', 'member', 'viewer'] as const) {
        await assert.rejects(service.raise({ budgetId: id, tokens: 1500, by: person(role) }), status(409, /needs the admin role/));
      }
      await assert.rejects(service.raise({ budgetId: id, tokens: 1500, by: hitter }), status(409, /no self-raise/));
      await unchanged();
      const refused = await receipts(t.db, 'budget.raise.refused', id);
      assert.equal(refused.length, 4);
      assert.equal(refused.at(-1)?.actor, hitter.id);

      // bad input: 400, nothing changed, nothing receipted
      const bad: Array<Record<string, unknown>> = [{ tokens: 0 }, { tokens: -1 }, { money: 1e-9 }, { tokens: '1000' }, { tokens: 2.5 }, { money: -1 }, {}, { money: 1 } /* not limited */, { periodStart: 'yesterday', tokens: 5 }];
      for (const b of bad) await assert.rejects(service.raise({ budgetId: id, ...b, by: other } as Parameters<BudgetService['raise']>[0]), status(400, /nothing changed|Invalid|date/i), JSON.stringify(b));
      await assert.rejects(service.raise({ budgetId: id, tokens: 5, extra: true, by: other } as Parameters<BudgetService['raise']>[0]), status(400, /extra|Unrecognized/i));
      await assert.rejects(service.raise({ budgetId: '', tokens: 5, by: other }), status(400, /budgetId/));
      await assert.rejects(service.raise({ budgetId: fresh('nope'), tokens: 5, by: other }), status(404, /No budget/));
      // a period that is over (a button of yesterday's notice)
      await assert.rejects(service.raise({ budgetId: id, tokens: 5, periodStart: new Date(NOON - 24 * HOUR - 12 * HOUR), by: other }), status(409, /is over/));
      await unchanged();
      assert.equal((await receipts(t.db, 'budget.raised', id)).length, 0);
      assert.deepEqual(woken, []);

      // another admin raises it: receipted (who, how much, the period), the waiting runs woken
      const r = await service.raise({ budgetId: id, tokens: 1500, by: other });
      assert.equal(r.budget.usage.left.tokens, 1500);
      assert.deepEqual(r.budget.usage.raised, { tokens: 1500, money: 0 });
      assert.deepEqual(r.raisedInPeriod, { tokens: 1500, money: 0 });
      assert.equal(r.woken, 2);
      assert.match(r.message, new RegExp(`^Raised ${id} by 1500 tokens until 2026-11-29 00:00 UTC: 1500 tokens left now\\. 2 waiting turns woken\\.$`));
      assert.deepEqual(woken, [id]);
      const [raised] = await receipts(t.db, 'budget.raised', id);
      assert.equal(raised?.actor, other.id);
      assert.deepEqual(raised?.data, { budget: id, scope: 'chat', scopeId: chat, by: other.name, tokens: 1500, period: 'day', periodStart: '2026-11-28T00:00:00.000Z', renewsAt: '2026-11-29T00:00:00.000Z' });
      await ledger.reserve(request({ scopes: { chat, people: [hitter.id] } }));

      // the operator (API, CLI) is an admin who never had a call refused
      const op = await service.raise({ budgetId: id, tokens: 10, by: { kind: 'operator', id: 'operator', name: 'the operator', role: 'overlord' } });
      assert.deepEqual(op.raisedInPeriod, { tokens: 1510, money: 0 });
      // the hitter may raise it again in the next period, once it did not refuse them there
      clock = NOON + 24 * HOUR;
      assert.equal((await service.raise({ budgetId: id, tokens: 5, by: hitter })).raisedInPeriod.tokens, 5);
    });

    it("a notice's button: names its budget and period in at most 64 bytes, and raises once", async () => {
      clock = NOON;
      const id = `chat:${'x'.repeat(190)}`; // a long id still fits the button
      await defineBudget(t.db, { id, scope: 'chat', scopeId: fresh('chat'), tokens: 1500, money: 2, period: 'day' });
      const b = await budget(t.db, id);
      const p = periodOf(b, clock);
      const [[button]] = raiseButtons(b, p) as [[{ id: string; label: string }]];
      assert.ok(Buffer.byteLength(button.id) <= 64, button.id);
      assert.equal(button.label, 'Raise by 1500 tokens and $2.00 for this day');
      const parsed = await parseRaiseButton(t.db, button.id);
      assert.equal(parsed?.budget?.id, id);
      assert.equal(parsed?.periodStart?.toISOString(), p.start.toISOString());
      assert.equal(await parseRaiseButton(t.db, 'apr:abc234:y'), undefined);
      assert.deepEqual(await parseRaiseButton(t.db, 'bgr:0000000000000000:1'), {}, 'a budget that is gone');

      const once = `${id}:${p.start.getTime()}`;
      const first = await service.raise({ budgetId: id, tokens: 1500, money: 2, periodStart: p.start, once, by: person('admin') });
      assert.deepEqual(first.raisedInPeriod, { tokens: 1500, money: 2 });
      await assert.rejects(service.raise({ budgetId: id, tokens: 1500, money: 2, periodStart: p.start, once, by: person('admin') }), (err: unknown) => err instanceof ServiceInputError && err.status === 409 && /Already raised by admin-/.test(err.message));
      assert.deepEqual((await row(t.db, id, clock)).raisedTokens, 1500, 'raised once');
    });
  });
}
