/**
 * Objectives as the API, the CLI and chat manage them: each is a database record and one
 * Temporal Schedule (cron or interval, time zone, jitter, overlap policy, catch-up window,
 * pause on failure) whose runs are `objectiveRunWorkflow`s. Create, list (next run, last
 * result), show, update, pause, resume, trigger now, backfill a time range, skip missed runs,
 * delete. Every input is validated with zod first; every change writes a receipt with who,
 * what, before and after. Event triggers (a signed webhook, a watched workspace directory, an
 * inbound email address) share one path: deduplicated by event id, payload stored, one run.
 *
 * Webhooks: Steward's own scheme signs `<X-Steward-Timestamp>.<X-Steward-Event-Id>.<raw body>`
 * (HMAC-SHA256 with the objective's secret), refused outside the tolerance window; the event id
 * is remembered for good (ObjectiveEvent), so a replay inside the window is a duplicate and one
 * outside it is refused. GitHub signs the body only, so a GitHub body seen before is a duplicate
 * whatever its delivery id. Every refused signature gets one answer, whether the name exists or not.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { realpath, stat } from 'node:fs/promises';
import { ScheduleNotFoundError, ScheduleOverlapPolicy, type Client, type ScheduleOptions, type ScheduleOptionsStartWorkflowAction } from '@temporalio/client';
import type { Logger } from 'pino';
import { putBlob, sha256Hex } from '../domain/blobs.js';
import type { Db } from '../domain/db.js';
import { z } from 'zod';
import { describeIssues } from '../common/schemas.js';
import { isUniqueViolation } from '../domain/prisma-errors.js';
import { lookupBinding } from '../domain/governance.js';
import { budgetSkipText, objectiveSpentBudget } from '../domain/objectives/runs.js';
import { receiptExists, receiptIdsByKeys, writeReceipt } from '../domain/receipts.js';
import { faultPoint } from '../common/fault-points.js';
import {
  deleteObjective,
  findGithubEventByBody,
  findInboundEmailOwner,
  findObjective,
  findObjectiveByIdOrName,
  findObjectiveByName,
  findObjectiveEvent,
  objectiveEventsBetween,
  insertObjective,
  latestObjectiveRun,
  listObjectives,
  listWatchedObjectives,
  recentObjectiveRuns,
  recordObjectiveEvent,
  setObjectivePaused,
  skipObjectiveRunsBefore,
  updateObjective,
  type NewObjectiveRow,
  type ObjectiveChanges,
  type ObjectiveEventRow,
  type ObjectiveRow,
} from '../domain/store/objectives.js';
import {
  BackfillSchema,
  DEFAULT_HOOK_TOLERANCE_MS,
  durationMs,
  EventIdSchema,
  GithubEventNameSchema,
  hookSecretProblem,
  hookSecretVariable,
  hookSignedContent,
  HookTimestampSchema,
  InternalEventIdSchema,
  NewObjectiveSchema,
  ObjectivePatchSchema,
  objectiveRunWorkflowId,
  objectiveScheduleId,
  watchPathRefusal,
  type NewObjective,
  type ObjectivePatch,
  type ObjectiveRunInput,
  type ObjectiveSchedule,
  type OverlapPolicy,
} from '../common/objectives.js';
import { objectiveRunWorkflow } from '../workflows/objectives/objective.js';
import { ChatAttr, KindAttr, PlatformAttr } from '../workflows/search-attributes.js';
import { RESUME_MAX_PAGES, RESUME_PAGE, resumeWindow, startRunOnce, type ResumeOptions } from './handoff.js';
import { ServiceInputError, type Requester } from './requests.js';
import { commandSpec, mayUse } from '../common/commands.js';
import type { Actor } from '../common/roles.js';

export interface ObjectiveServiceDeps {
  client: Client;
  db: Db;
  /** The task queue the run workflows (and their turns) run on. */
  taskQueue: string;
  /** The background queue their activities run on (never a chat worker's slots). */
  activityQueue?: string;
  maxSteps: number;
  runLink?: (workflowId: string) => string | undefined;
  /** Secrets by reference (`env:STEWARD_HOOK_NAME` -> value); default process.env. */
  secret?: (name: string) => string | undefined;
  /** How far a webhook's X-Steward-Timestamp may be from now (default 5 minutes). */
  webhookToleranceMs?: number;
  /** The clock webhook timestamps are checked against, in milliseconds (default Date.now). */
  now?: () => number;
  log?: Logger;
}

export type { Requester } from './requests.js';

/**
 * Who asks for a change: a person (an Actor with a role, as the console passes it), or the
 * operator's own call (the API token, the CLI, Steward itself), which carries no role. A person
 * must hold the `/objective` command's minimum role (operator, common/commands.ts); below it the
 * change is refused (409) before anything is read or changed.
 */
export type ObjectiveRequester = Requester | Actor;

const MANAGE_OBJECTIVES = commandSpec('objective')!;

/** Refuse a person below the role that manages objectives (409); the operator's own calls pass. */
function checkMayManage(by: ObjectiveRequester): void {
  if (!('role' in by) || mayUse(MANAGE_OBJECTIVES, by.role)) return;
  const min = MANAGE_OBJECTIVES.minRole ?? 'operator';
  throw new ObjectiveInputError(`managing objectives needs the ${min} role; you are ${/^[aeiou]/.test(by.role) ? 'an' : 'a'} ${by.role}. Nothing changed`, 409);
}

/** A pause's note (shown with the schedule in the Temporal UI and the console). */
export const PauseNoteSchema = z.string().trim().max(500, 'a note is at most 500 characters');

