/**
 * The counterfactual replay's report (domain/replays/report.ts): the reply diff (hunks, word diff,
 * bounds on size and time), the tool calls compared by canonical arguments (same, different,
 * new, dropped; key order never matters), approvals that flip, the batch summary with a turn
 * that could not be replayed, and the renderers: Markdown (golden; user text in tables escaped,
 * read back with marked), JSONL (each line parses) and JSON (checked by its schema).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { Lexer, marked, type Tokens } from 'marked';
import {
  DIFF_LIMITS,
  REPORT_LIMITS,
  ReplayReportSchema,
  batchSummary,
  buildReport,
  canonicalJson,
  compareToolCalls,
  escapeCell,
  fenced,
  median,
  reportJson,
  reportJsonl,
  reportMarkdown,
  textDiff,
  turnReport,
  type ReplayToolCall,
  type ReplayTurnReport,
  type ReplayTurnSide,
} from '../../domain/replays/report.js';

function side(o: Partial<ReplayTurnSide> = {}): ReplayTurnSide {
  return { turnId: 't1', outcome: 'replied', reply: 'Hello', toolCalls: [], usage: { input: 100, output: 20, total: 120 }, costMicros: 1500, latencyMs: 1200, ...o };
}

const call = (id: string, name: string, input: unknown, o: Partial<ReplayToolCall> = {}): ReplayToolCall => ({ id, name, input, ...o });

function replayable(t: ReplayTurnReport): Extract<ReplayTurnReport, { replayable: true }> {
  assert.equal(t.replayable, true);
  return t as Extract<ReplayTurnReport, { replayable: true }>;
}

/** The batch the golden Markdown is rendered from: a changed turn (reply, tool calls, approvals) and a pruned one. */
function goldenBatch() {
  const t1 = turnReport(
    side({
      chatId: 'http:acct:c1',
      at: '2026-11-01T10:00:00.000Z',
      model: 'scripted/a',
      reply: 'The build passed.\nSee the log.\nDone',
      toolCalls: [
        call('c1', 'http_request', { url: 'https://example.test/', method: 'GET' }, { needsApproval: true, decision: 'approved' }),
        call('c2', 'search', { q: 'a' }),
        call('c3', 'run_command', { argv: ['ls'] }),
      ],
    }),
    side({
      model: 'scripted/b',
      reply: 'The build failed.\nSee the log.\nDone',
      usage: { input: 90, output: 30, total: 120 },
      costMicros: 900,
      latencyMs: 800,
      toolCalls: [
        call('d1', 'http_request', { method: 'GET', url: 'https://example.test/' }, { result: 'recorded' }),
        call('d2', 'search', { q: 'b' }, { result: 'simulated' }),
        call('d3', 'send_email', { to: ['a@example.test'] }, { needsApproval: true, result: 'simulated' }),
      ],
    }),
  );
  const t2 = turnReport({ turnId: 't2', replayable: false, reason: 'the blobs of its model steps were pruned' });
  return buildReport({ replayId: 'rp_1', createdAt: '2026-11-28T12:00:00.000Z', alternative: { model: 'scripted/b', approvalTools: [] } }, [t1, t2]);
}

