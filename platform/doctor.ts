/**
 * `steward doctor`: checks what Steward needs, each with a status (ok, warn, fail, skip), what
 * was found and, when something is wrong, one concrete line on how to fix it. Read-only: it
 * creates no database, registers nothing and starts nothing.
 *
 * Checks: configuration, Temporal reachable, namespace, search attributes, database reachable,
 * migrations applied, sandbox, model provider, model prices (a model without one counts tokens
 * only), Telegram and Discord tokens. `ok` is false when
 * any check fails; warnings (the embedded Temporal server not running, no sandbox) do not.
 * The report ends with one line naming the features this machine cannot offer (capabilities.ts).
 */
import { existsSync, readdirSync } from 'node:fs';
import { connect as netConnect } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import pg from 'pg';
import protoModule from '@temporalio/proto';
import { z } from 'zod';
import { databaseKind, pgConfig, sqlitePath } from '../domain/db.js';
import { sandboxAvailable } from '../domain/sandbox.js';
import { createPriceTable } from '../domain/budgets/prices.js';
import { ConfigError, loadConfig, type StewardConfig } from '../config/index.js';
import { connectTemporal, indexedValueTypeName, SEARCH_ATTRIBUTES } from './temporal-server.js';
import { unavailableFeatures, unavailableLine } from './capabilities.js';

const IndexedValueType = protoModule.temporal.api.enums.v1.IndexedValueType;

export const CHECK_STATUSES = ['ok', 'warn', 'fail', 'skip'] as const;
export type CheckStatus = (typeof CHECK_STATUSES)[number];

export const DoctorCheckSchema = z.object({
  /** Stable id: config, temporal, namespace, search-attributes, database, migrations, sandbox, model, prices, telegram, discord, inbox, mcp. */
  id: z.string(),
  title: z.string(),
  status: z.enum(CHECK_STATUSES),
  message: z.string(),
  /** One line on how to fix it; null when there is nothing to fix. */
  fix: z.string().nullable(),
});
export type DoctorCheck = z.infer<typeof DoctorCheckSchema>;

export const DoctorReportSchema = z.object({
  ok: z.boolean(),
  checks: z.array(DoctorCheckSchema),
  /** Features this machine cannot offer (no sandbox, no git), with why and the fix; empty when all work. */
  unavailable: z.array(z.object({ features: z.string(), reason: z.string(), fix: z.string() })),
});
export type DoctorReport = z.infer<typeof DoctorReportSchema>;

export interface DoctorOptions {
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Per network check (default 5 s). */
  timeoutMs?: number;
  /** Skip the sandbox probe (it starts bwrap). */
  skipSandbox?: boolean;
}

const TITLES: Record<string, string> = {
  config: 'Configuration',
  temporal: 'Temporal reachable',
  namespace: 'Temporal namespace',
  'search-attributes': 'Search attributes',
  database: 'Database reachable',
  migrations: 'Database migrations',
  sandbox: 'Sandbox (bubblewrap)',
  model: 'Model provider',
  telegram: 'Telegram bot token',
  discord: 'Discord bot token',
  inbox: 'Workspace inboxes (IMAP)',
  mcp: 'MCP servers',
  prices: 'Model prices',
};

const check = (id: string, status: CheckStatus, message: string, fix: string | null = null): DoctorCheck => ({ id, title: TITLES[id] ?? id, status, message, fix });

const projectRoot = fileURLToPath(new URL('../', import.meta.url));

