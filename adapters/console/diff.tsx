/**
 * A change's patch as the console shows it: `readDiff` splits `git diff` output into files and
 * hunks with each line's old and new line numbers (pure, never throws, lenient: it is for
 * reading, the gate's strict parser is common/changes/policy/diff.ts), and `DiffView` draws it
 * as one table per file, added, removed and context lines marked by class and sign. Every text
 * goes out through JSX, so a patch that holds HTML shows it as text.
 *
 * A large patch is capped: at most `maxBytes` of it is read and `maxLines` of its lines drawn;
 * `capped` says so and the page links to the whole patch.
 */
import { parseQuoted } from '../../common/changes/policy/diff.js';

export type DiffLineKind = 'add' | 'del' | 'ctx' | 'note';

export interface DiffLine {
  kind: DiffLineKind;
  text: string;
  /** The line's number in the old file (removed and context lines). */
  oldNo?: number;
  /** The line's number in the new file (added and context lines). */
  newNo?: number;
}

export interface DiffHunk {
  /** The `@@ -a,b +c,d @@ section` line. */
  header: string;
  lines: DiffLine[];
}

export type DiffFileStatus = 'added' | 'deleted' | 'modified' | 'renamed' | 'copied' | 'mode';

export interface DiffFileView {
  /** The path after the change (the removed path for a deletion). */
  path: string;
  /** A rename's or copy's source. */
  oldPath?: string;
  status: DiffFileStatus;
  binary: boolean;
  /** A binary file's size after the change, when git sent it as a literal. */
  binarySize?: number;
  oldMode?: string;
  newMode?: string;
  similarity?: number;
  additions: number;
  deletions: number;
  hunks: DiffHunk[];
}

export interface DiffViewModel {
  files: DiffFileView[];
  /** Lines of the whole patch, and its size in bytes (UTF-8). */
  totalLines: number;
  totalBytes: number;
  /** Hunk lines drawn. */
  shownLines: number;
  /** Not all of the patch is drawn (larger than maxBytes, or more than maxLines lines). */
  capped: boolean;
}

export const DIFF_LIMITS = { maxLines: 3000, maxBytes: 1024 * 1024 };

const HUNK = /^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@/;

/** A name as git writes it: maybe C-quoted, maybe with its a/ or b/ prefix; null for /dev/null. */
function nameOf(raw: string, prefixed: boolean): string | null {
  let name = raw;
  if (raw.startsWith('"')) name = parseQuoted(raw, 0)?.value ?? raw;
  else if (prefixed) {
    const tab = raw.indexOf('\t');
    if (tab >= 0) name = raw.slice(0, tab);
  }
  if (name === '/dev/null') return null;
  return prefixed && /^[abciow]\//.test(name) ? name.slice(2) : name;
}

/** The two names of `diff --git A B` (best effort: for display). */
function gitHeaderNames(rest: string): { a: string; b: string } | undefined {
  if (rest.startsWith('"')) {
    const q = parseQuoted(rest, 0);
    if (!q) return undefined;
    const b = rest.slice(q.end + 1);
    return { a: nameOf(rest.slice(0, q.end), true) ?? '', b: nameOf(b, true) ?? '' };
  }
  if (rest.length % 2 === 1) {
    const k = (rest.length - 1) / 2;
    if (rest[k] === ' ' && rest.slice(2, k) === rest.slice(k + 3)) return { a: rest.slice(2, k), b: rest.slice(k + 3) };
  }
  const i = rest.indexOf(' b/');
  if (i > 0) return { a: nameOf(rest.slice(0, i), true) ?? '', b: nameOf(rest.slice(i + 1), true) ?? '' };
  return undefined;
}

interface Building extends DiffFileView {
  isNew: boolean;
  isDeleted: boolean;
  minus?: string | null;
  plus?: string | null;
  headerNames?: { a: string; b: string };
}

