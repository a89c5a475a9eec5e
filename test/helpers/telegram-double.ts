/**
 * A test double of the Telegram Bot API on 127.0.0.1 that real grammY talks to. Nothing talks to
 * api.telegram.org.
 *
 *   const tg = await startTelegramDouble();
 *   const bot = new Bot(tg.token, { client: { apiRoot: tg.apiRoot } });
 *
 * Routes: `GET|POST /bot<token>/<method>` (method names are case-insensitive, as on Telegram) and
 * `GET /file/bot<token>/<file_path>`. Parameters are read from the query string and from a JSON,
 * urlencoded or multipart/form-data body (grammY switches to multipart as soon as an `InputFile`
 * is in the payload: every other field then arrives as a string, objects such as `reply_markup`
 * as JSON text, and each file as a part named by a random id that the field references as
 * `attach://<id>`). Every call is recorded in order with its normalised parameters and files.
 *
 * State is kept like Telegram keeps it: per-chat increasing message ids, live messages that can be
 * edited and deleted (with Telegram's 400s for "not found", "not modified", ...), files that can be
 * fetched with getFile and downloaded, bot commands per scope + language, and an update queue for
 * getUpdates long polling with offset confirmation, `limit`, `timeout`, `allowed_updates` and the
 * 409 Conflict a second concurrent poller causes. Text is validated like Telegram does: empty text,
 * more than 4096 UTF-16 code units after entity parsing (1024 for captions), and the HTML /
 * MarkdownV2 / Markdown parsers follow TDLib's rules and error messages ("Bad Request: can't parse
 * entities: ...").
 *
 * `failNext()` scripts errors (429 with `retry_after` and a Retry-After header by default); a
 * failed call is recorded with `failed: true` and changes no state.
 *
 * `close()` answers every held long poll (`[]`), rejects pending waiters and destroys every socket,
 * so nothing keeps the process alive. Stop grammY bots (`await bot.stop()`) before closing the
 * double: a bot still polling a double that is gone keeps retrying every few seconds.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { Message, Update } from 'grammy/types';

// ---------------------------------------------------------------------------------------------
// Public types

/** A user as the Bot API describes one (grammY's `User` fits). */
export interface TgUser {
  id: number;
  is_bot: boolean;
  first_name: string;
  last_name?: string;
  username?: string;
  language_code?: string;
}

/** A chat as the Bot API describes one (grammY's `Chat` fits). */
export interface TgChat {
  id: number;
  type: 'private' | 'group' | 'supergroup' | 'channel';
  title?: string;
  username?: string;
  first_name?: string;
  last_name?: string;
}

/** A message entity (offsets and lengths in UTF-16 code units). */
export interface TgEntity {
  type: string;
  offset: number;
  length: number;
  url?: string;
  language?: string;
  custom_emoji_id?: string;
}

export interface TgDocument {
  file_id: string;
  file_unique_id: string;
  file_name?: string;
  mime_type?: string;
  file_size: number;
}

export interface TgPhotoSize {
  file_id: string;
  file_unique_id: string;
  width: number;
  height: number;
  file_size: number;
}

export interface TgBotCommand {
  command: string;
  description: string;
}

export interface TgCommandScope {
  type: string;
  chat_id?: number | string;
  user_id?: number;
}

export type TgResponse =
  | { ok: true; result: unknown; description?: string }
  | { ok: false; error_code: number; description: string; parameters?: { retry_after?: number; migrate_to_chat_id?: number } };

export interface RecordedFile {
  /** The multipart field name (grammY: a random id referenced as `attach://<id>`). */
  field: string;
  /** The API parameter that referenced this part (e.g. `document`), once a handler resolved it. */
  param?: string;
  filename: string;
  contentType: string;
  bytes: Buffer;
}

export interface RecordedCall {
  /** Canonical method name (`sendMessage`), or the name as requested for unknown methods. */
  method: string;
  /** Parameters after normalisation: JSON fields parsed, numeric ids and booleans coerced. */
  params: Record<string, unknown>;
  /** Parameters exactly as received (strings for form and multipart bodies). */
  rawParams: Record<string, unknown>;
  files: RecordedFile[];
  /** `Date.now()` when the request (body included) had arrived. */
  at: number;
  transport: 'none' | 'json' | 'form' | 'multipart';
  httpMethod: string;
  /** HTTP status answered; undefined while a long poll is held or when the connection was dropped. */
  status?: number;
  response?: TgResponse;
  answeredAt?: number;
  /** Answered with `ok: false` (scripted or not), or dropped by a scripted failure. */
  failed?: boolean;
  /** The failure came from `failNext()`. */
  scripted?: boolean;
  /** A scripted failure destroyed the connection instead of answering. */
  dropped?: boolean;
  /** The client went away before the answer (e.g. grammY aborting a long poll on `bot.stop()`). */
  aborted?: boolean;
}

/** A chat message as the double holds it (a snapshot; mutating it changes nothing). */
export interface ChatMessageState {
  chat: TgChat;
  message_id: number;
  /** Who sent it: the bot through the API, or a user through a pushed update. */
  from: 'bot' | 'user';
  sender: TgUser;
  date: number;
  /** The text as sent (with its markup when a parse_mode was used). */
  text?: string;
  parse_mode?: string;
  /** The visible text after entity parsing (what Telegram returns as `text`). */
  plainText?: string;
  entities: TgEntity[];
  caption?: string;
  caption_parse_mode?: string;
  plainCaption?: string;
  caption_entities: TgEntity[];
  reply_markup?: unknown;
  document?: TgDocument;
  photo?: TgPhotoSize[];
  reply_to_message_id?: number;
  edited: boolean;
  editCount: number;
  edit_date?: number;
  deleted: boolean;
  /** The current Bot API representation. */
  message: Message;
}

/** What `addFile` returns: enough to build a document/photo message and to call getFile. */
export interface AddedFile {
  file_id: string;
  file_unique_id: string;
  file_size: number;
  file_path: string;
  file_name?: string;
  mime_type?: string;
}

export interface FailureScript {
  /** HTTP status and `error_code` (default 429). */
  status?: number;
  /** Default: Telegram's wording for the status (`Too Many Requests: retry after N` for 429). */
  description?: string;
  /** `parameters.retry_after` and the Retry-After header; defaults to 1 for a 429. */
  retryAfter?: number;
  /** Extra `parameters` (e.g. `{ migrate_to_chat_id }`). */
  parameters?: Record<string, unknown>;
  /** How many matching calls fail (default 1). */
  times?: number;
  /** Only calls for which this returns true fail (they still count towards `times`). */
  match?: (call: RecordedCall) => boolean;
  /** Destroy the connection instead of answering (grammY sees an HttpError). */
  dropConnection?: boolean;
}

/** Extra fields merged into a built message (`chat` overrides the chat where allowed). */
export type MessageExtra = Record<string, unknown> & { chat?: TgChat };

export interface TelegramDoubleOptions {
  /** Default `<botId>:AAH-telegram-double-test-token`. */
  token?: string;
  /** Default 7000000001. */
  botId?: number;
  /** Default `steward_test_bot`. */
  botUsername?: string;
  /** Default `Steward Test Bot`. */
  botFirstName?: string;
  /** The first update_id handed out by pushUpdate (default 100000). */
  firstUpdateId?: number;
  /** Answer 400 "chat not found" for chats never seen in a pushed update or `addChat` (default: invent them). */
  strictChats?: boolean;
}

export interface TelegramDouble {
  /** `http://127.0.0.1:<port>`: pass as grammY's `client.apiRoot`. */
  apiRoot: string;
  token: string;
  /** What getMe answers. */
  botInfo: TgUser & { is_bot: true; username: string };
  /** Every call in arrival order (a live array). */
  calls: RecordedCall[];
  callsOf(method: string): RecordedCall[];
  /**
   * Resolves with the first recorded call (earlier or future) of `method` that satisfies the
   * predicate; rejects after timeoutMs (default 5000). Use `clearCalls()` or a predicate to skip
   * earlier ones.
   */
  waitForCall(method: string, predicate?: (call: RecordedCall) => boolean, timeoutMs?: number): Promise<RecordedCall>;
  /** Resolves once probe returns something other than undefined/false (re-checked on every request and push). */
  waitFor<T>(probe: () => T | undefined | false, timeoutMs?: number, what?: string): Promise<T>;
  clearCalls(): void;

  /** Script failures for the next calls of `method` (case-insensitive; '*' matches every method). */
  failNext(method: string, script?: FailureScript): void;

  /** Queue an update for getUpdates; assigns update_id (and message_id/date of a message) when missing. */
  pushUpdate(update: Partial<Update> | Record<string, unknown>): Update;
  /** Push a text message from `from` in its private chat (bot_command/mention entities computed). */
  privateText(from: TgUser, text: string, extra?: MessageExtra): Update;
  /** Push a text message from `from` in a group or supergroup. */
  groupText(chat: TgChat, from: TgUser, text: string, extra?: MessageExtra): Update;
  /** Push a callback query for a button of `message` (a message the double knows). */
  callbackQuery(from: TgUser, message: { chat: { id: number }; message_id: number }, data: string, extra?: Record<string, unknown>): Update;
  /** Push a document message referencing a file added with addFile (private chat unless extra.chat). */
  document(from: TgUser, file: AddedFile | string, extra?: MessageExtra & { caption?: string }): Update;
  /** Push a photo message referencing a file added with addFile (private chat unless extra.chat). */
  photo(from: TgUser, file: AddedFile | string, extra?: MessageExtra & { caption?: string }): Update;
  /** Updates not yet confirmed by a getUpdates offset. */
  pendingUpdates(): Update[];

  /** Register a file (as if a user had uploaded it) for getFile, downloads and the document/photo builders. */
  addFile(bytes: Uint8Array | string, opts?: { mime?: string; name?: string; kind?: 'document' | 'photo' }): AddedFile;
  /** A stored file (added, or uploaded by the bot) by file_id. */
  file(fileId: string): (AddedFile & { bytes: Buffer }) | undefined;
  /** The download URL of a file_path, as the Bot API documents it. */
  fileUrl(filePath: string): string;

  /** Make a chat known (needed for `strictChats`, and to give a chat a title/username). */
  addChat(chat: TgChat): void;
  /** The messages of a chat in id order, deleted ones included (flagged). */
  messages(chatId: number): ChatMessageState[];
  message(chatId: number, messageId: number): ChatMessageState | undefined;

  /** The commands set for a scope (default `{type:'default'}`) and language ('' = none). */
  commands(scope?: TgCommandScope, languageCode?: string): TgBotCommand[];
  /** Every scope/language that has commands set. */
  commandSets(): Array<{ scope: TgCommandScope; language_code: string; commands: TgBotCommand[] }>;

  /** Answers held long polls, rejects waiters, destroys every socket. Idempotent. */
  close(): Promise<void>;
}

// ---------------------------------------------------------------------------------------------
// Small helpers for tests

/** A Bot API user object. */
export function tgUser(id: number, first_name = `User${id}`, username?: string): TgUser {
  return { id, is_bot: false, first_name, ...(username !== undefined ? { username } : {}) };
}

