/**
 * The Discord adapter (adapters/discord) against the Discord double (test/helpers/discord-double.ts),
 * through the real discord.js and @discordjs/rest code paths:
 *   a. the sender alone: splitting, rate limits, nonce dedupe, retried deliveries, buttons, files,
 *      error mapping, allowed_mentions;
 *   b. the gateway adapter with a recording fake ingress: normalisation, attachments, slash
 *      commands, buttons, command registration;
 *   c. end to end with the real stack (Temporal dev server, SQLite, worker, ingress, scripted
 *      model server): DM turns with the progress panel, fail-closed guild channels, pairing
 *      answers, long replies.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { bindChat, createIdentity, approvalButtons } from '../../domain/governance.js';
import { deliverOnce, DeliveryError, type OutboundMessage, type OutboundPart } from '../../domain/outbox.js';
import {
  attachmentFetcher,
  commandText,
  createDiscordAdapter,
  createDiscordSender,
  discordAccountFromToken,
  discordNonce,
  type DiscordAdapter,
  type DiscordSender,
} from '../../adapters/discord/index.js';
import type { ActionResult, HandleOptions, InboundAction, Ingress, IngressResult } from '../../services/chat/intake.js';
import { renderPlain } from '../../adapters/render/markdown.js';
import { COMMANDS } from '../../common/commands.js';
import type { ConversationKey } from '../../common/ids.js';
import type { InboundMessage } from '../../common/schemas.js';
import { testDatabases, type TestDatabase } from '../helpers/db.js';
import { startDiscordDouble, type DiscordDouble, type RecordedCall, type UserInput } from '../helpers/discord-double.js';
import { lastUserText, startModelServer, type ModelServer } from '../helpers/model-server.js';
import { waitFor, withHarness, type Harness } from '../helpers/steward.js';
import { createTestEnvironment } from '../helpers/temporal.js';

// ---------------------------------------------------------------------------------------------
// Shared helpers

let idCounter = 0;
/** A fresh snowflake-like id (18 digits), unique in this process. */
const newId = (prefix = '33') => `${prefix}${String(Date.now()).slice(-9)}${String(++idCounter).padStart(7, '0')}`;

/** A token shaped like Discord's: base64(bot user id).timestamp.hmac. */
function botToken(botId: string): string {
  return `${Buffer.from(botId).toString('base64url')}.${randomBytes(4).toString('base64url')}.${randomBytes(20).toString('base64url')}`;
}

function newBot() {
  const id = newId('41');
  return { id, token: botToken(id) };
}

type Body = Record<string, unknown> & { content?: string; nonce?: string; enforce_nonce?: boolean; allowed_mentions?: unknown; components?: unknown; attachments?: unknown };
const bodyOf = (c: RecordedCall): Body => (c.body ?? {}) as Body;
const postsTo = (d: DiscordDouble, channelId: string) => d.callsTo('POST /channels/:id/messages').filter((c) => c.params.channel === channelId);
const okPostsTo = (d: DiscordDouble, channelId: string) => postsTo(d, channelId).filter((c) => c.status === 200);
const responseId = (c: RecordedCall | undefined): string => ((c?.response ?? {}) as { id?: string }).id ?? '';

function part(text: string, key: string, extra: Partial<OutboundPart> = {}): OutboundPart {
  return { index: 0, count: 1, text, files: [], idempotencyKey: key, ...extra };
}

const SENTENCE = 'The quick brown fox jumps over the lazy dog. ';
/** A long Markdown reply: numbered paragraphs (and optionally a code block after the third). */
function longReply(paragraphCount: number, repeat: number, withCode: boolean) {
  const paragraphs = Array.from({ length: paragraphCount }, (_, i) => `Paragraph ${i + 1}. ${SENTENCE.repeat(repeat).trim()}`);
  const code = '```ts\n' + Array.from({ length: 30 }, (_, i) => `const value${i} = compute(${i});`).join('\n') + '\n```';
  const blocks = withCode ? [...paragraphs.slice(0, 3), code, ...paragraphs.slice(3)] : paragraphs;
  return { text: blocks.join('\n\n'), paragraphs, code, blocks };
}