/** Reject after `ms` with a message naming what took too long. */
async function within<T>(ms: number, what: string, p: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

/** Whether something accepts TCP connections at host:port. */
export function tcpProbe(address: string, timeoutMs: number): Promise<{ ok: true } | { ok: false; error: string }> {
  const i = address.lastIndexOf(':');
  const host = address.slice(0, i).replace(/^\[|\]$/g, '');
  const port = Number(address.slice(i + 1));
  return new Promise((resolve) => {
    const socket = netConnect({ host, port });
    const done = (r: { ok: true } | { ok: false; error: string }) => {
      socket.destroy();
      resolve(r);
    };
    socket.setTimeout(timeoutMs, () => done({ ok: false, error: `no answer within ${timeoutMs} ms` }));
    socket.once('connect', () => done({ ok: true }));
    socket.once('error', (err: NodeJS.ErrnoException) => done({ ok: false, error: err.code ?? err.message }));
  });
}

function errText(err: unknown, secrets: Array<string | undefined> = []): string {
  const e = err as { message?: string; cause?: { code?: string; message?: string }; code?: string | number; details?: string };
  let text = e.cause?.code ?? e.cause?.message ?? e.details ?? e.message ?? String(err);
  if (e.message && e.cause?.code && !e.message.includes(e.cause.code)) text = `${e.message} (${e.cause.code})`;
  for (const s of secrets) if (s) text = text.replaceAll(s, '***');
  return text.split('\n')[0]!.slice(0, 300).replace(/\.+$/, '');
}

function isNotFound(err: unknown): boolean {
  const e = err as { code?: number; message?: string; name?: string };
  return e.code === 5 || e.name === 'NamespaceNotFoundError' || /not ?found/i.test(e.message ?? '');
}

async function temporalChecks(cfg: StewardConfig, timeoutMs: number): Promise<DoctorCheck[]> {
  const ns = cfg.temporal.namespace;
  const explicit = cfg.temporal.address;
  const address = explicit ?? `127.0.0.1:${cfg.temporal.embedded.port}`;
  const skipped = (why: string) => [check('namespace', 'skip', why), check('search-attributes', 'skip', why)];
  const probe = await tcpProbe(address, timeoutMs);
  if (!probe.ok) {
    if (explicit) {
      return [
        check(
          'temporal',
          'fail',
          `Nothing answers at ${address} (TEMPORAL_ADDRESS): ${probe.error}.`,
          `Start the Temporal server at ${address} (locally: \`temporal server start-dev --port ${address.split(':').at(-1)}\`), correct TEMPORAL_ADDRESS, or unset it to use the embedded server \`./steward start\` runs.`,
        ),
        ...skipped('Temporal is not reachable.'),
      ];
    }
    return [
      check(
        'temporal',
        'warn',
        `TEMPORAL_ADDRESS is not set and the embedded Temporal server is not running at ${address} (${probe.error}).`,
        `\`./steward start\` starts the embedded server on port ${cfg.temporal.embedded.port} (STEWARD_TEMPORAL_PORT); or set TEMPORAL_ADDRESS to a running Temporal server.`,
      ),
      ...skipped('The embedded Temporal server is not running.'),
    ];
  }
  let conn: Awaited<ReturnType<typeof connectTemporal>>;
  try {
    conn = await within(timeoutMs * 2, 'connecting', connectTemporal(cfg.temporal, address));
  } catch (err) {
    return [
      check(
        'temporal',
        'fail',
        `Port ${address} is open, but the Temporal connection failed: ${errText(err, [cfg.temporal.apiKey])}.`,
        cfg.temporal.tls || cfg.temporal.apiKey
          ? 'Check TEMPORAL_TLS, TEMPORAL_TLS_CERT/KEY/CA, TEMPORAL_TLS_SERVER_NAME and TEMPORAL_API_KEY against the cluster.'
          : `Check that ${address} is a Temporal frontend (gRPC), and whether the cluster needs TLS (TEMPORAL_TLS=true) or an API key (TEMPORAL_API_KEY).`,
      ),
      ...skipped('Temporal is not reachable.'),
    ];
  }
  const { connection, nativeConnection } = conn;
  try {
    const out: DoctorCheck[] = [];
    try {
      const info = await within(timeoutMs, 'GetSystemInfo', connection.workflowService.getSystemInfo({}));
      out.push(check('temporal', 'ok', `Temporal at ${address}${explicit ? '' : ' (embedded server)'} answers${info.serverVersion ? ` (server ${info.serverVersion})` : ''}.`));
    } catch (err) {
      out.push(
        check('temporal', 'fail', `Temporal at ${address} did not answer GetSystemInfo: ${errText(err, [cfg.temporal.apiKey])}.`, 'Check the server\'s logs, and TEMPORAL_TLS / TEMPORAL_API_KEY if the cluster needs them.'),
        ...skipped('Temporal did not answer.'),
      );
      return out;
    }
    try {
      await within(timeoutMs, 'DescribeNamespace', connection.workflowService.describeNamespace({ namespace: ns }));
      out.push(check('namespace', 'ok', `Namespace ${ns} exists.`));
    } catch (err) {
      out.push(
        isNotFound(err)
          ? check('namespace', 'fail', `Namespace ${ns} does not exist on ${address}.`, `Create it: \`temporal operator namespace create --namespace ${ns} --address ${address}\` (Temporal Cloud: in the Cloud console), or set TEMPORAL_NAMESPACE to an existing one.`)
          : check('namespace', 'fail', `Namespace ${ns} could not be described: ${errText(err, [cfg.temporal.apiKey])}.`, 'Check that the API key or client certificate may read this namespace.'),
        check('search-attributes', 'skip', 'The namespace is not usable.'),
      );
      return out;
    }
    try {
      const { customAttributes } = await within(timeoutMs, 'ListSearchAttributes', connection.operatorService.listSearchAttributes({ namespace: ns }));
      const problems: string[] = [];
      const missing: string[] = [];
      for (const [name, type] of Object.entries(SEARCH_ATTRIBUTES)) {
        const want = IndexedValueType[indexedValueTypeName(type) as keyof typeof IndexedValueType];
        const have = customAttributes?.[name];
        if (have === undefined || have === null) missing.push(name);
        else if (have !== want) problems.push(`${name} is ${String(IndexedValueType[have as number] ?? have).replace('INDEXED_VALUE_TYPE_', '')}, expected ${type}`);
      }
      const all = Object.keys(SEARCH_ATTRIBUTES);
      if (missing.length === 0 && problems.length === 0) {
        out.push(check('search-attributes', 'ok', `All ${all.length} Steward search attributes are registered in ${ns} (${all.join(', ')}).`));
      } else {
        // the CLI pairs each --name with a --type, so one command per attribute
        const create = missing
          .map((n) => `temporal operator search-attribute create --namespace ${ns} --address ${address} --name ${n} --type ${SEARCH_ATTRIBUTES[n]}`)
          .join(' && ');
        out.push(
          check(
            'search-attributes',
            'fail',
            [missing.length ? `Missing in namespace ${ns}: ${missing.join(', ')}.` : '', problems.length ? `Wrong type: ${problems.join('; ')}.` : ''].filter(Boolean).join(' '),
            missing.length
              ? `Register them: \`${create}\` (\`./steward start\` with TEMPORAL_ADDRESS set registers them too).`
              : 'Steward needs these types: use a namespace where the names are free, or remove and re-create them with the expected type.',
          ),
        );
      }
    } catch (err) {
      out.push(check('search-attributes', 'fail', `Search attributes of ${ns} could not be listed: ${errText(err, [cfg.temporal.apiKey])}.`, 'Check that the API key or client certificate may use the operator service, or list them in the Temporal UI / Cloud console.'));
    }
    return out;
  } finally {
    await connection.close().catch(() => undefined);
    await nativeConnection.close().catch(() => undefined);
  }
}

interface MigrationRow {
  migration_name: string;
  finished_at: unknown;
  rolled_back_at: unknown;
}

const MIGRATIONS_QUERY = 'SELECT migration_name, finished_at, rolled_back_at FROM _prisma_migrations';

async function databaseChecks(cfg: StewardConfig, timeoutMs: number): Promise<DoctorCheck[]> {
  const url = cfg.databaseUrl;
  const kind = databaseKind(url);
  const shown = url.replace(/\/\/([^:/@]+):([^@]+)@/, '//$1:***@');
  let rows: MigrationRow[] | undefined;
  let tableMissing = false;
  const noTable = (err: unknown) => /no such table|does not exist/i.test(String((err as Error).message));
  if (kind === 'sqlite') {
    const file = path.resolve(sqlitePath(url));
    if (!existsSync(file)) {
      return [
        check('database', 'fail', `No SQLite database at ${file} (DATABASE_URL ${shown}).`, '`./steward migrate` creates and migrates it (`./steward start` does too); or correct DATABASE_URL.'),
        check('migrations', 'skip', 'There is no database.'),
      ];
    }
    let db: Database.Database;
    try {
      db = new Database(file, { readonly: true, fileMustExist: true, timeout: timeoutMs });
      db.prepare('SELECT 1').get();
    } catch (err) {
      return [
        check('database', 'fail', `The SQLite database ${file} cannot be read: ${errText(err)}.`, `Check the file's permissions and that it is a SQLite database (DATABASE_URL ${shown}).`),
        check('migrations', 'skip', 'The database is not reachable.'),
      ];
    }
    try {
      rows = db.prepare(MIGRATIONS_QUERY).all() as MigrationRow[];
    } catch (err) {
      if (noTable(err)) tableMissing = true;
      else rows = undefined;
    } finally {
      db.close();
    }
  } else {
    const client = new pg.Client({ ...pgConfig(url), Client: undefined, connectionTimeoutMillis: timeoutMs, query_timeout: timeoutMs } as pg.ClientConfig);
    try {
      await client.connect();
      await client.query('SELECT 1');
    } catch (err) {
      await client.end().catch(() => undefined);
      const u = new URL(url);
      return [
        check('database', 'fail', `PostgreSQL at ${shown} is not reachable: ${errText(err, [decodeURIComponent(u.password)])}.`, `Check that PostgreSQL runs (\`pg_isready -h ${u.hostname} -p ${u.port || 5432}\`) and DATABASE_URL's host, port, user, password and database.`),
        check('migrations', 'skip', 'The database is not reachable.'),
      ];
    }
    try {
      rows = (await client.query<MigrationRow>(MIGRATIONS_QUERY)).rows;
    } catch (err) {
      if (noTable(err)) tableMissing = true;
    } finally {
      await client.end().catch(() => undefined);
    }
  }
  const out: DoctorCheck[] = [check('database', 'ok', `${kind === 'sqlite' ? 'SQLite' : 'PostgreSQL'} database ${shown} is reachable.`)];
  const dir = path.join(projectRoot, 'prisma', kind, 'migrations');
  const wanted = readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => e.name)
    .sort();
  if (tableMissing || rows === undefined) {
    out.push(check('migrations', 'fail', `The database is not migrated: none of this release's ${wanted.length} migrations is applied${tableMissing ? ' (no _prisma_migrations table)' : ''}.`, '`./steward migrate` applies them (`./steward start` does too).'));
    return out;
  }
  const applied = new Set(rows.filter((r) => r.finished_at !== null && r.rolled_back_at === null).map((r) => r.migration_name));
  const failed = rows.filter((r) => r.finished_at === null && r.rolled_back_at === null).map((r) => r.migration_name);
  const pending = wanted.filter((m) => !applied.has(m));
  const unknown = [...applied].filter((m) => !wanted.includes(m));
  if (failed.length) {
    out.push(check('migrations', 'fail', `Migration ${failed.join(', ')} failed or is still running.`, `Inspect with \`DATABASE_URL=... npx prisma migrate status --config prisma.config.ts\`, fix the cause, mark it with \`prisma migrate resolve --rolled-back ${failed[0]}\`, then \`./steward migrate\`.`));
  } else if (pending.length) {
    out.push(check('migrations', 'fail', `${pending.length} of ${wanted.length} migrations are not applied: ${pending.join(', ')}.`, `\`./steward migrate\` applies them${kind === 'sqlite' ? ' (stop Steward first: SQLite migrations need the database to themselves)' : ''}.`));
  } else if (unknown.length) {
    out.push(check('migrations', 'warn', `All ${wanted.length} migrations are applied, and ${unknown.length} this release does not know (${unknown.join(', ')}): a newer Steward migrated this database.`, 'Run the newer Steward release against this database.'));
  } else {
    out.push(check('migrations', 'ok', `All ${wanted.length} migrations are applied (latest ${wanted.at(-1) ?? 'none'}).`));
  }
  return out;
}

