/**
 * Every package Steward's code imports is declared in package.json: production code (and the
 * workflow bundle) in `dependencies`, tests, benchmarks and scripts in either list. A package
 * that is only there because another one brought it along (a transitive dependency) can vanish
 * or change version with that other package's next release; declared, it cannot.
 */
import assert from 'node:assert/strict';
import { builtinModules } from 'node:module';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';

const root = fileURLToPath(new URL('../..', import.meta.url));
const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { dependencies: Record<string, string>; devDependencies: Record<string, string> };

/** Where the product's code lives (the runtime migrations' engine bridge in prisma/ included). */
const PRODUCTION = ['activities', 'adapters', 'common', 'config', 'domain', 'platform', 'services', 'workers', 'workflows', 'prisma', 'prisma.config.ts'];
/** Tests, benchmarks, scripts and the tools' own configuration. */
const DEVELOPMENT = ['test', 'bench', 'scripts', 'eslint.config.js'];
/** Top-level entries that hold no code of Steward's. */
const NOT_CODE = new Set(['node_modules', 'generated', 'docs', 'specs', '.git']);
const SOURCE = /\.(ts|mts|cts|tsx|js|mjs|cjs|jsx)$/;

function sources(entry: string): string[] {
  const p = path.join(root, entry);
  if (!statSync(p, { throwIfNoEntry: false })) return [];
  if (!statSync(p).isDirectory()) return SOURCE.test(p) && !p.endsWith('.d.ts') ? [p] : [];
  return readdirSync(p).flatMap((name) => (name === 'node_modules' || name === 'generated' ? [] : sources(path.join(entry, name))));
}

/** The package a specifier names (`@scope/name/sub` -> `@scope/name`), or undefined for a relative path or a Node built-in. */
export function packageOf(specifier: string): string | undefined {
  if (specifier.startsWith('.') || specifier.startsWith('/') || specifier.startsWith('node:') || specifier.startsWith('#')) return undefined;
  const name = specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0]!;
  return builtinModules.includes(name) ? undefined : name;
}

/** The packages a file imports (static and dynamic imports, re-exports, require calls), type-only imports included: their types come from the package too. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const found = new Set<string>();
  for (const m of text.matchAll(/(?:^|\s)(?:import|export)\s[^'";]*?from\s+['"]([^'"]+)['"]|(?:^|[^.\w])import\s*\(\s*['"]([^'"]+)['"]\s*\)|(?:^|\s)import\s+['"]([^'"]+)['"]|require(?:\.resolve)?\(\s*['"]([^'"]+)['"]\s*\)/gm)) {
    const name = packageOf(m[1] ?? m[2] ?? m[3] ?? m[4] ?? '');
    if (name) found.add(name);
  }
  return [...found];
}

describe('declared dependencies', () => {
  it('reads package names from specifiers', () => {
    assert.equal(packageOf('@temporalio/client'), '@temporalio/client');
    assert.equal(packageOf('@temporalio/common/lib/proto-utils.js'), '@temporalio/common');
    assert.equal(packageOf('zod/v4'), 'zod');
    assert.equal(packageOf('node:fs'), undefined);
    assert.equal(packageOf('fs'), undefined);
    assert.equal(packageOf('../domain/db.js'), undefined);
  });

  it('every top-level folder or file with code is checked below (a new one cannot be missed)', () => {
    const known = new Set([...PRODUCTION, ...DEVELOPMENT, ...NOT_CODE]);
    const unchecked = readdirSync(root).filter((name) => !known.has(name) && sources(name).length > 0);
    assert.deepEqual(unchecked, [], 'list these in PRODUCTION or DEVELOPMENT');
    for (const entry of NOT_CODE) if (entry !== 'node_modules' && entry !== 'generated' && entry !== '.git') assert.deepEqual(sources(entry), [], `${entry}/ holds code: list it in PRODUCTION or DEVELOPMENT`);
  });

  it('production code imports only packages in dependencies', () => {
    const missing = new Map<string, string[]>();
    for (const file of PRODUCTION.flatMap(sources)) {
      for (const name of importsOf(file)) {
        if (pkg.dependencies[name] === undefined) missing.set(name, [...(missing.get(name) ?? []), path.relative(root, file)]);
      }
    }
    assert.deepEqual(Object.fromEntries(missing), {}, 'add these to package.json "dependencies" (npm install --save-exact NAME@VERSION)');
  });

  it('tests, benchmarks and scripts import only declared packages', () => {
    const declared = { ...pkg.dependencies, ...pkg.devDependencies };
    const missing = new Map<string, string[]>();
    for (const file of DEVELOPMENT.flatMap(sources)) {
      for (const name of importsOf(file)) {
        if (declared[name] === undefined) missing.set(name, [...(missing.get(name) ?? []), path.relative(root, file)]);
      }
    }
    assert.deepEqual(Object.fromEntries(missing), {}, 'add these to package.json (devDependencies for test-only packages)');
  });
});
