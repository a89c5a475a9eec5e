/**
 * Repository change policy: what a coding agent's patch may touch before Steward promotes it
 * (patch artifact or draft PR), one module per concern:
 *  - policy/globs.ts: gitignore-like globs, mapped onto minimatch 11 (no RegExp matching);
 *  - policy/policy.ts: the policy layers, their schema and the deny-wins merge;
 *  - policy/diff.ts: `git diff` output read into per-file records (hunks by jsdiff);
 *  - policy/secrets.ts: secrets in added lines;
 *  - policy/gate.ts: the gate's verdict on a patch.
 * No I/O in any of them (eslint.config.js: no Node built-ins; packages: zod, minimatch, diff).
 */
export * from './policy/globs.js';
export * from './policy/policy.js';
export * from './policy/diff.js';
export * from './policy/secrets.js';
export * from './policy/gate.js';
