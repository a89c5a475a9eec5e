/**
 * The `steward` command table: every command once, with its forms and what it does. The
 * overall help (`steward help`), each command's usage line in its errors, and the routing in
 * platform/cli.ts derive from it, so a command or a flag is written down in one place.
 */

/** Which module runs a command: cli.ts itself, or one of the command modules. */
export type CliRunner = 'main' | 'ops' | 'admin' | 'histories' | 'cluster' | 'launcher';

export interface CliCommand {
  name: string;
  /** The command's forms after its name (subcommands and flags), one per alternative. */
  forms: readonly string[];
  /** What it does, for the overall help (plain sentences). */
  summary: string;
  /** Extra lines under the usage in the command's own errors (what a flag's value may be). */
  notes?: readonly string[];
  runner: CliRunner;
}

export const CLI_COMMANDS = [
  { name: 'start', forms: [''], runner: 'main', summary: 'Start Steward: Temporal (embedded unless TEMPORAL_ADDRESS is set), the database, the worker and the HTTP API.' },
  {
    name: 'api',
    forms: [''],
    runner: 'main',
    summary: 'The HTTP API, chat adapters and event triggers without workers, against TEMPORAL_ADDRESS (run `steward worker` processes beside it).',
  },
  {
    name: 'worker',
    forms: ['[--queues interactive,background,repo] [--concurrency interactive=N,...]'],
    runner: 'main',
    summary:
      'Workers only, polling TEMPORAL_ADDRESS: the queues of the given roles (default STEWARD_WORKER_QUEUES, all three), each running at most N tasks at once (STEWARD_WORKER_CONCURRENCY).',
  },
  { name: 'chat', forms: ['[--chat ID] [--user NAME] [--url URL] [--token TOKEN]'], runner: 'main', summary: 'Chat with the agent of a running Steward.' },
  { name: 'migrate', forms: [''], runner: 'main', summary: 'Apply database migrations (DATABASE_URL).' },
  {
    name: 'receipts',
    forms: ['export [--since T] [--until T] [--chat ID] [--run ID] [--kind K] [--limit N]'],
    runner: 'ops',
    summary: 'Audit receipts as JSONL, streamed.',
    notes: [
      'T: an ISO time (2026-11-23T10:00:00Z) or a duration back from now (90s, 15m, 2h, 7d);',
      '--chat: a chat id (every session of that chat) or a session id; --run: a workflow id or a run id.',
    ],
  },
  {
    name: 'trace',
    forms: ['<message id | transcript key | turn id | workflow id | run id> [--chat ID] [--json]'],
    runner: 'ops',
    summary: "One message's path (ingress, turn, model calls, tools, approvals, delivery) from receipts and Temporal history.",
  },
  {
    name: 'doctor',
    forms: ['[--json] [--timeout 5s] [--skip-sandbox]'],
    runner: 'ops',
    summary: 'Check configuration, Temporal, namespace and search attributes, database migrations, sandbox, model provider, chat tokens, workspace inboxes and MCP servers; exit 1 if a check fails.',
  },
  {
    name: 'policy',
    forms: ['what-if FILE [--since T] [--repo R] [--json]'],
    runner: 'ops',
    summary:
      "Judge a policy change by its evidence: evaluate past repository changes (their recorded patches, bases and the task's scope) under the policy in force and the file's repoPolicy, and past tool calls under its approvalTools; print each decision that would change, with the reasons under both. Writes nothing; no model, no network (database only).",
    notes: ['FILE: JSON {"repoPolicy"?: <a policy layer, as STEWARD_REPO_POLICY>, "approvalTools"?: ["post_to_chat", ...]}; T: an ISO time or a duration back from now (7d).'],
  },
  {
    name: 'identities',
    forms: ['list', 'add --name N --role R [--telegram ID] [--discord ID]', 'set-role ID ROLE', 'remove ID'],
    runner: 'admin',
    summary: 'People Steward knows and their roles (the first overlord is added here). Works without a running Steward.',
  },
  {
    name: 'bindings',
    forms: [
      'list',
      'add --platform telegram|discord|openharness --chat ID [--mode mention|all] [--name N] [--model provider:model] [--admin-channel] [--account A]',
      'remove ID',
      'triage ID on|off [--model provider:model]',
    ],
    runner: 'admin',
    summary: 'Chats Steward answers in, and whether their messages that do not address Steward are triaged into tasks. Works without a running Steward.',
    notes: ['A negative Telegram group id goes as --chat=-100123.'],
  },
  { name: 'pairing', forms: ['list', 'approve CODE ROLE', 'deny CODE'], runner: 'admin', summary: "Pending /pair requests (through the running Steward's API)." },
  {
    name: 'approvals',
    forms: ['list [--status pending|approved|denied|expired|cancelled]', 'approve ID', 'deny ID [--reason TEXT]'],
    runner: 'admin',
    summary: "Actions agents proposed (through the running Steward's API).",
  },
  {
    name: 'shells',
    forms: ['issue NAME [--role R] [--identity ID]', 'list', 'revoke NAME'],
    runner: 'admin',
    summary: 'OpenHarness shells and their bearer tokens (shown once).',
  },
  {
    name: 'repos',
    forms: [
      'list',
      'show NAME',
      'remove NAME',
      'add NAME --clone URL [--branch main] [--check "name: argv..."]... [--agent-command "argv..."] [--model provider:model] [--github owner/repo --token-ref env:NAME] [--promotion patch|draft-pr|draft-pr-after-approval]',
      'add --file repo.json',
    ],
    runner: 'admin',
    summary: 'Repositories Steward may change (through the running API).',
  },
  {
    name: 'changes',
    forms: ['list [--repo R]', 'start REPO REQUEST... [--base BRANCH]', 'show ID [--json]', 'patch ID [--out FILE] [--include-refused]', 'answer ID TEXT...'],
    runner: 'admin',
    summary: 'Governed repository changes (through the running API); a patch that was not promoted only with --include-refused.',
  },
  {
    name: 'objectives',
    forms: [
      'list',
      'show ID',
      'add NAME --chat ID [--platform http|telegram|discord] [--account A] [--every 30m | --cron "0 9 * * *"] [--watch DIR] [--email ADDRESS] [--timezone Z] [--jitter 1m] [--overlap skip|buffer-one|buffer-all|cancel-other|terminate-other|allow-all] [--catchup 1h] [--pause-on-failure] [--model M] --prompt TEXT',
      'update ID [--prompt T] [--every D | --cron C] [--timezone Z] [--overlap P] [--catchup D] [--watch DIR|""] [--email ADDRESS|""]',
      'pause ID',
      'resume ID',
      'trigger ID',
      'backfill ID --start ISO --end ISO',
      'skip-missed ID',
      'delete ID',
    ],
    runner: 'admin',
    summary: 'Objectives on Temporal Schedules (through the running API): a schedule, a trigger (--watch, --email) or both.',
  },
  {
    name: 'histories',
    forms: ["record --query '<visibility query>' [--limit 20] [--out test/replay/histories] [--prefix rec] [--include-running] [--force]"],
    runner: 'histories',
    summary: "Record closed runs' histories (visibility query) as replay fixtures, payloads decoded.",
  },
  {
    name: 'workspaces',
    forms: ['list', 'show NAME', 'create NAME [--folder DIR]', 'reindex NAME [--path P]...', 'bind NAME --chat ID [--platform http|telegram|discord] [--account A]', 'unbind NAME --chat ID [--platform P] [--account A]', 'search NAME WORDS... [--limit N]', 'open NAME PATH', 'inbox NAME set --host H --user U --password-ref env:STEWARD_INBOX_<NAME> [--port P] [--tls implicit|starttls|none] [--folder F]', 'inbox NAME show|clear'],
    runner: 'admin',
    summary: "Workspaces of Markdown and text knowledge: create, bind to chats, reindex, search and read, and an IMAP inbox whose mail becomes documents (through the running Steward's API).",
  },
  {
    name: 'skills',
    forms: ['[--workspace NAME]'],
    runner: 'admin',
    summary: "The skills (SKILL.md runbooks): the operator's folder, with a workspace's skills/ when named; their versions and any file that is not a valid skill (through the running API).",
  },
  {
    name: 'memories',
    forms: ['export [--workspace NAME | --chat ID [--platform P] [--account A]] [--out FILE]', 'approve ID', 'reject ID', 'forget ID'],
    runner: 'admin',
    summary: "What the agent remembers: export as JSON lines with provenance and receipts, approve or reject a proposal, forget one (through the running API).",
  },
  {
    name: 'mcp',
    forms: [
      'list',
      'show NAME',
      'tools NAME',
      'remove NAME',
      'add NAME --command "argv..." [--ro-bind DIR]... [--network] [--env NAME=env:STEWARD_MCP_X]... [--allow-tools a,b] [--read-only a,b] [--approval TOOL=never|always|ROLE]... [--workspace W]... [--timeout 30s]',
      'add NAME --server-url URL [--token-ref env:STEWARD_MCP_X] [...the same policy flags]',
      'add --file server.json',
    ],
    runner: 'admin',
    summary:
      "MCP servers whose tools agents may call (through the running API): stdio servers run in the sandbox, Streamable HTTP servers by URL; tools lists what each tool is offered as and its approval policy. Servers of STEWARD_MCP_CONFIG are changed in that file.",
  },
  {
    name: 'tasks',
    forms: [
      'list [--status open|handed|closed|all] [--lane L] [--json]',
      'add TEXT... --chat ID [--platform P] [--account A] [--lane question|issue|task|moderation] [--priority p1|p2|p3] [--due 4h] [--assignee NAME]',
      'route ID question|issue|task|moderation|noise [--priority P] [--due D]',
      'hand ID',
      'close ID [--note TEXT]',
    ],
    runner: 'admin',
    summary: "Tasks from triage and by hand: list, make, re-route (noise closes one), hand to the agent (a turn in the task's chat), close (through the running API).",
  },
  {
    name: 'ui',
    forms: ['[--url URL] [--token TOKEN]'],
    runner: 'admin',
    summary: 'Print a one-time link that signs a browser in and opens the Temporal UI of a running `steward start` (payloads decoded).',
  },
  {
    name: 'cluster',
    forms: ['up [--nodes 2] [--base-port 7233] [--api-port 8787] [--pg-url URL] [--db-prefix P] [--join-timeout 30] [--dir DIR]', 'down [--dir DIR]', 'status [--json] [--dir DIR]', 'restart [nodes|worker|repo-worker|api|all ...] [--join-timeout 30] [--dir DIR]'],
    runner: 'cluster',
    summary:
      "The production shape on one machine: a Temporal cluster of two server processes on PostgreSQL (built from the Go module at docker-compose.yml's version, cached), Steward's database, and Steward as the compose file's api, worker and repo-worker processes with its environment. up starts what is not running (a stopped or killed node too), down stops them all, status checks each (a node joined when it and the others reach each other in one ring), restart rolls the processes one at a time (default: worker, repo-worker, api).",
  },
  {
    name: 'test',
    forms: ['[files...]'],
    runner: 'launcher',
    summary: 'Run the test suite (installs the system packages it needs when it can; skips suites whose parts are missing, except with CI=true). Through ./steward only.',
  },
  { name: 'help', forms: [''], runner: 'main', summary: 'Show this help.' },
] as const satisfies readonly CliCommand[];

