/**
 * The chat turn's activities (the model step, tools and approvals, delivery, the progress
 * panel), created from injected dependencies; activities/index.ts composes them with the repo
 * change's, the objective run's and the knowledge index's. Workflows import only the type of
 * `createActivities`.
 */
import { activityInfo, Context } from '@temporalio/activity';
import { createRetriever, groundingText, type Grounding, type RetrievalLimits, type Retriever } from '../domain/knowledge/grounding.js';
import type { KnowledgeIndex } from '../domain/knowledge/index-store.js';
import { createPromptLayers, layeredSystemPrompt, type PromptLayer, type PromptLayers } from '../domain/knowledge/prompt-layers.js';
import { resolveInWorkspace, WorkspacePathError } from '../domain/knowledge/paths.js';
import type { MemoryApproval, MemoryRow } from '../domain/knowledge/memory.js';
import { createSkillMatcher } from '../domain/knowledge/skills.js';
import { createTurnKnowledge, type SkillUse, type TurnKnowledge } from '../domain/knowledge/turn-knowledge.js';
import { readFile } from 'node:fs/promises';
import { ApplicationFailure, ApplicationFailureCategory } from '@temporalio/common';
import { tool, zodSchema, type ModelMessage, type ToolSet } from 'ai';
import type { Logger } from 'pino';
import { approvalIdFor, type ConversationKey } from '../common/ids.js';
import type { AttachmentRef } from '../common/schemas.js';
import { approvalRequired, DEFAULT_APPROVAL_TOOLS, isActionTool, TOOLS } from '../common/tools.js';
import { lowestRole, type Role } from '../common/roles.js';
import type { ScratchRef, SessionSettings, TokenUsage, ToolCallRef, WorkingSet } from '../workflows/types.js';
import type { LimitSettings } from '../domain/limits.js';
import { proposalRefusal, resolveActionSettings, type ActionOptions, type StartRepoChange } from '../domain/actions.js';
import { getBlobText, putBlob } from '../domain/blobs.js';
import type { Db } from '../domain/db.js';
import { askAdminsToApprove } from '../domain/governance.js';
import { buildPrompt } from '../domain/prompt.js';
import { neutralise } from '../common/untrusted.js';
import { classifyModelError, ModelNotConfiguredError, runModelStep, type createModelRegistry, type ModelToolCall, type SpendContext, type SpendScopes, withStepKey } from '../domain/model.js';
import { isObjectiveTurn, turnScopes } from '../domain/spend-scopes.js';
import { clearPanel, deliverOnce, DeliveryError, lastSentPart, updatePanel, type Senders } from '../domain/outbox.js';
import { receiptsByKeys, sessionCommandsSent, writeReceipt, writeReceipts, type ReceiptInput } from '../domain/receipts.js';
import { approvalNotices, createApproval, decideApproval, findApprovalRow, loadApprovalRow } from '../domain/store/approvals.js';
import { findSession } from '../domain/store/sessions.js';
import { faultPoint } from '../common/fault-points.js';
import { recordTurn } from '../common/metrics.js';
import type { RepoChangeSettings } from './changes.js';
import { viewProposal } from '../domain/actions/proposals.js';
import { approvalRequestText } from '../domain/actions/request-text.js';
import { heldSecretRefusal, heldSecrets, maskHeldSecretsDeep } from '../domain/secrets.js';
import { redact } from '../domain/redaction.js';
import { loadToolCall } from '../domain/tools/calls.js';
import { describeToolCall, runValidatedTool, toolResultMessage, validateToolCall, type WorkspaceAccess } from '../domain/tools.js';
import { mcpDisplayName, parseMcpWireName } from '../common/mcp.js';
import type { McpCatalogue, McpTools } from '../domain/mcp/tools.js';
import { personOf } from '../domain/knowledge/turn-knowledge.js';
import { z } from 'zod';
import { messageByKey, messagesByKeys } from '../domain/transcript.js';
import { replyGateQuery } from '../workflows/messages.js';
import { liveDraftWriter } from '../domain/live-drafts.js';

export interface ToolPolicy {
  /** Tools that wait for an admin's approval before they run ("*": every tool). */
  approvalTools: readonly string[];
  /** How long an approval waits before it counts as denied. */
  approvalTimeoutMs: number;
  /** The person whose message led to a proposal may not approve it (default true). */
  forbidSelfApproval?: boolean;
}

export const DEFAULT_TOOL_POLICY: ToolPolicy = { approvalTools: DEFAULT_APPROVAL_TOOLS, approvalTimeoutMs: 60 * 60_000, forbidSelfApproval: true };

export { approvalRequired } from '../common/tools.js';

/**
 * The tools offered to the model: declared only (no execute), Steward runs them as activities.
 * Each input schema is wrapped once (`zodSchema`): the wrapper converts it to JSON Schema on
 * first use and keeps the result, where a bare zod schema would be converted again at every
 * model step (the AI SDK wraps it afresh each call).
 */
const MODEL_TOOLS: ToolSet = {
  save_note: tool({ description: TOOLS.save_note.description, inputSchema: zodSchema(TOOLS.save_note.input) }),
  send_file: tool({ description: TOOLS.send_file.description, inputSchema: zodSchema(TOOLS.send_file.input) }),
  post_to_chat: tool({ description: TOOLS.post_to_chat.description, inputSchema: zodSchema(TOOLS.post_to_chat.input) }),
  http_request: tool({ description: TOOLS.http_request.description, inputSchema: zodSchema(TOOLS.http_request.input) }),
  send_email: tool({ description: TOOLS.send_email.description, inputSchema: zodSchema(TOOLS.send_email.input) }),
  run_command: tool({ description: TOOLS.run_command.description, inputSchema: zodSchema(TOOLS.run_command.input) }),
  start_repo_change: tool({ description: TOOLS.start_repo_change.description, inputSchema: zodSchema(TOOLS.start_repo_change.input) }),
};

/** The tools where memories are kept (a knowledge index): the above and remember. */
const MODEL_TOOLS_WITH_MEMORY: ToolSet = {
  ...MODEL_TOOLS,
  remember: tool({ description: TOOLS.remember.description, inputSchema: zodSchema(TOOLS.remember.input) }),
};

/** The tools of a chat with a workspace: the above and the two that read it. */
const MODEL_TOOLS_WITH_WORKSPACE: ToolSet = {
  ...MODEL_TOOLS_WITH_MEMORY,
  search_workspace: tool({ description: TOOLS.search_workspace.description, inputSchema: zodSchema(TOOLS.search_workspace.input) }),
  read_workspace_file: tool({ description: TOOLS.read_workspace_file.description, inputSchema: zodSchema(TOOLS.read_workspace_file.input) }),
};

