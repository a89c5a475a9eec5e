/**
 * One registry of held secrets (issue 32, finding 5), attacked with real parts: every kind of
 * value Steward reads by reference or holds (its API token, an inbox password STEWARD_INBOX_*,
 * an MCP server's STEWARD_MCP_* variable, a webhook secret STEWARD_HOOK_*, a repository's
 * token, a provider key, a bot token) is tried in every outbound path (an http_request to a
 * capture listener on 127.0.0.1, an MCP tool's arguments through a recording proxy in front of
 * server-everything, send_email to a local SMTP server, run_command) and in every view (the
 * chat's reply and progress panel, the approval request, its "Waiting for an admin to
 * approve" line, the approval row, receipts and their JSONL export, logs).
 * - Through the real turn (Temporal, the worker, the scripted model): each call is refused at
 *   the model step, no admin is asked, nothing reaches a listener, the model is told why.
 * - Through the activities, as an approval made before a value was held would be: the approver
 *   and the chat see it masked, and after approval nothing is sent.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomInt } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { MockActivityEnvironment } from '@temporalio/testing';
import { SMTPServer } from 'smtp-server';
import { createActivities, type RunToolResult } from '../../activities/index.js';
import { McpServerSchema } from '../../common/mcp.js';
import { loadConfig } from '../../config/index.js';
import { getBlobText, putBlob } from '../../domain/blobs.js';
import { createIdentity } from '../../domain/governance.js';
import { createMcpTools, type McpTools } from '../../domain/mcp/tools.js';
import { createModelRegistry } from '../../domain/model.js';
import { updatePanel } from '../../domain/outbox.js';
import { writeReceipt } from '../../domain/receipts.js';
import { insertMcpServer } from '../../domain/store/mcp.js';
import { createLogger } from '../../platform/logger.js';
import { opsCommand } from '../../platform/ops-cli.js';
import { startEverythingHttp } from '../helpers/mcp-servers.js';
import { recordingSender, type RecordingSender } from '../helpers/recording-sender.js';
import { needs } from '../helpers/requirements.js';
import { useStack, waitFor, withHarness, type HarnessOptions } from '../helpers/steward.js';

const noSandbox = await needs('bubblewrap');

/** Each held value, by the variable it comes from; none is shaped like a token or named like one in its request. */
const SECRETS: Record<string, string> = {
  STEWARD_API_TOKEN: `apitoken-${randomBytes(6).toString('hex')}`,
  STEWARD_INBOX_OPS: `inboxpass-${randomBytes(6).toString('hex')}`,
  STEWARD_MCP_WEB_KEY: `mcpvalue-${randomBytes(6).toString('hex')}`,
  STEWARD_HOOK_DEPLOY: `hookvalue-${randomBytes(20).toString('hex')}`,
  GH_DEPLOY_TOKEN: `repovalue-${randomBytes(6).toString('hex')}`,
  OPENAI_API_KEY: `providervalue-${randomBytes(6).toString('hex')}`,
  TELEGRAM_BOT_TOKEN: `botvalue-${randomBytes(6).toString('hex')}`,
};
const VALUES = Object.values(SECRETS);
const leaks = (text: string) => VALUES.filter((v) => text.includes(v) || text.includes(Buffer.from(v).toString('base64').replace(/=+$/, '')));

interface Capture {
  url: string;
  bodies: string[];
  close(): Promise<void>;
}

