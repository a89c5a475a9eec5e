/**
 * The chat intake: the application service every chat surface reaches the session workflows
 * through (Telegram, Discord, the HTTP API, the CLI chat, OpenHarness shells), and the place
 * every permission is decided. Adapters normalise platform events into InboundMessage and call
 * `handle`; they never call a model, touch the store or decide who may do what.
 *
 * Fail closed: on Telegram, Discord and OpenHarness an unknown sender, an unbound group or an
 * ambiguous binding never reaches a workflow; the event is receipted and, in a DM, answered
 * with how to pair. Each command has a minimum role; model turns are rate limited per role
 * (admins exempt). The operator's own HTTP API and CLI (bearer token) act as the operator.
 *
 * `handle` is a pipeline of named steps (pipeline.ts): accept (well formed) -> admit (identify
 * the sender and the chat's binding, drop what is not addressed to Steward, authenticate
 * (pairing.ts), authorise) -> persist (recorded once; files: attachments.ts) -> route (a turn
 * for a message, handed over by services/handoff.ts; a command to its handler in commands.ts).
 * The chat feature's other parts: approvals.ts (decisions on waiting actions and their
 * buttons), budgets.ts (/budget and the Raise button of a spent budget's notice), status.ts, transcript.ts, deliveries.ts (what the intake sends; the senders'
 * contract), resume.ts (the handoff sweep), session-start.ts.
 */
import type { Client } from '@temporalio/client';
import type { Logger } from 'pino';
import type { Db } from '../../domain/db.js';
import type { Actor, BindingRecord, PairingDecision } from '../../domain/governance.js';
import type { PartState } from '../../domain/heartbeat.js';
import type { PromptLayers } from '../../domain/knowledge/prompt-layers.js';
import { createLimiter, DEFAULT_LIMITS, type Limiter } from '../../domain/limits.js';
import { writeReceipt } from '../../domain/receipts.js';
import { recordSystemMessage } from '../../domain/transcript.js';
import type { ParsedCommand } from '../../common/commands.js';
import type { ConversationKey } from '../../common/ids.js';
import type { RateLimits, Role } from '../../common/roles.js';
import type { InboundMessage, NormalizedInbound, Provider } from '../../common/schemas.js';
import type { SessionLimits } from '../../workflows/types.js';
import { createBudgetService, type BudgetService } from '../budgets.js';
import type { ChangeService } from '../changes.js';
import type { ResumeOptions } from '../handoff.js';
import type { KnowledgeService } from '../knowledge.js';
import type { ObjectiveService } from '../objectives.js';
import type { TaskService } from '../tasks.js';
import type { WorkspaceService } from '../workspaces.js';
import { decideApprovalAs, handleApprovalButton, type ActionResult, type InboundAction } from './approvals.js';
import { handleRaiseButton } from './budgets.js';
import { isRaiseButton } from '../../domain/budgets/raises.js';
import { DEFAULT_ATTACHMENT_LIMITS, storeAttachments, type AttachmentLimits, type PendingAttachment } from './attachments.js';
import { commandHandlers } from './commands.js';
import { deliverAnswer, type DeliveryContext, type Senders } from './deliveries.js';
import { inboundKey } from './keys.js';
import { decidePairingAs, withdrawUndelivered } from './pairing.js';
import { handleInbound, type IngressSteps } from './pipeline.js';
import { resumeHandoffs } from './resume.js';
import { sessionStartOptions } from './session-start.js';
import { formatStatus, sessionStatus, type SessionStatusView } from './status.js';
import { transcriptOf, type TranscriptEntry } from './transcript.js';

export { inboundKey, OPERATOR_USER_ID } from './keys.js';
export { DEFAULT_ATTACHMENT_LIMITS, type AttachmentLimits, type PendingAttachment } from './attachments.js';
export type { ActionResult, InboundAction } from './approvals.js';
export { formatStatus, type SessionStatusView } from './status.js';
export type { TranscriptEntry } from './transcript.js';
export { sessionStartOptions, type SessionStart } from './session-start.js';

export type RejectReason =
  | 'invalid'
  | 'unknown-sender'
  | 'unbound-chat'
  | 'ambiguous-binding'
  | 'forbidden'
  | 'admin-channel-only'
  | 'rate-limited';

export interface IngressResult {
  /** The conversation's session workflow id. */
  workflowId: string;
  /**
   * message: queued for a turn; command: handled; rejected: refused and receipted (see
   * `reason`); ignored: not for Steward (a group message that does not address it).
   */
  kind: 'message' | 'command' | 'rejected' | 'ignored';
  /**
   * True when this message id was recorded before: no second turn comes of it (a message whose
   * first delivery stopped before its handoff is handed over now, once; a command is run again
   * only when its first delivery did not finish, and then this is false).
   */
  duplicate: boolean;
  /** Immediate answer for the sender (a command's result, why it was refused). */
  reply?: string;
  /** What the transcript keeps of `reply` when the reply holds a secret (a pairing code). */
  replyRecordAs?: string;
  reason?: RejectReason;
  /** Transcript seq of the recorded inbound message. */
  seq?: number;
  /** An ignored group message that triage took: its triage workflow (`refused`: over a triage limit, not classified). */
  triage?: { workflowId: string; duplicate: boolean; refused?: string };
}

