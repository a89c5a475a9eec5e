/**
 * `steward trace <message-or-run-id>`: one message's path through Steward (ingress, the turn,
 * its model calls, tools, approvals and delivery), rebuilt from the audit receipts in the
 * database and the Temporal history of the runs involved, as one timeline ordered by time.
 *
 * What it accepts:
 * - an inbound message: the platform's message id (as the ingress receipt records it) or the
 *   transcript key `in:<platform>:<account>:<chat>:<message id>`;
 * - a turn id (`<session id>:turn:<n>:<epoch>`), whether the turn ran inside its session
 *   (chat turns since the patch `steward-inline-turn`) or as its own turn workflow;
 * - a workflow id (any Steward workflow's: a session, an objective run's turn, a repo change);
 * - a run id.
 *
 * A chat turn runs inside the session workflow: its path is the part of the session run's
 * history that belongs to it (the inbound signals of its messages, its activities, found by
 * the turn id in their inputs, the local-activity markers of its delivery and progress panel,
 * the steering and approval updates and the /stop that reached it while it ran), with its
 * receipts (`data.turnId`, keys `<turn id>:...`, its approvals'). Turns that ran as their own
 * workflow (objective runs, and chat turns of sessions from before that patch) are traced as
 * that workflow.
 *
 * A message is matched to its turn through the turn's input (its inbound transcript keys: the
 * turn workflow's start input, or the inline turn's first model step input), read from the
 * history with the client's data converter; when the history cannot be read the first turn
 * of the session that started after the message is taken, and the trace says so.
 */
import type { Client } from '@temporalio/client';
import { arrayFromPayloads, WorkflowNotFoundError } from '@temporalio/common';
import protoModule, { type temporal } from '@temporalio/proto';
import { z } from 'zod';
import type { Db } from '../domain/db.js';
import * as store from '../domain/store/trace.js';
import { approvalIdFor } from '../common/ids.js';

// @temporalio/proto is CommonJS: under ESM its namespace arrives as the default export
const EventType = protoModule.temporal.api.enums.v1.EventType;

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;
type ReceiptRow = store.ReceiptRow;

export const TraceEntrySchema = z.object({
  at: z.string(),
  /** Milliseconds since the first entry of the timeline. */
  ms: z.number().int().nonnegative(),
  source: z.enum(['receipt', 'history']),
  /** A receipt kind (`ingress`, `model.call`, ...) or a history step (`workflow.started`, `activity.completed`, `update.accepted`, ...). */
  kind: z.string(),
  summary: z.string(),
  workflowId: z.string().optional(),
  runId: z.string().optional(),
  receiptId: z.number().int().optional(),
  eventId: z.number().int().optional(),
  /** Activities: scheduled to closed; timers: their duration. */
  durationMs: z.number().int().nonnegative().optional(),
  data: z.unknown().optional(),
});
export type TraceEntry = z.infer<typeof TraceEntrySchema>;

export const TraceRunSchema = z.object({
  workflowId: z.string(),
  runId: z.string(),
  workflowType: z.string().optional(),
  status: z.string().optional(),
  uiUrl: z.string().optional(),
  /** Whether the run's history was read from Temporal. */
  history: z.boolean(),
});
export type TraceRun = z.infer<typeof TraceRunSchema>;

/** The turn a message led to (or a turn id names): where it ran. */
export const TraceTurnSchema = z.object({
  turnId: z.string(),
  /** The workflow it ran in: its session's (inline) or its own turn workflow. */
  workflowId: z.string(),
  runId: z.string(),
  /** Whether it ran inside the session workflow (no workflow of its own). */
  inline: z.boolean(),
  /** The transcript keys of the messages it took in, when its input could be read. */
  inbound: z.array(z.string()).optional(),
});
export type TraceTurn = z.infer<typeof TraceTurnSchema>;

export const TraceSchema = z.object({
  query: z.string(),
  matched: z.enum(['message', 'turn', 'workflow', 'run']),
  message: z
    .object({ key: z.string(), messageId: z.string().optional(), sessionId: z.string().nullable(), at: z.string(), command: z.boolean() })
    .optional(),
  turn: TraceTurnSchema.optional(),
  runs: z.array(TraceRunSchema),
  notes: z.array(z.string()),
  timeline: z.array(TraceEntrySchema),
});
export type Trace = z.infer<typeof TraceSchema>;

export class TraceNotFoundError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TraceNotFoundError';
  }
}

export interface TraceOptions {
  db: Db;
  /** The Temporal client (with Steward's data converter, so inputs can be decoded); without it the trace uses receipts only. */
  client?: Client;
  namespace: string;
  /** Base URL of the Temporal UI, for run links. */
  uiBase?: string;
  /** Narrow a platform message id to one chat (its chat id or session id). */
  chat?: string;
  /** Keep the receipts' and events' raw data in the entries (the JSON output). */
  withData?: boolean;
}

interface Pending {
  atMs: number;
  entry: Omit<TraceEntry, 'at' | 'ms'>;
  /** Tie-break of entries at the same millisecond: receipts of one run in id order, events in event order. */
  order: number;
}

const MAX_TURN_CANDIDATES = 10;
const MAX_RUNS = 10;

function tsMs(ts: { seconds?: number | { toNumber(): number } | null; nanos?: number | null } | null | undefined): number | undefined {
  if (!ts) return undefined;
  const s = ts.seconds == null ? 0 : typeof ts.seconds === 'number' ? ts.seconds : ts.seconds.toNumber();
  return s * 1000 + Math.floor((ts.nanos ?? 0) / 1e6);
}

function longNum(v: number | { toNumber(): number } | null | undefined): number {
  return v == null ? 0 : typeof v === 'number' ? v : v.toNumber();
}

function eventName(t: HistoryEvent['eventType']): string {
  return (typeof t === 'number' ? EventType[t] : String(t ?? '')) ?? 'EVENT_TYPE_UNSPECIFIED';
}

function parseData(r: ReceiptRow): Record<string, unknown> {
  try {
    const v = JSON.parse(r.data) as unknown;
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : { value: v };
  } catch {
    return { raw: r.data };
  }
}

const str = (v: unknown): string => (typeof v === 'string' ? v : v === undefined || v === null ? '' : JSON.stringify(v));

