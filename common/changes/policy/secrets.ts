/**
 * Repository change policy, part 4: secrets in added lines (`detectSecrets`): known token
 * formats, secret-named assignments with high-entropy values, and the configured values.
 */

// =====================================================================================
// Secrets
// =====================================================================================

export type SecretRule =
  | 'aws-access-key-id'
  | 'aws-secret-access-key'
  | 'github-token'
  | 'slack-token'
  | 'private-key'
  | 'google-api-key'
  | 'stripe-key'
  | 'openai-key'
  | 'anthropic-key'
  | 'jwt'
  | 'generic-secret'
  | 'configured-secret';

export interface SecretFinding {
  rule: SecretRule;
  /** Index into the `lines` given. */
  line: number;
  /** 0-based column (UTF-16) where the secret starts. */
  column: number;
  /** What was found, REDACTED: a public prefix at most, the length, never the secret. */
  preview: string;
  /** Human description of the rule. */
  description: string;
}

/** Shannon entropy in bits per character. */
export function shannonEntropy(s: string): number {
  if (s.length === 0) return 0;
  const counts = new Map<string, number>();
  for (const ch of s) counts.set(ch, (counts.get(ch) ?? 0) + 1);
  let h = 0;
  const n = [...s].length;
  for (const c of counts.values()) {
    const p = c / n;
    h -= p * Math.log2(p);
  }
  return h;
}

interface TokenRule {
  rule: Exclude<SecretRule, 'generic-secret' | 'configured-secret'>;
  description: string;
  re: RegExp;
  /** Characters of the match that are a public prefix (shown in the preview). */
  prefix: (m: string) => number;
  /** The part whose randomness is judged (placeholders like ghp_xxxx are skipped). */
  body?: (m: RegExpExecArray) => string;
  minEntropy?: number;
  /** Whole match is shown (e.g. a private key header, not secret in itself). */
  showAll?: boolean;
  reject?: (m: RegExpExecArray) => boolean;
}

const prefixUntil = (sep: string) => (m: string) => m.indexOf(sep) + sep.length;

const TOKEN_RULES: TokenRule[] = [
  {
    rule: 'private-key',
    description: 'a private key block',
    re: /-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----/g,
    prefix: (m) => m.length,
    showAll: true,
  },
  {
    rule: 'aws-access-key-id',
    description: 'an AWS access key id',
    re: /\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b/g,
    prefix: () => 4,
    body: (m) => m[0].slice(4),
    minEntropy: 2.5,
    reject: (m) => m[0].includes('EXAMPLE'),
  },
  {
    rule: 'aws-secret-access-key',
    description: 'an AWS secret access key',
    re: /aws_?secret_?(?:access_?)?key["']?\s{0,8}(?::=|=>|[:=])\s{0,8}["']?([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])/gi,
    prefix: (m) => m.length - 40,
    body: (m) => m[1] ?? '',
    minEntropy: 3.5,
    reject: (m) => (m[1] ?? '').includes('EXAMPLE'),
  },
  {
    rule: 'github-token',
    description: 'a GitHub token',
    re: /\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}\b/g,
    prefix: () => 4,
    body: (m) => m[0].slice(4),
    minEntropy: 3,
  },
  {
    rule: 'github-token',
    description: 'a GitHub fine-grained token',
    re: /\bgithub_pat_[A-Za-z0-9_]{22,255}\b/g,
    prefix: () => 11,
    body: (m) => m[0].slice(11),
    minEntropy: 3,
  },
  {
    rule: 'slack-token',
    description: 'a Slack token',
    re: /\bxox[abprs]-[A-Za-z0-9-]{10,250}/g,
    prefix: () => 5,
    body: (m) => m[0].slice(5),
    minEntropy: 2.5,
  },
  {
    rule: 'google-api-key',
    description: 'a Google API key',
    re: /\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])/g,
    prefix: () => 4,
    body: (m) => m[0].slice(4),
    minEntropy: 3,
  },
  {
    rule: 'stripe-key',
    description: 'a Stripe live key',
    re: /\b(?:sk|rk)_live_[0-9A-Za-z]{20,247}\b/g,
    prefix: () => 8,
    body: (m) => m[0].slice(8),
    minEntropy: 3,
  },
  {
    rule: 'anthropic-key',
    description: 'an Anthropic API key',
    re: /\bsk-ant-[A-Za-z0-9_-]{20,250}/g,
    prefix: prefixUntil('sk-ant-'),
    body: (m) => m[0].slice(7),
    minEntropy: 3,
  },
  {
    rule: 'openai-key',
    description: 'an OpenAI API key',
    re: /\bsk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,250}/g,
    prefix: (m) => m.indexOf('-', 3) + 1,
    body: (m) => m[0].slice(m[0].indexOf('-', 3) + 1),
    minEntropy: 3,
  },
  {
    rule: 'openai-key',
    description: 'an OpenAI-style API key',
    re: /\bsk-[A-Za-z0-9]{32,250}(?![A-Za-z0-9_-])/g,
    prefix: () => 3,
    body: (m) => m[0].slice(3),
    minEntropy: 3.5,
    reject: (m) => !/[0-9]/.test(m[0].slice(3)) || !/[A-Za-z]/.test(m[0].slice(3)),
  },
  {
    rule: 'jwt',
    description: 'a JSON Web Token',
    re: /\beyJ[A-Za-z0-9_-]{8,2000}\.eyJ[A-Za-z0-9_-]{8,8000}\.[A-Za-z0-9_-]{16,2000}/g,
    prefix: () => 3,
    body: (m) => m[0].slice(m[0].lastIndexOf('.') + 1),
    minEntropy: 3,
  },
];