export interface HandleOptions {
  /** Files to fetch and store once the sender has been let in. */
  attachments?: PendingAttachment[];
  /**
   * Send the reply (a command's answer, why a message was refused) to the chat through the
   * outbox, where a sender for the platform is registered. Default true; an adapter that
   * answers in its own way (a Discord interaction) passes false.
   */
  deliverReply?: boolean;
}

export interface Ingress {
  handle(msg: InboundMessage, opts?: HandleOptions): Promise<IngressResult>;
  handleAction(action: InboundAction): Promise<ActionResult>;
  transcript(sessionId: string, opts?: { limit?: number; afterSeq?: number }): Promise<TranscriptEntry[]>;
  status(sessionId: string): Promise<SessionStatusView>;
  /** Approve or deny a pairing code (chat, CLI, API). */
  decidePairing(code: string, decision: { approve: Role } | 'deny', by: Actor): Promise<PairingDecision>;
  /** Approve or deny a waiting action (chat, buttons, CLI, API): accepted once. */
  decideApproval(id: string, decision: 'approve' | 'deny', by: Actor, reason?: string): Promise<ActionResult>;
}

/** What the runtime has of the ingress beyond what adapters use. */
export interface IngressRuntime extends Ingress {
  /**
   * Hand over the chat messages accepted in the window whose handoff did not complete and that
   * no redelivery finished (a crash or an error on a platform that does not redeliver): the same
   * key, so the session takes each once. Commands are not run again here. How many.
   */
  resumeHandoffs(opts?: ResumeOptions): Promise<number>;
}

export interface IngressDeps {
  client: Client;
  db: Db;
  taskQueue: string;
  defaultModel: string;
  configuredProviders: () => Provider[];
  limits: SessionLimits;
  /** How long a message's handoff waits for a worker to accept its update before it signals (services/handoff.ts; default 2 s, 0: signal only). */
  handoffAcceptMs?: number;
  log?: Logger;
  /** Called after a message lands in a transcript (live updates for adapters). */
  onTranscript?: (sessionId: string, role: 'user' | 'assistant' | 'system') => void;
  /** Chat platform senders: admin notifications and pairing answers go out through them. */
  senders?: Senders;
  /** How long a pairing code lives. */
  pairingTtlMs?: number;
  /** The limits of every path that causes a model call (domain/limits.ts): turns, triage. Absent: one made from `rateLimits`. */
  limiter?: Limiter;
  /** Per-role limits on turn-starting messages (admins are exempt), when no `limiter` is given. */
  rateLimits?: RateLimits;
  attachments?: AttachmentLimits;
  /** Governed repository changes (/change, /answer; /stop and /steer reach a running change). */
  changes?: ChangeService;
  /** Objectives on Temporal Schedules (/objectives, /objective). */
  objectives?: ObjectiveService;
  /** Workspaces of knowledge (/workspace, /search, /open). */
  workspaces?: WorkspaceService;
  /** The system prompt's layers (/prompt). */
  promptLayers?: PromptLayers;
  /** Skills and memories (/skills, /memory). */
  knowledge?: KnowledgeService;
  /** The heartbeat's states (admins see them in /status). */
  heartbeat?: () => Promise<PartState[]>;
  /** The Temporal UI link of a workflow (for /status: the running turn's run). */
  runLink?: (workflowId: string) => string | undefined;
  /** A person's one-time console sign-in link (the `/console` command), when the console is served. */
  consoleLink?: (identityId: string) => { url: string; expiresInMinutes: number } | undefined;
  /**
   * A redelivered command whose first delivery did not finish (no `command` receipt) runs again
   * once its record is this old (default 30 s); a younger one is taken as still running.
   */
  commandRetryAfterMs?: number;
  /** Triage and tasks: group messages that do not address Steward are sorted into work where a binding has triage on (/tasks, /task, /route, /triage). */
  tasks?: TaskService;
  /** Model budgets (/budget, the Raise button of a spent budget's notice). Absent: one over `db` (a raise then wakes no waiting run). */
  budgets?: BudgetService;
}

