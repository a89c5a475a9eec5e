/**
 * `steward doctor`'s model prices check (platform/doctor.ts pricesCheck): a configured model
 * without a price counts tokens only, so a money budget does not hold it; doctor says so and
 * names the setting that prices it (STEWARD_MODEL_PRICES, merged over the defaults).
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { loadConfig } from '../../config/index.js';
import { pricesCheck } from '../../platform/doctor.js';

const cwd = () => mkdtempSync(path.join(tmpdir(), 'steward-prices-'));

describe('doctor: model prices', () => {
  it('is ok when every configured model has a price (a default one)', () => {
    const c = pricesCheck(loadConfig({ STEWARD_MODEL: 'openai:gpt-4.1', OPENAI_API_KEY: 'sk-test-not-a-key' }, cwd()));
    assert.equal(c.status, 'ok', c.message);
    assert.match(c.message, /openai:gpt-4\.1/);
  });

  it('warns for a model without a price, naming it and the setting that prices it', () => {
    const cfg = loadConfig({ STEWARD_MODEL: 'openai-compatible:local-llm', STEWARD_MODEL_BASE_URL: 'http://127.0.0.1:9/v1', STEWARD_EMBEDDING_MODEL: 'openai:text-embedding-3-small', OPENAI_API_KEY: 'sk-test-not-a-key' }, cwd());
    const c = pricesCheck(cfg);
    assert.equal(c.status, 'warn');
    assert.match(c.message, /No price for openai-compatible:local-llm: its calls count tokens only/);
    assert.doesNotMatch(c.message, /text-embedding-3-small/, 'the embedding model has a default price');
    assert.match(c.fix ?? '', /STEWARD_MODEL_PRICES \(e\.g\. openai-compatible:local-llm=2\/8/);
  });

  it("is ok once the operator's prices name the model", () => {
    const cfg = loadConfig({ STEWARD_MODEL: 'openai-compatible:local-llm', STEWARD_MODEL_BASE_URL: 'http://127.0.0.1:9/v1', STEWARD_MODEL_PRICES: 'openai-compatible:local-llm=0.1/0.2' }, cwd());
    assert.equal(pricesCheck(cfg).status, 'ok');
  });
});
