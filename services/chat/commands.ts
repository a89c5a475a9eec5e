/**
 * The handlers of the chat commands, one per command of the catalog (common/commands.ts),
 * registered by feature: the session's (stop, new, steer, model, think, status), access and
 * governance (whoami, help, pair, pairing and action decisions, bindings), repository changes
 * (change, answer), objectives (objectives, objective) and budgets (budget). The table's type names every kind
 * the parser produces, so a command without a handler does not compile. The intake
 * (intake.ts) has already decided that the sender may use the command (role, chat, admin
 * channel) when one runs.
 */
import { WithStartWorkflowOperation, WorkflowUpdateFailedError } from '@temporalio/client';
import {
  bindChat,
  GovernanceError,
  listApprovals,
  pendingPairings,
  unbindChat,
  type Actor,
  type BindingRecord,
  type PairingDecision,
} from '../../domain/governance.js';
import { writeReceipt } from '../../domain/receipts.js';
import { MAX_STEER_CHARS } from '../../common/limits.js';
import { helpText, type ParsedCommand } from '../../common/commands.js';
import type { ConversationKey } from '../../common/ids.js';
import type { Role } from '../../common/roles.js';
import { mcpStatusLine } from '../../common/mcp.js';
import { listMcpServers } from '../../domain/store/mcp.js';
import { parseModelRef, type NormalizedInbound, type Provider } from '../../common/schemas.js';
import { newTaskSignal, settingsUpdate, steerUpdate, stopSignal } from '../../workflows/messages.js';
import { sessionWorkflow } from '../../workflows/chat/session.js';
import type { SettingsChange } from '../../workflows/types.js';
import { ChangeInputError } from '../changes.js';
import type { SessionStatusView } from './status.js';
import type { SessionStart } from './session-start.js';
import { ObjectiveInputError, type ObjectiveService } from '../objectives.js';
import { OPEN_MAX_BYTES } from '../workspaces.js';
import { deleteChatPrompt, upsertChatPrompt } from '../../domain/store/prompts.js';
import { memoryLine } from '../../domain/knowledge/memory.js';
import { ServiceInputError } from '../requests.js';
import type { PartState } from '../../domain/heartbeat.js';
import type { IngressDeps } from './intake.js';
import { isAdmin } from '../../common/roles.js';
import { taskLine } from '../../common/tasks.js';
import type { BudgetService } from '../budgets.js';
import { budgetReport, raiseFromChat } from './budgets.js';

type CommandKind = ParsedCommand['kind'];
type CommandOf<K extends CommandKind> = Extract<ParsedCommand, { kind: K }>;

/** One command as it arrived: who, where, and the chat's session. */
export interface CommandCall {
  msg: NormalizedInbound;
  /**
   * The message's key (`inboundKey`, keys.ts): a command run again after a crash
   * before its answer (the intake reruns it) has the same key, so its effect is keyed by it:
   * /stop, /new and /steer send it to the session, which takes it once; a command that makes
   * something (/change, /task) derives the thing's id from it and finds the first run's.
   */
  key: string;
  conversation: ConversationKey;
  actor: Actor;
  binding: BindingRecord | undefined;
  /** The name the command is done in (the operator's own user name for the operator). */
  by: string;
  session: SessionStart;
}

/** What the handlers use: the intake's dependencies and its session and decision helpers. */
export interface CommandEnv extends Pick<IngressDeps, 'client' | 'db' | 'consoleLink' | 'configuredProviders' | 'changes' | 'objectives' | 'workspaces' | 'promptLayers' | 'knowledge' | 'heartbeat' | 'runLink' | 'tasks'> {
  budgets: BudgetService;
  status(sessionId: string): Promise<SessionStatusView>;
  formatStatus(view: SessionStatusView): string;
  decidePairing(code: string, decision: { approve: Role } | 'deny', by: Actor): Promise<PairingDecision>;
  decideApproval(id: string, decision: 'approve' | 'deny', by: Actor, reason?: string): Promise<{ reply: string }>;
}

type Handler<K extends CommandKind> = (cmd: CommandOf<K>, call: CommandCall) => Promise<string | undefined>;
type Handlers<K extends CommandKind> = { [P in K]: Handler<P> };

