/**
 * The Telegram Bot API double, driven by real grammY (`Bot` with `client: { apiRoot }`) over HTTP:
 * getMe, commands per scope, long polling with offset confirmation and a clean `bot.stop()`,
 * entity parsing and its errors, a scripted 429 handled by @grammyjs/auto-retry, multipart
 * uploads, getFile + download, and the edit/delete rules.
 */
import assert from 'node:assert/strict';
import { after, afterEach, beforeEach, describe, it } from 'node:test';
import { Bot, GrammyError, HttpError, InlineKeyboard, InputFile } from 'grammy';
import { autoRetry } from '@grammyjs/auto-retry';
import { privateChatOf, startTelegramDouble, tgGroup, tgUser, type TelegramDouble } from '../helpers/telegram-double.js';

const alice = tgUser(1001, 'Alice', 'alice_w');
const privateChat = privateChatOf(alice);
const group = tgGroup(-1001234567890, 'Steward Devs');

/** A minimal PNG header (signature + IHDR) the double can read dimensions from. */
function pngHeader(width: number, height: number): Buffer {
  const ihdr = Buffer.alloc(25);
  ihdr.writeUInt32BE(13, 0);
  ihdr.write('IHDR', 4, 'latin1');
  ihdr.writeUInt32BE(width, 8);
  ihdr.writeUInt32BE(height, 12);
  ihdr.writeUInt8(8, 16); // bit depth
  ihdr.writeUInt8(6, 17); // RGBA
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), ihdr]);
}

async function rejection(p: Promise<unknown>): Promise<GrammyError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof GrammyError, `expected a GrammyError, got ${String(err)}`);
    return err;
  }
  assert.fail('expected the call to be rejected');
}

