/**
 * The database layer: migrations apply on fresh SQLite and PostgreSQL databases through
 * Prisma's schema engine, the schema and the migrations do not drift, and the model copies
 * match prisma/models.prisma.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { isUniqueViolation } from '../../activities/prisma-errors.js';
import { migrateDatabase, schemaDrift } from '../../platform/migrate.js';
import { createPgDatabase, testDatabases } from '../helpers/db.js';

const read = (p: string) => readFileSync(new URL(`../../${p}`, import.meta.url), 'utf8');

describe('prisma schema', () => {
  it('keeps the provider copies of the models identical to prisma/models.prisma', () => {
    const models = read('prisma/models.prisma');
    assert.equal(read('prisma/sqlite/models.prisma'), models, 'run npm run prisma:sync');
    assert.equal(read('prisma/postgres/models.prisma'), models, 'run npm run prisma:sync');
  });

  it('has SQLite migrations that match the schema (no drift)', async () => {
    assert.equal(await schemaDrift('sqlite'), '');
  });

  it('has PostgreSQL migrations that match the schema (no drift)', { skip: !process.env.STEWARD_TEST_PG_URL && 'no PostgreSQL (STEWARD_TEST_PG_URL)' }, async () => {
    const shadow = await createPgDatabase(process.env.STEWARD_TEST_PG_URL ?? '');
    const prev = process.env.STEWARD_SHADOW_DATABASE_URL;
    process.env.STEWARD_SHADOW_DATABASE_URL = shadow.url;
    try {
      assert.equal(await schemaDrift('postgres'), '');
    } finally {
      if (prev === undefined) delete process.env.STEWARD_SHADOW_DATABASE_URL;
      else process.env.STEWARD_SHADOW_DATABASE_URL = prev;
      await shadow.drop();
    }
  });
});

for (const database of testDatabases()) {
  describe(`database (${database.name})`, () => {
    it('migrates a fresh database, reads and writes every model, and reports unique violations', async () => {
      const t = await database.create();
      try {
        assert.deepEqual(await migrateDatabase(t.url), [], 'a second deploy has nothing to apply');
        const rows = (await t.db.$queryRawUnsafe('SELECT migration_name FROM _prisma_migrations')) as Array<{ migration_name: string }>;
        assert.ok(rows.some((r) => r.migration_name.endsWith('_init')));
        await t.db.session.create({ data: { id: 's1', platform: 'http', account: 'a', chatId: 'c' } });
        const m = await t.db.message.create({ data: { key: 'k1', sessionId: 's1', role: 'user', text: 'héllo ✓' } });
        const m2 = await t.db.message.create({ data: { key: 'k2', sessionId: 's1', role: 'assistant', text: 'hi' } });
        assert.ok(m2.seq > m.seq);
        await t.db.blob.create({ data: { hash: 'h', mediaType: 'text/plain', size: 3, data: new Uint8Array([1, 2, 3]) } });
        assert.deepEqual([...((await t.db.blob.findUniqueOrThrow({ where: { hash: 'h' } })).data)], [1, 2, 3]);
        await t.db.delivery.create({ data: { key: 'k2', sessionId: 's1', platform: 'http', chatId: 'c', kind: 'reply', status: 'pending' } });
        await t.db.receipt.create({ data: { key: 'r', kind: 'ingress', data: '{}' } });
        await assert.rejects(t.db.message.create({ data: { key: 'k1', sessionId: 's1', role: 'user', text: 'again' } }), (err: unknown) => isUniqueViolation(err));
        assert.equal((await t.db.message.findUniqueOrThrow({ where: { key: 'k1' } })).text, 'héllo ✓');
      } finally {
        await t.cleanup();
      }
    });
  });
}
