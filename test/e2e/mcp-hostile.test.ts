/**
 * Hostile MCP servers against the started stack (`./steward start`: the API, the workers and the
 * embedded Temporal server in one process, as the probe ran it), with the servers registered in
 * STEWARD_MCP_CONFIG: one over stdio in the sandbox, one over Streamable HTTP. The scripted model
 * calls each misbehaving tool in a chat turn (60 MB in one message, a message without end, an
 * endless stream of small messages, a malformed answer, a crash mid-answer, a hang); after each,
 * the process is alive, the API answers, the turn ended with the model told what happened, and
 * the server answers again on a later turn.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { hostileServers, nodeDir, startHostileHttp, stdioServer, type HostileTool } from '../helpers/mcp-servers.js';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';
import type { Spawned } from '../helpers/process.js';
import { freeStewardPorts, startEnv, startSteward, stopSteward } from '../helpers/started-steward.js';
import { needs } from '../helpers/requirements.js';

const noSandbox = await needs('bubblewrap');
const TOKEN = 'e2e-mcp-hostile-token-0123456789';
const LIMIT = 8 * 1024 * 1024; // the default maxMessageBytes

describe('hostile MCP servers against the started stack', { skip: noSandbox }, () => {
  let model: ModelServer;
  let steward: Spawned;
  let api: string;
  let dataDir: string;
  let hostile: ReturnType<typeof hostileServers>;
  let web: Awaited<ReturnType<typeof startHostileHttp>>;
  /** A second HTTP server, registered with a long time limit: a hung call there ends only by /stop. */
  let slow: Awaited<ReturnType<typeof startHostileHttp>>;

  before(async () => {
    model = await startModelServer();
    hostile = hostileServers();
    web = await startHostileHttp(hostile.http);
    slow = await startHostileHttp(hostile.http);
    dataDir = mkdtempSync(path.join(tmpdir(), 'steward-e2e-mcp-hostile-'));
    const policy = { readOnlyTools: ['fine', 'big', 'endless', 'flood', 'malformed', 'crash', 'hang'], timeoutMs: 3000 };
    const config = path.join(dataDir, 'mcp.json');
    writeFileSync(config, JSON.stringify({ servers: [stdioServer('bad-stdio', [hostile.stdio], { roBinds: [nodeDir, hostile.dir], ...policy }), { name: 'bad-http', transport: 'http', url: web.url, ...policy }, { name: 'slow-http', transport: 'http', url: slow.url, readOnlyTools: ['hang'], timeoutMs: 90_000 }] }));
    const started = await startSteward(startEnv({ dataDir, ports: await freeStewardPorts(), token: TOKEN, model: 'openai-compatible:e2e-model', modelBaseURL: model.baseURL, extra: { STEWARD_MCP_CONFIG: config } }));
    steward = started;
    api = started.api;
  });

  after(async () => {
    await stopSteward(steward);
    await web?.stop();
    await slow?.stop();
    await model?.close();
    rmSync(dataDir, { recursive: true, force: true });
    if (hostile) rmSync(hostile.dir, { recursive: true, force: true });
  });

  const auth = { authorization: `Bearer ${TOKEN}` };
  const chat = 'mcp-hostile';
  let turn = 0;

  /** One chat turn in which the model calls `tool` and then answers; returns what the model was told of the call. */
  const turnWith = async (tool: string): Promise<string> => {
    const id = `call_${++turn}`;
    const done = `turn ${turn} over`;
    const n = model.requests.length;
    model.enqueue({ toolCalls: [{ id, name: tool, arguments: '{}' }] });
    model.enqueue({ text: done });
    const r = await fetch(`${api}/api/v1/chats/${chat}/messages`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ text: `please call ${tool}`, user: 'alice' }) });
    assert.equal(r.status, 202);
    for (let i = 0; i < 900; i++) {
      const t = await fetch(`${api}/api/v1/chats/${chat}/messages`, { headers: auth });
      assert.equal(t.status, 200, 'the API answers');
      const messages = ((await t.json()) as { messages: Array<{ role: string; text: string }> }).messages;
      if (messages.some((m) => m.role === 'assistant' && m.text === done)) break;
      assert.equal(steward.child.exitCode, null, `Steward exited during ${tool}:\n${steward.output().slice(-3000)}`);
      await sleep(100);
    }
    // the tool message of this call, as the model got it
    const told = model.requests
      .slice(n + 1)
      .flatMap((q) => (q.body as { messages?: Array<{ role: string; tool_call_id?: string; content?: unknown }> }).messages ?? [])
      .find((m) => m.role === 'tool' && m.tool_call_id === id);
    assert.ok(told, `the model was told the outcome of ${tool} (turn ${turn}): ${steward.output().slice(-2000)}`);
    return typeof told.content === 'string' ? told.content : JSON.stringify(told.content);
  };

  /** The server answers again (after its back-off): a turn calling its `fine` tool. */
  const answersAgain = async (server: string) => {
    for (let i = 0; i < 10; i++) {
      const told = await turnWith(`${server}__fine`);
      if (/\bfine [a-z0-9]{5,}/.test(told)) return;
      assert.match(told, /is down|unavailable/, told);
      await sleep(500);
    }
    assert.fail(`${server} never answered again`);
  };

  const expected: Array<[string, HostileTool, RegExp]> = [
    ['bad-stdio', 'big', new RegExp(`failed: the server sent a message longer than ${LIMIT} bytes`)],
    ['bad-stdio', 'endless', new RegExp(`failed: the server sent a message longer than ${LIMIT} bytes`)],
    ['bad-stdio', 'flood', /failed: the server wrote more than \d+ bytes without being asked for more/],
    ['bad-stdio', 'malformed', /failed: .*not valid JSON-RPC/],
    ['bad-stdio', 'crash', /failed: .*(Connection closed|the server ended)/],
    ['bad-stdio', 'hang', /failed: .*timed out/i],
    ['bad-http', 'big', new RegExp(`failed: the server's answer is longer than ${LIMIT} bytes`)],
    ['bad-http', 'endless', new RegExp(`failed: the server's answer is longer than ${LIMIT} bytes`)],
    ['bad-http', 'flood', new RegExp(`failed: the server's answer is longer than ${LIMIT} bytes`)],
    ['bad-http', 'malformed', /failed: the server's answer is not valid JSON-RPC \(/],
    ['bad-http', 'crash', /failed: the server's answer broke off/],
    ['bad-http', 'hang', /failed: .*timed out/i],
  ];

  it('after each misbehaviour the process is alive, the API and a chat turn work, and the call says what happened', { timeout: 600_000 }, async () => {
    const healthy = async () => {
      assert.equal(steward.child.exitCode, null, steward.output().slice(-3000));
      const h = await fetch(`${api}/healthz`);
      assert.equal(h.status, 200);
    };
    await healthy();
    for (const [server, tool, re] of expected) {
      await answersAgain(server);
      const told = await turnWith(`${server}__${tool}`);
      assert.match(told, new RegExp(`The MCP tool ${server}\\.${tool} failed`), told.slice(0, 2000));
      assert.match(told, re, told.slice(0, 2000));
      assert.ok(told.length < 100_000, 'no part of the 60 MB reached the model');
      await healthy();
      if (server === 'bad-http' && tool === 'crash') web = await startHostileHttp(hostile.http, web.port);
    }
    // a turn without tools works too, and the process never logged an uncaught error
    const n = model.requests.length;
    model.enqueue({ text: 'plain answer' });
    assert.equal((await fetch(`${api}/api/v1/chats/${chat}/messages`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ text: 'just talk', user: 'alice' }) })).status, 202);
    await model.waitForRequest(n + 1, 60_000);
    await healthy();
    assert.doesNotMatch(steward.output(), /ReadBuffer|uncaught|unhandled/i);
  });

  it('/stop reaches a tool call in flight: the hung MCP call is cancelled at the server within seconds, not at its 90-second limit', { timeout: 180_000 }, async () => {
    const stopChat = 'mcp-hostile-stop';
    const post = (text: string) => fetch(`${api}/api/v1/chats/${stopChat}/messages`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ text, user: 'alice' }) });
    model.enqueue({ toolCalls: [{ id: 'call_stop', name: 'slow-http__hang', arguments: '{}' }] });
    assert.equal((await post('please hang')).status, 202);
    for (let i = 0; !slow.output().includes('called hang'); i++) {
      assert.ok(i < 600, `the hung call never reached the server: ${steward.output().slice(-2000)}`);
      await sleep(100);
    }
    // the activity heartbeats while the call runs; its heartbeat's answer carries the stop, which aborts the call
    await sleep(1500);
    const stoppedAt = Date.now();
    assert.equal((await post('/stop')).status, 202);
    for (;;) {
      if (slow.output().includes('sent notifications/cancelled')) break;
      assert.ok(Date.now() - stoppedAt < 8_000, `the call was not cancelled at the server 8 s after /stop (the heartbeat throttle is 6.4 s): ${slow.output().slice(-1000)}`);
      await sleep(100);
    }
    assert.equal(steward.child.exitCode, null);
  });
});
