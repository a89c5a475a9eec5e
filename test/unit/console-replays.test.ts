/**
 * The console's Replays page, its pure parts (adapters/console/replays.tsx): the start form's
 * fields turned into the API's request body (the replay service checks it: text that is not a
 * number or a time is passed on as typed, so the service names what is wrong), and the report's
 * line diff in diff.tsx's terms with its line numbers. The page itself runs in
 * test/e2e/console-replays.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { alternativeText, replyDiffView, selectionText, startBodyOf } from '../../adapters/console/replays.js';
import { textDiff } from '../../domain/replays/report.js';

const NOW = Date.parse('2026-11-28T12:00:00.000Z');

describe('console replays: the start form', () => {
  it('turns each kind of selection into the request body', () => {
    assert.deepEqual(startBodyOf({ kind: 'turn', turnId: 't1' }, NOW), { selection: { turnId: 't1' }, alternative: {} });
    assert.deepEqual(startBodyOf({ kind: 'chat', chatId: 'room', since: '2h' }, NOW), { selection: { chatId: 'room', since: '2026-11-28T10:00:00.000Z', until: '2026-11-28T12:00:00.000Z' }, alternative: {} });
    assert.deepEqual(startBodyOf({ kind: 'chat', chatId: 'room', since: '2026-11-27T00:00:00Z', until: '90m' }, NOW).selection, { chatId: 'room', since: '2026-11-27T00:00:00Z', until: '2026-11-28T10:30:00.000Z' });
    assert.deepEqual(startBodyOf({ kind: 'objective', objectiveId: 'digest', last: '5' }, NOW).selection, { objectiveId: 'digest', last: 5 });
    assert.deepEqual(startBodyOf({ kind: 'sample', sampleSize: '20', sampleSince: '7d', seed: '7' }, NOW).selection, { sample: { size: 20, since: '2026-11-21T12:00:00.000Z', seed: 7 } });
    // the fields of the other kinds are not sent
    assert.deepEqual(startBodyOf({ kind: 'turn', turnId: 't1', chatId: 'room', last: '3' }, NOW).selection, { turnId: 't1' });
  });

  it('passes on what is not a number or a time as typed, for the service to refuse by name', () => {
    assert.deepEqual(startBodyOf({ kind: 'objective', objectiveId: 'digest', last: 'five' }, NOW).selection, { objectiveId: 'digest', last: 'five' });
    assert.equal((startBodyOf({ kind: 'chat', chatId: 'room', since: 'last tuesday' }, NOW).selection as { since: string }).since, 'last tuesday');
    assert.deepEqual(startBodyOf({ kind: 'turn' }, NOW).selection, { turnId: '' });
    assert.equal(startBodyOf({ kind: 'turn', turnId: 't', concurrency: '0' }, NOW).concurrency, 0);
  });

  it('the alternative: model, system prompt, skills, and the approval list only when replaced (empty: nothing waits)', () => {
    assert.deepEqual(startBodyOf({ kind: 'turn', turnId: 't', model: 'openai:gpt-4.1', systemPrompt: ' Be brief. ', skills: 'off' }, NOW).alternative, { model: 'openai:gpt-4.1', systemPrompt: ' Be brief. ', skills: 'off' });
    assert.deepEqual(startBodyOf({ kind: 'turn', turnId: 't', approvalTools: 'http_request' }, NOW).alternative, {}, 'tools typed without replacing the list: unchanged');
    assert.deepEqual(startBodyOf({ kind: 'turn', turnId: 't', approvalList: 'replace', approvalTools: 'http_request, send_email  every.*' }, NOW).alternative, { approvalTools: ['http_request', 'send_email', 'every.*'] });
    assert.deepEqual(startBodyOf({ kind: 'turn', turnId: 't', approvalList: 'replace' }, NOW).alternative, { approvalTools: [] });
    assert.deepEqual(startBodyOf({ kind: 'turn', turnId: 't', skills: 'maybe' }, NOW).alternative, {});
  });

  it('says a selection and an alternative in words', () => {
    assert.equal(selectionText({ objectiveId: 'digest', last: 3 }), 'objective digest, its last 3 runs');
    assert.equal(selectionText({ sample: { size: 5, seed: 9 } }), 'a sample of 5 turns (seed 9)');
    assert.equal(alternativeText({}), 'the current configuration, unchanged');
    assert.equal(alternativeText({ model: 'openai:x', skills: 'off', approvalTools: [] }), 'model openai:x; skills off; approval list (empty: nothing waits)');
  });
});

describe("console replays: the reply diff in diff.tsx's terms", () => {
  it('numbers the recorded and counterfactual lines of each hunk', () => {
    const d = textDiff('a\nb\nc\nd\n', 'a\nB\nc\nd\ne\n');
    const v = replyDiffView(d);
    assert.equal(v.additions, 2);
    assert.equal(v.deletions, 1);
    const lines = v.hunks.flatMap((h) => h.lines.map((l) => `${l.kind}:${l.oldNo ?? '-'}:${l.newNo ?? '-'}:${l.text}`));
    assert.deepEqual(lines, ['ctx:1:1:a', 'del:2:-:b', 'add:-:2:B', 'ctx:3:3:c', 'ctx:4:4:d', 'add:-:5:e']);
    assert.match(v.hunks[0]!.header, /^@@ -1,4 \+1,5 @@$/);
  });
});
