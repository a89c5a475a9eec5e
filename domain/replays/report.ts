/**
 * The counterfactual replay's report (issue 36): pure functions, no I/O, no clock.
 *
 * In: for each replayed turn, what the record says (the recorded side) and what the replay
 * produced (the counterfactual side), each as a `ReplayTurnSide`; or a `NotReplayable` with its
 * reason. Out: per turn a `ReplayTurnReport` (the replies and their diff, the tool calls compared,
 * the approvals that would have been asked or skipped, the divergences, tokens, cost and
 * latency of both with deltas) and for the batch a `ReplaySummary`; rendered as JSON (the object,
 * checked by `ReplayReportSchema`), Markdown and JSONL. The same input always renders the same
 * bytes (golden tests).
 *
 * Bounds: every reply, argument and diff the report carries is capped (`REPORT_LIMITS`), and the
 * line diff is bounded by an edit-length limit and a time box (`DIFF_LIMITS`), so a megabyte
 * reply or two unrelated texts cost a bounded amount of time and report space; what was cut is
 * said in the report's notes.
 */
import { diffWordsWithSpace, structuredPatch } from 'diff';
import { z } from 'zod';
import { formatMoney } from '../budgets/prices.js';
import { canonicalJson, sortKeys } from '../../common/replays.js';

// =====================================================================================
// Limits
// =====================================================================================

export const DIFF_LIMITS = {
  /** Each side is diffed up to this many characters (the rest is not compared line by line). */
  maxInputChars: 200_000,
  /** Each side is diffed up to this many lines. */
  maxInputLines: 5_000,
  /** Myers' edit distance the line diff gives up at (deterministic bound on its work). */
  maxEditLength: 2_000,
  /** Wall-clock time box of the line diff, a last guard behind maxEditLength. */
  timeoutMs: 2_000,
  /** Lines (context, added and removed) the report keeps over all hunks. */
  maxHunkLines: 1_000,
  /** Context lines around each change. */
  context: 3,
  /** A word diff is added when both replies are one line of at most this many characters. */
  wordDiffMaxChars: 500,
} as const;

export const REPORT_LIMITS = {
  /** Characters of each reply the report carries. */
  maxReplyChars: 100_000,
  /** Characters of a tool call's canonical arguments the report carries. */
  maxArgsChars: 4_000,
  /** Characters of a Markdown table cell. */
  maxCellChars: 500,
} as const;

// =====================================================================================
// Input: the two sides of a turn
// =====================================================================================

export const ReplayTokenUsageSchema = z.object({
  input: z.number().int().nonnegative(),
  output: z.number().int().nonnegative(),
  total: z.number().int().nonnegative(),
});
export type ReplayTokenUsage = z.infer<typeof ReplayTokenUsageSchema>;

/** One tool call of a turn, as recorded or as the replay made it. */
export const ReplayToolCallSchema = z.object({
  /** The model's tool call id. */
  id: z.string(),
  /** The tool's name. */
  name: z.string().min(1),
  /** The arguments as the model gave them (compared by `canonicalJson`). */
  input: z.unknown(),
  /** The approval policy asked an admin first ("would wait"); false: it ran without ("would run"). */
  needsApproval: z.boolean().default(false),
  /** Recorded side: how the approval it waited for was settled. */
  decision: z.enum(['approved', 'denied', 'timeout', 'cancelled']).optional(),
  /** Counterfactual side: the result came from the record, or the call was simulated with no result (a divergence). */
  result: z.enum(['recorded', 'simulated']).optional(),
  /** The input failed validation (or the tool is unknown): the error the model was given. */
  error: z.string().optional(),
});
export type ReplayToolCall = z.input<typeof ReplayToolCallSchema>;
type ToolCall = z.output<typeof ReplayToolCallSchema>;

/** One side of a replayed turn: the record, or the replay's run of it. */
export const ReplayTurnSideSchema = z.object({
  turnId: z.string().min(1),
  replayable: z.literal(true).optional(),
  /** The conversation (for the report's reader), when known. */
  chatId: z.string().optional(),
  /** When the recorded turn started (ISO), when known. */
  at: z.string().optional(),
  /** The model that answered. */
  model: z.string().optional(),
  /** The turn's outcome kind (TurnOutcome: replied, budget-exhausted, budget-refused, not-configured, failed; or cancelled). */
  outcome: z.string().min(1),
  /** The reply delivered (recorded) or captured (counterfactual); null: none. */
  reply: z.string().nullable(),
  /** The tool calls in the order the model made them. */
  toolCalls: z.array(ReplayToolCallSchema),
  usage: ReplayTokenUsageSchema,
  /** Micro-USD; null: no price known for the model. */
  costMicros: z.number().nonnegative().nullable(),
  /** Wall-clock milliseconds of the turn; null: not known. */
  latencyMs: z.number().nonnegative().nullable(),
});
export type ReplayTurnSide = z.input<typeof ReplayTurnSideSchema>;
type Side = z.output<typeof ReplayTurnSideSchema>;

/** A turn the replay could not run, with why (e.g. its blobs were pruned). */
export const NotReplayableSchema = z.object({
  turnId: z.string().min(1),
  replayable: z.literal(false),
  reason: z.string().min(1),
  chatId: z.string().optional(),
  at: z.string().optional(),
});
export type NotReplayable = z.infer<typeof NotReplayableSchema>;

export const ReplayTurnInputSchema = z.union([NotReplayableSchema, ReplayTurnSideSchema]);
export type ReplayTurnInput = z.input<typeof ReplayTurnInputSchema>;

