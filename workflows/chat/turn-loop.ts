/**
 * The agent loop of one conversation turn, shared by the two places a turn runs: inside the
 * session workflow (chat turns since the patch `steward-inline-turn`) and as its own turn
 * workflow (objective runs, and chat turns of histories recorded before that patch). One
 * model step per activity (streamed and heartbeating in the activity), a step budget, tools
 * with approvals, and the reply delivered through the outbox under a key derived from the
 * turn id, so it is sent once.
 *
 * `inline` turns deliver the reply and edit the progress panel with local activities: the
 * delivery is recorded in the same workflow task that took in the model's answer (one marker
 * instead of three events and one more workflow task). The outbox key makes a delivery that a
 * crashed worker repeats a no-op, as it does for a retried activity. Turn workflows keep
 * regular activities, so the histories they recorded replay unchanged.
 * Deterministic: no I/O here, only activities.
 */
import {
  ActivityCancellationType,
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  condition,
  isCancellation,
  patched,
  proxyActivities,
  proxyLocalActivities,
  upsertSearchAttributes,
} from '@temporalio/workflow';
import type { createActivities } from '../../activities/index.js';
import { ApprovalBook, requesterOf, settlement, steererOf } from '../approvals.js';
import { approvalIdFor, replyKey } from '../../common/ids.js';
import type { AttachmentRef } from '../../common/schemas.js';
import type { BudgetRaised } from '../messages.js';
import { BudgetAttr } from '../search-attributes.js';
import type {
  ApprovalDecision,
  ApprovalDecisionResult,
  ScratchRef,
  SteerNote,
  TokenUsage,
  ToolCallRef,
  TurnInput,
  TurnResult,
  TurnStatus,
} from '../types.js';

type Activities = ReturnType<typeof createActivities>;

/**
 * The requester of a turn is everyone who shaped it: every sender of its batch and every
 * steerer (the turn's pending steering and what arrives while it runs), and none of them may
 * approve what it proposes; the set goes with the model step (an MCP tool's approval by role
 * takes the lowest role in it), the approval request and the tool run (a memory's proposal, a
 * repository change). Decided per turn: a turn recorded before this patch keeps its single
 * requester, the sender of the batch's last message.
 */
export const REQUESTER_SET_PATCH = 'steward-requester-set';

/**
 * A model step refused by a spend budget (the activity's ApplicationFailure `ModelBudgetExceeded`,
 * its details naming the budget): an interactive chat turn (TurnLoopOptions.budgetWaitMs) tells
 * the chat at once which budget, what is left and when it renews, names the budget in the
 * session's `StewardBudget` search attribute, and waits for a `budgetRaised` signal (or the
 * budget's renewal, or a periodic re-check) up to its wait; then it tries the step again (a new
 * reservation). No raise in time, or a turn that does not wait (an objective's run): the turn
 * ends with outcome `budget-refused` and the refusal's message. Decided at the first refusal of
 * the run: histories recorded before this patch end such a turn as `failed`.
 */
export const BUDGET_WAIT_PATCH = 'steward-budget-wait';

/**
 * A chat turn (inline) whose model step gives the final answer has that step deliver it through
 * the outbox under the turn's reply key and clear the progress panel, and the turn ends without
 * the delivery's local activity. Only when nothing could have changed the reply: every /steer,
 * /stop and /new is preceded by its `session.command` receipt (services/chat/commands.ts) and
 * counted by the session when taken in; the step delivers when the session's receipts number
 * what the session had counted when it scheduled the step (no command in flight or taken in
 * since), and otherwise asks the session (replyGateQuery), whose answer is the line: steering,
 * /stop or /new it took in before leave the delivery to the turn (one more step, or the stop),
 * as before this patch. A step retried after its attempt delivered finds the reply recorded and
 * finishes that delivery instead of asking the model again. Decided per turn: turns recorded
 * before this patch deliver by local activity when replayed.
 */
export const DELIVER_IN_STEP_PATCH = 'steward-deliver-in-step';

