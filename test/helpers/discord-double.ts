/**
 * A test double of Discord's HTTP API, CDN and Gateway on 127.0.0.1 that the real discord.js
 * `Client` logs in to and is driven through. Nothing talks to discord.com.
 *
 *   const discord = await startDiscordDouble();
 *   const client = new Client({ intents, partials: [Partials.Channel], ...discord.clientOptions });
 *   await client.login(discord.token);
 *
 * `clientOptions` is `{ rest: { api: 'http://127.0.0.1:<port>/api', cdn, mediaProxy }, waitGuildTimeout: 1000 }`
 * (cdn/mediaProxy = the double's origin, so avatar URLs never point at Discord);
 * @discordjs/rest appends `/v10`, so every REST route lives under `/api/v10`. The gateway URL
 * comes from `GET /gateway/bot` (`ws://127.0.0.1:<port>/gateway`; @discordjs/ws adds
 * `?v=10&encoding=json`, and `&compress=zlib-stream` only when zlib-sync is installed, which
 * the double also speaks).
 *
 * REST: bot-token auth (interaction callbacks and interaction webhooks go without auth, as on
 * Discord), every request recorded in order, scripted failures (429 with Discord's headers, 5xx,
 * anything) and the message rules that bite in production (2000 characters, empty messages,
 * nonce + enforce_nonce dedupe, unknown message/channel/interaction, the 3 s interaction ack
 * deadline, "already acknowledged"). Gateway: HELLO, IDENTIFY (token checked, intents
 * recorded), READY + GUILD_CREATE, heartbeat ACKs, RESUME with replay, and intent-aware
 * dispatch (no MESSAGE_CREATE without GuildMessages/DirectMessages, empty guild message content
 * without MessageContent unless the bot is mentioned). Like Discord, the bot's own messages are
 * echoed back as MESSAGE_CREATE/UPDATE/DELETE (turn off with `echoBotMessages: false`).
 *
 * `close()` terminates every gateway socket and HTTP connection and rejects pending waiters, so
 * nothing keeps the process alive. Destroy the discord.js client first: a client whose socket
 * the double drops tries to resume, and keeps trying once the double is gone.
 */
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { randomBytes, randomUUID } from 'node:crypto';
import { constants as zlibConstants, createDeflate, type Deflate } from 'node:zlib';
import { WebSocketServer, WebSocket, type RawData } from 'ws';

// ---------------------------------------------------------------------------------------------
// Public types

export interface DoubleUser {
  id: string;
  username: string;
  discriminator: string;
  global_name: string | null;
  avatar: string | null;
  bot?: boolean;
}

/** A user as tests describe one; a missing id is generated, a missing username derived from it. */
export interface UserInput {
  id?: string;
  username?: string;
  globalName?: string | null;
  bot?: boolean;
}

export interface DoubleChannelInput {
  id?: string;
  name: string;
  /** Discord channel type: 0 text (default), 2 voice, 4 category, 5 announcement, 11 public thread, 15 forum. */
  type?: number;
  /** Parent category, or parent channel for threads. */
  parentId?: string;
}

export interface DoubleGuildInput {
  id?: string;
  name?: string;
  channels?: DoubleChannelInput[];
}

export interface DoubleChannel {
  id: string;
  type: number;
  name?: string;
  guildId?: string;
  parentId?: string;
  /** DM channels: the other user. */
  recipient?: DoubleUser;
}

export interface DoubleGuild {
  id: string;
  name: string;
  ownerId: string;
  channels: DoubleChannel[];
}

export interface DiscordDoubleOptions {
  token?: string;
  applicationId?: string;
  botUser?: UserInput;
  /** Guilds the bot is in; default one guild "Test Guild" with a text channel "general". */
  guilds?: DoubleGuildInput[];
  /** Application flags sent in READY (default 0). */
  applicationFlags?: number;
  /** HELLO heartbeat_interval (default 41250 ms, as Discord). */
  heartbeatIntervalMs?: number;
  /** How long a nonce sent with enforce_nonce dedupes (default 5 minutes). */
  nonceWindowMs?: number;
  /** Time allowed for the initial interaction callback (default 3000 ms as Discord; 0 = no limit). */
  interactionAckDeadlineMs?: number;
  /** Echo the bot's own messages as MESSAGE_CREATE/UPDATE/DELETE like Discord does (default true). */
  echoBotMessages?: boolean;
}

export interface RecordedFile {
  /** The multipart field name, e.g. `files[0]`. */
  field: string;
  name: string;
  type: string;
  bytes: Buffer;
}

export interface RecordedCall {
  /** 1-based arrival order. */
  seq: number;
  method: string;
  /** The path below the API version prefix (`/channels/1/messages`), or the CDN path; no query. */
  path: string;
  query: Record<string, string>;
  /** Normalised route, e.g. `POST /channels/:id/messages`; unknown routes have number segments as `:id`. */
  route: string;
  params: Record<string, string>;
  headers: IncomingHttpHeaders;
  /** The JSON body, or the parsed `payload_json` of a multipart body (undefined when none). */
  body: unknown;
  multipart: boolean;
  /** Multipart file parts. */
  files: RecordedFile[];
  /** Multipart non-file fields other than payload_json. */
  fields: Record<string, string>;
  /** Epoch ms when the request arrived. */
  at: number;
  /** The status the double answered with (0 until answered). */
  status: number;
  /** True when the answer was an error (>= 400), scripted or not. */
  failed?: boolean;
  /** The JSON the double answered with. */
  response?: unknown;
}

export interface DoubleAttachment {
  id: string;
  filename: string;
  size: number;
  url: string;
  proxy_url: string;
  content_type: string;
}

export interface DoubleMessage {
  id: string;
  channelId: string;
  guildId?: string;
  author: DoubleUser;
  content: string;
  components: unknown[];
  embeds: unknown[];
  attachments: DoubleAttachment[];
  flags: number;
  /** 0 default, 19 reply, 20 chat-input command reply. */
  type: number;
  nonce?: string | number;
  mentions: DoubleUser[];
  messageReference?: { message_id: string; channel_id: string; guild_id?: string };
  /** `bot`: created by the bot (REST or interaction response); `user`: injected through the gateway. */
  source: 'bot' | 'user';
  interactionId?: string;
  webhookId?: string;
  createdAt: number;
  editedAt?: number;
  edited: boolean;
  deleted: boolean;
  /** Every content the message had, first to last. */
  history: string[];
}

export interface InteractionCallbackRecord {
  type: number;
  data: unknown;
  at: number;
}

export interface InteractionResponseView {
  interactionId: string;
  kind: 'command' | 'component';
  /** The initial callback type (4 reply, 5 deferred, 6 deferred update, 7 update, 9 modal...). */
  type?: number;
  callbacks: InteractionCallbackRecord[];
  acknowledged: boolean;
  /** The @original message: the reply (4/5) or the component's message (6/7). */
  original?: DoubleMessage;
  /** The current content of @original (after edits). */
  content?: string;
  components?: unknown[];
  followUps: DoubleMessage[];
  originalDeleted: boolean;
}

export interface FailureScript {
  /** HTTP status (default 429). */
  status?: number;
  /**
   * Seconds, for 429 (default 1). The JSON `retry_after` and X-RateLimit-Reset-After carry it
   * exactly; the Retry-After header is whole seconds (rounded up) as on Discord, and
   * @discordjs/rest waits on that header for global limits, on Reset-After for route limits.
   */
  retryAfter?: number;
  /** A global rate limit (X-RateLimit-Global, scope global). */
  global?: boolean;
  /** Rate limit scope header (default `user`, or `global`). */
  scope?: 'user' | 'global' | 'shared';
  /** How many consecutive requests fail (default 1). */
  times?: number;
  /** Response body override. */
  body?: unknown;
  /** Only fail requests this matches. */
  match?: (call: RecordedCall) => boolean;
}

export interface IdentifyRecord {
  token: string;
  intents: number;
  properties: unknown;
  shard?: [number, number];
  compress?: boolean;
  at: number;
}

export interface MessageCreateInput {
  /** Guild channel id, or a DM channel id; for a DM it may be left out (the author's DM channel is used). */
  channelId?: string;
  guildId?: string;
  author: UserInput;
  content: string;
  /** Put `<@botId>` in the content (prefixed unless already there) and the bot in `mentions`. */
  mentionsBot?: boolean;
  replyToMessageId?: string;
  /** A reply mentions the replied-to author, as Discord's default (default true). */
  replyMention?: boolean;
  attachments?: Array<DoubleAttachment | { bytes: Uint8Array | string; filename: string; contentType?: string }>;
  id?: string;
}

export interface SlashCommandInput {
  name: string;
  /** Raw API options, or a name -> value record (string 3, integer 4, number 10, boolean 5). */
  options?: unknown[] | Record<string, string | number | boolean>;
  channelId: string;
  guildId?: string;
  user: UserInput;
  id?: string;
}

export interface ButtonClickInput {
  customId: string;
  /** The message the button is on (a DoubleMessage or its id). */
  message: DoubleMessage | string;
  channelId?: string;
  user: UserInput;
  id?: string;
}

export interface DiscordDouble {
  /** `http://127.0.0.1:<port>`: REST under `/api/v10`, CDN under `/attachments`. */
  origin: string;
  /** `http://127.0.0.1:<port>/api`, for `new Client({ rest: { api } })` (discord.js appends /v10). */
  apiBase: string;
  /** `ws://127.0.0.1:<port>/gateway`. */
  gatewayUrl: string;
  /** Spread into `new Client({...})`. */
  clientOptions: { rest: { api: string; cdn: string; mediaProxy: string }; waitGuildTimeout: number };
  token: string;
  applicationId: string;
  botUser: DoubleUser;
  guilds: DoubleGuild[];

  // REST recording
  readonly calls: RecordedCall[];
  callsTo(route: string): RecordedCall[];
  waitForCall(route: string, pred?: (c: RecordedCall) => boolean, timeoutMs?: number): Promise<RecordedCall>;
  clearCalls(): void;
  failNext(route: string, script?: FailureScript): void;

