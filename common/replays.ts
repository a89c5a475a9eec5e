/**
 * Counterfactual replay (issue 36): the shapes every part of it shares. Pure: zod only, no I/O.
 * A replay re-runs past chat turns through the production turn loop with another model, prompt,
 * skills, retrieval or approval policy, while every effect is answered from the record
 * (docs/replay.md). The workflow side imports only the types and the queue suffix.
 * The request's schemas (selection, alternative) are defined here once, with errors that name
 * what is wrong; the service, the report and the tests all use these.
 */
import { z } from 'zod';
import { ModelRefSchema, PlatformSchema } from './schemas.js';
import { TOOL_NAMES } from './tools.js';

export { parseReplayTurnId, REPLAY_QUEUE_SUFFIX, replayQueueOf, replayTurnId } from './ids.js';

/** The spend kind (budgets, usage) of a replay's model calls. */
export const REPLAY_SPEND_KIND = 'replay';

/** At most this many turns in one replay, and this many replayed at once. */
export const MAX_REPLAY_TURNS = 500;
export const MAX_REPLAY_CONCURRENCY = 8;
export const DEFAULT_REPLAY_CONCURRENCY = 2;

const KINDS = ['turnId', 'chatId', 'objectiveId', 'sample'] as const;
const KIND_TEXT = 'turnId, chatId (with since and until), objectiveId (with last) or sample ({size, since?, until?, seed?})';

/** An ISO time with its offset (2026-11-28T10:00:00Z), kept as given. */
const isoTime = (what: string) => z.iso.datetime({ offset: true, error: `${what}: expected an ISO time with its offset, e.g. 2026-11-28T10:00:00Z` });
const shortId = (what: string) => z.string({ error: `${what}: expected a string` }).trim().min(1, `${what} is empty`).max(300, `${what} is longer than 300 characters`);
const count = (what: string) =>
  z
    .number({ error: `${what}: expected a whole number from 1 to ${MAX_REPLAY_TURNS}` })
    .int(`${what}: expected a whole number from 1 to ${MAX_REPLAY_TURNS}`)
    .min(1, `${what}: expected a whole number from 1 to ${MAX_REPLAY_TURNS}`)
    .max(MAX_REPLAY_TURNS, `${what}: at most ${MAX_REPLAY_TURNS} turns per replay`);

const inverted = (w: { since?: string | undefined; until?: string | undefined }) => w.since === undefined || w.until === undefined || Date.parse(w.since) < Date.parse(w.until);
const INVERTED = { message: 'the window is empty or inverted: since must be before until' };

const TurnSelection = z.strictObject({ turnId: shortId('turnId') });
const ChatSelection = z
  .strictObject({
    chatId: shortId('chatId'),
    platform: PlatformSchema.optional(),
    account: shortId('account').optional(),
    since: isoTime('since'),
    until: isoTime('until'),
  })
  .refine(inverted, INVERTED);
const ObjectiveSelection = z.strictObject({ objectiveId: shortId('objectiveId'), last: count('last') });
const SampleSelection = z.strictObject({
  sample: z
    .strictObject({
      size: count('sample.size'),
      since: isoTime('sample.since').optional(),
      until: isoTime('sample.until').optional(),
      seed: z.number({ error: 'sample.seed: expected a whole number' }).int('sample.seed: expected a whole number').min(0, 'sample.seed: expected a whole number from 0').max(4_294_967_295, 'sample.seed: at most 4294967295').optional(),
    })
    .refine(inverted, INVERTED),
});

const BRANCHES = { turnId: TurnSelection, chatId: ChatSelection, objectiveId: ObjectiveSelection, sample: SampleSelection } as const;

export type ReplaySelection = z.infer<typeof TurnSelection> | z.infer<typeof ChatSelection> | z.infer<typeof ObjectiveSelection> | z.infer<typeof SampleSelection>;

/**
 * Which past turns to replay: exactly one of one turn (`turnId`); a chat in a time window
 * (`chatId`, `platform`? default http, `account`? default the HTTP API's, `since`, `until`); an
 * objective's last N runs (`objectiveId` (its id or name), `last`); a sample of N turns across
 * chats (`sample: {size, since?, until?, seed?}`, the same seed draws the same turns). No kind or
 * two kinds are refused by name, before the kind's own fields are checked; every message names
 * its field. Resolved to turn ids by domain/replays/select.ts.
 */
