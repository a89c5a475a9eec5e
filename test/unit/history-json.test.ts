/**
 * platform/history-json.ts against the replay corpus: every recorded history (written by the
 * SDK's own proto JSON writer when it was recorded) reads into a History and writes back to the
 * same text, and its payloads read and write back the same; what it cannot represent is refused.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { findPayloads, WORKFLOW_IDS_FILE } from '../../platform/histories.js';
import { historyFromJSON, historyToJSON, payloadFromJSON, payloadToJSON, type History } from '../../platform/history-json.js';

const dir = new URL('../replay/histories/', import.meta.url);
const files = readdirSync(dir).filter((f) => f.endsWith('.json') && f !== WORKFLOW_IDS_FILE).sort();

describe('history JSON (platform/history-json.ts)', () => {
  it('reads every corpus history and writes it back to the same text', () => {
    assert.ok(files.length > 10, `the corpus has histories (${files.length})`);
    for (const f of files) {
      const text = readFileSync(new URL(f, dir), 'utf8');
      const history = historyFromJSON(JSON.parse(text));
      assert.ok((history.events?.length ?? 0) > 0, `${f} has events`);
      // eventId is a 64-bit integer: a Long in the message, as fetchHistory() returns it
      assert.equal(typeof history.events![0]!.eventId, 'object', `${f}: eventId is a Long`);
      assert.equal(historyToJSON(history), text.replace(/\n$/, ''), `${f} writes back unchanged`);
      // stack traces name the recording machine's paths: scripts/record-histories.ts leaves them out
      assert.doesNotMatch(text, /"stackTrace"/, `${f} carries no stack trace`);
    }
  });

  it('reads and writes payloads unchanged (base64 metadata and data)', () => {
    let n = 0;
    for (const f of files) {
      for (const p of findPayloads(JSON.parse(readFileSync(new URL(f, dir), 'utf8')))) {
        const payload = payloadFromJSON(p);
        assert.ok(payload.metadata?.encoding instanceof Uint8Array, `${f}: a payload's metadata is bytes`);
        assert.deepEqual(payloadToJSON(payload), p);
        n++;
      }
    }
    assert.ok(n > 100, `payloads checked (${n})`);
  });

  it('writes timestamps and durations as proto JSON does', () => {
    const text = historyToJSON({
      events: [
        {
          eventId: 1,
          eventTime: { seconds: 1_764_300_000, nanos: 120_000_000 },
          eventType: 1,
          workflowExecutionStartedEventAttributes: { workflowRunTimeout: { seconds: 90, nanos: 5000 }, workflowTaskTimeout: { seconds: 10 }, attempt: 1 },
        },
      ],
    } as unknown as History); // numbers where the message types say Long: protobufjs takes both
    const e = (JSON.parse(text) as { events: Array<Record<string, unknown> & { workflowExecutionStartedEventAttributes: Record<string, unknown> }> }).events[0]!;
    assert.equal(e.eventId, '1');
    assert.equal(e.eventTime, '2025-11-28T03:20:00.120Z');
    assert.equal(e.eventType, 'EVENT_TYPE_WORKFLOW_EXECUTION_STARTED');
    assert.equal(e.workflowExecutionStartedEventAttributes.workflowRunTimeout, '90.000005s');
    assert.equal(e.workflowExecutionStartedEventAttributes.workflowTaskTimeout, '10s');
    assert.equal(historyToJSON(historyFromJSON(JSON.parse(text))), text);
  });

  it('refuses what is not a history, naming what is wrong', () => {
    assert.throws(() => historyFromJSON({}), /expected an object with an array of events/);
    assert.throws(() => historyFromJSON({ events: [{ eventId: '1', eventTime: 'yesterday' }] }), /history\.events\[0\]\.eventTime: invalid timestamp "yesterday"/);
  });
});