/** A group or supergroup chat object. */
export function tgGroup(id: number, title = `Group ${id}`, type: 'group' | 'supergroup' = 'supergroup'): TgChat {
  return { id, type, title };
}

/** The private chat Telegram reports for messages from `user`. */
export function privateChatOf(user: TgUser): TgChat {
  return {
    id: user.id,
    type: 'private',
    first_name: user.first_name,
    ...(user.last_name !== undefined ? { last_name: user.last_name } : {}),
    ...(user.username !== undefined ? { username: user.username } : {}),
  };
}

// ---------------------------------------------------------------------------------------------
// Errors and formatting (TDLib's parsers, ported)

class TgError extends Error {
  constructor(
    readonly code: number,
    readonly description: string,
    readonly parameters?: Record<string, unknown>,
  ) {
    super(description);
  }
}

const bad = (what: string) => new TgError(400, `Bad Request: ${what}`);

/** A handler result that also carries an ok-response `description` (as deleteWebhook has). */
class Described {
  constructor(
    readonly result: unknown,
    readonly description: string,
  ) {}
}

interface Formatted {
  text: string;
  entities: TgEntity[];
}

const isTdSpace = (c: string) => c === ' ' || c === '\t' || c === '\r' || c === '\n' || c === '\0' || c === '\v';

function entityFail(msg: string): never {
  throw bad(`can't parse entities: ${msg}`);
}

/** TDLib's entity order: offset, then longer first, then type priority. */
const ENTITY_PRIORITY: Record<string, number> = {
  blockquote: 0,
  expandable_blockquote: 0,
  pre: 11,
  code: 20,
  text_link: 49,
  text_mention: 49,
  bold: 90,
  italic: 91,
  underline: 92,
  strikethrough: 93,
  spoiler: 94,
  custom_emoji: 99,
};

function sortEntities(entities: TgEntity[]): TgEntity[] {
  const priority = (e: TgEntity) => ENTITY_PRIORITY[e.type] ?? 50;
  return entities.sort((a, b) => a.offset - b.offset || b.length - a.length || priority(a) - priority(b));
}

/**
 * Roughly TDLib's `get_checked_link`: URLs with a scheme are kept, a bare domain gets `http://`,
 * anything else is not a link (and the entity is dropped, without an error).
 */
