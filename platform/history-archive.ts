/**
 * A folder of recorded workflow histories read as an archive: the history of a run by its
 * workflow id and run id. The folder is what `steward histories record` writes (platform/
 * histories.ts: one `temporal workflow show -o json` file per run, payloads decoded, and
 * `workflow-ids.json`), which is also the replay corpus's format (test/replay/histories/).
 *
 * Replay reads a past turn's run from Temporal; a run Temporal no longer keeps (past the
 * namespace's retention) is read from this archive when one is configured
 * (STEWARD_REPLAY_HISTORIES, docs/replay.md "Runs past retention"). The folder is an input that
 * crosses a boundary: each file is checked (a history whose first event starts a workflow and
 * names its run), and one that is not is left out of the index with its reason, never fatal.
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { historyFromJSON, type History } from './history-json.js';

/** The file that maps each history file to its workflow id (older servers leave it out of the started event). */
const WORKFLOW_IDS_FILE = 'workflow-ids.json';

const StartedSchema = z.object({
  events: z
    .array(z.unknown())
    .min(1, 'no events')
    .refine(
      (evs) => {
        const first = evs[0] as { workflowExecutionStartedEventAttributes?: unknown } | undefined;
        return typeof first?.workflowExecutionStartedEventAttributes === 'object';
      },
      { message: 'the first event does not start a workflow' },
    ),
});
const StartedAttrsSchema = z.object({
  workflowId: z.string().min(1).optional(),
  originalExecutionRunId: z.string({ error: 'the started event names no run id' }).min(1, 'the started event names no run id'),
});
const WorkflowIdsSchema = z.record(z.string(), z.string().min(1));

export interface HistoryArchive {
  /** The folder read. */
  dir: string;
  /** The run's history, or undefined when the archive does not hold it. */
  history(workflowId: string, runId: string): Promise<History | undefined>;
  /** The runs indexed, and the files left out with why (read once, on first use). */
  index(): Promise<{ runs: number; skipped: Array<{ file: string; reason: string }> }>;
}

const runKey = (workflowId: string, runId: string) => `${workflowId}\u0000${runId}`;

/** The archive in `dir`. Nothing is read until a history is asked for; the index is rebuilt when the folder changes. */
export function openHistoryArchive(dir: string): HistoryArchive {
  let built: { mtimeMs: number; files: Map<string, string>; skipped: Array<{ file: string; reason: string }> } | undefined;

  async function build(): Promise<NonNullable<typeof built>> {
    const mtimeMs = (await stat(dir)).mtimeMs;
    if (built && built.mtimeMs === mtimeMs) return built;
    const names = (await readdir(dir)).filter((f) => f.endsWith('.json') && f !== WORKFLOW_IDS_FILE).sort();
    const idsRaw = await readFile(path.join(dir, WORKFLOW_IDS_FILE), 'utf8').catch(() => '{}');
    const idsParsed = WorkflowIdsSchema.safeParse(JSON.parse(idsRaw) as unknown);
    const ids = idsParsed.success ? idsParsed.data : {};
    const files = new Map<string, string>();
    const skipped: Array<{ file: string; reason: string }> = [];
    for (const file of names) {
      try {
        const json = JSON.parse(await readFile(path.join(dir, file), 'utf8')) as unknown;
        const h = StartedSchema.safeParse(json);
        if (!h.success) throw new Error(h.error.issues[0]?.message ?? 'not a history');
        const first = h.data.events[0] as { workflowExecutionStartedEventAttributes: unknown };
        const attrs = StartedAttrsSchema.safeParse(first.workflowExecutionStartedEventAttributes);
        if (!attrs.success) throw new Error(attrs.error.issues[0]?.message ?? 'no run id');
        const workflowId = attrs.data.workflowId ?? ids[file];
        if (!workflowId) throw new Error(`its workflow id is neither in its started event nor in ${WORKFLOW_IDS_FILE}`);
        files.set(runKey(workflowId, attrs.data.originalExecutionRunId), file);
      } catch (err) {
        skipped.push({ file, reason: (err as Error).message });
      }
    }
    built = { mtimeMs, files, skipped };
    return built;
  }

  return {
    dir,
    async history(workflowId, runId) {
      const file = (await build()).files.get(runKey(workflowId, runId));
      if (!file) return undefined;
      return historyFromJSON(JSON.parse(await readFile(path.join(dir, file), 'utf8')) as unknown);
    },
    async index() {
      const b = await build();
      return { runs: b.files.size, skipped: b.skipped };
    },
  };
}
