/**
 * The administration commands of the `steward` CLI. Identities, bindings and shells are
 * written to the database directly (so the first overlord can be added before Steward ever
 * starts); pairing and approvals go through the running Steward's API, because deciding them
 * tells people in chat and signals the waiting workflow. Arguments are validated with the same
 * zod schemas as the API; a bad argument changes nothing and exits 2.
 */
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { createDb, migrateDatabase, type Db } from '../domain/db.js';
import { bindChat, createIdentity, deleteBinding, deleteIdentity, findBinding, findIdentity, GovernanceError, listBindings, listIdentities, updateIdentity } from '../domain/governance.js';
import { listTriageSettings, upsertTriageSetting } from '../domain/store/tasks.js';
import { writeReceipt } from '../domain/receipts.js';
import { RoleSchema } from '../common/roles.js';
import { ChatIdSchema, ModelRefSchema } from '../common/schemas.js';
import { issueShell, listShells, revokeShell, ShellError } from '../services/shells.js';
import { parseDuration, type StewardConfig } from '../config/index.js';
import { usageOf } from './cli-commands.js';

export interface CliIo {
  config: () => StewardConfig;
  out: (s: string) => void;
  err: (s: string) => void;
  /** Override the API base URL and token (tests; `--url`, `--token`). */
  api?: { url: string; token: string };
}

class UsageError extends Error {}


function check<T>(schema: z.ZodType<T>, value: unknown, what: string): T {
  const r = schema.safeParse(value);
  if (!r.success) throw new UsageError(`${what}: ${r.error.issues[0]?.message ?? 'invalid'}`);
  return r.data;
}

async function withDb<T>(cfg: StewardConfig, fn: (db: Db) => Promise<T>): Promise<T> {
  await migrateDatabase(cfg.databaseUrl);
  const db = createDb(cfg.databaseUrl);
  try {
    return await fn(db);
  } finally {
    await db.$disconnect();
  }
}

