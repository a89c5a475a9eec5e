/**
 * Signals, updates and queries of the session and turn workflows, declared once for both
 * clients and workflows.
 */
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type {
  ApprovalDecision,
  ApprovalDecisionResult,
  ChangeAnswer,
  ChangeAnswerResult,
  ChangeStatusView,
  InboundRef,
  SessionStatus,
  SettingsChange,
  SettingsResult,
  SteerNote,
  SteerResult,
  TurnStatus,
} from './types.js';

/**
 * A chat message for the session's queue, by update-with-start (services/handoff.ts): the
 * update's id is the message's key, its validator refuses a key the session took before (the
 * failure's type is `DUPLICATE_MESSAGE_FAILURE`: "already handed over", never written to the
 * history), and the handler queues it. An update to a running session is answered by a
 * speculative workflow task, which does not wait for the server's transfer queue.
 */
export const inboundUpdate = defineUpdate<InboundTaken, [InboundRef]>('inbound');
/** What the inbound update answers: the message is queued for the next turn (its place in the queue). */
export interface InboundTaken {
  queued: number;
}
/** The failure type of the inbound update's refusal of a key the session took before. */
export const DUPLICATE_MESSAGE_FAILURE = 'DuplicateMessage';
/**
 * A chat message for the session's queue by signal-with-start: the handoff's way when the update
 * is not accepted in time (no worker polls, or it is busy) and the way of histories from before
 * the update; both queue by the message's key, so a message that comes both ways is taken once.
 */
export const inboundSignal = defineSignal<[InboundRef]>('inbound');
/**
 * What a chat command sends its session: who, and the key of the message that asked for it. The
 * session takes a key once (with the inbound messages' keys, carried across continue-as-new), so
 * a command that a redelivery runs again does not stop, reset or steer twice. Absent in
 * histories from before the key was sent (and from callers without a message).
 */
export interface CommandRef {
  by: string;
  key?: string;
  /**
   * Its sender wrote the command's `session.command` receipt before sending it
   * (services/chat/commands.ts markSessionCommand): the session counts it. Every sender marks:
   * a model step that delivers the turn's reply itself sees a command only by its receipt
   * (workflows/chat/turn-loop.ts DELIVER_IN_STEP_PATCH), so an unmarked one could meet a reply
   * already decided.
   */
  marked?: boolean;
}
/** /stop: cancel the running turn at once; the queue stays. */
export const stopSignal = defineSignal<[CommandRef]>('stop');
/** /new: a hard task boundary. */
export const newTaskSignal = defineSignal<[CommandRef]>('newTask');
/** /steer: validated at once; taken in before the running turn's next model step. */
export const steerUpdate = defineUpdate<SteerResult, [SteerNote & { key?: string; marked?: boolean }]>('steer');
/** /model and /think. */
export const settingsUpdate = defineUpdate<SettingsResult, [SettingsChange]>('settings');
/** /status. */
export const statusQuery = defineQuery<SessionStatus>('status');

/** Which step of which turn asks to deliver its final answer itself (ReplyGateQuery). */
export interface ReplyGateAsk {
  turnId: string;
  step: number;
}
/**
 * Asked by a chat turn's model step that ends the turn (patch `steward-deliver-in-step`) just
 * before it delivers the reply itself: true when the turn is still running that step and nothing
 * the session took in since would change the reply (no /stop or /new, no steering waiting for
 * another step). Steering or a stop the session took in before the answer leaves the delivery
 * to the turn (workflows/chat/turn-loop.ts); one taken in after it meets a reply already on
 * its way, as one taken in during the reply's delivery always has.
 */
export const replyGateQuery = defineQuery<boolean, [ReplyGateAsk]>('replyGate');

/** A budget was raised (or changed, or removed): a turn waiting on it tries its model step again. */
export interface BudgetRaised {
  /** The budget's id. */
  budgetId: string;
}
/** Sent to every run whose `StewardBudget` names the budget (services/budgets/waiters.ts). */
export const budgetRaisedSignal = defineSignal<[BudgetRaised]>('budgetRaised');

/** Session -> running turn: steering to take in before the next model step. */
export const turnSteerSignal = defineSignal<[SteerNote]>('turnSteer');
export const turnStatusQuery = defineQuery<TurnStatus>('turnStatus');
/** An admin's decision on an approval the turn waits for: accepted once, validated at once. */
export const approvalDecisionUpdate = defineUpdate<ApprovalDecisionResult, [ApprovalDecision]>('approvalDecision');

/** A repo change's clarifying question answered (validated: only while a question is open). */
export const changeAnswerUpdate = defineUpdate<ChangeAnswerResult, [ChangeAnswer]>('changeAnswer');
/** /steer for a running repo change: recorded in history; the coding agent reads it between steps. */
export const changeSteerSignal = defineSignal<[SteerNote]>('changeSteer');
/** A repo change's phase, open question and pending approval. */
export const changeStatusQuery = defineQuery<ChangeStatusView>('changeStatus');
