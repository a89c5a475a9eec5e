/**
 * A replay's report as Markdown and JSONL: the report the replay workflow keeps (the JSON of
 * common/replays.ts, built by domain/replays/sides.ts as each turn is replayed) read into the
 * report module's terms (domain/replays/report.ts: each turn's two sides, then `turnReport`, the
 * diff, the tool calls compared by canonical arguments, approvals flipped, sums and medians) and
 * rendered by it. The JSON format is the kept report itself.
 */
import { ReplayReportSchema, type ReplayApproval, type ReplaySide, type ReplayTurnReport as KeptTurn } from '../../common/replays.js';
import { buildReport, reportJsonl, reportMarkdown, turnReport, type ReplayReport, type ReplayTurnInput } from './report.js';

function parsedArgs(args: string): unknown {
  try {
    return JSON.parse(args);
  } catch {
    return args;
  }
}

function side(turnId: string, s: ReplaySide, approvals: ReplayApproval[], which: 'recorded' | 'counterfactual'): ReplayTurnInput {
  return {
    turnId,
    model: s.model,
    outcome: s.outcome,
    reply: s.reply === '' ? null : s.reply,
    toolCalls: s.toolCalls.map((c) => {
      const a = approvals.find((x) => x.toolCallId === c.id);
      const needsApproval = which === 'recorded' ? a?.recordedWaited === true : a?.verdict === 'would-wait';
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

/** One kept turn in the report module's terms. */
function reportTurn(t: KeptTurn) {
  if (!t.replayable || !t.recorded) return turnReport({ turnId: t.turnId, replayable: false, reason: t.reason ?? 'not replayable' });
  if (t.error || !t.counterfactual) return turnReport({ turnId: t.turnId, replayable: false, reason: `the replay failed: ${t.error ?? 'no counterfactual side'}` });
  const approvals = t.approvals ?? [];
  return turnReport(side(t.turnId, t.recorded, approvals, 'recorded'), side(t.turnId, t.counterfactual, approvals, 'counterfactual'));
}

/** The kept report (unknown: read from its blob) as the report module's report. */
export function renderedReport(kept: unknown): ReplayReport {
  const r = ReplayReportSchema.parse(kept);
  return buildReport({ replayId: r.replayId, ...(r.startedAt ? { createdAt: r.startedAt } : {}), ...(r.selection ? { selection: r.selection } : {}), alternative: r.alternative }, r.turns.map(reportTurn));
}

/** The formats the replay service serves besides JSON. */
export const replayReportFormats = {
  markdown: (kept: unknown): string => reportMarkdown(renderedReport(kept)),
  jsonl: (kept: unknown): string => reportJsonl(renderedReport(kept)),
};
