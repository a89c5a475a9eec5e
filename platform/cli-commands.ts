/**
 * The `steward` command table: every command once, with its subcommands, their arguments and
 * flags (name, value, required, description), and what it does. commander (runCommand below)
 * parses every command from it; the overall help (`steward help`), each command's own help
 * (`steward <command> [<subcommand>] --help`), the usage line in its errors and the routing in
 * platform/cli.ts derive from it, so a command or a flag is written down in one place. The
 * handlers live in the runner modules (cli.ts, ops-cli.ts, admin-cli.ts, histories.ts,
 * cluster.ts), each typed by `HandlersOf` to hold exactly one handler per command and
 * subcommand of the table, with the table's flags as its values' type.
 */
import { Command, CommanderError, Option } from 'commander';

/** Which module runs a command: cli.ts itself, or one of the command modules. */
export type CliRunner = 'main' | 'ops' | 'admin' | 'histories' | 'cluster' | 'launcher';

/** A flag: `--name VALUE` (a string), or `--name` alone (a switch) when it has no value. */
export interface CliFlag {
  readonly name: string;
  /** The value's placeholder in the help; absent: a switch (true when given). */
  readonly value?: string;
  /** Given more than once: every value, in order. */
  readonly multiple?: boolean;
  /** commander refuses the command without it. */
  readonly required?: boolean;
  /** Read by the handler but left out of the help (kept for scripts that pass it). */
  readonly hidden?: boolean;
  readonly description: string;
}

/** A subcommand (`steward identities add ...`): its forms after its name, its arguments and flags. */
export interface CliSub {
  readonly name: string;
  /** What follows the subcommand's name in the help, one per alternative ('' for nothing). */
  readonly usage: string | readonly string[];
  /** Its arguments in commander's syntax: `<id>` required, `[id]` optional, `<words...>` the rest. */
  readonly args?: string;
  readonly flags?: readonly CliFlag[];
  /** The subcommand that runs when none is named (`steward receipts --kind ...` is `receipts export`). */
  readonly isDefault?: boolean;
}

export interface CliCommand {
  readonly name: string;
  /** What it does, for the overall help (plain sentences). */
  readonly summary: string;
  /** Extra lines under the usage in the command's help and errors (what a flag's value may be). */
  readonly notes?: readonly string[];
  readonly runner: CliRunner;
  /** Its subcommands; a command without them has its own usage, arguments and flags. */
  readonly subs?: readonly CliSub[];
  /** Flags every subcommand takes (`--url`, `--token` of the commands that call the running API). */
  readonly common?: readonly CliFlag[];
  readonly usage?: string;
  readonly args?: string;
  readonly flags?: readonly CliFlag[];
}

/** `--name VALUE`. */
const flag = <N extends string>(name: N, value: string, description: string) => ({ name, value, description }) as const;
/** `--name VALUE` that must be given. */
const needed = <N extends string>(name: N, value: string, description: string) => ({ name, value, description, required: true }) as const;
/** `--name VALUE`, repeatable. */
const many = <N extends string>(name: N, value: string, description: string) => ({ name, value, description, multiple: true }) as const;
/** `--name`, a switch. */
const on = <N extends string>(name: N, description: string) => ({ name, description }) as const;
/** A flag the handler reads that the help leaves out. */
const hidden = <F extends CliFlag>(f: F) => ({ ...f, hidden: true }) as const;

/** The running API to call (default: this machine's Steward, with the token it saved). */
const API = [flag('url', 'URL', "the running Steward's base URL (default: this machine's)"), flag('token', 'TOKEN', 'the API token (default: STEWARD_API_TOKEN or the one Steward saved)')] as const;
const JSON_OUT = on('json', 'print JSON');
const OBJECTIVE_ID = { args: '<id>', usage: 'ID' } as const;

