/**
 * Repository change policy, part 3: `parseUnifiedDiff`, `git diff --binary --full-index` output
 * into per-file records; never throws (what it cannot read is in `errors`).
 *
 * The hunks are read by jsdiff (`parsePatch` of the `diff` package, 9.0.0), one hunk at a time.
 * What is left here is a pre-pass for what jsdiff does not read, or reads too leniently for a
 * gate that must refuse a patch it cannot fully read:
 *  - the file sections and git's extended headers: jsdiff skips `index` lines (the only place
 *    the mode of a changed symlink or executable is), `similarity index`, `dissimilarity index`
 *    and the old `rename old`/`rename new`; it treats `GIT binary patch` blocks as unknown header
 *    lines (no literal size, no check of the base85 lines); it accepts any digits as a mode;
 *  - the names: jsdiff keeps one old and one new name, each later header silently replacing
 *    the one before (`diff --git`, then `rename to`/`copy to`, then `+++`), splits an ambiguous
 *    `diff --git` line arbitrarily (its own word), keeps a badly quoted name as written, trims
 *    `---`/`+++` names and does not check the `a/`/`b/` prefixes; here every source is read on
 *    its own (C-quoted names as UTF-8 bytes) and a patch whose names disagree is refused;
 *  - text jsdiff tolerates as GNU patch does: before the first file, in a file's header, and
 *    between or after hunks; here each is an error (it could smuggle a change past the gate);
 *  - hunk headers: checked here (jsdiff takes any line starting with `@@ ` for one and reads
 *    the numbers it cannot find as NaN); then the hunk is handed to jsdiff up to the next line
 *    that starts with `@` (no hunk line does), so a malformed hunk costs only itself (jsdiff
 *    throws at the first one; that hunk's counts are lost, the rest of the patch is read). A
 *    line that is only `\r` (a blank context line that lost its space, in a CRLF patch) is
 *    handed over as an empty line, which jsdiff reads as a context line.
 *
 * git's own reading of the headers (`git apply --numstat --summary -z`, run by the caller:
 * domain/git.ts `readPatch`) is read here by a zod-checked parser (`parseGitPatchHeaders`) and
 * held against these records (`compareWithGit`): a disagreement is a parse error. The sections
 * are still read here because git's summary does not give what the gate needs from them: the
 * mode of a modified file (a retargeted symlink), a rename's source name (folded into braces),
 * the added lines.
 */
import { parsePatch, type StructuredPatchHunk } from 'diff';
import { z } from 'zod';

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

const utf8 = new TextEncoder();
/** Invalid sequences become U+FFFD (a name git escaped from non-UTF-8 bytes stays visibly odd). */
const utf8Decoder = new TextDecoder('utf-8');

/** UTF-8 length of a string, in bytes. */
export function utf8Length(s: string): number {
  return utf8.encode(s).length;
}

const C_ESCAPES: Record<string, number> = { a: 7, b: 8, t: 9, n: 10, v: 11, f: 12, r: 13, '"': 34, '\\': 92 };

