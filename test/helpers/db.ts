/**
 * Test databases: a fresh migrated SQLite file, and (when STEWARD_TEST_PG_URL names a
 * PostgreSQL server, as in CI) a fresh migrated PostgreSQL database, dropped afterwards.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { createDb, type Db } from '../../activities/db.js';
import { migrateDatabase } from '../../platform/migrate.js';

export interface TestDatabase {
  url: string;
  db: Db;
  cleanup(): Promise<void>;
}

export interface TestDatabaseKind {
  name: 'sqlite' | 'postgres';
  create(): Promise<TestDatabase>;
}

const sqlite: TestDatabaseKind = {
  name: 'sqlite',
  async create() {
    const dir = mkdtempSync(path.join(tmpdir(), 'steward-test-db-'));
    const url = `file:${path.join(dir, 'test.db')}`;
    await migrateDatabase(url);
    const db = createDb(url);
    return {
      url,
      db,
      async cleanup() {
        await db.$disconnect();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  },
};

/** Create an empty PostgreSQL database next to STEWARD_TEST_PG_URL; returns its URL and a dropper. */
export async function createPgDatabase(adminUrl: string): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `steward_test_${randomUUID().replace(/-/g, '').slice(0, 16)}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE "${name}"`);
  } finally {
    await admin.end();
  }
  const u = new URL(adminUrl);
  u.pathname = `/${name}`;
  return {
    url: u.toString(),
    async drop() {
      const c = new pg.Client({ connectionString: adminUrl });
      await c.connect();
      try {
        await c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      } finally {
        await c.end();
      }
    },
  };
}

const postgres = (adminUrl: string): TestDatabaseKind => ({
  name: 'postgres',
  async create() {
    const { url, drop } = await createPgDatabase(adminUrl);
    await migrateDatabase(url);
    const db = createDb(url);
    return {
      url,
      db,
      async cleanup() {
        await db.$disconnect();
        await drop();
      },
    };
  },
});

export function testDatabases(): TestDatabaseKind[] {
  const pgUrl = process.env.STEWARD_TEST_PG_URL;
  return pgUrl ? [sqlite, postgres(pgUrl)] : [sqlite];
}