export const PROVIDER_SETUP: Record<Provider, string> = {
  openai: 'set OPENAI_API_KEY',
  anthropic: 'set ANTHROPIC_API_KEY',
  'openai-compatible': 'set STEWARD_MODEL_BASE_URL (and STEWARD_MODEL_API_KEY if the endpoint needs one)',
};

/**
 * Before a /steer, /stop or /new is sent to the session: its `session.command` receipt, keyed by
 * the command's message (written once, also when a redelivery runs it again), and the command
 * goes out `marked`. A model step that would deliver a turn's reply counts these receipts against
 * the marked commands the session had taken in (workflows/chat/turn-loop.ts
 * DELIVER_IN_STEP_PATCH): one written before its command was taken in keeps the reply with the
 * turn. So the receipt is written before the send, whatever happens after.
 */
async function markSessionCommand(env: CommandEnv, call: CommandCall, command: 'steer' | 'stop' | 'new'): Promise<{ marked: true }> {
  await writeReceipt(env.db, { key: `${call.key}:session-command`, kind: 'session.command', workflowId: call.session.workflowId, sessionId: call.session.workflowId, actor: call.actor.id, data: { command } });
  return { marked: true };
}

const withStart = (call: CommandCall) => new WithStartWorkflowOperation(sessionWorkflow, { ...call.session, workflowIdConflictPolicy: 'USE_EXISTING' });
const person = (call: CommandCall) => ({ id: call.actor.id, name: call.by });

/** The session's own commands: stop, a new task, steering, model and thinking, status. */
function sessionCommands(env: CommandEnv): Handlers<'stop' | 'new' | 'steer' | 'model' | 'think' | 'status'> {
  const settings = async (change: Omit<SettingsChange, 'by'>, call: CommandCall): Promise<string> => {
    try {
      const r = await env.client.workflow.executeUpdateWithStart(settingsUpdate, {
        args: [{ ...change, by: call.by }],
        startWorkflowOperation: withStart(call),
      });
      return r.message;
    } catch (err) {
      if (err instanceof WorkflowUpdateFailedError) return `Not changed: ${err.cause?.message ?? err.message}`;
      throw err;
    }
  };
  return {
    async stop(_cmd, call) {
      const marked = await markSessionCommand(env, call, 'stop');
      await env.client.workflow.signalWithStart(sessionWorkflow, { ...call.session, signal: stopSignal, signalArgs: [{ by: call.by, key: call.key, ...marked }] });
      const stopped = env.changes ? await env.changes.stopInChat(call.conversation, person(call)) : [];
      // the session answers for the turn through the outbox; stopped changes are named here
      return stopped.length ? `Stopping change${stopped.length > 1 ? 's' : ''} ${stopped.join(', ')}: the coding agent is stopped and its work tree removed.` : undefined;
    },
    async new(_cmd, call) {
      const marked = await markSessionCommand(env, call, 'new');
      await env.client.workflow.signalWithStart(sessionWorkflow, { ...call.session, signal: newTaskSignal, signalArgs: [{ by: call.by, key: call.key, ...marked }] });
      return undefined;
    },
    async steer(cmd, call) {
      if (env.changes) {
        // with no turn running, steering goes to the chat's change in its coding phase
        const s = await env.status(call.session.workflowId);
        if (!s.running) {
          const m = await env.changes.steerInChat(call.conversation, cmd.text, person(call));
          if (m) return m;
        }
      }
      try {
        // the steerer's identity goes with the note: they join the requester set of the turn it shapes
        // steering the session's validator refuses for its text is not marked: it is never taken in
        const text = cmd.text.trim();
        const marked = text && text.length <= MAX_STEER_CHARS ? await markSessionCommand(env, call, 'steer') : {};
        const note = { text: cmd.text, by: call.by, ...(call.actor.kind === 'person' ? { byId: call.actor.id } : {}), key: call.key, ...marked };
        // the update id is the message's key too: within a run the server answers a repeat with the first outcome
        const r = await env.client.workflow.executeUpdateWithStart(steerUpdate, { args: [note], updateId: call.key, startWorkflowOperation: withStart(call) });
        return r.message;
      } catch (err) {
        if (err instanceof WorkflowUpdateFailedError) return `Steering not accepted: ${err.cause?.message ?? err.message}`;
        throw err;
      }
    },
    async model(cmd, call) {
      if (cmd.model === undefined) {
        const s = await env.status(call.session.workflowId);
        const providers = env.configuredProviders();
        return `Model: ${s.model}. Configured providers: ${providers.length ? providers.join(', ') : 'none'}.`;
      }
      const { provider } = parseModelRef(cmd.model);
      if (!env.configuredProviders().includes(provider)) return `The ${provider} provider is not configured: ${PROVIDER_SETUP[provider]} and restart Steward.`;
      return settings({ model: cmd.model }, call);
    },
    async think(cmd, call) {
      if (cmd.level === undefined) {
        const s = await env.status(call.session.workflowId);
        return `Thinking: ${s.think}. Use /think <off|low|medium|high>.`;
      }
      return settings({ think: cmd.level }, call);
    },
    async status(_cmd, call) {
      const view = await env.status(call.session.workflowId);
      const text = env.formatStatus(view);
      const link = view.running ? env.runLink?.(view.running.runWorkflowId) : undefined;
      const shown = link ? `${text}\nRun: ${link}` : text;
      const running = env.changes ? await env.changes.runningInChat(call.conversation) : [];
      const withChanges = running.length ? `${shown}\nChanges: ${running.map((c) => `${c.id} on ${c.repo} (${c.phase}${c.question ? ': waiting for /answer' : ''})`).join('; ')}` : shown;
      // admins also see the MCP servers as the workers last found them
      const mcp = isAdmin(call.actor.role) ? mcpStatusLine(await listMcpServers(env.db)) : undefined;
      const parts = isAdmin(call.actor.role) && env.heartbeat ? heartbeatLine(await env.heartbeat().catch(() => [])) : undefined;
      return [withChanges, mcp, parts].filter(Boolean).join('\n');
    },
  };
}