export class ObjectiveInputError extends ServiceInputError {
  override readonly name = 'ObjectiveInputError';
}

export interface ObjectiveView {
  id: string;
  name: string;
  prompt: string;
  chat: { platform: string; account: string; chatId: string };
  model: string | null;
  schedule: ObjectiveSchedule;
  overlap: string;
  catchupWindowMs: number;
  pauseOnFailure: boolean;
  paused: boolean;
  skipBefore: string | null;
  /** Runs on signed webhook calls (POST /hooks/objectives/{name}). */
  webhook: boolean;
  /** Its event triggers: a signed webhook, a watched workspace directory, an inbound email address. */
  triggers: { webhook: boolean; watch: string | null; email: string | null };
  nextRuns: string[];
  /**
   * Where it stands: `paused`; `skipped: budget <id> spent until <renewal>` while a model budget
   * its runs are spent for (the installation's, its own, its chat's binding's or workspace's) is
   * spent (its runs are skipped, no model is called); else `active`.
   */
  status: string;
  /** The Temporal Schedule's note (who paused or resumed it, and why), when it has one. */
  scheduleNote: string | null;
  /** The spent budget its runs are skipped for, if any (`renewsAt` null: a total, until it is raised). */
  spentBudget: { id: string; scope: string; scopeId: string | null; period: string; renewsAt: string | null } | null;
  lastRun: { id: string; scheduledAt: string | null; status: string; outcome: string | null; error: string | null; at: string } | null;
  runsTaken: number;
  scheduleId: string;
  runUrl: string | null;
  createdAt: string;
  updatedAt: string;
}

const OVERLAP: Record<OverlapPolicy, ScheduleOverlapPolicy> = {
  skip: ScheduleOverlapPolicy.SKIP,
  'buffer-one': ScheduleOverlapPolicy.BUFFER_ONE,
  'buffer-all': ScheduleOverlapPolicy.BUFFER_ALL,
  'cancel-other': ScheduleOverlapPolicy.CANCEL_OTHER,
  'terminate-other': ScheduleOverlapPolicy.TERMINATE_OTHER,
  'allow-all': ScheduleOverlapPolicy.ALLOW_ALL,
};


/** The answer to an event: a run started (202), a duplicate (200), or refused. */
export type ObjectiveEventResult = { status: 202 | 200; runId: string; duplicate: boolean } | { status: 401 | 404 | 400 | 409; error: string };

/** An event Steward observed itself (the watcher, the inbound SMTP listener). */
export interface InternalEvent {
  source: 'file' | 'email';
  /** Deterministic for the same occurrence (the same change, the same Message-ID): it deduplicates. */
  eventId: string;
  /** Stored as a JSON blob; reaches the model after the prompt as data. */
  payload: unknown;
}

/** A directory may be watched: it exists, is a directory, and neither it nor its real path is /, /proc, /sys or /dev. */
export async function checkWatchDirectory(p: string): Promise<string | undefined> {
  const refused = watchPathRefusal(p);
  if (refused) return refused;
  let real: string;
  try {
    real = await realpath(p);
    if (!(await stat(real)).isDirectory()) return `${p} is not a directory`;
  } catch {
    return `${p} does not exist`;
  }
  const viaLink = watchPathRefusal(real);
  return viaLink ? `${p} resolves to ${real}: ${viaLink}` : undefined;
}

/** A webhook request's headers, checked for shape (nothing here depends on the objective). */
type HookRequest =
  | { kind: 'steward'; signature: string; timestamp: string; at: number; eventId: string }
  | { kind: 'github'; signature: string; deliveryId: string; event: string };

const firstIssue = (e: { issues: Array<{ message: string }> }) => e.issues[0]?.message ?? '';

/** The headers of `POST /hooks/objectives/{name}`: Steward's scheme or GitHub's; a bad shape is 400, no signature 401. */
function hookRequest(header: (name: string) => string | undefined, unauthorized: ObjectiveEventResult): HookRequest | ObjectiveEventResult {
  const hub = header('x-hub-signature-256');
  if (hub !== undefined) {
    const id = EventIdSchema.safeParse(header('x-github-delivery') ?? '');
    if (!id.success) return { status: 400, error: `missing or bad X-GitHub-Delivery: ${firstIssue(id.error)}` };
    const event = GithubEventNameSchema.safeParse(header('x-github-event') ?? '');
    if (!event.success) return { status: 400, error: `missing or bad X-GitHub-Event: ${firstIssue(event.error)}` };
    return { kind: 'github', signature: hub, deliveryId: id.data, event: event.data };
  }
  const signature = header('x-steward-signature');
  if (signature === undefined) return unauthorized;
  const id = EventIdSchema.safeParse(header('x-steward-event-id') ?? '');
  if (!id.success) return { status: 400, error: `missing or bad X-Steward-Event-Id: ${firstIssue(id.error)}` };
  const timestamp = (header('x-steward-timestamp') ?? '').trim();
  const at = HookTimestampSchema.safeParse(timestamp);
  if (!at.success) return { status: 400, error: `missing or bad X-Steward-Timestamp: ${firstIssue(at.error)}` };
  return { kind: 'steward', signature, timestamp, at: at.data * 1000, eventId: id.data };
}

/** The request's signature is `sha256=` and the hex HMAC-SHA256 of what its scheme signs (constant time). */
function signatureMatches(key: string | Buffer, req: HookRequest, rawBody: string): boolean {
  const signed = req.kind === 'github' ? rawBody : hookSignedContent(req.timestamp, req.eventId, rawBody);
  const expected = createHmac('sha256', key).update(signed).digest();
  const given = /^sha256=([0-9a-f]{64})$/i.exec(req.signature.trim());
  const a = given ? Buffer.from(given[1]!, 'hex') : Buffer.alloc(expected.length);
  return timingSafeEqual(a, expected) && given !== null;
}

