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

/** A chat message for the session's queue (signal-with-start). */
export const inboundSignal = defineSignal<[InboundRef]>('inbound');
/** /stop: cancel the running turn at once; the queue stays. */
export const stopSignal = defineSignal<[{ by: string }]>('stop');
/** /new: a hard task boundary. */
export const newTaskSignal = defineSignal<[{ by: string }]>('newTask');
/** /steer: validated at once; taken in before the running turn's next model step. */
export const steerUpdate = defineUpdate<SteerResult, [SteerNote]>('steer');
/** /model and /think. */
export const settingsUpdate = defineUpdate<SettingsResult, [SettingsChange]>('settings');
/** /status. */
export const statusQuery = defineQuery<SessionStatus>('status');

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
