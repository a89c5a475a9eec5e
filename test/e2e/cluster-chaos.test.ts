/**
 * The chaos suite's engine (test/chaos/chaos.ts) on the production shape: a `steward cluster`
 * of two Temporal nodes on PostgreSQL instead of a dev server. Chat turns in three chats, a
 * repo change and an objective every few seconds, while a seeded PRNG kills worker processes
 * (kill -9, replaced at once), rolls every worker over (each replaced, then SIGTERM), kills a
 * Temporal node (-9, a different one each time; `cluster up` brings it back) and delivers
 * messages twice. Every message has exactly one reply and one delivery: 0 lost, 0 doubled.
 *
 * CHAOS_SEED repeats a run's fault sequence (the seed is printed).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { alive } from '../../platform/cluster.js';
import { runChaos, summaryLine, type PersistentTemporal } from '../chaos/chaos.js';
import { clusterMissing, createTestCluster, type TestCluster } from '../helpers/cluster.js';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';
import { needs, strict } from '../helpers/requirements.js';

const seedEnv = process.env.CHAOS_SEED;
const seed = seedEnv !== undefined && /^\d{1,10}$/.test(seedEnv) ? Number(seedEnv) : undefined;
const missing = clusterMissing();
if (missing && strict()) {
  it('system requirement: a Temporal cluster', () => {
    throw new Error(`CI=true, so a missing part fails instead of skipping: ${missing}`);
  });
}

/** The cluster as the chaos engine's Temporal: a server fault is kill -9 of one node (each time the next), then `cluster up`. */
function clusterAsTemporal(c: TestCluster): PersistentTemporal {
  let victim = 0;
  const s = () => c.state();
  return {
    get address() {
      return `127.0.0.1:${s().frontend.port}`;
    },
    get namespace() {
      return s().namespace;
    },
    dbFile: '',
    get logFile() {
      return s().nodes[0]!.log;
    },
    get running() {
      return s().nodes.every((n) => alive(n.pid));
    },
    async start() {
      const spawnedAt = Date.now();
      const r = await c.upAsync();
      if (r.status !== 0) throw new Error(`cluster up failed: ${r.stderr}`);
      return { spawnedAt, readyAt: Date.now() };
    },
    async stop() {
      const node = s().nodes[victim++ % s().nodes.length]!;
      process.kill(node.pid!, 'SIGKILL');
      while (alive(node.pid)) await sleep(50);
    },
    logTail: (lines = 200) =>
      s()
        .nodes.map((n) => readFileSync(n.log, 'utf8').split('\n').slice(-lines).join('\n'))
        .join('\n'),
  };
}

describe('chaos on the cluster (two Temporal nodes on PostgreSQL)', { skip: missing ?? (await needs('bubblewrap')) }, () => {
  let model: ModelServer;
  let c: TestCluster;

  before(async () => {
    // the cluster's own Steward processes need a model server; the chaos engine brings its own
    model = await startModelServer();
    c = await createTestCluster(model);
    const r = c.up();
    assert.equal(r.status, 0, `cluster up failed:\n${r.stderr}`);
  });

  after(async () => {
    await c?.destroy();
    await model?.close();
  });

  it('loses and doubles no turn through worker kills, a rolling restart of every worker, node kills and duplicate deliveries', { timeout: 295_000 }, async () => {
    const r = await runChaos({
      ...(seed !== undefined ? { seed } : {}),
      temporal: clusterAsTemporal(c),
      temporalName: 'a Temporal node',
      kills: 4,
      serverRestarts: 2,
      rollingRestarts: 1,
      duplicates: 2,
      changes: 1,
      chats: 3,
      workerGroups: [
        { queues: 'interactive', count: 2 },
        { queues: 'background,repo', count: 1 },
      ],
      gapMs: [500, 1500],
      downtimeMs: [1000, 3000],
      maxFaultMs: 150_000,
      settleMs: 60_000,
      // the test runner stops a file 300 s after its process started: the verdict and the clean-up fit before that
      budgetMs: 280_000 - Math.round(process.uptime() * 1000),
      log: (line) => console.log(line),
    });
    console.log(summaryLine(r));
    console.log(`chaos details: seed ${r.seed}, ${r.database}; kills mid-request ${r.killsMidRequest}; graceful stops ${r.gracefulClean}/${r.gracefulStops}; redelivered after an error ${r.redeliveredAfterError}; node kills ${r.serverRestarts}; faults ${(r.faultMs / 1000).toFixed(0)} s, all ${(r.durationMs / 1000).toFixed(0)} s`);
    assert.deepEqual(r.problems, [], `seed ${r.seed}`);
    assert.ok(r.turnsSent >= 6, `turns sent: ${r.turnsSent}`);
    assert.equal(r.lost, 0);
    assert.equal(r.doubled, 0);
    assert.equal(r.deliveriesLost, 0);
    assert.equal(r.deliveriesDoubled, 0);
    assert.equal(r.kills, 4);
    assert.equal(r.serverRestarts, 2, 'each node was killed once and came back');
    assert.equal(r.rollingRestarts, 1);
    assert.equal(r.changesOk, r.changesStarted);
    assert.equal(r.objectiveDuplicateNominal, 0);
    const s = c.run('status');
    assert.equal(s.status, 0, s.stdout);
  });
});