function finish(f: Building): DiffFileView {
  const renamed = f.oldPath !== undefined && f.status === 'renamed';
  const copied = f.oldPath !== undefined && f.status === 'copied';
  const newName = (renamed || copied ? f.path : undefined) ?? (typeof f.plus === 'string' ? f.plus : undefined) ?? f.headerNames?.b;
  const oldName = f.oldPath ?? (typeof f.minus === 'string' ? f.minus : undefined) ?? f.headerNames?.a;
  const isDeleted = f.isDeleted || f.plus === null;
  const isNew = f.isNew || f.minus === null;
  const status: DiffFileStatus = isDeleted
    ? 'deleted'
    : isNew
      ? 'added'
      : renamed
        ? 'renamed'
        : copied
          ? 'copied'
          : f.hunks.length === 0 && !f.binary && f.oldMode !== undefined && f.newMode !== undefined
            ? 'mode'
            : 'modified';
  const out: DiffFileView = {
    path: (isDeleted ? oldName : newName) ?? oldName ?? '(unnamed file)',
    status,
    binary: f.binary,
    additions: f.additions,
    deletions: f.deletions,
    hunks: f.hunks,
  };
  if ((status === 'renamed' || status === 'copied') && oldName !== undefined) out.oldPath = oldName;
  if (f.binarySize !== undefined) out.binarySize = f.binarySize;
  if (f.oldMode !== undefined) out.oldMode = f.oldMode;
  if (f.newMode !== undefined) out.newMode = f.newMode;
  if (f.similarity !== undefined) out.similarity = f.similarity;
  return out;
}