export function newObjectiveId(): string {
  return `obj-${randomBytes(6).toString('hex')}`;
}

/** What the service's functions share: its dependencies with their defaults filled in, and who follows changes. */
interface ServiceContext {
  deps: ObjectiveServiceDeps;
  client: Client;
  db: Db;
  readSecret: (name: string) => string | undefined;
  toleranceMs: number;
  now: () => number;
  /** Checked against when a name has no usable secret: the same work as a real check, never a match. */
  dummyKey: Buffer;
  /** The one answer to every refused signature: it says nothing about the name. */
  unauthorized: ObjectiveEventResult;
  /** Who follows changes (the workspace watcher refreshes its set). */
  listeners: Set<() => void>;
}

/** The context of one service: secrets from process.env, a 5-minute webhook tolerance and Date.now unless the deps say otherwise. */
function serviceContext(deps: ObjectiveServiceDeps): ServiceContext {
  const toleranceMs = deps.webhookToleranceMs ?? DEFAULT_HOOK_TOLERANCE_MS;
  return {
    deps,
    client: deps.client,
    db: deps.db,
    readSecret: deps.secret ?? ((n: string) => process.env[n]),
    toleranceMs,
    now: deps.now ?? Date.now,
    dummyKey: randomBytes(32),
    unauthorized: {
      status: 401,
      error: `invalid signature: expected X-Steward-Signature: sha256=<hex HMAC-SHA256 of "<X-Steward-Timestamp>.<X-Steward-Event-Id>.<body>"> made with the objective's secret within ${Math.round(toleranceMs / 1000)}s of the timestamp, or GitHub's X-Hub-Signature-256`,
    },
    listeners: new Set(),
  };
}

// --- definitions: validation and parsing

/** Why a webhook secret reference cannot be used now (its variable: STEWARD_HOOK_*, set, at least 32 bytes); undefined when it can. */
function secretProblem(ctx: ServiceContext, secretRef: string): string | undefined {
  const variable = hookSecretVariable(secretRef);
  if (!variable) return `${secretRef} is not env:STEWARD_HOOK_<NAME>`;
  return hookSecretProblem(variable, ctx.readSecret(variable));
}

/** The secret of an objective's webhook, or undefined (logged) when it cannot be used. */
function webhookSecret(ctx: ServiceContext, o: ObjectiveRow): string | undefined {
  if (!o.webhookSecretRef) return undefined;
  const problem = secretProblem(ctx, o.webhookSecretRef);
  if (problem) {
    ctx.deps.log?.warn({ objective: o.name, problem }, 'webhook call refused: the objective\'s secret cannot be used');
    return undefined;
  }
  return ctx.readSecret(hookSecretVariable(o.webhookSecretRef)!);
}

/** The trigger settings are valid: the webhook's secret is usable, the directory exists, the address belongs to no other objective. */
async function checkTriggers(ctx: ServiceContext, t: { webhookSecretRef?: string | null; watchPath?: string | null; inboundEmail?: string | null }, what: string, self?: string): Promise<void> {
  if (t.webhookSecretRef) {
    const problem = secretProblem(ctx, t.webhookSecretRef);
    if (problem) throw new ObjectiveInputError(`${what}: webhook.secretRef: ${problem}`);
  }
  if (t.watchPath) {
    const refused = await checkWatchDirectory(t.watchPath);
    if (refused) throw new ObjectiveInputError(`${what}: watch.path: ${refused}`);
  }
  if (t.inboundEmail) {
    const owner = await findInboundEmailOwner(ctx.db, t.inboundEmail);
    if (owner && owner.id !== self) throw new ObjectiveInputError(`the address ${t.inboundEmail} belongs to objective ${owner.name} already`, 409);
  }
}

/** A new objective's definition, validated, or the caller's error. */
function parseNewObjective(input: unknown): NewObjective {
  const parsed = NewObjectiveSchema.safeParse(input);
  if (!parsed.success) throw new ObjectiveInputError(`invalid objective: ${describeIssues(parsed.error)}`);
  return parsed.data;
}

/** The bot account a new objective's results go out through: `default` for the API, else from the chat's binding (which must exist). */
async function chatAccount(db: Db, n: NewObjective): Promise<string> {
  if (n.platform === 'http') return n.account ?? 'default';
  const b = await lookupBinding(db, n.platform, n.account ?? '*', n.chatId);
  if (b.kind !== 'bound') throw new ObjectiveInputError(`the ${n.platform} chat ${n.chatId} is not bound (bind it first: /bind or steward bindings add)`);
  const account = n.account ?? (b.binding.account === '*' ? '' : b.binding.account);
  if (!account) throw new ObjectiveInputError(`give the bot account of the ${n.platform} chat ${n.chatId} ("account")`);
  return account;
}

/** The record of a new objective (with a new id). */
function newObjectiveRow(n: NewObjective, account: string, by: Requester): NewObjectiveRow {
  return {
    id: newObjectiveId(),
    name: n.name,
    prompt: n.prompt,
    platform: n.platform,
    account,
    chatId: n.chatId,
    model: n.model ?? null,
    schedule: JSON.stringify(n.schedule ?? {}),
    webhookSecretRef: n.webhook?.secretRef ?? null,
    watchPath: n.watch?.path ?? null,
    inboundEmail: n.inboundEmail ?? null,
    overlap: n.overlap,
    catchupWindowMs: durationMs(n.catchupWindow)!,
    pauseOnFailure: n.pauseOnFailure,
    paused: n.paused,
    createdBy: by.id,
  };
}

