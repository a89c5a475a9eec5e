/** Types shared by the session and turn workflows, their activities and clients. Pure. */
import type { ConversationKey } from '../common/ids.js';
import type { ThinkLevel } from '../common/schemas.js';

/** An inbound message as workflow history sees it: a reference, never the text (claim-check). */
export interface InboundRef {
  /** Transcript key of the message (its text lives in the database). */
  key: string;
  user: string;
  at: string;
  /** The sender's identity, when the platform has identities (who proposed what, for approvals). */
  identityId?: string;
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
  /** Who steered, by name (the operator: the user name they gave). */
  by: string;
  /** The steerer's identity id (absent for the operator, and in notes from before it was carried). */
  byId?: string;
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
  /**
   * The skill ledger: each skill injected in this session, name -> version (absent in runs
   * started before skills). A version not in it is injected again; carried across
   * continue-as-new, dropped by /new. Bounded by MAX_SKILL_LEDGER.
   */
  skills?: Record<string, string>;
}

export interface SessionLimits {
  /** Continue-as-new after this many turns in one run (or earlier when Temporal suggests it). */
  maxTurnsPerRun: number;
  /** Model steps a turn may take. */
  maxSteps: number;
  /**
   * How long a turn whose model step a budget refused waits for the budget to be raised or to
   * renew (STEWARD_BUDGET_WAIT); 0: it ends at once. Absent (sessions started before the
   * setting): DEFAULT_BUDGET_WAIT_MS.
   */
  budgetWaitMs?: number;
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
  /**
   * Keys of the inbound messages taken in most recently (queued or answered), oldest first,
   * bounded by MAX_TAKEN_KEYS: a redelivered signal of one of them is dropped (absent in runs
   * started before INBOUND_DEDUP_PATCH).
   */
  taken?: string[];
  /**
   * Marked session commands (/stop, /new, /steer whose sender wrote their `session.command`
   * receipt before sending: `marked`) this session has taken in, over its whole chain (absent
   * in runs continued from before the count: unknown from then on).
   */
  commands?: number;
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
  /** Show the turn's progress in an edited-in-place chat message (chat platforms). */
  progress?: boolean;
  /** The task queue of the turn's activities (an objective's run: the background queue). */
  activityQueue?: string;
}

/** A model step's or a tool's message in the turn's scratch transcript, stored as a blob. */
export interface ScratchRef {
  kind: 'assistant' | 'tool';
  hash: string;
}

/** A tool call the model made, as history sees it (the input stays in the step's message blob). */
export interface ToolCallRef {
  id: string;
  name: string;
  /** The input failed validation (or the tool is unknown): the error goes back to the model. */
  error?: string;
  /** Policy: an admin must approve it before it runs. */
  needsApproval: boolean;
  /** Policy: the person whose message led to it may not approve it (absent in older histories). */
  forbidSelfApproval?: boolean;
}

export type ApprovalVerdict = 'approve' | 'deny';

/** An admin's decision on a waiting approval (an update to the workflow that waits: the session, a turn or a repo change). */
export interface ApprovalDecision {
  approvalId: string;
  decision: ApprovalVerdict;
  /** Identity id (or "operator") of who decided. */
  by: string;
  byName: string;
  reason?: string;
}

export interface ApprovalDecisionResult {
  approvalId: string;
  decision: ApprovalVerdict;
  message: string;
}

/**
 * `budget-exhausted`: the turn used its model steps without a reply; `budget-refused`: a spend
 * budget refused its model call (and no raise came while it waited).
 */
export type TurnOutcome = 'replied' | 'budget-exhausted' | 'budget-refused' | 'not-configured' | 'failed';

export interface TurnResult {
  outcome: TurnOutcome;
  usage: TokenUsage;
  steps: number;
  /** Transcript key of the reply, when one was delivered. */
  replyKey?: string;
  /** Steering that arrived too late for this turn; the session hands it to the next one. */
  unappliedSteers: SteerNote[];
  /** Notes the agent saved (save_note): the session keeps them in its working set. */
  notes?: string[];
  /** Skills injected in this turn (name -> version): the session's ledger records them. */
  skills?: Record<string, string>;
}

export interface TurnStatus {
  turnId: string;
  step: number;
  phase: 'starting' | 'model' | 'tool' | 'approval' | 'budget' | 'delivering' | 'done' | 'stopping';
  /** The tool running or waiting for approval. */
  tool?: string;
  /** The approval the turn waits for. */
  approvalId?: string;
  /** The budget (its id) the turn waits on to be raised (phase `budget`). */
  budget?: string;
  startedAt: string;
  usage: TokenUsage;
}

export interface SessionStatus {
  sessionId: string;
  /** The running turn; `turn` is its progress when it runs inside the session (else ask the turn workflow). */
  running: null | { turnId: string; startedAt: string; turn?: TurnStatus };
  queueLength: number;
  settings: SessionSettings;
  tokens: TokenUsage;
  turnsStarted: number;
  generation: number;
  pendingSteers: number;
}

export interface SteerResult {
  appliedTo: 'running-turn' | 'next-turn' | 'duplicate';
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
/** Skills a session's ledger remembers at most (the oldest are forgotten, so injected again when asked for). */
export const MAX_SKILL_LEDGER = 50;
export const MAX_QUEUE = 200;
/**
 * Inbound keys a session remembers having taken in, across continue-as-new: an ingress that
 * stopped between its signal and its mark signals again on the redelivery, and the session drops
 * the key if it is among these (services/handoff.ts). A redelivery that comes after this many
 * newer messages of the same conversation would be taken again.
 */
export const MAX_TAKEN_KEYS = 500;

// ---- repository changes ----

export interface ChangeAnswer {
  text: string;
  /** Identity id (or operator) of who answered. */
  by: string;
  byName: string;
}

export interface ChangeAnswerResult {
  message: string;
}

export interface ChangeStatusView {
  changeId: string;
  phase: string;
  question?: string;
  approvalId?: string;
  steers: number;
}

export interface RepoChangeInput {
  changeId: string;
  repo: string;
  requestedBy: { id: string; name: string };
  /**
   * Everyone who shaped the change and so may not approve its promotion: the requester, and for
   * a change an agent proposed, every sender and steerer of the turn that proposed it (absent in
   * changes started before the set was carried: the requester alone).
   */
  requesters?: string[];
  /** The chat that asked (questions, the plan and the result go there). */
  origin?: { conversation: ConversationKey; sessionId: string };
  /** How long a clarifying question waits for its answer. */
  clarifyTimeoutMs: number;
  /** Clarifying questions asked at most (one at a time). */
  maxQuestions: number;
  /** The task queue of the change's activities (the repo queue); default the workflow's own. */
  activityQueue?: string;
}

export interface RepoChangeOutcome {
  status: 'done' | 'failed' | 'refused' | 'cancelled';
  phase: string;
  reason?: string;
  patchHash?: string;
  prUrl?: string;
}
