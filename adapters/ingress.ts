/**
 * Ingress: the one path from any adapter into the session workflows, and the place every
 * permission is decided. Adapters normalise platform events into InboundMessage and call
 * `handle`; they never call a model and never decide who may do what.
 *
 * Fail closed: on Telegram, Discord and OpenHarness an unknown sender, an unbound group or an
 * ambiguous binding never reaches a workflow; the event is receipted and, in a DM, answered
 * with how to pair. Each command has a minimum role; model turns are rate limited per role
 * (admins exempt). The operator's own HTTP API and CLI (bearer token) act as the operator.
 *
 * `handle` is a pipeline of named steps (module-level functions at the end of this file):
 * accept (well formed) -> admit (identify the sender and the chat's binding, drop what is not
 * addressed to Steward, authenticate, authorise) -> persist (recorded once) -> route (a turn
 * for a message; a command to its handler in adapters/ingress-commands.ts).
 */
import {
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
  type Client,
} from '@temporalio/client';
import type { Logger } from 'pino';
import { putBlob } from '../domain/blobs.js';
import type { Db } from '../domain/db.js';
import {
  adminChannelExists,
  decidePairing,
  findActor,
  findApproval,
  isGoverned,
  lookupBinding,
  notifyAdmins,
  OPERATOR,
  parseApprovalButton,
  rememberDm,
  requestPairing,
  withdrawUndeliveredPairing,
  type Actor,
  type BindingRecord,
  type PairingDecision,
} from '../domain/governance.js';
import { deliverOnce, type Button, type Senders } from '../domain/outbox.js';
import { receiptExists, receiptIdsByKeys, receiptsOfKindBetween, writeReceipt } from '../domain/receipts.js';
import { ensureSession } from '../domain/store/sessions.js';
import { messageByKey, messagesByKeys, readTranscript, recordedSeq, recordInbound, recordSystemMessage, type TranscriptRow } from '../domain/transcript.js';
import { faultPoint } from '../common/fault-points.js';
import { handedKey, handOverMessage, RESUME_MAX_PAGES, RESUME_PAGE, resumeWindow, wasHandedOver, type ResumeOptions } from '../services/handoff.js';
import { commandAddressee, isAdminCommand, mayUse, parseText, specOf, type ParsedCommand } from '../common/commands.js';
import { sessionWorkflowId, type ConversationKey } from '../common/ids.js';
import { isAdmin, type RateLimits, type Role } from '../common/roles.js';
import { createLimiter, DEFAULT_LIMITS, type Limiter } from '../domain/limits.js';
import {
  AttachmentRefSchema,
  InboundMessageBaseSchema,
  InboundMessageSchema,
  MAX_ATTACHMENTS,
  PlatformSchema,
  type AttachmentRef,
  type InboundMessage,
  type NormalizedInbound,
  type Provider,
} from '../common/schemas.js';
import {
  approvalDecisionUpdate,
  statusQuery,
  turnStatusQuery,
} from '../workflows/messages.js';
import type { SessionLimits, SessionStatus, TurnStatus } from '../workflows/types.js';
import type { ChangeService } from '../services/changes.js';
import { commandHandlers, sessionStartOptions, type SessionStart } from './ingress-commands.js';
import { z } from 'zod';
import type { ObjectiveService } from '../services/objectives.js';
import type { WorkspaceService } from '../services/workspaces.js';
import type { PromptLayers } from '../domain/knowledge/prompt-layers.js';
import type { KnowledgeService } from '../services/knowledge.js';
import type { PartState } from '../domain/heartbeat.js';
import type { TaskService } from '../services/tasks.js';

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

