/**
 * Workspace documents cut into the pieces the index ranks: Markdown by its headings (ATX `#`
 * and setext `===`/`---` headings, never a `#` inside a fenced code block; YAML front matter
 * left out), each section carrying the trail of headings above it, so a hit can be cited as
 * `path > Heading > Subheading`. A section longer than `maxChars` is cut at paragraph breaks
 * (a paragraph longer still, at a space); plain text is cut at paragraph breaks the same way.
 *
 * Pure: text in, chunks out.
 */

export interface Chunk {
  /** 0-based position in the document. */
  ordinal: number;
  /** The headings above the chunk, outermost first, joined with " > " ('' before any heading). */
  heading: string;
  /** The chunk's text (its heading line left out: that is `heading`). */
  text: string;
  /** 1-based lines of the document the chunk spans. */
  startLine: number;
  endLine: number;
}

export interface ChunkOptions {
  /** Characters per chunk at most (default 2,000; at least 200). */
  maxChars?: number;
}

/** Is the path a Markdown document (by its extension)? */
export function isMarkdown(path: string): boolean {
  return /\.(md|markdown|mdx)$/i.test(path);
}

interface Section {
  trail: string[];
  lines: Array<{ text: string; line: number }>;
}

const FENCE = /^ {0,3}(`{3,}|~{3,})/;
const ATX = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const SETEXT = /^ {0,3}(=+|-+)[ \t]*$/;

/** Split Markdown into sections by heading. */
function markdownSections(lines: string[]): Section[] {
  const sections: Section[] = [];
  const trail: string[] = [];
  let current: Section = { trail: [], lines: [] };
  const open = (level: number, title: string) => {
    if (current.lines.some((l) => l.text.trim() !== '')) sections.push(current);
    trail.length = level - 1;
    trail[level - 1] = title;
    current = { trail: trail.filter((t) => t !== undefined), lines: [] };
  };
  let start = 0;
  // YAML front matter: a first line of ---, up to the next --- or ... line
  if (lines[0]?.trim() === '---') {
    const end = lines.findIndex((l, i) => i > 0 && (l.trim() === '---' || l.trim() === '...'));
    if (end > 0) start = end + 1;
  }
  let fence: string | undefined;
  for (let i = start; i < lines.length; i++) {
    const text = lines[i]!;
    const f = FENCE.exec(text);
    if (fence) {
      if (f && f[1]![0] === fence[0] && f[1]!.length >= fence.length && text.trim() === f[1]) fence = undefined;
      current.lines.push({ text, line: i + 1 });
      continue;
    }
    if (f) {
      fence = f[1]!;
      current.lines.push({ text, line: i + 1 });
      continue;
    }
    const atx = ATX.exec(text);
    if (atx) {
      open(atx[1]!.length, (atx[2] ?? '').trim());
      continue;
    }
    // setext: a paragraph line underlined with === (level 1) or --- (level 2)
    const next = lines[i + 1];
    if (text.trim() !== '' && next !== undefined && SETEXT.test(next) && !/^ {0,3}([-*+]|\d+[.)])[ \t]/.test(text) && !/^ {4}/.test(text)) {
      const prev = current.lines.at(-1);
      if (!prev || prev.text.trim() === '') {
        open(next.trim()[0] === '=' ? 1 : 2, text.trim());
        i++;
        continue;
      }
    }
    current.lines.push({ text, line: i + 1 });
  }
  if (current.lines.some((l) => l.text.trim() !== '')) sections.push(current);
  return sections;
}

/** Cut a section's lines into pieces of at most `max` characters: at blank lines, else at spaces. */
function cut(lines: Array<{ text: string; line: number }>, max: number): Array<{ text: string; startLine: number; endLine: number }> {
  // paragraphs: runs of lines between blank lines
  const paragraphs: Array<{ text: string; startLine: number; endLine: number }> = [];
  let run: Array<{ text: string; line: number }> = [];
  const flush = () => {
    if (run.length > 0) paragraphs.push({ text: run.map((l) => l.text).join('\n'), startLine: run[0]!.line, endLine: run.at(-1)!.line });
    run = [];
  };
  for (const l of lines) {
    if (l.text.trim() === '') flush();
    else run.push(l);
  }
  flush();
  const out: Array<{ text: string; startLine: number; endLine: number }> = [];
  let acc: { text: string; startLine: number; endLine: number } | undefined;
  const push = (p: { text: string; startLine: number; endLine: number }) => {
    if (acc && acc.text.length + 2 + p.text.length <= max) {
      acc = { text: `${acc.text}\n\n${p.text}`, startLine: acc.startLine, endLine: p.endLine };
      return;
    }
    if (acc) out.push(acc);
    acc = p;
  };
  for (const p of paragraphs) {
    if (p.text.length <= max) {
      push(p);
      continue;
    }
    // a paragraph longer than a chunk: at spaces (or hard, for text without any)
    let rest = p.text;
    while (rest.length > max) {
      let at = rest.lastIndexOf(' ', max);
      if (at < max / 2) at = max;
      push({ text: rest.slice(0, at).trimEnd(), startLine: p.startLine, endLine: p.endLine });
      rest = rest.slice(at).trimStart();
    }
    if (rest) push({ text: rest, startLine: p.startLine, endLine: p.endLine });
  }
  if (acc) out.push(acc);
  return out;
}

/** Cut a document into chunks: Markdown by headings, anything else by paragraphs. */
export function chunkDocument(path: string, content: string, opts: ChunkOptions = {}): Chunk[] {
  const max = Math.max(200, opts.maxChars ?? 2000);
  const lines = content.replace(/\r\n?/g, '\n').split('\n');
  const sections = isMarkdown(path) ? markdownSections(lines) : [{ trail: [], lines: lines.map((text, i) => ({ text, line: i + 1 })) }];
  const chunks: Chunk[] = [];
  for (const s of sections) {
    const heading = s.trail.filter((t) => t !== '').join(' > ');
    for (const p of cut(s.lines, max)) chunks.push({ ordinal: chunks.length, heading, text: p.text, startLine: p.startLine, endLine: p.endLine });
  }
  return chunks;
}
