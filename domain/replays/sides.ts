/**
 * A replayed turn's two sides (recorded, counterfactual) as the report shows them, and the
 * minimal per-turn comparison and batch sum the replay workflow saves. Pure.
 *
 * The report kept as JSON is built here; its Markdown and JSONL forms read it into the report
 * module's terms (domain/replays/formats.ts, domain/replays/report.ts: the line diff, tool calls
 * by canonical arguments, approvals flipped, medians). Two comparisons of one turn: to be made one.
 */
import type { ReplayApproval, ReplaySide, ReplaySummary, ReplayTurnReport } from '../../common/replays.js';

const key = (c: { name: string; args: string }) => `${c.name} ${c.args}`;

/** The comparison of one turn's sides: reply changed, tool calls same/different/new/dropped, approvals, divergences. */
export function compareSides(
  base: { turnId: string; sessionId?: string },
  recorded: ReplaySide,
  counterfactual: ReplaySide,
  approvals: ReplayApproval[],
): ReplayTurnReport {
  const rec = recorded.toolCalls.map(key);
  const cf = counterfactual.toolCalls.map(key);
  const recNames = recorded.toolCalls.map((c) => c.name);
  const same: string[] = [];
  const different: string[] = [];
  const added: string[] = [];
  const left = [...rec];
  const leftNames = [...recNames];
  for (const c of counterfactual.toolCalls) {
    const i = left.indexOf(key(c));
    if (i >= 0) {
      same.push(c.name);
      left.splice(i, 1);
      leftNames.splice(i, 1);
      continue;
    }
    // the same tool with other arguments: different; a tool the record did not call: new
    const j = leftNames.indexOf(c.name);
    if (j >= 0) {
      different.push(c.name);
      left.splice(j, 1);
      leftNames.splice(j, 1);
    } else added.push(c.name);
  }
  const replyChanged = recorded.reply !== counterfactual.reply;
  const divergences = counterfactual.toolCalls.filter((c) => c.answer === 'simulated').map((c) => `${c.name} ${c.args}: not in the record, simulated with no result`);
  const flipped = approvals.some((a) => a.recordedWaited !== undefined && a.recordedWaited !== (a.verdict === 'would-wait'));
  const toolsChanged = different.length + added.length + leftNames.length > 0 || cf.length !== rec.length;
  return {
    turnId: base.turnId,
    ...(base.sessionId ? { sessionId: base.sessionId } : {}),
    replayable: true,
    recorded,
    counterfactual,
    replyChanged,
    toolCalls: { same, different, new: added, dropped: leftNames },
    approvals,
    divergences,
    changed: replyChanged || toolsChanged || flipped || recorded.outcome !== counterfactual.outcome,
  };
}

const ZERO = { input: 0, output: 0, total: 0 };

/** The batch's sum: turns, how many changed and how, tokens and cost of both sides. */
export function summarise(turns: ReplayTurnReport[]): ReplaySummary {
  const sum = (side: 'recorded' | 'counterfactual') =>
    turns.reduce((u, t) => {
      const s = t[side]?.usage ?? ZERO;
      return { input: u.input + s.input, output: u.output + s.output, total: u.total + s.total };
    }, ZERO);
  const cost = (side: 'recorded' | 'counterfactual') => turns.reduce((n, t) => n + (t[side]?.cost ?? 0), 0);
  const anyCost = turns.some((t) => t.recorded?.cost !== undefined || t.counterfactual?.cost !== undefined);
  return {
    turns: turns.length,
    replayed: turns.filter((t) => t.replayable && !t.error).length,
    notReplayable: turns.filter((t) => !t.replayable).length,
    changed: turns.filter((t) => t.changed === true).length,
    replyChanged: turns.filter((t) => t.replyChanged === true).length,
    toolCallsChanged: turns.filter((t) => t.toolCalls && t.toolCalls.different.length + t.toolCalls.new.length + t.toolCalls.dropped.length > 0).length,
    approvalsFlipped: turns.reduce((n, t) => n + (t.approvals ?? []).filter((a) => a.recordedWaited !== undefined && a.recordedWaited !== (a.verdict === 'would-wait')).length, 0),
    failed: turns.filter((t) => t.error !== undefined).length,
    usage: { recorded: sum('recorded'), counterfactual: sum('counterfactual') },
    ...(anyCost ? { cost: { recorded: cost('recorded'), counterfactual: cost('counterfactual') } } : {}),
  };
}
