/**
 * Repository change policy: what a coding agent's patch may touch before Steward promotes it
 * (patch artifact or draft PR). PURE: no node: imports, no I/O, no Buffer/TextDecoder; safe for
 * the Temporal workflow bundle.
 *
 * Four parts:
 *  - globs: `globToRegExp` / `matchesGlob`, gitignore-like (semantics documented below), matched
 *    by a state-set simulation, so matching is O(path length x pattern length), never exponential;
 *  - policy layers: `RepoPolicySchema` (one layer: operator's global config, the repository's
 *    registration, or the repository's `.steward/policy.json`), `mergePolicies` (deny-wins),
 *    `withDefaults` / `resolvePolicy` (the operator layer as the ceiling of the other two);
 *  - `parseUnifiedDiff`: `git diff --binary --full-index` output into per-file records; never throws;
 *  - the gate: `detectSecrets` and `checkPatchPolicy`.
 */
import { z } from 'zod';

// =====================================================================================
// Globs
// =====================================================================================
//
// Semantics (gitignore-like, matched against a repository-relative path such as `src/a/b.ts`):
//  - `*` matches any run of characters except `/` (dot files included); `?` one character except
//    `/`; `[abc]`, `[a-z]`, `[!a-z]` / `[^a-z]` and POSIX classes like `[[:digit:]]` one character
//    (never `/`); an unclosed `[` is a literal; `\x` is a literal `x`.
//  - `**` as a whole path segment: `**/x` = `x` in any directory (zero or more), `a/**/b` = zero
//    or more directories between, `a/**` = everything inside `a`. `**` inside a segment (`a**b`)
//    is the same as `*`.
//  - `{a,b,c}` alternation, nested allowed (`{src,test}/**/*.{ts,tsx}`); a brace group without a
//    top-level comma is literal. At most MAX_GLOB_ALTERNATIVES alternatives after expansion.
//  - A leading `/` anchors at the repository root. A pattern with a `/` elsewhere (not only at the
//    end) is also anchored at the root. A pattern with no `/` (after brace expansion; each
//    alternative decides for itself) matches the base name at any depth: `*.log` matches
//    `a/b/c.log`, `node_modules` matches `x/node_modules/y`.
//  - A pattern that matches a directory matches everything below it: `src` (or `/src`, `docs/api`)
//    matches `src/a/b.ts`. A trailing `/` matches directories only: `build/` matches `build/x` and
//    `a/build/x` but not a file named `build`.
//  - Case-sensitive unless `nocase` (protected paths are matched case-insensitively, so
//    `.GitHub/Workflows/x.yml` cannot slip past `.github/workflows/**` on a case-insensitive checkout).
//  - An empty pattern (or only slashes) matches nothing.

/** Brace expansion is bounded: a glob with more alternatives than this is rejected. */
export const MAX_GLOB_ALTERNATIVES = 256;
/** Longest glob accepted (characters). */
export const MAX_GLOB_LENGTH = 1024;

export class GlobError extends Error {
  override name = 'GlobError';
}

type Tok =
  | { k: 'ch'; c: string }
  | { k: 'one' }
  | { k: 'cls'; neg: boolean; ranges: Array<[number, number]> }
  | { k: 'star' }
  | { k: 'any' }
  | { k: 'dirs' };

interface GlobAlt {
  toks: Tok[];
  dirOnly: boolean;
}

interface CompiledGlob {
  alts: GlobAlt[];
  nocase: boolean;
}

const POSIX_CLASSES: Record<string, Array<[number, number]>> = {
  alpha: [[65, 90], [97, 122]],
  digit: [[48, 57]],
  alnum: [[48, 57], [65, 90], [97, 122]],
  upper: [[65, 90]],
  lower: [[97, 122]],
  space: [[9, 13], [32, 32]],
  blank: [[9, 9], [32, 32]],
  xdigit: [[48, 57], [65, 70], [97, 102]],
  punct: [[33, 47], [58, 64], [91, 96], [123, 126]],
  word: [[48, 57], [65, 90], [95, 95], [97, 122]],
};

const tooMany = (): GlobError => new GlobError(`too many alternatives (more than ${MAX_GLOB_ALTERNATIVES}) after expanding braces`);

/** Expand `{a,b}` groups (nested). Escapes are kept for the tokenizer. */
function expandBraces(s: string): string[] {
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (c === '\\') {
      i++;
      continue;
    }
    if (c !== '{') continue;
    // find the matching close brace and the top-level commas
    let depth = 0;
    const commas: number[] = [];
    let close = -1;
    for (let j = i; j < s.length; j++) {
      const d = s[j];
      if (d === '\\') {
        j++;
        continue;
      }
      if (d === '{') depth++;
      else if (d === '}') {
        depth--;
        if (depth === 0) {
          close = j;
          break;
        }
      } else if (d === ',' && depth === 1) commas.push(j);
    }
    if (close < 0 || commas.length === 0) continue; // literal brace
    const pre = s.slice(0, i);
    const bounds = [i, ...commas, close];
    const parts: string[] = [];
    for (let k = 0; k + 1 < bounds.length; k++) {
      for (const e of expandBraces(s.slice(bounds[k]! + 1, bounds[k + 1]))) parts.push(e);
      if (parts.length > MAX_GLOB_ALTERNATIVES) throw tooMany();
    }
    const posts = expandBraces(s.slice(close + 1));
    if (parts.length * posts.length > MAX_GLOB_ALTERNATIVES) throw tooMany();
    const out: string[] = [];
    for (const p of parts) for (const q of posts) out.push(pre + p + q);
    return out;
  }
  return [s];
}

function cpOf(ch: string): number {
  return ch.codePointAt(0) ?? 0;
}

/** Parse `[...]` at chars[i] (the `[`). Returns undefined when it is not a valid class. */
function parseClass(chars: string[], i: number): { tok: Tok; next: number } | undefined {
  let j = i + 1;
  let neg = false;
  if (chars[j] === '!' || chars[j] === '^') {
    neg = true;
    j++;
  }
  const ranges: Array<[number, number]> = [];
  let first = true;
  while (j < chars.length) {
    let c = chars[j]!;
    if (c === ']' && !first) return { tok: { k: 'cls', neg, ranges }, next: j + 1 };
    first = false;
    if (c === '/') return undefined;
    if (c === '[' && chars[j + 1] === ':') {
      const end = chars.indexOf(']', j + 2);
      if (end > 0 && chars[end - 1] === ':') {
        const name = chars.slice(j + 2, end - 1).join('');
        const cls = POSIX_CLASSES[name];
        if (cls) {
          ranges.push(...cls);
          j = end + 1;
          continue;
        }
      }
    }
    if (c === '\\') {
      j++;
      if (j >= chars.length) return undefined;
      c = chars[j]!;
    }
    const lo = cpOf(c);
    if (chars[j + 1] === '-' && j + 2 < chars.length && chars[j + 2] !== ']') {
      let hiCh = chars[j + 2]!;
      let step = 3;
      if (hiCh === '\\') {
        if (j + 3 >= chars.length) return undefined;
        hiCh = chars[j + 3]!;
        step = 4;
      }
      if (hiCh === '/') return undefined;
      const hi = cpOf(hiCh);
      if (hi >= lo) ranges.push([lo, hi]);
      j += step;
      continue;
    }
    ranges.push([lo, lo]);
    j++;
  }
  return undefined;
}

