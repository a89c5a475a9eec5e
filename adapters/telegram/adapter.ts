/**
 * Telegram ingress: grammY long polling that normalises messages and button clicks for the
 * ingress, and keeps the bot's command menus in step with the command catalog.
 *
 * The adapter decides nothing: who may talk, whether a group is bound, whether a group message
 * is for Steward in this chat's mode and what each role may do are the ingress's calls. The
 * adapter only says what Telegram tells it: who wrote, where, whether the message addresses
 * the bot, and which files came with it (fetched only if the ingress lets the sender in).
 * Answers go out through the outbox, i.e. the Telegram sender.
 *
 * Updates are handled one at a time in arrival order (grammY's simple long polling), so a
 * chat's messages reach the ingress in the order they were sent.
 */
import { Bot, type Api } from 'grammy';
import type { BotCommand, BotCommandScope, Message, MessageEntity, User } from 'grammy/types';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { ActionResult, InboundAction, Ingress, PendingAttachment } from '../../services/chat/intake.js';
import { COMMANDS, isAdminCommand, telegramCommandName, type CommandSpec } from '../../common/commands.js';
import { ChatIdSchema, type InboundMessage } from '../../common/schemas.js';
import { telegramAccountFromToken, telegramAutoRetry, telegramChatId } from './sender.js';

const DEFAULT_API_ROOT = 'https://api.telegram.org';
/** Telegram's limit on a callback query answer. */
const MAX_CALLBACK_ANSWER = 200;
/** Telegram's limit on a command description. */
const MAX_COMMAND_DESCRIPTION = 256;
/** How long a file download may take. */
const DOWNLOAD_TIMEOUT_MS = 60_000;
/** How long stop() waits for the update being handled. */
const DRAIN_TIMEOUT_MS = 10_000;

export interface TelegramAdapterOptions {
  token: string;
  /** Bot API root, e.g. `http://127.0.0.1:PORT` (default `https://api.telegram.org`). */
  apiRoot?: string;
  ingress: Ingress;
  log?: Logger;
  /** Chats that get the admin command menu (the admin channel, admins' DMs). */
  adminChats?: () => Promise<string[]>;
}

export interface TelegramAdapter {
  /** The bot id: the `account` of every conversation this adapter serves. */
  account: string;
  bot: Bot;
  /** Fetch the bot's identity, set the command menus and begin long polling (resolves once polling has begun). */
  start(): Promise<void>;
  /** Stop polling; resolves once the update being handled (if any) is done, or after 10 s. */
  stop(): Promise<void>;
  /** Set the command menus from the catalog (default, private chats, each admin chat). */
  syncCommands(): Promise<void>;
}

// --- normalising --------------------------------------------------------------------------------

/** The bot as the normaliser needs it (grammY's `bot.botInfo` fits). */
export interface TelegramBotIdentity {
  id: number;
  username: string;
}

/** A file a message carries, before it is fetched. */
export interface TelegramFileRef {
  fileId: string;
  name: string;
  mediaType: string;
  size?: number;
}

export interface TelegramInbound {
  message: InboundMessage;
  files: TelegramFileRef[];
}

/** A Telegram user's display name: first and last name, else the username. */
export function telegramDisplayName(user: Pick<User, 'id' | 'first_name' | 'last_name' | 'username'>): string {
  const name = [user.first_name, user.last_name].filter((p) => p && p.trim()).join(' ').trim();
  return (name || (user.username ? `@${user.username}` : `user ${user.id}`)).slice(0, 200);
}

/** Cut a text to `max` UTF-16 code units (Telegram counts those), never inside a surrogate pair. */
function cut(text: string, max: number): string {
  if (text.length <= max) return text;
  let end = max - 1;
  const c = text.charCodeAt(end - 1);
  if (c >= 0xd800 && c <= 0xdbff) end--;
  return `${text.slice(0, end)}…`;
}

