/**
 * The operator inbox (services/decisions.ts) with real parts: the Temporal dev server and
 * worker, the database (SQLite, and PostgreSQL when available), the scripted model, a local
 * HTTP server the approved action calls. The inbox lists a proposed action with exactly the
 * text the admins got in chat; approving it from the inbox runs it once; a self-approval, a
 * member's decision and a second decision are refused and change nothing. Pairing requests
 * (decided with the requester's code) and tasks are decided in place; bad ids and bad
 * decisions are refused. The console's Inbox page over its real routes, as an admin, the admin who
 * shaped a proposal and a member: refusals by the rules answer 409 in the item and change
 * nothing; a pairing is decided with the code and a role. An MCP server that went down (server-everything over HTTP, killed) is
 * listed for admins with its last error and nothing to decide.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomInt, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import nodePath from 'node:path';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { Role } from '../../common/roles.js';
import type { Db } from '../../domain/db.js';
import { createConsoleRoutes } from '../../adapters/console/app.js';
import { csrfToken } from '../../adapters/console/security.js';
import { createHttpApp, startHttpServer } from '../../adapters/http/app.js';
import { BrowserSignIn, SIGN_IN_COOKIE } from '../../adapters/http/sign-in.js';
import { loadConfig } from '../../config/index.js';
import { adminCommand } from '../../platform/admin-cli.js';
import { closeKnowledgeIndexes, knowledgeIndexOpener } from '../../domain/knowledge/open.js';
import { createIdentity, findActor, OPERATOR, type Actor } from '../../domain/governance.js';
import { createMcpTools } from '../../domain/mcp/tools.js';
import { createConsoleChats } from '../../services/console.js';
import { createOperatorInbox, InboxInputError } from '../../services/decisions.js';
import { createMcpService } from '../../services/mcp.js';
import { ServiceInputError } from '../../services/requests.js';
import type { Ingress } from '../../services/chat/intake.js';
import { testDatabases } from '../helpers/db.js';
import { changeModel, GREETING_DRAFT } from '../helpers/change-model.js';
import { createGitFixture } from '../helpers/git-fixture.js';
import { preloadOpenApi, startGitHubDouble } from '../helpers/github-double.js';
import { startEverythingHttp } from '../helpers/mcp-servers.js';
import { needs } from '../helpers/requirements.js';
import { recordingSender } from '../helpers/recording-sender.js';
import { useStack, waitFor, withHarness } from '../helpers/steward.js';

const uid = () => String(randomInt(100_000_000, 999_999_999));

async function person(db: Db, role: Role, name: string): Promise<{ userId: string; actor: Actor }> {
  const userId = uid();
  await createIdentity(db, { name, role, accounts: [{ platform: 'telegram', userId, dmChatId: userId, dmAccount: 'x' }], createdBy: 'test' });
  return { userId, actor: (await findActor(db, 'telegram', userId))! };
}

function telegram(ingress: Ingress, account = `bot${uid()}`) {
  return (from: { id: string; name: string }, text: string) =>
    ingress.handle({ id: randomUUID(), platform: 'telegram', account, chatId: from.id, chatType: 'dm', addressed: true, user: from.name, userId: from.id, text, at: new Date().toISOString() });
}

/** A refusal: the inbox's error with its status. */
async function refused(p: Promise<unknown>, status: number, message?: RegExp): Promise<string> {
  try {
    await p;
  } catch (err) {
    // the inbox's own refusals, and those of the service it called (the same statuses)
    assert.ok(err instanceof InboxInputError || err instanceof ServiceInputError, String(err));
    assert.equal(err.status, status, err.message);
    if (message) assert.match(err.message, message);
    return err.message;
  }
  assert.fail('expected a refusal');
}