const GOLDEN_MARKDOWN = `# Replay rp\\_1

Started 2026-11-28T12:00:00.000Z.

Alternative:

\`\`\`json
{
  "approvalTools": [],
  "model": "scripted/b"
}
\`\`\`

## Summary

| turns | count |
| --- | --- |
| total | 2 |
| replayable | 1 |
| not replayable | 1 |
| outcome changed | 1 |
| reply changed | 1 |
| tool calls changed | 1 |
| approvals flipped | 1 |
| diverged | 1 |

|  | same | different | new | dropped | divergences | approvals now asked | approvals now skipped |
| --- | --- | --- | --- | --- | --- | --- | --- |
| tool calls | 1 | 1 | 1 | 1 | 2 | 0 | 1 |

|  | recorded | counterfactual | delta |
| --- | --- | --- | --- |
| tokens (sum) | 120 | 120 | 0 |
| tokens (median) | 120 | 120 | 0 |
| cost (sum) | $0.0015 | $0.0009 | -$0.0006 |
| cost (median) | $0.0015 | $0.0009 | -$0.0006 |
| latency (sum) | 1200 ms | 800 ms | -400 ms |
| latency (median) | 1200 ms | 800 ms | -400 ms |

Not replayable:

| turn | reason |
| --- | --- |
| t2 | the blobs of its model steps were pruned |

## Turn t1

chat http:acct:c1, 2026-11-01T10:00:00.000Z

**Outcome changed** (reply, tool calls, approvals).

|  | recorded | counterfactual | delta |
| --- | --- | --- | --- |
| model | scripted/a | scripted/b |  |
| outcome | replied | replied |  |
| tokens in | 100 | 90 | -10 |
| tokens out | 20 | 30 | +10 |
| tokens total | 120 | 120 | 0 |
| cost | $0.0015 | $0.0009 | -$0.0006 |
| latency | 1200 ms | 800 ms | -400 ms |

### Replies

**Recorded**

\`\`\`text
The build passed.
See the log.
Done
\`\`\`

**Counterfactual**

\`\`\`text
The build failed.
See the log.
Done
\`\`\`

### Diff (+1 -1 lines)

\`\`\`diff
@@ -1,3 +1,3 @@
-The build passed.
+The build failed.
 See the log.
 Done
\`\`\`

### Tool calls

| change | tool | recorded arguments | counterfactual arguments | counterfactual result |
| --- | --- | --- | --- | --- |
| same | http\\_request | {"method":"GET","url":"https://example.test/"} | {"method":"GET","url":"https://example.test/"} | from the record |
| different | search | {"q":"a"} | {"q":"b"} | simulated, no result |
| new | send\\_email |  | {"to":\\["a@example.test"\\]} | simulated, no result |
| dropped | run\\_command | {"argv":\\["ls"\\]} |  | not called |

### Approvals

| tool | recorded | counterfactual | flipped |
| --- | --- | --- | --- |
| http\\_request | would wait (approved) | would run | yes: now skipped |
| send\\_email | not called | would wait |  |

### Divergences

Calls the replay could not answer from the record (simulated, the model was told there is no result):

| # | tool | arguments |
| --- | --- | --- |
| 2 | search | {"q":"b"} |
| 3 | send\\_email | {"to":\\["a@example.test"\\]} |

## Turn t2

Not replayable: the blobs of its model steps were pruned
`;

/** The cells of every table in a Markdown document, as marked reads them (text of each cell). */
function tables(md: string): string[][][] {
  return new Lexer({ gfm: true })
    .lex(md)
    .filter((t): t is Tokens.Table => t.type === 'table')
    .map((t) => [t.header.map((c) => c.text), ...t.rows.map((r) => r.map((c) => c.text))]);
}

describe('canonicalJson', () => {
  it('sorts keys at every depth, keeps array order, drops undefined members', () => {
    assert.equal(canonicalJson({ b: 1, a: { d: [3, { z: 1, y: 2 }], c: undefined } }), '{"a":{"d":[3,{"y":2,"z":1}]},"b":1}');
    assert.equal(canonicalJson({ x: 1, y: 2 }), canonicalJson({ y: 2, x: 1 }));
    assert.notEqual(canonicalJson([1, 2]), canonicalJson([2, 1]));
    assert.equal(canonicalJson(undefined), 'null');
    assert.equal(canonicalJson('a"b'), '"a\\"b"');
  });
});

