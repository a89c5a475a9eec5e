/**
 * The database layer, through the prisma CLI (with the offline Wasm schema engine bridge where
 * no native engine is installed): migrations deploy on fresh SQLite and PostgreSQL databases,
 * each migrations folder matches its schema (a model change without a migration fails here),
 * and the model copies match prisma/models.prisma.
 *
 * PostgreSQL runs when STEWARD_TEST_PG_URL is set (scripts/pg.sh start; scripts/pg.sh url).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { createDb, databaseKind, driverAdapter, migrateDatabase, pendingMigrations, reusePreparedStatements, sqlitePath } from '../../domain/db.js';
import { prismaErrorCode } from '../../domain/prisma-errors.js';
import { prismaCli, testDatabases, type TestDatabase } from '../helpers/db.js';

const read = (p: string) => readFileSync(new URL(`../../${p}`, import.meta.url), 'utf8');
const migrationNames = (kind: 'sqlite' | 'postgres') =>
  readdirSync(new URL(`../../prisma/${kind}/migrations/`, import.meta.url), { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => e.name)
    .sort();

describe('prisma schema', () => {
  it('keeps the provider copies of the models identical to prisma/models.prisma', () => {
    const models = read('prisma/models.prisma');
    assert.equal(read('prisma/sqlite/models.prisma'), models, 'prisma/sqlite/models.prisma differs: run npm run prisma:sync');
    assert.equal(read('prisma/postgres/models.prisma'), models, 'prisma/postgres/models.prisma differs: run npm run prisma:sync');
  });

  it('has one migration history per provider, with its lock file', () => {
    for (const kind of ['sqlite', 'postgres'] as const) {
      assert.ok(migrationNames(kind).length > 0, `prisma/${kind}/migrations is empty`);
      assert.match(read(`prisma/${kind}/migrations/migration_lock.toml`), new RegExp(`provider = "${kind === 'sqlite' ? 'sqlite' : 'postgresql'}"`));
    }
  });
});

/** The databases the drift checks run against: SQLite always (a scratch file), PostgreSQL when configured. */
const driftTargets: Array<{ kind: 'sqlite' | 'postgres'; skip: string | false; url: () => string }> = [];
let scratch = '';
driftTargets.push({ kind: 'sqlite', skip: false, url: () => `file:${path.join(scratch, 'diff.db')}` });
driftTargets.push({
  kind: 'postgres',
  skip: process.env.STEWARD_TEST_PG_URL ? false : 'no PostgreSQL (set STEWARD_TEST_PG_URL)',
  // the diff only needs the server (it creates and drops a shadow database there)
  url: () => process.env.STEWARD_TEST_PG_URL ?? '',
});

describe('migrations and schema (prisma migrate diff --exit-code)', () => {
  before(() => {
    scratch = mkdtempSync(path.join(tmpdir(), 'steward-prisma-diff-'));
  });
  after(() => {
    rmSync(scratch, { recursive: true, force: true });
  });

  for (const target of driftTargets) {
    it(`${target.kind}: the migrations produce exactly the schema (no drift)`, { skip: target.skip }, async () => {
      const r = await prismaCli(
        ['migrate', 'diff', '--from-migrations', `prisma/${target.kind}/migrations`, '--to-schema', `prisma/${target.kind}`, '--script', '--exit-code'],
        { DATABASE_URL: target.url() },
      );
      assert.equal(
        r.code,
        0,
        `prisma/${target.kind} differs from its migrations (exit ${r.code}); add a migration (prisma migrate dev --create-only):\n${r.stdout}\n${r.stderr}`,
      );
    });

    it(`${target.kind}: the diff check does see differences (exit code 2 from an empty database)`, { skip: target.skip }, async () => {
      // guards against a schema engine stand-in that does nothing and exits 0
      const r = await prismaCli(['migrate', 'diff', '--from-empty', '--to-schema', `prisma/${target.kind}`, '--script', '--exit-code'], {
        DATABASE_URL: target.url(),
      });
      assert.equal(r.code, 2, `${r.stdout}\n${r.stderr}`);
      assert.match(r.stdout, /CREATE TABLE "Message"/);
    });
  }
});

