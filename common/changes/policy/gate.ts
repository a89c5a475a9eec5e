/**
 * Repository change policy, part 5: the gate. `checkPatchPolicy` judges a parsed patch against
 * the effective policy (paths, scope, sizes, lock files, symlinks, secrets).
 */
import { firstMatch } from './globs.js';
import { LOCKFILE_PATTERNS, type EffectivePolicy } from './policy.js';
import { parseUnifiedDiff, type DiffFile, type DiffParseError, type ParsedDiff } from './diff.js';
import { detectSecrets } from './secrets.js';

// =====================================================================================
// The gate
// =====================================================================================

export type PolicyRule =
  | 'protected-path'
  | 'outside-scope'
  | 'never-promote'
  | 'lockfile'
  | 'diff-too-large'
  | 'too-many-files'
  | 'file-too-large'
  | 'secret'
  | 'symlink-escape'
  | 'empty'
  | 'unparseable';

export interface PolicyViolation {
  rule: PolicyRule;
  path?: string;
  /** A sentence for a human reading the gate verdict (the path is in `path`, not repeated). */
  detail: string;
}

export interface PatchCheck {
  ok: boolean;
  violations: PolicyViolation[];
  stats: { files: number; additions: number; deletions: number };
}

/** Violations of one rule listed in full; more are summarized in one extra entry. */
export const MAX_VIOLATIONS_PER_RULE = 50;

const q = (s: string): string => JSON.stringify(s.length > 200 ? `${s.slice(0, 200)}…` : s);

/** Why `p` is not a safe repository-relative path (undefined: it is). */
function unsafePath(p: string): string | undefined {
  if (p === '') return 'is an empty path';
  if (p.includes('\0')) return 'contains a NUL character';
  if (p.startsWith('/')) return 'is an absolute path, outside the repository';
  if (/^[A-Za-z]:[\\/]/.test(p)) return 'is an absolute (drive) path, outside the repository';
  const segs = p.split('/');
  if (segs.includes('..')) return 'contains a ".." segment and escapes the repository';
  if (segs.some((s) => s === '' || s === '.')) return 'is not a normalized path (empty or "." segment)';
  for (const s of segs) {
    const norm = s.toLowerCase().replace(/[. ]+$/, '');
    if (norm === '.git' || norm === 'git~1') return 'is inside the repository\'s .git directory';
  }
  return undefined;
}

/**
 * The path-level rules for one path: protected (case-insensitive, plus unsafe paths and any
 * `.git` component), scope, never-promote, lock files. `role`:
 *  - `new`: a path the change writes (added, modified, mode change, rename or copy destination):
 *    every rule;
 *  - `deleted`: protected, scope, lock files (deleting a stray log file is fine);
 *  - `renamed-from`: the source of a rename (it disappears): protected, scope, lock files;
 *  - `copied-from`: the source of a copy (read, not changed): protected only (copying a
 *    protected file such as `.env` would leak it).
 */
export function pathViolations(path: string, policy: EffectivePolicy, role: 'new' | 'deleted' | 'renamed-from' | 'copied-from' = 'new'): PolicyViolation[] {
  const out: PolicyViolation[] = [];
  const what = { new: 'changed', deleted: 'deleted', 'renamed-from': 'renamed', 'copied-from': 'copied' }[role];
  const note = role === 'renamed-from' ? ' (the source of a rename)' : role === 'copied-from' ? ' (the source of a copy)' : '';
  const unsafe = unsafePath(path);
  if (unsafe) {
    out.push({ rule: 'protected-path', path, detail: `${unsafe}${note}; a change can never touch such a path` });
    return out;
  }
  const prot = firstMatch(path, policy.protectedPaths, { nocase: true });
  if (prot !== undefined) {
    out.push({
      rule: 'protected-path',
      path,
      detail: `is protected (matches ${q(prot)}) and cannot be ${what} by an agent${note}; no approval overrides this`,
    });
  }
  if (role === 'copied-from') return out;
  for (const scope of policy.allowedScopes) {
    if (firstMatch(path, scope) === undefined) {
      out.push({
        rule: 'outside-scope',
        path,
        detail:
          scope.length === 0
            ? `is outside the allowed scope${note}: a policy layer allows no paths at all`
            : `is outside the allowed scope${note}; allowed: ${scope.map((g) => q(g)).join(', ')}`,
      });
    }
  }
  if (role === 'new') {
    const np = firstMatch(path, policy.neverPromote);
    if (np !== undefined) {
      out.push({
        rule: 'never-promote',
        path,
        detail: `matches the never-promote pattern ${q(np)}: logs, build output, dependencies, caches and runtime artifacts are never promoted`,
      });
    }
  }
  if (!policy.allowLockfiles) {
    const lock = firstMatch(path, LOCKFILE_PATTERNS);
    if (lock !== undefined) {
      out.push({
        rule: 'lockfile',
        path,
        detail: `is a lock file (${lock})${note}; lock file changes are not promoted unless the policy sets "allowLockfiles": true`,
      });
    }
  }
  return out;
}