function checkedLink(url: string): string {
  const u = url.trim();
  if (/^[a-z][a-z0-9+.-]*:/i.test(u)) return u;
  if (/^[^\s/?#]+\.[a-z]{2,}(?:[/?#]\S*)?$/i.test(u)) return `http://${u}`;
  return '';
}

function decodeHtmlEntity(s: string, pos: number): { code: number; next: number } | undefined {
  let end = pos + 1;
  let res = 0;
  if (s[pos + 1] === '#') {
    end++;
    if (s[pos + 2] === 'x') {
      end++;
      while (end < s.length && /[0-9a-fA-F]/.test(s[end]!)) res = res * 16 + parseInt(s[end++]!, 16);
    } else {
      while (end < s.length && /[0-9]/.test(s[end]!)) res = res * 10 + Number(s[end++]);
    }
    if (res === 0 || res >= 0x10ffff || end - pos >= 10) return undefined;
  } else {
    while (end < s.length && /[A-Za-z]/.test(s[end]!)) end++;
    const named: Record<string, number> = { lt: 60, gt: 62, amp: 38, quot: 34 };
    const v = named[s.slice(pos + 1, end)];
    if (v === undefined) return undefined; // unsupported named entities stay literal text
    res = v;
  }
  return { code: res, next: s[end] === ';' ? end + 1 : end };
}

const HTML_TAGS = new Set(['a', 'b', 'strong', 'i', 'em', 's', 'strike', 'del', 'u', 'ins', 'tg-spoiler', 'tg-emoji', 'span', 'pre', 'code', 'blockquote']);
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Telegram's HTML parse mode (TDLib `parse_html`). */
export function parseTelegramHtml(src: string): Formatted {
  const n = src.length;
  const ch = (i: number) => (i < n ? src[i]! : '\0');
  const at = (i: number) => Buffer.byteLength(src.slice(0, i), 'utf8');
  let out = '';
  let recheck = false;
  const entities: Array<TgEntity & { codeLanguage?: string }> = [];
  const stack: Array<{ tag: string; arg: string; offset: number }> = [];
  for (let i = 0; i < n; i++) {
    const c = src[i]!;
    if (c === '&') {
      const d = decodeHtmlEntity(src, i);
      if (d) {
        if (d.code >= 0xd800 && d.code <= 0xdfff) recheck = true;
        out += String.fromCodePoint(d.code);
        i = d.next - 1;
        continue;
      }
    }
    if (c !== '<') {
      out += c;
      continue;
    }
    const begin = i++;
    if (ch(i) !== '/') {
      while (!isTdSpace(ch(i)) && ch(i) !== '>') i++;
      if (i >= n) entityFail(`Unclosed start tag at byte offset ${at(begin)}`);
      const tag = src.slice(begin + 1, i).toLowerCase();
      if (!HTML_TAGS.has(tag)) entityFail(`Unsupported start tag "${tag}" at byte offset ${at(begin)}`);
      let arg = '';
      while (ch(i) !== '>') {
        while (i < n && isTdSpace(ch(i))) i++;
        if (ch(i) === '>') break;
        const attrBegin = i;
        while (!isTdSpace(ch(i)) && ch(i) !== '=' && ch(i) !== '>') i++;
        const attr = src.slice(attrBegin, i);
        if (attr === '') entityFail(`Empty attribute name in the tag "${tag}" at byte offset ${at(begin)}`);
        while (i < n && isTdSpace(ch(i))) i++;
        if (ch(i) !== '=') {
          if (tag === 'blockquote' && attr.toLowerCase() === 'expandable') {
            arg = 'expandable';
            continue;
          }
          entityFail(`Expected equal sign in declaration of an attribute of the tag "${tag}" at byte offset ${at(begin)}`);
        }
        i++;
        while (i < n && isTdSpace(ch(i))) i++;
        if (i >= n) entityFail(`Unclosed start tag "${tag}" at byte offset ${at(begin)}`);
        let value = '';
        if (ch(i) !== "'" && ch(i) !== '"') {
          const tokenBegin = i;
          while (/[A-Za-z0-9.-]/.test(ch(i))) i++;
          value = src.slice(tokenBegin, i).toLowerCase();
          if (!isTdSpace(ch(i)) && ch(i) !== '>') entityFail(`Unexpected end of name token at byte offset ${at(tokenBegin)}`);
        } else {
          const quote = src[i++]!;
          while (i < n && src[i] !== quote) {
            if (src[i] === '&') {
              const d = decodeHtmlEntity(src, i);
              if (d) {
                value += String.fromCodePoint(d.code);
                i = d.next;
                continue;
              }
            }
            value += src[i++]!;
          }
          if (src[i] === quote) i++;
        }
        if (i >= n) entityFail(`Unclosed start tag at byte offset ${at(begin)}`);
        if (tag === 'a' && attr === 'href') arg = value;
        else if (tag === 'code' && attr === 'class' && value.startsWith('language-')) arg = value.slice(9);
        else if (tag === 'span' && attr === 'class' && value.startsWith('tg-')) arg = value.slice(3);
        else if (tag === 'tg-emoji' && attr === 'emoji-id') arg = value;
      }
      if (tag === 'span' && arg !== 'spoiler') entityFail(`Tag "span" must have class "tg-spoiler" at byte offset ${at(begin)}`);
      stack.push({ tag, arg, offset: out.length });
    } else {
      if (stack.length === 0) entityFail(`Unexpected end tag at byte offset ${at(begin)}`);
      while (!isTdSpace(ch(i)) && ch(i) !== '>') i++;
      const endTag = src.slice(begin + 2, i).toLowerCase();
      while (i < n && isTdSpace(ch(i))) i++;
      if (ch(i) !== '>') entityFail(`Unclosed end tag at byte offset ${at(begin)}`);
      const top = stack[stack.length - 1]!;
      if (endTag !== '' && endTag !== top.tag) {
        entityFail(`Unmatched end tag at byte offset ${at(begin)}, expected "</${top.tag}>", found "</${endTag}>"`);
      }
      const offset = top.offset;
      const length = out.length - offset;
      if (length > 0) {
        const last = entities[entities.length - 1];
        switch (top.tag) {
          case 'i':
          case 'em':
            entities.push({ type: 'italic', offset, length });
            break;
          case 'b':
          case 'strong':
            entities.push({ type: 'bold', offset, length });
            break;
          case 's':
          case 'strike':
          case 'del':
            entities.push({ type: 'strikethrough', offset, length });
            break;
          case 'u':
          case 'ins':
            entities.push({ type: 'underline', offset, length });
            break;
          case 'tg-spoiler':
          case 'span':
            entities.push({ type: 'spoiler', offset, length });
            break;
          case 'tg-emoji':
            if (!/^[0-9]+$/.test(top.arg) || /^0+$/.test(top.arg)) entityFail('Invalid custom emoji identifier specified');
            entities.push({ type: 'custom_emoji', offset, length, custom_emoji_id: top.arg });
            break;
          case 'a': {
            const url = checkedLink(top.arg !== '' ? top.arg : out.slice(offset));
            if (url !== '') entities.push({ type: 'text_link', offset, length, url });
            break;
          }
          case 'pre':
            if (last && last.type === 'code' && last.offset === offset && last.length === length && last.codeLanguage) {
              last.type = 'pre';
              last.language = last.codeLanguage;
            } else {
              entities.push({ type: 'pre', offset, length });
            }
            break;
          case 'code':
            if (last && last.type === 'pre' && last.offset === offset && last.length === length && top.arg !== '') {
              last.language = top.arg;
            } else {
              entities.push({ type: 'code', offset, length, ...(top.arg !== '' ? { codeLanguage: top.arg } : {}) });
            }
            break;
          case 'blockquote':
            entities.push({ type: top.arg === 'expandable' ? 'expandable_blockquote' : 'blockquote', offset, length });
            break;
        }
      }
      stack.pop();
    }
  }
  if (stack.length > 0) entityFail(`Can't find end tag corresponding to start tag ${stack[stack.length - 1]!.tag}`);
  if (recheck && LONE_SURROGATE.test(out)) {
    entityFail('Text contains invalid Unicode characters after decoding HTML entities, check for unmatched surrogate code units');
  }
  const clean = entities.map(({ codeLanguage: _lang, ...e }) => e);
  return { text: out, entities: sortEntities(clean) };
}

const MDV2_NAMES: Record<string, string> = {
  bold: 'Bold',
  italic: 'Italic',
  underline: 'Underline',
  strikethrough: 'Strikethrough',
  spoiler: 'Spoiler',
  code: 'Code',
  pre: 'Pre',
  text_link: 'TextUrl',
  custom_emoji: 'CustomEmoji',
  blockquote: 'BlockQuote',
  expandable_blockquote: 'BlockQuote',
};

/** Telegram's MarkdownV2 parse mode (TDLib `parse_markdown_v2`). */
export function parseTelegramMarkdownV2(src: string): Formatted {
  const n = src.length;
  const ch = (i: number) => (i < n ? src[i]! : '\0');
  const escapable = (i: number) => i < n && src.charCodeAt(i) > 0 && src.charCodeAt(i) <= 126;
  const at = (i: number) => Buffer.byteLength(src.slice(0, i), 'utf8');
  const reservedFail = (c: string): never => entityFail(`Character '${c}' is reserved and must be escaped with the preceding '\\'`);
  const isQuote = (t: string | undefined) => t === 'blockquote' || t === 'expandable_blockquote';
  let out = '';
  const entities: TgEntity[] = [];
  const stack: Array<{ type: string; arg: string; offset: number; byteAt: number }> = [];
  let haveQuote = false;
  const name = (e: { type: string; arg: string }) => (e.type === 'pre' && e.arg !== '' ? 'PreCode' : (MDV2_NAMES[e.type] ?? e.type));
  const readUrl = (start: number): { url: string; end: number } => {
    let url = '';
    let i = start;
    while (i < n && src[i] !== ')') {
      if (src[i] === '\\' && escapable(i + 1)) {
        url += src[i + 1]!;
        i += 2;
        continue;
      }
      url += src[i++]!;
    }
    return { url, end: i };
  };
  for (let i = 0; i < n; i++) {
    const c = src[i]!;
    if (c === '\\' && escapable(i + 1)) {
      i++;
      out += src[i]!;
      continue;
    }
    const top = stack[stack.length - 1];
    const reserved = top && (top.type === 'code' || top.type === 'pre') ? '`' : '_*[]()~`>#+-=|{}.!\n';
    if (!reserved.includes(c)) {
      out += c;
      continue;
    }
    let isEnd = false;
    if (top) {
      if (haveQuote && c === '\n' && (i + 1 === n || src[i + 1] !== '>')) isEnd = true;
      else {
        switch (top.type) {
          case 'bold':
            isEnd = c === '*';
            break;
          case 'italic':
            isEnd = c === '_' && ch(i + 1) !== '_';
            break;
          case 'code':
            isEnd = c === '`';
            break;
          case 'pre':
            isEnd = c === '`' && ch(i + 1) === '`' && ch(i + 2) === '`';
            break;
          case 'text_link':
          case 'custom_emoji':
            isEnd = c === ']';
            break;
          case 'underline':
            isEnd = c === '_' && ch(i + 1) === '_';
            break;
          case 'strikethrough':
            isEnd = c === '~';
            break;
          case 'spoiler':
            isEnd = c === '|' && ch(i + 1) === '|';
            break;
          default:
            isEnd = false;
        }
      }
    }
    if (!isEnd) {
      let type: string | undefined;
      let arg = '';
      const byteAt = i;
      switch (c) {
        case '_':
          if (ch(i + 1) === '_') {
            type = 'underline';
            i++;
          } else type = 'italic';
          break;
        case '*':
          if ((i === 0 || src[i - 1] === '\n') && ch(i + 1) === '*' && ch(i + 2) === '>' && !haveQuote) {
            type = 'expandable_blockquote';
            haveQuote = true;
            i += 2;
          } else type = 'bold';
          break;
        case '~':
          type = 'strikethrough';
          break;
        case '|':
          if (ch(i + 1) !== '|') reservedFail(c);
          if (top?.type === 'expandable_blockquote' && (i + 2 === n || src[i + 2] === '\n')) {
            i++; // the `||` that ends an expandable block quotation
            continue;
          }
          i++;
          type = 'spoiler';
          break;
        case '[':
          type = 'text_link';
          break;
        case '`':
          if (ch(i + 1) === '`' && ch(i + 2) === '`') {
            i += 3;
            type = 'pre';
            let languageEnd = i;
            while (!isTdSpace(ch(languageEnd)) && ch(languageEnd) !== '`') languageEnd++;
            if (i !== languageEnd && languageEnd < n && ch(languageEnd) !== '`') {
              arg = src.slice(i, languageEnd);
              i = languageEnd;
            }
            if (ch(i) === '\n' || ch(i) === '\r') {
              if ((ch(i + 1) === '\n' || ch(i + 1) === '\r') && ch(i) !== ch(i + 1)) i += 2;
              else i++;
            }
            i--;
          } else type = 'code';
          break;
        case '!':
          if (ch(i + 1) !== '[') reservedFail(c);
          i++;
          type = 'custom_emoji';
          break;
        case '\n':
          out += '\n';
          if (i + 1 < n && src[i + 1] === '>') {
            i++;
            if (!haveQuote) {
              type = 'blockquote';
              haveQuote = true;
            }
          }
          break;
        case '>':
          if (i !== 0) reservedFail(c);
          type = 'blockquote';
          haveQuote = true;
          break;
        default:
          reservedFail(c);
      }
      if (type === undefined) continue;
      stack.push({ type, arg, offset: out.length, byteAt });
    } else {
      const t = top!;
      if (c === '\n' && !isQuote(t.type)) entityFail(`Can't find end of ${name(t)} entity at byte offset ${at(t.byteAt)}`);
      let arg = t.arg;
      let skip = out.length === t.offset;
      const entityEnd = out.length;
      switch (t.type) {
        case 'underline':
        case 'spoiler':
          i++;
          break;
        case 'pre':
          i += 2;
          break;
        case 'text_link': {
          let url: string;
          if (ch(i + 1) !== '(') url = out.slice(t.offset);
          else {
            const r = readUrl(i + 2);
            if (ch(r.end) !== ')') entityFail(`Can't find end of a URL at byte offset ${at(i + 2)}`);
            url = r.url;
            i = r.end;
          }
          url = checkedLink(url);
          if (url === '') skip = true;
          else arg = url;
          break;
        }
        case 'custom_emoji': {
          if (ch(i + 1) !== '(') entityFail('Custom emoji entity must contain a tg://emoji URL');
          const r = readUrl(i + 2);
          if (ch(r.end) !== ')') entityFail(`Can't find end of a custom emoji URL at byte offset ${at(i + 2)}`);
          i = r.end;
          const m = /^tg:\/\/emoji\?id=([0-9]+)$/.exec(r.url);
          if (!m) entityFail('Custom emoji URL must have an emoji identifier');
          arg = m[1]!;
          break;
        }
        case 'blockquote':
        case 'expandable_blockquote':
          haveQuote = false;
          out += '\n';
          break;
      }
      if (!skip) {
        const length = entityEnd - t.offset;
        if (t.type === 'pre') entities.push({ type: 'pre', offset: t.offset, length, ...(arg !== '' ? { language: arg } : {}) });
        else if (t.type === 'text_link') entities.push({ type: 'text_link', offset: t.offset, length, url: arg });
        else if (t.type === 'custom_emoji') entities.push({ type: 'custom_emoji', offset: t.offset, length, custom_emoji_id: arg });
        else entities.push({ type: t.type, offset: t.offset, length });
      }
      stack.pop();
    }
  }
  const last = stack[stack.length - 1];
  if (haveQuote && last && isQuote(last.type)) {
    if (out.length > last.offset) entities.push({ type: last.type, offset: last.offset, length: out.length - last.offset });
    stack.pop();
  }
  const open = stack[stack.length - 1];
  if (open) entityFail(`Can't find end of ${name(open)} entity at byte offset ${at(open.byteAt)}`);
  return { text: out, entities: sortEntities(entities) };
}

/** Telegram's legacy Markdown parse mode (TDLib `parse_markdown`). */
export function parseTelegramMarkdown(src: string): Formatted {
  const n = src.length;
  const ch = (i: number) => (i < n ? src[i]! : '\0');
  const at = (i: number) => Buffer.byteLength(src.slice(0, i), 'utf8');
  const special = '_*`[';
  let out = '';
  const entities: TgEntity[] = [];
  for (let i = 0; i < n; i++) {
    const c = src[i]!;
    if (c === '\\' && i + 1 < n && special.includes(src[i + 1]!)) {
      out += src[++i]!;
      continue;
    }
    if (!special.includes(c)) {
      out += c;
      continue;
    }
    const begin = i;
    const endChar = c === '[' ? ']' : c;
    let isPre = false;
    let language = '';
    i++;
    if (c === '`' && ch(i) === '`' && ch(i + 1) === '`') {
      i += 2;
      isPre = true;
      let languageEnd = i;
      while (!isTdSpace(ch(languageEnd)) && ch(languageEnd) !== '`') languageEnd++;
      if (i !== languageEnd && languageEnd < n && ch(languageEnd) !== '`') {
        language = src.slice(i, languageEnd);
        i = languageEnd;
      }
      if (ch(i) === '\n' || ch(i) === '\r') {
        if ((ch(i + 1) === '\n' || ch(i + 1) === '\r') && ch(i) !== ch(i + 1)) i += 2;
        else i++;
      }
    }
    const offset = out.length;
    while (i < n && (src[i] !== endChar || (isPre && !(ch(i + 1) === '`' && ch(i + 2) === '`')))) out += src[i++]!;
    if (i >= n) entityFail(`Can't find end of the entity starting at byte offset ${at(begin)}`);
    const length = out.length - offset;
    if (length > 0) {
      if (c === '_') entities.push({ type: 'italic', offset, length });
      else if (c === '*') entities.push({ type: 'bold', offset, length });
      else if (c === '[') {
        let url = '';
        if (ch(i + 1) !== '(') url = src.slice(begin + 1, i);
        else {
          i += 2;
          while (i < n && src[i] !== ')') url += src[i++]!;
        }
        url = checkedLink(url);
        if (url !== '') entities.push({ type: 'text_link', offset, length, url });
      } else if (isPre) entities.push({ type: 'pre', offset, length, ...(language !== '' ? { language } : {}) });
      else entities.push({ type: 'code', offset, length });
    }
    if (isPre) i += 2;
  }
  return { text: out, entities: sortEntities(entities) };
}

/** Telegram strips leading and trailing whitespace from texts and captions. */
function trimFormatted(f: Formatted): Formatted {
  const lead = f.text.length - f.text.trimStart().length;
  const text = f.text.trim();
  const entities: TgEntity[] = [];
  for (const e of f.entities) {
    const start = Math.max(0, e.offset - lead);
    const end = Math.min(text.length, e.offset + e.length - lead);
    if (end > start) entities.push({ ...e, offset: start, length: end - start });
  }
  return { text, entities };
}

function formatText(text: string, parseMode: unknown, explicit: unknown): Formatted {
  let parsed: Formatted;
  if (parseMode === undefined || parseMode === null || parseMode === '') {
    parsed = { text, entities: Array.isArray(explicit) ? (structuredClone(explicit) as TgEntity[]) : [] };
  } else {
    switch (String(parseMode).toLowerCase()) {
      case 'html':
        parsed = parseTelegramHtml(text);
        break;
      case 'markdownv2':
        parsed = parseTelegramMarkdownV2(text);
        break;
      case 'markdown':
        parsed = parseTelegramMarkdown(text);
        break;
      default:
        throw bad('unsupported parse_mode');
    }
  }
  return trimFormatted(parsed);
}

// Entities Telegram computes for messages users send (bot commands and mentions), from TDLib.
const isWordChar = (cp: number | undefined) => cp !== undefined && (/[\p{L}\p{N}]/u.test(String.fromCodePoint(cp)) || cp === 0x5f);
const isAsciiWord = (c: string | undefined) => c !== undefined && /[A-Za-z0-9_]/.test(c);

function codePointBefore(s: string, i: number): number | undefined {
  if (i <= 0) return undefined;
  const low = s.charCodeAt(i - 1);
  if (low >= 0xdc00 && low <= 0xdfff && i >= 2) {
    const high = s.charCodeAt(i - 2);
    if (high >= 0xd800 && high <= 0xdbff) return s.codePointAt(i - 2);
  }
  return low;
}

/** bot_command and mention entities of a user's text, with UTF-16 offsets. */
export function detectEntities(text: string): TgEntity[] {
  const out: TgEntity[] = [];
  // Bot commands: (?<!\b|[\/<>])\/([a-zA-Z0-9_]{1,64})(?:@([a-zA-Z0-9_]{3,32}))?(?!\B|[\/<>])
  for (let p = text.indexOf('/'); p !== -1; p = text.indexOf('/', p + 1)) {
    const prev = codePointBefore(text, p);
    if (isWordChar(prev) || prev === 0x2f || prev === 0x3c || prev === 0x3e) continue;
    let i = p + 1;
    while (i < text.length && isAsciiWord(text[i])) i++;
    if (i - (p + 1) < 1 || i - (p + 1) > 64) continue;
    let end = i;
    if (text[i] === '@') {
      let j = i + 1;
      while (j < text.length && isAsciiWord(text[j])) j++;
      if (j - (i + 1) < 3 || j - (i + 1) > 32) continue;
      end = j;
    }
    const next = text.codePointAt(end);
    if (isWordChar(next) || next === 0x2f || next === 0x3c || next === 0x3e) continue;
    out.push({ type: 'bot_command', offset: p, length: end - p });
  }
  // Mentions: (?<=\B)@([a-zA-Z0-9_]{2,32})(?=\b), at least 4 characters unless @gif/@vid/@pic.
  for (let p = text.indexOf('@'); p !== -1; p = text.indexOf('@', p + 1)) {
    if (isWordChar(codePointBefore(text, p))) continue;
    let i = p + 1;
    while (i < text.length && isAsciiWord(text[i])) i++;
    const size = i - (p + 1);
    if (size < 2 || size > 32 || isWordChar(text.codePointAt(i))) continue;
    if (size < 4 && !['gif', 'vid', 'pic'].includes(text.slice(p + 1, i).toLowerCase())) continue;
    if (out.some((e) => p < e.offset + e.length && e.offset < i)) continue;
    out.push({ type: 'mention', offset: p, length: i - p });
  }
  return sortEntities(out);
}

// ---------------------------------------------------------------------------------------------
// Request parsing

interface ParsedBody {
  params: Record<string, unknown>;
  files: RecordedFile[];
  transport: RecordedCall['transport'];
}

function headerParam(header: string, name: string): string | undefined {
  // name="quoted value" | name=token (grammY writes `filename=` unquoted and last on the line)
  const quoted = new RegExp(`(?:^|;)\\s*${name}="((?:[^"\\\\]|\\\\.)*)"`, 'i').exec(header);
  if (quoted) return quoted[1]!.replace(/\\(.)/g, '$1');
  const star = new RegExp(`(?:^|;)\\s*${name}\\*=([^;]*)`, 'i').exec(header);
  if (star) {
    const v = star[1]!.trim();
    const m = /^[^']*'[^']*'(.*)$/.exec(v);
    try {
      return decodeURIComponent(m ? m[1]! : v);
    } catch {
      return v;
    }
  }
  // grammY writes `filename=` unquoted and last, so an unquoted filename runs to the end of the line.
  const bare = new RegExp(`(?:^|;)\\s*${name}=(${name === 'filename' ? '.*' : '[^;]*'})`, 'i').exec(header);
  if (bare) return bare[1]!.trim();
  return undefined;
}

function parseMultipart(body: Buffer, contentType: string): { fields: Record<string, string>; files: RecordedFile[] } {
  const boundary = headerParam(contentType, 'boundary');
  if (!boundary) throw bad('multipart/form-data without a boundary');
  const delimiter = Buffer.from(`--${boundary}`);
  const next = Buffer.from(`\r\n--${boundary}`);
  const fields: Record<string, string> = {};
  const files: RecordedFile[] = [];
  let pos = body.indexOf(delimiter);
  if (pos < 0) throw bad('malformed multipart/form-data body');
  pos += delimiter.length;
  for (;;) {
    if (body.subarray(pos, pos + 2).toString() === '--') break;
    const lineEnd = body.indexOf('\r\n', pos);
    if (lineEnd < 0) throw bad('malformed multipart/form-data body');
    pos = lineEnd + 2;
    const end = body.indexOf(next, pos);
    if (end < 0) throw bad('malformed multipart/form-data body');
    const part = body.subarray(pos, end);
    let headerText = '';
    let content: Buffer;
    if (part.subarray(0, 2).toString() === '\r\n') content = part.subarray(2);
    else {
      const split = part.indexOf('\r\n\r\n');
      if (split < 0) throw bad('malformed multipart/form-data part');
      headerText = part.subarray(0, split).toString('utf8');
      content = part.subarray(split + 4);
    }
    const headers = new Map<string, string>();
    for (const line of headerText.split('\r\n')) {
      const colon = line.indexOf(':');
      if (colon > 0) headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
    }
    const disposition = headers.get('content-disposition') ?? '';
    const name = headerParam(disposition, 'name');
    if (name !== undefined) {
      const filename = headerParam(disposition, 'filename');
      if (filename !== undefined) {
        files.push({
          field: name,
          filename,
          contentType: headers.get('content-type') ?? 'application/octet-stream',
          bytes: Buffer.from(content),
        });
      } else {
        fields[name] = content.toString('utf8');
      }
    }
    pos = end + next.length;
  }
  return { fields, files };
}

function parseBody(req: IncomingMessage, body: Buffer, url: URL): ParsedBody {
  const params: Record<string, unknown> = {};
  for (const [k, v] of url.searchParams) params[k] = v;
  const contentType = req.headers['content-type'] ?? '';
  const type = contentType.split(';')[0]!.trim().toLowerCase();
  if (body.length === 0 && type !== 'multipart/form-data') return { params, files: [], transport: 'none' };
  if (type === 'application/json') {
    let parsed: unknown;
    try {
      parsed = JSON.parse(body.toString('utf8'));
    } catch {
      throw bad("can't parse JSON encoded request body");
    }
    if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) Object.assign(params, parsed);
    return { params, files: [], transport: 'json' };
  }
  if (type === 'multipart/form-data') {
    const { fields, files } = parseMultipart(body, contentType);
    Object.assign(params, fields);
    return { params, files, transport: 'multipart' };
  }
  // application/x-www-form-urlencoded (and anything else Telegram would read the same way)
  for (const [k, v] of new URLSearchParams(body.toString('utf8'))) params[k] = v;
  return { params, files: [], transport: 'form' };
}

const JSON_FIELDS = new Set([
  'reply_markup',
  'entities',
  'caption_entities',
  'scope',
  'commands',
  'allowed_updates',
  'reply_parameters',
  'link_preview_options',
  'media',
  'results',
  'permissions',
  'explanation_entities',
  'options',
]);
const INT_FIELDS = new Set([
  'chat_id',
  'message_id',
  'offset',
  'limit',
  'timeout',
  'user_id',
  'from_chat_id',
  'message_thread_id',
  'reply_to_message_id',
  'cache_time',
  'max_connections',
  'duration',
  'width',
  'height',
]);
const BOOL_FIELDS = new Set([
  'disable_notification',
  'protect_content',
  'show_alert',
  'drop_pending_updates',
  'allow_sending_without_reply',
  'disable_web_page_preview',
  'disable_content_type_detection',
  'has_spoiler',
  'show_caption_above_media',
]);

function normalizeParams(raw: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...raw };
  for (const [k, v] of Object.entries(raw)) {
    if (typeof v !== 'string') continue;
    if (JSON_FIELDS.has(k)) {
      try {
        out[k] = JSON.parse(v);
      } catch {
        throw bad(k === 'reply_markup' ? "can't parse reply keyboard markup JSON object" : `can't parse ${k} JSON object`);
      }
    } else if (INT_FIELDS.has(k) && /^\s*-?\d+\s*$/.test(v)) out[k] = Number(v);
    else if (BOOL_FIELDS.has(k) && (v === 'true' || v === 'false')) out[k] = v === 'true';
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Files

const MIME_BY_EXT: Record<string, string> = {
  txt: 'text/plain',
  md: 'text/markdown',
  csv: 'text/csv',
  html: 'text/html',
  json: 'application/json',
  pdf: 'application/pdf',
  zip: 'application/zip',
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  gif: 'image/gif',
  webp: 'image/webp',
  ogg: 'audio/ogg',
  mp3: 'audio/mpeg',
  mp4: 'video/mp4',
};

const extOf = (name: string | undefined) => (name && /\.([A-Za-z0-9]+)$/.exec(name)?.[1]?.toLowerCase()) || undefined;

/** Width and height of a PNG, JPEG, GIF or WebP image; undefined for anything else. */
function imageSize(b: Buffer): { width: number; height: number } | undefined {
  if (b.length >= 24 && b.readUInt32BE(0) === 0x89504e47 && b.subarray(12, 16).toString('latin1') === 'IHDR') {
    return { width: b.readUInt32BE(16), height: b.readUInt32BE(20) };
  }
  if (b.length >= 10 && b.subarray(0, 4).toString('latin1') === 'GIF8') return { width: b.readUInt16LE(6), height: b.readUInt16LE(8) };
  if (b.length >= 30 && b.subarray(0, 4).toString('latin1') === 'RIFF' && b.subarray(8, 12).toString('latin1') === 'WEBP') {
    const kind = b.subarray(12, 16).toString('latin1');
    if (kind === 'VP8X') return { width: 1 + b.readUIntLE(24, 3), height: 1 + b.readUIntLE(27, 3) };
    if (kind === 'VP8L') {
      const bits = b.readUInt32LE(21);
      return { width: 1 + (bits & 0x3fff), height: 1 + ((bits >> 14) & 0x3fff) };
    }
    if (kind === 'VP8 ') return { width: b.readUInt16LE(26) & 0x3fff, height: b.readUInt16LE(28) & 0x3fff };
  }
  if (b.length >= 4 && b.readUInt8(0) === 0xff && b.readUInt8(1) === 0xd8) {
    let i = 2;
    while (i + 9 < b.length) {
      if (b.readUInt8(i) !== 0xff) {
        i++;
        continue;
      }
      const marker = b.readUInt8(i + 1);
      if (marker === 0xff) {
        i++;
        continue;
      }
      if (marker === 0xd8 || marker === 0x01 || (marker >= 0xd0 && marker <= 0xd7)) {
        i += 2;
        continue;
      }
      if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
        return { height: b.readUInt16BE(i + 5), width: b.readUInt16BE(i + 7) };
      }
      i += 2 + b.readUInt16BE(i + 2);
    }
  }
  return undefined;
}

interface StoredFile {
  file_id: string;
  file_unique_id: string;
  file_path: string;
  bytes: Buffer;
  kind: 'document' | 'photo';
  file_name?: string;
  mime_type?: string;
  width?: number;
  height?: number;
}

// ---------------------------------------------------------------------------------------------
// Misc

const ALLOWED_BY_DEFAULT_EXCLUDES = new Set(['chat_member', 'message_reaction', 'message_reaction_count']);
const CHAT_ACTIONS = new Set([
  'typing',
  'upload_photo',
  'record_video',
  'upload_video',
  'record_voice',
  'upload_voice',
  'upload_document',
  'choose_sticker',
  'find_location',
  'record_video_note',
  'upload_video_note',
]);
const BUTTON_ACTIONS = [
  'url',
  'callback_data',
  'web_app',
  'login_url',
  'switch_inline_query',
  'switch_inline_query_current_chat',
  'switch_inline_query_chosen_chat',
  'copy_text',
  'callback_game',
  'pay',
];
const SCOPE_TYPES = new Set([
  'default',
  'all_private_chats',
  'all_group_chats',
  'all_chat_administrators',
  'chat',
  'chat_administrators',
  'chat_member',
]);

function defaultDescription(status: number, retryAfter: number | undefined): string {
  switch (status) {
    case 400:
      return 'Bad Request: scripted failure';
    case 401:
      return 'Unauthorized';
    case 403:
      return 'Forbidden: bot was blocked by the user';
    case 404:
      return 'Not Found';
    case 409:
      return 'Conflict: terminated by other getUpdates request; make sure that only one bot instance is running';
    case 429:
      return `Too Many Requests: retry after ${retryAfter ?? 1}`;
    case 500:
      return 'Internal Server Error';
    case 502:
      return 'Bad Gateway';
    default:
      return `Error ${status}`;
  }
}

function checkReplyMarkup(v: unknown): Record<string, unknown> | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'object' || Array.isArray(v)) throw bad("can't parse reply keyboard markup JSON object");
  const markup = v as Record<string, unknown>;
  if ('inline_keyboard' in markup) {
    const rows = markup.inline_keyboard;
    if (!Array.isArray(rows)) throw bad('field "inline_keyboard" of the InlineKeyboardMarkup must be an Array');
    for (const row of rows) {
      if (!Array.isArray(row)) throw bad('field "inline_keyboard" of the InlineKeyboardMarkup must be an Array of Arrays');
      for (const button of row) {
        if (typeof button !== 'object' || button === null) throw bad("can't parse inline keyboard button: InlineKeyboardButton must be an Object");
        const b = button as Record<string, unknown>;
        if (typeof b.text !== 'string') throw bad(`can't parse inline keyboard button: Field "text" must be of type String`);
        if (!BUTTON_ACTIONS.some((k) => b[k] !== undefined)) throw bad("can't parse inline keyboard button: Text buttons are unallowed in the inline keyboard");
        if (b.callback_data !== undefined) {
          const size = typeof b.callback_data === 'string' ? Buffer.byteLength(b.callback_data, 'utf8') : 0;
          if (size < 1 || size > 64) throw bad('BUTTON_DATA_INVALID');
        }
      }
    }
  }
  return markup;
}

const inlineOnly = (markup: unknown) =>
  markup !== null && typeof markup === 'object' && 'inline_keyboard' in (markup as object) ? markup : undefined;

const sameJson = (a: unknown, b: unknown) => JSON.stringify(a ?? null) === JSON.stringify(b ?? null);

const now = () => Math.floor(Date.now() / 1000);

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

// ---------------------------------------------------------------------------------------------
// The double

interface StoredMessage extends Omit<ChatMessageState, 'message'> {
  /** A user message as pushed (its Bot API form). */
  raw?: Record<string, unknown>;
}

interface HeldPoll {
  call: RecordedCall;
  res: ServerResponse;
  limit: number;
  timer?: NodeJS.Timeout;
  /** Set while a newer getUpdates is about to terminate this one with a 409. */
  terminating?: NodeJS.Immediate;
  done: boolean;
}

interface ActiveFailure extends FailureScript {
  method: string;
  remaining: number;
}

export async function startTelegramDouble(opts: TelegramDoubleOptions = {}): Promise<TelegramDouble> {
  const botId = opts.botId ?? 7_000_000_001;
  const token = opts.token ?? `${botId}:AAH-telegram-double-test-token`;
  const botUser = {
    id: botId,
    is_bot: true as const,
    first_name: opts.botFirstName ?? 'Steward Test Bot',
    username: opts.botUsername ?? 'steward_test_bot',
  };
  const getMeResult = {
    ...botUser,
    can_join_groups: true,
    can_read_all_group_messages: false,
    supports_inline_queries: false,
    can_connect_to_business: false,
    has_main_web_app: false,
  };

  const calls: RecordedCall[] = [];
  const failures: ActiveFailure[] = [];
  const waiters = new Set<() => void>();
  const pendingWaits = new Set<{ timer: NodeJS.Timeout; reject: (err: Error) => void }>();
  const sockets = new Set<Socket>();
  const polls = new Set<HeldPoll>();
  let queue: Update[] = [];
  let nextUpdateId = opts.firstUpdateId ?? 100_000;
  let allowedUpdates: string[] | undefined;
  let webhookUrl: string | undefined;
  let wakeHandle: NodeJS.Immediate | undefined;
  let closed = false;
  let closing: Promise<void> | undefined;

  const chats = new Map<string, TgChat>();
  const lastMessageId = new Map<string, number>();
  const chatMessages = new Map<string, StoredMessage[]>();
  const files = new Map<string, StoredFile>();
  const filesByPath = new Map<string, StoredFile>();
  let fileSeq = 0;
  const commandSets = new Map<string, { scope: TgCommandScope; language_code: string; commands: TgBotCommand[] }>();
  const openCallbackQueries = new Set<string>();
  let callbackSeq = 0;

  const notify = () => {
    for (const w of [...waiters]) w();
  };

  function waitUntil<T>(probe: () => T | undefined | false, timeoutMs: number, what: () => string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (closed) return reject(new Error('telegram double: closed'));
      const pending = {
        timer: setTimeout(() => finish(new Error(`telegram double: timed out after ${timeoutMs} ms waiting for ${what()}`)), timeoutMs),
        reject: (err: Error) => finish(err),
      };
      const finish = (err?: Error, value?: T) => {
        clearTimeout(pending.timer);
        waiters.delete(check);
        pendingWaits.delete(pending);
        if (err) reject(err);
        else resolve(value as T);
      };
      const check = () => {
        let v: T | undefined | false;
        try {
          v = probe();
        } catch (err) {
          finish(err instanceof Error ? err : new Error(String(err)));
          return;
        }
        if (v !== undefined && v !== false) finish(undefined, v);
      };
      pendingWaits.add(pending);
      waiters.add(check);
      check();
    });
  }

  // --- chats and messages ------------------------------------------------------------------

  const keyOf = (chatId: number | string) => String(chatId);

  function registerChat(chat: TgChat) {
    chats.set(keyOf(chat.id), { ...chats.get(keyOf(chat.id)), ...chat });
  }

  /** The chat a chat_id names; invents unknown numeric chats (not registered until a message is committed). */
  function resolveChat(chatId: unknown): TgChat {
    if (chatId === undefined || chatId === null || chatId === '') throw bad('chat_id is empty');
    if (typeof chatId === 'string' && chatId.startsWith('@')) {
      const wanted = chatId.slice(1).toLowerCase();
      for (const c of chats.values()) if (c.username?.toLowerCase() === wanted) return c;
      throw bad('chat not found');
    }
    const id = typeof chatId === 'number' ? chatId : Number(chatId);
    if (!Number.isSafeInteger(id) || id === 0) throw bad('chat not found');
    const known = chats.get(keyOf(id));
    if (known) return known;
    if (opts.strictChats) throw bad('chat not found');
    if (id > 0) return { id, type: 'private', first_name: `User${id}` };
    return { id, type: id < -1_000_000_000_000 ? 'supergroup' : 'group', title: `Group ${id}` };
  }

  function nextMessageId(chat: TgChat): number {
    const id = (lastMessageId.get(keyOf(chat.id)) ?? 0) + 1;
    lastMessageId.set(keyOf(chat.id), id);
    return id;
  }

  function storeMessage(m: StoredMessage) {
    registerChat(m.chat);
    const list = chatMessages.get(keyOf(m.chat.id)) ?? [];
    const existing = list.findIndex((x) => x.message_id === m.message_id);
    if (existing >= 0) list[existing] = m;
    else {
      list.push(m);
      list.sort((a, b) => a.message_id - b.message_id);
    }
    chatMessages.set(keyOf(m.chat.id), list);
    const last = lastMessageId.get(keyOf(m.chat.id)) ?? 0;
    if (m.message_id > last) lastMessageId.set(keyOf(m.chat.id), m.message_id);
  }

  const findMessage = (chatId: number | string, messageId: number) =>
    chatMessages.get(keyOf(chatId))?.find((m) => m.message_id === messageId);

  function toMessage(m: StoredMessage, depth = 0): Message {
    if (m.from === 'user' && m.raw) return structuredClone(m.raw) as unknown as Message;
    const o: Record<string, unknown> = { message_id: m.message_id, from: { ...botUser }, chat: { ...m.chat }, date: m.date };
    if (m.edit_date !== undefined) o.edit_date = m.edit_date;
    if (depth === 0 && m.reply_to_message_id !== undefined) {
      const target = findMessage(m.chat.id, m.reply_to_message_id);
      if (target && !target.deleted) o.reply_to_message = toMessage(target, 1);
    }
    if (m.plainText !== undefined) {
      o.text = m.plainText;
      if (m.entities.length > 0) o.entities = structuredClone(m.entities);
    }
    if (m.document) o.document = { ...m.document };
    if (m.photo) o.photo = m.photo.map((p) => ({ ...p }));
    if (m.plainCaption) {
      o.caption = m.plainCaption;
      if (m.caption_entities.length > 0) o.caption_entities = structuredClone(m.caption_entities);
    }
    const inline = inlineOnly(m.reply_markup);
    if (inline) o.reply_markup = structuredClone(inline);
    return o as unknown as Message;
  }

  function snapshot(m: StoredMessage): ChatMessageState {
    const { raw: _raw, ...rest } = m;
    return { ...structuredClone(rest), message: toMessage(m) };
  }

  /** reply_to_message_id / reply_parameters: the replied message must exist unless allowed otherwise. */
  function replyTarget(chat: TgChat, p: Record<string, unknown>): number | undefined {
    const rp = (p.reply_parameters ?? undefined) as Record<string, unknown> | undefined;
    const id = Number(rp?.message_id ?? p.reply_to_message_id);
    if (!Number.isFinite(id) || id <= 0) return undefined;
    const target = findMessage(chat.id, id);
    if (target && !target.deleted) return id;
    if (rp?.allow_sending_without_reply === true || p.allow_sending_without_reply === true) return undefined;
    throw bad('message to be replied not found');
  }

  function baseBotMessage(chat: TgChat): StoredMessage {
    return {
      chat: { ...chat },
      message_id: 0,
      from: 'bot',
      sender: { ...botUser },
      date: now(),
      entities: [],
      caption_entities: [],
      edited: false,
      editCount: 0,
      deleted: false,
    };
  }

  function commitBotMessage(m: StoredMessage): StoredMessage {
    m.message_id = nextMessageId(m.chat);
    storeMessage(m);
    return m;
  }

  /** The message an edit targets: checks the ids first, like Telegram. */
  function editTarget(p: Record<string, unknown>): StoredMessage {
    if (p.inline_message_id !== undefined) throw bad('MESSAGE_ID_INVALID');
    const chat = resolveChat(p.chat_id);
    const id = Number(p.message_id);
    if (!Number.isSafeInteger(id) || id <= 0) throw bad('message identifier is not specified');
    const m = findMessage(chat.id, id);
    if (!m || m.deleted) throw bad('message to edit not found');
    if (m.from !== 'bot') throw bad("message can't be edited");
    return m;
  }

  const NOT_MODIFIED =
    'message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message';

  // --- files -------------------------------------------------------------------------------

  function storeFile(bytes: Buffer, info: { kind: 'document' | 'photo'; name?: string; mime?: string }): StoredFile {
    const n = ++fileSeq;
    const ext = extOf(info.name) ?? (info.kind === 'photo' ? 'jpg' : undefined);
    const dims = info.kind === 'photo' ? imageSize(bytes) : undefined;
    const f: StoredFile = {
      file_id: `${info.kind === 'photo' ? 'AgAC' : 'BQAC'}${Buffer.from(`tgdouble:${botId}:${info.kind}:${n}`).toString('base64url')}`,
      file_unique_id: `AQAD${n.toString(36).padStart(4, '0')}${info.kind === 'photo' ? 'p' : 'd'}`,
      file_path: `${info.kind === 'photo' ? 'photos' : 'documents'}/file_${n}${ext ? `.${ext}` : ''}`,
      bytes,
      kind: info.kind,
      ...(info.name !== undefined ? { file_name: info.name } : {}),
      ...(info.mime !== undefined ? { mime_type: info.mime } : {}),
      ...(dims ?? {}),
    };
    files.set(f.file_id, f);
    filesByPath.set(f.file_path, f);
    return f;
  }

  const addedFile = (f: StoredFile): AddedFile => ({
    file_id: f.file_id,
    file_unique_id: f.file_unique_id,
    file_size: f.bytes.length,
    file_path: f.file_path,
    ...(f.file_name !== undefined ? { file_name: f.file_name } : {}),
    ...(f.mime_type !== undefined ? { mime_type: f.mime_type } : {}),
  });

  type InputFileRef = { stored: StoredFile } | { upload: RecordedFile };

  /** The file an API parameter refers to: an upload (attach:// or a part named like the parameter) or a file_id. */
  function inputFile(call: RecordedCall, param: string): InputFileRef {
    const v = call.params[param];
    let upload: RecordedFile | undefined;
    if (typeof v === 'string' && v.startsWith('attach://')) {
      upload = call.files.find((f) => f.field === v.slice('attach://'.length));
      if (!upload) throw bad('wrong file identifier/HTTP URL specified');
    } else if (v === undefined || v === '') {
      upload = call.files.find((f) => f.field === param);
      if (!upload) throw bad(`there is no ${param} in the request`);
    } else if (typeof v === 'string') {
      if (/^https?:\/\//i.test(v)) throw bad('failed to get HTTP URL content'); // the double has no internet
      const stored = files.get(v);
      if (!stored) throw bad('wrong file identifier/HTTP URL specified');
      return { stored };
    } else {
      throw bad('wrong file identifier/HTTP URL specified');
    }
    if (upload.bytes.length === 0) throw bad('file must be non-empty');
    upload.param = param;
    return { upload };
  }

  const docMime = (name: string | undefined, contentType: string) => {
    const byExt = MIME_BY_EXT[extOf(name) ?? ''];
    if (byExt) return byExt;
    return contentType && contentType !== 'application/octet-stream' ? contentType : 'application/octet-stream';
  };

  const documentOf = (f: StoredFile): TgDocument => ({
    file_id: f.file_id,
    file_unique_id: f.file_unique_id,
    ...(f.file_name !== undefined ? { file_name: f.file_name } : {}),
    ...(f.mime_type !== undefined ? { mime_type: f.mime_type } : {}),
    file_size: f.bytes.length,
  });

  const photoOf = (f: StoredFile): TgPhotoSize[] => [
    { file_id: f.file_id, file_unique_id: f.file_unique_id, width: f.width ?? 640, height: f.height ?? 480, file_size: f.bytes.length },
  ];

  function captionOf(p: Record<string, unknown>): Formatted | undefined {
    if (p.caption === undefined || p.caption === null || p.caption === '') return undefined;
    const f = formatText(String(p.caption), p.parse_mode, p.caption_entities);
    if (f.text.length > 1024) throw bad('message caption is too long');
    return f.text === '' ? undefined : f;
  }

  function withCaption(m: StoredMessage, p: Record<string, unknown>, caption: Formatted | undefined) {
    if (!caption) return;
    m.caption = String(p.caption);
    if (p.parse_mode !== undefined) m.caption_parse_mode = String(p.parse_mode);
    m.plainCaption = caption.text;
    m.caption_entities = caption.entities;
  }

  // --- commands ------------------------------------------------------------------------------

  function normalizeScope(v: unknown): TgCommandScope {
    if (v === undefined || v === null) return { type: 'default' };
    if (typeof v !== 'object' || Array.isArray(v)) throw bad("can't parse BotCommandScope JSON object");
    const s = v as Record<string, unknown>;
    if (typeof s.type !== 'string' || !SCOPE_TYPES.has(s.type)) throw bad('unsupported bot command scope type');
    const scope: TgCommandScope = { type: s.type };
    if (s.type === 'chat' || s.type === 'chat_administrators' || s.type === 'chat_member') {
      const chatId = typeof s.chat_id === 'string' && /^-?\d+$/.test(s.chat_id) ? Number(s.chat_id) : s.chat_id;
      if (chatId === undefined || chatId === '' || chatId === 0) throw bad('chat not found');
      scope.chat_id = chatId as number | string;
    }
    if (s.type === 'chat_member') {
      const userId = Number(s.user_id);
      if (!Number.isSafeInteger(userId) || userId <= 0) throw bad('user not found');
      scope.user_id = userId;
    }
    return scope;
  }

  const commandKey = (scope: TgCommandScope, lang: string) => JSON.stringify([scope.type, scope.chat_id ?? null, scope.user_id ?? null, lang]);

  function languageOf(v: unknown): string {
    if (v === undefined || v === null || v === '') return '';
    const s = String(v);
    if (!/^[a-z]{2}$/.test(s)) throw bad('invalid language code specified');
    return s;
  }

  // --- updates -------------------------------------------------------------------------------

  const updateType = (u: Update) => Object.keys(u).find((k) => k !== 'update_id') ?? '';
  const isAllowed = (u: Update) => {
    const t = updateType(u);
    return allowedUpdates && allowedUpdates.length > 0 ? allowedUpdates.includes(t) : !ALLOWED_BY_DEFAULT_EXCLUDES.has(t);
  };

  function deliverable(limit: number): Update[] {
    queue = queue.filter(isAllowed); // Telegram does not keep updates of types the bot did not ask for
    return structuredClone(queue.slice(0, limit));
  }

  function respond(call: RecordedCall, res: ServerResponse, response: TgResponse, headers: Record<string, string> = {}) {
    const status = response.ok ? 200 : response.error_code;
    call.status = status;
    call.response = response;
    call.answeredAt = Date.now();
    if (!response.ok) call.failed = true;
    if (!res.destroyed && !res.writableEnded) {
      res.writeHead(status, { 'content-type': 'application/json', ...headers });
      res.end(JSON.stringify(response));
    }
    notify();
  }

  const errorResponse = (e: TgError): TgResponse => ({
    ok: false,
    error_code: e.code,
    description: e.description,
    ...(e.parameters ? { parameters: e.parameters } : {}),
  });

  function answerPoll(p: HeldPoll, response: TgResponse) {
    if (p.done) return;
    p.done = true;
    if (p.timer) clearTimeout(p.timer);
    if (p.terminating) clearImmediate(p.terminating);
    polls.delete(p);
    if (p.res.destroyed) {
      p.call.aborted = true;
      notify();
      return;
    }
    respond(p.call, p.res, response);
  }

  function scheduleWake() {
    if (wakeHandle || closed) return;
    wakeHandle = setImmediate(() => {
      wakeHandle = undefined;
      for (const p of [...polls]) {
        if (p.terminating) continue;
        const updates = deliverable(p.limit);
        if (updates.length > 0) answerPoll(p, { ok: true, result: updates });
      }
    });
  }

  function getUpdates(call: RecordedCall, res: ServerResponse) {
    const p = call.params;
    if (webhookUrl !== undefined) {
      throw new TgError(409, "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first");
    }
    const offset = Number(p.offset ?? 0);
    if (Number.isFinite(offset) && offset > 0) queue = queue.filter((u) => u.update_id >= offset);
    else if (Number.isFinite(offset) && offset < 0) queue = queue.slice(offset);
    if (Array.isArray(p.allowed_updates)) allowedUpdates = p.allowed_updates.map(String);
    const limitRaw = Number(p.limit ?? 100);
    const limit = Number.isFinite(limitRaw) ? Math.min(100, Math.max(1, Math.trunc(limitRaw))) : 100;
    const timeoutRaw = Number(p.timeout ?? 0);
    const timeout = Number.isFinite(timeoutRaw) ? Math.max(0, timeoutRaw) : 0;
    // Telegram allows one long poll at a time: the earlier one is terminated with a 409. That is
    // decided a tick later, so a poll whose client has just gone away (grammY's bot.stop() aborts
    // its poll and at once sends a confirming getUpdates on another pooled connection) is recorded
    // as aborted rather than answered into a dead socket.
    for (const other of [...polls]) {
      if (other.terminating) continue;
      other.terminating = setImmediate(() => {
        other.terminating = undefined;
        const socket = other.res.socket;
        if (other.res.destroyed || !socket || socket.destroyed || socket.readableEnded) {
          if (other.done) return;
          other.done = true;
          clearTimeout(other.timer);
          polls.delete(other);
          other.call.aborted = true;
          notify();
          return;
        }
        answerPoll(other, {
          ok: false,
          error_code: 409,
          description: 'Conflict: terminated by other getUpdates request; make sure that only one bot instance is running',
        });
      });
    }
    const ready = deliverable(limit);
    if (ready.length > 0 || timeout === 0) {
      respond(call, res, { ok: true, result: ready });
      return;
    }
    const poll: HeldPoll = { call, res, limit, done: false };
    poll.timer = setTimeout(() => answerPoll(poll, { ok: true, result: [] }), timeout * 1000);
    res.on('close', () => {
      if (poll.done) return;
      poll.done = true;
      clearTimeout(poll.timer);
      if (poll.terminating) clearImmediate(poll.terminating);
      polls.delete(poll);
      call.aborted = true;
      notify();
    });
    polls.add(poll);
    notify();
  }

  // --- method handlers -----------------------------------------------------------------------

  const handlers: Record<string, (call: RecordedCall) => unknown> = {
    getMe: () => ({ ...getMeResult }),

    logOut: () => true,

    deleteWebhook: (call) => {
      const had = webhookUrl !== undefined;
      webhookUrl = undefined;
      if (call.params.drop_pending_updates === true) queue = [];
      return new Described(true, had ? 'Webhook was deleted' : 'Webhook is already deleted');
    },

    setWebhook: (call) => {
      const url = call.params.url;
      if (typeof url !== 'string' || url === '') {
        webhookUrl = undefined;
        return new Described(true, 'Webhook was deleted');
      }
      if (!/^https:\/\//i.test(url)) throw bad('bad webhook: An HTTPS URL must be provided for webhook');
      webhookUrl = url;
      if (call.params.drop_pending_updates === true) queue = [];
      return new Described(true, 'Webhook was set');
    },

    getWebhookInfo: () => ({
      url: webhookUrl ?? '',
      has_custom_certificate: false,
      pending_update_count: queue.length,
      ...(allowedUpdates && webhookUrl ? { allowed_updates: allowedUpdates } : {}),
    }),

    setMyCommands: (call) => {
      const p = call.params;
      const scope = normalizeScope(p.scope);
      const lang = languageOf(p.language_code);
      const list = p.commands ?? [];
      if (!Array.isArray(list)) throw bad("can't parse commands JSON object");
      if (list.length > 100) throw bad('too many commands specified');
      const commands: TgBotCommand[] = list.map((c: unknown) => {
        if (typeof c !== 'object' || c === null) throw bad("can't parse BotCommand: BotCommand must be an Object");
        const cmd = c as Record<string, unknown>;
        if (cmd.command === undefined) throw bad(`can't parse BotCommand: Can't find field "command"`);
        if (cmd.description === undefined) throw bad(`can't parse BotCommand: Can't find field "description"`);
        const command = String(cmd.command);
        const description = String(cmd.description);
        if (!/^[a-z0-9_]{1,32}$/.test(command)) throw bad('BOT_COMMAND_INVALID');
        if (description.trim() === '') throw bad('command description must be non-empty');
        if (description.length > 256) throw bad('BOT_COMMAND_DESCRIPTION_INVALID');
        return { command, description };
      });
      const key = commandKey(scope, lang);
      if (commands.length === 0) commandSets.delete(key);
      else commandSets.set(key, { scope, language_code: lang, commands });
      return true;
    },

    getMyCommands: (call) => {
      const scope = normalizeScope(call.params.scope);
      const lang = languageOf(call.params.language_code);
      return structuredClone(commandSets.get(commandKey(scope, lang))?.commands ?? []);
    },

    deleteMyCommands: (call) => {
      const scope = normalizeScope(call.params.scope);
      const lang = languageOf(call.params.language_code);
      commandSets.delete(commandKey(scope, lang));
      return true;
    },

    sendMessage: (call) => {
      const p = call.params;
      const chat = resolveChat(p.chat_id);
      if (typeof p.text !== 'string' && typeof p.text !== 'number') throw bad('message text is empty');
      const text = String(p.text);
      const f = formatText(text, p.parse_mode, p.entities);
      if (f.text === '') throw bad('message text is empty');
      if (f.text.length > 4096) throw bad('message is too long');
      const markup = checkReplyMarkup(p.reply_markup);
      const replyTo = replyTarget(chat, p);
      const m = baseBotMessage(chat);
      m.text = text;
      if (p.parse_mode !== undefined) m.parse_mode = String(p.parse_mode);
      m.plainText = f.text;
      m.entities = f.entities;
      if (markup) m.reply_markup = markup;
      if (replyTo !== undefined) m.reply_to_message_id = replyTo;
      return toMessage(commitBotMessage(m));
    },

    editMessageText: (call) => {
      const p = call.params;
      if (typeof p.text !== 'string' && typeof p.text !== 'number') throw bad('message text is empty');
      const text = String(p.text);
      const f = formatText(text, p.parse_mode, p.entities);
      if (f.text === '') throw bad('message text is empty');
      if (f.text.length > 4096) throw bad('message is too long');
      const markup = checkReplyMarkup(p.reply_markup);
      const m = editTarget(p);
      if (m.plainText === undefined) throw bad('there is no text in the message to edit');
      if (m.plainText === f.text && sameJson(m.entities, f.entities) && sameJson(inlineOnly(m.reply_markup), inlineOnly(markup))) {
        throw bad(NOT_MODIFIED);
      }
      m.text = text;
      if (p.parse_mode !== undefined) m.parse_mode = String(p.parse_mode);
      else delete m.parse_mode;
      m.plainText = f.text;
      m.entities = f.entities;
      if (markup) m.reply_markup = markup;
      else delete m.reply_markup;
      m.edited = true;
      m.editCount++;
      m.edit_date = now();
      return toMessage(m);
    },

    editMessageReplyMarkup: (call) => {
      const p = call.params;
      const markup = checkReplyMarkup(p.reply_markup);
      const m = editTarget(p);
      if (sameJson(inlineOnly(m.reply_markup), inlineOnly(markup))) throw bad(NOT_MODIFIED);
      if (markup) m.reply_markup = markup;
      else delete m.reply_markup;
      m.edited = true;
      m.editCount++;
      m.edit_date = now();
      return toMessage(m);
    },

    deleteMessage: (call) => {
      const p = call.params;
      const chat = resolveChat(p.chat_id);
      const id = Number(p.message_id);
      if (!Number.isSafeInteger(id) || id <= 0) throw bad('message identifier is not specified');
      const m = findMessage(chat.id, id);
      if (!m || m.deleted) throw bad('message to delete not found');
      m.deleted = true;
      return true;
    },

    sendDocument: (call) => {
      const p = call.params;
      const chat = resolveChat(p.chat_id);
      const ref = inputFile(call, 'document');
      const caption = captionOf(p);
      const markup = checkReplyMarkup(p.reply_markup);
      const replyTo = replyTarget(chat, p);
      const stored =
        'stored' in ref
          ? ref.stored
          : storeFile(ref.upload.bytes, {
              kind: 'document',
              name: ref.upload.filename,
              mime: docMime(ref.upload.filename, ref.upload.contentType),
            });
      const m = baseBotMessage(chat);
      m.document = documentOf(stored);
      withCaption(m, p, caption);
      if (markup) m.reply_markup = markup;
      if (replyTo !== undefined) m.reply_to_message_id = replyTo;
      return toMessage(commitBotMessage(m));
    },

    sendPhoto: (call) => {
      const p = call.params;
      const chat = resolveChat(p.chat_id);
      const ref = inputFile(call, 'photo');
      if ('upload' in ref && !imageSize(ref.upload.bytes)) throw bad('IMAGE_PROCESS_FAILED');
      const caption = captionOf(p);
      const markup = checkReplyMarkup(p.reply_markup);
      const replyTo = replyTarget(chat, p);
      const stored = 'stored' in ref ? ref.stored : storeFile(ref.upload.bytes, { kind: 'photo' });
      const m = baseBotMessage(chat);
      m.photo = photoOf(stored);
      withCaption(m, p, caption);
      if (markup) m.reply_markup = markup;
      if (replyTo !== undefined) m.reply_to_message_id = replyTo;
      return toMessage(commitBotMessage(m));
    },

    sendChatAction: (call) => {
      resolveChat(call.params.chat_id);
      if (typeof call.params.action !== 'string' || !CHAT_ACTIONS.has(call.params.action)) throw bad('wrong parameter action in request');
      return true;
    },

    answerCallbackQuery: (call) => {
      const id = call.params.callback_query_id;
      if (typeof id !== 'string' || !openCallbackQueries.has(id)) {
        throw bad('query is too old and response timeout expired or query ID is invalid');
      }
      const text = call.params.text;
      if (typeof text === 'string' && text.length > 200) throw bad('MESSAGE_TOO_LONG');
      openCallbackQueries.delete(id);
      return true;
    },

    getFile: (call) => {
      const id = call.params.file_id;
      const f = typeof id === 'string' ? files.get(id) : undefined;
      if (!f) throw bad('invalid file_id');
      if (f.bytes.length > 20 * 1024 * 1024) throw bad('file is too big');
      return { file_id: f.file_id, file_unique_id: f.file_unique_id, file_size: f.bytes.length, file_path: f.file_path };
    },

    getUpdates: () => undefined, // answered by getUpdates() above
  };
  const canonical = new Map(Object.keys(handlers).map((k) => [k.toLowerCase(), k]));

  function takeFailure(call: RecordedCall): ActiveFailure | undefined {
    const idx = failures.findIndex(
      (f) => (f.method === '*' || f.method === call.method.toLowerCase()) && (!f.match || f.match(call)),
    );
    if (idx < 0) return undefined;
    const f = failures[idx]!;
    if (--f.remaining <= 0) failures.splice(idx, 1);
    return f;
  }

  function apiCall(req: IncomingMessage, res: ServerResponse, url: URL, tokenPart: string, methodPart: string, body: Buffer) {
    const requested = safeDecode(methodPart);
    const method = canonical.get(requested.toLowerCase()) ?? requested;
    let parsed: ParsedBody;
    let parseError: TgError | undefined;
    try {
      parsed = parseBody(req, body, url);
    } catch (err) {
      if (!(err instanceof TgError)) throw err;
      parsed = { params: {}, files: [], transport: 'none' };
      parseError = err;
    }
    const call: RecordedCall = {
      method,
      params: parsed.params,
      rawParams: { ...parsed.params },
      files: parsed.files,
      at: Date.now(),
      transport: parsed.transport,
      httpMethod: req.method ?? 'POST',
    };
    calls.push(call);
    if (safeDecode(tokenPart) !== token) {
      respond(call, res, { ok: false, error_code: 401, description: 'Unauthorized' });
      return;
    }
    const failure = takeFailure(call);
    if (failure) {
      call.failed = true;
      call.scripted = true;
      if (failure.dropConnection) {
        call.dropped = true;
        call.answeredAt = Date.now();
        req.socket.destroy();
        notify();
        return;
      }
      const status = failure.status ?? 429;
      const retryAfter = failure.retryAfter ?? (status === 429 ? 1 : undefined);
      const parameters = { ...(retryAfter !== undefined ? { retry_after: retryAfter } : {}), ...failure.parameters };
      respond(
        call,
        res,
        {
          ok: false,
          error_code: status,
          description: failure.description ?? defaultDescription(status, retryAfter),
          ...(Object.keys(parameters).length > 0 ? { parameters } : {}),
        },
        retryAfter !== undefined ? { 'retry-after': String(retryAfter) } : {},
      );
      return;
    }
    try {
      if (parseError) throw parseError;
      call.params = normalizeParams(parsed.params);
      const handler = handlers[method];
      if (!handler) throw new TgError(404, 'Not Found: method not found');
      if (method === 'getUpdates') {
        getUpdates(call, res);
        return;
      }
      const result = handler(call);
      if (result instanceof Described) respond(call, res, { ok: true, result: result.result, description: result.description });
      else respond(call, res, { ok: true, result });
    } catch (err) {
      if (!(err instanceof TgError)) throw err;
      respond(call, res, errorResponse(err));
    }
  }
  function download(res: ServerResponse, tokenPart: string, filePath: string) {
    const path = safeDecode(filePath);
    const json = (status: number, value: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(value));
    };
    if (safeDecode(tokenPart) !== token) return json(401, { ok: false, error_code: 401, description: 'Unauthorized' });
    const f = filesByPath.get(path);
    if (!f) return json(404, { ok: false, error_code: 404, description: 'Not Found' });
    res.writeHead(200, { 'content-type': f.mime_type ?? 'application/octet-stream', 'content-length': String(f.bytes.length) });
    res.end(f.bytes);
  }

  const server = createServer((req, res) => {
    if (closed) {
      req.socket.destroy();
      return;
    }
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      if (closed) {
        req.socket.destroy();
        return;
      }
      const body = Buffer.concat(parts);
      try {
        const url = new URL(req.url ?? '/', 'http://127.0.0.1');
        const file = /^\/file\/bot([^/]*)\/(.+)$/.exec(url.pathname);
        if (file) return download(res, file[1]!, file[2]!);
        const api = /^\/bot([^/]*)\/([^/]+)$/.exec(url.pathname);
        if (api) return apiCall(req, res, url, api[1]!, api[2]!, body);
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ ok: false, error_code: 404, description: 'Not Found' }));
      } catch (err) {
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ ok: false, error_code: 500, description: `Internal Server Error: ${String(err)}` }));
      }
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const apiRoot = `http://127.0.0.1:${port}`;

  // --- pushing updates -----------------------------------------------------------------------

  function pushUpdate(input: Partial<Update> | Record<string, unknown>): Update {
    const u = structuredClone(input) as Record<string, unknown>;
    if (typeof u.update_id !== 'number') u.update_id = nextUpdateId++;
    else nextUpdateId = Math.max(nextUpdateId, u.update_id + 1);
    for (const key of ['message', 'channel_post', 'business_message']) {
      const msg = u[key] as Record<string, unknown> | undefined;
      if (!msg || typeof msg !== 'object') continue;
      const chat = msg.chat as TgChat | undefined;
      if (!chat || typeof chat.id !== 'number') throw new Error(`telegram double: pushUpdate: ${key}.chat.id is required`);
      if (typeof msg.message_id !== 'number') msg.message_id = nextMessageId(chat);
      if (typeof msg.date !== 'number') msg.date = now();
      const from = (msg.from as TgUser | undefined) ?? { id: chat.id, is_bot: false, first_name: chat.title ?? chat.first_name ?? 'Channel' };
      storeMessage({
        chat: { ...chat },
        message_id: msg.message_id as number,
        from: 'user',
        sender: { ...from },
        date: msg.date as number,
        ...(typeof msg.text === 'string' ? { text: msg.text, plainText: msg.text } : {}),
        entities: (msg.entities as TgEntity[] | undefined) ?? [],
        ...(typeof msg.caption === 'string' ? { caption: msg.caption, plainCaption: msg.caption } : {}),
        caption_entities: (msg.caption_entities as TgEntity[] | undefined) ?? [],
        ...(msg.document ? { document: msg.document as TgDocument } : {}),
        ...(msg.photo ? { photo: msg.photo as TgPhotoSize[] } : {}),
        ...(msg.reply_markup ? { reply_markup: msg.reply_markup } : {}),
        edited: false,
        editCount: 0,
        deleted: false,
        raw: structuredClone(msg),
      });
    }
    const edited = (u.edited_message ?? u.edited_channel_post) as Record<string, unknown> | undefined;
    if (edited && typeof edited === 'object') {
      const chat = edited.chat as TgChat | undefined;
      const target = chat && typeof edited.message_id === 'number' ? findMessage(chat.id, edited.message_id) : undefined;
      if (target && target.from === 'user') {
        if (typeof edited.text === 'string') target.text = target.plainText = edited.text;
        target.entities = (edited.entities as TgEntity[] | undefined) ?? [];
        target.edited = true;
        target.editCount++;
        target.edit_date = typeof edited.edit_date === 'number' ? edited.edit_date : now();
        target.raw = structuredClone(edited);
      }
    }
    const cq = u.callback_query as Record<string, unknown> | undefined;
    if (cq && typeof cq.id === 'string') openCallbackQueries.add(cq.id);
    queue.push(u as unknown as Update);
    scheduleWake();
    notify();
    return structuredClone(u) as unknown as Update;
  }

  function textMessage(chat: TgChat, from: TgUser, text: string, extra: MessageExtra = {}): Update {
    const { chat: _chat, ...rest } = extra;
    const entities = detectEntities(text);
    return pushUpdate({
      message: {
        message_id: nextMessageId(chat),
        from: { ...from },
        chat: { ...chat },
        date: now(),
        text,
        ...(entities.length > 0 ? { entities } : {}),
        ...rest,
      },
    });
  }

  function storedFor(file: AddedFile | string): StoredFile {
    const id = typeof file === 'string' ? file : file.file_id;
    const f = files.get(id);
    if (!f) throw new Error(`telegram double: unknown file ${id} (register it with addFile first)`);
    return f;
  }

  function mediaMessage(from: TgUser, media: Record<string, unknown>, extra: MessageExtra & { caption?: string } = {}): Update {
    const { chat: chatOverride, caption, ...rest } = extra;
    const chat = chatOverride ?? privateChatOf(from);
    const captionEntities = caption !== undefined ? detectEntities(caption) : [];
    return pushUpdate({
      message: {
        message_id: nextMessageId(chat),
        from: { ...from },
        chat: { ...chat },
        date: now(),
        ...media,
        ...(caption !== undefined ? { caption } : {}),
        ...(captionEntities.length > 0 ? { caption_entities: captionEntities } : {}),
        ...rest,
      },
    });
  }

  return {
    apiRoot,
    token,
    botInfo: { ...botUser },
    calls,
    callsOf: (method) => calls.filter((c) => c.method.toLowerCase() === method.toLowerCase()),
    waitForCall: (method, predicate, timeoutMs = 5000) =>
      waitUntil(
        () => calls.find((c) => c.method.toLowerCase() === method.toLowerCase() && (!predicate || predicate(c))),
        timeoutMs,
        () => `a ${method} call${predicate ? ' matching the predicate' : ''} (calls so far: ${calls.map((c) => c.method).join(', ') || 'none'})`,
      ),
    waitFor: (probe, timeoutMs = 5000, what = 'a condition') => waitUntil(probe, timeoutMs, () => what),
    clearCalls: () => {
      calls.length = 0;
    },
    failNext: (method, script = {}) => {
      failures.push({ ...script, method: method.toLowerCase(), remaining: script.times ?? 1 });
    },
    pushUpdate,
    privateText: (from, text, extra) => textMessage(extra?.chat ?? privateChatOf(from), from, text, extra),
    groupText: (chat, from, text, extra) => textMessage(chat, from, text, extra),
    callbackQuery: (from, message, data, extra = {}) => {
      const m = findMessage(message.chat.id, message.message_id);
      if (!m) throw new Error(`telegram double: callbackQuery: unknown message ${message.message_id} in chat ${message.chat.id}`);
      const id = String(4_000_000_000_000_000 + ++callbackSeq * 1000 + (botId % 1000));
      return pushUpdate({
        callback_query: {
          id,
          from: { ...from },
          message: toMessage(m),
          chat_instance: String(Math.abs(m.chat.id * 7919 + botId) % 9_007_199_254_740_991),
          data,
          ...extra,
        },
      });
    },
    document: (from, file, extra) => {
      const f = storedFor(file);
      const document: TgDocument = {
        ...documentOf(f),
        ...(f.file_name === undefined ? { file_name: `file_${f.file_unique_id}` } : {}),
        ...(f.mime_type === undefined ? { mime_type: docMime(f.file_name, 'application/octet-stream') } : {}),
      };
      return mediaMessage(from, { document }, extra);
    },
    photo: (from, file, extra) => {
      const f = storedFor(file);
      if (f.width === undefined) Object.assign(f, imageSize(f.bytes) ?? {});
      return mediaMessage(from, { photo: photoOf(f) }, extra);
    },
    pendingUpdates: () => structuredClone(queue),

    addFile: (bytes, fileOpts = {}) => {
      const buf = typeof bytes === 'string' ? Buffer.from(bytes, 'utf8') : Buffer.from(bytes);
      const kind = fileOpts.kind ?? 'document';
      const mime = fileOpts.mime ?? (fileOpts.name ? docMime(fileOpts.name, 'application/octet-stream') : undefined);
      return addedFile(storeFile(buf, { kind, ...(fileOpts.name !== undefined ? { name: fileOpts.name } : {}), ...(mime ? { mime } : {}) }));
    },
    file: (fileId) => {
      const f = files.get(fileId);
      return f ? { ...addedFile(f), bytes: Buffer.from(f.bytes) } : undefined;
    },
    fileUrl: (filePath) => `${apiRoot}/file/bot${token}/${filePath}`,

    addChat: (chat) => registerChat(chat),
    messages: (chatId) => (chatMessages.get(keyOf(chatId)) ?? []).map(snapshot),
    message: (chatId, messageId) => {
      const m = findMessage(chatId, messageId);
      return m ? snapshot(m) : undefined;
    },

    commands: (scope, languageCode = '') =>
      structuredClone(commandSets.get(commandKey(normalizeScope(scope), languageCode))?.commands ?? []),
    commandSets: () => structuredClone([...commandSets.values()]),

    close: () => {
      if (closing) return closing;
      closed = true;
      closing = (async () => {
        for (const p of [...pendingWaits]) p.reject(new Error('telegram double: closed'));
        if (wakeHandle) clearImmediate(wakeHandle);
        wakeHandle = undefined;
        failures.length = 0;
        const flushed = [...polls].map(
          (p) =>
            new Promise<void>((resolve) => {
              p.res.once('finish', () => resolve());
              p.res.once('close', () => resolve());
              answerPoll(p, { ok: true, result: [] });
              if (p.res.writableFinished || p.res.destroyed) resolve();
            }),
        );
        await Promise.all(flushed);
        await new Promise<void>((resolve) => {
          server.close(() => resolve());
          for (const s of sockets) s.destroy();
        });
      })();
      return closing;
    },
  };
}
