/**
 * The `steward` command's commands: `start` (all-in-one on embedded defaults), `api` and
 * `worker` (the process roles of a multi-machine deployment), `chat` (interactive chat over the
 * HTTP API), `migrate`, `receipts` (JSONL export), `help`, ... Run through platform/main.ts,
 * which settles source maps before any of these modules load.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { migrateDatabase } from '../domain/db.js';

import { runChat } from '../adapters/cli/chat.js';
import { ConfigError, loadConfig, type StewardConfig } from '../config/index.js';
import { createLogger } from './logger.js';
import { adminCommand } from './admin-cli.js';
import { clusterCommand } from './cluster.js';
import { historiesCommand } from './histories.js';
import { opsCommand, stdoutWriter } from './ops-cli.js';
import { redactUrl, startSteward, startWorkerOnly } from './start.js';
import { unavailableFeatures, unavailableLine } from './capabilities.js';
import { CLI_COMMANDS, helpText, runCommand, usageOf, type HandlersOf } from './cli-commands.js';


/** The configuration; `overrides` (command-line flags) win over the environment. */
function config(overrides: Record<string, string> = {}): StewardConfig {
  try {
    return loadConfig({ ...process.env, ...overrides });
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
}

const io = { config, out: (s: string) => process.stdout.write(s), err: (s: string) => void process.stderr.write(s) };

async function start(role: 'all' | 'api'): Promise<void> {
  const cfg = config();
  const log = createLogger(cfg.logLevel);
  const steward = await startSteward(cfg, log, { role });
  const unavailable = unavailableLine(steward.unavailable);
  const out = [
    role === 'api' ? 'Steward API is running (no workers in this process: run `steward worker`).' : 'Steward is running.',
    `  API:          ${steward.apiUrl}  (health: ${steward.apiUrl}/healthz, OpenAPI: ${steward.apiUrl}/api/openapi.json)`,
    `  API token:    ${steward.apiTokenGenerated ? `${steward.apiToken}  (generated; saved in ${path.join(steward.dataDir, 'api-token')})` : `(from ${process.env.STEWARD_API_TOKEN ? 'STEWARD_API_TOKEN' : path.join(steward.dataDir, 'api-token')})`}`,
    `  Temporal:     ${steward.temporalAddress} (namespace ${steward.namespace})`,
    `  Temporal UI:  ${
      steward.temporalUiSignInUrl
        ? `${steward.temporalUiSignInUrl}  (opens ${steward.temporalUiUrl}/ signed in, payloads decoded; the link works once, within an hour: \`./steward ui\` prints another)`
        : (cfg.temporalUiUrl ?? '(not started here)')
    }`,
    `  Codec:        ${steward.codecUrl}  (${cfg.codec.enabled ? `payloads encrypted; keys ${cfg.codec.keys ? 'from STEWARD_CODEC_KEYS' : `in ${path.join(steward.dataDir, 'codec-keys.json')}`}` : 'STEWARD_CODEC=off: new payloads are stored in plaintext'}; other UIs and the CLI: see docs/operations.md)`,
    `  Data dir:     ${steward.dataDir}`,
    `  Database:     ${redactUrl(steward.databaseUrl)}`,
    `  Model:        ${steward.model}${steward.modelConfigured ? '' : '  (NOT CONFIGURED: set OPENAI_API_KEY, ANTHROPIC_API_KEY or STEWARD_MODEL_BASE_URL; chat answers with setup help until then)'}`,
    `  Chats:        ${steward.channels.length ? steward.channels.map((c) => `${c.platform} (bot ${c.account})`).join(', ') : 'HTTP API and CLI only (set TELEGRAM_BOT_TOKEN or DISCORD_BOT_TOKEN for chat platforms)'}`,
    ...(unavailable ? [`  Unavailable:  ${unavailable}`] : []),
    '',
    'Chat with it:  ./steward chat      Stop: Ctrl-C',
  ];
  process.stdout.write(`${out.join('\n')}\n`);

  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) {
      process.stderr.write('Forced exit.\n');
      process.exit(130);
    }
    stopping = true;
    process.stdout.write(`\n${signal}: shutting down (draining the worker, stopping the server)...\n`);
    steward
      .stop()
      .then(() => {
        process.stdout.write('Steward stopped.\n');
        process.exit(0);
      })
      .catch((err: unknown) => {
        process.stderr.write(`Shutdown failed: ${String(err)}\n`);
        process.exit(1);
      });
  };
  process.on('SIGINT', () => shutdown('SIGINT'));
  process.on('SIGTERM', () => shutdown('SIGTERM'));
}

type Main = HandlersOf<'main', typeof io>;

const worker: Main['worker'] = async ({ values }) => {
  // the flags override STEWARD_WORKER_QUEUES and STEWARD_WORKER_CONCURRENCY, with the same checks
  const cfg = config({
    ...(values.queues !== undefined ? { STEWARD_WORKER_QUEUES: values.queues } : {}),
    ...(values.concurrency !== undefined ? { STEWARD_WORKER_CONCURRENCY: values.concurrency } : {}),
  });
  const log = createLogger(cfg.logLevel);
  const w = await startWorkerOnly(cfg, log);
  const queues = w.queues.map((q) => `${q.taskQueue} (${q.role}${cfg.workers.concurrency[q.role] ? `, ${cfg.workers.concurrency[q.role]} at once` : ''})`).join(', ');
  process.stdout.write(`Steward worker polling ${queues} on ${cfg.temporal.address} (namespace ${cfg.temporal.namespace}).\n`);
  const unavailable = unavailableLine(await unavailableFeatures());
  if (unavailable) process.stdout.write(`Unavailable on this machine: ${unavailable}\n`);
  const stop = () => {
    w.stop().catch((err: unknown) => log.error({ err }, 'worker shutdown failed'));
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  await w.done;
  process.stdout.write('Steward worker stopped.\n');
  return 0;
};

const chat: Main['chat'] = async ({ values }) => {
  const cfg = config();
  let token = values.token ?? cfg.http.apiToken;
  if (!token) {
    try {
      token = (await readFile(path.join(cfg.dataDir, 'api-token'), 'utf8')).trim();
    } catch {
      process.stderr.write('No API token: start Steward first (it saves one in the data directory), or pass --token.\n');
      process.exit(2);
    }
  }
  const host = cfg.http.host === '0.0.0.0' ? '127.0.0.1' : cfg.http.host;
  await runChat({
    baseUrl: values.url ?? `http://${host}:${cfg.http.port}`,
    token,
    chatId: values.chat ?? 'cli',
    user: values.user ?? process.env.USER ?? 'cli',
  });
  return 0;
};

