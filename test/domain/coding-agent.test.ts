/**
 * The coding agent: the built-in tool loop driven by the scripted OpenAI-compatible double
 * (through the real AI SDK provider), in real git work trees, with commands in the real
 * bubblewrap sandbox; and an external agent command in the same sandbox.
 * Run: STEWARD_TEST_PG=0 ./steward test test/domain/coding-agent.test.ts
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, lstatSync, readdirSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import {
  AgentAbortedError,
  checkAgentPath,
  runBuiltinAgent,
  runExternalAgent,
  scanPatch,
  taskPrompt,
  type AgentLimits,
  type AgentRunResult,
  type AgentTask,
} from '../../domain/changes/coding-agent.js';
import { createModelRegistry, type ModelRegistry } from '../../domain/model.js';
import { sandboxAvailable } from '../../domain/sandbox.js';
import { startModelServer, type ModelServer, type RecordedRequest } from '../helpers/model-server.js';
import { needs } from '../helpers/requirements.js';

const MODEL = 'openai-compatible:test-model';

const TASK: AgentTask = {
  changeId: 'chg-test-1',
  goal: 'Rename greet to welcome',
  scope: ['src/'],
  acceptance: ['src/app.ts exports welcome'],
  constraints: ['no new dependencies'],
  plan: { steps: ['rename the function', 'add a note'], files: ['src/app.ts', 'docs/notes/NEW.md'], checks: ['cat src/app.ts'] },
};

const LIMITS: AgentLimits = {
  maxSteps: 10,
  commands: ['sh', 'cat', 'ls', 'sleep', 'git'],
  commandTimeoutMs: 15_000,
  maxOutputBytes: 64 * 1024,
};

const APP_TS = "export function greet(name: string): string {\n  return `hello ${name}`;\n}\n";

// --- helpers ------------------------------------------------------------------------------

const cleanup: string[] = [];
const rand = () => randomBytes(6).toString('hex');

async function tempDir(prefix: string): Promise<string> {
  const d = await mkdtemp(path.join(tmpdir(), prefix));
  cleanup.push(d);
  return d;
}

function git(cwd: string, ...args: string[]) {
  return execFileSync('git', ['-c', 'user.name=Test', '-c', 'user.email=test@example.com', '-c', 'init.defaultBranch=main', ...args], { cwd, stdio: 'pipe' }).toString();
}

/** A git repository with a couple of committed files. */
async function makeWorkTree(): Promise<string> {
  const dir = await tempDir('steward-agent-wt-');
  git(dir, 'init', '-q');
  await writeFile(path.join(dir, 'README.md'), '# Demo\n\nA demo repository.\n');
  await mkdir(path.join(dir, 'src'));
  await writeFile(path.join(dir, 'src/app.ts'), APP_TS);
  git(dir, 'add', '.');
  git(dir, 'commit', '-qm', 'init');
  return dir;
}

let callSeq = 0;
type Call = [name: string, args: unknown];
/** One scripted model step: the tool calls it makes (ids returned in order). */
function step(server: ModelServer, calls: Call[], text?: string): string[] {
  const ids = calls.map(() => `call_${++callSeq}`);
  server.enqueue({
    ...(text ? { text } : {}),
    toolCalls: calls.map(([name, args], i) => ({ id: ids[i]!, name, arguments: typeof args === 'string' ? args : JSON.stringify(args) })),
  });
  return ids;
}

type OpenAIMessage = { role: string; content?: unknown; tool_call_id?: string };
const messagesOf = (r: RecordedRequest | undefined): OpenAIMessage[] => {
  assert.ok(r, 'the model server saw the request');
  return (r.body as { messages: OpenAIMessage[] }).messages;
};
const textOf = (c: unknown): string =>
  typeof c === 'string' ? c : Array.isArray(c) ? c.map((p: { text?: string }) => p.text ?? '').join('') : JSON.stringify(c ?? '');

/** What the model was told for each tool call, from the history of the last request. */
function toolReplies(server: ModelServer): Map<string, string> {
  const out = new Map<string, string>();
  for (const r of server.requests) for (const m of messagesOf(r)) if (m.role === 'tool' && m.tool_call_id) out.set(m.tool_call_id, textOf(m.content));
  return out;
}

function reply(server: ModelServer, id: string): string {
  const t = toolReplies(server).get(id);
  assert.ok(t !== undefined, `the model got a result for ${id}`);
  return t;
}

const allBodies = (server: ModelServer) => JSON.stringify(server.requests.map((r) => r.body));

// --- suite --------------------------------------------------------------------------------

