/**
 * Telegram egress: a ChannelSender on grammY's `Api` alone, so a worker process sends without
 * polling for updates.
 *
 * - Markdown is rendered to Telegram HTML (`parse_mode: 'HTML'`, link previews off). When Telegram
 *   refuses the markup ("can't parse entities") the same part is sent again as plain text, so a
 *   rendering bug costs formatting, never the message.
 * - Short rate limits (retry_after up to 10 s) are waited out inside @grammyjs/auto-retry; longer
 *   ones surface as a DeliveryError with `retryAfterMs`, so the Temporal activity retries later
 *   instead of holding a slot.
 * - Telegram has no idempotency key for sends. Within one process the sender remembers the
 *   message each part became (by the outbox's idempotency key), so a retried part whose first
 *   attempt did reach Telegram (its documents failed, or recording it failed) is not posted again.
 *   Across a crash that window stays open (see domain/outbox.ts, which services/chat/deliveries.ts drives).
 */
import { autoRetry } from '@grammyjs/auto-retry';
import { Api, GrammyError, HttpError, InputFile } from 'grammy';
import type { InlineKeyboardButton, InlineKeyboardMarkup, LinkPreviewOptions } from 'grammy/types';
import type { Logger } from 'pino';
import { DeliveryError, type Button, type ChannelSender, type OutboundPart } from '../../services/chat/deliveries.js';
import type { ConversationKey } from '../../common/ids.js';
import { PLATFORM_LIMITS, renderPlain, renderTelegramHtml, splitMessage } from '../render/markdown.js';

/** Telegram's message length limit (UTF-16 code units of the visible text). */
export const TELEGRAM_LIMIT = PLATFORM_LIMITS.telegram;
/** Least time between two edits of one message: Telegram tolerates about one edit per second per chat. */
export const TELEGRAM_EDIT_INTERVAL_MS = 1_500;
/** Rate-limit waits up to this long happen inside auto-retry; longer ones become a DeliveryError. */
export const MAX_RATE_LIMIT_WAIT_SECONDS = 10;
/** Telegram's limits on inline keyboards. */
const MAX_BUTTONS_PER_ROW = 8;
const MAX_CALLBACK_DATA_BYTES = 64;
/** How many sent parts the sender remembers for retried sends. */
const REMEMBERED_PARTS = 1_000;

const NO_PREVIEW: LinkPreviewOptions = { is_disabled: true };

export interface TelegramSenderOptions {
  token: string;
  /** Bot API root, e.g. `http://127.0.0.1:PORT` (default `https://api.telegram.org`). */
  apiRoot?: string;
  log?: Logger;
}

export type TelegramSender = ChannelSender & { api: Api };

/**
 * The bot's user id from its token (`<bot id>:<secret>`). Steward uses it as the conversation's
 * account, so the polling adapter and a sender-only worker agree without a network call.
 */
export function telegramAccountFromToken(token: string): string {
  const m = /^(\d{1,20}):[A-Za-z0-9_-]{1,}$/.exec(token.trim());
  if (!m) throw new Error('the Telegram token does not look like a bot token (expected <bot id>:<secret>)');
  return m[1]!;
}

/** The auto-retry settings Steward installs on every grammY Api it makes. */
export function telegramAutoRetry(): ReturnType<typeof autoRetry> {
  // 5xx and network failures go back to Temporal at once: its retry policy backs off (and bounds) them
  return autoRetry({ maxDelaySeconds: MAX_RATE_LIMIT_WAIT_SECONDS, maxRetryAttempts: 3, rethrowHttpErrors: true, rethrowInternalServerErrors: true });
}

/** A conversation's chat id as the Bot API takes it (a number, or an `@channel` username). */
export function telegramChatId(chatId: string): number | string {
  if (/^-?\d{1,16}$/.test(chatId)) {
    const n = Number(chatId);
    if (Number.isSafeInteger(n)) return n;
  }
  return chatId;
}

function messageIdOf(externalId: string): number {
  const n = Number(externalId);
  if (!/^\d+$/.test(externalId) || !Number.isSafeInteger(n) || n <= 0) {
    throw new DeliveryError(`"${externalId}" is not a Telegram message id`, { permanent: true });
  }
  return n;
}

/** Rows of buttons as a Telegram inline keyboard (a row over 8 buttons wraps). */
export function telegramKeyboard(buttons: readonly (readonly Button[])[]): InlineKeyboardMarkup {
  const rows: InlineKeyboardButton[][] = [];
  for (const row of buttons) {
    const usable = row.filter((b) => {
      const size = Buffer.byteLength(b.id, 'utf8');
      return size >= 1 && size <= MAX_CALLBACK_DATA_BYTES;
    });
    for (let i = 0; i < usable.length; i += MAX_BUTTONS_PER_ROW) {
      rows.push(usable.slice(i, i + MAX_BUTTONS_PER_ROW).map((b) => ({ text: b.label.trim() || '·', callback_data: b.id })));
    }
  }
  return { inline_keyboard: rows };
}

// --- errors ----------------------------------------------------------------------------------

/** Telegram refused the markup of a formatted text. */
export function isEntityError(err: unknown): boolean {
  return err instanceof GrammyError && err.error_code === 400 && /can't parse entities/i.test(err.description);
}

function isNotModified(err: unknown): boolean {
  return err instanceof GrammyError && err.error_code === 400 && /message is not modified/i.test(err.description);
}

