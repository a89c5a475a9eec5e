/**
 * The budget ledger through a real kill -9 of the worker in the middle of a model step (issue
 * 34), on SQLite and PostgreSQL: a `steward worker` process (a prebuilt workflow bundle, the
 * test's Temporal dev server and database) reserves a turn's model step against an installation
 * budget and is killed (SIGKILL) while the scripted model holds its reply; a new worker process
 * retries the activity. What happens, exactly: the retried activity's reserve finds the
 * reservation by the step's key (`model:<turn>:<step>`, not settled) and holds nothing more; the
 * step is settled once, to the retry's reported usage. After the turn, a sweep run as of a
 * moment when every reservation of now has expired settles nothing: no reservation is left
 * held (no leak), the step is charged once (no double charge), and the budget's usage is
 * exactly the retry's usage.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { defineBudget } from '../../domain/budgets/definitions.js';
import { budgetUsage, createBudgetLedger, DEFAULT_RESERVATION_TTL_MS } from '../../domain/budgets/ledger.js';
import { createPriceTable } from '../../domain/budgets/prices.js';
import { createIngress } from '../../services/chat/intake.js';
import { testDatabases } from '../helpers/db.js';
import { spawnProcess, type Spawned } from '../helpers/process.js';
import { testBundle, useStack, waitFor } from '../helpers/steward.js';

/** The usage the scripted model reports for the retried call. */
const USAGE = { prompt_tokens: 321, completion_tokens: 45 };
const BUDGET_TOKENS = 1_000_000;

