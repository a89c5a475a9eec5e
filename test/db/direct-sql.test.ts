/**
 * The turn path's direct statements (domain/sql.ts) on SQLite and PostgreSQL: what they write
 * reads back through Prisma's model queries exactly as if Prisma had written it (dates, bytes,
 * booleans, nulls), unique violations are recognised as Prisma's are, transactions commit or
 * roll back whole, the adapter's connection is the client's own (a reconnect after
 * $disconnect included), and a client createDb did not make runs the same statements through
 * its raw queries.
 *
 * PostgreSQL runs when STEWARD_TEST_PG_URL is set (scripts/pg.sh start; scripts/pg.sh url).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { putBlob } from '../../domain/blobs.js';
import { driverAdapter, type Db } from '../../domain/db.js';
import { deliverOnce } from '../../domain/outbox.js';
import { isUniqueViolation } from '../../domain/prisma-errors.js';
import { listReceipts, writeReceipt, writeReceipts } from '../../domain/receipts.js';
import { directSql, pgPlaceholders, sqlBool, sqlDate } from '../../domain/sql.js';
import { messagesByKeys, recordInbound } from '../../domain/transcript.js';
import { PrismaClient as PostgresClient } from '../../generated/prisma/postgres/client.js';
import { PrismaClient as SqliteClient } from '../../generated/prisma/sqlite/client.js';
import { testDatabases, type TestDatabase } from '../helpers/db.js';

/** A client made without createDb: directSql knows no adapter of it. */
const ownClient = (kind: 'sqlite' | 'postgres', url: string): Db =>
  kind === 'postgres' ? (new PostgresClient({ adapter: driverAdapter(url) }) as unknown as Db) : new SqliteClient({ adapter: driverAdapter(url) });
const near = (d: Date, from: number, to: number) => assert.ok(d.getTime() >= from - 1 && d.getTime() <= to + 1, `${d.toISOString()} within the call`);

describe('direct statements (pure parts)', () => {
  it('numbers ? placeholders for PostgreSQL', () => {
    assert.equal(pgPlaceholders('INSERT INTO "T" ("a", "b") VALUES (?, ?), (?, ?)'), 'INSERT INTO "T" ("a", "b") VALUES ($1, $2), ($3, $4)');
    assert.equal(pgPlaceholders('SELECT 1'), 'SELECT 1');
  });
  it('reads dates and booleans as either database hands them back', () => {
    assert.equal(sqlDate('2026-11-26T20:01:02.345+00:00').toISOString(), '2026-11-26T20:01:02.345Z');
    assert.equal(sqlDate('2026-11-26 20:01:02').toISOString(), '2026-11-26T20:01:02.000Z', "SQLite's CURRENT_TIMESTAMP is UTC");
    assert.equal(sqlDate(Date.UTC(2026, 10, 26)).toISOString(), '2026-11-26T00:00:00.000Z');
    assert.deepEqual([true, 1, 1n, 't', false, 0, null, 'f'].map(sqlBool), [true, true, true, true, false, false, false, false]);
  });
});

