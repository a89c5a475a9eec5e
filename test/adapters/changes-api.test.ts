/**
 * Repositories and changes through the HTTP API and the CLI, against the real stack (Temporal
 * dev server, database, worker, git, bubblewrap, scripted model): register, start, read the
 * phase and records, download the patch, answer; bad input is refused and changes nothing. The
 * patch of a change the gate refused is served only on explicit request (?include=refused,
 * the CLI's --include-refused), always with its status and verdict in headers.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { createHttpApp, startHttpServer } from '../../adapters/http/app.js';
import { loadConfig } from '../../config/index.js';
import { adminCommand } from '../../platform/admin-cli.js';
import { changeModel } from '../helpers/change-model.js';
import { createGitFixture, gitInput } from '../helpers/git-fixture.js';
import { needs } from '../helpers/requirements.js';
import { useStack, waitFor, withHarness } from '../helpers/steward.js';

const TOKEN = 'changes-test-token-0123456789';
const DRAFT = { intent: 'feature', goal: 'Greet Steward', scope: ['greeting.txt'], acceptance: ['sh test.sh exits 0'], constraints: [], assumptions: [], open_questions: [], risk_signals: [], summary: 'greet' };

describe('repositories and changes over HTTP and the CLI', { skip: await needs('bubblewrap') }, () => {
  const stack = useStack();

  it('registers a repository, starts a change, shows it and serves its patch; the CLI does the same', async () => {
    const fx = createGitFixture({ 'greeting.txt': 'Hello\n', 'test.sh': 'grep -q "Hello, Steward" greeting.txt\n' });
    const scratch = mkdtempSync(path.join(tmpdir(), 'steward-cli-'));
    try {
      await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } } }, async (h) => {
        const server = await startHttpServer(createHttpApp({ ingress: h.ingress, apiToken: TOKEN, health: async () => ({ ok: true, checks: {} }), changes: h.changes }), { host: '127.0.0.1', port: 0 });
        const api = (method: string, route: string, body?: unknown, headers: Record<string, string> = {}) =>
          fetch(`${server.url}${route}`, {
            method,
            headers: { authorization: `Bearer ${TOKEN}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...headers },
            ...(body !== undefined ? { body: typeof body === 'string' ? body : JSON.stringify(body) } : {}),
          });
        const out: string[] = [];
        const err: string[] = [];
        const io = { config: () => loadConfig({}, tmpdir()), out: (s: string) => void out.push(s), err: (s: string) => void err.push(s), api: { url: server.url, token: TOKEN } };
        try {
          stack.model.setDefault(changeModel({ intake: () => DRAFT, agent: [{ name: 'write_file', args: { path: 'greeting.txt', content: 'Hello, Steward\n' } }] }));
          // closed without the token; bad bodies refused with a clear error, nothing recorded
          assert.equal((await fetch(`${server.url}/api/v1/repos`)).status, 401);
          const repos0 = await stack.db.repo.count();
          for (const bad of [{ name: 'x' }, { name: 'bad name', cloneUrl: fx.bare }, { name: 'x', cloneUrl: fx.bare, checks: [{ name: 't', argv: [] }] }, { name: 'x', cloneUrl: fx.bare, surprise: 1 }]) {
            const r = await api('POST', '/api/v1/repos', bad);
            assert.equal(r.status, 400, JSON.stringify(bad));
            assert.match(((await r.json()) as { error: string }).error, /invalid repository/);
          }
          assert.equal((await api('POST', '/api/v1/repos', '{oops')).status, 400);
          assert.equal((await api('POST', '/api/v1/repos', 'x', { 'content-type': 'text/plain' })).status, 415);
          assert.equal(await stack.db.repo.count(), repos0);

          const created = await api('POST', '/api/v1/repos', { name: 'api-demo', cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }] });
          assert.equal(created.status, 201);
          assert.equal((await api('POST', '/api/v1/repos', { name: 'api-demo', cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }] })).status, 200, 'replaced');
          const list = (await (await api('GET', '/api/v1/repos')).json()) as { repos: Array<{ name: string }> };
          assert.ok(list.repos.some((r) => r.name === 'api-demo'));
          assert.ok(await stack.db.receipt.findFirst({ where: { kind: 'repo.change', data: { contains: 'api-demo' } } }));

          const changes0 = await stack.db.repoChange.count();
          assert.equal((await api('POST', '/api/v1/changes', { repo: 'api-demo' })).status, 400);
          assert.equal((await api('POST', '/api/v1/changes', { repo: 'nope', request: 'x' })).status, 404);
          assert.equal((await api('POST', '/api/v1/changes', { repo: 'api-demo', request: 'x', base: 'bad..branch' })).status, 400);
          assert.equal(await stack.db.repoChange.count(), changes0);

          const idem = { 'idempotency-key': `start-${Date.now()}` };
          const started = await api('POST', '/api/v1/changes', { repo: 'api-demo', request: 'Make the greeting greet Steward' }, idem);
          assert.equal(started.status, 202);
          const { id } = (await started.json()) as { id: string };
          assert.match(id, /^chg-[a-f0-9]{12}$/);
          // a retry with the same Idempotency-Key answers with the same change and starts nothing new
          const retried = await api('POST', '/api/v1/changes', { repo: 'api-demo', request: 'Make the greeting greet Steward' }, idem);
          assert.equal(retried.status, 202);
          assert.equal(((await retried.json()) as { id: string }).id, id);
          assert.equal(await stack.db.repoChange.count(), changes0 + 1, 'one change for one key');
          assert.equal(await stack.db.receipt.count({ where: { kind: 'change.start', workflowId: id } }), 1, 'receipted once');
          const view = await waitFor(async () => {
            const v = (await (await api('GET', `/api/v1/changes/${id}`)).json()) as { status: string; phase: string; draft: unknown; plan: unknown; verdict: { verdict: string; checks: unknown[] } | null; result: { patchHash: string } | null; report: unknown };
            return v.status !== 'running' ? v : undefined;
          }, 'the change', 60_000);
          assert.equal(view.status, 'done');
          assert.ok(view.draft && view.plan && view.report);
          assert.equal(view.verdict?.verdict, 'pass');
          const patch = await api('GET', `/api/v1/changes/${id}/patch`);
          assert.equal(patch.status, 200);
          assert.match(patch.headers.get('content-type') ?? '', /text\/x-diff/);
          assert.equal(patch.headers.get('x-content-sha256'), view.result?.patchHash);
          assert.deepEqual(
            ['x-steward-change-status', 'x-steward-gate-verdict', 'x-steward-promoted'].map((h) => patch.headers.get(h)),
            ['done', 'pass', 'true'],
            'a promoted patch says so',
          );
          const text = await patch.text();
          const check = fx.cloneAt(fx.head());
          gitInput(check, text, 'apply', '-');
          assert.equal(readFileSync(path.join(check, 'greeting.txt'), 'utf8'), 'Hello, Steward\n');
          assert.equal((await api('GET', '/api/v1/changes/chg-000000000000')).status, 404);
          assert.equal((await api('GET', '/api/v1/changes/not-an-id')).status, 400);
          const answer = await api('POST', `/api/v1/changes/${id}/answer`, { text: 'late' });
          assert.equal(answer.status, 409);

          // the CLI, through the same API
          const repoFile = path.join(scratch, 'repo.json');
          writeFileSync(repoFile, JSON.stringify({ name: 'cli-demo', cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }] }));
          assert.equal(await adminCommand('repos', ['add', '--file', repoFile], io), 0);
          assert.equal(await adminCommand('repos', ['add', 'flagged', '--clone', fx.bare, '--check', 'test: sh test.sh', '--promotion', 'patch'], io), 0);
          assert.equal(await adminCommand('repos', ['add', 'broken', '--clone', fx.bare, '--check', 'no colon'], io), 2);
          assert.equal(await adminCommand('repos', ['list'], io), 0);
          assert.match(out.join(''), /cli-demo/);
          assert.match(out.join(''), /flagged/);
          out.length = 0;
          assert.equal(await adminCommand('changes', ['start', 'cli-demo', 'Make', 'the', 'greeting', 'greet', 'Steward'], io), 0);
          const cliId = /Started change (chg-[a-f0-9]{12})/.exec(out.join(''))?.[1];
          assert.ok(cliId, out.join(''));
          await waitFor(async () => ((await h.changes.getChange(cliId))?.status === 'done' ? true : undefined), 'the CLI change', 60_000);
          out.length = 0;
          assert.equal(await adminCommand('changes', ['show', cliId], io), 0);
          assert.match(out.join(''), /done \(done\)/);
          assert.match(out.join(''), /Gate: pass/);
          const patchFile = path.join(scratch, 'change.patch');
          assert.equal(await adminCommand('changes', ['patch', cliId, '--out', patchFile], io), 0);
          assert.match(readFileSync(patchFile, 'utf8'), /\+Hello, Steward/);
          assert.equal(await adminCommand('changes', ['show', 'nope'], io), 2);
          assert.equal(await adminCommand('changes', ['list', '--repo', 'cli-demo'], io), 0);

          // a change the validation gate refuses (its check fails): its patch only on request
          stack.model.setDefault(changeModel({ intake: () => DRAFT, agent: [{ name: 'write_file', args: { path: 'greeting.txt', content: 'Hello, world\n' } }] }));
          const refusedStart = await api('POST', '/api/v1/changes', { repo: 'api-demo', request: 'Make the greeting greet the world' });
          assert.equal(refusedStart.status, 202);
          const refusedId = ((await refusedStart.json()) as { id: string }).id;
          await waitFor(async () => ((await h.changes.getChange(refusedId))?.status !== 'running' ? true : undefined), 'the refused change', 60_000);
          assert.equal((await h.changes.getChange(refusedId))?.status, 'refused');
          const withheld = await api('GET', `/api/v1/changes/${refusedId}/patch`);
          assert.equal(withheld.status, 409, 'not served by default');
          assert.deepEqual(['x-steward-change-status', 'x-steward-gate-verdict', 'x-steward-promoted'].map((h) => withheld.headers.get(h)), ['refused', 'fail', 'false']);
          assert.match(((await withheld.json()) as { error: string }).error, /was not promoted \(status refused, gate verdict fail.*\?include=refused/);
          const asked = await api('GET', `/api/v1/changes/${refusedId}/patch?include=refused`);
          assert.equal(asked.status, 200, 'served when asked for');
          assert.deepEqual(['x-steward-change-status', 'x-steward-gate-verdict', 'x-steward-promoted'].map((h) => asked.headers.get(h)), ['refused', 'fail', 'false']);
          assert.match(await asked.text(), /\+Hello, world/);
          assert.equal((await api('GET', `/api/v1/changes/${refusedId}/patch?include=everything`)).status, 400);
          out.length = 0;
          err.length = 0;
          const refusedFile = path.join(scratch, 'refused.patch');
          assert.equal(await adminCommand('changes', ['patch', refusedId, '--out', refusedFile], io), 1, 'the CLI does not save it unasked');
          assert.match(err.join(''), /not promoted.*--include-refused/);
          assert.equal(await adminCommand('changes', ['patch', refusedId, '--out', refusedFile, '--include-refused'], io), 0);
          assert.match(out.join(''), /Wrote .*refused\.patch .*REFUSED: change chg-[a-f0-9]{12} was not promoted \(status refused, gate verdict fail\)/);
          assert.match(readFileSync(refusedFile, 'utf8'), /\+Hello, world/);
        } finally {
          await server.close();
        }
      });
    } finally {
      fx.cleanup();
      rmSync(scratch, { recursive: true, force: true });
    }
  });
});
