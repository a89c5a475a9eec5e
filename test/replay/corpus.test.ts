/**
 * The replay corpus (test/replay/histories/) covers every workflow type Steward runs: a
 * session, a turn, an objective run, a repo change, a workspace indexing run, and a turn that received an approval
 * decision. Sessions come in both shapes: chat turns run inside the session (the patch
 * `steward-inline-turn`: its marker, the turns' activities in the session's history, no child
 * workflow), and the older histories whose turns were child turn workflows, kept so replay
 * proves the patch continues them. The inline histories cover a turn approved, denied and
 * cancelled by /stop while it waited, a steered turn and a stopped one. Read from the files
 * themselves (the workflow type of the WorkflowExecutionStarted event, patches from their
 * markers, the approval from the update events, activity inputs), and every file is one that
 * replay.test.ts replays: a parseable JSON history with its workflow id in workflow-ids.json, no
 * payload left encrypted (it could not be replayed without keys).
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { describe, it } from 'node:test';
import { ENCRYPTED_ENCODING, findPayloads, fixtureKind, payloadEncoding, WORKFLOW_IDS_FILE } from '../../platform/histories.js';
import { historyFromJSON } from '../../platform/history-json.js';
import { OTEL_PATCH } from '../../workflows/otel-interceptors.js';
import { CONTINUE_ON_MESSAGE_PATCH, INBOUND_DEDUP_PATCH, INLINE_TURN_PATCH, TURN_OVER_BEFORE_NOTICE_PATCH } from '../../workflows/chat/session.js';
import { BUDGET_WAIT_PATCH, DELIVER_IN_STEP_PATCH, REQUESTER_SET_PATCH } from '../../workflows/chat/turn-loop.js';
import { replyKey } from '../../common/ids.js';
import { OBJECTIVE_BUDGET_SKIP_PATCH } from '../../workflows/objectives/objective.js';

const dir = new URL('./histories/', import.meta.url);
const entries = readdirSync(dir).sort();
const historyFiles = entries.filter((f) => f !== WORKFLOW_IDS_FILE);
const ids = JSON.parse(readFileSync(new URL(WORKFLOW_IDS_FILE, dir), 'utf8')) as Record<string, string>;

interface PayloadJson {
  metadata?: Record<string, string>;
  data?: string;
}
interface Event {
  eventType: string;
  eventId?: string;
  activityTaskCompletedEventAttributes?: { scheduledEventId?: string; result?: { payloads?: PayloadJson[] } };
  userMetadata?: { summary?: PayloadJson };
  workflowExecutionStartedEventAttributes?: { workflowType?: { name?: string }; workflowId?: string; input?: { payloads?: PayloadJson[] } };
  workflowExecutionSignaledEventAttributes?: { signalName?: string; input?: { payloads?: PayloadJson[] } };
  activityTaskScheduledEventAttributes?: { activityType?: { name?: string }; input?: { payloads?: PayloadJson[] } };
  startChildWorkflowExecutionInitiatedEventAttributes?: { workflowType?: { name?: string } };
  markerRecordedEventAttributes?: { markerName?: string; details?: Record<string, { payloads?: PayloadJson[] }> };
  workflowExecutionUpdateAcceptedEventAttributes?: { protocolInstanceId?: string; acceptedRequest?: { input?: { name?: string; args?: { payloads?: Array<{ data?: string }> } } } };
  workflowExecutionUpdateCompletedEventAttributes?: { meta?: { updateId?: string }; outcome?: { success?: unknown; failure?: unknown } };
}
interface Fixture {
  file: string;
  raw: unknown;
  events: Event[];
  type: string;
}

const fixtures: Fixture[] = historyFiles
  .filter((f) => f.endsWith('.json'))
  .map((file) => {
    const raw = JSON.parse(readFileSync(new URL(file, dir), 'utf8')) as { events?: Event[] };
    const events = raw.events ?? [];
    return { file, raw, events, type: events[0]?.workflowExecutionStartedEventAttributes?.workflowType?.name ?? '' };
  });

/** A plain JSON payload's value (the corpus holds no encrypted payload). */
function plain(p: PayloadJson | undefined): unknown {
  return p?.data ? JSON.parse(Buffer.from(p.data, 'base64').toString('utf8')) : undefined;
}

