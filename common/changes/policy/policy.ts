/**
 * Repository change policy, part 2: the layers. `RepoPolicySchema` (one layer: the operator's
 * global config, the repository's registration, or the repository's `.steward/policy.json`),
 * `mergePolicies` (deny wins), `withDefaults` / `resolvePolicy` and `changePolicy` (the
 * operator's layers as the ceiling of the repository's own).
 */
import { z } from 'zod';
import { MAX_GLOB_LENGTH, validateGlob } from './globs.js';

// =====================================================================================
// Policy layers
// =====================================================================================

export const PROMOTION_MODES = ['patch', 'draft-pr-after-approval', 'draft-pr'] as const;
/** Promotion modes from strictest to loosest. */
export type PromotionMode = (typeof PROMOTION_MODES)[number];

const POLICY_FIELDS = [
  'protectedPaths',
  'allowedScope',
  'neverPromote',
  'allowLockfiles',
  'maxDiffLines',
  'maxDiffFiles',
  'maxFileBytes',
  'commands',
  'commandTimeoutSeconds',
  'maxOutputBytes',
  'promotion',
  'forbidSelfApproval',
  'approvalTimeoutMinutes',
] as const;
export type PolicyField = (typeof POLICY_FIELDS)[number];

const GlobSchema = z
  .string()
  .min(1, 'a glob is not empty')
  .max(MAX_GLOB_LENGTH, `a glob is at most ${MAX_GLOB_LENGTH} characters`)
  .superRefine((g, ctx) => {
    try {
      validateGlob(g);
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: `invalid glob ${JSON.stringify(g)}: ${(err as Error).message}` });
    }
  });
const globs = () => z.array(GlobSchema).max(500, 'at most 500 globs');
const CommandSchema = z
  .string()
  .regex(/^(\*|[A-Za-z0-9_][A-Za-z0-9._+-]{0,127})$/, 'a command is a program base name such as "git" or "npm" (no path, no arguments), or "*" for any program');
const count = (max: number) => z.number().int('expected a whole number').min(0, 'expected 0 or more').max(max, `at most ${max}`);
const positive = (max: number) => z.number().int('expected a whole number').min(1, 'expected at least 1').max(max, `at most ${max}`);

/**
 * One policy layer. Every field is optional (absent = this layer says nothing about it); unknown
 * fields are an error. `$schema` is tolerated for editor support.
 */
export const RepoPolicySchema = z.strictObject(
  {
    $schema: z.string().max(2048).optional(),
    /** Globs an agent may never change (added, modified, deleted, renamed from or to). */
    protectedPaths: globs().optional(),
    /** Globs a change must stay inside (absent: anywhere). `[]` allows nothing. */
    allowedScope: globs().optional(),
    /** Globs of files never promoted (build output, logs, dependencies, caches, ...). */
    neverPromote: globs().optional(),
    /** Whether lock files (package-lock.json, Cargo.lock, ...) may be changed. */
    allowLockfiles: z.boolean().optional(),
    /** Added plus deleted lines over the whole patch. */
    maxDiffLines: count(10_000_000).optional(),
    /** Files in the patch. */
    maxDiffFiles: count(1_000_000).optional(),
    /** Size of any one file after the change (bytes). */
    maxFileBytes: count(1_000_000_000).optional(),
    /** Program base names the sandbox may run; `"*"` = any. */
    commands: z.array(CommandSchema).max(500, 'at most 500 commands').optional(),
    commandTimeoutSeconds: positive(86_400).optional(),
    maxOutputBytes: positive(100_000_000).optional(),
    /** How a passing change leaves Steward. */
    promotion: z.enum(PROMOTION_MODES, { error: `expected one of ${PROMOTION_MODES.join(', ')}` }).optional(),
    /** The requester of a change may not approve its promotion. */
    forbidSelfApproval: z.boolean().optional(),
    approvalTimeoutMinutes: positive(43_200).optional(),
  },
  {
    error: (iss) =>
      iss.code === 'unrecognized_keys'
        ? `unknown policy field${iss.keys.length > 1 ? 's' : ''} ${iss.keys.map((k) => JSON.stringify(k)).join(', ')}; the fields are ${POLICY_FIELDS.join(', ')}`
        : undefined,
  },
);
export type RepoPolicyInput = z.infer<typeof RepoPolicySchema>;

