/**
 * The activities of a governed repository change: intake, planner, isolated worker,
 * validation gate, approval request, promotion gate and the closing record. Each is keyed or
 * idempotent so a retry never repeats an effect; every work tree is a throwaway temporary
 * directory removed when the activity ends, failed or not.
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
import { tool, type ModelMessage, type ToolSet } from 'ai';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import type { ConversationKey } from '../common/ids.js';
import {
  AgentSpecSchema,
  buildIntakeResult,
  CheckSchema,
  draftIsPlannable,
  GitHubTargetSchema,
  HARNESS_SCHEMA_VERSION,
  IntakeModelOutputSchema,
  PlanSchema,
  TaskDraftSchema,
  type AgentSpec,
  type Check,
  type CheckEvidence,
  type ChangeResult,
  type Evidence,
  type GateVerdict,
  type GitHubTarget,
  type IntakeResult,
  type Plan,
  type Report,
  type TaskDraft,
  type TaskState,
} from '../common/repo-change.js';
import { changePolicy, checkPatchPolicy, matchesGlob, parseUnifiedDiff, validateGlob, RepoPolicySchema, type EffectivePolicy, type RepoPolicyInput } from '../common/repo-policy.js';
import { getBlobText, putBlob } from '../domain/blobs.js';
import { runBuiltinAgent, runExternalAgent, type AgentRunResult, type AgentTask } from '../domain/coding-agent.js';
import type { Db } from '../domain/db.js';
import { askAdminsToApprove } from '../domain/governance.js';
import { applyPatch, changedFiles, cloneAt, diffWorkTree, fileMode, makeTempDir, readFileAtWorkTree, removeDir, resolveBranch } from '../domain/git.js';
import { BaseMovedError, GitHubError, openDraftPullRequest } from '../domain/github.js';
import { classifyModelError, ModelNotConfiguredError, runModelStep, type createModelRegistry } from '../domain/model.js';
import { deliverOnce, type Senders } from '../domain/outbox.js';
import { writeReceipt } from '../domain/receipts.js';
import { recordGateVerdict } from '../common/metrics.js';
import { runSandboxed, SandboxRefusedError } from '../domain/sandbox.js';

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
  models: ReturnType<typeof createModelRegistry>;
  senders: Senders;
  log?: Logger;
  runLink?: (workflowId: string) => string | undefined;
  onTranscript?: (sessionId: string, role: 'user' | 'assistant' | 'system') => void;
  settings: RepoChangeSettings;
}

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

/** How long the promotion gate's lease on a repository lasts without renewal. */
const LEASE_MS = 15 * 60_000;
/** The largest patch a coding agent may hand on (the gate's diff limits are usually far lower). */
export const MAX_PATCH_BYTES = 20 * 1024 * 1024;

/** Where the repository's own policy layer lives in its tree. */
export const REPO_POLICY_FILE = '.steward/policy.json';

const refused = (message: string) => ApplicationFailure.create({ type: 'ChangeRefused', message, nonRetryable: true });

function tail(text: string, max = 4000): string {
  return text.length <= max ? text : `…${text.slice(text.length - max)}`;
}

function now(): string {
  return new Date().toISOString();
}

const INTAKE_SYSTEM = [
  "You are the intake step of Steward's governed repository changes.",
  'Turn the change request into a task draft and submit it by calling submit_task_draft exactly once.',
  'Fill goal, scope (repository paths or globs the change may touch) and acceptance (checkable criteria) only from what the request and the clarifications say or clearly imply.',
  'When something essential is missing or unclear, leave that field empty and put ONE precise question in open_questions. Do not invent requirements.',
].join('\n');

const PLAN_SYSTEM = [
  "You are the planner of Steward's governed repository changes.",
  'Turn the confirmed task draft into a short plan and submit it by calling submit_plan exactly once: the steps, the files to change (within the scope), and the checks that prove it.',
  'You do not edit code; a separate coding agent follows your plan in an isolated sandbox.',
].join('\n');

const INTAKE_TOOLS: ToolSet = {
  submit_task_draft: tool({ description: 'Submit the task draft for this change request.', inputSchema: IntakeModelOutputSchema }),
};
const PLAN_TOOLS: ToolSet = {
  submit_plan: tool({ description: 'Submit the plan for this change.', inputSchema: PlanSchema }),
};

/** Find the submission in a model step: the tool call, else a JSON object in the text. */
function submission(out: { text: string; toolCalls: Array<{ toolName: string; input: unknown }> }, toolName: string): unknown {
  const call = out.toolCalls.find((c) => c.toolName === toolName);
  if (call) return call.input;
  const fenced = /```(?:json)?\s*([\s\S]*?)```/.exec(out.text)?.[1] ?? out.text;
  const start = fenced.indexOf('{');
  const end = fenced.lastIndexOf('}');
  if (start >= 0 && end > start) {
    try {
      return JSON.parse(fenced.slice(start, end + 1));
    } catch {
      // fall through
    }
  }
  return undefined;
}

function modelFailure(err: unknown): unknown {
  if (err instanceof ModelNotConfiguredError) return ApplicationFailure.create({ type: 'ModelNotConfigured', message: err.message, nonRetryable: true });
  const c = classifyModelError(err);
  return ApplicationFailure.create({ type: c.status === 401 || c.status === 403 ? 'ModelAuth' : c.retryable ? 'ModelUnavailable' : 'ModelBadRequest', message: c.message, nonRetryable: !c.retryable });
}

