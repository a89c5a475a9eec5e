/**
 * Repository change policy, part 3: `parseUnifiedDiff`, `git diff --binary --full-index` output
 * into per-file records; never throws (what it cannot read is in `errors`).
 */

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
function parseQuoted(s: string, start: number): { value: string; end: number } | undefined {
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

// eslint-disable-next-line max-lines-per-function -- longer than 150 lines before the rule came; to be split (issue 13)
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