/**
 * Whether a message addresses the bot, and its text without the bot's @mention. Addressed: an
 * `@botname` mention (any case), a text_mention of the bot, a reply to one of the bot's messages,
 * or a command at the start that is addressed to this bot: `/cmd@botname`, or a bare `/cmd`
 * (Telegram delivers bare group commands to a bot in privacy mode only when meant for it). A
 * command addressed to another bot (`/cmd@otherbot`) does not address this one.
 */
export function addressing(
  text: string,
  entities: readonly MessageEntity[],
  bot: TelegramBotIdentity,
  replyTo?: Pick<Message, 'from'>,
): { addressed: boolean; text: string } {
  const username = bot.username.toLowerCase();
  let addressed = replyTo?.from?.id === bot.id;
  const cuts: Array<[number, number]> = [];
  for (const e of entities) {
    // an entity outside the text (Telegram never sends one) addresses nothing and cuts nothing
    if (!Number.isInteger(e.offset) || !Number.isInteger(e.length) || e.offset < 0 || e.length <= 0 || e.offset + e.length > text.length) continue;
    const s = text.slice(e.offset, e.offset + e.length);
    if (e.type === 'mention' && s.toLowerCase() === `@${username}`) {
      addressed = true;
      cuts.push([e.offset, e.offset + e.length]);
    } else if (e.type === 'text_mention' && e.user.id === bot.id) {
      addressed = true;
      cuts.push([e.offset, e.offset + e.length]);
    } else if (e.type === 'bot_command' && e.offset === 0) {
      const at = s.indexOf('@');
      if (at < 0 || s.slice(at + 1).toLowerCase() === username) addressed = true;
    }
  }
  let out = text;
  for (const [start, end] of cuts.sort((a, b) => b[0] - a[0])) {
    // take one space along so "hey @bot what" reads "hey what"
    const eat = out[end] === ' ' && (start === 0 || /\s/.test(out[start - 1] ?? '')) ? 1 : 0;
    out = out.slice(0, start) + out.slice(end + eat);
  }
  return { addressed, text: out.trim() };
}

/** The largest size of a photo (Telegram sends several). */
function largestPhoto<T extends { width: number; height: number; file_size?: number }>(sizes: readonly T[]): T | undefined {
  let best: T | undefined;
  for (const p of sizes) {
    if (!best || p.width * p.height > best.width * best.height || (p.width * p.height === best.width * best.height && (p.file_size ?? 0) > (best.file_size ?? 0))) best = p;
  }
  return best;
}

/**
 * Normalise a Telegram message into Steward's inbound message and the files it carries.
 * Undefined for what is not a person talking: messages from bots (anonymous group admins
 * included) and service messages (members joining, pins, ...).
 */
export function normalizeTelegramMessage(m: Message, bot: TelegramBotIdentity, account: string, now = new Date()): TelegramInbound | undefined {
  const from = m.from;
  if (!from || from.is_bot) return undefined;
  const files: TelegramFileRef[] = [];
  if (m.document) {
    const d = m.document;
    files.push({
      fileId: d.file_id,
      name: d.file_name || `document-${d.file_unique_id}`,
      mediaType: d.mime_type || 'application/octet-stream',
      ...(d.file_size !== undefined ? { size: d.file_size } : {}),
    });
  }
  const photo = m.photo ? largestPhoto(m.photo) : undefined;
  if (photo) {
    files.push({
      fileId: photo.file_id,
      name: `photo-${photo.file_unique_id}.jpg`,
      mediaType: 'image/jpeg',
      ...(photo.file_size !== undefined ? { size: photo.file_size } : {}),
    });
  }
  const raw = m.text ?? m.caption;
  if (raw === undefined && files.length === 0) return undefined; // a service message, a sticker, ...
  const { addressed, text } = addressing(raw ?? '', (m.text !== undefined ? m.entities : m.caption_entities) ?? [], bot, m.reply_to_message);
  const dm = m.chat.type === 'private';
  return {
    message: {
      id: String(m.message_id),
      platform: 'telegram',
      account,
      chatId: String(m.chat.id),
      chatType: dm ? 'dm' : 'group',
      user: telegramDisplayName(from),
      userId: String(from.id),
      // a direct message is always to the bot
      addressed: dm || addressed,
      text,
      at: (Number.isFinite(m.date) && m.date > 0 && m.date <= 8_640_000_000_000 ? new Date(m.date * 1000) : now).toISOString(),
    },
    files,
  };
}

