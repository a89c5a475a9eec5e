/**
 * The production shape, run for real: `steward cluster up` builds nothing here (CI builds the
 * Temporal server from its Go module before the suites; scripts/test.sh), creates the Temporal
 * schemas on PostgreSQL with the server's own SQL tool, starts two Temporal server processes
 * on one database (each running every service) and Steward as docker-compose.yml's `api`,
 * `worker` and `repo-worker` processes, with the compose file's environment, all reaching
 * Temporal through the cluster's frontend balancer. Then: a chat turn through the API; a repo
 * change to a patch and an objective run; `kill -9` of a Temporal node in the middle of a turn
 * and of a repo change (the other node serves; exactly one reply, one patch); the node
 * restarted by `cluster up`; `cluster status`; clear errors.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { Client, Connection } from '@temporalio/client';
import pg from 'pg';
import { alive, type ClusterState } from '../../platform/cluster.js';
import { changeModel, GREETING_DRAFT } from '../helpers/change-model.js';
import { CLUSTER_TOKEN, clusterMissing, clusterVersion, createTestCluster, type TestCluster } from '../helpers/cluster.js';
import { createGitFixture, git, type GitFixture } from '../helpers/git-fixture.js';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';
import { freePort, repoRoot } from '../helpers/process.js';
import { needs, strict } from '../helpers/requirements.js';

const missing = clusterMissing();
if (missing && strict()) {
  it('system requirement: a Temporal cluster', () => {
    throw new Error(`CI=true, so a missing part fails instead of skipping: ${missing}`);
  });
}

describe('steward cluster: two Temporal nodes on PostgreSQL, Steward by compose roles', { skip: missing ?? (await needs('bubblewrap')), timeout: 900_000 }, () => {
  let model: ModelServer;
  let c: TestCluster;
  let state: ClusterState;
  const cluster = (...args: string[]) => c.run(...args);
  const up = () => c.up();
  // a new connection per request: a kept-alive one the API closed after a pause (a node's restart
  // takes longer than its idle timeout) fails the next request with "other side closed"
  const authed = { authorization: `Bearer ${CLUSTER_TOKEN}`, 'content-type': 'application/json', connection: 'close' };
  const api = () => c.api();

  async function transcript(chat: string): Promise<Array<{ role: string; text: string }>> {
    const r = await fetch(`${api()}/api/v1/chats/${chat}/messages`, { headers: authed });
    return ((await r.json()) as { messages: Array<{ role: string; text: string }> }).messages;
  }

  async function replies(chat: string, n: number, timeoutMs: number): Promise<Array<{ role: string; text: string }>> {
    const deadline = Date.now() + timeoutMs;
    let messages = await transcript(chat);
    while (messages.filter((m) => m.role === 'assistant').length < n && Date.now() < deadline) {
      await sleep(250);
      messages = await transcript(chat);
    }
    return messages;
  }

  const fixtures: GitFixture[] = [];
  const api2 = async (method: string, p: string, body?: unknown) => {
    const r = await fetch(`${api()}${p}`, { method, headers: authed, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
    return { status: r.status, body: (await r.json()) as Record<string, unknown> };
  };
  async function waitForChange(id: string, timeoutMs: number): Promise<Record<string, unknown>> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const c = (await api2('GET', `/api/v1/changes/${id}`)).body;
      if (c.status !== 'running' || Date.now() > deadline) return c;
      await sleep(300);
    }
  }
  const logs = () => c.logs();

  before(async () => {
    model = await startModelServer();
    c = await createTestCluster(model);
    const r = up();
    assert.equal(r.status, 0, `cluster up failed:\n${r.stderr}\n${r.stdout}`);
    assert.match(r.stdout, new RegExp(`2-node Temporal ${clusterVersion.replace(/\./g, '\\.')} cluster on PostgreSQL`));
    state = c.state();
  });

  after(async () => {
    await c?.destroy();
    await model?.close();
    for (const f of fixtures) f.cleanup();
  });

  it('runs the compose topology: two nodes in one membership, the api, worker and repo-worker processes with the compose commands', async () => {
    const s = cluster('status', '--json');
    assert.equal(s.status, 0, s.stdout + s.stderr);
    const status = JSON.parse(s.stdout) as { nodes: Array<{ serving: boolean; joined: boolean }>; processes: Array<{ service: string; running: boolean; temporal: string }> };
    assert.deepEqual(status.nodes.map((n) => [n.serving, n.joined]), [[true, true], [true, true]]);
    assert.deepEqual(status.processes.map((p) => [p.service, p.running]), [['api', true], ['worker', true], ['repo-worker', true]]);
    // every process reaches Temporal through the frontend balancer, as behind a load balancer
    for (const p of status.processes) assert.equal(p.temporal, `127.0.0.1:${state.frontend.port}`);
    const cmdline = (pid: number) => readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ');
    assert.match(cmdline(state.processes[1]!.pid!), /platform\/main\.ts worker --queues interactive,background --concurrency interactive=100,background=20/);
    assert.match(cmdline(state.processes[2]!.pid!), /platform\/main\.ts worker --queues repo --concurrency repo=2/);
    const environ = readFileSync(`/proc/${state.processes[1]!.pid}/environ`, 'utf8').split('\0');
    assert.ok(environ.includes('STEWARD_TASK_QUEUE=steward-interactive'), 'the compose environment');
    assert.ok(environ.includes('STEWARD_WORKFLOW_BUNDLE=' + path.join(c.dir, 'workflow-bundle.js')), "the image's prebuilt bundle");
  });

  it('answers a chat turn; the session is on the cluster, visible through either node', async () => {
    model.enqueue({ text: 'Hello from the cluster.' });
    const r = await fetch(`${api()}/api/v1/chats/cluster-1/messages`, { method: 'POST', headers: authed, body: JSON.stringify({ text: 'hello', user: 'ops' }) });
    assert.equal(r.status, 202);
    const { workflowId } = (await r.json()) as { workflowId: string };
    const messages = await replies('cluster-1', 1, 60_000);
    assert.deepEqual(messages.map((m) => [m.role, m.text]), [['user', 'hello'], ['assistant', 'Hello from the cluster.']], logs());
    for (const node of state.nodes) {
      const connection = await Connection.connect({ address: `127.0.0.1:${node.ports.frontend}` });
      try {
        const d = await new Client({ connection, namespace: state.namespace }).workflow.getHandle(workflowId).describe();
        assert.equal(d.status.name, 'RUNNING');
        assert.equal(d.taskQueue, 'steward-interactive');
      } finally {
        await connection.close();
      }
    }
  });

  it('runs a repo change to a patch and an objective run; kill -9 of a node in the middle of the change: exactly one patch', async () => {
    const fx = createGitFixture({ 'greeting.txt': 'Hello\n', 'test.sh': '#!/bin/sh\ngrep -q "Hello, Steward" greeting.txt && echo greeting ok\n' }, { executable: ['test.sh'] });
    fixtures.push(fx);
    model.setDefault(changeModel({ intake: () => GREETING_DRAFT, agent: [{ name: 'write_file', args: { path: 'greeting.txt', content: 'Hello, Steward\n' } }] }));
    assert.equal((await api2('POST', '/api/v1/repos', { name: 'cluster-demo', cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }] })).status, 201);
    const started = await api2('POST', '/api/v1/changes', { repo: 'cluster-demo', request: 'Make the greeting say Hello, Steward' });
    assert.equal(started.status, 202, JSON.stringify(started.body));
    const id = started.body.id as string;
    // node 2 dies while the change runs (its workflow's and activities' tasks move to node 1)
    const victim = state.nodes[1]!;
    let atKill: Record<string, unknown> = {};
    for (let i = 0; i < 200; i++) {
      atKill = (await api2('GET', `/api/v1/changes/${id}`)).body;
      if (atKill.phase !== 'intake') break;
      await sleep(50);
    }
    process.kill(victim.pid!, 'SIGKILL');
    assert.equal(atKill.status, 'running', `the change was still running when the node died (phase ${String(atKill.phase)})`);
    const change = await waitForChange(id, 180_000);
    assert.equal(change.status, 'done', `${String(change.phase)}: ${String(change.error)}\n${logs()}`);
    assert.equal((change.result as { kind: string }).kind, 'patch');
    const patch = await fetch(`${api()}/api/v1/changes/${id}/patch`, { headers: authed });
    assert.equal(patch.status, 200);
    const text = await patch.text();
    assert.match(text, /\+Hello, Steward/);
    // exactly one patch: one promotion receipt, one patch artifact, applied once
    const check = fx.cloneAt(fx.head());
    const applied = spawnSync('git', ['apply', '-'], { cwd: check, input: text });
    assert.equal(applied.status, 0);
    assert.equal(readFileSync(path.join(check, 'greeting.txt'), 'utf8'), 'Hello, Steward\n');
    assert.equal(git(check, 'status', '--porcelain').trim(), 'M greeting.txt');
    const client = new pg.Client({ connectionString: new URL(`/${c.prefix}steward`, c.pgUrl).toString() });
    await client.connect();
    try {
      const promotions = await client.query(`SELECT count(*)::int AS n FROM "Receipt" WHERE kind = 'promotion' AND data LIKE $1`, [`%${id}%`]);
      assert.equal(promotions.rows[0].n, 1, 'one promotion');
    } finally {
      await client.end();
    }
    const back = up();
    assert.equal(back.status, 0, back.stderr);
    state = c.state();

    // an objective, triggered now: its run's turn answers in its chat
    model.enqueue({ text: 'The objective ran on the cluster.' });
    const created = await api2('POST', '/api/v1/objectives', { name: 'cluster-check', prompt: 'Check the cluster', chatId: 'cluster-obj', schedule: { every: '1h' } });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.equal((await api2('POST', `/api/v1/objectives/${created.body.id as string}/trigger`)).status, 200);
    const messages = await replies('cluster-obj', 1, 90_000);
    assert.ok(messages.some((m) => m.role === 'assistant' && m.text === 'The objective ran on the cluster.'), `${JSON.stringify(messages)}\n${logs()}`);
  });

  it('kill -9 of a Temporal node in the middle of a turn: the other node serves, the reply arrives exactly once; cluster up restarts the node', async () => {
    const victim = state.nodes[0]!; // the api's and repo-worker's frontend; the worker polls node 2
    const seen = model.requests.length;
    model.enqueue({ text: 'Answered across a node failure.', firstTokenDelayMs: 2_000 });
    const r = await fetch(`${api()}/api/v1/chats/cluster-2/messages`, { method: 'POST', headers: authed, body: JSON.stringify({ text: 'survive this', user: 'ops' }) });
    assert.equal(r.status, 202);
    await model.waitForRequest(seen + 1, 60_000);
    process.kill(victim.pid!, 'SIGKILL');
    const messages = await replies('cluster-2', 1, 120_000);
    assert.deepEqual(
      messages.filter((m) => m.role === 'assistant').map((m) => m.text),
      ['Answered across a node failure.'],
      `exactly one reply\n${logs()}`,
    );
    assert.equal(alive(victim.pid), false);
    const down = cluster('status');
    assert.equal(down.status, 1);
    assert.match(down.stdout, /problem: temporal node 1 is not running/);
    // the node comes back; nothing else is restarted
    const pids = state.processes.map((p) => p.pid);
    const again = up();
    assert.equal(again.status, 0, again.stderr);
    state = c.state();
    assert.deepEqual(state.processes.map((p) => p.pid), pids, 'the Steward processes kept running');
    assert.notEqual(state.nodes[0]!.pid, victim.pid);
    const s = cluster('status');
    assert.equal(s.status, 0, s.stdout);
    // and the api, whose node it is, takes messages again
    // every request for the new message gets its reply, one that Temporal runs again included
    // (shards move while node 1 rejoins: a lost completion means another attempt), and a late
    // attempt of the first turn's step cannot take it; a one-off queued reply could go to either
    model.setDefault((req) => ({ text: JSON.stringify(req.body).includes('and now?') ? 'Back to two nodes.' : 'ok' }));
    const r2 = await fetch(`${api()}/api/v1/chats/cluster-2/messages`, { method: 'POST', headers: authed, body: JSON.stringify({ text: 'and now?', user: 'ops' }) });
    assert.equal(r2.status, 202);
    const after2 = await replies('cluster-2', 2, 60_000);
    // each model request since the first message, by the last thing it asks
    const asked = model.requests.slice(seen).map((q) => (JSON.stringify(q.body).match(/survive this|and now\?/g) ?? ['?']).at(-1));
    assert.deepEqual(after2.filter((m) => m.role === 'assistant').map((m) => m.text), ['Answered across a node failure.', 'Back to two nodes.'], `model requests: ${JSON.stringify(asked)}\n${logs()}`);
  });

  it('status names a Temporal schema behind the server version', async () => {
    const db = new pg.Client({ connectionString: new URL(`/${c.prefix}temporal`, c.pgUrl).toString() });
    await db.connect();
    try {
      const [{ curr_version: current }] = (await db.query<{ curr_version: string }>('SELECT curr_version FROM schema_version')).rows as [{ curr_version: string }];
      await db.query(`UPDATE schema_version SET curr_version = '1.0'`);
      try {
        const s = cluster('status');
        assert.equal(s.status, 1);
        assert.match(s.stdout, new RegExp(`problem: ${c.prefix}temporal is at schema 1\\.0, behind ${current.replace('.', '\\.')} that server ${clusterVersion.replace(/\./g, '\\.')} needs`));
      } finally {
        await db.query('UPDATE schema_version SET curr_version = $1', [current]);
      }
      assert.equal(cluster('status').status, 0);
    } finally {
      await db.end();
    }
  });

  it('a rolling restart of every process (cluster restart all: each node, the worker, the repo-worker, the api, one at a time) while three chats talk: every message answered exactly once', { timeout: 240_000 }, async () => {
    const token = (req: { body: unknown }) => /roll-\d+-\d+/.exec(JSON.stringify((req.body as { messages?: unknown[] }).messages?.at(-1) ?? ''))?.[0] ?? 'none';
    model.setDefault((req) => ({ text: `re: ${token(req)}` }));
    // a client behind the api: a refused connection (the api restarting) is tried again; nothing reached it
    const retried = async <T>(f: () => Promise<T>): Promise<T> => {
      for (let i = 0; ; i++) {
        try {
          return await f();
        } catch (err) {
          if (i > 200) throw err;
          await sleep(250);
        }
      }
    };
    const pids = [...state.nodes, ...state.processes].map((p) => p.pid);
    let rolling = true;
    const roll = c.runAsync('restart', 'all').finally(() => (rolling = false));
    const sent = new Map<string, string[]>();
    // each chat sends its next message when the last one is answered, until the roll is over (at most 12 each)
    await Promise.all(
      [0, 1, 2].map(async (chat) => {
        const id = `roll-${chat}`;
        const mine: string[] = [];
        sent.set(id, mine);
        for (let i = 0; i < 12 && (rolling || i < 2); i++) {
          const text = `roll-${chat}-${i}`;
          const r = await retried(() => fetch(`${api()}/api/v1/chats/${id}/messages`, { method: 'POST', headers: authed, body: JSON.stringify({ text, user: 'ops' }) }));
          assert.equal(r.status, 202);
          mine.push(text);
          const deadline = Date.now() + 90_000;
          while (Date.now() < deadline) {
            const m = await retried(() => transcript(id));
            if (m.some((x) => x.role === 'assistant' && x.text === `re: ${text}`)) break;
            await sleep(250);
          }
        }
      }),
    );
    const r = await roll;
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stderr, /steward api: stopped/);
    state = c.state();
    const now = [...state.nodes, ...state.processes].map((p) => p.pid);
    for (const [i, pid] of now.entries()) assert.notEqual(pid, pids[i], 'every process was replaced');
    for (const [id, texts] of sent) {
      const messages = await transcript(id);
      assert.deepEqual(
        messages.filter((m) => m.role === 'assistant').map((m) => m.text),
        texts.map((t) => `re: ${t}`),
        `${id}: one reply per message, in order\n${logs()}`,
      );
    }
    const total = [...sent.values()].reduce((n, t) => n + t.length, 0);
    assert.ok(total >= 9, `messages sent during the roll: ${total}`);
    assert.equal(cluster('status').status, 0);
  });

  it('a node that cannot join: restarted while the other node hangs, it serves a ring of its own; up says so, status names it, and it joins once the other answers', async () => {
    const [first, second] = state.nodes as [ClusterState['nodes'][number], ClusterState['nodes'][number]];
    process.kill(second.pid!, 'SIGKILL');
    const pending = c.upAsync('--join-timeout', '10');
    // node 1 has been checked (it serves, it is in the ring) when up starts node 2; then node 1 hangs
    const deadline = Date.now() + 60_000;
    while (c.state().nodes[1]!.pid === second.pid && Date.now() < deadline) await sleep(20);
    assert.notEqual(c.state().nodes[1]!.pid, second.pid, 'up started node 2');
    process.kill(first.pid!, 'SIGSTOP');
    try {
      const r = await pending;
      assert.equal(r.status, 1, r.stderr);
      assert.match(r.stderr, /temporal node 2 has not joined the cluster within 10 s/);
      assert.match(r.stderr, new RegExp(`node 2: it does not reach node 1's members \\(127\\.0\\.0\\.1:${first.ports.frontendMembership}`));
      assert.match(r.stderr, /node 1: it does not answer the admin API/);
      const s = cluster('status');
      assert.equal(s.status, 1);
      assert.match(s.stdout, /temporal node 2 .* serving, not joined/);
      assert.match(s.stdout, /problem: temporal node 2 is not in one ring with the others: it does not reach node 1's members/);
    } finally {
      process.kill(first.pid!, 'SIGCONT');
    }
    // node 1 answers again: the rings merge, and up (nothing to start) sees one cluster
    const again = up();
    assert.equal(again.status, 0, again.stderr);
    state = c.state();
    const status = JSON.parse(cluster('status', '--json').stdout) as { nodes: Array<{ joined: boolean }> };
    assert.deepEqual(status.nodes.map((n) => n.joined), [true, true]);
  });

  it('refuses clearly: a port in use, PostgreSQL unreachable', async () => {
    const other = mkdtempSync(path.join(tmpdir(), 'steward-cluster-x-'));
    try {
      // the running cluster holds these ports
      const run = (...args: string[]) => spawnSync(process.execPath, ['--import', 'tsx', 'platform/main.ts', 'cluster', 'up', '--dir', other, ...args], { cwd: repoRoot, env: process.env, encoding: 'utf8', timeout: 300_000 });
      const taken = run('--base-port', String(c.base), '--api-port', String(await freePort()), '--pg-url', c.pgUrl, '--db-prefix', c.prefix);
      assert.equal(taken.status, 1);
      assert.match(taken.stderr, new RegExp(`port ${c.base} \\(node 1 frontend\\) is in use by another process`));
      const unreachable = run('--pg-url', 'postgresql://steward:x@127.0.0.1:1/steward');
      assert.equal(unreachable.status, 1);
      assert.match(unreachable.stderr, /PostgreSQL is unreachable at 127\.0\.0\.1:1/);
      const badTimeout = run('--join-timeout', '2');
      assert.equal(badTimeout.status, 1);
      assert.match(badTimeout.stderr, /--join-timeout: whole seconds from 5 to 600 \(got "2"\)/);
    } finally {
      rmSync(other, { recursive: true, force: true });
    }
  });
});
