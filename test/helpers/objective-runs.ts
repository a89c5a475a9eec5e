/** Waiting for an objective's runs in the objective suites. */
import type { Db } from '../../domain/db.js';
import { waitFor } from './steward.js';

/** `db` is read at each call: the test stack's database exists only inside its tests. */
export function objectiveRuns(db: () => Db) {
  const runsOf = (objectiveId: string) => db().objectiveRun.findMany({ where: { objectiveId }, orderBy: { createdAt: 'asc' } });
  /** At least `n` runs, none of them still running. */
  const settled = (objectiveId: string, n: number, timeoutMs = 30_000) =>
    waitFor(async () => {
      const runs = await runsOf(objectiveId);
      return runs.length >= n && runs.every((r) => r.status !== 'running') ? runs : undefined;
    }, `${n} settled runs of ${objectiveId}`, timeoutMs);
  return { runsOf, settled };
}