/** One line about a receipt, by kind. */
export function describeReceipt(kind: string, d: Record<string, unknown>, actor?: string | null): string {
  const usage = d.usage as { total?: number } | undefined;
  switch (kind) {
    case 'ingress':
      return `message ${str(d.messageId)} from ${actor ?? '?'} (${str(d.platform)} chat ${str(d.chatId)}, ${str(d.chars)} chars${d.command ? ', a command' : ''})`;
    case 'command':
      return `command /${str(d.command)}${d.reply ? ` answered: ${str(d.reply).slice(0, 80)}` : ''}`;
    case 'turn.start':
      return `turn ${str(d.turnId)} started (model ${str(d.model)}, ${str(d.inbound)} message(s))`;
    case 'model.call':
      return d.error
        ? `model step ${str(d.step)} attempt ${str(d.attempt)} failed in ${str(d.ms)} ms: ${str(d.error)}`
        : `model step ${str(d.step)} attempt ${str(d.attempt)}: ${str(d.model)} ${str(d.finishReason)}, ${usage?.total ?? 0} tokens, ${str(d.ms)} ms${Array.isArray(d.toolCalls) ? `, calls ${d.toolCalls.join(', ')}` : ''}`;
    case 'tool.call':
      return `tool ${str(d.tool)} (${str(d.toolCallId)}) ${d.ok ? 'ok' : 'not ok'}${d.refused ? `: ${str(d.refused)}` : d.invalid ? `: ${str(d.invalid)}` : ''}`;
    case 'approval.requested':
      return `approval ${str(d.approvalId)} requested: ${str(d.summary)} (${str(d.notified)} admin post(s), deadline ${str(d.deadline)})`;
    case 'approval.decision':
      return `approval ${str(d.approvalId)} ${str(d.decision)} by ${str(d.by)}${d.reason ? `: ${str(d.reason)}` : ''}`;
    case 'approval.refused':
      return `approval ${str(d.approvalId)}: a decision was refused (${str(d.why)})`;
    case 'action.started':
      return `action ${str(d.tool)} started (approval ${str(d.approvalId)})`;
    case 'action.result':
      return `action ${str(d.tool)} finished${d.ok === false ? ' (failed)' : ''}`;
    case 'delivery':
      return `${str(d.kind)} ${d.sent ? 'delivered' : 'NOT delivered'} to ${str(d.platform)} chat ${str(d.chatId)} (${str(d.chars)} chars, ${str(d.parts)} part(s))${d.failed ? `: ${str(d.failed)}` : ''}`;
    case 'turn.end':
      return `turn ended with a ${str(d.kind)} (${str(d.steps)} step(s), ${usage?.total ?? 0} tokens)`;
    default: {
      const text = JSON.stringify(d);
      return `${kind}: ${text.length > 160 ? `${text.slice(0, 157)}...` : text}`;
    }
  }
}

function uiLink(base: string | undefined, namespace: string, workflowId: string, runId: string): string | undefined {
  if (!base) return undefined;
  return `${base.replace(/\/$/, '')}/namespaces/${encodeURIComponent(namespace)}/workflows/${encodeURIComponent(workflowId)}/${encodeURIComponent(runId)}/history`;
}

function isNotFound(err: unknown): boolean {
  if (err instanceof WorkflowNotFoundError) return true;
  const code = (err as { code?: number }).code;
  return code === 5 || /not found/i.test(String((err as Error).message ?? err));
}

function receiptEntry(r: ReceiptRow, withData: boolean): Pending {
  const d = parseData(r);
  return {
    atMs: r.createdAt.getTime(),
    order: r.id,
    entry: {
      source: 'receipt',
      kind: r.kind,
      summary: describeReceipt(r.kind, d, r.actor),
      ...(r.workflowId ? { workflowId: r.workflowId } : {}),
      ...(r.runId ? { runId: r.runId } : {}),
      receiptId: r.id,
      ...(withData ? { data: d } : {}),
    },
  };
}

/** The history of one run (events and the decoded start input), or why it could not be read. */
async function readHistory(client: Client, workflowId: string, runId: string): Promise<{ events: HistoryEvent[] } | { error: string }> {
  try {
    const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
    return { events: history.events ?? [] };
  } catch (err) {
    return { error: isNotFound(err) ? 'not found in Temporal (past its retention, or another namespace)' : (err as Error).message };
  }
}

async function decodeArgs(client: Client, payloads: temporal.api.common.v1.IPayload[] | null | undefined): Promise<unknown[]> {
  // as the client decodes a result: through its codecs, last to first, then its payload converter
  const { payloadConverter, payloadCodecs } = client.workflow.options.loadedDataConverter;
  let decoded = payloads ?? [];
  for (const codec of [...payloadCodecs].reverse()) decoded = await codec.decode(decoded);
  return arrayFromPayloads(payloadConverter, decoded);
}

/** One payload decoded with the client's data converter (undefined when there is none or it cannot be decoded). */
async function decodeOne(client: Client, payload: temporal.api.common.v1.IPayload | null | undefined): Promise<unknown> {
  if (!payload) return undefined;
  try {
    return (await decodeArgs(client, [payload]))[0];
  } catch {
    return undefined;
  }
}

/** The summary an event carries for the Temporal UI (activities and local activities of inline turns: `Turn 3: reply`). */
async function userSummary(client: Client, e: HistoryEvent): Promise<string | undefined> {
  const v = await decodeOne(client, e.userMetadata?.summary);
  return typeof v === 'string' && v ? v : undefined;
}

interface LocalActivityMarker {
  type: string;
  attempt: number;
}

/** A local activity's marker (`core_local_activity`): its activity type and attempt, from the marker data. */
async function localActivityOf(client: Client, e: HistoryEvent): Promise<LocalActivityMarker | undefined> {
  const a = e.markerRecordedEventAttributes;
  if (a?.markerName !== 'core_local_activity') return undefined;
  const d = (await decodeOne(client, a.details?.data?.payloads?.[0])) as Record<string, unknown> | undefined;
  if (!d || typeof d !== 'object') return { type: 'local activity', attempt: 1 };
  return { type: typeof d.activity_type === 'string' ? d.activity_type : 'local activity', attempt: typeof d.attempt === 'number' ? d.attempt : 1 };
}

