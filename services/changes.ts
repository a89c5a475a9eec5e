/**
 * The application service of governed repository changes, as the API, the CLI and chat use it: register a
 * repository, start a change (a repo-change workflow on the repo task queue), read its phase
 * and records, download its patch, answer its clarifying question, steer or stop it. Every
 * input is validated with zod before anything changes; every change writes a receipt.
 */
import { createHash, randomBytes } from 'node:crypto';
import { WorkflowNotFoundError, WorkflowUpdateFailedError, type Client } from '@temporalio/client';
import type { Logger } from 'pino';
import { getBlobText } from '../domain/blobs.js';
import type { Db } from '../domain/db.js';
import * as store from '../domain/store/changes.js';
import { isUniqueViolation } from '../domain/prisma-errors.js';
import { describeIssues } from '../common/schemas.js';
import { commandSpec, mayUse } from '../common/commands.js';
import type { Role } from '../common/roles.js';
import { listReceipts, writeReceipt, type ReceiptInput } from '../domain/receipts.js';
import { faultPoint } from '../common/fault-points.js';
import { startRunOnce } from './handoff.js';
import type { ConversationKey } from '../common/ids.js';
import {
  ChangeAnswerSchema,
  ChangeRequestSchema,
  RepoRegistrationSchema,
  type ChangeResult,
  type GateVerdict,
  type Plan,
  type RepoRegistration,
  type Report,
  type TaskDraft,
  type TaskState,
} from '../common/changes.js';
import { changeAnswerUpdate, changeSteerSignal } from '../workflows/messages.js';
import { repoChangeWorkflow } from '../workflows/changes/repo-change.js';
import { ChatAttr, KindAttr, PlatformAttr, RepoAttr } from '../workflows/search-attributes.js';
import type { RepoChangeInput } from '../workflows/types.js';
import { ServiceInputError, type Requester } from './requests.js';
import type { Limiter } from '../domain/limits.js';

export interface ChangeServiceDeps {
  client: Client;
  db: Db;
  /** The task queue the repo-change workflows run on (their tasks are short). */
  taskQueue: string;
  /**
   * The repo task queue their activities run on (coding agent, gates, promotion), so a long
   * change never holds a chat worker's activity slot; default the workflow's queue.
   */
  activityQueue?: string;
  clarifyTimeoutMs?: number;
  maxQuestions?: number;
  runLink?: (workflowId: string) => string | undefined;
  /** The limits of every path that causes a model call (domain/limits.ts): a change asked for counts as a turn of the person. */
  limiter?: Pick<Limiter, 'turn'>;
  log?: Logger;
}

export type { Requester } from './requests.js';

export class ChangeInputError extends ServiceInputError {
  override readonly name = 'ChangeInputError';
}

export interface RepoView {
  name: string;
  cloneUrl: string;
  defaultBranch: string;
  checks: RepoRegistration['checks'];
  policy: RepoRegistration['policy'];
  agent: RepoRegistration['agent'];
  github: RepoRegistration['github'] | null;
  createdAt: string;
  updatedAt: string;
}

export interface ChangeView {
  id: string;
  repo: string;
  request: string;
  base: string;
  baseSha: string | null;
  phase: string;
  status: string;
  requestedBy: string;
  question: string | null;
  draft: TaskDraft | null;
  taskState: TaskState | null;
  plan: Plan | null;
  planHash: string | null;
  verdict: GateVerdict | null;
  result: ChangeResult | null;
  report: Report | null;
  patchHash: string | null;
  error: string | null;
  workflowId: string;
  runUrl: string | null;
  createdAt: string;
  updatedAt: string;
}


/** A change's patch and where the change stands (GET /api/v1/changes/{id}/patch). */
export interface ChangePatch {
  patch: string;
  hash: string;
  /** running, done, failed, refused, cancelled */
  status: string;
  /** The validation gate's verdict, null before the gate ran. */
  verdict: 'pass' | 'fail' | null;
  reasons: string[];
  /** The change ended done with its result: the patch passed the gates and was promoted. */
  promoted: boolean;
  error: string | null;
}

const parseJson = <T>(s: string | null): T | null => (s ? (JSON.parse(s) as T) : null);

/** A registration's row as the API shows it. */
function repoView(r: store.RepoRow): RepoView {
  return {
    name: r.name,
    cloneUrl: r.cloneUrl,
    defaultBranch: r.defaultBranch,
    checks: JSON.parse(r.checks) as RepoView['checks'],
    policy: JSON.parse(r.policy) as RepoView['policy'],
    agent: JSON.parse(r.agent) as RepoView['agent'],
    github: parseJson<NonNullable<RepoView['github']>>(r.github),
    createdAt: r.createdAt.toISOString(),
    updatedAt: r.updatedAt.toISOString(),
  };
}

