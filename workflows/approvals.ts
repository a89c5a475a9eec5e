/**
 * The approval wait, shared by every workflow that waits for a person's decision (a turn's
 * proposed tool call, a repo change's promotion): the approvals a workflow has opened, the
 * checks on a decision (accepted once, never the requester's own where the policy forbids it,
 * the same refusals everywhere), and the wait itself (the deadline expires it, a stop cancels
 * it and settles it as cancelled before the cancellation goes on).
 *
 * Workflow code: deterministic, no I/O. What the wait records stays the caller's activities:
 * the helper takes the "settle as cancelled" step as a function, so each workflow keeps its
 * own activities and the commands of its recorded histories (one timer for the deadline).
 */
import { CancellationScope, condition, isCancellation } from '@temporalio/workflow';
import type { ApprovalDecision } from './types.js';

/** How an approval ended: a person's decision, or the deadline, or a stop. */
export type ApprovalOutcome = ApprovalDecision | { decision: 'expired' | 'cancelled'; by: string };

/** The decision as the approval's record stores it (the settle activities' input). */
export interface ApprovalSettlement {
  approvalId: string;
  decision: 'approved' | 'denied' | 'expired' | 'cancelled';
  by: string;
  byName: string;
  reason?: string;
}

interface OpenApproval {
  outcome?: ApprovalOutcome;
  /** The self-approval policy: known when the approval opens, or once its request is recorded (older turn histories). */
  forbidSelfApproval?: boolean;
}

export interface ApprovalBookOptions {
  /** What waits, for the refusals: "turn", "change". */
  what: string;
  /**
   * The requester set: everyone who shaped the work (identity ids, or the user name of a sender
   * without an identity). None of them may approve what it proposes where the policy forbids
   * self-approval. More join with `addRequester` (a steerer, while the work runs).
   */
  requesters?: readonly string[];
  /** The refusal of a self-approval the policy forbids. */
  selfApprovalRefusal: string;
}

/** Who a message's sender is in a requester set: their identity id, else the name they came with (the operator's own channels). */
export function requesterOf(m: { identityId?: string; user: string }): string {
  return m.identityId ?? m.user;
}

/** Who a steering note's author is in a requester set: their identity id, else their name. */
export function steererOf(note: { by: string; byId?: string }): string {
  return note.byId ?? note.by;
}

/** The past tense of an outcome, for refusals and replies. */
export function outcomeWord(o: ApprovalOutcome): string {
  return o.decision === 'approve' ? 'approved' : o.decision === 'deny' ? 'denied' : o.decision;
}

/** The settle input for an outcome (who decided, their name, the reason given). */
export function settlement(approvalId: string, o: ApprovalOutcome): ApprovalSettlement {
  return {
    approvalId,
    decision: o.decision === 'approve' ? 'approved' : o.decision === 'deny' ? 'denied' : o.decision,
    by: o.by,
    byName: 'byName' in o ? o.byName : o.by,
    ...('reason' in o && o.reason ? { reason: o.reason } : {}),
  };
}

/** The approvals one workflow has opened, and their outcomes. */
export class ApprovalBook {
  private readonly open = new Map<string, OpenApproval>();
  private readonly requesters: Set<string>;

  constructor(private readonly opts: ApprovalBookOptions) {
    this.requesters = new Set(opts.requesters ?? []);
  }

  /** One more person shaped the work (a steerer): they may not approve it either. */
  addRequester(who: string): void {
    this.requesters.add(who);
  }

  /** The requester set, in the order its members joined. */
  requesterSet(): string[] {
    return [...this.requesters];
  }

  /**
   * Open an approval before the admins are asked, so the quickest click already counts.
   * `forbidSelfApproval` may come later (see `knowPolicy`); until then a self-approval is
   * asked to wait.
   */
  expect(approvalId: string, forbidSelfApproval?: boolean): void {
    this.open.set(approvalId, forbidSelfApproval !== undefined ? { forbidSelfApproval } : {});
  }

  /** The self-approval policy, where the request brought it; a policy already known stays. */
  knowPolicy(approvalId: string, forbidSelfApproval: boolean): void {
    const entry = this.open.get(approvalId);
    if (entry) entry.forbidSelfApproval ??= forbidSelfApproval;
  }

  /** An update validator: accepted once; a decision on an approval not open here, a second decision, or an approval by a requester the policy forbids is refused. */
  validate(d: ApprovalDecision): void {
    const entry = this.open.get(d.approvalId);
    if (!entry) throw new Error(`approval ${d.approvalId} is not waiting in this ${this.opts.what}`);
    const done = entry.outcome;
    if (done) {
      const who = done.decision === 'expired' || done.decision === 'cancelled' ? '' : ` by ${'byName' in done ? done.byName : done.by}`;
      throw new Error(`approval ${d.approvalId} was already ${outcomeWord(done)}${who}`);
    }
    if (d.decision === 'approve' && this.requesters.has(d.by)) {
      if (entry.forbidSelfApproval === undefined) throw new Error('the approval request is still being recorded; try again in a moment');
      if (entry.forbidSelfApproval) throw new Error(this.opts.selfApprovalRefusal);
    }
  }

  /** An update handler's effect: the decision is taken (after `validate`). */
  decide(d: ApprovalDecision): void {
    const entry = this.open.get(d.approvalId);
    if (entry) entry.outcome = d;
  }

  /**
   * Wait for the decision until `timeoutMs` (the deadline expires it). Cancelled (a stop):
   * the approval is marked cancelled and `settleCancelled` runs to the end, whatever else is
   * cancelled, before the cancellation goes on.
   */
  async wait(approvalId: string, timeoutMs: number, settleCancelled: () => Promise<unknown>): Promise<ApprovalOutcome> {
    const entry = this.open.get(approvalId);
    if (!entry) throw new Error(`approval ${approvalId} was not opened`);
    try {
      const decided = await condition(() => entry.outcome !== undefined, timeoutMs);
      if (!decided) entry.outcome = { decision: 'expired', by: 'timeout' };
    } catch (err) {
      if (isCancellation(err)) {
        entry.outcome = { decision: 'cancelled', by: 'stop' };
        await CancellationScope.nonCancellable(settleCancelled);
      }
      throw err;
    }
    return entry.outcome!;
  }
}
