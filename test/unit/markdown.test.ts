import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { Lexer } from 'marked';
import {
  EMPTY_MESSAGE_TEXT,
  MAX_INLINE_DELIMITERS,
  PLATFORM_LIMITS,
  renderDiscord,
  renderPlain,
  renderTelegramHtml,
  splitMessage,
  visibleLength,
  type Dialect,
  type MessagePart,
} from '../../adapters/render/markdown.js';

const DIALECTS: readonly Dialect[] = ['telegram-html', 'discord', 'plain'];

/**
 * Checks what Telegram requires of parse_mode=HTML text, plus the nesting rules it documents:
 * only allowed tags, properly nested and closed; attributes only href on <a> and
 * class="language-x" on a <code> directly inside <pre>; no raw < or > outside tags; every &
 * starts an entity Telegram knows; <blockquote> not nested; <pre>/<code> contain no other tags;
 * <a> contains no <a>/<code>/<pre>; b/i/s contain no <code>/<pre>.
 * Returns null when the text is fine, else what is wrong.
 */
function telegramHtmlProblem(html: string): string | null {
  const allowed = new Set(['b', 'i', 'u', 's', 'code', 'pre', 'a', 'blockquote', 'tg-spoiler']);
  const tagRe = /<(\/?)([a-z-]+)((?: [a-z]+="[^"<>]*")*)>/y;
  const entityRe = /&(?:lt|gt|amp|quot|#[0-9]{1,7}|#x[0-9a-fA-F]{1,6});/y;
  const stack: string[] = [];
  let i = 0;
  while (i < html.length) {
    const ch = html[i];
    if (ch === '<') {
      tagRe.lastIndex = i;
      const m = tagRe.exec(html);
      if (!m) return `malformed tag at ${i}: ${JSON.stringify(html.slice(i, i + 20))}`;
      const [whole, close, name = '', attrs = ''] = m;
      if (!allowed.has(name)) return `tag <${name}> not allowed`;
      const attrList = [...attrs.matchAll(/ ([a-z]+)="([^"]*)"/g)].map((a) => [a[1] ?? '', a[2] ?? ''] as const);
      if (close) {
        if (attrList.length > 0) return 'attributes on a closing tag';
        const open = stack.pop();
        if (open !== name) return `</${name}> closes <${open ?? 'nothing'}>`;
      } else {
        const parent = stack[stack.length - 1];
        if (parent === 'code' || (parent === 'pre' && name !== 'code')) return `<${name}> inside <${parent}>`;
        if (name === 'blockquote' && stack.includes('blockquote')) return 'nested <blockquote>';
        if (stack.includes('a') && (name === 'a' || name === 'code' || name === 'pre')) return `<${name}> inside <a>`;
        if ((name === 'code' || name === 'pre') && stack.some((t) => t === 'b' || t === 'i' || t === 's' || t === 'u'))
          return `<${name}> inside formatting`;
        if (name === 'a') {
          if (attrList.length !== 1 || attrList[0]?.[0] !== 'href') return '<a> needs exactly href';
          const value = attrList[0][1];
          if (/&(?!(?:lt|gt|amp|quot|#[0-9]{1,7}|#x[0-9a-fA-F]{1,6});)/.test(value)) return 'bad & in href';
        } else if (attrList.length > 0) {
          const [attr, value] = attrList[0] ?? ['', ''];
          if (name !== 'code' || parent !== 'pre' || attrList.length !== 1 || attr !== 'class') return `attribute on <${name}>`;
          if (!/^language-[A-Za-z0-9_+#.-]+$/.test(value)) return `bad class ${value}`;
        }
        stack.push(name);
      }
      i += whole.length;
    } else if (ch === '>') {
      return `raw > at ${i}`;
    } else if (ch === '&') {
      entityRe.lastIndex = i;
      const m = entityRe.exec(html);
      if (!m) return `& at ${i} does not start an entity`;
      i += m[0].length;
    } else {
      i++;
    }
  }
  return stack.length > 0 ? `unclosed <${stack.join('><')}>` : null;
}

function assertTelegramHtml(html: string): void {
  const problem = telegramHtmlProblem(html);
  assert.equal(problem, null, `${problem}\n${html}`);
}

const nonWs = (s: string): string => s.replace(/\s+/g, '');

/** True when `needle`'s characters occur in `hay` in the same order (not necessarily adjacent). */
function isSubsequence(needle: string, hay: string): boolean {
  let j = 0;
  for (let i = 0; i < hay.length && j < needle.length; i++) if (hay[i] === needle[j]) j++;
  return j === needle.length;
}

const hasLoneSurrogate = (s: string): boolean =>
  /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(s);

function assertFits(parts: readonly MessagePart[], dialect: Dialect, limit: number): void {
  for (const p of parts) {
    assert.ok(visibleLength(p.rendered, dialect) <= limit, `rendered ${visibleLength(p.rendered, dialect)} > ${limit}`);
    assert.ok(p.plain.length <= limit, `plain ${p.plain.length} > ${limit}`);
  }
}

// ------------------------------------------------------------------------------------------------
// Rendering, construct by construct
// ------------------------------------------------------------------------------------------------

describe('renderTelegramHtml', () => {
  it('renders emphasis, strong, strikethrough and inline code', () => {
    assert.equal(renderTelegramHtml('**a** _b_ ~~c~~ `d`'), '<b>a</b> <i>b</i> <s>c</s> <code>d</code>');
    assert.equal(renderTelegramHtml('***both***'), '<b><i>both</i></b>');
    assert.equal(renderTelegramHtml('**bold _both_ bold**'), '<b>bold <i>both</i> bold</b>');
  });
  it('escapes &, <, > in text and code, decodes Markdown entities and backslash escapes', () => {
    assert.equal(renderTelegramHtml('a < b && c > d'), 'a &lt; b &amp;&amp; c &gt; d');
    assert.equal(renderTelegramHtml('`x<y&z`'), '<code>x&lt;y&amp;z</code>');
    assert.equal(renderTelegramHtml('AT&amp;T &copy; &#x41;'), 'AT&amp;T © A');
    assert.equal(renderTelegramHtml('\\*not em\\* \\<tag\\>'), '*not em* &lt;tag&gt;');
  });
  it('keeps raw HTML as visible text', () => {
    assert.equal(renderTelegramHtml('<b>x</b> and <script>'), '&lt;b&gt;x&lt;/b&gt; and &lt;script&gt;');
    assert.equal(renderTelegramHtml('<div class="x">hi & bye</div>'), '&lt;div class="x"&gt;hi &amp; bye&lt;/div&gt;');
    assert.equal(renderTelegramHtml('one<br>two'), 'one\ntwo');
  });
  it('renders headings as bold lines', () => {
    assert.equal(renderTelegramHtml('# Title\n\ntext'), '<b>Title</b>\n\ntext');
    assert.equal(renderTelegramHtml('Setext\n==='), '<b>Setext</b>');
    assert.equal(renderTelegramHtml('#### Deep'), '<b>Deep</b>');
  });
  it('never puts <code> inside bold or a link (Telegram forbids it)', () => {
    assert.equal(renderTelegramHtml('## Run `npm i`'), '<b>Run </b><code>npm i</code>');
    assert.equal(renderTelegramHtml('**run `x` now**'), '<b>run </b><code>x</code><b> now</b>');
    assert.equal(renderTelegramHtml('[`fn()`](https://docs.io)'), '<a href="https://docs.io">fn()</a>');
  });
  it('renders links, autolinks and images as <a href>, escaping the URL', () => {
    assert.equal(renderTelegramHtml('[x](https://e.io/?a=1&b="2")'), '<a href="https://e.io/?a=1&amp;b=&quot;2&quot;">x</a>');
    assert.equal(renderTelegramHtml('<https://auto.io>'), '<a href="https://auto.io">https://auto.io</a>');
    assert.equal(renderTelegramHtml('see www.ex.com'), 'see <a href="http://www.ex.com">www.ex.com</a>');
    assert.equal(renderTelegramHtml('mail x@y.com'), 'mail x@y.com');
    assert.equal(renderTelegramHtml('![cat](https://i.io/c.png)'), '<a href="https://i.io/c.png">cat</a>');
    assert.equal(renderTelegramHtml('[**b** x](https://e.io)'), '<a href="https://e.io"><b>b</b> x</a>');
  });
  it('shows links Telegram would reject as text (url)', () => {
    assert.equal(renderTelegramHtml('[js](javascript:alert)'), 'js (javascript:alert)');
    assert.equal(renderTelegramHtml('[rel](/docs)'), 'rel (/docs)');
  });
  it('renders fenced and indented code blocks, keeping the language', () => {
    assert.equal(renderTelegramHtml('```ts\nconst a = 1 < 2;\n```'), '<pre><code class="language-ts">const a = 1 &lt; 2;</code></pre>');
    assert.equal(renderTelegramHtml('```python title="x"\npass\n```'), '<pre><code class="language-python">pass</code></pre>');
    assert.equal(renderTelegramHtml('```\nplain\n```'), '<pre>plain</pre>');
    assert.equal(renderTelegramHtml('    indented'), '<pre>indented</pre>');
    assert.equal(renderTelegramHtml('```"><script>\nx\n```'), '<pre>x</pre>');
  });
  it('renders lists: unordered, ordered with start, nested, tasks', () => {
    assert.equal(renderTelegramHtml('- a\n- **b**'), '• a\n• <b>b</b>');
    assert.equal(renderTelegramHtml('3. c\n4. d'), '3. c\n4. d');
    assert.equal(renderTelegramHtml('- a\n  1. x\n  2. y\n     - z'), '• a\n  1. x\n  2. y\n     • z');
    assert.equal(renderTelegramHtml('- [x] done\n- [ ] todo'), '• ☑ done\n• ☐ todo');
  });
  it('renders blockquotes, flattening nested ones', () => {
    assert.equal(renderTelegramHtml('> quoted **b**'), '<blockquote>quoted <b>b</b></blockquote>');
    assert.equal(renderTelegramHtml('> a\n> > b'), '<blockquote>a\n\nb</blockquote>');
  });
  it('renders tables as aligned columns in <pre>', () => {
    assert.equal(
      renderTelegramHtml('| Name | Qty |\n|:--|--:|\n| apple | 10 |\n| **kiwi** & co | 2 |'),
      '<pre>Name      | Qty\n----------+----\napple     |  10\nkiwi &amp; co |   2</pre>',
    );
  });
  it('renders hr and line breaks', () => {
    assert.equal(renderTelegramHtml('a\n\n---\n\nb'), 'a\n\n——————————\n\nb');
    assert.equal(renderTelegramHtml('a  \nb\nc'), 'a\nb\nc');
  });
  it('is empty for input without visible content', () => {
    assert.equal(renderTelegramHtml(''), '');
    assert.equal(renderTelegramHtml('  \n\n'), '');
    assert.equal(renderTelegramHtml('[ref]: https://x.io'), '');
  });
});

describe('renderDiscord', () => {
  it('keeps what Discord renders itself', () => {
    assert.equal(renderDiscord('**a** _b_ ~~c~~ `d`'), '**a** *b* ~~c~~ `d`');
    assert.equal(renderDiscord('# H1\n\n### H3'), '# H1\n\n### H3');
    assert.equal(renderDiscord('- a\n  - b\n1. x'), '- a\n  - b\n\n1. x');
    assert.equal(renderDiscord('> q\n> > nested'), '> q\n> \n> nested');
    assert.equal(renderDiscord('```ts\nlet a = 1;\n```'), '```ts\nlet a = 1;\n```');
    assert.equal(renderDiscord('[docs](https://d.io/a_(b))'), '[docs](https://d.io/a_%28b%29)');
    assert.equal(renderDiscord('<https://auto.io> www.ex.com'), 'https://auto.io http://www.ex.com');
  });
  it('converts headings deeper than ### to bold lines', () => {
    assert.equal(renderDiscord('#### Four'), '**Four**');
    assert.equal(renderDiscord('###### Six `x`'), '**Six `x`**');
  });
  it('converts tables to a fenced block with aligned columns', () => {
    assert.equal(renderDiscord('| a | bb |\n|---|:-:|\n| ccc | d |'), '```\na   | bb\n----+---\nccc | d\n```');
  });
  it('converts images to "alt (url)" and hr to a line of —', () => {
    assert.equal(renderDiscord('![a cat](https://i.io/c.png)'), 'a cat (https://i.io/c.png)');
    assert.equal(renderDiscord('![](https://i.io/c.png)'), 'https://i.io/c.png');
    assert.equal(renderDiscord('---'), '——————————');
  });
  it('escapes raw HTML and text that Discord would read as formatting or mentions', () => {
    assert.equal(renderDiscord('<div>x</div>'), '\\<div\\>x\\</div\\>');
    assert.equal(renderDiscord('<b>x</b>'), '\\<b\\>x\\</b\\>');
    assert.equal(renderDiscord('2 \\* 3 and a\\_b and <@123>'), '2 \\* 3 and a\\_b and \\<@123\\>');
    assert.equal(renderDiscord('\\# not heading\n\\- not item'), '\\# not heading\n\\- not item');
    assert.equal(renderDiscord('a || b'), 'a \\|\\| b');
  });
  it('uses longer backtick fences for code spans with backticks and breaks ``` inside code blocks', () => {
    assert.equal(renderDiscord('`` a`b ``'), '``a`b``');
    assert.equal(renderDiscord('````\n```\n````'), '```\n`\u200b`\u200b`\n```');
  });
  it('renders task items with boxes and keeps ordered starts', () => {
    assert.equal(renderDiscord('- [x] done\n- [ ] todo'), '- ☑ done\n- ☐ todo');
    assert.equal(renderDiscord('7. seven\n8. eight'), '7. seven\n8. eight');
  });
  it('moves whitespace out of emphasis markers', () => {
    assert.equal(renderDiscord('**a `b` c**'), '**a `b` c**');
    assert.equal(renderDiscord('*x* **y**'), '*x* **y**');
  });
});

describe('renderPlain', () => {
  it('removes formatting', () => {
    assert.equal(renderPlain('# Title\n\n**a** _b_ ~~c~~ `d`'), 'Title\n\na b c d');
  });
  it('turns links into "text (url)" and keeps bare URLs once', () => {
    assert.equal(renderPlain('[docs](https://d.io) and https://x.io and <https://y.io>'), 'docs (https://d.io) and https://x.io and https://y.io');
    assert.equal(renderPlain('[https://same.io](https://same.io)'), 'https://same.io');
    assert.equal(renderPlain('![alt](https://i.io/a.png) ![](https://i.io/b.png)'), 'alt (https://i.io/a.png) https://i.io/b.png');
  });
  it('keeps code block content without fences', () => {
    assert.equal(renderPlain('```ts\nconst a = `x`;\n```'), 'const a = `x`;');
  });
  it('keeps list bullets and numbers', () => {
    assert.equal(renderPlain('- a\n- b\n  1. c\n  2. d\n- [x] e'), '• a\n• b\n  1. c\n  2. d\n• ☑ e');
    assert.equal(renderPlain('10. ten\n11. eleven'), '10. ten\n11. eleven');
  });
  it('renders quotes, tables, html and hr as text', () => {
    assert.equal(renderPlain('> a\n> b'), '> a\n> b');
    assert.equal(renderPlain('| a | b |\n|---|--:|\n| 1 | 22 |'), 'a |  b\n--+---\n1 | 22');
    assert.equal(renderPlain('<div>x & y</div>'), '<div>x & y</div>');
    assert.equal(renderPlain('a\n\n***\n\nb'), 'a\n\n——————————\n\nb');
  });
});

describe('visibleLength', () => {
  it('counts Telegram text after tags and entities, in UTF-16 units', () => {
    assert.equal(visibleLength('<b>ab</b> &amp;&lt;&gt;&quot;&#65;&#x1F600;', 'telegram-html'), 2 + 1 + 5 + 2);
    assert.equal(visibleLength('<a href="https://very.long/url">x</a>', 'telegram-html'), 1);
    assert.equal(visibleLength('😀', 'telegram-html'), 2);
  });
  it('counts the whole string for discord and plain', () => {
    assert.equal(visibleLength('**ab**', 'discord'), 6);
    assert.equal(visibleLength('<b>', 'plain'), 3);
  });
});

// ------------------------------------------------------------------------------------------------
// Splitting, by example
// ------------------------------------------------------------------------------------------------

function paragraph(seed: number, length: number): string {
  const words = ['alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'eta', 'theta', 'iota', 'kappa'];
  let s = '';
  let i = seed;
  while (s.length < length) {
    s += (s ? ' ' : '') + (words[i % words.length] ?? 'x');
    if (i % 9 === 4) s += '.';
    i += 7;
  }
  return `${s}.`;
}

describe('bounded parsing', () => {
  it('takes an inline run with more emphasis delimiters than MAX_INLINE_DELIMITERS as plain text (marked is quadratic in them)', () => {
    const few = '_a_ '.repeat(10).trim();
    assert.match(renderTelegramHtml(few), /<i>a<\/i>/);
    const many = '/_0'.repeat(MAX_INLINE_DELIMITERS + 1);
    const html = renderTelegramHtml(many);
    assert.ok(!html.includes('<i>'), 'no emphasis parsed');
    assert.equal(visibleLength(html, 'telegram-html'), many.length, 'every character kept as text');
    // a 20,000-character run splits into parts that keep all of it
    const huge = '/_0'.repeat(6667);
    const parts = splitMessage(huge, 'telegram-html', 4096);
    assert.equal(parts.map((p) => p.plain).join(''), huge);
  });

  it('counts escaped delimiters as text: the Markdown of a split piece (every delimiter escaped) reads back as the piece', () => {
    // a run of escaped delimiters past the bound is still parsed, so the escapes are read
    const escaped = '\\~\\!hz'.repeat(MAX_INLINE_DELIMITERS + 100);
    assert.equal(renderPlain(escaped), '~!hz'.repeat(MAX_INLINE_DELIMITERS + 100));
    // a long paragraph of delimiters splits for Discord into pieces whose Markdown renders within the limit (CI, seed 1148247064)
    const text = '~!hz'.repeat(500);
    const parts = splitMessage(text, 'discord', PLATFORM_LIMITS.discord);
    assert.ok(parts.length > 1);
    for (const p of parts) {
      assert.equal(renderDiscord(p.markdown), p.rendered, 'the piece\'s Markdown renders as the piece');
      assert.ok(renderDiscord(p.markdown).length <= PLATFORM_LIMITS.discord, `${renderDiscord(p.markdown).length} characters`);
      assert.equal(renderPlain(p.markdown), p.plain);
    }
    assert.equal(parts.map((p) => p.plain).join(''), renderPlain(text));
  });
});

describe('splitMessage', () => {
  it('returns one part with the full rendering when the message fits', () => {
    const md = '# Hi\n\nSome **text** with a [link](https://x.io).';
    for (const d of DIALECTS) {
      const parts = splitMessage(md, d, 4096);
      assert.equal(parts.length, 1);
      assert.equal(parts[0]?.markdown, md);
      assert.equal(parts[0]?.plain, renderPlain(md));
    }
    assert.equal(splitMessage(md, 'telegram-html', 4096)[0]?.rendered, renderTelegramHtml(md));
    assert.equal(splitMessage(md, 'discord', 2000)[0]?.rendered, renderDiscord(md));
  });

  it('yields "(empty message)" for empty input', () => {
    for (const md of ['', '   ', '\n\n \n', '[ref]: https://x.io', '```\n\n```']) {
      for (const d of DIALECTS) {
        assert.deepEqual(splitMessage(md, d, 4096), [{ markdown: EMPTY_MESSAGE_TEXT, rendered: EMPTY_MESSAGE_TEXT, plain: EMPTY_MESSAGE_TEXT }]);
      }
    }
  });

  it('splits a 10,000-character reply at paragraph boundaries', () => {
    const paras = Array.from({ length: 25 }, (_, i) => paragraph(i, 380 + (i % 5) * 20));
    const md = paras.join('\n\n');
    assert.ok(md.length >= 10_000);
    for (const [dialect, limit] of [['telegram-html', PLATFORM_LIMITS.telegram], ['discord', PLATFORM_LIMITS.discord], ['plain', 2000]] as const) {
      const parts = splitMessage(md, dialect, limit);
      assert.ok(parts.length >= Math.ceil(md.length / limit), `${dialect}: ${parts.length} parts`);
      assertFits(parts, dialect, limit);
      // every part is a run of whole paragraphs, and together they are the message in order
      assert.deepEqual(parts.flatMap((p) => p.markdown.split('\n\n')), paras);
      assert.deepEqual(parts.flatMap((p) => p.plain.split('\n\n')), paras);
      // greedy: no part could have taken the next paragraph as well
      for (let i = 0; i + 1 < parts.length; i++) {
        const next = parts[i + 1]?.markdown.split('\n\n')[0] ?? '';
        assert.ok((parts[i]?.plain.length ?? 0) + 2 + next.length > limit);
      }
    }
  });

  it('splits a 5,000-line code block into re-fenced blocks with the language', () => {
    const lines = Array.from({ length: 5000 }, (_, i) => `print("line ${i}")  # a < b & c`);
    const md = `Intro.\n\n\`\`\`python\n${lines.join('\n')}\n\`\`\`\n\nOutro.`;
    for (const [dialect, limit] of [['telegram-html', 4096], ['discord', 2000], ['plain', 2000]] as const) {
      const parts = splitMessage(md, dialect, limit);
      assertFits(parts, dialect, limit);
      assert.ok(parts.length >= Math.ceil(lines.join('\n').length / limit), `${dialect}: ${parts.length} parts`);
      const seen: string[] = [];
      const others: string[] = [];
      for (const p of parts) {
        // each part's Markdown is a sequence of valid blocks: code pieces fenced with the language
        for (const tok of new Lexer({ gfm: true }).lex(p.markdown)) {
          if (tok.type === 'space') continue;
          if (tok.type !== 'code') {
            others.push(tok.raw.trim());
            continue;
          }
          assert.equal(tok.lang, 'python');
          assert.match(tok.raw, /^```python\n[\s\S]*\n```\n*$/);
          seen.push(...String(tok.text).split('\n'));
        }
        if (p.markdown.startsWith('```')) {
          if (dialect === 'telegram-html') assert.ok(p.rendered.startsWith('<pre><code class="language-python">'));
          if (dialect === 'discord') assert.ok(p.rendered.startsWith('```python\n'));
        }
        if (dialect === 'telegram-html') assertTelegramHtml(p.rendered);
      }
      assert.deepEqual(seen, lines);
      assert.deepEqual(others, ['Intro.', 'Outro.']);
      for (const p of parts.slice(1, -1)) {
        if (dialect === 'telegram-html') assert.ok(p.rendered.endsWith('</code></pre>'));
        if (dialect === 'discord') assert.ok(p.rendered.endsWith('\n```'));
      }
    }
  });

  it('splits a single 9,000-character word at character boundaries', () => {
    const word = 'x'.repeat(9000);
    const tg = splitMessage(word, 'telegram-html', 4096);
    assert.deepEqual(tg.map((p) => p.plain.length), [4096, 4096, 808]);
    assert.equal(tg.map((p) => p.plain).join(''), word);
    const dc = splitMessage(word, 'discord', 2000);
    assert.equal(dc.length, 5);
    assert.equal(dc.map((p) => p.rendered).join(''), word);
  });

  it('never splits a surrogate pair or an HTML entity', () => {
    const emoji = '😀'.repeat(4500); // 9,000 UTF-16 units
    for (const d of DIALECTS) {
      const parts = splitMessage(emoji, d, 4095); // odd limit: a naive cut would land inside a pair
      assertFits(parts, d, 4095);
      for (const p of parts) assert.ok(!hasLoneSurrogate(p.plain) && !hasLoneSurrogate(p.rendered));
      assert.equal(parts.map((p) => p.plain).join(''), emoji);
    }
    const amps = '&<>'.repeat(3000);
    const parts = splitMessage(amps, 'telegram-html', 4096);
    assert.equal(parts.length, 3);
    for (const p of parts) assertTelegramHtml(p.rendered);
    assert.equal(parts.map((p) => p.plain).join(''), amps);
    assert.ok(parts.every((p) => visibleLength(p.rendered, 'telegram-html') <= 4096));
    assert.ok((parts[0]?.rendered.length ?? 0) > 4096); // the limit is on visible text, not on the HTML
  });

  it('splits a long paragraph at sentence ends, then at spaces', () => {
    const sentences = Array.from({ length: 40 }, (_, i) => `Sentence number ${i} says something mildly interesting.`);
    const parts = splitMessage(sentences.join(' '), 'discord', 200);
    assertFits(parts, 'discord', 200);
    for (const p of parts) assert.match(p.plain, /^Sentence number \d+.*interesting\.$/);
    assert.equal(parts.map((p) => p.plain).join(' '), sentences.join(' '));

    const words = Array.from({ length: 200 }, (_, i) => `word${i}`).join(' ');
    const wparts = splitMessage(words, 'plain', 100);
    for (const p of wparts) assert.match(p.plain, /^word\d+( word\d+)*$/);
    assert.equal(wparts.map((p) => p.plain).join(' '), words);
  });

  it('keeps formatting and whole link URLs on both sides of a cut', () => {
    const md = `**${'bold words '.repeat(30).trim()}** and [${'link text '.repeat(10).trim()}](https://example.com/some/long/path?q=1&r=2)`;
    const parts = splitMessage(md, 'telegram-html', 120);
    assertFits(parts, 'telegram-html', 120);
    for (const p of parts) {
      assertTelegramHtml(p.rendered);
      if (p.plain.includes('link')) assert.ok(p.rendered.includes('<a href="https://example.com/some/long/path?q=1&amp;r=2">'));
      if (p.plain.startsWith('bold')) assert.ok(p.rendered.startsWith('<b>bold'));
      // the Markdown of a split piece renders to the same thing
      assert.equal(renderTelegramHtml(p.markdown), p.rendered);
    }
  });

  it('turns a link whose URL is longer than the limit into text rather than failing', () => {
    const url = `https://example.com/${'a'.repeat(300)}`;
    const md = `see [here](${url}) now`;
    const parts = splitMessage(md, 'plain', 100);
    assertFits(parts, 'plain', 100);
    assert.ok(isSubsequence(nonWs(renderPlain(md)), nonWs(parts.map((p) => p.plain).join(''))));
  });

  it('splits long lists between items, continuing the numbering', () => {
    const md = Array.from({ length: 300 }, (_, i) => `${i + 1}. item number ${i + 1} with **some** text`).join('\n');
    const parts = splitMessage(md, 'discord', 2000);
    assert.ok(parts.length > 1);
    assertFits(parts, 'discord', 2000);
    let expected = 1;
    for (const p of parts) {
      for (const line of p.rendered.split('\n')) {
        assert.equal(line, `${expected}. item number ${expected} with **some** text`);
        expected++;
      }
    }
    assert.equal(expected, 301);
  });

  it('continues a list item too large for one message without a second bullet', () => {
    const md = `- short\n- ${paragraph(1, 500)}\n- last`;
    const parts = splitMessage(md, 'plain', 200);
    assertFits(parts, 'plain', 200);
    const bullets = parts.map((p) => p.plain).join('\n').split('\n').filter((l) => l.startsWith('• '));
    assert.equal(bullets.length, 3);
    assert.ok(parts.slice(1, -1).some((p) => p.plain.startsWith('  ')));
  });

  it('splits tables between rows, repeating the header', () => {
    const rows = Array.from({ length: 200 }, (_, i) => `| row ${i} | ${i * i} |`);
    const md = `| name | square |\n|---|---:|\n${rows.join('\n')}`;
    const parts = splitMessage(md, 'telegram-html', 1000);
    assert.ok(parts.length > 1);
    assertFits(parts, 'telegram-html', 1000);
    for (const p of parts) {
      assertTelegramHtml(p.rendered);
      assert.match(p.rendered, /^<pre>name {4}\| square\n/);
      assert.ok(p.markdown.startsWith('| name | square |'));
    }
  });

  it('re-quotes every piece of a long blockquote', () => {
    const md = Array.from({ length: 30 }, (_, i) => `> ${paragraph(i, 150)}`).join('\n>\n');
    const parts = splitMessage(md, 'telegram-html', 1000);
    assert.ok(parts.length > 1);
    for (const p of parts) {
      assert.ok(p.rendered.startsWith('<blockquote>') && p.rendered.endsWith('</blockquote>'));
      assert.ok(p.markdown.startsWith('> '));
    }
  });

  it('keeps every quote mark and list marker when a paragraph has blank or whitespace-only lines (fast-check counterexample)', () => {
    // The paragraph in the quote ends in a line holding only &nbsp;. Rendered whole, that line got
    // a "> " of its own in plain text (51 characters, too long for 50); the split trimmed the
    // &nbsp; and that ">" went with it (content lost). Blank edge lines of a paragraph are dropped
    // now, and a quote's whitespace-only lines get no "> ".
    const md = '> ?   > > ****| a | b |\n|---|:-:|\n| 1 | 2 |\n&nbsp;';
    assert.equal(renderPlain(md), '> ?   > > ****| a | b |\n> |---|:-:|\n> | 1 | 2 |');
    assert.equal(renderTelegramHtml(md), '<blockquote>?   &gt; &gt; ****| a | b |\n|---|:-:|\n| 1 | 2 |</blockquote>');
    const parts = splitMessage(md, 'telegram-html', 50);
    assert.equal(parts.length, 1);
    assert.equal(parts[0]?.rendered, renderTelegramHtml(md));
    assert.equal(parts[0]?.plain, renderPlain(md));
    // the same with a whitespace-only line inside the quote, and with a blank first line (<br>)
    // under a list marker, which a split used to merge with the next line
    const inner = `> ${'x'.repeat(30)}<br>&nbsp;<br>${'y'.repeat(30)}`;
    assert.equal(renderPlain(inner), `> ${'x'.repeat(30)}\n\n> ${'y'.repeat(30)}`);
    const marker = '> 1. <br>| a | b |\n|---|:-:|\n| 1 | 2 |\n';
    assert.equal(renderPlain(marker), '> 1. | a | b |\n>    |---|:-:|\n>    | 1 | 2 |');
    // a nested block with nothing visible is dropped, so no piece of a split quote is blank
    const blankNested = '> | a | b |\n|---|:-:|\n| 1 | 2 |\n> > &#32;';
    assert.equal(renderPlain(blankNested), '> | a | b |\n> |---|:-:|\n> | 1 | 2 |');
    // blank edge lines go even when the only thing left is an image without alt text (its URL)
    const imageOnly = '> - <br>&nbsp;<br>![](http://i.io/x)';
    assert.equal(renderPlain(imageOnly), '> • http://i.io/x');
    for (const m of [md, inner, marker, blankNested, imageOnly]) {
      for (const d of DIALECTS) for (const limit of [16, 30, 50, 200]) checkSplit(m, d, limit);
    }
  });

  it('keeps an image without alt text at the end of bold text when a cut falls just before it', () => {
    const md = '**> ![](http://i.io/x)**[t](https://x.io/a)';
    const parts = splitMessage(md, 'telegram-html', 16);
    assert.ok(parts.some((p) => p.plain.includes('http://i.io/x')));
    for (const d of DIALECTS) for (const limit of [16, 30, 50]) checkSplit(md, d, limit);
  });

  it('rejects limits too small to hold anything', () => {
    assert.throws(() => splitMessage('hi', 'plain', 10), RangeError);
    assert.throws(() => splitMessage('hi', 'plain', Number.NaN), RangeError);
  });
});

// ------------------------------------------------------------------------------------------------
// Properties
// ------------------------------------------------------------------------------------------------

const FRAGMENTS = [
  '**', '*', '_', '__', '~~', '`', '``', '```', '```ts\n', '\n```\n', '[', ']', '](', ')', '![', '<', '>', '&', '&amp;',
  '&#128512;', '&nbsp;', '#', '## ', '#### ', '|', '| a | b |\n|---|:-:|\n| 1 | 2 |\n', '\n', '\n\n', '- ', '* ', '1. ', '2) ',
  '- [ ] ', '- [x] ', '> ', '> > ', '    ', '  \n', '\t', ' ', '!', '\\', '---\n', '<br>', '<div>', '</div>', '<!-- c -->',
  'http://x.io/a_b', 'https://example.com/path?q=1&r=2', `https://example.com/${'p'.repeat(90)}`, 'www.ex.com', 'me@x.io',
  '😀', '👍🏽', '👨‍👩‍👧', '\u200d', 'é', 'e\u0301', '中文。', 'Hello.', 'world', '\r\n',
];

const markdownish = fc
  .array(fc.oneof({ weight: 5, arbitrary: fc.constantFrom(...FRAGMENTS) }, { weight: 2, arbitrary: fc.string({ unit: 'grapheme', maxLength: 12 }) }, { weight: 1, arbitrary: fc.stringMatching(/^[a-z]{1,60}$/) }), { maxLength: 60 })
  .map((xs) => xs.join(''));

/** Long inputs, so that limits like 2000 and 4096 are exceeded too. */
const longMarkdownish = fc
  .tuple(markdownish, fc.integer({ min: 10, max: 200 }), markdownish)
  .map(([a, n, b]) => a.repeat(Math.min(n, Math.ceil(12_000 / Math.max(1, a.length)))) + b);

const anyString = fc.oneof(fc.string({ maxLength: 300 }), fc.string({ unit: 'binary', maxLength: 300 }), fc.string({ unit: 'grapheme', maxLength: 200 }));

const dialectArb = fc.constantFrom<Dialect>(...DIALECTS);
const limitArb = fc.constantFrom(50, 200, 2000, 4096);

/**
 * The invariants every split must satisfy:
 * - nothing throws, there is at least one part, and no part is blank;
 * - each part's rendered text (visibleLength in its dialect) and its plain text fit the limit;
 * - Telegram HTML is well-formed (for each part, and for the whole message);
 * - no content is lost: the non-whitespace characters of renderPlain(whole message) form a
 *   subsequence of the non-whitespace characters of the parts' plain texts concatenated. (A
 *   subsequence, not equality: a cut inside a link repeats "(url)" in both parts, a split table
 *   repeats its header, a re-fenced code block is fenced again. Cuts only drop whitespace.)
 * - a message that fits comes back as one part identical to the full rendering;
 * - deterministic: the same call gives the same parts.
 */
function checkSplit(md: string, dialect: Dialect, limit: number): void {
  const parts = splitMessage(md, dialect, limit);
  assert.ok(parts.length >= 1);
  for (const p of parts) {
    assert.ok(visibleLength(p.rendered, dialect) <= limit, `rendered too long: ${JSON.stringify(p.rendered)}`);
    assert.ok(p.plain.length <= limit, `plain too long: ${JSON.stringify(p.plain)}`);
    assert.notEqual(p.plain.trim(), '');
    assert.notEqual(p.rendered.trim(), '');
    assert.ok(!hasLoneSurrogate(p.plain) && !hasLoneSurrogate(p.rendered), 'lone surrogate');
    if (dialect === 'telegram-html') assertTelegramHtml(p.rendered);
  }
  const whole = renderPlain(md);
  assert.ok(
    isSubsequence(nonWs(whole), nonWs(parts.map((p) => p.plain).join(''))),
    `content lost:\n${JSON.stringify(whole)}\n${JSON.stringify(parts.map((p) => p.plain))}`,
  );
  const full = dialect === 'telegram-html' ? renderTelegramHtml(md) : dialect === 'discord' ? renderDiscord(md) : whole;
  if (whole.trim() !== '' && visibleLength(full, dialect) <= limit && whole.length <= limit) {
    assert.equal(parts.length, 1);
    assert.equal(parts[0]?.rendered, full);
  }
  assert.deepEqual(splitMessage(md, dialect, limit), parts);
}

/** MARKDOWN_FC_SCALE=20 runs the properties 20 times longer (for local soak runs). */
const SCALE = Math.max(1, Number(process.env.MARKDOWN_FC_SCALE) || 1);

describe('properties', () => {
  it('renderers never throw and Telegram HTML is always well-formed', () => {
    fc.assert(
      fc.property(fc.oneof(anyString, markdownish), (md) => {
        assertTelegramHtml(renderTelegramHtml(md));
        renderDiscord(md);
        renderPlain(md);
      }),
      { numRuns: 400 * SCALE },
    );
  });

  it('splitting arbitrary strings keeps every invariant', () => {
    fc.assert(fc.property(anyString, dialectArb, limitArb, checkSplit), { numRuns: 200 * SCALE });
  });

  it('splitting markdown-ish strings keeps every invariant', () => {
    fc.assert(fc.property(markdownish, dialectArb, limitArb, checkSplit), { numRuns: 300 * SCALE });
  });

  it('splitting long markdown-ish strings keeps every invariant', () => {
    fc.assert(fc.property(longMarkdownish, dialectArb, limitArb, checkSplit), { numRuns: 60 * SCALE });
  });
});
