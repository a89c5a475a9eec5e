/**
 * Repository change policy: glob semantics, deny-wins merging, diff parsing on real
 * `git diff --binary --full-index` output, every gate rule, secret detection, and properties
 * (the parser never throws, merging never loosens, matching stays fast on adversarial input).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, unlinkSync, writeFileSync, chmodSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import { globToRegExp } from '../helpers/glob-oracle.js';
import {
  checkPatch,
  checkPatchPolicy,
  commandAllowed,
  DEFAULT_COMMANDS,
  DEFAULT_NEVER_PROMOTE,
  DEFAULT_POLICY,
  DEFAULT_PROTECTED_PATHS,
  detectSecrets,
  matchesGlob,
  mergePolicies,
  parseRepoPolicy,
  parseRepoPolicyJson,
  parseUnifiedDiff,
  pathViolations,
  PROMOTION_MODES,
  promotionAllowed,
  RepoPolicySchema,
  resolvePolicy,
  validateGlob,
  withDefaults,
  type DiffFile,
  type EffectivePolicy,
  type PolicyRule,
  type RepoPolicyInput,
} from '../../common/changes/policy.js';

// ---------------------------------------------------------------------------------------------
// helpers

/** A DiffFile for rule tests (a modified text file by default). */
function file(p: string, over: Partial<DiffFile> = {}): DiffFile {
  const addedLines = over.addedLines ?? ['x'];
  return {
    path: p,
    status: 'modified',
    binary: false,
    additions: addedLines.length,
    deletions: 0,
    addedLines,
    addedLineNumbers: addedLines.map((_, i) => i + 1),
    addedBytes: addedLines.reduce((n, l) => n + Buffer.byteLength(l) + 1, 0),
    isSymlink: false,
    ...over,
  };
}

const rules = (files: DiffFile[], policy: EffectivePolicy = DEFAULT_POLICY, opts?: Parameters<typeof checkPatchPolicy>[2]): PolicyRule[] =>
  checkPatchPolicy(files, policy, opts).violations.map((v) => v.rule);

/** Random base62, so no literal credential-shaped string sits in this file. */
function rnd(n: number, alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789'): string {
  let s = '';
  let x = 0x9e3779b9 ^ n;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x ^ (x >>> 15), 0x85ebca6b) + i * 0x27d4eb2f) | 0;
    s += alphabet[Math.abs(x) % alphabet.length];
  }
  return s;
}

const GIT_ENV = { ...process.env, GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null', GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@example.com', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@example.com', LC_ALL: 'C' };
function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', ['-c', 'core.quotePath=true', '-c', 'core.autocrlf=false', ...args], { cwd, env: GIT_ENV, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
}
function gitDiff(cwd: string, ...extra: string[]): string {
  git(cwd, 'add', '-A');
  return git(cwd, 'diff', '--cached', '--binary', '--full-index', '--no-color', '--no-ext-diff', ...extra);
}
/** git's own count per path: `--numstat -z` (renames/copies: new path). */
function numstat(cwd: string, ...extra: string[]): Map<string, { add: number | null; del: number | null; old?: string }> {
  const out = git(cwd, 'diff', '--cached', '--numstat', '-z', ...extra);
  const parts = out.split('\0');
  const res = new Map<string, { add: number | null; del: number | null; old?: string }>();
  for (let i = 0; i < parts.length; ) {
    const head = parts[i++]!;
    if (head === '') continue;
    const t1 = head.indexOf('\t');
    const t2 = head.indexOf('\t', t1 + 1);
    const [a, d, p] = [head.slice(0, t1), head.slice(t1 + 1, t2), head.slice(t2 + 1)];
    const add = a === '-' ? null : Number(a);
    const del = d === '-' ? null : Number(d);
    if (p === '') {
      const old = parts[i++]!;
      const nu = parts[i++]!;
      res.set(nu, { add, del, old });
    } else res.set(p!, { add, del });
  }
  return res;
}
function newRepo(): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'steward-policy-'));
  git(dir, 'init', '-q', '-b', 'main');
  return dir;
}
function commitAll(dir: string): void {
  git(dir, 'add', '-A');
  git(dir, 'commit', '-q', '--allow-empty', '-m', 'base');
}
function write(dir: string, p: string, content: string | Uint8Array): void {
  mkdirSync(path.dirname(path.join(dir, p)), { recursive: true });
  writeFileSync(path.join(dir, p), content);
}

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------------------------
describe('globs', () => {
  const table: Array<[string, string, boolean]> = [
    // basename patterns match at any depth
    ['*.log', 'a.log', true],
    ['*.log', 'a/b/c.log', true],
    ['*.log', 'a/b/c.log.txt', false],
    ['*.log', '.log', true],
    ['node_modules', 'node_modules/x/y.js', true],
    ['node_modules', 'a/node_modules/y.js', true],
    ['node_modules', 'a/node_modules_x/y.js', false],
    ['id_rsa*', 'home/.ssh/id_rsa.pub', true],
    // a slash anywhere but the end anchors at the root
    ['src/*.ts', 'src/a.ts', true],
    ['src/*.ts', 'x/src/a.ts', false],
    ['src/*.ts', 'src/a/b.ts', false],
    ['/README.md', 'README.md', true],
    ['/README.md', 'docs/README.md', false],
    ['/CODEOWNERS', 'CODEOWNERS', true],
    ['/CODEOWNERS', 'x/CODEOWNERS', false],
    // a directory match covers what is below it
    ['src', 'src/a/b.ts', true],
    ['/src', 'src/a/b.ts', true],
    ['/src', 'lib/src/b.ts', false],
    ['docs/api', 'docs/api/x.md', true],
    ['docs/api', 'docs/apix/x.md', false],
    // trailing slash: directories only
    ['build/', 'build/x.js', true],
    ['build/', 'a/build/x.js', true],
    ['build/', 'build', false],
    ['/build/', 'a/build/x.js', false],
    // ** segments
    ['**', 'anything/at/all', true],
    ['**/x', 'x', true],
    ['**/x', 'a/b/x', true],
    ['**/.env', '.env', true],
    ['**/.env', 'deep/dir/.env', true],
    ['**/.env', 'deep/dir/.envrc', false],
    ['**/.env.*', 'a/.env.local', true],
    ['a/**/b', 'a/b', true],
    ['a/**/b', 'a/x/y/b', true],
    ['a/**/b', 'a/x/y/bb', false],
    ['a/**', 'a/x', true],
    ['a/**', 'a/x/y', true],
    ['a/**', 'a', false],
    ['a/**', 'ab/x', false],
    ['.github/workflows/**', '.github/workflows/ci.yml', true],
    ['.github/workflows/**', '.github/workflowsx/ci.yml', false],
    ['**/dist/**', 'dist/app.js', true],
    ['**/dist/**', 'packages/x/dist/app.js', true],
    ['**/dist/**', 'distribution/app.js', false],
    ['a**b', 'axxb', true],
    ['a**b', 'ax/xb', false],
    // * and ? never cross a slash, but match dot files
    ['*', 'a', true],
    ['*', '.hidden', true],
    ['src/*', 'src/.x', true],
    ['src/?.ts', 'src/a.ts', true],
    ['src/?.ts', 'src/ab.ts', false],
    ['a?b', 'a/b', false],
    // braces
    ['{src,test}/**/*.ts', 'src/a/b.ts', true],
    ['{src,test}/**/*.ts', 'test/b.ts', true],
    ['{src,test}/**/*.ts', 'lib/b.ts', false],
    ['*.{js,ts}', 'x/y.ts', true],
    ['*.{js,ts}', 'x/y.rs', false],
    ['{a,b{c,d}}.txt', 'bd.txt', true],
    ['{a,b{c,d}}.txt', 'b.txt', false],
    ['{*.log,tmp/**}', 'x/y.log', true],
    ['{*.log,tmp/**}', 'tmp/z', true],
    ['{*.log,tmp/**}', 'x/tmp/z', false],
    ['{a}', '{a}', true],
    ['{a}', 'a', false],
    ['{', '{', true],
    // character classes
    ['[abc].txt', 'b.txt', true],
    ['[abc].txt', 'd.txt', false],
    ['[a-c]x', 'bx', true],
    ['[!a-c]x', 'dx', true],
    ['[!a-c]x', 'ax', false],
    ['[^a-c]x', 'ax', false],
    ['f[[:digit:]]', 'f7', true],
    ['f[[:digit:]]', 'fx', false],
    ['[]]', ']', true],
    ['a[!x]b', 'a/b', false],
    ['[ab', '[ab', true],
    ['x[/]y', 'x[/]y', true],
    // escapes
    ['\\*.txt', '*.txt', true],
    ['\\*.txt', 'a.txt', false],
    ['a\\?', 'a?', true],
    // non-ASCII
    ['é*', 'dir/été', true],
    ['??', 'éé', true],
    // case-sensitive by default
    ['*.LOG', 'a.log', false],
    // nothing
    ['/', 'a', false],
    ['//', 'a', false],
  ];
  it('follow the documented semantics', () => {
    for (const [glob, p, want] of table) {
      assert.equal(matchesGlob(p, glob), want, `matchesGlob(${JSON.stringify(p)}, ${JSON.stringify(glob)})`);
      assert.equal(globToRegExp(glob).test(p), want, `globToRegExp(${JSON.stringify(glob)}).test(${JSON.stringify(p)})`);
    }
  });

  it('match case-insensitively on request', () => {
    assert.equal(matchesGlob('.GitHub/Workflows/ci.yml', '.github/workflows/**', { nocase: true }), true);
    assert.equal(matchesGlob('.GitHub/Workflows/ci.yml', '.github/workflows/**'), false);
    assert.equal(matchesGlob('KEYS/ID_RSA', '**/id_rsa*', { nocase: true }), true);
    assert.equal(matchesGlob('X.PEM', '[a-z].pem', { nocase: true }), true);
    assert.equal(globToRegExp('.github/**', { nocase: true }).test('.GITHUB/x'), true);
  });

  it('map the rules onto minimatch where its defaults differ', () => {
    // a final `**` keeps "below" after `/**` is appended (minimatch merges adjacent `**`)
    assert.equal(matchesGlob('a', '**/'), false);
    assert.equal(matchesGlob('a/b', '**/'), true);
    assert.equal(matchesGlob('a/b', 'a/**/'), false);
    assert.equal(matchesGlob('a/b/c', 'a/**/'), true);
    // no extglobs, negation, comments or `..` resolution: literal
    assert.equal(matchesGlob('@(a|b)', '@(a|b)'), true);
    assert.equal(matchesGlob('a', '@(a|b)'), false);
    assert.equal(matchesGlob('!x', '!x'), true);
    assert.equal(matchesGlob('y', '!x'), false);
    assert.equal(matchesGlob('#x', '#x'), true);
    assert.equal(matchesGlob('b', 'a/../b'), false);
    // more `**` than minimatch walks by default (200): still a match, not a silent miss
    const deep = 'a/**/'.repeat(202) + 'b';
    assert.ok(deep.length <= 1024);
    assert.equal(matchesGlob(`${'a/'.repeat(202)}b`, deep), true);
    assert.equal(matchesGlob(`${'A/'.repeat(202)}B`, deep, { nocase: true }), true);
    // bash brace sequences, counted like any alternative
    assert.equal(matchesGlob('x/file3.txt', 'file{1..3}.txt'), true);
    assert.equal(matchesGlob('x/file4.txt', 'file{1..3}.txt'), false);
    assert.throws(() => validateGlob('{1..257}'), /too many alternatives/);
    // POSIX classes follow Unicode
    assert.equal(matchesGlob('x/é', '[[:alpha:]]'), true);
    assert.equal(globToRegExp('[[:alpha:]]').test('x/é'), true);
    // a `/` separates even after `\`
    assert.equal(matchesGlob('a\\/b', 'a\\/b'), true);
    // only normalized repository paths match
    for (const p of ['', '/a', 'a/', 'a//b', './a', 'a/./b', 'a/../b', '..']) {
      assert.equal(matchesGlob(p, '**'), false, JSON.stringify(p));
      assert.equal(globToRegExp('**').test(p), false, JSON.stringify(p));
    }
  });

  it('reject globs that expand too far', () => {
    assert.throws(() => validateGlob('{a,b}'.repeat(9)), /too many alternatives/);
    assert.doesNotThrow(() => validateGlob('{a,b}'.repeat(8)));
    assert.throws(() => validateGlob('x'.repeat(2000)), /at most/);
  });

  it('agree with their RegExp form (property)', () => {
    const atom = fc.constantFrom('a', 'b', '.', '/', '*', '**', '?', '[ab]', '[!a]', '{a,b}', '{a/b,c}', '\\*', 'é', '**/', '/**/');
    const globArb = fc.array(atom, { minLength: 1, maxLength: 7 }).map((xs) => xs.join(''));
    const pathArb = fc.array(fc.constantFrom('a', 'b', '.', '/', '*', 'é', 'ab', 'a/b'), { minLength: 1, maxLength: 10 }).map((xs) => xs.join(''));
    fc.assert(
      fc.property(globArb, pathArb, fc.boolean(), (g, p, nocase) => {
        assert.equal(matchesGlob(p, g, { nocase }), globToRegExp(g, { nocase }).test(p), `${g} vs ${p}`);
      }),
      { numRuns: 4000 },
    );
  });

  it('stay fast on adversarial input (bounded time, property)', () => {
    const hard: Array<[string, string]> = [
      ['*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b', 'a'.repeat(5000)],
      ['**/**/**/**/**/**/**/**/**/**/x', 'a/'.repeat(2500)],
      ['**/*a*a*a*a*a*a*a*a*/**/y', `${'aa/'.repeat(1500)}z`],
      ['{*a*a*a*b,*a*a*a*c,*a*a*a*d,*a*a*a*e}', 'a'.repeat(5000)],
      ['?'.repeat(500), 'a'.repeat(5000)],
    ];
    for (const [g, p] of hard) {
      const t = performance.now();
      matchesGlob(p, g);
      matchesGlob(p, g, { nocase: true });
      const ms = performance.now() - t;
      assert.ok(ms < 500, `${g.slice(0, 30)}… took ${ms.toFixed(0)} ms`);
    }
    fc.assert(
      fc.property(
        fc.array(fc.constantFrom('*', '**', '?', 'a', '/', '**/', '[a-z]', '{a,*}'), { minLength: 1, maxLength: 40 }).map((x) => x.join('')),
        fc.integer({ min: 500, max: 3000 }),
        fc.constantFrom('a', 'a/', 'ab', 'aa/b'),
        (g, n, unit) => {
          const p = unit.repeat(Math.ceil(n / unit.length)).slice(0, n) + 'c';
          const t = performance.now();
          try {
            matchesGlob(p, g);
          } catch (err) {
            assert.match((err as Error).message, /too many alternatives|at most/);
          }
          const ms = performance.now() - t;
          assert.ok(ms < 500, `${g} on ${n} chars took ${ms.toFixed(0)} ms`);
        },
      ),
      { numRuns: 200 },
    );
  });
});

