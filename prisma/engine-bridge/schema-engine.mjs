#!/usr/bin/env node
// An offline stand-in for Prisma's native `schema-engine` binary.
//
// The prisma CLI starts its schema engine as a child process and talks JSON-RPC 2.0 with it,
// one JSON object per line on stdin/stdout (log lines as JSON on stderr), and runs
// `schema-engine --datasource '{"url":...}' cli can-connect-to-database|create-database` for
// the database checks of `migrate deploy|dev|reset|status`. This script answers both with
// Prisma's own schema engine compiled to Wasm (@prisma/schema-engine-wasm, pinned to the
// engine version of the installed prisma CLI), which reaches the database through the driver
// adapters the client uses: better-sqlite3 for `file:` URLs, pg for `postgres(ql)://` URLs.
//
// prisma.config.ts points PRISMA_SCHEMA_ENGINE_BINARY at ./schema-engine (a launcher running
// this file with the CLI's own node) only when no native engine is installed.
//
// The CLI starts one engine process per command (and kills it as soon as it is done: nothing
// may be left to do after an answer). The bridge starts the Wasm engine at the first call and
// keeps it for the following ones, as the native engine does: `migrate dev` relies on the
// schema the engine cached from the shadow database in devDiagnostic.
//
// Differences from the native engine that are handled here:
// - A fresh database has no `_prisma_migrations`: the Wasm engine does not recognise the
//   adapters' "table does not exist" there (P1014 in `migrate dev`/`status`), so that one
//   query reads as empty.
// - `migrate dev`: evaluateDataLoss and createMigration get no shadow database in this Wasm
//   build, only the engine's cache; after applying pending migrations the bridge diagnoses the
//   history again so that the cache holds all of it.
// - SQLite: better-sqlite3 prepares one statement per call, so migration scripts sent through
//   executeRaw (shadow database) run as scripts; applying migrations leaves the connection in
//   EXCLUSIVE locking mode (database locked while the engine lives), released right after;
//   `reset` in the Wasm engine only deletes rows, so the bridge drops every object itself;
//   create-database and can-connect-to-database are done here.
// - PostgreSQL: the pg adapter has no mapping for the catalogs' one-byte "char" type (read as
//   text); its executeScript splits scripts on every `;` (run whole, as the native engine
//   does); its shadow database is dropped while still in use (close first, then DROP ... WITH
//   (FORCE)) and derived from a copy of the connection settings (host, port, user and database
//   passed separately, so that the copy can name another database).
// - `diff` output reaches the CLI through the engine's `print` request, as with the native
//   engine; `getDatabaseVersion` is the Wasm `version`; `createDatabase` is done here.
//
// STEWARD_ENGINE_BRIDGE_DEBUG=1 logs every statement (see with DEBUG='prisma:schemaEngine*').
import { readFileSync, existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

// ---------------------------------------------------------------------------------------------
// Arguments (as the CLI passes them to the native engine)

function parseArgs(argv) {
  const out = { datamodels: [], datasource: undefined, previewFeatures: [], cli: undefined, version: false, help: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      const v = argv[++i];
      if (v === undefined) fail(`missing value for ${a}`);
      return v;
    };
    if (a === '--datamodels' || a === '-d') out.datamodels.push(value());
    else if (a.startsWith('--datamodels=')) out.datamodels.push(a.slice('--datamodels='.length));
    else if (a === '--datasource') out.datasource = JSON.parse(value());
    else if (a.startsWith('--datasource=')) out.datasource = JSON.parse(a.slice('--datasource='.length));
    else if (a === '--enabled-preview-features') out.previewFeatures = value().split(',');
    else if (a === '--extension-types') value();
    else if (a === '--version' || a === '-V') out.version = true;
    else if (a === '--help' || a === '-h') out.help = true;
    else if (a === 'cli') {
      out.cli = argv[++i];
      break;
    }
  }
  return out;
}

function fail(message) {
  process.stderr.write(`schema-engine (wasm bridge): ${message}\n`);
  process.exit(1);
}

// ---------------------------------------------------------------------------------------------
// Logging: the CLI parses each stderr line as JSON and keeps `fields.message`.

