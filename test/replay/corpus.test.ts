/**
 * The replay corpus (test/replay/histories/) covers every workflow type Steward runs: a
 * session, a turn, an objective run, a repo change, and a turn that received an approval
 * decision. Read from the files themselves (the workflow type of the WorkflowExecutionStarted
 * event, the approval from the update events), and every file is one that replay.test.ts
 * replays: a parseable JSON history with its workflow id in workflow-ids.json, no payload left
 * encrypted (it could not be replayed without keys).
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { describe, it } from 'node:test';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils.js';
import { ENCRYPTED_ENCODING, findPayloads, fixtureKind, payloadEncoding, WORKFLOW_IDS_FILE } from '../../platform/histories.js';

const dir = new URL('./histories/', import.meta.url);
const entries = readdirSync(dir).sort();
const historyFiles = entries.filter((f) => f !== WORKFLOW_IDS_FILE);
const ids = JSON.parse(readFileSync(new URL(WORKFLOW_IDS_FILE, dir), 'utf8')) as Record<string, string>;

interface Event {
  eventType: string;
  workflowExecutionStartedEventAttributes?: { workflowType?: { name?: string }; workflowId?: string };
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
    for (const type of ['sessionWorkflow', 'turnWorkflow', 'objectiveRunWorkflow', 'repoChangeWorkflow']) {
      assert.ok(types.has(type), `a ${type} history (record one with steward histories record --query "WorkflowType='${type}'")`);
    }
    // and the payloads are what the workflows read: the started input decodes as JSON
    for (const f of fixtures) {
      const input = findPayloads((f.raw as { events: unknown[] }).events[0] as Parameters<typeof findPayloads>[0]).find((p) => payloadEncoding(p) === 'json/plain');
      assert.ok(input, `${f.file}: its start has a json/plain payload`);
    }
  });

  it('has a turn that received an approval decision, approved and completed', () => {
    const turns = fixtures.filter((f) => f.type === 'turnWorkflow');
    const withApproval = turns.filter((f) => approvalDecisions(f).includes('approve'));
    assert.ok(withApproval.length > 0, `a turn history with an approved approvalDecision update (turns: ${turns.map((t) => t.file).join(', ')})`);
    for (const f of withApproval) {
      const last = f.events.at(-1)?.eventType;
      assert.equal(last, 'EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED', `${f.file} is a closed run`);
    }
  });
});