/** A C-style quoted name as git writes it (`"a\tb\303\251"`) starting at s[start] === '"'. */
export function parseQuoted(s: string, start: number): { value: string; end: number } | undefined {
  if (s[start] !== '"') return undefined;
  const bytes: number[] = [];
  for (let i = start + 1; i < s.length; i++) {
    const c = s[i]!;
    if (c === '"') return { value: utf8Decoder.decode(Uint8Array.from(bytes)), end: i + 1 };
    if (c !== '\\') {
      const code = s.codePointAt(i)!;
      for (const b of utf8.encode(String.fromCodePoint(code))) bytes.push(b);
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
const HUNK_HEADER = /^@@ -\d{1,10}(?:,\d{1,10})? \+\d{1,10}(?:,\d{1,10})? @@/;
const MAX_ERRORS = 1000;

/** What one file's section of the patch says, gathered line by line. */
interface Section {
  /** The line of its `diff --git` header. */
  start: number;
  names?: { a: string; b: string };
  oldMode?: string;
  newMode?: string;
  /** The mode on the `index` line (a change that keeps the mode). */
  indexMode?: string;
  isNew: boolean;
  isDeleted: boolean;
  renameFrom?: string;
  renameTo?: string;
  copyFrom?: string;
  copyTo?: string;
  /** The `---` / `+++` names (null: /dev/null). */
  minus?: string | null;
  plus?: string | null;
  similarity?: number;
  binary: boolean;
  binarySize?: number;
  hunks: number;
  additions: number;
  deletions: number;
  addedBytes: number;
  addedLines: string[];
  addedLineNumbers: number[];
  /** One "unexpected line" error per file is enough. */
  junkReported: boolean;
}

/** Why jsdiff refused a hunk, in the gate's words. */
function hunkError(err: unknown): { junk: boolean; message: string } {
  const m = err instanceof Error ? err.message : String(err);
  const invalid = /contained invalid line (.*)$/s.exec(m);
  if (invalid) {
    const line = invalid[1] ?? '';
    // the region handed to jsdiff ends with an empty line of its own: reaching it = running out
    return { junk: false, message: line === '' ? 'hunk ends early: fewer lines than its header announces' : `hunk ends early: ${JSON.stringify(line.slice(0, 80))} is not a hunk line` };
  }
  if (/line count did not match/.test(m)) return { junk: false, message: 'hunk ends early: its lines do not add up to the counts in its header' };
  if (/more lines than expected|Missing "/.test(m)) return { junk: true, message: 'unexpected line after a hunk: it has more lines than its header announces' };
  return { junk: false, message: `unreadable hunk: ${m.slice(0, 200)}` };
}

/**
 * Reads `git diff --binary --full-index` output: the sections and git's extended headers here,
 * each hunk by jsdiff's parsePatch (module comment).
 */
class DiffReader {
  private readonly lines: string[];

  constructor(
    patch: string,
    private readonly files: DiffFile[],
    private readonly errors: DiffParseError[],
  ) {
    this.lines = patch.split('\n');
    if (this.lines.length > 0 && this.lines[this.lines.length - 1] === '') this.lines.pop();
  }

  read(): void {
    const { lines } = this;
    let i = 0;
    while (i < lines.length && !lines[i]!.startsWith('diff --git ')) {
      if (lines[i]!.trim() !== '') {
        this.err(i, 'unexpected text before the first "diff --git" header');
        while (i < lines.length && !lines[i]!.startsWith('diff --git ')) i++;
        break;
      }
      i++;
    }
    while (i < lines.length) {
      let end = i + 1;
      while (end < lines.length && !lines[end]!.startsWith('diff --git ')) end++;
      this.readSection(i, end);
      i = end;
    }
  }

  private err(i: number, message: string): void {
    if (this.errors.length < MAX_ERRORS) this.errors.push({ line: i + 1, message });
  }

  private junk(sec: Section, i: number, message: string): void {
    if (!sec.junkReported) this.err(i, message);
    sec.junkReported = true;
  }

  /** A header line, without the `\r` of a CRLF patch. */
  private hdr(i: number): string {
    const l = this.lines[i]!;
    return l.endsWith('\r') ? l.slice(0, -1) : l;
  }

  /** One file: `diff --git` at `start`, the next file (or the end) at `end`. */
  private readSection(start: number, end: number): void {
    const sec: Section = { start, isNew: false, isDeleted: false, binary: false, hunks: 0, additions: 0, deletions: 0, addedBytes: 0, addedLines: [], addedLineNumbers: [], junkReported: false };
    const header = parseGitHeader(this.hdr(start).slice('diff --git '.length));
    if (header && 'error' in header) this.err(start, header.error);
    else if (header) sec.names = header;
    let i = this.readHeader(sec, start + 1, end);
    // the hunks, and anything else up to the next file (reported)
    while (i < end) {
      const line = this.lines[i]!;
      if (!line.startsWith('@@')) {
        this.junk(sec, i, `unexpected line after a hunk: ${JSON.stringify(line.slice(0, 80))}`);
        i++;
      } else if (!HUNK_HEADER.test(line)) {
        this.err(i, `malformed hunk header ${JSON.stringify(line.slice(0, 80))}`);
        i++;
      } else {
        // a hunk's lines start with ` `, `+`, `-` or `\`: it ends before the next `@` line at the latest
        let next = i + 1;
        while (next < end && !this.lines[next]!.startsWith('@')) next++;
        this.readHunk(sec, i, next);
        i = next;
      }
    }
    this.assemble(sec);
  }

  /** git's extended header lines and `---`/`+++`; returns where the hunks start. */
  private readHeader(sec: Section, from: number, end: number): number {
    const mode = (at: number, v: string): string | undefined => {
      if (MODE_RE.test(v)) return v;
      this.err(at, `bad file mode ${JSON.stringify(v)}`);
      return undefined;
    };
    const plain = (at: number, raw: string): string | undefined => {
      const r = parsePlainName(raw);
      if (r.ok) return r.name;
      this.err(at, r.message);
      return undefined;
    };
    for (let i = from; i < end; i++) {
      const line = this.hdr(i);
      let m: RegExpExecArray | null;
      if (line.startsWith('old mode ')) sec.oldMode = mode(i, line.slice(9));
      else if (line.startsWith('new mode ')) sec.newMode = mode(i, line.slice(9));
      else if (line.startsWith('deleted file mode ')) {
        sec.isDeleted = true;
        sec.oldMode = mode(i, line.slice(18));
      } else if (line.startsWith('new file mode ')) {
        sec.isNew = true;
        sec.newMode = mode(i, line.slice(14));
      } else if ((m = /^(?:dis)?similarity index (\d{1,3})%$/.exec(line))) {
        if (line.startsWith('similarity')) sec.similarity = Number(m[1]);
      } else if (line.startsWith('rename from ')) sec.renameFrom = plain(i, line.slice(12));
      else if (line.startsWith('rename to ')) sec.renameTo = plain(i, line.slice(10));
      else if (line.startsWith('rename old ')) sec.renameFrom = plain(i, line.slice(11));
      else if (line.startsWith('rename new ')) sec.renameTo = plain(i, line.slice(11));
      else if (line.startsWith('copy from ')) sec.copyFrom = plain(i, line.slice(10));
      else if (line.startsWith('copy to ')) sec.copyTo = plain(i, line.slice(8));
      else if ((m = /^index ([0-9a-f]{4,64})\.\.([0-9a-f]{4,64})(?: ([0-7]{6}))?$/.exec(line))) sec.indexMode = m[3];
      else if (line === 'GIT binary patch') return this.readBinary(sec, i + 1, end);
      else if (/^Binary files .* differ$/.test(line)) sec.binary = true;
      else if (line.startsWith('--- ')) return this.readNames(sec, i, end);
      else if (line.startsWith('@@')) {
        this.err(i, 'a hunk without "---"/"+++" lines');
        return i;
      } else this.junk(sec, i, `unrecognized line in the header of a file: ${JSON.stringify(line.slice(0, 80))}`);
    }
    return end;
  }

  /** `---` at `i`, then `+++`; returns where the hunks start. */
  private readNames(sec: Section, i: number, end: number): number {
    const side = parseSideName(this.hdr(i).slice(4));
    if (side.ok) sec.minus = side.name;
    else this.err(i, side.message);
    const next = i + 1 < end ? this.hdr(i + 1) : '';
    if (!next.startsWith('+++ ')) {
      this.err(i + 1, 'expected a "+++" line after the "---" line');
      return i + 1;
    }
    const side2 = parseSideName(next.slice(4));
    if (side2.ok) sec.plus = side2.name;
    else this.err(i + 1, side2.message);
    return i + 2;
  }

  /** After `GIT binary patch`: a forward block, then maybe a reverse one ("literal|delta N", base85 lines, a blank line). */
  private readBinary(sec: Section, from: number, end: number): number {
    sec.binary = true;
    let i = from;
    for (let block = 0; block < 2 && i < end; block++) {
      const bm = /^(literal|delta) (\d{1,12})$/.exec(this.hdr(i));
      if (!bm) {
        if (block === 0) this.err(i, 'expected "literal <size>" or "delta <size>" after "GIT binary patch"');
        break;
      }
      if (block === 0 && bm[1] === 'literal') sec.binarySize = Number(bm[2]);
      i++;
      while (i < end && this.hdr(i) !== '') {
        const l = this.hdr(i);
        if (!BASE85_LINE.test(l) || (l.length - 1) % 5 !== 0) {
          this.err(i, 'malformed line in a binary patch');
          break;
        }
        i++;
      }
      if (i < end && this.hdr(i) === '') i++;
    }
    return i;
  }

  /**
   * One hunk: its (checked) header at `h`, its lines up to `next` at most, read by jsdiff. A
   * hunk jsdiff refuses is reported and counts nothing; lines after it are reported.
   */
  private readHunk(sec: Section, h: number, next: number): void {
    // a blank context line that lost its leading space (CRLF or not) stays a context line
    const region = this.lines.slice(h, next).map((l) => (l === '\r' ? '' : l));
    let hunk: StructuredPatchHunk | undefined;
    try {
      // the final newline keeps a blank last line a context line for jsdiff
      hunk = parsePatch(`${region.join('\n')}\n`)[0]?.hunks[0];
    } catch (e) {
      const { junk, message } = hunkError(e);
      if (junk) this.junk(sec, h, message);
      else this.err(h, message);
      return;
    }
    if (!hunk) {
      this.err(h, 'unreadable hunk');
      return;
    }
    sec.hunks++;
    let newLine = hunk.newStart;
    let last: string | undefined;
    for (const l of hunk.lines) {
      const c = l === '' ? ' ' : l[0];
      if (c === '\\') {
        // `\ No newline at end of file`: the line before it has no newline
        if (last === '+') sec.addedBytes--;
        last = undefined;
        continue;
      }
      if (c === ' ') newLine++;
      else if (c === '-') sec.deletions++;
      else if (c === '+') {
        const text = l.slice(1);
        sec.additions++;
        sec.addedLines.push(text);
        sec.addedLineNumbers.push(newLine++);
        sec.addedBytes += utf8Length(text) + 1;
      }
      last = c;
    }
    const used = h + 1 + hunk.lines.length;
    if (used < next) this.junk(sec, used, `unexpected line after a hunk: ${JSON.stringify(this.lines[used]!.slice(0, 80))}`);
  }

  /** The file record, once its names agree. */
  private assemble(sec: Section): void {
    const { names, minus, plus, renameFrom, renameTo, copyFrom, copyTo, start } = sec;
    const isNew = sec.isNew || minus === null;
    const isDeleted = sec.isDeleted || plus === null;
    const consistent = (what: string, a: string | null | undefined, b: string | undefined): void => {
      if (typeof a === 'string' && b !== undefined && a !== b) this.err(start, `inconsistent ${what} file names: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`);
    };
    if (names) {
      consistent('old', minus, names.a);
      consistent('new', plus, names.b);
      consistent('old', renameFrom ?? copyFrom, names.a);
      consistent('new', renameTo ?? copyTo, names.b);
    }
    consistent('old', renameFrom ?? copyFrom, typeof minus === 'string' ? minus : undefined);
    consistent('new', renameTo ?? copyTo, typeof plus === 'string' ? plus : undefined);
    if (isNew && isDeleted) this.err(start, 'a file cannot be both added and deleted');
    const newPath = renameTo ?? copyTo ?? (typeof plus === 'string' ? plus : undefined) ?? names?.b;
    const oldPath = renameFrom ?? copyFrom ?? (typeof minus === 'string' ? minus : undefined) ?? names?.a;
    const path = isDeleted ? oldPath : newPath;
    if (path === undefined || path === '') {
      this.err(start, 'could not determine the file name of this diff section');
      return;
    }
    const { oldMode, newMode, binary, hunks } = sec;
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
    const fNew = newMode ?? (isDeleted ? undefined : sec.indexMode);
    const fOld = oldMode ?? (isNew ? undefined : sec.indexMode);
    const isSymlink = isDeleted ? fOld === '120000' : fNew === '120000';
    const { additions, deletions, addedLines, addedLineNumbers } = sec;
    const f: DiffFile = { path, status, binary, additions, deletions, addedLines, addedLineNumbers, addedBytes: Math.max(0, sec.addedBytes), isSymlink };
    if ((status === 'renamed' || status === 'copied') && oldPath !== undefined) f.oldPath = oldPath;
    if (fNew !== undefined) f.newMode = fNew;
    if (fOld !== undefined) f.oldMode = fOld;
    if (isSymlink && !isDeleted && addedLines.length > 0) f.symlinkTarget = addedLines.join('\n');
    if (sec.binarySize !== undefined) f.binarySize = sec.binarySize;
    if (sec.similarity !== undefined) f.similarity = sec.similarity;
    this.files.push(f);
  }
}

/**
 * Parse `git diff --binary --full-index` output. Never throws: what could not be read is listed
 * in `errors` (and files whose path could not be determined are left out).
 */
export function parseUnifiedDiff(patch: string): ParsedDiff {
  const files: DiffFile[] = [];
  const errors: DiffParseError[] = [];
  try {
    new DiffReader(typeof patch === 'string' ? patch : '', files, errors).read();
  } catch (err) {
    errors.push({ line: 0, message: `internal parser error: ${(err as Error)?.message ?? String(err)}` });
  }
  return Object.assign(files, { errors });
}

// =====================================================================================
// git's own reading of a patch's headers
// =====================================================================================

/**
 * What `git apply --numstat --summary -z` says of a patch (run by the caller: this module does
 * no I/O): each file's name and line counts (null counts: binary), in the patch's order, and
 * git's summary text (creations and deletions with their modes, renames and copies with their
 * similarity, mode changes). git writes the summary's names as they are (not quoted, shared
 * directories of a rename folded into braces), so it is compared as a whole with the summary
 * git writes for the files this module read (`gitSummaryOf`), never read back into names.
 */
export interface GitPatchHeaders {
  files: Array<{ path: string; additions: number | null; deletions: number | null }>;
  summary: string;
}

const NumstatRecord = z
  .string()
  .regex(/^(?:\d{1,10}\t\d{1,10}|-\t-)\t[^\0]+$/, 'not a "<added>\\t<deleted>\\t<path>" numstat record')
  .transform((r) => {
    const [a, d, ...rest] = r.split('\t');
    return { path: rest.join('\t'), additions: a === '-' ? null : Number(a), deletions: d === '-' ? null : Number(d) };
  });
const GitApplyStat = z.object({
  files: z.array(NumstatRecord),
  summary: z.string().refine((t) => t === '' || (t.startsWith(' ') && t.endsWith('\n')), 'not summary lines'),
});

/** Reads git's output (`git apply --numstat --summary -z`); an error when it is not what git writes. */
export function parseGitPatchHeaders(out: string): { ok: true; headers: GitPatchHeaders } | { ok: false; error: string } {
  // the numstat records end in NUL; the summary lines after the last one hold no NUL (names cannot)
  const end = out.lastIndexOf('\0');
  const r = GitApplyStat.safeParse({ files: end < 0 ? [] : out.slice(0, end).split('\0'), summary: out.slice(end + 1) });
  if (!r.success) return { ok: false, error: `unexpected output of git apply --numstat --summary: ${r.error.issues[0]?.message ?? 'unreadable'}` };
  return { ok: true, headers: r.data };
}

const octal = (mode: string | undefined) => (mode === undefined ? '' : mode);

/**
 * The summary `git apply --summary` writes for these files (git's apply.c, summary_patch_list):
 * a creation or deletion with its mode, a rename or copy with the directories both names share
 * folded (`dir/{a => b}`) and its similarity, a mode change; a rewrite (a dissimilarity index)
 * is not known here.
 */
export function gitSummaryOf(files: readonly DiffFile[]): string {
  let out = '';
  for (const f of files) {
    const modeChange = f.oldMode !== undefined && f.newMode !== undefined && f.oldMode !== f.newMode;
    if (f.status === 'added') out += f.newMode ? ` create mode ${f.newMode} ${f.path}\n` : ` create ${f.path}\n`;
    else if (f.status === 'deleted') out += f.oldMode ? ` delete mode ${f.oldMode} ${f.path}\n` : ` delete ${f.path}\n`;
    else if ((f.status === 'renamed' || f.status === 'copied') && f.oldPath !== undefined) {
      let shared = 0;
      for (;;) {
        const a = f.oldPath.indexOf('/', shared);
        const b = f.path.indexOf('/', shared);
        if (a < 0 || b < 0 || a !== b || f.oldPath.slice(shared, a) !== f.path.slice(shared, b)) break;
        shared = a + 1;
      }
      const what = f.status === 'renamed' ? 'rename' : 'copy';
      const names = shared > 0 ? `${f.oldPath.slice(0, shared)}{${f.oldPath.slice(shared)} => ${f.path.slice(shared)}}` : `${f.oldPath} => ${f.path}`;
      out += ` ${what} ${names} (${f.similarity ?? 0}%)\n`;
      if (modeChange) out += ` mode change ${octal(f.oldMode)} => ${octal(f.newMode)}\n`;
    } else if (modeChange) out += ` mode change ${octal(f.oldMode)} => ${octal(f.newMode)} ${f.path}\n`;
  }
  return out;
}

/**
 * Where git's reading of the headers and this parser's disagree (the files and their order,
 * names, line counts, binary, creations, deletions, renames, copies, modes), as parse errors: a
 * patch two readers see differently is not one the gate can vouch for. Empty when they agree.
 */
export function compareWithGit(files: readonly DiffFile[], git: GitPatchHeaders): DiffParseError[] {
  const errors: DiffParseError[] = [];
  const say = (message: string) => {
    if (errors.length < MAX_ERRORS) errors.push({ line: 0, message: `git reads the patch differently: ${message}` });
  };
  if (git.files.length !== files.length) say(`${git.files.length} files, not ${files.length}`);
  files.forEach((f, i) => {
    const g = git.files[i];
    if (!g) return;
    if (g.path !== f.path) say(`file ${i + 1} is ${JSON.stringify(g.path)}, not ${JSON.stringify(f.path)}`);
    else if (g.additions === null ? !f.binary : f.binary || g.additions !== f.additions || g.deletions !== f.deletions) {
      say(`${JSON.stringify(f.path)} has ${g.additions ?? 'binary'} added and ${g.deletions ?? 'binary'} deleted lines`);
    }
  });
  // a rewrite (dissimilarity index) is git's to tell: its lines are left out of the comparison
  const summary = git.summary.replace(/^ rewrite [^\n]* \(\d{1,3}%\)\n(?: mode change [0-7]{6} => [0-7]{6}\n)?/gm, '');
  if (summary !== gitSummaryOf(files)) say(`its creations, deletions, renames, copies or modes differ (git: ${JSON.stringify(summary.slice(0, 300))})`);
  return errors;
}
