/**
 * The Discord double (test/helpers/discord-double.ts) driven by the real discord.js Client: login
 * over the double's gateway, REST calls recorded and answered like Discord (commands, messages,
 * multipart files, nonce dedupe, edits, deletes, interactions, rate limits), gateway dispatches
 * reaching discord.js events, and a clean shutdown. A few raw-WebSocket checks cover protocol
 * paths discord.js does not take on its own (bad token, zlib-stream).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createInflate } from 'node:zlib';
import {
  ActionRowBuilder,
  ButtonBuilder,
  ButtonStyle,
  ChannelType,
  Client,
  DiscordAPIError,
  Events,
  GatewayIntentBits,
  Partials,
  Routes,
  type Interaction,
  type Message,
  type TextChannel,
} from 'discord.js';
import { WebSocket } from 'ws';
import { startDiscordDouble, type DiscordDouble } from '../helpers/discord-double.js';

const INTENTS = [GatewayIntentBits.Guilds, GatewayIntentBits.GuildMessages, GatewayIntentBits.DirectMessages, GatewayIntentBits.MessageContent];

/** Resolves with the first messageCreate the predicate accepts. */
function nextMessage(client: Client, pred: (m: Message) => boolean, timeoutMs = 5_000): Promise<Message> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      client.off(Events.MessageCreate, onMessage);
      reject(new Error(`no matching messageCreate within ${timeoutMs} ms`));
    }, timeoutMs);
    const onMessage = (m: Message) => {
      if (!pred(m)) return;
      clearTimeout(timer);
      client.off(Events.MessageCreate, onMessage);
      resolve(m);
    };
    client.on(Events.MessageCreate, onMessage);
  });
}