/** The one way in from every chat platform and the API: `handle` runs the pipeline (pipeline.ts); buttons, transcripts and status for the adapters. */
export function createIngress(deps: IngressDeps): IngressRuntime {
  const { client, db } = deps;
  const senders = deps.senders ?? {};
  const pairingTtlMs = deps.pairingTtlMs ?? 15 * 60_000;
  const limiter = deps.limiter ?? createLimiter({ db, settings: { ...DEFAULT_LIMITS, turns: deps.rateLimits ?? {} }, senders });
  const attachmentLimits = deps.attachments ?? DEFAULT_ATTACHMENT_LIMITS;
  const delivery: DeliveryContext = { db, senders, ...(deps.log ? { log: deps.log } : {}), ...(deps.onTranscript ? { onTranscript: deps.onTranscript } : {}) };
  /** The pairing code an answer carries, so that an answer nobody received can withdraw it. */
  const pairingCodes = new WeakMap<IngressResult, string>();
  const issuedCode = (code: string, result: IngressResult): IngressResult => {
    pairingCodes.set(result, code);
    return result;
  };
  /** Session rows this intake has made sure of (rows are never deleted): one upsert per session and process, not per message. */
  const knownSessions = new Set<string>();

  const startOptions = (conversation: ConversationKey, binding?: BindingRecord) => sessionStartOptions(deps, conversation, binding);
  const status = (sessionId: string) => sessionStatus(client, deps.defaultModel, sessionId);
  const decideApprovalImpl = (id: string, decision: 'approve' | 'deny', by: Actor, reason?: string) => decideApprovalAs(db, client, id, decision, by, reason);
  const decidePairingImpl = (code: string, decision: { approve: Role } | 'deny', by: Actor) => decidePairingAs(delivery, code, decision, by);
  const budgets = deps.budgets ?? createBudgetService(db);

  async function recordSystem(sessionId: string, key: string, text: string): Promise<void> {
    if (await recordSystemMessage(db, sessionId, key, text)) deps.onTranscript?.(sessionId, 'system');
  }

  const commands = commandHandlers({
    client,
    db,
    configuredProviders: deps.configuredProviders,
    ...(deps.changes ? { changes: deps.changes } : {}),
    ...(deps.objectives ? { objectives: deps.objectives } : {}),
    ...(deps.workspaces ? { workspaces: deps.workspaces } : {}),
    ...(deps.promptLayers ? { promptLayers: deps.promptLayers } : {}),
    ...(deps.knowledge ? { knowledge: deps.knowledge } : {}),
    ...(deps.heartbeat ? { heartbeat: deps.heartbeat } : {}),
    ...(deps.runLink ? { runLink: deps.runLink } : {}),
    ...(deps.consoleLink ? { consoleLink: deps.consoleLink } : {}),
    ...(deps.tasks ? { tasks: deps.tasks } : {}),
    budgets,
    status,
    formatStatus,
    decidePairing: decidePairingImpl,
    decideApproval: decideApprovalImpl,
  });

  /** A command the sender may use: its handler runs (commands.ts). */
  async function runCommand(
    msg: NormalizedInbound,
    cmd: ParsedCommand,
    conversation: ConversationKey,
    actor: Actor,
    binding: BindingRecord | undefined,
  ): Promise<string | undefined> {
    const by = actor.kind === 'operator' ? msg.user : actor.name;
    return commands.run(cmd, { msg, key: inboundKey(msg), conversation, actor, binding, by, session: startOptions(conversation, binding) });
  }

  async function reject(msg: NormalizedInbound, workflowId: string, reason: RejectReason, reply: string | undefined, data: Record<string, unknown> = {}): Promise<IngressResult> {
    await writeReceipt(db, {
      key: `${inboundKey(msg)}:rejected`,
      kind: 'ingress.rejected',
      workflowId,
      actor: msg.userId ?? msg.user,
      data: { platform: msg.platform, account: msg.account, chatId: msg.chatId, chatType: msg.chatType, userId: msg.userId ?? null, messageId: msg.id, reason, ...data },
    });
    deps.log?.info({ platform: msg.platform, chatId: msg.chatId, userId: msg.userId, reason }, 'inbound message refused');
    return { workflowId, kind: 'rejected', duplicate: false, reason, ...(reply ? { reply } : {}) };
  }

  /** The message's way in, step by step (pipeline.ts). */
  const steps: IngressSteps = {
    deps,
    db,
    senders,
    pairingTtlMs,
    limiter,
    knownSessions,
    commandRetryAfterMs: deps.commandRetryAfterMs ?? 30_000,
    issuedCode,
    startOptions,
    recordSystem,
    reject,
    storeAttachments: (pending) => storeAttachments(db, attachmentLimits, pending),
    runCommand,
  };

  return {
    async handle(raw, opts = {}) {
      const result = await handleInbound(steps, raw, opts);
      if (result.reply && !result.duplicate && opts.deliverReply !== false) {
        const sent = await deliverAnswer(delivery, raw, result);
        // a pairing code nobody received is withdrawn, so the failed send uses up no request
        const code = pairingCodes.get(result);
        if (sent === 'failed' && code) await withdrawUndelivered(delivery, code);
      }
      return result;
    },

    handleAction: (action) => (isRaiseButton(action.data) ? handleRaiseButton(db, budgets, action) : handleApprovalButton(db, action, decideApprovalImpl)),
    transcript: (sessionId, opts = {}) => transcriptOf(db, sessionId, opts),
    status,
    decidePairing: decidePairingImpl,
    decideApproval: decideApprovalImpl,
    resumeHandoffs: (opts = {}) => resumeHandoffs(deps, startOptions, opts),
  };
}