/** STEWARD_BUDGET_WAIT's default, for sessions started before the setting. */
export const DEFAULT_BUDGET_WAIT_MS = 30 * 60_000;

/**
 * A waiting turn tries its step again at least this often without a signal: a raise whose signal
 * did not reach it (the search attribute not yet visible, `steward budgets set` without a
 * reachable Temporal) is seen within this time.
 */
export const BUDGET_RECHECK_MS = 5 * 60_000;

/** What a budget refusal's details tell the workflow (domain/model.ts BudgetStanding). */
export interface BudgetRefusal {
  /** The refusal's message: the budget, what is left, when it renews. */
  message: string;
  /** The budget's id, when the ledger named it. */
  budget?: string;
  scope?: string;
  /** ISO time the budget renews; absent for a total. */
  renewsAt?: string;
}

/** The budget refusal behind a failed model step, or undefined for any other failure (read through the SDK's failure types only). */
export function budgetRefusal(err: unknown): BudgetRefusal | undefined {
  let e: unknown = err;
  while (e instanceof ActivityFailure && e.cause) e = e.cause;
  if (!(e instanceof ApplicationFailure) || e.type !== 'ModelBudgetExceeded') return undefined;
  const d: unknown = e.details?.[0];
  const field = (k: string): string | undefined => {
    const v = d && typeof d === 'object' ? (d as Record<string, unknown>)[k] : undefined;
    return typeof v === 'string' && v.length > 0 ? v : undefined;
  };
  const budget = field('budget');
  const scope = field('scope');
  const renewsAt = field('renewsAt');
  return { message: e.message, ...(budget ? { budget } : {}), ...(scope ? { scope } : {}), ...(renewsAt ? { renewsAt } : {}) };
}

/** `30 minutes`, `2 hours`, `45 seconds`: a wait as people read it. */
export function describeWait(ms: number): string {
  const unit = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;
  if (ms >= 86_400_000 && ms % 3_600_000 === 0) return ms % 86_400_000 === 0 ? unit(ms / 86_400_000, 'day') : unit(ms / 3_600_000, 'hour');
  if (ms >= 3_600_000 && ms % 60_000 === 0) return ms % 3_600_000 === 0 ? unit(ms / 3_600_000, 'hour') : unit(ms / 60_000, 'minute');
  if (ms >= 60_000 && ms % 1000 === 0) return ms % 60_000 === 0 ? unit(ms / 60_000, 'minute') : unit(Math.round(ms / 1000), 'second');
  return unit(Math.max(1, Math.round(ms / 1000)), 'second');
}

/** Error types the model activity raises that retrying cannot fix. */
export const NON_RETRYABLE_MODEL_ERRORS = ['ModelBadRequest', 'ModelAuth', 'ModelNotFound', 'ModelNotConfigured'];

const OUTBOX_RETRY = { initialInterval: '500 milliseconds', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 20 } as const;
const PANEL_RETRY = { initialInterval: '500 milliseconds', backoffCoefficient: 2, maximumInterval: '5 seconds', maximumAttempts: 3 } as const;

/**
 * The turn's activity proxies; on `taskQueue` when given (an objective's turn runs its
 * activities on the background queue), else on the workflow's own queue.
 */
