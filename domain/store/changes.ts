/**
 * The store of governed repository changes: registered repositories (Repo), the changes
 * (RepoChange) with their JSON records, the steering queue of a change's coding agent
 * (ChangeSteer) and the promotion gate's single-writer lease per repository (RepoLock).
 * Every Prisma query on those tables lives here.
 */
import { ApplicationFailure } from '@temporalio/common';
import type { ConversationKey } from '../../common/ids.js';
import {
  AgentSpecSchema,
  CheckSchema,
  GitHubTargetSchema,
  type AgentSpec,
  type Check,
  type ChangeResult,
  type GateVerdict,
  type GitHubTarget,
  type Plan,
  type TaskDraft,
  type TaskState,
} from '../../common/changes.js';
import { RepoPolicySchema, type RepoPolicyInput } from '../../common/changes/policy.js';
import type { Repo, RepoChange } from '../../generated/prisma/sqlite/client.js';
import type { Db } from '../db.js';

export type { Repo as RepoRow, RepoChange as ChangeRow };

// ---------------------------------------------------------------------------------------------
// Repositories
// ---------------------------------------------------------------------------------------------

/** The repository as registered, parsed back from its row (validated: a bad row fails loudly). */
export interface RepoRecord {
  name: string;
  cloneUrl: string;
  defaultBranch: string;
  checks: Check[];
  policy: RepoPolicyInput;
  agent: AgentSpec;
  github?: GitHubTarget;
}

/** A registration's columns (the JSON ones already serialised). */
export interface RepoColumns {
  cloneUrl: string;
  defaultBranch: string;
  checks: string;
  policy: string;
  agent: string;
  github: string | null;
}

/** The registered repository, validated; a missing one is a non-retryable ChangeInvalid. */
export async function loadRepo(db: Db, name: string): Promise<RepoRecord> {
  const row = await db.repo.findUnique({ where: { name } });
  if (!row) throw ApplicationFailure.create({ type: 'ChangeInvalid', message: `no repository is registered as ${name}`, nonRetryable: true });
  return {
    name: row.name,
    cloneUrl: row.cloneUrl,
    defaultBranch: row.defaultBranch,
    checks: CheckSchema.array().parse(JSON.parse(row.checks)),
    policy: RepoPolicySchema.parse(JSON.parse(row.policy)),
    agent: AgentSpecSchema.parse(JSON.parse(row.agent)),
    ...(row.github ? { github: GitHubTargetSchema.parse(JSON.parse(row.github)) } : {}),
  };
}

export async function findRepo(db: Db, name: string): Promise<Repo | null> {
  return db.repo.findUnique({ where: { name } });
}

export async function listRepos(db: Db): Promise<Repo[]> {
  return db.repo.findMany({ orderBy: { name: 'asc' } });
}

/** Register or replace a repository; `created` says which. */
export async function saveRepo(db: Db, name: string, columns: RepoColumns, createdBy: string): Promise<{ row: Repo; created: boolean }> {
  const before = await db.repo.findUnique({ where: { name } });
  const row = await db.repo.upsert({ where: { name }, create: { name, ...columns, createdBy }, update: columns });
  return { row, created: !before };
}

/** Remove a registration; false when there was none. */
export async function deleteRepo(db: Db, name: string): Promise<boolean> {
  return (await db.repo.deleteMany({ where: { name } })).count > 0;
}

// ---------------------------------------------------------------------------------------------
// Changes
// ---------------------------------------------------------------------------------------------

export async function findChange(db: Db, id: string): Promise<RepoChange | null> {
  return db.repoChange.findUnique({ where: { id } });
}

/** The change's row; a missing one is a non-retryable ChangeInvalid (activities call this). */
export async function loadChange(db: Db, id: string): Promise<RepoChange> {
  const row = await findChange(db, id);
  if (!row) throw ApplicationFailure.create({ type: 'ChangeInvalid', message: `no change ${id}`, nonRetryable: true });
  return row;
}

export interface NewChange {
  id: string;
  repo: string;
  request: string;
  baseBranch: string;
  requestedBy: { id: string; name: string };
  origin?: { conversation: ConversationKey; sessionId: string };
}

/** The record of a change about to start (its workflow id is its id). */
export async function createChange(db: Db, c: NewChange): Promise<void> {
  await db.repoChange.create({
    data: {
      id: c.id,
      repo: c.repo,
      request: c.request,
      baseBranch: c.baseBranch,
      phase: 'intake',
      status: 'running',
      requestedBy: c.requestedBy.id,
      requestedByName: c.requestedBy.name,
      workflowId: c.id,
      ...(c.origin ? { platform: c.origin.conversation.platform, account: c.origin.conversation.account, chatId: c.origin.conversation.chatId, sessionId: c.origin.sessionId } : {}),
    },
  });
}

/** The newest changes' ids, optionally of one repository, status (running, done, ...) or phase. */
export async function listChangeIds(db: Db, opts: { repo?: string; status?: string; phase?: string; limit?: number }): Promise<string[]> {
  const where = { ...(opts.repo ? { repo: opts.repo } : {}), ...(opts.status ? { status: opts.status } : {}), ...(opts.phase ? { phase: opts.phase } : {}) };
  const rows = await db.repoChange.findMany({ where, orderBy: { createdAt: 'desc' }, take: opts.limit ?? 50, select: { id: true } });
  return rows.map((r) => r.id);
}

const inChat = (c: ConversationKey) => ({ platform: c.platform, account: c.account, chatId: c.chatId, status: 'running' });

