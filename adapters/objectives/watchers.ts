/**
 * The workspace-file trigger of objectives: every objective with a `watchPath` (and not paused)
 * has its directory watched, recursively (adapters/directory-watchers.ts: inotify or polling,
 * `.git/` and links left alone, bursts settled and batched), and each batch becomes one event
 * (`ObjectiveService.receiveInternalEvent`, source `file`, the batch id as the event id, so a
 * change reported twice is one event). The set follows the objectives: `refresh()` after each
 * change (the service's `onChange`) and a reconcile every `reconcileMs`.
 *
 * No Temporal here: runs start through the objective service.
 */
import type { Logger } from 'pino';
import type { Db } from '../../domain/db.js';
import { watchedDirectories, type ObjectiveEventResult, type ObjectiveService } from '../../services/objectives.js';
import { startDirectoryWatchers, type FileEventPayload, type WatchSettings } from '../directory-watchers.js';

export type { FileEventPayload, WatchedFile } from '../directory-watchers.js';

export interface ObjectiveWatchersOptions extends WatchSettings {
  db: Db;
  objectives: Pick<ObjectiveService, 'receiveInternalEvent'> & Partial<Pick<ObjectiveService, 'onChange'>>;
  log?: Logger;
  /** Each delivered batch (tests, diagnostics). */
  onBatch?: (b: { objectiveId: string; eventId: string; files: number; result: ObjectiveEventResult }) => void;
}

export interface ObjectiveWatchers {
  /** Re-read the objectives and watch exactly the active ones' directories (serialised). */
  refresh(): Promise<void>;
  watching(): Array<{ objectiveId: string; path: string; mode: 'watch' | 'poll' }>;
  stop(): Promise<void>;
}

/** Watch the directories of the objectives that have one; follow their changes. */
export async function startObjectiveWatchers(opts: ObjectiveWatchersOptions): Promise<ObjectiveWatchers> {
  const { db, objectives, onBatch, ...settings } = opts;
  const watchers = await startDirectoryWatchers({
    ...settings,
    what: 'objectiveId',
    noun: 'an objective',
    list: () => watchedDirectories(db),
    async deliver(objectiveId: string, eventId: string, payload: FileEventPayload) {
      const result = await objectives.receiveInternalEvent(objectiveId, { source: 'file', eventId, payload });
      opts.log?.info({ objectiveId, eventId, files: payload.files.length, status: result.status, ...('error' in result ? { error: result.error } : { runId: result.runId, duplicate: result.duplicate }) }, 'file event');
      onBatch?.({ objectiveId, eventId, files: payload.files.length, result });
    },
    ...(objectives.onChange ? { onChange: (listener: () => void) => objectives.onChange!(listener) } : {}),
  });
  return {
    refresh: () => watchers.refresh(),
    watching: () => watchers.watching().map((w) => ({ objectiveId: w.id, path: w.path, mode: w.mode })),
    stop: () => watchers.stop(),
  };
}
