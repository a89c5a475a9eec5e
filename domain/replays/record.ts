/**
 * What a replay needs of one past chat turn (docs/replay.md "The record").
 *
 * The source is the run that ran the turn: its Temporal history, read through the client and its
 * payload codec, is the ledger of every handoff the turn made (DESIGN.md: Temporal is the ledger,
 * rows are projections). Each model step's input (the inbound message keys, the working set, the
 * settings, the steering) and result (usage, the assistant message's blob, the tool calls and the
 * approval policy's verdict), each tool call's input (the message blob and call id, a refusal)
 * and result (the result's blob), each approval asked and how it was settled are activity inputs
 * and results there, with their times. The run is found by the turn's `turn.start` receipt (its
 * workflow and run id). What history references by hash (the messages, the tool calls' inputs,
 * their results) is read from the blob store; the reply from the transcript row its delivery
 * wrote. A turn whose blobs are gone (pruned), whose run Temporal no longer keeps (retention), or
 * whose receipt is missing is `{ replayable: false, reason }`.
 *
 * A run Temporal no longer keeps is read from an archive of recorded histories when one is given
 * (`HistoryArchive`, platform/history-archive.ts: the folder `steward histories record` writes),
 * with the same reader; its payloads are read through the same codec.
 *
 * The same reader reads a replayed turn's own run (turnRunActivities), so both sides of a report
 * are measured the same way.
 */
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { arrayFromPayloads } from '@temporalio/common';
import type { temporal } from '@temporalio/proto';
import { replyKey, stoppedKey, type ConversationKey } from '../../common/ids.js';
import { canonicalJson } from '../../common/replays.js';
import type { InboundRef, ScratchRef, SessionSettings, TokenUsage, ToolCallRef, TurnInput, WorkingSet } from '../../workflows/types.js';
import { getBlobText } from '../blobs.js';
import type { Db } from '../db.js';
import { receiptsByKeys } from '../receipts.js';
import { messageByKey, messagesByKeys } from '../transcript.js';

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;

/** Recorded histories of runs Temporal no longer keeps, by workflow and run id (platform/history-archive.ts). */
export interface HistoryArchive {
  history(workflowId: string, runId: string): Promise<temporal.api.history.v1.IHistory | undefined>;
}

/** One activity of a turn as its run's history has it. */
export interface TurnActivity {
  type: string;
  input: Record<string, unknown>;
  /** Absent: it did not complete (failed, cancelled, still running). */
  result?: Record<string, unknown>;
  scheduledAtMs: number;
  completedAtMs?: number;
}

const timeMs = (t: temporal.api.history.v1.IHistoryEvent['eventTime']): number => (t ? Number(t.seconds ?? 0) * 1000 + Math.floor((t.nanos ?? 0) / 1e6) : 0);

async function decode(client: Client, payloads: temporal.api.common.v1.IPayload[] | null | undefined): Promise<unknown[]> {
  // as the client decodes a result: through its codecs, last to first, then its payload converter
  const { payloadConverter, payloadCodecs } = client.workflow.options.loadedDataConverter;
  let decoded = payloads ?? [];
  for (const codec of [...payloadCodecs].reverse()) decoded = await codec.decode(decoded);
  return arrayFromPayloads(payloadConverter, decoded);
}

const asRecord = (v: unknown): Record<string, unknown> => (v && typeof v === 'object' ? (v as Record<string, unknown>) : {});

/**
 * The regular activities of one turn in a run's history, in the order they were scheduled:
 * those whose input names the turn (`turnId`), and the approvals' settlements (by approval id).
 * Local activities (an inline turn's delivery and panel) are not read: the reply comes from the
 * transcript.
 */
export async function turnRunActivities(client: Client, workflowId: string, runId: string | undefined, turnId: string, recorded?: temporal.api.history.v1.IHistory): Promise<TurnActivity[]> {
  const history = recorded ?? (await client.workflow.getHandle(workflowId, runId).fetchHistory());
  const scheduled = new Map<string, TurnActivity>();
  const out: TurnActivity[] = [];
  const approvalIds = new Set<string>();
  for (const e of (history.events ?? []) as HistoryEvent[]) {
    const s = e.activityTaskScheduledEventAttributes;
    if (s) {
      const type = s.activityType?.name ?? '';
      const input = asRecord((await decode(client, s.input?.payloads))[0]);
      const mine = input.turnId === turnId || (type === 'settleApproval' && approvalIds.has(String(input.approvalId)));
      if (!mine) continue;
      const a: TurnActivity = { type, input, scheduledAtMs: timeMs(e.eventTime) };
      scheduled.set(String(e.eventId), a);
      out.push(a);
      continue;
    }
    const c = e.activityTaskCompletedEventAttributes;
    if (c) {
      const a = scheduled.get(String(c.scheduledEventId));
      if (!a) continue;
      a.result = asRecord((await decode(client, c.result?.payloads))[0]);
      a.completedAtMs = timeMs(e.eventTime);
      if (a.type === 'requestApproval' && typeof a.result.approvalId === 'string') approvalIds.add(a.result.approvalId);
    }
  }
  return out;
}

