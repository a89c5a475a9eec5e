/**
 * The pure parts of repository changes: intake records against the agent-harness JSON schemas,
 * the request and registration schemas, and the /change and /answer commands.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { parseText } from '../../common/commands.js';
import {
  buildIntakeResult,
  ChangeRequestSchema,
  draftIsPlannable,
  IntakeModelOutputSchema,
  RepoRegistrationSchema,
  TaskDraftSchema,
} from '../../common/changes.js';
import { changePolicy, DEFAULT_POLICY } from '../../common/changes/policy.js';
import { harnessErrors } from '../helpers/harness-schemas.js';

const complete = IntakeModelOutputSchema.parse({
  intent: 'bug',
  goal: 'Stop the crash on empty input',
  scope: ['src/parse.ts'],
  acceptance: ['npm test passes', 'empty input returns []'],
});

describe('intake records', () => {
  it('a complete submission is planned; the records validate against the protocol schemas', () => {
    const r = buildIntakeResult('fix the crash', complete);
    assert.equal(r.status, 'planned');
    assert.equal(r.interaction.question, null);
    assert.equal(r.task_draft.next_action, 'plan');
    assert.deepEqual(harnessErrors('intake-result', r), []);
    assert.deepEqual(harnessErrors('task-draft', r.task_draft), []);
    assert.ok(draftIsPlannable(r.task_draft));
  });

  it('each missing field becomes a question; only the first is asked; the draft still validates', () => {
    const r = buildIntakeResult('do it', { ...complete, scope: [], acceptance: [] });
    assert.equal(r.status, 'needs_clarification');
    assert.match(r.interaction.question ?? '', /Which files or directories/);
    assert.equal(r.task_draft.open_questions.length, 2);
    assert.match(r.interaction.blocking_gap ?? '', /scope, acceptance/);
    assert.deepEqual(harnessErrors('intake-result', r), []);
    assert.equal(draftIsPlannable(r.task_draft), false);
  });

  it("the model's own open question is asked even when the draft is complete (and it stays plannable)", () => {
    const r = buildIntakeResult('x', { ...complete, open_questions: ['Keep the old API?'] });
    assert.equal(r.status, 'needs_clarification');
    assert.equal(r.interaction.question, 'Keep the old API?');
    assert.ok(draftIsPlannable(r.task_draft));
  });

  it('answers are part of the source input', () => {
    const r = buildIntakeResult('fix it', complete, ['only src/parse.ts']);
    assert.match(r.task_draft.source_input, /Clarifications:\n- only src\/parse.ts/);
  });

  it('property: any submission the model schema accepts yields records the JSON schemas accept', () => {
    const text = fc.string({ minLength: 1, maxLength: 40 }).filter((s) => s.trim().length > 0);
    fc.assert(
      fc.property(
        fc.record({
          intent: fc.constantFrom('bug', 'feature', 'explore', 'refactor', 'prototype', 'unknown'),
          goal: fc.oneof(fc.constant(''), text),
          scope: fc.array(text, { maxLength: 3 }),
          acceptance: fc.array(text, { maxLength: 3 }),
          open_questions: fc.array(text, { maxLength: 2 }),
          risk_signals: fc.array(text, { maxLength: 4 }),
        }),
        text,
        (sub, request) => {
          const parsed = IntakeModelOutputSchema.safeParse(sub);
          if (!parsed.success) return;
          const r = buildIntakeResult(request, parsed.data);
          assert.deepEqual(harnessErrors('intake-result', r), []);
          TaskDraftSchema.parse(r.task_draft);
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe('change and repository input', () => {
  it('validates change requests', () => {
    assert.ok(ChangeRequestSchema.safeParse({ repo: 'demo', request: 'x', base: 'release/1.2' }).success);
    for (const bad of [{ repo: 'demo' }, { repo: 'demo', request: '  ' }, { repo: 'de mo', request: 'x' }, { repo: 'demo', request: 'x', base: 'a..b' }, { repo: 'demo', request: 'x', base: '-rf' }, { repo: 'demo', request: 'x', extra: 1 }]) {
      assert.equal(ChangeRequestSchema.safeParse(bad).success, false, JSON.stringify(bad));
    }
  });

  it('validates registrations, with defaults', () => {
    const r = RepoRegistrationSchema.parse({ name: 'demo', cloneUrl: 'file:///srv/git/demo.git' });
    assert.equal(r.defaultBranch, 'main');
    assert.deepEqual(r.agent, { kind: 'builtin' });
    assert.deepEqual(r.checks, []);
    for (const bad of [
      { name: 'demo', cloneUrl: 'relative/path' },
      { name: 'demo', cloneUrl: 'https://u:p@example.com/x.git' },
      { name: 'demo', cloneUrl: '/x', github: { owner: 'a', repo: 'b', tokenRef: 'ghp_literal_token' } },
      { name: 'demo', cloneUrl: '/x', agent: { command: [] } },
      { name: 'demo', cloneUrl: '/x', agent: { kind: 'builtin', model: 'nope' } },
      { name: 'demo', cloneUrl: '/x', policy: { promotion: 'merge' } },
    ]) {
      assert.equal(RepoRegistrationSchema.safeParse(bad).success, false, JSON.stringify(bad));
    }
  });

  it('parses /objective and /objectives', () => {
    assert.deepEqual(parseText('/objective add digest 30m tz=Europe/Berlin Summarise the news'), {
      kind: 'command',
      command: { kind: 'objective', action: 'add', name: 'digest', schedule: { every: '30m', timezone: 'Europe/Berlin' }, prompt: 'Summarise the news' },
    });
    assert.deepEqual(parseText('/objective add weekly "0 9 * * 1" Plan the week'), {
      kind: 'command',
      command: { kind: 'objective', action: 'add', name: 'weekly', schedule: { cron: '0 9 * * 1' }, prompt: 'Plan the week' },
    });
    assert.deepEqual(parseText('/objective pause digest'), { kind: 'command', command: { kind: 'objective', action: 'pause', name: 'digest' } });
    for (const bad of ['/objective', '/objective add digest', '/objective add digest soon Do it', '/objective add digest 30m', '/objective explode digest', '/objective add Bad 30m x']) {
      assert.equal((parseText(bad) as { command: { kind: string } }).command.kind, 'invalid', bad);
    }
    assert.deepEqual(parseText('/objectives'), { kind: 'command', command: { kind: 'objectives' } });
  });

  it('parses /change and /answer', () => {
    assert.deepEqual(parseText('/change demo Fix the  greeting\nplease'), { kind: 'command', command: { kind: 'change', repo: 'demo', request: 'Fix the  greeting\nplease' } });
    assert.equal((parseText('/change demo') as { command: { kind: string } }).command.kind, 'invalid');
    assert.equal((parseText('/change') as { command: { kind: string } }).command.kind, 'invalid');
    assert.equal((parseText('/change bad!name fix') as { command: { kind: string } }).command.kind, 'invalid');
    assert.deepEqual(parseText('/answer only src'), { kind: 'command', command: { kind: 'answer', text: 'only src' } });
    assert.equal((parseText('/answer') as { command: { kind: string } }).command.kind, 'invalid');
  });
});

describe('the policy a change is held to', () => {
  it('the registration may set what the global file leaves open, never loosen what it sets', () => {
    assert.equal(changePolicy({ registration: { promotion: 'draft-pr' } }).promotion, 'draft-pr');
    assert.equal(changePolicy({ global: { promotion: 'patch' }, registration: { promotion: 'draft-pr' } }).promotion, 'patch');
    assert.equal(changePolicy({ global: { maxDiffLines: 100 }, registration: { maxDiffLines: 5000 } }).maxDiffLines, 100);
  });

  it("the repository's own file can only tighten", () => {
    const loose = changePolicy({
      registration: { allowedScope: ['src/**'] },
      repo: { maxDiffLines: 1e9, promotion: 'draft-pr', commands: ['*'], allowLockfiles: true, forbidSelfApproval: false, allowedScope: ['**'] },
    });
    assert.equal(loose.maxDiffLines, DEFAULT_POLICY.maxDiffLines);
    assert.equal(loose.promotion, 'patch');
    assert.deepEqual(loose.commands, [...DEFAULT_POLICY.commands]);
    assert.equal(loose.allowLockfiles, false);
    assert.equal(loose.forbidSelfApproval, true);
    assert.ok(loose.allowedScopes.some((s) => s.includes('src/**')), 'the registration scope still applies');
    const tight = changePolicy({ registration: { promotion: 'draft-pr' }, repo: { maxDiffLines: 10, protectedPaths: ['src/core/**'], promotion: 'draft-pr-after-approval', commands: ['git'] } });
    assert.equal(tight.maxDiffLines, 10);
    assert.ok(tight.protectedPaths.includes('src/core/**'));
    assert.equal(tight.promotion, 'draft-pr-after-approval');
    assert.deepEqual(tight.commands, ['git']);
  });
});
