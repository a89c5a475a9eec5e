/**
 * The worst case a budgeted call reserves is what it may use (issue 34). Its prompt is estimated
 * from all that is sent: the messages, and each tool's name, description and input schema (the
 * schemas went uncounted before, most of a turn's prompt with its tools). And it is held at the
 * provider to the output it reserved:
 * the worst case the ledger holds is the prompt plus the call's output cap, so the call asks the
 * provider for that cap (`max_tokens`): the request's own, else DEFAULT_OUTPUT_ESTIMATE. Before,
 * a call without its own cap (a chat turn, an objective's, a repository change's) reserved 4096
 * output tokens and asked for none, so an answer could use any amount more than was held.
 * Anthropic adds its thinking budget to max_tokens: a thinking call reserves that too. Without a
 * budget the call is as before (no cap asked). The real AI SDK providers against the scripted
 * OpenAI-compatible server; the spend is a recording ModelSpend (Steward's own interface).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { tool, zodSchema } from 'ai';
import { z } from 'zod';
import { createModelRegistry, DEFAULT_OUTPUT_ESTIMATE, ModelBudgetExceededError, runModelStep, withSpend, type ModelSpend, type SpendRequest } from '../../domain/model.js';
import { AGENT_MAX_OUTPUT_TOKENS } from '../../domain/changes/coding-agent.js';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';

/** A spend that records each reservation; `refuse` makes it refuse (no call is made then). */
function recordingSpend(refuse = false) {
  const reserved: SpendRequest[] = [];
  const spend: ModelSpend = {
    async reserve(req) {
      reserved.push(structuredClone(req));
      if (refuse) throw new ModelBudgetExceededError('Not called: refused by the test');
      return { key: req.key };
    },
    async settle() {},
  };
  return { spend, reserved };
}

const messages = [{ role: 'user' as const, content: 'How long may the answer be?' }];
const spendFor = (key: string) => ({ key, kind: 'chat' as const, scopes: {} });

describe('a budgeted call reserves what it may use', () => {
  let server: ModelServer;
  before(async () => {
    server = await startModelServer();
  });
  after(async () => {
    await server?.close();
  });
  const maxTokensOf = () => (server.requests.at(-1)?.body as { max_tokens?: number } | undefined)?.max_tokens;

  it('a call without its own cap reserves the default cap and asks the provider for it', async () => {
    const rec = recordingSpend();
    const models = withSpend(createModelRegistry({ openaiCompatible: { baseURL: server.baseURL } }), rec.spend);
    await runModelStep(models, { model: 'openai-compatible:test-model', think: 'high', messages, spend: spendFor('k1') });
    assert.equal(rec.reserved[0]?.maxOutputTokens, DEFAULT_OUTPUT_ESTIMATE);
    assert.equal(maxTokensOf(), DEFAULT_OUTPUT_ESTIMATE);
  });

  it("a call with its own cap reserves it and asks for it; streamed the same", async () => {
    const rec = recordingSpend();
    const models = withSpend(createModelRegistry({ openaiCompatible: { baseURL: server.baseURL } }), rec.spend);
    await runModelStep(models, { model: 'openai-compatible:test-model', think: 'off', messages, maxOutputTokens: 300, spend: spendFor('k2') });
    assert.equal(rec.reserved[0]?.maxOutputTokens, 300);
    assert.equal(maxTokensOf(), 300);
    await runModelStep(models, { model: 'openai-compatible:test-model', think: 'off', messages, spend: spendFor('k3') }, { stream: true });
    assert.equal(rec.reserved[1]?.maxOutputTokens, DEFAULT_OUTPUT_ESTIMATE);
    assert.equal(maxTokensOf(), DEFAULT_OUTPUT_ESTIMATE);
  });

  it("an Anthropic thinking call reserves its thinking budget on top (the provider adds it to max_tokens)", async () => {
    const rec = recordingSpend(true);
    const models = withSpend(createModelRegistry({ anthropic: { apiKey: 'sk-ant-test-not-a-key', baseURL: 'http://127.0.0.1:9/v1' } }), rec.spend);
    const calls = server.requests.length;
    await assert.rejects(runModelStep(models, { model: 'anthropic:claude-sonnet-4-5', think: 'high', messages, spend: spendFor('k4') }), ModelBudgetExceededError);
    await assert.rejects(runModelStep(models, { model: 'anthropic:claude-sonnet-4-5', think: 'off', messages, maxOutputTokens: 500, spend: spendFor('k5') }), ModelBudgetExceededError);
    assert.deepEqual(rec.reserved.map((r) => r.maxOutputTokens), [DEFAULT_OUTPUT_ESTIMATE + 24_576, 500]);
    assert.equal(server.requests.length, calls, 'refused: no call made');
  });

  it("the prompt's estimate counts each tool's input schema as it is sent", async () => {
    const rec = recordingSpend();
    const models = withSpend(createModelRegistry({ openaiCompatible: { baseURL: server.baseURL } }), rec.spend);
    const params = z.object(Object.fromEntries(Array.from({ length: 12 }, (_, i) => [`field_${i}`, z.string().describe(`the ${i}th field of a long form, described at some length`)])));
    const tools = { fill_form: tool({ description: 'Fill the form.', inputSchema: zodSchema(params) }) };
    await runModelStep(models, { model: 'openai-compatible:test-model', think: 'off', messages, spend: spendFor('k6') });
    await runModelStep(models, { model: 'openai-compatible:test-model', think: 'off', messages, tools, spend: spendFor('k7') });
    const sent = JSON.stringify((server.requests.at(-1)!.body as { tools: unknown[] }).tools);
    const [without, withTools] = rec.reserved.map((r) => r.inputTokens);
    // the schema as sent, in JSON: what the provider counts (4 characters a token)
    assert.ok(withTools! - without! >= Math.floor(JSON.stringify(z.toJSONSchema(params)).length / 4), `${without} -> ${withTools}; tools sent: ${sent.length} characters`);
    assert.ok(withTools! - without! <= Math.ceil(sent.length / 4), 'no more than was sent');
  });

  it("a caller's cap under a budget (the coding agent's whole-file writes) is reserved and asked for; without a budget the call asks for no cap (as before)", async () => {
    const rec = recordingSpend();
    const models = withSpend(createModelRegistry({ openaiCompatible: { baseURL: server.baseURL } }), rec.spend);
    await runModelStep(models, { model: 'openai-compatible:test-model', think: 'off', messages, budgetOutputTokens: AGENT_MAX_OUTPUT_TOKENS, spend: { key: 'k8', kind: 'coding-agent', scopes: {} } });
    assert.equal(rec.reserved[0]?.maxOutputTokens, AGENT_MAX_OUTPUT_TOKENS);
    assert.equal(maxTokensOf(), AGENT_MAX_OUTPUT_TOKENS);
    await runModelStep(createModelRegistry({ openaiCompatible: { baseURL: server.baseURL } }), { model: 'openai-compatible:test-model', think: 'off', messages, budgetOutputTokens: AGENT_MAX_OUTPUT_TOKENS });
    assert.equal(maxTokensOf(), undefined);
  });
});
