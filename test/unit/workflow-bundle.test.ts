/**
 * The workflow bundle stays small and its modules keep no state at module scope. Every module
 * of it a worker thread loads once; those not preloaded are instantiated again for each
 * workflow the worker keeps in its cache (zod alone once cost about half of Steward's RSS
 * growth per idle session; bench/compare.ts), so workflows check input with the plain patterns
 * of common/limits.ts instead. The workflows are preloaded, shared by every run of a thread:
 * state at their module scope would pass from one run to another.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { runInNewContext } from 'node:vm';
import ts from 'typescript';
import { latin1Code } from '../../workers/bundle.js';
import { testBundle } from '../helpers/steward.js';

const repoRoot = fileURLToPath(new URL('../..', import.meta.url));

/**
 * What a module keeps at module scope that could carry one run's state into another (module
 * scope of a preloaded module is shared by every run of the thread): `let` and `var`, a
 * collection made there (`new Map()`, ...), a statement run for its effect.
 */
function moduleScopeState(name: string, text: string): string[] {
  const source = ts.createSourceFile(name, text, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const where = (n: ts.Node) => `${name}:${source.getLineAndCharacterOfPosition(n.getStart()).line + 1}`;
  for (const st of source.statements) {
    if (ts.isVariableStatement(st)) {
      if (!(st.declarationList.flags & ts.NodeFlags.Const)) found.push(`${where(st)}: let/var at module scope`);
      for (const d of st.declarationList.declarations) {
        const init = d.initializer;
        if (init && ts.isNewExpression(init) && /^(Map|Set|WeakMap|WeakSet|Array)$/.test(init.expression.getText(source))) found.push(`${where(st)}: a ${init.expression.getText(source)} at module scope`);
      }
    } else if (ts.isExpressionStatement(st)) {
      found.push(`${where(st)}: a statement run at module scope`);
    }
  }
  return found;
}

describe('the workflow bundle', () => {
  it('carries no zod and no I/O library', async () => {
    const { code } = await testBundle();
    for (const heavy of ['node_modules/zod/', 'node_modules/@prisma/', 'node_modules/grammy/', 'node_modules/discord.js/', 'node_modules/@octokit/', 'node_modules/ai/']) {
      assert.ok(!code.includes(heavy), `${heavy} is in the workflow bundle`);
    }
  });

  it('preloads the OpenTelemetry interceptor module, so every cached run shares its one span-context storage', async () => {
    // each AsyncLocalStorage a run enables adds a property to every promise of the thread: one
    // per cached traced run made the workflow thread's heap grow with the square of the cache
    const { code } = await testBundle();
    const preload = /function preloadModules\(\) \{([^}]*)\}/.exec(code)?.[1] ?? '';
    assert.match(preload, /"\.\/workflows\/otel-interceptors\.ts"/, 'the interceptor module is in preloadModules');
  });

  it('preloads the workflows, whose modules keep no state at module scope (every run of a thread shares them)', async () => {
    const { code } = await testBundle();
    const preload = /function preloadModules\(\) \{([^}]*)\}/.exec(code)?.[1] ?? '';
    assert.match(preload, /"\.\/workflows\/index\.ts"/, 'workflows/index.ts is in preloadModules');
    // Steward's own modules in the bundle, by the ids webpack gives them
    const own = [...new Set([...code.matchAll(/^\/\*\*\*\/ "\.\/((?:workflows|common)\/[^"]+\.ts)"/gm)].map((m) => m[1]!))];
    assert.ok(own.includes('workflows/chat/session.ts') && own.length >= 10, `the bundle's own modules: ${own.join(', ')}`);
    // the interceptor module's one span-context storage is shared on purpose (see above)
    const state = own.filter((f) => f !== 'workflows/otel-interceptors.ts').flatMap((f) => moduleScopeState(f, readFileSync(path.join(repoRoot, f), 'utf8')));
    assert.deepEqual(state, []);
  });

  it('is Latin-1 throughout, so V8 keeps it at one byte a character', async () => {
    const { code } = await testBundle();
    const wide = [...code].filter((c) => c.charCodeAt(0) > 0xff);
    assert.deepEqual(wide, []);
    assert.ok(code.length > 1_000_000, `the bundle is ${code.length} characters`);
  });

  it('escapes what is past Latin-1 to the same values in strings, templates, regular expressions and comments', () => {
    const source = "// a comment \u2014 with a dash\nconst s = 'wait\u2026'; const t = `x \u2192 ${s}`; const r = /\u2026$/.test(s); const e = '\u{1F600}'; [s, t, r, e.length, 'caf\u00e9']";
    const escaped = latin1Code(source);
    assert.equal([...escaped].filter((c) => c.charCodeAt(0) > 0xff).length, 0);
    assert.ok(escaped.includes('caf\u00e9'), 'Latin-1 stays as it is');
    // (an array of this realm: the context's arrays have a prototype of their own)
    const run = (code: string) => Array.from(runInNewContext(code) as unknown[]);
    assert.deepEqual(run(escaped), run(source));
    assert.deepEqual(run(source), ['wait\u2026', 'x \u2192 wait\u2026', true, 2, 'caf\u00e9']);
  });

  it('the module-scope check finds state', () => {
    const text = 'let n = 0;\nconst seen = new Map<string, number>();\nconst ok = { a: 1 };\nregister();\nexport function f() { return [n, seen, ok]; }\n';
    assert.deepEqual(moduleScopeState('m.ts', text), ['m.ts:1: let/var at module scope', 'm.ts:2: a Map at module scope', 'm.ts:4: a statement run at module scope']);
  });
});
