/** Skills (SKILL.md parsing, the catalogue, matching through the index) and the memory policy, on SQLite. */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { parseText, type ParsedCommand } from '../../common/commands.js';
import { openSqliteKnowledgeIndex } from '../../domain/knowledge/index-store.js';
import { memoryNeedsApproval } from '../../domain/knowledge/memory.js';
import { createTurnKnowledge } from '../../domain/knowledge/turn-knowledge.js';
import { createIdentity } from '../../domain/governance.js';
import { testDatabases } from '../helpers/db.js';
import { recordingSender } from '../helpers/recording-sender.js';
import { createSkillMatcher, loadSkillCatalogue, parseSkill, skillMatches, skillsPromptText } from '../../domain/knowledge/skills.js';

const dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(path.join(tmpdir(), 'steward-skills-'));
  dirs.push(d);
  return d;
};
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
const put = (dir: string, name: string, text: string) => {
  mkdirSync(path.join(dir, name), { recursive: true });
  writeFileSync(path.join(dir, name, 'SKILL.md'), text);
};
const SKILL = '---\nname: deploy-rollback\ndescription: Roll back a failed deployment\nwhen: a deploy failed\nroles: [admin, operator]\n---\n1. Freeze the pipeline.\n';

describe('skills', () => {
  it('parses SKILL.md front matter, versions by content, and refuses bad ones with the reason', () => {
    const s = parseSkill(SKILL, '/x/SKILL.md', 'operator');
    assert.deepEqual([s.name, s.description, s.when, s.roles, s.body], ['deploy-rollback', 'Roll back a failed deployment', 'a deploy failed', ['admin', 'operator'], '1. Freeze the pipeline.']);
    assert.match(s.version, /^[0-9a-f]{12}$/);
    assert.notEqual(parseSkill(SKILL.replace('Freeze', 'Halt'), '/x', 'operator').version, s.version);
    assert.equal(parseSkill(SKILL.replace('when: a deploy failed', 'when_to_use: a deploy failed'), '/x', 'operator').when, 'a deploy failed');
    assert.throws(() => parseSkill('no front matter', '/x', 'operator'), /no YAML front matter/);
    assert.throws(() => parseSkill('---\nname: Bad Name\ndescription: x\n---\nbody', '/x', 'operator'), /name: lowercase letters/);
    assert.throws(() => parseSkill('---\nname: ok\n---\nbody', '/x', 'operator'), /description/);
    assert.throws(() => parseSkill('---\nname: ok\ndescription: d\nroles: [king]\n---\nbody', '/x', 'operator'), /roles\.0: a role is one of/);
    assert.throws(() => parseSkill('---\nname: ok\ndescription: d\n---\n   ', '/x', 'operator'), /body .* is empty/);
    assert.throws(() => parseSkill('---\nname: [unclosed\n---\nbody', '/x', 'operator'), /not YAML/);
  });

  it("loads the operator's folder and the workspace's skills/, the workspace winning on a name; problems listed", async () => {
    const op = tmp();
    const ws = tmp();
    put(op, 'deploy-rollback', SKILL);
    put(op, 'backup', '---\nname: backup\ndescription: Take a backup of the database\n---\nRun the backup job.\n');
    put(path.join(ws, 'skills'), 'deploy-rollback', SKILL.replace('Freeze the pipeline', 'WORKSPACE VERSION'));
    put(path.join(ws, 'skills'), 'bad', 'nothing');
    const c = await loadSkillCatalogue(op, ws);
    assert.deepEqual(c.skills.map((s) => [s.name, s.source]), [['backup', 'operator'], ['deploy-rollback', 'workspace']]);
    assert.match(c.skills[1]!.body, /WORKSPACE VERSION/);
    assert.equal(c.problems.length, 1);
    assert.deepEqual((await loadSkillCatalogue(path.join(op, 'missing'), undefined)).skills, []);
  });

  it('matches a message by two topic words or the whole name, never by one shared word; roles filter; through the index', async () => {
    assert.ok(skillMatches({ name: 'deploy-rollback', description: 'Roll back a failed deployment', when: '' }, 'the deploy failed, roll it back'));
    assert.ok(skillMatches({ name: 'deploy-rollback', description: 'x', when: '' }, 'run the deploy rollback please'));
    assert.ok(!skillMatches({ name: 'deploy-rollback', description: 'Roll back a failed deployment', when: '' }, 'what failed today?'));
    assert.ok(!skillMatches({ name: 'deploy-rollback', description: 'Roll back a failed deployment', when: '' }, 'the and of with'));
    const op = tmp();
    put(op, 'deploy-rollback', SKILL);
    put(op, 'backup', '---\nname: backup\ndescription: Take a backup of the database\n---\nRun the backup job.\n');
    const index = openSqliteKnowledgeIndex(path.join(tmp(), 'k.db'));
    try {
      const m = createSkillMatcher({ operatorDir: op, knowledge: async () => index, ttlMs: 0 });
      assert.deepEqual((await m.match(null, 'the deployment failed, roll back', 'admin')).map((s) => s.name), ['deploy-rollback']);
      assert.deepEqual(await m.match(null, 'the deployment failed, roll back', 'member'), [], 'roles filter');
      assert.deepEqual((await m.match(null, 'take a database backup now', 'member')).map((s) => s.name), ['backup']);
      assert.deepEqual(await m.match(null, 'hello there', 'admin'), []);
      assert.equal((await index.documents('skills:*')).size, 2, 'the catalogue is indexed');
      rmSync(path.join(op, 'backup'), { recursive: true });
      await m.match(null, 'x', 'admin');
      assert.equal((await index.documents('skills:*')).size, 1, 'a removed skill leaves the index');
    } finally {
      await index.close();
    }
    const text = skillsPromptText([parseSkill(SKILL, '/x', 'workspace')], [{ name: 'backup', version: 'abc' }]);
    assert.match(text ?? '', /Skill "deploy-rollback" \(version [0-9a-f]{12}, from the chat's workspace\)[\s\S]*Procedure:\n1\. Freeze/);
    assert.match(text ?? '', /already given earlier in this session .*: backup \(abc\)/);
    assert.equal(skillsPromptText([], []), undefined);
  });
});

const parseCommand = (text: string): ParsedCommand | undefined => {
  const p = parseText(text);
  return p.kind === 'command' ? p.command : undefined;
};

describe('memory policy and commands', () => {
  it('members wait by default; all makes everyone wait; none nobody', () => {
    assert.equal(memoryNeedsApproval('members', 'member'), true);
    assert.equal(memoryNeedsApproval('members', 'operator'), true);
    assert.equal(memoryNeedsApproval('members', 'admin'), false);
    assert.equal(memoryNeedsApproval('all', 'overlord'), true);
    assert.equal(memoryNeedsApproval('none', 'member'), false);
  });

  it('parses /memory and /skills, refusing bad input', () => {
    assert.deepEqual(parseCommand('/memory'), { kind: 'memory', action: 'list' });
    assert.deepEqual(parseCommand('/memory forget m-1a2b3c4d'), { kind: 'memory', action: 'forget', id: 'm-1a2b3c4d' });
    assert.deepEqual(parseCommand('/memory approve m-1a2b3c4d'), { kind: 'memory', action: 'approve', id: 'm-1a2b3c4d' });
    assert.match(JSON.stringify(parseCommand('/memory forget')), /memory forget <id>/);
    assert.match(JSON.stringify(parseCommand('/memory forget ../etc')), /a memory id looks like/);
    assert.match(JSON.stringify(parseCommand('/memory wipe m-1a2b3c4d')), /invalid/);
    assert.deepEqual(parseCommand('/skills'), { kind: 'skills' });
    assert.equal(parseCommand('/skills all')?.kind, 'invalid');
  });
});

describe('the remember tool with real identities (SQLite)', () => {
  it("a member's proposal waits and the admins are asked; an admin's is active and recalled; a retried call proposes once", async () => {
    const kind = testDatabases().find((d) => d.name === 'sqlite')!;
    const database = await kind.create();
    const index = openSqliteKnowledgeIndex(path.join(tmp(), 'k.db'));
    try {
      const db = database.db;
      const member = await createIdentity(db, { name: 'Mia', role: 'member', accounts: [{ platform: 'telegram', userId: '1001' }], createdBy: 'test' });
      const admin = await createIdentity(db, { name: 'Ada', role: 'admin', accounts: [{ platform: 'telegram', userId: '1002', dmChatId: '1002', dmAccount: 'bot' }], createdBy: 'test' });
      const sender = recordingSender();
      const posts = sender.posts;
      const chat = { platform: 'telegram' as const, account: 'bot', chatId: '-100' };
      const tk = createTurnKnowledge({ db, knowledge: async () => index, retriever: { workspaceOf: async () => null, ground: async () => undefined }, senders: { telegram: sender }, ttlMs: 0 });
      const ctx = (toolCallId: string, requestedBy: string) => ({ conversation: chat, sessionId: 's', turnId: 't1', toolCallId, requestedBy });
      const byMember = await tk.remember(ctx('c1', member.id), { text: 'Standup is at nine.', kind: 'fact', scope: 'chat' });
      assert.match(byMember.text, /waits for an admin's approval/);
      const again = await tk.remember(ctx('c1', member.id), { text: 'Standup is at nine.', kind: 'fact', scope: 'chat' });
      assert.equal(again.detail.id, byMember.detail.id, 'a retried call proposes once');
      assert.equal(await db.memory.count(), 1);
      assert.ok(posts.some((p) => p.text.includes('Memory to approve') && p.text.includes(String(byMember.detail.id))), 'the admins are asked');
      assert.deepEqual(await tk.recall(chat, 'when is standup'), [], 'pending: not recalled');
      const byAdmin = await tk.remember(ctx('c2', admin.id), { text: 'Deploys freeze on Fridays.', kind: 'decision', scope: 'chat' });
      assert.match(byAdmin.text, /Remembered as m-/);
      const recalled = await tk.recall(chat, 'can we deploy on friday?');
      assert.deepEqual(recalled.map((m) => [m.text, m.proposedBy, m.identityId]), [['Deploys freeze on Fridays.', 'Ada', admin.id]]);
      assert.match(tk.recallText(recalled) ?? '', /<memory id="m-[a-z0-9]{8}" kind="decision" scope="chat" by="Ada" at="\d{4}-\d\d-\d\d">\nDeploys freeze on Fridays\.\n<\/memory>/);
      const noWs = await tk.remember(ctx('c3', admin.id), { text: 'x', kind: 'fact', scope: 'workspace' });
      assert.equal(noWs.ok, false);
    } finally {
      await index.close();
      await database.cleanup();
    }
  });

  it('a turn several people shaped gets the skills the least of them may use, and its memory waits unless all of them may approve it', async () => {
    const kind = testDatabases().find((d) => d.name === 'sqlite')!;
    const database = await kind.create();
    const index = openSqliteKnowledgeIndex(path.join(tmp(), 'k.db'));
    try {
      const db = database.db;
      const member = await createIdentity(db, { name: 'Mo', role: 'member', accounts: [{ platform: 'telegram', userId: '2001' }], createdBy: 'test' });
      const admin = await createIdentity(db, { name: 'Al', role: 'admin', accounts: [{ platform: 'telegram', userId: '2002' }], createdBy: 'test' });
      const admin2 = await createIdentity(db, { name: 'Bea', role: 'admin', accounts: [{ platform: 'telegram', userId: '2003' }], createdBy: 'test' });
      const op = tmp();
      put(op, 'deploy-rollback', SKILL);
      const chat = { platform: 'telegram' as const, account: 'bot', chatId: '-200' };
      const tk = createTurnKnowledge({ db, knowledge: async () => index, retriever: { workspaceOf: async () => null, ground: async () => undefined }, skills: createSkillMatcher({ operatorDir: op, knowledge: async () => index, ttlMs: 0 }), ttlMs: 0 });
      const names = async (requesters?: string[]) => (await tk.skillsFor(chat, 'the deployment failed, roll back', admin.id, {}, requesters)).injected.map((x) => x.name);
      assert.deepEqual(await names(), ['deploy-rollback'], 'the last sender alone (an admin): the admin-only skill');
      assert.deepEqual(await names([admin.id, admin2.id]), ['deploy-rollback']);
      assert.deepEqual(await names([member.id, admin.id]), [], "a member's message in the batch: not the admin-only skill");
      const ctx = (toolCallId: string, requesters: string[]) => ({ conversation: chat, sessionId: 's', turnId: 't2', toolCallId, requestedBy: requesters.at(-1)!, requesters });
      const admins = await tk.remember(ctx('c1', [admin.id, admin2.id]), { text: 'Releases are cut on Mondays.', kind: 'fact', scope: 'chat' });
      assert.match(admins.text, /Remembered as m-/, 'every contributor may approve it: active');
      const mixed = await tk.remember(ctx('c2', [member.id, admin.id]), { text: 'The on-call phone is 555-0100.', kind: 'fact', scope: 'chat' });
      assert.match(mixed.text, /waits for an admin's approval/, 'the admin was last, yet a member shaped it: it waits');
      const row = await db.memory.findUniqueOrThrow({ where: { id: String(mixed.detail.id) } });
      assert.deepEqual([row.proposedBy, JSON.parse(row.contributors ?? '[]')], ['Al', [member.id, admin.id]]);
    } finally {
      await index.close();
      await database.cleanup();
    }
  });
});
