/**
 * Ingress: the one path from any adapter into the session workflows. Adapters normalise
 * into InboundMessage and call `Ingress.handle`; they never call a model.
 */
import type { InboundMessage } from '../common/schemas.js';
import {
  WithStartWorkflowOperation,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
  type Client,
} from '@temporalio/client';
import type { Logger } from 'pino';
import { helpText, parseText, type ParsedCommand } from '../common/commands.js';
import { sessionWorkflowId, type ConversationKey } from '../common/ids.js';
import { parseModelRef, type Provider } from '../common/schemas.js';
import type { Db } from '../activities/db.js';
import { isUniqueViolation } from '../activities/prisma-errors.js';
import { writeReceipt } from '../activities/receipts.js';
import { readTranscript } from '../activities/transcript.js';
import { inboundSignal, newTaskSignal, settingsUpdate, statusQuery, steerUpdate, stopSignal, turnStatusQuery } from '../workflows/messages.js';
import { ChatAttr, KindAttr, PlatformAttr } from '../workflows/search-attributes.js';
import type { SessionInput, SessionLimits, SessionStatus, TurnStatus } from '../workflows/types.js';

export interface IngressResult {
  /** The conversation's session workflow id. */
  workflowId: string;
  kind: 'message' | 'command';
  /** True when this message id was seen before: nothing was started or signalled again. */
  duplicate: boolean;
  /** Immediate answer to a command (also recorded in the transcript). */
  reply?: string;
}

export interface TranscriptEntry {
  /** Position in the transcript; pass it back as `afterSeq` to read only newer entries. */
  seq?: number;
  role: 'user' | 'assistant' | 'system';
  text: string;
  at: string;
  user?: string;
}

export interface SessionStatusView {
  workflowId: string;
  exists: boolean;
  running: null | { turnId: string; step: number; phase: string; startedAt: string };
  queueLength: number;
  model: string;
  think: string;
  tokens: { input: number; output: number; total: number };
  turns: number;
}

export interface Ingress {
  handle(msg: InboundMessage): Promise<IngressResult>;
  transcript(sessionId: string, opts?: { limit?: number; afterSeq?: number }): Promise<TranscriptEntry[]>;
  status(sessionId: string): Promise<SessionStatusView>;
}


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
}

const PROVIDER_SETUP: Record<Provider, string> = {
  openai: 'set OPENAI_API_KEY',
  anthropic: 'set ANTHROPIC_API_KEY',
  'openai-compatible': 'set STEWARD_MODEL_BASE_URL (and STEWARD_MODEL_API_KEY if the endpoint needs one)',
};

function inboundKey(msg: InboundMessage): string {
  return `in:${msg.platform}:${msg.account}:${msg.chatId}:${msg.id}`;
}

export function formatStatus(s: SessionStatusView): string {
  if (!s.exists) return `No session yet. Model: ${s.model}, thinking: ${s.think}.`;
  const lines = [
    s.running
      ? `Running: turn ${s.running.turnId.split(':turn:')[1]?.split(':')[0] ?? '?'}, step ${s.running.step} (${s.running.phase}), since ${s.running.startedAt}`
      : 'Idle: no turn is running.',
    `Queue: ${s.queueLength} message${s.queueLength === 1 ? '' : 's'}`,
    `Model: ${s.model}, thinking: ${s.think}`,
    `Tokens: ${s.tokens.total} (in ${s.tokens.input}, out ${s.tokens.output})`,
    `Turns: ${s.turns}`,
  ];
  return lines.join('\n');
}

