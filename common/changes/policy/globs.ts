/**
 * Repository change policy, part 1: globs (gitignore-like; the semantics are below), matched by
 * minimatch 11 with each rule mapped onto it explicitly (the mapping and the measurements that
 * chose it follow the semantics).
 */
import { braceExpand, Minimatch, type MinimatchOptions } from 'minimatch';

// =====================================================================================
// Globs
// =====================================================================================
//
// Semantics (gitignore-like, matched against a repository-relative path such as `src/a/b.ts`):
//  - `*` matches any run of characters except `/` (dot files included); `?` one character except
//    `/`; `[abc]`, `[a-z]`, `[!a-z]` / `[^a-z]` and POSIX classes like `[[:digit:]]` one character
//    (never `/`; POSIX classes are Unicode-aware: `[[:alpha:]]` matches `é`); an unclosed `[` is
//    a literal, and so is `[` when a `/` comes before its `]`; `\x` is a literal `x` (a `/` always
//    separates segments, even after `\`).
//  - `**` as a whole path segment: `**/x` = `x` in any directory (zero or more), `a/**/b` = zero
//    or more directories between, `a/**` = everything inside `a`. `**` inside a segment (`a**b`)
//    is the same as `*`.
//  - `{a,b,c}` alternation, nested allowed (`{src,test}/**/*.{ts,tsx}`), and bash sequences
//    (`{1..3}`, `{a..c}`); a brace group without a top-level comma or sequence is literal
//    (`{a}`), and so is `${a,b}`. At most MAX_GLOB_ALTERNATIVES alternatives after expansion.
//  - A leading `/` anchors at the repository root. A pattern with a `/` elsewhere (not only at the
//    end) is also anchored at the root. A pattern with no `/` (after brace expansion; each
//    alternative decides for itself) matches the base name at any depth: `*.log` matches
//    `a/b/c.log`, `node_modules` matches `x/node_modules/y`.
//  - A pattern that matches a directory matches everything below it: `src` (or `/src`, `docs/api`)
//    matches `src/a/b.ts`. A trailing `/` matches directories only: `build/` matches `build/x` and
//    `a/build/x` but not a file named `build`.
//  - Case-sensitive unless `nocase` (protected paths are matched case-insensitively, so
//    `.GitHub/Workflows/x.yml` cannot slip past `.github/workflows/**` on a case-insensitive checkout).
//  - An empty pattern (or only slashes) matches nothing. No extglobs (`@(a|b)` is literal), no
//    negation (`!x` is literal), no comments (`#x` is literal).
//  - Paths are repository-relative and normalized, as git writes them: a path that is empty,
//    starts or ends with `/`, or has an empty, `.` or `..` segment matches no glob (the gate
//    refuses such paths before it looks at globs).
//
// Why minimatch 11: the policy's globs come partly from the repository under change
// (`.steward/policy.json`), and matchers that compile globs to regular expressions can backtrack
// without bound. On `*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b` against 5,000 `a`s (and on
// `{*a*a*a*b,*a*a*a*c,*a*a*a*d,*a*a*a*e}`), picomatch 4.0.7 and minimatch 10.2.2 did not finish
// in 30 s (November 2026). minimatch 11 matches each path segment with a Thompson-NFA matcher
// (@isaacs/nonrecursive-glob-match), never a RegExp, and memoizes its `**` walks. Measured on
// the adversarial globs of test/unit/repo-policy.test.ts (which allows 500 ms for the two calls):
// first call, compile included, case-sensitive and nocase together as the test makes them,
// median of 7 runs in separate processes (Node 22.23.3, 2 cores shared at a load of about 11,
// November 2026); the hand-written state-set matcher this module had before issue 13, then
// minimatch 11.0.9 as mapped here:
//   `*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b`, 5,000 `a`s          36 ms    2.8 ms
//   `**/**/**/**/**/**/**/**/**/**/x`, `a/` x 2,500                   30 ms    1.7 ms
//   `**/*a*a*a*a*a*a*a*a*/**/y`, `aa/` x 1,500 + `z`                 1.1 ms    2.7 ms
//   `{*a*a*a*b,*a*a*a*c,*a*a*a*d,*a*a*a*e}`, 5,000 `a`s              6.4 ms    1.5 ms
//   `?` x 500, 5,000 `a`s                                             13 ms    1.4 ms
// The test's random part (2,000 runs, seed 42: globs of up to 40 atoms on paths of 500 to 3,000
// characters) took 0.6 to 0.8 s in all with either; the slowest single run was under 200 ms with
// either, and the slow ones were noise (they took well under 10 ms when repeated). The worst
// glob found by hand, `{**/a,**/b}/` x 8 + `x` (256 alternatives of 8 `**` each) against
// `a/` x 2,500 + `c`, took 35 to 90 ms per call with minimatch, 120 to 190 ms before.
//
// How each rule is mapped (compileGlob):
//  - braces: expanded here with minimatch's `braceExpand` (bash rules, from the brace-expansion
//    package), so the alternatives are counted and bounded (MAX_GLOB_ALTERNATIVES); minimatch
//    then runs with `nobrace`.
//  - each alternative is split on `/` here: a leading `/` anchors, a trailing `/` means
//    directories only, a `/` elsewhere anchors; an alternative with no `/` gets a `**/` prefix
//    (any depth).
//  - "a pattern that matches a directory matches everything below it": each alternative is
//    tested as itself and with `/**` appended (a trailing `**` needs at least one segment in
//    minimatch); a directories-only alternative only with `/**`. An alternative that ends in
//    `**` ends in `**/*` for minimatch (the same paths: one or more segments), because minimatch
//    merges adjacent `**` and `a/**/**` would lose the "below" (`**/` must not match `a`).
//  - options: `dot` (`*`, `?`, `**` match dot files), `noext` (`@(a|b)` is literal), `nonegate`
//    and `nocomment` (a leading `!` or `#` is literal), `optimizationLevel: 0` (`a/../b` is not
//    rewritten to `b`), `platform: 'linux'` (`\` escapes on every host), `nocase` on request,
//    and `maxGlobstarRecursion` above anything MAX_GLOB_LENGTH allows (past minimatch's default
//    of 200 `**` sections it answers "no match": a protected path must not slip through so).
//  - unnormalized paths are refused here, before minimatch (it would collapse `a//b` and give
//    `.` and `..` their meaning).