for (const database of testDatabases()) {
  describe(`operator inbox (${database.name})`, () => {
    const stack = useStack(database);
    const sender = recordingSender();
    let web: { port: number; hits: string[]; server: Server };

    before(async () => {
      const hits: string[] = [];
      const server = createServer((req, res) => {
        hits.push(`${req.method} ${req.url}`);
        req.resume();
        req.on('end', () => res.writeHead(200, { 'content-type': 'text/plain' }).end('ok'));
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      web = { port: (server.address() as AddressInfo).port, hits, server };
    });
    after(async () => {
      web?.server.closeAllConnections();
      await new Promise<void>((resolve) => (web ? web.server.close(() => resolve()) : resolve()));
    });

    const harness = () => ({
      env: stack.env,
      db: stack.db,
      providers: { openaiCompatible: { baseURL: stack.model.baseURL } },
      senders: { telegram: sender },
      toolPolicy: { approvalTools: [], approvalTimeoutMs: 10 * 60_000 },
      actions: { http: { allowHosts: ['127.0.0.1'], timeoutMs: 5000 } },
      pairingTtlMs: 60_000,
    });

    it('a proposed action: listed with the chat\'s exact text; self-approval and a member refused; approved once from the inbox, it runs', async () => {
      await withHarness(harness(), async (h) => {
        const inbox = createOperatorInbox({ db: stack.db, ingress: h.ingress, tasks: h.tasks });
        const send = telegram(h.ingress);
        const ada = await person(stack.db, 'admin', `Ada-${uid()}`);
        const bob = await person(stack.db, 'admin', `Bob-${uid()}`);
        const mia = await person(stack.db, 'member', `Mia-${uid()}`);
        const path = `/deploy-${uid()}`;
        stack.model.enqueue({ toolCalls: [{ id: 'call_inbox', name: 'http_request', arguments: JSON.stringify({ method: 'POST', url: `http://127.0.0.1:${web.port}${path}`, body: 'go' }) }] });
        stack.model.enqueue({ text: 'Deployed from the inbox.' });
        await send({ id: bob.userId, name: bob.actor.name }, 'call the deploy hook');
        const approval = await waitFor(async () => (await stack.db.approval.findFirst({ where: { toolCallId: 'call_inbox', status: 'pending' }, orderBy: { createdAt: 'desc' } })) ?? undefined, 'the approval');
        const post = await sender.waitForPost((p) => p.chatId === ada.userId && p.text.includes(approval.id));

        // listed, newest first, with the chat's text, for the admin who did not shape it
        const listed = await inbox.list(ada.actor, { kind: 'approval' });
        const item = listed.find((i) => i.id === `approval:${approval.id}`);
        assert.ok(item, 'the approval is in the inbox');
        assert.equal(item.text, post.text, 'the inbox shows exactly what the chat showed');
        assert.deepEqual(item.actions, ['approve', 'deny']);
        for (let i = 1; i < listed.length; i++) assert.ok(listed[i - 1]!.created >= listed[i]!.created, 'newest first');

        // Bob shaped it: no approve offered, and the workflow refuses it; nothing changes
        const bobs = await inbox.item(`approval:${approval.id}`, bob.actor);
        assert.deepEqual(bobs.actions, ['deny']);
        assert.match(bobs.notes.join(' '), /you may not approve it/);
        await refused(inbox.decide(bob.actor, `approval:${approval.id}`, { decision: 'approve' }), 409, /Not applied/);
        // a member may not decide at all
        // nor see what others asked for: her inbox holds only what she asked for or shaped
        await refused(inbox.item(`approval:${approval.id}`, mia.actor), 404, /no inbox item/);
        assert.equal((await inbox.list(mia.actor)).some((i) => i.id === `approval:${approval.id}`), false);
        await refused(inbox.decide(mia.actor, `approval:${approval.id}`, { decision: 'approve' }), 409, /admin role/);
        await refused(inbox.decide(mia.actor, `approval:${approval.id}`, { decision: 'deny' }), 409, /admin role/);
        assert.equal((await stack.db.approval.findUniqueOrThrow({ where: { id: approval.id } })).status, 'pending', 'the refusals changed nothing');
        assert.equal(web.hits.filter((x) => x.endsWith(path)).length, 0, 'nothing sent yet');

        // Ada approves from the inbox: the run goes on
        const r = await inbox.decide(ada.actor, `approval:${approval.id}`, { decision: 'approve' });
        assert.equal(r.applied, true);
        // the answer is the decided item (the service waits for the run to record it)
        assert.deepEqual([r.item?.status, r.item?.decided?.by, r.item?.actions], ['approved', ada.actor.name, []]);
        await sender.waitForPost((p) => p.chatId === bob.userId && p.text.includes('Deployed from the inbox.'), 30_000);
        await waitFor(async () => ((await stack.db.approval.findUniqueOrThrow({ where: { id: approval.id } })).status === 'approved' ? true : undefined), 'the approval recorded as approved');
        const decidedItem = await inbox.item(`approval:${approval.id}`, ada.actor);
        assert.deepEqual([decidedItem.status, decidedItem.decided?.by, decidedItem.decided?.how], ['approved', ada.actor.name, 'approved']);
        assert.deepEqual(web.hits.filter((x) => x.endsWith(path)), [`POST ${path}`]);

        // a second decision (either way) changes nothing
        await refused(inbox.decide(ada.actor, `approval:${approval.id}`, { decision: 'approve' }), 409, /already approved/);
        await refused(inbox.decide(OPERATOR, `approval:${approval.id}`, { decision: 'deny' }), 409, /already approved/);
        const decisions = await stack.db.receipt.findMany({ where: { kind: 'approval.decision' } });
        assert.equal(decisions.filter((d) => d.data.includes(approval.id)).length, 1, 'the workflow took the decision once');
        assert.equal(web.hits.filter((x) => x.endsWith(path)).length, 1);
        // decided, it stays listed with who decided, and offers nothing more
        const after = (await inbox.list(ada.actor)).find((i) => i.id === `approval:${approval.id}`);
        assert.deepEqual([after?.status, after?.actions, after?.decided?.by], ['approved', [], ada.actor.name]);
      });
    });

    it('pairing requests are decided with the requester\'s code; tasks are handed or closed; refusals change nothing', async () => {
      await withHarness(harness(), async (h) => {
        const inbox = createOperatorInbox({ db: stack.db, ingress: h.ingress, tasks: h.tasks });
        const send = telegram(h.ingress);
        const ada = await person(stack.db, 'admin', `Ada-${uid()}`);
        const mia = await person(stack.db, 'member', `Mia-${uid()}`);
        const newcomer = { id: uid(), name: `Nina-${uid()}` };
        const asked = await send(newcomer, '/pair');
        const code = /code is ([A-Z2-9]{8})/.exec(asked.reply ?? '')?.[1];
        assert.ok(code, asked.reply);
        const row = await stack.db.pairing.findFirstOrThrow({ where: { userId: newcomer.id } });
        const id = `pairing:${row.id}`;
        const item = (await inbox.list(ada.actor, { kind: 'pairing' })).find((i) => i.id === id);
        assert.deepEqual([item?.askedBy, item?.actions], [newcomer.name, ['approve', 'deny']]);
        assert.ok(!JSON.stringify(item).includes(code), 'the code is never shown');

        await refused(inbox.decide(mia.actor, id, { decision: 'approve', role: 'member', code }), 409, /admin role/);
        await refused(inbox.decide(ada.actor, id, { decision: 'approve', role: 'member', code: 'ZZZZZZZZ' }), 409, /not the code/);
        await refused(inbox.decide(ada.actor, id, { decision: 'approve', code }), 400, /role/);
        await refused(inbox.decide(ada.actor, id, { decision: 'approve', role: 'admin', code }), 409, /cannot give the admin role/);
        assert.equal((await stack.db.pairing.findUniqueOrThrow({ where: { id: row.id } })).status, 'pending', 'the refusals changed nothing');

        const ok = await inbox.decide(ada.actor, id, { decision: 'approve', role: 'member', code: code.toLowerCase() });
        assert.match(ok.message, /approved as member/);
        assert.deepEqual([ok.item?.status, ok.item?.decided?.by, ok.item?.decided?.how], ['approved', ada.actor.name, 'approved as member']);
        assert.equal((await findActor(stack.db, 'telegram', newcomer.id))?.role, 'member');
        await refused(inbox.decide(ada.actor, id, { decision: 'deny', code }), 409, /cannot be used again/);

        // tasks: a member in no chat of the task may not; an admin closes it once
        const task = await h.tasks.create({ text: `renew the certificate ${uid()}`, chatId: 'ops-room', platform: 'telegram', account: 'x' }, { id: ada.actor.id, name: ada.actor.name });
        const tid = `task:${task.id}`;
        assert.deepEqual((await inbox.item(tid, ada.actor)).actions, ['hand', 'close']);
        await refused(inbox.decide(mia.actor, tid, { decision: 'close' }), 409, /an admin or that chat/);
        await refused(inbox.decide(ada.actor, tid, { decision: 'approve' }), 400, /hand or close/);
        assert.equal((await h.tasks.show(task.id)).status, 'open');
        const closed = await inbox.decide(ada.actor, tid, { decision: 'close', reason: 'done by hand' });
        assert.equal(closed.item?.status, 'closed');
        await refused(inbox.decide(ada.actor, tid, { decision: 'close' }), 409, /closed/);
      });
    });

    it('bad ids and bad decisions are refused', async () => {
      await withHarness(harness(), async (h) => {
        const inbox = createOperatorInbox({ db: stack.db, ingress: h.ingress, tasks: h.tasks });
        for (const bad of ['', 'nope', 'approval:', 'widget:1', 'approval:a b', `approval:${'x'.repeat(300)}`, 42, null]) await refused(inbox.decide(OPERATOR, bad, { decision: 'approve' }), 400);
        await refused(inbox.decide(OPERATOR, 'approval:apr-does-not-exist', { decision: 'approve' }), 404);
        await refused(inbox.decide(OPERATOR, 'memory:m-00000000', { decision: 'approve' }), 404);
        await refused(inbox.decide(OPERATOR, 'task:t-00000000', { decision: 'close' }), 404);
        for (const body of [{}, { decision: 'maybe' }, { decision: 'approve', extra: 1 }, { decision: 'deny', reason: '' }, { decision: 'approve', role: 'king' }, 'approve', null, []])
          await refused(inbox.decide(OPERATOR, 'approval:apr-does-not-exist', body), 400);
        await refused(inbox.list(OPERATOR, { kind: 'widgets' }), 400);
      });
    });

    it('over HTTP: GET /api/v1/inbox (filtered by kind), POST /api/v1/inbox/{id}/decision; bad ids, bodies and second decisions refused', async () => {
      await withHarness(harness(), async (h) => {
        const TOKEN = 'inbox-token-0123456789abcdef';
        const app = createHttpApp({ ingress: h.ingress, apiToken: TOKEN, health: async () => ({ ok: true, checks: {} }), tasks: h.tasks, inbox: createOperatorInbox({ db: stack.db, ingress: h.ingress, tasks: h.tasks }) });
        const call = async (method: string, route: string, raw?: string, headers: Record<string, string> = { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }) => {
          const res = await app.request(route, { method, headers, ...(raw !== undefined ? { body: raw } : {}) });
          return { status: res.status, json: (await res.json()) as Record<string, unknown> & { items?: Array<{ id: string; kind: string; actions: string[] }> } };
        };
        const send = telegram(h.ingress);
        const newcomer = { id: uid(), name: `Nora-${uid()}` };
        const code = /code is ([A-Z2-9]{8})/.exec((await send(newcomer, '/pair')).reply ?? '')?.[1];
        assert.ok(code);
        const row = await stack.db.pairing.findFirstOrThrow({ where: { userId: newcomer.id } });
        const task = await h.tasks.create({ text: `rotate keys ${uid()}`, chatId: 'ops-room', platform: 'telegram', account: 'x' }, { id: 'operator', name: 'the operator' });

        assert.equal((await call('GET', '/api/v1/inbox', undefined, {})).status, 401);
        const all = await call('GET', '/api/v1/inbox');
        assert.equal(all.status, 200);
        assert.ok(all.json.items?.some((i) => i.id === `pairing:${row.id}` && i.actions.join() === 'approve,deny'), 'the operator may decide the pairing');
        assert.ok(all.json.items?.some((i) => i.id === `task:${task.id}`));
        const pairings = await call('GET', '/api/v1/inbox?kind=pairing');
        assert.ok(pairings.json.items!.length > 0 && pairings.json.items!.every((i) => i.kind === 'pairing'));
        assert.equal((await call('GET', '/api/v1/inbox?kind=widgets')).status, 400);

        const url = `/api/v1/inbox/${encodeURIComponent(`pairing:${row.id}`)}/decision`;
        for (const [raw, status] of [
          ['{not json', 400],
          ['{}', 400],
          [JSON.stringify({ decision: 'approve', role: 'member', code, extra: true }), 400],
          [JSON.stringify({ decision: 'approve', role: 'member', code: 'ZZZZZZZZ' }), 409],
          [JSON.stringify({ decision: 'hand' }), 400],
        ] as const) {
          const r = await call('POST', url, raw);
          assert.equal(r.status, status, `${raw}: ${JSON.stringify(r.json)}`);
          assert.equal(typeof r.json.error, 'string');
        }
        assert.equal((await call('POST', url, JSON.stringify({ decision: 'deny', code }), { authorization: `Bearer ${TOKEN}`, 'content-type': 'text/plain' })).status, 415);
        assert.equal((await call('POST', '/api/v1/inbox/nope/decision', JSON.stringify({ decision: 'approve' }))).status, 400);
        assert.equal((await call('POST', `/api/v1/inbox/${encodeURIComponent('approval:apr-none')}/decision`, JSON.stringify({ decision: 'approve' }))).status, 404);
        assert.equal((await stack.db.pairing.findUniqueOrThrow({ where: { id: row.id } })).status, 'pending', 'the refusals changed nothing');

        const ok = await call('POST', url, JSON.stringify({ decision: 'deny', code }));
        assert.equal(ok.status, 200, JSON.stringify(ok.json));
        assert.equal((ok.json.item as { status: string }).status, 'denied');
        assert.equal((await call('POST', url, JSON.stringify({ decision: 'approve', role: 'member', code }))).status, 409);
        const closed = await call('POST', `/api/v1/inbox/${encodeURIComponent(`task:${task.id}`)}/decision`, JSON.stringify({ decision: 'close' }));
        assert.equal(closed.status, 200, JSON.stringify(closed.json));
        assert.equal((await call('POST', `/api/v1/inbox/${encodeURIComponent(`task:${task.id}`)}/decision`, JSON.stringify({ decision: 'close' }))).status, 409);
        // the CLI, through the running API
        const server = await startHttpServer(app, { host: '127.0.0.1', port: 0 });
        try {
          const out: string[] = [];
          const err: string[] = [];
          const io = { config: () => loadConfig({}, tmpdir()), out: (x: string) => void out.push(x), err: (x: string) => void err.push(x), api: { url: server.url, token: TOKEN } };
          const other = await h.tasks.create({ text: `water the plants ${uid()}`, chatId: 'ops-room', platform: 'telegram', account: 'x' }, { id: 'operator', name: 'the operator' });
          assert.equal(await adminCommand('inbox', ['list', '--kind', 'task'], io), 0, err.join(''));
          assert.ok(out.join('').includes(`task:${other.id}`), out.join(''));
          assert.equal(await adminCommand('inbox', ['list', '--kind', 'widgets'], io), 2);
          assert.equal(await adminCommand('inbox', ['decide', `task:${other.id}`, 'hand-wave'], io), 1, 'a bad decision is refused');
          assert.equal(await adminCommand('inbox', ['decide', `task:${other.id}`, 'close'], io), 0, err.join(''));
          assert.equal((await h.tasks.show(other.id)).status, 'closed');
          assert.equal(await adminCommand('inbox', ['decide', `task:${other.id}`, 'close'], io), 1, 'a second decision is refused');
        } finally {
          await server.close();
        }
        const doc = (await (await app.request('/api/openapi.json')).json()) as { paths: Record<string, unknown> };
        assert.ok(doc.paths['/api/v1/inbox'] && doc.paths['/api/v1/inbox/{id}/decision'], 'the routes are in the OpenAPI document');
      });
    });

    it("the console's Inbox page, as three people: the proposer and a member refused in place (409), an admin decides; a pairing with its code and a role", async () => {
      await withHarness(harness(), async (h) => {
        const inbox = createOperatorInbox({ db: stack.db, ingress: h.ingress, tasks: h.tasks });
        const send = telegram(h.ingress);
        const ada = await person(stack.db, 'admin', `Ada-${uid()}`);
        const bob = await person(stack.db, 'admin', `Bob-${uid()}`);
        const mia = await person(stack.db, 'member', `Mia-${uid()}`);
        const TOKEN = 'inbox-page-token-0123456789abcdef';
        const signIn = new BrowserSignIn({ apiToken: TOKEN });
        const people: Record<string, Actor> = { ada: ada.actor, bob: bob.actor, mia: mia.actor };
        // who a request is: the console's actorOf (here a test picks the person by a header; test/db/console-people.test.ts and the browser test sign people in)
        const app = createConsoleRoutes({ apiToken: TOKEN, signIn, chats: createConsoleChats({ ingress: h.ingress, db: stack.db, account: 'default' }), services: { inbox }, actorOf: (c) => people[c.req.header('x-test-as') ?? ''] ?? OPERATOR });
        const cookie = signIn.cookieValue();
        const csrf = csrfToken(TOKEN, cookie);
        const page = async (as: string, route = '/console/inbox') => {
          const res = await app.request(`http://127.0.0.1${route}`, { headers: { cookie: `${SIGN_IN_COOKIE}=${cookie}`, 'x-test-as': as } });
          return { status: res.status, html: await res.text() };
        };
        const post = async (as: string, id: string, fields: Record<string, string>, htmx = true) => {
          const res = await app.request(`http://127.0.0.1/console/inbox/${encodeURIComponent(id)}/decision`, {
            method: 'POST',
            headers: { cookie: `${SIGN_IN_COOKIE}=${cookie}`, 'x-test-as': as, 'content-type': 'application/x-www-form-urlencoded', ...(htmx ? { 'hx-request': 'true', 'x-csrf-token': csrf } : {}) },
            body: new URLSearchParams(htmx ? fields : { ...fields, _csrf: csrf }).toString(),
          });
          return { status: res.status, html: await res.text(), location: res.headers.get('location') };
        };
        const itemHtml = (html: string, id: string) => {
          const at = html.indexOf(`data-id="${id}"`);
          assert.ok(at >= 0, `${id} is on the page`);
          return html.slice(at, html.indexOf('</li>', html.indexOf('</article>', at)));
        };

        const path = `/hook-${uid()}`;
        stack.model.enqueue({ toolCalls: [{ id: 'call_page', name: 'http_request', arguments: JSON.stringify({ method: 'POST', url: `http://127.0.0.1:${web.port}${path}`, body: '<b>go</b>' }) }] });
        stack.model.enqueue({ text: 'Hooked from the page.' });
        await send({ id: bob.userId, name: bob.actor.name }, 'call the hook');
        const approval = await waitFor(async () => (await stack.db.approval.findFirst({ where: { toolCallId: 'call_page', status: 'pending' }, orderBy: { createdAt: 'desc' } })) ?? undefined, 'the approval');
        const id = `approval:${approval.id}`;

        // Ada's page: the request's text escaped and preformatted, Approve and Deny
        const adas = itemHtml((await page('ada')).html, id);
        assert.match(adas, /<pre class="request">[^<]*&lt;b&gt;go&lt;\/b&gt;/, 'the text is escaped');
        assert.match(adas, /data-decision="approve"/);
        assert.match(adas, /data-decision="deny"/);
        // Bob shaped it: no Approve, the note says why; an Approve anyway is refused in place (409)
        const bobs = itemHtml((await page('bob')).html, id);
        assert.doesNotMatch(bobs, /data-decision="approve"/);
        assert.match(bobs, /You shaped this proposal, so you may not approve it/);
        const bobTry = await post('bob', id, { decision: 'approve' });
        assert.equal(bobTry.status, 409, bobTry.html);
        assert.match(bobTry.html, /<p class="error" role="alert">Refused: Not applied/);
        assert.match(bobTry.html, /data-status="pending"/);
        // Mia is a member: Bob's request is not in her inbox, and a decision anyway is refused (409), as a plain form too
        assert.doesNotMatch((await page('mia')).html, new RegExp(`data-id="${id}"`));
        const miaTry = await post('mia', id, { decision: 'deny', reason: 'no' });
        assert.equal(miaTry.status, 409);
        assert.match(miaTry.html, /Refused: Deciding approvals needs the admin role/);
        const miaPlain = await post('mia', id, { decision: 'approve' }, false);
        assert.equal(miaPlain.status, 409);
        assert.match(miaPlain.html, /<p class="error" role="alert" id="inbox-refusal">Refused: Deciding approvals needs the admin role/);
        assert.equal((await stack.db.approval.findUniqueOrThrow({ where: { id: approval.id } })).status, 'pending', 'the refusals changed nothing');
        assert.equal(web.hits.filter((x) => x.endsWith(path)).length, 0);
        // Ada approves by a plain form: back to the list, the run goes on once
        const ok = await post('ada', id, { decision: 'approve', back: 'approval' }, false);
        assert.equal(ok.status, 303);
        assert.equal(ok.location, `/console/inbox?kind=approval#item-approval-${approval.id.replace(/[^A-Za-z0-9_-]/g, '-')}`);
        await sender.waitForPost((p) => p.chatId === bob.userId && p.text.includes('Hooked from the page.'), 30_000);
        assert.match(itemHtml((await page('bob', '/console/inbox?kind=approval')).html, id), new RegExp(`Decided:</strong> approved by ${ada.actor.name} at`));
        assert.deepEqual(web.hits.filter((x) => x.endsWith(path)), [`POST ${path}`]);

        // a pairing: the code and a role; a wrong code, a missing one and a role Ada may not give are refused in place
        const newcomer = { id: uid(), name: `Nell-${uid()}` };
        const code = /code is ([A-Z2-9]{8})/.exec((await send(newcomer, '/pair')).reply ?? '')?.[1];
        assert.ok(code);
        const pid = `pairing:${(await stack.db.pairing.findFirstOrThrow({ where: { userId: newcomer.id } })).id}`;
        const form = itemHtml((await page('ada', '/console/inbox?kind=pairing')).html, pid);
        assert.match(form, /name="code"/);
        assert.match(form, /<select name="role"/);
        assert.ok(!form.includes(code), 'the code is never shown');
        const wrong = await post('ada', pid, { decision: 'approve', role: 'member', code: 'ZZZZZZZZ' });
        assert.equal(wrong.status, 409);
        assert.match(wrong.html, /Refused: this code is not the code of pairing request/);
        assert.equal((await post('ada', pid, { decision: 'approve', role: 'member', code: '' })).status, 400);
        const tooHigh = await post('ada', pid, { decision: 'approve', role: 'admin', code });
        assert.equal(tooHigh.status, 409);
        assert.match(tooHigh.html, /cannot give the admin role/);
        const paired = await post('ada', pid, { decision: 'approve', role: 'member', code: code.toLowerCase() });
        assert.equal(paired.status, 200, paired.html);
        assert.match(paired.html, new RegExp(`data-status="approved"[\\s\\S]*Decided:</strong> approved as member by ${ada.actor.name}`));
        assert.equal((await findActor(stack.db, 'telegram', newcomer.id))?.role, 'member');

        // bad input: an unknown kind in the filter, a decision of no kind
        assert.equal((await page('ada', '/console/inbox?kind=widgets')).status, 400);
        assert.equal((await post('ada', 'widget:1', { decision: 'approve' })).status, 400);
        assert.equal((await post('ada', 'approval:apr-none', { decision: 'approve' })).status, 404);
      });
    });

    it('an MCP server that went down: listed for admins with its last error, nothing to decide; gone once removed', { timeout: 120_000 }, async () => {
      const dataDir = mkdtempSync(nodePath.join(tmpdir(), 'steward-decisions-mcp-'));
      const everything = await startEverythingHttp();
      const mcp = createMcpTools({ db: stack.db, dataDir, backoffMs: 60_000 });
      try {
        await withHarness(harness(), async (h) => {
          const inbox = createOperatorInbox({ db: stack.db, ingress: h.ingress, tasks: h.tasks });
          const service = createMcpService({ db: stack.db, manager: mcp.manager });
          const ada = await person(stack.db, 'admin', `Ada-${uid()}`);
          const mia = await person(stack.db, 'member', `Mia-${uid()}`);
          const name = `down-${randomBytes(4).toString('hex')}`;
          const id = `mcp:${name}`;
          await service.add({ name, transport: 'http', url: everything.url, readOnlyTools: ['echo'] }, OPERATOR);
          const spec = (await service.show(name)).spec;
          // up: a worker's connection lists its tools and records it ready; nothing waits
          assert.ok((await mcp.manager.tools(spec)).length > 0);
          await waitFor(async () => ((await service.show(name)).state === 'ready' ? true : undefined), 'the server recorded ready');
          assert.ok(!(await inbox.list(ada.actor)).some((i) => i.id === id), 'a ready server waits for nobody');

          // the server dies; the next call fails and the worker records it down with the reason
          await everything.stop();
          await assert.rejects(mcp.manager.call(spec, 'echo', { message: 'still there?' }));
          const down = await waitFor(async () => {
            const v = await service.show(name);
            return v.state === 'down' ? v : undefined;
          }, 'the server recorded down');
          assert.ok(down.lastError, 'the reason is recorded');

          const listed = (await inbox.list(ada.actor, { kind: 'mcp' })).find((i) => i.id === id);
          assert.ok(listed, 'the server that went down is in the inbox');
          assert.deepEqual([listed.kind, listed.status, listed.actions, listed.decided], ['mcp', 'down', [], null]);
          assert.ok(listed.text.includes(`The MCP server ${name} (http, registered through the API) was found down`), listed.text);
          assert.ok(listed.text.includes(down.lastError), 'with its last error');
          assert.match(listed.notes.join(' '), /Nothing to decide here/);
          assert.match(listed.notes.join(' '), new RegExp(`steward mcp remove ${name}`));
          assert.ok((await inbox.list(ada.actor)).some((i) => i.id === id), 'in the whole inbox too');
          assert.deepEqual(await inbox.item(id, ada.actor), listed);
          // members are not shown MCP servers (as /status shows them to admins only)
          assert.ok(!(await inbox.list(mia.actor)).some((i) => i.kind === 'mcp'));
          await refused(inbox.item(id, mia.actor), 404);
          // nothing to decide: refused, nothing changes
          await refused(inbox.decide(ada.actor, id, { decision: 'approve' }), 400, /takes no decision/);
          assert.equal((await service.show(name)).state, 'down');

          // removed: no longer listed
          await service.remove(name, OPERATOR);
          assert.ok(!(await inbox.list(ada.actor, { kind: 'mcp' })).some((i) => i.id === id));
          await refused(inbox.item(id, ada.actor), 404);
        });
      } finally {
        await mcp.manager.close();
        // stop() waits for an exit that has already happened once the test killed it
        if (everything.child.exitCode === null && everything.child.signalCode === null) await everything.stop();
        rmSync(dataDir, { recursive: true, force: true });
      }
    });

    it('a memory the agent proposed: its proposer may not approve it, a member may not decide; an admin approves it once from the inbox', { timeout: 120_000 }, async () => {
      const dataDir = mkdtempSync(nodePath.join(tmpdir(), 'steward-decisions-'));
      try {
        const knowledge = knowledgeIndexOpener(stack.database.url, dataDir);
        await withHarness({ ...harness(), workspaces: { dataDir, knowledge, memoryApproval: 'all' } }, async (h) => {
          const inbox = createOperatorInbox({ db: stack.db, ingress: h.ingress, tasks: h.tasks, knowledge: h.knowledge! });
          const ada = await person(stack.db, 'admin', `Ada-${uid()}`);
          const mia = await person(stack.db, 'member', `Mia-${uid()}`);
          const name = `decide-${uid()}`;
          await h.send(`/workspace create ${name}`);
          stack.model.enqueue({ toolCalls: [{ id: 'call_mem', name: 'remember', arguments: JSON.stringify({ text: 'The release train leaves on Thursdays.', kind: 'fact', scope: 'workspace' }) }] });
          stack.model.enqueue({ text: 'Noted.' });
          await h.send('Remember that the release train leaves on Thursdays');
          await h.waitForMessage((m) => m.role === 'assistant' && m.text === 'Noted.', { timeoutMs: 30_000 });
          const m = await stack.db.memory.findFirstOrThrow({ where: { workspace: name } });
          const id = `memory:${m.id}`;
          const item = (await inbox.list(ada.actor, { kind: 'memory' })).find((i) => i.id === id);
          assert.deepEqual([item?.status, item?.actions, item?.text], ['pending', ['approve', 'reject'], 'The release train leaves on Thursdays.']);
          // the one who shaped the proposing turn (the HTTP chat's user) may not approve it, even as an admin
          const proposer: Actor = { kind: 'person', id: m.proposedBy, name: m.proposedBy, role: 'admin' };
          assert.deepEqual((await inbox.item(id, proposer)).actions, ['reject']);
          await refused(inbox.decide(proposer, id, { decision: 'approve' }), 409, /may not approve it/);
          await refused(inbox.decide(mia.actor, id, { decision: 'approve' }), 409, /admin role/);
          await refused(inbox.decide(ada.actor, id, { decision: 'deny' }), 400, /approve or reject/);
          assert.equal((await stack.db.memory.findUniqueOrThrow({ where: { id: m.id } })).status, 'pending', 'the refusals changed nothing');
          const ok = await inbox.decide(ada.actor, id, { decision: 'approve' });
          assert.deepEqual([ok.item?.status, ok.item?.decided?.by, ok.item?.decided?.how], ['active', ada.actor.name, 'approved']);
          await refused(inbox.decide(ada.actor, id, { decision: 'reject' }), 409);
          assert.equal((await stack.db.receipt.findMany({ where: { key: `memory:${m.id}:decision` } })).length, 1, 'decided once');
        });
      } finally {
        await closeKnowledgeIndexes();
        rmSync(dataDir, { recursive: true, force: true });
      }
    });
  });
}

describe('operator inbox: a repository change waiting for promotion', { skip: await needs('bubblewrap') }, () => {
  const stack = useStack();
  before(() => preloadOpenApi());

  it('listed as a change; refused for the one who shaped it (nothing changes); promoted once by an admin who did not', { timeout: 180_000 }, async () => {
    const fx = createGitFixture(
      { 'greeting.txt': 'Hello\n', 'test.sh': '#!/bin/sh\ngrep -q "Hello, Steward" greeting.txt || exit 1\n', 'README.md': '# demo\n' },
      { executable: ['test.sh'] },
    );
    const name = `inbox-${randomBytes(3).toString('hex')}`;
    const token = `ghs_${randomBytes(18).toString('hex')}`;
    const gh = await startGitHubDouble({ repos: [{ owner: 'acme', repo: name, bareDir: fx.bare, defaultBranch: 'main' }], token });
    try {
      await withHarness(
        { env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, repoChanges: { githubApiUrl: gh.baseUrl, secret: (n) => (n === 'GH_TOKEN' ? token : undefined) } },
        async (h) => {
          const inbox = createOperatorInbox({ db: stack.db, ingress: h.ingress, tasks: h.tasks });
          const ada = await person(stack.db, 'admin', `Ada-${uid()}`);
          const op = { id: OPERATOR.id, name: OPERATOR.name };
          await h.changes.registerRepo({ name, cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }], policy: { promotion: 'draft-pr-after-approval' }, github: { owner: 'acme', repo: name, tokenRef: 'env:GH_TOKEN' } }, op);
          stack.model.setDefault(changeModel({ intake: () => GREETING_DRAFT, agent: [{ name: 'write_file', args: { path: 'greeting.txt', content: 'Hello, Steward\n' } }] }));
          const { id } = await h.changes.startChange({ repo: name, request: 'Make the greeting say Hello, Steward' }, op);
          const approval = await waitFor(() => stack.db.approval.findFirst({ where: { turnId: id, status: 'pending' } }).then((a) => a ?? undefined), 'the promotion approval', 90_000);
          const itemId = `change:${approval.id}`;
          const listed = (await inbox.list(ada.actor, { kind: 'change' })).find((i) => i.id === itemId);
          assert.ok(listed, 'the change waiting for promotion is in the inbox');
          assert.deepEqual(listed.actions, ['approve', 'deny']);
          await refused(inbox.decide(ada.actor, `approval:${approval.id}`, { decision: 'approve' }), 404);

          // the operator started it: shaped it, may not promote it
          assert.deepEqual((await inbox.item(itemId, OPERATOR)).actions, ['deny']);
          await refused(inbox.decide(OPERATOR, itemId, { decision: 'approve' }), 409, /may not approve their own change/);
          assert.equal((await stack.db.approval.findUniqueOrThrow({ where: { id: approval.id } })).status, 'pending');
          assert.equal(gh.pulls.length, 0, 'nothing promoted');

          const ok = await inbox.decide(ada.actor, itemId, { decision: 'approve' });
          assert.equal(ok.applied, true, ok.message);
          const done = await waitFor(async () => {
            const c = await h.changes.getChange(id);
            return c && c.status !== 'running' ? c : undefined;
          }, 'the change to end', 90_000);
          assert.equal(done.status, 'done', `${done.phase}: ${done.error}`);
          assert.equal(gh.pulls.length, 1, 'promoted once');
          await refused(inbox.decide(ada.actor, itemId, { decision: 'approve' }), 409);
          assert.equal(gh.pulls.length, 1);
          gh.assertNoViolations();
        },
      );
    } finally {
      await gh.close();
      fx.cleanup();
    }
  });
});
