/**
 * The database client: Prisma 7 with driver adapters, SQLite (better-sqlite3) by default and
 * PostgreSQL (pg) for postgres:// URLs. Prisma lives in activities and the platform only.
 *
 * Migrations are applied by the prisma CLI itself (`prisma migrate deploy`, see
 * migrateDatabase), with prisma.config.ts choosing the schema folder from the URL and, where
 * no native schema engine is installed, the offline Wasm engine bridge
 * (prisma/engine-bridge).
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PrismaBetterSqlite3 } from '@prisma/adapter-better-sqlite3';
import { PrismaPg } from '@prisma/adapter-pg';
import type { SqlDriverAdapter, SqlMigrationAwareDriverAdapterFactory } from '@prisma/driver-adapter-utils';
import Database from 'better-sqlite3';
import pg from 'pg';
import { PrismaClient as PostgresClient } from '../generated/prisma/postgres/client.js';
import { PrismaClient as SqliteClient } from '../generated/prisma/sqlite/client.js';
import { registerAdapterSource } from './sql.js';
import { BACKSTOP_PAGES, startWalCheckpointer, type CheckpointTrouble } from './wal-checkpointer.js';

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
  /** The adapter the client connected through, until it is disposed (domain/sql.ts sends the turn path's statements to it). */
  connected: SqlDriverAdapter | undefined;

  constructor(private readonly pgOptions: pg.PoolConfig) {
    super(pgOptions);
  }

  override async connect(): ReturnType<PrismaPg['connect']> {
    return keepConnected(this, await super.connect());
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

/**
 * A prepared statement kept for reuse, bound per call. The better-sqlite3 adapter prepares
 * every query again (`prepare(sql).bind(args)`, and a statement binds once): SQLite's parser
 * and planner were 4% of the main thread under chat load. Reuse is safe here: calls are
 * synchronous (one at a time on a connection), SQLite re-prepares a statement itself after a
 * schema change, and the adapter reads results only through `run`, `columns` and `raw().all`.
 */
class ReusedStatement {
  private args: unknown[] = [];
  constructor(private readonly stmt: Database.Statement) {}
  get reader(): boolean {
    return this.stmt.reader;
  }
  bind(args: unknown[]): this {
    this.args = args;
    return this;
  }
  run(): Database.RunResult {
    return this.stmt.run(this.args);
  }
  columns(): Database.ColumnDefinition[] {
    return this.stmt.columns();
  }
  raw(): { all: () => unknown[] } {
    const stmt = this.stmt.raw(true);
    return { all: () => stmt.all(this.args) };
  }
}

/** How many distinct statements a connection keeps prepared (Prisma's SQL varies with list lengths, so the set is bounded, least recently used out). */
export const STATEMENT_CACHE_SIZE = 500;

/** Make `client.prepare` hand out statements kept per SQL text (see ReusedStatement). */
export function reusePreparedStatements(client: Database.Database, max = STATEMENT_CACHE_SIZE): void {
  const prepare = client.prepare.bind(client);
  const kept = new Map<string, Database.Statement>();
  const reused = (sql: string): ReusedStatement => {
    let stmt = kept.get(sql);
    if (stmt) kept.delete(sql);
    else stmt = prepare(sql);
    kept.set(sql, stmt);
    if (kept.size > max) kept.delete(kept.keys().next().value as string);
    return new ReusedStatement(stmt);
  };
  client.prepare = reused as unknown as typeof client.prepare;
}

/**
 * Statements sent outside a transaction wait until the open transaction (and every transaction
 * queued behind it) has ended. SQLite is one connection here, and the better-sqlite3 adapter
 * lets one transaction at a time have it (its mutex) but not the statements sent to the adapter
 * itself: a statement of another flow (another chat's ingress receipt, a Prisma query) sent
 * while a transaction was open between two of its statements ran inside that transaction, and
 * was rolled back with it, while its caller was told it had been written. Here the adapter's
 * transactions take a lock of Steward's when they begin and give it back when they commit or
 * roll back, and its own `queryRaw`, `executeRaw` and `executeScript` wait for that lock.
 * A transaction's own statements go through its transaction object and do not wait.
 */
export function isolateTransactions(adapter: SqlDriverAdapter): SqlDriverAdapter {
  // resolves once every transaction begun so far has ended
  let ended: Promise<void> = Promise.resolve();
  let open = 0;
  const startTransaction = adapter.startTransaction.bind(adapter);
  adapter.startTransaction = async (isolationLevel) => {
    const before = ended;
    let release!: () => void;
    const mine = new Promise<void>((resolve) => (release = resolve));
    ended = before.then(() => mine);
    open++;
    let released = false;
    const end = () => {
      if (released) return;
      released = true;
      open--;
      release();
    };
    try {
      await before;
      const tx = await startTransaction(isolationLevel);
      const commit = tx.commit.bind(tx);
      const rollback = tx.rollback.bind(tx);
      tx.commit = async () => {
        try {
          await commit();
        } finally {
          end();
        }
      };
      tx.rollback = async () => {
        try {
          await rollback();
        } finally {
          end();
        }
      };
      return tx;
    } catch (err) {
      end();
      throw err;
    }
  };
  const outside =
    <A extends unknown[], R>(f: (...a: A) => Promise<R>) =>
    async (...a: A): Promise<R> => {
      while (open > 0) await ended;
      return f(...a);
    };
  adapter.queryRaw = outside(adapter.queryRaw.bind(adapter));
  adapter.executeRaw = outside(adapter.executeRaw.bind(adapter));
  adapter.executeScript = outside(adapter.executeScript.bind(adapter));
  return adapter;
}

/** Prisma's better-sqlite3 adapter with its statements prepared once per connection, and its transactions isolated (isolateTransactions). */
class StewardSqlite extends PrismaBetterSqlite3 {
  /** The adapter the client connected through, until it is disposed (domain/sql.ts sends the turn path's statements to it). */
  connected: SqlDriverAdapter | undefined;

  override async connect(): ReturnType<PrismaBetterSqlite3['connect']> {
    const adapter = await super.connect();
    const client = (adapter as unknown as { client?: Database.Database }).client;
    // a later adapter version that keeps its connection elsewhere simply goes without the cache
    if (client && typeof client.prepare === 'function') reusePreparedStatements(client);
    return keepConnected(this, isolateTransactions(adapter));
  }
}

/** Remember `adapter` as `factory`'s connection until it is disposed. */
function keepConnected<A extends SqlDriverAdapter>(factory: { connected: SqlDriverAdapter | undefined }, adapter: A): A {
  factory.connected = adapter;
  const dispose = adapter.dispose.bind(adapter);
  adapter.dispose = async () => {
    if (factory.connected === adapter) factory.connected = undefined;
    await dispose();
  };
  return adapter;
}

function stewardAdapter(url: string): StewardPg | StewardSqlite {
  return databaseKind(url) === 'postgres' ? new StewardPg(pgConfig(url)) : new StewardSqlite({ url: sqlitePath(url), timeout: 10_000 });
}

export function driverAdapter(url: string): SqlMigrationAwareDriverAdapterFactory {
  return stewardAdapter(url);
}

/** Where tuneDb tells of the checkpoint thread's trouble (a pino logger is one). */
export interface CheckpointLog {
  warn(obj: object, msg: string): void;
}

/**
 * The answer to the checkpoint thread's trouble: said in the log (never silent in production),
 * and when the thread has stopped, the main connection's own automatic checkpoint back at
 * SQLite's 1,000 pages, so the log does not grow to the backstop's 64 MB before each checkpoint.
 */
export function checkpointTrouble(db: Db, log: CheckpointLog | undefined): (t: CheckpointTrouble) => void {
  return (t) => {
    if (!t.stopped) {
      log?.warn({ err: t.message }, 'a SQLite WAL checkpoint failed in its thread (it tries again)');
      return;
    }
    log?.warn({ err: t.message }, 'the SQLite WAL checkpoint thread stopped: the main connection checkpoints itself again, every 1,000 pages inside a commit');
    db.$queryRawUnsafe('PRAGMA wal_autocheckpoint = 1000').catch((err: unknown) => log?.warn({ err }, 'restoring the automatic WAL checkpoint failed'));
  };
}

/**
 * Connection settings worth applying once per process: WAL for SQLite (readers never wait on
 * the writer), with its checkpoints in a thread of their own (domain/wal-checkpointer.ts) unless
 * `checkpointThread` is false. Returns the stop of that thread (nothing to stop on PostgreSQL):
 * call it before the client disconnects.
 */
export async function tuneDb(db: Db, url: string, opts: { checkpointThread?: boolean; log?: CheckpointLog } = {}): Promise<() => Promise<void>> {
  if (databaseKind(url) !== 'sqlite') return async () => undefined;
  await db.$queryRawUnsafe('PRAGMA journal_mode = WAL');
  await db.$queryRawUnsafe('PRAGMA synchronous = NORMAL');
  if (opts.checkpointThread === false) return async () => undefined;
  const checkpointer = startWalCheckpointer(sqlitePath(url), { onTrouble: checkpointTrouble(db, opts.log) });
  await db.$queryRawUnsafe(`PRAGMA wal_autocheckpoint = ${BACKSTOP_PAGES}`);
  return async () => {
    await checkpointer.stop();
    // the connection checkpoints itself again should it go on writing
    await db.$queryRawUnsafe('PRAGMA wal_autocheckpoint = 1000').catch(() => undefined);
  };
}

/**
 * A Prisma client for the database at `databaseUrl` (the adapter follows the URL). Its adapter,
 * once connected, also takes the turn path's direct statements (domain/sql.ts).
 */
export function createDb(databaseUrl: string): Db {
  const kind = databaseKind(databaseUrl);
  const factory = stewardAdapter(databaseUrl);
  // the generated PostgreSQL client has the same API as the SQLite one
  const db = kind === 'postgres' ? (new PostgresClient({ adapter: factory }) as unknown as Db) : new SqliteClient({ adapter: factory });
  registerAdapterSource(db, {
    provider: kind,
    async adapter() {
      if (!factory.connected) await db.$connect();
      if (!factory.connected) throw new Error('the database client did not connect through its driver adapter');
      return factory.connected;
    },
  });
  return db;
}

const projectRoot = fileURLToPath(new URL('../', import.meta.url));
const MIGRATE_TIMEOUT_MS = 5 * 60_000;

/**
 * The migrations of this release that the database has not applied yet (all of them for a new
 * database). Read-only: a plain query of `_prisma_migrations`, so it works while other
 * processes have the database open.
 */
export async function pendingMigrations(databaseUrl: string): Promise<string[]> {
  const kind = databaseKind(databaseUrl);
  const dir = path.join(projectRoot, 'prisma', kind, 'migrations');
  const wanted = readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => e.name)
    .sort();
  const query = 'SELECT migration_name FROM _prisma_migrations WHERE finished_at IS NOT NULL AND rolled_back_at IS NULL';
  let applied: string[];
  try {
    if (kind === 'sqlite') {
      const file = path.resolve(sqlitePath(databaseUrl));
      if (!existsSync(file)) return wanted;
      const db = new Database(file, { readonly: true, fileMustExist: true, timeout: 10_000 });
      try {
        applied = (db.prepare(query).all() as Array<{ migration_name: string }>).map((r) => r.migration_name);
      } finally {
        db.close();
      }
    } else {
      const client = new pg.Client({ ...pgConfig(databaseUrl), Client: undefined } as pg.ClientConfig);
      await client.connect();
      try {
        applied = (await client.query<{ migration_name: string }>(query)).rows.map((r) => r.migration_name);
      } finally {
        await client.end();
      }
    }
  } catch {
    return wanted; // no migrations table yet (a new database), or it cannot be read: migrate
  }
  const done = new Set(applied);
  return wanted.filter((m) => !done.has(m));
}

