/**
 * The budget ledger (domain/budgets/ledger.ts) on SQLite and PostgreSQL: 50 concurrent
 * reservations against small budgets over several scopes never take more than a budget has
 * (the overshoot bound: at most one reservation per scope; here none), and nothing passes once a
 * budget is spent; a reservation is all or nothing across scopes; reserve and settle are
 * idempotent by the step's key; a crashed worker's reservation expires and is settled to its
 * worst case once; periods follow the budget's time zone; money comes from the price table (a
 * cached price; an unknown model counts tokens only); STEWARD_TOKEN_BUDGET is the installation
 * budget over its window; a bad definition changes nothing.
 *
 * PostgreSQL runs when STEWARD_TEST_PG_URL is set (scripts/pg.sh start; scripts/pg.sh url).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { BudgetDefinitionError, defineBudget, listBudgets, removeBudget, type Budget } from '../../domain/budgets/definitions.js';
import { setBudgetStandings, stewardRegistry } from '../../common/metrics.js';
import { budgetStandings, budgetUsage, createBudgetLedger, ENV_BUDGET_ID, reservationOf, startSweepingExpired, unpricedModelsSeen, type BudgetLedger } from '../../domain/budgets/ledger.js';
import { createPriceTable } from '../../domain/budgets/prices.js';
import { tuneDb, type Db } from '../../domain/db.js';
import { createSpend } from '../../domain/limits.js';
import { createModelRegistry, ModelBudgetExceededError, runModelStep, withSpend, type SpendRequest } from '../../domain/model.js';
import { testDatabases, type TestDatabase } from '../helpers/db.js';

const HOUR = 3_600_000;
const NOON = Date.parse('2026-11-28T12:00:00Z');
const MINI = 'openai:gpt-4.1-mini'; // $0.40 in, $1.60 out per million: 1000 in + 500 out = 1200 micro-USD

let n = 0;
/** A fresh id for each test's scopes, so the tests of one database do not share budgets. */
const fresh = (p: string) => `${p}-${++n}-${Math.random().toString(36).slice(2, 8)}`;

function request(over: Partial<SpendRequest> & Pick<SpendRequest, 'scopes'>): SpendRequest {
  return { key: fresh('step'), model: MINI, inputTokens: 1000, maxOutputTokens: 500, kind: 'chat', ...over };
}

async function budget(db: Db, id: string): Promise<Budget> {
  const b = (await listBudgets(db)).find((x) => x.id === id);
  assert.ok(b, `budget ${id}`);
  return b;
}

async function usage(db: Db, id: string, at: number) {
  return budgetUsage(db, await budget(db, id), at);
}

/**
 * Reserve each batch at once from a ledger in a process of its own (a worker per batch), all
 * processes let go together once each is ready; each outcome: `reserved` or the error's name.
 */
async function reserveInProcesses(url: string, batches: SpendRequest[][]): Promise<string[]> {
  const script = `
    const { createDb, tuneDb } = await import('./domain/db.js');
    const { createBudgetLedger } = await import('./domain/budgets/ledger.js');
    const { createPriceTable } = await import('./domain/budgets/prices.js');
    const db = createDb(process.env.BUDGET_DB_URL);
    await tuneDb(db, process.env.BUDGET_DB_URL);
    const ledger = createBudgetLedger({ db, prices: createPriceTable() });
    const reqs = JSON.parse(process.env.BUDGET_REQS);
    await db.budget.count();
    process.stdout.write('ready\\n');
    await new Promise((r) => process.stdin.once('data', r));
    const out = await Promise.allSettled(reqs.map((r) => ledger.reserve(r)));
    await db.$disconnect();
    process.stdout.write(JSON.stringify(out.map((o) => (o.status === 'fulfilled' ? 'reserved' : (o.reason?.name ?? String(o.reason))))));
    process.exit(0);`;
  const children = batches.map((reqs) => {
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: fileURLToPath(new URL('../../', import.meta.url)),
      env: { ...process.env, BUDGET_DB_URL: url, BUDGET_REQS: JSON.stringify(reqs) },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    child.stdin.on('error', () => undefined); // a process that ended early no longer reads
    let out = '';
    let err = '';
    const ready = new Promise<void>((resolve) =>
      child.stdout.setEncoding('utf8').on('data', (d: string) => {
        out += d;
        if (out.startsWith('ready\n')) resolve();
      }),
    );
    child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
    const done = new Promise<number | null>((resolve) => child.on('close', resolve));
    return { child, ready, done, out: () => out.slice('ready\n'.length), err: () => err };
  });
  // every process ready (or one ended early: its exit code says why below)
  await Promise.race([Promise.all(children.map((c) => c.ready)), Promise.race(children.map((c) => c.done))]);
  for (const c of children) c.child.stdin.end('go\n');
  const outcomes: string[] = [];
  for (const c of children) {
    assert.equal(await c.done, 0, c.err());
    outcomes.push(...(JSON.parse(c.out()) as string[]));
  }
  return outcomes;
}

