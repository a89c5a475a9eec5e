/**
 * Test databases: a fresh SQLite file, and (when STEWARD_TEST_PG_URL names a PostgreSQL server,
 * as in CI) a fresh PostgreSQL database, dropped afterwards. Both are migrated the way Steward
 * migrates at start-up: `prisma migrate deploy` through migrateDatabase.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { createDb, migrateDatabase, type Db } from '../../domain/db.js';

export interface TestDatabase {
  url: string;
  db: Db;
  cleanup(): Promise<void>;
}

export interface TestDatabaseKind {
  name: 'sqlite' | 'postgres';
  create(): Promise<TestDatabase>;
}

/** Migrate the empty database at `url` and open it; `discard` removes it (also when migrating fails). */
async function migrated(url: string, discard: () => Promise<void>): Promise<TestDatabase> {
  try {
    await migrateDatabase(url);
  } catch (err) {
    await discard();
    throw err;
  }
  const db = createDb(url);
  return {
    url,
    db,
    async cleanup() {
      await db.$disconnect();
      await discard();
    },
  };
}

const sqlite: TestDatabaseKind = {
  name: 'sqlite',
  async create() {
    const dir = mkdtempSync(path.join(tmpdir(), 'steward-test-db-'));
    return migrated(`file:${path.join(dir, 'test.db')}`, async () => rmSync(dir, { recursive: true, force: true }));
  },
};

async function withAdmin<T>(adminUrl: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    return await fn(admin);
  } finally {
    await admin.end();
  }
}

/** Create an empty, uniquely named database on the server of `adminUrl`; returns its URL and a dropper. */
export async function createPgDatabase(adminUrl: string): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `steward_test_${randomUUID().replace(/-/g, '').slice(0, 16)}`;
  await withAdmin(adminUrl, (c) => c.query(`CREATE DATABASE "${name}"`));
  const u = new URL(adminUrl);
  u.pathname = `/${name}`;
  return {
    url: u.toString(),
    async drop() {
      await withAdmin(adminUrl, (c) => c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`));
    },
  };
}

const postgres = (adminUrl: string): TestDatabaseKind => ({
  name: 'postgres',
  async create() {
    const { url, drop } = await createPgDatabase(adminUrl);
    return migrated(url, drop);
  },
});

/** SQLite always; PostgreSQL too when STEWARD_TEST_PG_URL is set (an admin URL: it creates databases). */
export function testDatabases(): TestDatabaseKind[] {
  const pgUrl = process.env.STEWARD_TEST_PG_URL;
  return pgUrl ? [sqlite, postgres(pgUrl)] : [sqlite];
}

const projectRoot = fileURLToPath(new URL('../../', import.meta.url));

/** Run the prisma CLI of the project (with the project's prisma.config.ts) and collect its output. */
export async function prismaCli(
  args: string[],
  env: Record<string, string | undefined> = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const require = createRequire(import.meta.url);
  const cli = path.join(path.dirname(require.resolve('prisma/package.json')), 'build', 'index.js');
  // a variable given as undefined is removed from the CLI's environment
  const childEnv: Record<string, string> = {};
  for (const [k, v] of Object.entries({ ...process.env, PRISMA_HIDE_UPDATE_MESSAGE: '1', CHECKPOINT_DISABLE: '1', NO_COLOR: '1', ...env })) {
    if (v !== undefined) childEnv[k] = v;
  }
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [cli, ...args, '--config', path.join(projectRoot, 'prisma.config.ts')], {
      cwd: projectRoot,
      env: childEnv,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}