/** Split a patch into files, hunks and numbered lines (capped by `limits`). */
export function readDiff(patch: string, limits: Partial<typeof DIFF_LIMITS> = {}): DiffViewModel {
  const maxLines = limits.maxLines ?? DIFF_LIMITS.maxLines;
  const maxBytes = limits.maxBytes ?? DIFF_LIMITS.maxBytes;
  const totalBytes = Buffer.byteLength(patch, 'utf8');
  let totalLines = 0;
  for (let i = patch.indexOf('\n'); i >= 0; i = patch.indexOf('\n', i + 1)) totalLines++;
  if (patch.length > 0 && !patch.endsWith('\n')) totalLines++;
  let capped = totalBytes > maxBytes;
  const text = capped ? Buffer.from(patch, 'utf8').subarray(0, maxBytes).toString('utf8') : patch;
  const lines = text.split('\n');
  if (lines.at(-1) === '') lines.pop();
  // a cut in the middle of a line: that line is not drawn
  if (capped && !text.endsWith('\n')) lines.pop();

  const files: DiffFileView[] = [];
  let file: Building | undefined;
  let hunk: DiffHunk | undefined;
  let oldNo = 0;
  let newNo = 0;
  let oldLeft = 0;
  let newLeft = 0;
  let inBinary = false;
  let shownLines = 0;
  const close = () => {
    if (file) files.push(finish(file));
    file = undefined;
    hunk = undefined;
  };

  for (const raw of lines) {
    const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
    if (line.startsWith('diff --git ')) {
      close();
      inBinary = false;
      file = { path: '', status: 'modified', binary: false, additions: 0, deletions: 0, hunks: [], isNew: false, isDeleted: false };
      const names = gitHeaderNames(line.slice(11));
      if (names) file.headerNames = names;
      continue;
    }
    if (!file) continue; // text before the first file (a commit message, say) is not part of any file
    if (hunk && (oldLeft > 0 || newLeft > 0 || raw.startsWith('\\'))) {
      if (shownLines >= maxLines) {
        capped = true;
        break;
      }
      const c = raw === '' || raw === '\r' ? ' ' : raw[0];
      const body = raw.slice(1);
      if (c === '+') {
        hunk.lines.push({ kind: 'add', text: body, newNo: newNo++ });
        file.additions++;
        newLeft--;
      } else if (c === '-') {
        hunk.lines.push({ kind: 'del', text: body, oldNo: oldNo++ });
        file.deletions++;
        oldLeft--;
      } else if (c === ' ') {
        hunk.lines.push({ kind: 'ctx', text: body, oldNo: oldNo++, newNo: newNo++ });
        oldLeft--;
        newLeft--;
      } else if (c === '\\') hunk.lines.push({ kind: 'note', text: raw.slice(1).trim() });
      else {
        // not a hunk line: the hunk ended early; read the line as a header line below
        hunk = undefined;
        oldLeft = newLeft = 0;
      }
      if (hunk) {
        shownLines++;
        continue;
      }
    }
    const m = HUNK.exec(line);
    if (m) {
      inBinary = false;
      oldNo = Number(m[1]);
      newNo = Number(m[3]);
      oldLeft = m[2] === undefined ? 1 : Number(m[2]);
      newLeft = m[4] === undefined ? 1 : Number(m[4]);
      hunk = { header: line, lines: [] };
      file.hunks.push(hunk);
      continue;
    }
    if (inBinary) {
      // the size of a binary file sent whole: its first `literal <size>`
      const lit = /^literal (\d{1,12})$/.exec(line);
      if (lit && file.binarySize === undefined) file.binarySize = Number(lit[1]);
      continue;
    }
    let g: RegExpExecArray | null;
    if (line.startsWith('new file mode ')) {
      file.isNew = true;
      file.newMode = line.slice(14);
    } else if (line.startsWith('deleted file mode ')) {
      file.isDeleted = true;
      file.oldMode = line.slice(18);
    } else if (line.startsWith('old mode ')) file.oldMode = line.slice(9);
    else if (line.startsWith('new mode ')) file.newMode = line.slice(9);
    else if (line.startsWith('rename from ')) {
      file.status = 'renamed';
      file.oldPath = nameOf(line.slice(12), false) ?? undefined;
    } else if (line.startsWith('rename to ')) {
      file.status = 'renamed';
      file.path = nameOf(line.slice(10), false) ?? '';
    } else if (line.startsWith('copy from ')) {
      file.status = 'copied';
      file.oldPath = nameOf(line.slice(10), false) ?? undefined;
    } else if (line.startsWith('copy to ')) {
      file.status = 'copied';
      file.path = nameOf(line.slice(8), false) ?? '';
    } else if ((g = /^similarity index (\d{1,3})%$/.exec(line))) file.similarity = Number(g[1]);
    else if (line.startsWith('--- ')) file.minus = nameOf(line.slice(4), true);
    else if (line.startsWith('+++ ')) file.plus = nameOf(line.slice(4), true);
    else if (line === 'GIT binary patch') {
      file.binary = true;
      inBinary = true;
    } else if (/^Binary files .* differ$/.test(line)) {
      file.binary = true;
      const b = /^Binary files (.*) and (.*) differ$/.exec(line);
      if (b?.[1] === '/dev/null') file.isNew = true;
      if (b?.[2] === '/dev/null') file.isDeleted = true;
    }
    // index lines and anything else in a file's header: not drawn
  }
  close();
  return { files, totalLines, totalBytes, shownLines, capped };
}

const STATUS_TEXT: Record<DiffFileStatus, string> = { added: 'added', deleted: 'deleted', modified: 'modified', renamed: 'renamed', copied: 'copied', mode: 'mode changed' };

const number = (n: number) => n.toLocaleString('en-US');