/** The chat's running changes, oldest first. */
export async function runningChangesInChat(db: Db, conversation: ConversationKey): Promise<Array<{ id: string; repo: string; phase: string; question: string | null; workflowId: string }>> {
  return db.repoChange.findMany({
    where: inChat(conversation),
    orderBy: { createdAt: 'asc' },
    select: { id: true, repo: true, phase: true, question: true, workflowId: true },
  });
}

/** The chat's newest running change in one of `phases`. */
export async function newestRunningChangeInChat(db: Db, conversation: ConversationKey, phases: string[]): Promise<RepoChange | null> {
  return db.repoChange.findFirst({ where: { ...inChat(conversation), phase: { in: phases } }, orderBy: { createdAt: 'desc' } });
}

/** The change's phase (and other plain columns that change with it). */
export async function setChangePhase(db: Db, id: string, phase: string, extra: { baseSha?: string; question?: string | null } = {}): Promise<void> {
  await db.repoChange.update({ where: { id }, data: { phase, ...extra } });
}

/** What a step of the change recorded: each field is stored as given (JSON records serialised). */
export interface ChangeRecords {
  draft?: TaskDraft;
  taskState?: TaskState;
  plan?: Plan;
  planHash?: string;
  patchHash?: string | null;
  transcriptHash?: string;
  verdict?: GateVerdict;
  baseSha?: string;
  result?: ChangeResult;
}

export async function recordChange(db: Db, id: string, r: ChangeRecords): Promise<void> {
  await db.repoChange.update({
    where: { id },
    data: {
      ...(r.draft !== undefined ? { draft: JSON.stringify(r.draft) } : {}),
      ...(r.taskState !== undefined ? { taskState: JSON.stringify(r.taskState) } : {}),
      ...(r.plan !== undefined ? { plan: JSON.stringify(r.plan) } : {}),
      ...(r.planHash !== undefined ? { planHash: r.planHash } : {}),
      ...(r.patchHash !== undefined ? { patchHash: r.patchHash } : {}),
      ...(r.transcriptHash !== undefined ? { transcriptHash: r.transcriptHash } : {}),
      ...(r.verdict !== undefined ? { verdict: JSON.stringify(r.verdict) } : {}),
      ...(r.baseSha !== undefined ? { baseSha: r.baseSha } : {}),
      ...(r.result !== undefined ? { result: JSON.stringify(r.result) } : {}),
    },
  });
}

/** The change's end: status, phase, the report and task state, the reason it ended. */
export async function recordChangeEnd(
  db: Db,
  id: string,
  end: { status: string; phase: string; report: unknown; taskState?: TaskState; error?: string },
): Promise<void> {
  await db.repoChange.update({
    where: { id },
    data: {
      status: end.status,
      phase: end.phase,
      question: null,
      report: JSON.stringify(end.report),
      ...(end.taskState ? { taskState: JSON.stringify(end.taskState) } : {}),
      ...(end.error ? { error: end.error } : {}),
    },
  });
}

/** A change whose workflow could not be started. */
export async function markChangeStartFailed(db: Db, id: string, error: string): Promise<void> {
  await db.repoChange.update({ where: { id }, data: { status: 'failed', error } });
}

// ---------------------------------------------------------------------------------------------
// Steering
// ---------------------------------------------------------------------------------------------

export async function addSteer(db: Db, changeId: string, text: string, by: string, byId?: string): Promise<void> {
  await db.changeSteer.create({ data: { changeId, text, by, ...(byId ? { byId } : {}) } });
}

/** The steering notes after `afterId`, oldest first (`byId`: the steerer's identity id, when kept). */
export async function steersAfter(db: Db, changeId: string, afterId: number): Promise<Array<{ id: number; text: string; by: string; byId: string | null }>> {
  return db.changeSteer.findMany({ where: { changeId, id: { gt: afterId } }, orderBy: { id: 'asc' }, select: { id: true, text: true, by: true, byId: true } });
}

// ---------------------------------------------------------------------------------------------
// The promotion gate's lease
// ---------------------------------------------------------------------------------------------

/**
 * Take the repository's single-writer lease until `expiresAt`: free, already ours, or expired
 * (a crashed holder's). False when another live holder has it.
 */
export async function tryTakeLease(db: Db, repo: string, holder: string, expiresAt: Date): Promise<boolean> {
  try {
    await db.repoLock.create({ data: { repo, holder, expiresAt } });
    return true;
  } catch {
    const taken = await db.repoLock.updateMany({
      where: { repo, OR: [{ holder }, { expiresAt: { lt: new Date() } }] },
      data: { holder, expiresAt },
    });
    return taken.count > 0;
  }
}

/** Extend our lease (no effect when it is no longer ours). */
export async function renewLease(db: Db, repo: string, holder: string, expiresAt: Date): Promise<void> {
  await db.repoLock.updateMany({ where: { repo, holder }, data: { expiresAt } });
}

export async function releaseLease(db: Db, repo: string, holder: string): Promise<void> {
  await db.repoLock.deleteMany({ where: { repo, holder } });
}

/** Changes that recorded a patch (the what-if's inputs), oldest first: created at or after `since`, of one repository. */
export async function changesWithPatches(db: Db, opts: { since?: Date; repo?: string; limit?: number }): Promise<RepoChange[]> {
  return db.repoChange.findMany({
    where: { patchHash: { not: null }, ...(opts.repo ? { repo: opts.repo } : {}), ...(opts.since ? { createdAt: { gte: opts.since } } : {}) },
    orderBy: { createdAt: 'asc' },
    take: opts.limit ?? 1000,
  });
}