/** Who one is, help, pairing, decisions on proposed actions, and the chat's binding. */
function accessCommands(env: CommandEnv): Handlers<'whoami' | 'console' | 'help' | 'pair' | 'approve' | 'deny' | 'pending' | 'approve-action' | 'deny-action' | 'bind' | 'unbind' | 'admin-channel'> {
  const decidePairing = async (code: string, decision: { approve: Role } | 'deny', call: CommandCall): Promise<string> => {
    const r = await env.decidePairing(code, decision, call.actor);
    if (!r.ok) return r.message;
    return decision === 'deny'
      ? `Denied the pairing request of ${r.pairing.displayName}; they have been told.`
      : `Paired ${r.pairing.displayName} (${r.pairing.platform} user ${r.pairing.userId}) as ${decision.approve}; they have been told.`;
  };
  const binding = async (cmd: CommandOf<'bind' | 'unbind' | 'admin-channel'>, call: CommandCall): Promise<string> => {
    const { msg, actor } = call;
    if (msg.chatType !== 'group') return `/${cmd.kind} works in a group or channel; direct messages of people Steward knows are always answered.`;
    if (cmd.kind === 'unbind') {
      const n = await unbindChat(env.db, msg.platform, msg.account, msg.chatId);
      await writeReceipt(env.db, { kind: 'binding.change', actor: actor.id, data: { action: 'unbind', platform: msg.platform, chatId: msg.chatId, removed: n } });
      return n > 0 ? 'Unbound: Steward no longer answers in this chat.' : 'This chat was not bound.';
    }
    try {
      const b = await bindChat(env.db, {
        platform: msg.platform,
        account: call.binding?.account ?? msg.account,
        chatId: msg.chatId,
        createdBy: actor.id,
        ...(cmd.kind === 'bind' ? { ...(cmd.mode ? { mode: cmd.mode } : {}), ...(cmd.name ? { name: cmd.name } : {}) } : { adminChannel: cmd.on }),
      });
      await writeReceipt(env.db, {
        kind: 'binding.change',
        actor: actor.id,
        data: { action: cmd.kind, platform: b.platform, chatId: b.chatId, mode: b.mode, name: b.name, adminChannel: b.adminChannel },
      });
      if (cmd.kind === 'admin-channel') return cmd.on ? 'This chat is now the admin channel: admin commands and notifications go here.' : 'This chat is no longer the admin channel.';
      return `Bound: Steward answers here ${b.mode === 'all' ? 'to every message' : 'when mentioned or replied to'}${b.name ? `; the chat is named "${b.name}"` : ''}.`;
    } catch (err) {
      if (err instanceof GovernanceError) return `Not changed: ${err.message}.`;
      throw err;
    }
  };
  return {
    async whoami(_cmd, { actor }) {
      return actor.kind === 'operator' ? 'You are the operator (the API token holder): every command is open to you.' : `You are ${actor.name}, with the ${actor.role} role.`;
    },
    async console(_cmd, { actor }) {
      if (actor.kind === 'operator') return 'The operator signs in to the console with the link `steward start` prints, or a new one from `./steward ui`.';
      const link = env.consoleLink?.(actor.id);
      if (!link) return 'The console is not served by this Steward.';
      return `Your console sign-in link, for you only (it works once, within ${link.expiresInMinutes} minutes; do not share it): ${link.url}`;
    },
    async help(_cmd, { actor }) {
      return helpText(actor.role);
    },
    async pair(_cmd, { actor }) {
      return actor.kind === 'operator' ? 'The operator needs no pairing.' : `You are already paired as ${actor.name} (${actor.role}).`;
    },
    approve: (cmd, call) => decidePairing(cmd.code, { approve: cmd.role }, call),
    deny: (cmd, call) => decidePairing(cmd.code, 'deny', call),
    async pending() {
      const [pairings, approvals] = await Promise.all([pendingPairings(env.db), listApprovals(env.db, { status: 'pending', limit: 50 })]);
      const lines: string[] = [];
      lines.push(pairings.length ? `Pairing requests (${pairings.length}):` : 'No pairing requests.');
      for (const p of pairings) lines.push(`- ${p.displayName} (${p.platform} user ${p.userId}), expires ${p.expiresAt.toISOString()}: ask them for their code, then /approve <code> <role>`);
      lines.push(approvals.length ? `Approvals waiting (${approvals.length}):` : 'No approvals waiting.');
      for (const a of approvals) lines.push(`- ${a.id}: ${a.summary} (deadline ${a.deadline.toISOString()}): /approve-action ${a.id} or /deny-action ${a.id} [reason]`);
      return lines.join('\n');
    },
    'approve-action': async (cmd, call) => (await env.decideApproval(cmd.id, 'approve', call.actor)).reply,
    'deny-action': async (cmd, call) => (await env.decideApproval(cmd.id, 'deny', call.actor, cmd.reason)).reply,
    bind: binding,
    unbind: binding,
    'admin-channel': binding,
  };
}

