/**
 * Markdown -> chat-platform rendering and message splitting. Pure: no I/O.
 *
 * Agent replies are CommonMark/GFM. `marked`'s lexer turns them into tokens; the tokens are converted
 * into a small intermediate representation (IR: blocks containing inline nodes, with text already
 * unescaped/decoded), and every dialect is rendered from that IR by the renderers below. Splitting
 * works on the IR too, never on rendered strings, so a cut can never land inside an HTML entity, a
 * Markdown escape, a tag or a link's URL: escaping happens only when a piece is rendered.
 */
import { Lexer, type Token, type Tokens } from 'marked';

export type Dialect = 'telegram-html' | 'discord' | 'plain';

export const PLATFORM_LIMITS = { telegram: 4096, discord: 2000 } as const;

/** Smallest `limit` splitMessage accepts: anything smaller cannot even hold the empty-message text. */
export const MIN_SPLIT_LIMIT = 16;

/** Text of the single part produced for a message with nothing visible in it. */
export const EMPTY_MESSAGE_TEXT = '(empty message)';

const HR_LINE = '—'.repeat(10);
/** Nested lists deeper than this are not indented further (chat screens are narrow). */
const MAX_INDENT_DEPTH = 4;

// ---------------------------------------------------------------------------------------------
// Intermediate representation
// ---------------------------------------------------------------------------------------------

interface TextNode { k: 'text'; v: string }
interface CodeNode { k: 'code'; v: string }
interface SpanNode { k: 'strong' | 'em' | 'del'; c: Inline[] }
/** `auto`: a bare/angle-bracket URL or e-mail; its text is the URL as written. */
interface LinkNode { k: 'link'; href: string; auto: boolean; c: Inline[] }
/** `c` is the alt text (may be empty). */
interface ImageNode { k: 'image'; href: string; c: Inline[] }
type Inline = TextNode | CodeNode | SpanNode | LinkNode | ImageNode;

type Align = 'left' | 'right' | 'center' | null;

interface ParaBlock { k: 'para'; c: Inline[] }
interface HeadingBlock { k: 'heading'; depth: number; c: Inline[] }
interface CodeBlock { k: 'code'; lang: string; v: string }
/** `n`: the item's number in an ordered list. `cont`: continuation of an item split across messages (no bullet). */
interface ListItem { n: number; task: boolean; checked: boolean; loose: boolean; cont: boolean; c: Block[] }
interface ListBlock { k: 'list'; ordered: boolean; items: ListItem[] }
interface QuoteBlock { k: 'quote'; c: Block[] }
/** `widths`: column widths of the whole table, kept when a table is split so every piece lines up the same. */
interface TableBlock { k: 'table'; align: Align[]; head: Inline[][]; rows: Inline[][][]; widths: number[] }
interface HrBlock { k: 'hr' }
interface HtmlBlock { k: 'html'; v: string }
type Block = ParaBlock | HeadingBlock | CodeBlock | ListBlock | QuoteBlock | TableBlock | HrBlock | HtmlBlock;

// ---------------------------------------------------------------------------------------------
// Small string helpers
// ---------------------------------------------------------------------------------------------

const NAMED_ENTITIES: Record<string, string> = {
  amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: '\u00a0', ensp: '\u2002', emsp: '\u2003',
  thinsp: '\u2009', zwj: '\u200d', zwnj: '\u200c', shy: '\u00ad', copy: '©', reg: '®', trade: '™',
  hellip: '…', mdash: '—', ndash: '–', lsquo: '‘', rsquo: '’', ldquo: '“', rdquo: '”', laquo: '«',
  raquo: '»', bull: '•', middot: '·', times: '×', divide: '÷', deg: '°', plusmn: '±', euro: '€',
  pound: '£', yen: '¥', cent: '¢', sect: '§', para: '¶', larr: '←', rarr: '→', uarr: '↑', darr: '↓',
  harr: '↔', lArr: '⇐', rArr: '⇒', ne: '≠', le: '≤', ge: '≥', infin: '∞', check: '✓', hearts: '♥',
};

function codePointText(cp: number): string {
  if (!Number.isFinite(cp) || cp <= 0 || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return '\ufffd';
  return String.fromCodePoint(cp);
}

/** Character references in Markdown text (CommonMark decodes them; marked leaves named ones in place). */
function decodeEntities(s: string): string {
  if (!s.includes('&')) return s;
  return s.replace(/&(#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});/g, (m, body: string) => {
    if (body.startsWith('#x') || body.startsWith('#X')) return codePointText(parseInt(body.slice(2), 16));
    if (body.startsWith('#')) return codePointText(parseInt(body.slice(1), 10));
    return Object.hasOwn(NAMED_ENTITIES, body) ? (NAMED_ENTITIES[body] ?? m) : m;
  });
}

/** Lone surrogates cannot be sent to either platform (they are not valid UTF-8): replace them. */
function toWellFormed(s: string): string {
  return s.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd');
}

function escapeHtml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

function percentEncode(ch: string): string {
  return Array.from(new TextEncoder().encode(ch), (b) => `%${b.toString(16).toUpperCase().padStart(2, '0')}`).join('');
}

/** Whitespace and control characters never belong in a URL we emit (and keep newlines out of tags). */
function cleanUrl(url: string): string {
  return url.replace(/[\s\u0000-\u001f\u007f]/g, percentEncode);
}

const isHighSurrogate = (c: number): boolean => c >= 0xd800 && c <= 0xdbff;
const isLowSurrogate = (c: number): boolean => c >= 0xdc00 && c <= 0xdfff;

/** True when `i` is not between the two halves of a surrogate pair. */
function isCodePointBoundary(s: string, i: number): boolean {
  if (i <= 0 || i >= s.length) return true;
  return !(isLowSurrogate(s.charCodeAt(i)) && isHighSurrogate(s.charCodeAt(i - 1)));
}

function codePointLength(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) if (!isLowSurrogate(s.charCodeAt(i)) || !isHighSurrogate(s.charCodeAt(i - 1))) n++;
  return n;
}

function longestRun(s: string, ch: string): number {
  let best = 0;
  let cur = 0;
  for (const c of s) {
    cur = c === ch ? cur + 1 : 0;
    if (cur > best) best = cur;
  }
  return best;
}

/** Prefix the first line with `first` and every later non-empty line with `rest`. */
function prefixLines(s: string, first: string, rest: string): string {
  return s
    .split('\n')
    .map((line, i) => (i === 0 ? first + line : line === '' ? '' : rest + line))
    .join('\n');
}