/** A recorded tool call: what the model asked, what the policy said and what it returned. */
export interface RecordedToolCall {
  id: string;
  name: string;
  input: unknown;
  /** canonicalJson(input): what calls are matched by. */
  args: string;
  /** The approval policy of the time asked an admin. */
  waited: boolean;
  /** How its approval was settled (approved, denied, expired, cancelled), when one was asked. */
  decision?: string;
  /** It ran (no refusal): its result is what the tool returned. */
  ran: boolean;
  /** The tool reported success. */
  ok: boolean;
  /** The text the model was told (the tool result's text). */
  resultText: string;
  resultHash?: string;
}

export interface RecordedStep {
  step: number;
  usage: TokenUsage;
  latencyMs: number;
  outputHash?: string;
  messageHash?: string;
  toolCalls: ToolCallRef[];
}

export interface RecordedTurn {
  replayable: true;
  turnId: string;
  sessionId: string;
  conversation: ConversationKey;
  workflowId: string;
  runId: string;
  /** The turn as the session ran it (no progress panel, no activity queue: the replay sets those). */
  turnInput: TurnInput;
  steps: RecordedStep[];
  toolCalls: RecordedToolCall[];
  reply: string;
  /** How the turn ended: its end receipt's outcome (`replied`, `notice`, `budget-refused`, ...), `stopped` (by /stop), or `unfinished`. */
  outcome: string;
  /** Steering that arrived while the turn ran (docs/replay.md): given to the replay before the step that took it in. */
  steering: RecordedSteering[];
  /** The turn was stopped (/stop) in this step: in its model call (`inFlight`), or after it (waiting for an approval, running a tool). */
  stop?: { step: number; inFlight: boolean };
  model: string;
  usage: TokenUsage;
  /** The model steps' time (scheduled to completed), summed. */
  latencyMs: number;
}

/** Steering the record shows taken in by model step `beforeStep` (it arrived while the step before ran). */
export interface RecordedSteering {
  beforeStep: number;
  texts: string[];
}

/**
 * The steering of a turn's model steps (their inputs' `steers`, cumulative): what the first step
 * started with, and what each later step took in that the one before had not.
 */
export function steeringOf(acts: TurnActivity[]): { initial: string[]; later: RecordedSteering[] } {
  const steps = acts.filter((a) => a.type === 'modelStep');
  const steersOf = (a: TurnActivity | undefined) => (Array.isArray(a?.input.steers) ? (a.input.steers as unknown[]).map(String) : []);
  const initial = steersOf(steps[0]);
  const later: RecordedSteering[] = [];
  let seen = initial.length;
  for (const a of steps.slice(1)) {
    const all = steersOf(a);
    if (all.length > seen) later.push({ beforeStep: Number(a.input.step ?? 0), texts: all.slice(seen) });
    seen = Math.max(seen, all.length);
  }
  return { initial, later };
}

export type RecordedTurnResult = RecordedTurn | { replayable: false; turnId: string; reason: string };

interface StartReceipt {
  workflowId: string;
  runId: string;
}

const ZERO: TokenUsage = { input: 0, output: 0, total: 0 };
const usageOf = (v: unknown): TokenUsage => {
  const u = asRecord(v);
  return { input: Number(u.input ?? 0), output: Number(u.output ?? 0), total: Number(u.total ?? 0) };
};
const addUsage = (a: TokenUsage, b: TokenUsage): TokenUsage => ({ input: a.input + b.input, output: a.output + b.output, total: a.total + b.total });

/** The blob hashes a turn's record refers to. */
function referencedBlobs(acts: TurnActivity[]): string[] {
  const hashes = new Set<string>();
  for (const a of acts) {
    for (const v of [a.result?.outputHash, a.result?.messageHash, a.result?.resultHash, a.input.messageHash, a.input.draftHash]) if (typeof v === 'string') hashes.add(v);
    for (const s of (a.input.scratch as ScratchRef[] | undefined) ?? []) hashes.add(s.hash);
  }
  return [...hashes];
}

