/**
 * What-if: a policy change judged by the decisions it would have changed. It evaluates again,
 * under the policy in force and under a proposed one:
 * - the validation gate's policy evaluation of past repository changes, on their recorded
 *   inputs (the stored patch, its base, the task's agreed scope, the registration's policy and
 *   the repository's own layer as the gate read it; for changes recorded before that layer was
 *   kept, read from a local repository at the base, else left out and said so);
 * - the approval policy over past tool calls (their `tool.call` receipts): would the call have
 *   waited for an admin, or run without one. A tool of an MCP server is judged by the live path's
 *   own function (mcpNeedsApproval: the approval list, then the server's registered policy for
 *   the tool, by the requester's role the receipt recorded), not by the approval list alone.
 * It writes nothing, calls no model and reaches no network: the evaluation is the gate's own
 * pure policy check (checkPatchPolicy), not its sandboxed commands, whose results are recorded
 * evidence and do not depend on the policy.
 */
import { execFile } from 'node:child_process';
import { isAbsolute } from 'node:path';
import { promisify } from 'node:util';
import { z } from 'zod';
import { changePolicy, checkPatchPolicy, parseRepoPolicyJson, RepoPolicySchema, validateGlob, type EffectivePolicy, type ParsedDiff, type RepoPolicyInput } from '../../common/changes/policy.js';
import { TaskDraftSchema, type GateVerdict } from '../../common/changes.js';
import { mcpApprovalVerdict, parseMcpDisplayName, type McpServerSpec } from '../../common/mcp.js';
import { RoleSchema, type Role } from '../../common/roles.js';
import { approvalRequired, isActionTool } from '../../common/tools.js';
import { getBlobText } from '../blobs.js';
import type { Db } from '../db.js';
import { listReceipts } from '../receipts.js';
import { approvalsOfCalls } from '../store/approvals.js';
import { changesWithPatches, loadRepo, type RepoRecord } from '../store/changes.js';
import { listMcpServers } from '../store/mcp.js';
import { readPatch } from './git.js';
import { heldSecrets, REPO_POLICY_FILE } from './gate.js';

const run = promisify(execFile);

/** A proposed policy: the operator's global repository layer (as STEWARD_REPO_POLICY) and the approval list (as STEWARD_APPROVAL_TOOLS); either or both. */
export const WhatIfPolicySchema = z
  .strictObject({
    repoPolicy: RepoPolicySchema.optional(),
    approvalTools: z
      .array(z.string().regex(/^(\*|[a-z][a-z0-9_]{0,63}|[a-z][a-z0-9-]{0,23}\.([A-Za-z0-9_-]{1,64}|\*))$/, 'a tool name such as post_to_chat, an MCP tool as server.tool or server.*, or "*" for every tool'))
      .max(100, 'at most 100 tools')
      .optional(),
  })
  .refine((p) => p.repoPolicy !== undefined || p.approvalTools !== undefined, 'the policy file names repoPolicy, approvalTools or both');
export type WhatIfPolicy = z.infer<typeof WhatIfPolicySchema>;

export interface Decision {
  allowed: boolean;
  reasons: string[];
}

export interface ChangeWhatIf {
  id: string;
  repo: string;
  request: string;
  createdAt: string;
  /** The recorded gate verdict (with its checks), for context. */
  recorded: 'pass' | 'fail' | 'none';
  old: Decision;
  new: Decision;
  flipped: boolean;
  /** What the evaluation could not use (a repository layer not recorded, a missing patch). */
  notes: string[];
}

export interface ActionWhatIf {
  turnId: string;
  toolCallId: string;
  tool: string;
  at: string;
  /** What happened: ran without approval, or the approval's outcome. */
  recorded: string;
  old: { approval: boolean; reason: string };
  new: { approval: boolean; reason: string };
  flipped: boolean;
}

export interface WhatIfReport {
  since: string | null;
  repo: string | null;
  changes: { evaluated: number; flipped: ChangeWhatIf[]; unchanged: number };
  actions: { evaluated: number; flipped: ActionWhatIf[]; unchanged: number } | null;
}

export interface WhatIfInput {
  proposed: WhatIfPolicy;
  /** The policy in force: the operator's global layer and approval list. */
  current: { repoPolicy: RepoPolicyInput; approvalTools: readonly string[] };
  since?: Date;
  repo?: string;
  /** Secret values the gate scans patches for (its held tokens), by variable name. */
  secret?: (name: string) => string | undefined;
  limit?: number;
}

const violationText = (v: { rule: string; path?: string; detail: string }) => `${v.rule}${v.path ? ` ${v.path}` : ''}: ${v.detail}`;

function decide(files: ParsedDiff, policy: EffectivePolicy, secretValues: string[]): Decision {
  const check = checkPatchPolicy(files, policy, { secretValues });
  return { allowed: check.violations.length === 0, reasons: check.violations.map(violationText) };
}

