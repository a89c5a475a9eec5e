/**
 * Discord ingress: a discord.js gateway client that normalises messages, slash commands and
 * button clicks into Steward's ingress. It decides nothing itself: who may do what, whether a
 * channel is bound and whether a group message is for Steward are the ingress's decisions, and
 * replies to messages go out through the outbox (the Discord sender). Interactions are answered
 * here, because Discord wants them acknowledged within 3 s and answered on the interaction.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { once } from 'node:events';
import {
  ApplicationCommandOptionType,
  ApplicationCommandType,
  ApplicationIntegrationType,
  Client,
  Events,
  GatewayIntentBits,
  InteractionContextType,
  MessageFlags,
  Partials,
  Routes,
  type ButtonInteraction,
  type ChatInputCommandInteraction,
  type ClientOptions,
  type Interaction,
  type Message,
  type User,
} from 'discord.js';
import type { RESTPostAPIChatInputApplicationCommandsJSONBody } from 'discord-api-types/v10';
import type { Logger } from 'pino';
import type { ChannelSender } from '../../services/chat/deliveries.js';
import { COMMANDS, commandSpec, type CommandSpec } from '../../common/commands.js';
import type { InboundMessage } from '../../common/schemas.js';
import type { Ingress, IngressResult, PendingAttachment } from '../../services/chat/intake.js';
import { renderDiscord, renderPlain } from '../render/markdown.js';
import { discordAccountFromToken, isContentRejected } from './sender.js';

/** Hosts Discord serves attachments from. */
export const DISCORD_ATTACHMENT_HOSTS: readonly string[] = ['cdn.discordapp.com', 'media.discordapp.net'];
/** Largest attachment download when the platform declares no size (Discord's upload ceiling). */
const MAX_ATTACHMENT_BYTES = 500 * 1024 * 1024;
const ATTACHMENT_TIMEOUT_MS = 60_000;
const READY_TIMEOUT_MS = 60_000;
/** How long stop() waits for events being handled. */
const DRAIN_TIMEOUT_MS = 10_000;
const MAX_DESCRIPTION = 100;

export interface DiscordAdapterOptions {
  /** The bot token (the conversation account is the bot's user id, read from it). */
  token: string;
  /** Extra discord.js client options (tests pass the double's `clientOptions`); intents and partials are the adapter's. */
  clientOptions?: Partial<ClientOptions>;
  ingress: Ingress;
  /** The Discord sender (the one ingress and the worker deliver through); used here to split interaction answers. */
  sender: ChannelSender;
  /** Register the slash commands in this guild only (instant; global registration can take a while to show). */
  guildId?: string;
  log?: Logger;
  /** Hosts, besides Discord's CDN, that attachments may be downloaded from (`host` or `host:port`). */
  attachmentHosts?: string[];
}

export interface DiscordAdapter {
  /** The bot's user id: the `account` of every Discord conversation key. */
  account: string;
  client: Client;
  /** Log in, wait for READY, register the slash commands. */
  start(): Promise<void>;
  /** Finish what is being handled (bounded), then close the gateway connection. */
  stop(): Promise<void>;
  /** Register the catalog's commands (bulk overwrite; in `guildId` when given, else global). */
  syncCommands(): Promise<void>;
}

const truncate = (s: string, n: number) => ([...s].length > n ? `${[...s].slice(0, n - 1).join('')}…` : s);

/** The application commands for the catalog: every command usable in guilds and DMs, roles left to Steward. */
export function discordCommands(opts: { global: boolean } = { global: true }): RESTPostAPIChatInputApplicationCommandsJSONBody[] {
  return COMMANDS.map((c) => ({
    type: ApplicationCommandType.ChatInput,
    name: c.name,
    description: truncate(c.description, MAX_DESCRIPTION),
    // Discord wants required options first; the text sent to ingress keeps the catalog's order.
    options: [...c.args.filter((a) => a.required), ...c.args.filter((a) => !a.required)].map((a) => ({
      type: ApplicationCommandOptionType.String,
      name: a.name,
      description: truncate(a.description, MAX_DESCRIPTION),
      required: a.required,
      ...(a.choices ? { choices: a.choices.map((v) => ({ name: v, value: v })) } : {}),
    })),
    // Steward checks roles itself: nobody is hidden from a command by Discord permissions.
    default_member_permissions: null,
    ...(opts.global ? { contexts: [InteractionContextType.Guild, InteractionContextType.BotDM], integration_types: [ApplicationIntegrationType.GuildInstall] } : {}),
  }));
}