export interface ActivityDeps {
  db: Db;
  models: ReturnType<typeof createModelRegistry>;
  systemPrompt: string;
  senders?: Senders;
  log?: Logger;
  /** Called after a message lands in a transcript (live updates for adapters). */
  onTranscript?: (sessionId: string, role: 'user' | 'assistant' | 'system') => void;
  /** How often the model activity heartbeats while it waits and streams. */
  heartbeatEveryMs?: number;
  /** STEWARD_MODEL_STREAM: stream model steps (the heartbeat then tells how many characters have come); else one plain request each. */
  streamModel?: boolean;
  toolPolicy?: ToolPolicy;
  /** Link to a run in the Temporal UI, for admin notifications. */
  runLink?: (workflowId: string) => string | undefined;
  /** Governed repository changes: global policy, sandbox binds, GitHub API, models. */
  repoChanges?: RepoChangeSettings;
  /** Proposed actions: SMTP, the HTTP policy, the command allowlist (defaults for the rest). */
  actions?: ActionOptions;
  /** Starts a repository change for an approved start_repo_change (the ChangeService's startChange); absent, it is refused. */
  startRepoChange?: StartRepoChange;
  /** The model an objective uses when it names none. */
  defaultModel?: string;
  /** The workspaces' knowledge index (opened on first use); absent, indexing is refused and no turn is grounded. */
  knowledge?: () => Promise<KnowledgeIndex>;
  /** Grounding limits (results, bytes per excerpt, bytes in all); DEFAULT_RETRIEVAL when absent. */
  retrieval?: RetrievalLimits;
  /** The operator's layer of the system prompt (STEWARD_PROMPT_FILE), read when it changes. */
  promptFile?: string;
  /** The operator's skills folder (STEWARD_SKILLS_DIR): `<skill>/SKILL.md` runbooks; workspaces add their `skills/`. */
  skillsDir?: string;
  /** Whose memory proposals wait for an admin (STEWARD_MEMORY_APPROVAL; default members). */
  memoryApproval?: MemoryApproval;
  /** Memories recalled per model step at most (STEWARD_MEMORY_RECALL; default 3, 0 turns recall off). */
  memoryRecall?: number;
  /** Tools from the registered MCP servers; absent: none are offered. */
  mcp?: McpTools;
  /** The limits of the paths that cause model calls (domain/limits.ts; objective runs here); DEFAULT_LIMITS when absent. */
  limits?: LimitSettings;
}

export interface ModelStepInput {
  sessionId: string;
  turnId: string;
  conversation: ConversationKey;
  step: number;
  inbound: string[];
  workingSet: WorkingSet;
  settings: SessionSettings;
  steers: string[];
  draftHash?: string;
  /** The turn's tool exchange so far. */
  scratch?: ScratchRef[];
  /** Everyone who shaped the turn (its senders and steerers); absent in turns from before the set: the last sender. */
  requesters?: string[];
  /** A chat turn's step (patch `steward-deliver-in-step`): a final answer is delivered by the step itself when the session allows (replyGateQuery). */
  deliverFinal?: DeliverFinal;
}

/** What a step needs to deliver the turn's reply itself (the turn's delivery input, less what the step makes). */
export interface DeliverFinal {
  /** The turn's reply key (replyKey). */
  key: string;
  /** The turn's usage before this step: the `turn.end` receipt records it with the step's. */
  usageBefore: TokenUsage;
  /** Files the turn's tools attached to the reply. */
  attachments?: AttachmentRef[];
  /** Remove the progress panel after the reply (Telegram, Discord). */
  clearPanel?: boolean;
  /** The session's count of marked commands when it scheduled the step (absent: unknown, the session is asked). */
  commandsTaken?: number;
}

export type ModelStepResult =
  | {
      kind: 'output';
      outputHash: string;
      finishReason: string;
      usage: TokenUsage;
      chars: number;
      /** Present when the model called tools: the assistant message (text and calls) as a blob. */
      messageHash?: string;
      toolCalls?: ToolCallRef[];
      /** Skills injected into this step's prompt (name -> version), for the session's ledger. */
      skills?: Record<string, string>;
      /** The step delivered this answer as the turn's reply (ModelStepInput.deliverFinal): the turn ends without delivering it. */
      delivered?: boolean;
    }
  | { kind: 'not-configured'; message: string; usage: TokenUsage };

export interface ToolCallInput {
  sessionId: string;
  turnId: string;
  conversation: ConversationKey;
  messageHash: string;
  toolCallId: string;
}

export interface RunToolInput extends ToolCallInput {
  /** Do not run it: tell the model why (denied, expired, invalid input). */
  refused?: string;
  /** The identity (or user name) whose message led to the call: a memory's proposer. */
  requestedBy?: string;
  /** Everyone who shaped the turn (identity ids, or user names): a memory waits unless each may approve it; a change it starts carries them. Absent: `requestedBy` alone. */
  requesters?: string[];
}

export interface RunToolResult {
  resultHash: string;
  ok: boolean;
  note?: string;
  attachment?: AttachmentRef;
}

export interface RequestApprovalInput extends ToolCallInput {
  /** The sender of the batch's last message. */
  requestedBy?: string;
  /** Everyone who shaped the turn: none of them may approve (absent: `requestedBy` alone). */
  requesters?: string[];
}

/** The requester set an activity was given: the set, else the one requester of a turn from before it. */
function requesterSet(input: { requestedBy?: string; requesters?: string[] }): string[] {
  return input.requesters ?? (input.requestedBy ? [input.requestedBy] : []);
}

export interface SettleApprovalInput {
  approvalId: string;
  decision: 'approved' | 'denied' | 'expired' | 'cancelled';
  by: string;
  byName: string;
  reason?: string;
}

export interface ProgressInput {
  turnId: string;
  conversation: ConversationKey;
  text: string;
  important?: boolean;
}

export interface DeliverInput {
  key: string;
  sessionId: string;
  conversation: ConversationKey;
  kind: 'reply' | 'notice';
  turnId?: string;
  blobHash?: string;
  text?: string;
  attachments?: AttachmentRef[];
  usage?: TokenUsage;
  steps?: number;
  /** A turn's end: how it ended (replied, budget-refused, ...), for its `turn.end` receipt (absent in older histories). */
  outcome?: string;
}

/** A platform failure as the Temporal failure the retry policy acts on (a 429 waits as long as asked). */
function deliveryFailure(err: unknown): unknown {
  if (!(err instanceof DeliveryError)) return err;
  return ApplicationFailure.create({
    type: err.retryAfterMs !== undefined ? 'DeliveryRateLimited' : err.permanent ? 'DeliveryRefused' : 'DeliveryFailed',
    message: err.message,
    nonRetryable: err.permanent,
    ...(err.retryAfterMs !== undefined ? { nextRetryDelay: Math.max(err.retryAfterMs, 100) } : {}),
  });
}

