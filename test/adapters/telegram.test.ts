/**
 * The Telegram adapter through grammY's real code paths against the local Bot API double: the
 * sender alone (rendering, splitting, the plain-text fallback, rate limits, errors, buttons,
 * files, edits), the polling adapter with a recording ingress (normalising, addressing, files,
 * button clicks, command menus), and the whole stack (Temporal dev server, database, worker,
 * ingress, scripted model) with a message in and a reply out. Every assertion is on the Bot API
 * calls the double recorded or on the chat state it keeps.
 */
import assert from 'node:assert/strict';
import { randomInt, randomUUID } from 'node:crypto';
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import { GrammyError } from 'grammy';
import { Hono } from 'hono';
import { createConsoleRoutes } from '../../adapters/console/app.js';
import { BrowserSignIn } from '../../adapters/http/sign-in.js';
import { createConsolePersons } from '../../services/auth.js';
import { createConsoleChats } from '../../services/console.js';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { approvalButtons, bindChat, createIdentity } from '../../domain/governance.js';
import { deliverOnce, DeliveryError, type OutboundPart } from '../../domain/outbox.js';
import type { ActionResult, HandleOptions, InboundAction, Ingress, IngressResult } from '../../services/chat/intake.js';
import { renderTelegramHtml } from '../../adapters/render/markdown.js';
import {
  createTelegramAdapter,
  createTelegramSender,
  telegramAccountFromToken,
  telegramCommandMenus,
  toDeliveryError,
  type TelegramAdapter,
  type TelegramSender,
} from '../../adapters/telegram/index.js';
import type { ConversationKey } from '../../common/ids.js';
import type { Role } from '../../common/roles.js';
import type { InboundMessage } from '../../common/schemas.js';
import { testDatabases, type TestDatabase } from '../helpers/db.js';
import { lastUserText, startModelServer, type ModelServer } from '../helpers/model-server.js';
import { waitFor, withHarness, type Harness } from '../helpers/steward.js';
import {
  parseTelegramHtml,
  startTelegramDouble,
  tgGroup,
  tgUser,
  type RecordedCall,
  type TelegramDouble,
  type TgUser,
} from '../helpers/telegram-double.js';
import { createTestEnvironment } from '../helpers/temporal.js';

const uid = () => randomInt(100_000_000, 999_999_999);
/** A double with a bot id of its own, so conversation keys never collide between tests. */
const newDouble = () => startTelegramDouble({ botId: randomInt(7_100_000_000, 7_999_999_999) });
const BOT = 'steward_test_bot';
const NO_PREVIEW = { is_disabled: true };

const resultOf = (call: RecordedCall) => (call.response as { result: { message_id: number } }).result;
const inChat = (chatId: number, ...methods: string[]) => (c: RecordedCall) => methods.includes(c.method) && c.params.chat_id === chatId && !c.failed;

/** A minimal PNG header (signature + IHDR) the double reads dimensions from. */
function pngHeader(width: number, height: number): Buffer {
  const ihdr = Buffer.alloc(25);
  ihdr.writeUInt32BE(13, 0);
  ihdr.write('IHDR', 4, 'latin1');
  ihdr.writeUInt32BE(width, 8);
  ihdr.writeUInt32BE(height, 12);
  ihdr.writeUInt8(8, 16);
  ihdr.writeUInt8(6, 17);
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), ihdr]);
}

async function deliveryError(p: Promise<unknown>): Promise<DeliveryError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof DeliveryError, `expected a DeliveryError, got ${String(err)}`);
    return err;
  }
  assert.fail('expected a DeliveryError');
}

/** The text the double shows for a rendered message (what a Telegram user sees). */
const visible = (markdown: string) => parseTelegramHtml(renderTelegramHtml(markdown)).text.trim();

// ---------------------------------------------------------------------------------------------

