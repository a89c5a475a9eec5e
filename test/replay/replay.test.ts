/**
 * Replays recorded histories of real runs (test/replay/histories/*.json, written by
 * scripts/record-histories.ts) against the current workflow code. A change that would break
 * running histories fails here before it ships. Sessions are replayed in both shapes: chat turns
 * run inside the session (patch `steward-inline-turn`), and the older histories whose turns were
 * child turn workflows, which the patch must keep replaying as they ran. The files go to the
 * SDK as parsed JSON (`Worker.runReplayHistories` reads proto JSON itself), which also guards
 * what its reader needs: `@temporalio/common` (protobufjs/ext/protojson) and
 * `@temporalio/proto` (the message types) must share one protobufjs 8, which is why
 * package.json lists protobufjs 8 itself, so npm installs that one at the top of node_modules
 * and not a 7.x copy another dependency (gRPC's proto-loader, the OTLP exporter) needs.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { Worker } from '@temporalio/worker';
import { droppingWorkflowSinks } from '../../platform/telemetry.js';
import { INLINE_TURN_PATCH } from '../../workflows/chat/session.js';
import { buildWorkflowBundle, bundleTraces } from '../../workers/bundle.js';
import { testBundle } from '../helpers/steward.js';

const dir = new URL('./histories/', import.meta.url);
const ids = JSON.parse(readFileSync(new URL('workflow-ids.json', dir), 'utf8')) as Record<string, string>;
const files = readdirSync(dir).filter((f) => f.endsWith('.json') && f !== 'workflow-ids.json').sort();

interface Ev {
  eventType: string;
  userMetadata?: { summary?: { data?: string } };
  workflowExecutionStartedEventAttributes?: { workflowType?: { name?: string } };
  startChildWorkflowExecutionInitiatedEventAttributes?: { workflowType?: { name?: string } };
  activityTaskScheduledEventAttributes?: { activityType?: { name?: string } };
  markerRecordedEventAttributes?: { markerName?: string; details?: Record<string, { payloads?: Array<{ data?: string }> }> };
}
const eventsOf = (f: string) => (JSON.parse(readFileSync(new URL(f, dir), 'utf8')) as { events: Ev[] }).events;
const plain = (p: { data?: string } | undefined): unknown => (p?.data ? JSON.parse(Buffer.from(p.data, 'base64').toString('utf8')) : undefined);
const markers = (events: Ev[], name: string) =>
  events.filter((e) => e.eventType === 'EVENT_TYPE_MARKER_RECORDED' && e.markerRecordedEventAttributes?.markerName === name);

/**
 * A session history's shape: `inline` (the `steward-inline-turn` marker, its turns' model steps
 * in its own history, no child turn), `child-turns` (no such marker, turns started as child
 * turn workflows), or undefined (not a session, or neither: e.g. a run that ran no turn).
 */
