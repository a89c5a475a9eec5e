/**
 * The model layer against the OpenAI-compatible test double, through the real AI SDK
 * providers (`openai-compatible`, and `openai` pointed at the double's base URL).
 * Run: node --import tsx --test test/domain/model.test.ts
 */
import assert from 'node:assert/strict';
import { tracingChannel } from 'node:diagnostics_channel';
import { after, before, describe, it } from 'node:test';
import { APICallError, generateText, tool, zodSchema } from 'ai';
import { z } from 'zod';
import {
  classifyModelError,
  createModelRegistry,
  InvalidModelRefError,
  ModelNotConfiguredError,
  runModelStep,
  thinkOptions,
  type ChatMessage,
  type ModelRegistry,
} from '../../domain/model.js';
import { createEmbedder } from '../../domain/knowledge/embedder.js';
import { startModelServer, type ModelServer, type RecordedRequest } from '../helpers/model-server.js';

const OPENAI_KEY = 'sk-proj-TESTKEYopenai0123456789abcdef';
const COMPAT_KEY = 'compat-secret-token-4242';

type Body = {
  model: string;
  stream?: boolean;
  stream_options?: { include_usage?: boolean };
  messages: Array<{ role: string; content: unknown }>;
  reasoning_effort?: string;
  max_tokens?: number;
  max_completion_tokens?: number;
};
const bodyOf = (r: RecordedRequest | undefined) => {
  assert.ok(r, 'the server saw the request');
  return r.body as Body;
};

const ask = (text: string): ChatMessage[] => [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: text },
];

/** Both providers that speak Chat Completions, each pointed at the double. */
const VIA = [
  { name: 'openai-compatible provider', model: 'openai-compatible:llama-test', key: COMPAT_KEY },
  { name: 'openai provider', model: 'openai:gpt-4.1', key: OPENAI_KEY },
] as const;

