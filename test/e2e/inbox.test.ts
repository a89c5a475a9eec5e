/**
 * A workspace's IMAP inbox end to end, against a real IMAP server (Dovecot, started by the test)
 * and the real stack (Temporal dev server, database, workers), on both databases: new mail
 * becomes Markdown documents under `inbox/` (headers, text, text attachments inline, others
 * listed), found by /search; an objective with an email trigger gets it once; the bound chat is
 * told; a copy under another UID and a malformed message are not stored (the latter with a
 * failed receipt), the rest go on; stopping the poller mid-poll and killing the server with mail
 * pending loses and doubles nothing; a wrong password is a clear error in doctor and one post to
 * the admin channel, and never shows the password; the settings through the API and the CLI,
 * bad input changing nothing.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createHttpApp, startHttpServer } from '../../adapters/http/app.js';
import { startWorkspaceInboxes, type InboxMessageOutcome, type WorkspaceInboxes, type WorkspaceInboxesOptions } from '../../adapters/workspace-inbox.js';
import { loadConfig } from '../../config/index.js';
import { bindChat, OPERATOR } from '../../domain/governance.js';
import { closeKnowledgeIndexes, knowledgeIndexOpener } from '../../domain/knowledge/open.js';
import { adminCommand } from '../../platform/admin-cli.js';
import { inboxCheck } from '../../platform/doctor.js';
import { testDatabases } from '../helpers/db.js';
import { startDovecot, type Dovecot } from '../helpers/dovecot.js';
import { recordingSender } from '../helpers/recording-sender.js';
import { needs } from '../helpers/requirements.js';
import { useStack, waitFor, withHarness, type Harness } from '../helpers/steward.js';

const OP = { id: OPERATOR.id, name: OPERATOR.name };
const tag = () => randomBytes(3).toString('hex');
const skip = await needs('dovecot');

function mail(o: { id: string; subject: string; to: string; from?: string; body: string; date?: string }): string {
  return [
    `From: ${o.from ?? 'Alice Example <alice@example.com>'}`,
    `To: ${o.to}`,
    `Subject: ${o.subject}`,
    `Date: ${o.date ?? 'Wed, 25 Nov 2026 10:00:00 +0000'}`,
    `Message-ID: <${o.id}>`,
    'Content-Type: text/plain; charset=utf-8',
    '',
    o.body,
    '',
  ].join('\r\n');
}

function multipartMail(o: { id: string; subject: string; to: string; cc: string }): string {
  const b = 'XYZ-boundary';
  return [
    'From: Bob <bob@example.com>',
    `To: ${o.to}`,
    `Cc: ${o.cc}`,
    `Subject: ${o.subject}`,
    'Date: Wed, 25 Nov 2026 11:00:00 +0000',
    `Message-ID: <${o.id}>`,
    'MIME-Version: 1.0',
    `Content-Type: multipart/mixed; boundary="${b}"`,
    '',
    `--${b}`,
    'Content-Type: text/html; charset=utf-8',
    '',
    '<html><body><p>The <b>generator</b> failover drill is on Thursday.</p></body></html>',
    `--${b}`,
    'Content-Type: text/markdown; name="checklist.md"',
    'Content-Disposition: attachment; filename="checklist.md"',
    '',
    '# Checklist',
    'Fuel the quartermaster tank before the drill.',
    `--${b}`,
    'Content-Type: image/png; name="floorplan.png"',
    'Content-Disposition: attachment; filename="floorplan.png"',
    'Content-Transfer-Encoding: base64',
    '',
    Buffer.from('89504e470d0a1a0a0000', 'hex').toString('base64'),
    `--${b}--`,
    '',
  ].join('\r\n');
}

for (const kind of testDatabases()) {
  describe(`workspace IMAP inbox (${kind.name})`, { skip }, () => {
    after(() => closeKnowledgeIndexes());
    const stack = useStack(kind);
    let dataDir: string;
    let dovecot: Dovecot;
    before(async () => {
      dataDir = mkdtempSync(path.join(tmpdir(), 'steward-inbox-data-'));
      dovecot = await startDovecot();
    });
    after(async () => {
      await dovecot?.close();
      rmSync(dataDir, { recursive: true, force: true });
    });
    const harness = <T>(fn: (h: Harness) => Promise<T>, senders?: Parameters<typeof withHarness>[0]['senders']) =>
      withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, workspaces: { dataDir, knowledge: knowledgeIndexOpener(stack.database.url, dataDir) }, ...(senders ? { senders } : {}) }, fn);
    const fast: Partial<WorkspaceInboxesOptions> = { pollMs: 300, idleMs: 2_000, retryMs: 200, maxRetryMs: 600, reconcileMs: 500, timeoutMs: 5_000 };
    const inboxFiles = (root: string) => {
      try {
        return readdirSync(path.join(root, 'inbox')).sort();
      } catch {
        return [];
      }
    };

    it('stores new mail as inbox documents, searchable; objectives and the bound chat get it; copies and malformed mail are not stored; a restart mid-poll or a killed server loses and doubles nothing', { timeout: 240_000 }, async () => {
      await harness(async (h) => {
        const ws = `mail-${kind.name}-${tag()}`;
        const created = await h.workspaces!.create(ws, undefined, OP);
        await h.workspaces!.bind({ platform: 'http', account: h.account, chatId: h.chatId }, ws, OP);
        stack.model.setDefault(() => ({ text: 'noted' }));
        const address = `triage-${tag()}@steward.test`;
        const objective = await h.objectives.create({ name: `triage-${tag()}`, prompt: 'Triage the mail', chatId: h.chatId, account: h.account, inboundEmail: address }, OP);

        // bad settings change nothing; the password is only ever a reference
        const variable = `STEWARD_INBOX_PASSWORD_${kind.name.toUpperCase()}`;
        delete process.env[variable];
        const base = { host: dovecot.host, port: dovecot.port, tls: 'none', user: dovecot.user, passwordRef: `env:${variable}` };
        await assert.rejects(h.workspaces!.inbox.set(ws, base, OP), /STEWARD_INBOX_PASSWORD_\w+ is not set/);
        process.env[variable] = dovecot.password;
        await assert.rejects(h.workspaces!.inbox.set(ws, { ...base, passwordRef: 'hunter2-literal' }, OP), (err: Error) => /env:STEWARD_INBOX_<NAME>/.test(err.message) && !err.message.includes('hunter2'));
        await assert.rejects(h.workspaces!.inbox.set(ws, { ...base, passwordRef: 'env:DATABASE_URL' }, OP), /env:STEWARD_INBOX_/);
        await assert.rejects(h.workspaces!.inbox.set(ws, { ...base, host: 'mail.example.com' }, OP), /tls none .* only to a loopback host/);
        await assert.rejects(h.workspaces!.inbox.set(ws, { ...base, port: 70000 }, OP), /port/);
        await assert.rejects(h.workspaces!.inbox.set(ws, { ...base, extra: 1 }, OP), /extra|Unrecognized/i);
        await assert.rejects(h.workspaces!.inbox.set('no-such-ws', base, OP), /no workspace/);
        assert.equal(await stack.db.workspaceInbox.count({ where: { workspace: ws } }), 0);
        const set = await h.workspaces!.inbox.set(ws, base, OP);
        assert.deepEqual([set.folder, set.lastUid, set.passwordRef], ['INBOX', 0, `env:${variable}`]);

        const t = tag();
        await dovecot.append(mail({ id: `one-${t}@example.com`, subject: `Pump room flooding ${t}`, to: `Ops <${address}>`, body: `The sump pump in the east pump room failed overnight (${t}).` }));
        await dovecot.append(multipartMail({ id: `two-${t}@example.com`, subject: `Drill ${t}`, to: 'team@example.com', cc: 'facilities@example.com' }));
        await dovecot.append(`this is not a mail message ${t}\r\nat all\r\n`);
        // a copy of the first message under another UID
        await dovecot.append(mail({ id: `one-${t}@example.com`, subject: `Pump room flooding ${t}`, to: `Ops <${address}>`, body: `The sump pump in the east pump room failed overnight (${t}).` }));

        const outcomes: InboxMessageOutcome[] = [];
        let inboxes: WorkspaceInboxes = await startWorkspaceInboxes({ db: stack.db, workspaces: h.workspaces!, objectives: h.objectives, ...fast, onMessage: (m) => outcomes.push(m) });
        try {
          await waitFor(() => outcomes.length >= 4, 'four messages handled', 60_000);
          assert.deepEqual(outcomes.map((m) => m.status), ['stored', 'stored', 'failed', 'duplicate']);
          const files = inboxFiles(created.root);
          assert.equal(files.length, 2, files.join(', '));
          const first = readFileSync(path.join(created.root, 'inbox', files.find((f) => f.includes('pump-room'))!), 'utf8');
          assert.match(first, /^---\nfrom: '"Alice Example" <alice@example\.com>'\n/);
          assert.match(first, new RegExp(`\\nmessage-id: <one-${t}@example\\.com>\\nuid: 1\\n---\\n`));
          assert.match(first, new RegExp(`# Pump room flooding ${t}\\n\\n- From: "Alice Example" <alice@example\\.com>\\n- To: "Ops" <${address.replace(/[.]/g, '\\.')}>`));
          assert.match(first, /The sump pump in the east pump room failed overnight/);
          const second = readFileSync(path.join(created.root, 'inbox', files.find((f) => f.includes('drill'))!), 'utf8');
          assert.match(second, /The generator failover drill is on Thursday\./, 'HTML as text');
          assert.match(second, /## Attachment: checklist\.md\n\n\(text\/markdown, \d+ bytes\)\n\n### Checklist\nFuel the quartermaster tank/, 'its headings under the attachment\'s');
          assert.match(second, /## Other attachments[\s\S]*- floorplan\.png: image\/png, 10 bytes, SHA-256 [0-9a-f]{64}/);
          assert.match(second, /- Cc: facilities@example\.com/);

          // indexed: /search finds both (the HTML's text and the attachment's)
          await waitFor(async () => /inbox\/2026-11-25-pump-room-flooding/.test((await h.send('/search sump pump east')).reply ?? ''), 'the first message found', 60_000);
          await waitFor(async () => /inbox\/2026-11-25-drill-\S+ > Drill \S+ > Attachment: checklist\.md > Checklist/.test((await h.send('/search quartermaster tank')).reply ?? ''), 'the attachment found', 60_000);

          // the objective with that address got one event (the copy is not a second one)
          await waitFor(async () => (await stack.db.objectiveEvent.count({ where: { objectiveId: objective.id } })) >= 1, 'the objective event', 30_000);
          const events = await stack.db.objectiveEvent.findMany({ where: { objectiveId: objective.id } });
          assert.deepEqual(events.map((e) => [e.eventId, e.source]), [[`email:one-${t}@example.com`, 'email']]);
          // the bound chat was told of each stored message, once
          await h.waitForMessage((m) => m.role === 'system' && new RegExp(`^New mail in inbox: Drill ${t} from "?Bob"? <bob@example\\.com> → inbox/2026-11-25-drill-`).test(m.text));
          const notices = async () => (await h.ingress.transcript(h.sessionId, { limit: 1000 })).filter((m) => m.text.startsWith('New mail in inbox:'));
          assert.equal((await notices()).length, 2);
          // the malformed one: a failed receipt saying why
          const failed = await stack.db.receipt.findMany({ where: { kind: 'inbox.message', actor: `inbox:${ws}` } });
          const data = failed.map((r) => JSON.parse(r.data) as { ok: boolean; reason?: string; uid: number });
          assert.deepEqual(data.filter((d) => !d.ok).map((d) => [d.uid, d.reason]), [[3, 'not a mail message: none of From, To, Date, Subject, Message-ID']]);
          assert.equal(data.filter((d) => d.ok).length, 2);
          assert.equal((await h.workspaces!.inbox.show(ws)).lastUid, 4);

          // stopped mid-poll: the first of three new messages handled, then the poller stops
          await inboxes.stop();
          for (let i = 1; i <= 3; i++) await dovecot.deliverFile(mail({ id: `r${i}-${t}@example.com`, subject: `Restart ${i} ${t}`, to: 'ops@example.com', body: `restart body ${i}` }));
          let stopping: Promise<void> | undefined;
          const before = outcomes.length;
          const partial: Promise<WorkspaceInboxes> = startWorkspaceInboxes({
            db: stack.db,
            workspaces: h.workspaces!,
            objectives: h.objectives,
            ...fast,
            onMessage: (m) => {
              outcomes.push(m);
              stopping ??= partial.then((p) => p.stop());
            },
          });
          await partial;
          await waitFor(() => stopping !== undefined, 'the first message after the restart', 30_000);
          await stopping;
          assert.equal(outcomes.length - before, 1, 'the poller stopped after the first of three');
          assert.equal(inboxFiles(created.root).length, 3);
          inboxes = await startWorkspaceInboxes({ db: stack.db, workspaces: h.workspaces!, objectives: h.objectives, ...fast, onMessage: (m) => outcomes.push(m) });
          await waitFor(() => inboxFiles(created.root).length === 5, 'every message after the restart', 60_000);

          // the server killed with mail pending: the error is kept, then cleared, and nothing doubles
          await dovecot.kill();
          for (let i = 1; i <= 2; i++) await dovecot.deliverFile(mail({ id: `k${i}-${t}@example.com`, subject: `Killed ${i} ${t}`, to: 'ops@example.com', body: `killed body ${i}` }));
          await waitFor(async () => (await h.workspaces!.inbox.show(ws)).lastError?.includes('connection refused') ?? false, 'the error recorded', 30_000);
          await dovecot.start();
          await waitFor(() => inboxFiles(created.root).length === 7, 'the pending mail after the server came back', 60_000);
          await waitFor(async () => (await h.workspaces!.inbox.show(ws)).lastError === null, 'the error cleared', 30_000);
          await sleep(1000);
          assert.equal(inboxFiles(created.root).length, 7);
          assert.deepEqual(await stack.db.inboxMessage.groupBy({ by: ['status'], where: { workspace: ws }, _count: true, orderBy: { status: 'asc' } }).then((g) => g.map((x) => [x.status, x._count])), [['failed', 1], ['stored', 7]]);
          await waitFor(async () => (await notices()).length === 7, 'a notice per stored message', 30_000);
          assert.equal((await notices()).length, 7);
          const view = await h.workspaces!.inbox.show(ws);
          assert.deepEqual([view.lastUid, view.messages], [9, { stored: 7, failed: 1 }]);
        } finally {
          await inboxes.stop();
        }
      });
    });

    it('a wrong password: a clear error in doctor and one post to the admin channel, never the password; it clears when the login works', { timeout: 120_000 }, async () => {
      const sender = recordingSender();
      await harness(async (h) => {
        const ws = `bad-${kind.name}-${tag()}`;
        await h.workspaces!.create(ws, undefined, OP);
        const room = `admin-room-${tag()}`;
        await bindChat(stack.db, { platform: 'telegram', account: 'default', chatId: room, adminChannel: true, createdBy: 'test' });
        const variable = `STEWARD_INBOX_WRONG_${kind.name.toUpperCase()}`;
        const wrong = `wrong-${tag()}-secret`;
        process.env[variable] = wrong;
        await h.workspaces!.inbox.set(ws, { host: dovecot.host, port: dovecot.port, tls: 'none', user: dovecot.user, passwordRef: `env:${variable}` }, OP);
        const config = loadConfig({ DATABASE_URL: stack.database.url, STEWARD_DATA_DIR: dataDir }, tmpdir());
        const inboxes = await startWorkspaceInboxes({ db: stack.db, workspaces: h.workspaces!, objectives: h.objectives, senders: { telegram: sender }, ...fast });
        try {
          await waitFor(async () => (await h.workspaces!.inbox.show(ws)).lastError ?? undefined, 'the error recorded', 30_000);
          const post = await sender.waitForPost((p) => p.chatId === room && p.text.includes(`IMAP inbox of workspace ${ws}`));
          assert.match(post.text, new RegExp(`refused the login of ${dovecot.user}: wrong user or password`));
          const report = await inboxCheck(config, 5_000);
          assert.equal(report.status, 'fail');
          assert.match(report.message, new RegExp(`The inbox of workspace ${ws} \\(${dovecot.user} at 127\\.0\\.0\\.1:${dovecot.port}\\) is failing since .*refused the login`));
          assert.ok(report.fix);
          // it keeps retrying, and posts once
          await sleep(2_000);
          assert.equal(sender.posts.filter((p) => p.chatId === room).length, 1);
          const receipts = await stack.db.receipt.findMany({ where: { kind: { in: ['inbox.change', 'inbox.message'] } } });
          const plain = (x: unknown) => JSON.stringify(x, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v));
          const everything = [plain(receipts), plain(sender.posts), plain(await stack.db.workspaceInbox.findMany())].join('\n');
          assert.ok(!everything.includes(wrong) && !everything.includes(dovecot.password), 'the password is nowhere');

          // corrected (the variable now holds the right password): the error clears
          process.env[variable] = dovecot.password;
          await waitFor(async () => (await h.workspaces!.inbox.show(ws)).lastError === null, 'the error cleared', 30_000);
          const ok = await inboxCheck(config, 5_000);
          assert.ok(ok.status === 'ok' || ok.message.includes(ws) === false, ok.message);
        } finally {
          await inboxes.stop();
        }
      }, { telegram: sender });
    });

    it('set, shown and cleared through the HTTP API and the CLI; bad input refused with nothing changed', { timeout: 120_000 }, async () => {
      await harness(async (h) => {
        const TOKEN = 'inbox-test-token-0123456789abcdef';
        const server = await startHttpServer(createHttpApp({ ingress: h.ingress, apiToken: TOKEN, health: async () => ({ ok: true, checks: {} }), workspaces: h.workspaces!, account: h.account }), { host: '127.0.0.1', port: 0 });
        const api = async (method: string, route: string, body?: unknown) => {
          const r = await fetch(`${server.url}${route}`, { method, headers: { authorization: `Bearer ${TOKEN}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) }, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
          return { status: r.status, body: (await r.json()) as Record<string, unknown> };
        };
        const out: string[] = [];
        const err: string[] = [];
        const io = { config: () => loadConfig({}, tmpdir()), out: (x: string) => void out.push(x), err: (x: string) => void err.push(x), api: { url: server.url, token: TOKEN } };
        process.env.STEWARD_INBOX_API_TEST = 'some-password';
        try {
          const ws = `api-${kind.name}-${tag()}`;
          await h.workspaces!.create(ws, undefined, OP);
          const at = `/api/v1/workspaces/${ws}/inbox`;
          assert.equal((await api('GET', at)).status, 404);
          assert.equal((await api('PUT', at, { host: 'imap.example.com', user: 'ops' })).status, 400);
          assert.equal((await api('PUT', at, { host: 'imap.example.com', user: 'ops', passwordRef: 'env:STEWARD_INBOX_API_TEST', tls: 'ssl' })).status, 400);
          assert.equal((await api('PUT', '/api/v1/workspaces/nope/inbox', { host: 'imap.example.com', user: 'ops', passwordRef: 'env:STEWARD_INBOX_API_TEST' })).status, 404);
          assert.equal(await stack.db.workspaceInbox.count({ where: { workspace: ws } }), 0);
          const put = await api('PUT', at, { host: 'imap.example.com', user: 'ops', passwordRef: 'env:STEWARD_INBOX_API_TEST' });
          assert.equal(put.status, 200, JSON.stringify(put.body));
          assert.deepEqual([put.body.port, put.body.tls, put.body.folder], [993, 'implicit', 'INBOX']);
          assert.ok(!JSON.stringify(put.body).includes('some-password'));
          assert.equal((await api('GET', at)).body.host, 'imap.example.com');

          assert.equal(await adminCommand('workspaces', ['inbox', ws, 'set', '--host', 'mail.example.org', '--user', 'team', '--password-ref', 'env:STEWARD_INBOX_API_TEST', '--tls', 'starttls', '--folder', 'Support'], io), 0, err.join(''));
          assert.match(out.join(''), /Set\. Inbox of workspace .*: team at mail\.example\.org:143 \(tls starttls\), folder Support, password from env:STEWARD_INBOX_API_TEST/);
          assert.equal(await adminCommand('workspaces', ['inbox', ws, 'show'], io), 0);
          assert.match(out.join(''), /Messages: 0 stored, 0 failed; last UID 0/);
          assert.equal(await adminCommand('workspaces', ['inbox', ws, 'set', '--host', 'mail.example.org', '--user', 'team', '--password-ref', 'plain-secret'], io), 2);
          assert.match(err.join(''), /env:STEWARD_INBOX_<NAME>/);
          assert.doesNotMatch(err.join(''), /plain-secret/);
          assert.equal(await adminCommand('workspaces', ['inbox', ws, 'set', '--host', 'x'], io), 2, 'set needs --user and --password-ref');
          assert.equal((await api('GET', at)).body.host, 'mail.example.org', 'unchanged by the refused ones');
          assert.equal(await adminCommand('workspaces', ['inbox', ws, 'clear'], io), 0);
          assert.equal((await api('DELETE', at)).status, 404);
          assert.equal(await stack.db.workspaceInbox.count({ where: { workspace: ws } }), 0);
          assert.equal(await stack.db.receipt.count({ where: { kind: 'inbox.change' } }) >= 3, true);
        } finally {
          delete process.env.STEWARD_INBOX_API_TEST;
          await server.close();
        }
      });
    });
  });
}