/** Map a Bot API failure to a DeliveryError (DeliveryErrors pass through). */
export function toDeliveryError(err: unknown, what: string): DeliveryError {
  if (err instanceof DeliveryError) return err;
  if (err instanceof GrammyError) {
    const status = err.error_code;
    if (status === 429) {
      const seconds = err.parameters.retry_after ?? 1;
      return new DeliveryError(`Telegram rate limit on ${what}: retry in ${seconds} s`, { retryAfterMs: seconds * 1000, status, cause: err });
    }
    const migrated = err.parameters.migrate_to_chat_id;
    const detail = migrated !== undefined ? `${err.description} (the group is now chat ${migrated})` : err.description;
    // 401/404: the token or the API root is wrong (the operator fixes that, not this message);
    // 5xx: Telegram's side. Everything else (400 bad request, 403 blocked or kicked) cannot
    // succeed by sending the same call again.
    const retryable = status === 401 || status === 404 || status === 408 || status >= 500;
    return new DeliveryError(`Telegram refused ${what}: ${detail} (${status})`, { permanent: !retryable, status, cause: err });
  }
  if (err instanceof HttpError) {
    return new DeliveryError(`Telegram could not be reached for ${what}: ${err.message}`, { cause: err });
  }
  if (err instanceof Error) return new DeliveryError(`Telegram ${what} failed: ${err.message}`, { cause: err });
  return new DeliveryError(`Telegram ${what} failed: ${String(err)}`);
}

// --- the sender --------------------------------------------------------------------------------

interface SentPart {
  messageId: number;
  /** Documents of the part that have gone out. */
  filesSent: number;
}

export function createTelegramSender(opts: TelegramSenderOptions): TelegramSender {
  const api = new Api(opts.token, opts.apiRoot ? { apiRoot: opts.apiRoot } : undefined);
  api.config.use(telegramAutoRetry());
  const log = opts.log;
  const sent = new Map<string, SentPart>();

  const remember = (key: string, part: SentPart) => {
    sent.delete(key);
    sent.set(key, part);
    while (sent.size > REMEMBERED_PARTS) {
      const oldest = sent.keys().next();
      if (oldest.done) break;
      sent.delete(oldest.value);
    }
  };

  /** Run a Bot API call with formatting; on an entity error run `plain` once; map failures. */
  async function call<T>(what: string, formatted: () => Promise<T>, plain?: () => Promise<T>): Promise<T> {
    try {
      try {
        return await formatted();
      } catch (err) {
        if (!plain || !isEntityError(err)) throw err;
        log?.warn({ err: (err as GrammyError).description }, `Telegram rejected the formatting of ${what}; sending it as plain text`);
        return await plain();
      }
    } catch (err) {
      const mapped = toDeliveryError(err, what);
      log?.warn({ err: mapped.message, status: mapped.status }, `Telegram ${what} failed`);
      throw mapped;
    }
  }

  return {
    api,
    editIntervalMs: TELEGRAM_EDIT_INTERVAL_MS,

    split(text: string): string[] {
      return splitMessage(text, 'telegram-html', TELEGRAM_LIMIT).map((p) => p.markdown);
    },

    async send(conversation: ConversationKey, part: OutboundPart): Promise<string> {
      const chatId = telegramChatId(conversation.chatId);
      const what = `message ${part.index + 1}/${part.count} to chat ${conversation.chatId}`;
      let progress = sent.get(part.idempotencyKey);
      if (!progress) {
        const reply_markup = part.buttons?.length ? telegramKeyboard(part.buttons) : undefined;
        const extra = { link_preview_options: NO_PREVIEW, ...(reply_markup ? { reply_markup } : {}) };
        const msg = await call(
          what,
          () => api.sendMessage(chatId, renderTelegramHtml(part.text), { ...extra, parse_mode: 'HTML' }),
          () => api.sendMessage(chatId, renderPlain(part.text), extra),
        );
        progress = { messageId: msg.message_id, filesSent: 0 };
        remember(part.idempotencyKey, progress);
      }
      for (let i = progress.filesSent; i < part.files.length; i++) {
        const file = part.files[i]!;
        await call(`file ${file.name} to chat ${conversation.chatId}`, () => api.sendDocument(chatId, new InputFile(file.data, file.name)));
        progress.filesSent = i + 1;
      }
      return String(progress.messageId);
    },

    async edit(conversation: ConversationKey, externalId: string, text: string, buttons?: Button[][] | null): Promise<void> {
      const chatId = telegramChatId(conversation.chatId);
      const messageId = messageIdOf(externalId);
      // An edit cannot split: keep the first part (a progress panel is short anyway).
      const parts = splitMessage(text, 'telegram-html', TELEGRAM_LIMIT - 2);
      const first = parts[0]?.markdown ?? text;
      const more = parts.length > 1 ? '\n…' : '';
      // Telegram drops the inline keyboard of an edited message unless it is sent again.
      const reply_markup = buttons === null ? { inline_keyboard: [] } : buttons?.length ? telegramKeyboard(buttons) : undefined;
      const extra = { link_preview_options: NO_PREVIEW, ...(reply_markup ? { reply_markup } : {}) };
      // "message is not modified": it already shows this, which is what was asked for.
      const unlessSame = (run: () => Promise<unknown>) => async (): Promise<unknown> => {
        try {
          return await run();
        } catch (err) {
          if (isNotModified(err)) return true;
          throw err;
        }
      };
      await call(
        `edit of message ${externalId} in chat ${conversation.chatId}`,
        unlessSame(() => api.editMessageText(chatId, messageId, `${renderTelegramHtml(first)}${more}`, { ...extra, parse_mode: 'HTML' })),
        unlessSame(() => api.editMessageText(chatId, messageId, `${renderPlain(first)}${more}`, extra)),
      );
    },

    async remove(conversation: ConversationKey, externalId: string): Promise<void> {
      const messageId = messageIdOf(externalId);
      await call(`delete of message ${externalId} in chat ${conversation.chatId}`, () => api.deleteMessage(telegramChatId(conversation.chatId), messageId));
    },
  };
}