export const CLI_COMMANDS = [
  { name: 'start', usage: '', runner: 'main', summary: 'Start Steward: Temporal (embedded unless TEMPORAL_ADDRESS is set), the database, the worker and the HTTP API.' },
  {
    name: 'api',
    usage: '',
    runner: 'main',
    summary: 'The HTTP API, chat adapters and event triggers without workers, against TEMPORAL_ADDRESS (run `steward worker` processes beside it).',
  },
  {
    name: 'worker',
    usage: '[--queues interactive,background,repo] [--concurrency interactive=N,...]',
    flags: [flag('queues', 'interactive,background,repo', 'the queues to poll (STEWARD_WORKER_QUEUES)'), flag('concurrency', 'interactive=N,...', 'tasks at once per queue (STEWARD_WORKER_CONCURRENCY)')],
    runner: 'main',
    summary:
      'Workers only, polling TEMPORAL_ADDRESS: the queues of the given roles (default STEWARD_WORKER_QUEUES, all three), each running at most N tasks at once (STEWARD_WORKER_CONCURRENCY).',
  },
  {
    name: 'chat',
    usage: '[--chat ID] [--user NAME] [--url URL] [--token TOKEN]',
    flags: [flag('chat', 'ID', 'the chat id (default cli)'), flag('user', 'NAME', 'who you are (default $USER)'), ...API],
    runner: 'main',
    summary: 'Chat with the agent of a running Steward.',
  },
  { name: 'migrate', usage: '', runner: 'main', summary: 'Apply database migrations (DATABASE_URL).' },
  {
    name: 'receipts',
    subs: [
      {
        name: 'export',
        isDefault: true,
        usage: '[--since T] [--until T] [--chat ID] [--person ID] [--change ID] [--run ID] [--kind K] [--limit N]',
        flags: [
          flag('since', 'T', 'from this time'),
          flag('until', 'T', 'before this time'),
          flag('chat', 'ID', "a chat's sessions, or one session"),
          hidden(flag('session', 'ID', 'one session (as --chat)')),
          flag('person', 'ID', "a person's receipts (the actor: an identity id, api, cli)"),
          flag('change', 'ID', "a repository change's receipts (its workflow's)"),
          flag('run', 'ID', 'a workflow id or a run id'),
          flag('kind', 'K', 'a receipt kind (ingress, model.call, approval.decision, ...)'),
          flag('limit', 'N', 'at most N receipts'),
          hidden(flag('after', 'N', 'receipts after this id')),
        ],
      },
    ],
    runner: 'ops',
    summary: 'Audit receipts as JSONL, streamed.',
    notes: [
      'T: an ISO time (2026-11-23T10:00:00Z) or a duration back from now (90s, 15m, 2h, 7d);',
      '--chat: a chat id (every session of that chat) or a session id; --run: a workflow id or a run id.',
    ],
  },
  {
    name: 'trace',
    usage: '<message id | transcript key | turn id | workflow id | run id> [--chat ID] [--json]',
    args: '<id>',
    flags: [flag('chat', 'ID', 'look in this chat only'), JSON_OUT],
    runner: 'ops',
    summary: "One message's path (ingress, turn, model calls, tools, approvals, delivery) from receipts and Temporal history.",
  },
  {
    name: 'doctor',
    usage: '[--json] [--timeout 5s] [--skip-sandbox]',
    flags: [JSON_OUT, flag('timeout', '5s', 'time limit of each check (100ms to 2m)'), on('skip-sandbox', 'do not check the sandbox')],
    runner: 'ops',
    summary: 'Check configuration, Temporal, namespace and search attributes, database migrations, sandbox, model provider, chat tokens, workspace inboxes and MCP servers; exit 1 if a check fails.',
  },
  {
    name: 'policy',
    subs: [
      {
        name: 'what-if',
        usage: 'FILE [--since T] [--repo R] [--json]',
        args: '<file>',
        flags: [flag('since', 'T', 'decisions from this time'), flag('repo', 'R', 'one repository'), JSON_OUT, hidden(flag('limit', 'N', 'at most N decisions'))],
      },
    ],
    runner: 'ops',
    summary:
      "Judge a policy change by its evidence: evaluate past repository changes (their recorded patches, bases and the task's scope) under the policy in force and the file's repoPolicy, and past tool calls under its approvalTools; print each decision that would change, with the reasons under both. Writes nothing; no model, no network (database only).",
    notes: ['FILE: JSON {"repoPolicy"?: <a policy layer, as STEWARD_REPO_POLICY>, "approvalTools"?: ["post_to_chat", ...]}; T: an ISO time or a duration back from now (7d).'],
  },
  {
    name: 'identities',
    subs: [
      { name: 'list', usage: '' },
      {
        name: 'add',
        usage: '--name N --role R [--telegram ID] [--discord ID]',
        flags: [needed('name', 'N', "the person's name"), needed('role', 'R', 'overlord, admin, operator, member or viewer'), many('telegram', 'ID', 'a Telegram user id'), many('discord', 'ID', 'a Discord user id')],
      },
      { name: 'set-role', usage: 'ID ROLE', args: '<id> <role>' },
      { name: 'remove', usage: 'ID', args: '<id>' },
    ],
    runner: 'admin',
    summary: 'People Steward knows and their roles (the first overlord is added here). Works without a running Steward.',
  },
  {
    name: 'bindings',
    subs: [
      { name: 'list', usage: '' },
      {
        name: 'add',
        usage: '--platform telegram|discord|openharness --chat ID [--mode mention|all] [--name N] [--model provider:model] [--admin-channel] [--account A]',
        flags: [
          needed('platform', 'telegram|discord|openharness', 'the chat platform'),
          needed('chat', 'ID', 'the chat id'),
          flag('mode', 'mention|all', 'answer when mentioned (default) or every message'),
          flag('name', 'N', 'a short name for the chat'),
          flag('model', 'provider:model', "the chat's model"),
          on('admin-channel', 'the chat where admins are told of pairing requests and approvals'),
          flag('account', 'A', 'the bot account (default: any)'),
        ],
      },
      { name: 'remove', usage: 'ID', args: '<id>' },
      { name: 'triage', usage: 'ID on|off [--model provider:model]', args: '<id> <state>', flags: [flag('model', 'provider:model', 'the model that classifies')] },
    ],
    runner: 'admin',
    summary: 'Chats Steward answers in, and whether their messages that do not address Steward are triaged into tasks. Works without a running Steward.',
    notes: ['A negative Telegram group id goes as --chat=-100123.'],
  },
  {
    name: 'budgets',
    subs: [
      { name: 'list', usage: '[--json]', flags: [JSON_OUT] },
      {
        name: 'set',
        usage: 'ID --scope S [--scope-id X] [--tokens N] [--money USD] [--period day|week|month|none] [--timezone TZ]',
        args: '<id>',
        flags: [
          needed('scope', 'S', 'installation, chat, person, objective, workspace or repository'),
          flag('scope-id', 'X', 'the binding, identity, objective, workspace or repository id (none for the installation)'),
          flag('tokens', 'N', 'tokens per period'),
          flag('money', 'USD', 'US dollars per period'),
          flag('period', 'day|week|month|none', 'the period (default none: a total)'),
          flag('timezone', 'TZ', 'the IANA time zone the period is counted in (default UTC)'),
        ],
      },
      { name: 'remove', usage: 'ID', args: '<id>' },
      {
        name: 'raise',
        usage: 'ID --tokens N | --money USD',
        args: '<id>',
        flags: [flag('tokens', 'N', 'tokens added to the current period'), flag('money', 'USD', 'US dollars added to the current period')],
      },
    ],
    runner: 'admin',
    summary: "Model spend budgets in tokens and money per scope, each with its current period's usage (used, reserved, raised, left, when it renews); `set` defines or changes one (the whole definition); `raise` raises one for its current period only. Works without a running Steward.",
    notes: [
      'A budget limits tokens, money or both; --scope-id names the chat (binding id), person (identity id), objective, workspace or repository.',
      '`raise` adds to the current period (receipted budget.raised); the next period starts from the limit again.',
    ],
  },
  {
    name: 'pairing',
    common: API,
    subs: [
      { name: 'list', usage: '' },
      { name: 'approve', usage: 'CODE ROLE', args: '<code> <role>' },
      { name: 'deny', usage: 'CODE', args: '<code>' },
    ],
    runner: 'admin',
    summary: "Pending /pair requests (through the running Steward's API).",
  },
  {
    name: 'approvals',
    common: API,
    subs: [
      { name: 'list', usage: '[--status pending|approved|denied|expired|cancelled]', flags: [flag('status', 'pending|approved|denied|expired|cancelled', 'which ones (default pending)')] },
      { name: 'approve', usage: 'ID', args: '<id>' },
      { name: 'deny', usage: 'ID [--reason TEXT]', args: '<id>', flags: [flag('reason', 'TEXT', 'why, for the requester')] },
    ],
    runner: 'admin',
    summary: "Actions agents proposed (through the running Steward's API).",
  },
  {
    name: 'inbox',
    common: API,
    subs: [
      { name: 'list', usage: '[--kind approval|change|pairing|memory|task|mcp]', flags: [flag('kind', 'approval|change|pairing|memory|task|mcp', 'only this kind')] },
      {
        name: 'decide',
        usage: 'ID DECISION [--reason TEXT] [--role R] [--code CODE]',
        args: '<id> <decision>',
        flags: [flag('reason', 'TEXT', 'why (a denial, a closed task)'), flag('role', 'R', 'a pairing approved: the role to give'), flag('code', 'CODE', "a pairing: the requester's code")],
      },
    ],
    runner: 'admin',
    summary: "Everything waiting for a decision, newest first, and a decision on one (through the running Steward's API).",
  },
  {
    name: 'replay',
    common: API,
    subs: [
      {
        name: 'fork',
        usage: '--chat ID --turn TURN [--new-chat ID] [--platform P] [--account A]',
        flags: [
          needed('chat', 'ID', 'the chat to fork'),
          needed('turn', 'TURN', 'the turn to fork before (its id, as `steward trace` and receipts show it)'),
          flag('new-chat', 'ID', 'the new HTTP chat id (default: one derived from the chat id)'),
          flag('platform', 'http|telegram|discord', "the chat's platform (default http)"),
          flag('account', 'A', "the chat's account (default: the API's)"),
        ],
      },
      {
        name: 'turns',
        usage: [
          '--turn ID | --chat ID --since T [--until T] [--platform P] [--account A] | --objective ID --last N | --sample N [--since T] [--until T] [--seed N]',
          '[--model provider:model] [--system-prompt-file FILE] [--skills on|off] [--approval-tools a,b] [--concurrency N] [--wait] [--json]',
        ],
        flags: [
          flag('turn', 'ID', 'one turn (its id, as `steward trace` shows it)'),
          flag('chat', 'ID', "a chat's turns in the window --since to --until"),
          flag('platform', 'P', "the chat's platform (default http)"),
          flag('account', 'A', "the chat's account (default the HTTP API's)"),
          flag('objective', 'ID', "an objective's runs (its id or name), with --last"),
          flag('last', 'N', 'the last N runs of --objective'),
          flag('sample', 'N', 'N turns drawn across chats (in the window, when given)'),
          flag('since', 'T', 'the window from this time'),
          flag('until', 'T', 'the window to this time (default now)'),
          flag('seed', 'N', "the sample's seed: the same seed, the same turns"),
          flag('model', 'provider:model', 'replay with this model (its provider configured)'),
          flag('system-prompt-file', 'FILE', 'replay with the system prompt in FILE'),
          flag('skills', 'on|off', 'replay with skills on or off'),
          flag('approval-tools', 'a,b', 'replay under this approval list ("" for none)'),
          flag('concurrency', 'N', 'turns replayed at once (1 to 8, default 2)'),
          on('wait', 'wait for the report and print it as Markdown'),
          JSON_OUT,
        ],
      },
      { name: 'list', usage: '[--json]', flags: [JSON_OUT] },
      { name: 'show', usage: 'ID [--format json|markdown|jsonl]', args: '<id>', flags: [flag('format', 'json|markdown|jsonl', 'the report as JSON (default: the state and summary), Markdown or JSONL')] },
      { name: 'cancel', usage: 'ID', args: '<id>' },
    ],
    runner: 'admin',
    summary:
      "Counterfactual replay (through the running Steward's API): re-run past turns under another model, system prompt, skills or approval list, every tool call answered from the record and nothing sent; list replays, show one's report, cancel one. Bad selections and unknown models start nothing. `fork`: a new HTTP chat that starts from a chat's state just before a turn; the chat itself is untouched.",
    notes: ['T: an ISO time (2026-11-28T10:00:00Z) or a duration back from now (90m, 2h, 7d). Exactly one of --turn, --chat, --objective, --sample.'],
  },
  {
    name: 'shells',
    subs: [
      { name: 'issue', usage: 'NAME [--role R] [--identity ID]', args: '<name>', flags: [flag('role', 'R', "the shell's role (default member)"), flag('identity', 'ID', 'act as this existing identity')] },
      { name: 'list', usage: '' },
      { name: 'revoke', usage: 'NAME', args: '<name>' },
    ],
    runner: 'admin',
    summary: 'OpenHarness shells and their bearer tokens (shown once).',
  },
  {
    name: 'repos',
    common: API,
    subs: [
      { name: 'list', usage: '' },
      { name: 'show', usage: 'NAME', args: '<name>' },
      { name: 'remove', usage: 'NAME', args: '<name>' },
      {
        name: 'add',
        usage: [
          'NAME --clone URL [--branch main] [--check "name: argv..."]... [--agent-command "argv..."] [--model provider:model] [--github owner/repo --token-ref env:NAME] [--promotion patch|draft-pr|draft-pr-after-approval]',
          '--file repo.json',
        ],
        args: '[name]',
        flags: [
          flag('clone', 'URL', 'where to clone it from (a URL or a local path)'),
          flag('branch', 'main', 'its default branch'),
          many('check', '"name: argv..."', 'a check the validation gate runs'),
          flag('agent-command', '"argv..."', 'the coding agent to run'),
          flag('model', 'provider:model', "the built-in agent's model"),
          flag('github', 'owner/repo', 'open draft pull requests on this GitHub repository'),
          flag('token-ref', 'env:NAME', 'the GitHub token, by reference'),
          flag('promotion', 'patch|draft-pr|draft-pr-after-approval', 'what a change that passes ends in'),
          flag('file', 'repo.json', 'the whole registration as JSON'),
        ],
      },
    ],
    runner: 'admin',
    summary: 'Repositories Steward may change (through the running API).',
  },
  {
    name: 'changes',
    common: API,
    subs: [
      { name: 'list', usage: '[--repo R]', flags: [flag('repo', 'R', 'one repository')] },
      { name: 'start', usage: 'REPO REQUEST... [--base BRANCH]', args: '<repo> <request...>', flags: [flag('base', 'BRANCH', 'the branch to start from')] },
      { name: 'show', usage: 'ID [--json]', args: '<id>', flags: [JSON_OUT] },
      { name: 'patch', usage: 'ID [--out FILE] [--include-refused]', args: '<id>', flags: [flag('out', 'FILE', 'write it to FILE'), on('include-refused', 'a patch that was not promoted too')] },
      { name: 'answer', usage: 'ID TEXT...', args: '<id> <text...>' },
    ],
    runner: 'admin',
    summary: 'Governed repository changes (through the running API); a patch that was not promoted only with --include-refused.',
  },
  {
    name: 'objectives',
    common: API,
    subs: [
      { name: 'list', usage: '' },
      { name: 'show', ...OBJECTIVE_ID },
      {
        name: 'add',
        usage:
          'NAME --chat ID [--platform http|telegram|discord] [--account A] [--every 30m | --cron "0 9 * * *"] [--watch DIR] [--email ADDRESS] [--timezone Z] [--jitter 1m] [--overlap skip|buffer-one|buffer-all|cancel-other|terminate-other|allow-all] [--catchup 1h] [--pause-on-failure] [--model M] --prompt TEXT',
        args: '<name>',
        flags: [
          needed('chat', 'ID', 'the chat it reports to'),
          flag('platform', 'http|telegram|discord', "the chat's platform"),
          flag('account', 'A', 'the bot account'),
          flag('every', '30m', 'run at this interval'),
          flag('cron', '"0 9 * * *"', 'run on this cron schedule'),
          flag('watch', 'DIR', 'run when a file in DIR changes'),
          flag('email', 'ADDRESS', 'run when mail comes to ADDRESS'),
          flag('timezone', 'Z', "the schedule's time zone"),
          flag('jitter', '1m', 'start up to this much later'),
          flag('overlap', 'skip|buffer-one|buffer-all|cancel-other|terminate-other|allow-all', 'when a run is still going'),
          flag('catchup', '1h', 'missed runs within this window still run'),
          on('pause-on-failure', 'pause the schedule when a run fails'),
          flag('model', 'M', 'the model of its runs'),
          needed('prompt', 'TEXT', 'what each run does'),
          hidden(on('paused', 'start paused')),
        ],
      },
      {
        name: 'update',
        usage: 'ID [--prompt T] [--every D | --cron C] [--timezone Z] [--overlap P] [--catchup D] [--watch DIR|""] [--email ADDRESS|""]',
        args: '<id>',
        flags: [
          flag('prompt', 'T', 'what each run does'),
          flag('every', 'D', 'run at this interval'),
          flag('cron', 'C', 'run on this cron schedule'),
          flag('timezone', 'Z', "the schedule's time zone"),
          flag('overlap', 'P', 'when a run is still going'),
          flag('catchup', 'D', 'missed runs within this window still run'),
          flag('watch', 'DIR|""', 'run when a file in DIR changes ("" removes it)'),
          flag('email', 'ADDRESS|""', 'run when mail comes to ADDRESS ("" removes it)'),
          hidden(flag('jitter', 'D', 'start up to this much later')),
          hidden(on('pause-on-failure', 'pause the schedule when a run fails')),
          hidden(flag('model', 'M', 'the model of its runs')),
        ],
      },
      { name: 'pause', ...OBJECTIVE_ID },
      { name: 'resume', ...OBJECTIVE_ID },
      { name: 'trigger', ...OBJECTIVE_ID, flags: [hidden(flag('overlap', 'P', 'when a run is still going'))] },
      {
        name: 'backfill',
        usage: 'ID --start ISO --end ISO',
        args: '<id>',
        flags: [needed('start', 'ISO', 'from this time'), needed('end', 'ISO', 'to this time'), hidden(flag('overlap', 'P', 'when a run is still going'))],
      },
      { name: 'skip-missed', ...OBJECTIVE_ID },
      { name: 'delete', ...OBJECTIVE_ID },
    ],
    runner: 'admin',
    summary: 'Objectives on Temporal Schedules (through the running API): a schedule, a trigger (--watch, --email) or both.',
  },
  {
    name: 'histories',
    subs: [
      {
        name: 'record',
        usage: "--query '<visibility query>' [--limit 20] [--out test/replay/histories] [--prefix rec] [--include-running] [--force]",
        flags: [
          needed('query', 'visibility query', 'which runs (a Temporal visibility query)'),
          flag('limit', '20', 'at most this many'),
          flag('out', 'test/replay/histories', 'the folder to write to'),
          flag('prefix', 'rec', "the files' name prefix"),
          on('include-running', 'runs still going too'),
          on('force', 'replace files of the same name'),
        ],
      },
    ],
    runner: 'histories',
    summary: "Record closed runs' histories (visibility query) as replay fixtures, payloads decoded.",
  },
  {
    name: 'workspaces',
    common: API,
    subs: [
      { name: 'list', usage: '' },
      { name: 'show', usage: 'NAME', args: '<name>' },
      { name: 'create', usage: 'NAME [--folder DIR]', args: '<name>', flags: [flag('folder', 'DIR', 'its folder (default: one in the data directory)')] },
      { name: 'reindex', usage: 'NAME [--path P]...', args: '<name>', flags: [many('path', 'P', 'only this path')] },
      {
        name: 'bind',
        usage: 'NAME --chat ID [--platform http|telegram|discord] [--account A]',
        args: '<name>',
        flags: [needed('chat', 'ID', 'the chat'), flag('platform', 'http|telegram|discord', "the chat's platform"), flag('account', 'A', 'the bot account')],
      },
      {
        name: 'unbind',
        usage: 'NAME --chat ID [--platform P] [--account A]',
        args: '<name>',
        flags: [needed('chat', 'ID', 'the chat'), flag('platform', 'P', "the chat's platform"), flag('account', 'A', 'the bot account')],
      },
      { name: 'search', usage: 'NAME WORDS... [--limit N]', args: '<name> <words...>', flags: [flag('limit', 'N', 'at most N hits')] },
      { name: 'open', usage: 'NAME PATH', args: '<name> <path>' },
      {
        name: 'inbox',
        usage: ['NAME set --host H --user U --password-ref env:STEWARD_INBOX_<NAME> [--port P] [--tls implicit|starttls|none] [--folder F]', 'NAME show|clear'],
        args: '<name> <action>',
        flags: [
          flag('host', 'H', 'the IMAP server'),
          flag('user', 'U', 'the mailbox user'),
          flag('password-ref', 'env:STEWARD_INBOX_NAME', 'the password, by reference'),
          flag('port', 'P', 'the IMAP port'),
          flag('tls', 'implicit|starttls|none', 'how the connection is encrypted'),
          flag('folder', 'F', 'the mail folder (default INBOX)'),
        ],
      },
    ],
    runner: 'admin',
    summary: "Workspaces of Markdown and text knowledge: create, bind to chats, reindex, search and read, and an IMAP inbox whose mail becomes documents (through the running Steward's API).",
  },
  {
    name: 'skills',
    usage: '[--workspace NAME]',
    flags: [flag('workspace', 'NAME', "with this workspace's skills/"), ...API],
    runner: 'admin',
    summary: "The skills (SKILL.md runbooks): the operator's folder, with a workspace's skills/ when named; their versions and any file that is not a valid skill (through the running API).",
  },
  {
    name: 'memories',
    common: API,
    subs: [
      {
        name: 'export',
        usage: '[--workspace NAME | --chat ID [--platform P] [--account A]] [--out FILE]',
        flags: [flag('workspace', 'NAME', "a workspace's memories"), flag('chat', 'ID', "a chat's memories"), flag('platform', 'P', "the chat's platform"), flag('account', 'A', 'the bot account'), flag('out', 'FILE', 'write them to FILE')],
      },
      { name: 'approve', usage: 'ID', args: '<id>' },
      { name: 'reject', usage: 'ID', args: '<id>' },
      { name: 'forget', usage: 'ID', args: '<id>' },
    ],
    runner: 'admin',
    summary: "What the agent remembers: export as JSON lines with provenance and receipts, approve or reject a proposal, forget one (through the running API).",
  },
  {
    name: 'mcp',
    common: API,
    subs: [
      { name: 'list', usage: '' },
      { name: 'show', usage: 'NAME', args: '<name>' },
      { name: 'tools', usage: 'NAME', args: '<name>' },
      { name: 'remove', usage: 'NAME', args: '<name>' },
      {
        name: 'add',
        usage: [
          'NAME --command "argv..." [--ro-bind DIR]... [--network] [--env NAME=env:STEWARD_MCP_X]... [--allow-tools a,b] [--read-only a,b] [--approval TOOL=never|always|ROLE]... [--workspace W]... [--timeout 30s]',
          'NAME --server-url URL [--token-ref env:STEWARD_MCP_X] [...the same policy flags]',
          '--file server.json',
        ],
        args: '[name]',
        flags: [
          flag('command', '"argv..."', 'a stdio server: the command that runs it (in the sandbox)'),
          many('ro-bind', 'DIR', 'a folder it may read'),
          on('network', 'it may reach the network'),
          many('env', 'NAME=env:STEWARD_MCP_X', 'an environment variable, by reference'),
          flag('server-url', 'URL', 'a Streamable HTTP server: its URL'),
          flag('token-ref', 'env:STEWARD_MCP_X', "the HTTP server's bearer token, by reference"),
          flag('allow-tools', 'a,b', 'offer only these tools'),
          flag('read-only', 'a,b', 'these tools change nothing'),
          many('approval', 'TOOL=never|always|ROLE', "a tool's approval policy"),
          many('workspace', 'W', 'offer it in chats of this workspace only'),
          flag('timeout', '30s', "a call's time limit"),
          flag('file', 'server.json', 'the whole registration as JSON'),
        ],
      },
    ],
    runner: 'admin',
    summary:
      "MCP servers whose tools agents may call (through the running API): stdio servers run in the sandbox, Streamable HTTP servers by URL; tools lists what each tool is offered as and its approval policy. Servers of STEWARD_MCP_CONFIG are changed in that file.",
  },
  {
    name: 'tasks',
    common: [...API, hidden(JSON_OUT)],
    subs: [
      { name: 'list', usage: '[--status open|handed|closed|all] [--lane L] [--json]', flags: [flag('status', 'open|handed|closed|all', 'which ones (default open)'), flag('lane', 'L', 'one lane')] },
      {
        name: 'add',
        usage: 'TEXT... --chat ID [--platform P] [--account A] [--lane question|issue|task|moderation] [--priority p1|p2|p3] [--due 4h] [--assignee NAME]',
        args: '<text...>',
        flags: [
          needed('chat', 'ID', 'the chat it belongs to'),
          flag('platform', 'P', "the chat's platform"),
          flag('account', 'A', 'the bot account'),
          flag('lane', 'question|issue|task|moderation', 'its lane'),
          flag('priority', 'p1|p2|p3', 'its priority'),
          flag('due', '4h', 'due in'),
          flag('assignee', 'NAME', 'who does it'),
        ],
      },
      { name: 'route', usage: 'ID question|issue|task|moderation|noise [--priority P] [--due D]', args: '<id> <lane>', flags: [flag('priority', 'P', 'its priority'), flag('due', 'D', 'due in')] },
      { name: 'hand', usage: 'ID', args: '<id>' },
      { name: 'close', usage: 'ID [--note TEXT]', args: '<id>', flags: [flag('note', 'TEXT', 'why')] },
    ],
    runner: 'admin',
    summary: "Tasks from triage and by hand: list, make, re-route (noise closes one), hand to the agent (a turn in the task's chat), close (through the running API).",
  },
  {
    name: 'ui',
    usage: '[--url URL] [--token TOKEN]',
    flags: API,
    runner: 'admin',
    summary: 'Print a one-time link that signs a browser in and opens the Temporal UI of a running `steward start` (payloads decoded).',
  },
  {
    name: 'cluster',
    subs: [
      {
        name: 'up',
        usage: '[--nodes 2] [--base-port 7233] [--api-port 8787] [--pg-url URL] [--db-prefix P] [--join-timeout 30] [--dir DIR]',
        flags: [
          flag('nodes', '2', 'Temporal server processes'),
          flag('base-port', '7233', "the first node's frontend port"),
          flag('api-port', '8787', "Steward's API port"),
          flag('pg-url', 'URL', 'a PostgreSQL server to use (default: one started here)'),
          flag('db-prefix', 'P', "the databases' name prefix"),
          flag('join-timeout', '30', 'seconds to wait for the nodes to join'),
          flag('dir', 'DIR', "the cluster's folder (default .data/cluster)"),
        ],
      },
      { name: 'down', usage: '[--dir DIR]', flags: [flag('dir', 'DIR', "the cluster's folder")] },
      { name: 'status', usage: '[--json] [--dir DIR]', flags: [JSON_OUT, flag('dir', 'DIR', "the cluster's folder")] },
      {
        name: 'restart',
        usage: '[nodes|worker|repo-worker|api|all ...] [--join-timeout 30] [--dir DIR]',
        args: '[targets...]',
        flags: [flag('join-timeout', '30', 'seconds to wait for the nodes to join'), flag('dir', 'DIR', "the cluster's folder")],
      },
    ],
    runner: 'cluster',
    summary:
      "The production shape on one machine: a Temporal cluster of two server processes on PostgreSQL (built from the Go module at docker-compose.yml's version, cached), Steward's database, and Steward as the compose file's api, worker and repo-worker processes with its environment. up starts what is not running (a stopped or killed node too), down stops them all, status checks each (a node joined when it and the others reach each other in one ring), restart rolls the processes one at a time (default: worker, repo-worker, api).",
  },
  {
    name: 'test',
    usage: '[files...]',
    args: '[files...]',
    runner: 'launcher',
    summary: 'Run the test suite (installs the system packages it needs when it can; skips suites whose parts are missing, except with CI=true). Through ./steward only.',
  },
  { name: 'help', usage: '', args: '[command]', runner: 'main', summary: 'Show this help.' },
] as const satisfies readonly CliCommand[];

