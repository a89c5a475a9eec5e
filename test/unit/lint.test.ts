/**
 * The static checks CI enforces, run as a suite so a violation fails the test command: the
 * TypeScript compiler (strict, no emit) and ESLint (eslint.config.js: workflow purity, the
 * layers' import rules, no floating promises). And the rules themselves: a workflow module that
 * reaches for a Node built-in, the store or an impure module is refused, a type import is not.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import { ESLint } from 'eslint';

const root = fileURLToPath(new URL('../..', import.meta.url));
const require = createRequire(import.meta.url);

/** The value imports between the project's own modules (type-only imports are erased). */
function importGraph(folders: string[]): Map<string, string[]> {
  const files: string[] = [];
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir)) {
      const p = path.join(dir, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (p.endsWith('.ts') || p.endsWith('.tsx')) files.push(p);
    }
  };
  for (const f of folders) walk(path.join(root, f));
  const graph = new Map<string, string[]>();
  for (const f of files) {
    const deps: string[] = [];
    for (const m of readFileSync(f, 'utf8').matchAll(/^(?:import|export)\s+(type\s+)?[^;]*?\sfrom\s+'(\.[^']+)'/gms)) {
      if (!m[1]) deps.push(path.join(path.dirname(f), m[2]!.replace(/\.js$/, '.ts')));
    }
    graph.set(f, deps);
  }
  return graph;
}

/** Every import cycle in the graph, as the chain of files (relative to the root). */
function cyclesOf(graph: Map<string, string[]>): string[] {
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const cycles: string[] = [];
  const visit = (n: string): void => {
    state.set(n, 'open');
    stack.push(n);
    for (const d of graph.get(n) ?? []) {
      if (!graph.has(d)) continue;
      if (state.get(d) === 'open') cycles.push([...stack.slice(stack.indexOf(d)), d].map((f) => path.relative(root, f)).join(' -> '));
      else if (!state.has(d)) visit(d);
    }
    stack.pop();
    state.set(n, 'done');
  };
  for (const f of graph.keys()) if (!state.has(f)) visit(f);
  return cycles;
}

/** Run a Node script of a package; resolves with its exit status and output. */
function run(bin: string, args: string[]): Promise<{ status: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [bin, ...args], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    child.on('close', (status) => resolve({ status, output: output.trim() }));
  });
}

// the compiler runs in its own process while ESLint works in this one (two cores, half the wait)
const typeCheck = run(require.resolve('typescript/bin/tsc'), ['--noEmit', '-p', 'tsconfig.json']);

