/**
 * Ingress: the one path from any adapter into the session workflows, and the place every
 * permission is decided. Adapters normalise platform events into InboundMessage and call
 * `handle`; they never call a model and never decide who may do what.
 *
 * Fail closed: on Telegram, Discord and OpenHarness an unknown sender, an unbound group or an
 * ambiguous binding never reaches a workflow; the event is receipted and, in a DM, answered
 * with how to pair. Each command has a minimum role; model turns are rate limited per role
 * (admins exempt). The operator's own HTTP API and CLI (bearer token) act as the operator.
 */
import {
  WithStartWorkflowOperation,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
  type Client,
} from '@temporalio/client';
import type { Logger } from 'pino';
import { putBlob } from '../domain/blobs.js';
import type { Db } from '../domain/db.js';
import {
  adminChannelExists,
  bindChat,
  decidePairing,
  findActor,
  findApproval,
  GovernanceError,
  isGoverned,
  listApprovals,
  lookupBinding,
  notifyAdmins,
  OPERATOR,
  parseApprovalButton,
  pendingPairings,
  rememberDm,
  requestPairing,
  withdrawUndeliveredPairing,
  unbindChat,
  type Actor,
  type BindingRecord,
  type PairingDecision,
} from '../domain/governance.js';
import { deliverOnce, type Button, type Senders } from '../domain/outbox.js';
import { isUniqueViolation } from '../domain/prisma-errors.js';
import { writeReceipt } from '../domain/receipts.js';
import { readTranscript } from '../domain/transcript.js';
import { commandAddressee, helpText, isAdminCommand, mayUse, parseText, specOf, type ParsedCommand } from '../common/commands.js';
import { sessionWorkflowId, type ConversationKey } from '../common/ids.js';
import { describeWindow, isAdmin, type RateLimits, type Role } from '../common/roles.js';
import {
  AttachmentRefSchema,
  InboundMessageBaseSchema,
  InboundMessageSchema,
  MAX_ATTACHMENTS,
  parseModelRef,
  PlatformSchema,
  type AttachmentRef,
  type InboundMessage,
  type NormalizedInbound,
  type Provider,
} from '../common/schemas.js';
import {
  approvalDecisionUpdate,
  inboundSignal,
  newTaskSignal,
  settingsUpdate,
  statusQuery,
  steerUpdate,
  stopSignal,
  turnStatusQuery,
} from '../workflows/messages.js';
import { ChatAttr, KindAttr, PlatformAttr } from '../workflows/search-attributes.js';
import { sessionWorkflow } from '../workflows/chat/session.js';
import type { SessionInput, SessionLimits, SessionStatus, TurnStatus } from '../workflows/types.js';
import { ChangeInputError, type ChangeService } from './changes.js';
import { ObjectiveInputError, type ObjectiveService } from './objectives.js';

/** The user id an OpenHarness request carries when it authenticated with the operator's token. */
export const OPERATOR_USER_ID = 'operator';

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
  /** True when this message id was seen before: nothing was started or signalled again. */
  duplicate: boolean;
  /** Immediate answer for the sender (a command's result, why it was refused). */
  reply?: string;
  /** What the transcript keeps of `reply` when the reply holds a secret (a pairing code). */
  replyRecordAs?: string;
  reason?: RejectReason;
  /** Transcript seq of the recorded inbound message. */
  seq?: number;
}

export interface TranscriptEntry {
  /** Position in the transcript; pass it back as `afterSeq` to read only newer entries. */
  seq?: number;
  role: 'user' | 'assistant' | 'system';
  text: string;
  at: string;
  user?: string;
  attachments?: AttachmentRef[];
}

export interface SessionStatusView {
  workflowId: string;
  exists: boolean;
  running: null | {
    turnId: string;
    /** The workflow the turn runs in: the session (turns run inside it), or the turn's own workflow in older sessions. */
    runWorkflowId: string;
    step: number;
    phase: string;
    startedAt: string;
    tool?: string;
    approvalId?: string;
  };
  queueLength: number;
  model: string;
  think: string;
  tokens: { input: number; output: number; total: number };
  turns: number;
}

/** A file that came with a message, fetched only once the sender has been let in. */
export interface PendingAttachment {
  name: string;
  mediaType: string;
  /** Size the platform declares (checked before downloading), if known. */
  size?: number;
  fetch(): Promise<Buffer>;
}

/** A button click (Telegram callback query, Discord component interaction). */
export interface InboundAction {
  platform: NormalizedInbound['platform'];
  account: string;
  chatId: string;
  chatType: 'dm' | 'group';
  userId: string;
  user: string;
  /** The button's id (e.g. `apr:<id>:y`). */
  data: string;
  /** Platform id of the click, for the receipt. */
  id: string;
}

