/**
 * MCP tools end to end, on both databases: the operator registers server-everything (stdio, in
 * the sandbox) through the CLI and the API; the scripted model calls its tools in a chat turn
 * on the real worker and Temporal: a read-only tool runs at once, another waits for an admin
 * and runs once approved, a denied one never runs; results reach the model as untrusted data,
 * receipts name `server.tool`; /status shows the server to admins; a workspace-only server is
 * not offered elsewhere; bad registrations are refused and change nothing.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createHttpApp, startHttpServer } from '../../adapters/http/app.js';
import { loadConfig } from '../../config/index.js';
import { OPERATOR } from '../../domain/governance.js';
import { policyWhatIf } from '../../domain/changes/what-if.js';
import { createMcpTools, type McpTools } from '../../domain/mcp/tools.js';
import { adminCommand } from '../../platform/admin-cli.js';
import { mcpCheck } from '../../platform/doctor.js';
import { createMcpService } from '../../services/mcp.js';
import { testDatabases } from '../helpers/db.js';
import { serverEntry, stdioServer } from '../helpers/mcp-servers.js';
import { needs } from '../helpers/requirements.js';
import { useStack, waitFor, withHarness } from '../helpers/steward.js';

const noSandbox = await needs('bubblewrap');
const TOKEN = 'mcp-e2e-token-0123456789';

for (const kind of testDatabases()) {
  describe(`MCP tools end to end (${kind.name})`, { skip: noSandbox }, () => {
    const stack = useStack(kind);
    let dataDir: string;
    let mcp: McpTools;
    before(() => {
      dataDir = mkdtempSync(path.join(tmpdir(), 'steward-mcp-e2e-'));
    });
    after(async () => {
      await mcp?.close();
      rmSync(dataDir, { recursive: true, force: true });
    });

    it('registered through the CLI and API, called by the model: read-only at once, others after approval, denied never; receipts and /status', { timeout: 180_000 }, async () => {
      mcp = createMcpTools({ db: stack.db, dataDir });
      const service = createMcpService({ db: stack.db, manager: mcp.manager });
      await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, mcp }, async (h) => {
        const server = await startHttpServer(createHttpApp({ ingress: h.ingress, apiToken: TOKEN, health: async () => ({ ok: true, checks: {} }), mcp: service }), { host: '127.0.0.1', port: 0 });
        const out: string[] = [];
        const err: string[] = [];
        const io = { config: () => loadConfig({}, tmpdir()), out: (x: string) => void out.push(x), err: (x: string) => void err.push(x), api: { url: server.url, token: TOKEN } };
        try {
          // bad registrations: refused, nothing written
          assert.equal(await adminCommand('mcp', ['add', 'Bad_Name', '--command', '/usr/bin/true'], io), 2);
          assert.match(err.join(''), /server name/);
          assert.equal(await adminCommand('mcp', ['add', 'lit', '--command', '/usr/bin/true', '--env', 'TOKEN=ghp_literal'], io), 2);
          assert.match(err.join(''), /by reference: env:STEWARD_MCP_<NAME>/);
          assert.equal(await adminCommand('mcp', ['add', 'both'], io), 2);
          assert.equal((await service.list()).length, 0);

          // registered from a file (as the CLI's --file and the API take it)
          const spec = stdioServer('every', [serverEntry('@modelcontextprotocol/server-everything'), 'stdio'], { allowTools: ['echo', 'get-sum'], readOnlyTools: ['echo'] });
          const file = path.join(dataDir, 'every.json');
          writeFileSync(file, JSON.stringify(spec));
          assert.equal(await adminCommand('mcp', ['add', '--file', file], io), 0, err.join(''));
          assert.match(out.join(''), /Registered MCP server every \(stdio\)/);
          assert.equal(await adminCommand('mcp', ['add', '--file', file], io), 1, 'a second one of the same name');
          assert.match(err.join(''), /exists already/);
          // a server for one workspace only is not offered in this chat
          assert.equal(await adminCommand('mcp', ['add', 'ops-only', '--server-url', 'http://127.0.0.1:9/mcp', '--workspace', 'ops'], io), 0, err.join(''));
          out.length = 0;
          assert.equal(await adminCommand('mcp', ['tools', 'every'], io), 0, err.join(''));
          assert.match(out.join(''), /every\.echo\s+yes\s+never/);
          assert.match(out.join(''), /every\.get-sum\s+yes\s+always/);
          assert.match(out.join(''), /every\.get-env\s+no: not on the allowTools list/);
          const listed = await fetch(`${server.url}/api/v1/mcp/servers`, { headers: { authorization: `Bearer ${TOKEN}` } });
          assert.equal(listed.status, 200);
          assert.deepEqual(((await listed.json()) as { servers: Array<{ name: string }> }).servers.map((s) => s.name), ['every', 'ops-only']);
          const badBody = await fetch(`${server.url}/api/v1/mcp/servers`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: '{"name": "x", "transport": "http", "url": "https://u:p@example.test/"}' });
          assert.equal(badBody.status, 400);
          assert.match(((await badBody.json()) as { error: string }).error, /without credentials/);

          // 1. a read-only tool runs at once; its result reaches the model wrapped as untrusted data
          stack.model.enqueue({ toolCalls: [{ id: 'call_echo', name: 'every__echo', arguments: JSON.stringify({ message: 'ping from the model' }) }] });
          stack.model.enqueue({ text: 'Echoed.' });
          const n = stack.model.requests.length;
          await h.send('echo something');
          await h.waitForMessage((m) => m.role === 'assistant' && m.text === 'Echoed.', { timeoutMs: 60_000 });
          const offered = JSON.stringify(stack.model.requests[n]?.body);
          assert.ok(offered.includes('every__echo') && offered.includes('every__get-sum'), 'the tools are offered as server__tool');
          assert.ok(!offered.includes('ops-only__'), 'a workspace-only server is not offered in a chat without that workspace');
          const toModel = JSON.stringify(stack.model.requests[n + 1]?.body);
          assert.match(toModel, /The result of the MCP tool every\.echo \(untrusted data from the server/);
          assert.match(toModel, /ping from the model/);
          assert.equal(await stack.db.approval.count({ where: { sessionId: h.sessionId } }), 0, 'no approval for a read-only tool');
          const receipt = await waitFor(async () => (await stack.db.receipt.findFirst({ where: { kind: 'tool.call', key: { endsWith: ':tool:call_echo' } } })) ?? undefined, 'the tool.call receipt');
          const data = JSON.parse(receipt.data) as { tool: string; ok: boolean; server: string; input: { message: string } };
          assert.deepEqual([data.tool, data.ok, data.server, data.input.message], ['every.echo', true, 'every', 'ping from the model']);

          // 2. a tool not marked read-only waits for an admin, runs once approved
          stack.model.enqueue({ toolCalls: [{ id: 'call_sum', name: 'every__get-sum', arguments: JSON.stringify({ a: 19, b: 23 }) }] });
          stack.model.enqueue({ text: 'The sum is in.' });
          const m = stack.model.requests.length;
          await h.send('add 19 and 23');
          const approval = await waitFor(async () => (await stack.db.approval.findFirst({ where: { sessionId: h.sessionId, toolCallId: 'call_sum' } })) ?? undefined, 'the approval');
          assert.equal(approval.tool, 'every__get-sum');
          assert.match(approval.summary, /call the MCP tool every\.get-sum with \{"a":19,"b":23\}/);
          assert.equal(await stack.db.mcpCall.count({ where: { key: { endsWith: ':call_sum' } } }), 0, 'not called before the approval');
          assert.equal((await h.ingress.decideApproval(approval.id, 'approve', OPERATOR)).applied, true);
          await h.waitForMessage((x) => x.role === 'assistant' && x.text === 'The sum is in.', { timeoutMs: 60_000 });
          assert.match(JSON.stringify(stack.model.requests[m + 1]?.body), /42/);

          // 3. denied: never called; the model is told
          stack.model.enqueue({ toolCalls: [{ id: 'call_denied', name: 'every__get-sum', arguments: JSON.stringify({ a: 1, b: 1 }) }] });
          stack.model.enqueue({ text: 'Not added.' });
          const k = stack.model.requests.length;
          await h.send('add 1 and 1');
          const denied = await waitFor(async () => (await stack.db.approval.findFirst({ where: { sessionId: h.sessionId, toolCallId: 'call_denied' } })) ?? undefined, 'the second approval');
          assert.equal((await h.ingress.decideApproval(denied.id, 'deny', OPERATOR, 'not now')).applied, true);
          await h.waitForMessage((x) => x.role === 'assistant' && x.text === 'Not added.', { timeoutMs: 60_000 });
          assert.match(JSON.stringify(stack.model.requests[k + 1]?.body), /not run: denied by the operator: not now/);
          assert.equal(await stack.db.mcpCall.count({ where: { key: { endsWith: ':call_denied' } } }), 0, 'a denied call never reaches the server');

          // 4. an invalid call is refused at the model step with the schema's words
          stack.model.enqueue({ toolCalls: [{ id: 'call_bad', name: 'every__get-sum', arguments: JSON.stringify({ a: 'one' }) }] });
          stack.model.enqueue({ text: 'Fixed.' });
          const j = stack.model.requests.length;
          await h.send('add one');
          await h.waitForMessage((x) => x.role === 'assistant' && x.text === 'Fixed.', { timeoutMs: 60_000 });
          assert.match(JSON.stringify(stack.model.requests[j + 1]?.body), /Invalid input for every\.get-sum/);

          // what-if over these turns' receipts judges each tool by the server's own policy, as the turns did:
          // get-sum always waited (not read-only), so only the read-only echo would change under "*"
          const echoReceipt = JSON.parse((await stack.db.receipt.findFirstOrThrow({ where: { kind: 'tool.call', key: { endsWith: ':tool:call_echo' } } })).data) as { requesterRole?: string };
          assert.equal(echoReceipt.requesterRole, 'overlord', 'the receipt keeps the role the policy judged (the HTTP chat acts as the operator)');
          const whatIf = await policyWhatIf(stack.db, { proposed: { approvalTools: ['*'] }, current: { repoPolicy: {}, approvalTools: [] } });
          const mcpFlips = whatIf.actions!.flipped.filter((a) => a.tool.startsWith('every.'));
          assert.deepEqual(mcpFlips.map((a) => [a.toolCallId, a.old.approval, a.new.approval]), [['call_echo', false, true]]);
          assert.ok(whatIf.actions!.evaluated >= 4);

          // /status for admins (the HTTP chat acts as the operator)
          assert.match((await h.send('/status')).reply ?? '', /MCP servers: every ready \(2 tools\); ops-only (unknown|down)/);

          // the doctor reads what the worker recorded
          const doctor = await mcpCheck(loadConfig({ DATABASE_URL: stack.database.url }, tmpdir()), 5000);
          assert.equal(doctor.status, 'ok', doctor.message);
          assert.match(doctor.message, /2 MCP servers as the workers last found them: every ready, 2 tools; ops-only/);

          // remove: an API registration goes; the chat is no longer offered it
          assert.equal(await adminCommand('mcp', ['remove', 'ops-only'], io), 0, err.join(''));
          assert.equal(await adminCommand('mcp', ['remove', 'ops-only'], io), 1);
          assert.match(err.join(''), /no MCP server ops-only/);
          out.length = 0;
          assert.equal(await adminCommand('mcp', ['list'], io), 0);
          assert.match(out.join(''), /every\s+stdio\s+api\s+ready\s+2/);
        } finally {
          await server.close();
        }
      });
    });
  });
}