async function sandboxCheck(): Promise<DoctorCheck> {
  const s = await sandboxAvailable();
  if (s.ok) return check('sandbox', 'ok', `bwrap ${s.version} (${s.bwrap}) starts a sandbox with no capabilities.`);
  return check(
    'sandbox',
    'warn',
    `No sandbox: ${s.reason}. Proposed commands (run_command) and repository changes are refused until there is one.`,
    'Install bubblewrap (`apt-get install bubblewrap`) and allow unprivileged user namespaces (`sysctl kernel.unprivileged_userns_clone=1`, or `kernel.apparmor_restrict_unprivileged_userns=0` on Ubuntu).',
  );
}

const PROVIDER_KEY_VAR: Record<string, string> = { openai: 'OPENAI_API_KEY', anthropic: 'ANTHROPIC_API_KEY', 'openai-compatible': 'STEWARD_MODEL_API_KEY' };
const PROVIDER_URL_VAR: Record<string, string> = { openai: 'OPENAI_BASE_URL', anthropic: 'ANTHROPIC_BASE_URL', 'openai-compatible': 'STEWARD_MODEL_BASE_URL' };

async function modelCheck(cfg: StewardConfig, timeoutMs: number): Promise<DoctorCheck> {
  const model = cfg.model.default;
  const provider = model.slice(0, model.indexOf(':'));
  const p = cfg.model.providers;
  let base: string;
  let headers: Record<string, string>;
  let key: string | undefined;
  if (provider === 'openai' && p.openai) {
    base = p.openai.baseURL ?? 'https://api.openai.com/v1';
    key = p.openai.apiKey;
    headers = { authorization: `Bearer ${key}` };
  } else if (provider === 'anthropic' && p.anthropic) {
    base = p.anthropic.baseURL ?? 'https://api.anthropic.com/v1';
    key = p.anthropic.apiKey;
    headers = { 'x-api-key': key, 'anthropic-version': '2023-06-01' };
  } else if (provider === 'openai-compatible' && p.openaiCompatible) {
    base = p.openaiCompatible.baseURL;
    key = p.openaiCompatible.apiKey;
    headers = key ? { authorization: `Bearer ${key}` } : {};
  } else {
    return check('model', 'skip', `The model ${model} has no configured provider: chat answers with setup help until one is set.`, 'Set OPENAI_API_KEY, ANTHROPIC_API_KEY or STEWARD_MODEL_BASE_URL (and STEWARD_MODEL to choose the model).');
  }
  const url = `${base.replace(/\/+$/, '')}/models`;
  let res: Response;
  try {
    res = await fetch(url, { headers, signal: AbortSignal.timeout(timeoutMs) });
  } catch (err) {
    return check('model', 'fail', `The ${provider} provider at ${base} is not reachable: ${errText(err, [key])}.`, `Start the model server or correct ${PROVIDER_URL_VAR[provider]} (now ${base}); check the network path to it.`);
  }
  await res.body?.cancel().catch(() => undefined);
  if (res.status === 401 || res.status === 403) {
    return check('model', 'fail', `The ${provider} provider at ${base} rejected the key (HTTP ${res.status}).`, `Set a valid ${PROVIDER_KEY_VAR[provider]}.`);
  }
  if (!res.ok) {
    return check('model', 'warn', `The ${provider} provider at ${base} answers, but GET /models gave HTTP ${res.status}; the key could not be verified.`, `Check ${PROVIDER_URL_VAR[provider]} (it should be the API base, ending in /v1 for OpenAI-style servers).`);
  }
  return check('model', 'ok', `The ${provider} provider at ${base} answers and accepts the key (model ${model}).`);
}

