/**
 * The Temporal SDK's public surface only (issue 33): no file of the repository imports a module
 * of an SDK package's `lib/` (`@temporalio/<package>/lib/...`), whether by `import`, `export
 * ... from`, `import()`, `require()` or `require.resolve()`, in TypeScript, CommonJS or ESM
 * JavaScript, except the one module named in eslint.config.js (SDK_INTERNALS_MODULE). ESLint
 * enforces it for .ts files (its `no-restricted-imports`, tested here too); it skips .cjs and
 * .mjs files and does not read `require()` calls, which this scan covers.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import { ESLint } from 'eslint';

const root = fileURLToPath(new URL('../..', import.meta.url));
// the exemption, as eslint.config.js names it (plain JavaScript: read at run time)
const { SDK_INTERNALS_MODULE } = (await import(new URL('../../eslint.config.js', import.meta.url).href)) as { SDK_INTERNALS_MODULE: string };
const SKIP = new Set(['node_modules', 'generated', '.data', '.git']);
const CODE = /\.(ts|cts|mts|js|cjs|mjs)$/;
/** The SDK's scope, kept out of this file's own probe texts (the scan reads this file too). */
const SDK = '@temporalio';
/** A quoted module specifier under the SDK's scope, single or double quoted. */
const q = (spec: string): string => `'${SDK}/${spec}'`;
const qq = (spec: string): string => `"${SDK}/${spec}"`;

/** The module specifiers of SDK lib modules a source text imports or requires. */
export function sdkLibImports(text: string): string[] {
  const found: string[] = [];
  const specifier = /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+|\brequire(?:\.resolve)?\s*\(\s*)(['"`])(@temporalio\/[^'"`/]+\/lib(?:\/[^'"`]*)?)\1/g;
  for (const m of text.matchAll(specifier)) found.push(m[2]!);
  return found;
}

function sourceFiles(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    if (SKIP.has(name)) continue;
    const p = path.join(dir, name);
    if (statSync(p).isDirectory()) sourceFiles(p, out);
    else if (CODE.test(name)) out.push(p);
  }
  return out;
}

describe('the public Temporal SDK surface only', () => {
  it(`imports no SDK lib/ module anywhere but ${SDK_INTERNALS_MODULE}`, () => {
    const files = sourceFiles(root);
    assert.ok(files.length > 200, `scanned ${files.length} files`);
    assert.ok(files.some((f) => f.endsWith('.cjs')), 'CommonJS files are scanned');
    const offenders = files
      .map((f) => path.relative(root, f).split(path.sep).join('/'))
      .filter((rel) => rel !== SDK_INTERNALS_MODULE)
      .flatMap((rel) => sdkLibImports(readFileSync(path.join(root, rel), 'utf8')).map((s) => `${rel}: ${s}`));
    assert.deepEqual(offenders, []);
  });

  it('sees every way of importing a module, and not a path in a comment', () => {
    const text = [
      `import { a } from ${q('common/lib/proto-utils.js')};`,
      `import type { B } from ${qq('worker/lib/worker-options.js')};`,
      `export * from ${q('workflow/lib/workflow')};`,
      `import ${q('worker/lib/side-effect')};`,
      `const c = require(${q('worker/lib/workflow/vm.js')});`,
      `const d = require.resolve(${q('interceptors-opentelemetry/lib/workflow-interceptors')});`,
      `const e = await import(${q('common/lib/time.js')});`,
      `import { f } from ${q('common')};`,
      `// the SDK does this in ${SDK}/common/lib/proto-utils (a comment)`,
    ].join('\n');
    assert.deepEqual(sdkLibImports(text), [
      `${SDK}/common/lib/proto-utils.js`,
      `${SDK}/worker/lib/worker-options.js`,
      `${SDK}/workflow/lib/workflow`,
      `${SDK}/worker/lib/side-effect`,
      `${SDK}/worker/lib/workflow/vm.js`,
      `${SDK}/interceptors-opentelemetry/lib/workflow-interceptors`,
      `${SDK}/common/lib/time.js`,
    ]);
  });

  it('ESLint refuses an SDK lib/ import in any .ts file, a type import too', async () => {
    const eslint = new ESLint({ cwd: root });
    for (const file of ['platform/histories.ts', 'workflows/otel-tracing.ts', 'test/replay/replay.test.ts', 'scripts/record-histories.ts', 'bench/compare.ts']) {
      const head = `import { msToTs } from ${q('common/lib/time.js')};\nimport type { CompiledWorkerOptions } from ${q('worker/lib/worker-options.js')};\n`;
      const tail = '\nexport type SdkProbe = [typeof msToTs, CompiledWorkerOptions];\n';
      const [result] = await eslint.lintText(`${head}${readFileSync(path.join(root, file), 'utf8')}${tail}`, { filePath: path.join(root, file) });
      const refused = (result?.messages ?? []).filter((m) => m.ruleId === 'no-restricted-imports').map((m) => m.message);
      assert.equal(refused.length, 2, `${file}: ${refused.join('\n')}`);
      for (const m of refused) assert.match(m, /public surface only/);
    }
  });
});