/** Governed repository changes from chat: start one, answer its clarifying question. */
function changeCommands(env: CommandEnv): Handlers<'change' | 'answer'> {
  return {
    async change(cmd, call) {
      if (!env.changes) return 'Repository changes are not enabled on this Steward.';
      try {
        // keyed by the message: a rerun of the command finds the change the first run started
        const r = await env.changes.startChange({ repo: cmd.repo, request: cmd.request }, person(call), { conversation: call.conversation, sessionId: call.session.workflowId }, { key: call.key });
        return `Change ${r.id} started on ${cmd.repo}: intake first, then a plan, a sandboxed coding agent, the validation gate and the promotion gate. /stop stops it.${r.runUrl ? ` Run: ${r.runUrl}` : ''}`;
      } catch (err) {
        if (err instanceof ChangeInputError) return `Not started: ${err.message}.`;
        throw err;
      }
    },
    async answer(cmd, call) {
      const waiting = env.changes ? await env.changes.waitingInChat(call.conversation) : undefined;
      if (!env.changes || !waiting) return 'No change in this chat is waiting for an answer.';
      try {
        return await env.changes.answer(waiting, { text: cmd.text }, person(call));
      } catch (err) {
        if (err instanceof ChangeInputError) return `Not accepted: ${err.message}.`;
        throw err;
      }
    },
  };
}

