import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { ConfigError, loadConfig } from '../../config/index.js';

const dir = () => mkdtempSync(path.join(tmpdir(), 'steward-config-'));

describe('configuration', () => {
  it('has embedded defaults', () => {
    const cwd = dir();
    const c = loadConfig({}, cwd);
    assert.equal(c.dataDir, path.join(cwd, '.data'));
    assert.equal(c.http.port, 8787);
    assert.equal(c.temporal.address, undefined);
    assert.equal(c.temporal.embedded.port, 7233);
    assert.equal(c.temporal.embedded.uiPort, 8233);
    assert.equal(c.databaseUrl, `file:${path.join(cwd, '.data', 'steward.db')}`);
    assert.deepEqual(c.model.configuredProviders, []);
    assert.equal(c.model.default, 'openai:gpt-4.1');
  });

  it('reads providers and the model', () => {
    const c = loadConfig(
      { STEWARD_MODEL: 'openai-compatible:llama3.1', STEWARD_MODEL_BASE_URL: 'http://127.0.0.1:11434/v1', ANTHROPIC_API_KEY: 'sk-ant' },
      dir(),
    );
    assert.equal(c.model.default, 'openai-compatible:llama3.1');
    assert.deepEqual(c.model.configuredProviders, ['anthropic', 'openai-compatible']);
    assert.equal(c.model.providers.openaiCompatible?.baseURL, 'http://127.0.0.1:11434/v1');
  });

  it('names the variable and what it expects when a value is bad', () => {
    const cases: Array<[Record<string, string>, RegExp]> = [
      [{ STEWARD_HTTP_PORT: 'eighty' }, /STEWARD_HTTP_PORT: expected a TCP port number \(1-65535\); got "eighty"/],
      [{ STEWARD_HTTP_PORT: '70000' }, /STEWARD_HTTP_PORT: expected a TCP port/],
      [{ STEWARD_MODEL: 'gpt-4.1' }, /STEWARD_MODEL: expected provider:model/],
      [{ STEWARD_MODEL: 'openai-compatible:llama' }, /STEWARD_MODEL_BASE_URL: expected the OpenAI-compatible endpoint URL/],
      [{ DATABASE_URL: 'mysql://x' }, /DATABASE_URL: expected a SQLite URL/],
      [{ TEMPORAL_ADDRESS: 'http://temporal' }, /TEMPORAL_ADDRESS: expected host:port/],
      [{ STEWARD_API_TOKEN: 'short' }, /STEWARD_API_TOKEN: expected at least 16 characters[^\n]*got \(hidden\)/],
      [{ STEWARD_LOG_LEVEL: 'loud' }, /STEWARD_LOG_LEVEL/],
    ];
    for (const [env, re] of cases) {
      assert.throws(() => loadConfig(env, dir()), (err: unknown) => err instanceof ConfigError && re.test(err.message), JSON.stringify(env));
    }
  });

  it('reads process roles and model prices, and refuses bad ones with the variable named', () => {
    const cfg = loadConfig({ STEWARD_WORKER_QUEUES: 'repo,interactive', STEWARD_WORKER_CONCURRENCY: 'repo=2', STEWARD_MODEL_PRICES: 'openai:gpt-4.1=2/8, anthropic:claude-x=3.5/15' }, tmpdir());
    assert.deepEqual(cfg.workers.queues, ['repo', 'interactive']);
    assert.deepEqual(cfg.workers.concurrency, { repo: 2 });
    assert.deepEqual(cfg.model.prices, { 'openai:gpt-4.1': { input: 2, output: 8 }, 'anthropic:claude-x': { input: 3.5, output: 15 } });
    assert.deepEqual(loadConfig({}, tmpdir()).workers.queues, ['interactive', 'background', 'repo']);
    assert.deepEqual(loadConfig({}, tmpdir()).retrieval, { results: 4, excerptBytes: 1200, totalBytes: 4000 });
    assert.equal(loadConfig({ STEWARD_RETRIEVAL_RESULTS: '0' }, tmpdir()).retrieval.results, 0);
    for (const [key, value, re] of [
      ['STEWARD_WORKER_QUEUES', 'interactive,chatty', /STEWARD_WORKER_QUEUES: expected queue roles .*got chatty/],
      ['STEWARD_WORKER_CONCURRENCY', 'repo=0', /STEWARD_WORKER_CONCURRENCY: expected role=count pairs/],
      ['STEWARD_MODEL_PRICES', 'gpt-4.1=2/8', /STEWARD_MODEL_PRICES: expected provider:model=input\/output prices/],
      ['STEWARD_MODEL_PRICES', 'openai:gpt-4.1=cheap', /STEWARD_MODEL_PRICES: expected provider:model=input\/output prices/],
      ['STEWARD_RETRIEVAL_RESULTS', '50', /STEWARD_RETRIEVAL_RESULTS: expected a whole number of workspace sections per model step \(0 to 20/],
      ['STEWARD_RETRIEVAL_EXCERPT_BYTES', '0', /STEWARD_RETRIEVAL_EXCERPT_BYTES: expected a positive whole number of bytes/],
      ['STEWARD_PROMPT_FILE', 'no-such-prompt.md', /STEWARD_PROMPT_FILE: no such file .*no-such-prompt\.md/],
    ] as const) {
      assert.throws(() => loadConfig({ [key]: value }, tmpdir()), (err: unknown) => err instanceof ConfigError && re.test(err.message));
    }
  });

  it('reads the embeddings model (hybrid retrieval) and refuses one it cannot reach, with the variable named', () => {
    assert.equal(loadConfig({ STEWARD_EMBEDDING_MODEL: 'openai:text-embedding-3-small', OPENAI_API_KEY: 'sk-test' }, tmpdir()).retrieval.embeddingModel, 'openai:text-embedding-3-small');
    assert.equal(loadConfig({}, tmpdir()).retrieval.embeddingModel, undefined, 'unset: full text alone');
    for (const [env, re] of [
      [{ STEWARD_EMBEDDING_MODEL: 'text-embedding-3-small' }, /STEWARD_EMBEDDING_MODEL: expected provider:model of an embeddings model with provider openai or openai-compatible/],
      [{ STEWARD_EMBEDDING_MODEL: 'anthropic:claude' }, /STEWARD_EMBEDDING_MODEL: .*Anthropic has none/],
      [{ STEWARD_EMBEDDING_MODEL: 'openai-compatible:nomic-embed-text' }, /STEWARD_MODEL_BASE_URL: expected the OpenAI-compatible endpoint URL for an openai-compatible embeddings model/],
      [{ STEWARD_EMBEDDING_MODEL: 'openai:text-embedding-3-small' }, /OPENAI_API_KEY: expected an OpenAI API key for an openai embeddings model/],
    ] as const) {
      assert.throws(() => loadConfig(env, tmpdir()), (err: unknown) => err instanceof ConfigError && re.test(err.message), JSON.stringify(env));
    }
  });

  it('reads a config file; the environment wins', () => {
    const cwd = dir();
    const file = path.join(cwd, 'steward.json');
    writeFileSync(file, JSON.stringify({ STEWARD_HTTP_PORT: 9000, TEMPORAL_NAMESPACE: 'agents', OPENAI_API_KEY: 'sk-file' }));
    const c = loadConfig({ STEWARD_CONFIG: file, TEMPORAL_NAMESPACE: 'prod' }, cwd);
    assert.equal(c.http.port, 9000);
    assert.equal(c.temporal.namespace, 'prod');
    assert.deepEqual(c.model.configuredProviders, ['openai']);
    writeFileSync(file, JSON.stringify({ STEWARD_HTTP_PROT: 1 }));
    assert.throws(() => loadConfig({ STEWARD_CONFIG: file }, cwd), /STEWARD_HTTP_PROT \(in .*\): not a Steward setting/);
    assert.throws(() => loadConfig({ STEWARD_CONFIG: path.join(cwd, 'missing.json') }, cwd), /STEWARD_CONFIG: no such file/);
  });
});

describe('.env.example', () => {
  it('documents every setting', async () => {
    const { readFileSync } = await import('node:fs');
    const { ConfigEnvSchema } = await import('../../config/index.js');
    const text = readFileSync(new URL('../../.env.example', import.meta.url), 'utf8');
    for (const key of Object.keys(ConfigEnvSchema.shape)) assert.match(text, new RegExp(`^#? ?${key}=`, 'm'), key);
  });
});
