/**
 * An objective run's end (or its skip) and its receipt are written in one transaction
 * (domain/store/objectives.ts): a reader that sees the run ended finds its receipt, a write that
 * fails part-way leaves neither, and a retried activity writes the receipt once.
 *
 * PostgreSQL runs when STEWARD_TEST_PG_URL is set (scripts/pg.sh start; scripts/pg.sh url).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { recordRunFinished, recordRunSkipped, recordRunStarted } from '../../domain/store/objectives.js';
import { testDatabases, type TestDatabase } from '../helpers/db.js';

for (const kind of testDatabases()) {
  describe(`objective run records (${kind.name})`, () => {
    let t: TestDatabase;
    before(async () => {
      t = await kind.create();
    });
    after(async () => t.cleanup());

    const receipts = (key: string) => t.db.receipt.findMany({ where: { key } });

    it("a run's end and its receipt commit together, or neither does; a retry writes the receipt once", async () => {
      const scheduledAt = new Date('2026-01-02T03:04:05.000Z');
      await recordRunStarted(t.db, { id: 'run-end', objectiveId: 'o1', scheduledAt, status: 'running', turnId: 'run-end:turn' });
      const started = await t.db.objectiveRun.findUniqueOrThrow({ where: { id: 'run-end' } });
      const key = 'objective-run:run-end:end';
      // a receipt that cannot be written: the run's end is rolled back with it
      const unwritable = { key, kind: 'objective.run' as const, data: { n: 1n } };
      await assert.rejects(recordRunFinished(t.db, 'run-end', { status: 'failed', outcome: 'error', error: 'boom' }, unwritable), /BigInt/);
      assert.equal((await t.db.objectiveRun.findUniqueOrThrow({ where: { id: 'run-end' } })).status, 'running');
      assert.equal((await receipts(key)).length, 0);

      const receipt = { key, kind: 'objective.run' as const, data: { objectiveId: 'o1', status: 'failed' } };
      await recordRunFinished(t.db, 'run-end', { status: 'failed', outcome: 'error', error: 'boom' }, receipt);
      await recordRunFinished(t.db, 'run-end', { status: 'failed', outcome: 'error', error: 'boom' }, receipt); // a retried activity
      const ended = await t.db.objectiveRun.findUniqueOrThrow({ where: { id: 'run-end' } });
      assert.deepEqual([ended.status, ended.outcome, ended.error, ended.turnId], ['failed', 'error', 'boom', 'run-end:turn']);
      assert.equal(ended.createdAt.getTime(), started.createdAt.getTime());
      assert.ok(ended.updatedAt.getTime() >= started.updatedAt.getTime());
      assert.deepEqual(
        (await receipts(key)).map((r) => JSON.parse(r.data) as unknown),
        [{ objectiveId: 'o1', status: 'failed' }],
      );
    });

    it('a skipped run and its receipt commit together, or neither does; a run recorded already keeps what was recorded', async () => {
      const key = 'objective-run:run-skip:skip';
      const scheduledAt = new Date('2026-01-02T03:04:05.000Z');
      await assert.rejects(recordRunSkipped(t.db, { id: 'run-skip', objectiveId: 'o1', scheduledAt }, { key, kind: 'objective.run', data: { n: 1n } }), /BigInt/);
      assert.equal(await t.db.objectiveRun.findUnique({ where: { id: 'run-skip' } }), null);
      assert.equal((await receipts(key)).length, 0);

      const before = Date.now();
      await recordRunSkipped(t.db, { id: 'run-skip', objectiveId: 'o1', scheduledAt, outcome: 'budget', error: 'skipped: budget b spent' }, { key, kind: 'objective.run', data: { skipped: 'first' } });
      await recordRunSkipped(t.db, { id: 'run-skip', objectiveId: 'o1', scheduledAt }, { key, kind: 'objective.run', data: { skipped: 'second' } });
      const row = await t.db.objectiveRun.findUniqueOrThrow({ where: { id: 'run-skip' } });
      assert.deepEqual([row.status, row.outcome, row.error, row.turnId, row.scheduledAt?.toISOString()], ['skipped', 'budget', 'skipped: budget b spent', null, scheduledAt.toISOString()]);
      assert.ok(row.createdAt.getTime() >= before - 1000 && row.createdAt.getTime() <= Date.now() + 1000, 'its times read back as the times written');
      assert.deepEqual((await receipts(key)).map((r) => JSON.parse(r.data) as unknown), [{ skipped: 'first' }]);
      // the run's list, ordered by createdAt, reads the directly written row as any other
      const listed = await t.db.objectiveRun.findMany({ where: { objectiveId: 'o1' }, orderBy: { createdAt: 'asc' } });
      assert.deepEqual(listed.map((r) => r.id), ['run-end', 'run-skip']);
    });
  });
}