/** A change to an objective, validated, or the caller's error. */
function parsePatch(input: unknown): ObjectivePatch {
  const parsed = ObjectivePatchSchema.safeParse(input);
  if (!parsed.success) throw new ObjectiveInputError(`invalid change: ${describeIssues(parsed.error)}`);
  return parsed.data;
}

/** The record's fields a change sets (only the ones it names). */
function patchChanges(p: ObjectivePatch): ObjectiveChanges {
  return {
    ...(p.prompt !== undefined ? { prompt: p.prompt } : {}),
    ...(p.schedule !== undefined ? { schedule: JSON.stringify(p.schedule) } : {}),
    ...(p.overlap !== undefined ? { overlap: p.overlap } : {}),
    ...(p.catchupWindow !== undefined ? { catchupWindowMs: durationMs(p.catchupWindow)! } : {}),
    ...(p.pauseOnFailure !== undefined ? { pauseOnFailure: p.pauseOnFailure } : {}),
    ...(p.model !== undefined ? { model: p.model } : {}),
    ...(p.watch !== undefined ? { watchPath: p.watch?.path ?? null } : {}),
    ...(p.inboundEmail !== undefined ? { inboundEmail: p.inboundEmail } : {}),
    ...(p.webhook !== undefined ? { webhookSecretRef: p.webhook?.secretRef ?? null } : {}),
  };
}

/** An objective keeps a schedule or at least one trigger. */
function checkHasScheduleOrTrigger(o: ObjectiveRow): void {
  const hasSchedule = Object.keys(JSON.parse(o.schedule) as object).length > 0;
  if (!hasSchedule && !o.webhookSecretRef && !o.watchPath && !o.inboundEmail) {
    throw new ObjectiveInputError('invalid change: the objective would have no schedule and no trigger');
  }
}

// --- schedules: the Temporal client

/** The activity queue a run names, when it is not the run's own task queue. */
function activityQueueOf(deps: ObjectiveServiceDeps): Pick<ObjectiveRunInput, 'activityQueue'> {
  return deps.activityQueue && deps.activityQueue !== deps.taskQueue ? { activityQueue: deps.activityQueue } : {};
}


/** The search attributes of an objective's runs: the Temporal UI filters them by kind and chat. */
function runAttributes(o: { platform: string; chatId: string }) {
  return [
    { key: KindAttr, value: 'objective-run' },
    { key: PlatformAttr, value: o.platform },
    { key: ChatAttr, value: o.chatId },
  ];
}
/** The objective's Temporal Schedule: its spec, the run workflow it starts, its policies and state. */
function scheduleOptions(deps: ObjectiveServiceDeps, o: ObjectiveRow): ScheduleOptions<ScheduleOptionsStartWorkflowAction<typeof objectiveRunWorkflow>> {
  const s = JSON.parse(o.schedule) as ObjectiveSchedule;
  const cron = s.cron === undefined ? [] : Array.isArray(s.cron) ? s.cron : [s.cron];
  const input: ObjectiveRunInput = { objectiveId: o.id, maxSteps: deps.maxSteps, ...activityQueueOf(deps) };
  return {
    scheduleId: objectiveScheduleId(o.id),
    spec: {
      ...(cron.length ? { cronExpressions: cron } : {}),
      ...(s.every ? { intervals: [{ every: durationMs(s.every)! }] } : {}),
      ...(s.timezone ? { timezone: s.timezone } : {}),
      ...(s.jitter ? { jitter: durationMs(s.jitter)! } : {}),
    },
    action: {
      type: 'startWorkflow',
      workflowType: objectiveRunWorkflow,
      workflowId: objectiveRunWorkflowId(o.id),
      taskQueue: deps.taskQueue,
      args: [input],
      typedSearchAttributes: runAttributes(o),
      staticSummary: `Objective ${o.name}: ${o.prompt.slice(0, 150)}`,
      staticDetails: `[Open this objective in the Steward console](/console/objectives/${encodeURIComponent(o.id)})`,
    },
    policies: { overlap: OVERLAP[o.overlap as OverlapPolicy], catchupWindow: o.catchupWindowMs, pauseOnFailure: o.pauseOnFailure },
    state: { paused: o.paused, note: o.paused ? 'paused' : 'created by Steward' },
  };
}

/** A Temporal refusal of the schedule (a bad cron, say) is the caller's error, and changes nothing. */
async function temporal<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    const msg = (err as Error).message ?? String(err);
    // the SDK checks cron fields itself (a TypeError); the server answers INVALID_ARGUMENT
    if (err instanceof TypeError || /invalid|INVALID_ARGUMENT|parse/i.test(msg)) throw new ObjectiveInputError(`Temporal refused the schedule: ${msg}`);
    throw err;
  }
}

/** Create an objective: validated, recorded, then its schedule (a refused schedule takes the record back). */
async function createObjective(ctx: ServiceContext, input: unknown, by: ObjectiveRequester): Promise<ObjectiveView> {
  checkMayManage(by);
  const { client, db } = ctx;
  const n = parseNewObjective(input);
  if (await findObjectiveByName(db, n.name)) throw new ObjectiveInputError(`an objective named ${n.name} exists already`, 409);
  const account = await chatAccount(db, n);
  await checkTriggers(ctx, { webhookSecretRef: n.webhook?.secretRef ?? null, watchPath: n.watch?.path ?? null, inboundEmail: n.inboundEmail ?? null }, 'invalid objective');
  const row = await insertObjective(db, newObjectiveRow(n, account, by)).catch((err: unknown) => {
    // two creations racing for one name or address: the second changes nothing
    if (isUniqueViolation(err)) throw new ObjectiveInputError(`an objective with this name or inbound address exists already`, 409);
    throw err;
  });
  try {
    await temporal(() => client.schedule.create(scheduleOptions(ctx.deps, row)));
  } catch (err) {
    await deleteObjective(db, row.id);
    throw err;
  }
  await changeReceipt(ctx, by, 'create', row.id, null, row);
  notifyChanged(ctx);
  return view(ctx, row);
}

