/**
 * The knowledge activities: one batch of a workspace's indexing (the files that changed since
 * the index last saw them, up to a bound; the rest are left for the next call). The workspace's
 * folder is read from the database each time, so a removed workspace stops being indexed.
 * With embeddings on, a failing embeddings endpoint fails the activity after the batch's text is
 * indexed (so full text stays current): Temporal retries it, and the retry embeds only the
 * documents whose vectors are missing.
 */
import { activityInfo, ApplicationFailure } from '@temporalio/activity';
import type { Db } from '../domain/db.js';
import type { KnowledgeIndex } from '../domain/knowledge/index-store.js';
import { indexWorkspaceFiles } from '../domain/knowledge/indexer.js';
import { findWorkspace } from '../domain/store/workspaces.js';

export interface IndexBatchInput {
  workspace: string;
  /** Only these workspace-relative paths (a watcher's report); absent: the whole workspace. */
  paths?: string[];
  /** Files indexed by this call at most. */
  limit: number;
}

export interface IndexBatchResult {
  indexed: number;
  removed: number;
  unchanged: number;
  skipped: number;
  chunks: number;
  remaining: number;
}

export interface KnowledgeActivityDeps {
  db: Db;
  knowledge: () => Promise<KnowledgeIndex>;
}

async function indexWorkspaceBatch(deps: KnowledgeActivityDeps, input: IndexBatchInput): Promise<IndexBatchResult> {
  const ws = await findWorkspace(deps.db, input.workspace);
  if (!ws) throw ApplicationFailure.create({ type: 'WorkspaceGone', message: `no workspace ${input.workspace}`, nonRetryable: true });
  const index = await deps.knowledge();
  // the batch's embeddings are spent for the workspace, keyed by this activity (the same on its retries)
  const info = activityInfo();
  const spendKey = `index:${info.workflowExecution ? `${info.workflowExecution.workflowId}:${info.workflowExecution.runId}` : input.workspace}:${info.activityId}`;
  const r = await indexWorkspaceFiles(index, { name: ws.name, root: ws.root }, { limit: input.limit, spendKey, ...(input.paths ? { paths: input.paths } : {}) });
  if (r.embedError !== undefined) {
    throw ApplicationFailure.retryable(`the embeddings model ${index.embedder?.model ?? ''} failed; ${r.indexed.length} documents indexed as text without vectors, to be embedded on retry: ${r.embedError}`, 'EmbeddingsUnavailable');
  }
  return { indexed: r.indexed.length, removed: r.removed.length, unchanged: r.unchanged, skipped: r.skipped.length, chunks: r.chunks, remaining: r.remaining };
}

export function createKnowledgeActivities(deps: KnowledgeActivityDeps | undefined) {
  return {
    indexWorkspaceBatch: (input: IndexBatchInput): Promise<IndexBatchResult> => {
      if (!deps) throw ApplicationFailure.create({ type: 'KnowledgeOff', message: 'this worker has no knowledge index', nonRetryable: false });
      return indexWorkspaceBatch(deps, input);
    },
  };
}
