/**
 * Fail-closed identity, pairing, roles, rate limits and approvals, through the real ingress,
 * the real workflows on the Temporal dev server (the time-skipping server for an approval
 * that times out), a real database and the scripted model server. Chat platforms are stood in
 * for by a recording sender: these tests are about Steward's decisions, and each one asserts
 * the exact outcome and the receipts it leaves.
 */
import assert from 'node:assert/strict';
import { randomInt, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { WorkflowNotFoundError } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Db } from '../../domain/db.js';
import { bindChat, createIdentity, OPERATOR } from '../../domain/governance.js';
import { DeliveryError } from '../../domain/outbox.js';
import { createModelRegistry } from '../../domain/model.js';
import { createIngress, type Ingress, type IngressResult } from '../../services/chat/intake.js';
import { closeKnowledgeIndexes, knowledgeIndexOpener } from '../../domain/knowledge/open.js';
import { replyKey, sessionWorkflowId } from '../../common/ids.js';
import type { Role } from '../../common/roles.js';
import { DEFAULT_SYSTEM_PROMPT } from '../../config/index.js';
import { createStewardWorker } from '../../workers/main.js';
import { UserAttr } from '../../workflows/search-attributes.js';
import { turnWorkflow } from '../../workflows/chat/turn.js';
import { testDatabases } from '../helpers/db.js';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';
import { recordingSender, type RecordingSender } from '../helpers/recording-sender.js';
import { testBundle, useStack, waitFor, withHarness } from '../helpers/steward.js';
import { createTimeSkippingEnvironment } from '../helpers/temporal.js';

const uid = () => String(randomInt(100_000_000, 999_999_999));

interface Tg {
  account: string;
  send(from: { id: string; name: string }, text: string, opts?: { chatId?: string; group?: boolean; addressed?: boolean; id?: string }): Promise<IngressResult>;
}

function telegram(ingress: Ingress): Tg {
  const account = `bot${uid()}`;
  return {
    account,
    send: (from, text, o = {}) =>
      ingress.handle({
        id: o.id ?? randomUUID(),
        platform: 'telegram',
        account,
        chatId: o.chatId ?? from.id,
        chatType: o.group ? 'group' : 'dm',
        addressed: o.addressed ?? true,
        user: from.name,
        userId: from.id,
        text,
        at: new Date().toISOString(),
      }),
  };
}

async function person(db: Db, role: Role, name = `${role}-${uid()}`): Promise<{ id: string; name: string; identityId: string }> {
  const id = uid();
  const { id: identityId } = await createIdentity(db, { name, role, accounts: [{ platform: 'telegram', userId: id, dmChatId: id, dmAccount: 'x' }], createdBy: 'test' });
  return { id, name, identityId };
}

async function receipts(db: Db, kind: string, pred: (data: Record<string, unknown>) => boolean = () => true) {
  const rows = await db.receipt.findMany({ where: { kind }, orderBy: { id: 'asc' } });
  return rows.map((r) => ({ ...r, data: JSON.parse(r.data) as Record<string, unknown> })).filter((r) => pred(r.data));
}

async function sessionExists(env: TestWorkflowEnvironment, workflowId: string): Promise<boolean> {
  try {
    await env.client.workflow.getHandle(workflowId).describe();
    return true;
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return false;
    throw err;
  }
}

