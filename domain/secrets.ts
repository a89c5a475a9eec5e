/**
 * The one registry of the secrets Steward holds: every value it reads by reference or holds in
 * its configuration (its API token, provider keys, bot tokens, codec keys, webhook secrets
 * STEWARD_HOOK_*, inbox passwords STEWARD_INBOX_*, MCP servers' STEWARD_MCP_* variables,
 * repositories' tokens, passwords inside URL settings). The registry reads the process
 * environment each time it is asked (a variable set later is held from then on) and keeps what
 * was handed to it (the config file's values, settings given in code).
 *
 * Every surface asks it: a tool call or proposed action carrying a held value is refused before
 * anything is sent (domain/actions.ts, the turn's tool step, MCP calls), and every view masks
 * held values (approval requests and their summaries, chat deliveries and the progress panel,
 * the reply's text as it streams, receipts and their export, logs). Only names are ever shown,
 * never values.
 *
 * No Temporal imports.
 */
import { isHeldVariable } from '../common/secret-refs.js';

export interface HeldSecret {
  /** Where the value comes from (a variable name), for messages: never the value. */
  name: string;
  value: string;
}

/** Variables that hold URLs with credentials in their userinfo. */
const URL_VARIABLE = /(_URL|_DSN)$/i;
/** Shorter values are not treated as secrets (they would match ordinary text). */
export const MIN_HELD_SECRET = 8;

/**
 * The secrets in a set of variables: every variable the registry holds by name
 * (common/secret-refs.ts: credential-like names and the reference prefixes), the parts of key
 * lists (`id:key,id:key`), and the passwords inside URL-valued variables (SMTP, database).
 */
export function heldSecretsFrom(vars: Readonly<Record<string, string | undefined>>): HeldSecret[] {
  const out = new Map<string, HeldSecret>();
  const add = (name: string, value: string) => {
    const v = value.trim();
    if (v.length >= MIN_HELD_SECRET && !out.has(v)) out.set(v, { name, value: v });
  };
  for (const [name, raw] of Object.entries(vars)) {
    if (raw === undefined || raw === '') continue;
    if (isHeldVariable(name)) {
      add(name, raw);
      // key lists: "id:key,id:key" or "key,key"
      for (const part of raw.split(/[,\s]+/)) {
        add(name, part);
        const colon = part.lastIndexOf(':');
        if (colon > 0) add(name, part.slice(colon + 1));
      }
    }
    if (URL_VARIABLE.test(name) || /^[a-z][a-z0-9+.-]*:\/\/[^/\s]*@/i.test(raw)) {
      try {
        const u = new URL(raw);
        if (u.password) add(name, decodeURIComponent(u.password));
      } catch {
        // not a URL
      }
    }
  }
  return [...out.values()];
}

// ---- the registry ----

const handed = new Map<string, HeldSecret>();
/** The environment's held values, read again when older than ENV_TTL_MS or when asked fresh. */
let fromEnv: { at: number; secrets: HeldSecret[] } | undefined;
/**
 * Reading process.env costs about 25 us, and every receipt and delivery asks the registry: the
 * views use a reading at most this old, the refusals (once per tool call) read it fresh. A
 * value Steward reads by reference is handed to the registry when it is read, at once.
 */
const ENV_TTL_MS = 1000;

/** Hold these values too (the config file's, a reference's value as it is read, settings given in code); kept for the life of the process. */
export function holdSecrets(secrets: readonly HeldSecret[]): void {
  for (const s of secrets) {
    const v = s.value.trim();
    if (v.length >= MIN_HELD_SECRET && !handed.has(v)) handed.set(v, { name: s.name, value: v });
  }
}

/** The value of the variable a reference names (`env:NAME`), held from now on; undefined when unset. */
export function readReference(ref: string, env: Readonly<Record<string, string | undefined>> = process.env): string | undefined {
  const name = ref.startsWith('env:') ? ref.slice('env:'.length) : ref;
  const value = env[name];
  if (value !== undefined && value !== '') holdSecrets([{ name, value }]);
  return value === '' ? undefined : value;
}

/**
 * Every secret Steward holds now: the environment's, the ones handed to the registry, and
 * `extra`. `fresh`: read the environment now (the refusals do).
 */