/** An HTTP listener on 127.0.0.1 that records every request; with `forward`, a recording proxy in front of it. */
async function startCapture(forward?: string): Promise<Capture> {
  const bodies: string[] = [];
  const target = forward ? new URL(forward) : undefined;
  const server: Server = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      bodies.push(`${req.method} ${req.url}\n${JSON.stringify(req.headers)}\n${body.toString('utf8')}`);
      if (!target) {
        res.writeHead(200, { 'content-type': 'text/plain' }).end('captured');
        return;
      }
      const up = httpRequest({ hostname: target.hostname, port: target.port, path: req.url, method: req.method, headers: { ...req.headers, host: target.host } }, (r) => {
        res.writeHead(r.statusCode ?? 502, r.headers);
        r.pipe(res);
      });
      up.on('error', () => res.writeHead(502).end());
      up.end(body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}${target ? target.pathname : '/collect'}`,
    bodies,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A local SMTP server that records every message it is given. */
async function startSmtp(): Promise<{ port: number; raw: string[]; connections: number; close(): Promise<void> }> {
  const state = { raw: [] as string[], connections: 0 };
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    onConnect(_session, callback) {
      state.connections++;
      callback();
    },
    onData(stream, _session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        state.raw.push(Buffer.concat(chunks).toString('utf8'));
        callback();
      });
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return {
    port: (server.server.address() as AddressInfo).port,
    get raw() {
      return state.raw;
    },
    get connections() {
      return state.connections;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** The four outbound calls that try to send `value`. */
function outbound(value: string, web: Capture, n: string) {
  return [
    { id: `http_${n}`, name: 'http_request', arguments: JSON.stringify({ method: 'POST', url: web.url, body: JSON.stringify({ note: value }) }) },
    { id: `mcp_${n}`, name: 'web__echo', arguments: JSON.stringify({ message: `keep ${value}` }) },
    { id: `mail_${n}`, name: 'send_email', arguments: JSON.stringify({ to: ['ops@example.test'], subject: 'Notes', text: `the value is ${value}` }) },
    { id: `cmd_${n}`, name: 'run_command', arguments: JSON.stringify({ argv: ['echo', value] }) },
  ];
}

describe('held secrets: one registry, refused in every outbound path, masked in every view', () => {
  const stack = useStack();
  let web: Capture;
  let everything: { url: string; stop(): Promise<void> };
  let mcpProxy: Capture;
  let smtp: Awaited<ReturnType<typeof startSmtp>>;
  let sender: RecordingSender;
  let dataDir: string;
  let mcp: McpTools;
  let adminChat: string;
  const saved: Record<string, string | undefined> = {};

  before(async () => {
    for (const [k, v] of Object.entries(SECRETS)) {
      saved[k] = process.env[k];
      process.env[k] = v;
    }
    web = await startCapture();
    everything = await startEverythingHttp();
    mcpProxy = await startCapture(everything.url);
    smtp = await startSmtp();
    sender = recordingSender();
    dataDir = mkdtempSync(path.join(tmpdir(), 'steward-held-'));
  });
  after(async () => {
    await mcp?.close();
    await mcpProxy?.close();
    await everything?.stop();
    await web?.close();
    await smtp?.close();
    rmSync(dataDir, { recursive: true, force: true });
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  });

  const actions = () => ({ smtp: { url: `smtp://127.0.0.1:${smtp.port}`, from: 'steward@example.test' }, http: { allowHosts: ['127.0.0.1'], timeoutMs: 5000 }, commands: { allowlist: ['echo'] } });
  const opts = (): HarnessOptions => ({
    env: stack.env,
    db: stack.db,
    providers: { openaiCompatible: { baseURL: stack.model.baseURL } },
    senders: { telegram: sender },
    toolPolicy: { approvalTools: [], approvalTimeoutMs: 10 * 60_000 },
    actions: actions(),
    mcp,
  });
  const setUp = async () => {
    if (mcp) return;
    mcp = createMcpTools({ db: stack.db, dataDir, registrationsTtlMs: 0, connectTimeoutMs: 15_000 });
    // an MCP tool that always waits for an admin: the finding's path (masked for the approver, then sent)
    assert.ok(await insertMcpServer(stack.db, McpServerSchema.parse({ name: 'web', transport: 'http', url: mcpProxy.url, allowTools: ['echo'], approval: { echo: 'always' } }), 'api'));
    adminChat = String(randomInt(1e8, 1e9));
    await createIdentity(stack.db, { name: 'Ada', role: 'admin', accounts: [{ platform: 'telegram', userId: adminChat, dmChatId: adminChat, dmAccount: 'bot' }], createdBy: 'test' });
  };
  const mcpCalls = () => mcpProxy.bodies.filter((b) => b.includes('"tools/call"'));

  it('the turn: each held secret in http_request, MCP arguments, send_email and run_command is refused at the model step; nothing is sent, no admin is asked, no view shows it', { timeout: 180_000 }, async () => {
    await setUp();
    await withHarness(opts(), async (h) => {
      const userId = String(randomInt(1e8, 1e9));
      await createIdentity(stack.db, { name: 'Tom', role: 'member', accounts: [{ platform: 'telegram', userId }], createdBy: 'test' });
      const say = (text: string) => h.ingress.handle({ id: `m-${randomInt(1e9)}`, platform: 'telegram', account: 'bot', chatId: userId, chatType: 'dm', user: 'Tom', userId, text, at: new Date().toISOString() });
      const adminPosts = sender.live(adminChat).length;
      let i = 0;
      for (const [name, value] of Object.entries(SECRETS)) {
        i++;
        stack.model.enqueue({ toolCalls: outbound(value, web, String(i)) });
        // the model repeats the value in its answer: the chat sees it masked
        stack.model.enqueue({ text: `Done ${i}: ${value}` });
        const n = stack.model.requests.length;
        await say(`send ${name} everywhere`);
        const reply = await sender.waitForPost((p) => p.chatId === userId && p.text.startsWith(`Done ${i}:`), 30_000);
        assert.equal(reply.text, `Done ${i}: [Steward's secret ${name}]`);
        const told = JSON.stringify(stack.model.requests[n + 1]?.body);
        assert.equal(told.split(`it carries a secret Steward holds (${name}); an agent never sends Steward's own secrets`).length - 1, 4, `the model is told each of the four calls was refused: ${told.slice(-3000)}`);
      }
      // nothing left Steward
      assert.deepEqual(web.bodies, [], 'the capture listener got nothing');
      assert.deepEqual(mcpCalls(), [], 'the MCP server was never called');
      assert.equal(smtp.connections, 0, 'no SMTP connection was made');
      assert.equal(await stack.db.approval.count(), 0, 'no admin was asked');
      assert.equal(sender.live(adminChat).length, adminPosts);
      assert.equal(await stack.db.actionExecution.count(), 0);
      assert.equal(await stack.db.mcpCall.count(), 0);
      // every view of the chat: replies, the progress panel and its edits, the transcript, receipts
      const views = sender.posts.flatMap((p) => [p.text, ...p.edits.map((e) => e.text)]).join('\n');
      assert.deepEqual(leaks(views), [], 'chat posts and panel edits');
      assert.deepEqual(leaks(JSON.stringify(await stack.db.message.findMany({ where: { role: { not: 'user' } } }))), [], 'the transcript of what Steward said');
      const receipts = JSON.stringify(await stack.db.receipt.findMany());
      assert.deepEqual(leaks(receipts), [], 'receipts');
      assert.ok(receipts.includes("[Steward's secret STEWARD_INBOX_OPS]"), 'the refused call is receipted, masked');
    });
  });

  it('an approval made before a value was held: the approver, the waiting line and the approval row see it masked; after approval nothing is sent', { timeout: 120_000 }, async () => {
    await setUp();
    const acts = createActivities({ db: stack.db, models: createModelRegistry({}), systemPrompt: 'test', senders: { telegram: sender }, actions: actions(), mcp, toolPolicy: { approvalTools: ['*'], approvalTimeoutMs: 60_000 } });
    const env = new MockActivityEnvironment({ startToCloseTimeout: '1 minute' } as never);
    const turnId = `turn-held-${randomInt(1e9)}`;
    const sessionId = `session-held-${randomInt(1e9)}`;
    // the HTTP API's chat: no progress panel, so the chat is told "Waiting for an admin to approve" in its transcript
    const conversation = { platform: 'http' as const, account: 'held', chatId: 'held' };
    const calls = Object.values(SECRETS).flatMap((v, i) => outbound(v, web, `old${i}`)).filter((c) => noSandbox === false || !c.id.startsWith('cmd_'));
    const messageHash = await putBlob(stack.db, JSON.stringify({ role: 'assistant', content: calls.map((c) => ({ type: 'tool-call', toolCallId: c.id, toolName: c.name, input: JSON.parse(c.arguments) as unknown })) }), 'application/json');
    const posts = sender.posts.length;
    for (const c of calls) {
      const asked = (await env.run(acts.requestApproval, { sessionId, turnId, conversation, messageHash, toolCallId: c.id })) as { approvalId: string; summary: string };
      assert.deepEqual(leaks(asked.summary), [], `the summary (the progress line, history): ${asked.summary}`);
      await stack.db.approval.update({ where: { id: asked.approvalId }, data: { status: 'approved', decidedBy: 'Ada' } });
      const out = (await env.run(acts.runTool, { sessionId, turnId, conversation, messageHash, toolCallId: c.id })) as RunToolResult;
      assert.equal(out.ok, false, c.id);
      assert.match(await getBlobText(stack.db, out.resultHash), /carries a secret Steward holds \(\w+\)/);
    }
    // the views: the approval request each admin got, the waiting line in the chat, the rows, the receipts
    const asked = sender.posts.slice(posts).filter((p) => p.chatId === adminChat);
    assert.equal(asked.length, calls.length, 'each approval was put to the admin');
    assert.ok(asked.every((p) => p.text.includes("[Steward's secret ")), 'the approver sees where a value comes from, never the value');
    assert.deepEqual(leaks(asked.map((p) => p.text).join('\n')), [], 'the approval requests');
    const waiting = await stack.db.message.findMany({ where: { sessionId, text: { startsWith: 'Waiting for an admin to approve' } } });
    assert.equal(waiting.length, calls.length);
    assert.deepEqual(leaks(waiting.map((m) => m.text).join('\n')), [], 'the "Waiting for an admin to approve" lines');
    assert.deepEqual(leaks(JSON.stringify(await stack.db.approval.findMany({ where: { turnId } }))), [], 'the approval rows (summary, payload)');
    assert.deepEqual(leaks(JSON.stringify(await stack.db.receipt.findMany({ where: { sessionId } }))), [], 'the receipts');
    // nothing was sent after the approvals
    assert.deepEqual(web.bodies, []);
    assert.deepEqual(mcpCalls(), []);
    assert.equal(smtp.connections, 0);
  });

  it('the progress panel, receipts and their JSONL export, and logs mask every held value', async () => {
    const turnId = `turn-panel-${randomInt(1e9)}`;
    const chat = String(randomInt(1e8, 1e9));
    const conversation = { platform: 'telegram' as const, account: 'bot', chatId: chat };
    const line = `Waiting for an admin to approve: call the MCP tool web.echo with ${JSON.stringify({ all: VALUES })}`;
    assert.equal(await updatePanel(stack.db, { telegram: sender }, { turnId, conversation, text: line, important: true }, async () => undefined), 'posted');
    const panel = sender.posts.filter((p) => p.chatId === chat);
    assert.equal(panel.length, 1);
    assert.deepEqual(leaks(panel[0]!.text), []);
    assert.deepEqual(leaks(JSON.stringify(await stack.db.progressPanel.findUnique({ where: { turnId } }))), []);

    // a receipt written now, and one written before the values were held (straight into the table)
    const sessionId = `session:export-${randomInt(1e9)}`;
    await writeReceipt(stack.db, { kind: 'tool.call', sessionId, data: { input: { values: VALUES, [SECRETS.STEWARD_API_TOKEN!]: 'as a key' } } });
    await stack.db.receipt.create({ data: { kind: 'tool.call', sessionId, data: JSON.stringify({ old: VALUES.join(' ') }) } });
    assert.deepEqual(leaks(JSON.stringify(await stack.db.receipt.findMany({ where: { sessionId }, orderBy: { id: 'asc' }, take: 1 }))), [], 'written masked');
    const out: string[] = [];
    const io = { config: () => loadConfig({ DATABASE_URL: stack.database.url }, tmpdir()), out: (s: string) => void out.push(s), err: () => undefined };
    assert.equal(await opsCommand('receipts', ['export', '--session', sessionId], io), 0);
    const jsonl = out.join('');
    assert.equal(jsonl.trim().split('\n').length, 2, jsonl);
    assert.deepEqual(leaks(jsonl), [], 'the JSONL export');
    for (const name of Object.keys(SECRETS)) assert.ok(jsonl.includes(`[Steward's secret ${name}]`), name);

    // logs: a line with held values anywhere (an error message, a URL, a field of any name)
    const lines: string[] = [];
    const log = createLogger('info', { write: (s: string) => void lines.push(s) });
    log.error({ err: new Error(`connect to https://u:${SECRETS.STEWARD_INBOX_OPS}@mail.example failed`), detail: VALUES.join(','), env: { anything: SECRETS.GH_DEPLOY_TOKEN } }, `request with ${SECRETS.TELEGRAM_BOT_TOKEN}`);
    await waitFor(async () => lines.length > 0 || undefined, 'the log line');
    assert.deepEqual(leaks(lines.join('\n')), [], lines.join('\n'));
    assert.match(lines.join('\n'), /\[Steward's secret STEWARD_INBOX_OPS\]/);
  });
});
