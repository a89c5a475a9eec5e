/**
 * Budgets through the HTTP API and the CLI (`steward budgets`), on SQLite and PostgreSQL: both
 * call the budget service (services/budgets.ts), so they change the same budget and write the
 * same `budget.change` receipts (only the actor and the budget's source differ); a bad field is
 * refused with a clear error and changes nothing; the listed usage is what a reservation through
 * the ledger holds, and what it settles to.
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
import { listBudgets } from '../../domain/budgets/definitions.js';
import { createBudgetLedger } from '../../domain/budgets/ledger.js';
import { createPriceTable } from '../../domain/budgets/prices.js';
import type { Db } from '../../domain/db.js';
import { adminCommand } from '../../platform/admin-cli.js';
import type { BudgetView } from '../../services/budgets.js';
import type { Ingress } from '../../services/chat/intake.js';
import { testDatabases, type TestDatabase } from '../helpers/db.js';

const TOKEN = 'budgets-test-token-0123456789';
const MINI = 'openai:gpt-4.1-mini'; // $0.40 in, $1.60 out per million: 1000 in + 500 out = 1200 micro-USD

type Change = { action: string; budget: string; before: Record<string, unknown> | null; after: Record<string, unknown> | null };

const changes = async (db: Db) =>
  (await db.receipt.findMany({ where: { kind: 'budget.change' }, orderBy: { id: 'asc' } })).map((r) => ({ actor: r.actor, data: JSON.parse(r.data) as Change }));

for (const database of testDatabases()) {
  describe(`budgets through the API and the CLI (${database.name})`, () => {
    let t: TestDatabase;
    let dir: string;
    let api: (method: string, route: string, body?: unknown, headers?: Record<string, string>) => Promise<Response>;
    let cli: (...args: string[]) => Promise<{ code: number; out: string; err: string }>;

    before(async () => {
      t = await database.create();
      dir = mkdtempSync(path.join(tmpdir(), 'steward-budgets-'));
      // the budget routes never reach the chat intake (only the pairing and approval decisions of the admin routes do)
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

    const listed = async (): Promise<BudgetView[]> => {
      const r = await api('GET', '/api/v1/budgets');
      assert.equal(r.status, 200);
      return ((await r.json()) as { budgets: BudgetView[] }).budgets;
    };
    const one = async (id: string) => (await listed()).find((b) => b.id === id);

    it('the API and the CLI change the same budget and write the same receipts', async () => {
      assert.equal((await app401()).status, 401, 'the operator token is asked for');

      // the same sequence from each surface: define, change, remove
      const made = await api('PUT', '/api/v1/budgets/ws-api', { scope: 'workspace', scopeId: 'w1', tokens: 100 });
      assert.equal(made.status, 201);
      assert.equal(((await made.json()) as BudgetView).source, 'api');
      const changed = await api('PUT', '/api/v1/budgets/ws-api', { scope: 'workspace', scopeId: 'w1', tokens: 200, money: 2.5, period: 'week', timezone: 'Europe/Berlin' });
      assert.equal(changed.status, 200);
      assert.equal((await api('DELETE', '/api/v1/budgets/ws-api')).status, 200);
      assert.equal((await api('DELETE', '/api/v1/budgets/ws-api')).status, 404);

      assert.equal((await cli('set', 'ws-cli', '--scope', 'workspace', '--scope-id', 'w1', '--tokens', '100')).code, 0);
      const cliChange = await cli('set', 'ws-cli', '--scope', 'workspace', '--scope-id', 'w1', '--tokens', '200', '--money', '2.5', '--period', 'week', '--timezone', 'Europe/Berlin');
      assert.equal(cliChange.code, 0, cliChange.err);
      assert.match(cliChange.out, /Changed the budget ws-cli: workspace w1, 200 tokens \+ \$2\.50, week \(Europe\/Berlin\)/);
      assert.equal((await cli('remove', 'ws-cli')).code, 0);
      const gone = await cli('remove', 'ws-cli');
      assert.equal(gone.code, 1);
      assert.match(gone.err, /No budget ws-cli/);

      const rs = await changes(t.db);
      const normal = (actor: string, id: string) =>
        rs
          .filter((r) => r.actor === actor && r.data.budget === id)
          .map((r) => JSON.parse(JSON.stringify(r.data).replaceAll(id, 'ID').replaceAll(/"source":"(api|cli)"/g, '"source":"S"')) as Change);
      const fromApi = normal('operator', 'ws-api');
      assert.equal(fromApi.length, 3);
      assert.deepEqual(normal('cli', 'ws-cli'), fromApi);
      assert.deepEqual(
        fromApi.map((c) => [c.action, c.before?.tokens ?? null, c.after?.tokens ?? null]),
        [
          ['set', null, 100],
          ['set', 100, 200],
          ['remove', 200, null],
        ],
      );
      assert.deepEqual(fromApi[1]!.after, { id: 'ID', scope: 'workspace', scopeId: 'w1', tokens: 200, money: 2.5, period: 'week', timezone: 'Europe/Berlin', windowSeconds: null, source: 'S' });

      // one budget changed from both surfaces: each sees the other's change
      assert.equal((await api('PUT', '/api/v1/budgets/chat:b1', { scope: 'chat', scopeId: 'b1', tokens: 10_000, period: 'day' })).status, 201);
      assert.equal((await cli('set', 'chat:b1', '--scope', 'chat', '--scope-id', 'b1', '--tokens', '20000', '--money', '1.5', '--period', 'day', '--timezone', 'Europe/Berlin')).code, 0);
      const b1 = await one('chat:b1');
      assert.deepEqual([b1?.tokens, b1?.money, b1?.timezone, b1?.source], [20_000, 1.5, 'Europe/Berlin', 'cli']);
      assert.equal((await api('PUT', '/api/v1/budgets/chat:b1', { scope: 'chat', scopeId: 'b1', tokens: 30_000, money: 1.5, period: 'day', timezone: 'Europe/Berlin' })).status, 200);
      const list = await cli('list', '--json');
      const fromCli = (JSON.parse(list.out) as { budgets: BudgetView[] }).budgets.find((b) => b.id === 'chat:b1');
      assert.deepEqual([fromCli?.tokens, fromCli?.source], [30_000, 'api']);
      const last = (await changes(t.db)).filter((r) => r.data.budget === 'chat:b1');
      assert.deepEqual(
        last.map((r) => [r.actor, r.data.before?.source ?? null, r.data.after?.source]),
        [
          ['operator', null, 'api'],
          ['cli', 'api', 'cli'],
          ['operator', 'cli', 'api'],
        ],
      );

      // the OpenAPI document describes the routes, each behind the operator token
      const doc = (await (await api('GET', '/api/openapi.json')).json()) as { paths: Record<string, Record<string, { security?: unknown[]; requestBody?: unknown }>> };
      assert.ok(doc.paths['/api/v1/budgets']?.get?.security);
      assert.ok(doc.paths['/api/v1/budgets/{id}']?.put?.requestBody);
      assert.ok(doc.paths['/api/v1/budgets/{id}']?.delete?.security);

      // an id with a slash goes percent-encoded
      assert.equal((await api('PUT', '/api/v1/budgets/repo%2Fmain', { scope: 'repository', scopeId: 'main', tokens: 5 })).status, 201);
      assert.equal((await one('repo/main'))?.scopeId, 'main');
      assert.equal((await api('DELETE', '/api/v1/budgets/repo%2Fmain')).status, 200);
    });

    it('a bad field is refused with a clear error and changes nothing, from either surface', async () => {
      assert.equal((await api('PUT', '/api/v1/budgets/p1', { scope: 'person', scopeId: 'id-p1', money: 3, period: 'month' })).status, 201);
      const budgetsBefore = await listBudgets(t.db);
      const receiptsBefore = (await changes(t.db)).length;

      for (const [body, error] of [
        [{ scope: 'person', money: 3 }, /scopeId: a person budget names its person/],
        [{ scope: 'person', scopeId: 'id-p1', tokens: -5 }, /tokens:/],
        [{ scope: 'person', scopeId: 'id-p1', tokens: '5' }, /tokens:/],
        [{ scope: 'person', scopeId: 'id-p1', money: 3, period: 'fortnight' }, /period:/],
        [{ scope: 'person', scopeId: 'id-p1', money: 3, timezone: 'Mars/Olympus_Mons' }, /timezone: not an IANA time zone/],
        [{ scope: 'person', scopeId: 'id-p1' }, /a budget limits tokens, money or both/],
        [{ scope: 'installation', scopeId: 'x', tokens: 5 }, /the installation budget has no scope id/],
        [{ scope: 'person', scopeId: 'id-p1', money: 3, extra: true }, /extra/],
        [{ id: 'other', scope: 'person', scopeId: 'id-p1', money: 3 }, /id: the body's id differs/],
        [[1, 2], /expected an object/],
      ] as const) {
        const r = await api('PUT', '/api/v1/budgets/p1', body);
        assert.equal(r.status, 400, JSON.stringify(body));
        const { error: message } = (await r.json()) as { error: string };
        assert.match(message, /^Budget refused \(nothing changed\)/, message);
        assert.match(message, error, message);
      }
      const badId = await api('PUT', '/api/v1/budgets/bad%20id', { scope: 'person', scopeId: 'id-p1', money: 3 });
      assert.equal(badId.status, 400);
      assert.match(((await badId.json()) as { error: string }).error, /id: letters, digits/);
      assert.equal((await api('PUT', '/api/v1/budgets/p1', '{"scope": ')).status, 400, 'malformed JSON');
      assert.equal((await api('PUT', '/api/v1/budgets/p1', 'scope=person', { 'content-type': 'text/plain' })).status, 415);

      for (const [args, error] of [
        [['--scope', 'person', '--scope-id', 'id-p1', '--tokens', 'lots'], /tokens:/],
        [['--scope', 'person', '--scope-id', 'id-p1', '--money', '3', '--period', 'fortnight'], /period:/],
        [['--scope', 'person', '--scope-id', 'id-p1', '--money', '3', '--timezone', 'Mars/Olympus_Mons'], /not an IANA time zone/],
        [['--scope', 'planet', '--money', '3'], /scope:/],
        [['--scope', 'person', '--scope-id', 'id-p1'], /a budget limits tokens, money or both/],
      ] as const) {
        const r = await cli('set', 'p1', ...args);
        assert.equal(r.code, 2, args.join(' '));
        assert.match(r.err, /Budget refused \(nothing changed\)/, r.err);
        assert.match(r.err, error, r.err);
      }
      assert.equal((await cli('set', 'p1', '--money', '3')).code, 2, '--scope is required');

      // STEWARD_TOKEN_BUDGET's budget is the setting's
      const env = await api('PUT', `/api/v1/budgets/${encodeURIComponent('env:STEWARD_TOKEN_BUDGET')}`, { scope: 'installation', tokens: 5 });
      assert.equal(env.status, 409);
      assert.match(((await env.json()) as { error: string }).error, /STEWARD_TOKEN_BUDGET setting's/);
      assert.equal((await api('DELETE', `/api/v1/budgets/${encodeURIComponent('env:STEWARD_TOKEN_BUDGET')}`)).status, 409);
      assert.equal((await cli('remove', 'env:STEWARD_TOKEN_BUDGET')).code, 1);

      assert.deepEqual(await listBudgets(t.db), budgetsBefore, 'no budget changed');
      assert.equal((await changes(t.db)).length, receiptsBefore, 'no receipt written');
    });

    it("the listed usage is what a reservation through the ledger holds, then what it settled to", async () => {
      assert.equal((await cli('set', 'chat:b2', '--scope', 'chat', '--scope-id', 'b2', '--tokens', '10000', '--money', '1', '--period', 'day', '--timezone', 'Europe/Berlin')).code, 0);
      const fresh = await one('chat:b2');
      assert.deepEqual(fresh?.usage.used, { tokens: 0, money: 0 });
      assert.deepEqual(fresh?.usage.left, { tokens: 10_000, money: 1 });
      assert.match(fresh?.usage.renews ?? '', /^\d{4}-\d\d-\d\d 00:00 Europe\/Berlin$/);

      const ledger = createBudgetLedger({ db: t.db, prices: createPriceTable() });
      const ticket = await ledger.reserve({ key: `budgets-test-${database.name}`, model: MINI, inputTokens: 1000, maxOutputTokens: 500, scopes: { chat: 'b2' }, kind: 'chat' });
      const held = await one('chat:b2');
      assert.deepEqual(held?.usage.reserved, { tokens: 1500, money: 0.0012 });
      assert.deepEqual(held?.usage.used, { tokens: 0, money: 0 });
      assert.deepEqual(held?.usage.left, { tokens: 8500, money: 0.9988 });
      assert.equal(held?.usage.periodStart, fresh?.usage.periodStart);
      assert.ok(held?.usage.renewsAt && Date.parse(held.usage.renewsAt) > Date.now());
      const table = await cli('list');
      assert.equal(table.code, 0);
      assert.match(table.out, /chat:b2\s+chat b2\s+10000 tokens \+ \$1\.00\s+day \(Europe\/Berlin\)\s+0 tokens \+ \$0\.00\s+1500 tokens \+ \$0\.00\s+8500 tokens \+ \$1\.00\s+\d{4}-\d\d-\d\d 00:00 Europe\/Berlin\s+cli/);

      // settled to what the provider reported: 800 in, 200 out = 320 + 320 micro-USD
      await ledger.settle(ticket, { inputTokens: 800, outputTokens: 200 });
      const settled = await one('chat:b2');
      assert.deepEqual(settled?.usage.used, { tokens: 1000, money: 0.00064 });
      assert.deepEqual(settled?.usage.reserved, { tokens: 0, money: 0 });
      assert.deepEqual(settled?.usage.left, { tokens: 9000, money: 0.99936 });

      // a change of the limit keeps the period's usage; removing the budget takes it
      assert.equal((await api('PUT', '/api/v1/budgets/chat:b2', { scope: 'chat', scopeId: 'b2', tokens: 1200, period: 'day', timezone: 'Europe/Berlin' })).status, 200);
      const lowered = await one('chat:b2');
      assert.deepEqual([lowered?.usage.used.tokens, lowered?.usage.left], [1000, { tokens: 200, money: null }]);
      assert.equal((await cli('remove', 'chat:b2')).code, 0);
      assert.equal(await one('chat:b2'), undefined);
      assert.equal(await t.db.budgetUsage.count({ where: { budgetId: 'chat:b2' } }), 0);
    });

    /** A request without the operator token. */
    async function app401(): Promise<Response> {
      return api('GET', '/api/v1/budgets', undefined, { authorization: '' });
    }
  });
}