export interface ActionResult {
  /** Shown to the clicker (a toast or an ephemeral reply). */
  reply: string;
  /** True when the click changed something. */
  applied: boolean;
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

export interface AttachmentLimits {
  maxBytes: number;
  /** Allowed media types; `type/*` matches a whole family. */
  types: readonly string[];
}

export const DEFAULT_ATTACHMENT_LIMITS: AttachmentLimits = {
  maxBytes: 10 * 1024 * 1024,
  types: ['image/*', 'text/*', 'application/pdf', 'application/json'],
};

export interface IngressDeps {
  client: Client;
  db: Db;
  taskQueue: string;
  defaultModel: string;
  configuredProviders: () => Provider[];
  limits: SessionLimits;
  log?: Logger;
  /** Called after a message lands in a transcript (live updates for adapters). */
  onTranscript?: (sessionId: string, role: 'user' | 'assistant' | 'system') => void;
  /** Chat platform senders: admin notifications and pairing answers go out through them. */
  senders?: Senders;
  /** How long a pairing code lives. */
  pairingTtlMs?: number;
  /** Per-role limits on turn-starting messages (admins are exempt). */
  rateLimits?: RateLimits;
  attachments?: AttachmentLimits;
  /** Governed repository changes (/change, /answer; /stop and /steer reach a running change). */
  changes?: ChangeService;
  /** Objectives on Temporal Schedules (/objectives, /objective). */
  objectives?: ObjectiveService;
  /** The Temporal UI link of a workflow (for /status: the running turn's run). */
  runLink?: (workflowId: string) => string | undefined;
}

const PROVIDER_SETUP: Record<Provider, string> = {
  openai: 'set OPENAI_API_KEY',
  anthropic: 'set ANTHROPIC_API_KEY',
  'openai-compatible': 'set STEWARD_MODEL_BASE_URL (and STEWARD_MODEL_API_KEY if the endpoint needs one)',
};

const HOW_TO_PAIR = 'Steward does not know you yet. Send /pair here to ask for access: you get a code, and an admin approves it.';

/** The transcript key (and idempotency key) of an inbound message. */
export function inboundKey(msg: { platform: string; account: string; chatId: string; id: string }): string {
  return `in:${msg.platform}:${msg.account}:${msg.chatId}:${msg.id}`;
}

export function formatStatus(s: SessionStatusView): string {
  if (!s.exists) return `No session yet. Model: ${s.model}, thinking: ${s.think}.`;
  const r = s.running;
  const what = r ? (r.phase === 'approval' ? `waiting for approval ${r.approvalId ?? ''}`.trim() : r.phase === 'tool' ? `running ${r.tool ?? 'a tool'}` : r.phase) : '';
  const lines = [
    r ? `Running: turn ${r.turnId.split(':turn:')[1]?.split(':')[0] ?? '?'}, step ${r.step} (${what}), since ${r.startedAt}` : 'Idle: no turn is running.',
    `Queue: ${s.queueLength} message${s.queueLength === 1 ? '' : 's'}`,
    `Model: ${s.model}, thinking: ${s.think}`,
    `Tokens: ${s.tokens.total} (in ${s.tokens.input}, out ${s.tokens.output})`,
    `Turns: ${s.turns}`,
  ];
  return lines.join('\n');
}

function mediaTypeAllowed(type: string, allowed: readonly string[]): boolean {
  const t = type.split(';')[0]?.trim().toLowerCase() ?? '';
  return allowed.some((a) => (a.endsWith('/*') ? t.startsWith(a.slice(0, -1)) : t === a.toLowerCase()));
}

function humanBytes(n: number): string {
  if (n >= 1024 * 1024) return `${(n / (1024 * 1024)).toFixed(1)} MB`;
  if (n >= 1024) return `${Math.round(n / 1024)} KB`;
  return `${n} bytes`;
}

export function createIngress(deps: IngressDeps): Ingress {
  const { client, db } = deps;
  const senders = deps.senders ?? {};
  const pairingTtlMs = deps.pairingTtlMs ?? 15 * 60_000;
  const rateLimits = deps.rateLimits ?? {};
  const attachmentLimits = deps.attachments ?? DEFAULT_ATTACHMENT_LIMITS;
  /** The pairing code an answer carries, so that an answer nobody received can withdraw it. */
  const pairingCodes = new WeakMap<IngressResult, string>();
  const issuedCode = (code: string, result: IngressResult): IngressResult => {
    pairingCodes.set(result, code);
    return result;
  };
  /** Session rows this ingress has made sure of (rows are never deleted): one upsert per session and process, not per message. */
  const knownSessions = new Set<string>();

  const sessionInput = (conversation: ConversationKey, binding?: BindingRecord): SessionInput => ({
    conversation,
    settings: { model: binding?.model ?? deps.defaultModel, think: 'off' },
    limits: deps.limits,
  });

  const startOptions = (conversation: ConversationKey, binding?: BindingRecord) => {
    const workflowId = sessionWorkflowId(conversation);
    return {
      workflowId,
      taskQueue: deps.taskQueue,
      args: [sessionInput(conversation, binding)] as [SessionInput],
      typedSearchAttributes: [
        { key: PlatformAttr, value: conversation.platform },
        { key: ChatAttr, value: conversation.chatId },
        { key: KindAttr, value: 'session' },
      ],
      staticSummary: `Conversation session: ${conversation.platform} chat ${conversation.chatId} (account ${conversation.account})`,
    };
  };

  async function recordSystem(sessionId: string, key: string, text: string): Promise<void> {
    try {
      await db.message.create({ data: { key, sessionId, role: 'system', text } });
      deps.onTranscript?.(sessionId, 'system');
    } catch (err) {
      if (!isUniqueViolation(err)) throw err;
    }
  }

  /** Send a notice to one conversation through the outbox (keyed: sent once). */
  async function tell(conversation: ConversationKey, key: string, text: string, buttons?: Button[][]): Promise<void> {
    const sessionId = sessionWorkflowId(conversation);
    try {
      await deliverOnce(db, senders, { key, sessionId, conversation, kind: 'notice', text, ...(buttons ? { buttons } : {}) });
      deps.onTranscript?.(sessionId, 'system');
    } catch (err) {
      deps.log?.warn({ err, key }, 'notice could not be delivered');
    }
  }

  async function status(sessionId: string): Promise<SessionStatusView> {
    const base: SessionStatusView = {
      workflowId: sessionId,
      exists: false,
      running: null,
      queueLength: 0,
      model: deps.defaultModel,
      think: 'off',
      tokens: { input: 0, output: 0, total: 0 },
      turns: 0,
    };
    let s: SessionStatus;
    try {
      s = await client.workflow.getHandle(sessionId).query(statusQuery);
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) return base;
      throw err;
    }
    let turn: TurnStatus | undefined = s.running?.turn;
    if (s.running && !turn) {
      // a turn started as its own workflow (sessions recorded before turns ran inline)
      try {
        turn = await client.workflow.getHandle(s.running.turnId).query(turnStatusQuery);
      } catch {
        turn = undefined; // the turn is starting or just ended
      }
    }
    return {
      workflowId: sessionId,
      exists: true,
      running: s.running
        ? {
            turnId: s.running.turnId,
            runWorkflowId: s.running.turn ? sessionId : s.running.turnId,
            step: turn?.step ?? 0,
            phase: turn?.phase ?? 'starting',
            startedAt: turn?.startedAt ?? s.running.startedAt,
            ...(turn?.tool ? { tool: turn.tool } : {}),
            ...(turn?.approvalId ? { approvalId: turn.approvalId } : {}),
          }
        : null,
      queueLength: s.queueLength,
      model: s.settings.model,
      think: s.settings.think,
      tokens: {
        input: s.tokens.input + (turn?.usage.input ?? 0),
        output: s.tokens.output + (turn?.usage.output ?? 0),
        total: s.tokens.total + (turn?.usage.total ?? 0),
      },
      turns: s.turnsStarted,
    };
  }