function compileAlternative(src: string): GlobAlt | undefined {
  const chars = Array.from(src);
  // trailing unescaped slashes: directories only
  let dirOnly = false;
  while (chars.length > 0 && chars[chars.length - 1] === '/') {
    let bs = 0;
    for (let k = chars.length - 2; k >= 0 && chars[k] === '\\'; k--) bs++;
    if (bs % 2 === 1) break;
    chars.pop();
    dirOnly = true;
  }
  let anchored = false;
  let start = 0;
  while (start < chars.length && chars[start] === '/') {
    start++;
    anchored = true;
  }
  if (start >= chars.length) return undefined;

  // tokenize into segments
  interface Seg {
    toks: Tok[];
    raw: string;
  }
  const segs: Seg[] = [];
  let cur: Seg = { toks: [], raw: '' };
  for (let i = start; i < chars.length; ) {
    const c = chars[i]!;
    if (c === '/') {
      if (cur.raw !== '') segs.push(cur); // collapse `a//b`
      cur = { toks: [], raw: '' };
      i++;
      continue;
    }
    if (c === '\\') {
      const lit = chars[i + 1] ?? '\\';
      cur.toks.push({ k: 'ch', c: lit });
      cur.raw += `\\${lit}`;
      i += 2;
      continue;
    }
    if (c === '*') {
      const last = cur.toks[cur.toks.length - 1];
      if (!last || last.k !== 'star') cur.toks.push({ k: 'star' });
      cur.raw += '*';
      i++;
      continue;
    }
    if (c === '?') {
      cur.toks.push({ k: 'one' });
      cur.raw += '?';
      i++;
      continue;
    }
    if (c === '[') {
      const cls = parseClass(chars, i);
      if (cls) {
        cur.toks.push(cls.tok);
        cur.raw += chars.slice(i, cls.next).join('');
        i = cls.next;
        continue;
      }
    }
    cur.toks.push({ k: 'ch', c });
    cur.raw += c;
    i++;
  }
  if (cur.raw !== '') segs.push(cur);
  if (segs.length === 0) return undefined;
  if (segs.length > 1) anchored = true;

  const toks: Tok[] = [];
  if (!anchored) toks.push({ k: 'dirs' });
  segs.forEach((seg, idx) => {
    const last = idx === segs.length - 1;
    if (seg.raw === '**') {
      toks.push(last ? { k: 'any' } : { k: 'dirs' });
      return;
    }
    toks.push(...seg.toks);
    if (!last) toks.push({ k: 'ch', c: '/' });
  });
  return { toks, dirOnly };
}

const globCache = new Map<string, CompiledGlob>();

function compileGlob(glob: string, nocase: boolean): CompiledGlob {
  const key = `${nocase ? 'i' : 's'}${glob}`;
  const hit = globCache.get(key);
  if (hit) return hit;
  if (glob.length > MAX_GLOB_LENGTH) throw new GlobError(`a glob is at most ${MAX_GLOB_LENGTH} characters`);
  const alts: GlobAlt[] = [];
  for (const a of expandBraces(glob)) {
    const alt = compileAlternative(a);
    if (alt) alts.push(alt);
  }
  const compiled: CompiledGlob = { alts, nocase };
  if (globCache.size >= 4096) globCache.clear();
  globCache.set(key, compiled);
  return compiled;
}

/** Throws GlobError when the glob is too long or expands to too many alternatives. */
export function validateGlob(glob: string): void {
  compileGlob(glob, false);
}

function foldCase(c: string): string {
  const l = c.toLowerCase();
  return l === c ? c : l;
}

function inRanges(cp: number, ranges: Array<[number, number]>): boolean {
  for (const [lo, hi] of ranges) if (cp >= lo && cp <= hi) return true;
  return false;
}

function classMatches(t: { neg: boolean; ranges: Array<[number, number]> }, c: string, nocase: boolean): boolean {
  let hit = inRanges(cpOf(c), t.ranges);
  if (!hit && nocase) {
    const l = c.toLowerCase();
    const u = c.toUpperCase();
    hit = (l.length === c.length && inRanges(cpOf(l), t.ranges)) || (u.length === c.length && inRanges(cpOf(u), t.ranges));
  }
  return t.neg ? !hit : hit;
}

/**
 * Run one alternative over the path as a set of NFA states (Thompson simulation): each path
 * character is looked at once per live state, so the cost is O(path x pattern) whatever the input.
 */
function runAlt(alt: GlobAlt, path: string[], nocase: boolean): boolean {
  const { toks, dirOnly } = alt;
  const m = toks.length;
  // states 0..m: before token i (m: matched); m+1+i: inside the `(?:.*/)` loop of a `dirs` token i
  // (the loop state has no empty move to i+1: only a `/` leaves the loop)
  let cur: number[] = [];
  let nxt: number[] = [];
  const seen = new Int32Array(2 * m + 2);
  let gen = 1;
  const add = (list: number[], i: number): void => {
    if (i > m) {
      if (seen[i] !== gen) {
        seen[i] = gen;
        list.push(i);
      }
      return;
    }
    while (i <= m && seen[i] !== gen) {
      seen[i] = gen;
      list.push(i);
      const t = toks[i];
      if (t && (t.k === 'star' || t.k === 'any' || t.k === 'dirs')) i++;
      else break;
    }
  };
  add(cur, 0);
  for (let p = 0; p < path.length; p++) {
    const c = path[p]!;
    // the whole pattern matched a leading directory of the path: everything below it matches
    if (c === '/' && seen[m] === gen) return true;
    gen++;
    nxt.length = 0;
    const fc = nocase ? foldCase(c) : c;
    for (const s of cur) {
      if (s === m) continue;
      const i = s > m ? s - m - 1 : s;
      const t = toks[i]!;
      switch (t.k) {
        case 'ch':
          if (t.c === c || (nocase && foldCase(t.c) === fc)) add(nxt, i + 1);
          break;
        case 'one':
          if (c !== '/') add(nxt, i + 1);
          break;
        case 'cls':
          if (c !== '/' && classMatches(t, c, nocase)) add(nxt, i + 1);
          break;
        case 'star':
          if (c !== '/') add(nxt, i);
          break;
        case 'any':
          add(nxt, i);
          break;
        case 'dirs':
          add(nxt, m + 1 + i);
          if (c === '/') add(nxt, i + 1);
          break;
      }
    }
    if (nxt.length === 0) return false;
    const tmp = cur;
    cur = nxt;
    nxt = tmp;
  }
  return !dirOnly && seen[m] === gen;
}

/**
 * Does the repository-relative `path` match `glob` (semantics above)? Linear in the path for a
 * given pattern. Throws GlobError only for globs `validateGlob` rejects.
 */
export function matchesGlob(path: string, glob: string, opts: { nocase?: boolean } = {}): boolean {
  const nocase = opts.nocase === true;
  const compiled = compileGlob(glob, nocase);
  if (compiled.alts.length === 0) return false;
  const chars = Array.from(path);
  for (const alt of compiled.alts) if (runAlt(alt, chars, nocase)) return true;
  return false;
}

/** First glob of `globs` that `path` matches. */
export function firstMatch(path: string, globs: readonly string[], opts: { nocase?: boolean } = {}): string | undefined {
  for (const g of globs) if (matchesGlob(path, g, opts)) return g;
  return undefined;
}

function reChar(c: string): string {
  return /^[A-Za-z0-9]$/.test(c) ? c : `\\u{${cpOf(c).toString(16)}}`;
}

/**
 * The same semantics as a RegExp (flags `su`, plus `i` for nocase), for display and interop.
 * NOTE: a backtracking RegExp engine can be slow on adversarial paths for patterns with many
 * `*`; the gate itself uses `matchesGlob`, which is linear.
 */
export function globToRegExp(glob: string, opts: { nocase?: boolean } = {}): RegExp {
  const compiled = compileGlob(glob, opts.nocase === true);
  const alts = compiled.alts.map((alt) => {
    let s = '';
    for (const t of alt.toks) {
      switch (t.k) {
        case 'ch':
          s += reChar(t.c);
          break;
        case 'one':
          s += '[^/]';
          break;
        case 'cls': {
          const body = t.ranges.map(([lo, hi]) => (lo === hi ? `\\u{${lo.toString(16)}}` : `\\u{${lo.toString(16)}}-\\u{${hi.toString(16)}}`)).join('');
          s += t.neg ? `[^${body}/]` : body === '' ? '(?!)' : `(?!/)[${body}]`;
          break;
        }
        case 'star':
          s += '[^/]*';
          break;
        case 'any':
          s += '.*';
          break;
        case 'dirs':
          s += '(?:.*/)?';
          break;
      }
    }
    return s + (alt.dirOnly ? '/.*' : '(?:/.*)?');
  });
  const body = alts.length === 0 ? '(?!)' : alts.join('|');
  return new RegExp(`^(?:${body})$`, opts.nocase ? 'sui' : 'su');
}

// =====================================================================================
// Policy layers
// =====================================================================================

export const PROMOTION_MODES = ['patch', 'draft-pr-after-approval', 'draft-pr'] as const;
/** Promotion modes from strictest to loosest. */
export type PromotionMode = (typeof PROMOTION_MODES)[number];