/** The repository's own layer at the base, read from a repository on this machine (never fetched). */
async function localRepoLayer(cloneUrl: string, baseSha: string): Promise<{ policy: RepoPolicyInput | null } | { note: string }> {
  const dir = cloneUrl.startsWith('file://') ? new URL(cloneUrl).pathname : cloneUrl;
  if (!isAbsolute(dir)) return { note: `the repository's own policy layer was not recorded and ${cloneUrl} is not on this machine: evaluated without it` };
  try {
    const { stdout } = await run('git', ['-C', dir, 'show', `${baseSha}:${REPO_POLICY_FILE}`], { maxBuffer: 1024 * 1024, env: { ...process.env, GIT_TERMINAL_PROMPT: '0' } });
    const parsed = parseRepoPolicyJson(stdout);
    return parsed.ok ? { policy: parsed.policy } : { note: `the repository's policy file at the base is invalid (${parsed.error}): evaluated without it` };
  } catch (err) {
    const msg = String((err as { stderr?: string }).stderr ?? (err as Error).message);
    if (/does not exist|exists on disk, but not in/.test(msg)) return { policy: null };
    return { note: `the repository's own policy layer was not recorded and could not be read at ${baseSha.slice(0, 12)}: evaluated without it` };
  }
}

function scopeOf(draft: string | null): string[] {
  if (!draft) return [];
  const parsed = TaskDraftSchema.safeParse(JSON.parse(draft));
  if (!parsed.success) return [];
  return parsed.data.scope.filter((g) => {
    try {
      validateGlob(g);
      return g !== '(to be clarified)';
    } catch {
      return false;
    }
  });
}

async function changesWhatIf(db: Db, input: WhatIfInput): Promise<WhatIfReport['changes']> {
  const rows = await changesWithPatches(db, { ...(input.since ? { since: input.since } : {}), ...(input.repo ? { repo: input.repo } : {}), limit: input.limit ?? 1000 });
  const flipped: ChangeWhatIf[] = [];
  let unchanged = 0;
  const newGlobal = input.proposed.repoPolicy ?? input.current.repoPolicy;
  for (const row of rows) {
    const notes: string[] = [];
    const verdict = row.verdict ? (JSON.parse(row.verdict) as Partial<GateVerdict>) : undefined;
    let repo: RepoRecord | undefined;
    try {
      repo = await loadRepo(db, row.repo);
    } catch {
      notes.push(`the repository ${row.repo} is no longer registered: evaluated without its registration's policy`);
    }
    const baseSha = verdict?.baseSha ?? row.baseSha ?? '';
    let repoLayer: RepoPolicyInput = {};
    if (verdict && 'repoPolicy' in verdict) repoLayer = verdict.repoPolicy ?? {};
    else if (repo && baseSha) {
      const local = await localRepoLayer(repo.cloneUrl, baseSha);
      if ('note' in local) notes.push(local.note);
      else repoLayer = local.policy ?? {};
    }
    const patch = await readPatch(await getBlobText(db, row.patchHash!));
    const scope = scopeOf(row.draft);
    const policyOf = (global: RepoPolicyInput) => {
      const p = changePolicy({ global, ...(repo ? { registration: repo.policy } : {}), repo: repoLayer });
      if (scope.length > 0) p.allowedScopes = [...p.allowedScopes, scope];
      return p;
    };
    const secretValues = repo && input.secret ? heldSecrets(repo, input.secret) : [];
    const before = decide(patch, policyOf(input.current.repoPolicy), secretValues);
    const after = decide(patch, policyOf(newGlobal), secretValues);
    const item: ChangeWhatIf = {
      id: row.id,
      repo: row.repo,
      request: row.request.slice(0, 200),
      createdAt: row.createdAt.toISOString(),
      recorded: verdict?.verdict ?? 'none',
      old: before,
      new: after,
      flipped: before.allowed !== after.allowed,
      notes,
    };
    if (item.flipped) flipped.push(item);
    else unchanged++;
  }
  return { evaluated: rows.length, flipped, unchanged };
}

interface PastCall {
  turnId: string;
  toolCallId: string;
  tool: string;
  at: string;
  ok: boolean;
  /** The requester's role as the receipt recorded it (MCP calls): null for none, undefined when not recorded. */
  role: Role | null | undefined;
}

function approvalReason(tools: readonly string[], call: PastCall, servers: ReadonlyMap<string, McpServerSpec>): { approval: boolean; reason: string } {
  const name = call.tool;
  const mcp = parseMcpDisplayName(name);
  if (mcp) {
    const spec = servers.get(mcp.server);
    if (spec) return mcpApprovalVerdict(tools, spec, mcp.tool, call.role);
    const listed = tools.includes('*') || tools.includes(name) || tools.includes(`${mcp.server}.*`);
    return { approval: listed, reason: `${name} is ${listed ? '' : 'not '}in the approval list (the MCP server ${mcp.server} is no longer registered: its own policy is not known)` };
  }
  if (isActionTool(name)) return { approval: true, reason: 'a proposed action: always approved by an admin' };
  if (approvalRequired({ approvalTools: tools }, name)) return { approval: true, reason: tools.includes('*') ? 'every tool waits for approval ("*")' : `${name} is in the approval list` };
  return { approval: false, reason: `${name} is not in the approval list` };
}

