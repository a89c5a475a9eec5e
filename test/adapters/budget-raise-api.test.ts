/**
 * Raising a budget for its period through the HTTP API (POST /api/v1/budgets/{id}/raise) and the
 * CLI (`steward budgets raise`), on SQLite and PostgreSQL: both call the budget service's
 * `raise` as the operator, so a raise from either lets a refused reservation through, is
 * receipted `budget.raised` and shows in the listed usage; a bad amount, an unknown budget, a
 * unit the budget does not limit or a period that is over is refused with a clear error and
 * changes nothing.
 *
 * PostgreSQL runs when STEWARD_TEST_PG_URL is set (scripts/pg.sh start; scripts/pg.sh url).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createHttpApp } from '../../adapters/http/app.js';
import { loadConfig } from '../../config/index.js';
import { createBudgetLedger } from '../../domain/budgets/ledger.js';
import { createPriceTable } from '../../domain/budgets/prices.js';
import type { Db } from '../../domain/db.js';
import { ModelBudgetExceededError } from '../../domain/model.js';
import { adminCommand } from '../../platform/admin-cli.js';
import type { BudgetView } from '../../services/budgets.js';
import type { Ingress } from '../../services/chat/intake.js';
import { testDatabases, type TestDatabase } from '../helpers/db.js';

const TOKEN = 'budget-raise-test-token-0123456789';
const MINI = 'openai:gpt-4.1-mini'; // 1000 in + 500 out = 1500 tokens, 1200 micro-USD

const raisedReceipts = async (db: Db, budget: string) =>
  (await db.receipt.findMany({ where: { kind: 'budget.raised' }, orderBy: { id: 'asc' } })).map((r) => ({ actor: r.actor, data: JSON.parse(r.data) as Record<string, unknown> })).filter((r) => r.data.budget === budget);

for (const database of testDatabases()) {
  describe(`budget raises through the API and the CLI (${database.name})`, () => {
    let t: TestDatabase;
    let dir: string;
    let api: (method: string, route: string, body?: unknown, headers?: Record<string, string>) => Promise<Response>;
    let cli: (...args: string[]) => Promise<{ code: number; out: string; err: string }>;

    before(async () => {
      t = await database.create();
      dir = mkdtempSync(path.join(tmpdir(), 'steward-budget-raise-'));
      const app = createHttpApp({ ingress: {} as Ingress, apiToken: TOKEN, health: async () => ({ ok: true, checks: {} }), admin: { db: t.db } });
      api = async (method, route, body, headers = {}) =>
        app.request(route, {
          method,
          headers: { authorization: `Bearer ${TOKEN}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...headers },
          ...(body !== undefined ? { body: typeof body === 'string' ? body : JSON.stringify(body) } : {}),
        });
      const config = loadConfig({ DATABASE_URL: t.url, STEWARD_DATA_DIR: dir }, dir);
      cli = async (...args) => {
        const out: string[] = [];
        const err: string[] = [];
        const code = await adminCommand('budgets', args, { config: () => config, out: (s) => void out.push(s), err: (s) => void err.push(s) });
        return { code, out: out.join(''), err: err.join('') };
      };
    });
    after(async () => {
      await t?.cleanup();
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    const one = async (id: string): Promise<BudgetView | undefined> => {
      const r = await api('GET', '/api/v1/budgets');
      assert.equal(r.status, 200);
      return ((await r.json()) as { budgets: BudgetView[] }).budgets.find((b) => b.id === id);
    };

    it('a raise from the API or the CLI lets a refused call through for this period, receipted as the operator', async () => {
      assert.equal((await cli('set', 'chat:r1', '--scope', 'chat', '--scope-id', 'r1', '--tokens', '1500', '--money', '1', '--period', 'day')).code, 0);
      const ledger = createBudgetLedger({ db: t.db, prices: createPriceTable() });
      const call = (key: string) => ledger.reserve({ key: `${database.name}-${key}`, model: MINI, inputTokens: 1000, maxOutputTokens: 500, scopes: { chat: 'r1' }, kind: 'chat' });
      await call('a');
      await assert.rejects(call('b'), ModelBudgetExceededError);

      const r = await api('POST', '/api/v1/budgets/chat:r1/raise', { tokens: 1500 });
      assert.equal(r.status, 200);
      const body = (await r.json()) as { budget: BudgetView; raise: unknown; raisedInPeriod: unknown; woken: unknown; message: string };
      assert.deepEqual(body.raise, { tokens: 1500, money: null });
      assert.deepEqual(body.raisedInPeriod, { tokens: 1500, money: 0 });
      assert.equal(body.woken, null, 'no waker in this app');
      assert.deepEqual(body.budget.usage.raised, { tokens: 1500, money: 0 });
      assert.equal(body.budget.usage.left.tokens, 1500);
      assert.match(body.message, /^Raised chat:r1 by 1500 tokens until \d{4}-\d\d-\d\d 00:00 UTC: 1500 tokens and \$0\.9988 left now\.$/);
      await call('b');

      const c = await cli('raise', 'chat:r1', '--tokens', '100', '--money', '0.5');
      assert.equal(c.code, 0, c.err);
      assert.match(c.out, /^Raised chat:r1 by 100 tokens and \$0\.50 until .*: 100 tokens and \$1\.\d+ left now\.\n$/);
      assert.deepEqual((await one('chat:r1'))?.usage.raised, { tokens: 1600, money: 0.5 });
      const table = await cli('list');
      assert.match(table.out, /chat:r1\s+chat r1\s+1500 tokens \+ \$1\.00 \(\+1600 tokens \+ \$0\.50 raised\)\s+day \(UTC\)/);

      const receipts = await raisedReceipts(t.db, 'chat:r1');
      assert.deepEqual(
        receipts.map((x) => [x.actor, x.data.by, x.data.tokens, x.data.money ?? null]),
        [
          ['operator', 'the operator', 1500, null],
          ['operator', 'cli', 100, 0.5],
        ],
      );
      assert.ok(receipts.every((x) => x.data.period === 'day' && typeof x.data.periodStart === 'string' && typeof x.data.renewsAt === 'string'));
    });

    it('a bad raise is refused with a clear error and changes nothing, from either surface', async () => {
      assert.equal((await cli('set', 'person:r2', '--scope', 'person', '--scope-id', 'id-r2', '--tokens', '1000', '--period', 'week')).code, 0);
      const before = (await one('person:r2'))?.usage;
      const receiptsBefore = (await raisedReceipts(t.db, 'person:r2')).length;

      for (const [body, status, error] of [
        [{ tokens: 0 }, 400, /tokens: more than 0/],
        [{ tokens: -5 }, 400, /tokens/],
        [{ tokens: '5' }, 400, /expected number/],
        [{ tokens: 1.5 }, 400, /whole number/],
        [{}, 400, /tokens, money or both/],
        [{ money: 2 }, 400, /does not limit money/],
        [{ tokens: 5, extra: 1 }, 400, /extra/],
        [{ tokens: 5, budgetId: 'other' }, 400, /tokens, money and periodStart only/],
        [{ tokens: 5, periodStart: '2020-01-06T00:00:00Z' }, 409, /is over/],
        [{ tokens: 5, periodStart: 'last week' }, 400, /periodStart/],
        [[5], 400, /expected an object/],
      ] as const) {
        const r = await api('POST', '/api/v1/budgets/person:r2/raise', body);
        assert.equal(r.status, status, JSON.stringify(body));
        assert.match(((await r.json()) as { error: string }).error, error, JSON.stringify(body));
      }
      assert.equal((await api('POST', '/api/v1/budgets/nope/raise', { tokens: 5 })).status, 404);
      assert.equal((await api('POST', '/api/v1/budgets/person:r2/raise', '{"tokens": ')).status, 400, 'malformed JSON');
      assert.equal((await api('POST', '/api/v1/budgets/person:r2/raise', 'tokens=5', { 'content-type': 'text/plain' })).status, 415);
      assert.equal((await api('POST', '/api/v1/budgets/person:r2/raise', { tokens: 5 }, { authorization: '' })).status, 401);

      for (const [args, code, error] of [
        [['--tokens', 'lots'], 2, /expected number/],
        [['--tokens', '0'], 2, /more than 0/],
        [['--money', '1'], 2, /does not limit money/],
        [[], 2, /--tokens N, --money USD or both/],
      ] as const) {
        const r = await cli('raise', 'person:r2', ...args);
        assert.equal(r.code, code, args.join(' '));
        assert.match(r.err, error, r.err);
      }
      const missing = await cli('raise', 'nope', '--tokens', '5');
      assert.equal(missing.code, 1);
      assert.match(missing.err, /No budget has the id nope/);

      assert.deepEqual((await one('person:r2'))?.usage, before, 'nothing changed');
      assert.equal((await raisedReceipts(t.db, 'person:r2')).length, receiptsBefore, 'nothing receipted');
    });
  });
}
