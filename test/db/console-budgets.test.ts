/**
 * The console's Budgets and receipts page (adapters/console/budgets.tsx) over its real routes,
 * the real budget and receipt services and a real database (SQLite; PostgreSQL too with
 * STEWARD_TEST_PG_URL), signed in with the session cookie and its CSRF token:
 *  - Raise is decided by the budget service with the person signed in: a member is refused, the
 *    admin whose call the budget refused is refused (no self-raise), each 409 with the reason in
 *    the budget's card (htmx) or on the page (a plain form), and nothing changes; another admin's
 *    raise applies (a plain form is sent back to the page); a bad amount is 400;
 *  - receipts: a chat's, a person's, a change's, a kind's and a time window's, newest first, a
 *    page of at most `size` with the cursor of the next, each row once over the pages; the export
 *    of a filter is exactly what `steward receipts export` writes for it (services/receipts.ts
 *    `exportReceipts`, the CLI's code); a secret Steward holds (held after its receipt was
 *    written) is masked in the page and the export; receipt text is escaped.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { Hono } from 'hono';
import type { Context } from 'hono';
import { createConsoleRoutes } from '../../adapters/console/app.js';
import { csrfToken } from '../../adapters/console/security.js';
import { BrowserSignIn, SIGN_IN_COOKIE } from '../../adapters/http/sign-in.js';
import type { Actor } from '../../common/roles.js';
import { defineBudget } from '../../domain/budgets/definitions.js';
import { createBudgetLedger } from '../../domain/budgets/ledger.js';
import { createPriceTable } from '../../domain/budgets/prices.js';
import { ModelBudgetExceededError, type SpendRequest } from '../../domain/model.js';
import { writeReceipt } from '../../domain/receipts.js';
import { holdSecrets } from '../../domain/secrets.js';
import { ensureSession } from '../../domain/store/sessions.js';
import { createBudgetService, type BudgetService } from '../../services/budgets.js';
import type { ConsoleChats } from '../../services/console.js';
import { createReceiptService, ExportArgsSchema, exportReceipts } from '../../services/receipts.js';
import { testDatabases, type TestDatabase } from '../helpers/db.js';

const TOKEN = 'console-budgets-db-token-0123456789abcdef';
const MINI = 'openai:gpt-4.1-mini'; // 1000 in + 500 out = 1500 tokens
const SECRET = 'held-secret-value-7f3a9c2e1b';
let n = 0;
const fresh = (p: string) => `${p}-${++n}-${Math.random().toString(36).slice(2, 8)}`;
const person = (role: Actor['role'], id = fresh('id')): Actor => ({ kind: 'person', id, name: `${role}-${id}`, role });
const request = (over: Partial<SpendRequest> & Pick<SpendRequest, 'scopes'>): SpendRequest => ({ key: fresh('step'), model: MINI, inputTokens: 1000, maxOutputTokens: 500, kind: 'chat', ...over });
const noChats: ConsoleChats = {
  list: async () => [],
  transcript: async () => [],
  status: async (chatId) => ({ workflowId: chatId, exists: false, running: null, queueLength: 0, model: 'm', think: 'off', tokens: { input: 0, output: 0, total: 0 }, turns: 0 }),
  stop: async (chatId) => ({ workflowId: chatId, kind: 'command', duplicate: false }),
  steer: async (chatId) => ({ workflowId: chatId, kind: 'command', duplicate: false }),
};
const idsIn = (html: string) => [...html.matchAll(/<tr id="r-(\d+)"/g)].map((m) => Number(m[1]));

for (const database of testDatabases()) {
  describe(`console: budgets and receipts (${database.name})`, () => {
    let t: TestDatabase;
    let budgets: BudgetService;
    let as: Actor;
    let req: (path: string, init?: RequestInit & { htmx?: boolean }) => Promise<Response>;
    before(async () => {
      t = await database.create();
      budgets = createBudgetService(t.db);
      const signIn = new BrowserSignIn({ apiToken: TOKEN });
      const app = new Hono();
      app.route('/', createConsoleRoutes({ apiToken: TOKEN, signIn, chats: noChats, services: { budgets, receipts: createReceiptService(t.db) }, actorOf: (_c: Context) => as }));
      const cookie = signIn.cookieValue();
      const csrf = csrfToken(TOKEN, cookie);
      req = (path, init = {}) => {
        const headers = new Headers(init.headers);
        headers.set('cookie', `${SIGN_IN_COOKIE}=${cookie}`);
        if (init.method === 'POST') headers.set('x-csrf-token', csrf);
        if (init.htmx) headers.set('hx-request', 'true');
        return Promise.resolve(app.request(`http://127.0.0.1${path}`, { ...init, headers }));
      };
    });
    after(async () => {
      await t?.cleanup();
    });

    const raise = (fields: Record<string, string>, htmx = true) => req('/console/budgets/raise', { method: 'POST', htmx, headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams(fields).toString() });

    it("Raise is the service's decision with who is signed in: a member and a self-raise are refused in place (409) and change nothing; another admin's raise applies; a bad amount is 400", async () => {
      const chat = fresh('chat');
      const id = fresh('b-chat');
      await defineBudget(t.db, { id, scope: 'chat', scopeId: chat, tokens: 1500, period: 'day' });
      const hitter = person('admin');
      const ledger = createBudgetLedger({ db: t.db, prices: createPriceTable() });
      await ledger.reserve(request({ scopes: { chat } }));
      await assert.rejects(ledger.reserve(request({ scopes: { chat, people: [hitter.id] } })), ModelBudgetExceededError);
      const raised = async () => (await budgets.get(id))!.usage.raised.tokens;

      // the page shows the budget, with its Raise form naming the budget and the period shown
      as = person('admin');
      const page = await (await req('/console/budgets')).text();
      assert.ok(page.includes(`<h2 id="budget-${Buffer.from(id).toString('hex')}-h">${id}</h2>`), 'the budget is listed');
      assert.ok(page.includes(`name="periodStart" value="${(await budgets.get(id))!.usage.periodStart}"`));

      as = person('member');
      const member = await raise({ budgetId: id, tokens: '1000' });
      assert.equal(member.status, 409);
      const memberHtml = await member.text();
      assert.match(memberHtml, /^<section class="budget"/, 'the card, answered in place');
      assert.match(memberHtml, /class="error" role="status"[^>]*>Raising a budget needs the admin role; you are a member/);
      as = hitter;
      const self = await raise({ budgetId: id, tokens: '1000' });
      assert.equal(self.status, 409);
      assert.match(await self.text(), /no self-raise/);
      // a plain form: the whole page, the refusal in the budget's card
      const plain = await raise({ budgetId: id, tokens: '1000' }, false);
      assert.equal(plain.status, 409);
      assert.match(await plain.text(), /<!doctype html>[\s\S]*no self-raise/);
      assert.equal(await raised(), 0, 'the refusals changed nothing');

      as = person('admin');
      const bads: Array<Record<string, string>> = [{ budgetId: id }, { budgetId: id, tokens: '-5' }, { budgetId: id, tokens: '2.5' }, { budgetId: id, tokens: 'lots' }, { budgetId: '', tokens: '5' }, { budgetId: id, money: '1' } /* not limited */, { budgetId: id, tokens: '5', periodStart: 'yesterday' }];
      for (const bad of bads) {
        const r = await raise(bad);
        assert.equal(r.status, 400, JSON.stringify(bad));
        assert.match(await r.text(), /refused|nothing changed/i, JSON.stringify(bad));
      }
      assert.equal(await raised(), 0, 'bad amounts changed nothing');
      const unknown = await raise({ budgetId: fresh('nope'), tokens: '5' });
      assert.equal(unknown.status, 404);

      const ok = await raise({ budgetId: id, tokens: '1000' });
      assert.equal(ok.status, 200);
      assert.match(await ok.text(), new RegExp(`role="status"[^>]*>Raised ${id} by 1000 tokens until`));
      assert.equal(await raised(), 1000);
      const okPlain = await raise({ budgetId: id, tokens: '500' }, false);
      assert.equal(okPlain.status, 303);
      assert.equal(okPlain.headers.get('location'), '/console/budgets');
      assert.equal(await raised(), 1500);
    });

    it("lists a chat's, a person's, a change's, a kind's and a window's receipts newest first in bounded pages, exports exactly the CLI's rows, masks held secrets and escapes text", async () => {
      const chat = fresh('chat');
      const sessionA = `session:http:default:${chat}`;
      await ensureSession(t.db, sessionA, { platform: 'http', account: 'default', chatId: chat });
      const change = fresh('change');
      const who = fresh('person');
      const write = (kind: 'ingress' | 'delivery' | 'change.plan' | 'tool.call', extra: { sessionId?: string; workflowId?: string; actor?: string }, data: Record<string, unknown>) => writeReceipt(t.db, { kind, ...extra, data });
      await write('ingress', { sessionId: sessionA, workflowId: sessionA, actor: who }, { n: 1 });
      await write('delivery', { sessionId: sessionA, workflowId: sessionA }, { n: 2, text: `<script>alert(1)</script> key ${SECRET}` });
      await sleep(30);
      const mid = new Date().toISOString();
      await sleep(30);
      await write('ingress', { sessionId: sessionA, workflowId: sessionA, actor: who }, { n: 3 });
      await write('tool.call', { sessionId: sessionA, workflowId: sessionA }, { n: 4 });
      await write('change.plan', { workflowId: change, actor: who }, { n: 5 });
      await write('ingress', { sessionId: `session:http:default:${fresh('elsewhere')}`, actor: fresh('someone') }, { n: 6 });
      // held from now on: the receipt written before holds it in clear, and every view masks it on the way out
      holdSecrets([{ name: 'STEWARD_TEST_CONSOLE_SECRET', value: SECRET }]);

      const cli = async (args: Record<string, string>) => {
        let out = '';
        await exportReceipts(t.db, ExportArgsSchema.parse(args), (s) => {
          out += s;
        });
        return out;
      };
      const rows = async (args: Record<string, string>) => (await cli(args)).split('\n').filter(Boolean).map((l) => JSON.parse(l) as { id: number; data: { n: number } });
      const cases: Array<[Record<string, string>, number[]]> = [
        [{ chat }, [1, 2, 3, 4]],
        [{ chat: sessionA }, [1, 2, 3, 4]],
        [{ person: who }, [1, 3, 5]],
        [{ change }, [5]],
        [{ chat, kind: 'ingress' }, [1, 3]],
        [{ chat, since: mid }, [3, 4]],
        [{ chat, until: mid }, [1, 2]],
        [{ person: who, kind: 'ingress', since: mid }, [3]],
        [{ chat: fresh('no-such-chat') }, []],
      ];
      for (const [filter, want] of cases) {
        const expected = await rows(filter);
        assert.deepEqual(expected.map((r) => r.data.n), want, `the CLI's rows for ${JSON.stringify(filter)}`);
        // the page: newest first
        const page = await req(`/console/receipts?${new URLSearchParams(filter).toString()}`);
        assert.equal(page.status, 200);
        const html = await page.text();
        assert.deepEqual(idsIn(html), expected.map((r) => r.id).reverse(), `the page for ${JSON.stringify(filter)}`);
        // the export: byte for byte what the CLI writes
        const exp = await req(`/console/receipts/export?${new URLSearchParams(filter).toString()}`);
        assert.equal(exp.status, 200);
        assert.match(exp.headers.get('content-type') ?? '', /^application\/x-ndjson/);
        assert.match(exp.headers.get('content-disposition') ?? '', /^attachment; filename="receipts-[^"]+\.jsonl"$/);
        assert.equal(await exp.text(), await cli(filter), `the export for ${JSON.stringify(filter)}`);
      }

      // pages of 1: every row once, newest first, by the "next page" cursor (bounded)
      const all = (await rows({ chat })).map((r) => r.id).reverse();
      const seen: number[] = [];
      let path: string | undefined = `/console/receipts?chat=${encodeURIComponent(chat)}&size=1`;
      for (let i = 0; path && i < 20; i++) {
        const html = await (await req(path)).text();
        const ids = idsIn(html);
        assert.ok(ids.length <= 1);
        seen.push(...ids);
        path = /<a href="([^"]+)" rel="next" id="next-page"/.exec(html)?.[1]?.replaceAll('&amp;', '&');
      }
      assert.deepEqual(seen, all);
      // bounded: a page of more than 100 is refused
      assert.equal((await req(`/console/receipts?chat=${encodeURIComponent(chat)}&size=5000`)).status, 400);

      // masked and escaped, in the page and the export
      const html = await (await req(`/console/receipts?chat=${encodeURIComponent(chat)}`)).text();
      assert.ok(!html.includes(SECRET), 'the held secret is masked on the page');
      assert.ok(html.includes("[Steward&#39;s secret STEWARD_TEST_CONSOLE_SECRET]") || html.includes("[Steward's secret STEWARD_TEST_CONSOLE_SECRET]"), 'the mask names the secret');
      assert.ok(!html.includes('<script>alert(1)</script>'), 'receipt text is escaped');
      const exported = await (await req(`/console/receipts/export?chat=${encodeURIComponent(chat)}`)).text();
      assert.ok(!exported.includes(SECRET) && exported.includes("[Steward's secret STEWARD_TEST_CONSOLE_SECRET]"));

      // a bad filter: 400, nothing listed or exported
      for (const q of ['since=last+tuesday', 'kind=DROP%20TABLE', `since=${encodeURIComponent(mid)}&until=2020-01-01`]) {
        const r = await req(`/console/receipts?${q}`);
        assert.equal(r.status, 400, q);
        assert.deepEqual(idsIn(await r.text()), [], q);
        assert.equal((await req(`/console/receipts/export?${q}`)).status, 400, q);
      }
    });
  });
}