for (const database of testDatabases()) {
  describe(`governance (${database.name})`, () => {
    const stack = useStack(database);
    const sender: RecordingSender = recordingSender();

    const harness = (extra: Partial<Parameters<typeof withHarness>[0]> = {}) => ({
      env: stack.env,
      db: stack.db,
      providers: { openaiCompatible: { baseURL: stack.model.baseURL } },
      senders: { telegram: sender },
      ...extra,
    });

    it('an unknown sender never reaches a workflow: a DM is told how to pair, a group hears nothing', async () => {
      await withHarness(harness(), async (h) => {
        const tg = telegram(h.ingress);
        const stranger = { id: uid(), name: 'Mallory' };
        const requests = stack.model.requests.length;
        const dm = await tg.send(stranger, 'hello, run this for me');
        assert.equal(dm.kind, 'rejected');
        assert.equal(dm.reason, 'unknown-sender');
        assert.match(dm.reply ?? '', /Send \/pair/);
        assert.equal(await stack.db.message.count({ where: { sessionId: dm.workflowId, role: 'user' } }), 0, 'the text is not recorded');
        assert.equal(await sessionExists(stack.env, dm.workflowId), false, 'no session workflow');
        const answer = await sender.waitForPost((p) => p.chatId === stranger.id);
        assert.match(answer.text, /Send \/pair/);

        const groupChat = `-100${uid()}`;
        const group = await tg.send(stranger, '@steward_bot do things', { chatId: groupChat, group: true });
        assert.equal(group.kind, 'rejected');
        assert.equal(group.reason, 'unknown-sender');
        assert.equal(group.reply, undefined);
        assert.equal(sender.live(groupChat).length, 0);
        const rej = await receipts(stack.db, 'ingress.rejected', (d) => d.userId === stranger.id);
        assert.deepEqual(rej.map((r) => [r.data.reason, r.data.chatType]), [['unknown-sender', 'dm'], ['unknown-sender', 'group']]);
        // a redelivered update writes no second receipt
        await tg.send(stranger, 'hello again', { id: 'same-update' });
        await tg.send(stranger, 'hello again', { id: 'same-update' });
        assert.equal((await receipts(stack.db, 'ingress.rejected', (d) => d.userId === stranger.id)).length, 3);
        assert.equal(stack.model.requests.length, requests, 'nothing reached the model');
      });
    });

    it('an unbound group is refused; a bound one answers only when addressed; an ambiguous binding fails closed', async () => {
      await withHarness(harness(), async (h) => {
        const tg = telegram(h.ingress);
        const member = await person(stack.db, 'member');
        const admin = await person(stack.db, 'admin');
        const chatId = `-100${uid()}`;
        const requests = stack.model.requests.length;
        const unbound = await tg.send(member, 'hi @steward', { chatId, group: true });
        assert.deepEqual([unbound.kind, unbound.reason, unbound.reply], ['rejected', 'unbound-chat', undefined]);
        const adminTry = await tg.send(admin, 'hi @steward', { chatId, group: true });
        assert.equal(adminTry.reason, 'unbound-chat');
        assert.match(adminTry.reply ?? '', /\/bind/);
        assert.equal(await sessionExists(stack.env, unbound.workflowId), false);

        // in an unbound chat only an admin binding it is heard: a member hears nothing
        const memberBind = await tg.send(member, '/bind all', { chatId, group: true });
        assert.deepEqual([memberBind.kind, memberBind.reason, memberBind.reply], ['rejected', 'unbound-chat', undefined]);
        const bound = await tg.send(admin, '/bind mention team', { chatId, group: true });
        assert.equal(bound.kind, 'command');
        assert.match(bound.reply ?? '', /Bound: Steward answers here when mentioned or replied to; the chat is named "team"/);

        const chatter = await tg.send(member, 'just chatting among ourselves', { chatId, group: true, addressed: false });
        assert.equal(chatter.kind, 'ignored');
        assert.equal(await stack.db.message.count({ where: { sessionId: chatter.workflowId, text: 'just chatting among ourselves' } }), 0);
        stack.model.enqueue({ text: 'Hello team.' });
        const asked = await tg.send(member, '@steward hello', { chatId, group: true, addressed: true });
        assert.equal(asked.kind, 'message');
        const reply = await sender.waitForPost((p) => p.chatId === chatId && p.text === 'Hello team.');
        assert.ok(reply);
        assert.equal(stack.model.requests.length, requests + 1, 'one model request: the addressed message');

        // a second binding of the same chat for every bot account makes it ambiguous
        await bindChat(stack.db, { platform: 'telegram', account: '*', chatId, createdBy: 'test' });
        const amb = await tg.send(member, '@steward again', { chatId, group: true });
        assert.deepEqual([amb.kind, amb.reason], ['rejected', 'ambiguous-binding']);
        const rej = await receipts(stack.db, 'ingress.rejected', (d) => d.chatId === chatId);
        assert.deepEqual(rej.map((r) => r.data.reason), ['unbound-chat', 'unbound-chat', 'unbound-chat', 'ambiguous-binding']);
        assert.equal(stack.model.requests.length, requests + 1);
      });
    });

    it('pairing: a one-time code, approved with a role by an admin; reused and expired codes are refused', async () => {
      await withHarness(harness({ pairingTtlMs: 60_000 }), async (h) => {
        const tg = telegram(h.ingress);
        const admin = await person(stack.db, 'admin', 'Ada');
        const newcomer = { id: uid(), name: 'Nina' };
        const paired = await tg.send(newcomer, '/pair');
        assert.equal(paired.kind, 'command');
        const code = /code is ([A-Z2-9]{8})/.exec(paired.reply ?? '')?.[1];
        assert.ok(code, paired.reply);
        const stored = await stack.db.pairing.findFirstOrThrow({ where: { userId: newcomer.id } });
        assert.notEqual(stored.tokenHash, code, 'stored hashed');
        await sender.waitForPost((p) => p.chatId === newcomer.id && p.text.includes(code));
        assert.equal(await stack.db.message.count({ where: { text: { contains: code } } }), 0, 'no transcript keeps the code');
        assert.equal(stored.tokenHash.length, 64);
        // the admins are told there is a request (in the admin's DM: no admin channel here)
        await sender.waitForPost((p) => p.chatId === admin.id && p.text.includes('Pairing request') && p.text.includes('Nina'));

        const member = await person(stack.db, 'member');
        const tooLow = await tg.send(member, `/approve ${code} member`);
        assert.deepEqual([tooLow.kind, tooLow.reason], ['rejected', 'forbidden']);
        const overreach = await tg.send(admin, `/approve ${code} overlord`);
        assert.match(overreach.reply ?? '', /An admin cannot give the overlord role/);
        const ok = await tg.send(admin, `/approve ${code.toLowerCase()} member`);
        assert.match(ok.reply ?? '', /Paired Nina .* as member/);
        await sender.waitForPost((p) => p.chatId === newcomer.id && p.text.startsWith('You are paired'));
        const account = await stack.db.platformAccount.findUniqueOrThrow({ where: { platform_userId: { platform: 'telegram', userId: newcomer.id } }, include: { identity: true } });
        assert.equal(account.identity.role, 'member');
        assert.equal(account.dmChatId, newcomer.id);

        const reused = await tg.send(admin, `/approve ${code} admin`);
        assert.match(reused.reply ?? '', /cannot be used again: already approved by Ada/);
        assert.equal((await stack.db.identity.findUniqueOrThrow({ where: { id: account.identityId } })).role, 'member', 'a reused code changes nothing');

        // now known: the newcomer's message starts a turn
        stack.model.enqueue({ text: 'Welcome, Nina.' });
        const hello = await tg.send(newcomer, 'hello!');
        assert.equal(hello.kind, 'message');
        await sender.waitForPost((p) => p.chatId === newcomer.id && p.text === 'Welcome, Nina.');

        const decisions = await receipts(stack.db, 'pairing.decision', (d) => d.userId === newcomer.id || d.refused !== undefined);
        assert.ok(decisions.some((r) => r.data.decision === 'approved' && r.data.role === 'member' && r.data.by === 'Ada'));
        assert.ok(decisions.some((r) => r.data.refused === 'used'));
        assert.ok(decisions.some((r) => r.data.refused === 'forbidden'));
      });

      await withHarness(harness({ pairingTtlMs: 200 }), async (h) => {
        const tg = telegram(h.ingress);
        const admin = await person(stack.db, 'overlord', 'Olga');
        const late = { id: uid(), name: 'Leo' };
        const r = await tg.send(late, '/pair');
        const code = /code is ([A-Z2-9]{8})/.exec(r.reply ?? '')?.[1];
        assert.ok(code);
        await new Promise((res) => setTimeout(res, 400));
        const expired = await tg.send(admin, `/approve ${code} member`);
        assert.match(expired.reply ?? '', /expired/);
        assert.equal(await stack.db.platformAccount.count({ where: { userId: late.id } }), 0);
        assert.equal((await stack.db.pairing.findFirstOrThrow({ where: { userId: late.id } })).status, 'expired');
        const unknown = await tg.send(admin, '/deny ZZZZZZZZ');
        assert.match(unknown.reply ?? '', /No pairing request has this code/);
        // at most three requests a day per account
        await tg.send(late, '/pair');
        await tg.send(late, '/pair');
        const fourth = await tg.send(late, '/pair');
        assert.deepEqual([fourth.kind, fourth.reason], ['rejected', 'rate-limited']);
        assert.match(fourth.reply ?? '', /limit is 3/);
      });
    });

    it('a pairing code whose answer could not be delivered is withdrawn and uses up none of the day\'s requests', async () => {
      const base = recordingSender();
      const blocked = new Set<string>();
      const flaky = {
        ...base,
        async send(conv: Parameters<typeof base.send>[0], part: Parameters<typeof base.send>[1]) {
          if (blocked.has(conv.chatId)) throw new DeliveryError('Forbidden: bot was blocked by the user', { permanent: true, status: 403 });
          return base.send(conv, part);
        },
      };
      await withHarness(harness({ senders: { telegram: flaky } }), async (h) => {
        const tg = telegram(h.ingress);
        const newcomer = { id: uid(), name: 'Ivy' };
        blocked.add(newcomer.id);
        for (let i = 0; i < 4; i++) {
          const r = await tg.send(newcomer, '/pair');
          assert.match(r.reply ?? '', /Your pairing code is/, `attempt ${i + 1} is not limited`);
        }
        const rows = await stack.db.pairing.findMany({ where: { userId: newcomer.id } });
        assert.deepEqual(rows.map((r) => r.status), ['undelivered', 'undelivered', 'undelivered', 'undelivered'], 'codes nobody received cannot be used');
        blocked.delete(newcomer.id);
        const ok = await tg.send(newcomer, '/pair');
        const code = /code is ([A-Z2-9]{8})/.exec(ok.reply ?? '')?.[1];
        assert.ok(code);
        await base.waitForPost((p) => p.chatId === newcomer.id && p.text.includes(code));
        assert.equal((await stack.db.pairing.findFirstOrThrow({ where: { userId: newcomer.id, status: 'pending' } })).userId, newcomer.id, 'the delivered code stays pending');
      });
    });

    it('roles: a member trying an admin command is refused; a viewer cannot start turns; members are rate limited, admins are not', async () => {
      await withHarness(harness({ rateLimits: { member: { count: 2, windowMs: 3_600_000 } } }), async (h) => {
        const tg = telegram(h.ingress);
        const member = await person(stack.db, 'member', 'Max');
        const viewer = await person(stack.db, 'viewer', 'Vic');
        const admin = await person(stack.db, 'admin', 'Ann');

        const pending = await tg.send(member, '/pending');
        assert.deepEqual([pending.kind, pending.reason], ['rejected', 'forbidden']);
        assert.equal(pending.reply, '/pending needs the admin role; you are a member.');
        const rej = await receipts(stack.db, 'ingress.rejected', (d) => d.userId === member.id);
        assert.deepEqual(rej.map((r) => [r.data.reason, r.data.command]), [['forbidden', 'pending']]);
        assert.equal(await stack.db.receipt.count({ where: { kind: 'command', actor: member.identityId } }), 0, 'no command ran');

        const status = await tg.send(viewer, '/status');
        assert.equal(status.kind, 'command');
        const talk = await tg.send(viewer, 'can I talk?');
        assert.deepEqual([talk.kind, talk.reason], ['rejected', 'forbidden']);
        const help = await tg.send(viewer, '/help');
        assert.doesNotMatch(help.reply ?? '', /\/approve|\/stop/);
        assert.match(help.reply ?? '', /\/status/);

        for (const text of ['one', 'two']) {
          stack.model.enqueue({ text: `ok ${text}` });
          assert.equal((await tg.send(member, text)).kind, 'message');
          await sender.waitForPost((p) => p.chatId === member.id && p.text === `ok ${text}`);
        }
        const third = await tg.send(member, 'three');
        assert.deepEqual([third.kind, third.reason], ['rejected', 'rate-limited']);
        assert.match(third.reply ?? '', /You have sent 2 messages in the last hour; the limit for the member role is 2/);
        assert.equal((await tg.send(member, '/status')).kind, 'command', 'commands are not turns');
        for (const text of ['a1', 'a2', 'a3']) {
          stack.model.enqueue({ text: `admin ${text}` });
          assert.equal((await tg.send(admin, text)).kind, 'message');
          await sender.waitForPost((p) => p.chatId === admin.id && p.text === `admin ${text}`);
        }
      });
    });

    it('a bound group lists who wrote by identity id (never by name) for the Temporal UI filter', async () => {
      await withHarness(harness(), async (h) => {
        const tg = telegram(h.ingress);
        const ann = await person(stack.db, 'member', `Ann ${uid()}`);
        const bo = await person(stack.db, 'member', `Bo ${uid()}`);
        const group = `-100${uid()}`;
        await bindChat(stack.db, { platform: 'telegram', account: tg.account, chatId: group, createdBy: 'test' });
        const sessionId = sessionWorkflowId({ platform: 'telegram', account: tg.account, chatId: group });
        for (const [who, text] of [[ann, 'first question'], [bo, 'second question']] as const) {
          stack.model.enqueue({ text: `answer to ${text}` });
          await tg.send(who, text, { chatId: group, group: true });
          await sender.waitForPost((p) => p.chatId === group && p.text.includes(`answer to ${text}`));
        }
        for (const who of [ann, bo]) {
          const ids = await waitFor(async () => {
            const found: string[] = [];
            for await (const wf of stack.env.client.workflow.list({ query: `StewardUser = "${who.identityId}"` })) found.push(wf.workflowId);
            return found.length > 0 ? found : undefined;
          }, `the session listed under ${who.name}`, 15_000);
          assert.deepEqual(ids, [sessionId]);
        }
        const listed = (await stack.env.client.workflow.getHandle(sessionId).describe()).typedSearchAttributes.get(UserAttr) ?? [];
        assert.deepEqual([...listed].sort(), [ann.identityId, bo.identityId].sort());
      });
    });

    it('an approval: admins get Approve/Deny, a double click is answered once and applied once, the action runs once', async () => {
      await withHarness(harness(), async (h) => {
        const tg = telegram(h.ingress);
        const admin = await person(stack.db, 'admin', 'Dana');
        const member = await person(stack.db, 'member', 'Mo');
        const annChat = `-100${uid()}`;
        const name = `ann${uid()}`;
        await bindChat(stack.db, { platform: 'telegram', account: tg.account, chatId: annChat, name, createdBy: 'test' });
        stack.model.enqueue({ toolCalls: [{ id: 'call_post', name: 'post_to_chat', arguments: JSON.stringify({ chat: name, text: 'Release 1.2 is out.' }) }] });
        stack.model.enqueue({ text: 'Posted the announcement.' });
        await tg.send(member, 'announce the release please');

        const notice = await sender.waitForPost((p) => p.chatId === admin.id && p.text.includes('Approval needed'));
        assert.match(notice.text, new RegExp(`post to the chat "${name}": "Release 1.2 is out."`));
        const [yes, no] = notice.buttons;
        assert.match(yes ?? '', /^apr:[a-z0-9]{8}:y$/);
        assert.match(no ?? '', /^apr:[a-z0-9]{8}:n$/);
        const id = /^apr:([a-z0-9]+):y$/.exec(yes!)![1]!;
        assert.equal((await stack.db.approval.findUniqueOrThrow({ where: { id } })).status, 'pending');
        assert.equal(sender.live(annChat).length, 0, 'nothing posted before approval');
        const st = await h.ingress.status(sessionWorkflowId({ platform: 'telegram', account: tg.account, chatId: member.id }));
        assert.equal(st.running?.phase, 'approval');

        // a member cannot decide
        const click = (who: { id: string; name: string }, n: number) =>
          h.ingress.handleAction({ platform: 'telegram', account: tg.account, chatId: who.id, chatType: 'dm', userId: who.id, user: who.name, data: yes!, id: `cb-${id}-${n}` });
        const byMember = await click(member, 0);
        assert.equal(byMember.applied, false);
        assert.match(byMember.reply, /needs the admin role/);

        const [a, b] = await Promise.all([click(admin, 1), click(admin, 2)]);
        const applied = [a, b].filter((r) => r.applied);
        const refused = [a, b].filter((r) => !r.applied);
        assert.equal(applied.length, 1, JSON.stringify([a, b]));
        assert.equal(refused.length, 1);
        assert.match(applied[0]!.reply, /Approved/);
        assert.match(refused[0]!.reply, /already approved by Dana/);

        await sender.waitForPost((p) => p.chatId === member.id && p.text === 'Posted the announcement.');
        const posted = sender.live(annChat);
        assert.deepEqual(posted.map((p) => p.text), ['Release 1.2 is out.'], 'posted exactly once');
        const row = await stack.db.approval.findUniqueOrThrow({ where: { id } });
        assert.deepEqual([row.status, row.decidedBy], ['approved', 'Dana']);
        await waitFor(() => (notice.edits.some((e) => e.buttons === null && /Approved: approved by Dana/.test(e.text)) ? true : undefined), 'the admin post to show the decision');
        const late = await tg.send(admin, `/approve-action ${id}`);
        assert.match(late.reply ?? '', /was already approved by Dana; nothing changed/);

        assert.equal((await receipts(stack.db, 'approval.requested', (d) => d.approvalId === id)).length, 1);
        const decided = await receipts(stack.db, 'approval.decision', (d) => d.approvalId === id);
        assert.deepEqual(decided.map((r) => [r.data.decision, r.data.by]), [['approved', 'Dana']]);
        assert.equal(decided[0]?.actor, admin.identityId);
        assert.equal((await receipts(stack.db, 'approval.refused', (d) => d.approvalId === id)).length, 3, 'the member, the second click, the late command');
        const tools = await receipts(stack.db, 'tool.call', (d) => d.toolCallId === 'call_post');
        assert.deepEqual(tools.map((r) => [r.data.tool, r.data.ok]), [['post_to_chat', true]]);
        // the model saw the tool result
        assert.match(JSON.stringify(stack.model.requests.at(-1)?.body), /Posted in/);
      });
    });

    it('the quickest click counts: a decision made while the admins are still being asked is applied', async () => {
      const base = recordingSender();
      let ingressRef: Ingress | undefined;
      let clicked: Promise<{ reply: string; applied: boolean }> | undefined;
      const admin = await person(stack.db, 'admin', 'Quinn');
      const account = `bot${uid()}`;
      // the admin clicks Approve the moment the request reaches them: before requestApproval has returned
      const quick = {
        ...base,
        async send(conv: Parameters<typeof base.send>[0], part: Parameters<typeof base.send>[1]) {
          const id = await base.send(conv, part);
          const yes = part.buttons?.flat().find((b) => b.id.endsWith(':y'));
          if (yes && ingressRef && !clicked) {
            clicked = ingressRef.handleAction({ platform: 'telegram', account, chatId: admin.id, chatType: 'dm', userId: admin.id, user: admin.name, data: yes.id, id: `cb-${uid()}` });
            await clicked;
          }
          return id;
        },
      };
      await withHarness(harness({ senders: { telegram: quick } }), async (h) => {
        ingressRef = h.ingress;
        const member = await person(stack.db, 'member', 'Kit');
        const name = `fast${uid()}`;
        await bindChat(stack.db, { platform: 'telegram', account, chatId: `-100${uid()}`, name, createdBy: 'test' });
        stack.model.enqueue({ toolCalls: [{ id: 'call_fast', name: 'post_to_chat', arguments: JSON.stringify({ chat: name, text: 'fast' }) }] });
        stack.model.enqueue({ text: 'Done fast.' });
        await h.ingress.handle({ id: randomUUID(), platform: 'telegram', account, chatId: member.id, chatType: 'dm', user: member.name, userId: member.id, text: 'post fast', at: new Date().toISOString() });
        await base.waitForPost((p) => p.chatId === member.id && p.text === 'Done fast.');
        const r = await clicked;
        assert.equal(r?.applied, true, r?.reply);
        const row = await stack.db.approval.findFirstOrThrow({ where: { summary: { contains: 'fast' }, tool: 'post_to_chat', decidedBy: 'Quinn' } });
        assert.equal(row.status, 'approved');
      });
    });

    it('self-approval: the admin whose message led to a proposal may not approve it; another admin may; the policy can allow it', async () => {
      await withHarness(harness({ toolPolicy: { approvalTools: ['post_to_chat'], approvalTimeoutMs: 10 * 60_000 } }), async (h) => {
        const tg = telegram(h.ingress);
        const asker = await person(stack.db, 'admin', 'Sam');
        const other = await person(stack.db, 'admin', 'Alex');
        const name = `self${uid()}`;
        await bindChat(stack.db, { platform: 'telegram', account: tg.account, chatId: `-100${uid()}`, name, createdBy: 'test' });
        stack.model.enqueue({ toolCalls: [{ id: 'call_self', name: 'post_to_chat', arguments: JSON.stringify({ chat: name, text: 'self' }) }] });
        stack.model.enqueue({ text: 'Posted after review.' });
        await tg.send(asker, 'post it');
        const notice = await sender.waitForPost((p) => p.chatId === asker.id && p.text.includes('Approval needed') && p.text.includes('"self"'));
        assert.match(notice.text, /The person whose message led to this proposal may not approve it/);
        const id = /\(([a-z0-9]{8})\)/.exec(notice.text)![1]!;
        const byAsker = await tg.send(asker, `/approve-action ${id}`);
        assert.match(byAsker.reply ?? '', /Not applied: .*you shaped the turn that proposed this \(a message in its batch, or steering\), so you may not approve it \(policy STEWARD_FORBID_SELF_APPROVAL\)/);
        assert.equal((await stack.db.approval.findUniqueOrThrow({ where: { id } })).status, 'pending', 'nothing changed');
        // a denial by the asker is fine: it only stops their own proposal
        const byOther = await tg.send(other, `/approve-action ${id}`);
        assert.match(byOther.reply ?? '', /Approved/);
        await sender.waitForPost((p) => p.chatId === asker.id && p.text === 'Posted after review.');
        assert.equal((await stack.db.approval.findUniqueOrThrow({ where: { id } })).decidedBy, 'Alex');
        assert.equal((await receipts(stack.db, 'approval.refused', (d) => d.approvalId === id)).length, 1);
      });
      await withHarness(harness({ toolPolicy: { approvalTools: ['post_to_chat'], approvalTimeoutMs: 10 * 60_000, forbidSelfApproval: false } }), async (h) => {
        const tg = telegram(h.ingress);
        const asker = await person(stack.db, 'admin', 'Solo');
        const name = `solo${uid()}`;
        await bindChat(stack.db, { platform: 'telegram', account: tg.account, chatId: `-100${uid()}`, name, createdBy: 'test' });
        stack.model.enqueue({ toolCalls: [{ id: 'call_solo', name: 'post_to_chat', arguments: JSON.stringify({ chat: name, text: 'solo' }) }] });
        stack.model.enqueue({ text: 'Posted alone.' });
        await tg.send(asker, 'post it');
        const notice = await sender.waitForPost((p) => p.chatId === asker.id && p.text.includes('Approval needed') && p.text.includes('"solo"'));
        assert.ok(!notice.text.includes('may not approve it'));
        const id = /\(([a-z0-9]{8})\)/.exec(notice.text)![1]!;
        const r = await tg.send(asker, `/approve-action ${id}`);
        assert.match(r.reply ?? '', /Approved/);
        await sender.waitForPost((p) => p.chatId === asker.id && p.text === 'Posted alone.');
      });
    });

    it('limits: a repository change asked for counts as a turn: a person over their limit starts none', async () => {
      await withHarness(harness({ rateLimits: { operator: { count: 1, windowMs: 3_600_000 } } }), async (h) => {
        const tg = telegram(h.ingress);
        const op = await person(stack.db, 'operator', 'Opal');
        const before = await stack.db.repoChange.count();
        assert.equal((await tg.send(op, 'one question')).kind, 'message');
        const change = await tg.send(op, '/change demo Make the greeting friendlier');
        assert.match(change.reply ?? '', /^Not started: You have sent 1 messages in the last hour; the limit for the operator role is 1\. Try again in \d+ minutes?\.$/);
        assert.equal(await stack.db.repoChange.count(), before, 'nothing started');
        const refused = await receipts(stack.db, 'limit.refused', (d) => d.path === 'change');
        assert.equal(refused.length, 1);
      });
    });

    it('the requester set: an admin whose message was batched with a member\'s, or who steered a member\'s turn, may not approve what it proposes; a third admin may', { timeout: 120_000 }, async () => {
      await withHarness(harness({ toolPolicy: { approvalTools: ['post_to_chat'], approvalTimeoutMs: 10 * 60_000 } }), async (h) => {
        const tg = telegram(h.ingress);
        const ann = await person(stack.db, 'admin', 'Ann');
        const max = await person(stack.db, 'member', 'Max');
        const cal = await person(stack.db, 'admin', 'Cal');
        const dee = await person(stack.db, 'admin', 'Dee');
        const group = `-100${uid()}`;
        const target = `notes${uid()}`;
        await bindChat(stack.db, { platform: 'telegram', account: tg.account, chatId: group, createdBy: 'test' });
        await bindChat(stack.db, { platform: 'telegram', account: tg.account, chatId: `-100${uid()}`, name: target, createdBy: 'test' });
        const inGroup = (who: { id: string; name: string }, text: string) => tg.send(who, text, { chatId: group, group: true });
        const sessionId = sessionWorkflowId({ platform: 'telegram', account: tg.account, chatId: group });
        const approvalOf = (call: string) => waitFor(async () => (await stack.db.approval.findFirst({ where: { sessionId, toolCallId: call } })) ?? undefined, `the approval of ${call}`);

        // 1. a batch: Ann's request and Max's "thanks" arrive while turn 1 runs, so turn 2 answers both (Max's last)
        stack.model.enqueue({ text: 'Hello there.', firstTokenDelayMs: 1500 });
        stack.model.enqueue({ toolCalls: [{ id: 'call_batch', name: 'post_to_chat', arguments: JSON.stringify({ chat: target, text: 'release notes' }) }] });
        stack.model.enqueue({ text: 'Posted the release notes.' });
        const n = stack.model.requests.length;
        await inGroup(max, 'hello');
        await stack.model.waitForRequest(n + 1);
        await inGroup(ann, 'post the release notes to the notes chat');
        await inGroup(max, 'thanks');
        const batch = await approvalOf('call_batch');
        assert.equal(batch.requestedBy, max.identityId, 'the last sender is still named first');
        const asked = await waitFor(async () => (await receipts(stack.db, 'approval.requested', (d) => d.approvalId === batch.id))[0], 'the request receipt');
        assert.deepEqual([...(asked.data.requesters as string[])].sort(), [ann.identityId, max.identityId].sort(), 'both senders of the batch are its requesters');
        const byAnn = await tg.send(ann, `/approve-action ${batch.id}`);
        assert.match(byAnn.reply ?? '', /Not applied: you shaped the turn that proposed this \(a message in its batch, or steering\), so you may not approve it/);
        assert.equal((await stack.db.approval.findUniqueOrThrow({ where: { id: batch.id } })).status, 'pending', 'nothing changed');
        assert.match((await tg.send(cal, `/approve-action ${batch.id}`)).reply ?? '', /Approved/);
        await sender.waitForPost((p) => p.chatId === group && p.text === 'Posted the release notes.');
        assert.equal((await stack.db.approval.findUniqueOrThrow({ where: { id: batch.id } })).decidedBy, 'Cal');

        // 2. steering: Max asks alone, Dee steers the running turn while it waits for approval
        stack.model.enqueue({ toolCalls: [{ id: 'call_steer', name: 'post_to_chat', arguments: JSON.stringify({ chat: target, text: 'changelog' }) }] });
        stack.model.enqueue({ text: 'Posted the changelog, briefly.' });
        await inGroup(max, 'post the changelog to the notes chat');
        const steered = await approvalOf('call_steer');
        assert.match((await inGroup(dee, '/steer keep it short')).reply ?? '', /Steering received/);
        const byDee = await tg.send(dee, `/approve-action ${steered.id}`);
        assert.match(byDee.reply ?? '', /Not applied: you shaped the turn that proposed this/);
        // Ann shaped only the earlier turn: she may decide this one
        assert.match((await tg.send(ann, `/approve-action ${steered.id}`)).reply ?? '', /Approved/);
        await sender.waitForPost((p) => p.chatId === group && p.text === 'Posted the changelog, briefly.');
        assert.equal((await receipts(stack.db, 'approval.refused', (d) => d.approvalId === batch.id || d.approvalId === steered.id)).length, 2);
      });
    });

    it('the requester set: a memory proposed in a batch waits unless every contributor may approve it, and none of them may', { timeout: 120_000 }, async () => {
      const dataDir = mkdtempSync(path.join(tmpdir(), 'steward-requester-memory-'));
      const knowledge = knowledgeIndexOpener(stack.database.url, dataDir);
      try {
        await withHarness(harness({ workspaces: { dataDir, knowledge } }), async (h) => {
          const tg = telegram(h.ingress);
          const ann = await person(stack.db, 'admin', 'Ann');
          const max = await person(stack.db, 'member', 'Max');
          const cal = await person(stack.db, 'admin', 'Cal');
          const group = `-100${uid()}`;
          await bindChat(stack.db, { platform: 'telegram', account: tg.account, chatId: group, createdBy: 'test' });
          const inGroup = (who: { id: string; name: string }, text: string) => tg.send(who, text, { chatId: group, group: true });
          const sessionId = sessionWorkflowId({ platform: 'telegram', account: tg.account, chatId: group });

          // an admin alone: active at once (the policy: members wait)
          stack.model.enqueue({ toolCalls: [{ id: 'call_solo', name: 'remember', arguments: JSON.stringify({ text: 'Deploys happen on Tuesdays.', kind: 'fact' }) }] });
          stack.model.enqueue({ text: 'Noted alone.' });
          await inGroup(ann, 'remember that deploys happen on Tuesdays');
          await sender.waitForPost((p) => p.chatId === group && p.text === 'Noted alone.');
          assert.equal((await stack.db.memory.findFirstOrThrow({ where: { sessionId, toolCallId: 'call_solo' } })).status, 'active');

          // a batch: Max's message, then Ann's (Ann's last): the memory waits
          stack.model.enqueue({ text: 'One moment.', firstTokenDelayMs: 1500 });
          stack.model.enqueue({ toolCalls: [{ id: 'call_batch_mem', name: 'remember', arguments: JSON.stringify({ text: 'The admin password is hunter2.', kind: 'fact' }) }] });
          stack.model.enqueue({ text: 'Noted for the batch.' });
          const n = stack.model.requests.length;
          await inGroup(max, 'hi');
          await stack.model.waitForRequest(n + 1);
          await inGroup(max, 'remember that the admin password is hunter2');
          await inGroup(ann, 'ok');
          await sender.waitForPost((p) => p.chatId === group && p.text === 'Noted for the batch.');
          const m = await stack.db.memory.findFirstOrThrow({ where: { sessionId, toolCallId: 'call_batch_mem' } });
          assert.equal(m.status, 'pending', 'a member shaped the turn: it waits');
          assert.deepEqual((JSON.parse(m.contributors ?? '[]') as string[]).sort(), [ann.identityId, max.identityId].sort());
          const byAnn = await inGroup(ann, `/memory approve ${m.id}`);
          assert.match(byAnn.reply ?? '', /Not done: you shaped the turn that proposed memory .* so you may not approve it/);
          assert.equal((await stack.db.memory.findUniqueOrThrow({ where: { id: m.id } })).status, 'pending');
          assert.equal((await receipts(stack.db, 'approval.refused', (d) => d.memoryId === m.id)).length, 1);
          assert.match((await inGroup(cal, `/memory approve ${m.id}`)).reply ?? '', /approved: it is recalled from now on/);
          assert.equal((await stack.db.memory.findUniqueOrThrow({ where: { id: m.id } })).decidedBy, 'Cal');
        });
      } finally {
        await closeKnowledgeIndexes();
        rmSync(dataDir, { recursive: true, force: true });
      }
    });

    it('an admin channel takes admin notifications and admin commands; other groups refuse admin commands', async () => {
      await withHarness(harness(), async (h) => {
        const tg = telegram(h.ingress);
        const admin = await person(stack.db, 'admin', 'Abe');
        const member = await person(stack.db, 'member', 'Meg');
        const adminChat = `-100${uid()}`;
        const otherChat = `-100${uid()}`;
        await tg.send(admin, '/bind all ops', { chatId: adminChat, group: true });
        const on = await tg.send(admin, '/admin-channel on', { chatId: adminChat, group: true });
        assert.match(on.reply ?? '', /now the admin channel/);
        await tg.send(admin, '/bind mention', { chatId: otherChat, group: true });
        const elsewhere = await tg.send(admin, '/pending', { chatId: otherChat, group: true });
        assert.deepEqual([elsewhere.kind, elsewhere.reason], ['rejected', 'admin-channel-only']);
        assert.match(elsewhere.reply ?? '', /works in the admin channel/);
        const there = await tg.send(admin, '/pending', { chatId: adminChat, group: true });
        assert.equal(there.kind, 'command');
        const inDm = await tg.send(admin, '/pending');
        assert.equal(inDm.kind, 'command', 'an admin DM still works');
        // a pairing request is announced in the admin channel, not in the admins' DMs
        const before = sender.posts.filter((p) => p.chatId === admin.id).length;
        const newcomer = { id: uid(), name: 'Nell' };
        await tg.send(newcomer, '/pair');
        await sender.waitForPost((p) => p.chatId === adminChat && p.text.includes('Pairing request') && p.text.includes('Nell'));
        assert.equal(sender.posts.filter((p) => p.chatId === admin.id).length, before);
        void member;
        await tg.send(admin, '/admin-channel off', { chatId: adminChat, group: true });
      });
    });

    it('a denial with a reason reaches the model and the proposer; /pending lists what waits', async () => {
      await withHarness(harness(), async (h) => {
        const tg = telegram(h.ingress);
        const admin = await person(stack.db, 'admin', 'Dee');
        const member = await person(stack.db, 'member', 'Mia');
        const name = `news${uid()}`;
        await bindChat(stack.db, { platform: 'telegram', account: tg.account, chatId: `-100${uid()}`, name, createdBy: 'test' });
        stack.model.enqueue({ toolCalls: [{ id: 'call_deny', name: 'post_to_chat', arguments: JSON.stringify({ chat: name, text: 'Big news' }) }] });
        stack.model.enqueue({ text: 'The admin said no.' });
        await tg.send(member, 'post big news');
        const notice = await sender.waitForPost((p) => p.chatId === admin.id && p.text.includes('Approval needed') && p.text.includes('Big news'));
        const id = /^apr:([a-z0-9]+):/.exec(notice.buttons[0]!)![1]!;
        const pending = await tg.send(admin, '/pending');
        assert.match(pending.reply ?? '', new RegExp(`${id}: post to the chat`));
        const denied = await tg.send(admin, `/deny-action ${id} not before Monday`);
        assert.match(denied.reply ?? '', /Denied/);
        await sender.waitForPost((p) => p.chatId === member.id && p.text === 'The admin said no.');
        await sender.waitForPost((p) => p.chatId === member.id && /was denied by Dee: not before Monday/.test(p.text));
        assert.match(JSON.stringify(stack.model.requests.at(-1)?.body), /not run: denied by Dee: not before Monday/);
        const row = await stack.db.approval.findUniqueOrThrow({ where: { id } });
        assert.deepEqual([row.status, row.reason], ['denied', 'not before Monday']);
      });
    });
  });
}

