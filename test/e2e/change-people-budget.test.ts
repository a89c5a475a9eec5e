/**
 * A repository change's model calls are spent for the people who shaped it (issue 34): its
 * requester, whoever answered its clarifying question, whoever steered its coding agent. On
 * SQLite and PostgreSQL, with the real worker, Temporal, git, bubblewrap, the budget ledger and
 * the scripted model: a person budget that no call fits in, on the answerer, refuses the change's
 * next intake; on a steerer, it refuses the coding agent's next step. Neither reaches the model,
 * and the refusal names the person's budget.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, it } from 'node:test';
import { defineBudget, removeBudget } from '../../domain/budgets/definitions.js';
import type { Db } from '../../domain/db.js';
import { createIdentity, OPERATOR } from '../../domain/governance.js';
import { createSpend } from '../../domain/limits.js';
import type { ChangeView } from '../../services/changes.js';
import { changeModel, GREETING_DRAFT, offeredTools } from '../helpers/change-model.js';
import { createGitFixture } from '../helpers/git-fixture.js';
import { testDatabases } from '../helpers/db.js';
import type { RecordedRequest } from '../helpers/model-server.js';
import { needs } from '../helpers/requirements.js';
import { useStack, waitFor, withHarness, type Harness } from '../helpers/steward.js';

const OP = { id: OPERATOR.id, name: OPERATOR.name };
const tag = () => randomBytes(3).toString('hex');
const SEED = { 'greeting.txt': 'Hello\n', 'test.sh': '#!/bin/sh\ngrep -q "Hello, Steward" greeting.txt\n' };

const changeOf = (h: Harness, id: string, pred: (c: ChangeView) => boolean = (c) => c.status !== 'running') =>
  waitFor(async () => {
    const c = await h.changes.getChange(id);
    return c && pred(c) ? c : undefined;
  }, `change ${id}`, 90_000);

/** The `limit.refused` receipts of a person's budget. */
async function refusalsOf(db: Db, person: string): Promise<Array<{ budget: string; scope: string; scopeId: string; kind: string }>> {
  const rows = await db.receipt.findMany({ where: { kind: 'limit.refused' }, orderBy: { id: 'asc' } });
  return rows.map((r) => JSON.parse(r.data) as { budget: string; scope: string; scopeId: string; kind: string }).filter((d) => d.scope === 'person' && d.scopeId === person);
}

for (const kind of testDatabases()) {
  describe(`a repository change is spent for the people who shaped it (${kind.name})`, { skip: await needs('bubblewrap') }, () => {
    const stack = useStack(kind);

    it('a budget on the person who answered its question refuses its next intake; a budget on a steerer refuses the coding agent\'s next step', { timeout: 240_000 }, async () => {
      const fx = createGitFixture(SEED, { executable: ['test.sh'] });
      const budgets: string[] = [];
      try {
        const ada = await createIdentity(stack.db, { name: `Ada-${tag()}`, role: 'admin', accounts: [], createdBy: 'test' });
        const bob = await createIdentity(stack.db, { name: `Bob-${tag()}`, role: 'member', accounts: [], createdBy: 'test' });
        const carol = await createIdentity(stack.db, { name: `Carol-${tag()}`, role: 'member', accounts: [], createdBy: 'test' });
        // 100 tokens a day: no call fits (its output cap alone is larger); the requester has no budget
        for (const p of [bob, carol]) {
          const id = `person-${p.id.slice(0, 8)}`;
          await defineBudget(stack.db, { id, scope: 'person', scopeId: p.id, tokens: 100, period: 'day' });
          budgets.push(id);
        }
        const name = `people-${tag()}`;
        let agentSteps = 0;
        const intakes: string[] = [];
        const script = changeModel({
          intake: (req, round) => {
            intakes.push(JSON.stringify(req.body));
            // the first draft names no scope: one clarifying question
            return round === 0 ? { ...GREETING_DRAFT, scope: [], open_questions: [] } : GREETING_DRAFT;
          },
          agent: [{ name: 'write_file', args: { path: 'greeting.txt', content: 'Hello, Steward\n' } }],
        });
        stack.model.setDefault((req: RecordedRequest) => {
          const reply = script(req);
          // the agent's first step is slow: the steering arrives while it runs
          if (offeredTools(req).includes('write_file') && ++agentSteps === 1) return { ...reply, firstTokenDelayMs: 2500 };
          return reply;
        });
        const ledger = createSpend({ db: stack.db, budget: null });
        await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, spend: ledger }, async (h) => {
          await h.changes.registerRepo({ name, cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }] }, OP);

          // the answerer: Ada asks, Bob answers; the intake after his answer is spent for him too
          const asked = await h.changes.startChange({ repo: name, request: 'Fix the greeting' }, { id: ada.id, name: 'Ada' });
          await changeOf(h, asked.id, (c) => c.phase === 'clarify' || c.status !== 'running');
          assert.equal(intakes.length, 1, 'the first intake, for Ada and the repository, was called');
          await h.changes.answer(asked.id, { text: 'only greeting.txt' }, { id: bob.id, name: 'Bob' });
          const answered = await changeOf(h, asked.id);
          assert.equal(answered.status, 'failed', `${answered.phase}: ${answered.error}`);
          assert.match(answered.error ?? '', new RegExp(`Not called: the budget of person ${bob.id}`));
          assert.equal(intakes.length, 1, 'the refused intake reached no model');
          assert.deepEqual(
            (await refusalsOf(stack.db, bob.id)).map((d) => [d.budget, d.kind]),
            [[budgets[0], 'change-intake']],
          );

          // the steerer: a change asked in the chat, Carol steers its coding agent; its next step is spent for her too
          const r = await h.send(`/change ${name} Make the greeting say Hello, Steward`);
          const id = /Change (chg-[a-f0-9]{12}) started/.exec(r.reply ?? '')?.[1];
          assert.ok(id, r.reply);
          await changeOf(h, id, (c) => c.phase === 'work' || c.status !== 'running');
          await waitFor(() => (agentSteps >= 1 ? true : undefined), 'the first agent step');
          const steered = await h.changes.steerInChat({ platform: 'http', account: h.account, chatId: h.chatId }, 'keep the trailing newline', { id: carol.id, name: 'Carol' });
          assert.match(steered ?? '', new RegExp(`Steering noted for change ${id}`));
          const c = await changeOf(h, id);
          assert.equal(c.status, 'failed', `${c.phase}: ${c.error}`);
          assert.equal(c.phase, 'work');
          assert.match(c.error ?? '', new RegExp(`Not called: the budget of person ${carol.id}`));
          assert.equal(agentSteps, 1, 'the step after the steering reached no model');
          assert.deepEqual(
            (await refusalsOf(stack.db, carol.id)).map((d) => [d.budget, d.kind]),
            [[budgets[1], 'coding-agent']],
          );
          const steer = await stack.db.changeSteer.findFirstOrThrow({ where: { changeId: id } });
          assert.deepEqual([steer.by, steer.byId], ['Carol', carol.id]);
        });
      } finally {
        for (const b of budgets) await removeBudget(stack.db, b);
        fx.cleanup();
      }
    });
  });
}
