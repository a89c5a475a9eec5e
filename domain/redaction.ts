/**
 * Redaction: what of a tool call's values never leaves the database unredacted in approval
 * requests, receipts and the proposer's chat.
 */
/**
 * Names (object keys, header names, query and form fields) whose values never leave the
 * database unredacted in approval requests and receipts: anything naming a token, secret,
 * key or password, authorization, cookies, credentials and signatures.
 */
const SECRET_KEY = /(passw(or)?d|passphrase|^pass$|^pwd$|secret|token|key|auth(?!ors?(?![A-Za-z]))|cookie|credential|signature|^sig$|session[_-]?id)/i;
const SECRET_VALUE = /\b(sk-[A-Za-z0-9_-]{16,}|ghp_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|xox[abpr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|\d{6,}:[A-Za-z0-9_-]{30,})\b/g;
/** Credentials after an HTTP authentication scheme, wherever they appear in text. */
const AUTH_SCHEME = /\b(Bearer|Basic|Digest|Token)\s+[A-Za-z0-9._~+/=-]{6,}/g;
const URL_IN_TEXT = /\b[a-z][a-z0-9+.-]*:\/\/[^\s"'<>`]+/gi;
/** `name=value`, `name: value`, `"name": "value"` where the name looks secret (bodies, argv, prose). */
const SECRET_PAIR =
  /(["']?)([A-Za-z0-9_.-]*(?:passw(?:or)?d|passphrase|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|auth(?!ors?(?![A-Za-z]))[A-Za-z_-]*|credential|cookie)[A-Za-z0-9_.-]*)\1(\s*[:=]\s*)("(?:[^"\\]|\\.)*"|'[^']*'|[^\s&,;}"']+)/gi;
const R = '[redacted]';

function redactUrl(u: string): string {
  return u
    .replace(/^([a-z][a-z0-9+.-]*:\/\/)[^/?#\s@]*@/i, `$1${R}@`)
    .replace(/([?&;])([^=&#;]+)=([^&#;]*)/g, (m, sep: string, name: string) => (SECRET_KEY.test(name) ? `${sep}${name}=${R}` : m));
}

/** Redact secrets in free text: known token shapes, credentials after Bearer/Basic, URL userinfo and secret query values, secret-named pairs. */
export function redactText(text: string): string {
  return text
    .replace(SECRET_VALUE, R)
    .replace(AUTH_SCHEME, `$1 ${R}`)
    .replace(URL_IN_TEXT, redactUrl)
    .replace(SECRET_PAIR, (m, q: string, name: string, sep: string, value: string) => {
      if (value === R || value.startsWith('[redacted') || /^(Bearer|Basic|Digest|Token)$/i.test(value)) return m;
      const shown = value.startsWith('"') ? `"${R}"` : value.startsWith("'") ? `'${R}'` : R;
      return `${q}${name}${q}${sep}${shown}`;
    });
}

/** A value with its secrets redacted: secret-named keys (headers too) lose their values, strings go through redactText. */
export function redact(value: unknown): unknown {
  if (typeof value === 'string') return redactText(value);
  if (Array.isArray(value)) return value.map(redact);
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, SECRET_KEY.test(k) ? R : redact(v)]));
  }
  return value;
}