async function platformCall<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw deliveryFailure(err);
  }
}

function workflowRef(info: ReturnType<typeof activityInfo>, sessionId: string) {
  return {
    sessionId,
    ...(info.workflowExecution ? { workflowId: info.workflowExecution.workflowId, runId: info.workflowExecution.runId } : {}),
  };
}

const ZERO: TokenUsage = { input: 0, output: 0, total: 0 };

/** Map a classified model error to the Temporal failure type the turn's retry policy knows. */
function failureType(status: number | undefined, retryable: boolean, fallback: string): string {
  // a budget refusal keeps its type: the turn waits for a raise on it (workflows/chat/turn-loop.ts)
  if (fallback === 'ModelBudgetExceeded') return fallback;
  if (status === 401 || status === 403) return 'ModelAuth';
  if (status === 404) return 'ModelNotFound';
  if (!retryable) return 'ModelBadRequest';
  if (status === 429) return 'ModelRateLimited';
  return fallback || 'ModelUnavailable';
}

/** What every chat activity works with: the dependencies and the settings derived from them once. */
export interface ChatContext extends ActivityDeps {
  senders: Senders;
  /** The workspace excerpts for a chat's message (present when the deps have a knowledge index). */
  retriever?: Retriever;
  /** The system prompt's layers for a chat: Steward's, the operator's, the workspace's, the chat's. */
  layers: PromptLayers;
  /** Skills, memory recall and the remember tool (present with a knowledge index). */
  turnKnowledge?: TurnKnowledge;
  beatMs: number;
  policy: ToolPolicy;
  actions: ReturnType<typeof resolveActionSettings>;
  /** The spend scopes of recent turns (by turn and requester set): a turn's steps look them up once. */
  scopesOfTurns: Map<string, Promise<SpendScopes>>;
}

/** The chat's workspace for the workspace tools, or undefined (no knowledge index, no workspace). */
async function workspaceAccess(c: ChatContext, chat: ConversationKey): Promise<WorkspaceAccess | undefined> {
  if (!c.retriever || !c.knowledge) return undefined;
  const ws = await c.retriever.workspaceOf(chat);
  if (!ws) return undefined;
  const knowledge = c.knowledge;
  return {
    name: ws.name,
    search: async (query, limit) => (await knowledge()).search(ws.name, query, limit),
    async read(relative, maxBytes) {
      const file = await resolveInWorkspace(ws.root, relative);
      const bytes = await readFile(file.path);
      if (bytes.includes(0)) throw new WorkspacePathError(`${file.relative} is not a text file`);
      return { path: file.relative, text: bytes.subarray(0, maxBytes).toString('utf8'), bytes: bytes.length };
    },
  };
}

/** The model messages of a step's scratch (earlier steps of this turn), by reference. */
async function loadScratch(db: Db, refs: ScratchRef[] | undefined): Promise<ModelMessage[]> {
  const out: ModelMessage[] = [];
  for (const r of refs ?? []) out.push(JSON.parse(await getBlobText(db, r.hash)) as ModelMessage);
  return out;
}

/**
 * What history keeps of a model's tool call: its id and name, Steward's own validation verdict
 * and the approval policy's, never the input. A proposed action that could not run anyway is
 * refused here, not put to an admin.
 */
function toolCallRef(c: ChatContext, call: ModelToolCall, mcp?: { catalogue: McpCatalogue; role: Role | undefined }): ToolCallRef {
  // any tool, Steward's or an MCP server's: a call carrying a secret Steward holds is refused here, never put to an admin
  const held = heldSecretRefusal(call.input, c.actions.heldSecrets);
  if (held !== undefined) return { id: call.toolCallId, name: call.toolName, needsApproval: false, error: `The call of ${call.toolName} was refused: ${held}.` };
  if (c.mcp && mcp && parseMcpWireName(call.toolName)) {
    // a tool of an MCP server: its JSON Schema and its approval policy decide
    const m = c.mcp.verdict(mcp.catalogue, call.toolName, call.input, c.policy.approvalTools, mcp.role);
    const error = !m.ok ? m.error : call.invalid ? `The call could not be read: ${call.error ?? 'invalid'}` : undefined;
    const wait = error === undefined && m.ok && m.needsApproval;
    return {
      id: call.toolCallId,
      name: call.toolName,
      needsApproval: wait,
      ...(wait ? { forbidSelfApproval: c.policy.forbidSelfApproval !== false } : {}),
      ...(error !== undefined ? { error } : {}),
    };
  }
  // Steward validates every call itself (the SDK's verdict on an invalid one is verbose)
  let own = validateToolCall(call.toolName, call.input);
  const refusal = own.ok && isActionTool(own.tool) ? proposalRefusal(own.tool, own.input, c.actions, { startRepoChange: c.startRepoChange !== undefined }) : undefined;
  if (refusal !== undefined) own = { ok: false, error: `The ${call.toolName} action cannot be proposed: ${refusal}.` };
  const v = call.invalid && own.ok ? { ok: false as const, error: `The call could not be read: ${call.error ?? 'invalid'}` } : own;
  const approval = v.ok && approvalRequired(c.policy, call.toolName);
  return {
    id: call.toolCallId,
    name: call.toolName,
    needsApproval: approval,
    ...(approval ? { forbidSelfApproval: c.policy.forbidSelfApproval !== false } : {}),
    ...(v.ok ? {} : { error: v.error }),
  };
}

/** The chat's MCP tools for a model step, and the role of the person whose message the turn answers (approval by role). */
async function mcpCatalogue(c: ChatContext, input: ModelStepInput): Promise<{ catalogue: McpCatalogue; role: Role | undefined }> {
  const ws = c.retriever ? await c.retriever.workspaceOf(input.conversation) : undefined;
  const catalogue = await c.mcp!.catalogue(ws?.name ?? null);
  // no MCP tools for this chat (the usual case): no lookup of the sender
  if (catalogue.tools.size === 0) return { catalogue, role: undefined };
  if (input.requesters) {
    // everyone who shaped the turn: a tool waits unless the least of them may call it unasked
    const roles = await Promise.all(input.requesters.map(async (who) => (await personOf(c.db, who)).role));
    return { catalogue, role: lowestRole(roles) };
  }
  const sender = (await messagesByKeys(c.db, input.inbound)).at(-1);
  const role = sender ? (await personOf(c.db, sender.identityId)).role : undefined;
  return { catalogue, role };
}

