/**
 * Replays recorded histories of real runs (test/replay/histories/*.json, written by
 * scripts/record-histories.ts) against the current workflow code. A change that would break
 * running histories fails here before it ships. Reading the JSON histories also guards what
 * `historyFromJSON` needs: `@temporalio/common` (protobufjs/ext/protojson) and
 * `@temporalio/proto` (the message types) must share one protobufjs 8, which is why
 * package.json lists protobufjs 8 itself, so npm installs that one at the top of node_modules
 * and not a 7.x copy another dependency (gRPC's proto-loader, the OTLP exporter) needs.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils.js';
import { Worker } from '@temporalio/worker';
import { testBundle } from '../helpers/steward.js';

const dir = new URL('./histories/', import.meta.url);
const ids = JSON.parse(readFileSync(new URL('workflow-ids.json', dir), 'utf8')) as Record<string, string>;
const files = readdirSync(dir).filter((f) => f.endsWith('.json') && f !== 'workflow-ids.json').sort();

describe('replay of recorded histories', () => {
  it('has recorded histories of sessions and turns', () => {
    assert.ok(files.some((f) => f.startsWith('session-')), 'a session history');
    assert.ok(files.some((f) => f.startsWith('turn-')), 'a turn history');
    const text = (f: string) => readFileSync(new URL(f, dir), 'utf8');
    // the chat paths: a progress panel, tools, an approval decided and one cancelled by /stop
    for (const activity of ['updateProgress', 'clearProgress', 'runTool', 'requestApproval', 'settleApproval']) {
      assert.ok(files.some((f) => text(f).includes(`"${activity}"`)), `a history that ran ${activity}`);
    }
    assert.ok(files.some((f) => text(f).includes('approvalDecision')), 'a history with an approval decision update');
    // governed repository changes: intake with a question answered, the gates, an approval, a refusal
    const changes = files.filter((f) => f.startsWith('change-'));
    assert.ok(changes.length > 0, 'a repo-change history');
    for (const activity of ['changeIntake', 'changeAsk', 'changePlan', 'changeWork', 'changeValidate', 'changeRequestApproval', 'changePromote', 'changeFinish']) {
      assert.ok(changes.some((f) => text(f).includes(`"${activity}"`)), `a repo-change history that ran ${activity}`);
    }
    assert.ok(changes.some((f) => text(f).includes('changeAnswer')), 'a repo-change history with an answered question');
    assert.ok(changes.some((f) => text(f).includes('approvalDecision')), 'a repo-change history with an approval decision');
    // objective runs started by their schedule: one run with its turn, one skipped
    const runs = files.filter((f) => f.startsWith('objective-'));
    assert.ok(runs.some((f) => text(f).includes('"objectivePrepareRun"') && text(f).includes('turnWorkflow')), 'an objective run with its turn');
    assert.ok(runs.some((f) => !text(f).includes('turnWorkflow')), 'a skipped objective run');
  });

  it('replays every history without nondeterminism', async () => {
    const bundle = await testBundle();
    const histories = files.map((f) => ({
      workflowId: ids[f] ?? f,
      history: historyFromJSON(JSON.parse(readFileSync(new URL(f, dir), 'utf8'))),
    }));
    let replayed = 0;
    for await (const result of Worker.runReplayHistories({ workflowBundle: bundle, replayName: 'steward-replay' }, histories)) {
      assert.equal(result.error, undefined, `${result.workflowId}: ${String(result.error)}`);
      replayed++;
    }
    assert.equal(replayed, files.length);
  });
});