  async function decideApprovalImpl(id: string, decision: 'approve' | 'deny', by: Actor, reason?: string): Promise<ActionResult> {
    const refuse = async (why: string, data: Record<string, unknown> = {}): Promise<ActionResult> => {
      await writeReceipt(db, { kind: 'approval.refused', actor: by.id, data: { approvalId: id, decision, by: by.name, why, ...data } });
      return { reply: why, applied: false };
    };
    if (!isAdmin(by.role)) return refuse(`Deciding approvals needs the admin role; you are ${by.role === 'operator' ? 'an' : 'a'} ${by.role}.`);
    const row = await findApproval(db, id);
    if (!row) return refuse(`No approval has the id ${id}.`);
    if (row.status !== 'pending') {
      const what = row.status === 'expired' ? 'expired (denied at its deadline)' : `already ${row.status}${row.decidedBy ? ` by ${row.decidedBy}` : ''}`;
      return refuse(`Approval ${row.id} was ${what}; nothing changed.`, { status: row.status });
    }
    try {
      const r = await client.workflow.getHandle(row.workflowId).executeUpdate(approvalDecisionUpdate, {
        args: [{ approvalId: row.id, decision, by: by.id, byName: by.name, ...(reason ? { reason } : {}) }],
      });
      return { reply: `Approval ${row.id} (${row.summary}): ${r.message}`, applied: true };
    } catch (err) {
      if (err instanceof WorkflowUpdateFailedError) return refuse(`Not applied: ${err.cause?.message ?? err.message}.`);
      if (err instanceof WorkflowNotFoundError) return refuse(`The run that waited for approval ${row.id} has ended; nothing changed.`);
      throw err;
    }
  }

  async function decidePairingImpl(code: string, decision: { approve: Role } | 'deny', by: Actor): Promise<PairingDecision> {
    if (!isAdmin(by.role)) return { ok: false, reason: 'forbidden', message: 'Deciding pairing requests needs the admin role.' };
    const r = await decidePairing(db, code, decision, by);
    await writeReceipt(db, {
      kind: 'pairing.decision',
      actor: by.id,
      data: r.ok
        ? { pairingId: r.pairing.id, platform: r.pairing.platform, userId: r.pairing.userId, decision: r.pairing.status, role: r.pairing.role, by: by.name }
        : { refused: r.reason, by: by.name },
    });
    if (r.ok) {
      const requester: ConversationKey = { platform: r.pairing.platform, account: r.pairing.account, chatId: r.pairing.chatId };
      await tell(
        requester,
        `pairing:${r.pairing.id}:${r.pairing.status}`,
        r.pairing.status === 'approved'
          ? `You are paired: Steward knows you as ${r.pairing.displayName}, with the ${r.pairing.role ?? 'member'} role. Say hello, or send /help.`
          : 'Your pairing request was denied.',
      );
    }
    return r;
  }