export type CliCommandName = (typeof CLI_COMMANDS)[number]['name'];
type Entry = (typeof CLI_COMMANDS)[number];

// ---- the handlers' types, from the table ----

type FlagValue<F> = F extends { multiple: true } ? string[] : F extends { value: string } ? string : boolean;
/** The values of these flags, by name (absent when not given). */
type FlagsFrom<Fs> = Fs extends readonly CliFlag[] ? { [F in Fs[number] as F['name']]?: FlagValue<F> } : Record<never, never>;
type SubValues<C, S> = FlagsFrom<S extends { flags: infer Fs } ? Fs : []> & FlagsFrom<C extends { common: infer Fs } ? Fs : []>;

/** What a handler gets: the arguments (a rest argument spread in order), the flags' values, the io. */
export interface CliContext<V, Io> {
  args: string[];
  values: V;
  io: Io;
}
export type CliHandler<V, Io> = (ctx: CliContext<V, Io>) => Promise<number>;

/** One handler for each command of `runner` in the table: a function, or one per subcommand. */
export type HandlersOf<R extends CliRunner, Io> = {
  [C in Extract<Entry, { runner: R }> as C['name']]: C extends { subs: readonly (infer S)[] }
    ? { [T in S as T extends { name: infer N extends string } ? N : never]: CliHandler<SubValues<C, T>, Io> }
    : CliHandler<FlagsFrom<C extends { flags: infer Fs } ? Fs : []>, Io>;
};