describe('model layer (AI SDK) against the OpenAI-compatible double', () => {
  let server: ModelServer;
  let registry: ModelRegistry;

  before(async () => {
    server = await startModelServer();
    registry = createModelRegistry({
      openai: { apiKey: OPENAI_KEY, baseURL: server.baseURL },
      openaiCompatible: { baseURL: server.baseURL, apiKey: COMPAT_KEY },
    });
  });
  after(async () => {
    await server.close();
  });

  for (const via of VIA) {
    describe(`through the ${via.name}`, () => {
      it('streams text in order, calls onDelta per chunk, and reports usage', async () => {
        const n = server.requests.length;
        server.enqueue({ chunks: ['Hel', 'lo, ', 'wor', 'ld!'], chunkDelayMs: 5, usage: { prompt_tokens: 21, completion_tokens: 4 } });
        const deltas: Array<[string, string]> = [];
        const out = await runModelStep(registry, { model: via.model, think: 'off', messages: ask('greet me') }, {
          onDelta: (soFar, chunk) => deltas.push([soFar, chunk]),
        });
        assert.equal(out.text, 'Hello, world!');
        assert.equal(out.finishReason, 'stop');
        assert.equal(out.model, via.model);
        assert.deepEqual(out.usage, { inputTokens: 21, outputTokens: 4, totalTokens: 25 });
        assert.deepEqual(deltas, [
          ['Hel', 'Hel'],
          ['Hello, ', 'lo, '],
          ['Hello, wor', 'wor'],
          ['Hello, world!', 'ld!'],
        ]);

        const req = server.requests[n];
        const body = bodyOf(req);
        assert.equal(req?.path, '/v1/chat/completions');
        assert.equal(req?.headers.authorization, `Bearer ${via.key}`);
        assert.equal(body.model, via.model.slice(via.model.indexOf(':') + 1));
        assert.equal(body.stream, true);
        assert.equal(body.stream_options?.include_usage, true);
        assert.deepEqual(
          body.messages.map((m) => [m.role, m.content]),
          [
            ['system', 'You are terse.'],
            ['user', 'greet me'],
          ],
        );
        assert.equal(body.reasoning_effort, undefined, "think 'off' sends no reasoning effort");
      });

      it('uses the default responder when nothing is queued (echo), in one plain request without onDelta or stream', async () => {
        const n = server.requests.length;
        const out = await runModelStep(registry, { model: via.model, think: 'off', messages: ask('ping') });
        assert.equal(out.text, 'echo: ping');
        assert.equal(out.finishReason, 'stop');
        assert.ok(out.usage.totalTokens > 0);
        assert.equal(server.requests.length, n + 1);
        assert.notEqual(bodyOf(server.requests[n]).stream, true, 'not streamed');
      });

      it('reports the tool calls of a step, one for an unknown tool as invalid, plain and streamed alike', async () => {
        const tools = { lookup: tool({ description: 'Look something up.', inputSchema: zodSchema(z.object({ q: z.string() })) }) };
        for (const stream of [false, true]) {
          server.enqueue({ toolCalls: [{ id: 'c1', name: 'lookup', arguments: '{"q":"x"}' }, { id: 'c2', name: 'nope', arguments: '{}' }] });
          const out = await runModelStep(registry, { model: via.model, think: 'off', messages: ask('tools'), tools }, { stream });
          assert.equal(out.finishReason, 'tool-calls', `stream ${stream}`);
          assert.deepEqual(out.toolCalls[0], { toolCallId: 'c1', toolName: 'lookup', input: { q: 'x' } });
          assert.equal(out.toolCalls[1]?.toolName, 'nope');
          assert.equal(out.toolCalls[1]?.invalid, true);
          assert.match(out.toolCalls[1]?.error ?? '', /nope/);
        }
      });

      it('streams without onDelta when asked (STEWARD_MODEL_STREAM)', async () => {
        const n = server.requests.length;
        server.enqueue({ chunks: ['a', 'b', 'c'], usage: { prompt_tokens: 3, completion_tokens: 3 } });
        const out = await runModelStep(registry, { model: via.model, think: 'off', messages: ask('abc') }, { stream: true });
        assert.equal(out.text, 'abc');
        assert.deepEqual(out.usage, { inputTokens: 3, outputTokens: 3, totalTokens: 6 });
        assert.equal(bodyOf(server.requests[n]).stream, true);
      });

      it('aborting during a slow first token rejects promptly and closes the connection', async () => {
        const abortedBefore = server.aborted;
        const n = server.requests.length;
        server.enqueue({ text: 'too late', firstTokenDelayMs: 30_000 });
        const ac = new AbortController();
        const started = Date.now();
        const call = runModelStep(registry, { model: via.model, think: 'off', messages: ask('slow please') }, { signal: ac.signal });
        await server.waitForRequest(n + 1, 5000);
        const abortAt = Date.now();
        ac.abort();
        await assert.rejects(call, (err: Error) => {
          assert.equal(err.name, 'AbortError');
          assert.equal(classifyModelError(err).type, 'ModelCallAborted');
          return true;
        });
        const took = Date.now() - abortAt;
        assert.ok(took < 500, `rejected ${took} ms after abort (want well under a second)`);
        assert.ok(Date.now() - started < 5000);
        await server.waitForAborted(abortedBefore + 1, 2000);
      });

      it('aborting mid-stream rejects promptly and closes the connection', async () => {
        const abortedBefore = server.aborted;
        server.enqueue({ chunks: ['first ', 'second ', 'third'], chunkDelayMs: 30_000 });
        const ac = new AbortController();
        let abortAt = 0;
        const seen: string[] = [];
        const call = runModelStep(registry, { model: via.model, think: 'off', messages: ask('stream then stop') }, {
          signal: ac.signal,
          onDelta: (_soFar, chunk) => {
            seen.push(chunk);
            abortAt = Date.now();
            ac.abort();
          },
        });
        await assert.rejects(call, { name: 'AbortError' });
        assert.deepEqual(seen, ['first ']);
        assert.ok(Date.now() - abortAt < 500, `rejected ${Date.now() - abortAt} ms after abort`);
        await server.waitForAborted(abortedBefore + 1, 2000);
      });

      it('a 401 is not retryable and its message does not leak the API key', async () => {
        server.enqueue({ status: 401, errorBody: { error: { message: `Incorrect API key provided: ${via.key}`, type: 'invalid_request_error', code: 'invalid_api_key' } } });
        const err = await runModelStep(registry, { model: via.model, think: 'off', messages: ask('hi') }).then(
          () => assert.fail('expected a rejection'),
          (e: unknown) => e,
        );
        assert.ok(APICallError.isInstance(err), 'the provider error comes through as APICallError');
        const c = classifyModelError(err);
        assert.equal(c.retryable, false);
        assert.equal(c.status, 401);
        assert.equal(c.type, 'ModelAuth');
        assert.ok(!c.message.includes(via.key), `message leaks the key: ${c.message}`);
        assert.match(c.message, via.model.startsWith('openai:') ? /OPENAI_API_KEY/ : /STEWARD_MODEL_API_KEY/);
      });

      it('a 503 is retryable', async () => {
        server.enqueue({ status: 503, errorBody: { error: { message: 'overloaded, try later', type: 'server_error' } } });
        const err = await runModelStep(registry, { model: via.model, think: 'off', messages: ask('hi') }).then(
          () => assert.fail('expected a rejection'),
          (e: unknown) => e,
        );
        const c = classifyModelError(err);
        assert.equal(c.retryable, true);
        assert.equal(c.status, 503);
        assert.match(c.message, /overloaded/);
      });

      it('an error event inside the stream rejects the promise (not a silent empty answer)', async () => {
        server.enqueue({ chunks: ['partial '], streamError: { message: 'upstream exploded', type: 'server_error', code: 'boom' } });
        const err = await runModelStep(registry, { model: via.model, think: 'off', messages: ask('hi') }, { stream: true }).then(
          () => assert.fail('expected a rejection'),
          (e: unknown) => e,
        );
        const c = classifyModelError(err);
        assert.equal(c.retryable, true);
        assert.match(c.message, /upstream exploded/);
      });

      it('an in-stream invalid-request error is not retryable', async () => {
        server.enqueue({ chunks: ['x'], streamError: { message: 'too many tokens', type: 'invalid_request_error', code: 'context_length_exceeded' } });
        const err = await runModelStep(registry, { model: via.model, think: 'off', messages: ask('hi') }, { stream: true }).then(
          () => assert.fail('expected a rejection'),
          (e: unknown) => e,
        );
        assert.equal(classifyModelError(err).retryable, false);
      });

      it('a connection dropped mid-answer rejects as a retryable network error', async () => {
        server.enqueue({ chunks: ['one ', 'two ', 'three'], dropAfterChunks: 1 });
        const err = await runModelStep(registry, { model: via.model, think: 'off', messages: ask('hi') }, { stream: true }).then(
          () => assert.fail('expected a rejection'),
          (e: unknown) => e,
        );
        const c = classifyModelError(err);
        assert.equal(c.retryable, true);
        assert.equal(c.type, 'ModelUnreachable');
      });
    });
  }

  describe('think levels change the request body', () => {
    it("openai-compatible: 'high' sends reasoning_effort, 'off' sends nothing", async () => {
      const n = server.requests.length;
      await runModelStep(registry, { model: 'openai-compatible:llama-test', think: 'high', messages: ask('think'), maxOutputTokens: 123 });
      await runModelStep(registry, { model: 'openai-compatible:llama-test', think: 'off', messages: ask('do not think') });
      const high = bodyOf(server.requests[n]);
      const off = bodyOf(server.requests[n + 1]);
      assert.equal(high.reasoning_effort, 'high');
      assert.equal(high.max_tokens, 123);
      assert.ok(!('reasoning_effort' in off), 'no reasoning_effort key at all when off');
    });

    it("openai reasoning model: 'low' sends reasoning_effort (and the system prompt as developer)", async () => {
      const n = server.requests.length;
      await runModelStep(registry, { model: 'openai:gpt-5-mini', think: 'low', messages: ask('think'), maxOutputTokens: 321 });
      const body = bodyOf(server.requests[n]);
      assert.equal(body.reasoning_effort, 'low');
      assert.equal(body.max_completion_tokens, 321);
      assert.equal(body.messages[0]?.role, 'developer');
    });

    it('openai non-reasoning model (gpt-4.1): no reasoning_effort, which OpenAI would reject with a 400', async () => {
      const n = server.requests.length;
      await runModelStep(registry, { model: 'openai:gpt-4.1', think: 'high', messages: ask('think') });
      assert.ok(!('reasoning_effort' in bodyOf(server.requests[n])));
    });

    it('maps levels to provider options', () => {
      assert.deepEqual(thinkOptions('openai-compatible', 'medium'), { openaiCompatible: { reasoningEffort: 'medium' } });
      assert.deepEqual(thinkOptions('openai', 'high', 'o4-mini'), { openai: { reasoningEffort: 'high' } });
      assert.deepEqual(thinkOptions('anthropic', 'high'), { anthropic: { thinking: { type: 'enabled', budgetTokens: 24576 } } });
      assert.deepEqual(thinkOptions('anthropic', 'low'), { anthropic: { thinking: { type: 'enabled', budgetTokens: 2048 } } });
      for (const p of ['openai', 'anthropic', 'openai-compatible'] as const) assert.deepEqual(thinkOptions(p, 'off', 'o3'), {});
    });
  });

  describe('registry', () => {
    it('reports configured providers and refs', () => {
      assert.deepEqual(registry.configuredProviders(), ['openai', 'openai-compatible']);
      assert.equal(registry.isConfigured('openai:gpt-4.1'), true);
      assert.equal(registry.isConfigured('openai-compatible:x'), true);
      assert.equal(registry.isConfigured('anthropic:claude-sonnet-4-5'), false);
      assert.equal(registry.isConfigured('not a ref'), false);
    });

    it('throws ModelNotConfiguredError naming the env var to set', async () => {
      const empty = createModelRegistry({});
      assert.deepEqual(empty.configuredProviders(), []);
      const cases = [
        ['openai:gpt-4.1', /OPENAI_API_KEY/],
        ['anthropic:claude-sonnet-4-5', /ANTHROPIC_API_KEY/],
        ['openai-compatible:llama3.1', /STEWARD_MODEL_BASE_URL[\s\S]*STEWARD_MODEL_API_KEY/],
      ] as const;
      for (const [ref, env] of cases) {
        assert.throws(() => empty.languageModel(ref), (err: unknown) => {
          assert.ok(err instanceof ModelNotConfiguredError);
          assert.match(err.message, env);
          return true;
        });
      }
      const requests = server.requests.length;
      const err = await runModelStep(registry, { model: 'anthropic:claude-sonnet-4-5', think: 'off', messages: ask('hi') }).then(
        () => assert.fail('expected a rejection'),
        (e: unknown) => e,
      );
      assert.ok(err instanceof ModelNotConfiguredError);
      const c = classifyModelError(err);
      assert.equal(c.retryable, false);
      assert.equal(c.type, 'ModelNotConfigured');
      assert.match(c.message, /ANTHROPIC_API_KEY/);
      assert.equal(server.requests.length, requests, 'no HTTP request was made');
    });

    it('an empty API key counts as not configured', () => {
      const r = createModelRegistry({ openai: { apiKey: '  ' } });
      assert.deepEqual(r.configuredProviders(), []);
      assert.throws(() => r.languageModel('openai:gpt-4.1'), ModelNotConfiguredError);
    });

    it('rejects malformed refs with a clear, non-retryable error', () => {
      assert.throws(() => registry.languageModel('gpt-4.1'), (err: unknown) => {
        assert.ok(err instanceof InvalidModelRefError);
        assert.match(err.message, /provider:model/);
        assert.equal(classifyModelError(err).retryable, false);
        return true;
      });
    });
  });

  describe('classifyModelError', () => {
    const apiError = (statusCode: number | undefined, message = `status ${statusCode}`, responseBody?: string) =>
      new APICallError({ message, url: 'https://api.example.test/v1/chat/completions', requestBodyValues: {}, ...(statusCode ? { statusCode } : {}), ...(responseBody ? { responseBody } : {}) });

    it('4xx request errors are not retryable; 408/409/429/5xx are', () => {
      for (const s of [400, 401, 403, 404, 413, 422]) {
        const c = classifyModelError(apiError(s));
        assert.equal(c.retryable, false, `${s} should not be retryable`);
        assert.equal(c.status, s);
      }
      for (const s of [408, 409, 429, 500, 502, 503, 504, 529]) {
        const c = classifyModelError(apiError(s));
        assert.equal(c.retryable, true, `${s} should be retryable`);
        assert.equal(c.status, s);
      }
    });

    it('a 429 for an exhausted quota is not retryable', () => {
      const c = classifyModelError(apiError(429, 'You exceeded your current quota', '{"error":{"code":"insufficient_quota"}}'));
      assert.equal(c.retryable, false);
      assert.equal(c.type, 'ModelQuotaExceeded');
    });

    it('network errors and timeouts are retryable', async () => {
      const closed = await startModelServer();
      const url = closed.baseURL;
      await closed.close();
      const dead = createModelRegistry({ openaiCompatible: { baseURL: url } });
      const err = await runModelStep(dead, { model: 'openai-compatible:x', think: 'off', messages: ask('hi') }).then(
        () => assert.fail('expected a rejection'),
        (e: unknown) => e,
      );
      const c = classifyModelError(err);
      assert.equal(c.retryable, true);
      assert.equal(c.type, 'ModelUnreachable');

      const timeout = classifyModelError(new DOMException('The operation timed out', 'TimeoutError'));
      assert.equal(timeout.retryable, true);
      assert.equal(timeout.type, 'ModelTimeout');
      const reset = classifyModelError(Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }));
      assert.equal(reset.retryable, true);
    });

    it('never puts API keys in messages', () => {
      for (const msg of [
        `Incorrect API key provided: ${OPENAI_KEY}`,
        'header was Authorization: Bearer abc.def-ghi',
        'x-api-key: sk-ant-api03-AAAAAAAAAAAAAAAAAAAA',
        `token ${COMPAT_KEY} is unknown`,
      ]) {
        const c = classifyModelError(apiError(401, msg));
        for (const secret of [OPENAI_KEY, 'abc.def-ghi', 'sk-ant-api03-AAAAAAAAAAAAAAAAAAAA', COMPAT_KEY]) {
          assert.ok(!c.message.includes(secret), `leaked ${secret} in ${c.message}`);
        }
      }
    });
  });

  describe('the double itself', () => {
    it('answers non-streaming requests, lists models, returns tool calls, and honours match/setDefault', async () => {
      const post = (body: unknown) =>
        fetch(`${server.baseURL}/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }).then(
          (r) => r.json() as Promise<{ choices: Array<{ message: { content: string; tool_calls?: Array<{ id: string; function: { name: string; arguments: string } }> }; finish_reason: string }>; usage: { total_tokens: number } }>,
        );
      const models = (await fetch(`${server.baseURL}/models`).then((r) => r.json())) as { data: Array<{ id: string }> };
      assert.ok(models.data.length > 0);

      server.enqueue({ text: 'only for B', match: (r) => JSON.stringify(r.body).includes('"B"') });
      const a = await post({ model: 'm', messages: [{ role: 'user', content: 'A' }] });
      assert.equal(a.choices[0]?.message.content, 'echo: A');
      const b = await post({ model: 'm', messages: [{ role: 'user', content: 'B' }] });
      assert.equal(b.choices[0]?.message.content, 'only for B');
      assert.ok(b.usage.total_tokens > 0);

      server.enqueue({ toolCalls: [{ id: 'call_1', name: 'lookup', arguments: '{"q":"x"}' }] });
      const t = await post({ model: 'm', messages: [{ role: 'user', content: 'tool' }] });
      assert.equal(t.choices[0]?.finish_reason, 'tool_calls');
      assert.equal(t.choices[0]?.message.tool_calls?.[0]?.function.name, 'lookup');

      server.setDefault((r) => ({ text: `custom ${(r.body as Body).model}` }));
      try {
        const d = await post({ model: 'zz', messages: [{ role: 'user', content: 'x' }] });
        assert.equal(d.choices[0]?.message.content, 'custom zz');
      } finally {
        server.setDefault((r) => ({ text: `echo: ${(r.body as Body).messages.at(-1)?.content as string}` }));
      }
    });
  });
});

describe("the AI SDK's telemetry is off for every call Steward makes", () => {
  let server: ModelServer;
  let registry: ModelRegistry;
  /** What the SDK publishes on its process-wide tracing channel: every subscriber (an APM agent, say) would get it. */
  const published: string[] = [];
  const channel = tracingChannel('ai:telemetry');
  const handlers = {
    start: (m: unknown) => void published.push(`start ${JSON.stringify(m).slice(0, 200)}`),
    end: () => void published.push('end'),
    asyncStart: () => void published.push('asyncStart'),
    asyncEnd: () => void published.push('asyncEnd'),
    error: () => void published.push('error'),
  };

  before(async () => {
    server = await startModelServer();
    registry = createModelRegistry({ openaiCompatible: { baseURL: server.baseURL, apiKey: COMPAT_KEY } });
    channel.subscribe(handlers);
  });
  after(async () => {
    channel.unsubscribe(handlers);
    await server.close();
  });

  it('publishes nothing for a plain step, a streamed step and an embedding, where the SDK left to itself publishes the prompt', async () => {
    // the listener works: the same model called with the SDK's defaults publishes the call, prompt and all
    await generateText({ model: registry.languageModel('openai-compatible:llama-test'), prompt: 'the held secret is hunter2', maxRetries: 0 });
    assert.ok(published.some((m) => m.includes('hunter2')), `the SDK's default publishes the prompt (saw ${published.length} messages)`);
    published.length = 0;

    await runModelStep(registry, { model: 'openai-compatible:llama-test', think: 'off', messages: ask('the held secret is hunter2') });
    await runModelStep(registry, { model: 'openai-compatible:llama-test', think: 'off', messages: ask('again, streamed') }, { stream: true, onDelta: () => {} });
    const vectors = await createEmbedder(registry.embeddingModel('openai-compatible:embed-test'), 'openai-compatible:embed-test').embed(['a chunk of a runbook']);
    assert.equal(vectors.length, 1, 'the embedding was made');
    assert.deepEqual(published, [], "Steward's calls publish nothing on the SDK's tracing channel");
  });
});
