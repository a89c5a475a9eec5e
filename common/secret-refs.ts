/**
 * Secrets by reference: the one rule for every `env:NAME` a registration may give (a webhook's
 * secret, an inbox's password, an MCP server's environment and token, a repository's token),
 * and which variables' values Steward holds as its own secrets (domain/secrets.ts keeps the
 * registry). A reference never names one of Steward's own settings: not the API token
 * (STEWARD_API_TOKEN), not a provider key or bot token, not a setting of its own configuration;
 * each purpose reads only the variables meant for it. Pure: no I/O, no Node imports.
 */

/** What a reference is for, and the prefix its variable must have (a repository's token: any name of its own). */
export const REFERENCE_PREFIXES = { hook: 'STEWARD_HOOK_', inbox: 'STEWARD_INBOX_', mcp: 'STEWARD_MCP_', repo: '' } as const;
export type ReferencePurpose = keyof typeof REFERENCE_PREFIXES;

/** Steward's API token: refused wherever a reference is accepted. */
export const API_TOKEN_VARIABLE = 'STEWARD_API_TOKEN';

/** Variables of Steward's own configuration outside STEWARD_* (provider keys, bot tokens, Temporal, the database). */
export const OWN_VARIABLES: ReadonlySet<string> = new Set([
  'OPENAI_API_KEY',
  'OPENAI_BASE_URL',
  'ANTHROPIC_API_KEY',
  'ANTHROPIC_BASE_URL',
  'TEMPORAL_CLI_PATH',
  'TEMPORAL_ADDRESS',
  'TEMPORAL_NAMESPACE',
  'TEMPORAL_API_KEY',
  'TEMPORAL_TLS',
  'TEMPORAL_TLS_CERT',
  'TEMPORAL_TLS_KEY',
  'TEMPORAL_TLS_CA',
  'TEMPORAL_TLS_SERVER_NAME',
  'DATABASE_URL',
  'OTEL_EXPORTER_OTLP_ENDPOINT',
  'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT',
  'OTEL_SERVICE_NAME',
  'TELEGRAM_BOT_TOKEN',
  'TELEGRAM_API_ROOT',
  'DISCORD_BOT_TOKEN',
  'DISCORD_API_URL',
  'DISCORD_GUILD_ID',
]);

/** Settings of Steward's that share a reference prefix (the MCP config file's path). */
const OWN_PREFIXED: ReadonlySet<string> = new Set(['STEWARD_MCP_CONFIG']);

/** Variable names that say their value is a credential. */
const CREDENTIAL_NAME = /(TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|API_KEY|_KEYS?$|CREDENTIALS?$|PRIVATE_KEY|_PAT$)/i;

const VARIABLE = /^[A-Z_][A-Z0-9_]{0,127}$/;

/**
 * Whether Steward holds this variable's value as its own secret: a credential-like name (its API
 * token, provider keys, bot tokens, codec keys, a repository's token), or a variable meant for a
 * reference (STEWARD_HOOK_*, STEWARD_INBOX_*, STEWARD_MCP_*), whatever it is called.
 */
export function isHeldVariable(name: string): boolean {
  if (CREDENTIAL_NAME.test(name)) return true;
  return !OWN_PREFIXED.has(name) && [REFERENCE_PREFIXES.hook, REFERENCE_PREFIXES.inbox, REFERENCE_PREFIXES.mcp].some((p) => name.startsWith(p));
}

/** Why `ref` may not be used as a reference for `purpose`, or undefined when it may. */
export function referenceRefusal(ref: string, purpose: ReferencePurpose): string | undefined {
  const prefix = REFERENCE_PREFIXES[purpose];
  const name = ref.startsWith('env:') ? ref.slice('env:'.length) : undefined;
  if (name === undefined || !VARIABLE.test(name)) return `expected env:${prefix || 'NAME'}${prefix ? '<NAME>' : ''} (the variable that holds the secret; never the secret itself)`;
  if (name === API_TOKEN_VARIABLE) return `env:${API_TOKEN_VARIABLE} is Steward's own API token: no reference may name it`;
  if (prefix) {
    if (!name.startsWith(prefix) || name.length === prefix.length) return `expected env:${prefix}<NAME>: a ${purpose} secret is read only from a variable meant for it, never from another one of Steward's`;
    if (OWN_PREFIXED.has(name)) return `${name} is a setting of Steward's, not a secret for this use`;
    return undefined;
  }
  if (name.startsWith('STEWARD_') || OWN_VARIABLES.has(name)) {
    return `${name} is one of Steward's own variables; a repository's token is read from a variable of its own (such as GITHUB_TOKEN)`;
  }
  if (!isHeldVariable(name)) return `${name} does not read as a credential: name the token's variable so it does (…TOKEN, …PAT, …SECRET, …KEY), so that Steward holds its value as a secret`;
  return undefined;
}
