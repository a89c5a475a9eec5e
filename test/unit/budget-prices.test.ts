/**
 * Model prices (domain/budgets/prices.ts): defaults for every model Steward's docs and
 * configuration name, the cost of a call (cached input at its price, rounded up to the
 * micro-USD), the worst case a reservation holds, the operator's override merged over the
 * defaults, and a bad table refused with each bad field named, changing nothing. Pure.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { costMicros, createPriceTable, DEFAULT_PRICES, formatMoney, parsePriceTable, PriceTableError, worstCaseMicros } from '../../domain/budgets/prices.js';

const root = new URL('../../', import.meta.url);

/** Every `openai:` and `anthropic:` model reference in docs/, config/ and the README. */
function modelsNamedInDocs(): string[] {
  const files = [
    ...readdirSync(new URL('docs/', root)).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`),
    ...readdirSync(new URL('config/', root)).filter((f) => f.endsWith('.ts')).map((f) => `config/${f}`),
    'README.md',
  ];
  const found = new Set<string>();
  for (const f of files) for (const m of readFileSync(new URL(f, root), 'utf8').matchAll(/\b(?:openai|anthropic):[a-z0-9][a-z0-9.-]*[a-z0-9]/g)) found.add(m[0]);
  return [...found].sort();
}

describe('model prices', () => {
  it('has a default price for every model the docs and configuration name (a local model has none)', () => {
    const named = modelsNamedInDocs();
    assert.ok(named.includes('openai:gpt-4.1'), named.join(', '));
    for (const m of named) assert.ok(DEFAULT_PRICES[m], `${m} is named in the docs but has no default price`);
    assert.equal(createPriceTable().priceOf('openai-compatible:llama3.1'), undefined);
    // the defaults pass their own schema
    assert.deepEqual(parsePriceTable({ ...DEFAULT_PRICES }), { ...DEFAULT_PRICES });
  });

  it('costs a call in micro-USD: cached input at the cached price, rounded up', () => {
    const gpt41 = DEFAULT_PRICES['openai:gpt-4.1']!;
    // 6000 x $2 + 4000 x $0.50 + 1000 x $8 per million tokens
    assert.equal(costMicros(gpt41, { inputTokens: 10_000, outputTokens: 1000, cachedInputTokens: 4000 }), 22_000);
    // cached tokens beyond the input are not counted twice
    assert.equal(costMicros(gpt41, { inputTokens: 100, outputTokens: 0, cachedInputTokens: 500 }), 50);
    // no cached price: cached tokens cost what input does
    assert.equal(costMicros({ input: 1, output: 2 }, { inputTokens: 1000, outputTokens: 0, cachedInputTokens: 1000 }), 1000);
    // fractions of a micro-USD round up; prices like $0.075 are exact
    assert.equal(costMicros(DEFAULT_PRICES['openai:gpt-4o-mini']!, { inputTokens: 1000, outputTokens: 0, cachedInputTokens: 1000 }), 75);
    assert.equal(costMicros({ input: 0.1, output: 0 }, { inputTokens: 1, outputTokens: 0 }), 1);
    assert.equal(costMicros({ input: 0, output: 0 }, { inputTokens: 5, outputTokens: 5 }), 0);
    // the worst case: every input token uncached, the whole output cap
    assert.equal(worstCaseMicros(gpt41, 10_000, 1000), 28_000);
    assert.equal(formatMoney(28_000), '$0.028');
    assert.equal(formatMoney(500_000), '$0.50');
    assert.equal(formatMoney(1_250_000), '$1.25');
    assert.equal(formatMoney(2), '$0.000002');
    assert.equal(formatMoney(0), '$0.00');
  });

  it("merges the operator's table over the defaults", () => {
    const table = createPriceTable({ 'openai:gpt-4.1': { input: 1, output: 4 }, 'openai-compatible:llama3.1': { input: 0.05, output: 0.1 } });
    assert.deepEqual(table.priceOf('openai:gpt-4.1'), { input: 1, output: 4 });
    assert.deepEqual(table.priceOf('openai-compatible:llama3.1'), { input: 0.05, output: 0.1 });
    assert.deepEqual(table.priceOf('anthropic:claude-sonnet-4-5'), DEFAULT_PRICES['anthropic:claude-sonnet-4-5']);
    assert.equal(table.priceOf('openai:gpt-5-unknown'), undefined);
    assert.equal(table.priceOf('toString'), undefined, 'only own entries');
    // a new override replaces the previous one, still over the defaults
    table.override({});
    assert.deepEqual(table.priceOf('openai:gpt-4.1'), DEFAULT_PRICES['openai:gpt-4.1']);
  });

  it('refuses a bad table with each bad field named, and changes nothing', () => {
    const table = createPriceTable({ 'openai:gpt-4.1': { input: 1, output: 4 } });
    const before = table.all();
    const bad: Array<[unknown, RegExp]> = [
      [{ 'openai:gpt-4.1': { input: 1, ouput: 4 } }, /openai:gpt-4\.1/],
      [{ 'openai:gpt-4.1': { input: -1, output: 4 } }, /openai:gpt-4\.1\.input/],
      [{ 'openai:gpt-4.1': { input: 1, output: 4, cachedInput: 'cheap' } }, /openai:gpt-4\.1\.cachedInput/],
      [{ 'gpt-4.1': { input: 1, output: 4 } }, /gpt-4\.1/],
      [{ 'openai:gpt-4.1': { input: 1e9, output: 4 } }, /input/],
      [[1, 2], /the table/],
      ['2/8', /the table/],
    ];
    for (const [input, field] of bad) {
      assert.throws(
        () => table.override(input),
        (err: unknown) => err instanceof PriceTableError && /^Model prices refused \(nothing changed\)/.test(err.message) && field.test(err.message),
        JSON.stringify(input),
      );
      assert.deepEqual(table.all(), before, 'nothing changed');
    }
    assert.throws(() => createPriceTable({ 'openai:gpt-4.1': { input: 'two', output: 8 } }), PriceTableError);
  });
});
