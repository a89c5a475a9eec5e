/**
 * The Steward stack the turn benchmarks run against: the all-in-one start in this process on
 * the embedded Temporal dev server, a zero-latency scripted model (the OpenAI-compatible test
 * server echoing at once), and `turn(chatId)`: one message in through the HTTP API, resolved
 * with its latency in milliseconds once the reply is in the transcript.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { sessionWorkflowId } from '../common/ids.js';
import { loadConfig, type StewardConfig } from '../config/index.js';
import { startSteward, type RunningSteward } from '../platform/start.js';
import { startModelServer } from '../test/helpers/model-server.js';
import { freePort } from '../test/helpers/process.js';
import { sessionCost } from './phases.js';

/** The API token every bench stack is started with. */
export const BENCH_TOKEN = 'bench-token-0123456789abcdef';

const PASSED_THROUGH = ['DATABASE_URL', 'STEWARD_IDLE_MEMORY_RELEASE', 'STEWARD_MALLOC_TRIM_INTERVAL', 'STEWARD_TOKEN_BUDGET'] as const;

/**
 * A bench's Steward configuration: a fresh data directory, free ports, the Temporal UI off,
 * the scripted model at `modelBaseURL`, DATABASE_URL, the memory settings and STEWARD_TOKEN_BUDGET (budgets on) when set in the
 * environment (STEWARD_IDLE_MEMORY_RELEASE, STEWARD_MALLOC_TRIM_INTERVAL: to compare them), then `extraEnv`.
 */
export async function benchConfig(modelBaseURL: string, extraEnv: Record<string, string> = {}, prefix = 'steward-bench-'): Promise<{ config: StewardConfig; dataDir: string }> {
  const dataDir = mkdtempSync(path.join(tmpdir(), prefix));
  const config = loadConfig({
    STEWARD_DATA_DIR: dataDir,
    STEWARD_HTTP_PORT: String(await freePort()),
    STEWARD_TEMPORAL_PORT: String(await freePort()),
    STEWARD_TEMPORAL_UI_PORT: String(await freePort()),
    STEWARD_TEMPORAL_UI: 'false',
    STEWARD_API_TOKEN: BENCH_TOKEN,
    STEWARD_MODEL: 'openai-compatible:bench',
    STEWARD_MODEL_BASE_URL: modelBaseURL,
    STEWARD_LOG_LEVEL: 'warn',
    ...Object.fromEntries(PASSED_THROUGH.flatMap((name) => (process.env[name] ? [[name, process.env[name]]] : []))),
    ...extraEnv,
  });
  return { config, dataDir };
}

export interface BenchStack {
  steward: RunningSteward;
  config: StewardConfig;
  cache: number;
  turn(chatId: string): Promise<number>;
  /** History events and workflow tasks of a chat's session: every run of it and every workflow they started. */
  sessionCost(chatId: string): Promise<{ events: number; workflowTasks: number; runs: number }>;
  stop(): Promise<void>;
}

export async function startBenchStack(extraEnv: Record<string, string> = {}): Promise<BenchStack> {
  const cache = Number(process.env.BENCH_CACHE ?? process.env.STEWARD_WORKER_MAX_CACHED_WORKFLOWS ?? 200);
  const model = await startModelServer({ keepRequests: false });
  const { config, dataDir } = await benchConfig(model.baseURL, { STEWARD_WORKER_MAX_CACHED_WORKFLOWS: String(cache), ...extraEnv });
  // warnings go to stderr: stdout holds the benchmark's JSON only (bench/compare.ts reads it)
  const steward = await startSteward(config, pino({ level: 'warn' }, pino.destination(2)));

  // Replies per session, counted from the transcript events of the running stack.
  const replies = new Map<string, number>();
  const waiters = new Map<string, Array<{ n: number; resolve: () => void }>>();
  steward.events.on('transcript', (sessionId, role) => {
    if (role !== 'assistant') return;
    const n = (replies.get(sessionId) ?? 0) + 1;
    replies.set(sessionId, n);
    const list = waiters.get(sessionId) ?? [];
    for (const w of list.filter((x) => x.n <= n)) w.resolve();
    // no entry kept per session once nobody waits (the scale phase makes 10,000 sessions: the
    // bench's own bookkeeping should not count in Steward's memory more than it must)
    const left = list.filter((x) => x.n > n);
    if (left.length > 0) waiters.set(sessionId, left);
    else waiters.delete(sessionId);
  });
  const waitReply = (sessionId: string, n: number) =>
    new Promise<void>((resolve) => {
      if ((replies.get(sessionId) ?? 0) >= n) return resolve();
      waiters.set(sessionId, [...(waiters.get(sessionId) ?? []), { n, resolve }]);
    });
  const sessionOf = (chatId: string) => sessionWorkflowId({ platform: 'http', account: 'default', chatId });

  return {
    steward,
    config,
    cache,
    async turn(chatId) {
      const sessionId = sessionOf(chatId);
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
    },
    sessionCost: (chatId) => sessionCost(steward.client, sessionOf(chatId)),
    async stop() {
      await steward.stop();
      await model.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
