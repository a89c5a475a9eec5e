/**
 * The inbound-email trigger of objectives: an SMTP listener (smtp-server) that takes mail only
 * for objectives' `inboundEmail` addresses and turns each message into one event
 * (`ObjectiveService.receiveInternalEvent`, source `email`) for each objective it is addressed to.
 *
 * - Off unless a port is configured; 127.0.0.1 by default; plain SMTP without AUTH or STARTTLS
 *   (meant for loopback or a trusted relay in front of it); at most `maxBytes` per message.
 * - RCPT: an address that is no objective's is refused with 550, a paused objective's with 450
 *   (the sender may retry after a resume). MAIL: with an allow list, a sender outside it is
 *   refused with 550 (the From header is checked too); the null sender (bounces) always is.
 * - A message: its headers (Subject, From, To, Date, Message-ID) and its text (a plain message,
 *   or the first text/plain part of a multipart one; quoted-printable, base64 and charsets
 *   decoded) are parsed by the small, bounded parser below. Event id: `email:` + the Message-ID
 *   (a hash of it when it has unusual characters, of the raw message when there is none), so a
 *   redelivered message is a duplicate. Payload: `{ from, to, subject, date, messageId, text }`,
 *   the text's first 8 KiB.
 *
 * This adapter speaks SMTP and parses mail; which objectives take a message, and handing it to
 * them, is the objectives' mail routing (services/email.ts), shared with the IMAP inboxes.
 */
import { createHash } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { SMTPServerAddress, SMTPServerDataStream, SMTPServerSession } from 'smtp-server';
import type { Db } from '../domain/db.js';
import { deliverEmailToObjectives, inboundEmailOwner, MAX_EMAIL_RECIPIENTS, type EmailDeliveryDeps, type InboundEmail } from '../services/email.js';
import type { ObjectiveService } from '../services/objectives.js';

export interface InboundEmailOptions {
  db: Db;
  objectives: Pick<ObjectiveService, 'receiveInternalEvent'>;
  /** Default 127.0.0.1. */
  host?: string;
  /** 0 picks a free port (tests). */
  port: number;
  /** The largest message accepted (default 1 MiB). */
  maxBytes?: number;
  /** Sender addresses (`a@example.com`) or domains (`example.com`, `@example.com`); empty: anyone. */
  allowFrom?: string[];
  /** The server's name in its greeting. */
  name?: string;
  log?: Logger;
  /** Each delivered message (tests, diagnostics). */
  onMessage?: EmailDeliveryDeps['onMessage'];
}

export interface InboundEmailServer {
  host: string;
  port: number;
  close(): Promise<void>;
}

/** The text of a message that reaches the model (characters). */
export const MAX_EMAIL_TEXT = 8192;
const MAX_HEADER_CHARS = 64 * 1024;
const MAX_PARTS = 64;
const MAX_DEPTH = 5;

export interface ParsedEmail {
  from: string | null;
  fromAddress: string | null;
  to: string | null;
  subject: string | null;
  date: string | null;
  messageId: string | null;
  text: string;
  truncated: boolean;
}

const smtpError = (code: number, message: string) => Object.assign(new Error(message), { responseCode: code });

// --- parsing (the raw message as a latin1 string: one character per byte, offsets preserved)

type Headers = Map<string, string>;

function splitHead(s: string): { head: string; body: string } {
  const lead = /^\r?\n/.exec(s);
  if (lead) return { head: '', body: s.slice(lead[0].length) };
  const m = /\r?\n\r?\n/.exec(s.length > MAX_HEADER_CHARS ? s.slice(0, MAX_HEADER_CHARS) : s);
  if (!m) return s.length > MAX_HEADER_CHARS ? { head: s.slice(0, MAX_HEADER_CHARS), body: '' } : { head: s, body: '' };
  return { head: s.slice(0, m.index), body: s.slice(m.index + m[0].length) };
}

function parseHeaders(head: string): Headers {
  const out: Headers = new Map();
  let name: string | undefined;
  let value = '';
  const commit = () => {
    if (name !== undefined && !out.has(name)) out.set(name, value.trim());
  };
  for (const line of head.split(/\r?\n/)) {
    if (/^[ \t]/.test(line) && name !== undefined) {
      value += ` ${line.trim()}`; // folded
      continue;
    }
    commit();
    const m = /^([!-9;-~]+):[ \t]*(.*)$/.exec(line);
    name = m ? m[1]!.toLowerCase() : undefined;
    value = m ? m[2]! : '';
  }
  commit();
  return out;
}

