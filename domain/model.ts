/**
 * The model layer on the AI SDK: OpenAI, Anthropic and any OpenAI-compatible endpoint by
 * configuration. One call runs one model step, as a plain request or streamed; the abort
 * signal cancels the HTTP call.
 * No Temporal imports: the activity in activities/index.ts wraps it.
 *
 * AI SDK behaviour this file relies on (ai v7):
 * - `streamText` never throws for provider errors: they arrive as `error` parts on the stream
 *   (and via `onError`); iterating `fullStream` ends normally. `await result.text` would then
 *   reject with a generic NoOutputGeneratedError, not the provider error, so we read the
 *   `error` part ourselves and rethrow it.
 * - An abort ends the stream with an `abort` part (and fetch is aborted, closing the HTTP
 *   connection); iteration again ends normally, so we turn it into an AbortError ourselves.
 * - `maxRetries: 0`: retries belong to Temporal, not to the SDK.
 * - `telemetry: { isEnabled: false }` (AI_SDK_TELEMETRY_OFF): the SDK otherwise builds a copy of
 *   every call's events (the prompt, the request body, the response) for its telemetry, whether
 *   or not anything listens, and publishes them on the process-wide `ai:telemetry` tracing channel
 *   to any subscriber (an APM agent, say): prompts hold untrusted text and may hold secrets that
 *   Steward masks everywhere else. Steward traces model calls itself (the activity's span). Off,
 *   the process's CPU a turn fell 4-6% under 50 conversations (docs/performance.md).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import {
  APICallError,
  InvalidArgumentError,
  InvalidMessageRoleError,
  InvalidPromptError,
  InvalidResponseDataError,
  JSONParseError,
  LoadAPIKeyError,
  MessageConversionError,
  NoOutputGeneratedError,
  NoSuchModelError,
  RetryError,
  StreamProviderError,
  TypeValidationError,
  UnsupportedFunctionalityError,
  asSchema,
  generateText,
  streamText,
  type EmbeddingModel,
  type LanguageModel,
  type ModelMessage,
  type Tool,
  type ToolSet,
} from 'ai';
import { ModelRefSchema, parseModelRef, type Provider, type ThinkLevel } from '../common/schemas.js';
import { recordModelCall } from '../common/metrics.js';

export interface ModelProvidersConfig {
  openai?: { apiKey: string; baseURL?: string };
  anthropic?: { apiKey: string; baseURL?: string };
  openaiCompatible?: { baseURL: string; apiKey?: string };
}

/** A prompt message: the AI SDK's model message (system messages become the instructions). */
export type ChatMessage = ModelMessage;

/** Where a budget that refused a call stands, for the message people see. */
export interface BudgetStanding {
  /** The budget's own id (what `steward budgets set` and PUT /api/v1/budgets/{id} name). */
  budget?: string;
  /** The budget's scope: installation, chat, person, objective, workspace, repository. */
  scope: string;
  /** The scope's id (a binding, an identity, ...); absent for the installation. */
  id?: string;
  /** day, week, month, total (or a window such as `1h`). */
  period: string;
  left: { tokens?: number; money?: number };
  /** ISO time the budget renews; absent for a total. */
  renewsAt?: string;
}

/** A budget has not what a call may cost left: the call is not made (never retried). */
export class ModelBudgetExceededError extends Error {
  override readonly name = 'ModelBudgetExceededError';
  constructor(
    message: string,
    /** Which budget refused, what is left and when it renews. */
    readonly budget?: BudgetStanding,
  ) {
    super(message);
  }
}

/** Who and what a model call is spent for: every budget scope that applies to it (the installation's always does). */
export interface SpendScopes {
  /** The binding id of the chat (a session's binding; triage's group). */
  chat?: string;
  /** Identity ids: the requester set of the turn (every sender and steerer), the triage sender. */
  people?: string[];
  /** Objective id. */
  objective?: string;
  /** Workspace id (its name): retrieval and embeddings, and turns grounded in one. */
  workspace?: string;
  /** Repository id (its name) of a repository change. */
  repository?: string;
}

/** What a model call is for. */
export type SpendKind = 'chat' | 'objective' | 'triage' | 'change-intake' | 'change-plan' | 'coding-agent' | 'embedding' | 'replay' | 'other';

/** One model call's reservation request. */
export interface SpendRequest {
  /** The step's key: stable across retries of the same activity (workflow id + activity id + step index). A second reserve with the same key is the same reservation (never reserved twice). */
  key: string;
  /** provider:model */
  model: string;
  /** Counted or estimated. */
  inputTokens: number;
  /** The call's cap (DEFAULT_OUTPUT_ESTIMATE when the request sets none). */
  maxOutputTokens: number;
  /** The installation scope always applies; these add to it. */
  scopes: SpendScopes;
  kind: SpendKind;
}

