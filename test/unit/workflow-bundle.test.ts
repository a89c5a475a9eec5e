/**
 * The workflow bundle stays small: every module in it is instantiated again for each workflow
 * a worker keeps in its cache, so a heavy library there costs memory per cached session
 * (zod alone cost about half of Steward's RSS growth per idle session; bench/compare.ts).
 * Workflows check input with the plain patterns of common/limits.ts instead.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { testBundle } from '../helpers/steward.js';

describe('the workflow bundle', () => {
  it('carries no zod and no I/O library', async () => {
    const { code } = await testBundle();
    for (const heavy of ['node_modules/zod/', 'node_modules/@prisma/', 'node_modules/grammy/', 'node_modules/discord.js/', 'node_modules/@octokit/', 'node_modules/ai/']) {
      assert.ok(!code.includes(heavy), `${heavy} is in the workflow bundle`);
    }
  });

  it('preloads the OpenTelemetry interceptor module, so every cached run shares its one span-context storage', async () => {
    // each AsyncLocalStorage a run enables adds a property to every promise of the thread: one
    // per cached traced run made the workflow thread's heap grow with the square of the cache
    const { code } = await testBundle();
    const preload = /function preloadModules\(\) \{([^}]*)\}/.exec(code)?.[1] ?? '';
    assert.match(preload, /"\.\/workflows\/otel-interceptors\.ts"/, 'the interceptor module is in preloadModules');
  });
});