function log(level, message, extra = {}) {
  process.stderr.write(
    `${JSON.stringify({ timestamp: new Date().toISOString(), level, fields: { message, ...extra }, target: 'schema_engine::bridge' })}\n`,
  );
}

/** The Wasm engine's log lines are already JSON in the native format: pass them on. */
function engineLog(line) {
  const text = String(line).trim();
  if (text.startsWith('{')) process.stderr.write(`${text.replace(/\n/g, ' ')}\n`);
  else if (text) log('INFO', text);
}

// ---------------------------------------------------------------------------------------------
// Datasources

const isPostgresUrl = (url) => /^postgres(ql)?:\/\//i.test(url);
const isSqliteUrl = (url) => /^file:/i.test(url);

/** The file path of a SQLite `file:` URL, relative paths against the engine's working directory. */
function sqlitePath(url) {
  const p = decodeURIComponent(url.replace(/^file:(\/\/(?=\/))?/i, '').replace(/\?.*$/, ''));
  return p === ':memory:' ? p : path.resolve(process.cwd(), p);
}

/** pg settings field by field (not as a connection string), so copies can name another database. */
function pgConfig(url, database) {
  const u = new URL(url);
  const sslmode = u.searchParams.get('sslmode');
  const schema = u.searchParams.get('schema');
  const config = {
    host: decodeURIComponent(u.hostname) || u.searchParams.get('host') || 'localhost',
    port: u.port ? Number(u.port) : 5432,
    user: decodeURIComponent(u.username) || undefined,
    password: decodeURIComponent(u.password) || undefined,
    database: database ?? (decodeURIComponent(u.pathname.replace(/^\//, '')) || 'postgres'),
    max: 4,
    connectionTimeoutMillis: Number(u.searchParams.get('connect_timeout') ?? 10) * 1000 || 10_000,
    Client: catalogFriendlyClient(),
  };
  if (sslmode && sslmode !== 'disable' && sslmode !== 'prefer') config.ssl = { rejectUnauthorized: sslmode === 'verify-full' };
  if (schema) config.options = `-c search_path="${schema.replace(/"/g, '""')}"`;
  return config;
}

let CatalogFriendlyClient;
/**
 * A pg client that reports the catalogs' one-byte "char" columns (OID 18, and its array type)
 * as text: the schema engine reads them and the pg adapter has no mapping for them.
 */
function catalogFriendlyClient() {
  if (CatalogFriendlyClient) return CatalogFriendlyClient;
  const pg = require('pg');
  const remap = { 18: 25, 1002: 1009 };
  const fix = (r) => {
    for (const res of Array.isArray(r) ? r : [r]) for (const f of res?.fields ?? []) if (remap[f.dataTypeID]) f.dataTypeID = remap[f.dataTypeID];
    return r;
  };
  CatalogFriendlyClient = class extends pg.Client {
    query(...args) {
      const last = args.at(-1);
      if (typeof last === 'function') args[args.length - 1] = (err, r) => last(err, err ? r : fix(r));
      else if (args[0] && typeof args[0] === 'object' && typeof args[0].callback === 'function') {
        const cb = args[0].callback;
        args[0].callback = (err, r) => cb(err, err ? r : fix(r));
      }
      const result = super.query(...args);
      return result && typeof result.then === 'function' ? result.then(fix) : result;
    }
  };
  return CatalogFriendlyClient;
}

/** A user-facing engine error, answered with its Prisma error code like the native engine. */
class KnownError extends Error {
  constructor(code, message, meta) {
    super(message);
    this.code = code;
    this.meta = meta;
  }
}

/** Map a pg connection error to the error codes of the native engine. */
function pgKnownError(err, config) {
  const where = `${config.host}:${config.port}`;
  switch (err?.code) {
    case '3D000':
      return new KnownError('P1003', `Database \`${config.database}\` does not exist on the database server at \`${where}\`.`, {
        database_name: config.database,
        database_host: config.host,
        database_port: config.port,
      });
    case '28P01':
    case '28000':
      return new KnownError('P1000', `Authentication failed against the database server at \`${config.host}\`, the provided database credentials for \`${config.user ?? ''}\` are not valid.`);
    case '42P04':
      return new KnownError('P1009', `Database \`${config.database}\` already exists on the database server at \`${where}\``);
    case 'ECONNREFUSED':
    case 'ENOTFOUND':
    case 'EHOSTUNREACH':
    case 'ETIMEDOUT':
      return new KnownError('P1001', `Can't reach database server at \`${where}\`\n\nPlease make sure your database server is running at \`${where}\`.`);
    default:
      return new KnownError('P1000', `${err?.message ?? String(err)}`);
  }
}

async function withPgClient(config, fn) {
  const pg = require('pg');
  const client = new pg.Client(config);
  client.on('error', () => {});
  try {
    await client.connect();
  } catch (err) {
    await client.end().catch(() => {});
    throw pgKnownError(err, config);
  }
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => {});
  }
}

const quoteIdent = (s) => `"${String(s).replace(/"/g, '""')}"`;

async function canConnect(url) {
  if (isSqliteUrl(url)) {
    const file = sqlitePath(url);
    if (file !== ':memory:' && !existsSync(file)) {
      throw new KnownError('P1003', `Database \`${path.basename(file)}\` does not exist at \`${file}\`.`, {
        database_file_name: path.basename(file),
        database_file_path: file,
      });
    }
    const Database = require('better-sqlite3');
    const db = new Database(file, { fileMustExist: file !== ':memory:' });
    try {
      db.prepare('SELECT 1').get();
    } finally {
      db.close();
    }
    return;
  }
  if (isPostgresUrl(url)) {
    await withPgClient(pgConfig(url), (c) => c.query('SELECT 1'));
    return;
  }
  throw new KnownError('P1013', `The provided database string is invalid. Only file: (SQLite) and postgresql:// URLs are supported by the offline schema engine bridge.`);
}

async function createDatabase(url) {
  if (isSqliteUrl(url)) {
    const file = sqlitePath(url);
    if (file !== ':memory:') mkdirSync(path.dirname(file), { recursive: true });
    const Database = require('better-sqlite3');
    new Database(file).close();
    return path.basename(file);
  }
  if (isPostgresUrl(url)) {
    const target = pgConfig(url);
    // connect to the maintenance database with the same credentials
    let lastErr;
    for (const maintenance of ['postgres', 'template1']) {
      try {
        await withPgClient(pgConfig(url, maintenance), (c) => c.query(`CREATE DATABASE ${quoteIdent(target.database)}`));
        return target.database;
      } catch (err) {
        if (err?.code === '42P04') throw pgKnownError(err, target);
        lastErr = err;
        if (!(err instanceof KnownError && err.code === 'P1003')) break;
      }
    }
    throw lastErr instanceof KnownError ? lastErr : pgKnownError(lastErr, target);
  }
  throw new KnownError('P1013', 'The provided database string is invalid.');
}

async function dropDatabase(url) {
  if (isSqliteUrl(url)) {
    const { rmSync } = await import('node:fs');
    const file = sqlitePath(url);
    for (const suffix of ['', '-journal', '-wal', '-shm']) rmSync(file + suffix, { force: true });
    return;
  }
  const target = pgConfig(url);
  await withPgClient(pgConfig(url, 'postgres'), (c) => c.query(`DROP DATABASE IF EXISTS ${quoteIdent(target.database)} WITH (FORCE)`));
}

// ---------------------------------------------------------------------------------------------
// Driver adapters for the Wasm engine

/**
 * Read a missing `_prisma_migrations` table as an empty one. The native engine treats "table does
 * not exist" on that query as "migrations not initialised"; the Wasm engine does not recognise
 * the adapters' version of that error and fails `migrate dev` and `migrate status` on a fresh
 * database with P1014. (The CLI does not use the engine's hasMigrationsTable flag.)
 */
function missingMigrationsTableIsEmpty(adapter) {
  const queryRaw = adapter.queryRaw.bind(adapter);
  adapter.queryRaw = async (query) => {
    try {
      return await queryRaw(query);
    } catch (err) {
      const kind = err?.cause?.kind;
      if (kind === 'TableDoesNotExist' && /^\s*SELECT[\s\S]*\bFROM\s+[`"]?(?:[`"]?\w+[`"]?\.)?[`"]?_prisma_migrations[`"]?\s+ORDER BY/i.test(query.sql)) {
        const columns = /^\s*SELECT([\s\S]*?)\bFROM\b/i.exec(query.sql)[1].split(',').map((c) => c.trim().replace(/^.*\./, '').replace(/[`"]/g, ''));
        return { columnNames: columns, columnTypes: columns.map(() => 7 /* Text */), rows: [] };
      }
      throw err;
    }
  };
  return adapter;
}

/** Run multi-statement scripts that reach executeRaw (better-sqlite3 prepares one statement). */
function sqliteScriptsAsScripts(adapter) {
  const executeRaw = adapter.executeRaw.bind(adapter);
  adapter.executeRaw = async (query) => {
    try {
      return await executeRaw(query);
    } catch (err) {
      const text = `${err?.message ?? ''} ${JSON.stringify(err?.cause ?? '')}`;
      if (query.args.length === 0 && /more than one statement/i.test(text)) {
        await adapter.executeScript(query.sql);
        return 0;
      }
      throw err;
    }
  };
  return adapter;
}

/** Run a script in one simple-protocol query, like the native engine (pg's adapter splits on `;`). */
function pgWholeScripts(adapter) {
  adapter.executeScript = async (script) => {
    try {
      await adapter.underlyingDriver().query(script);
    } catch (err) {
      adapter.onError(err);
    }
  };
  return adapter;
}

/** Log every statement the engine sends (STEWARD_ENGINE_BRIDGE_DEBUG=1). */
function traceQueries(a) {
  for (const m of ['queryRaw', 'executeRaw', 'executeScript']) {
    const f = a[m].bind(a);
    a[m] = async (q) => {
      const sql = typeof q === 'string' ? q : q.sql;
      try {
        const r = await f(q);
        log('DEBUG', `${m}: ${sql}`);
        return r;
      } catch (err) {
        log('DEBUG', `${m} failed: ${sql}: ${err?.message} ${JSON.stringify(err?.cause ?? '')}`);
        throw err;
      }
    };
  }
}

/** The adapter factory for a datasource, with every connection it opens tracked for closing. */
async function adapterFactory(datasource, opened) {
  const url = datasource.url;
  const track = (a, extra, main = false) => {
    a.isMainConnection = main;
    if (process.env.STEWARD_ENGINE_BRIDGE_DEBUG) traceQueries(a);
    let disposed = false;
    const dispose = a.dispose.bind(a);
    a.dispose = async () => {
      if (disposed) return;
      disposed = true;
      try {
        await dispose();
      } finally {
        await extra?.();
      }
    };
    opened.push(a);
    return a;
  };
  if (isSqliteUrl(url)) {
    const { PrismaBetterSqlite3 } = await import('@prisma/adapter-better-sqlite3');
    const shadow = datasource.shadowDatabaseUrl ? sqlitePath(datasource.shadowDatabaseUrl) : undefined;
    const factory = new PrismaBetterSqlite3({ url: sqlitePath(url), timeout: 10_000 }, shadow ? { shadowDatabaseUrl: shadow } : undefined);
    return {
      provider: factory.provider,
      adapterName: factory.adapterName,
      connect: async () => track(missingMigrationsTableIsEmpty(sqliteScriptsAsScripts(await factory.connect())), undefined, true),
      connectToShadowDb: async () => track(sqliteScriptsAsScripts(await factory.connectToShadowDb())),
    };
  }
  if (isPostgresUrl(url)) {
    const { PrismaPg } = await import('@prisma/adapter-pg');
    const config = pgConfig(url);
    const schema = new URL(url).searchParams.get('schema') ?? undefined;
    const factory = new PrismaPg(config, schema ? { schema } : undefined);
    return {
      provider: factory.provider,
      adapterName: factory.adapterName,
      connect: async () => track(missingMigrationsTableIsEmpty(pgWholeScripts(await factory.connect())), undefined, true),
      connectToShadowDb: async () => {
        if (datasource.shadowDatabaseUrl) {
          // a configured shadow database: start it empty, as the native engine does
          const shadowUrl = datasource.shadowDatabaseUrl;
          const shadowSchema = new URL(shadowUrl).searchParams.get('schema') ?? 'public';
          const shadow = pgWholeScripts(await new PrismaPg(pgConfig(shadowUrl), { schema: shadowSchema }).connect());
          await shadow.executeScript(`DROP SCHEMA IF EXISTS ${quoteIdent(shadowSchema)} CASCADE; CREATE SCHEMA ${quoteIdent(shadowSchema)};`);
          return track(shadow);
        }
        const database = `prisma_migrate_shadow_db_${globalThis.crypto.randomUUID()}`;
        await withPgClient(config, (c) => c.query(`CREATE DATABASE ${quoteIdent(database)}`));
        const shadow = pgWholeScripts(await new PrismaPg({ ...config, database }, schema ? { schema } : undefined).connect());
        // close the shadow connections first, then drop the database
        return track(shadow, () => withPgClient(config, (c) => c.query(`DROP DATABASE IF EXISTS ${quoteIdent(database)} WITH (FORCE)`)).catch((err) => log('WARN', `could not drop shadow database ${database}: ${err.message}`)));
      },
    };
  }
  throw new KnownError('P1013', `The offline schema engine bridge supports file: (SQLite) and postgresql:// URLs only.`);
}

// ---------------------------------------------------------------------------------------------
// The Wasm engine

let wasmModule;
/** Load the Wasm engine by hand (Node's ESM Wasm imports are experimental and noisy). */
async function loadWasm() {
  if (wasmModule) return wasmModule;
  const bgUrl = import.meta.resolve('@prisma/schema-engine-wasm/schema_engine_bg');
  const bg = await import(bgUrl);
  const bytes = readFileSync(fileURLToPath(bgUrl.replace(/\.js$/, '.wasm')));
  const { instance } = await WebAssembly.instantiate(bytes, { './schema_engine_bg.js': bg });
  bg.__wbg_set_wasm(instance.exports);
  instance.exports.__wbindgen_start();
  wasmModule = bg;
  return bg;
}

/** Where the Wasm panic hook leaves its message. */
let lastPanic;
globalThis.PRISMA_WASM_PANIC_REGISTRY = {
  set_message(message) {
    lastPanic = message;
  },
};

function readDatamodels(paths) {
  return paths.map((p) => [p, readFileSync(path.resolve(process.cwd(), p), 'utf8')]);
}

/** The provider of the datamodels' datasource block (for commands started without a URL). */
function datamodelProvider(datamodels) {
  for (const [, content] of datamodels) {
    const m = /datasource\s+\w+\s*\{[^}]*?provider\s*=\s*"([^"]+)"/s.exec(content);
    if (m) return m[1];
  }
  return undefined;
}

/** Explain `External error id#N` references with the errors the adapters registered. */
function explainExternal(message, registry) {
  return message.replace(/External error id#(\d+)/g, (whole, id) => {
    const rec = registry.consumeError(Number(id));
    if (!rec) return whole;
    const e = rec.error;
    return `${whole} (${e instanceof Error ? `${e.name}: ${e.message}` : JSON.stringify(e)})`;
  });
}

/** The JSON-RPC error object for a failure, shaped like the native engine's. */
function rpcError(err, registry) {
  if (err instanceof KnownError || (err && typeof err === 'object' && typeof err.code === 'string' && /^P\d{4}$/.test(err.code))) {
    const message = registry ? explainExternal(err.message, registry) : err.message;
    return {
      code: 4466,
      message: 'An error happened. Check the data field for details.',
      data: { is_panic: false, message, meta: err.meta ?? null, error_code: err.code },
    };
  }
  if (err instanceof WebAssembly.RuntimeError || (err?.name === 'RuntimeError' && lastPanic)) {
    const message = lastPanic ?? err.message;
    lastPanic = undefined;
    return { code: 4466, message: 'An error happened. Check the data field for details.', data: { is_panic: true, message, error: { message }, backtrace: err.stack } };
  }
  let message = err instanceof Error ? err.message : typeof err === 'string' ? err : JSON.stringify(err);
  if (registry) message = explainExternal(message, registry);
  return { code: 4466, message: 'An error happened. Check the data field for details.', data: { is_panic: false, message, meta: null } };
}

class Bridge {
  constructor(args) {
    this.datamodelPaths = args.datamodels;
    this.datasource = args.datasource;
    this.nextOutgoingId = 1;
    this.pendingOutgoing = new Map();
  }

  /** The datasource for the engine: the configured one, or an in-memory SQLite database. */
  engineDatasource(datamodels) {
    if (this.datasource?.url && !this.inMemoryMain) return this.datasource;
    const provider = datamodelProvider(datamodels);
    if (provider === 'sqlite' || provider === undefined) return { url: 'file::memory:' };
    throw new KnownError('P1012', `The ${provider} datasource needs a URL: set datasource.url in prisma.config.ts.`);
  }

  /** The engine of this session, started on first use. */
  async getEngine() {
    if (this.engine) return this.engine;
    const wasm = await loadWasm();
    const { bindMigrationAwareSqlAdapterFactory } = await import('@prisma/driver-adapter-utils');
    const datamodels = readDatamodels(this.datamodelPaths);
    this.opened = [];
    this.adapter = bindMigrationAwareSqlAdapterFactory(await adapterFactory(this.engineDatasource(datamodels), this.opened));
    this.engine = await wasm.SchemaEngine.new({ datamodels: datamodels.length ? datamodels : undefined }, engineLog, this.adapter);
    return this.engine;
  }

  /** Free the engine and close every connection it opened. */
  async stopEngine() {
    const { engine, opened = [] } = this;
    this.engine = undefined;
    try {
      engine?.free();
    } catch {
      // already freed
    }
    for (const a of opened.reverse()) await a.dispose().catch(() => {});
    this.opened = [];
  }

  /** Run `fn` with the session's engine; adapter errors it reports are explained from the registry. */
  async withEngine(fn) {
    let engine;
    try {
      engine = await this.getEngine();
      return await fn(engine);
    } catch (err) {
      if (err && typeof err === 'object') err.registry = this.adapter?.errorRegistry;
      throw err;
    }
  }

  /**
   * After applying migrations the SQLite connection stays in EXCLUSIVE locking mode and keeps
   * the database locked while the engine lives: switch back to NORMAL, which releases the lock
   * at the next access. (The engine itself is kept: `migrate dev` relies on what it cached from
   * the shadow database in devDiagnostic for evaluateDataLoss and createMigration.)
   */
  releaseSqliteLock() {
    for (const a of this.opened ?? []) {
      // the better-sqlite3 adapter keeps its Database in `client`
      const db = a.provider === 'sqlite' ? a.client : undefined;
      if (!db || typeof db.pragma !== 'function' || !db.open) continue;
      try {
        db.pragma('main.locking_mode = NORMAL');
        db.prepare('SELECT count(*) FROM sqlite_master').get();
      } catch (err) {
        log('WARN', `could not release the SQLite lock: ${err.message}`);
      }
    }
  }

  /**
   * In `migrate dev`, evaluateDataLoss and createMigration take the schema of the migrations
   * history from the engine's cache: this Wasm build gives them no shadow database of their
   * own. devDiagnostic fills the cache for the migrations applied at that time; when the CLI
   * then applies pending ones, diagnosing again (the database is now up to date) caches the
   * schema of the whole history.
   */
  async warmMigrationSchemaCache(params) {
    try {
      await this.withEngine((e) =>
        e.diagnoseMigrationHistory({ migrationsList: params.migrationsList, optInToShadowDatabase: true, filters: params.filters }),
      );
    } catch (err) {
      log('WARN', `could not diagnose the migration history after applying migrations: ${err?.message ?? err}`);
    }
  }

  /** Create `_prisma_migrations` (the native engine's definition) in the main database if it is missing. */
  async ensureMigrationsTable() {
    const main = this.opened.find((a) => a.isMainConnection);
    if (!main) return;
    if (main.provider === 'sqlite') {
      const r = await main.queryRaw({ sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name = '_prisma_migrations'", args: [], argTypes: [] });
      if (r.rows.length) return;
      await main.executeScript(`CREATE TABLE "_prisma_migrations" (
    "id"                    TEXT PRIMARY KEY NOT NULL,
    "checksum"              TEXT NOT NULL,
    "finished_at"           DATETIME,
    "migration_name"        TEXT NOT NULL,
    "logs"                  TEXT,
    "rolled_back_at"        DATETIME,
    "started_at"            DATETIME NOT NULL DEFAULT current_timestamp,
    "applied_steps_count"   INTEGER UNSIGNED NOT NULL DEFAULT 0
);`);
      return;
    }
    const r = await main.queryRaw({
      sql: "SELECT table_name::text AS t FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = '_prisma_migrations'",
      args: [],
      argTypes: [],
    });
    if (r.rows.length) return;
    await main.executeScript(`CREATE TABLE "_prisma_migrations" (
    id                      VARCHAR(36) PRIMARY KEY NOT NULL,
    checksum                VARCHAR(64) NOT NULL,
    finished_at             TIMESTAMPTZ,
    migration_name          VARCHAR(255) NOT NULL,
    logs                    TEXT,
    rolled_back_at          TIMESTAMPTZ,
    started_at              TIMESTAMPTZ NOT NULL DEFAULT now(),
    applied_steps_count     INTEGER NOT NULL DEFAULT 0
);`);
  }

  /** Ask the CLI to print to its stdout (how the native engine outputs `migrate diff`). */
  print(content) {
    const id = this.nextOutgoingId++;
    return new Promise((resolve) => {
      this.pendingOutgoing.set(id, resolve);
      send({ jsonrpc: '2.0', id, method: 'print', params: { content } });
    });
  }

  onResponse(msg) {
    const resolve = this.pendingOutgoing.get(msg.id);
    if (resolve) {
      this.pendingOutgoing.delete(msg.id);
      resolve(msg);
    }
  }

  async call(method, params = {}) {
    switch (method) {
      case 'getDatabaseVersion':
        return this.withEngine((e) => e.version(params ?? null));
      case 'ensureConnectionValidity': {
        const ds = params?.datasource;
        if (ds?.tag === 'ConnectionString') return canConnect(ds.url).then(() => ({}));
        return this.withEngine((e) => e.ensureConnectionValidity(params)).then(() => ({}));
      }
      case 'createDatabase': {
        const ds = params?.datasource;
        const url = ds?.tag === 'ConnectionString' ? ds.url : this.datasource?.url;
        if (!url) throw new KnownError('P1012', 'createDatabase: no datasource URL');
        return { databaseName: await createDatabase(url) };
      }
      case 'diff': {
        // a diff that does not read the database must not create a missing SQLite file
        const url = this.datasource?.url;
        const readsDatabase = [params?.from, params?.to].some((t) => t?.tag === 'schemaDatasource' || t?.tag === 'url');
        if (!this.engine && !readsDatabase && url && isSqliteUrl(url) && !existsSync(sqlitePath(url))) this.inMemoryMain = true;
        const result = await this.withEngine((e) => e.diff(params));
        if (result.stdout) await this.print(result.stdout.replace(/\n$/, ''));
        return { exitCode: result.exitCode, stdout: null };
      }
      case 'reset':
        return this.reset(params);
      case 'dbExecute':
        await this.withEngine((e) => e.dbExecute(params));
        return {};
      case 'debugPanic':
        return this.withEngine((e) => e.debugPanic());
      case 'applyMigrations': {
        const result = await this.withEngine((e) => e.applyMigrations(params));
        this.releaseSqliteLock();
        if (this.inMigrateDev && result.appliedMigrationNames?.length) await this.warmMigrationSchemaCache(params);
        return result;
      }
      case 'devDiagnostic':
        this.inMigrateDev = true;
        return this.withEngine((e) => e.devDiagnostic(params));
      case 'markMigrationApplied':
        // the engine would create the migrations table when it finds none, but cannot tell
        // (see missingMigrationsTableIsEmpty): create it first, as the native engine does
        await this.withEngine(() => this.ensureMigrationsTable());
        return this.withEngine(async (e) => (await e.markMigrationApplied(params)) ?? {});
      case 'createMigration':
      case 'diagnoseMigrationHistory':
      case 'evaluateDataLoss':
      case 'introspect':
      case 'introspectSql':
      case 'markMigrationRolledBack':
      case 'schemaPush':
        return this.withEngine(async (e) => (await e[method](params)) ?? {});
      default: {
        const err = new Error(`The offline schema engine bridge does not support \`${method}\`.`);
        err.rpcCode = -32601;
        throw err;
      }
    }
  }

  /** `reset`: an empty database. The Wasm engine only deletes rows on SQLite, so drop everything. */
  async reset(params) {
    const url = this.datasource?.url;
    if (url && isSqliteUrl(url)) {
      // on a connection of its own, with the engine's closed (it is started again when needed)
      await this.stopEngine();
      const file = sqlitePath(url);
      if (file === ':memory:' || !existsSync(file)) return {};
      const external = new Set(params?.filter?.externalTables ?? []);
      const Database = require('better-sqlite3');
      const db = new Database(file, { timeout: 10_000 });
      try {
        db.pragma('foreign_keys = OFF');
        const objects = db
          .prepare("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' AND type IN ('view', 'trigger', 'table')")
          .all()
          .filter((o) => !external.has(o.name));
        const order = { trigger: 0, view: 1, table: 2 };
        objects.sort((a, b) => order[a.type] - order[b.type]);
        db.transaction(() => {
          for (const o of objects) db.exec(`DROP ${o.type.toUpperCase()} IF EXISTS ${quoteIdent(o.name)}`);
        })();
        db.exec('VACUUM');
      } finally {
        db.close();
      }
      return {};
    }
    await this.withEngine((e) => e.reset(params));
    this.releaseSqliteLock();
    return {};
  }
}

function send(msg) {
  process.stdout.write(`${JSON.stringify(msg)}\n`);
}

async function serve(args) {
  const bridge = new Bridge(args);
  const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
  // one request at a time, in order of arrival (the native engine serialises them too)
  let queue = Promise.resolve();
  rl.on('line', (line) => {
    if (!line.trim()) return;
    let msg;
    try {
      msg = JSON.parse(line);
    } catch {
      send({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } });
      return;
    }
    if (msg.method === undefined) {
      bridge.onResponse(msg);
      return;
    }
    queue = queue.then(async () => {
      try {
        const result = await bridge.call(msg.method, msg.params);
        if (msg.id !== undefined) send({ jsonrpc: '2.0', id: msg.id, result: result ?? {} });
      } catch (err) {
        log('ERROR', err?.message ?? String(err));
        if (msg.id === undefined) return;
        const error = err?.rpcCode ? { code: err.rpcCode, message: err.message } : rpcError(err, err?.registry);
        send({ jsonrpc: '2.0', id: msg.id, error });
        // after a panic the Wasm instance is unusable: exit like the native engine (101)
        if (error.data?.is_panic) {
          await bridge.stopEngine().catch(() => {});
          process.exit(101);
        }
      }
    });
  });
  rl.on('close', () => {
    queue.then(() => bridge.stopEngine()).finally(() => process.exit(0));
  });
}

/** `schema-engine cli <command>`: exit 0 on success; on failure, the CLI reads the error from stderr. */
async function runCli(args) {
  const url = args.datasource?.url;
  try {
    if (!url) throw new KnownError('P1012', 'missing --datasource with a url');
    switch (args.cli) {
      case 'can-connect-to-database':
        await canConnect(url);
        process.stdout.write('Connection successful\n');
        break;
      case 'create-database':
        process.stdout.write(`Database '${await createDatabase(url)}' was successfully created.\n`);
        break;
      case 'drop-database':
        await dropDatabase(url);
        process.stdout.write('The database was successfully dropped.\n');
        break;
      default:
        throw new Error(`unknown cli command: ${args.cli}`);
    }
    process.exit(0);
  } catch (err) {
    const fields = { message: err?.message ?? String(err) };
    if (err instanceof KnownError) fields.error_code = err.code;
    // the CLI skips the first stderr line and parses each other line as JSON
    process.stderr.write(
      `schema-engine (wasm bridge) cli ${args.cli} failed\n${JSON.stringify({ timestamp: new Date().toISOString(), level: 'ERROR', fields, target: 'schema_engine::logger' })}`,
    );
    process.exit(1);
  }
}

const args = parseArgs(process.argv.slice(2));
if (args.version) {
  const wasm = await loadWasm();
  process.stdout.write(`schema-engine-cli ${wasm.version()}\n`);
} else if (args.help) {
  process.stdout.write('schema-engine (wasm bridge): JSON-RPC on stdin/stdout; `cli can-connect-to-database|create-database|drop-database`\n');
} else if (args.cli) {
  await runCli(args);
} else {
  await serve(args);
}
