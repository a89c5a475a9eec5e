/**
 * MCP registrations and policy (pure): the registration schema refuses what it must (literal
 * secrets, relative programs, URLs with credentials, bad names), wire names fit the model
 * APIs' tool names, and the approval policy follows STEWARD_APPROVAL_TOOLS, the tool's own
 * policy (never, always, a role) and the read-only default.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  mcpApprovalOf,
  mcpDisplayName,
  McpConfigFileSchema,
  mcpApprovalVerdict,
  mcpNeedsApproval,
  mcpServerFor,
  parseMcpDisplayName,
  McpServerSchema,
  mcpStatusLine,
  mcpWireName,
  parseMcpWireName,
} from '../../common/mcp.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ConfigError, loadConfig } from '../../config/index.js';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { boundedFetch } from '../../domain/mcp/http.js';
import { toolValidator } from '../../domain/mcp/manager.js';
import { BoundedLineReader } from '../../domain/mcp/transport.js';
import { TOOL_NAMES } from '../../common/tools.js';

const stdio = { name: 'files', transport: 'stdio', command: ['/usr/bin/node', '/opt/fs/index.js', '/data'] };
const http = { name: 'web', transport: 'http', url: 'https://mcp.example.test/mcp', tokenRef: 'env:STEWARD_MCP_WEB_TOKEN' };

describe('MCP registrations', () => {
  it('accepts stdio and http registrations with defaults', () => {
    const s = McpServerSchema.parse(stdio);
    assert.equal(s.transport, 'stdio');
    assert.deepEqual([s.network, s.roBinds, s.env, s.readOnlyTools, s.approval, s.timeoutMs, s.maxResultBytes, s.maxMessageBytes, s.enabled], [false, [], {}, [], {}, 30_000, 16_384, 8 * 1024 * 1024, true]);
    const h = McpServerSchema.parse(http);
    assert.equal(h.transport, 'http');
  });

  it('refuses what must not be registered', () => {
    const bad: Array<[unknown, RegExp]> = [
      [{ ...stdio, name: 'Files' }, /server name/],
      [{ ...stdio, name: 'my_files' }, /server name/],
      [{ ...stdio, command: ['node', 'x.js'] }, /absolute path/],
      [{ ...stdio, env: { TOKEN: 'ghp_literal_secret' } }, /by reference/],
      [{ ...stdio, env: { TOKEN: 'env:HOME' } }, /by reference/],
      [{ ...stdio, roBinds: ['relative/dir'] }, /absolute path/],
      [{ ...http, url: 'https://user:pw@mcp.example.test/' }, /without credentials/],
      [{ ...http, url: 'ftp://mcp.example.test/' }, /http\(s\) URL/],
      [{ ...http, tokenRef: 'sk-literal' }, /by reference/],
      [{ ...stdio, approval: { x: 'sometimes' } }, /never, always or a role/],
      [{ ...stdio, timeoutMs: 10 }, /too small|>=/],
      [{ ...stdio, maxMessageBytes: 1024 }, /too small|>=/],
      [{ ...http, maxMessageBytes: 1024 * 1024 * 1024 }, /too big|<=/],
      [{ ...stdio, transport: 'sse' }, /transport/],
      [{ ...stdio, extra: 1 }, /Unrecognized key/],
    ];
    for (const [value, message] of bad) {
      const r = McpServerSchema.safeParse(value);
      assert.equal(r.success, false, JSON.stringify(value));
      assert.match(r.error!.issues.map((i) => i.message).join('; '), message, JSON.stringify(value));
    }
    assert.equal(McpConfigFileSchema.safeParse({ servers: [stdio, stdio] }).success, false, 'names are unique');
  });

  it('names tools server__tool on the wire and server.tool for people; never clashes with Steward\'s own', () => {
    assert.equal(mcpWireName('files', 'read_file'), 'files__read_file');
    assert.equal(mcpWireName('files', 'get-sum'), 'files__get-sum');
    assert.equal(mcpWireName('files', 'a.b'), undefined, 'dots are not allowed by OpenAI');
    assert.equal(mcpWireName('files', 'x'.repeat(60)), undefined, 'at most 64 characters');
    for (const n of TOOL_NAMES) {
      assert.equal(parseMcpWireName(n), undefined, n);
      assert.match(n, /^[a-zA-Z0-9_-]{1,64}$/);
    }
    assert.deepEqual(parseMcpWireName('files__read__file'), { server: 'files', tool: 'read__file' });
    assert.equal(mcpDisplayName('files', 'read_file'), 'files.read_file');
  });

  it('decides approval: STEWARD_APPROVAL_TOOLS, then the tool\'s policy, read-only tools run at once by default', () => {
    const spec = McpServerSchema.parse({ ...stdio, readOnlyTools: ['read_file'], approval: { write_file: 'admin', list: 'always' } });
    assert.equal(mcpApprovalOf(spec, 'read_file'), 'never');
    assert.equal(mcpApprovalOf(spec, 'delete'), 'always', 'anything not marked read-only waits');
    assert.equal(mcpNeedsApproval([], spec, 'read_file', 'member'), false);
    assert.equal(mcpNeedsApproval([], spec, 'delete', 'overlord'), true);
    assert.equal(mcpNeedsApproval([], spec, 'write_file', 'member'), true);
    assert.equal(mcpNeedsApproval([], spec, 'write_file', 'admin'), false);
    assert.equal(mcpNeedsApproval([], spec, 'write_file', undefined), false, 'no person (an objective): by role does not wait');
    assert.equal(mcpNeedsApproval(['files.read_file'], spec, 'read_file', 'overlord'), true);
    assert.equal(mcpNeedsApproval(['files.*'], spec, 'read_file', 'overlord'), true);
    assert.equal(mcpNeedsApproval(['*'], spec, 'read_file', 'overlord'), true);
    const all = McpServerSchema.parse({ ...stdio, approval: { '*': 'never' } });
    assert.equal(mcpNeedsApproval([], all, 'anything', 'viewer'), false);
  });

  it("says why a call waits, as what-if shows it, with mcpNeedsApproval's verdict", () => {
    const spec = McpServerSchema.parse({ ...stdio, readOnlyTools: ['read_file'], approval: { write_file: 'admin', list: 'always' } });
    assert.deepEqual(parseMcpDisplayName('files.read_file'), { server: 'files', tool: 'read_file' });
    for (const n of [...TOOL_NAMES, 'Files.x', 'files.', '.x', 'files.a.b']) assert.equal(parseMcpDisplayName(n), undefined, n);
    for (const role of ['member', 'admin', null] as const) {
      for (const [tool, list] of [['read_file', []], ['list', []], ['write_file', []], ['write_file', ['files.*']], ['delete', ['*']]] as const) {
        assert.equal(mcpApprovalVerdict(list, spec, tool, role).approval, mcpNeedsApproval(list, spec, tool, role ?? undefined), `${tool} ${role}`);
      }
    }
    assert.match(mcpApprovalVerdict([], spec, 'list', 'admin').reason, /files\.list is not in the approval list; the MCP server files's policy for it is always \(always waits\)/);
    assert.match(mcpApprovalVerdict([], spec, 'write_file', 'member').reason, /admin and above run it at once; the requester was member/);
    assert.deepEqual(mcpApprovalVerdict([], spec, 'write_file', undefined), { approval: true, reason: "files.write_file is not in the approval list; the MCP server files's policy for it is admin (admin and above run it at once; the requester's role was not recorded, so it is judged as waiting)" });
    assert.equal(mcpApprovalVerdict([], spec, 'read_file', undefined).approval, false, 'a read-only tool needs no role');
    assert.equal(mcpApprovalVerdict(['files.write_file'], spec, 'write_file', 'admin').reason, 'files.write_file is in the approval list');
  });

  it('reads lines without holding more than the bound of one: split across chunks, cut off past it', () => {
    const r = new BoundedLineReader(10);
    assert.deepEqual(r.push(Buffer.from('abc')), { lines: [], overflow: false });
    const a = r.push(Buffer.from('de\nfghij\n\nxy'));
    assert.deepEqual(a.lines.map(String), ['abcde', 'fghij', '']);
    assert.equal(a.overflow, false);
    assert.deepEqual(r.push(Buffer.from('z'.repeat(8))).lines, [], 'exactly the bound is a line still');
    assert.deepEqual(r.push(Buffer.from('\n')).lines.map(String), [`xy${'z'.repeat(8)}`]);
    // past the bound: overflow at once, nothing held, and the rest of the stream is ignored
    const big = r.push(Buffer.alloc(1024 * 1024, 0x61));
    assert.deepEqual(big, { lines: [], overflow: true });
    assert.deepEqual(r.push(Buffer.from('ok\n')), { lines: [], overflow: true });
    // a line over the bound whose end is in the same chunk
    const s2 = new BoundedLineReader(4);
    assert.deepEqual(s2.push(Buffer.from('ab\nabcdef\nab\n')).lines.map(String), ['ab']);
  });

  it('reads HTTP answers through a bound: cut off past it (declared or streamed), broken off or a malformed SSE event told, no standalone GET stream', async () => {
    const size = 3 * 1024 * 1024;
    const server = createServer((req, res) => {
      if (req.url === '/declared') res.writeHead(200, { 'content-length': String(size) }).end(Buffer.alloc(size, 0x61));
      else if (req.url === '/streamed') {
        res.writeHead(200, { 'content-type': 'application/json' });
        const chunk = Buffer.alloc(64 * 1024, 0x62);
        let sent = 0;
        const more = () => {
          while (sent < size) {
            sent += chunk.length;
            if (!res.write(chunk)) return void res.once('drain', more);
          }
          res.end();
        };
        res.on('error', () => undefined);
        more();
      } else if (req.url === '/broken') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write('{"partial":');
        setTimeout(() => res.socket?.destroy(), 20);
      } else if (req.url === '/sse') {
        // an event split across writes, then one that is not JSON, and the stream stays open
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('event: message\ndata: {"jsonrpc":"2.0",');
        setTimeout(() => res.write('"method":"notifications/progress","params":{}}\n\n'), 10);
        setTimeout(() => res.write('data: this is not json\n\n'), 30);
        res.on('error', () => undefined);
      } else res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const fatal: string[] = [];
    const f = boundedFetch({ maxMessageBytes: 1024 * 1024, onfatal: (why) => fatal.push(why) });
    try {
      assert.deepEqual(await (await f(`${base}/small`, { method: 'POST' })).json(), { ok: true });
      assert.deepEqual(fatal, []);
      await assert.rejects(f(`${base}/declared`, { method: 'POST' }), /longer than 1048576 bytes/);
      assert.equal(fatal.length, 1);
      const streamed = await f(`${base}/streamed`, { method: 'POST' });
      await assert.rejects(streamed.text(), /longer than 1048576 bytes/);
      assert.equal(fatal.length, 2);
      const broken = await f(`${base}/broken`, { method: 'POST' });
      await assert.rejects(broken.json(), /broke off/);
      assert.match(fatal[2] ?? '', /the server's answer broke off/);
      // an SSE answer with an event that is not JSON fails at once (the SDK would only log it and wait)
      const sse = await f(`${base}/sse`, { method: 'POST' });
      const started = Date.now();
      await assert.rejects(sse.text(), /not valid JSON-RPC \(an event of its stream is not JSON: "this is not json"\)/);
      assert.ok(Date.now() - started < 2000, 'at once, not at a time limit');
      assert.equal(fatal.length, 4);
      const get = await f(`${base}/small`, { method: 'GET' });
      assert.equal(get.status, 405, 'the standalone stream is not opened');
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  it('offers a server to every chat, or to its workspaces only', () => {
    const everywhere = McpServerSchema.parse(stdio);
    const some = McpServerSchema.parse({ ...stdio, workspaces: ['ops'] });
    assert.equal(mcpServerFor(everywhere, null), true);
    assert.equal(mcpServerFor(some, null), false);
    assert.equal(mcpServerFor(some, 'ops'), true);
    assert.equal(mcpServerFor(some, 'dev'), false);
    assert.equal(mcpServerFor(McpServerSchema.parse({ ...stdio, enabled: false }), null), false);
  });

  it('checks arguments against a tool\'s JSON Schema with zod', () => {
    const v = toolValidator({ type: 'object', properties: { path: { type: 'string' }, n: { type: 'integer', minimum: 1 } }, required: ['path'], additionalProperties: false });
    assert.equal(v.safeParse({ path: '/x', n: 2 }).success, true);
    assert.equal(v.safeParse({ n: 2 }).success, false);
    assert.equal(v.safeParse({ path: '/x', n: 0 }).success, false);
    assert.equal(v.safeParse({ path: '/x', other: 1 }).success, false);
    assert.throws(() => toolValidator({ type: 'string' }), /not a JSON Schema object/);
  });

  it('reads STEWARD_MCP_CONFIG, refuses a bad file with the setting named; STEWARD_APPROVAL_TOOLS takes server.tool and server.*', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'steward-mcp-config-'));
    try {
      const file = path.join(dir, 'mcp.json');
      writeFileSync(file, JSON.stringify({ servers: [stdio, http] }));
      const cfg = loadConfig({ STEWARD_MCP_CONFIG: file, STEWARD_APPROVAL_TOOLS: 'post_to_chat,files.read_file,web.*' }, dir);
      assert.deepEqual(cfg.mcp.servers.map((s) => s.name), ['files', 'web']);
      assert.equal(cfg.mcp.configFile, file);
      assert.deepEqual(cfg.governance.approvalTools, ['post_to_chat', 'files.read_file', 'web.*']);
      assert.deepEqual(loadConfig({}, dir).mcp, { servers: [] });
      writeFileSync(file, JSON.stringify({ servers: [{ ...stdio, env: { T: 'literal-secret' } }] }));
      assert.throws(() => loadConfig({ STEWARD_MCP_CONFIG: file }, dir), (e: unknown) => e instanceof ConfigError && /STEWARD_MCP_CONFIG: servers\.0\.env\.T: a secret is named by reference/.test(e.message));
      writeFileSync(file, '{not json');
      assert.throws(() => loadConfig({ STEWARD_MCP_CONFIG: file }, dir), /STEWARD_MCP_CONFIG: cannot read .* as JSON/);
      assert.throws(() => loadConfig({ STEWARD_APPROVAL_TOOLS: 'files.a.b' }, dir), /unknown tool files\.a\.b/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('/status shows each server with its state and tool count', () => {
    assert.equal(mcpStatusLine([]), undefined);
    const line = mcpStatusLine([
      { spec: { name: 'files', enabled: true }, state: 'ready', toolCount: 3, lastError: null },
      { spec: { name: 'web', enabled: true }, state: 'down', toolCount: 0, lastError: 'the server ended' },
      { spec: { name: 'old', enabled: false }, state: 'unknown', toolCount: 0, lastError: null },
    ]);
    assert.equal(line, 'MCP servers: files ready (3 tools); web down (the server ended); old disabled');
  });
});