/** `type/subtype; a=b; c="d"` -> the lower-case type and the parameters. */
function parseParams(value: string | undefined): { type: string; params: Map<string, string> } {
  const params = new Map<string, string>();
  if (!value) return { type: '', params };
  const semi = value.indexOf(';');
  const type = (semi < 0 ? value : value.slice(0, semi)).trim().toLowerCase();
  const re = /;\s*([^=;\s]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;]*)/g;
  for (let m = re.exec(value); m; m = re.exec(value)) {
    const key = m[1]!.toLowerCase();
    let v = m[2]!.trim();
    if (v.startsWith('"')) v = v.slice(1, -1).replace(/\\(.)/g, '$1');
    if (!params.has(key)) params.set(key, v);
  }
  return { type, params };
}

function decodeBytes(bytes: Buffer, charset: string | undefined): string {
  const label = (charset ?? 'utf-8').trim().toLowerCase().replace(/\*.*$/, '') || 'utf-8';
  try {
    return new TextDecoder(label).decode(bytes);
  } catch {
    return bytes.toString('latin1'); // an unknown charset: the bytes as Latin-1
  }
}

function decodeQuotedPrintable(s: string): Buffer {
  const soft = s.replace(/=\r?\n/g, '');
  const out = Buffer.alloc(soft.length);
  let n = 0;
  for (let i = 0; i < soft.length; i++) {
    const c = soft.charCodeAt(i);
    if (c === 0x3d && /^[0-9A-Fa-f]{2}$/.test(soft.slice(i + 1, i + 3))) {
      out[n++] = parseInt(soft.slice(i + 1, i + 3), 16);
      i += 2;
    } else {
      out[n++] = c & 0xff;
    }
  }
  return out.subarray(0, n);
}

function decodeTransfer(body: string, encoding: string | undefined): Buffer {
  const e = (encoding ?? '').trim().toLowerCase();
  if (e === 'base64') return Buffer.from(body.replace(/[^A-Za-z0-9+/=]/g, ''), 'base64');
  if (e === 'quoted-printable') return decodeQuotedPrintable(body);
  return Buffer.from(body, 'latin1');
}

/** A header value: raw UTF-8 bytes (SMTPUTF8) and RFC 2047 encoded words decoded. */
function decodeHeader(raw: string | undefined): string | null {
  if (raw === undefined) return null;
  let v = raw;
  if (/[\x80-\xff]/.test(v)) {
    try {
      v = new TextDecoder('utf-8', { fatal: true }).decode(Buffer.from(v, 'latin1'));
    } catch {
      // Latin-1 as it is
    }
  }
  v = v.replace(/(=\?[^?\s]+\?[BbQq]\?[^?\s]*\?=)\s+(?==\?[^?\s]+\?[BbQq]\?[^?\s]*\?=)/g, '$1');
  v = v.replace(/=\?([^?\s]+)\?([BbQq])\?([^?\s]*)\?=/g, (_all, charset: string, enc: string, text: string) => {
    const bytes = enc.toUpperCase() === 'B' ? Buffer.from(text, 'base64') : decodeQuotedPrintable(text.replace(/_/g, ' '));
    return decodeBytes(bytes, charset);
  });
  return v.replace(/[\x00-\x08\x0b-\x1f\x7f]/g, '').trim().slice(0, 2000);
}

/** The body parts of a multipart body (at most MAX_PARTS). */
function multipartParts(body: string, boundary: string): string[] {
  const delim = `--${boundary}`;
  const isDelimAt = (i: number) => {
    if (!body.startsWith(delim, i)) return false;
    const next = body[i + delim.length];
    return next === undefined || next === '\r' || next === '\n' || next === '-' || next === ' ' || next === '\t';
  };
  const findDelim = (from: number): number => {
    for (let i = body.indexOf(`\n${delim}`, from); i >= 0; i = body.indexOf(`\n${delim}`, i + 1)) {
      if (isDelimAt(i + 1)) return i;
    }
    return -1;
  };
  let pos: number;
  if (isDelimAt(0)) pos = 0;
  else {
    const i = findDelim(0);
    if (i < 0) return [];
    pos = i + 1;
  }
  const parts: string[] = [];
  while (parts.length < MAX_PARTS) {
    if (body.startsWith(`${delim}--`, pos)) break; // the closing delimiter
    const lineEnd = body.indexOf('\n', pos);
    if (lineEnd < 0) break;
    const start = lineEnd + 1;
    const next = findDelim(lineEnd);
    if (next < 0) {
      parts.push(body.slice(start));
      break;
    }
    const end = next > start && body[next - 1] === '\r' ? next - 1 : next; // the CRLF belongs to the delimiter
    parts.push(body.slice(start, Math.max(start, end)));
    pos = next + 1;
  }
  return parts;
}

