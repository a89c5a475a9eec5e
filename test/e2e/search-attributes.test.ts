/**
 * A Temporal cluster that lacks Steward's search attributes (Steward pointed at an existing
 * server with TEMPORAL_ADDRESS) gets them registered at start, once, each with its type; a
 * second call changes nothing. A cluster that an earlier Steward set up (the Keyword ones
 * only) gets the attributes added since, StewardUser among them as a KeywordList, which a
 * session can then hold several people's identity ids in and be found by any one of them.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Client, type Connection } from '@temporalio/client';
import protoModule from '@temporalio/proto';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { ensureSearchAttributes, findTemporalCli, SEARCH_ATTRIBUTES } from '../../platform/temporal-server.js';
import { UserAttr } from '../../workflows/search-attributes.js';
import { waitFor } from '../helpers/steward.js';

// @temporalio/proto is CommonJS: under ESM its namespace arrives as the default export
const { IndexedValueType } = protoModule.temporal.api.enums.v1;
type IndexedValueType = (typeof IndexedValueType)[keyof typeof IndexedValueType];
const TYPE: Record<string, IndexedValueType> = {
  Keyword: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
  KeywordList: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST,
};

/** The custom search attributes of a namespace, by name, with their types. */
async function registered(connection: Connection, namespace: string): Promise<Record<string, IndexedValueType>> {
  const { customAttributes } = await connection.operatorService.listSearchAttributes({ namespace });
  return Object.fromEntries(Object.entries(customAttributes ?? {}));
}

/** A second namespace of the dev server, where an earlier Steward's setup is played. */
const EARLIER = 'earlier-steward';

describe('search attributes on an existing cluster', () => {
  let env: TestWorkflowEnvironment | undefined;
  before(async () => {
    const cli = findTemporalCli();
    // a plain dev server: none of Steward's search attributes
    env = await TestWorkflowEnvironment.createLocal({
      server: {
        ...(cli ? { executable: { type: 'existing-path' as const, path: cli } } : {}),
        ip: '127.0.0.1',
        log: { format: 'pretty', level: 'error' },
        extraArgs: ['--namespace', EARLIER],
      },
    });
  });
  after(async () => {
    await env?.teardown();
  });

  it('declares StewardUser and StewardBudget as KeywordLists, the others as Keywords', () => {
    assert.equal(SEARCH_ATTRIBUTES.StewardUser, 'KeywordList');
    assert.equal(SEARCH_ATTRIBUTES.StewardBudget, 'KeywordList');
    for (const [name, type] of Object.entries(SEARCH_ATTRIBUTES)) assert.equal(type, name === 'StewardUser' || name === 'StewardBudget' ? 'KeywordList' : 'Keyword', name);
  });

  it('registers the missing ones with their types, and a second run is a no-op', async () => {
    const connection = env!.connection;
    const wanted = Object.entries(SEARCH_ATTRIBUTES);
    const beforeNames = Object.keys(await registered(connection, 'default'));
    assert.ok(wanted.some(([n]) => !beforeNames.includes(n)), 'the plain server lacks some of them');
    await ensureSearchAttributes(connection, 'default');
    const after = await registered(connection, 'default');
    for (const [n, type] of wanted) assert.equal(after[n], TYPE[type], `${n} registered as a ${type}`);
    await ensureSearchAttributes(connection, 'default');
    assert.deepEqual(await registered(connection, 'default'), after);
  });

  it("adds StewardUser (a KeywordList) to a namespace an earlier Steward set up, where a session's users can be searched", async () => {
    const connection = env!.connection;
    const namespace = EARLIER;
    // what an earlier Steward registered: its Keyword attributes, without StewardUser
    const earlier = Object.keys(SEARCH_ATTRIBUTES).filter((n) => n !== 'StewardUser');
    await connection.operatorService.addSearchAttributes({ namespace, searchAttributes: Object.fromEntries(earlier.map((n) => [n, IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD])) });
    assert.equal((await registered(connection, namespace)).StewardUser, undefined, 'the earlier setup lacks StewardUser');

    await ensureSearchAttributes(connection, namespace);
    const now = await registered(connection, namespace);
    assert.equal(now.StewardUser, IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST, 'StewardUser added as a KeywordList');
    for (const n of earlier) assert.equal(now[n], IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD, `${n} left as it was`);

    // a run listing two people (their identity ids) is found by either of them (nothing needs to run it)
    const [alice, bob, carol] = [randomUUID(), randomUUID(), randomUUID()];
    const client = new Client({ connection, namespace });
    const workflowId = `session:http:default:users-${randomUUID().slice(0, 8)}`;
    const handle = await client.workflow.start('sessionWorkflow', {
      workflowId,
      taskQueue: `nobody-polls-${randomUUID().slice(0, 8)}`,
      args: [],
      typedSearchAttributes: [{ key: UserAttr, value: [alice, bob] }],
    });
    try {
      for (const user of [alice, bob]) {
        const found = await waitFor(
          async () => {
            const ids: string[] = [];
            for await (const w of client.workflow.list({ query: `StewardUser = '${user}'` })) ids.push(w.workflowId);
            return ids.length > 0 ? ids : undefined;
          },
          `the run listed under StewardUser = '${user}'`,
          30_000,
        );
        assert.deepEqual(found, [workflowId], user);
      }
      const ids: string[] = [];
      for await (const w of client.workflow.list({ query: `StewardUser = '${carol}'` })) ids.push(w.workflowId);
      assert.deepEqual(ids, [], 'and not by someone who did not write');
      assert.deepEqual((await handle.describe()).typedSearchAttributes.get(UserAttr), [alice, bob]);
    } finally {
      await handle.terminate('test over');
    }
  });
});