export type CliCommandName = (typeof CLI_COMMANDS)[number]['name'];

function command(name: string): CliCommand {
  const c = (CLI_COMMANDS as readonly CliCommand[]).find((x) => x.name === name);
  if (!c) throw new Error(`no such steward command: ${name}`);
  return c;
}

/** One command's usage: `steward NAME form | form ...`, with its notes on the lines after. */
export function usageOf(name: string): string {
  const c = command(name);
  const forms = c.forms.filter((f) => f !== '');
  const line = `steward ${c.name}${forms.length ? ` ${forms.join(' | ')}` : ''}`;
  return [line, ...(c.notes ?? []).map((n) => `  ${n}`)].join('\n');
}

/** Words to lines of at most `width`, each after `indent` (the first after `first`). */
function wrap(text: string, width: number, indent: string, first = indent): string[] {
  const lines: string[] = [];
  let line = first;
  let empty = true;
  for (const word of text.split(/\s+/).filter(Boolean)) {
    if (!empty && line.length + 1 + word.length > width) {
      lines.push(line);
      line = indent;
      empty = true;
    }
    line += empty ? word : ` ${word}`;
    empty = false;
  }
  lines.push(line);
  return lines;
}

const WIDTH = 96;
const COLUMN = 24;

/** `steward help`: every command's forms and what it does. */
export function helpText(): string {
  const out = ['Usage: steward <command> [options]', '', 'Commands:'];
  for (const c of CLI_COMMANDS as readonly CliCommand[]) {
    const forms = c.forms.filter((f) => f !== '');
    const head = forms.length ? `${c.name} ${forms.join(' | ')}` : c.name;
    const headLines = wrap(head, WIDTH, '             ', '  ');
    const lastHead = headLines.at(-1)!;
    // the summary starts on the last usage line when there is room, else on the next
    if (headLines.length === 1 && lastHead.length < COLUMN - 1) {
      headLines.pop();
      out.push(...headLines, ...wrap(c.summary, WIDTH, ' '.repeat(COLUMN), lastHead.padEnd(COLUMN)));
    } else {
      out.push(...headLines, ...wrap(c.summary, WIDTH, ' '.repeat(COLUMN)));
    }
    for (const n of c.notes ?? []) out.push(...wrap(n, WIDTH, ' '.repeat(COLUMN)));
  }
  out.push('', 'Configuration: environment variables, .env or a JSON config file;', 'every setting, its default and meaning: docs/configuration.md.');
  return out.join('\n');
}
