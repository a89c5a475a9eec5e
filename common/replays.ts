/**
 * Counterfactual replay (issue 36): the shapes every part of it shares. Pure: zod only, no I/O.
 * A replay re-runs past chat turns through the production turn loop with another model, prompt,
 * skills, retrieval or approval policy, while every effect is answered from the record
 * (docs/replay.md). The workflow side imports only the types and the queue suffix.
 */
import { z } from 'zod';
import { ModelRefSchema, PlatformSchema } from './schemas.js';

export { parseReplayTurnId, REPLAY_QUEUE_SUFFIX, replayQueueOf, replayTurnId } from './ids.js';

/** The spend kind (budgets, usage) of a replay's model calls. */
export const REPLAY_SPEND_KIND = 'replay';

/** At most this many turns in one replay, and this many replayed at once. */
export const MAX_REPLAY_TURNS = 500;
export const MAX_REPLAY_CONCURRENCY = 8;
export const DEFAULT_REPLAY_CONCURRENCY = 2;

const isoTime = z.iso.datetime({ offset: true });
const shortId = z.string().trim().min(1).max(300);

/** Which past turns to replay: one turn; a chat in a time window; an objective's last N runs; a sample across chats. */
export const ReplaySelectionSchema = z.union([
  z.strictObject({ turnId: shortId }),
  z.strictObject({
    chatId: shortId,
    platform: PlatformSchema.optional(),
    account: shortId.optional(),
    since: isoTime,
    until: isoTime,
  }),
  z.strictObject({ objectiveId: shortId, last: z.number().int().min(1).max(MAX_REPLAY_TURNS) }),
  z.strictObject({
    sample: z.strictObject({
      size: z.number().int().min(1).max(MAX_REPLAY_TURNS),
      since: isoTime.optional(),
      until: isoTime.optional(),
      seed: z.number().int().optional(),
    }),
  }),
]);
export type ReplaySelection = z.infer<typeof ReplaySelectionSchema>;

/** Retrieval settings under test (absent fields: the configured ones). */
export const ReplayRetrievalSchema = z.strictObject({
  /** false: no workspace grounding before the model steps. */
  enabled: z.boolean().optional(),
  results: z.number().int().min(0).max(50).optional(),
  excerptBytes: z.number().int().min(0).max(64 * 1024).optional(),
  totalBytes: z.number().int().min(0).max(256 * 1024).optional(),
});
export type ReplayRetrieval = z.infer<typeof ReplayRetrievalSchema>;

/** The approval policy under test: the same fields as the configured one (STEWARD_APPROVAL_TOOLS, STEWARD_FORBID_SELF_APPROVAL). */
export const ReplayToolPolicySchema = z.strictObject({
  approvalTools: z.array(z.string().trim().min(1).max(200)).max(500).optional(),
  forbidSelfApproval: z.boolean().optional(),
});
export type ReplayToolPolicy = z.infer<typeof ReplayToolPolicySchema>;

/** A replayed turn's prompt layers: replace the layers' text (absent: the current ones). */
export const ReplayPromptLayersSchema = z.strictObject({
  steward: z.string().max(64 * 1024).optional(),
  operator: z.string().max(64 * 1024).optional(),
  workspace: z.string().max(64 * 1024).optional(),
  chat: z.string().max(64 * 1024).optional(),
});
export type ReplayPromptLayers = z.infer<typeof ReplayPromptLayersSchema>;

/**
 * What a replay changes; an empty object replays under the current configuration. `approvalTools`
 * is the short form of `toolPolicy.approvalTools` (both given: `approvalTools` wins).
 */
export const ReplayAlternativeSchema = z.strictObject({
  model: ModelRefSchema.optional(),
  /** Replaces the whole system prompt (every layer). */
  systemPrompt: z.string().max(64 * 1024).optional(),
  promptLayers: ReplayPromptLayersSchema.optional(),
  skills: z.enum(['on', 'off']).optional(),
  retrieval: ReplayRetrievalSchema.optional(),
  approvalTools: z.array(z.string().trim().min(1).max(200)).max(500).optional(),
  toolPolicy: ReplayToolPolicySchema.optional(),
});
export type ReplayAlternative = z.infer<typeof ReplayAlternativeSchema>;

/** The approval list a replay decides with: the alternative's, else the configured one. */
export function approvalToolsUnder(alt: ReplayAlternative, configured: readonly string[]): readonly string[] {
  return alt.approvalTools ?? alt.toolPolicy?.approvalTools ?? configured;
}

export const ReplayUsageSchema = z.strictObject({
  input: z.number().int().min(0),
  output: z.number().int().min(0),
  total: z.number().int().min(0),
});

/** One tool call as a side of the report sees it. */
export const ReplayToolCallSchema = z.strictObject({
  id: z.string(),
  name: z.string(),
  /** canonicalJson of the call's input. */
  args: z.string(),
  /** What the call returned (recorded), or the simulated result (counterfactual), capped for the report. */
  result: z.string().optional(),
  /** Counterfactual only: answered from the record (`recorded`) or not executed (`simulated`); refused by the loop (`refused`). */
  answer: z.enum(['recorded', 'simulated', 'refused']).optional(),
});
export type ReplayToolCall = z.infer<typeof ReplayToolCallSchema>;

