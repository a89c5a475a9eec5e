/**
 * Discord egress: a ChannelSender on @discordjs/rest alone, so a worker process sends without
 * a gateway connection.
 *
 * - Every message goes out with `allowed_mentions: { parse: [] }`: model text never pings
 *   @everyone, roles or users.
 * - Every part carries a nonce derived from the outbox's idempotency key, with
 *   `enforce_nonce`: Discord answers a repeated nonce (within a few minutes) with the message it
 *   already made, so a retried delivery never posts a part twice.
 * - Short rate limits are waited out inside @discordjs/rest (it honours retry_after); a wait
 *   longer than MAX_RATE_LIMIT_WAIT_MS is rejected and surfaces as a DeliveryError with
 *   `retryAfterMs`, so the Temporal activity retries later instead of holding a slot.
 */
import { createHash } from 'node:crypto';
import { REST, type RawFile, type RESTOptions } from '@discordjs/rest';
import {
  ButtonStyle,
  ComponentType,
  Routes,
  type APIActionRowComponent,
  type APIButtonComponentWithCustomId,
  type RESTPatchAPIChannelMessageJSONBody,
  type RESTPostAPIChannelMessageJSONBody,
  type RESTPostAPIChannelMessageResult,
} from 'discord-api-types/v10';
import type { Logger } from 'pino';
import { DeliveryError, type Button, type ChannelSender, type OutboundPart } from '../../services/chat/deliveries.js';
import type { ConversationKey } from '../../common/ids.js';
import { PLATFORM_LIMITS, renderDiscord, renderPlain, splitMessage } from '../render/markdown.js';

/** Discord's message length limit (characters). */
export const DISCORD_LIMIT = PLATFORM_LIMITS.discord;
/** Least time between two edits of one message: Discord allows about 5 edits per 5 s per channel. */
export const DISCORD_EDIT_INTERVAL_MS = 1_200;
/** Rate-limit waits up to this long happen inside @discordjs/rest; longer ones become a DeliveryError. */
export const MAX_RATE_LIMIT_WAIT_MS = 10_000;
/** Discord's limits on message components. */
const MAX_ROWS = 5;
const MAX_BUTTONS_PER_ROW = 5;
const MAX_LABEL = 80;
const MAX_CUSTOM_ID = 100;

/** Discord JSON error codes after which retrying the same call cannot help. */
export const PERMANENT_CODES: ReadonlySet<number> = new Set([
  10003, // Unknown Channel
  10008, // Unknown Message
  50001, // Missing Access
  50007, // Cannot send messages to this user
  50013, // Missing Permissions
]);

export interface DiscordSenderOptions {
  /** The bot token (without the `Bot ` prefix). */
  token: string;
  /** REST base without the version, e.g. `http://127.0.0.1:PORT/api` (default Discord's). */
  api?: string;
  log?: Logger;
  /**
   * A REST client to use instead of a new one (it is given the token). Configure its
   * `rejectOnRateLimit` yourself (see `discordRestOptions`), or long rate limits are waited out.
   */
  rest?: REST;
}

export type DiscordSender = ChannelSender & { rest: REST };

/**
 * The bot's user id from its token: a bot token's first segment is the user id in base64. Steward
 * uses it as the conversation's account, so the gateway adapter and a sender-only worker agree
 * without a network call.
 */
export function discordAccountFromToken(token: string): string {
  const first = token.replace(/^Bot\s+/i, '').split('.')[0] ?? '';
  const id = first ? Buffer.from(first, 'base64url').toString('utf8') : '';
  if (!/^\d{15,21}$/.test(id)) throw new Error('the Discord token does not start with a bot user id (expected <base64 user id>.<timestamp>.<hmac>)');
  return id;
}

/** A Discord nonce for an idempotency key: stable, 25 characters (Discord's maximum). */
export function discordNonce(idempotencyKey: string): string {
  return createHash('sha256').update(idempotencyKey).digest('hex').slice(0, 25);
}

/** REST options Steward uses for Discord: long rate-limit waits are rejected instead of slept. */
export function discordRestOptions(api?: string): Partial<RESTOptions> {
  return {
    ...(api ? { api } : {}),
    rejectOnRateLimit: (d) => Math.max(d.retryAfter, d.timeToReset, d.sublimitTimeout) > MAX_RATE_LIMIT_WAIT_MS,
  };
}