// --- command menus -------------------------------------------------------------------------------

/** A command's menu text: its arguments first (the menu sends a command at once when tapped), then what it does. */
export function telegramCommandDescription(spec: CommandSpec): string {
  const hint = spec.args
    .map((a) => {
      const inner = a.choices?.length ? a.choices.join('|') : a.name;
      return a.required ? `<${inner}>` : `[${inner}]`;
    })
    .join(' ');
  return cut(hint ? `${hint} - ${spec.description}` : spec.description, MAX_COMMAND_DESCRIPTION);
}

const menuOf = (specs: readonly CommandSpec[]): BotCommand[] =>
  specs.map((c) => ({ command: telegramCommandName(c.name), description: telegramCommandDescription(c) }));

/**
 * The command menus, from the catalog: everyone paired sees the non-admin commands; private chats
 * also /pair; each admin chat every command that fits it (an admin group has no /pair, an admin's
 * DM no group-only commands). Deterministic: the same admin chats give the same calls.
 */
export function telegramCommandMenus(adminChatIds: readonly string[] = []): Array<{ scope: BotCommandScope; commands: BotCommand[] }> {
  const everyone = COMMANDS.filter((c) => c.minRole !== null && !isAdminCommand(c) && c.where !== 'dm' && c.where !== 'group');
  const inPrivate = COMMANDS.filter((c) => (c.minRole === null || !isAdminCommand(c)) && c.where !== 'group');
  const menus: Array<{ scope: BotCommandScope; commands: BotCommand[] }> = [
    { scope: { type: 'default' }, commands: menuOf(everyone) },
    { scope: { type: 'all_private_chats' }, commands: menuOf(inPrivate) },
  ];
  for (const id of [...new Set(adminChatIds)]) {
    const chatId = telegramChatId(id);
    const group = typeof chatId === 'string' || chatId < 0;
    const fits = COMMANDS.filter((c) => c.minRole !== null && c.where !== (group ? 'dm' : 'group'));
    menus.push({ scope: { type: 'chat', chat_id: chatId }, commands: menuOf(fits) });
  }
  return menus;
}

// --- the adapter ---------------------------------------------------------------------------------

const AdminChatsSchema = z.array(ChatIdSchema);

/** A PendingAttachment that downloads a Telegram file (getFile, then the file URL). */
function pendingFile(api: Api, fileRoot: string, ref: TelegramFileRef): PendingAttachment {
  return {
    name: ref.name,
    mediaType: ref.mediaType,
    ...(ref.size !== undefined ? { size: ref.size } : {}),
    async fetch(): Promise<Buffer> {
      const file = await api.getFile(ref.fileId);
      if (!file.file_path) throw new Error('Telegram gave no download path for the file');
      // The URL carries the token: it must never reach an error message or a log.
      const res = await fetch(`${fileRoot}/${file.file_path}`, { signal: AbortSignal.timeout(DOWNLOAD_TIMEOUT_MS) }).catch((err: unknown) => {
        throw new Error(`the download failed (${err instanceof Error ? err.name : 'error'})`);
      });
      if (!res.ok) {
        await res.body?.cancel();
        throw new Error(`the download failed (HTTP ${res.status})`);
      }
      return Buffer.from(await res.arrayBuffer());
    },
  };
}

