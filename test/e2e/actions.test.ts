/**
 * Proposed actions end to end: the real Temporal dev server and worker, the real database,
 * the scripted model proposing the tools, an SMTP server on 127.0.0.1 (smtp-server) that
 * receives and stores what nodemailer sends, and an HTTP server on 127.0.0.1. An approved
 * email arrives; a denied or expired one never does; an HTTP action to a private or loopback
 * address is refused with a reason the model gets; an approved HTTP action to an allowed
 * local server works and the admins saw every value it sends, in full, with its hash;
 * credentials the model wrote are refused by default, Steward's own secrets always; a request
 * that differs from the approved hash is not sent; a retried activity sends nothing twice.
 */
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { MockActivityEnvironment } from '@temporalio/testing';
import { SMTPServer } from 'smtp-server';
import { actionKey } from '../../domain/actions.js';
import { putBlob } from '../../domain/blobs.js';
import { createIdentity, OPERATOR } from '../../domain/governance.js';
import { createActivities, type RunToolResult } from '../../activities/index.js';
import { createModelRegistry } from '../../domain/model.js';
import { requestHash } from '../../domain/actions/proposals.js';
import { approvalIdFor } from '../../common/ids.js';
import { changeModel } from '../helpers/change-model.js';
import { createGitFixture } from '../helpers/git-fixture.js';
import { lastUserText } from '../helpers/model-server.js';
import { recordingSender, type RecordingSender } from '../helpers/recording-sender.js';
import { needs } from '../helpers/requirements.js';
import { useStack, waitFor, withHarness, type HarnessOptions } from '../helpers/steward.js';

/** Why the sandboxed tests are skipped here (outside CI; with CI=true they run and fail), or false. */
const noSandbox = await needs('bubblewrap');

interface Mail {
  from: string;
  to: string[];
  raw: string;
}

interface SmtpDouble {
  port: number;
  messages: Mail[];
  close(): Promise<void>;
}