// ---------------------------------------------------------------------------------------------
describe('policy schema', () => {
  it('accepts a full layer and an empty one', () => {
    const full: RepoPolicyInput = {
      $schema: 'https://example.com/steward-policy.json',
      protectedPaths: ['secrets/**'],
      allowedScope: ['src/**', 'test/**'],
      neverPromote: ['*.bak'],
      allowLockfiles: true,
      maxDiffLines: 100,
      maxDiffFiles: 5,
      maxFileBytes: 1000,
      commands: ['git', 'npm'],
      commandTimeoutSeconds: 60,
      maxOutputBytes: 1000,
      promotion: 'draft-pr-after-approval',
      forbidSelfApproval: true,
      approvalTimeoutMinutes: 30,
    };
    assert.deepEqual(RepoPolicySchema.parse(full), full);
    assert.deepEqual(RepoPolicySchema.parse({}), {});
  });

  it('names unknown fields and bad values clearly', () => {
    const r = parseRepoPolicy({ protectedPath: ['x'], maxDiffLines: -1, commands: ['/usr/bin/curl'], promotion: 'merge' }, '.steward/policy.json');
    assert.equal(r.ok, false);
    if (r.ok) return;
    assert.match(r.error, /^\.steward\/policy\.json is invalid: /);
    assert.match(r.error, /unknown policy field "protectedPath"; the fields are protectedPaths, allowedScope/);
    assert.match(r.error, /maxDiffLines: expected 0 or more/);
    assert.match(r.error, /commands\.0: a command is a program base name/);
    assert.match(r.error, /promotion: expected one of patch, draft-pr-after-approval, draft-pr/);
    const g = parseRepoPolicy({ protectedPaths: ['{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}'] });
    assert.ok(!g.ok && /invalid glob .*too many alternatives/.test(g.error));
    const e = parseRepoPolicy({ allowedScope: [''] });
    assert.ok(!e.ok && /a glob is not empty/.test(e.error));
  });

  it('parses JSON text and reports bad JSON', () => {
    assert.deepEqual(parseRepoPolicyJson('{"maxDiffLines": 10}'), { ok: true, policy: { maxDiffLines: 10 } });
    const r = parseRepoPolicyJson('{nope');
    assert.ok(!r.ok && /^\.steward\/policy\.json is not valid JSON/.test(r.error));
  });
});