const STYLE: Record<NonNullable<Button['style']>, ButtonStyle.Primary | ButtonStyle.Secondary | ButtonStyle.Danger> = {
  primary: ButtonStyle.Primary,
  secondary: ButtonStyle.Secondary,
  danger: ButtonStyle.Danger,
};

/** Rows of buttons as Discord action rows (a row over 5 buttons wraps; at most 5 rows). */
export function discordComponents(buttons: readonly (readonly Button[])[]): APIActionRowComponent<APIButtonComponentWithCustomId>[] {
  const rows: APIActionRowComponent<APIButtonComponentWithCustomId>[] = [];
  for (const row of buttons) {
    for (let i = 0; i < row.length; i += MAX_BUTTONS_PER_ROW) {
      const components = row.slice(i, i + MAX_BUTTONS_PER_ROW).map(
        (b): APIButtonComponentWithCustomId => ({
          type: ComponentType.Button,
          style: STYLE[b.style ?? 'secondary'],
          label: b.label.slice(0, MAX_LABEL) || '·',
          custom_id: b.id.slice(0, MAX_CUSTOM_ID),
        }),
      );
      if (components.length) rows.push({ type: ComponentType.ActionRow, components });
    }
  }
  return rows.slice(0, MAX_ROWS);
}

// --- errors ----------------------------------------------------------------------------------
// @discordjs/rest ships as CommonJS and as ESM; discord.js loads the first, this module the
// second, so `instanceof` would miss errors from a REST client discord.js made. Recognise them
// by shape instead.

interface ApiErrorShape {
  status: number;
  code: number | string;
  message: string;
  rawError?: unknown;
}
interface RateLimitShape {
  retryAfter: number;
  timeToReset: number;
  sublimitTimeout: number;
  global: boolean;
  route: string;
}

function errName(err: unknown): string {
  return err instanceof Error ? err.name : '';
}
export function isDiscordApiError(err: unknown): err is Error & ApiErrorShape {
  return err instanceof Error && errName(err).startsWith('DiscordAPIError') && typeof (err as Partial<ApiErrorShape>).status === 'number';
}
function isRateLimitError(err: unknown): err is Error & RateLimitShape {
  return err instanceof Error && errName(err).startsWith('RateLimitError') && typeof (err as Partial<RateLimitShape>).retryAfter === 'number';
}
function isHttpError(err: unknown): err is Error & { status: number } {
  return err instanceof Error && errName(err) === 'HTTPError' && typeof (err as { status?: unknown }).status === 'number';
}

/** Discord rejected the content itself (400 Invalid Form Body naming `content`). */
export function isContentRejected(err: unknown): boolean {
  if (!isDiscordApiError(err) || err.status !== 400 || err.code !== 50035) return false;
  const raw = err.rawError;
  const errors = typeof raw === 'object' && raw !== null ? (raw as { errors?: unknown }).errors : undefined;
  return (typeof errors === 'object' && errors !== null && 'content' in errors) || /\bcontent\b/.test(err.message);
}

/** Map a REST failure to a DeliveryError (anything else passes through unchanged). */
export function toDeliveryError(err: unknown, what: string): unknown {
  if (err instanceof DeliveryError) return err;
  if (isRateLimitError(err)) {
    const wait = Math.ceil(Math.max(err.retryAfter, err.timeToReset, err.sublimitTimeout));
    return new DeliveryError(`Discord rate limit on ${what}: retry in ${wait} ms`, { retryAfterMs: wait, status: 429, cause: err });
  }
  if (isDiscordApiError(err)) {
    const code = typeof err.code === 'number' ? err.code : Number(err.code);
    // 401: the token is wrong (fixable by the operator, not by this message); 408/429: try again.
    const retryable = err.status === 401 || err.status === 408 || err.status === 429 || err.status >= 500;
    const permanent = PERMANENT_CODES.has(code) || !retryable;
    return new DeliveryError(`Discord refused ${what}: ${err.message} (${err.status}, code ${err.code})`, { permanent, status: err.status, cause: err });
  }
  if (isHttpError(err)) {
    return new DeliveryError(`Discord failed ${what}: HTTP ${err.status}`, { status: err.status, cause: err });
  }
  if (err instanceof Error) {
    // network failures and timeouts (AbortError): transient
    return new DeliveryError(`Discord could not be reached for ${what}: ${err.message}`, { cause: err });
  }
  return err;
}