/** A change's row as the API shows it. */
function changeView(deps: ChangeServiceDeps, r: store.ChangeRow): ChangeView {
  return {
    id: r.id,
    repo: r.repo,
    request: r.request,
    base: r.baseBranch,
    baseSha: r.baseSha,
    phase: r.phase,
    status: r.status,
    requestedBy: r.requestedByName,
    question: r.question,
    draft: parseJson<TaskDraft>(r.draft),
    taskState: parseJson<TaskState>(r.taskState),
    plan: parseJson<Plan>(r.plan),
    planHash: r.planHash,
    verdict: parseJson<GateVerdict>(r.verdict),
    result: parseJson<ChangeResult>(r.result),
    report: parseJson<Report>(r.report),
    patchHash: r.patchHash,
    error: r.error,
    workflowId: r.workflowId,
    runUrl: deps.runLink?.(r.workflowId) ?? null,
    createdAt: r.createdAt.toISOString(),
    updatedAt: r.updatedAt.toISOString(),
  };
}

async function getChange(deps: ChangeServiceDeps, id: string): Promise<ChangeView | undefined> {
  const r = await store.findChange(deps.db, id);
  return r ? changeView(deps, r) : undefined;
}

/** Register (or replace) a repository. */
async function registerRepo(deps: ChangeServiceDeps, input: unknown, by: Requester): Promise<{ repo: RepoView; created: boolean }> {
  const parsed = RepoRegistrationSchema.safeParse(input);
  if (!parsed.success) throw new ChangeInputError(`invalid repository: ${describeIssues(parsed.error)}`);
  const r = parsed.data;
  const { row, created } = await store.saveRepo(
    deps.db,
    r.name,
    {
      cloneUrl: r.cloneUrl,
      defaultBranch: r.defaultBranch,
      checks: JSON.stringify(r.checks),
      policy: JSON.stringify(r.policy),
      agent: JSON.stringify(r.agent),
      github: r.github ? JSON.stringify(r.github) : null,
    },
    by.id,
  );
  await writeReceipt(deps.db, {
    kind: 'repo.change',
    actor: by.id,
    data: { action: created ? 'register' : 'update', repo: r.name, cloneUrl: r.cloneUrl, defaultBranch: r.defaultBranch, checks: r.checks.map((c) => c.name), github: r.github ? `${r.github.owner}/${r.github.repo}` : null },
  });
  return { repo: repoView(row), created };
}

async function removeRepo(deps: ChangeServiceDeps, name: string, by: Requester): Promise<boolean> {
  const removed = await store.deleteRepo(deps.db, name);
  if (removed) await writeReceipt(deps.db, { kind: 'repo.change', actor: by.id, data: { action: 'remove', repo: name } });
  return removed;
}

type Origin = { conversation: ConversationKey; sessionId: string };

/** A fresh change id: lowercase, so it is also a valid agent-harness task id. */
export function newChangeId(): string {
  return `chg-${randomBytes(6).toString('hex')}`;
}

/** The change id of a keyed start (a chat command's message, an API Idempotency-Key): the same for the same key, in newChangeId's format. */
export function changeIdFor(key: string): string {
  return `chg-${createHash('sha256').update(`change:${key}`).digest('hex').slice(0, 12)}`;
}

/** Whether a workflow runs or ran under the change's id (its start happened, whatever the record says). */
function workflowRan(deps: ChangeServiceDeps, id: string): Promise<boolean> {
  return deps.client.workflow
    .getHandle(id)
    .describe()
    .then(
      () => true,
      () => false,
    );
}

/** A change's `change.start` receipt: the mark after its workflow started (keyed by the change). */
function startMark(id: string, actor: string, sessionId: string | undefined, data: { changeId: string; repo: string; base: string; chars: number; from: string }): ReceiptInput & { key: string } {
  return { key: `change:${id}:start`, kind: 'change.start', workflowId: id, actor, ...(sessionId ? { sessionId } : {}), data };
}

/**
 * Start a change: the record, then its workflow (the request travels by reference), started at
 * most once under the change's id (services/handoff.ts `startRunOnce`), then its `change.start`
 * receipt. With `key` the id is derived from it: a repeat (a chat command run again after a
 * crash before its answer, an API retry with the same Idempotency-Key) finds the record the
 * first call made, starts its workflow if that call did not get so far, and answers with the
 * same id; the turn limit is asked only before a change is recorded.
 */
