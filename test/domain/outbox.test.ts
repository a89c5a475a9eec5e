/** The outbox, blob store and receipts against the real database (SQLite, and PostgreSQL when available). */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { getBlobText, putBlob, sha256Hex } from '../../domain/blobs.js';
import { clearPanel, deliverOnce, DeliveryError, SENDING_LEASE_MS, updatePanel, type ChannelSender, type OutboundMessage, type OutboundPart } from '../../domain/outbox.js';
import { listReceipts, writeReceipt, writeReceipts } from '../../domain/receipts.js';
import { testDatabases } from '../helpers/db.js';

/** A sender that records what it was asked to send; `fail` decides per call whether to throw. */
function recordingSender(opts: { limit?: number; fail?: (part: OutboundPart, call: number) => Error | undefined; editIntervalMs?: number } = {}) {
  const sent: Array<{ key: string; text: string; index: number; files: number; buttons: number }> = [];
  const edits: Array<{ id: string; text: string }> = [];
  const removed: string[] = [];
  let calls = 0;
  const sender: ChannelSender = {
    split: (text) => {
      const limit = opts.limit ?? 1000;
      const parts = text.split(/\n\n/).reduce<string[]>((acc, p) => {
        const last = acc.at(-1);
        if (last !== undefined && last.length + 2 + p.length <= limit) acc[acc.length - 1] = `${last}\n\n${p}`;
        else acc.push(p);
        return acc;
      }, []);
      return parts.length ? parts : [''];
    },
    async send(_conv, part) {
      calls++;
      const err = opts.fail?.(part, calls);
      if (err) throw err;
      sent.push({ key: part.idempotencyKey, text: part.text, index: part.index, files: part.files.length, buttons: part.buttons?.length ?? 0 });
      return `ext-${sent.length}`;
    },
    async edit(_conv, id, text) {
      edits.push({ id, text });
    },
    async remove(_conv, id) {
      removed.push(id);
    },
    editIntervalMs: opts.editIntervalMs ?? 0,
  };
  return { sender, sent, edits, removed, calls: () => calls };
}