/** The patches a history records (`core_patch` markers). */
function patchesOf(f: Fixture): string[] {
  return f.events
    .filter((e) => e.eventType === 'EVENT_TYPE_MARKER_RECORDED' && e.markerRecordedEventAttributes?.markerName === 'core_patch')
    .map((e) => (plain(e.markerRecordedEventAttributes?.details?.['patch-data']?.payloads?.[0]) as { id?: string } | undefined)?.id ?? '');
}

/** Child workflows of a type that a history started. */
function childrenOf(f: Fixture, type: string): number {
  return f.events.filter((e) => e.eventType === 'EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED' && e.startChildWorkflowExecutionInitiatedEventAttributes?.workflowType?.name === type).length;
}

/** The activities a history scheduled: their type, decoded input and Temporal UI summary, in order. */
function activitiesOf(f: Fixture): Array<{ type: string; input: Record<string, unknown>; summary?: string }> {
  return f.events
    .filter((e) => e.eventType === 'EVENT_TYPE_ACTIVITY_TASK_SCHEDULED')
    .map((e) => {
      const a = e.activityTaskScheduledEventAttributes;
      const summary = plain(e.userMetadata?.summary) as string | undefined;
      return { type: a?.activityType?.name ?? '', input: (plain(a?.input?.payloads?.[0]) ?? {}) as Record<string, unknown>, ...(summary ? { summary } : {}) };
    });
}

/** The model steps a history completed: their decoded input and result, in order. */
function completedSteps(f: Fixture): Array<{ input: Record<string, unknown>; result: Record<string, unknown> }> {
  const results = new Map(f.events.flatMap((e) => (e.activityTaskCompletedEventAttributes ? [[String(e.activityTaskCompletedEventAttributes.scheduledEventId), plain(e.activityTaskCompletedEventAttributes.result?.payloads?.[0])]] : [])));
  return f.events.flatMap((e) => {
    const a = e.activityTaskScheduledEventAttributes;
    const result = results.get(String(e.eventId));
    if (a?.activityType?.name !== 'modelStep' || !result) return [];
    return [{ input: (plain(a.input?.payloads?.[0]) ?? {}) as Record<string, unknown>, result: result as Record<string, unknown> }];
  });
}

/** The Temporal UI summaries of a history's local activity markers (an inline turn's delivery: `Turn 3: reply`). */
function localActivitySummaries(f: Fixture): string[] {
  return f.events
    .filter((e) => e.eventType === 'EVENT_TYPE_MARKER_RECORDED' && e.markerRecordedEventAttributes?.markerName === 'core_local_activity')
    .map((e) => (plain(e.userMetadata?.summary) as string | undefined) ?? '');
}

const sessions = fixtures.filter((f) => f.type === 'sessionWorkflow');
/** Sessions whose chat turns ran inside them: the patch marker, model steps of their own, no child turn. */
const inlineSessions = sessions.filter((f) => patchesOf(f).includes(INLINE_TURN_PATCH) && childrenOf(f, 'turnWorkflow') === 0 && activitiesOf(f).some((a) => a.type === 'modelStep'));
/** Sessions recorded before the patch: every turn a child turn workflow. */
const childTurnSessions = sessions.filter((f) => !patchesOf(f).includes(INLINE_TURN_PATCH) && childrenOf(f, 'turnWorkflow') > 0);

/** Approval decisions (`approvalDecision` updates) a history accepted and completed successfully, with their decision. */
function approvalDecisions(f: Fixture): string[] {
  const completed = new Set(
    f.events
      .filter((e) => e.eventType === 'EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED' && e.workflowExecutionUpdateCompletedEventAttributes?.outcome?.success)
      .map((e) => e.workflowExecutionUpdateCompletedEventAttributes?.meta?.updateId),
  );
  return f.events.flatMap((e) => {
    const a = e.workflowExecutionUpdateAcceptedEventAttributes;
    if (e.eventType !== 'EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED' || a?.acceptedRequest?.input?.name !== 'approvalDecision') return [];
    if (!completed.has(a.protocolInstanceId)) return [];
    const data = a.acceptedRequest.input.args?.payloads?.[0]?.data;
    const arg = data ? (JSON.parse(Buffer.from(data, 'base64').toString('utf8')) as { decision?: string }) : {};
    return [arg.decision ?? ''];
  });
}