/** The fully resolved policy the gate enforces. */
export interface EffectivePolicy {
  protectedPaths: string[];
  /** Each entry is one layer's scope; a path must match a glob in EVERY entry. `[]` = no restriction. */
  allowedScopes: string[][];
  neverPromote: string[];
  allowLockfiles: boolean;
  maxDiffLines: number;
  maxDiffFiles: number;
  maxFileBytes: number;
  /** Program base names; `['*']` = any. */
  commands: string[];
  commandTimeoutSeconds: number;
  maxOutputBytes: number;
  promotion: PromotionMode;
  forbidSelfApproval: boolean;
  approvalTimeoutMinutes: number;
  /** Which layers set each field (`default` when none did). */
  sources?: Partial<Record<PolicyField, string[]>>;
}

/** Paths no agent may change. Always part of every effective policy (a floor nobody removes). */
export const DEFAULT_PROTECTED_PATHS: readonly string[] = Object.freeze([
  '.git/**',
  '.gitmodules',
  '.github/workflows/**',
  '.github/actions/**',
  '.github/CODEOWNERS',
  '/CODEOWNERS',
  'docs/CODEOWNERS',
  '.gitlab-ci.yml',
  '.circleci/**',
  '.steward/**',
  '**/.env',
  '**/.env.*',
  '**/.npmrc',
  '**/.netrc',
  '**/.pypirc',
  '**/*.pem',
  '**/*.key',
  '**/*.p12',
  '**/*.pfx',
  '**/id_rsa*',
  '**/id_dsa*',
  '**/id_ecdsa*',
  '**/id_ed25519*',
]);

/** Runtime artifacts, logs, build output, dependencies, caches, OS junk. Always included (a floor). */
export const DEFAULT_NEVER_PROMOTE: readonly string[] = Object.freeze([
  '**/*.log',
  '**/node_modules/**',
  '**/dist/**',
  '**/build/**',
  '**/coverage/**',
  '**/.nyc_output/**',
  '**/__pycache__/**',
  '**/*.pyc',
  '**/*.pyo',
  '**/.pytest_cache/**',
  '**/.mypy_cache/**',
  '**/.ruff_cache/**',
  '**/.tox/**',
  '**/.venv/**',
  '**/.DS_Store',
  '**/Thumbs.db',
  '**/*.tmp',
  '**/*.swp',
  '**/*.swo',
  '**/*.orig',
  '**/*.rej',
  '**/.cache/**',
  '**/target/**',
  '**/.next/**',
  '**/.turbo/**',
  '**/*.tsbuildinfo',
  '**/*.sqlite',
  '**/*.sqlite3',
  '**/*.db',
  '**/.steward-run/**',
]);

/** Lock files (by base name, any directory): changed only when `allowLockfiles`. */
export const LOCKFILE_PATTERNS: readonly string[] = Object.freeze([
  'package-lock.json',
  'npm-shrinkwrap.json',
  'yarn.lock',
  'pnpm-lock.yaml',
  'bun.lock',
  'bun.lockb',
  'deno.lock',
  'Cargo.lock',
  'poetry.lock',
  'Pipfile.lock',
  'pdm.lock',
  'uv.lock',
  'Gemfile.lock',
  'go.sum',
  'composer.lock',
  'mix.lock',
  'pubspec.lock',
  'Podfile.lock',
  'packages.lock.json',
  'Package.resolved',
  'flake.lock',
  'gradle.lockfile',
]);

/**
 * Programs the sandbox runs by default: shell and text tools, git, and the common build/test
 * tool chains. No network clients (curl, wget, ssh). NOTE: allowing `sh`/`bash` means the list
 * governs the program invoked directly; the sandbox (no network, no credentials) is the boundary.
 */
