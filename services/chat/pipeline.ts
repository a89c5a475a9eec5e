/**
 * The steps of the intake's `handle`: accept (the message is well formed), admit (who sends
 * it, in which chat, and whether they may: identify, address, authenticate, authorise), persist
 * (record it once) and route (a turn for a message, the handler for a command). A step that
 * ends the way in returns `{ stop: result }`.
 */
import type { Db } from '../../domain/db.js';
import { adminChannelExists, findActor, isGoverned, lookupBinding, OPERATOR, rememberDm, type Actor, type BindingRecord } from '../../domain/governance.js';
import type { Limiter } from '../../domain/limits.js';
import type { Senders } from '../../domain/outbox.js';
import { receiptExists, writeReceipt } from '../../domain/receipts.js';
import { ensureSession } from '../../domain/store/sessions.js';
import { messageByKey, recordedSeq, recordInbound } from '../../domain/transcript.js';
import { faultPoint } from '../../common/fault-points.js';
import { commandAddressee, isAdminCommand, mayUse, parseText, specOf, type ParsedCommand } from '../../common/commands.js';
import { sessionWorkflowId, type ConversationKey } from '../../common/ids.js';
import { isAdmin } from '../../common/roles.js';
import {
  InboundMessageBaseSchema,
  InboundMessageSchema,
  MAX_ATTACHMENTS,
  PlatformSchema,
  type AttachmentRef,
  type InboundMessage,
  type NormalizedInbound,
} from '../../common/schemas.js';
import { handOverMessage, wasHandedOver } from '../handoff.js';
import type { PendingAttachment } from './attachments.js';
import type { HandleOptions, IngressDeps, IngressResult, RejectReason } from './intake.js';
import { inboundKey, OPERATOR_USER_ID } from './keys.js';
import { authenticate } from './pairing.js';
import type { SessionStart } from './session-start.js';
import { transcriptEntry } from './transcript.js';

/** What the steps use of the intake: its dependencies and the helpers createIngress builds. */
export interface IngressSteps {
  deps: IngressDeps;
  db: Db;
  senders: Senders;
  pairingTtlMs: number;
  limiter: Limiter;
  /** Session rows this intake has made sure of: one upsert per session and process. */
  knownSessions: Set<string>;
  commandRetryAfterMs: number;
  issuedCode(code: string, result: IngressResult): IngressResult;
  startOptions(conversation: ConversationKey, binding?: BindingRecord): SessionStart;
  recordSystem(sessionId: string, key: string, text: string): Promise<void>;
  reject(msg: NormalizedInbound, workflowId: string, reason: RejectReason, reply: string | undefined, data?: Record<string, unknown>): Promise<IngressResult>;
  storeAttachments(pending: PendingAttachment[]): Promise<{ refs: AttachmentRef[]; refused: string[] }>;
  runCommand(msg: NormalizedInbound, cmd: ParsedCommand, conversation: ConversationKey, actor: Actor, binding: BindingRecord | undefined): Promise<string | undefined>;
}

export type Stop = { stop: IngressResult };

/** An accepted message and what follows from its text. */
export interface Accepted {
  msg: NormalizedInbound;
  conversation: ConversationKey;
  workflowId: string;
  key: string;
  command: ParsedCommand | undefined;
  governed: boolean;
  dm: boolean;
}

/** An admitted message: who sent it and the chat's binding. */
export interface Admitted extends Accepted {
  who: Actor;
  binding: BindingRecord | undefined;
}

/** A recorded message: its transcript seq and files. */
export interface Persisted {
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
      ...(s.deps.handoffAcceptMs !== undefined ? { acceptMs: s.deps.handoffAcceptMs } : {}),
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

/** The way in, step by step: accept, admit, persist, route (each may end it with its answer). */
export async function handleInbound(s: IngressSteps, raw: InboundMessage, opts: HandleOptions): Promise<IngressResult> {
  const accepted = await accept(s, raw, opts);
  if ('stop' in accepted) return accepted.stop;
  const admitted = await admit(s, accepted);
  if ('stop' in admitted) return admitted.stop;
  const persisted = await persist(s, admitted, opts);
  if ('stop' in persisted) return persisted.stop;
  return route(s, admitted, persisted);
}