/** The turn input's inbound transcript keys (undefined when it cannot be read). */
async function inboundKeysOf(client: Client, events: HistoryEvent[]): Promise<string[] | undefined> {
  const started = events.find((e) => e.eventType === EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED);
  const payloads = started?.workflowExecutionStartedEventAttributes?.input?.payloads;
  if (!payloads?.length) return undefined;
  try {
    const [input] = await decodeArgs(client, payloads);
    const inbound = (input as { inbound?: Array<{ key?: unknown }> } | undefined)?.inbound;
    return Array.isArray(inbound) ? inbound.map((m) => String(m.key)) : undefined;
  } catch {
    return undefined;
  }
}

const CLOSE_TYPES = new Set<unknown>([
  EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
  EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
  EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
  EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
  EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
  EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
]);

/** The status a run's closing event gives it (`completed`, `continued-as-new`, ...); undefined for any other event. */
function closedStatus(e: HistoryEvent): string | undefined {
  if (!CLOSE_TYPES.has(e.eventType)) return undefined;
  return eventName(e.eventType).replace('EVENT_TYPE_WORKFLOW_EXECUTION_', '').toLowerCase().replaceAll('_', '-');
}

/** History events as timeline entries: the run's start and end, activities, timers, signals, updates, children. */
async function historyEntries(client: Client, workflowId: string, runId: string, events: HistoryEvent[], withData: boolean): Promise<{ entries: Pending[]; workflowType?: string; status: string }> {
  const out: Pending[] = [];
  const scheduled = new Map<number, { type: string; activityId: string; at: number; startedAt?: number; attempt?: number; label?: string }>();
  const timers = new Map<number, { timerId: string; at: number }>();
  const updates = new Map<number, string>();
  let workflowType: string | undefined;
  let status = 'running';
  const ref = { workflowId, runId };
  const push = (e: HistoryEvent, kind: string, summary: string, extra: Partial<TraceEntry> = {}) => {
    const at = tsMs(e.eventTime);
    if (at === undefined) return;
    const eventId = longNum(e.eventId);
    out.push({ atMs: at, order: eventId, entry: { source: 'history', kind, summary, ...ref, eventId, ...extra } });
  };
  for (const e of events) {
    const id = longNum(e.eventId);
    const at = tsMs(e.eventTime) ?? 0;
    switch (e.eventType) {
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED: {
        const a = e.workflowExecutionStartedEventAttributes;
        workflowType = a?.workflowType?.name ?? undefined;
        const parent = a?.parentWorkflowExecution?.workflowId;
        push(e, 'workflow.started', `${workflowType ?? 'workflow'} started on task queue ${a?.taskQueue?.name ?? '?'}${parent ? ` (child of ${parent})` : ''}${a?.attempt && a.attempt > 1 ? `, attempt ${a.attempt}` : ''}`);
        break;
      }
      case EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: {
        const a = e.activityTaskScheduledEventAttributes;
        const type = a?.activityType?.name ?? 'activity';
        const label = await userSummary(client, e);
        scheduled.set(id, { type, activityId: a?.activityId ?? '', at, ...(label ? { label } : {}) });
        push(e, 'activity.scheduled', `${type} scheduled (activity ${a?.activityId ?? '?'})${label ? `: ${label}` : ''}`);
        break;
      }
      case EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED: {
        const a = e.activityTaskStartedEventAttributes;
        const s = scheduled.get(longNum(a?.scheduledEventId));
        if (s) {
          s.startedAt = at;
          s.attempt = a?.attempt ?? 1;
        }
        break;
      }
      case EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
      case EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
      case EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
      case EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: {
        const a =
          e.activityTaskCompletedEventAttributes ?? e.activityTaskFailedEventAttributes ?? e.activityTaskTimedOutEventAttributes ?? e.activityTaskCanceledEventAttributes;
        const s = scheduled.get(longNum(a?.scheduledEventId));
        const outcome =
          e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED ? 'completed' : e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED ? 'failed' : e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT ? 'timed-out' : 'canceled';
        const failure = e.activityTaskFailedEventAttributes?.failure?.message ?? e.activityTaskTimedOutEventAttributes?.failure?.message;
        const total = s ? Math.max(0, at - s.at) : undefined;
        const ran = s?.startedAt !== undefined ? Math.max(0, at - s.startedAt) : undefined;
        push(
          e,
          `activity.${outcome}`,
          `${s?.type ?? 'activity'} ${outcome}${total !== undefined ? ` after ${total} ms` : ''}${ran !== undefined && s?.startedAt !== s?.at ? ` (${ran} ms running)` : ''}${s?.attempt && s.attempt > 1 ? `, attempt ${s.attempt}` : ''}${s?.label ? ` [${s.label}]` : ''}${failure ? `: ${failure}` : ''}`,
          total !== undefined ? { durationMs: total } : {},
        );
        break;
      }
      case EventType.EVENT_TYPE_TIMER_STARTED: {
        const a = e.timerStartedEventAttributes;
        timers.set(id, { timerId: a?.timerId ?? '', at });
        break;
      }
      case EventType.EVENT_TYPE_TIMER_FIRED: {
        const t = timers.get(longNum(e.timerFiredEventAttributes?.startedEventId));
        push(e, 'timer.fired', `timer ${t?.timerId ?? '?'} fired`, t ? { durationMs: Math.max(0, at - t.at) } : {});
        break;
      }
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED: {
        const a = e.workflowExecutionSignaledEventAttributes;
        let args: unknown[] | undefined;
        try {
          args = withData || a?.signalName === 'inbound' ? await decodeArgs(client, a?.input?.payloads) : undefined;
        } catch {
          args = undefined;
        }
        const key = a?.signalName === 'inbound' ? (args?.[0] as { key?: unknown } | undefined)?.key : undefined;
        push(e, 'signal', `signal ${a?.signalName ?? '?'} received${typeof key === 'string' ? ` (message ${key})` : ''}`, withData && args ? { data: args } : {});
        break;
      }
      case EventType.EVENT_TYPE_MARKER_RECORDED: {
        // local activities (an inline turn's delivery and progress panel); patch markers are noise here
        const la = await localActivityOf(client, e);
        if (!la) break;
        const failure = e.markerRecordedEventAttributes?.failure?.message;
        const label = await userSummary(client, e);
        const outcome = failure ? 'failed' : 'completed';
        // at the marker's time: the workflow task that ran it completed after it had (the
        // marker's own times are the workflow's clock when the task started, not the activity's)
        push(e, `local-activity.${outcome}`, `${la.type} ${outcome} (local activity${label ? `: ${label}` : ''})${la.attempt > 1 ? `, attempt ${la.attempt}` : ''}${failure ? `: ${failure}` : ''}`);
        break;
      }
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED: {
        const req = e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest;
        const name = req?.input?.name ?? '?';
        updates.set(id, name);
        let detail = '';
        let args: unknown[] | undefined;
        try {
          args = await decodeArgs(client, req?.input?.args?.payloads);
          const d = args[0] as { approvalId?: unknown; decision?: unknown; byName?: unknown; key?: unknown } | undefined;
          if (d && typeof d === 'object' && 'decision' in d) detail = `: ${str(d.decision)} approval ${str(d.approvalId)}${d.byName ? ` by ${str(d.byName)}` : ''}`;
          else if (name === 'inbound' && typeof d?.key === 'string') detail = ` (message ${d.key})`;
        } catch {
          args = undefined;
        }
        push(e, 'update.accepted', `update ${name} accepted${detail}`, withData && args ? { data: args } : {});
        break;
      }
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED: {
        const a = e.workflowExecutionUpdateCompletedEventAttributes;
        const name = updates.get(longNum(a?.acceptedEventId)) ?? '?';
        push(e, 'update.completed', `update ${name} ${a?.outcome?.failure ? `failed: ${a.outcome.failure.message ?? ''}` : 'completed'}`);
        break;
      }
      case EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED: {
        const a = e.startChildWorkflowExecutionInitiatedEventAttributes;
        push(e, 'child.initiated', `child ${a?.workflowType?.name ?? 'workflow'} ${a?.workflowId ?? ''} initiated`);
        break;
      }
      case EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED:
      case EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_FAILED: {
        const a = e.childWorkflowExecutionCompletedEventAttributes ?? e.childWorkflowExecutionFailedEventAttributes;
        push(e, 'child.closed', `child ${a?.workflowExecution?.workflowId ?? ''} ${e.eventType === EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED ? 'completed' : 'failed'}`);
        break;
      }
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED:
        push(e, 'workflow.cancel-requested', `cancellation requested${e.workflowExecutionCancelRequestedEventAttributes?.cause ? `: ${e.workflowExecutionCancelRequestedEventAttributes.cause}` : ''}`);
        break;
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT:
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW: {
        status = closedStatus(e) ?? status;
        const failure = e.workflowExecutionFailedEventAttributes?.failure?.message ?? e.workflowExecutionTerminatedEventAttributes?.reason;
        const first = out[0]?.atMs;
        push(e, `workflow.${status}`, `${workflowType ?? 'workflow'} ${status}${first !== undefined ? ` after ${Math.max(0, at - first)} ms` : ''}${failure ? `: ${failure}` : ''}`);
        break;
      }
      default:
        break; // workflow tasks: noise for this view
    }
  }
  return { entries: out, ...(workflowType ? { workflowType } : {}), status };
}

