/**
 * System parts some suites need beyond Node: the bubblewrap sandbox (commands, coding agents,
 * repository changes, chaos), Chromium (the Temporal UI browser test), docker-compose (the
 * compose validation), openssl (the mutual-TLS certificates of the roles test) and Dovecot (the
 * IMAP server of the workspace inbox test).
 *
 * `./steward test` installs them when it can (as root or with sudo without a password; see
 * scripts/test.sh) and names what is still missing before the run. A suite that needs
 * a missing part then asks here, and:
 *  - outside CI it is skipped, with the reason and the fix as the skip message;
 *  - in CI (`CI=true`, as `.ci/run` sets it) nothing is skipped: a failing test named after the
 *    missing part is added, and the suite runs and fails on its own too.
 *
 * Use it as a suite's or a test's `skip` option: `describe('...', { skip: await needs('bubblewrap') }, ...)`.
 */
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { sandboxAvailable } from '../../domain/sandbox.js';
import { findChromium, noChromiumMessage } from './browser.js';
import { dovecotMissing } from './dovecot.js';

export const REQUIREMENTS = ['bubblewrap', 'chromium', 'docker-compose', 'openssl', 'dovecot'] as const;
export type Requirement = (typeof REQUIREMENTS)[number];

/** CI runs are strict: a missing part fails instead of skipping. */
export function strict(env: NodeJS.ProcessEnv = process.env): boolean {
  return env.CI === 'true';
}

function onPath(program: string, args: string[]): boolean {
  const r = spawnSync(program, args, { stdio: 'ignore', timeout: 20_000 });
  return r.error === undefined && r.status === 0;
}

/** Why `what` cannot be used on this machine (with the fix), or undefined when it can. */
export async function missing(what: Requirement, env: NodeJS.ProcessEnv = process.env): Promise<string | undefined> {
  switch (what) {
    case 'bubblewrap': {
      const s = await sandboxAvailable();
      return s.ok ? undefined : `needs the bubblewrap sandbox, unavailable here: ${s.reason} (./steward test installs bubblewrap as root or with sudo without a password; user namespaces must be allowed)`;
    }
    case 'chromium':
      return findChromium(env) ? undefined : `needs Chromium: ${noChromiumMessage(env)}`;
    case 'docker-compose':
      return onPath('docker-compose', ['version']) ? undefined : 'needs docker-compose (apt-get install docker-compose; ./steward test installs it when it can)';
    case 'openssl':
      return onPath('openssl', ['version']) ? undefined : 'needs openssl (apt-get install openssl; ./steward test installs it when it can)';
    case 'dovecot':
      return dovecotMissing();
  }
}

const reported = new Set<Requirement>();

/**
 * For a suite's or test's `skip` option: false when every part is here; else, outside CI, the
 * reasons (so it is skipped); in CI, false (so it runs and fails) after adding one failing test
 * per missing part that says what is missing.
 */
export async function needs(...what: Requirement[]): Promise<string | false> {
  const reasons: string[] = [];
  for (const w of what) {
    const why = await missing(w);
    if (why === undefined) continue;
    reasons.push(why);
    if (strict() && !reported.has(w)) {
      reported.add(w);
      test(`system requirement: ${w}`, () => {
        throw new Error(`CI=true, so a missing part fails instead of skipping: ${why}`);
      });
    }
  }
  if (reasons.length === 0 || strict()) return false;
  return reasons.join('; ');
}