/** `/name value value…`: option values in the catalog's argument order (unknown options last). */
export function commandText(name: string, options: ReadonlyArray<{ name: string; value?: unknown }>): string {
  const spec = commandSpec(name);
  const order = spec ? spec.args.map((a) => a.name) : [];
  const rank = (n: string) => (order.includes(n) ? order.indexOf(n) : order.length);
  const values = [...options]
    .sort((a, b) => rank(a.name) - rank(b.name))
    .map((o) => (o.value === undefined || o.value === null ? '' : String(o.value).trim()))
    .filter((v) => v !== '');
  return [`/${name}`, ...values].join(' ');
}

/** A command whose answer only the person who used it sees (in a guild): all but the channel-wide ones. */
function answersPrivately(spec: CommandSpec | undefined, inGuild: boolean): boolean {
  return inGuild && spec?.where !== 'group';
}

function displayName(u: User): string {
  return u.globalName ?? u.username;
}

/** What to say when ingress gave no answer (the interaction must be answered all the same). */
function fallbackAnswer(r: IngressResult): string {
  if (r.duplicate) return 'Already handled.';
  if (r.kind === 'rejected') {
    switch (r.reason) {
      case 'unknown-sender':
        return 'Steward does not know you yet. Send /pair to Steward in a direct message to ask for access.';
      case 'unbound-chat':
        return 'Steward does not answer in this channel.';
      default:
        return 'Not accepted.';
    }
  }
  return 'Done.';
}

/** A download of an attachment URL, refused unless the host is Discord's CDN or an allowed host. */
export function attachmentFetcher(rawUrl: string, allowedHosts: ReadonlySet<string>, declaredSize?: number): () => Promise<Buffer> {
  return async () => {
    let url: URL;
    try {
      url = new URL(rawUrl);
    } catch {
      throw new Error('the attachment URL is not valid');
    }
    const discordHost = DISCORD_ATTACHMENT_HOSTS.includes(url.hostname) && url.protocol === 'https:' && url.port === '';
    const extraHost = (allowedHosts.has(url.host) || allowedHosts.has(url.hostname)) && (url.protocol === 'https:' || url.protocol === 'http:');
    if (!discordHost && !extraHost) throw new Error(`attachments are only downloaded from Discord's CDN, not from ${url.host}`);
    const limit = declaredSize !== undefined && declaredSize >= 0 ? declaredSize : MAX_ATTACHMENT_BYTES;
    const res = await fetch(url, { redirect: 'error', signal: AbortSignal.timeout(ATTACHMENT_TIMEOUT_MS) });
    if (!res.ok) {
      await res.body?.cancel();
      throw new Error(`the CDN answered ${res.status}`);
    }
    const chunks: Buffer[] = [];
    let total = 0;
    if (res.body) {
      const reader = res.body.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        total += value.byteLength;
        if (total > limit) {
          await reader.cancel();
          throw new Error(`the download is larger than the ${limit} bytes Discord declared`);
        }
        chunks.push(Buffer.from(value));
      }
    }
    return Buffer.concat(chunks);
  };
}

/** The events being handled: tracked so stop() can wait for them, a channel's messages chained in arrival order. */
class EventWork {
  /** Set by stop(): new events are ignored. */
  stopping = false;
  private readonly inflight = new Set<Promise<void>>();
  private readonly chains = new Map<string, Promise<void>>();

  constructor(private readonly log: Logger | undefined) {}

  /** Count `p` as being handled until it settles. */
  track(p: Promise<void>): void {
    this.inflight.add(p);
    void p.finally(() => this.inflight.delete(p));
  }

  /** Run one channel's messages in arrival order (a conversation's messages queue in order). */
  inOrder(key: string, task: () => Promise<void>): void {
    const run = (this.chains.get(key) ?? Promise.resolve()).then(task).catch((err: unknown) => this.log?.error({ err, chatId: key }, 'discord: handling a message failed'));
    this.chains.set(key, run);
    void run.finally(() => {
      if (this.chains.get(key) === run) this.chains.delete(key);
    });
    this.track(run);
  }

  /** Wait for what is being handled, at most `timeoutMs`. */
  async drain(timeoutMs: number): Promise<void> {
    if (this.inflight.size > 0) {
      const drain = new AbortController();
      await Promise.race([Promise.allSettled([...this.inflight]), sleep(timeoutMs, undefined, { signal: drain.signal }).catch(() => undefined)]);
      drain.abort();
    }
  }
}

/** What the adapter's handlers share: its options, the bot account, the gateway client, the allowed attachment hosts, the work in flight. */
interface DiscordContext {
  opts: DiscordAdapterOptions;
  account: string;
  client: Client;
  allowedHosts: ReadonlySet<string>;
  work: EventWork;
}