function bytes(n: number): string {
  if (n < 1024) return `${n} bytes`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

/** One file of a patch (also a replay report's reply diff, replays.tsx). */
export function FileDiff(props: { f: DiffFileView; index: number }) {
  const { f } = props;
  const title = f.oldPath !== undefined ? `${f.oldPath} → ${f.path}` : f.path;
  const modes = f.oldMode && f.newMode && f.oldMode !== f.newMode ? ` · mode ${f.oldMode} → ${f.newMode}` : f.status === 'added' && f.newMode && f.newMode !== '100644' ? ` · mode ${f.newMode}` : '';
  return (
    <section class="diff-file" id={`file-${props.index + 1}`} aria-labelledby={`file-${props.index + 1}-name`}>
      <h3 class="diff-name" id={`file-${props.index + 1}-name`}>
        <span class="diff-path">{title}</span>{' '}
        <span class={`diff-status diff-status-${f.status}`}>{STATUS_TEXT[f.status]}</span>{' '}
        <span class="diff-counts">
          <span class="diff-count-add">+{f.additions}</span> <span class="diff-count-del">−{f.deletions}</span>
          {f.similarity !== undefined ? ` · ${f.similarity}% similar` : ''}
          {modes}
        </span>
      </h3>
      {f.binary ? (
        <p class="diff-binary">Binary file{f.binarySize !== undefined ? ` (${bytes(f.binarySize)})` : ''}: not shown.</p>
      ) : f.hunks.length === 0 ? (
        <p class="diff-empty">No line changes{f.status === 'renamed' ? ' (renamed only)' : f.status === 'mode' ? ' (the mode only)' : ''}.</p>
      ) : (
        <table class="diff">
          <caption class="vh">Changes to {f.path}</caption>
          <colgroup>
            <col class="ln-col" />
            <col class="ln-col" />
            <col />
          </colgroup>
          <thead class="vh">
            <tr>
              <th scope="col">Old line</th>
              <th scope="col">New line</th>
              <th scope="col">Change</th>
            </tr>
          </thead>
          {f.hunks.map((h) => (
            <tbody>
              <tr class="diff-hunk">
                <td colspan={3}>{h.header}</td>
              </tr>
              {h.lines.map((l) =>
                l.kind === 'note' ? (
                  <tr class="diff-note">
                    <td class="ln"></td>
                    <td class="ln"></td>
                    <td class="code">{l.text}</td>
                  </tr>
                ) : (
                  <tr class={`diff-${l.kind}`}>
                    <td class="ln">{l.oldNo ?? ''}</td>
                    <td class="ln">{l.newNo ?? ''}</td>
                    <td class="code">
                      <span class="sign" aria-hidden="true">
                        {l.kind === 'add' ? '+' : l.kind === 'del' ? '-' : ' '}
                      </span>
                      {l.kind === 'ctx' ? '' : <span class="vh">{l.kind === 'add' ? 'added: ' : 'removed: '}</span>}
                      {l.text}
                    </td>
                  </tr>
                ),
              )}
            </tbody>
          ))}
        </table>
      )}
    </section>
  );
}

/** The patch drawn: a summary line, the cap's note (with the link to the whole patch), each file. */
export function DiffView(props: { diff: DiffViewModel; rawHref?: string | undefined }) {
  const d = props.diff;
  const adds = d.files.reduce((n, f) => n + f.additions, 0);
  const dels = d.files.reduce((n, f) => n + f.deletions, 0);
  return (
    <div class="diff-view">
      <p class="diff-summary">
        {d.files.length} {d.files.length === 1 ? 'file' : 'files'} changed, <span class="diff-count-add">{number(adds)} added</span>,{' '}
        <span class="diff-count-del">{number(dels)} removed</span>
        {d.capped ? ' (in the part shown)' : ''}.{props.rawHref ? ' ' : ''}
        {props.rawHref ? <a href={props.rawHref}>The raw patch</a> : ''}
      </p>
      {d.capped ? (
        <p class="diff-capped" role="note">
          This patch is large ({number(d.totalLines)} lines, {bytes(d.totalBytes)}): only its first {number(d.shownLines)} changed lines are shown here.
          {props.rawHref ? (
            <>
              {' '}
              <a href={props.rawHref}>Download the whole patch</a>.
            </>
          ) : (
            ''
          )}
        </p>
      ) : (
        ''
      )}
      {d.files.length > 1 ? (
        <nav aria-label="Files in the patch">
          <ul class="diff-files">
            {d.files.map((f, i) => (
              <li>
                <a href={`#file-${i + 1}`}>{f.path}</a>
              </li>
            ))}
          </ul>
        </nav>
      ) : (
        ''
      )}
      {d.files.map((f, i) => (
        <FileDiff f={f} index={i} />
      ))}
    </div>
  );
}