// =====================================================================================
// Output schemas
// =====================================================================================

export const DiffLineSchema = z.object({ kind: z.enum(['context', 'added', 'removed']), text: z.string() });
export type DiffLine = z.infer<typeof DiffLineSchema>;

export const DiffHunkSchema = z.object({
  recordedStart: z.number().int().nonnegative(),
  recordedLines: z.number().int().nonnegative(),
  counterfactualStart: z.number().int().nonnegative(),
  counterfactualLines: z.number().int().nonnegative(),
  lines: z.array(DiffLineSchema),
});
export type DiffHunk = z.infer<typeof DiffHunkSchema>;

export const WordPartSchema = z.object({ kind: z.enum(['same', 'added', 'removed']), text: z.string() });
export type WordPart = z.infer<typeof WordPartSchema>;

export const TextDiffSchema = z.object({
  identical: z.boolean(),
  /** Lines added and removed over the whole diff (before hunks were capped). */
  added: z.number().int().nonnegative(),
  removed: z.number().int().nonnegative(),
  hunks: z.array(DiffHunkSchema),
  /** Short single-line replies: the word-level diff. */
  words: z.array(WordPartSchema).optional(),
  /** What was capped, cut or time-boxed. */
  notes: z.array(z.string()),
});
export type TextDiff = z.infer<typeof TextDiffSchema>;

export const ApprovalModeSchema = z.enum(['would wait', 'would run']);
export type ApprovalMode = z.infer<typeof ApprovalModeSchema>;

const DecisionSchema = z.enum(['approved', 'denied', 'timeout', 'cancelled']);

const CallSideSchema = z.object({
  id: z.string(),
  /** Position in its side's list of calls (0-based). */
  index: z.number().int().nonnegative(),
  /** `canonicalJson` of the arguments (capped at REPORT_LIMITS.maxArgsChars). */
  args: z.string(),
  approval: ApprovalModeSchema,
  error: z.string().optional(),
});

export const ToolCallComparisonSchema = z.object({
  kind: z.enum(['same', 'different', 'new', 'dropped']),
  tool: z.string(),
  recorded: CallSideSchema.extend({ decision: DecisionSchema.optional() }).optional(),
  counterfactual: CallSideSchema.extend({ result: z.enum(['recorded', 'simulated']).optional() }).optional(),
});
export type ToolCallComparison = z.infer<typeof ToolCallComparisonSchema>;

export const ApprovalRowSchema = z.object({
  tool: z.string(),
  recordedCallId: z.string().optional(),
  counterfactualCallId: z.string().optional(),
  /** null: the call was not made on that side. */
  recorded: ApprovalModeSchema.nullable(),
  counterfactual: ApprovalModeSchema.nullable(),
  /** The same call (paired `same` or `different`) waits on one side and runs on the other. */
  flipped: z.boolean(),
  /** How the recorded approval was settled, when it waited. */
  recordedDecision: DecisionSchema.optional(),
});
export type ApprovalRow = z.infer<typeof ApprovalRowSchema>;

export const DivergenceSchema = z.object({ id: z.string(), index: z.number().int().nonnegative(), tool: z.string(), args: z.string() });
export type Divergence = z.infer<typeof DivergenceSchema>;

export const TurnMetricsSchema = z.object({
  tokens: ReplayTokenUsageSchema,
  costMicros: z.number().nullable(),
  latencyMs: z.number().nullable(),
});
export type TurnMetrics = z.infer<typeof TurnMetricsSchema>;

const ReplyTextSchema = z.object({ text: z.string().nullable(), chars: z.number().int().nonnegative(), truncated: z.boolean() });

export const ReplayableTurnReportSchema = z.object({
  turnId: z.string(),
  replayable: z.literal(true),
  chatId: z.string().optional(),
  at: z.string().optional(),
  model: z.object({ recorded: z.string().optional(), counterfactual: z.string().optional() }),
  outcome: z.object({ recorded: z.string(), counterfactual: z.string() }),
  /** Reply differs, or a tool call set differs, or an approval flipped, or the outcome kind differs. */
  outcomeChanged: z.boolean(),
  changes: z.object({ reply: z.boolean(), toolCalls: z.boolean(), approvals: z.boolean(), outcome: z.boolean() }),
  reply: z.object({ recorded: ReplyTextSchema, counterfactual: ReplyTextSchema, diff: TextDiffSchema }),
  toolCalls: z.array(ToolCallComparisonSchema),
  approvals: z.array(ApprovalRowSchema),
  /** Counterfactual calls simulated with no recorded result. */
  divergences: z.array(DivergenceSchema),
  metrics: z.object({
    recorded: TurnMetricsSchema,
    counterfactual: TurnMetricsSchema,
    /** counterfactual minus recorded; null where either side is unknown. */
    delta: z.object({
      tokens: z.object({ input: z.number().int(), output: z.number().int(), total: z.number().int() }),
      costMicros: z.number().nullable(),
      latencyMs: z.number().nullable(),
    }),
  }),
});
export type ReplayableTurnReport = z.infer<typeof ReplayableTurnReportSchema>;

export const NotReplayableTurnReportSchema = z.object({
  turnId: z.string(),
  replayable: z.literal(false),
  reason: z.string(),
  chatId: z.string().optional(),
  at: z.string().optional(),
});

export const ReplayTurnReportSchema = z.discriminatedUnion('replayable', [ReplayableTurnReportSchema, NotReplayableTurnReportSchema]);
export type ReplayTurnReport = z.infer<typeof ReplayTurnReportSchema>;