/** Brace expansion is bounded: a glob with more alternatives than this is rejected. */
export const MAX_GLOB_ALTERNATIVES = 256;
/** Longest glob accepted (characters). */
export const MAX_GLOB_LENGTH = 1024;

export class GlobError extends Error {
  override name = 'GlobError';
}

/** One brace-expanded alternative, split into its segments. */
export interface GlobAlt {
  /** The non-empty segments (minimatch's syntax each; `**` is a globstar). */
  segments: string[];
  /** Matched from the repository root (otherwise at any depth). */
  anchored: boolean;
  /** A trailing `/`: matches only what is below a directory it matches. */
  dirOnly: boolean;
}

interface CompiledGlob {
  alts: GlobAlt[];
  /** Every pattern the alternatives map to, for minimatch (a path matches if any does). */
  matchers: Minimatch[];
}

const MM_OPTIONS: MinimatchOptions = {
  dot: true,
  nobrace: true,
  noext: true,
  nonegate: true,
  nocomment: true,
  optimizationLevel: 0,
  platform: 'linux',
  // every `**` of the longest glob, so the limit never turns a match into "no match"
  maxGlobstarRecursion: MAX_GLOB_LENGTH,
};

const tooMany = (): GlobError => new GlobError(`too many alternatives (more than ${MAX_GLOB_ALTERNATIVES}) after expanding braces`);

/** The brace expansion of `glob`, bounded (brace-expansion stops at `max` results). */
function expandBraces(glob: string): string[] {
  const alts = braceExpand(glob, { braceExpandMax: MAX_GLOB_ALTERNATIVES + 1 });
  if (alts.length > MAX_GLOB_ALTERNATIVES) throw tooMany();
  return alts;
}

/** Split one alternative on `/`: anchoring, directories only, the segments (undefined: matches nothing). */
function splitAlternative(alt: string): GlobAlt | undefined {
  const parts = alt.split('/');
  const segments = parts.filter((s) => s !== '');
  if (segments.length === 0) return undefined;
  return { segments, anchored: parts[0] === '' || segments.length > 1, dirOnly: parts[parts.length - 1] === '' };
}

const globCache = new Map<string, CompiledGlob>();

function compileGlob(glob: string, nocase: boolean): CompiledGlob {
  const key = `${nocase ? 'i' : 's'}${glob}`;
  const hit = globCache.get(key);
  if (hit) return hit;
  if (glob.length > MAX_GLOB_LENGTH) throw new GlobError(`a glob is at most ${MAX_GLOB_LENGTH} characters`);
  const alts: GlobAlt[] = [];
  const patterns = new Set<string>();
  for (const a of expandBraces(glob)) {
    const alt = splitAlternative(a);
    if (!alt) continue;
    alts.push(alt);
    // a final `**` is one or more segments: `**/*` (minimatch would merge it with an appended `/**`)
    const segs = alt.segments[alt.segments.length - 1] === '**' ? [...alt.segments, '*'] : alt.segments;
    const p = `${alt.anchored ? '' : '**/'}${segs.join('/')}`;
    if (!alt.dirOnly) patterns.add(p);
    patterns.add(`${p}/**`);
  }
  const options = { ...MM_OPTIONS, nocase };
  const compiled: CompiledGlob = { alts, matchers: [...patterns].map((p) => new Minimatch(p, options)) };
  if (globCache.size >= 4096) globCache.clear();
  globCache.set(key, compiled);
  return compiled;
}

/** The glob's alternatives after brace expansion, split into segments (GlobError as validateGlob). */
export function globAlternatives(glob: string): ReadonlyArray<Readonly<GlobAlt>> {
  return compileGlob(glob, false).alts;
}

/** Throws GlobError when the glob is too long or expands to too many alternatives. */
export function validateGlob(glob: string): void {
  compileGlob(glob, false);
}

/** A normalized repository-relative path: not empty, no leading or trailing `/`, no empty, `.` or `..` segment. */
function isRepoPath(path: string): boolean {
  if (path === '') return false;
  for (const s of path.split('/')) if (s === '' || s === '.' || s === '..') return false;
  return true;
}

/**
 * Does the repository-relative `path` match `glob` (semantics above)? Polynomial in the path and
 * the pattern (minimatch 11). Throws GlobError only for globs `validateGlob` rejects.
 */
export function matchesGlob(path: string, glob: string, opts: { nocase?: boolean } = {}): boolean {
  const compiled = compileGlob(glob, opts.nocase === true);
  if (compiled.matchers.length === 0 || !isRepoPath(path)) return false;
  return compiled.matchers.some((m) => m.match(path));
}

/** First glob of `globs` that `path` matches. */
export function firstMatch(path: string, globs: readonly string[], opts: { nocase?: boolean } = {}): string | undefined {
  for (const g of globs) if (matchesGlob(path, g, opts)) return g;
  return undefined;
}
