/**
 * The Temporal test environment on the installed `temporal` CLI (existing-path executable), with the
 * SDK's own download as the fallback on machines that have internet.
 */
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { DEV_SERVER_DYNAMIC_CONFIG, findTemporalCli, freePort } from '../../platform/temporal-server.js';
import { ChatAttr, KindAttr, PlatformAttr } from '../../workflows/search-attributes.js';

export async function createTestEnvironment(): Promise<TestWorkflowEnvironment> {
  const cli = findTemporalCli();
  return TestWorkflowEnvironment.createLocal({
    server: {
      ...(cli ? { executable: { type: 'existing-path' as const, path: cli } } : {}),
      ip: '127.0.0.1',
      log: { format: 'pretty', level: 'error' },
      searchAttributes: [PlatformAttr, ChatAttr, KindAttr],
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