const StatSchema = z.object({ sum: z.number().nullable(), median: z.number().nullable(), known: z.number().int().nonnegative() });
const SidesStatSchema = z.object({ recorded: StatSchema, counterfactual: StatSchema });

export const ReplaySummarySchema = z.object({
  turns: z.object({
    total: z.number().int().nonnegative(),
    replayable: z.number().int().nonnegative(),
    notReplayable: z.number().int().nonnegative(),
    outcomeChanged: z.number().int().nonnegative(),
    replyChanged: z.number().int().nonnegative(),
    toolCallsChanged: z.number().int().nonnegative(),
    approvalsFlipped: z.number().int().nonnegative(),
    diverged: z.number().int().nonnegative(),
  }),
  /** Each turn that could not be replayed, with why. */
  notReplayable: z.array(z.object({ turnId: z.string(), reason: z.string() })),
  /** Not-replayable turns counted by reason (reasons in order of first appearance). */
  reasons: z.array(z.object({ reason: z.string(), count: z.number().int().positive() })),
  toolCalls: z.object({
    same: z.number().int().nonnegative(),
    different: z.number().int().nonnegative(),
    new: z.number().int().nonnegative(),
    dropped: z.number().int().nonnegative(),
  }),
  approvals: z.object({
    /** Calls whose approval flipped. */
    flipped: z.number().int().nonnegative(),
    /** Of those: now asked (recorded ran without approval). */
    nowAsked: z.number().int().nonnegative(),
    /** Of those: now skipped (recorded waited). */
    nowSkipped: z.number().int().nonnegative(),
  }),
  divergences: z.number().int().nonnegative(),
  /** Total tokens per turn. */
  tokens: SidesStatSchema,
  costMicros: SidesStatSchema,
  latencyMs: SidesStatSchema,
});
export type ReplaySummary = z.infer<typeof ReplaySummarySchema>;

export const ReplayReportSchema = z.object({
  replayId: z.string().min(1),
  /** When the replay was started (ISO), as given by the caller (the report reads no clock). */
  createdAt: z.string().optional(),
  selection: z.unknown().optional(),
  alternative: z.record(z.string(), z.unknown()),
  summary: ReplaySummarySchema,
  turns: z.array(ReplayTurnReportSchema),
});
export type ReplayReport = z.infer<typeof ReplayReportSchema>;

// =====================================================================================
// canonicalJson
// =====================================================================================

/**
 * The canonical text of a tool call's arguments (common/replays.ts, the one the replay's
 * answering matches calls by): JSON with every object's keys sorted, arrays in order, what JSON
 * drops dropped, `toJSON` applied. Two calls have the same arguments exactly when their
 * canonical texts are equal.
 */
export { canonicalJson };

// =====================================================================================
// textDiff
// =====================================================================================

export interface TextDiffOptions {
  /** Overrides of DIFF_LIMITS (tests lower them). */
  limits?: Partial<{ [K in keyof typeof DIFF_LIMITS]: number }>;
}

function capText(text: string, maxChars: number, maxLines: number): { text: string; cut: boolean } {
  let out = text.length > maxChars ? text.slice(0, maxChars) : text;
  let at = -1;
  for (let n = 0; n < maxLines; n++) {
    at = out.indexOf('\n', at + 1);
    if (at < 0) break;
  }
  if (at >= 0 && at < out.length - 1) out = out.slice(0, at + 1);
  return { text: out, cut: out.length < text.length };
}

function withFinalNewline(s: string): string {
  return s === '' || s.endsWith('\n') ? s : `${s}\n`;
}

function splitLines(s: string): string[] {
  if (s === '') return [];
  const lines = s.split('\n');
  if (lines.at(-1) === '') lines.pop();
  return lines;
}

/**
 * A line diff of two replies (null: no reply, compared as empty text): hunks of context, added
 * and removed lines (`structuredPatch` of jsdiff, 3 lines of context), line counts, and for two
 * short single-line replies a word diff. Bounded: each side is diffed up to
 * DIFF_LIMITS.maxInputChars / maxInputLines; past maxEditLength edits (or the time box) the
 * diff is given as a whole replacement; hunks keep at most maxHunkLines lines. Each cut is a note.
 * `identical` compares the whole texts.
 */
