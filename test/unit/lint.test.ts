/**
 * The static checks CI enforces, run as a suite so a violation fails the test command: the
 * TypeScript compiler (strict, no emit) and ESLint (eslint.config.js: workflow purity, the
 * layers' import rules, no floating promises). And the rules themselves: a workflow module that
 * reaches for a Node built-in, the store or an impure module is refused, a type import is not.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import { ESLint } from 'eslint';

const root = fileURLToPath(new URL('../..', import.meta.url));
const require = createRequire(import.meta.url);

function run(bin: string, args: string[]): { status: number | null; output: string } {
  const r = spawnSync(process.execPath, [bin, ...args], { cwd: root, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  return { status: r.status, output: `${r.stdout}${r.stderr}`.trim() };
}

describe('static checks', () => {
  it('type-checks (tsc --noEmit, strict)', () => {
    const r = run(require.resolve('typescript/bin/tsc'), ['--noEmit', '-p', 'tsconfig.json']);
    assert.equal(r.status, 0, r.output);
  });

  it('lints clean (eslint, no warnings allowed: `npm run lint`)', async () => {
    const eslint = new ESLint({ cwd: root });
    const results = await eslint.lintFiles(['.']);
    const problems = results.reduce((n, r) => n + r.errorCount + r.warningCount, 0);
    const report = problems ? await (await eslint.loadFormatter('stylish')).format(results) : '';
    assert.equal(problems, 0, String(report));
  });

  it('refuses impure imports in workflow code and the runtime in the layers below it; type imports pass', async () => {
    const eslint = new ESLint({ cwd: root });
    const workflowFile = `${root}workflows/objectives/objective.ts`;
    const original = readFileSync(workflowFile, 'utf8');
    const lint = async (file: string, head: string) => {
      const [result] = await eslint.lintText(`${head}\n${readFileSync(file, 'utf8')}`, { filePath: file });
      return (result?.messages ?? []).filter((m) => m.ruleId === '@typescript-eslint/no-restricted-imports').map((m) => m.message);
    };
    const refused = await lint(
      workflowFile,
      [
        "import { readFileSync } from 'node:fs';",
        "import { createDb } from '../../domain/db.js';",
        "import { ENCODING_KEY } from '../../common/codec.js';",
        "import { pino } from 'pino';",
        "import type { Db } from '../../domain/db.js';",
        'export type Probe = [typeof readFileSync, typeof createDb, typeof ENCODING_KEY, typeof pino, Db];',
      ].join('\n'),
    );
    assert.equal(refused.length, 5, refused.join('\n'));
    assert.match(refused.join('\n'), /no Node built-ins here/);
    assert.match(refused.join('\n'), /import their types only/);
    assert.match(refused.join('\n'), /only the pure modules of common\//);
    assert.match(refused.join('\n'), /imports only @temporalio\/workflow/);
    assert.deepEqual(await lint(workflowFile, "import type { Db } from '../../domain/db.js';\nexport type Probe = Db;"), [], 'a type import passes');
    assert.equal(readFileSync(workflowFile, 'utf8'), original, 'nothing was written');

    const pure = await lint(`${root}common/ids.ts`, "import { createHash } from 'node:crypto';\nexport const h = createHash;");
    assert.equal(pure.length, 2, pure.join('\n'));
    assert.match(pure.join('\n'), /runs inside workflows: no Node built-ins/);

    // the repository change policy: no I/O, only its own modules and the packages it is built on
    const policy = await lint(`${root}common/repo-policy/globs.ts`, "import { readFileSync } from 'node:fs';\nimport { pino } from 'pino';\nexport const io = [readFileSync, pino];");
    assert.equal(policy.length, 3, policy.join('\n'));
    assert.match(policy.join('\n'), /does no I\/O: no Node built-ins/);
    assert.match(policy.join('\n'), /imports only its own modules and zod, minimatch/);
    assert.deepEqual(await lint(`${root}common/repo-policy/policy.ts`, "import { minimatch } from 'minimatch';\nimport { parsePatch } from 'diff';\nexport const m = [minimatch, parsePatch];"), []);
    const matcherInWorkflow = await lint(workflowFile, "import { minimatch } from 'minimatch';\nimport { parsePatch } from 'diff';\nimport { matchesGlob } from '../../common/repo-policy.js';\nexport const m = [minimatch, parsePatch, matchesGlob];");
    assert.equal(matcherInWorkflow.length, 3, matcherInWorkflow.join('\n'));

    const domain = await lint(`${root}domain/blobs.ts`, "import { startSteward } from '../platform/start.js';\nexport const s = startSteward;");
    assert.equal(domain.length, 1, domain.join('\n'));
    assert.match(domain[0]!, /Nothing imports the runtime/);
    const upward = await lint(`${root}domain/blobs.ts`, "import { createActivities } from '../activities/index.js';\nimport type { TurnInput } from '../workflows/types.js';\nexport type A = [typeof createActivities, TurnInput];");
    assert.equal(upward.length, 1, upward.join('\n'));
    assert.match(upward[0]!, /imports no activity, adapter or workflow/);
    // a new function over 150 lines is refused
    const long = `export function tooLong(): number {\n  let n = 0;\n${'  n += 1;\n'.repeat(160)}  return n;\n}`;
    const [longResult] = await eslint.lintText(`${readFileSync(`${root}domain/blobs.ts`, 'utf8')}\n${long}\n`, { filePath: `${root}domain/blobs.ts` });
    assert.match((longResult?.messages ?? []).map((m) => `${m.ruleId}: ${m.message}`).join('\n'), /max-lines-per-function: Function 'tooLong' has too many lines \(16\d\)/);
    const adapter = await lint(`${root}adapters/ingress.ts`, "import { startSteward } from '../platform/start.js';\nexport const s = startSteward;");
    assert.match(adapter.join('\n'), /Nothing imports the runtime/);
  });
});