/** Change an objective: the schedule first (a refusal, a bad cron, leaves the record as it was), then the record. */
async function changeObjective(ctx: ServiceContext, idOrName: string, input: unknown, by: ObjectiveRequester): Promise<ObjectiveView> {
  checkMayManage(by);
  const p = parsePatch(input);
  const before = await requireObjective(ctx.db, idOrName);
  const next = patchChanges(p);
  const candidate = { ...before, ...next } as ObjectiveRow;
  checkHasScheduleOrTrigger(candidate);
  await checkTriggers(ctx, { webhookSecretRef: p.webhook?.secretRef ?? null, watchPath: p.watch?.path ?? null, inboundEmail: p.inboundEmail ?? null }, 'invalid change', before.id);
  await temporal(() => ctx.client.schedule.getHandle(objectiveScheduleId(before.id)).update(() => {
    const { scheduleId: _id, ...rest } = scheduleOptions(ctx.deps, candidate);
    return { ...rest, state: { paused: before.paused } };
  }));
  const after = await updateObjective(ctx.db, before.id, next).catch((err: unknown) => {
    if (isUniqueViolation(err)) throw new ObjectiveInputError(`the address ${p.inboundEmail ?? ''} belongs to another objective already`, 409);
    throw err;
  });
  await changeReceipt(ctx, by, 'update', before.id, before, after);
  notifyChanged(ctx);
  return view(ctx, after);
}

/** Pause or resume the schedule, then the record (and the file watchers follow). */
async function setPaused(ctx: ServiceContext, idOrName: string, by: ObjectiveRequester, paused: boolean, rawNote?: unknown): Promise<ObjectiveView> {
  checkMayManage(by);
  const note = PauseNoteSchema.optional().safeParse(rawNote);
  if (!note.success) throw new ObjectiveInputError(`invalid note: ${describeIssues(note.error)}`);
  const before = await requireObjective(ctx.db, idOrName);
  const handle = ctx.client.schedule.getHandle(objectiveScheduleId(before.id));
  const why = note.data ? `: ${note.data}` : '';
  if (paused) await handle.pause(`paused by ${by.name}${why}`);
  else await handle.unpause(`resumed by ${by.name}${why}`);
  const after = await setObjectivePaused(ctx.db, before.id, paused);
  await changeReceipt(ctx, by, paused ? 'pause' : 'resume', before.id, before, after, note.data ? { note: note.data } : {});
  notifyChanged(ctx);
  return view(ctx, after);
}

/** Run now through the schedule (the objective's overlap policy applies unless another is given). */
async function triggerObjective(ctx: ServiceContext, idOrName: string, by: ObjectiveRequester, overlap?: OverlapPolicy): Promise<ObjectiveView> {
  checkMayManage(by);
  const o = await requireObjective(ctx.db, idOrName);
  // the SDK's default for a trigger is allow-all: pass the objective's own policy instead
  await ctx.client.schedule.getHandle(objectiveScheduleId(o.id)).trigger(OVERLAP[overlap ?? (o.overlap as OverlapPolicy)]);
  await changeReceipt(ctx, by, 'trigger', o.id, o, o, overlap ? { overlap } : {});
  return view(ctx, o);
}

/** The runs a past time range would have had (each scheduled time once). */
async function backfillObjective(ctx: ServiceContext, idOrName: string, input: unknown, by: ObjectiveRequester): Promise<ObjectiveView> {
  checkMayManage(by);
  const parsed = BackfillSchema.safeParse(input);
  if (!parsed.success) throw new ObjectiveInputError(`invalid backfill: ${describeIssues(parsed.error)}`);
  const o = await requireObjective(ctx.db, idOrName);
  const b = parsed.data;
  await ctx.client.schedule.getHandle(objectiveScheduleId(o.id)).backfill({ start: new Date(b.start), end: new Date(b.end), overlap: OVERLAP[b.overlap] });
  await changeReceipt(ctx, by, 'backfill', o.id, o, o, { start: b.start, end: b.end, overlap: b.overlap });
  return view(ctx, o);
}

/** After downtime: runs scheduled before now that have not started yet are skipped. */
async function skipMissedRuns(ctx: ServiceContext, idOrName: string, by: ObjectiveRequester): Promise<ObjectiveView> {
  checkMayManage(by);
  const before = await requireObjective(ctx.db, idOrName);
  const after = await skipObjectiveRunsBefore(ctx.db, before.id, new Date());
  await changeReceipt(ctx, by, 'skip-missed', before.id, before, after);
  return view(ctx, after);
}

/** Delete the schedule (one gone already is fine), then the record. */
async function removeObjective(ctx: ServiceContext, idOrName: string, by: ObjectiveRequester): Promise<boolean> {
  checkMayManage(by);
  const o = await requireObjective(ctx.db, idOrName);
  try {
    await ctx.client.schedule.getHandle(objectiveScheduleId(o.id)).delete();
  } catch (err) {
    if (!(err instanceof ScheduleNotFoundError)) throw err;
  }
  await deleteObjective(ctx.db, o.id);
  await changeReceipt(ctx, by, 'delete', o.id, o, null);
  notifyChanged(ctx);
  return true;
}

