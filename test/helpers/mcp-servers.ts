/**
 * Real MCP servers from the npm registry for tests (devDependencies, run with this process's
 * Node): `@modelcontextprotocol/server-everything` over stdio in the sandbox and over Streamable
 * HTTP on a local port, `@modelcontextprotocol/server-filesystem` in the sandbox; and a few
 * misbehaving servers written here (malformed JSON-RPC, a hang, a crash).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { realpathSync, readFileSync, writeFileSync, mkdtempSync } from 'node:fs';
import { createRequire } from 'node:module';
import { freePort } from '../../platform/ports.js';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { McpServerInput } from '../../common/mcp.js';

const require = createRequire(import.meta.url);

/** The directory of the Node installation running the tests (bound read-only into the sandbox). */
export const nodeDir = path.dirname(path.dirname(realpathSync(process.execPath)));
/** The project's node_modules (the servers and their dependencies). */
export const nodeModules = path.dirname(path.dirname(path.dirname(require.resolve('@modelcontextprotocol/server-everything/package.json'))));

/** The entry script of a server package (its bin). */
export function serverEntry(pkg: '@modelcontextprotocol/server-everything' | '@modelcontextprotocol/server-filesystem'): string {
  const file = require.resolve(`${pkg}/package.json`);
  const manifest = JSON.parse(readFileSync(file, 'utf8')) as { bin: string | Record<string, string> };
  const bin = typeof manifest.bin === 'string' ? manifest.bin : Object.values(manifest.bin)[0]!;
  return path.join(path.dirname(file), bin);
}

/** A stdio registration that runs `args` with this Node in the sandbox. */
export function stdioServer(name: string, args: string[], extra: Partial<McpServerInput> = {}): McpServerInput {
  return { name, transport: 'stdio', command: [realpathSync(process.execPath), ...args], roBinds: [nodeDir, nodeModules], ...extra } as McpServerInput;
}

