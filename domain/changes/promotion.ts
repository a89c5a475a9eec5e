/**
 * The promotion gate's own work: the single-writer lease per repository, and the draft PR (the
 * patch applied to a clean clone of the base, its files sent through octokit). Only this part
 * of a change reads the GitHub token.
 */
import { ApplicationFailure } from '@temporalio/common';
import path from 'node:path';
import type { GitHubTarget } from '../../common/changes.js';
import { getBlobText } from '../blobs.js';
import type { Db } from '../db.js';
import { applyPatch, changedFiles, cloneAt, fileMode, readFileAtWorkTree } from './git.js';
import { BaseMovedError, GitHubError, openDraftPullRequest } from './github.js';
import { tryTakeLease } from '../store/changes.js';
import { withTempDir } from './gate.js';

/** How long the promotion gate's lease on a repository lasts without renewal. */
export const LEASE_MS = 15 * 60_000;

export const refused = (message: string) => ApplicationFailure.create({ type: 'ChangeRefused', message, nonRetryable: true });

/** Wait for the repository's single-writer lease (expired leases of crashed holders are taken over). */
export async function acquireLease(db: Db, repoName: string, holder: string, wait: { signal: AbortSignal; heartbeat: () => void; sleep: (ms: number) => Promise<void> }): Promise<void> {
  for (;;) {
    if (wait.signal.aborted) throw wait.signal.reason ?? new Error('cancelled');
    if (await tryTakeLease(db, repoName, holder, new Date(Date.now() + LEASE_MS))) return;
    wait.heartbeat();
    await wait.sleep(250);
  }
}

type PrFile = { path: string; mode: '100644' | '100755' | '120000'; content?: string; deleted?: boolean };

/** The files the patch changes on `baseSha`, as the GitHub API takes them (content in base64). */
async function patchedFiles(db: Db, cloneUrl: string, baseSha: string, patchHash: string): Promise<PrFile[]> {
  return withTempDir('steward-promote-', async (dir) => {
    const tree = path.join(dir, 'tree');
    await cloneAt(cloneUrl, baseSha, tree);
    const applied = await applyPatch(tree, await getBlobText(db, patchHash));
    if (!applied.ok) throw refused(`the patch no longer applies: ${applied.error}`);
    const out: PrFile[] = [];
    for (const f of await changedFiles(tree, baseSha)) {
      if (f.status === 'D') {
        out.push({ path: f.path, mode: '100644', deleted: true });
        continue;
      }
      const mode = (await fileMode(tree, f.path)) as PrFile['mode'];
      out.push({ path: f.path, mode, content: (await readFileAtWorkTree(tree, f.path)).toString('base64') });
    }
    return out;
  });
}

export interface DraftPr {
  gh: GitHubTarget;
  apiUrl: string;
  token: string;
  cloneUrl: string;
  baseBranch: string;
  baseSha: string;
  patchHash: string;
  changeId: string;
  title: string;
  commitMessage: string;
  body: string;
  signal: AbortSignal;
}

/** Open the draft PR; a base that moved meanwhile is a retryable BaseMoved (the retry revalidates). */
export async function openChangePr(db: Db, p: DraftPr): Promise<{ number: number; url: string; branch: string; commitSha: string }> {
  const files = await patchedFiles(db, p.cloneUrl, p.baseSha, p.patchHash);
  try {
    const pr = await openDraftPullRequest({
      baseUrl: p.gh.apiUrl ?? p.apiUrl,
      token: p.token,
      owner: p.gh.owner,
      repo: p.gh.repo,
      baseBranch: p.baseBranch,
      expectedBaseSha: p.baseSha,
      branch: `steward/change-${p.changeId}`,
      title: p.title,
      body: p.body,
      files,
      commitMessage: p.commitMessage,
      signal: p.signal,
    });
    return { number: pr.number, url: pr.url, branch: pr.branch, commitSha: pr.commitSha };
  } catch (err) {
    if (err instanceof BaseMovedError) {
      // moved between our check and the PR: the retry revalidates on the new base
      throw ApplicationFailure.create({ type: 'BaseMoved', message: err.message });
    }
    if (err instanceof GitHubError) throw ApplicationFailure.create({ type: 'GitHubError', message: err.message, nonRetryable: !err.retryable });
    throw err;
  }
}