// --- events and triggers

/** Tell whoever follows changes (a listener's failure is its own). */
function notifyChanged(ctx: ServiceContext): void {
  for (const l of ctx.listeners) {
    try {
      l();
    } catch {
      // a listener's failure is its own
    }
  }
}

/** A webhook call: shape, then signature and freshness (one 401 for every refusal), then the JSON body, then one run. */
async function receiveWebhookEvent(ctx: ServiceContext, name: string, rawBody: string, header: (name: string) => string | undefined): Promise<ObjectiveEventResult> {
  const req = hookRequest(header, ctx.unauthorized);
  if (!('kind' in req)) return req;
  const o = await findObjectiveByName(ctx.db, name);
  const secret = o ? webhookSecret(ctx, o) : undefined;
  const signed = signatureMatches(secret ?? ctx.dummyKey, req, rawBody);
  const fresh = req.kind === 'github' || Math.abs(ctx.now() - req.at) <= ctx.toleranceMs;
  if (!o || secret === undefined || !signed || !fresh) return ctx.unauthorized;
  let payload: unknown;
  try {
    payload = JSON.parse(rawBody);
  } catch {
    return { status: 400, error: 'the body is not JSON' };
  }
  if (req.kind === 'github') {
    const source = `github ${req.event}`;
    return startEventRun(ctx, o, { id: req.deliveryId, source, payload, actor: `webhook:${source}`, byBody: true });
  }
  return startEventRun(ctx, o, { id: req.eventId, source: 'http', payload, actor: 'webhook:http' });
}

/** An event Steward observed itself, for an objective that has that trigger. */
async function receiveInternalEvent(ctx: ServiceContext, objectiveId: string, event: InternalEvent): Promise<ObjectiveEventResult> {
  const idParsed = InternalEventIdSchema.safeParse(event.eventId);
  if (!idParsed.success) return { status: 400, error: `bad event id: ${idParsed.error.issues[0]?.message ?? ''}` };
  const o = await findObjective(ctx.db, objectiveId);
  const has = o && (event.source === 'file' ? o.watchPath !== null : o.inboundEmail !== null);
  if (!o || !has) return { status: 404, error: `no objective ${objectiveId} takes ${event.source} events` };
  const actor = event.source === 'file' ? `watch:${o.watchPath ?? ''}` : `email:${o.inboundEmail ?? ''}`;
  return startEventRun(ctx, o, { id: idParsed.data, source: event.source, payload: event.payload, actor });
}

/**
 * A verified event: store the payload as a blob, record the event, start its one run, mark it
 * (services/handoff.ts). The run's workflow id is derived from the event (its id, or for GitHub,
 * `byBody`: the body is all GitHub signs, its delivery id is not, its body's content hash) and
 * starts with REJECT_DUPLICATE, so a start repeated after a crash finds the run instead of
 * doubling it. A redelivery of a recorded event is a duplicate once it is marked; before that it
 * is started (again), whatever the objective's state now: it was accepted.
 */
async function startEventRun(ctx: ServiceContext, o: ObjectiveRow, e: { id: string; source: string; payload: unknown; actor: string; byBody?: boolean }): Promise<ObjectiveEventResult> {
  const { db } = ctx;
  const text = JSON.stringify(e.payload, null, 2);
  const payloadHash = sha256Hex(text); // what putBlob keys it by
  // `#` is in no sender's event id: a body key never meets an id
  const key = e.byBody ? `#body:${payloadHash}` : e.id;
  const runId = `${objectiveRunWorkflowId(o.id)}-event-${e.byBody ? `body-${payloadHash.slice(0, 40)}` : e.id}`;
  const seen = e.byBody ? await findGithubEventByBody(db, o.id, payloadHash) : await findObjectiveEvent(db, o.id, key);
  if (seen) return redeliveredEvent(ctx, o, e, seen);
  if (o.paused) return { status: 409, error: `objective ${o.name} is paused` };
  await putBlob(db, text, 'application/json');
  try {
    await recordObjectiveEvent(db, { objectiveId: o.id, eventId: key, source: e.source, payloadHash, runId });
  } catch (err) {
    if (!isUniqueViolation(err)) throw err;
    // delivered twice at once: the other delivery starts it
    const first = await findObjectiveEvent(db, o.id, key);
    return { status: 200, runId: first?.runId ?? runId, duplicate: true };
  }
  faultPoint('event.recorded');
  await startRecordedEvent(ctx, o, e, { eventId: key, runId, payloadHash });
  return { status: 202, runId, duplicate: false };
}

async function resumeEventRuns(ctx: ServiceContext, opts: ResumeOptions): Promise<number> {
  const { from, to } = resumeWindow(opts);
  let afterId = 0;
  let resumed = 0;
  for (let page = 0; page < RESUME_MAX_PAGES; page++) {
    const events = await objectiveEventsBetween(ctx.db, from, to, afterId, RESUME_PAGE);
    if (events.length === 0) break;
    afterId = events.at(-1)!.id;
    const marked = await receiptIdsByKeys(ctx.db, events.map((e) => eventRunKey(e.objectiveId, e.eventId)));
    for (const e of events) {
      if (marked.has(eventRunKey(e.objectiveId, e.eventId))) continue;
      const o = await findObjective(ctx.db, e.objectiveId);
      if (!o) continue; // deleted since
      try {
        await startRecordedEvent(ctx, o, { id: e.eventId, source: e.source, actor: `resume:${e.source}` }, e);
        resumed++;
      } catch (err) {
        ctx.deps.log?.warn({ err, objectiveId: e.objectiveId, eventId: e.eventId }, 'an event whose run was not marked started could not be started');
      }
    }
    if (events.length < RESUME_PAGE) break;
  }
  return resumed;
}

