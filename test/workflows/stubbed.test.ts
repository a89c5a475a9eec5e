/**
 * Workflow logic alone, the way Temporal's own samples test it: Steward's real workflow bundle
 * on the time-skipping test server, its activities replaced by stubs that record each call and
 * answer as the test says. The turn (steps, tools, approvals, steering, the budget, a failing
 * model), the repo change (clarify, gate, approval, promotion, refusals) and the objective run
 * (skip, a turn as its child, a failed turn). The end-to-end suites beside these run the same
 * workflows on the real activities, database and model double.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { activityInfo } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { WorkflowFailedError, type WorkflowUpdateFailedError } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import proto from '@temporalio/proto';
import type { ModelStepResult } from '../../activities/index.js';
import { WORK_OWN_ERROR_ATTEMPTS, workErrorOf } from '../../activities/changes.js';
import type { GateVerdict } from '../../common/changes.js';
import { approvalDecisionUpdate, changeAnswerUpdate, changeStatusQuery, changeSteerSignal, turnSteerSignal, turnStatusQuery } from '../../workflows/messages.js';
import { objectiveRunWorkflow } from '../../workflows/objectives/objective.js';
import { repoChangeWorkflow } from '../../workflows/changes/repo-change.js';
import { ALL_SEARCH_ATTRIBUTES } from '../../workflows/search-attributes.js';
import { turnWorkflow } from '../../workflows/chat/turn.js';
import type { TurnInput } from '../../workflows/types.js';
import { createTimeSkippingEnvironment } from '../helpers/temporal.js';
import { reply, until, USAGE, withStubbedWorker, type Call, type Stubs } from './stubbed-worker.js';


const { IndexedValueType } = proto.temporal.api.enums.v1;
const indexed = (type: string) => (type === 'KEYWORD_LIST' ? IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST : IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD);

const toolStep = (calls: Array<{ id: string; name: string; needsApproval?: boolean; error?: string }>): ModelStepResult => ({
  kind: 'output',
  outputHash: 'h-empty',
  finishReason: 'tool-calls',
  usage: USAGE,
  chars: 0,
  messageHash: `h-msg-${calls.map((c) => c.id).join('-')}`,
  toolCalls: calls.map((c) => ({ id: c.id, name: c.name, needsApproval: c.needsApproval ?? false, ...(c.error ? { error: c.error } : {}) })),
});

describe('workflows with stubbed activities (time-skipping server)', () => {
  let env: TestWorkflowEnvironment;

  before(async () => {
    env = await createTimeSkippingEnvironment();
    // the search attributes the workflows set (the repo change its gate verdict, a child turn its chat)
    await env.connection.operatorService.addSearchAttributes({
      namespace: env.namespace ?? 'default',
      searchAttributes: Object.fromEntries(ALL_SEARCH_ATTRIBUTES.map((a) => [a.name, indexed(a.type)])),
    });
  });
  after(async () => {
    await env?.teardown();
  });

  /** Run `body` with a worker on a fresh queue whose activities are `stubs` (each call recorded, in order). */
  const withWorker = (stubs: Stubs, body: (ctx: { taskQueue: string; calls: Call[] }) => Promise<void>) => withStubbedWorker(env, stubs, { queuePrefix: 'stubbed' }, body);

  const names = (calls: Call[]) => calls.map((c) => c.name);

  describe('the turn', () => {
    const turnInput = (over: Partial<TurnInput> = {}): TurnInput => {
      const sessionId = `session-${randomUUID().slice(0, 8)}`;
      return {
        sessionId,
        turnId: `${sessionId}:turn:1`,
        conversation: { platform: 'http', account: 'default', chatId: 'c1' },
        inbound: [{ key: 'in-1', user: 'pat', identityId: 'id-pat', at: '2026-11-25T10:00:00.000Z' }],
        workingSet: { notes: [], recentTurns: [] },
        settings: { model: 'openai-compatible:stub', think: 'off' },
        steers: [],
        maxSteps: 4,
        ...over,
      };
    };
    const delivered = { sent: true, messageSeq: 1 };

    it('replies after one model step: the reply is delivered under the turn’s key, with the panel shown and cleared', async () => {
      await withWorker(
        {
          modelStep: async () => reply('h-reply'),
          deliver: async () => delivered,
          updateProgress: async () => 'ok',
          clearProgress: async () => 'ok',
        },
        async ({ taskQueue, calls }) => {
          const input = turnInput({ progress: true });
          const r = await env.client.workflow.execute(turnWorkflow, { taskQueue, workflowId: input.turnId, args: [input] });
          assert.equal(r.outcome, 'replied');
          assert.deepEqual(r.usage, USAGE);
          assert.deepEqual(names(calls), ['updateProgress', 'modelStep', 'deliver', 'clearProgress']);
          const deliver = calls.find((c) => c.name === 'deliver')!.input;
          assert.equal(deliver.kind, 'reply');
          assert.equal(deliver.blobHash, 'h-reply');
          assert.equal(deliver.key, r.replyKey);
          assert.equal(calls[1]!.input.step, 1);
        },
      );
    });

    it('runs the tools the model calls, after an admin’s approval where policy asks, and refuses an invalid call', async () => {
      let step = 0;
      await withWorker(
        {
          modelStep: async () => (++step === 1 ? toolStep([{ id: 'a', name: 'post_to_chat', needsApproval: true }, { id: 'b', name: 'nope', error: 'unknown tool nope' }]) : reply('h-final')),
          requestApproval: async (i) => ({ approvalId: `ap-${i.toolCallId}`, timeoutMs: 3_600_000, summary: 'post to a chat', forbidSelfApproval: true }),
          settleApproval: async (i) => ({ reason: `${i.decision} by ${i.byName}` }),
          runTool: async (i) => ({ resultHash: `h-result-${i.toolCallId}`, ok: i.refused === undefined }),
          deliver: async () => delivered,
        },
        async ({ taskQueue, calls }) => {
          const input = turnInput();
          const h = await env.client.workflow.start(turnWorkflow, { taskQueue, workflowId: input.turnId, args: [input] });
          await until('the approval wait', async () => (await h.query(turnStatusQuery)).phase === 'approval');
          const approvalId = (await h.query(turnStatusQuery)).approvalId!;
          // the person whose message led to the call may not approve it
          await assert.rejects(h.executeUpdate(approvalDecisionUpdate, { args: [{ approvalId, decision: 'approve', by: 'id-pat', byName: 'Pat' }] }), (err: Error) =>
            /may not approve it \(policy STEWARD_FORBID_SELF_APPROVAL\)/.test(String((err as WorkflowUpdateFailedError).cause?.message)),
          );
          await h.executeUpdate(approvalDecisionUpdate, { args: [{ approvalId, decision: 'approve', by: 'id-ada', byName: 'Ada' }] });
          const r = await h.result();
          assert.equal(r.outcome, 'replied');
          assert.deepEqual(names(calls), ['modelStep', 'requestApproval', 'settleApproval', 'runTool', 'runTool', 'modelStep', 'deliver']);
          const [runA, runB] = calls.filter((c) => c.name === 'runTool').map((c) => c.input);
          assert.equal(runA!.refused, undefined, 'the approved call runs');
          assert.equal(runB!.refused, 'unknown tool nope', 'the invalid call goes back to the model as refused');
          assert.deepEqual(calls[5]!.input.scratch, [
            { kind: 'assistant', hash: 'h-msg-a-b' },
            { kind: 'tool', hash: 'h-result-a' },
            { kind: 'tool', hash: 'h-result-b' },
          ]);
          assert.equal(calls.find((c) => c.name === 'settleApproval')!.input.decision, 'approved');
        },
      );
    });

    it('the requester set: every sender of the batch and every steerer is refused as approver, and goes to the activities; a third admin approves', async () => {
      let step = 0;
      await withWorker(
        {
          modelStep: async () => (++step === 1 ? toolStep([{ id: 'a', name: 'post_to_chat', needsApproval: true }]) : reply('h-final')),
          requestApproval: async (i) => ({ approvalId: `ap-${i.toolCallId}`, timeoutMs: 3_600_000, summary: 'post to a chat', forbidSelfApproval: true }),
          settleApproval: async (i) => ({ reason: `${i.decision} by ${i.byName}` }),
          runTool: async (i) => ({ resultHash: `h-result-${i.toolCallId}`, ok: i.refused === undefined }),
          deliver: async () => delivered,
        },
        async ({ taskQueue, calls }) => {
          // Ada (an admin) asked; Pat's "thanks" came last in the same batch
          const input = turnInput({
            inbound: [
              { key: 'in-1', user: 'ada', identityId: 'id-ada', at: '2026-11-25T10:00:00.000Z' },
              { key: 'in-2', user: 'pat', identityId: 'id-pat', at: '2026-11-25T10:00:01.000Z' },
            ],
            steers: [{ text: 'use the ops chat', by: 'Bo', byId: 'id-bo' }],
          });
          const h = await env.client.workflow.start(turnWorkflow, { taskQueue, workflowId: input.turnId, args: [input] });
          await until('the approval wait', async () => (await h.query(turnStatusQuery)).phase === 'approval');
          const approvalId = (await h.query(turnStatusQuery)).approvalId!;
          // Dee steers while it waits: Dee shaped it too
          await h.signal(turnSteerSignal, { text: 'and be brief', by: 'Dee', byId: 'id-dee' });
          const refused = (by: string) =>
            assert.rejects(h.executeUpdate(approvalDecisionUpdate, { args: [{ approvalId, decision: 'approve', by, byName: by }] }), (err: Error) =>
              /you shaped the turn that proposed this \(a message in its batch, or steering\), so you may not approve it/.test(String((err as WorkflowUpdateFailedError).cause?.message)),
            );
          for (const by of ['id-ada', 'id-pat', 'id-bo', 'id-dee']) await refused(by);
          await h.executeUpdate(approvalDecisionUpdate, { args: [{ approvalId, decision: 'approve', by: 'id-cy', byName: 'Cy' }] });
          assert.equal((await h.result()).outcome, 'replied');
          const input1 = calls.find((c) => c.name === 'modelStep')!.input;
          assert.deepEqual(input1.requesters, ['id-ada', 'id-pat', 'id-bo'], 'the model step knows who shaped the turn (MCP approval by role)');
          const ask = calls.find((c) => c.name === 'requestApproval')!.input;
          assert.deepEqual([ask.requestedBy, ask.requesters], ['id-pat', ['id-ada', 'id-pat', 'id-bo']]);
          const run = calls.find((c) => c.name === 'runTool')!.input;
          assert.deepEqual(run.requesters, ['id-ada', 'id-pat', 'id-bo', 'id-dee'], 'a memory or a change it starts carries the steerer too');
        },
      );
    });

    it('takes steering that arrives during a step in before the reply goes out', async () => {
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      let step = 0;
      await withWorker(
        {
          modelStep: async () => {
            if (++step === 1) await gate;
            return reply(`h-step-${step}`);
          },
          deliver: async () => delivered,
        },
        async ({ taskQueue, calls }) => {
          const input = turnInput();
          const h = await env.client.workflow.start(turnWorkflow, { taskQueue, workflowId: input.turnId, args: [input] });
          await until('the first step', () => calls.length === 1);
          await h.signal(turnSteerSignal, { text: 'shorter, please', by: 'pat' });
          // the signal is in history before the step completes
          await until('the steer in history', async () => ((await h.fetchHistory()).events ?? []).some((e) => e.workflowExecutionSignaledEventAttributes));
          release();
          const r = await h.result();
          assert.equal(r.outcome, 'replied');
          assert.deepEqual(names(calls), ['modelStep', 'modelStep', 'deliver']);
          assert.deepEqual(calls[1]!.input.steers, ['shorter, please']);
          assert.equal(calls[1]!.input.draftHash, 'h-step-1', 'the second step sees the first one’s draft');
          assert.equal(calls[2]!.input.blobHash, 'h-step-2');
        },
      );
    });

    it('ends at its step budget with a notice, and turns a non-retryable model failure into a notice', async () => {
      await withWorker(
        {
          modelStep: async () => toolStep([{ id: randomUUID().slice(0, 4), name: 'search' }]),
          runTool: async () => ({ resultHash: 'h-r', ok: true }),
          deliver: async () => delivered,
        },
        async ({ taskQueue, calls }) => {
          const input = turnInput({ maxSteps: 3 });
          const r = await env.client.workflow.execute(turnWorkflow, { taskQueue, workflowId: input.turnId, args: [input] });
          assert.equal(r.outcome, 'budget-exhausted');
          assert.equal(calls.filter((c) => c.name === 'modelStep').length, 3);
          const notice = calls.find((c) => c.name === 'deliver')!.input;
          assert.equal(notice.kind, 'notice');
          assert.match(String(notice.text), /budget of 3 model steps/);
        },
      );
      await withWorker(
        {
          modelStep: async () => {
            throw ApplicationFailure.create({ type: 'ModelAuth', message: 'the provider refused the key', nonRetryable: true });
          },
          deliver: async () => delivered,
        },
        async ({ taskQueue, calls }) => {
          const input = turnInput();
          const r = await env.client.workflow.execute(turnWorkflow, { taskQueue, workflowId: input.turnId, args: [input] });
          assert.equal(r.outcome, 'failed');
          assert.deepEqual(names(calls), ['modelStep', 'deliver'], 'tried once: not retried');
          assert.match(String(calls[1]!.input.text), /The model call failed: the provider refused the key/);
        },
      );
    });

    it('a step refused by a budget in a turn that does not wait (an objective’s run): ends budget-refused with the budget, what is left and when it renews; not retried', async () => {
      const message = 'Not called: the budget of objective o-1, 100 tokens per day (UTC), has 0 tokens left, and a call to openai-compatible:stub may need 4500 tokens: no model is called for it until 2026-11-29 00:00 UTC.';
      await withWorker(
        {
          modelStep: async () => {
            throw ApplicationFailure.create({ type: 'ModelBudgetExceeded', message, nonRetryable: true, details: [{ budget: 'b-objective', scope: 'objective', id: 'o-1', period: 'day', left: { tokens: 0 }, renewsAt: '2026-11-29T00:00:00.000Z' }] });
          },
          deliver: async () => delivered,
        },
        async ({ taskQueue, calls }) => {
          const input = turnInput();
          const r = await env.client.workflow.execute(turnWorkflow, { taskQueue, workflowId: input.turnId, args: [input] });
          assert.equal(r.outcome, 'budget-refused');
          assert.deepEqual(names(calls), ['modelStep', 'deliver'], 'tried once, no wait');
          assert.equal(calls[1]!.input.text, `No reply: the budget b-objective refused this turn's model call. ${message}`);
          assert.equal(calls[1]!.input.outcome, 'budget-refused');
        },
      );
    });
  });

  describe('the repo change', () => {
    const changeInput = (over: Record<string, unknown> = {}) => ({
      changeId: `ch-${randomUUID().slice(0, 8)}`,
      repo: 'demo',
      requestedBy: { id: 'id-pat', name: 'Pat' },
      clarifyTimeoutMs: 24 * 3_600_000,
      maxQuestions: 2,
      ...over,
    });
    const verdict = (over: Partial<GateVerdict> = {}): GateVerdict => ({
      verdict: 'pass',
      reasons: [],
      baseSha: 'base1',
      patchHash: 'h-patch',
      stats: { files: 1, additions: 2, deletions: 0 },
      violations: [],
      checks: [],
      promotion: 'patch',
      forbidSelfApproval: true,
      approvalTimeoutMs: 3_600_000,
      at: '2026-11-25T10:00:00.000Z',
      ...over,
    });
    const common = (v: GateVerdict, intake: Stubs['changeIntake'] = async () => ({ status: 'planned', plannable: true })): Stubs => ({
      changeIntake: intake,
      changeAsk: async () => undefined,
      changeNote: async () => undefined,
      changePlan: async () => ({ planHash: 'h-plan', details: 'the plan' }),
      changeWork: async () => ({ baseSha: 'base1', patchHash: 'h-patch', files: 1, blocked: 0, summary: 'edited one file', transcriptHash: 'h-t' }),
      changeValidate: async () => v,
      changeRequestApproval: async (i) => ({ approvalId: i.approvalId, timeoutMs: i.timeoutMs }),
      settleApproval: async (i) => ({ reason: `${i.decision} by ${i.byName}` }),
      changePromote: async (i) => ({ kind: 'promoted', result: { kind: 'patch', patchHash: i.patchHash, patchPath: `/api/v1/changes/${i.changeId}/patch`, baseSha: i.baseSha } }),
      changeFinish: async () => undefined,
    });

    it('goes intake, plan, work, gate, promotion to a patch, and records the outcome', async () => {
      await withWorker(common(verdict()), async ({ taskQueue, calls }) => {
        const input = changeInput();
        const r = await env.client.workflow.execute(repoChangeWorkflow, { taskQueue, workflowId: input.changeId, args: [input] });
        assert.deepEqual(r, { status: 'done', phase: 'done', patchHash: 'h-patch' });
        assert.deepEqual(names(calls), ['changeIntake', 'changePlan', 'changeWork', 'changeValidate', 'changePromote', 'changeFinish']);
        assert.deepEqual(calls.at(-1)!.input, { changeId: input.changeId, status: 'done', phase: 'done' });
      });
    });

    it("runs the work again after lost attempts, up to five in all; the work's own error is final from its second attempt", async () => {
      // a lost attempt (the worker died, its heartbeats stopped) reaches the retry policy as a
      // retryable failure: the stub's retryable failures on attempts 1-3 stand for three losses
      const stubs = common(verdict());
      stubs.changeWork = async () => {
        const attempt = activityInfo().attempt;
        if (attempt < 4) throw ApplicationFailure.create({ type: 'WorkerLost', message: `attempt ${attempt} lost` });
        return { baseSha: 'base1', patchHash: 'h-patch', files: 1, blocked: 0, summary: 'edited one file', transcriptHash: 'h-t' };
      };
      await withWorker(stubs, async ({ taskQueue, calls }) => {
        const input = changeInput();
        const r = await env.client.workflow.execute(repoChangeWorkflow, { taskQueue, workflowId: input.changeId, args: [input] });
        assert.deepEqual(r, { status: 'done', phase: 'done', patchHash: 'h-patch' });
        assert.equal(names(calls).filter((n) => n === 'changeWork').length, 4, 'three lost attempts, then the one that finished');
      });

      // what the activity throws: its own error is retried after the first attempt only; a cancellation stays one
      const plain = new Error('the clone failed');
      assert.equal(workErrorOf(plain, 1, false), plain, 'the first attempt: retried as it is');
      const final = workErrorOf(plain, 2, false);
      assert.ok(final instanceof ApplicationFailure && final.nonRetryable, 'the second: final');
      assert.equal(final.message, 'the clone failed');
      assert.equal(final.type, 'Error');
      const typed = workErrorOf(ApplicationFailure.create({ type: 'ModelUnavailable', message: 'busy' }), 3, false);
      assert.ok(typed instanceof ApplicationFailure && typed.nonRetryable && typed.type === 'ModelUnavailable' && typed.message === 'busy');
      const already = ApplicationFailure.create({ type: 'ChangeRefused', message: 'no', nonRetryable: true });
      assert.equal(workErrorOf(already, 2, false), already);
      assert.equal(workErrorOf(plain, 5, true), plain, 'a cancellation as it is');
      assert.equal(WORK_OWN_ERROR_ATTEMPTS, 2);
    });

    it('asks a clarifying question and continues with the answer; with no answer before the deadline it fails', async () => {
      let round = 0;
      await withWorker(
        common(verdict(), async () => (++round === 1 ? { status: 'needs_clarification', question: 'Which file?', plannable: false } : { status: 'planned', plannable: true })),
        async ({ taskQueue, calls }) => {
          const input = changeInput();
          const h = await env.client.workflow.start(repoChangeWorkflow, { taskQueue, workflowId: input.changeId, args: [input] });
          await until('the question', async () => (await h.query(changeStatusQuery)).question === 'Which file?');
          await h.executeUpdate(changeAnswerUpdate, { args: [{ text: 'README.md', by: 'id-pat', byName: 'Pat' }] });
          assert.equal((await h.result()).status, 'done');
          assert.deepEqual(calls.filter((c) => c.name === 'changeIntake').map((c) => c.input.answers), [[], ['README.md']]);
        },
      );
      await withWorker(common(verdict(), async () => ({ status: 'needs_clarification', question: 'Which file?', plannable: false })), async ({ taskQueue, calls }) => {
        const input = changeInput();
        const t0 = Date.now();
        const r = await env.client.workflow.execute(repoChangeWorkflow, { taskQueue, workflowId: input.changeId, args: [input] });
        assert.equal(r.status, 'failed');
        assert.equal(r.phase, 'clarify');
        assert.match(r.reason ?? '', /no answer to the clarifying question before the deadline/);
        assert.ok(Date.now() - t0 < 30_000, 'a day of waiting passed at once');
        assert.ok(!names(calls).includes('changePlan'), 'nothing planned or run');
      });
    });

    it('refuses a patch the gate fails, and one an admin denies; the requester cannot approve their own', async () => {
      await withWorker(common(verdict({ verdict: 'fail', reasons: ['touches .github/workflows'] })), async ({ taskQueue, calls }) => {
        const input = changeInput();
        const r = await env.client.workflow.execute(repoChangeWorkflow, { taskQueue, workflowId: input.changeId, args: [input] });
        assert.deepEqual(r, { status: 'refused', phase: 'validate', reason: 'touches .github/workflows', patchHash: 'h-patch' });
        assert.ok(!names(calls).includes('changePromote'));
      });
      await withWorker(common(verdict({ promotion: 'draft-pr-after-approval' })), async ({ taskQueue, calls }) => {
        const input = changeInput();
        const h = await env.client.workflow.start(repoChangeWorkflow, { taskQueue, workflowId: input.changeId, args: [input] });
        await until('the approval', async () => (await h.query(changeStatusQuery)).approvalId !== undefined);
        const approvalId = (await h.query(changeStatusQuery)).approvalId!;
        await assert.rejects(h.executeUpdate(approvalDecisionUpdate, { args: [{ approvalId, decision: 'approve', by: 'id-pat', byName: 'Pat' }] }), (err: Error) =>
          /the requester may not approve their own change/.test(String((err as WorkflowUpdateFailedError).cause?.message)),
        );
        await h.executeUpdate(approvalDecisionUpdate, { args: [{ approvalId, decision: 'deny', by: 'id-ada', byName: 'Ada', reason: 'not now' }] });
        const r = await h.result();
        assert.deepEqual(r, { status: 'refused', phase: 'approval', reason: 'promotion denied by Ada', patchHash: 'h-patch' });
        assert.ok(!names(calls).includes('changePromote'), 'a denied change is never promoted');
        assert.deepEqual(calls.find((c) => c.name === 'settleApproval')!.input, { approvalId, decision: 'denied', by: 'id-ada', byName: 'Ada', reason: 'not now' });
      });
    });
    it('the requester set of a change: whoever shaped the turn that proposed it, answered its question or steers it may not approve its promotion', async () => {
      let round = 0;
      const intake: Stubs['changeIntake'] = async () => (++round === 1 ? { status: 'needs_clarification', question: 'Which file?', plannable: false } : { status: 'planned', plannable: true });
      await withWorker(common(verdict({ promotion: 'draft-pr-after-approval' }), intake), async ({ taskQueue, calls }) => {
        const input = changeInput({ requesters: ['id-pat', 'id-ada'] });
        const h = await env.client.workflow.start(repoChangeWorkflow, { taskQueue, workflowId: input.changeId, args: [input] });
        await until('the question', async () => (await h.query(changeStatusQuery)).question === 'Which file?');
        await h.executeUpdate(changeAnswerUpdate, { args: [{ text: 'README.md', by: 'id-eve', byName: 'Eve' }] });
        await until('the approval', async () => (await h.query(changeStatusQuery)).approvalId !== undefined);
        const approvalId = (await h.query(changeStatusQuery)).approvalId!;
        await h.signal(changeSteerSignal, { text: 'smaller diff', by: 'Dee', byId: 'id-dee' });
        for (const by of ['id-pat', 'id-ada', 'id-eve', 'id-dee']) {
          await assert.rejects(h.executeUpdate(approvalDecisionUpdate, { args: [{ approvalId, decision: 'approve', by, byName: by }] }), (err: Error) =>
            /nor may anyone who shaped it/.test(String((err as WorkflowUpdateFailedError).cause?.message)),
          );
        }
        await h.executeUpdate(approvalDecisionUpdate, { args: [{ approvalId, decision: 'approve', by: 'id-cy', byName: 'Cy' }] });
        assert.equal((await h.result()).status, 'done');
        assert.ok(names(calls).includes('changePromote'));
      });
    });
  });

  describe('the objective run', () => {
    const prepared = (turnId: string) => ({
      kind: 'run' as const,
      name: 'digest',
      turn: {
        sessionId: 'objective-session',
        turnId,
        conversation: { platform: 'http' as const, account: 'default', chatId: 'c-obj' },
        inbound: [{ key: `in-${turnId}`, user: 'objective', at: '2026-11-25T09:00:00.000Z' }],
        workingSet: { notes: [], recentTurns: [] },
        settings: { model: 'openai-compatible:stub', think: 'off' as const },
        steers: [],
        maxSteps: 3,
      },
    });

    it('skips when the run is not to happen, runs a turn as its child otherwise, and fails the run when the turn fails', async () => {
      await withWorker({ objectivePrepareRun: async () => ({ kind: 'skip', reason: 'paused' }) }, async ({ taskQueue, calls }) => {
        const r = await env.client.workflow.execute(objectiveRunWorkflow, { taskQueue, workflowId: `obj-${randomUUID()}`, args: [{ objectiveId: 'o1', maxSteps: 3 }] });
        assert.deepEqual(r, { status: 'skipped', reason: 'paused' });
        assert.deepEqual(names(calls), ['objectivePrepareRun']);
      });
      const turnId = `turn-${randomUUID()}`;
      await withWorker(
        {
          objectivePrepareRun: async () => prepared(turnId),
          modelStep: async () => reply('h-digest'),
          deliver: async () => ({ sent: true, messageSeq: 1 }),
          objectiveFinishRun: async () => ({ status: 'done' }),
        },
        async ({ taskQueue, calls }) => {
          const r = await env.client.workflow.execute(objectiveRunWorkflow, { taskQueue, workflowId: `obj-${randomUUID()}`, args: [{ objectiveId: 'o1', maxSteps: 3 }] });
          assert.deepEqual(r, { status: 'done', turnId, outcome: 'replied' });
          assert.deepEqual(names(calls), ['objectivePrepareRun', 'modelStep', 'deliver', 'objectiveFinishRun']);
          assert.deepEqual(calls.at(-1)!.input.status, 'done');
          const child = await env.client.workflow.getHandle(turnId).describe();
          assert.equal(child.type, 'turnWorkflow');
        },
      );
      const failing = `turn-${randomUUID()}`;
      await withWorker(
        {
          objectivePrepareRun: async () => prepared(failing),
          modelStep: async () => ({ kind: 'not-configured', message: 'no model configured', usage: { input: 0, output: 0, total: 0 } }),
          deliver: async () => ({ sent: true, messageSeq: 1 }),
          objectiveFinishRun: async () => ({ status: 'failed' }),
        },
        async ({ taskQueue, calls }) => {
          await assert.rejects(
            env.client.workflow.execute(objectiveRunWorkflow, { taskQueue, workflowId: `obj-${randomUUID()}`, args: [{ objectiveId: 'o1', maxSteps: 3 }] }),
            (err: Error) => err instanceof WorkflowFailedError && /objective digest: the turn ended not-configured/.test(String(err.cause?.message)),
          );
          assert.deepEqual(calls.at(-1)!.input, { runId: calls.at(-1)!.input.runId, status: 'failed', reason: 'the turn ended not-configured', outcome: 'not-configured' });
        },
      );
      // a turn whose model step a budget refused: the run asks to be recorded as skipped, and completes skipped (no failure)
      const refused = `turn-${randomUUID()}`;
      await withWorker(
        {
          objectivePrepareRun: async () => prepared(refused),
          modelStep: async () => {
            throw ApplicationFailure.create({ type: 'ModelBudgetExceeded', message: 'Not called: the budget of objective o1 has 0 tokens left', nonRetryable: true });
          },
          deliver: async () => ({ sent: true, messageSeq: 1 }),
          objectiveFinishRun: async (input) => (input.skipOnBudget ? { status: 'skipped', reason: 'skipped: budget b1 spent until 2026-11-29 00:00 UTC' } : { status: 'failed' }),
        },
        async ({ taskQueue, calls }) => {
          const r = await env.client.workflow.execute(objectiveRunWorkflow, { taskQueue, workflowId: `obj-${randomUUID()}`, args: [{ objectiveId: 'o1', maxSteps: 3 }] });
          // the turn ends budget-refused at the refusal (patch steward-budget-wait; `failed` before it)
          assert.deepEqual(r, { status: 'skipped', turnId: refused, outcome: 'budget-refused', reason: 'skipped: budget b1 spent until 2026-11-29 00:00 UTC' });
          assert.deepEqual(calls.at(-1)!.input, { runId: calls.at(-1)!.input.runId, status: 'failed', reason: 'the turn ended budget-refused', outcome: 'budget-refused', skipOnBudget: true });
        },
      );
    });
  });
});