for (const database of testDatabases()) {
  describe(`database (${database.name})`, () => {
    let t: TestDatabase;
    let deployMs = 0;
    before(async () => {
      const start = performance.now();
      t = await database.create();
      deployMs = performance.now() - start;
    });
    after(async () => {
      await t?.cleanup();
    });

    it('applies every migration to a fresh database (prisma migrate deploy), and nothing the second time', async (ctx) => {
      ctx.diagnostic(`fresh database + migrate deploy: ${Math.round(deployMs)} ms`);
      assert.equal(databaseKind(t.url), database.name);
      const rows = await t.db.$queryRawUnsafe<Array<{ migration_name: string; finished_at: unknown }>>(
        'SELECT migration_name, finished_at FROM _prisma_migrations ORDER BY migration_name',
      );
      assert.deepEqual(
        rows.map((r) => r.migration_name),
        migrationNames(database.name),
      );
      assert.ok(rows.every((r) => r.finished_at !== null));
      await migrateDatabase(t.url);
      const again = await t.db.$queryRawUnsafe<Array<{ n: number | bigint }>>('SELECT count(*) AS n FROM _prisma_migrations');
      assert.equal(Number(again[0]?.n), rows.length, 'a second deploy applies nothing');
      const status = await prismaCli(['migrate', 'status'], { DATABASE_URL: t.url });
      assert.equal(status.code, 0, `${status.stdout}\n${status.stderr}`);
      assert.match(status.stdout, /Database schema is up to date/);
    });

    it('creates and reads every model', async () => {
      await t.db.session.create({ data: { id: 's1', platform: 'http', account: 'a', chatId: 'c' } });
      const m = await t.db.message.create({ data: { key: 'k1', sessionId: 's1', role: 'user', text: 'héllo ✓' } });
      const m2 = await t.db.message.create({ data: { key: 'k2', sessionId: 's1', role: 'assistant', text: 'hi', turnId: 't1' } });
      assert.ok(m2.seq > m.seq);
      assert.deepEqual(
        (await t.db.message.findMany({ where: { sessionId: 's1' }, orderBy: { seq: 'asc' } })).map((r) => r.text),
        ['héllo ✓', 'hi'],
      );
      await t.db.blob.create({ data: { hash: 'h', mediaType: 'text/plain', size: 3, data: new Uint8Array([1, 2, 3]) } });
      assert.deepEqual([...(await t.db.blob.findUniqueOrThrow({ where: { hash: 'h' } })).data], [1, 2, 3]);
      await t.db.delivery.create({ data: { key: 'k2', sessionId: 's1', platform: 'http', chatId: 'c', kind: 'reply', status: 'pending' } });
      const d = await t.db.delivery.update({ where: { key: 'k2' }, data: { status: 'sent', attempts: { increment: 1 }, sentAt: new Date() } });
      assert.equal(d.attempts, 1);
      const r = await t.db.receipt.create({ data: { key: 'r', kind: 'ingress', data: '{}' } });
      assert.equal((await t.db.receipt.findUniqueOrThrow({ where: { id: r.id } })).kind, 'ingress');
      const s = await t.db.session.findUniqueOrThrow({ where: { id: 's1' } });
      assert.ok(s.updatedAt instanceof Date);
    });

    it('reports a unique-key violation as Prisma error P2002', async () => {
      await t.db.message.create({ data: { key: 'dup', sessionId: 's1', role: 'user', text: 'first' } });
      await assert.rejects(t.db.message.create({ data: { key: 'dup', sessionId: 's1', role: 'user', text: 'again' } }), (err: unknown) => {
        assert.equal(prismaErrorCode(err), 'P2002');
        return true;
      });
      await assert.rejects(t.db.receipt.createMany({ data: [{ key: 'rr', kind: 'x', data: '' }, { key: 'rr', kind: 'x', data: '' }] }), (err: unknown) => {
        assert.equal(prismaErrorCode(err), 'P2002');
        return true;
      });
      assert.equal((await t.db.message.findUniqueOrThrow({ where: { key: 'dup' } })).text, 'first');
    });
  });
}

