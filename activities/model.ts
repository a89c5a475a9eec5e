/**
 * The model layer on the AI SDK: OpenAI, Anthropic and any OpenAI-compatible endpoint by
 * configuration. One call streams one model step; the abort signal cancels the HTTP call.
 * No Temporal imports: the activity in activities/index.ts wraps it.
 */
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { APICallError, streamText, type LanguageModel } from 'ai';
import { parseModelRef, type Provider, type ThinkLevel } from '../common/schemas.js';

export interface ModelProvidersConfig {
  openai?: { apiKey: string; baseURL?: string };
  anthropic?: { apiKey: string; baseURL?: string };
  openaiCompatible?: { baseURL: string; apiKey?: string };
}

export type ChatMessage = { role: 'system' | 'user' | 'assistant'; content: string };

export class ModelNotConfiguredError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ModelNotConfiguredError';
  }
}

const SETUP: Record<Provider, string> = {
  openai: 'set OPENAI_API_KEY',
  anthropic: 'set ANTHROPIC_API_KEY',
  'openai-compatible': 'set STEWARD_MODEL_BASE_URL (and STEWARD_MODEL_API_KEY if the endpoint needs one)',
};

export function createModelRegistry(cfg: ModelProvidersConfig) {
  const openai = cfg.openai ? createOpenAI({ apiKey: cfg.openai.apiKey, ...(cfg.openai.baseURL ? { baseURL: cfg.openai.baseURL } : {}) }) : undefined;
  const anthropic = cfg.anthropic
    ? createAnthropic({ apiKey: cfg.anthropic.apiKey, ...(cfg.anthropic.baseURL ? { baseURL: cfg.anthropic.baseURL } : {}) })
    : undefined;
  const compatible = cfg.openaiCompatible
    ? createOpenAICompatible({
        name: 'openaiCompatible',
        baseURL: cfg.openaiCompatible.baseURL,
        ...(cfg.openaiCompatible.apiKey ? { apiKey: cfg.openaiCompatible.apiKey } : {}),
        includeUsage: true,
      })
    : undefined;
  const configured: Provider[] = [
    ...(openai ? (['openai'] as const) : []),
    ...(anthropic ? (['anthropic'] as const) : []),
    ...(compatible ? (['openai-compatible'] as const) : []),
  ];
  return {
    configuredProviders: (): Provider[] => [...configured],
    isConfigured(ref: string): boolean {
      try {
        return configured.includes(parseModelRef(ref).provider);
      } catch {
        return false;
      }
    },
    languageModel(ref: string): LanguageModel {
      const { provider, model } = parseModelRef(ref);
      const notConfigured = () =>
        new ModelNotConfiguredError(
          `No model provider is configured for ${ref}: ${SETUP[provider]} and restart Steward ` +
            '(or pick a configured model with /model provider:model).',
        );
      switch (provider) {
        case 'openai':
          if (!openai) throw notConfigured();
          return openai.chat(model);
        case 'anthropic':
          if (!anthropic) throw notConfigured();
          return anthropic(model);
        case 'openai-compatible':
          if (!compatible) throw notConfigured();
          return compatible.chatModel(model);
      }
    },
  };
}

export type ModelRegistry = ReturnType<typeof createModelRegistry>;

const ANTHROPIC_BUDGET: Record<Exclude<ThinkLevel, 'off'>, number> = { low: 2048, medium: 8192, high: 24576 };

/** Provider options for a reasoning effort; 'off' sends nothing. */
export function thinkOptions(provider: Provider, think: ThinkLevel): Record<string, Record<string, string | number | boolean | Record<string, string | number>>> {
  if (think === 'off') return {};
  switch (provider) {
    case 'openai':
      return { openai: { reasoningEffort: think } };
    case 'openai-compatible':
      return { openaiCompatible: { reasoningEffort: think } };
    case 'anthropic':
      return { anthropic: { thinking: { type: 'enabled', budgetTokens: ANTHROPIC_BUDGET[think] } } };
  }
}

export interface ModelStepRequest {
  model: string;
  think: ThinkLevel;
  messages: ChatMessage[];
  maxOutputTokens?: number;
}

export interface ModelStepOutput {
  text: string;
  finishReason: string;
  usage: { inputTokens: number; outputTokens: number; totalTokens: number };
  model: string;
}

