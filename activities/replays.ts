/**
 * Counterfactual replay's activities (docs/replay.md). A replayed turn runs the PRODUCTION turn
 * loop (workflows/chat/turn-loop.ts) in workflows/replays/replay.ts, with its activities sent to
 * the replay task queue (`<background queue>-replay`), where only these implementations are
 * registered, under the same names. Only the effects differ:
 *
 * - `modelStep`: the production step (activities/chat.ts modelStepWith: the same prompt building,
 *   tool validation, approval policy and model call) with the alternative applied (model, system
 *   prompt or layers, skills, retrieval, the approval list under test), no receipt, no live
 *   draft, spent under the replay's own step keys and the kind `replay` (budgets apply).
 * - `runTool`: never executes. A call matching a recorded call of the turn (same tool, same
 *   canonical arguments) gets the recorded result; any other is answered "simulated, no result".
 * - `requestApproval` / `settleApproval`: write nothing (no Approval row, no notice); the replay
 *   workflow answers the approval at once and `runTool` tells the model what the record told it.
 * - `deliver`, `updateProgress`, `clearProgress`: nothing is sent or written; the reply stays in
 *   the replay run's history, where `reportReplayTurn` reads it.
 *
 * What a replay writes: blobs (content-addressed, invisible), the budget ledger's reservations of
 * its model calls (kind `replay`), its Replay row and report blob, and one `replay.end` receipt.
 */
