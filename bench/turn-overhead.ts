/**
 * Platform overhead per turn, with a zero-latency scripted model (the OpenAI-compatible test
 * server echoing at once): message in through the HTTP API -> reply recorded in the
 * transcript. Runs the all-in-one stack in this process on the embedded Temporal dev server.
 * Prints JSON. Not a test: figures depend on the machine.
 *
 *   node --import tsx bench/turn-overhead.ts            (60 s sustained phase)
 *   BENCH_SECONDS=10 BENCH_IDLE_SESSIONS=200 node --import tsx bench/turn-overhead.ts
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { sessionWorkflowId } from '../common/ids.js';
import { loadConfig } from '../config/index.js';
import { startSteward } from '../platform/start.js';
import { startModelServer } from '../test/helpers/model-server.js';
import { freePort } from '../test/helpers/process.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 60);
const IDLE_SESSIONS = Number(process.env.BENCH_IDLE_SESSIONS ?? 1000);
const SEQUENTIAL_TURNS = Number(process.env.BENCH_SEQUENTIAL_TURNS ?? 200);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 50);
const TOKEN = 'bench-token-0123456789abcdef';

const model = await startModelServer();
const dataDir = mkdtempSync(path.join(tmpdir(), 'steward-bench-'));
const config = loadConfig({
  STEWARD_DATA_DIR: dataDir,
  STEWARD_HTTP_PORT: String(await freePort()),
  STEWARD_TEMPORAL_PORT: String(await freePort()),
  STEWARD_TEMPORAL_UI_PORT: String(await freePort()),
  STEWARD_TEMPORAL_UI: 'false',
  STEWARD_API_TOKEN: TOKEN,
  STEWARD_MODEL: 'openai-compatible:bench',
  STEWARD_MODEL_BASE_URL: model.baseURL,
  STEWARD_LOG_LEVEL: 'warn',
  ...(process.env.DATABASE_URL ? { DATABASE_URL: process.env.DATABASE_URL } : {}),
});
const steward = await startSteward(config, pino({ level: 'warn' }));

// Replies per session, counted from the transcript events of the running stack.
const replies = new Map<string, number>();
const waiters = new Map<string, Array<{ n: number; resolve: () => void }>>();
steward.events.on('transcript', (sessionId, role) => {
  if (role !== 'assistant') return;
  const n = (replies.get(sessionId) ?? 0) + 1;
  replies.set(sessionId, n);
  const list = waiters.get(sessionId) ?? [];
  for (const w of list.filter((x) => x.n <= n)) w.resolve();
  waiters.set(sessionId, list.filter((x) => x.n > n));
});
const waitReply = (sessionId: string, n: number) =>
  new Promise<void>((resolve) => {
    if ((replies.get(sessionId) ?? 0) >= n) return resolve();
    waiters.set(sessionId, [...(waiters.get(sessionId) ?? []), { n, resolve }]);
  });

async function turn(chatId: string): Promise<number> {
  const sessionId = sessionWorkflowId({ platform: 'http', account: 'default', chatId });
  const expected = (replies.get(sessionId) ?? 0) + 1;
  const t0 = performance.now();
  const r = await fetch(`${steward.apiUrl}/api/v1/chats/${chatId}/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` },
    body: JSON.stringify({ text: `ping ${expected}` }),
  });
  if (r.status !== 202) throw new Error(`POST answered ${r.status}: ${await r.text()}`);
  await r.arrayBuffer();
  await waitReply(sessionId, expected);
  return performance.now() - t0;
}

function stats(ms: number[]) {
  const s = [...ms].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? 0;
  return { turns: s.length, p50_ms: +q(0.5).toFixed(1), p90_ms: +q(0.9).toFixed(1), p99_ms: +q(0.99).toFixed(1), max_ms: +(s.at(-1) ?? 0).toFixed(1) };
}

const mb = (n: number) => +(n / 1024 / 1024).toFixed(1);
try {
  for (let i = 0; i < 20; i++) await turn('warmup');

  const one: number[] = [];
  for (let i = 0; i < SEQUENTIAL_TURNS; i++) one.push(await turn('one'));

  const many: number[] = [];
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async (_, c) => {
      for (let i = 0; i < 10; i++) many.push(await turn(`conc-${c}`));
    }),
  );

  let sustained = 0;
  const until = performance.now() + SECONDS * 1000;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async (_, c) => {
      while (performance.now() < until) {
        await turn(`sustain-${c}`);
        sustained++;
      }
    }),
  );
  const elapsed = (performance.now() - t0) / 1000;

  const memBefore = process.memoryUsage();
  for (let i = 0; i < IDLE_SESSIONS; i += CONCURRENCY) {
    await Promise.all(Array.from({ length: Math.min(CONCURRENCY, IDLE_SESSIONS - i) }, (_, k) => turn(`idle-${i + k}`)));
  }
  await new Promise((r) => setTimeout(r, 2000));
  (globalThis as { gc?: () => void }).gc?.();
  const memAfter = process.memoryUsage();

  console.log(
    JSON.stringify(
      {
        bench: 'turn-overhead',
        node: process.version,
        cpus: (await import('node:os')).cpus().length,
        database: config.databaseUrl.startsWith('file:') ? 'sqlite' : 'postgresql',
        temporal: 'embedded dev server (SQLite)',
        latency_1_conversation: stats(one),
        [`latency_${CONCURRENCY}_conversations`]: stats(many),
        sustained: { seconds: +elapsed.toFixed(1), conversations: CONCURRENCY, turns: sustained, turns_per_s: +(sustained / elapsed).toFixed(1) },
        idle_sessions: {
          sessions: IDLE_SESSIONS + CONCURRENCY * 2 + 2,
          process_rss_mb: mb(memAfter.rss),
          heap_used_mb: mb(memAfter.heapUsed),
          rss_growth_for_idle_sessions_mb: mb(memAfter.rss - memBefore.rss),
          note: 'API, worker and ingress in one process (the all-in-one start); the Temporal server is a separate process',
        },
        targets: { p50_ms_1_conversation: 50, turns_per_s: 50, worker_rss_mb_1000_idle: 300 },
      },
      null,
      2,
    ),
  );
} finally {
  await steward.stop();
  await model.close();
  rmSync(dataDir, { recursive: true, force: true });
}
