/**
 * Mixed load on the production shape beside the dev server: the same workload (chats sending
 * turns with a think time, objectives firing on a short interval, repo changes one after
 * another) against (a) `steward start`, the all-in-one process on its embedded dev server, and
 * (b) `steward cluster up`, two Temporal nodes on PostgreSQL and Steward's api, worker and
 * repo-worker processes. Both on PostgreSQL for Steward's database, both driven over the HTTP
 * API (a reply is seen by polling the transcript every BENCH_POLL_MS). Sides alternate for
 * BENCH_ROUNDS rounds; prints each round and the ratios of the medians (cluster / dev server)
 * as JSON. Needs the Temporal server built (scripts/temporal-build.sh) and PostgreSQL
 * (scripts/pg.sh start). Not a test.
 *
 *   BENCH_ROUNDS=3 node --import tsx bench/cluster-mixed.ts > /tmp/cluster-mixed.json
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { STEWARD_NODE_FLAGS, stewardProcessEnv } from '../platform/node-options.js';
import { changeModel } from '../test/helpers/change-model.js';
import { CLUSTER_TOKEN, createTestCluster } from '../test/helpers/cluster.js';
import { createGitFixture } from '../test/helpers/git-fixture.js';
import { lastUserText, startModelServer, type RecordedRequest } from '../test/helpers/model-server.js';
import { freePort, repoRoot } from '../test/helpers/process.js';

const int = (name: string, fallback: number, min = 0) => {
  const v = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(v) || v < min) throw new Error(`${name}: expected a whole number >= ${min}, got ${process.env[name]}`);
  return v;
};
const ROUNDS = int('BENCH_ROUNDS', 3, 1);
const CHATS = int('BENCH_CHATS', 4, 1);
const TURNS = int('BENCH_TURNS', 10, 1);
const THINK_MS = int('BENCH_THINK_MS', 300);
const OBJECTIVES = int('BENCH_OBJECTIVES', 2);
const CHANGES = int('BENCH_CHANGES', 2);
const POLL_MS = int('BENCH_POLL_MS', 25, 1);

if (!process.env.STEWARD_TEST_PG_URL) {
  const url = spawnSync('bash', [path.join(repoRoot, 'scripts/pg.sh'), 'url'], { encoding: 'utf8' }).stdout.trim();
  if (spawnSync('bash', [path.join(repoRoot, 'scripts/pg.sh'), 'status']).status !== 0) throw new Error('PostgreSQL is not running: scripts/pg.sh start');
  process.env.STEWARD_TEST_PG_URL = url;
}
const pgUrl = process.env.STEWARD_TEST_PG_URL;

const model = await startModelServer();
const change = changeModel({ intake: () => ({ intent: 'feature', goal: 'Greet Steward', scope: ['greeting.txt'], acceptance: ['sh test.sh exits 0'] }), agent: [{ name: 'write_file', args: { path: 'greeting.txt', content: 'Hello, Steward\n' } }] });
model.setDefault((req: RecordedRequest) => {
  const text = lastUserText(req.body);
  const ping = /\bping (\d+)\b/.exec(text);
  if (ping) return { text: `pong ${ping[1]}` };
  if (JSON.stringify(req.body ?? {}).includes('bench objective')) return { text: 'Digest: nothing new.', firstTokenDelayMs: 200 };
  return change(req);
});
const fx = createGitFixture({ 'greeting.txt': 'Hello\n', 'test.sh': 'grep -q "Hello, Steward" greeting.txt\n' });

interface Side {
  name: 'dev-server' | 'cluster';
  api: string;
  stop(): Promise<void>;
}

/** `steward start` (embedded dev server) as its own process, on a fresh PostgreSQL database. */
async function startDev(): Promise<Side> {
  const db = `bench_dev_${Math.random().toString(36).slice(2, 8)}`;
  const admin = new pg.Client({ connectionString: pgUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${db}`);
  await admin.end();
  const dir = mkdtempSync(path.join(tmpdir(), 'steward-bench-dev-'));
  const port = await freePort();
  const url = new URL(pgUrl!);
  url.pathname = `/${db}`;
  const child = spawn(process.execPath, [...STEWARD_NODE_FLAGS, '--import', 'tsx', 'platform/main.ts', 'start'], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...stewardProcessEnv(), DATABASE_URL: url.toString(), STEWARD_DATA_DIR: dir, STEWARD_HTTP_PORT: String(port), STEWARD_API_TOKEN: CLUSTER_TOKEN, STEWARD_MODEL: 'openai-compatible:bench', STEWARD_MODEL_BASE_URL: model.baseURL, STEWARD_LOG_LEVEL: 'warn' },
    stdio: 'ignore',
    detached: true,
  });
  const api = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 600; i++) {
    if (await fetch(`${api}/healthz`).then((r) => r.ok, () => false)) break;
    await sleep(200);
  }
  return {
    name: 'dev-server',
    api,
    async stop() {
      try {
        process.kill(-child.pid!, 'SIGTERM');
      } catch {
        // gone
      }
      await new Promise((r) => child.once('exit', r));
      const a = new pg.Client({ connectionString: pgUrl });
      await a.connect();
      await a.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
      await a.end();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function startCluster(): Promise<Side> {
  const c = await createTestCluster(model);
  const r = c.up();
  if (r.status !== 0) throw new Error(`cluster up failed: ${r.stderr}`);
  return { name: 'cluster', api: c.api(), stop: () => c.destroy() };
}

const headers = { authorization: `Bearer ${CLUSTER_TOKEN}`, 'content-type': 'application/json', connection: 'close' };
const post = (api: string, p: string, body: unknown) => fetch(`${api}${p}`, { method: 'POST', headers, body: JSON.stringify(body) });
const assistantCount = async (api: string, chat: string) =>
  (((await (await fetch(`${api}/api/v1/chats/${chat}/messages`, { headers })).json()) as { messages: Array<{ role: string }> }).messages).filter((m) => m.role === 'assistant').length;

/** One chat's turns: the latency of each (POST to the reply seen in the transcript). */
async function chat(api: string, id: string): Promise<number[]> {
  const out: number[] = [];
  for (let i = 1; i <= TURNS; i++) {
    const t0 = performance.now();
    const r = await post(api, `/api/v1/chats/${id}/messages`, { text: `ping ${i}` });
    if (r.status !== 202) throw new Error(`POST answered ${r.status}`);
    while ((await assistantCount(api, id)) < i) await sleep(POLL_MS);
    out.push(performance.now() - t0);
    await sleep(THINK_MS);
  }
  return out;
}

async function round(side: Side, n: number) {
  const tag = `${side.name}-${n}-${Math.random().toString(36).slice(2, 6)}`;
  await post(side.api, '/api/v1/repos', { name: `bench-${tag}`, cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }] });
  for (let i = 0; i < OBJECTIVES; i++) await post(side.api, '/api/v1/objectives', { name: `o-${tag}-${i}`, prompt: 'bench objective: any news?', chatId: `obj-${tag}-${i}`, schedule: { every: '2s' } });
  let stop = false;
  const changes = (async () => {
    for (let i = 0; i < CHANGES && !stop; i++) {
      const r = (await (await post(side.api, '/api/v1/changes', { repo: `bench-${tag}`, request: 'Make the greeting say Hello, Steward' })).json()) as { id: string };
      for (let j = 0; j < 600 && !stop; j++) {
        const c = (await (await fetch(`${side.api}/api/v1/changes/${r.id}`, { headers })).json()) as { status: string };
        if (c.status !== 'running') break;
        await sleep(200);
      }
    }
  })();
  const t0 = performance.now();
  const latencies = (await Promise.all(Array.from({ length: CHATS }, (_, i) => chat(side.api, `c-${tag}-${i}`)))).flat();
  const seconds = (performance.now() - t0) / 1000;
  stop = true;
  await changes;
  const s = [...latencies].sort((a, b) => a - b);
  const q = (p: number) => +(s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? 0).toFixed(1);
  return { side: side.name, round: n, turns: s.length, p50_ms: q(0.5), p95_ms: q(0.95), p99_ms: q(0.99), turns_per_s: +(s.length / seconds).toFixed(2) };
}

const rounds: Array<Awaited<ReturnType<typeof round>>> = [];
try {
  for (let n = 1; n <= ROUNDS; n++) {
    for (const start of [startDev, startCluster]) {
      const side = await start();
      try {
        // a warm-up turn, not counted
        await chat(side.api, `warm-${n}-${side.name}`).catch(() => undefined);
        const r = await round(side, n);
        rounds.push(r);
        process.stderr.write(`${JSON.stringify(r)}\n`);
      } finally {
        await side.stop();
      }
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
  const of = (side: string, k: 'p50_ms' | 'p95_ms' | 'p99_ms' | 'turns_per_s') => median(rounds.filter((r) => r.side === side).map((r) => r[k]));
  const ratio = (k: 'p50_ms' | 'p95_ms' | 'p99_ms' | 'turns_per_s') => +(of('cluster', k) / (of('dev-server', k) || 1)).toFixed(2);
  console.log(
    JSON.stringify(
      {
        bench: 'cluster-mixed',
        workload: { chats: CHATS, turns_per_chat: TURNS, think_ms: THINK_MS, objectives_every_2s: OBJECTIVES, repo_changes: CHANGES, poll_ms: POLL_MS },
        rounds,
        medians: { 'dev-server': { p50_ms: of('dev-server', 'p50_ms'), p95_ms: of('dev-server', 'p95_ms'), p99_ms: of('dev-server', 'p99_ms'), turns_per_s: of('dev-server', 'turns_per_s') }, cluster: { p50_ms: of('cluster', 'p50_ms'), p95_ms: of('cluster', 'p95_ms'), p99_ms: of('cluster', 'p99_ms'), turns_per_s: of('cluster', 'turns_per_s') } },
        ratios_cluster_over_dev: { p50: ratio('p50_ms'), p95: ratio('p95_ms'), p99: ratio('p99_ms'), turns_per_s: ratio('turns_per_s') },
        note: 'dev server: steward start (embedded dev server on SQLite for Temporal, one process). cluster: two Temporal nodes on PostgreSQL behind the frontend balancer, Steward as api, worker and repo-worker processes. Steward on PostgreSQL in both.',
      },
      null,
      2,
    ),
  );
} finally {
  await model.close();
  fx.cleanup();
}
