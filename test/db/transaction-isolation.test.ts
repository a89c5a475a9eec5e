/**
 * A transaction that rolls back takes only its own statements with it: a statement another flow
 * sends while it is open (a direct statement, domain/sql.ts, or a Prisma query) is written, on
 * SQLite, where every flow shares one connection (domain/db.ts isolateTransactions), and on
 * PostgreSQL, where a transaction has a connection of its own.
 *
 * PostgreSQL runs when STEWARD_TEST_PG_URL is set (scripts/pg.sh start; scripts/pg.sh url).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { directSql } from '../../domain/sql.js';
import { testDatabases, type TestDatabase } from '../helpers/db.js';

const INSERT = 'INSERT INTO "Receipt" ("key", "kind", "data", "createdAt") VALUES (?, ?, ?, ?)';
const args = (key: string) => [key, 'ingress', '{}', new Date()];
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

for (const kind of testDatabases()) {
  describe(`transactions are isolated from other flows (${kind.name})`, () => {
    let t: TestDatabase;
    before(async () => {
      t = await kind.create();
    });
    after(async () => t.cleanup());

    const keys = async (ks: string[]) => (await directSql(t.db).query(`SELECT "key" FROM "Receipt" WHERE "key" IN (${ks.map(() => '?').join(', ')}) ORDER BY "key"`, ks)).map((r) => r.key);

    it("a direct statement sent while another flow's transaction is open survives that transaction's rollback", async () => {
      const sql = directSql(t.db);
      let inside = false;
      const tx = sql
        .transaction(async (q) => {
          await q.execute(INSERT, args('d-in-tx'));
          inside = true;
          await pause(100);
          throw new Error('rolled back on purpose');
        })
        .catch((e: Error) => e.message);
      while (!inside) await pause(1);
      assert.equal(await sql.execute(INSERT, args('d-outside')), 1);
      assert.equal(await tx, 'rolled back on purpose');
      assert.deepEqual(await keys(['d-in-tx', 'd-outside']), ['d-outside']);
    });

    it("a Prisma query sent while a Prisma transaction is open survives that transaction's rollback", async () => {
      let inside = false;
      const tx = t.db
        .$transaction(async (q) => {
          await q.receipt.create({ data: { key: 'p-in-tx', kind: 'ingress', data: '{}' } });
          inside = true;
          await pause(100);
          throw new Error('rolled back on purpose');
        })
        .catch((e: Error) => e.message);
      while (!inside) await pause(1);
      await t.db.receipt.create({ data: { key: 'p-outside', kind: 'ingress', data: '{}' } });
      assert.equal(await tx, 'rolled back on purpose');
      assert.deepEqual(await keys(['p-in-tx', 'p-outside']), ['p-outside']);
    });

    it('transactions and statements from many flows at once: every committed write is there, no rolled-back one', async () => {
      const sql = directSql(t.db);
      const flows = Array.from({ length: 30 }, async (_, i) => {
        if (i % 3 === 0) {
          await sql
            .transaction(async (q) => {
              await q.execute(INSERT, args(`m-tx-${i}`));
              await pause(2);
              if (i % 2 === 0) throw new Error('rollback');
              await q.execute(INSERT, args(`m-tx-${i}-b`));
            })
            .catch(() => undefined);
        } else {
          await pause(i % 5);
          await sql.execute(INSERT, args(`m-st-${i}`));
        }
      });
      await Promise.all(flows);
      const expected = Array.from({ length: 30 }, (_, i) => (i % 3 === 0 ? (i % 2 === 0 ? [] : [`m-tx-${i}`, `m-tx-${i}-b`]) : [`m-st-${i}`])).flat();
      const all = Array.from({ length: 30 }, (_, i) => [`m-tx-${i}`, `m-tx-${i}-b`, `m-st-${i}`]).flat();
      assert.deepEqual(await keys(all), [...expected].sort());
    });
  });
}
