/**
 * The workspaces' reindexing on change: every workspace's folder is watched, recursively
 * (adapters/directory-watchers.ts: inotify or polling, `.git/` and links left alone, bursts
 * settled), and each settled batch signals the workspace's indexing workflow with the changed
 * paths (a batch that overflowed asks for the whole workspace). The workflow itself lets a
 * burst settle again and indexes in batches; a deleted file leaves the index there.
 *
 * No Temporal here: the workspace service starts or signals the workflow.
 */
import type { Logger } from 'pino';
import type { WorkspaceService } from '../../services/workspaces.js';
import { startDirectoryWatchers, type DirectoryWatchers, type FileEventPayload, type WatchSettings } from '../directory-watchers.js';

export interface WorkspaceWatchersOptions extends WatchSettings {
  workspaces: Pick<WorkspaceService, 'list' | 'reindex'> & Partial<Pick<WorkspaceService, 'onChange'>>;
  log?: Logger;
  /** Each batch handed on (tests, diagnostics). */
  onBatch?: (b: { workspace: string; files: number; whole: boolean }) => void;
}

export async function startWorkspaceWatchers(opts: WorkspaceWatchersOptions): Promise<DirectoryWatchers> {
  const { workspaces, onBatch, ...settings } = opts;
  return startDirectoryWatchers({
    // the index reads the files itself: no previews
    maxPreviewTotal: 0,
    ...settings,
    what: 'workspace',
    noun: 'a workspace',
    list: async () => new Map((await workspaces.list()).map((w) => [w.name, w.root])),
    async deliver(workspace: string, batchId: string, payload: FileEventPayload) {
      const whole = payload.more > 0;
      await workspaces.reindex(workspace, whole ? {} : { paths: payload.files.map((f) => f.path) });
      opts.log?.info({ workspace, batchId, files: payload.files.length, whole }, 'workspace changed');
      onBatch?.({ workspace, files: payload.files.length, whole });
    },
    ...(workspaces.onChange ? { onChange: (listener: () => void) => workspaces.onChange!(listener) } : {}),
  });
}