/** The mark of an event's run: written once its start succeeded (or found it started). */
const eventRunKey = (objectiveId: string, eventId: string) => `objective-event:${objectiveId}:${eventId}`;

/** An event recorded before: a duplicate once marked; else its handoff did not complete, and its run starts now (at most once). */
async function redeliveredEvent(ctx: ServiceContext, o: ObjectiveRow, e: { id: string; source: string; actor: string }, seen: ObjectiveEventRow): Promise<ObjectiveEventResult> {
  if (!(await receiptExists(ctx.db, eventRunKey(o.id, seen.eventId)))) {
    ctx.deps.log?.info({ objectiveId: o.id, eventId: seen.eventId, runId: seen.runId }, 'a redelivered event whose run was not marked started: starting it');
    await startRecordedEvent(ctx, o, e, seen);
  }
  return { status: 200, runId: seen.runId, duplicate: true };
}

/** Start a recorded event's run (REJECT_DUPLICATE: a run with its id that runs or ran counts) and mark it with its `objective.run` receipt. */
async function startRecordedEvent(ctx: ServiceContext, o: ObjectiveRow, e: { id: string; source: string; actor: string }, rec: { eventId: string; runId: string; payloadHash: string }): Promise<void> {
  const { deps } = ctx;
  const input: ObjectiveRunInput = { objectiveId: o.id, maxSteps: deps.maxSteps, event: { id: e.id, source: e.source, payloadHash: rec.payloadHash }, ...activityQueueOf(deps) };
  await startRunOnce(
    ctx.client,
    ctx.db,
    objectiveRunWorkflow,
    { workflowId: rec.runId, taskQueue: deps.taskQueue, args: [input], typedSearchAttributes: runAttributes(o), staticSummary: `Objective ${o.name} on ${e.source} event ${e.id}` },
    { key: eventRunKey(o.id, rec.eventId), kind: 'objective.run', workflowId: rec.runId, actor: e.actor, data: { objectiveId: o.id, name: o.name, event: e.id, source: e.source, payloadHash: rec.payloadHash } },
  );
}

// --- views and receipts

/** What a receipt shows of an objective, before and after a change. */
function snapshot(o: ObjectiveRow): Record<string, unknown> {
  return { name: o.name, prompt: o.prompt, chat: `${o.platform}:${o.chatId}`, model: o.model, schedule: JSON.parse(o.schedule), overlap: o.overlap, catchupWindowMs: o.catchupWindowMs, pauseOnFailure: o.pauseOnFailure, paused: o.paused, skipBefore: o.skipBefore?.toISOString() ?? null, webhook: o.webhookSecretRef, watch: o.watchPath, inboundEmail: o.inboundEmail };
}

/** The receipt of a change: who, what, before and after. */
async function changeReceipt(ctx: ServiceContext, by: Requester, action: string, id: string, before: ObjectiveRow | null, after: ObjectiveRow | null, extra: Record<string, unknown> = {}): Promise<void> {
  await writeReceipt(ctx.db, {
    kind: 'objective.change',
    workflowId: objectiveScheduleId(id),
    actor: by.id,
    data: { action, objectiveId: id, by: by.name, before: before ? snapshot(before) : null, after: after ? snapshot(after) : null, ...extra },
  });
}

/** An objective by id or name, or the caller's error (404). */
async function requireObjective(db: Db, idOrName: string): Promise<ObjectiveRow> {
  const o = await findObjectiveByIdOrName(db, idOrName);
  if (!o) throw new ObjectiveInputError(`no objective ${idOrName}`, 404);
  return o;
}

/** An objective as the API shows it: the record, its schedule's next runs and count (none when the schedule is gone), its last run. */
async function view(ctx: ServiceContext, o: ObjectiveRow): Promise<ObjectiveView> {
  let nextRuns: string[] = [];
  let runsTaken = 0;
  let scheduleNote: string | null = null;
  try {
    const d = await ctx.client.schedule.getHandle(objectiveScheduleId(o.id)).describe();
    nextRuns = d.state.paused ? [] : d.info.nextActionTimes.slice(0, 5).map((t) => t.toISOString());
    runsTaken = d.info.numActionsTaken;
    scheduleNote = d.state.note ?? null;
  } catch (err) {
    if (!(err instanceof ScheduleNotFoundError)) throw err;
  }
  const last = await latestObjectiveRun(ctx.db, o.id);
  // a paused objective runs nothing: no budget is asked
  const spent = o.paused ? undefined : await objectiveSpentBudget(ctx.db, o);
  return {
    id: o.id,
    name: o.name,
    prompt: o.prompt,
    chat: { platform: o.platform, account: o.account, chatId: o.chatId },
    model: o.model,
    schedule: JSON.parse(o.schedule) as ObjectiveSchedule,
    overlap: o.overlap,
    catchupWindowMs: o.catchupWindowMs,
    pauseOnFailure: o.pauseOnFailure,
    paused: o.paused,
    skipBefore: o.skipBefore?.toISOString() ?? null,
    webhook: o.webhookSecretRef !== null,
    triggers: { webhook: o.webhookSecretRef !== null, watch: o.watchPath, email: o.inboundEmail },
    nextRuns,
    status: o.paused ? 'paused' : spent ? budgetSkipText(spent) : 'active',
    scheduleNote,
    spentBudget: spent ? { id: spent.id, scope: spent.scope, scopeId: spent.scopeId, period: spent.period, renewsAt: spent.renewsAt?.toISOString() ?? null } : null,
    lastRun: last ? { id: last.id, scheduledAt: last.scheduledAt?.toISOString() ?? null, status: last.status, outcome: last.outcome, error: last.error, at: last.updatedAt.toISOString() } : null,
    runsTaken,
    scheduleId: objectiveScheduleId(o.id),
    runUrl: last ? (ctx.deps.runLink?.(last.id) ?? null) : null,
    createdAt: o.createdAt.toISOString(),
    updatedAt: o.updatedAt.toISOString(),
  };
}