export function textDiff(recorded: string | null, counterfactual: string | null, opts: TextDiffOptions = {}): TextDiff {
  const lim = { ...DIFF_LIMITS, ...opts.limits };
  const a = recorded ?? '';
  const b = counterfactual ?? '';
  if (a === b && recorded === counterfactual) return { identical: true, added: 0, removed: 0, hunks: [], notes: [] };
  const notes: string[] = [];
  if (a === b) {
    notes.push(recorded === null ? 'The recorded turn had no reply; the counterfactual reply is empty.' : 'The counterfactual turn has no reply; the recorded reply was empty.');
    return { identical: false, added: 0, removed: 0, hunks: [], notes };
  }
  const ca = capText(a, lim.maxInputChars, lim.maxInputLines);
  const cb = capText(b, lim.maxInputChars, lim.maxInputLines);
  if (ca.cut || cb.cut) {
    notes.push(`Only the first ${lim.maxInputLines} lines and ${lim.maxInputChars} characters of each reply were compared line by line (recorded: ${a.length} characters, counterfactual: ${b.length}).`);
  }
  const oldText = withFinalNewline(ca.text);
  const newText = withFinalNewline(cb.text);
  let hunks: DiffHunk[] = [];
  if (oldText === newText) {
    notes.push(ca.cut || cb.cut ? 'The compared parts are the same; the replies differ further on.' : 'The replies differ only in a final line break.');
  } else {
    const patch = structuredPatch('recorded', 'counterfactual', oldText, newText, undefined, undefined, {
      context: lim.context,
      maxEditLength: lim.maxEditLength,
      timeout: lim.timeoutMs,
    });
    if (patch) {
      hunks = patch.hunks.map((h) => ({
        recordedStart: h.oldStart,
        recordedLines: h.oldLines,
        counterfactualStart: h.newStart,
        counterfactualLines: h.newLines,
        lines: h.lines
          .filter((l) => !l.startsWith('\\'))
          .map((l): DiffLine => ({ kind: l.startsWith('+') ? 'added' : l.startsWith('-') ? 'removed' : 'context', text: l.slice(1) })),
      }));
    } else {
      notes.push(`The replies differ in more than ${lim.maxEditLength} lines (or took longer than ${lim.timeoutMs} ms to compare): shown as a whole replacement.`);
      const oldLines = splitLines(oldText);
      const newLines = splitLines(newText);
      hunks = [
        {
          recordedStart: oldLines.length === 0 ? 0 : 1,
          recordedLines: oldLines.length,
          counterfactualStart: newLines.length === 0 ? 0 : 1,
          counterfactualLines: newLines.length,
          lines: [...oldLines.map((text): DiffLine => ({ kind: 'removed', text })), ...newLines.map((text): DiffLine => ({ kind: 'added', text }))],
        },
      ];
    }
  }
  let added = 0;
  let removed = 0;
  for (const h of hunks) {
    for (const l of h.lines) {
      if (l.kind === 'added') added++;
      else if (l.kind === 'removed') removed++;
    }
  }
  // cap the lines kept
  let kept = 0;
  let dropped = 0;
  const capped: DiffHunk[] = [];
  for (const h of hunks) {
    const room = lim.maxHunkLines - kept;
    if (room <= 0) {
      dropped += h.lines.length;
      continue;
    }
    if (h.lines.length > room) {
      capped.push({ ...h, lines: h.lines.slice(0, room) });
      dropped += h.lines.length - room;
      kept += room;
    } else {
      capped.push(h);
      kept += h.lines.length;
    }
  }
  if (dropped > 0) notes.push(`${dropped} more diff lines not shown (the report keeps ${lim.maxHunkLines}).`);
  const result: TextDiff = { identical: false, added, removed, hunks: capped, notes };
  const sa = a.replace(/\n$/, '');
  const sb = b.replace(/\n$/, '');
  if (!sa.includes('\n') && !sb.includes('\n') && sa.length <= lim.wordDiffMaxChars && sb.length <= lim.wordDiffMaxChars && sa !== sb) {
    const parts = diffWordsWithSpace(sa, sb);
    result.words = parts.map((p) => ({ kind: p.added ? 'added' : p.removed ? 'removed' : 'same', text: p.value }));
  }
  return result;
}

// =====================================================================================
// compareToolCalls
// =====================================================================================

function capArgs(canonical: string): string {
  const max = REPORT_LIMITS.maxArgsChars;
  return canonical.length > max ? `${canonical.slice(0, max)}… (${canonical.length - max} more characters)` : canonical;
}

const mode = (needsApproval: boolean): ApprovalMode => (needsApproval ? 'would wait' : 'would run');

function recordedSide(c: ToolCall, index: number, canon: string): NonNullable<ToolCallComparison['recorded']> {
  return {
    id: c.id,
    index,
    args: capArgs(canon),
    approval: mode(c.needsApproval),
    ...(c.error !== undefined ? { error: c.error } : {}),
    ...(c.decision !== undefined ? { decision: c.decision } : {}),
  };
}

function counterfactualSide(c: ToolCall, index: number, canon: string): NonNullable<ToolCallComparison['counterfactual']> {
  return {
    id: c.id,
    index,
    args: capArgs(canon),
    approval: mode(c.needsApproval),
    ...(c.error !== undefined ? { error: c.error } : {}),
    ...(c.result !== undefined ? { result: c.result } : {}),
  };
}

/**
 * Pairs the counterfactual calls with the recorded ones. First `same`: each counterfactual call,
 * in order, takes the first recorded call not yet taken with the same tool and the same
 * canonical arguments (wherever it stands: the replay answers it from the record). Then
 * `different`: the calls left of one tool are paired in order (the k-th left on one side with
 * the k-th left on the other: the same tool at the same place among its calls). The rest are
 * `new` (counterfactual only) and `dropped` (recorded only).
 * Rows follow the counterfactual order; a dropped call comes just before the first row whose
 * recorded call stood after it (the rest at the end), so the list reads like both turns.
 */