// ---------------------------------------------------------------------------------------------
describe('default policy', () => {
  it('protects the repository machinery and credentials, and holds the documented limits', () => {
    for (const p of ['.git/config', '.github/workflows/ci.yml', '.steward/policy.json', '.env', 'app/.env', 'app/.env.production', 'certs/server.pem', 'home/.ssh/id_rsa', '.gitmodules']) {
      assert.ok(pathViolations(p, DEFAULT_POLICY).some((v) => v.rule === 'protected-path'), p);
    }
    for (const p of ['logs/x.log', 'node_modules/a/index.js', 'dist/app.js', 'build/out.o', 'coverage/lcov.info', 'a/__pycache__/m.cpython-312.pyc', 'x.pyc', '.DS_Store', 'a.tmp', '.a.swp', '.cache/x', 'target/debug/app', 'data.sqlite', 'app.db', '.steward-run/out']) {
      assert.ok(pathViolations(p, DEFAULT_POLICY).some((v) => v.rule === 'never-promote'), p);
    }
    for (const p of ['package-lock.json', 'web/yarn.lock', 'pnpm-lock.yaml', 'Cargo.lock', 'poetry.lock', 'Gemfile.lock', 'go.sum', 'composer.lock']) {
      assert.deepEqual(pathViolations(p, DEFAULT_POLICY).map((v) => v.rule), ['lockfile'], p);
    }
    for (const p of ['src/index.ts', 'README.md', '.github/dependabot.yml', 'docs/env.md', 'src/build.ts']) assert.deepEqual(pathViolations(p, DEFAULT_POLICY), [], p);
    assert.equal(DEFAULT_POLICY.maxDiffLines, 2000);
    assert.equal(DEFAULT_POLICY.maxDiffFiles, 50);
    assert.equal(DEFAULT_POLICY.maxFileBytes, 1_000_000);
    assert.equal(DEFAULT_POLICY.promotion, 'patch');
    assert.equal(DEFAULT_POLICY.forbidSelfApproval, true);
    assert.equal(DEFAULT_POLICY.allowLockfiles, false);
    for (const c of ['git', 'sh', 'bash', 'ls', 'cat', 'grep', 'sed', 'awk', 'find', 'diff', 'node', 'npm', 'npx', 'python3', 'make']) assert.ok(commandAllowed(DEFAULT_POLICY, c), c);
    for (const c of ['curl', 'wget', 'ssh', 'sudo']) assert.ok(!commandAllowed(DEFAULT_POLICY, c), c);
    assert.ok(commandAllowed(DEFAULT_POLICY, '/usr/bin/git'));
    assert.ok(Object.isFrozen(DEFAULT_POLICY) && Object.isFrozen(DEFAULT_POLICY.protectedPaths));
  });
});

