/**
 * Untrusted text in prompts: the one place that escapes what people and event senders give
 * (chat text, attachment names, webhook headers, file names, email subjects) before it goes
 * between Steward's wrapper tags (`<chat_message>`, `<attachment>`, `<event>`, `<context>` for
 * workspace excerpts). A value must
 * stay inside the block it was put in: it can neither close it nor open a block of its own.
 * Pure: no I/O.
 */

/** The wrapper tags Steward's prompts put untrusted content in. */
export const WRAPPER_TAGS = ['chat_message', 'attachment', 'event', 'context', 'memory'] as const;
export type WrapperTag = (typeof WRAPPER_TAGS)[number];

const ATTR_CHARS = /[&"'<>\u0000-\u001f\u007f\u2028\u2029]/g;
const ATTR_ENTITIES: Record<string, string> = { '&': '&amp;', '"': '&quot;', "'": '&#39;', '<': '&lt;', '>': '&gt;' };

/**
 * A value for a double-quoted attribute of a wrapper tag: no quote, angle bracket or
 * ampersand survives unescaped, and line breaks and other control characters become spaces.
 */
export function attr(value: string): string {
  return value.replace(ATTR_CHARS, (c) => ATTR_ENTITIES[c] ?? ' ');
}

const tagPatterns = new Map<string, RegExp>();

/**
 * Text put between the given wrapper tags: every `<` that could open or close one of them
 * (`</event>`, `<EVENT source=...>`, `< /chat_message`) becomes `&lt;`, so the block ends
 * only where Steward ends it.
 */
export function neutralise(text: string, tags: readonly WrapperTag[]): string {
  if (tags.length === 0) return text;
  const key = tags.join('|');
  let pattern = tagPatterns.get(key);
  if (!pattern) {
    pattern = new RegExp(`<(?=\\s*/?\\s*(?:${key}))`, 'gi');
    tagPatterns.set(key, pattern);
  }
  return text.replace(pattern, '&lt;');
}

/** `<tag a="..." b="...">`, each attribute value escaped with `attr`. */
export function openTag(tag: WrapperTag, attributes: Record<string, string>): string {
  const attrs = Object.entries(attributes).map(([k, v]) => ` ${k}="${attr(v)}"`).join('');
  return `<${tag}${attrs}>`;
}

/** A whole block: the opening tag with escaped attributes, the neutralised body, the closing tag. */
export function wrapUntrusted(tag: WrapperTag, attributes: Record<string, string>, body: string): string {
  return `${openTag(tag, attributes)}\n${neutralise(body, [tag])}\n</${tag}>`;
}