export function createTelegramAdapter(opts: TelegramAdapterOptions): TelegramAdapter {
  const account = telegramAccountFromToken(opts.token);
  const apiRoot = (opts.apiRoot ?? DEFAULT_API_ROOT).replace(/\/+$/, '');
  const fileRoot = `${apiRoot}/file/bot${opts.token}`;
  const { ingress, log } = opts;
  const bot = new Bot(opts.token, { client: { apiRoot } });
  bot.api.config.use(telegramAutoRetry());
  let running: Promise<void> | undefined;

  const me = (): TelegramBotIdentity => ({ id: bot.botInfo.id, username: bot.botInfo.username });

  bot.on('message', async (ctx) => {
    const inbound = normalizeTelegramMessage(ctx.message, me(), account);
    if (!inbound) return;
    // a bare mention, a sticker: nothing to pass on (as on Discord)
    if (!inbound.message.text.trim() && inbound.files.length === 0) return;
    const attachments = inbound.files.map((f) => pendingFile(ctx.api, fileRoot, f));
    const result = await ingress.handle(inbound.message, attachments.length ? { attachments } : {});
    log?.debug({ chatId: inbound.message.chatId, messageId: inbound.message.id, kind: result.kind, reason: result.reason, duplicate: result.duplicate }, 'telegram message handled');
  });

  bot.on('callback_query:data', async (ctx) => {
    const q = ctx.callbackQuery;
    const chat = q.message?.chat;
    const action: InboundAction = {
      platform: 'telegram',
      account,
      chatId: String(chat?.id ?? q.from.id),
      chatType: chat && chat.type !== 'private' ? 'group' : 'dm',
      userId: String(q.from.id),
      user: telegramDisplayName(q.from),
      data: q.data,
      id: q.id,
    };
    let result: ActionResult;
    try {
      result = await ingress.handleAction(action);
    } catch (err) {
      log?.error({ err, chatId: action.chatId, data: action.data }, 'telegram button click failed');
      result = { reply: 'Steward could not take this click just now; try again in a moment.', applied: false };
    }
    await ctx.answerCallbackQuery({ text: cut(result.reply, MAX_CALLBACK_ANSWER), show_alert: !result.applied });
  });

  bot.catch((err) => {
    log?.error({ err: err.error, updateId: err.ctx.update.update_id }, 'telegram update failed');
  });

  async function syncCommands(): Promise<void> {
    const admin = opts.adminChats ? AdminChatsSchema.parse(await opts.adminChats()) : [];
    for (const menu of telegramCommandMenus(admin)) {
      await bot.api.setMyCommands(menu.commands, { scope: menu.scope });
    }
  }

  return {
    account,
    bot,
    syncCommands,

    async start(): Promise<void> {
      if (running) return;
      await bot.init();
      if (String(bot.botInfo.id) !== account) log?.warn({ account, botId: bot.botInfo.id }, 'the Telegram bot id differs from the id in its token');
      try {
        await syncCommands();
      } catch (err) {
        // the menus are a convenience: without them every command still works
        log?.warn({ err }, 'telegram command menus could not be set');
      }
      await new Promise<void>((resolve, reject) => {
        running = bot
          .start({ allowed_updates: ['message', 'callback_query'], drop_pending_updates: false, onStart: () => resolve() })
          .catch((err: unknown) => {
            log?.error({ err }, 'telegram polling stopped');
            reject(err instanceof Error ? err : new Error(String(err)));
          })
          .finally(() => {
            running = undefined;
          });
      });
    },

    async stop(): Promise<void> {
      const loop = running;
      if (bot.isRunning()) {
        // bot.stop() confirms the handled updates with one more getUpdates; if that fails they
        // come again at the next start, and the ingress knows them by their message ids.
        await bot.stop().catch((err: unknown) => log?.warn({ err }, 'telegram could not confirm the last updates'));
      }
      if (!loop) return;
      let timer: NodeJS.Timeout | undefined;
      const drained = await Promise.race([
        loop.then(() => true),
        new Promise<boolean>((resolve) => {
          timer = setTimeout(() => resolve(false), DRAIN_TIMEOUT_MS);
        }),
      ]);
      clearTimeout(timer);
      if (!drained) log?.warn({ waitedMs: DRAIN_TIMEOUT_MS }, 'telegram stopped polling while an update was still being handled');
    },
  };
}
