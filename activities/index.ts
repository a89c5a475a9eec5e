/**
 * Every side effect the workflows use, created from injected dependencies. Workflows import
 * only the type of `createActivities`.
 */
import { activityInfo, Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { Logger } from 'pino';
import type { ConversationKey } from '../common/ids.js';
import type { SessionSettings, TokenUsage, WorkingSet } from '../workflows/types.js';
import { getBlobText, putBlob } from './blobs.js';
import type { Db } from './db.js';
import { buildPrompt } from './prompt.js';
import { classifyModelError, ModelNotConfiguredError, runModelStep, type createModelRegistry } from './model.js';
import { deliverOnce, type Senders } from './outbox.js';
import { writeReceipt } from './receipts.js';

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
}

export type ModelStepResult =
  | { kind: 'output'; outputHash: string; finishReason: string; usage: TokenUsage; chars: number }
  | { kind: 'not-configured'; message: string; usage: TokenUsage };

export interface DeliverInput {
  key: string;
  sessionId: string;
  conversation: ConversationKey;
  kind: 'reply' | 'notice';
  turnId?: string;
  blobHash?: string;
  text?: string;
  usage?: TokenUsage;
  steps?: number;
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
  if (status === 401 || status === 403) return 'ModelAuth';
  if (status === 404) return 'ModelNotFound';
  if (!retryable) return 'ModelBadRequest';
  if (status === 429) return 'ModelRateLimited';
  return fallback || 'ModelUnavailable';
}

export function createActivities(deps: ActivityDeps) {
  const { db } = deps;
  const beatMs = deps.heartbeatEveryMs ?? 200;

  return {
    /** One model step of a turn: build the prompt from references, stream the model's answer, store it. */
    async modelStep(input: ModelStepInput): Promise<ModelStepResult> {
      const ctx = Context.current();
      const info = activityInfo();
      const wf = workflowRef(info, input.sessionId);
      if (input.step === 1) {
        await writeReceipt(db, {
          key: `${input.turnId}:start`,
          kind: 'turn.start',
          ...wf,
          data: { turnId: input.turnId, inbound: input.inbound.length, model: input.settings.model },
        });
      }
      const prompt = await buildPrompt(db, {
        systemPrompt: deps.systemPrompt,
        workingSet: input.workingSet,
        inbound: input.inbound,
        steers: input.steers,
        ...(input.draftHash ? { draft: await getBlobText(db, input.draftHash) } : {}),
      });
      let chars = 0;
      ctx.heartbeat({ step: input.step, chars });
      const beat = setInterval(() => ctx.heartbeat({ step: input.step, chars }), beatMs);
      const started = Date.now();
      try {
        const out = await runModelStep(
          deps.models,
          { model: input.settings.model, think: input.settings.think, messages: prompt },
          {
            signal: ctx.cancellationSignal,
            onDelta: (soFar) => {
              chars = soFar.length;
            },
          },
        );
        const outputHash = await putBlob(db, out.text);
        const usage = { input: out.usage.inputTokens, output: out.usage.outputTokens, total: out.usage.totalTokens };
        await writeReceipt(db, {
          key: `${input.turnId}:model:${input.step}:${info.attempt}`,
          kind: 'model.call',
          ...wf,
          data: { step: input.step, attempt: info.attempt, model: out.model, finishReason: out.finishReason, usage, ms: Date.now() - started, outputHash },
        });
        return { kind: 'output', outputHash, finishReason: out.finishReason, usage, chars: out.text.length };
      } catch (err) {
        if (ctx.cancellationSignal.aborted) throw ctx.cancellationSignal.reason ?? err;
        if (err instanceof ModelNotConfiguredError) return { kind: 'not-configured', message: err.message, usage: ZERO };
        const c = classifyModelError(err);
        await writeReceipt(db, {
          key: `${input.turnId}:model:${input.step}:${info.attempt}`,
          kind: 'model.call',
          ...wf,
          data: { step: input.step, attempt: info.attempt, model: input.settings.model, error: c.message, status: c.status, retryable: c.retryable, ms: Date.now() - started },
        });
        throw ApplicationFailure.create({
          type: failureType(c.status, c.retryable, c.type),
          message: c.message,
          nonRetryable: !c.retryable,
        });
      } finally {
        clearInterval(beat);
      }
    },

    /** Deliver one outbound message exactly once (keyed), and record it. */
    async deliver(input: DeliverInput): Promise<{ sent: boolean; messageSeq: number }> {
      const info = activityInfo();
      const wf = workflowRef(info, input.sessionId);
      const text = input.blobHash ? await getBlobText(db, input.blobHash) : (input.text ?? '');
      const outcome = await deliverOnce(db, deps.senders ?? {}, {
        key: input.key,
        sessionId: input.sessionId,
        conversation: input.conversation,
        kind: input.kind,
        text,
        ...(input.turnId ? { turnId: input.turnId } : {}),
      });
      await writeReceipt(db, {
        key: `${input.key}:delivery`,
        kind: 'delivery',
        ...wf,
        data: { key: input.key, kind: input.kind, platform: input.conversation.platform, chatId: input.conversation.chatId, sent: outcome.sent, chars: text.length },
      });
      if (input.turnId) {
        await writeReceipt(db, {
          key: `${input.turnId}:end`,
          kind: 'turn.end',
          ...wf,
          data: { turnId: input.turnId, kind: input.kind, usage: input.usage ?? ZERO, steps: input.steps ?? 0 },
        });
      }
      if (outcome.sent) deps.onTranscript?.(input.sessionId, input.kind === 'reply' ? 'assistant' : 'system');
      return outcome;
    },
  };
}