const TURN_ID = /^(.+):turn:(\d+):([0-9a-f]{8})$/;

/** The label an inline turn gives its activities in the Temporal UI (`Turn 3`), from its id. */
function turnLabel(turnId: string): string | undefined {
  const m = TURN_ID.exec(turnId);
  return m ? `Turn ${m[2]}` : undefined;
}

/** The turn id a receipt belongs to (`data.turnId`, else its key `<turn id>:start`). */
function turnIdOfReceipt(r: ReceiptRow): string | undefined {
  const d = parseData(r);
  if (typeof d.turnId === 'string' && d.turnId) return d.turnId;
  return r.key?.endsWith(':start') ? r.key.slice(0, -':start'.length) : undefined;
}

/** Where a turn ran, from one of its receipts: its own turn workflow, or (inline) its session's run. */
function turnFromReceipt(r: ReceiptRow, turnId: string): TraceTurn | undefined {
  if (!r.workflowId || !r.runId) return undefined;
  return { turnId, workflowId: r.workflowId, runId: r.runId, inline: r.workflowId !== turnId };
}

type ScheduledInput = (e: HistoryEvent) => Promise<{ input?: Record<string, unknown>; unreadable: boolean }>;

/** Activity inputs of a history's ActivityTaskScheduled events, decoded once each. */
function scheduledInputs(client: Client): ScheduledInput {
  const cache = new WeakMap<HistoryEvent, Promise<{ input?: Record<string, unknown>; unreadable: boolean }>>();
  return (e) => {
    let p = cache.get(e);
    if (!p) {
      p = (async () => {
        const payload = e.activityTaskScheduledEventAttributes?.input?.payloads?.[0];
        if (!payload) return { unreadable: false };
        const v = await decodeOne(client, payload);
        return v && typeof v === 'object' && !Array.isArray(v) ? { input: v as Record<string, unknown>, unreadable: false } : { unreadable: true };
      })();
      cache.set(e, p);
    }
    return p;
  };
}

const isScheduled = (e: HistoryEvent) => e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED;

/**
 * An inline turn's inbound transcript keys: the input of its first model step in the session's
 * history. `unreadable` when an input of a model step could not be decoded.
 */
async function inlineInboundKeys(events: HistoryEvent[], turnId: string, inputOf: ScheduledInput): Promise<{ keys?: string[]; unreadable: boolean }> {
  let unreadable = false;
  for (const e of events) {
    if (!isScheduled(e) || e.activityTaskScheduledEventAttributes?.activityType?.name !== 'modelStep') continue;
    const { input, unreadable: bad } = await inputOf(e);
    if (bad) unreadable = true;
    if (input?.turnId === turnId && Array.isArray(input.inbound)) return { keys: input.inbound.map(String), unreadable: false };
  }
  return { unreadable };
}

const ACTIVITY_CLOSE_TYPES = new Set<unknown>([
  EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED,
  EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
  EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
  EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
  EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED,
  EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED,
]);
const WORKFLOW_TASK_TYPES = new Set<unknown>([
  EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
  EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
  EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
  EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
  EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
]);

function scheduledIdOf(e: HistoryEvent): number | undefined {
  const a =
    e.activityTaskStartedEventAttributes ??
    e.activityTaskCompletedEventAttributes ??
    e.activityTaskFailedEventAttributes ??
    e.activityTaskTimedOutEventAttributes ??
    e.activityTaskCanceledEventAttributes ??
    e.activityTaskCancelRequestedEventAttributes;
  return a ? longNum(a.scheduledEventId) : undefined;
}