describe('replay corpus', () => {
  it('holds only histories that replay.test.ts replays, each with its workflow id', () => {
    // replay.test.ts replays `*.json` except workflow-ids.json: anything else here would be skipped silently
    for (const f of historyFiles) {
      assert.ok(f.endsWith('.json'), `${f} is not a .json history, so the replay test would skip it`);
      assert.ok(statSync(new URL(f, dir)).isFile(), `${f} is not a file`);
    }
    const replayTest = readFileSync(new URL('./replay.test.ts', import.meta.url), 'utf8');
    assert.match(replayTest, /readdirSync\(dir\)\.filter\(\(f\) => f\.endsWith\('\.json'\) && f !== 'workflow-ids\.json'\)/, 'replay.test.ts selects every .json history');
    assert.match(replayTest, /assert\.equal\(replayed, files\.length\)/, 'replay.test.ts checks that it replayed every file');

    assert.ok(fixtures.length >= 5, `only ${fixtures.length} histories`);
    for (const f of fixtures) {
      assert.equal(f.events[0]?.eventType, 'EVENT_TYPE_WORKFLOW_EXECUTION_STARTED', `${f.file} starts with WorkflowExecutionStarted`);
      assert.ok(f.type, `${f.file} names its workflow type`);
      assert.ok(historyFromJSON(f.raw).events?.length, `${f.file} parses as a history`);
      assert.ok(ids[f.file], `${f.file} has its workflow id in ${WORKFLOW_IDS_FILE}`);
      const startedId = f.events[0]?.workflowExecutionStartedEventAttributes?.workflowId;
      if (startedId) assert.equal(ids[f.file], startedId, `${f.file}: ${WORKFLOW_IDS_FILE} names the workflow that ran`);
      // the file name says what it is (the replay test and people read the prefix)
      assert.ok(f.file.startsWith(`${fixtureKind(f.type)}-`), `${f.file} holds a ${f.type}: its name starts with ${fixtureKind(f.type)}-`);
      const encrypted = findPayloads(f.raw as Parameters<typeof findPayloads>[0]).filter((p) => payloadEncoding(p) === ENCRYPTED_ENCODING);
      assert.equal(encrypted.length, 0, `${f.file} holds ${encrypted.length} encrypted payload(s): record it decoded (steward histories record)`);
    }
    for (const name of Object.keys(ids)) assert.ok(historyFiles.includes(name), `${WORKFLOW_IDS_FILE} names ${name}, which is not in the corpus`);
  });

  it('has at least one history of every workflow type', () => {
    const types = new Set(fixtures.map((f) => f.type));
    for (const type of ['sessionWorkflow', 'turnWorkflow', 'objectiveRunWorkflow', 'repoChangeWorkflow', 'workspaceIndexWorkflow']) {
      assert.ok(types.has(type), `a ${type} history (record one with steward histories record --query "WorkflowType='${type}'")`);
    }
    // and the payloads are what the workflows read: the started input decodes as JSON
    for (const f of fixtures) {
      const input = findPayloads((f.raw as { events: unknown[] }).events[0] as Parameters<typeof findPayloads>[0]).find((p) => payloadEncoding(p) === 'json/plain');
      assert.ok(input, `${f.file}: its start has a json/plain payload`);
    }
  });

  it('has objective runs a model budget skipped: refused mid-way (steward-objective-budget-skip, completed skipped) and before the turn', () => {
    const objectives = fixtures.filter((f) => f.type === 'objectiveRunWorkflow');
    const completedSkipped = (f: Fixture) => {
      const end = f.events.at(-1) as { eventType: string; workflowExecutionCompletedEventAttributes?: { result?: { payloads?: PayloadJson[] } } } | undefined;
      return end?.eventType === 'EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED' && (plain(end.workflowExecutionCompletedEventAttributes?.result?.payloads?.[0]) as { status?: string } | undefined)?.status === 'skipped';
    };
    const refused = objectives.filter((f) => patchesOf(f).includes(OBJECTIVE_BUDGET_SKIP_PATCH) && childrenOf(f, 'turnWorkflow') === 1 && completedSkipped(f));
    assert.ok(refused.length > 0, `an objective run whose turn a budget refused, with the ${OBJECTIVE_BUDGET_SKIP_PATCH} marker; record one with scripts/record-histories.ts budgets`);
    assert.ok(objectives.some((f) => childrenOf(f, 'turnWorkflow') === 0 && completedSkipped(f)), 'an objective run skipped before its turn');
  });

  it('has inline sessions recorded traced and untraced (the steward-otel-tracing marker present and absent)', () => {
    // a worker with an OTLP exporter records the marker at a run's start; one without leaves it out
    const traced = inlineSessions.filter((f) => patchesOf(f).includes(OTEL_PATCH));
    const untraced = inlineSessions.filter((f) => !patchesOf(f).includes(OTEL_PATCH));
    assert.ok(traced.length > 0, `a traced inline session history (inline: ${inlineSessions.map((f) => f.file).join(', ')})`);
    assert.ok(untraced.length > 0, `an untraced inline session history (inline: ${inlineSessions.map((f) => f.file).join(', ')}); record one with scripts/record-histories.ts foundation`);
  });

  it('has inline sessions that continued as new on a waiting message (steward-continue-on-message) and after their last turn (before it)', () => {
    const continued = (f: Fixture) => f.events.at(-1)?.eventType === 'EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW';
    const onMessage = inlineSessions.filter((f) => patchesOf(f).includes(CONTINUE_ON_MESSAGE_PATCH) && continued(f));
    const before = inlineSessions.filter((f) => !patchesOf(f).includes(CONTINUE_ON_MESSAGE_PATCH) && continued(f));
    assert.ok(onMessage.length > 0, `an inline session run with the ${CONTINUE_ON_MESSAGE_PATCH} marker that continued as new; record one with scripts/record-histories.ts foundation`);
    assert.ok(before.length > 0, `an inline session run from before ${CONTINUE_ON_MESSAGE_PATCH} that continued as new: keep those files`);
  });

  it('has inline sessions with a stopped turn recorded with the steward-turn-over-before-notice marker and before it', () => {
    const stopped = (f: Fixture) => activitiesOf(f).some((a) => a.type === 'deliver' && String(a.input.key ?? '').endsWith(':stopped'));
    const over = inlineSessions.filter((f) => patchesOf(f).includes(TURN_OVER_BEFORE_NOTICE_PATCH) && stopped(f));
    const before = inlineSessions.filter((f) => !patchesOf(f).includes(TURN_OVER_BEFORE_NOTICE_PATCH) && stopped(f));
    assert.ok(over.length > 0, `an inline session run with the ${TURN_OVER_BEFORE_NOTICE_PATCH} marker whose turn was stopped; record one with scripts/record-histories.ts foundation`);
    assert.ok(before.length > 0, `an inline session run from before ${TURN_OVER_BEFORE_NOTICE_PATCH} whose turn was stopped: keep those files`);
  });

  it('has session runs that dropped a redelivered signal of a message they had answered (steward-inbound-dedup), in the run that answered it and in the next one', () => {
    const inboundKeys = (f: Fixture) =>
      f.events.flatMap((e) => (e.workflowExecutionSignaledEventAttributes?.signalName === 'inbound' ? [(plain(e.workflowExecutionSignaledEventAttributes.input?.payloads?.[0]) as { key?: string } | undefined)?.key ?? ''] : []));
    const dedup = sessions.filter((f) => patchesOf(f).includes(INBOUND_DEDUP_PATCH));
    const repeated = dedup.filter((f) => new Set(inboundKeys(f)).size < inboundKeys(f).length);
    assert.ok(repeated.length > 0, `a session run with the ${INBOUND_DEDUP_PATCH} marker that took a key twice; record one with scripts/record-histories.ts intake`);
    const carriedAndRepeated = dedup.filter((f) => {
      const input = plain(f.events[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0]) as { carried?: { taken?: string[] } } | undefined;
      const taken = new Set(input?.carried?.taken ?? []);
      return inboundKeys(f).some((k) => taken.has(k));
    });
    assert.ok(carriedAndRepeated.length > 0, 'a session run that was signalled a key its previous run carried as taken');
  });

  it('has session runs that took messages in by the inbound update (update-with-start) and dropped a redelivered signal of such a key', () => {
    const updated = (f: Fixture) =>
      f.events.flatMap((e) => {
        const req = (e as { workflowExecutionUpdateAcceptedEventAttributes?: { acceptedRequest?: { meta?: { updateId?: string }; input?: { name?: string } } } }).workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest;
        return req?.input?.name === 'inbound' ? [req.meta?.updateId ?? ''] : [];
      });
    const signalled = (f: Fixture) =>
      f.events.flatMap((e) => (e.workflowExecutionSignaledEventAttributes?.signalName === 'inbound' ? [(plain(e.workflowExecutionSignaledEventAttributes.input?.payloads?.[0]) as { key?: string } | undefined)?.key ?? ''] : []));
    const byUpdate = sessions.filter((f) => updated(f).length > 0);
    assert.ok(byUpdate.length > 0, 'a session run that took a message in by the inbound update; record one with scripts/record-histories.ts intake');
    assert.ok(
      byUpdate.some((f) => signalled(f).some((k) => updated(f).includes(k))),
      'a session run signalled a key it had taken in by update (a redelivery by signal, dropped)',
    );
  });

  it('has inline sessions whose approvals carry the requester set (steward-requester-set) and ones from before it', () => {
    const asked = (f: Fixture) => activitiesOf(f).filter((a) => a.type === 'requestApproval');
    const withSet = inlineSessions.filter((f) => patchesOf(f).includes(REQUESTER_SET_PATCH) && asked(f).length > 0);
    assert.ok(withSet.length > 0, `an inline session with the ${REQUESTER_SET_PATCH} marker and an approval; record one with scripts/record-histories.ts channels`);
    for (const f of withSet) for (const a of asked(f)) assert.ok(Array.isArray(a.input.requesters) && a.input.requesters.length > 0, `${f.file}: the approval request carries the requester set`);
    assert.ok(
      inlineSessions.some((f) => !patchesOf(f).includes(REQUESTER_SET_PATCH) && asked(f).length > 0),
      `an inline session with an approval from before ${REQUESTER_SET_PATCH} (its single requester): keep those files`,
    );
  });

  it('has an inline session whose turn a budget refused (steward-budget-wait): woken by budgetRaised, one whose wait ran out, one stopped while it waited', () => {
    const signals = (f: Fixture) => f.events.flatMap((e) => (e.workflowExecutionSignaledEventAttributes?.signalName ? [e.workflowExecutionSignaledEventAttributes.signalName] : []));
    const waited = inlineSessions.filter((f) => patchesOf(f).includes(BUDGET_WAIT_PATCH));
    assert.ok(waited.length > 0, `an inline session with the ${BUDGET_WAIT_PATCH} marker; record one with scripts/record-histories.ts budget-wait`);
    assert.ok(waited.some((f) => signals(f).includes('budgetRaised')), 'a waiting turn woken by budgetRaised');
    assert.ok(waited.some((f) => f.events.some((e) => e.eventType === 'EVENT_TYPE_TIMER_FIRED')), 'a wait that ran out (its timer fired): the turn ended budget-refused');
    assert.ok(waited.some((f) => signals(f).includes('stop')), 'a turn stopped while it waited');
  });

  it('has inline sessions whose replies their last model step delivered (steward-deliver-in-step), with a step the session told no (steering came) and ones from before it', () => {
    const withPatch = inlineSessions.filter((f) => patchesOf(f).includes(DELIVER_IN_STEP_PATCH));
    assert.ok(withPatch.length > 0, `an inline session with the ${DELIVER_IN_STEP_PATCH} marker; record one with scripts/record-histories.ts foundation`);
    for (const f of withPatch) {
      for (const { input, result } of completedSteps(f)) {
        const final = input.deliverFinal as { key?: string } | undefined;
        assert.equal(final?.key, replyKey(String(input.turnId)), `${f.file}: a step of a turn with the patch carries the turn's reply key`);
        if (result.delivered === true) assert.ok(!(Array.isArray(result.toolCalls) && result.toolCalls.length > 0), `${f.file}: only a final answer is delivered by its step`);
      }
      assert.ok(!localActivitySummaries(f).some((x) => /^Turn \d+: reply$/.test(x)) || completedSteps(f).some((x) => x.result.delivered !== true), `${f.file}: a reply marker only for a turn its step did not deliver`);
    }
    const toldNo = withPatch.some((f) => {
      const steps = completedSteps(f);
      return steps.some((x, i) => x.result.delivered !== true && !x.result.toolCalls && steps[i + 1]?.input.turnId === x.input.turnId && Array.isArray(steps[i + 1]?.input.steers) && (steps[i + 1]!.input.steers as unknown[]).length > 0);
    });
    assert.ok(toldNo, 'a final answer the session told no (steering waited), and the same turn\'s next step took the steering in');
    // the session's count of marked commands goes with each step, and grows with them (carried across continue-as-new)
    const counts = withPatch.flatMap((f) => completedSteps(f).map((x) => (x.input.deliverFinal as { commandsTaken?: number } | undefined)?.commandsTaken));
    assert.ok(counts.includes(0) && counts.some((n) => (n ?? 0) > 0), `steps with the session's command count: ${counts.join(', ')}`);
    assert.ok(withPatch.some((f) => ((plain(f.events[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0]) as { carried?: { commands?: number } } | undefined)?.carried?.commands ?? 0) > 0), 'a run that carried the count from the run before it');
    assert.ok(
      inlineSessions.some((f) => !patchesOf(f).includes(DELIVER_IN_STEP_PATCH) && localActivitySummaries(f).some((x) => /^Turn \d+: reply$/.test(x))),
      `an inline session from before ${DELIVER_IN_STEP_PATCH}, its replies delivered by local activity: keep those files`,
    );
  });

  it('has sessions of both shapes: turns inside the session (steward-inline-turn) and turns as child workflows (before it)', () => {
    const names = (fs: Fixture[]) => fs.map((f) => f.file).join(', ');
    assert.ok(inlineSessions.length > 0, `a session history with the ${INLINE_TURN_PATCH} marker, its turns' model steps and no child turn (sessions: ${names(sessions)}); record one with scripts/record-histories.ts`);
    assert.ok(childTurnSessions.length > 0, `a session history from before ${INLINE_TURN_PATCH}, whose turns are child turn workflows (sessions: ${names(sessions)}): keep those files`);
    for (const f of inlineSessions) {
      // the turns' activities carry their turn id and their label in the Temporal UI
      const steps = activitiesOf(f).filter((a) => a.type === 'modelStep');
      for (const s of steps) {
        assert.match(String(s.input.turnId), new RegExp(`^${ids[f.file]!.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:turn:\\d+:[0-9a-f]{8}$`), `${f.file}: a model step names its turn`);
        assert.match(s.summary ?? '', /^Turn \d+: model step \d+ \(/, `${f.file}: a model step's summary`);
      }
      // each reply went out from the session, not from a child: by a local activity (a marker), or
      // by its last model step (steward-deliver-in-step)
      if (patchesOf(f).includes(DELIVER_IN_STEP_PATCH)) assert.ok(completedSteps(f).some((x) => x.result.delivered === true), `${f.file}: a reply delivered by its model step`);
      else assert.ok(localActivitySummaries(f).some((x) => /^Turn \d+: (reply|notice)$/.test(x)), `${f.file}: a turn's delivery marker`);
      assert.ok(!activitiesOf(f).some((a) => a.type === 'deliver' && typeof a.input.turnId === 'string'), `${f.file}: no reply delivered by a regular activity`);
    }
    // the objective runs' turns are still child turn workflows
    assert.ok(fixtures.some((f) => f.type === 'objectiveRunWorkflow' && childrenOf(f, 'turnWorkflow') > 0), 'an objective run with its child turn');
  });

  it('has a turn that received an approval decision, approved and completed: a child turn workflow and a turn inside a session', () => {
    const turns = fixtures.filter((f) => f.type === 'turnWorkflow');
    const withApproval = turns.filter((f) => approvalDecisions(f).includes('approve'));
    assert.ok(withApproval.length > 0, `a turn history with an approved approvalDecision update (turns: ${turns.map((t) => t.file).join(', ')})`);
    for (const f of withApproval) {
      const last = f.events.at(-1)?.eventType;
      assert.equal(last, 'EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED', `${f.file} is a closed run`);
    }
    // inside a session: the update reached the session, the turn settled the approval, ran the tool and replied
    const inlineApproved = inlineSessions.filter((f) => approvalDecisions(f).includes('approve'));
    assert.ok(inlineApproved.length > 0, `an inline session history with an approved approvalDecision update (sessions: ${inlineSessions.map((t) => t.file).join(', ')})`);
    for (const f of inlineApproved) {
      const acts = activitiesOf(f);
      const settled = acts.findIndex((a) => a.type === 'settleApproval' && a.input.decision === 'approved');
      assert.ok(settled >= 0, `${f.file}: the approval settled as approved`);
      const asked = acts.slice(0, settled).reverse().find((a) => a.type === 'requestApproval');
      assert.ok(asked, `${f.file}: the approval was requested before`);
      const ran = acts.slice(settled).find((a) => a.type === 'runTool' && a.input.turnId === asked.input.turnId && a.input.toolCallId === asked.input.toolCallId);
      assert.ok(ran && ran.input.refused === undefined, `${f.file}: the approved tool ran`);
      const label = /^(Turn \d+):/.exec(ran.summary ?? '')?.[1];
      assert.ok(label && localActivitySummaries(f).includes(`${label}: reply`), `${f.file}: ${label} replied`);
      assert.match(f.events.at(-1)?.eventType ?? '', /^EVENT_TYPE_WORKFLOW_EXECUTION_(COMPLETED|CONTINUED_AS_NEW)$/, `${f.file} is a closed run`);
    }
  });

  it('has turns inside a session that were denied, cancelled by /stop while they waited, steered and stopped', () => {
    const all = inlineSessions;
    const has = (what: string, pred: (f: Fixture) => boolean) => assert.ok(all.some(pred), `an inline session history with ${what} (sessions: ${all.map((f) => f.file).join(', ')})`);
    has('a denied approval', (f) => approvalDecisions(f).includes('deny') && activitiesOf(f).some((a) => a.type === 'runTool' && typeof a.input.refused === 'string'));
    has('an approval cancelled by /stop', (f) => activitiesOf(f).some((a) => a.type === 'settleApproval' && a.input.decision === 'cancelled'));
    has('a steer update', (f) => f.events.some((e) => e.eventType === 'EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED' && e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.name === 'steer'));
    // /stop while the turn ran: the session tells the chat under the turn's key
    has('a stopped turn', (f) =>
      f.events.some((e) => e.eventType === 'EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED' && e.workflowExecutionSignaledEventAttributes?.signalName === 'stop') &&
      activitiesOf(f).some((a) => a.type === 'deliver' && /:turn:\d+:[0-9a-f]{8}:stopped$/.test(String(a.input.key))),
    );
  });

  it('has a session whose turns called MCP tools (server__tool): one at once, one after an approval', () => {
    const mcp = inlineSessions.filter((f) => activitiesOf(f).some((a) => a.type === 'runTool' && /: tool [a-z][a-z0-9-]*__\S+$/.test(a.summary ?? '')));
    assert.ok(mcp.length > 0, 'an MCP session (scripts/record-histories.ts mcp)');
    assert.ok(
      mcp.some((f) => activitiesOf(f).some((a) => a.type === 'requestApproval' && /approval for [a-z][a-z0-9-]*__/.test(a.summary ?? ''))),
      'an MCP call that waited for an approval',
    );
  });

  it('has a triaged message that became a task with its reminder, a reminder that reminded, and one ended by a signal', () => {
    const triage = fixtures.filter((f) => f.type === 'triageWorkflow');
    assert.ok(
      triage.some((f) => activitiesOf(f).some((a) => a.type === 'triageClassify') && activitiesOf(f).some((a) => a.type === 'triageRecord') && childrenOf(f, 'taskReminderWorkflow') > 0),
      'a triage history that classified, recorded a task and started its reminder (scripts/record-histories.ts tasks)',
    );
    const reminders = fixtures.filter((f) => f.type === 'taskReminderWorkflow');
    assert.ok(reminders.some((f) => f.events.some((e) => e.eventType === 'EVENT_TYPE_TIMER_FIRED') && activitiesOf(f).some((a) => a.type === 'taskRemind')), 'a reminder whose timer fired and reminded');
    assert.ok(reminders.some((f) => f.events.some((e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'taskChanged') && !activitiesOf(f).some((a) => a.type === 'taskRemind')), 'a reminder ended by a signal');
  });
});