describe('Telegram sender', () => {
  const alice = tgUser(uid(), 'Alice', 'alice_w');
  let tg: TelegramDouble;
  let sender: TelegramSender;
  let conv: ConversationKey;
  let dbh: TestDatabase;
  let n = 0;
  const part = (text: string, extra: Partial<OutboundPart> = {}): OutboundPart => ({ index: 0, count: 1, text, files: [], idempotencyKey: `part-${++n}-${randomUUID()}`, ...extra });

  before(async () => {
    dbh = await testDatabases()[0]!.create();
  });
  after(async () => {
    await dbh?.cleanup();
  });
  beforeEach(async () => {
    tg = await newDouble();
    sender = createTelegramSender({ token: tg.token, apiRoot: tg.apiRoot });
    conv = { platform: 'telegram', account: telegramAccountFromToken(tg.token), chatId: String(alice.id) };
  });
  afterEach(async () => {
    await tg.close();
  });

  it('splits a long reply on block boundaries into HTML messages within 4096 visible characters, in order', async () => {
    const para = (i: number) =>
      `Paragraph ${i}: **bold ${i}** with \`code ${i}\` and a [link ${i}](https://example.com/docs/${i}). ${'Lorem ipsum dolor sit amet, consectetur adipiscing elit. '.repeat(8).trim()}`;
    const code = Array.from({ length: 40 }, (_, i) => `const value${i} = compute(${i}); // <tag> & "quote"`).join('\n');
    const md = [...Array.from({ length: 10 }, (_, i) => para(i + 1)), `\`\`\`ts\n${code}\n\`\`\``, ...Array.from({ length: 10 }, (_, i) => para(i + 11))].join('\n\n');
    assert.ok(md.length > 10_000, `${md.length} characters`);

    const parts = sender.split(md);
    assert.ok(parts.length >= 3, `${parts.length} parts`);
    assert.deepEqual(sender.split(md), parts, 'deterministic');
    const ids: string[] = [];
    for (const [i, text] of parts.entries()) ids.push(await sender.send(conv, part(text, { index: i, count: parts.length })));

    const calls = tg.callsOf('sendMessage');
    assert.deepEqual(
      calls.map((c) => c.params),
      parts.map((text) => ({ chat_id: alice.id, text: renderTelegramHtml(text), parse_mode: 'HTML', link_preview_options: NO_PREVIEW })),
      'one sendMessage per part, in order, as Telegram HTML without link previews',
    );
    const messages = tg.messages(alice.id);
    assert.deepEqual(ids, messages.map((m) => String(m.message_id)));
    for (const m of messages) assert.ok((m.plainText ?? '').length <= 4096, `${m.plainText?.length} visible characters`);
    // Nothing lost or reordered, and every cut fell between two blocks.
    assert.equal(messages.map((m) => m.plainText).join('\n\n'), visible(md));
    for (const m of messages) assert.match(m.plainText ?? '', /^(Paragraph \d+:|const value0 )[\s\S]*(elit\.|"quote")$/);
    // The code block is whole in one message, as a pre entity with its language.
    const withCode = messages.filter((m) => m.plainText?.includes('const value'));
    assert.equal(withCode.length, 1);
    assert.ok(withCode[0]!.plainText!.includes(code), 'the code block is not split and its <, & and quotes arrive as typed');
    assert.ok(withCode[0]!.entities.some((e) => e.type === 'pre' && e.language === 'ts' && e.length === code.length));
    // Markdown became Telegram entities.
    const first = messages[0]!;
    const spans = first.entities.map((e) => [e.type, first.plainText!.slice(e.offset, e.offset + e.length), e.url ?? null]);
    assert.deepEqual(spans.slice(0, 3), [
      ['bold', 'bold 1', null],
      ['code', 'code 1', null],
      ['text_link', 'link 1', 'https://example.com/docs/1'],
    ]);
  });

  it('resends a part as plain text when Telegram cannot parse its entities', async () => {
    tg.failNext('sendMessage', { status: 400, description: `Bad Request: can't parse entities: Unsupported start tag "foo" at byte offset 0` });
    const id = await sender.send(conv, part('**Deploy** finished: see [the log](https://ci.example/42)'));
    const [rejected, plain] = tg.callsOf('sendMessage');
    assert.equal(rejected?.failed, true);
    assert.deepEqual(rejected?.params, {
      chat_id: alice.id,
      text: '<b>Deploy</b> finished: see <a href="https://ci.example/42">the log</a>',
      parse_mode: 'HTML',
      link_preview_options: NO_PREVIEW,
    });
    assert.deepEqual(plain?.params, { chat_id: alice.id, text: 'Deploy finished: see the log (https://ci.example/42)', link_preview_options: NO_PREVIEW });
    assert.deepEqual(
      tg.messages(alice.id).map((m) => [String(m.message_id), m.plainText, m.parse_mode]),
      [[id, 'Deploy finished: see the log (https://ci.example/42)', undefined]],
    );
  });

  it('waits out a short 429 inside; a long one surfaces with retryAfterMs and no waiting', async () => {
    tg.failNext('sendMessage', { retryAfter: 1 });
    await sender.send(conv, part('after the flood wait'));
    const [limited, retried] = tg.callsOf('sendMessage');
    assert.equal(limited?.status, 429);
    assert.equal(retried?.status, 200);
    assert.ok(retried!.at - limited!.at >= 950, `retried after ${retried!.at - limited!.at} ms`);
    assert.deepEqual(tg.messages(alice.id).map((m) => m.plainText), ['after the flood wait']);

    tg.clearCalls();
    tg.failNext('sendMessage', { retryAfter: 60 });
    const t0 = Date.now();
    const err = await deliveryError(sender.send(conv, part('not now')));
    assert.ok(Date.now() - t0 < 2000, 'no waiting for a long retry_after');
    assert.deepEqual([err.retryAfterMs, err.permanent, err.status], [60_000, false, 429]);
    assert.equal(tg.callsOf('sendMessage').length, 1);
    assert.equal(tg.messages(alice.id).length, 1, 'nothing new was posted');
  });

  it('a retried delivery posts each part exactly once (the outbox and the sender together)', async () => {
    const section = (name: string) => `Part ${name}. ${'Every part of this reply goes out once and only once. '.repeat(50).trim()}`;
    const md = ['one', 'two', 'three'].map(section).join('\n\n');
    assert.equal(sender.split(md).length, 3);
    const msg = { key: `reply-${randomUUID()}`, sessionId: `session:telegram:${conv.account}:${conv.chatId}`, conversation: conv, kind: 'reply' as const, text: md };
    tg.failNext('sendMessage', { retryAfter: 60, match: (c) => String(c.params.text).startsWith('Part two.') });

    const err = await deliveryError(deliverOnce(dbh.db, { telegram: sender }, msg));
    assert.equal(err.retryAfterMs, 60_000);
    assert.deepEqual(tg.messages(alice.id).map((m) => m.plainText?.slice(0, 9)), ['Part one.']);

    const outcome = await deliverOnce(dbh.db, { telegram: sender }, msg);
    assert.equal(outcome.sent, true);
    const messages = tg.messages(alice.id);
    assert.deepEqual(messages.map((m) => m.plainText?.slice(0, 11)), ['Part one. E', 'Part two. E', 'Part three.']);
    assert.deepEqual(outcome.externalIds, messages.map((m) => String(m.message_id)));
    assert.deepEqual(
      tg.callsOf('sendMessage').map((c) => [String(c.params.text).slice(0, 9), c.status]),
      [
        ['Part one.', 200],
        ['Part two.', 429],
        ['Part two.', 200],
        ['Part thre', 200],
      ],
    );
    const again = await deliverOnce(dbh.db, { telegram: sender }, msg);
    assert.equal(again.sent, false);
    assert.equal(tg.callsOf('sendMessage').length, 4, 'a delivered key sends nothing');
  });

  it('sends buttons as an inline keyboard and files with sendDocument after the text', async () => {
    const id = await sender.send(conv, part('**Approval needed**: post the release note?', { buttons: approvalButtons('abc234') }));
    assert.deepEqual(tg.callsOf('sendMessage')[0]?.params, {
      chat_id: alice.id,
      text: '<b>Approval needed</b>: post the release note?',
      parse_mode: 'HTML',
      link_preview_options: NO_PREVIEW,
      reply_markup: {
        inline_keyboard: [
          [
            { text: 'Approve', callback_data: 'apr:abc234:y' },
            { text: 'Deny', callback_data: 'apr:abc234:n' },
          ],
        ],
      },
    });
    assert.deepEqual(tg.message(alice.id, Number(id))?.message.reply_markup, tg.callsOf('sendMessage')[0]?.params.reply_markup);

    tg.clearCalls();
    const data = Buffer.from('line one\nline two ✓\n', 'utf8');
    const report = { hash: 'a'.repeat(64), name: 'report.txt', mediaType: 'text/plain', size: data.length, data };
    const key = `files-${randomUUID()}`;
    // The upload is refused for now: the retried part does not post its text again.
    tg.failNext('sendDocument', { retryAfter: 60 });
    const refused = await deliveryError(sender.send(conv, part('Here is the report.', { files: [report], idempotencyKey: key })));
    assert.equal(refused.retryAfterMs, 60_000);
    const textId = await sender.send(conv, part('Here is the report.', { files: [report], idempotencyKey: key }));
    assert.deepEqual(tg.calls.map((c) => [c.method, c.status]), [
      ['sendMessage', 200],
      ['sendDocument', 429],
      ['sendDocument', 200],
    ]);
    const upload = tg.callsOf('sendDocument')[1]!;
    assert.equal(upload.params.chat_id, alice.id);
    assert.equal(upload.files.length, 1);
    assert.deepEqual([upload.files[0]?.param, upload.files[0]?.filename], ['document', 'report.txt']);
    assert.deepEqual(upload.files[0]?.bytes, data);
    const messages = tg.messages(alice.id);
    assert.deepEqual(messages.map((m) => [m.plainText ?? null, m.document?.file_name ?? null]), [
      ['Approval needed: post the release note?', null],
      ['Here is the report.', null],
      [null, 'report.txt'],
    ]);
    assert.equal(textId, String(messages[1]!.message_id), 'the id is the text message');
  });

  it('edits (HTML, plain fallback, buttons removed, "not modified" is success) and removes', async () => {
    const id = await sender.send(conv, part('Thinking…', { buttons: approvalButtons('def567') }));
    await sender.edit(conv, id, 'Calling **post_to_chat**…', null);
    assert.deepEqual(tg.callsOf('editMessageText')[0]?.params, {
      chat_id: alice.id,
      message_id: Number(id),
      text: 'Calling <b>post_to_chat</b>…',
      parse_mode: 'HTML',
      link_preview_options: NO_PREVIEW,
      reply_markup: { inline_keyboard: [] },
    });
    await sender.edit(conv, id, 'Calling **post_to_chat**…', null); // the same again: Telegram says "not modified"
    const same = tg.callsOf('editMessageText')[1]?.response;
    assert.ok(same && !same.ok && /message is not modified/.test(same.description), 'Telegram answered "not modified"');

    tg.failNext('editMessageText', { status: 400, description: `Bad Request: can't parse entities: Can't find end tag corresponding to start tag b` });
    await sender.edit(conv, id, 'Done: **3** steps', [[{ id: 'again', label: 'Again' }]]);
    const fallback = tg.callsOf('editMessageText').at(-1)!;
    assert.deepEqual(fallback.params, {
      chat_id: alice.id,
      message_id: Number(id),
      text: 'Done: 3 steps',
      link_preview_options: NO_PREVIEW,
      reply_markup: { inline_keyboard: [[{ text: 'Again', callback_data: 'again' }]] },
    });
    const state = tg.message(alice.id, Number(id))!;
    assert.deepEqual([state.plainText, state.editCount], ['Done: 3 steps', 2]);

    await sender.remove(conv, id);
    assert.deepEqual(tg.callsOf('deleteMessage')[0]?.params, { chat_id: alice.id, message_id: Number(id) });
    assert.equal(tg.message(alice.id, Number(id))?.deleted, true);
    const gone = await deliveryError(sender.remove(conv, id));
    assert.deepEqual([gone.permanent, gone.status], [true, 400]);
    assert.match(gone.message, /message to delete not found/);
    const editGone = await deliveryError(sender.edit(conv, id, 'too late'));
    assert.equal(editGone.permanent, true);
  });

  it('maps failures: blocked bot and unknown chat are permanent; network and 5xx are transient', async () => {
    tg.failNext('sendMessage', { status: 403 });
    const blocked = await deliveryError(sender.send(conv, part('hello?')));
    assert.deepEqual([blocked.permanent, blocked.status, blocked.retryAfterMs], [true, 403, undefined]);
    assert.match(blocked.message, /bot was blocked by the user/);
    // the outbox gives up on such a delivery instead of retrying it
    tg.failNext('sendMessage', { status: 403 });
    const key = `blocked-${randomUUID()}`;
    const outcome = await deliverOnce(dbh.db, { telegram: sender }, { key, sessionId: 's', conversation: conv, kind: 'reply', text: 'hello?' });
    assert.match(outcome.failed ?? '', /bot was blocked/);
    assert.equal((await dbh.db.delivery.findUniqueOrThrow({ where: { key } })).status, 'failed');

    tg.failNext('sendMessage', { status: 400, description: 'Bad Request: chat not found' });
    const unknown = await deliveryError(sender.send(conv, part('anyone?')));
    assert.deepEqual([unknown.permanent, unknown.status], [true, 400]);

    tg.failNext('sendMessage', { dropConnection: true });
    const network = await deliveryError(sender.send(conv, part('flaky')));
    assert.deepEqual([network.permanent, network.retryAfterMs], [false, undefined]);
    assert.ok(!network.message.includes(tg.token.split(':')[1]!), 'the token never reaches an error message');

    const bad = toDeliveryError(new GrammyError('x', { ok: false, error_code: 502, description: 'Bad Gateway' }, 'sendMessage', {}), 'a send');
    assert.deepEqual([bad.permanent, bad.status], [false, 502]);
    assert.equal(tg.messages(alice.id).length, 0);
    assert.equal(telegramAccountFromToken('123456789:AAH-secret_part'), '123456789');
    assert.throws(() => telegramAccountFromToken('not a token'));
  });
});