const POLICY_FIELDS = [
  'protectedPaths',
  'allowedScope',
  'neverPromote',
  'allowLockfiles',
  'maxDiffLines',
  'maxDiffFiles',
  'maxFileBytes',
  'commands',
  'commandTimeoutSeconds',
  'maxOutputBytes',
  'promotion',
  'forbidSelfApproval',
  'approvalTimeoutMinutes',
] as const;
export type PolicyField = (typeof POLICY_FIELDS)[number];

const GlobSchema = z
  .string()
  .min(1, 'a glob is not empty')
  .max(MAX_GLOB_LENGTH, `a glob is at most ${MAX_GLOB_LENGTH} characters`)
  .superRefine((g, ctx) => {
    try {
      validateGlob(g);
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: `invalid glob ${JSON.stringify(g)}: ${(err as Error).message}` });
    }
  });
const globs = () => z.array(GlobSchema).max(500, 'at most 500 globs');
const CommandSchema = z
  .string()
  .regex(/^(\*|[A-Za-z0-9_][A-Za-z0-9._+-]{0,127})$/, 'a command is a program base name such as "git" or "npm" (no path, no arguments), or "*" for any program');
const count = (max: number) => z.number().int('expected a whole number').min(0, 'expected 0 or more').max(max, `at most ${max}`);
const positive = (max: number) => z.number().int('expected a whole number').min(1, 'expected at least 1').max(max, `at most ${max}`);

/**
 * One policy layer. Every field is optional (absent = this layer says nothing about it); unknown
 * fields are an error. `$schema` is tolerated for editor support.
 */
export const RepoPolicySchema = z.strictObject(
  {
    $schema: z.string().max(2048).optional(),
    /** Globs an agent may never change (added, modified, deleted, renamed from or to). */
    protectedPaths: globs().optional(),
    /** Globs a change must stay inside (absent: anywhere). `[]` allows nothing. */
    allowedScope: globs().optional(),
    /** Globs of files never promoted (build output, logs, dependencies, caches, ...). */
    neverPromote: globs().optional(),
    /** Whether lock files (package-lock.json, Cargo.lock, ...) may be changed. */
    allowLockfiles: z.boolean().optional(),
    /** Added plus deleted lines over the whole patch. */
    maxDiffLines: count(10_000_000).optional(),
    /** Files in the patch. */
    maxDiffFiles: count(1_000_000).optional(),
    /** Size of any one file after the change (bytes). */
    maxFileBytes: count(1_000_000_000).optional(),
    /** Program base names the sandbox may run; `"*"` = any. */
    commands: z.array(CommandSchema).max(500, 'at most 500 commands').optional(),
    commandTimeoutSeconds: positive(86_400).optional(),
    maxOutputBytes: positive(100_000_000).optional(),
    /** How a passing change leaves Steward. */
    promotion: z.enum(PROMOTION_MODES, { error: `expected one of ${PROMOTION_MODES.join(', ')}` }).optional(),
    /** The requester of a change may not approve its promotion. */
    forbidSelfApproval: z.boolean().optional(),
    approvalTimeoutMinutes: positive(43_200).optional(),
  },
  {
    error: (iss) =>
      iss.code === 'unrecognized_keys'
        ? `unknown policy field${iss.keys.length > 1 ? 's' : ''} ${iss.keys.map((k) => JSON.stringify(k)).join(', ')}; the fields are ${POLICY_FIELDS.join(', ')}`
        : undefined,
  },
);
export type RepoPolicyInput = z.infer<typeof RepoPolicySchema>;

/** The fully resolved policy the gate enforces. */
export interface EffectivePolicy {
  protectedPaths: string[];
  /** Each entry is one layer's scope; a path must match a glob in EVERY entry. `[]` = no restriction. */
  allowedScopes: string[][];
  neverPromote: string[];
  allowLockfiles: boolean;
  maxDiffLines: number;
  maxDiffFiles: number;
  maxFileBytes: number;
  /** Program base names; `['*']` = any. */
  commands: string[];
  commandTimeoutSeconds: number;
  maxOutputBytes: number;
  promotion: PromotionMode;
  forbidSelfApproval: boolean;
  approvalTimeoutMinutes: number;
  /** Which layers set each field (`default` when none did). */
  sources?: Partial<Record<PolicyField, string[]>>;
}

/** Paths no agent may change. Always part of every effective policy (a floor nobody removes). */
export const DEFAULT_PROTECTED_PATHS: readonly string[] = Object.freeze([
  '.git/**',
  '.gitmodules',
  '.github/workflows/**',
  '.github/actions/**',
  '.github/CODEOWNERS',
  '/CODEOWNERS',
  'docs/CODEOWNERS',
  '.gitlab-ci.yml',
  '.circleci/**',
  '.steward/**',
  '**/.env',
  '**/.env.*',
  '**/.npmrc',
  '**/.netrc',
  '**/.pypirc',
  '**/*.pem',
  '**/*.key',
  '**/*.p12',
  '**/*.pfx',
  '**/id_rsa*',
  '**/id_dsa*',
  '**/id_ecdsa*',
  '**/id_ed25519*',
]);

/** Runtime artifacts, logs, build output, dependencies, caches, OS junk. Always included (a floor). */
export const DEFAULT_NEVER_PROMOTE: readonly string[] = Object.freeze([
  '**/*.log',
  '**/node_modules/**',
  '**/dist/**',
  '**/build/**',
  '**/coverage/**',
  '**/.nyc_output/**',
  '**/__pycache__/**',
  '**/*.pyc',
  '**/*.pyo',
  '**/.pytest_cache/**',
  '**/.mypy_cache/**',
  '**/.ruff_cache/**',
  '**/.tox/**',
  '**/.venv/**',
  '**/.DS_Store',
  '**/Thumbs.db',
  '**/*.tmp',
  '**/*.swp',
  '**/*.swo',
  '**/*.orig',
  '**/*.rej',
  '**/.cache/**',
  '**/target/**',
  '**/.next/**',
  '**/.turbo/**',
  '**/*.tsbuildinfo',
  '**/*.sqlite',
  '**/*.sqlite3',
  '**/*.db',
  '**/.steward-run/**',
]);

/** Lock files (by base name, any directory): changed only when `allowLockfiles`. */
export const LOCKFILE_PATTERNS: readonly string[] = Object.freeze([
  'package-lock.json',
  'npm-shrinkwrap.json',
  'yarn.lock',
  'pnpm-lock.yaml',
  'bun.lock',
  'bun.lockb',
  'deno.lock',
  'Cargo.lock',
  'poetry.lock',
  'Pipfile.lock',
  'pdm.lock',
  'uv.lock',
  'Gemfile.lock',
  'go.sum',
  'composer.lock',
  'mix.lock',
  'pubspec.lock',
  'Podfile.lock',
  'packages.lock.json',
  'Package.resolved',
  'flake.lock',
  'gradle.lockfile',
]);

/**
 * Programs the sandbox runs by default: shell and text tools, git, and the common build/test
 * tool chains. No network clients (curl, wget, ssh). NOTE: allowing `sh`/`bash` means the list
 * governs the program invoked directly; the sandbox (no network, no credentials) is the boundary.
 */
export const DEFAULT_COMMANDS: readonly string[] = Object.freeze([
  'awk', 'bash', 'cargo', 'cat', 'cp', 'cut', 'diff', 'echo', 'false', 'find', 'git', 'go', 'grep',
  'head', 'jq', 'ls', 'make', 'mkdir', 'mv', 'node', 'npm', 'npx', 'pnpm', 'printf', 'pwd', 'pytest',
  'python3', 'rg', 'rm', 'sed', 'sh', 'sort', 'tail', 'test', 'touch', 'tr', 'true', 'tsc', 'uniq',
  'wc', 'xargs', 'yarn',
]);

function freezePolicy(p: EffectivePolicy): EffectivePolicy {
  Object.freeze(p.protectedPaths);
  Object.freeze(p.neverPromote);
  Object.freeze(p.commands);
  for (const s of p.allowedScopes) Object.freeze(s);
  Object.freeze(p.allowedScopes);
  return Object.freeze(p);
}

export const DEFAULT_POLICY: EffectivePolicy = freezePolicy({
  protectedPaths: [...DEFAULT_PROTECTED_PATHS],
  allowedScopes: [],
  neverPromote: [...DEFAULT_NEVER_PROMOTE],
  allowLockfiles: false,
  maxDiffLines: 2000,
  maxDiffFiles: 50,
  maxFileBytes: 1_000_000,
  commands: [...DEFAULT_COMMANDS],
  commandTimeoutSeconds: 600,
  maxOutputBytes: 200_000,
  promotion: 'patch',
  forbidSelfApproval: true,
  approvalTimeoutMinutes: 1440,
});