// ---------------------------------------------------------------------------------------------
describe('merging policies (deny wins)', () => {
  it('unions protected and never-promote lists and keeps the default floor', () => {
    const m = mergePolicies({ protectedPaths: ['a/**'] }, { protectedPaths: ['b/**'], neverPromote: ['*.bak'] });
    for (const g of ['a/**', 'b/**', ...DEFAULT_PROTECTED_PATHS]) assert.ok(m.protectedPaths.includes(g), g);
    for (const g of ['*.bak', ...DEFAULT_NEVER_PROMOTE]) assert.ok(m.neverPromote.includes(g), g);
    // an empty list removes nothing
    assert.ok(mergePolicies({ protectedPaths: [] }).protectedPaths.includes('.git/**'));
  });

  it('keeps every layer\'s scope: a path must be in all of them', () => {
    const m = mergePolicies({ allowedScope: ['src/**', 'docs/**'] }, {}, { allowedScope: ['src/**'] });
    assert.deepEqual(m.allowedScopes, [['docs/**', 'src/**'], ['src/**']]);
    assert.deepEqual(pathViolations('src/a.ts', m), []);
    assert.deepEqual(pathViolations('docs/a.md', m).map((v) => v.rule), ['outside-scope']);
    assert.deepEqual(mergePolicies({}).allowedScopes, []);
    assert.deepEqual(pathViolations('src/a.ts', mergePolicies({ allowedScope: [] })).map((v) => v.rule), ['outside-scope']);
  });

  it('takes minimum limits, AND of allowLockfiles, OR of forbidSelfApproval, the strictest promotion', () => {
    const m = mergePolicies(
      { maxDiffLines: 500, maxFileBytes: 10, allowLockfiles: true, forbidSelfApproval: false, promotion: 'draft-pr', approvalTimeoutMinutes: 60 },
      { maxDiffLines: 300, allowLockfiles: false, forbidSelfApproval: true, promotion: 'draft-pr-after-approval' },
      { maxDiffLines: 900, commandTimeoutSeconds: 5 },
    );
    assert.equal(m.maxDiffLines, 300);
    assert.equal(m.maxFileBytes, 10);
    assert.equal(m.maxDiffFiles, DEFAULT_POLICY.maxDiffFiles);
    assert.equal(m.commandTimeoutSeconds, 5);
    assert.equal(m.approvalTimeoutMinutes, 60);
    assert.equal(m.allowLockfiles, false);
    assert.equal(m.forbidSelfApproval, true);
    assert.equal(m.promotion, 'draft-pr-after-approval');
    assert.equal(mergePolicies({ promotion: 'draft-pr' }, { promotion: 'patch' }).promotion, 'patch');
    assert.equal(mergePolicies({ promotion: 'draft-pr' }).promotion, 'draft-pr');
    assert.equal(mergePolicies({ allowLockfiles: true }).allowLockfiles, true);
    assert.deepEqual(m.sources?.maxDiffLines, ['layer 1', 'layer 2', 'layer 3']);
    assert.deepEqual(m.sources?.maxDiffFiles, ['default']);
  });

  it('intersects command lists; "*" is the identity', () => {
    assert.deepEqual(mergePolicies({ commands: ['git', 'npm', 'make'] }, { commands: ['npm', 'git', 'cargo'] }).commands, ['git', 'npm']);
    assert.deepEqual(mergePolicies({ commands: ['*'] }, { commands: ['git'] }).commands, ['git']);
    assert.deepEqual(mergePolicies({ commands: ['*'] }).commands, ['*']);
    assert.deepEqual(mergePolicies({ commands: ['git'] }, { commands: ['npm'] }).commands, []);
    assert.deepEqual(mergePolicies({}).commands, [...DEFAULT_COMMANDS].sort());
    assert.ok(commandAllowed(mergePolicies({ commands: ['*'] }), 'anything'));
    assert.ok(!commandAllowed(mergePolicies({ commands: ['git'] }, { commands: ['npm'] }), 'git'));
  });

  it('a repository file cannot loosen the global protected paths or scope or raise limits', () => {
    const global: RepoPolicyInput = { protectedPaths: ['infra/**'], allowedScope: ['src/**', 'infra/**'], maxDiffLines: 400, commands: ['git', 'npm'], promotion: 'draft-pr-after-approval' };
    const repo: RepoPolicyInput = {
      protectedPaths: [],
      allowedScope: ['**'],
      maxDiffLines: 100_000,
      maxDiffFiles: 10_000,
      maxFileBytes: 1_000_000_000,
      allowLockfiles: true,
      commands: ['*', 'curl'],
      promotion: 'draft-pr',
      forbidSelfApproval: false,
      commandTimeoutSeconds: 86_400,
      approvalTimeoutMinutes: 43_200,
    };
    for (const p of [resolvePolicy({ global, repo }), resolvePolicy({ global, registration: {}, repo }), mergePolicies(withDefaults(global), {}, repo)]) {
      assert.ok(pathViolations('infra/main.tf', p).some((v) => v.rule === 'protected-path'));
      assert.ok(pathViolations('.github/workflows/x.yml', p).some((v) => v.rule === 'protected-path'));
      assert.deepEqual(pathViolations('docs/readme.md', p).map((v) => v.rule), ['outside-scope']);
      assert.equal(p.maxDiffLines, 400);
      assert.equal(p.maxDiffFiles, DEFAULT_POLICY.maxDiffFiles);
      assert.equal(p.maxFileBytes, DEFAULT_POLICY.maxFileBytes);
      assert.equal(p.commandTimeoutSeconds, DEFAULT_POLICY.commandTimeoutSeconds);
      assert.equal(p.approvalTimeoutMinutes, DEFAULT_POLICY.approvalTimeoutMinutes);
      assert.equal(p.allowLockfiles, false);
      assert.deepEqual(p.commands, ['git', 'npm']);
      assert.equal(p.promotion, 'draft-pr-after-approval');
      assert.equal(p.forbidSelfApproval, true);
    }
    // the operator (and only the operator) may loosen a default
    const loose = resolvePolicy({ global: { maxDiffLines: 9000, promotion: 'draft-pr', allowLockfiles: true }, repo: { maxDiffLines: 5000 } });
    assert.equal(loose.maxDiffLines, 5000);
    assert.equal(loose.promotion, 'draft-pr');
    assert.equal(loose.allowLockfiles, true);
    assert.equal(resolvePolicy({ registration: { promotion: 'draft-pr', maxDiffLines: 9000 } }).promotion, 'patch');
    assert.equal(resolvePolicy({ registration: { maxDiffLines: 9000 } }).maxDiffLines, 2000);
    const s = resolvePolicy({ global: { maxDiffLines: 10 }, registration: { maxDiffLines: 5 }, repo: { commands: ['git'] } }).sources;
    assert.deepEqual(s?.maxDiffLines, ['global', 'registration']);
    assert.deepEqual(s?.maxDiffFiles, ['default']);
    assert.deepEqual(s?.commands, ['default', 'repo']);
  });

  it('promotion and self-approval helpers', () => {
    const p = mergePolicies({ promotion: 'draft-pr-after-approval' });
    assert.ok(promotionAllowed(p, 'patch'));
    assert.ok(promotionAllowed(p, 'draft-pr-after-approval'));
    assert.ok(!promotionAllowed(p, 'draft-pr'));
  });

  // ---- properties ----
  const globPool = ['src/**', 'test/**', 'docs/**', '*.md', '**/*.ts', 'a/**', 'b', '**', 'secret/**', '*.lock', 'gen/*', '{src,lib}/**'];
  const pathPool = ['src/a.ts', 'src/x/b.ts', 'test/t.ts', 'docs/r.md', 'README.md', 'a/b/c', 'b/x', 'secret/k', 'lib/l.js', 'gen/out.js', 'x.lock', 'package-lock.json', '.github/workflows/ci.yml', 'dist/app.js', 'app.log'];
  const layerArb: fc.Arbitrary<RepoPolicyInput> = fc.record(
    {
      protectedPaths: fc.subarray(globPool),
      allowedScope: fc.subarray(globPool),
      neverPromote: fc.subarray(globPool, { maxLength: 3 }),
      allowLockfiles: fc.boolean(),
      maxDiffLines: fc.integer({ min: 0, max: 50 }),
      maxDiffFiles: fc.integer({ min: 0, max: 6 }),
      maxFileBytes: fc.integer({ min: 0, max: 100 }),
      commands: fc.subarray(['git', 'npm', 'make', 'sh', '*']),
      commandTimeoutSeconds: fc.integer({ min: 1, max: 100 }),
      maxOutputBytes: fc.integer({ min: 1, max: 100 }),
      promotion: fc.constantFrom(...PROMOTION_MODES),
      forbidSelfApproval: fc.boolean(),
      approvalTimeoutMinutes: fc.integer({ min: 1, max: 100 }),
    },
    { requiredKeys: [] },
  );
  /** Every field at its loosest: merging a layer with it yields what that layer alone allows. */
  const LOOSEST: RepoPolicyInput = {
    allowLockfiles: true,
    maxDiffLines: 10_000_000,
    maxDiffFiles: 1_000_000,
    maxFileBytes: 1_000_000_000,
    commands: ['*'],
    commandTimeoutSeconds: 86_400,
    maxOutputBytes: 100_000_000,
    promotion: 'draft-pr',
    forbidSelfApproval: false,
    approvalTimeoutMinutes: 43_200,
  };
  const filesArb = fc
    .array(fc.record({ p: fc.constantFrom(...pathPool), lines: fc.integer({ min: 0, max: 20 }), del: fc.integer({ min: 0, max: 20 }), status: fc.constantFrom('modified', 'added', 'deleted') as fc.Arbitrary<DiffFile['status']> }), { maxLength: 6 })
    .map((xs) => xs.map((x) => file(x.p, { status: x.status, addedLines: Array.from({ length: x.lines }, (_, i) => `line ${i}`), deletions: x.del })));
  const strip = (p: EffectivePolicy): Omit<EffectivePolicy, 'sources'> => {
    const { sources: _s, ...rest } = p;
    return rest;
  };

  it('never loosens: whatever the merged policy allows, every layer alone allows (property)', () => {
    fc.assert(
      fc.property(fc.array(layerArb, { minLength: 1, maxLength: 4 }), filesArb, fc.constantFrom('git', 'npm', 'make', 'sh', 'curl'), fc.constantFrom(...PROMOTION_MODES), (layers, files, cmd, mode) => {
        const merged = mergePolicies(...layers);
        const mergedOk = checkPatchPolicy(files, merged).ok;
        for (const layer of layers) {
          const alone = mergePolicies(layer, LOOSEST);
          if (mergedOk) assert.ok(checkPatchPolicy(files, alone).ok, 'a patch the merged policy passes fails a layer');
          for (const p of pathPool) {
            if (pathViolations(p, merged).length === 0) assert.deepEqual(pathViolations(p, alone), [], p);
            if (pathViolations(p, merged, 'deleted').length === 0) assert.deepEqual(pathViolations(p, alone, 'deleted'), [], p);
          }
          if (commandAllowed(merged, cmd)) assert.ok(commandAllowed(alone, cmd), cmd);
          if (promotionAllowed(merged, mode)) assert.ok(promotionAllowed(alone, mode), mode);
          for (const f of ['maxDiffLines', 'maxDiffFiles', 'maxFileBytes', 'commandTimeoutSeconds', 'maxOutputBytes', 'approvalTimeoutMinutes'] as const) {
            const v = layer[f];
            if (v !== undefined) assert.ok(merged[f] <= v, f);
          }
          if (layer.allowLockfiles === false) assert.equal(merged.allowLockfiles, false);
          if (layer.forbidSelfApproval === true) assert.equal(merged.forbidSelfApproval, true);
        }
        // merging more layers never allows more
        const fewer = mergePolicies(...layers.slice(1));
        if (mergedOk) assert.ok(checkPatchPolicy(files, fewer).ok || layers.length === 1);
      }),
      { numRuns: 400 },
    );
  });

  it('registration and repository file never loosen the operator layer or the defaults (property)', () => {
    fc.assert(
      fc.property(layerArb, layerArb, layerArb, filesArb, (global, registration, repo, files) => {
        const resolved = resolvePolicy({ global, registration, repo });
        const operator = mergePolicies(withDefaults(global));
        if (checkPatchPolicy(files, resolved).ok) assert.ok(checkPatchPolicy(files, operator).ok);
        for (const p of pathPool) if (pathViolations(p, resolved).length === 0) assert.deepEqual(pathViolations(p, operator), [], p);
        for (const f of ['maxDiffLines', 'maxDiffFiles', 'maxFileBytes', 'commandTimeoutSeconds', 'maxOutputBytes', 'approvalTimeoutMinutes'] as const) {
          assert.ok(resolved[f] <= operator[f], f);
          if (global[f] === undefined) assert.ok(resolved[f] <= DEFAULT_POLICY[f], `${f} above the default`);
        }
        for (const c of ['git', 'npm', 'make', 'sh', 'curl', 'cargo']) if (commandAllowed(resolved, c)) assert.ok(commandAllowed(operator, c), c);
        assert.ok(PROMOTION_MODES.indexOf(resolved.promotion) <= PROMOTION_MODES.indexOf(operator.promotion));
        if (operator.forbidSelfApproval) assert.equal(resolved.forbidSelfApproval, true);
        if (!operator.allowLockfiles) assert.equal(resolved.allowLockfiles, false);
        assert.deepEqual(strip(resolved), strip(mergePolicies(withDefaults(global), registration, repo)));
      }),
      { numRuns: 300 },
    );
  });

  it('does not depend on the order of the layers, and is idempotent (property)', () => {
    fc.assert(
      fc.property(
        fc.array(layerArb, { minLength: 1, maxLength: 5 }).chain((layers) => fc.tuple(fc.constant(layers), fc.shuffledSubarray(layers, { minLength: layers.length, maxLength: layers.length }))),
        ([layers, shuffled]) => {
          const a = mergePolicies(...layers);
          assert.deepEqual(strip(a), strip(mergePolicies(...shuffled)));
          assert.deepEqual(strip(a), strip(mergePolicies(...layers, ...layers)));
          assert.deepEqual(strip(mergePolicies({}, ...layers)), strip(a), 'an empty layer changes nothing');
        },
      ),
      { numRuns: 400 },
    );
  });
});