/** Updates and signals that act on the running turn (its steering, its approvals, /stop, /new). */
const TURN_UPDATES = new Set(['steer', 'approvalDecision']);
const TURN_SIGNALS = new Set(['stop', 'newTask']);

/**
 * The events of a session run's history that belong to one inline turn. Turns run one at a
 * time, so the turn is a stretch of the history: from its first activity (and the progress
 * panel posted just before it) to its delivery (and the panel cleared after it), found by the
 * turn id in its activities' inputs (its approvals' ids in settleApproval's, its key in the
 * stopped or failed notice's) and its label in its local activities' summaries. In that
 * stretch: its activities and local activities, timers, the steering and approval updates and
 * /stop; from anywhere in the run: the inbound signals of its messages. When the inputs cannot
 * be decoded, the stretch is taken from the times of the turn's receipts (`inferred`).
 */
async function inlineTurnEvents(
  client: Client,
  events: HistoryEvent[],
  turn: { turnId: string; inbound?: string[] },
  approvalIds: Set<string>,
  inputOf: ScheduledInput,
  window?: { from: number; to: number },
): Promise<{ events: HistoryEvent[]; inferred: boolean }> {
  const { turnId } = turn;
  const label = turnLabel(turnId);
  const laType = new Map<number, string>(); // index -> local activity type
  const mine = new Set<number>(); // indexes
  const scheduledMine = new Set<number>(); // event ids
  let unreadable = false;
  for (let i = 0; i < events.length; i++) {
    const e = events[i]!;
    if (isScheduled(e)) {
      const { input, unreadable: bad } = await inputOf(e);
      if (bad) unreadable = true;
      if (!input) continue;
      const type = e.activityTaskScheduledEventAttributes?.activityType?.name;
      const belongs =
        input.turnId === turnId ||
        (type === 'settleApproval' && typeof input.approvalId === 'string' && approvalIds.has(input.approvalId)) ||
        (type === 'deliver' && typeof input.key === 'string' && input.key.startsWith(`${turnId}:`));
      if (!belongs) continue;
      mine.add(i);
      scheduledMine.add(longNum(e.eventId));
      if (type === 'requestApproval' && typeof input.toolCallId === 'string') approvalIds.add(approvalIdFor(turnId, input.toolCallId));
    } else if (ACTIVITY_CLOSE_TYPES.has(e.eventType)) {
      const sid = scheduledIdOf(e);
      if (sid !== undefined && scheduledMine.has(sid)) mine.add(i);
    } else if (e.eventType === EventType.EVENT_TYPE_MARKER_RECORDED) {
      const la = await localActivityOf(client, e);
      if (!la) continue;
      laType.set(i, la.type);
      const summary = await userSummary(client, e);
      if (label && summary?.startsWith(`${label}: `)) mine.add(i);
    }
  }
  let inferred = false;
  if (mine.size === 0 && unreadable && window) {
    // the inputs cannot be read: the stretch between the turn's first model step and its last receipt
    inferred = true;
    let lo = -1;
    let hi = -1;
    for (let i = 0; i < events.length; i++) {
      const e = events[i]!;
      const at = tsMs(e.eventTime) ?? 0;
      if (isScheduled(e) && e.activityTaskScheduledEventAttributes?.activityType?.name === 'modelStep' && at <= window.from) lo = i;
      if (at <= window.to) hi = i;
    }
    if (lo >= 0) for (let i = lo; i <= hi; i++) mine.add(i);
  }
  if (mine.size === 0) return { events: [], inferred };
  let lo = Math.min(...mine);
  let hi = Math.max(...mine);
  // the panel posted just before the first model step, and cleared just after the delivery
  while (lo > 0 && laType.get(lo - 1) === 'updateProgress') lo--;
  for (let j = hi + 1; j < events.length; j++) {
    const e = events[j]!;
    if (laType.get(j) === 'clearProgress') hi = j;
    else if (!WORKFLOW_TASK_TYPES.has(e.eventType)) break;
  }
  const inbound = new Set(turn.inbound ?? []);
  const acceptedUpdates = new Set<number>();
  const out: HistoryEvent[] = [];
  for (let i = 0; i < events.length; i++) {
    const e = events[i]!;
    const inSpan = i >= lo && i <= hi;
    switch (e.eventType) {
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED: {
        const a = e.workflowExecutionSignaledEventAttributes;
        if (a?.signalName === 'inbound') {
          if (!inbound.size) break;
          const arg = (await decodeOne(client, a.input?.payloads?.[0])) as { key?: unknown } | undefined;
          if (typeof arg?.key === 'string' && inbound.has(arg.key)) out.push(e);
        } else if (inSpan && TURN_SIGNALS.has(a?.signalName ?? '')) out.push(e);
        break;
      }
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED: {
        const input = e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input;
        // the turn's own messages, handed over by update (services/handoff.ts), wherever they are
        const mine = input?.name === 'inbound' ? inbound.size > 0 && inbound.has(str(((await decodeOne(client, input.args?.payloads?.[0])) as { key?: unknown } | undefined)?.key)) : inSpan && TURN_UPDATES.has(input?.name ?? '');
        if (mine) {
          acceptedUpdates.add(longNum(e.eventId));
          out.push(e);
        }
        break;
      }
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
        if (acceptedUpdates.has(longNum(e.workflowExecutionUpdateCompletedEventAttributes?.acceptedEventId))) out.push(e);
        break;
      case EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
      case EventType.EVENT_TYPE_TIMER_STARTED:
      case EventType.EVENT_TYPE_TIMER_FIRED:
      case EventType.EVENT_TYPE_TIMER_CANCELED:
        if (inSpan) out.push(e);
        break;
      case EventType.EVENT_TYPE_MARKER_RECORDED:
        if (inSpan && laType.has(i)) out.push(e);
        break;
      default:
        if (inSpan && ACTIVITY_CLOSE_TYPES.has(e.eventType)) out.push(e);
        break;
    }
  }
  return { events: out, inferred };
}

interface MessageMatch {
  key: string;
  ingress?: ReceiptRow;
  sessionId: string | null;
  at: Date;
  messageId?: string;
  command: boolean;
}