/** Objectives on Temporal Schedules from chat: list them, and add, show, pause, resume, trigger, skip or delete one. */
function objectiveCommands(env: CommandEnv): Handlers<'objectives' | 'objective'> {
  const act = async (cmd: CommandOf<'objective'>, call: CommandCall, objectives: ObjectiveService): Promise<string> => {
    const who = person(call);
    switch (cmd.action) {
      case 'add': {
        const { conversation } = call;
        const o = await objectives.create({ name: cmd.name, prompt: cmd.prompt, chatId: conversation.chatId, platform: conversation.platform, account: conversation.account, schedule: cmd.schedule }, who);
        return `Objective ${o.name} added: it reports here; next run ${o.nextRuns[0] ?? 'when the schedule says'}.`;
      }
      case 'show': {
        const o = await objectives.show(cmd.name);
        return [
          `${o.name} (${o.id}): ${o.prompt}`,
          `Schedule: ${JSON.stringify(o.schedule)}, overlap ${o.overlap}${o.paused ? ', paused' : ''}`,
          `Status: ${o.status}`,
          `Next: ${o.nextRuns.slice(0, 3).join(', ') || '-'}`,
          ...o.runs.slice(0, 5).map((r) => `- ${r.scheduledAt ?? 'triggered'}: ${r.status}${r.error ? ` (${r.error.slice(0, 80)})` : ''}`),
        ].join('\n');
      }
      case 'pause':
        await objectives.pause(cmd.name, who);
        return `Objective ${cmd.name} paused.`;
      case 'resume':
        await objectives.resume(cmd.name, who);
        return `Objective ${cmd.name} resumed.`;
      case 'trigger':
        await objectives.trigger(cmd.name, who);
        return `Objective ${cmd.name} runs now.`;
      case 'skip-missed':
        await objectives.skipMissed(cmd.name, who);
        return `Objective ${cmd.name}: runs missed until now are skipped.`;
      case 'delete':
        await objectives.remove(cmd.name, who);
        return `Objective ${cmd.name} deleted.`;
    }
  };
  return {
    async objectives() {
      if (!env.objectives) return 'Objectives are not enabled on this Steward.';
      const all = await env.objectives.list();
      if (all.length === 0) return 'No objectives. Add one with /objective add <name> <30m or "cron"> [tz=Zone] <prompt>.';
      return all
        .map((o) => {
          const when = o.schedule.every ? `every ${o.schedule.every}` : o.schedule.cron !== undefined ? `cron ${String(o.schedule.cron)}` : 'no schedule';
          const on = [o.triggers.webhook ? 'webhook' : '', o.triggers.watch ? `files in ${o.triggers.watch}` : '', o.triggers.email ? `mail to ${o.triggers.email}` : ''].filter(Boolean).join(', ');
          return `${o.name}: ${when}${o.schedule.timezone ? ` (${o.schedule.timezone})` : ''}${on ? `, on ${on}` : ''}, ${o.paused ? 'paused' : o.spentBudget ? o.status : `next ${o.nextRuns[0] ?? '-'}`}, last ${o.lastRun ? `${o.lastRun.status}${o.lastRun.error ? ` (${o.lastRun.error.slice(0, 80)})` : ''}` : 'none'}`;
        })
        .join('\n');
    },
    async objective(cmd, call) {
      if (!env.objectives) return 'Objectives are not enabled on this Steward.';
      try {
        return await act(cmd, call, env.objectives);
      } catch (err) {
        if (err instanceof ObjectiveInputError) return `Not done: ${err.message}.`;
        throw err;
      }
    },
  };
}

/** The heartbeat in one line: the degraded parts with what was seen, else that all are ok. */
function heartbeatLine(parts: PartState[]): string | undefined {
  if (parts.length === 0) return undefined;
  const bad = parts.filter((p) => p.state !== 'ok');
  if (bad.length === 0) return `Parts: all ${parts.length} ok.`;
  return `Parts: ${bad.length} of ${parts.length} degraded: ${bad.map((p) => `${p.part} since ${p.since} (${p.detail}; last success ${p.lastOkAt ?? 'never'})`).join('; ')}.`;
}

/** Run a command on a service that may be off; its input errors become the answer ("Not done: ..."), and change nothing. */
function guard<S>(service: S | undefined, off: string): (f: (s: S) => Promise<string>) => Promise<string> {
  return async (f) => {
    if (!service) return off;
    try {
      return await f(service);
    } catch (err) {
      if (err instanceof ServiceInputError) return `Not done: ${err.message}.`;
      throw err;
    }
  };
}

