/**
 * A test double of an OpenAI-compatible model server on 127.0.0.1: `POST
 * /v1/chat/completions` (streaming SSE and plain JSON) and `GET /v1/models`, with scripted
 * answers, delays and errors. The real provider code talks to it over HTTP.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface RecordedRequest {
  path: string;
  headers: Record<string, string | string[] | undefined>;
  body: unknown;
}

export interface ScriptedReply {
  text?: string;
  chunks?: string[];
  firstTokenDelayMs?: number;
  chunkDelayMs?: number;
  status?: number;
  errorBody?: unknown;
  usage?: { prompt_tokens: number; completion_tokens: number };
  match?: (req: RecordedRequest) => boolean;
}

export interface ModelServer {
  baseURL: string;
  requests: RecordedRequest[];
  /** Requests whose client went away before the answer was complete. */
  readonly aborted: number;
  enqueue(reply: ScriptedReply): void;
  setDefault(fn: (req: RecordedRequest) => ScriptedReply): void;
  waitForRequest(n: number, timeoutMs?: number): Promise<RecordedRequest>;
  close(): Promise<void>;
}

function lastUserText(body: unknown): string {
  const msgs = (body as { messages?: Array<{ role: string; content: unknown }> }).messages ?? [];
  for (let i = msgs.length - 1; i >= 0; i--) {
    const m = msgs[i];
    if (m?.role !== 'user') continue;
    if (typeof m.content === 'string') return m.content;
    if (Array.isArray(m.content)) {
      return m.content.map((p: { text?: string }) => p.text ?? '').join('');
    }
  }
  return '';
}

export async function startModelServer(): Promise<ModelServer> {
  const queue: ScriptedReply[] = [];
  const requests: RecordedRequest[] = [];
  const waiters = new Set<() => void>();
  let aborted = 0;
  let fallback = (req: RecordedRequest): ScriptedReply => ({ text: `echo: ${lastUserText(req.body)}` });
  const sockets = new Set<import('node:net').Socket>();

  const sleep = (ms: number, signal: AbortSignal) =>
    new Promise<void>((resolve) => {
      if (ms <= 0 || signal.aborted) return resolve();
      const t = setTimeout(resolve, ms);
      signal.addEventListener('abort', () => {
        clearTimeout(t);
        resolve();
      }, { once: true });
    });

  async function completions(req: IncomingMessage, res: ServerResponse, body: unknown) {
    const recorded: RecordedRequest = { path: req.url ?? '', headers: req.headers, body };
    requests.push(recorded);
    for (const w of waiters) w();
    const idx = queue.findIndex((r) => !r.match || r.match(recorded));
    const reply = idx >= 0 ? queue.splice(idx, 1)[0]! : fallback(recorded);
    const gone = new AbortController();
    let finished = false;
    res.on('close', () => {
      if (!finished) {
        aborted++;
        gone.abort();
      }
    });
    const b = body as { stream?: boolean; model?: string; stream_options?: { include_usage?: boolean } };
    await sleep(reply.firstTokenDelayMs ?? 0, gone.signal);
    if (gone.signal.aborted) return;
    if (reply.status && reply.status >= 400) {
      finished = true;
      res.writeHead(reply.status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(reply.errorBody ?? { error: { message: `scripted error ${reply.status}`, type: 'scripted', code: reply.status } }));
      return;
    }
    const chunks = reply.chunks ?? [reply.text ?? ''];
    const text = chunks.join('');
    const usage = reply.usage ?? { prompt_tokens: Math.ceil(JSON.stringify(body).length / 4), completion_tokens: Math.max(1, Math.ceil(text.length / 4)) };
    const usageOut = { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens };
    const id = `chatcmpl-${requests.length}`;
    const created = Math.floor(Date.now() / 1000);
    if (!b.stream) {
      finished = true;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id, object: 'chat.completion', created, model: b.model, choices: [{ index: 0, message: { role: 'assistant', content: text }, finish_reason: 'stop' }], usage: usageOut }));
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    const send = (obj: unknown) => res.write(`data: ${JSON.stringify(obj)}\n\n`);
    send({ id, object: 'chat.completion.chunk', created, model: b.model, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] });
    for (let i = 0; i < chunks.length; i++) {
      if (i > 0) await sleep(reply.chunkDelayMs ?? 0, gone.signal);
      if (gone.signal.aborted) return;
      send({ id, object: 'chat.completion.chunk', created, model: b.model, choices: [{ index: 0, delta: { content: chunks[i] }, finish_reason: null }] });
    }
    send({ id, object: 'chat.completion.chunk', created, model: b.model, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] });
    if (b.stream_options?.include_usage) send({ id, object: 'chat.completion.chunk', created, model: b.model, choices: [], usage: usageOut });
    finished = true;
    res.end('data: [DONE]\n\n');
  }

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const url = req.url ?? '';
      if (req.method === 'GET' && url.endsWith('/models')) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ object: 'list', data: [{ id: 'test-model', object: 'model' }] }));
        return;
      }
      if (req.method === 'POST' && url.endsWith('/chat/completions')) {
        let body: unknown;
        try {
          body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        } catch {
          res.writeHead(400, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: { message: 'invalid JSON' } }));
          return;
        }
        completions(req, res, body).catch((err: unknown) => {
          if (!res.headersSent) res.writeHead(500);
          res.end(String(err));
        });
        return;
      }
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: `no route ${req.method} ${url}` } }));
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    baseURL: `http://127.0.0.1:${port}/v1`,
    requests,
    get aborted() {
      return aborted;
    },
    enqueue: (r) => queue.push(r),
    setDefault: (fn) => {
      fallback = fn;
    },
    waitForRequest(n, timeoutMs = 10_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const r = requests[n - 1];
          if (r) {
            clearTimeout(timer);
            waiters.delete(check);
            resolve(r);
          }
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`model server: timed out waiting for request ${n} (have ${requests.length})`));
        }, timeoutMs);
        waiters.add(check);
        check();
      });
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