/** The inbound message `ref` names (transcript key or platform message id), or undefined. */
async function findMessage(db: Db, ref: string, chat: string | undefined): Promise<MessageMatch | undefined> {
  const toMatch = (r: ReceiptRow): MessageMatch => {
    const d = parseData(r);
    return {
      key: r.key?.replace(/:ingress$/, '') ?? '',
      ingress: r,
      sessionId: r.sessionId,
      at: r.createdAt,
      ...(typeof d.messageId === 'string' ? { messageId: d.messageId } : {}),
      command: d.command === true,
    };
  };
  if (ref.startsWith('in:')) {
    const r = await store.receiptByKey(db, `${ref}:ingress`);
    if (r) return toMatch(r);
    const m = await store.messageByTranscriptKey(db, ref);
    return m ? { key: m.key, sessionId: m.sessionId, at: m.createdAt, command: m.command } : undefined;
  }
  const rows = await store.ingressReceiptsNaming(db, ref, 50);
  let found = rows.filter((r) => parseData(r).messageId === ref && r.key);
  if (chat) found = found.filter((r) => r.sessionId === chat || parseData(r).chatId === chat);
  if (found.length > 1) {
    const keys = found.slice(0, 5).map((r) => r.key?.replace(/:ingress$/, '')).join(', ');
    throw new TraceNotFoundError(`The message id ${ref} is in ${found.length} chats (${keys}${found.length > 5 ? ', ...' : ''}): pass the transcript key, or --chat <chat id or session id>.`);
  }
  if (found[0]) return toMatch(found[0]);
  // no ingress receipt: the transcript alone (a message whose receipt is gone)
  const msgs = await store.inboundMessagesEndingWith(db, ref, 5);
  const exact = msgs.filter((m) => m.key.split(':').at(-1) === ref && (!chat || m.sessionId === chat || m.key.split(':')[3] === chat));
  if (exact.length > 1) throw new TraceNotFoundError(`The message id ${ref} is in ${exact.length} chats: pass the transcript key, or --chat <chat id or session id>.`);
  const m = exact[0];
  return m ? { key: m.key, sessionId: m.sessionId, at: m.createdAt, messageId: ref, command: m.command } : undefined;
}

/** Run ids of a workflow: from its receipts, else its latest run in Temporal. */
async function runsOf(db: Db, client: Client | undefined, workflowId: string): Promise<string[]> {
  const runIds = await store.runIdsOfWorkflow(db, workflowId, MAX_RUNS);
  if (runIds.length || !client) return runIds;
  try {
    const d = await client.workflow.getHandle(workflowId).describe();
    return [d.runId];
  } catch (err) {
    if (isNotFound(err)) return [];
    throw err;
  }
}

/** The workflow of a run id: from the receipts, else a visibility query. */
async function workflowOfRun(db: Db, client: Client | undefined, runId: string): Promise<string | undefined> {
  const workflowId = await store.workflowOfRunId(db, runId);
  if (workflowId) return workflowId;
  if (!client || !/^[0-9a-fA-F-]{36}$/.test(runId)) return undefined;
  for await (const wf of client.workflow.list({ query: `RunId = '${runId}'`, pageSize: 1 })) return wf.workflowId;
  return undefined;
}

/** The type and status of a run, from its whole history. */
function runInfo(events: HistoryEvent[]): { workflowType?: string; status: string } {
  const type = events[0]?.workflowExecutionStartedEventAttributes?.workflowType?.name ?? undefined;
  const last = events.at(-1);
  return { ...(type ? { workflowType: type } : {}), status: (last && closedStatus(last)) ?? 'running' };
}

/** The hint of a note about payloads that could not be decoded. */
const UNDECODABLE = 'is the payload codec key configured?';

type RunHistory = { events: HistoryEvent[] } | { error: string };

/** A trace being built: what it reads from, and what it has gathered so far (receipts each once, histories each read once, runs, notes). */
class TraceBuilder {
  readonly db: Db;
  readonly client: Client | undefined;
  readonly withData: boolean;
  readonly inputOf: ScheduledInput | undefined;
  readonly notes: string[] = [];
  readonly pending: Pending[] = [];
  readonly runs: TraceRun[] = [];
  private readonly seenReceipts = new Set<number>();
  private readonly histories = new Map<string, RunHistory>();

  constructor(readonly opts: TraceOptions) {
    this.db = opts.db;
    this.client = opts.client;
    this.withData = opts.withData ?? false;
    this.inputOf = opts.client ? scheduledInputs(opts.client) : undefined;
  }

  /** Add these receipts to the timeline (those already in it are skipped). */
  addReceipts(rows: ReceiptRow[]): void {
    for (const r of rows) {
      if (this.seenReceipts.has(r.id)) continue;
      this.seenReceipts.add(r.id);
      this.pending.push(receiptEntry(r, this.withData));
    }
  }

  /** The history of a run, read from Temporal once (or why it cannot be read). */
  async history(workflowId: string, runId: string): Promise<RunHistory> {
    const k = `${workflowId}\u0000${runId}`;
    let h = this.histories.get(k);
    if (!h) {
      h = this.client ? await readHistory(this.client, workflowId, runId) : { error: 'Temporal is not connected' };
      this.histories.set(k, h);
    }
    return h;
  }

  /** A turn's inbound transcript keys, from its own workflow's input or (inline) its first model step's; or why they cannot be read. */
  async inboundOf(t: TraceTurn): Promise<{ keys?: string[]; unreadable?: string }> {
    const h = await this.history(t.workflowId, t.runId);
    if ('error' in h) return { unreadable: h.error };
    if (!t.inline) {
      const keys = await inboundKeysOf(this.client!, h.events);
      return keys ? { keys } : { unreadable: `its input could not be decoded (${UNDECODABLE})` };
    }
    const r = await inlineInboundKeys(h.events, t.turnId, this.inputOf!);
    if (r.keys) return { keys: r.keys };
    return { unreadable: r.unreadable ? `its model step's input could not be decoded (${UNDECODABLE})` : `its first model step is not in run ${t.runId} of ${t.workflowId}` };
  }
}

