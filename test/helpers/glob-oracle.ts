/**
 * A test oracle for the repository policy's globs: the documented semantics
 * (common/changes/policy/globs.ts) rendered as a RegExp, each segment read as minimatch 11
 * (@isaacs/nonrecursive-glob-match, with `noext`) reads it. The product matches with minimatch;
 * this second, independent reading is what test/unit/repo-policy.test.ts compares it with.
 */
import { globAlternatives } from '../../common/changes/policy/globs.js';

function reChar(c: string): string {
  return /^[A-Za-z0-9]$/.test(c) ? c : `\\u{${(c.codePointAt(0) ?? 0).toString(16)}}`;
}

/** POSIX classes as @isaacs/nonrecursive-glob-match 1.1 translates them: [body, negated]. */
const POSIX_CLASSES: ReadonlyArray<[string, string, boolean]> = [
  ['[:alnum:]', '\\p{L}\\p{Nl}\\p{Nd}', false],
  ['[:alpha:]', '\\p{L}\\p{Nl}', false],
  ['[:ascii:]', '\\x00-\\x7f', false],
  ['[:blank:]', '\\p{Zs}\\t', false],
  ['[:cntrl:]', '\\p{Cc}', false],
  ['[:digit:]', '\\p{Nd}', false],
  ['[:graph:]', '\\p{Z}\\p{C}', true],
  ['[:lower:]', '\\p{Ll}', false],
  ['[:print:]', '\\p{C}', true],
  ['[:punct:]', '\\p{P}\\p{S}', false],
  ['[:space:]', '\\p{Z}\\t\\r\\n\\v\\f', false],
  ['[:upper:]', '\\p{Lu}', false],
  ['[:word:]', '\\p{L}\\p{Nl}\\p{Nd}\\p{Pc}', false],
  ['[:xdigit:]', 'A-Fa-f0-9', false],
];

const classEscape = (s: string): string => s.replace(/[[\]\\-]/g, '\\$&');

/**
 * The `[...]` class at seg[pos] as a RegExp source and the characters it takes: undefined when
 * it is not closed (the `[` is a literal); a class that can match nothing takes the rest of
 * the segment (the segment then matches nothing), as in nonrecursive-glob-match's parseClass.
 */
function classSource(seg: string, pos: number): { source: string; end: number } | undefined {
  const ranges: string[] = [];
  const negs: string[] = [];
  const never = { source: '(?!)', end: seg.length };
  let i = pos + 1;
  let sawStart = false;
  let escaping = false;
  let negate = false;
  let rangeStart = '';
  let end = -1;
  outer: while (i < seg.length) {
    const c = String.fromCodePoint(seg.codePointAt(i)!);
    if ((c === '!' || c === '^') && i === pos + 1) {
      negate = true;
      i++;
      continue;
    }
    if (c === ']' && sawStart && !escaping) {
      end = i + 1;
      break;
    }
    sawStart = true;
    if (c === '\\' && !escaping) {
      escaping = true;
      i++;
      continue;
    }
    if (c === '[' && !escaping) {
      for (const [name, body, neg] of POSIX_CLASSES) {
        if (!seg.startsWith(name, i)) continue;
        if (rangeStart) return never;
        (neg ? negs : ranges).push(body);
        i += name.length;
        continue outer;
      }
    }
    escaping = false;
    if (rangeStart) {
      const cp = c.codePointAt(0)!;
      const lo = rangeStart.codePointAt(0)!;
      if (cp > lo) ranges.push(`${classEscape(rangeStart)}-${classEscape(c)}`);
      else if (cp === lo) ranges.push(classEscape(c));
      rangeStart = '';
    } else if (seg.startsWith('-]', i + c.length)) {
      ranges.push(classEscape(`${c}-`));
      i++;
    } else if (seg.startsWith('-', i + c.length)) {
      rangeStart = c;
      i++;
    } else ranges.push(classEscape(c));
    i += c.length;
  }
  if (end < 0) return undefined;
  if (ranges.length === 0 && negs.length === 0) return never;
  const sRanges = `[${negate ? '^' : ''}${ranges.join('')}]`;
  const sNegs = `[${negate ? '' : '^'}${negs.join('')}]`;
  const cls = ranges.length && negs.length ? `(?:${sRanges}|${sNegs})` : ranges.length ? sRanges : sNegs;
  return { source: `(?!/)${cls}`, end };
}

/** One segment (not `**`) as a RegExp source. */
function segmentSource(seg: string): string {
  let s = '';
  for (let i = 0; i < seg.length; ) {
    const c = String.fromCodePoint(seg.codePointAt(i)!);
    if (c === '\\') {
      // a trailing `\` is a literal `\`
      const next = seg.codePointAt(i + 1);
      const lit = next === undefined ? c : String.fromCodePoint(next);
      s += reChar(lit);
      i += 1 + lit.length;
      continue;
    }
    if (c === '[') {
      const cls = classSource(seg, i);
      if (cls) {
        s += cls.source;
        i = cls.end;
        continue;
      }
    }
    if (c === '*') {
      if (!s.endsWith('[^/]*')) s += '[^/]*';
    } else s += c === '?' ? '[^/]' : reChar(c);
    i += c.length;
  }
  return s;
}

/** A path that isn't a normalized repository path matches nothing (see isRepoPath). */
const REPO_PATH = '(?=.)(?!/|.*//|.*/$|(?:.*/)?\\.\\.?(?:/|$))';

/**
 * The same semantics as a RegExp (flags `su`, plus `i` for nocase): an independent rendering of
 * the glob mapping (brace expansion and splitting shared, each segment read here), the oracle
 * the property tests hold `matchesGlob` against. A backtracking RegExp can be slow on
 * adversarial input: test code only.
 */
export function globToRegExp(glob: string, opts: { nocase?: boolean } = {}): RegExp {
  const alts = globAlternatives(glob).map((alt) => {
    let s = alt.anchored ? '' : '(?:.*/)?';
    alt.segments.forEach((seg, idx) => {
      const last = idx === alt.segments.length - 1;
      if (seg === '**') s += last ? '.*' : '(?:.*/)?';
      else s += segmentSource(seg) + (last ? '' : '/');
    });
    return s + (alt.dirOnly ? '/.*' : '(?:/.*)?');
  });
  const body = alts.length === 0 ? '(?!)' : alts.join('|');
  return new RegExp(`^${REPO_PATH}(?:${body})$`, opts.nocase ? 'sui' : 'su');
}