export const ReplaySelectionSchema = z
  .record(z.string(), z.unknown(), { error: `a selection is an object naming one of ${KIND_TEXT}` })
  .transform((v, ctx): ReplaySelection => {
    const named = KINDS.filter((k) => k in v);
    if (named.length !== 1) {
      ctx.addIssue({ code: 'custom', message: named.length === 0 ? `a selection names one of ${KIND_TEXT}` : `a selection names exactly one kind; got ${named.join(' and ')}` });
      return z.NEVER;
    }
    const r = BRANCHES[named[0]!].safeParse(v);
    if (!r.success) {
      for (const i of r.error.issues) ctx.addIssue({ code: 'custom', message: i.message, path: i.path });
      return z.NEVER;
    }
    return r.data;
  });

/** Retrieval settings under test (absent fields: the configured ones). */
export const ReplayRetrievalSchema = z.strictObject({
  /** false: no workspace grounding before the model steps. */
  enabled: z.boolean().optional(),
  results: z.number().int().min(0).max(50).optional(),
  excerptBytes: z.number().int().min(0).max(64 * 1024).optional(),
  totalBytes: z.number().int().min(0).max(256 * 1024).optional(),
});
export type ReplayRetrieval = z.infer<typeof ReplayRetrievalSchema>;

/** A tool of the approval list: Steward's own, an MCP tool as server.tool or server.*, or * for every tool (as STEWARD_APPROVAL_TOOLS). */
const ApprovalToolSchema = z
  .string()
  .trim()
  .refine((n) => n === '*' || (TOOL_NAMES as string[]).includes(n) || /^[a-z][a-z0-9-]{0,23}\.([A-Za-z0-9_-]{1,64}|\*)$/.test(n), {
    error: (i) => `unknown tool ${String(i.input)}: tools are ${TOOL_NAMES.join(', ')}, MCP tools as server.tool or server.* (or * for all)`,
  });
const ApprovalTools = z.array(ApprovalToolSchema).max(500, 'at most 500 tools in an approval list');
const PromptText = (what: string) => z.string({ error: `${what}: expected text` }).max(64 * 1024, `${what} is longer than 64 KB`);

/** The approval policy under test: the same fields as the configured one (STEWARD_APPROVAL_TOOLS, STEWARD_FORBID_SELF_APPROVAL). */
export const ReplayToolPolicySchema = z.strictObject({
  approvalTools: ApprovalTools.optional(),
  forbidSelfApproval: z.boolean().optional(),
});
export type ReplayToolPolicy = z.infer<typeof ReplayToolPolicySchema>;

/** A replayed turn's prompt layers: replace the layers' text ('' drops a layer; absent: the current ones). */
export const ReplayPromptLayersSchema = z.strictObject({
  steward: PromptText('promptLayers.steward').optional(),
  operator: PromptText('promptLayers.operator').optional(),
  workspace: PromptText('promptLayers.workspace').optional(),
  chat: PromptText('promptLayers.chat').optional(),
});
export type ReplayPromptLayers = z.infer<typeof ReplayPromptLayersSchema>;

/**
 * What a replay changes; `{}` replays under the current configuration (the record must then be
 * reproduced). `approvalTools` is the short form of `toolPolicy.approvalTools` (both given:
 * `approvalTools` wins). Whether the model's provider is configured is the service's check (the
 * model registry knows, services/replays.ts).
 */
export const ReplayAlternativeSchema = z.strictObject({
  /** provider:model; its provider must be configured (checked by the service). */
  model: ModelRefSchema.optional(),
  /** Replaces the whole system prompt (every layer). */
  systemPrompt: PromptText('systemPrompt').optional(),
  promptLayers: ReplayPromptLayersSchema.optional(),
  skills: z.enum(['on', 'off'], { error: 'skills: expected on or off' }).optional(),
  retrieval: ReplayRetrievalSchema.optional(),
  approvalTools: ApprovalTools.optional(),
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