async function telegramCheck(cfg: StewardConfig, timeoutMs: number): Promise<DoctorCheck> {
  if (!cfg.telegram) return check('telegram', 'skip', 'TELEGRAM_BOT_TOKEN is not set.');
  const { token } = cfg.telegram;
  const root = (cfg.telegram.apiRoot ?? 'https://api.telegram.org').replace(/\/+$/, '');
  let res: Response;
  try {
    res = await fetch(`${root}/bot${token}/getMe`, { signal: AbortSignal.timeout(timeoutMs) });
  } catch (err) {
    return check('telegram', 'fail', `The Telegram Bot API at ${root} is not reachable: ${errText(err, [token])}.`, 'Check the network path to it, or TELEGRAM_API_ROOT if you use your own Bot API server.');
  }
  const body = (await res.json().catch(() => undefined)) as { ok?: boolean; result?: { username?: string }; description?: string } | undefined;
  if (res.status === 401 || res.status === 404) {
    return check('telegram', 'fail', `Telegram rejected TELEGRAM_BOT_TOKEN (HTTP ${res.status}${body?.description ? ` ${body.description}` : ''}).`, 'Get the bot\'s current token from @BotFather (/mybots, API Token) and set TELEGRAM_BOT_TOKEN.');
  }
  if (!res.ok || !body?.ok) {
    return check('telegram', 'fail', `Telegram getMe failed (HTTP ${res.status}${body?.description ? ` ${body.description}` : ''}).`, 'Try again later; if it persists, check TELEGRAM_API_ROOT and the token with @BotFather.');
  }
  return check('telegram', 'ok', `The token belongs to @${body.result?.username ?? '?'}.`);
}