/** The key of a turn's model step: the turn and the step, the same on every retry of the activity. */
const stepKeyOf = (input: Pick<ModelStepInput, 'turnId' | 'step'>) => `model:${input.turnId}:${input.step}`;

/**
 * Whom a turn's model step is spent for: keyed by the turn and its step; the chat's binding, the
 * requester set's identities (before the set: the batch's senders), the objective of an
 * objective's run, the chat's workspace.
 */
function turnSpend(c: ChatContext, input: ModelStepInput): SpendContext {
  return {
    key: stepKeyOf(input),
    kind: isObjectiveTurn(input.turnId) ? 'objective' : 'chat',
    scopes: () => {
      // looked up once per turn and requester set (a steerer joins it: looked up again)
      const memo = `${input.turnId}\u0000${(input.requesters ?? []).join('\u0000')}`;
      const known = c.scopesOfTurns.get(memo);
      if (known) return known;
      const found = (async () => {
        const requesters = input.requesters ?? (await messagesByKeys(c.db, input.inbound)).flatMap((m) => (m.identityId ? [m.identityId] : []));
        return turnScopes(c.db, { conversation: input.conversation, turnId: input.turnId, requesters });
      })();
      // a failed lookup is forgotten; at most 256 turns are remembered
      void found.catch(() => c.scopesOfTurns.delete(memo));
      if (c.scopesOfTurns.size >= 256) c.scopesOfTurns.delete(c.scopesOfTurns.keys().next().value as string);
      c.scopesOfTurns.set(memo, found);
      return found;
    },
  };
}

/**
 * How a model step runs: the chat turn's (receipts, the live draft, the turn's spend) or a
 * counterfactual replay's (activities/replay.ts: no receipt, no live draft, the replay's spend,
 * and the alternative's prompt, skills and grounding). The prompt building and the model call
 * are the same code either way.
 */
export interface StepOptions {
  /** Write the turn's receipts (turn.start, model.call, knowledge.context, skill.used, memory.recall). */
  receipts: boolean;
  /** Write the streamed text for the chat event stream (when the model streams). */
  liveDraft: boolean;
  spend: SpendContext;
  /** The system prompt from the chat's layers; absent: the layers as configured (layeredSystemPrompt). */
  systemPrompt?: (layers: PromptLayer[]) => string;
  /** Inject matching skills (default true). */
  skills?: boolean;
  /** Ground the step in the chat's workspace (default true). */
  ground?: boolean;
  /** The memories the step recalls, instead of searching them now (a replay: what the recorded step recalled). */
  recall?: () => Promise<MemoryRow[]>;
}

/** A model step's result, and how long the model call took. */
export interface StepOutcome {
  result: ModelStepResult;
  ms: number;
}

/**
 * One model step of a turn: build the prompt from references, stream the model's answer, store
 * it. A chat turn's step whose answer ends the turn delivers it (`deliverFinal`, patch
 * `steward-deliver-in-step`; deliverFromStep); retried after its delivery began, it finishes
 * that delivery instead of asking the model again.
 */
async function modelStep(c: ChatContext, input: ModelStepInput): Promise<ModelStepResult> {
  const gate = input.deliverFinal;
  if (gate && activityInfo().attempt > 1) {
    const earlier = await deliveredByEarlierAttempt(c, input, gate);
    if (earlier) return earlier;
  }
  const result = (await modelStepWith(c, input, { receipts: true, liveDraft: c.streamModel === true, spend: turnSpend(c, input) })).result;
  if (!gate || result.kind !== 'output' || (result.toolCalls?.length ?? 0) > 0) return result;
  return (await deliverFromStep(c, input, gate, result, true)) ? { ...result, delivered: true } : result;
}

/**
 * No /steer, /stop or /new was sent to the session since it scheduled the step, nor is one on
 * its way: its `session.command` receipts (each written before its command is sent) number
 * exactly the marked commands the session had taken in then. One command more, in flight or
 * taken in during the step, makes them outnumber the count; then the session is asked.
 */
async function nothingSentSince(c: ChatContext, sessionId: string, gate: DeliverFinal): Promise<boolean> {
  if (gate.commandsTaken === undefined) return false;
  return (await sessionCommandsSent(c.db, sessionId)) === gate.commandsTaken;
}

/** How long a step waits for the session's answer before it leaves the delivery to the turn. */
const REPLY_GATE_MS = 5_000;

/**
 * Deliver a step's final answer as the turn's reply: true when delivered. The session is asked
 * first (replyGateQuery, when `ask`): it says no when steering waits for another step or the turn
 * was stopped, and no answer in time counts as no. Any failure of the delivery leaves it to the
 * turn as well (false): its local activity delivers under the same key, so what this attempt
 * recorded or sent is not sent again. Heartbeats while it works, so a slow platform does not
 * time the step out.
 */
async function deliverFromStep(c: ChatContext, input: ModelStepInput, gate: DeliverFinal, result: { outputHash: string; usage: TokenUsage }, ask: boolean): Promise<boolean> {
  const ctx = Context.current();
  const wf = activityInfo().workflowExecution;
  if (!wf || ctx.cancellationSignal.aborted) return false;
  const beat = setInterval(() => ctx.heartbeat({ step: input.step, delivering: true }), c.beatMs);
  try {
    if (ask && !(await nothingSentSince(c, input.sessionId, gate))) {
      const which = { turnId: input.turnId, step: input.step };
      const deadline = AbortSignal.any([AbortSignal.timeout(REPLY_GATE_MS), ctx.cancellationSignal]);
      const may = await ctx.client.withAbortSignal(deadline, () => ctx.client.workflow.getHandle(wf.workflowId, wf.runId).query(replyGateQuery, which)).catch((err: unknown) => {
        c.log?.debug({ err, turnId: input.turnId }, 'the session did not answer the reply gate: the turn delivers the reply');
        return false;
      });
      if (may !== true || ctx.cancellationSignal.aborted) return false;
    }
    faultPoint('step.delivering');
    const u = gate.usageBefore;
    await deliver(c, {
      key: gate.key,
      sessionId: input.sessionId,
      conversation: input.conversation,
      turnId: input.turnId,
      kind: 'reply',
      blobHash: result.outputHash,
      ...(gate.attachments?.length ? { attachments: gate.attachments } : {}),
      usage: { input: u.input + result.usage.input, output: u.output + result.usage.output, total: u.total + result.usage.total },
      steps: input.step,
    });
  } catch (err) {
    c.log?.warn({ err, turnId: input.turnId }, 'delivering the reply from its model step failed: the turn delivers it');
    return false;
  } finally {
    clearInterval(beat);
  }
  faultPoint('step.delivered');
  if (gate.clearPanel) {
    // a panel left behind is cosmetic
    await clearProgress(c, { turnId: input.turnId, conversation: input.conversation }).catch(() => undefined);
  }
  return true;
}