/** The bot's user id as the gateway reports it, else the token's. */
function botId(ctx: DiscordContext): string {
  return ctx.client.user?.id ?? ctx.account;
}

/** A Discord message as Steward's inbound message and pending attachments; undefined when there is nothing to pass on. */
function normalize(ctx: DiscordContext, message: Message): { msg: InboundMessage; attachments: PendingAttachment[] } | undefined {
  const me = botId(ctx);
  const mention = new RegExp(`<@!?${me}>\\s*`, 'g');
  const text = message.content.replace(mention, '').trim();
  const attachments: PendingAttachment[] = [...message.attachments.values()].map((a) => ({
    name: a.name,
    mediaType: a.contentType ?? 'application/octet-stream',
    size: a.size,
    fetch: attachmentFetcher(a.url, ctx.allowedHosts, a.size),
  }));
  if (!text && attachments.length === 0) return undefined; // a bare mention, a sticker, an embed: nothing to pass on
  const inGuild = message.guildId !== null;
  // A direct message is addressed to Steward by definition; in a guild, a mention (of the bot
  // or its managed role) or a reply to one of its messages is.
  const addressed =
    !inGuild ||
    message.mentions.users.has(me) ||
    message.mentions.roles.some((r) => r.tags?.botId === me) ||
    (message.reference !== null && message.mentions.repliedUser?.id === me);
  return {
    msg: {
      id: message.id,
      platform: 'discord',
      account: ctx.account,
      chatId: message.channelId,
      user: displayName(message.author),
      userId: message.author.id,
      chatType: inGuild ? 'group' : 'dm',
      addressed,
      text,
      at: message.createdAt.toISOString(),
    },
    attachments,
  };
}

/** An incoming message: normalised and passed to ingress, in its channel's order (bots, system messages and webhooks ignored). */
function onMessage(ctx: DiscordContext, message: Message): void {
  const { ingress, log } = ctx.opts;
  // runs inside discord.js's event dispatch: nothing may throw out of here
  let n: ReturnType<typeof normalize>;
  try {
    if (ctx.work.stopping || message.author.bot || message.author.id === botId(ctx) || message.system || message.webhookId) return;
    n = normalize(ctx, message);
  } catch (err) {
    log?.warn({ err, messageId: message.id }, 'discord: a message could not be read; dropped');
    return;
  }
  if (!n) return;
  const inbound = n;
  ctx.work.inOrder(message.channelId, async () => {
    const r = await ingress.handle(inbound.msg, inbound.attachments.length ? { attachments: inbound.attachments } : {});
    log?.debug({ messageId: message.id, chatId: message.channelId, kind: r.kind, reason: r.reason }, 'discord: message handled');
  });
}

/** Answer an interaction with Markdown: the first part by `first`, the rest as follow-ups. */
async function answer(
  sender: ChannelSender,
  text: string,
  first: (content: string) => Promise<unknown>,
  more: (content: string) => Promise<unknown>,
): Promise<void> {
  const parts = sender.split(text);
  for (const [i, md] of parts.entries()) {
    const post = i === 0 ? first : more;
    try {
      await post(renderDiscord(md));
    } catch (err) {
      if (!isContentRejected(err)) throw err;
      await post(renderPlain(md));
    }
  }
}

/** A slash command: acknowledged at once, passed to ingress as `/name args`, answered on the interaction (privately when it is personal). */
async function onCommand(ctx: DiscordContext, i: ChatInputCommandInteraction): Promise<void> {
  const { ingress, sender, log } = ctx.opts;
  const spec = commandSpec(i.commandName);
  const inGuild = i.guildId !== null;
  const ephemeral = answersPrivately(spec, inGuild);
  // Discord's 3 s rule: acknowledge first, think afterwards.
  await i.deferReply(ephemeral ? { flags: MessageFlags.Ephemeral } : {});
  let reply: string;
  try {
    const r = await ingress.handle(
      {
        id: i.id,
        platform: 'discord',
        account: ctx.account,
        chatId: i.channelId,
        user: displayName(i.user),
        userId: i.user.id,
        chatType: inGuild ? 'group' : 'dm',
        addressed: true,
        text: commandText(i.commandName, i.options.data),
        at: i.createdAt.toISOString(),
      },
      { deliverReply: false },
    );
    reply = r.reply ?? fallbackAnswer(r);
  } catch (err) {
    log?.error({ err, command: i.commandName }, 'discord: a slash command failed');
    reply = 'Steward could not handle this command just now; try again in a moment.';
  }
  await answer(
    sender,
    reply,
    (content) => i.editReply({ content, allowedMentions: { parse: [] } }),
    (content) => i.followUp({ content, allowedMentions: { parse: [] }, ...(ephemeral ? { flags: MessageFlags.Ephemeral } : {}) }),
  );
}

