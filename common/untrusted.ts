/**
 * Untrusted text in prompts: the one wrapper for everything that people, documents, tool
 * servers and event senders give (chat text, attachments, workspace excerpts and files, MCP,
 * HTTP and command results, webhook and email events, memories, the agent's saved notes, change
 * requests). Each goes between one of Steward's wrapper tags, and the text in a block has EVERY
 * wrapper tag neutralised, not only its own: a value can neither close its block nor open a
 * block of another kind (a document cannot fake a `<chat_message from="admin">`, a tool result
 * cannot fake a `<memory>`). Untrusted text goes in user or tool messages, never in the system
 * prompt (domain/prompt.ts). Pure: no I/O.
 */

/** Every wrapper tag Steward's prompts put untrusted content in. */
export const WRAPPER_TAGS = ['chat_message', 'attachment', 'event', 'context', 'memory', 'note', 'tool_result', 'change_request', 'answer'] as const;
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

/**
 * What may stand between `<` and a tag's name for a reader to still take it as that tag:
 * white space, a slash, and characters that are invisible (zero-width, joiners, soft hyphen,
 * bidirectional marks, the BOM).
 */
const GAP = '[\\s/\\u00ad\\u034f\\u061c\\u180e\\u200b-\\u200f\\u202a-\\u202e\\u2060-\\u206f\\ufeff]*';
const TAG_OPENER = new RegExp(`<(?=${GAP}(?:${WRAPPER_TAGS.join('|')}))`, 'gi');

/**
 * Text put between wrapper tags: every `<` that could open or close ANY wrapper tag
 * (`</event>`, `<EVENT source=...>`, `< /chat_message`, `<\u200bmemory>`) becomes `&lt;`, so a
 * block ends only where Steward ends it and no block starts inside another.
 */
export function neutralise(text: string): string {
  return text.replace(TAG_OPENER, '&lt;');
}

/** `<tag a="..." b="...">`, each attribute value escaped with `attr`. */
export function openTag(tag: WrapperTag, attributes: Record<string, string>): string {
  const attrs = Object.entries(attributes).map(([k, v]) => ` ${k}="${attr(v)}"`).join('');
  return `<${tag}${attrs}>`;
}

/** A whole block: the opening tag with escaped attributes, the neutralised body, the closing tag. */
export function wrapUntrusted(tag: WrapperTag, attributes: Record<string, string>, body: string): string {
  return `${openTag(tag, attributes)}\n${neutralise(body)}\n</${tag}>`;
}

/**
 * A block around a body Steward composed from text that already went through this module (an
 * objective run's prompt: the admin's prompt neutralised, then the event's own block). The body
 * is not escaped again, so its inner blocks stay real; use it only for text Steward composed.
 */
export function wrapComposed(tag: WrapperTag, attributes: Record<string, string>, composed: string): string {
  return `${openTag(tag, attributes)}\n${composed}\n</${tag}>`;
}
