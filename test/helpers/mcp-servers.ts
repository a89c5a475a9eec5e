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