function sessionShape(f: string): 'inline' | 'child-turns' | undefined {
  const events = eventsOf(f);
  if (events[0]?.workflowExecutionStartedEventAttributes?.workflowType?.name !== 'sessionWorkflow') return undefined;
  const inlinePatch = markers(events, 'core_patch').some((e) => (plain(e.markerRecordedEventAttributes?.details?.['patch-data']?.payloads?.[0]) as { id?: string }).id === INLINE_TURN_PATCH);
  const children = events.filter((e) => e.startChildWorkflowExecutionInitiatedEventAttributes?.workflowType?.name === 'turnWorkflow').length;
  const modelSteps = events.filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'modelStep').length;
  if (inlinePatch && children === 0 && modelSteps > 0) return 'inline';
  if (!inlinePatch && children > 0) return 'child-turns';
  return undefined;
}
const inlineSessions = files.filter((f) => sessionShape(f) === 'inline');
const childTurnSessions = files.filter((f) => sessionShape(f) === 'child-turns');

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

  it('has session histories of both shapes: turns inside the session, and turns as child workflows', () => {
    assert.ok(inlineSessions.length > 0, `a session history with the ${INLINE_TURN_PATCH} marker and no child turn`);
    assert.ok(childTurnSessions.length > 0, `a session history from before ${INLINE_TURN_PATCH} with child turns`);
    // an inline turn delivers its reply and edits its progress panel with local activities (markers in the session)
    const localActivities = new Set(
      inlineSessions.flatMap((f) => markers(eventsOf(f), 'core_local_activity').map((e) => (plain(e.markerRecordedEventAttributes?.details?.data?.payloads?.[0]) as { activity_type?: string }).activity_type)),
    );
    for (const type of ['deliver', 'updateProgress', 'clearProgress']) assert.ok(localActivities.has(type), `an inline session that ran ${type} as a local activity`);
    for (const activity of ['modelStep', 'runTool', 'requestApproval', 'settleApproval']) {
      assert.ok(inlineSessions.some((f) => eventsOf(f).some((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === activity)), `an inline session that ran ${activity}`);
    }
  });

  it('replays every history without nondeterminism', async () => {
    const bundle = await testBundle();
    const histories = files.map((f) => ({
      workflowId: ids[f] ?? f,
      // proto JSON, as recorded: the SDK reads it (Worker.validateHistory)
      history: JSON.parse(readFileSync(new URL(f, dir), 'utf8')) as unknown,
    }));
    // one history at a time, in order: each result is the file at its index
    const ok: string[] = [];
    let replayed = 0;
    // histories recorded with tracing (the patch `steward-otel-tracing`) call the `exporter` sink: registered (dropping), as workers do
    for await (const result of Worker.runReplayHistories({ workflowBundle: bundle, replayName: 'steward-replay', sinks: droppingWorkflowSinks() }, histories)) {
      assert.equal(result.error, undefined, `${files[replayed]} (${result.workflowId}): ${String(result.error)}`);
      ok.push(files[replayed]!);
      replayed++;
    }
    assert.equal(replayed, files.length);
    // the patch: sessions whose turns ran inside them replay, and so do the older ones with child turns
    assert.ok(ok.some((f) => inlineSessions.includes(f)), `a session history with inline turns replayed (${inlineSessions.join(', ')})`);
    assert.ok(ok.some((f) => childTurnSessions.includes(f)), `a session history with child turns replayed (${childTurnSessions.join(', ')})`);
    assert.deepEqual(ok.filter((f) => sessionShape(f) !== undefined).sort(), [...inlineSessions, ...childTurnSessions].sort(), 'every session history of either shape replayed');
  });

  // Tracing is the worker's choice (its bundle has workflows/otel-tracing.ts or not); the retired
  // patch steward-otel-tracing stays replayable through deprecatePatch. Every history, recorded
  // traced (the marker) or untraced (none), replays on the tracing bundle as on the other.
  it('replays every history on the bundle of a worker that traces', async () => {
    const quiet = { trace: () => undefined, debug: () => undefined, info: () => undefined, log: () => undefined, warn: () => undefined, error: (m: string) => console.error(m) };
    const bundle = await buildWorkflowBundle(quiet, { tracing: true });
    assert.ok(bundleTraces(bundle.code), 'the tracing bundle has the tracing interceptors');
    assert.ok(!bundleTraces((await testBundle()).code), 'the default bundle has not');
    const histories = files.map((f) => ({ workflowId: ids[f] ?? f, history: JSON.parse(readFileSync(new URL(f, dir), 'utf8')) as unknown }));
    let replayed = 0;
    for await (const result of Worker.runReplayHistories({ workflowBundle: bundle, replayName: 'steward-replay-traced', sinks: droppingWorkflowSinks() }, histories)) {
      assert.equal(result.error, undefined, `${files[replayed]} (${result.workflowId}) on the tracing bundle: ${String(result.error)}`);
      replayed++;
    }
    assert.equal(replayed, files.length);
  });
});
