/**
 * Chaos, short form (the full form is `node --import tsx scripts/chaos.ts`): real worker
 * processes (`steward worker --queues ...`: two for chat, one for objectives and repo work), a
 * persistent Temporal dev server, chat turns in three chats, a repo change and an objective
 * every 6 s, while a seeded PRNG injects 6 kill -9 of workers (replaced at once), a SIGKILL and
 * restart of the Temporal dev server, a rolling restart of every worker and duplicate inbound
 * deliveries (the same message id twice at once, and again later). Afterwards every message
 * has exactly one reply and one outbox delivery, the change ended once in a patch that applies,
 * and no objective nominal time ran twice. The engine (test/chaos/chaos.ts) kills every child
 * process and removes its temporary directories in its `finally`.
 *
 * CHAOS_SEED repeats a run's fault sequence (the seed is printed).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { findTemporalCli } from '../../platform/temporal-server.js';
import { runChaos, summaryLine } from '../chaos/chaos.js';
import { needs } from '../helpers/requirements.js';

const seedEnv = process.env.CHAOS_SEED;
const seed = seedEnv !== undefined && /^\d{1,10}$/.test(seedEnv) ? Number(seedEnv) : undefined;

describe('chaos (short form)', { skip: findTemporalCli() ? await needs('bubblewrap') : 'no temporal CLI' }, () => {
  it('loses and doubles no turn through kills, a server restart, a rolling restart and duplicate deliveries', { timeout: 295_000 }, async () => {
    const r = await runChaos({
      ...(seed !== undefined ? { seed } : {}),
      kills: 6,
      serverRestarts: 1,
      rollingRestarts: 1,
      duplicates: 3,
      changes: 1,
      chats: 3,
      workerGroups: [
        { queues: 'interactive', count: 2 },
        { queues: 'background,repo', count: 1 },
      ],
      gapMs: [500, 1500],
      maxFaultMs: 200_000,
      settleMs: 60_000,
      // the test runner stops a file 300 s after its process started (scripts/test.sh): the
      // verdict and the clean-up fit before that
      budgetMs: 285_000 - Math.round(process.uptime() * 1000),
      log: (line) => console.log(line),
    });
    console.log(summaryLine(r));
    console.log(
      `chaos details: seed ${r.seed}, ${r.database}; kills mid-request ${r.killsMidRequest}; graceful stops ${r.gracefulClean}/${r.gracefulStops}; ` +
        `redelivered after an error ${r.redeliveredAfterError}; workers started ${r.workersStarted}; model requests ${r.modelRequests} (${r.modelRequestsAborted} cut off); ` +
        `objective runs ${r.objectiveRuns}; work trees left by kills ${r.leftoverWorkTrees}; faults ${(r.faultMs / 1000).toFixed(0)} s, all ${(r.durationMs / 1000).toFixed(0)} s`,
    );
    assert.deepEqual(r.problems, [], `seed ${r.seed}`);
    assert.ok(r.turnsSent >= 6, `turns sent: ${r.turnsSent}`);
    assert.equal(r.lost, 0);
    assert.equal(r.doubled, 0);
    assert.equal(r.deliveriesLost, 0);
    assert.equal(r.deliveriesDoubled, 0);
    // every fault happened (the wall-time bound was not reached)
    assert.equal(r.kills, 6);
    assert.equal(r.serverRestarts, 1);
    assert.equal(r.rollingRestarts, 1);
    assert.equal(r.gracefulClean, r.gracefulStops);
    assert.ok(r.duplicates >= 3, `duplicates: ${r.duplicates}`);
    assert.equal(r.deduplicated, r.duplicates);
    assert.equal(r.changesOk, 1);
    assert.ok(r.objectiveRunsOk >= 1, `objective runs: ${r.objectiveRunsOk}`);
    assert.equal(r.objectiveRunsNotOk, 0);
    assert.equal(r.objectiveDuplicateNominal, 0);
  });
});