/** A bad argument a handler found: `steward <command>: <message>` and exit 2, nothing done. */
export class UsageError extends Error {
  /** Print the command's usage under the message (the operations commands do). */
  readonly withUsage: boolean = false;
}

/** A command's entry in the table. */
export function commandOf(name: string): CliCommand {
  const c = (CLI_COMMANDS as readonly CliCommand[]).find((x) => x.name === name);
  if (!c) throw new Error(`no such steward command: ${name}`);
  return c;
}

/** A command's forms after its name (its subcommands' usages, or its own). */
export function formsOf(c: CliCommand): string[] {
  if (!c.subs) return [c.usage ?? ''];
  return c.subs.flatMap((s) => (typeof s.usage === 'string' ? [s.usage] : s.usage).map((u) => (u ? `${s.name} ${u}` : s.name)));
}

/** One command's usage: `steward NAME form | form ...`, with its notes on the lines after. */
export function usageOf(name: string): string {
  const c = commandOf(name);
  const forms = formsOf(c).filter((f) => f !== '');
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
    const forms = formsOf(c).filter((f) => f !== '');
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
  out.push('', 'Configuration: environment variables, .env or a JSON config file;', 'every setting, its default and meaning: docs/configuration.md.', '', 'Each command and subcommand explains its flags: steward <command> [<subcommand>] --help.');
  return out.join('\n');
}

