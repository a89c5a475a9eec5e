/**
 * A Worker Versioning upgrade across the cluster, as docs/upgrades.md tells an operator to run
 * it: the cluster's `worker` and `repo-worker` processes run build v1 (STEWARD_BUILD_ID through
 * the compose environment; the first build makes itself current). While a chat turn is in
 * flight, build v2's processes start beside them (the same commands and environment, another
 * build id) and v2 is made current. The turn finishes on v1 (pinned) and its reply arrives
 * once; the session moves to v2 at its continue-as-new right after, and the next turn runs
 * there; v1 drains, its processes stop, and a last turn runs on v2 alone.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { Client, Connection } from '@temporalio/client';
import { setCurrentVersion, versionString, waitForDrained, wakeSessionsOn } from '../../workers/versioning.js';
import { CLUSTER_TOKEN, clusterMissing, createTestCluster, type TestCluster } from '../helpers/cluster.js';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';
import { repoRoot, spawnProcess, type Spawned } from '../helpers/process.js';
import { strict } from '../helpers/requirements.js';

const missing = clusterMissing();
if (missing && strict()) {
  it('system requirement: a Temporal cluster', () => {
    throw new Error(`CI=true, so a missing part fails instead of skipping: ${missing}`);
  });
}

const V1 = { deploymentName: 'steward', buildId: 'v1' };
const V2 = { deploymentName: 'steward', buildId: 'v2' };

/** Every run of a workflow, first to latest, with its builds. */
async function runsOf(client: Client, workflowId: string): Promise<Array<{ runId: string; builds: string[] }>> {
  const first = (await client.workflow.getHandle(workflowId).describe()).raw.workflowExecutionInfo?.firstRunId ?? undefined;
  const runs: Array<{ runId: string; builds: string[] }> = [];
  for (let runId = first; runId && runs.length < 20; ) {
    const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
    const builds: string[] = [];
    let next: string | undefined;
    for (const e of history.events ?? []) {
      const done = e.workflowTaskCompletedEventAttributes;
      if (done) builds.push(done.deploymentVersion?.buildId ?? done.workerDeploymentVersion ?? '(unversioned)');
      next = e.workflowExecutionContinuedAsNewEventAttributes?.newExecutionRunId ?? next;
    }
    runs.push({ runId, builds });
    runId = next ?? undefined;
  }
  return runs;
}

