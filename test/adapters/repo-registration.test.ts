/**
 * Registration refuses what cannot run (issue 32, finding 9): a repository check or coding
 * agent command whose argv[0] the sandbox would refuse at every change (a path relative to the
 * work tree, such as ./check.sh) is refused when it is registered, through the HTTP API and the
 * CLI, with the sandbox's own reason (one function, common/argv.ts); nothing is recorded. What
 * registration accepts, the sandbox accepts: the same argv runs through runSandboxed. A token
 * reference to Steward's API token is refused the same way (finding 5).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { createHttpApp, startHttpServer } from '../../adapters/http/app.js';
import { argvRefusal } from '../../common/argv.js';
import { loadConfig } from '../../config/index.js';
import { runSandboxed, SandboxRefusedError } from '../../domain/sandbox.js';
import { adminCommand } from '../../platform/admin-cli.js';
import { createGitFixture } from '../helpers/git-fixture.js';
import { needs } from '../helpers/requirements.js';
import { useStack, withHarness } from '../helpers/steward.js';

const TOKEN = 'registration-test-token-0123456789';

const noBwrap = await needs('bubblewrap');

describe('repository registration applies the sandbox rule', () => {
  const stack = useStack();

  it('refuses a check or agent command the sandbox could never run, through the API and the CLI, naming why; accepts what runs', async () => {
    const fx = createGitFixture({ 'check.sh': 'exit 0\n' });
    const scratch = mkdtempSync(path.join(tmpdir(), 'steward-reg-'));
    try {
      await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } } }, async (h) => {
        const server = await startHttpServer(createHttpApp({ ingress: h.ingress, apiToken: TOKEN, health: async () => ({ ok: true, checks: {} }), changes: h.changes }), { host: '127.0.0.1', port: 0 });
        const api = async (body: unknown) => {
          const r = await fetch(`${server.url}/api/v1/repos`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
          return { status: r.status, body: (await r.json()) as { error?: string } };
        };
        const out: string[] = [];
        const err: string[] = [];
        const io = { config: () => loadConfig({}, tmpdir()), out: (s: string) => void out.push(s), err: (s: string) => void err.push(s), api: { url: server.url, token: TOKEN } };
        try {
          const before = await stack.db.repo.count();
          const unrunnable: unknown[][] = [['./check.sh'], ['scripts/check.sh', '--all'], ['../bin/check'], ['']];
          for (const argv of unrunnable) {
            const r = await api({ name: 'reg-bad', cloneUrl: fx.bare, checks: [{ name: 'test', argv }] });
            assert.equal(r.status, 400, JSON.stringify(argv));
            assert.match(r.body.error ?? '', /invalid repository: checks\.0\.argv(\.0)?: .*(argv\[0\] must be a bare program name or an absolute path|at least 1|Too small)/, JSON.stringify(r.body));
          }
          const agent = await api({ name: 'reg-bad', cloneUrl: fx.bare, agent: { command: ['./agent.sh', '--task'] } });
          assert.equal(agent.status, 400);
          assert.match(agent.body.error ?? '', /agent.*argv\[0\] must be a bare program name or an absolute path: "\.\/agent\.sh"/);
          // the reason the API gives is the sandbox's own
          const api0 = await api({ name: 'reg-bad', cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['./check.sh'] }] });
          assert.ok(api0.body.error?.includes(argvRefusal(['./check.sh'])!), api0.body.error);
          // a repository's token by reference: never Steward's API token (the one rule of references, common/secret-refs.ts)
          const token = await api({ name: 'reg-bad', cloneUrl: fx.bare, github: { owner: 'acme', repo: 'demo', tokenRef: 'env:STEWARD_API_TOKEN' } });
          assert.equal(token.status, 400);
          assert.match(token.body.error ?? '', /github\.tokenRef: env:STEWARD_API_TOKEN is Steward's own API token: no reference may name it/);
          assert.equal(await stack.db.repo.count(), before, 'nothing recorded');

          // the CLI, through the same API: refused with the reason, exit 2
          assert.equal(await adminCommand('repos', ['add', 'reg-cli', '--clone', fx.bare, '--check', 'test: ./check.sh'], io), 2);
          assert.match(err.join(''), /argv\[0\] must be a bare program name or an absolute path: "\.\/check\.sh".*\["sh", "\.\/check\.sh"\]/);
          const file = path.join(scratch, 'repo.json');
          writeFileSync(file, JSON.stringify({ name: 'reg-cli', cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', './check.sh'] }], agent: { command: ['scripts/agent'] } }));
          assert.equal(await adminCommand('repos', ['add', '--file', file], io), 2);
          assert.equal(await stack.db.repo.count(), before, 'nothing recorded');

          // what runs is accepted: through the interpreter, or an absolute path
          assert.equal((await api({ name: 'reg-good', cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', './check.sh'] }, { name: 'abs', argv: ['/bin/true'] }] })).status, 201);
          assert.equal(await adminCommand('repos', ['add', 'reg-cli', '--clone', fx.bare, '--check', 'test: sh ./check.sh'], io), 0);
          assert.equal(await stack.db.repo.count(), before + 2);
        } finally {
          await server.close();
        }
      });
    } finally {
      rmSync(scratch, { recursive: true, force: true });
      fx.cleanup();
    }
  });

  it('the sandbox refuses exactly what registration refuses', { skip: noBwrap }, async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'steward-reg-sbx-'));
    try {
      writeFileSync(path.join(dir, 'check.sh'), 'exit 0\n');
      for (const argv of [['./check.sh'], ['sh', './check.sh'], ['/bin/sh', './check.sh']]) {
        const why = argvRefusal(argv);
        try {
          const r = await runSandboxed({ argv, workTree: dir, allowlist: ['*'], timeoutMs: 10_000, maxOutputBytes: 1024 });
          assert.equal(why, undefined, `${JSON.stringify(argv)} ran, so registration accepts it`);
          assert.equal(r.exitCode, 0, JSON.stringify(argv));
        } catch (e) {
          assert.ok(e instanceof SandboxRefusedError, String(e));
          assert.equal(e.message.includes(why ?? '\u0000'), true, `${JSON.stringify(argv)}: the sandbox gives registration's reason: ${e.message}`);
        }
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