async function discordCheck(cfg: StewardConfig, timeoutMs: number): Promise<DoctorCheck> {
  if (!cfg.discord) return check('discord', 'skip', 'DISCORD_BOT_TOKEN is not set.');
  const { token } = cfg.discord;
  const api = (cfg.discord.apiUrl ?? 'https://discord.com/api').replace(/\/+$/, '');
  let res: Response;
  try {
    res = await fetch(`${api}/v10/users/@me`, { headers: { authorization: `Bot ${token}` }, signal: AbortSignal.timeout(timeoutMs) });
  } catch (err) {
    return check('discord', 'fail', `The Discord API at ${api} is not reachable: ${errText(err, [token])}.`, 'Check the network path to it, or DISCORD_API_URL.');
  }
  const body = (await res.json().catch(() => undefined)) as { username?: string; message?: string } | undefined;
  if (res.status === 401 || res.status === 403) {
    return check('discord', 'fail', `Discord rejected DISCORD_BOT_TOKEN (HTTP ${res.status}${body?.message ? ` ${body.message}` : ''}).`, 'Reset the token in the Discord Developer Portal (your application, Bot, Reset Token) and set DISCORD_BOT_TOKEN.');
  }
  if (!res.ok) return check('discord', 'fail', `Discord GET /users/@me failed (HTTP ${res.status}).`, 'Try again later; if it persists, check DISCORD_API_URL.');
  return check('discord', 'ok', `The token belongs to the bot ${body?.username ?? '?'}.`);
}