const sortUniq = (xs: Iterable<string>): string[] => [...new Set(xs)].sort();
const NUMBER_FIELDS = ['maxDiffLines', 'maxDiffFiles', 'maxFileBytes', 'commandTimeoutSeconds', 'maxOutputBytes', 'approvalTimeoutMinutes'] as const;

interface NamedLayer {
  name: string;
  policy: RepoPolicyInput;
}

function mergeNamed(layers: NamedLayer[]): EffectivePolicy {
  const sources: Partial<Record<PolicyField, string[]>> = {};
  const setters = <F extends PolicyField>(f: F): Array<{ name: string; value: NonNullable<RepoPolicyInput[F]> }> => {
    const out: Array<{ name: string; value: NonNullable<RepoPolicyInput[F]> }> = [];
    for (const l of layers) {
      const v = l.policy[f];
      if (v !== undefined && v !== null) out.push({ name: l.name, value: v as NonNullable<RepoPolicyInput[F]> });
    }
    sources[f] = out.length > 0 ? out.map((s) => s.name) : ['default'];
    return out;
  };

  const protectedPaths = sortUniq([...DEFAULT_PROTECTED_PATHS, ...setters('protectedPaths').flatMap((s) => s.value)]);
  const neverPromote = sortUniq([...DEFAULT_NEVER_PROMOTE, ...setters('neverPromote').flatMap((s) => s.value)]);
  const scopeKeys = new Map<string, string[]>();
  for (const s of setters('allowedScope')) {
    const set = sortUniq(s.value);
    scopeKeys.set(JSON.stringify(set), set);
  }
  const allowedScopes = [...scopeKeys.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, v]) => v);

  const nums = {} as Record<(typeof NUMBER_FIELDS)[number], number>;
  for (const f of NUMBER_FIELDS) {
    const s = setters(f);
    nums[f] = s.length > 0 ? Math.min(...s.map((x) => x.value as number)) : DEFAULT_POLICY[f];
  }

  const lock = setters('allowLockfiles');
  const allowLockfiles = lock.length > 0 ? lock.every((s) => s.value === true) : DEFAULT_POLICY.allowLockfiles;

  const cmdSetters = setters('commands');
  let commands: string[];
  if (cmdSetters.length === 0) commands = [...DEFAULT_POLICY.commands];
  else {
    const restricting = cmdSetters.filter((s) => !s.value.includes('*'));
    if (restricting.length === 0) commands = ['*'];
    else {
      let acc = new Set(restricting[0]!.value);
      for (const r of restricting.slice(1)) acc = new Set(r.value.filter((c) => acc.has(c)));
      commands = sortUniq(acc);
    }
  }

  const promo = setters('promotion');
  const promotion = promo.length > 0 ? PROMOTION_MODES[Math.min(...promo.map((p) => PROMOTION_MODES.indexOf(p.value)))]! : DEFAULT_POLICY.promotion;

  const selfApproval = setters('forbidSelfApproval');
  const forbidSelfApproval = selfApproval.length > 0 ? selfApproval.some((s) => s.value === true) : DEFAULT_POLICY.forbidSelfApproval;

  return {
    protectedPaths,
    allowedScopes,
    neverPromote,
    allowLockfiles,
    ...nums,
    commands,
    promotion,
    forbidSelfApproval,
    sources,
  };
}

/**
 * Deny-wins merge of policy layers; the order of the layers does not change the result (except
 * the layer names in `sources`):
 *  - protectedPaths, neverPromote: union (always including DEFAULT_PROTECTED_PATHS / DEFAULT_NEVER_PROMOTE);
 *  - allowedScope: every layer that sets one must allow the path (kept as `allowedScopes`);
 *  - numbers: minimum; allowLockfiles: AND; forbidSelfApproval: OR;
 *  - commands: intersection of the layers that list commands (`*` is the identity);
 *  - promotion: the strictest (patch, then draft-pr-after-approval, then draft-pr).
 * A field no layer sets takes DEFAULT_POLICY's value. So a layer CAN loosen a default that no
 * other layer sets: to cap every layer by the operator's settings (or the defaults), pass
 * `withDefaults(global)` as one of the layers, or call `resolvePolicy`.
 */
export function mergePolicies(...layers: RepoPolicyInput[]): EffectivePolicy {
  return mergeNamed(layers.map((policy, i) => ({ name: `layer ${i + 1}`, policy })));
}

/**
 * The operator's global layer made complete: every field the operator did not set takes the
 * default. As a layer of `mergePolicies`, it caps every other layer: they can only tighten it.
 * The operator (and only the operator) may loosen a default here, e.g. raise maxDiffLines.
 */
export function withDefaults(global: RepoPolicyInput = {}): RepoPolicyInput {
  return {
    protectedPaths: sortUniq([...DEFAULT_PROTECTED_PATHS, ...(global.protectedPaths ?? [])]),
    ...(global.allowedScope ? { allowedScope: [...global.allowedScope] } : {}),
    neverPromote: sortUniq([...DEFAULT_NEVER_PROMOTE, ...(global.neverPromote ?? [])]),
    allowLockfiles: global.allowLockfiles ?? DEFAULT_POLICY.allowLockfiles,
    maxDiffLines: global.maxDiffLines ?? DEFAULT_POLICY.maxDiffLines,
    maxDiffFiles: global.maxDiffFiles ?? DEFAULT_POLICY.maxDiffFiles,
    maxFileBytes: global.maxFileBytes ?? DEFAULT_POLICY.maxFileBytes,
    commands: [...(global.commands ?? DEFAULT_POLICY.commands)],
    commandTimeoutSeconds: global.commandTimeoutSeconds ?? DEFAULT_POLICY.commandTimeoutSeconds,
    maxOutputBytes: global.maxOutputBytes ?? DEFAULT_POLICY.maxOutputBytes,
    promotion: global.promotion ?? DEFAULT_POLICY.promotion,
    forbidSelfApproval: global.forbidSelfApproval ?? DEFAULT_POLICY.forbidSelfApproval,
    approvalTimeoutMinutes: global.approvalTimeoutMinutes ?? DEFAULT_POLICY.approvalTimeoutMinutes,
  };
}

/**
 * The three layers in their order of authority: the operator's global config (defaults fill
 * what it leaves unset), then the repository's registration, then the repository's own policy
 * file. The registration and the file can only tighten. `sources` names `default`, `global`,
 * `registration`, `repo`.
 */
export function resolvePolicy(layers: { global?: RepoPolicyInput; registration?: RepoPolicyInput; repo?: RepoPolicyInput }): EffectivePolicy {
  const global = layers.global ?? {};
  const full = withDefaults(global);
  // split the complete operator layer into what the operator set and what came from the defaults
  const fromDefaults: RepoPolicyInput = {};
  const fromGlobal: RepoPolicyInput = {};
  for (const f of POLICY_FIELDS) {
    const target = global[f] !== undefined ? fromGlobal : fromDefaults;
    if (full[f] !== undefined) (target as Record<string, unknown>)[f] = full[f];
  }
  return mergeNamed([
    { name: 'default', policy: fromDefaults },
    { name: 'global', policy: fromGlobal },
    { name: 'registration', policy: layers.registration ?? {} },
    { name: 'repo', policy: layers.repo ?? {} },
  ].filter((l) => Object.keys(l.policy).length > 0));
}

/** Parse one layer; the error names every problem (`<source>: field: message; ...`). */
export function parseRepoPolicy(input: unknown, source = 'policy'): { ok: true; policy: RepoPolicyInput } | { ok: false; error: string } {
  const r = RepoPolicySchema.safeParse(input);
  if (r.success) return { ok: true, policy: r.data };
  const problems = r.error.issues.map((i) => `${i.path.length > 0 ? `${i.path.map(String).join('.')}: ` : ''}${i.message}`);
  return { ok: false, error: `${source} is invalid: ${problems.join('; ')}` };
}

/** Parse the JSON text of a policy file such as `.steward/policy.json`. */
export function parseRepoPolicyJson(text: string, source = '.steward/policy.json'): { ok: true; policy: RepoPolicyInput } | { ok: false; error: string } {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    return { ok: false, error: `${source} is not valid JSON: ${(err as Error).message}` };
  }
  return parseRepoPolicy(raw, source);
}