describe('textDiff', () => {
  it('identical replies: no hunks, identical', () => {
    assert.deepEqual(textDiff('same\ntext', 'same\ntext'), { identical: true, added: 0, removed: 0, hunks: [], notes: [] });
    assert.equal(textDiff(null, null).identical, true);
  });

  it('a changed line: one hunk with context, removed and added lines and their numbers', () => {
    const a = ['one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine', 'ten'].join('\n');
    const b = a.replace('two', 'TWO').replace('nine', 'NINE');
    const d = textDiff(a, b);
    assert.equal(d.identical, false);
    assert.equal(d.added, 2);
    assert.equal(d.removed, 2);
    assert.equal(d.words, undefined, 'multi-line replies get no word diff');
    assert.deepEqual(
      d.hunks.map((h) => [h.recordedStart, h.recordedLines, h.counterfactualStart, h.counterfactualLines]),
      [[1, 10, 1, 10]],
      'the two changes are 7 lines apart: one hunk (3 lines of context each side)',
    );
    const h = d.hunks[0];
    assert.ok(h);
    assert.deepEqual(h.lines.slice(0, 4), [
      { kind: 'context', text: 'one' },
      { kind: 'removed', text: 'two' },
      { kind: 'added', text: 'TWO' },
      { kind: 'context', text: 'three' },
    ]);
    assert.ok(!h.lines.some((l) => l.text.startsWith('No newline')), 'no "\\ No newline" markers');
  });

  it('changes far apart give separate hunks', () => {
    const lines = Array.from({ length: 40 }, (_, i) => `line ${i}`);
    const b = [...lines];
    b[2] = 'changed 2';
    b[30] = 'changed 30';
    const d = textDiff(lines.join('\n'), b.join('\n'));
    assert.deepEqual(
      d.hunks.map((h) => [h.recordedStart, h.recordedLines]),
      [
        [1, 6],
        [28, 7],
      ],
    );
  });

  it('short single-line replies also get a word diff', () => {
    const d = textDiff('The build passed today.', 'The build failed today.');
    assert.deepEqual(d.words, [
      { kind: 'same', text: 'The build ' },
      { kind: 'removed', text: 'passed' },
      { kind: 'added', text: 'failed' },
      { kind: 'same', text: ' today.' },
    ]);
    assert.equal(d.hunks.length, 1);
    const long = 'x '.repeat(DIFF_LIMITS.wordDiffMaxChars);
    assert.equal(textDiff(long, `${long}y`).words, undefined, 'a long line gets the line diff only');
  });

  it('no reply against a reply; a reply that differs only in its final line break', () => {
    const d = textDiff(null, 'Now there is one');
    assert.equal(d.identical, false);
    assert.equal(d.added, 1);
    assert.equal(d.removed, 0);
    const e = textDiff(null, '');
    assert.equal(e.identical, false);
    assert.match(e.notes.join(' '), /no reply/);
    const f = textDiff('a\nb', 'a\nb\n');
    assert.equal(f.identical, false);
    assert.deepEqual(f.hunks, []);
    assert.match(f.notes.join(' '), /final line break/);
  });

  it('two unrelated texts past the edit limit: a whole replacement, with a note', () => {
    const a = Array.from({ length: 50 }, (_, i) => `a${i}`).join('\n');
    const b = Array.from({ length: 50 }, (_, i) => `b${i}`).join('\n');
    const d = textDiff(a, b, { limits: { maxEditLength: 10 } });
    assert.equal(d.hunks.length, 1);
    assert.equal(d.removed, 50);
    assert.equal(d.added, 50);
    assert.match(d.notes.join(' '), /more than 10 lines .* whole replacement/);
    assert.equal(d.hunks[0]?.lines[0]?.kind, 'removed');
    assert.equal(d.hunks[0]?.lines[50]?.kind, 'added');
  });

  it('hunk lines are capped with a note saying how many were left out', () => {
    const a = Array.from({ length: 100 }, (_, i) => `a${i}`).join('\n');
    const b = Array.from({ length: 100 }, (_, i) => (i % 2 === 0 ? `b${i}` : `a${i}`)).join('\n');
    const d = textDiff(a, b, { limits: { maxHunkLines: 30 } });
    assert.equal(
      d.hunks.reduce((n, h) => n + h.lines.length, 0),
      30,
    );
    assert.equal(d.added, 50, 'the counts cover the whole diff');
    assert.match(d.notes.join(' '), /^\d+ more diff lines not shown \(the report keeps 30\)/);
  });

  it('a 1 MB reply against another: bounded time and size, with notes', () => {
    const big = (tag: string) => Array.from({ length: 20_000 }, (_, i) => `${tag} line ${i} ${'x'.repeat(40)}`).join('\n');
    const a = big('old');
    const b = big('new');
    assert.ok(a.length > 1_000_000);
    const started = performance.now();
    const d = textDiff(a, b);
    const took = performance.now() - started;
    assert.ok(took < 15_000, `took ${took} ms`);
    assert.equal(d.identical, false);
    const notes = d.notes.join(' ');
    assert.match(notes, /Only the first 5000 lines and 200000 characters of each reply were compared/);
    assert.match(notes, /whole replacement/);
    assert.match(notes, /more diff lines not shown/);
    assert.equal(
      d.hunks.reduce((n, h) => n + h.lines.length, 0),
      DIFF_LIMITS.maxHunkLines,
    );
    assert.ok(JSON.stringify(d).length < 200_000);
    // A 1 MB reply with one line changed: diffed within the caps, the change found.
    const c = a.replace('old line 10 ', 'OLD line 10 ');
    const e = textDiff(a, c);
    assert.equal(e.added, 1);
    assert.equal(e.removed, 1);
    assert.equal(e.hunks[0]?.lines.find((l) => l.kind === 'added')?.text.startsWith('OLD line 10 '), true);
  });

  it('a change past the compared part: the compared parts are the same, said in a note', () => {
    const a = 'x\n'.repeat(20);
    const d = textDiff(`${a}end`, `${a}END`, { limits: { maxInputLines: 10 } });
    assert.equal(d.identical, false);
    assert.deepEqual(d.hunks, []);
    assert.match(d.notes.join(' '), /compared parts are the same/);
  });
});