export function heldSecrets(extra: readonly HeldSecret[] = [], opts: { fresh?: boolean } = {}): HeldSecret[] {
  const now = Date.now();
  if (opts.fresh || !fromEnv || now - fromEnv.at > ENV_TTL_MS) fromEnv = { at: now, secrets: heldSecretsFrom(process.env) };
  const out = new Map<string, HeldSecret>();
  for (const s of [...extra, ...handed.values(), ...fromEnv.secrets]) if (!out.has(s.value)) out.set(s.value, s);
  return [...out.values()];
}

// ---- finding and masking ----

/** The forms a value may take on its way out: as is, percent-encoded, base64 (alone and in Basic credentials). */
const encoded = new Map<string, string[]>();
function encodings(value: string): string[] {
  let e = encoded.get(value);
  if (!e) {
    const b64 = Buffer.from(value, 'utf8').toString('base64');
    e = [...new Set([value, encodeURIComponent(value), b64, b64.replace(/=+$/, '')])].filter((x) => x.length >= MIN_HELD_SECRET);
    if (encoded.size > 10_000) encoded.clear();
    encoded.set(value, e);
  }
  return e;
}

function stringsOf(value: unknown): string[] {
  if (typeof value === 'string') return [value];
  if (Array.isArray(value)) return value.flatMap(stringsOf);
  if (value && typeof value === 'object') return [...Object.keys(value), ...Object.values(value).flatMap(stringsOf)];
  return [];
}

/** The names of the held secrets that occur in `value`'s strings and keys (in any of the forms above). */
export function heldSecretsIn(value: unknown, secrets: readonly HeldSecret[] = heldSecrets()): string[] {
  const text = stringsOf(value).join('\n');
  const names = new Set<string>();
  for (const s of secrets) {
    if (encodings(s.value).some((e) => text.includes(e))) names.add(s.name);
  }
  return [...names];
}

/** `text` with every held secret (in every form) replaced by a marker naming where it comes from. */
export function maskHeldSecrets(text: string, secrets: readonly HeldSecret[] = heldSecrets()): string {
  let out = text;
  // longest first, so a secret that contains another is masked whole
  for (const s of [...secrets].sort((a, b) => b.value.length - a.value.length)) {
    for (const e of encodings(s.value)) if (out.includes(e)) out = out.split(e).join(`[Steward's secret ${s.name}]`);
  }
  return out;
}

/**
 * Text that is still growing (a model's answer as it streams, domain/live-drafts.ts): masked as
 * `maskHeldSecrets` masks, and with its end held back when that end could be the start of a held
 * secret (in any of its forms), so a secret arriving over several chunks never shows in part.
 * The held-back characters show in the next reading, or the whole is masked once it has come.
 */
export function maskHeldSecretsGrowing(text: string, secrets: readonly HeldSecret[] = heldSecrets()): string {
  const out = maskHeldSecrets(text, secrets);
  if (out.length === 0) return out;
  const last = out.charCodeAt(out.length - 1);
  let cut = out.length;
  for (const s of secrets) {
    for (const e of encodings(s.value)) {
      // the longest proper prefix of the form that the text ends with
      for (let k = Math.min(e.length - 1, out.length); k > 0; k--) {
        if (e.charCodeAt(k - 1) === last && out.length - k < cut && out.endsWith(e.slice(0, k))) {
          cut = out.length - k;
          break;
        }
      }
    }
  }
  return out.slice(0, cut);
}

/** `value` with every held secret masked in each of its strings (and keys). */
export function maskHeldSecretsDeep(value: unknown, secrets: readonly HeldSecret[] = heldSecrets()): unknown {
  if (typeof value === 'string') return maskHeldSecrets(value, secrets);
  if (Array.isArray(value)) return value.map((v) => maskHeldSecretsDeep(v, secrets));
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [maskHeldSecrets(k, secrets), maskHeldSecretsDeep(v, secrets)]));
  return value;
}

/** The refusal of a tool call or request carrying held secrets, or undefined. */
export function heldSecretRefusal(value: unknown, extra: readonly HeldSecret[] = []): string | undefined {
  const names = heldSecretsIn(value, heldSecrets(extra, { fresh: true }));
  return names.length > 0 ? `it carries a secret Steward holds (${names.join(', ')}); an agent never sends Steward's own secrets` : undefined;
}