/** Assert that `messages` hold `blocks` whole, each exactly once, in order, cut only between blocks. */
function assertSplitOnBlocks(messages: string[], blocks: string[]) {
  for (const m of messages) assert.ok([...m].length <= 2000, `a message of ${m.length} characters`);
  const rebuilt = messages.map((m) => m.split('\n\n'));
  // A code block has no blank lines, so splitting messages on blank lines gives the blocks back.
  assert.deepEqual(rebuilt.flat(), blocks);
  for (const m of messages) assert.equal((m.match(/```/g) ?? []).length % 2, 0, 'a code fence is never cut');
}

// ---------------------------------------------------------------------------------------------
// a. The sender alone

describe('Discord sender (REST only)', () => {
  const bot = newBot();
  let double: DiscordDouble;
  let sender: DiscordSender;
  let dbh: TestDatabase;
  const channelNames = ['split', 'ratelimit', 'retry', 'nonce', 'buttons', 'files', 'errors', 'longwait', 'plain', 'outage'];
  const ch = (name: string) => double.guilds[0]!.channels.find((c) => c.name === name)!.id;
  const conv = (chatId: string): ConversationKey => ({ platform: 'discord', account: bot.id, chatId });

  before(async () => {
    double = await startDiscordDouble({ token: bot.token, botUser: { id: bot.id, username: 'steward' }, applicationId: bot.id, guilds: [{ name: 'Sender', channels: channelNames.map((name) => ({ name })) }] });
    sender = createDiscordSender({ token: bot.token, api: double.apiBase });
    dbh = await testDatabases()[0]!.create();
  });
  after(async () => {
    await double?.close();
    await dbh?.cleanup();
  });

  const outbound = (key: string, chatId: string, text: string, extra: Partial<OutboundMessage> = {}): OutboundMessage => ({
    key,
    sessionId: `session:discord:${bot.id}:${chatId}`,
    conversation: conv(chatId),
    kind: 'reply',
    text,
    ...extra,
  });

  it('reads the bot user id from the token', () => {
    assert.equal(discordAccountFromToken(bot.token), bot.id);
    assert.equal(discordAccountFromToken(`Bot ${bot.token}`), bot.id);
    // A real token's first segment is standard base64 of the id.
    assert.equal(discordAccountFromToken(`${Buffer.from('123456789012345678').toString('base64')}.x.y`), '123456789012345678');
    assert.throws(() => discordAccountFromToken('double.abcdef'), /bot user id/);
  });

  it('a long reply goes out as <= 2000-character messages, in order, cut between paragraphs and code blocks', async () => {
    const { text, blocks } = longReply(7, 13, true);
    assert.ok(text.length > 5_000);
    const out = await deliverOnce(dbh.db, { discord: sender }, outbound(`split-${randomUUID()}`, ch('split'), text));
    assert.equal(out.sent, true);
    const posts = postsTo(double, ch('split'));
    assert.ok(posts.length >= 3, `${posts.length} messages`);
    assert.deepEqual(posts.map((c) => c.status), posts.map(() => 200));
    assert.deepEqual(out.externalIds, posts.map(responseId));
    const stored = double.messages(ch('split')).map((m) => m.content);
    assert.deepEqual(stored, posts.map((c) => bodyOf(c).content));
    assertSplitOnBlocks(stored, blocks);
  });

  it('a 429 with retry_after 1 is waited out inside @discordjs/rest and retried once', async () => {
    const chatId = ch('ratelimit');
    double.failNext('POST /channels/:id/messages', { retryAfter: 1, match: (c) => c.params.channel === chatId });
    const id = await sender.send(conv(chatId), part('after the rate limit', `rl-${randomUUID()}`));
    const posts = postsTo(double, chatId);
    assert.deepEqual(posts.map((c) => c.status), [429, 200]);
    const waited = posts[1]!.at - posts[0]!.at;
    assert.ok(waited >= 990, `retried after ${waited} ms`);
    assert.equal(responseId(posts[1]), id);
    assert.deepEqual(double.messages(chatId).map((m) => m.content), ['after the rate limit']);
  });

  it('a retried delivery never posts a part twice (the first attempt fails after part 1)', async () => {
    const chatId = ch('retry');
    const key = `retry-${randomUUID()}`;
    const text = `First part. ${SENTENCE.repeat(33).trim()}\n\nSecond part. ${SENTENCE.repeat(33).trim()}`;
    const retries = sender.rest.options.retries;
    // Every attempt at part 2 fails with 500 until @discordjs/rest gives up.
    double.failNext('POST /channels/:id/messages', { status: 500, times: retries + 1, match: (c) => bodyOf(c).nonce === discordNonce(`${key}#1`) });
    const first = await deliverOnce(dbh.db, { discord: sender }, outbound(key, chatId, text)).then(
      () => undefined,
      (err: unknown) => err,
    );
    assert.ok(first instanceof DeliveryError, String(first));
    assert.equal(first.permanent, false);
    assert.equal(first.status, 500);
    assert.deepEqual(double.messages(chatId).map((m) => m.content.slice(0, 12)), ['First part. ']);

    const second = await deliverOnce(dbh.db, { discord: sender }, outbound(key, chatId, text));
    assert.equal(second.sent, true);
    const posts = postsTo(double, chatId);
    const byNonce = (n: number) => posts.filter((c) => bodyOf(c).nonce === discordNonce(`${key}#${n}`)).map((c) => c.status);
    assert.deepEqual(byNonce(0), [200]);
    assert.deepEqual(byNonce(1), [...Array.from({ length: retries + 1 }, () => 500), 200]);
    assert.deepEqual(double.messages(chatId).map((m) => m.content.slice(0, 13)), ['First part. T', 'Second part. ']);
    assert.deepEqual(second.externalIds, double.messages(chatId).map((m) => m.id));
    // Delivered: a third call sends nothing.
    const third = await deliverOnce(dbh.db, { discord: sender }, outbound(key, chatId, text));
    assert.equal(third.sent, false);
    assert.equal(postsTo(double, chatId).length, posts.length);
  });

  it('nonce + enforce_nonce: the same part sent twice is one message (also across a lost outbox row)', async () => {
    const chatId = ch('nonce');
    const key = `nonce-${randomUUID()}`;
    const a = await sender.send(conv(chatId), part('exactly once', key));
    const b = await sender.send(conv(chatId), part('exactly once', key));
    assert.equal(a, b);
    const posts = postsTo(double, chatId);
    assert.equal(posts.length, 2);
    for (const c of posts) {
      assert.equal(bodyOf(c).nonce, discordNonce(key));
      assert.equal(bodyOf(c).enforce_nonce, true);
      assert.ok(bodyOf(c).nonce!.length <= 25);
    }
    assert.equal(double.messages(chatId).length, 1);

    // A worker that crashed after Discord took part 1 but before the outbox recorded it: the
    // outbox sends part 1 again, and Discord answers with the message it already made.
    const key2 = `lost-${randomUUID()}`;
    const ghost = await sender.send(conv(chatId), part('sent before the crash', `${key2}#0`));
    const out = await deliverOnce(dbh.db, { discord: sender }, outbound(key2, chatId, 'sent before the crash'));
    assert.deepEqual(out.externalIds, [ghost]);
    assert.deepEqual(double.messages(chatId).map((m) => m.content), ['exactly once', 'sent before the crash']);
  });

  it('buttons become action rows (styles, custom ids, at most 5 per row); edit and remove', async () => {
    const chatId = ch('buttons');
    const extra = Array.from({ length: 7 }, (_, i) => ({ id: `opt:${i}`, label: `Option ${i}` }));
    const id = await sender.send(conv(chatId), part('Run the tool?', `btn-${randomUUID()}`, { buttons: [...approvalButtons('abc234'), extra] }));
    const post = postsTo(double, chatId)[0]!;
    assert.deepEqual(bodyOf(post).components, [
      {
        type: 1,
        components: [
          { type: 2, style: 1, label: 'Approve', custom_id: 'apr:abc234:y' },
          { type: 2, style: 4, label: 'Deny', custom_id: 'apr:abc234:n' },
        ],
      },
      { type: 1, components: extra.slice(0, 5).map((b) => ({ type: 2, style: 2, label: b.label, custom_id: b.id })) },
      { type: 1, components: extra.slice(5).map((b) => ({ type: 2, style: 2, label: b.label, custom_id: b.id })) },
    ]);
    assert.equal(double.message(id)?.components.length, 3);

    await sender.edit(conv(chatId), id, 'Approved by Alice', null);
    await sender.edit(conv(chatId), id, 'Approved by **Alice**');
    const patches = double.callsTo('PATCH /channels/:id/messages/:mid').filter((c) => c.params.message === id);
    assert.deepEqual(patches.map(bodyOf), [
      { content: 'Approved by Alice', allowed_mentions: { parse: [] }, components: [] },
      { content: 'Approved by **Alice**', allowed_mentions: { parse: [] } },
    ]);
    assert.deepEqual(double.message(id)?.components, []);
    assert.deepEqual(double.message(id)?.history, ['Run the tool?', 'Approved by Alice', 'Approved by **Alice**']);

    await sender.remove(conv(chatId), id);
    assert.deepEqual(
      double.callsTo('DELETE /channels/:id/messages/:mid').filter((c) => c.params.message === id).map((c) => c.status),
      [204],
    );
    assert.equal(double.message(id)?.deleted, true);
  });

  it('files go out as multipart attachments', async () => {
    const chatId = ch('files');
    const report = Buffer.from('line one\nline two\n');
    const png = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 9, 8, 7]);
    const file = (name: string, mediaType: string, data: Buffer) => ({ hash: '0'.repeat(64), name, mediaType, size: data.length, data });
    const id = await sender.send(conv(chatId), part('see attached', `files-${randomUUID()}`, { files: [file('report.txt', 'text/plain', report), file('chart.png', 'image/png', png)] }));
    const post = postsTo(double, chatId)[0]!;
    assert.equal(post.multipart, true);
    assert.deepEqual(
      post.files.map((f) => ({ field: f.field, name: f.name, type: f.type, bytes: f.bytes })),
      [
        { field: 'files[0]', name: 'report.txt', type: 'text/plain', bytes: report },
        { field: 'files[1]', name: 'chart.png', type: 'image/png', bytes: png },
      ],
    );
    assert.deepEqual(bodyOf(post).attachments, [
      { id: 0, filename: 'report.txt' },
      { id: 1, filename: 'chart.png' },
    ]);
    assert.equal(bodyOf(post).content, 'see attached');
    assert.deepEqual(double.message(id)?.attachments.map((a) => [a.filename, a.size]), [
      ['report.txt', report.length],
      ['chart.png', png.length],
    ]);
  });

  it('content Discord rejects is sent once more as plain text', async () => {
    const chatId = ch('plain');
    const text = 'A **bold** claim with `code`';
    double.failNext('POST /channels/:id/messages', {
      status: 400,
      body: { code: 50035, message: 'Invalid Form Body', errors: { content: { _errors: [{ code: 'BASE_TYPE_BAD_CONTENT', message: 'Bad content.' }] } } },
      match: (c) => c.params.channel === chatId,
    });
    const id = await sender.send(conv(chatId), part(text, `plain-${randomUUID()}`));
    const posts = postsTo(double, chatId);
    assert.deepEqual(posts.map((c) => [c.status, bodyOf(c).content]), [
      [400, text],
      [200, renderPlain(text)],
    ]);
    assert.equal(double.message(id)?.content, 'A bold claim with code');
  });

  it('maps failures to DeliveryError: permanent, transient, rate limited', async () => {
    const chatId = ch('errors');
    const attempt = (p: Promise<unknown>) =>
      p.then(
        () => assert.fail('expected a DeliveryError'),
        (err: unknown) => {
          assert.ok(err instanceof DeliveryError, String(err));
          return err;
        },
      );
    // Unknown Channel (10003)
    const unknown = await attempt(sender.send(conv('999999999999999999'), part('x', `e1-${randomUUID()}`)));
    assert.deepEqual([unknown.permanent, unknown.status, unknown.retryAfterMs], [true, 404, undefined]);
    // Unknown Message (10008): deleting twice
    const id = await sender.send(conv(chatId), part('short-lived', `e2-${randomUUID()}`));
    await sender.remove(conv(chatId), id);
    const gone = await attempt(sender.remove(conv(chatId), id));
    assert.deepEqual([gone.permanent, gone.status], [true, 404]);
    const editGone = await attempt(sender.edit(conv(chatId), id, 'too late'));
    assert.equal(editGone.permanent, true);
    // Missing Access / Missing Permissions / Cannot send messages to this user
    for (const [code, message] of [
      [50001, 'Missing Access'],
      [50013, 'Missing Permissions'],
      [50007, 'Cannot send messages to this user'],
    ] as const) {
      double.failNext('POST /channels/:id/messages', { status: 403, body: { code, message }, match: (c) => c.params.channel === chatId });
      const err = await attempt(sender.send(conv(chatId), part('x', `e-${code}-${randomUUID()}`)));
      assert.deepEqual([err.permanent, err.status], [true, 403], `code ${code}`);
      assert.match(err.message, new RegExp(message));
    }
    // 5xx until @discordjs/rest gives up: transient
    const outage = ch('outage');
    double.failNext('POST /channels/:id/messages', { status: 503, times: sender.rest.options.retries + 1, match: (c) => c.params.channel === outage });
    const down = await attempt(sender.send(conv(outage), part('x', `e5-${randomUUID()}`)));
    assert.deepEqual([down.permanent, down.status, down.retryAfterMs], [false, 503, undefined]);
    assert.equal(postsTo(double, outage).length, sender.rest.options.retries + 1);
    // A long rate limit is not slept on: it comes back at once with retryAfterMs.
    const longwait = ch('longwait');
    double.failNext('POST /channels/:id/messages', { retryAfter: 30, match: (c) => c.params.channel === longwait });
    const t0 = Date.now();
    const limited = await attempt(sender.send(conv(longwait), part('x', `e6-${randomUUID()}`)));
    assert.ok(Date.now() - t0 < 2_000, `took ${Date.now() - t0} ms`);
    assert.equal(limited.permanent, false);
    assert.ok(limited.retryAfterMs !== undefined && limited.retryAfterMs >= 30_000 && limited.retryAfterMs <= 31_000, String(limited.retryAfterMs));
    assert.equal(postsTo(double, longwait).length, 1);
    assert.equal(double.messages(longwait).length, 0);
  });

  it('allowed_mentions is empty on every message and edit', async () => {
    const chatId = ch('nonce');
    const id = await sender.send(conv(chatId), part('@everyone look, <@123456789012345678> and <@&223456789012345678>', `m-${randomUUID()}`));
    await sender.edit(conv(chatId), id, '@here still nobody is pinged');
    const calls = [...double.callsTo('POST /channels/:id/messages'), ...double.callsTo('PATCH /channels/:id/messages/:mid')];
    assert.ok(calls.length > 20);
    for (const c of calls) assert.deepEqual(bodyOf(c).allowed_mentions, { parse: [] }, `${c.route} #${c.seq}`);
  });
});