async function apiTarget(cfg: StewardConfig, io: CliIo, values: { url?: string | undefined; token?: string | undefined }): Promise<{ url: string; token: string }> {
  if (io.api) return io.api;
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

async function callApi(target: { url: string; token: string }, method: string, route: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  let res: Response;
  try {
    res = await fetch(`${target.url}${route}`, {
      method,
      headers: { authorization: `Bearer ${target.token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
  } catch {
    throw new UsageError(`cannot reach Steward at ${target.url}: is it running? (./steward start)`);
  }
  const json = (await res.json().catch(() => ({}))) as Record<string, unknown>;
  if (res.status === 401) throw new UsageError('the API token was refused (check STEWARD_API_TOKEN or --token)');
  return { status: res.status, json };
}

/** Print an API refusal; the exit code: 2 for bad input, 1 otherwise. */
function apiFailure(io: CliIo, r: { status: number; json: Record<string, unknown> }): number {
  io.err(`${String(r.json.error ?? `failed (${r.status})`)}\n`);
  return r.status === 400 ? 2 : 1;
}

function table(rows: string[][]): string {
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length))) ?? [];
  return `${rows.map((r) => r.map((c, i) => c.padEnd(widths[i] ?? 0)).join('  ').trimEnd()).join('\n')}\n`;
}

async function identities(sub: string | undefined, args: string[], io: CliIo): Promise<number> {
  const cfg = io.config();
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { name: { type: 'string' }, role: { type: 'string' }, telegram: { type: 'string', multiple: true }, discord: { type: 'string', multiple: true } },
  });
  switch (sub) {
    case 'list':
      return withDb(cfg, async (db) => {
        const rows = await listIdentities(db);
        io.out(table([['ID', 'NAME', 'ROLE', 'ACCOUNTS'], ...rows.map((i) => [i.id, i.name, i.role, i.accounts.map((a) => `${a.platform}:${a.userId}`).join(' ')])]));
        return 0;
      });
    case 'add': {
      const name = check(z.string().trim().min(1, 'give --name').max(200), values.name ?? '', '--name');
      const role = check(RoleSchema, values.role, '--role');
      const accounts = [
        ...(values.telegram ?? []).map((id) => ({ platform: 'telegram' as const, userId: check(z.string().regex(/^\d{1,20}$/, 'a Telegram user id is a number'), id, '--telegram') })),
        ...(values.discord ?? []).map((id) => ({ platform: 'discord' as const, userId: check(z.string().regex(/^\d{5,25}$/, 'a Discord user id is a number'), id, '--discord') })),
      ];
      if (accounts.length === 0) throw new UsageError('give at least one account: --telegram <user id> or --discord <user id>');
      return withDb(cfg, async (db) => {
        try {
          const { id } = await createIdentity(db, { name, role, accounts, createdBy: 'cli' });
          await writeReceipt(db, { kind: 'identity.change', actor: 'cli', data: { action: 'create', identityId: id, name, role, accounts } });
          io.out(`Added ${name} (${role}), id ${id}.\n`);
          return 0;
        } catch (err) {
          if (err instanceof GovernanceError) {
            io.err(`Not added: ${err.message}.\n`);
            return 1;
          }
          throw err;
        }
      });
    }
    case 'set-role': {
      const [id, roleArg] = positionals;
      if (!id || !roleArg) throw new UsageError('usage: steward identities set-role ID ROLE');
      const role = check(RoleSchema, roleArg, 'ROLE');
      return withDb(cfg, async (db) => {
        const before = await findIdentity(db, id);
        if (!before) {
          io.err(`No identity ${id}.\n`);
          return 1;
        }
        await updateIdentity(db, id, { role });
        await writeReceipt(db, { kind: 'identity.change', actor: 'cli', data: { action: 'update', identityId: id, before: { role: before.role }, after: { role } } });
        io.out(`${before.name}: ${before.role} -> ${role}.\n`);
        return 0;
      });
    }
    case 'remove': {
      const [id] = positionals;
      if (!id) throw new UsageError('usage: steward identities remove ID');
      return withDb(cfg, async (db) => {
        if (!(await deleteIdentity(db, id))) {
          io.err(`No identity ${id}.\n`);
          return 1;
        }
        await writeReceipt(db, { kind: 'identity.change', actor: 'cli', data: { action: 'delete', identityId: id } });
        io.out(`Removed ${id}.\n`);
        return 0;
      });
    }
    default:
      throw new UsageError(`usage: ${usageOf('identities')}`);
  }
}

async function bindings(sub: string | undefined, args: string[], io: CliIo): Promise<number> {
  const cfg = io.config();
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      platform: { type: 'string' },
      chat: { type: 'string' },
      account: { type: 'string' },
      mode: { type: 'string' },
      name: { type: 'string' },
      model: { type: 'string' },
      'admin-channel': { type: 'boolean' },
    },
  });
  switch (sub) {
    case 'list':
      return withDb(cfg, async (db) => {
        const rows = await listBindings(db);
        const triage = new Map((await listTriageSettings(db)).map((t) => [t.bindingId, t]));
        const triageOf = (id: string) => (triage.get(id)?.enabled ? `on${triage.get(id)?.model ? ` (${triage.get(id)?.model})` : ''}` : '');
        io.out(table([['ID', 'PLATFORM', 'ACCOUNT', 'CHAT', 'MODE', 'NAME', 'ADMIN', 'TRIAGE'], ...rows.map((b) => [b.id, b.platform, b.account, b.chatId, b.mode, b.name ?? '', b.adminChannel ? 'yes' : '', triageOf(b.id)])]));
        return 0;
      });
    case 'add': {
      const platform = check(z.enum(['telegram', 'discord', 'openharness']), values.platform, '--platform');
      const chatId = check(ChatIdSchema, values.chat, '--chat');
      const account = check(z.union([ChatIdSchema, z.literal('*')]), values.account ?? '*', '--account');
      const mode = values.mode === undefined ? undefined : check(z.enum(['mention', 'all']), values.mode, '--mode');
      const name = values.name === undefined ? undefined : check(z.string().regex(/^[a-z0-9][a-z0-9_-]{0,31}$/, 'a name uses lowercase letters, digits, - and _'), values.name, '--name');
      const model = values.model === undefined ? undefined : check(ModelRefSchema, values.model, '--model');
      return withDb(cfg, async (db) => {
        try {
          const b = await bindChat(db, {
            platform,
            account,
            chatId,
            createdBy: 'cli',
            ...(mode ? { mode } : {}),
            ...(name ? { name } : {}),
            ...(model ? { model } : {}),
            ...(values['admin-channel'] ? { adminChannel: true } : {}),
          });
          await writeReceipt(db, { kind: 'binding.change', actor: 'cli', data: { action: 'bind', ...b } });
          io.out(`Bound ${platform} chat ${chatId} (${b.mode}${b.name ? `, "${b.name}"` : ''}${b.adminChannel ? ', admin channel' : ''}), id ${b.id}.\n`);
          return 0;
        } catch (err) {
          if (err instanceof GovernanceError) {
            io.err(`Not bound: ${err.message}.\n`);
            return 1;
          }
          throw err;
        }
      });
    }
    case 'triage': {
      const [id, state, ...more] = positionals;
      if (!id || (state !== 'on' && state !== 'off') || more.length > 0 || (state === 'off' && values.model !== undefined)) throw new UsageError(`usage: ${usageOf('bindings')}`);
      const model = values.model === undefined ? undefined : check(ModelRefSchema, values.model, '--model');
      return withDb(cfg, async (db) => {
        const b = await findBinding(db, id);
        if (!b) {
          io.err(`No binding ${id}.\n`);
          return 1;
        }
        const t = await upsertTriageSetting(db, id, { enabled: state === 'on', ...(model ? { model } : {}), updatedBy: 'cli' });
        await writeReceipt(db, { kind: 'binding.change', actor: 'cli', data: { action: 'triage', bindingId: id, platform: b.platform, chatId: b.chatId, enabled: t.enabled, model: t.model } });
        io.out(t.enabled ? `Triage on for ${b.platform} chat ${b.chatId}${t.model ? ` (model ${t.model})` : ''}.\n` : `Triage off for ${b.platform} chat ${b.chatId}.\n`);
        return 0;
      });
    }
    case 'remove': {
      const [id] = positionals;
      if (!id) throw new UsageError('usage: steward bindings remove ID');
      return withDb(cfg, async (db) => {
        if (!(await deleteBinding(db, id))) {
          io.err(`No binding ${id}.\n`);
          return 1;
        }
        await writeReceipt(db, { kind: 'binding.change', actor: 'cli', data: { action: 'unbind', id } });
        io.out(`Removed binding ${id}.\n`);
        return 0;
      });
    }
    default:
      throw new UsageError(`usage: ${usageOf('bindings')}`);
  }
}

async function pairing(sub: string | undefined, args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { url: { type: 'string' }, token: { type: 'string' } } });
  const target = await apiTarget(io.config(), io, values);
  switch (sub) {
    case 'list': {
      const r = await callApi(target, 'GET', '/api/v1/pairings');
      const rows = (r.json.pairings ?? []) as Array<{ displayName: string; platform: string; userId: string; expiresAt: string }>;
      if (rows.length === 0) io.out('No pending pairing requests.\n');
      else io.out(table([['NAME', 'PLATFORM', 'USER', 'EXPIRES'], ...rows.map((p) => [p.displayName, p.platform, p.userId, p.expiresAt])]));
      return 0;
    }
    case 'approve':
    case 'deny': {
      const [codeArg, roleArg] = positionals;
      const code = check(z.string().regex(/^[A-Za-z0-9-]{4,16}$/, 'a pairing code is 8 letters and digits'), codeArg, 'CODE').toUpperCase();
      const role = sub === 'approve' ? check(RoleSchema, roleArg, 'ROLE') : undefined;
      const r = await callApi(target, 'POST', `/api/v1/pairings/${encodeURIComponent(code)}/${sub}`, role ? { role } : undefined);
      if (r.status !== 200) {
        io.err(`${String(r.json.error ?? `failed (${r.status})`)}\n`);
        return 1;
      }
      io.out(`${String(r.json.message)}\n`);
      return 0;
    }
    default:
      throw new UsageError(`usage: ${usageOf('pairing')}`);
  }
}

async function approvals(sub: string | undefined, args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { url: { type: 'string' }, token: { type: 'string' }, status: { type: 'string' }, reason: { type: 'string' } } });
  const target = await apiTarget(io.config(), io, values);
  switch (sub) {
    case 'list': {
      const status = values.status === undefined ? 'pending' : check(z.enum(['pending', 'approved', 'denied', 'expired', 'cancelled']), values.status, '--status');
      const r = await callApi(target, 'GET', `/api/v1/approvals?status=${status}`);
      const rows = (r.json.approvals ?? []) as Array<{ id: string; tool: string; summary: string; status: string; deadline: string }>;
      if (rows.length === 0) io.out(`No ${status} approvals.\n`);
      else io.out(table([['ID', 'STATUS', 'DEADLINE', 'ACTION'], ...rows.map((a) => [a.id, a.status, a.deadline, a.summary.slice(0, 100)])]));
      return 0;
    }
    case 'approve':
    case 'deny': {
      const id = check(z.string().regex(/^[a-z0-9]{4,16}$/i, 'an approval id is 8 letters and digits'), positionals[0], 'ID').toLowerCase();
      const reason = values.reason === undefined ? undefined : check(z.string().trim().min(1).max(500), values.reason, '--reason');
      const r = await callApi(target, 'POST', `/api/v1/approvals/${id}/${sub}`, sub === 'deny' && reason ? { reason } : undefined);
      if (r.status !== 200) {
        io.err(`${String(r.json.error ?? `failed (${r.status})`)}\n`);
        return 1;
      }
      io.out(`${String(r.json.message)}\n`);
      return 0;
    }
    default:
      throw new UsageError(`usage: ${usageOf('approvals')}`);
  }
}

async function shells(sub: string | undefined, args: string[], io: CliIo): Promise<number> {
  const cfg = io.config();
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { role: { type: 'string' }, identity: { type: 'string' } } });
  switch (sub) {
    case 'issue': {
      const [name] = positionals;
      if (!name) throw new UsageError('usage: steward shells issue NAME [--role R] [--identity ID]');
      const role = values.role === undefined ? undefined : check(RoleSchema, values.role, '--role');
      return withDb(cfg, async (db) => {
        try {
          const s = await issueShell(db, { name, createdBy: 'cli', ...(role ? { role } : {}), ...(values.identity ? { identityId: values.identity } : {}) });
          await writeReceipt(db, { kind: 'shell.change', actor: 'cli', data: { action: 'issue', shellId: s.id, name: s.name, identityId: s.identityId, ...(role ? { role } : {}) } });
          io.out(`Issued the OpenHarness shell "${s.name}" (id ${s.id}, identity ${s.identityId}).\nIts token, shown once (Authorization: Bearer <token> on POST /api/openharness/v1):\n${s.token}\n`);
          return 0;
        } catch (err) {
          if (err instanceof ShellError) throw new UsageError(err.message);
          throw err;
        }
      });
    }
    case 'list':
      return withDb(cfg, async (db) => {
        const rows = await listShells(db);
        io.out(table([['ID', 'NAME', 'IDENTITY', 'CREATED', 'REVOKED'], ...rows.map((r) => [r.id, r.name, r.identityId, r.createdAt.toISOString(), r.revokedAt ? r.revokedAt.toISOString() : ''])]));
        return 0;
      });
    case 'revoke': {
      const [name] = positionals;
      if (!name) throw new UsageError('usage: steward shells revoke NAME');
      return withDb(cfg, async (db) => {
        const r = await revokeShell(db, name);
        if (!r) {
          io.err(`No shell ${name}.\n`);
          return 1;
        }
        await writeReceipt(db, { kind: 'shell.change', actor: 'cli', data: { action: 'revoke', shellId: r.id, name: r.name } });
        io.out(r.alreadyRevoked ? `The shell "${r.name}" was already revoked.\n` : `Revoked the shell "${r.name}": its token no longer works.\n`);
        return 0;
      });
    }
    default:
      throw new UsageError(`usage: ${usageOf('shells')}`);
  }
}

async function repos(sub: string | undefined, args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      url: { type: 'string' },
      token: { type: 'string' },
      file: { type: 'string' },
      clone: { type: 'string' },
      branch: { type: 'string' },
      check: { type: 'string', multiple: true },
      'agent-command': { type: 'string' },
      model: { type: 'string' },
      github: { type: 'string' },
      'token-ref': { type: 'string' },
      promotion: { type: 'string' },
    },
  });
  const target = await apiTarget(io.config(), io, values);
  switch (sub) {
    case 'list': {
      const r = await callApi(target, 'GET', '/api/v1/repos');
      const rows = (r.json.repos ?? []) as Array<{ name: string; cloneUrl: string; defaultBranch: string; github: { owner: string; repo: string } | null }>;
      if (rows.length === 0) io.out('No repositories registered.\n');
      else io.out(table([['NAME', 'BRANCH', 'GITHUB', 'CLONE URL'], ...rows.map((x) => [x.name, x.defaultBranch, x.github ? `${x.github.owner}/${x.github.repo}` : '-', x.cloneUrl])]));
      return 0;
    }
    case 'show':
    case 'remove': {
      const name = check(z.string().min(1).max(64), positionals[0], 'NAME');
      const r = await callApi(target, sub === 'show' ? 'GET' : 'DELETE', `/api/v1/repos/${encodeURIComponent(name)}`);
      if (r.status !== 200) {
        io.err(`${String(r.json.error ?? `failed (${r.status})`)}\n`);
        return 1;
      }
      io.out(sub === 'show' ? `${JSON.stringify(r.json, null, 2)}\n` : `Removed ${name}.\n`);
      return 0;
    }
    case 'add': {
      let body: Record<string, unknown>;
      if (values.file) {
        try {
          body = JSON.parse(await readFile(values.file, 'utf8')) as Record<string, unknown>;
        } catch (err) {
          throw new UsageError(`--file: cannot read ${values.file} as JSON: ${(err as Error).message}`);
        }
      } else {
        const name = positionals[0];
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
      if (r.status !== 200 && r.status !== 201) {
        io.err(`${String(r.json.error ?? `failed (${r.status})`)}\n`);
        return r.status === 400 ? 2 : 1;
      }
      io.out(`${r.status === 201 ? 'Registered' : 'Updated'} ${String(r.json.name)} (${String(r.json.cloneUrl)}, branch ${String(r.json.defaultBranch)}).\n`);
      return 0;
    }
    default:
      throw new UsageError(`usage: ${usageOf('repos')}`);
  }
}

async function objectives(sub: string | undefined, args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      url: { type: 'string' },
      token: { type: 'string' },
      chat: { type: 'string' },
      platform: { type: 'string' },
      account: { type: 'string' },
      every: { type: 'string' },
      cron: { type: 'string' },
      timezone: { type: 'string' },
      jitter: { type: 'string' },
      overlap: { type: 'string' },
      catchup: { type: 'string' },
      'pause-on-failure': { type: 'boolean' },
      model: { type: 'string' },
      prompt: { type: 'string' },
      start: { type: 'string' },
      end: { type: 'string' },
      paused: { type: 'boolean' },
      watch: { type: 'string' },
      email: { type: 'string' },
    },
  });
  const target = await apiTarget(io.config(), io, values);
  const fail = (r: { status: number; json: Record<string, unknown> }) => apiFailure(io, r);
  const schedule = () => ({
    ...(values.every ? { every: values.every } : {}),
    ...(values.cron ? { cron: values.cron } : {}),
    ...(values.timezone ? { timezone: values.timezone } : {}),
    ...(values.jitter ? { jitter: values.jitter } : {}),
  });
  const id = () => encodeURIComponent(check(z.string().min(1).max(64), positionals[0], 'ID'));
  type View = { id: string; name: string; paused: boolean; schedule: { every?: string; cron?: string | string[]; timezone?: string }; triggers?: { webhook: boolean; watch: string | null; email: string | null }; nextRuns: string[]; lastRun: { status: string } | null };
  const when = (o: View) =>
    [
      o.schedule.every ? `every ${o.schedule.every}` : o.schedule.cron !== undefined ? `cron ${String(o.schedule.cron)}` : '',
      o.triggers?.webhook ? 'webhook' : '',
      o.triggers?.watch ? `watch ${o.triggers.watch}` : '',
      o.triggers?.email ? `email ${o.triggers.email}` : '',
    ].filter(Boolean).join(', ') || '-';
  const line = (o: View) => [o.name, o.id, when(o), o.schedule.timezone ?? '-', o.paused ? 'paused' : (o.nextRuns[0] ?? '-'), o.lastRun?.status ?? '-'];
  switch (sub) {
    case 'list': {
      const r = await callApi(target, 'GET', '/api/v1/objectives');
      const rows = (r.json.objectives ?? []) as View[];
      if (rows.length === 0) io.out('No objectives.\n');
      else io.out(table([['NAME', 'ID', 'SCHEDULE', 'ZONE', 'NEXT RUN', 'LAST'], ...rows.map(line)]));
      return 0;
    }
    case 'show': {
      const r = await callApi(target, 'GET', `/api/v1/objectives/${id()}`);
      if (r.status !== 200) return fail(r);
      io.out(`${JSON.stringify(r.json, null, 2)}\n`);
      return 0;
    }
    case 'add': {
      const name = positionals[0];
      if (!name || !values.chat || !values.prompt) throw new UsageError(`usage: ${usageOf('objectives')}`);
      const r = await callApi(target, 'POST', '/api/v1/objectives', {
        name,
        prompt: values.prompt,
        chatId: values.chat,
        ...(values.platform ? { platform: values.platform } : {}),
        ...(values.account ? { account: values.account } : {}),
        // without a schedule it runs on its triggers only
        ...(Object.keys(schedule()).length || (!values.watch && !values.email) ? { schedule: schedule() } : {}),
        ...(values.watch ? { watch: { path: values.watch } } : {}),
        ...(values.email ? { inboundEmail: values.email } : {}),
        ...(values.overlap ? { overlap: values.overlap } : {}),
        ...(values.catchup ? { catchupWindow: values.catchup } : {}),
        ...(values['pause-on-failure'] ? { pauseOnFailure: true } : {}),
        ...(values.paused ? { paused: true } : {}),
        ...(values.model ? { model: values.model } : {}),
      });
      if (r.status !== 201) return fail(r);
      const o = r.json as unknown as View;
      io.out(`Added objective ${o.name} (${o.id}); ${when(o)}; next run ${o.nextRuns[0] ?? '-'}.\n`);
      return 0;
    }
    case 'update': {
      const s = schedule();
      const r = await callApi(target, 'PATCH', `/api/v1/objectives/${id()}`, {
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
      if (r.status !== 200) return fail(r);
      io.out(`Updated ${String(r.json.name)}.\n`);
      return 0;
    }
    case 'pause':
    case 'resume':
    case 'trigger':
    case 'skip-missed':
    case 'backfill': {
      const body = sub === 'backfill' ? { start: values.start, end: values.end, ...(values.overlap ? { overlap: values.overlap } : {}) } : sub === 'trigger' && values.overlap ? { overlap: values.overlap } : undefined;
      const r = await callApi(target, 'POST', `/api/v1/objectives/${id()}/${sub}`, body);
      if (r.status !== 200) return fail(r);
      io.out(`${String(r.json.name)}: ${sub} done.\n`);
      return 0;
    }
    case 'delete': {
      const r = await callApi(target, 'DELETE', `/api/v1/objectives/${id()}`);
      if (r.status !== 200) return fail(r);
      io.out('Deleted.\n');
      return 0;
    }
    default:
      throw new UsageError(`usage: ${usageOf('objectives')}`);
  }
}

const ChangeIdArg = z.string().regex(/^chg-[a-f0-9]{12}$/, 'a change id looks like chg-0123456789ab');

async function changes(sub: string | undefined, args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { url: { type: 'string' }, token: { type: 'string' }, base: { type: 'string' }, repo: { type: 'string' }, json: { type: 'boolean' }, out: { type: 'string' }, 'include-refused': { type: 'boolean' } },
  });
  const target = await apiTarget(io.config(), io, values);
  const fail = (r: { status: number; json: Record<string, unknown> }) => apiFailure(io, r);
  switch (sub) {
    case 'list': {
      const r = await callApi(target, 'GET', `/api/v1/changes${values.repo ? `?repo=${encodeURIComponent(values.repo)}` : ''}`);
      const rows = (r.json.changes ?? []) as Array<{ id: string; repo: string; phase: string; status: string; request: string }>;
      if (rows.length === 0) io.out('No changes.\n');
      else io.out(table([['ID', 'REPO', 'STATUS', 'PHASE', 'REQUEST'], ...rows.map((c) => [c.id, c.repo, c.status, c.phase, c.request.replace(/\s+/g, ' ').slice(0, 60)])]));
      return 0;
    }
    case 'start': {
      const [repo, ...words] = positionals;
      if (!repo || words.length === 0) throw new UsageError(`usage: ${usageOf('changes')}`);
      const r = await callApi(target, 'POST', '/api/v1/changes', { repo, request: words.join(' '), ...(values.base ? { base: values.base } : {}) });
      if (r.status !== 202) return fail(r);
      io.out(`Started change ${String(r.json.id)}.${r.json.runUrl ? ` Run: ${String(r.json.runUrl)}` : ''}\n`);
      return 0;
    }
    case 'show': {
      const id = check(ChangeIdArg, positionals[0], 'ID');
      const r = await callApi(target, 'GET', `/api/v1/changes/${id}`);
      if (r.status !== 200) return fail(r);
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
    }
    case 'patch': {
      const id = check(ChangeIdArg, positionals[0], 'ID');
      const includeRefused = values['include-refused'] === true;
      let res: Response;
      try {
        res = await fetch(`${target.url}/api/v1/changes/${id}/patch${includeRefused ? '?include=refused' : ''}`, { headers: { authorization: `Bearer ${target.token}` } });
      } catch {
        throw new UsageError(`cannot reach Steward at ${target.url}: is it running? (./steward start)`);
      }
      if (res.status === 409) {
        const json = (await res.json().catch(() => ({}))) as Record<string, unknown>;
        io.err(`${String(json.error ?? 'the change was not promoted')}; --include-refused saves it anyway.\n`);
        return 1;
      }
      if (res.status !== 200) return fail({ status: res.status, json: ((await res.json().catch(() => ({}))) as Record<string, unknown>) });
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
    }
    case 'answer': {
      const id = check(ChangeIdArg, positionals[0], 'ID');
      const text = positionals.slice(1).join(' ');
      if (!text) throw new UsageError(`usage: ${usageOf('changes')}`);
      const r = await callApi(target, 'POST', `/api/v1/changes/${id}/answer`, { text });
      if (r.status !== 200) return fail(r);
      io.out(`${String(r.json.message)}\n`);
      return 0;
    }
    default:
      throw new UsageError(`usage: ${usageOf('changes')}`);
  }
}

/** `steward workspaces inbox NAME set|show|clear`: the workspace's IMAP inbox (the API checks every field). */
async function workspaceInbox(
  target: Awaited<ReturnType<typeof apiTarget>>,
  ws: string,
  action: string | undefined,
  values: { host?: string; port?: string; tls?: string; user?: string; folder?: string; 'password-ref'?: string },
  io: CliIo,
): Promise<number> {
  const at = `/api/v1/workspaces/${encodeURIComponent(ws)}/inbox`;
  const shown = (j: Record<string, unknown>) => {
    const m = (j.messages ?? {}) as { stored?: number; failed?: number };
    return [
      `Inbox of workspace ${String(j.workspace)}: ${String(j.user)} at ${String(j.host)}:${String(j.port)} (tls ${String(j.tls)}), folder ${String(j.folder)}, password from ${String(j.passwordRef)}`,
      `Messages: ${m.stored ?? 0} stored, ${m.failed ?? 0} failed; last UID ${String(j.lastUid)}${j.uidValidity ? ` (UIDVALIDITY ${String(j.uidValidity)})` : ''}`,
      j.lastError ? `Failing since ${String(j.lastErrorAt)}: ${String(j.lastError)}` : `Last good poll: ${j.lastSuccessAt ? String(j.lastSuccessAt) : 'none yet'}`,
    ].join('\n');
  };
  const done = (r: { status: number; json: Record<string, unknown> }, ok: (j: Record<string, unknown>) => string): number => {
    if (r.status >= 400) return apiFailure(io, r);
    io.out(`${ok(r.json)}\n`);
    return 0;
  };
  switch (action) {
    case 'set': {
      if (!values.host || !values.user || !values['password-ref']) throw new UsageError(`usage: ${usageOf('workspaces')}`);
      const port = values.port === undefined ? undefined : Number(values.port);
      const body = { host: values.host, user: values.user, passwordRef: values['password-ref'], ...(port !== undefined ? { port } : {}), ...(values.tls ? { tls: values.tls } : {}), ...(values.folder ? { folder: values.folder } : {}) };
      return done(await callApi(target, 'PUT', at, body), (j) => `Set. ${shown(j)}`);
    }
    case 'show':
      return done(await callApi(target, 'GET', at), shown);
    case 'clear':
      return done(await callApi(target, 'DELETE', at), () => `Workspace ${ws} has no inbox now (the documents it wrote stay).`);
    default:
      throw new UsageError(`usage: ${usageOf('workspaces')}`);
  }
}

/** `steward ui`: a new one-time link that signs a browser in and opens the Temporal UI Steward serves. */
async function workspaces(sub: string | undefined, args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      url: { type: 'string' },
      token: { type: 'string' },
      folder: { type: 'string' },
      path: { type: 'string', multiple: true },
      chat: { type: 'string' },
      platform: { type: 'string' },
      account: { type: 'string' },
      limit: { type: 'string' },
      host: { type: 'string' },
      port: { type: 'string' },
      tls: { type: 'string' },
      user: { type: 'string' },
      'password-ref': { type: 'string' },
    },
  });
  const target = await apiTarget(io.config(), io, values);
  const name = () => check(z.string().min(1).max(64), positionals[0], 'NAME');
  const at = (n: string) => `/api/v1/workspaces/${encodeURIComponent(n)}`;
  const done = (r: { status: number; json: Record<string, unknown> }, ok: (j: Record<string, unknown>) => string): number => {
    if (r.status >= 400) return apiFailure(io, r);
    io.out(ok(r.json));
    return 0;
  };
  const chat = () => {
    if (!values.chat) throw new UsageError(`usage: ${usageOf('workspaces')}`);
    return { chatId: values.chat, ...(values.platform ? { platform: values.platform } : {}), ...(values.account ? { account: values.account } : {}) };
  };
  switch (sub) {
    case 'list': {
      const r = await callApi(target, 'GET', '/api/v1/workspaces');
      const rows = (r.json.workspaces ?? []) as Array<{ name: string; root: string; chats: number }>;
      if (rows.length === 0) io.out('No workspaces.\n');
      else io.out(table([['NAME', 'CHATS', 'FOLDER'], ...rows.map((x) => [x.name, String(x.chats), x.root])]));
      return 0;
    }
    case 'show':
      return done(await callApi(target, 'GET', at(name())), (j) => `${JSON.stringify(j, null, 2)}\n`);
    case 'create':
      return done(await callApi(target, 'POST', '/api/v1/workspaces', { name: name(), ...(values.folder ? { folder: values.folder } : {}) }), (j) => `Created workspace ${String(j.name)} at ${String(j.root)}; indexing its files.\n`);
    case 'reindex':
      return done(await callApi(target, 'POST', `${at(name())}/reindex`, values.path ? { paths: values.path } : {}), () => `Indexing ${values.path ? `${values.path.length} path(s) of ` : ''}workspace ${positionals[0]} again.\n`);
    case 'bind':
      return done(await callApi(target, 'POST', `${at(name())}/chats`, chat()), (j) => `Chat ${values.chat} uses workspace ${String(j.workspace)}.\n`);
    case 'unbind':
      return done(await callApi(target, 'DELETE', `${at(name())}/chats`, chat()), () => `Chat ${values.chat} no longer uses workspace ${positionals[0]}.\n`);
    case 'search': {
      const words = positionals.slice(1).join(' ');
      if (!words) throw new UsageError(`usage: ${usageOf('workspaces')}`);
      const q = new URLSearchParams({ q: words, ...(values.limit ? { limit: values.limit } : {}) });
      return done(await callApi(target, 'GET', `${at(name())}/search?${q}`), (j) => {
        const hits = (j.hits ?? []) as Array<{ path: string; heading: string; startLine: number; endLine: number; text: string }>;
        if (hits.length === 0) return `Nothing in workspace ${positionals[0]} matches "${words}".\n`;
        return `${hits.map((h, i) => `${i + 1}. ${h.path}${h.heading ? ` > ${h.heading}` : ''} (lines ${h.startLine}-${h.endLine})\n   ${h.text.replace(/\s+/g, ' ').slice(0, 200)}`).join('\n')}\n`;
      });
    }
    case 'inbox':
      return workspaceInbox(target, name(), positionals[1], values, io);
    case 'open': {
      const p = positionals[1];
      if (!p) throw new UsageError(`usage: ${usageOf('workspaces')}`);
      return done(await callApi(target, 'GET', `${at(name())}/file?${new URLSearchParams({ path: p })}`), (j) => `${String(j.text)}${j.truncated ? `\n[the first part of ${String(j.bytes)} bytes]` : ''}\n`);
    }
    default:
      throw new UsageError(`usage: ${usageOf('workspaces')}`);
  }
}

async function skills(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { url: { type: 'string' }, token: { type: 'string' }, workspace: { type: 'string' } } });
  if (positionals.length > 0) throw new UsageError(`usage: ${usageOf('skills')}`);
  const target = await apiTarget(io.config(), io, values);
  const r = await callApi(target, 'GET', `/api/v1/skills${values.workspace ? `?${new URLSearchParams({ workspace: values.workspace })}` : ''}`);
  if (r.status >= 400) return apiFailure(io, r);
  const rows = (r.json.skills ?? []) as Array<{ name: string; version: string; source: string; roles: string[]; description: string }>;
  const problems = (r.json.problems ?? []) as Array<{ file: string; error: string }>;
  io.out(rows.length ? table([['NAME', 'VERSION', 'SOURCE', 'ROLES', 'DESCRIPTION'], ...rows.map((s) => [s.name, s.version, s.source, s.roles.join(',') || 'all', s.description.slice(0, 80)])]) : 'No skills.\n');
  for (const p of problems) io.out(`not a skill: ${p.file}: ${p.error}\n`);
  return 0;
}

async function memories(sub: string | undefined, args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { url: { type: 'string' }, token: { type: 'string' }, workspace: { type: 'string' }, chat: { type: 'string' }, platform: { type: 'string' }, account: { type: 'string' }, out: { type: 'string' } },
  });
  const target = await apiTarget(io.config(), io, values);
  const id = () => check(z.string().regex(/^m-[a-z0-9]{8}$/, 'a memory id looks like m-1a2b3c4d'), positionals[0], 'ID');
  switch (sub) {
    case 'export': {
      if (positionals.length > 0) throw new UsageError(`usage: ${usageOf('memories')}`);
      const q = new URLSearchParams({
        ...(values.workspace ? { workspace: values.workspace } : {}),
        ...(values.chat ? { chatId: values.chat } : {}),
        ...(values.platform ? { platform: values.platform } : {}),
        ...(values.account ? { account: values.account } : {}),
      });
      let res: Response;
      try {
        res = await fetch(`${target.url}/api/v1/memories/export?${q}`, { headers: { authorization: `Bearer ${target.token}` } });
      } catch {
        throw new UsageError(`cannot reach Steward at ${target.url}: is it running? (./steward start)`);
      }
      if (res.status === 401) throw new UsageError('the API token was refused (check STEWARD_API_TOKEN or --token)');
      const text = await res.text();
      if (res.status !== 200) return apiFailure(io, { status: res.status, json: (() => { try { return JSON.parse(text) as Record<string, unknown>; } catch { return {}; } })() });
      const lines = text ? text.trimEnd().split('\n').length : 0;
      if (values.out) {
        await writeFile(values.out, text, { mode: 0o600 });
        io.out(`Wrote ${lines} memor${lines === 1 ? 'y' : 'ies'} to ${values.out}.\n`);
      } else io.out(text);
      return 0;
    }
    case 'approve':
    case 'reject': {
      const r = await callApi(target, 'POST', `/api/v1/memories/${id()}/${sub}`);
      if (r.status >= 400) return apiFailure(io, r);
      io.out(`Memory ${String(r.json.id)} ${sub === 'approve' ? 'approved: it is recalled from now on' : 'rejected'}.\n`);
      return 0;
    }
    case 'forget': {
      const r = await callApi(target, 'DELETE', `/api/v1/memories/${id()}`);
      if (r.status >= 400) return apiFailure(io, r);
      io.out(`Memory ${String(r.json.id)} forgotten.\n`);
      return 0;
    }
    default:
      throw new UsageError(`usage: ${usageOf('memories')}`);
  }
}

/** `--flag a,b` as a list (absent: undefined). */
const listOf = (v: string | undefined): string[] | undefined => (v === undefined ? undefined : v.split(',').map((x) => x.trim()).filter(Boolean));

/** `steward mcp ...`: MCP servers through the running API (which validates every field). */
async function mcp(sub: string | undefined, args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      url: { type: 'string' },
      token: { type: 'string' },
      file: { type: 'string' },
      command: { type: 'string' },
      'server-url': { type: 'string' },
      'token-ref': { type: 'string' },
      'ro-bind': { type: 'string', multiple: true },
      network: { type: 'boolean' },
      env: { type: 'string', multiple: true },
      'allow-tools': { type: 'string' },
      'read-only': { type: 'string' },
      approval: { type: 'string', multiple: true },
      workspace: { type: 'string', multiple: true },
      timeout: { type: 'string' },
    },
  });
  const target = await apiTarget(io.config(), io, values);
  const name = () => check(z.string().min(1).max(64), positionals[0], 'NAME');
  const at = (n: string) => `/api/v1/mcp/servers/${encodeURIComponent(n)}`;
  const done = (r: { status: number; json: Record<string, unknown> }, ok: (j: Record<string, unknown>) => string): number => {
    if (r.status >= 400) return apiFailure(io, r);
    io.out(ok(r.json));
    return 0;
  };
  switch (sub) {
    case 'list': {
      const r = await callApi(target, 'GET', '/api/v1/mcp/servers');
      if (r.status >= 400) return apiFailure(io, r);
      const rows = (r.json.servers ?? []) as Array<{ name: string; transport: string; source: string; state: string; tools: number; enabled: boolean; lastError: string | null }>;
      if (rows.length === 0) io.out('No MCP servers.\n');
      else io.out(table([['NAME', 'TRANSPORT', 'SOURCE', 'STATE', 'TOOLS', 'LAST ERROR'], ...rows.map((x) => [x.name, x.transport, x.source, x.enabled ? x.state : 'disabled', String(x.tools), (x.lastError ?? '').slice(0, 80)])]));
      return 0;
    }
    case 'show':
      return done(await callApi(target, 'GET', at(name())), (j) => `${JSON.stringify(j, null, 2)}\n`);
    case 'remove':
      return done(await callApi(target, 'DELETE', at(name())), (j) => `Removed MCP server ${String(j.name)}.\n`);
    case 'tools':
      return done(await callApi(target, 'GET', `${at(name())}/tools`), (j) => {
        const tools = (j.tools ?? []) as Array<{ shown: string; offered: boolean; why?: string; approval: string; description: string }>;
        if (tools.length === 0) return `The MCP server ${String(j.server)} lists no tools.\n`;
        return table([['TOOL', 'OFFERED', 'APPROVAL', 'DESCRIPTION'], ...tools.map((t) => [t.shown, t.offered ? 'yes' : `no: ${t.why ?? ''}`, t.approval, t.description.replace(/\s+/g, ' ').slice(0, 60)])]);
      });
    case 'add': {
      let body: Record<string, unknown>;
      if (values.file) {
        try {
          body = JSON.parse(await readFile(values.file, 'utf8')) as Record<string, unknown>;
        } catch (err) {
          throw new UsageError(`--file: cannot read ${values.file} as JSON: ${(err as Error).message}`);
        }
      } else {
        const n = name();
        if ((values.command === undefined) === (values['server-url'] === undefined)) throw new UsageError(`give --command "argv..." (stdio) or --server-url URL (http)\nusage: ${usageOf('mcp')}`);
        const env: Record<string, string> = {};
        for (const e of values.env ?? []) {
          const m = /^([^=]+)=(.+)$/.exec(e);
          if (!m) throw new UsageError(`--env: expected NAME=env:STEWARD_MCP_<NAME> (got ${e})`);
          env[m[1]!] = m[2]!;
        }
        const approval: Record<string, string> = {};
        for (const a of values.approval ?? []) {
          const m = /^([^=]+)=(.+)$/.exec(a);
          if (!m) throw new UsageError(`--approval: expected TOOL=never|always|<role> (got ${a})`);
          approval[m[1]!] = m[2]!;
        }
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
      return done(await callApi(target, 'POST', '/api/v1/mcp/servers', body), (j) => `Registered MCP server ${String(j.name)} (${String(j.transport)}); list its tools with steward mcp tools ${String(j.name)}.\n`);
    }
    default:
      throw new UsageError(`usage: ${usageOf('mcp')}`);
  }
}

/** `steward tasks ...`: tasks through the running API (which validates every field). */
async function tasks(sub: string | undefined, args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      url: { type: 'string' },
      token: { type: 'string' },
      status: { type: 'string' },
      lane: { type: 'string' },
      chat: { type: 'string' },
      platform: { type: 'string' },
      account: { type: 'string' },
      priority: { type: 'string' },
      due: { type: 'string' },
      assignee: { type: 'string' },
      note: { type: 'string' },
      json: { type: 'boolean' },
    },
  });
  const target = await apiTarget(io.config(), io, values);
  const id = () => encodeURIComponent(check(z.string().regex(/^t-[a-z0-9]{8}$/i, 'a task id looks like t-1a2b3c4d'), positionals[0], 'ID').toLowerCase());
  type View = { id: string; lane: string; priority: string; status: string; dueAt: string | null; sender: string; assignee: string | null; text: string; chat: { platform: string; chatId: string } };
  const done = (r: { status: number; json: Record<string, unknown> }, ok: number, line: (t: View) => string): number => {
    if (r.status !== ok) return apiFailure(io, r);
    io.out(values.json ? `${JSON.stringify(r.json, null, 2)}\n` : `${line(r.json as unknown as View)}\n`);
    return 0;
  };
  switch (sub) {
    case 'list': {
      if (positionals.length > 0) throw new UsageError(`usage: ${usageOf('tasks')}`);
      const q = new URLSearchParams({ ...(values.status ? { status: values.status } : {}), ...(values.lane ? { lane: values.lane } : {}) });
      const r = await callApi(target, 'GET', `/api/v1/tasks${q.size ? `?${q}` : ''}`);
      if (r.status !== 200) return apiFailure(io, r);
      const rows = (r.json.tasks ?? []) as View[];
      if (values.json) io.out(`${JSON.stringify(rows, null, 2)}\n`);
      else if (rows.length === 0) io.out('No tasks.\n');
      else io.out(table([['ID', 'LANE', 'PRIORITY', 'STATUS', 'DUE', 'CHAT', 'FROM', 'TEXT'], ...rows.map((t) => [t.id, t.lane, t.priority, t.status, t.dueAt ?? '-', `${t.chat.platform}:${t.chat.chatId}`, t.sender, t.text.replace(/\s+/g, ' ').slice(0, 60)])]));
      return 0;
    }
    case 'add': {
      const text = positionals.join(' ').trim();
      if (!text || !values.chat) throw new UsageError(`usage: ${usageOf('tasks')}`);
      const r = await callApi(target, 'POST', '/api/v1/tasks', {
        text,
        chatId: values.chat,
        ...(values.platform ? { platform: values.platform } : {}),
        ...(values.account ? { account: values.account } : {}),
        ...(values.lane ? { lane: values.lane } : {}),
        ...(values.priority ? { priority: values.priority } : {}),
        ...(values.due ? { due: values.due } : {}),
        ...(values.assignee ? { assignee: values.assignee } : {}),
      });
      return done(r, 201, (t) => `Task ${t.id} made (${t.lane}, ${t.priority}, due ${t.dueAt ?? '-'}).`);
    }
    case 'route': {
      const cls = positionals[1];
      if (!cls || positionals.length > 2) throw new UsageError(`usage: ${usageOf('tasks')}`);
      const r = await callApi(target, 'POST', `/api/v1/tasks/${id()}/route`, { class: cls, ...(values.priority ? { priority: values.priority } : {}), ...(values.due ? { due: values.due } : {}) });
      return done(r, 200, (t) => `Task ${t.id}: ${t.status === 'closed' ? 'closed as noise' : `${t.lane}, ${t.priority}, due ${t.dueAt ?? '-'}`}.`);
    }
    case 'hand': {
      if (positionals.length !== 1) throw new UsageError(`usage: ${usageOf('tasks')}`);
      const r = await callApi(target, 'POST', `/api/v1/tasks/${id()}/hand`);
      return done(r, 200, (t) => `Task ${t.id} handed to the agent: a turn runs in ${t.chat.platform} chat ${t.chat.chatId}.`);
    }
    case 'close': {
      if (positionals.length !== 1) throw new UsageError(`usage: ${usageOf('tasks')}`);
      const r = await callApi(target, 'POST', `/api/v1/tasks/${id()}/close`, values.note ? { note: values.note } : undefined);
      return done(r, 200, (t) => `Task ${t.id} closed.`);
    }
    default:
      throw new UsageError(`usage: ${usageOf('tasks')}`);
  }
}

async function ui(args: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { url: { type: 'string' }, token: { type: 'string' } } });
  if (positionals.length > 0) throw new UsageError(`usage: ${usageOf('ui')}`);
  const target = await apiTarget(io.config(), io, values);
  let res: Response;
  try {
    res = await fetch(`${target.url}/codec/links`, { method: 'POST', headers: { authorization: `Bearer ${target.token}` } });
  } catch {
    throw new UsageError(`cannot reach Steward at ${target.url}: is it running? (./steward start)`);
  }
  const json = (await res.json().catch(() => ({}))) as Record<string, unknown>;
  if (res.status === 401) throw new UsageError('the API token was refused (check STEWARD_API_TOKEN or --token)');
  if (res.status !== 201 || typeof json.url !== 'string') return apiFailure(io, { status: res.status, json });
  const opens = typeof json.ui === 'string' ? `it signs the browser in and opens ${json.ui}` : 'it signs the browser in to the codec endpoint (this Steward serves no Temporal UI)';
  io.out(`${json.url}\n  (${opens}; it works once, until ${String(json.expiresAt)})\n`);
  return 0;
}

/** Run `steward <command> <sub> ...`; resolves with the exit code. */
export async function adminCommand(command: string, args: string[], io: CliIo): Promise<number> {
  const [sub, ...rest] = args;
  try {
    switch (command) {
      case 'identities':
        return await identities(sub, rest, io);
      case 'bindings':
        return await bindings(sub, rest, io);
      case 'pairing':
        return await pairing(sub, rest, io);
      case 'approvals':
        return await approvals(sub, rest, io);
      case 'shells':
        return await shells(sub, rest, io);
      case 'repos':
        return await repos(sub, rest, io);
      case 'changes':
        return await changes(sub, rest, io);
      case 'objectives':
        return await objectives(sub, rest, io);
      case 'workspaces':
        return await workspaces(sub, rest, io);
      case 'skills':
        return await skills(args, io);
      case 'memories':
        return await memories(sub, rest, io);
      case 'tasks':
        return await tasks(sub, rest, io);
      case 'ui':
        return await ui(args, io);
      case 'mcp':
        return await mcp(sub, rest, io);
      default:
        throw new UsageError(`unknown command ${command}`);
    }
  } catch (err) {
    if (err instanceof UsageError || (err instanceof TypeError && /option|argument/i.test(err.message))) {
      io.err(`steward ${command}: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
}