/** Where a symlink at `linkPath` pointing at `target` lands, or why it escapes. */
function symlinkProblem(linkPath: string, target: string, policy: EffectivePolicy): string | undefined {
  if (target === '') return 'is a symlink with an empty target';
  if (target.includes('\n') || target.includes('\0')) return 'is a symlink with a malformed target';
  if (target.startsWith('/') || target.startsWith('~') || /^[A-Za-z]:[\\/]/.test(target) || target.startsWith('\\\\')) {
    return `is a symlink to an absolute path (${q(target)}), outside the repository`;
  }
  const stack = linkPath.split('/').slice(0, -1);
  for (const seg of target.split('/')) {
    if (seg === '' || seg === '.') continue;
    if (seg === '..') {
      if (stack.length === 0) return `is a symlink whose target ${q(target)} escapes the repository with ".."`;
      stack.pop();
    } else stack.push(seg);
  }
  const resolved = stack.join('/');
  if (resolved === '') return `is a symlink to the repository root (${q(target)})`;
  const unsafe = unsafePath(resolved);
  if (unsafe) return `is a symlink into a forbidden location (${q(target)} ${unsafe})`;
  const prot = firstMatch(resolved, policy.protectedPaths, { nocase: true });
  if (prot !== undefined) return `is a symlink to the protected path ${q(resolved)} (matches ${q(prot)})`;
  return undefined;
}

function formatBytes(n: number): string {
  if (n >= 1_000_000) return `${(n / 1_000_000).toFixed(1)} MB (${n} bytes)`;
  if (n >= 1000) return `${(n / 1000).toFixed(1)} kB (${n} bytes)`;
  return `${n} bytes`;
}

/**
 * Enforce `policy` on a parsed patch. `files` may carry `errors` (from parseUnifiedDiff) or they
 * can be passed as `parseErrors`; any is an `unparseable` violation. `fileSizes` (path: bytes
 * after the change, measured by the caller on the patched tree) makes the size check exact;
 * without it the gate knows added files' sizes, literal binaries, and the bytes a patch adds.
 * Binary contents cannot be scanned for secrets.
 */