for (const database of testDatabases()) {
  describe(`outbox and stores (${database.name})`, () => {
    let dbh: Awaited<ReturnType<typeof database.create>>;
    before(async () => {
      dbh = await database.create();
    });
    after(async () => {
      await dbh?.cleanup();
    });

    const msg = (key: string): OutboundMessage => ({
      key,
      sessionId: 'session:telegram:bot:42',
      conversation: { platform: 'telegram', account: 'bot', chatId: '42' },
      kind: 'reply',
      text: 'hello',
      turnId: 'session:telegram:bot:42:turn:1:abcdefgh',
    });

    it('sends a keyed message once, however often delivery is retried', async () => {
      const rec = recordingSender();
      const senders = { telegram: rec.sender };
      const first = await deliverOnce(dbh.db, senders, msg('k1'));
      const second = await deliverOnce(dbh.db, senders, msg('k1'));
      const third = await Promise.all([deliverOnce(dbh.db, senders, msg('k1')), deliverOnce(dbh.db, senders, msg('k1'))]);
      assert.equal(first.sent, true);
      assert.equal(second.sent, false);
      assert.deepEqual(third.map((t) => t.sent), [false, false]);
      assert.deepEqual(rec.sent.map((s) => s.key), ['k1#0']);
      assert.deepEqual(second.externalIds, ['ext-1']);
      const row = await dbh.db.delivery.findUniqueOrThrow({ where: { key: 'k1' } });
      assert.equal(row.status, 'sent');
      assert.equal(row.externalId, 'ext-1');
      assert.equal(await dbh.db.message.count({ where: { key: 'k1' } }), 1);
    });

    it('two attempts of one key at the same moment (a retry that started while the first still sent) send each part once', async () => {
      const rec = recordingSender({ limit: 10 });
      const slow: ChannelSender = { ...rec.sender, send: async (conv, part) => { await new Promise((r) => setTimeout(r, 300)); return rec.sender.send(conv, part); } };
      const long: OutboundMessage = { ...msg('k-race'), text: 'first part\n\nsecond part\n\nthird part' };
      const both = await Promise.all([deliverOnce(dbh.db, { telegram: slow }, long), deliverOnce(dbh.db, { telegram: slow }, long)]);
      assert.deepEqual(rec.sent.map((s) => s.key), ['k-race#0', 'k-race#1', 'k-race#2'], 'each part sent once');
      for (const b of both) assert.deepEqual(b.externalIds, ['ext-1', 'ext-2', 'ext-3']);
      assert.equal((await dbh.db.delivery.findUniqueOrThrow({ where: { key: 'k-race' } })).status, 'sent');
    });

    it('a part left sending by an attempt that died is sent again once its lease has passed, not before', async () => {
      const rec = recordingSender();
      const senders = { telegram: rec.sender };
      // the first attempt dies once its request may have gone out (its send never returns): the row says sending
      const dead: ChannelSender = { ...rec.sender, send: () => new Promise<string>(() => undefined) };
      void deliverOnce(dbh.db, { telegram: dead }, msg('k-dead'));
      for (let i = 0; (await dbh.db.deliveryPart.findUnique({ where: { key_part: { key: 'k-dead', part: 0 } } }))?.status !== 'sending'; i++) {
        assert.ok(i < 100, 'the first attempt claimed the part');
        await new Promise((r) => setTimeout(r, 20));
      }
      // within the lease another attempt waits for it; past the lease it takes the part over
      const waiting = deliverOnce(dbh.db, senders, msg('k-dead'));
      await new Promise((r) => setTimeout(r, 400));
      assert.equal(rec.sent.length, 0, 'not sent while the first attempt holds the part');
      await dbh.db.deliveryPart.update({ where: { key_part: { key: 'k-dead', part: 0 } }, data: { updatedAt: new Date(Date.now() - SENDING_LEASE_MS - 1000) } });
      const r = await waiting;
      assert.equal(r.sent, true);
      assert.deepEqual(rec.sent.map((s) => s.key), ['k-dead#0']);
    });

    it('retries a send that failed, without a second transcript entry', async () => {
      const rec = recordingSender({ fail: (_p, call) => (call === 1 ? new DeliveryError('platform down', { status: 502 }) : undefined) });
      const senders = { telegram: rec.sender };
      await assert.rejects(deliverOnce(dbh.db, senders, msg('k2')), /platform down/);
      assert.equal((await dbh.db.delivery.findUniqueOrThrow({ where: { key: 'k2' } })).status, 'pending');
      const r = await deliverOnce(dbh.db, senders, msg('k2'));
      assert.equal(r.sent, true);
      assert.equal(rec.calls(), 2);
      assert.equal(rec.sent.length, 1);
      assert.equal(await dbh.db.message.count({ where: { key: 'k2' } }), 1);
    });

    it('a long message goes out in parts; a retry after a failed part sends only the missing ones', async () => {
      const paragraphs = Array.from({ length: 6 }, (_, i) => `paragraph ${i} `.repeat(20).trim());
      const long = { ...msg('k-long'), text: paragraphs.join('\n\n'), buttons: [[{ id: 'b1', label: 'OK' }]] };
      const rec = recordingSender({ limit: 700, fail: (p, call) => (p.index === 2 && call === 3 ? new DeliveryError('429', { retryAfterMs: 1000 }) : undefined) });
      const senders = { telegram: rec.sender };
      await assert.rejects(deliverOnce(dbh.db, senders, long), (e: unknown) => e instanceof DeliveryError && e.retryAfterMs === 1000);
      assert.deepEqual(rec.sent.map((s) => s.index), [0, 1]);
      const r = await deliverOnce(dbh.db, senders, long);
      assert.equal(r.sent, true);
      const expected = rec.sender.split(long.text).length;
      assert.ok(expected >= 3, `split into ${expected}`);
      assert.deepEqual(rec.sent.map((s) => s.index), Array.from({ length: expected }, (_, i) => i), 'each part exactly once, in order');
      assert.deepEqual(rec.sent.map((s) => s.buttons), rec.sent.map((_, i) => (i === expected - 1 ? 1 : 0)), 'buttons only under the last part');
      assert.equal(r.externalIds.length, expected);
      assert.equal(await dbh.db.deliveryPart.count({ where: { key: 'k-long', status: 'sent' } }), expected);
    });

    it('a permanent refusal marks the delivery failed and is not retried', async () => {
      const rec = recordingSender({ fail: () => new DeliveryError('Forbidden: bot was blocked by the user', { permanent: true, status: 403 }) });
      const r = await deliverOnce(dbh.db, { telegram: rec.sender }, msg('k-blocked'));
      assert.equal(r.sent, false);
      assert.match(r.failed ?? '', /blocked/);
      assert.equal((await dbh.db.delivery.findUniqueOrThrow({ where: { key: 'k-blocked' } })).status, 'failed');
      const again = await deliverOnce(dbh.db, { telegram: rec.sender }, msg('k-blocked'));
      assert.equal(again.sent, false);
      assert.equal(rec.calls(), 1);
    });

    it('sends attachments with the last part, loaded from the blob store', async () => {
      const hash = await putBlob(dbh.db, 'col1,col2\n1,2\n', 'text/csv');
      const rec = recordingSender();
      await deliverOnce(dbh.db, { telegram: rec.sender }, { ...msg('k-file'), attachments: [{ hash, name: 'data.csv', mediaType: 'text/csv', size: 14 }] });
      assert.deepEqual(rec.sent.map((s) => s.files), [1]);
      const row = await dbh.db.message.findUniqueOrThrow({ where: { key: 'k-file' } });
      assert.match(row.attachments ?? '', /data\.csv/);
    });

    it('a progress panel is posted once, edited at most once per interval, and removed', async () => {
      const rec = recordingSender({ editIntervalMs: 60_000 });
      const senders = { telegram: rec.sender };
      const conv = { platform: 'telegram' as const, account: 'bot', chatId: '42' };
      const turnId = 'session:telegram:bot:42:turn:7:panel';
      const slept: number[] = [];
      const sleep = async (ms: number) => {
        slept.push(ms);
      };
      assert.equal(await updatePanel(dbh.db, senders, { turnId, conversation: conv, text: 'Thinking…' }, sleep), 'posted');
      assert.equal(await updatePanel(dbh.db, senders, { turnId, conversation: conv, text: 'Thinking…' }, sleep), 'unchanged');
      assert.equal(await updatePanel(dbh.db, senders, { turnId, conversation: conv, text: 'Calling save_note…' }, sleep), 'throttled');
      assert.equal(rec.edits.length, 0);
      assert.equal(await updatePanel(dbh.db, senders, { turnId, conversation: conv, text: 'Waiting for approval', important: true }, sleep), 'edited');
      assert.equal(slept.length, 1);
      assert.ok((slept[0] ?? 0) > 50_000, 'an important update waits out the interval');
      assert.deepEqual(rec.edits, [{ id: 'ext-1', text: 'Waiting for approval' }]);
      assert.equal(await clearPanel(dbh.db, senders, turnId, conv), 'cleared');
      assert.equal(await clearPanel(dbh.db, senders, turnId, conv), 'none');
      assert.deepEqual(rec.removed, ['ext-1']);
      assert.equal(await updatePanel(dbh.db, senders, { turnId, conversation: conv, text: 'late' }, sleep), 'cleared');
    });

    it('stores blobs by content hash', async () => {
      const text = 'x'.repeat(100_000);
      const h1 = await putBlob(dbh.db, text);
      const h2 = await putBlob(dbh.db, text);
      assert.equal(h1, h2);
      assert.equal(h1, sha256Hex(text));
      assert.equal(await getBlobText(dbh.db, h1), text);
      assert.equal(await dbh.db.blob.count({ where: { hash: h1 } }), 1);
      await assert.rejects(getBlobText(dbh.db, 'f'.repeat(64)), /missing/);
    });

    it('a channel without a sender (the HTTP transcript) is delivered once its message is recorded', async () => {
      const http = { ...msg('k-http'), sessionId: 'session:http:default:h1', conversation: { platform: 'http' as const, account: 'default', chatId: 'h1' } };
      const first = await deliverOnce(dbh.db, {}, http);
      const again = await deliverOnce(dbh.db, {}, http);
      assert.equal(first.sent, true);
      assert.equal(again.sent, false);
      assert.equal(again.messageSeq, first.messageSeq, 'the retry reports the same transcript entry');
      const message = await dbh.db.message.findUniqueOrThrow({ where: { key: 'k-http' } });
      assert.equal(message.seq, first.messageSeq);
      assert.equal(message.role, 'assistant');
      const row = await dbh.db.delivery.findUniqueOrThrow({ where: { key: 'k-http' } });
      assert.equal(row.status, 'sent');
      assert.equal(row.attempts, 1);
      assert.ok(row.sentAt);
      assert.equal(await dbh.db.message.count({ where: { key: 'k-http' } }), 1);
    });

    it('keeps blobs it wrote or read per database, and writes a known blob to another database', async () => {
      const other = await database.create();
      try {
        const text = `cached ${database.name}`;
        const hash = await putBlob(dbh.db, text);
        assert.equal(await other.db.blob.count({ where: { hash } }), 0);
        assert.equal(await putBlob(other.db, text), hash);
        assert.equal(await other.db.blob.count({ where: { hash } }), 1, 'the other database got its own row');
        assert.equal(await getBlobText(other.db, hash), text);
        // written before by another process: the write meets the unique key and takes the hash
        const elsewhere = `written elsewhere ${database.name}`;
        await other.db.blob.create({ data: { hash: sha256Hex(elsewhere), mediaType: 'text/plain; charset=utf-8', size: elsewhere.length, data: new Uint8Array(Buffer.from(elsewhere)) } });
        assert.equal(await putBlob(other.db, elsewhere), sha256Hex(elsewhere));
        assert.equal(await other.db.blob.count({ where: { hash: sha256Hex(elsewhere) } }), 1);
      } finally {
        await other.cleanup();
      }
    });

    it('writes receipts together, and one by one when a retry finds a key taken', async () => {
      const first = await writeReceipts(dbh.db, [
        { key: 'rs-1', kind: 'delivery', workflowId: 'wf', runId: 'run', sessionId: 's-rs', data: { text: 'é' } },
        { key: 'rs-2', kind: 'turn.end', workflowId: 'wf', runId: 'run', sessionId: 's-rs', data: { steps: 1 } },
      ]);
      assert.deepEqual(first, [true, true]);
      const retry = await writeReceipts(dbh.db, [
        { key: 'rs-1', kind: 'delivery', sessionId: 's-rs', data: {} },
        { key: 'rs-3', kind: 'turn.end', sessionId: 's-rs', actor: 'bob', data: {} },
      ]);
      assert.deepEqual(retry, [false, true]);
      const rows = await listReceipts(dbh.db, { sessionId: 's-rs' });
      assert.deepEqual(rows.map((r) => r.kind), ['delivery', 'turn.end', 'turn.end']);
      assert.deepEqual(rows[0]?.data, { text: 'é' });
      assert.equal(rows[0]?.runId, 'run');
      assert.equal(rows[2]?.actor, 'bob');
      for (const r of rows) assert.ok(Math.abs(new Date(r.at).getTime() - Date.now()) < 60_000, `a current time: ${r.at}`);
    });

    it('writes a keyed receipt once and exports receipts in order', async () => {
      await writeReceipt(dbh.db, { key: 'r1', kind: 'model.call', workflowId: 'wf', runId: 'run', sessionId: 's-r', data: { a: 1 } });
      await writeReceipt(dbh.db, { key: 'r1', kind: 'model.call', workflowId: 'wf', runId: 'run', sessionId: 's-r', data: { a: 1 } });
      await writeReceipt(dbh.db, { kind: 'command', sessionId: 's-r', actor: 'alice', data: { command: 'stop' } });
      const rows = await listReceipts(dbh.db, { sessionId: 's-r' });
      assert.deepEqual(rows.map((r) => r.kind), ['model.call', 'command']);
      assert.deepEqual(rows[0]?.data, { a: 1 });
      assert.equal(rows[0]?.workflowId, 'wf');
      assert.equal(rows[1]?.actor, 'alice');
    });
  });
}