/** What a call used, as the provider reported it. */
export interface SpendUsage {
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens?: number;
}

/** A reservation of spend for one model call, settled once the call ends. */
export interface SpendTicket {
  key: string;
}

/**
 * The spend budget every model call goes through: `reserve` the worst case before the call,
 * against every scope that applies, atomically (throws ModelBudgetExceededError, with `.budget`,
 * when any does not fit); `settle` after it to the provider's reported usage (idempotent by key).
 */
export interface ModelSpend {
  reserve(req: SpendRequest): Promise<SpendTicket>;
  settle(ticket: SpendTicket, usage: SpendUsage): Promise<void>;
  /** False while no budget exists at all: the call needs no reservation (absent: always true). */
  applies?(): Promise<boolean>;
  /** False while only the installation's budgets exist: the call's other scopes need not be looked up (absent: always true). */
  scoped?(): Promise<boolean>;
}

/**
 * Whom a model call is spent for, given by its caller: the step's key (stable across retries of
 * the activity), the call's kind and its scopes. The scopes may be a function: it is asked only
 * when a budget is configured (no lookups on a Steward without one).
 */
export interface SpendContext {
  key: string;
  kind: SpendKind;
  scopes: SpendScopes | (() => Promise<SpendScopes>);
}

/** A model call reached the model layer without its spend context while a budget is set: a bug of the caller, refused loudly (never retried). */
export class SpendContextMissingError extends Error {
  override readonly name = 'SpendContextMissingError';
}

/** The scopes of a spend context, asked for when a budget needs them. */
export async function spendScopes(ctx: SpendContext): Promise<SpendScopes> {
  return typeof ctx.scopes === 'function' ? ctx.scopes() : ctx.scopes;
}

const stepKeys = new AsyncLocalStorage<string>();

/**
 * Run `fn` as the step `key`: a model call it causes below layers that do not know their step
 * (a workspace search's query embedding) is keyed under it, so a retried activity reserves it
 * under the same key again.
 */
export function withStepKey<T>(key: string, fn: () => Promise<T>): Promise<T> {
  return stepKeys.run(key, fn);
}

/** The key of the step running now (withStepKey), if any. */
export function currentStepKey(): string | undefined {
  return stepKeys.getStore();
}

/** A rough token count of a text (4 characters a token): what a reservation counts the input at. */
export function estimateTokens(chars: number): number {
  return Math.ceil(chars / 4);
}

/** A call's output cap under a budget when the request sets none: reserved before the call, and asked of the provider (max_tokens). */
export const DEFAULT_OUTPUT_ESTIMATE = 4096;

/** The model registry with a spend budget: every model step through it reserves before and settles after. */
export function withSpend(registry: ModelRegistry, spend: ModelSpend): ModelRegistry {
  return { ...registry, spend };
}

/** The model reference names a provider that has no credentials / endpoint configured. */
export class ModelNotConfiguredError extends Error {
  override readonly name = 'ModelNotConfiguredError';
  constructor(
    message: string,
    readonly provider?: Provider,
    /** The env var to set, e.g. OPENAI_API_KEY. */
    readonly envVar?: string,
  ) {
    super(message);
  }
}

/** The model reference is not of the form `provider:model`. */
export class InvalidModelRefError extends Error {
  override readonly name = 'InvalidModelRefError';
}

/** A model call ended by its abort signal. `name` is 'AbortError'; `cause` is the signal's reason. */
export class ModelCallAbortedError extends Error {
  override readonly name = 'AbortError';
  constructor(reason?: unknown) {
    super('The model call was aborted', reason === undefined ? undefined : { cause: reason });
  }
}

/** The env var(s) that configure each provider, for error messages. */
export const PROVIDER_ENV: Record<Provider, string> = {
  openai: 'OPENAI_API_KEY',
  anthropic: 'ANTHROPIC_API_KEY',
  'openai-compatible': 'STEWARD_MODEL_BASE_URL',
};

const SETUP: Record<Provider, string> = {
  openai: 'set OPENAI_API_KEY',
  anthropic: 'set ANTHROPIC_API_KEY',
  'openai-compatible': 'set STEWARD_MODEL_BASE_URL (and STEWARD_MODEL_API_KEY if the endpoint needs a key)',
};

/** Every API key a registry was given: scrubbed from error messages verbatim. */
const knownSecrets = new Set<string>();

function rememberSecret(s: string | undefined) {
  if (s && s.trim().length >= 8) knownSecrets.add(s.trim());
}

