/**
 * Promotion to GitHub (domain/changes/github.ts) against the GitHub double (test/helpers/github-double.ts):
 * real Octokit over HTTP on 127.0.0.1, a real bare git repository behind the double, and every
 * request and response checked against GitHub's OpenAPI description.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Octokit } from '@octokit/rest';
import {
  BaseMovedError,
  deleteBranch,
  EmptyChangeError,
  getBranchSha,
  GitHubError,
  openDraftPullRequest,
  type OpenDraftPullRequestOptions,
  type PromotionFile,
} from '../../domain/changes/github.js';
import { preloadOpenApi, startGitHubDouble, validateRequestBody, validateResponse, type GitHubDouble, type RecordedRequest } from '../helpers/github-double.js';

const TOKEN = 'ghs_steward_test_token_0123456789abcdef';
const OWNER = 'acme';
const REPO = 'widgets';
const BRANCH = 'steward/change-c1';

const scratchDirs: string[] = [];

function git(cwd: string, args: string[], input?: string | Buffer): string {
  return execFileSync('git', args, {
    cwd,
    input,
    stdio: ['pipe', 'pipe', 'pipe'],
    env: {
      ...process.env,
      GIT_AUTHOR_NAME: 'Seed',
      GIT_AUTHOR_EMAIL: 'seed@example.com',
      GIT_COMMITTER_NAME: 'Seed',
      GIT_COMMITTER_EMAIL: 'seed@example.com',
      GIT_CONFIG_NOSYSTEM: '1',
    },
  }).toString('utf8');
}

interface World {
  bare: string;
  work: string;
  seedSha: string;
  gh: GitHubDouble;
  /** Commits a change to main in the clone and pushes it (the base branch moves). */
  advanceMain(file: string, content: string): string;
  close(): Promise<void>;
}

/** A bare repository seeded with one commit on main (pushed from a temporary clone) and a double serving it. */
async function world(): Promise<World> {
  const dir = mkdtempSync(path.join(tmpdir(), 'steward-gh-test-'));
  scratchDirs.push(dir);
  const bare = path.join(dir, 'widgets.git');
  const work = path.join(dir, 'work');
  git(dir, ['init', '--bare', '--quiet', '--initial-branch=main', bare]);
  git(dir, ['clone', '--quiet', bare, work]);
  git(work, ['symbolic-ref', 'HEAD', 'refs/heads/main']);
  const files: Record<string, string> = {
    'README.md': '# Widgets\n',
    'src/app.ts': 'export const app = 1;\n',
    'src/util/old.ts': 'export const old = true;\n',
    'docs/remove-me.md': 'bye\n',
    'scripts/build.sh': '#!/bin/sh\necho build\n',
  };
  for (const [p, content] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(work, p)), { recursive: true });
    writeFileSync(path.join(work, p), content);
  }
  chmodSync(path.join(work, 'scripts/build.sh'), 0o755);
  git(work, ['add', '-A']);
  git(work, ['commit', '--quiet', '-m', 'seed']);
  git(work, ['push', '--quiet', 'origin', 'main']);
  const seedSha = git(bare, ['rev-parse', 'refs/heads/main']).trim();
  const gh = await startGitHubDouble({ repos: [{ owner: OWNER, repo: REPO, bareDir: bare, defaultBranch: 'main' }], token: TOKEN });
  return {
    bare,
    work,
    seedSha,
    gh,
    advanceMain(file, content) {
      writeFileSync(path.join(work, file), content);
      git(work, ['add', '-A']);
      git(work, ['commit', '--quiet', '-m', `edit ${file}`]);
      git(work, ['push', '--quiet', 'origin', 'main']);
      return git(bare, ['rev-parse', 'refs/heads/main']).trim();
    },
    async close() {
      await gh.close();
    },
  };
}

const b64 = (s: string | Buffer): string => Buffer.from(s).toString('base64');
const BINARY = Buffer.from([0, 1, 2, 255, 254, 10, 0, 13]);