const SECRET_WORDS = new Set(['password', 'passwd', 'pwd', 'passphrase', 'secret', 'secrets', 'token', 'apikey', 'credential', 'credentials', 'pat']);
const SECRET_PAIRS = new Set(['api key', 'access key', 'private key', 'secret key', 'auth key', 'signing key', 'encryption key', 'master key', 'client secret', 'access token', 'auth token', 'refresh token', 'bearer token']);
const SECRET_SUFFIXES = ['password', 'passwd', 'token', 'secret', 'apikey', 'accesskey', 'secretkey', 'privatekey'];
/** A key whose last word is one of these names something about a secret, not the secret. */
const NOT_SECRET_LAST = new Set([
  'url', 'uri', 'endpoint', 'host', 'file', 'path', 'dir', 'name', 'names', 'type', 'label', 'field', 'id', 'ids',
  'length', 'len', 'min', 'max', 'count', 'size', 'prefix', 'suffix', 'header', 'env', 'var', 'policy', 'hint',
  'placeholder', 'regex', 'pattern', 'format', 'expiry', 'expires', 'expiration', 'ttl', 'timeout', 'mode',
  'enabled', 'required', 'error', 'message', 'text', 'title', 'description', 'help', 'rules', 'strength', 'version',
  'provider', 'store', 'manager', 'ref', 'source', 'location', 'kind', 'scope', 'scopes', 'usage', 'limit', 'reset',
]);

function keyWords(key: string): string[] {
  return key
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .replace(/([A-Z]+)([A-Z][a-z])/g, '$1_$2')
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .filter((w) => w !== '');
}

function isSecretKey(key: string): boolean {
  const words = keyWords(key);
  const last = words[words.length - 1];
  if (last === undefined || NOT_SECRET_LAST.has(last)) return false;
  for (let i = 0; i < words.length; i++) {
    const w = words[i]!;
    if (SECRET_WORDS.has(w)) return w !== 'pat' || words.length > 1 || key === 'PAT';
    if (i + 1 < words.length && SECRET_PAIRS.has(`${w} ${words[i + 1]}`)) return true;
    if (w.length > 6 && SECRET_SUFFIXES.some((s) => w.endsWith(s))) return true;
  }
  return false;
}