// ---------------------------------------------------------------------------------------------

interface FakeIngress extends Ingress {
  handled: Array<{ msg: InboundMessage; opts: HandleOptions | undefined }>;
  actions: InboundAction[];
  /** Answers for the next clicks, in order. */
  answers: ActionResult[];
}

function fakeIngress(): FakeIngress {
  const handled: FakeIngress['handled'] = [];
  const actions: InboundAction[] = [];
  const answers: ActionResult[] = [];
  const unused = () => Promise.reject(new Error('the adapter does not call this'));
  return {
    handled,
    actions,
    answers,
    async handle(msg, opts): Promise<IngressResult> {
      handled.push({ msg, opts });
      return { workflowId: 'session:x', kind: 'message', duplicate: false };
    },
    async handleAction(action) {
      actions.push(action);
      return answers.shift() ?? { reply: 'ok', applied: true };
    },
    transcript: unused,
    status: unused,
    decidePairing: unused,
    decideApproval: unused,
  };
}

describe('Telegram adapter (recording ingress)', () => {
  const alice = tgUser(uid(), 'Alice', 'alice_w');
  const bob: TgUser = { id: uid(), is_bot: false, first_name: 'Bob', last_name: 'Builder' };
  const group = tgGroup(-1_000_000_000_000 - uid(), 'Steward Devs');
  const adminGroup = tgGroup(-1_000_000_000_000 - uid(), 'Steward Admins');
  let tg: TelegramDouble;
  let ingress: FakeIngress;
  let adapter: TelegramAdapter;

  beforeEach(async () => {
    tg = await newDouble();
    ingress = fakeIngress();
    adapter = createTelegramAdapter({ token: tg.token, apiRoot: tg.apiRoot, ingress, adminChats: async () => [String(adminGroup.id)] });
    await adapter.start();
  });
  afterEach(async () => {
    await adapter.stop();
    await tg.close();
  });
  after(async () => {
    // Every bot stopped and every double closed: no server or socket (grammY's keep-alive pool,
    // the file downloads) is left behind.
    const tcp = () => process.getActiveResourcesInfo().filter((r) => r.startsWith('TCP'));
    for (let i = 0; i < 50 && tcp().length > 0; i++) await new Promise((r) => setTimeout(r, 10));
    assert.deepEqual(tcp(), []);
  });

  /** The ingress call for a pushed message (waits for it). */
  const handledFor = (u: { message?: { message_id: number; chat: { id: number } } }) =>
    waitFor(
      () => ingress.handled.find((h) => h.msg.chatId === String(u.message!.chat.id) && h.msg.id === String(u.message!.message_id)),
      `message ${u.message?.message_id} of chat ${u.message?.chat.id} at the ingress`,
      5000,
    );

  it('normalises private and group texts: addressing by mention, reply or command, the mention removed', async () => {
    const account = telegramAccountFromToken(tg.token);
    assert.equal(adapter.account, account);
    const dm = tg.privateText(alice, '  hello there  ');
    const dmCall = await handledFor(dm);
    assert.deepEqual(dmCall.msg, {
      id: String(dm.message!.message_id),
      platform: 'telegram',
      account,
      chatId: String(alice.id),
      chatType: 'dm',
      user: 'Alice',
      userId: String(alice.id),
      addressed: true,
      text: 'hello there',
      at: new Date(dm.message!.date * 1000).toISOString(),
    });
    assert.deepEqual(dmCall.opts, {});

    const cases: Array<[string, TgUser, boolean, string]> = [
      [`@${BOT} what is the status?`, alice, true, 'what is the status?'],
      [`hey @Steward_Test_Bot can you help`, bob, true, 'hey can you help'],
      ['just chatting among ourselves', alice, false, 'just chatting among ourselves'],
      [`/status@${BOT}`, alice, true, `/status@${BOT}`],
      ['/status@otherbot', alice, false, '/status@otherbot'],
      [`ask @someone_else, not @${BOT.toUpperCase()}`, alice, true, 'ask @someone_else, not'],
    ];
    for (const [text, from, addressed, normalised] of cases) {
      const u = tg.groupText(group, from, text);
      const { msg } = await handledFor(u);
      assert.deepEqual(
        [msg.chatId, msg.chatType, msg.user, msg.userId, msg.addressed, msg.text],
        [String(group.id), 'group', from === bob ? 'Bob Builder' : 'Alice', String(from.id), addressed, normalised],
        text,
      );
    }

    // A reply to one of the bot's messages addresses it; a reply to a person does not.
    const botMsg = await adapter.bot.api.sendMessage(group.id, 'I answered earlier.');
    const reply = tg.groupText(group, alice, 'thanks, one more question', { reply_to_message: botMsg });
    assert.equal((await handledFor(reply)).msg.addressed, true);
    const toBob = tg.groupText(group, alice, 'agreed', { reply_to_message: tg.groupText(group, bob, 'lunch?').message });
    assert.equal((await handledFor(toBob)).msg.addressed, false);
    // A text_mention of the bot (a mention by name, for bots without a username in the client).
    const byName = tg.pushUpdate({
      message: {
        chat: group,
        from: alice,
        text: 'Steward Test Bot please summarise',
        entities: [{ type: 'text_mention', offset: 0, length: 16, user: tg.botInfo }],
      },
    });
    const named = (await handledFor(byName)).msg;
    assert.deepEqual([named.addressed, named.text], [true, 'please summarise']);
  });

  it('passes documents and the largest photo size as attachments fetched from Telegram', async () => {
    const notes = tg.addFile('meeting notes\nline two ✓\n', { name: 'notes.txt' });
    const doc = tg.document(alice, notes, { caption: 'please read this' });
    const docCall = await handledFor(doc);
    assert.equal(docCall.msg.text, 'please read this');
    const [att] = docCall.opts?.attachments ?? [];
    assert.deepEqual([att?.name, att?.mediaType, att?.size], ['notes.txt', 'text/plain', notes.file_size]);
    assert.equal(tg.callsOf('getFile').length, 0, 'nothing is downloaded before the ingress asks');
    assert.deepEqual(await att!.fetch(), Buffer.from('meeting notes\nline two ✓\n', 'utf8'));
    assert.deepEqual(tg.callsOf('getFile').map((c) => c.params), [{ file_id: notes.file_id }]);

    const image = pngHeader(1280, 960);
    const big = tg.addFile(image, { kind: 'photo' });
    const small = tg.addFile(pngHeader(90, 67), { kind: 'photo' });
    const photo = tg.pushUpdate({
      message: {
        chat: { id: alice.id, type: 'private', first_name: 'Alice' },
        from: alice,
        photo: [
          { file_id: small.file_id, file_unique_id: small.file_unique_id, width: 90, height: 67, file_size: small.file_size },
          { file_id: big.file_id, file_unique_id: big.file_unique_id, width: 1280, height: 960, file_size: big.file_size },
        ],
      },
    });
    const photoCall = await handledFor(photo);
    assert.equal(photoCall.msg.text, '', 'no caption');
    assert.equal(photoCall.opts?.attachments?.length, 1);
    const pic = photoCall.opts!.attachments![0]!;
    assert.deepEqual([pic.name, pic.mediaType, pic.size], [`photo-${big.file_unique_id}.jpg`, 'image/jpeg', big.file_size]);
    assert.deepEqual(await pic.fetch(), image);

    // A file Telegram cannot find is an error for the ingress to explain, without the token in it.
    const lost = tg.document(alice, tg.addFile('x', { name: 'lost.txt' }));
    const lostCall = await handledFor(lost);
    tg.failNext('getFile', { status: 400, description: 'Bad Request: invalid file_id' });
    await assert.rejects(lostCall.opts!.attachments![0]!.fetch(), (err: Error) => !err.message.includes(tg.token));
  });

  it('answers a button click with the ingress reply; a click that changed nothing as an alert', async () => {
    const ask = await adapter.bot.api.sendMessage(alice.id, 'Approve?', {
      reply_markup: { inline_keyboard: [[{ text: 'Approve', callback_data: 'apr:abc234:y' }]] },
    });
    ingress.answers.push({ reply: 'Approval abc234 (post to the chat "news"): Approved: the action runs now.', applied: true });
    ingress.answers.push({ reply: `Approval abc234 was already approved by Dana; nothing changed. ${'x'.repeat(300)}`, applied: false });
    const first = tg.callbackQuery(alice, ask, 'apr:abc234:y');
    await tg.waitForCall('answerCallbackQuery', (c) => c.params.callback_query_id === first.callback_query!.id);
    const second = tg.callbackQuery(alice, ask, 'apr:abc234:y');
    await tg.waitForCall('answerCallbackQuery', (c) => c.params.callback_query_id === second.callback_query!.id);

    assert.deepEqual(ingress.actions, [
      { platform: 'telegram', account: adapter.account, chatId: String(alice.id), chatType: 'dm', userId: String(alice.id), user: 'Alice', data: 'apr:abc234:y', id: first.callback_query!.id },
      { platform: 'telegram', account: adapter.account, chatId: String(alice.id), chatType: 'dm', userId: String(alice.id), user: 'Alice', data: 'apr:abc234:y', id: second.callback_query!.id },
    ]);
    const answers = tg.callsOf('answerCallbackQuery');
    assert.deepEqual(answers[0]?.params, {
      callback_query_id: first.callback_query!.id,
      text: 'Approval abc234 (post to the chat "news"): Approved: the action runs now.',
      show_alert: false,
    });
    assert.equal(answers[1]?.params.show_alert, true);
    assert.equal(String(answers[1]?.params.text).length, 200);
    assert.match(String(answers[1]?.params.text), /^Approval abc234 was already approved by Dana; nothing changed\. x+…$/);
    assert.ok(answers.every((a) => a.status === 200));
    assert.equal(ingress.handled.length, 0, 'a click is not a message');
  });

  it('ignores messages from bots and service messages', async () => {
    const otherBot: TgUser = { id: uid(), is_bot: true, first_name: 'Other', username: 'other_bot' };
    tg.groupText(group, otherBot, `@${BOT} run the deploy`);
    tg.pushUpdate({ message: { chat: group, from: alice, new_chat_members: [bob] } });
    tg.pushUpdate({ message: { chat: group, from: alice, pinned_message: { message_id: 1, date: 0, chat: group } } });
    const sentinel = tg.groupText(group, alice, 'the only message for the ingress');
    await handledFor(sentinel);
    assert.deepEqual(ingress.handled.map((h) => h.msg.text), ['the only message for the ingress']);
  });

  it('sets the command menus at start: everyone, private chats (+ /pair), and the admin chat (+ admin commands)', async () => {
    assert.deepEqual(tg.calls.slice(0, 5).map((c) => c.method), ['getMe', 'setMyCommands', 'setMyCommands', 'setMyCommands', 'deleteWebhook']);
    const poll = await tg.waitForCall('getUpdates');
    assert.deepEqual(poll.params, { offset: 1, timeout: 30, allowed_updates: ['message', 'callback_query'] });
    assert.deepEqual(tg.callsOf('deleteWebhook')[0]?.params, { drop_pending_updates: false });
    const sets = tg.callsOf('setMyCommands');
    assert.deepEqual(
      sets.map((c) => c.params.scope),
      [{ type: 'default' }, { type: 'all_private_chats' }, { type: 'chat', chat_id: adminGroup.id }],
    );
    const names = (scope: Parameters<TelegramDouble['commands']>[0]) => tg.commands(scope).map((c) => c.command);
    const everyone = ['stop', 'steer', 'new', 'model', 'think', 'status', 'whoami', 'help', 'change', 'answer', 'objectives', 'objective', 'search', 'open', 'skills', 'memory', 'tasks', 'task', 'budget'];
    const admin = ['workspace', 'prompt', 'approve', 'deny', 'pending', 'approve_action', 'deny_action', 'bind', 'unbind', 'admin_channel', 'route', 'triage'];
    assert.deepEqual(names({ type: 'default' }), everyone);
    const withConsole = (list: string[]) => list.flatMap((c) => (c === 'whoami' ? ['whoami', 'console'] : [c]));
    assert.deepEqual(names({ type: 'all_private_chats' }), [...withConsole(everyone), 'pair']);
    assert.deepEqual(names({ type: 'chat', chat_id: adminGroup.id }), [...everyone, ...admin]);
    assert.deepEqual(names({ type: 'all_group_chats' }), []);
    const steer = tg.commands().find((c) => c.command === 'steer');
    assert.equal(steer?.description, '<text> - Guide the running turn before its next model step.');
    assert.equal(tg.commands().find((c) => c.command === 'think')?.description, '[off|low|medium|high] - Show or set the reasoning effort.');
    for (const set of tg.commandSets()) for (const c of set.commands) assert.ok(c.description.length <= 256);

    // Idempotent and deterministic: the same calls again, the same menus.
    const before = tg.commandSets();
    tg.clearCalls();
    await adapter.syncCommands();
    assert.deepEqual(tg.callsOf('setMyCommands').map((c) => c.params), sets.map((c) => c.params));
    assert.deepEqual(tg.commandSets(), before);
    // An admin's DM as an admin chat has no group-only commands.
    const dmMenu = telegramCommandMenus([String(alice.id)])[2];
    assert.deepEqual(dmMenu?.scope, { type: 'chat', chat_id: alice.id });
    assert.deepEqual(dmMenu?.commands.map((c) => c.command), [...withConsole(everyone), 'workspace', 'prompt', 'approve', 'deny', 'pending', 'approve_action', 'deny_action', 'route']);
  });
});