export function compareToolCalls(recorded: readonly ReplayToolCall[], counterfactual: readonly ReplayToolCall[]): ToolCallComparison[] {
  const rec = recorded.map((c) => ReplayToolCallSchema.parse(c));
  const cf = counterfactual.map((c) => ReplayToolCallSchema.parse(c));
  const recCanon = rec.map((c) => canonicalJson(c.input));
  const cfCanon = cf.map((c) => canonicalJson(c.input));
  const pairOf: (number | undefined)[] = cf.map(() => undefined);
  const kindOf: ('same' | 'different' | 'new')[] = cf.map(() => 'new');
  const taken = rec.map(() => false);
  cf.forEach((c, j) => {
    const i = rec.findIndex((r, k) => !taken[k] && r.name === c.name && recCanon[k] === cfCanon[j]);
    if (i >= 0) {
      taken[i] = true;
      pairOf[j] = i;
      kindOf[j] = 'same';
    }
  });
  cf.forEach((c, j) => {
    if (pairOf[j] !== undefined) return;
    const i = rec.findIndex((r, k) => !taken[k] && r.name === c.name);
    if (i >= 0) {
      taken[i] = true;
      pairOf[j] = i;
      kindOf[j] = 'different';
    }
  });
  const rows: ToolCallComparison[] = [];
  const emitted = rec.map(() => false);
  const emitDroppedBefore = (limit: number) => {
    for (let k = 0; k < limit; k++) {
      const r = rec[k];
      if (r && !taken[k] && !emitted[k]) {
        emitted[k] = true;
        rows.push({ kind: 'dropped', tool: r.name, recorded: recordedSide(r, k, recCanon[k] ?? 'null') });
      }
    }
  };
  cf.forEach((c, j) => {
    const i = pairOf[j];
    if (i !== undefined) emitDroppedBefore(i);
    const row: ToolCallComparison = { kind: kindOf[j] ?? 'new', tool: c.name, counterfactual: counterfactualSide(c, j, cfCanon[j] ?? 'null') };
    const r = i !== undefined ? rec[i] : undefined;
    if (r && i !== undefined) row.recorded = recordedSide(r, i, recCanon[i] ?? 'null');
    rows.push(row);
  });
  emitDroppedBefore(rec.length);
  // key order of each row fixed for golden output
  return rows.map((r) => ({ kind: r.kind, tool: r.tool, ...(r.recorded ? { recorded: r.recorded } : {}), ...(r.counterfactual ? { counterfactual: r.counterfactual } : {}) }));
}

// =====================================================================================
// turnReport
// =====================================================================================

function approvalsOf(rows: readonly ToolCallComparison[]): ApprovalRow[] {
  const out: ApprovalRow[] = [];
  for (const r of rows) {
    const recordedMode = r.recorded?.approval ?? null;
    const cfMode = r.counterfactual?.approval ?? null;
    if (recordedMode !== 'would wait' && cfMode !== 'would wait') continue;
    out.push({
      tool: r.tool,
      ...(r.recorded ? { recordedCallId: r.recorded.id } : {}),
      ...(r.counterfactual ? { counterfactualCallId: r.counterfactual.id } : {}),
      recorded: recordedMode,
      counterfactual: cfMode,
      flipped: recordedMode !== null && cfMode !== null && recordedMode !== cfMode,
      ...(r.recorded?.decision ? { recordedDecision: r.recorded.decision } : {}),
    });
  }
  return out;
}

function replyText(text: string | null): z.infer<typeof ReplyTextSchema> {
  if (text === null) return { text: null, chars: 0, truncated: false };
  const max = REPORT_LIMITS.maxReplyChars;
  return text.length > max ? { text: text.slice(0, max), chars: text.length, truncated: true } : { text, chars: text.length, truncated: false };
}

const deltaOf = (a: number | null, b: number | null): number | null => (a === null || b === null ? null : b - a);

function metricsOf(s: Side): TurnMetrics {
  return { tokens: { ...s.usage }, costMicros: s.costMicros, latencyMs: s.latencyMs };
}

function notReplayableReport(t: { turnId: string; chatId?: string | undefined; at?: string | undefined }, reason: string): ReplayTurnReport {
  return { turnId: t.turnId, replayable: false, reason, ...(t.chatId !== undefined ? { chatId: t.chatId } : {}), ...(t.at !== undefined ? { at: t.at } : {}) };
}

/**
 * One turn's report: the two replies and their diff, the tool calls compared, the approvals
 * (every call that would wait on either side; `flipped` when the same call waits on one side
 * and runs on the other), the divergences (counterfactual calls simulated with no recorded
 * result), tokens, cost and latency of both with deltas (counterfactual minus recorded), and
 * `outcomeChanged`. A recorded turn that is not replayable (or a counterfactual run that did not
 * happen or failed to replay) gives a not-replayable report with the reason.
 * Bad input (not a turn side) throws a ZodError.
 */
export function turnReport(recordedTurn: ReplayTurnInput, counterfactualTurn?: ReplayTurnInput): ReplayTurnReport {
  const recorded = ReplayTurnInputSchema.parse(recordedTurn);
  if (recorded.replayable === false) return notReplayableReport(recorded, recorded.reason);
  if (counterfactualTurn === undefined) return notReplayableReport(recorded, 'the turn was not replayed');
  const cf = ReplayTurnInputSchema.parse(counterfactualTurn);
  if (cf.turnId !== recorded.turnId) throw new Error(`turnReport: the counterfactual turn ${cf.turnId} is not the recorded turn ${recorded.turnId}`);
  if (cf.replayable === false) return notReplayableReport(recorded, cf.reason);

  const diff = textDiff(recorded.reply, cf.reply);
  const toolCalls = compareToolCalls(recorded.toolCalls, cf.toolCalls);
  const approvals = approvalsOf(toolCalls);
  const divergences: Divergence[] = toolCalls.flatMap((r) =>
    r.counterfactual?.result === 'simulated' ? [{ id: r.counterfactual.id, index: r.counterfactual.index, tool: r.tool, args: r.counterfactual.args }] : [],
  );
  const changes = {
    reply: !diff.identical,
    toolCalls: toolCalls.some((r) => r.kind !== 'same'),
    approvals: approvals.some((a) => a.flipped),
    outcome: recorded.outcome !== cf.outcome,
  };
  const rm = metricsOf(recorded);
  const cm = metricsOf(cf);
  const model = { ...(recorded.model !== undefined ? { recorded: recorded.model } : {}), ...(cf.model !== undefined ? { counterfactual: cf.model } : {}) };
  return {
    turnId: recorded.turnId,
    replayable: true,
    ...(recorded.chatId !== undefined ? { chatId: recorded.chatId } : {}),
    ...(recorded.at !== undefined ? { at: recorded.at } : {}),
    model,
    outcome: { recorded: recorded.outcome, counterfactual: cf.outcome },
    outcomeChanged: changes.reply || changes.toolCalls || changes.approvals || changes.outcome,
    changes,
    reply: { recorded: replyText(recorded.reply), counterfactual: replyText(cf.reply), diff },
    toolCalls,
    approvals,
    divergences,
    metrics: {
      recorded: rm,
      counterfactual: cm,
      delta: {
        tokens: { input: cm.tokens.input - rm.tokens.input, output: cm.tokens.output - rm.tokens.output, total: cm.tokens.total - rm.tokens.total },
        costMicros: deltaOf(rm.costMicros, cm.costMicros),
        latencyMs: deltaOf(rm.latencyMs, cm.latencyMs),
      },
    },
  };
}