interface InboxRow {
  workspace: string;
  host: string;
  port: number;
  user: string;
  lastError: string | null;
  lastErrorAt: unknown;
}

/**
 * The workspaces' IMAP inboxes as their poller last found them (read from the database: the
 * doctor connects to no mail server): each failing one (a refused login, no server) with its
 * error. Skipped when there is no database or none is set.
 */
export async function inboxCheck(cfg: StewardConfig, timeoutMs: number): Promise<DoctorCheck> {
  const sql = 'SELECT "workspace", "host", "port", "user", "lastError", "lastErrorAt" FROM "WorkspaceInbox" ORDER BY "workspace"';
  let rows: InboxRow[];
  try {
    if (databaseKind(cfg.databaseUrl) === 'sqlite') {
      const file = path.resolve(sqlitePath(cfg.databaseUrl));
      if (!existsSync(file)) return check('inbox', 'skip', 'There is no database.');
      const db = new Database(file, { readonly: true, fileMustExist: true, timeout: timeoutMs });
      try {
        rows = db.prepare(sql).all() as InboxRow[];
      } finally {
        db.close();
      }
    } else {
      const client = new pg.Client({ ...pgConfig(cfg.databaseUrl), Client: undefined, connectionTimeoutMillis: timeoutMs, query_timeout: timeoutMs } as pg.ClientConfig);
      try {
        await client.connect();
        rows = (await client.query<InboxRow>(sql)).rows;
      } finally {
        await client.end().catch(() => undefined);
      }
    }
  } catch (err) {
    const secret = databaseKind(cfg.databaseUrl) === 'sqlite' ? undefined : decodeURIComponent(new URL(cfg.databaseUrl).password);
    return check('inbox', 'skip', `Not read: ${errText(err, [secret])}.`);
  }
  if (rows.length === 0) return check('inbox', 'skip', 'No workspace has an inbox.');
  const failing = rows.filter((r) => r.lastError);
  if (failing.length === 0) return check('inbox', 'ok', `${rows.length} inbox${rows.length === 1 ? '' : 'es'} polled without error (${rows.map((r) => r.workspace).join(', ')}).`);
  const since = (v: unknown) => (v instanceof Date ? v.toISOString() : typeof v === 'number' ? new Date(v).toISOString() : String(v));
  return check(
    'inbox',
    'fail',
    failing.map((r) => `The inbox of workspace ${r.workspace} (${r.user} at ${r.host}:${r.port}) is failing since ${since(r.lastErrorAt)}: ${r.lastError}`).join('; '),
    `Correct it with \`steward workspaces inbox <name> set ...\` (a password: its STEWARD_INBOX_ variable in Steward's environment, then a restart); the error clears when a poll succeeds.`,
  );
}

