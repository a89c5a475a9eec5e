/**
 * A Temporal cluster that lacks Steward's search attributes (Steward pointed at an existing
 * server with TEMPORAL_ADDRESS) gets them registered at start, once; a second call changes
 * nothing.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { ensureSearchAttributes, findTemporalCli, SEARCH_ATTRIBUTES } from '../../platform/temporal-server.js';

describe('search attributes on an existing cluster', () => {
  let env: TestWorkflowEnvironment | undefined;
  before(async () => {
    const cli = findTemporalCli();
    // a plain dev server: none of Steward's search attributes
    env = await TestWorkflowEnvironment.createLocal({
      server: { ...(cli ? { executable: { type: 'existing-path' as const, path: cli } } : {}), ip: '127.0.0.1', log: { format: 'pretty', level: 'error' } },
    });
  });
  after(async () => {
    await env?.teardown();
  });

  it('registers the missing ones, and a second run is a no-op', async () => {
    const connection = env!.connection;
    const list = async () => Object.keys((await connection.operatorService.listSearchAttributes({ namespace: 'default' })).customAttributes ?? {});
    const wanted = Object.keys(SEARCH_ATTRIBUTES);
    const beforeNames = await list();
    assert.ok(wanted.some((n) => !beforeNames.includes(n)), 'the plain server lacks some of them');
    await ensureSearchAttributes(connection, 'default');
    const afterNames = await list();
    for (const n of wanted) assert.ok(afterNames.includes(n), `${n} registered`);
    await ensureSearchAttributes(connection, 'default');
    assert.deepEqual((await list()).sort(), afterNames.sort());
  });
});