// ---------------------------------------------------------------------------------------------
// b. The gateway adapter with a recording fake ingress

interface Handled {
  msg: InboundMessage;
  opts: HandleOptions | undefined;
}

function fakeIngress() {
  const handled: Handled[] = [];
  const actions: InboundAction[] = [];
  const state: { respond: (msg: InboundMessage) => Omit<IngressResult, 'workflowId'>; act: (a: InboundAction) => ActionResult } = {
    respond: (msg) => (msg.text.startsWith('/') ? { kind: 'command', duplicate: false } : { kind: 'message', duplicate: false }),
    act: () => ({ reply: 'ok', applied: true }),
  };
  const notHere = async (): Promise<never> => {
    throw new Error('not used by the Discord adapter');
  };
  const ingress: Ingress = {
    async handle(msg, opts) {
      handled.push({ msg, opts });
      return { workflowId: `session:discord:${msg.account}:${msg.chatId}`, ...state.respond(msg) };
    },
    async handleAction(a) {
      actions.push(a);
      return state.act(a);
    },
    transcript: async () => [],
    status: notHere,
    decidePairing: notHere,
    decideApproval: notHere,
  };
  return {
    ingress,
    handled,
    actions,
    state,
    waitHandled: (pred: (h: Handled) => boolean, what = 'a handled message') => waitFor(() => handled.find(pred), what, 5_000),
  };
}