/** Run one streamed model step. Rejects on errors and promptly on abort. */
export async function runModelStep(
  registry: ModelRegistry,
  req: ModelStepRequest,
  opts: { signal?: AbortSignal; onDelta?: (textSoFar: string, chunk: string) => void } = {},
): Promise<ModelStepOutput> {
  const languageModel = registry.languageModel(req.model);
  const { provider } = parseModelRef(req.model);
  const system = req.messages.filter((m) => m.role === 'system').map((m) => m.content).join('\n\n');
  const messages = req.messages.filter((m) => m.role !== 'system') as Array<{ role: 'user' | 'assistant'; content: string }>;
  opts.signal?.throwIfAborted();
  let streamError: unknown;
  const result = streamText({
    model: languageModel,
    ...(system ? { system } : {}),
    messages,
    maxRetries: 0, // Temporal retries the activity
    ...(opts.signal ? { abortSignal: opts.signal } : {}),
    ...(req.maxOutputTokens ? { maxOutputTokens: req.maxOutputTokens } : {}),
    providerOptions: thinkOptions(provider, req.think),
    onError: ({ error }: { error: unknown }) => {
      streamError ??= error;
    },
  });
  let text = '';
  let finishReason = 'unknown';
  let usage = { inputTokens: 0, outputTokens: 0, totalTokens: 0 };
  for await (const part of result.fullStream) {
    if (part.type === 'text-delta') {
      text += part.text;
      opts.onDelta?.(text, part.text);
    } else if (part.type === 'error') {
      streamError ??= part.error;
    } else if (part.type === 'finish') {
      finishReason = part.finishReason;
      const u = part.totalUsage;
      usage = { inputTokens: u.inputTokens ?? 0, outputTokens: u.outputTokens ?? 0, totalTokens: u.totalTokens ?? (u.inputTokens ?? 0) + (u.outputTokens ?? 0) };
    } else if (part.type === 'abort') {
      streamError ??= opts.signal?.reason ?? new DOMException('The model call was aborted', 'AbortError');
    }
  }
  if (opts.signal?.aborted) throw opts.signal.reason ?? new DOMException('The model call was aborted', 'AbortError');
  if (streamError !== undefined) throw streamError;
  return { text, finishReason, usage, model: req.model };
}

export interface ClassifiedModelError {
  retryable: boolean;
  type: string;
  message: string;
  status?: number;
}

function redact(message: string): string {
  return message.replace(/(sk-[A-Za-z0-9_-]{6})[A-Za-z0-9_-]+/g, '$1***').replace(/(Bearer\s+)\S+/gi, '$1***');
}

/** Which model errors are worth retrying. Messages never carry API keys. */
export function classifyModelError(err: unknown): ClassifiedModelError {
  if (err instanceof ModelNotConfiguredError) return { retryable: false, type: 'ModelNotConfigured', message: err.message };
  const e = (err && typeof err === 'object' && 'cause' in err && !APICallError.isInstance(err) && APICallError.isInstance((err as { cause: unknown }).cause))
    ? (err as { cause: unknown }).cause
    : err;
  if (APICallError.isInstance(e)) {
    const status = e.statusCode;
    const detail = redact(e.message || 'model API error');
    if (status === undefined) return { retryable: true, type: 'ModelUnavailable', message: `model API unreachable: ${detail}` };
    if ([400, 404, 413, 422].includes(status)) return { retryable: false, type: status === 404 ? 'ModelNotFound' : 'ModelBadRequest', message: `model API rejected the request (${status}): ${detail}`, status };
    if (status === 401 || status === 403) return { retryable: false, type: 'ModelAuth', message: `model API refused the credentials (${status}): check the API key`, status };
    if (status === 408 || status === 409 || status === 429 || status >= 500) {
      return { retryable: true, type: status === 429 ? 'ModelRateLimited' : 'ModelUnavailable', message: `model API is unavailable (${status}): ${detail}`, status };
    }
    return { retryable: false, type: 'ModelBadRequest', message: `model API error (${status}): ${detail}`, status };
  }
  const message = redact(err instanceof Error ? err.message : String(err));
  return { retryable: true, type: 'ModelUnavailable', message: `model call failed: ${message}` };
}
