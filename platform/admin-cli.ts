/**
 * The administration commands of the `steward` CLI: one handler per command and subcommand of
 * the command table (platform/cli-commands.ts), which commander parses. Identities, bindings,
 * triage and shells go through the administration service (services/admin.ts, as the HTTP
 * admin routes do), and budgets through the budget service (services/budgets.ts, as the HTTP
 * budget routes do), on the database directly, so the first overlord can be added before
 * Steward ever starts; everything else goes through the running Steward's API, because
 * deciding it tells people in chat or signals a workflow. Flag values are validated with the
 * same zod schemas as the API; a bad argument changes nothing and exits 2.
 */
import { randomUUID } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { createDb, migrateDatabase } from '../domain/db.js';
import { OPERATOR, RoleSchema, type Actor } from '../common/roles.js';
import { ChatIdSchema, ModelRefSchema } from '../common/schemas.js';
import { createAdminService, type AdminService } from '../services/admin.js';
import type { Client } from '@temporalio/client';
import { wakeBudgetWaiters } from '../services/budgets/waiters.js';
import { createBudgetService, type BudgetService, type BudgetView } from '../services/budgets.js';
import { ServiceInputError, type Requester } from '../services/requests.js';
import { parseInstant } from '../services/receipts.js';
import { parseDuration, type StewardConfig } from '../config/index.js';
import { runCommand, UsageError, usageOf, type HandlersOf } from './cli-commands.js';

export interface CliIo {
  config: () => StewardConfig;
  out: (s: string) => void;
  err: (s: string) => void;
  /** Override the API base URL and token (tests; `--url`, `--token`). */
  api?: { url: string; token: string };
}

/** Who the command line acts as in receipts and rows. */
const CLI: Requester = { id: 'cli', name: 'cli' };
/** The command line where the service asks for an Actor (a raise): the operator, named cli. */
const CLI_ACTOR: Actor = { ...OPERATOR, name: 'cli' };

function check<T>(schema: z.ZodType<T>, value: unknown, what: string): T {
  const r = schema.safeParse(value);
  if (!r.success) throw new UsageError(`${what}: ${r.error.issues[0]?.message ?? 'invalid'}`);
  return r.data;
}

/** The administration service on the configured database (migrated first), for `fn`. */
async function withAdmin<T>(io: CliIo, fn: (admin: AdminService) => Promise<T>): Promise<T> {
  const cfg = io.config();
  await migrateDatabase(cfg.databaseUrl);
  const db = createDb(cfg.databaseUrl);
  try {
    return await fn(createAdminService(db));
  } finally {
    await db.$disconnect();
  }
}

/**
 * The budget service on the configured database (migrated first), for `fn`. A change wakes the
 * chat turns waiting on the budget through the configured Temporal, reached only then; when it is
 * not reachable (Steward not running) or the wake-up fails, the change stands and the waiting
 * turns re-check by themselves (within BUDGET_RECHECK_MS).
 */
async function withBudgets<T>(io: CliIo, fn: (budgets: BudgetService) => Promise<T>): Promise<T> {
  const cfg = io.config();
  await migrateDatabase(cfg.databaseUrl);
  const db = createDb(cfg.databaseUrl);
  let temporal: { client: Client; close(): Promise<void> } | undefined;
  const wakeWaiters = async (budgetId: string): Promise<number> => {
    if (!temporal) {
      const { openTemporal } = await import('./ops-cli.js');
      const opened = await openTemporal(cfg, undefined);
      if ('error' in opened) throw new Error(opened.error);
      temporal = opened;
    }
    return wakeBudgetWaiters(temporal.client, cfg.temporal.namespace, budgetId);
  };
  try {
    // a failed wake-up is not the change's failure: the waiting turns re-check by themselves
    return await fn(createBudgetService(db, { wakeBudgetWaiters: wakeWaiters }));
  } finally {
    await temporal?.close().catch(() => undefined);
    await db.$disconnect();
  }
}

/** `--tokens`/`--money` as a number when it reads as one; otherwise as given, for the budget's schema to refuse by name. */
const numberFlag = (v: string | undefined): number | string | undefined => (v === undefined ? undefined : /^\s*[0-9]+(\.[0-9]+)?\s*$/.test(v) ? Number(v) : v);

/** A budget's amounts for the table: `1000 tokens`, `$5.00`, both, or `-`. */
const amounts = (tokens: number | null, money: number | null) => [tokens === null ? '' : `${tokens} tokens`, money === null ? '' : `$${money.toFixed(2)}`].filter(Boolean).join(' + ') || '-';

function budgetRow(b: BudgetView): string[] {
  const u = b.usage;
  return [
    b.id,
    b.scope === 'installation' ? 'installation' : `${b.scope} ${b.scopeId ?? ''}`,
    // a raise of the current period shows beside the limit
    `${amounts(b.tokens, b.money)}${u.raised.tokens || u.raised.money ? ` (+${amounts(u.raised.tokens || null, u.raised.money || null)} raised)` : ''}`,
    b.period === 'none' ? 'total' : b.period === 'window' ? u.period : `${b.period} (${b.timezone})`,
    amounts(b.tokens === null ? null : u.used.tokens, b.money === null ? null : u.used.money),
    amounts(b.tokens === null ? null : u.reserved.tokens, b.money === null ? null : u.reserved.money),
    amounts(u.left.tokens, u.left.money),
    u.renews ?? '-',
    b.source,
  ];
}

type Api = { url: string; token: string };
type ApiFlags = { url?: string; token?: string };
type Reply = { status: number; json: Record<string, unknown> };

async function apiTarget(io: CliIo, values: ApiFlags): Promise<Api> {
  if (io.api) return io.api;
  const cfg = io.config();
  let token = values.token ?? cfg.http.apiToken;
  if (!token) {
    try {
      token = (await readFile(path.join(cfg.dataDir, 'api-token'), 'utf8')).trim();
    } catch {
      throw new UsageError('no API token: start Steward first (it saves one in the data directory), or pass --token');
    }
  }
  const host = cfg.http.host === '0.0.0.0' ? '127.0.0.1' : cfg.http.host;
  return { url: (values.url ?? `http://${host}:${cfg.http.port}`).replace(/\/$/, ''), token };
}

