/**
 * Headless Chromium for end-to-end tests: the system's chromium (Debian's package, not a
 * Playwright download) driven by playwright-core, and screenshots saved as test artifacts.
 *
 * The executable is, in order: STEWARD_CHROMIUM, /usr/bin/chromium, /usr/bin/chromium-browser,
 * then `chromium` or `chromium-browser` on PATH. Without one a browser suite is skipped with
 * how to install it (`needs('chromium')`, requirements.ts), or fails with CI=true;
 * STEWARD_TEST_BROWSER=0 switches browser tests off.
 */
import { accessSync, constants, mkdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { repoRoot } from './process.js';

const CANDIDATES = ['/usr/bin/chromium', '/usr/bin/chromium-browser'];
const PATH_NAMES = ['chromium', 'chromium-browser'];

function executable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return statSync(file).isFile();
  } catch {
    return false;
  }
}

/** The Chromium executable to drive, or undefined when there is none. */
export function findChromium(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const explicit = env.STEWARD_CHROMIUM?.trim();
  if (explicit) return executable(explicit) ? explicit : undefined;
  for (const c of CANDIDATES) if (executable(c)) return c;
  for (const dir of (env.PATH ?? '').split(path.delimiter).filter(Boolean)) {
    for (const name of PATH_NAMES) {
      const p = path.join(dir, name);
      if (executable(p)) return p;
    }
  }
  return undefined;
}

const INSTALL_HINT = '`apt-get install chromium` (./steward test installs it when it can), or set STEWARD_CHROMIUM to its path; STEWARD_TEST_BROWSER=0 skips the browser tests';

/** Why no Chromium can be driven, with how to fix it. */
export function noChromiumMessage(env: NodeJS.ProcessEnv = process.env): string {
  const explicit = env.STEWARD_CHROMIUM?.trim();
  if (explicit) return `STEWARD_CHROMIUM=${explicit} is not an executable file: ${INSTALL_HINT}`;
  return `no Chromium found (looked at /usr/bin/chromium, /usr/bin/chromium-browser and chromium, chromium-browser on PATH): ${INSTALL_HINT}`;
}

/**
 * Whether browser tests are switched off (STEWARD_TEST_BROWSER=0): the reason, a string for
 * node:test's `skip`, or false. A missing browser is `needs('chromium')`'s business.
 */
export function browserSkip(env: NodeJS.ProcessEnv = process.env): string | false {
  if (env.STEWARD_TEST_BROWSER === '0') return 'STEWARD_TEST_BROWSER=0: browser tests are switched off';
  return false;
}

/** Launch headless Chromium; throws with the install hint when there is no executable. */
export async function launchChromium(env: NodeJS.ProcessEnv = process.env): Promise<Browser> {
  const executablePath = findChromium(env);
  if (!executablePath) throw new Error(noChromiumMessage(env));
  return chromium.launch({
    executablePath,
    headless: true,
    // tests run as root in containers: Chromium's sandbox needs user namespaces it may not get
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
    timeout: 60_000,
  });
}

/** Where browser tests keep their screenshots (gitignored): test-artifacts/<group>/. */
export function artifactDir(group: string): string {
  const dir = path.join(repoRoot, 'test-artifacts', group);
  mkdirSync(dir, { recursive: true });
  return dir;
}

/** Save a full-page screenshot as <dir>/<name>.png, print its path and return it. */
export async function saveScreenshot(page: Page, dir: string, name: string): Promise<string> {
  const file = path.join(dir, `${name.replace(/[^A-Za-z0-9._-]/g, '-')}.png`);
  await page.screenshot({ path: file, fullPage: true, timeout: 30_000 });
  console.log(`screenshot: ${file}`);
  return file;
}
