/**
 * Real git fixtures for repo-change tests: a bare repository as the remote, seeded from a
 * scratch clone, with helpers to push more commits (the base moving) and to check a patch.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readdirSync, rmSync, writeFileSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

const GIT_ENV = {
  ...process.env,
  GIT_CONFIG_GLOBAL: '/dev/null',
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_TERMINAL_PROMPT: '0',
  GIT_AUTHOR_NAME: 'Fixture',
  GIT_AUTHOR_EMAIL: 'fixture@localhost',
  GIT_COMMITTER_NAME: 'Fixture',
  GIT_COMMITTER_EMAIL: 'fixture@localhost',
};

export function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', args, { cwd, env: GIT_ENV, encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] }).trim();
}

export function gitInput(cwd: string, input: string, ...args: string[]): string {
  return execFileSync('git', args, { cwd, env: GIT_ENV, encoding: 'utf8', input, stdio: ['pipe', 'pipe', 'pipe'] }).trim();
}

export interface GitFixture {
  root: string;
  /** The bare repository: clone URL of the registered repo, and the GitHub double's backing store. */
  bare: string;
  /** Commit files (path -> content; null deletes) on a branch of the remote; returns the new sha. */
  push(files: Record<string, string | null>, message: string, branch?: string): string;
  head(branch?: string): string;
  /** A fresh clone at a commit, for checking results. */
  cloneAt(sha: string): string;
  cleanup(): void;
}

export function createGitFixture(files: Record<string, string>, opts: { executable?: string[] } = {}): GitFixture {
  const root = mkdtempSync(path.join(tmpdir(), 'steward-fixture-'));
  const bare = path.join(root, 'origin.git');
  git(root, 'init', '--quiet', '--bare', '--initial-branch=main', bare);
  const scratch = path.join(root, 'scratch');
  git(root, 'clone', '--quiet', bare, scratch);
  git(scratch, 'checkout', '--quiet', '-b', 'main');
  for (const [p, content] of Object.entries(files)) {
    const full = path.join(scratch, p);
    mkdirSync(path.dirname(full), { recursive: true });
    writeFileSync(full, content);
    if (opts.executable?.includes(p)) chmodSync(full, 0o755);
  }
  git(scratch, 'add', '-A');
  git(scratch, 'commit', '--quiet', '-m', 'seed');
  git(scratch, 'push', '--quiet', 'origin', 'main');
  let clones = 0;
  return {
    root,
    bare,
    push(change, message, branch = 'main') {
      git(scratch, 'fetch', '--quiet', 'origin');
      git(scratch, 'checkout', '--quiet', '-B', branch, `origin/${branch}`);
      for (const [p, content] of Object.entries(change)) {
        const full = path.join(scratch, p);
        if (content === null) rmSync(full, { force: true });
        else {
          mkdirSync(path.dirname(full), { recursive: true });
          writeFileSync(full, content);
        }
      }
      git(scratch, 'add', '-A');
      git(scratch, 'commit', '--quiet', '-m', message);
      git(scratch, 'push', '--quiet', 'origin', branch);
      return git(scratch, 'rev-parse', 'HEAD');
    },
    head(branch = 'main') {
      return git(root, '--git-dir', bare, 'rev-parse', `refs/heads/${branch}`);
    },
    cloneAt(sha) {
      const dir = path.join(root, `check-${++clones}`);
      git(root, 'clone', '--quiet', bare, dir);
      git(dir, 'checkout', '--quiet', '--detach', sha);
      return dir;
    },
    cleanup() {
      rmSync(root, { recursive: true, force: true });
    },
  };
}

/** Steward's temporary work trees currently on disk (to prove they are removed). */
export function stewardTempDirs(): string[] {
  return readdirSync(tmpdir()).filter((n) => /^steward-(work|gate|promote)-/.test(n));
}
