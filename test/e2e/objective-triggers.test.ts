/**
 * Objective event triggers through the real stack (Temporal dev server, database, worker,
 * scripted model): a file changed in a watched workspace directory and an email received by
 * the inbound SMTP listener each run the objective once per event id; `.git/`, symlinks out of
 * the directory, paused objectives, unknown addresses and senders outside the allow list take
 * nothing; bad input changes nothing. Plus the email parser and the settings, without the stack.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, symlink, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createTransport } from 'nodemailer';
import { getBlobText } from '../../domain/blobs.js';
import { OPERATOR } from '../../domain/governance.js';
import { emailEventId, parseEmail, senderAllowed, startInboundEmail, MAX_EMAIL_TEXT } from '../../adapters/inbound-email.js';
import { startObjectiveWatchers, type FileEventPayload, type ObjectiveWatchers } from '../../adapters/objectives/watchers.js';
import type { ObjectiveEventResult } from '../../services/objectives.js';
import { createHttpApp, startHttpServer } from '../../adapters/http/app.js';
import { ConfigError, loadConfig } from '../../config/index.js';
import { adminCommand } from '../../platform/admin-cli.js';
import { lastUserText } from '../helpers/model-server.js';
import { useStack, waitFor, withHarness, type Harness, type HarnessOptions } from '../helpers/steward.js';
import { objectiveRuns } from '../helpers/objective-runs.js';

const OP = { id: OPERATOR.id, name: OPERATOR.name };
const tag = () => randomBytes(3).toString('hex');
type Batch = { objectiveId: string; eventId: string; files: number; result: ObjectiveEventResult };

describe('objective event triggers: workspace files and inbound email', () => {
  const stack = useStack();
  const opts = (): HarnessOptions => ({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } } });
  const { runsOf, settled } = objectiveRuns(() => stack.db);
  const eventsOf = (objectiveId: string) => stack.db.objectiveEvent.findMany({ where: { objectiveId }, orderBy: { id: 'asc' } });
  const payloadOf = async (objectiveId: string, eventId: string) => {
    const e = await stack.db.objectiveEvent.findUniqueOrThrow({ where: { objectiveId_eventId: { objectiveId, eventId } } });
    return JSON.parse(await getBlobText(stack.db, e.payloadHash)) as FileEventPayload & Record<string, unknown>;
  };
  /** Everything a test opened, closed even when it fails. */
  const toClose: Array<() => Promise<unknown>> = [];
  const dirs: string[] = [];
  const tempDir = async (prefix: string) => {
    const d = await mkdtemp(path.join(tmpdir(), prefix));
    dirs.push(d);
    return d;
  };
  const closeAll = async () => {
    for (const fn of toClose.splice(0).reverse()) await fn().catch(() => undefined);
  };
  /** A harness whose watchers, listeners and servers are closed when the test ends. */
  const harness = (fn: (h: Harness) => Promise<void>) =>
    withHarness(opts(), async (h) => {
      try {
        await fn(h);
      } finally {
        await closeAll();
      }
    });
  after(async () => {
    await closeAll();
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });
  const watchersFor = async (extra: Partial<Parameters<typeof startObjectiveWatchers>[0]> & { objectives: Parameters<typeof startObjectiveWatchers>[0]['objectives'] }) => {
    const batches: Batch[] = [];
    const w: ObjectiveWatchers = await startObjectiveWatchers({ db: stack.db, debounceMs: 300, reconcileMs: 60_000, onBatch: (b) => batches.push(b), ...extra });
    toClose.push(() => w.stop());
    /** The next batch of an objective after the first `from`. */
    const next = (objectiveId: string, from: number) => waitFor(() => batches.slice(from).find((b) => b.objectiveId === objectiveId), `a file event of ${objectiveId}`);
    return { w, batches, next };
  };

  it('a file changed in a watched directory runs the objective once per change; .git/, links out and a paused objective take none', async () => {
    await harness(async (h) => {
      const dir = await tempDir('steward-watch-');
      const outside = await tempDir('steward-outside-');
      const name = `on-file-${tag()}`;
      const seen: string[] = [];
      stack.model.setDefault((req) => {
        const text = lastUserText(req.body);
        if (text.includes(name)) seen.push(text);
        return { text: `filed for ${name}` };
      });
      const { w, batches, next } = await watchersFor({ objectives: h.objectives });
      const o = await h.objectives.create({ name, prompt: `Look at what changed (${name})`, chatId: h.chatId, account: h.account, watch: { path: `${dir}/` } }, OP);
      assert.deepEqual(o.triggers, { webhook: false, watch: dir, email: null });
      assert.deepEqual(o.nextRuns, [], 'no schedule: it runs on its triggers');
      await w.refresh();
      assert.ok(w.watching().some((x) => x.objectiveId === o.id && x.path === dir && x.mode === 'watch'));

      // a new file: one run, its name and text reach the model as data, the reply the chat
      const marker = `marker-${tag()}`;
      const T1 = new Date('2026-01-02T03:04:05.000Z');
      const notes = path.join(dir, 'notes.txt');
      await writeFile(notes, `release checklist ${marker}\n`);
      await utimes(notes, T1, T1);
      const b1 = await next(o.id, 0);
      assert.equal(b1.result.status, 202);
      assert.match(b1.eventId, /^file:[0-9a-f]{40}$/);
      await settled(o.id, 1);
      await h.waitForMessage((m) => m.role === 'assistant' && m.text === `filed for ${name}`);
      const prompt = seen.find((t) => t.includes('<event source="file"'));
      assert.ok(prompt, 'the event reached the model');
      assert.ok(prompt.includes('notes.txt') && prompt.includes(marker) && prompt.includes(`id="${b1.eventId}"`), prompt);
      const p1 = await payloadOf(o.id, b1.eventId);
      assert.deepEqual(p1.files.map((f) => [f.path, f.change, f.kind, f.size, f.mtime]), [['notes.txt', 'changed', 'file', Buffer.byteLength(`release checklist ${marker}\n`), T1.toISOString()]]);

      // the same content with the same mtime again: reported, and a duplicate; a real change is new
      let n = batches.length;
      await writeFile(notes, `release checklist ${marker}\n`);
      await utimes(notes, T1, T1);
      const b2 = await next(o.id, n);
      assert.equal(b2.eventId, b1.eventId);
      assert.deepEqual([b2.result.status, 'duplicate' in b2.result && b2.result.duplicate], [200, true]);
      n = batches.length;
      await writeFile(notes, `release checklist ${marker} (done)\n`);
      const b3 = await next(o.id, n);
      assert.equal(b3.result.status, 202);
      assert.notEqual(b3.eventId, b1.eventId);
      await settled(o.id, 2);

      // .git/ is never watched nor reported
      n = batches.length;
      await mkdir(path.join(dir, '.git', 'refs'), { recursive: true });
      await writeFile(path.join(dir, '.git', 'HEAD'), 'ref: refs/heads/main\n');
      await writeFile(path.join(dir, '.git', 'refs', 'main'), 'abc\n');
      await sleep(1200);
      assert.equal(batches.length, n, '.git/ changes are ignored');

      // a new directory's files are reported and then watched
      n = batches.length;
      await mkdir(path.join(dir, 'docs', 'deep'), { recursive: true });
      await writeFile(path.join(dir, 'docs', 'deep', 'plan.md'), '# plan\n');
      const b4 = await next(o.id, n);
      assert.deepEqual((await payloadOf(o.id, b4.eventId)).files.map((f) => f.path), ['docs/deep/plan.md']);
      n = batches.length;
      await writeFile(path.join(dir, 'docs', 'deep', 'plan.md'), '# plan, revised\n');
      const b5 = await next(o.id, n);
      assert.equal(b5.result.status, 202);

      // symlinks are reported as links: never followed, their targets never read or watched
      await writeFile(path.join(outside, 'secret.txt'), 'TOP SECRET\n');
      n = batches.length;
      await symlink(outside, path.join(dir, 'out'));
      await symlink(path.join(outside, 'secret.txt'), path.join(dir, 'secret-link'));
      const b6 = await next(o.id, n);
      const p6 = await payloadOf(o.id, b6.eventId);
      assert.deepEqual(p6.files.map((f) => [f.path, f.kind, f.text]), [['out', 'symlink', undefined], ['secret-link', 'symlink', undefined]]);
      assert.ok(!JSON.stringify(p6).includes('TOP SECRET'));
      n = batches.length;
      await writeFile(path.join(outside, 'secret.txt'), 'TOP SECRET, changed\n');
      await writeFile(path.join(outside, 'new.txt'), 'x\n');
      await sleep(1200);
      assert.equal(batches.length, n, 'nothing outside the directory is watched');
      await settled(o.id, 5);

      // a paused objective takes no events (not watched; refused if one slips through)
      const events = (await eventsOf(o.id)).length;
      await h.objectives.pause(o.id, OP);
      await w.refresh();
      assert.ok(!w.watching().some((x) => x.objectiveId === o.id), 'a paused objective is not watched');
      await writeFile(path.join(dir, 'while-paused.txt'), 'ignored\n');
      await sleep(1200);
      assert.equal((await h.objectives.receiveInternalEvent(o.id, { source: 'file', eventId: 'file:slipped', payload: {} })).status, 409);
      assert.equal((await eventsOf(o.id)).length, events, 'no events while paused');
      assert.equal((await runsOf(o.id)).length, 5);
      // an email event for an objective without that trigger is refused
      assert.equal((await h.objectives.receiveInternalEvent(o.id, { source: 'email', eventId: 'email:x@y', payload: {} })).status, 404);

      await h.objectives.remove(o.id, OP);
      await w.refresh();
      assert.deepEqual(w.watching().filter((x) => x.objectiveId === o.id), []);
      const runs = await runsOf(o.id);
      assert.ok(runs.every((r) => r.status === 'done'), JSON.stringify(runs.map((r) => r.status)));
      assert.equal(new Set(runs.map((r) => r.id)).size, runs.length);
    });
  });

  it('polling (where fs.watch is unavailable) finds the same changes, with the same ids', async () => {
    await harness(async (h) => {
      const dir = await tempDir('steward-poll-');
      const name = `on-poll-${tag()}`;
      stack.model.setDefault(() => ({ text: 'polled' }));
      const polled = await watchersFor({ objectives: h.objectives, mode: 'poll', pollMs: 200 });
      const o = await h.objectives.create({ name, prompt: `Polled (${name})`, chatId: h.chatId, account: h.account, watch: { path: dir } }, OP);
      await polled.w.refresh();
      assert.deepEqual(polled.w.watching().find((x) => x.objectiveId === o.id)?.mode, 'poll');
      await writeFile(path.join(dir, 'a.txt'), 'one\n');
      await mkdir(path.join(dir, '.git'));
      await writeFile(path.join(dir, '.git', 'index'), 'x');
      const b1 = await polled.next(o.id, 0);
      assert.equal(b1.result.status, 202);
      assert.deepEqual((await payloadOf(o.id, b1.eventId)).files.map((f) => f.path), ['a.txt']);
      await settled(o.id, 1);
      // a second watcher seeing the same change (another Steward on the same database): one event
      const T = new Date('2026-02-03T04:05:06.000Z');
      const watched = await watchersFor({ objectives: h.objectives });
      await watched.w.refresh();
      const from = [polled.batches.length, watched.batches.length] as const;
      await writeFile(path.join(dir, 'a.txt'), 'two\n');
      await utimes(path.join(dir, 'a.txt'), T, T);
      const [p, q] = await Promise.all([polled.next(o.id, from[0]), watched.next(o.id, from[1])]);
      assert.equal(p.eventId, q.eventId);
      assert.deepEqual([p.result.status, q.result.status].sort(), [200, 202]);
      await settled(o.id, 2);
      assert.equal((await runsOf(o.id)).length, 2);

      // the directory removed and made again: both watch it anew on their next reconcile
      await rm(dir, { recursive: true });
      await mkdir(dir);
      await Promise.all([polled.w.refresh(), watched.w.refresh()]);
      const from2 = [polled.batches.length, watched.batches.length] as const;
      await writeFile(path.join(dir, 'b.txt'), 'three\n');
      const withB = (batches: Batch[], start: number) =>
        waitFor(async () => {
          for (const b of batches.slice(start)) if (b.objectiveId === o.id && (await payloadOf(o.id, b.eventId)).files.some((f) => f.path === 'b.txt')) return b;
          return undefined;
        }, 'an event with b.txt');
      const [p2, q2] = await Promise.all([withB(polled.batches, from2[0]), withB(watched.batches, from2[1])]);
      assert.equal(p2.eventId, q2.eventId);
      await waitFor(async () => ((await runsOf(o.id)).some((r) => r.id.endsWith(p2.eventId)) ? true : undefined), 'the run of b.txt');
      await h.objectives.remove(o.id, OP);
    });
  });

  it('an inbound email runs the objective once per Message-ID; unknown addresses, senders outside the allow list and paused objectives are refused', async () => {
    await harness(async (h) => {
      const name = `on-mail-${tag()}`;
      const seen: string[] = [];
      stack.model.setDefault((req) => {
        const text = lastUserText(req.body);
        if (text.includes(name)) seen.push(text);
        return { text: `mail handled for ${name}` };
      });
      const mails: Array<{ objectiveId: string; eventId: string; result: ObjectiveEventResult }> = [];
      const smtp = await startInboundEmail({ db: stack.db, objectives: h.objectives, port: 0, allowFrom: ['example.com', 'boss@partner.test'], onMessage: (m) => mails.push(m) });
      toClose.push(() => smtp.close());
      assert.equal(smtp.host, '127.0.0.1');
      const transport = createTransport({ host: '127.0.0.1', port: smtp.port, secure: false, ignoreTLS: true });
      toClose.push(async () => transport.close());
      const address = `ops-${tag()}@steward.test`;
      const o = await h.objectives.create({ name, prompt: `Handle the mail (${name})`, chatId: h.chatId, account: h.account, inboundEmail: address.toUpperCase() }, OP);
      assert.deepEqual(o.triggers, { webhook: false, watch: null, email: address }, 'stored in lower case');

      const marker = `invoice-${tag()}`;
      const messageId = `<inv-${tag()}@example.com>`;
      const mail = { from: 'Alice Example <alice@example.com>', to: address, subject: 'Invoice 42 ✓ paid', text: `Please file invoice 42 (${marker}).`, html: `<p>HTML only ${marker}</p>`, messageId };
      const sent = await transport.sendMail(mail);
      assert.deepEqual(sent.accepted, [address]);
      assert.match(sent.response, /^250 OK: taken by 1 objective$/);
      await waitFor(() => mails.find((m) => m.objectiveId === o.id), 'the email event');
      await settled(o.id, 1);
      await h.waitForMessage((m) => m.role === 'assistant' && m.text === `mail handled for ${name}`);
      const eventId = `email:${messageId.slice(1, -1)}`;
      const prompt = seen.find((t) => t.includes('<event source="email"'));
      assert.ok(prompt, 'the email reached the model');
      assert.ok(prompt.includes(`id="${eventId}"`) && prompt.includes('Invoice 42 ✓ paid') && prompt.includes(`Please file invoice 42 (${marker}).`), prompt);
      assert.ok(!prompt.includes('HTML only'), 'the text/plain part, not the HTML one');
      const payload = await payloadOf(o.id, eventId);
      assert.deepEqual([payload.from, payload.to, payload.subject], ['Alice Example <alice@example.com>', address, 'Invoice 42 ✓ paid']);
      assert.ok(typeof payload.date === 'string' && !Number.isNaN(Date.parse(payload.date)));

      // redelivered (the same Message-ID): accepted and a duplicate, never run again
      const again = await transport.sendMail(mail);
      assert.deepEqual(again.accepted, [address]);
      const dup = await waitFor(() => mails.filter((m) => m.objectiveId === o.id)[1], 'the redelivery');
      assert.deepEqual([dup.eventId, dup.result.status], [eventId, 200]);
      assert.equal((await eventsOf(o.id)).length, 1);

      // an unknown address is refused at RCPT; with a known one beside it, only the known one takes it
      const unknown = `nobody-${tag()}@steward.test`;
      await assert.rejects(transport.sendMail({ ...mail, to: unknown, messageId: `<u-${tag()}@example.com>` }), (err: { responseCode?: number; command?: string; message: string }) => {
        assert.equal(err.responseCode, 550, err.message);
        assert.match(err.command ?? '', /RCPT/);
        return true;
      });
      const both = await transport.sendMail({ ...mail, to: [address, unknown], messageId: `<both-${tag()}@example.com>` });
      assert.deepEqual([both.accepted, both.rejected], [[address], [unknown]]);
      await settled(o.id, 2);

      // senders outside the allow list: the envelope sender at MAIL, the From header after DATA
      await assert.rejects(transport.sendMail({ ...mail, from: 'mallory@evil.test', messageId: `<m-${tag()}@evil.test>` }), (err: { responseCode?: number; command?: string }) => {
        assert.equal(err.responseCode, 550);
        assert.match(err.command ?? '', /MAIL/);
        return true;
      });
      await assert.rejects(transport.sendMail({ ...mail, from: 'mallory@evil.test', envelope: { from: 'boss@partner.test', to: address }, messageId: `<m2-${tag()}@evil.test>` }), (err: { responseCode?: number }) => {
        assert.equal(err.responseCode, 550);
        return true;
      });
      // an allowed single address on another domain
      await transport.sendMail({ ...mail, from: 'boss@partner.test', messageId: `<boss-${tag()}@partner.test>` });
      await settled(o.id, 3);

      // larger than the limit: refused (552), nothing recorded
      const small = await startInboundEmail({ db: stack.db, objectives: h.objectives, port: 0, maxBytes: 2048 });
      toClose.push(() => small.close());
      const smallTransport = createTransport({ host: '127.0.0.1', port: small.port, secure: false, ignoreTLS: true });
      toClose.push(async () => smallTransport.close());
      await assert.rejects(smallTransport.sendMail({ ...mail, text: 'x'.repeat(5000), messageId: `<big-${tag()}@example.com>` }), (err: { responseCode?: number }) => {
        assert.equal(err.responseCode, 552);
        return true;
      });
      assert.equal((await eventsOf(o.id)).length, 3);

      // a paused objective takes no mail (450: the sender may retry after a resume)
      await h.objectives.pause(o.id, OP);
      await assert.rejects(transport.sendMail({ ...mail, messageId: `<p-${tag()}@example.com>` }), (err: { responseCode?: number }) => {
        assert.equal(err.responseCode, 450);
        return true;
      });
      assert.equal((await eventsOf(o.id)).length, 3);
      assert.equal((await runsOf(o.id)).length, 3);
      await h.objectives.remove(o.id, OP);
      // a deleted objective's address is unknown
      await assert.rejects(transport.sendMail({ ...mail, messageId: `<gone-${tag()}@example.com>` }), (err: { responseCode?: number }) => err.responseCode === 550);
    });
  });

  it('bad input changes nothing; the CLI adds watch and email triggers', async () => {
    await harness(async (h) => {
      const tmp = await tempDir('steward-bad-');
      const file = path.join(tmp, 'file.txt');
      await writeFile(file, 'x');
      await symlink('/proc', path.join(tmp, 'proc-link'));
      const n0 = await stack.db.objective.count();
      const e0 = await stack.db.objectiveEvent.count();
      const base = { name: `bad-${tag()}`, prompt: 'x', chatId: h.chatId, account: h.account };
      for (const bad of [
        base, // neither a schedule nor a trigger
        { ...base, watch: { path: 'relative/dir' } },
        { ...base, watch: { path: '/' } },
        { ...base, watch: { path: '/tmp/..' } },
        { ...base, watch: { path: '/proc' } },
        { ...base, watch: { path: '/proc/self' } },
        { ...base, watch: { path: '/sys/kernel' } },
        { ...base, watch: { path: '/dev' } },
        { ...base, watch: { path: path.join(tmp, 'missing') } },
        { ...base, watch: { path: file } },
        { ...base, watch: { path: path.join(tmp, 'proc-link') } },
        { ...base, watch: {} },
        { ...base, inboundEmail: 'not-an-address' },
        { ...base, inboundEmail: 'two@@steward.test' },
        { ...base, inboundEmail: 'a b@steward.test' },
      ]) {
        await assert.rejects(h.objectives.create(bad, OP), /invalid objective/, JSON.stringify(bad));
      }
      const address = `taken-${tag()}@steward.test`;
      const first = await h.objectives.create({ ...base, inboundEmail: address }, OP);
      await assert.rejects(h.objectives.create({ ...base, name: `bad-${tag()}`, inboundEmail: address.toUpperCase() }, OP), (err: { status?: number; message: string }) => {
        assert.equal(err.status, 409, err.message);
        return true;
      });
      const other = await h.objectives.create({ ...base, name: `bad-${tag()}`, schedule: { every: '1h' }, paused: true }, OP);
      await assert.rejects(h.objectives.update(other.id, { inboundEmail: address }, OP), (err: { status?: number }) => err.status === 409);
      await assert.rejects(h.objectives.update(other.id, { watch: { path: '/proc' } }, OP), /invalid/);
      await assert.rejects(h.objectives.update(first.id, { inboundEmail: null }, OP), /no schedule and no trigger/);
      assert.deepEqual((await h.objectives.show(first.id)).triggers, { webhook: false, watch: null, email: address }, 'unchanged');
      assert.deepEqual((await h.objectives.show(other.id)).triggers, { webhook: false, watch: null, email: null }, 'unchanged');
      // a valid update moves the trigger
      const moved = await h.objectives.update(first.id, { watch: { path: tmp }, inboundEmail: null }, OP);
      assert.deepEqual(moved.triggers, { webhook: false, watch: tmp, email: null });
      await h.objectives.remove(first.id, OP);
      await h.objectives.remove(other.id, OP);
      assert.equal(await stack.db.objective.count(), n0);
      assert.equal(await stack.db.objectiveEvent.count(), e0);

      // the CLI, through the API
      const TOKEN = 'objective-triggers-token-0123456789';
      const server = await startHttpServer(createHttpApp({ ingress: h.ingress, apiToken: TOKEN, health: async () => ({ ok: true, checks: {} }), objectives: h.objectives }), { host: '127.0.0.1', port: 0 });
      toClose.push(() => server.close());
      const out: string[] = [];
      const err: string[] = [];
      const io = { config: () => loadConfig({}, tmpdir()), out: (x: string) => void out.push(x), err: (x: string) => void err.push(x), api: { url: server.url, token: TOKEN } };
      const cliName = `cli-trig-${tag()}`;
      const mailbox = `cli-${tag()}@steward.test`;
      assert.equal(await adminCommand('objectives', ['add', cliName, '--chat', h.chatId, '--account', h.account, '--watch', tmp, '--email', mailbox, '--prompt', 'Sort the inbox'], io), 0, err.join(''));
      assert.equal(await adminCommand('objectives', ['add', `${cliName}-x`, '--chat', h.chatId, '--watch', 'relative', '--prompt', 'x'], io), 2);
      assert.match(err.join(''), /expected an absolute directory path/);
      assert.equal(await adminCommand('objectives', ['add', `${cliName}-y`, '--chat', h.chatId, '--email', mailbox, '--prompt', 'x'], io), 1, 'the address is taken (409)');
      assert.equal(await adminCommand('objectives', ['list'], io), 0);
      assert.match(out.join(''), new RegExp(`${cliName}.*watch ${tmp.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}, email ${mailbox}`));
      assert.equal(await adminCommand('objectives', ['delete', cliName], io), 0);
      assert.equal(await stack.db.objective.count(), n0);
    });
  });
});