/** What the runtime has of the ingress beyond what adapters use. */
export interface IngressRuntime extends Ingress {
  /**
   * Hand over the chat messages accepted in the window whose handoff did not complete and that
   * no redelivery finished (a crash or an error on a platform that does not redeliver): the same
   * key, so the session takes each once. Commands are not run again here. How many.
   */
  resumeHandoffs(opts?: ResumeOptions): Promise<number>;
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
  /**
   * A redelivered command whose first delivery did not finish (no `command` receipt) runs again
   * once its record is this old (default 30 s); a younger one is taken as still running.
   */
  commandRetryAfterMs?: number;
  /** Triage and tasks: group messages that do not address Steward are sorted into work where a binding has triage on (/tasks, /task, /route, /triage). */
  tasks?: TaskService;
}

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

/** The one way in from every chat platform and the API: `handle` runs the pipeline below; buttons, transcripts and status for the adapters. */
export function createIngress(deps: IngressDeps): IngressRuntime {
  const { client, db } = deps;
  const senders = deps.senders ?? {};
  const pairingTtlMs = deps.pairingTtlMs ?? 15 * 60_000;
  const limiter = deps.limiter ?? createLimiter({ db, settings: { ...DEFAULT_LIMITS, turns: deps.rateLimits ?? {} }, senders });
  const attachmentLimits = deps.attachments ?? DEFAULT_ATTACHMENT_LIMITS;
  /** The pairing code an answer carries, so that an answer nobody received can withdraw it. */
  const pairingCodes = new WeakMap<IngressResult, string>();
  const issuedCode = (code: string, result: IngressResult): IngressResult => {
    pairingCodes.set(result, code);
    return result;
  };
  /** Session rows this ingress has made sure of (rows are never deleted): one upsert per session and process, not per message. */
  const knownSessions = new Set<string>();

  const startOptions = (conversation: ConversationKey, binding?: BindingRecord) => sessionStartOptions(deps, conversation, binding);
  const status = (sessionId: string) => sessionStatus(client, deps.defaultModel, sessionId);
  const decideApprovalImpl = (id: string, decision: 'approve' | 'deny', by: Actor, reason?: string) => decideApprovalAs(db, client, id, decision, by, reason);

  async function recordSystem(sessionId: string, key: string, text: string): Promise<void> {
    if (await recordSystemMessage(db, sessionId, key, text)) deps.onTranscript?.(sessionId, 'system');
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
    ...(deps.tasks ? { tasks: deps.tasks } : {}),
    status,
    formatStatus,
    decidePairing: decidePairingImpl,
    decideApproval: decideApprovalImpl,
  });

  /** A command the sender may use: its handler runs (adapters/ingress-commands.ts). */
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

  /** The message's way in, step by step (see the steps below createIngress). */
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
  async function handle(raw: InboundMessage, opts: HandleOptions = {}): Promise<IngressResult> {
    const accepted = await accept(steps, raw, opts);
    if ('stop' in accepted) return accepted.stop;
    const admitted = await admit(steps, accepted);
    if ('stop' in admitted) return admitted.stop;
    const persisted = await persist(steps, admitted, opts);
    if ('stop' in persisted) return persisted.stop;
    return route(steps, admitted, persisted);
  }

  return {
    async handle(raw, opts = {}) {
      const result = await handle(raw, opts);
      if (result.reply && !result.duplicate && opts.deliverReply !== false) await deliverAnswer(deps, raw, result, pairingCodes.get(result));
      return result;
    },

    handleAction: (action) => handleApprovalButton(db, action, decideApprovalImpl),

    async transcript(sessionId, opts = {}) {
      const rows = await readTranscript(db, sessionId, {
        ...(opts.limit !== undefined ? { limit: opts.limit } : {}),
        ...(opts.afterSeq !== undefined ? { afterSeq: opts.afterSeq } : {}),
      });
      return rows.map(transcriptEntry);
    },

    status,
    decidePairing: decidePairingImpl,
    decideApproval: decideApprovalImpl,
    resumeHandoffs: (opts = {}) => resumeHandoffs(deps, startOptions, opts),
  };
}

/** What an ingress receipt written by this handoff says of its message (`acceptedSteps`). */
const AcceptedReceiptSchema = z.object({ platform: PlatformSchema, account: z.string(), chatId: z.string(), command: z.literal(false), handoff: z.literal(true) });

