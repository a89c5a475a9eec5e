/**
 * The `steward` command: `start` (all-in-one on embedded defaults), `api` and `worker` (the
 * process roles of a multi-machine deployment), `chat` (interactive chat
 * over the HTTP API), `migrate`, `receipts` (JSONL export), `help`.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { migrateDatabase } from '../activities/db.js';

import { runChat } from '../adapters/cli/chat.js';
import { ConfigError, loadConfig, type StewardConfig } from '../config/index.js';
import { createLogger } from './logger.js';
import { adminCommand } from './admin-cli.js';
import { historiesCommand } from './histories.js';
import { opsCommand, stdoutWriter } from './ops-cli.js';
import { redactUrl, startSteward, startWorkerOnly } from './start.js';
import { unavailableFeatures, unavailableLine } from './capabilities.js';

const USAGE = `Usage: steward <command> [options]

Commands:
  start                 Start Steward: Temporal (embedded unless TEMPORAL_ADDRESS is set),
                        the database, the worker and the HTTP API.
  api                   The HTTP API, chat adapters and event triggers without workers,
                        against TEMPORAL_ADDRESS (run \`steward worker\` processes beside it).
  worker [--queues interactive,background,repo] [--concurrency interactive=N,...]
                        Workers only, polling TEMPORAL_ADDRESS: the queues of the given
                        roles (default STEWARD_WORKER_QUEUES, all three), each running at
                        most N tasks at once (STEWARD_WORKER_CONCURRENCY).
  chat [--chat ID] [--user NAME] [--url URL] [--token TOKEN]
                        Chat with the agent of a running Steward.
  migrate               Apply database migrations (DATABASE_URL).
  receipts export [--since T] [--until T] [--chat ID] [--run ID] [--kind KIND] [--limit N]
                        Audit receipts as JSONL, streamed. T: ISO time or a duration
                        back from now (2h); --chat: chat id or session id; --run:
                        workflow id or run id. \`steward receipts ...\` is the same.
  trace <message id | workflow id | run id> [--chat ID] [--json]
                        One message's path (ingress, turn, model calls, tools,
                        approvals, delivery) from receipts and Temporal history.
  doctor [--json] [--timeout 5s] [--skip-sandbox]
                        Check configuration, Temporal, namespace and search
                        attributes, database migrations, sandbox, model provider
                        and chat tokens; exit 1 if a check fails.
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
             | patch ID [--out FILE] [--include-refused] | answer ID TEXT...
                        Governed repository changes (through the running API); a
                        patch that was not promoted only with --include-refused.
  objectives list | show ID | add NAME --chat ID (--every D | --cron C) --prompt T
             [--timezone Z] [--overlap P] [--catchup D] [--pause-on-failure] | update ID ...
             | pause ID | resume ID | trigger ID | backfill ID --start ISO --end ISO
             | skip-missed ID | delete ID
                        Objectives on Temporal Schedules (through the running API).
  histories record --query Q [--limit 20] [--out DIR] [--prefix NAME] [--include-running]
             [--force]  Record closed runs' histories (visibility query Q) as replay
                        fixtures (default test/replay/histories), payloads decoded.
  ui [--url URL] [--token TOKEN]
                        Print a one-time link that signs a browser in and opens the
                        Temporal UI of a running \`steward start\` (payloads decoded).
  test [files...]       Run the test suite (installs the system packages it needs
                        when it can; skips suites whose parts are missing, except
                        with CI=true).
  help                  Show this help.

Configuration: environment variables or a JSON config file; see .env.example.`;

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
    `  Codec:        ${steward.codecUrl}  (${cfg.codec.enabled ? `payloads encrypted; keys ${cfg.codec.keys ? 'from STEWARD_CODEC_KEYS' : `in ${path.join(steward.dataDir, 'codec-keys.json')}`}` : 'STEWARD_CODEC=off: new payloads are stored in plaintext'}; other UIs and the CLI: see README)`,
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

async function worker(args: string[]): Promise<void> {
  const { values } = parseArgs({ args, options: { queues: { type: 'string' }, concurrency: { type: 'string' } } });
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

const [command = 'help', ...rest] = process.argv.slice(2);
try {
  switch (command) {
    case 'start':
      await start('all');
      break;
    case 'api':
      await start('api');
      break;
    case 'worker':
      await worker(rest);
      break;
    case 'chat':
      await chat(rest);
      break;
    case 'migrate':
      await migrate();
      break;
    case 'receipts':
    case 'trace':
    case 'doctor':
      process.exitCode = await opsCommand(command, rest, { config, out: stdoutWriter(), err: (s) => process.stderr.write(s) });
      break;
    case 'identities':
    case 'bindings':
    case 'pairing':
    case 'approvals':
    case 'shells':
    case 'repos':
    case 'changes':
    case 'objectives':
    case 'ui':
      process.exitCode = await adminCommand(command, rest, { config, out: (s) => process.stdout.write(s), err: (s) => process.stderr.write(s) });
      break;
    case 'histories':
      process.exitCode = await historiesCommand(rest, { config, out: (s) => process.stdout.write(s), err: (s) => process.stderr.write(s) });
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
