/**
 * What the console's Changes page reads from the change service, on a real database (SQLite;
 * PostgreSQL too with STEWARD_TEST_PG_URL): the list filtered by status and phase, newest first;
 * `events(id)`, the change's stages from its receipts in order, past the other receipts of its
 * run (paged); and the answer's role rule for a person (the `/answer` command's), refused before
 * anything is read or changed. The Temporal client is not reached by any of these calls.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it } from 'node:test';
import type { Client } from '@temporalio/client';
import { writeReceipt, writeReceipts } from '../../domain/receipts.js';
import * as store from '../../domain/store/changes.js';
import { ChangeInputError, createChangeService } from '../../services/changes.js';
import { testDatabases } from '../helpers/db.js';

for (const kind of testDatabases()) {
  describe(`change service reads for the console (${kind.name})`, () => {
    it('lists by status and phase, newest first, and tells a change’s stages from its receipts', async () => {
      const tdb = await kind.create();
      try {
        const { db } = tdb;
        const service = createChangeService({ client: undefined as unknown as Client, db, taskQueue: 'unused' });
        const by = { id: 'operator', name: 'the operator' };
        const ids = ['chg-00000000000a', 'chg-00000000000b', 'chg-00000000000c'];
        for (const id of ids) {
          await store.createChange(db, { id, repo: 'demo', request: `request ${id}`, baseBranch: 'main', requestedBy: by });
          await sleep(5); // distinct creation times
        }
        await store.setChangePhase(db, ids[0]!, 'clarify', { question: 'Which files?' });
        await store.setChangePhase(db, ids[1]!, 'approval');
        await store.recordChangeEnd(db, ids[2]!, { status: 'refused', phase: 'validate', report: {} });

        const list = async (f: Parameters<typeof service.listChanges>[0]) => (await service.listChanges(f)).map((c) => c.id);
        assert.deepEqual(await list({}), [...ids].reverse());
        assert.deepEqual(await list({ status: 'running' }), [ids[1], ids[0]]);
        assert.deepEqual(await list({ status: 'running', phase: 'clarify' }), [ids[0]]);
        assert.deepEqual(await list({ status: 'running', phase: 'approval' }), [ids[1]]);
        assert.deepEqual(await list({ status: 'refused' }), [ids[2]]);
        assert.deepEqual(await list({ status: 'done' }), []);

        // the stages, among many other receipts of the run (a page holds 1000)
        const id = ids[2]!;
        await writeReceipt(db, { kind: 'change.start', workflowId: id, actor: 'operator', data: { changeId: id, base: 'main', from: 'api' } });
        await writeReceipts(db, Array.from({ length: 1100 }, (_, i) => ({ kind: 'model.call' as const, workflowId: id, data: { i } })));
        await writeReceipt(db, { kind: 'gate.verdict', workflowId: id, data: { changeId: id, verdict: 'fail', reasons: ['protected path'] } });
        await writeReceipt(db, { kind: 'change.end', workflowId: id, data: { changeId: id, status: 'refused', reason: 'protected path' } });
        await writeReceipt(db, { kind: 'change.end', workflowId: ids[0]!, data: { changeId: ids[0] } });
        const events = await service.events(id);
        assert.deepEqual(events?.map((e) => e.kind), ['change.start', 'gate.verdict', 'change.end']);
        assert.deepEqual(events?.[1]?.data.reasons, ['protected path']);
        assert.equal(events?.[0]?.actor, 'operator');
        assert.ok(events?.every((e) => !Number.isNaN(Date.parse(e.at))));
        assert.equal(await service.events('chg-0000000000ff'), undefined);
      } finally {
        await tdb.cleanup();
      }
    });

    it("refuses a person's answer below the /answer command's role, before anything is read", async () => {
      const tdb = await kind.create();
      try {
        const service = createChangeService({ client: undefined as unknown as Client, db: tdb.db, taskQueue: 'unused' });
        await assert.rejects(
          service.answer('chg-00000000000a', { text: 'only greeting.txt' }, { id: 'p1', name: 'Vera', role: 'viewer' }),
          (err) => err instanceof ChangeInputError && err.status === 409 && /needs the member role; nothing changed/.test(err.message),
        );
        // a member passes the rule and reaches the change (none here: 404)
        await assert.rejects(service.answer('chg-00000000000a', { text: 'only greeting.txt' }, { id: 'p2', name: 'Max', role: 'member' }), (err) => err instanceof ChangeInputError && err.status === 404);
        // bad input is 400 whoever asks
        await assert.rejects(service.answer('chg-00000000000a', { text: '  ' }, { id: 'p1', name: 'Vera', role: 'viewer' }), (err) => err instanceof ChangeInputError && err.status === 400);
      } finally {
        await tdb.cleanup();
      }
    });
  });
}
