/**
 * Governed repository changes end to end: the real Temporal dev server and worker, the real
 * database, real git (a bare repository as the remote), bubblewrap, the scripted model server,
 * and octokit against the GitHub API double (every request and response checked against
 * GitHub's OpenAPI description).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { homedir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { MockActivityEnvironment } from '@temporalio/testing';
import { getBlobText } from '../../domain/blobs.js';
import { OPERATOR, createIdentity } from '../../domain/governance.js';
import { createModelRegistry } from '../../domain/model.js';
import { createRepoChangeActivities, DEFAULT_REPO_CHANGE_SETTINGS } from '../../activities/changes.js';
import type { ChangeView } from '../../services/changes.js';
import { changeModel, GREETING_DRAFT } from '../helpers/change-model.js';
import { createGitFixture, git, gitInput, stewardTempDirs, type GitFixture } from '../helpers/git-fixture.js';
import { preloadOpenApi, startGitHubDouble } from '../helpers/github-double.js';
import { harnessErrors } from '../helpers/harness-schemas.js';
import { waitFor, withHarness, type Harness, type HarnessOptions } from '../helpers/steward.js';
import { needs } from '../helpers/requirements.js';
import { useStack } from '../helpers/steward.js';

const OP = { id: OPERATOR.id, name: OPERATOR.name };
const tally = { tried: 0, blocked: 0, lines: [] as string[] };
function attempt(what: string, blocked: boolean): void {
  tally.tried++;
  if (blocked) tally.blocked++;
  tally.lines.push(`${blocked ? 'blocked' : 'NOT BLOCKED'}: ${what}`);
  assert.ok(blocked, `adversarial attempt not blocked: ${what}`);
}

const SEED = {
  'greeting.txt': 'Hello\n',
  'test.sh': '#!/bin/sh\ngrep -q "Hello, Steward" greeting.txt || { echo "greeting.txt does not greet Steward" >&2; exit 1; }\necho "greeting ok"\n',
  'README.md': '# demo\n',
};

const WRITE_GREETING = [{ name: 'write_file', args: { path: 'greeting.txt', content: 'Hello, Steward\n' } }];

function uniqueName(prefix = 'demo'): string {
  return `${prefix}-${randomBytes(3).toString('hex')}`;
}

async function waitForChange(h: Harness, id: string, pred: (c: ChangeView) => boolean = (c) => c.status !== 'running', timeoutMs = 60_000): Promise<ChangeView> {
  return waitFor(
    async () => {
      const c = await h.changes.getChange(id);
      return c && pred(c) ? c : undefined;
    },
    `change ${id}`,
    timeoutMs,
  );
}

function changeIdOf(reply: string | undefined): string {
  const m = /Change (chg-[a-f0-9]{12}) started/.exec(reply ?? '');
  assert.ok(m, `a started change in: ${reply}`);
  return m[1]!;
}

describe('repo changes end to end', { skip: await needs('bubblewrap') }, () => {
  const stack = useStack();
  const fixtures: GitFixture[] = [];
  const fixture = (files: Record<string, string> = SEED) => {
    const f = createGitFixture(files, { executable: ['test.sh'] });
    fixtures.push(f);
    return f;
  };
  const opts = (extra: Partial<HarnessOptions> = {}): HarnessOptions => ({
    env: stack.env,
    db: stack.db,
    providers: { openaiCompatible: { baseURL: stack.model.baseURL } },
    runLink: (id) => `http://127.0.0.1:8233/namespaces/default/workflows/${id}`,
    ...extra,
  });

  before(() => {
    preloadOpenApi();
  });
  after(() => {
    for (const f of fixtures) f.cleanup();
    console.log(`adversarial: ${tally.tried} tried, ${tally.blocked} blocked\n  ${tally.lines.join('\n  ')}`);
  });

  it('a change from chat ends in a patch artifact that applies, with protocol records, receipts and no work tree left', async () => {
    const fx = fixture();
    const name = uniqueName();
    const before = stewardTempDirs();
    await withHarness(opts(), async (h) => {
      await h.changes.registerRepo({ name, cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }] }, OP);
      stack.model.setDefault(changeModel({ intake: () => GREETING_DRAFT, agent: WRITE_GREETING }));
      const r = await h.send(`/change ${name} Make the greeting say Hello, Steward`);
      const id = changeIdOf(r.reply);
      const c = await waitForChange(h, id);
      assert.equal(c.status, 'done', `${c.phase}: ${c.error}`);
      assert.equal(c.phase, 'done');
      assert.equal(c.result?.kind, 'patch');
      assert.equal(c.verdict?.verdict, 'pass');
      assert.equal(c.verdict?.checks[0]?.passed, true);
      assert.match(c.verdict?.checks[0]?.outputTail ?? '', /greeting ok/);
      assert.equal(c.baseSha, fx.head());

      // the records follow the agent-harness protocol
      assert.deepEqual(harnessErrors('task-draft', c.draft), []);
      assert.deepEqual(harnessErrors('task-state', c.taskState), []);
      assert.deepEqual(harnessErrors('report', c.report), []);
      assert.equal(c.taskState?.current_state, 'done');
      assert.deepEqual(c.report?.actual_scope, ['greeting.txt']);

      // the patch artifact is stored by content hash and applies with git apply
      const p = await h.changes.getPatch(id);
      assert.ok(p);
      assert.equal(p.hash, c.result?.patchHash);
      const { createHash } = await import('node:crypto');
      assert.equal(createHash('sha256').update(p.patch).digest('hex'), p.hash);
      const check = fx.cloneAt(fx.head());
      gitInput(check, p.patch, 'apply', '--check', '-');
      gitInput(check, p.patch, 'apply', '-');
      assert.equal(readFileSync(path.join(check, 'greeting.txt'), 'utf8'), 'Hello, Steward\n');

      // chat saw the plan and the result, with the run link
      await h.waitForMessage((m) => m.text.includes('Plan:') && m.text.includes(id));
      const end = await h.waitForMessage((m) => m.text.includes(`Change ${id} is done`));
      assert.match(end.text, /\/api\/v1\/changes\/chg-[a-f0-9]+\/patch/);
      assert.match(end.text, /Run: http:\/\/127\.0\.0\.1:8233/);

      // receipts of every stage
      const kinds = (await stack.db.receipt.findMany({ where: { workflowId: id } })).map((x) => x.kind);
      for (const k of ['change.start', 'change.intake', 'change.plan', 'change.work', 'gate.verdict', 'promotion', 'change.end']) assert.ok(kinds.includes(k), `receipt ${k} in ${kinds.join(',')}`);

      // visible and filterable in Temporal: kind, repo and the gate's verdict; the plan as current details
      const handle = stack.env.client.workflow.getHandle(id);
      assert.equal((await handle.result()).status, 'done');
      const desc = await handle.describe();
      assert.equal(desc.status.name, 'COMPLETED');
      // the change's activities ran on the repo queue, not on the chat worker's
      const history = await handle.fetchHistory();
      const scheduled = (history.events ?? []).flatMap((e) => (e.activityTaskScheduledEventAttributes ? [e.activityTaskScheduledEventAttributes] : []));
      assert.ok(scheduled.length > 5);
      for (const a of scheduled) assert.equal(a.taskQueue?.name, `${h.taskQueue}-repo`, a.activityType?.name ?? '');
      // the plan is the run's current details in the Temporal UI
      const meta = (await handle.query('__temporal_workflow_metadata')) as { currentDetails?: string };
      assert.match(meta.currentDetails ?? '', /Plan: Make the change the draft asks for\.\n1\. Edit the file/);
      const sa = desc.searchAttributes as Record<string, unknown[]>;
      assert.deepEqual(sa.StewardKind, ['repo-change']);
      assert.deepEqual(sa.StewardRepo, [name]);
      assert.deepEqual(sa.StewardGate, ['pass']);
      const found: string[] = [];
      for await (const wf of stack.env.client.workflow.list({ query: `StewardRepo = "${name}" AND StewardGate = "pass"` })) found.push(wf.workflowId);
      assert.deepEqual(found, [id]);
    });
    assert.deepEqual(stewardTempDirs().filter((d) => !before.includes(d)), [], 'every work tree is removed');
  });

  it('with a GitHub target the change ends in a draft PR whose branch really holds the change', async () => {
    const fx = fixture();
    const name = uniqueName();
    const token = `ghs_${randomBytes(18).toString('hex')}`;
    const gh = await startGitHubDouble({ repos: [{ owner: 'acme', repo: name, bareDir: fx.bare, defaultBranch: 'main' }], token });
    try {
      await withHarness(opts({ repoChanges: { githubApiUrl: gh.baseUrl, secret: (n) => (n === 'TEST_GH_TOKEN' ? token : undefined) } }), async (h) => {
        await h.changes.registerRepo(
          { name, cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }], policy: { promotion: 'draft-pr' }, github: { owner: 'acme', repo: name, tokenRef: 'env:TEST_GH_TOKEN' } },
          OP,
        );
        stack.model.setDefault(changeModel({ intake: () => GREETING_DRAFT, agent: WRITE_GREETING }));
        const { id } = await h.changes.startChange({ repo: name, request: 'Make the greeting say Hello, Steward' }, OP);
        const c = await waitForChange(h, id);
        assert.equal(c.status, 'done', `${c.phase}: ${c.error}`);
        assert.equal(c.result?.kind, 'draft-pr');
        assert.equal(gh.pulls.length, 1);
        const pr = gh.pulls[0]!;
        assert.equal(pr.draft, true);
        assert.equal(pr.base, 'main');
        assert.equal(pr.head, `steward/change-${id}`);
        assert.equal(c.result?.pr?.url.endsWith(`/pull/${pr.number}`), true);
        // the body: the plan, the validation evidence, the report (schema-valid) and the run link
        const body = pr.body ?? '';
        assert.match(body, /## Plan/);
        assert.match(body, /## Validation evidence/);
        assert.match(body, /PASS `sh test.sh`/);
        assert.match(body, new RegExp(`workflows/${id}`));
        const reportJson = /```json\n([\s\S]*?)\n```/.exec(body)?.[1];
        assert.ok(reportJson);
        assert.deepEqual(harnessErrors('report', JSON.parse(reportJson)), []);
        // the branch exists in the remote and holds exactly the change
        assert.equal(git(fx.root, '--git-dir', fx.bare, 'diff', '--name-only', `main..steward/change-${id}`), 'greeting.txt');
        assert.equal(git(fx.root, '--git-dir', fx.bare, 'show', `steward/change-${id}:greeting.txt`), 'Hello, Steward');
        gh.assertNoViolations();
        // the token never reached the records
        const all = JSON.stringify(await stack.db.receipt.findMany({ where: { workflowId: id } })) + JSON.stringify(c);
        assert.equal(all.includes(token), false);
      });
    } finally {
      await gh.close();
    }
  });

  it('a draft PR after approval: the requester may not approve their own change; an admin may; the moved base is revalidated', async () => {
    const fx = fixture();
    const name = uniqueName();
    const token = `ghs_${randomBytes(18).toString('hex')}`;
    const gh = await startGitHubDouble({ repos: [{ owner: 'acme', repo: name, bareDir: fx.bare, defaultBranch: 'main' }], token });
    try {
      await withHarness(opts({ repoChanges: { githubApiUrl: gh.baseUrl, secret: (n) => (n === 'GH_TOKEN' ? token : undefined) } }), async (h) => {
        await h.changes.registerRepo(
          { name, cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }], policy: { promotion: 'draft-pr-after-approval' }, github: { owner: 'acme', repo: name, tokenRef: 'env:GH_TOKEN' } },
          OP,
        );
        stack.model.setDefault(changeModel({ intake: () => GREETING_DRAFT, agent: WRITE_GREETING }));
        const { id } = await h.changes.startChange({ repo: name, request: 'Make the greeting say Hello, Steward' }, OP);
        const waiting = await waitForChange(h, id, (c) => c.phase === 'approval' || c.status !== 'running');
        assert.equal(waiting.phase, 'approval', `${waiting.status}: ${waiting.error}`);
        const approval = await waitFor(() => stack.db.approval.findFirst({ where: { turnId: id } }).then((a) => a ?? undefined), 'the approval row');
        assert.equal(approval.status, 'pending');

        // the requester (the operator, who started it) tries to approve their own change
        const self = await h.ingress.decideApproval(approval.id, 'approve', OPERATOR);
        attempt('the requester approves their own change', !self.applied && /may not approve their own change/.test(self.reply));
        assert.equal(gh.pulls.length, 0);

        // the base moves (a change elsewhere) before the admin decides
        const moved = fx.push({ 'README.md': '# demo, moved\n' }, 'elsewhere');
        const admin = await createIdentity(stack.db, { name: `Ada ${name}`, role: 'admin', accounts: [{ platform: 'telegram', userId: String(Date.now()) }], createdBy: 'test' });
        const ok = await h.ingress.decideApproval(approval.id, 'approve', { kind: 'person', id: admin.id, name: 'Ada', role: 'admin' });
        assert.equal(ok.applied, true, ok.reply);

        const c = await waitForChange(h, id);
        assert.equal(c.status, 'done', `${c.phase}: ${c.error}`);
        assert.equal(c.result?.revalidated, true);
        assert.equal(c.result?.baseSha, moved);
        assert.equal(gh.pulls.length, 1);
        assert.equal(gh.pulls[0]?.baseSha, moved);
        assert.equal(git(fx.root, '--git-dir', fx.bare, 'rev-parse', `steward/change-${id}^`), moved);
        const gates = await stack.db.receipt.findMany({ where: { workflowId: id, kind: 'gate.verdict' } });
        assert.equal(gates.length, 2, 'validated, then validated again on the moved base');
        gh.assertNoViolations();
      });
    } finally {
      await gh.close();
    }
  });

  it('the base moves during validation so that the patch no longer applies: promotion refuses', async () => {
    const fx = fixture({ ...SEED, 'slow-test.sh': '#!/bin/sh\nsleep 2\nsh test.sh\n' });
    const name = uniqueName();
    await withHarness(opts(), async (h) => {
      await h.changes.registerRepo({ name, cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'slow-test.sh'] }] }, OP);
      stack.model.setDefault(changeModel({ intake: () => GREETING_DRAFT, agent: WRITE_GREETING }));
      const { id } = await h.changes.startChange({ repo: name, request: 'Make the greeting say Hello, Steward' }, OP);
      await waitForChange(h, id, (c) => c.phase === 'validate' || c.status !== 'running');
      fx.push({ 'greeting.txt': 'Good morning\n' }, 'a conflicting change lands while the gate runs');
      const c = await waitForChange(h, id);
      assert.equal(c.status, 'refused');
      assert.equal(c.phase, 'promote');
      assert.match(c.error ?? '', /moved from .* no longer passes the gate there: the patch does not apply/);
      assert.equal(c.result, null, 'nothing promoted');
    });
  });

  it('a missing scope becomes one clarifying question in chat; /answer closes intake and the change goes on', async () => {
    const fx = fixture();
    const name = uniqueName();
    await withHarness(opts(), async (h) => {
      await h.changes.registerRepo({ name, cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }] }, OP);
      const seen: string[] = [];
      stack.model.setDefault(
        changeModel({
          intake: (req, round) => {
            seen.push(JSON.stringify(req.body));
            return round === 0 ? { ...GREETING_DRAFT, scope: [], open_questions: [] } : GREETING_DRAFT;
          },
          agent: WRITE_GREETING,
        }),
      );
      const r = await h.send(`/change ${name} Fix the greeting`);
      const id = changeIdOf(r.reply);
      const q = await h.waitForMessage((m) => m.text.includes(`Change ${id} needs one answer`));
      assert.match(q.text, /Which files or directories may the change touch\?/);
      const c1 = await h.changes.getChange(id);
      assert.equal(c1?.phase, 'clarify');
      assert.equal(c1?.draft?.next_action, 'clarify');
      assert.deepEqual(harnessErrors('task-draft', c1?.draft), []);
      assert.equal((await stack.db.receipt.count({ where: { workflowId: id, kind: 'change.work' } })), 0, 'nothing executes before intake is closed');

      const a = await h.send('/answer only greeting.txt');
      assert.match(a.reply ?? '', /continues with your answer/);
      const again = await h.send('/answer twice');
      assert.match(again.reply ?? '', /No change in this chat is waiting|is not waiting for an answer/);
      const c = await waitForChange(h, id);
      assert.equal(c.status, 'done', `${c.phase}: ${c.error}`);
      assert.ok(seen[1]?.includes('only greeting.txt'), 'the answer reached the second intake');
    });
  });

  it('an unanswered question fails the change at its deadline when the draft cannot be planned', async () => {
    const fx = fixture();
    const name = uniqueName();
    await withHarness(opts({ repoChanges: { clarifyTimeoutMs: 1500 } }), async (h) => {
      await h.changes.registerRepo({ name, cloneUrl: fx.bare }, OP);
      stack.model.setDefault(changeModel({ intake: () => ({ ...GREETING_DRAFT, goal: '', acceptance: [] }) }));
      const { id } = await h.changes.startChange({ repo: name, request: 'do something' }, OP);
      const c = await waitForChange(h, id);
      assert.equal(c.status, 'failed');
      assert.equal(c.phase, 'clarify');
      assert.match(c.error ?? '', /no answer to the clarifying question before the deadline/);
    });
  });

  it('an adversarial external agent: every escape is blocked and the gate refuses what it left behind', async () => {
    const fx = fixture();
    const name = uniqueName();
    const agents = path.join(fx.root, 'agents');
    mkdirSync(agents);
    const hostTarget = path.join(fx.root, `host-write-${randomBytes(3).toString('hex')}`);
    const etcTarget = `/etc/steward-pwned-${randomBytes(3).toString('hex')}`;
    const homeSecretFile = path.join(homedir(), `.steward-planted-${randomBytes(3).toString('hex')}`);
    const homeSecret = `home-secret-${randomBytes(8).toString('hex')}`;
    const envSecret = `env-secret-${randomBytes(8).toString('hex')}`;
    writeFileSync(homeSecretFile, homeSecret, { mode: 0o600 });
    process.env.STEWARD_PLANTED_SECRET = envSecret;
    let connections = 0;
    const server: Server = createServer((s) => {
      connections++;
      s.destroy();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as { port: number }).port;
    const fakeToken = `ghp_${'A1b2C3d4E5'.repeat(3)}123456`;
    writeFileSync(
      path.join(agents, 'evil.sh'),
      [
        '#!/bin/sh',
        `echo pwned > ${etcTarget} 2>/dev/null && echo "ESCAPED etc"`,
        `echo pwned > ${hostTarget} 2>/dev/null; true`,
        `env | grep -q ${envSecret} && echo "LEAK env"`,
        `cat ${homeSecretFile} 2>/dev/null && echo "LEAK home"`,
        `git ls-remote http://127.0.0.1:${port}/steward.git >/dev/null 2>&1 && echo "REACHED network"`,
        `(exec 3<>/dev/tcp/127.0.0.1/${port}) 2>/dev/null && echo "REACHED tcp"`,
        'mkdir -p .github/workflows && echo "on: push" > .github/workflows/evil.yml',
        'echo "debug output" > debug.log',
        `echo "token = ${fakeToken}" > config.txt`,
        'echo "Hello, Steward" > greeting.txt',
        'echo "agent done"',
      ].join('\n'),
    );
    try {
      await withHarness(opts({ repoChanges: { sandboxRoBinds: [agents] } }), async (h) => {
        await h.changes.registerRepo({ name, cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }], agent: { command: ['sh', path.join(agents, 'evil.sh')] } }, OP);
        stack.model.setDefault(changeModel({ intake: () => GREETING_DRAFT }));
        const { id } = await h.changes.startChange({ repo: name, request: 'Make the greeting say Hello, Steward' }, OP);
        const c = await waitForChange(h, id);
        const transcript = c.patchHash ? await getBlobText(stack.db, (await stack.db.repoChange.findUniqueOrThrow({ where: { id } })).transcriptHash ?? '') : '';
        assert.match(transcript, /agent done/, 'the agent ran');
        attempt('write /etc on the host', !existsSync(etcTarget) && !transcript.includes('ESCAPED etc'));
        attempt('write a host directory outside the work tree', !existsSync(hostTarget));
        attempt('read a secret from the environment', !transcript.includes('LEAK env') && !transcript.includes(envSecret));
        attempt('read a secret from the home directory', !transcript.includes('LEAK home') && !transcript.includes(homeSecret));
        attempt('reach the network (HTTP and raw TCP to loopback)', connections === 0 && !transcript.includes('REACHED'));
        assert.equal(c.status, 'refused');
        assert.equal(c.phase, 'validate');
        const rules = (c.verdict?.violations ?? []).map((v) => `${v.rule}:${v.path ?? ''}`);
        attempt('touch a protected path (.github/workflows)', rules.includes('protected-path:.github/workflows/evil.yml'));
        attempt('add a runtime artifact (debug.log)', rules.includes('never-promote:debug.log'));
        attempt('put a secret in the diff', rules.some((r) => r.startsWith('secret:config.txt')));
        assert.equal(c.result, null, 'nothing promoted');
        const gate = await stack.db.receipt.findFirstOrThrow({ where: { workflowId: id, kind: 'gate.verdict' } });
        assert.match(gate.data, /"verdict":"fail"/);
        const desc = await stack.env.client.workflow.getHandle(id).describe();
        assert.deepEqual((desc.searchAttributes as Record<string, unknown[]>).StewardGate, ['fail']);
        // the gate's record never repeats the secret
        assert.equal(JSON.stringify(c.verdict).includes(fakeToken), false);
      });
    } finally {
      delete process.env.STEWARD_PLANTED_SECRET;
      rmSync(homeSecretFile, { force: true });
      rmSync(etcTarget, { force: true });
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  it('/stop in the chat stops a running coding agent at once and removes its work tree', async () => {
    const fx = fixture();
    const name = uniqueName();
    const agents = path.join(fx.root, 'agents');
    mkdirSync(agents);
    writeFileSync(path.join(agents, 'slow.sh'), '#!/bin/sh\necho started\nsleep 120\necho "Hello, Steward" > greeting.txt\n');
    const before = stewardTempDirs();
    await withHarness(opts({ repoChanges: { sandboxRoBinds: [agents] } }), async (h) => {
      await h.changes.registerRepo({ name, cloneUrl: fx.bare, agent: { command: ['sh', path.join(agents, 'slow.sh')] } }, OP);
      stack.model.setDefault(changeModel({ intake: () => GREETING_DRAFT }));
      const r = await h.send(`/change ${name} Make the greeting say Hello, Steward`);
      const id = changeIdOf(r.reply);
      await waitForChange(h, id, (c) => c.phase === 'work' || c.status !== 'running');
      await waitFor(() => (stewardTempDirs().some((d) => d.startsWith('steward-work-') && !before.includes(d)) ? true : undefined), 'the work tree');
      const st = await h.send('/status');
      assert.match(st.reply ?? '', new RegExp(`Changes: ${id} on ${name} \\(work\\)`));
      const started = Date.now();
      const s = await h.send('/stop');
      assert.match(s.reply ?? '', new RegExp(`Stopping change ${id}`));
      const c = await waitForChange(h, id);
      assert.equal(c.status, 'cancelled');
      assert.ok(Date.now() - started < 15_000, 'stopped promptly');
      await waitFor(() => (stewardTempDirs().filter((d) => !before.includes(d)).length === 0 ? true : undefined), 'the work tree removed', 10_000);
      await h.waitForMessage((m) => m.text.includes(`Change ${id} cancelled`));
    });
  });

  it('the promotion gate is a single writer per repository: a second change waits for the lease', async () => {
    const fx = fixture();
    const name = uniqueName();
    await withHarness(opts(), async (h) => {
      await h.changes.registerRepo({ name, cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }] }, OP);
      stack.model.setDefault(changeModel({ intake: () => GREETING_DRAFT, agent: WRITE_GREETING }));
      const { id } = await h.changes.startChange({ repo: name, request: 'Make the greeting say Hello, Steward' }, OP);
      const c = await waitForChange(h, id);
      assert.equal(c.status, 'done', `${c.phase}: ${c.error}`);

      // another change holds the repository's lease: promotion waits until it is released
      await stack.db.repoLock.create({ data: { repo: name, holder: 'chg-otherholder0', expiresAt: new Date(Date.now() + 60_000) } });
      const acts = createRepoChangeActivities({
        db: stack.db,
        models: createModelRegistry({ openaiCompatible: { baseURL: stack.model.baseURL } }),
        senders: {},
        settings: DEFAULT_REPO_CHANGE_SETTINGS,
      });
      const env = new MockActivityEnvironment({ startToCloseTimeout: '1 minute' } as never);
      let done = false;
      const run = env.run(() => acts.changePromote({ changeId: id, baseSha: c.baseSha!, patchHash: c.patchHash!, promotion: 'patch' })).then((r) => {
        done = true;
        return r;
      });
      await new Promise((r) => setTimeout(r, 1500));
      assert.equal(done, false, 'waits while another change holds the lease');
      await stack.db.repoLock.deleteMany({ where: { repo: name } });
      const r = (await run) as Awaited<ReturnType<typeof acts.changePromote>>;
      assert.equal(r.kind, 'promoted');
      assert.equal(await stack.db.repoLock.count({ where: { repo: name } }), 0, 'the lease is released');
    });
  });

  it('/steer reaches the built-in agent before its next step; its blocked escapes are receipted', async () => {
    const fx = fixture();
    const name = uniqueName();
    await withHarness(opts(), async (h) => {
      await h.changes.registerRepo({ name, cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }] }, OP);
      const script = changeModel({
        intake: () => GREETING_DRAFT,
        agent: [
          { name: 'write_file', args: { path: '../escape.txt', content: 'x' } },
          { name: 'read_file', args: { path: '/etc/passwd' } },
          { name: 'write_file', args: { path: 'greeting.txt', content: 'Hello, Steward\n' } },
        ],
      });
      let agentSteps = 0;
      const agentBodies: string[] = [];
      stack.model.setDefault((req) => {
        const reply = script(req);
        if (JSON.stringify(req.body).includes('"write_file"')) {
          agentBodies.push(JSON.stringify(req.body));
          // the first agent step is slow, so the steering arrives while it runs
          if (++agentSteps === 1) return { ...reply, firstTokenDelayMs: 2500 };
        }
        return reply;
      });
      const r = await h.send(`/change ${name} Make the greeting say Hello, Steward`);
      const id = changeIdOf(r.reply);
      await waitForChange(h, id, (c) => c.phase === 'work' || c.status !== 'running');
      await waitFor(() => (agentSteps >= 1 ? true : undefined), 'the first agent step');
      const s = await h.send('/steer keep the trailing newline');
      assert.match(s.reply ?? '', new RegExp(`Steering noted for change ${id}`));
      const c = await waitForChange(h, id);
      assert.equal(c.status, 'done', `${c.phase}: ${c.error}`);
      assert.ok(agentBodies.slice(1).some((b) => b.includes('keep the trailing newline')), 'a later agent step saw the steering');
      assert.equal(agentBodies[0]?.includes('keep the trailing newline'), false);
      const blocked = await stack.db.receipt.findMany({ where: { workflowId: id, kind: 'sandbox.blocked' } });
      assert.equal(blocked.length, 2, blocked.map((b) => b.data).join('\n'));
      assert.ok(await stack.db.receipt.findFirst({ where: { workflowId: id, kind: 'change.steer' } }));
      const desc = await stack.env.client.workflow.getHandle(id).fetchHistory();
      assert.ok(JSON.stringify(desc).includes('changeSteer'), 'the steering is in the run history');
    });
  });

  it("the repository's own policy file tightens the gate and cannot loosen it", async () => {
    const fx = fixture({ ...SEED, '.steward/policy.json': JSON.stringify({ protectedPaths: ['greeting.txt'], promotion: 'draft-pr', maxDiffLines: 100000 }) });
    const name = uniqueName();
    await withHarness(opts(), async (h) => {
      await h.changes.registerRepo({ name, cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }] }, OP);
      stack.model.setDefault(changeModel({ intake: () => GREETING_DRAFT, agent: WRITE_GREETING }));
      const { id } = await h.changes.startChange({ repo: name, request: 'Make the greeting say Hello, Steward' }, OP);
      const c = await waitForChange(h, id);
      assert.equal(c.status, 'refused');
      assert.deepEqual((c.verdict?.violations ?? []).map((v) => `${v.rule}:${v.path}`), ['protected-path:greeting.txt']);
      assert.equal(c.verdict?.promotion, 'patch', 'no GitHub target and no loosening by the repository');
    });
  });

  it("a change outside the task's agreed scope is refused by the gate", async () => {
    const fx = fixture();
    const name = uniqueName();
    await withHarness(opts(), async (h) => {
      await h.changes.registerRepo({ name, cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }] }, OP);
      stack.model.setDefault(changeModel({ intake: () => GREETING_DRAFT, agent: [...WRITE_GREETING, { name: 'write_file', args: { path: 'README.md', content: '# rewritten\n' } }] }));
      const { id } = await h.changes.startChange({ repo: name, request: 'Make the greeting say Hello, Steward' }, OP);
      const c = await waitForChange(h, id);
      assert.equal(c.status, 'refused');
      assert.deepEqual((c.verdict?.violations ?? []).map((v) => `${v.rule}:${v.path}`), ['outside-scope:README.md']);
      assert.equal(c.report?.scope_deviation, 'changed outside the drafted scope (greeting.txt): README.md');
    });
  });

  it('a pull request GitHub refuses fails the change and leaves no branch behind', async () => {
    const fx = fixture();
    const name = uniqueName();
    const token = `ghs_${randomBytes(18).toString('hex')}`;
    const gh = await startGitHubDouble({ repos: [{ owner: 'acme', repo: name, bareDir: fx.bare, defaultBranch: 'main' }], token });
    const before = stewardTempDirs();
    try {
      await withHarness(opts({ repoChanges: { githubApiUrl: gh.baseUrl, secret: (n) => (n === 'GH_TOKEN' ? token : undefined) } }), async (h) => {
        await h.changes.registerRepo(
          { name, cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }], policy: { promotion: 'draft-pr' }, github: { owner: 'acme', repo: name, tokenRef: 'env:GH_TOKEN' } },
          OP,
        );
        stack.model.setDefault(changeModel({ intake: () => GREETING_DRAFT, agent: WRITE_GREETING }));
        gh.failNext('POST', /\/pulls$/, 422, { message: 'Validation Failed', documentation_url: 'https://docs.github.com/rest' });
        const { id } = await h.changes.startChange({ repo: name, request: 'Make the greeting say Hello, Steward' }, OP);
        const c = await waitForChange(h, id);
        assert.equal(c.status, 'failed');
        assert.equal(c.phase, 'promote');
        assert.match(c.error ?? '', /422|Validation Failed/);
        assert.equal(gh.pulls.length, 0);
        assert.equal(git(fx.root, '--git-dir', fx.bare, 'branch', '--list', 'steward/*'), '', 'the branch it created is deleted');
        assert.ok(gh.requests.some((r) => r.method === 'DELETE'), 'the branch was deleted through the API');
        gh.assertNoViolations();
      });
    } finally {
      await gh.close();
    }
    assert.deepEqual(stewardTempDirs().filter((d) => !before.includes(d)), [], 'every work tree is removed');
  });

  it('bad input changes nothing: unknown repository, invalid registration, empty request', async () => {
    await withHarness(opts(), async (h) => {
      const n0 = await stack.db.repoChange.count();
      await assert.rejects(h.changes.startChange({ repo: 'no-such-repo', request: 'x' }, OP), /no repository is registered as no-such-repo/);
      await assert.rejects(h.changes.startChange({ repo: 'x', request: '   ' }, OP), /the request is empty/);
      await assert.rejects(h.changes.registerRepo({ name: 'bad name!', cloneUrl: 'relative/path' }, OP), /invalid repository/);
      await assert.rejects(h.changes.registerRepo({ name: 'creds', cloneUrl: 'https://user:pw@example.com/x.git' }, OP), /must not carry credentials/);
      await assert.rejects(h.changes.registerRepo({ name: 'loose', cloneUrl: '/tmp/x', policy: { protectedPaths: 'nope' } }, OP), /invalid repository/);
      assert.equal(await stack.db.repoChange.count(), n0);
      const r = await h.send('/change');
      assert.match(r.reply ?? '', /usage: \/change <repo> <request>/);
    });
  });
});

