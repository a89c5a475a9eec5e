/**
 * Records real workflow histories for the replay tests: runs a scripted conversation (a
 * turn, steering, /stop, /status, /new, continue-as-new) on the Temporal dev server with the
 * real worker, then exports the histories as JSON (the format `temporal workflow show -o
 * json` writes) to test/replay/histories/.
 *
 *   node --import tsx scripts/record-histories.ts
 */
import { writeFile } from 'node:fs/promises';
import { historyToJSON } from '@temporalio/common/lib/proto-utils.js';
import { testDatabases } from '../test/helpers/db.js';
import { startModelServer } from '../test/helpers/model-server.js';
import { withHarness } from '../test/helpers/steward.js';
import { createTestEnvironment } from '../test/helpers/temporal.js';

const outDir = new URL('../test/replay/histories/', import.meta.url);
const env = await createTestEnvironment();
const model = await startModelServer();
const sqlite = testDatabases().find((d) => d.name === 'sqlite');
if (!sqlite) throw new Error('no SQLite test database');
const dbh = await sqlite.create();

try {
  await withHarness({ env, db: dbh.db, providers: { openaiCompatible: { baseURL: model.baseURL } }, maxTurnsPerRun: 3 }, async (h) => {
    // Turn 1: a plain reply.
    model.enqueue({ chunks: ['Durable ', 'execution ', 'means...'] });
    await h.send('what is durable execution?');
    await h.waitForMessage((m) => m.role === 'assistant' && m.text.startsWith('Durable'));

    // Turn 2: steered while its model step runs.
    let n = model.requests.length;
    model.enqueue({ text: 'a long answer', firstTokenDelayMs: 1200 });
    model.enqueue({ text: 'a short answer' });
    await h.send('explain event sourcing');
    await model.waitForRequest(n + 1, 15_000);
    await h.send('/steer keep it short');
    await h.send('/status');
    await h.waitForMessage((m) => m.role === 'assistant' && m.text === 'a short answer');

    // Turn 3: stopped; a queued message is answered by turn 4 after continue-as-new.
    n = model.requests.length;
    model.enqueue({ text: 'never delivered', firstTokenDelayMs: 20_000 });
    await h.send('write a novel');
    await model.waitForRequest(n + 1, 15_000);
    await h.send('and a haiku');
    await h.send('/stop');
    await h.waitForMessage((m) => m.text.startsWith('Stopped the running turn'));
    await h.waitForMessage((m) => m.role === 'assistant' && m.text.includes('and a haiku'));

    await h.send('/think low');
    await h.send('/new');
    await h.waitForMessage((m) => m.text.startsWith('New task started'));

    const runs: Array<{ workflowId: string; runId: string }> = [];
    for await (const wf of env.client.workflow.list({ query: `WorkflowId = "${h.sessionId}"` })) {
      runs.push({ workflowId: wf.workflowId, runId: wf.runId });
    }
    for await (const wf of env.client.workflow.list({ query: `StewardChat = "${h.chatId}" AND StewardKind = "turn"` })) {
      runs.push({ workflowId: wf.workflowId, runId: wf.runId });
    }
    let i = 0;
    const index: Record<string, string> = {};
    for (const run of runs.reverse()) {
      const handle = env.client.workflow.getHandle(run.workflowId, run.runId);
      const desc = await handle.describe();
      if (desc.status.name === 'RUNNING') continue; // only closed runs make complete fixtures
      const history = await handle.fetchHistory();
      const kind = run.workflowId.includes(':turn:') ? 'turn' : 'session';
      const file = new URL(`${kind}-${String(++i).padStart(2, '0')}.json`, outDir);
      await writeFile(file, `${historyToJSON(history)}\n`);
      index[`${kind}-${String(i).padStart(2, '0')}.json`] = run.workflowId;
      console.log(`wrote ${file.pathname} (${history.events?.length ?? 0} events, ${desc.type})`);
    }
    // Replay needs each history's workflow id (child ids are derived from it).
    await writeFile(new URL('workflow-ids.json', outDir), `${JSON.stringify(index, null, 2)}\n`);
  });
} finally {
  await model.close();
  await dbh.cleanup();
  await env.teardown();
}
