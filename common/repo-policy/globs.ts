/**
 * Repository change policy, part 1: globs (gitignore-like; the semantics are below), matched by
 * a state-set simulation, so matching is O(path length x pattern length), never exponential.
 *
 * Hand-written for a measured reason: the policy's globs come partly from the repository under
 * change (`.steward/policy.json`), and regular-expression matchers can backtrack without bound.
 * On `*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b` against 5,000 `a`s (and on
 * `{*a*a*a*b,*a*a*a*c,*a*a*a*d,*a*a*a*e}`), picomatch 4.0.7 and minimatch 10.2.2 did not finish
 * in 30 s (November 2026); this matcher answers in milliseconds (the adversarial tests in
 * test/unit/repo-policy.test.ts hold it under 500 ms). minimatch 11.0.9 answered all of that
 * suite's adversarial globs in 2 ms or less: it is the candidate to replace this matcher, once
 * the gitignore-like rules below (base-name patterns, directory prefixes, trailing slash) are
 * mapped onto it and the semantics table passes.
 */

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
