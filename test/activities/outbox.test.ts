/** The outbox, blob store and receipts against the real database (SQLite, and PostgreSQL when available). */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { getBlobText, putBlob, sha256Hex } from '../../activities/blobs.js';
import { deliverOnce, type OutboundMessage } from '../../activities/outbox.js';
import { listReceipts, writeReceipt } from '../../activities/receipts.js';
import { testDatabases } from '../helpers/db.js';

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
      const sent: string[] = [];
      const senders = { telegram: async (m: OutboundMessage) => (sent.push(m.key), `ext-${sent.length}`) };
      const first = await deliverOnce(dbh.db, senders, msg('k1'));
      const second = await deliverOnce(dbh.db, senders, msg('k1'));
      const third = await Promise.all([deliverOnce(dbh.db, senders, msg('k1')), deliverOnce(dbh.db, senders, msg('k1'))]);
      assert.equal(first.sent, true);
      assert.equal(second.sent, false);
      assert.deepEqual(third.map((t) => t.sent), [false, false]);
      assert.deepEqual(sent, ['k1']);
      const row = await dbh.db.delivery.findUniqueOrThrow({ where: { key: 'k1' } });
      assert.equal(row.status, 'sent');
      assert.equal(row.externalId, 'ext-1');
      assert.equal(await dbh.db.message.count({ where: { key: 'k1' } }), 1);
    });

    it('retries a send that failed, without a second transcript entry', async () => {
      let calls = 0;
      const senders = {
        telegram: async () => {
          calls++;
          if (calls === 1) throw new Error('platform down');
          return 'ok';
        },
      };
      await assert.rejects(deliverOnce(dbh.db, senders, msg('k2')), /platform down/);
      assert.equal((await dbh.db.delivery.findUniqueOrThrow({ where: { key: 'k2' } })).status, 'pending');
      const r = await deliverOnce(dbh.db, senders, msg('k2'));
      assert.equal(r.sent, true);
      assert.equal(calls, 2);
      assert.equal(await dbh.db.message.count({ where: { key: 'k2' } }), 1);
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