/** server-everything over Streamable HTTP on a free local port; stop() ends it. */
export async function startEverythingHttp(): Promise<{ url: string; stop(): Promise<void>; child: ChildProcess }> {
  const port = await freePort();
  const child = spawn(process.execPath, [serverEntry('@modelcontextprotocol/server-everything'), 'streamableHttp'], { env: { PATH: process.env.PATH ?? '', PORT: String(port) }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout?.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr?.on('data', (b: Buffer) => (out += b.toString()));
  const deadline = Date.now() + 20_000;
  for (;;) {
    try {
      const r = await fetch(`http://127.0.0.1:${port}/mcp`, { method: 'GET' });
      await r.body?.cancel();
      break;
    } catch {
      if (Date.now() > deadline || child.exitCode !== null) throw new Error(`server-everything (HTTP) did not start: ${out.slice(-2000)}`);
      await sleep(100);
    }
  }
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    child,
    async stop() {
      if (child.exitCode !== null) return;
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
    },
  };
}

/** Scripts of misbehaving stdio servers, written to a temporary directory (bound read-only). */
export function misbehavingServers(): { dir: string; garbage: string; hang: string; crashOnCall: string } {
  const dir = mkdtempSync(path.join(tmpdir(), 'steward-mcp-bad-'));
  const write = (name: string, body: string) => {
    const file = path.join(dir, name);
    writeFileSync(file, body);
    return file;
  };
  // answers initialize with text that is not JSON-RPC
  const garbage = write('garbage.mjs', `process.stdin.on('data', () => process.stdout.write('this is not json\\n{"jsonrpc": "2.0", broken\\n'));\n`);
  // reads everything and never answers
  const hang = write('hang.mjs', `process.stdin.on('data', () => {}); setInterval(() => {}, 1000);\n`);
  // a well-behaved server with one tool that exits the process when called
  const crashOnCall = write(
    'crash.mjs',
    `import readline from 'node:readline';
const rl = readline.createInterface({ input: process.stdin });
const instance = Math.random().toString(36).slice(2);
const send = (m) => process.stdout.write(JSON.stringify(m) + '\\n');
rl.on('line', (line) => {
  const m = JSON.parse(line);
  if (m.method === 'initialize') send({ jsonrpc: '2.0', id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'crashy', version: '1.0.0' } } });
  else if (m.method === 'tools/list') send({ jsonrpc: '2.0', id: m.id, result: { tools: [{ name: 'crash', description: 'exits', inputSchema: { type: 'object', properties: {} } }, { name: 'instance', description: 'which start of the server answers', inputSchema: { type: 'object', properties: {} } }] } });
  else if (m.method === 'tools/call' && m.params.name === 'crash') process.exit(3);
  else if (m.method === 'tools/call') send({ jsonrpc: '2.0', id: m.id, result: { content: [{ type: 'text', text: 'instance ' + instance }] } });
  else if (m.id !== undefined) send({ jsonrpc: '2.0', id: m.id, result: {} });
});
`,
  );
  return { dir, garbage, hang, crashOnCall };
}

/** What a hostile server's tools do; `fine` answers "fine <start id>", the others misbehave. */
export const HOSTILE_TOOLS = ['fine', 'big', 'endless', 'flood', 'malformed', 'crash', 'hang'] as const;
export type HostileTool = (typeof HOSTILE_TOOLS)[number];

/** The bytes of the big answer (60 MB, as the probe sent). */
export const HOSTILE_BIG_BYTES = 60 * 1024 * 1024;

// The tools' behaviour, shared by the stdio and the HTTP server: `out` writes with back-pressure.
const hostileCore = `
const start = Math.random().toString(36).slice(2);
const BIG = ${HOSTILE_BIG_BYTES};
const MB = 'x'.repeat(1 << 20);
const tools = ${JSON.stringify(HOSTILE_TOOLS)}.map((name) => ({ name, description: name, inputSchema: { type: 'object', properties: {} } }));
const answer = (id, result) => JSON.stringify({ jsonrpc: '2.0', id, result });
const text = (t) => ({ content: [{ type: 'text', text: t }] });
async function big(out, id) {
  const head = JSON.stringify({ jsonrpc: '2.0', id, result: { content: [{ type: 'text', text: '' }] } });
  const cut = head.indexOf('"text":"') + 8;
  await out(head.slice(0, cut));
  for (let i = 0; i < BIG / MB.length; i++) await out(MB);
  await out(head.slice(cut) + '\\n');
}
async function endless(out) {
  for (;;) await out(MB);
}
async function flood(out) {
  const line = JSON.stringify({ jsonrpc: '2.0', method: 'notifications/flood', params: { data: 'y'.repeat(1000) } }) + '\\n';
  for (;;) await out(line);
}
`;

/**
 * Hostile MCP servers (small node scripts speaking MCP), each with the tools of HOSTILE_TOOLS:
 * over stdio (newline-delimited JSON-RPC) and over Streamable HTTP (JSON answers; `flood` as an
 * SSE stream). `big` answers 60 MB in one message, `endless` a message that never ends, `flood`
 * an endless stream of small notifications, `malformed` an answer that is not JSON-RPC, `crash`
 * half an answer and then the process exits, `hang` never answers. Started with the argument
 * `big-list`, a server answers its tool list with 60 MB.
 */
export function hostileServers(): { dir: string; stdio: string; http: string } {
  const dir = mkdtempSync(path.join(tmpdir(), 'steward-mcp-hostile-'));
  const stdio = path.join(dir, 'hostile-stdio.mjs');
  writeFileSync(
    stdio,
    `import readline from 'node:readline';
import { appendFileSync } from 'node:fs';
${hostileCore}
const out = (s) => new Promise((r) => (process.stdout.write(s) ? r() : process.stdout.once('drain', r)));
const rl = readline.createInterface({ input: process.stdin });
rl.on('line', async (line) => {
  const m = JSON.parse(line);
  if (m.method === 'initialize') return out(answer(m.id, { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'hostile', version: '1.0.0' } }) + '\\n');
  if (m.method === 'tools/list') return process.argv[2] === 'big-list' ? big(out, m.id) : out(answer(m.id, { tools }) + '\\n');
  if (m.method !== 'tools/call') return m.id === undefined ? undefined : out(answer(m.id, {}) + '\\n');
  // each call is noted in the server's own writable directory (its working directory in the sandbox)
  try { appendFileSync('calls.log', m.params.name + '\\n'); } catch {}
  switch (m.params.name) {
    case 'fine': return out(answer(m.id, text('fine ' + start)) + '\\n');
    case 'big': return big(out, m.id);
    case 'endless': return endless(out);
    case 'flood': return flood(out);
    case 'malformed': return out('this is not json\\n' + JSON.stringify({ jsonrpc: '2.0', id: m.id, result: 'not an object' }) + '\\n');
    case 'crash': return out(answer(m.id, text('half')).slice(0, 30)).then(() => process.exit(3));
    case 'hang': return;
  }
});
`,
  );
  const http = path.join(dir, 'hostile-http.mjs');
  writeFileSync(
    http,
    `import { createServer } from 'node:http';
${hostileCore}
const server = createServer((req, res) => {
  if (req.method !== 'POST') { res.writeHead(405).end(); return; }
  let body = '';
  req.on('data', (c) => (body += c));
  req.on('end', async () => {
    const m = JSON.parse(body);
    // what it was sent, for tests that wait on it (a call, a cancellation)
    console.log(m.method === 'tools/call' ? 'called ' + m.params.name : 'sent ' + m.method);
    const out = (s) => new Promise((r) => (res.write(s) ? r() : res.once('drain', r)));
    const json = (s) => res.writeHead(200, { 'content-type': 'application/json' }).end(s);
    if (m.id === undefined) { res.writeHead(202).end(); return; }
    if (m.method === 'initialize') return json(answer(m.id, { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'hostile', version: '1.0.0' } }));
    if (m.method === 'tools/list' && process.argv[2] === 'big-list') { res.writeHead(200, { 'content-type': 'application/json' }); return big(out, m.id).catch(() => undefined); }
    if (m.method === 'tools/list') return json(answer(m.id, { tools }));
    if (m.method !== 'tools/call') return json(answer(m.id, {}));
    switch (m.params.name) {
      case 'fine': return json(answer(m.id, text('fine ' + start)));
      case 'big': res.writeHead(200, { 'content-type': 'application/json' }); return big(out, m.id).catch(() => undefined);
      case 'endless': res.writeHead(200, { 'content-type': 'application/json' }); return endless(out).catch(() => undefined);
      case 'flood': res.writeHead(200, { 'content-type': 'text/event-stream' }); return flood((s) => out('data: ' + s.trim() + '\\n\\n')).catch(() => undefined);
      case 'malformed': return json(JSON.stringify({ jsonrpc: '2.0', id: m.id, result: 'not an object' }));
      case 'crash': res.writeHead(200, { 'content-type': 'application/json' }); return out(answer(m.id, text('half')).slice(0, 30)).then(() => process.exit(3));
      case 'hang': return;
    }
  });
});
server.listen(Number(process.env.PORT), '127.0.0.1', () => console.log('listening ' + server.address().port));
`,
  );
  return { dir, stdio, http };
}

/** The hostile HTTP server (hostileServers().http) on `port` (a free one by default); stop() ends it. */
export async function startHostileHttp(script: string, port?: number, args: string[] = []): Promise<{ url: string; port: number; child: ChildProcess; output(): string; stop(): Promise<void> }> {
  const p = port ?? (await freePort());
  const child = spawn(process.execPath, [script, ...args], { env: { PATH: process.env.PATH ?? '', PORT: String(p) }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout?.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr?.on('data', (b: Buffer) => (out += b.toString()));
  const deadline = Date.now() + 20_000;
  while (!out.includes('listening')) {
    if (Date.now() > deadline || child.exitCode !== null) throw new Error(`the hostile HTTP server did not start: ${out.slice(-2000)}`);
    await sleep(50);
  }
  return {
    url: `http://127.0.0.1:${p}/mcp`,
    port: p,
    child,
    /** What the server printed: `called <tool>` for each call, `sent <method>` for every other message. */
    output: () => out,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
    },
  };
}
