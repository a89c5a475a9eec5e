/**
 * Governed repository changes: the records that cross boundaries (API, CLI, chat, model
 * output, the repo-change workflow's history) as zod schemas and types. Pure: no I/O, safe
 * for the workflow bundle.
 *
 * The task draft, intake result, task state and report follow the agent-harness protocol
 * (`specs/agent-harness-protocol/*.schema.json`, schema version 0.3); tests validate the
 * records Steward writes against those JSON schemas.
 */
import { z } from 'zod';
import { ModelRefSchema } from './schemas.js';
import { RepoPolicySchema, type RepoPolicyInput } from './changes/policy.js';
import { argvRefusal } from './argv.js';
import { referenceRefusal } from './secret-refs.js';

export const HARNESS_SCHEMA_VERSION = '0.3' as const;

export const RepoNameSchema = z
  .string()
  .trim()
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, 'a repository name uses letters, digits and . _ - (at most 64 characters)');

/** A git branch name (a conservative subset of git's ref-name rules). */
export const BranchSchema = z
  .string()
  .trim()
  .min(1)
  .max(200)
  .regex(/^(?!-)(?!.*\.\.)(?!.*\/\/)(?!.*@\{)[A-Za-z0-9._/-]+(?<!\.lock)(?<![/.])$/, 'not a valid branch name');

/**
 * Where the repository is cloned from: a local path, a file:// URL, or an http(s)/ssh URL
 * without credentials in it (credentials belong to the promotion gate, by reference).
 */
export const CloneUrlSchema = z
  .string()
  .trim()
  .min(1)
  .max(2000)
  .refine((u) => u.startsWith('/') || /^(file|https?|ssh):\/\//.test(u), 'expected an absolute path or a file://, http(s):// or ssh:// URL')
  .refine((u) => !/^[a-z]+:\/\/[^/]*@/i.test(u) || u.startsWith('ssh://'), 'the clone URL must not carry credentials')
  .refine((u) => !/[\s\u0000-\u001f]/.test(u), 'the clone URL has whitespace or control characters');

export const CheckSchema = z.object({
  name: z.string().trim().min(1).max(64),
  argv: z
    .array(z.string().min(1).max(1000))
    .min(1, 'a check runs a command: argv has at least the program')
    .max(64)
    // the sandbox's own rule: what it would refuse at every change is refused here, with its reason
    .superRefine((argv, ctx) => {
      const why = argvRefusal(argv);
      if (why) ctx.addIssue({ code: 'custom', message: why });
    }),
  timeoutSeconds: z.number().int().positive().max(3600).optional(),
});
export type Check = z.infer<typeof CheckSchema>;

export const AgentSpecSchema = z.union([
  z.strictObject({
    kind: z.literal('builtin'),
    model: ModelRefSchema.optional(),
    maxSteps: z.number().int().positive().max(200).optional(),
  }),
  z.strictObject({
    /** An external coding agent run in the sandbox (Codex, Claude Code non-interactive, a script). */
    command: z
      .array(z.string().min(1).max(1000))
      .min(1)
      .max(64)
      .superRefine((argv, ctx) => {
        const why = argvRefusal(argv);
        if (why) ctx.addIssue({ code: 'custom', message: why });
      }),
    timeoutSeconds: z.number().int().positive().max(6 * 3600).optional(),
  }),
]);
export type AgentSpec = z.infer<typeof AgentSpecSchema>;

export const GitHubTargetSchema = z.strictObject({
  owner: z.string().trim().regex(/^[A-Za-z0-9-]{1,39}$/, 'not a GitHub owner name'),
  repo: z.string().trim().regex(/^[A-Za-z0-9._-]{1,100}$/, 'not a GitHub repository name'),
  /** Where the token is: `env:NAME` (read by the promotion gate only). */
  tokenRef: z
    .string()
    .regex(/^env:[A-Z_][A-Z0-9_]*$/, 'expected env:NAME (the variable that holds the token)')
    // the one rule of references (common/secret-refs.ts): not STEWARD_API_TOKEN nor any other setting of Steward's, a name that reads as a credential
    .superRefine((ref, ctx) => {
      const why = referenceRefusal(ref, 'repo');
      if (why) ctx.addIssue({ code: 'custom', message: why });
    }),
  /** The GitHub API base URL (GitHub Enterprise, or a test double); default the global setting. */
  apiUrl: z.url().optional(),
});
export type GitHubTarget = z.infer<typeof GitHubTargetSchema>;

/** `POST /api/v1/repos` and `steward repos add`. */
export const RepoRegistrationSchema = z.strictObject({
  name: RepoNameSchema,
  cloneUrl: CloneUrlSchema,
  defaultBranch: BranchSchema.default('main'),
  checks: z.array(CheckSchema).max(20).default([]),
  policy: RepoPolicySchema.default({}),
  agent: AgentSpecSchema.default({ kind: 'builtin' }),
  github: GitHubTargetSchema.optional(),
});
export type RepoRegistration = z.infer<typeof RepoRegistrationSchema>;
export type RepoRegistrationInput = z.input<typeof RepoRegistrationSchema>;

export const MAX_CHANGE_REQUEST_CHARS = 8000;

/** `POST /api/v1/changes`, `steward changes start`, `/change <repo> <request>`. */
export const ChangeRequestSchema = z.strictObject({
  repo: RepoNameSchema,
  request: z.string().trim().min(1, 'the request is empty').max(MAX_CHANGE_REQUEST_CHARS),
  base: BranchSchema.optional(),
});
export type ChangeRequest = z.infer<typeof ChangeRequestSchema>;

export const ChangeAnswerSchema = z.strictObject({
  text: z.string().trim().min(1, 'the answer is empty').max(4000),
});

// ---- agent-harness-protocol records ----

export const INTENTS = ['bug', 'feature', 'explore', 'refactor', 'prototype', 'unknown'] as const;
export const MODES = ['delivery', 'explore', 'poc', 'unknown'] as const;
export const NEXT_ACTIONS = ['clarify', 'plan', 'observe', 'fail'] as const;

const text = z.string().min(1);

/** task-draft.schema.json */
export const TaskDraftSchema = z.strictObject({
  schema_version: z.literal(HARNESS_SCHEMA_VERSION),
  source_input: text,
  intent: z.enum(INTENTS),
  goal: text,
  scope: z.array(text).min(1),
  acceptance: z.array(text).min(1),
  constraints: z.array(text),
  mode: z.enum(MODES),
  assumptions: z.array(text),
  open_questions: z.array(text),
  risk_signals: z.array(text),
  context_refs: z.array(text),
  next_action: z.enum(NEXT_ACTIONS),
  derived: z
    .strictObject({
      risk_level: z.enum(['low', 'medium', 'high', 'unknown']).optional(),
      state: z.enum(['draft', 'needs_clarification', 'planned', 'failed']).optional(),
    })
    .optional(),
});
export type TaskDraft = z.infer<typeof TaskDraftSchema>;

/** intake-result.schema.json */
export const IntakeResultSchema = z.strictObject({
  schema_version: z.literal(HARNESS_SCHEMA_VERSION),
  command: z.literal('intake'),
  status: z.enum(['planned', 'needs_clarification', 'failed']),
  task_draft: TaskDraftSchema,
  interaction: z.strictObject({
    summary: text,
    assumptions: z.array(text),
    blocking_gap: z.string().nullable(),
    question: z.string().nullable(),
    next_action: z.enum(NEXT_ACTIONS),
  }),
  metadata: z.strictObject({ project: z.string().optional(), config_path: z.string().optional(), generated_at: z.string().optional() }).optional(),
});
export type IntakeResult = z.infer<typeof IntakeResultSchema>;

export const PHASES = ['intake', 'clarify', 'plan', 'execute', 'verify', 'report', 'close'] as const;
export const STATES = ['draft', 'needs_clarification', 'planned', 'in_progress', 'blocked', 'verifying', 'done', 'failed', 'suspended'] as const;
export const EVIDENCE_TYPES = ['command_result', 'test_result', 'diff_summary', 'artifact', 'reasoning_note', 'manual_confirmation', 'audit_log'] as const;

export const EvidenceSchema = z.strictObject({
  type: z.enum(EVIDENCE_TYPES),
  content: z.string(),
  exit_code: z.number().int().optional(),
  passed: z.boolean().optional(),
  timestamp: z.string(),
});
export type Evidence = z.infer<typeof EvidenceSchema>;

export const AuditEntrySchema = z.strictObject({
  event_type: z.enum(['force_override', 'gate_violation', 'remediation', 'state_recovery', 'manual_confirmation']),
  task_id: z.string(),
  phase: z.enum(PHASES),
  signal: z.string(),
  description: z.string(),
  user_input: z.string().nullable().optional(),
  risk_at_time: z.enum(['low', 'medium', 'high', 'unknown']).optional(),
  timestamp: z.string(),
});
export type AuditEntry = z.infer<typeof AuditEntrySchema>;

/** task-state.schema.json */
export const TaskStateSchema = z.strictObject({
  schema_version: z.literal(HARNESS_SCHEMA_VERSION),
  task_id: z.string().regex(/^[a-z0-9-]+$/).min(1),
  current_phase: z.enum(PHASES),
  current_state: z.enum(STATES),
  task_draft: TaskDraftSchema,
  confirmed_contract: z
    .strictObject({
      intent: z.string(),
      goal: z.string(),
      scope: z.array(z.string()),
      acceptance: z.array(z.string()),
      title: z.string().optional(),
      constraints: z.array(z.string()).optional(),
      verification: z.array(z.string()).optional(),
      context_refs: z.array(z.string()).optional(),
      id: z.string().optional(),
      mode: z.string().optional(),
      risk_level: z.enum(['low', 'medium', 'high']).optional(),
      evidence_required: z.array(z.string()).optional(),
    })
    .nullable()
    .optional(),
  evidence: z.array(EvidenceSchema),
  open_questions: z.array(z.string()),
  override_history: z.array(AuditEntrySchema),
  created_at: z.string(),
  updated_at: z.string(),
});
export type TaskState = z.infer<typeof TaskStateSchema>;

/** report.schema.json */
export const ReportSchema = z.strictObject({
  schema_version: z.literal(HARNESS_SCHEMA_VERSION),
  task_id: z.string(),
  intent: z.string(),
  conclusion: text,
  actual_scope: z.array(z.string()),
  scope_deviation: z.string().nullable().optional(),
  evidence_summary: z.array(
    z.strictObject({
      type: z.enum(['command_result', 'test_result', 'diff_summary', 'artifact', 'reasoning_note', 'manual_confirmation']),
      result: z.string(),
      passed: z.boolean().optional(),
    }),
  ),
  remaining_risks: z.array(z.string()),
  overrides_used: z.array(z.string()).optional(),
  next_steps: z.array(z.string()),
  completed_at: z.string(),
});
export type Report = z.infer<typeof ReportSchema>;

// ---- model output ----

/**
 * What the intake model step submits (tool `submit_task_draft`). Lenient: a field the model
 * cannot fill stays empty and becomes a clarifying question; Steward builds the protocol
 * record from it.
 */
export const IntakeModelOutputSchema = z.object({
  intent: z.enum(INTENTS).describe('bug, feature, explore, refactor, prototype, or unknown'),
  goal: z.string().max(2000).describe('One sentence: what the change achieves. Empty if the request does not say.'),
  scope: z.array(z.string().min(1).max(300)).max(50).describe('Repository paths or globs the change may touch. Empty if unknown.'),
  acceptance: z.array(z.string().min(1).max(500)).max(20).describe('Checkable acceptance criteria. Empty if unknown.'),
  constraints: z.array(z.string().min(1).max(500)).max(20).default([]),
  assumptions: z.array(z.string().min(1).max(500)).max(20).default([]),
  open_questions: z.array(z.string().min(1).max(500)).max(10).default([]).describe('Questions whose answers are needed before planning.'),
  risk_signals: z.array(z.string().min(1).max(500)).max(20).default([]),
  summary: z.string().max(1000).default(''),
});
export type IntakeModelOutput = z.infer<typeof IntakeModelOutputSchema>;

/** What the planner model step submits (tool `submit_plan`). */
export const PlanSchema = z.object({
  summary: z.string().trim().min(1).max(2000),
  steps: z.array(z.string().trim().min(1).max(1000)).min(1).max(30),
  files: z.array(z.string().trim().min(1).max(300)).max(100).default([]),
  checks: z.array(z.string().trim().min(1).max(300)).max(20).default([]),
});
export type Plan = z.infer<typeof PlanSchema>;

/** Build the intake result from the model's submission. Pure and deterministic. */
export function buildIntakeResult(request: string, out: IntakeModelOutput, answers: readonly string[] = []): IntakeResult {
  const gaps: string[] = [];
  if (!out.goal.trim()) gaps.push('goal');
  if (out.scope.length === 0) gaps.push('scope');
  if (out.acceptance.length === 0) gaps.push('acceptance');
  const questions = [...out.open_questions];
  const gapQuestion: Record<string, string> = {
    goal: 'What exactly should this change achieve?',
    scope: 'Which files or directories may the change touch?',
    acceptance: 'How will we know the change is done (what should be true or pass afterwards)?',
  };
  for (const g of gaps) if (!questions.some((q) => q.toLowerCase().includes(g))) questions.push(gapQuestion[g]!);
  const needs = questions.length > 0;
  const source = answers.length > 0 ? `${request}\n\nClarifications:\n${answers.map((a) => `- ${a}`).join('\n')}` : request;
  const draft: TaskDraft = {
    schema_version: HARNESS_SCHEMA_VERSION,
    source_input: source,
    intent: out.intent,
    goal: out.goal.trim() || '(to be clarified)',
    scope: out.scope.length > 0 ? out.scope : ['(to be clarified)'],
    acceptance: out.acceptance.length > 0 ? out.acceptance : ['(to be clarified)'],
    constraints: out.constraints,
    mode: out.intent === 'explore' ? 'explore' : out.intent === 'prototype' ? 'poc' : 'delivery',
    assumptions: out.assumptions,
    open_questions: questions,
    risk_signals: out.risk_signals,
    context_refs: [],
    next_action: needs ? 'clarify' : 'plan',
    derived: { risk_level: out.risk_signals.length > 2 ? 'high' : out.risk_signals.length > 0 ? 'medium' : 'low', state: needs ? 'needs_clarification' : 'planned' },
  };
  return {
    schema_version: HARNESS_SCHEMA_VERSION,
    command: 'intake',
    status: needs ? 'needs_clarification' : 'planned',
    task_draft: draft,
    interaction: {
      summary: out.summary.trim() || (out.goal.trim() ? out.goal.trim() : request.slice(0, 200)),
      assumptions: out.assumptions,
      blocking_gap: gaps.length > 0 ? `missing: ${gaps.join(', ')}` : needs ? 'open question' : null,
      question: needs ? questions[0]! : null,
      next_action: needs ? 'clarify' : 'plan',
    },
  };
}

/** True when the draft is complete enough to plan on (goal, scope and acceptance present). */
export function draftIsPlannable(d: TaskDraft): boolean {
  const unresolved = (xs: readonly string[]) => xs.length === 0 || xs.every((x) => x === '(to be clarified)');
  return d.goal !== '(to be clarified)' && !unresolved(d.scope) && !unresolved(d.acceptance);
}

// ---- gate records ----

export interface CheckEvidence {
  name: string;
  argv: string[];
  exitCode: number | null;
  passed: boolean;
  timedOut: boolean;
  durationMs: number;
  outputTail: string;
}

export interface PolicyViolationRecord {
  rule: string;
  path?: string;
  detail: string;
}

export interface GateVerdict {
  verdict: 'pass' | 'fail';
  reasons: string[];
  baseSha: string;
  patchHash: string;
  stats: { files: number; additions: number; deletions: number };
  violations: PolicyViolationRecord[];
  checks: CheckEvidence[];
  /** The effective promotion policy after the deny-wins merge. */
  promotion: 'patch' | 'draft-pr' | 'draft-pr-after-approval';
  forbidSelfApproval: boolean;
  approvalTimeoutMs: number;
  at: string;
  /**
   * The repository's own policy layer as the gate read it at the base (`.steward/policy.json`;
   * null: none there), so `steward policy what-if` can evaluate the change again without the
   * repository. Absent in verdicts recorded before it was kept, and when the file was invalid.
   */
  repoPolicy?: RepoPolicyInput | null;
}

export interface ChangeResult {
  kind: 'patch' | 'draft-pr';
  patchHash: string;
  /** Where the patch artifact is downloadable (API path). */
  patchPath: string;
  baseSha: string;
  revalidated?: boolean;
  pr?: { number: number; url: string; branch: string; commitSha: string };
}

export const CHANGE_PHASES = ['intake', 'clarify', 'plan', 'work', 'validate', 'approval', 'promote', 'done'] as const;
export type ChangePhase = (typeof CHANGE_PHASES)[number];
export type ChangeStatus = 'running' | 'done' | 'failed' | 'refused' | 'cancelled';