// ---- parsing: commander, from the table ----

/** Where a command writes (every runner's io has these). */
export interface CliOutput {
  out: (s: string) => unknown;
  err: (s: string) => void;
}

type AnyHandler = (ctx: CliContext<Record<string, unknown>, never>) => Promise<number>;
type Chosen = { handler: AnyHandler; args: string[]; values: Record<string, unknown> };

/** A commander command for these arguments and flags; `chose` receives what was parsed. */
function configure(cmd: Command, spec: { args?: string; flags?: readonly CliFlag[] }, handler: AnyHandler | undefined, chose: (c: Chosen) => void): Command {
  for (const a of spec.args?.split(' ').filter(Boolean) ?? []) cmd.argument(a);
  const flags = spec.flags ?? [];
  for (const f of flags) {
    const o = new Option(f.value === undefined ? `--${f.name}` : `--${f.name} <${f.value}>`, f.description);
    if (f.multiple) o.argParser((v: string, prev: string[] | undefined) => [...(prev ?? []), v]);
    if (f.required) o.makeOptionMandatory();
    if (f.hidden) o.hideHelp();
    cmd.addOption(o);
  }
  if (!handler) throw new Error(`steward ${cmd.name()}: no handler`);
  cmd.action((...given: unknown[]) => {
    const self = given.at(-1) as Command;
    const opts = self.opts();
    const values: Record<string, unknown> = {};
    for (const o of self.options) {
      const v = opts[o.attributeName()];
      if (v !== undefined && o.long) values[o.long.slice(2)] = v;
    }
    const args = (self.processedArgs as Array<string | string[] | undefined>).flatMap((a) => (a === undefined ? [] : a));
    chose({ handler, args, values });
  });
  return cmd;
}

