/**
 * A mail message (parsed by mailparser) as a Markdown document of a workspace's `inbox/`: its
 * headers in front matter (machine-readable; the indexer leaves front matter out) and again as a
 * header block (so they are found by search), its text (text/plain, or the HTML converted to
 * text), its text attachments (text/*, .md, .txt) inline as sections of their own, the others
 * listed by name, type and size. Bounded: the text and each attachment are cut (and say so).
 *
 * Everything here is the sender's text: it is knowledge, quoted as untrusted context like any
 * document, never instructions.
 */
import { createHash } from 'node:crypto';
import type { AddressObject, Attachment, ParsedMail } from 'mailparser';
import { stringify } from 'yaml';

/** The message text kept (characters). */
export const INBOX_MAX_TEXT = 256 * 1024;
/** Each text attachment kept inline (characters). */
export const INBOX_MAX_ATTACHMENT_TEXT = 64 * 1024;
const MAX_INLINE_ATTACHMENTS = 20;

export interface InboxHeaders {
  from: string | null;
  to: string | null;
  cc: string | null;
  date: string | null;
  subject: string | null;
  messageId: string | null;
}

export interface InboxDocument {
  /** The file name under `inbox/`. */
  fileName: string;
  markdown: string;
  headers: InboxHeaders;
  /** Every address of To and Cc (lower case). */
  recipients: string[];
}

const oneLine = (s: string | undefined | null, max = 998): string | null => {
  if (s === undefined || s === null) return null;
  const v = s.replace(/[\x00-\x1f\x7f]+/g, ' ').replace(/\s+/g, ' ').trim();
  return v ? v.slice(0, max) : null;
};

const addressList = (a: AddressObject | AddressObject[] | undefined): AddressObject[] => (a === undefined ? [] : Array.isArray(a) ? a : [a]);
const addressText = (a: AddressObject | AddressObject[] | undefined): string | null => oneLine(addressList(a).map((x) => x.text).join(', '));

/** The addresses of To and Cc, groups opened, lower case, once each. */
export function recipientsOf(mail: Pick<ParsedMail, 'to' | 'cc'>): string[] {
  const out = new Set<string>();
  const walk = (list: Array<{ address?: string; group?: Array<{ address?: string; group?: unknown }> }>) => {
    for (const e of list) {
      if (e.address) out.add(e.address.toLowerCase());
      if (Array.isArray(e.group)) walk(e.group as typeof list);
    }
  };
  for (const a of [...addressList(mail.to), ...addressList(mail.cc)]) walk(a.value);
  return [...out];
}

/** The message's headers as the document and the notices show them. */
export function inboxHeaders(mail: ParsedMail): InboxHeaders {
  const date = mail.date && Number.isFinite(mail.date.getTime()) ? mail.date.toISOString() : null;
  return {
    from: addressText(mail.from),
    to: addressText(mail.to),
    cc: addressText(mail.cc),
    date,
    subject: oneLine(mail.subject),
    messageId: oneLine(mail.messageId),
  };
}

/** Why a parsed message is not a mail message (no header of one), or undefined. */
export function malformedReason(mail: ParsedMail): string | undefined {
  const known = ['from', 'to', 'date', 'subject', 'message-id', 'sender', 'received'];
  if (!known.some((h) => mail.headers.has(h))) return 'not a mail message: none of From, To, Date, Subject, Message-ID';
  if (!mail.from && !mail.headers.has('sender')) return 'not a mail message: no From header';
  return undefined;
}

export function slugOf(subject: string | null): string {
  const slug = (subject ?? '')
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .toLowerCase()
    .replace(/^(?:(?:re|fwd?|aw|wg)\s*:\s*)+/i, '')
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 60)
    .replace(/-+$/, '');
  return slug || 'message';
}

const isTextAttachment = (a: Attachment): boolean => {
  const type = a.contentType.toLowerCase();
  if (type === 'text/html') return false;
  return type.startsWith('text/') || /\.(md|markdown|txt)$/i.test(a.filename ?? '');
};

function cut(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max)}\n\n[cut: the first ${max} of ${text.length} characters]` : text;
}

/** Markdown headings moved two levels down (outside code fences), so an attachment's sections sit under its own heading. */
function demoteHeadings(md: string): string {
  let fence: string | undefined;
  return md
    .split('\n')
    .map((line) => {
      const f = /^\s{0,3}(`{3,}|~{3,})/.exec(line);
      if (f) {
        if (fence === undefined) fence = f[1]![0];
        else if (f[1]![0] === fence) fence = undefined;
        return line;
      }
      return fence === undefined && /^\s{0,3}#{1,6}\s/.test(line) ? line.replace(/^(\s{0,3})(#{1,4})/, '$1##$2') : line;
    })
    .join('\n');
}

/** A heading-safe line (a title). */
const title = (s: string) => s.replace(/[#\r\n]+/g, ' ').trim();

/** The document of a message: `<date>-<slug of the subject>-<uid>.md` under inbox/. */
export function renderInboxDocument(mail: ParsedMail, opts: { uid: number | bigint; receivedAt?: Date }): InboxDocument {
  const headers = inboxHeaders(mail);
  const day = (headers.date ?? (opts.receivedAt ?? new Date()).toISOString()).slice(0, 10);
  const fileName = `${day}-${slugOf(headers.subject)}-${opts.uid}.md`;
  const front = stringify(
    { from: headers.from, to: headers.to, cc: headers.cc, date: headers.date, subject: headers.subject, 'message-id': headers.messageId, uid: Number(opts.uid) },
    { lineWidth: 0 },
  ).trimEnd();
  const lines: string[] = ['---', front, '---', '', `# ${title(headers.subject ?? '(no subject)')}`, ''];
  const headerRows: Array<[string, string | null]> = [
    ['From', headers.from],
    ['To', headers.to],
    ['Cc', headers.cc],
    ['Date', headers.date],
    ['Subject', headers.subject],
    ['Message-ID', headers.messageId],
  ];
  for (const [k, v] of headerRows) if (v) lines.push(`- ${k}: ${v}`);
  const text = (mail.text ?? '').replace(/\r\n?/g, '\n').replace(/[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]/g, '').trim();
  lines.push('', text ? cut(text, INBOX_MAX_TEXT) : '(no text)', '');

  const inline = mail.attachments.filter((a) => isTextAttachment(a) && !a.related).slice(0, MAX_INLINE_ATTACHMENTS);
  for (const a of inline) {
    const name = title(a.filename ?? 'attachment');
    const body = a.content.toString('utf8').replace(/\r\n?/g, '\n').replace(/\0/g, '').trim();
    lines.push(`## Attachment: ${name}`, '', `(${a.contentType}, ${a.size} bytes)`, '', cut(demoteHeadings(body), INBOX_MAX_ATTACHMENT_TEXT), '');
  }
  const listed = mail.attachments.filter((a) => !inline.includes(a));
  if (listed.length) {
    lines.push('## Other attachments', '', 'Not kept in this workspace:', '');
    for (const a of listed) {
      const sha = createHash('sha256').update(a.content).digest('hex');
      lines.push(`- ${title(a.filename ?? '(unnamed)')}: ${a.contentType}, ${a.size} bytes, SHA-256 ${sha}`);
    }
    lines.push('');
  }
  return { fileName, markdown: `${lines.join('\n').trimEnd()}\n`, headers, recipients: recipientsOf(mail) };
}