/** The sweep behind `Ingress.resumeHandoffs`: ingress receipts in the window without a handed-over mark, whose message was recorded. */
async function resumeHandoffs(deps: IngressDeps, startOptions: (c: ConversationKey, b?: BindingRecord) => SessionStart, opts: ResumeOptions): Promise<number> {
  const { db } = deps;
  const { from, to } = resumeWindow(opts);
  let afterId = 0;
  let resumed = 0;
  for (let page = 0; page < RESUME_MAX_PAGES; page++) {
    const receipts = await receiptsOfKindBetween(db, 'ingress', from, to, '"handoff":true', afterId, RESUME_PAGE);
    if (receipts.length === 0) break;
    afterId = receipts.at(-1)!.id;
    const accepted = new Map<string, z.infer<typeof AcceptedReceiptSchema>>();
    for (const r of receipts) {
      if (!r.key?.endsWith(':ingress')) continue;
      const data = AcceptedReceiptSchema.safeParse(JSON.parse(r.data));
      if (data.success) accepted.set(r.key.slice(0, -':ingress'.length), data.data);
    }
    const handed = await receiptIdsByKeys(db, [...accepted.keys()].map(handedKey));
    const pending = [...accepted.keys()].filter((k) => !handed.has(handedKey(k)));
    for (const m of await messagesByKeys(db, pending)) {
      const a = accepted.get(m.key)!;
      const conversation: ConversationKey = { platform: a.platform, account: a.account, chatId: a.chatId };
      try {
        const found = isGoverned(a.platform) ? await lookupBinding(db, a.platform, a.account, a.chatId) : undefined;
        await handOverMessage(deps.client, db, {
          ref: { key: m.key, user: m.user ?? '', at: m.at, ...(m.identityId ? { identityId: m.identityId } : {}) },
          start: startOptions(conversation, found?.kind === 'bound' ? found.binding : undefined),
          actor: m.identityId ?? m.user ?? '',
        });
        resumed++;
        deps.log?.info({ key: m.key }, 'a message whose handoff did not complete was handed over');
      } catch (err) {
        deps.log?.warn({ err, key: m.key }, 'a message whose handoff did not complete could not be handed over');
      }
    }
    if (receipts.length < RESUME_PAGE) break;
  }
  return resumed;
}