  async function runCommand(
    msg: NormalizedInbound,
    cmd: ParsedCommand,
    conversation: ConversationKey,
    actor: Actor,
    binding: BindingRecord | undefined,
  ): Promise<string | undefined> {
    const opts = startOptions(conversation, binding);
    const by = actor.kind === 'operator' ? msg.user : actor.name;
    const withStart = () =>
      new WithStartWorkflowOperation(sessionWorkflow, { ...opts, workflowIdConflictPolicy: 'USE_EXISTING' });
    switch (cmd.kind) {
      case 'stop': {
        await client.workflow.signalWithStart(sessionWorkflow, { ...opts, signal: stopSignal, signalArgs: [{ by }] });
        const stopped = deps.changes ? await deps.changes.stopInChat(conversation, { id: actor.id, name: by }) : [];
        // the session answers for the turn through the outbox; stopped changes are named here
        return stopped.length ? `Stopping change${stopped.length > 1 ? 's' : ''} ${stopped.join(', ')}: the coding agent is stopped and its work tree removed.` : undefined;
      }
      case 'change': {
        if (!deps.changes) return 'Repository changes are not enabled on this Steward.';
        try {
          const r = await deps.changes.startChange({ repo: cmd.repo, request: cmd.request }, { id: actor.id, name: by }, { conversation, sessionId: opts.workflowId });
          return `Change ${r.id} started on ${cmd.repo}: intake first, then a plan, a sandboxed coding agent, the validation gate and the promotion gate. /stop stops it.${r.runUrl ? ` Run: ${r.runUrl}` : ''}`;
        } catch (err) {
          if (err instanceof ChangeInputError) return `Not started: ${err.message}.`;
          throw err;
        }
      }
      case 'objectives': {
        if (!deps.objectives) return 'Objectives are not enabled on this Steward.';
        const all = await deps.objectives.list();
        if (all.length === 0) return 'No objectives. Add one with /objective add <name> <30m or "cron"> [tz=Zone] <prompt>.';
        return all
          .map((o) => {
            const when = o.schedule.every ? `every ${o.schedule.every}` : o.schedule.cron !== undefined ? `cron ${String(o.schedule.cron)}` : 'no schedule';
            const on = [o.triggers.webhook ? 'webhook' : '', o.triggers.watch ? `files in ${o.triggers.watch}` : '', o.triggers.email ? `mail to ${o.triggers.email}` : ''].filter(Boolean).join(', ');
            return `${o.name}: ${when}${o.schedule.timezone ? ` (${o.schedule.timezone})` : ''}${on ? `, on ${on}` : ''}, ${o.paused ? 'paused' : `next ${o.nextRuns[0] ?? '-'}`}, last ${o.lastRun ? `${o.lastRun.status}${o.lastRun.error ? ` (${o.lastRun.error.slice(0, 80)})` : ''}` : 'none'}`;
          })
          .join('\n');
      }
      case 'objective': {
        if (!deps.objectives) return 'Objectives are not enabled on this Steward.';
        const who = { id: actor.id, name: by };
        try {
          switch (cmd.action) {
            case 'add': {
              const o = await deps.objectives.create(
                { name: cmd.name, prompt: cmd.prompt, chatId: conversation.chatId, platform: conversation.platform, account: conversation.account, schedule: cmd.schedule },
                who,
              );
              return `Objective ${o.name} added: it reports here; next run ${o.nextRuns[0] ?? 'when the schedule says'}.`;
            }
            case 'show': {
              const o = await deps.objectives.show(cmd.name);
              return [`${o.name} (${o.id}): ${o.prompt}`, `Schedule: ${JSON.stringify(o.schedule)}, overlap ${o.overlap}${o.paused ? ', paused' : ''}`, `Next: ${o.nextRuns.slice(0, 3).join(', ') || '-'}`, ...o.runs.slice(0, 5).map((r) => `- ${r.scheduledAt ?? 'triggered'}: ${r.status}${r.error ? ` (${r.error.slice(0, 80)})` : ''}`)].join('\n');
            }
            case 'pause':
              await deps.objectives.pause(cmd.name, who);
              return `Objective ${cmd.name} paused.`;
            case 'resume':
              await deps.objectives.resume(cmd.name, who);
              return `Objective ${cmd.name} resumed.`;
            case 'trigger':
              await deps.objectives.trigger(cmd.name, who);
              return `Objective ${cmd.name} runs now.`;
            case 'skip-missed':
              await deps.objectives.skipMissed(cmd.name, who);
              return `Objective ${cmd.name}: runs missed until now are skipped.`;
            case 'delete':
              await deps.objectives.remove(cmd.name, who);
              return `Objective ${cmd.name} deleted.`;
          }
        } catch (err) {
          if (err instanceof ObjectiveInputError) return `Not done: ${err.message}.`;
          throw err;
        }
        return undefined;
      }
      case 'answer': {
        const waiting = deps.changes ? await deps.changes.waitingInChat(conversation) : undefined;
        if (!deps.changes || !waiting) return 'No change in this chat is waiting for an answer.';
        try {
          return await deps.changes.answer(waiting, { text: cmd.text }, { id: actor.id, name: by });
        } catch (err) {
          if (err instanceof ChangeInputError) return `Not accepted: ${err.message}.`;
          throw err;
        }
      }
      case 'new':
        await client.workflow.signalWithStart(sessionWorkflow, { ...opts, signal: newTaskSignal, signalArgs: [{ by }] });
        return undefined;
      case 'steer':
        if (deps.changes) {
          // with no turn running, steering goes to the chat's change in its coding phase
          const s = await status(opts.workflowId);
          if (!s.running) {
            const m = await deps.changes.steerInChat(conversation, cmd.text, { id: actor.id, name: by });
            if (m) return m;
          }
        }
        try {
          const r = await client.workflow.executeUpdateWithStart(steerUpdate, {
            args: [{ text: cmd.text, by }],
            startWorkflowOperation: withStart(),
          });
          return r.message;
        } catch (err) {
          if (err instanceof WorkflowUpdateFailedError) return `Steering not accepted: ${err.cause?.message ?? err.message}`;
          throw err;
        }
      case 'model':
      case 'think': {
        if (cmd.kind === 'model' && cmd.model === undefined) {
          const s = await status(opts.workflowId);
          const providers = deps.configuredProviders();
          return `Model: ${s.model}. Configured providers: ${providers.length ? providers.join(', ') : 'none'}.`;
        }
        if (cmd.kind === 'think' && cmd.level === undefined) {
          const s = await status(opts.workflowId);
          return `Thinking: ${s.think}. Use /think <off|low|medium|high>.`;
        }
        if (cmd.kind === 'model' && cmd.model !== undefined) {
          const { provider } = parseModelRef(cmd.model);
          if (!deps.configuredProviders().includes(provider)) {
            return `The ${provider} provider is not configured: ${PROVIDER_SETUP[provider]} and restart Steward.`;
          }
        }
        try {
          const r = await client.workflow.executeUpdateWithStart(settingsUpdate, {
            args: [{ ...(cmd.kind === 'model' ? { model: cmd.model } : { think: cmd.level }), by }],
            startWorkflowOperation: withStart(),
          });
          return r.message;
        } catch (err) {
          if (err instanceof WorkflowUpdateFailedError) return `Not changed: ${err.cause?.message ?? err.message}`;
          throw err;
        }
      }
      case 'status': {
        const view = await status(opts.workflowId);
        const link = view.running ? deps.runLink?.(view.running.runWorkflowId) : undefined;
        const text = link ? `${formatStatus(view)}\nRun: ${link}` : formatStatus(view);
        const running = deps.changes ? await deps.changes.runningInChat(conversation) : [];
        return running.length
          ? `${text}\nChanges: ${running.map((c) => `${c.id} on ${c.repo} (${c.phase}${c.question ? ': waiting for /answer' : ''})`).join('; ')}`
          : text;
      }
      case 'whoami':
        return actor.kind === 'operator'
          ? 'You are the operator (the API token holder): every command is open to you.'
          : `You are ${actor.name}, with the ${actor.role} role.`;
      case 'help':
        return helpText(actor.role);
      case 'pair':
        return actor.kind === 'operator' ? 'The operator needs no pairing.' : `You are already paired as ${actor.name} (${actor.role}).`;
      case 'approve':
      case 'deny': {
        const r = await decidePairingImpl(cmd.code, cmd.kind === 'approve' ? { approve: cmd.role } : 'deny', actor);
        if (!r.ok) return r.message;
        return cmd.kind === 'approve'
          ? `Paired ${r.pairing.displayName} (${r.pairing.platform} user ${r.pairing.userId}) as ${cmd.role}; they have been told.`
          : `Denied the pairing request of ${r.pairing.displayName}; they have been told.`;
      }
      case 'pending': {
        const [pairings, approvals] = await Promise.all([pendingPairings(db), listApprovals(db, { status: 'pending', limit: 50 })]);
        const lines: string[] = [];
        lines.push(pairings.length ? `Pairing requests (${pairings.length}):` : 'No pairing requests.');
        for (const p of pairings) lines.push(`- ${p.displayName} (${p.platform} user ${p.userId}), expires ${p.expiresAt.toISOString()}: ask them for their code, then /approve <code> <role>`);
        lines.push(approvals.length ? `Approvals waiting (${approvals.length}):` : 'No approvals waiting.');
        for (const a of approvals) lines.push(`- ${a.id}: ${a.summary} (deadline ${a.deadline.toISOString()}): /approve-action ${a.id} or /deny-action ${a.id} [reason]`);
        return lines.join('\n');
      }
      case 'approve-action':
        return (await decideApprovalImpl(cmd.id, 'approve', actor)).reply;
      case 'deny-action':
        return (await decideApprovalImpl(cmd.id, 'deny', actor, cmd.reason)).reply;
      case 'bind':
      case 'unbind':
      case 'admin-channel': {
        if (msg.chatType !== 'group') return `/${cmd.kind} works in a group or channel; direct messages of people Steward knows are always answered.`;
        if (cmd.kind === 'unbind') {
          const n = await unbindChat(db, msg.platform, msg.account, msg.chatId);
          await writeReceipt(db, { kind: 'binding.change', actor: actor.id, data: { action: 'unbind', platform: msg.platform, chatId: msg.chatId, removed: n } });
          return n > 0 ? 'Unbound: Steward no longer answers in this chat.' : 'This chat was not bound.';
        }
        try {
          const b = await bindChat(db, {
            platform: msg.platform,
            account: binding?.account ?? msg.account,
            chatId: msg.chatId,
            createdBy: actor.id,
            ...(cmd.kind === 'bind' ? { ...(cmd.mode ? { mode: cmd.mode } : {}), ...(cmd.name ? { name: cmd.name } : {}) } : { adminChannel: cmd.on }),
          });
          await writeReceipt(db, {
            kind: 'binding.change',
            actor: actor.id,
            data: { action: cmd.kind, platform: b.platform, chatId: b.chatId, mode: b.mode, name: b.name, adminChannel: b.adminChannel },
          });
          if (cmd.kind === 'admin-channel') {
            return cmd.on ? 'This chat is now the admin channel: admin commands and notifications go here.' : 'This chat is no longer the admin channel.';
          }
          return `Bound: Steward answers here ${b.mode === 'all' ? 'to every message' : 'when mentioned or replied to'}${b.name ? `; the chat is named "${b.name}"` : ''}.`;
        } catch (err) {
          if (err instanceof GovernanceError) return `Not changed: ${err.message}.`;
          throw err;
        }
      }
      case 'invalid':
        return `/${cmd.name}: ${cmd.error}`;
      case 'unknown':
        return `Unknown command ${cmd.name.startsWith('/') ? cmd.name : `/${cmd.name}`}.\n${helpText(actor.role)}`;
    }
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

  /** Fetch, check and store the files of an admitted message; refusals are explained. */
  async function storeAttachments(pending: PendingAttachment[]): Promise<{ refs: AttachmentRef[]; refused: string[] }> {
    const refs: AttachmentRef[] = [];
    const refused: string[] = [];
    for (const p of pending.slice(0, MAX_ATTACHMENTS)) {
      const name = p.name.replace(/[\\/\u0000-\u001f]/g, '_').slice(0, 255) || 'file';
      if (!mediaTypeAllowed(p.mediaType, attachmentLimits.types)) {
        refused.push(`${name}: files of type ${p.mediaType} are not accepted (allowed: ${attachmentLimits.types.join(', ')})`);
        continue;
      }
      if (p.size !== undefined && p.size > attachmentLimits.maxBytes) {
        refused.push(`${name}: ${humanBytes(p.size)} is over the limit of ${humanBytes(attachmentLimits.maxBytes)}`);
        continue;
      }
      let data: Buffer;
      try {
        data = await p.fetch();
      } catch (err) {
        refused.push(`${name}: it could not be downloaded (${(err as Error).message})`);
        continue;
      }
      if (data.length > attachmentLimits.maxBytes) {
        refused.push(`${name}: ${humanBytes(data.length)} is over the limit of ${humanBytes(attachmentLimits.maxBytes)}`);
        continue;
      }
      const hash = await putBlob(db, data, p.mediaType);
      refs.push(AttachmentRefSchema.parse({ hash, name, mediaType: p.mediaType.split(';')[0]?.trim() || 'application/octet-stream', size: data.length }));
    }
    if (pending.length > MAX_ATTACHMENTS) refused.push(`only the first ${MAX_ATTACHMENTS} files of a message are taken`);
    return { refs, refused };
  }

  async function handle(raw: InboundMessage, opts: HandleOptions = {}): Promise<IngressResult> {
    // Files may arrive separately (fetched once the sender is let in): text or files is enough.
    const parsedMsg = (opts.attachments?.length ? InboundMessageBaseSchema : InboundMessageSchema).safeParse(raw);
    if (!parsedMsg.success) {
      const why = parsedMsg.error.issues.map((i) => `${i.path.join('.') || '(message)'}: ${i.message}`).join('; ');
      const fallbackId = sessionWorkflowId({ platform: raw.platform, account: String(raw.account), chatId: String(raw.chatId) });
      deps.log?.info({ platform: raw.platform, why }, 'inbound message invalid');
      await writeReceipt(db, {
        kind: 'ingress.rejected',
        ...(typeof raw.userId === 'string' ? { actor: raw.userId.slice(0, 200) } : {}),
        data: { platform: String(raw.platform).slice(0, 40), chatId: String(raw.chatId).slice(0, 200), reason: 'invalid', why: why.slice(0, 500) },
      });
      // Only the operator's own channels hear why; a chat platform's sender is not known yet,
      // and fail closed means an unknown sender or chat hears nothing but how to pair.
      const governed = PlatformSchema.safeParse(raw.platform);
      const answer = governed.success && !isGoverned(governed.data);
      return { workflowId: fallbackId, kind: 'rejected', duplicate: false, reason: 'invalid', ...(answer ? { reply: `Message not accepted: ${why}` } : {}) };
    }
    const msg = parsedMsg.data;
    const conversation: ConversationKey = { platform: msg.platform, account: msg.account, chatId: msg.chatId };
    const workflowId = sessionWorkflowId(conversation);
    const parsed = parseText(msg.text);
    const command = parsed.kind === 'command' ? parsed.command : undefined;
    const spec = command ? specOf(command) : undefined;
    const key = inboundKey(msg);
    const governed = isGoverned(msg.platform);
    const dm = msg.chatType === 'dm';

    // Who is this?
    let actor: Actor | undefined;
    if (!governed || (msg.platform === 'openharness' && msg.userId === OPERATOR_USER_ID)) actor = OPERATOR;
    else if (msg.userId) actor = await findActor(db, msg.platform, msg.userId);

    // Which binding does this chat have?
    let binding: BindingRecord | undefined;
    if (governed) {
      const found = await lookupBinding(db, msg.platform, msg.account, msg.chatId);
      if (found.kind === 'ambiguous') {
        const admin = actor !== undefined && isAdmin(actor.role);
        return reject(msg, workflowId, 'ambiguous-binding', admin && (dm || msg.addressed) ? `This chat has ${found.bindings.length} bindings (one per bot account and one for every account); remove one with the CLI (steward bindings remove) so its settings are unambiguous.` : undefined, {
          bindings: found.bindings.map((b) => b.id),
        });
      }
      if (found.kind === 'bound') binding = found.binding;
    }

    // A group message that does not address Steward is not for it; nor is `/cmd@otherbot`,
    // whatever the binding's mode.
    if (governed && !dm && !msg.addressed && ((binding?.mode ?? 'mention') === 'mention' || (command && commandAddressee(msg.text) !== undefined))) {
      return { workflowId, kind: 'ignored', duplicate: false };
    }

    if (governed && !actor) {
      if (command?.kind === 'pair' && dm && msg.userId) {
        if (await db.receipt.findUnique({ where: { key: `${key}:pairing` }, select: { id: true } })) {
          return { workflowId, kind: 'command', duplicate: true };
        }
        const issued = await requestPairing(db, { platform: msg.platform, account: msg.account, userId: msg.userId, chatId: msg.chatId, displayName: msg.user }, pairingTtlMs);
        await writeReceipt(db, {
          key: `${key}:pairing`,
          kind: 'pairing.requested',
          workflowId,
          actor: msg.userId,
          data: { platform: msg.platform, userId: msg.userId, name: msg.user, ...(issued.ok ? { expiresAt: issued.expiresAt.toISOString() } : { refused: issued.reason }) },
        });
        if (!issued.ok) return { workflowId, kind: 'rejected', duplicate: false, reason: 'rate-limited', reply: issued.message };
        await notifyAdmins(db, senders, {
          key: `pairing:${msg.platform}:${msg.userId}:${issued.expiresAt.getTime()}`,
          text: `**Pairing request** from ${msg.user} (${msg.platform} user ${msg.userId}). If you expect them, ask for their code and approve it with /approve <code> <role>, or deny it with /deny <code>.`,
        }).catch((err: unknown) => deps.log?.warn({ err }, 'pairing notice not delivered'));
        const minutes = Math.round(pairingTtlMs / 60_000);
        return issuedCode(issued.code, {
          workflowId,
          kind: 'command',
          duplicate: false,
          reply: `Your pairing code is ${issued.code}. Give it to a Steward admin: they approve it with /approve ${issued.code} <role> within ${minutes} minute${minutes === 1 ? '' : 's'}. The code works once.`,
          // the code lives only in the requester's chat; Steward keeps its hash
          replyRecordAs: `A pairing code was issued (valid ${minutes} minute${minutes === 1 ? '' : 's'}).`,
        });
      }
      return reject(msg, workflowId, 'unknown-sender', dm ? HOW_TO_PAIR : undefined, command ? { command: command.kind } : {});
    }
    const who: Actor = actor ?? OPERATOR;

    if (governed && !dm && !binding) {
      // in a chat Steward is not bound to, only an admin binding it is heard
      const mayBind = isAdmin(who.role) && command && (command.kind === 'bind' || command.kind === 'admin-channel' || command.kind === 'whoami' || command.kind === 'help');
      if (!mayBind) {
        return reject(msg, workflowId, 'unbound-chat', isAdmin(who.role) ? 'Steward does not answer in this chat yet. An admin binds it with /bind [mention|all] [name].' : undefined, command ? { command: command.kind } : {});
      }
    }

    // What may they do?
    if (command) {
      if (spec && !mayUse(spec, who.role)) {
        return reject(msg, workflowId, 'forbidden', `/${spec.name} needs the ${spec.minRole} role; you are ${who.role === 'admin' || who.role === 'operator' || who.role === 'overlord' ? 'an' : 'a'} ${who.role}.`, { command: command.kind });
      }
      if (governed && spec && isAdminCommand(spec) && !dm && !binding?.adminChannel && command.kind !== 'bind' && command.kind !== 'admin-channel' && command.kind !== 'unbind' && (await adminChannelExists(db))) {
        return reject(msg, workflowId, 'admin-channel-only', `/${spec.name} works in the admin channel (or in a direct message).`, { command: command.kind });
      }
    } else if (governed) {
      if (who.role === 'viewer') {
        return reject(msg, workflowId, 'forbidden', 'Viewers can use /status and /help, but not talk to the agent.');
      }
      const limit = isAdmin(who.role) ? undefined : rateLimits[who.role];
      if (limit && who.kind === 'person') {
        const since = new Date(Date.now() - limit.windowMs);
        const used = await db.message.count({ where: { identityId: who.id, command: false, createdAt: { gt: since } } });
        if (used >= limit.count) {
          const oldest = await db.message.findFirst({ where: { identityId: who.id, command: false, createdAt: { gt: since } }, orderBy: { createdAt: 'asc' }, select: { createdAt: true } });
          const waitMin = oldest ? Math.max(1, Math.ceil((oldest.createdAt.getTime() + limit.windowMs - Date.now()) / 60_000)) : 1;
          return reject(msg, workflowId, 'rate-limited', `You have sent ${used} messages in the last ${describeWindow(limit.windowMs)}; the limit for the ${who.role} role is ${limit.count}. Try again in ${waitMin} minute${waitMin === 1 ? '' : 's'}.`, { used, limit: limit.count });
        }
      }
    }

    // Admitted: record it (a redelivered id is a duplicate and changes nothing). The message's
    // unique key finds a duplicate; files are looked at only once it is known to be new.
    const recordedSeq = async () => (await db.message.findUnique({ where: { key }, select: { seq: true } }))?.seq;
    const duplicate = (seq: number | undefined): IngressResult => ({ workflowId, kind: command ? 'command' : 'message', duplicate: true, ...(seq !== undefined ? { seq } : {}) });
    if (opts.attachments?.length) {
      const seen = await recordedSeq();
      if (seen !== undefined) return duplicate(seen);
    }
    let attachments: AttachmentRef[] = msg.attachments;
    let refusedFiles: string[] = [];
    if (!command && opts.attachments?.length) {
      const stored = await storeAttachments(opts.attachments);
      attachments = [...attachments, ...stored.refs].slice(0, MAX_ATTACHMENTS);
      refusedFiles = stored.refused;
      if (!msg.text.trim() && attachments.length === 0) {
        return reject(msg, workflowId, 'invalid', `Not accepted: ${refusedFiles.join('; ')}.`);
      }
    }
    let seq: number;
    try {
      const row = await db.message.create({
        data: {
          key,
          sessionId: workflowId,
          role: 'user',
          text: msg.text,
          user: msg.user,
          identityId: who.kind === 'person' ? who.id : null,
          command: command !== undefined,
          ...(attachments.length ? { attachments: JSON.stringify(attachments) } : {}),
        },
      });
      seq = row.seq;
    } catch (err) {
      if (isUniqueViolation(err)) return duplicate(await recordedSeq());
      throw err;
    }
    deps.onTranscript?.(workflowId, 'user');
    if (governed && dm && msg.userId && who.kind === 'person') await rememberDm(db, msg.platform, msg.userId, msg.account, msg.chatId);
    if (!knownSessions.has(workflowId)) {
      await db.session.upsert({
        where: { id: workflowId },
        create: { id: workflowId, platform: msg.platform, account: msg.account, chatId: msg.chatId },
        update: {},
      });
      if (knownSessions.size >= 10_000) knownSessions.clear();
      knownSessions.add(workflowId);
    }
    await writeReceipt(db, {
      key: `${key}:ingress`,
      kind: 'ingress',
      workflowId,
      sessionId: workflowId,
      actor: who.kind === 'person' ? who.id : msg.user,
      data: {
        platform: msg.platform,
        chatId: msg.chatId,
        messageId: msg.id,
        chars: msg.text.length,
        command: command !== undefined,
        ...(who.kind === 'person' ? { role: who.role } : {}),
        ...(attachments.length ? { attachments: attachments.length } : {}),
      },
    });

    if (!command) {
      let handle;
      try {
        handle = await client.workflow.signalWithStart(sessionWorkflow, {
          ...startOptions(conversation, binding),
          signal: inboundSignal,
          signalArgs: [{ key, user: msg.user, at: msg.at, ...(who.kind === 'person' ? { identityId: who.id } : {}) }],
        });
      } catch (err) {
        // Not queued: forget the message, so that the platform's (or the client's) retry of
        // the same id is taken as new, not as a duplicate that never gets a turn.
        await db.message.deleteMany({ where: { key } });
        throw err;
      }
      deps.log?.debug({ workflowId, runId: handle.signaledRunId }, 'message queued');
      const note = refusedFiles.length ? `Some files were not taken: ${refusedFiles.join('; ')}.` : undefined;
      if (note) await recordSystem(workflowId, `${key}:files`, note);
      return { workflowId, kind: 'message', duplicate: false, seq, ...(note ? { reply: note } : {}) };
    }

    const reply = await runCommand(msg, command, conversation, who, binding);
    await writeReceipt(db, {
      key: `${key}:command`,
      kind: 'command',
      workflowId,
      sessionId: workflowId,
      actor: who.kind === 'person' ? who.id : msg.user,
      data: { command: command.kind, ...(reply !== undefined ? { reply: reply.slice(0, 2000) } : {}) },
    });
    if (reply !== undefined) await recordSystem(workflowId, `${key}:reply`, reply);
    return { workflowId, kind: 'command', duplicate: false, seq, ...(reply !== undefined ? { reply } : {}) };
  }

  return {
    async handle(raw, opts = {}) {
      const result = await handle(raw, opts);
      const sender = senders[raw.platform];
      if (result.reply && !result.duplicate && sender && opts.deliverReply !== false) {
        const conversation: ConversationKey = { platform: raw.platform, account: raw.account, chatId: raw.chatId };
        let failed: unknown;
        try {
          const out = await deliverOnce(db, senders, {
            key: `${inboundKey(raw)}:answer`,
            sessionId: result.workflowId,
            conversation,
            kind: 'notice',
            text: result.reply,
            ...(result.replyRecordAs ? { recordAs: result.replyRecordAs } : {}),
          });
          if (out.sent) deps.onTranscript?.(result.workflowId, 'system');
          if (out.failed) failed = out.failed;
        } catch (err) {
          failed = err;
        }
        if (failed !== undefined) {
          deps.log?.warn({ err: failed, platform: raw.platform, chatId: raw.chatId }, 'the answer could not be delivered');
          // a pairing code nobody received is withdrawn, so the failed send uses up no request
          const code = pairingCodes.get(result);
          if (code) await withdrawUndeliveredPairing(db, code);
        }
      }
      return result;
    },

    async handleAction(action) {
      const actor = await findActor(db, action.platform, action.userId);
      const receiptKey = `act:${action.platform}:${action.id}`;
      if (!actor) {
        await writeReceipt(db, { key: receiptKey, kind: 'ingress.rejected', actor: action.userId, data: { platform: action.platform, chatId: action.chatId, reason: 'unknown-sender', action: action.data } });
        return { reply: 'Steward does not know you: only paired admins can decide.', applied: false };
      }
      const button = parseApprovalButton(action.data);
      if (!button) return { reply: 'This button is not Steward’s (or is out of date).', applied: false };
      if (action.chatType === 'group' && isAdmin(actor.role) && (await adminChannelExists(db))) {
        const found = await lookupBinding(db, action.platform, action.account, action.chatId);
        if (found.kind !== 'bound' || !found.binding.adminChannel) return { reply: 'Approvals are decided in the admin channel.', applied: false };
      }
      return decideApprovalImpl(button.id, button.decision, actor);
    },

    async transcript(sessionId, opts = {}) {
      const rows = await readTranscript(db, sessionId, {
        ...(opts.limit !== undefined ? { limit: opts.limit } : {}),
        ...(opts.afterSeq !== undefined ? { afterSeq: opts.afterSeq } : {}),
      });
      return rows.map((r) => {
        let attachments: AttachmentRef[] | undefined;
        if (r.attachments) {
          try {
            const p = AttachmentRefSchema.array().safeParse(JSON.parse(r.attachments));
            if (p.success && p.data.length) attachments = p.data;
          } catch {
            attachments = undefined;
          }
        }
        return { seq: r.seq, role: r.role, text: r.text, at: r.at, ...(r.user ? { user: r.user } : {}), ...(attachments ? { attachments } : {}) };
      });
    },

    status,
    decidePairing: decidePairingImpl,
    decideApproval: decideApprovalImpl,
  };
}