/**
 * A retried step whose earlier attempt recorded the reply (its delivery began: the session had
 * said yes): that attempt's answer, from its `model.call` receipt, with the delivery finished
 * (delivered: false when it fails again, so the turn finishes it). Undefined when no earlier
 * attempt recorded the reply: the step runs as usual.
 */
async function deliveredByEarlierAttempt(c: ChatContext, input: ModelStepInput, gate: DeliverFinal): Promise<ModelStepResult | undefined> {
  const reply = await messageByKey(c.db, gate.key);
  if (!reply) return undefined;
  const attempts = Array.from({ length: activityInfo().attempt - 1 }, (_, i) => `${input.turnId}:model:${input.step}:${i + 1}`);
  const answered = (await receiptsByKeys(c.db, attempts)).map((r) => ModelCallAnswer.safeParse(r.data)).flatMap((p) => (p.success && p.data.outputHash ? [p.data] : []));
  const last = answered.at(-1);
  const outputHash = last?.outputHash ?? (await putBlob(c.db, reply.text));
  const usage = last?.usage ?? ZERO;
  const result = { kind: 'output' as const, outputHash, finishReason: last?.finishReason ?? 'stop', usage, chars: last?.chars ?? reply.text.length, ...(last?.skills ? { skills: last.skills } : {}) };
  return { ...result, delivered: await deliverFromStep(c, input, gate, result, false) };
}

/** What an answered step's `model.call` receipt tells a retried attempt. */
const ModelCallAnswer = z.object({
  outputHash: z.string().optional(),
  finishReason: z.string().optional(),
  usage: z.object({ input: z.number(), output: z.number(), total: z.number() }).optional(),
  chars: z.number().optional(),
  skills: z.record(z.string(), z.string()).optional(),
});

/** modelStep with its effects chosen (StepOptions): the production step and a replay's. */
export async function modelStepWith(c: ChatContext, input: ModelStepInput, o: StepOptions): Promise<StepOutcome> {
  const ctx = Context.current();
  const info = activityInfo();
  const wf = workflowRef(info, input.sessionId);
  if (input.step === 1 && o.receipts) {
    await writeReceipt(c.db, {
      key: `${input.turnId}:start`,
      kind: 'turn.start',
      ...wf,
      data: { turnId: input.turnId, inbound: input.inbound.length, model: input.settings.model },
    });
  }
  let grounding: Grounding | undefined;
  let skillUse: SkillUse | undefined;
  let recalled: string[] = [];
  const ledger = input.workingSet.skills ?? {};
  const tk = c.turnKnowledge;
  const prompt = await buildPrompt(c.db, {
    ...(c.retriever && o.ground !== false
      ? {
          ground: async (query: string) => {
            grounding = await c.retriever!.ground(input.conversation, query);
            return grounding ? groundingText(grounding) : undefined;
          },
        }
      : {}),
    ...(tk
      ? {
          ...(o.skills === false
            ? {}
            : {
                skills: async (query: string, identityId: string | null) => {
                  skillUse = await tk.skillsFor(input.conversation, query, identityId, ledger, input.requesters);
                  return tk.skillsText(skillUse, ledger);
                },
              }),
          recall: async (query: string) => {
            const rows = o.recall ? await o.recall() : await tk.recall(input.conversation, query);
            recalled = rows.map((m) => m.id);
            return tk.recallText(rows);
          },
        }
      : {}),
    systemPrompt: (o.systemPrompt ?? layeredSystemPrompt)(await c.layers.layers(input.conversation)),
    workingSet: input.workingSet,
    inbound: input.inbound,
    steers: input.steers,
    ...(input.draftHash ? { draft: await getBlobText(c.db, input.draftHash) } : {}),
    scratch: await loadScratch(c.db, input.scratch),
  });
  if (o.receipts) await knowledgeReceipts(c, input, wf, skillUse, recalled);
  if (grounding && o.receipts) {
    // which sections shaped this step (their text stays in the workspace)
    await writeReceipt(c.db, {
      key: `${input.turnId}:context:${input.step}`,
      kind: 'knowledge.context',
      ...wf,
      data: { turnId: input.turnId, step: input.step, workspace: grounding.workspace, sections: grounding.hits.map((h) => ({ path: h.path, heading: h.heading, lines: `${h.startLine}-${h.endLine}`, score: Number(h.score.toFixed(4)), bytes: Buffer.byteLength(h.excerpt, 'utf8') })) },
    });
  }
  let chars = 0;
  // No heartbeat up front: a step that answers within one beat costs the server no
  // heartbeat write (a third of its persistence writes per turn). The first beat, after
  // `c.beatMs`, is sent at once, and its response carries a cancellation (/stop) requested
  // before it.
  const beat = setInterval(() => ctx.heartbeat({ step: input.step, chars }), c.beatMs);
  const started = Date.now();
  // the text as it streams, for the chat event stream's `partial` events (throttled; nothing for a short step)
  const draft = c.streamModel && o.liveDraft
    ? liveDraftWriter(c.db, { sessionId: input.sessionId, turnId: input.turnId, stepKey: stepKeyOf(input) }, { onError: (err) => c.log?.debug({ err, turnId: input.turnId }, 'writing the live draft failed (the reply is not affected)') })
    : undefined;
  try {
    const own = (await workspaceAccess(c, input.conversation)) ? MODEL_TOOLS_WITH_WORKSPACE : c.turnKnowledge ? MODEL_TOOLS_WITH_MEMORY : MODEL_TOOLS;
    // the chat's MCP tools (listed under the heartbeat: a server may take a while to start)
    const mcp = c.mcp ? await mcpCatalogue(c, input) : undefined;
    const out = await runModelStep(
      c.models,
      {
        model: input.settings.model,
        think: input.settings.think,
        messages: prompt,
        tools: mcp && mcp.catalogue.tools.size > 0 ? { ...mcp.catalogue.toolSet, ...own } : own,
        spend: o.spend,
      },
      {
        signal: ctx.cancellationSignal,
        ...(c.streamModel
          ? {
              onDelta: (soFar: string) => {
                chars = soFar.length;
                draft?.update(soFar);
              },
            }
          : {}),
      },
    );
    const outputHash = await putBlob(c.db, out.text);
    const usage = { input: out.usage.inputTokens, output: out.usage.outputTokens, total: out.usage.totalTokens };
    let tools: { messageHash: string; toolCalls: ToolCallRef[] } | undefined;
    if (out.toolCalls.length > 0) {
      // The step's message (its text and calls) is stored; history gets the call ids, names,
      // validation errors and the approval policy's verdict, never the inputs.
      const message: ModelMessage = {
        role: 'assistant',
        content: [
          ...(out.text ? [{ type: 'text' as const, text: out.text }] : []),
          ...out.toolCalls.map((c) => ({ type: 'tool-call' as const, toolCallId: c.toolCallId, toolName: c.toolName, input: c.input ?? {} })),
        ],
      };
      const messageHash = await putBlob(c.db, JSON.stringify(message), 'application/json');
      const toolCalls = out.toolCalls.map((call) => toolCallRef(c, call, mcp));
      tools = { messageHash, toolCalls };
    }
    const ms = Date.now() - started;
    const injected = skillUse?.injected.length ? { skills: Object.fromEntries(skillUse.injected.map((s) => [s.name, s.version])) } : {};
    if (o.receipts) {
      await writeReceipt(c.db, {
        key: `${input.turnId}:model:${input.step}:${info.attempt}`,
        kind: 'model.call',
        ...wf,
        data: {
          turnId: input.turnId,
          step: input.step,
          attempt: info.attempt,
          model: out.model,
          finishReason: out.finishReason,
          usage,
          ms,
          outputHash,
          chars: out.text.length,
          ...(tools ? { toolCalls: tools.toolCalls.map((t) => t.name) } : {}),
          ...injected,
        },
      });
    }
    return { result: { kind: 'output', outputHash, finishReason: out.finishReason, usage, chars: out.text.length, ...(tools ?? {}), ...injected }, ms };
  } catch (err) {
    if (ctx.cancellationSignal.aborted) throw ctx.cancellationSignal.reason ?? err;
    if (err instanceof ModelNotConfiguredError) return { result: { kind: 'not-configured', message: err.message, usage: ZERO }, ms: Date.now() - started };
    const e = classifyModelError(err);
    if (o.receipts) {
      await writeReceipt(c.db, {
        key: `${input.turnId}:model:${input.step}:${info.attempt}`,
        kind: 'model.call',
        ...wf,
        data: { turnId: input.turnId, step: input.step, attempt: info.attempt, model: input.settings.model, error: e.message, status: e.status, retryable: e.retryable, ms: Date.now() - started },
      });
    }
    throw ApplicationFailure.create({
      type: failureType(e.status, e.retryable, e.type),
      message: e.message,
      nonRetryable: !e.retryable,
      // which budget refused, what is left and when it renews (no secrets: ids, amounts, times);
      // an expected outcome, not a fault: logged at debug level, not counted as a failed activity
      ...(e.budget ? { details: [e.budget], category: ApplicationFailureCategory.BENIGN } : {}),
    });
  } finally {
    clearInterval(beat);
    if (draft) await draft.finish();
  }
}