describe('Telegram Bot API double', () => {
  let tg: TelegramDouble;
  let bot: Bot;

  beforeEach(async () => {
    tg = await startTelegramDouble();
    bot = new Bot(tg.token, { client: { apiRoot: tg.apiRoot } });
  });

  afterEach(async () => {
    if (bot.isRunning()) await bot.stop();
    await tg.close();
  });

  after(async () => {
    // Every double is closed: no server or socket (grammY's keep-alive pool included) is left.
    const tcp = () => process.getActiveResourcesInfo().filter((r) => r.startsWith('TCP'));
    for (let i = 0; i < 50 && tcp().length > 0; i++) await new Promise((r) => setTimeout(r, 10));
    assert.deepEqual(tcp(), []);
  });

  it('answers getMe for bot.init() and rejects a wrong token with 401 like Telegram', async () => {
    await bot.init();
    assert.equal(bot.botInfo.id, tg.botInfo.id);
    assert.equal(bot.botInfo.username, 'steward_test_bot');
    assert.equal(bot.botInfo.is_bot, true);
    assert.equal(tg.callsOf('getMe').length, 1);

    const stranger = new Bot('123:not-the-token', { client: { apiRoot: tg.apiRoot } });
    const err = await rejection(stranger.init());
    assert.equal(err.error_code, 401);
    assert.equal(err.description, 'Unauthorized');

    // Exact wire shapes, unknown methods, GET with query parameters.
    const raw = await fetch(`${tg.apiRoot}/bot123:nope/getMe`);
    assert.equal(raw.status, 401);
    assert.deepEqual(await raw.json(), { ok: false, error_code: 401, description: 'Unauthorized' });
    const unknown = await fetch(`${tg.apiRoot}/bot${tg.token}/frobnicate`, { method: 'POST' });
    assert.equal(unknown.status, 404);
    assert.deepEqual(await unknown.json(), { ok: false, error_code: 404, description: 'Not Found: method not found' });
    assert.equal(tg.callsOf('frobnicate').length, 1);
    const viaGet = (await (await fetch(`${tg.apiRoot}/bot${tg.token}/SENDMESSAGE?chat_id=${alice.id}&text=hi`)).json()) as {
      ok: boolean;
      result: { message_id: number; text: string; chat: { id: number } };
    };
    assert.equal(viaGet.ok, true);
    assert.deepEqual([viaGet.result.message_id, viaGet.result.text, viaGet.result.chat.id], [1, 'hi', alice.id]);
    assert.equal(tg.callsOf('sendMessage')[0]?.transport, 'none');
    const form = await fetch(`${tg.apiRoot}/bot${tg.token}/sendMessage`, {
      method: 'POST',
      body: new URLSearchParams({
        chat_id: String(alice.id),
        text: 'form',
        reply_markup: JSON.stringify({ inline_keyboard: [[{ text: 'Go', callback_data: 'go' }]] }),
      }),
    });
    assert.equal(form.status, 200);
    await form.arrayBuffer();
    const formCall = tg.callsOf('sendMessage')[1]!;
    assert.equal(formCall.transport, 'form');
    assert.deepEqual(formCall.params, { chat_id: alice.id, text: 'form', reply_markup: { inline_keyboard: [[{ text: 'Go', callback_data: 'go' }]] } });
    assert.deepEqual(tg.message(alice.id, 2)?.reply_markup, { inline_keyboard: [[{ text: 'Go', callback_data: 'go' }]] });
  });

  it('stores bot commands per scope and language, round-tripping through getMyCommands', async () => {
    const everyone = [
      { command: 'start', description: 'Start a session' },
      { command: 'help', description: 'Show help' },
    ];
    const privateOnly = [{ command: 'pair', description: 'Pair this chat' }];
    const inGroup = [{ command: 'summary', description: 'Summarise the thread' }];
    await bot.api.setMyCommands(everyone);
    await bot.api.setMyCommands(privateOnly, { scope: { type: 'all_private_chats' } });
    await bot.api.setMyCommands(inGroup, { scope: { type: 'chat', chat_id: group.id } });
    await bot.api.setMyCommands([{ command: 'start', description: 'Sitzung starten' }], { language_code: 'de' });

    assert.deepEqual(await bot.api.getMyCommands(), everyone);
    assert.deepEqual(await bot.api.getMyCommands({ scope: { type: 'all_private_chats' } }), privateOnly);
    assert.deepEqual(await bot.api.getMyCommands({ scope: { type: 'chat', chat_id: group.id } }), inGroup);
    assert.deepEqual(await bot.api.getMyCommands({ language_code: 'de' }), [{ command: 'start', description: 'Sitzung starten' }]);
    assert.deepEqual(await bot.api.getMyCommands({ scope: { type: 'all_group_chats' } }), []);
    // ... and tests can read back what was set without going through the API.
    assert.deepEqual(tg.commands({ type: 'all_private_chats' }), privateOnly);
    assert.deepEqual(tg.commands({ type: 'chat', chat_id: group.id }), inGroup);
    assert.equal(tg.commandSets().length, 4);

    await bot.api.deleteMyCommands({ scope: { type: 'all_private_chats' } });
    assert.deepEqual(await bot.api.getMyCommands({ scope: { type: 'all_private_chats' } }), []);
    assert.deepEqual(await bot.api.getMyCommands(), everyone);

    const invalid = await rejection(bot.api.setMyCommands([{ command: 'Start', description: 'capitals are not allowed' }]));
    assert.equal(invalid.description, 'Bad Request: BOT_COMMAND_INVALID');
    assert.deepEqual(await bot.api.getMyCommands(), everyone, 'a rejected call changes nothing');
  });

  it('delivers pushed updates to bot.start() long polling; bot.stop() confirms them and returns promptly', async () => {
    const seen: string[] = [];
    bot.command('start', async (ctx) => {
      seen.push(`command:${ctx.chat.type}:${ctx.match}`);
      await ctx.reply('started');
    });
    bot.on('message:text', async (ctx) => {
      seen.push(`text:${ctx.message.text}`);
      await ctx.reply(`echo: ${ctx.message.text}`, { reply_markup: new InlineKeyboard().text('Approve', 'approve:1') });
    });
    bot.callbackQuery('approve:1', async (ctx) => {
      seen.push(`callback:${ctx.callbackQuery.data}`);
      await ctx.answerCallbackQuery({ text: 'Approved' });
      await ctx.editMessageText('approved ✅');
    });
    bot.catch((err) => {
      seen.push(`error:${String(err.error)}`);
    });

    let started!: () => void;
    const onStart = new Promise<void>((resolve) => (started = resolve));
    const running = bot.start({ onStart: () => started() });
    await onStart;
    await tg.waitForCall('getUpdates', (c) => c.params.timeout === 30);

    const hello = tg.privateText(alice, 'hello double');
    const reply = await tg.waitForCall('sendMessage', (c) => c.params.text === 'echo: hello double');
    const sent = (reply.response as { result: { message_id: number; chat: { id: number } } }).result;

    const press = tg.callbackQuery(alice, sent, 'approve:1');
    await tg.waitForCall('editMessageText');
    const answer = tg.callsOf('answerCallbackQuery')[0];
    assert.equal(answer?.params.callback_query_id, press.callback_query?.id);
    assert.equal(answer?.params.text, 'Approved');

    // A group command addressed to this bot: the entities the double computes satisfy grammY's command filter.
    const command = tg.groupText(group, alice, '/start@steward_test_bot now');
    await tg.waitForCall('sendMessage', (c) => c.params.text === 'started');
    assert.deepEqual(command.message?.entities, [{ type: 'bot_command', offset: 0, length: 23 }]);

    // Stop while the next long poll is held, the usual state of an idle bot.
    await tg.waitForCall('getUpdates', (c) => c.params.offset === command.update_id + 1 && c.params.timeout === 30);
    const stopping = Date.now();
    await bot.stop();
    await running;
    assert.ok(Date.now() - stopping < 2000, 'bot.stop() returns without waiting for the 30 s long poll');
    assert.deepEqual(seen, ['text:hello double', 'callback:approve:1', 'command:supergroup:now']);

    // The final getUpdates of bot.stop() confirmed everything, so nothing is delivered again.
    const polls = tg.callsOf('getUpdates');
    const last = polls[polls.length - 1]!;
    assert.deepEqual(last.params, { offset: command.update_id + 1, limit: 1 });
    assert.equal(polls[polls.length - 2]?.aborted, true, 'the held long poll was cancelled by bot.stop()');
    assert.deepEqual(tg.pendingUpdates(), []);
    assert.deepEqual(await bot.api.getUpdates(), []);
    assert.ok(hello.update_id < press.update_id && press.update_id < command.update_id);

    // Chat state: the echo was edited by the callback handler and lost its keyboard.
    const echo = tg.message(alice.id, sent.message_id)!;
    assert.equal(echo.plainText, 'approved ✅');
    assert.equal(echo.edited, true);
    assert.equal(echo.reply_markup, undefined);
    assert.deepEqual(
      tg.messages(alice.id).map((m) => [m.message_id, m.from]),
      [
        [1, 'user'],
        [2, 'bot'],
      ],
    );
    const pressedAgain = await rejection(bot.api.answerCallbackQuery(press.callback_query!.id));
    assert.match(pressedAgain.description, /query is too old/);
  });

  it('implements getUpdates offset, limit, timeout, conflicts and close() like Telegram', async () => {
    const a = tg.privateText(alice, 'one');
    const b = tg.privateText(alice, 'two');
    const c = tg.privateText(alice, 'three');
    assert.deepEqual(
      (await bot.api.getUpdates({ limit: 2 })).map((u) => u.update_id),
      [a.update_id, b.update_id],
    );
    assert.deepEqual(
      (await bot.api.getUpdates({ offset: b.update_id + 1 })).map((u) => u.message?.text),
      ['three'],
    );
    // Unconfirmed updates stay; confirmed ones are gone.
    assert.deepEqual(
      (await bot.api.getUpdates()).map((u) => u.update_id),
      [c.update_id],
    );

    // A held poll is answered as soon as an update arrives.
    const t0 = Date.now();
    const held = bot.api.getUpdates({ offset: c.update_id + 1, timeout: 10 });
    await tg.waitForCall('getUpdates', (call) => call.params.timeout === 10);
    const d = tg.privateText(alice, 'four');
    assert.deepEqual(
      (await held).map((u) => u.update_id),
      [d.update_id],
    );
    assert.ok(Date.now() - t0 < 1500);

    // With nothing to deliver the poll lasts `timeout` seconds and answers [].
    const t1 = Date.now();
    assert.deepEqual(await bot.api.getUpdates({ offset: d.update_id + 1, timeout: 1 }), []);
    assert.ok(Date.now() - t1 >= 950, `held for ${Date.now() - t1} ms`);

    // Update types the bot did not ask for are not delivered (grammY asks for the default set).
    tg.pushUpdate({ message_reaction: { chat: privateChat, message_id: 1, date: 0, old_reaction: [], new_reaction: [] } });
    const e = tg.privateText(alice, 'five');
    assert.deepEqual(
      (await bot.api.getUpdates({ offset: d.update_id + 1, allowed_updates: [] })).map((u) => u.update_id),
      [e.update_id],
    );

    // A second poller terminates the first with 409 Conflict.
    const first = bot.api.getUpdates({ offset: e.update_id + 1, timeout: 10 });
    await tg.waitForCall('getUpdates', (call) => call.params.timeout === 10 && call.status === undefined);
    const second = bot.api.getUpdates({ timeout: 10 });
    const conflict = await rejection(first);
    assert.equal(conflict.error_code, 409);
    assert.match(conflict.description, /^Conflict: terminated by other getUpdates request/);

    // close() answers the held poll cleanly.
    await tg.close();
    assert.deepEqual(await second, []);
  });

  it('parses HTML and MarkdownV2 like Telegram and rejects what Telegram rejects', async () => {
    const ok = await bot.api.sendMessage(alice.id, '<b>Build</b> passed &amp; <a href="https://ci.example/1">logs</a> <code>42</code>', {
      parse_mode: 'HTML',
    });
    assert.equal(ok.text, 'Build passed & logs 42');
    assert.deepEqual(ok.entities, [
      { type: 'bold', offset: 0, length: 5 },
      { type: 'text_link', offset: 15, length: 4, url: 'https://ci.example/1' },
      { type: 'code', offset: 20, length: 2 },
    ]);
    const pre = await bot.api.sendMessage(alice.id, '<pre><code class="language-ts">let x = 1;</code></pre>', { parse_mode: 'HTML' });
    assert.deepEqual(pre.entities, [{ type: 'pre', offset: 0, length: 10, language: 'ts' }]);
    await bot.api.sendMessage(alice.id, '<blockquote expandable>long <tg-spoiler>secret</tg-spoiler></blockquote>', { parse_mode: 'HTML' });

    const unclosed = await rejection(bot.api.sendMessage(alice.id, '<b>oops', { parse_mode: 'HTML' }));
    assert.equal(unclosed.error_code, 400);
    assert.ok(unclosed.description.startsWith("Bad Request: can't parse entities"), unclosed.description);
    const unsupported = await rejection(bot.api.sendMessage(alice.id, '<div>x</div>', { parse_mode: 'HTML' }));
    assert.equal(unsupported.description, `Bad Request: can't parse entities: Unsupported start tag "div" at byte offset 0`);
    const mismatched = await rejection(bot.api.sendMessage(alice.id, 'ü <b><i>x</b></i>', { parse_mode: 'HTML' }));
    assert.equal(
      mismatched.description,
      `Bad Request: can't parse entities: Unmatched end tag at byte offset 10, expected "</i>", found "</b>"`,
    );

    const md = await bot.api.sendMessage(alice.id, '*Done* in 3\\.5 s \\- see [PR](https://example.com/pr?a=1)', { parse_mode: 'MarkdownV2' });
    assert.equal(md.text, 'Done in 3.5 s - see PR');
    assert.deepEqual(md.entities, [
      { type: 'bold', offset: 0, length: 4 },
      { type: 'text_link', offset: 20, length: 2, url: 'https://example.com/pr?a=1' },
    ]);
    const unescaped = await rejection(bot.api.sendMessage(alice.id, 'Done in 3.5 s', { parse_mode: 'MarkdownV2' }));
    assert.equal(unescaped.description, "Bad Request: can't parse entities: Character '.' is reserved and must be escaped with the preceding '\\'");
    const open = await rejection(bot.api.sendMessage(alice.id, '*bold', { parse_mode: 'MarkdownV2' }));
    assert.equal(open.description, "Bad Request: can't parse entities: Can't find end of Bold entity at byte offset 0");

    const empty = await rejection(bot.api.sendMessage(alice.id, '  '));
    assert.equal(empty.description, 'Bad Request: message text is empty');
    const emptyHtml = await rejection(bot.api.sendMessage(alice.id, '<b></b>', { parse_mode: 'HTML' }));
    assert.equal(emptyHtml.description, 'Bad Request: message text is empty');
    // The limit counts visible UTF-16 code units: markup is free, astral characters count twice.
    await bot.api.sendMessage(alice.id, `<b>${'x'.repeat(4096)}</b>`, { parse_mode: 'HTML' });
    await bot.api.sendMessage(alice.id, '😀'.repeat(2048));
    const tooLong = await rejection(bot.api.sendMessage(alice.id, '😀'.repeat(2049)));
    assert.equal(tooLong.description, 'Bad Request: message is too long');
    const badButton = await rejection(
      bot.api.sendMessage(alice.id, 'x', { reply_markup: new InlineKeyboard().text('too much', 'x'.repeat(65)) }),
    );
    assert.equal(badButton.description, 'Bad Request: BUTTON_DATA_INVALID');

    // Failed calls changed nothing: only the accepted messages exist, with consecutive ids.
    assert.deepEqual(
      tg.messages(alice.id).map((m) => m.message_id),
      [1, 2, 3, 4, 5, 6],
    );
    assert.equal(tg.messages(alice.id)[0]?.text, '<b>Build</b> passed &amp; <a href="https://ci.example/1">logs</a> <code>42</code>');
    assert.equal(tg.messages(alice.id)[0]?.parse_mode, 'HTML');
    assert.equal(tg.callsOf('sendMessage').filter((c) => c.failed).length, 9);
  });

  it('scripts a 429 that @grammyjs/auto-retry waits out before the second call succeeds', async () => {
    tg.failNext('sendMessage', { retryAfter: 1 });
    bot.api.config.use(autoRetry());
    const msg = await bot.api.sendMessage(alice.id, 'after the flood wait');
    assert.equal(msg.text, 'after the flood wait');

    const [limited, retried] = tg.callsOf('sendMessage');
    assert.equal(limited?.failed, true);
    assert.equal(limited?.scripted, true);
    assert.deepEqual(limited?.response, {
      ok: false,
      error_code: 429,
      description: 'Too Many Requests: retry after 1',
      parameters: { retry_after: 1 },
    });
    assert.equal(retried?.failed, undefined);
    assert.ok(retried!.at - limited!.at >= 950, `retried after ${retried!.at - limited!.at} ms`);
    assert.deepEqual(
      tg.messages(alice.id).map((m) => m.plainText),
      ['after the flood wait'],
      'the rate-limited call sent nothing',
    );

    // Without auto-retry grammY surfaces the 429 with its parameters; the header is there too.
    tg.failNext('sendChatAction', { retryAfter: 7, times: 2 });
    const plain = new Bot(tg.token, { client: { apiRoot: tg.apiRoot } });
    const limitedErr = await rejection(plain.api.sendChatAction(alice.id, 'typing'));
    assert.equal(limitedErr.error_code, 429);
    assert.equal(limitedErr.parameters.retry_after, 7);
    const raw = await fetch(`${tg.apiRoot}/bot${tg.token}/sendChatAction`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ chat_id: alice.id, action: 'typing' }),
    });
    assert.equal(raw.status, 429);
    assert.equal(raw.headers.get('retry-after'), '7');
    await raw.arrayBuffer();
    assert.equal(await plain.api.sendChatAction(alice.id, 'typing'), true);

    // A dropped connection reaches grammY as an HttpError.
    tg.failNext('getMe', { dropConnection: true });
    await assert.rejects(plain.api.getMe(), (err: unknown) => err instanceof HttpError);
    assert.equal(tg.callsOf('getMe')[0]?.dropped, true);
  });

  it('receives InputFile uploads as multipart with their bytes, and serves getFile + downloads', async () => {
    const bytes = Buffer.from('meeting notes\nline two ✓\n', 'utf8');
    const keyboard = new InlineKeyboard().text('Open', 'open:notes');
    const sent = await bot.api.sendDocument(alice.id, new InputFile(bytes, 'notes.txt'), {
      caption: '<i>Notes</i> for today',
      parse_mode: 'HTML',
      reply_markup: keyboard,
    });
    const call = tg.callsOf('sendDocument')[0]!;
    assert.equal(call.transport, 'multipart');
    assert.equal(call.files.length, 1);
    assert.equal(call.files[0]?.filename, 'notes.txt');
    assert.equal(call.files[0]?.param, 'document');
    assert.deepEqual(call.files[0]?.bytes, bytes);
    assert.match(String(call.rawParams.document), /^attach:\/\//);
    assert.equal(typeof call.rawParams.reply_markup, 'string', 'objects arrive as JSON text in multipart');
    assert.deepEqual(call.params.reply_markup, { inline_keyboard: keyboard.inline_keyboard });
    assert.equal(call.params.chat_id, alice.id, 'numeric strings are normalised');

    assert.equal(sent.document?.file_name, 'notes.txt');
    assert.equal(sent.document?.mime_type, 'text/plain');
    assert.equal(sent.document?.file_size, bytes.length);
    assert.equal(sent.caption, 'Notes for today');
    assert.deepEqual(sent.caption_entities, [{ type: 'italic', offset: 0, length: 5 }]);
    assert.deepEqual(sent.reply_markup, { inline_keyboard: keyboard.inline_keyboard });

    // What the bot uploaded can be fetched back like any Telegram file.
    const uploaded = await bot.api.getFile(sent.document!.file_id);
    const back = Buffer.from(await (await fetch(tg.fileUrl(uploaded.file_path!))).arrayBuffer());
    assert.deepEqual(back, bytes);

    // A file a user sent: registered with addFile, pushed as a document message, downloaded by the bot.
    const report = tg.addFile(Buffer.from('%PDF-1.7 fake report'), { name: 'report.pdf' });
    const update = tg.document(alice, report, { caption: 'please /summarize @steward_test_bot' });
    assert.equal(update.message?.document?.mime_type, 'application/pdf');
    assert.deepEqual(update.message?.caption_entities, [
      { type: 'bot_command', offset: 7, length: 10 },
      { type: 'mention', offset: 18, length: 17 },
    ]);
    const info = await bot.api.getFile(update.message!.document!.file_id);
    assert.equal(info.file_path, report.file_path);
    assert.equal(info.file_size, report.file_size);
    const downloaded = await fetch(`${tg.apiRoot}/file/bot${tg.token}/${info.file_path}`);
    assert.equal(downloaded.status, 200);
    assert.deepEqual(Buffer.from(await downloaded.arrayBuffer()), Buffer.from('%PDF-1.7 fake report'));
    const missing = await fetch(`${tg.apiRoot}/file/bot${tg.token}/documents/nope.bin`);
    assert.equal(missing.status, 404);
    await missing.arrayBuffer();
    const invalid = await rejection(bot.api.getFile('no-such-file'));
    assert.equal(invalid.description, 'Bad Request: invalid file_id');

    // Photos: dimensions read from the image; not-an-image is refused like Telegram does.
    const photo = await bot.api.sendPhoto(alice.id, new InputFile(pngHeader(64, 48), 'chart.png'));
    assert.deepEqual(
      photo.photo?.map((p) => [p.width, p.height]),
      [[64, 48]],
    );
    const notImage = await rejection(bot.api.sendPhoto(alice.id, new InputFile(Buffer.from('plain text'), 'x.png')));
    assert.equal(notImage.description, 'Bad Request: IMAGE_PROCESS_FAILED');
    // Re-sending by file_id needs no upload.
    const again = await bot.api.sendDocument(group.id, sent.document!.file_id);
    assert.equal(again.document?.file_unique_id, sent.document?.file_unique_id);
    assert.equal(tg.callsOf('sendDocument')[1]?.transport, 'json');
  });

  it('keeps chat state: per-chat ids, edits, deletes and their Telegram errors', async () => {
    const keyboard = new InlineKeyboard().text('Yes', 'yes').text('No', 'no');
    const first = await bot.api.sendMessage(alice.id, 'Deploy?', { reply_markup: keyboard });
    const second = await bot.api.sendMessage(alice.id, 'second');
    const elsewhere = await bot.api.sendMessage(group.id, 'hello group');
    assert.deepEqual([first.message_id, second.message_id, elsewhere.message_id], [1, 2, 1]);
    assert.equal(elsewhere.chat.type, 'supergroup');

    const edited = await bot.api.editMessageText(alice.id, first.message_id, 'Deploy? (<b>waiting</b>)', {
      parse_mode: 'HTML',
      reply_markup: keyboard,
    });
    assert.ok(typeof edited === 'object' && edited.edit_date !== undefined);
    const same = await rejection(
      bot.api.editMessageText(alice.id, first.message_id, 'Deploy? (<b>waiting</b>)', { parse_mode: 'HTML', reply_markup: keyboard }),
    );
    assert.match(same.description, /^Bad Request: message is not modified: /);
    // Same text without the keyboard is a modification (the keyboard goes away).
    await bot.api.editMessageText(alice.id, first.message_id, 'Deploy? (<b>waiting</b>)', { parse_mode: 'HTML' });
    const sameMarkup = await rejection(bot.api.editMessageReplyMarkup(alice.id, first.message_id));
    assert.match(sameMarkup.description, /^Bad Request: message is not modified/);
    await bot.api.editMessageReplyMarkup(alice.id, first.message_id, { reply_markup: new InlineKeyboard().text('Done', 'done') });

    const state = tg.message(alice.id, first.message_id)!;
    assert.equal(state.text, 'Deploy? (<b>waiting</b>)');
    assert.equal(state.plainText, 'Deploy? (waiting)');
    assert.equal(state.parse_mode, 'HTML');
    assert.deepEqual(state.reply_markup, { inline_keyboard: [[{ text: 'Done', callback_data: 'done' }]] });
    assert.equal(state.edited, true);
    assert.equal(state.editCount, 3);

    assert.equal(await bot.api.deleteMessage(alice.id, second.message_id), true);
    const twice = await rejection(bot.api.deleteMessage(alice.id, second.message_id));
    assert.equal(twice.description, 'Bad Request: message to delete not found');
    const editDeleted = await rejection(bot.api.editMessageText(alice.id, second.message_id, 'too late'));
    assert.equal(editDeleted.description, 'Bad Request: message to edit not found');
    const editUnknown = await rejection(bot.api.editMessageText(alice.id, 99, 'never sent'));
    assert.equal(editUnknown.description, 'Bad Request: message to edit not found');
    assert.deepEqual(
      tg.messages(alice.id).map((m) => [m.message_id, m.deleted]),
      [
        [1, false],
        [2, true],
      ],
    );

    // A user message shares the chat's id sequence; the bot cannot edit it.
    const incoming = tg.privateText(alice, 'hi');
    assert.equal(incoming.message?.message_id, 3);
    const notMine = await rejection(bot.api.editMessageText(alice.id, 3, 'hijack'));
    assert.equal(notMine.description, "Bad Request: message can't be edited");
    const reply = await bot.api.sendMessage(alice.id, 'replying', { reply_parameters: { message_id: 3 } });
    assert.equal(reply.message_id, 4);
    assert.equal(reply.reply_to_message?.message_id, 3);
    const lostReply = await rejection(bot.api.sendMessage(alice.id, 'x', { reply_parameters: { message_id: 2 } }));
    assert.equal(lostReply.description, 'Bad Request: message to be replied not found');

    assert.equal(await bot.api.sendChatAction(alice.id, 'typing'), true);
    const badAction = await rejection(bot.api.sendChatAction(alice.id, 'dancing' as 'typing'));
    assert.equal(badAction.description, 'Bad Request: wrong parameter action in request');
  });
});