/** The turn a chat message led to: the first turn of its session started after it whose input holds it (or, when inputs cannot be read, inferred as the first). */
async function turnOfMessage(b: TraceBuilder, msg: MessageMatch & { sessionId: string }): Promise<TraceTurn | undefined> {
  const candidates = await store.turnStartsAfter(b.db, msg.sessionId, msg.ingress ? { id: msg.ingress.id } : { at: msg.at }, MAX_TURN_CANDIDATES);
  const turns = candidates.flatMap((c) => {
    const id = turnIdOfReceipt(c);
    const t = id ? turnFromReceipt(c, id) : undefined;
    return t ? [t] : [];
  });
  let turn: TraceTurn | undefined;
  let unreadable: string | undefined;
  for (const t of turns) {
    const r = await b.inboundOf(t);
    if (!r.keys) {
      unreadable ??= r.unreadable;
      continue;
    }
    if (r.keys.includes(msg.key)) {
      turn = { ...t, inbound: r.keys };
      break;
    }
  }
  if (!turn && unreadable !== undefined && turns[0]) {
    turn = turns[0];
    b.notes.push(`Inferred: the turn is the first one of the session that started after the message (a turn's history could not be read: ${unreadable}).`);
  }
  if (!turn) b.notes.push(candidates.length ? 'None of the turns that started after the message took it in (yet).' : 'No turn has started for this message yet.');
  return turn;
}

/** A message's start of the trace: the message, its ingress receipt (or a note), its command receipt or the turn it led to. */
async function traceMessage(b: TraceBuilder, msg: MessageMatch): Promise<{ message: NonNullable<Trace['message']>; turn: TraceTurn | undefined }> {
  const message = { key: msg.key, ...(msg.messageId ? { messageId: msg.messageId } : {}), sessionId: msg.sessionId, at: msg.at.toISOString(), command: msg.command };
  if (msg.ingress) b.addReceipts([msg.ingress]);
  else b.notes.push('No ingress receipt for this message: its time is the transcript\'s.');
  let turn: TraceTurn | undefined;
  if (msg.command) {
    b.addReceipts(await store.receiptsByKeys(b.db, [`${msg.key}:command`]));
    b.notes.push('The message was a command: commands are answered at ingress and start no turn.');
  } else if (msg.sessionId) {
    // its turn: the first turn of the session started after it whose input holds the message
    turn = await turnOfMessage(b, { ...msg, sessionId: msg.sessionId });
  }
  return { message, turn };
}

/** What a query that names no message names: a workflow (its runs), a turn that ran inline, or a run. Throws TraceNotFoundError when none. */
async function matchNonMessage(
  b: TraceBuilder,
  query: string,
): Promise<{ matched: 'workflow' | 'turn' | 'run'; workflowId?: string; runIds: string[]; turn?: TraceTurn }> {
  const { db, client } = b;
  const asWorkflow = await runsOf(db, client, query);
  if (asWorkflow.length) return { matched: 'workflow', workflowId: query, runIds: asWorkflow };
  const t = await findInlineTurn(db, client, query, (workflowId, runId) => b.history(workflowId, runId), b.inputOf);
  if (t) return { matched: 'turn', runIds: [], turn: t };
  const wf = await workflowOfRun(db, client, query);
  if (!wf) {
    throw new TraceNotFoundError(
      `Nothing matches ${query}: it is not an inbound message id (the platform's message id or a transcript key in:<platform>:<account>:<chat>:<id>), ` +
        `nor a turn id, a workflow id or a run id known to the receipts${client ? ` or to Temporal (namespace ${b.opts.namespace})` : ' (Temporal was not consulted)'}.`,
    );
  }
  return { matched: 'run', workflowId: wf, runIds: [query] };
}

/** A turn that ran inside its session: its receipts and its approvals', the messages it took in, and its part of the session run's history. Returns the turn with its inbound keys when they were read here. */
async function traceInlineTurn(b: TraceBuilder, t: TraceTurn): Promise<TraceTurn> {
  const { db, client, opts } = b;
  let turn = t;
  // its receipts: keyed by the turn or naming it, and those of its approvals
  b.addReceipts(await store.receiptsOfTurn(db, t.turnId, t.workflowId, 10_000));
  const approvalIds = new Set(await store.approvalIdsOfTurn(db, t.turnId, 50));
  if (!t.inbound) {
    const r = await b.inboundOf(t);
    if (r.keys) turn = { ...t, inbound: r.keys };
  }
  const inbound = turn.inbound ?? [];
  // the messages it took in (a trace by message already has its own)
  if (inbound.length) b.addReceipts(await store.receiptsByKeys(db, inbound.map((k) => `${k}:ingress`)));
  const h = await b.history(t.workflowId, t.runId);
  const link = uiLink(opts.uiBase, opts.namespace, t.workflowId, t.runId);
  if ('error' in h) {
    b.notes.push(`The history of run ${t.runId} of ${t.workflowId}, where the turn ran, was not read: ${h.error}.`);
    b.runs.push({ workflowId: t.workflowId, runId: t.runId, ...(link ? { uiUrl: link } : {}), history: false });
  } else {
    const own = b.pending.filter((p) => p.entry.source === 'receipt' && p.entry.kind !== 'ingress').map((p) => p.atMs);
    const window = own.length ? { from: Math.min(...own), to: Math.max(...own) } : undefined;
    const part = await inlineTurnEvents(client!, h.events, { turnId: t.turnId, inbound }, approvalIds, b.inputOf!, window);
    if (part.inferred) b.notes.push(`Inferred: the turn's part of the session's history is taken from the times of its receipts (its activities' inputs could not be decoded: ${UNDECODABLE}).`);
    else if (part.events.length === 0) b.notes.push(`No event of run ${t.runId} of ${t.workflowId} could be told to belong to the turn.`);
    const { entries } = await historyEntries(client!, t.workflowId, t.runId, part.events, b.withData);
    b.pending.push(...entries);
    const info = runInfo(h.events);
    b.runs.push({ workflowId: t.workflowId, runId: t.runId, ...(info.workflowType ? { workflowType: info.workflowType } : {}), status: info.status, ...(link ? { uiUrl: link } : {}), history: true });
  }
  b.addReceipts(await store.approvalReceipts(db, [...approvalIds], { keyed: true }));
  return turn;
}

/**
 * Runs of a workflow (or the one run traced): their receipts, their histories and their
 * approvals' refused decisions; a turn workflow's inbound messages too. Returns the turn, set
 * here when a single turn workflow run is traced by its id.
 */
