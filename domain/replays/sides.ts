/**
 * A replayed turn's two sides (recorded, counterfactual) as the kept report holds them, and the
 * batch sum the replay workflow saves. Pure.
 *
 * One comparison of a turn: the report module's (domain/replays/report.ts `turnReport`: the
 * line diff, tool calls paired by canonical arguments, approvals flipped, divergences).
 * `compareSides` reads a kept turn's sides into its terms (`sideInput`, also what the Markdown
 * and JSONL forms read the kept report through, domain/replays/formats.ts) and keeps its verdicts
 * in the kept shape (common/replays.ts ReplayTurnReportSchema).
 */
import { canonicalJson, type ReplayApproval, type ReplaySide, type ReplaySummary, type ReplayTurnReport } from '../../common/replays.js';
import { turnReport, type ReplayTurnInput } from './report.js';

function parsedArgs(args: string): unknown {
  try {
    return JSON.parse(args);
  } catch {
    return args;
  }
}

/** The same call by tool and canonical arguments (the kept args are canonicalJson; a hand-written one is made so). */
const sameCall = (a: { tool: string; args: string }, b: { name: string; args: string }) => a.tool === b.name && canonicalJson(parsedArgs(a.args)) === canonicalJson(parsedArgs(b.args));

/**
 * One kept side in the report module's terms. Approvals: the counterfactual call's verdict is
 * its own (by call id); the recorded call waited when the replay found it in the record waiting
 * (`recordedWaited` of the approval of the same tool and canonical arguments).
 */
export function sideInput(turnId: string, s: ReplaySide, approvals: readonly ReplayApproval[], which: 'recorded' | 'counterfactual'): ReplayTurnInput {
  return {
    turnId,
    model: s.model,
    outcome: s.outcome,
    reply: s.reply === '' ? null : s.reply,
    toolCalls: s.toolCalls.map((c) => {
      const needsApproval = which === 'recorded' ? approvals.some((a) => a.recordedWaited === true && sameCall(a, c)) : approvals.find((x) => x.toolCallId === c.id)?.verdict === 'would-wait';
      return {
        id: c.id,
        name: c.name,
        input: parsedArgs(c.args),
        needsApproval,
        ...(which === 'counterfactual' && (c.answer === 'recorded' || c.answer === 'simulated') ? { result: c.answer } : {}),
        ...(c.answer === 'refused' ? { error: 'refused by the turn loop (invalid input or unknown tool)' } : {}),
      };
    }),
    usage: s.usage,
    costMicros: s.cost === undefined ? null : Math.round(s.cost * 1_000_000),
    latencyMs: s.latencyMs ?? null,
  };
}

/** The comparison of one turn's sides (the report module's), kept: reply changed, tool calls same/different/new/dropped, approvals, divergences. */
export function compareSides(base: { turnId: string; sessionId?: string }, recorded: ReplaySide, counterfactual: ReplaySide, approvals: ReplayApproval[]): ReplayTurnReport {
  const r = turnReport(sideInput(base.turnId, recorded, approvals, 'recorded'), sideInput(base.turnId, counterfactual, approvals, 'counterfactual'));
  if (!r.replayable) throw new Error(`compareSides: turn ${base.turnId} has two sides but was not compared: ${r.reason}`);
  const of = (kind: 'same' | 'different' | 'new' | 'dropped') => r.toolCalls.filter((c) => c.kind === kind).map((c) => c.tool);
  return {
    turnId: base.turnId,
    ...(base.sessionId ? { sessionId: base.sessionId } : {}),
    replayable: true,
    recorded,
    counterfactual,
    replyChanged: r.changes.reply,
    toolCalls: { same: of('same'), different: of('different'), new: of('new'), dropped: of('dropped') },
    approvals,
    divergences: counterfactual.toolCalls.filter((c) => c.answer === 'simulated').map((c) => `${c.name} ${c.args}: not in the record, simulated with no result`),
    changed: r.outcomeChanged,
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