let dir: string;
let bundleFile: string;
before(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'steward-budgets-kill-'));
  // one bundle for every worker process of this file (the production path: STEWARD_WORKFLOW_BUNDLE)
  bundleFile = path.join(dir, 'workflow-bundle.js');
  writeFileSync(bundleFile, (await testBundle()).code);
});
after(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

for (const kind of testDatabases()) {
  describe(`the ledger through a kill -9 of the worker mid-step (${kind.name})`, () => {
    const stack = useStack(kind);
    const workers: Spawned[] = [];
    after(async () => {
      for (const w of workers) {
        w.kill('SIGKILL');
        await w.exited;
      }
    });

    it('the retried activity finds its reservation by key: settled once, to the retry\'s usage; the sweep finds nothing held', { timeout: 150_000 }, async () => {
      const budgetId = `kill-${kind.name}-${randomUUID().slice(0, 8)}`;
      // defined before the workers start: their ledger sees a budget at once
      const budget = await defineBudget(stack.db, { id: budgetId, scope: 'installation', tokens: BUDGET_TOKENS, period: 'day' });
      const taskQueue = `budgets-kill-${randomUUID()}`;
      const dataDir = mkdtempSync(path.join(dir, 'data-'));
      const base: NodeJS.ProcessEnv = { ...process.env };
      for (const k of Object.keys(base)) if (k === 'STEWARD_TOKEN_BUDGET' || k === 'DATABASE_URL' || k.startsWith('TEMPORAL_')) delete base[k];
      const workerEnv = {
        ...base,
        TEMPORAL_ADDRESS: stack.env.address,
        TEMPORAL_NAMESPACE: 'default',
        STEWARD_TASK_QUEUE: taskQueue,
        DATABASE_URL: stack.database.url,
        STEWARD_DATA_DIR: dataDir,
        STEWARD_WORKFLOW_BUNDLE: bundleFile,
        STEWARD_MODEL: 'openai-compatible:kill-model',
        STEWARD_MODEL_BASE_URL: stack.model.baseURL,
        STEWARD_LOG_LEVEL: 'warn',
      };
      const startWorker = async () => {
        const w = spawnProcess('./steward', ['worker'], workerEnv);
        workers.push(w);
        await w.waitForOutput(/Steward worker polling/, 120_000);
        return w;
      };
      const ingress = createIngress({
        client: stack.env.client,
        db: stack.db,
        taskQueue,
        defaultModel: 'openai-compatible:kill-model',
        configuredProviders: () => ['openai-compatible'],
        limits: { maxSteps: 4, maxTurnsPerRun: 100 },
      });
      const first = await startWorker();
      const calls = stack.model.requests.length;
      stack.model.enqueue({ text: 'lost with the worker', firstTokenDelayMs: 120_000, usage: { prompt_tokens: 9_999, completion_tokens: 9_999 } });
      stack.model.enqueue({ text: 'survived the kill', usage: USAGE });
      const chatId = `kill-${randomUUID().slice(0, 8)}`;
      const r = await ingress.handle({ id: randomUUID(), platform: 'http', account: 'default', chatId, user: 'u', text: 'spend once, even through a kill', at: new Date().toISOString() });
      await stack.model.waitForRequest(calls + 1, 60_000);

      // the step's reservation is held while the model holds its reply
      const rows = () => stack.db.budgetReservation.findMany({ where: { kind: 'chat' }, orderBy: { key: 'asc' } });
      const [held, ...others] = await rows();
      assert.ok(held, 'the step reserved before its call');
      assert.deepEqual(others, []);
      assert.match(held.key, /^model:.+:1$/);
      assert.equal(held.settledAt, null);
      const worstCase = Number(held.tokens);
      assert.ok(worstCase > 4096, `the worst case holds the output cap: ${worstCase}`);
      assert.deepEqual(await budgetUsage(stack.db, budget).then((u) => [u.usedTokens, u.reservedTokens]), [0, worstCase]);

      first.kill('SIGKILL');
      assert.equal((await first.exited).signal, 'SIGKILL');
      await stack.model.waitForAborted(1, 30_000);
      const second = await startWorker();

      const reply = await waitFor(async () => (await ingress.transcript(r.workflowId)).find((m) => m.role === 'assistant'), 'the reply from the new worker', 90_000);
      assert.equal(reply.text, 'survived the kill');
      assert.equal(stack.model.requests.length, calls + 2, 'the killed call and its retry');

      // the retry found the reservation by its key: one row, no `<key>#2`, settled to the retry's usage
      const used = USAGE.prompt_tokens + USAGE.completion_tokens;
      const after = await waitFor(async () => {
        const all = await rows();
        return all.every((x) => x.settledAt !== null) ? all : undefined;
      }, 'the settle', 10_000);
      assert.deepEqual(after.map((x) => [x.key, Number(x.tokens), x.settledTokens === null ? null : Number(x.settledTokens)]), [[held.key, worstCase, used]]);
      const receipts = async (k: string) => (await stack.db.receipt.findMany({ where: { kind: k } })).map((x) => JSON.parse(x.data) as { key: string; tokens: number; expired?: boolean });
      assert.deepEqual((await receipts('budget.reserved')).map((x) => x.key), [held.key], 'reserved once');
      assert.deepEqual((await receipts('budget.settled')).map((x) => [x.key, x.tokens, x.expired ?? false]), [[held.key, used, false]], 'settled once, to the usage');
      assert.deepEqual(await budgetUsage(stack.db, budget).then((u) => [u.usedTokens, u.reservedTokens]), [used, 0]);

      // the sweep, as of a moment when every reservation of now has expired: nothing is held, nothing changes
      const sweeper = createBudgetLedger({ db: stack.db, prices: createPriceTable(), now: () => Date.now() + DEFAULT_RESERVATION_TTL_MS + 60_000 });
      assert.equal(await sweeper.sweepExpired(), 0, 'no reservation was left held');
      assert.deepEqual(await budgetUsage(stack.db, budget).then((u) => [u.usedTokens, u.reservedTokens]), [used, 0], 'charged once');
      assert.equal(await stack.db.receipt.count({ where: { kind: 'budget.settled' } }), 1);

      second.kill('SIGTERM');
      assert.equal((await second.exited).code, 0, second.output().slice(-3000));
    });
  });
}