function turnActivities(taskQueue: string | undefined, inline: boolean) {
  const q = taskQueue ? { taskQueue } : {};
  const modelActs = proxyActivities<Activities>({
    ...q,
    startToCloseTimeout: '10 minutes',
    // The activity heartbeats several times a second while it waits and streams, so a dead
    // worker is noticed within this timeout and /stop reaches the activity at once.
    heartbeatTimeout: '10 seconds',
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry: {
      initialInterval: '1 second',
      backoffCoefficient: 2,
      maximumInterval: '30 seconds',
      // A killed worker costs an attempt (heartbeat timeout) as a failing provider does: the
      // chaos suite lost an objective run to 4 kills in 26 s with 5 attempts. Ten ride out
      // repeated crashes; a provider that keeps failing is reported after about 2.5 minutes.
      // (Retry options are not part of the replay check: no patch needed.)
      maximumAttempts: 10,
      nonRetryableErrorTypes: NON_RETRYABLE_MODEL_ERRORS,
    },
  });

  /** Tools and approvals: side effects of their own, retried like deliveries. */
  const toolActs = proxyActivities<Activities>({
    ...q,
    startToCloseTimeout: '2 minutes',
    retry: { initialInterval: '500 milliseconds', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 10 },
  });
  /**
   * A tool call heartbeats while it runs (activities/chat.ts runTool), so /stop reaches a call
   * in flight within the heartbeat throttle (6.4 s: 80% of the timeout; an MCP call is aborted
   * through the activity's cancellation signal) and a call whose worker died is retried within
   * the heartbeat timeout instead of the 2-minute limit.
   * (Activity options are not part of the replay check: no patch needed.)
   */
  const runToolActs = proxyActivities<Activities>({
    ...q,
    startToCloseTimeout: '2 minutes',
    heartbeatTimeout: '8 seconds',
    retry: { initialInterval: '500 milliseconds', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 10 },
  });

  if (inline) {
    // local activities run on the workflow's own worker (inline turns are chat turns: no activityQueue)
    const outboxActs = proxyLocalActivities<Activities>({ startToCloseTimeout: '1 minute', retry: OUTBOX_RETRY });
    /** The progress panel is a courtesy: a few quick tries, and a failure never fails the turn. */
    const panelActs = proxyLocalActivities<Activities>({ startToCloseTimeout: '30 seconds', retry: PANEL_RETRY });
    return { modelActs, outboxActs, toolActs, runToolActs, panelActs };
  }
  const outboxActs = proxyActivities<Activities>({ ...q, startToCloseTimeout: '1 minute', retry: OUTBOX_RETRY });
  const panelActs = proxyActivities<Activities>({ ...q, startToCloseTimeout: '30 seconds', retry: PANEL_RETRY });
  return { modelActs, outboxActs, toolActs, runToolActs, panelActs };
}

/** The turn's activity proxies, as turnActivities makes them. */
type TurnActivities = ReturnType<typeof turnActivities>;

function addUsage(a: TokenUsage, b: TokenUsage): TokenUsage {
  return { input: a.input + b.input, output: a.output + b.output, total: a.total + b.total };
}

function failureMessage(err: unknown): string {
  let e: unknown = err;
  while (e instanceof ActivityFailure && e.cause) e = e.cause;
  if (e instanceof ApplicationFailure || e instanceof Error) return e.message;
  return String(e);
}

export interface TurnLoopOptions {
  /** When the turn started (the turn workflow's start time, or the session's clock). */
  startedAt: string;
  /** Running inside the session workflow: deliveries and the panel as local activities. */
  inline?: boolean;
  /** A short label for the turn's activities in the Temporal UI (inline turns), e.g. "Turn 3". */
  label?: string;
  /**
   * An interactive chat turn: how long a model step refused by a budget waits for a raise
   * (BUDGET_WAIT_PATCH); absent or 0: the turn ends with the refusal at once.
   */
  budgetWaitMs?: number;
  /** The session's count of marked commands taken in (SessionState.commandsTaken), read when a step is scheduled (DELIVER_IN_STEP_PATCH). */
  commandsTaken?: () => number | undefined;
}

/** One turn's loop and the state its handlers read and change (steering, approvals, status). */
export class TurnLoop {
  readonly status: TurnStatus;
  /** Steering not taken in yet. */
  private readonly incoming: SteerNote[];
  private readonly applied: SteerNote[] = [];
  /** Approvals this turn waits for, with the decision once one is accepted. */
  private readonly approvals: ApprovalBook;
  /** The sender of the batch's last message: the requester a turn recorded before REQUESTER_SET_PATCH had, and the name approvals show first. */
  private readonly requestedBy: string | undefined;
  /** REQUESTER_SET_PATCH: the requester set grows with every steerer and goes to the activities. */
  private readonly requesterSet: boolean;
  /** The budgets (ids) this turn waits on, as `StewardBudget` names them; empty while it does not wait. */
  private readonly waitingOn: string[] = [];
  /** Budgets the chat was told about in this turn (told once each). */
  private readonly toldBudgets = new Set<string>();
  /** When the turn's budget wait ends (workflow time), from its first refusal. */
  private budgetDeadline: number | undefined;
  /** A `budgetRaised` signal for a budget the turn waits on arrived. */
  private budgetWake = false;
  /** DELIVER_IN_STEP_PATCH: a step that ends the turn delivers its answer (inline turns). */
  private readonly deliverInStep: boolean;