/** Deliver one outbound message exactly once (keyed), and record it. */
async function deliver(c: ChatContext, input: DeliverInput): Promise<{ sent: boolean; messageSeq: number }> {
  const info = activityInfo();
  const wf = workflowRef(info, input.sessionId);
  const text = input.blobHash ? await getBlobText(c.db, input.blobHash) : (input.text ?? '');
  const outcome = await platformCall(() =>
    deliverOnce(c.db, c.senders, {
      key: input.key,
      sessionId: input.sessionId,
      conversation: input.conversation,
      kind: input.kind,
      text,
      ...(input.turnId ? { turnId: input.turnId } : {}),
      ...(input.attachments?.length ? { attachments: input.attachments } : {}),
    }),
  );
  // the delivery's receipt and, for a turn's answer, the turn's end: one write
  const [firstDelivery, ended] = await writeReceipts(c.db, [
    {
      key: `${input.key}:delivery`,
      kind: 'delivery',
      ...wf,
      data: {
        key: input.key,
        kind: input.kind,
        platform: input.conversation.platform,
        chatId: input.conversation.chatId,
        sent: outcome.sent,
        chars: text.length,
        parts: outcome.externalIds.length,
        ...(input.attachments?.length ? { attachments: input.attachments.length } : {}),
        ...(outcome.failed ? { failed: outcome.failed } : {}),
      },
    },
    ...(input.turnId
      ? [{ key: `${input.turnId}:end`, kind: 'turn.end' as const, ...wf, data: { turnId: input.turnId, kind: input.kind, usage: input.usage ?? ZERO, steps: input.steps ?? 0, ...(input.outcome ? { outcome: input.outcome } : {}) } }]
      : []),
  ]);
  if (input.turnId) {
    if (ended) recordTurn(input.kind === 'reply' ? 'replied' : 'notice');
  } else if (firstDelivery && /:(stopped|failed)$/.test(input.key)) {
    // the session's notice of a turn stopped by /stop, or abandoned after failing
    recordTurn(input.key.endsWith(':stopped') ? 'stopped' : 'abandoned');
  }
  if (outcome.sent) c.onTranscript?.(input.sessionId, input.kind === 'reply' ? 'assistant' : 'system');
  return { sent: outcome.sent, messageSeq: outcome.messageSeq };
}

/** Which skill versions and memories shaped a step (one receipt per skill version per turn). */
async function knowledgeReceipts(c: ChatContext, input: ModelStepInput, wf: ReturnType<typeof workflowRef>, use: SkillUse | undefined, recalled: string[]): Promise<void> {
  const rs = [
    ...(use?.injected ?? []).map((s) => ({ s, injected: true })),
    ...(use?.applied ?? []).map((s) => ({ s, injected: false })),
  ].map(({ s, injected }): ReceiptInput => ({
    key: `${input.turnId}:skill:${s.name}:${s.version}`,
    kind: 'skill.used',
    ...wf,
    data: { turnId: input.turnId, step: input.step, skill: s.name, version: s.version, source: s.source, injected },
  }));
  if (recalled.length > 0) rs.push({ key: `${input.turnId}:memory:${input.step}`, kind: 'memory.recall', ...wf, data: { turnId: input.turnId, step: input.step, memories: recalled } });
  if (rs.length > 0) await writeReceipts(c.db, rs);
}

/** Run one tool call (or tell the model why it was not run). */
async function runTool(c: ChatContext, input: RunToolInput): Promise<RunToolResult> {
  const ctx = Context.current();
  // A heartbeat every second while the call runs (none for a call done within one): its
  // response carries a /stop, which aborts the call through `ctx.cancellationSignal`.
  const beat = setInterval(() => ctx.heartbeat({ tool: input.toolCallId }), TOOL_BEAT_MS);
  try {
    return await runToolBeating(c, input, ctx);
  } finally {
    clearInterval(beat);
  }
}

/** What the model is told of a call the turn refused (denied, expired, invalid): the reason may quote an admin's words, so it is neutralised. */
export function refusalText(reason: string): string {
  return `The action was not run: ${neutralise(reason)}`;
}