const receipts = async (db: Db, kind: string, pred: (d: Record<string, unknown>) => boolean = () => true) =>
  (await db.receipt.findMany({ where: { kind }, orderBy: { id: 'asc' } })).map((r) => ({ key: r.key, data: JSON.parse(r.data) as Record<string, unknown> })).filter((r) => pred(r.data));

for (const database of testDatabases()) {
  describe(`budget ledger (${database.name})`, () => {
    let t: TestDatabase;
    let clock = NOON;
    let ledger: BudgetLedger;
    before(async () => {
      t = await database.create();
      ledger = createBudgetLedger({ db: t.db, prices: createPriceTable(), now: () => clock, reservationTtlMs: 10 * 60_000 });
    });
    after(async () => {
      await t?.cleanup();
    });

    it('50 concurrent reservations over several scopes: no budget takes more than it has, refusals hold nothing, and a spent budget refuses every call', { timeout: 120_000 }, async () => {
      clock = NOON;
      const chat = fresh('chat');
      const [p1, p2] = [fresh('person'), fresh('person')];
      const objective = fresh('objective');
      const ids = { chat: fresh('b-chat'), p1: fresh('b-p1'), p2: fresh('b-p2'), objective: fresh('b-obj') };
      // 1500 tokens and 1200 micro-USD per call
      await defineBudget(t.db, { id: ids.chat, scope: 'chat', scopeId: chat, tokens: 10_000, period: 'day', timezone: 'Europe/Berlin' }); // 6 calls
      await defineBudget(t.db, { id: ids.p1, scope: 'person', scopeId: p1, money: 0.004 }); // 3 calls
      await defineBudget(t.db, { id: ids.p2, scope: 'person', scopeId: p2, tokens: 6_000, period: 'week' }); // 4 calls
      await defineBudget(t.db, { id: ids.objective, scope: 'objective', scopeId: objective, tokens: 15_000, period: 'month', timezone: 'America/New_York' }); // 10 calls
      const reqs = Array.from({ length: 50 }, (_, i) => request({ scopes: { chat, people: i % 2 === 0 ? [p1] : [p2], objective } }));
      const results = await Promise.allSettled(reqs.map((r) => ledger.reserve(r)));
      const granted = reqs.filter((_, i) => results[i]!.status === 'fulfilled');
      for (const r of results) if (r.status === 'rejected') assert.ok(r.reason instanceof ModelBudgetExceededError, String(r.reason));
      // the chat's budget binds first (the people's allow 3 + 4): exactly six fit
      assert.equal(granted.length, 6);

      const holding = (pred: (r: SpendRequest) => boolean) => granted.filter(pred).length;
      const held = {
        [ids.chat]: { n: holding(() => true), tokens: 10_000 },
        [ids.p1]: { n: holding((r) => r.scopes.people![0] === p1), micros: 4_000 },
        [ids.p2]: { n: holding((r) => r.scopes.people![0] === p2), tokens: 6_000 },
        [ids.objective]: { n: holding(() => true), tokens: 15_000 },
      };
      for (const [id, h] of Object.entries(held)) {
        const u = await usage(t.db, id, clock);
        // exactly what the granted reservations hold: a refused one left nothing behind
        assert.equal(u.reservedTokens, h.n * 1500, `${id} reserved tokens`);
        assert.equal(u.reservedMicros, h.n * 1200, `${id} reserved money`);
        // the overshoot bound (at most one reservation per scope): here none
        if (h.tokens !== undefined) assert.ok(u.reservedTokens <= h.tokens, `${id}: ${u.reservedTokens} of ${h.tokens}`);
        if (h.micros !== undefined) assert.ok(u.reservedMicros <= h.micros, `${id}: ${u.reservedMicros} of ${h.micros}`);
      }
      assert.equal(await t.db.budgetReservation.count({ where: { key: { in: reqs.map((r) => r.key) } } }), granted.length, 'a refused call keeps no reservation');

      // each budget that ran out is receipted (and its admins told) once in the period, however many calls it refused
      const exhausted = (await receipts(t.db, 'budget.exhausted', (d) => Object.values(ids).includes(String(d.budget)))).map((r) => String(r.data.budget));
      assert.ok(exhausted.includes(ids.chat), 'the chat budget ran out');
      assert.equal(new Set(exhausted).size, exhausted.length, `once per budget: ${exhausted.join(', ')}`);
      const refusals = await receipts(t.db, 'limit.refused', (d) => Object.values(ids).includes(String(d.budget)));
      assert.equal(refusals.length, 50 - granted.length);

      // settled at their worst case: the chat's budget has 1000 tokens left; the rest can be spent, and then nothing passes
      for (const r of granted) await ledger.settle({ key: r.key }, { inputTokens: 1000, outputTokens: 500 });
      assert.equal((await usage(t.db, ids.chat, clock)).usedTokens, 9_000);
      const last = request({ scopes: { chat }, inputTokens: 900, maxOutputTokens: 100 });
      await ledger.reserve(last);
      await ledger.settle({ key: last.key }, { inputTokens: 900, outputTokens: 100 });
      const spent = await usage(t.db, ids.chat, clock);
      assert.equal(spent.usedTokens, 10_000);
      assert.equal(spent.reservedTokens, 0);
      const refusedAll = await Promise.allSettled(Array.from({ length: 10 }, () => ledger.reserve(request({ scopes: { chat }, inputTokens: 0, maxOutputTokens: 0 }))));
      assert.ok(refusedAll.every((r) => r.status === 'rejected' && r.reason instanceof ModelBudgetExceededError), 'no call starts once a budget is spent, not even an empty one');
      await assert.rejects(ledger.reserve(request({ scopes: { chat }, inputTokens: 1, maxOutputTokens: 1 })), (err: unknown) => {
        assert.ok(err instanceof ModelBudgetExceededError);
        assert.deepEqual(err.budget?.left, { tokens: 0 });
        assert.equal(err.budget?.scope, 'chat');
        assert.equal(err.budget?.id, chat);
        assert.equal(err.budget?.period, 'day');
        // the next midnight in Berlin (CET, UTC+1)
        assert.equal(err.budget?.renewsAt, '2026-11-28T23:00:00.000Z');
        assert.match(err.message, new RegExp(`^Not called: the budget of chat ${chat}, 10000 tokens per day \\(Europe/Berlin\\), has 0 tokens left, and a call to ${MINI} may need 2 tokens \\(\\$0\\.000002\\): no model is called for it until 2026-11-29 00:00 Europe/Berlin\\.$`));
        return true;
      });
    });

    it('two worker processes at once on one database: the budget still takes only what it has', { timeout: 120_000 }, async () => {
      // as Steward opens its databases (SQLite in WAL mode, which the file keeps)
      await tuneDb(t.db, t.url);
      const chat = fresh('chat');
      const id = fresh('b-chat');
      await defineBudget(t.db, { id, scope: 'chat', scopeId: chat, tokens: 20_000, money: 0.02 }); // 13 calls by tokens, 16 by money
      const reqs = Array.from({ length: 40 }, () => request({ scopes: { chat } }));
      const outcomes = await reserveInProcesses(t.url, [reqs.slice(0, 20), reqs.slice(20)]);
      assert.deepEqual([...new Set(outcomes)].sort(), ['ModelBudgetExceededError', 'reserved']);
      assert.equal(outcomes.filter((o) => o === 'reserved').length, 13);
      const u = await usage(t.db, id, Date.now());
      assert.deepEqual([u.reservedTokens, u.reservedMicros], [13 * 1500, 13 * 1200]);
      await Promise.all(reqs.flatMap((r) => [ledger.settle({ key: r.key }, { inputTokens: 500, outputTokens: 500 }), ledger.settle({ key: r.key }, { inputTokens: 500, outputTokens: 500 })]));
      const settled = await usage(t.db, id, Date.now());
      assert.deepEqual([settled.reservedTokens, settled.usedTokens], [0, 13 * 1000]);
    });

    it('all or nothing across scopes: a budget that does not fit leaves every other untouched', async () => {
      clock = NOON;
      const chat = fresh('chat');
      const person = fresh('person');
      const ids = { chat: fresh('b-chat'), person: fresh('b-person') };
      await defineBudget(t.db, { id: ids.chat, scope: 'chat', scopeId: chat, tokens: 1_000_000 });
      await defineBudget(t.db, { id: ids.person, scope: 'person', scopeId: person, tokens: 1_000, period: 'day' });
      // the chat's budget sorts first: it takes the hold, then the person's refuses and the chat's is released
      assert.ok(ids.chat < ids.person);
      const r = request({ scopes: { chat, people: [person] } });
      await assert.rejects(ledger.reserve(r), (err: unknown) => err instanceof ModelBudgetExceededError && err.budget?.scope === 'person' && err.budget.id === person && err.budget.left.tokens === 1_000);
      for (const id of Object.values(ids)) {
        const u = await usage(t.db, id, clock);
        assert.deepEqual([u.reservedTokens, u.usedTokens, u.reservedMicros, u.usedMicros], [0, 0, 0, 0], id);
      }
      assert.equal(await reservationOf(t.db, r.key), undefined);
      // its receipt went with it (written in the reservation's transaction): a refused call has no `budget.reserved`
      assert.deepEqual(await receipts(t.db, 'budget.reserved', (d) => d.key === r.key), []);
      // a call that fits both is held against both
      const ok = request({ scopes: { chat, people: [person] }, inputTokens: 100, maxOutputTokens: 100 });
      await ledger.reserve(ok);
      for (const id of Object.values(ids)) assert.equal((await usage(t.db, id, clock)).reservedTokens, 200, id);
      const [reserved] = await receipts(t.db, 'budget.reserved', (d) => d.key === ok.key);
      assert.deepEqual(reserved?.data.budgets, [ids.chat, ids.person]);
      await ledger.settle({ key: ok.key }, { inputTokens: 100, outputTokens: 20 });
      for (const id of Object.values(ids)) assert.deepEqual([(await usage(t.db, id, clock)).reservedTokens, (await usage(t.db, id, clock)).usedTokens], [0, 120], id);
      // the ticket reserve hands out settles without reading its reservation back: the same outcome, and once
      const fits = request({ scopes: { chat, people: [person] }, inputTokens: 100, maxOutputTokens: 100 });
      const ticket = await ledger.reserve(fits);
      await Promise.all([ledger.settle(ticket, { inputTokens: 50, outputTokens: 10 }), ledger.settle(ticket, { inputTokens: 50, outputTokens: 10 })]);
      for (const id of Object.values(ids)) assert.deepEqual([(await usage(t.db, id, clock)).reservedTokens, (await usage(t.db, id, clock)).usedTokens], [0, 180], id);
      assert.deepEqual((await receipts(t.db, 'budget.settled', (d) => d.key === fits.key)).map((x) => x.data.tokens), [60]);
    });

    it('reserve and settle are idempotent by the step key; a settle of an unknown key does nothing', async () => {
      clock = NOON;
      const workspace = fresh('ws');
      const id = fresh('b-ws');
      await defineBudget(t.db, { id, scope: 'workspace', scopeId: workspace, tokens: 100_000, money: 1 });
      const r = request({ scopes: { workspace }, kind: 'embedding' });
      // a retried activity (and the same step twice at once) reserves once
      await Promise.all([ledger.reserve(r), ledger.reserve(r), ledger.reserve(r)]);
      await ledger.reserve({ ...r, inputTokens: 50_000 });
      let u = await usage(t.db, id, clock);
      assert.deepEqual([u.reservedTokens, u.reservedMicros], [1500, 1200]);
      assert.equal((await receipts(t.db, 'budget.reserved', (d) => d.key === r.key)).length, 1);
      // settled twice (and at once): once
      await Promise.all([ledger.settle({ key: r.key }, { inputTokens: 1000, outputTokens: 100 }), ledger.settle({ key: r.key }, { inputTokens: 1000, outputTokens: 100 })]);
      await ledger.settle({ key: r.key }, { inputTokens: 1000, outputTokens: 400 });
      u = await usage(t.db, id, clock);
      // 1000 x $0.40 + 100 x $1.60 per million = 560 micro-USD
      assert.deepEqual([u.reservedTokens, u.usedTokens, u.reservedMicros, u.usedMicros], [0, 1100, 0, 560]);
      const settled = await receipts(t.db, 'budget.settled', (d) => d.key === r.key);
      assert.equal(settled.length, 1);
      assert.deepEqual(settled[0]!.data, { key: r.key, model: MINI, tokens: 1100, micros: 560, reserved: { tokens: 1500, micros: 1200 } });
      // reserved again after it was settled (the step's call was made, the activity failed after
      // it and is retried): a call of its own, held under the key's next attempt, settled there
      const again = await ledger.reserve(r);
      assert.equal(again.key, `${r.key}#2`);
      assert.equal((await usage(t.db, id, clock)).reservedTokens, 1500);
      assert.deepEqual(await ledger.reserve(r), again, 'retried again before its settle: the same second reservation');
      assert.equal((await usage(t.db, id, clock)).reservedTokens, 1500);
      await ledger.settle(again, { inputTokens: 1000, outputTokens: 100 });
      u = await usage(t.db, id, clock);
      assert.deepEqual([u.reservedTokens, u.usedTokens], [0, 2200]);
      // unknown keys: nothing happens
      await ledger.settle({ key: fresh('never-reserved') }, { inputTokens: 10, outputTokens: 10 });
      assert.deepEqual(await usage(t.db, id, clock), u);
      // no budget applies: nothing is held, nothing written
      const free = request({ scopes: { workspace: fresh('unbudgeted') } });
      await ledger.reserve(free);
      assert.equal(await reservationOf(t.db, free.key), undefined);
      await ledger.settle({ key: free.key }, { inputTokens: 1, outputTokens: 1 });
    });

    it('a budget removed and defined again under its id holds again (its usage rows went with it)', async () => {
      clock = NOON;
      const chat = fresh('chat');
      const id = fresh('b-again');
      await defineBudget(t.db, { id, scope: 'chat', scopeId: chat, tokens: 10_000, period: 'day' });
      const first = request({ scopes: { chat } });
      await ledger.settle(await ledger.reserve(first), { inputTokens: 1000, outputTokens: 100 });
      assert.equal((await usage(t.db, id, clock)).usedTokens, 1100);
      assert.ok(await removeBudget(t.db, id));
      await defineBudget(t.db, { id, scope: 'chat', scopeId: chat, tokens: 10_000, period: 'day' });
      // the same ledger, which held on the first usage row: the new budget starts from nothing and takes the call
      const second = request({ scopes: { chat } });
      await ledger.settle(await ledger.reserve(second), { inputTokens: 1000, outputTokens: 200 });
      const u = await usage(t.db, id, clock);
      assert.deepEqual([u.reservedTokens, u.usedTokens], [0, 1200]);
    });

    it("with only the installation's budgets, a model step does not look up its scopes; a budget of another scope (this process's) applies to the next call", async () => {
      // a database of its own: the other tests' budgets are of every scope
      const own = await database.create();
      try {
        const spend = createBudgetLedger({ db: own.db, prices: createPriceTable(), installationTokens: { count: 1_000_000, windowMs: 86_400_000 } });
        let lookups = 0;
        const chat = fresh('chat');
        const registry = { ...withSpend(createModelRegistry({}), spend), languageModel: (): never => { throw new Error('no model here'); } };
        const step = (key: string) =>
          runModelStep(registry, { model: MINI, think: 'off', messages: [{ role: 'user', content: 'hello' }], maxOutputTokens: 100, spend: { key, kind: 'chat', scopes: async () => (lookups++, { chat }) } });
        assert.equal(await spend.scoped?.(), false);
        await assert.rejects(step('own-1'), /no model here/);
        assert.equal(lookups, 0, 'only the installation budget: no scope looked up');
        assert.equal((await reservationOf(own.db, 'own-1'))?.settledAt instanceof Date, true, 'reserved against it and settled');
        const chatBudget = fresh('b-chat');
        await defineBudget(own.db, { id: chatBudget, scope: 'chat', scopeId: chat, tokens: 50_000 });
        assert.equal(await spend.scoped?.(), true, 'at once, not after the 5 s look');
        await assert.rejects(step('own-2'), /no model here/);
        assert.equal(lookups, 1);
        assert.equal((await budgetUsage(own.db, await budget(own.db, chatBudget), Date.now())).usedTokens > 0, true, 'held and settled against the chat budget too');
        assert.equal(await removeBudget(own.db, chatBudget), true);
        assert.equal(await spend.scoped?.(), false);
      } finally {
        await own.cleanup();
      }
    });

    it("a crashed worker's reservation expires and is settled to its worst case, once", async () => {
      // nothing left open by the tests before
      clock = NOON + 24 * HOUR;
      await ledger.sweepExpired();
      clock = NOON;
      const repository = fresh('repo');
      const id = fresh('b-repo');
      await defineBudget(t.db, { id, scope: 'repository', scopeId: repository, tokens: 20_000, period: 'day' });
      const crashed = request({ scopes: { repository }, kind: 'coding-agent', inputTokens: 3000, maxOutputTokens: 2000 });
      const alive = request({ scopes: { repository }, kind: 'coding-agent' });
      const crashedTicket = await ledger.reserve(crashed);
      clock = NOON + 5 * 60_000;
      await ledger.reserve(alive);
      assert.equal(await ledger.sweepExpired(), 0, 'nothing has expired yet');
      // ten minutes on: the first reservation's worker never settled it
      clock = NOON + 10 * 60_000 + 1;
      const [sweeps] = await Promise.all([Promise.all([ledger.sweepExpired(), ledger.sweepExpired()]), ledger.settle({ key: alive.key }, { inputTokens: 1000, outputTokens: 100 })]);
      assert.equal(sweeps[0] + sweeps[1], 1, 'settled once, however many sweeps run');
      const u = await usage(t.db, id, NOON);
      assert.deepEqual([u.reservedTokens, u.usedTokens], [0, 5000 + 1100], 'the crashed call counts its worst case; the live one its usage');
      const row = await reservationOf(t.db, crashed.key);
      assert.equal(row?.settledTokens, 5000);
      assert.equal(row?.expiresAt.getTime(), NOON + 10 * 60_000);
      // the crashed worker's late settle does nothing (its worst case stands)
      await ledger.settle({ key: crashed.key }, { inputTokens: 3000, outputTokens: 10 });
      await ledger.settle(crashedTicket, { inputTokens: 3000, outputTokens: 10 });
      assert.equal(await ledger.sweepExpired(), 0);
      assert.deepEqual(await usage(t.db, id, NOON), u);
      const settled = await receipts(t.db, 'budget.settled', (d) => d.key === crashed.key);
      assert.deepEqual(settled.map((r) => r.data.expired), [true]);
      // settled reservations are removed after their retention (the sweep keeps the table small)
      const short = createBudgetLedger({ db: t.db, prices: createPriceTable(), now: () => clock, retainSettledMs: 1 });
      clock += 10;
      await short.sweepExpired();
      assert.equal(await reservationOf(t.db, crashed.key), undefined);
      assert.deepEqual(await usage(t.db, id, NOON), u, 'the usage stays');
    });

    it("periods follow the budget's time zone: a new local day is a new period", async () => {
      const person = fresh('person');
      const id = fresh('b-nyc');
      await defineBudget(t.db, { id, scope: 'person', scopeId: person, tokens: 2_000, period: 'day', timezone: 'America/New_York' });
      // 23:30 in New York (EST, UTC-5)
      clock = Date.parse('2026-11-29T04:30:00Z');
      const late = request({ scopes: { people: [person] } });
      await ledger.reserve(late);
      await ledger.settle({ key: late.key }, { inputTokens: 1000, outputTokens: 500 });
      await assert.rejects(ledger.reserve(request({ scopes: { people: [person] } })), (err: unknown) => err instanceof ModelBudgetExceededError && err.budget?.renewsAt === '2026-11-29T05:00:00.000Z');
      // 00:30 the next day there: the budget renewed
      clock = Date.parse('2026-11-29T05:30:00Z');
      await ledger.reserve(request({ scopes: { people: [person] } }));
      const yesterday = await usage(t.db, id, Date.parse('2026-11-29T04:30:00Z'));
      const today = await usage(t.db, id, clock);
      assert.equal(yesterday.period.start.toISOString(), '2026-11-28T05:00:00.000Z');
      assert.equal(today.period.start.toISOString(), '2026-11-29T05:00:00.000Z');
      assert.deepEqual([yesterday.usedTokens, today.reservedTokens], [1500, 1500]);
      clock = NOON;
    });

    it('money from the price table: cached input at its price; an unknown model counts tokens only and is reported', async () => {
      clock = NOON;
      const objective = fresh('objective');
      const id = fresh('b-money');
      await defineBudget(t.db, { id, scope: 'objective', scopeId: objective, money: 0.05, tokens: 1_000_000, period: 'month' });
      const r = request({ scopes: { objective }, model: 'openai:gpt-4.1', inputTokens: 10_000, maxOutputTokens: 1000, kind: 'objective' });
      await ledger.reserve(r);
      // worst case: 10000 x $2 + 1000 x $8 per million
      assert.equal((await usage(t.db, id, clock)).reservedMicros, 28_000);
      await ledger.settle({ key: r.key }, { inputTokens: 10_000, outputTokens: 1000, cachedInputTokens: 4000 });
      // 6000 x $2 + 4000 x $0.50 + 1000 x $8 per million
      assert.equal((await usage(t.db, id, clock)).usedMicros, 22_000);
      // a model without a price: the money limit does not apply, its tokens count
      const local = request({ scopes: { objective }, model: 'openai-compatible:llama3.1', inputTokens: 200_000, maxOutputTokens: 4096 });
      await ledger.reserve(local);
      await ledger.settle({ key: local.key }, { inputTokens: 200_000, outputTokens: 1000 });
      const u = await usage(t.db, id, clock);
      assert.deepEqual([u.usedTokens, u.usedMicros], [11_000 + 201_000, 22_000]);
      assert.deepEqual(ledger.unpricedModels(), ['openai-compatible:llama3.1']);
      assert.deepEqual(await unpricedModelsSeen(t.db), ['openai-compatible:llama3.1']);
      // a priced model's call over the money left (28002 of 28000 micro-USD) is refused, with what is left in USD
      await assert.rejects(ledger.reserve(request({ scopes: { objective }, model: 'openai:gpt-4.1', inputTokens: 10_001, maxOutputTokens: 1000 })), (err: unknown) => err instanceof ModelBudgetExceededError && err.budget?.left.money === 0.028 && err.budget.left.tokens === 1_000_000 - 212_000);
    });

    it('STEWARD_TOKEN_BUDGET is the installation budget in tokens over its window, with its message; removed when the setting is', async () => {
      clock = NOON;
      const spend = createSpend({ db: t.db, budget: { count: 5000, windowMs: HOUR } });
      const first = request({ scopes: {}, key: fresh('legacy') });
      await spend.reserve(first);
      await spend.settle({ key: first.key }, { inputTokens: 1000, outputTokens: 200 });
      const env = await budget(t.db, ENV_BUDGET_ID);
      assert.deepEqual([env.scope, env.scopeId, env.tokens, env.micros, env.period, env.windowSeconds, env.source], ['installation', null, 5000, null, 'window', 3600, 'env']);
      await assert.rejects(spend.reserve(request({ scopes: {}, inputTokens: 3000, maxOutputTokens: 1000 })), (err: unknown) => {
        assert.ok(err instanceof ModelBudgetExceededError);
        assert.match(err.message, new RegExp(`^Not called: the model budget of 5000 tokens per hour \\(STEWARD_TOKEN_BUDGET\\) has 3800 left, and a call to ${MINI} may need 4000: no model is called until \\d\\d:00 UTC\\.$`));
        assert.equal(err.budget?.scope, 'installation');
        assert.equal(err.budget?.period, 'hour');
        return true;
      });
      assert.deepEqual((await receipts(t.db, 'limit.refused', (d) => d.budget === ENV_BUDGET_ID)).map((r) => r.data.limit), ['tokens']);
      // the setting removed: so is the budget
      const off = createBudgetLedger({ db: t.db, prices: createPriceTable(), now: () => clock, installationTokens: null });
      await off.reserve(request({ scopes: {}, inputTokens: 3000, maxOutputTokens: 1000 }));
      assert.equal((await listBudgets(t.db)).some((b) => b.id === ENV_BUDGET_ID), false);
      assert.equal(await t.db.budgetUsage.count({ where: { budgetId: ENV_BUDGET_ID } }), 0);
    });

    it('a bad budget definition is refused with the field named, and changes nothing', async () => {
      const id = fresh('b-bad');
      await defineBudget(t.db, { id, scope: 'chat', scopeId: 'c1', tokens: 100 });
      const defined = await listBudgets(t.db);
      const bad: unknown[] = [
        { id, scope: 'chat', scopeId: 'c1', tokens: 100, timezone: 'Mars/Olympus' },
        { id, scope: 'chat', tokens: 100 },
        { id, scope: 'installation', scopeId: 'x', tokens: 100 },
        { id, scope: 'chat', scopeId: 'c1' },
        { id, scope: 'chat', scopeId: 'c1', tokens: -5 },
        { id, scope: 'galaxy', scopeId: 'c1', tokens: 5 },
        { id, scope: 'chat', scopeId: 'c1', tokens: 5, period: 'fortnight' },
        { id, scope: 'chat', scopeId: 'c1', tokens: 5, limit: 7 },
      ];
      const fields = ['timezone', 'scopeId', 'scopeId', 'tokens', 'tokens', 'scope', 'period', 'limit'];
      for (const [i, input] of bad.entries()) {
        await assert.rejects(defineBudget(t.db, input), (err: unknown) => err instanceof BudgetDefinitionError && err.message.includes(fields[i]!) && /nothing changed/.test(err.message), JSON.stringify(input));
      }
      assert.deepEqual(await listBudgets(t.db), defined);
      // removed with its usage
      await ledger.reserve(request({ scopes: { chat: 'c1' }, inputTokens: 10, maxOutputTokens: 10 }));
      assert.equal(await t.db.budgetUsage.count({ where: { budgetId: id } }), 1);
      assert.equal(await removeBudget(t.db, id), true);
      assert.equal(await t.db.budgetUsage.count({ where: { budgetId: id } }), 0);
      assert.equal(await removeBudget(t.db, id), false);
    });

    it('the running sweep settles an expired reservation by itself (what the workers start with the budget)', async () => {
      const workspace = fresh('ws-sweep');
      await defineBudget(t.db, { id: fresh('b-sweep'), scope: 'workspace', scopeId: workspace, tokens: 100_000 });
      const quick = createBudgetLedger({ db: t.db, prices: createPriceTable(), reservationTtlMs: 1 });
      const r = request({ scopes: { workspace } });
      await quick.reserve(r);
      const stop = startSweepingExpired(quick, { info: () => undefined, warn: () => undefined }, 50);
      try {
        const deadline = Date.now() + 10_000;
        while ((await reservationOf(t.db, r.key))?.settledAt == null) {
          assert.ok(Date.now() < deadline, 'the sweep settled the expired reservation within 10 s');
          await new Promise((res) => setTimeout(res, 50));
        }
      } finally {
        await stop();
      }
      assert.equal((await reservationOf(t.db, r.key))?.settledTokens, 1500, 'settled to its worst case');
    });

    it('the Prometheus gauges show each budget in its current period: used, reserved and its limit, per unit', async () => {
      const workspace = fresh('ws-gauge');
      const id = fresh('b-gauge');
      await defineBudget(t.db, { id, scope: 'workspace', scopeId: workspace, tokens: 100_000, money: 2, period: 'day' });
      const live = createBudgetLedger({ db: t.db, prices: createPriceTable() });
      const done = request({ scopes: { workspace } });
      await live.reserve(done);
      await live.settle(done, { inputTokens: 1000, outputTokens: 100 });
      await live.reserve(request({ scopes: { workspace } }));
      setBudgetStandings(() => budgetStandings(t.db));
      try {
        const text = await stewardRegistry.metrics();
        const sample = (name: string, unit: string) => {
          const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(`budget="${id}"`) && l.includes(`unit="${unit}"`));
          assert.ok(line, `${name} ${unit} of ${id}`);
          assert.match(line, new RegExp(`scope="workspace",scope_id="${workspace}",period="day"`));
          return Number(line.split(' ').at(-1));
        };
        assert.equal(sample('steward_budget_used', 'tokens'), 1100);
        assert.equal(sample('steward_budget_reserved', 'tokens'), 1500);
        assert.equal(sample('steward_budget_limit', 'tokens'), 100_000);
        assert.equal(sample('steward_budget_used', 'usd'), 0.00056);
        assert.equal(sample('steward_budget_limit', 'usd'), 2);
      } finally {
        setBudgetStandings(undefined);
      }
      assert.doesNotMatch(await stewardRegistry.metrics(), new RegExp(`budget="${id}"`), 'no reader: no budget samples');
    });
  });
}
