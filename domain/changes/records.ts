/**
 * The records a governed repository change keeps in the agent-harness protocol's shapes: the
 * task state, the evidence from a gate verdict, the closing report, the plan as the chat reads
 * it and the draft PR's body. Built from the change's row; nothing is written here.
 */
import {
  HARNESS_SCHEMA_VERSION,
  TaskDraftSchema,
  type ChangeResult,
  type Evidence,
  type GateVerdict,
  type Plan,
  type Report,
  type TaskDraft,
  type TaskState,
} from '../../common/changes.js';
import { matchesGlob, parseUnifiedDiff } from '../../common/changes/policy.js';
import { getBlobText } from '../blobs.js';
import type { Db } from '../db.js';
import type { ChangeRow } from '../store/changes.js';

const now = (): string => new Date().toISOString();

/** The task state (agent-harness protocol) of a change at a phase. */
export function taskState(changeId: string, draft: TaskDraft, phase: TaskState['current_phase'], state: TaskState['current_state'], evidence: Evidence[], createdAt: Date): TaskState {
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

/** The evidence a gate verdict carries: the diff's size and each check's result. */
export function evidenceOf(verdict: GateVerdict): Evidence[] {
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

/** The validation task state after a gate verdict (its violations as override history). */
export function verdictTaskState(changeId: string, draft: TaskDraft, verdict: GateVerdict, createdAt: Date): TaskState {
  const state = taskState(changeId, draft, 'verify', verdict.verdict === 'pass' ? 'verifying' : 'blocked', evidenceOf(verdict), createdAt);
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
  return state;
}

/** The plan as the chat reads it. */
export function planDetails(changeId: string, repo: string, goal: string, plan: Plan): string {
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

const summaryOf = (evidence: Evidence[]): Report['evidence_summary'] =>
  evidence.map((e) => ({ type: e.type === 'audit_log' ? ('reasoning_note' as const) : e.type, result: e.content.split('\n')[0] ?? '', ...(e.passed !== undefined ? { passed: e.passed } : {}) }));

export type ChangeEndStatus = 'done' | 'failed' | 'refused' | 'cancelled';

/** The closing report and task state of a change that ended with `status` in `phase`. */
export async function closingRecords(db: Db, row: ChangeRow, end: { status: ChangeEndStatus; phase: string; reason?: string }): Promise<{ report: Report; state?: TaskState; result?: ChangeResult }> {
  const verdict = row.verdict ? (JSON.parse(row.verdict) as GateVerdict) : undefined;
  const result = row.result ? (JSON.parse(row.result) as ChangeResult) : undefined;
  const draft = row.draft ? TaskDraftSchema.safeParse(JSON.parse(row.draft)) : undefined;
  const evidence = verdict ? evidenceOf(verdict) : [];
  const actualScope = row.patchHash ? parseUnifiedDiff(await getBlobText(db, row.patchHash)).map((f) => f.path) : [];
  const scope = draft?.success ? draft.data.scope : [];
  const done = end.status === 'done';
  const report: Report = {
    schema_version: HARNESS_SCHEMA_VERSION,
    task_id: row.id.toLowerCase(),
    intent: draft?.success ? draft.data.intent : 'unknown',
    conclusion: done
      ? result?.pr
        ? `Draft PR #${result.pr.number} opened: ${result.pr.url}`
        : `Patch artifact ${result?.patchHash.slice(0, 12) ?? ''} ready (${result?.patchPath ?? ''})`
      : `The change ${end.status} in its ${end.phase} phase${end.reason ? `: ${end.reason}` : ''}`,
    actual_scope: actualScope,
    scope_deviation: null,
    evidence_summary: summaryOf(evidence),
    remaining_risks: done ? ['A human review of the change is still needed before merging.'] : [],
    next_steps: done ? (result?.pr ? ['Review the draft PR and mark it ready when satisfied.'] : ['Apply the patch with git apply and review it.']) : ['Refine the request and start a new change.'],
    completed_at: now(),
  };
  const outside = actualScope.filter((f) => scope.length > 0 && !scope.some((g) => matchesGlob(f, g)));
  if (outside.length) report.scope_deviation = `changed outside the drafted scope (${scope.join(', ')}): ${outside.join(', ')}`;
  const state = draft?.success ? taskState(row.id, draft.data, 'close', done ? 'done' : end.status === 'cancelled' ? 'suspended' : 'failed', evidence, row.createdAt) : undefined;
  return { report, ...(state ? { state } : {}), ...(result ? { result } : {}) };
}

/** What the chat that asked is told when the change ends. */
export function endNotice(changeId: string, end: { status: ChangeEndStatus; phase: string; reason?: string }, result: ChangeResult | undefined): string {
  if (end.status !== 'done') return `Change ${changeId} ${end.status} in its ${end.phase} phase${end.reason ? `: ${end.reason}` : ''}.`;
  return result?.pr
    ? `Change ${changeId} is done: draft PR #${result.pr.number} ${result.pr.url}${result.revalidated ? ' (revalidated on the moved base)' : ''}.`
    : `Change ${changeId} is done: the patch is at ${result?.patchPath ?? `/api/v1/changes/${changeId}/patch`} (git apply-able, sha256 ${result?.patchHash.slice(0, 12)}).`;
}

/** The draft PR's body: the request, the plan, the validation evidence and the report. */
export async function prBody(db: Db, row: ChangeRow, baseSha: string, revalidated: boolean, link: string | undefined): Promise<string> {
  const plan = row.plan ? (JSON.parse(row.plan) as Plan) : undefined;
  const verdict = row.verdict ? (JSON.parse(row.verdict) as GateVerdict) : undefined;
  const draft = row.draft ? (JSON.parse(row.draft) as TaskDraft) : undefined;
  const report: Report = {
    schema_version: HARNESS_SCHEMA_VERSION,
    task_id: row.id.toLowerCase(),
    intent: draft?.intent ?? 'unknown',
    conclusion: `Draft change for review: ${draft?.goal ?? row.request.slice(0, 200)}`,
    actual_scope: verdict ? parseUnifiedDiff(await getBlobText(db, row.patchHash ?? '')).map((f) => f.path) : [],
    scope_deviation: null,
    evidence_summary: verdict ? summaryOf(evidenceOf(verdict)) : [],
    remaining_risks: ['Generated by a coding agent: review before merging.'],
    next_steps: ['Review the diff and the evidence; mark the PR ready when satisfied.'],
    completed_at: now(),
  };
  return [
    `Steward change \`${row.id}\`, requested by ${row.requestedByName}.`,
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
    link ? `Run in the Temporal UI: ${link}` : `Workflow id: \`${row.workflowId}\``,
  ]
    .filter((l) => l !== '')
    .join('\n');
}
