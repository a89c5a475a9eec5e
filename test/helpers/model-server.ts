/**
 * A test double of an OpenAI-compatible model server on 127.0.0.1: `POST
 * /v1/chat/completions` (streaming SSE and plain JSON) and `GET /v1/models`, with scripted
 * answers, delays and errors; `POST /v1/embeddings` with deterministic vectors that carry some
 * meaning (`trigramEmbedding`: a misspelt or inflected word lands near its right form). The
 * real provider code talks to it over HTTP.
 *
 * Delays stop as soon as the client goes away, and `close()` drops every open connection,
 * so no timer or socket keeps the test process alive.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface RecordedRequest {
  method: string;
  path: string;
  headers: Record<string, string | string[] | undefined>;
  /** The parsed JSON body (undefined for GET). */
  body: unknown;
}

export interface ScriptedToolCall {
  id: string;
  name: string;
  /** The JSON text of the arguments, as OpenAI sends it. */
  arguments: string;
}

export interface ScriptedReply {
  /** The whole answer; streamed as one chunk unless `chunks` is given. */
  text?: string;
  /** The answer as streamed content deltas (joined for a non-streaming request). */
  chunks?: string[];
  /** Wait this long before the status line / first token. */
  firstTokenDelayMs?: number;
  /** Wait this long between streamed chunks. */
  chunkDelayMs?: number;
  /** An HTTP error status (>= 400) answered instead of a completion. */
  status?: number;
  /** Body for an error status: JSON unless a string is given (sent as text/plain). */
  errorBody?: unknown;
  /** Extra response headers (e.g. `retry-after`). */
  headers?: Record<string, string>;
  /** Streaming only: after the chunks, send an in-stream `{ error }` event and end the stream. */
  streamError?: unknown;
  /** Streaming only: destroy the connection after this many content chunks (a network failure mid-answer). */
  dropAfterChunks?: number;
  /** Tool calls the assistant makes (OpenAI `tool_calls`); finish_reason becomes `tool_calls`. */
  toolCalls?: ScriptedToolCall[];
  finishReason?: string;
  usage?: { prompt_tokens: number; completion_tokens: number };
  /** This reply only answers a request it matches; unmatched requests take the next one that does. */
  match?: (req: RecordedRequest) => boolean;
}

/** A chat completion answered whole: the request's body and the answer (what a replay's scripted model answers again). */
export interface ModelExchange {
  body: unknown;
  text: string;
  toolCalls: ScriptedToolCall[];
}

export interface ModelServer {
  /** `http://127.0.0.1:<port>/v1`, the base URL for the OpenAI and OpenAI-compatible providers. */
  baseURL: string;
  /** Chat-completion requests, in arrival order (none kept with `keepRequests: false`). */
  requests: RecordedRequest[];
  /** Chat completions answered whole (not errors, not abandoned), in order (none kept with `keepRequests: false`). */
  exchanges: ModelExchange[];
  /** Embedding requests, in arrival order (each may carry many inputs). */
  embeddingRequests: RecordedRequest[];
  /** While set, `POST /v1/embeddings` answers this HTTP status (an endpoint that fails); undefined: it answers. */
  failEmbeddings: number | undefined;
  /** Requests whose client went away before the answer was complete. */
  readonly aborted: number;
  /** Requests whose answer was sent completely. */
  readonly completed: number;
  enqueue(reply: ScriptedReply): void;
  setDefault(fn: (req: RecordedRequest) => ScriptedReply): void;
  /** Resolves with the n-th (1-based) chat-completion request once it has arrived. */
  waitForRequest(n: number, timeoutMs?: number): Promise<RecordedRequest>;
  /** Resolves once at least n requests have been abandoned by their client. */
  waitForAborted(n: number, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

export interface ModelServerOptions {
  /** Model ids listed by `GET /v1/models`. */
  models?: string[];
  /**
   * Keep every chat-completion request in `requests` (default true). The benchmarks turn it off:
   * the model server runs in the measured process, and a thousand kept requests with Steward's
   * system prompt and tool schemas were about 10 MB of its heap (the floor's bodies are a line each).
   */
  keepRequests?: boolean;
}

/** The text of the last user message of an OpenAI chat body (string or content parts). */
export function lastUserText(body: unknown): string {
  const msgs = (body as { messages?: Array<{ role: string; content: unknown }> } | undefined)?.messages ?? [];
  for (let i = msgs.length - 1; i >= 0; i--) {
    const m = msgs[i];
    if (m?.role !== 'user') continue;
    if (typeof m.content === 'string') return m.content;
    if (Array.isArray(m.content)) return m.content.map((p: { text?: string }) => p.text ?? '').join('');
  }
  return '';
}

/** Dimensions of the double's embeddings. */
export const EMBEDDING_DIMS = 256;

/** FNV-1a of a string, 32 bits. */
function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

/**
 * The double's embedding of a text: a hashed bag of the character trigrams of its lowercased
 * words (each padded with #, so "rollbak" shares most of its trigrams with "rollback") in
 * EMBEDDING_DIMS dimensions, L2-normalised. Deterministic; similar spelling, similar vector.
 */
export function trigramEmbedding(text: string): number[] {
  const v = new Array<number>(EMBEDDING_DIMS).fill(0);
  for (const word of text.normalize('NFKC').toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []) {
    const w = `#${word}#`;
    for (let i = 0; i + 3 <= w.length; i++) {
      const h = fnv1a(w.slice(i, i + 3));
      v[h % EMBEDDING_DIMS]! += 1;
    }
  }
  const len = Math.sqrt(v.reduce((n, x) => n + x * x, 0));
  return len > 0 ? v.map((x) => x / len) : v;
}

export async function startModelServer(opts: ModelServerOptions = {}): Promise<ModelServer> {
  const queue: ScriptedReply[] = [];
  const requests: RecordedRequest[] = [];
  const exchanges: ModelExchange[] = [];
  const embeddingRequests: RecordedRequest[] = [];
  let failEmbeddings: number | undefined;
  const waiters = new Set<() => void>();
  const pendingWaits = new Set<{ timer: NodeJS.Timeout; reject: (err: Error) => void }>();
  const sockets = new Set<Socket>();
  let aborted = 0;
  let completed = 0;
  let received = 0;
  let closed = false;
  let fallback = (req: RecordedRequest): ScriptedReply => ({ text: `echo: ${lastUserText(req.body)}` });
  const notify = () => {
    for (const w of [...waiters]) w();
  };

  /** Resolves after ms, or at once when the signal fires; never leaves a timer behind. */
  const sleep = (ms: number, signal: AbortSignal) =>
    new Promise<void>((resolve) => {
      if (ms <= 0 || signal.aborted) return resolve();
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener('abort', done, { once: true });
    });

  function waitUntil<T>(probe: () => T | undefined, timeoutMs: number, what: () => string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const pending = {
        timer: setTimeout(() => finish(new Error(`model server: timed out after ${timeoutMs} ms waiting for ${what()}`)), timeoutMs),
        reject: (err: Error) => finish(err),
      };
      const finish = (err?: Error, value?: T) => {
        clearTimeout(pending.timer);
        waiters.delete(check);
        pendingWaits.delete(pending);
        if (err) reject(err);
        else resolve(value as T);
      };
      const check = () => {
        const v = probe();
        if (v !== undefined) finish(undefined, v);
      };
      pendingWaits.add(pending);
      waiters.add(check);
      check();
    });
  }