  constructor(
    private readonly input: TurnInput,
    private readonly opts: TurnLoopOptions,
  ) {
    this.status = { turnId: input.turnId, step: 0, phase: 'starting', startedAt: opts.startedAt, usage: { input: 0, output: 0, total: 0 } };
    this.incoming = [...input.steers];
    const last = input.inbound.at(-1);
    this.requestedBy = last ? requesterOf(last) : undefined;
    this.requesterSet = patched(REQUESTER_SET_PATCH);
    this.deliverInStep = opts.inline === true && patched(DELIVER_IN_STEP_PATCH);
    const requesters = this.requesterSet
      ? [...input.inbound.map(requesterOf), ...input.steers.map(steererOf)]
      : this.requestedBy !== undefined
        ? [this.requestedBy]
        : [];
    this.approvals = new ApprovalBook({
      what: 'turn',
      requesters,
      selfApprovalRefusal: this.requesterSet
        ? 'you shaped the turn that proposed this (a message in its batch, or steering), so you may not approve it (policy STEWARD_FORBID_SELF_APPROVAL); another admin decides'
        : 'the person whose message led to this proposal may not approve it (policy STEWARD_FORBID_SELF_APPROVAL); another admin decides',
    });
  }

  /**
   * The session's answer to a step that would deliver the final answer itself
   * (replyGateQuery): it is this turn's step now running, and no steering waits that would take
   * one more step.
   */
  mayDeliverFromStep(step: number): boolean {
    const { status, incoming, input } = this;
    return this.deliverInStep && status.phase === 'model' && status.step === step && (incoming.length === 0 || step >= input.maxSteps);
  }

  /** Steering for this turn: taken in before its next model step; the steerer joins the requester set. */
  steer(note: SteerNote): void {
    this.incoming.push(note);
    if (this.requesterSet) this.approvals.addRequester(steererOf(note));
  }

  /** Who the activities are told shaped the turn: the set (REQUESTER_SET_PATCH), with the last sender as before. */
  private requesterFields(): { requestedBy?: string; requesters?: string[] } {
    return {
      ...(this.requestedBy ? { requestedBy: this.requestedBy } : {}),
      ...(this.requesterSet ? { requesters: this.approvals.requesterSet() } : {}),
    };
  }

  /** A budget was raised (the `budgetRaised` signal): a turn waiting on it tries its step again. */
  budgetRaised(r: BudgetRaised): void {
    if (this.waitingOn.includes(r.budgetId)) this.budgetWake = true;
  }

  /** The wait is over (the step went through, the turn ends or is stopped): the run no longer names the budgets. */
  private endBudgetWait(): void {
    delete this.status.budget;
    if (this.waitingOn.length === 0) return;
    this.waitingOn.length = 0;
    upsertSearchAttributes([{ key: BudgetAttr, value: null }]);
  }