/** A button click: acknowledged at once, passed to ingress as an action, answered privately. */
async function onButton(ctx: DiscordContext, i: ButtonInteraction): Promise<void> {
  const { ingress, sender, log } = ctx.opts;
  await i.deferUpdate();
  let reply: string;
  try {
    const r = await ingress.handleAction({
      platform: 'discord',
      account: ctx.account,
      chatId: i.channelId,
      chatType: i.guildId !== null ? 'group' : 'dm',
      userId: i.user.id,
      user: displayName(i.user),
      data: i.customId,
      id: i.id,
    });
    reply = r.reply;
  } catch (err) {
    log?.error({ err, customId: i.customId }, 'discord: a button click failed');
    reply = 'Steward could not handle this click just now; try again in a moment.';
  }
  const followUp = (content: string) => i.followUp({ content, flags: MessageFlags.Ephemeral, allowedMentions: { parse: [] } });
  await answer(sender, reply, followUp, followUp);
}

/** An interaction: slash commands and button clicks are answered (tracked for stop()); others are ignored. */
function onInteraction(ctx: DiscordContext, i: Interaction): void {
  if (ctx.work.stopping) return;
  let task: Promise<void> | undefined;
  if (i.isChatInputCommand()) task = onCommand(ctx, i);
  else if (i.isButton()) task = onButton(ctx, i);
  if (!task) return;
  ctx.work.track(task.catch((err: unknown) => ctx.opts.log?.error({ err, interactionId: i.id }, 'discord: answering an interaction failed')));
}

/** Register the catalog's commands (bulk overwrite; in `guildId` when given, else global). */
async function syncCommands(ctx: DiscordContext): Promise<void> {
  const { client, opts } = ctx;
  const appId = client.application?.id ?? ctx.account;
  const route = opts.guildId ? Routes.applicationGuildCommands(appId, opts.guildId) : Routes.applicationCommands(appId);
  await client.rest.put(route, { body: discordCommands({ global: !opts.guildId }) });
  opts.log?.info({ commands: COMMANDS.length, scope: opts.guildId ?? 'global' }, 'discord: slash commands registered');
}

/** Log in, wait for READY, register the slash commands. */
async function startGateway(ctx: DiscordContext): Promise<void> {
  const { client, opts, account } = ctx;
  const log = opts.log;
  ctx.work.stopping = false;
  const ready = once(client, Events.ClientReady, { signal: AbortSignal.timeout(READY_TIMEOUT_MS) });
  ready.catch(() => undefined); // observed below; a failed login must not leave it unhandled
  await client.login(opts.token.replace(/^Bot\s+/i, ''));
  if (!client.isReady()) await ready;
  if (client.user && client.user.id !== account) {
    log?.warn({ tokenAccount: account, userId: client.user.id }, 'discord: the token names another user id than the gateway reports; conversations use the token\'s');
  }
  log?.info({ account, user: client.user?.tag }, 'discord: connected');
  await syncCommands(ctx);
}

/** Finish what is being handled (bounded), then close the gateway connection. */
async function stopGateway(ctx: DiscordContext): Promise<void> {
  ctx.work.stopping = true;
  await ctx.work.drain(DRAIN_TIMEOUT_MS);
  await ctx.client.destroy();
}

export function createDiscordAdapter(opts: DiscordAdapterOptions): DiscordAdapter {
  const account = discordAccountFromToken(opts.token);
  const { log } = opts;
  const allowedHosts = new Set(opts.attachmentHosts ?? []);
  const client = new Client({
    allowedMentions: { parse: [] },
    ...opts.clientOptions,
    intents: [GatewayIntentBits.Guilds, GatewayIntentBits.GuildMessages, GatewayIntentBits.DirectMessages, GatewayIntentBits.MessageContent],
    partials: [Partials.Channel],
  });
  const ctx: DiscordContext = { opts, account, client, allowedHosts, work: new EventWork(log) };

  client.on(Events.MessageCreate, (message) => onMessage(ctx, message));
  client.on(Events.InteractionCreate, (i) => onInteraction(ctx, i));
  client.on(Events.Error, (err) => log?.error({ err }, 'discord: client error'));
  client.on(Events.Warn, (message) => log?.warn({ message }, 'discord: client warning'));

  return {
    account,
    client,
    syncCommands: () => syncCommands(ctx),
    start: () => startGateway(ctx),
    stop: () => stopGateway(ctx),
  };
}
