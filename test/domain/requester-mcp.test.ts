/**
 * An MCP tool's approval by role takes the whole requester set of the turn: the model step
 * activity, on a real database, with a real MCP server (server-everything over Streamable HTTP,
 * a tool that waits unless an admin asked) and the scripted model server. A turn an admin shaped
 * alone calls it without approval; the same turn with a member's message in its batch (the
 * admin's last) waits for an admin, as does one a member steered.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createActivities, type ModelStepInput, type ModelStepResult } from '../../activities/index.js';
import { McpServerSchema } from '../../common/mcp.js';
import { createIdentity } from '../../domain/governance.js';
import { createMcpTools, type McpTools } from '../../domain/mcp/tools.js';
import { createModelRegistry } from '../../domain/model.js';
import { insertMcpServer } from '../../domain/store/mcp.js';
import { testDatabases, type TestDatabase } from '../helpers/db.js';
import { startEverythingHttp } from '../helpers/mcp-servers.js';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';

describe('MCP approval by role takes the requester set (real MCP server, real database)', () => {
  let database: TestDatabase;
  let dataDir: string;
  let mcp: McpTools;
  let model: ModelServer;
  let server: Awaited<ReturnType<typeof startEverythingHttp>>;
  before(async () => {
    database = await testDatabases()[0]!.create();
    dataDir = mkdtempSync(path.join(tmpdir(), 'steward-requester-mcp-'));
    mcp = createMcpTools({ db: database.db, dataDir, backoffMs: 300, connectTimeoutMs: 15_000, registrationsTtlMs: 0 });
    model = await startModelServer();
    server = await startEverythingHttp();
    assert.ok(await insertMcpServer(database.db, McpServerSchema.parse({ name: 'web', transport: 'http', url: server.url, allowTools: ['get-sum'], approval: { 'get-sum': 'admin' } }), 'api'));
  });
  after(async () => {
    await server?.stop();
    await mcp?.close();
    await model?.close();
    await database?.cleanup();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('an admin alone calls the tool unasked; a member in the batch or a member steering makes it wait for an admin', { timeout: 60_000 }, async () => {
    const admin = await createIdentity(database.db, { name: 'Ada', role: 'admin', accounts: [{ platform: 'telegram', userId: '9101' }], createdBy: 'test' });
    const member = await createIdentity(database.db, { name: 'Max', role: 'member', accounts: [{ platform: 'telegram', userId: '9102' }], createdBy: 'test' });
    const acts = createActivities({ db: database.db, models: createModelRegistry({ openaiCompatible: { baseURL: model.baseURL } }), systemPrompt: 'test', mcp });
    const env = new MockActivityEnvironment({ startToCloseTimeout: '1 minute', heartbeatTimeout: '1 minute' } as never);
    let n = 0;
    const step = async (requesters: string[]): Promise<boolean> => {
      n++;
      model.enqueue({ toolCalls: [{ id: `call_${n}`, name: 'web__get-sum', arguments: JSON.stringify({ a: 1, b: 2 }) }] });
      const input: ModelStepInput = {
        sessionId: 'session-mcp-set',
        turnId: `session-mcp-set:turn:${n}`,
        conversation: { platform: 'telegram', account: 'bot', chatId: '-1009101' },
        step: 1,
        inbound: [],
        workingSet: { notes: [], recentTurns: [] },
        settings: { model: 'openai-compatible:test-model', think: 'off' },
        steers: [],
        requesters,
      };
      const r = (await env.run(acts.modelStep, input)) as ModelStepResult;
      assert.equal(r.kind, 'output');
      const call = r.kind === 'output' ? r.toolCalls?.[0] : undefined;
      assert.equal(call?.name, 'web__get-sum', JSON.stringify(r));
      assert.equal(call?.error, undefined);
      return call!.needsApproval;
    };
    assert.equal(await step([admin.id]), false, 'an admin alone: no approval');
    assert.equal(await step([member.id, admin.id]), true, "a member's message in the batch (the admin's last): an admin approves");
    assert.equal(await step([admin.id, member.id]), true, 'a member steering an admin\'s turn: an admin approves');
    assert.equal(await step([member.id]), true);
  });
});