describe('migrateDatabase', () => {
  it('fails with the CLI error output', async () => {
    // nothing listens on port 1
    await assert.rejects(migrateDatabase('postgresql://steward:x@127.0.0.1:1/steward'), (err: Error) => {
      assert.match(err.message, /prisma migrate deploy failed \(postgres, exit code 1\)/);
      assert.match(err.message, /P1001/);
      return true;
    });
    assert.throws(() => databaseKind('mysql://x'), /DATABASE_URL/);
  });

  it('knows what is pending, and starts a worker on an up-to-date SQLite database that another process holds open in WAL mode', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'steward-pending-'));
    const url = `file:${path.join(dir, 'p.db')}`;
    try {
      assert.deepEqual(await pendingMigrations(url), migrationNames('sqlite'), 'a new database needs every migration');
      await migrateDatabase(url);
      assert.deepEqual(await pendingMigrations(url), []);
      // another process (a crashed worker's peer, the all-in-one start) has it open in WAL mode:
      // applying migrations would need the database to itself, checking needs nothing
      const other = new Database(sqlitePath(url));
      other.pragma('journal_mode = WAL');
      other.prepare('SELECT count(*) FROM Session').get();
      try {
        const t0 = Date.now();
        await migrateDatabase(url);
        assert.ok(Date.now() - t0 < 5000, 'nothing to apply: no lock taken');
      } finally {
        other.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('reused prepared statements (SQLite)', () => {
  it('prepares each SQL text once, binds per call, survives a schema change and keeps a bounded set', () => {
    const db = new Database(':memory:');
    let prepared = 0;
    const prepare = db.prepare.bind(db);
    db.prepare = ((sql: string) => {
      prepared++;
      return prepare(sql);
    }) as typeof db.prepare;
    reusePreparedStatements(db, 3);
    // the way the Prisma adapter calls it: prepare(sql).bind(args), then run / columns / raw().all
    const exec = (sql: string, args: unknown[] = []) => (db.prepare(sql) as unknown as { bind(a: unknown[]): { run(): Database.RunResult } }).bind(args).run();
    const query = (sql: string, args: unknown[] = []) => {
      const stmt = (db.prepare(sql) as unknown as { bind(a: unknown[]): { reader: boolean; columns(): Database.ColumnDefinition[]; raw(): { all(): unknown[] } } }).bind(args);
      assert.equal(stmt.reader, true);
      return { columns: stmt.columns().map((c) => c.name), rows: stmt.raw().all() };
    };
    exec('CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)');
    for (let i = 1; i <= 5; i++) assert.equal(exec('INSERT INTO t (id, v) VALUES (?, ?)', [i, `v${i}`]).changes, 1);
    assert.deepEqual(query('SELECT v FROM t WHERE id = ?', [2]), { columns: ['v'], rows: [['v2']] });
    assert.deepEqual(query('SELECT v FROM t WHERE id = ?', [4]).rows, [['v4']], 'the same statement with new arguments');
    assert.equal(prepared, 3, 'CREATE, INSERT and SELECT were each prepared once');
    // a unique violation still surfaces, and the statement stays usable after it
    assert.throws(() => exec('INSERT INTO t (id, v) VALUES (?, ?)', [1, 'again']), /UNIQUE/);
    assert.equal(exec('INSERT INTO t (id, v) VALUES (?, ?)', [6, 'v6']).changes, 1);
    // a schema change after a statement was kept: SQLite re-prepares it itself
    exec('ALTER TABLE t ADD COLUMN w TEXT');
    assert.deepEqual(query('SELECT * FROM t WHERE id = ?', [6]), { columns: ['id', 'v', 'w'], rows: [[6, 'v6', null]] });
    // transactions as the adapter runs them
    exec('BEGIN');
    exec('DELETE FROM t WHERE id = ?', [6]);
    exec('ROLLBACK');
    assert.deepEqual(query('SELECT count(*) AS n FROM t').rows, [[6]]);
    // the set is bounded: four more texts push out the oldest, which is prepared again
    const before = prepared;
    for (const id of [1, 2, 3, 4]) query(`SELECT v FROM t WHERE id = ${id}`);
    query('SELECT v FROM t WHERE id = ?', [1]);
    assert.equal(prepared, before + 5, 'the least recently used statement was let go');
    db.close();
  });

  it('serves Prisma on SQLite: creates, reads, raw queries and transactions', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'steward-stmts-'));
    const url = `file:${path.join(dir, 's.db')}`;
    const db = createDb(url);
    try {
      await migrateDatabase(url);
      for (let i = 0; i < 3; i++) {
        await db.blob.create({ data: { hash: `h${i}`, mediaType: 'text/plain', size: 1, data: Buffer.from(String(i)) } });
      }
      const rows = await db.blob.findMany({ orderBy: { hash: 'asc' } });
      assert.deepEqual(rows.map((r) => Buffer.from(r.data).toString()), ['0', '1', '2']);
      const n = await db.$queryRaw<Array<{ n: bigint | number }>>`SELECT count(*) AS n FROM Blob WHERE size = ${1}`;
      assert.equal(Number(n[0]?.n), 3);
      await assert.rejects(
        db.$transaction(async (tx) => {
          await tx.blob.delete({ where: { hash: 'h0' } });
          throw new Error('roll back');
        }),
        /roll back/,
      );
      assert.equal(await db.blob.count(), 3, 'the rolled-back delete left the row');
      await db.$transaction([db.blob.delete({ where: { hash: 'h0' } }), db.blob.delete({ where: { hash: 'h1' } })]);
      assert.equal(await db.blob.count(), 1);
      // the adapter Steward builds keeps its statements
      const adapter = await driverAdapter(url).connect();
      const client = (adapter as unknown as { client: Database.Database }).client;
      assert.notEqual(client.prepare, Database.prototype.prepare, 'prepare is the reusing one');
      assert.deepEqual(await adapter.queryRaw({ sql: 'SELECT count(*) AS n FROM Blob', args: [], argTypes: [] }).then((r) => r.rows), [[1]]);
      await adapter.dispose();
    } finally {
      await db.$disconnect();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