/** Added, modified, deleted, nested, executable, mode-only, symlink and binary changes. */
const CHANGE: PromotionFile[] = [
  { path: 'README.md', mode: '100644', content: b64('# Widgets\n\nNow promoted by Steward.\n') },
  { path: 'src/a/b.ts', mode: '100644', content: b64('export const b = 2;\n') },
  { path: 'docs/remove-me.md', mode: '100644', deleted: true },
  { path: 'scripts/deploy.sh', mode: '100755', content: b64('#!/bin/sh\necho deploy\n') },
  { path: 'src/util/old.ts', mode: '100755', content: b64('export const old = true;\n') },
  { path: 'latest', mode: '120000', content: b64('src/app.ts') },
  { path: 'assets/logo.bin', mode: '100644', content: b64(BINARY) },
];

function options(w: World, over: Partial<OpenDraftPullRequestOptions> = {}): OpenDraftPullRequestOptions {
  return {
    baseUrl: w.gh.baseUrl,
    token: TOKEN,
    owner: OWNER,
    repo: REPO,
    baseBranch: 'main',
    branch: BRANCH,
    title: 'Steward: promote widgets',
    body: 'Change c1\n\nValidated on the base commit.',
    files: CHANGE,
    commitMessage: 'Promote widgets\n\nSteward change c1.',
    ...over,
  };
}

/** `METHOD template status` for each recorded request, with the ref for ref routes. */
function trace(requests: RecordedRequest[]): string[] {
  return requests.map((r) => {
    const op = (r.operation ?? r.path).replace('/repos/{owner}/{repo}', '');
    const ref = r.params.ref !== undefined ? ` ${r.params.ref}` : '';
    return `${r.method} ${op}${ref} ${r.status}${r.injected ? ' (injected)' : ''}`;
  });
}

const BLOBS = CHANGE.filter((f) => !f.deleted).map(() => 'POST /git/blobs 201');
const FRESH_SEQUENCE = [
  `GET /git/ref/{ref} heads/${BRANCH} 404`,
  'GET /git/ref/{ref} heads/main 200',
  'GET /git/commits/{commit_sha} 200',
  ...BLOBS,
  'POST /git/trees 201',
  'POST /git/commits 201',
  'POST /git/refs 201',
  'POST /pulls 201',
];

function branches(w: World): string[] {
  return git(w.bare, ['for-each-ref', '--format=%(refname)', 'refs/heads']).trim().split('\n');
}