/** The chat's workspace: choose, create and reindex it (admins); search it and open its files. */
function workspaceCommands(env: CommandEnv): Handlers<'workspace' | 'search' | 'open' | 'prompt'> {
  const off = 'Workspaces are not enabled on this Steward.';
  const guarded = guard(env.workspaces, off);
  return {
    workspace: (cmd, call) =>
      guarded(async (w) => {
        const chat = call.conversation;
        switch (cmd.action) {
          case 'list': {
            const all = await w.list();
            return all.length ? all.map((x) => `${x.name}: ${x.root} (${x.chats} chat${x.chats === 1 ? '' : 's'})`).join('\n') : 'No workspaces. /workspace create <name> makes one.';
          }
          case 'show': {
            const ws = await w.forChat(chat);
            if (!ws) return 'This chat has no workspace. /workspace use <name> chooses one; /workspace list shows them.';
            const st = await w.indexStatus(ws.name);
            const run = st.run ? `; indexing ${st.run.phase === 'done' ? 'done' : st.run.phase} (${st.run.indexed} files indexed, ${st.run.removed} removed in ${st.run.rounds} round${st.run.rounds === 1 ? '' : 's'})` : '';
            return `Workspace ${ws.name}: ${ws.root}\n${st.documents} documents, ${st.chunks} indexed sections${run}`;
          }
          case 'off':
            return (await w.unbind(chat)) ? 'This chat no longer uses a workspace.' : 'This chat had no workspace.';
          case 'use': {
            const ws = await w.bind(chat, cmd.name!, person(call));
            return `This chat uses workspace ${ws.name} (${ws.root}).`;
          }
          case 'create': {
            // a folder elsewhere on the host is the operator's to name (CLI, API), not a chat's
            if (cmd.folder !== undefined) return 'Not done: only the operator names a folder for a workspace (steward workspaces create <name> --folder <dir>); /workspace create <name> makes one under the data directory.';
            const ws = await w.create(cmd.name, undefined, person(call));
            await w.bind(chat, ws.name, person(call));
            return `Workspace ${ws.name} created at ${ws.root} and chosen for this chat; indexing its files.`;
          }
          case 'reindex': {
            const target = cmd.name ?? (await w.forChat(chat))?.name;
            if (!target) return 'Not done: this chat has no workspace; name one: /workspace reindex <name>.';
            await w.reindex(target);
            return `Indexing workspace ${target} again.`;
          }
        }
      }),
    async prompt(cmd, call) {
      const chat = call.conversation;
      if (cmd.action === 'set') {
        await upsertChatPrompt(env.db, chat, cmd.text, call.by);
        await writeReceipt(env.db, { kind: 'prompt.change', actor: call.by, data: { chat, action: 'set', chars: cmd.text.length } });
      } else if (cmd.action === 'clear') {
        const had = await deleteChatPrompt(env.db, chat);
        if (!had) return 'This chat has no prompt of its own.';
        await writeReceipt(env.db, { kind: 'prompt.change', actor: call.by, data: { chat, action: 'clear' } });
      }
      if (!env.promptLayers) return cmd.action === 'show' ? 'Prompt layers are not available on this Steward.' : 'Done.';
      env.promptLayers.forget(chat);
      const layers = await env.promptLayers.layers(chat);
      const head = cmd.action === 'set' ? "This chat's prompt is set (turns use it within 5 seconds). " : cmd.action === 'clear' ? "This chat's prompt is cleared. " : '';
      return `${head}The system prompt, in order:\n${layers.map((l, i) => `${i + 1}. ${l.source} (${l.text.length} characters): ${l.text.replace(/\s+/g, ' ').slice(0, 160)}${l.text.length > 160 ? '…' : ''}`).join('\n')}`;
    },
    search: (cmd, call) =>
      guarded(async (w) => {
        const { workspace, hits } = await w.search(call.conversation, cmd.query);
        if (hits.length === 0) return `Nothing in workspace ${workspace} matches "${cmd.query}".`;
        return hits
          .map((h, i) => {
            const excerpt = h.text.replace(/\s+/g, ' ').trim();
            return `${i + 1}. ${h.path}${h.heading ? ` > ${h.heading}` : ''} (lines ${h.startLine}-${h.endLine})\n${excerpt.length > 280 ? `${excerpt.slice(0, 280)}…` : excerpt}`;
          })
          .join('\n\n');
      }),
    open: (cmd, call) =>
      guarded(async (w) => {
        const f = await w.open(call.conversation, cmd.path);
        return `${f.path} (${f.bytes} bytes)\n\n${f.text}${f.truncated ? `\n\n[the first ${OPEN_MAX_BYTES} bytes of ${f.bytes}]` : ''}`;
      }),
  };
}

