/**
 * What the console's browser tests (test/e2e/console*.test.ts, chat-events, temporal-ui) share:
 * a bounded wait for a condition, the API called with the operator's token, an operator sign-in
 * link, axe-core's serious and critical findings on a page, and the page's sideways overflow.
 */
import { createRequire } from 'node:module';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Page } from 'playwright-core';

const require = createRequire(import.meta.url);

/** Wait until `probe` gives a value (errors count as not yet), at most `timeoutMs`. */
export async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number, everyMs = 100): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (let i = 0; Date.now() < deadline && i < 100_000; i++) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    await sleep(everyMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`);
}

/** The API of the Steward at `origin()` with the operator's bearer token: the status and the JSON body. */
export function apiCaller(origin: () => string, token: string) {
  return async (method: string, route: string, body?: unknown): Promise<{ status: number; body: Record<string, unknown> }> => {
    const r = await fetch(`${origin()}${route}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await r.text();
    return { status: r.status, body: (text ? JSON.parse(text) : {}) as Record<string, unknown> };
  };
}

/** A fresh one-time operator sign-in link (as `steward ui` prints), going on to `next` when given. */
export async function operatorSignInLink(origin: string, token: string, next?: string): Promise<string> {
  const r = await fetch(`${origin}/codec/links`, { method: 'POST', headers: { authorization: `Bearer ${token}` } });
  const url = ((await r.json()) as { url: string }).url;
  return next ? `${url}?next=${encodeURIComponent(next)}` : url;
}

/** axe-core's serious and critical violations on the page as it is (the context must bypass CSP: axe is injected as a script). */
export async function seriousAxeViolations(page: Page): Promise<Array<{ id: string; impact: string; help: string }>> {
  await page.addScriptTag({ path: require.resolve('axe-core/axe.min.js') });
  const violations = await page.evaluate(async () => {
    const axe = (globalThis as unknown as { axe: { run(): Promise<{ violations: Array<{ id: string; impact: string; help: string }> }> } }).axe;
    return (await axe.run()).violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help }));
  });
  return violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
}

/** The page's document width against its viewport's: `scroll > client` is a sideways overflow. */
export async function sidewaysWidth(page: Page): Promise<{ scroll: number; client: number }> {
  return page.evaluate(() => {
    const d = (globalThis as unknown as { document: { documentElement: { scrollWidth: number; clientWidth: number } } }).document.documentElement;
    return { scroll: d.scrollWidth, client: d.clientWidth };
  });
}