for (const database of testDatabases()) {
  describe(`direct statements (${database.name})`, () => {
    let t: TestDatabase;
    before(async () => {
      t = await database.create();
    });
    after(async () => {
      await t?.cleanup();
    });

    it('goes through the driver adapter the client connected, on the client connection', async () => {
      const sql = directSql(t.db);
      assert.equal(sql.provider, database.name);
      // a row written directly is visible to the client at once, and the other way round
      await sql.execute('INSERT INTO "Session" ("id", "platform", "account", "chatId", "createdAt", "updatedAt") VALUES (?, ?, ?, ?, ?, ?)', ['s-direct', 'http', 'default', 'c1', new Date(), new Date()]);
      assert.equal((await t.db.session.findUniqueOrThrow({ where: { id: 's-direct' } })).chatId, 'c1');
      await t.db.session.create({ data: { id: 's-client', platform: 'http', account: 'default', chatId: 'c2' } });
      const rows = await sql.query('SELECT "id", "chatId" FROM "Session" WHERE "id" IN (?, ?) ORDER BY "id"', ['s-client', 's-direct']);
      assert.deepEqual(rows, [
        { id: 's-client', chatId: 'c2' },
        { id: 's-direct', chatId: 'c1' },
      ]);
      // past the client's query pipeline: a DateTime comes back as the adapter's text (the
      // client's raw queries turn it into a Date)
      const [session] = await sql.query('SELECT "createdAt" FROM "Session" WHERE "id" = ?', ['s-direct']);
      assert.equal(typeof session?.createdAt, 'string');
      if (database.name === 'sqlite') {
        // the client's own connection: a setting made on it through the client is seen here
        await t.db.$executeRawUnsafe('PRAGMA cache_size = -4321');
        assert.deepEqual(await sql.query('PRAGMA cache_size', []), [{ cache_size: -4321 }]);
      }
    });

    it('writes receipts that read back as Prisma wrote them, one statement for several, and keys once', async () => {
      const from = Date.now();
      assert.deepEqual(
        await writeReceipts(t.db, [
          { key: 'r:1', kind: 'turn.start', sessionId: 's-direct', workflowId: 'wf', runId: 'run', data: { turnId: 't1', n: 1 } },
          { key: 'r:2', kind: 'turn.end', sessionId: 's-direct', actor: 'op', data: { text: 'héllo ✓' } },
        ]),
        [true, true],
      );
      assert.equal(await writeReceipt(t.db, { key: 'r:1', kind: 'turn.start', data: {} }), false, 'a retried activity writes its receipt once');
      assert.deepEqual(await writeReceipts(t.db, [{ key: 'r:2', kind: 'turn.end', data: {} }, { key: 'r:3', kind: 'delivery', data: {} }]), [false, true]);
      const to = Date.now();
      const rs = await listReceipts(t.db, { sessionId: 's-direct' });
      assert.deepEqual(
        rs.map((r) => [r.kind, r.workflowId, r.runId, r.actor, r.data]),
        [
          ['turn.start', 'wf', 'run', null, { turnId: 't1', n: 1 }],
          ['turn.end', null, null, 'op', { text: 'héllo ✓' }],
        ],
      );
      for (const r of rs) near(new Date(r.at), from, to);
      const row = await t.db.receipt.findUniqueOrThrow({ where: { key: 'r:3' } });
      assert.ok(row.createdAt instanceof Date);
      near(row.createdAt, from, to);
    });

    it('records inbound messages once, and reads them by key in the order asked', async () => {
      const from = Date.now();
      const a = await recordInbound(t.db, { key: 'in:a', sessionId: 's-direct', text: 'first', user: 'ann', identityId: null, command: false });
      const b = await recordInbound(t.db, { key: 'in:b', sessionId: 's-direct', text: '/status', user: 'bob', identityId: 'id-bob', command: true, attachments: '[{"hash":"h"}]' });
      assert.ok('seq' in a && 'seq' in b && b.seq > a.seq);
      assert.deepEqual(await recordInbound(t.db, { key: 'in:a', sessionId: 's-direct', text: 'again', user: 'ann', identityId: null, command: false }), { duplicate: true });
      const to = Date.now();
      const viaClient = await t.db.message.findUniqueOrThrow({ where: { key: 'in:b' } });
      assert.deepEqual([viaClient.role, viaClient.text, viaClient.user, viaClient.identityId, viaClient.command, viaClient.attachments, viaClient.turnId], ['user', '/status', 'bob', 'id-bob', true, '[{"hash":"h"}]', null]);
      assert.equal((await t.db.message.findUniqueOrThrow({ where: { key: 'in:a' } })).command, false);
      near(viaClient.createdAt, from, to);
      const rows = await messagesByKeys(t.db, ['in:b', 'missing', 'in:a']);
      assert.deepEqual(
        rows.map((r) => [r.key, r.seq, r.role, r.text, r.user, r.attachments, r.identityId ?? null]),
        [
          ['in:b', viaClient.seq, 'user', '/status', 'bob', '[{"hash":"h"}]', 'id-bob'],
          ['in:a', (a as { seq: number }).seq, 'user', 'first', 'ann', null, null],
        ],
      );
      assert.equal(rows[0]!.at, viaClient.createdAt.toISOString());
      assert.deepEqual(await messagesByKeys(t.db, []), []);
    });

    it('stores blobs byte for byte', async () => {
      const bytes = new Uint8Array([0, 1, 2, 250, 255]);
      const hash = await putBlob(t.db, bytes, 'application/octet-stream');
      const row = await t.db.blob.findUniqueOrThrow({ where: { hash } });
      assert.deepEqual([...row.data], [...bytes]);
      assert.equal(row.size, 5);
      assert.equal(row.mediaType, 'application/octet-stream');
      // the same content again from another client (no cache): stored before, same hash
      const other = ownClient(database.name, t.url);
      try {
        assert.equal(await putBlob(other, bytes, 'application/octet-stream'), hash);
      } finally {
        await other.$disconnect();
      }
      assert.equal(await t.db.blob.count({ where: { hash } }), 1);
    });

    it('records a delivery and its message together, once', async () => {
      const msg = { key: 'out:1', sessionId: 's-direct', conversation: { platform: 'http' as const, account: 'default', chatId: 'c1' }, kind: 'reply' as const, text: 'hello', turnId: 't1' };
      const first = await deliverOnce(t.db, {}, msg);
      assert.equal(first.sent, true);
      const message = await t.db.message.findUniqueOrThrow({ where: { key: 'out:1' } });
      assert.deepEqual([message.seq, message.role, message.text, message.turnId, message.command], [first.messageSeq, 'assistant', 'hello', 't1', false]);
      const delivery = await t.db.delivery.findUniqueOrThrow({ where: { key: 'out:1' } });
      assert.deepEqual([delivery.status, delivery.attempts, delivery.account, delivery.kind], ['sent', 1, 'default', 'reply']);
      assert.ok(delivery.sentAt instanceof Date);
      const again = await deliverOnce(t.db, {}, msg);
      assert.deepEqual([again.sent, again.messageSeq], [false, first.messageSeq], 'a retry finds it recorded and sends nothing');
      assert.equal(await t.db.message.count({ where: { key: 'out:1' } }), 1);
    });

    it('recognises a unique violation, and a transaction commits whole or not at all', async () => {
      const sql = directSql(t.db);
      const insert = 'INSERT INTO "Receipt" ("key", "kind", "data", "createdAt") VALUES (?, ?, ?, ?)';
      await assert.rejects(sql.execute(insert, ['r:1', 'x', '{}', new Date()]), (err: unknown) => isUniqueViolation(err));
      await assert.rejects(
        sql.transaction(async (tx) => {
          await tx.execute(insert, ['tx:1', 'x', '{}', new Date()]);
          await tx.execute(insert, ['r:1', 'x', '{}', new Date()]);
        }),
        (err: unknown) => isUniqueViolation(err),
      );
      assert.equal(await t.db.receipt.count({ where: { key: 'tx:1' } }), 0, 'the first statement was rolled back');
      // transactions side by side each commit whole (SQLite: one after the other on its connection)
      const n = await Promise.all(
        [1, 2, 3].map((i) =>
          sql.transaction(async (tx) => {
            await tx.execute(insert, [`tx:${i}:a`, 'x', '{}', new Date()]);
            await tx.execute(insert, [`tx:${i}:b`, 'x', '{}', new Date()]);
            return i;
          }),
        ),
      );
      assert.deepEqual(n, [1, 2, 3]);
      assert.equal(await t.db.receipt.count({ where: { key: { startsWith: 'tx:' } } }), 6);
      // a failed transaction left the connection usable
      assert.equal(await sql.execute(insert, ['after', 'x', '{}', new Date()]), 1);
    });

    it('rolls back a transaction whose COMMIT fails, and leaves the connection out of it', { skip: database.name !== 'sqlite' && 'PostgreSQL ends a transaction whose COMMIT failed itself' }, async () => {
      const sql = directSql(t.db);
      // a foreign key checked at COMMIT (SQLite defers it for this transaction only)
      await assert.rejects(
        sql.transaction(async (tx) => {
          await tx.execute('PRAGMA defer_foreign_keys = ON', []);
          await tx.execute('INSERT INTO "Receipt" ("key", "kind", "data", "createdAt") VALUES (?, ?, ?, ?)', ['commit:failed', 'x', '{}', new Date()]);
          await tx.execute('INSERT INTO "PlatformAccount" ("platform", "userId", "identityId", "createdAt") VALUES (?, ?, ?, ?)', ['telegram', 'u1', 'no-such-identity', new Date()]);
        }),
        /ForeignKeyConstraintViolation|FOREIGN KEY/,
      );
      // the connection is not left inside the failed transaction: a new one begins and commits,
      // and what it wrote is seen from another connection
      await sql.transaction((tx) => tx.execute('INSERT INTO "Receipt" ("key", "kind", "data", "createdAt") VALUES (?, ?, ?, ?)', ['commit:next', 'x', '{}', new Date()]));
      const other = ownClient(database.name, t.url);
      try {
        assert.deepEqual((await other.receipt.findMany({ where: { key: { startsWith: 'commit:' } } })).map((r) => r.key), ['commit:next']);
      } finally {
        await other.$disconnect();
      }
    });

    it('reconnects with the client after $disconnect', async () => {
      await t.db.$disconnect();
      assert.equal(await writeReceipt(t.db, { key: 'after-disconnect', kind: 'ingress', data: {} }), true);
      assert.equal(await t.db.receipt.count({ where: { key: 'after-disconnect' } }), 1);
    });

    it('runs the same statements through the raw queries of a client createDb did not make', async () => {
      const other = ownClient(database.name, t.url);
      try {
        const sql = directSql(other);
        assert.equal(sql.provider, database.name);
        const [session] = await sql.query('SELECT "createdAt" FROM "Session" WHERE "id" = ?', ['s-direct']);
        assert.ok(session?.createdAt instanceof Date, 'the client turns a DateTime into a Date');
        assert.equal(await writeReceipt(other, { key: 'fallback', kind: 'ingress', data: { a: 1 } }), true);
        assert.equal(await writeReceipt(other, { key: 'fallback', kind: 'ingress', data: {} }), false);
        const seq = await recordInbound(other, { key: 'in:fallback', sessionId: 's-direct', text: 'x', user: 'u', identityId: null, command: true });
        assert.ok('seq' in seq);
        const [row] = await messagesByKeys(other, ['in:fallback']);
        assert.equal(row?.seq, seq.seq);
        assert.equal(row?.at, (await t.db.message.findUniqueOrThrow({ where: { key: 'in:fallback' } })).createdAt.toISOString());
        await assert.rejects(
          sql.transaction(async (tx) => {
            await tx.execute('INSERT INTO "Receipt" ("key", "kind", "data", "createdAt") VALUES (?, ?, ?, ?)', ['fb:tx', 'x', '{}', new Date()]);
            throw new Error('changed my mind');
          }),
          /changed my mind/,
        );
        assert.equal(await t.db.receipt.count({ where: { key: 'fb:tx' } }), 0);
      } finally {
        await other.$disconnect();
      }
    });
  });
}
