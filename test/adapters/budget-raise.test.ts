/**
 * Raising a spent budget from chat, through the real grammY and discord.js code paths against
 * the local Bot API and Discord doubles, with the whole stack (Temporal dev server, database,
 * worker, ingress, the budget ledger as the model registry's spend): a turn refused by a
 * budget tells the admins once, with a Raise button; a click raises the budget for the period as
 * the clicking person (admins only, never the person whose turn it refused, once per notice,
 * in the admin channel when there is one) and answers with the outcome; `/budget` shows a person
 * their own budgets and their chat's, an admin all of them; `/budget raise` is the command path.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomInt } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { createDiscordAdapter, createDiscordSender } from '../../adapters/discord/index.js';
import { createTelegramAdapter, createTelegramSender } from '../../adapters/telegram/index.js';
import { defineBudget, listBudgets } from '../../domain/budgets/definitions.js';
import { budgetUsage, createBudgetLedger } from '../../domain/budgets/ledger.js';
import { createPriceTable } from '../../domain/budgets/prices.js';
import type { Db } from '../../domain/db.js';
import { bindChat, createIdentity } from '../../domain/governance.js';
import type { Role } from '../../common/roles.js';
import { testDatabases, type TestDatabase } from '../helpers/db.js';
import { startDiscordDouble, type DiscordDouble, type UserInput } from '../helpers/discord-double.js';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';
import { withHarness } from '../helpers/steward.js';
import { startTelegramDouble, tgUser, type RecordedCall, type TgUser } from '../helpers/telegram-double.js';
import { createTestEnvironment } from '../helpers/temporal.js';

const T = 20_000;
const uid = () => randomInt(100_000_000, 999_999_999);
const resultOf = (call: RecordedCall) => (call.response as { result: { message_id: number } }).result;
type Keyboard = Array<Array<{ text: string; callback_data: string }>>;

async function raisedTokens(db: Db, id: string): Promise<number> {
  const b = (await listBudgets(db)).find((x) => x.id === id);
  assert.ok(b, id);
  return (await budgetUsage(db, b)).raisedTokens;
}

const receiptsOf = async (db: Db, kind: string, budget: string) =>
  (await db.receipt.findMany({ where: { kind }, orderBy: { id: 'asc' } })).map((r) => ({ actor: r.actor, data: JSON.parse(r.data) as Record<string, unknown> })).filter((r) => r.data.budget === budget);

describe('budget raises from chat (Temporal dev server, database, worker, ingress, ledger)', () => {
  let env: TestWorkflowEnvironment;
  let model: ModelServer;
  let dbh: TestDatabase;

  before(async () => {
    [env, model, dbh] = await Promise.all([createTestEnvironment(), startModelServer(), testDatabases()[0]!.create()]);
  });
  after(async () => {
    await model?.close();
    await dbh?.cleanup();
    await env?.teardown();
  });

  it('Telegram: the notice has a Raise button; the person whose turn hit it and a member are refused, an admin raises it once; /budget shows and raises', { timeout: 120_000 }, async () => {
    const tg = await startTelegramDouble({ botId: randomInt(7_100_000_000, 7_999_999_999) });
    try {
      const sender = createTelegramSender({ token: tg.token, apiRoot: tg.apiRoot });
      const senders = { telegram: sender };
      const ledger = createBudgetLedger({ db: dbh.db, prices: createPriceTable(), senders });
      await withHarness({ env, db: dbh.db, providers: { openaiCompatible: { baseURL: model.baseURL } }, senders, spend: ledger }, async (h) => {
        const adapter = createTelegramAdapter({ token: tg.token, apiRoot: tg.apiRoot, ingress: h.ingress });
        await adapter.start();
        try {
          const person = async (role: Role, name: string): Promise<TgUser & { identity: string }> => {
            const user = tgUser(uid(), name);
            const { id } = await createIdentity(dbh.db, { name, role, accounts: [{ platform: 'telegram', userId: String(user.id), dmChatId: String(user.id), dmAccount: adapter.account }], createdBy: 'test' });
            return { ...user, identity: id };
          };
          const ada = await person('admin', 'Ada');
          const hal = await person('admin', 'Hal');
          const mo = await person('member', 'Mo');
          const halBudget = `hal-${uid()}`;
          const moBudget = `mo-${uid()}`;
          await defineBudget(dbh.db, { id: halBudget, scope: 'person', scopeId: hal.identity, tokens: 100, period: 'day' });
          await defineBudget(dbh.db, { id: moBudget, scope: 'person', scopeId: mo.identity, tokens: 200, period: 'day' });

          // Hal's turn needs more than his budget: refused before the model is called, the admins told once
          const requests = model.requests.length;
          tg.privateText(hal, 'summarise the week for me');
          const notice = await tg.waitForCall('sendMessage', (c) => c.params.chat_id === ada.id && /Model budget/.test(String(c.params.text)), T);
          assert.match(String(notice.params.text), new RegExp(`the budget of person ${hal.identity}, 100 tokens per day \\(UTC\\), is spent`));
          const keyboard = (notice.params.reply_markup as { inline_keyboard: Keyboard }).inline_keyboard;
          assert.deepEqual(keyboard.map((row) => row.map((b) => b.text)), [['Raise by 100 tokens for this day']]);
          const data = keyboard[0]![0]!.callback_data;
          assert.match(data, /^bgr:[0-9a-f]{16}:[0-9a-z]+$/);
          assert.ok(Buffer.byteLength(data) <= 64);
          const halNotice = await tg.waitForCall('sendMessage', (c) => c.params.chat_id === hal.id && /Model budget/.test(String(c.params.text)), T);
          assert.equal(model.requests.length, requests, 'no model call was made');

          const click = async (who: TgUser, on: RecordedCall) => {
            const q = tg.callbackQuery(who, { chat: { id: Number(on.params.chat_id) }, message_id: resultOf(on).message_id }, data);
            return (await tg.waitForCall('answerCallbackQuery', (c) => c.params.callback_query_id === q.callback_query!.id, T)).params;
          };
          // no self-raise: Hal's own turn hit it
          const self = await click(hal, halNotice);
          assert.equal(self.show_alert, true);
          assert.match(String(self.text), /no self-raise/);
          // a member may not raise
          const member = await click(mo, notice);
          assert.equal(member.show_alert, true);
          assert.match(String(member.text), /needs the admin role; you are a member/);
          // a stranger is not even asked
          const stranger = await click(tgUser(uid(), 'Mallory'), notice);
          assert.match(String(stranger.text), /does not know you/);
          assert.equal(await raisedTokens(dbh.db, halBudget), 0, 'nothing changed');

          const ok = await click(ada, notice);
          assert.equal(ok.show_alert, false);
          assert.match(String(ok.text), new RegExp(`^Raised ${halBudget} by 100 tokens until \\d{4}-\\d\\d-\\d\\d 00:00 UTC: \\d+ tokens left now\\.`));
          const again = await click(ada, notice);
          assert.equal(again.show_alert, true);
          assert.match(String(again.text), /Already raised by Ada/);
          assert.equal(await raisedTokens(dbh.db, halBudget), 100, 'raised once');
          const raised = await receiptsOf(dbh.db, 'budget.raised', halBudget);
          assert.deepEqual(raised.map((r) => [r.actor, r.data.by, r.data.tokens]), [[ada.identity, 'Ada', 100]]);
          assert.equal((await receiptsOf(dbh.db, 'budget.raise.refused', halBudget)).length, 2);

          // /budget: Mo sees his own budget (and the installation's, if any), not Hal's
          // the answer to this command: the first matching message sent after it
          const answer = async (who: TgUser, text: string, pattern: RegExp) => {
            const seen = new Set(tg.calls);
            tg.privateText(who, text);
            return String((await tg.waitForCall('sendMessage', (c) => !seen.has(c) && c.params.chat_id === who.id && pattern.test(String(c.params.text)), T)).params.text);
          };
          const mine = await answer(mo, '/budget', /Model budget/);
          assert.match(mine, /^Model budgets of you and this chat:/);
          assert.match(mine, new RegExp(`[-•] ${moBudget} \\(you, per day \\(UTC\\)\\): 0 of 200 tokens used, 0 reserved, 200 left; renews `));
          assert.doesNotMatch(mine, new RegExp(halBudget));
          // the command path: a member is refused and nothing changes; a bad amount is refused by the parser
          assert.match(await answer(mo, `/budget raise ${moBudget} 500`, /raise|Raise/), /^Not raised: Raising a budget needs the admin role/);
          assert.equal(await raisedTokens(dbh.db, moBudget), 0);
          assert.match(await answer(ada, `/budget raise ${moBudget} 0`, /amount/), /must be more than 0/);
          assert.match(await answer(ada, `/budget raise ${moBudget} lots`, /amount/), /an amount is tokens/);
          assert.match(await answer(hal, `/budget raise ${halBudget} 50`, /raise/), /^Not raised: .*no self-raise/);
          assert.equal(await raisedTokens(dbh.db, moBudget), 0);
          assert.equal(await raisedTokens(dbh.db, halBudget), 100);
          // an admin sees every budget, and raises by command
          const all = await answer(ada, '/budget', /Model budgets/);
          assert.match(all, /^Model budgets \(all \d+\):/);
          assert.match(all, new RegExp(`[-•] ${halBudget} \\(person ${hal.identity}, per day \\(UTC\\)\\): \\d+ of 100 \\+ 100 raised tokens used`));
          assert.match(all, new RegExp(`[-•] ${moBudget} `));
          assert.match(await answer(ada, `/budget raise ${moBudget} 500`, /Raised/), new RegExp(`^Raised ${moBudget} by 500 tokens until .*: 700 tokens left now\\.`));
          assert.equal(await raisedTokens(dbh.db, moBudget), 500);
        } finally {
          await adapter.stop();
        }
      });
    } finally {
      await tg.close();
    }
  });

  it('Discord: the notice in the admin channel has a Raise button; a click elsewhere or by the person it refused changes nothing; an admin raises it; /budget as a slash command', { timeout: 120_000 }, async () => {
    const botId = `41${String(Date.now()).slice(-9)}${randomInt(1_000_000, 9_999_999)}`;
    // shaped like Discord's: base64(bot user id).timestamp.hmac
    const bot = { id: botId, token: `${Buffer.from(botId).toString('base64url')}.${randomBytes(4).toString('base64url')}.${randomBytes(20).toString('base64url')}` };
    const double: DiscordDouble = await startDiscordDouble({ token: bot.token, botUser: { id: bot.id, username: 'steward' }, applicationId: bot.id, guilds: [{ name: 'Budgets', channels: [{ name: 'admins' }, { name: 'lobby' }] }] });
    try {
      const sender = createDiscordSender({ token: bot.token, api: double.apiBase });
      const senders = { discord: sender };
      const ledger = createBudgetLedger({ db: dbh.db, prices: createPriceTable(), senders });
      const guildId = double.guilds[0]!.id;
      const ch = (name: string) => double.guilds[0]!.channels.find((c) => c.name === name)!.id;
      await withHarness({ env, db: dbh.db, providers: { openaiCompatible: { baseURL: model.baseURL } }, senders, spend: ledger }, async (h) => {
        const adapter = createDiscordAdapter({ token: bot.token, clientOptions: double.clientOptions, ingress: h.ingress, sender, guildId });
        await adapter.start();
        try {
          await bindChat(dbh.db, { platform: 'discord', account: adapter.account, chatId: ch('admins'), adminChannel: true, createdBy: 'test' });
          await bindChat(dbh.db, { platform: 'discord', account: adapter.account, chatId: ch('lobby'), createdBy: 'test' });
          const person = async (role: Role, name: string): Promise<UserInput & { identity: string }> => {
            const user: UserInput = { id: String(randomInt(100_000_000, 999_999_999)) + '81', username: name.toLowerCase(), globalName: name };
            const { id } = await createIdentity(dbh.db, { name, role, accounts: [{ platform: 'discord', userId: user.id! }], createdBy: 'test' });
            return { ...user, identity: id };
          };
          const ada = await person('admin', 'Ada');
          const cy = await person('admin', 'Cy');
          const budgetId = `cy-${uid()}`;
          await defineBudget(dbh.db, { id: budgetId, scope: 'person', scopeId: cy.identity, tokens: 100, period: 'week', timezone: 'Europe/Berlin' });

          const requests = model.requests.length;
          double.messageCreate({ author: cy, content: 'what is on the roadmap?' });
          const notice = await double.waitForMessage((m) => m.channelId === ch('admins') && m.source === 'bot' && m.content.includes(cy.identity) && /Model budget/.test(m.content), T);
          assert.equal(model.requests.length, requests, 'no model call was made');
          const buttons = (notice.components as Array<{ components: Array<{ custom_id: string; label: string }> }>).flatMap((row) => row.components);
          assert.deepEqual(buttons.map((b) => b.label), ['Raise by 100 tokens for this week']);
          const customId = buttons[0]!.custom_id;
          assert.match(customId, /^bgr:[0-9a-f]{16}:[0-9a-z]+$/);

          const click = async (user: UserInput, channelId?: string) => {
            const c = double.buttonClick({ customId, message: notice.id, user, ...(channelId ? { channelId } : {}) });
            const v = await double.waitForInteractionResponse(c.interactionId, (x) => x.followUps.length === 1, T);
            assert.ok((v.followUps[0]?.flags ?? 0) & 64, 'answered privately');
            return v.followUps[0]!.content;
          };
          assert.match(await click(cy), /no self-raise/);
          assert.match(await click(ada, ch('lobby')), /^Budgets are raised in the admin channel\.$/);
          assert.equal(await raisedTokens(dbh.db, budgetId), 0, 'nothing changed');
          assert.match(await click(ada), new RegExp(`^Raised ${budgetId} by 100 tokens until \\d{4}-\\d\\d-\\d\\d 00:00 Europe/Berlin: \\d+ tokens left now\\.`));
          assert.match(await click(ada), /Already raised by Ada/);
          assert.equal(await raisedTokens(dbh.db, budgetId), 100);

          // /budget as a slash command: Cy sees his own budget with the raise
          const slash = async (user: UserInput, options: Record<string, string>) => {
            const s = double.slashCommand({ name: 'budget', options, channelId: ch('lobby'), guildId, user });
            const v = await double.waitForInteractionResponse(s.interactionId, (x) => (x.content ?? '').length > 0 && x.content !== undefined && !/^…?$/.test(x.content), T);
            return v.content ?? '';
          };
          assert.match(await slash(cy, {}), new RegExp(`[-•] ${budgetId} \\(you, per week \\(Europe/Berlin\\)\\): \\d+ of 100 \\+ 100 raised tokens used`));
          assert.match(await slash(ada, { action: 'raise', budget: budgetId, amount: '50' }), new RegExp(`^Raised ${budgetId} by 50 tokens`));
          assert.equal(await raisedTokens(dbh.db, budgetId), 150);
        } finally {
          await adapter.stop();
        }
      });
    } finally {
      await double.close();
    }
  });
});