async function startChange(
  deps: ChangeServiceDeps,
  input: unknown,
  by: Requester & { shapedBy?: readonly string[] },
  origin?: Origin,
  opts: { key?: string } = {},
): Promise<{ id: string; workflowId: string; runUrl: string | null }> {
  const parsed = ChangeRequestSchema.safeParse(input);
  if (!parsed.success) throw new ChangeInputError(`invalid change request: ${describeIssues(parsed.error)}`);
  const req = parsed.data;
  const id = opts.key !== undefined ? changeIdFor(opts.key) : newChangeId();
  const existing = opts.key !== undefined ? await store.findChange(deps.db, id) : null;
  const answer = { id, workflowId: id, runUrl: deps.runLink?.(id) ?? null };
  // recorded by a first call and no longer running (it ended, or its start failed and the record
  // says so): nothing to start. A first call that died between the start and its mark leaves a
  // run without its `change.start` receipt, and the run may end before the repeat: the mark
  // follows the run (keyed: written once), whatever the run's state.
  if (existing && existing.status !== 'running') {
    const ran = await workflowRan(deps, id);
    const from = existing.platform && existing.chatId ? `${existing.platform}:${existing.chatId}` : 'api';
    if (ran) await writeReceipt(deps.db, startMark(id, existing.requestedBy, existing.sessionId ?? undefined, { changeId: id, repo: existing.repo, base: existing.baseBranch, chars: existing.request.length, from }));
    return answer;
  }
  if (!existing) {
    // a change's intake, plan and coding agent call models: it counts against the asker's turn limit
    const limited = await deps.limiter?.turn(by, 'change');
    if (limited) throw new ChangeInputError(limited.message.replace(/\.$/, ''), 409);
  }
  const repo = await store.findRepo(deps.db, existing?.repo ?? req.repo);
  if (!repo) throw new ChangeInputError(`no repository is registered as ${req.repo} (register it with POST /api/v1/repos or steward repos add)`, 404);
  const base = existing?.baseBranch ?? req.base ?? repo.defaultBranch;
  const requestedBy = existing ? { id: existing.requestedBy, name: existing.requestedByName } : { id: by.id, name: by.name };
  const request = existing?.request ?? req.request;
  if (!existing) {
    try {
      await store.createChange(deps.db, { id, repo: repo.name, request, baseBranch: base, requestedBy, ...(origin ? { origin } : {}) });
    } catch (err) {
      // the same key at the same moment: the other call recorded it (the same input), its start is made once below
      if (!(opts.key !== undefined && isUniqueViolation(err))) throw err;
    }
    faultPoint('change.created');
  }
  // everyone who shaped the request (a turn's senders and steerers): none may approve the promotion
  const shapedBy = [...new Set([requestedBy.id, ...(by.shapedBy ?? [])])];
  const wfInput: RepoChangeInput = {
    changeId: id,
    repo: repo.name,
    requestedBy,
    ...(shapedBy.length > 1 ? { requesters: shapedBy } : {}),
    ...(origin ? { origin } : {}),
    clarifyTimeoutMs: deps.clarifyTimeoutMs ?? 60 * 60_000,
    maxQuestions: deps.maxQuestions ?? 3,
    ...(deps.activityQueue && deps.activityQueue !== deps.taskQueue ? { activityQueue: deps.activityQueue } : {}),
  };
  try {
    await startRunOnce(
      deps.client,
      deps.db,
      repoChangeWorkflow,
      {
        workflowId: id,
        taskQueue: deps.taskQueue,
        args: [wfInput],
        typedSearchAttributes: [
          { key: KindAttr, value: 'repo-change' },
          { key: RepoAttr, value: repo.name },
          ...(origin ? [{ key: PlatformAttr, value: origin.conversation.platform }, { key: ChatAttr, value: origin.conversation.chatId }] : []),
        ],
        staticSummary: `Repo change on ${repo.name}: ${request.slice(0, 150)}`,
        staticDetails: `Requested by ${requestedBy.name}. Base ${base}. [Open this change in the Steward console](/console/changes/${encodeURIComponent(id)})\n\n${request.slice(0, 2000)}`,
      },
      startMark(id, requestedBy.id, origin?.sessionId, { changeId: id, repo: repo.name, base, chars: request.length, from: origin ? `${origin.conversation.platform}:${origin.conversation.chatId}` : 'api' }),
    );
  } catch (err) {
    // the record says the start failed only when no workflow runs under its id (the mark after a start may be what failed)
    if (await workflowRan(deps, id)) throw err;
    await store.markChangeStartFailed(deps.db, id, `could not start: ${(err as Error).message}`);
    throw err;
  }
  return answer;
}