describe('compareToolCalls', () => {
  it('same (key order does not matter), different, new, dropped, in reading order', () => {
    const rows = compareToolCalls(
      [call('r1', 'read', { path: 'a', opts: { x: 1, y: 2 } }), call('r2', 'search', { q: 'cats' }), call('r3', 'run_command', { argv: ['ls'] }), call('r4', 'read', { path: 'z' })],
      [call('c1', 'read', { opts: { y: 2, x: 1 }, path: 'a' }), call('c2', 'search', { q: 'dogs' }), call('c3', 'send_email', { to: ['x'] }), call('c4', 'read', { path: 'z' })],
    );
    assert.deepEqual(
      rows.map((r) => [r.kind, r.tool, r.recorded?.id ?? null, r.counterfactual?.id ?? null]),
      [
        ['same', 'read', 'r1', 'c1'],
        ['different', 'search', 'r2', 'c2'],
        ['new', 'send_email', null, 'c3'],
        ['dropped', 'run_command', 'r3', null],
        ['same', 'read', 'r4', 'c4'],
      ],
    );
    assert.equal(rows[0]?.recorded?.args, '{"opts":{"x":1,"y":2},"path":"a"}');
    assert.equal(rows[0]?.counterfactual?.args, rows[0]?.recorded?.args);
  });

  it('a same call is found wherever it stands; repeated calls pair one to one', () => {
    const rows = compareToolCalls(
      [call('r1', 'a', { n: 1 }), call('r2', 'b', {}), call('r3', 'a', { n: 1 })],
      [call('c1', 'b', {}), call('c2', 'a', { n: 1 }), call('c3', 'a', { n: 1 }), call('c4', 'a', { n: 1 })],
    );
    assert.deepEqual(
      rows.map((r) => [r.kind, r.recorded?.id ?? null, r.counterfactual?.id ?? null]),
      [
        ['same', 'r2', 'c1'],
        ['same', 'r1', 'c2'],
        ['same', 'r3', 'c3'],
        ['new', null, 'c4'],
      ],
    );
  });

  it('different pairs the calls of one tool left on each side, in order; the rest are new or dropped', () => {
    const rows = compareToolCalls([call('r1', 'search', { q: 1 }), call('r2', 'search', { q: 2 })], [call('c1', 'search', { q: 3 })]);
    assert.deepEqual(
      rows.map((r) => [r.kind, r.recorded?.id ?? null, r.counterfactual?.id ?? null]),
      [
        ['different', 'r1', 'c1'],
        ['dropped', 'r2', null],
      ],
    );
    assert.deepEqual(compareToolCalls([], []), []);
    assert.deepEqual(
      compareToolCalls([call('r1', 'x', {})], []).map((r) => r.kind),
      ['dropped'],
    );
  });

  it('the same input in any order gives the same rows (stable)', () => {
    const rec = [call('r1', 'a', { k: 1, j: 2 }), call('r2', 'b', [1, 2])];
    const cf = [call('c1', 'b', [1, 2]), call('c2', 'a', { j: 2, k: 1 })];
    assert.deepEqual(compareToolCalls(rec, cf), compareToolCalls(rec, cf));
    assert.deepEqual(
      compareToolCalls(rec, cf).map((r) => r.kind),
      ['same', 'same'],
    );
  });

  it('long arguments are capped in the report, compared whole', () => {
    const long = 'y'.repeat(REPORT_LIMITS.maxArgsChars * 2);
    const rows = compareToolCalls([call('r1', 'a', { s: long })], [call('c1', 'a', { s: `${long}!` })]);
    assert.equal(rows[0]?.kind, 'different');
    assert.match(rows[0]?.recorded?.args ?? '', /… \(\d+ more characters\)$/);
  });
});

