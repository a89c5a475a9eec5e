/** Types shared by the session and turn workflows, their activities and clients. Pure. */
import type { ConversationKey } from '../common/ids.js';
import type { ThinkLevel } from '../common/schemas.js';

/** An inbound message as workflow history sees it: a reference, never the text (claim-check). */
export interface InboundRef {
  /** Transcript key of the message (its text lives in the database). */
  key: string;
  user: string;
  at: string;
}

export interface SessionSettings {
  model: string;
  think: ThinkLevel;
}

export interface TokenUsage {
  input: number;
  output: number;
  total: number;
}

export interface SteerNote {
  text: string;
  by: string;
}

/** A finished turn, as the working set remembers it: transcript keys only. */
export interface TurnRecord {
  inbound: string[];
  reply?: string;
}

/** What a session carries across continue-as-new: bounded, whatever the session's age. */
export interface WorkingSet {
  /** Transcript key of the message that opened the current task. */
  goalKey?: string;
  /** Short notes the session keeps about the task (decisions, open items); bounded. */
  notes: string[];
  /** The most recent turns, newest last; bounded by MAX_RECENT_TURNS. */
  recentTurns: TurnRecord[];
}

export interface SessionLimits {
  /** Continue-as-new after this many turns in one run (or earlier when Temporal suggests it). */
  maxTurnsPerRun: number;
  /** Model steps a turn may take. */
  maxSteps: number;
}

export interface SessionInput {
  conversation: ConversationKey;
  settings: SessionSettings;
  limits: SessionLimits;
  /** Present when this run continues an earlier one. */
  carried?: CarriedState;
}

export interface CarriedState {
  queue: InboundRef[];
  pendingSteers: SteerNote[];
  turnsStarted: number;
  tokens: TokenUsage;
  workingSet: WorkingSet;
  /** Runs so far in this session's continue-as-new chain (for observability). */
  generation: number;
}

export interface TurnInput {
  sessionId: string;
  turnId: string;
  conversation: ConversationKey;
  inbound: InboundRef[];
  workingSet: WorkingSet;
  settings: SessionSettings;
  steers: SteerNote[];
  maxSteps: number;
}

export type TurnOutcome = 'replied' | 'budget-exhausted' | 'not-configured' | 'failed';

export interface TurnResult {
  outcome: TurnOutcome;
  usage: TokenUsage;
  steps: number;
  /** Transcript key of the reply, when one was delivered. */
  replyKey?: string;
  /** Steering that arrived too late for this turn; the session hands it to the next one. */
  unappliedSteers: SteerNote[];
}

export interface TurnStatus {
  turnId: string;
  step: number;
  phase: 'starting' | 'model' | 'delivering' | 'done' | 'stopping';
  startedAt: string;
  usage: TokenUsage;
}

export interface SessionStatus {
  sessionId: string;
  running: null | { turnId: string; startedAt: string };
  queueLength: number;
  settings: SessionSettings;
  tokens: TokenUsage;
  turnsStarted: number;
  generation: number;
  pendingSteers: number;
}

export interface SteerResult {
  appliedTo: 'running-turn' | 'next-turn';
  message: string;
}

export interface SettingsChange {
  model?: string;
  think?: ThinkLevel;
  by: string;
}

export interface SettingsResult {
  settings: SessionSettings;
  message: string;
}

export const MAX_RECENT_TURNS = 12;
export const MAX_NOTES = 20;
export const MAX_QUEUE = 200;
