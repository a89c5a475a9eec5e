/**
 * The validation gate of a governed repository change: apply the patch to a clean clone of the
 * base commit in a directory of its own, enforce the merged (deny-wins) policy and the task's
 * agreed scope, run the configured checks in the sandbox. It returns a verdict and writes no
 * records: the activities record it.
 */
import { ApplicationFailure } from '@temporalio/common';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { CheckEvidence, GateVerdict } from '../../common/changes.js';
import { changePolicy, checkPatchPolicy, validateGlob, RepoPolicySchema, type EffectivePolicy, type RepoPolicyInput } from '../../common/changes/policy.js';
import { getBlobText } from '../blobs.js';
import type { Db } from '../db.js';
import { applyPatch, cloneAt, makeTempDir, readPatch, removeDir } from './git.js';
import { runSandboxed, SandboxRefusedError } from '../sandbox.js';
import type { RepoRecord } from '../store/changes.js';

/** Where the repository's own policy layer lives in its tree. */
export const REPO_POLICY_FILE = '.steward/policy.json';

/** What the gate needs of the operator's settings. */
export interface GateSettings {
  /** The operator's policy layer (STEWARD_REPO_POLICY): the top of the deny-wins merge. */
  globalPolicy: RepoPolicyInput;
  /** Extra read-only paths visible in the sandbox (toolchains the checks need). */
  sandboxRoBinds: readonly string[];
}

export function tail(text: string, max = 4000): string {
  return text.length <= max ? text : `…${text.slice(text.length - max)}`;
}

/** Run `fn` in a fresh temporary directory, removed afterwards whatever the outcome. */
export async function withTempDir<T>(prefix: string, fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = await makeTempDir(prefix);
  try {
    return await fn(dir);
  } finally {
    await removeDir(dir);
  }
}

/** Read the repository's own policy layer from a checkout (absent: empty; invalid: refused). */
export async function repoPolicyFile(tree: string): Promise<{ ok: true; policy: RepoPolicyInput; present: boolean } | { ok: false; error: string }> {
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

/** Secret values Steward itself holds for this repository: a diff carrying one of them is refused. */
export function heldSecrets(repo: RepoRecord, secret: (name: string) => string | undefined): string[] {
  const out: string[] = [];
  if (repo.github) {
    const v = secret(repo.github.tokenRef.slice('env:'.length));
    if (v && v.length >= 8) out.push(v);
  }
  return out;
}

/** The task's agreed scope as globs (entries that are not paths or globs are advisory). */
function scopeGlobs(taskScope: readonly string[]): string[] {
  return taskScope.filter((g) => {
    try {
      validateGlob(g);
      return g !== '(to be clarified)';
    } catch {
      return false;
    }
  });
}

/** Run one configured check in the sandbox on the patched tree. */
async function runCheck(c: RepoRecord['checks'][number], tree: string, policy: EffectivePolicy, roBinds: readonly string[], signal: AbortSignal): Promise<CheckEvidence> {
  const limitMs = Math.min((c.timeoutSeconds ?? policy.commandTimeoutSeconds) * 1000, policy.commandTimeoutSeconds * 1000 * 10);
  const program = path.basename(c.argv[0]!);
  try {
    const r = await runSandboxed({
      argv: c.argv,
      workTree: tree,
      // checks are the operator's own commands: allowed by name, contained by the sandbox
      allowlist: [program],
      timeoutMs: limitMs,
      maxOutputBytes: policy.maxOutputBytes,
      roBinds,
      signal,
    });
    return {
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
    return { name: c.name, argv: c.argv, exitCode: null, passed: false, timedOut: false, durationMs: 0, outputTail: (err as Error).message };
  }
}

export interface GateRun {
  db: Db;
  settings: GateSettings;
  repo: RepoRecord;
  baseSha: string;
  patchHash: string;
  taskScope: readonly string[];
  /** Values of secrets Steward holds (heldSecrets). */
  secretValues: string[];
  signal: AbortSignal;
  beat: () => void;
}

/** The validation gate proper: a pure verdict, no records written. */
export async function validateOn(g: GateRun): Promise<GateVerdict> {
  const patch = await getBlobText(g.db, g.patchHash);
  return withTempDir('steward-gate-', async (dir) => {
    const tree = path.join(dir, 'tree');
    await cloneAt(g.repo.cloneUrl, g.baseSha, tree);
    g.beat();
    const reasons: string[] = [];
    const file = await repoPolicyFile(tree);
    if (!file.ok) reasons.push(file.error);
    const policy: EffectivePolicy = changePolicy({ global: g.settings.globalPolicy, registration: g.repo.policy, repo: file.ok ? file.policy : {} });
    const scope = scopeGlobs(g.taskScope);
    if (scope.length > 0) policy.allowedScopes = [...policy.allowedScopes, scope];
    const check = checkPatchPolicy(await readPatch(patch), policy, { secretValues: g.secretValues });
    for (const v of check.violations) reasons.push(`${v.rule}${v.path ? ` ${v.path}` : ''}: ${v.detail}`);
    const checks: CheckEvidence[] = [];
    if (reasons.length === 0) {
      const applied = await applyPatch(tree, patch);
      if (!applied.ok) reasons.push(`the patch does not apply to ${g.baseSha.slice(0, 12)}: ${applied.error}`);
      else {
        for (const c of g.repo.checks) {
          g.beat();
          const evidence = await runCheck(c, tree, policy, g.settings.sandboxRoBinds, g.signal);
          checks.push(evidence);
          if (!evidence.passed) reasons.push(`check ${c.name} failed${evidence.timedOut ? ' (timed out)' : ` (exit ${evidence.exitCode})`}`);
        }
      }
    }
    return {
      verdict: reasons.length === 0 ? 'pass' : 'fail',
      reasons,
      baseSha: g.baseSha,
      patchHash: g.patchHash,
      stats: check.stats,
      violations: check.violations.map((v) => ({ rule: v.rule, ...(v.path ? { path: v.path } : {}), detail: v.detail })),
      checks,
      promotion: g.repo.github ? policy.promotion : 'patch',
      forbidSelfApproval: policy.forbidSelfApproval,
      approvalTimeoutMs: policy.approvalTimeoutMinutes * 60_000,
      at: new Date().toISOString(),
      ...(file.ok ? { repoPolicy: file.present ? file.policy : null } : {}),
    };
  });
}