// ---------------------------------------------------------------------------------------------
describe('parsing real git diffs', () => {
  let repo = '';
  let patch = '';
  let stats = new Map<string, { add: number | null; del: number | null; old?: string }>();
  const secretBody = rnd(36);
  const big = Array.from({ length: 3000 }, (_, i) => `${i} ${rnd(8)}`).join('\n');

  before(() => {
    repo = newRepo();
    dirs.push(repo);
    write(repo, 'a.txt', 'one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\neleven\ntwelve\n');
    write(repo, 'gone.txt', 'bye\n');
    write(repo, 'old name.txt', `${big}\n`);
    write(repo, 'moved.txt', 'same content\nsame\nsame\nsame\n');
    write(repo, 'run.sh', 'echo hi\n');
    write(repo, 'img.bin', Buffer.concat([Buffer.from([0, 1, 2, 3]), Buffer.alloc(20_000, 7)]));
    write(repo, 'crlf.txt', 'a\r\nb\r\n');
    write(repo, 'src/copy-source.ts', Array.from({ length: 40 }, (_, i) => `export const v${i} = ${i};`).join('\n') + '\n');
    commitAll(repo);

    write(repo, 'a.txt', 'one\nTWO\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\neleven\nTWELVE\nthirteen\n');
    unlinkSync(path.join(repo, 'gone.txt'));
    rmSync(path.join(repo, 'old name.txt'));
    write(repo, 'new name.txt', `${big}\nappended line\n`);
    rmSync(path.join(repo, 'moved.txt'));
    write(repo, 'dir/moved.txt', 'same content\nsame\nsame\nsame\n');
    chmodSync(path.join(repo, 'run.sh'), 0o755);
    write(repo, 'img.bin', Buffer.concat([Buffer.from([0, 1, 2, 3]), Buffer.alloc(20_000, 7), Buffer.from([9])]));
    write(repo, 'new.bin', Buffer.from([0, 0, 0, 1, 2, 255]));
    write(repo, 'empty', '');
    write(repo, 'no-newline.txt', 'last');
    write(repo, 'crlf.txt', 'a\r\nB\r\n');
    write(repo, 'tab\tand é "quote" \\.txt', 'weird name\n');
    write(repo, 'looks like a diff.txt', 'diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n\\ No newline at end of file\n');
    write(repo, 'config.js', `module.exports = { token: 'ghp_${secretBody}' };\n`);
    symlinkSync('/etc/passwd', path.join(repo, 'abs-link'));
    symlinkSync('src/copy-source.ts', path.join(repo, 'ok-link'));
    write(repo, 'src/copy.ts', readFileSync(path.join(repo, 'src/copy-source.ts')));
    patch = gitDiff(repo, '-M', '-C', '--find-copies-harder');
    stats = numstat(repo, '-M', '-C', '--find-copies-harder');
  });

  it('reads every file with git\'s own line counts and names', () => {
    const files = parseUnifiedDiff(patch);
    assert.deepEqual(files.errors, []);
    assert.equal(files.length, stats.size);
    for (const f of files) {
      const s = stats.get(f.path);
      assert.ok(s, `git does not list ${JSON.stringify(f.path)}`);
      if (s.add === null) assert.equal(f.binary, true, f.path);
      else {
        assert.equal(f.additions, s.add, `${f.path} additions`);
        assert.equal(f.deletions, s.del, `${f.path} deletions`);
        assert.equal(f.addedLines.length, f.additions);
      }
      if (s.old !== undefined) assert.equal(f.oldPath, s.old, f.path);
    }
  });

  it('gets status, modes, binary sizes, symlinks, quoted names right', () => {
    const files = parseUnifiedDiff(patch);
    const by = new Map(files.map((f) => [f.path, f]));
    const get = (p: string): DiffFile => {
      const f = by.get(p);
      assert.ok(f, `missing ${p}; have ${[...by.keys()].join(', ')}`);
      return f;
    };
    assert.equal(get('a.txt').status, 'modified');
    assert.deepEqual(get('a.txt').addedLines, ['TWO', 'TWELVE', 'thirteen']);
    assert.deepEqual(get('a.txt').addedLineNumbers, [2, 12, 13]);
    assert.equal(get('gone.txt').status, 'deleted');
    assert.equal(get('gone.txt').oldMode, '100644');
    const renamed = get('new name.txt');
    assert.equal(renamed.status, 'renamed');
    assert.equal(renamed.oldPath, 'old name.txt');
    assert.deepEqual(renamed.addedLines, ['appended line']);
    assert.ok(renamed.similarity !== undefined && renamed.similarity >= 90);
    assert.equal(get('dir/moved.txt').status, 'renamed');
    assert.equal(get('dir/moved.txt').oldPath, 'moved.txt');
    assert.equal(get('src/copy.ts').status, 'copied');
    assert.equal(get('src/copy.ts').oldPath, 'src/copy-source.ts');
    const mode = get('run.sh');
    assert.equal(mode.status, 'mode');
    assert.equal(mode.oldMode, '100644');
    assert.equal(mode.newMode, '100755');
    assert.equal(get('img.bin').binary, true);
    assert.equal(get('new.bin').binary, true);
    assert.equal(get('new.bin').status, 'added');
    assert.equal(get('new.bin').binarySize, 6);
    assert.equal(get('empty').status, 'added');
    assert.equal(get('empty').addedBytes, 0);
    assert.deepEqual(get('no-newline.txt').addedLines, ['last']);
    assert.equal(get('no-newline.txt').addedBytes, 4);
    assert.deepEqual(get('crlf.txt').addedLines, ['B\r']);
    assert.equal(get('tab\tand é "quote" \\.txt').status, 'added');
    assert.deepEqual(get('looks like a diff.txt').addedLines, ['diff --git a/x b/x', '--- a/x', '+++ b/x', '@@ -1 +1 @@', '-old', '+new', '\\ No newline at end of file']);
    assert.equal(get('abs-link').isSymlink, true);
    assert.equal(get('abs-link').symlinkTarget, '/etc/passwd');
    assert.equal(get('ok-link').symlinkTarget, 'src/copy-source.ts');
    assert.equal(get('config.js').addedLines.length, 1);
  });

  it('the gate finds the problems in it', () => {
    const r = checkPatch(patch, DEFAULT_POLICY);
    const found = r.violations.map((v) => `${v.rule} ${v.path ?? ''}`);
    assert.ok(found.includes('symlink-escape abs-link'), found.join('\n'));
    assert.ok(found.includes('secret config.js'), found.join('\n'));
    assert.ok(!found.some((f) => f.includes('ok-link')), found.join('\n'));
    assert.equal(r.stats.files, stats.size);
    // and the redacted verdict never carries the token
    assert.ok(!JSON.stringify(r.violations).includes(secretBody));
  });

  it('modified binaries (delta) and type changes', () => {
    const d = newRepo();
    dirs.push(d);
    write(d, 'blob.bin', Buffer.concat([Buffer.from([0]), Buffer.from(rnd(30_000))]));
    write(d, 'kind', 'was a file\n');
    commitAll(d);
    write(d, 'blob.bin', Buffer.concat([Buffer.from([0]), Buffer.from(rnd(30_000)), Buffer.from('tail')]));
    rmSync(path.join(d, 'kind'));
    symlinkSync('../outside', path.join(d, 'kind'));
    const p = gitDiff(d);
    assert.match(p, /^delta \d+$/m);
    const files = parseUnifiedDiff(p);
    assert.deepEqual(files.errors, []);
    const blob = files.find((f) => f.path === 'blob.bin');
    assert.ok(blob?.binary && blob.binarySize === undefined);
    const kinds = files.filter((f) => f.path === 'kind').map((f) => `${f.status}:${f.isSymlink}`).sort();
    assert.deepEqual(kinds, ['added:true', 'deleted:false']);
    assert.deepEqual(checkPatchPolicy(files, DEFAULT_POLICY).violations.map((v) => `${v.rule} ${v.path}`), ['symlink-escape kind']);
  });

  it('random contents: the parser agrees with git numstat (property, real git)', () => {
    const d = newRepo();
    dirs.push(d);
    commitAll(d);
    const content = fc.array(fc.oneof(fc.string({ unit: 'binary', maxLength: 30 }), fc.constantFrom('', ' ', '+x', '-y', '@@ -1 +1 @@', 'diff --git a/q b/q', '\\ No newline', '\r', '--- a/x', '+++ b/x')), { maxLength: 12 }).map((ls) => ls.join('\n'));
    fc.assert(
      fc.property(content, content, fc.boolean(), (before, afterText, trailing) => {
        write(d, 'f.txt', before);
        commitAll(d);
        write(d, 'f.txt', afterText + (trailing ? '\n' : ''));
        write(d, 'g.txt', afterText);
        const p = gitDiff(d);
        const st = numstat(d);
        const files = parseUnifiedDiff(p);
        assert.deepEqual(files.errors, [], p);
        assert.equal(files.length, st.size);
        for (const f of files) {
          const s = st.get(f.path);
          assert.ok(s);
          if (s.add === null) assert.ok(f.binary);
          else {
            assert.equal(f.additions, s.add, p);
            assert.equal(f.deletions, s.del, p);
          }
          if (f.path === 'g.txt' && !f.binary) {
            assert.equal(f.status, 'added');
            const onDisk = readFileSync(path.join(d, 'g.txt'));
            assert.equal(f.addedBytes, onDisk.length, p);
          }
        }
        git(d, 'rm', '-q', '--cached', '-f', 'g.txt');
        rmSync(path.join(d, 'g.txt'));
      }),
      { numRuns: 25 },
    );
  });
});