describe('turnReport', () => {
  it('an unchanged turn: identical replies, all calls the same, outcome unchanged, zero deltas', () => {
    const calls = [call('x1', 'search', { q: 'a' })];
    const t = replayable(turnReport(side({ toolCalls: calls }), side({ toolCalls: [{ ...calls[0]!, result: 'recorded' }] })));
    assert.equal(t.outcomeChanged, false);
    assert.deepEqual(t.changes, { reply: false, toolCalls: false, approvals: false, outcome: false });
    assert.equal(t.reply.diff.identical, true);
    assert.deepEqual(t.divergences, []);
    assert.deepEqual(t.approvals, []);
    assert.deepEqual(t.metrics.delta, { tokens: { input: 0, output: 0, total: 0 }, costMicros: 0, latencyMs: 0 });
  });

  it('a changed reply alone changes the outcome', () => {
    const t = replayable(turnReport(side({ reply: 'Yes.' }), side({ reply: 'No.' })));
    assert.equal(t.outcomeChanged, true);
    assert.deepEqual(t.changes, { reply: true, toolCalls: false, approvals: false, outcome: false });
    assert.ok(t.reply.diff.words);
  });

  it('a changed approval list flips exactly the calls it names', () => {
    const rec = [
      call('r1', 'http_request', { url: 'u' }, { needsApproval: true, decision: 'approved' }),
      call('r2', 'send_email', { to: ['a'] }, { needsApproval: false }),
      call('r3', 'run_command', { argv: ['ls'] }, { needsApproval: true, decision: 'denied' }),
      call('r4', 'search', { q: 'x' }),
    ];
    // the policy under test: send_email needs approval, http_request no longer; run_command as before
    const cf = [
      call('c1', 'http_request', { url: 'u' }, { needsApproval: false, result: 'recorded' }),
      call('c2', 'send_email', { to: ['a'] }, { needsApproval: true, result: 'recorded' }),
      call('c3', 'run_command', { argv: ['ls'] }, { needsApproval: true, result: 'recorded' }),
      call('c4', 'search', { q: 'x' }, { result: 'recorded' }),
    ];
    const t = replayable(turnReport(side({ toolCalls: rec }), side({ toolCalls: cf })));
    assert.deepEqual(
      t.approvals.map((a) => [a.tool, a.recorded, a.counterfactual, a.flipped, a.recordedDecision ?? null]),
      [
        ['http_request', 'would wait', 'would run', true, 'approved'],
        ['send_email', 'would run', 'would wait', true, null],
        ['run_command', 'would wait', 'would wait', false, 'denied'],
      ],
    );
    assert.equal(t.changes.approvals, true);
    assert.equal(t.changes.toolCalls, false);
    assert.equal(t.outcomeChanged, true);
    const s = batchSummary([t]);
    assert.deepEqual(s.approvals, { flipped: 2, nowAsked: 1, nowSkipped: 1 });
    assert.equal(s.turns.approvalsFlipped, 1);
  });

  it('an outcome kind that differs; divergences are the simulated calls', () => {
    const t = replayable(
      turnReport(
        side({ reply: null, outcome: 'budget-exhausted', toolCalls: [call('r1', 'search', { q: 1 })] }),
        side({ reply: null, outcome: 'failed', toolCalls: [call('c1', 'search', { q: 2 }, { result: 'simulated' }), call('c2', 'fetch', {}, { result: 'simulated' })] }),
      ),
    );
    assert.deepEqual(t.changes, { reply: false, toolCalls: true, approvals: false, outcome: true });
    assert.deepEqual(
      t.divergences.map((d) => [d.index, d.tool, d.args]),
      [
        [0, 'search', '{"q":2}'],
        [1, 'fetch', '{}'],
      ],
    );
  });

  it('unknown cost or latency on one side: that delta is null', () => {
    const t = replayable(turnReport(side({ costMicros: null }), side({ latencyMs: null })));
    assert.equal(t.metrics.delta.costMicros, null);
    assert.equal(t.metrics.delta.latencyMs, null);
  });

  it('not replayable: the recorded turn, or a counterfactual run that failed or did not happen', () => {
    assert.deepEqual(turnReport({ turnId: 't9', replayable: false, reason: 'blobs pruned', chatId: 'c' }), { turnId: 't9', replayable: false, reason: 'blobs pruned', chatId: 'c' });
    assert.deepEqual(turnReport(side(), { turnId: 't1', replayable: false, reason: 'the replay failed: model not found' }), {
      turnId: 't1',
      replayable: false,
      reason: 'the replay failed: model not found',
    });
    assert.equal((turnReport(side()) as { reason: string }).reason, 'the turn was not replayed');
  });

  it('bad input is refused with a clear error', () => {
    assert.throws(() => turnReport(side(), side({ turnId: 'other' })), /counterfactual turn other is not the recorded turn t1/);
    assert.throws(() => turnReport({ turnId: 't1' } as unknown as ReplayTurnSide, side()), /outcome/);
    assert.throws(() => turnReport(side({ usage: { input: -1, output: 0, total: 0 } }), side()), /too_small|>=0/);
  });

  it('a huge reply is capped in the report, its length kept', () => {
    const big = 'z'.repeat(REPORT_LIMITS.maxReplyChars + 10);
    const t = replayable(turnReport(side({ reply: big }), side({ reply: big })));
    assert.equal(t.reply.recorded.truncated, true);
    assert.equal(t.reply.recorded.chars, big.length);
    assert.equal(t.reply.recorded.text?.length, REPORT_LIMITS.maxReplyChars);
    assert.equal(t.reply.diff.identical, true);
  });
});

