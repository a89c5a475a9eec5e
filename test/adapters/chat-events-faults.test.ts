/**
 * The chat event stream under failing reads (adapters/http/events.ts): a read that fails (the
 * database, the session's status query) does not end a stream, so it keeps its place among the
 * `maxStreams` and the limit holds; reads failing for `failLimitMs` end it (once logged) and free
 * its place. A reply read after its turn's end still comes before the empty partial that ends its
 * draft. The reads fail by injection into the route's ingress (the fault under test); the
 * route, Hono's SSE stream and the limit are the real ones, served over 127.0.0.1.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { OpenAPIHono } from '@hono/zod-openapi';
import { serve } from '@hono/node-server';
import type { AddressInfo } from 'node:net';
import { registerChatEventRoutes } from '../../adapters/http/events.js';
import type { Ingress } from '../../services/chat/intake.js';
import type { SessionStatusView } from '../../services/chat/status.js';
import type { TranscriptEntry } from '../../services/chat/transcript.js';

const idle = (workflowId: string): SessionStatusView => ({ workflowId, exists: false, running: null, queueLength: 0, model: 'm', think: 'off', tokens: { input: 0, output: 0, total: 0 }, turns: 0 });

/** The two reads the stream makes, failing while `failing()` says so. */
function faultyIngress(failing: () => boolean, reads: { count: number }) {
  const read = <T>(value: T): Promise<T> => {
    reads.count++;
    return failing() ? Promise.reject(new Error('injected: the read failed')) : Promise.resolve(value);
  };
  return {
    transcript: (_sessionId: string) => read<TranscriptEntry[]>([]),
    status: (sessionId: string) => read(idle(sessionId)),
  } as unknown as Ingress;
}