function parseRef(ref: string): { provider: Provider; model: string } {
  if (!ModelRefSchema.safeParse(ref).success) {
    throw new InvalidModelRefError(
      `Invalid model reference ${JSON.stringify(String(ref).slice(0, 80))}: expected provider:model with provider one of openai, anthropic, openai-compatible (e.g. openai:gpt-4.1).`,
    );
  }
  return parseModelRef(ref);
}

export interface ModelRegistry {
  /** Providers with credentials / an endpoint, in a fixed order. */
  configuredProviders(): Provider[];
  /** True when `ref` is a valid `provider:model` whose provider is configured. */
  isConfigured(ref: string): boolean;
  /** The AI SDK model for `ref`; throws ModelNotConfiguredError or InvalidModelRefError. */
  languageModel(ref: string): LanguageModel;
  /** The AI SDK embedding model for `ref` (openai or openai-compatible; Anthropic has none); throws as `languageModel` does. */
  embeddingModel(ref: string): EmbeddingModel;
  /** The spend budget model steps reserve from and settle to (absent: no budget). */
  spend?: ModelSpend;
}

export function createModelRegistry(cfg: ModelProvidersConfig): ModelRegistry {
  const openaiKey = cfg.openai?.apiKey?.trim();
  const anthropicKey = cfg.anthropic?.apiKey?.trim();
  const compatibleURL = cfg.openaiCompatible?.baseURL?.trim();
  const compatibleKey = cfg.openaiCompatible?.apiKey?.trim();
  rememberSecret(openaiKey);
  rememberSecret(anthropicKey);
  rememberSecret(compatibleKey);

  const openai = openaiKey
    ? createOpenAI({ apiKey: openaiKey, ...(cfg.openai?.baseURL ? { baseURL: cfg.openai.baseURL } : {}) })
    : undefined;
  const anthropic = anthropicKey
    ? createAnthropic({ apiKey: anthropicKey, ...(cfg.anthropic?.baseURL ? { baseURL: cfg.anthropic.baseURL } : {}) })
    : undefined;
  const compatible = compatibleURL
    ? createOpenAICompatible({
        name: 'openaiCompatible',
        baseURL: compatibleURL,
        ...(compatibleKey ? { apiKey: compatibleKey } : {}),
        // Ask for `usage` in the final SSE chunk (stream_options.include_usage).
        includeUsage: true,
      })
    : undefined;
  const configured: Provider[] = [
    ...(openai ? (['openai'] as const) : []),
    ...(anthropic ? (['anthropic'] as const) : []),
    ...(compatible ? (['openai-compatible'] as const) : []),
  ];

  function build(ref: string): LanguageModel {
    const { provider, model } = parseRef(ref);
    const notConfigured = () =>
      new ModelNotConfiguredError(
        `No model provider is configured for ${ref}: ${SETUP[provider]} and restart Steward ` +
          `(or pick a configured model with /model provider:model${configured.length ? `; configured: ${configured.join(', ')}` : ''}).`,
        provider,
        PROVIDER_ENV[provider],
      );
    switch (provider) {
      case 'openai':
        if (!openai) throw notConfigured();
        // Chat Completions, not the Responses API: it is what OpenAI-compatible proxies speak.
        return openai.chat(model);
      case 'anthropic':
        if (!anthropic) throw notConfigured();
        return anthropic(model);
      case 'openai-compatible':
        if (!compatible) throw notConfigured();
        return compatible.chatModel(model);
    }
  }

  function buildEmbedding(ref: string): EmbeddingModel {
    const { provider, model } = parseRef(ref);
    if (provider === 'openai' && openai) return openai.embeddingModel(model);
    if (provider === 'openai-compatible' && compatible) return compatible.embeddingModel(model);
    if (provider === 'anthropic') throw new InvalidModelRefError(`${ref}: Anthropic offers no embeddings model; use openai:<model> or openai-compatible:<model>.`);
    throw new ModelNotConfiguredError(`No model provider is configured for the embeddings model ${ref}: ${SETUP[provider]} and restart Steward.`, provider, PROVIDER_ENV[provider]);
  }

  // one model object per reference: building one compiles the provider's response schemas
  const models = new Map<string, LanguageModel>();

  return {
    configuredProviders: () => [...configured],
    isConfigured(ref) {
      try {
        return configured.includes(parseRef(ref).provider);
      } catch {
        return false;
      }
    },
    languageModel(ref) {
      const known = models.get(ref);
      if (known) return known;
      const made = build(ref);
      if (models.size >= 64) models.delete(models.keys().next().value as string);
      models.set(ref, made);
      return made;
    },
    embeddingModel: buildEmbedding,
  };
}