  /**
   * A budget refused the step: tell the chat (once per budget), name the budget in the run's
   * search attribute and wait for a raise, the budget's renewal or the periodic re-check. True:
   * try the step again; false: the wait is over (or the turn does not wait), the turn ends.
   */
  private async waitForBudget(acts: TurnActivities, r: BudgetRefusal): Promise<boolean> {
    const waitMs = this.opts.budgetWaitMs ?? 0;
    if (waitMs <= 0) return false;
    const now = Date.now();
    this.budgetDeadline ??= now + waitMs;
    if (now >= this.budgetDeadline) return false;
    const { input, status } = this;
    // a refusal without the budget's id (a worker from before the details): waits for the re-check
    const id = r.budget ?? 'unnamed';
    if (!this.waitingOn.includes(id)) {
      this.waitingOn.push(id);
      upsertSearchAttributes([{ key: BudgetAttr, value: [...this.waitingOn] }]);
    }
    status.phase = 'budget';
    status.budget = id;
    if (!this.toldBudgets.has(id)) {
      this.toldBudgets.add(id);
      const text = `Waiting for a budget: ${r.message} An admin was asked to raise ${r.budget ? `the budget ${r.budget}` : 'it'}; this turn goes on as soon as it is raised${r.renewsAt ? ' or renews' : ''}, and waits up to ${describeWait(waitMs)} (/stop ends it now).`;
      await acts.outboxActs.deliver.executeWithOptions(this.named(`budget ${id}: waiting`), [
        { key: `${input.turnId}:budget-wait:${id}`, sessionId: input.sessionId, conversation: input.conversation, kind: 'notice' as const, text },
      ]);
      await this.progress(acts, `Waiting for ${r.budget ? `the budget ${r.budget}` : 'a budget'} to be raised…`);
    }
    const left = this.budgetDeadline - Date.now();
    const renewal = r.renewsAt ? Date.parse(r.renewsAt) + 1000 - Date.now() : NaN;
    const timeout = Math.max(1, Math.min(left, BUDGET_RECHECK_MS, Number.isFinite(renewal) && renewal > 0 ? renewal : BUDGET_RECHECK_MS));
    await condition(() => this.budgetWake, timeout);
    // taken: a raise signalled while the step is tried again wakes the next wait at once
    this.budgetWake = false;
    // raised, renewed, re-checked or the deadline: the step is tried once more (a refusal past the deadline ends the turn)
    status.phase = 'model';
    return true;
  }

  /** The turn's last word on a refusal: the budget, what is left and when it renews. */
  private refusedNotice(r: BudgetRefusal): string {
    const waited = this.budgetDeadline !== undefined && (this.opts.budgetWaitMs ?? 0) > 0;
    const which = r.budget ? `the budget ${r.budget}` : 'a budget';
    return waited
      ? `No reply: ${which} was not raised within ${describeWait(this.opts.budgetWaitMs ?? 0)}. ${r.message}`
      : `No reply: ${which} refused this turn's model call. ${r.message}`;
  }

  /** Accepted once: a second click, a click after the deadline, or a self-approval the policy forbids is refused (the policy comes with the call; in histories from before that, with the request). */
  validateApproval(d: ApprovalDecision): void {
    this.approvals.validate(d);
  }

  decideApproval(d: ApprovalDecision): ApprovalDecisionResult {
    this.approvals.decide(d);
    return {
      approvalId: d.approvalId,
      decision: d.decision,
      message: d.decision === 'approve' ? `Approved: the action runs now.` : `Denied: the agent is told${d.reason ? ` (${d.reason})` : ''}.`,
    };
  }

  /** Inline turns name their activities in the Temporal UI (the session's history reads turn by turn); turn workflows add nothing. */
  private named(summary: string): { summary?: string } {
    const label = this.opts.label;
    return this.opts.inline === true && label ? { summary: `${label}: ${summary}` } : {};
  }

  /** What every model step's input carries: the turn, its conversation, the messages it took in, the working set and settings. */
  private baseStepInput() {
    const { input } = this;
    return {
      sessionId: input.sessionId,
      turnId: input.turnId,
      conversation: input.conversation,
      inbound: input.inbound.map((m) => m.key),
      workingSet: input.workingSet,
      settings: input.settings,
    };
  }

  /** DELIVER_IN_STEP_PATCH: what a step needs to deliver the turn's reply itself (nothing for turns without the patch). */
  private deliverFinal(attachments: AttachmentRef[]) {
    const { input, status } = this;
    if (!this.deliverInStep) return {};
    const commands = this.opts.commandsTaken?.();
    return {
      deliverFinal: {
        key: replyKey(input.turnId),
        usageBefore: status.usage,
        ...(commands !== undefined ? { commandsTaken: commands } : {}),
        ...(attachments.length > 0 ? { attachments: [...attachments] } : {}),
        ...(input.progress ? { clearPanel: true } : {}),
      },
    };
  }