// ---------------------------------------------------------------------------------------------

describe('Telegram end to end (Temporal dev server, database, worker, ingress, model)', () => {
  const CONSOLE_TOKEN = 'telegram-console-token-0123456789abcdef';
  const consoleSignIn = new BrowserSignIn({ apiToken: CONSOLE_TOKEN });
  let env: TestWorkflowEnvironment;
  let model: ModelServer;
  let dbh: TestDatabase;

  before(async () => {
    env = await createTestEnvironment();
    model = await startModelServer();
    dbh = await testDatabases()[0]!.create();
  });
  after(async () => {
    await model?.close();
    await dbh?.cleanup();
    await env?.teardown();
  });

  interface Stack {
    tg: TelegramDouble;
    h: Harness;
    adapter: TelegramAdapter;
    person(role: Role, name: string, dm?: boolean): Promise<TgUser>;
  }

  /** A double, a sender for the worker and the ingress, a harness and a started adapter; all stopped afterwards. */
  async function withTelegram(fn: (s: Stack) => Promise<void>): Promise<void> {
    const tg = await newDouble();
    try {
      const sender = createTelegramSender({ token: tg.token, apiRoot: tg.apiRoot });
      await withHarness({ env, db: dbh.db, providers: { openaiCompatible: { baseURL: model.baseURL } }, senders: { telegram: sender }, consoleLink: (id) => ({ url: `http://127.0.0.1:1/console/login/${consoleSignIn.issuePersonLink(id).token}`, expiresInMinutes: 60 }) }, async (h) => {
        const adapter = createTelegramAdapter({ token: tg.token, apiRoot: tg.apiRoot, ingress: h.ingress });
        await adapter.start();
        const person = async (role: Role, name: string, dm = false): Promise<TgUser> => {
          const user = tgUser(uid(), name);
          const userId = String(user.id);
          await createIdentity(dbh.db, {
            name,
            role,
            accounts: [{ platform: 'telegram', userId, ...(dm ? { dmChatId: userId, dmAccount: adapter.account } : {}) }],
            createdBy: 'test',
          });
          return user;
        };
        try {
          await fn({ tg, h, adapter, person });
        } finally {
          await adapter.stop();
        }
      });
    } finally {
      await tg.close();
    }
  }

  const T = 20_000;

  it('a DM turn: the progress panel shows while the model works, the reply lands once, the panel goes', async () => {
    await withTelegram(async ({ tg, person }) => {
      const mia = await person('member', 'Mia');
      const requests = model.requests.length;
      model.enqueue({ text: 'Hello Mia: your workflow is **durable**.', firstTokenDelayMs: 1500 });
      tg.privateText(mia, 'hello steward');
      await tg.waitForCall('deleteMessage', (c) => c.params.chat_id === mia.id, T);

      const calls = tg.calls.filter(inChat(mia.id, 'sendMessage', 'editMessageText', 'deleteMessage'));
      const panelId = resultOf(calls[0]!).message_id;
      assert.deepEqual(
        calls.map((c) => [c.method, c.params]),
        [
          ['sendMessage', { chat_id: mia.id, text: 'Thinking…', parse_mode: 'HTML', link_preview_options: NO_PREVIEW }],
          ['sendMessage', { chat_id: mia.id, text: 'Hello Mia: your workflow is <b>durable</b>.', parse_mode: 'HTML', link_preview_options: NO_PREVIEW }],
          ['deleteMessage', { chat_id: mia.id, message_id: panelId }],
        ],
      );
      assert.ok(calls[1]!.at - calls[0]!.at >= 1000, `the panel stood for ${calls[1]!.at - calls[0]!.at} ms while the model worked`);
      assert.deepEqual(
        tg.messages(mia.id).filter((m) => m.from === 'bot' && !m.deleted).map((m) => m.plainText),
        ['Hello Mia: your workflow is durable.'],
      );
      assert.equal(model.requests.length, requests + 1);
      assert.match(lastUserText(model.requests.at(-1)?.body), /hello steward/);
    });
  });

  it('groups: a bound group answers only when mentioned; an unbound group gets nothing (fail closed)', async () => {
    await withTelegram(async ({ tg, adapter, person }) => {
      const max = await person('member', 'Max');
      const team = tgGroup(-1_000_000_000_000 - uid(), 'Team');
      const other = tgGroup(-1_000_000_000_000 - uid(), 'Elsewhere');
      await bindChat(dbh.db, { platform: 'telegram', account: adapter.account, chatId: String(team.id), createdBy: 'test' });
      const requests = model.requests.length;
      model.enqueue({ text: 'Nothing changed today.' });
      tg.groupText(team, max, 'just chatting among ourselves');
      tg.groupText(team, max, `@${BOT} what changed today?`);
      await tg.waitForCall('deleteMessage', (c) => c.params.chat_id === team.id, T);
      assert.deepEqual(
        tg.calls.filter(inChat(team.id, 'sendMessage')).map((c) => c.params.text),
        ['Thinking…', 'Nothing changed today.'],
      );
      assert.equal(model.requests.length, requests + 1, 'one model request: the mention');
      const asked = lastUserText(model.requests.at(-1)?.body);
      assert.match(asked, /what changed today\?/);
      assert.doesNotMatch(asked, /just chatting|@steward_test_bot/);

      tg.groupText(other, max, `@${BOT} anyone here?`);
      await waitFor(
        async () => (await dbh.db.receipt.findMany({ where: { kind: 'ingress.rejected' } })).find((r) => r.data.includes(`"chatId":"${other.id}"`) && r.data.includes('unbound-chat')),
        'the unbound group to be refused',
        T,
      );
      assert.equal(tg.calls.filter(inChat(other.id, 'sendMessage')).length, 0, 'no answer in an unbound group');
      assert.equal(model.requests.length, requests + 1);
    });
  });

  it('an unknown sender is told how to pair and reaches nothing; /pair answers with a code', async () => {
    await withTelegram(async ({ tg }) => {
      const stranger = tgUser(uid(), 'Mallory');
      const requests = model.requests.length;
      tg.privateText(stranger, 'hello, run this for me');
      const told = await tg.waitForCall('sendMessage', (c) => c.params.chat_id === stranger.id, T);
      assert.match(String(told.params.text), /Steward does not know you yet\. Send \/pair here/);
      tg.privateText(stranger, '/pair');
      const code = await tg.waitForCall('sendMessage', (c) => c.params.chat_id === stranger.id && /pairing code/.test(String(c.params.text)), T);
      assert.match(String(code.params.text), /^Your pairing code is [A-Z2-9]{8}\. Give it to a Steward admin/);
      assert.equal(tg.calls.filter(inChat(stranger.id, 'sendMessage')).length, 2);
      assert.equal(await dbh.db.pairing.count({ where: { platform: 'telegram', userId: String(stranger.id), status: 'pending' } }), 1);
      assert.equal(model.requests.length, requests, 'nothing reached the model');
    });
  });

  it('/console in a DM gives the person a one-time link that signs them in to the console as themselves; in a group it is refused', async () => {
    await withTelegram(async ({ tg, h, person }) => {
      const mia = await person('member', 'Mia C');
      const requests = model.requests.length;
      tg.privateText(mia, '/console');
      const told = await tg.waitForCall('sendMessage', (c) => c.params.chat_id === mia.id && /console sign-in link/.test(String(c.params.text)), T);
      const url = /(http:\/\/[^\s"<]+\/console\/login\/(p1\.[A-Za-z0-9_-]+\.\d+\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}))/.exec(String(told.params.text));
      assert.ok(url, String(told.params.text));
      // the link, opened in the console (the same sign-in that issued it), signs Mia in with her role
      const app = new Hono();
      app.route('/', createConsoleRoutes({ apiToken: CONSOLE_TOKEN, signIn: consoleSignIn, persons: createConsolePersons(dbh.db), chats: createConsoleChats({ ingress: h.ingress, db: dbh.db, account: 'default' }) }));
      const opened = await app.request(`http://127.0.0.1/console/login/${url[2]!}`);
      assert.equal(opened.status, 303, String(told.params.text));
      const cookie = /steward_codec=([^;]+)/.exec(opened.headers.get('set-cookie') ?? '')?.[1];
      assert.ok(cookie);
      const page = await app.request('http://127.0.0.1/console/inbox', { headers: { cookie: `steward_codec=${cookie}` } });
      assert.match(await page.text(), /Mia C \(member\)/);
      const group = tgGroup(-1_000_000_000_000 - uid(), 'Team');
      tg.groupText(group, mia, '/console');
      const refused = await tg.waitForCall('sendMessage', (c) => c.params.chat_id === group.id, T).catch(() => undefined);
      if (refused) assert.doesNotMatch(String(refused.params.text), /console\/login/, 'a link is never posted in a group');
      assert.equal(model.requests.length, requests, 'nothing reached the model');
    });
  });

  it('a long model reply arrives as several messages, each once, in order', async () => {
    await withTelegram(async ({ tg, person }) => {
      const lea = await person('member', 'Lea');
      const long = Array.from({ length: 16 }, (_, i) => `Section ${i + 1}. ${'The workflow keeps running through crashes and restarts. '.repeat(11).trim()}`).join('\n\n');
      assert.ok(long.length > 9000);
      model.enqueue({ text: long });
      tg.privateText(lea, 'tell me everything');
      await tg.waitForCall('deleteMessage', (c) => c.params.chat_id === lea.id, T);
      const replies = tg.calls.filter(inChat(lea.id, 'sendMessage')).slice(1);
      const shown = tg.messages(lea.id).filter((m) => m.from === 'bot' && !m.deleted);
      assert.ok(shown.length >= 3, `${shown.length} messages`);
      assert.equal(replies.length, shown.length, 'each part sent once');
      for (const m of shown) assert.ok((m.plainText ?? '').length <= 4096);
      assert.equal(shown.map((m) => m.plainText).join('\n\n'), long);
    });
  });

  it('an approval: the admin gets Approve/Deny, clicks twice, the post goes out once, the decision replaces the buttons', async () => {
    await withTelegram(async ({ tg, adapter, person }) => {
      const dana = await person('admin', 'Dana', true);
      const mo = await person('member', 'Mo');
      const news = tgGroup(-1_000_000_000_000 - uid(), 'News');
      const name = `ann${uid()}`;
      await bindChat(dbh.db, { platform: 'telegram', account: adapter.account, chatId: String(news.id), name, createdBy: 'test' });
      model.enqueue({ toolCalls: [{ id: 'call_post', name: 'post_to_chat', arguments: JSON.stringify({ chat: name, text: 'Release 1.2 is out.' }) }] });
      model.enqueue({ text: 'Posted the announcement.' });
      tg.privateText(mo, 'announce the release please');

      const notice = await tg.waitForCall('sendMessage', (c) => c.params.chat_id === dana.id && /Approval needed/.test(String(c.params.text)), T);
      const keyboard = (notice.params.reply_markup as { inline_keyboard: Array<Array<{ text: string; callback_data: string }>> }).inline_keyboard;
      assert.deepEqual(keyboard.map((row) => row.map((b) => b.text)), [['Approve', 'Deny']]);
      const id = /^apr:([a-z0-9]{8}):y$/.exec(keyboard[0]![0]!.callback_data)?.[1];
      assert.ok(id, keyboard[0]![0]!.callback_data);
      assert.equal(keyboard[0]![1]!.callback_data, `apr:${id}:n`);
      assert.equal(tg.calls.filter(inChat(news.id, 'sendMessage')).length, 0, 'nothing posted before the approval');
      const noticeMsg = { chat: { id: dana.id }, message_id: resultOf(notice).message_id };

      const first = tg.callbackQuery(dana, noticeMsg, `apr:${id}:y`);
      const firstAnswer = await tg.waitForCall('answerCallbackQuery', (c) => c.params.callback_query_id === first.callback_query!.id, T);
      const second = tg.callbackQuery(dana, noticeMsg, `apr:${id}:y`);
      const secondAnswer = await tg.waitForCall('answerCallbackQuery', (c) => c.params.callback_query_id === second.callback_query!.id, T);
      assert.equal(firstAnswer.params.show_alert, false);
      assert.match(String(firstAnswer.params.text), /Approved/);
      assert.equal(secondAnswer.params.show_alert, true);
      assert.match(String(secondAnswer.params.text), /already approved by Dana/);

      await tg.waitForCall('sendMessage', (c) => c.params.chat_id === mo.id && c.params.text === 'Posted the announcement.', T);
      assert.deepEqual(
        tg.calls.filter(inChat(news.id, 'sendMessage')).map((c) => c.params.text),
        ['Release 1.2 is out.'],
        'the group received the post exactly once',
      );
      const edit = await tg.waitForCall('editMessageText', (c) => c.params.chat_id === dana.id && c.params.message_id === noticeMsg.message_id, T);
      assert.deepEqual(edit.params.reply_markup, { inline_keyboard: [] });
      const decided = tg.message(dana.id, noticeMsg.message_id)!;
      assert.match(decided.plainText ?? '', new RegExp(`^Approval ${id}: post to the chat "${name}"[\\s\\S]*Approved: approved by Dana\\.$`));
      assert.deepEqual(decided.message.reply_markup ?? { inline_keyboard: [] }, { inline_keyboard: [] }, 'no buttons left');
      assert.equal((await dbh.db.approval.findUniqueOrThrow({ where: { id: id! } })).status, 'approved');
      assert.equal(
        tg.messages(mo.id).filter((m) => m.from === 'bot' && !m.deleted && m.plainText === 'Posted the announcement.').length,
        1,
        'the member got the final reply once',
      );
    });
  });
});