describe('Discord API double', () => {
  let discord: DiscordDouble;
  let client: Client;
  let loginMs = 0;
  let guildId = '';
  let generalId = '';
  let onInteraction: (i: Interaction) => Promise<void> = async () => {};
  const interactionErrors: unknown[] = [];
  const alice = { id: '310000000000000001', username: 'alice', globalName: 'Alice' };

  before(async () => {
    discord = await startDiscordDouble({
      heartbeatIntervalMs: 250,
      guilds: [{ name: 'Steward HQ', channels: [{ name: 'general' }, { name: 'ops' }, { name: 'Voice', type: 2 }] }],
    });
    guildId = discord.guilds[0]!.id;
    generalId = discord.guilds[0]!.channels[0]!.id;
    client = new Client({ intents: INTENTS, partials: [Partials.Channel], ...discord.clientOptions });
    client.on(Events.InteractionCreate, (i) => {
      onInteraction(i).catch((err: unknown) => interactionErrors.push(err));
    });
    const ready = new Promise<void>((resolve) => client.once(Events.ClientReady, () => resolve()));
    const t0 = Date.now();
    await client.login(discord.token);
    await ready;
    loginMs = Date.now() - t0;
  });

  after(async () => {
    await client?.destroy();
    await discord?.close();
  });

  const general = () => client.channels.cache.get(generalId) as TextChannel;

  it('logs in over the double: identify, READY, GUILD_CREATE, heartbeats', async () => {
    assert.ok(loginMs < 2_000, `login took ${loginMs} ms`);
    const identify = await discord.waitForIdentify();
    assert.equal(identify.token, discord.token);
    assert.equal(identify.intents, client.options.intents.bitfield);
    assert.equal(client.user?.id, discord.botUser.id);
    assert.equal(client.user?.bot, true);
    assert.equal(client.application?.id, discord.applicationId);
    const guild = client.guilds.cache.get(guildId);
    assert.equal(guild?.name, 'Steward HQ');
    assert.equal(guild?.channels.cache.get(generalId)?.type, ChannelType.GuildText);
    assert.equal(guild?.channels.cache.find((c) => c.name === 'Voice')?.type, ChannelType.GuildVoice);
    assert.equal(guild?.members.me?.id, discord.botUser.id);
    assert.ok(client.user!.displayAvatarURL().startsWith(discord.origin)); // rest.cdn points at the double
    assert.equal(discord.connections, 1);
    const gatewayCall = discord.callsTo('GET /gateway/bot')[0];
    assert.equal(gatewayCall?.headers.authorization, `Bot ${discord.token}`);
    await discord.waitForHeartbeats(2);
    assert.ok(client.ws.ping >= 0, `ping ${client.ws.ping}`);
  });

  it('rejects a wrong token with 401 (discord.js reports TokenInvalid)', async () => {
    const bad = new Client({ intents: INTENTS, ...discord.clientOptions });
    try {
      await assert.rejects(bad.login('not-the-token'), (err: Error & { code?: string }) => err.code === 'TokenInvalid');
    } finally {
      await bad.destroy();
    }
    const call = discord.callsTo('GET /gateway/bot').at(-1);
    assert.equal(call?.status, 401);
    assert.equal(call?.failed, true);
    assert.deepEqual(call?.response, { message: '401: Unauthorized', code: 0 });
    assert.equal(discord.connections, 1);
  });

  it('application.commands.set lands as a bulk overwrite (global and guild)', async () => {
    const set = await client.application!.commands.set([
      { name: 'ask', description: 'Ask the agent', options: [{ type: 3, name: 'prompt', description: 'What to ask', required: true }] },
      { name: 'status', description: 'Session status' },
    ]);
    const call = await discord.waitForCall('PUT /applications/:app/commands');
    assert.equal(call.params.app, discord.applicationId);
    assert.deepEqual((call.body as Array<{ name: string }>).map((c) => c.name), ['ask', 'status']);
    const stored = discord.commands();
    assert.deepEqual(stored.map((c) => c.name), ['ask', 'status']);
    assert.deepEqual([...set.values()].map((c) => c.id).sort(), stored.map((c) => c.id as string).sort());
    assert.equal(set.find((c) => c.name === 'ask')?.options[0]?.name, 'prompt');

    await client.application!.commands.set([{ name: 'reset', description: 'Reset the session' }], guildId);
    assert.deepEqual(discord.commands(guildId).map((c) => c.name), ['reset']);
    assert.equal(discord.callsTo('PUT /applications/:app/guilds/:guild/commands').length, 1);

    // Overwriting keeps the id of a command that stays.
    const again = await client.application!.commands.set([{ name: 'ask', description: 'Ask the agent (v2)' }]);
    assert.equal(again.first()?.id, stored.find((c) => c.name === 'ask')?.id);
    assert.deepEqual(discord.commands().map((c) => c.name), ['ask']);

    // Discord's validation: upper-case names are rejected.
    await assert.rejects(client.application!.commands.set([{ name: 'Bad', description: 'x' }]), (e: unknown) => e instanceof DiscordAPIError && e.code === 50035);
  });

  it('a guild message mentioning the bot reaches messageCreate', async () => {
    const got = nextMessage(client, (m) => m.author.id === alice.id && m.channelId === generalId);
    const sent = discord.messageCreate({ channelId: generalId, guildId, author: alice, content: 'hello agent', mentionsBot: true });
    const m = await got;
    assert.equal(m.id, sent.messageId);
    assert.equal(m.content, `<@${discord.botUser.id}> hello agent`);
    assert.equal(m.author.username, 'alice');
    assert.equal(m.author.bot, false);
    assert.equal(m.channel.type, ChannelType.GuildText);
    assert.equal(m.guildId, guildId);
    assert.ok(m.mentions.users.has(discord.botUser.id));
    assert.equal(m.member?.id, alice.id);

    // A plain message does not mention the bot.
    const plain = nextMessage(client, (x) => x.content === 'just chatting');
    discord.messageCreate({ channelId: generalId, guildId, author: alice, content: 'just chatting' });
    assert.equal((await plain).mentions.users.has(discord.botUser.id), false);
  });

  it('a DM reaches messageCreate (Channel partial) and the bot can answer in it', async () => {
    const got = nextMessage(client, (m) => m.channel.type === ChannelType.DM && m.author.id === alice.id);
    const sent = discord.messageCreate({ author: alice, content: 'psst, in private' });
    const m = await got;
    assert.equal(m.content, 'psst, in private');
    assert.equal(m.guildId, null);
    assert.equal(m.channelId, sent.channelId);
    assert.equal(m.channel.type, ChannelType.DM);
    assert.equal(discord.channel(sent.channelId)?.recipient?.id, alice.id);

    const reply = await m.channel.send('hi alice');
    assert.equal(reply.channelId, sent.channelId);
    const stored = discord.messages(sent.channelId).filter((x) => x.source === 'bot');
    assert.deepEqual(stored.map((x) => x.content), ['hi alice']);

    // user.send opens the DM over POST /users/@me/channels and reuses the channel.
    const user = await client.users.fetch(alice.id);
    const dm = await user.send('a second DM');
    assert.equal(dm.channelId, sent.channelId);
    assert.equal(discord.messages(sent.channelId).at(-1)?.content, 'a second DM');
  });

  it('channel.send with a row of buttons creates a message, echoed back like Discord', async () => {
    const row = new ActionRowBuilder<ButtonBuilder>().addComponents(
      new ButtonBuilder().setCustomId('approve').setLabel('Approve').setStyle(ButtonStyle.Success),
      new ButtonBuilder().setCustomId('deny').setLabel('Deny').setStyle(ButtonStyle.Danger),
    );
    const echo = nextMessage(client, (m) => m.author.id === discord.botUser.id && m.content === 'Run the tool?');
    const sent = await general().send({ content: 'Run the tool?', components: [row] });
    const stored = discord.message(sent.id);
    assert.equal(stored?.content, 'Run the tool?');
    assert.equal(stored?.channelId, generalId);
    assert.equal(stored?.author.id, discord.botUser.id);
    const buttons = (stored?.components[0] as { type: number; components: Array<{ custom_id: string; type: number }> }).components;
    assert.deepEqual(buttons.map((b) => b.custom_id), ['approve', 'deny']);
    assert.ok(discord.messages(generalId).some((m) => m.id === sent.id));
    assert.equal((await echo).id, sent.id);
    assert.equal(sent.components.length, 1);
  });

  it('nonce + enforceNonce twice yields one message', async () => {
    const before = discord.messages(generalId).length;
    const a = await general().send({ content: 'exactly once', nonce: 'turn-42-part-1', enforceNonce: true });
    const b = await general().send({ content: 'exactly once', nonce: 'turn-42-part-1', enforceNonce: true });
    assert.equal(a.id, b.id);
    assert.equal(discord.messages(generalId).length, before + 1);
    const posts = discord.callsTo('POST /channels/:id/messages').filter((c) => (c.body as { nonce?: string }).nonce === 'turn-42-part-1');
    assert.equal(posts.length, 2);
    assert.equal((posts[0]!.body as { enforce_nonce?: boolean }).enforce_nonce, true);
    // Without enforce_nonce the same nonce makes a new message.
    const c = await general().send({ content: 'exactly once', nonce: 'turn-42-part-1' });
    assert.notEqual(c.id, a.id);
  });

  it('send with files arrives as multipart with the bytes, served back from the CDN', async () => {
    const bytes = Buffer.from('hello from steward\n\u0000\u00ff binary tail', 'latin1');
    const sent = await general().send({ content: 'see attached', files: [{ attachment: bytes, name: 'report.txt' }] });
    const call = await discord.waitForCall('POST /channels/:id/messages', (c) => c.multipart && (c.body as { content?: string }).content === 'see attached');
    assert.equal(call.files.length, 1);
    assert.equal(call.files[0]?.name, 'report.txt');
    assert.equal(call.files[0]?.field, 'files[0]');
    assert.deepEqual(call.files[0]?.bytes, bytes);
    const stored = discord.message(sent.id);
    assert.equal(stored?.attachments[0]?.filename, 'report.txt');
    assert.equal(stored?.attachments[0]?.size, bytes.length);
    const att = sent.attachments.first();
    assert.equal(att?.name, 'report.txt');
    const res = await fetch(att!.url);
    assert.equal(res.status, 200);
    assert.deepEqual(Buffer.from(await res.arrayBuffer()), bytes);
  });

  it('an attachment on an incoming message can be fetched from its URL', async () => {
    const png = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 1, 2, 3]);
    const got = nextMessage(client, (m) => m.content === 'look at this' && m.attachments.size === 1);
    discord.messageCreate({ channelId: generalId, guildId, author: alice, content: 'look at this', attachments: [{ bytes: png, filename: 'shot.png', contentType: 'image/png' }] });
    const m = await got;
    const att = m.attachments.first()!;
    assert.equal(att.name, 'shot.png');
    assert.equal(att.contentType, 'image/png');
    assert.ok(att.url.startsWith(discord.origin));
    const res = await fetch(att.url);
    assert.equal(res.headers.get('content-type'), 'image/png');
    assert.deepEqual(Buffer.from(await res.arrayBuffer()), png);
  });

  it('edit and delete work; a second delete is 404 Unknown Message', async () => {
    const sent = await general().send('draft');
    const edited = await sent.edit('final answer');
    assert.equal(edited.content, 'final answer');
    const stored = discord.message(sent.id)!;
    assert.equal(stored.content, 'final answer');
    assert.equal(stored.edited, true);
    assert.deepEqual(stored.history, ['draft', 'final answer']);
    assert.equal(discord.callsTo('PATCH /channels/:id/messages/:mid').at(-1)?.params.message, sent.id);

    await sent.delete();
    assert.equal(discord.message(sent.id)?.deleted, true);
    await assert.rejects(client.rest.delete(Routes.channelMessage(generalId, sent.id)), (e: unknown) => {
      return e instanceof DiscordAPIError && e.status === 404 && e.code === 10008 && e.message === 'Unknown Message';
    });
    const lastDelete = discord.callsTo('DELETE /channels/:id/messages/:mid').at(-1);
    assert.equal(lastDelete?.status, 404);
  });

  it('enforces the 2000-character limit and rejects empty messages like Discord', async () => {
    await assert.rejects(general().send('x'.repeat(2001)), (e: unknown) => {
      return e instanceof DiscordAPIError && e.status === 400 && e.code === 50035 && /BASE_TYPE_MAX_LENGTH/.test(e.message);
    });
    await general().send('y'.repeat(2000));
    await assert.rejects(client.rest.post(Routes.channelMessages(generalId), { body: { content: '' } }), (e: unknown) => {
      return e instanceof DiscordAPIError && e.code === 50006 && e.message === 'Cannot send an empty message';
    });
    await assert.rejects(client.rest.post(Routes.channelMessages('999999999999999999'), { body: { content: 'x' } }), (e: unknown) => {
      return e instanceof DiscordAPIError && e.status === 404 && e.code === 10003;
    });
  });

  it('a slash command: deferReply then editReply("done") records type 5 and the @original content', async () => {
    let prompt: string | null = null;
    onInteraction = async (i) => {
      if (!i.isChatInputCommand()) return;
      prompt = i.options.getString('prompt');
      await i.deferReply();
      await i.editReply('done');
    };
    const { interactionId, commandId } = discord.slashCommand({ name: 'ask', options: { prompt: 'what is up' }, channelId: generalId, guildId, user: alice });
    const view = await discord.waitForInteractionResponse(interactionId, (v) => v.content === 'done');
    assert.equal(prompt, 'what is up');
    assert.equal(view.type, 5);
    assert.equal(view.kind, 'command');
    assert.deepEqual(view.callbacks.map((c) => c.type), [5]);
    assert.equal(view.original?.content, 'done');
    assert.equal(view.original?.flags, 0); // the "thinking..." flag is gone after the edit
    assert.equal(view.original?.interactionId, interactionId);
    assert.equal(commandId, discord.commands().find((c) => c.name === 'ask')?.id);
    const callback = discord.callsTo('POST /interactions/:id/:token/callback').at(-1);
    assert.equal(callback?.status, 204);
    assert.equal(callback?.headers.authorization, undefined); // interaction routes go without the bot token
    assert.ok(discord.callsTo('PATCH /webhooks/:app/:token/messages/@original').length >= 1);
    assert.deepEqual(interactionErrors, []);
  });

  it('a slash command in a DM, reply + followUp, and "already acknowledged"', async () => {
    let second: unknown;
    let rawSecond: unknown;
    const handled = new Promise<void>((resolve) => {
      onInteraction = async (i) => {
        if (!i.isChatInputCommand()) return;
        await i.reply({ content: 'first' });
        await i.followUp('more');
        second = await i.reply('again').catch((e: unknown) => e);
        rawSecond = await client.rest
          .post(Routes.interactionCallback(i.id, i.token), { body: { type: 4, data: { content: 'again' } }, auth: false })
          .catch((e: unknown) => e);
        resolve();
      };
    });
    const { interactionId, channelId } = discord.slashCommand({ name: 'status', channelId: discord.dmChannel(alice).id, user: alice });
    const view = await discord.waitForInteractionResponse(interactionId, (v) => v.followUps.length === 1);
    assert.equal(view.type, 4);
    assert.equal(view.content, 'first');
    assert.equal(view.followUps[0]?.content, 'more');
    assert.equal(view.original?.channelId, channelId);
    // discord.js refuses a second reply itself; the raw callback gets Discord's 40060.
    await handled;
    assert.ok(second instanceof Error && (second as Error & { code?: string }).code === 'InteractionAlreadyReplied');
    assert.ok(rawSecond instanceof DiscordAPIError && rawSecond.code === 40060, String(rawSecond));
    const raw = await client.rest
      .post(Routes.interactionCallback(interactionId, 'wrong-token'), { body: { type: 4, data: { content: 'x' } }, auth: false })
      .catch((e: unknown) => e);
    assert.ok(raw instanceof DiscordAPIError && raw.code === 10062);
  });

  it('a button click: update({ content, components: [] }) records type 7 on the message', async () => {
    const row = new ActionRowBuilder<ButtonBuilder>().addComponents(new ButtonBuilder().setCustomId('approve').setLabel('Approve').setStyle(ButtonStyle.Primary));
    const sent = await general().send({ content: 'Approve the plan?', components: [row] });
    let customId = '';
    onInteraction = async (i) => {
      if (!i.isButton()) return;
      customId = i.customId;
      assert.equal(i.message.id, sent.id);
      await i.update({ content: 'Approved by alice', components: [] });
    };
    const click = discord.buttonClick({ customId: 'approve', message: sent.id, user: alice });
    const view = await discord.waitForInteractionResponse(click.interactionId);
    assert.equal(customId, 'approve');
    assert.equal(view.type, 7);
    assert.equal(view.kind, 'component');
    assert.equal(view.original?.id, sent.id);
    assert.equal(view.content, 'Approved by alice');
    assert.deepEqual(view.components, []);
    assert.equal(discord.message(sent.id)?.content, 'Approved by alice');
    assert.equal(discord.message(sent.id)?.edited, true);
    assert.deepEqual(interactionErrors, []);
  });

  it('a scripted 429 is waited out by @discordjs/rest and retried', async () => {
    discord.clearCalls();
    discord.failNext('POST /channels/:id/messages', { retryAfter: 1 });
    const sent = await general().send('after the rate limit');
    const posts = discord.callsTo('POST /channels/:id/messages');
    assert.equal(posts.length, 2);
    assert.equal(posts[0]!.status, 429);
    assert.equal(posts[0]!.failed, true);
    assert.deepEqual(posts[0]!.response, { message: 'You are being rate limited.', retry_after: 1, global: false });
    assert.equal(posts[1]!.status, 200);
    const waited = posts[1]!.at - posts[0]!.at;
    assert.ok(waited >= 1_000, `retried after ${waited} ms`);
    assert.equal(discord.message(sent.id)?.content, 'after the rate limit');
    assert.equal(discord.messages(generalId).filter((m) => m.content === 'after the rate limit').length, 1);
  });

  it('5xx answers are retried by @discordjs/rest', async () => {
    discord.clearCalls();
    discord.failNext('POST /channels/:id/messages', { status: 503 });
    discord.failNext('POST /channels/:id/messages', { status: 500 });
    await general().send('through the outage');
    assert.deepEqual(discord.callsTo('POST /channels/:id/messages').map((c) => c.status), [503, 500, 200]);
  });

  it('replies carry message_reference + referenced_message; unknown routes are 404 and recorded', async () => {
    const botMsg = await general().send('question for you');
    const got = nextMessage(client, (m) => m.content === 'my answer');
    discord.messageCreate({ channelId: generalId, guildId, author: alice, content: 'my answer', replyToMessageId: botMsg.id });
    const m = await got;
    assert.equal(m.reference?.messageId, botMsg.id);
    assert.ok(m.mentions.users.has(discord.botUser.id)); // a reply pings the replied-to author by default
    assert.equal(m.mentions.repliedUser?.id, discord.botUser.id);
    const fetched = await m.fetchReference();
    assert.equal(fetched.content, 'question for you');

    const reply = await m.reply('thanks');
    const stored = discord.message(reply.id);
    assert.equal(stored?.messageReference?.message_id, m.id);

    await assert.rejects(client.rest.get('/guilds/123456789012345678/nope'), (e: unknown) => e instanceof DiscordAPIError && e.status === 404);
    assert.equal(discord.callsTo('GET /guilds/:id/nope').length, 1);
  });

  it('resumes after the gateway drops the connection and replays missed events', async () => {
    discord.disconnectGateway(4000);
    const got = nextMessage(client, (m) => m.content === 'sent while you were away', 5_000);
    discord.messageCreate({ channelId: generalId, guildId, author: alice, content: 'sent while you were away' });
    await got;
    assert.equal(discord.identifies.length, 1); // RESUME, not a new IDENTIFY
    assert.equal(discord.connections, 1);
  });

  it('raw gateway: a bad token closes with 4004; zlib-stream is spoken', async () => {
    const closeCode = await new Promise<number>((resolve, reject) => {
      const ws = new WebSocket(`${discord.gatewayUrl}?v=10&encoding=json`);
      ws.on('message', (data) => {
        const p = JSON.parse(data.toString()) as { op: number };
        if (p.op === 10) ws.send(JSON.stringify({ op: 2, d: { token: 'nope', intents: 0, properties: {} } }));
      });
      ws.on('close', (code) => resolve(code));
      ws.on('error', reject);
    });
    assert.equal(closeCode, 4004);

    const events = await new Promise<string[]>((resolve, reject) => {
      const ws = new WebSocket(`${discord.gatewayUrl}?v=10&encoding=json&compress=zlib-stream`);
      const inflate = createInflate();
      const seen: string[] = [];
      let text = '';
      inflate.on('data', (chunk: Buffer) => {
        text += chunk.toString('utf8');
        try {
          const p = JSON.parse(text) as { op: number; t: string | null };
          text = '';
          seen.push(p.t ?? `op${p.op}`);
          if (p.op === 10) ws.send(JSON.stringify({ op: 2, d: { token: discord.token, intents: 1, properties: {} } }));
          if (p.t === 'GUILD_CREATE') {
            ws.close(1000);
            resolve(seen);
          }
        } catch {
          // partial JSON: wait for more inflated bytes
        }
      });
      ws.on('message', (data: Buffer) => inflate.write(data));
      ws.on('error', reject);
    });
    assert.deepEqual(events, ['op10', 'READY', 'GUILD_CREATE']);
  });

  it('client.destroy() and close() leave no open handles', async () => {
    const t0 = Date.now();
    await client.destroy();
    const deadline = Date.now() + 2_000;
    while (discord.connections > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    assert.equal(discord.connections, 0);
    await discord.close();
    assert.ok(Date.now() - t0 < 1_000, `shutdown took ${Date.now() - t0} ms`);
    // Client-side sockets (undici's keep-alive pool, fetch) see the server's close a moment later.
    const open = () => process.getActiveResourcesInfo().filter((r) => r === 'TCPSocketWrap' || r === 'TCPServerWrap');
    const until = Date.now() + 1_000;
    while (open().length > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
    assert.deepEqual(open(), []);
    await assert.rejects(discord.waitForCall('GET /never'), /closed/);
  });
});