/** May the sandbox run `program` (a base name or a path; judged by its base name)? */
export function commandAllowed(policy: Pick<EffectivePolicy, 'commands'>, program: string): boolean {
  const base = program.slice(program.lastIndexOf('/') + 1);
  if (base === '' || base === '.' || base === '..') return false;
  return policy.commands.includes('*') || policy.commands.includes(base);
}

/** Is `mode` as strict as the policy's promotion or stricter? */
export function promotionAllowed(policy: Pick<EffectivePolicy, 'promotion'>, mode: PromotionMode): boolean {
  return PROMOTION_MODES.indexOf(mode) <= PROMOTION_MODES.indexOf(policy.promotion);
}

// =====================================================================================
// Unified diff parsing
// =====================================================================================

export type DiffStatus = 'added' | 'modified' | 'deleted' | 'renamed' | 'copied' | 'mode';

export interface DiffFile {
  /** The path after the change (the removed path for a deletion). */
  path: string;
  /** Renames and copies: the source path. */
  oldPath?: string;
  status: DiffStatus;
  binary: boolean;
  additions: number;
  deletions: number;
  /** Added lines' text, without the `+` (a trailing `\r` kept). */
  addedLines: string[];
  /** The line number in the new file of each added line (parallel to addedLines). */
  addedLineNumbers: number[];
  /** UTF-8 bytes the added lines carry (with their newlines): the exact size of an added text file. */
  addedBytes: number;
  newMode?: string;
  oldMode?: string;
  isSymlink: boolean;
  /** A symlink's target after the change (its content). */
  symlinkTarget?: string;
  /** A binary file's size after the change, when git sent it as a literal. */
  binarySize?: number;
  /** `similarity index` of a rename or copy, percent. */
  similarity?: number;
}

export interface DiffParseError {
  /** 1-based line of the patch. */
  line: number;
  message: string;
}

/** The parsed files; `errors` says what could not be read (non-empty: do not trust the patch). */
export type ParsedDiff = DiffFile[] & { errors: DiffParseError[] };

function utf8Encode(s: string, out: number[]): void {
  for (const ch of s) {
    const cp = cpOf(ch);
    if (cp < 0x80) out.push(cp);
    else if (cp < 0x800) out.push(0xc0 | (cp >> 6), 0x80 | (cp & 63));
    else if (cp < 0x10000) out.push(0xe0 | (cp >> 12), 0x80 | ((cp >> 6) & 63), 0x80 | (cp & 63));
    else out.push(0xf0 | (cp >> 18), 0x80 | ((cp >> 12) & 63), 0x80 | ((cp >> 6) & 63), 0x80 | (cp & 63));
  }
}

function utf8Decode(bytes: number[]): string {
  let out = '';
  for (let i = 0; i < bytes.length; ) {
    const b = bytes[i]!;
    let need = 0;
    let cp = 0;
    let min = 0;
    if (b < 0x80) {
      out += String.fromCharCode(b);
      i++;
      continue;
    } else if (b >= 0xc2 && b <= 0xdf) [need, cp, min] = [1, b & 31, 0x80];
    else if (b >= 0xe0 && b <= 0xef) [need, cp, min] = [2, b & 15, 0x800];
    else if (b >= 0xf0 && b <= 0xf4) [need, cp, min] = [3, b & 7, 0x10000];
    else {
      out += '\ufffd';
      i++;
      continue;
    }
    let ok = i + need < bytes.length;
    let j = 1;
    for (; ok && j <= need; j++) {
      const c = bytes[i + j];
      if (c === undefined || (c & 0xc0) !== 0x80) {
        ok = false;
        break;
      }
      cp = (cp << 6) | (c & 63);
    }
    if (!ok || cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      out += '\ufffd';
      i++;
      continue;
    }
    out += String.fromCodePoint(cp);
    i += need + 1;
  }
  return out;
}

/** UTF-8 length of a string, in bytes. */
export function utf8Length(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 4;
      i++;
    } else n += 3;
  }
  return n;
}

const C_ESCAPES: Record<string, number> = { a: 7, b: 8, t: 9, n: 10, v: 11, f: 12, r: 13, '"': 34, '\\': 92 };

/** A C-style quoted name as git writes it (`"a\tb\303\251"`) starting at s[start] === '"'. */
function parseQuoted(s: string, start: number): { value: string; end: number } | undefined {
  if (s[start] !== '"') return undefined;
  const bytes: number[] = [];
  for (let i = start + 1; i < s.length; i++) {
    const c = s[i]!;
    if (c === '"') return { value: utf8Decode(bytes), end: i + 1 };
    if (c !== '\\') {
      const code = s.codePointAt(i)!;
      utf8Encode(String.fromCodePoint(code), bytes);
      if (code > 0xffff) i++;
      continue;
    }
    const e = s[i + 1];
    if (e === undefined) return undefined;
    if (e in C_ESCAPES) {
      bytes.push(C_ESCAPES[e]!);
      i++;
      continue;
    }
    if (/^[0-3][0-7][0-7]$/.test(s.slice(i + 1, i + 4))) {
      bytes.push(parseInt(s.slice(i + 1, i + 4), 8));
      i += 3;
      continue;
    }
    return undefined;
  }
  return undefined;
}

type NameResult = { ok: true; name: string } | { ok: false; message: string };

const KNOWN_PREFIXES = ['a/', 'b/', 'c/', 'i/', 'o/', 'w/'];

function stripPrefix(name: string): NameResult {
  for (const p of KNOWN_PREFIXES) if (name.startsWith(p) && name.length > p.length) return { ok: true, name: name.slice(p.length) };
  return { ok: false, message: `path ${JSON.stringify(name)} lacks the a/ or b/ prefix (generate the patch with git's default prefixes)` };
}

/** A name on a `---`/`+++` line: quoted or not, `/dev/null`, a trailing tab stripped. */
function parseSideName(raw: string): NameResult | { ok: true; name: null } {
  if (raw.startsWith('"')) {
    const q = parseQuoted(raw, 0);
    if (!q) return { ok: false, message: `bad quoted path ${JSON.stringify(raw)}` };
    const rest = raw.slice(q.end);
    if (rest !== '' && !rest.startsWith('\t')) return { ok: false, message: `unexpected text after quoted path ${JSON.stringify(raw)}` };
    if (q.value === '/dev/null') return { ok: true, name: null };
    return stripPrefix(q.value);
  }
  const tab = raw.indexOf('\t');
  const name = tab >= 0 ? raw.slice(0, tab) : raw;
  if (name === '/dev/null') return { ok: true, name: null };
  return stripPrefix(name);
}

/** A name on `rename from`/`copy to` lines: no prefix, maybe quoted. */
function parsePlainName(raw: string): NameResult {
  if (raw.startsWith('"')) {
    const q = parseQuoted(raw, 0);
    if (!q || q.end !== raw.length) return { ok: false, message: `bad quoted path ${JSON.stringify(raw)}` };
    return { ok: true, name: q.value };
  }
  if (raw === '') return { ok: false, message: 'empty path' };
  return { ok: true, name: raw };
}

/** The two names of `diff --git A B`; undefined when ambiguous (unquoted names with spaces that differ). */
function parseGitHeader(rest: string): { a: string; b: string } | { error: string } | undefined {
  let aRaw: string | undefined;
  let bRaw: string | undefined;
  if (rest.startsWith('"')) {
    const q = parseQuoted(rest, 0);
    if (!q || rest[q.end] !== ' ') return { error: 'bad quoted path in the diff --git header' };
    aRaw = q.value;
    const tail = rest.slice(q.end + 1);
    if (tail.startsWith('"')) {
      const q2 = parseQuoted(tail, 0);
      if (!q2 || q2.end !== tail.length) return { error: 'bad quoted path in the diff --git header' };
      bRaw = q2.value;
    } else bRaw = tail;
  } else if (rest.endsWith('"')) {
    for (let i = rest.indexOf(' "'); i >= 0; i = rest.indexOf(' "', i + 1)) {
      const q = parseQuoted(rest, i + 1);
      if (q && q.end === rest.length) {
        aRaw = rest.slice(0, i);
        bRaw = q.value;
        break;
      }
    }
    if (aRaw === undefined) return { error: 'bad quoted path in the diff --git header' };
  } else {
    // same name on both sides: "a/P b/P"
    if (rest.length % 2 === 1) {
      const k = (rest.length - 1) / 2;
      const x = rest.slice(0, k);
      const y = rest.slice(k + 1);
      if (rest[k] === ' ' && x.slice(2) === y.slice(2) && x.length > 2) {
        aRaw = x;
        bRaw = y;
      }
    }
    if (aRaw === undefined) {
      const i = rest.indexOf(' b/');
      if (i > 0 && rest.indexOf(' b/', i + 1) < 0) {
        aRaw = rest.slice(0, i);
        bRaw = rest.slice(i + 1);
      }
    }
    if (aRaw === undefined || bRaw === undefined) return undefined;
  }
  if (bRaw === undefined) return undefined;
  const a = stripPrefix(aRaw);
  const b = stripPrefix(bRaw);
  if (!a.ok) return { error: a.message };
  if (!b.ok) return { error: b.message };
  return { a: a.name, b: b.name };
}