export function createIngress(deps: IngressDeps): Ingress {
  const { client, db } = deps;

  const sessionInput = (conversation: ConversationKey): SessionInput => ({
    conversation,
    settings: { model: deps.defaultModel, think: 'off' },
    limits: deps.limits,
  });

  const startOptions = (conversation: ConversationKey) => {
    const workflowId = sessionWorkflowId(conversation);
    return {
      workflowId,
      taskQueue: deps.taskQueue,
      args: [sessionInput(conversation)] as [SessionInput],
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
    let turn: TurnStatus | undefined;
    if (s.running) {
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
            step: turn?.step ?? 0,
            phase: turn?.phase ?? 'starting',
            startedAt: turn?.startedAt ?? s.running.startedAt,
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

  async function runCommand(msg: InboundMessage, cmd: ParsedCommand, conversation: ConversationKey): Promise<string | undefined> {
    const opts = startOptions(conversation);
    const withStart = () =>
      new WithStartWorkflowOperation('sessionWorkflow', { ...opts, workflowIdConflictPolicy: 'USE_EXISTING' });
    switch (cmd.kind) {
      case 'stop':
        await client.workflow.signalWithStart('sessionWorkflow', { ...opts, signal: stopSignal, signalArgs: [{ by: msg.user }] });
        return undefined; // the session answers through the outbox
      case 'new':
        await client.workflow.signalWithStart('sessionWorkflow', { ...opts, signal: newTaskSignal, signalArgs: [{ by: msg.user }] });
        return undefined;
      case 'steer':
        try {
          const r = await client.workflow.executeUpdateWithStart(steerUpdate, {
            args: [{ text: cmd.text, by: msg.user }],
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
            args: [{ ...(cmd.kind === 'model' ? { model: cmd.model } : { think: cmd.level }), by: msg.user }],
            startWorkflowOperation: withStart(),
          });
          return r.message;
        } catch (err) {
          if (err instanceof WorkflowUpdateFailedError) return `Not changed: ${err.cause?.message ?? err.message}`;
          throw err;
        }
      }
      case 'status':
        return formatStatus(await status(opts.workflowId));
      case 'help':
        return helpText();
      case 'invalid':
        return `/${cmd.name}: ${cmd.error}`;
      case 'unknown':
        return `Unknown command ${cmd.name.startsWith('/') ? cmd.name : `/${cmd.name}`}.\n${helpText()}`;
    }
  }

  return {
    async handle(msg) {
      const conversation: ConversationKey = { platform: msg.platform, account: msg.account, chatId: msg.chatId };
      const workflowId = sessionWorkflowId(conversation);
      const parsed = parseText(msg.text);
      const kind = parsed.kind;
      const key = inboundKey(msg);
      try {
        await db.message.create({ data: { key, sessionId: workflowId, role: 'user', text: msg.text, user: msg.user } });
      } catch (err) {
        if (isUniqueViolation(err)) return { workflowId, kind, duplicate: true };
        throw err;
      }
      deps.onTranscript?.(workflowId, 'user');
      await db.session.upsert({
        where: { id: workflowId },
        create: { id: workflowId, platform: msg.platform, account: msg.account, chatId: msg.chatId },
        update: {},
      });
      await writeReceipt(db, {
        key: `${key}:ingress`,
        kind: 'ingress',
        workflowId,
        sessionId: workflowId,
        actor: msg.user,
        data: { platform: msg.platform, chatId: msg.chatId, messageId: msg.id, chars: msg.text.length, command: kind === 'command' },
      });

      if (parsed.kind === 'message') {
        const handle = await client.workflow.signalWithStart('sessionWorkflow', {
          ...startOptions(conversation),
          signal: inboundSignal,
          signalArgs: [{ key, user: msg.user, at: msg.at }],
        });
        deps.log?.debug({ workflowId, runId: handle.signaledRunId }, 'message queued');
        return { workflowId, kind, duplicate: false };
      }

      const command = parsed.command;
      const reply = await runCommand(msg, command, conversation);
      await writeReceipt(db, {
        key: `${key}:command`,
        kind: 'command',
        workflowId,
        sessionId: workflowId,
        actor: msg.user,
        data: { command: command.kind, ...(reply !== undefined ? { reply } : {}) },
      });
      if (reply !== undefined) await recordSystem(workflowId, `${key}:reply`, reply);
      return { workflowId, kind, duplicate: false, ...(reply !== undefined ? { reply } : {}) };
    },

    async transcript(sessionId, opts = {}) {
      const rows = await readTranscript(db, sessionId, {
        ...(opts.limit !== undefined ? { limit: opts.limit } : {}),
        ...(opts.afterSeq !== undefined ? { afterSeq: opts.afterSeq } : {}),
      });
      return rows.map((r) => ({ seq: r.seq, role: r.role, text: r.text, at: r.at, ...(r.user ? { user: r.user } : {}) }));
    },

    status,
  };
}