describe('static checks', () => {
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
        "import { readdirSync, readFileSync, statSync } from 'node:fs';",
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
    const policy = await lint(`${root}common/changes/policy/globs.ts`, "import { readFileSync } from 'node:fs';\nimport { pino } from 'pino';\nexport const io = [readFileSync, pino];");
    assert.equal(policy.length, 3, policy.join('\n'));
    assert.match(policy.join('\n'), /does no I\/O: no Node built-ins/);
    assert.match(policy.join('\n'), /imports only its own modules and zod, minimatch/);
    assert.deepEqual(await lint(`${root}common/changes/policy/policy.ts`, "import { minimatch } from 'minimatch';\nimport { parsePatch } from 'diff';\nexport const m = [minimatch, parsePatch];"), []);
    const matcherInWorkflow = await lint(workflowFile, "import { minimatch } from 'minimatch';\nimport { parsePatch } from 'diff';\nimport { matchesGlob } from '../../common/changes/policy.js';\nexport const m = [minimatch, parsePatch, matchesGlob];");
    assert.equal(matcherInWorkflow.length, 3, matcherInWorkflow.join('\n'));

    const domain = await lint(`${root}domain/blobs.ts`, "import { startSteward } from '../platform/start.js';\nexport const s = startSteward;");
    assert.equal(domain.length, 1, domain.join('\n'));
    assert.match(domain[0]!, /Nothing imports the runtime/);
    const upward = await lint(`${root}domain/blobs.ts`, "import { createActivities } from '../activities/index.js';\nimport type { TurnInput } from '../workflows/types.js';\nexport type A = [typeof createActivities, TurnInput];");
    assert.equal(upward.length, 1, upward.join('\n'));
    assert.match(upward[0]!, /imports no activity, service, adapter or workflow/);
    // a new function over 150 lines is refused
    const long = `export function tooLong(): number {\n  let n = 0;\n${'  n += 1;\n'.repeat(160)}  return n;\n}`;
    const [longResult] = await eslint.lintText(`${readFileSync(`${root}domain/blobs.ts`, 'utf8')}\n${long}\n`, { filePath: `${root}domain/blobs.ts` });
    assert.match((longResult?.messages ?? []).map((m) => `${m.ruleId}: ${m.message}`).join('\n'), /max-lines-per-function: Function 'tooLong' has too many lines \(16\d\)/);
    const adapter = await lint(`${root}adapters/telegram/adapter.ts`, "import { startSteward } from '../platform/start.js';\nexport const s = startSteward;");
    assert.match(adapter.join('\n'), /Nothing imports the runtime/);
  });

  it('has no import cycles between product modules (value imports)', () => {
    const folders = ['common', 'config', 'domain', 'workflows', 'activities', 'services', 'adapters', 'platform', 'workers'];
    const graph = importGraph(folders);
    assert.ok(graph.size > 80, `read ${graph.size} modules`);
    assert.deepEqual(cyclesOf(graph), []);
    // the check sees a cycle when there is one
    const a = path.join(root, 'domain/a.ts');
    const b = path.join(root, 'domain/b.ts');
    assert.deepEqual(cyclesOf(new Map([[a, [b]], [b, [a]]])), ['domain/a.ts -> domain/b.ts -> domain/a.ts']);
  });

  it('refuses Prisma queries above domain/ (adapters, activities, services, the runtime) and store imports in the chat adapters; domain functions pass', async () => {
    const eslint = new ESLint({ cwd: root });
    const store = async (file: string, tail: string) => {
      const [result] = await eslint.lintText(`${readFileSync(file, 'utf8')}\n${tail}\n`, { filePath: file });
      return (result?.messages ?? []).filter((m) => m.ruleId === 'no-restricted-syntax' || m.ruleId === '@typescript-eslint/no-restricted-imports').map((m) => m.message);
    };
    const query = 'export async function probe(db: Db): Promise<unknown> {\n  await db.$transaction(async () => undefined);\n  return db.message.findMany({ take: 1 });\n}';
    for (const file of ['adapters/telegram/adapter.ts', 'activities/chat.ts', 'services/changes.ts', 'platform/ops-cli.ts']) {
      const refused = await store(`${root}${file}`, query);
      assert.equal(refused.length, 2, `${file}: ${refused.join('\n')}`);
      for (const m of refused) assert.match(m, /Prisma queries live in domain\//);
    }
    // the same query in a store module is its home
    assert.deepEqual(await store(`${root}domain/store/sessions.ts`, query), []);
    // calling a domain function, or a Map's delete, is not a query
    assert.deepEqual(await store(`${root}services/chat/intake.ts`, "export async function probe(db: Db, m: Map<string, number>): Promise<void> {\n  m.delete('x');\n  await ensureSession(db, 's', { platform: 'cli', account: 'a', chatId: 'c' });\n}"), []);
    // a value import of the generated client is refused; a type import passes
    const generated = await store(`${root}adapters/telegram/adapter.ts`, "import { Prisma } from '../generated/prisma/sqlite/client.js';\nexport const p = Prisma;");
    assert.equal(generated.length, 1, generated.join('\n'));
    assert.deepEqual(await store(`${root}adapters/telegram/adapter.ts`, "import type { Message } from '../generated/prisma/sqlite/client.js';\nexport type M = Message;"), []);
    // a chat adapter imports no store module (it calls services/chat/); a type import passes
    const storeInAdapter = await store(`${root}adapters/telegram/sender.ts`, "import { deliverOnce } from '../../domain/outbox.js';\nimport { ensureSession } from '../../domain/store/sessions.js';\nexport const d = [deliverOnce, ensureSession];");
    assert.equal(storeInAdapter.length, 2, storeInAdapter.join('\n'));
    for (const m of storeInAdapter) assert.match(m, /Adapters translate only: no value from a store module/);
    assert.deepEqual(await store(`${root}adapters/discord/adapter.ts`, "import type { Db } from '../../domain/db.js';\nexport type D = Db;"), []);
    // services import no adapter
    const upward = await store(`${root}services/changes.ts`, "import { createTelegramAdapter } from '../adapters/telegram/index.js';\nexport const i = createTelegramAdapter;");
    assert.match(upward.join('\n'), /imports no adapter/);
  });

  it('refuses a value from a store module in adapters (domain/store/ and the domain modules that run queries); types, services and other domain modules pass', async () => {
    const eslint = new ESLint({ cwd: root });
    const file = `${root}adapters/http/tasks.ts`;
    const lint = async (head: string) => {
      const [result] = await eslint.lintText(`${head}\n${readFileSync(file, 'utf8')}`, { filePath: file });
      return (result?.messages ?? []).filter((m) => m.ruleId === '@typescript-eslint/no-restricted-imports').map((m) => m.message);
    };
    const refused = await lint(
      [
        "import { listShellRows } from '../../domain/store/shells.js';",
        "import { writeReceipt } from '../../domain/receipts.js';",
        "import { memoryLine } from '../../domain/knowledge/memory.js';",
        'export const probe = [listShellRows, writeReceipt, memoryLine];',
      ].join('\n'),
    );
    // domain/store/ by its folder; receipts and knowledge/memory because their source runs Prisma queries
    assert.equal(refused.length, 3, refused.join('\n'));
    for (const m of refused) assert.match(m, /Adapters translate only: no value from a store module/);
    const passes = await lint(
      [
        "import type { Db } from '../../domain/db.js';",
        "import type { ShellRow } from '../../domain/store/shells.js';",
        "import { WhatIfPolicySchema } from '../../domain/changes/what-if.js';",
        "import { createTaskService } from '../../services/tasks.js';",
        'export type Probe = [Db, ShellRow];',
        'export const probe = [WhatIfPolicySchema, createTaskService];',
      ].join('\n'),
    );
    assert.deepEqual(passes, [], 'type imports, a domain module without queries and a service pass');
  });

  it('type-checks (tsc --noEmit, strict)', async () => {
    const r = await typeCheck;
    assert.equal(r.status, 0, r.output);
  });
});
