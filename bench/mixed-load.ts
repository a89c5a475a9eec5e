/**
 * Mixed load: does chat latency suffer from background work? The all-in-one stack in this
 * process (embedded Temporal dev server, SQLite unless DATABASE_URL), a scripted model
 * (OpenAI-compatible test server). The same chat workload runs twice:
 *   (a) alone;
 *   (b) while several objectives fire on short intervals (each run's turn calls the model,
 *       which answers after BENCH_BG_MODEL_MS, as a real model would) and repository changes
 *       run one after another on a local repository (intake, plan, coding agent, sandboxed
 *       checks in bubblewrap, patch), as bench/repo-change.ts does.
 * Chat latency is message in (POST to the HTTP API) -> reply in the transcript, with a
 * zero-latency chat model, so it measures the platform. Prints JSON: both phases' latency
 * percentiles, the p99 difference, throughput and RSS. Not a test: figures depend on the machine.
 *
 *   node --expose-gc --import tsx bench/mixed-load.ts > /tmp/mixed.json
 *   BENCH_CHATS=8 BENCH_TURNS=25 BENCH_THINK_MS=300 BENCH_SECONDS=120 BENCH_OBJECTIVES=4 \
 *     BENCH_OBJECTIVE_EVERY=2s BENCH_BG_MODEL_MS=200 BENCH_CHANGES=3 node --import tsx bench/mixed-load.ts
 *
 * Each phase stops issuing turns after BENCH_SECONDS (the turn counts are the normal bound).
 */
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import { cpus } from 'node:os';
import { pino } from 'pino';
import { sessionWorkflowId } from '../common/ids.js';
import { startSteward } from '../platform/start.js';
import { changeModel } from '../test/helpers/change-model.js';
import { createGitFixture } from '../test/helpers/git-fixture.js';
import { lastUserText, startModelServer, type RecordedRequest } from '../test/helpers/model-server.js';
import { benchConfig, BENCH_TOKEN } from './stack.js';

const int = (name: string, fallback: number, min = 0) => {
  const v = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(v) || v < min) throw new Error(`${name}: expected a whole number >= ${min}, got ${process.env[name]}`);
  return v;
};
const CHATS = int('BENCH_CHATS', 8, 1);
const TURNS = int('BENCH_TURNS', 25, 1);
const THINK_MS = int('BENCH_THINK_MS', 300);
const SECONDS = int('BENCH_SECONDS', 120, 1);
const OBJECTIVES = int('BENCH_OBJECTIVES', 4, 0);
const OBJECTIVE_EVERY = process.env.BENCH_OBJECTIVE_EVERY ?? '2s';
const BG_MODEL_MS = int('BENCH_BG_MODEL_MS', 200);
const CHANGES = int('BENCH_CHANGES', 3, 0);
const OBJECTIVE_MARK = 'mixed-load objective';

// ---- the scripted model: chat answers at once, objectives after a delay, repo changes by script
const model = await startModelServer();
const modelCalls = { chat: 0, objective: 0, change: 0 };
const change = changeModel({
  intake: () => ({ intent: 'feature', goal: 'Greet Steward', scope: ['greeting.txt'], acceptance: ['sh test.sh exits 0'] }),
  agent: [{ name: 'write_file', args: { path: 'greeting.txt', content: 'Hello, Steward\n' } }],
});
model.setDefault((req: RecordedRequest) => {
  const text = lastUserText(req.body);
  const ping = /\bping (\d+)\b/.exec(text);
  if (ping) {
    modelCalls.chat++;
    return { text: `pong ${ping[1]}` };
  }
  if (JSON.stringify(req.body ?? {}).includes(OBJECTIVE_MARK)) {
    modelCalls.objective++;
    return { text: 'Digest: nothing new.', firstTokenDelayMs: BG_MODEL_MS };
  }
  modelCalls.change++;
  return change(req);
});

const fx = createGitFixture({ 'greeting.txt': 'Hello\n', 'test.sh': 'grep -q "Hello, Steward" greeting.txt\n' });
const { config, dataDir } = await benchConfig(
  model.baseURL,
  // e.g. background=2,repo=1: caps on the background queues' slots, to see what they buy chat
  process.env.STEWARD_WORKER_CONCURRENCY ? { STEWARD_WORKER_CONCURRENCY: process.env.STEWARD_WORKER_CONCURRENCY } : {},
  'steward-bench-mixed-',
);
const steward = await startSteward(config, pino({ level: 'warn' }, pino.destination(2)));