async function actionsWhatIf(db: Db, input: WhatIfInput, tools: readonly string[]): Promise<NonNullable<WhatIfReport['actions']>> {
  const calls: PastCall[] = [];
  let afterId: number | undefined;
  const limit = input.limit ?? 10_000;
  while (calls.length < limit) {
    const page = await listReceipts(db, { kind: 'tool.call', ...(input.since ? { since: input.since } : {}), ...(afterId ? { afterId } : {}), limit: 1000 });
    for (const r of page) {
      const d = r.data as { turnId?: string; toolCallId?: string; tool?: string; ok?: boolean; requesterRole?: unknown };
      const role = d.requesterRole === null ? null : RoleSchema.safeParse(d.requesterRole).data;
      if (d.turnId && d.toolCallId && d.tool) calls.push({ turnId: d.turnId, toolCallId: d.toolCallId, tool: d.tool, at: r.at, ok: d.ok === true, role });
    }
    if (page.length < 1000) break;
    afterId = page.at(-1)!.id;
  }
  const approvals = await approvalsOfCalls(db, calls);
  // each MCP server's policy as registered now (the policy in force, on both sides)
  const servers = new Map((await listMcpServers(db)).map((r) => [r.spec.name, r.spec]));
  const outcome = new Map(approvals.map((a) => [`${a.turnId}\u0000${a.toolCallId}`, a]));
  const flipped: ActionWhatIf[] = [];
  for (const c of calls.slice(0, limit)) {
    const before = approvalReason(input.current.approvalTools, c, servers);
    const after = approvalReason(tools, c, servers);
    if (before.approval === after.approval) continue;
    const a = outcome.get(`${c.turnId}\u0000${c.toolCallId}`);
    flipped.push({ turnId: c.turnId, toolCallId: c.toolCallId, tool: c.tool, at: c.at, recorded: a ? `approval ${a.status}${a.decidedBy ? ` by ${a.decidedBy}` : ''}` : c.ok ? 'ran without approval' : 'did not run', old: before, new: after, flipped: true });
  }
  return { evaluated: Math.min(calls.length, limit), flipped, unchanged: Math.min(calls.length, limit) - flipped.length };
}

/** Evaluate past decisions under the current and the proposed policy; write nothing. */
export async function policyWhatIf(db: Db, input: WhatIfInput): Promise<WhatIfReport> {
  return {
    since: input.since?.toISOString() ?? null,
    repo: input.repo ?? null,
    changes: await changesWhatIf(db, input),
    actions: input.proposed.approvalTools ? await actionsWhatIf(db, input, input.proposed.approvalTools) : null,
  };
}

/** The report for people: each flipped decision with its reasons under the old and the new policy. */
export function formatWhatIf(r: WhatIfReport): string {
  const lines: string[] = [];
  const scope = `${r.repo ? ` of ${r.repo}` : ''}${r.since ? ` since ${r.since}` : ''}`;
  lines.push(`Repository changes${scope}: ${r.changes.evaluated} evaluated, ${r.changes.flipped.length} would be decided differently.`);
  for (const c of r.changes.flipped) {
    lines.push(`- ${c.id} (${c.repo}, ${c.createdAt}): ${c.old.allowed ? 'allowed' : 'refused'} -> ${c.new.allowed ? 'allowed' : 'refused'}; recorded gate verdict ${c.recorded}`);
    lines.push(`    request: ${c.request}`);
    lines.push(`    under the current policy: ${c.old.reasons.length ? c.old.reasons.join('; ') : 'no policy violation'}`);
    lines.push(`    under the proposed policy: ${c.new.reasons.length ? c.new.reasons.join('; ') : 'no policy violation'}`);
    for (const n of c.notes) lines.push(`    note: ${n}`);
  }
  if (r.actions) {
    lines.push(`Tool calls${r.since ? ` since ${r.since}` : ''}: ${r.actions.evaluated} evaluated, ${r.actions.flipped.length} would be decided differently.`);
    for (const a of r.actions.flipped) {
      lines.push(`- ${a.tool} (turn ${a.turnId}, call ${a.toolCallId}, ${a.at}; ${a.recorded}): ${a.old.approval ? 'approval' : 'no approval'} -> ${a.new.approval ? 'approval' : 'no approval'}`);
      lines.push(`    current: ${a.old.reason}; proposed: ${a.new.reason}`);
    }
  }
  lines.push('Nothing was written.');
  return `${lines.join('\n')}\n`;
}