export const DEFAULT_COMMANDS: readonly string[] = Object.freeze([
  'awk', 'bash', 'cargo', 'cat', 'cp', 'cut', 'diff', 'echo', 'false', 'find', 'git', 'go', 'grep',
  'head', 'jq', 'ls', 'make', 'mkdir', 'mv', 'node', 'npm', 'npx', 'pnpm', 'printf', 'pwd', 'pytest',
  'python3', 'rg', 'rm', 'sed', 'sh', 'sort', 'tail', 'test', 'touch', 'tr', 'true', 'tsc', 'uniq',
  'wc', 'xargs', 'yarn',
]);

function freezePolicy(p: EffectivePolicy): EffectivePolicy {
  Object.freeze(p.protectedPaths);
  Object.freeze(p.neverPromote);
  Object.freeze(p.commands);
  for (const s of p.allowedScopes) Object.freeze(s);
  Object.freeze(p.allowedScopes);
  return Object.freeze(p);
}

export const DEFAULT_POLICY: EffectivePolicy = freezePolicy({
  protectedPaths: [...DEFAULT_PROTECTED_PATHS],
  allowedScopes: [],
  neverPromote: [...DEFAULT_NEVER_PROMOTE],
  allowLockfiles: false,
  maxDiffLines: 2000,
  maxDiffFiles: 50,
  maxFileBytes: 1_000_000,
  commands: [...DEFAULT_COMMANDS],
  commandTimeoutSeconds: 600,
  maxOutputBytes: 200_000,
  promotion: 'patch',
  forbidSelfApproval: true,
  approvalTimeoutMinutes: 1440,
});

const sortUniq = (xs: Iterable<string>): string[] => [...new Set(xs)].sort();
const NUMBER_FIELDS = ['maxDiffLines', 'maxDiffFiles', 'maxFileBytes', 'commandTimeoutSeconds', 'maxOutputBytes', 'approvalTimeoutMinutes'] as const;

interface NamedLayer {
  name: string;
  policy: RepoPolicyInput;
}

function mergeNamed(layers: NamedLayer[]): EffectivePolicy {
  const sources: Partial<Record<PolicyField, string[]>> = {};
  const setters = <F extends PolicyField>(f: F): Array<{ name: string; value: NonNullable<RepoPolicyInput[F]> }> => {
    const out: Array<{ name: string; value: NonNullable<RepoPolicyInput[F]> }> = [];
    for (const l of layers) {
      const v = l.policy[f];
      if (v !== undefined && v !== null) out.push({ name: l.name, value: v as NonNullable<RepoPolicyInput[F]> });
    }
    sources[f] = out.length > 0 ? out.map((s) => s.name) : ['default'];
    return out;
  };

  const protectedPaths = sortUniq([...DEFAULT_PROTECTED_PATHS, ...setters('protectedPaths').flatMap((s) => s.value)]);
  const neverPromote = sortUniq([...DEFAULT_NEVER_PROMOTE, ...setters('neverPromote').flatMap((s) => s.value)]);
  const scopeKeys = new Map<string, string[]>();
  for (const s of setters('allowedScope')) {
    const set = sortUniq(s.value);
    scopeKeys.set(JSON.stringify(set), set);
  }
  const allowedScopes = [...scopeKeys.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, v]) => v);

  const nums = {} as Record<(typeof NUMBER_FIELDS)[number], number>;
  for (const f of NUMBER_FIELDS) {
    const s = setters(f);
    nums[f] = s.length > 0 ? Math.min(...s.map((x) => x.value as number)) : DEFAULT_POLICY[f];
  }

  const lock = setters('allowLockfiles');
  const allowLockfiles = lock.length > 0 ? lock.every((s) => s.value === true) : DEFAULT_POLICY.allowLockfiles;

  const cmdSetters = setters('commands');
  let commands: string[];
  if (cmdSetters.length === 0) commands = [...DEFAULT_POLICY.commands];
  else {
    const restricting = cmdSetters.filter((s) => !s.value.includes('*'));
    if (restricting.length === 0) commands = ['*'];
    else {
      let acc = new Set(restricting[0]!.value);
      for (const r of restricting.slice(1)) acc = new Set(r.value.filter((c) => acc.has(c)));
      commands = sortUniq(acc);
    }
  }

  const promo = setters('promotion');
  const promotion = promo.length > 0 ? PROMOTION_MODES[Math.min(...promo.map((p) => PROMOTION_MODES.indexOf(p.value)))]! : DEFAULT_POLICY.promotion;

  const selfApproval = setters('forbidSelfApproval');
  const forbidSelfApproval = selfApproval.length > 0 ? selfApproval.some((s) => s.value === true) : DEFAULT_POLICY.forbidSelfApproval;

  return {
    protectedPaths,
    allowedScopes,
    neverPromote,
    allowLockfiles,
    ...nums,
    commands,
    promotion,
    forbidSelfApproval,
    sources,
  };
}

