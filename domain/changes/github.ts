/**
 * Promotion to GitHub: a change becomes a draft pull request, written with the Git Data API (no
 * clone, no push): blobs → a tree on top of the base commit's tree → a commit whose parent is the
 * base → the branch ref → the pull request (draft). Pure I/O over `@octokit/rest`; no Temporal here.
 *
 * Retries are safe. An attempt first looks for its branch:
 *   - branch exists and an open pull request comes from it → that pull request is the answer
 *     (`reused: true`), even if the base moved since (the earlier attempt already succeeded);
 *   - branch exists without an open pull request (an earlier attempt died between the ref and the
 *     pull request) → the branch is force-moved to the new commit and the pull request created;
 *   - otherwise the full sequence runs.
 * If creating the pull request fails, the branch is deleted again, unless an open pull request from
 * it turns out to exist after all (the answer was lost, not the request), which is then returned.
 *
 * Errors: `GitHubError` (HTTP status + `retryable`), `BaseMovedError` (the base branch is not at
 * the sha the change was validated against), `EmptyChangeError` (nothing to commit). The token
 * never appears in a message. An abort through `signal` rethrows the AbortError as is.
 */
import { Octokit } from '@octokit/rest';

export type FileMode = '100644' | '100755' | '120000';

export interface PromotionFile {
  /** Repository-relative path, `/`-separated (`src/a/b.ts`). */
  path: string;
  /** `100644` file, `100755` executable, `120000` symlink (content = the link target). */
  mode: FileMode;
  /** The new content, base64. Required unless `deleted`. */
  content?: string;
  deleted?: boolean;
}

export interface GitHubRepoTarget {
  /** API root, e.g. `https://api.github.com` or a GitHub Enterprise `https://host/api/v3`. */
  baseUrl: string;
  token: string;
  owner: string;
  repo: string;
  signal?: AbortSignal;
}

export interface BranchTarget extends GitHubRepoTarget {
  /** Branch name without `refs/heads/`. */
  branch: string;
}

export interface OpenDraftPullRequestOptions extends GitHubRepoTarget {
  baseBranch: string;
  /** When set, the base branch must still point here; otherwise `BaseMovedError` and nothing is written. */
  expectedBaseSha?: string;
  branch: string;
  title: string;
  body: string;
  files: PromotionFile[];
  commitMessage: string;
}

export interface DraftPullRequest {
  number: number;
  /** The pull request's html_url. */
  url: string;
  branch: string;
  /** The head commit of the pull request. */
  commitSha: string;
  /** The base commit the change was committed on. */
  baseSha: string;
  /** True when an existing open pull request from the branch was returned (a retried attempt). */
  reused: boolean;
}

// ---------------------------------------------------------------------------------------------
// Errors

/** A failed GitHub call. `status` is undefined for network failures. */
export class GitHubError extends Error {
  override readonly name = 'GitHubError';
  readonly status: number | undefined;
  /** 5xx, 429, rate limiting (403 with an exhausted limit) and network failures are worth retrying. */
  readonly retryable: boolean;
  /** What was being done, e.g. `git.createRef`. */
  readonly operation: string;
  /** GitHub's `message`, when it sent one. */
  readonly githubMessage: string | undefined;
  readonly requestId: string | undefined;
  constructor(message: string, opts: { status?: number; retryable: boolean; operation: string; githubMessage?: string; requestId?: string }) {
    super(message);
    this.status = opts.status;
    this.retryable = opts.retryable;
    this.operation = opts.operation;
    this.githubMessage = opts.githubMessage;
    this.requestId = opts.requestId;
  }
}

/** The base branch is no longer at the sha the change was validated against. Nothing was written. */
export class BaseMovedError extends Error {
  override readonly name = 'BaseMovedError';
  constructor(
    readonly baseBranch: string,
    readonly expectedSha: string,
    readonly actualSha: string,
  ) {
    super(`the base branch ${baseBranch} moved: expected ${expectedSha}, found ${actualSha}`);
  }
}

/** The change has nothing to commit (no files, or files that leave the base tree as it is). */
export class EmptyChangeError extends Error {
  override readonly name = 'EmptyChangeError';
}

// ---------------------------------------------------------------------------------------------
// Octokit plumbing

/** Quiet: Octokit's request-log plugin reports every non-2xx through `log.error`, even expected 404s. */
const quietLog = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };

function client(t: GitHubRepoTarget): Octokit {
  return new Octokit({
    baseUrl: t.baseUrl.replace(/\/+$/, ''),
    auth: t.token,
    userAgent: 'steward',
    log: quietLog,
    request: t.signal ? { signal: t.signal } : {},
  });
}

/** The parts of Octokit's RequestError used here, checked structurally. */
interface RequestErrorLike {
  status: number;
  message: string;
  response?: { data?: unknown; headers?: Record<string, string | number | undefined> };
}

function isRequestErrorLike(e: unknown): e is RequestErrorLike {
  return e instanceof Error && typeof (e as { status?: unknown }).status === 'number';
}