  /** Show `text` in the conversation's progress panel (when the turn has one); a failure other than a cancellation is ignored. */
  private async progress(acts: TurnActivities, text: string, important = false): Promise<void> {
    const { input } = this;
    if (!input.progress) return;
    try {
      await acts.panelActs.updateProgress({ turnId: input.turnId, conversation: input.conversation, text, important });
    } catch (err) {
      if (isCancellation(err)) throw err;
    }
  }

  /** Wait for an admin's decision on a proposed call; the deadline denies. */
  private async awaitApproval(acts: TurnActivities, messageHash: string, call: ToolCallRef): Promise<{ run: boolean; reason: string }> {
    const { input, status, approvals } = this;
    const { turnId } = input;
    const { toolActs } = acts;
    status.phase = 'approval';
    // Known before the admins are asked, so that the quickest click already counts.
    const id = approvalIdFor(turnId, call.id);
    approvals.expect(id, call.forbidSelfApproval);
    status.approvalId = id;
    const requestInput = {
      sessionId: input.sessionId,
      turnId,
      conversation: input.conversation,
      messageHash,
      toolCallId: call.id,
      ...this.requesterFields(),
    };
    const req = await toolActs.requestApproval.executeWithOptions(this.named(`approval for ${call.name}`), [requestInput]);
    approvals.knowPolicy(id, req.forbidSelfApproval === true);
    await this.progress(acts, `Waiting for an admin to approve: ${req.summary} (approval ${req.approvalId})`, true);
    const d = await approvals.wait(id, req.timeoutMs, () =>
      toolActs.settleApproval({ approvalId: req.approvalId, decision: 'cancelled', by: 'stop', byName: 'the turn was stopped' }),
    );
    const settled = await toolActs.settleApproval(settlement(req.approvalId, d));
    delete status.approvalId;
    return { run: d.decision === 'approve', reason: settled.reason };
  }

