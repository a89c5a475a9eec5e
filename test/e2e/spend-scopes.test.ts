/**
 * Every model call Steward makes asks the model budget first, with its step's key, its kind and
 * the scopes it is spent for (issue 34): a chat turn (the chat's binding, the requester set), an
 * objective's run (the objective, its chat), a triage classification (the group, the sender), a
 * repository change's intake, planner and built-in coding agent (the repository, the requester),
 * and embeddings (the workspace: a workspace's indexing activity, a grounded turn's query). The real worker, Temporal, database, git and bubblewrap, the
 * scripted model server; the budget is a recording ModelSpend (Steward's own interface, which
 * records each request and lets it through). A model step that fails after its reservation is
 * retried by Temporal and reserves under the same key. The installation budget
 * (STEWARD_TOKEN_BUDGET) keys its reservations: reserved again before its settle, a key is the
 * same reservation; settled twice, it is settled once. A call without a spend context while a
 * budget is set is refused before it reaches the model.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { bindChat, createIdentity, OPERATOR } from '../../domain/governance.js';
import { createEmbedder } from '../../domain/knowledge/embedder.js';
import { closeKnowledgeIndexes, knowledgeIndexOpener } from '../../domain/knowledge/open.js';
import { defineBudget, removeBudget } from '../../domain/budgets/definitions.js';
import { createSpend } from '../../domain/limits.js';
import {
  createModelRegistry,
  runModelStep,
  SpendContextMissingError,
  withSpend,
  withStepKey,
  type ModelSpend,
  type SpendRequest,
  type SpendTicket,
  type SpendUsage,
} from '../../domain/model.js';
import { changeModel, GREETING_DRAFT, offeredTools } from '../helpers/change-model.js';
import { createGitFixture } from '../helpers/git-fixture.js';
import { lastUserText, type RecordedRequest } from '../helpers/model-server.js';
import { objectiveRuns } from '../helpers/objective-runs.js';
import { recordingSender } from '../helpers/recording-sender.js';
import { needs } from '../helpers/requirements.js';
import { testDatabases } from '../helpers/db.js';
import { useStack, waitFor, withHarness } from '../helpers/steward.js';

/** A ModelSpend that records every request and settle, and lets every call through. */
function recordingSpend() {
  const reserved: SpendRequest[] = [];
  const settled: Array<{ key: string; usage: SpendUsage }> = [];
  const spend: ModelSpend = {
    async reserve(req): Promise<SpendTicket> {
      reserved.push(structuredClone(req));
      return { key: req.key };
    },
    async settle(ticket, usage) {
      settled.push({ key: ticket.key, usage: { ...usage } });
    },
  };
  return { spend, reserved, settled };
}

const OP = { id: OPERATOR.id, name: OPERATOR.name };
/** The repository change's coding agent and gate run under bubblewrap. */
const noSandbox = await needs('bubblewrap');

