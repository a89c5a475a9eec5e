/**
 * The activities of a governed repository change: intake, planner, isolated worker,
 * validation gate, approval request, promotion gate and the closing record. Each is keyed or
 * idempotent so a retry never repeats an effect; every work tree is a throwaway temporary
 * directory removed when the activity ends, failed or not. The work itself lives in
 * domain/changes/ (gate, model steps, promotion, records) and domain/store/changes.ts.
 *
 * Trust boundaries:
 * - the coding agent (built-in or external) sees only its clone, under bubblewrap, with no
 *   credentials and no network; its only output is the patch (and its transcript);
 * - the validation gate applies the patch to a second clean clone and enforces the merged
 *   (deny-wins) policy and the configured checks;
 * - only the promotion gate reads the GitHub token, one change per repository at a time.
 */
import { activityInfo, Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import path from 'node:path';
import type { Logger } from 'pino';
import type { ConversationKey } from '../common/ids.js';
import {
  buildIntakeResult,
  draftIsPlannable,
  PlanSchema,
  TaskDraftSchema,
  type ChangeResult,
  type GateVerdict,
  type IntakeResult,
} from '../common/changes.js';
import { changePolicy, type RepoPolicyInput } from '../common/changes/policy.js';
import { recordGateVerdict } from '../common/metrics.js';
import { putBlob } from '../domain/blobs.js';
import { heldSecrets, repoPolicyFile, validateOn, withTempDir } from '../domain/changes/gate.js';
import { draftFromRequest, modelFailure, modelFor, planFromDraft, type ModelRegistry } from '../domain/changes/model-steps.js';
import { acquireLease, LEASE_MS, openChangePr, refused } from '../domain/changes/promotion.js';
import { closingRecords, endNotice, planDetails, prBody, taskState, verdictTaskState } from '../domain/changes/records.js';
import { runBuiltinAgent, runExternalAgent, type AgentRunResult, type AgentTask } from '../domain/changes/coding-agent.js';
import type { Db } from '../domain/db.js';
import { cloneAt, diffWorkTree, resolveBranch } from '../domain/changes/git.js';
import { askAdminsToApprove } from '../domain/governance.js';
import { ModelBudgetExceededError, ModelNotConfiguredError, type SpendScopes } from '../domain/model.js';
import { chatBindingId, identityIds, scopesOf } from '../domain/spend-scopes.js';
import { deliverOnce, type Senders } from '../domain/outbox.js';
import { writeReceipt } from '../domain/receipts.js';
import { SandboxRefusedError } from '../domain/sandbox.js';
import { ensureApproval } from '../domain/store/approvals.js';
import { heldSecrets as registryHeld, holdSecrets } from '../domain/secrets.js';
import { loadChange, loadRepo, recordChange, recordChangeEnd, releaseLease, renewLease, setChangePhase, steersAfter, type ChangeRow, type RepoRecord } from '../domain/store/changes.js';

export { loadRepo, type RepoRecord } from '../domain/store/changes.js';
export { REPO_POLICY_FILE } from '../domain/changes/gate.js';

export interface RepoChangeSettings {
  /** The operator's policy layer (STEWARD_REPO_POLICY): the top of the deny-wins merge. */
  globalPolicy: RepoPolicyInput;
  /** Extra read-only paths visible in the sandbox (toolchains the checks need). */
  sandboxRoBinds: readonly string[];
  /** The GitHub API base URL when a repository names none. */
  githubApiUrl: string;
  /** The model intake, planner and the built-in agent use when the repository names none. */
  defaultModel: string;
  /** Model steps the built-in coding agent may take. */
  agentMaxSteps: number;
  /** Secrets by reference (`env:NAME` -> value); default process.env. Only the promotion gate calls it. */
  secret?: (name: string) => string | undefined;
}

export const DEFAULT_REPO_CHANGE_SETTINGS: RepoChangeSettings = {
  globalPolicy: {},
  sandboxRoBinds: [],
  githubApiUrl: 'https://api.github.com',
  defaultModel: 'openai-compatible:default',
  agentMaxSteps: 30,
};

export interface RepoChangeDeps {
  db: Db;
  models: ModelRegistry;
  senders: Senders;
  log?: Logger;
  runLink?: (workflowId: string) => string | undefined;
  onTranscript?: (sessionId: string, role: 'user' | 'assistant' | 'system') => void;
  settings: RepoChangeSettings;
}

/** The largest patch a coding agent may hand on (the gate's diff limits are usually far lower). */
export const MAX_PATCH_BYTES = 20 * 1024 * 1024;

/** What every activity of a change works with. */
interface ChangeContext extends RepoChangeDeps {
  secret: (name: string) => string | undefined;
}

/** The workflow run this activity serves, for receipts. */
function wfRef() {
  const info = activityInfo();
  return info.workflowExecution ? { workflowId: info.workflowExecution.workflowId, runId: info.workflowExecution.runId } : {};
}

/** The running activity's cancellation and heartbeat. */
function control(details?: unknown) {
  const ctx = Context.current();
  return { signal: ctx.cancellationSignal, heartbeat: () => ctx.heartbeat(details) };
}

/** Tell the chat that asked (keyed: sent once). Changes started from the API have no chat. */
async function tellOrigin(c: ChangeContext, changeId: string, key: string, text: string): Promise<void> {
  const row = await loadChange(c.db, changeId);
  if (!row.platform || !row.account || !row.chatId || !row.sessionId) return;
  const conversation = { platform: row.platform, account: row.account, chatId: row.chatId } as ConversationKey;
  await deliverOnce(c.db, c.senders, { key: `change:${changeId}:${key}`, sessionId: row.sessionId, conversation, kind: 'notice', text });
  c.onTranscript?.(row.sessionId, 'system');
}

/**
 * Whom a change's model steps are spent for: its repository; the people who shaped it (their
 * identities): its requester, the requester set of the turn that proposed it and whoever answered
 * its clarifying questions (`shapedBy`: the workflow knows them and passes them in its activities'
 * input) and whoever steered it (read at each call: a steer reaches a running coding agent
 * through the database); and the chat it was asked in.
 */
async function changeScopes(c: ChangeContext, row: ChangeRow, shapedBy: readonly string[] = []): Promise<SpendScopes> {
  // a note kept before its steerer's id was: the name (an identity id only by chance, then dropped)
  const steerers = (await steersAfter(c.db, row.id, 0)).map((s) => s.byId ?? s.by);
  const [people, chat] = await Promise.all([
    identityIds(c.db, [row.requestedBy, ...shapedBy, ...steerers]),
    row.platform && row.account && row.chatId ? chatBindingId(c.db, { platform: row.platform, account: row.account, chatId: row.chatId } as ConversationKey) : undefined,
  ]);
  return scopesOf({ repository: row.repo, people, ...(chat ? { chat } : {}) });
}

/** The input of a change's steps that call a model. */
export interface ChangeStepInput {
  changeId: string;
  /**
   * Who shaped the change besides its requester, as the workflow knows them: the requester set
   * of the turn that proposed it, whoever answered its questions or steered it so far (identity
   * ids). Its model calls are spent for them too. Absent in runs before it was passed.
   */
  shapedBy?: string[];
}

const draftOf = (row: ChangeRow) => TaskDraftSchema.parse(JSON.parse(row.draft ?? 'null'));
const draftScope = (row: ChangeRow) => (row.draft ? TaskDraftSchema.parse(JSON.parse(row.draft)).scope : []);

/** Intake: the request (and the answers so far) become a task draft, or one question. */
async function changeIntake(c: ChangeContext, input: ChangeStepInput & { answers: string[] }): Promise<{ status: IntakeResult['status']; question?: string; plannable: boolean; gap?: string }> {
  const row = await loadChange(c.db, input.changeId);
  const repo = await loadRepo(c.db, row.repo);
  await setChangePhase(c.db, input.changeId, 'intake');
  const out = await draftFromRequest(c.models, modelFor(repo, c.settings.defaultModel), { repo, baseBranch: row.baseBranch, request: row.request, answers: input.answers }, control(), {
    key: `change:${input.changeId}:intake:${input.answers.length}`,
    kind: 'change-intake',
    scopes: () => changeScopes(c, row, input.shapedBy),
  });
  const result = buildIntakeResult(row.request, out, input.answers);
  const draft = result.task_draft;
  const planned = result.status === 'planned';
  const state = taskState(input.changeId, draft, planned ? 'plan' : 'clarify', planned ? 'planned' : 'needs_clarification', [], row.createdAt);
  await recordChange(c.db, input.changeId, { draft, taskState: state });
  await writeReceipt(c.db, {
    key: `change:${input.changeId}:intake:${input.answers.length}`,
    kind: 'change.intake',
    ...wfRef(),
    data: { changeId: input.changeId, status: result.status, intent: draft.intent, scope: draft.scope, question: result.interaction.question },
  });
  return {
    status: result.status,
    plannable: draftIsPlannable(draft),
    ...(result.interaction.question ? { question: result.interaction.question } : {}),
    ...(result.interaction.blocking_gap ? { gap: result.interaction.blocking_gap } : {}),
  };
}

/** Ask the clarifying question in the chat that asked. */
async function changeAsk(c: ChangeContext, input: { changeId: string; question: string; round: number }): Promise<void> {
  await setChangePhase(c.db, input.changeId, 'clarify', { question: input.question });
  await tellOrigin(c, input.changeId, `q${input.round}`, `Change ${input.changeId} needs one answer before it is planned:\n${input.question}\nAnswer with /answer <text>.`);
  await writeReceipt(c.db, { key: `change:${input.changeId}:question:${input.round}`, kind: 'change.question', ...wfRef(), data: { changeId: input.changeId, question: input.question } });
}

/** The planner: a model step that turns the draft into a plan, stored as an artifact. */
async function changePlan(c: ChangeContext, input: ChangeStepInput): Promise<{ planHash: string; details: string }> {
  const row = await loadChange(c.db, input.changeId);
  const repo = await loadRepo(c.db, row.repo);
  await setChangePhase(c.db, input.changeId, 'plan', { question: null });
  const draft = draftOf(row);
  const plan = await planFromDraft(c.models, modelFor(repo, c.settings.defaultModel), repo, draft, control(), { key: `change:${input.changeId}:plan`, kind: 'change-plan', scopes: () => changeScopes(c, row, input.shapedBy) });
  const planHash = await putBlob(c.db, JSON.stringify(plan, null, 2), 'application/json');
  const details = planDetails(input.changeId, repo.name, draft.goal, plan);
  await recordChange(c.db, input.changeId, { plan, planHash });
  await writeReceipt(c.db, { key: `change:${input.changeId}:plan`, kind: 'change.plan', ...wfRef(), data: { changeId: input.changeId, planHash, steps: plan.steps.length } });
  await tellOrigin(c, input.changeId, 'plan', `${details}\n\nThe coding agent starts now (/stop stops it, /steer guides it).`);
  return { planHash, details };
}

/** The coding agent (external command or built-in) on the clone in `tree`, under the merged policy's limits. */
async function runAgentOn(c: ChangeContext, repo: RepoRecord, row: ChangeRow, tree: string, task: AgentTask, shapedBy: readonly string[] = []): Promise<AgentRunResult> {
  const ctx = Context.current();
  // the repository's own policy file can only tighten the operator's (an invalid one is the gate's to refuse)
  const file = await repoPolicyFile(tree);
  const policy = changePolicy({ global: c.settings.globalPolicy, registration: repo.policy, repo: file.ok ? file.policy : {} });
  const limits = {
    maxSteps: ('kind' in repo.agent ? repo.agent.maxSteps : undefined) ?? c.settings.agentMaxSteps,
    commands: policy.commands,
    commandTimeoutMs: policy.commandTimeoutSeconds * 1000,
    maxOutputBytes: policy.maxOutputBytes,
    roBinds: c.settings.sandboxRoBinds,
  };
  const common = { workTree: tree, task, limits, signal: ctx.cancellationSignal, heartbeat: (d: unknown) => ctx.heartbeat(d) };
  let lastSteer = 0;
  const takeSteers = async (): Promise<string[]> => {
    const rows = await steersAfter(c.db, task.changeId, lastSteer);
    if (rows.length) lastSteer = rows.at(-1)!.id;
    return rows.map((r) => `${r.text} (from ${r.by})`);
  };
  try {
    if ('command' in repo.agent) return await runExternalAgent({ ...common, argv: repo.agent.command, timeoutMs: (repo.agent.timeoutSeconds ?? 3600) * 1000 });
    return await runBuiltinAgent({ ...common, models: c.models, model: modelFor(repo, c.settings.defaultModel), takeSteers, spend: { key: `change:${task.changeId}:agent`, scopes: () => changeScopes(c, row, shapedBy) } });
  } catch (err) {
    if (ctx.cancellationSignal.aborted) throw ctx.cancellationSignal.reason ?? err;
    if (err instanceof SandboxRefusedError && err.reason === 'unavailable') throw ApplicationFailure.create({ type: 'SandboxUnavailable', message: err.message, nonRetryable: true });
    // a model budget's refusal is not retried (the activity's retry would be refused again)
    if (err instanceof ModelNotConfiguredError || err instanceof ModelBudgetExceededError) throw modelFailure(err);
    throw err;
  }
}

/** The base commit a change works on: recorded, else the base branch's head now. */
async function baseShaOf(row: ChangeRow, repo: RepoRecord): Promise<string> {
  if (row.baseSha) return row.baseSha;
  try {
    return await resolveBranch(repo.cloneUrl, row.baseBranch);
  } catch (err) {
    throw refused(`cannot resolve the base branch ${row.baseBranch} of ${repo.name}: ${(err as Error).message}`);
  }
}

type WorkResult = { baseSha: string; patchHash?: string; files: number; blocked: number; summary: string; transcriptHash: string };

/**
 * The isolated worker: a fresh clone at the base commit in a directory of this run only,
 * the coding agent in the sandbox, and the patch it leaves. The directory is removed when
 * the activity ends, whatever the outcome.
 */
async function changeWork(c: ChangeContext, input: ChangeStepInput): Promise<WorkResult> {
  try {
    return await changeWorkAttempt(c, input);
  } catch (err) {
    throw workErrorOf(err, activityInfo().attempt, Context.current().cancellationSignal.aborted);
  }
}

/**
 * How many attempts of a change's work may end in the work's own error: the workflow retries the
 * work up to its `maximumAttempts` (5, workflows/changes/repo-change.ts), for attempts that were
 * lost (the worker died: a heartbeat timeout, which no code of the attempt sees), but an error of
 * the work itself (the agent, the clone, the patch) from this attempt on is final. So a change
 * survives its worker dying several times, and a failing change runs its agent at most twice.
 */
export const WORK_OWN_ERROR_ATTEMPTS = 2;

/** The error a work attempt ends with: from the WORK_OWN_ERROR_ATTEMPTS-th attempt on, not retried (a cancellation as it is). */
export function workErrorOf(err: unknown, attempt: number, cancelled: boolean): unknown {
  if (cancelled || attempt < WORK_OWN_ERROR_ATTEMPTS) return err;
  if (err instanceof ApplicationFailure) {
    return err.nonRetryable ? err : ApplicationFailure.create({ type: err.type ?? 'Error', message: err.message, details: err.details as unknown[] | undefined, nonRetryable: true, ...(err.cause ? { cause: err.cause } : {}) });
  }
  const e = err instanceof Error ? err : new Error(String(err));
  return ApplicationFailure.create({ type: e.name || 'Error', message: e.message, nonRetryable: true, cause: e });
}

async function changeWorkAttempt(c: ChangeContext, input: ChangeStepInput): Promise<WorkResult> {
  const ctx = Context.current();
  const attempt = activityInfo().attempt;
  const row = await loadChange(c.db, input.changeId);
  const repo = await loadRepo(c.db, row.repo);
  const baseSha = await baseShaOf(row, repo);
  await setChangePhase(c.db, input.changeId, 'work', { baseSha });
  const draft = draftOf(row);
  const plan = PlanSchema.parse(JSON.parse(row.plan ?? 'null'));
  const task: AgentTask = {
    changeId: input.changeId,
    goal: draft.goal,
    scope: draft.scope,
    acceptance: draft.acceptance,
    constraints: draft.constraints,
    plan: { steps: plan.steps, files: plan.files, checks: plan.checks },
  };
  return withTempDir(`steward-work-`, async (dir) => {
    const tree = path.join(dir, 'tree');
    await cloneAt(repo.cloneUrl, baseSha, tree);
    ctx.heartbeat({ phase: 'cloned' });
    const run = await runAgentOn(c, repo, row, tree, task, input.shapedBy);
    if (ctx.cancellationSignal.aborted) throw ctx.cancellationSignal.reason ?? new Error('cancelled');
    const diff = await diffWorkTree(tree, baseSha);
    if (Buffer.byteLength(diff.patch) > MAX_PATCH_BYTES) {
      throw refused(`the coding agent left a patch of ${Buffer.byteLength(diff.patch)} bytes; at most ${MAX_PATCH_BYTES} are handed to the gate`);
    }
    const transcriptHash = await putBlob(c.db, JSON.stringify(run.transcript, null, 2), 'application/json');
    const patchHash = diff.patch.trim() ? await putBlob(c.db, diff.patch, 'text/x-diff; charset=utf-8') : undefined;
    for (const [i, b] of run.blocked.entries()) {
      await writeReceipt(c.db, {
        key: `change:${input.changeId}:blocked:${attempt}:${i}`,
        kind: 'sandbox.blocked',
        ...wfRef(),
        data: { changeId: input.changeId, tool: b.tool, reason: b.reason, detail: b.detail.slice(0, 500) },
      });
    }
    await recordChange(c.db, input.changeId, { patchHash: patchHash ?? null, transcriptHash });
    await writeReceipt(c.db, {
      key: `change:${input.changeId}:work:${attempt}`,
      kind: 'change.work',
      ...wfRef(),
      data: { changeId: input.changeId, baseSha, patchHash, files: diff.files.length, steps: run.steps, finished: run.finished, blocked: run.blocked.length, usage: run.usage },
    });
    return { baseSha, ...(patchHash ? { patchHash } : {}), files: diff.files.length, blocked: run.blocked.length, summary: run.summary.slice(0, 1000), transcriptHash };
  });
}

/** The gate on `baseSha` for this change's patch and scope. */
function gate(c: ChangeContext, repo: RepoRecord, row: ChangeRow, baseSha: string, patchHash: string, beat: () => void): Promise<GateVerdict> {
  const signal = Context.current().cancellationSignal;
  return validateOn({ db: c.db, settings: c.settings, repo, baseSha, patchHash, taskScope: draftScope(row), secretValues: [...heldSecrets(repo, c.secret), ...registryHeld().map((s) => s.value)], signal, beat });
}

/** The validation gate: its verdict (with evidence) is a receipt and a search attribute. */
async function changeValidate(c: ChangeContext, input: { changeId: string; baseSha: string; patchHash: string }): Promise<GateVerdict> {
  const row = await loadChange(c.db, input.changeId);
  const repo = await loadRepo(c.db, row.repo);
  await setChangePhase(c.db, input.changeId, 'validate');
  const verdict = await gate(c, repo, row, input.baseSha, input.patchHash, control().heartbeat);
  const state = verdictTaskState(input.changeId, draftOf(row), verdict, row.createdAt);
  await recordChange(c.db, input.changeId, { verdict, taskState: state });
  const recorded = await writeReceipt(c.db, {
    key: `change:${input.changeId}:gate:${input.patchHash}:${input.baseSha}`,
    kind: 'gate.verdict',
    ...wfRef(),
    data: { changeId: input.changeId, repo: repo.name, verdict: verdict.verdict, reasons: verdict.reasons, stats: verdict.stats, checks: verdict.checks.map((ch) => ({ name: ch.name, exitCode: ch.exitCode, passed: ch.passed })) },
  });
  if (recorded) recordGateVerdict(verdict.verdict, 'validation');
  return verdict;
}

/** Ask the admins to approve the promotion (the approval flow of chat: buttons, /approve-action, API). */
async function changeRequestApproval(c: ChangeContext, input: { changeId: string; approvalId: string; timeoutMs: number }): Promise<{ approvalId: string; timeoutMs: number }> {
  const row = await loadChange(c.db, input.changeId);
  await setChangePhase(c.db, input.changeId, 'approval');
  const info = activityInfo();
  const summary = `promote change ${input.changeId} on ${row.repo} as a draft PR`;
  const approval = await ensureApproval(c.db, {
    id: input.approvalId,
    workflowId: info.workflowExecution?.workflowId ?? input.changeId,
    runId: info.workflowExecution?.runId ?? null,
    sessionId: row.sessionId ?? input.changeId,
    turnId: input.changeId,
    toolCallId: 'promote',
    tool: 'promote_change',
    summary,
    payload: JSON.stringify({ repo: row.repo, request: row.request.slice(0, 500), patchHash: row.patchHash }),
    risk: 'dangerous',
    requestedBy: row.requestedBy,
    deadline: new Date(Date.now() + input.timeoutMs),
  });
  const link = c.runLink?.(row.workflowId);
  const verdict = row.verdict ? (JSON.parse(row.verdict) as GateVerdict) : undefined;
  const text = [
    `**Approval needed** (${approval.id}): ${row.requestedByName} asks to ${summary}.`,
    `Request: ${row.request.slice(0, 500)}`,
    verdict ? `Gate: ${verdict.verdict} (${verdict.stats.files} files, +${verdict.stats.additions} -${verdict.stats.deletions}; checks ${verdict.checks.map((ch) => `${ch.name} ${ch.passed ? 'passed' : 'failed'}`).join(', ') || 'none'}).` : '',
    `Patch: GET /api/v1/changes/${input.changeId}/patch`,
    `Deadline: ${approval.deadline.toISOString()} (denied if nobody decides). The requester may not approve their own change.`,
    `Approve with /approve-action ${approval.id}, deny with /deny-action ${approval.id} [reason].${link ? ` Run: ${link}` : ''}`,
  ]
    .filter(Boolean)
    .join('\n');
  const targets = await askAdminsToApprove(c.db, c.senders, approval.id, text);
  await tellOrigin(c, input.changeId, 'approval', `Change ${input.changeId} passed the validation gate and waits for an admin to approve the draft PR (approval ${approval.id}).`);
  await writeReceipt(c.db, {
    key: `approval:${approval.id}:requested`,
    kind: 'approval.requested',
    ...wfRef(),
    actor: row.requestedBy,
    data: { approvalId: approval.id, tool: 'promote_change', summary, deadline: approval.deadline.toISOString(), notified: targets.length },
  });
  return { approvalId: approval.id, timeoutMs: Math.max(0, approval.deadline.getTime() - Date.now()) };
}

type PromoteInput = { changeId: string; baseSha: string; patchHash: string; promotion: GateVerdict['promotion'] };
type PromoteOutcome = { kind: 'promoted'; result: ChangeResult } | { kind: 'refused'; reason: string };

/**
 * The base at promotion time: unchanged, or moved and the patch validated again there
 * (`refused` when it no longer passes).
 */
async function currentBase(c: ChangeContext, repo: RepoRecord, row: ChangeRow, input: PromoteInput, beat: () => void): Promise<{ baseSha: string; revalidated: boolean } | { refused: string }> {
  const current = await resolveBranch(repo.cloneUrl, row.baseBranch);
  if (current === input.baseSha) return { baseSha: current, revalidated: false };
  // The base moved since validation: the patch must still apply and pass on the new base.
  const again = await gate(c, repo, row, current, input.patchHash, beat);
  const recorded = await writeReceipt(c.db, {
    key: `change:${input.changeId}:revalidate:${current}`,
    kind: 'gate.verdict',
    ...wfRef(),
    data: { changeId: input.changeId, repo: repo.name, verdict: again.verdict, reasons: again.reasons, revalidation: true, from: input.baseSha, to: current },
  });
  if (recorded) recordGateVerdict(again.verdict, 'revalidation');
  await recordChange(c.db, input.changeId, { verdict: again });
  if (again.verdict !== 'pass') {
    const reason = `the base branch ${row.baseBranch} moved from ${input.baseSha.slice(0, 12)} to ${current.slice(0, 12)} and the change no longer passes the gate there: ${again.reasons.join('; ')}`;
    await writeReceipt(c.db, { key: `change:${input.changeId}:promotion`, kind: 'promotion', ...wfRef(), data: { changeId: input.changeId, refused: reason } });
    return { refused: reason };
  }
  await recordChange(c.db, input.changeId, { baseSha: current });
  return { baseSha: current, revalidated: true };
}

/**
 * The promotion gate: the only holder of write credentials. One change per repository at a
 * time (a lease); the base must not have moved since validation, or the patch is validated
 * again on the new base; then the patch artifact, or a draft PR through octokit.
 */
async function changePromote(c: ChangeContext, input: PromoteInput): Promise<PromoteOutcome> {
  const ctx = Context.current();
  const attempt = activityInfo().attempt;
  const row = await loadChange(c.db, input.changeId);
  const repo = await loadRepo(c.db, row.repo);
  await setChangePhase(c.db, input.changeId, 'promote');
  await acquireLease(c.db, repo.name, input.changeId, { signal: ctx.cancellationSignal, heartbeat: () => ctx.heartbeat({ waiting: 'promotion lease' }), sleep: (ms) => ctx.sleep(ms) });
  // a long revalidation keeps the lease alive (a crashed holder's lease expires instead)
  const beat = () => {
    ctx.heartbeat({ holding: 'promotion lease' });
    void renewLease(c.db, repo.name, input.changeId, new Date(Date.now() + LEASE_MS)).catch(() => undefined);
  };
  try {
    const base = await currentBase(c, repo, row, input, beat);
    if ('refused' in base) return { kind: 'refused', reason: base.refused };
    const { baseSha, revalidated } = base;
    const result: ChangeResult = { kind: 'patch', patchHash: input.patchHash, patchPath: `/api/v1/changes/${input.changeId}/patch`, baseSha, ...(revalidated ? { revalidated } : {}) };
    if (input.promotion !== 'patch' && repo.github) {
      const gh = repo.github;
      const token = c.secret(gh.tokenRef.slice('env:'.length));
      if (!token) throw refused(`the GitHub token ${gh.tokenRef} is not set in the promotion gate's environment`);
      const fresh = await loadChange(c.db, input.changeId);
      const body = await prBody(c.db, fresh, baseSha, revalidated, c.runLink?.(row.workflowId));
      const goal = (fresh.draft ? (JSON.parse(fresh.draft) as { goal?: string }).goal : undefined) ?? row.request;
      result.kind = 'draft-pr';
      result.pr = await openChangePr(c.db, {
        gh,
        apiUrl: c.settings.githubApiUrl,
        token,
        cloneUrl: repo.cloneUrl,
        baseBranch: row.baseBranch,
        baseSha,
        patchHash: input.patchHash,
        changeId: input.changeId,
        title: `Steward: ${goal.slice(0, 120)}`,
        commitMessage: `${goal.slice(0, 72)}\n\nSteward change ${input.changeId} (requested by ${row.requestedByName}).`,
        body,
        signal: ctx.cancellationSignal,
      });
    }
    await recordChange(c.db, input.changeId, { result, baseSha });
    await writeReceipt(c.db, {
      key: `change:${input.changeId}:promotion`,
      kind: 'promotion',
      ...wfRef(),
      data: { changeId: input.changeId, repo: repo.name, kind: result.kind, patchHash: result.patchHash, baseSha, revalidated, attempt, ...(result.pr ? { pr: result.pr.url } : {}) },
    });
    return { kind: 'promoted', result };
  } finally {
    await releaseLease(c.db, repo.name, input.changeId);
  }
}

type FinishInput = { changeId: string; status: 'done' | 'failed' | 'refused' | 'cancelled'; phase: string; reason?: string };

/** Close the change: status, the report (report schema), the task state, the chat told. */
async function changeFinish(c: ChangeContext, input: FinishInput): Promise<void> {
  const row = await loadChange(c.db, input.changeId);
  const { report, state, result } = await closingRecords(c.db, row, input);
  await recordChangeEnd(c.db, input.changeId, {
    status: input.status,
    phase: input.status === 'done' ? 'done' : input.phase,
    report,
    ...(state ? { taskState: state } : {}),
    ...(input.reason ? { error: input.reason.slice(0, 4000) } : {}),
  });
  await writeReceipt(c.db, {
    key: `change:${input.changeId}:end`,
    kind: 'change.end',
    ...wfRef(),
    data: { changeId: input.changeId, status: input.status, phase: input.phase, reason: input.reason, patchHash: result?.patchHash, pr: result?.pr?.url },
  });
  const link = c.runLink?.(row.workflowId);
  await tellOrigin(c, input.changeId, 'end', `${endNotice(input.changeId, input, result)}${link ? `\nRun: ${link}` : ''}`);
}

/** The repo-change workflow's activities, bound to their dependencies. */
export function createRepoChangeActivities(deps: RepoChangeDeps) {
  const read = deps.settings.secret ?? ((name: string) => process.env[name]);
  // a repository's token read by reference joins the one registry of held secrets (domain/secrets.ts)
  const secret = (name: string): string | undefined => {
    const v = read(name);
    if (v) holdSecrets([{ name, value: v }]);
    return v;
  };
  const c: ChangeContext = { ...deps, secret };
  return {
    changeIntake: (input: ChangeStepInput & { answers: string[] }) => changeIntake(c, input),
    changeAsk: (input: { changeId: string; question: string; round: number }) => changeAsk(c, input),
    /** A notice about the change in its chat (keyed). */
    changeNote: (input: { changeId: string; key: string; text: string }) => tellOrigin(c, input.changeId, input.key, `Change ${input.changeId}: ${input.text}`),
    changePlan: (input: ChangeStepInput) => changePlan(c, input),
    changeWork: (input: ChangeStepInput) => changeWork(c, input),
    changeValidate: (input: { changeId: string; baseSha: string; patchHash: string }) => changeValidate(c, input),
    changeRequestApproval: (input: { changeId: string; approvalId: string; timeoutMs: number }) => changeRequestApproval(c, input),
    changePromote: (input: PromoteInput) => changePromote(c, input),
    changeFinish: (input: FinishInput) => changeFinish(c, input),
  };
}
