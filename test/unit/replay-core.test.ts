/** The replay's shared pure pieces: the selection and alternative schemas, canonical arguments, replayed turn ids, the per-turn comparison. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseReplayTurnId, replayQueueOf, replayTurnId } from '../../common/ids.js';
import { approvalToolsUnder, canonicalJson, ReplayAlternativeSchema, ReplaySelectionSchema, type ReplaySide } from '../../common/replays.js';
import { compareSides, summarise } from '../../domain/replays/sides.js';

describe('replay core', () => {
  it('validates selections and alternatives, refusing what is unknown', () => {
    assert.deepEqual(ReplaySelectionSchema.parse({ turnId: 't1' }), { turnId: 't1' });
    assert.ok(ReplaySelectionSchema.safeParse({ chatId: 'c', since: '2026-11-01T00:00:00Z', until: '2026-11-02T00:00:00Z' }).success);
    assert.ok(ReplaySelectionSchema.safeParse({ objectiveId: 'o', last: 3 }).success);
    assert.ok(ReplaySelectionSchema.safeParse({ sample: { size: 10, seed: 7 } }).success);
    assert.equal(ReplaySelectionSchema.safeParse({ chatId: 'c', since: 'yesterday', until: '2026-11-02T00:00:00Z' }).success, false);
    assert.equal(ReplaySelectionSchema.safeParse({ turnId: 't', extra: 1 }).success, false);
    assert.equal(ReplayAlternativeSchema.safeParse({ model: 'nope' }).success, false, 'a model is provider:model');
    assert.equal(ReplayAlternativeSchema.safeParse({ skills: 'maybe' }).success, false);
    assert.deepEqual(approvalToolsUnder({}, ['a']), ['a']);
    assert.deepEqual(approvalToolsUnder({ toolPolicy: { approvalTools: ['b'] } }, ['a']), ['b']);
    assert.deepEqual(approvalToolsUnder({ approvalTools: ['c'], toolPolicy: { approvalTools: ['b'] } }, ['a']), ['c']);
  });

  it('compares arguments canonically (keys sorted at every level) and names replayed turns apart', () => {
    assert.equal(canonicalJson({ b: 1, a: { d: [{ y: 2, x: 1 }], c: undefined } }), '{"a":{"d":[{"x":1,"y":2}]},"b":1}');
    assert.equal(canonicalJson({ a: 1, b: 2 }), canonicalJson({ b: 2, a: 1 }));
    const id = replayTurnId('rp1', 'session:http:a:c:turn:3:abcd1234');
    assert.deepEqual(parseReplayTurnId(id), { replayId: 'rp1', turnId: 'session:http:a:c:turn:3:abcd1234' });
    assert.equal(parseReplayTurnId('session:http:a:c:turn:3:abcd1234'), undefined);
    assert.equal(replayQueueOf('steward-background'), 'steward-background-replay');
  });

  it('reports tool calls as same, different, new and dropped, and sums a batch', () => {
    const side = (reply: string, calls: Array<[string, string]>): ReplaySide => ({ reply, outcome: 'replied', model: 'openai:m', toolCalls: calls.map(([name, args], i) => ({ id: `c${i}`, name, args })), usage: { input: 10, output: 5, total: 15 }, steps: 2 });
    const t = compareSides(
      { turnId: 't1' },
      side('a', [['http_request', '{"url":"x"}'], ['save_note', '{"note":"n"}'], ['send_email', '{}']]),
      side('b', [['http_request', '{"url":"x"}'], ['save_note', '{"note":"m"}'], ['run_command', '{}']]),
      [{ toolCallId: 'c1', tool: 'save_note', args: '{"note":"m"}', verdict: 'would-wait', recordedWaited: false, continuedAs: 'denied' }],
    );
    assert.deepEqual(t.toolCalls, { same: ['http_request'], different: ['save_note'], new: ['run_command'], dropped: ['send_email'] });
    assert.equal(t.replyChanged, true);
    assert.equal(t.changed, true);
    const same = compareSides({ turnId: 't2' }, side('a', []), side('a', []), []);
    assert.equal(same.changed, false);
    const s = summarise([t, same, { turnId: 't3', replayable: false, reason: 'blobs pruned' }]);
    assert.deepEqual([s.turns, s.replayed, s.notReplayable, s.changed, s.replyChanged, s.toolCallsChanged, s.approvalsFlipped], [3, 2, 1, 1, 1, 1, 1]);
    assert.deepEqual(s.usage.counterfactual, { input: 20, output: 10, total: 30 });
  });
});
