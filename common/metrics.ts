/**
 * Steward's own Prometheus metrics (turns, model calls and tokens, gate verdicts), in one
 * prom-client registry per process. Activities record into it; `/metrics` serves it next to
 * the Temporal SDK's metrics (see platform/telemetry.ts).
 *
 * Cost: `steward_model_cost_usd_total` counts tokens times the operator's prices
 * (STEWARD_MODEL_PRICES, USD per million tokens); a model without a price has no cost sample.
 *
 * Budgets: `steward_budget_used`, `steward_budget_reserved` and `steward_budget_limit` give each
 * budget's standing in its current period, per scope and unit (tokens, usd), read from the
 * ledger when the metrics are scraped (`setBudgetStandings`: the process that has the database).
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

export const stewardRegistry = new Registry();

const turns = new Counter({
  name: 'steward_turns_total',
  help: 'Chat and objective turns finished, by outcome (replied, notice: a turn that ended with a notice instead of a reply, stopped, abandoned).',
  labelNames: ['outcome'] as const,
  registers: [stewardRegistry],
});

const modelCalls = new Counter({
  name: 'steward_model_calls_total',
  help: 'Model calls (one streamed step each), by provider, model and outcome (ok, error, cancelled).',
  labelNames: ['provider', 'model', 'outcome'] as const,
  registers: [stewardRegistry],
});

const modelTokens = new Counter({
  name: 'steward_model_tokens_total',
  help: 'Tokens the model providers reported, by provider, model and kind (input, output).',
  labelNames: ['provider', 'model', 'kind'] as const,
  registers: [stewardRegistry],
});

const modelCost = new Counter({
  name: 'steward_model_cost_usd_total',
  help: 'Cost of model calls in USD: reported tokens times STEWARD_MODEL_PRICES (models without a price are not counted), by provider and model.',
  labelNames: ['provider', 'model'] as const,
  registers: [stewardRegistry],
});

let prices: Record<string, { input: number; output: number }> = {};
/** The price table of the cost metric (USD per million input and output tokens, by `provider:model`). */
export function setModelPrices(table: Record<string, { input: number; output: number }>): void {
  prices = { ...table };
}

const modelSeconds = new Histogram({
  name: 'steward_model_call_seconds',
  help: 'Duration of model calls (request to last streamed part), by provider, model and outcome.',
  labelNames: ['provider', 'model', 'outcome'] as const,
  buckets: [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320],
  registers: [stewardRegistry],
});

const gateVerdicts = new Counter({
  name: 'steward_gate_verdicts_total',
  help: "Validation gate verdicts of repository changes, by verdict (pass, fail) and stage (validation, revalidation: the promotion gate's check on a moved base).",
  labelNames: ['verdict', 'stage'] as const,
  registers: [stewardRegistry],
});

export type TurnOutcome = 'replied' | 'notice' | 'stopped' | 'abandoned';
export type ModelCallOutcome = 'ok' | 'error' | 'cancelled';

/** A `provider:model` reference split for labels (the whole ref as the model when it has no provider). */
function splitRef(ref: string): { provider: string; model: string } {
  const i = ref.indexOf(':');
  return i > 0 ? { provider: ref.slice(0, i), model: ref.slice(i + 1) } : { provider: 'unknown', model: ref };
}

/** One model call: its duration, outcome and (when it finished) the tokens it used. */
export function recordModelCall(call: { model: string; seconds: number; outcome: ModelCallOutcome; usage?: { inputTokens: number; outputTokens: number } }): void {
  const { provider, model } = splitRef(call.model);
  modelCalls.inc({ provider, model, outcome: call.outcome });
  modelSeconds.observe({ provider, model, outcome: call.outcome }, Math.max(0, call.seconds));
  if (call.usage) {
    if (call.usage.inputTokens > 0) modelTokens.inc({ provider, model, kind: 'input' }, call.usage.inputTokens);
    if (call.usage.outputTokens > 0) modelTokens.inc({ provider, model, kind: 'output' }, call.usage.outputTokens);
    const price = prices[call.model];
    if (price) {
      const usd = (call.usage.inputTokens * price.input + call.usage.outputTokens * price.output) / 1_000_000;
      if (usd > 0) modelCost.inc({ provider, model }, usd);
    }
  }
}