/** How often a running tool call heartbeats (the workflow's heartbeat timeout is 8 s). */
const TOOL_BEAT_MS = 1000;

async function runToolBeating(c: ChatContext, input: RunToolInput, ctx: Context): Promise<RunToolResult> {
  const info = activityInfo();
  const wf = workflowRef(info, input.sessionId);
  const call = await loadToolCall(c.db, input.messageHash, input.toolCallId);
  let outcome: { text: string; ok: boolean; note?: string; attachment?: AttachmentRef; detail: Record<string, unknown> };
  const v = validateToolCall(call.toolName, call.input);
  const mcpName = parseMcpWireName(call.toolName);
  // the reason may quote an admin's words or a proposal's values: neutralised like any untrusted text
  const held = input.refused === undefined ? heldSecretRefusal(call.input, c.actions.heldSecrets) : undefined;
  if (input.refused !== undefined) outcome = { text: refusalText(input.refused), ok: false, detail: { refused: input.refused } };
  // the one gate for every tool's arguments (an approval from before a secret was held included): nothing runs with a held secret
  else if (held !== undefined) outcome = { text: `The call was not run: ${held}.`, ok: false, detail: { refused: held } };
  else if (mcpName && c.mcp) outcome = await c.mcp.run({ db: c.db, turnId: input.turnId, signal: ctx.cancellationSignal }, call);
  else if (!v.ok) outcome = { text: v.error, ok: false, detail: { invalid: v.error } };
  else {
    outcome = await runValidatedTool(
      {
        db: c.db,
        senders: c.senders,
        turnId: input.turnId,
        sessionId: input.sessionId,
        conversation: input.conversation,
        actions: c.actions,
        ...(c.startRepoChange ? { startRepoChange: c.startRepoChange } : {}),
        workflow: { ...(wf.workflowId ? { workflowId: wf.workflowId } : {}), ...(wf.runId ? { runId: wf.runId } : {}) },
        ...(input.requesters ? { requesters: input.requesters } : {}),
        ...(await workspaceAccess(c, input.conversation).then((workspace) => (workspace ? { workspace } : {}))),
        ...(c.turnKnowledge
          ? {
              remember: (m) =>
                c.turnKnowledge!.remember(
                  { conversation: input.conversation, sessionId: input.sessionId, turnId: input.turnId, toolCallId: input.toolCallId, ...(input.requestedBy ? { requestedBy: input.requestedBy } : {}), ...(input.requesters ? { requesters: input.requesters } : {}) },
                  m,
                ),
            }
          : {}),
      },
      call,
      v.tool,
    );
  }
  const resultHash = await putBlob(c.db, JSON.stringify(toolResultMessage(call, outcome.text)), 'application/json');
  // an MCP call's approval depends on the requester's role (the server's policy by role): kept for `policy what-if`
  const requesterRole = mcpName && c.mcp ? (input.requestedBy ? (await personOf(c.db, input.requestedBy)).role : null) : undefined;
  await writeReceipt(c.db, {
    key: `${input.turnId}:tool:${input.toolCallId}`,
    kind: 'tool.call',
    ...wf,
    data: {
      turnId: input.turnId,
      tool: mcpName ? mcpDisplayName(mcpName.server, mcpName.tool) : call.toolName,
      toolCallId: input.toolCallId,
      ok: outcome.ok,
      input: redact(call.input),
      ...(redact(outcome.detail) as Record<string, unknown>),
      ...(requesterRole !== undefined ? { requesterRole } : {}),
    },
  });
  return { resultHash, ok: outcome.ok, ...(outcome.note ? { note: outcome.note } : {}), ...(outcome.attachment ? { attachment: outcome.attachment } : {}) };
}

/**
 * Record a proposed action as a pending approval and ask the admins (admin channel, else
 * their DMs) with Approve/Deny buttons. Idempotent: the id follows from the turn and call.
 */
async function requestApproval(c: ChatContext, input: RequestApprovalInput): Promise<{ approvalId: string; timeoutMs: number; summary: string; forbidSelfApproval: boolean }> {
  const info = activityInfo();
  const wf = workflowRef(info, input.sessionId);
  const call = await loadToolCall(c.db, input.messageHash, input.toolCallId);
  const id = approvalIdFor(input.turnId, input.toolCallId);
  // the summary goes to the chat's progress line, the approval row, receipts and history: Steward's secrets masked, secret-looking values redacted
  const held = heldSecrets(c.actions.heldSecrets);
  const summary = describeToolCall(call.toolName, call.input, (v) => redact(maskHeldSecretsDeep(v, held)));
  // exactly what will be sent, every value the model chose; only Steward's own secrets masked
  const view = viewProposal(call.toolName, call.input, { heldSecrets: c.actions.heldSecrets, ...(c.actions.smtp ? { smtpFrom: c.actions.smtp.from } : {}) });
  const forbidSelfApproval = c.policy.forbidSelfApproval !== false;
  const shapedBy = requesterSet(input);
  const spec = Object.values(TOOLS).find((t) => t.name === call.toolName);
  const existing = await findApprovalRow(c.db, id);
  if (existing && (existing.turnId !== input.turnId || existing.toolCallId !== input.toolCallId)) {
    throw ApplicationFailure.create({ type: 'ApprovalIdCollision', message: `approval id ${id} already belongs to another proposal`, nonRetryable: true });
  }
  const row =
    existing ??
    (await createApproval(c.db, {
      id,
      workflowId: info.workflowExecution?.workflowId ?? input.turnId,
      runId: info.workflowExecution?.runId ?? null,
      sessionId: input.sessionId,
      turnId: input.turnId,
      toolCallId: input.toolCallId,
      tool: call.toolName,
      summary,
      payload: view.payload,
      requestHash: view.hash,
      risk: spec?.risk ?? 'caution',
      requestedBy: input.requestedBy ?? null,
      deadline: new Date(Date.now() + c.policy.approvalTimeoutMs),
    }));
  const timeoutMs = Math.max(0, row.deadline.getTime() - Date.now());
  const where = `${input.conversation.platform} chat ${input.conversation.chatId}`;
  const link = c.runLink?.(row.workflowId);
  const text = await approvalRequestText(c.db, {
    id,
    where,
    action: describeToolCall(call.toolName, call.input, (v) => maskHeldSecretsDeep(v, held)),
    view,
    forbidden: forbidSelfApproval ? shapedBy : [],
    deadline: row.deadline,
    link,
  });
  const targets = await platformCall(() => askAdminsToApprove(c.db, c.senders, id, text));
  if (!c.senders[input.conversation.platform]) {
    // no progress panel on this channel: tell the chat in its transcript
    await deliverOnce(c.db, c.senders, {
      key: `approval:${id}:asked`,
      sessionId: input.sessionId,
      conversation: input.conversation,
      kind: 'notice',
      text: `Waiting for an admin to approve: ${summary} (approval ${id}).`,
      turnId: input.turnId,
    });
    c.onTranscript?.(input.sessionId, 'system');
  }
  await writeReceipt(c.db, {
    key: `approval:${id}:requested`,
    kind: 'approval.requested',
    ...wf,
    actor: input.requestedBy,
    data: { approvalId: id, turnId: input.turnId, tool: call.toolName, summary, requestHash: row.requestHash, deadline: row.deadline.toISOString(), notified: targets.length, ...(input.requesters ? { requesters: input.requesters } : {}) },
  });
  return { approvalId: id, timeoutMs, summary, forbidSelfApproval };
}