const ANTHROPIC_BUDGET: Record<Exclude<ThinkLevel, 'off'>, number> = { low: 2048, medium: 8192, high: 24576 };

/**
 * OpenAI model families that reject `reasoning_effort` with a 400 (gpt-4*, gpt-3.5*,
 * chatgpt-*, gpt-5*-chat*). Other ids (o-series, gpt-5+, unknown) get the effort.
 */
function openaiRejectsReasoningEffort(modelId: string): boolean {
  return /^(gpt-4|gpt-3\.5|chatgpt-)/i.test(modelId) || /^gpt-\d+(\.\d+)?-chat/i.test(modelId);
}

export type ThinkProviderOptions = Record<string, Record<string, string | number | boolean | Record<string, string | number>>>;

/**
 * AI SDK provider options for a think level; 'off' sends nothing.
 * - openai: `reasoningEffort` (→ `reasoning_effort`), unless the model family rejects it.
 * - openai-compatible: `reasoningEffort` (→ `reasoning_effort`).
 * - anthropic: extended thinking with a token budget (the provider adds the budget to
 *   `max_tokens`, and switches to adaptive thinking on models that require it).
 */
export function thinkOptions(provider: Provider, think: ThinkLevel, modelId = ''): ThinkProviderOptions {
  if (think === 'off') return {};
  switch (provider) {
    case 'openai':
      return openaiRejectsReasoningEffort(modelId) ? {} : { openai: { reasoningEffort: think } };
    case 'openai-compatible':
      return { openaiCompatible: { reasoningEffort: think } };
    case 'anthropic':
      return { anthropic: { thinking: { type: 'enabled', budgetTokens: ANTHROPIC_BUDGET[think] } } };
  }
}

export interface ModelStepRequest {
  /** `provider:model`. */
  model: string;
  think: ThinkLevel;
  messages: ChatMessage[];
  maxOutputTokens?: number;
  /**
   * The output cap a call without its own `maxOutputTokens` reserves and asks for while a budget
   * applies (DEFAULT_OUTPUT_ESTIMATE when unset): for a caller whose answers run long (the coding
   * agent's whole-file writes). Without a budget the call sets no cap of its own, as before.
   */
  budgetOutputTokens?: number;
  /** Tools the model may call (declared only: Steward runs them, as activities). */
  tools?: ToolSet;
  /**
   * Whom the call is spent for (key, kind, scopes). Required whenever the registry has a spend
   * budget: without it the call is refused (SpendContextMissingError), never made unbudgeted.
   */
  spend?: SpendContext;
}

export interface ModelToolCall {
  toolCallId: string;
  toolName: string;
  input: unknown;
  /** The SDK could not parse or match the call. */
  invalid?: boolean;
  error?: string;
}

export interface ModelStepOutput {
  text: string;
  /** The AI SDK finish reason: 'stop', 'length', 'content-filter', 'tool-calls', 'error', 'other'. */
  finishReason: string;
  usage: { inputTokens: number; outputTokens: number; totalTokens: number; cachedInputTokens?: number };
  /** The model reference the step ran on. */
  model: string;
  /** Tool calls the model made in this step (empty when it answered in text). */
  toolCalls: ModelToolCall[];
}

export interface ModelStepOptions {
  /** Aborting cancels the HTTP request; the promise rejects with an AbortError-like error. */
  signal?: AbortSignal;
  /** Called for each streamed text chunk, with the text so far (the step is streamed). */
  onDelta?: (textSoFar: string, chunk: string) => void;
  /**
   * Stream the step even without `onDelta` (STEWARD_MODEL_STREAM): for a proxy that cuts a
   * response that sends nothing for a while. Otherwise a step without `onDelta` is one plain
   * request and response, which costs this process about half the CPU of a streamed one
   * (bench/model-call.ts).
   */
  stream?: boolean;
}

/** Which model ref a thrown error came from (for classifyModelError's messages). */
const errorModel = new WeakMap<object, string>();

function abortError(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  if (reason instanceof Error && (reason.name === 'AbortError' || reason.name === 'TimeoutError')) return reason;
  return new ModelCallAbortedError(reason);
}

function asError(e: unknown): Error {
  if (e instanceof Error) return e;
  const msg =
    e && typeof e === 'object' && 'message' in e && typeof (e as { message: unknown }).message === 'string'
      ? (e as { message: string }).message
      : typeof e === 'string'
        ? e
        : JSON.stringify(e);
  return new Error(`model stream error: ${msg}`, { cause: e });
}

