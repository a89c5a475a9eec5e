/**
 * Budgets declared in a file (STEWARD_BUDGETS_FILE, domain/budgets/file.ts), on SQLite and
 * PostgreSQL: applied in one transaction with a `budget.change` receipt (actor `file`) for each
 * change and none when nothing changed; budgets the file defined before and no longer lists are
 * removed with their usage, the API's and the CLI's (and STEWARD_TOKEN_BUDGET's) left alone; a
 * bad field refuses the whole file, naming the field, and changes nothing; two processes
 * applying it at once change it once. Also the budget service's writes (a change and its receipt
 * commit together) and the one usage read behind the list and the gauges.
 *
 * PostgreSQL runs when STEWARD_TEST_PG_URL is set (scripts/pg.sh start; scripts/pg.sh url).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ConfigError, loadConfig } from '../../config/index.js';
import { listBudgets } from '../../domain/budgets/definitions.js';
import { applyBudgetsFile, BudgetsFileError } from '../../domain/budgets/file.js';
import { budgetStandings, budgetsWithUsage, budgetUsage, createBudgetLedger, ENV_BUDGET_ID } from '../../domain/budgets/ledger.js';
import { createPriceTable } from '../../domain/budgets/prices.js';
import { createDb, type Db } from '../../domain/db.js';
import { createBudgetService } from '../../services/budgets.js';
import { testDatabases, type TestDatabase } from '../helpers/db.js';

type Change = { action: string; budget: string; before: Record<string, unknown> | null; after: Record<string, unknown> | null; file?: string | null };

const changes = async (db: Db) => (await db.receipt.findMany({ where: { kind: 'budget.change' }, orderBy: { id: 'asc' } })).map((r) => ({ actor: r.actor, data: JSON.parse(r.data) as Change }));
const ADMIN = { id: 'admin-1', name: 'Admin' };

for (const database of testDatabases()) {
  describe(`budgets from a file (${database.name})`, () => {
    let t: TestDatabase;
    let dir: string;
    let file: string;
    const write = (content: unknown) => writeFileSync(file, typeof content === 'string' ? content : JSON.stringify(content));
    const stored = async () => (await listBudgets(t.db)).map((b) => ({ id: b.id, source: b.source, tokens: b.tokens, micros: b.micros, period: b.period, timezone: b.timezone }));

    before(async () => {
      t = await database.create();
      dir = mkdtempSync(path.join(tmpdir(), 'steward-budgets-file-'));
      file = path.join(dir, 'budgets.json');
    });
    after(async () => {
      await t?.cleanup();
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    it('applies the file with a receipt per change, again with none, and removes what it no longer lists (the API\'s and the setting\'s left alone)', async () => {
      const service = createBudgetService(t.db);
      await service.set(ADMIN, 'api-chat', { scope: 'chat', scopeId: 'c-api', tokens: 5000 }, 'api');
      // STEWARD_TOKEN_BUDGET's budget, made by a ledger
      const ledger = createBudgetLedger({ db: t.db, prices: createPriceTable(), installationTokens: { count: 1_000_000, windowMs: 86_400_000 } });
      await ledger.reserve({ key: 'file-step-1', model: 'openai:gpt-4.1-mini', inputTokens: 10, maxOutputTokens: 10, scopes: { chat: 'c-team' }, kind: 'chat' });
      const receiptsBefore = (await changes(t.db)).length;

      write({
        budgets: [
          { id: 'team', scope: 'chat', scopeId: 'c-team', tokens: 100_000, period: 'day', timezone: 'Europe/Berlin' },
          { id: 'everyone', scope: 'installation', money: 25, period: 'month' },
        ],
      });
      assert.deepEqual(await applyBudgetsFile(t.db, file), { created: ['team', 'everyone'], changed: [], removed: [], unchanged: [] });
      assert.deepEqual(await stored(), [
        { id: 'api-chat', source: 'api', tokens: 5000, micros: null, period: 'none', timezone: 'UTC' },
        { id: 'team', source: 'file', tokens: 100_000, micros: null, period: 'day', timezone: 'Europe/Berlin' },
        { id: ENV_BUDGET_ID, source: 'env', tokens: 1_000_000, micros: null, period: 'window', timezone: 'UTC' },
        { id: 'everyone', source: 'file', tokens: null, micros: 25_000_000, period: 'month', timezone: 'UTC' },
      ]);
      let made = (await changes(t.db)).slice(receiptsBefore);
      assert.deepEqual(
        made.map((c) => [c.actor, c.data.action, c.data.budget, c.data.before, c.data.after?.source, c.data.file]),
        [
          ['file', 'set', 'team', null, 'file', file],
          ['file', 'set', 'everyone', null, 'file', file],
        ],
      );
      assert.equal(made[1]!.data.after?.money, 25);

      // applied again (the next start, or a second process): nothing to change, nothing receipted
      assert.deepEqual(await applyBudgetsFile(t.db, file), { created: [], changed: [], removed: [], unchanged: ['team', 'everyone'] });
      assert.equal((await changes(t.db)).length, receiptsBefore + 2);

      // the ledger holds on the file's budgets like any other
      const ticket = await ledger.reserve({ key: 'file-step-2', model: 'openai:gpt-4.1-mini', inputTokens: 1000, maxOutputTokens: 500, scopes: { chat: 'c-team' }, kind: 'chat' });
      await ledger.settle(ticket, { inputTokens: 1000, outputTokens: 100 });
      assert.equal((await budgetUsage(t.db, (await listBudgets(t.db)).find((b) => b.id === 'team')!)).usedTokens, 1100);

      // the file changed: one budget changed, one no longer listed (removed with its usage)
      write({ budgets: [{ id: 'everyone', scope: 'installation', money: 40, period: 'month' }] });
      assert.deepEqual(await applyBudgetsFile(t.db, file), { created: [], changed: ['everyone'], removed: ['team'], unchanged: [] });
      assert.deepEqual(
        (await stored()).map((b) => [b.id, b.source, b.micros]),
        [
          ['api-chat', 'api', null],
          [ENV_BUDGET_ID, 'env', null],
          ['everyone', 'file', 40_000_000],
        ],
      );
      assert.equal(await t.db.budgetUsage.count({ where: { budgetId: 'team' } }), 0);
      made = (await changes(t.db)).slice(receiptsBefore + 2);
      assert.deepEqual(
        made.map((c) => [c.actor, c.data.action, c.data.budget, c.data.before?.money ?? c.data.before?.tokens, c.data.after?.money ?? null]),
        [
          ['file', 'set', 'everyone', 25, 40],
          ['file', 'remove', 'team', 100_000, null],
        ],
      );

      // a budget the file lists that the API defined becomes the file's (the receipt says whose it was)
      write({ budgets: [{ id: 'everyone', scope: 'installation', money: 40, period: 'month' }, { id: 'api-chat', scope: 'chat', scopeId: 'c-api', tokens: 7000 }] });
      assert.deepEqual(await applyBudgetsFile(t.db, file), { created: [], changed: ['api-chat'], removed: [], unchanged: ['everyone'] });
      const [takeover] = (await changes(t.db)).slice(-1);
      assert.deepEqual([takeover?.data.before?.source, takeover?.data.after?.source, takeover?.data.after?.tokens], ['api', 'file', 7000]);

      // the setting unset: the file's budgets go, the setting's stays
      assert.deepEqual(await applyBudgetsFile(t.db, undefined), { created: [], changed: [], removed: ['api-chat', 'everyone'], unchanged: [] });
      assert.deepEqual((await stored()).map((b) => b.id), [ENV_BUDGET_ID]);
      assert.deepEqual((await changes(t.db)).slice(-2).map((c) => [c.data.action, c.data.file]), [
        ['remove', null],
        ['remove', null],
      ]);
    });

    it('a bad file is refused whole, naming the field, and changes nothing', async () => {
      write({ budgets: [{ id: 'keep', scope: 'person', scopeId: 'p-1', tokens: 1000 }] });
      await applyBudgetsFile(t.db, file);
      const budgetsBefore = await listBudgets(t.db);
      const receiptsBefore = await changes(t.db);
      const good = { id: 'fine', scope: 'chat', scopeId: 'c-1', tokens: 10 };
      const bad: Array<[unknown, RegExp]> = [
        [{ budgets: [good, { id: 'tz', scope: 'chat', scopeId: 'c-2', tokens: 10, timezone: 'Mars/Olympus' }] }, /budgets\[1\] \(tz\)\.timezone: not an IANA time zone/],
        [{ budgets: [good, { id: 'neg', scope: 'chat', scopeId: 'c-2', tokens: -1 }] }, /budgets\[1\] \(neg\)\.tokens/],
        [{ budgets: [good, { id: 'who', scope: 'chat', tokens: 10 }] }, /budgets\[1\] \(who\)\.scopeId: a chat budget names its chat/],
        [{ budgets: [good, { ...good, tokens: 20 }] }, /budgets\[1\] \(fine\)\.id: fine is listed twice/],
        [{ budgets: [{ id: ENV_BUDGET_ID, scope: 'installation', tokens: 5 }] }, /budgets\[0\] \(env:STEWARD_TOKEN_BUDGET\)\.id: .*STEWARD_TOKEN_BUDGET setting's/],
        [{ budgets: [{ ...good, limit: 5 }] }, /budgets\[0\] \(fine\)/],
        [{ budget: [good] }, /\(the file\): Unrecognized key/],
        ['{"budgets": [', /not JSON/],
      ];
      for (const [content, named] of bad) {
        write(content);
        await assert.rejects(applyBudgetsFile(t.db, file), (err: unknown) => err instanceof BudgetsFileError && named.test(err.message) && /refused \(nothing changed\)/.test(err.message) && err.message.includes('STEWARD_BUDGETS_FILE'), JSON.stringify(content));
      }
      await assert.rejects(applyBudgetsFile(t.db, path.join(dir, 'missing.json')), (err: unknown) => err instanceof BudgetsFileError && /cannot be read \(nothing changed\)/.test(err.message));
      assert.deepEqual(await listBudgets(t.db), budgetsBefore, 'no budget changed');
      assert.deepEqual(await changes(t.db), receiptsBefore, 'nothing receipted');
      // the setting names an existing file, or the configuration is refused
      assert.throws(() => loadConfig({ DATABASE_URL: t.url, STEWARD_DATA_DIR: dir, STEWARD_BUDGETS_FILE: 'nope.json' }, dir), (err: unknown) => err instanceof ConfigError && /STEWARD_BUDGETS_FILE: no such file/.test(err.message));
      assert.equal(loadConfig({ DATABASE_URL: t.url, STEWARD_DATA_DIR: dir, STEWARD_BUDGETS_FILE: 'budgets.json' }, dir).governance.budgetsFile, file);
    });

    it('two processes applying the file at once change each budget once', async () => {
      write({ budgets: [{ id: 'both-a', scope: 'objective', scopeId: 'o-1', tokens: 300 }, { id: 'both-b', scope: 'workspace', scopeId: 'w-1', money: 1, period: 'week' }] });
      const receiptsBefore = (await changes(t.db)).length;
      // a second client: its own connection (pool), as a second process has
      const other = createDb(t.url);
      try {
        const outcomes = await Promise.all([applyBudgetsFile(t.db, file), applyBudgetsFile(other, file)]);
        assert.deepEqual(outcomes.flatMap((o) => o.created).sort(), ['both-a', 'both-b']);
      } finally {
        await other.$disconnect();
      }
      const made = (await changes(t.db)).slice(receiptsBefore);
      assert.deepEqual(made.map((c) => `${c.data.action} ${c.data.budget}`).sort(), ['remove keep', 'set both-a', 'set both-b']);
    });

    it("the service's change commits with its receipt; the list and the gauges read every budget's usage in one read", async () => {
      const service = createBudgetService(t.db);
      const receiptsBefore = (await changes(t.db)).length;
      const { created } = await service.set(ADMIN, 'svc-chat', { scope: 'chat', scopeId: 'c-svc', tokens: 9000, period: 'day' }, 'cli');
      assert.equal(created, true);
      await service.set(ADMIN, 'svc-chat', { scope: 'chat', scopeId: 'c-svc', tokens: 12_000, period: 'day' }, 'api');
      assert.equal((await service.remove(ADMIN, 'svc-chat'))?.tokens, 12_000);
      assert.equal(await service.remove(ADMIN, 'svc-chat'), undefined);
      assert.deepEqual(
        (await changes(t.db)).slice(receiptsBefore).map((c) => [c.actor, c.data.action, c.data.before?.tokens ?? null, c.data.after?.tokens ?? null, c.data.after?.source ?? null]),
        [
          [ADMIN.id, 'set', null, 9000, 'cli'],
          [ADMIN.id, 'set', 9000, 12_000, 'api'],
          [ADMIN.id, 'remove', 12_000, null, null],
        ],
      );
      // a bad field: refused before anything is written
      await assert.rejects(service.set(ADMIN, 'svc-bad', { scope: 'chat', scopeId: 'c', tokens: 0 }, 'api'), /tokens/);
      assert.equal((await changes(t.db)).length, receiptsBefore + 3);

      // usage in the current period, read once for all budgets: what budgetUsage reads for each
      await service.set(ADMIN, 'svc-used', { scope: 'workspace', scopeId: 'w-used', tokens: 50_000, period: 'day' }, 'api');
      const ledger = createBudgetLedger({ db: t.db, prices: createPriceTable() });
      const done = await ledger.reserve({ key: 'svc-step-1', model: 'openai:gpt-4.1-mini', inputTokens: 1000, maxOutputTokens: 500, scopes: { workspace: 'w-used' }, kind: 'embedding' });
      await ledger.settle(done, { inputTokens: 1000, outputTokens: 0 });
      await ledger.reserve({ key: 'svc-step-2', model: 'openai:gpt-4.1-mini', inputTokens: 1000, maxOutputTokens: 500, scopes: { workspace: 'w-used' }, kind: 'embedding' });
      const all = await budgetsWithUsage(t.db);
      assert.ok(all.length >= 3);
      for (const { budget, usage } of all) assert.deepEqual(usage, await budgetUsage(t.db, budget), budget.id);
      const used = all.find((x) => x.budget.id === 'svc-used')!.usage;
      assert.deepEqual([used.usedTokens, used.reservedTokens], [1000, 1500]);
      const listed = await service.list();
      assert.deepEqual(
        listed.map((b) => b.id),
        all.map((x) => x.budget.id),
      );
      assert.deepEqual(listed.find((b) => b.id === 'svc-used')?.usage.left.tokens, 50_000 - 2500);
      const gauges = await budgetStandings(t.db);
      assert.deepEqual(gauges.find((g) => g.budget === 'svc-used')?.used.tokens, 1000);
      assert.deepEqual(gauges.find((g) => g.budget === 'svc-used')?.reserved.tokens, 1500);
    });
  });
}