/** Rows of a read-only query on Steward's database; undefined when there is no database yet. */
async function readRows<T>(cfg: StewardConfig, sql: string, timeoutMs: number): Promise<T[] | undefined> {
  if (databaseKind(cfg.databaseUrl) === 'sqlite') {
    const file = path.resolve(sqlitePath(cfg.databaseUrl));
    if (!existsSync(file)) return undefined;
    const db = new Database(file, { readonly: true, fileMustExist: true, timeout: timeoutMs });
    try {
      return db.prepare(sql).all() as T[];
    } finally {
      db.close();
    }
  }
  const client = new pg.Client({ ...pgConfig(cfg.databaseUrl), Client: undefined, connectionTimeoutMillis: timeoutMs, query_timeout: timeoutMs } as pg.ClientConfig);
  try {
    await client.connect();
    return (await client.query(sql)).rows as T[];
  } finally {
    await client.end().catch(() => undefined);
  }
}

interface McpRow {
  name: string;
  source: string;
  state: string;
  toolCount: number;
  lastError: string | null;
  checkedAt: unknown;
}

/**
 * The MCP servers as the workers last found them (read from the database: the doctor starts no
 * server): each with its state and tool count; a server that is down fails the check.
 */
export async function mcpCheck(cfg: StewardConfig, timeoutMs: number): Promise<DoctorCheck> {
  let rows: McpRow[] | undefined;
  try {
    rows = await readRows<McpRow>(cfg, 'SELECT "name", "source", "state", "toolCount", "lastError", "checkedAt" FROM "McpServer" ORDER BY "name"', timeoutMs);
  } catch (err) {
    const secret = databaseKind(cfg.databaseUrl) === 'sqlite' ? undefined : decodeURIComponent(new URL(cfg.databaseUrl).password);
    return check('mcp', 'skip', `Not read: ${errText(err, [secret])}.`);
  }
  if (rows === undefined) return check('mcp', 'skip', 'There is no database.');
  if (rows.length === 0) return check('mcp', 'skip', `No MCP server is registered${cfg.mcp.configFile ? ` (STEWARD_MCP_CONFIG: ${cfg.mcp.servers.length} in ${cfg.mcp.configFile}, written at start)` : ''}.`);
  const line = (r: McpRow) => `${r.name} ${r.state === 'ready' ? `ready, ${r.toolCount} tool${Number(r.toolCount) === 1 ? '' : 's'}` : r.state}${r.lastError && r.state !== 'ready' ? ` (${r.lastError.slice(0, 200)})` : ''}`;
  const down = rows.filter((r) => r.state === 'down');
  return check(
    'mcp',
    down.length ? 'fail' : 'ok',
    `${rows.length} MCP server${rows.length === 1 ? '' : 's'} as the workers last found them: ${rows.map(line).join('; ')}.`,
    down.length ? 'Check the registration (`steward mcp show <name>`, `steward mcp tools <name>` connects and lists its tools); a crashed server is restarted on its next use.' : null,
  );
}

/**
 * The models Steward is configured to call (the default model, the embedding model), and the
 * models the budget ledger has reserved calls for without a price (`seen`: a chat's or triage's
 * own model too), against the price table (the defaults with STEWARD_MODEL_PRICES merged over
 * them): a model without a price counts tokens only, so a money budget does not apply to it
 * (domain/budgets/).
 */
export function pricesCheck(cfg: Pick<StewardConfig, 'model' | 'retrieval'>, seen: readonly string[] = []): DoctorCheck {
  const prices = createPriceTable(cfg.model.prices);
  const models = [...new Set([cfg.model.default, ...(cfg.retrieval.embeddingModel ? [cfg.retrieval.embeddingModel] : [])])];
  const unpriced = [...new Set([...models, ...seen])].filter((m) => !prices.priceOf(m));
  if (unpriced.length === 0) return check('prices', 'ok', `Every configured model has a price (${models.join(', ')}): budgets count tokens and money.`);
  return check(
    'prices',
    'warn',
    `No price for ${unpriced.join(', ')}: ${unpriced.length === 1 ? 'its' : 'their'} calls count tokens only, and money budgets do not apply to them.`,
    `Set STEWARD_MODEL_PRICES (e.g. ${unpriced[0]}=2/8, USD per million input/output tokens) if a money budget should hold them.`,
  );
}

/** The prices check with the models the ledger reserved calls for without a price (read from the database; none when it cannot be read). */
export async function modelPricesCheck(cfg: StewardConfig, timeoutMs: number): Promise<DoctorCheck> {
  let seen: string[] = [];
  try {
    seen = ((await readRows<{ model: string }>(cfg, 'SELECT DISTINCT "model" FROM "BudgetReservation" WHERE "micros" IS NULL ORDER BY "model"', timeoutMs)) ?? []).map((r) => String(r.model));
  } catch {
    // no database yet, or not migrated: the configured models only (the database check says why)
  }
  return pricesCheck(cfg, seen);
}