function isAbort(e: unknown, signal: AbortSignal | undefined): boolean {
  return (e instanceof Error && e.name === 'AbortError') || signal?.aborted === true;
}

function redact(text: string, token: string): string {
  return token ? text.split(token).join('[REDACTED]') : text;
}

/** Turns whatever Octokit threw into a GitHubError (AbortErrors pass through untouched). */
function toGitHubError(e: unknown, operation: string, t: GitHubRepoTarget): unknown {
  if (e instanceof GitHubError || e instanceof BaseMovedError || e instanceof EmptyChangeError) return e;
  if (isAbort(e, t.signal)) return e;
  const where = `${t.owner}/${t.repo}`;
  if (isRequestErrorLike(e) && e.response) {
    const data = e.response.data;
    const githubMessage = typeof data === 'object' && data !== null && 'message' in data && typeof data.message === 'string' ? data.message : undefined;
    const details =
      typeof data === 'object' && data !== null && 'errors' in data && Array.isArray(data.errors)
        ? data.errors
            .map((x: unknown) => (typeof x === 'object' && x !== null && 'message' in x && typeof x.message === 'string' ? x.message : JSON.stringify(x)))
            .join('; ')
        : '';
    const headers = e.response.headers ?? {};
    const status = e.status;
    const rateLimited = status === 429 || (status === 403 && (String(headers['x-ratelimit-remaining']) === '0' || /rate limit/i.test(githubMessage ?? '')));
    const retryable = status >= 500 || rateLimited;
    const requestId = headers['x-github-request-id'];
    const text = `GitHub ${operation} on ${where} failed: ${status} ${githubMessage ?? 'error'}${details ? ` (${details})` : ''}`;
    return new GitHubError(redact(text, t.token), {
      status,
      retryable,
      operation,
      ...(githubMessage === undefined ? {} : { githubMessage: redact(githubMessage, t.token) }),
      ...(requestId === undefined ? {} : { requestId: String(requestId) }),
    });
  }
  // No response: the request never got an answer (connection refused/reset, DNS, TLS, ...).
  const reason = e instanceof Error ? e.message : String(e);
  return new GitHubError(redact(`GitHub ${operation} on ${where} failed: network error: ${reason}`, t.token), { retryable: true, operation });
}

/** Runs one API call, converting failures to GitHubError. */
async function call<T>(operation: string, t: GitHubRepoTarget, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    throw toGitHubError(e, operation, t);
  }
}

function statusOf(e: unknown): number | undefined {
  return e instanceof GitHubError ? e.status : undefined;
}

async function refSha(gh: Octokit, t: GitHubRepoTarget, branch: string): Promise<string | null> {
  try {
    const { data } = await call('git.getRef', t, () => gh.rest.git.getRef({ owner: t.owner, repo: t.repo, ref: `heads/${branch}` }));
    return data.object.sha;
  } catch (e) {
    if (statusOf(e) === 404) return null;
    throw e;
  }
}

interface OpenPull {
  number: number;
  html_url: string;
  head: { sha: string };
  base: { sha: string };
}

async function findOpenPull(gh: Octokit, t: GitHubRepoTarget, branch: string, baseBranch: string): Promise<OpenPull | undefined> {
  const { data } = await call('pulls.list', t, () =>
    gh.rest.pulls.list({ owner: t.owner, repo: t.repo, state: 'open', head: `${t.owner}:${branch}`, base: baseBranch, per_page: 10 }),
  );
  return data[0];
}

function reusedResult(pr: OpenPull, branch: string): DraftPullRequest {
  return { number: pr.number, url: pr.html_url, branch, commitSha: pr.head.sha, baseSha: pr.base.sha, reused: true };
}

function checkFiles(files: PromotionFile[]): void {
  if (files.length === 0) throw new EmptyChangeError('the change has no files: nothing to promote');
  const seen = new Set<string>();
  for (const f of files) {
    if (!f.path || f.path.startsWith('/') || f.path.split('/').some((s) => s === '' || s === '.' || s === '..')) {
      throw new TypeError(`invalid path in change: ${JSON.stringify(f.path)}`);
    }
    if (seen.has(f.path)) throw new TypeError(`path appears twice in change: ${f.path}`);
    seen.add(f.path);
    if (!f.deleted && f.content === undefined) throw new TypeError(`no content for ${f.path} (and not deleted)`);
  }
}

// ---------------------------------------------------------------------------------------------
// Public operations

/**
 * Opens a draft pull request from `branch` into `baseBranch` holding `files` as one commit on top of
 * the base branch's head. See the module comment for the retry behaviour.
 */