/** What the AI SDK's calls take, the same for a streamed and a plain step. */
type CallSettings = Parameters<typeof generateText>[0];

/** The AI SDK's own telemetry, off for every call Steward makes (see the header). */
export const AI_SDK_TELEMETRY_OFF = { isEnabled: false } as const;

/** A tool call of the SDK (stream part or result) as the step reports it. */
function toolCallOf(part: { toolCallId: string; toolName: string; input: unknown; invalid?: boolean; error?: unknown }): ModelToolCall {
  return {
    toolCallId: part.toolCallId,
    toolName: part.toolName,
    input: part.input,
    ...(part.invalid ? { invalid: true, error: part.error instanceof Error ? part.error.message : String(part.error ?? 'invalid tool call') } : {}),
  };
}

function usageOf(u: { inputTokens?: number | undefined; outputTokens?: number | undefined; totalTokens?: number | undefined; inputTokenDetails?: { cacheReadTokens?: number | undefined } }): ModelStepOutput['usage'] {
  const input = u.inputTokens ?? 0;
  const output = u.outputTokens ?? 0;
  const cached = u.inputTokenDetails?.cacheReadTokens;
  return { inputTokens: input, outputTokens: output, totalTokens: u.totalTokens ?? input + output, ...(cached ? { cachedInputTokens: cached } : {}) };
}

type StepParts = Omit<ModelStepOutput, 'model'>;

/** A plain step: one request, the whole answer in one response (errors are thrown by the SDK). */
async function wholeStep(call: CallSettings): Promise<StepParts> {
  const result = await generateText(call);
  return { text: result.text, finishReason: result.finishReason, usage: usageOf(result.totalUsage), toolCalls: result.toolCalls.map(toolCallOf) };
}

/** A streamed step: the answer read part by part, `onDelta` told of each text chunk. */
async function streamedStep(call: CallSettings, opts: ModelStepOptions): Promise<StepParts> {
  let streamError: unknown;
  const result = streamText({
    ...call,
    onError: ({ error }) => {
      streamError ??= error;
    },
  });
  let text = '';
  let finishReason = 'unknown';
  let usage = { inputTokens: 0, outputTokens: 0, totalTokens: 0 };
  const toolCalls: ModelToolCall[] = [];
  for await (const part of result.fullStream) {
    if (opts.signal?.aborted) break;
    if (part.type === 'text-delta') {
      if (!part.text) continue;
      text += part.text;
      opts.onDelta?.(text, part.text);
    } else if (part.type === 'tool-call') {
      toolCalls.push(toolCallOf(part));
    } else if (part.type === 'error') {
      streamError ??= part.error;
      break;
    } else if (part.type === 'abort') {
      break;
    } else if (part.type === 'finish') {
      finishReason = part.finishReason;
      usage = usageOf(part.totalUsage);
    }
  }
  if (opts.signal?.aborted) throw abortError(opts.signal);
  if (streamError !== undefined) throw asError(streamError);
  return { text, finishReason, usage, toolCalls };
}

/**
 * Run one model step, streamed when `opts.onDelta` or `opts.stream` asks for it, else as one
 * plain request. Resolves with the full text; rejects with the provider's error
 * (APICallError, StreamProviderError, ...) when the call fails, and promptly with an
 * AbortError-like error when `opts.signal` aborts (the HTTP request is aborted too).
 */
export async function runModelStep(registry: ModelRegistry, req: ModelStepRequest, opts: ModelStepOptions = {}): Promise<ModelStepOutput> {
  const spend = registry.spend;
  if (!spend || (spend.applies && !(await spend.applies()))) return modelStep(registry, req, opts);
  // the budget: the worst case reserved before the call (the prompt counted, the answer at its cap), settled to the provider's usage after
  if (!req.spend) throw new SpendContextMissingError(`a call to ${req.model} came without its spend context (key, kind, scopes) while a model budget is set: refused (a bug of its caller)`);
  if (opts.signal?.aborted) throw abortError(opts.signal);
  const inputTokens = await promptTokens(req);
  // the output the call is held to at the provider is the output reserved: a call without its own cap gets the default one
  const maxOutputTokens = req.maxOutputTokens ?? req.budgetOutputTokens ?? DEFAULT_OUTPUT_ESTIMATE;
  const ticket = await spend.reserve({
    key: req.spend.key,
    model: req.model,
    inputTokens,
    maxOutputTokens: maxOutputTokens + thinkingTokens(req),
    // the installation's budgets apply to every call: its scopes are looked up only when a budget of one exists
    scopes: spend.scoped && !(await spend.scoped()) ? {} : await spendScopes(req.spend),
    kind: req.spend.kind,
  });
  // a call that failed may still have been billed for its prompt: settled at the prompt, never less
  let usage: SpendUsage = { inputTokens, outputTokens: 0 };
  try {
    const out = await modelStep(registry, { ...req, maxOutputTokens }, opts);
    if (out.usage.inputTokens > 0 || out.usage.outputTokens > 0) {
      usage = { inputTokens: out.usage.inputTokens, outputTokens: out.usage.outputTokens, ...(out.usage.cachedInputTokens ? { cachedInputTokens: out.usage.cachedInputTokens } : {}) };
    } else if (out.usage.totalTokens > 0) {
      usage = { inputTokens, outputTokens: Math.max(0, out.usage.totalTokens - inputTokens) };
    }
    return out;
  } finally {
    // a settle that fails leaves the whole reservation spent: over-counted, never under
    await spend.settle(ticket, usage).catch(() => undefined);
  }
}