describe('batchSummary', () => {
  it('counts, sums and medians over the replayable turns; the not-replayable ones with their reasons', () => {
    const turns = [
      turnReport(side({ turnId: 'a', costMicros: 100, latencyMs: 10 }), side({ turnId: 'a', reply: 'other', costMicros: 50, latencyMs: 30 })),
      turnReport(side({ turnId: 'b', costMicros: 300, latencyMs: 20 }), side({ turnId: 'b', costMicros: null, latencyMs: 40 })),
      turnReport(side({ turnId: 'c', costMicros: 200, latencyMs: 60 }), side({ turnId: 'c', costMicros: 70, latencyMs: 50 })),
      turnReport({ turnId: 'd', replayable: false, reason: 'blobs pruned' }),
      turnReport({ turnId: 'e', replayable: false, reason: 'no history' }),
      turnReport({ turnId: 'f', replayable: false, reason: 'blobs pruned' }),
    ];
    const s = batchSummary(turns);
    assert.deepEqual(s.turns, { total: 6, replayable: 3, notReplayable: 3, outcomeChanged: 1, replyChanged: 1, toolCallsChanged: 0, approvalsFlipped: 0, diverged: 0 });
    assert.deepEqual(s.reasons, [
      { reason: 'blobs pruned', count: 2 },
      { reason: 'no history', count: 1 },
    ]);
    assert.deepEqual(
      s.notReplayable.map((n) => n.turnId),
      ['d', 'e', 'f'],
    );
    assert.deepEqual(s.costMicros, { recorded: { sum: 600, median: 200, known: 3 }, counterfactual: { sum: 120, median: 60, known: 2 } });
    assert.deepEqual(s.latencyMs, { recorded: { sum: 90, median: 20, known: 3 }, counterfactual: { sum: 120, median: 40, known: 3 } });
    assert.deepEqual(s.tokens.recorded, { sum: 360, median: 120, known: 3 });
  });

  it('an empty batch or one with no replayable turn: zero counts, unknown sums', () => {
    const s = batchSummary([turnReport({ turnId: 'd', replayable: false, reason: 'r' })]);
    assert.equal(s.turns.total, 1);
    assert.deepEqual(s.tokens.recorded, { sum: null, median: null, known: 0 });
    assert.equal(batchSummary([]).turns.total, 0);
  });

  it('median', () => {
    assert.equal(median([]), null);
    assert.equal(median([5]), 5);
    assert.equal(median([3, 1, 2]), 2);
    assert.equal(median([4, 1, 3, 2]), 2.5);
  });
});