// =====================================================================================
// batchSummary
// =====================================================================================

/** The median of the known values (the mean of the middle two for an even count); null when none. */
export function median(values: readonly number[]): number | null {
  if (values.length === 0) return null;
  const s = [...values].sort((x, y) => x - y);
  const mid = Math.floor(s.length / 2);
  const hi = s[mid] as number;
  return s.length % 2 === 1 ? hi : ((s[mid - 1] as number) + hi) / 2;
}

function stat(values: readonly (number | null)[]): z.infer<typeof StatSchema> {
  const known = values.filter((v): v is number => v !== null);
  return { sum: known.length === 0 ? null : known.reduce((x, y) => x + y, 0), median: median(known), known: known.length };
}

/** Counts and sums over a batch of turn reports (medians and sums over the replayable turns, unknown values left out). */
export function batchSummary(turnReports: readonly ReplayTurnReport[]): ReplaySummary {
  const reports = turnReports.map((t) => ReplayTurnReportSchema.parse(t));
  const ok = reports.filter((t): t is ReplayableTurnReport => t.replayable);
  const notOk = reports.flatMap((t) => (t.replayable ? [] : [{ turnId: t.turnId, reason: t.reason }]));
  const reasons: { reason: string; count: number }[] = [];
  for (const n of notOk) {
    const r = reasons.find((x) => x.reason === n.reason);
    if (r) r.count++;
    else reasons.push({ reason: n.reason, count: 1 });
  }
  const count = (pred: (t: ReplayableTurnReport) => boolean) => ok.filter(pred).length;
  const calls = { same: 0, different: 0, new: 0, dropped: 0 };
  const approvals = { flipped: 0, nowAsked: 0, nowSkipped: 0 };
  let divergences = 0;
  for (const t of ok) {
    for (const c of t.toolCalls) calls[c.kind]++;
    for (const a of t.approvals) {
      if (!a.flipped) continue;
      approvals.flipped++;
      if (a.counterfactual === 'would wait') approvals.nowAsked++;
      else approvals.nowSkipped++;
    }
    divergences += t.divergences.length;
  }
  return {
    turns: {
      total: reports.length,
      replayable: ok.length,
      notReplayable: notOk.length,
      outcomeChanged: count((t) => t.outcomeChanged),
      replyChanged: count((t) => t.changes.reply),
      toolCallsChanged: count((t) => t.changes.toolCalls),
      approvalsFlipped: count((t) => t.changes.approvals),
      diverged: count((t) => t.divergences.length > 0),
    },
    notReplayable: notOk,
    reasons,
    toolCalls: calls,
    approvals,
    divergences,
    tokens: { recorded: stat(ok.map((t) => t.metrics.recorded.tokens.total)), counterfactual: stat(ok.map((t) => t.metrics.counterfactual.tokens.total)) },
    costMicros: { recorded: stat(ok.map((t) => t.metrics.recorded.costMicros)), counterfactual: stat(ok.map((t) => t.metrics.counterfactual.costMicros)) },
    latencyMs: { recorded: stat(ok.map((t) => t.metrics.recorded.latencyMs)), counterfactual: stat(ok.map((t) => t.metrics.counterfactual.latencyMs)) },
  };
}

// =====================================================================================
// The report and its renderers
// =====================================================================================

export interface ReportMeta {
  replayId: string;
  createdAt?: string;
  selection?: unknown;
  alternative: Record<string, unknown>;
}

/** The whole report of a replay: its turn reports in the order given and their summary. */
export function buildReport(meta: ReportMeta, turnReports: readonly ReplayTurnReport[]): ReplayReport {
  return reportJson({
    replayId: meta.replayId,
    ...(meta.createdAt !== undefined ? { createdAt: meta.createdAt } : {}),
    ...(meta.selection !== undefined ? { selection: meta.selection } : {}),
    alternative: meta.alternative,
    summary: batchSummary(turnReports),
    turns: [...turnReports],
  });
}

/** The report as JSON: the object, checked by ReplayReportSchema (a report that does not fit throws a ZodError). */
export function reportJson(report: ReplayReport): ReplayReport {
  return ReplayReportSchema.parse(report);
}

/** One JSON line per turn (`type: "turn"`), then one summary line (`type: "summary"`); each line ends with a newline. */
export function reportJsonl(report: ReplayReport): string {
  const r = reportJson(report);
  const lines = r.turns.map((t) => JSON.stringify({ type: 'turn', replayId: r.replayId, ...t }));
  lines.push(
    JSON.stringify({
      type: 'summary',
      replayId: r.replayId,
      ...(r.createdAt !== undefined ? { createdAt: r.createdAt } : {}),
      ...(r.selection !== undefined ? { selection: r.selection } : {}),
      alternative: r.alternative,
      ...r.summary,
    }),
  );
  return lines.map((l) => `${l}\n`).join('');
}

