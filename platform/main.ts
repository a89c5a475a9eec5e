/**
 * The `steward` command: `start` (all-in-one on embedded defaults), `chat` (interactive chat
 * over the HTTP API), `migrate`, `receipts` (JSONL export), `help`.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { createDb, migrateDatabase } from '../activities/db.js';

import { listReceipts } from '../activities/receipts.js';
import { runChat } from '../adapters/cli/chat.js';
import { ConfigError, loadConfig, type StewardConfig } from '../config/index.js';
import { createLogger } from './logger.js';
import { adminCommand } from './admin-cli.js';
import { redactUrl, startSteward, startWorkerOnly } from './start.js';

const USAGE = `Usage: steward <command> [options]

Commands:
  start                 Start Steward: Temporal (embedded unless TEMPORAL_ADDRESS is set),
                        the database, the worker and the HTTP API.
  worker                Run the workers only (interactive and repo queues), polling
                        TEMPORAL_ADDRESS.
  chat [--chat ID] [--user NAME] [--url URL] [--token TOKEN]
                        Chat with the agent of a running Steward.
  migrate               Apply database migrations (DATABASE_URL).
  receipts [--session ID] [--kind KIND] [--after N] [--limit N]
                        Print audit receipts as JSONL.
  identities list | add --name N --role R [--telegram ID] [--discord ID]
             | set-role ID ROLE | remove ID
                        People Steward knows and their roles (the first overlord is
                        added here). Works without a running Steward.
  bindings list | add --platform P --chat ID [--mode mention|all] [--name N]
             [--model M] [--admin-channel] [--account A] | remove ID
                        Chats Steward answers in. Works without a running Steward.
  pairing list | approve CODE ROLE | deny CODE
                        Pending /pair requests (through the running Steward's API).
  approvals list [--status S] | approve ID | deny ID [--reason TEXT]
                        Actions agents proposed (through the running Steward's API).
  shells issue NAME [--role R] [--identity ID] | list | revoke NAME
                        OpenHarness shells and their bearer tokens (shown once).
  repos list | show NAME | remove NAME | add NAME --clone URL [--branch B]
             [--check "name: argv..."] [--agent-command "argv..."] [--github owner/repo
             --token-ref env:NAME] [--promotion P] | add --file repo.json
                        Repositories Steward may change (through the running API).
  changes list [--repo R] | start REPO REQUEST... [--base B] | show ID [--json]
             | patch ID [--out FILE] | answer ID TEXT...
                        Governed repository changes (through the running API).
  objectives list | show ID | add NAME --chat ID (--every D | --cron C) --prompt T
             [--timezone Z] [--overlap P] [--catchup D] [--pause-on-failure] | update ID ...
             | pause ID | resume ID | trigger ID | backfill ID --start ISO --end ISO
             | skip-missed ID | delete ID
                        Objectives on Temporal Schedules (through the running API).
  test [files...]       Run the test suite.
  help                  Show this help.

Configuration: environment variables or a JSON config file; see .env.example.`;

function config(): StewardConfig {
  try {
    return loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
}

async function start(): Promise<void> {
  const cfg = config();
  const log = createLogger(cfg.logLevel);
  const steward = await startSteward(cfg, log);
  const out = [
    'Steward is running.',
    `  API:          ${steward.apiUrl}  (health: ${steward.apiUrl}/healthz, OpenAPI: ${steward.apiUrl}/api/openapi.json)`,
    `  API token:    ${steward.apiTokenGenerated ? `${steward.apiToken}  (generated; saved in ${path.join(steward.dataDir, 'api-token')})` : `(from ${process.env.STEWARD_API_TOKEN ? 'STEWARD_API_TOKEN' : path.join(steward.dataDir, 'api-token')})`}`,
    `  Temporal:     ${steward.temporalAddress} (namespace ${steward.namespace})`,
    `  Temporal UI:  ${steward.temporalUiUrl ?? '(not started here)'}`,
    `  Data dir:     ${steward.dataDir}`,
    `  Database:     ${redactUrl(steward.databaseUrl)}`,
    `  Model:        ${steward.model}${steward.modelConfigured ? '' : '  (NOT CONFIGURED: set OPENAI_API_KEY, ANTHROPIC_API_KEY or STEWARD_MODEL_BASE_URL; chat answers with setup help until then)'}`,
    `  Chats:        ${steward.channels.length ? steward.channels.map((c) => `${c.platform} (bot ${c.account})`).join(', ') : 'HTTP API and CLI only (set TELEGRAM_BOT_TOKEN or DISCORD_BOT_TOKEN for chat platforms)'}`,
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

async function worker(): Promise<void> {
  const cfg = config();
  const log = createLogger(cfg.logLevel);
  const w = await startWorkerOnly(cfg, log);
  process.stdout.write(`Steward worker polling ${cfg.temporal.taskQueue} on ${cfg.temporal.address} (namespace ${cfg.temporal.namespace}).\n`);
  const stop = () => {
    w.stop().catch((err: unknown) => log.error({ err }, 'worker shutdown failed'));
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  await w.done;
  process.stdout.write('Steward worker stopped.\n');
}

async function chat(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: { chat: { type: 'string' }, user: { type: 'string' }, url: { type: 'string' }, token: { type: 'string' } },
  });
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
}

async function migrate(): Promise<void> {
  const cfg = config();
  await migrateDatabase(cfg.databaseUrl);
  process.stdout.write(`Migrated ${redactUrl(cfg.databaseUrl)}\n`);
}

async function receipts(args: string[]): Promise<void> {
  const { values } = parseArgs({ args, options: { session: { type: 'string' }, kind: { type: 'string' }, after: { type: 'string' }, limit: { type: 'string' } } });
  const cfg = config();
  const db = createDb(cfg.databaseUrl);
  try {
    const rows = await listReceipts(db, {
      ...(values.session ? { sessionId: values.session } : {}),
      ...(values.kind ? { kind: values.kind } : {}),
      ...(values.after ? { afterId: Number(values.after) } : {}),
      ...(values.limit ? { limit: Number(values.limit) } : {}),
    });
    for (const r of rows) process.stdout.write(`${JSON.stringify(r)}\n`);
  } finally {
    await db.$disconnect();
  }
}

const [command = 'help', ...rest] = process.argv.slice(2);
try {
  switch (command) {
    case 'start':
      await start();
      break;
    case 'worker':
      await worker();
      break;
    case 'chat':
      await chat(rest);
      break;
    case 'migrate':
      await migrate();
      break;
    case 'receipts':
      await receipts(rest);
      break;
    case 'identities':
    case 'bindings':
    case 'pairing':
    case 'approvals':
    case 'shells':
    case 'repos':
    case 'changes':
    case 'objectives':
      process.exitCode = await adminCommand(command, rest, { config, out: (s) => process.stdout.write(s), err: (s) => process.stderr.write(s) });
      break;
    case 'help':
    case '--help':
    case '-h':
      process.stdout.write(`${USAGE}\n`);
      break;
    default:
      process.stderr.write(`Unknown command: ${command}\n\n${USAGE}\n`);
      process.exit(2);
  }
} catch (err) {
  process.stderr.write(`steward ${command}: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
}
