/**
 * The approval wait (workflows/approvals.ts), the one helper every workflow that waits for a
 * decision uses, tested alone: a probe workflow with its activities stubbed, on the
 * time-skipping test server (a deadline of hours passes at once).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import { after, before, describe, it } from 'node:test';
import { WorkflowFailedError, WorkflowUpdateFailedError, type WorkflowHandle } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { ApprovalSettlement } from '../../workflows/approvals.js';
import { approvalDecisionUpdate } from '../../workflows/messages.js';
import type { ApprovalDecision } from '../../workflows/types.js';
import { createTimeSkippingEnvironment } from '../helpers/temporal.js';
import { approvalProbe, finishSignal, shapedBySignal, type ProbeActivities, type ProbeInput } from './fixtures/approval-probe.js';

const require = createRequire(import.meta.url);
const HOUR = 3_600_000;

describe('the approval wait (time-skipping server, stubbed activities)', () => {
  let env: TestWorkflowEnvironment;
  let bundle: WorkflowBundleWithSourceMap;

  before(async () => {
    env = await createTimeSkippingEnvironment();
    bundle = await bundleWorkflowCode({ workflowsPath: require.resolve('./fixtures/approval-probe.ts'), logger: { trace() {}, debug() {}, info() {}, warn() {}, error: console.error, log() {} } });
  });
  after(async () => {
    await env?.teardown();
  });

  /** A worker with stubbed activities: the request answers with `ask` (after `gate` when given); every settle is recorded. */
  async function probe(
    input: Omit<ProbeInput, 'approvalId'>,
    ask: Awaited<ReturnType<ProbeActivities['askForApproval']>>,
    body: (h: WorkflowHandle<typeof approvalProbe>, ctx: { approvalId: string; settled: ApprovalSettlement[] }) => Promise<void>,
    gate?: Promise<void>,
  ): Promise<void> {
    const taskQueue = `approvals-${randomUUID()}`;
    const approvalId = `ap${randomUUID().slice(0, 6)}`;
    const settled: ApprovalSettlement[] = [];
    // a decision comes once the approval is asked for (a client learns its id from the request)
    let asked!: () => void;
    const wasAsked = new Promise<void>((r) => (asked = r));
    const activities: ProbeActivities = {
      async askForApproval() {
        asked();
        await gate;
        return ask;
      },
      async settle(s) {
        settled.push(s);
        return { reason: `${s.decision} by ${s.byName}` };
      },
    };
    const worker = await Worker.create({ connection: env.nativeConnection, taskQueue, workflowBundle: bundle, activities });
    await worker.runUntil(async () => {
      const h = await env.client.workflow.start(approvalProbe, { taskQueue, workflowId: `probe-${approvalId}`, args: [{ approvalId, ...input }] });
      await wasAsked;
      await body(h, { approvalId, settled });
    });
  }

  const decision = (approvalId: string, d: Partial<ApprovalDecision> = {}): ApprovalDecision => ({ approvalId, decision: 'approve', by: 'id-ada', byName: 'Ada', ...d });
  const refusal = async (h: WorkflowHandle, d: ApprovalDecision, pattern: RegExp) =>
    assert.rejects(h.executeUpdate(approvalDecisionUpdate, { args: [d] }), (err: Error) => {
      assert.ok(err instanceof WorkflowUpdateFailedError, String(err));
      assert.match(String(err.cause?.message), pattern);
      return true;
    });

  it('takes an admin’s approval once, names who decided to a second click, and settles it with the name', async () => {
    await probe({ requestedBy: 'id-pat', timeoutMs: HOUR, forbidSelfApproval: true }, { timeoutMs: HOUR }, async (h, { approvalId, settled }) => {
      await refusal(h, decision('other'), /approval other is not waiting in this probe/);
      const r = await h.executeUpdate(approvalDecisionUpdate, { args: [decision(approvalId)] });
      assert.equal(r.message, 'taken');
      await refusal(h, decision(approvalId, { decision: 'deny', by: 'id-bo', byName: 'Bo' }), new RegExp(`approval ${approvalId} was already approved by Ada`));
      await h.signal(finishSignal);
      const result = await h.result();
      assert.equal(result.outcome.decision, 'approve');
      assert.deepEqual(settled, [{ approvalId, decision: 'approved', by: 'id-ada', byName: 'Ada' }]);
      assert.equal(result.reason, 'approved by Ada');
    });
  });

  it('carries a denial’s reason to the record', async () => {
    await probe({ timeoutMs: HOUR }, { timeoutMs: HOUR }, async (h, { approvalId, settled }) => {
      await h.executeUpdate(approvalDecisionUpdate, { args: [decision(approvalId, { decision: 'deny', reason: 'not on Fridays' })] });
      await h.signal(finishSignal);
      await h.result();
      assert.deepEqual(settled, [{ approvalId, decision: 'denied', by: 'id-ada', byName: 'Ada', reason: 'not on Fridays' }]);
    });
  });

  it('refuses the requester’s own approval where the policy forbids it, and takes it where the policy allows it', async () => {
    await probe({ requestedBy: 'id-pat', timeoutMs: HOUR, forbidSelfApproval: true }, { timeoutMs: HOUR }, async (h, { approvalId, settled }) => {
      await refusal(h, decision(approvalId, { by: 'id-pat', byName: 'Pat' }), /the requester may not approve this/);
      // a denial by the requester is not a self-approval
      await h.executeUpdate(approvalDecisionUpdate, { args: [decision(approvalId, { decision: 'deny', by: 'id-pat', byName: 'Pat' })] });
      await h.signal(finishSignal);
      await h.result();
      assert.equal(settled[0]?.decision, 'denied');
    });
    await probe({ requestedBy: 'id-pat', timeoutMs: HOUR, forbidSelfApproval: false }, { timeoutMs: HOUR }, async (h, { approvalId, settled }) => {
      await h.executeUpdate(approvalDecisionUpdate, { args: [decision(approvalId, { by: 'id-pat', byName: 'Pat' })] });
      await h.signal(finishSignal);
      await h.result();
      assert.deepEqual(settled, [{ approvalId, decision: 'approved', by: 'id-pat', byName: 'Pat' }]);
    });
  });

  it('refuses every member of the requester set, one who joins while it waits included, and takes a third admin’s approval', async () => {
    await probe({ requestedBy: 'id-pat', requesters: ['id-ada'], timeoutMs: HOUR, forbidSelfApproval: true }, { timeoutMs: HOUR }, async (h, { approvalId, settled }) => {
      // Ada's message was in the batch, though Pat's came last
      await refusal(h, decision(approvalId), /the requester may not approve this/);
      await refusal(h, decision(approvalId, { by: 'id-pat', byName: 'Pat' }), /the requester may not approve this/);
      // Bo steers while it waits: Bo shaped it too
      await h.signal(shapedBySignal, 'id-bo');
      await refusal(h, decision(approvalId, { by: 'id-bo', byName: 'Bo' }), /the requester may not approve this/);
      await h.executeUpdate(approvalDecisionUpdate, { args: [decision(approvalId, { by: 'id-cy', byName: 'Cy' })] });
      await h.signal(finishSignal);
      await h.result();
      assert.deepEqual(settled, [{ approvalId, decision: 'approved', by: 'id-cy', byName: 'Cy' }]);
    });
  });

  it('asks a self-approval to wait while the policy is still being recorded, then applies the policy the request brought', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    await probe(
      { requestedBy: 'id-pat', timeoutMs: HOUR },
      { timeoutMs: HOUR, forbidSelfApproval: true },
      async (h, { approvalId, settled }) => {
        await refusal(h, decision(approvalId, { by: 'id-pat', byName: 'Pat' }), /the approval request is still being recorded; try again in a moment/);
        release();
        // once the request is recorded, its policy forbids the self-approval
        for (let i = 0; ; i++) {
          try {
            await h.executeUpdate(approvalDecisionUpdate, { args: [decision(approvalId, { by: 'id-pat', byName: 'Pat' })] });
            assert.fail('the self-approval was taken');
          } catch (err) {
            const message = String((err as WorkflowUpdateFailedError).cause?.message);
            if (/still being recorded/.test(message) && i < 100) {
              await new Promise((r) => setTimeout(r, 50));
              continue;
            }
            assert.match(message, /the requester may not approve this/);
            break;
          }
        }
        await h.executeUpdate(approvalDecisionUpdate, { args: [decision(approvalId)] });
        await h.signal(finishSignal);
        await h.result();
        assert.equal(settled[0]?.by, 'id-ada');
      },
      gate,
    );
  });

  it('expires at the deadline: six hours pass at once while the client waits for the result', async () => {
    await probe({ timeoutMs: 6 * HOUR, lingerMs: 60_000 }, { timeoutMs: 6 * HOUR }, async (h, { approvalId, settled }) => {
      const t0 = Date.now();
      const r = await h.result();
      assert.equal(r.outcome.decision, 'expired');
      assert.deepEqual(settled, [{ approvalId, decision: 'expired', by: 'timeout', byName: 'timeout' }]);
      assert.ok(Date.now() - t0 < 60_000, `six hours of waiting took ${Date.now() - t0} ms`);
    });
  });

  it('settles a stopped wait as cancelled before the cancellation ends the run', async () => {
    await probe({ timeoutMs: HOUR }, { timeoutMs: HOUR }, async (h, { approvalId, settled }) => {
      // the wait has started once the request answered (a describe shows the activity done)
      for (let i = 0; i < 200; i++) {
        const events = (await h.fetchHistory()).events ?? [];
        if (events.some((e) => e.timerStartedEventAttributes)) break;
        await new Promise((r) => setTimeout(r, 25));
      }
      await h.cancel();
      await assert.rejects(h.result(), (err: Error) => err instanceof WorkflowFailedError && /cancel/i.test(String(err.cause?.message ?? err.cause?.name)));
      assert.deepEqual(settled, [{ approvalId, decision: 'cancelled', by: 'stop', byName: 'stopped' }]);
    });
  });
});
