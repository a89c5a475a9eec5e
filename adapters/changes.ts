/**
 * Repositories and governed changes as the API, the CLI and chat see them: register a
 * repository, start a change (a repo-change workflow on the repo task queue), read its phase
 * and records, download its patch, answer its clarifying question, steer or stop it. Every
 * input is validated with zod before anything changes; every change writes a receipt.
 */
import { randomBytes } from 'node:crypto';
import { WorkflowNotFoundError, WorkflowUpdateFailedError, type Client } from '@temporalio/client';
import type { Logger } from 'pino';
import { getBlobText } from '../domain/blobs.js';
import type { Db } from '../domain/db.js';
import { describeIssues } from '../common/schemas.js';
import { writeReceipt } from '../domain/receipts.js';
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
} from '../common/repo-change.js';
import { changeAnswerUpdate, changeSteerSignal } from '../workflows/messages.js';
import { repoChangeWorkflow } from '../workflows/changes/repo-change.js';
import { ChatAttr, KindAttr, PlatformAttr, RepoAttr } from '../workflows/search-attributes.js';
import type { RepoChangeInput } from '../workflows/types.js';

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
  log?: Logger;
}

export interface Requester {
  id: string;
  name: string;
}

export class ChangeInputError extends Error {
  override readonly name = 'ChangeInputError';
  constructor(
    message: string,
    readonly status: 400 | 404 | 409 = 400,
  ) {
    super(message);
  }
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

/** A fresh change id: lowercase, so it is also a valid agent-harness task id. */
export function newChangeId(): string {
  return `chg-${randomBytes(6).toString('hex')}`;
}

// eslint-disable-next-line max-lines-per-function -- longer than 150 lines before the rule came; to be split (issue 13)
export function createChangeService(deps: ChangeServiceDeps) {
  const { client, db } = deps;
  const clarifyTimeoutMs = deps.clarifyTimeoutMs ?? 60 * 60_000;
  const maxQuestions = deps.maxQuestions ?? 3;

  function repoView(r: { name: string; cloneUrl: string; defaultBranch: string; checks: string; policy: string; agent: string; github: string | null; createdAt: Date; updatedAt: Date }): RepoView {
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

  async function changeView(id: string): Promise<ChangeView | undefined> {
    const r = await db.repoChange.findUnique({ where: { id } });
    if (!r) return undefined;
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

  return {
    /** Register (or replace) a repository. */
    async registerRepo(input: unknown, by: Requester): Promise<{ repo: RepoView; created: boolean }> {
      const parsed = RepoRegistrationSchema.safeParse(input);
      if (!parsed.success) throw new ChangeInputError(`invalid repository: ${describeIssues(parsed.error)}`);
      const r = parsed.data;
      const data = {
        cloneUrl: r.cloneUrl,
        defaultBranch: r.defaultBranch,
        checks: JSON.stringify(r.checks),
        policy: JSON.stringify(r.policy),
        agent: JSON.stringify(r.agent),
        github: r.github ? JSON.stringify(r.github) : null,
      };
      const before = await db.repo.findUnique({ where: { name: r.name } });
      const row = await db.repo.upsert({ where: { name: r.name }, create: { name: r.name, ...data, createdBy: by.id }, update: data });
      await writeReceipt(db, {
        kind: 'repo.change',
        actor: by.id,
        data: { action: before ? 'update' : 'register', repo: r.name, cloneUrl: r.cloneUrl, defaultBranch: r.defaultBranch, checks: r.checks.map((c) => c.name), github: r.github ? `${r.github.owner}/${r.github.repo}` : null },
      });
      return { repo: repoView(row), created: !before };
    },

    async listRepos(): Promise<RepoView[]> {
      return (await db.repo.findMany({ orderBy: { name: 'asc' } })).map(repoView);
    },

    async getRepo(name: string): Promise<RepoView | undefined> {
      const r = await db.repo.findUnique({ where: { name } });
      return r ? repoView(r) : undefined;
    },

    async removeRepo(name: string, by: Requester): Promise<boolean> {
      const n = await db.repo.deleteMany({ where: { name } });
      if (n.count) await writeReceipt(db, { kind: 'repo.change', actor: by.id, data: { action: 'remove', repo: name } });
      return n.count > 0;
    },

    /** Start a change: the record, then its workflow (the request travels by reference). */
    async startChange(input: unknown, by: Requester, origin?: { conversation: ConversationKey; sessionId: string }): Promise<{ id: string; workflowId: string; runUrl: string | null }> {
      const parsed = ChangeRequestSchema.safeParse(input);
      if (!parsed.success) throw new ChangeInputError(`invalid change request: ${describeIssues(parsed.error)}`);
      const req = parsed.data;
      const repo = await db.repo.findUnique({ where: { name: req.repo } });
      if (!repo) throw new ChangeInputError(`no repository is registered as ${req.repo} (register it with POST /api/v1/repos or steward repos add)`, 404);
      const id = newChangeId();
      await db.repoChange.create({
        data: {
          id,
          repo: repo.name,
          request: req.request,
          baseBranch: req.base ?? repo.defaultBranch,
          phase: 'intake',
          status: 'running',
          requestedBy: by.id,
          requestedByName: by.name,
          workflowId: id,
          ...(origin ? { platform: origin.conversation.platform, account: origin.conversation.account, chatId: origin.conversation.chatId, sessionId: origin.sessionId } : {}),
        },
      });
      const wfInput: RepoChangeInput = {
        changeId: id,
        repo: repo.name,
        requestedBy: by,
        ...(origin ? { origin } : {}),
        clarifyTimeoutMs,
        maxQuestions,
        ...(deps.activityQueue && deps.activityQueue !== deps.taskQueue ? { activityQueue: deps.activityQueue } : {}),
      };
      try {
        await client.workflow.start(repoChangeWorkflow, {
          workflowId: id,
          taskQueue: deps.taskQueue,
          args: [wfInput],
          typedSearchAttributes: [
            { key: KindAttr, value: 'repo-change' },
            { key: RepoAttr, value: repo.name },
            ...(origin ? [{ key: PlatformAttr, value: origin.conversation.platform }, { key: ChatAttr, value: origin.conversation.chatId }] : []),
          ],
          staticSummary: `Repo change on ${repo.name}: ${req.request.slice(0, 150)}`,
          staticDetails: `Requested by ${by.name}. Base ${req.base ?? repo.defaultBranch}.\n\n${req.request.slice(0, 2000)}`,
        });
      } catch (err) {
        await db.repoChange.update({ where: { id }, data: { status: 'failed', error: `could not start: ${(err as Error).message}` } });
        throw err;
      }
      await writeReceipt(db, {
        kind: 'change.start',
        workflowId: id,
        actor: by.id,
        ...(origin ? { sessionId: origin.sessionId } : {}),
        data: { changeId: id, repo: repo.name, base: req.base ?? repo.defaultBranch, chars: req.request.length, from: origin ? `${origin.conversation.platform}:${origin.conversation.chatId}` : 'api' },
      });
      return { id, workflowId: id, runUrl: deps.runLink?.(id) ?? null };
    },

    getChange: changeView,

    async listChanges(opts: { repo?: string; limit?: number } = {}): Promise<ChangeView[]> {
      const rows = await db.repoChange.findMany({ where: opts.repo ? { repo: opts.repo } : {}, orderBy: { createdAt: 'desc' }, take: opts.limit ?? 50, select: { id: true } });
      const out: ChangeView[] = [];
      for (const r of rows) {
        const v = await changeView(r.id);
        if (v) out.push(v);
      }
      return out;
    },

    /** The patch artifact (git apply-able), by the change's content hash. */
    /**
     * The patch the change's agent produced, with where the change stands: `promoted` only when
     * the change ended done with its result (patch artifact or draft PR) after the gates; a
     * patch of a change refused, failed, cancelled or still running is not.
     */
    async getPatch(id: string): Promise<ChangePatch | undefined> {
      const r = await db.repoChange.findUnique({ where: { id } });
      if (!r?.patchHash) return undefined;
      const verdict = parseJson<GateVerdict>(r.verdict);
      return {
        patch: await getBlobText(db, r.patchHash),
        hash: r.patchHash,
        status: r.status,
        verdict: verdict?.verdict ?? null,
        reasons: verdict?.reasons ?? [],
        promoted: r.status === 'done' && r.result !== null,
        error: r.error,
      };
    },

    /** Answer a change's clarifying question (validated in the workflow: only while one is open). */
    async answer(id: string, input: unknown, by: Requester): Promise<string> {
      const parsed = ChangeAnswerSchema.safeParse(input);
      if (!parsed.success) throw new ChangeInputError(`invalid answer: ${describeIssues(parsed.error)}`);
      const row = await db.repoChange.findUnique({ where: { id } });
      if (!row) throw new ChangeInputError(`no change ${id}`, 404);
      try {
        const r = await client.workflow.getHandle(row.workflowId).executeUpdate(changeAnswerUpdate, { args: [{ text: parsed.data.text, by: by.id, byName: by.name }] });
        await writeReceipt(db, { kind: 'change.answer', workflowId: row.workflowId, actor: by.id, data: { changeId: id, chars: parsed.data.text.length } });
        return r.message;
      } catch (err) {
        if (err instanceof WorkflowUpdateFailedError) throw new ChangeInputError(err.cause?.message ?? err.message, 409);
        if (err instanceof WorkflowNotFoundError) throw new ChangeInputError(`change ${id} has ended`, 409);
        throw err;
      }
    },

    /** The chat's running changes (for /status). */
    async runningInChat(conversation: ConversationKey): Promise<Array<{ id: string; repo: string; phase: string; question: string | null }>> {
      return db.repoChange.findMany({
        where: { platform: conversation.platform, account: conversation.account, chatId: conversation.chatId, status: 'running' },
        orderBy: { createdAt: 'asc' },
        select: { id: true, repo: true, phase: true, question: true },
      });
    },

    /** The chat's change that waits for an answer, if any. */
    async waitingInChat(conversation: ConversationKey): Promise<string | undefined> {
      const r = await db.repoChange.findFirst({
        where: { platform: conversation.platform, account: conversation.account, chatId: conversation.chatId, status: 'running', phase: 'clarify' },
        orderBy: { createdAt: 'desc' },
      });
      return r?.id;
    },

    /** /stop in a chat: cancel the chat's running changes (their sandboxes are killed, trees removed). */
    async stopInChat(conversation: ConversationKey, by: Requester): Promise<string[]> {
      const rows = await db.repoChange.findMany({ where: { platform: conversation.platform, account: conversation.account, chatId: conversation.chatId, status: 'running' } });
      const stopped: string[] = [];
      for (const r of rows) {
        try {
          await client.workflow.getHandle(r.workflowId).cancel();
          stopped.push(r.id);
          await writeReceipt(db, { kind: 'command', workflowId: r.workflowId, actor: by.id, data: { command: 'stop', changeId: r.id } });
        } catch (err) {
          if (!(err instanceof WorkflowNotFoundError)) throw err;
        }
      }
      return stopped;
    },

    /** /steer in a chat whose change is in its coding phase: the agent reads it before its next step. */
    async steerInChat(conversation: ConversationKey, text: string, by: Requester): Promise<string | undefined> {
      const r = await db.repoChange.findFirst({
        where: { platform: conversation.platform, account: conversation.account, chatId: conversation.chatId, status: 'running', phase: { in: ['plan', 'work'] } },
        orderBy: { createdAt: 'desc' },
      });
      if (!r) return undefined;
      await db.changeSteer.create({ data: { changeId: r.id, text, by: by.name } });
      try {
        await client.workflow.getHandle(r.workflowId).signal(changeSteerSignal, { text: text.slice(0, 200), by: by.name });
      } catch (err) {
        if (!(err instanceof WorkflowNotFoundError)) throw err;
      }
      await writeReceipt(db, { kind: 'change.steer', workflowId: r.workflowId, actor: by.id, data: { changeId: r.id, chars: text.length } });
      return `Steering noted for change ${r.id}: the coding agent takes it in before its next step.`;
    },
  };
}

export type ChangeService = ReturnType<typeof createChangeService>;
