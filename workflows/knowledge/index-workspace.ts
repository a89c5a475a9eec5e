/**
 * A workspace's indexing, one workflow per workspace (id `workspace-index:<name>`), started or
 * signalled with the files that changed (signal-with-start: a running indexing takes the news,
 * a finished one starts again). Changes settle for a moment (more may come in the same burst),
 * then batches of indexing run as activities until nothing is left, and the workflow ends;
 * what arrived meanwhile runs in another round first. A whole-workspace request (no paths)
 * covers every file. The status query shows the rounds so far. Deterministic: no I/O here.
 */
import { continueAsNew, defineQuery, defineSignal, proxyActivities, setHandler, sleep } from '@temporalio/workflow';
import type { createActivities } from '../../activities/index.js';

type Activities = ReturnType<typeof createActivities>;

export interface WorkspaceChange {
  /** Changed workspace-relative paths; absent: the whole workspace. */
  paths?: string[];
}

export interface WorkspaceIndexInput {
  workspace: string;
  /** The activities' task queue (the background queue's worker when absent). */
  activityQueue?: string;
  /** A change carried over a continue-as-new. */
  pending?: WorkspaceChange;
}

export interface WorkspaceIndexStatus {
  workspace: string;
  phase: 'settling' | 'indexing' | 'done';
  rounds: number;
  indexed: number;
  removed: number;
  chunks: number;
}

export const workspaceChangedSignal = defineSignal<[WorkspaceChange]>('workspaceChanged');
export const workspaceIndexStatusQuery = defineQuery<WorkspaceIndexStatus>('workspaceIndexStatus');

/** Files indexed per activity; quiet time before a round; rounds before continue-as-new. */
const BATCH = 200;
const SETTLE_MS = 1000;
const ROUNDS_PER_RUN = 50;

/** Merge two changes: any whole-workspace request wins; paths are united (bounded). */
function merge(a: WorkspaceChange | undefined, b: WorkspaceChange): WorkspaceChange {
  if (!a) return b.paths ? { paths: [...new Set(b.paths)] } : {};
  if (!a.paths || !b.paths) return {};
  const paths = [...new Set([...a.paths, ...b.paths])];
  return paths.length > 1000 ? {} : { paths };
}

export async function workspaceIndexWorkflow(input: WorkspaceIndexInput): Promise<WorkspaceIndexStatus> {
  const acts = proxyActivities<Activities>({
    ...(input.activityQueue ? { taskQueue: input.activityQueue } : {}),
    startToCloseTimeout: '5 minutes',
    retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 10, nonRetryableErrorTypes: ['WorkspaceGone'] },
  });
  const status: WorkspaceIndexStatus = { workspace: input.workspace, phase: 'settling', rounds: 0, indexed: 0, removed: 0, chunks: 0 };
  let pending: WorkspaceChange | undefined = input.pending;
  let lastChange = Date.now();
  const onChange = (change: WorkspaceChange) => {
    pending = merge(pending, change);
    lastChange = Date.now();
  };
  // the handlers are set before the first await: a signal-with-start's signal is not lost
  setHandler(workspaceChangedSignal, onChange);
  setHandler(workspaceIndexStatusQuery, () => status);

  while (pending) {
    // settle: wait until no change came for SETTLE_MS (at most 10 times as long)
    status.phase = 'settling';
    const started = Date.now();
    while (Date.now() - lastChange < SETTLE_MS && Date.now() - started < 10 * SETTLE_MS) await sleep(SETTLE_MS - (Date.now() - lastChange));
    const change: WorkspaceChange = pending;
    pending = undefined;
    status.phase = 'indexing';
    status.rounds++;
    for (;;) {
      const r = await acts.indexWorkspaceBatch({ workspace: input.workspace, limit: BATCH, ...(change.paths ? { paths: change.paths } : {}) });
      status.indexed += r.indexed;
      status.removed += r.removed;
      status.chunks += r.chunks;
      if (r.remaining === 0) break;
    }
    if (pending && status.rounds >= ROUNDS_PER_RUN) {
      return continueAsNew<typeof workspaceIndexWorkflow>({ ...input, pending });
    }
  }
  status.phase = 'done';
  return status;
}