/** Which changes to list: of one repository, in one status (running, done, failed, refused, cancelled), in one phase (clarify: waiting for an answer while running). */
export interface ChangeListFilter {
  repo?: string;
  status?: string;
  phase?: string;
  limit?: number;
}

async function listChanges(deps: ChangeServiceDeps, opts: ChangeListFilter = {}): Promise<ChangeView[]> {
  const out: ChangeView[] = [];
  for (const id of await store.listChangeIds(deps.db, opts)) {
    const v = await getChange(deps, id);
    if (v) out.push(v);
  }
  return out;
}

/**
 * The patch the change's agent produced, with where the change stands: `promoted` only when
 * the change ended done with its result (patch artifact or draft PR) after the gates; a
 * patch of a change refused, failed, cancelled or still running is not.
 */
async function getPatch(deps: ChangeServiceDeps, id: string): Promise<ChangePatch | undefined> {
  const r = await store.findChange(deps.db, id);
  if (!r?.patchHash) return undefined;
  const verdict = parseJson<GateVerdict>(r.verdict);
  return {
    patch: await getBlobText(deps.db, r.patchHash),
    hash: r.patchHash,
    status: r.status,
    verdict: verdict?.verdict ?? null,
    reasons: verdict?.reasons ?? [],
    promoted: r.status === 'done' && r.result !== null,
    error: r.error,
  };
}

/** The receipt kinds of a change's stages, in the order a change passes them. */
export const CHANGE_EVENT_KINDS = ['change.start', 'change.intake', 'change.question', 'change.answer', 'change.plan', 'change.steer', 'change.work', 'sandbox.blocked', 'gate.verdict', 'approval.requested', 'approval.decision', 'promotion', 'change.end'] as const;
export type ChangeEventKind = (typeof CHANGE_EVENT_KINDS)[number];

/** One recorded stage of a change: a receipt of its workflow (data as written, held secrets masked). */
export interface ChangeEvent {
  kind: ChangeEventKind;
  at: string;
  actor: string | null;
  data: Record<string, unknown>;
}

/** The change's stages as its receipts record them (undefined: no such change). */
async function changeEvents(deps: ChangeServiceDeps, id: string): Promise<ChangeEvent[] | undefined> {
  const row = await store.findChange(deps.db, id);
  if (!row) return undefined;
  const kinds = new Set<string>(CHANGE_EVENT_KINDS);
  const out: ChangeEvent[] = [];
  // a change's run also writes a receipt per model and tool call: read them all, a page at a time (bounded)
  let afterId = 0;
  for (let page = 0; page < 20; page++) {
    const rows = await listReceipts(deps.db, { run: row.workflowId, limit: 1000, ...(afterId ? { afterId } : {}) });
    for (const r of rows) {
      if (!kinds.has(r.kind)) continue;
      const data = r.data && typeof r.data === 'object' && !Array.isArray(r.data) ? (r.data as Record<string, unknown>) : {};
      out.push({ kind: r.kind as ChangeEventKind, at: r.at, actor: r.actor, data });
    }
    if (rows.length < 1000) break;
    afterId = rows[rows.length - 1]!.id;
  }
  return out;
}

const ANSWER = commandSpec('answer')!;

/**
 * Answer a change's clarifying question (validated in the workflow: only while one is open).
 * With the asker's role (the console's person), the chat command's minimum role applies.
 */
async function answer(deps: ChangeServiceDeps, id: string, input: unknown, by: Requester & { role?: Role }): Promise<string> {
  const parsed = ChangeAnswerSchema.safeParse(input);
  if (!parsed.success) throw new ChangeInputError(`invalid answer: ${describeIssues(parsed.error)}`);
  if (by.role !== undefined && !mayUse(ANSWER, by.role)) throw new ChangeInputError(`answering a change's question needs the ${ANSWER.minRole} role; nothing changed`, 409);
  const row = await store.findChange(deps.db, id);
  if (!row) throw new ChangeInputError(`no change ${id}`, 404);
  try {
    const r = await deps.client.workflow.getHandle(row.workflowId).executeUpdate(changeAnswerUpdate, { args: [{ text: parsed.data.text, by: by.id, byName: by.name }] });
    await writeReceipt(deps.db, { kind: 'change.answer', workflowId: row.workflowId, actor: by.id, data: { changeId: id, chars: parsed.data.text.length } });
    return r.message;
  } catch (err) {
    if (err instanceof WorkflowUpdateFailedError) throw new ChangeInputError(err.cause?.message ?? err.message, 409);
    if (err instanceof WorkflowNotFoundError) throw new ChangeInputError(`change ${id} has ended`, 409);
    throw err;
  }
}

