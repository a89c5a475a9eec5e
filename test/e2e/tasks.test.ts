/**
 * Triage and tasks end to end, on both databases, with the real worker, Temporal and the
 * scripted model server, through the ingress as Telegram sends messages:
 * - triage is off by default; an admin switches it on for a bound group in mention mode; then
 *   group messages that do not address Steward are classified by a model step (the
 *   classification prompt reaches the model), each by a workflow of its own: an issue and a
 *   question become tasks, noise none; the admin channel gets each routing post with the
 *   override; a redelivered message starts nothing;
 * - /route overrides (receipted), /task makes one, /tasks lists the open ones, /task hand hands
 *   one to the agent (a turn in its chat), /task close closes one and ends its reminder;
 * - a due task nobody touched is reminded once in the admin channel by its timer; a new due
 *   time (a re-route) moves the timer;
 * - the API and the CLI on the same tasks, and `steward bindings triage`;
 * - bad input (chat, API, CLI) is refused with a clear error and changes nothing.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it } from 'node:test';
import type { Client } from '@temporalio/client';
import { createHttpApp, startHttpServer } from '../../adapters/http/app.js';
import { loadConfig } from '../../config/index.js';
import { bindChat, createIdentity } from '../../domain/governance.js';
import { sessionWorkflowId } from '../../common/ids.js';
import { adminCommand } from '../../platform/admin-cli.js';
import { testDatabases } from '../helpers/db.js';
import { lastUserText } from '../helpers/model-server.js';
import { recordingSender, type RecordingSender } from '../helpers/recording-sender.js';
import { useStack, withHarness, type Harness } from '../helpers/steward.js';

const TOKEN = 'tasks-test-token-0123456789abcdef';

/** What the scripted classifier answers for a message (by its words). */
function classification(text: string): string {
  if (/pipeline is failing/.test(text)) return '```json\n{"class": "issue", "priority": "p1", "due": "4s", "reason": "the deploy is broken"}\n```';
  if (/budget doc/.test(text)) return '{"class": "question", "priority": "p3", "due": "2d", "reason": "a review is asked for"}';
  if (/thanks everyone/.test(text)) return '{"class": "noise", "priority": "p3"}';
  if (/garbled/.test(text)) return 'I think this is an issue, maybe?';
  return '{"class": "task", "priority": "p2"}';
}