/** Every objective, by name, as views. */
async function listViews(ctx: ServiceContext): Promise<ObjectiveView[]> {
  const rows = await listObjectives(ctx.db);
  return Promise.all(rows.map((o) => view(ctx, o)));
}

/** One objective's view with its 20 most recent runs. */
async function showObjective(ctx: ServiceContext, idOrName: string): Promise<ObjectiveView & { runs: Array<{ id: string; scheduledAt: string | null; startedAt: string; status: string; outcome: string | null; error: string | null; runUrl: string | null }> }> {
  const o = await requireObjective(ctx.db, idOrName);
  const runs = await recentObjectiveRuns(ctx.db, o.id, 20);
  return {
    ...(await view(ctx, o)),
    runs: runs.map((r) => ({ id: r.id, scheduledAt: r.scheduledAt?.toISOString() ?? null, startedAt: r.createdAt.toISOString(), status: r.status, outcome: r.outcome, error: r.error, runUrl: ctx.deps.runLink?.(r.id) ?? null })),
  };
}

/** The objective service: what the API, the CLI and chat do with objectives (each method validates its input first). */
/** The directories the objectives with a file trigger watch (objective id -> path), for the directory watchers. */
export async function watchedDirectories(db: Db): Promise<Map<string, string>> {
  return new Map((await listWatchedObjectives(db)).map((r) => [r.id, r.watchPath]));
}

export function createObjectiveService(deps: ObjectiveServiceDeps) {
  const ctx = serviceContext(deps);
  return {
    create: (input: unknown, by: ObjectiveRequester): Promise<ObjectiveView> => createObjective(ctx, input, by),

    list: (): Promise<ObjectiveView[]> => listViews(ctx),

    show: (idOrName: string) => showObjective(ctx, idOrName),

    update: (idOrName: string, input: unknown, by: ObjectiveRequester): Promise<ObjectiveView> => changeObjective(ctx, idOrName, input, by),

    /** Pause the schedule (`note`: why, a string of at most 500 characters, kept with the schedule and in the receipt). A person below the operator role is refused (409). */
    pause: (idOrName: string, by: ObjectiveRequester, note?: unknown) => setPaused(ctx, idOrName, by, true, note),

    resume: (idOrName: string, by: ObjectiveRequester, note?: unknown) => setPaused(ctx, idOrName, by, false, note),

    /** Run now (the objective's overlap policy applies unless another is given). */
    trigger: (idOrName: string, by: ObjectiveRequester, overlap?: OverlapPolicy): Promise<ObjectiveView> => triggerObjective(ctx, idOrName, by, overlap),

    /** The runs a past time range would have had (each scheduled time once). */
    backfill: (idOrName: string, input: unknown, by: ObjectiveRequester): Promise<ObjectiveView> => backfillObjective(ctx, idOrName, input, by),

    /** After downtime: runs scheduled before now that have not started yet are skipped. */
    skipMissed: (idOrName: string, by: ObjectiveRequester): Promise<ObjectiveView> => skipMissedRuns(ctx, idOrName, by),

    /**
     * An event for an objective's webhook: a signed HTTP call (`X-Steward-Timestamp`,
     * `X-Steward-Event-Id`, `X-Steward-Signature` over `<timestamp>.<event id>.<body>`, within the
     * tolerance window) or a repository push (`X-Hub-Signature-256` over the body,
     * `X-GitHub-Delivery`, `X-GitHub-Event`). A bad header shape is 400 for any name; every
     * refused signature is one 401 whether the name exists, has a webhook and a usable secret or
     * not (an HMAC is computed either way). Then deduplicated (an event id, a GitHub body), one run.
     */
    receiveEvent: (name: string, rawBody: string, header: (name: string) => string | undefined): Promise<ObjectiveEventResult> => receiveWebhookEvent(ctx, name, rawBody, header),

    /**
     * An event Steward observed itself: a file changed in the objective's watched directory, an
     * email reached its inbound address. The objective must have that trigger; then as a webhook
     * event: deduplicated by the event id, the payload stored, one run started.
     */
    receiveInternalEvent: (objectiveId: string, event: InternalEvent): Promise<ObjectiveEventResult> => receiveInternalEvent(ctx, objectiveId, event),

    /**
     * Start the runs of events recorded in the last `withinMs` (and more than `olderThanMs` ago)
     * whose start was never marked: the process stopped in between and no redelivery came (a
     * webhook sender that does not retry, a file change reported once). A run that did start is
     * found by its id, not doubled. How many were started or found.
     */
    resumeEventRuns: (opts: ResumeOptions = {}): Promise<number> => resumeEventRuns(ctx, opts),

    /** Follow changes to objectives (create, update, pause, resume, delete); returns the unsubscribe. */
    onChange(listener: () => void): () => void {
      ctx.listeners.add(listener);
      return () => void ctx.listeners.delete(listener);
    },

    remove: (idOrName: string, by: ObjectiveRequester): Promise<boolean> => removeObjective(ctx, idOrName, by),
  };
}

export type ObjectiveService = ReturnType<typeof createObjectiveService>;