/** The hashes among `hashes` that the blob store no longer has (read from the database, not the process's cache). */
export async function missingBlobs(db: Db, hashes: string[]): Promise<string[]> {
  if (hashes.length === 0) return [];
  const rows = await db.blob.findMany({ where: { hash: { in: hashes } }, select: { hash: true } });
  const have = new Set(rows.map((r) => r.hash));
  return hashes.filter((h) => !have.has(h));
}

/** The text of a tool result message blob (`toolResultMessage`). */
function toolResultText(json: string): string {
  const m = asRecord(JSON.parse(json));
  const part = asRecord(Array.isArray(m.content) ? m.content[0] : undefined);
  const out = asRecord(part.output);
  return typeof out.value === 'string' ? out.value : JSON.stringify(out.value ?? '');
}

/** The tool calls of a stored assistant message, by id. */
async function callsOf(db: Db, messageHash: string): Promise<Map<string, { name: string; input: unknown }>> {
  const m = asRecord(JSON.parse(await getBlobText(db, messageHash)));
  const out = new Map<string, { name: string; input: unknown }>();
  for (const p of Array.isArray(m.content) ? m.content : []) {
    const part = asRecord(p);
    if (part.type === 'tool-call') out.set(String(part.toolCallId), { name: String(part.toolName), input: part.input });
  }
  return out;
}

/** The tool calls of a turn's activities, with their inputs, verdicts, approvals and results. */
export async function toolCallsOf(db: Db, acts: TurnActivity[]): Promise<RecordedToolCall[]> {
  const calls: RecordedToolCall[] = [];
  const requested = new Map<string, string>(); // toolCallId -> approval id
  const settled = new Map<string, string>(); // approval id -> decision
  for (const a of acts) {
    if (a.type === 'requestApproval' && typeof a.result?.approvalId === 'string') requested.set(String(a.input.toolCallId), a.result.approvalId);
    if (a.type === 'settleApproval') settled.set(String(a.input.approvalId), String(a.input.decision));
  }
  const messages = new Map<string, Map<string, { name: string; input: unknown }>>();
  for (const a of acts) {
    if (a.type !== 'runTool' || !a.result) continue;
    const messageHash = String(a.input.messageHash);
    let calls0 = messages.get(messageHash);
    if (!calls0) messages.set(messageHash, (calls0 = await callsOf(db, messageHash)));
    const id = String(a.input.toolCallId);
    const call = calls0.get(id);
    if (!call) continue;
    const resultHash = typeof a.result.resultHash === 'string' ? a.result.resultHash : undefined;
    const approvalId = requested.get(id);
    const decision = approvalId ? settled.get(approvalId) : undefined;
    calls.push({
      id,
      name: call.name,
      input: call.input,
      args: canonicalJson(call.input ?? {}),
      waited: approvalId !== undefined,
      ...(decision ? { decision } : {}),
      ran: a.input.refused === undefined,
      ok: a.result.ok === true,
      resultText: resultHash ? toolResultText(await getBlobText(db, resultHash)) : '',
      ...(resultHash ? { resultHash } : {}),
    });
  }
  return calls;
}

/** The model steps of a turn's activities (completed ones), in order. */
export function stepsOf(acts: TurnActivity[]): RecordedStep[] {
  return acts
    .filter((a) => a.type === 'modelStep' && a.result)
    .map((a) => {
      const r = a.result!;
      return {
        step: Number(a.input.step ?? 0),
        usage: usageOf(r.usage),
        latencyMs: Math.max(0, (a.completedAtMs ?? a.scheduledAtMs) - a.scheduledAtMs),
        ...(typeof r.outputHash === 'string' ? { outputHash: r.outputHash } : {}),
        ...(typeof r.messageHash === 'string' ? { messageHash: r.messageHash } : {}),
        toolCalls: Array.isArray(r.toolCalls) ? (r.toolCalls as ToolCallRef[]) : [],
      };
    });
}

async function startReceipt(db: Db, turnId: string): Promise<StartReceipt | undefined> {
  const [r] = await receiptsByKeys(db, [`${turnId}:start`]);
  return r?.workflowId && r.runId ? { workflowId: r.workflowId, runId: r.runId } : undefined;
}

/**
 * Everything a replay needs of the past turn `turnId` (a chat or an objective turn), or why it
 * cannot be replayed. Reads; writes nothing.
 */