/** The session's status as /status and the API show it (with the running turn's, when that runs as a workflow of its own). */
async function sessionStatus(client: Client, defaultModel: string, sessionId: string): Promise<SessionStatusView> {
  const base: SessionStatusView = {
    workflowId: sessionId,
    exists: false,
    running: null,
    queueLength: 0,
    model: defaultModel,
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

/** An admin's decision on an approval, handed to the run that waits for it; refusals are receipted. */
async function decideApprovalAs(db: Db, client: Client, id: string, decision: 'approve' | 'deny', by: Actor, reason?: string): Promise<ActionResult> {
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

/** Fetch, check and store the files of an admitted message; refusals are explained. */
async function storeAttachments(db: Db, attachmentLimits: AttachmentLimits, pending: PendingAttachment[]): Promise<{ refs: AttachmentRef[]; refused: string[] }> {
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

/** A transcript row as the API shows it (its attachments parsed; unreadable ones left out). */
function transcriptEntry(r: TranscriptRow): TranscriptEntry {
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
}

/** An Approve/Deny button pressed on a chat platform: only a paired admin decides, in the admin channel when there is one. */
async function handleApprovalButton(db: Db, action: InboundAction, decide: (id: string, decision: 'approve' | 'deny', by: Actor) => Promise<ActionResult>): Promise<ActionResult> {
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
  return decide(button.id, button.decision, actor);
}

/** The ingress's own answer (a command's reply, a refusal) sent back to the chat it came from; a pairing code nobody received is withdrawn. */
async function deliverAnswer(deps: IngressDeps, raw: InboundMessage, result: IngressResult, pairingCode: string | undefined): Promise<void> {
  const { db } = deps;
  const senders = deps.senders ?? {};
  if (!result.reply || !senders[raw.platform]) return;
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
    if (pairingCode) await withdrawUndeliveredPairing(db, pairingCode);
  }
}

// ---------------------------------------------------------------------------------------------
// The steps of `handle`: accept (the message is well formed), admit (who sends it, in which
// chat, and whether they may: identify, address, authenticate, authorise), persist (record it
// once) and route (a turn for a message, the handler for a command). A step that ends the way
// in returns `{ stop: result }`.

/** What the steps use of the ingress: its dependencies and the helpers createIngress builds. */
interface IngressSteps {
  deps: IngressDeps;
  db: Db;
  senders: Senders;
  pairingTtlMs: number;
  limiter: Limiter;
  /** Session rows this ingress has made sure of: one upsert per session and process. */
  knownSessions: Set<string>;
  commandRetryAfterMs: number;
  issuedCode(code: string, result: IngressResult): IngressResult;
  startOptions(conversation: ConversationKey, binding?: BindingRecord): SessionStart;
  recordSystem(sessionId: string, key: string, text: string): Promise<void>;
  reject(msg: NormalizedInbound, workflowId: string, reason: RejectReason, reply: string | undefined, data?: Record<string, unknown>): Promise<IngressResult>;
  storeAttachments(pending: PendingAttachment[]): Promise<{ refs: AttachmentRef[]; refused: string[] }>;
  runCommand(msg: NormalizedInbound, cmd: ParsedCommand, conversation: ConversationKey, actor: Actor, binding: BindingRecord | undefined): Promise<string | undefined>;
}

type Stop = { stop: IngressResult };

/** An accepted message and what follows from its text. */
interface Accepted {
  msg: NormalizedInbound;
  conversation: ConversationKey;
  workflowId: string;
  key: string;
  command: ParsedCommand | undefined;
  governed: boolean;
  dm: boolean;
}

/** An admitted message: who sent it and the chat's binding. */
interface Admitted extends Accepted {
  who: Actor;
  binding: BindingRecord | undefined;
}

interface Persisted {
  seq: number;
  attachments: AttachmentRef[];
  refusedFiles: string[];
  /** Recorded by an earlier delivery whose handoff did not complete. */
  redelivery?: boolean;
}

/** Accept: the message is well formed (else receipted, and answered only on the operator's own channels). */
async function accept(s: IngressSteps, raw: InboundMessage, opts: HandleOptions): Promise<Accepted | Stop> {
  // Files may arrive separately (fetched once the sender is let in): text or files is enough.
  const parsedMsg = (opts.attachments?.length ? InboundMessageBaseSchema : InboundMessageSchema).safeParse(raw);
  if (!parsedMsg.success) {
    const why = parsedMsg.error.issues.map((i) => `${i.path.join('.') || '(message)'}: ${i.message}`).join('; ');
    const fallbackId = sessionWorkflowId({ platform: raw.platform, account: String(raw.account), chatId: String(raw.chatId) });
    s.deps.log?.info({ platform: raw.platform, why }, 'inbound message invalid');
    await writeReceipt(s.db, {
      kind: 'ingress.rejected',
      ...(typeof raw.userId === 'string' ? { actor: raw.userId.slice(0, 200) } : {}),
      data: { platform: String(raw.platform).slice(0, 40), chatId: String(raw.chatId).slice(0, 200), reason: 'invalid', why: why.slice(0, 500) },
    });
    // Only the operator's own channels hear why; a chat platform's sender is not known yet,
    // and fail closed means an unknown sender or chat hears nothing but how to pair.
    const governed = PlatformSchema.safeParse(raw.platform);
    const answer = governed.success && !isGoverned(governed.data);
    return { stop: { workflowId: fallbackId, kind: 'rejected', duplicate: false, reason: 'invalid', ...(answer ? { reply: `Message not accepted: ${why}` } : {}) } };
  }
  const msg = parsedMsg.data;
  const conversation: ConversationKey = { platform: msg.platform, account: msg.account, chatId: msg.chatId };
  const parsed = parseText(msg.text);
  return {
    msg,
    conversation,
    workflowId: sessionWorkflowId(conversation),
    key: inboundKey(msg),
    command: parsed.kind === 'command' ? parsed.command : undefined,
    governed: isGoverned(msg.platform),
    dm: msg.chatType === 'dm',
  };
}

/** Admit: identify the sender and the chat's binding, drop what is not addressed to Steward, then authenticate and authorise. */
async function admit(s: IngressSteps, a: Accepted): Promise<Admitted | Stop> {
  const { msg, workflowId, command, governed, dm } = a;
  // Who is this?
  let actor: Actor | undefined;
  if (!governed || (msg.platform === 'openharness' && msg.userId === OPERATOR_USER_ID)) actor = OPERATOR;
  else if (msg.userId) actor = await findActor(s.db, msg.platform, msg.userId);

  // Which binding does this chat have?
  let binding: BindingRecord | undefined;
  if (governed) {
    const found = await lookupBinding(s.db, msg.platform, msg.account, msg.chatId);
    if (found.kind === 'ambiguous') {
      const admin = actor !== undefined && isAdmin(actor.role);
      return {
        stop: await s.reject(msg, workflowId, 'ambiguous-binding', admin && (dm || msg.addressed) ? `This chat has ${found.bindings.length} bindings (one per bot account and one for every account); remove one with the CLI (steward bindings remove) so its settings are unambiguous.` : undefined, {
          bindings: found.bindings.map((b) => b.id),
        }),
      };
    }
    if (found.kind === 'bound') binding = found.binding;
  }

  // A group message that does not address Steward is not for it; nor is `/cmd@otherbot`,
  // whatever the binding's mode.
  if (governed && !dm && !msg.addressed && ((binding?.mode ?? 'mention') === 'mention' || (command && commandAddressee(msg.text) !== undefined))) {
    // ... unless the binding has triage on: a known person's message is sorted into work by a workflow of its own
    const triage = !command && binding && actor ? await triageQuietly(s, msg, actor, binding, a.key) : undefined;
    return { stop: { workflowId, kind: 'ignored', duplicate: false, ...(triage ? { triage } : {}) } };
  }

  if (governed && !actor) return { stop: await authenticate(s, a) };
  const admitted: Admitted = { ...a, who: actor ?? OPERATOR, binding };
  const refused = await authorise(s, admitted);
  return refused ? { stop: refused } : admitted;
}

/** Hand a group message to triage (services/tasks.ts) where its binding has it on; a failure is logged, never the message's. */
async function triageQuietly(s: IngressSteps, msg: NormalizedInbound, who: Actor, binding: BindingRecord, key: string): Promise<IngressResult['triage']> {
  if (!s.deps.tasks) return undefined;
  try {
    return await s.deps.tasks.triageInbound(msg, who, binding, key);
  } catch (err) {
    s.deps.log?.warn({ err, platform: msg.platform, chatId: msg.chatId }, 'triage of a group message could not start');
    return undefined;
  }
}

/** Authenticate: an unknown sender gets a pairing code for /pair in a direct message, and nothing but how to pair otherwise. */
async function authenticate(s: IngressSteps, a: Accepted): Promise<IngressResult> {
  const { msg, workflowId, command, key, dm } = a;
  if (!(command?.kind === 'pair' && dm && msg.userId)) {
    return s.reject(msg, workflowId, 'unknown-sender', dm ? HOW_TO_PAIR : undefined, command ? { command: command.kind } : {});
  }
  if (await receiptExists(s.db, `${key}:pairing`)) {
    return { workflowId, kind: 'command', duplicate: true };
  }
  const issued = await requestPairing(s.db, { platform: msg.platform, account: msg.account, userId: msg.userId, chatId: msg.chatId, displayName: msg.user }, s.pairingTtlMs);
  await writeReceipt(s.db, {
    key: `${key}:pairing`,
    kind: 'pairing.requested',
    workflowId,
    actor: msg.userId,
    data: { platform: msg.platform, userId: msg.userId, name: msg.user, ...(issued.ok ? { expiresAt: issued.expiresAt.toISOString() } : { refused: issued.reason }) },
  });
  if (!issued.ok) return { workflowId, kind: 'rejected', duplicate: false, reason: 'rate-limited', reply: issued.message };
  await notifyAdmins(s.db, s.senders, {
    key: `pairing:${msg.platform}:${msg.userId}:${issued.expiresAt.getTime()}`,
    text: `**Pairing request** from ${msg.user} (${msg.platform} user ${msg.userId}). If you expect them, ask for their code and approve it with /approve <code> <role>, or deny it with /deny <code>.`,
  }).catch((err: unknown) => s.deps.log?.warn({ err }, 'pairing notice not delivered'));
  const minutes = Math.round(s.pairingTtlMs / 60_000);
  return s.issuedCode(issued.code, {
    workflowId,
    kind: 'command',
    duplicate: false,
    reply: `Your pairing code is ${issued.code}. Give it to a Steward admin: they approve it with /approve ${issued.code} <role> within ${minutes} minute${minutes === 1 ? '' : 's'}. The code works once.`,
    // the code lives only in the requester's chat; Steward keeps its hash
    replyRecordAs: `A pairing code was issued (valid ${minutes} minute${minutes === 1 ? '' : 's'}).`,
  });
}

/** Authorise: an unbound chat hears only an admin binding it; each command has its minimum role (and admin commands their channel); messages are rate limited per role. Undefined: allowed. */
async function authorise(s: IngressSteps, a: Admitted): Promise<IngressResult | undefined> {
  const { msg, workflowId, command, governed, dm, who, binding } = a;
  const spec = command ? specOf(command) : undefined;
  if (governed && !dm && !binding) {
    // in a chat Steward is not bound to, only an admin binding it is heard
    const mayBind = isAdmin(who.role) && command && (command.kind === 'bind' || command.kind === 'admin-channel' || command.kind === 'whoami' || command.kind === 'help');
    if (!mayBind) {
      return s.reject(msg, workflowId, 'unbound-chat', isAdmin(who.role) ? 'Steward does not answer in this chat yet. An admin binds it with /bind [mention|all] [name].' : undefined, command ? { command: command.kind } : {});
    }
  }
  if (command) {
    if (spec && !mayUse(spec, who.role)) {
      return s.reject(msg, workflowId, 'forbidden', `/${spec.name} needs the ${spec.minRole} role; you are ${who.role === 'admin' || who.role === 'operator' || who.role === 'overlord' ? 'an' : 'a'} ${who.role}.`, { command: command.kind });
    }
    if (governed && spec && isAdminCommand(spec) && !dm && !binding?.adminChannel && command.kind !== 'bind' && command.kind !== 'admin-channel' && command.kind !== 'unbind' && spec.name !== 'triage' && (await adminChannelExists(s.db))) {
      return s.reject(msg, workflowId, 'admin-channel-only', `/${spec.name} works in the admin channel (or in a direct message).`, { command: command.kind });
    }
    return undefined;
  }
  if (!governed) return undefined;
  if (who.role === 'viewer') return s.reject(msg, workflowId, 'forbidden', 'Viewers can use /status and /help, but not talk to the agent.');
  // the one limiter every path that causes a model call asks (domain/limits.ts); a redelivery of a
  // message accepted before (counted already) goes on to persist, which finds it
  const limited = await s.limiter.turn(who, 'message');
  if (limited && (await recordedSeq(s.db, a.key)) === undefined) return s.reject(msg, workflowId, 'rate-limited', limited.message, { used: limited.data.used, limit: limited.data.limit });
  return undefined;
}

/**
 * Persist: record the admitted message once (its unique key finds a redelivery; files are looked
 * at only once it is known to be new), make sure of the session row, and receipt the ingress.
 * The record says the message was accepted, not that it was handed over: a redelivered id is a
 * duplicate only once its handoff completed (see `redelivered`).
 */
async function persist(s: IngressSteps, a: Admitted, opts: HandleOptions): Promise<Persisted | Stop> {
  const { msg, conversation, workflowId, key, command, who } = a;
  const db = s.db;
  if (opts.attachments?.length) {
    const seen = await recordedSeq(db, key);
    if (seen !== undefined) return redelivered(s, a, seen);
  }
  let attachments: AttachmentRef[] = msg.attachments;
  let refusedFiles: string[] = [];
  let keptFiles: AttachmentRef[] = [];
  if (!command && opts.attachments?.length) {
    const stored = await s.storeAttachments(opts.attachments);
    attachments = [...attachments, ...stored.refs].slice(0, MAX_ATTACHMENTS);
    refusedFiles = stored.refused;
    keptFiles = stored.refs;
    if (!msg.text.trim() && attachments.length === 0) {
      return { stop: await s.reject(msg, workflowId, 'invalid', `Not accepted: ${refusedFiles.join('; ')}.`) };
    }
  }
  await acceptedSteps(s, a, attachments.length);
  const recorded = await recordInbound(db, {
    key,
    sessionId: workflowId,
    text: msg.text,
    user: msg.user,
    identityId: who.kind === 'person' ? who.id : null,
    command: command !== undefined,
    ...(attachments.length ? { attachments: JSON.stringify(attachments) } : {}),
  });
  if ('duplicate' in recorded) return redelivered(s, a, await recordedSeq(db, key));
  faultPoint('ingress.recorded');
  if (keptFiles.length && s.deps.workspaces) {
    // the chat's workspace keeps what was sent (not awaited: the message never waits on it)
    s.deps.workspaces.keepReceived(conversation, keptFiles, msg.user).catch((err: unknown) => s.deps.log?.warn({ err, chatId: msg.chatId }, 'keeping sent files in the workspace failed'));
  }
  return recordedSteps(s, a, { seq: recorded.seq, attachments, refusedFiles });
}

/**
 * A message id recorded before. Once its handoff completed (a message: signalled to its session
 * and marked, services/handoff.ts; a command: handled and answered, its `command` receipt) it is
 * a duplicate and changes nothing. Otherwise the process stopped between the record and the
 * handoff (or the first delivery is still on its way): a message is handed over again, the
 * same key (the session takes a key once, so a signal that did arrive is not answered twice) and
 * is still answered as a duplicate; a command recorded more than `commandRetryAfterMs` ago is
 * run again (a younger one is taken as still running). An id recorded with other text stays a
 * duplicate: one key is never two messages.
 */
async function redelivered(s: IngressSteps, a: Admitted, seq: number | undefined): Promise<Persisted | Stop> {
  const { workflowId, key, command } = a;
  const duplicate: Stop = { stop: { workflowId, kind: command ? 'command' : 'message', duplicate: true, ...(seq !== undefined ? { seq } : {}) } };
  if (seq === undefined) return duplicate;
  const done = command ? await receiptExists(s.db, `${key}:command`) : await wasHandedOver(s.db, key);
  if (done) return duplicate;
  const row = await messageByKey(s.db, key);
  if (!row || row.text !== a.msg.text) return duplicate;
  if (command && Date.now() - Date.parse(row.at) < s.commandRetryAfterMs) return duplicate;
  s.deps.log?.info({ workflowId, key }, 'a redelivered message whose handoff did not complete: handing it over now');
  return recordedSteps(s, a, { seq, attachments: transcriptEntry(row).attachments ?? [], refusedFiles: [], redelivery: true });
}

/**
 * Before the record: the session row and the ingress receipt (keyed, so a redelivery writes
 * neither again). The receipt comes before the record, so that every recorded message has one:
 * `resumeHandoffs` finds messages whose handoff did not complete through it (`handoff: true`
 * tells them from messages recorded before this handoff existed), and it precedes every turn
 * that takes the message (platform/trace.ts, the OpenHarness answer read by it).
 */
async function acceptedSteps(s: IngressSteps, a: Admitted, attachments: number): Promise<void> {
  const { msg, conversation, workflowId, key, command, who } = a;
  if (!s.knownSessions.has(workflowId)) {
    await ensureSession(s.db, workflowId, conversation);
    if (s.knownSessions.size >= 10_000) s.knownSessions.clear();
    s.knownSessions.add(workflowId);
  }
  faultPoint('ingress.session');
  await writeReceipt(s.db, {
    key: `${key}:ingress`,
    kind: 'ingress',
    workflowId,
    sessionId: workflowId,
    actor: who.kind === 'person' ? who.id : msg.user,
    data: {
      platform: msg.platform,
      account: msg.account,
      chatId: msg.chatId,
      messageId: msg.id,
      chars: msg.text.length,
      command: command !== undefined,
      ...(who.kind === 'person' ? { role: who.role } : {}),
      ...(attachments ? { attachments } : {}),
      handoff: true,
    },
  });
  faultPoint('ingress.receipted');
}

/** What follows the record, for a new message and a resumed one alike (each step idempotent). */
async function recordedSteps(s: IngressSteps, a: Admitted, p: Persisted): Promise<Persisted> {
  const { msg, workflowId, governed, dm, who } = a;
  s.deps.onTranscript?.(workflowId, 'user');
  if (governed && dm && msg.userId && who.kind === 'person') await rememberDm(s.db, msg.platform, msg.userId, msg.account, msg.chatId);
  return p;
}

/** Route: a message goes to its session (signal-with-start: a turn), a command to its handler; the command's answer is receipted and kept in the transcript. */
async function route(s: IngressSteps, a: Admitted, p: Persisted): Promise<IngressResult> {
  const { msg, conversation, workflowId, key, command, who, binding } = a;
  if (!command) {
    // handed over (signal-with-start keyed by the message's key), then marked; a failure leaves
    // the record unmarked, so the platform's (or the client's) retry of the same id hands it over
    const { runId } = await handOverMessage(s.deps.client, s.db, {
      ref: { key, user: msg.user, at: msg.at, ...(who.kind === 'person' ? { identityId: who.id } : {}) },
      start: s.startOptions(conversation, binding),
      actor: who.kind === 'person' ? who.id : msg.user,
    });
    s.deps.log?.debug({ workflowId, runId }, 'message queued');
    const note = p.refusedFiles.length ? `Some files were not taken: ${p.refusedFiles.join('; ')}.` : undefined;
    if (note) await s.recordSystem(workflowId, `${key}:files`, note);
    return { workflowId, kind: 'message', duplicate: p.redelivery === true, seq: p.seq, ...(note ? { reply: note } : {}) };
  }

  // A command is done once handled and answered: its `command` receipt is written last, and a
  // redelivery before it runs the command again (see docs/architecture.md, "Intake exactly once").
  const reply = await s.runCommand(msg, command, conversation, who, binding);
  faultPoint('ingress.command-run');
  if (reply !== undefined) await s.recordSystem(workflowId, `${key}:reply`, reply);
  faultPoint('ingress.command-answered');
  await writeReceipt(s.db, {
    key: `${key}:command`,
    kind: 'command',
    workflowId,
    sessionId: workflowId,
    actor: who.kind === 'person' ? who.id : msg.user,
    data: { command: command.kind, ...(reply !== undefined ? { reply: reply.slice(0, 2000) } : {}) },
  });
  return { workflowId, kind: 'command', duplicate: false, seq: p.seq, ...(reply !== undefined ? { reply } : {}) };
}