/** The thinking tokens a provider adds to a call's output cap (Anthropic's thinking budget goes on top of max_tokens); none for a bad reference (the call fails as it would). */
function thinkingTokens(req: ModelStepRequest): number {
  if (req.think === 'off') return 0;
  const ref = ModelRefSchema.safeParse(req.model);
  return ref.success && parseModelRef(req.model).provider === 'anthropic' ? ANTHROPIC_BUDGET[req.think] : 0;
}

/** The characters of each tool's input schema as the provider is sent it (JSON Schema), per tool object: a turn's tools are the same objects step after step. */
const schemaChars = new WeakMap<Tool, Promise<number>>();
function toolSchemaChars(t: Tool): Promise<number> {
  let n = schemaChars.get(t);
  if (!n) {
    n = Promise.resolve()
      .then(() => asSchema(t.inputSchema).jsonSchema)
      .then(
        (schema) => JSON.stringify(schema).length,
        () => 0,
      );
    schemaChars.set(t, n);
  }
  return n;
}

/**
 * The input tokens of a request, estimated from what is sent (4 characters a token): its
 * messages and its tools' names, descriptions and input schemas (the schemas were most of a
 * turn's prompt, and went uncounted: a call used more than it held).
 */
async function promptTokens(req: ModelStepRequest): Promise<number> {
  let chars = 0;
  for (const m of req.messages) chars += typeof m.content === 'string' ? m.content.length : JSON.stringify(m.content).length;
  for (const [name, t] of Object.entries(req.tools ?? {})) chars += name.length + (typeof t.description === 'string' ? t.description.length : 0) + (await toolSchemaChars(t));
  return estimateTokens(chars);
}

async function modelStep(registry: ModelRegistry, req: ModelStepRequest, opts: ModelStepOptions): Promise<ModelStepOutput> {
  if (opts.signal?.aborted) throw abortError(opts.signal);
  const languageModel = registry.languageModel(req.model);
  const { provider, model: modelId } = parseRef(req.model);
  const instructions = req.messages
    .flatMap((m) => (m.role === 'system' ? [m.content] : []))
    .join('\n\n');
  const messages: ModelMessage[] = req.messages.filter((m) => m.role !== 'system');

  // Our own controller too, so that every way out (a throwing onDelta, an error part) tears
  // the HTTP request down, not only the caller's signal.
  const local = new AbortController();
  const signal = opts.signal ? AbortSignal.any([opts.signal, local.signal]) : local.signal;
  let completed = false;
  const startedAt = performance.now();
  const call: CallSettings = {
    model: languageModel,
    ...(instructions ? { instructions } : {}),
    messages,
    maxRetries: 0, // Temporal retries the activity
    abortSignal: signal,
    telemetry: AI_SDK_TELEMETRY_OFF,
    ...(req.maxOutputTokens ? { maxOutputTokens: req.maxOutputTokens } : {}),
    providerOptions: thinkOptions(provider, req.think, modelId),
    ...(req.tools && Object.keys(req.tools).length > 0 ? { tools: req.tools } : {}),
  };
  try {
    const out = opts.onDelta || opts.stream ? await streamedStep(call, opts) : await wholeStep(call);
    if (opts.signal?.aborted) throw abortError(opts.signal);
    completed = true;
    recordModelCall({ model: req.model, seconds: (performance.now() - startedAt) / 1000, outcome: 'ok', usage: out.usage });
    return { ...out, model: req.model };
  } catch (err) {
    recordModelCall({ model: req.model, seconds: (performance.now() - startedAt) / 1000, outcome: opts.signal?.aborted ? 'cancelled' : 'error' });
    if (opts.signal?.aborted && !(err instanceof Error && (err.name === 'AbortError' || err.name === 'TimeoutError'))) {
      throw abortError(opts.signal);
    }
    if (err && typeof err === 'object') errorModel.set(err, req.model);
    throw err;
  } finally {
    if (!completed) local.abort();
  }
}

