/**
 * Model prices: what a model call costs, for the money budgets (domain/budgets/ledger.ts).
 *
 * A price table maps `provider:model` to USD per million tokens: input, output, and cached input
 * where the provider reports cached tokens (priced as plain input where no cached price is
 * given). The defaults below are the providers' public list prices for the models Steward's
 * docs name (November 2026); they are DEFAULTS, to be overridden: an operator's table is merged
 * over them, model by model. A model without a price counts tokens only: money budgets do not
 * apply to its calls (the ledger reports such models, for `doctor`).
 *
 * Money is counted in integer micro-units of USD. A price per million tokens in USD is the
 * price of one token in micro-USD, so a call's cost is exact in pico-USD and rounded up to the
 * micro-USD.
 */
import { z } from 'zod';
import { ModelRefSchema } from '../../common/schemas.js';

// (at most $1000 per million: a call of millions of tokens stays exact in pico-USD)
const usdPerMillion = z.number().finite().nonnegative().max(1000);

/** One model's price in USD per million tokens. */
export const ModelPriceSchema = z.strictObject({
  input: usdPerMillion,
  output: usdPerMillion,
  /** Cached input tokens (prompt cache reads); absent: priced as input. */
  cachedInput: usdPerMillion.optional(),
});
export type ModelPrice = z.infer<typeof ModelPriceSchema>;

/** A price table: `provider:model` -> price. */
export const PriceTableSchema = z.record(ModelRefSchema, ModelPriceSchema);
export type Prices = Record<string, ModelPrice>;

/**
 * Default list prices (USD per million tokens) of the models Steward's docs and configuration
 * name, and their close relatives. Defaults only: override them with the operator's table.
 */
export const DEFAULT_PRICES: Readonly<Prices> = Object.freeze({
  'openai:gpt-4.1': { input: 2, output: 8, cachedInput: 0.5 },
  'openai:gpt-4.1-mini': { input: 0.4, output: 1.6, cachedInput: 0.1 },
  'openai:gpt-4.1-nano': { input: 0.1, output: 0.4, cachedInput: 0.025 },
  'openai:gpt-4o': { input: 2.5, output: 10, cachedInput: 1.25 },
  'openai:gpt-4o-mini': { input: 0.15, output: 0.6, cachedInput: 0.075 },
  'openai:o3': { input: 2, output: 8, cachedInput: 0.5 },
  'openai:o4-mini': { input: 1.1, output: 4.4, cachedInput: 0.275 },
  'openai:text-embedding-3-small': { input: 0.02, output: 0 },
  'openai:text-embedding-3-large': { input: 0.13, output: 0 },
  'anthropic:claude-sonnet-4-5': { input: 3, output: 15, cachedInput: 0.3 },
  'anthropic:claude-haiku-4-5': { input: 1, output: 5, cachedInput: 0.1 },
  'anthropic:claude-opus-4-1': { input: 15, output: 75, cachedInput: 1.5 },
});

/** The price table was refused: what is wrong with it, field by field. Nothing was changed. */
export class PriceTableError extends Error {
  override readonly name = 'PriceTableError';
}

/** Check an operator's price table (`{"provider:model": {"input": 2, "output": 8, "cachedInput": 0.5}}`); throws PriceTableError naming each bad field. */
export function parsePriceTable(input: unknown): Prices {
  const r = PriceTableSchema.safeParse(input);
  if (r.success) return r.data;
  const problems = r.error.issues.map((i) => `${i.path.length ? i.path.map(String).join('.') : '(the table)'}: ${i.message}`);
  throw new PriceTableError(`Model prices refused (nothing changed): ${problems.slice(0, 10).join('; ')}${problems.length > 10 ? `; and ${problems.length - 10} more` : ''}. Expected {"provider:model": {"input": USD per million tokens, "output": ..., "cachedInput"?: ...}}.`);
}

export interface PriceTable {
  /** The model's price, or undefined: the model counts tokens only. */
  priceOf(model: string): ModelPrice | undefined;
  /** Every priced model, defaults and overrides merged. */
  all(): Prices;
  /** Replace the operator's override (merged over the defaults); a bad table throws PriceTableError and changes nothing. */
  override(table: unknown): void;
}

/** The price table: the defaults with the operator's override merged over them (checked first: a bad one throws PriceTableError). */
export function createPriceTable(override?: unknown): PriceTable {
  let merged: Prices = { ...DEFAULT_PRICES };
  const table: PriceTable = {
    priceOf: (model) => (Object.hasOwn(merged, model) ? merged[model] : undefined),
    all: () => ({ ...merged }),
    override(t) {
      const parsed = parsePriceTable(t);
      merged = { ...DEFAULT_PRICES, ...parsed };
    },
  };
  if (override !== undefined) table.override(override);
  return table;
}

/** USD per million tokens as pico-USD per token (exact for prices of up to six decimals). */
const pico = (usdPerM: number) => Math.round(usdPerM * 1_000_000);
const microsOf = (picos: number) => Math.ceil(picos / 1_000_000);

/** What a call's usage costs, in micro-USD (rounded up): cached input at the cached price where there is one; `inputTokens` includes the cached ones. */
export function costMicros(price: ModelPrice, usage: { inputTokens: number; outputTokens: number; cachedInputTokens?: number }): number {
  const cached = Math.min(Math.max(0, usage.cachedInputTokens ?? 0), usage.inputTokens);
  const plain = usage.inputTokens - cached;
  return microsOf(plain * pico(price.input) + cached * pico(price.cachedInput ?? price.input) + usage.outputTokens * pico(price.output));
}

/** The most a call can cost, in micro-USD: every input token at the dearer input price, and the full output cap. */
export function worstCaseMicros(price: ModelPrice, inputTokens: number, maxOutputTokens: number): number {
  return microsOf(inputTokens * pico(Math.max(price.input, price.cachedInput ?? 0)) + maxOutputTokens * pico(price.output));
}

/** Micro-USD for people: $1.25, $0.50, $0.028, $0.000002. */
export function formatMoney(micros: number): string {
  const usd = micros / 1_000_000;
  if (usd >= 1 || usd === 0) return `$${usd.toFixed(2)}`;
  const [whole, cents = ''] = usd.toFixed(6).replace(/0+$/, '').split('.');
  return `$${whole}.${cents.padEnd(2, '0')}`;
}