/** A request to the running API; an unreachable server or a refused token is a usage error. */
async function fetchApi(target: Api, method: string, route: string, body?: unknown, headers: Record<string, string> = {}): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(`${target.url}${route}`, {
      method,
      headers: { authorization: `Bearer ${target.token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...headers },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
  } catch {
    throw new UsageError(`cannot reach Steward at ${target.url}: is it running? (./steward start)`);
  }
  if (res.status === 401) throw new UsageError('the API token was refused (check STEWARD_API_TOKEN or --token)');
  return res;
}

async function callApi(target: Api, method: string, route: string, body?: unknown, headers?: Record<string, string>): Promise<Reply> {
  const res = await fetchApi(target, method, route, body, headers);
  return { status: res.status, json: (await res.json().catch(() => ({}))) as Record<string, unknown> };
}

/** A request to the running API named by the command's flags (or the machine's own). */
async function api(io: CliIo, values: ApiFlags, method: string, route: string, body?: unknown, headers?: Record<string, string>): Promise<Reply> {
  return callApi(await apiTarget(io, values), method, route, body, headers);
}

/** A GET of a text answer (a report as Markdown or JSONL): its text, or the JSON refusal. */
async function callApiText(target: Api, route: string): Promise<Reply> {
  const res = await fetchApi(target, 'GET', route);
  const text = await res.text();
  if (res.ok) return { status: res.status, json: { text } };
  try {
    return { status: res.status, json: JSON.parse(text) as Record<string, unknown> };
  } catch {
    return { status: res.status, json: { error: text } };
  }
}

/** `steward replay turns`: the request body from the flags, as given (the API checks it whole: the same errors as over HTTP). */
async function replayBody(values: Record<string, string | boolean | undefined>): Promise<Record<string, unknown>> {
  const str = (k: string) => (typeof values[k] === 'string' ? (values[k] as string) : undefined);
  // a number when it reads as one; otherwise as given, for the API to refuse by name
  const num = (k: string) => {
    const v = str(k);
    return v === undefined ? undefined : /^\s*-?\d+\s*$/.test(v) ? Number(v) : v;
  };
  // a time when it reads as one (ISO, or a duration back from now); otherwise as given
  const time = (k: string) => {
    const v = str(k);
    return v === undefined ? undefined : (parseInstant(v)?.toISOString() ?? v);
  };
  const opt = (o: Record<string, unknown>) => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
  const selection = opt({
    ...(str('turn') !== undefined ? { turnId: str('turn') } : {}),
    ...(str('chat') !== undefined ? { chatId: str('chat'), platform: str('platform'), account: str('account'), since: time('since'), until: time('until') ?? (str('since') !== undefined ? new Date().toISOString() : undefined) } : {}),
    ...(str('objective') !== undefined ? { objectiveId: str('objective'), last: num('last') } : {}),
    ...(str('sample') !== undefined ? { sample: opt({ size: num('sample'), since: time('since'), until: time('until'), seed: num('seed') }) } : {}),
  });
  let systemPrompt: string | undefined;
  const file = str('system-prompt-file');
  if (file !== undefined) {
    try {
      systemPrompt = await readFile(file, 'utf8');
    } catch (err) {
      throw new UsageError(`--system-prompt-file: cannot read ${file}: ${(err as Error).message}`);
    }
  }
  const tools = str('approval-tools');
  const alternative = opt({
    model: str('model'),
    systemPrompt,
    skills: str('skills'),
    approvalTools: tools === undefined ? undefined : tools.split(',').map((t) => t.trim()).filter(Boolean),
  });
  return opt({ selection, alternative, concurrency: num('concurrency') });
}

/** Print an API refusal; the exit code: 2 for bad input, 1 otherwise. */
function apiFailure(io: CliIo, r: Reply): number {
  io.err(`${String(r.json.error ?? `failed (${r.status})`)}\n`);
  return r.status === 400 ? 2 : 1;
}

/** Print `ok(json)` when the API answered `okStatus` (default: any success), else the refusal. */
function done(io: CliIo, r: Reply, ok: (j: Record<string, unknown>) => string, okStatus?: number): number {
  if (okStatus === undefined ? r.status >= 400 : r.status !== okStatus) return apiFailure(io, r);
  io.out(ok(r.json));
  return 0;
}

/** Print the API's refusal with exit 1 (a 400 too), as pairing, approvals and repos always did. */
function refused(io: CliIo, r: Reply): number {
  io.err(`${String(r.json.error ?? `failed (${r.status})`)}\n`);
  return 1;
}

function table(rows: string[][]): string {
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length))) ?? [];
  return `${rows.map((r) => r.map((c, i) => c.padEnd(widths[i] ?? 0)).join('  ').trimEnd()).join('\n')}\n`;
}

/** A JSON file named by `--file`. */
async function jsonFile(file: string): Promise<Record<string, unknown>> {
  try {
    return JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
  } catch (err) {
    throw new UsageError(`--file: cannot read ${file} as JSON: ${(err as Error).message}`);
  }
}

/** `--flag a,b` as a list (absent: undefined). */
const listOf = (v: string | undefined): string[] | undefined => (v === undefined ? undefined : v.split(',').map((x) => x.trim()).filter(Boolean));
/** `NAME=VALUE` flags as a record. */
function pairs(given: string[] | undefined, flag: string, expected: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of given ?? []) {
    const m = /^([^=]+)=(.+)$/.exec(e);
    if (!m) throw new UsageError(`${flag}: expected ${expected} (got ${e})`);
    out[m[1]!] = m[2]!;
  }
  return out;
}

const Name = z.string().min(1).max(64);
const ChangeIdArg = z.string().regex(/^chg-[a-f0-9]{12}$/, 'a change id looks like chg-0123456789ab');
const MemoryIdArg = z.string().regex(/^m-[a-z0-9]{8}$/, 'a memory id looks like m-1a2b3c4d');
const TaskIdArg = z.string().regex(/^t-[a-z0-9]{8}$/i, 'a task id looks like t-1a2b3c4d');
const ApprovalIdArg = z.string().regex(/^[a-z0-9]{4,16}$/i, 'an approval id is 8 letters and digits');
const PairingCodeArg = z.string().regex(/^[A-Za-z0-9-]{4,16}$/, 'a pairing code is 8 letters and digits');

type ObjectiveView = { id: string; name: string; paused: boolean; schedule: { every?: string; cron?: string | string[]; timezone?: string }; triggers?: { webhook: boolean; watch: string | null; email: string | null }; nextRuns: string[]; status?: string; lastRun: { status: string } | null };
const when = (o: ObjectiveView) =>
  [
    o.schedule.every ? `every ${o.schedule.every}` : o.schedule.cron !== undefined ? `cron ${String(o.schedule.cron)}` : '',
    o.triggers?.webhook ? 'webhook' : '',
    o.triggers?.watch ? `watch ${o.triggers.watch}` : '',
    o.triggers?.email ? `email ${o.triggers.email}` : '',
  ].filter(Boolean).join(', ') || '-';
const schedule = (v: { every?: string; cron?: string; timezone?: string; jitter?: string }) => ({
  ...(v.every ? { every: v.every } : {}),
  ...(v.cron ? { cron: v.cron } : {}),
  ...(v.timezone ? { timezone: v.timezone } : {}),
  ...(v.jitter ? { jitter: v.jitter } : {}),
});
const objective = (id: string | undefined) => `/api/v1/objectives/${encodeURIComponent(check(Name, id, 'ID'))}`;
/** pause, resume, trigger, skip-missed, backfill: a POST to the objective's action. */
async function objectiveAction(io: CliIo, values: ApiFlags, id: string | undefined, action: string, body?: unknown): Promise<number> {
  const r = await api(io, values, 'POST', `${objective(id)}/${action}`, body);
  return done(io, r, (j) => `${String(j.name)}: ${action} done.\n`, 200);
}

type TaskView = { id: string; lane: string; priority: string; status: string; dueAt: string | null; sender: string; assignee: string | null; text: string; chat: { platform: string; chatId: string } };
const task = (id: string | undefined) => `/api/v1/tasks/${encodeURIComponent(check(TaskIdArg, id, 'ID').toLowerCase())}`;
/** A task the API answered with: JSON with --json, else one line. */
const taskDone = (io: CliIo, r: Reply, ok: number, json: boolean | undefined, line: (t: TaskView) => string) => done(io, r, (j) => (json ? `${JSON.stringify(j, null, 2)}\n` : `${line(j as unknown as TaskView)}\n`), ok);

const workspace = (name: string | undefined) => `/api/v1/workspaces/${encodeURIComponent(check(Name, name, 'NAME'))}`;
const chatOf = (v: { chat?: string; platform?: string; account?: string }) => ({ chatId: v.chat, ...(v.platform ? { platform: v.platform } : {}), ...(v.account ? { account: v.account } : {}) });
const mcpServer = (name: string | undefined) => `/api/v1/mcp/servers/${encodeURIComponent(check(Name, name, 'NAME'))}`;
const memory = (id: string | undefined) => `/api/v1/memories/${check(MemoryIdArg, id, 'ID')}`;

/** `steward workspaces inbox NAME set|show|clear`: the workspace's IMAP inbox (the API checks every field). */
function inboxShown(j: Record<string, unknown>): string {
  const m = (j.messages ?? {}) as { stored?: number; failed?: number };
  return [
    `Inbox of workspace ${String(j.workspace)}: ${String(j.user)} at ${String(j.host)}:${String(j.port)} (tls ${String(j.tls)}), folder ${String(j.folder)}, password from ${String(j.passwordRef)}`,
    `Messages: ${m.stored ?? 0} stored, ${m.failed ?? 0} failed; last UID ${String(j.lastUid)}${j.uidValidity ? ` (UIDVALIDITY ${String(j.uidValidity)})` : ''}`,
    j.lastError ? `Failing since ${String(j.lastErrorAt)}: ${String(j.lastError)}` : `Last good poll: ${j.lastSuccessAt ? String(j.lastSuccessAt) : 'none yet'}`,
  ].join('\n');
}

const HANDLERS = {
  identities: {
    list: ({ io }) =>
      withAdmin(io, async (admin) => {
        const rows = await admin.listIdentities();
        io.out(table([['ID', 'NAME', 'ROLE', 'ACCOUNTS'], ...rows.map((i) => [i.id, i.name, i.role, i.accounts.map((a) => `${a.platform}:${a.userId}`).join(' ')])]));
        return 0;
      }),
    add: async ({ values, io }) => {
      const name = check(z.string().trim().min(1, 'give --name').max(200), values.name ?? '', '--name');
      const role = check(RoleSchema, values.role, '--role');
      const accounts = [
        ...(values.telegram ?? []).map((id) => ({ platform: 'telegram' as const, userId: check(z.string().regex(/^\d{1,20}$/, 'a Telegram user id is a number'), id, '--telegram') })),
        ...(values.discord ?? []).map((id) => ({ platform: 'discord' as const, userId: check(z.string().regex(/^\d{5,25}$/, 'a Discord user id is a number'), id, '--discord') })),
      ];
      if (accounts.length === 0) throw new UsageError('give at least one account: --telegram <user id> or --discord <user id>');
      return withAdmin(io, async (admin) => {
        try {
          const { id } = await admin.addIdentity(CLI, { name, role, accounts });
          io.out(`Added ${name} (${role}), id ${id}.\n`);
          return 0;
        } catch (err) {
          if (!(err instanceof ServiceInputError)) throw err;
          io.err(`Not added: ${err.message}.\n`);
          return 1;
        }
      });
    },
    'set-role': async ({ args: [id = '', roleArg], io }) => {
      const role = check(RoleSchema, roleArg, 'ROLE');
      return withAdmin(io, async (admin) => {
        const r = await admin.changeIdentity(CLI, id, { role });
        if (!r) {
          io.err(`No identity ${id}.\n`);
          return 1;
        }
        io.out(`${r.before.name}: ${r.before.role} -> ${role}.\n`);
        return 0;
      });
    },
    remove: ({ args: [id = ''], io }) =>
      withAdmin(io, async (admin) => {
        if (!(await admin.removeIdentity(CLI, id))) {
          io.err(`No identity ${id}.\n`);
          return 1;
        }
        io.out(`Removed ${id}.\n`);
        return 0;
      }),
  },

  bindings: {
    list: ({ io }) =>
      withAdmin(io, async (admin) => {
        const rows = await admin.listBindings();
        const triage = new Map((await admin.triageSettings()).map((t) => [t.bindingId, t]));
        const triageOf = (id: string) => (triage.get(id)?.enabled ? `on${triage.get(id)?.model ? ` (${triage.get(id)?.model})` : ''}` : '');
        io.out(table([['ID', 'PLATFORM', 'ACCOUNT', 'CHAT', 'MODE', 'NAME', 'ADMIN', 'TRIAGE'], ...rows.map((b) => [b.id, b.platform, b.account, b.chatId, b.mode, b.name ?? '', b.adminChannel ? 'yes' : '', triageOf(b.id)])]));
        return 0;
      }),
    add: async ({ values, io }) => {
      const platform = check(z.enum(['telegram', 'discord', 'openharness']), values.platform, '--platform');
      const chatId = check(ChatIdSchema, values.chat, '--chat');
      const account = check(z.union([ChatIdSchema, z.literal('*')]), values.account ?? '*', '--account');
      const mode = values.mode === undefined ? undefined : check(z.enum(['mention', 'all']), values.mode, '--mode');
      const name = values.name === undefined ? undefined : check(z.string().regex(/^[a-z0-9][a-z0-9_-]{0,31}$/, 'a name uses lowercase letters, digits, - and _'), values.name, '--name');
      const model = values.model === undefined ? undefined : check(ModelRefSchema, values.model, '--model');
      return withAdmin(io, async (admin) => {
        try {
          const b = await admin.bind(CLI, { platform, account, chatId, ...(mode ? { mode } : {}), ...(name ? { name } : {}), ...(model ? { model } : {}), ...(values['admin-channel'] ? { adminChannel: true } : {}) });
          io.out(`Bound ${platform} chat ${chatId} (${b.mode}${b.name ? `, "${b.name}"` : ''}${b.adminChannel ? ', admin channel' : ''}), id ${b.id}.\n`);
          return 0;
        } catch (err) {
          if (!(err instanceof ServiceInputError)) throw err;
          io.err(`Not bound: ${err.message}.\n`);
          return 1;
        }
      });
    },
    triage: async ({ args: [id = '', state], values, io }) => {
      if ((state !== 'on' && state !== 'off') || (state === 'off' && values.model !== undefined)) throw new UsageError(`usage: ${usageOf('bindings')}`);
      const model = values.model === undefined ? undefined : check(ModelRefSchema, values.model, '--model');
      return withAdmin(io, async (admin) => {
        const r = await admin.setTriage(CLI, id, { enabled: state === 'on', ...(model ? { model } : {}) });
        if (!r) {
          io.err(`No binding ${id}.\n`);
          return 1;
        }
        const { binding: b, setting: t } = r;
        io.out(t.enabled ? `Triage on for ${b.platform} chat ${b.chatId}${t.model ? ` (model ${t.model})` : ''}.\n` : `Triage off for ${b.platform} chat ${b.chatId}.\n`);
        return 0;
      });
    },
    remove: ({ args: [id = ''], io }) =>
      withAdmin(io, async (admin) => {
        if (!(await admin.unbind(CLI, id))) {
          io.err(`No binding ${id}.\n`);
          return 1;
        }
        io.out(`Removed binding ${id}.\n`);
        return 0;
      }),
  },

  budgets: {
    list: ({ values, io }) =>
      withBudgets(io, async (budgets) => {
        const rows = await budgets.list();
        if (values.json) io.out(`${JSON.stringify({ budgets: rows }, null, 2)}\n`);
        else io.out(rows.length === 0 ? 'No budgets.\n' : table([['ID', 'SCOPE', 'LIMIT', 'PERIOD', 'USED', 'RESERVED', 'LEFT', 'RENEWS', 'SOURCE'], ...rows.map(budgetRow)]));
        return 0;
      }),
    set: ({ args: [id = ''], values, io }) => {
      const input = {
        scope: values.scope,
        ...(values['scope-id'] !== undefined ? { scopeId: values['scope-id'] } : {}),
        ...(values.tokens !== undefined ? { tokens: numberFlag(values.tokens) } : {}),
        ...(values.money !== undefined ? { money: numberFlag(values.money) } : {}),
        ...(values.period !== undefined ? { period: values.period } : {}),
        ...(values.timezone !== undefined ? { timezone: values.timezone } : {}),
      };
      return withBudgets(io, async (budgets) => {
        try {
          const { created, budget: b } = await budgets.set(CLI, id, input, 'cli');
          io.out(`${created ? 'Defined' : 'Changed'} the budget ${b.id}: ${budgetRow(b).slice(1, 4).join(', ')}; ${amounts(b.usage.left.tokens, b.usage.left.money)} left${b.usage.renews ? ` until ${b.usage.renews}` : ''}.\n`);
          return 0;
        } catch (err) {
          if (!(err instanceof ServiceInputError)) throw err;
          if (err.status === 400) throw new UsageError(err.message);
          io.err(`${err.message}.\n`);
          return 1;
        }
      });
    },
    remove: ({ args: [id = ''], io }) =>
      withBudgets(io, async (budgets) => {
        try {
          if (!(await budgets.remove(CLI, id))) {
            io.err(`No budget ${id}.\n`);
            return 1;
          }
        } catch (err) {
          if (!(err instanceof ServiceInputError)) throw err;
          io.err(`${err.message}.\n`);
          return 1;
        }
        io.out(`Removed the budget ${id} and its usage.\n`);
        return 0;
      }),
    raise: ({ args: [id = ''], values, io }) => {
      if (values.tokens === undefined && values.money === undefined) throw new UsageError(`usage: ${usageOf('budgets')} (raise: --tokens N, --money USD or both)`);
      const amount = {
        ...(values.tokens !== undefined ? { tokens: numberFlag(values.tokens) as number } : {}),
        ...(values.money !== undefined ? { money: numberFlag(values.money) as number } : {}),
      };
      return withBudgets(io, async (budgets) => {
        try {
          const r = await budgets.raise({ budgetId: id, ...amount, by: CLI_ACTOR });
          io.out(`${r.message}\n`);
          return 0;
        } catch (err) {
          if (!(err instanceof ServiceInputError)) throw err;
          if (err.status === 400) throw new UsageError(err.message);
          io.err(`${err.message}\n`);
          return 1;
        }
      });
    },
  },

  shells: {
    issue: async ({ args: [name = ''], values, io }) => {
      const role = values.role === undefined ? undefined : check(RoleSchema, values.role, '--role');
      return withAdmin(io, async (admin) => {
        try {
          const s = await admin.issueShell(CLI, { name, ...(role ? { role } : {}), ...(values.identity ? { identityId: values.identity } : {}) });
          io.out(`Issued the OpenHarness shell "${s.name}" (id ${s.id}, identity ${s.identityId}).\nIts token, shown once (Authorization: Bearer <token> on POST /api/openharness/v1):\n${s.token}\n`);
          return 0;
        } catch (err) {
          if (err instanceof ServiceInputError) throw new UsageError(err.message);
          throw err;
        }
      });
    },
    list: ({ io }) =>
      withAdmin(io, async (admin) => {
        const rows = await admin.listShells();
        io.out(table([['ID', 'NAME', 'IDENTITY', 'CREATED', 'REVOKED'], ...rows.map((r) => [r.id, r.name, r.identityId, r.createdAt.toISOString(), r.revokedAt ? r.revokedAt.toISOString() : ''])]));
        return 0;
      }),
    revoke: ({ args: [name = ''], io }) =>
      withAdmin(io, async (admin) => {
        const r = await admin.revokeShell(CLI, name);
        if (!r) {
          io.err(`No shell ${name}.\n`);
          return 1;
        }
        io.out(r.alreadyRevoked ? `The shell "${r.name}" was already revoked.\n` : `Revoked the shell "${r.name}": its token no longer works.\n`);
        return 0;
      }),
  },

  pairing: {
    list: async ({ values, io }) => {
      const r = await api(io, values, 'GET', '/api/v1/pairings');
      const rows = (r.json.pairings ?? []) as Array<{ displayName: string; platform: string; userId: string; expiresAt: string }>;
      io.out(rows.length === 0 ? 'No pending pairing requests.\n' : table([['NAME', 'PLATFORM', 'USER', 'EXPIRES'], ...rows.map((p) => [p.displayName, p.platform, p.userId, p.expiresAt])]));
      return 0;
    },
    approve: async ({ args: [code, role], values, io }) => decidePairing(io, values, code, check(RoleSchema, role, 'ROLE')),
    deny: async ({ args: [code], values, io }) => decidePairing(io, values, code, undefined),
  },

  approvals: {
    list: async ({ values, io }) => {
      const status = values.status === undefined ? 'pending' : check(z.enum(['pending', 'approved', 'denied', 'expired', 'cancelled']), values.status, '--status');
      const r = await api(io, values, 'GET', `/api/v1/approvals?status=${status}`);
      const rows = (r.json.approvals ?? []) as Array<{ id: string; tool: string; summary: string; status: string; deadline: string }>;
      io.out(rows.length === 0 ? `No ${status} approvals.\n` : table([['ID', 'STATUS', 'DEADLINE', 'ACTION'], ...rows.map((a) => [a.id, a.status, a.deadline, a.summary.slice(0, 100)])]));
      return 0;
    },
    approve: async ({ args: [id], values, io }) => decideApproval(io, values, id, 'approve', undefined),
    deny: async ({ args: [id], values, io }) => decideApproval(io, values, id, 'deny', values.reason === undefined ? undefined : check(z.string().trim().min(1).max(500), values.reason, '--reason')),
  },

  inbox: {
    list: async ({ values, io }) => {
      const kind = values.kind === undefined ? undefined : check(z.enum(['approval', 'change', 'pairing', 'memory', 'task', 'mcp']), values.kind, '--kind');
      const r = await api(io, values, 'GET', `/api/v1/inbox${kind ? `?kind=${kind}` : ''}`);
      if (r.status !== 200) return refused(io, r);
      const rows = (r.json.items ?? []) as Array<{ id: string; status: string; created: string; askedBy: string | null; title: string; actions: string[] }>;
      io.out(rows.length === 0 ? 'Nothing waits for a decision.\n' : table([['ID', 'STATUS', 'CREATED', 'ASKED BY', 'MAY', 'WHAT'], ...rows.map((i) => [i.id, i.status, i.created, i.askedBy ?? '-', i.actions.join(',') || '-', i.title.slice(0, 100)])]));
      return 0;
    },
    decide: async ({ args: [id, decision], values, io }) => {
      if (!id || !decision) throw new UsageError(`usage: ${usageOf('inbox')}`);
      const body = { decision, ...(values.reason !== undefined ? { reason: values.reason } : {}), ...(values.role !== undefined ? { role: values.role } : {}), ...(values.code !== undefined ? { code: values.code } : {}) };
      const r = await api(io, values, 'POST', `/api/v1/inbox/${encodeURIComponent(id)}/decision`, body);
      return r.status === 200 ? done(io, r, (j) => `${String(j.message)}\n`) : refused(io, r);
    },
  },

  replay: {
    fork: async ({ values, io }) => {
      const chat = check(ChatIdSchema, values.chat, '--chat');
      const body = {
        turnId: check(z.string().min(1).max(400), values.turn, '--turn'),
        ...(values['new-chat'] !== undefined ? { newChatId: check(ChatIdSchema, values['new-chat'], '--new-chat') } : {}),
        ...(values.platform !== undefined ? { platform: values.platform } : {}),
        ...(values.account !== undefined ? { account: values.account } : {}),
      };
      // one key per invocation: a retried request makes no second fork
      const r = await api(io, values, 'POST', `/api/v1/chats/${encodeURIComponent(chat)}/fork`, body, { 'idempotency-key': randomUUID() });
      return done(io, r, (j) => `Forked ${chat} before ${body.turnId} into chat ${String(j.chatId)} (${String(j.copied)} messages copied; session ${String(j.sessionId)}).\n`, 201);
    },
    turns: async ({ values, io }) => {
      // one key per invocation: a retried request starts no second replay
      const r = await api(io, values, 'POST', '/api/v1/replays', await replayBody(values), { 'idempotency-key': randomUUID() });
      if (r.status !== 202) return apiFailure(io, r);
      const id = String(r.json.id);
      if (!values.wait) {
        if (values.json) io.out(`${JSON.stringify(r.json)}\n`);
        else io.out(`Replay ${id} started: ${String(r.json.turns)} turn${r.json.turns === 1 ? '' : 's'}${r.json.truncated ? ' (the newest; more matched)' : ''}, workflow ${String(r.json.workflowId)}.\nIts report: steward replay show ${id} --format markdown\n`);
        return 0;
      }
      // --wait: until the replay ends (bounded: an hour), then its report
      for (let i = 0; i < 1800; i++) {
        const s = await api(io, values, 'GET', `/api/v1/replays/${id}`);
        if (s.status !== 200) return apiFailure(io, s);
        const status = (s.json.replay as { status?: string } | undefined)?.status;
        if (status !== 'running') {
          if (values.json) return done(io, s, (j) => `${JSON.stringify(j)}\n`);
          return done(io, await callApiText(await apiTarget(io, values), `/api/v1/replays/${id}?format=markdown`), (j) => String(j.text));
        }
        await new Promise((res) => setTimeout(res, 2000));
      }
      io.err(`Replay ${id} is still running after an hour: steward replay show ${id}\n`);
      return 1;
    },
    list: async ({ values, io }) => {
      const r = await api(io, values, 'GET', '/api/v1/replays');
      if (r.status !== 200) return apiFailure(io, r);
      if (values.json) return done(io, r, (j) => `${JSON.stringify(j.replays)}\n`);
      const rows = (r.json.replays ?? []) as Array<{ id: string; status: string; turnCount: number; createdAt: string; requestedBy: string | null; alternative: Record<string, unknown> }>;
      io.out(rows.length === 0 ? 'No replays.\n' : table([['ID', 'STATUS', 'TURNS', 'CREATED', 'BY', 'ALTERNATIVE'], ...rows.map((x) => [x.id, x.status, String(x.turnCount), x.createdAt, x.requestedBy ?? '-', JSON.stringify(x.alternative).slice(0, 80)])]));
      return 0;
    },
    show: async ({ args: [id], values, io }) => {
      const format = values.format ?? 'json';
      const at = `/api/v1/replays/${encodeURIComponent(id ?? '')}?format=${encodeURIComponent(format)}`;
      if (format === 'json') return done(io, await api(io, values, 'GET', at), (j) => `${JSON.stringify(j, null, 2)}\n`);
      return done(io, await callApiText(await apiTarget(io, values), at), (j) => String(j.text));
    },
    cancel: async ({ args: [id], values, io }) => done(io, await api(io, values, 'POST', `/api/v1/replays/${encodeURIComponent(id ?? '')}/cancel`), (j) => `Replay ${String(j.id)} is being cancelled (the turns replayed so far stay in its report).\n`),
  },

  repos: {
    list: async ({ values, io }) => {
      const r = await api(io, values, 'GET', '/api/v1/repos');
      const rows = (r.json.repos ?? []) as Array<{ name: string; cloneUrl: string; defaultBranch: string; github: { owner: string; repo: string } | null }>;
      io.out(rows.length === 0 ? 'No repositories registered.\n' : table([['NAME', 'BRANCH', 'GITHUB', 'CLONE URL'], ...rows.map((x) => [x.name, x.defaultBranch, x.github ? `${x.github.owner}/${x.github.repo}` : '-', x.cloneUrl])]));
      return 0;
    },
    show: async ({ args: [name], values, io }) => {
      const r = await api(io, values, 'GET', `/api/v1/repos/${encodeURIComponent(check(Name, name, 'NAME'))}`);
      return r.status === 200 ? done(io, r, (j) => `${JSON.stringify(j, null, 2)}\n`) : refused(io, r);
    },
    remove: async ({ args: [name], values, io }) => {
      const n = check(Name, name, 'NAME');
      const r = await api(io, values, 'DELETE', `/api/v1/repos/${encodeURIComponent(n)}`);
      return r.status === 200 ? done(io, r, () => `Removed ${n}.\n`) : refused(io, r);
    },
    add: async ({ args: [name], values, io }) => {
      const target = await apiTarget(io, values);
      let body: Record<string, unknown>;
      if (values.file) body = await jsonFile(values.file);
      else {
        if (!name || !values.clone) throw new UsageError(`usage: ${usageOf('repos')}`);
        const checks = (values.check ?? []).map((c) => {
          const m = /^([^:]+):\s*(.+)$/.exec(c);
          if (!m) throw new UsageError(`--check: expected "name: program args..." (got ${c})`);
          return { name: m[1]!.trim(), argv: m[2]!.trim().split(/\s+/) };
        });
        let github: Record<string, string> | undefined;
        if (values.github) {
          const [owner, repo] = values.github.split('/');
          if (!owner || !repo || !values['token-ref']) throw new UsageError('--github owner/repo needs --token-ref env:NAME');
          github = { owner, repo, tokenRef: values['token-ref'] };
        }
        body = {
          name,
          cloneUrl: /^[a-z]+:\/\//.test(values.clone) ? values.clone : path.resolve(values.clone),
          ...(values.branch ? { defaultBranch: values.branch } : {}),
          checks,
          ...(values['agent-command'] ? { agent: { command: values['agent-command'].trim().split(/\s+/) } } : values.model ? { agent: { kind: 'builtin', model: values.model } } : {}),
          ...(github ? { github } : {}),
          ...(values.promotion ? { policy: { promotion: values.promotion } } : {}),
        };
      }
      const r = await callApi(target, 'POST', '/api/v1/repos', body);
      if (r.status !== 200 && r.status !== 201) return apiFailure(io, r);
      io.out(`${r.status === 201 ? 'Registered' : 'Updated'} ${String(r.json.name)} (${String(r.json.cloneUrl)}, branch ${String(r.json.defaultBranch)}).\n`);
      return 0;
    },
  },

  objectives: {
    list: async ({ values, io }) => {
      const r = await api(io, values, 'GET', '/api/v1/objectives');
      const rows = (r.json.objectives ?? []) as ObjectiveView[];
      const line = (o: ObjectiveView) => [o.name, o.id, when(o), o.schedule.timezone ?? '-', o.paused ? 'paused' : (o.nextRuns[0] ?? '-'), o.lastRun?.status ?? '-', o.status ?? '-'];
      io.out(rows.length === 0 ? 'No objectives.\n' : table([['NAME', 'ID', 'SCHEDULE', 'ZONE', 'NEXT RUN', 'LAST', 'STATUS'], ...rows.map(line)]));
      return 0;
    },
    show: async ({ args: [id], values, io }) => done(io, await api(io, values, 'GET', objective(id)), (j) => `${JSON.stringify(j, null, 2)}\n`, 200),
    add: async ({ args: [name], values, io }) => {
      const s = schedule(values);
      const r = await api(io, values, 'POST', '/api/v1/objectives', {
        name,
        prompt: values.prompt,
        chatId: values.chat,
        ...(values.platform ? { platform: values.platform } : {}),
        ...(values.account ? { account: values.account } : {}),
        // without a schedule it runs on its triggers only
        ...(Object.keys(s).length || (!values.watch && !values.email) ? { schedule: s } : {}),
        ...(values.watch ? { watch: { path: values.watch } } : {}),
        ...(values.email ? { inboundEmail: values.email } : {}),
        ...(values.overlap ? { overlap: values.overlap } : {}),
        ...(values.catchup ? { catchupWindow: values.catchup } : {}),
        ...(values['pause-on-failure'] ? { pauseOnFailure: true } : {}),
        ...(values.paused ? { paused: true } : {}),
        ...(values.model ? { model: values.model } : {}),
      });
      return done(io, r, (j) => {
        const o = j as unknown as ObjectiveView;
        return `Added objective ${o.name} (${o.id}); ${when(o)}; next run ${o.nextRuns[0] ?? '-'}.\n`;
      }, 201);
    },
    update: async ({ args: [id], values, io }) => {
      const s = schedule(values);
      const r = await api(io, values, 'PATCH', objective(id), {
        ...(values.prompt ? { prompt: values.prompt } : {}),
        ...(Object.keys(s).length ? { schedule: s } : {}),
        ...(values.overlap ? { overlap: values.overlap } : {}),
        ...(values.catchup ? { catchupWindow: values.catchup } : {}),
        ...(values['pause-on-failure'] !== undefined ? { pauseOnFailure: values['pause-on-failure'] } : {}),
        ...(values.model ? { model: values.model } : {}),
        // an empty value removes the trigger
        ...(values.watch !== undefined ? { watch: values.watch ? { path: values.watch } : null } : {}),
        ...(values.email !== undefined ? { inboundEmail: values.email || null } : {}),
      });
      return done(io, r, (j) => `Updated ${String(j.name)}.\n`, 200);
    },
    pause: ({ args: [id], values, io }) => objectiveAction(io, values, id, 'pause'),
    resume: ({ args: [id], values, io }) => objectiveAction(io, values, id, 'resume'),
    'skip-missed': ({ args: [id], values, io }) => objectiveAction(io, values, id, 'skip-missed'),
    trigger: ({ args: [id], values, io }) => objectiveAction(io, values, id, 'trigger', values.overlap ? { overlap: values.overlap } : undefined),
    backfill: ({ args: [id], values, io }) => objectiveAction(io, values, id, 'backfill', { start: values.start, end: values.end, ...(values.overlap ? { overlap: values.overlap } : {}) }),
    delete: async ({ args: [id], values, io }) => done(io, await api(io, values, 'DELETE', objective(id)), () => 'Deleted.\n', 200),
  },

  changes: {
    list: async ({ values, io }) => {
      const r = await api(io, values, 'GET', `/api/v1/changes${values.repo ? `?repo=${encodeURIComponent(values.repo)}` : ''}`);
      const rows = (r.json.changes ?? []) as Array<{ id: string; repo: string; phase: string; status: string; request: string }>;
      io.out(rows.length === 0 ? 'No changes.\n' : table([['ID', 'REPO', 'STATUS', 'PHASE', 'REQUEST'], ...rows.map((c) => [c.id, c.repo, c.status, c.phase, c.request.replace(/\s+/g, ' ').slice(0, 60)])]));
      return 0;
    },
    start: async ({ args: [repo, ...words], values, io }) => {
      const r = await api(io, values, 'POST', '/api/v1/changes', { repo, request: words.join(' '), ...(values.base ? { base: values.base } : {}) });
      return done(io, r, (j) => `Started change ${String(j.id)}.${j.runUrl ? ` Run: ${String(j.runUrl)}` : ''}\n`, 202);
    },
    show: async ({ args: [idArg], values, io }) => {
      const id = check(ChangeIdArg, idArg, 'ID');
      const r = await api(io, values, 'GET', `/api/v1/changes/${id}`);
      if (r.status !== 200) return apiFailure(io, r);
      if (values.json) {
        io.out(`${JSON.stringify(r.json, null, 2)}\n`);
        return 0;
      }
      const c = r.json as { id: string; repo: string; status: string; phase: string; request: string; question: string | null; plan: { summary: string; steps: string[] } | null; verdict: { verdict: string; reasons: string[]; checks: Array<{ name: string; passed: boolean; exitCode: number | null }> } | null; result: { kind: string; patchPath: string; pr?: { url: string } } | null; error: string | null; runUrl: string | null };
      const lines = [
        `Change ${c.id} on ${c.repo}: ${c.status} (${c.phase})`,
        `Request: ${c.request}`,
        ...(c.question ? [`Waiting for an answer: ${c.question}`] : []),
        ...(c.plan ? [`Plan: ${c.plan.summary}`, ...c.plan.steps.map((s, i) => `  ${i + 1}. ${s}`)] : []),
        ...(c.verdict ? [`Gate: ${c.verdict.verdict}${c.verdict.reasons.length ? ` (${c.verdict.reasons.join('; ')})` : ''}`, ...c.verdict.checks.map((k) => `  ${k.passed ? 'pass' : 'FAIL'} ${k.name} (exit ${k.exitCode})`)] : []),
        ...(c.result ? [`Result: ${c.result.pr ? `draft PR ${c.result.pr.url}` : `patch ${c.result.patchPath}`}`] : []),
        ...(c.error ? [`Error: ${c.error}`] : []),
        ...(c.runUrl ? [`Run: ${c.runUrl}`] : []),
      ];
      io.out(`${lines.join('\n')}\n`);
      return 0;
    },
    patch: async ({ args: [idArg], values, io }) => {
      const id = check(ChangeIdArg, idArg, 'ID');
      const includeRefused = values['include-refused'] === true;
      const res = await fetchApi(await apiTarget(io, values), 'GET', `/api/v1/changes/${id}/patch${includeRefused ? '?include=refused' : ''}`);
      if (res.status === 409) {
        const json = (await res.json().catch(() => ({}))) as Record<string, unknown>;
        io.err(`${String(json.error ?? 'the change was not promoted')}; --include-refused saves it anyway.\n`);
        return 1;
      }
      if (res.status !== 200) return apiFailure(io, { status: res.status, json: (await res.json().catch(() => ({}))) as Record<string, unknown> });
      const patch = await res.text();
      const promoted = res.headers.get('x-steward-promoted') === 'true';
      const standing = `status ${res.headers.get('x-steward-change-status') ?? '?'}, gate verdict ${res.headers.get('x-steward-gate-verdict') ?? '?'}`;
      const refusedNote = `REFUSED: change ${id} was not promoted (${standing}); review why before applying it (steward changes show ${id}).`;
      if (values.out) {
        await writeFile(values.out, patch);
        io.out(promoted ? `Wrote ${values.out} (${patch.length} bytes; apply with git apply).\n` : `Wrote ${values.out} (${patch.length} bytes), ${refusedNote}\n`);
      } else {
        io.out(patch);
        if (!promoted) io.err(`${refusedNote}\n`);
      }
      return 0;
    },
    answer: async ({ args: [idArg, ...words], values, io }) => {
      const id = check(ChangeIdArg, idArg, 'ID');
      const r = await api(io, values, 'POST', `/api/v1/changes/${id}/answer`, { text: words.join(' ') });
      return done(io, r, (j) => `${String(j.message)}\n`, 200);
    },
  },

  workspaces: {
    list: async ({ values, io }) => {
      const r = await api(io, values, 'GET', '/api/v1/workspaces');
      const rows = (r.json.workspaces ?? []) as Array<{ name: string; root: string; chats: number }>;
      io.out(rows.length === 0 ? 'No workspaces.\n' : table([['NAME', 'CHATS', 'FOLDER'], ...rows.map((x) => [x.name, String(x.chats), x.root])]));
      return 0;
    },
    show: async ({ args: [name], values, io }) => done(io, await api(io, values, 'GET', workspace(name)), (j) => `${JSON.stringify(j, null, 2)}\n`),
    create: async ({ args: [name], values, io }) => done(io, await api(io, values, 'POST', '/api/v1/workspaces', { name: check(Name, name, 'NAME'), ...(values.folder ? { folder: values.folder } : {}) }), (j) => `Created workspace ${String(j.name)} at ${String(j.root)}; indexing its files.\n`),
    reindex: async ({ args: [name], values, io }) =>
      done(io, await api(io, values, 'POST', `${workspace(name)}/reindex`, values.path ? { paths: values.path } : {}), () => `Indexing ${values.path ? `${values.path.length} path(s) of ` : ''}workspace ${name} again.\n`),
    bind: async ({ args: [name], values, io }) => done(io, await api(io, values, 'POST', `${workspace(name)}/chats`, chatOf(values)), (j) => `Chat ${values.chat} uses workspace ${String(j.workspace)}.\n`),
    unbind: async ({ args: [name], values, io }) => done(io, await api(io, values, 'DELETE', `${workspace(name)}/chats`, chatOf(values)), () => `Chat ${values.chat} no longer uses workspace ${name}.\n`),
    search: async ({ args: [name, ...rest], values, io }) => {
      const words = rest.join(' ');
      const q = new URLSearchParams({ q: words, ...(values.limit ? { limit: values.limit } : {}) });
      return done(io, await api(io, values, 'GET', `${workspace(name)}/search?${q}`), (j) => {
        const hits = (j.hits ?? []) as Array<{ path: string; heading: string; startLine: number; endLine: number; text: string }>;
        if (hits.length === 0) return `Nothing in workspace ${name} matches "${words}".\n`;
        return `${hits.map((h, i) => `${i + 1}. ${h.path}${h.heading ? ` > ${h.heading}` : ''} (lines ${h.startLine}-${h.endLine})\n   ${h.text.replace(/\s+/g, ' ').slice(0, 200)}`).join('\n')}\n`;
      });
    },
    open: async ({ args: [name, p = ''], values, io }) => done(io, await api(io, values, 'GET', `${workspace(name)}/file?${new URLSearchParams({ path: p })}`), (j) => `${String(j.text)}${j.truncated ? `\n[the first part of ${String(j.bytes)} bytes]` : ''}\n`),
    inbox: async ({ args: [name, action], values, io }) => {
      const target = await apiTarget(io, values);
      const at = `${workspace(name)}/inbox`;
      switch (action) {
        case 'set': {
          if (!values.host || !values.user || !values['password-ref']) throw new UsageError(`usage: ${usageOf('workspaces')}`);
          const port = values.port === undefined ? undefined : Number(values.port);
          const body = { host: values.host, user: values.user, passwordRef: values['password-ref'], ...(port !== undefined ? { port } : {}), ...(values.tls ? { tls: values.tls } : {}), ...(values.folder ? { folder: values.folder } : {}) };
          return done(io, await callApi(target, 'PUT', at, body), (j) => `Set. ${inboxShown(j)}\n`);
        }
        case 'show':
          return done(io, await callApi(target, 'GET', at), (j) => `${inboxShown(j)}\n`);
        case 'clear':
          return done(io, await callApi(target, 'DELETE', at), () => `Workspace ${name} has no inbox now (the documents it wrote stay).\n`);
        default:
          throw new UsageError(`usage: ${usageOf('workspaces')}`);
      }
    },
  },

  skills: async ({ values, io }) => {
    const r = await api(io, values, 'GET', `/api/v1/skills${values.workspace ? `?${new URLSearchParams({ workspace: values.workspace })}` : ''}`);
    if (r.status >= 400) return apiFailure(io, r);
    const rows = (r.json.skills ?? []) as Array<{ name: string; version: string; source: string; roles: string[]; description: string }>;
    const problems = (r.json.problems ?? []) as Array<{ file: string; error: string }>;
    io.out(rows.length ? table([['NAME', 'VERSION', 'SOURCE', 'ROLES', 'DESCRIPTION'], ...rows.map((s) => [s.name, s.version, s.source, s.roles.join(',') || 'all', s.description.slice(0, 80)])]) : 'No skills.\n');
    for (const p of problems) io.out(`not a skill: ${p.file}: ${p.error}\n`);
    return 0;
  },

  memories: {
    export: async ({ values, io }) => {
      const q = new URLSearchParams({
        ...(values.workspace ? { workspace: values.workspace } : {}),
        ...(values.chat ? { chatId: values.chat } : {}),
        ...(values.platform ? { platform: values.platform } : {}),
        ...(values.account ? { account: values.account } : {}),
      });
      const res = await fetchApi(await apiTarget(io, values), 'GET', `/api/v1/memories/export?${q}`);
      const text = await res.text();
      if (res.status !== 200) {
        let json: Record<string, unknown> = {};
        try {
          json = JSON.parse(text) as Record<string, unknown>;
        } catch {
          // not JSON: the status says it
        }
        return apiFailure(io, { status: res.status, json });
      }
      const lines = text ? text.trimEnd().split('\n').length : 0;
      if (values.out) {
        await writeFile(values.out, text, { mode: 0o600 });
        io.out(`Wrote ${lines} memor${lines === 1 ? 'y' : 'ies'} to ${values.out}.\n`);
      } else io.out(text);
      return 0;
    },
    approve: async ({ args: [id], values, io }) => done(io, await api(io, values, 'POST', `${memory(id)}/approve`), (j) => `Memory ${String(j.id)} approved: it is recalled from now on.\n`),
    reject: async ({ args: [id], values, io }) => done(io, await api(io, values, 'POST', `${memory(id)}/reject`), (j) => `Memory ${String(j.id)} rejected.\n`),
    forget: async ({ args: [id], values, io }) => done(io, await api(io, values, 'DELETE', memory(id)), (j) => `Memory ${String(j.id)} forgotten.\n`),
  },

  mcp: {
    list: async ({ values, io }) => {
      const r = await api(io, values, 'GET', '/api/v1/mcp/servers');
      if (r.status >= 400) return apiFailure(io, r);
      const rows = (r.json.servers ?? []) as Array<{ name: string; transport: string; source: string; state: string; tools: number; enabled: boolean; lastError: string | null }>;
      io.out(rows.length === 0 ? 'No MCP servers.\n' : table([['NAME', 'TRANSPORT', 'SOURCE', 'STATE', 'TOOLS', 'LAST ERROR'], ...rows.map((x) => [x.name, x.transport, x.source, x.enabled ? x.state : 'disabled', String(x.tools), (x.lastError ?? '').slice(0, 80)])]));
      return 0;
    },
    show: async ({ args: [name], values, io }) => done(io, await api(io, values, 'GET', mcpServer(name)), (j) => `${JSON.stringify(j, null, 2)}\n`),
    remove: async ({ args: [name], values, io }) => done(io, await api(io, values, 'DELETE', mcpServer(name)), (j) => `Removed MCP server ${String(j.name)}.\n`),
    tools: async ({ args: [name], values, io }) =>
      done(io, await api(io, values, 'GET', `${mcpServer(name)}/tools`), (j) => {
        const tools = (j.tools ?? []) as Array<{ shown: string; offered: boolean; why?: string; approval: string; description: string }>;
        if (tools.length === 0) return `The MCP server ${String(j.server)} lists no tools.\n`;
        return table([['TOOL', 'OFFERED', 'APPROVAL', 'DESCRIPTION'], ...tools.map((t) => [t.shown, t.offered ? 'yes' : `no: ${t.why ?? ''}`, t.approval, t.description.replace(/\s+/g, ' ').slice(0, 60)])]);
      }),
    add: async ({ args: [name], values, io }) => {
      const target = await apiTarget(io, values);
      let body: Record<string, unknown>;
      if (values.file) body = await jsonFile(values.file);
      else {
        const n = check(Name, name, 'NAME');
        if ((values.command === undefined) === (values['server-url'] === undefined)) throw new UsageError(`give --command "argv..." (stdio) or --server-url URL (http)\nusage: ${usageOf('mcp')}`);
        const env = pairs(values.env, '--env', 'NAME=env:STEWARD_MCP_<NAME>');
        const approval = pairs(values.approval, '--approval', 'TOOL=never|always|<role>');
        const timeoutMs = values.timeout === undefined ? undefined : parseDuration(values.timeout);
        if (values.timeout !== undefined && timeoutMs === undefined) throw new UsageError('--timeout: expected a duration such as 30s');
        body = {
          name: n,
          ...(values.command !== undefined
            ? { transport: 'stdio', command: values.command.trim().split(/\s+/), ...(values['ro-bind'] ? { roBinds: values['ro-bind'] } : {}), ...(values.network ? { network: true } : {}), ...(Object.keys(env).length ? { env } : {}) }
            : { transport: 'http', url: values['server-url'], ...(values['token-ref'] ? { tokenRef: values['token-ref'] } : {}) }),
          ...(listOf(values['allow-tools']) ? { allowTools: listOf(values['allow-tools']) } : {}),
          ...(listOf(values['read-only']) ? { readOnlyTools: listOf(values['read-only']) } : {}),
          ...(Object.keys(approval).length ? { approval } : {}),
          ...(values.workspace ? { workspaces: values.workspace } : {}),
          ...(timeoutMs !== undefined ? { timeoutMs } : {}),
        };
      }
      return done(io, await callApi(target, 'POST', '/api/v1/mcp/servers', body), (j) => `Registered MCP server ${String(j.name)} (${String(j.transport)}); list its tools with steward mcp tools ${String(j.name)}.\n`);
    },
  },

  tasks: {
    list: async ({ values, io }) => {
      const q = new URLSearchParams({ ...(values.status ? { status: values.status } : {}), ...(values.lane ? { lane: values.lane } : {}) });
      const r = await api(io, values, 'GET', `/api/v1/tasks${q.size ? `?${q}` : ''}`);
      if (r.status !== 200) return apiFailure(io, r);
      const rows = (r.json.tasks ?? []) as TaskView[];
      if (values.json) io.out(`${JSON.stringify(rows, null, 2)}\n`);
      else if (rows.length === 0) io.out('No tasks.\n');
      else io.out(table([['ID', 'LANE', 'PRIORITY', 'STATUS', 'DUE', 'CHAT', 'FROM', 'TEXT'], ...rows.map((t) => [t.id, t.lane, t.priority, t.status, t.dueAt ?? '-', `${t.chat.platform}:${t.chat.chatId}`, t.sender, t.text.replace(/\s+/g, ' ').slice(0, 60)])]));
      return 0;
    },
    add: async ({ args, values, io }) => {
      const text = args.join(' ').trim();
      if (!text) throw new UsageError(`usage: ${usageOf('tasks')}`);
      const r = await api(io, values, 'POST', '/api/v1/tasks', {
        text,
        chatId: values.chat,
        ...(values.platform ? { platform: values.platform } : {}),
        ...(values.account ? { account: values.account } : {}),
        ...(values.lane ? { lane: values.lane } : {}),
        ...(values.priority ? { priority: values.priority } : {}),
        ...(values.due ? { due: values.due } : {}),
        ...(values.assignee ? { assignee: values.assignee } : {}),
      });
      return taskDone(io, r, 201, values.json, (t) => `Task ${t.id} made (${t.lane}, ${t.priority}, due ${t.dueAt ?? '-'}).`);
    },
    route: async ({ args: [id, cls], values, io }) => {
      const at = task(id);
      const r = await api(io, values, 'POST', `${at}/route`, { class: cls, ...(values.priority ? { priority: values.priority } : {}), ...(values.due ? { due: values.due } : {}) });
      return taskDone(io, r, 200, values.json, (t) => `Task ${t.id}: ${t.status === 'closed' ? 'closed as noise' : `${t.lane}, ${t.priority}, due ${t.dueAt ?? '-'}`}.`);
    },
    hand: async ({ args: [id], values, io }) => {
      const at = task(id);
      return taskDone(io, await api(io, values, 'POST', `${at}/hand`), 200, values.json, (t) => `Task ${t.id} handed to the agent: a turn runs in ${t.chat.platform} chat ${t.chat.chatId}.`);
    },
    close: async ({ args: [id], values, io }) => {
      const at = task(id);
      return taskDone(io, await api(io, values, 'POST', `${at}/close`, values.note ? { note: values.note } : undefined), 200, values.json, (t) => `Task ${t.id} closed.`);
    },
  },

  /** `steward ui`: a new one-time link that signs a browser in and opens the Temporal UI Steward serves. */
  ui: async ({ values, io }) => {
    const r = await api(io, values, 'POST', '/codec/links');
    if (r.status !== 201 || typeof r.json.url !== 'string') return apiFailure(io, r);
    const opens = typeof r.json.ui === 'string' ? `it signs the browser in and opens ${r.json.ui}` : 'it signs the browser in to the codec endpoint (this Steward serves no Temporal UI)';
    io.out(`${r.json.url}\n  (${opens}; it works once, until ${String(r.json.expiresAt)})\n`);
    return 0;
  },
} satisfies HandlersOf<'admin', CliIo>;

async function decidePairing(io: CliIo, values: ApiFlags, codeArg: string | undefined, role: string | undefined): Promise<number> {
  const code = check(PairingCodeArg, codeArg, 'CODE').toUpperCase();
  const r = await api(io, values, 'POST', `/api/v1/pairings/${encodeURIComponent(code)}/${role ? 'approve' : 'deny'}`, role ? { role } : undefined);
  return r.status === 200 ? done(io, r, (j) => `${String(j.message)}\n`) : refused(io, r);
}

async function decideApproval(io: CliIo, values: ApiFlags, idArg: string | undefined, action: 'approve' | 'deny', reason: string | undefined): Promise<number> {
  const id = check(ApprovalIdArg, idArg, 'ID').toLowerCase();
  const r = await api(io, values, 'POST', `/api/v1/approvals/${id}/${action}`, action === 'deny' && reason ? { reason } : undefined);
  return r.status === 200 ? done(io, r, (j) => `${String(j.message)}\n`) : refused(io, r);
}

/** Run `steward <command> <sub> ...`; resolves with the exit code (2: a bad argument, nothing done). */
export function adminCommand(command: string, args: readonly string[], io: CliIo): Promise<number> {
  return runCommand(command, args, io, HANDLERS);
}