  async function completions(req: IncomingMessage, res: ServerResponse, body: unknown) {
    const recorded: RecordedRequest = { method: req.method ?? 'POST', path: req.url ?? '', headers: req.headers, body };
    received++;
    if (opts.keepRequests !== false) requests.push(recorded);
    const idx = queue.findIndex((r) => !r.match || r.match(recorded));
    const reply = idx >= 0 ? queue.splice(idx, 1)[0]! : fallback(recorded);
    const gone = new AbortController();
    let finished = false;
    res.on('close', () => {
      if (finished) return;
      aborted++;
      gone.abort();
      notify();
    });
    const done = () => {
      finished = true;
      completed++;
      notify();
    };
    notify();

    const b = (body ?? {}) as { stream?: boolean; model?: string; stream_options?: { include_usage?: boolean } };
    await sleep(reply.firstTokenDelayMs ?? 0, gone.signal);
    if (gone.signal.aborted) return;
    const extra = reply.headers ?? {};
    if (reply.status && reply.status >= 400) {
      const raw = typeof reply.errorBody === 'string';
      res.writeHead(reply.status, { 'content-type': raw ? 'text/plain' : 'application/json', ...extra });
      res.end(
        raw
          ? (reply.errorBody as string)
          : JSON.stringify(reply.errorBody ?? { error: { message: `scripted error ${reply.status}`, type: 'scripted', code: reply.status } }),
      );
      done();
      return;
    }

    const chunks = reply.chunks ?? [reply.text ?? ''];
    const text = chunks.join('');
    const toolCalls = reply.toolCalls ?? [];
    const finishReason = reply.finishReason ?? (toolCalls.length > 0 ? 'tool_calls' : 'stop');
    const usage = reply.usage ?? {
      prompt_tokens: Math.ceil(JSON.stringify(body).length / 4),
      completion_tokens: Math.max(1, Math.ceil(text.length / 4)),
    };
    const usageOut = { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens };
    const id = `chatcmpl-${received}`;
    const created = Math.floor(Date.now() / 1000);
    const model = b.model ?? 'test-model';

    if (!b.stream) {
      const message = {
        role: 'assistant',
        content: text,
        ...(toolCalls.length > 0
          ? { tool_calls: toolCalls.map((t) => ({ id: t.id, type: 'function', function: { name: t.name, arguments: t.arguments } })) }
          : {}),
      };
      res.writeHead(200, { 'content-type': 'application/json', ...extra });
      res.end(JSON.stringify({ id, object: 'chat.completion', created, model, choices: [{ index: 0, message, finish_reason: finishReason }], usage: usageOut }));
      if (opts.keepRequests !== false) exchanges.push({ body, text, toolCalls });
      done();
      return;
    }

    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive', ...extra });
    const send = (obj: unknown) => res.write(`data: ${JSON.stringify(obj)}\n\n`);
    const chunk = (delta: unknown, finish: string | null = null) =>
      send({ id, object: 'chat.completion.chunk', created, model, choices: [{ index: 0, delta, finish_reason: finish }] });
    chunk({ role: 'assistant', content: '' });
    for (let i = 0; i < chunks.length; i++) {
      if (i > 0) await sleep(reply.chunkDelayMs ?? 0, gone.signal);
      if (gone.signal.aborted) return;
      if (reply.dropAfterChunks !== undefined && i >= reply.dropAfterChunks) break;
      chunk({ content: chunks[i] });
    }
    if (reply.dropAfterChunks !== undefined && reply.dropAfterChunks < chunks.length) {
      // Counted as aborted by the 'close' handler: the answer never completed.
      res.socket?.destroy();
      return;
    }
    if (reply.streamError !== undefined) {
      send({ error: reply.streamError });
      res.end();
      done();
      return;
    }
    toolCalls.forEach((t, index) => {
      chunk({ tool_calls: [{ index, id: t.id, type: 'function', function: { name: t.name, arguments: t.arguments } }] });
    });
    chunk({}, finishReason);
    if (b.stream_options?.include_usage) send({ id, object: 'chat.completion.chunk', created, model, choices: [], usage: usageOut });
    res.end('data: [DONE]\n\n');
    if (opts.keepRequests !== false && reply.dropAfterChunks === undefined) exchanges.push({ body, text, toolCalls });
    done();
  }

