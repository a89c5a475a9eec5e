/**
 * The one rule of secrets by reference (common/secret-refs.ts), through every schema that takes a
 * reference: a webhook's secret, an inbox's password, an MCP server's environment and token, a
 * repository's token. A reference to the API token is refused by each; so is every variable of
 * Steward's own configuration (checked against the configuration's schema, so a new setting
 * cannot be named by a reference); and the values the registry holds by name include every
 * variable a reference may name.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { McpServerSchema } from '../../common/mcp.js';
import { WebhookSecretRefSchema } from '../../common/objectives.js';
import { RepoRegistrationSchema } from '../../common/changes.js';
import { API_TOKEN_VARIABLE, isHeldVariable, REFERENCE_PREFIXES, referenceRefusal, type ReferencePurpose } from '../../common/secret-refs.js';
import { ConfigEnvSchema } from '../../config/index.js';
import { heldSecretsFrom } from '../../domain/secrets.js';
import { InboxSettingsSchema } from '../../services/inbox.js';

const PURPOSES = Object.keys(REFERENCE_PREFIXES) as ReferencePurpose[];

/** Each schema that takes a reference, with `ref` in its reference's place: the error, or undefined when it is accepted. */
const SCHEMAS: Record<string, (ref: string) => string | undefined> = {
  'webhook secretRef': (ref) => WebhookSecretRefSchema.safeParse(ref).error?.message,
  'inbox passwordRef': (ref) => InboxSettingsSchema.safeParse({ host: 'mail.example.com', user: 'ops', passwordRef: ref }).error?.message,
  'MCP stdio env': (ref) => McpServerSchema.safeParse({ name: 'srv', transport: 'stdio', command: ['/usr/bin/x'], env: { KEY: ref } }).error?.message,
  'MCP http tokenRef': (ref) => McpServerSchema.safeParse({ name: 'srv', transport: 'http', url: 'https://mcp.example.com/mcp', tokenRef: ref }).error?.message,
  'repository github.tokenRef': (ref) => RepoRegistrationSchema.safeParse({ name: 'demo', cloneUrl: 'https://example.com/demo.git', github: { owner: 'acme', repo: 'demo', tokenRef: ref } }).error?.message,
};

describe('secrets by reference: one rule', () => {
  it('every schema that takes a reference refuses env:STEWARD_API_TOKEN, naming why', () => {
    for (const [what, check] of Object.entries(SCHEMAS)) {
      const error = check(`env:${API_TOKEN_VARIABLE}`);
      assert.ok(error, `${what} refuses the API token`);
    }
    assert.match(SCHEMAS['repository github.tokenRef']!(`env:${API_TOKEN_VARIABLE}`)!, /Steward's own API token/);
    for (const p of PURPOSES) assert.match(referenceRefusal(`env:${API_TOKEN_VARIABLE}`, p)!, /Steward's own API token: no reference may name it/);
  });

  it("no reference names a variable of Steward's own configuration, for any purpose", () => {
    for (const name of Object.keys(ConfigEnvSchema.shape)) {
      for (const p of PURPOSES) assert.ok(referenceRefusal(`env:${name}`, p), `${name} as a ${p} reference`);
      for (const [what, check] of Object.entries(SCHEMAS)) assert.ok(check(`env:${name}`), `${what}: env:${name}`);
    }
  });

  it('each purpose reads only its own variables; what it may name, the registry holds', () => {
    const good: Record<ReferencePurpose, string> = { hook: 'env:STEWARD_HOOK_DEPLOY', inbox: 'env:STEWARD_INBOX_OPS', mcp: 'env:STEWARD_MCP_WEB_KEY', repo: 'env:GH_DEPLOY_TOKEN' };
    for (const p of PURPOSES) {
      assert.equal(referenceRefusal(good[p], p), undefined, p);
      for (const other of PURPOSES) if (other !== p && other !== 'repo') assert.ok(referenceRefusal(good[p], other), `${good[p]} is not a ${other} reference`);
      assert.ok(isHeldVariable(good[p].slice(4)), `${good[p]}'s value is held`);
    }
    assert.equal(SCHEMAS['MCP http tokenRef']!('env:STEWARD_MCP_WEB_KEY'), undefined);
    assert.equal(SCHEMAS['repository github.tokenRef']!('env:GITHUB_TOKEN'), undefined);
    assert.match(SCHEMAS['repository github.tokenRef']!('env:HOME')!, /does not read as a credential/);
    assert.match(SCHEMAS['repository github.tokenRef']!('env:STEWARD_INBOX_OPS')!, /one of Steward's own variables/);
    assert.match(referenceRefusal('env:STEWARD_MCP_CONFIG', 'mcp')!, /a setting of Steward's/);
    assert.match(referenceRefusal('ghp_literal', 'repo')!, /expected env:NAME/);
  });

  it('the registry holds the values of every reference prefix, credential-like names, key lists and URL passwords; short values and plain settings are not held', () => {
    const held = heldSecretsFrom({
      STEWARD_INBOX_OPS: 'inbox-password-1',
      STEWARD_MCP_WEB_KEY: 'mcp-value-0001',
      STEWARD_HOOK_DEPLOY: 'hook-secret-0001',
      STEWARD_API_TOKEN: 'api-token-000001',
      GH_DEPLOY_TOKEN: 'repo-token-00001',
      OPENAI_API_KEY: 'provider-key-001',
      TELEGRAM_BOT_TOKEN: '123:bot-token-001,456:bot-token-002',
      STEWARD_SMTP_URL: 'smtp://u:mail-password-1@mail.example.com',
      STEWARD_MCP_CONFIG: '/etc/steward/mcp.json',
      STEWARD_INBOX_SHORT: 'short',
      HOME: '/home/steward',
    });
    const names = new Set(held.map((h) => h.name));
    for (const n of ['STEWARD_INBOX_OPS', 'STEWARD_MCP_WEB_KEY', 'STEWARD_HOOK_DEPLOY', 'STEWARD_API_TOKEN', 'GH_DEPLOY_TOKEN', 'OPENAI_API_KEY', 'TELEGRAM_BOT_TOKEN', 'STEWARD_SMTP_URL']) assert.ok(names.has(n), n);
    for (const n of ['STEWARD_MCP_CONFIG', 'STEWARD_INBOX_SHORT', 'HOME']) assert.ok(!names.has(n), n);
    assert.ok(held.some((h) => h.value === 'bot-token-002'), 'each key of a list');
    assert.ok(held.some((h) => h.value === 'mail-password-1'), "a URL's password");
  });
});