  // state
  messages(channelId?: string): DoubleMessage[];
  message(id: string): DoubleMessage | undefined;
  waitForMessage(pred: (m: DoubleMessage) => boolean, timeoutMs?: number): Promise<DoubleMessage>;
  commands(guildId?: string): Array<Record<string, unknown>>;
  interactionResponses(interactionId: string): InteractionResponseView | undefined;
  waitForInteractionResponse(interactionId: string, pred?: (v: InteractionResponseView) => boolean, timeoutMs?: number): Promise<InteractionResponseView>;
  addAttachment(bytes: Uint8Array | string, meta: { filename: string; contentType?: string; channelId?: string }): DoubleAttachment;
  /** Register (or look up) a user; the returned object is what payloads carry. */
  user(input: UserInput): DoubleUser;
  channel(id: string): DoubleChannel | undefined;
  /** The DM channel between the bot and this user (created when missing). */
  dmChannel(user: UserInput): DoubleChannel;

  // gateway
  readonly connections: number;
  readonly identifies: IdentifyRecord[];
  readonly heartbeats: number;
  /** Non-heartbeat payloads clients sent (op 3 presence, op 8 members...). */
  readonly gatewayPayloads: Array<{ op: number; d: unknown; at: number }>;
  waitForIdentify(opts?: { count?: number; timeoutMs?: number }): Promise<IdentifyRecord>;
  waitForHeartbeats(n: number, timeoutMs?: number): Promise<void>;
  messageCreate(input: MessageCreateInput): { messageId: string; channelId: string; guildId?: string; authorId: string; content: string };
  slashCommand(input: SlashCommandInput): { interactionId: string; token: string; commandId: string; channelId: string; userId: string };
  buttonClick(input: ButtonClickInput): { interactionId: string; token: string; messageId: string; channelId: string; userId: string };
  /** Send a raw dispatch to every live session; returns how many received it. */
  dispatch(t: string, d: unknown): number;
  /** Close every gateway socket with this code (default 4000, which discord.js resumes from). */
  disconnectGateway(code?: number, reason?: string): void;

  close(): Promise<void>;
}

// ---------------------------------------------------------------------------------------------
// Constants

const DISCORD_EPOCH = 1_420_070_400_000n;
const API_PREFIX = '/api/v10';

const Intents = {
  Guilds: 1 << 0,
  GuildMessages: 1 << 9,
  DirectMessages: 1 << 12,
  MessageContent: 1 << 15,
} as const;

const ChannelType = { GuildText: 0, DM: 1, GuildVoice: 2, GroupDM: 3, Category: 4, Announcement: 5, AnnouncementThread: 10, PublicThread: 11, PrivateThread: 12 } as const;
const THREAD_TYPES = new Set<number>([ChannelType.AnnouncementThread, ChannelType.PublicThread, ChannelType.PrivateThread]);

const MessageFlags = { Ephemeral: 1 << 6, Loading: 1 << 7 } as const;

/** Permissions of @everyone in the double's guilds: what a normal text bot is granted. */
const EVERYONE_PERMISSIONS = [0, 6, 10, 11, 14, 15, 16, 17, 18, 20, 21, 26, 31, 35, 36, 38]
  .reduce((acc, bit) => acc | (1n << BigInt(bit)), 0n)
  .toString();

const ERR = {
  unauthorized: { message: '401: Unauthorized', code: 0 },
  unknownChannel: { message: 'Unknown Channel', code: 10003 },
  unknownMessage: { message: 'Unknown Message', code: 10008 },
  unknownUser: { message: 'Unknown User', code: 10013 },
  unknownWebhook: { message: 'Unknown Webhook', code: 10015 },
  unknownCommand: { message: 'Unknown application command', code: 10063 },
  unknownInteraction: { message: 'Unknown interaction', code: 10062 },
  alreadyAcked: { message: 'Interaction has already been acknowledged.', code: 40060 },
  empty: { message: 'Cannot send an empty message', code: 50006 },
  cannotEditOther: { message: 'Cannot edit a message authored by another user', code: 50005 },
} as const;

function formError(field: string, code: string, message: string) {
  return { code: 50035, message: 'Invalid Form Body', errors: { [field]: { _errors: [{ code, message }] } } };
}

// ---------------------------------------------------------------------------------------------
// Small helpers

let snowflakeIncrement = 0n;
/** A Discord snowflake for now: 18-19 digits, so @discordjs/rest treats it as a major id. */
function snowflake(at = Date.now()): string {
  snowflakeIncrement = (snowflakeIncrement + 1n) & 0xfffn;
  return (((BigInt(at) - DISCORD_EPOCH) << 22n) | (1n << 17n) | (1n << 12n) | snowflakeIncrement).toString();
}

const iso = (ms: number) => new Date(ms).toISOString();
const codePoints = (s: string) => [...s].length;
const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

interface Reply {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
  /** Raw bytes (CDN). */
  raw?: { bytes: Buffer; contentType: string };
  /** Run after the answer was written (gateway echoes). */
  after?: () => void;
}

const ok = (body: unknown, after?: () => void): Reply => ({ status: 200, body, ...(after ? { after } : {}) });
const noContent = (after?: () => void): Reply => ({ status: 204, ...(after ? { after } : {}) });
const fail = (status: number, body: unknown): Reply => ({ status, body });

/** Parse a multipart/form-data body (what undici's FormData produces). */
function parseMultipart(buf: Buffer, boundary: string): { files: RecordedFile[]; fields: Record<string, string> } {
  const files: RecordedFile[] = [];
  const fields: Record<string, string> = {};
  const delim = Buffer.from(`--${boundary}`);
  let pos = buf.indexOf(delim);
  while (pos !== -1) {
    let start = pos + delim.length;
    if (buf[start] === 0x2d && buf[start + 1] === 0x2d) break; // closing --boundary--
    if (buf[start] === 0x0d && buf[start + 1] === 0x0a) start += 2;
    const next = buf.indexOf(delim, start);
    if (next === -1) break;
    let end = next;
    if (buf[end - 2] === 0x0d && buf[end - 1] === 0x0a) end -= 2;
    const part = buf.subarray(start, end);
    const headerEnd = part.indexOf('\r\n\r\n');
    if (headerEnd !== -1) {
      const headerText = part.subarray(0, headerEnd).toString('utf8');
      const content = part.subarray(headerEnd + 4);
      const headers: Record<string, string> = {};
      for (const line of headerText.split('\r\n')) {
        const i = line.indexOf(':');
        if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
      }
      const disp = headers['content-disposition'] ?? '';
      const name = /\bname="((?:[^"\\]|\\.)*)"/.exec(disp)?.[1] ?? '';
      const filename = /\bfilename="((?:[^"\\]|\\.)*)"/.exec(disp)?.[1];
      if (filename !== undefined) {
        files.push({ field: name, name: filename, type: headers['content-type'] ?? 'application/octet-stream', bytes: Buffer.from(content) });
      } else {
        fields[name] = content.toString('utf8');
      }
    }
    pos = next;
  }
  return { files, fields };
}

// ---------------------------------------------------------------------------------------------
// Internal state types

interface StoredInteraction {
  id: string;
  token: string;
  kind: 'command' | 'component';
  channelId: string;
  guildId?: string;
  user: DoubleUser;
  /** Component interactions: the message the component is on. */
  messageId?: string;
  createdAt: number;
  callbacks: InteractionCallbackRecord[];
  originalMessageId?: string;
  followUpIds: string[];
  originalDeleted: boolean;
}

interface Session {
  id: string;
  token: string;
  intents: number;
  seq: number;
  log: Array<{ op: 0; t: string; s: number; d: unknown }>;
  conn?: Conn;
  /** False once the client closed with 1000/1001 (Discord invalidates the session) or it was invalidated. */
  alive: boolean;
}

interface Conn {
  ws: WebSocket;
  deflate?: Deflate;
  sendChain: Promise<void>;
  session?: Session;
}

interface Route {
  method: string;
  pattern: string;
  parts: string[];
  /** `bot`: needs `Authorization: Bot <token>`. */
  auth: 'bot' | 'none';
  handle: (ctx: RouteCtx) => Reply;
}

interface RouteCtx {
  call: RecordedCall;
  params: Record<string, string>;
  body: Record<string, unknown>;
  files: RecordedFile[];
  query: Record<string, string>;
  /** The parsed body as sent (arrays included). */
  rawBody: unknown;
}

// ---------------------------------------------------------------------------------------------