describe('renderers', () => {
  it('Markdown: the golden report', () => {
    assert.equal(reportMarkdown(goldenBatch()), GOLDEN_MARKDOWN);
  });

  it('deterministic: the same input renders the same bytes', () => {
    assert.equal(reportMarkdown(goldenBatch()), reportMarkdown(goldenBatch()));
    assert.equal(reportJsonl(goldenBatch()), reportJsonl(goldenBatch()));
    assert.equal(JSON.stringify(reportJson(goldenBatch())), JSON.stringify(goldenBatch()));
  });

  it('Markdown tables: pipes, backticks, newlines and HTML in user text stay inside their cell', () => {
    const nasty = 'a | b `code` <script>x</script>\nsecond *line* [l](u) ~~s~~ &amp; \\';
    const t = turnReport(
      side({ turnId: 'turn|1', toolCalls: [call('r1', 'to|ol`x', { text: nasty }, { needsApproval: true })] }),
      side({ turnId: 'turn|1', toolCalls: [call('c1', 'to|ol`x', { text: 'plain' }, { result: 'simulated' })] }),
    );
    const r = buildReport({ replayId: 'r|1', alternative: {} }, [t, turnReport({ turnId: 'x', replayable: false, reason: 'pruned | gone\nreally' })]);
    const md = reportMarkdown(r);
    const all = tables(md);
    for (const tb of all) {
      const width = tb[0]?.length;
      for (const rowCells of tb) assert.equal(rowCells.length, width, `a row of ${JSON.stringify(tb[0])} has ${rowCells.length} cells`);
    }
    const toolTable = all.find((tb) => tb[0]?.[0] === 'change');
    assert.ok(toolTable);
    const cells = toolTable[1] ?? [];
    // what marked reads back from the cell (GFM takes the pipe's escape at the table level): one
    // column, the backtick still escaped (no code span)
    assert.equal(cells[1], 'to|ol\\`x');
    assert.ok(cells[2]?.includes('\\`code\\`'));
    assert.equal(cells[2], escapeCell(canonicalJson({ text: nasty })).replace(/\\\|/g, '|'));
    // rendered: no HTML from user text, no inline code span, no emphasis or link from it
    const html = marked.parse(md, { async: false, gfm: true });
    assert.ok(!html.includes('<script>'));
    assert.equal(html.match(/(?<!<pre>)<code>/g), null);
    const inTables = html.match(/<table>[\s\S]*?<\/table>/g) ?? [];
    assert.ok(inTables.length >= 5);
    for (const tb of inTables) assert.ok(!/<(em|strong|del|a|code)[ >]/.test(tb), tb);
    assert.ok(!cells[2]?.includes('<script>'));
    assert.ok(cells[2]?.includes('\\<script\\>'));
    assert.equal(escapeCell('a|b\r\nc`d'), 'a\\|b<br>c\\`d');
    const reasonTable = all.find((tb) => tb[0]?.[0] === 'turn' && tb[0]?.[1] === 'reason');
    assert.deepEqual(reasonTable?.[1], ['x', 'pruned | gone<br>really']);
  });

  it('a reply with fences inside stays one code block', () => {
    const reply = 'before\n```js\nconsole.log(1)\n```\nafter ````';
    const md = fenced(reply, 'text');
    const tokens = new Lexer({ gfm: true }).lex(md);
    assert.equal(tokens.length, 1);
    const code = tokens[0] as Tokens.Code;
    assert.equal(code.type, 'code');
    assert.equal(code.text, reply);
    const t = turnReport(side({ reply }), side({ reply: `${reply}\nmore` }));
    const whole = reportMarkdown(buildReport({ replayId: 'r', alternative: {} }, [t]));
    const codes = new Lexer({ gfm: true })
      .lex(whole)
      .filter((x): x is Tokens.Code => x.type === 'code')
      .map((x) => [x.lang, x.text]);
    assert.deepEqual(
      codes.map(([lang]) => lang),
      ['json', 'text', 'text', 'diff'],
    );
    assert.equal(codes[1]?.[1], reply);
    assert.match(codes[3]?.[1] ?? '', /^@@ -\d+,\d+ \+\d+,\d+ @@\n/);
  });

  it('JSONL: one line per turn then the summary, each line parses', () => {
    const r = goldenBatch();
    const text = reportJsonl(r);
    assert.ok(text.endsWith('\n'));
    const lines = text.split('\n').slice(0, -1);
    assert.equal(lines.length, r.turns.length + 1);
    const parsed = lines.map((l) => JSON.parse(l) as { type: string; replayId: string; turnId?: string; turns?: { total: number } });
    assert.deepEqual(
      parsed.map((p) => [p.type, p.replayId, p.turnId ?? null]),
      [
        ['turn', 'rp_1', 't1'],
        ['turn', 'rp_1', 't2'],
        ['summary', 'rp_1', null],
      ],
    );
    assert.equal(parsed[2]?.turns?.total, 2);
    assert.ok(!lines.some((l) => l.includes('\n')));
  });

  it('JSON: the report fits its schema and survives a JSON round trip; a bad one is refused', () => {
    const r = goldenBatch();
    assert.deepEqual(ReplayReportSchema.parse(JSON.parse(JSON.stringify(reportJson(r)))), r);
    assert.throws(() => reportJson({ ...r, replayId: '' }));
    assert.throws(() => reportJson({ ...r, turns: [{ turnId: 'x', replayable: true } as unknown as ReplayTurnReport] }));
  });
});

