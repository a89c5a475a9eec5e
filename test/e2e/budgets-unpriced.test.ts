/**
 * A model without a price counts tokens only (issue 34), on SQLite and PostgreSQL, through real
 * turns (the real worker, Temporal, the budget ledger as the started platform builds it, with an
 * operator price for the default model; the scripted model reporting fixed usage). The
 * installation's budget limits tokens (generously) and money (to a tenth of a cent):
 * - a bound group whose binding names a model without a price: its turn is answered; the call is
 *   reserved and settled in tokens only (no money held or used), so the money limit does not
 *   apply to it, while its tokens count against the budget;
 * - a group on the default model (priced): its turn does not fit the money limit and is refused
 *   before its call, naming the budget;
 * - `steward doctor`'s prices check names the model without a price: it is not the configured
 *   default, the ledger's reservations are where doctor finds it.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { loadConfig } from '../../config/index.js';
import { defineBudget } from '../../domain/budgets/definitions.js';
import { budgetUsage } from '../../domain/budgets/ledger.js';
import { bindChat, createIdentity } from '../../domain/governance.js';
import { createSpend } from '../../domain/limits.js';
import { modelPricesCheck, pricesCheck } from '../../platform/doctor.js';
import { testDatabases } from '../helpers/db.js';
import { recordingSender } from '../helpers/recording-sender.js';
import { useStack, withHarness } from '../helpers/steward.js';

const PRICED = 'openai-compatible:priced-model';
const MYSTERY = 'openai-compatible:mystery-model';
const USAGE = { prompt_tokens: 120, completion_tokens: 30 };

for (const kind of testDatabases()) {
  describe(`a model without a price counts tokens only (${kind.name})`, () => {
    const stack = useStack(kind);

    it('its turn is charged in tokens and the money limit does not hold it; a priced turn is held; doctor names the model', { timeout: 90_000 }, async () => {
      const sender = recordingSender();
      const budget = await defineBudget(stack.db, { id: `unpriced-${kind.name}`, scope: 'installation', tokens: 1_000_000, money: 0.001, period: 'day' });
      const spend = createSpend({ db: stack.db, budget: null, senders: { telegram: sender }, prices: { [PRICED]: { input: 2, output: 8 } } });
      stack.model.setDefault(() => ({ text: 'counted in tokens', usage: USAGE }));
      await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, model: PRICED, senders: { telegram: sender }, spend, budgetWaitMs: 0 }, async (h) => {
        const account = `bot${randomUUID().slice(0, 6)}`;
        const stamp = Date.now() % 1e9;
        const unpricedGroup = `-910${stamp}`;
        const pricedGroup = `-920${stamp}`;
        const userId = `84${stamp % 1e6}`;
        await createIdentity(stack.db, { name: 'Uma', role: 'member', accounts: [{ platform: 'telegram', userId }], createdBy: 'test' });
        await bindChat(stack.db, { platform: 'telegram', account, chatId: unpricedGroup, name: 'unpriced', model: MYSTERY, createdBy: 'test' });
        await bindChat(stack.db, { platform: 'telegram', account, chatId: pricedGroup, name: 'priced', createdBy: 'test' });
        const send = (chatId: string, text: string) => h.ingress.handle({ id: randomUUID(), platform: 'telegram', account, chatId, chatType: 'group', addressed: true, user: 'Uma', userId, text, at: new Date().toISOString() });

        // the model without a price: answered; reserved and settled in tokens only
        assert.equal((await send(unpricedGroup, 'what does this cost?')).kind, 'message');
        await sender.waitForPost((p) => p.chatId === unpricedGroup && p.text === 'counted in tokens', 30_000);
        assert.equal((stack.model.requests.at(-1)!.body as { model?: string }).model, 'mystery-model');
        const [r, ...more] = await stack.db.budgetReservation.findMany({ where: { kind: 'chat' } });
        assert.ok(r);
        assert.deepEqual(more, []);
        assert.equal(r.model, MYSTERY);
        assert.equal(r.micros, null, 'no money held');
        assert.ok(Number(r.tokens) > 4096, 'its worst case held in tokens');
        assert.deepEqual([Number(r.settledTokens), Number(r.settledMicros)], [USAGE.prompt_tokens + USAGE.completion_tokens, 0]);
        const u = await budgetUsage(stack.db, budget);
        assert.deepEqual([u.usedTokens, u.reservedTokens, u.usedMicros, u.reservedMicros], [USAGE.prompt_tokens + USAGE.completion_tokens, 0, 0, 0]);
        const data = async (k: string) => (await stack.db.receipt.findMany({ where: { kind: k } })).map((x) => JSON.parse(x.data) as Record<string, unknown>);
        const [reserved] = await data('budget.reserved');
        assert.equal(reserved?.model, MYSTERY);
        assert.equal('micros' in reserved!, false, 'receipted in tokens only');
        assert.deepEqual(spend.unpricedModels(), [MYSTERY]);

        // the default model has a price: its worst case is over a tenth of a cent, refused before its call
        const calls = stack.model.requests.length;
        assert.equal((await send(pricedGroup, 'and this one?')).kind, 'message');
        const notice = await sender.waitForPost((p) => p.chatId === pricedGroup && p.text.includes('Not called'), 30_000);
        // a refused turn that does not wait (budgetWaitMs 0) ends with the refusal: "No reply: the budget ... Not called: ..."
        assert.match(notice.text, new RegExp(`Not called: the budget of the installation, 1000000 tokens and \\$0\\.001 per day \\(UTC\\), has \\d+ tokens and \\$[0-9.]+ left, and a call to ${PRICED} may need \\d+ tokens \\(\\$[0-9.]+\\)`));
        assert.equal(stack.model.requests.length, calls, 'the priced turn called no model');

        // doctor: the default model is priced; the model the ledger saw without a price is named
        const dir = mkdtempSync(path.join(tmpdir(), 'steward-unpriced-'));
        try {
          const cfg = loadConfig({ DATABASE_URL: stack.database.url, STEWARD_DATA_DIR: dir, STEWARD_MODEL: PRICED, STEWARD_MODEL_BASE_URL: stack.model.baseURL, STEWARD_MODEL_PRICES: `${PRICED}=2/8` }, dir);
          assert.equal(pricesCheck(cfg).status, 'ok', 'the configured models alone are priced');
          const c = await modelPricesCheck(cfg, 5_000);
          assert.equal(c.status, 'warn');
          assert.equal(c.message, `No price for ${MYSTERY}: its calls count tokens only, and money budgets do not apply to them.`);
          assert.match(c.fix ?? '', new RegExp(`STEWARD_MODEL_PRICES \\(e\\.g\\. ${MYSTERY}=2/8`));
          // priced by the operator since: no longer named
          const priced = loadConfig({ DATABASE_URL: stack.database.url, STEWARD_DATA_DIR: dir, STEWARD_MODEL: PRICED, STEWARD_MODEL_BASE_URL: stack.model.baseURL, STEWARD_MODEL_PRICES: `${PRICED}=2/8,${MYSTERY}=0.1/0.2` }, dir);
          assert.equal((await modelPricesCheck(priced, 5_000)).status, 'ok');
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
      });
    });
  });
}