describe('parsing hand-made and broken diffs', () => {
  it('quoted names with octal escapes, copy headers, "Binary files ... differ"', () => {
    const p = [
      'diff --git "a/t\\tb\\303\\251.txt" "b/t\\tb\\303\\251.txt"',
      'new file mode 100644',
      'index 0000000000000000000000000000000000000000..cce8b844adad81ea4d0c5983103f4c7bb71cc0a9',
      '--- /dev/null',
      '+++ "b/t\\tb\\303\\251.txt"',
      '@@ -0,0 +1 @@',
      '+tab',
      '\\ No newline at end of file',
      'diff --git a/src/x.ts b/lib/y.ts',
      'similarity index 88%',
      'copy from src/x.ts',
      'copy to lib/y.ts',
      'index 1111111111111111111111111111111111111111..2222222222222222222222222222222222222222 100644',
      '--- a/src/x.ts',
      '+++ b/lib/y.ts',
      '@@ -1,2 +1,2 @@',
      ' keep',
      '-old',
      '+new',
      'diff --git a/pic.png b/pic.png',
      'index 1111111111111111111111111111111111111111..2222222222222222222222222222222222222222 100644',
      'Binary files a/pic.png and b/pic.png differ',
      'diff --git a/x y.txt b/x y.txt',
      'deleted file mode 100644',
      'index 1111111111111111111111111111111111111111..0000000000000000000000000000000000000000',
      '--- a/x y.txt\t',
      '+++ /dev/null',
      '@@ -1 +0,0 @@',
      '-gone',
      '',
    ].join('\n');
    const files = parseUnifiedDiff(p);
    assert.deepEqual(files.errors, []);
    assert.deepEqual(
      files.map((f) => [f.path, f.status, f.oldPath ?? null, f.additions, f.deletions, f.binary]),
      [
        ['t\tbé.txt', 'added', null, 1, 0, false],
        ['lib/y.ts', 'copied', 'src/x.ts', 1, 1, false],
        ['pic.png', 'modified', null, 0, 0, true],
        ['x y.txt', 'deleted', null, 0, 1, false],
      ],
    );
    assert.equal(files[0]!.addedBytes, 3);
  });

  it('reports garbage, truncation, inconsistent names and missing prefixes, without throwing', () => {
    const cases: Array<[string, RegExp]> = [
      ['hello world\n', /before the first "diff --git"/],
      ['diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n', /hunk ends early/],
      ['diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n+smuggled\n', /unexpected line after a hunk/],
      ['diff --git a/x b/x\n--- a/x\n+++ b/evil\n@@ -1 +1 @@\n-a\n+b\n', /inconsistent new file names/],
      ['diff --git a/x b/x\nrename from x\nrename to .github/workflows/y.yml\n', /inconsistent new file names/],
      ['diff --git x x\n--- x\n+++ x\n@@ -1 +1 @@\n-a\n+b\n', /prefix/],
      ['diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@ bad\n', /hunk ends early|unexpected/],
      ['diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -x +1 @@\n', /malformed hunk header/],
      ['diff --git a/x b/x\nGIT binary patch\nliteral 5\n!!!!\n\n', /malformed line in a binary patch/],
      ['diff --git a/x b/x\nGIT binary patch\nnope\n', /expected "literal <size>"/],
      ['diff --git a/x b/x\nold mode 12\nnew mode 100755\n', /bad file mode/],
      ['diff --git "a/x\\q" "b/x"\n', /bad quoted path/],
      ['diff --git \n', /could not determine/],
      ['diff --git a/x b/x\nwhat is this\n', /unrecognized line/],
    ];
    for (const [p, re] of cases) {
      const files = parseUnifiedDiff(p);
      assert.ok(files.errors.some((e) => re.test(e.message)), `${JSON.stringify(p)} -> ${JSON.stringify(files.errors)}`);
      assert.ok(rules(files).includes('unparseable'), p);
    }
    assert.deepEqual(parseUnifiedDiff(''), Object.assign([], { errors: [] }));
  });

  it('hunks (read by jsdiff one at a time): look-alike lines, missing newlines, blank and CRLF context, a bad hunk costs only itself', () => {
    const head = 'diff --git a/x b/x\nindex 1111111..2222222 100644\n--- a/x\n+++ b/x\n';
    // content lines that look like headers are content: `-- a/x` deleted, `++ b/x` and `@@` added
    const lookAlike = parseUnifiedDiff(`${head}@@ -1,4 +1,4 @@\n--- a/x\n keep\n-\\ x\n+++ b/x\n+@@ -1 +1 @@\n \n`);
    assert.deepEqual(lookAlike.errors, []);
    assert.deepEqual(lookAlike[0]?.addedLines, ['++ b/x', '@@ -1 +1 @@']);
    assert.deepEqual(lookAlike[0]?.addedLineNumbers, [2, 3]);
    assert.equal(lookAlike[0]?.deletions, 2);
    // "\ No newline at end of file" after the old and after the new side: only the new one counts
    const noNl = parseUnifiedDiff(`${head}@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+bc\n\\ No newline at end of file\n`);
    assert.deepEqual(noNl.errors, []);
    assert.equal(noNl[0]?.addedBytes, 2);
    // blank context lines that lost their space, LF or CRLF, even as the last line of a hunk
    const blank = parseUnifiedDiff(`${head}@@ -1,3 +1,3 @@\n\n-a\r\n+b\r\n\r\n`);
    assert.deepEqual(blank.errors, []);
    assert.deepEqual(blank[0]?.addedLines, ['b\r']);
    assert.deepEqual(blank[0]?.addedLineNumbers, [2]);
    // a hunk that ends early, or has a line too many, is reported; the next hunk is still read
    for (const bad of ['@@ -1,3 +1,3 @@\n a\n-b\n', '@@ -1 +1 @@\n-a\n+b\n+smuggled\n', '@@ -1 +1 @@\n-a\n+b\nnot a hunk line\n']) {
      const files = parseUnifiedDiff(`${head}${bad}@@ -10 +10 @@\n-y\n+z\n`);
      assert.ok(files.errors.some((e) => /hunk ends early|unexpected line after a hunk/.test(e.message)), `${bad} -> ${JSON.stringify(files.errors)}`);
      assert.ok(files[0]?.addedLines.includes('z'), bad);
      assert.deepEqual(rules(files), ['unparseable'], bad);
    }
    // a rename with changes, CRLF content, a mode change and a binary literal in one patch
    const mixed = [
      'diff --git a/old.txt b/new.txt',
      'similarity index 80%',
      'rename from old.txt',
      'rename to new.txt',
      'index 1111111..2222222 100644',
      '--- a/old.txt',
      '+++ b/new.txt',
      '@@ -1,2 +1,2 @@',
      ' same\r',
      '-was\r',
      '+now\r',
      'diff --git a/run.sh b/run.sh',
      'old mode 100644',
      'new mode 100755',
      'diff --git a/img.bin b/img.bin',
      'new file mode 100644',
      'index 0000000000000000000000000000000000000000..2222222222222222222222222222222222222222',
      'GIT binary patch',
      'literal 6',
      'NcmZQzVq{=sVE_OE00;m8',
      '',
      'literal 0',
      'HcmV?d00001',
      '',
    ].join('\n');
    const files = parseUnifiedDiff(mixed);
    assert.deepEqual(files.errors, []);
    assert.deepEqual(
      files.map((f) => [f.path, f.status, f.oldPath ?? null, f.additions, f.deletions, f.addedLines, f.similarity ?? null, f.oldMode ?? null, f.newMode ?? null, f.binary, f.binarySize ?? null]),
      [
        ['new.txt', 'renamed', 'old.txt', 1, 1, ['now\r'], 80, '100644', '100644', false, null],
        ['run.sh', 'mode', null, 0, 0, [], null, '100644', '100755', false, null],
        ['img.bin', 'added', null, 0, 0, [], null, null, '100644', true, 6],
      ],
    );
  });

  it('tolerates CRLF line endings on headers', () => {
    const p = 'diff --git a/x b/x\r\nindex 1111111..2222222 100644\r\n--- a/x\r\n+++ b/x\r\n@@ -1 +1 @@\r\n-a\r\n+b\r\n';
    const files = parseUnifiedDiff(p);
    assert.deepEqual(files.errors, []);
    assert.deepEqual(files[0]?.addedLines, ['b\r']);
  });

  it('never throws on arbitrary input; what it returns is consistent (property)', () => {
    const realish = [
      'diff --git a/x b/x',
      'diff --git "a/\\303\\251" "b/\\303\\251"',
      'new file mode 100644',
      'deleted file mode 120000',
      'old mode 100644',
      'new mode 100755',
      'rename from a',
      'rename to b',
      'copy from "q\\"x"',
      'similarity index 50%',
      'index 0000000..1111111 100644',
      '--- a/x',
      '+++ b/x',
      '--- /dev/null',
      '+++ /dev/null',
      '@@ -1,2 +1,3 @@',
      '@@ -0,0 +1 @@',
      '@@ -1 +0,0 @@',
      ' ctx',
      '+add',
      '-del',
      '\\ No newline at end of file',
      'GIT binary patch',
      'literal 3',
      'delta 9',
      'HcmV?d00001',
      '',
      'Binary files a/x and b/x differ',
    ];
    const input = fc.oneof(
      fc.string({ unit: 'binary', maxLength: 400 }),
      fc.array(fc.oneof(fc.constantFrom(...realish), fc.string({ unit: 'binary', maxLength: 20 })), { maxLength: 40 }).map((ls) => ls.join('\n')),
      fc.array(fc.constantFrom(...realish), { maxLength: 60 }).map((ls) => ls.join('\n')),
    );
    fc.assert(
      fc.property(input, (p) => {
        const files = parseUnifiedDiff(p);
        assert.ok(Array.isArray(files) && Array.isArray(files.errors));
        for (const f of files) {
          assert.equal(typeof f.path, 'string');
          assert.ok(f.path.length > 0);
          assert.equal(f.additions, f.addedLines.length);
          assert.equal(f.addedLineNumbers.length, f.addedLines.length);
          assert.ok(f.deletions >= 0 && f.addedBytes >= 0);
          assert.ok(['added', 'modified', 'deleted', 'renamed', 'copied', 'mode'].includes(f.status));
        }
        const check = checkPatchPolicy(files, DEFAULT_POLICY, { secretValues: ['sekrit-value'] });
        if (files.errors.length > 0 || files.length === 0) assert.equal(check.ok, false);
      }),
      { numRuns: 3000 },
    );
  });

  it('mutated real diffs never throw either (property)', () => {
    const base = [
      'diff --git a/src/a.ts b/src/a.ts',
      'index 1111111111111111111111111111111111111111..2222222222222222222222222222222222222222 100644',
      '--- a/src/a.ts',
      '+++ b/src/a.ts',
      '@@ -1,3 +1,4 @@',
      ' a',
      '-b',
      '+B',
      '+C',
      ' c',
      'diff --git a/bin b/bin',
      'new file mode 100644',
      'index 0000000000000000000000000000000000000000..2222222222222222222222222222222222222222',
      'GIT binary patch',
      'literal 6',
      'NcmZQzVq{=sVE_OE00;m8',
      '',
      'literal 0',
      'HcmV?d00001',
      '',
    ];
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.nat(base.length), fc.constantFrom('drop', 'dup', 'trunc', 'junk'), fc.string({ unit: 'binary', maxLength: 8 })), { maxLength: 5 }), (muts) => {
        const ls = [...base];
        for (const [i, kind, junk] of muts) {
          const at = i % ls.length;
          if (kind === 'drop') ls.splice(at, 1);
          else if (kind === 'dup') ls.splice(at, 0, ls[at] ?? '');
          else if (kind === 'trunc') ls[at] = (ls[at] ?? '').slice(0, Math.floor((ls[at] ?? '').length / 2));
          else ls[at] = (ls[at] ?? '') + junk;
          if (ls.length === 0) break;
        }
        const files = parseUnifiedDiff(ls.join('\n'));
        for (const f of files) assert.equal(f.additions, f.addedLines.length);
      }),
      { numRuns: 2000 },
    );
  });
});

