/**
 * A kept replay report (common/replays.ts, as the replay workflow builds it with
 * domain/replays/sides.ts) rendered as Markdown and JSONL through the report module
 * (domain/replays/formats.ts): the changed reply's diff, the tool calls compared, the approval
 * that flipped, the turn that could not be replayed with its reason, and the sums.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ReplayApproval, ReplayReport, ReplaySide } from '../../common/replays.js';
import { renderedReport, replayReportFormats } from '../../domain/replays/formats.js';
import { compareSides, summarise } from '../../domain/replays/sides.js';

const usage = (input: number, output: number) => ({ input, output, total: input + output });

function kept(): ReplayReport {
  const recorded: ReplaySide = {
    reply: 'Deployed the site.\nAll checks passed.',
    outcome: 'replied',
    model: 'openai-compatible:recorded',
    toolCalls: [{ id: 'c1', name: 'http_request', args: '{"method":"POST","url":"http://127.0.0.1:9/deploy"}', result: 'deployed' }],
    usage: usage(100, 20),
    cost: 0.0012,
    latencyMs: 800,
    steps: 2,
  };
  const counterfactual: ReplaySide = {
    reply: 'Deployed the site.\nOne check failed.',
    outcome: 'replied',
    model: 'openai-compatible:other',
    toolCalls: [
      { id: 'c1', name: 'http_request', args: '{"url":"http://127.0.0.1:9/deploy","method":"POST"}', answer: 'recorded', result: 'deployed' },
      { id: 'c2', name: 'save_note', args: '{"text":"deployed"}', answer: 'simulated' },
    ],
    usage: usage(90, 30),
    latencyMs: 600,
    steps: 3,
  };
  const approvals: ReplayApproval[] = [{ toolCallId: 'c1', tool: 'http_request', args: recorded.toolCalls[0]!.args, verdict: 'would-run', recordedWaited: true, continuedAs: 'ran' }];
  const turns = [compareSides({ turnId: 'turn-1', sessionId: 'session:http:default:room' }, recorded, counterfactual, approvals), { turnId: 'turn-2', replayable: false, reason: 'its blobs were pruned' }];
  return { replayId: 'rp0123456789', status: 'done', alternative: { model: 'openai-compatible:other', approvalTools: [] }, startedAt: '2026-11-28T12:00:00.000Z', turns, summary: summarise(turns) };
}

describe('replay report formats', () => {
  it('reads the kept report into the report module: the diff, tool calls by canonical arguments, the flipped approval, the unreplayable turn', () => {
    const r = renderedReport(kept());
    assert.equal(r.replayId, 'rp0123456789');
    assert.equal(r.summary.turns.total, 2);
    assert.equal(r.summary.turns.replayable, 1);
    assert.equal(r.summary.turns.notReplayable, 1);
    assert.equal(r.summary.turns.replyChanged, 1);
    assert.equal(r.summary.turns.approvalsFlipped, 1);
    assert.equal(r.summary.toolCalls.same, 1, 'the same call with its keys in another order');
    assert.equal(r.summary.toolCalls.new, 1);
    assert.equal(r.summary.turns.diverged, 1, 'the simulated call');
  });

  it('renders Markdown with the diff and the reason, and JSONL a line per turn then the summary', () => {
    const md = replayReportFormats.markdown(kept());
    assert.match(md, /-All checks passed\./);
    assert.match(md, /\+One check failed\./);
    assert.match(md, /its blobs were pruned/);
    const lines = replayReportFormats.jsonl(kept()).trim().split('\n').map((l) => JSON.parse(l) as { type: string; turnId?: string });
    assert.deepEqual(lines.map((l) => l.type), ['turn', 'turn', 'summary']);
    assert.deepEqual(lines.slice(0, 2).map((l) => l.turnId).sort(), ['turn-1', 'turn-2']);
  });

  it('refuses what is not a kept report', () => {
    assert.throws(() => replayReportFormats.markdown({ replayId: 'x' }));
  });
});