/** Record the decision (or the deadline), show it on the admins' posts and tell the proposer. */
async function settleApproval(c: ChatContext, input: SettleApprovalInput): Promise<{ reason: string }> {
  const info = activityInfo();
  const row = await loadApprovalRow(c.db, input.approvalId);
  const wf = workflowRef(info, row.sessionId);
  if (row.status === 'pending') {
    await decideApproval(c.db, row.id, { status: input.decision, decidedBy: input.byName, reason: input.reason ?? null });
  }
  const reason =
    input.decision === 'approved'
      ? `approved by ${input.byName}`
      : input.decision === 'denied'
        ? `denied by ${input.byName}${input.reason ? `: ${input.reason}` : ''}`
        : input.decision === 'expired'
          ? `no admin decided before the deadline (${row.deadline.toISOString()}), so it was denied`
          : input.byName; // who or what cancelled it (the turn or the change was stopped)
  await writeReceipt(c.db, {
    key: `approval:${row.id}:decision`,
    kind: 'approval.decision',
    ...wf,
    actor: input.by,
    data: { approvalId: row.id, tool: row.tool, decision: input.decision, by: input.byName, requestHash: row.requestHash, ...(input.reason ? { reason: input.reason } : {}) },
  });
  const verdict = `${input.decision === 'approved' ? 'Approved' : input.decision === 'denied' ? 'Denied' : input.decision === 'expired' ? 'Expired (denied)' : 'Cancelled'}: ${reason}.`;
  for (const n of await approvalNotices(c.db, row.id)) {
    const sender = c.senders[n.platform as keyof Senders];
    const part = await lastSentPart(c.db, n.deliveryKey);
    if (!sender || !part?.externalId) continue;
    const conversation = { platform: n.platform as ConversationKey['platform'], account: n.account, chatId: n.chatId };
    try {
      await sender.edit(conversation, part.externalId, `**Approval ${row.id}**: ${row.summary}\n${verdict}`, null);
    } catch (err) {
      if (!(err instanceof DeliveryError && err.permanent)) throw deliveryFailure(err);
    }
  }
  const session = await findSession(c.db, row.sessionId);
  if (session) {
    const conversation = { platform: session.platform as ConversationKey['platform'], account: session.account, chatId: session.chatId };
    await platformCall(() =>
      deliverOnce(c.db, c.senders, {
        key: `approval:${row.id}:settled`,
        sessionId: row.sessionId,
        conversation,
        kind: 'notice',
        text: `The proposed action (${row.summary}) was ${reason}.`,
        turnId: row.turnId,
      }),
    );
    c.onTranscript?.(row.sessionId, 'system');
  }
  return { reason };
}

/** Post or edit the turn's progress panel (throttled to the platform's edit interval). */
async function updateProgress(c: ChatContext, input: ProgressInput): Promise<string> {
  return platformCall(() => updatePanel(c.db, c.senders, input, (ms) => Context.current().sleep(ms)));
}

/** Remove the turn's progress panel. */
async function clearProgress(c: ChatContext, input: { turnId: string; conversation: ConversationKey }): Promise<string> {
  return platformCall(() => clearPanel(c.db, c.senders, input.turnId, input.conversation));
}

/** The chat activities' context: the dependencies and what is derived from them once (the retriever, the prompt layers, skills and memory). */
export function createChatContext(deps: ActivityDeps): ChatContext {
  // one cached lookup of a chat's workspace for grounding, the prompt layers and the workspace tools
  const retriever = deps.knowledge ? createRetriever({ db: deps.db, knowledge: deps.knowledge, ...(deps.retrieval ? { limits: deps.retrieval } : {}) }) : undefined;
  const c: ChatContext = {
    ...deps,
    scopesOfTurns: new Map(),
    senders: deps.senders ?? {},
    beatMs: deps.heartbeatEveryMs ?? 200,
    policy: deps.toolPolicy ?? DEFAULT_TOOL_POLICY,
    actions: resolveActionSettings(deps.actions),
    layers: createPromptLayers({ db: deps.db, systemPrompt: deps.systemPrompt, ...(deps.promptFile ? { operatorFile: deps.promptFile } : {}), ...(retriever ? { workspaceOf: retriever.workspaceOf } : {}) }),
    ...(retriever ? { retriever } : {}),
    ...(retriever && deps.knowledge
      ? {
          turnKnowledge: createTurnKnowledge({
            db: deps.db,
            knowledge: deps.knowledge,
            retriever,
            skills: createSkillMatcher({ knowledge: deps.knowledge, ...(deps.skillsDir ? { operatorDir: deps.skillsDir } : {}) }),
            ...(deps.memoryApproval ? { memoryApproval: deps.memoryApproval } : {}),
            ...(deps.memoryRecall !== undefined ? { recall: deps.memoryRecall } : {}),
            ...(deps.senders ? { senders: deps.senders } : {}),
          }),
        }
      : {}),
  };
  return c;
}

/** The chat turn's activities, bound to their dependencies. */
export function createChatActivities(deps: ActivityDeps) {
  const c = createChatContext(deps);
  return {
    // a model call below the step (a search's query embedding) is keyed under it (withStepKey)
    modelStep: (input: ModelStepInput) => withStepKey(stepKeyOf(input), () => modelStep(c, input)),
    deliver: (input: DeliverInput) => deliver(c, input),
    runTool: (input: RunToolInput) => withStepKey(`tool:${input.turnId}:${input.toolCallId}`, () => runTool(c, input)),
    requestApproval: (input: RequestApprovalInput) => requestApproval(c, input),
    settleApproval: (input: SettleApprovalInput) => settleApproval(c, input),
    updateProgress: (input: ProgressInput) => updateProgress(c, input),
    clearProgress: (input: { turnId: string; conversation: ConversationKey }) => clearProgress(c, input),
  };
}