// --- the sender --------------------------------------------------------------------------------

export function createDiscordSender(opts: DiscordSenderOptions): DiscordSender {
  const rest = opts.rest ?? new REST(discordRestOptions(opts.api));
  rest.setToken(opts.token.replace(/^Bot\s+/i, ''));
  const log = opts.log;

  /** Run a REST call; on a content rejection run `fallback` once; map failures. */
  async function call<T>(what: string, run: () => Promise<T>, fallback?: () => Promise<T>): Promise<T> {
    try {
      try {
        return await run();
      } catch (err) {
        if (!fallback || !isContentRejected(err)) throw err;
        log?.warn({ err: (err as Error).message }, `Discord rejected the formatted text of ${what}; sending it as plain text`);
        return await fallback();
      }
    } catch (err) {
      const mapped = toDeliveryError(err, what);
      log?.warn({ err: mapped instanceof Error ? mapped.message : String(mapped) }, `Discord ${what} failed`);
      throw mapped;
    }
  }

  /** The rendered text for one message, within the limit. */
  const contentOf = (markdown: string, plain: boolean): string => {
    const text = plain ? renderPlain(markdown) : renderDiscord(markdown);
    return [...text].length > DISCORD_LIMIT ? `${[...text].slice(0, DISCORD_LIMIT - 1).join('')}…` : text;
  };

  return {
    rest,
    editIntervalMs: DISCORD_EDIT_INTERVAL_MS,

    split(text: string): string[] {
      return splitMessage(text, 'discord', DISCORD_LIMIT).map((p) => p.markdown);
    },

    async send(conversation: ConversationKey, part: OutboundPart): Promise<string> {
      const files: RawFile[] = part.files.map((f, i) => ({ key: `files[${i}]`, name: f.name, data: f.data, contentType: f.mediaType }));
      const body = (plain: boolean): RESTPostAPIChannelMessageJSONBody => ({
        content: contentOf(part.text, plain),
        allowed_mentions: { parse: [] },
        nonce: discordNonce(part.idempotencyKey),
        enforce_nonce: true,
        ...(part.buttons?.length ? { components: discordComponents(part.buttons) } : {}),
        ...(files.length ? { attachments: part.files.map((f, i) => ({ id: i, filename: f.name })) } : {}),
      });
      const post = (plain: boolean) =>
        rest.post(Routes.channelMessages(conversation.chatId), { body: body(plain), ...(files.length ? { files } : {}) }) as Promise<RESTPostAPIChannelMessageResult>;
      const msg = await call(`message ${part.index + 1}/${part.count} to channel ${conversation.chatId}`, () => post(false), () => post(true));
      return msg.id;
    },

    async edit(conversation: ConversationKey, externalId: string, text: string, buttons?: Button[][] | null): Promise<void> {
      // An edit cannot split: keep the first part (a progress panel is short anyway).
      const parts = splitMessage(text, 'discord', DISCORD_LIMIT - 2);
      const first = parts[0]?.markdown ?? text;
      const more = parts.length > 1 ? '\n…' : '';
      const body = (plain: boolean): RESTPatchAPIChannelMessageJSONBody => ({
        content: `${contentOf(first, plain)}${more}`,
        allowed_mentions: { parse: [] },
        ...(buttons === null ? { components: [] } : buttons ? { components: discordComponents(buttons) } : {}),
      });
      const patch = (plain: boolean) => rest.patch(Routes.channelMessage(conversation.chatId, externalId), { body: body(plain) });
      await call(`edit of message ${externalId} in channel ${conversation.chatId}`, () => patch(false), () => patch(true));
    },

    async remove(conversation: ConversationKey, externalId: string): Promise<void> {
      await call(`delete of message ${externalId} in channel ${conversation.chatId}`, () => rest.delete(Routes.channelMessage(conversation.chatId, externalId)));
    },
  };
}