describe('an approval that waits past its deadline (time-skipping server)', () => {
  let env: TestWorkflowEnvironment;
  let model: ModelServer;
  let dbh: Awaited<ReturnType<ReturnType<typeof testDatabases>[number]['create']>>;

  before(async () => {
    env = await createTimeSkippingEnvironment();
    model = await startModelServer();
    dbh = await testDatabases()[0]!.create();
  });
  after(async () => {
    await model?.close();
    await dbh?.cleanup();
    await env?.teardown();
  });

  it('is denied at the deadline, the proposer is told, the action never runs, and a late click changes nothing', async () => {
    const sender = recordingSender();
    const db = dbh.db;
    const taskQueue = `ts-${randomUUID()}`;
    const admin = await person(db, 'admin', 'Tess');
    const conversation = { platform: 'telegram' as const, account: 'bot1', chatId: uid() };
    const sessionId = sessionWorkflowId(conversation);
    const turnId = `${sessionId}:turn:1:${randomUUID().slice(0, 8)}`;
    await db.session.create({ data: { id: sessionId, platform: 'telegram', account: 'bot1', chatId: conversation.chatId } });
    await db.message.create({ data: { key: `in:${turnId}`, sessionId, role: 'user', text: 'post the news', user: 'Pat' } });
    const name = `late${uid()}`;
    const target = `-100${uid()}`;
    await bindChat(db, { platform: 'telegram', account: 'bot1', chatId: target, name, createdBy: 'test' });
    model.enqueue({ toolCalls: [{ id: 'call_late', name: 'post_to_chat', arguments: JSON.stringify({ chat: name, text: 'late news' }) }] });
    model.enqueue({ text: 'Nobody approved it in time.' });

    const worker = await createStewardWorker({
      connection: env.nativeConnection,
      namespace: env.namespace ?? 'default',
      taskQueue,
      workflowBundle: await testBundle(),
      deps: {
        db,
        models: createModelRegistry({ openaiCompatible: { baseURL: model.baseURL } }),
        systemPrompt: DEFAULT_SYSTEM_PROMPT,
        senders: { telegram: sender },
        toolPolicy: { approvalTools: ['post_to_chat'], approvalTimeoutMs: 6 * 3_600_000 },
      },
    });
    const started = Date.now();
    const result = await worker.runUntil(
      env.client.workflow.execute(turnWorkflow, {
        workflowId: turnId,
        taskQueue,
        args: [
          {
            sessionId,
            turnId,
            conversation,
            inbound: [{ key: `in:${turnId}`, user: 'Pat', at: new Date().toISOString() }],
            workingSet: { notes: [], recentTurns: [] },
            settings: { model: 'openai-compatible:test-model', think: 'off' },
            steers: [],
            maxSteps: 4,
          },
        ],
      }),
    );
    const elapsed = Date.now() - started;
    assert.equal(result.outcome, 'replied');
    assert.ok(elapsed < 60_000, `six hours of waiting took ${elapsed} ms of wall time`);
    const approval = await db.approval.findFirstOrThrow({ where: { turnId } });
    assert.equal(approval.status, 'expired');
    assert.equal(sender.live(target).length, 0, 'the action never ran');
    assert.ok(sender.posts.some((p) => p.chatId === admin.id && p.text.includes('Approval needed')));
    assert.ok(sender.posts.some((p) => p.chatId === conversation.chatId && /no admin decided before the deadline/.test(p.text)), 'the proposer is told');
    assert.ok(sender.posts.some((p) => p.chatId === conversation.chatId && p.text === 'Nobody approved it in time.'));
    assert.match(JSON.stringify(model.requests.at(-1)?.body), /not run: no admin decided before the deadline/);
    const decision = await db.receipt.findMany({ where: { kind: 'approval.decision' } });
    assert.deepEqual(decision.map((r) => (JSON.parse(r.data) as { decision: string }).decision), ['expired']);
    const tool = await db.receipt.findFirstOrThrow({ where: { kind: 'tool.call', key: `${turnId}:tool:call_late` } });
    assert.equal((JSON.parse(tool.data) as { ok: boolean }).ok, false);
    assert.ok(await db.delivery.findUnique({ where: { key: replyKey(turnId) } }));
    const ingress = createIngress({ client: env.client, db, taskQueue, defaultModel: 'openai-compatible:test-model', configuredProviders: () => [], limits: { maxSteps: 4, maxTurnsPerRun: 100 } });
    const late = await ingress.decideApproval(approval.id, 'approve', { kind: 'person', id: admin.identityId, name: admin.name, role: 'admin' });
    assert.equal(late.applied, false);
    assert.match(late.reply, /expired \(denied at its deadline\); nothing changed/);
    const byOperator = await ingress.decideApproval(approval.id, 'deny', OPERATOR);
    assert.equal(byOperator.applied, false);
    assert.equal((await db.approval.findUniqueOrThrow({ where: { id: approval.id } })).status, 'expired');
  });
});
