/**
 * Platform overhead per turn, with a zero-latency scripted model (the OpenAI-compatible test
 * server echoing at once): message in through the HTTP API -> reply recorded in the
 * transcript. Runs the all-in-one stack in this process on the embedded Temporal dev server,
 * through the same phases as the plain-Temporal floor (bench/floor.ts, bench/phases.ts).
 * Prints JSON. Not a test: figures depend on the machine; compare them with the floor run
 * beside them (bench/compare.ts).
 *
 *   node --expose-gc --import tsx bench/turn-overhead.ts            (60 s sustained phase)
 *   BENCH_SECONDS=10 BENCH_IDLE_SESSIONS=200 node --expose-gc --import tsx bench/turn-overhead.ts
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
import { historyCost, phaseSettings, runPhases } from './phases.js';

const TOKEN = 'bench-token-0123456789abcdef';
const CACHE = Number(process.env.BENCH_CACHE ?? process.env.STEWARD_WORKER_MAX_CACHED_WORKFLOWS ?? 200);
const HISTORY_TURNS = 10;
const settings = phaseSettings();

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
  STEWARD_WORKER_MAX_CACHED_WORKFLOWS: String(CACHE),
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

/** History events and workflow tasks of a session's HISTORY_TURNS turns: the session's runs and every workflow they started. */
async function sessionCost(chatId: string) {
  const seen = new Set<string>();
  const histories: Array<Awaited<ReturnType<ReturnType<typeof steward.client.workflow.getHandle>['fetchHistory']>>> = [];
  const visit = async (workflowId: string, runId?: string) => {
    const key = `${workflowId}/${runId ?? ''}`;
    if (seen.has(key)) return;
    seen.add(key);
    const h = await steward.client.workflow.getHandle(workflowId, runId).fetchHistory();
    histories.push(h);
    for (const e of h.events ?? []) {
      const child = e.startChildWorkflowExecutionInitiatedEventAttributes;
      if (child?.workflowId) await visit(child.workflowId);
    }
  };
  await visit(sessionWorkflowId({ platform: 'http', account: 'default', chatId }));
  return historyCost(histories as never);
}

try {
  const results = await runPhases(turn, settings);
  for (let i = 0; i < HISTORY_TURNS; i++) await turn('history');
  await new Promise((r) => setTimeout(r, 500)); // the last turn's closing tasks
  const cost = await sessionCost('history');
  console.log(
    JSON.stringify(
      {
        bench: 'turn-overhead',
        cache: CACHE,
        database: config.databaseUrl.startsWith('file:') ? 'sqlite' : 'postgresql',
        temporal: 'embedded dev server (SQLite)',
        ...results,
        per_turn: { history_events: +(cost.events / HISTORY_TURNS).toFixed(1), workflow_tasks: +(cost.workflowTasks / HISTORY_TURNS).toFixed(1), turns: HISTORY_TURNS },
        note: 'API, worker and ingress in one process (the all-in-one start); the Temporal server is a separate process',
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
