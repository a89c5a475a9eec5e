/**
 * What an approver sees, and what was approved. A proposed action (HTTP request, email,
 * command, repository change, or any tool the approval policy names) is shown to the admins
 * exactly as it will be performed: every value the model chose, in full, with invisible
 * characters made visible. Only secrets Steward itself holds (tokens and keys from its
 * configuration, variables that references resolve to) are masked, and a proposal carrying
 * one is refused before anyone is asked: an agent never sends Steward's own secrets.
 *
 * Literal credentials the model wrote itself (auth headers, URL userinfo, secret-named
 * fields, token-shaped values) are refused by policy unless the operator allows them
 * (STEWARD_ACTION_LITERAL_CREDENTIALS=allow); then they are shown in full and flagged.
 *
 * The request hash: sha256 over a canonical form of what will be sent. It is stored with the
 * approval and written into the receipts; the action refuses to run if what it would send
 * hashes differently.
 *
 * No Temporal imports.
 */
import { createHash } from 'node:crypto';
import { TOOLS, isToolName } from '../../common/tools.js';
import { heldSecrets, heldSecretsIn, maskHeldSecrets, type HeldSecret } from '../secrets.js';

export { heldSecretsFrom, heldSecretsIn, maskHeldSecrets, maskHeldSecretsDeep, type HeldSecret } from '../secrets.js';

// ---- literal credentials the model wrote ----

/** Header names that carry credentials. */
const AUTH_HEADER = /^(authorization|cookie|x-api-key|api-key|apikey|x-auth-token|x-access-token|x-csrf-token|x-xsrf-token|private-token|x-goog-api-key)$/i;
/** Field, parameter and header names whose values are credentials. Counts (max_tokens) and types (token_type) are not. */
const CREDENTIAL_NAME =
  /(passw(?:or)?d|passphrase|secret|token(?!s\b|s?_?(?:type|count|limit|usage)\b)|api[-_]?key|apikey|access[-_]?key|private[-_]?key|auth[-_]?key|credential|session[-_]?id|^auth$|^pwd$|^pass$|^x-auth)/i;
/** Values shaped like well-known tokens, wherever they stand. */
const TOKEN_SHAPE = /\b(sk-[A-Za-z0-9_-]{16,}|sk_live_[A-Za-z0-9]{16,}|ghp_[A-Za-z0-9]{20,}|gho_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}|xox[abpr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{35}|\d{6,}:[A-Za-z0-9_-]{30,}|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})\b/;

function credentialFields(value: unknown, path: string, out: string[]): void {
  if (Array.isArray(value)) {
    value.forEach((v, i) => credentialFields(v, `${path}[${i}]`, out));
    return;
  }
  if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      const p = path ? `${path}.${k}` : k;
      if (CREDENTIAL_NAME.test(k) && ((typeof v === 'string' && v.trim() !== '') || (v && typeof v === 'object'))) out.push(`body field ${p}`);
      else credentialFields(v, p, out);
    }
  }
}

function formFields(body: string): string[] {
  if (!/^[^=&\s]+=[^&]*(&[^=&\s]+=[^&]*)*$/.test(body.trim())) return [];
  return [...new URLSearchParams(body.trim())].filter(([k, v]) => CREDENTIAL_NAME.test(k) && v !== '').map(([k]) => `body field ${k}`);
}

function stringsOf(value: unknown): string[] {
  if (typeof value === 'string') return [value];
  if (Array.isArray(value)) return value.flatMap(stringsOf);
  if (value && typeof value === 'object') return Object.values(value).flatMap(stringsOf);
  return [];
}

/**
 * Where a proposal carries credentials the model wrote itself: auth headers, URL userinfo,
 * secret-named query parameters and body fields, `--password=...` style arguments, and
 * token-shaped values anywhere. Empty when there are none.
 */
export function literalCredentials(tool: string, input: unknown): string[] {
  const found: string[] = [];
  const i = (input ?? {}) as Record<string, unknown>;
  if (tool === 'http_request') {
    const headers = (i.headers ?? {}) as Record<string, string>;
    for (const [name, v] of Object.entries(headers)) {
      if ((AUTH_HEADER.test(name) || CREDENTIAL_NAME.test(name)) && v.trim() !== '') found.push(`header ${name}`);
    }
    try {
      const u = new URL(String(i.url));
      if (u.username || u.password) found.push('URL userinfo');
      for (const [k, v] of u.searchParams) if (CREDENTIAL_NAME.test(k) && v !== '') found.push(`URL query parameter ${k}`);
    } catch {
      // validated elsewhere
    }
    if (typeof i.body === 'string' && i.body.trim() !== '') {
      let json: unknown;
      try {
        json = JSON.parse(i.body);
      } catch {
        json = undefined;
      }
      if (json !== undefined) credentialFields(json, '', found);
      else found.push(...formFields(i.body));
    }
  }
  if (tool === 'run_command' && Array.isArray(i.argv)) {
    const argv = i.argv.map(String);
    argv.forEach((a, n) => {
      const pair = /^-{0,2}([A-Za-z0-9_.-]+)=(.+)$/.exec(a);
      if (pair && CREDENTIAL_NAME.test(pair[1]!)) found.push(`argument ${n} (${pair[1]}=…)`);
      else if (/^--?[A-Za-z0-9_.-]+$/.test(a) && CREDENTIAL_NAME.test(a.replace(/^-+/, '')) && argv[n + 1] !== undefined) found.push(`argument ${n + 1} (after ${a})`);
    });
  }
  if (stringsOf(input).some((s) => TOKEN_SHAPE.test(s))) found.push('a value shaped like an access token');
  return [...new Set(found)];
}