describe('coding agent', { skip: await needs('bubblewrap') }, () => {
  let server: ModelServer;
  let models: ModelRegistry;

  before(async () => {
    const s = await sandboxAvailable();
    assert.ok(s.ok, `the sandbox is available here (${s.ok ? '' : s.reason})`);
  });
  beforeEach(async () => {
    server = await startModelServer();
    models = createModelRegistry({ openaiCompatible: { baseURL: server.baseURL } });
  });
  afterEach(async () => {
    await server.close();
  });
  after(async () => {
    for (const d of cleanup) await rm(d, { recursive: true, force: true });
  });

  const run = (workTree: string, extra: Partial<Parameters<typeof runBuiltinAgent>[0]> = {}) =>
    runBuiltinAgent({ models, model: MODEL, workTree, task: TASK, limits: LIMITS, signal: new AbortController().signal, ...extra });

  it('taskPrompt lays out the task', () => {
    const p = taskPrompt(TASK);
    for (const s of ['chg-test-1', 'Rename greet to welcome', '- src/', 'src/app.ts exports welcome', 'no new dependencies', '1. rename the function', '2. add a note', '- docs/notes/NEW.md', '- cat src/app.ts']) {
      assert.ok(p.includes(s), `the prompt holds ${s}`);
    }
  });

  it('lists, reads, searches, writes, patches, runs a command and finishes', async () => {
    const wt = await makeWorkTree();
    const beats: number[] = [];
    const patch = [
      'diff --git a/src/app.ts b/src/app.ts',
      '--- a/src/app.ts',
      '+++ b/src/app.ts',
      '@@ -1,3 +1,3 @@',
      '-export function greet(name: string): string {',
      '+export function welcome(name: string): string {',
      '   return `hello ${name}`;',
      ' }',
      '',
    ].join('\n');
    const [list, read] = step(server, [
      ['list_files', {}],
      ['read_file', { path: 'src/app.ts' }],
    ], 'Looking around.');
    const [lit, re] = step(server, [
      ['search', { pattern: 'greet' }],
      ['search', { pattern: 'gr[e]+t\\(', regex: true, path: 'src' }],
    ]);
    const [write, apply] = step(server, [
      ['write_file', { path: 'docs/notes/NEW.md', content: '# New\n\nwelcome replaces greet.\n' }],
      ['apply_patch', { patch }],
    ]);
    const [cmd, cmd2] = step(server, [
      ['run_command', { argv: ['cat', 'src/app.ts'] }],
      ['run_command', { argv: ['sh', '-c', 'echo built > build.log; ls docs/notes'] }],
    ]);
    step(server, [['finish', { summary: 'Renamed greet to welcome and added a note.' }]]);

    const r = await run(wt, { heartbeat: (d) => beats.push(d.step) });
    assert.equal(r.finished, true);
    assert.equal(r.summary, 'Renamed greet to welcome and added a note.');
    assert.equal(r.steps, 5);
    assert.deepEqual(r.blocked, []);
    assert.ok(r.usage.total > 0 && r.usage.input > 0);
    assert.deepEqual(beats, [1, 2, 3, 4, 5], 'one heartbeat per step');

    // the files
    assert.equal(await readFile(path.join(wt, 'docs/notes/NEW.md'), 'utf8'), '# New\n\nwelcome replaces greet.\n');
    assert.equal(await readFile(path.join(wt, 'src/app.ts'), 'utf8'), APP_TS.replace('greet', 'welcome'));
    assert.equal(await readFile(path.join(wt, 'build.log'), 'utf8'), 'built\n');
    assert.match(git(wt, 'status', '--porcelain'), /M src\/app\.ts/);

    // what the model was told
    assert.match(reply(server, list!), /^README\.md$/m);
    assert.match(reply(server, list!), /^src\/$/m);
    assert.match(reply(server, list!), /^src\/app\.ts$/m);
    assert.doesNotMatch(reply(server, list!), /\.git/);
    assert.ok(reply(server, read!).includes('src/app.ts: lines 1-3 of 3\nexport function greet'));
    assert.match(reply(server, lit!), /^src\/app\.ts:1: export function greet/m);
    assert.match(reply(server, re!), /1 matching line\(s\) in 1 file/);
    assert.match(reply(server, write!), /Created docs\/notes\/NEW\.md/);
    assert.match(reply(server, apply!), /Applied the patch to 1 file\(s\): src\/app\.ts/);
    assert.match(reply(server, cmd!), /^exit code 0/);
    assert.ok(reply(server, cmd!).includes('export function welcome'));
    assert.match(reply(server, cmd2!), /NEW\.md/);

    // the transcript has every step and every tool call
    const kinds = r.transcript.map((e) => (e.kind === 'tool' ? `tool:${e.tool}:${e.ok}` : e.kind));
    assert.deepEqual(kinds, [
      'model',
      'tool:list_files:true',
      'tool:read_file:true',
      'model',
      'tool:search:true',
      'tool:search:true',
      'model',
      'tool:write_file:true',
      'tool:apply_patch:true',
      'model',
      'tool:run_command:true',
      'tool:run_command:true',
      'model',
      'tool:finish:true',
    ]);
    assert.match(r.transcript[0]!.text, /^step 1: Looking around\. → list_files, read_file$/);
    for (const e of r.transcript) assert.ok(!Number.isNaN(Date.parse(e.at)));
    // the request carried the system prompt, the task, and the tools
    const first = messagesOf(server.requests[0]);
    assert.equal(first[0]?.role, 'system');
    assert.ok(textOf(first[1]?.content).includes('Rename greet to welcome'));
    const tools = (server.requests[0]!.body as { tools: Array<{ function: { name: string } }> }).tools.map((t) => t.function.name);
    assert.deepEqual(tools.sort(), ['apply_patch', 'finish', 'list_files', 'read_file', 'run_command', 'search', 'write_file']);
  });

  it('ADVERSARIAL: every escape attempt is blocked, recorded, told to the model, and has no effect', async () => {
    const wt = await makeWorkTree();
    const outsideDir = await tempDir('steward-agent-outside-');
    const secret = `TOP-SECRET-${rand()}`;
    const secretFile = path.join(outsideDir, 'secret.txt');
    await writeFile(secretFile, `${secret}\n`);
    await chmod(secretFile, 0o600);
    const tag = rand();
    const absTarget = path.join(tmpdir(), `outside-${tag}`);
    const escapeTarget = path.join(path.dirname(wt), `escape-${tag}.txt`);
    const patchEscapeTarget = path.join(path.dirname(wt), `x-${tag}`);
    // links planted in the work tree
    await symlink(outsideDir, path.join(wt, 'out-dir'));
    await symlink(secretFile, path.join(wt, 'secret-link'));
    await symlink('.git', path.join(wt, 'git-link'));
    await symlink(path.join(outsideDir, 'not-yet', 'file'), path.join(wt, 'dangling'));
    const readmeBefore = await readFile(path.join(wt, 'README.md'), 'utf8');

    type Attempt = { name: string; call: Call; reason: RegExp; effect?: () => Promise<void> | void };
    const noFile = (p: string) => () => assert.equal(existsSync(p), false, `${p} was not created`);
    const attempts: Attempt[] = [
      { name: 'write an absolute path', call: ['write_file', { path: absTarget, content: 'pwned' }], reason: /absolute-path/, effect: noFile(absTarget) },
      { name: 'write ../escape', call: ['write_file', { path: `../escape-${tag}.txt`, content: 'pwned' }], reason: /escapes-work-tree/, effect: noFile(escapeTarget) },
      { name: 'write through a directory symlink to outside', call: ['write_file', { path: 'out-dir/pwned.txt', content: 'pwned' }], reason: /symlink-escape/, effect: noFile(path.join(outsideDir, 'pwned.txt')) },
      { name: 'read a host secret through a symlink', call: ['read_file', { path: 'secret-link' }], reason: /symlink-escape/ },
      {
        name: 'overwrite a host file through a symlink',
        call: ['write_file', { path: 'secret-link', content: 'overwritten' }],
        reason: /symlink-escape/,
        effect: async () => assert.equal(await readFile(secretFile, 'utf8'), `${secret}\n`),
      },
      { name: 'read /etc/shadow', call: ['read_file', { path: '/etc/shadow' }], reason: /absolute-path/ },
      { name: 'read via src/../../', call: ['read_file', { path: `src/../../${path.basename(outsideDir)}/secret.txt` }], reason: /escapes-work-tree/ },
      { name: 'write a git hook', call: ['write_file', { path: '.git/hooks/pre-commit', content: '#!/bin/sh\necho pwned\n' }], reason: /git-metadata/, effect: noFile(path.join(wt, '.git/hooks/pre-commit')) },
      { name: 'write .GIT/config (letter case)', call: ['write_file', { path: '.GIT/config', content: '[core]\n' }], reason: /git-metadata/ },
      { name: 'write a git hook through a symlink to .git', call: ['write_file', { path: 'git-link/hooks/post-checkout', content: '#!/bin/sh\n' }], reason: /git-metadata/, effect: noFile(path.join(wt, '.git/hooks/post-checkout')) },
      { name: 'write through a dangling symlink', call: ['write_file', { path: 'dangling', content: 'pwned' }], reason: /symlink/, effect: noFile(path.join(outsideDir, 'not-yet')) },
      { name: 'list the parent directory', call: ['list_files', { path: '..' }], reason: /escapes-work-tree/ },
      { name: 'list a directory outside through a symlink', call: ['list_files', { path: 'out-dir' }], reason: /symlink-escape/ },
      { name: 'search outside through a symlink', call: ['search', { pattern: 'TOP-SECRET', path: 'out-dir' }], reason: /symlink-escape/ },
      { name: 'search /etc', call: ['search', { pattern: 'root', path: '/etc' }], reason: /absolute-path/ },
      { name: 'run a command not on the allowlist', call: ['run_command', { argv: ['curl', 'http://example.com'] }], reason: /not-allowlisted/ },
      { name: 'run an allowlisted name by path', call: ['run_command', { argv: ['/bin/sh', '-c', 'echo hi'] }], reason: /not-allowlisted/ },
      {
        name: 'patch ../x',
        call: ['apply_patch', { patch: `--- /dev/null\n+++ b/../x-${tag}\n@@ -0,0 +1 @@\n+pwned\n` }],
        reason: /escapes-work-tree/,
        effect: noFile(patchEscapeTarget),
      },
      {
        name: 'patch a git hook',
        call: ['apply_patch', { patch: `diff --git a/.git/hooks/pre-push b/.git/hooks/pre-push\nnew file mode 100755\n--- /dev/null\n+++ b/.git/hooks/pre-push\n@@ -0,0 +1 @@\n+echo pwned\n` }],
        reason: /git-metadata/,
        effect: noFile(path.join(wt, '.git/hooks/pre-push')),
      },
      {
        name: 'patch that makes a symlink to /etc/passwd',
        call: ['apply_patch', { patch: `diff --git a/evil b/evil\nnew file mode 120000\n--- /dev/null\n+++ b/evil\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n` }],
        reason: /symlink/,
        effect: noFile(path.join(wt, 'evil')),
      },
      {
        name: 'patch whose second file escapes after a legitimate first',
        call: [
          'apply_patch',
          { patch: `--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# Demo\n+# Pwned\n--- a/../x-${tag}\n+++ b/../x-${tag}\n@@ -0,0 +1 @@\n+pwned\n` },
        ],
        reason: /escapes-work-tree/,
        effect: async () => {
          assert.equal(await readFile(path.join(wt, 'README.md'), 'utf8'), readmeBefore, 'all or nothing: README untouched');
          noFile(patchEscapeTarget)();
        },
      },
      {
        name: 'patch through a directory symlink to outside',
        call: ['apply_patch', { patch: `--- /dev/null\n+++ b/out-dir/from-patch.txt\n@@ -0,0 +1 @@\n+pwned\n` }],
        reason: /symlink-escape/,
        effect: noFile(path.join(outsideDir, 'from-patch.txt')),
      },
    ];
    // Attempts the tool layer lets through, contained by the sandbox (effects checked below).
    const plantedLink = ['run_command', { argv: ['sh', '-c', 'ln -s /etc/passwd planted-link && echo planted'] }] as Call;
    const contained: Array<{ name: string; call: Call; check: (reply: string) => Promise<void> | void }> = [
      {
        name: 'cat the host secret from a command',
        call: ['run_command', { argv: ['cat', secretFile] }],
        check: (t) => {
          assert.ok(!t.includes(secret));
          assert.match(t, /^Error: exit code [1-9]/);
        },
      },
      {
        name: 'write outside from a shell',
        call: ['run_command', { argv: ['sh', '-c', `echo pwned > ${path.join(outsideDir, 'via-sh.txt')}; echo pwned > ${absTarget}-sh; echo pwned > ${escapeTarget}-sh`] }],
        check: () => {
          for (const p of [path.join(outsideDir, 'via-sh.txt'), `${absTarget}-sh`, `${escapeTarget}-sh`]) assert.equal(existsSync(p), false, `${p} was not created`);
        },
      },
      {
        name: 'plant a git hook from a shell',
        call: ['run_command', { argv: ['sh', '-c', 'echo "#!/bin/sh" > .git/hooks/pre-commit; git config core.fsmonitor "touch /tmp/pwned"'] }],
        check: async (t) => {
          assert.match(t, /Read-only file system/);
          assert.equal(existsSync(path.join(wt, '.git/hooks/pre-commit')), false);
          assert.ok(!(await readFile(path.join(wt, '.git/config'), 'utf8')).includes('fsmonitor'));
        },
      },
    ];

    // Step 1: the attempts, one call each; step 2: the contained ones and a link planted by a
    // command; step 3: reading through the planted link, and searching the whole tree for the
    // secret; step 4: finish.
    const ids = step(server, attempts.map((a) => a.call));
    const containedIds = step(server, [...contained.map((c) => c.call), plantedLink]);
    const [viaPlanted, searchAll] = step(server, [
      ['read_file', { path: 'planted-link' }],
      ['search', { pattern: 'TOP-SECRET' }],
    ]);
    step(server, [['finish', { summary: 'tried my best' }]]);

    const r = await run(wt);
    assert.equal(r.finished, true);

    let blocked = 0;
    for (const [i, a] of attempts.entries()) {
      const entry = r.blocked[i];
      assert.ok(entry && entry.tool === a.call[0] && a.reason.test(entry.reason), `${a.name}: recorded in blocked[] (got ${JSON.stringify(entry)})`);
      const told = reply(server, ids[i]!);
      assert.match(told, /^BLOCKED \(/, `${a.name}: the model was told`);
      assert.match(told, a.reason);
      await a.effect?.();
      blocked++;
    }
    for (const [i, c] of contained.entries()) await c.check(reply(server, containedIds[i]!));
    assert.match(reply(server, containedIds[contained.length]!), /planted/);
    assert.equal(lstatSync(path.join(wt, 'planted-link')).isSymbolicLink(), true, 'the command could make a link in the work tree');
    assert.match(reply(server, viaPlanted!), /^BLOCKED \(symlink-escape\)/, 'a link planted by a command is not followed out');
    assert.equal(r.blocked.at(-1)?.tool, 'read_file');
    assert.match(reply(server, searchAll!), /^0 matching line/, 'search does not follow links out of the tree');
    blocked++;

    // the record
    const blockedEvents = r.transcript.filter((e) => e.kind === 'blocked');
    assert.equal(blockedEvents.length, attempts.length + 1);
    assert.equal(r.blocked.length, attempts.length + 1);
    // nothing leaked to the model, nothing changed outside or in .git
    assert.ok(!allBodies(server).includes(secret), 'the secret never reached the model');
    assert.equal(await readFile(secretFile, 'utf8'), `${secret}\n`);
    assert.deepEqual(readdirSync(outsideDir).sort(), ['secret.txt']);
    assert.equal(git(wt, 'status', '--porcelain', '--', '.git').trim(), '');
    assert.deepEqual(
      readdirSync(path.join(wt, '.git/hooks')).filter((f) => !f.endsWith('.sample')),
      [],
      'no hook was planted',
    );
    const tried = attempts.length + 1 + contained.length;
    const refused = blocked;
    console.log(`adversarial: ${tried} tried, ${refused + contained.length} blocked (${refused} refused by the tools and recorded, ${contained.length} contained by the sandbox)`);
  });

  it('invalid tool input goes back to the model as an error and does nothing', async () => {
    const wt = await makeWorkTree();
    const [noContent, noPath, emptyArgv, badPatch, broken, unknown, badOffset] = step(server, [
      ['write_file', { path: 'x.txt' }],
      ['read_file', {}],
      ['run_command', { argv: [] }],
      ['apply_patch', { patch: 42 }],
      ['write_file', '{"path": "y.txt", "content": '],
      ['delete_everything', { really: true }],
      ['read_file', { path: 'README.md', offset: 0 }],
    ]);
    const [notAPatch, badRegex] = step(server, [
      ['apply_patch', { patch: 'just some words\n' }],
      ['search', { pattern: '(unclosed', regex: true }],
    ]);
    step(server, [], 'Nothing more to do.');
    const r = await run(wt);
    assert.equal(r.finished, true);
    assert.equal(r.summary, 'Nothing more to do.', 'a step without tool calls ends the run with its text');
    assert.deepEqual(r.blocked, []);
    assert.match(reply(server, noContent!), /^Error: Invalid input for write_file: content: .*Nothing was done\.$/);
    assert.match(reply(server, noPath!), /^Error: Invalid input for read_file: path:/);
    assert.match(reply(server, emptyArgv!), /^Error: Invalid input for run_command: argv: argv is empty/);
    assert.match(reply(server, badPatch!), /^Error: Invalid input for apply_patch: patch:/);
    assert.match(reply(server, broken!), /^Error: /);
    assert.match(reply(server, unknown!), /^Error: /);
    assert.match(reply(server, unknown!), /delete_everything/);
    assert.match(reply(server, badOffset!), /^Error: Invalid input for read_file: offset:/);
    assert.match(reply(server, notAPatch!), /^Error: No file headers found/);
    assert.match(reply(server, badRegex!), /^Error: Invalid regular expression/);
    assert.equal(existsSync(path.join(wt, 'x.txt')), false);
    assert.equal(existsSync(path.join(wt, 'y.txt')), false);
    assert.equal(git(wt, 'status', '--porcelain').trim(), '', 'the work tree is untouched');
    const failed = r.transcript.filter((e) => e.kind === 'tool' && e.ok === false);
    assert.equal(failed.length, 9);
  });

  it('read_file is size-capped and says where to continue; big and binary files are handled', async () => {
    const wt = await makeWorkTree();
    const lines = Array.from({ length: 200 }, (_, i) => `line ${i + 1} ${'x'.repeat(20)}`);
    await writeFile(path.join(wt, 'big.txt'), `${lines.join('\n')}\n`);
    await writeFile(path.join(wt, 'blob.bin'), Buffer.from([1, 2, 0, 3, 4]));
    const [first, next, window, bin] = step(server, [
      ['read_file', { path: 'big.txt' }],
      ['read_file', { path: 'big.txt', offset: 150 }],
      ['read_file', { path: 'big.txt', offset: 10, limit: 2 }],
      ['read_file', { path: 'blob.bin' }],
    ]);
    const [slow] = step(server, [['search', { pattern: '(a+)+$', regex: true }]]);
    step(server, [['finish', { summary: 'read' }]]);
    await writeFile(path.join(wt, 'evil.txt'), `${'a'.repeat(40)}b\n`);
    const started = Date.now();
    const r = await run(wt, { limits: { ...LIMITS, maxReadBytes: 1000 } });
    assert.equal(r.finished, true);
    const t1 = reply(server, first!);
    assert.match(t1, /^big\.txt: lines 1-(\d+) of 200\n/);
    assert.ok(Buffer.byteLength(t1) < 1200, 'capped near maxReadBytes');
    assert.match(t1, /continue with offset=\d+\)$/);
    assert.match(reply(server, next!), /^big\.txt: lines 150-\d+ of 200\nline 150 /);
    assert.equal(reply(server, window!), `big.txt: lines 10-11 of 200\n${lines[9]}\n${lines[10]}\n… (continue with offset=12)`);
    assert.match(reply(server, bin!), /^Error: blob\.bin is a binary file/);
    // a catastrophic regex is interrupted by the search's time budget
    assert.match(reply(server, slow!), /stopped after 3000 ms \(the pattern is too slow on evil\.txt\)/);
    assert.ok(Date.now() - started < 10_000);
  });

  it('steering reaches the model as a user message before the next step', async () => {
    const wt = await makeWorkTree();
    let calls = 0;
    const takeSteers = async () => (++calls === 2 ? ['Also mention the README.'] : []);
    const [list] = step(server, [['list_files', {}]]);
    step(server, [['finish', { summary: 'done, README mentioned' }]]);
    const r = await run(wt, { takeSteers });
    assert.equal(r.finished, true);
    assert.equal(calls, 2);
    const m1 = messagesOf(server.requests[0]);
    assert.ok(!JSON.stringify(m1).includes('Also mention the README.'));
    const m2 = messagesOf(server.requests[1]);
    const last = m2.at(-1);
    assert.equal(last?.role, 'user');
    assert.equal(textOf(last?.content), 'Also mention the README.');
    assert.equal(m2.at(-2)?.role, 'tool');
    assert.equal(m2.at(-2)?.tool_call_id, list);
    assert.deepEqual(
      r.transcript.map((e) => e.kind),
      ['model', 'tool', 'steer', 'model', 'tool'],
    );
    assert.equal(r.transcript[2]?.text, 'Also mention the README.');
  });

  it('abort stops the loop promptly mid-model-call', async () => {
    const wt = await makeWorkTree();
    step(server, [['list_files', {}]]);
    server.enqueue({ text: 'too late', firstTokenDelayMs: 30_000 });
    const ac = new AbortController();
    const p = runBuiltinAgent({ models, model: MODEL, workTree: wt, task: TASK, limits: LIMITS, signal: ac.signal });
    await server.waitForRequest(2, 5000);
    const at = Date.now();
    ac.abort();
    await assert.rejects(p, (e: unknown) => {
      assert.ok(e instanceof AgentAbortedError);
      assert.equal(e.name, 'AbortError');
      assert.equal(e.partial.steps, 2);
      assert.equal(e.partial.finished, false);
      assert.equal(e.partial.transcript.at(-1)?.text, 'aborted');
      return true;
    });
    const took = Date.now() - at;
    assert.ok(took < 1000, `rejected ${took} ms after the abort`);
    await server.waitForAborted(1, 2000);
  });

  it('abort kills a running command promptly', async () => {
    const wt = await makeWorkTree();
    step(server, [['run_command', { argv: ['sh', '-c', 'echo started > started.txt; sleep 30; echo late > late.txt'] }]]);
    const ac = new AbortController();
    const p = runBuiltinAgent({ models, model: MODEL, workTree: wt, task: TASK, limits: LIMITS, signal: ac.signal });
    const t0 = Date.now();
    while (!existsSync(path.join(wt, 'started.txt'))) {
      assert.ok(Date.now() - t0 < 10_000, 'the command started');
      await new Promise((res) => setTimeout(res, 20));
    }
    const at = Date.now();
    ac.abort();
    await assert.rejects(p, (e: unknown) => e instanceof AgentAbortedError);
    const took = Date.now() - at;
    assert.ok(took < 2000, `rejected ${took} ms after the abort`);
    assert.equal(server.requests.length, 1, 'no further model step');
    await new Promise((res) => setTimeout(res, 200));
    assert.equal(existsSync(path.join(wt, 'late.txt')), false);
  });

  it('maxSteps ends the run with finished false', async () => {
    const wt = await makeWorkTree();
    server.setDefault(() => ({ toolCalls: [{ id: `call_${++callSeq}`, name: 'list_files', arguments: '{}' }] }));
    const beats: number[] = [];
    const r = await run(wt, { limits: { ...LIMITS, maxSteps: 3 }, heartbeat: (d) => beats.push(d.step) });
    assert.equal(r.finished, false);
    assert.equal(r.steps, 3);
    assert.equal(server.requests.length, 3);
    assert.match(r.summary, /^Stopped after 3 steps without finishing/);
    assert.equal(r.transcript.at(-1)?.kind, 'note');
    assert.deepEqual(beats, [1, 2, 3]);
  });

  it('path checks: the confinement rules on their own', async () => {
    const wt = await makeWorkTree();
    const outside = await tempDir('steward-agent-outside-');
    await symlink(outside, path.join(wt, 'out'));
    await symlink('src', path.join(wt, 'src-link'));
    await symlink('loop-b', path.join(wt, 'loop-a'));
    await symlink('loop-a', path.join(wt, 'loop-b'));
    const cases: Array<[string, boolean, string]> = [
      ['src/app.ts', false, 'ok'],
      ['src/new/dir/file.ts', true, 'ok'],
      ['./src/../README.md', false, 'ok'],
      ['src-link/app.ts', false, 'ok'],
      ['', false, 'ok'],
      ['src-link', true, 'symlink'],
      ['/etc/passwd', false, 'absolute-path'],
      ['..', false, 'escapes-work-tree'],
      ['src/../../x', true, 'escapes-work-tree'],
      ['.git', false, 'git-metadata'],
      ['sub/.Git/x', true, 'git-metadata'],
      ['out/x', true, 'symlink-escape'],
      ['out', false, 'symlink-escape'],
      ['loop-a/x', true, 'symlink'],
      ['a\0b', false, 'bad-path'],
    ];
    for (const [p, forWrite, want] of cases) {
      const c = await checkAgentPath(wt, p, forWrite);
      assert.equal(c.ok ? 'ok' : c.reason, want, `${JSON.stringify(p)} (${forWrite ? 'write' : 'read'})`);
      if (!c.ok) assert.equal(c.blocked, true);
    }
  });

  it('scanPatch reads headers the way git apply does', () => {
    // a removed line "-- ../x" inside a counted hunk is not a header
    const ok = scanPatch('--- a/q.sql\n+++ b/q.sql\n@@ -1,2 +1,1 @@\n--- ../x\n select 1;\n');
    assert.deepEqual(ok.paths.map((p) => p.path), ['q.sql', 'q.sql']);
    // a header after a hunk whose counts run out is seen
    const sneaky = scanPatch('--- a/a\n+++ b/a\n@@ -1 +1 @@\n-a\n+b\n--- a/../../etc/x\n+++ b/../../etc/x\n@@ -0,0 +1 @@\n+x\n');
    assert.ok(sneaky.paths.some((p) => p.raw.includes('..')));
    // rename headers and quoted names
    const ren = scanPatch('diff --git a/x b/y\nsimilarity index 100%\nrename from x\nrename to "sub/\\303\\251.txt"\n');
    assert.ok(ren.paths.some((p) => p.path === 'sub/é.txt'));
    assert.deepEqual(scanPatch('diff --git a/l b/l\nnew file mode 120000\n').specialModes, ['new file mode 120000']);
    assert.deepEqual(scanPatch('diff --git a/l b/l\nindex 1234567..89abcde 120000\n').specialModes.length, 1);
  });

  describe('external agent', () => {
    const envSecret = `ENV-SECRET-${rand()}`;
    before(() => {
      process.env.STEWARD_TEST_HOST_SECRET = envSecret;
    });
    after(() => {
      delete process.env.STEWARD_TEST_HOST_SECRET;
    });

    it('runs in the sandbox with the task in STEWARD_TASK and on stdin; edits stay in the work tree; host secrets and outside writes are out of reach', async () => {
      const wt = await makeWorkTree();
      const outsideDir = await tempDir('steward-agent-outside-');
      const secret = `HOST-SECRET-${rand()}`;
      const secretFile = path.join(outsideDir, 'secret.txt');
      await writeFile(secretFile, secret);
      const tag = rand();
      const hostTmpTarget = path.join(tmpdir(), `outside-ext-${tag}`);
      const scriptDir = await tempDir('steward-agent-script-');
      const script = path.join(scriptDir, 'fake-agent');
      await writeFile(
        script,
        [
          '#!/bin/sh',
          'stdin=$(cat)',
          '[ "$stdin" = "$STEWARD_TASK" ] && echo "stdin matches STEWARD_TASK"',
          'printf "%s" "$STEWARD_TASK" > task-seen.json',
          'echo "edited by the external agent" >> README.md',
          `cat ${secretFile} 2>/dev/null && echo LEAKED-FILE || echo "secret file not readable"`,
          'env | grep -q STEWARD_TEST_HOST_SECRET && echo LEAKED-ENV || echo "host env not visible"',
          `echo pwned > ${path.join(outsideDir, 'pwned.txt')} 2>/dev/null && echo WROTE-OUTSIDE-DIR || echo "outside dir not writable"`,
          `echo pwned > ${hostTmpTarget} 2>/dev/null; echo "wrote /tmp inside the sandbox only"`,
          // the work tree's parent is the sandbox's own tmpfs /tmp: the write lands there, not on the host
          `echo pwned > ../escape-${tag} 2>/dev/null; echo "tried the parent directory"`,
          'echo pwned > .git/hooks/pre-commit 2>/dev/null && echo WROTE-GIT || echo ".git read-only"',
          'echo "progress on stderr" >&2',
          'echo',
          'echo "Updated README.md as asked."',
          '',
        ].join('\n'),
      );
      await chmod(script, 0o755);
      const beats: number[] = [];
      const r: AgentRunResult = await runExternalAgent({
        argv: [script],
        workTree: wt,
        task: TASK,
        limits: { ...LIMITS, commands: [], roBinds: [scriptDir] },
        signal: new AbortController().signal,
        heartbeat: (d) => beats.push(d.step),
        timeoutMs: 20_000,
      });
      const out = r.transcript.map((e) => e.text).join('\n');
      assert.equal(r.finished, true, out);
      assert.equal(r.summary, 'Updated README.md as asked.');
      assert.ok(beats.length >= 1);
      // the task arrived both ways, the edit landed in the work tree
      assert.match(out, /stdin matches STEWARD_TASK/);
      assert.deepEqual(JSON.parse(await readFile(path.join(wt, 'task-seen.json'), 'utf8')), TASK);
      assert.match(await readFile(path.join(wt, 'README.md'), 'utf8'), /edited by the external agent\n$/);
      // the attempts outside failed, with no effect on the host
      assert.match(out, /secret file not readable/);
      assert.match(out, /host env not visible/);
      assert.match(out, /outside dir not writable/);
      assert.match(out, /tried the parent directory/);
      assert.match(out, /\.git read-only/);
      for (const bad of [secret, envSecret, 'LEAKED', 'WROTE-']) assert.ok(!out.includes(bad), `no ${bad} in the transcript`);
      assert.equal(existsSync(path.join(outsideDir, 'pwned.txt')), false);
      assert.equal(existsSync(hostTmpTarget), false);
      assert.equal(existsSync(path.join(path.dirname(wt), `escape-${tag}`)), false);
      assert.equal(existsSync(path.join(wt, '.git/hooks/pre-commit')), false);
      // the transcript records how it ended and the output tails
      const ext = r.transcript.filter((e) => e.kind === 'external');
      assert.match(ext[0]!.text, /^run: /);
      assert.equal(ext[1]?.text.startsWith('exit code 0'), true);
      assert.equal(ext[1]?.ok, true);
      assert.ok(ext.some((e) => e.text.startsWith('stdout (tail') && e.text.includes('Updated README.md as asked.')));
      assert.ok(ext.some((e) => e.text.startsWith('stderr (tail') && e.text.includes('progress on stderr')));
      assert.deepEqual(r.blocked, []);
    });

    it('a failing agent is not finished; its last line is the summary', async () => {
      const wt = await makeWorkTree();
      const r = await runExternalAgent({
        argv: ['sh', '-c', 'echo "working"; echo "could not finish: tests fail"; exit 3'],
        workTree: wt,
        task: TASK,
        limits: { ...LIMITS, commands: [] },
        signal: new AbortController().signal,
        timeoutMs: 10_000,
      });
      assert.equal(r.finished, false);
      assert.equal(r.summary, 'could not finish: tests fail');
      assert.ok(r.transcript.some((e) => e.kind === 'external' && e.text.startsWith('exit code 3') && e.ok === false));
    });

    it('a timed-out agent is not finished; an aborted one rejects promptly', async () => {
      const wt = await makeWorkTree();
      const r = await runExternalAgent({
        argv: ['sh', '-c', 'sleep 30'],
        workTree: wt,
        task: TASK,
        limits: { ...LIMITS, commands: [] },
        signal: new AbortController().signal,
        timeoutMs: 300,
      });
      assert.equal(r.finished, false);
      assert.ok(r.transcript.some((e) => e.text.startsWith('timed out')));

      const ac = new AbortController();
      const p = runExternalAgent({ argv: ['sh', '-c', 'sleep 30'], workTree: wt, task: TASK, limits: { ...LIMITS, commands: [] }, signal: ac.signal, timeoutMs: 60_000 });
      setTimeout(() => ac.abort(), 200);
      const at = Date.now();
      await assert.rejects(p, (e: unknown) => e instanceof AgentAbortedError);
      assert.ok(Date.now() - at < 3000);
    });
  });
});