describe('a Worker Versioning upgrade across the cluster', { skip: missing ?? false }, () => {
  let model: ModelServer;
  let c: TestCluster;
  let connection: Connection;
  let client: Client;
  const v2: Spawned[] = [];
  // a new connection per request: a kept-alive one the API closed after a pause (a node's restart
  // takes longer than its idle timeout) fails the next request with "other side closed"
  const authed = { authorization: `Bearer ${CLUSTER_TOKEN}`, 'content-type': 'application/json', connection: 'close' };

  const send = async (text: string) => {
    const r = await fetch(`${c.api()}/api/v1/chats/upgrade/messages`, { method: 'POST', headers: authed, body: JSON.stringify({ text, user: 'ops' }) });
    assert.equal(r.status, 202);
    return ((await r.json()) as { workflowId: string }).workflowId;
  };
  const assistantTexts = async () =>
    (((await (await fetch(`${c.api()}/api/v1/chats/upgrade/messages`, { headers: authed })).json()) as { messages: Array<{ role: string; text: string }> }).messages)
      .filter((m) => m.role === 'assistant')
      .map((m) => m.text);
  const waitForReplies = async (n: number, timeoutMs = 90_000) => {
    const deadline = Date.now() + timeoutMs;
    let texts = await assistantTexts();
    while (texts.length < n && Date.now() < deadline) {
      await sleep(250);
      texts = await assistantTexts();
    }
    return texts;
  };

  before(async () => {
    model = await startModelServer();
    c = await createTestCluster(model, { STEWARD_BUILD_ID: 'v1' });
    const r = c.up();
    assert.equal(r.status, 0, `cluster up failed:\n${r.stderr}`);
    connection = await Connection.connect({ address: `127.0.0.1:${c.state().frontend.port}` });
    client = new Client({ connection, namespace: c.state().namespace });
  });

  after(async () => {
    for (const p of v2) {
      p.kill('SIGTERM');
      await Promise.race([p.exited, sleep(15_000)]);
      p.kill('SIGKILL');
    }
    await connection?.close();
    await c?.destroy();
    await model?.close();
  });

  it('keeps the turn in flight on v1, moves the session to v2 after it, drains v1; every message answered once', { timeout: 280_000 }, async () => {
    // v1 is the deployment's current version: its processes made it so
    const [worker, repoWorker] = c.state().processes.slice(1);
    for (const p of [worker!, repoWorker!]) assert.ok(readFileSync(`/proc/${p.pid}/environ`, 'utf8').split('\0').includes('STEWARD_BUILD_ID=v1'));
    model.enqueue({ text: 'First, on v1.' });
    const sessionId = await send('one');
    assert.deepEqual(await waitForReplies(1), ['First, on v1.']);

    // a slow turn in flight when v2 comes
    const seen = model.requests.length;
    model.enqueue({ text: 'Second, finished on v1.', firstTokenDelayMs: 6_000 });
    await send('two');
    await model.waitForRequest(seen + 1, 60_000);

    // build v2: the same processes with another build id, beside v1's
    for (const p of [worker!, repoWorker!]) {
      const env = Object.fromEntries(
        readFileSync(`/proc/${p.pid}/environ`, 'utf8')
          .split('\0')
          .filter(Boolean)
          .map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
      );
      const args = readFileSync(`/proc/${p.pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
      const stewardArgs = args.slice(args.findIndex((a) => a.endsWith('platform/main.ts')) + 1);
      const proc = spawnProcess(process.execPath, ['--import', 'tsx', 'platform/main.ts', ...stewardArgs], { ...env, STEWARD_BUILD_ID: 'v2', STEWARD_METRICS_PORT: '' }, repoRoot);
      v2.push(proc);
      await proc.waitForOutput(/Steward worker polling/, 120_000);
    }
    const made = await setCurrentVersion(client, V2, { timeoutMs: 60_000 });
    assert.equal(made.currentBuildId, 'v2');
    assert.equal(made.previousBuildId, 'v1');

    // the turn in flight finishes on v1, once
    assert.deepEqual(await waitForReplies(2), ['First, on v1.', 'Second, finished on v1.']);
    // The session moves to v2 at its next workflow task after the turn: at once when the new
    // routing has reached it by then; on a cluster it can come a moment later, and an idle
    // session takes it at its next message or at upgradeCheck (docs/upgrades.md, step 5).
    const deadline = Date.now() + 60_000;
    while ((await runsOf(client, sessionId)).length < 2 && Date.now() < deadline) {
      await wakeSessionsOn(client, V1);
      await sleep(500);
    }
    // the next turn runs on v2, in the session's next run
    model.enqueue({ text: 'Third, on v2.' });
    await send('three');
    assert.deepEqual(await waitForReplies(3), ['First, on v1.', 'Second, finished on v1.', 'Third, on v2.']);
    // the session's first run (both turns, the second in flight at the deploy) ran on v1 only; every later run on v2 only
    const runs = await runsOf(client, sessionId);
    const shown = runs.map((r) => `${r.runId.slice(0, 8)}: ${r.builds.join(' ')}`).join('; ');
    assert.ok(runs.length >= 2, `the session continued as new: ${shown}`);
    assert.ok(runs[0]!.builds.length > 0 && runs[0]!.builds.every((b) => b === 'v1'), `first run on v1: ${shown}`);
    assert.ok(runs.slice(1).every((r) => r.builds.every((b) => b === 'v2')), `later runs on v2: ${shown}`);
    assert.ok(runs.slice(1).some((r) => r.builds.length > 0), `a run on v2 did work: ${shown}`);

    // v1 drains; its processes stop; v2 alone answers
    assert.equal(await waitForDrained(client, V1, 60_000), 0, `nothing stays pinned to ${versionString(V1)}`);
    for (const p of [worker!, repoWorker!]) process.kill(p.pid!, 'SIGTERM');
    model.enqueue({ text: 'Fourth, v2 alone.' });
    await send('four');
    assert.deepEqual(await waitForReplies(4), ['First, on v1.', 'Second, finished on v1.', 'Third, on v2.', 'Fourth, v2 alone.']);
  });
});