for (const kind of testDatabases()) {
  describe(`triage and tasks (${kind.name})`, () => {
    const stack = useStack(kind);

    it('classifies group messages into tasks, posts routing decisions, takes overrides, hands, closes and reminds once', { timeout: 180_000 }, async () => {
      const sender = recordingSender();
      const prompts: string[] = [];
      stack.model.setDefault((req) => {
        const body = JSON.stringify(req.body);
        const last = lastUserText(req.body);
        if (body.includes('Classify the message')) {
          prompts.push(body);
          return { text: classification(last) };
        }
        return { text: body.includes('handed to you by') ? 'On it: the handed task.' : `echo: ${last.slice(0, 60)}` };
      });
      await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, senders: { telegram: sender } }, async (h) => {
        const account = `bot${randomUUID().slice(0, 6)}`;
        const team = `-100${Date.now() % 1e9}`;
        const admins = `-200${Date.now() % 1e9}`;
        const ada = { id: '7001', name: 'Ada' };
        const bob = { id: '7002', name: 'Bob' };
        const eve = { id: '7003', name: 'Eve' };
        await createIdentity(stack.db, { name: ada.name, role: 'admin', accounts: [{ platform: 'telegram', userId: ada.id, dmChatId: ada.id, dmAccount: account }], createdBy: 'test' });
        await createIdentity(stack.db, { name: bob.name, role: 'member', accounts: [{ platform: 'telegram', userId: bob.id }], createdBy: 'test' });
        const teamBinding = await bindChat(stack.db, { platform: 'telegram', account, chatId: team, name: 'team', mode: 'mention', createdBy: 'test' });
        await bindChat(stack.db, { platform: 'telegram', account, chatId: admins, name: 'admins', mode: 'mention', adminChannel: true, createdBy: 'test' });
        const send = (who: { id: string; name: string }, text: string, o: { chatId?: string; addressed?: boolean; id?: string } = {}) =>
          h.ingress.handle({ id: o.id ?? randomUUID(), platform: 'telegram', account, chatId: o.chatId ?? team, chatType: 'group', addressed: o.addressed ?? false, user: who.name, userId: who.id, text, at: new Date().toISOString() });
        const adminPost = (pred: (text: string) => boolean) => sender.waitForPost((p) => p.chatId === admins && pred(p.text), 30_000);
        const receipts = async (k: string) => (await stack.db.receipt.findMany({ where: { kind: k }, orderBy: { id: 'asc' } })).map((r) => JSON.parse(r.data) as Record<string, unknown>);

        // off by default: a message that does not address Steward is ignored, and nothing is classified
        const before = await send(bob, 'the pipeline is failing on main again');
        assert.deepEqual([before.kind, before.triage], ['ignored', undefined]);
        // bad input changes nothing; a member may not switch triage; an admin may, in the group itself
        assert.match((await send(ada, '/triage on gpt4', { addressed: true })).reply ?? '', /\/triage: the model: /);
        assert.match((await send(bob, '/triage on', { addressed: true })).reply ?? '', /needs the admin role/);
        assert.deepEqual(await h.tasks.triage(teamBinding.id), { bindingId: teamBinding.id, enabled: false, model: null });
        assert.match((await send(ada, '/triage on openai-compatible:triage-model', { addressed: true })).reply ?? '', /Triage is on/);
        assert.match((await send(ada, '/triage', { addressed: true })).reply ?? '', /Triage is on here \(model openai-compatible:triage-model\)/);

        // three messages: an issue, a question, noise; an unknown sender's is not taken
        const issueId = randomUUID();
        const issue = await send(bob, 'The deploy pipeline is failing on main since 10:00', { id: issueId });
        assert.equal(issue.kind, 'ignored');
        assert.ok(issue.triage && !issue.triage.duplicate, JSON.stringify(issue));
        const question = await send(ada, 'Can someone review the Q3 budget doc before Friday?');
        const noise = await send(bob, 'thanks everyone!');
        assert.equal((await send(eve, 'I am not known here')).triage, undefined);
        // a redelivered message starts nothing
        assert.equal((await send(bob, 'The deploy pipeline is failing on main since 10:00', { id: issueId })).triage?.duplicate, true);
        for (const r of [issue, question, noise]) await stack.env.client.workflow.getHandle(r.triage!.workflowId).result();

        // the classification prompt reached the model, with the message as data and the binding's model
        assert.equal(prompts.length, 3, `one classification per message: ${prompts.length}`);
        assert.ok(prompts.some((p) => p.includes('pipeline is failing') && p.includes('<chat_message') && p.includes('Bob')), prompts[0]);
        const classifyRequests = stack.model.requests.filter((r) => JSON.stringify(r.body).includes('Classify the message'));
        assert.ok(classifyRequests.every((r) => (r.body as { model?: string }).model === 'triage-model'));

        const open = await h.tasks.list();
        const issueTask = open.find((t) => t.text.includes('pipeline is failing'));
        const questionTask = open.find((t) => t.text.includes('budget doc'));
        assert.ok(issueTask && questionTask, JSON.stringify(open));
        assert.equal(open.filter((t) => t.chat.chatId === team).length, 2, 'noise makes no task');
        assert.deepEqual([issueTask.lane, issueTask.priority, issueTask.sender, issueTask.origin, issueTask.model], ['issue', 'p1', 'Bob', 'triage', 'openai-compatible:triage-model']);
        assert.equal(issueTask.sourceKey, `in:telegram:${account}:${team}:${issueId}`);
        assert.deepEqual([questionTask.lane, questionTask.priority], ['question', 'p3']);
        // the admin channel got each routing decision with the override
        const routed = await adminPost((t) => t.includes(`task ${issueTask.id}`) && t.includes('Triage'));
        assert.match(routed.text, new RegExp(`/route ${issueTask.id} <question\\|issue\\|task\\|moderation\\|noise>`));
        await adminPost((t) => t.includes(`task ${questionTask.id}`));
        assert.ok(!sender.posts.some((p) => p.text.includes('thanks everyone')), 'noise is not posted');
        const classified = await receipts('task.classify');
        assert.deepEqual(classified.map((d) => d.class).sort(), ['issue', 'noise', 'question']);
        assert.equal((await receipts('task.triage')).length, 3);

        // the issue's due time comes: reminded once, in the admin channel, by its timer
        await adminPost((t) => t.includes(`Task ${issueTask.id} is due`));
        await stack.env.client.workflow.getHandle(`task-reminder:${issueTask.id}`).result();
        await sleep(1500);
        assert.equal(sender.posts.filter((p) => p.text.includes(`Task ${issueTask.id} is due`)).length, 1, 'reminded exactly once');
        assert.equal((await receipts('task.remind')).length, 1);

        // /route overrides (an admin, in the admin channel); bad routes change nothing
        assert.match((await send(ada, `/route ${questionTask.id} bogus`, { chatId: admins, addressed: true })).reply ?? '', /a class is question, issue, task, moderation, noise/);
        assert.match((await send(ada, `/route ${questionTask.id} task p9`, { chatId: admins, addressed: true })).reply ?? '', /p9: expected p1, p2 or p3/);
        assert.match((await send(ada, '/route t-zzzzzzzz task', { chatId: admins, addressed: true })).reply ?? '', /Not done: no task t-zzzzzzzz/);
        assert.match((await send(bob, `/route ${questionTask.id} task`, { addressed: true })).reply ?? '', /needs the admin role/);
        assert.equal((await h.tasks.show(questionTask.id)).lane, 'question');
        const route = await send(ada, `/route ${questionTask.id} task p2 1h`, { chatId: admins, addressed: true });
        assert.match(route.reply ?? '', new RegExp(`Task ${questionTask.id} routed: task, p2, due .* \\(was question, p3`));
        const routedRow = await h.tasks.show(questionTask.id);
        assert.deepEqual([routedRow.lane, routedRow.priority], ['task', 'p2']);
        assert.ok(Math.abs(Date.parse(routedRow.dueAt!) - Date.now() - 3_600_000) < 60_000);
        assert.deepEqual((await receipts('task.route')).map((d) => [d.taskId, (d.before as { lane: string }).lane, (d.after as { lane: string }).lane]), [[questionTask.id, 'question', 'task']]);

        // /task makes one by hand; /tasks lists the open ones (an admin sees every chat's)
        const made = await send(bob, '/task Write the release notes for 1.4', { addressed: true });
        const manualId = /Task (t-[a-z0-9]{8}) made \(task, p2, due /.exec(made.reply ?? '')?.[1];
        assert.ok(manualId, made.reply);
        assert.match((await send(bob, '/task', { addressed: true })).reply ?? '', /usage: \/task <text>/);
        const listed = (await send(ada, '/tasks', { chatId: admins, addressed: true })).reply ?? '';
        assert.match(listed, /^Open tasks \(3\):/);
        for (const id of [issueTask.id, questionTask.id, manualId]) assert.ok(listed.includes(id), listed);
        assert.match((await send(ada, '/tasks issue', { chatId: admins, addressed: true })).reply ?? '', /Open tasks \(1\):\n.*pipeline is failing/);

        // hand: a turn in the task's chat with the task's text as the message
        const handed = await send(ada, `/task hand ${questionTask.id}`, { chatId: admins, addressed: true });
        assert.match(handed.reply ?? '', new RegExp(`Task ${questionTask.id} handed to the agent: a turn runs in telegram chat ${team}`));
        await sender.waitForPost((p) => p.chatId === team && p.text === 'On it: the handed task.', 30_000);
        assert.ok(stack.model.requests.some((r) => JSON.stringify(r.body).includes(`Task ${questionTask.id} (task, p2) from Ada, handed to you by Ada`)));
        const transcript = await h.ingress.transcript(sessionWorkflowId({ platform: 'telegram', account, chatId: team }), { limit: 50 });
        assert.ok(transcript.some((m) => m.role === 'user' && m.text.includes('review the Q3 budget doc') && m.text.startsWith(`Task ${questionTask.id}`)));
        assert.deepEqual([(await h.tasks.show(questionTask.id)).status, (await h.tasks.show(questionTask.id)).assignee], ['handed', 'agent']);
        assert.deepEqual(await stack.env.client.workflow.getHandle(`task-reminder:${questionTask.id}`).result(), { outcome: 'ended', status: 'handed or closed' });
        assert.match((await send(ada, `/task hand ${questionTask.id}`, { chatId: admins, addressed: true })).reply ?? '', /is handed: it cannot be handed to the agent/);

        // close: a member only in the task's own chat; closing ends the reminder
        assert.match((await send(bob, `/task close ${issueTask.id}`, { chatId: admins, addressed: true })).reply ?? '', new RegExp(`Not done: task ${issueTask.id} belongs to another chat`));
        assert.equal((await h.tasks.show(issueTask.id)).status, 'open');
        assert.match((await send(bob, `/task close ${manualId}`, { addressed: true })).reply ?? '', new RegExp(`Task ${manualId} closed`));
        assert.deepEqual(await stack.env.client.workflow.getHandle(`task-reminder:${manualId}`).result(), { outcome: 'ended', status: 'handed or closed' });
        assert.match((await send(bob, `/task close ${manualId}`, { addressed: true })).reply ?? '', /is closed: it cannot be closed/);
        const kinds = async () => (await stack.db.receipt.findMany({ where: { kind: { startsWith: 'task.' } } })).map((r) => r.kind).sort();
        assert.deepEqual(await kinds(), ['task.classify', 'task.classify', 'task.classify', 'task.close', 'task.create', 'task.hand', 'task.remind', 'task.route', 'task.triage', 'task.triage', 'task.triage']);

        await apiAndCli(h, issueTask.id, teamBinding.id, kinds, stack.database.url, sender, stack.env.client);
      });
    });

    it('a classification the model cannot give is receipted and told to the admins, and makes no task', { timeout: 120_000 }, async () => {
      const sender = recordingSender();
      stack.model.setDefault((req) => ({ text: classification(lastUserText(req.body)) }));
      await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, senders: { telegram: sender } }, async (h) => {
        const account = `bot${randomUUID().slice(0, 6)}`;
        const group = `-300${Date.now() % 1e9}`;
        await createIdentity(stack.db, { name: 'Cy', role: 'member', accounts: [{ platform: 'telegram', userId: '7010' }], createdBy: 'test' });
        const b = await bindChat(stack.db, { platform: 'telegram', account, chatId: group, createdBy: 'test' });
        const admins = `-400${Date.now() % 1e9}`;
        await bindChat(stack.db, { platform: 'telegram', account, chatId: admins, adminChannel: true, createdBy: 'test' });
        await h.tasks.setTriage(b.id, { enabled: true }, { id: 'operator', name: 'the operator' });
        const before = await stack.db.task.count();
        const r = await h.ingress.handle({ id: randomUUID(), platform: 'telegram', account, chatId: group, chatType: 'group', addressed: false, user: 'Cy', userId: '7010', text: 'a garbled thing happened', at: new Date().toISOString() });
        assert.ok(r.triage, JSON.stringify(r));
        const result = await stack.env.client.workflow.getHandle(r.triage.workflowId).result();
        assert.match(String((result as { failed?: string }).failed), /not a classification: the answer holds no JSON object/);
        assert.equal(await stack.db.task.count(), before);
        await sender.waitForPost((p) => p.chatId === admins && p.text.includes('Triage failed') && p.text.includes('garbled'), 20_000);
        const failed = (await stack.db.receipt.findMany({ where: { kind: 'task.classify' } })).map((x) => JSON.parse(x.data) as { failed?: string }).filter((d) => d.failed);
        assert.equal(failed.length, 1);
      });
    });

    it('limits: 40 group messages at once cost at most the group budget of classifications, tasks and notices; a member over the turn limit makes and hands no task', { timeout: 180_000 }, async () => {
      const sender = recordingSender();
      stack.model.setDefault((req) => {
        const body = JSON.stringify(req.body);
        const last = lastUserText(req.body);
        return { text: body.includes('Classify the message') ? classification(last) : `echo: ${last.slice(0, 60)}` };
      });
      const limits = { triage: { perGroup: { count: 6, windowMs: 3_600_000 }, perSender: { count: 4, windowMs: 3_600_000 } } };
      await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, senders: { telegram: sender }, limits, rateLimits: { member: { count: 2, windowMs: 3_600_000 } } }, async (h) => {
        const account = `bot${randomUUID().slice(0, 6)}`;
        const group = `-500${Date.now() % 1e9}`;
        const admins = `-600${Date.now() % 1e9}`;
        const stamp = String(Date.now() % 1e6);
        const members = await Promise.all(
          Array.from({ length: 8 }, async (_, i) => {
            const m = { id: `81${stamp}${i}`, name: `Member${i}` };
            await createIdentity(stack.db, { name: m.name, role: 'member', accounts: [{ platform: 'telegram', userId: m.id }], createdBy: 'test' });
            return m;
          }),
        );
        const ada = { id: `82${stamp}`, name: 'Ada' };
        await createIdentity(stack.db, { name: ada.name, role: 'admin', accounts: [{ platform: 'telegram', userId: ada.id }], createdBy: 'test' });
        const b = await bindChat(stack.db, { platform: 'telegram', account, chatId: group, name: 'busy', createdBy: 'test' });
        await bindChat(stack.db, { platform: 'telegram', account, chatId: admins, adminChannel: true, createdBy: 'test' });
        await h.tasks.setTriage(b.id, { enabled: true }, { id: 'operator', name: 'the operator' });
        const send = (who: { id: string; name: string }, text: string, o: { addressed?: boolean } = {}) =>
          h.ingress.handle({ id: randomUUID(), platform: 'telegram', account, chatId: group, chatType: 'group', addressed: o.addressed ?? false, user: who.name, userId: who.id, text, at: new Date().toISOString() });
        const classifications = () => stack.model.requests.filter((r) => JSON.stringify(r.body).includes('Classify the message') && JSON.stringify(r.body).includes('flood')).length;
        const tasksBefore = await stack.db.task.count({ where: { chatId: group } });

        // 40 messages at once: 8 members, 5 each (a sender may have 4 classified, the group 6)
        const sent = await Promise.all(Array.from({ length: 40 }, (_, i) => send(members[i % 8]!, `flood ${i}: please look at the build`)));
        const taken = sent.filter((r) => r.triage && !r.triage.refused);
        const refused = sent.filter((r) => r.triage?.refused);
        assert.equal(taken.length, 6, `the group's budget: ${JSON.stringify(sent.map((r) => r.triage))}`);
        assert.equal(refused.length, 34);
        for (const r of taken) await stack.env.client.workflow.getHandle(r.triage!.workflowId).result();
        assert.equal(classifications(), 6, 'one model call per classified message, none for the rest');
        assert.equal((await stack.db.task.count({ where: { chatId: group } })) - tasksBefore, 6);
        assert.match(refused[0]!.triage!.refused!, /over (its|the) triage limit/);
        // the admins: one routing post per task, and each budget's limit told once in its window
        await sleep(500);
        const posts = sender.posts.filter((p) => p.chatId === admins);
        assert.equal(posts.filter((p) => p.text.includes('**Triage**:')).length, 6);
        const groupLimit = posts.filter((p) => p.text.includes('Triage limit') && p.text.includes('"busy"'));
        assert.equal(groupLimit.length, 1, 'the group limit is told once');
        assert.ok(posts.filter((p) => p.text.includes('Triage limit')).length <= 1 + members.length, 'at most one notice per budget');
        const limitReceipts = (await stack.db.receipt.findMany({ where: { kind: 'limit.refused' } })).map((r) => JSON.parse(r.data) as { limit: string; messageKey?: string });
        assert.equal(limitReceipts.filter((d) => d.messageKey?.includes(`:${group}:`)).length, 34);
        // a redelivered refused message is refused again, and classifies nothing
        assert.equal(classifications(), 6);

        // the turn limit (member: 2 an hour) holds on every path to a turn
        const kit = members[0]!;
        const kitId = (await stack.db.platformAccount.findUniqueOrThrow({ where: { platform_userId: { platform: 'telegram', userId: kit.id } } })).identityId;
        // a task made under a command's key before the limit was reached: the command run again (a crash before its answer) finds it, over the limit or not
        const keyed = { text: 'keyed: rotate the logs', platform: 'telegram', account, chatId: group };
        const key = `in:telegram:${account}:${group}:${randomUUID()}`;
        const made = await h.tasks.create(keyed, { id: kitId, name: kit.name }, { key });
        assert.equal((await send(kit, 'first question', { addressed: true })).kind, 'message');
        assert.equal((await send(kit, 'second question', { addressed: true })).kind, 'message');
        const third = await send(kit, 'third question', { addressed: true });
        assert.deepEqual([third.kind, third.reason], ['rejected', 'rate-limited']);
        const limitText = /You have sent 2 messages in the last hour; the limit for the member role is 2\. Try again in \d+ minutes?\./;
        assert.match(third.reply ?? '', limitText);
        assert.equal((await h.tasks.create(keyed, { id: kitId, name: kit.name }, { key })).id, made.id, 'the rerun of a made task is not refused on the limit');
        assert.equal((await h.tasks.list({ status: 'all' }, { platform: 'telegram', account, chatId: group })).filter((t) => t.text === keyed.text).length, 1);
        const byHand = await send(kit, '/task fix the flaky build', { addressed: true });
        assert.match(byHand.reply ?? '', /^Not done: You have sent 2 messages in the last hour; the limit for the member role is 2/);
        const open = (await h.tasks.list({}, { platform: 'telegram', account, chatId: group })).find((t) => t.text.includes('flood'));
        assert.ok(open);
        const turnsBefore = await stack.db.message.count({ where: { key: `task:${open.id}:hand` } });
        const hand = await send(kit, `/task hand ${open.id}`, { addressed: true });
        assert.match(hand.reply ?? '', /^Not done: You have sent 2 messages in the last hour; the limit for the member role is 2/);
        assert.equal(await stack.db.message.count({ where: { key: `task:${open.id}:hand` } }), turnsBefore, 'no turn was handed');
        assert.equal((await h.tasks.show(open.id)).status, 'open');
        const refusedTurns = (await stack.db.receipt.findMany({ where: { kind: 'limit.refused', actor: (await stack.db.platformAccount.findUniqueOrThrow({ where: { platform_userId: { platform: 'telegram', userId: kit.id } } })).identityId } })).map((r) => (JSON.parse(r.data) as { path?: string }).path);
        assert.deepEqual(refusedTurns.filter(Boolean).sort(), ['hand', 'task']);
        // an admin is exempt: the task is handed
        assert.match((await send(ada, `/task hand ${open.id}`, { addressed: true })).reply ?? '', new RegExp(`Task ${open.id} handed to the agent`));
      });
    });

    it('the model budget: every model call reserves before it is made and settles after; a turn that does not fit is refused before its call, a classification that fits runs', { timeout: 120_000 }, async () => {
      const sender = recordingSender();
      stack.model.setDefault((req) => {
        const body = JSON.stringify(req.body);
        const last = lastUserText(req.body);
        return { text: body.includes('Classify the message') ? classification(last) : `spent: ${last.slice(0, 40)}`, usage: { prompt_tokens: 100, completion_tokens: 50 } };
      });
      const window = await stack.db.budgetUsage.findMany();
      assert.equal(window.length, 0, 'no model call reserved anything without a budget');
      const HOUR = 3_600_000;
      // a roomy budget: the turn reserves its estimate (prompt and answer cap) and settles to its usage (150)
      await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, limits: { tokens: { count: 1_000_000, windowMs: HOUR } } }, async (h) => {
        await h.send('first question');
        await h.waitForMessage((m) => m.role === 'assistant' && m.text.startsWith('spent: ') && m.text.includes('first quest'), { timeoutMs: 30_000 });
      });
      const spent = async () => {
        const u = await stack.db.budgetUsage.findFirstOrThrow({ where: { budgetId: 'env:STEWARD_TOKEN_BUDGET' } });
        return Number(u.usedTokens + u.reservedTokens);
      };
      assert.equal(await spent(), 150);
      // a tight one: a turn's estimate (at least 4096 for its answer) no longer fits; a classification's (300 for its answer) does
      await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, senders: { telegram: sender }, limits: { tokens: { count: 4100, windowMs: HOUR } }, budgetWaitMs: 0 }, async (h) => {
        const account = `bot${randomUUID().slice(0, 6)}`;
        const group = `-700${Date.now() % 1e9}`;
        const admins = `-800${Date.now() % 1e9}`;
        const userId = `93${Date.now() % 1e6}`;
        await createIdentity(stack.db, { name: 'Ivy', role: 'member', accounts: [{ platform: 'telegram', userId }], createdBy: 'test' });
        const b = await bindChat(stack.db, { platform: 'telegram', account, chatId: group, createdBy: 'test' });
        await bindChat(stack.db, { platform: 'telegram', account, chatId: admins, adminChannel: true, createdBy: 'test' });
        await h.tasks.setTriage(b.id, { enabled: true }, { id: 'operator', name: 'the operator' });
        const calls = stack.model.requests.length;
        await h.send('second question');
        const notice = await h.waitForMessage((m) => m.role === 'system' && /model budget/.test(m.text), { timeoutMs: 30_000 });
        assert.match(notice.text, /^No reply: the budget env:STEWARD_TOKEN_BUDGET refused this turn's model call\. Not called: the model budget of 4100 tokens per hour \(STEWARD_TOKEN_BUDGET\) has 3950 left, and a call to openai-compatible:test-model may need \d+: no model is called until/);
        assert.equal(stack.model.requests.length, calls, 'the refused turn called no model');
        assert.equal(await spent(), 150, 'a refused call spends nothing');
        const refused = (await stack.db.receipt.findMany({ where: { kind: 'limit.refused' } })).map((r) => JSON.parse(r.data) as { limit: string }).filter((d) => d.limit === 'tokens');
        assert.equal(refused.length, 1);
        await sender.waitForPost((p) => p.chatId === admins && p.text.includes('**Model budget**'));
        // a classification fits: it runs and settles to its usage
        const r = await h.ingress.handle({ id: randomUUID(), platform: 'telegram', account, chatId: group, chatType: 'group', addressed: false, user: 'Ivy', userId, text: 'the build is broken again', at: new Date().toISOString() });
        assert.ok(r.triage && !r.triage.refused, JSON.stringify(r));
        await stack.env.client.workflow.getHandle(r.triage.workflowId).result();
        assert.equal(stack.model.requests.length, calls + 1);
        assert.equal(await spent(), 300);
      });
    });
  });
}