describe('every model call reserves with its key, kind and scopes', () => {
  const stack = useStack();

  it('chat turn (retried after its reservation), triage, objective run and repository change', { skip: noSandbox, timeout: 180_000 }, async () => {
    const rec = recordingSpend();
    const sender = recordingSender();
    const repoChange = changeModel({ intake: () => GREETING_DRAFT, agent: [{ name: 'write_file', args: { path: 'greeting.txt', content: 'Hello, Steward\n' } }] });
    let failedOnce = false;
    stack.model.setDefault((req: RecordedRequest) => {
      const body = JSON.stringify(req.body);
      const last = lastUserText(req.body);
      if (body.includes('Classify the message')) return { text: '{"class": "task", "priority": "p2"}', usage: { prompt_tokens: 70, completion_tokens: 9 } };
      const tools = offeredTools(req);
      if (tools.includes('submit_task_draft') || tools.includes('submit_plan') || tools.includes('write_file')) return repoChange(req);
      if (last.includes('spend probe') && !failedOnce) {
        // the first attempt of the turn's model step fails after its reservation: Temporal retries the activity
        failedOnce = true;
        return { status: 503 };
      }
      return { text: `noted: ${last.slice(0, 40)}`, usage: { prompt_tokens: 100, completion_tokens: 50 } };
    });
    const fx = createGitFixture({ 'greeting.txt': 'Hello\n', 'test.sh': '#!/bin/sh\ngrep -q "Hello, Steward" greeting.txt\n' }, { executable: ['test.sh'] });
    try {
      await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, senders: { telegram: sender }, spend: rec.spend }, async (h) => {
        const account = `bot${randomUUID().slice(0, 6)}`;
        const group = `-300${Date.now() % 1e9}`;
        const userId = `95${Date.now() % 1e6}`;
        const ivy = await createIdentity(stack.db, { name: 'Ivy', role: 'admin', accounts: [{ platform: 'telegram', userId }], createdBy: 'test' });
        const binding = await bindChat(stack.db, { platform: 'telegram', account, chatId: group, name: 'spenders', createdBy: 'test' });
        const send = (text: string, addressed: boolean) =>
          h.ingress.handle({ id: randomUUID(), platform: 'telegram', account, chatId: group, chatType: 'group', addressed, user: 'Ivy', userId, text, at: new Date().toISOString() });
        const ofKind = (kind: SpendRequest['kind']) => rec.reserved.filter((r) => r.kind === kind);

        // a chat turn: the chat's binding and the requester set; retried after its reservation, under the same key
        assert.equal((await send('spend probe: hello', true)).kind, 'message');
        await sender.waitForPost((p) => p.chatId === group && p.text.startsWith('noted: ') && p.text.includes('spend probe'), 60_000);
        const chat = ofKind('chat');
        assert.equal(chat.length, 2, `the step reserved once per attempt: ${JSON.stringify(chat)}`);
        assert.match(chat[0]!.key, /^model:.+:1$/);
        assert.equal(chat[1]!.key, chat[0]!.key, 'the retried activity reserves under the same key');
        assert.deepEqual(chat[0]!.scopes, { chat: binding.id, people: [ivy.id] });
        assert.equal(chat[0]!.model, 'openai-compatible:test-model');
        assert.equal(chat[0]!.maxOutputTokens, 4096);
        assert.ok(chat[0]!.inputTokens > 0);
        // the failed attempt settled at its prompt (a provider may bill it), the retry to the provider's usage
        assert.deepEqual(
          rec.settled.filter((s) => s.key === chat[0]!.key).map((s) => s.usage),
          [
            { inputTokens: chat[0]!.inputTokens, outputTokens: 0 },
            { inputTokens: 100, outputTokens: 50 },
          ],
        );

        // triage: the group's binding and the sender
        await h.tasks.setTriage(binding.id, { enabled: true }, OP);
        const t = await send('the build is broken again', false);
        assert.ok(t.triage && !t.triage.refused, JSON.stringify(t));
        await stack.env.client.workflow.getHandle(t.triage.workflowId).result();
        const triage = ofKind('triage');
        assert.equal(triage.length, 1);
        assert.match(triage[0]!.key, /^triage:/);
        assert.deepEqual(triage[0]!.scopes, { chat: binding.id, people: [ivy.id] });
        assert.equal(triage[0]!.maxOutputTokens, 300);
        assert.deepEqual(rec.settled.find((s) => s.key === triage[0]!.key)?.usage, { inputTokens: 70, outputTokens: 9 });

        // an objective's run: the objective and the chat it posts to
        const o = await h.objectives.create({ name: `spend-${randomBytes(3).toString('hex')}`, prompt: 'Count the open tasks', platform: 'telegram', account, chatId: group, schedule: { every: '1h' }, paused: true }, OP);
        await h.objectives.trigger(o.id, OP);
        const [run] = await objectiveRuns(() => stack.db).settled(o.id, 1, 60_000);
        assert.equal(run?.status, 'done', run?.error ?? '');
        const objective = ofKind('objective');
        assert.equal(objective.length, 1, JSON.stringify(objective));
        assert.equal(objective[0]!.key, `model:${run!.id}:turn:1`);
        assert.deepEqual(objective[0]!.scopes, { chat: binding.id, objective: o.id });

        // a repository change: intake, planner and the built-in coding agent, for the repository and its requester
        const name = `spend-${randomBytes(3).toString('hex')}`;
        await h.changes.registerRepo({ name, cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }] }, OP);
        const started = await h.changes.startChange({ repo: name, request: 'Make the greeting say Hello, Steward' }, { id: ivy.id, name: 'Ivy' });
        const c = await waitFor(async () => {
          const v = await h.changes.getChange(started.id);
          return v && v.status !== 'running' ? v : undefined;
        }, `change ${started.id}`, 90_000);
        assert.equal(c.status, 'done', `${c.phase}: ${c.error}`);
        const change = { repository: name, people: [ivy.id] };
        assert.deepEqual(ofKind('change-intake').map((r) => [r.key, r.scopes]), [[`change:${started.id}:intake:0`, change]]);
        assert.deepEqual(ofKind('change-plan').map((r) => [r.key, r.scopes]), [[`change:${started.id}:plan`, change]]);
        const agent = ofKind('coding-agent');
        assert.deepEqual(agent.map((r) => r.key), agent.map((_, i) => `change:${started.id}:agent:${i + 1}`));
        assert.ok(agent.length >= 2, 'the agent wrote and finished');
        for (const r of agent) assert.deepEqual(r.scopes, change);

        // every call made was reserved first: one reservation per model request
        const keys = new Set(rec.reserved.map((r) => r.key));
        assert.equal(keys.size, rec.reserved.length - 1, 'only the retried step reserved a key twice');
      });
    } finally {
      fx.cleanup();
    }
  });

  it('a workspace indexed and a turn grounded in it with embeddings on: the indexing activity and the query embedding reserve for the workspace, under their steps', { timeout: 120_000 }, async () => {
    const rec = recordingSpend();
    const dataDir = mkdtempSync(path.join(tmpdir(), 'steward-spend-ws-'));
    try {
      const model = 'openai-compatible:test-embed';
      const embedder = createEmbedder(createModelRegistry({ openaiCompatible: { baseURL: stack.model.baseURL } }).embeddingModel(model), model, { spend: rec.spend });
      const knowledge = knowledgeIndexOpener(stack.database.url, dataDir, { embedder });
      stack.model.setDefault(() => ({ text: 'Run the rollback job.', usage: { prompt_tokens: 40, completion_tokens: 5 } }));
      await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, workspaces: { dataDir, knowledge }, spend: rec.spend }, async (h) => {
        const name = `spend-${randomBytes(3).toString('hex')}`;
        await h.send(`/workspace create ${name}`);
        writeFileSync(path.join(dataDir, 'workspaces', name, 'guide.md'), '# Guide\n\n## Rollback\nTo roll back a release, run the rollback job, then restore the previous image tag.\n');
        await h.send('/workspace reindex');
        const indexing = await waitFor(() => rec.reserved.find((r) => r.kind === 'embedding' && r.key.startsWith('index:')), 'the indexing run\'s embeddings', 60_000);
        assert.deepEqual(indexing.scopes, { workspace: name });
        assert.match(indexing.key, /^index:.+:embed:[0-9a-f]{16}$/);
        await waitFor(async () => /indexing done/.test((await h.send('/workspace show')).reply ?? '') || undefined, 'the indexing run', 60_000);

        await h.send('how do I roll back?');
        await h.waitForMessage((m) => m.role === 'assistant' && m.text === 'Run the rollback job.', { timeoutMs: 30_000 });
        const step = rec.reserved.find((r) => r.kind === 'chat');
        assert.ok(step, JSON.stringify(rec.reserved));
        assert.equal(step.scopes.workspace, name, 'a turn in a chat with a workspace is spent for it');
        const query = rec.reserved.find((r) => r.kind === 'embedding' && r.key.startsWith(`${step.key}:embed:`));
        assert.ok(query, `the query embedding keyed under its step: ${JSON.stringify(rec.reserved.map((r) => r.key))}`);
        assert.deepEqual(query.scopes, { workspace: name });
        assert.ok(rec.settled.some((x) => x.key === query.key && x.usage.inputTokens > 0), 'settled to the endpoint\'s usage');
      });
    } finally {
      await closeKnowledgeIndexes();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('embeddings reserve for their workspace, keyed under their step; a call without a spend context is refused while a budget is set', async () => {
    const rec = recordingSpend();
    const registry = createModelRegistry({ openaiCompatible: { baseURL: stack.model.baseURL } });
    const embedder = createEmbedder(registry.embeddingModel('openai-compatible:test-embed'), 'openai-compatible:test-embed', { spend: rec.spend });
    const vectors = await embedder.embed(['alpha beta', 'gamma delta'], { spend: { key: 'index:wf:run:1', scopes: { workspace: 'docs' } } });
    assert.equal(vectors.length, 2);
    assert.equal(rec.reserved.length, 1);
    assert.equal(rec.reserved[0]!.kind, 'embedding');
    assert.match(rec.reserved[0]!.key, /^index:wf:run:1:embed:[0-9a-f]{16}$/);
    assert.deepEqual(rec.reserved[0]!.scopes, { workspace: 'docs' });
    assert.equal(rec.reserved[0]!.maxOutputTokens, 0);
    assert.equal(rec.settled[0]?.key, rec.reserved[0]!.key);
    assert.ok((rec.settled[0]?.usage.inputTokens ?? 0) > 0);
    // the same batch embedded again by a retry of its step: the same key
    await embedder.embed(['alpha beta', 'gamma delta'], { spend: { key: 'index:wf:run:1', scopes: { workspace: 'docs' } } });
    assert.equal(rec.reserved[1]!.key, rec.reserved[0]!.key);
    // a search's query: keyed under the step that searches
    await withStepKey('model:turn-x:2', () => embedder.embedQuery('where is the runbook', { workspace: 'docs' }));
    assert.match(rec.reserved[2]!.key, /^model:turn-x:2:embed:[0-9a-f]{16}$/);
    assert.deepEqual(rec.reserved[2]!.scopes, { workspace: 'docs' });
    // without a spend context: refused before the endpoint is asked
    const calls = stack.model.requests.length;
    await assert.rejects(embedder.embed(['no context']), SpendContextMissingError);
    const budgeted = withSpend(registry, rec.spend);
    await assert.rejects(runModelStep(budgeted, { model: 'openai-compatible:test-model', think: 'off', messages: [{ role: 'user', content: 'hi' }] }), SpendContextMissingError);
    assert.equal(stack.model.requests.length, calls, 'no call reached the model');
    assert.equal(rec.reserved.length, 3);
  });
});

