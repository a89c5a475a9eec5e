/**
 * Random inbound traffic through the real ingress, the real workflows on the Temporal dev
 * server and a real database: no input crashes ingress or the worker, refused and ignored
 * input changes nothing (no transcript entry, no workflow), and the worker stays healthy.
 * Bounded: a fixed number of runs, each with its own chat.
 */
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { describe, it } from 'node:test';
import { WorkflowNotFoundError } from '@temporalio/client';
import fc from 'fast-check';
import { bindChat, createIdentity } from '../../domain/governance.js';
import type { InboundMessage } from '../../common/schemas.js';
import { recordingSender } from '../helpers/recording-sender.js';
import { useStack, withHarness } from '../helpers/steward.js';

describe('ingress under random input (properties, real stack)', () => {
  const stack = useStack();

  it('never throws; refused and ignored messages leave no transcript entry and start no workflow', async () => {
    const { env, model, db } = stack;
    const dbh = { db };
    const sender = recordingSender();
    await withHarness({ env, db: dbh.db, providers: { openaiCompatible: { baseURL: model.baseURL } }, senders: { telegram: sender, discord: sender } }, async (h) => {
      const member = String(randomInt(1e8, 1e9));
      const viewer = String(randomInt(1e8, 1e9));
      await createIdentity(dbh.db, { name: 'Member', role: 'member', accounts: [{ platform: 'telegram', userId: member }, { platform: 'discord', userId: member }], createdBy: 'test' });
      await createIdentity(dbh.db, { name: 'Viewer', role: 'viewer', accounts: [{ platform: 'telegram', userId: viewer }], createdBy: 'test' });
      const boundGroup = `-100${randomInt(1e8, 1e9)}`;
      await bindChat(dbh.db, { platform: 'telegram', account: '*', chatId: boundGroup, createdBy: 'test' });
      let n = 0;
      const outcomes = new Map<string, number>();
      await fc.assert(
        fc.asyncProperty(
          fc.record({
            platform: fc.constantFrom('telegram', 'discord', 'openharness', 'http'),
            sender: fc.constantFrom(member, viewer, 'stranger', '12345', '', 'operator'),
            group: fc.constantFrom(false, true, true),
            bound: fc.boolean(),
            addressed: fc.boolean(),
            text: fc.oneof(
              fc.string({ unit: 'binary', maxLength: 120 }),
              fc.constantFrom('/pair', '/status', '/help', '/whoami', '/pending', '/approve ABCDEFGH member', '/approve-action zzzzzz', '/bind all', '/unbind', '/admin-channel on', '/stop', '/new', '/steer faster', '/model x', '/think high', '/deny-action q', '/', '/ok', '   ', ''),
            ),
            withFile: fc.boolean(),
          }),
          async (c) => {
            const idx = ++n;
            const chatId = c.group ? (c.bound ? boundGroup : `-9${idx}${randomInt(1e6, 1e7)}`) : `${c.sender || "u"}-${idx}`;
            const msg = {
              id: `fz-${idx}-${randomInt(1e9)}`,
              platform: c.platform,
              account: 'acct',
              chatId,
              chatType: c.group ? 'group' : 'dm',
              addressed: c.addressed,
              user: 'Fuzz',
              ...(c.sender ? { userId: c.sender } : {}),
              text: c.text,
              at: new Date().toISOString(),
            } as InboundMessage;
            const files = c.withFile ? [{ name: '../../etc/passwd', mediaType: 'application/x-sh', size: 10, fetch: async () => Buffer.from('#!/bin/sh') }] : undefined;
            const r = await h.ingress.handle(msg, files ? { attachments: files } : {});
            outcomes.set(`${r.kind}${r.reason ? `:${r.reason}` : ''}`, (outcomes.get(`${r.kind}${r.reason ? `:${r.reason}` : ''}`) ?? 0) + 1);
            assert.ok(['message', 'command', 'rejected', 'ignored'].includes(r.kind));
            const key = `in:${msg.platform}:${msg.account}:${msg.chatId}:${msg.id}`;
            const recorded = await dbh.db.message.count({ where: { key } });
            if (c.platform === 'http') assert.notEqual(r.reason, 'unbound-chat');
            if (r.kind === 'rejected' || r.kind === 'ignored') {
              assert.equal(recorded, 0, `a ${r.kind} message is not recorded (${r.reason ?? ''})`);
              if (r.kind === 'rejected') assert.ok(r.reason, 'a refusal names its reason');
              if (r.reason === 'invalid' || r.reason === 'unknown-sender' || r.reason === 'unbound-chat') {
                // nothing started for a conversation that never had a session
                const exists = await env.client.workflow
                  .getHandle(r.workflowId)
                  .describe()
                  .then(() => true)
                  .catch((err: unknown) => {
                    if (err instanceof WorkflowNotFoundError) return false;
                    throw err;
                  });
                if (!(c.group && c.bound)) assert.equal(exists, false, `no workflow for ${r.workflowId}`);
              }
            } else {
              // an unknown sender's /pair gets a code, but their text is never stored
              const known = c.platform === 'http' || (c.sender === member && (c.platform === 'telegram' || c.platform === 'discord')) || (c.sender === viewer && c.platform === 'telegram') || (c.platform === 'openharness' && c.sender === 'operator');
              assert.equal(recorded, known ? 1 : 0, `${r.kind} from a ${known ? 'known' : 'unknown'} sender`);
            }
          },
        ),
        { numRuns: 120 },
      );
      // the worker is still healthy: a known member's DM still gets an answer
      const ok = await h.ingress.handle({ id: `final-${randomInt(1e9)}`, platform: 'telegram', account: 'acct', chatId: member, chatType: 'dm', user: 'Member', userId: member, text: 'are you there?', at: new Date().toISOString() });
      assert.equal(ok.kind, 'message');
      await sender.waitForPost((p) => p.chatId === member && p.text.startsWith('echo:') && p.text.includes('are you there?'), 30_000);
      // fail closed: nothing but how to pair was ever said to an unknown sender or in an unbound chat
      for (const p of sender.posts) {
        if (/^(stranger|12345|u)-/.test(p.chatId)) assert.match(p.text, /Send \/pair|Your pairing code|asked to pair/, `said to an unknown sender: ${p.text}`);
        if (/^-9/.test(p.chatId)) assert.fail(`said in an unbound group: ${p.text}`);
      }
      assert.equal(h.worker.getState(), 'RUNNING');
      console.log(`fuzzed ingress outcomes: ${JSON.stringify(Object.fromEntries(outcomes))}`);
    });
  });
});
