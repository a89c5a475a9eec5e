/**
 * `steward policy what-if` on both databases, over a recorded set of repository changes (their
 * stored patches, bases, scopes and verdicts, a real git repository for the older one whose
 * repository layer was not recorded) and past tool calls: tightening a protected path flips
 * exactly the changes that touched it; loosening flips the others back; the approval list
 * flips exactly the calls of the tools it adds or drops. It writes nothing (CLI and API).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import { createHttpApp, startHttpServer } from '../../adapters/http/app.js';
import { loadConfig } from '../../config/index.js';
import { putBlob } from '../../domain/blobs.js';
import { formatWhatIf, policyWhatIf, WhatIfPolicySchema, type WhatIfReport } from '../../domain/changes/what-if.js';
import { McpServerSchema, mcpNeedsApproval } from '../../common/mcp.js';
import type { Role } from '../../common/roles.js';
import { deleteMcpServer, insertMcpServer } from '../../domain/store/mcp.js';
import { writeReceipt } from '../../domain/receipts.js';
import { createChange, saveRepo } from '../../domain/store/changes.js';
import { opsCommand } from '../../platform/ops-cli.js';
import { createGitFixture, type GitFixture } from '../helpers/git-fixture.js';
import { testDatabases } from '../helpers/db.js';
import type { TestDatabase } from '../helpers/db.js';

const newFile = (p: string, line = 'changed') => `diff --git a/${p} b/${p}\nnew file mode 100644\n--- /dev/null\n+++ b/${p}\n@@ -0,0 +1 @@\n+${line}\n`;

for (const kind of testDatabases()) {
  describe(`policy what-if (${kind.name})`, () => {
    let database: TestDatabase;
    let fixture: GitFixture;
    let dir: string;
    const repo = `shop-${kind.name}`;
    const ids: Record<string, string> = {};

    before(async () => {
      database = await kind.create();
      dir = mkdtempSync(path.join(tmpdir(), 'steward-what-if-'));
      // the repository's own layer protects secrets/ (read from git for the change that did not record it)
      fixture = createGitFixture({ 'README.md': '# Shop\n', '.steward/policy.json': JSON.stringify({ protectedPaths: ['secrets/**'] }) });
      const db = database.db;
      await saveRepo(db, repo, { cloneUrl: fixture.bare, defaultBranch: 'main', checks: '[]', policy: '{}', agent: JSON.stringify({ kind: 'builtin' }), github: null }, 'test');
      const base = fixture.head();
      const record = async (name: string, files: string[], verdict: 'pass' | 'fail', recordLayer: boolean) => {
        const id = `chg-${name}-${kind.name}`;
        ids[name] = id;
        await createChange(db, { id, repo, request: `change ${name}`, baseBranch: 'main', requestedBy: { id: 'operator', name: 'the operator' } });
        const patchHash = await putBlob(db, files.map((f) => newFile(f)).join(''));
        const v = { verdict, reasons: [], baseSha: base, patchHash, stats: { files: files.length, additions: files.length, deletions: 0 }, violations: [], checks: [], promotion: 'patch', forbidSelfApproval: true, approvalTimeoutMs: 3_600_000, at: new Date().toISOString(), ...(recordLayer ? { repoPolicy: { protectedPaths: ['secrets/**'] } } : {}) };
        await db.repoChange.update({ where: { id }, data: { patchHash, baseSha: base, verdict: JSON.stringify(v), phase: 'done', status: verdict === 'pass' ? 'done' : 'refused', draft: JSON.stringify({ goal: name, scope: [], acceptance: [], constraints: [], risks: [], openQuestions: [] }) } });
      };
      // under the policy in force ({protectedPaths: ["docs/**"]}): docs refused, the rest allowed but secrets/
      await record('docs', ['docs/guide.md'], 'fail', true);
      await record('app', ['src/app.ts'], 'pass', true);
      await record('charge', ['src/payments/charge.ts'], 'pass', true);
      await record('refund', ['src/payments/refund.ts', 'README.md'], 'pass', false);
      await record('secret', ['secrets/key.txt'], 'fail', true);
      // past tool calls: a note (no approval), a post (approved), a proposed action (always approved)
      const call = (turn: string, tool: string) => writeReceipt(db, { key: `${turn}:tool:${tool}`, kind: 'tool.call', data: { turnId: turn, tool, toolCallId: `call-${tool}`, ok: true } });
      await call(`t1-${kind.name}`, 'save_note');
      await call(`t2-${kind.name}`, 'post_to_chat');
      await call(`t3-${kind.name}`, 'http_request');
    });
    after(async () => {
      fixture?.cleanup();
      rmSync(dir, { recursive: true, force: true });
      await database?.cleanup();
    });

    const current = { repoPolicy: { protectedPaths: ['docs/**'] }, approvalTools: ['post_to_chat'] };
    const flipped = (r: WhatIfReport) => r.changes.flipped.map((c) => c.id).sort();

    it('tightening a protected path flips exactly the changes that touched it, with the reasons under both', async () => {
      const r = await policyWhatIf(database.db, { proposed: { repoPolicy: { protectedPaths: ['docs/**', 'src/payments/**'] } }, current, repo });
      assert.equal(r.changes.evaluated, 5);
      assert.deepEqual(flipped(r), [ids.charge, ids.refund].sort());
      const refund = r.changes.flipped.find((c) => c.id === ids.refund)!;
      assert.deepEqual([refund.old.allowed, refund.new.allowed], [true, false]);
      assert.deepEqual(refund.old.reasons, []);
      assert.match(refund.new.reasons.join('\n'), /protected-path src\/payments\/refund\.ts/);
      assert.deepEqual(refund.notes, [], "the older change's repository layer was read from its repository at the base");
      assert.equal(r.actions, null, 'no approval list proposed: no tool calls judged');
    });

    it('loosening flips the others back; the repository layer still refuses secrets/', async () => {
      const r = await policyWhatIf(database.db, { proposed: { repoPolicy: {} }, current, repo });
      assert.deepEqual(flipped(r), [ids.docs]);
      const docs = r.changes.flipped[0]!;
      assert.deepEqual([docs.old.allowed, docs.new.allowed, docs.recorded], [false, true, 'fail']);
      assert.match(docs.old.reasons[0]!, /protected-path docs\/guide\.md/);
      assert.equal(r.changes.unchanged, 4, 'the secrets change stays refused by the repository layer');
    });

    it('the approval list flips exactly the calls of the tools it adds or drops; proposed actions always need approval', async () => {
      const r = await policyWhatIf(database.db, { proposed: { approvalTools: ['save_note'] }, current, since: new Date(Date.now() - 3_600_000) });
      const byTool = Object.fromEntries(r.actions!.flipped.map((a) => [a.tool, [a.old.approval, a.new.approval]]));
      assert.deepEqual(byTool, { save_note: [false, true], post_to_chat: [true, false] });
      assert.ok(r.actions!.evaluated >= 3);
      const none = await policyWhatIf(database.db, { proposed: { approvalTools: ['*'] }, current, since: new Date(Date.now() + 3_600_000) });
      assert.equal(none.actions!.evaluated, 0, '--since in the future: nothing to judge');
    });

    it("an MCP server's tool is judged by the server's own policy, through the live path's function (mcpNeedsApproval)", async () => {
      const db = database.db;
      const ops = `ops-${kind.name}`;
      const spec = McpServerSchema.parse({ name: ops, transport: 'http', url: 'http://127.0.0.1:9/mcp', readOnlyTools: ['status'], approval: { deploy: 'always', restart: 'admin' } });
      assert.ok(await insertMcpServer(db, spec, 'api'));
      // past calls as the tool activity receipts them (the requester's role recorded; the oldest without it)
      const calls: Array<[string, string, Role | null | undefined]> = [
        ['deploy', `${ops}.deploy`, 'member'],
        ['status', `${ops}.status`, 'member'],
        ['restart-member', `${ops}.restart`, 'member'],
        ['restart-admin', `${ops}.restart`, 'admin'],
        ['restart-objective', `${ops}.restart`, null],
        ['restart-unrecorded', `${ops}.restart`, undefined],
        ['gone', `gone-${kind.name}.wipe`, 'admin'],
      ];
      for (const [id, tool, role] of calls) {
        await writeReceipt(db, { key: `mcp-${id}-${kind.name}:tool:c`, kind: 'tool.call', data: { turnId: `mcp-${id}-${kind.name}`, tool, toolCallId: 'c', ok: true, server: tool.split('.')[0], ...(role !== undefined ? { requesterRole: role } : {}) } });
      }
      const judged = async (approvalTools: string[]) => {
        const r = await policyWhatIf(db, { proposed: WhatIfPolicySchema.parse({ approvalTools }), current: { repoPolicy: {}, approvalTools: [] } });
        return Object.fromEntries(r.actions!.flipped.filter((a) => a.turnId.startsWith('mcp-')).map((a) => [a.turnId.replace(`-${kind.name}`, ''), a]));
      };
      const all = await judged(['*']);
      // a tool that always waited is not reported as "no approval" -> approval; nor is one a member's role made wait
      assert.deepEqual(Object.keys(all).sort(), ['mcp-gone', 'mcp-restart-admin', 'mcp-restart-objective', 'mcp-status']);
      assert.match(all['mcp-status']!.old.reason, new RegExp(`${ops}\\.status is not in the approval list; the MCP server ${ops}'s policy for it is never`));
      assert.match(all['mcp-restart-admin']!.old.reason, /admin and above run it at once; the requester was admin/);
      assert.match(all['mcp-gone']!.old.reason, /no longer registered: its own policy is not known/);
      // the verdicts are the live path's: mcpNeedsApproval on the registered spec and the recorded role
      for (const [id, tool, role] of calls.slice(0, 5)) {
        const t = tool.split('.')[1]!;
        const flipped = all[`mcp-${id}`] !== undefined;
        assert.equal(flipped, mcpNeedsApproval(['*'], spec, t, role ?? undefined) !== mcpNeedsApproval([], spec, t, role ?? undefined), id);
      }
      // an MCP tool in the approval list, as STEWARD_APPROVAL_TOOLS names it
      const listed = await judged([`${ops}.*`]);
      assert.deepEqual(Object.keys(listed).sort(), ['mcp-restart-admin', 'mcp-restart-objective', 'mcp-status']);
      assert.match(formatWhatIf({ since: null, repo: null, changes: { evaluated: 0, flipped: [], unchanged: 0 }, actions: { evaluated: 3, flipped: Object.values(listed), unchanged: 0 } }), new RegExp(`${ops}\\.status .*: no approval -> approval\\n    current: ${ops}\\.status is not in the approval list; the MCP server ${ops}'s policy for it is never \\(never waits\\); proposed: ${ops}\\.\\* is in the approval list`));
      assert.deepEqual(Object.keys(await judged([`${ops}.deploy`])), [], 'deploy always waited: nothing changes');
      await deleteMcpServer(db, ops);
    });

    it('from the CLI and the API, writing nothing; a bad policy file is refused with the reason', async () => {
      const db = database.db;
      const counts = async () => [await db.receipt.count(), await db.repoChange.count(), await db.approval.count()];
      const before = await counts();
      const currentFile = path.join(dir, 'current.json');
      writeFileSync(currentFile, JSON.stringify(current.repoPolicy));
      const proposedFile = path.join(dir, 'proposed.json');
      writeFileSync(proposedFile, JSON.stringify({ repoPolicy: { protectedPaths: ['docs/**', 'src/payments/**'] } }));
      const env = { DATABASE_URL: database.url, STEWARD_REPO_POLICY: currentFile, STEWARD_APPROVAL_TOOLS: 'post_to_chat', STEWARD_DATA_DIR: dir };
      const out: string[] = [];
      const err: string[] = [];
      const io = { config: () => loadConfig(env, dir), out: (s: string) => void out.push(s), err: (s: string) => void err.push(s), env };
      assert.equal(await opsCommand('policy', ['what-if', proposedFile, '--repo', repo], io), 0, err.join(''));
      const text = out.join('');
      assert.match(text, /Repository changes of shop-\w+: 5 evaluated, 2 would be decided differently\./);
      assert.match(text, new RegExp(`- ${ids.charge} \\(shop-\\w+, [^)]+\\): allowed -> refused; recorded gate verdict pass`));
      assert.match(text, /under the proposed policy: protected-path src\/payments\/charge\.ts/);
      assert.match(text, /Nothing was written\./);
      out.length = 0;
      assert.equal(await opsCommand('policy', ['what-if', proposedFile, '--json', '--repo', repo], io), 0);
      assert.equal((JSON.parse(out.join('')) as WhatIfReport).changes.flipped.length, 2);
      const bad = path.join(dir, 'bad.json');
      writeFileSync(bad, JSON.stringify({ repoPolicy: { protectedPath: ['x'] } }));
      assert.equal(await opsCommand('policy', ['what-if', bad], io), 2);
      assert.match(err.join(''), /unknown policy field "protectedPath"/);
      writeFileSync(bad, '{}');
      assert.equal(await opsCommand('policy', ['what-if', bad], io), 2);
      assert.match(err.join(''), /names repoPolicy, approvalTools or both/);
      assert.equal(await opsCommand('policy', ['what-if', proposedFile, '--since', 'yesterday'], io), 2);
      assert.equal(await opsCommand('policy', ['apply', proposedFile], io), 2);
      // random arguments: never a throw; 0 or 2
      await fc.assert(
        fc.asyncProperty(fc.array(fc.oneof(fc.constantFrom('what-if', proposedFile, bad, '--since', '--repo', '--json', '--limit', '7d', '0', repo), fc.string({ maxLength: 12 })), { maxLength: 6 }), async (args) => {
          const code = await opsCommand('policy', args, { ...io, out: () => undefined, err: () => undefined });
          assert.ok(code === 0 || code === 2, `exit ${code} for ${JSON.stringify(args)}`);
        }),
        { numRuns: 60 },
      );

      const TOKEN = 'what-if-token-0123456789abcdef';
      const server = await startHttpServer(
        createHttpApp({
          ingress: {} as never,
          apiToken: TOKEN,
          health: async () => ({ ok: true, checks: {} }),
          policyWhatIf: (r) => policyWhatIf(db, { proposed: r.policy, current, ...(r.since ? { since: r.since } : {}), ...(r.repo ? { repo: r.repo } : {}) }),
        }),
        { host: '127.0.0.1', port: 0 },
      );
      try {
        const post = (body: unknown) => fetch(`${server.url}/api/v1/policy/what-if`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
        const ok = await post({ policy: { repoPolicy: {} }, repo });
        assert.equal(ok.status, 200);
        assert.deepEqual(flipped((await ok.json()) as WhatIfReport), [ids.docs]);
        assert.equal((await post({ policy: {} })).status, 400);
        assert.equal((await post({ policy: { repoPolicy: {} }, since: 'soon' })).status, 400);
        // random bodies: never a 5xx; a refusal carries { error }; an answer is a report
        const field = fc.oneof(fc.constant(undefined), fc.string(), fc.integer(), fc.boolean(), fc.array(fc.string(), { maxLength: 3 }), fc.dictionary(fc.string({ maxLength: 12 }), fc.jsonValue(), { maxKeys: 3 }));
        const policyArb = fc.oneof(fc.jsonValue(), fc.record({ repoPolicy: fc.oneof(field, fc.record({ protectedPaths: fc.array(fc.string({ maxLength: 20 }), { maxLength: 3 }) })), approvalTools: fc.oneof(field, fc.array(fc.constantFrom('save_note', 'post_to_chat', '*', 'Bad Name', ''), { maxLength: 3 })) }, { requiredKeys: [] }));
        await fc.assert(
          fc.asyncProperty(fc.record({ policy: policyArb, since: fc.oneof(field, fc.date({ noInvalidDate: true }).map((d) => d.toISOString())), repo: fc.oneof(field, fc.constant(repo)) }, { requiredKeys: [] }), async (body) => {
            const res = await post(body);
            assert.ok(res.status === 200 || res.status === 400, `status ${res.status}`);
            const json = (await res.json()) as { error?: string; changes?: unknown };
            assert.ok(res.status === 200 ? json.changes !== undefined : typeof json.error === 'string');
          }),
          { numRuns: 60 },
        );
        const raw = await fetch(`${server.url}/api/v1/policy/what-if`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: '{"policy": ' });
        assert.equal(raw.status, 400);
      } finally {
        await server.close();
      }
      assert.deepEqual(await counts(), before, 'nothing was written');
    });
  });
}