/** /skills and /memory: the runbooks a chat may use, and what the agent remembers. */
function memoryCommands(env: CommandEnv): Handlers<'skills' | 'memory'> {
  const guarded = guard(env.knowledge, 'Skills and memory are not enabled on this Steward.');
  return {
    skills: (_cmd, call) =>
      guarded(async (k) => {
        const c = await k.skills(call.conversation);
        const mine = c.skills.filter((s) => s.roles.length === 0 || s.roles.includes(call.actor.role));
        const lines = mine.map((s) => `${s.name} (version ${s.version}, ${s.source === 'workspace' ? `workspace ${c.workspace}` : 'operator'}): ${s.description}${s.when ? ` When: ${s.when}` : ''}${s.roles.length ? ` [${s.roles.join(', ')}]` : ''}`);
        const problems = c.problems.map((p) => `Not a skill: ${p.file}: ${p.error}`);
        if (lines.length === 0 && problems.length === 0) return 'No skills. The operator adds them as <name>/SKILL.md in the skills folder; a workspace in its skills/ folder.';
        return [...(lines.length ? [`Skills (${lines.length}):`, ...lines] : ['No skills you may use.']), ...problems].join('\n');
      }),
    memory: (cmd, call) =>
      guarded(async (k) => {
        const chat = call.conversation;
        switch (cmd.action) {
          case 'list': {
            const all = await k.memories(chat);
            return all.length ? [`Memories (${all.length}):`, ...all.map(memoryLine)].join('\n') : 'Nothing remembered for this chat yet.';
          }
          case 'show': {
            const m = await k.show(cmd.id, chat);
            return `${memoryLine(m)}\nProposed for ${m.proposedBy} on ${m.createdAt.toISOString()} (turn ${m.turnId})${m.decidedBy ? `; ${m.status} by ${m.decidedBy} on ${m.decidedAt?.toISOString()}` : ''}.`;
          }
          case 'approve':
          case 'reject': {
            const m = await k.decide(cmd.id, cmd.action, call.actor, chat);
            return m.status === 'active' ? `Memory ${m.id} approved: it is recalled from now on.` : `Memory ${m.id} rejected.`;
          }
          case 'forget': {
            const m = await k.forget(cmd.id, call.actor, chat);
            return `Memory ${m.id} forgotten: it is no longer recalled.`;
          }
        }
      }),
  };
}

