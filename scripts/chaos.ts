/**
 * The full chaos suite (see test/chaos/chaos.ts): 50 kill -9 of worker processes by default,
 * Temporal dev server restarts, rolling worker restarts and duplicate inbound deliveries while
 * chat turns, repo changes and an objective run; everything on 127.0.0.1, bounded, and it
 * stops by itself.
 *
 *   node --import tsx scripts/chaos.ts
 *
 * Settings (environment, all optional):
 *   CHAOS_SEED             PRNG seed (printed; give it again to repeat a run's fault sequence)
 *   CHAOS_KILLS            kill -9 of a worker (default 50)
 *   CHAOS_SERVER_RESTARTS  Temporal dev server SIGKILL + restart (default 3)
 *   CHAOS_ROLLING          rolling restarts of every worker (default 2)
 *   CHAOS_DUPLICATES       duplicate-delivery faults (default 10)
 *   CHAOS_CHANGES          repo changes (default 3)
 *   CHAOS_CHATS            chats sending turns concurrently (default 4)
 *   CHAOS_WORKERS          worker groups as `queues*count` separated by `;`
 *                          (default `interactive*2;background,repo*2`)
 *   CHAOS_MAX_MINUTES      wall-time bound of the fault loop (default 20)
 *   CHAOS_LOG_DIR          keep every worker's output and the Temporal server log here
 *   STEWARD_TEST_PG_URL    a PostgreSQL admin URL: run on PostgreSQL instead of SQLite
 *
 * Prints progress, a JSON summary and the line `chaos: turns sent N, lost N, doubled N; ...`;
 * exits 1 when a turn was lost or doubled or any other check failed, 2 on bad settings.
 */
import { z } from 'zod';
import { DEFAULT_WORKER_GROUPS, runChaos, summaryLine, type WorkerGroup } from '../test/chaos/chaos.js';

const count = (fallback: number, max: number) => z.coerce.number().int().min(0).max(max).default(fallback);
const Settings = z.object({
  CHAOS_SEED: z.coerce.number().int().min(0).max(0xffffffff).optional(),
  CHAOS_KILLS: count(50, 1000),
  CHAOS_SERVER_RESTARTS: count(3, 100),
  CHAOS_ROLLING: count(2, 20),
  CHAOS_DUPLICATES: count(10, 1000),
  CHAOS_CHANGES: z.coerce.number().int().min(1).max(20).default(3),
  CHAOS_CHATS: z.coerce.number().int().min(1).max(20).default(4),
  CHAOS_WORKERS: z
    .string()
    .default(DEFAULT_WORKER_GROUPS.map((g) => `${g.queues}*${g.count}`).join(';'))
    .transform((v, ctx): WorkerGroup[] => {
      const groups: WorkerGroup[] = [];
      for (const part of v.split(';').map((p) => p.trim()).filter(Boolean)) {
        const m = /^((?:interactive|background|repo)(?:,(?:interactive|background|repo))*)\*([1-9]\d?)$/.exec(part);
        if (!m) {
          ctx.addIssue({ code: 'custom', message: `expected queues*count such as interactive,background*2 (got ${part})` });
          return z.NEVER;
        }
        groups.push({ queues: m[1]!, count: Number(m[2]) });
      }
      if (groups.length === 0) {
        ctx.addIssue({ code: 'custom', message: 'expected at least one worker group' });
        return z.NEVER;
      }
      return groups;
    }),
  CHAOS_MAX_MINUTES: z.coerce.number().positive().max(120).default(20),
  CHAOS_LOG_DIR: z.string().trim().min(1).optional(),
});

const parsed = Settings.safeParse(process.env);
if (!parsed.success) {
  for (const i of parsed.error.issues) process.stderr.write(`${i.path.join('.')}: ${i.message}\n`);
  process.exit(2);
}
const s = parsed.data;
const result = await runChaos({
  ...(s.CHAOS_SEED !== undefined ? { seed: s.CHAOS_SEED } : {}),
  kills: s.CHAOS_KILLS,
  serverRestarts: s.CHAOS_SERVER_RESTARTS,
  rollingRestarts: s.CHAOS_ROLLING,
  duplicates: s.CHAOS_DUPLICATES,
  changes: s.CHAOS_CHANGES,
  chats: s.CHAOS_CHATS,
  workerGroups: s.CHAOS_WORKERS,
  maxFaultMs: s.CHAOS_MAX_MINUTES * 60_000,
  settleMs: 180_000,
  ...(s.CHAOS_LOG_DIR ? { logDir: s.CHAOS_LOG_DIR } : {}),
  log: (line) => process.stdout.write(`${line}\n`),
});
process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
process.stdout.write(`${summaryLine(result)}\n`);
process.stdout.write(`seed ${result.seed}; ${(result.durationMs / 1000).toFixed(0)} s; ${result.problems.length ? `PROBLEMS:\n  ${result.problems.join('\n  ')}` : 'no problems'}\n`);
process.exit(result.lost === 0 && result.doubled === 0 && result.problems.length === 0 ? 0 : 1);