const api = async (method: string, route: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> => {
  const res = await fetch(`${steward.apiUrl}${route}`, {
    method,
    headers: { authorization: `Bearer ${BENCH_TOKEN}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, json: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
};

// ---- replies per session, from the transcript events of the running stack
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
const waitReply = (sessionId: string, n: number, timeoutMs = 60_000) =>
  new Promise<void>((resolve, reject) => {
    if ((replies.get(sessionId) ?? 0) >= n) return resolve();
    const timer = setTimeout(() => reject(new Error(`no reply ${n} in ${sessionId} after ${timeoutMs} ms`)), timeoutMs);
    waiters.set(sessionId, [...(waiters.get(sessionId) ?? []), { n, resolve: () => (clearTimeout(timer), resolve()) }]);
  });

async function turn(chatId: string): Promise<number> {
  const sessionId = sessionWorkflowId({ platform: 'http', account: 'default', chatId });
  const expected = (replies.get(sessionId) ?? 0) + 1;
  const t0 = performance.now();
  const r = await fetch(`${steward.apiUrl}/api/v1/chats/${chatId}/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${BENCH_TOKEN}` },
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
  return { turns: s.length, p50_ms: +q(0.5).toFixed(1), p95_ms: +q(0.95).toFixed(1), p99_ms: +q(0.99).toFixed(1), max_ms: +(s.at(-1) ?? 0).toFixed(1), mean_ms: +(s.reduce((a, b) => a + b, 0) / (s.length || 1)).toFixed(1) };
}

const mb = (n: number) => +(n / 1024 / 1024).toFixed(1);

/** RSS of the embedded Temporal server (a child process started on this data directory), from /proc. */
function temporalRssBytes(): number | undefined {
  try {
    for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
      let cmd = '';
      try {
        cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      } catch {
        continue;
      }
      if (!cmd.includes(dataDir) || !cmd.includes('start-dev')) continue;
      const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
      if (m) return Number(m[1]) * 1024;
    }
  } catch {
    // not Linux
  }
  return undefined;
}

/** Peak and final RSS of this process and the Temporal server while `fn` runs. */
async function sampled<T>(fn: () => Promise<T>): Promise<{ value: T; rss: { process_peak_mb: number; process_end_mb: number; temporal_server_peak_mb?: number } }> {
  let peak = process.memoryUsage().rss;
  let serverPeak = temporalRssBytes() ?? 0;
  const timer = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage().rss);
    serverPeak = Math.max(serverPeak, temporalRssBytes() ?? 0);
  }, 500);
  try {
    const value = await fn();
    return { value, rss: { process_peak_mb: mb(peak), process_end_mb: mb(process.memoryUsage().rss), ...(serverPeak ? { temporal_server_peak_mb: mb(serverPeak) } : {}) } };
  } finally {
    clearInterval(timer);
  }
}

/** The chat workload: CHATS conversations, TURNS turns each, THINK_MS between a reply and the next message. */
async function chatWorkload(tag: string): Promise<{ latencies: number[]; seconds: number; stoppedEarly: boolean }> {
  const latencies: number[] = [];
  const until = performance.now() + SECONDS * 1000;
  let stoppedEarly = false;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: CHATS }, async (_, c) => {
      // stagger the chats so they do not move in lock step
      await new Promise((r) => setTimeout(r, (THINK_MS * c) / CHATS));
      for (let i = 0; i < TURNS; i++) {
        if (performance.now() > until) {
          stoppedEarly = true;
          return;
        }
        latencies.push(await turn(`${tag}-${c}`));
        if (THINK_MS) await new Promise((r) => setTimeout(r, THINK_MS));
      }
    }),
  );
  return { latencies, seconds: (performance.now() - t0) / 1000, stoppedEarly };
}

const objectiveIds: string[] = [];
try {
  // warm-up: bundle, caches, the first sessions
  await Promise.all(Array.from({ length: CHATS }, async (_, c) => {
    for (let i = 0; i < 3; i++) await turn(`warmup-${c}`);
  }));

  // ---- (a) chat alone
  const alone = await sampled(() => chatWorkload('alone'));

  // ---- (b) chat while objectives fire and repository changes run
  await api('POST', '/api/v1/repos', { name: 'bench', cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }] }).then((r) => {
    if (r.status >= 300) throw new Error(`registering the repository answered ${r.status}: ${JSON.stringify(r.json)}`);
  });
  const bgStart = new Date();
  for (let i = 0; i < OBJECTIVES; i++) {
    const r = await api('POST', '/api/v1/objectives', {
      name: `mixed-${i}-${Date.now().toString(36)}`,
      prompt: `${OBJECTIVE_MARK} ${i}: write the digest`,
      chatId: `bg-${i}`,
      schedule: { every: OBJECTIVE_EVERY },
      overlap: 'skip',
    });
    if (r.status !== 201) throw new Error(`creating an objective answered ${r.status}: ${JSON.stringify(r.json)}`);
    objectiveIds.push(String(r.json.id));
  }
  let chatDone = false;
  const changeTimes: number[] = [];
  const changeEnds: string[] = [];
  // repository changes one after another (at least one starts, at most BENCH_CHANGES) while the chats run
  const changesLoop = (async () => {
    for (let i = 0; i < CHANGES && (i === 0 || !chatDone); i++) {
      const t = performance.now();
      const started = await api('POST', '/api/v1/changes', { repo: 'bench', request: 'Make the greeting say Hello, Steward' });
      if (started.status >= 300) throw new Error(`starting a change answered ${started.status}: ${JSON.stringify(started.json)}`);
      const id = String(started.json.id);
      const deadline = Date.now() + 300_000;
      for (;;) {
        const c = (await api('GET', `/api/v1/changes/${id}`)).json;
        if (c.status !== 'running') {
          changeEnds.push(String(c.status));
          break;
        }
        if (Date.now() > deadline) throw new Error(`change ${id} still running after 300 s`);
        await new Promise((r) => setTimeout(r, 100));
      }
      changeTimes.push(performance.now() - t);
    }
  })();
  // the background is under way before the chats start: the first objective run exists
  const firstRunBy = Date.now() + 30_000;
  while (OBJECTIVES > 0 && Date.now() < firstRunBy && (await steward.db.objectiveRun.count({ where: { createdAt: { gte: bgStart } } })) === 0) {
    await new Promise((r) => setTimeout(r, 100));
  }
  const windowStart = new Date();
  const callsBefore = { ...modelCalls };
  const mixed = await sampled(() => chatWorkload('mixed'));
  chatDone = true;
  const windowEnd = new Date();
  const callsDuring = { chat: modelCalls.chat - callsBefore.chat, objective: modelCalls.objective - callsBefore.objective, change: modelCalls.change - callsBefore.change };
  const runsInWindow = await steward.db.objectiveRun.findMany({ where: { createdAt: { gte: windowStart, lte: windowEnd } } });
  for (const id of objectiveIds) await api('DELETE', `/api/v1/objectives/${id}`);
  await changesLoop;
  const allRuns = await steward.db.objectiveRun.findMany({ where: { createdAt: { gte: bgStart } } });

  (globalThis as { gc?: () => void }).gc?.();
  const a = stats(alone.value.latencies);
  const b = stats(mixed.value.latencies);
  const byStatus = (runs: Array<{ status: string }>) => runs.reduce<Record<string, number>>((acc, r) => ({ ...acc, [r.status]: (acc[r.status] ?? 0) + 1 }), {});
  console.log(
    JSON.stringify(
      {
        bench: 'mixed-load',
        node: process.version,
        cpus: cpus().length,
        database: config.databaseUrl.startsWith('file:') ? 'sqlite' : 'postgresql',
        temporal: 'embedded dev server (SQLite), separate process',
        workload: { chats: CHATS, turns_per_chat: TURNS, think_ms: THINK_MS, phase_cap_seconds: SECONDS, objectives: OBJECTIVES, objective_every: OBJECTIVE_EVERY, background_model_ms: BG_MODEL_MS, max_repo_changes: CHANGES },
        queues: { chat: config.temporal.taskQueue, objectives: config.temporal.backgroundTaskQueue, repo_activities: config.repoChanges.taskQueue },
        alone: {
          latency: a,
          seconds: +alone.value.seconds.toFixed(1),
          turns_per_s: +(alone.value.latencies.length / alone.value.seconds).toFixed(2),
          stopped_early: alone.value.stoppedEarly,
          rss: alone.rss,
        },
        mixed: {
          latency: b,
          seconds: +mixed.value.seconds.toFixed(1),
          turns_per_s: +(mixed.value.latencies.length / mixed.value.seconds).toFixed(2),
          stopped_early: mixed.value.stoppedEarly,
          rss: mixed.rss,
          background_during_chat: {
            objective_runs_started: runsInWindow.length,
            objective_runs_by_status_now: byStatus(runsInWindow),
            objective_runs_per_min: +((runsInWindow.length / mixed.value.seconds) * 60).toFixed(1),
            model_calls: callsDuring,
          },
          background_total: {
            objective_runs: allRuns.length,
            objective_runs_by_status: byStatus(allRuns),
            repo_changes: changeTimes.length,
            repo_change_outcomes: changeEnds,
            repo_change_ms: changeTimes.map((t) => Math.round(t)),
          },
        },
        difference: {
          p50_ms: +(b.p50_ms - a.p50_ms).toFixed(1),
          p95_ms: +(b.p95_ms - a.p95_ms).toFixed(1),
          p99_ms: +(b.p99_ms - a.p99_ms).toFixed(1),
          p99_ratio: a.p99_ms > 0 ? +(b.p99_ms / a.p99_ms).toFixed(2) : null,
        },
        process_rss_mb_end: mb(process.memoryUsage().rss),
        note: 'API, workers (interactive, background, repo queues) and ingress in one process (the all-in-one start); the Temporal server is a separate process. Chat uses a zero-latency model; objective turns wait BENCH_BG_MODEL_MS for theirs.',
      },
      null,
      2,
    ),
  );
} finally {
  for (const id of objectiveIds) await api('DELETE', `/api/v1/objectives/${id}`).catch(() => undefined);
  await steward.stop();
  await model.close();
  fx.cleanup();
  rmSync(dataDir, { recursive: true, force: true });
}