/** Triage and tasks from chat: list, make, hand and close tasks; re-route one (admins); switch triage of this chat (admins). */
function taskCommands(env: CommandEnv): Handlers<'tasks' | 'task' | 'route' | 'triage'> {
  const guarded = guard(env.tasks, 'Tasks are not enabled on this Steward.');
  const chatName = (t: { chat: { platform: string; chatId: string } }) => `${t.chat.platform} chat ${t.chat.chatId}`;
  return {
    tasks: (cmd, call) =>
      guarded(async (t) => {
        // an admin sees every chat's tasks (the admin channel's view); others their chat's
        const all = await t.list({ status: 'open', ...(cmd.lane ? { lane: cmd.lane } : {}) }, isAdmin(call.actor.role) ? undefined : call.conversation);
        if (all.length === 0) return `No open tasks${cmd.lane ? ` in the ${cmd.lane} lane` : ''}. /task <text> makes one.`;
        return [`Open tasks (${all.length}):`, ...all.map(taskLine)].join('\n');
      }),
    task: (cmd, call) =>
      guarded(async (t) => {
        const who = person(call);
        if (cmd.action === 'add') {
          const { conversation } = call;
          // keyed by the message: a rerun of the command finds the task the first run made
          const made = await t.create({ text: cmd.text, chatId: conversation.chatId, platform: conversation.platform, account: conversation.account }, who, { key: call.key });
          return `Task ${made.id} made (${made.lane}, ${made.priority}, due ${made.dueAt ?? '-'}). /task hand ${made.id} hands it to the agent; /task close ${made.id} closes it.`;
        }
        const task = await t.show(cmd.id);
        const here = task.chat.platform === call.conversation.platform && task.chat.account === call.conversation.account && task.chat.chatId === call.conversation.chatId;
        if (!here && !isAdmin(call.actor.role)) return `Not done: task ${task.id} belongs to another chat; an admin or that chat can ${cmd.action} it.`;
        if (cmd.action === 'hand') {
          const handed = await t.hand(task.id, who);
          return `Task ${handed.id} handed to the agent: a turn runs in ${here ? 'this chat' : chatName(handed)}.`;
        }
        const closed = await t.close(task.id, who);
        return `Task ${closed.id} closed.`;
      }),
    route: (cmd, call) =>
      guarded(async (t) => {
        const before = await t.show(cmd.id);
        const after = await t.route(cmd.id, { class: cmd.class, ...(cmd.priority ? { priority: cmd.priority } : {}), ...(cmd.due ? { due: cmd.due } : {}) }, person(call));
        if (after.status === 'closed') return `Task ${after.id} routed as noise: closed.`;
        return `Task ${after.id} routed: ${after.lane}, ${after.priority}, due ${after.dueAt ?? '-'} (was ${before.lane}, ${before.priority}, due ${before.dueAt ?? '-'}).`;
      }),
    triage: (cmd, call) =>
      guarded(async (t) => {
        if (!call.binding) return 'Not done: /triage works in a bound group (an admin binds it with /bind first).';
        if (cmd.state === undefined) {
          const s = await t.triage(call.binding.id);
          return s.enabled ? `Triage is on here (model ${s.model ?? call.binding.model ?? 'the default'}). /triage off switches it off.` : 'Triage is off here. /triage on [provider:model] sorts messages that do not address Steward into tasks.';
        }
        const s = await t.setTriage(call.binding.id, { enabled: cmd.state === 'on', ...(cmd.model ? { model: cmd.model } : {}) }, person(call));
        return s.enabled
          ? `Triage is on: messages here that do not address Steward are classified (model ${s.model ?? call.binding.model ?? 'the default'}); tasks and routing decisions go to the admin channel.`
          : 'Triage is off here.';
      }),
  };
}

/** /budget: the model budgets one may see (budgets.ts); /budget raise: an admin raises one for its period. */
function budgetCommands(env: CommandEnv): Handlers<'budget'> {
  return {
    async budget(cmd, call) {
      if (cmd.action === 'raise') return raiseFromChat(env.budgets, call.actor, cmd);
      return budgetReport(env.budgets, call.actor, call.binding?.id);
    },
  };
}

/** What the parser could not take: a known command with bad arguments, or an unknown one. */
function parseFailures(): Handlers<'invalid' | 'unknown'> {
  return {
    async invalid(cmd) {
      return `/${cmd.name}: ${cmd.error}`;
    },
    async unknown(cmd, { actor }) {
      return `Unknown command ${cmd.name.startsWith('/') ? cmd.name : `/${cmd.name}`}.\n${helpText(actor.role)}`;
    },
  };
}

/** Every command's handler, by feature; `run` dispatches a parsed command to its own. */
export function commandHandlers(env: CommandEnv): { run(cmd: ParsedCommand, call: CommandCall): Promise<string | undefined> } {
  const handlers: Handlers<CommandKind> = {
    ...sessionCommands(env),
    ...accessCommands(env),
    ...changeCommands(env),
    ...objectiveCommands(env),
    ...workspaceCommands(env),
    ...memoryCommands(env),
    ...taskCommands(env),
    ...budgetCommands(env),
    ...parseFailures(),
  };
  return {
    run: (cmd, call) => (handlers[cmd.kind] as (c: ParsedCommand, call: CommandCall) => Promise<string | undefined>)(cmd, call),
  };
}