describe('inbound email parsing (no stack)', () => {
  const crlf = (lines: string[]) => Buffer.from(lines.join('\r\n'), 'latin1');

  it('a plain message: folded and encoded headers, the text, the Message-ID as the event id', () => {
    const raw = crlf([
      'From: =?UTF-8?B?SsO8cmdlbg==?= <Juergen@Example.com>',
      'To: ops@steward.test',
      'Subject: =?UTF-8?Q?Caf=C3=A9_order?=',
      '  =?ISO-8859-1?Q?_=E0_la_carte?=',
      'Date: Tue, 03 Mar 2026 10:00:00 +0100',
      'Message-ID: <abc.123@example.com>',
      '',
      'Hello,',
      'the order is in.',
      '',
    ]);
    const p = parseEmail(raw);
    assert.deepEqual([p.from, p.fromAddress, p.subject, p.date, p.messageId], ['Jürgen <Juergen@Example.com>', 'juergen@example.com', 'Café order à la carte', '2026-03-03T09:00:00.000Z', 'abc.123@example.com']);
    assert.equal(p.text, 'Hello,\nthe order is in.\n');
    assert.equal(emailEventId(p, raw), 'email:abc.123@example.com');
  });

  it('multipart: the first text/plain part (quoted-printable, Latin-1), not attachments or HTML', () => {
    const raw = crlf([
      'From: a@example.com',
      'Subject: report',
      'Content-Type: multipart/mixed; boundary="outer"',
      '',
      'preamble',
      '--outer',
      'Content-Type: multipart/alternative; boundary=inner',
      '',
      '--inner',
      'Content-Type: text/html; charset=utf-8',
      '',
      '<p>html</p>',
      '--inner',
      'Content-Type: text/plain; charset="iso-8859-1"',
      'Content-Transfer-Encoding: quoted-printable',
      '',
      'Caf=E9 is open, a long line that is=',
      ' soft-wrapped.',
      '--inner--',
      '--outer',
      'Content-Type: text/plain',
      'Content-Disposition: attachment; filename="x.txt"',
      '',
      'attachment text',
      '--outer--',
      '',
    ]);
    const p = parseEmail(raw);
    assert.equal(p.text, 'Café is open, a long line that is soft-wrapped.');
    assert.equal(p.messageId, null);
    assert.match(emailEventId(p, raw), /^email:raw-[0-9a-f]{40}$/);
    assert.equal(emailEventId(p, raw), emailEventId(parseEmail(raw), Buffer.from(raw)), 'stable for the same message');
    assert.notEqual(emailEventId(p, raw), emailEventId(p, Buffer.concat([raw, Buffer.from('x')])));
  });

  it('base64 text, an HTML-only message, odd Message-IDs, bounds', () => {
    const b64 = parseEmail(crlf(['Content-Type: text/plain; charset=utf-8', 'Content-Transfer-Encoding: base64', '', Buffer.from('grüße aus Köln').toString('base64'), '']));
    assert.equal(b64.text, 'grüße aus Köln');
    const html = parseEmail(crlf(['Content-Type: text/html', '', '<html><style>p{}</style><p>Hi &amp; bye</p><script>x()</script></html>']));
    assert.equal(html.text, 'Hi & bye');
    const odd = parseEmail(crlf(['Message-ID: <"quoted id"@example.com>', '', 'x']));
    assert.match(emailEventId(odd, Buffer.from('x')), /^email:mid-[0-9a-f]{40}$/);
    const long = parseEmail(crlf(['Subject: long', '', 'y'.repeat(MAX_EMAIL_TEXT * 3)]));
    assert.deepEqual([long.text.length, long.truncated], [MAX_EMAIL_TEXT, true]);
    // a thousand parts and a deep nesting are bounded
    const many = ['Content-Type: multipart/mixed; boundary=b', ''];
    for (let i = 0; i < 1000; i++) many.push('--b', 'Content-Type: application/octet-stream', '', 'data');
    many.push('--b--');
    const t0 = Date.now();
    assert.equal(parseEmail(crlf(many)).text, '');
    let nested = 'text';
    for (let i = 0; i < 50; i++) nested = `Content-Type: multipart/mixed; boundary=n${i}\r\n\r\n--n${i}\r\n${nested}\r\n--n${i}--`;
    assert.equal(parseEmail(Buffer.from(nested)).text, '');
    assert.ok(Date.now() - t0 < 2000);
    // no header section at all
    assert.equal(parseEmail(Buffer.from('\r\njust text')).text, 'just text');
  });

  it('the sender allow list: addresses and domains', () => {
    const allow = ['example.com', 'boss@partner.test', '@corp.test'];
    assert.equal(senderAllowed('alice@example.com', allow), true);
    assert.equal(senderAllowed('Alice@EXAMPLE.com', allow), true);
    assert.equal(senderAllowed('boss@partner.test', allow), true);
    assert.equal(senderAllowed('intern@partner.test', allow), false);
    assert.equal(senderAllowed('x@corp.test', allow), true);
    assert.equal(senderAllowed('x@sub.example.com', allow), false);
    assert.equal(senderAllowed('x@evil.test', allow), false);
    assert.equal(senderAllowed(null, allow), false);
    assert.equal(senderAllowed('anyone@anywhere.test', []), true);
  });

  it('the inbound SMTP settings: off without a port, validated when given', () => {
    const cwd = tmpdir();
    assert.equal(loadConfig({}, cwd).inboundSmtp, undefined);
    assert.deepEqual(loadConfig({ STEWARD_INBOUND_SMTP_PORT: '2525', STEWARD_INBOUND_SMTP_ALLOW_FROM: 'Ops@Example.com, example.org,@corp.test' }, cwd).inboundSmtp, {
      host: '127.0.0.1',
      port: 2525,
      maxBytes: 1024 * 1024,
      allowFrom: ['ops@example.com', 'example.org', '@corp.test'],
    });
    assert.throws(() => loadConfig({ STEWARD_INBOUND_SMTP_PORT: '70000' }, cwd), (e: unknown) => e instanceof ConfigError && /STEWARD_INBOUND_SMTP_PORT/.test(e.message));
    assert.throws(() => loadConfig({ STEWARD_INBOUND_SMTP_PORT: '2525', STEWARD_INBOUND_SMTP_ALLOW_FROM: 'not a domain' }, cwd), /STEWARD_INBOUND_SMTP_ALLOW_FROM/);
    assert.throws(() => loadConfig({ STEWARD_INBOUND_SMTP_MAX_BYTES: '0' }, cwd), /STEWARD_INBOUND_SMTP_MAX_BYTES/);
  });
});