describe('properties', () => {
  const lineArb = fc.constantFrom('a', 'b', 'c', '', 'a b', 'x|y', '`');
  const textArb = fc.array(lineArb, { maxLength: 30 }).map((l) => l.join('\n'));

  it('the hunks rebuild the counterfactual reply from the recorded one', () => {
    fc.assert(
      fc.property(textArb, textArb, (a, b) => {
        const d = textDiff(a, b);
        assert.equal(d.identical, a === b);
        const old = a === '' ? [] : a.replace(/\n$/, '').split('\n');
        const out: string[] = [];
        let at = 0; // 0-based index in old
        for (const h of d.hunks) {
          const start = h.recordedLines === 0 ? h.recordedStart : h.recordedStart - 1;
          out.push(...old.slice(at, start));
          at = start;
          assert.equal(h.lines.filter((l) => l.kind !== 'added').length, h.recordedLines);
          assert.equal(h.lines.filter((l) => l.kind !== 'removed').length, h.counterfactualLines);
          for (const l of h.lines) {
            if (l.kind === 'context') assert.equal(old[at], l.text);
            if (l.kind === 'removed') assert.equal(old[at], l.text);
            if (l.kind !== 'added') at++;
            if (l.kind !== 'removed') out.push(l.text);
          }
        }
        out.push(...old.slice(at));
        assert.equal(out.join('\n'), b.replace(/\n$/, ''));
      }),
      { numRuns: 300 },
    );
  });

  const callArb = fc.record({
    id: fc.string({ maxLength: 3 }),
    name: fc.constantFrom('a', 'b', 'c'),
    input: fc.dictionary(fc.constantFrom('k', 'j', 'l'), fc.integer({ min: 0, max: 2 })),
    needsApproval: fc.boolean(),
  });

  it('every call is in exactly one row on its side; same rows have equal arguments, different rows the same tool', () => {
    fc.assert(
      fc.property(fc.array(callArb, { maxLength: 8 }), fc.array(callArb, { maxLength: 8 }), (rec, cf) => {
        const rows = compareToolCalls(rec, cf);
        assert.deepEqual(
          rows.flatMap((r) => (r.recorded ? [r.recorded.index] : [])).sort((x, y) => x - y),
          rec.map((_, i) => i),
        );
        assert.deepEqual(
          rows.flatMap((r) => (r.counterfactual ? [r.counterfactual.index] : [])),
          cf.map((_, i) => i),
          'rows follow the counterfactual order',
        );
        for (const r of rows) {
          if (r.kind === 'same') assert.equal(r.recorded?.args, r.counterfactual?.args);
          if (r.kind === 'different') assert.notEqual(r.recorded?.args, r.counterfactual?.args);
          if (r.kind === 'same' || r.kind === 'different') assert.equal(rec[r.recorded?.index ?? -1]?.name, cf[r.counterfactual?.index ?? -1]?.name);
        }
        const reversedKeys = cf.map((c) => ({ ...c, input: Object.fromEntries(Object.entries(c.input).reverse()) }));
        assert.deepEqual(
          compareToolCalls(rec, reversedKeys).map((r) => r.kind),
          rows.map((r) => r.kind),
          'key order never matters',
        );
      }),
      { numRuns: 300 },
    );
  });

  it('any text in any cell keeps every Markdown table whole', () => {
    const nastyArb = fc.string({ maxLength: 40, unit: fc.constantFrom('|', '`', '\\', '\n', '\r', '<', '>', '*', '_', '[', ']', '~', '&', 'a', ' ', '#', '-') });
    fc.assert(
      fc.property(nastyArb, nastyArb, nastyArb, (tool, reason, arg) => {
        const t = turnReport(side({ toolCalls: [call('r', tool || 't', { arg }, { needsApproval: true })] }), side({ reply: arg, toolCalls: [] }));
        const md = reportMarkdown(buildReport({ replayId: 'r', alternative: {} }, [t, turnReport({ turnId: 'n', replayable: false, reason: reason || 'r' })]));
        const all = tables(md);
        assert.equal(all.length, 7);
        for (const tb of all) for (const r of tb) assert.equal(r.length, tb[0]?.length);
        const html = marked.parse(md, { async: false, gfm: true });
        for (const tb of html.match(/<table>[\s\S]*?<\/table>/g) ?? []) assert.ok(!/<(em|strong|del|a|code)[ >]/.test(tb), tb);
      }),
      { numRuns: 200 },
    );
  });
});