describe('Discord adapter (discord.js gateway, fake ingress)', () => {
  const bot = newBot();
  let double: DiscordDouble;
  let adapter: DiscordAdapter;
  let sender: DiscordSender;
  const fake = fakeIngress();
  let guildId = '';
  let general = '';
  const alice: UserInput = { id: newId('31'), username: 'alice', globalName: 'Alice' };
  const bob: UserInput = { id: newId('31'), username: 'bob' };

  before(async () => {
    double = await startDiscordDouble({ token: bot.token, botUser: { id: bot.id, username: 'steward' }, applicationId: bot.id, guilds: [{ name: 'Steward HQ', channels: [{ name: 'general' }] }] });
    guildId = double.guilds[0]!.id;
    general = double.guilds[0]!.channels[0]!.id;
    sender = createDiscordSender({ token: bot.token, api: double.apiBase });
    adapter = createDiscordAdapter({
      token: bot.token,
      clientOptions: double.clientOptions,
      ingress: fake.ingress,
      sender,
      guildId,
      attachmentHosts: [new URL(double.origin).host],
    });
    await adapter.start();
  });
  after(async () => {
    await adapter?.stop();
    await double?.close();
  });

  it('logs in with the intents it needs and registers every catalog command in the guild at start', async () => {
    assert.equal(adapter.account, bot.id);
    assert.equal(adapter.client.user?.id, bot.id);
    const intents = double.identifies[0]!.intents;
    for (const bit of [1 << 0, 1 << 9, 1 << 12, 1 << 15]) assert.ok(intents & bit, `intent ${bit}`);
    const puts = double.callsTo('PUT /applications/:app/guilds/:guild/commands');
    assert.equal(puts.length, 1);
    assert.equal(puts[0]!.params.guild, guildId);
    assert.equal(puts[0]!.params.app, double.applicationId);
    assert.equal(double.callsTo('PUT /applications/:app/commands').length, 0);
    const body = puts[0]!.body as Array<{ name: string; description: string; type: number; default_member_permissions: unknown; contexts?: unknown; options: Array<{ type: number; name: string; required: boolean; choices?: Array<{ name: string; value: string }> }> }>;
    assert.deepEqual(body.map((c) => c.name), COMMANDS.map((c) => c.name));
    for (const [i, c] of COMMANDS.entries()) {
      const reg = body[i]!;
      assert.equal(reg.type, 1);
      assert.equal(reg.description, c.description);
      assert.ok(reg.description.length <= 100);
      assert.equal(reg.default_member_permissions, null);
      assert.equal(reg.contexts, undefined);
      const expected = [...c.args.filter((a) => a.required), ...c.args.filter((a) => !a.required)];
      assert.deepEqual(
        reg.options.map((o) => [o.type, o.name, o.required, o.choices?.map((x) => x.value)]),
        expected.map((a) => [3, a.name, a.required, a.choices ? [...a.choices] : undefined]),
        c.name,
      );
    }
    const byName = new Map(body.map((c) => [c.name, c]));
    assert.deepEqual(byName.get('think')?.options[0]?.choices, ['off', 'low', 'medium', 'high'].map((v) => ({ name: v, value: v })));
    assert.deepEqual(byName.get('approve')?.options.map((o) => o.name), ['code', 'role']);
    assert.deepEqual(byName.get('bind')?.options.map((o) => [o.name, o.choices?.map((x) => x.value)]), [
      ['mode', ['mention', 'all']],
      ['name', undefined],
    ]);
    assert.deepEqual(double.commands(guildId).map((c) => c.name), COMMANDS.map((c) => c.name));
  });

  it('a DM is normalised into an InboundMessage', async () => {
    const sent = double.messageCreate({ author: alice, content: '  hello in private  ' });
    const h = await fake.waitHandled((x) => x.msg.id === sent.messageId);
    const { at, ...rest } = h.msg;
    assert.deepEqual(rest, {
      id: sent.messageId,
      platform: 'discord',
      account: bot.id,
      chatId: sent.channelId,
      user: 'Alice',
      userId: alice.id,
      chatType: 'dm',
      addressed: true,
      text: 'hello in private',
    });
    assert.ok(!Number.isNaN(Date.parse(at)));
    assert.deepEqual(h.opts, {});
    assert.equal(double.channel(sent.channelId)?.recipient?.id, alice.id);
  });

  it('a guild message that mentions the bot is addressed, with the mention removed', async () => {
    const sent = double.messageCreate({ channelId: general, guildId, author: bob, content: `what is up, <@${bot.id}> friend?` });
    const h = await fake.waitHandled((x) => x.msg.id === sent.messageId);
    const { at: _at, ...rest } = h.msg;
    assert.deepEqual(rest, {
      id: sent.messageId,
      platform: 'discord',
      account: bot.id,
      chatId: general,
      user: 'bob', // no global name: the username
      userId: bob.id,
      chatType: 'group',
      addressed: true,
      text: 'what is up, friend?',
    });
    const leading = double.messageCreate({ channelId: general, guildId, author: bob, content: 'summarise the thread', mentionsBot: true });
    const h2 = await fake.waitHandled((x) => x.msg.id === leading.messageId);
    assert.equal(h2.msg.text, 'summarise the thread');
    assert.equal(h2.msg.addressed, true);
  });

  it('a guild message without a mention is passed on with addressed: false; a reply to the bot is addressed', async () => {
    const plain = double.messageCreate({ channelId: general, guildId, author: bob, content: 'just chatting' });
    const h = await fake.waitHandled((x) => x.msg.id === plain.messageId);
    assert.equal(h.msg.addressed, false);
    assert.equal(h.msg.chatType, 'group');
    assert.equal(h.msg.text, 'just chatting');

    const botMessage = await sender.send({ platform: 'discord', account: bot.id, chatId: general }, part('a question from the bot', `q-${randomUUID()}`));
    const reply = double.messageCreate({ channelId: general, guildId, author: bob, content: 'my answer', replyToMessageId: botMessage, replyMention: false });
    const hr = await fake.waitHandled((x) => x.msg.id === reply.messageId);
    assert.equal(hr.msg.addressed, true);
  });

  it('ignores the bot’s own messages (echoed by the gateway) and other bots', async () => {
    const before = fake.handled.length;
    const own = await sender.send({ platform: 'discord', account: bot.id, chatId: general }, part('the bot speaking', `own-${randomUUID()}`));
    double.messageCreate({ channelId: general, guildId, author: { id: newId('51'), username: 'otherbot', bot: true }, content: 'beep', mentionsBot: true });
    // A later message from a person arrives after both on the same gateway: once it is handled, they were skipped.
    const marker = double.messageCreate({ channelId: general, guildId, author: bob, content: 'marker' });
    await fake.waitHandled((x) => x.msg.id === marker.messageId);
    assert.deepEqual(fake.handled.slice(before).map((x) => x.msg.id), [marker.messageId]);
    assert.ok(double.message(own));
  });

  it('attachments become PendingAttachments fetched from the CDN; a foreign host is refused', async () => {
    const bytes = Buffer.from('col1,col2\n1,2\n');
    const sent = double.messageCreate({
      channelId: general,
      guildId,
      author: bob,
      content: 'numbers attached',
      mentionsBot: true,
      attachments: [{ bytes, filename: 'numbers.csv', contentType: 'text/csv' }],
    });
    const h = await fake.waitHandled((x) => x.msg.id === sent.messageId);
    const pending = h.opts?.attachments ?? [];
    assert.deepEqual(pending.map((p) => [p.name, p.mediaType, p.size]), [['numbers.csv', 'text/csv', bytes.length]]);
    const cdnBefore = double.callsTo('GET /attachments/:channel/:id/:filename').length;
    assert.deepEqual(await pending[0]!.fetch(), bytes);
    assert.equal(double.callsTo('GET /attachments/:channel/:id/:filename').length, cdnBefore + 1);

    // An attachment whose URL points elsewhere is never downloaded.
    const foreign = double.messageCreate({
      channelId: general,
      guildId,
      author: bob,
      content: 'suspicious',
      attachments: [{ id: newId('61'), filename: 'x.png', size: 3, url: 'https://evil.example.com/x.png', proxy_url: 'https://evil.example.com/x.png', content_type: 'image/png' }],
    });
    const hf = await fake.waitHandled((x) => x.msg.id === foreign.messageId);
    await assert.rejects(hf.opts!.attachments![0]!.fetch(), /only downloaded from Discord's CDN/);
    await assert.rejects(attachmentFetcher('http://cdn.discordapp.com/x.png', new Set())(), /only downloaded/); // not https
    await assert.rejects(attachmentFetcher('not a url', new Set())(), /not valid/);
    // Larger than declared: refused while downloading.
    const big = double.addAttachment(Buffer.alloc(64, 1), { filename: 'big.bin' });
    await assert.rejects(attachmentFetcher(big.url, new Set([new URL(double.origin).host]), 10)(), /larger than/);
  });

  it('a slash command is deferred at once, then edited with the ingress reply (private in a guild)', async () => {
    fake.state.respond = (msg) => ({ kind: 'command', duplicate: false, ...(msg.text === '/whoami' ? { reply: 'You are **Alice**, with the member role.' } : {}) });
    const { interactionId, token } = double.slashCommand({ name: 'whoami', channelId: general, guildId, user: alice });
    const view = await double.waitForInteractionResponse(interactionId, (v) => v.content === 'You are **Alice**, with the member role.');
    assert.equal(view.type, 5);
    assert.deepEqual(view.callbacks.map((c) => [c.type, c.data]), [[5, { flags: 64 }]]);
    assert.ok((view.original?.flags ?? 0) & 64, 'ephemeral');
    assert.deepEqual(view.followUps, []);
    const calls = double.calls.filter((c) => c.params.interaction === interactionId || c.params.token === token);
    assert.deepEqual(calls.map((c) => c.route), ['POST /interactions/:id/:token/callback', 'PATCH /webhooks/:app/:token/messages/@original']);
    assert.deepEqual(bodyOf(calls[1]!).allowed_mentions, { parse: [] });
    const h = fake.handled.find((x) => x.msg.id === interactionId)!;
    const { at: _at, ...rest } = h.msg;
    assert.deepEqual(rest, { id: interactionId, platform: 'discord', account: bot.id, chatId: general, user: 'Alice', userId: alice.id, chatType: 'group', addressed: true, text: '/whoami' });
    assert.deepEqual(h.opts, { deliverReply: false });
  });

  it('slash command options come in catalog order; a long answer continues in follow-ups; channel-wide commands answer publicly', async () => {
    const long = longReply(5, 14, false);
    fake.state.respond = (msg) => ({ kind: 'command', duplicate: false, ...(msg.text.startsWith('/approve') ? { reply: long.text } : {}) });
    const dm = double.dmChannel(alice).id;
    const { interactionId, token } = double.slashCommand({ name: 'approve', options: { role: 'member', code: 'K7Q2M9XD' }, channelId: dm, user: alice });
    const view = await double.waitForInteractionResponse(interactionId, (v) => v.followUps.length >= 1 && (v.content ?? '').length > 0);
    const h = fake.handled.find((x) => x.msg.id === interactionId)!;
    assert.equal(h.msg.text, '/approve K7Q2M9XD member');
    assert.equal(h.msg.chatType, 'dm');
    assert.equal(h.msg.chatId, dm);
    assert.equal(view.type, 5);
    assert.equal(((view.callbacks[0]?.data ?? {}) as { flags?: number }).flags ?? 0, 0); // a DM: nothing to hide
    const calls = double.calls.filter((c) => c.params.interaction === interactionId || c.params.token === token);
    assert.deepEqual(calls.map((c) => c.route), ['POST /interactions/:id/:token/callback', 'PATCH /webhooks/:app/:token/messages/@original', 'POST /webhooks/:app/:token']);
    assertSplitOnBlocks([view.content ?? '', ...view.followUps.map((m) => m.content)], long.blocks);

    // /bind concerns the whole channel: its answer is public; no answer from ingress -> "Done."
    fake.state.respond = () => ({ kind: 'command', duplicate: false });
    const bind = double.slashCommand({ name: 'bind', options: { mode: 'all' }, channelId: general, guildId, user: alice });
    const bv = await double.waitForInteractionResponse(bind.interactionId, (v) => v.content === 'Done.');
    assert.equal(((bv.callbacks[0]?.data ?? {}) as { flags?: number }).flags ?? 0, 0);
    assert.equal(fake.handled.find((x) => x.msg.id === bind.interactionId)?.msg.text, '/bind all');
    assert.equal(commandText('deny-action', [{ name: 'reason', value: ' too risky ' }, { name: 'id', value: 'abc234' }]), '/deny-action abc234 too risky');

    // A refusal without an answer still answers the interaction.
    fake.state.respond = () => ({ kind: 'rejected', duplicate: false, reason: 'unknown-sender' });
    const stranger = double.slashCommand({ name: 'status', channelId: general, guildId, user: { id: newId('71'), username: 'stranger' } });
    const sv = await double.waitForInteractionResponse(stranger.interactionId, (v) => (v.content ?? '') !== '');
    assert.match(sv.content ?? '', /\/pair/);
  });

  it('a button click is acknowledged with deferUpdate, then answered privately; a second click gets its own answer', async () => {
    const msgId = await sender.send({ platform: 'discord', account: bot.id, chatId: general }, part('Approve the HTTP request?', `apr-${randomUUID()}`, { buttons: approvalButtons('abc234') }));
    let decided = false;
    fake.state.act = () => {
      if (decided) return { reply: 'Approval abc234 was already approved by Alice; nothing changed.', applied: false };
      decided = true;
      return { reply: 'Approval abc234 (HTTP GET): approved.', applied: true };
    };
    const click = double.buttonClick({ customId: 'apr:abc234:y', message: msgId, user: alice });
    const view = await double.waitForInteractionResponse(click.interactionId, (v) => v.followUps.length === 1);
    assert.equal(view.type, 6);
    assert.deepEqual(view.callbacks.map((c) => c.type), [6]);
    assert.equal(view.followUps[0]?.content, 'Approval abc234 (HTTP GET): approved.');
    assert.ok((view.followUps[0]?.flags ?? 0) & 64, 'ephemeral');
    const calls = double.calls.filter((c) => c.params.interaction === click.interactionId || c.params.token === click.token);
    assert.deepEqual(calls.map((c) => c.route), ['POST /interactions/:id/:token/callback', 'POST /webhooks/:app/:token']);
    assert.deepEqual(fake.actions.at(-1), { platform: 'discord', account: bot.id, chatId: general, chatType: 'group', userId: alice.id, user: 'Alice', data: 'apr:abc234:y', id: click.interactionId });
    assert.equal(double.message(msgId)?.content, 'Approve the HTTP request?'); // the adapter leaves the message to the approval flow

    const again = double.buttonClick({ customId: 'apr:abc234:n', message: msgId, user: bob });
    const v2 = await double.waitForInteractionResponse(again.interactionId, (v) => v.followUps.length === 1);
    assert.equal(v2.followUps[0]?.content, 'Approval abc234 was already approved by Alice; nothing changed.');
    assert.equal(fake.actions.at(-1)?.data, 'apr:abc234:n');
    assert.equal(fake.actions.at(-1)?.user, 'bob');
  });

  it('without a guild id the commands are registered globally, usable in guilds and DMs', async () => {
    const other = createDiscordAdapter({ token: bot.token, clientOptions: double.clientOptions, ingress: fakeIngress().ingress, sender });
    try {
      await other.start();
      const put = await double.waitForCall('PUT /applications/:app/commands');
      const body = put.body as Array<{ name: string; contexts: number[]; integration_types: number[] }>;
      assert.deepEqual(body.map((c) => c.name), COMMANDS.map((c) => c.name));
      for (const c of body) {
        assert.deepEqual(c.contexts, [0, 1]);
        assert.deepEqual(c.integration_types, [0]);
      }
    } finally {
      await other.stop();
    }
  });
});

// ---------------------------------------------------------------------------------------------
// c. End to end: the real stack

/** Wrap ingress to record every result by message id. */
function recordingIngress(inner: Ingress) {
  const results = new Map<string, IngressResult>();
  const ingress: Ingress = {
    handle: async (msg, opts) => {
      const r = await inner.handle(msg, opts);
      results.set(msg.id, r);
      return r;
    },
    handleAction: (a) => inner.handleAction(a),
    transcript: (s, o) => inner.transcript(s, o),
    status: (s) => inner.status(s),
    decidePairing: (c, d, b) => inner.decidePairing(c, d, b),
    decideApproval: (i, d, b, r) => inner.decideApproval(i, d, b, r),
  };
  return { ingress, result: (id: string) => waitFor(() => results.get(id), `the ingress result of message ${id}`, 20_000) };
}

describe('Discord end to end (Temporal, database, worker, ingress, model server)', () => {
  const bot = newBot();
  let env: TestWorkflowEnvironment;
  let model: ModelServer;
  let dbh: TestDatabase;
  let double: DiscordDouble;
  let sender: DiscordSender;
  let guildId = '';
  const ch = (name: string) => double.guilds[0]!.channels.find((c) => c.name === name)!.id;

  before(async () => {
    [env, model, dbh, double] = await Promise.all([
      createTestEnvironment(),
      startModelServer(),
      testDatabases()[0]!.create(),
      startDiscordDouble({ token: bot.token, botUser: { id: bot.id, username: 'steward' }, applicationId: bot.id, guilds: [{ name: 'E2E', channels: [{ name: 'lobby' }, { name: 'unbound' }] }] }),
    ]);
    guildId = double.guilds[0]!.id;
    sender = createDiscordSender({ token: bot.token, api: double.apiBase });
  });
  after(async () => {
    await double?.close();
    await model?.close();
    await dbh?.cleanup();
    await env?.teardown();
  });

  async function withDiscord(fn: (ctx: { h: Harness; adapter: DiscordAdapter; result: (id: string) => Promise<IngressResult> }) => Promise<void>) {
    await withHarness({ env, db: dbh.db, providers: { openaiCompatible: { baseURL: model.baseURL } }, senders: { discord: sender } }, async (h) => {
      const rec = recordingIngress(h.ingress);
      const adapter = createDiscordAdapter({ token: bot.token, clientOptions: double.clientOptions, ingress: rec.ingress, sender, guildId });
      await adapter.start();
      try {
        await fn({ h, adapter, result: rec.result });
      } finally {
        await adapter.stop();
      }
    });
  }

  async function member(name: string): Promise<UserInput> {
    const user: UserInput = { id: newId('81'), username: name.toLowerCase(), globalName: name };
    await createIdentity(dbh.db, { name, role: 'member', accounts: [{ platform: 'discord', userId: user.id! }], createdBy: 'test' });
    return user;
  }

  /** The turn's reply has landed once the progress panel is deleted (clearPanel runs after delivery). */
  const panelDeleted = (chatId: string) => double.waitForCall('DELETE /channels/:id/messages/:mid', (c) => c.params.channel === chatId, 20_000);

  it('a DM turn: the model is asked, the reply is posted once, the "Thinking…" panel comes and goes', async () => {
    await withDiscord(async ({ adapter }) => {
      const dana = await member('Dana');
      const before = model.requests.length;
      model.enqueue({ text: 'Hello from the model.' });
      const sent = double.messageCreate({ author: dana, content: 'hello steward' });
      const dm = sent.channelId;
      const del = await panelDeleted(dm);
      assert.equal(model.requests.length, before + 1);
      assert.equal(lastUserText(model.requests[before]!.body).includes('hello steward'), true);
      const posts = postsTo(double, dm);
      assert.deepEqual(posts.map((c) => [c.status, bodyOf(c).content]), [
        [200, 'Thinking…'],
        [200, 'Hello from the model.'],
      ]);
      const panelId = responseId(posts[0]);
      const replyId = responseId(posts[1]);
      assert.equal(del.params.message, panelId);
      assert.equal(del.status, 204);
      assert.ok(del.seq > posts[1]!.seq, 'the panel goes after the reply landed');
      assert.equal(double.message(panelId)?.deleted, true);
      assert.equal(double.message(replyId)?.deleted, false);
      assert.deepEqual(
        double.messages(dm).filter((m) => m.source === 'bot' && !m.deleted).map((m) => m.content),
        ['Hello from the model.'],
      );
      const session = `session:discord:${adapter.account}:${dm}`;
      const deliveries = await dbh.db.delivery.findMany({ where: { sessionId: session, kind: 'reply' } });
      assert.deepEqual(deliveries.map((d) => [d.status, d.externalId]), [['sent', replyId]]);
    });
  });

  it('a guild channel: fail closed until bound; then only messages that mention the bot get a turn', async () => {
    await withDiscord(async ({ adapter, result }) => {
      const erin = await member('Erin');
      const chatId = ch('unbound');
      const before = model.requests.length;
      const m1 = double.messageCreate({ channelId: chatId, guildId, author: erin, content: 'are you there?', mentionsBot: true });
      const r1 = await result(m1.messageId);
      assert.deepEqual([r1.kind, r1.reason, r1.reply], ['rejected', 'unbound-chat', undefined]);
      assert.equal(model.requests.length, before);
      assert.deepEqual(postsTo(double, chatId), []);

      await bindChat(dbh.db, { platform: 'discord', account: adapter.account, chatId, createdBy: 'test' });
      const m2 = double.messageCreate({ channelId: chatId, guildId, author: erin, content: 'just talking among ourselves' });
      assert.equal((await result(m2.messageId)).kind, 'ignored');
      assert.equal(model.requests.length, before);
      assert.deepEqual(postsTo(double, chatId), []);

      model.enqueue({ text: 'Yes, I am here.' });
      const m3 = double.messageCreate({ channelId: chatId, guildId, author: erin, content: 'now with a mention', mentionsBot: true });
      assert.equal((await result(m3.messageId)).kind, 'message');
      await panelDeleted(chatId);
      assert.equal(model.requests.length, before + 1);
      const prompt = JSON.stringify(model.requests[before]!.body);
      assert.ok(prompt.includes('now with a mention'));
      assert.ok(!prompt.includes('just talking among ourselves'));
      assert.ok(!prompt.includes(`<@${bot.id}>`), 'the mention is not part of the text');
      assert.deepEqual(postsTo(double, chatId).map((c) => bodyOf(c).content), ['Thinking…', 'Yes, I am here.']);
    });
  });

  it('an unknown sender’s DM is answered with how to pair, and nothing reaches the model', async () => {
    await withDiscord(async ({ result }) => {
      const frank: UserInput = { id: newId('91'), username: 'frank' };
      const before = model.requests.length;
      const sent = double.messageCreate({ author: frank, content: 'hello? who are you?' });
      const r = await result(sent.messageId);
      assert.deepEqual([r.kind, r.reason], ['rejected', 'unknown-sender']);
      const posts = postsTo(double, sent.channelId);
      assert.equal(posts.length, 1);
      assert.match(bodyOf(posts[0]!).content ?? '', /\/pair/);
      assert.equal(posts[0]!.status, 200);
      assert.equal(model.requests.length, before);
    });
  });

  it('a long model reply is posted as several messages, in order', async () => {
    await withDiscord(async () => {
      const gina = await member('Gina');
      const long = longReply(8, 13, false);
      assert.ok(long.text.length >= 4_500, String(long.text.length));
      model.enqueue({ text: long.text });
      const sent = double.messageCreate({ author: gina, content: 'write a lot' });
      await panelDeleted(sent.channelId);
      const posts = okPostsTo(double, sent.channelId);
      assert.equal(bodyOf(posts[0]!).content, 'Thinking…');
      const parts = posts.slice(1).map((c) => bodyOf(c).content ?? '');
      assert.ok(parts.length >= 3, `${parts.length} messages`);
      assertSplitOnBlocks(parts, long.blocks);
      assert.equal(new Set(posts.map((c) => bodyOf(c).nonce)).size, posts.length);
      assert.deepEqual(
        double.messages(sent.channelId).filter((m) => m.source === 'bot' && !m.deleted).map((m) => m.content),
        parts,
      );
    });
  });
});