function isKeyChar(c: number): boolean {
  return (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 95 || c === 46 || c === 45 || c === 36;
}

const secretKeyCache = new Map<string, boolean>();
function isSecretKeyCached(key: string): boolean {
  let v = secretKeyCache.get(key);
  if (v === undefined) {
    v = isSecretKey(key);
    if (secretKeyCache.size >= 10_000) secretKeyCache.clear();
    secretKeyCache.set(key, v);
  }
  return v;
}

const PLACEHOLDER = /example|changeme|change_me|change-me|placeholder|your[_-]|xxxx|\*\*\*|redacted|dummy|<[^>]*>|\$\{|\{\{|%\(|%s|process\.env|os\.environ|getenv|env\(|secrets\./i;

function genericFindings(line: string, index: number, taken: Array<[number, number]>, out: SecretFinding[]): void {
  // `KEY=value` at the start of a line (dotenv / shell): an unquoted value is a literal there
  const dotenvMatch = /^\s{0,16}(?:export\s{1,8})?[A-Z0-9_]{1,64}=/.exec(line);
  const dotenvSep = dotenvMatch ? dotenvMatch[0].length - 1 : -1;
  for (let p = 0; p < line.length; p++) {
    const c = line[p];
    if (c !== '=' && c !== ':') continue;
    const sepAt = p;
    const prev = line[p - 1];
    const next = line[p + 1];
    if (c === '=' && (next === '=' || prev === '=' || prev === '!' || prev === '<' || prev === '>')) continue;
    if (c === ':' && (next === ':' || prev === ':')) continue;
    let sepEnd = p + 1;
    if ((c === ':' && next === '=') || (c === '=' && next === '>')) sepEnd++;
    // the key, right before the separator
    let k = p - 1;
    while (k >= 0 && (line[k] === ' ' || line[k] === '\t')) k--;
    if (line[k] === '"' || line[k] === "'") k--;
    const keyEnd = k + 1;
    while (k >= 0 && keyEnd - k <= 64 && isKeyChar(line.charCodeAt(k))) k--;
    const key = line.slice(k + 1, keyEnd);
    if (key === '' || !isSecretKeyCached(key)) continue;
    // the value
    let v = sepEnd;
    while (v < line.length && (line[v] === ' ' || line[v] === '\t')) v++;
    const q = line[v];
    let value: string;
    let quoted = false;
    let e: number;
    if (q === '"' || q === "'" || q === '`') {
      e = v + 1;
      while (e < line.length && e - v <= 512 && line[e] !== q) e += line[e] === '\\' ? 2 : 1;
      if (line[e] !== q) continue;
      value = line.slice(v + 1, e);
      quoted = true;
    } else {
      e = v;
      while (e < line.length && e - v <= 512 && !/[\s,;)}\]"'`]/.test(line[e]!)) e++;
      value = line.slice(v, e);
    }
    // separators inside this value are not assignments of their own
    p = Math.max(p, e - 1);
    const start = quoted ? v + 1 : v;
    if (value.length < 8 || value.length > 512 || /\s/.test(value) || PLACEHOLDER.test(value)) continue;
    if (taken.some(([a, b]) => start < b && start + value.length > a)) continue;
    if (!quoted) {
      // code references: identifiers, member access, calls, env/shell/template syntax
      if (/^[$%@&*]/.test(value) || /[()[\]]/.test(value)) continue;
      const dotenv = sepAt === dotenvSep;
      if (!dotenv) {
        if (/^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$/.test(value) && value.length < 20) continue;
        if (/^(?:true|false|null|none|nil|undefined)$/i.test(value)) continue;
        if (!/[0-9]/.test(value) || !/[A-Za-z]/.test(value)) continue;
      }
      if (shannonEntropy(value) < 3.3) continue;
    } else if (shannonEntropy(value) < 3) continue;
    taken.push([start, start + value.length]);
    out.push({
      rule: 'generic-secret',
      line: index,
      column: start,
      preview: `${key.slice(0, 64)}${line.slice(keyEnd, sepEnd).includes(':') ? ':' : ' ='} ${quoted ? q : ''}${'*'.repeat(4)}…${quoted ? q : ''} (${value.length} chars)`,
      description: `a hard-coded secret assigned to ${JSON.stringify(key.slice(0, 64))}`,
    });
  }
}

/** Configured secret values shorter than this are ignored (too short to search for reliably). */
export const MIN_SECRET_VALUE_LENGTH = 6;

/**
 * Find secrets in lines of text (a patch's added lines). Findings are redacted: the preview shows
 * at most a public prefix (such as `ghp_`) and the length. `extraValues` are exact values Steward
 * or the operator holds (tokens); any occurrence is a finding.
 */
export function detectSecrets(lines: readonly string[], opts: { extraValues?: readonly string[] } = {}): SecretFinding[] {
  const out: SecretFinding[] = [];
  const extra = [...new Set((opts.extraValues ?? []).filter((v) => typeof v === 'string' && v.length >= MIN_SECRET_VALUE_LENGTH))];
  lines.forEach((line, index) => {
    if (typeof line !== 'string' || line.length === 0) return;
    const taken: Array<[number, number]> = [];
    extra.forEach((value, k) => {
      for (let at = line.indexOf(value); at >= 0; at = line.indexOf(value, at + value.length)) {
        taken.push([at, at + value.length]);
        out.push({ rule: 'configured-secret', line: index, column: at, preview: `[configured secret #${k + 1}] (${value.length} chars)`, description: 'a secret value Steward holds' });
      }
    });
    for (const r of TOKEN_RULES) {
      r.re.lastIndex = 0;
      let m: RegExpExecArray | null;
      while ((m = r.re.exec(line)) !== null) {
        const s = m[0];
        const startAt = m.index;
        if (taken.some(([a, b]) => startAt < b && startAt + s.length > a)) continue;
        if (r.reject?.(m)) continue;
        if (r.minEntropy !== undefined && shannonEntropy(r.body ? r.body(m) : s) < r.minEntropy) continue;
        taken.push([startAt, startAt + s.length]);
        const pre = Math.max(0, Math.min(s.length, r.prefix(s)));
        out.push({
          rule: r.rule,
          line: index,
          column: startAt,
          preview: r.showAll ? s : `${s.slice(0, pre)}****… (${s.length} chars)`,
          description: r.description,
        });
      }
    }
    genericFindings(line, index, taken, out);
  });
  return out.sort((a, b) => a.line - b.line || a.column - b.column);
}