/** /stop in a chat: cancel the chat's running changes (their sandboxes are killed, trees removed). */
async function stopInChat(deps: ChangeServiceDeps, conversation: ConversationKey, by: Requester): Promise<string[]> {
  const stopped: string[] = [];
  for (const r of await store.runningChangesInChat(deps.db, conversation)) {
    try {
      await deps.client.workflow.getHandle(r.workflowId).cancel();
      stopped.push(r.id);
      await writeReceipt(deps.db, { kind: 'command', workflowId: r.workflowId, actor: by.id, data: { command: 'stop', changeId: r.id } });
    } catch (err) {
      if (!(err instanceof WorkflowNotFoundError)) throw err;
    }
  }
  return stopped;
}

/** /steer in a chat whose change is in its coding phase: the agent reads it before its next step. */
async function steerInChat(deps: ChangeServiceDeps, conversation: ConversationKey, text: string, by: Requester): Promise<string | undefined> {
  const r = await store.newestRunningChangeInChat(deps.db, conversation, ['plan', 'work']);
  if (!r) return undefined;
  await store.addSteer(deps.db, r.id, text, by.name, by.id);
  try {
    await deps.client.workflow.getHandle(r.workflowId).signal(changeSteerSignal, { text: text.slice(0, 200), by: by.name, byId: by.id });
  } catch (err) {
    if (!(err instanceof WorkflowNotFoundError)) throw err;
  }
  await writeReceipt(deps.db, { kind: 'change.steer', workflowId: r.workflowId, actor: by.id, data: { changeId: r.id, chars: text.length } });
  return `Steering noted for change ${r.id}: the coding agent takes it in before its next step.`;
}

/** The change service, bound to its dependencies. */
export function createChangeService(deps: ChangeServiceDeps) {
  const { db } = deps;
  return {
    registerRepo: (input: unknown, by: Requester) => registerRepo(deps, input, by),
    listRepos: async (): Promise<RepoView[]> => (await store.listRepos(db)).map(repoView),
    getRepo: async (name: string): Promise<RepoView | undefined> => {
      const r = await store.findRepo(db, name);
      return r ? repoView(r) : undefined;
    },
    removeRepo: (name: string, by: Requester) => removeRepo(deps, name, by),
    startChange: (input: unknown, by: Requester & { shapedBy?: readonly string[] }, origin?: Origin, opts?: { key?: string }) => startChange(deps, input, by, origin, opts),
    getChange: (id: string) => getChange(deps, id),
    listChanges: (opts?: ChangeListFilter) => listChanges(deps, opts),
    /** What the change's receipts record, oldest first: its phases with their times (the console's timeline). */
    events: (id: string) => changeEvents(deps, id),
    /** The patch artifact (git apply-able), by the change's content hash. */
    getPatch: (id: string) => getPatch(deps, id),
    answer: (id: string, input: unknown, by: Requester & { role?: Role }) => answer(deps, id, input, by),
    /** The chat's running changes (for /status). */
    runningInChat: async (conversation: ConversationKey): Promise<Array<{ id: string; repo: string; phase: string; question: string | null }>> =>
      (await store.runningChangesInChat(db, conversation)).map(({ id, repo, phase, question }) => ({ id, repo, phase, question })),
    /** The chat's change that waits for an answer, if any. */
    waitingInChat: async (conversation: ConversationKey): Promise<string | undefined> => (await store.newestRunningChangeInChat(db, conversation, ['clarify']))?.id,
    stopInChat: (conversation: ConversationKey, by: Requester) => stopInChat(deps, conversation, by),
    steerInChat: (conversation: ConversationKey, text: string, by: Requester) => steerInChat(deps, conversation, text, by),
  };
}

export type ChangeService = ReturnType<typeof createChangeService>;

/** The what-if of a proposed policy over past decisions (domain/changes/what-if.ts): the schema of its input and its report, for the HTTP route. */
export { WhatIfPolicySchema, type WhatIfPolicy, type WhatIfReport } from '../domain/changes/what-if.js';