function planDetails(changeId: string, repo: string, goal: string, plan: Plan): string {
  return [
    `**Repo change ${changeId}** on ${repo}`,
    `Goal: ${goal}`,
    '',
    `Plan: ${plan.summary}`,
    ...plan.steps.map((s, i) => `${i + 1}. ${s}`),
    ...(plan.files.length ? ['', `Files: ${plan.files.join(', ')}`] : []),
    ...(plan.checks.length ? [`Checks: ${plan.checks.join(', ')}`] : []),
  ].join('\n');
}

// eslint-disable-next-line max-lines-per-function -- longer than 150 lines before the rule came; to be split (issue 13)
export function createRepoChangeActivities(deps: RepoChangeDeps) {
  const { db, senders } = deps;
  const settings = deps.settings;
  const secret = settings.secret ?? ((name: string) => process.env[name]);

  function wfRef() {
    const info = activityInfo();
    return info.workflowExecution ? { workflowId: info.workflowExecution.workflowId, runId: info.workflowExecution.runId } : {};
  }

  async function loadChange(changeId: string) {
    const row = await db.repoChange.findUnique({ where: { id: changeId } });
    if (!row) throw ApplicationFailure.create({ type: 'ChangeInvalid', message: `no change ${changeId}`, nonRetryable: true });
    return row;
  }

  async function setPhase(changeId: string, phase: string, extra: Record<string, string | null> = {}): Promise<void> {
    await db.repoChange.update({ where: { id: changeId }, data: { phase, ...extra } });
  }

  /** Tell the chat that asked (keyed: sent once). Changes started from the API have no chat. */
  async function tellOrigin(changeId: string, key: string, text: string): Promise<void> {
    const row = await loadChange(changeId);
    if (!row.platform || !row.account || !row.chatId || !row.sessionId) return;
    const conversation = { platform: row.platform, account: row.account, chatId: row.chatId } as ConversationKey;
    await deliverOnce(db, senders, { key: `change:${changeId}:${key}`, sessionId: row.sessionId, conversation, kind: 'notice', text });
    deps.onTranscript?.(row.sessionId, 'system');
  }

  async function modelSubmission<T>(opts: {
    model: string;
    system: string;
    user: string;
    tools: ToolSet;
    toolName: string;
    parse: (v: unknown) => { success: true; data: T } | { success: false; error: { message: string } };
  }): Promise<T> {
    const ctx = Context.current();
    const beat = setInterval(() => ctx.heartbeat(), 1000);
    try {
      const messages: ModelMessage[] = [
        { role: 'system', content: opts.system },
        { role: 'user', content: opts.user },
      ];
      let out;
      try {
        out = await runModelStep(deps.models, { model: opts.model, think: 'off', messages, tools: opts.tools }, { signal: ctx.cancellationSignal });
      } catch (err) {
        if (ctx.cancellationSignal.aborted) throw ctx.cancellationSignal.reason ?? err;
        throw modelFailure(err);
      }
      const raw = submission(out, opts.toolName);
      const parsed = opts.parse(raw);
      // A malformed submission is retried (a model may do better on the next attempt).
      if (!parsed.success) throw ApplicationFailure.create({ type: 'ModelOutputInvalid', message: `the model's ${opts.toolName} did not validate: ${parsed.error.message.slice(0, 500)}` });
      return parsed.data;
    } finally {
      clearInterval(beat);
    }
  }

  function modelFor(repo: RepoRecord): string {
    return repo.agent && 'kind' in repo.agent && repo.agent.model ? repo.agent.model : settings.defaultModel;
  }

  function taskState(changeId: string, draft: TaskDraft, phase: TaskState['current_phase'], state: TaskState['current_state'], evidence: Evidence[], createdAt: Date): TaskState {
    return {
      schema_version: HARNESS_SCHEMA_VERSION,
      task_id: changeId.toLowerCase().replace(/[^a-z0-9-]/g, '-'),
      current_phase: phase,
      current_state: state,
      task_draft: draft,
      confirmed_contract:
        state === 'needs_clarification' || state === 'draft'
          ? null
          : { intent: draft.intent, goal: draft.goal, scope: draft.scope, acceptance: draft.acceptance, constraints: draft.constraints, mode: draft.mode, id: changeId },
      evidence,
      open_questions: draft.open_questions,
      override_history: [],
      created_at: createdAt.toISOString(),
      updated_at: now(),
    };
  }

  async function withTempDir<T>(prefix: string, fn: (dir: string) => Promise<T>): Promise<T> {
    const dir = await makeTempDir(prefix);
    try {
      return await fn(dir);
    } finally {
      await removeDir(dir);
    }
  }

  /** Read the repository's own policy layer from a checkout (absent: empty; invalid: refused). */
  async function repoPolicyFile(tree: string): Promise<{ ok: true; policy: RepoPolicyInput; present: boolean } | { ok: false; error: string }> {
    const file = path.join(tree, REPO_POLICY_FILE);
    if (!existsSync(file)) return { ok: true, policy: {}, present: false };
    let raw: unknown;
    try {
      raw = JSON.parse(await readFile(file, 'utf8'));
    } catch (err) {
      return { ok: false, error: `${REPO_POLICY_FILE} is not valid JSON: ${(err as Error).message}` };
    }
    const parsed = RepoPolicySchema.safeParse(raw);
    if (!parsed.success) return { ok: false, error: `${REPO_POLICY_FILE} is invalid: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ')}` };
    return { ok: true, policy: parsed.data, present: true };
  }

  /** Secret values Steward itself holds: a diff carrying one of them is refused. */
  function heldSecrets(repo: RepoRecord): string[] {
    const out: string[] = [];
    if (repo.github) {
      const v = secret(repo.github.tokenRef.slice('env:'.length));
      if (v && v.length >= 8) out.push(v);
    }
    return out;
  }

  /**
   * The validation gate proper: apply the patch to a clean clone of `baseSha` in a directory
   * of its own, enforce the merged policy, run the checks in the sandbox. Pure verdict: no
   * records written here.
   */
  async function validateOn(repo: RepoRecord, baseSha: string, patchHash: string, taskScope: readonly string[], signal: AbortSignal, beat: () => void): Promise<GateVerdict> {
    const patch = await getBlobText(db, patchHash);
    return withTempDir('steward-gate-', async (dir) => {
      const tree = path.join(dir, 'tree');
      await cloneAt(repo.cloneUrl, baseSha, tree);
      beat();
      const reasons: string[] = [];
      const file = await repoPolicyFile(tree);
      if (!file.ok) reasons.push(file.error);
      const policy: EffectivePolicy = changePolicy({ global: settings.globalPolicy, registration: repo.policy, repo: file.ok ? file.policy : {} });
      // the task's agreed scope binds the patch too (entries that are not paths or globs are advisory)
      const scope = taskScope.filter((g) => {
        try {
          validateGlob(g);
          return g !== '(to be clarified)';
        } catch {
          return false;
        }
      });
      if (scope.length > 0) policy.allowedScopes = [...policy.allowedScopes, scope];
      const files = parseUnifiedDiff(patch);
      const check = checkPatchPolicy(files, policy, { secretValues: heldSecrets(repo) });
      for (const v of check.violations) reasons.push(`${v.rule}${v.path ? ` ${v.path}` : ''}: ${v.detail}`);
      const checks: CheckEvidence[] = [];
      if (reasons.length === 0) {
        const applied = await applyPatch(tree, patch);
        if (!applied.ok) reasons.push(`the patch does not apply to ${baseSha.slice(0, 12)}: ${applied.error}`);
        else {
          for (const c of repo.checks) {
            beat();
            const limitMs = Math.min((c.timeoutSeconds ?? policy.commandTimeoutSeconds) * 1000, policy.commandTimeoutSeconds * 1000 * 10);
            const program = path.basename(c.argv[0]!);
            let evidence: CheckEvidence;
            try {
              const r = await runSandboxed({
                argv: c.argv,
                workTree: tree,
                // checks are the operator's own commands: allowed by name, contained by the sandbox
                allowlist: [program],
                timeoutMs: limitMs,
                maxOutputBytes: policy.maxOutputBytes,
                roBinds: settings.sandboxRoBinds,
                signal,
              });
              evidence = {
                name: c.name,
                argv: c.argv,
                exitCode: r.exitCode,
                passed: r.exitCode === 0 && !r.timedOut,
                timedOut: r.timedOut,
                durationMs: r.durationMs,
                outputTail: tail(`${r.stdoutTail}${r.stderrTail ? `\n[stderr]\n${r.stderrTail}` : ''}`, 2000),
              };
            } catch (err) {
              if (err instanceof SandboxRefusedError && err.reason === 'unavailable') throw ApplicationFailure.create({ type: 'SandboxUnavailable', message: err.message, nonRetryable: true });
              if (signal.aborted) throw err;
              evidence = { name: c.name, argv: c.argv, exitCode: null, passed: false, timedOut: false, durationMs: 0, outputTail: (err as Error).message };
            }
            checks.push(evidence);
            if (!evidence.passed) reasons.push(`check ${c.name} failed${evidence.timedOut ? ' (timed out)' : ` (exit ${evidence.exitCode})`}`);
          }
        }
      }
      const promotion = repo.github ? policy.promotion : 'patch';
      return {
        verdict: reasons.length === 0 ? 'pass' : 'fail',
        reasons,
        baseSha,
        patchHash,
        stats: check.stats,
        violations: check.violations.map((v) => ({ rule: v.rule, ...(v.path ? { path: v.path } : {}), detail: v.detail })),
        checks,
        promotion,
        forbidSelfApproval: policy.forbidSelfApproval,
        approvalTimeoutMs: policy.approvalTimeoutMinutes * 60_000,
        at: now(),
      };
    });
  }

  async function evidenceOf(verdict: GateVerdict): Promise<Evidence[]> {
    return [
      { type: 'diff_summary', content: `${verdict.stats.files} files, +${verdict.stats.additions} -${verdict.stats.deletions}`, timestamp: verdict.at },
      ...verdict.checks.map((c): Evidence => ({
        type: 'test_result',
        content: `${c.name}: ${c.argv.join(' ')}\n${c.outputTail}`,
        exit_code: c.exitCode ?? -1,
        passed: c.passed,
        timestamp: verdict.at,
      })),
    ];
  }

  return {
    /** Intake: the request (and the answers so far) become a task draft, or one question. */
    async changeIntake(input: { changeId: string; answers: string[] }): Promise<{ status: IntakeResult['status']; question?: string; plannable: boolean; gap?: string }> {
      const row = await loadChange(input.changeId);
      const repo = await loadRepo(db, row.repo);
      await setPhase(input.changeId, 'intake');
      const user = [
        `Repository: ${repo.name} (base branch ${row.baseBranch}).`,
        repo.checks.length ? `Configured checks: ${repo.checks.map((c) => `${c.name} (${c.argv.join(' ')})`).join('; ')}.` : 'No checks are configured.',
        '',
        'Change request:',
        `<change_request>${row.request}</change_request>`,
        ...(input.answers.length ? ['', 'Answers to your earlier questions:', ...input.answers.map((a) => `<answer>${a}</answer>`)] : []),
      ].join('\n');
      const out = await modelSubmission({
        model: modelFor(repo),
        system: INTAKE_SYSTEM,
        user,
        tools: INTAKE_TOOLS,
        toolName: 'submit_task_draft',
        parse: (v) => IntakeModelOutputSchema.safeParse(v),
      });
      const result = buildIntakeResult(row.request, out, input.answers);
      const draft = result.task_draft;
      const state = taskState(input.changeId, draft, result.status === 'planned' ? 'plan' : 'clarify', result.status === 'planned' ? 'planned' : 'needs_clarification', [], row.createdAt);
      await db.repoChange.update({ where: { id: input.changeId }, data: { draft: JSON.stringify(draft), taskState: JSON.stringify(state) } });
      await writeReceipt(db, {
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
    },

    /** Ask the clarifying question in the chat that asked. */
    async changeAsk(input: { changeId: string; question: string; round: number }): Promise<void> {
      await setPhase(input.changeId, 'clarify', { question: input.question });
      await tellOrigin(
        input.changeId,
        `q${input.round}`,
        `Change ${input.changeId} needs one answer before it is planned:\n${input.question}\nAnswer with /answer <text>.`,
      );
      await writeReceipt(db, { key: `change:${input.changeId}:question:${input.round}`, kind: 'change.question', ...wfRef(), data: { changeId: input.changeId, question: input.question } });
    },

    /** A notice about the change in its chat (keyed). */
    async changeNote(input: { changeId: string; key: string; text: string }): Promise<void> {
      await tellOrigin(input.changeId, input.key, `Change ${input.changeId}: ${input.text}`);
    },

    /** The planner: a model step that turns the draft into a plan, stored as an artifact. */
    async changePlan(input: { changeId: string }): Promise<{ planHash: string; details: string }> {
      const row = await loadChange(input.changeId);
      const repo = await loadRepo(db, row.repo);
      await setPhase(input.changeId, 'plan', { question: null });
      const draft = TaskDraftSchema.parse(JSON.parse(row.draft ?? 'null'));
      const plan = await modelSubmission({
        model: modelFor(repo),
        system: PLAN_SYSTEM,
        user: [
          `Repository: ${repo.name}.`,
          repo.checks.length ? `Checks the validation gate runs: ${repo.checks.map((c) => `${c.name} (${c.argv.join(' ')})`).join('; ')}.` : '',
          'Task draft:',
          JSON.stringify(draft, null, 2),
        ].join('\n'),
        tools: PLAN_TOOLS,
        toolName: 'submit_plan',
        parse: (v) => PlanSchema.safeParse(v),
      });
      const planHash = await putBlob(db, JSON.stringify(plan, null, 2), 'application/json');
      const details = planDetails(input.changeId, repo.name, draft.goal, plan);
      await db.repoChange.update({ where: { id: input.changeId }, data: { plan: JSON.stringify(plan), planHash } });
      await writeReceipt(db, { key: `change:${input.changeId}:plan`, kind: 'change.plan', ...wfRef(), data: { changeId: input.changeId, planHash, steps: plan.steps.length } });
      await tellOrigin(input.changeId, 'plan', `${details}\n\nThe coding agent starts now (/stop stops it, /steer guides it).`);
      return { planHash, details };
    },

    /**
     * The isolated worker: a fresh clone at the base commit in a directory of this run only,
     * the coding agent in the sandbox, and the patch it leaves. The directory is removed when
     * the activity ends, whatever the outcome.
     */
    async changeWork(input: { changeId: string }): Promise<{ baseSha: string; patchHash?: string; files: number; blocked: number; summary: string; transcriptHash: string }> {
      const ctx = Context.current();
      const info = activityInfo();
      const row = await loadChange(input.changeId);
      const repo = await loadRepo(db, row.repo);
      let resolved = row.baseSha;
      if (!resolved) {
        try {
          resolved = await resolveBranch(repo.cloneUrl, row.baseBranch);
        } catch (err) {
          throw refused(`cannot resolve the base branch ${row.baseBranch} of ${repo.name}: ${(err as Error).message}`);
        }
      }
      const baseSha: string = resolved;
      await setPhase(input.changeId, 'work', { baseSha });
      const draft = TaskDraftSchema.parse(JSON.parse(row.draft ?? 'null'));
      const plan = PlanSchema.parse(JSON.parse(row.plan ?? 'null'));
      const task: AgentTask = {
        changeId: input.changeId,
        goal: draft.goal,
        scope: draft.scope,
        acceptance: draft.acceptance,
        constraints: draft.constraints,
        plan: { steps: plan.steps, files: plan.files, checks: plan.checks },
      };
      let lastSteer = 0;
      const takeSteers = async (): Promise<string[]> => {
        const rows = await db.changeSteer.findMany({ where: { changeId: input.changeId, id: { gt: lastSteer } }, orderBy: { id: 'asc' } });
        if (rows.length) lastSteer = rows.at(-1)!.id;
        return rows.map((r) => `${r.text} (from ${r.by})`);
      };
      return withTempDir(`steward-work-`, async (dir) => {
        const tree = path.join(dir, 'tree');
        await cloneAt(repo.cloneUrl, baseSha, tree);
        ctx.heartbeat({ phase: 'cloned' });
        // the repository's own policy file can only tighten the operator's (an invalid one is the gate's to refuse)
        const file = await repoPolicyFile(tree);
        const policy = changePolicy({ global: settings.globalPolicy, registration: repo.policy, repo: file.ok ? file.policy : {} });
        const limits = {
          maxSteps: ('kind' in repo.agent ? repo.agent.maxSteps : undefined) ?? settings.agentMaxSteps,
          commands: policy.commands,
          commandTimeoutMs: policy.commandTimeoutSeconds * 1000,
          maxOutputBytes: policy.maxOutputBytes,
          roBinds: settings.sandboxRoBinds,
        };
        let run: AgentRunResult;
        try {
          if ('command' in repo.agent) {
            run = await runExternalAgent({
              argv: repo.agent.command,
              workTree: tree,
              task,
              limits,
              signal: ctx.cancellationSignal,
              heartbeat: (d) => ctx.heartbeat(d),
              timeoutMs: (repo.agent.timeoutSeconds ?? 3600) * 1000,
            });
          } else {
            run = await runBuiltinAgent({
              models: deps.models,
              model: modelFor(repo),
              workTree: tree,
              task,
              limits,
              signal: ctx.cancellationSignal,
              heartbeat: (d) => ctx.heartbeat(d),
              takeSteers,
            });
          }
        } catch (err) {
          if (ctx.cancellationSignal.aborted) throw ctx.cancellationSignal.reason ?? err;
          if (err instanceof SandboxRefusedError && err.reason === 'unavailable') throw ApplicationFailure.create({ type: 'SandboxUnavailable', message: err.message, nonRetryable: true });
          if (err instanceof ModelNotConfiguredError) throw modelFailure(err);
          throw err;
        }
        if (ctx.cancellationSignal.aborted) throw ctx.cancellationSignal.reason ?? new Error('cancelled');
        const diff = await diffWorkTree(tree, baseSha);
        if (Buffer.byteLength(diff.patch) > MAX_PATCH_BYTES) {
          throw refused(`the coding agent left a patch of ${Buffer.byteLength(diff.patch)} bytes; at most ${MAX_PATCH_BYTES} are handed to the gate`);
        }
        const transcriptHash = await putBlob(db, JSON.stringify(run.transcript, null, 2), 'application/json');
        const patchHash = diff.patch.trim() ? await putBlob(db, diff.patch, 'text/x-diff; charset=utf-8') : undefined;
        for (const [i, b] of run.blocked.entries()) {
          await writeReceipt(db, {
            key: `change:${input.changeId}:blocked:${info.attempt}:${i}`,
            kind: 'sandbox.blocked',
            ...wfRef(),
            data: { changeId: input.changeId, tool: b.tool, reason: b.reason, detail: b.detail.slice(0, 500) },
          });
        }
        await db.repoChange.update({ where: { id: input.changeId }, data: { patchHash: patchHash ?? null, transcriptHash } });
        await writeReceipt(db, {
          key: `change:${input.changeId}:work:${info.attempt}`,
          kind: 'change.work',
          ...wfRef(),
          data: { changeId: input.changeId, baseSha, patchHash, files: diff.files.length, steps: run.steps, finished: run.finished, blocked: run.blocked.length, usage: run.usage },
        });
        return { baseSha, ...(patchHash ? { patchHash } : {}), files: diff.files.length, blocked: run.blocked.length, summary: run.summary.slice(0, 1000), transcriptHash };
      });
    },

    /** The validation gate: its verdict (with evidence) is a receipt and a search attribute. */
    async changeValidate(input: { changeId: string; baseSha: string; patchHash: string }): Promise<GateVerdict> {
      const ctx = Context.current();
      const row = await loadChange(input.changeId);
      const repo = await loadRepo(db, row.repo);
      await setPhase(input.changeId, 'validate');
      const draftScope = row.draft ? TaskDraftSchema.parse(JSON.parse(row.draft)).scope : [];
      const verdict = await validateOn(repo, input.baseSha, input.patchHash, draftScope, ctx.cancellationSignal, () => ctx.heartbeat());
      const draft = TaskDraftSchema.parse(JSON.parse(row.draft ?? 'null'));
      const state = taskState(input.changeId, draft, 'verify', verdict.verdict === 'pass' ? 'verifying' : 'blocked', await evidenceOf(verdict), row.createdAt);
      if (verdict.verdict !== 'pass') {
        state.override_history = verdict.reasons.map((r) => ({
          event_type: 'gate_violation' as const,
          task_id: state.task_id,
          phase: 'verify' as const,
          signal: 'block_promotion',
          description: r,
          user_input: null,
          timestamp: verdict.at,
        }));
      }
      await db.repoChange.update({ where: { id: input.changeId }, data: { verdict: JSON.stringify(verdict), taskState: JSON.stringify(state) } });
      const recorded = await writeReceipt(db, {
        key: `change:${input.changeId}:gate:${input.patchHash}:${input.baseSha}`,
        kind: 'gate.verdict',
        ...wfRef(),
        data: { changeId: input.changeId, repo: repo.name, verdict: verdict.verdict, reasons: verdict.reasons, stats: verdict.stats, checks: verdict.checks.map((c) => ({ name: c.name, exitCode: c.exitCode, passed: c.passed })) },
      });
      if (recorded) recordGateVerdict(verdict.verdict, 'validation');
      return verdict;
    },

    /** Ask the admins to approve the promotion (the approval flow of chat: buttons, /approve-action, API). */
    async changeRequestApproval(input: { changeId: string; approvalId: string; timeoutMs: number }): Promise<{ approvalId: string; timeoutMs: number }> {
      const row = await loadChange(input.changeId);
      await setPhase(input.changeId, 'approval');
      const info = activityInfo();
      let approval = await db.approval.findUnique({ where: { id: input.approvalId } });
      const summary = `promote change ${input.changeId} on ${row.repo} as a draft PR`;
      if (!approval) {
        approval = await db.approval.create({
          data: {
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
            status: 'pending',
            deadline: new Date(Date.now() + input.timeoutMs),
          },
        });
      }
      const link = deps.runLink?.(row.workflowId);
      const verdict = row.verdict ? (JSON.parse(row.verdict) as GateVerdict) : undefined;
      const text = [
        `**Approval needed** (${approval.id}): ${row.requestedByName} asks to ${summary}.`,
        `Request: ${row.request.slice(0, 500)}`,
        verdict ? `Gate: ${verdict.verdict} (${verdict.stats.files} files, +${verdict.stats.additions} -${verdict.stats.deletions}; checks ${verdict.checks.map((c) => `${c.name} ${c.passed ? 'passed' : 'failed'}`).join(', ') || 'none'}).` : '',
        `Patch: GET /api/v1/changes/${input.changeId}/patch`,
        `Deadline: ${approval.deadline.toISOString()} (denied if nobody decides). The requester may not approve their own change.`,
        `Approve with /approve-action ${approval.id}, deny with /deny-action ${approval.id} [reason].${link ? ` Run: ${link}` : ''}`,
      ]
        .filter(Boolean)
        .join('\n');
      const targets = await askAdminsToApprove(db, senders, approval.id, text);
      await tellOrigin(input.changeId, 'approval', `Change ${input.changeId} passed the validation gate and waits for an admin to approve the draft PR (approval ${approval.id}).`);
      await writeReceipt(db, {
        key: `approval:${approval.id}:requested`,
        kind: 'approval.requested',
        ...wfRef(),
        actor: row.requestedBy,
        data: { approvalId: approval.id, tool: 'promote_change', summary, deadline: approval.deadline.toISOString(), notified: targets.length },
      });
      return { approvalId: approval.id, timeoutMs: Math.max(0, approval.deadline.getTime() - Date.now()) };
    },

    /**
     * The promotion gate: the only holder of write credentials. One change per repository at a
     * time (a lease); the base must not have moved since validation, or the patch is validated
     * again on the new base; then the patch artifact, or a draft PR through octokit.
     */
    async changePromote(input: {
      changeId: string;
      baseSha: string;
      patchHash: string;
      promotion: GateVerdict['promotion'];
    }): Promise<{ kind: 'promoted'; result: ChangeResult } | { kind: 'refused'; reason: string }> {
      const ctx = Context.current();
      const info = activityInfo();
      const row = await loadChange(input.changeId);
      const repo = await loadRepo(db, row.repo);
      await setPhase(input.changeId, 'promote');
      await acquireLease(repo.name, input.changeId, ctx);
      // a long revalidation keeps the lease alive (a crashed holder's lease expires instead)
      const beat = () => {
        ctx.heartbeat({ holding: 'promotion lease' });
        void db.repoLock.updateMany({ where: { repo: repo.name, holder: input.changeId }, data: { expiresAt: new Date(Date.now() + LEASE_MS) } }).catch(() => undefined);
      };
      try {
        let baseSha = input.baseSha;
        let revalidated = false;
        const current = await resolveBranch(repo.cloneUrl, row.baseBranch);
        if (current !== baseSha) {
          // The base moved since validation: the patch must still apply and pass on the new base.
          const again = await validateOn(repo, current, input.patchHash, row.draft ? TaskDraftSchema.parse(JSON.parse(row.draft)).scope : [], ctx.cancellationSignal, beat);
          const recorded = await writeReceipt(db, {
            key: `change:${input.changeId}:revalidate:${current}`,
            kind: 'gate.verdict',
            ...wfRef(),
            data: { changeId: input.changeId, repo: repo.name, verdict: again.verdict, reasons: again.reasons, revalidation: true, from: baseSha, to: current },
          });
          if (recorded) recordGateVerdict(again.verdict, 'revalidation');
          await db.repoChange.update({ where: { id: input.changeId }, data: { verdict: JSON.stringify(again) } });
          if (again.verdict !== 'pass') {
            const reason = `the base branch ${row.baseBranch} moved from ${baseSha.slice(0, 12)} to ${current.slice(0, 12)} and the change no longer passes the gate there: ${again.reasons.join('; ')}`;
            await writeReceipt(db, { key: `change:${input.changeId}:promotion`, kind: 'promotion', ...wfRef(), data: { changeId: input.changeId, refused: reason } });
            return { kind: 'refused', reason };
          }
          baseSha = current;
          revalidated = true;
          await db.repoChange.update({ where: { id: input.changeId }, data: { baseSha } });
        }
        const result: ChangeResult = {
          kind: 'patch',
          patchHash: input.patchHash,
          patchPath: `/api/v1/changes/${input.changeId}/patch`,
          baseSha,
          ...(revalidated ? { revalidated } : {}),
        };
        if (input.promotion !== 'patch' && repo.github) {
          const gh = repo.github;
          const tokenName = gh.tokenRef.slice('env:'.length);
          const token = secret(tokenName);
          if (!token) throw refused(`the GitHub token ${gh.tokenRef} is not set in the promotion gate's environment`);
          const files = await withTempDir('steward-promote-', async (dir) => {
            const tree = path.join(dir, 'tree');
            await cloneAt(repo.cloneUrl, baseSha, tree);
            const patch = await getBlobText(db, input.patchHash);
            const applied = await applyPatch(tree, patch);
            if (!applied.ok) throw refused(`the patch no longer applies: ${applied.error}`);
            const out: Array<{ path: string; mode: '100644' | '100755' | '120000'; content?: string; deleted?: boolean }> = [];
            for (const f of await changedFiles(tree, baseSha)) {
              if (f.status === 'D') {
                out.push({ path: f.path, mode: '100644', deleted: true });
                continue;
              }
              const mode = (await fileMode(tree, f.path)) as '100644' | '100755' | '120000';
              out.push({ path: f.path, mode, content: (await readFileAtWorkTree(tree, f.path)).toString('base64') });
            }
            return out;
          });
          const body = await prBody(input.changeId, row.workflowId, baseSha, revalidated);
          const draftRec = row.draft ? (JSON.parse(row.draft) as TaskDraft) : undefined;
          try {
            const pr = await openDraftPullRequest({
              baseUrl: gh.apiUrl ?? settings.githubApiUrl,
              token,
              owner: gh.owner,
              repo: gh.repo,
              baseBranch: row.baseBranch,
              expectedBaseSha: baseSha,
              branch: `steward/change-${input.changeId}`,
              title: `Steward: ${(draftRec?.goal ?? row.request).slice(0, 120)}`,
              body,
              files,
              commitMessage: `${(draftRec?.goal ?? row.request).slice(0, 72)}\n\nSteward change ${input.changeId} (requested by ${row.requestedByName}).`,
              signal: ctx.cancellationSignal,
            });
            result.kind = 'draft-pr';
            result.pr = { number: pr.number, url: pr.url, branch: pr.branch, commitSha: pr.commitSha };
          } catch (err) {
            if (err instanceof BaseMovedError) {
              // moved between our check and the PR: the retry revalidates on the new base
              throw ApplicationFailure.create({ type: 'BaseMoved', message: err.message });
            }
            if (err instanceof GitHubError) throw ApplicationFailure.create({ type: 'GitHubError', message: err.message, nonRetryable: !err.retryable });
            throw err;
          }
        }
        await db.repoChange.update({ where: { id: input.changeId }, data: { result: JSON.stringify(result), baseSha } });
        await writeReceipt(db, {
          key: `change:${input.changeId}:promotion`,
          kind: 'promotion',
          ...wfRef(),
          data: { changeId: input.changeId, repo: repo.name, kind: result.kind, patchHash: result.patchHash, baseSha, revalidated, attempt: info.attempt, ...(result.pr ? { pr: result.pr.url } : {}) },
        });
        return { kind: 'promoted', result };
      } finally {
        await db.repoLock.deleteMany({ where: { repo: repo.name, holder: input.changeId } });
      }
    },

    /** Close the change: status, the report (report schema), the task state, the chat told. */
    async changeFinish(input: { changeId: string; status: 'done' | 'failed' | 'refused' | 'cancelled'; phase: string; reason?: string }): Promise<void> {
      const row = await loadChange(input.changeId);
      const verdict = row.verdict ? (JSON.parse(row.verdict) as GateVerdict) : undefined;
      const result = row.result ? (JSON.parse(row.result) as ChangeResult) : undefined;
      const draft = row.draft ? TaskDraftSchema.safeParse(JSON.parse(row.draft)) : undefined;
      const evidence = verdict ? await evidenceOf(verdict) : [];
      const actualScope = row.patchHash ? parseUnifiedDiff(await getBlobText(db, row.patchHash)).map((f) => f.path) : [];
      const scope = draft?.success ? draft.data.scope : [];
      const report: Report = {
        schema_version: HARNESS_SCHEMA_VERSION,
        task_id: input.changeId.toLowerCase(),
        intent: draft?.success ? draft.data.intent : 'unknown',
        conclusion:
          input.status === 'done'
            ? result?.pr
              ? `Draft PR #${result.pr.number} opened: ${result.pr.url}`
              : `Patch artifact ${result?.patchHash.slice(0, 12) ?? ''} ready (${result?.patchPath ?? ''})`
            : `The change ${input.status} in its ${input.phase} phase${input.reason ? `: ${input.reason}` : ''}`,
        actual_scope: actualScope,
        scope_deviation: null,
        evidence_summary: evidence.map((e) => ({
          type: e.type === 'audit_log' ? ('reasoning_note' as const) : e.type,
          result: e.content.split('\n')[0] ?? '',
          ...(e.passed !== undefined ? { passed: e.passed } : {}),
        })),
        remaining_risks: input.status === 'done' ? ['A human review of the change is still needed before merging.'] : [],
        next_steps: input.status === 'done' ? (result?.pr ? ['Review the draft PR and mark it ready when satisfied.'] : ['Apply the patch with git apply and review it.']) : ['Refine the request and start a new change.'],
        completed_at: now(),
      };
      const outside = actualScope.filter((f) => scope.length > 0 && !scope.some((g) => matchesGlob(f, g)));
      if (outside.length) report.scope_deviation = `changed outside the drafted scope (${scope.join(', ')}): ${outside.join(', ')}`;
      let state: TaskState | undefined;
      if (draft?.success) {
        state = taskState(input.changeId, draft.data, 'close', input.status === 'done' ? 'done' : input.status === 'cancelled' ? 'suspended' : 'failed', evidence, row.createdAt);
      }
      await db.repoChange.update({
        where: { id: input.changeId },
        data: {
          status: input.status,
          phase: input.status === 'done' ? 'done' : input.phase,
          question: null,
          report: JSON.stringify(report),
          ...(state ? { taskState: JSON.stringify(state) } : {}),
          ...(input.reason ? { error: input.reason.slice(0, 4000) } : {}),
        },
      });
      await writeReceipt(db, {
        key: `change:${input.changeId}:end`,
        kind: 'change.end',
        ...wfRef(),
        data: { changeId: input.changeId, status: input.status, phase: input.phase, reason: input.reason, patchHash: result?.patchHash, pr: result?.pr?.url },
      });
      const link = deps.runLink?.(row.workflowId);
      const text =
        input.status === 'done'
          ? result?.pr
            ? `Change ${input.changeId} is done: draft PR #${result.pr.number} ${result.pr.url}${result.revalidated ? ' (revalidated on the moved base)' : ''}.`
            : `Change ${input.changeId} is done: the patch is at ${result?.patchPath ?? `/api/v1/changes/${input.changeId}/patch`} (git apply-able, sha256 ${result?.patchHash.slice(0, 12)}).`
          : `Change ${input.changeId} ${input.status} in its ${input.phase} phase${input.reason ? `: ${input.reason}` : ''}.`;
      await tellOrigin(input.changeId, 'end', `${text}${link ? `\nRun: ${link}` : ''}`);
    },
  };

  /** Wait for the repository's single-writer lease (expired leases of crashed holders are taken over). */
  async function acquireLease(repoName: string, holder: string, ctx: Context): Promise<void> {
    const leaseMs = LEASE_MS;
    for (;;) {
      if (ctx.cancellationSignal.aborted) throw ctx.cancellationSignal.reason ?? new Error('cancelled');
      const expiresAt = new Date(Date.now() + leaseMs);
      try {
        await db.repoLock.create({ data: { repo: repoName, holder, expiresAt } });
        return;
      } catch {
        const taken = await db.repoLock.updateMany({
          where: { repo: repoName, OR: [{ holder }, { expiresAt: { lt: new Date() } }] },
          data: { holder, expiresAt },
        });
        if (taken.count > 0) return;
      }
      ctx.heartbeat({ waiting: 'promotion lease' });
      await ctx.sleep(250);
    }
  }

  async function prBody(changeId: string, workflowId: string, baseSha: string, revalidated: boolean): Promise<string> {
    const row = await loadChange(changeId);
    const plan = row.plan ? (JSON.parse(row.plan) as Plan) : undefined;
    const verdict = row.verdict ? (JSON.parse(row.verdict) as GateVerdict) : undefined;
    const draft = row.draft ? (JSON.parse(row.draft) as TaskDraft) : undefined;
    const link = deps.runLink?.(workflowId);
    const report: Report = {
      schema_version: HARNESS_SCHEMA_VERSION,
      task_id: changeId.toLowerCase(),
      intent: draft?.intent ?? 'unknown',
      conclusion: `Draft change for review: ${draft?.goal ?? row.request.slice(0, 200)}`,
      actual_scope: verdict ? parseUnifiedDiff(await getBlobText(db, row.patchHash ?? '')).map((f) => f.path) : [],
      scope_deviation: null,
      evidence_summary: verdict ? (await evidenceOf(verdict)).map((e) => ({ type: e.type === 'audit_log' ? ('reasoning_note' as const) : e.type, result: e.content.split('\n')[0] ?? '', ...(e.passed !== undefined ? { passed: e.passed } : {}) })) : [],
      remaining_risks: ['Generated by a coding agent: review before merging.'],
      next_steps: ['Review the diff and the evidence; mark the PR ready when satisfied.'],
      completed_at: now(),
    };
    return [
      `Steward change \`${changeId}\`, requested by ${row.requestedByName}.`,
      '',
      `> ${row.request.slice(0, 1000).replace(/\n/g, '\n> ')}`,
      '',
      '## Plan',
      plan ? [plan.summary, ...plan.steps.map((s, i) => `${i + 1}. ${s}`)].join('\n') : '(none)',
      '',
      '## Validation evidence',
      `Base \`${baseSha}\`${revalidated ? ' (the base moved; validated again on it)' : ''}.`,
      verdict ? `Diff: ${verdict.stats.files} files, +${verdict.stats.additions} -${verdict.stats.deletions}.` : '',
      ...(verdict?.checks ?? []).map((c) => `- ${c.passed ? 'PASS' : 'FAIL'} \`${c.argv.join(' ')}\` (exit ${c.exitCode}, ${c.durationMs} ms)\n\n\`\`\`\n${c.outputTail.slice(-800)}\n\`\`\``),
      '',
      '## Report',
      '```json',
      JSON.stringify(report, null, 2),
      '```',
      '',
      link ? `Run in the Temporal UI: ${link}` : `Workflow id: \`${workflowId}\``,
    ]
      .filter((l) => l !== '')
      .join('\n');
  }
}