export interface ClassifiedModelError {
  retryable: boolean;
  /** A short machine-readable kind, e.g. ModelAuth, ModelRateLimited, ModelUnavailable. */
  type: string;
  /** One line for people; never holds API keys. */
  message: string;
  status?: number;
  /** A budget refusal (ModelBudgetExceeded): which budget, what is left, when it renews; the activity passes it on as the failure's details. */
  budget?: BudgetStanding;
}

const MAX_DETAIL = 300;

/** Scrub API keys and bearer tokens out of a message, and bound its length. */
export function redactSecrets(message: string): string {
  let out = message;
  for (const s of knownSecrets) out = out.split(s).join('***');
  out = out
    .replace(/\b(sk-(?:ant-|proj-|or-)?)[A-Za-z0-9_-]{6,}/g, '$1***')
    .replace(/(Bearer\s+)[^\s"',;]+/gi, '$1***')
    .replace(/((?:api[-_ ]?key|x-api-key|authorization|access[-_]?token)["']?\s*[:=]\s*["']?)[^\s"',;&}]+/gi, '$1***');
  out = out.replace(/\s+/g, ' ').trim();
  return out.length > MAX_DETAIL ? `${out.slice(0, MAX_DETAIL)}…` : out;
}

function unwrap(err: unknown): unknown {
  let e = err;
  for (let i = 0; i < 5; i++) {
    if (RetryError.isInstance(e)) e = e.lastError;
    else if (NoOutputGeneratedError.isInstance(e) && e.cause !== undefined) e = e.cause;
    else break;
  }
  return e;
}

const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'UND_ERR_SOCKET',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'UND_ERR_CLOSED',
]);