describe('GitHub promotion (domain/changes/github.ts) against the GitHub double', () => {
  before(() => {
    preloadOpenApi(); // the OpenAPI description is ~73 MB: parse it and compile the validators once
  });
  after(() => {
    for (const d of scratchDirs) rmSync(d, { recursive: true, force: true });
  });

  it('opens a draft pull request whose branch in the bare repository holds exactly the change', async () => {
    const w = await world();
    try {
      const pr = await openDraftPullRequest(options(w));
      assert.equal(pr.number, 1);
      assert.equal(pr.url, `https://github.com/${OWNER}/${REPO}/pull/1`);
      assert.equal(pr.branch, BRANCH);
      assert.equal(pr.baseSha, w.seedSha);
      assert.equal(pr.reused, false);

      // The branch really exists, at the commit, with the base as its only parent.
      assert.equal(git(w.bare, ['rev-parse', `refs/heads/${BRANCH}`]).trim(), pr.commitSha);
      assert.equal(git(w.bare, ['rev-parse', `${pr.commitSha}^@`]).trim(), w.seedSha);
      assert.equal(git(w.bare, ['log', '-1', '--format=%B', pr.commitSha]).trim(), 'Promote widgets\n\nSteward change c1.');
      // Exactly these changes, no more.
      assert.equal(
        git(w.bare, ['diff', '--name-status', `main..${BRANCH}`]),
        ['M\tREADME.md', 'A\tassets/logo.bin', 'D\tdocs/remove-me.md', 'A\tlatest', 'A\tscripts/deploy.sh', 'A\tsrc/a/b.ts', 'M\tsrc/util/old.ts', ''].join('\n'),
      );
      assert.equal(git(w.bare, ['diff', '--summary', `main..${BRANCH}`, '--', 'src/util/old.ts']).trim(), 'mode change 100644 => 100755 src/util/old.ts');
      const modes = Object.fromEntries(
        git(w.bare, ['ls-tree', '-r', BRANCH])
          .trim()
          .split('\n')
          .map((l) => {
            const [meta = '', p = ''] = l.split('\t');
            return [p, meta.split(' ')[0]];
          }),
      );
      assert.deepEqual(modes, {
        'README.md': '100644',
        'assets/logo.bin': '100644',
        latest: '120000',
        'scripts/build.sh': '100755',
        'scripts/deploy.sh': '100755',
        'src/a/b.ts': '100644',
        'src/app.ts': '100644',
        'src/util/old.ts': '100755',
      });
      assert.equal(git(w.bare, ['show', `${BRANCH}:src/a/b.ts`]), 'export const b = 2;\n');
      assert.equal(git(w.bare, ['show', `${BRANCH}:README.md`]), '# Widgets\n\nNow promoted by Steward.\n');
      assert.equal(git(w.bare, ['show', `${BRANCH}:latest`]), 'src/app.ts');
      assert.deepEqual(execFileSync('git', ['--git-dir', w.bare, 'cat-file', 'blob', `${BRANCH}:assets/logo.bin`]), BINARY);
      assert.deepEqual(branches(w), ['refs/heads/main', `refs/heads/${BRANCH}`]);

      // The pull request: draft, with the title and body, head at the commit.
      assert.equal(w.gh.pulls.length, 1);
      const rec = w.gh.pulls[0];
      assert.ok(rec);
      assert.equal(rec.draft, true);
      assert.equal(rec.body, 'Change c1\n\nValidated on the base commit.');
      assert.equal(rec.title, 'Steward: promote widgets');
      assert.equal(rec.head, BRANCH);
      assert.equal(rec.base, 'main');
      assert.equal(rec.headSha, pr.commitSha);
      const created = w.gh.requests.find((r) => r.method === 'POST' && r.operation?.endsWith('/pulls'));
      assert.deepEqual(created?.body, { title: 'Steward: promote widgets', head: BRANCH, base: 'main', body: 'Change c1\n\nValidated on the base commit.', draft: true });

      // Exactly the Git Data API sequence, in order, every request and response valid per the OpenAPI description.
      assert.deepEqual(trace(w.gh.requests), FRESH_SEQUENCE);
      const blobBodies = w.gh.requests.filter((r) => r.operation?.endsWith('/git/blobs')).map((r) => r.body);
      assert.deepEqual(
        blobBodies,
        CHANGE.filter((f) => !f.deleted).map((f) => ({ content: f.content, encoding: 'base64' })),
      );
      const treeReq = w.gh.requests.find((r) => r.operation?.endsWith('/git/trees'));
      assert.deepEqual(
        (treeReq?.body as { tree: Array<{ path: string; sha: string | null }> }).tree.map((e) => [e.path, e.sha === null ? 'delete' : 'blob']),
        CHANGE.map((f) => [f.path, f.deleted ? 'delete' : 'blob']),
      );
      w.gh.assertNoViolations();

      // Reading it back through Octokit: the same pull request, draft, with the body (and again schema-valid).
      const octokit = new Octokit({ baseUrl: w.gh.baseUrl, auth: TOKEN });
      const { data: got } = await octokit.rest.pulls.get({ owner: OWNER, repo: REPO, pull_number: pr.number });
      assert.equal(got.draft, true);
      assert.equal(got.body, 'Change c1\n\nValidated on the base commit.');
      assert.equal(got.head.sha, pr.commitSha);
      assert.equal(got.base.sha, w.seedSha);
      assert.equal(got.changed_files, 7);
      const { data: repo } = await octokit.rest.repos.get({ owner: OWNER, repo: REPO });
      assert.equal(repo.default_branch, 'main');
      assert.equal(repo.open_issues_count, 1);
      w.gh.assertNoViolations();
    } finally {
      await w.close();
    }
  });

  it('throws BaseMovedError (both shas) when the base branch moved, and writes nothing', async () => {
    const w = await world();
    try {
      const moved = w.advanceMain('src/app.ts', 'export const app = 2;\n');
      await assert.rejects(openDraftPullRequest(options(w, { expectedBaseSha: w.seedSha })), (e: unknown) => {
        assert.ok(e instanceof BaseMovedError);
        assert.equal(e.expectedSha, w.seedSha);
        assert.equal(e.actualSha, moved);
        assert.equal(e.baseBranch, 'main');
        assert.match(e.message, new RegExp(`${w.seedSha}.*${moved}`));
        return true;
      });
      assert.deepEqual(branches(w), ['refs/heads/main']);
      assert.deepEqual(trace(w.gh.requests), [`GET /git/ref/{ref} heads/${BRANCH} 404`, 'GET /git/ref/{ref} heads/main 200']);
      assert.equal(w.gh.pulls.length, 0);

      // With the right expectation it goes through.
      const pr = await openDraftPullRequest(options(w, { expectedBaseSha: moved }));
      assert.equal(pr.baseSha, moved);
      w.gh.assertNoViolations();
    } finally {
      await w.close();
    }
  });

  it('refuses an empty change (no files, or files that change nothing) and creates no ref', async () => {
    const w = await world();
    try {
      await assert.rejects(openDraftPullRequest(options(w, { files: [] })), EmptyChangeError);
      assert.equal(w.gh.requests.length, 0);

      const same: PromotionFile[] = [{ path: 'README.md', mode: '100644', content: b64('# Widgets\n') }];
      await assert.rejects(openDraftPullRequest(options(w, { files: same })), EmptyChangeError);
      assert.deepEqual(branches(w), ['refs/heads/main']);
      assert.ok(!w.gh.requests.some((r) => r.operation?.includes('/git/refs') || r.operation?.endsWith('/pulls')));
      w.gh.assertNoViolations();
    } finally {
      await w.close();
    }
  });

  it('deletes the branch it created when creating the pull request fails, and a retry starts afresh', async () => {
    const w = await world();
    try {
      w.gh.failNext('POST', /\/pulls$/, 500);
      await assert.rejects(openDraftPullRequest(options(w)), (e: unknown) => {
        assert.ok(e instanceof GitHubError);
        assert.equal(e.status, 500);
        assert.equal(e.retryable, true);
        assert.equal(e.operation, 'pulls.create');
        return true;
      });
      assert.deepEqual(branches(w), ['refs/heads/main']);
      assert.deepEqual(trace(w.gh.requests).slice(-3), ['POST /pulls 500 (injected)', 'GET /pulls 200', `DELETE /git/refs/{ref} heads/${BRANCH} 204`]);
      assert.equal(w.gh.pulls.length, 0);

      const before = w.gh.requests.length;
      const pr = await openDraftPullRequest(options(w));
      assert.equal(pr.reused, false);
      assert.equal(pr.number, 1);
      assert.deepEqual(trace(w.gh.requests.slice(before)), FRESH_SEQUENCE);
      assert.equal(git(w.bare, ['rev-parse', `refs/heads/${BRANCH}`]).trim(), pr.commitSha);
      w.gh.assertNoViolations();
    } finally {
      await w.close();
    }
  });

  it('repairs a branch left without a pull request: force-moves it and opens the pull request', async () => {
    const w = await world();
    try {
      // The pull request fails and so does the cleanup: the branch is left behind.
      w.gh.failNext('POST', /\/pulls$/, 503);
      w.gh.failNext('DELETE', /\/git\/refs\//, 502);
      await assert.rejects(openDraftPullRequest(options(w)), (e: unknown) => e instanceof GitHubError && e.status === 503 && e.retryable);
      const leftover = await getBranchSha({ baseUrl: w.gh.baseUrl, token: TOKEN, owner: OWNER, repo: REPO, branch: BRANCH });
      assert.ok(leftover);

      const before = w.gh.requests.length;
      const pr = await openDraftPullRequest(options(w));
      assert.equal(pr.reused, false);
      // (the new commit may equal the leftover one: same tree, parent and message within one second)
      assert.deepEqual(trace(w.gh.requests.slice(before)), [
        `GET /git/ref/{ref} heads/${BRANCH} 200`,
        'GET /pulls 200',
        'GET /git/ref/{ref} heads/main 200',
        'GET /git/commits/{commit_sha} 200',
        ...BLOBS,
        'POST /git/trees 201',
        'POST /git/commits 201',
        `PATCH /git/refs/{ref} heads/${BRANCH} 200`,
        'POST /pulls 201',
      ]);
      const patch = w.gh.requests.find((r) => r.method === 'PATCH');
      assert.deepEqual(patch?.body, { sha: pr.commitSha, force: true });
      assert.equal(git(w.bare, ['rev-parse', `refs/heads/${BRANCH}`]).trim(), pr.commitSha);
      assert.equal(git(w.bare, ['diff', '--name-only', `main..${BRANCH}`]).trim().split('\n').length, 7);
      w.gh.assertNoViolations();
    } finally {
      await w.close();
    }
  });

  it('returns the open pull request of an earlier attempt (reused) without writing anything', async () => {
    const w = await world();
    try {
      const first = await openDraftPullRequest(options(w));
      // Even when the base moved since: the earlier attempt already succeeded.
      w.advanceMain('src/app.ts', 'export const app = 3;\n');
      const before = w.gh.requests.length;
      const again = await openDraftPullRequest(options(w, { expectedBaseSha: w.seedSha }));
      assert.deepEqual(again, { ...first, reused: true });
      assert.deepEqual(trace(w.gh.requests.slice(before)), [`GET /git/ref/{ref} heads/${BRANCH} 200`, 'GET /pulls 200']);
      const list = w.gh.requests.at(-1);
      assert.deepEqual(list?.query, { state: 'open', head: `${OWNER}:${BRANCH}`, base: 'main', per_page: '10' });
      assert.equal(w.gh.pulls.length, 1);
      w.gh.assertNoViolations();
    } finally {
      await w.close();
    }
  });

  it('keeps the branch and returns the pull request when only the answer to its creation was lost', async () => {
    const w = await world();
    try {
      w.gh.failNext('POST', /\/pulls$/, 502, undefined, { apply: true });
      const pr = await openDraftPullRequest(options(w));
      assert.equal(pr.reused, true);
      assert.equal(pr.number, 1);
      assert.equal(w.gh.pulls.length, 1);
      assert.equal(git(w.bare, ['rev-parse', `refs/heads/${BRANCH}`]).trim(), pr.commitSha);
      assert.deepEqual(trace(w.gh.requests).slice(-2), ['POST /pulls 502 (injected)', 'GET /pulls 200']);
      assert.ok(!w.gh.requests.some((r) => r.method === 'DELETE'));
      w.gh.assertNoViolations();
    } finally {
      await w.close();
    }
  });

  it('a wrong token is a non-retryable 401 GitHubError whose message does not hold the token', async () => {
    const w = await world();
    try {
      const wrong = 'ghp_wrong_token_should_never_be_printed_42';
      await assert.rejects(openDraftPullRequest(options(w, { token: wrong })), (e: unknown) => {
        assert.ok(e instanceof GitHubError);
        assert.equal(e.status, 401);
        assert.equal(e.retryable, false);
        assert.equal(e.githubMessage, 'Bad credentials');
        const everything = `${e.message} ${e.stack ?? ''} ${JSON.stringify(e)}`;
        assert.ok(!everything.includes(wrong), everything);
        assert.ok(!everything.includes(TOKEN));
        return true;
      });
      assert.equal(w.gh.requests.length, 1);
      assert.equal(w.gh.requests[0]?.status, 401);
      assert.deepEqual(branches(w), ['refs/heads/main']);
      w.gh.assertNoViolations(); // the 401 body has GitHub's error shape
    } finally {
      await w.close();
    }
  });

  it('a dropped connection is a retryable GitHubError without a status; an abort passes through', async () => {
    const w = await world();
    try {
      w.gh.failNext('GET', /\/git\/ref\//, 0);
      await assert.rejects(openDraftPullRequest(options(w)), (e: unknown) => {
        assert.ok(e instanceof GitHubError);
        assert.equal(e.status, undefined);
        assert.equal(e.retryable, true);
        assert.match(e.message, /network error/);
        return true;
      });
      await assert.rejects(openDraftPullRequest(options(w, { signal: AbortSignal.abort() })), (e: unknown) => {
        assert.ok(!(e instanceof GitHubError));
        assert.equal((e as Error).name, 'AbortError');
        return true;
      });
      assert.deepEqual(branches(w), ['refs/heads/main']);
    } finally {
      await w.close();
    }
  });

  it("a GitHub 422 (deleting a path the base doesn't have) is non-retryable and leaves no branch", async () => {
    const w = await world();
    try {
      const files: PromotionFile[] = [{ path: 'no/such/file.ts', mode: '100644', deleted: true }];
      await assert.rejects(openDraftPullRequest(options(w, { files })), (e: unknown) => e instanceof GitHubError && e.status === 422 && !e.retryable && e.operation === 'git.createTree');
      assert.deepEqual(branches(w), ['refs/heads/main']);
      w.gh.assertNoViolations();
    } finally {
      await w.close();
    }
  });

  it('deleteBranch and getBranchSha', async () => {
    const w = await world();
    try {
      const t = { baseUrl: w.gh.baseUrl, token: TOKEN, owner: OWNER, repo: REPO };
      assert.equal(await getBranchSha({ ...t, branch: 'main' }), w.seedSha);
      assert.equal(await getBranchSha({ ...t, branch: 'nope' }), null);
      const pr = await openDraftPullRequest(options(w));
      assert.equal(await getBranchSha({ ...t, branch: BRANCH }), pr.commitSha);
      assert.equal(await deleteBranch({ ...t, branch: BRANCH }), true);
      assert.equal(await getBranchSha({ ...t, branch: BRANCH }), null);
      assert.equal(await deleteBranch({ ...t, branch: BRANCH }), false); // 422 "Reference does not exist"
      assert.equal(w.gh.pulls[0]?.state, 'closed'); // deleting the head branch closes the pull request
      await assert.rejects(deleteBranch({ ...t, token: 'bad', branch: 'main' }), (e: unknown) => e instanceof GitHubError && e.status === 401);
      assert.deepEqual(branches(w), ['refs/heads/main']);
      w.gh.assertNoViolations();
    } finally {
      await w.close();
    }
  });
});

describe('the GitHub double checks traffic against the OpenAPI description', () => {
  before(() => {
    preloadOpenApi();
  });

  it('flags malformed request bodies (and answers 422 like GitHub)', async () => {
    const w = await world();
    try {
      const post = (p: string, body: unknown) =>
        fetch(`${w.gh.baseUrl}/repos/${OWNER}/${REPO}${p}`, {
          method: 'POST',
          headers: { authorization: `token ${TOKEN}`, 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
      const res = await post('/pulls', { title: 'no head', base: 'main', draft: 'yes' });
      assert.equal(res.status, 422);
      const answer = (await res.json()) as { message: string };
      assert.match(answer.message, /^Invalid request\./);
      assert.equal(w.gh.violations.length, 1);
      assert.match(w.gh.violations[0] ?? '', /POST \/repos\/acme\/widgets\/pulls: request body .*must have required property 'head'/);
      assert.match(w.gh.violations[0] ?? '', /\/draft must be boolean/);

      const res2 = await post('/git/trees', { tree: [{ path: 'x', mode: '100600', type: 'blob', content: 'x' }] });
      assert.equal(res2.status, 422);
      assert.equal(w.gh.violations.length, 2);
      assert.match(w.gh.violations[1] ?? '', /\/tree\/0\/mode must be equal to one of the allowed values/);
      assert.throws(() => w.gh.assertNoViolations(), /2 violation\(s\)/);

      // Unknown query parameters are flagged too; unknown routes are plain 404s.
      await fetch(`${w.gh.baseUrl}/repos/${OWNER}/${REPO}/pulls?status=open`, { headers: { authorization: `Bearer ${TOKEN}` } });
      assert.match(w.gh.violations[2] ?? '', /unknown query parameter status/);
      const unknown = await fetch(`${w.gh.baseUrl}/repos/${OWNER}/${REPO}/issues`, { headers: { authorization: `Bearer ${TOKEN}` } });
      assert.equal(unknown.status, 404);
      assert.equal(w.gh.violations.length, 3);

      // Responses on the wire are checked too: an (injected) incomplete reference is flagged.
      w.gh.failNext('GET', /\/git\/ref\//, 200, { ref: 'refs/heads/main' });
      const odd = await fetch(`${w.gh.baseUrl}/repos/${OWNER}/${REPO}/git/ref/heads%2Fmain`, { headers: { authorization: `token ${TOKEN}` } });
      assert.equal(odd.status, 200);
      assert.equal(w.gh.violations.length, 4);
      assert.match(w.gh.violations[3] ?? '', /GET \/repos\/acme\/widgets\/git\/ref\/heads%2Fmain -> 200: response body does not match .*must have required property 'object'/);

      // No credentials at all: 401 before anything else.
      const anon = await fetch(`${w.gh.baseUrl}/repos/${OWNER}/${REPO}`);
      assert.equal(anon.status, 401);
      assert.deepEqual(await anon.json(), { message: 'Requires authentication', documentation_url: 'https://docs.github.com/rest', status: '401' });
      assert.equal(w.gh.violations.length, 4);
    } finally {
      await w.close();
    }
  });

  it('validateRequestBody / validateResponse bite on missing required fields and wrong types', async () => {
    const w = await world();
    try {
      await openDraftPullRequest(options(w));
      w.gh.assertNoViolations();
      const created = w.gh.requests.find((r) => r.method === 'POST' && r.operation === '/repos/{owner}/{repo}/pulls');
      const pr = structuredClone(created?.response) as Record<string, unknown>;
      const pulls = '/repos/{owner}/{repo}/pulls';
      assert.deepEqual(validateResponse('POST', pulls, 201, pr), []);
      assert.deepEqual(validateResponse('POST', pulls, 201, { ...pr, body: null }), [], 'nullable fields accept null');

      const { number: _n, ...withoutNumber } = pr;
      assert.ok(validateResponse('POST', pulls, 201, withoutNumber).some((e) => e.includes("must have required property 'number'")));
      assert.ok(validateResponse('POST', pulls, 201, { ...pr, body: 42 }).some((e) => e.startsWith('/body must be string')));
      const { login: _l, ...userWithoutLogin } = pr.user as Record<string, unknown>;
      assert.ok(validateResponse('POST', pulls, 201, { ...pr, user: userWithoutLogin }).some((e) => e.includes("/user must have required property 'login'")));
      assert.ok(validateResponse('POST', pulls, 201, { ...pr, created_at: 'yesterday' }).some((e) => e.includes('/created_at must match format "date-time"')));
      assert.ok(validateResponse('POST', pulls, 201, { ...pr, state: 'merged' }).some((e) => e.includes('/state must be equal to one of the allowed values')));
      assert.deepEqual(validateResponse('POST', pulls, 200, pr), ['status 200 is not documented for POST /repos/{owner}/{repo}/pulls']);

      const ref = w.gh.requests.find((r) => r.operation === '/repos/{owner}/{repo}/git/ref/{ref}' && r.status === 200)?.response as { object: Record<string, unknown> };
      assert.deepEqual(validateResponse('GET', '/repos/{owner}/{repo}/git/ref/{ref}', 200, ref), []);
      const { sha: _s, ...objectWithoutSha } = ref.object;
      assert.ok(validateResponse('GET', '/repos/{owner}/{repo}/git/ref/{ref}', 200, { ...ref, object: objectWithoutSha }).some((e) => e.includes("/object must have required property 'sha'")));
      // Error answers: GitHub's shape is required for undocumented statuses; 204 carries no body.
      assert.deepEqual(validateResponse('GET', '/repos/{owner}/{repo}/git/ref/{ref}', 401, { message: 'Bad credentials', documentation_url: 'https://docs.github.com/rest' }), []);
      assert.ok(validateResponse('GET', '/repos/{owner}/{repo}/git/ref/{ref}', 401, { error: 'nope' }).length > 0);
      assert.deepEqual(validateResponse('DELETE', '/repos/{owner}/{repo}/git/refs/{ref}', 204, undefined), []);
      assert.ok(validateResponse('DELETE', '/repos/{owner}/{repo}/git/refs/{ref}', 204, {}).length > 0);

      assert.deepEqual(validateRequestBody('POST', '/repos/{owner}/{repo}/git/refs', { ref: 'refs/heads/x', sha: 'a'.repeat(40) }), []);
      assert.ok(validateRequestBody('POST', '/repos/{owner}/{repo}/git/refs', { ref: 'refs/heads/x' }).some((e) => e.includes("must have required property 'sha'")));
      assert.ok(validateRequestBody('POST', '/repos/{owner}/{repo}/git/trees', { tree: [{ path: 'a', mode: '100644', type: 'blob', sha: null }] }).length === 0, 'sha: null (deletion) is valid');
    } finally {
      await w.close();
    }
  });
});