// ---- Markdown ----

/**
 * Text for a Markdown table cell: the characters Markdown could read inside a cell (pipes,
 * backticks, emphasis, strikethrough, links, HTML, entities, backslashes) backslash-escaped, line breaks as `<br>`, capped.
 */
export function escapeCell(text: string, max: number = REPORT_LIMITS.maxCellChars): string {
  const cut = text.length > max ? `${text.slice(0, max)}…` : text;
  return cut.replace(/[\\`*_[\]<>|~&]/g, '\\$&').replace(/\r\n|\r|\n/g, '<br>');
}

/** A fenced block whose fence is longer than any backtick run in the text. */
export function fenced(text: string, info = ''): string {
  const longest = Math.max(0, ...[...text.matchAll(/`+/g)].map((m) => m[0].length));
  const fence = '`'.repeat(Math.max(3, longest + 1));
  const body = text.endsWith('\n') || text === '' ? text : `${text}\n`;
  return `${fence}${info}\n${body}${fence}`;
}

const int = (n: number) => String(n);
const signed = (n: number, f: (x: number) => string) => (n > 0 ? `+${f(n)}` : n < 0 ? `-${f(-n)}` : f(0));
const money = (m: number | null) => (m === null ? 'unknown' : formatMoney(m));
const ms = (m: number | null) => (m === null ? 'unknown' : `${Math.round(m)} ms`);
const tokens = (n: number | null) => (n === null ? 'unknown' : int(Math.round(n)));
const delta = (a: number | null, b: number | null, f: (x: number) => string) => (a === null || b === null ? '' : signed(b - a, f));
const moneyDelta = (a: number | null, b: number | null) => delta(a, b, (x) => formatMoney(x));
const msDelta = (a: number | null, b: number | null) => delta(a, b, (x) => `${Math.round(x)} ms`);
const tokDelta = (a: number | null, b: number | null) => delta(a, b, (x) => int(Math.round(x)));

function row(cells: readonly string[]): string {
  return `| ${cells.join(' | ')} |`;
}

function table(head: readonly string[], rows: readonly (readonly string[])[]): string {
  return [row(head), row(head.map(() => '---')), ...rows.map(row)].join('\n');
}

function diffBlock(d: TextDiff): string {
  const lines: string[] = [];
  for (const h of d.hunks) {
    lines.push(`@@ -${h.recordedStart},${h.recordedLines} +${h.counterfactualStart},${h.counterfactualLines} @@`);
    for (const l of h.lines) lines.push(`${l.kind === 'added' ? '+' : l.kind === 'removed' ? '-' : ' '}${l.text}`);
  }
  return fenced(lines.join('\n'), 'diff');
}

function wordLine(parts: readonly WordPart[]): string {
  return parts.map((p) => (p.kind === 'added' ? `{+${p.text}+}` : p.kind === 'removed' ? `[-${p.text}-]` : p.text)).join('');
}

function replyBlock(title: string, r: z.infer<typeof ReplyTextSchema>): string {
  if (r.text === null) return `**${title}**: no reply.`;
  const note = r.truncated ? `\n\n(the first ${r.text.length} of ${r.chars} characters)` : '';
  return `**${title}**\n\n${fenced(r.text, 'text')}${note}`;
}

