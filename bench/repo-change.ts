/**
 * Repository-change overhead with a zero-latency scripted model: the all-in-one stack in this
 * process (embedded Temporal dev server), a small local repository, changes started over the
 * HTTP API until their patch artifact is ready. Reports the time per change and per stage
 * (from the receipts), and the cost of one sandboxed command. Prints JSON. Not a test.
 *
 *   node --import tsx bench/repo-change.ts
 *   BENCH_CHANGES=10 BENCH_SANDBOX_RUNS=100 node --import tsx bench/repo-change.ts
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { runSandboxed } from '../domain/sandbox.js';
import { startSteward } from '../platform/start.js';
import { changeModel } from '../test/helpers/change-model.js';
import { createGitFixture } from '../test/helpers/git-fixture.js';
import { startModelServer } from '../test/helpers/model-server.js';
import { benchConfig, BENCH_TOKEN } from './stack.js';

const CHANGES = Number(process.env.BENCH_CHANGES ?? 5);
const SANDBOX_RUNS = Number(process.env.BENCH_SANDBOX_RUNS ?? 50);

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? 0);
}

// one sandboxed command: bubblewrap namespaces and mounts, `true`, teardown
const work = mkdtempSync(path.join(tmpdir(), 'steward-bench-sbx-'));
const sandboxMs: number[] = [];
for (let i = 0; i < SANDBOX_RUNS; i++) {
  const t = performance.now();
  const r = await runSandboxed({ argv: ['true'], workTree: work, allowlist: ['true'], timeoutMs: 10_000, maxOutputBytes: 10_000 });
  if (r.exitCode !== 0) throw new Error(`sandbox run failed: ${r.stderrTail}`);
  sandboxMs.push(performance.now() - t);
}
rmSync(work, { recursive: true, force: true });

const model = await startModelServer();
const fx = createGitFixture({ 'greeting.txt': 'Hello\n', 'test.sh': 'grep -q "Hello, Steward" greeting.txt\n' });
const { config, dataDir } = await benchConfig(model.baseURL);
const steward = await startSteward(config, pino({ level: 'warn' }, pino.destination(2)));
const api = async (method: string, route: string, body?: unknown) => {
  const res = await fetch(`${steward.apiUrl}${route}`, {
    method,
    headers: { authorization: `Bearer ${BENCH_TOKEN}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return (await res.json()) as Record<string, unknown>;
};
try {
  model.setDefault(
    changeModel({
      intake: () => ({ intent: 'feature', goal: 'Greet Steward', scope: ['greeting.txt'], acceptance: ['sh test.sh exits 0'] }),
      agent: [{ name: 'write_file', args: { path: 'greeting.txt', content: 'Hello, Steward\n' } }],
    }),
  );
  await api('POST', '/api/v1/repos', { name: 'bench', cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }] });
  const totals: number[] = [];
  const stages: Record<string, number[]> = {};
  for (let i = 0; i < CHANGES; i++) {
    const t = performance.now();
    const { id } = (await api('POST', '/api/v1/changes', { repo: 'bench', request: 'Make the greeting say Hello, Steward' })) as { id: string };
    for (;;) {
      const c = await api('GET', `/api/v1/changes/${id}`);
      if (c.status !== 'running') {
        if (c.status !== 'done') throw new Error(`change ${id} ended ${String(c.status)}: ${String(c.error)}`);
        break;
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    totals.push(performance.now() - t);
    const receipts = await steward.db.receipt.findMany({ where: { workflowId: id }, orderBy: { id: 'asc' } });
    const at = (kind: string) => receipts.find((r) => r.kind === kind)?.createdAt.getTime();
    const marks: Array<[string, string, string]> = [
      ['intake', 'change.start', 'change.intake'],
      ['plan', 'change.intake', 'change.plan'],
      ['work (clone, agent, diff)', 'change.plan', 'change.work'],
      ['validate (clone, apply, checks)', 'change.work', 'gate.verdict'],
      ['promote', 'gate.verdict', 'promotion'],
    ];
    for (const [name, from, to] of marks) {
      const a = at(from);
      const b = at(to);
      if (a !== undefined && b !== undefined) (stages[name] ??= []).push(b - a);
    }
  }
  console.log(
    JSON.stringify(
      {
        changes: CHANGES,
        changeMs: { p50: pct(totals, 50), max: Math.round(Math.max(...totals)) },
        stageMsP50: Object.fromEntries(Object.entries(stages).map(([k, v]) => [k, pct(v, 50)])),
        sandboxCommandMs: { runs: SANDBOX_RUNS, p50: pct(sandboxMs, 50), p99: pct(sandboxMs, 99) },
      },
      null,
      2,
    ),
  );
} finally {
  await steward.stop();
  await model.close();
  fx.cleanup();
  rmSync(dataDir, { recursive: true, force: true });
}