// ---------------------------------------------------------------------------------------------
// Tokens -> IR
// ---------------------------------------------------------------------------------------------

function sanitizeLang(lang: string | undefined): string {
  const first = (lang ?? '').trim().split(/\s+/)[0] ?? '';
  return /^[A-Za-z0-9_+#.-]{1,32}$/.test(first) ? first : '';
}

function pushInline(out: Inline[], node: Inline): void {
  if ((node.k === 'text' || node.k === 'code') && node.v === '') return;
  const last = out[out.length - 1];
  if (node.k === 'text' && last?.k === 'text') {
    out[out.length - 1] = { k: 'text', v: last.v + node.v };
    return;
  }
  out.push(node);
}

function inlinesFromTokens(tokens: readonly Token[] | undefined): Inline[] {
  const out: Inline[] = [];
  for (const tok of tokens ?? []) {
    switch (tok.type) {
      case 'text': {
        const t = tok as Tokens.Text;
        if (t.tokens && t.tokens.length > 0) for (const n of inlinesFromTokens(t.tokens)) pushInline(out, n);
        else pushInline(out, { k: 'text', v: decodeEntities(t.text) });
        break;
      }
      case 'escape':
        pushInline(out, { k: 'text', v: (tok as Tokens.Escape).text });
        break;
      case 'codespan':
        pushInline(out, { k: 'code', v: (tok as Tokens.Codespan).text });
        break;
      case 'br':
        pushInline(out, { k: 'text', v: '\n' });
        break;
      case 'strong':
      case 'em':
      case 'del': {
        const c = inlinesFromTokens((tok as Tokens.Strong).tokens);
        if (c.length > 0) out.push({ k: tok.type as SpanNode['k'], c });
        break;
      }
      case 'link': {
        const t = tok as Tokens.Link;
        const auto = t.autolink === true;
        const href = cleanUrl(auto ? t.href : decodeEntities(t.href));
        out.push({ k: 'link', href, auto, c: auto ? [{ k: 'text', v: t.text }] : inlinesFromTokens(t.tokens) });
        break;
      }
      case 'image': {
        const t = tok as Tokens.Image;
        const alt = decodeEntities(t.text);
        out.push({ k: 'image', href: cleanUrl(decodeEntities(t.href)), c: alt ? [{ k: 'text', v: alt }] : [] });
        break;
      }
      case 'html': {
        // Inline HTML is shown as the text it is; <br> is the one tag LLMs use for a line break.
        const text = (tok as Tokens.Tag).text;
        pushInline(out, { k: 'text', v: /^<br\s*\/?>$/i.test(text) ? '\n' : text });
        break;
      }
      case 'checkbox':
        break;
      default: {
        const g = tok as Tokens.Generic;
        if (Array.isArray(g.tokens)) for (const n of inlinesFromTokens(g.tokens)) pushInline(out, n);
        else pushInline(out, { k: 'text', v: typeof g.text === 'string' ? g.text : g.raw });
      }
    }
  }
  return out;
}

/**
 * Nothing visible in the block (a paragraph or code block of whitespace, a quote of such blocks).
 * Children are checked when their parent is built, so a quote is blank when it has none left.
 */
function isBlank(b: Block): boolean {
  switch (b.k) {
    case 'para':
    case 'heading':
      return !/\S/.test(plainInline(b.c));
    case 'code':
    case 'html':
      return !/\S/.test(b.v);
    case 'quote':
      return b.c.length === 0;
    case 'list':
      return b.items.length === 0;
    case 'table':
    case 'hr':
      return false;
  }
}

/**
 * Nested blocks with nothing visible are dropped, as top-level ones are in parse(): a split can put
 * one in a piece of its own (a quote or list item continued in the next part), which would then be
 * a part with nothing in it but a quote mark or indentation.
 */
function blocksFromTokens(tokens: readonly Token[]): Block[] {
  const out: Block[] = [];
  for (const tok of tokens) {
    const b = blockFromToken(tok);
    if (b && !isBlank(b)) out.push(b);
  }
  return out;
}

function blockFromToken(tok: Token): Block | null {
  switch (tok.type) {
    case 'space':
    case 'def':
    case 'checkbox':
      return null;
    case 'paragraph':
      return { k: 'para', c: trimBlankEdgeLines(inlinesFromTokens((tok as Tokens.Paragraph).tokens)) };
    case 'text': {
      const t = tok as Tokens.Text;
      const c = t.tokens ? inlinesFromTokens(t.tokens) : [{ k: 'text' as const, v: decodeEntities(t.text) }];
      return { k: 'para', c: trimBlankEdgeLines(c) };
    }
    case 'heading': {
      const t = tok as Tokens.Heading;
      return { k: 'heading', depth: Math.min(6, Math.max(1, t.depth)), c: trimBlankEdgeLines(inlinesFromTokens(t.tokens)) };
    }
    case 'code': {
      const t = tok as Tokens.Code;
      return { k: 'code', lang: t.codeBlockStyle === 'indented' ? '' : sanitizeLang(t.lang), v: t.text };
    }
    case 'list': {
      const t = tok as Tokens.List;
      const start = typeof t.start === 'number' && Number.isSafeInteger(t.start) ? t.start : 1;
      return {
        k: 'list',
        ordered: t.ordered,
        items: t.items.map((it, i) => ({
          n: start + i,
          task: it.task,
          checked: it.checked === true,
          loose: it.loose,
          cont: false,
          c: blocksFromTokens(it.tokens),
        })),
      };
    }
    case 'blockquote':
      return { k: 'quote', c: blocksFromTokens((tok as Tokens.Blockquote).tokens) };
    case 'table': {
      const t = tok as Tokens.Table;
      const head = t.header.map((cell) => inlinesFromTokens(cell.tokens));
      const rows = t.rows.map((row) => head.map((_, i) => inlinesFromTokens(row[i]?.tokens)));
      const widths = head.map((cell, i) =>
        Math.max(1, codePointLength(cellText(cell)), ...rows.map((r) => codePointLength(cellText(r[i] ?? [])))),
      );
      return { k: 'table', align: head.map((_, i) => t.align[i] ?? null), head, rows, widths };
    }
    case 'hr':
      return { k: 'hr' };
    case 'html':
      return { k: 'html', v: (tok as Tokens.HTML).text.replace(/\n+$/, '') };
    default: {
      const g = tok as Tokens.Generic;
      if (Array.isArray(g.tokens)) return { k: 'para', c: inlinesFromTokens(g.tokens) };
      return { k: 'para', c: [{ k: 'text', v: g.raw }] };
    }
  }
}

interface ParsedDoc {
  /** Top-level blocks with something visible in them. */
  blocks: Block[];
  /** Source Markdown of each top-level block. */
  source: Map<Block, string>;
  /** Link reference definitions, appended to a part's Markdown so reference links in it still resolve. */
  defs: string;
}

/**
 * Inline Markdown (a paragraph, a heading, a table cell) with more emphasis delimiters than this,
 * or longer than MAX_INLINE_SOURCE, is taken as plain text. marked's emphasis matching is
 * quadratic in the delimiters of one inline run (20,000 characters of `/_0/_0...` take seconds),
 * and a reply is model output, which chat text can steer: this bounds what one run can cost
 * (prose has a few dozen delimiters per paragraph).
 */
export const MAX_INLINE_DELIMITERS = 300;
export const MAX_INLINE_SOURCE = 20_000;

function tooCostlyInline(src: string): boolean {
  if (src.length > MAX_INLINE_SOURCE) return true;
  let n = 0;
  let backslashes = 0;
  for (let i = 0; i < src.length; i++) {
    const c = src.charCodeAt(i);
    // * _ ~, unless backslash-escaped (an escape is a token of its own, never a delimiter: the
    // Markdown of a split piece escapes every one of them, and must read back as the same text)
    if ((c === 42 || c === 95 || c === 126) && backslashes % 2 === 0 && ++n > MAX_INLINE_DELIMITERS) return true;
    backslashes = c === 92 ? backslashes + 1 : 0;
  }
  return false;
}

class BoundedLexer extends Lexer {
  override lex(src: string): ReturnType<Lexer['lex']> {
    const text = src.replace(/\r\n|\r/g, '\n');
    this.blockTokens(text, this.tokens);
    for (const item of this.inlineQueue) {
      this.state.inRawBlock = false;
      if (tooCostlyInline(item.src)) {
        const t: Tokens.Text = { type: 'text', raw: item.src, text: item.src, escaped: false };
        item.tokens.push(t);
      } else {
        this.inlineTokens(item.src, item.tokens);
      }
    }
    this.inlineQueue = [];
    return this.tokens;
  }
}

function parse(markdown: string): ParsedDoc {
  const src = toWellFormed(markdown);
  const source = new Map<Block, string>();
  const defs: string[] = [];
  let tokens: Token[];
  try {
    tokens = new BoundedLexer({ gfm: true, breaks: false, silent: false }).lex(src);
  } catch {
    // marked gives up on something: show the text as it is rather than fail the reply.
    const block: Block = { k: 'para', c: [{ k: 'text', v: src }] };
    source.set(block, src);
    return { blocks: src.trim() ? [block] : [], source, defs: '' };
  }
  const blocks: Block[] = [];
  for (const tok of tokens) {
    if (tok.type === 'def') defs.push(tok.raw.trim());
    const b = blockFromToken(tok);
    if (!b || renderBlock(b, 'plain', ROOT).trim() === '') continue;
    source.set(b, tok.raw.replace(/\s+$/, ''));
    blocks.push(b);
  }
  return { blocks, source, defs: defs.join('\n') };
}

// ---------------------------------------------------------------------------------------------
// Inline rendering
// ---------------------------------------------------------------------------------------------

function flatText(nodes: readonly Inline[]): string {
  let s = '';
  for (const n of nodes) s += n.k === 'text' || n.k === 'code' ? n.v : flatText(n.c);
  return s;
}

function inlineLength(n: Inline): number {
  if (n.k === 'text' || n.k === 'code') return n.v.length;
  let len = 0;
  for (const c of n.c) len += inlineLength(c);
  return len;
}

function plainInline(nodes: readonly Inline[]): string {
  let s = '';
  for (const n of nodes) {
    switch (n.k) {
      case 'text':
      case 'code':
        s += n.v;
        break;
      case 'strong':
      case 'em':
      case 'del':
        s += plainInline(n.c);
        break;
      case 'link': {
        const text = plainInline(n.c);
        s += n.auto || text === n.href ? text || n.href : text ? `${text} (${n.href})` : n.href;
        break;
      }
      case 'image': {
        const alt = plainInline(n.c);
        s += alt ? `${alt} (${n.href})` : n.href;
        break;
      }
    }
  }
  return s;
}

function cellText(cell: readonly Inline[]): string {
  return plainInline(cell).replace(/\s*\n\s*/g, ' ').trim();
}

// --- Telegram HTML: inline nodes are flattened into styled runs, then tags are opened and closed
// --- with a stack, which keeps the output well-formed and lets us honour Telegram's nesting rules
// --- (b/i/s may not contain or be inside <code>; <a> may not contain <code>).

interface TgStyle { href: string | null; b: boolean; i: boolean; s: boolean; code: boolean }
interface TgRun { text: string; style: TgStyle }

const TG_PLAIN: TgStyle = { href: null, b: false, i: false, s: false, code: false };

function telegramUrlOk(href: string): boolean {
  return /^(https?|tg):\/\/\S+$/i.test(href);
}

function tgRuns(nodes: readonly Inline[], st: TgStyle, out: TgRun[]): void {
  const push = (text: string, style: TgStyle): void => {
    if (text !== '') out.push({ text, style });
  };
  for (const n of nodes) {
    switch (n.k) {
      case 'text':
        push(n.v, st);
        break;
      case 'code':
        push(n.v, { ...st, code: true });
        break;
      case 'strong':
        tgRuns(n.c, { ...st, b: true }, out);
        break;
      case 'em':
        tgRuns(n.c, { ...st, i: true }, out);
        break;
      case 'del':
        tgRuns(n.c, { ...st, s: true }, out);
        break;
      case 'link': {
        const text = plainInline(n.c);
        if (st.href === null && telegramUrlOk(n.href)) {
          if (n.c.length > 0) tgRuns(n.c, { ...st, href: n.href }, out);
          else push(n.href, { ...st, href: n.href });
        } else {
          tgRuns(n.c, st, out);
          if (!n.auto && text !== n.href) push(text ? ` (${n.href})` : n.href, st);
        }
        break;
      }
      case 'image': {
        const alt = plainInline(n.c);
        if (st.href === null && telegramUrlOk(n.href)) push(alt || n.href, { ...st, href: n.href });
        else push(alt ? `${alt} (${n.href})` : n.href, st);
        break;
      }
    }
  }
}

function tgTags(st: TgStyle): string[] {
  const code = st.code && st.href === null;
  const tags: string[] = [];
  if (st.href !== null) tags.push(`a\u0000${st.href}`);
  if (!code) {
    if (st.b) tags.push('b');
    if (st.i) tags.push('i');
    if (st.s) tags.push('s');
  } else tags.push('code');
  return tags;
}

function openTag(tag: string): string {
  if (tag.startsWith('a\u0000')) return `<a href="${escapeHtml(tag.slice(2)).replace(/"/g, '&quot;')}">`;
  return `<${tag}>`;
}

function closeTag(tag: string): string {
  return tag.startsWith('a\u0000') ? '</a>' : `</${tag}>`;
}

function telegramInline(nodes: readonly Inline[], base: TgStyle = TG_PLAIN): string {
  const runs: TgRun[] = [];
  tgRuns(nodes, base, runs);
  let out = '';
  const open: string[] = [];
  for (const run of runs) {
    const want = tgTags(run.style);
    let same = 0;
    while (same < open.length && same < want.length && open[same] === want[same]) same++;
    while (open.length > same) out += closeTag(open.pop() ?? '');
    for (let i = same; i < want.length; i++) {
      const tag = want[i] ?? '';
      out += openTag(tag);
      open.push(tag);
    }
    out += escapeHtml(run.text);
  }
  while (open.length > 0) out += closeTag(open.pop() ?? '');
  return out;
}

// --- Markdown-like targets: Discord's dialect and canonical Markdown (used for the Markdown of split pieces).

type MdTarget = 'discord' | 'markdown';

const DISCORD_SPECIAL = new Set(['\\', '*', '_', '~', '`', '|', '<', '>', '[', ']']);
const MARKDOWN_SPECIAL = new Set(['\\', '*', '_', '~', '`', '|', '<', '>', '[', ']', '&', '!']);

/** Backslash-escape whatever the target would otherwise read as formatting, including line-start markers. */
function escapeMd(v: string, t: MdTarget): string {
  const special = t === 'discord' ? DISCORD_SPECIAL : MARKDOWN_SPECIAL;
  let out = '';
  let lineStart = true;
  for (let i = 0; i < v.length; i++) {
    const ch = v[i] ?? '';
    if (ch === '\n') {
      out += ch;
      lineStart = true;
      continue;
    }
    if (lineStart && (ch === ' ' || ch === '\t')) {
      out += ch;
      continue;
    }
    if (lineStart) {
      lineStart = false;
      if ('#+-='.includes(ch)) {
        out += `\\${ch}`;
        continue;
      }
      const num = /^\d{1,9}(?=[.)])/.exec(v.slice(i, i + 11));
      if (num) {
        out += `${num[0]}\\${v[i + num[0].length] ?? ''}`;
        i += num[0].length;
        continue;
      }
    }
    out += special.has(ch) ? `\\${ch}` : ch;
  }
  return out;
}