function turnMarkdown(t: ReplayTurnReport): string {
  const head = `## Turn ${escapeCell(t.turnId)}`;
  const where = [t.chatId !== undefined ? `chat ${escapeCell(t.chatId)}` : '', t.at !== undefined ? escapeCell(t.at) : ''].filter(Boolean).join(', ');
  if (!t.replayable) return [head, where, `Not replayable: ${escapeCell(t.reason, 2_000)}`].filter(Boolean).join('\n\n');
  const changed = Object.entries(t.changes)
    .filter(([, v]) => v)
    .map(([k]) => ({ reply: 'reply', toolCalls: 'tool calls', approvals: 'approvals', outcome: 'outcome kind' })[k as keyof typeof t.changes]);
  const verdict = t.outcomeChanged ? `**Outcome changed** (${changed.join(', ')}).` : 'Outcome unchanged.';
  const { recorded: rm, counterfactual: cm } = t.metrics;
  const parts: string[] = [head];
  if (where) parts.push(where);
  parts.push(verdict);
  parts.push(
    table(
      ['', 'recorded', 'counterfactual', 'delta'],
      [
        ['model', escapeCell(t.model.recorded ?? 'unknown'), escapeCell(t.model.counterfactual ?? 'unknown'), ''],
        ['outcome', escapeCell(t.outcome.recorded), escapeCell(t.outcome.counterfactual), t.changes.outcome ? 'changed' : ''],
        ['tokens in', tokens(rm.tokens.input), tokens(cm.tokens.input), tokDelta(rm.tokens.input, cm.tokens.input)],
        ['tokens out', tokens(rm.tokens.output), tokens(cm.tokens.output), tokDelta(rm.tokens.output, cm.tokens.output)],
        ['tokens total', tokens(rm.tokens.total), tokens(cm.tokens.total), tokDelta(rm.tokens.total, cm.tokens.total)],
        ['cost', money(rm.costMicros), money(cm.costMicros), moneyDelta(rm.costMicros, cm.costMicros)],
        ['latency', ms(rm.latencyMs), ms(cm.latencyMs), msDelta(rm.latencyMs, cm.latencyMs)],
      ],
    ),
  );
  parts.push('### Replies');
  parts.push(replyBlock('Recorded', t.reply.recorded));
  parts.push(replyBlock('Counterfactual', t.reply.counterfactual));
  const d = t.reply.diff;
  if (d.identical) parts.push('The replies are identical.');
  else {
    parts.push(`### Diff (+${d.added} -${d.removed} lines)`);
    if (d.hunks.length > 0) parts.push(diffBlock(d));
    if (d.words) parts.push(`Word diff ([-removed-] {+added+}):\n\n${fenced(wordLine(d.words), 'text')}`);
    for (const n of d.notes) parts.push(`Note: ${escapeCell(n, 2_000)}`);
  }
  parts.push('### Tool calls');
  if (t.toolCalls.length === 0) parts.push('No tool calls on either side.');
  else
    parts.push(
      table(
        ['change', 'tool', 'recorded arguments', 'counterfactual arguments', 'counterfactual result'],
        t.toolCalls.map((c) => [
          c.kind,
          escapeCell(c.tool),
          c.recorded ? escapeCell(c.recorded.args) : '',
          c.counterfactual ? escapeCell(c.counterfactual.args) : '',
          c.counterfactual ? (c.counterfactual.result === 'simulated' ? 'simulated, no result' : c.counterfactual.result === 'recorded' ? 'from the record' : '') : 'not called',
        ]),
      ),
    );
  parts.push('### Approvals');
  if (t.approvals.length === 0) parts.push('No call would wait for an approval on either side.');
  else
    parts.push(
      table(
        ['tool', 'recorded', 'counterfactual', 'flipped'],
        t.approvals.map((a) => [
          escapeCell(a.tool),
          a.recorded === null ? 'not called' : `${a.recorded}${a.recordedDecision ? ` (${a.recordedDecision})` : ''}`,
          a.counterfactual ?? 'not called',
          a.flipped ? (a.counterfactual === 'would wait' ? 'yes: now asked' : 'yes: now skipped') : '',
        ]),
      ),
    );
  if (t.divergences.length > 0) {
    parts.push('### Divergences');
    parts.push('Calls the replay could not answer from the record (simulated, the model was told there is no result):');
    parts.push(table(['#', 'tool', 'arguments'], t.divergences.map((v) => [int(v.index + 1), escapeCell(v.tool), escapeCell(v.args)])));
  }
  return parts.join('\n\n');
}

function summaryMarkdown(s: ReplaySummary): string {
  const parts: string[] = ['## Summary'];
  parts.push(
    table(
      ['turns', 'count'],
      [
        ['total', int(s.turns.total)],
        ['replayable', int(s.turns.replayable)],
        ['not replayable', int(s.turns.notReplayable)],
        ['outcome changed', int(s.turns.outcomeChanged)],
        ['reply changed', int(s.turns.replyChanged)],
        ['tool calls changed', int(s.turns.toolCallsChanged)],
        ['approvals flipped', int(s.turns.approvalsFlipped)],
        ['diverged', int(s.turns.diverged)],
      ],
    ),
  );
  parts.push(
    table(
      ['', 'same', 'different', 'new', 'dropped', 'divergences', 'approvals now asked', 'approvals now skipped'],
      [['tool calls', int(s.toolCalls.same), int(s.toolCalls.different), int(s.toolCalls.new), int(s.toolCalls.dropped), int(s.divergences), int(s.approvals.nowAsked), int(s.approvals.nowSkipped)]],
    ),
  );
  const m = (label: string, st: ReplaySummary['tokens'], f: (n: number | null) => string, df: (a: number | null, b: number | null) => string) => [
    [`${label} (sum)`, f(st.recorded.sum), f(st.counterfactual.sum), df(st.recorded.sum, st.counterfactual.sum)],
    [`${label} (median)`, f(st.recorded.median), f(st.counterfactual.median), df(st.recorded.median, st.counterfactual.median)],
  ];
  parts.push(
    table(
      ['', 'recorded', 'counterfactual', 'delta'],
      [...m('tokens', s.tokens, tokens, tokDelta), ...m('cost', s.costMicros, money, moneyDelta), ...m('latency', s.latencyMs, ms, msDelta)],
    ),
  );
  if (s.notReplayable.length > 0) {
    parts.push('Not replayable:');
    parts.push(table(['turn', 'reason'], s.notReplayable.map((n) => [escapeCell(n.turnId), escapeCell(n.reason)])));
  }
  return parts.join('\n\n');
}

/**
 * A readable report: the alternative, the summary tables, then per turn its metrics, the two
 * replies in fenced blocks, the diff as a `diff` block, the tool calls and approvals tables and
 * the divergences. User text in tables is escaped (`escapeCell`); fences outgrow the text's
 * backtick runs.
 */
export function reportMarkdown(report: ReplayReport): string {
  const r = reportJson(report);
  const parts: string[] = [`# Replay ${escapeCell(r.replayId)}`];
  if (r.createdAt !== undefined) parts.push(`Started ${escapeCell(r.createdAt)}.`);
  parts.push(`Alternative:\n\n${fenced(JSON.stringify(sortKeys(r.alternative), null, 2), 'json')}`);
  if (r.selection !== undefined) parts.push(`Selection:\n\n${fenced(JSON.stringify(sortKeys(r.selection), null, 2), 'json')}`);
  parts.push(summaryMarkdown(r.summary));
  for (const t of r.turns) parts.push(turnMarkdown(t));
  return `${parts.join('\n\n')}\n`;
}
