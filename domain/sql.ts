/**
 * The turn path's statements, sent straight to the driver adapter the Prisma client runs on:
 * the same better-sqlite3 connection (and its transaction lock), the same pg pool. A Prisma
 * query costs 100-160 µs of the main thread's CPU and allocates for its query plan; the same
 * statement through the adapter costs 15-45 µs (bench/sql-per-turn.ts counts them, docs/performance.md
 * and git history). Everything else stays with the Prisma client.
 *
 * Statements are written once with `?` placeholders (PostgreSQL gets `$1`, `$2`, ...) and quoted
 * identifiers, the SQL both databases accept. Values are bound the way Prisma binds them: a
 * Date as the adapter formats a DateTime, a boolean as the column's boolean, bytes as a blob.
 * Rows come back as objects keyed by column, with the adapter's raw values; `sqlDate`,
 * `sqlBool` and `sqlInt` read them the same on both databases.
 *
 * A Db that was not made by createDb (no adapter known) runs the same SQL through the client's
 * raw queries, so every caller works with any client.
 */
import type { ArgType, SqlQuery, SqlQueryable, SqlDriverAdapter } from '@prisma/driver-adapter-utils';
import type { Db } from './db.js';

export type SqlValue = string | number | boolean | Date | Uint8Array | null;
export type SqlRow = Record<string, unknown>;

export interface SqlRunner {
  /** Run a statement; the number of rows it changed. */
  execute(sql: string, values: SqlValue[]): Promise<number>;
  /** Run a statement that returns rows (SELECT, INSERT ... RETURNING). */
  query(sql: string, values: SqlValue[]): Promise<SqlRow[]>;
}

export interface DirectSql extends SqlRunner {
  readonly provider: 'sqlite' | 'postgres';
  /** Run `fn`'s statements in one transaction: committed when it resolves, rolled back when it throws. */
  transaction<T>(fn: (tx: SqlRunner) => Promise<T>): Promise<T>;
}

/** What db.ts tells this module about a client it made: its provider and how to reach its connected adapter. */
export interface AdapterSource {
  provider: 'sqlite' | 'postgres';
  /** The adapter the client is connected through (connecting the client first when it is not yet). */
  adapter(): Promise<SqlDriverAdapter>;
}

const sources = new WeakMap<object, AdapterSource>();
const runners = new WeakMap<object, DirectSql>();

/** Called by createDb for each client it makes. */
export function registerAdapterSource(db: object, source: AdapterSource): void {
  sources.set(db, source);
  runners.delete(db);
}

const PG_PLACEHOLDERS_KEPT = 500;
const pgTexts = new Map<string, string>();

/** `?` placeholders as PostgreSQL's `$n` (statements here never have a `?` inside a literal). */
export function pgPlaceholders(sql: string): string {
  let text = pgTexts.get(sql);
  if (text === undefined) {
    let n = 0;
    text = sql.replace(/\?/g, () => `$${++n}`);
    if (pgTexts.size >= PG_PLACEHOLDERS_KEPT) pgTexts.clear();
    pgTexts.set(sql, text);
  }
  return text;
}

const SCALAR = (scalarType: ArgType['scalarType']): ArgType => ({ scalarType, arity: 'scalar' });
const STRING = SCALAR('string');
const INT = SCALAR('int');
const FLOAT = SCALAR('float');
const BOOLEAN = SCALAR('boolean');
const DATETIME = SCALAR('datetime');
const BYTES = SCALAR('bytes');
const UNKNOWN = SCALAR('unknown');

function argType(v: SqlValue): ArgType {
  if (v === null) return UNKNOWN;
  switch (typeof v) {
    case 'string':
      return STRING;
    case 'number':
      return Number.isInteger(v) ? INT : FLOAT;
    case 'boolean':
      return BOOLEAN;
    default:
      return v instanceof Date ? DATETIME : BYTES;
  }
}

function toQuery(provider: DirectSql['provider'], sql: string, values: SqlValue[]): SqlQuery {
  return { sql: provider === 'postgres' ? pgPlaceholders(sql) : sql, args: values, argTypes: values.map(argType) };
}

function adapterRunner(provider: DirectSql['provider'], q: () => Promise<SqlQueryable>): SqlRunner {
  return {
    async execute(sql, values) {
      return (await q()).executeRaw(toQuery(provider, sql, values));
    },
    async query(sql, values) {
      const rs = await (await q()).queryRaw(toQuery(provider, sql, values));
      return rs.rows.map((row) => {
        const o: SqlRow = {};
        for (let i = 0; i < rs.columnNames.length; i++) o[rs.columnNames[i]!] = row[i];
        return o;
      });
    },
  };
}

function adapterSql(source: AdapterSource): DirectSql {
  const { provider } = source;
  return {
    provider,
    ...adapterRunner(provider, () => source.adapter()),
    async transaction(fn) {
      const tx = await (await source.adapter()).startTransaction();
      // the adapters leave COMMIT and ROLLBACK to their caller (usePhantomQuery: false); commit()
      // and rollback() only give the connection back (SQLite: its transaction lock)
      const run = (sql: 'COMMIT' | 'ROLLBACK') => tx.executeRaw({ sql, args: [], argTypes: [] });
      let result: Awaited<ReturnType<typeof fn>>;
      try {
        result = await fn(adapterRunner(provider, async () => tx));
        await run('COMMIT');
      } catch (err) {
        // a failed statement or COMMIT: SQLite keeps the transaction open until it is rolled back
        await run('ROLLBACK').catch(() => undefined); // the first error is the one to report
        await tx.rollback();
        throw err;
      }
      await tx.commit();
      return result;
    },
  };
}

/** The same statements through the client's raw queries (a client createDb did not make). */
function clientSql(db: Db): DirectSql {
  const provider = (db as unknown as { _activeProvider?: string })._activeProvider === 'postgresql' ? 'postgres' : 'sqlite';
  const runner = (c: Pick<Db, '$executeRawUnsafe' | '$queryRawUnsafe'>): SqlRunner => ({
    execute: (sql, values) => c.$executeRawUnsafe(provider === 'postgres' ? pgPlaceholders(sql) : sql, ...values),
    query: (sql, values) => c.$queryRawUnsafe<SqlRow[]>(provider === 'postgres' ? pgPlaceholders(sql) : sql, ...values),
  });
  return { provider, ...runner(db), transaction: (fn) => db.$transaction((tx) => fn(runner(tx))) };
}

/** Direct statements for `db`: through its driver adapter when createDb made it, else through its raw queries. */
export function directSql(db: Db): DirectSql {
  let r = runners.get(db);
  if (!r) {
    const source = sources.get(db);
    r = source ? adapterSql(source) : clientSql(db);
    runners.set(db, r);
  }
  return r;
}

/** A DateTime column's value as the adapters return it (ISO text; SQLite's CURRENT_TIMESTAMP text is UTC), or a Date. */
export function sqlDate(v: unknown): Date {
  if (v instanceof Date) return v;
  if (typeof v === 'number' || typeof v === 'bigint') return new Date(Number(v));
  const s = String(v);
  return new Date(/^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?$/.test(s) ? `${s.replace(' ', 'T')}Z` : s);
}

/** A Boolean column's value: PostgreSQL's boolean, SQLite's 0 or 1. */
export function sqlBool(v: unknown): boolean {
  return v === true || v === 1 || v === 1n || v === '1' || v === 't';
}

/** An Int column's value (SQLite may hand back a bigint). */
export function sqlInt(v: unknown): number {
  return typeof v === 'number' ? v : Number(v);
}
