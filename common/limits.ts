/**
 * Plain constants and patterns the workflows check by (no zod: every module in the workflow
 * bundle is instantiated again for each workflow the worker keeps, so the bundle stays small).
 * common/schemas.ts builds its zod schemas from the same values.
 */

export const PROVIDERS = ['openai', 'anthropic', 'openai-compatible'] as const;

/** `provider:model`, e.g. `openai:gpt-4.1` or `openai-compatible:llama3.1`. */
export const MODEL_REF_PATTERN = new RegExp(`^(${PROVIDERS.join('|')}):[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}$`);
export const MODEL_REF_MESSAGE = `expected provider:model with provider one of ${PROVIDERS.join(', ')} (e.g. openai:gpt-4.1)`;

export const THINK_LEVELS = ['off', 'low', 'medium', 'high'] as const;

/** Limits that bound what one inbound message may carry. */
export const MAX_MESSAGE_CHARS = 32_000;
export const MAX_STEER_CHARS = 4_000;