/**
 * Deny-wins merge of policy layers; the order of the layers does not change the result (except
 * the layer names in `sources`):
 *  - protectedPaths, neverPromote: union (always including DEFAULT_PROTECTED_PATHS / DEFAULT_NEVER_PROMOTE);
 *  - allowedScope: every layer that sets one must allow the path (kept as `allowedScopes`);
 *  - numbers: minimum; allowLockfiles: AND; forbidSelfApproval: OR;
 *  - commands: intersection of the layers that list commands (`*` is the identity);
 *  - promotion: the strictest (patch, then draft-pr-after-approval, then draft-pr).
 * A field no layer sets takes DEFAULT_POLICY's value. So a layer CAN loosen a default that no
 * other layer sets: to cap every layer by the operator's settings (or the defaults), pass
 * `withDefaults(global)` as one of the layers, or call `resolvePolicy`.
 */
export function mergePolicies(...layers: RepoPolicyInput[]): EffectivePolicy {
  return mergeNamed(layers.map((policy, i) => ({ name: `layer ${i + 1}`, policy })));
}

/**
 * The operator's global layer made complete: every field the operator did not set takes the
 * default. As a layer of `mergePolicies`, it caps every other layer: they can only tighten it.
 * The operator (and only the operator) may loosen a default here, e.g. raise maxDiffLines.
 */
export function withDefaults(global: RepoPolicyInput = {}): RepoPolicyInput {
  return {
    protectedPaths: sortUniq([...DEFAULT_PROTECTED_PATHS, ...(global.protectedPaths ?? [])]),
    ...(global.allowedScope ? { allowedScope: [...global.allowedScope] } : {}),
    neverPromote: sortUniq([...DEFAULT_NEVER_PROMOTE, ...(global.neverPromote ?? [])]),
    allowLockfiles: global.allowLockfiles ?? DEFAULT_POLICY.allowLockfiles,
    maxDiffLines: global.maxDiffLines ?? DEFAULT_POLICY.maxDiffLines,
    maxDiffFiles: global.maxDiffFiles ?? DEFAULT_POLICY.maxDiffFiles,
    maxFileBytes: global.maxFileBytes ?? DEFAULT_POLICY.maxFileBytes,
    commands: [...(global.commands ?? DEFAULT_POLICY.commands)],
    commandTimeoutSeconds: global.commandTimeoutSeconds ?? DEFAULT_POLICY.commandTimeoutSeconds,
    maxOutputBytes: global.maxOutputBytes ?? DEFAULT_POLICY.maxOutputBytes,
    promotion: global.promotion ?? DEFAULT_POLICY.promotion,
    forbidSelfApproval: global.forbidSelfApproval ?? DEFAULT_POLICY.forbidSelfApproval,
    approvalTimeoutMinutes: global.approvalTimeoutMinutes ?? DEFAULT_POLICY.approvalTimeoutMinutes,
  };
}

/**
 * The three layers in their order of authority: the operator's global config (defaults fill
 * what it leaves unset), then the repository's registration, then the repository's own policy
 * file. The registration and the file can only tighten. `sources` names `default`, `global`,
 * `registration`, `repo`.
 */