async function traceWorkflowRuns(
  b: TraceBuilder,
  wfId: string,
  runIds: string[],
  seen: { matched: Trace['matched']; message: Trace['message']; turn: TraceTurn | undefined },
): Promise<TraceTurn | undefined> {
  const { db, client, opts } = b;
  const { matched, message } = seen;
  let turn = seen.turn;
  b.addReceipts(await store.receiptsOfRuns(db, matched === 'run' ? { runIds } : { workflowId: wfId }, 10_000));
  for (const runId of runIds) {
    const h = await b.history(wfId, runId);
    const link = uiLink(opts.uiBase, opts.namespace, wfId, runId);
    if ('error' in h) {
      b.notes.push(`The history of run ${runId} of ${wfId} was not read: ${h.error}.`);
      b.runs.push({ workflowId: wfId, runId, ...(link ? { uiUrl: link } : {}), history: false });
      continue;
    }
    const { entries, workflowType, status } = await historyEntries(client!, wfId, runId, h.events, b.withData);
    b.pending.push(...entries);
    b.runs.push({ workflowId: wfId, runId, ...(workflowType ? { workflowType } : {}), status, ...(link ? { uiUrl: link } : {}), history: true });
    if (workflowType === 'turnWorkflow') {
      // a turn traced by its id: the messages it took in
      const keys = turn?.inbound ?? (await inboundKeysOf(client!, h.events));
      if (!message && keys?.length) b.addReceipts(await store.receiptsByKeys(db, keys.map((k) => `${k}:ingress`)));
      if (!turn && runIds.length === 1) turn = { turnId: wfId, workflowId: wfId, runId, inline: false, ...(keys ? { inbound: keys } : {}) };
    }
  }
  // refused decisions on its approvals
  b.addReceipts(await store.approvalReceipts(db, await store.approvalIdsOfWorkflow(db, wfId, 50), { keyed: false }));
  return turn;
}

/** The gathered entries as a timeline ordered by time (at the same millisecond: receipts first, each source in its own order), timed from the first. */
function timelineOf(pending: Pending[]): TraceEntry[] {
  pending.sort((a, b) => a.atMs - b.atMs || (a.entry.source === b.entry.source ? a.order - b.order : a.entry.source === 'receipt' ? -1 : 1));
  const t0 = pending[0]?.atMs ?? 0;
  return pending.map((p) => ({ at: new Date(p.atMs).toISOString(), ms: p.atMs - t0, ...p.entry }));
}

/** Rebuild the path of a message, a turn, a workflow or a run. Throws TraceNotFoundError when nothing matches. */
export async function buildTrace(ref: string, opts: TraceOptions): Promise<Trace> {
  const query = ref.trim();
  if (!query) throw new TraceNotFoundError('Nothing to trace: give a message id, a turn id, a workflow id or a run id.');
  const b = new TraceBuilder(opts);

  let matched: Trace['matched'];
  let message: Trace['message'];
  let turn: TraceTurn | undefined;
  let workflowId: string | undefined;
  let runIds: string[] = [];

  const msg = await findMessage(b.db, query, opts.chat);
  if (msg) {
    matched = 'message';
    ({ message, turn } = await traceMessage(b, msg));
  } else {
    ({ matched, workflowId, runIds, turn } = await matchNonMessage(b, query));
  }

  if (turn && !turn.inline) {
    // a turn that ran as its own workflow: that workflow's run is its path
    workflowId = turn.workflowId;
    runIds = [turn.runId];
  } else if (turn) {
    turn = await traceInlineTurn(b, turn);
  }

  if (workflowId) turn = await traceWorkflowRuns(b, workflowId, runIds, { matched, message, turn });

  const timeline = timelineOf(b.pending);
  return { query, matched, ...(message ? { message } : {}), ...(turn ? { turn } : {}), runs: b.runs, notes: b.notes, timeline };
}

/**
 * A turn id that is no workflow id: a turn that ran inside its session. Found by its receipts
 * (keyed `<turn id>:...`, written by its activities in the session's run), else in the recent
 * runs of the session the id names, by the turn id in their activities' inputs.
 */
async function findInlineTurn(
  db: Db,
  client: Client | undefined,
  turnId: string,
  history: (workflowId: string, runId: string) => Promise<{ events: HistoryEvent[] } | { error: string }>,
  inputOf: ScheduledInput | undefined,
): Promise<TraceTurn | undefined> {
  const m = TURN_ID.exec(turnId);
  if (!m) return undefined;
  const r = await store.firstRunReceiptOfTurn(db, turnId);
  if (r) return turnFromReceipt(r, turnId);
  const sessionId = m[1]!;
  if (!client || !inputOf || sessionId.includes("'")) return undefined;
  let scanned = 0;
  for await (const wf of client.workflow.list({ query: `WorkflowId = '${sessionId}'`, pageSize: MAX_RUNS })) {
    if (++scanned > MAX_RUNS) break;
    const h = await history(wf.workflowId, wf.runId);
    if ('error' in h) continue;
    for (const e of h.events) {
      if (!isScheduled(e)) continue;
      if ((await inputOf(e)).input?.turnId === turnId) return { turnId, workflowId: wf.workflowId, runId: wf.runId, inline: true };
    }
  }
  return undefined;
}

/** The trace as text: the runs with their UI links, then the timeline. */
export function formatTrace(t: Trace): string {
  const lines: string[] = [];
  if (t.message) {
    lines.push(`Message ${t.message.key}${t.message.sessionId ? ` (session ${t.message.sessionId})` : ''}, received ${t.message.at}`);
  } else {
    lines.push(`Trace of ${t.matched} ${t.query}`);
  }
  if (t.turn) {
    lines.push(
      t.turn.inline
        ? `Turn ${t.turn.turnId}, inside the session's run (the session's events of this turn only)`
        : `Turn ${t.turn.turnId}, its own turn workflow`,
    );
  }
  for (const r of t.runs) {
    lines.push(`Run ${r.workflowId}  run id ${r.runId}${r.workflowType ? `  ${r.workflowType}` : ''}${r.status ? ` (${r.status})` : ''}`);
    if (r.uiUrl) lines.push(`  Temporal UI: ${r.uiUrl}`);
  }
  for (const n of t.notes) lines.push(`Note: ${n}`);
  lines.push('');
  const width = Math.max(4, ...t.timeline.map((e) => `+${e.ms}`.length));
  const kindWidth = Math.max(4, ...t.timeline.map((e) => e.kind.length));
  for (const e of t.timeline) {
    lines.push(`${`+${e.ms}`.padStart(width)} ms  ${e.source === 'receipt' ? 'receipt' : 'history'}  ${e.kind.padEnd(kindWidth)}  ${e.summary}`);
  }
  if (t.timeline.length === 0) lines.push('(nothing recorded)');
  return `${lines.join('\n')}\n`;
}