import { activityInfo, Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { approvalIdFor, parseReplayTurnId, replayQueueOf, replayTurnId } from '../common/ids.js';
import { approvalToolsUnder, canonicalJson, ReplayReportSchema, type ReplayAlternative, type ReplayApproval, type ReplayReport, type ReplaySide, type ReplayStatus, type ReplayToolCall, type ReplayTurnReport } from '../common/replays.js';
import { costMicros, type Prices } from '../domain/budgets/prices.js';
import { getBlobText, putBlob } from '../domain/blobs.js';
import { createRetriever, DEFAULT_RETRIEVAL } from '../domain/knowledge/grounding.js';
import { layeredSystemPrompt, type PromptLayer } from '../domain/knowledge/prompt-layers.js';
import { withStepKey, type SpendContext } from '../domain/model.js';
import { receiptsByKeys, writeReceipt } from '../domain/receipts.js';
import { findMemory, type MemoryRow } from '../domain/knowledge/memory.js';
import type { Db } from '../domain/db.js';
import { recordedTurn, stepsOf, toolCallsOf, turnRunActivities, type HistoryArchive, type RecordedSteering, type RecordedTurn, type RecordedTurnResult } from '../domain/replays/record.js';
import { compareSides, summarise } from '../domain/replays/sides.js';
import { finishReplay, getReplay, upsertReplay } from '../domain/store/replays.js';
import { loadToolCall } from '../domain/tools/calls.js';
import { toolResultMessage } from '../domain/tools.js';
import type { TurnInput } from '../workflows/types.js';
import type { ReplayedTurnResult } from '../workflows/replays/replay.js';
import {
  createChatContext,
  modelStepWith,
  refusalText,
  type ActivityDeps,
  type ChatContext,
  type DeliverInput,
  type ModelStepInput,
  type ModelStepResult,
  type ProgressInput,
  type RequestApprovalInput,
  type RunToolInput,
  type RunToolResult,
  type SettleApprovalInput,
} from './chat.js';

export interface ReplayActivityDeps extends ActivityDeps {
  /** Model steps a replayed turn may take (STEWARD_MAX_STEPS). */
  maxSteps: number;
  /** The background queue: replayed turns send their activities to its replay queue. */
  backgroundQueue: string;
  /** Prices for the report's cost (STEWARD_MODEL_PRICES over the defaults); absent: no cost. */
  prices?: Prices;
  /** Recorded histories of runs Temporal no longer keeps (STEWARD_REPLAY_HISTORIES). */
  archive?: HistoryArchive;
}

/** What the model is told of a call the record cannot answer. */
export function simulatedText(tool: string): string {
  return `Simulated (counterfactual replay): ${tool} was not executed and has no result; nothing was sent or changed.`;
}

/** What `loadReplayTurn` gives the replay workflow: the turn to run, or the report of one that cannot be replayed. */
export type LoadedReplayTurn =
  | {
      replayable: true;
      turnInput: TurnInput;
      /** The record's later steering, given to the loop before the step that took it in. */
      steering?: RecordedSteering[];
      /** The record's /stop: the replay stops in the same step (docs/replay.md "Steering and /stop"). */
      stop?: { step: number; inFlight: boolean };
    }
  | { replayable: false; reportHash: string; reason: string };

/** The failure type of a model step the record shows stopped while it ran: it is not asked of the model again. */
export const RECORDED_STOP = 'RecordedStop';

/** What a replayed turn's activity results carry besides the production ones (the loop ignores them; the report reads them). */
interface ReplayToolAnswer {
  answer: 'recorded' | 'simulated' | 'refused';
  tool: string;
  args: string;
}

const REPORT_TEXT_MAX = 16_000;
const cap = (t: string) => (t.length > REPORT_TEXT_MAX ? `${t.slice(0, REPORT_TEXT_MAX)}…` : t);

/** A replay's alternative applied to the chat activities' context: the approval list under test, the retrieval limits. */
function contextFor(c: ChatContext, alt: ReplayAlternative): ChatContext {
  const approvalTools = approvalToolsUnder(alt, c.policy.approvalTools);
  const forbid = alt.toolPolicy?.forbidSelfApproval ?? c.policy.forbidSelfApproval;
  const r = alt.retrieval;
  const limits = r && (r.results !== undefined || r.excerptBytes !== undefined || r.totalBytes !== undefined) ? { ...(c.retrieval ?? DEFAULT_RETRIEVAL), ...(r.results !== undefined ? { results: r.results } : {}), ...(r.excerptBytes !== undefined ? { excerptBytes: r.excerptBytes } : {}), ...(r.totalBytes !== undefined ? { totalBytes: r.totalBytes } : {}) } : undefined;
  return {
    ...c,
    policy: { ...c.policy, approvalTools, ...(forbid !== undefined ? { forbidSelfApproval: forbid } : {}) },
    ...(limits && c.knowledge ? { retriever: createRetriever({ db: c.db, knowledge: c.knowledge, limits }) } : {}),
  };
}

/** The system prompt under the alternative: its whole prompt, or the layers with the given ones replaced. */
function systemPromptFor(alt: ReplayAlternative): ((layers: PromptLayer[]) => string) | undefined {
  if (alt.systemPrompt !== undefined) {
    const text = alt.systemPrompt;
    return () => text;
  }
  const given = alt.promptLayers;
  if (!given) return undefined;
  return (layers) => {
    const order: PromptLayer['layer'][] = ['steward', 'operator', 'workspace', 'chat'];
    const out = order.flatMap((layer): PromptLayer[] => {
      const text = given[layer] ?? layers.find((l) => l.layer === layer)?.text;
      return text ? [{ layer, source: given[layer] !== undefined ? 'replay' : (layers.find((l) => l.layer === layer)?.source ?? ''), text }] : [];
    });
    return layeredSystemPrompt(out);
  };
}

interface ReplayState {
  alternative: ReplayAlternative;
  requestedBy: string | null;
  ctx: ChatContext;
}

export function createReplayActivities(deps: ReplayActivityDeps) {
  const c = createChatContext(deps);
  const replays = new Map<string, Promise<ReplayState>>();
  const records = new Map<string, Promise<RecordedTurnResult>>();
  const remember = <T>(m: Map<string, Promise<T>>, k: string, make: () => Promise<T>): Promise<T> => {
    const hit = m.get(k);
    if (hit) return hit;
    const p = make();
    void p.catch(() => m.delete(k));
    if (m.size >= 200) m.delete(m.keys().next().value as string);
    m.set(k, p);
    return p;
  };

  const replayOf = (replayId: string) =>
    remember(replays, replayId, async () => {
      const row = await getReplay(deps.db, replayId);
      if (!row) throw ApplicationFailure.create({ type: 'ReplayNotFound', message: `replay ${replayId} is not recorded`, nonRetryable: true });
      return { alternative: row.alternative, requestedBy: row.requestedBy, ctx: contextFor(c, row.alternative) };
    });
  // read once per replay and turn (a later replay reads the record again: its blobs may be gone since)
  const recordOf = (replayId: string, turnId: string) => remember(records, replayTurnId(replayId, turnId), () => recordedTurn(deps.db, Context.current().client, turnId, deps.archive));

  /** The replay and the recorded turn of a replayed turn's id (every activity input carries it). */
  async function resolve(id: string): Promise<{ replayId: string; state: ReplayState; record: RecordedTurn }> {
    const p = parseReplayTurnId(id);
    if (!p) throw ApplicationFailure.create({ type: 'NotAReplay', message: `turn ${id} is not a replayed turn: the replay queue runs replays only`, nonRetryable: true });
    const state = await replayOf(p.replayId);
    const record = await recordOf(p.replayId, p.turnId);
    if (!record.replayable) throw ApplicationFailure.create({ type: 'NotReplayable', message: record.reason, nonRetryable: true });
    return { replayId: p.replayId, state, record };
  }

  /** The replay's spend: its own step keys (the replayed turn's id), the kind `replay`, the person who asked for it. */
  const spendOf = (input: ModelStepInput, state: ReplayState): SpendContext => ({
    key: `model:${input.turnId}:${input.step}`,
    kind: 'replay',
    scopes: state.requestedBy && state.requestedBy !== 'operator' ? { people: [state.requestedBy] } : {},
  });

  async function modelStep(input: ModelStepInput): Promise<ModelStepResult & { latencyMs: number }> {
    const { state, record } = await resolve(input.turnId);
    // the record's /stop came while this step's model call ran: the replay stops here too (its
    // workflow cancels the loop), and the model is not asked what nobody would have read
    if (record.stop?.inFlight && input.step >= record.stop.step) {
      throw ApplicationFailure.create({ type: RECORDED_STOP, message: `the recorded turn was stopped (/stop) during model step ${record.stop.step}`, nonRetryable: true });
    }
    const alt = state.alternative;
    const sp = systemPromptFor(alt);
    const out = await modelStepWith(state.ctx, input, {
      receipts: false,
      liveDraft: false,
      spend: spendOf(input, state),
      ...(sp ? { systemPrompt: sp } : {}),
      ...(alt.skills === 'off' ? { skills: false } : {}),
      ...(alt.retrieval?.enabled === false ? { ground: false } : {}),
      ...(record.steps.some((st) => st.step === input.step) ? { recall: () => recordedRecall(deps.db, record.turnId, input.step) } : {}),
    });
    return { ...out.result, latencyMs: out.ms };
  }

  async function runTool(input: RunToolInput): Promise<RunToolResult & { replay: ReplayToolAnswer }> {
    const { record } = await resolve(input.turnId);
    const call = await loadToolCall(deps.db, input.messageHash, input.toolCallId);
    const args = canonicalJson(call.input ?? {});
    let text: string;
    let answer: ReplayToolAnswer['answer'];
    let ok = false;
    if (input.refused !== undefined) {
      text = refusalText(input.refused);
      answer = 'refused';
    } else {
      // the recorded call of the same tool with the same canonical arguments: what it returned
      // (or what the model was told when it was refused or denied); one that ran is preferred
      const same = record.toolCalls.filter((r) => r.name === call.toolName && r.args === args);
      const hit = same.find((r) => r.ran) ?? same[0];
      if (hit) {
        text = hit.resultText;
        answer = 'recorded';
        ok = hit.ok;
      } else {
        text = simulatedText(call.toolName);
        answer = 'simulated';
      }
    }
    const resultHash = await putBlob(deps.db, JSON.stringify(toolResultMessage(call, text)), 'application/json');
    return { resultHash, ok, replay: { answer, tool: call.toolName, args } };
  }

  async function requestApproval(input: RequestApprovalInput): Promise<{ approvalId: string; timeoutMs: number; summary: string; forbidSelfApproval: boolean }> {
    await resolve(input.turnId);
    const call = await loadToolCall(deps.db, input.messageHash, input.toolCallId);
    // no Approval row, no notice: the replay workflow decides at once (workflows/replays/replay.ts)
    return { approvalId: approvalIdFor(input.turnId, input.toolCallId), timeoutMs: 10 * 60_000, summary: `${call.toolName} (replayed: would wait for an approval)`, forbidSelfApproval: false };
  }

  const settleApproval = async (input: SettleApprovalInput): Promise<{ reason: string }> => ({
    reason: input.decision === 'approved' ? 'answered from the record by the replay' : `${input.decision} in the replay`,
  });
  const deliver = async (_input: DeliverInput): Promise<{ sent: boolean; messageSeq: number }> => ({ sent: false, messageSeq: 0 });
  const updateProgress = async (_input: ProgressInput): Promise<string> => '';
  const clearProgress = async (_input: { turnId: string; conversation: unknown }): Promise<string> => '';

  const r: Replays = { deps, replayOf, recordOf, resolve };
  return {
    // the turn loop's activities, under their production names (a model call below a step is keyed under it)
    modelStep: (input: ModelStepInput) => withStepKey(`model:${input.turnId}:${input.step}`, () => modelStep(input)),
    runTool,
    requestApproval,
    settleApproval,
    deliver,
    updateProgress,
    clearProgress,
    // the replay workflow's own
    loadReplayTurn: (input: { replayId: string; turnId: string }) => loadReplayTurn(r, input),
    reportReplayTurn: (input: { replayId: string; turnId: string; result: ReplayedTurnResult }) => reportReplayTurn(r, input),
    recordReplay: (input: RecordReplayInput) => recordReplay(deps, input),
    saveReplayReport: (input: SaveReplayReportInput) => saveReplayReport(deps, input),
    failReplay: (input: { replayId: string; error: string }) => failReplay(deps, input),
  };
}

/** What the replay activities share: the dependencies, the replays and records they read (cached), and the resolution of a replayed turn's id. */
interface Replays {
  deps: ReplayActivityDeps;
  replayOf(replayId: string): Promise<ReplayState>;
  recordOf(replayId: string, turnId: string): Promise<RecordedTurnResult>;
  resolve(id: string): Promise<{ replayId: string; state: ReplayState; record: RecordedTurn }>;
}

/** The Replay row as the replay workflow writes it at its start (its input). */
export interface RecordReplayInput {
  replayId: string;
  workflowId: string;
  turnIds: string[];
  alternative: ReplayAlternative;
  selection: unknown;
  requestedBy?: string;
}

/** The replay's row, written by its own run (an idempotent upsert: a row already there is kept). */
async function recordReplay(deps: ReplayActivityDeps, input: RecordReplayInput): Promise<{ status: ReplayStatus }> {
  const row = await upsertReplay(deps.db, {
    id: input.replayId,
    selection: input.selection,
    alternative: input.alternative,
    turnIds: input.turnIds,
    workflowId: input.workflowId,
    ...(input.requestedBy !== undefined ? { requestedBy: input.requestedBy } : {}),
  });
  return { status: row.status };
}

/** The replay's run failed (anything but a cancellation): its row says so, with the reason, and its own receipt. */
async function failReplay(deps: ReplayActivityDeps, input: { replayId: string; error: string }): Promise<void> {
  const row = await finishReplay(deps.db, input.replayId, { status: 'failed', error: input.error });
  if (!row) return;
  const wf = activityInfo().workflowExecution;
  await writeReceipt(deps.db, { key: `replay:${row.id}:end`, kind: 'replay.end', ...(wf ? { workflowId: wf.workflowId, runId: wf.runId } : {}), ...(row.requestedBy ? { actor: row.requestedBy } : {}), data: { replayId: row.id, status: row.status, error: input.error.slice(0, 500) } });
}

/** The replay's end as the workflow reports it: every turn's report blob, or why it has none. */
export interface SaveReplayReportInput {
  replayId: string;
  status: Exclude<ReplayStatus, 'running'>;
  turns: Array<{ turnId: string; reportHash?: string; error?: string }>;
}

/** The turn a replay runs (its recorded input under the replayed id, the alternative's model), or a not-replayable report. */
async function loadReplayTurn(r: Replays, input: { replayId: string; turnId: string }): Promise<LoadedReplayTurn> {
  const { deps } = r;
  const state = await r.replayOf(input.replayId);
  const record = await r.recordOf(input.replayId, input.turnId);
  if (!record.replayable) {
    const report: ReplayTurnReport = { turnId: input.turnId, replayable: false, reason: record.reason };
    return { replayable: false, reason: record.reason, reportHash: await putBlob(deps.db, JSON.stringify(report), 'application/json') };
  }
  const t = record.turnInput;
  return {
    replayable: true,
    turnInput: {
      ...t,
      turnId: replayTurnId(input.replayId, input.turnId),
      settings: { ...t.settings, ...(state.alternative.model ? { model: state.alternative.model } : {}) },
      maxSteps: deps.maxSteps,
      progress: false,
      activityQueue: replayQueueOf(deps.backgroundQueue),
    },
    ...(record.steering.length > 0 ? { steering: record.steering } : {}),
    ...(record.stop ? { stop: record.stop } : {}),
  };
}

/**
 * The memories a recorded step recalled (its `memory.recall` receipt), as they are now: a replayed
 * step sees what the recorded one saw, not memories saved since (docs/replay.md "What a replayed
 * turn reads"). A memory deleted since is left out.
 */
async function recordedRecall(db: Db, turnId: string, step: number): Promise<MemoryRow[]> {
  const [r] = await receiptsByKeys(db, [`${turnId}:memory:${step}`]);
  const ids = r && Array.isArray((r.data as { memories?: unknown }).memories) ? ((r.data as { memories: unknown[] }).memories.map(String)) : [];
  const rows = await Promise.all(ids.map((id) => findMemory(db, id)));
  return rows.filter((m): m is MemoryRow => m !== null);
}

function costOf(deps: ReplayActivityDeps, model: string, usage: { input: number; output: number }): number | undefined {
  const price = deps.prices?.[model];
  return price ? costMicros(price, { inputTokens: usage.input, outputTokens: usage.output }) / 1_000_000 : undefined;
}

function recordedSide(deps: ReplayActivityDeps, r: RecordedTurn): ReplaySide {
  const cost = costOf(deps, r.model, r.usage);
  return {
    reply: cap(r.reply),
    outcome: r.outcome,
    model: r.model,
    toolCalls: r.toolCalls.map((t): ReplayToolCall => ({ id: t.id, name: t.name, args: t.args, result: cap(t.resultText) })),
    usage: r.usage,
    ...(cost !== undefined ? { cost } : {}),
    latencyMs: r.latencyMs,
    steps: r.steps.length,
  };
}

/** After a replayed turn: its report (both sides compared), stored as a blob; the hash goes to the replay workflow. */
async function reportReplayTurn(r: Replays, input: { replayId: string; turnId: string; result: ReplayedTurnResult }): Promise<{ reportHash: string; changed: boolean }> {
  const { deps } = r;
  const { record, state } = await r.resolve(replayTurnId(input.replayId, input.turnId));
  const wf = activityInfo().workflowExecution;
  if (!wf) throw ApplicationFailure.create({ type: 'NotAReplay', message: 'reportReplayTurn runs only inside a replayed turn (its workflow)', nonRetryable: true });
  const rid = replayTurnId(input.replayId, input.turnId);
  const acts = await turnRunActivities(Context.current().client, wf.workflowId, wf.runId, rid);
  const steps = stepsOf(acts);
  const calls = await toolCallsOf(deps.db, acts);
  const answers = new Map(acts.filter((a) => a.type === 'runTool' && a.result).map((a) => [String(a.input.toolCallId), (a.result!.replay ?? {}) as Partial<ReplayToolAnswer>]));
  const delivered = acts.filter((a) => a.type === 'deliver').at(-1);
  const reply = delivered ? (typeof delivered.input.blobHash === 'string' ? await getBlobText(deps.db, delivered.input.blobHash) : String(delivered.input.text ?? '')) : '';
  const model = state.alternative.model ?? record.model;
  const usage = input.result.usage;
  const cost = costOf(deps, model, usage);
  const side: ReplaySide = {
    reply: cap(reply),
    outcome: input.result.outcome,
    model,
    toolCalls: calls.map((t): ReplayToolCall => ({ id: t.id, name: t.name, args: t.args, result: cap(t.resultText), ...(answers.get(t.id)?.answer ? { answer: answers.get(t.id)!.answer! } : {}) })),
    usage,
    ...(cost !== undefined ? { cost } : {}),
    latencyMs: steps.reduce((n, s) => n + s.latencyMs, 0),
    steps: steps.length,
  };
  // every call the model made, with the policy under test's verdict (waiting ones asked for an approval)
  const approvals: ReplayApproval[] = [];
  for (const s of steps) {
    if (!s.messageHash) continue;
    for (const ref of s.toolCalls) {
      if (ref.error !== undefined) continue;
      const call = await loadToolCall(deps.db, s.messageHash, ref.id);
      const args = canonicalJson(call.input ?? {});
      const rec = record.toolCalls.find((r) => r.name === call.toolName && r.args === args);
      approvals.push({
        toolCallId: ref.id,
        tool: call.toolName,
        args,
        verdict: ref.needsApproval ? 'would-wait' : 'would-run',
        ...(rec ? { recordedWaited: rec.waited } : {}),
        continuedAs: !ref.needsApproval ? 'ran' : rec?.ran ? 'approved' : 'denied',
      });
    }
  }
  const report = compareSides({ turnId: input.turnId, sessionId: record.sessionId }, recordedSide(deps, record), side, approvals);
  return { reportHash: await putBlob(deps.db, JSON.stringify(report), 'application/json'), changed: report.changed === true };
}

/** The replay's end: every turn's report in one (a blob), the row finished, the replay's own receipt. */
async function saveReplayReport(deps: ReplayActivityDeps, input: SaveReplayReportInput): Promise<{ reportHash: string; summary: ReplayReport['summary'] }> {
  const row = await getReplay(deps.db, input.replayId);
  if (!row) throw ApplicationFailure.create({ type: 'ReplayNotFound', message: `replay ${input.replayId} is not recorded`, nonRetryable: true });
  const turns: ReplayTurnReport[] = [];
  for (const t of input.turns) {
    if (t.reportHash) turns.push(JSON.parse(await getBlobText(deps.db, t.reportHash)) as ReplayTurnReport);
    else turns.push({ turnId: t.turnId, replayable: true, error: t.error ?? (input.status === 'cancelled' ? 'cancelled: the replay was cancelled before this turn finished' : 'not replayed') });
  }
  const summary = summarise(turns);
  const parsed = ReplayReportSchema.safeParse({
    replayId: row.id,
    status: input.status,
    selection: row.selection,
    alternative: row.alternative,
    startedAt: row.createdAt.toISOString(),
    finishedAt: new Date().toISOString(),
    turns,
    summary,
  });
  // a report that does not hold its own schema is not kept: the same input fails again, so no retry (the run fails, the row says why)
  if (!parsed.success) throw ApplicationFailure.create({ type: 'InvalidReport', message: `the report of replay ${row.id} is invalid: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(report)'}: ${i.message}`).join('; ').slice(0, 500)}`, nonRetryable: true });
  const report = parsed.data;
  const reportHash = await putBlob(deps.db, JSON.stringify(report), 'application/json');
  await finishReplay(deps.db, row.id, { status: input.status, reportHash });
  const wf = activityInfo().workflowExecution;
  await writeReceipt(deps.db, { key: `replay:${row.id}:end`, kind: 'replay.end', ...(wf ? { workflowId: wf.workflowId, runId: wf.runId } : {}), ...(row.requestedBy ? { actor: row.requestedBy } : {}), data: { replayId: row.id, status: input.status, reportHash, turns: summary.turns, changed: summary.changed } });
  return { reportHash, summary };
}

export type ReplayActivities = ReturnType<typeof createReplayActivities>;