export function checkPatchPolicy(
  files: readonly DiffFile[],
  policy: EffectivePolicy,
  opts: { secretValues?: readonly string[]; fileSizes?: Readonly<Record<string, number>>; parseErrors?: readonly DiffParseError[] } = {},
): PatchCheck {
  const violations: PolicyViolation[] = [];
  const parseErrors = opts.parseErrors ?? (files as Partial<ParsedDiff>).errors ?? [];
  let additions = 0;
  let deletions = 0;
  for (const f of files) {
    additions += f.additions;
    deletions += f.deletions;
  }
  const stats = { files: files.length, additions, deletions };

  for (const e of parseErrors) {
    violations.push({ rule: 'unparseable', detail: `the patch could not be read at line ${e.line}: ${e.message}; a patch the gate cannot fully read is never promoted` });
  }
  if (files.length === 0) {
    violations.push({ rule: 'empty', detail: 'the patch contains no file changes; there is nothing to promote' });
  }
  if (files.length > policy.maxDiffFiles) {
    violations.push({ rule: 'too-many-files', detail: `the patch touches ${files.length} files; the limit is ${policy.maxDiffFiles} (maxDiffFiles)` });
  }
  if (additions + deletions > policy.maxDiffLines) {
    violations.push({
      rule: 'diff-too-large',
      detail: `the patch changes ${additions + deletions} lines (${additions} added, ${deletions} deleted); the limit is ${policy.maxDiffLines} (maxDiffLines)`,
    });
  }

  const secretValues = opts.secretValues ?? [];
  for (const f of files) {
    const deleted = f.status === 'deleted';
    violations.push(...pathViolations(f.path, policy, deleted ? 'deleted' : 'new'));
    if (f.oldPath !== undefined && f.oldPath !== f.path) violations.push(...pathViolations(f.oldPath, policy, f.status === 'copied' ? 'copied-from' : 'renamed-from'));
    if (deleted) continue;

    // size
    const measured = opts.fileSizes?.[f.path];
    const known = measured ?? (f.binary ? f.binarySize : f.status === 'added' ? f.addedBytes : undefined);
    if (known !== undefined && known > policy.maxFileBytes) {
      violations.push({ rule: 'file-too-large', path: f.path, detail: `is ${formatBytes(known)} after the change; the limit is ${policy.maxFileBytes} bytes (maxFileBytes)` });
    } else if (known === undefined && f.addedBytes > policy.maxFileBytes) {
      violations.push({ rule: 'file-too-large', path: f.path, detail: `gains ${formatBytes(f.addedBytes)} in this change alone; the limit for a file is ${policy.maxFileBytes} bytes (maxFileBytes)` });
    }

    // symlinks
    if (f.isSymlink) {
      if (f.binary) violations.push({ rule: 'symlink-escape', path: f.path, detail: 'is a symlink sent as binary data; its target cannot be checked' });
      else if (f.symlinkTarget !== undefined) {
        const problem = symlinkProblem(f.path, f.symlinkTarget, policy);
        if (problem) violations.push({ rule: 'symlink-escape', path: f.path, detail: `${problem}; symlinks must point inside the repository` });
      }
    }

    // secrets in the content and in the name
    for (const s of detectSecrets(f.addedLines, { extraValues: secretValues })) {
      violations.push({
        rule: 'secret',
        path: f.path,
        detail: `line ${f.addedLineNumbers[s.line] ?? s.line + 1} adds what looks like ${s.description} (${s.preview}); secrets must never be promoted`,
      });
    }
    for (const s of detectSecrets([f.path], { extraValues: secretValues })) {
      violations.push({ rule: 'secret', detail: `a file name (not shown) contains what looks like ${s.description} (${s.preview}); secrets must never be promoted` });
    }
  }

  // bound the list: per rule, the first MAX_VIOLATIONS_PER_RULE and a summary
  const perRule = new Map<PolicyRule, number>();
  const bounded: PolicyViolation[] = [];
  for (const v of violations) {
    const c = (perRule.get(v.rule) ?? 0) + 1;
    perRule.set(v.rule, c);
    if (c <= MAX_VIOLATIONS_PER_RULE) bounded.push(v);
  }
  for (const [rule, c] of perRule) {
    if (c > MAX_VIOLATIONS_PER_RULE) bounded.push({ rule, detail: `and ${c - MAX_VIOLATIONS_PER_RULE} more ${rule} violations not listed` });
  }
  return { ok: bounded.length === 0, violations: bounded, stats };
}

/** Parse a patch and check it in one step (parse errors included). */
export function checkPatch(
  patch: string,
  policy: EffectivePolicy,
  opts: { secretValues?: readonly string[]; fileSizes?: Readonly<Record<string, number>> } = {},
): PatchCheck & { files: DiffFile[] } {
  const files = parseUnifiedDiff(patch);
  return { ...checkPatchPolicy(files, policy, { ...opts, parseErrors: files.errors }), files: [...files] };
}