/** A turn that finished (recorded once per turn, where its end receipt is first written). */
export function recordTurn(outcome: TurnOutcome): void {
  turns.inc({ outcome });
}

/** A validation gate verdict (recorded once per verdict, where its receipt is first written). */
export function recordGateVerdict(verdict: string, stage: 'validation' | 'revalidation'): void {
  gateVerdicts.inc({ verdict, stage });
}

/** One budget's standing in its current period (domain/budgets/), for the budget gauges. */
export interface BudgetGaugeRow {
  budget: string;
  scope: string;
  /** The scope's id; empty for the installation. */
  scopeId: string;
  period: string;
  used: { tokens: number; usd: number };
  reserved: { tokens: number; usd: number };
  /** null: not limited in that unit. */
  limit: { tokens: number | null; usd: number | null };
}

let budgetStandings: (() => Promise<BudgetGaugeRow[]>) | undefined;
let lastRead: { at: number; rows: Promise<BudgetGaugeRow[]> } | undefined;
const BUDGET_LABELS = ['budget', 'scope', 'scope_id', 'period', 'unit'] as const;

/** The standings of one scrape: the three gauges collect at once (prom-client asks them in parallel), from one read. */
function standingsOfThisScrape(): Promise<BudgetGaugeRow[]> {
  const now = Date.now();
  if (!lastRead || now - lastRead.at > 1000) lastRead = { at: now, rows: (budgetStandings?.() ?? Promise.resolve([])).catch(() => []) };
  return lastRead.rows;
}

/** A budget gauge: its samples, per budget and unit, from the scrape's standings. */
function budgetGauge(name: string, help: string, value: (row: BudgetGaugeRow, unit: 'tokens' | 'usd') => number | null): Gauge<(typeof BUDGET_LABELS)[number]> {
  const gauge: Gauge<(typeof BUDGET_LABELS)[number]> = new Gauge({
    name,
    help,
    labelNames: BUDGET_LABELS,
    registers: [stewardRegistry],
    async collect() {
      gauge.reset();
      for (const row of await standingsOfThisScrape()) {
        for (const unit of ['tokens', 'usd'] as const) {
          const v = value(row, unit);
          if (v !== null) gauge.set({ budget: row.budget, scope: row.scope, scope_id: row.scopeId, period: row.period, unit }, v);
        }
      }
    },
  });
  return gauge;
}

budgetGauge('steward_budget_used', "Model spend settled in the budget's current period, by budget, scope, scope id, period and unit (tokens, usd).", (r, u) => r.used[u]);
budgetGauge('steward_budget_reserved', "Model spend held by reservations not yet settled in the budget's current period, by budget, scope, scope id, period and unit (tokens, usd).", (r, u) => r.reserved[u]);
budgetGauge('steward_budget_limit', "A budget's limit per period, by budget, scope, scope id, period and unit (tokens, usd); no sample for a unit it does not limit.", (r, u) => r.limit[u]);

/** Where the budget gauges read the budgets' standing from when scraped (undefined: no budget gauges). */
export function setBudgetStandings(read: (() => Promise<BudgetGaugeRow[]>) | undefined): void {
  budgetStandings = read;
  lastRead = undefined;
}

let processMetrics = false;
/** Node.js process metrics (CPU, memory, event loop lag) as `steward_process_*`/`steward_nodejs_*`; once per process. */
export function enableProcessMetrics(): void {
  if (processMetrics) return;
  processMetrics = true;
  collectDefaultMetrics({ register: stewardRegistry, prefix: 'steward_' });
}