/** Run every check. */
export async function runDoctor(opts: DoctorOptions = {}): Promise<DoctorReport> {
  const timeoutMs = opts.timeoutMs ?? 5000;
  let cfg: StewardConfig;
  try {
    cfg = loadConfig(opts.env ?? process.env, opts.cwd ?? process.cwd());
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    const checks = [
      check('config', 'fail', `${err.problems.length} setting(s) are invalid: ${err.problems.join('; ')}.`, 'Correct the listed variables (in the environment or the STEWARD_CONFIG file; docs/configuration.md documents them).'),
      ...Object.keys(TITLES)
        .filter((id) => id !== 'config')
        .map((id) => check(id, 'skip', 'The configuration is invalid.')),
    ];
    return { ok: false, checks, unavailable: [] };
  }
  const embeddings = cfg.retrieval.embeddingModel ? `hybrid search with embeddings ${cfg.retrieval.embeddingModel}` : 'full-text search, no embeddings';
  const configCheck = check('config', 'ok', `The configuration is valid (data directory ${cfg.dataDir}, model ${cfg.model.default}, ${embeddings}).`);
  const guard = async (ids: string[], p: Promise<DoctorCheck[]>): Promise<DoctorCheck[]> => {
    try {
      return await p;
    } catch (err) {
      return ids.map((id, i) => (i === 0 ? check(id, 'fail', `The check itself failed: ${errText(err)}.`, 'Run again with STEWARD_LOG_LEVEL=debug and report the error.') : check(id, 'skip', 'An earlier check failed.')));
    }
  };
  const [temporal, database, sandbox, model, prices, telegram, discord, inbox, mcp, unavailable] = await Promise.all([
    guard(['temporal', 'namespace', 'search-attributes'], temporalChecks(cfg, timeoutMs)),
    guard(['database', 'migrations'], databaseChecks(cfg, timeoutMs)),
    opts.skipSandbox ? Promise.resolve([check('sandbox', 'skip', 'Not checked (--skip-sandbox).')]) : guard(['sandbox'], sandboxCheck().then((c) => [c])),
    guard(['model'], modelCheck(cfg, timeoutMs).then((c) => [c])),
    guard(['prices'], modelPricesCheck(cfg, timeoutMs).then((c) => [c])),
    guard(['telegram'], telegramCheck(cfg, timeoutMs).then((c) => [c])),
    guard(['discord'], discordCheck(cfg, timeoutMs).then((c) => [c])),
    guard(['inbox'], inboxCheck(cfg, timeoutMs).then((c) => [c])),
    guard(['mcp'], mcpCheck(cfg, timeoutMs).then((c) => [c])),
    unavailableFeatures(opts.skipSandbox ? { sandbox: async () => ({ ok: true }) } : {}),
  ]);
  const checks = [configCheck, ...temporal, ...database, ...sandbox, ...model, ...prices, ...telegram, ...discord, ...inbox, ...mcp];
  return { ok: checks.every((c) => c.status !== 'fail'), checks, unavailable };
}

const MARK: Record<CheckStatus, string> = { ok: 'ok  ', warn: 'WARN', fail: 'FAIL', skip: 'skip' };

/** The report as text: one line per check, its fix under it. */
export function formatDoctor(r: DoctorReport): string {
  const width = Math.max(...r.checks.map((c) => c.title.length));
  const lines = r.checks.flatMap((c) => [`[${MARK[c.status]}] ${c.title.padEnd(width)}  ${c.message}`, ...(c.fix && c.status !== 'ok' ? [`       ${' '.repeat(width)}  fix: ${c.fix}`] : [])]);
  const counts = CHECK_STATUSES.map((s) => [s, r.checks.filter((c) => c.status === s).length] as const).filter(([, n]) => n > 0);
  lines.push('', `${r.ok ? 'Steward is ready' : 'Steward is NOT ready'}: ${counts.map(([s, n]) => `${n} ${s}`).join(', ')}.`);
  const unavailable = unavailableLine(r.unavailable);
  if (unavailable) lines.push(`Unavailable on this machine: ${unavailable}.`);
  return `${lines.join('\n')}\n`;
}