export async function openDraftPullRequest(opts: OpenDraftPullRequestOptions): Promise<DraftPullRequest> {
  checkFiles(opts.files);
  const gh = client(opts);
  const { owner, repo, branch } = opts;

  // 1. An earlier attempt's branch (and pull request)?
  let branchExists = (await refSha(gh, opts, branch)) !== null;
  if (branchExists) {
    const open = await findOpenPull(gh, opts, branch, opts.baseBranch);
    if (open) return reusedResult(open, branch);
  }

  // 2. The base: where it is, and its tree.
  const baseSha = await refSha(gh, opts, opts.baseBranch);
  if (baseSha === null) {
    throw new GitHubError(`GitHub git.getRef on ${owner}/${repo} failed: 404 the base branch ${opts.baseBranch} does not exist`, {
      status: 404,
      retryable: false,
      operation: 'git.getRef',
    });
  }
  if (opts.expectedBaseSha !== undefined && opts.expectedBaseSha !== baseSha) throw new BaseMovedError(opts.baseBranch, opts.expectedBaseSha, baseSha);
  const { data: baseCommit } = await call('git.getCommit', opts, () => gh.rest.git.getCommit({ owner, repo, commit_sha: baseSha }));

  // 3. Blobs, one per written file (sequential: small changes, and a deterministic request order).
  const entries: Array<{ path: string; mode: FileMode; type: 'blob'; sha: string | null }> = [];
  for (const f of opts.files) {
    if (f.deleted) {
      entries.push({ path: f.path, mode: f.mode, type: 'blob', sha: null });
      continue;
    }
    const content = f.content ?? '';
    const { data: blob } = await call('git.createBlob', opts, () => gh.rest.git.createBlob({ owner, repo, content, encoding: 'base64' }));
    entries.push({ path: f.path, mode: f.mode, type: 'blob', sha: blob.sha });
  }

  // 4. The tree (on the base tree: unlisted paths stay as they are) and the commit.
  const { data: tree } = await call('git.createTree', opts, () =>
    // Octokit's type says `sha?: string | null`; null is how the API deletes a path.
    gh.rest.git.createTree({ owner, repo, base_tree: baseCommit.tree.sha, tree: entries }),
  );
  if (tree.sha === baseCommit.tree.sha) throw new EmptyChangeError('the change leaves the base tree unchanged: nothing to promote');
  const { data: commit } = await call('git.createCommit', opts, () =>
    gh.rest.git.createCommit({ owner, repo, message: opts.commitMessage, tree: tree.sha, parents: [baseSha] }),
  );

  // 5. The branch: created, or (left over by an earlier attempt, or created concurrently) moved.
  if (!branchExists) {
    try {
      await call('git.createRef', opts, () => gh.rest.git.createRef({ owner, repo, ref: `refs/heads/${branch}`, sha: commit.sha }));
    } catch (e) {
      if (!(e instanceof GitHubError && e.status === 422 && /already exists/i.test(e.githubMessage ?? ''))) throw e;
      // Someone (a concurrent attempt) made the branch meanwhile: if it already has its pull request, that is the answer.
      const open = await findOpenPull(gh, opts, branch, opts.baseBranch);
      if (open) return reusedResult(open, branch);
      branchExists = true;
    }
  }
  if (branchExists) {
    await call('git.updateRef', opts, () => gh.rest.git.updateRef({ owner, repo, ref: `heads/${branch}`, sha: commit.sha, force: true }));
  }

  // 6. The draft pull request; on failure, the branch goes again.
  try {
    const { data: pr } = await call('pulls.create', opts, () =>
      gh.rest.pulls.create({ owner, repo, title: opts.title, head: branch, base: opts.baseBranch, body: opts.body, draft: true }),
    );
    return { number: pr.number, url: pr.html_url, branch, commitSha: commit.sha, baseSha, reused: false };
  } catch (e) {
    if (isAbort(e, opts.signal)) throw e;
    // The request may have been carried out with only the answer lost (a 5xx, a reset connection,
    // or "already exists" from a concurrent attempt): an open pull request from the branch settles it.
    let open: OpenPull | undefined;
    try {
      open = await findOpenPull(gh, opts, branch, opts.baseBranch);
    } catch {
      // Unknown whether a pull request exists: keep the branch (deleting it would close one);
      // the retry finds the branch and repairs or reuses.
      throw e;
    }
    if (open) return reusedResult(open, branch);
    try {
      await deleteBranch({ ...opts, branch });
    } catch {
      // Best effort: the retry force-moves a leftover branch.
    }
    throw e;
  }
}

/** Deletes a branch. Returns false when it did not exist (404, or 422 "Reference does not exist"). */
export async function deleteBranch(opts: BranchTarget): Promise<boolean> {
  const gh = client(opts);
  try {
    await call('git.deleteRef', opts, () => gh.rest.git.deleteRef({ owner: opts.owner, repo: opts.repo, ref: `heads/${opts.branch}` }));
    return true;
  } catch (e) {
    if (e instanceof GitHubError && (e.status === 404 || (e.status === 422 && /reference does not exist/i.test(e.githubMessage ?? '')))) return false;
    throw e;
  }
}

/** The sha a branch points at, or null when there is no such branch. */
export async function getBranchSha(opts: BranchTarget): Promise<string | null> {
  return refSha(client(opts), opts, opts.branch);
}