export async function recordedTurn(db: Db, client: Client, turnId: string, archive?: HistoryArchive): Promise<RecordedTurnResult> {
  const no = (reason: string): RecordedTurnResult => ({ replayable: false, turnId, reason });
  const start = await startReceipt(db, turnId);
  if (!start) return no(`no turn.start receipt for turn ${turnId}: not a turn Steward ran, or its receipts were removed`);
  let acts: TurnActivity[];
  try {
    acts = await turnRunActivities(client, start.workflowId, start.runId, turnId);
  } catch (err) {
    const msg = (err as Error).message;
    if (!(err instanceof WorkflowNotFoundError) && !/not found/i.test(msg)) return no(`its run could not be read: ${msg}`);
    const kept = await archive?.history(start.workflowId, start.runId);
    if (!kept) return no(`the run ${start.workflowId} (${start.runId}) is no longer in Temporal (past its retention)${archive ? ' nor in the archive of recorded histories' : ''}`);
    try {
      acts = await turnRunActivities(client, start.workflowId, start.runId, turnId, kept);
    } catch (e) {
      return no(`its run's recorded history could not be read: ${(e as Error).message}`);
    }
  }
  const first = acts.find((a) => a.type === 'modelStep');
  if (!first) return no(`the run ${start.workflowId} (${start.runId}) has no model step of this turn`);
  const missing = await missingBlobs(db, referencedBlobs(acts));
  if (missing.length > 0) return no(`blobs pruned: ${missing.length} of the turn's stored messages are gone from the blob store (${missing.slice(0, 3).join(', ')}${missing.length > 3 ? ', ...' : ''})`);
  const inp = first.input;
  const keys = Array.isArray(inp.inbound) ? inp.inbound.map(String) : [];
  const rows = await messagesByKeys(db, keys);
  if (rows.length < keys.length) return no(`${keys.length - rows.length} of the turn's inbound messages are gone from the transcript`);
  const inbound: InboundRef[] = rows.map((m) => ({ key: m.key, user: m.user ?? '', at: m.at, ...(m.identityId ? { identityId: m.identityId } : {}) }));
  const last = inbound.at(-1);
  const settings = asRecord(inp.settings) as unknown as SessionSettings;
  const conversation = asRecord(inp.conversation) as unknown as ConversationKey;
  const steps = stepsOf(acts);
  const toolCalls = await toolCallsOf(db, acts);
  const delivered = await messageByKey(db, replyKey(turnId));
  const lastStep = steps.at(-1);
  const reply = delivered?.text ?? (lastStep?.outputHash && lastStep.toolCalls.length === 0 ? await getBlobText(db, lastStep.outputHash) : '');
  const [end] = await receiptsByKeys(db, [`${turnId}:end`]);
  const endData = asRecord(end?.data);
  const maxSteps = Math.max(steps.length, 1);
  const steering = steeringOf(acts);
  // a stopped turn writes no end receipt; its notice is in the transcript under `<turn>:stopped`
  const stopped = !end && (await messageByKey(db, stoppedKey(turnId))) !== undefined;
  const lastModelStep = acts.filter((a) => a.type === 'modelStep').at(-1);
  const outcome = end ? (typeof endData.outcome === 'string' ? endData.outcome : endData.kind === 'notice' ? 'notice' : 'replied') : stopped ? 'stopped' : 'unfinished';
  return {
    replayable: true,
    turnId,
    sessionId: String(inp.sessionId),
    conversation,
    workflowId: start.workflowId,
    runId: start.runId,
    turnInput: {
      sessionId: String(inp.sessionId),
      turnId,
      conversation,
      inbound,
      workingSet: asRecord(inp.workingSet) as unknown as WorkingSet,
      settings,
      // the steering the turn started with (later steering is not replayed: docs/replay.md); its
      // steerer is not in history's step input, so it is the batch's last sender: the requester
      // set (an MCP tool's approval by role) stays the recorded senders'
      steers: steering.initial.map((text) => ({ text, by: last?.user ?? 'replay', ...(last?.identityId ? { byId: last.identityId } : {}) })),
      maxSteps,
    },
    steps,
    toolCalls,
    reply,
    outcome,
    steering: steering.later,
    ...(stopped && lastModelStep ? { stop: { step: Number(lastModelStep.input.step ?? 1), inFlight: lastModelStep.result === undefined } } : {}),
    model: settings.model,
    usage: steps.reduce((u, s) => addUsage(u, s.usage), ZERO),
    latencyMs: steps.reduce((n, s) => n + s.latencyMs, 0),
  };
}