  async run(): Promise<TurnResult> {
    const { input, status, incoming, applied } = this;
    const { turnId } = input;
    const inline = this.opts.inline === true;
    const acts = turnActivities(input.activityQueue, inline);
    const { modelActs, outboxActs, runToolActs, panelActs } = acts;
    const named = (summary: string) => this.named(summary);
    const progress = (text: string, important = false) => this.progress(acts, text, important);
    const base = this.baseStepInput();

    let draftHash: string | undefined;
    let finalHash: string | undefined;
    let notice: string | undefined;
    let outcome: TurnResult['outcome'] = 'budget-exhausted';
    let delivered = false;
    const scratch: ScratchRef[] = [];
    const notes: string[] = [];
    const skills: Record<string, string> = {};
    const attachments: AttachmentRef[] = [];

    try {
      for (let step = 1; step <= input.maxSteps; step++) {
        applied.push(...incoming.splice(0));
        status.step = step;
        status.phase = 'model';
        delete status.tool;
        await progress(step === 1 ? 'Thinking…' : `Thinking… (step ${step})`);
        const stepInput = {
          ...base,
          step,
          steers: applied.map((s) => s.text),
          ...(this.requesterSet ? { requesters: this.approvals.requesterSet() } : {}),
          ...(draftHash ? { draftHash } : {}),
          ...(scratch.length > 0 ? { scratch: [...scratch] } : {}),
          ...this.deliverFinal(attachments),
        };
        let result: Awaited<ReturnType<Activities['modelStep']>>;
        try {
          result = await modelActs.modelStep.executeWithOptions(named(`model step ${step} (${input.settings.model})`), [stepInput]);
        } catch (err) {
          const refusal = budgetRefusal(err);
          if (!refusal || !patched(BUDGET_WAIT_PATCH)) throw err;
          if (await this.waitForBudget(acts, refusal)) {
            // the same step again, with the steering that came in meanwhile (the same step key: a new reservation)
            step--;
            continue;
          }
          notice = this.refusedNotice(refusal);
          outcome = 'budget-refused';
          break;
        }
        this.endBudgetWait();
        status.usage = addUsage(status.usage, result.usage);
        if (result.kind === 'not-configured') {
          notice = result.message;
          outcome = 'not-configured';
          break;
        }
        if (result.skills) Object.assign(skills, result.skills);
        if (result.toolCalls && result.toolCalls.length > 0 && result.messageHash) {
          // The model asked for tools: run them (after approval where policy says so) and let
          // it continue with their results.
          scratch.push({ kind: 'assistant', hash: result.messageHash });
          for (const call of result.toolCalls) {
            status.phase = 'tool';
            status.tool = call.name;
            let decision: { run: boolean; reason: string } = { run: call.error === undefined, reason: call.error ?? '' };
            if (decision.run && call.needsApproval) decision = await this.awaitApproval(acts, result.messageHash, call);
            else await progress(`Calling ${call.name}…`);
            const toolInput = {
              sessionId: input.sessionId,
              turnId,
              conversation: input.conversation,
              messageHash: result.messageHash,
              toolCallId: call.id,
              ...(decision.run ? {} : { refused: decision.reason }),
              ...this.requesterFields(),
            };
            const out = await runToolActs.runTool.executeWithOptions(named(`tool ${call.name}${decision.run ? '' : ' (refused)'}`), [toolInput]);
            scratch.push({ kind: 'tool', hash: out.resultHash });
            if (out.note) notes.push(out.note);
            if (out.attachment) attachments.push(out.attachment);
          }
          continue;
        }
        // the step delivered it (DELIVER_IN_STEP_PATCH): the session said nothing waits
        delivered = result.delivered === true;
        draftHash = result.outputHash;
        // Steering that arrived while this step ran is taken in by one more step before the
        // reply goes out, so a reply never ignores guidance the user gave during the turn.
        if (!delivered && incoming.length > 0 && step < input.maxSteps) continue;
        finalHash = result.outputHash;
        outcome = 'replied';
        break;
      }
      if (!finalHash && !notice) {
        if (draftHash) {
          finalHash = draftHash;
          outcome = 'replied';
        } else {
          notice = `This turn used its budget of ${input.maxSteps} model steps without a reply.`;
        }
      }
    } catch (err) {
      if (isCancellation(err)) {
        this.endBudgetWait();
        status.phase = 'stopping';
        if (input.progress) {
          await CancellationScope.nonCancellable(async () => {
            try {
              await panelActs.clearProgress({ turnId, conversation: input.conversation });
            } catch {
              // a panel left behind is cosmetic
            }
          });
        }
        throw err;
      }
      outcome = 'failed';
      notice = `The model call failed: ${failureMessage(err)}`;
    }

    this.endBudgetWait();
    status.phase = 'delivering';
    const key = replyKey(turnId);
    const deliverInput = {
      key,
      sessionId: input.sessionId,
      conversation: input.conversation,
      turnId,
      kind: finalHash ? ('reply' as const) : ('notice' as const),
      ...(finalHash ? { blobHash: finalHash } : { text: notice ?? '' }),
      ...(attachments.length > 0 ? { attachments } : {}),
      usage: status.usage,
      steps: status.step,
      // how the turn ended, for its receipt (an activity's input: not part of the replay check)
      ...(outcome === 'budget-refused' ? { outcome } : {}),
    };
    if (!delivered) await outboxActs.deliver.executeWithOptions(named(finalHash ? 'reply' : 'notice'), [deliverInput]);
    if (input.progress && !delivered) {
      try {
        await panelActs.clearProgress({ turnId, conversation: input.conversation });
      } catch {
        // a panel left behind is cosmetic
      }
    }
    status.phase = 'done';
    return {
      outcome,
      usage: status.usage,
      steps: status.step,
      replyKey: key,
      unappliedSteers: incoming.splice(0),
      ...(notes.length > 0 ? { notes } : {}),
      ...(Object.keys(skills).length > 0 ? { skills } : {}),
    };
  }
}