/** The commander program of one command of the table, with its handler(s) from `handlers` (a runner's, by command). */
function program(c: CliCommand, handlers: Record<string, unknown>, io: CliOutput, chose: (c: Chosen) => void): Command {
  const mine = handlers[c.name];
  const root = new Command('steward')
    .exitOverride()
    .configureOutput({ writeOut: (s) => void io.out(s), writeErr: () => undefined, outputError: () => undefined })
    .helpCommand(false);
  const cmd = root.command(c.name).description(c.summary).helpCommand(false);
  if (c.notes) cmd.addHelpText('after', `\n${c.notes.join('\n')}`);
  if (!c.subs) {
    configure(cmd, c, mine as AnyHandler | undefined, chose);
    return root;
  }
  const bySub = (mine ?? {}) as Record<string, AnyHandler>;
  for (const s of c.subs) {
    const sub = cmd.command(s.name, s.isDefault ? { isDefault: true } : {});
    sub.description(formsOf({ ...c, subs: [s] }).map((f) => `steward ${c.name} ${f}`).join('\n'));
    configure(sub, { ...(s.args ? { args: s.args } : {}), flags: [...(s.flags ?? []), ...(c.common ?? [])] }, bySub[s.name], chose);
  }
  return root;
}

/**
 * Run `steward <name> ...args` with a runner's handlers (by command name, as HandlersOf types
 * them): commander parses the arguments and flags the table declares, then the one handler runs. A parse error (an unknown flag or
 * subcommand, a missing value or argument, an extra argument) prints `steward <name>: <why>` and
 * the command's usage and returns 2 before anything runs; `--help` prints the command's help
 * and returns 0; a handler's UsageError prints its message and returns 2. Resolves with the
 * exit code.
 */
export async function runCommand(name: string, argv: readonly string[], io: CliOutput, handlers: object): Promise<number> {
  const c = commandOf(name);
  let chosen: Chosen | undefined;
  try {
    await program(c, handlers as Record<string, unknown>, io, (x) => (chosen = x)).parseAsync([c.name, ...argv], { from: 'user' });
  } catch (err) {
    if (!(err instanceof CommanderError)) throw err;
    if (err.code === 'commander.helpDisplayed') return 0;
    const why = err.code === 'commander.help' ? `name a subcommand: ${(c.subs ?? []).map((s) => s.name).join(', ')}` : err.message.replace(/^error: /, '');
    io.err(`steward ${c.name}: ${why}\nUsage: ${usageOf(c.name)}\n`);
    return 2;
  }
  if (!chosen) return 0;
  try {
    return await chosen.handler({ args: chosen.args, values: chosen.values, io: io as never });
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    io.err(`steward ${c.name}: ${err.message}\n${err.withUsage ? `Usage: ${usageOf(c.name)}\n` : ''}`);
    return 2;
  }
}
