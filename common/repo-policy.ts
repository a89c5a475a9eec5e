/**
 * Repository change policy: what a coding agent's patch may touch before Steward promotes it
 * (patch artifact or draft PR), one module per concern:
 *  - repo-policy/globs.ts: gitignore-like globs, mapped onto minimatch 11 (no RegExp matching);
 *  - repo-policy/policy.ts: the policy layers, their schema and the deny-wins merge;
 *  - repo-policy/diff.ts: `git diff` output read into per-file records (hunks by jsdiff);
 *  - repo-policy/secrets.ts: secrets in added lines;
 *  - repo-policy/gate.ts: the gate's verdict on a patch.
 * No I/O in any of them (eslint.config.js: no Node built-ins; packages: zod, minimatch, diff).
 */
export * from './repo-policy/globs.js';
export * from './repo-policy/policy.js';
export * from './repo-policy/diff.js';
export * from './repo-policy/secrets.js';
export * from './repo-policy/gate.js';
