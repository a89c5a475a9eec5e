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
  mcpNeedsApproval,
  mcpServerFor,
  McpServerSchema,
  mcpStatusLine,
  mcpWireName,
  parseMcpWireName,
} from '../../common/mcp.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ConfigError, loadConfig } from '../../config/index.js';
import { toolValidator } from '../../domain/mcp/manager.js';
import { TOOL_NAMES } from '../../common/tools.js';

const stdio = { name: 'files', transport: 'stdio', command: ['/usr/bin/node', '/opt/fs/index.js', '/data'] };
const http = { name: 'web', transport: 'http', url: 'https://mcp.example.test/mcp', tokenRef: 'env:STEWARD_MCP_WEB_TOKEN' };

describe('MCP registrations', () => {
  it('accepts stdio and http registrations with defaults', () => {
    const s = McpServerSchema.parse(stdio);
    assert.equal(s.transport, 'stdio');
    assert.deepEqual([s.network, s.roBinds, s.env, s.readOnlyTools, s.approval, s.timeoutMs, s.maxResultBytes, s.enabled], [false, [], {}, [], {}, 30_000, 16_384, true]);
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