// ---------------------------------------------------------------------------------------------
describe('the gate rules', () => {
  it('protected-path: the path, a rename source or destination, a copy source, any case, .git components', () => {
    assert.deepEqual(rules([file('.github/workflows/ci.yml')]), ['protected-path']);
    assert.deepEqual(rules([file('.github/workflows/ci.yml', { status: 'deleted', addedLines: [] })]), ['protected-path']);
    assert.deepEqual(rules([file('ci.yml', { status: 'renamed', oldPath: '.github/workflows/ci.yml', addedLines: [] })]), ['protected-path']);
    assert.deepEqual(rules([file('.steward/policy.json', { status: 'renamed', oldPath: 'src/policy.json', addedLines: [] })]), ['protected-path']);
    assert.deepEqual(rules([file('leak.txt', { status: 'copied', oldPath: 'config/.env', addedLines: [] })]), ['protected-path']);
    assert.deepEqual(rules([file('.GitHub/Workflows/ci.yml')]), ['protected-path']);
    assert.deepEqual(rules([file('sub/.GIT/hooks/pre-commit')]), ['protected-path']);
    assert.deepEqual(rules([file('../outside.txt')]), ['protected-path']);
    assert.deepEqual(rules([file('/etc/passwd')]), ['protected-path']);
    assert.deepEqual(rules([file('a//b')]), ['protected-path']);
    const v = checkPatchPolicy([file('.github/workflows/ci.yml')], DEFAULT_POLICY).violations[0]!;
    assert.equal(v.path, '.github/workflows/ci.yml');
    assert.match(v.detail, /is protected \(matches "\.github\/workflows\/\*\*"\) and cannot be changed by an agent; no approval overrides this/);
  });

  it('outside-scope, never-promote, lockfile', () => {
    const scoped = mergePolicies({ allowedScope: ['src/**'] });
    assert.deepEqual(rules([file('src/a.ts'), file('docs/b.md')], scoped), ['outside-scope']);
    assert.deepEqual(rules([file('src/b.ts', { status: 'renamed', oldPath: 'docs/b.ts', addedLines: [] })], scoped), ['outside-scope']);
    assert.match(checkPatchPolicy([file('src/b.ts', { status: 'renamed', oldPath: 'docs/b.ts', addedLines: [] })], scoped).violations[0]!.detail, /outside the allowed scope \(the source of a rename\)/);
    assert.deepEqual(rules([file('src/b.ts', { status: 'copied', oldPath: 'docs/b.ts', addedLines: [] })], scoped), [], 'a copy source is only read');
    assert.deepEqual(rules([file('x.json', { status: 'renamed', oldPath: 'package-lock.json', addedLines: [] })]), ['lockfile']);
    assert.match(checkPatchPolicy([file('docs/b.md')], scoped).violations[0]!.detail, /outside the allowed scope; allowed: "src\/\*\*"/);
    assert.deepEqual(rules([file('dist/app.js')]), ['never-promote']);
    assert.deepEqual(rules([file('logs/debug.log', { status: 'deleted', addedLines: [] })]), [], 'deleting a stray artifact is fine');
    assert.deepEqual(rules([file('package-lock.json')]), ['lockfile']);
    assert.deepEqual(rules([file('package-lock.json', { status: 'deleted', addedLines: [] })]), ['lockfile']);
    assert.deepEqual(rules([file('package-lock.json')], mergePolicies({ allowLockfiles: true })), []);
    assert.match(checkPatchPolicy([file('package-lock.json')], DEFAULT_POLICY).violations[0]!.detail, /allowLockfiles/);
  });

  it('diff-too-large, too-many-files, file-too-large', () => {
    const p = mergePolicies({ maxDiffLines: 3, maxDiffFiles: 2, maxFileBytes: 10 });
    assert.deepEqual(rules([file('a', { addedLines: ['1', '2'], deletions: 2 })], p), ['diff-too-large']);
    assert.match(checkPatchPolicy([file('a', { addedLines: ['1', '2'], deletions: 2 })], p).violations[0]!.detail, /changes 4 lines \(2 added, 2 deleted\); the limit is 3 \(maxDiffLines\)/);
    assert.deepEqual(rules([file('a', { addedLines: [] }), file('b', { addedLines: [] }), file('c', { addedLines: [] })], p), ['too-many-files']);
    assert.deepEqual(rules([file('a', { status: 'added', addedLines: ['0123456789'] })], p), ['file-too-large']);
    assert.deepEqual(rules([file('a', { addedLines: ['0123456789'] })], p), ['file-too-large'], 'the added bytes alone exceed the limit');
    assert.deepEqual(rules([file('a', { addedLines: ['x'] })], p, { fileSizes: { a: 11 } }), ['file-too-large'], 'a measured size');
    assert.deepEqual(rules([file('a', { binary: true, addedLines: [], binarySize: 11 })], p), ['file-too-large']);
    assert.deepEqual(rules([file('a', { binary: true, addedLines: [], binarySize: 10 })], p), []);
  });

  it('symlink-escape: absolute, "..", into protected paths; inside is fine', () => {
    const link = (p: string, target: string): DiffFile => file(p, { status: 'added', isSymlink: true, newMode: '120000', addedLines: [target], symlinkTarget: target });
    assert.deepEqual(rules([link('l', '/etc/passwd')]), ['symlink-escape']);
    assert.deepEqual(rules([link('a/l', '../../x')]), ['symlink-escape']);
    assert.deepEqual(rules([link('a/l', '../.git/config')]), ['symlink-escape']);
    assert.deepEqual(rules([link('a/l', '../.env')]), ['symlink-escape']);
    assert.deepEqual(rules([link('a/b/l', '../c/d')]), []);
    assert.deepEqual(rules([link('l', 'src/x.ts')]), []);
    assert.match(checkPatchPolicy([link('l', '/etc/passwd')], DEFAULT_POLICY).violations[0]!.detail, /symlink to an absolute path \("\/etc\/passwd"\)/);
  });

  it('secret: in added lines (with the line number in the new file), configured values, file names', () => {
    const token = `ghp_${rnd(36)}`;
    const f = file('src/config.ts', { addedLines: ['const a = 1;', `const t = "${token}";`], addedLineNumbers: [10, 11] });
    const r = checkPatchPolicy([f], DEFAULT_POLICY);
    assert.deepEqual(r.violations.map((v) => v.rule), ['secret']);
    assert.match(r.violations[0]!.detail, /^line 11 adds what looks like a GitHub token \(ghp_\*\*\*\*… \(40 chars\)\); secrets must never be promoted$/);
    const held = `held-${rnd(20)}`;
    const r2 = checkPatchPolicy([file('notes.md', { addedLines: [`see ${held} here`] })], DEFAULT_POLICY, { secretValues: [held] });
    assert.deepEqual(r2.violations.map((v) => v.rule), ['secret']);
    assert.ok(!JSON.stringify(r2).includes(held));
    const r3 = checkPatchPolicy([file(`x-${held}.txt`)], DEFAULT_POLICY, { secretValues: [held] });
    assert.deepEqual(r3.violations.map((v) => v.rule), ['secret']);
    assert.equal(r3.violations[0]!.path, undefined, 'the file name itself is not repeated');
    assert.ok(!JSON.stringify(r3.violations).includes(held));
  });

  it('empty and unparseable', () => {
    assert.deepEqual(rules([]), ['empty']);
    assert.match(checkPatchPolicy([], DEFAULT_POLICY).violations[0]!.detail, /no file changes/);
    const garbage = parseUnifiedDiff('this is not a patch\n');
    assert.deepEqual(rules(garbage), ['unparseable', 'empty']);
    assert.deepEqual(checkPatch('', DEFAULT_POLICY).violations.map((v) => v.rule), ['empty']);
    const ok = checkPatch('diff --git a/src/a.ts b/src/a.ts\n--- a/src/a.ts\n+++ b/src/a.ts\n@@ -1 +1 @@\n-a\n+b\n', DEFAULT_POLICY);
    assert.equal(ok.ok, true);
    assert.deepEqual(ok.stats, { files: 1, additions: 1, deletions: 1 });
  });

  it('bounds the list of violations', () => {
    const many = Array.from({ length: 120 }, (_, i) => file(`dist/${i}.js`));
    const r = checkPatchPolicy(many, mergePolicies({ maxDiffFiles: 1000, maxDiffLines: 10_000 }));
    assert.equal(r.violations.length, 51);
    assert.match(r.violations[50]!.detail, /and 70 more never-promote violations/);
  });
});