  const json = (res: ServerResponse, status: number, value: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(value));
  };

  const server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      const url = (req.url ?? '').split('?')[0] ?? '';
      if (req.method === 'GET' && url.endsWith('/models')) {
        const ids = opts.models ?? ['test-model'];
        json(res, 200, { object: 'list', data: ids.map((id) => ({ id, object: 'model', created: 0, owned_by: 'steward-test' })) });
        return;
      }
      if (req.method === 'POST' && url.endsWith('/chat/completions')) {
        let body: unknown;
        try {
          body = JSON.parse(Buffer.concat(parts).toString('utf8'));
        } catch {
          json(res, 400, { error: { message: 'invalid JSON body', type: 'invalid_request_error' } });
          return;
        }
        completions(req, res, body).catch((err: unknown) => {
          if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
          res.end(String(err));
        });
        return;
      }
      if (req.method === 'POST' && url.endsWith('/embeddings')) {
        let body: { model?: string; input?: string | string[] };
        try {
          body = JSON.parse(Buffer.concat(parts).toString('utf8')) as typeof body;
        } catch {
          json(res, 400, { error: { message: 'invalid JSON body', type: 'invalid_request_error' } });
          return;
        }
        embeddingRequests.push({ method: 'POST', path: req.url ?? '', headers: req.headers, body });
        if (failEmbeddings !== undefined) {
          json(res, failEmbeddings, { error: { message: `scripted embeddings error ${failEmbeddings}`, type: 'scripted', code: failEmbeddings } });
          return;
        }
        const inputs = typeof body.input === 'string' ? [body.input] : Array.isArray(body.input) ? body.input : [];
        const tokens = inputs.reduce((n, t) => n + Math.ceil(t.length / 4), 0);
        json(res, 200, { object: 'list', model: body.model ?? 'test-embed', data: inputs.map((t, index) => ({ object: 'embedding', index, embedding: trigramEmbedding(t) })), usage: { prompt_tokens: tokens, total_tokens: tokens } });
        return;
      }
      json(res, 404, { error: { message: `no route ${req.method} ${url}`, type: 'not_found' } });
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;

  return {
    baseURL: `http://127.0.0.1:${port}/v1`,
    requests,
    exchanges,
    embeddingRequests,
    get failEmbeddings() {
      return failEmbeddings;
    },
    set failEmbeddings(status: number | undefined) {
      failEmbeddings = status;
    },
    get aborted() {
      return aborted;
    },
    get completed() {
      return completed;
    },
    enqueue: (r) => {
      queue.push(r);
    },
    setDefault: (fn) => {
      fallback = fn;
    },
    waitForRequest: (n, timeoutMs = 10_000) =>
      waitUntil(() => requests[n - 1], timeoutMs, () => `request ${n} (have ${requests.length})`),
    waitForAborted: (n, timeoutMs = 10_000) =>
      waitUntil(() => (aborted >= n ? true : undefined), timeoutMs, () => `${n} aborted requests (have ${aborted})`).then(() => undefined),
    close: () => {
      if (closed) return Promise.resolve();
      closed = true;
      for (const p of [...pendingWaits]) p.reject(new Error('model server: closed'));
      queue.length = 0;
      return new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of sockets) s.destroy();
      });
    },
  };
}
