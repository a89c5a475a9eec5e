/**
 * The database client: Prisma 7 with driver adapters, SQLite (better-sqlite3) by default and
 * PostgreSQL (pg) for postgres:// URLs. Prisma lives in activities and the platform only.
 */
import { PrismaBetterSqlite3 } from '@prisma/adapter-better-sqlite3';
import { PrismaPg } from '@prisma/adapter-pg';
import type { SqlMigrationAwareDriverAdapterFactory } from '@prisma/driver-adapter-utils';
import pg from 'pg';
import { PrismaClient as PostgresClient } from '../generated/prisma/postgres/client.js';
import { PrismaClient as SqliteClient } from '../generated/prisma/sqlite/client.js';

/** The client type both databases share (the generated APIs are the same). */
export type Db = SqliteClient;

export type DatabaseKind = 'sqlite' | 'postgres';

export function databaseKind(url: string): DatabaseKind {
  if (/^postgres(ql)?:\/\//.test(url)) return 'postgres';
  if (url.startsWith('file:')) return 'sqlite';
  throw new Error(`DATABASE_URL: expected file:... (SQLite) or postgresql://... (PostgreSQL), got ${url.split(':')[0]}:...`);
}

/** The better-sqlite3 path of a `file:` URL. */
export function sqlitePath(url: string): string {
  return url.replace(/^file:(\/\/)?/, '').replace(/\?.*$/, '');
}

/** PostgreSQL's internal one-byte `"char"` type (OID 18), used in the system catalogs. */
const PG_CHAR_OID = 18;
const PG_TEXT_OID = 25;

/**
 * A pg client that reports catalog `"char"` columns as text. The schema engine reads the
 * catalogs when it migrates; the pg driver adapter has no mapping for that type.
 */
class CatalogFriendlyClient extends pg.Client {
  override query(...args: unknown[]): never {
    const fix = <R extends { fields?: Array<{ dataTypeID: number }> } | undefined>(r: R): R => {
      for (const f of r?.fields ?? []) if (f.dataTypeID === PG_CHAR_OID) f.dataTypeID = PG_TEXT_OID;
      return r;
    };
    const last = args.at(-1);
    if (typeof last === 'function') {
      const cb = last as (err: unknown, r: { fields?: Array<{ dataTypeID: number }> }) => void;
      args[args.length - 1] = (err: unknown, r: { fields?: Array<{ dataTypeID: number }> }) => cb(err, fix(r));
    }
    const result = (super.query as (...a: unknown[]) => unknown)(...args);
    if (result && typeof (result as Promise<unknown>).then === 'function') {
      return (result as Promise<{ fields?: Array<{ dataTypeID: number }> }>).then(fix) as never;
    }
    return result as never;
  }
}

/**
 * Connection settings passed field by field (not as a connection string), so the adapter can
 * point a copy at a shadow database for migration diffs.
 */
export function pgConfig(url: string): pg.PoolConfig {
  const u = new URL(url);
  const sslmode = u.searchParams.get('sslmode');
  return {
    host: decodeURIComponent(u.hostname),
    port: u.port ? Number(u.port) : 5432,
    user: decodeURIComponent(u.username),
    password: decodeURIComponent(u.password),
    database: decodeURIComponent(u.pathname.replace(/^\//, '')) || 'postgres',
    ...(sslmode && sslmode !== 'disable' ? { ssl: { rejectUnauthorized: sslmode === 'verify-full' } } : {}),
    max: 10,
    Client: CatalogFriendlyClient,
  };
}

/**
 * The pg adapter, with a shadow database (for migration diffs) that is dropped only after
 * its own connections are closed.
 */
class StewardPg extends PrismaPg {
  constructor(private readonly pgOptions: pg.PoolConfig) {
    super(pgOptions);
  }

  override async connectToShadowDb(): ReturnType<PrismaPg['connectToShadowDb']> {
    const main = await this.connect();
    const database = `prisma_migrate_shadow_db_${globalThis.crypto.randomUUID()}`;
    await main.executeScript(`CREATE DATABASE "${database}"`);
    const shadow = await new PrismaPg({ ...this.pgOptions, database }).connect();
    const disposeShadow = shadow.dispose.bind(shadow);
    shadow.dispose = async () => {
      await disposeShadow();
      await main.executeScript(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
      await main.dispose();
    };
    return shadow;
  }
}

export function driverAdapter(url: string): SqlMigrationAwareDriverAdapterFactory {
  return databaseKind(url) === 'postgres'
    ? new StewardPg(pgConfig(url))
    : new PrismaBetterSqlite3({ url: sqlitePath(url), timeout: 10_000 });
}

/** Connection settings worth applying once per process: WAL for SQLite (readers never wait on the writer). */
export async function tuneDb(db: Db, url: string): Promise<void> {
  if (databaseKind(url) !== 'sqlite') return;
  await db.$queryRawUnsafe('PRAGMA journal_mode = WAL');
  await db.$queryRawUnsafe('PRAGMA synchronous = NORMAL');
}

export function createDb(url: string): Db {
  if (databaseKind(url) === 'postgres') {
    return new PostgresClient({ adapter: driverAdapter(url) }) as unknown as Db;
  }
  return new SqliteClient({ adapter: driverAdapter(url) });
}