/** The API and the CLI on the same tasks: list, create, route, hand and close; bad input refused with nothing changed. */
async function apiAndCli(h: Harness, issueId: string, bindingId: string, kinds: () => Promise<string[]>, databaseUrl: string, sender: RecordingSender, client: Client): Promise<void> {
  const app = createHttpApp({ ingress: h.ingress, apiToken: TOKEN, health: async () => ({ ok: true, checks: {} }), tasks: h.tasks });
  const call = async (method: string, route: string, body?: unknown, raw?: string) => {
    const res = await app.request(route, { method, headers: { authorization: `Bearer ${TOKEN}`, ...(body !== undefined || raw !== undefined ? { 'content-type': 'application/json' } : {}) }, ...(body !== undefined ? { body: JSON.stringify(body) } : raw !== undefined ? { body: raw } : {}) });
    return { status: res.status, json: (await res.json()) as Record<string, unknown> };
  };
  const receiptsBefore = (await kinds()).length;
  const tasksBefore = (await h.tasks.list({ status: 'all' })).length;
  // refused, and nothing changed
  for (const [method, route, body, raw, status, error] of [
    ['POST', '/api/v1/tasks', { text: '', chatId: 'ops' }, undefined, 400, /the task: text: the task needs a text/],
    ['POST', '/api/v1/tasks', { text: 'x', chatId: 'ops', priority: 'p7' }, undefined, 400, /priority/],
    ['POST', '/api/v1/tasks', { text: 'x', chatId: 'ops', due: 'soon' }, undefined, 400, /a due window is a duration/],
    ['POST', '/api/v1/tasks', { text: 'x', chatId: 'ops', extra: 1 }, undefined, 400, /extra/],
    ['POST', '/api/v1/tasks', undefined, '{not json', 400, /malformed JSON/],
    ['POST', `/api/v1/tasks/${issueId}/route`, { class: 'urgent' }, undefined, 400, /class/],
    ['POST', '/api/v1/tasks/t-zzzzzzzz/route', { class: 'task' }, undefined, 404, /no task t-zzzzzzzz/],
    ['POST', '/api/v1/tasks/nope/close', undefined, undefined, 400, /a task id looks like t-1a2b3c4d/],
    ['POST', `/api/v1/tasks/${issueId}/hand`, { now: true }, undefined, 400, /hand takes no options/],
    ['PUT', `/api/v1/bindings/${bindingId}/triage`, { enabled: 'yes' }, undefined, 400, /enabled/],
    ['PUT', '/api/v1/bindings/no-such-binding/triage', { enabled: true }, undefined, 404, /no binding no-such-binding/],
    ['GET', '/api/v1/tasks?status=later', undefined, undefined, 400, /status/],
  ] as const) {
    const r = await call(method, route, body, raw);
    assert.equal(r.status, status, `${method} ${route}: ${JSON.stringify(r.json)}`);
    assert.match(String(r.json.error), error);
  }
  assert.equal((await kinds()).length, receiptsBefore, 'no receipt for refused input');
  assert.equal((await h.tasks.list({ status: 'all' })).length, tasksBefore, 'no task for refused input');
  const unauth = await app.request('/api/v1/tasks');
  assert.equal(unauth.status, 401);

  const made = await call('POST', '/api/v1/tasks', { text: 'Rotate the signing key', chatId: h.chatId, account: h.account, lane: 'issue', priority: 'p1', due: '2h' });
  assert.equal(made.status, 201, JSON.stringify(made.json));
  const id = String(made.json.id);
  assert.deepEqual([made.json.lane, made.json.priority, made.json.status, made.json.origin], ['issue', 'p1', 'open', 'manual']);
  const listed = await call('GET', '/api/v1/tasks?lane=issue');
  assert.ok((listed.json.tasks as Array<{ id: string }>).some((t) => t.id === id));
  const routed = await call('POST', `/api/v1/tasks/${id}/route`, { class: 'moderation', priority: 'p3' });
  assert.deepEqual([routed.status, routed.json.lane, routed.json.priority], [200, 'moderation', 'p3']);
  // a new due time moves the task's reminder timer (a signal): it reminds once, at the new time
  const soon = await call('POST', `/api/v1/tasks/${id}/route`, { class: 'moderation', due: '2s' });
  assert.equal(soon.status, 200, JSON.stringify(soon.json));
  await sender.waitForPost((p) => p.text.includes(`Task ${id} is due`), 30_000);
  assert.deepEqual(await client.workflow.getHandle(`task-reminder:${id}`).result(), { outcome: 'reminded' });
  assert.equal(sender.posts.filter((p) => p.text.includes(`Task ${id} is due`)).length, 1);
  const triage = await call('PUT', `/api/v1/bindings/${bindingId}/triage`, { enabled: false });
  assert.deepEqual(triage.json, { bindingId, enabled: false, model: 'openai-compatible:triage-model' });

  // the CLI: through the running API
  const server = await startHttpServer(app, { host: '127.0.0.1', port: 0 });
  try {
    const out: string[] = [];
    const err: string[] = [];
    const io = { config: () => loadConfig({}, tmpdir()), out: (x: string) => void out.push(x), err: (x: string) => void err.push(x), api: { url: server.url, token: TOKEN } };
    assert.equal(await adminCommand('tasks', ['list'], io), 0);
    assert.match(out.join(''), new RegExp(`${id}\\s+moderation\\s+p3\\s+open`));
    assert.equal(await adminCommand('tasks', ['route', id, 'bogus'], io), 2);
    assert.match(err.join(''), /class/);
    assert.equal(await adminCommand('tasks', ['close', 'nope'], io), 2);
    assert.equal(await adminCommand('tasks', ['add', 'Renew', 'the', 'certificate', '--chat', h.chatId, '--account', h.account, '--priority', 'p2'], io), 0);
    assert.match(out.join(''), /Task t-[a-z0-9]{8} made \(task, p2, due /);
    assert.equal(await adminCommand('tasks', ['route', id, 'noise'], io), 0);
    assert.match(out.join(''), new RegExp(`Task ${id}: closed as noise`));
    assert.equal((await h.tasks.show(id)).status, 'closed');
    assert.equal(await adminCommand('tasks', ['hand', id], io), 1);
    assert.match(err.join(''), /is closed: it cannot be handed/);
    // bindings triage works on the database directly
    const dataDir = mkdtempSync(path.join(tmpdir(), 'steward-tasks-cli-'));
    const dbIo = { ...io, config: () => loadConfig({ DATABASE_URL: databaseUrl, STEWARD_DATA_DIR: dataDir }, tmpdir()) };
    assert.equal(await adminCommand('bindings', ['triage', bindingId, 'maybe'], dbIo), 2);
    assert.equal(await adminCommand('bindings', ['triage', bindingId, 'on', '--model', 'gpt4'], dbIo), 2);
    assert.equal(await adminCommand('bindings', ['triage', 'no-such-binding', 'on'], dbIo), 1);
    assert.deepEqual(await h.tasks.triage(bindingId), { bindingId, enabled: false, model: 'openai-compatible:triage-model' });
    assert.equal(await adminCommand('bindings', ['triage', bindingId, 'on', '--model', 'openai-compatible:other'], dbIo), 0);
    assert.deepEqual(await h.tasks.triage(bindingId), { bindingId, enabled: true, model: 'openai-compatible:other' });
    assert.equal(await adminCommand('bindings', ['list'], dbIo), 0);
    assert.match(out.join(''), /TRIAGE[\s\S]*on \(openai-compatible:other\)/);
  } finally {
    await server.close();
  }
}