function wrapMd(marker: string, inner: string): string {
  const m = /^(\s*)([\s\S]*?)(\s*)$/.exec(inner);
  if (!m || !m[2]) return inner;
  return `${m[1] ?? ''}${marker}${m[2]}${marker}${m[3] ?? ''}`;
}

function codeSpan(v: string, t: MdTarget): string {
  if (v === '') return '';
  if (v.trim() === '') return t === 'markdown' ? `\`${v}\`` : v;
  const fence = '`'.repeat(longestRun(v, '`') + 1);
  const pad = v.startsWith('`') || v.endsWith('`') || (v.startsWith(' ') && v.endsWith(' ')) ? ' ' : '';
  return `${fence}${pad}${v}${pad}${fence}`;
}

const isHttpUrl = (href: string): boolean => /^https?:\/\/\S+$/i.test(href);

/** URL inside Markdown link parentheses: characters that would end or break it are percent-encoded. */
function mdUrl(href: string): string {
  return href.replace(/[()<>\s\\]/g, percentEncode);
}

function mdInline(nodes: readonly Inline[], t: MdTarget): string {
  let s = '';
  for (const n of nodes) {
    switch (n.k) {
      case 'text':
        s += escapeMd(n.v, t);
        break;
      case 'code':
        s += codeSpan(n.v, t);
        break;
      case 'strong':
        s += wrapMd('**', mdInline(n.c, t));
        break;
      case 'em':
        s += wrapMd('*', mdInline(n.c, t));
        break;
      case 'del':
        s += wrapMd('~~', mdInline(n.c, t));
        break;
      case 'link': {
        const text = plainInline(n.c);
        if (t === 'markdown') {
          if (n.auto && /^[a-z][a-z0-9+.-]{1,31}:[^\s<>]*$/i.test(n.href)) {
            s += n.href.startsWith('mailto:') && !text.startsWith('mailto:') ? `<${text}>` : `<${n.href}>`;
          } else s += `[${mdInline(n.c, t)}](${mdUrl(n.href)})`;
        } else if (isHttpUrl(n.href)) {
          s += n.auto || text === n.href || text === '' ? mdUrl(n.href) : `[${mdInline(n.c, t)}](${mdUrl(n.href)})`;
        } else if (n.auto || text === n.href) {
          s += escapeMd(text || n.href, t);
        } else {
          s += text ? `${mdInline(n.c, t)} (${escapeMd(n.href, t)})` : escapeMd(n.href, t);
        }
        break;
      }
      case 'image': {
        const alt = plainInline(n.c);
        if (t === 'markdown') s += `![${escapeMd(alt, t)}](${mdUrl(n.href)})`;
        else s += alt ? `${escapeMd(alt, t)} (${isHttpUrl(n.href) ? n.href : escapeMd(n.href, t)})` : n.href;
        break;
      }
    }
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Block rendering
// ---------------------------------------------------------------------------------------------

type Target = Dialect | 'markdown';
interface Ctx { quote: boolean; depth: number }
const ROOT: Ctx = { quote: false, depth: 0 };

function padCell(s: string, width: number, align: Align): string {
  const gap = Math.max(0, width - codePointLength(s));
  if (align === 'right') return ' '.repeat(gap) + s;
  if (align === 'center') return ' '.repeat(Math.floor(gap / 2)) + s + ' '.repeat(gap - Math.floor(gap / 2));
  return s + ' '.repeat(gap);
}

/** A table as aligned plain-text columns (how it is shown on platforms without tables). */
function tableText(t: TableBlock): string {
  const line = (cells: readonly (readonly Inline[])[]): string =>
    t.widths.map((w, i) => padCell(cellText(cells[i] ?? []), w, t.align[i] ?? null)).join(' | ').trimEnd();
  const sep = t.widths.map((w) => '-'.repeat(w)).join('-+-');
  return [line(t.head), sep, ...t.rows.map(line)].join('\n');
}

function gfmTable(t: TableBlock): string {
  const cell = (c: readonly Inline[]): string => mdInline(c, 'markdown').replace(/\s*\n\s*/g, ' ').replace(/(^|[^\\])\|/g, '$1\\|');
  const row = (cells: readonly (readonly Inline[])[]): string => `| ${t.head.map((_, i) => cell(cells[i] ?? [])).join(' | ')} |`;
  const sep = `| ${t.align.map((a) => (a === 'left' ? ':--' : a === 'right' ? '--:' : a === 'center' ? ':-:' : '---')).join(' | ')} |`;
  return [row(t.head), sep, ...t.rows.map(row)].join('\n');
}

/** Discord code blocks cannot escape ``` inside them: a zero-width space breaks every backtick run. */
function discordFenceSafe(v: string): string {
  return v.replace(/`(?=`)/g, '`\u200b');
}

function fenced(lang: string, v: string): string {
  const fence = '`'.repeat(Math.max(3, longestRun(v, '`') + 1));
  return `${fence}${lang}\n${v}\n${fence}`;
}

function inlineFor(nodes: readonly Inline[], t: Target): string {
  if (t === 'telegram-html') return telegramInline(nodes);
  if (t === 'plain') return plainInline(nodes);
  return mdInline(nodes, t);
}

function renderList(b: ListBlock, t: Target, ctx: Ctx): string {
  const inner: Ctx = { ...ctx, depth: ctx.depth + 1 };
  const bullet = t === 'discord' || t === 'markdown' ? '- ' : '• ';
  const loose = b.items.some((it) => it.loose);
  return b.items
    .map((item) => {
      const marker = b.ordered ? `${item.n}. ` : bullet;
      const pad = ' '.repeat(marker.length);
      const task =
        item.task && !item.cont ? (t === 'markdown' ? (item.checked ? '[x] ' : '[ ] ') : item.checked ? '☑ ' : '☐ ') : '';
      const content = task + renderBlocks(item.c, t, inner, item.loose ? '\n\n' : '\n');
      const first = item.cont && t !== 'markdown' ? pad : marker;
      if (content === '') return first.trimEnd();
      return prefixLines(content, first, ctx.depth < MAX_INDENT_DEPTH || t === 'markdown' ? pad : '');
    })
    .join(loose ? '\n\n' : '\n');
}

function renderQuote(b: QuoteBlock, t: Target, ctx: Ctx): string {
  if (t === 'markdown') {
    const inner = renderBlocks(b.c, t, ctx);
    return inner.split('\n').map((l) => (l ? `> ${l}` : '>')).join('\n');
  }
  // Telegram and Discord cannot nest quotes, so nested quotes are flattened into the outer one.
  const inner = renderBlocks(b.c, t, { ...ctx, quote: true });
  if (ctx.quote || inner === '') return inner;
  if (t === 'telegram-html') return `<blockquote>${inner}</blockquote>`;
  if (t === 'discord') return inner.split('\n').map((l) => `> ${l}`).join('\n');
  // Plain text marks only lines with something visible on them: a "> " before a blank or
  // whitespace-only line (a trailing &nbsp;, a blank line of a quoted code block) would be visible
  // text that is nothing but decoration, and it would vanish when a split trims that whitespace.
  return inner.split('\n').map((l) => (/\S/.test(l) ? `> ${l}` : '')).join('\n');
}

function renderBlock(b: Block, t: Target, ctx: Ctx): string {
  switch (b.k) {
    case 'para':
      return inlineFor(b.c, t);
    case 'heading':
      if (t === 'telegram-html') return telegramInline(b.c, { ...TG_PLAIN, b: true });
      if (t === 'plain') return plainInline(b.c);
      if (t === 'discord' && b.depth > 3) return mdInline([{ k: 'strong', c: b.c }], t);
      return `${'#'.repeat(b.depth)} ${mdInline(b.c, t).replace(/\n/g, ' ')}`;
    case 'code':
      if (t === 'telegram-html') {
        const body = escapeHtml(b.v);
        return b.lang ? `<pre><code class="language-${b.lang}">${body}</code></pre>` : `<pre>${body}</pre>`;
      }
      if (t === 'plain') return b.v;
      if (t === 'discord') return `\`\`\`${b.lang}\n${discordFenceSafe(b.v)}\n\`\`\``;
      return fenced(b.lang, b.v);
    case 'list':
      return renderList(b, t, ctx);
    case 'quote':
      return renderQuote(b, t, ctx);
    case 'table':
      if (t === 'telegram-html') return `<pre>${escapeHtml(tableText(b))}</pre>`;
      if (t === 'plain') return tableText(b);
      if (t === 'discord') return `\`\`\`\n${discordFenceSafe(tableText(b))}\n\`\`\``;
      return gfmTable(b);
    case 'hr':
      return t === 'markdown' ? '---' : HR_LINE;
    case 'html':
      if (t === 'telegram-html') return escapeHtml(b.v);
      if (t === 'discord') return escapeMd(b.v, t);
      return b.v;
  }
}

function renderBlocks(blocks: readonly Block[], t: Target, ctx: Ctx = ROOT, sep = '\n\n'): string {
  const out: string[] = [];
  for (const b of blocks) {
    const s = renderBlock(b, t, ctx);
    if (s !== '') out.push(s);
  }
  return out.join(sep);
}

// ---------------------------------------------------------------------------------------------
// Public rendering API
// ---------------------------------------------------------------------------------------------

/** Telegram Bot API HTML (parse_mode "HTML"): only <b>, <i>, <u>, <s>, <code>, <pre>, <pre><code class="language-x">, <a href>, <blockquote>, <tg-spoiler> allowed; &, <, > escaped as &amp; &lt; &gt; (and " inside href). */
export function renderTelegramHtml(markdown: string): string {
  return renderBlocks(parse(markdown).blocks, 'telegram-html');
}

/** Discord markdown: Discord renders most Markdown itself; convert what it does not support: tables -> fenced code block with aligned columns, headings deeper than ### -> bold line, images -> link text (url), raw HTML -> escaped/plain text, horizontal rule -> a line of '—'. */
export function renderDiscord(markdown: string): string {
  return renderBlocks(parse(markdown).blocks, 'discord');
}

/** Plain text with formatting removed (the fallback when a platform rejects the formatting): code blocks keep their content, links become "text (url)", list items keep bullets "• " / "1. ". */
export function renderPlain(markdown: string): string {
  return renderBlocks(parse(markdown).blocks, 'plain');
}

function decodeTelegramEntities(s: string): string {
  return s.replace(/&(lt|gt|amp|quot|#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6});/g, (_m, body: string) => {
    if (body === 'lt') return '<';
    if (body === 'gt') return '>';
    if (body === 'amp') return '&';
    if (body === 'quot') return '"';
    if (body.startsWith('#x') || body.startsWith('#X')) return codePointText(parseInt(body.slice(2), 16));
    return codePointText(parseInt(body.slice(1), 10));
  });
}

/** Length of what the platform counts: for telegram-html the visible text after entity parsing (tags removed, entities decoded), in UTF-16 code units as Telegram counts; for discord and plain the string length. */
export function visibleLength(rendered: string, dialect: Dialect): number {
  if (dialect !== 'telegram-html') return rendered.length;
  return decodeTelegramEntities(rendered.replace(/<[^>]*>/g, '')).length;
}

// ---------------------------------------------------------------------------------------------
// Splitting
// ---------------------------------------------------------------------------------------------

export interface MessagePart { markdown: string; rendered: string; plain: string }

type FitsOne = (b: Block) => boolean;
type FitsMany = (bs: Block[]) => boolean;

/**
 * Largest k in [0, n] with ok(k), for a predicate that is true at 0 and monotone (true up to some
 * point, then false). Gallops from 0 and then bisects, so its cost depends on the answer, not on n.
 */
function maxFit(n: number, ok: (k: number) => boolean): number {
  let good = 0;
  let step = 1;
  let bad = -1;
  while (good < n) {
    const probe = Math.min(n, good + step);
    if (ok(probe)) {
      good = probe;
      step *= 2;
    } else {
      bad = probe;
      break;
    }
  }
  if (bad < 0) return good;
  while (bad - good > 1) {
    const mid = good + Math.floor((bad - good) / 2);
    if (ok(mid)) good = mid;
    else bad = mid;
  }
  return good;
}

/**
 * Inline nodes covering flat-text positions [from, to). Formatting and links are kept on both sides
 * of a cut (a link cut in two gives two links to the same URL). A node without text (an image with
 * no alt text, a link with empty text) goes with the slice that contains its position.
 */
function sliceInline(nodes: readonly Inline[], from: number, to: number): Inline[] {
  const out: Inline[] = [];
  let pos = 0;
  for (const n of nodes) {
    if (pos > to || (pos === to && to !== Infinity)) break;
    const len = inlineLength(n);
    const end = pos + len;
    if (len === 0) {
      if (pos >= from) out.push(n);
    } else if (end > from || (end === from && n.k !== 'text' && n.k !== 'code')) {
      // (end === from: a node without text at the very end of `n`, say an image in bold, is at `from`)
      const a = Math.max(0, from - pos);
      const b = to - pos; // may be Infinity: then zero-length nodes at the end of `n` are kept
      if (n.k === 'text' || n.k === 'code') out.push({ ...n, v: n.v.slice(a, b) });
      else if (a === 0 && b >= len) out.push(n);
      else {
        const c = sliceInline(n.c, a, b);
        if (c.length > 0) out.push({ ...n, c });
      }
    }
    pos = end;
  }
  return out;
}

/** Positions of zero-length nodes (images without alt text and the like), in order. */
function emptyNodePositions(nodes: readonly Inline[], base = 0, out: number[] = []): number[] {
  let pos = base;
  for (const n of nodes) {
    const len = inlineLength(n);
    if (len === 0 && (n.k === 'link' || n.k === 'image' || n.k === 'strong' || n.k === 'em' || n.k === 'del')) out.push(pos);
    else if (n.k !== 'text' && n.k !== 'code') emptyNodePositions(n.c, pos, out);
    pos += len;
  }
  return out;
}

function trimStartInline(nodes: readonly Inline[]): Inline[] {
  const flat = flatText(nodes);
  let i = 0;
  while (i < flat.length && /\s/.test(flat[i] ?? '')) i++;
  const empties = emptyNodePositions(nodes);
  const first = empties.length > 0 ? Math.min(i, empties[0] ?? i) : i;
  return first === 0 ? nodes.slice() : sliceInline(nodes, first, Infinity);
}

function trimEndInline(nodes: readonly Inline[]): Inline[] {
  const flat = flatText(nodes);
  let i = flat.length;
  while (i > 0 && /\s/.test(flat[i - 1] ?? '')) i--;
  if (i === flat.length) return nodes.slice();
  const empties = emptyNodePositions(nodes);
  const last = empties[empties.length - 1];
  return sliceInline(nodes, 0, last !== undefined && last >= i ? Infinity : i);
}

/**
 * Drop the blank lines at the start and end of a paragraph's or heading's text (a leading <br>, a
 * last line holding only &nbsp;), keeping whitespace on the first and last lines with text. Shown
 * whole, such a line is an empty line of the block that still gets its line decoration (the "1. "
 * of a list item alone on a line, a quote's "> "); a split trims whitespace at its cuts, which
 * would drop that line and its decoration, and then the pieces would not hold everything the whole
 * message shows. Zero-length nodes (an image without alt text shows its URL) are never dropped.
 */
function trimBlankEdgeLines(nodes: Inline[]): Inline[] {
  const flat = flatText(nodes);
  const lead = /^\s*\n/.exec(flat)?.[0].length ?? 0;
  const trail = /\n\s*$/.exec(flat)?.index ?? flat.length;
  if (lead === 0 && trail === flat.length) return nodes;
  const empties = emptyNodePositions(nodes);
  if (empties.length === 0 && !/\S/.test(flat)) return nodes;
  const first = Math.min(lead, empties[0] ?? lead);
  const last = empties[empties.length - 1];
  return sliceInline(nodes, first, last !== undefined && last >= trail ? Infinity : trail);
}

/** Flat-text ranges (start, end) of autolinks: their text is a URL, which is only cut as a last resort. */
function autolinkRanges(nodes: readonly Inline[], base = 0, out: Array<[number, number]> = []): Array<[number, number]> {
  let pos = base;
  for (const n of nodes) {
    const len = inlineLength(n);
    if (n.k === 'link' && n.auto) out.push([pos, pos + len]);
    else if (n.k !== 'text' && n.k !== 'code') autolinkRanges(n.c, pos, out);
    pos += len;
  }
  return out;
}

/** Replace the first link or image (in text order) by its plain-text form "text (url)". */
function degradeFirstLink(nodes: readonly Inline[]): { nodes: Inline[]; changed: boolean } {
  const out: Inline[] = [];
  let changed = false;
  for (const n of nodes) {
    if (changed || n.k === 'text' || n.k === 'code') {
      out.push(n);
    } else if (n.k === 'link' || n.k === 'image') {
      changed = true;
      const text = plainInline(n.c);
      if (n.k === 'link' && (n.auto || text === n.href)) out.push(...(n.c.length ? n.c : [{ k: 'text' as const, v: n.href }]));
      else if (text) out.push(...n.c, { k: 'text', v: ` (${n.href})` });
      else out.push({ k: 'text', v: n.href });
    } else {
      const inner = degradeFirstLink(n.c);
      changed = inner.changed;
      out.push({ ...n, c: inner.nodes });
    }
  }
  return { nodes: out, changed };
}

const segmenter = typeof Intl.Segmenter === 'function' ? new Intl.Segmenter('en', { granularity: 'grapheme' }) : null;

/** Largest grapheme-cluster boundary in (0, k] allowed by `ok`, or 0. */
function lastGraphemeBoundary(flat: string, k: number, ok: (p: number) => boolean): number {
  if (!segmenter) return 0;
  const start = Math.max(0, k - 256);
  const window = flat.slice(start, Math.min(flat.length, k + 256));
  let best = 0;
  for (const seg of segmenter.segment(window)) {
    const p = start + seg.index;
    if (p > k) break;
    if (p > 0 && (seg.index > 0 || start === 0) && ok(p)) best = p;
  }
  if (k === flat.length && ok(k)) best = k;
  return best;
}

const SENTENCE_END = /[.!?…。！？]["'”’)\]]*$/;
const CJK_STOP = /[。！？]/;

/**
 * Where to cut a paragraph whose first `k` flat-text units fit: the last line break, else sentence
 * end, else word boundary in the second half of the room; else the last grapheme boundary; else the
 * last code-point boundary. Never inside a surrogate pair or an autolink. 0 = nowhere.
 */
function chooseCut(flat: string, k: number, auto: ReadonlyArray<[number, number]>): number {
  const ok = (p: number): boolean => isCodePointBoundary(flat, p) && !auto.some(([s, e]) => p > s && p < e);
  if (k >= flat.length) return k;
  const min = Math.max(1, Math.floor(k / 2));
  let line = 0;
  let sentence = 0;
  let word = 0;
  for (let p = k; p >= min && !line; p--) {
    const ch = flat[p] ?? '';
    if (!ok(p)) continue;
    if (ch === '\n') line = p;
    else if (/\s/.test(ch)) {
      if (!sentence && SENTENCE_END.test(flat.slice(Math.max(0, p - 4), p))) sentence = p;
      if (!word) word = p;
    } else if (!sentence && CJK_STOP.test(flat[p - 1] ?? '')) sentence = p;
  }
  const best = line || sentence || word;
  if (best) return best;
  const g = lastGraphemeBoundary(flat, k, ok);
  if (g) return g;
  for (let p = k; p > 0; p--) if (ok(p)) return p;
  return 0;
}

function splitInlineBlock(b: ParaBlock | HeadingBlock, fits: FitsOne, limit: number): Block[] | null {
  const make = (c: Inline[]): Block => ({ ...b, c });
  const out: Block[] = [];
  let rest = trimEndInline(trimStartInline(b.c));
  while (rest.length > 0) {
    const flat = flatText(rest);
    // Every dialect shows all of the flat text, so a longer one cannot fit.
    if (flat.length <= limit && fits(make(rest))) {
      out.push(make(rest));
      break;
    }
    const current = rest;
    const k = maxFit(Math.min(flat.length, limit), (m) => fits(make(sliceInline(current, 0, m))));
    let cut = k > 0 ? chooseCut(flat, k, autolinkRanges(rest)) : 0;
    if (cut > 0 && !fits(make(trimEndInline(sliceInline(rest, 0, cut))))) {
      // Rendering is not strictly monotone (e.g. a Discord link whose text stops being its URL when
      // cut): fall back to the longest prefix that was measured to fit.
      cut = isCodePointBoundary(flat, k) ? k : k - 1;
      if (!fits(make(trimEndInline(sliceInline(rest, 0, cut))))) cut = 0;
    }
    if (cut <= 0) {
      // Only a link whose URL is longer than the room can block every cut: show it as text instead.
      const degraded = degradeFirstLink(rest);
      if (!degraded.changed) return null;
      rest = degraded.nodes;
      continue;
    }
    out.push(make(trimEndInline(sliceInline(rest, 0, cut))));
    rest = trimStartInline(sliceInline(rest, cut, Infinity));
  }
  return out;
}

function splitCode(b: CodeBlock, fits: FitsOne, limit: number): Block[] | null {
  let lang = b.lang;
  const make = (v: string): CodeBlock => ({ k: 'code', lang, v });
  if (!fits(make('x'))) {
    lang = '';
    if (!fits(make('x'))) return null;
  }
  const lines = b.v.split('\n');
  const out: Block[] = [];
  const emit = (v: string): void => {
    if (v.trim() !== '') out.push(make(v));
  };
  let i = 0;
  while (i < lines.length) {
    const from = i;
    const m = maxFit(Math.min(lines.length - i, limit + 1), (n) => fits(make(lines.slice(from, from + n).join('\n'))));
    if (m > 0) {
      emit(lines.slice(i, i + m).join('\n'));
      i += m;
      continue;
    }
    // One line longer than the room: cut it at code-point boundaries.
    let line = lines[i] ?? '';
    while (line.length > 0) {
      const current = line;
      let cut = maxFit(Math.min(current.length, limit), (c) => fits(make(current.slice(0, c))));
      if (!isCodePointBoundary(current, cut)) cut--;
      if (cut <= 0) return null;
      emit(current.slice(0, cut));
      line = current.slice(cut);
    }
    i++;
  }
  return out;
}

function splitTable(b: TableBlock, fits: FitsOne, limit: number): Block[] | null {
  const make = (rows: Inline[][][]): TableBlock => ({ ...b, rows });
  const out: Block[] = [];
  let i = 0;
  while (i < b.rows.length) {
    const from = i;
    const m = maxFit(Math.min(b.rows.length - i, limit), (n) => fits(make(b.rows.slice(from, from + n))));
    if (m === 0) {
      // Even one row with the header is too wide: the rest goes out as text lines.
      const code = splitCode({ k: 'code', lang: '', v: tableText(make(b.rows.slice(i))) }, fits, limit);
      if (!code) return null;
      out.push(...code);
      return out;
    }
    out.push(make(b.rows.slice(i, i + m)));
    i += m;
  }
  if (out.length === 0) return splitCode({ k: 'code', lang: '', v: tableText(b) }, fits, limit);
  return out;
}

function splitList(b: ListBlock, fits: FitsOne, limit: number): Block[] | null {
  const make = (items: ListItem[]): ListBlock => ({ ...b, items });
  const units: ListItem[] = [];
  for (const item of b.items) {
    if (fits(make([item]))) {
      units.push(item);
      continue;
    }
    // A continuation has no bullet or task box, so it is never longer than the first piece measured here.
    const groups = packBlocks(item.c, (bs) => fits(make([{ ...item, c: bs }])), limit);
    if (!groups) return null;
    groups.forEach((c, j) => units.push({ ...item, c, cont: item.cont || j > 0 }));
  }
  const out: Block[] = [];
  let i = 0;
  while (i < units.length) {
    const from = i;
    const m = Math.max(1, maxFit(Math.min(units.length - i, limit), (n) => fits(make(units.slice(from, from + n)))));
    out.push(make(units.slice(i, i + m)));
    i += m;
  }
  return out;
}

/** Pieces of a block, each fitting on its own, or null when this block cannot be made to fit. */
function splitBlock(b: Block, fits: FitsOne, limit: number): Block[] | null {
  if (fits(b)) return [b];
  let pieces: Block[] | null = null;
  switch (b.k) {
    case 'para':
    case 'heading':
      pieces = splitInlineBlock(b, fits, limit);
      break;
    case 'html':
      pieces = splitInlineBlock({ k: 'para', c: [{ k: 'text', v: b.v }] }, fits, limit);
      break;
    case 'code':
      pieces = splitCode(b, fits, limit);
      break;
    case 'list':
      pieces = splitList(b, fits, limit);
      break;
    case 'quote': {
      const groups = packBlocks(b.c, (bs) => fits({ k: 'quote', c: bs }), limit);
      pieces = groups ? groups.map((c): Block => ({ k: 'quote', c })) : null;
      break;
    }
    case 'table':
      pieces = splitTable(b, fits, limit);
      break;
    case 'hr':
      pieces = null;
      break;
  }
  if (pieces && pieces.length > 0 && pieces.every(fits)) return pieces;
  if (b.k === 'para') return null;
  // Last resort: the block's plain text as a paragraph (structure is lost, text is not).
  const text = renderBlock(b, 'plain', ROOT);
  return splitInlineBlock({ k: 'para', c: text ? [{ k: 'text', v: text }] : [] }, fits, limit);
}

/**
 * Group consecutive blocks greedily (each group as many blocks as fit); a block too large on its
 * own is replaced by its pieces first, and its last piece may share a group with what follows.
 * A heading that would end a group moves to the next one when it fits there with its block.
 */
function packBlocks(blocks: readonly Block[], fits: FitsMany, limit: number): Block[][] | null {
  const queue = blocks.slice();
  const groups: Block[][] = [];
  let i = 0;
  while (i < queue.length) {
    const from = i;
    let m = maxFit(Math.min(queue.length - i, limit), (n) => fits(queue.slice(from, from + n)));
    if (m === 0) {
      const pieces = splitBlock(queue[i] as Block, (x) => fits([x]), limit);
      if (!pieces || pieces.length === 0) return null;
      queue.splice(i, 1, ...pieces);
      continue;
    }
    const last = queue[i + m - 1];
    const next = queue[i + m];
    if (m > 1 && last?.k === 'heading' && next && fits([last, next])) m--;
    groups.push(queue.slice(i, i + m));
    i += m;
  }
  return groups;
}

function renderDialect(blocks: readonly Block[], dialect: Dialect): string {
  return renderBlocks(blocks, dialect);
}

/**
 * Split markdown into parts whose rendered text (in `dialect`) and plain fallback each fit `limit` (as measured by visibleLength). Splits between top-level blocks (paragraphs, lists, code blocks, quotes, tables); a block that alone is too large is split further: a fenced code block by lines, each piece re-fenced with the same language; a paragraph at sentence, then word, then character boundaries (never inside a surrogate pair, an HTML entity, or a link's URL). Empty input yields one part with text "(empty message)". Deterministic: same input, same parts.
 *
 * Lists split between items (an item too large continues, without bullet, in the next part), quotes
 * between their blocks (each piece quoted again), tables between rows (header repeated). A link
 * whose URL alone exceeds the limit is turned into "text (url)" text, the only case where a URL is
 * cut. `markdown` of a part is the source text when the part holds whole top-level blocks, and
 * Markdown regenerated from the split pieces otherwise. Throws RangeError if limit < MIN_SPLIT_LIMIT.
 */
export function splitMessage(markdown: string, dialect: Dialect, limit: number): MessagePart[] {
  if (!Number.isFinite(limit) || limit < MIN_SPLIT_LIMIT) {
    throw new RangeError(`splitMessage: limit must be a number >= ${MIN_SPLIT_LIMIT}, got ${limit}`);
  }
  const max = Math.floor(limit);
  const doc = parse(markdown);
  if (doc.blocks.length === 0) return [{ markdown: EMPTY_MESSAGE_TEXT, rendered: EMPTY_MESSAGE_TEXT, plain: EMPTY_MESSAGE_TEXT }];

  const fits: FitsMany = (bs) =>
    visibleLength(renderDialect(bs, dialect), dialect) <= max && renderBlocks(bs, 'plain').length <= max;
  const groups = packBlocks(doc.blocks, fits, max) ?? hardSplit(doc.blocks, max);

  return groups.map((g) => {
    let md = g.map((b) => doc.source.get(b) ?? renderBlocks([b], 'markdown')).join('\n\n');
    if (doc.defs) md += `\n\n${doc.defs}`;
    return { markdown: md, rendered: renderDialect(g, dialect), plain: renderBlocks(g, 'plain') };
  });
}

/** Unreachable for limit >= MIN_SPLIT_LIMIT; kept so a bug degrades to plain chunks instead of throwing. */
function hardSplit(blocks: readonly Block[], limit: number): Block[][] {
  const chars = Array.from(renderBlocks(blocks, 'plain'));
  const size = Math.max(1, Math.floor(limit / 2) - 1);
  const groups: Block[][] = [];
  for (let i = 0; i < chars.length; i += size) {
    const v = chars.slice(i, i + size).join('');
    if (v.trim()) groups.push([{ k: 'para', c: [{ k: 'text', v }] }]);
  }
  return groups.length > 0 ? groups : [[{ k: 'para', c: [{ k: 'text', v: EMPTY_MESSAGE_TEXT }] }]];
}