for (const kind of testDatabases()) {
  describe(`the installation budget keyed by the request (${kind.name})`, () => {
    const stack = useStack(kind);

    it('the installation budget (STEWARD_TOKEN_BUDGET) keys its reservations: a retry before the settle is the same reservation, a second settle changes nothing', async () => {
      const spend = createSpend({ db: stack.db, budget: { count: 10_000, windowMs: 3_600_000 } });
      // the setting is the installation's budget in the ledger: what is used and held in its current window
      const spent = async () => {
        const u = await stack.db.budgetUsage.findFirst({ where: { budgetId: 'env:STEWARD_TOKEN_BUDGET' }, orderBy: { periodStart: 'desc' } });
        return u ? Number(u.usedTokens + u.reservedTokens) : 0;
      };
      const before = await spent();
      const req: SpendRequest = { key: `k-${randomUUID()}`, model: 'openai-compatible:test-model', inputTokens: 100, maxOutputTokens: 400, scopes: { chat: 'b1', people: ['p1'] }, kind: 'chat' };
      const ticket = await spend.reserve(req);
      assert.equal(await spent(), before + 500);
      // the worker died before the settle; the retry reserves under the same key: the same reservation
      assert.deepEqual(await spend.reserve(req), ticket);
      assert.equal(await spent(), before + 500);
      await spend.settle(ticket, { inputTokens: 120, outputTokens: 30 });
      assert.equal(await spent(), before + 150);
      await spend.settle(ticket, { inputTokens: 120, outputTokens: 30 });
      assert.equal(await spent(), before + 150, 'settled once');
      // the activity failed after its call and is retried: a call of its own, reserved again (under the key's next attempt)
      const retried = await spend.reserve(req);
      assert.equal(retried.key, `${req.key}#2`);
      assert.equal(await spent(), before + 650);
      await spend.settle(retried, { inputTokens: 10, outputTokens: 10 });
      assert.equal(await spent(), before + 170);
      // the same key reserved five times at once: one reservation
      const same = { ...req, key: `k-${randomUUID()}` };
      await Promise.all([1, 2, 3, 4, 5].map(() => spend.reserve(same)));
      assert.equal(await spent(), before + 670);
      await spend.settle({ key: same.key }, { inputTokens: 0, outputTokens: 0 });
      assert.equal(await spent(), before + 170);
    });

    it('a budget defined in the database holds the turns without STEWARD_TOKEN_BUDGET: the turn ends naming it, no model is called; without any budget nothing is reserved', async () => {
      // the ledger as the started platform builds it: on, with no setting
      const ledger = createSpend({ db: stack.db, budget: null });
      const id = `test-installation-${randomUUID().slice(0, 8)}`;
      await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, spend: ledger, budgetWaitMs: 0 }, async (h) => {
        // no budget exists: the call is made and nothing is reserved
        assert.equal(await ledger.applies?.(), false);
        const held = await stack.db.budgetReservation.count();
        await h.send('a question before any budget');
        await h.waitForMessage((m) => m.role === 'assistant', { timeoutMs: 30_000 });
        assert.equal(await stack.db.budgetReservation.count(), held, 'no budget, no reservation');
        await defineBudget(stack.db, { id, scope: 'installation', tokens: 100, period: 'day' });
        assert.equal(await createSpend({ db: stack.db, budget: null }).applies?.(), true);
        // the harness's ledger reads whether a budget exists at most every 5 s
        await new Promise((r) => setTimeout(r, 5_100));
        const calls = stack.model.requests.length;
        await h.send('a question over the budget');
        const notice = await h.waitForMessage((m) => m.role === 'system' && m.text.includes('Not called'), { timeoutMs: 30_000 });
        assert.match(notice.text, /Not called: the budget of the installation, 100 tokens per day \(UTC\), has \d+ tokens left/);
        assert.equal(stack.model.requests.length, calls, 'the refused turn called no model');
      });
      await removeBudget(stack.db, id);
    });
  });
}