/** An approval the policy under test decided in a replayed turn. */
export const ReplayApprovalSchema = z.strictObject({
  toolCallId: z.string(),
  tool: z.string(),
  args: z.string(),
  /** The policy under test: an approval would be asked (`would-wait`) or the call would run at once (`would-run`). */
  verdict: z.enum(['would-wait', 'would-run']),
  /** Whether the recorded turn asked for an approval of the same call (absent: the call was not recorded). */
  recordedWaited: z.boolean().optional(),
  /** How the replay went on: as in the record (approved when the recorded call ran, else denied). */
  continuedAs: z.enum(['approved', 'denied', 'ran']),
});
export type ReplayApproval = z.infer<typeof ReplayApprovalSchema>;

/** One side (recorded or counterfactual) of a turn. */
export const ReplaySideSchema = z.strictObject({
  reply: z.string(),
  outcome: z.string(),
  model: z.string(),
  toolCalls: z.array(ReplayToolCallSchema),
  usage: ReplayUsageSchema,
  /** USD, when a price is configured for the model. */
  cost: z.number().min(0).optional(),
  latencyMs: z.number().min(0).optional(),
  steps: z.number().int().min(0),
});
export type ReplaySide = z.infer<typeof ReplaySideSchema>;

/** One replayed turn. Not replayable: `reason` says why and the sides are absent. */
export const ReplayTurnReportSchema = z.strictObject({
  turnId: z.string(),
  sessionId: z.string().optional(),
  replayable: z.boolean(),
  reason: z.string().optional(),
  recorded: ReplaySideSchema.optional(),
  counterfactual: ReplaySideSchema.optional(),
  /** The reply changed (text differs). */
  replyChanged: z.boolean().optional(),
  /** A line diff of the replies (domain/replays/report.ts textDiff). */
  diff: z.string().optional(),
  toolCalls: z
    .strictObject({
      same: z.array(z.string()),
      different: z.array(z.string()),
      new: z.array(z.string()),
      dropped: z.array(z.string()),
    })
    .optional(),
  approvals: z.array(ReplayApprovalSchema).optional(),
  /** Calls the record could not answer (simulated with no result): the divergences. */
  divergences: z.array(z.string()).optional(),
  /** The outcome changed: reply, tool calls or approvals differ. */
  changed: z.boolean().optional(),
  error: z.string().optional(),
});
export type ReplayTurnReport = z.infer<typeof ReplayTurnReportSchema>;

export const ReplayStatusSchema = z.enum(['running', 'done', 'failed', 'cancelled']);
export type ReplayStatus = z.infer<typeof ReplayStatusSchema>;

export const ReplaySummarySchema = z.strictObject({
  turns: z.number().int().min(0),
  replayed: z.number().int().min(0),
  notReplayable: z.number().int().min(0),
  changed: z.number().int().min(0),
  replyChanged: z.number().int().min(0),
  toolCallsChanged: z.number().int().min(0),
  approvalsFlipped: z.number().int().min(0),
  failed: z.number().int().min(0),
  usage: z.strictObject({ recorded: ReplayUsageSchema, counterfactual: ReplayUsageSchema }),
  cost: z.strictObject({ recorded: z.number().min(0), counterfactual: z.number().min(0) }).optional(),
});
export type ReplaySummary = z.infer<typeof ReplaySummarySchema>;

/** A replay's report: what was asked, each turn, and the sum. */
export const ReplayReportSchema = z.strictObject({
  replayId: z.string(),
  status: ReplayStatusSchema,
  selection: ReplaySelectionSchema.optional(),
  alternative: ReplayAlternativeSchema,
  startedAt: z.string().optional(),
  finishedAt: z.string().optional(),
  turns: z.array(ReplayTurnReportSchema),
  summary: ReplaySummarySchema,
});
export type ReplayReport = z.infer<typeof ReplayReportSchema>;

/**
 * What the replay workflow starts with (workflows/replays/replay.ts). The workflow writes its own
 * Replay row from it (the row is a projection of the run: `selection` and `requestedBy` are the
 * row's; absent in runs started before the workflow wrote its row).
 */
export interface ReplayTurnsInput {
  replayId: string;
  turnIds: string[];
  alternative: ReplayAlternative;
  concurrency: number;
  /** The selection as resolved (the row's). */
  selection?: unknown;
  /** Who asked (the row's). */
  requestedBy?: string;
}

/**
 * JSON with object keys sorted at every level: the canonical arguments two tool calls are
 * compared by (same tool, same canonicalJson of the input).
 */
export function canonicalJson(value: unknown): string {
  // through JSON first: what JSON drops is dropped, `toJSON` applied, as the call's arguments travel
  const plain = JSON.stringify(value);
  if (plain === undefined) return 'null';
  return JSON.stringify(sortKeys(JSON.parse(plain)));
}

/** A value with every object's keys sorted (by code unit), arrays in order. */
export function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v && typeof v === 'object') {
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(v).sort()) {
      const x = (v as Record<string, unknown>)[k];
      if (x !== undefined) out[k] = sortKeys(x);
    }
    return out;
  }
  return v;
}