const MODE_RE = /^[0-7]{6}$/;
const BASE85_LINE = /^[A-Za-z][0-9A-Za-z!#$%&()*+\-;<=>?@^_`{|}~]+$/;

/**
 * Parse `git diff --binary --full-index` output. Never throws: what could not be read is listed
 * in `errors` (and files whose path could not be determined are left out).
 */
export function parseUnifiedDiff(patch: string): ParsedDiff {
  const files: DiffFile[] = [];
  const errors: DiffParseError[] = [];
  try {
    parseInto(typeof patch === 'string' ? patch : '', files, errors);
  } catch (err) {
    errors.push({ line: 0, message: `internal parser error: ${(err as Error)?.message ?? String(err)}` });
  }
  return Object.assign(files, { errors });
}

function parseInto(patch: string, files: DiffFile[], errors: DiffParseError[]): void {
  const lines = patch.split('\n');
  if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  const n = lines.length;
  const err = (i: number, message: string): void => {
    if (errors.length < 1000) errors.push({ line: i + 1, message });
  };
  const hdr = (i: number): string => {
    const l = lines[i]!;
    return l.endsWith('\r') ? l.slice(0, -1) : l;
  };
  let i = 0;
  let preamble = false;
  while (i < n && !lines[i]!.startsWith('diff --git ')) {
    if (!preamble && lines[i]!.trim() !== '') {
      err(i, 'unexpected text before the first "diff --git" header');
      preamble = true;
    }
    i++;
  }
  while (i < n) {
    const start = i;
    const header = parseGitHeader(hdr(i).slice('diff --git '.length));
    if (header && 'error' in header) err(i, header.error);
    const names = header && !('error' in header) ? header : undefined;
    i++;
    let oldMode: string | undefined;
    let newMode: string | undefined;
    let indexMode: string | undefined;
    let isNew = false;
    let isDeleted = false;
    let renameFrom: string | undefined;
    let renameTo: string | undefined;
    let copyFrom: string | undefined;
    let copyTo: string | undefined;
    let minus: string | null | undefined;
    let plus: string | null | undefined;
    let similarity: number | undefined;
    let binary = false;
    let binarySize: number | undefined;
    let hunks = 0;
    let additions = 0;
    let deletions = 0;
    let addedBytes = 0;
    const addedLines: string[] = [];
    const addedLineNumbers: number[] = [];
    let junkReported = false;
    const junk = (at: number, message: string): void => {
      if (!junkReported) err(at, message);
      junkReported = true;
    };
    const mode = (at: number, v: string): string | undefined => {
      if (MODE_RE.test(v)) return v;
      err(at, `bad file mode ${JSON.stringify(v)}`);
      return undefined;
    };
    const plain = (at: number, raw: string): string | undefined => {
      const r = parsePlainName(raw);
      if (r.ok) return r.name;
      err(at, r.message);
      return undefined;
    };

    // extended header lines
    let section: 'header' | 'hunks' | 'done' = 'header';
    while (i < n && section === 'header') {
      const line = hdr(i);
      if (line.startsWith('diff --git ')) {
        section = 'done';
        break;
      }
      let m: RegExpExecArray | null;
      if (line.startsWith('old mode ')) oldMode = mode(i, line.slice(9));
      else if (line.startsWith('new mode ')) newMode = mode(i, line.slice(9));
      else if (line.startsWith('deleted file mode ')) {
        isDeleted = true;
        oldMode = mode(i, line.slice(18));
      } else if (line.startsWith('new file mode ')) {
        isNew = true;
        newMode = mode(i, line.slice(14));
      } else if ((m = /^(?:dis)?similarity index (\d{1,3})%$/.exec(line))) {
        if (line.startsWith('similarity')) similarity = Number(m[1]);
      } else if (line.startsWith('rename from ')) renameFrom = plain(i, line.slice(12));
      else if (line.startsWith('rename to ')) renameTo = plain(i, line.slice(10));
      else if (line.startsWith('rename old ')) renameFrom = plain(i, line.slice(11));
      else if (line.startsWith('rename new ')) renameTo = plain(i, line.slice(11));
      else if (line.startsWith('copy from ')) copyFrom = plain(i, line.slice(10));
      else if (line.startsWith('copy to ')) copyTo = plain(i, line.slice(8));
      else if ((m = /^index ([0-9a-f]{4,64})\.\.([0-9a-f]{4,64})(?: ([0-7]{6}))?$/.exec(line))) indexMode = m[3];
      else if (line === 'GIT binary patch') {
        binary = true;
        i++;
        // forward block then optional reverse block: "literal|delta N", base85 lines, blank line
        for (let block = 0; block < 2 && i < n; block++) {
          const bm = /^(literal|delta) (\d{1,12})$/.exec(hdr(i));
          if (!bm) {
            if (block === 0) err(i, 'expected "literal <size>" or "delta <size>" after "GIT binary patch"');
            break;
          }
          if (block === 0 && bm[1] === 'literal') binarySize = Number(bm[2]);
          i++;
          while (i < n && hdr(i) !== '') {
            const l = hdr(i);
            if (l.startsWith('diff --git ')) break;
            if (!BASE85_LINE.test(l) || (l.length - 1) % 5 !== 0) {
              err(i, 'malformed line in a binary patch');
              break;
            }
            i++;
          }
          if (i < n && hdr(i) === '') i++;
        }
        section = 'hunks';
        continue;
      } else if (/^Binary files .* differ$/.test(line)) {
        binary = true;
      } else if (line.startsWith('--- ')) {
        const side = parseSideName(line.slice(4));
        if (side.ok) minus = side.name;
        else err(i, side.message);
        i++;
        const next = i < n ? hdr(i) : '';
        if (!next.startsWith('+++ ')) {
          err(i, 'expected a "+++" line after the "---" line');
          section = 'hunks';
          continue;
        }
        const side2 = parseSideName(next.slice(4));
        if (side2.ok) plus = side2.name;
        else err(i, side2.message);
        i++;
        section = 'hunks';
        continue;
      } else if (line.startsWith('@@')) {
        err(i, 'a hunk without "---"/"+++" lines');
        section = 'hunks';
        continue;
      } else {
        junk(i, `unrecognized line in the header of a file: ${JSON.stringify(line.slice(0, 80))}`);
      }
      i++;
    }

    // hunks (and anything up to the next file)
    while (i < n && section === 'hunks') {
      const line = lines[i]!;
      if (line.startsWith('diff --git ')) break;
      if (line.startsWith('@@')) {
        const hm = /^@@ -(\d{1,10})(?:,(\d{1,10}))? \+(\d{1,10})(?:,(\d{1,10}))? @@/.exec(line);
        if (!hm) {
          err(i, `malformed hunk header ${JSON.stringify(line.slice(0, 80))}`);
          i++;
          continue;
        }
        hunks++;
        let oldLeft = hm[2] === undefined ? 1 : Number(hm[2]);
        let newLeft = hm[4] === undefined ? 1 : Number(hm[4]);
        let newLine = Number(hm[3]);
        let last: '+' | '-' | ' ' | undefined;
        i++;
        while (i < n && (oldLeft > 0 || newLeft > 0)) {
          const l = lines[i]!;
          const c = l === '' || l === '\r' ? ' ' : l[0];
          if (c === ' ') {
            if (oldLeft <= 0 || newLeft <= 0) break;
            oldLeft--;
            newLeft--;
            newLine++;
          } else if (c === '-') {
            if (oldLeft <= 0) break;
            oldLeft--;
            deletions++;
          } else if (c === '+') {
            if (newLeft <= 0) break;
            newLeft--;
            additions++;
            const text = l.slice(1);
            addedLines.push(text);
            addedLineNumbers.push(newLine++);
            addedBytes += utf8Length(text) + 1;
          } else if (c === '\\') {
            if (last === '+') addedBytes--;
            last = undefined;
            i++;
            continue;
          } else break;
          last = c;
          i++;
        }
        if (oldLeft > 0 || newLeft > 0) {
          err(i, `hunk ends early: ${oldLeft} old and ${newLeft} new lines missing`);
          continue;
        }
        while (i < n && lines[i]!.startsWith('\\')) {
          if (last === '+') addedBytes--;
          last = undefined;
          i++;
        }
        continue;
      }
      junk(i, `unexpected line after a hunk: ${JSON.stringify(line.slice(0, 80))}`);
      i++;
    }
    // skip anything else up to the next file (already reported)
    while (i < n && !lines[i]!.startsWith('diff --git ')) {
      junk(i, `unexpected line: ${JSON.stringify(lines[i]!.slice(0, 80))}`);
      i++;
    }

    // assemble
    if (minus === null) isNew = true;
    if (plus === null) isDeleted = true;
    const consistent = (what: string, a: string | null | undefined, b: string | undefined): void => {
      if (typeof a === 'string' && b !== undefined && a !== b) err(start, `inconsistent ${what} file names: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`);
    };
    if (names) {
      consistent('old', minus, names.a);
      consistent('new', plus, names.b);
      consistent('old', renameFrom ?? copyFrom, names.a);
      consistent('new', renameTo ?? copyTo, names.b);
    }
    consistent('old', renameFrom ?? copyFrom, typeof minus === 'string' ? minus : undefined);
    consistent('new', renameTo ?? copyTo, typeof plus === 'string' ? plus : undefined);
    if (isNew && isDeleted) err(start, 'a file cannot be both added and deleted');
    const newPath = renameTo ?? copyTo ?? (typeof plus === 'string' ? plus : undefined) ?? names?.b;
    const oldPath = renameFrom ?? copyFrom ?? (typeof minus === 'string' ? minus : undefined) ?? names?.a;
    const path = isDeleted ? oldPath : newPath;
    if (path === undefined || path === '') {
      err(start, 'could not determine the file name of this diff section');
      continue;
    }
    const status: DiffStatus = isDeleted
      ? 'deleted'
      : isNew
        ? 'added'
        : renameFrom !== undefined || renameTo !== undefined
          ? 'renamed'
          : copyFrom !== undefined || copyTo !== undefined
            ? 'copied'
            : hunks === 0 && !binary && oldMode !== undefined && newMode !== undefined && oldMode !== newMode
              ? 'mode'
              : 'modified';
    const fNew = newMode ?? (isDeleted ? undefined : indexMode);
    const fOld = oldMode ?? (isNew ? undefined : indexMode);
    const isSymlink = isDeleted ? fOld === '120000' : fNew === '120000';
    const f: DiffFile = {
      path,
      status,
      binary,
      additions,
      deletions,
      addedLines,
      addedLineNumbers,
      addedBytes: Math.max(0, addedBytes),
      isSymlink,
    };
    if ((status === 'renamed' || status === 'copied') && oldPath !== undefined) f.oldPath = oldPath;
    if (fNew !== undefined) f.newMode = fNew;
    if (fOld !== undefined) f.oldMode = fOld;
    if (isSymlink && !isDeleted && addedLines.length > 0) f.symlinkTarget = addedLines.join('\n');
    if (binarySize !== undefined) f.binarySize = binarySize;
    if (similarity !== undefined) f.similarity = similarity;
    files.push(f);
  }
}

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

// =====================================================================================
// The gate
// =====================================================================================

export type PolicyRule =
  | 'protected-path'
  | 'outside-scope'
  | 'never-promote'
  | 'lockfile'
  | 'diff-too-large'
  | 'too-many-files'
  | 'file-too-large'
  | 'secret'
  | 'symlink-escape'
  | 'empty'
  | 'unparseable';

export interface PolicyViolation {
  rule: PolicyRule;
  path?: string;
  /** A sentence for a human reading the gate verdict (the path is in `path`, not repeated). */
  detail: string;
}

export interface PatchCheck {
  ok: boolean;
  violations: PolicyViolation[];
  stats: { files: number; additions: number; deletions: number };
}

/** Violations of one rule listed in full; more are summarized in one extra entry. */
export const MAX_VIOLATIONS_PER_RULE = 50;

const q = (s: string): string => JSON.stringify(s.length > 200 ? `${s.slice(0, 200)}…` : s);

/** Why `p` is not a safe repository-relative path (undefined: it is). */
function unsafePath(p: string): string | undefined {
  if (p === '') return 'is an empty path';
  if (p.includes('\0')) return 'contains a NUL character';
  if (p.startsWith('/')) return 'is an absolute path, outside the repository';
  if (/^[A-Za-z]:[\\/]/.test(p)) return 'is an absolute (drive) path, outside the repository';
  const segs = p.split('/');
  if (segs.includes('..')) return 'contains a ".." segment and escapes the repository';
  if (segs.some((s) => s === '' || s === '.')) return 'is not a normalized path (empty or "." segment)';
  for (const s of segs) {
    const norm = s.toLowerCase().replace(/[. ]+$/, '');
    if (norm === '.git' || norm === 'git~1') return 'is inside the repository\'s .git directory';
  }
  return undefined;
}

/**
 * The path-level rules for one path: protected (case-insensitive, plus unsafe paths and any
 * `.git` component), scope, never-promote, lock files. `role`:
 *  - `new`: a path the change writes (added, modified, mode change, rename or copy destination):
 *    every rule;
 *  - `deleted`: protected, scope, lock files (deleting a stray log file is fine);
 *  - `renamed-from`: the source of a rename (it disappears): protected, scope, lock files;
 *  - `copied-from`: the source of a copy (read, not changed): protected only (copying a
 *    protected file such as `.env` would leak it).
 */
export function pathViolations(path: string, policy: EffectivePolicy, role: 'new' | 'deleted' | 'renamed-from' | 'copied-from' = 'new'): PolicyViolation[] {
  const out: PolicyViolation[] = [];
  const what = { new: 'changed', deleted: 'deleted', 'renamed-from': 'renamed', 'copied-from': 'copied' }[role];
  const note = role === 'renamed-from' ? ' (the source of a rename)' : role === 'copied-from' ? ' (the source of a copy)' : '';
  const unsafe = unsafePath(path);
  if (unsafe) {
    out.push({ rule: 'protected-path', path, detail: `${unsafe}${note}; a change can never touch such a path` });
    return out;
  }
  const prot = firstMatch(path, policy.protectedPaths, { nocase: true });
  if (prot !== undefined) {
    out.push({
      rule: 'protected-path',
      path,
      detail: `is protected (matches ${q(prot)}) and cannot be ${what} by an agent${note}; no approval overrides this`,
    });
  }
  if (role === 'copied-from') return out;
  for (const scope of policy.allowedScopes) {
    if (firstMatch(path, scope) === undefined) {
      out.push({
        rule: 'outside-scope',
        path,
        detail:
          scope.length === 0
            ? `is outside the allowed scope${note}: a policy layer allows no paths at all`
            : `is outside the allowed scope${note}; allowed: ${scope.map((g) => q(g)).join(', ')}`,
      });
    }
  }
  if (role === 'new') {
    const np = firstMatch(path, policy.neverPromote);
    if (np !== undefined) {
      out.push({
        rule: 'never-promote',
        path,
        detail: `matches the never-promote pattern ${q(np)}: logs, build output, dependencies, caches and runtime artifacts are never promoted`,
      });
    }
  }
  if (!policy.allowLockfiles) {
    const lock = firstMatch(path, LOCKFILE_PATTERNS);
    if (lock !== undefined) {
      out.push({
        rule: 'lockfile',
        path,
        detail: `is a lock file (${lock})${note}; lock file changes are not promoted unless the policy sets "allowLockfiles": true`,
      });
    }
  }
  return out;
}

/** Where a symlink at `linkPath` pointing at `target` lands, or why it escapes. */
function symlinkProblem(linkPath: string, target: string, policy: EffectivePolicy): string | undefined {
  if (target === '') return 'is a symlink with an empty target';
  if (target.includes('\n') || target.includes('\0')) return 'is a symlink with a malformed target';
  if (target.startsWith('/') || target.startsWith('~') || /^[A-Za-z]:[\\/]/.test(target) || target.startsWith('\\\\')) {
    return `is a symlink to an absolute path (${q(target)}), outside the repository`;
  }
  const stack = linkPath.split('/').slice(0, -1);
  for (const seg of target.split('/')) {
    if (seg === '' || seg === '.') continue;
    if (seg === '..') {
      if (stack.length === 0) return `is a symlink whose target ${q(target)} escapes the repository with ".."`;
      stack.pop();
    } else stack.push(seg);
  }
  const resolved = stack.join('/');
  if (resolved === '') return `is a symlink to the repository root (${q(target)})`;
  const unsafe = unsafePath(resolved);
  if (unsafe) return `is a symlink into a forbidden location (${q(target)} ${unsafe})`;
  const prot = firstMatch(resolved, policy.protectedPaths, { nocase: true });
  if (prot !== undefined) return `is a symlink to the protected path ${q(resolved)} (matches ${q(prot)})`;
  return undefined;
}

function formatBytes(n: number): string {
  if (n >= 1_000_000) return `${(n / 1_000_000).toFixed(1)} MB (${n} bytes)`;
  if (n >= 1000) return `${(n / 1000).toFixed(1)} kB (${n} bytes)`;
  return `${n} bytes`;
}

/**
 * Enforce `policy` on a parsed patch. `files` may carry `errors` (from parseUnifiedDiff) or they
 * can be passed as `parseErrors`; any is an `unparseable` violation. `fileSizes` (path: bytes
 * after the change, measured by the caller on the patched tree) makes the size check exact;
 * without it the gate knows added files' sizes, literal binaries, and the bytes a patch adds.
 * Binary contents cannot be scanned for secrets.
 */
export function checkPatchPolicy(
  files: readonly DiffFile[],
  policy: EffectivePolicy,
  opts: { secretValues?: readonly string[]; fileSizes?: Readonly<Record<string, number>>; parseErrors?: readonly DiffParseError[] } = {},
): PatchCheck {
  const violations: PolicyViolation[] = [];
  const parseErrors = opts.parseErrors ?? (files as Partial<ParsedDiff>).errors ?? [];
  let additions = 0;
  let deletions = 0;
  for (const f of files) {
    additions += f.additions;
    deletions += f.deletions;
  }
  const stats = { files: files.length, additions, deletions };

  for (const e of parseErrors) {
    violations.push({ rule: 'unparseable', detail: `the patch could not be read at line ${e.line}: ${e.message}; a patch the gate cannot fully read is never promoted` });
  }
  if (files.length === 0) {
    violations.push({ rule: 'empty', detail: 'the patch contains no file changes; there is nothing to promote' });
  }
  if (files.length > policy.maxDiffFiles) {
    violations.push({ rule: 'too-many-files', detail: `the patch touches ${files.length} files; the limit is ${policy.maxDiffFiles} (maxDiffFiles)` });
  }
  if (additions + deletions > policy.maxDiffLines) {
    violations.push({
      rule: 'diff-too-large',
      detail: `the patch changes ${additions + deletions} lines (${additions} added, ${deletions} deleted); the limit is ${policy.maxDiffLines} (maxDiffLines)`,
    });
  }

  const secretValues = opts.secretValues ?? [];
  for (const f of files) {
    const deleted = f.status === 'deleted';
    violations.push(...pathViolations(f.path, policy, deleted ? 'deleted' : 'new'));
    if (f.oldPath !== undefined && f.oldPath !== f.path) violations.push(...pathViolations(f.oldPath, policy, f.status === 'copied' ? 'copied-from' : 'renamed-from'));
    if (deleted) continue;

    // size
    const measured = opts.fileSizes?.[f.path];
    const known = measured ?? (f.binary ? f.binarySize : f.status === 'added' ? f.addedBytes : undefined);
    if (known !== undefined && known > policy.maxFileBytes) {
      violations.push({ rule: 'file-too-large', path: f.path, detail: `is ${formatBytes(known)} after the change; the limit is ${policy.maxFileBytes} bytes (maxFileBytes)` });
    } else if (known === undefined && f.addedBytes > policy.maxFileBytes) {
      violations.push({ rule: 'file-too-large', path: f.path, detail: `gains ${formatBytes(f.addedBytes)} in this change alone; the limit for a file is ${policy.maxFileBytes} bytes (maxFileBytes)` });
    }

    // symlinks
    if (f.isSymlink) {
      if (f.binary) violations.push({ rule: 'symlink-escape', path: f.path, detail: 'is a symlink sent as binary data; its target cannot be checked' });
      else if (f.symlinkTarget !== undefined) {
        const problem = symlinkProblem(f.path, f.symlinkTarget, policy);
        if (problem) violations.push({ rule: 'symlink-escape', path: f.path, detail: `${problem}; symlinks must point inside the repository` });
      }
    }

    // secrets in the content and in the name
    for (const s of detectSecrets(f.addedLines, { extraValues: secretValues })) {
      violations.push({
        rule: 'secret',
        path: f.path,
        detail: `line ${f.addedLineNumbers[s.line] ?? s.line + 1} adds what looks like ${s.description} (${s.preview}); secrets must never be promoted`,
      });
    }
    for (const s of detectSecrets([f.path], { extraValues: secretValues })) {
      violations.push({ rule: 'secret', detail: `a file name (not shown) contains what looks like ${s.description} (${s.preview}); secrets must never be promoted` });
    }
  }

  // bound the list: per rule, the first MAX_VIOLATIONS_PER_RULE and a summary
  const perRule = new Map<PolicyRule, number>();
  const bounded: PolicyViolation[] = [];
  for (const v of violations) {
    const c = (perRule.get(v.rule) ?? 0) + 1;
    perRule.set(v.rule, c);
    if (c <= MAX_VIOLATIONS_PER_RULE) bounded.push(v);
  }
  for (const [rule, c] of perRule) {
    if (c > MAX_VIOLATIONS_PER_RULE) bounded.push({ rule, detail: `and ${c - MAX_VIOLATIONS_PER_RULE} more ${rule} violations not listed` });
  }
  return { ok: bounded.length === 0, violations: bounded, stats };
}

/** Parse a patch and check it in one step (parse errors included). */
export function checkPatch(
  patch: string,
  policy: EffectivePolicy,
  opts: { secretValues?: readonly string[]; fileSizes?: Readonly<Record<string, number>> } = {},
): PatchCheck & { files: DiffFile[] } {
  const files = parseUnifiedDiff(patch);
  return { ...checkPatchPolicy(files, policy, { ...opts, parseErrors: files.errors }), files: [...files] };
}

/**
 * The policy a repository change is held to. The operator's layers are the global file
 * (`STEWARD_REPO_POLICY`) and the repository's registration (both written by the operator):
 * merged deny-wins, the defaults filling what neither sets, so a registration may set what the
 * global file leaves open but never loosen what it sets. The repository's own
 * `.steward/policy.json` (written by whoever commits to the repository) is merged against
 * that result made complete, so it can only tighten.
 */
export function changePolicy(layers: { global?: RepoPolicyInput; registration?: RepoPolicyInput; repo?: RepoPolicyInput }): EffectivePolicy {
  const operator = mergeNamed([
    { name: 'global', policy: layers.global ?? {} },
    { name: 'registration', policy: layers.registration ?? {} },
  ]);
  if (!layers.repo || Object.keys(layers.repo).length === 0) return operator;
  const ceiling: RepoPolicyInput = {
    protectedPaths: operator.protectedPaths,
    neverPromote: operator.neverPromote,
    allowLockfiles: operator.allowLockfiles,
    maxDiffLines: operator.maxDiffLines,
    maxDiffFiles: operator.maxDiffFiles,
    maxFileBytes: operator.maxFileBytes,
    commands: operator.commands,
    commandTimeoutSeconds: operator.commandTimeoutSeconds,
    maxOutputBytes: operator.maxOutputBytes,
    promotion: operator.promotion,
    forbidSelfApproval: operator.forbidSelfApproval,
    approvalTimeoutMinutes: operator.approvalTimeoutMinutes,
  };
  return mergeNamed([
    { name: 'operator', policy: ceiling },
    ...operator.allowedScopes.map((scope, i) => ({ name: `operator scope ${i + 1}`, policy: { allowedScope: scope } })),
    { name: 'repo', policy: layers.repo },
  ]);
}