async function serveEvents(opts: { failing: () => boolean; failLimitMs: number; maxStreams: number }) {
  const warnings: string[] = [];
  const reads = { count: 0 };
  const app = new OpenAPIHono();
  registerChatEventRoutes(app, { ingress: faultyIngress(opts.failing, reads), account: 'acct', maxStreams: opts.maxStreams, pollMs: 10, failLimitMs: opts.failLimitMs, log: { warn: ((_o: unknown, msg: string) => warnings.push(msg)) as never } });
  const server = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0 });
  await new Promise<void>((resolve) => server.once('listening', () => resolve()));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/api/v1/chats/c1/events`;
  return { url, warnings, reads, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

/** Read a stream's text until `until` matches it or the stream ends. */
async function readUntil(res: Response, until: RegExp, timeoutMs = 5_000): Promise<{ text: string; ended: boolean }> {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  const deadline = Date.now() + timeoutMs;
  try {
    while (!until.test(text) && Date.now() < deadline) {
      const next = await Promise.race([reader.read(), sleep(deadline - Date.now()).then(() => undefined)]);
      if (!next) break;
      if (next.done) return { text, ended: true };
      text += decoder.decode(next.value, { stream: true });
    }
    return { text, ended: false };
  } finally {
    reader.releaseLock();
  }
}

describe('the chat event stream under failing reads', () => {
  it('a failing read does not end a stream: it keeps its place (the limit holds), and the stream goes on once reads succeed', async () => {
    let failing = true;
    const s = await serveEvents({ failing: () => failing, failLimitMs: 60_000, maxStreams: 2 });
    const acs = [new AbortController(), new AbortController()];
    try {
      const streams = [];
      for (const ac of acs) {
        const r = await fetch(s.url, { signal: ac.signal });
        assert.equal(r.status, 200);
        streams.push(r);
      }
      // several polls fail on each stream
      const before = s.reads.count;
      while (s.reads.count < before + 6) await sleep(10);
      const over = await fetch(s.url);
      assert.equal(over.status, 503, 'both failing streams still hold their places');
      assert.equal(over.headers.get('retry-after'), '5');
      assert.deepEqual(s.warnings, ['chat event stream: a read failed; retrying', 'chat event stream: a read failed; retrying'], 'told once per stream, not once per failed poll');
      failing = false;
      const got = await readUntil(streams[0]!, /event: status/);
      assert.match(got.text, /event: status\ndata: \{"workflowId":"[^"]+","exists":false/);
      assert.equal(got.ended, false);
    } finally {
      for (const ac of acs) ac.abort();
    }
    // the aborted streams free their places
    const deadline = Date.now() + 5_000;
    let status = 0;
    while (Date.now() < deadline && status !== 200) {
      const ac = new AbortController();
      status = (await fetch(s.url, { signal: ac.signal })).status;
      ac.abort();
      if (status !== 200) await sleep(20);
    }
    assert.equal(status, 200);
    await s.close();
  });

  it('reads failing for failLimitMs end the stream, and its place is free again', async () => {
    const s = await serveEvents({ failing: () => true, failLimitMs: 150, maxStreams: 1 });
    try {
      const r = await fetch(s.url);
      assert.equal(r.status, 200);
      const started = Date.now();
      const got = await readUntil(r, /(?!)/);
      assert.equal(got.ended, true, 'the stream ended');
      assert.ok(Date.now() - started >= 140, `not before failLimitMs (${Date.now() - started} ms)`);
      assert.doesNotMatch(got.text, /event: /, 'nothing was sent from failed reads');
      assert.equal(s.warnings.length, 1);
      const again = await fetch(s.url);
      assert.equal(again.status, 200, 'its place is free');
      await again.body?.cancel();
    } finally {
      await s.close();
    }
  });

  it('the reply comes before the empty partial that ends its draft, even when the turn is read over before the reply is read', async () => {
    // The race of the real stream: a poll reads the transcript (no reply yet), the reply is written
    // and the turn ends, then the same poll reads the status (the turn is over). The status read
    // here flips the state, so every such poll meets the race.
    const turnId = 'acct:c1:turn:1';
    const stepKey = `model:${turnId}:1`;
    let ending = false;
    let over = false;
    const transcript: TranscriptEntry[] = [{ seq: 1, role: 'user', text: 'hi', at: '2026-11-28T00:00:00.000Z' }];
    const running = (sessionId: string): SessionStatusView => ({ ...idle(sessionId), exists: true, running: { turnId, runWorkflowId: sessionId, step: 1, phase: 'model', startedAt: '2026-11-28T00:00:00.000Z' } });
    const ingress = {
      transcript: async (_sessionId: string, opts: { afterSeq?: number; limit?: number }) => (opts.afterSeq === undefined ? [] : transcript.filter((e) => e.seq! > opts.afterSeq!)),
      status: async (sessionId: string) => {
        if (ending && !over) {
          over = true;
          transcript.push({ seq: 2, role: 'assistant', text: 'hello there', at: '2026-11-28T00:00:01.000Z' });
        }
        return over ? { ...idle(sessionId), exists: true, turns: 1 } : running(sessionId);
      },
    } as unknown as Ingress;
    const live = {
      draft: async () => (over ? undefined : { turnId, stepKey, text: 'hello', updatedAt: '2026-11-28T00:00:00.500Z' }),
      approval: async () => undefined,
    };
    const app = new OpenAPIHono();
    registerChatEventRoutes(app, { ingress, live, account: 'acct', pollMs: 10 });
    const server = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0 });
    await new Promise<void>((resolve) => server.once('listening', () => resolve()));
    const ac = new AbortController();
    try {
      const r = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/api/v1/chats/c1/events?after=1`, { signal: ac.signal });
      assert.equal(r.status, 200);
      const first = await readUntil(r, /event: partial\ndata: \{[^\n]*"text":"hello"/);
      assert.match(first.text, /"text":"hello"/, 'the draft showed');
      ending = true;
      const rest = await readUntil(r, /"text":""/);
      const text = first.text + rest.text;
      const reply = text.indexOf('event: message\ndata: {"seq":2');
      const end = text.indexOf('"text":""');
      assert.ok(reply >= 0 && end >= 0, text);
      assert.ok(reply < end, `the reply came before the draft's end:\n${text}`);
    } finally {
      ac.abort();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