/** A local SMTP server that accepts every message and stores it. */
async function startSmtp(): Promise<SmtpDouble> {
  const messages: Mail[] = [];
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        messages.push({
          from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
          to: session.envelope.rcptTo.map((r) => r.address),
          raw: Buffer.concat(chunks).toString('utf8'),
        });
        callback();
      });
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const port = (server.server.address() as AddressInfo).port;
  return { port, messages, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

interface HttpDouble {
  port: number;
  requests: Array<{ method: string; url: string; headers: IncomingMessage['headers']; body: string }>;
  close(): Promise<void>;
}

async function startHttp(): Promise<HttpDouble> {
  const requests: HttpDouble['requests'] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
      const event = (JSON.parse(body || '{}') as { event?: string }).event ?? 'nothing';
      res.writeHead(201, { 'content-type': 'text/plain' }).end(`received ${event}`);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const uid = () => String(randomInt(100_000_000, 999_999_999));
/** A header of a raw message (folded lines unfolded). */
const header = (raw: string, name: string) => new RegExp(`^${name}: (.*)$`, 'mi').exec(raw.replace(/\r\n[ \t]+/g, ' '))?.[1]?.trim();

describe('proposed actions end to end', () => {
  const stack = useStack();
  let smtp: SmtpDouble;
  let web: HttpDouble;
  let sender: RecordingSender;
  let admin: { id: string; identityId: string };

  before(async () => {
    smtp = await startSmtp();
    web = await startHttp();
    sender = recordingSender();
  });
  after(async () => {
    await smtp?.close();
    await web?.close();
  });

  const opts = (extra: Partial<HarnessOptions> = {}): HarnessOptions => ({
    env: stack.env,
    db: stack.db,
    providers: { openaiCompatible: { baseURL: stack.model.baseURL } },
    senders: { telegram: sender },
    // nothing listed: the proposed actions wait for approval all the same
    toolPolicy: { approvalTools: [], approvalTimeoutMs: 10 * 60_000 },
    actions: {
      smtp: { url: `smtp://127.0.0.1:${smtp.port}`, from: 'Steward <steward@example.test>' },
      http: { allowHosts: ['127.0.0.1'], timeoutMs: 5000 },
    },
    ...extra,
  });

  const adminOnce = async () => {
    if (!admin) {
      const id = uid();
      const { id: identityId } = await createIdentity(stack.db, { name: 'Ada', role: 'admin', accounts: [{ platform: 'telegram', userId: id, dmChatId: id, dmAccount: 'x' }], createdBy: 'test' });
      admin = { id, identityId };
    }
    return admin;
  };

  const pendingApproval = (sessionId: string, toolCallId: string) =>
    waitFor(async () => (await stack.db.approval.findFirst({ where: { sessionId, toolCallId } })) ?? undefined, `the approval of ${toolCallId}`);

  it('an approved send_email arrives at the SMTP server, and its message id reaches the model', async () => {
    const { id: adminChat } = await adminOnce();
    await withHarness(opts(), async (h) => {
      stack.model.enqueue({
        toolCalls: [{ id: 'call_mail', name: 'send_email', arguments: JSON.stringify({ to: ['ops@example.test'], cc: ['lead@example.test'], subject: 'Weekly report', text: 'All systems nominal.\nSee you Monday.' }) }],
      });
      stack.model.enqueue({ text: 'The email is on its way.' });
      const n = stack.model.requests.length;
      const before = smtp.messages.length;
      await h.send('email the weekly report to ops');
      const approval = await pendingApproval(h.sessionId, 'call_mail');
      assert.equal(approval.tool, 'send_email');
      assert.equal(approval.risk, 'dangerous');
      const post = await sender.waitForPost((p) => p.chatId === adminChat && p.text.includes(approval.id));
      assert.match(post.text, /wants to send an email to ops@example\.test \(cc lead@example\.test\) with the subject "Weekly report"/);
      assert.ok(post.text.includes('From: Steward <steward@example.test>\nTo: ops@example.test\nCc: lead@example.test\nSubject: Weekly report\n\nAll systems nominal.\nSee you Monday.'), 'the whole email is shown');
      assert.equal(smtp.messages.length, before, 'nothing is sent before the approval');

      const decided = await h.ingress.decideApproval(approval.id, 'approve', OPERATOR);
      assert.equal(decided.applied, true, decided.reply);
      await h.waitForMessage((m) => m.role === 'assistant' && m.text === 'The email is on its way.');

      assert.equal(smtp.messages.length, before + 1);
      const mail = smtp.messages.at(-1)!;
      assert.deepEqual(mail.to.sort(), ['lead@example.test', 'ops@example.test']);
      assert.equal(mail.from, 'steward@example.test');
      assert.equal(header(mail.raw, 'Subject'), 'Weekly report');
      assert.match(mail.raw, /All systems nominal\.\r\nSee you Monday\./);
      const messageId = header(mail.raw, 'Message-ID');
      assert.ok(messageId, 'the message has an id');

      const toModel = JSON.stringify(stack.model.requests[n + 1]?.body);
      assert.ok(toModel.includes(`Message id: ${messageId}`), `the model is told the message id: ${toModel.slice(-600)}`);
      const recorded = await stack.db.receipt.findUniqueOrThrow({ where: { key: actionKey(approval.turnId, 'call_mail') } });
      assert.equal((JSON.parse(recorded.data) as { detail: { messageId: string } }).detail.messageId, messageId, 'the outcome is stored');
    });
  });

  it('a denied send_email never arrives; the model is told who denied it and why', async () => {
    await adminOnce();
    await withHarness(opts(), async (h) => {
      stack.model.enqueue({ toolCalls: [{ id: 'call_deny', name: 'send_email', arguments: JSON.stringify({ to: ['all@example.test'], subject: 'Denied mail', text: 'x' }) }] });
      stack.model.enqueue({ text: 'Understood, no email.' });
      const n = stack.model.requests.length;
      await h.send('email everyone');
      const approval = await pendingApproval(h.sessionId, 'call_deny');
      const r = await h.ingress.decideApproval(approval.id, 'deny', OPERATOR, 'not to everyone');
      assert.equal(r.applied, true, r.reply);
      await h.waitForMessage((m) => m.role === 'assistant' && m.text === 'Understood, no email.');
      assert.ok(!smtp.messages.some((m) => header(m.raw, 'Subject') === 'Denied mail'), 'never sent');
      assert.match(JSON.stringify(stack.model.requests[n + 1]?.body), /not run: denied by the operator: not to everyone/);
      assert.equal(await stack.db.receipt.count({ where: { key: actionKey(approval.turnId, 'call_deny') } }), 0, 'no action was recorded');
    });
  });

  it('an expired send_email never arrives; the model is told the deadline passed', async () => {
    await adminOnce();
    await withHarness(opts({ toolPolicy: { approvalTools: [], approvalTimeoutMs: 1500 } }), async (h) => {
      stack.model.enqueue({ toolCalls: [{ id: 'call_late', name: 'send_email', arguments: JSON.stringify({ to: ['late@example.test'], subject: 'Expired mail', text: 'x' }) }] });
      stack.model.enqueue({ text: 'Nobody approved it.' });
      const n = stack.model.requests.length;
      await h.send('email late');
      await h.waitForMessage((m) => m.role === 'assistant' && m.text === 'Nobody approved it.', { timeoutMs: 30_000 });
      const approval = await stack.db.approval.findFirstOrThrow({ where: { sessionId: h.sessionId, toolCallId: 'call_late' } });
      assert.equal(approval.status, 'expired');
      assert.ok(!smtp.messages.some((m) => header(m.raw, 'Subject') === 'Expired mail'), 'never sent');
      assert.match(JSON.stringify(stack.model.requests[n + 1]?.body), /not run: no admin decided before the deadline/);
    });
  });

  it('an HTTP action to a private or loopback address is refused with a reason the model gets, and no admin is asked', async () => {
    await adminOnce();
    await withHarness(opts(), async (h) => {
      stack.model.enqueue({
        toolCalls: [
          { id: 'call_private', name: 'http_request', arguments: JSON.stringify({ method: 'GET', url: 'http://10.0.0.7/admin' }) },
          { id: 'call_loopback', name: 'http_request', arguments: JSON.stringify({ method: 'GET', url: `http://localhost:${web.port}/hook` }) },
          { id: 'call_metadata', name: 'http_request', arguments: JSON.stringify({ method: 'GET', url: 'http://[::ffff:169.254.169.254]/latest/meta-data/' }) },
        ],
      });
      stack.model.enqueue({ text: 'Those addresses are off limits.' });
      const n = stack.model.requests.length;
      const seen = web.requests.length;
      await h.send('poke the internal services');
      await h.waitForMessage((m) => m.role === 'assistant' && m.text === 'Those addresses are off limits.');
      const toModel = JSON.stringify(stack.model.requests[n + 1]?.body);
      assert.match(toModel, /The http_request action cannot be proposed: 10\.0\.0\.7 is a private address; HTTP actions may not reach it unless the operator allows it/);
      assert.match(toModel, /cannot be proposed: localhost resolves to 127\.0\.0\.1, which is a loopback address/);
      assert.match(toModel, /cannot be proposed: ::ffff:a9fe:a9fe \(IPv4 169\.254\.169\.254\) is a link-local address/);
      assert.equal(await stack.db.approval.count({ where: { sessionId: h.sessionId } }), 0, 'no admin was asked');
      assert.equal(web.requests.length, seen, 'nothing was sent');
    });
  });

  it('an HTTP action carrying credentials the model wrote is refused by default, and no admin is asked', async () => {
    await adminOnce();
    await withHarness(opts(), async (h) => {
      stack.model.enqueue({
        toolCalls: [{ id: 'call_cred', name: 'http_request', arguments: JSON.stringify({ method: 'POST', url: `http://127.0.0.1:${web.port}/hook`, headers: { 'X-Api-Key': 'exfiltrated-0123' }, body: '{}' }) }],
      });
      stack.model.enqueue({ text: 'Understood.' });
      const n = stack.model.requests.length;
      const sent = web.requests.length;
      await h.send('send the key along');
      await h.waitForMessage((m) => m.role === 'assistant' && m.text === 'Understood.');
      assert.match(JSON.stringify(stack.model.requests[n + 1]?.body), /cannot be proposed: it carries credentials written into the request \(header X-Api-Key\)/);
      assert.equal(await stack.db.approval.count({ where: { sessionId: h.sessionId } }), 0, 'no admin was asked');
      assert.equal(web.requests.length, sent, 'nothing was sent');
    });
  });

  it('an approved HTTP action with credentials the operator allows: the admins saw every value in full and its hash, the server got exactly that', async () => {
    const { id: adminChat } = await adminOnce();
    await withHarness(opts({ actions: { ...opts().actions, literalCredentials: 'allow' } }), async (h) => {
      const secret = 'Bearer top-secret-0123456789';
      const input = { method: 'POST', url: `http://127.0.0.1:${web.port}/hook?token=qs-secret-42&team=ops`, headers: { Authorization: secret, 'Content-Type': 'application/json' }, body: '{"event":"deploy","token":"body-secret-7"}' };
      stack.model.enqueue({ toolCalls: [{ id: 'call_hook', name: 'http_request', arguments: JSON.stringify(input) }] });
      stack.model.enqueue({ text: 'The webhook answered.' });
      const n = stack.model.requests.length;
      await h.send('trigger the deploy webhook');
      const approval = await pendingApproval(h.sessionId, 'call_hook');
      const hash = requestHash('http_request', input);
      assert.equal(approval.requestHash, hash, 'the approval holds the hash of the exact request');
      assert.deepEqual(JSON.parse(approval.payload), input, 'the API lists the input in full');
      const post = await sender.waitForPost((p) => p.chatId === adminChat && p.text.includes(approval.id));
      for (const value of [`Authorization: ${secret}`, 'token=qs-secret-42&team=ops', '"token":"body-secret-7"', `POST ${input.url}`]) assert.ok(post.text.includes(value), `the admins see ${value}`);
      assert.ok(!post.text.includes('[redacted]'), 'nothing the model chose is hidden from the approvers');
      assert.match(post.text, /It carries credentials the agent wrote itself: header Authorization, URL query parameter token, body field token/);
      assert.ok(post.text.includes(`Request sha256: ${hash}`));
      assert.equal(web.requests.length, 0, 'nothing sent before the approval');

      const decided = await h.ingress.decideApproval(approval.id, 'approve', OPERATOR);
      assert.equal(decided.applied, true, decided.reply);
      await h.waitForMessage((m) => m.role === 'assistant' && m.text === 'The webhook answered.');

      assert.equal(web.requests.length, 1);
      const got = web.requests[0]!;
      assert.equal(got.method, 'POST');
      assert.equal(got.url, '/hook?token=qs-secret-42&team=ops');
      assert.equal(got.headers.authorization, secret, 'what the admins saw is what the server got');
      assert.equal(got.body, input.body);
      const toModel = JSON.stringify(stack.model.requests[n + 1]?.body);
      assert.match(toModel, /HTTP POST http:\/\/127\.0\.0\.1:\d+\/hook\?token=\[redacted\]&team=ops answered 201 \(15 bytes\)/);
      // what the server chose (status text, headers, body) is one <tool_result> block
      assert.match(toModel, /<tool_result source=\\"http\\" status=\\"201\\">\\nStatus: 201 Created\\n/);
      assert.match(toModel, /received deploy/);

      const receipts = await stack.db.receipt.findMany({ where: { sessionId: h.sessionId } });
      const data = (kind: string) => receipts.filter((r) => r.kind === kind).map((r) => JSON.parse(r.data) as Record<string, unknown>);
      assert.deepEqual(data('approval.requested').map((d) => d.requestHash), [hash]);
      assert.deepEqual(data('approval.decision').map((d) => d.requestHash), [hash]);
      assert.deepEqual(data('action.started').map((d) => d.approvedRequestHash), [hash]);
      const all = receipts.map((r) => r.data).join('\n');
      assert.ok(all.includes('"status":201'), 'the status is stored');
      for (const leak of ['top-secret', 'qs-secret', 'body-secret']) assert.ok(!all.includes(leak), `receipts (the audit log) never hold ${leak}`);
    });
  });

  it("a proposal carrying a secret Steward holds is refused before any admin sees it", async () => {
    const { id: adminChat } = await adminOnce();
    const held = 'held-api-token-0123456789';
    await withHarness(opts({ actions: { ...opts().actions, literalCredentials: 'allow', heldSecrets: [{ name: 'STEWARD_API_TOKEN', value: held }] } }), async (h) => {
      stack.model.enqueue({
        toolCalls: [{ id: 'call_held', name: 'http_request', arguments: JSON.stringify({ method: 'POST', url: `http://127.0.0.1:${web.port}/collect`, body: `{"note":"${Buffer.from(held).toString('base64')}"}` }) }],
      });
      stack.model.enqueue({ text: 'I will not.' });
      const n = stack.model.requests.length;
      const posts = sender.live(adminChat).length;
      const sent = web.requests.length;
      await h.send('post the API token to my collector');
      await h.waitForMessage((m) => m.role === 'assistant' && m.text === 'I will not.');
      assert.match(JSON.stringify(stack.model.requests[n + 1]?.body), /it carries a secret Steward holds \(STEWARD_API_TOKEN\); an agent never sends Steward's own secrets/);
      assert.equal(await stack.db.approval.count({ where: { sessionId: h.sessionId } }), 0);
      assert.equal(sender.live(adminChat).length, posts, 'no admin was asked');
      assert.equal(web.requests.length, sent);
    });
  });

  it('an approved action whose request no longer matches the approved hash is refused and sends nothing', async () => {
    await adminOnce();
    await withHarness(opts(), async (h) => {
      stack.model.enqueue({ toolCalls: [{ id: 'call_swap', name: 'http_request', arguments: JSON.stringify({ method: 'POST', url: `http://127.0.0.1:${web.port}/hook`, body: '{"event":"swap"}' }) }] });
      stack.model.enqueue({ text: 'Noted.' });
      const n = stack.model.requests.length;
      const sent = web.requests.length;
      await h.send('call the hook');
      const approval = await pendingApproval(h.sessionId, 'call_swap');
      // what was approved is not what would be sent
      await stack.db.approval.update({ where: { id: approval.id }, data: { requestHash: requestHash('http_request', { method: 'POST', url: `http://127.0.0.1:${web.port}/hook`, body: '{"event":"other"}' }) } });
      const decided = await h.ingress.decideApproval(approval.id, 'approve', OPERATOR);
      assert.equal(decided.applied, true, decided.reply);
      await h.waitForMessage((m) => m.role === 'assistant' && m.text === 'Noted.');
      assert.match(JSON.stringify(stack.model.requests[n + 1]?.body), /The action was refused: what would be sent \(sha256 [0-9a-f]{16}…\) is not what was approved/);
      assert.equal(web.requests.length, sent, 'nothing was sent');
      const recorded = await stack.db.actionExecution.findUniqueOrThrow({ where: { key: actionKey(approval.turnId, 'call_swap') } });
      assert.match(recorded.result ?? '', /not what was approved/);
    });
  });

  it('an approved run_command runs in the sandbox; an approved start_repo_change starts a change that reports in this chat; an unknown repository is refused', { skip: noSandbox }, async () => {
    await adminOnce();
    const fx = createGitFixture({ 'README.md': '# demo\n' });
    try {
      await withHarness(opts(), async (h) => {
        const repo = `act-${uid()}`;
        await h.changes.registerRepo({ name: repo, cloneUrl: fx.bare }, { id: OPERATOR.id, name: OPERATOR.name });
        stack.model.enqueue({
          toolCalls: [
            { id: 'call_cmd', name: 'run_command', arguments: JSON.stringify({ argv: ['echo', 'hello from the sandbox'] }) },
            { id: 'call_change', name: 'start_repo_change', arguments: JSON.stringify({ repo, request: 'Add a CHANGELOG file' }) },
            { id: 'call_nochange', name: 'start_repo_change', arguments: JSON.stringify({ repo: 'no-such-repo', request: 'Add a file' }) },
          ],
        });
        // the change's intake asks a question and waits (stopped below); it never takes the turn's answer
        stack.model.setDefault(
          changeModel({
            intake: () => ({ intent: 'feature', goal: 'Add a CHANGELOG file', scope: ['CHANGELOG.md'], acceptance: ['CHANGELOG.md exists'], constraints: [], assumptions: [], open_questions: ['Which format?'], risk_signals: [], summary: 'Add a changelog.' }),
          }),
        );
        const isFollowUp = (req: { body: unknown }) => JSON.stringify(req.body).includes('hello from the sandbox');
        stack.model.enqueue({ text: 'Both are under way.', match: isFollowUp });
        await h.send('say hello in the sandbox, then start the changelog change');
        for (const id of ['call_cmd', 'call_change', 'call_nochange']) {
          const approval = await pendingApproval(h.sessionId, id);
          assert.equal(approval.risk, 'dangerous');
          const r = await h.ingress.decideApproval(approval.id, 'approve', OPERATOR);
          assert.equal(r.applied, true, r.reply);
        }
        await h.waitForMessage((m) => m.role === 'assistant' && m.text === 'Both are under way.');
        const toModel = JSON.stringify(stack.model.requests.find(isFollowUp)?.body);
        assert.match(toModel, /The command `echo hello from the sandbox` exited with 0/);
        const started = /Started the repository change (chg-[a-f0-9]{12}) on ([\w.-]+)/.exec(toModel);
        assert.ok(started, toModel.slice(-1500));
        assert.equal(started[2], repo);
        assert.match(toModel, /The action was refused: no repository is registered as no-such-repo/);
        const change = await stack.db.repoChange.findUniqueOrThrow({ where: { id: started[1]! } });
        assert.equal(change.sessionId, h.sessionId, 'the change reports in this chat');
        assert.equal(change.request, 'Add a CHANGELOG file');
        assert.match(change.requestedByName, /^tester \(proposed by the agent, approved by the operator\)$/);
        await waitFor(async () => ((await h.changes.getChange(started[1]!))?.question ? true : undefined), 'the change to ask its question');
        assert.deepEqual(await h.changes.stopInChat({ platform: 'http', account: h.account, chatId: h.chatId }, { id: OPERATOR.id, name: OPERATOR.name }), [started[1]]);
      });
    } finally {
      stack.model.setDefault((req) => ({ text: `echo: ${lastUserText(req.body)}` }));
      fx.cleanup();
    }
  });

  it('an approved start_repo_change carries the turn\'s requester set to the change it starts', async () => {
    const started: Array<{ id: string; name: string; shapedBy?: readonly string[] }> = [];
    const acts = createActivities({
      db: stack.db,
      models: createModelRegistry({}),
      systemPrompt: 'test',
      startRepoChange: async (_req, by) => {
        started.push(by);
        return { id: 'chg-000000000001' };
      },
    });
    const turnId = `turn-set-${uid()}`;
    const sessionId = `session-set-${uid()}`;
    const conversation = { platform: 'http' as const, account: 'set', chatId: 'set' };
    const input = { repo: 'demo', request: 'Add a CHANGELOG file' };
    const messageHash = await putBlob(stack.db, JSON.stringify({ role: 'assistant', content: [{ type: 'tool-call', toolCallId: 'call_set', toolName: 'start_repo_change', input }] }), 'application/json');
    await stack.db.approval.create({
      data: { id: approvalIdFor(turnId, 'call_set'), workflowId: 'wf-set', sessionId, turnId, toolCallId: 'call_set', tool: 'start_repo_change', summary: 'start a change', payload: '{}', requestHash: requestHash('start_repo_change', input, {}), risk: 'dangerous', status: 'approved', requestedBy: 'id-pat', decidedBy: 'Cy', deadline: new Date(Date.now() + 60_000) },
    });
    const env = new MockActivityEnvironment({ startToCloseTimeout: '1 minute' } as never);
    const r = (await env.run(acts.runTool, { sessionId, turnId, conversation, messageHash, toolCallId: 'call_set', requestedBy: 'id-pat', requesters: ['id-ada', 'id-pat', 'id-dee'] })) as RunToolResult;
    assert.equal(r.ok, true);
    assert.equal(started.length, 1);
    assert.equal(started[0]!.id, 'id-pat');
    assert.deepEqual(started[0]!.shapedBy, ['id-ada', 'id-pat', 'id-dee'], 'none of them may approve the change\'s promotion');
  });

  it('a retried activity does not act twice; a claim without an outcome is not repeated; an unapproved call never runs', async () => {
    const acts = createActivities({
      db: stack.db,
      models: createModelRegistry({}),
      systemPrompt: 'test',
      actions: { smtp: { url: `smtp://127.0.0.1:${smtp.port}`, from: 'steward@example.test' } },
    });
    const turnId = `turn-retry-${uid()}`;
    const sessionId = `session-retry-${uid()}`;
    const conversation = { platform: 'http' as const, account: 'retry', chatId: 'retry' };
    const calls = ['call_a', 'call_b', 'call_c'].map((id) => ({
      type: 'tool-call' as const,
      toolCallId: id,
      toolName: 'send_email',
      input: { to: ['retry@example.test'], subject: `Retry ${id}`, text: 'once' },
    }));
    const messageHash = await putBlob(stack.db, JSON.stringify({ role: 'assistant', content: calls }), 'application/json');
    const approve = (toolCallId: string, status: string) =>
      stack.db.approval.create({
        data: {
          id: approvalIdFor(turnId, toolCallId),
          workflowId: 'wf-retry',
          sessionId,
          turnId,
          toolCallId,
          tool: 'send_email',
          summary: 'send an email',
          payload: '{}',
          requestHash: requestHash('send_email', calls.find((c) => c.toolCallId === toolCallId)!.input, { smtpFrom: 'steward@example.test' }),
          risk: 'dangerous',
          status,
          decidedBy: 'Ada',
          deadline: new Date(Date.now() + 60_000),
        },
      });
    await approve('call_a', 'approved');
    await approve('call_b', 'approved');
    await approve('call_c', 'pending');
    const env = new MockActivityEnvironment({ startToCloseTimeout: '1 minute' } as never);
    const run = async (toolCallId: string) => (await env.run(acts.runTool, { sessionId, turnId, conversation, messageHash, toolCallId })) as RunToolResult;
    const count = (subject: string) => smtp.messages.filter((m) => header(m.raw, 'Subject') === subject).length;

    const first = await run('call_a');
    const second = await run('call_a');
    assert.equal(first.ok, true);
    assert.equal(count('Retry call_a'), 1, 'sent once');
    assert.equal(second.ok, true);
    assert.equal(second.resultHash, first.resultHash, 'the retry reports the recorded outcome');

    // an attempt that claimed the action and died before recording it: not repeated
    await stack.db.actionExecution.create({ data: { key: actionKey(turnId, 'call_b'), approvalId: approvalIdFor(turnId, 'call_b'), tool: 'send_email', status: 'started' } });
    const unknown = await run('call_b');
    assert.equal(unknown.ok, false);
    assert.equal(count('Retry call_b'), 0, 'not sent again');

    const unapproved = await run('call_c');
    assert.equal(unapproved.ok, false);
    assert.equal(count('Retry call_c'), 0, 'an action without an approved row never runs');
  });
});