// ---- the exact request and its hash ----

/** The input as the tool will use it (zod's output: trimmed, defaults filled), or as given when it does not validate. */
function validatedInput(tool: string, input: unknown): unknown {
  const validated = isToolName(tool) ? TOOLS[tool].input.safeParse(input) : undefined;
  return validated?.success ? validated.data : input;
}

export interface ExactRequestContext {
  /** The From address of emails (Steward's, from configuration). */
  smtpFrom?: string;
}

/**
 * The canonical form of what the action will send: the validated input as performed (for an
 * email also the From address Steward adds). Two proposals that would send the same thing
 * have the same form.
 */
export function exactRequest(tool: string, input: unknown, ctx: ExactRequestContext = {}): Record<string, unknown> {
  const value = validatedInput(tool, input) as Record<string, unknown>;
  switch (tool) {
    case 'http_request': {
      const headers = Object.entries((value.headers ?? {}) as Record<string, string>).sort(([a], [b]) => (a.toLowerCase() < b.toLowerCase() ? -1 : a.toLowerCase() > b.toLowerCase() ? 1 : 0));
      return { tool, method: value.method, url: value.url, headers, body: value.body ?? null };
    }
    case 'send_email':
      return { tool, from: ctx.smtpFrom ?? null, to: value.to, cc: value.cc ?? [], subject: value.subject, text: value.text };
    case 'run_command':
      return { tool, argv: value.argv };
    default:
      return { tool, input: value };
  }
}

function stable(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(stable);
  if (value && typeof value === 'object') {
    return Object.fromEntries(
      Object.keys(value)
        .sort()
        .map((k) => [k, stable((value as Record<string, unknown>)[k])]),
    );
  }
  return value;
}

/** sha256 (hex) of the canonical form of what will be sent. */
export function requestHash(tool: string, input: unknown, ctx: ExactRequestContext = {}): string {
  return createHash('sha256').update(JSON.stringify(stable(exactRequest(tool, input, ctx)))).digest('hex');
}

// ---- what the approver reads ----

/**
 * Characters that could hide or reorder what an approver reads: controls (except newline and
 * tab), bidirectional overrides and isolates, zero-width characters, the BOM. Shown as \u{XXXX}.
 */
const INVISIBLE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb]/gu;

export function showInvisible(text: string): string {
  return text.replace(INVISIBLE, (c) => `\\u{${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}}`);
}

/** A fenced block that no backtick run inside can close. */
function fenced(text: string): string {
  let longest = 0;
  for (const m of text.matchAll(/`+/g)) longest = Math.max(longest, m[0].length);
  const fence = '`'.repeat(Math.max(3, longest + 1));
  return `${fence}\n${text}\n${fence}`;
}

/** The request as text, every value in full. */
function requestText(tool: string, input: unknown, ctx: ExactRequestContext): string {
  const r = exactRequest(tool, input, ctx);
  switch (tool) {
    case 'http_request': {
      const lines = [`${String(r.method)} ${String(r.url)}`, ...(r.headers as Array<[string, string]>).map(([k, v]) => `${k}: ${v}`)];
      if (r.body !== null) lines.push('', String(r.body));
      return lines.join('\n');
    }
    case 'send_email': {
      const cc = r.cc as string[];
      return [`From: ${String(r.from ?? '(not configured)')}`, `To: ${(r.to as string[]).join(', ')}`, ...(cc.length ? [`Cc: ${cc.join(', ')}`] : []), `Subject: ${String(r.subject)}`, '', String(r.text)].join('\n');
    }
    case 'run_command':
      return `argv: ${JSON.stringify(r.argv)}`;
    default:
      return JSON.stringify(r.input, null, 2);
  }
}

export interface ProposalView {
  /** The exact request in a fenced block, Steward's own secrets masked, invisible characters shown. */
  block: string;
  /** The tool's input as JSON, in full, Steward's own secrets masked (the approval row's payload; the API lists it). */
  payload: string;
  /** sha256 of the canonical request. */
  hash: string;
  /** Literal credentials the model wrote (shown in full; flagged). */
  credentials: string[];
  /** Held secrets found (masked in the view; such a proposal is refused before it gets here). */
  heldSecrets: string[];
  /** Invisible characters were made visible. */
  invisible: boolean;
}

/** What the approver is shown for a proposal, and the hash of what will be sent. */
export function viewProposal(tool: string, input: unknown, ctx: ExactRequestContext & { heldSecrets?: readonly HeldSecret[] } = {}): ProposalView {
  // the registry's secrets (and any given here): masked, named, never shown
  const held = heldSecrets(ctx.heldSecrets ?? []);
  const raw = requestText(tool, input, ctx);
  const masked = maskHeldSecrets(raw, held);
  const shown = showInvisible(masked);
  return {
    block: fenced(shown),
    payload: maskHeldSecrets(JSON.stringify(validatedInput(tool, input)), held),
    hash: requestHash(tool, input, ctx),
    credentials: literalCredentials(tool, input),
    heldSecrets: heldSecretsIn(raw, held),
    invisible: shown !== masked,
  };
}