/**
 * Bring the database at `databaseUrl` up to date: `prisma migrate deploy` when migrations are
 * pending, nothing when it already is (so a worker or the CLI can start while other processes
 * use the database; applying migrations needs it to themselves on SQLite).
 */
export async function migrateDatabase(databaseUrl: string): Promise<void> {
  if ((await pendingMigrations(databaseUrl)).length === 0) return;
  await migrateDeploy(databaseUrl);
}

/**
 * `prisma migrate deploy` on the database at `databaseUrl`, always: applies every pending migration of
 * prisma/sqlite or prisma/postgres (prisma.config.ts picks the folder from the URL). Runs the
 * prisma CLI in a child process with this process's node; fails with the CLI's error output.
 */
export async function migrateDeploy(databaseUrl: string): Promise<void> {
  const kind = databaseKind(databaseUrl);
  // a relative SQLite path means the same file as for createDb: relative to this process's cwd
  const url = kind === 'sqlite' ? `file:${path.resolve(sqlitePath(databaseUrl))}` : databaseUrl;
  const require = createRequire(import.meta.url);
  const cli = path.join(path.dirname(require.resolve('prisma/package.json')), 'build', 'index.js');
  const args = [cli, 'migrate', 'deploy', '--config', path.join(projectRoot, 'prisma.config.ts')];
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    DATABASE_URL: url,
    PRISMA_HIDE_UPDATE_MESSAGE: '1',
    CHECKPOINT_DISABLE: '1',
    NO_COLOR: '1',
    FORCE_COLOR: '0',
  };
  const { code, signal, stdout, stderr } = await new Promise<{
    code: number | null;
    signal: NodeJS.Signals | null;
    stdout: string;
    stderr: string;
  }>((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd: projectRoot, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), MIGRATE_TIMEOUT_MS);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (c, s) => {
      clearTimeout(timer);
      resolve({ code: c, signal: s, stdout: out, stderr: err });
    });
  });
  if (code === 0) return;
  const detail = (stderr.trim() || stdout.trim() || '(no output)').replaceAll(url, '<DATABASE_URL>');
  const how = code === null ? `killed by ${signal ?? 'a signal'}` : `exit code ${code}`;
  throw new Error(`prisma migrate deploy failed (${kind}, ${how}):\n${detail}`);
}
