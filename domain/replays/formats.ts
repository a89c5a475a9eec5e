/**
 * A replay's report as Markdown and JSONL: the report the replay workflow keeps (the JSON of
 * common/replays.ts, built by domain/replays/sides.ts as each turn is replayed) read into the
 * report module's terms (sides.ts `sideInput`, the same reading the kept comparison was made
 * through) and rendered by it (domain/replays/report.ts: `turnReport`, the diff, the tool calls
 * compared by canonical arguments, approvals flipped, sums and medians). The JSON format is the
 * kept report itself.
 */
import { ReplayReportSchema, type ReplayTurnReport as KeptTurn } from '../../common/replays.js';
import { buildReport, reportJsonl, reportMarkdown, turnReport, type ReplayReport } from './report.js';
import { sideInput } from './sides.js';

/** One kept turn in the report module's terms. */
function reportTurn(t: KeptTurn) {
  if (!t.replayable || !t.recorded) return turnReport({ turnId: t.turnId, replayable: false, reason: t.reason ?? 'not replayable' });
  if (t.error || !t.counterfactual) return turnReport({ turnId: t.turnId, replayable: false, reason: `the replay failed: ${t.error ?? 'no counterfactual side'}` });
  const approvals = t.approvals ?? [];
  return turnReport(sideInput(t.turnId, t.recorded, approvals, 'recorded'), sideInput(t.turnId, t.counterfactual, approvals, 'counterfactual'));
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