export function resolvePolicy(layers: { global?: RepoPolicyInput; registration?: RepoPolicyInput; repo?: RepoPolicyInput }): EffectivePolicy {
  const global = layers.global ?? {};
  const full = withDefaults(global);
  // split the complete operator layer into what the operator set and what came from the defaults
  const fromDefaults: RepoPolicyInput = {};
  const fromGlobal: RepoPolicyInput = {};
  for (const f of POLICY_FIELDS) {
    const target = global[f] !== undefined ? fromGlobal : fromDefaults;
    if (full[f] !== undefined) (target as Record<string, unknown>)[f] = full[f];
  }
  return mergeNamed([
    { name: 'default', policy: fromDefaults },
    { name: 'global', policy: fromGlobal },
    { name: 'registration', policy: layers.registration ?? {} },
    { name: 'repo', policy: layers.repo ?? {} },
  ].filter((l) => Object.keys(l.policy).length > 0));
}

/** Parse one layer; the error names every problem (`<source>: field: message; ...`). */
export function parseRepoPolicy(input: unknown, source = 'policy'): { ok: true; policy: RepoPolicyInput } | { ok: false; error: string } {
  const r = RepoPolicySchema.safeParse(input);
  if (r.success) return { ok: true, policy: r.data };
  const problems = r.error.issues.map((i) => `${i.path.length > 0 ? `${i.path.map(String).join('.')}: ` : ''}${i.message}`);
  return { ok: false, error: `${source} is invalid: ${problems.join('; ')}` };
}

/** Parse the JSON text of a policy file such as `.steward/policy.json`. */
export function parseRepoPolicyJson(text: string, source = '.steward/policy.json'): { ok: true; policy: RepoPolicyInput } | { ok: false; error: string } {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    return { ok: false, error: `${source} is not valid JSON: ${(err as Error).message}` };
  }
  return parseRepoPolicy(raw, source);
}

/** May the sandbox run `program` (a base name or a path; judged by its base name)? */
export function commandAllowed(policy: Pick<EffectivePolicy, 'commands'>, program: string): boolean {
  const base = program.slice(program.lastIndexOf('/') + 1);
  if (base === '' || base === '.' || base === '..') return false;
  return policy.commands.includes('*') || policy.commands.includes(base);
}

/** Is `mode` as strict as the policy's promotion or stricter? */
export function promotionAllowed(policy: Pick<EffectivePolicy, 'promotion'>, mode: PromotionMode): boolean {
  return PROMOTION_MODES.indexOf(mode) <= PROMOTION_MODES.indexOf(policy.promotion);
}

/**
 * The policy a repository change is held to. The operator's layers are the global file
 * (`STEWARD_REPO_POLICY`) and the repository's registration (both written by the operator):
 * merged deny-wins, the defaults filling what neither sets, so a registration may set what the
 * global file leaves open but never loosen what it sets. The repository's own
 * `.steward/policy.json` (written by whoever commits to the repository) is merged against
 * that result made complete, so it can only tighten.
 */
export function changePolicy(layers: { global?: RepoPolicyInput; registration?: RepoPolicyInput; repo?: RepoPolicyInput }): EffectivePolicy {
  const operator = mergeNamed([
    { name: 'global', policy: layers.global ?? {} },
    { name: 'registration', policy: layers.registration ?? {} },
  ]);
  if (!layers.repo || Object.keys(layers.repo).length === 0) return operator;
  const ceiling: RepoPolicyInput = {
    protectedPaths: operator.protectedPaths,
    neverPromote: operator.neverPromote,
    allowLockfiles: operator.allowLockfiles,
    maxDiffLines: operator.maxDiffLines,
    maxDiffFiles: operator.maxDiffFiles,
    maxFileBytes: operator.maxFileBytes,
    commands: operator.commands,
    commandTimeoutSeconds: operator.commandTimeoutSeconds,
    maxOutputBytes: operator.maxOutputBytes,
    promotion: operator.promotion,
    forbidSelfApproval: operator.forbidSelfApproval,
    approvalTimeoutMinutes: operator.approvalTimeoutMinutes,
  };
  return mergeNamed([
    { name: 'operator', policy: ceiling },
    ...operator.allowedScopes.map((scope, i) => ({ name: `operator scope ${i + 1}`, policy: { allowedScope: scope } })),
    { name: 'repo', policy: layers.repo },
  ]);
}