export async function startDiscordDouble(opts: DiscordDoubleOptions = {}): Promise<DiscordDouble> {
  const token = opts.token ?? `double.${randomBytes(12).toString('hex')}`;
  const applicationId = opts.applicationId ?? opts.botUser?.id ?? snowflake();
  const heartbeatIntervalMs = opts.heartbeatIntervalMs ?? 41_250;
  const nonceWindowMs = opts.nonceWindowMs ?? 5 * 60_000;
  const ackDeadlineMs = opts.interactionAckDeadlineMs ?? 3_000;
  const echoBotMessages = opts.echoBotMessages ?? true;

  const users = new Map<string, DoubleUser>();
  const makeUser = (input: UserInput): DoubleUser => {
    const id = input.id ?? snowflake();
    const existing = users.get(id);
    if (existing) {
      if (input.username !== undefined) existing.username = input.username;
      if (input.globalName !== undefined) existing.global_name = input.globalName;
      if (input.bot !== undefined) existing.bot = input.bot;
      return existing;
    }
    const u: DoubleUser = {
      id,
      username: input.username ?? `user${id.slice(-6)}`,
      discriminator: '0',
      global_name: input.globalName ?? null,
      avatar: null,
      ...(input.bot ? { bot: true } : {}),
    };
    users.set(id, u);
    return u;
  };
  const botUser = makeUser({ ...opts.botUser, id: opts.botUser?.id ?? applicationId, username: opts.botUser?.username ?? 'steward-bot', bot: true });

  // --- guilds & channels
  const channels = new Map<string, DoubleChannel>();
  const guildInputs = opts.guilds ?? [{ name: 'Test Guild', channels: [{ name: 'general', type: 0 }] }];
  const guilds: DoubleGuild[] = guildInputs.map((g) => {
    const id = g.id ?? snowflake();
    const owner = makeUser({ username: 'guild-owner' });
    const chans = (g.channels ?? []).map((c): DoubleChannel => {
      const ch: DoubleChannel = { id: c.id ?? snowflake(), type: c.type ?? ChannelType.GuildText, name: c.name, guildId: id, ...(c.parentId ? { parentId: c.parentId } : {}) };
      channels.set(ch.id, ch);
      return ch;
    });
    return { id, name: g.name ?? 'Test Guild', ownerId: owner.id, channels: chans };
  });
  const guildById = (id: string | undefined) => (id ? guilds.find((g) => g.id === id) : undefined);

  const dmChannelFor = (u: DoubleUser, id?: string): DoubleChannel => {
    const byId = id ? channels.get(id) : undefined;
    if (byId) {
      if (byId.type !== ChannelType.DM) throw new Error(`discord double: channel ${id} is not a DM channel`);
      return byId;
    }
    if (!id) for (const ch of channels.values()) if (ch.type === ChannelType.DM && ch.recipient?.id === u.id) return ch;
    const ch: DoubleChannel = { id: id ?? snowflake(), type: ChannelType.DM, recipient: u };
    channels.set(ch.id, ch);
    return ch;
  };

  // --- state
  const calls: RecordedCall[] = [];
  let callSeq = 0;
  const failures = new Map<string, FailureScript[]>();
  const messages = new Map<string, DoubleMessage>();
  const messageOrder: string[] = [];
  const attachmentBytes = new Map<string, { bytes: Buffer; contentType: string; filename: string }>();
  const nonces = new Map<string, { messageId: string; at: number }>();
  const commandStore = new Map<string, Array<Record<string, unknown>>>(); // 'global' | guildId
  const interactions = new Map<string, StoredInteraction>();
  const interactionsByToken = new Map<string, StoredInteraction>();
  const sessions = new Map<string, Session>();
  const conns = new Set<Conn>();
  const identifies: IdentifyRecord[] = [];
  const gatewayPayloads: Array<{ op: number; d: unknown; at: number }> = [];
  let heartbeats = 0;
  let closed = false;

  // --- waiters (same pattern as model-server.ts)
  const waiters = new Set<() => void>();
  const pendingWaits = new Set<{ timer: NodeJS.Timeout; reject: (err: Error) => void }>();
  const notify = () => {
    for (const w of [...waiters]) w();
  };
  function waitUntil<T>(probe: () => T | undefined, timeoutMs: number, what: () => string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (closed) return reject(new Error('discord double: closed'));
      const pending = {
        timer: setTimeout(() => finish(new Error(`discord double: timed out after ${timeoutMs} ms waiting for ${what()}`)), timeoutMs),
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
        const v = probe();
        if (v !== undefined) finish(undefined, v);
      };
      pendingWaits.add(pending);
      waiters.add(check);
      check();
    });
  }

  // --- HTTP server (created early: URLs are needed for payloads)
  const sockets = new Set<Socket>();
  const server = createServer((req, res) => onRequest(req, res));
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
  const origin = `http://127.0.0.1:${port}`;
  const gatewayUrl = `ws://127.0.0.1:${port}/gateway`;

  // --- attachments
  const addAttachment = (bytesIn: Uint8Array | string, meta: { filename: string; contentType?: string; channelId?: string }): DoubleAttachment => {
    const bytes = typeof bytesIn === 'string' ? Buffer.from(bytesIn, 'utf8') : Buffer.from(bytesIn);
    const id = snowflake();
    const contentType = meta.contentType ?? 'application/octet-stream';
    const path = `/attachments/${meta.channelId ?? '0'}/${id}/${encodeURIComponent(meta.filename)}`;
    attachmentBytes.set(id, { bytes, contentType, filename: meta.filename });
    return { id, filename: meta.filename, size: bytes.length, url: `${origin}${path}`, proxy_url: `${origin}${path}?proxy=1`, content_type: contentType };
  };

  // --- payload builders
  const apiUser = (u: DoubleUser) => ({ ...u });
  const memberOf = (u: DoubleUser, withUser: boolean) => ({
    ...(withUser ? { user: apiUser(u) } : {}),
    roles: [],
    joined_at: iso(Date.now() - 86_400_000),
    deaf: false,
    mute: false,
    flags: 0,
    nick: null,
    avatar: null,
    premium_since: null,
    pending: false,
    communication_disabled_until: null,
  });

  const apiChannel = (ch: DoubleChannel): Record<string, unknown> => {
    if (ch.type === ChannelType.DM) {
      return { id: ch.id, type: ch.type, last_message_id: lastMessageId(ch.id), flags: 0, recipients: ch.recipient ? [apiUser(ch.recipient)] : [] };
    }
    const base: Record<string, unknown> = {
      id: ch.id,
      type: ch.type,
      guild_id: ch.guildId,
      name: ch.name,
      position: 0,
      permission_overwrites: [],
      parent_id: ch.parentId ?? null,
      nsfw: false,
      flags: 0,
    };
    if (ch.type !== ChannelType.Category) {
      base.last_message_id = lastMessageId(ch.id);
      base.rate_limit_per_user = 0;
    }
    if (ch.type === ChannelType.GuildText || ch.type === ChannelType.Announcement) base.topic = null;
    if (THREAD_TYPES.has(ch.type)) {
      base.owner_id = botUser.id;
      base.message_count = 0;
      base.member_count = 1;
      base.thread_metadata = { archived: false, auto_archive_duration: 1440, archive_timestamp: iso(Date.now()), locked: false };
    }
    return base;
  };

  const lastMessageId = (channelId: string): string | null => {
    for (let i = messageOrder.length - 1; i >= 0; i--) {
      const m = messages.get(messageOrder[i]!);
      if (m && m.channelId === channelId && !m.deleted) return m.id;
    }
    return null;
  };

  const apiMessage = (m: DoubleMessage, depth = 0): Record<string, unknown> => {
    const out: Record<string, unknown> = {
      id: m.id,
      channel_id: m.channelId,
      author: apiUser(m.author),
      content: m.content,
      timestamp: iso(m.createdAt),
      edited_timestamp: m.editedAt ? iso(m.editedAt) : null,
      tts: false,
      mention_everyone: false,
      mentions: m.mentions.map(apiUser),
      mention_roles: [],
      attachments: m.attachments.map((a) => ({ ...a })),
      embeds: m.embeds,
      pinned: false,
      type: m.type,
      flags: m.flags,
      components: m.components,
    };
    if (m.guildId) out.guild_id = m.guildId;
    if (m.nonce !== undefined) out.nonce = m.nonce;
    if (m.webhookId) {
      out.webhook_id = m.webhookId;
      out.application_id = applicationId;
    }
    if (m.interactionId) {
      const it = interactions.get(m.interactionId);
      if (it) out.interaction_metadata = { id: it.id, type: it.kind === 'command' ? 2 : 3, user: apiUser(it.user), authorizing_integration_owners: it.guildId ? { '0': it.guildId } : { '1': it.user.id } };
    }
    if (m.messageReference) {
      out.message_reference = { type: 0, ...m.messageReference };
      if (depth === 0) {
        const ref = messages.get(m.messageReference.message_id);
        out.referenced_message = ref && !ref.deleted ? apiMessage(ref, 1) : null;
      }
    }
    return out;
  };

  // --- gateway dispatch
  const sendPayload = (conn: Conn, payload: unknown) => {
    if (conn.ws.readyState !== WebSocket.OPEN) return;
    const text = JSON.stringify(payload);
    if (!conn.deflate) {
      conn.ws.send(text);
      return;
    }
    // zlib-stream: one shared deflate context per connection, each payload ends with a sync flush.
    const deflate = conn.deflate;
    conn.sendChain = conn.sendChain.then(
      () =>
        new Promise<void>((resolve) => {
          const chunks: Buffer[] = [];
          const onData = (c: Buffer) => chunks.push(c);
          deflate.on('data', onData);
          deflate.write(text);
          deflate.flush(zlibConstants.Z_SYNC_FLUSH, () => {
            // Let any remaining 'data' events for this flush through before sending.
            setImmediate(() => {
              deflate.off('data', onData);
              if (conn.ws.readyState === WebSocket.OPEN) conn.ws.send(Buffer.concat(chunks));
              resolve();
            });
          });
        }),
    );
  };

  /** Dispatch to every live session; `build` may tailor the payload per session or return undefined to skip it. */
  const dispatchEach = (t: string, build: (s: Session) => unknown): number => {
    let delivered = 0;
    for (const s of sessions.values()) {
      if (!s.alive) continue;
      const d = build(s);
      if (d === undefined) continue;
      const payload = { op: 0 as const, t, s: ++s.seq, d };
      s.log.push(payload);
      if (s.log.length > 1000) s.log.shift();
      if (s.conn) sendPayload(s.conn, payload);
      delivered++;
    }
    return delivered;
  };
  const liveSessions = () => [...sessions.values()].filter((s) => s.alive).length;
  const requireSession = (what: string) => {
    if (liveSessions() === 0) throw new Error(`discord double: ${what}: no identified gateway session (log the client in first)`);
  };

  /** Intent filter of a MESSAGE_* event. */
  const messageVisible = (s: Session, m: DoubleMessage) =>
    m.guildId ? (s.intents & Intents.GuildMessages) !== 0 : (s.intents & Intents.DirectMessages) !== 0;
  const messageEventPayload = (s: Session, m: DoubleMessage, withMember: boolean): Record<string, unknown> => {
    const d = apiMessage(m);
    const ch = channels.get(m.channelId);
    if (ch) d.channel_type = ch.type;
    if (m.guildId && withMember) d.member = memberOf(m.author, false);
    // Without the MessageContent intent, guild messages arrive empty unless they mention the bot
    // or are the bot's own (Discord's rule; DMs always have content).
    if (m.guildId && (s.intents & Intents.MessageContent) === 0 && m.author.id !== botUser.id && !m.mentions.some((u) => u.id === botUser.id)) {
      d.content = '';
      d.embeds = [];
      d.attachments = [];
      d.components = [];
    }
    return d;
  };
  const echoCreate = (m: DoubleMessage) => {
    if (!echoBotMessages || m.flags & MessageFlags.Ephemeral) return;
    dispatchEach('MESSAGE_CREATE', (s) => (messageVisible(s, m) ? messageEventPayload(s, m, true) : undefined));
  };
  const echoUpdate = (m: DoubleMessage) => {
    if (!echoBotMessages || m.flags & MessageFlags.Ephemeral) return;
    dispatchEach('MESSAGE_UPDATE', (s) => (messageVisible(s, m) ? messageEventPayload(s, m, true) : undefined));
  };
  const echoDelete = (m: DoubleMessage) => {
    if (!echoBotMessages || m.flags & MessageFlags.Ephemeral) return;
    dispatchEach('MESSAGE_DELETE', (s) => (messageVisible(s, m) ? { id: m.id, channel_id: m.channelId, ...(m.guildId ? { guild_id: m.guildId } : {}) } : undefined));
  };

  // --- message helpers
  const parseMentions = (content: string): DoubleUser[] => {
    const out: DoubleUser[] = [];
    for (const match of content.matchAll(/<@!?(\d{5,20})>/g)) {
      const u = users.get(match[1]!);
      if (u && !out.some((x) => x.id === u.id)) out.push(u);
    }
    return out;
  };

  const storeMessage = (m: DoubleMessage) => {
    messages.set(m.id, m);
    messageOrder.push(m.id);
    notify();
    return m;
  };

  /** Attachments of a create/edit: kept existing ones listed in body.attachments, plus uploaded files. */
  const resolveAttachments = (body: Record<string, unknown>, files: RecordedFile[], channelId: string, existing: DoubleAttachment[] | undefined): DoubleAttachment[] => {
    const listed = Array.isArray(body.attachments) ? (body.attachments as Array<Record<string, unknown>>) : undefined;
    const kept = existing ? (listed ? existing.filter((a) => listed.some((l) => String(l.id) === a.id)) : existing) : [];
    const added = files.map((f, index) => {
      const idx = /^files\[(\d+)\]$/.exec(f.field)?.[1] ?? String(index);
      const meta = listed?.find((l) => String(l.id) === idx);
      const filename = typeof meta?.filename === 'string' ? meta.filename : f.name;
      return addAttachment(f.bytes, { filename, contentType: f.type, channelId });
    });
    return [...kept, ...added];
  };

  const isEmpty = (content: string, body: Record<string, unknown>, attachmentCount: number) =>
    content.trim() === '' &&
    attachmentCount === 0 &&
    !(Array.isArray(body.components) && body.components.length > 0) &&
    !(Array.isArray(body.embeds) && body.embeds.length > 0) &&
    !(Array.isArray(body.sticker_ids) && body.sticker_ids.length > 0) &&
    !body.poll;

  const contentTooLong = (body: Record<string, unknown>): Reply | undefined =>
    typeof body.content === 'string' && codePoints(body.content) > 2000
      ? fail(400, formError('content', 'BASE_TYPE_MAX_LENGTH', 'Must be 2000 or fewer in length.'))
      : undefined;

  /** Create a bot message from a REST/webhook/interaction body; a Reply on validation failure. */
  const createBotMessage = (
    channel: DoubleChannel,
    body: Record<string, unknown>,
    files: RecordedFile[],
    extra: Partial<DoubleMessage> & { allowEmpty?: boolean } = {},
  ): DoubleMessage | Reply => {
    const tooLong = contentTooLong(body);
    if (tooLong) return tooLong;
    const content = typeof body.content === 'string' ? body.content : '';
    const attachmentCount = files.length;
    if (!extra.allowEmpty && isEmpty(content, body, attachmentCount)) return fail(400, ERR.empty);
    let messageReference: DoubleMessage['messageReference'];
    const ref = body.message_reference;
    if (isRecord(ref) && typeof ref.message_id === 'string') {
      const target = messages.get(ref.message_id);
      if (!target || target.deleted || target.channelId !== (typeof ref.channel_id === 'string' ? ref.channel_id : channel.id)) {
        if (ref.fail_if_not_exists !== false) return fail(400, formError('message_reference', 'MESSAGE_REFERENCE_UNKNOWN_MESSAGE', 'Unknown message'));
      } else {
        messageReference = { message_id: target.id, channel_id: target.channelId, ...(target.guildId ? { guild_id: target.guildId } : {}) };
      }
    }
    const now = Date.now();
    const { allowEmpty: _allowEmpty, ...rest } = extra;
    const m: DoubleMessage = {
      id: snowflake(now),
      channelId: channel.id,
      ...(channel.guildId ? { guildId: channel.guildId } : {}),
      author: botUser,
      content,
      components: Array.isArray(body.components) ? body.components : [],
      embeds: Array.isArray(body.embeds) ? body.embeds : [],
      attachments: resolveAttachments(body, files, channel.id, undefined),
      flags: typeof body.flags === 'number' ? body.flags : 0,
      type: messageReference ? 19 : 0,
      ...(typeof body.nonce === 'string' || typeof body.nonce === 'number' ? { nonce: body.nonce } : {}),
      mentions: parseMentions(content),
      ...(messageReference ? { messageReference } : {}),
      source: 'bot',
      createdAt: now,
      edited: false,
      deleted: false,
      history: [content],
      ...rest,
    };
    if (messageReference) {
      const target = messages.get(messageReference.message_id);
      const am = isRecord(body.allowed_mentions) ? body.allowed_mentions : undefined;
      if (target && am?.replied_user !== false && !m.mentions.some((u) => u.id === target.author.id)) m.mentions.push(target.author);
    }
    return storeMessage(m);
  };

  /** Apply an edit body to a message; a Reply on validation failure. */
  const editMessage = (m: DoubleMessage, body: Record<string, unknown>, files: RecordedFile[]): DoubleMessage | Reply => {
    const tooLong = contentTooLong(body);
    if (tooLong) return tooLong;
    const content = 'content' in body ? (typeof body.content === 'string' ? body.content : '') : m.content;
    const components = 'components' in body ? (Array.isArray(body.components) ? body.components : []) : m.components;
    const embeds = 'embeds' in body ? (Array.isArray(body.embeds) ? body.embeds : []) : m.embeds;
    const attachments = 'attachments' in body || files.length > 0 ? resolveAttachments(body, files, m.channelId, m.attachments) : m.attachments;
    if (isEmpty(content, { components, embeds }, attachments.length)) return fail(400, ERR.empty);
    m.content = content;
    m.components = components;
    m.embeds = embeds;
    m.attachments = attachments;
    m.mentions = parseMentions(content);
    if (typeof body.flags === 'number') m.flags = body.flags | (m.flags & MessageFlags.Ephemeral);
    m.flags &= ~MessageFlags.Loading;
    m.edited = true;
    m.editedAt = Date.now();
    m.history.push(content);
    notify();
    return m;
  };

  const isReply = (v: DoubleMessage | Reply): v is Reply => 'status' in v;

  // --- interactions
  const interactionView = (it: StoredInteraction): InteractionResponseView => {
    const original = it.originalMessageId ? messages.get(it.originalMessageId) : undefined;
    return {
      interactionId: it.id,
      kind: it.kind,
      ...(it.callbacks[0] ? { type: it.callbacks[0].type } : {}),
      callbacks: [...it.callbacks],
      acknowledged: it.callbacks.length > 0,
      ...(original ? { original, content: original.content, components: original.components } : {}),
      followUps: it.followUpIds.map((id) => messages.get(id)).filter((m): m is DoubleMessage => m !== undefined),
      originalDeleted: it.originalDeleted,
    };
  };

  const webhookInteraction = (params: Record<string, string>): StoredInteraction | undefined => {
    if (params.app !== applicationId) return undefined;
    return interactionsByToken.get(params.token ?? '');
  };

  const callbackResponse = (it: StoredInteraction, type: number, m: DoubleMessage | undefined) => ({
    interaction: {
      id: it.id,
      type: it.kind === 'command' ? 2 : 3,
      activity_instance_id: null,
      response_message_id: m?.id ?? null,
      response_message_loading: m ? (m.flags & MessageFlags.Loading) !== 0 : null,
      response_message_ephemeral: m ? (m.flags & MessageFlags.Ephemeral) !== 0 : null,
    },
    resource: { type, ...(m ? { message: apiMessage(m) } : {}) },
  });

  // --- commands
  const storeCommands = (scope: string, defs: unknown[]): Array<Record<string, unknown>> | Reply => {
    const prev = commandStore.get(scope) ?? [];
    const out: Array<Record<string, unknown>> = [];
    for (const [i, raw] of defs.entries()) {
      if (!isRecord(raw)) return fail(400, { code: 50035, message: 'Invalid Form Body', errors: { [i]: { _errors: [{ code: 'DICT_TYPE_CONVERT', message: 'Only dictionaries may be used in a DictType' }] } } });
      const v = validateCommand(raw);
      if (v) return fail(400, { code: 50035, message: 'Invalid Form Body', errors: { [i]: v } });
      out.push(commandRecord(scope, raw, prev));
    }
    commandStore.set(scope, out);
    notify();
    return out;
  };
  const validateCommand = (raw: Record<string, unknown>): Record<string, unknown> | undefined => {
    const type = typeof raw.type === 'number' ? raw.type : 1;
    const name = typeof raw.name === 'string' ? raw.name : '';
    if (!name || codePoints(name) > 32) return { name: { _errors: [{ code: 'BASE_TYPE_BAD_LENGTH', message: 'Must be between 1 and 32 in length.' }] } };
    if (type === 1) {
      if (!/^[-_'\p{L}\p{N}\p{sc=Deva}\p{sc=Thai}]{1,32}$/u.test(name) || name !== name.toLowerCase())
        return { name: { _errors: [{ code: 'APPLICATION_COMMAND_INVALID_NAME', message: `Command name is invalid` }] } };
      const description = typeof raw.description === 'string' ? raw.description : '';
      if (codePoints(description) < 1 || codePoints(description) > 100)
        return { description: { _errors: [{ code: 'BASE_TYPE_BAD_LENGTH', message: 'Must be between 1 and 100 in length.' }] } };
    }
    return undefined;
  };
  const commandRecord = (scope: string, raw: Record<string, unknown>, prev: Array<Record<string, unknown>>): Record<string, unknown> => {
    const type = typeof raw.type === 'number' ? raw.type : 1;
    const same = prev.find((c) => c.name === raw.name && c.type === type);
    const { id: _id, application_id: _app, version: _version, guild_id: _guild, ...given } = raw;
    return {
      default_member_permissions: null,
      name_localizations: null,
      description_localizations: null,
      options: [],
      nsfw: false,
      ...(scope === 'global' ? { contexts: null, integration_types: [0] } : {}),
      ...given,
      id: typeof same?.id === 'string' ? same.id : snowflake(),
      application_id: applicationId,
      version: snowflake(),
      type,
      description: typeof raw.description === 'string' ? raw.description : '',
      ...(scope === 'global' ? {} : { guild_id: scope }),
    };
  };

  // --- routes
  const routes: Route[] = [];
  const route = (method: string, pattern: string, auth: Route['auth'], handle: Route['handle']) =>
    routes.push({ method, pattern, parts: pattern.split('/').filter(Boolean), auth, handle });

  route('GET', '/gateway/bot', 'bot', () =>
    ok({ url: gatewayUrl, shards: 1, session_start_limit: { total: 1000, remaining: 999, reset_after: 14_400_000, max_concurrency: 1 } }),
  );
  route('GET', '/gateway', 'none', () => ok({ url: gatewayUrl }));
  route('GET', '/users/@me', 'bot', () => ok({ ...apiUser(botUser), verified: true, mfa_enabled: false, flags: 0, bot: true }));
  route('GET', '/users/:user', 'bot', ({ params }) => {
    const u = users.get(params.user!);
    return u ? ok(apiUser(u)) : fail(404, ERR.unknownUser);
  });
  route('GET', '/applications/@me', 'bot', () =>
    ok({
      id: applicationId,
      name: botUser.username,
      icon: null,
      description: '',
      bot_public: true,
      bot_require_code_grant: false,
      verify_key: '0'.repeat(64),
      flags: opts.applicationFlags ?? 0,
      bot: apiUser(botUser),
      owner: apiUser(makeUser({ username: 'app-owner' })),
      team: null,
      summary: '',
      tags: [],
      approximate_guild_count: guilds.length,
    }),
  );

  // application commands (global and guild)
  const appGuard = (params: Record<string, string>) => (params.app !== applicationId ? fail(403, { message: 'Missing Access', code: 50001 }) : undefined);
  for (const [base, scopeOf] of [
    ['/applications/:app/commands', () => 'global'],
    ['/applications/:app/guilds/:guild/commands', (p: Record<string, string>) => p.guild!],
  ] as const) {
    route('GET', base, 'bot', ({ params }) => appGuard(params) ?? ok(commandStore.get(scopeOf(params)) ?? []));
    route('PUT', base, 'bot', ({ params, rawBody }) => {
      const g = appGuard(params);
      if (g) return g;
      const defs = rawBody;
      if (!Array.isArray(defs)) return fail(400, { code: 50035, message: 'Invalid Form Body', errors: { _errors: [{ code: 'LIST_TYPE_CONVERT', message: 'Must be an array.' }] } });
      const r = storeCommands(scopeOf(params), defs);
      return Array.isArray(r) ? ok(r) : r;
    });
    route('POST', base, 'bot', ({ params, body }) => {
      const g = appGuard(params);
      if (g) return g;
      const scope = scopeOf(params);
      const v = validateCommand(body);
      if (v) return fail(400, { code: 50035, message: 'Invalid Form Body', errors: v });
      const list = commandStore.get(scope) ?? [];
      const rec = commandRecord(scope, body, list);
      const idx = list.findIndex((c) => c.id === rec.id);
      if (idx >= 0) list[idx] = rec;
      else list.push(rec);
      commandStore.set(scope, list);
      notify();
      return { status: idx >= 0 ? 200 : 201, body: rec };
    });
    route('GET', `${base}/:cmd`, 'bot', ({ params }) => {
      const c = (commandStore.get(scopeOf(params)) ?? []).find((x) => x.id === params.cmd);
      return c ? ok(c) : fail(404, ERR.unknownCommand);
    });
    route('PATCH', `${base}/:cmd`, 'bot', ({ params, body }) => {
      const list = commandStore.get(scopeOf(params)) ?? [];
      const idx = list.findIndex((x) => x.id === params.cmd);
      if (idx < 0) return fail(404, ERR.unknownCommand);
      const merged = { ...list[idx]!, ...body, id: params.cmd, version: snowflake() };
      list[idx] = merged;
      notify();
      return ok(merged);
    });
    route('DELETE', `${base}/:cmd`, 'bot', ({ params }) => {
      const list = commandStore.get(scopeOf(params)) ?? [];
      const idx = list.findIndex((x) => x.id === params.cmd);
      if (idx < 0) return fail(404, ERR.unknownCommand);
      list.splice(idx, 1);
      notify();
      return noContent();
    });
  }

  // channels & messages
  route('GET', '/channels/:channel', 'bot', ({ params }) => {
    const ch = channels.get(params.channel!);
    return ch ? ok(apiChannel(ch)) : fail(404, ERR.unknownChannel);
  });
  route('POST', '/users/@me/channels', 'bot', ({ body }) => {
    const rid = typeof body.recipient_id === 'string' ? body.recipient_id : '';
    if (!/^\d{15,20}$/.test(rid)) return fail(400, formError('recipient_id', 'NUMBER_TYPE_COERCE', `Value "${rid}" is not snowflake.`));
    return ok(apiChannel(dmChannelFor(makeUser({ id: rid }))));
  });
  route('POST', '/channels/:channel/typing', 'bot', ({ params }) => (channels.has(params.channel!) ? noContent() : fail(404, ERR.unknownChannel)));
  route('GET', '/channels/:channel/messages', 'bot', ({ params, query }) => {
    if (!channels.has(params.channel!)) return fail(404, ERR.unknownChannel);
    const limit = Math.min(100, Math.max(1, Number(query.limit ?? 50) || 50));
    let list = messageOrder
      .map((id) => messages.get(id)!)
      .filter((m) => m.channelId === params.channel && !m.deleted && !(m.flags & MessageFlags.Ephemeral));
    const before = query.before;
    const after = query.after;
    if (before) list = list.filter((m) => BigInt(m.id) < BigInt(before));
    if (after) list = list.filter((m) => BigInt(m.id) > BigInt(after));
    list = after ? list.slice(0, limit) : list.slice(-limit);
    return ok(list.reverse().map((m) => apiMessage(m)));
  });
  route('GET', '/channels/:channel/messages/:message', 'bot', ({ params }) => {
    const m = messages.get(params.message!);
    return m && !m.deleted && m.channelId === params.channel ? ok(apiMessage(m)) : fail(404, ERR.unknownMessage);
  });
  route('POST', '/channels/:channel/messages', 'bot', ({ params, body, files }) => {
    const ch = channels.get(params.channel!);
    if (!ch) return fail(404, ERR.unknownChannel);
    const nonce = typeof body.nonce === 'string' || typeof body.nonce === 'number' ? String(body.nonce) : undefined;
    if (nonce !== undefined && typeof body.nonce === 'string' && body.nonce.length > 25) return fail(400, formError('nonce', 'BASE_TYPE_MAX_LENGTH', 'Must be 25 or fewer in length.'));
    if (nonce !== undefined && body.enforce_nonce === true) {
      const seen = nonces.get(`${ch.id}:${nonce}`);
      const prev = seen && Date.now() - seen.at <= nonceWindowMs ? messages.get(seen.messageId) : undefined;
      if (prev) return ok(apiMessage(prev));
    }
    const r = createBotMessage(ch, body, files);
    if (isReply(r)) return r;
    if (nonce !== undefined && body.enforce_nonce === true) nonces.set(`${ch.id}:${nonce}`, { messageId: r.id, at: r.createdAt });
    return ok(apiMessage(r), () => echoCreate(r));
  });
  route('PATCH', '/channels/:channel/messages/:message', 'bot', ({ params, body, files }) => {
    const m = messages.get(params.message!);
    if (!m || m.deleted || m.channelId !== params.channel) return fail(404, ERR.unknownMessage);
    if (m.author.id !== botUser.id) return fail(403, ERR.cannotEditOther);
    const r = editMessage(m, body, files);
    if (isReply(r)) return r;
    return ok(apiMessage(r), () => echoUpdate(r));
  });
  route('DELETE', '/channels/:channel/messages/:message', 'bot', ({ params }) => {
    const m = messages.get(params.message!);
    if (!m || m.deleted || m.channelId !== params.channel) return fail(404, ERR.unknownMessage);
    m.deleted = true;
    notify();
    return noContent(() => echoDelete(m));
  });
  route('PUT', '/channels/:channel/messages/:message/reactions/:emoji/@me', 'bot', ({ params }) => {
    const m = messages.get(params.message!);
    return m && !m.deleted && m.channelId === params.channel ? noContent() : fail(404, ERR.unknownMessage);
  });
  route('DELETE', '/channels/:channel/messages/:message/reactions/:emoji/@me', 'bot', ({ params }) => {
    const m = messages.get(params.message!);
    return m && !m.deleted && m.channelId === params.channel ? noContent() : fail(404, ERR.unknownMessage);
  });

  // interactions
  route('POST', '/interactions/:interaction/:token/callback', 'none', ({ params, body, files, query }) => {
    const it = interactions.get(params.interaction!);
    if (!it || it.token !== params.token) return fail(404, ERR.unknownInteraction);
    if (it.callbacks.length > 0) return fail(400, ERR.alreadyAcked);
    if (ackDeadlineMs > 0 && Date.now() - it.createdAt > ackDeadlineMs) return fail(404, ERR.unknownInteraction);
    const type = typeof body.type === 'number' ? body.type : -1;
    const data = isRecord(body.data) ? body.data : {};
    const ch = channels.get(it.channelId);
    if (!ch) return fail(404, ERR.unknownChannel);
    const componentOnly = type === 6 || type === 7;
    if (componentOnly && it.kind !== 'component') return fail(400, formError('type', 'INTERACTION_RESPONSE_TYPE_INVALID', 'Interaction response type is invalid'));
    if (![4, 5, 6, 7, 8, 9, 10, 12].includes(type)) return fail(400, formError('type', 'BASE_TYPE_CHOICES', `Value must be one of {4, 5, 6, 7, 8, 9, 10, 12}.`));
    let msg: DoubleMessage | undefined;
    let after: (() => void) | undefined;
    if (type === 4 || type === 5) {
      const flags = typeof data.flags === 'number' ? data.flags : 0;
      const r = createBotMessage(ch, type === 5 ? { flags } : data, type === 5 ? [] : files, {
        interactionId: it.id,
        webhookId: applicationId,
        type: it.kind === 'command' ? 20 : 0,
        flags: type === 5 ? flags | MessageFlags.Loading : flags,
        allowEmpty: type === 5,
      });
      if (isReply(r)) return r;
      msg = r;
      it.originalMessageId = r.id;
      after = () => echoCreate(r);
    } else if (componentOnly) {
      msg = it.messageId ? messages.get(it.messageId) : undefined;
      if (!msg || msg.deleted) return fail(404, ERR.unknownMessage);
      it.originalMessageId = msg.id;
      if (type === 7) {
        const r = editMessage(msg, data, files);
        if (isReply(r)) return r;
        after = () => echoUpdate(r);
      }
    }
    it.callbacks.push({ type, data: body.data, at: Date.now() });
    notify();
    const withResponse = query.with_response === 'true';
    return withResponse ? { status: 200, body: callbackResponse(it, type, msg), ...(after ? { after } : {}) } : noContent(after);
  });

  const originalOf = (it: StoredInteraction): DoubleMessage | undefined => {
    const m = it.originalMessageId ? messages.get(it.originalMessageId) : undefined;
    return m && !m.deleted ? m : undefined;
  };
  const webhookMessage = (it: StoredInteraction, id: string): DoubleMessage | undefined => {
    if (id === '@original') return originalOf(it);
    const m = messages.get(id);
    return m && !m.deleted && (m.interactionId === it.id || m.id === it.originalMessageId) ? m : undefined;
  };
  // Webhook message routes, registered twice so that `@original` shows in the route name.
  for (const target of ['@original', ':message']) {
    const path = `/webhooks/:app/:token/messages/${target}`;
    const messageIdOf = (params: Record<string, string>) => params.message ?? '@original';
    route('GET', path, 'none', ({ params }) => {
      const it = webhookInteraction(params);
      if (!it) return fail(404, ERR.unknownWebhook);
      const m = webhookMessage(it, messageIdOf(params));
      return m ? ok(apiMessage(m)) : fail(404, ERR.unknownMessage);
    });
    route('PATCH', path, 'none', ({ params, body, files }) => {
      const it = webhookInteraction(params);
      if (!it) return fail(404, ERR.unknownWebhook);
      const m = webhookMessage(it, messageIdOf(params));
      if (!m) return fail(404, ERR.unknownMessage);
      const r = editMessage(m, body, files);
      if (isReply(r)) return r;
      return ok(apiMessage(r), () => echoUpdate(r));
    });
    route('DELETE', path, 'none', ({ params }) => {
      const it = webhookInteraction(params);
      if (!it) return fail(404, ERR.unknownWebhook);
      const m = webhookMessage(it, messageIdOf(params));
      if (!m) return fail(404, ERR.unknownMessage);
      m.deleted = true;
      if (m.id === it.originalMessageId) it.originalDeleted = true;
      notify();
      return noContent(() => echoDelete(m));
    });
  }
  route('POST', '/webhooks/:app/:token', 'none', ({ params, body, files, query }) => {
    const it = webhookInteraction(params);
    if (!it || it.callbacks.length === 0) return fail(404, ERR.unknownWebhook);
    const ch = channels.get(it.channelId);
    if (!ch) return fail(404, ERR.unknownChannel);
    const original = originalOf(it);
    let m: DoubleMessage;
    let after: () => void;
    if (it.callbacks[0]?.type === 5 && original && original.flags & MessageFlags.Loading) {
      // Discord: the first follow-up after a deferred reply fills in the "thinking..." message.
      const r = editMessage(original, body, files);
      if (isReply(r)) return r;
      m = r;
      after = () => echoUpdate(r);
    } else {
      const r = createBotMessage(ch, body, files, { interactionId: it.id, webhookId: applicationId });
      if (isReply(r)) return r;
      m = r;
      after = () => echoCreate(r);
    }
    it.followUpIds.push(m.id);
    notify();
    return query.wait === 'true' ? ok(apiMessage(m), after) : noContent(after);
  });

  // CDN
  route('GET', '/attachments/:channel/:attachment/:filename', 'none', ({ params }) => {
    const a = attachmentBytes.get(params.attachment!);
    if (!a) return { status: 404, raw: { bytes: Buffer.from('Not Found'), contentType: 'text/plain' } };
    return { status: 200, raw: { bytes: a.bytes, contentType: a.contentType } };
  });

  const matchRoute = (method: string, path: string): { route?: Route; params: Record<string, string>; name: string } => {
    const segs = path.split('/').filter(Boolean);
    let best: { route: Route; params: Record<string, string>; literal: number } | undefined;
    for (const r of routes) {
      if (r.method !== method || r.parts.length !== segs.length) continue;
      const params: Record<string, string> = {};
      let literal = 0;
      let okMatch = true;
      for (let i = 0; i < segs.length; i++) {
        const p = r.parts[i]!;
        const s = decodeURIComponent(segs[i]!);
        if (p.startsWith(':')) params[p.slice(1)] = s;
        else if (p === s) literal++;
        else {
          okMatch = false;
          break;
        }
      }
      // Prefer the most literal match (`/users/@me` over `/users/:user`).
      if (okMatch && (!best || literal > best.literal)) best = { route: r, params, literal };
    }
    if (best) return { route: best.route, params: best.params, name: `${method} ${displayPattern(best.route.pattern)}` };
    return { params: {}, name: `${method} ${segs.map((s) => (/^\d+$/.test(s) ? ':id' : s)).join('/').replace(/^/, '/')}` };
  };
  /** Route names as tests write them: the first id is `:id`, messages `:mid`, apps `:app`... */
  const displayPattern = (pattern: string) =>
    pattern
      .replace(/^\/channels\/:channel/, '/channels/:id')
      .replace(/\/messages\/:message/, '/messages/:mid')
      .replace(/^\/interactions\/:interaction/, '/interactions/:id')
      .replace(/^\/users\/:user/, '/users/:id')
      .replace(/^\/attachments\/:channel\/:attachment/, '/attachments/:channel/:id');

  // --- request handling
  function onRequest(req: IncomingMessage, res: ServerResponse) {
    const at = Date.now();
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(parts);
      const url = new URL(req.url ?? '/', origin);
      const method = (req.method ?? 'GET').toUpperCase();
      const isApi = url.pathname.startsWith(`${API_PREFIX}/`);
      const path = isApi ? url.pathname.slice(API_PREFIX.length) : url.pathname;
      const query: Record<string, string> = {};
      for (const [k, v] of url.searchParams) query[k] = v;
      const call: RecordedCall = {
        seq: ++callSeq,
        method,
        path,
        query,
        route: '',
        params: {},
        headers: req.headers,
        body: undefined,
        multipart: false,
        files: [],
        fields: {},
        at,
        status: 0,
      };
      const send = (reply: Reply) => {
        call.status = reply.status;
        if (reply.status >= 400) call.failed = true;
        if (reply.body !== undefined) call.response = reply.body;
        if (reply.raw) {
          res.writeHead(reply.status, { 'content-type': reply.raw.contentType, 'content-length': String(reply.raw.bytes.length), ...reply.headers });
          res.end(reply.raw.bytes);
        } else if (reply.status === 204 || reply.body === undefined) {
          res.writeHead(reply.status, { ...reply.headers });
          res.end();
        } else {
          const text = JSON.stringify(reply.body);
          res.writeHead(reply.status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)), ...reply.headers });
          res.end(text);
        }
        notify();
        reply.after?.();
      };

      // Body: JSON or multipart (payload_json + files[n]).
      let body: unknown;
      const ctype = String(req.headers['content-type'] ?? '');
      try {
        if (ctype.startsWith('multipart/form-data')) {
          const boundary = /boundary=(?:"([^"]+)"|([^;]+))/.exec(ctype);
          const parsed = parseMultipart(raw, (boundary?.[1] ?? boundary?.[2] ?? '').trim());
          call.multipart = true;
          call.files = parsed.files;
          const { payload_json, ...fields } = parsed.fields;
          call.fields = fields;
          body = payload_json !== undefined ? JSON.parse(payload_json) : undefined;
        } else if (raw.length > 0) {
          body = JSON.parse(raw.toString('utf8'));
        }
      } catch {
        const m = matchRoute(method, path);
        call.route = m.name;
        calls.push(call);
        send(fail(400, { message: '400: Bad Request', code: 50109 }));
        return;
      }
      call.body = body;

      const matched = isApi || path.startsWith('/attachments/') ? matchRoute(method, path) : { params: {}, name: `${method} ${path}` };
      call.route = matched.name;
      call.params = matched.params;
      calls.push(call);

      // Scripted failures come first, as Discord's rate limiter answers before the route does.
      const queue = failures.get(call.route);
      const scriptIdx = queue?.findIndex((s) => !s.match || s.match(call)) ?? -1;
      if (queue && scriptIdx >= 0) {
        const script = queue[scriptIdx]!;
        const left = (script.times ?? 1) - 1;
        if (left > 0) script.times = left;
        else queue.splice(scriptIdx, 1);
        send(scriptedFailure(script));
        return;
      }

      const r = matched.route;
      if (!r || (!isApi && !path.startsWith('/attachments/'))) {
        send(fail(404, { message: '404: Not Found', code: 0 }));
        return;
      }
      if (r.auth === 'bot' && req.headers.authorization !== `Bot ${token}`) {
        send(fail(401, ERR.unauthorized));
        return;
      }
      const bodyRecord: Record<string, unknown> = isRecord(body) ? body : {};
      try {
        send(r.handle({ call, params: matched.params, body: bodyRecord, files: call.files, query, rawBody: body }));
      } catch (err) {
        send(fail(500, { message: `discord double: ${(err as Error).message}`, code: 0 }));
      }
    });
  }

  const scriptedFailure = (script: FailureScript): Reply => {
    const status = script.status ?? 429;
    if (status !== 429) {
      const text = status >= 500 ? `${status}: ${status === 503 ? 'Service Unavailable' : 'Internal Server Error'}` : `${status}: Scripted failure`;
      return fail(status, script.body ?? { message: text, code: 0 });
    }
    const retryAfter = script.retryAfter ?? 1;
    const global = script.global ?? false;
    const scope = script.scope ?? (global ? 'global' : 'user');
    const headers: Record<string, string> = {
      'retry-after': String(Math.ceil(retryAfter)),
      'x-ratelimit-scope': scope,
    };
    if (global) headers['x-ratelimit-global'] = 'true';
    else {
      const resetAt = Date.now() / 1000 + retryAfter;
      headers['x-ratelimit-limit'] = '5';
      headers['x-ratelimit-remaining'] = '0';
      headers['x-ratelimit-reset'] = resetAt.toFixed(3);
      headers['x-ratelimit-reset-after'] = retryAfter.toFixed(3);
      headers['x-ratelimit-bucket'] = randomBytes(16).toString('hex');
    }
    return { status: 429, headers, body: script.body ?? { message: 'You are being rate limited.', retry_after: retryAfter, global } };
  };

  // --- gateway
  const wss = new WebSocketServer({ noServer: true });
  server.on('upgrade', (req, socket, head) => {
    const url = new URL(req.url ?? '/', origin);
    if (url.pathname !== '/gateway' && url.pathname !== '/gateway/') {
      socket.destroy();
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => onGatewayConnection(ws, url));
  });

  function onGatewayConnection(ws: WebSocket, url: URL) {
    const conn: Conn = { ws, sendChain: Promise.resolve() };
    conns.add(conn);
    notify();
    ws.on('close', (code) => {
      conns.delete(conn);
      conn.deflate?.destroy();
      const s = conn.session;
      if (s && s.conn === conn) {
        s.conn = undefined;
        // A client closing with 1000/1001 ends its session (Discord); other codes may resume.
        if (code === 1000 || code === 1001) s.alive = false;
      }
      notify();
    });
    ws.on('error', () => {});
    if (url.searchParams.get('v') !== '10') {
      ws.close(4012, 'Invalid API version');
      return;
    }
    if ((url.searchParams.get('encoding') ?? 'json') !== 'json') {
      ws.close(4002, 'Error while decoding payload.');
      return;
    }
    if (url.searchParams.get('compress') === 'zlib-stream') conn.deflate = createDeflate();
    sendPayload(conn, { op: 10, d: { heartbeat_interval: heartbeatIntervalMs, _trace: ['["discord-double",{"micros":0}]'] }, s: null, t: null });

    ws.on('message', (data: RawData, isBinary) => {
      let payload: { op?: unknown; d?: unknown };
      try {
        if (isBinary) throw new Error('binary');
        payload = JSON.parse(data.toString()) as { op?: unknown; d?: unknown };
      } catch {
        ws.close(4002, 'Error while decoding payload.');
        return;
      }
      onGatewayPayload(conn, payload);
    });
  }

  function onGatewayPayload(conn: Conn, payload: { op?: unknown; d?: unknown }) {
    const { op, d } = payload;
    switch (op) {
      case 1: {
        heartbeats++;
        sendPayload(conn, { op: 11, d: null, s: null, t: null });
        notify();
        return;
      }
      case 2: {
        if (conn.session) return void conn.ws.close(4005, 'Already authenticated.');
        const id = isRecord(d) ? d : {};
        const rec: IdentifyRecord = {
          token: String(id.token ?? ''),
          intents: typeof id.intents === 'number' ? id.intents : 0,
          properties: id.properties,
          ...(Array.isArray(id.shard) ? { shard: id.shard as [number, number] } : {}),
          ...(typeof id.compress === 'boolean' ? { compress: id.compress } : {}),
          at: Date.now(),
        };
        identifies.push(rec);
        notify();
        if (rec.token.replace(/^Bot\s+/i, '') !== token) return void conn.ws.close(4004, 'Authentication failed.');
        if (rec.shard && (rec.shard[0] !== 0 || rec.shard[1] !== 1)) return void conn.ws.close(4010, 'Invalid shard.');
        const session: Session = { id: randomUUID().replace(/-/g, ''), token: rec.token, intents: rec.intents, seq: 0, log: [], conn, alive: true };
        sessions.set(session.id, session);
        conn.session = session;
        const ready = {
          v: 10,
          user: { ...apiUser(botUser), verified: true, mfa_enabled: false, flags: 0, bot: true },
          guilds: guilds.map((g) => ({ id: g.id, unavailable: true })),
          session_id: session.id,
          session_type: 'normal',
          resume_gateway_url: gatewayUrl,
          shard: rec.shard ?? [0, 1],
          application: { id: applicationId, flags: opts.applicationFlags ?? 0 },
          private_channels: [],
          presences: [],
          relationships: [],
          guild_join_requests: [],
          geo_ordered_rtc_regions: [],
          user_settings: {},
          _trace: ['["discord-double",{"micros":0}]'],
        };
        const send = (t: string, data: unknown) => {
          const p = { op: 0 as const, t, s: ++session.seq, d: data };
          session.log.push(p);
          sendPayload(conn, p);
        };
        send('READY', ready);
        if (rec.intents & Intents.Guilds) for (const g of guilds) send('GUILD_CREATE', guildCreatePayload(g));
        notify();
        return;
      }
      case 6: {
        const r = isRecord(d) ? d : {};
        const s = typeof r.session_id === 'string' ? sessions.get(r.session_id) : undefined;
        if (!s || !s.alive || String(r.token ?? '') !== s.token) {
          sendPayload(conn, { op: 9, d: false, s: null, t: null });
          return;
        }
        if (s.conn && s.conn !== conn) s.conn.ws.close(4000, 'Session resumed elsewhere');
        s.conn = conn;
        conn.session = s;
        const since = typeof r.seq === 'number' ? r.seq : 0;
        for (const p of s.log) if (p.s > since) sendPayload(conn, p);
        const resumed = { op: 0 as const, t: 'RESUMED', s: ++s.seq, d: { _trace: ['["discord-double",{"micros":0}]'] } };
        s.log.push(resumed);
        sendPayload(conn, resumed);
        notify();
        return;
      }
      case 3:
      case 4:
      case 8:
      case 31: {
        if (!conn.session) return void conn.ws.close(4003, 'Not authenticated.');
        gatewayPayloads.push({ op, d, at: Date.now() });
        notify();
        return;
      }
      default:
        conn.ws.close(4001, 'Unknown opcode.');
    }
  }

  const guildCreatePayload = (g: DoubleGuild) => {
    const everyone = { id: g.id, name: '@everyone', permissions: EVERYONE_PERMISSIONS, position: 0, color: 0, hoist: false, managed: false, mentionable: false, flags: 0, icon: null, unicode_emoji: null };
    const normal = g.channels.filter((c) => !THREAD_TYPES.has(c.type));
    const threads = g.channels.filter((c) => THREAD_TYPES.has(c.type));
    return {
      id: g.id,
      name: g.name,
      icon: null,
      splash: null,
      discovery_splash: null,
      owner_id: g.ownerId,
      afk_channel_id: null,
      afk_timeout: 300,
      verification_level: 0,
      default_message_notifications: 0,
      explicit_content_filter: 0,
      roles: [everyone],
      emojis: [],
      stickers: [],
      features: [],
      mfa_level: 0,
      application_id: null,
      system_channel_id: null,
      system_channel_flags: 0,
      rules_channel_id: null,
      vanity_url_code: null,
      description: null,
      banner: null,
      premium_tier: 0,
      premium_subscription_count: 0,
      preferred_locale: 'en-US',
      public_updates_channel_id: null,
      nsfw_level: 0,
      premium_progress_bar_enabled: false,
      safety_alerts_channel_id: null,
      joined_at: iso(Date.now() - 86_400_000),
      large: false,
      unavailable: false,
      member_count: 2,
      voice_states: [],
      members: [memberOf(botUser, true)],
      channels: normal.map((c) => apiChannel(c)),
      threads: threads.map((c) => apiChannel(c)),
      presences: [],
      stage_instances: [],
      guild_scheduled_events: [],
      soundboard_sounds: [],
      lazy: true,
    };
  };

  // --- dispatch helpers
  const messageCreate: DiscordDouble['messageCreate'] = (input) => {
    requireSession('messageCreate');
    const author = makeUser(input.author);
    let ch: DoubleChannel;
    if (input.guildId) {
      const g = guildById(input.guildId);
      if (!g) throw new Error(`discord double: messageCreate: unknown guild ${input.guildId}`);
      const c = input.channelId ? channels.get(input.channelId) : undefined;
      if (!c || c.guildId !== g.id) throw new Error(`discord double: messageCreate: channel ${input.channelId} is not in guild ${g.id}`);
      ch = c;
    } else if (input.channelId && channels.get(input.channelId)?.guildId) {
      ch = channels.get(input.channelId)!;
    } else {
      ch = dmChannelFor(author, input.channelId);
    }
    let content = input.content;
    const botMention = `<@${botUser.id}>`;
    if (input.mentionsBot && !content.includes(botMention) && !content.includes(`<@!${botUser.id}>`)) content = `${botMention} ${content}`;
    const mentions = parseMentions(content);
    if (input.mentionsBot && !mentions.some((u) => u.id === botUser.id)) mentions.push(botUser);
    let messageReference: DoubleMessage['messageReference'];
    if (input.replyToMessageId) {
      const target = messages.get(input.replyToMessageId);
      messageReference = { message_id: input.replyToMessageId, channel_id: target?.channelId ?? ch.id, ...(ch.guildId ? { guild_id: ch.guildId } : {}) };
      if (target && input.replyMention !== false && !mentions.some((u) => u.id === target.author.id)) mentions.push(target.author);
    }
    const attachments = (input.attachments ?? []).map((a) =>
      'bytes' in a ? addAttachment(a.bytes, { filename: a.filename, channelId: ch.id, ...(a.contentType ? { contentType: a.contentType } : {}) }) : a,
    );
    const now = Date.now();
    const m = storeMessage({
      id: input.id ?? snowflake(now),
      channelId: ch.id,
      ...(ch.guildId ? { guildId: ch.guildId } : {}),
      author,
      content,
      components: [],
      embeds: [],
      attachments,
      flags: 0,
      type: messageReference ? 19 : 0,
      mentions,
      ...(messageReference ? { messageReference } : {}),
      source: 'user',
      createdAt: now,
      edited: false,
      deleted: false,
      history: [content],
    });
    dispatchEach('MESSAGE_CREATE', (s) => (messageVisible(s, m) ? messageEventPayload(s, m, true) : undefined));
    return { messageId: m.id, channelId: ch.id, ...(ch.guildId ? { guildId: ch.guildId } : {}), authorId: author.id, content };
  };

  const interactionBase = (it: StoredInteraction, ch: DoubleChannel) => {
    const base: Record<string, unknown> = {
      id: it.id,
      application_id: applicationId,
      token: it.token,
      version: 1,
      channel_id: ch.id,
      channel: ch.type === ChannelType.DM ? { ...apiChannel(ch), recipients: [apiUser(it.user)] } : { ...apiChannel(ch), permissions: EVERYONE_PERMISSIONS },
      locale: 'en-US',
      app_permissions: EVERYONE_PERMISSIONS,
      entitlements: [],
      attachment_size_limit: 10 * 1024 * 1024,
    };
    if (ch.guildId) {
      base.guild_id = ch.guildId;
      base.guild = { id: ch.guildId, locale: 'en-US', features: [] };
      base.guild_locale = 'en-US';
      base.member = { ...memberOf(it.user, true), permissions: EVERYONE_PERMISSIONS };
      base.authorizing_integration_owners = { '0': ch.guildId };
      base.context = 0;
    } else {
      base.user = apiUser(it.user);
      base.authorizing_integration_owners = { '0': '0' };
      base.context = 1;
    }
    return base;
  };

  const newInteraction = (kind: StoredInteraction['kind'], ch: DoubleChannel, user: DoubleUser, id: string | undefined, messageId?: string): StoredInteraction => {
    const it: StoredInteraction = {
      id: id ?? snowflake(),
      token: `itok.${randomBytes(24).toString('base64url')}`,
      kind,
      channelId: ch.id,
      ...(ch.guildId ? { guildId: ch.guildId } : {}),
      user,
      ...(messageId ? { messageId } : {}),
      createdAt: Date.now(),
      callbacks: [],
      followUpIds: [],
      originalDeleted: false,
    };
    interactions.set(it.id, it);
    interactionsByToken.set(it.token, it);
    return it;
  };

  const resolveChannel = (channelId: string | undefined, guildId: string | undefined, user: DoubleUser, what: string): DoubleChannel => {
    if (channelId) {
      const c = channels.get(channelId);
      if (c) return c;
      if (guildId) throw new Error(`discord double: ${what}: unknown channel ${channelId}`);
    }
    if (guildId) throw new Error(`discord double: ${what}: channelId is required for a guild`);
    return dmChannelFor(user, channelId);
  };

  const slashCommand: DiscordDouble['slashCommand'] = (input) => {
    requireSession('slashCommand');
    const user = makeUser(input.user);
    const ch = resolveChannel(input.channelId, input.guildId, user, 'slashCommand');
    const it = newInteraction('command', ch, user, input.id);
    const scoped = [...(ch.guildId ? (commandStore.get(ch.guildId) ?? []) : []), ...(commandStore.get('global') ?? [])];
    const cmd = scoped.find((c) => c.name === input.name && (c.type ?? 1) === 1);
    const commandId = typeof cmd?.id === 'string' ? cmd.id : snowflake();
    const options = Array.isArray(input.options)
      ? input.options
      : Object.entries(input.options ?? {}).map(([name, value]) => ({
          name,
          value,
          type: typeof value === 'boolean' ? 5 : typeof value === 'number' ? (Number.isInteger(value) ? 4 : 10) : 3,
        }));
    const d = {
      ...interactionBase(it, ch),
      type: 2,
      data: { id: commandId, name: input.name, type: 1, ...(options.length ? { options } : {}), ...(cmd?.guild_id ? { guild_id: cmd.guild_id } : {}) },
    };
    dispatchEach('INTERACTION_CREATE', () => d);
    notify();
    return { interactionId: it.id, token: it.token, commandId, channelId: ch.id, userId: user.id };
  };

  const buttonClick: DiscordDouble['buttonClick'] = (input) => {
    requireSession('buttonClick');
    const user = makeUser(input.user);
    const msg = typeof input.message === 'string' ? messages.get(input.message) : input.message;
    if (!msg || msg.deleted) throw new Error(`discord double: buttonClick: unknown message ${typeof input.message === 'string' ? input.message : input.message.id}`);
    const ch = channels.get(input.channelId ?? msg.channelId);
    if (!ch) throw new Error(`discord double: buttonClick: unknown channel ${input.channelId ?? msg.channelId}`);
    const it = newInteraction('component', ch, user, input.id, msg.id);
    const d = {
      ...interactionBase(it, ch),
      type: 3,
      message: apiMessage(msg),
      data: { custom_id: input.customId, component_type: 2 },
    };
    dispatchEach('INTERACTION_CREATE', () => d);
    notify();
    return { interactionId: it.id, token: it.token, messageId: msg.id, channelId: ch.id, userId: user.id };
  };

  // --- the double
  const double: DiscordDouble = {
    origin,
    apiBase: `${origin}/api`,
    gatewayUrl,
    clientOptions: { rest: { api: `${origin}/api`, cdn: origin, mediaProxy: origin }, waitGuildTimeout: 1_000 },
    token,
    applicationId,
    botUser,
    guilds,

    get calls() {
      return calls;
    },
    callsTo: (r) => calls.filter((c) => c.route === r),
    waitForCall: (r, pred, timeoutMs = 5_000) =>
      waitUntil(
        () => calls.find((c) => c.route === r && c.status !== 0 && (!pred || pred(c))),
        timeoutMs,
        () => `a call to ${r} (have: ${[...new Set(calls.map((c) => c.route))].join(', ') || 'none'})`,
      ),
    clearCalls: () => {
      calls.length = 0;
    },
    failNext: (r, script = {}) => {
      if (!/^(GET|POST|PUT|PATCH|DELETE) \//.test(r)) throw new Error(`discord double: failNext wants a route like 'POST /channels/:id/messages', got '${r}'`);
      const q = failures.get(r) ?? [];
      q.push({ ...script });
      failures.set(r, q);
    },

    messages: (channelId) =>
      messageOrder.map((id) => messages.get(id)!).filter((m) => channelId === undefined || m.channelId === channelId),
    message: (id) => messages.get(id),
    waitForMessage: (pred, timeoutMs = 5_000) =>
      waitUntil(
        () => messageOrder.map((id) => messages.get(id)!).find(pred),
        timeoutMs,
        () => `a matching message (have ${messageOrder.length})`,
      ),
    commands: (guildId) => [...(commandStore.get(guildId ?? 'global') ?? [])],
    interactionResponses: (id) => {
      const it = interactions.get(id);
      return it ? interactionView(it) : undefined;
    },
    waitForInteractionResponse: (id, pred, timeoutMs = 5_000) =>
      waitUntil(
        () => {
          const it = interactions.get(id);
          if (!it || it.callbacks.length === 0) return undefined;
          const v = interactionView(it);
          return !pred || pred(v) ? v : undefined;
        },
        timeoutMs,
        () => `a response to interaction ${id}`,
      ),
    addAttachment,
    user: makeUser,
    channel: (id) => channels.get(id),
    dmChannel: (u) => dmChannelFor(makeUser(u)),

    get connections() {
      return [...conns].filter((c) => c.ws.readyState === WebSocket.OPEN).length;
    },
    get identifies() {
      return identifies;
    },
    get heartbeats() {
      return heartbeats;
    },
    get gatewayPayloads() {
      return gatewayPayloads;
    },
    waitForIdentify: ({ count = 1, timeoutMs = 5_000 } = {}) =>
      waitUntil(() => identifies[count - 1], timeoutMs, () => `identify #${count} (have ${identifies.length})`),
    waitForHeartbeats: (n, timeoutMs = 5_000) =>
      waitUntil(() => (heartbeats >= n ? true : undefined), timeoutMs, () => `${n} heartbeats (have ${heartbeats})`).then(() => undefined),
    messageCreate,
    slashCommand,
    buttonClick,
    dispatch: (t, d) => {
      requireSession('dispatch');
      return dispatchEach(t, () => d);
    },
    disconnectGateway: (code = 4000, reason = 'discord double: disconnect') => {
      for (const c of conns) c.ws.close(code, reason);
    },

    close: () => {
      if (closed) return Promise.resolve();
      closed = true;
      for (const p of [...pendingWaits]) p.reject(new Error('discord double: closed'));
      for (const c of conns) {
        c.deflate?.destroy();
        c.ws.terminate();
      }
      conns.clear();
      // Resolves once the listener and every server-side socket have really closed.
      const socketsClosed = [...sockets].map((s) => (s.destroyed && s.closed ? Promise.resolve() : new Promise<void>((r) => s.once('close', () => r()))));
      const wssClosed = new Promise<void>((r) => wss.close(() => r()));
      const serverClosed = new Promise<void>((r) => server.close(() => r()));
      server.closeAllConnections?.();
      for (const s of sockets) s.destroy();
      return Promise.all([...socketsClosed, wssClosed, serverClosed]).then(() => undefined);
    },
  };
  return double;
}