const migrate: Main['migrate'] = async () => {
  const cfg = config();
  await migrateDatabase(cfg.databaseUrl);
  process.stdout.write(`Migrated ${redactUrl(cfg.databaseUrl)}\n`);
  return 0;
};

/** The commands this module runs itself: one handler for each of the table's `main` commands. */
const MAIN = {
  start: async () => {
    await start('all');
    return 0;
  },
  api: async () => {
    await start('api');
    return 0;
  },
  worker,
  chat,
  migrate,
  // `steward help`: every command; `steward help <command>`: that command's flags (its --help)
  help: async ({ args: [name] }) => {
    if (name === undefined) process.stdout.write(`${helpText()}\n`);
    else return run(name, ['--help']);
    return 0;
  },
} satisfies Main;

/** Run one command of the table through its runner's handlers; resolves with the exit code. */
async function run(name: string, args: readonly string[]): Promise<number> {
  const entry = CLI_COMMANDS.find((c) => c.name === name);
  if (!entry) {
    process.stderr.write(`Unknown command: ${name}\n\n${helpText()}\n`);
    return 2;
  }
  switch (entry.runner) {
    case 'main':
      return runCommand(entry.name, args, io, MAIN);
    case 'ops':
      return opsCommand(entry.name, args, { ...io, out: stdoutWriter() });
    case 'admin':
      return adminCommand(entry.name, args, io);
    case 'histories':
      return historiesCommand(args, io);
    case 'cluster':
      return clusterCommand(args, io);
    case 'launcher':
      process.stderr.write(`steward ${entry.name} runs through the launcher: ./${usageOf(entry.name)}\n`);
      return 2;
  }
}

const [given = 'help', ...rest] = process.argv.slice(2);
const command = given === '--help' || given === '-h' ? 'help' : given;
try {
  process.exitCode = await run(command, rest);
} catch (err) {
  process.stderr.write(`steward ${command}: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
}