/** HTML as plain text: scripts and styles dropped, block ends as line breaks, tags removed, common entities decoded (bounded). */
export function htmlToText(html: string): string {
  return html
    .slice(0, 256 * 1024)
    .replace(/<(script|style)[^>]*>[\s\S]*?<\/\1\s*>/gi, ' ')
    .replace(/<br\s*\/?>|<\/p\s*>|<\/div\s*>|<\/li\s*>/gi, '\n')
    .replace(/<[^>]*>/g, '')
    .replace(/&nbsp;/gi, ' ')
    .replace(/&lt;/gi, '<')
    .replace(/&gt;/gi, '>')
    .replace(/&quot;/gi, '"')
    .replace(/&#39;|&apos;/gi, "'")
    .replace(/&amp;/gi, '&')
    .replace(/[ \t]+/g, ' ')
    .replace(/\n\s*\n+/g, '\n\n')
    .trim();
}

/** The first text/plain part (an HTML part's text when there is none), depth-first, bounded. */
function findText(headers: Headers, body: string, depth: number, budget: { parts: number }): { plain?: string; html?: string } {
  if (budget.parts-- <= 0) return {};
  const { type, params } = parseParams(headers.get('content-type'));
  const disposition = parseParams(headers.get('content-disposition')).type;
  if (disposition === 'attachment') return {};
  if (type.startsWith('multipart/')) {
    const boundary = params.get('boundary');
    if (!boundary || depth >= MAX_DEPTH) return {};
    let html: string | undefined;
    for (const part of multipartParts(body, boundary)) {
      const { head, body: partBody } = splitHead(part);
      const found = findText(parseHeaders(head), partBody, depth + 1, budget);
      if (found.plain !== undefined) return found;
      html ??= found.html;
      if (budget.parts <= 0) break;
    }
    return html !== undefined ? { html } : {};
  }
  const decode = () => decodeBytes(decodeTransfer(body, headers.get('content-transfer-encoding')), params.get('charset'));
  if (type === '' || type === 'text/plain') return { plain: decode() };
  if (type === 'text/html') return { html: htmlToText(decode()) };
  return {};
}

/** `Name <a@b>` or `a@b` -> `a@b` (lower case). */
export function addressOf(value: string | null | undefined): string | null {
  if (!value) return null;
  const angle = /<\s*([^<>\s@]+@[^<>\s@]+)\s*>/.exec(value);
  const bare = angle ? angle[1] : /[^\s<>,;:"()]+@[^\s<>,;:"()]+/.exec(value)?.[0];
  return bare ? bare.toLowerCase() : null;
}

/** A message's headers and text, parsed minimally and boundedly. */
export function parseEmail(raw: Buffer): ParsedEmail {
  const s = raw.toString('latin1');
  const { head, body } = splitHead(s);
  const headers = parseHeaders(head);
  const found = findText(headers, body, 0, { parts: MAX_PARTS });
  let text = (found.plain ?? found.html ?? '').replace(/\r\n?/g, '\n').replace(/[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]/g, '');
  const truncated = text.length > MAX_EMAIL_TEXT;
  if (truncated) text = text.slice(0, MAX_EMAIL_TEXT);
  const from = decodeHeader(headers.get('from'));
  const dateRaw = decodeHeader(headers.get('date'));
  const dateMs = dateRaw ? Date.parse(dateRaw) : NaN;
  const mid = headers.get('message-id');
  const messageId = mid === undefined ? null : (/<([^<>]*)>/.exec(mid)?.[1] ?? mid).trim() || null;
  return {
    from,
    fromAddress: addressOf(from),
    to: decodeHeader(headers.get('to')),
    subject: decodeHeader(headers.get('subject')),
    date: Number.isFinite(dateMs) ? new Date(dateMs).toISOString() : dateRaw,
    messageId: messageId ? messageId.slice(0, 998) : null,
    text,
    truncated,
  };
}

/** `email:<Message-ID>`; a hash of an unusual Message-ID, or of the raw message when it has none. */
export function emailEventId(parsed: Pick<ParsedEmail, 'messageId'>, raw: Buffer): string {
  const sha = (x: string | Buffer) => createHash('sha256').update(x).digest('hex').slice(0, 40);
  if (parsed.messageId && /^[A-Za-z0-9._@+=-]{1,180}$/.test(parsed.messageId)) return `email:${parsed.messageId}`;
  if (parsed.messageId) return `email:mid-${sha(parsed.messageId)}`;
  return `email:raw-${sha(raw)}`;
}

/** The sender is allowed: no list, or its address or domain is on it. */
export function senderAllowed(address: string | null, allow: readonly string[]): boolean {
  if (!allow.length) return true;
  if (!address) return false;
  const a = address.toLowerCase();
  const domain = a.slice(a.lastIndexOf('@') + 1);
  return allow.some((entry) => {
    const e = entry.trim().toLowerCase();
    if (!e) return false;
    if (e.includes('@') && !e.startsWith('@')) return e === a;
    return (e.startsWith('@') ? e.slice(1) : e) === domain;
  });
}

/** The message as the objectives' mail routing takes it (services/email.ts). */
export function inboundEmailOf(parsed: ParsedEmail, raw: Buffer): InboundEmail {
  return { eventId: emailEventId(parsed, raw), from: parsed.from, subject: parsed.subject, date: parsed.date, messageId: parsed.messageId, text: parsed.text, truncated: parsed.truncated };
}

// --- the listener

export async function startInboundEmail(opts: InboundEmailOptions): Promise<InboundEmailServer> {
  const maxBytes = opts.maxBytes ?? 1024 * 1024;
  const allow = opts.allowFrom ?? [];
  const host = opts.host ?? '127.0.0.1';
  const log = opts.log;

  const ownerOf = (address: string) => inboundEmailOwner(opts.db, address);

  async function deliver(raw: Buffer, session: SMTPServerSession): Promise<string> {
    const parsed = parseEmail(raw);
    if (allow.length && !senderAllowed(parsed.fromAddress, allow)) throw smtpError(550, 'the From address is not allowed to send here');
    const recipients = session.envelope.rcptTo.map((r) => r.address);
    const { delivered, temporary } = await deliverEmailToObjectives({ db: opts.db, objectives: opts.objectives, ...(log ? { log } : {}), ...(opts.onMessage ? { onMessage: opts.onMessage } : {}) }, inboundEmailOf(parsed, raw), recipients);
    // a retry is safe: the event id makes what was delivered a duplicate
    if (temporary) throw smtpError(451, 'try again later');
    if (!delivered) throw smtpError(550, 'no objective takes mail at these addresses');
    return `OK: taken by ${delivered} objective${delivered === 1 ? '' : 's'}`;
  }

  // loaded only when the listener is on
  const { SMTPServer } = await import('smtp-server');
  const server = new SMTPServer({
    name: opts.name ?? 'steward',
    banner: 'Steward objectives',
    logger: false,
    authOptional: true,
    disabledCommands: ['AUTH', 'STARTTLS'],
    disableReverseLookup: true,
    size: maxBytes,
    maxClients: 50,
    maxRecipients: MAX_EMAIL_RECIPIENTS,
    socketTimeout: 60_000,
    closeTimeout: 2_000,
    onMailFrom(address: SMTPServerAddress, _session: SMTPServerSession, cb: (err?: Error | null) => void) {
      if (!address.address) return cb(smtpError(550, 'bounces are not accepted here'));
      if (!senderAllowed(address.address, allow)) return cb(smtpError(550, 'this sender is not allowed to send here'));
      cb();
    },
    onRcptTo(address: SMTPServerAddress, _session: SMTPServerSession, cb: (err?: Error | null) => void) {
      ownerOf(address.address).then(
        (o) => {
          if (!o) return cb(smtpError(550, 'no such mailbox'));
          if (o.paused) return cb(smtpError(450, 'this mailbox is paused; try again later'));
          cb();
        },
        (err: unknown) => {
          log?.warn({ err }, 'looking up an inbound address failed');
          cb(smtpError(451, 'try again later'));
        },
      );
    },
    onData(stream: SMTPServerDataStream, session: SMTPServerSession, cb: (err?: Error | null, message?: string) => void) {
      const chunks: Buffer[] = [];
      let size = 0;
      let done = false;
      const finish = (err?: Error, message?: string) => {
        if (done) return;
        done = true;
        if (err) cb(err);
        else cb(null, message);
      };
      stream.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size <= maxBytes) chunks.push(chunk);
      });
      stream.on('error', (err: Error) => finish(err));
      stream.on('end', () => {
        if (stream.sizeExceeded || size > maxBytes) return finish(smtpError(552, `the message is larger than ${maxBytes} bytes`));
        deliver(Buffer.concat(chunks), session).then(
          (message) => finish(undefined, message),
          (err: Error) => finish('responseCode' in err ? err : smtpError(451, 'try again later')),
        );
      });
    },
  });
  server.on('error', (err: Error) => log?.warn({ err }, 'inbound SMTP error'));

  await new Promise<void>((resolve, reject) => {
    const onError = (err: Error) => reject(err);
    server.server.once('error', onError);
    server.listen(opts.port, host, () => {
      server.server.off('error', onError);
      resolve();
    });
  });
  const port = (server.server.address() as AddressInfo).port;
  log?.info({ host, port }, 'inbound SMTP listening');
  return {
    host,
    port,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