/** A network-level cause (code or name) anywhere down the `cause` chain. */
function networkCause(err: unknown): { code?: string; timeout: boolean } | undefined {
  let e: unknown = err;
  for (let i = 0; i < 6 && e && typeof e === 'object'; i++) {
    const code = (e as { code?: unknown }).code;
    const name = (e as { name?: unknown }).name;
    if (name === 'TimeoutError' || (typeof code === 'string' && /TIMEOUT|ETIMEDOUT/.test(code))) return { timeout: true, ...(typeof code === 'string' ? { code } : {}) };
    if (typeof code === 'string' && NETWORK_CODES.has(code)) return { code, timeout: false };
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}

function errorMessage(e: unknown): string {
  if (e instanceof Error) return e.message;
  if (e && typeof e === 'object' && typeof (e as { message?: unknown }).message === 'string') return (e as { message: string }).message;
  return String(e);
}

function isQuotaExhausted(e: APICallError | StreamProviderError): boolean {
  const hay = `${APICallError.isInstance(e) ? (e.responseBody ?? '') : ''} ${JSON.stringify(e.data ?? null)} ${StreamProviderError.isInstance(e) ? `${e.type ?? ''} ${e.code ?? ''}` : ''}`;
  return /insufficient_quota|billing_hard_limit|credit balance is too low/i.test(hay);
}

function byStatus(status: number, detail: string, who: string, setup: string | undefined): ClassifiedModelError {
  const at = `${who}(${status})`;
  if (status === 401 || status === 403) {
    return { retryable: false, type: 'ModelAuth', status, message: `${at} refused the credentials: ${detail}. Check ${setup ?? 'the API key'}.` };
  }
  if (status === 404) return { retryable: false, type: 'ModelNotFound', status, message: `${at} does not know this model or endpoint: ${detail}` };
  if (status === 413) return { retryable: false, type: 'ModelRequestTooLarge', status, message: `${at} rejected the request as too large: ${detail}` };
  if (status === 429) return { retryable: true, type: 'ModelRateLimited', status, message: `${at} is rate limiting: ${detail}` };
  if (status === 408) return { retryable: true, type: 'ModelTimeout', status, message: `${at} timed out: ${detail}` };
  if (status === 409 || status >= 500) return { retryable: true, type: 'ModelUnavailable', status, message: `${at} is unavailable: ${detail}` };
  return { retryable: false, type: 'ModelBadRequest', status, message: `${at} rejected the request: ${detail}` };
}

/**
 * Which model errors are worth retrying, with a clear message that never carries API keys.
 * Not retryable: 400/401/403/404/413/422 (and other 4xx), quota exhaustion, ModelNotConfiguredError,
 * invalid model refs and prompts. Retryable: 408/409/429/5xx, timeouts, network errors,
 * malformed responses, aborts, and anything unknown.
 */
export function classifyModelError(err: unknown): ClassifiedModelError {
  const ref = err && typeof err === 'object' ? errorModel.get(err) : undefined;
  const e = unwrap(err);
  const who = ref ? `The model API for ${ref} ` : 'The model API ';
  let setup: string | undefined;
  if (ref) {
    try {
      const p = parseModelRef(ref).provider;
      setup = p === 'openai-compatible' ? 'STEWARD_MODEL_API_KEY' : PROVIDER_ENV[p];
    } catch {
      setup = undefined;
    }
  }

  if (e instanceof ModelNotConfiguredError) return { retryable: false, type: 'ModelNotConfigured', message: e.message };
  if (e instanceof ModelBudgetExceededError) return { retryable: false, type: 'ModelBudgetExceeded', message: e.message, ...(e.budget ? { budget: e.budget } : {}) };
  if (e instanceof SpendContextMissingError) return { retryable: false, type: 'SpendContextMissing', message: e.message };
  if (e instanceof InvalidModelRefError) return { retryable: false, type: 'InvalidModelRef', message: redactSecrets(e.message) };
  if (e instanceof Error && e.name === 'TimeoutError') {
    return { retryable: true, type: 'ModelTimeout', message: `The model call${ref ? ` to ${ref}` : ''} timed out.` };
  }
  if (e instanceof Error && e.name === 'AbortError') {
    return { retryable: true, type: 'ModelCallAborted', message: `The model call${ref ? ` to ${ref}` : ''} was aborted.` };
  }

  if (APICallError.isInstance(e) || StreamProviderError.isInstance(e)) {
    const detail = redactSecrets(errorMessage(e) || 'no detail');
    const status = e.statusCode;
    if (status !== undefined && (status === 429 || status === 403 || status === 402) && isQuotaExhausted(e)) {
      return { retryable: false, type: 'ModelQuotaExceeded', status, message: `${who}(${status}) reports the account's quota or credit is used up: ${detail}` };
    }
    if (status !== undefined) return byStatus(status, detail, who, setup);
    const net = networkCause(e);
    if (net?.timeout) return { retryable: true, type: 'ModelTimeout', message: `${who}timed out${net.code ? ` (${net.code})` : ''}: ${detail}` };
    if (APICallError.isInstance(e)) {
      return { retryable: true, type: 'ModelUnreachable', message: `${who}could not be reached or dropped the connection${net?.code ? ` (${net.code})` : ''}: ${detail}` };
    }
    // An in-stream error with no status: the SDK only marks it retryable for a few exact
    // messages ("overloaded", ...). Go by the provider's error type/code instead, and treat an
    // unknown mid-answer failure as transient (Temporal's retry policy still bounds it).
    const kind = `${e.type ?? ''} ${e.code ?? ''}`.toLowerCase();
    const permanent = /invalid_request|invalid_api_key|authentication|permission|not_found|context_length|content_filter|insufficient_quota/.test(kind);
    const retryable = e.isRetryable || !permanent;
    return { retryable, type: retryable ? 'ModelUnavailable' : 'ModelStreamError', message: `${who}reported an error mid-answer: ${detail}` };
  }

  const detail = redactSecrets(errorMessage(e) || 'unknown error');
  if (
    InvalidPromptError.isInstance(e) ||
    InvalidArgumentError.isInstance(e) ||
    InvalidMessageRoleError.isInstance(e) ||
    MessageConversionError.isInstance(e) ||
    UnsupportedFunctionalityError.isInstance(e) ||
    NoSuchModelError.isInstance(e) ||
    LoadAPIKeyError.isInstance(e)
  ) {
    return { retryable: false, type: 'ModelBadRequest', message: `The model request${ref ? ` for ${ref}` : ''} is invalid: ${detail}` };
  }
  if (InvalidResponseDataError.isInstance(e) || JSONParseError.isInstance(e) || TypeValidationError.isInstance(e)) {
    return { retryable: true, type: 'ModelBadResponse', message: `${who}sent a response that could not be read: ${detail}` };
  }
  const net = networkCause(e);
  if (net) {
    return net.timeout
      ? { retryable: true, type: 'ModelTimeout', message: `${who}timed out${net.code ? ` (${net.code})` : ''}: ${detail}` }
      : { retryable: true, type: 'ModelUnreachable', message: `${who}could not be reached${net.code ? ` (${net.code})` : ''}: ${detail}` };
  }
  return { retryable: true, type: 'ModelError', message: `The model call${ref ? ` to ${ref}` : ''} failed: ${detail}` };
}
