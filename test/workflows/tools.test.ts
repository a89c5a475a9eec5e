/**
 * The agent's safe tools through the real turn workflow: a note saved with save_note stays in
 * the task's working set (the next turn's prompt has it), a file made with send_file goes out
 * with the reply as a document, and an invalid call goes back to the model as an error
 * without running anything.
 */
import assert from 'node:assert/strict';
import { randomInt, randomUUID } from 'node:crypto';
import { describe, it } from 'node:test';
import { getBlobText } from '../../domain/blobs.js';
import { createIdentity } from '../../domain/governance.js';
import { recordingSender } from '../helpers/recording-sender.js';
import { useStack, withHarness } from '../helpers/steward.js';

describe('agent tools', () => {
  const stack = useStack();

  it('save_note keeps a note for the task, send_file sends a document with the reply, an invalid call is refused to the model', async () => {
    const { env, model, db } = stack;
    const dbh = { db };
    const sender = recordingSender();
    await withHarness({ env, db, providers: { openaiCompatible: { baseURL: model.baseURL } }, senders: { telegram: sender } }, async (h) => {
      const userId = String(randomInt(1e8, 1e9));
      await createIdentity(dbh.db, { name: 'Tom', role: 'member', accounts: [{ platform: 'telegram', userId }], createdBy: 'test' });
      const say = (text: string) =>
        h.ingress.handle({ id: randomUUID(), platform: 'telegram', account: 'bot', chatId: userId, chatType: 'dm', user: 'Tom', userId, text, at: new Date().toISOString() });

      model.enqueue({
        toolCalls: [
          { id: 'c1', name: 'save_note', arguments: JSON.stringify({ note: 'Tom wants weekly CSV reports' }) },
          { id: 'c2', name: 'send_file', arguments: JSON.stringify({ name: 'report.csv', content: 'week,count\n47,12\n', mediaType: 'text/csv' }) },
          { id: 'c3', name: 'send_file', arguments: JSON.stringify({ name: '../../etc/passwd', content: 'x' }) },
          { id: 'c4', name: 'launch_rockets', arguments: '{}' },
        ],
      });
      model.enqueue({ text: 'Here is your report.' });
      const n = model.requests.length;
      await say('make me the weekly report');
      const reply = await sender.waitForPost((p) => p.chatId === userId && p.text === 'Here is your report.');
      assert.deepEqual(reply.files, ['report.csv'], 'the file goes with the reply');
      const delivery = await dbh.db.message.findFirstOrThrow({ where: { text: 'Here is your report.' } });
      const files = JSON.parse(delivery.attachments ?? '[]') as Array<{ hash: string; name: string; size: number }>;
      assert.equal(files[0]?.name, 'report.csv');
      assert.equal(await getBlobText(dbh.db, files[0]!.hash), 'week,count\n47,12\n');

      // the second model request carried the four tool results
      const second = JSON.stringify(model.requests[n + 1]?.body);
      assert.match(second, /Saved the note/);
      assert.match(second, /report\.csv \(17 bytes\) is attached/);
      assert.match(second, /Invalid input for send_file: name/);
      assert.match(second, /There is no tool named launch_rockets/);
      const receipts = (await dbh.db.receipt.findMany({ where: { kind: 'tool.call' } })).map((r) => JSON.parse(r.data) as { tool: string; ok: boolean });
      assert.deepEqual(receipts.map((r) => [r.tool, r.ok]).sort(), [['launch_rockets', false], ['save_note', true], ['send_file', false], ['send_file', true]]);

      // the note is in the next turn's prompt
      model.enqueue({ text: 'Noted.' });
      const m = model.requests.length;
      await say('what do I like?');
      await sender.waitForPost((p) => p.chatId === userId && p.text === 'Noted.');
      assert.match(JSON.stringify(model.requests[m]?.body), /Notes you saved for this task:\\n- Tom wants weekly CSV reports/);
    });
  });
});