// ---------------------------------------------------------------------------------------------
describe('secret detection', () => {
  const positives: Array<[string, string, string]> = [
    ['aws-access-key-id', `key = AKIA${rnd(16, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567')}`, 'AKIA'],
    ['aws-secret-access-key', `aws_secret_access_key = ${rnd(40, 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/+')}`, 'aws_secret_access_key = '],
    ['github-token', `token: ghp_${rnd(36)}`, 'ghp_'],
    ['github-token', `x gho_${rnd(36)} y`, 'gho_'],
    ['github-token', `ghs_${rnd(36)}`, 'ghs_'],
    ['github-token', `github_pat_${rnd(22)}_${rnd(59)}`, 'github_pat_'],
    ['slack-token', `xoxb-${rnd(12, '0123456789')}-${rnd(13, '0123456789')}-${rnd(24)}`, 'xoxb-'],
    ['private-key', '-----BEGIN RSA PRIVATE KEY-----', ''],
    ['private-key', '-----BEGIN OPENSSH PRIVATE KEY-----', ''],
    ['private-key', '-----BEGIN PRIVATE KEY-----', ''],
    ['private-key', '-----BEGIN PGP PRIVATE KEY BLOCK-----', ''],
    ['google-api-key', `apiKey: "AIza${rnd(35)}"`, 'AIza'],
    ['stripe-key', `sk_live_${rnd(24)}`, 'sk_live_'],
    ['openai-key', `OPENAI_API_KEY=sk-proj-${rnd(48)}`, 'sk-proj-'],
    ['openai-key', `key = "sk-${rnd(48)}"`, 'sk-'],
    ['anthropic-key', `sk-ant-api03-${rnd(80)}`, 'sk-ant-'],
    ['jwt', `Authorization: Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.${rnd(43)}`, 'eyJ'],
    ['generic-secret', `const password = "hunter2!Xy9"`, ''],
    ['generic-secret', `DB_PASSWORD=${rnd(20)}`, ''],
    ['generic-secret', `  "client_secret": "${rnd(32, '0123456789abcdef')}",`, ''],
    ['generic-secret', `api_key: '${rnd(24)}'`, ''],
    ['generic-secret', `export AUTH_TOKEN="${rnd(30)}"`, ''],
    ['generic-secret', `self.secret_key = '${rnd(50)}'`, ''],
  ];
  it('finds true positives, redacted', () => {
    for (const [rule, line, prefix] of positives) {
      const found = detectSecrets(['nothing here', line]);
      assert.equal(found.length, 1, `${rule}: ${line} -> ${JSON.stringify(found)}`);
      const f = found[0]!;
      assert.equal(f.rule, rule, line);
      assert.equal(f.line, 1);
      if (prefix) assert.ok(f.preview.startsWith(prefix), f.preview);
      if (rule !== 'private-key') {
        // no 6-character piece of the secret (past its public prefix) is in the preview
        const secret = line.slice(f.column + prefix.length).replace(/["',].*$/, '');
        for (let i = 0; i + 6 <= secret.length; i++) assert.ok(!f.preview.includes(secret.slice(i, i + 6)), `${f.preview} leaks ${secret.slice(i, i + 6)}`);
      }
    }
  });

  it('finds configured values anywhere, several times, and ignores very short ones', () => {
    const v = `v-${rnd(12)}`;
    const found = detectSecrets([`a${v}b${v}`, 'no'], { extraValues: [v, 'abc'] });
    assert.deepEqual(found.map((f) => [f.rule, f.line, f.column]), [['configured-secret', 0, 1], ['configured-secret', 0, 2 + v.length]]);
    assert.ok(found.every((f) => !f.preview.includes(v.slice(2))));
    assert.deepEqual(detectSecrets(['abc abc'], { extraValues: ['abc'] }), []);
  });

  it('keeps known false-positive shapes quiet', () => {
    const quiet = [
      'password = ""',
      "password: ''",
      'token: process.env.GITHUB_TOKEN',
      'const token = getToken();',
      'const token = req.headers.authorization;',
      'password: ${{ secrets.DB_PASSWORD }}',
      'api_key = os.environ["API_KEY"]',
      'passwordMinLength = 12',
      'tokenUrl: "https://example.com/oauth/token"',
      'max_tokens: 4096',
      'secret: "your-secret-here"',
      'AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE',
      `GITHUB_TOKEN=ghp_${'x'.repeat(36)}`,
      'if (password == confirmPassword) {',
      'if (password === "") return;',
      '<input type="password" placeholder="Enter your password">',
      'const tokenizer = "bert-base-uncased";',
      'passwordField: "password",',
      'type Token = { value: string };',
      '.sk-task-list-item-checkbox-abcdefghijklmnop { color: red }',
      'password: hashPassword(input),',
      'integrity: "sha512-abcdefghijklmnopqrstuvwxyz0123456789ABCDEF"',
      'secret_name = "prod/db/password"',
      'DB_PASSWORD=changeme',
      'token = <TOKEN>',
      'password: hunter2',
      'export const SECRET_KEY_LENGTH = 64;',
      'token_type: "Bearer"',
      '"password": "Password1"',
      'csrfToken: this.csrfToken,',
      'const secret = await vault.read(path);',
      'password=%(db_password)s',
    ];
    for (const line of quiet) assert.deepEqual(detectSecrets([line]), [], line);
  });

  it('stays fast on long adversarial lines (bounded time)', () => {
    const lines = [
      'eyJ'.repeat(30_000),
      `eyJ${'a'.repeat(100_000)}.eyJ${'b'.repeat(100_000)}`,
      'token='.repeat(20_000),
      `password = "${'x'.repeat(200_000)}`,
      'ghp_'.repeat(30_000),
      `${'A'.repeat(200_000)}`,
      'a:'.repeat(100_000),
      '-----BEGIN '.repeat(20_000),
      'sk-'.repeat(50_000),
    ];
    for (const line of lines) {
      const t = performance.now();
      detectSecrets([line], { extraValues: ['needle-value'] });
      const ms = performance.now() - t;
      assert.ok(ms < 2000, `${line.slice(0, 20)}… took ${ms.toFixed(0)} ms`);
    }
  });

  it('never throws and never leaks a configured value (property)', () => {
    fc.assert(
      fc.property(fc.array(fc.string({ unit: 'binary', maxLength: 80 }), { maxLength: 10 }), fc.string({ unit: 'binary', minLength: 6, maxLength: 20 }), (lines, value) => {
        const withValue = [...lines, `x=${value}`];
        const found = detectSecrets(withValue, { extraValues: [value] });
        assert.ok(found.some((f) => f.rule === 'configured-secret'));
        for (const f of found) {
          assert.ok(f.line >= 0 && f.line < withValue.length);
          if (f.rule === 'configured-secret') assert.ok(!f.preview.includes(value));
        }
      }),
      { numRuns: 1000 },
    );
  });
});
