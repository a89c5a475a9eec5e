/**
 * Property tests over what crosses the chat boundary: command parsing and the inbound
 * message schema never throw on any input, bad input is described, and every catalog command
 * parses from its own usage line.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { COMMANDS, helpText, parseText, specOf, telegramCommandName } from '../../common/commands.js';
import { InboundMessageSchema } from '../../common/schemas.js';

const KINDS = new Set([...COMMANDS.map((c) => c.name), 'invalid', 'unknown']);

/** Text that looks like commands: a slash, a catalog name (either spelling) or junk, then words. */
const commandish = fc
  .tuple(
    fc.constantFrom('/', ' /', '/', '//', '\t/'),
    fc.oneof(fc.constantFrom(...COMMANDS.map((c) => c.name), ...COMMANDS.map((c) => telegramCommandName(c.name)), 'start', 'STOP', 'Approve_Action'), fc.string({ maxLength: 12 })),
    fc.option(fc.constantFrom('@steward_bot', '@x', '@'), { nil: '' }),
    fc.array(fc.oneof(fc.constantFrom('member', 'admin', 'overlord', 'K7Q2M9XD', 'abc123', 'on', 'off', 'all', 'mention', 'openai:gpt-4.1', 'high'), fc.string({ maxLength: 10 }), fc.string({ unit: 'binary', maxLength: 6 })), { maxLength: 5 }),
  )
  .map(([slash, name, at, words]) => `${slash}${name}${at}${words.length ? ` ${words.join(' ')}` : ''}`);

describe('command parsing (properties)', () => {
  it('never throws; every result is a message or a known command kind; invalid ones carry their usage', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string({ unit: 'binary', maxLength: 300 }), commandish), (text) => {
        const r = parseText(text);
        if (r.kind === 'message') {
          assert.equal(r.text, text);
          return;
        }
        assert.ok(KINDS.has(r.command.kind), r.command.kind);
        if (r.command.kind === 'invalid') assert.ok(r.command.error.length > 0);
        if (r.command.kind === 'unknown') assert.ok(r.command.name.length <= 64);
        // the role check finds a spec for every known command
        if (r.command.kind !== 'unknown' && r.command.kind !== 'invalid') assert.ok(specOf(r.command));
      }),
      { numRuns: 3000 },
    );
  });

  it('parses each catalog command from a valid example, in both spellings', () => {
    const examples: Record<string, string> = {
      steer: 'be brief',
      model: 'openai:gpt-4.1',
      think: 'low',
      approve: 'K7Q2M9XD member',
      deny: 'K7Q2M9XD',
      'approve-action': 'abc123',
      'deny-action': 'abc123 not today',
      bind: 'all team',
      'admin-channel': 'on',
      change: 'demo fix the greeting',
      answer: 'only src',
      objective: 'add digest 30m tz=Europe/Berlin Summarise the news',
      workspace: 'create docs /srv/docs',
      search: 'rollback steps',
      open: 'notes/howto.md',
      prompt: 'set Answer in German.',
      task: 'Write the release notes',
      tasks: 'issue',
      route: 't-1a2b3c4d issue p1 4h',
      triage: 'on openai:gpt-4.1-mini',
    };
    for (const c of COMMANDS) {
      for (const name of [c.name, telegramCommandName(c.name)]) {
        const r = parseText(`/${name}${examples[c.name] ? ` ${examples[c.name]}` : ''}`);
        assert.ok(r.kind === 'command' && r.command.kind === c.name, `${name}: ${JSON.stringify(r)}`);
      }
    }
    const deny = parseText('/deny_action ABC123 not   before Monday');
    assert.deepEqual(deny, { kind: 'command', command: { kind: 'deny-action', id: 'abc123', reason: 'not   before Monday' } });
    assert.deepEqual(parseText('/approve k7q2m9xd ADMIN'), { kind: 'command', command: { kind: 'approve', code: 'K7Q2M9XD', role: 'admin' } });
    const badRole = parseText('/approve K7Q2M9XD king');
    assert.ok(badRole.kind === 'command' && badRole.command.kind === 'invalid' && /king is not a role/.test(badRole.command.error));
    assert.ok(helpText('viewer').includes('/status') && !helpText('viewer').includes('/approve'));
  });

  it('parses the task commands: each form, and bad input with its reason', () => {
    const cmd = (text: string) => {
      const r = parseText(text);
      assert.equal(r.kind, 'command', text);
      return r.kind === 'command' ? r.command : undefined;
    };
    assert.deepEqual(cmd('/task hand T-1A2B3C4D'), { kind: 'task', action: 'hand', id: 't-1a2b3c4d' });
    assert.deepEqual(cmd('/task close t-1a2b3c4d'), { kind: 'task', action: 'close', id: 't-1a2b3c4d' });
    assert.deepEqual(cmd('/task close the window in room 4'), { kind: 'task', action: 'add', text: 'close the window in room 4' });
    assert.deepEqual(cmd('/route t-1a2b3c4d NOISE'), { kind: 'route', id: 't-1a2b3c4d', class: 'noise' });
    assert.deepEqual(cmd('/route t-1a2b3c4d task 2d p3'), { kind: 'route', id: 't-1a2b3c4d', class: 'task', priority: 'p3', due: '2d' });
    assert.deepEqual(cmd('/route t-1a2b3c4d task 2026-12-01T09:00:00Z'), { kind: 'route', id: 't-1a2b3c4d', class: 'task', due: '2026-12-01T09:00:00Z' });
    assert.deepEqual(cmd('/triage'), { kind: 'triage' });
    assert.deepEqual(cmd('/triage off'), { kind: 'triage', state: 'off' });
    assert.deepEqual(cmd('/tasks'), { kind: 'tasks' });
    for (const [text, error] of [
      ['/task', /usage: \/task <text>/],
      ['/task hand t-1', /a task id looks like t-1a2b3c4d/],
      ['/task ' + 'x'.repeat(4001), /longer than 4000/],
      ['/route', /usage: \/route <task> <class>/],
      ['/route t-1a2b3c4d', /usage: \/route/],
      ['/route 42 task', /a task id looks like/],
      ['/route t-1a2b3c4d urgent', /a class is question, issue, task, moderation, noise/],
      ['/route t-1a2b3c4d task p4', /p4: expected p1, p2 or p3/],
      ['/route t-1a2b3c4d task 90d', /90d: expected p1, p2 or p3, or a due window/],
      ['/route t-1a2b3c4d task p1 4h extra', /usage/],
      ['/triage maybe', /usage: \/triage/],
      ['/triage off openai:gpt-4.1', /usage: \/triage/],
      ['/triage on gpt4', /the model: /],
      ['/tasks urgent', /a lane is question, issue, task, moderation/],
    ] as const) {
      const c = cmd(text);
      assert.ok(c?.kind === 'invalid', `${text}: ${JSON.stringify(c)}`);
      assert.match(c.error, error, text);
    }
  });

  it('the task commands never throw, and every parse is valid or says why (properties)', () => {
    const word = fc.oneof(fc.constantFrom('hand', 'close', 't-1a2b3c4d', 'T-ZZZZZZZZ', 't-', 'noise', 'issue', 'p1', 'p3', '4h', '0s', '31d', '2026-12-01T09:00:00Z', 'on', 'off', 'openai:gpt-4.1'), fc.string({ maxLength: 12 }), fc.string({ unit: 'binary', maxLength: 6 }));
    fc.assert(
      fc.property(fc.constantFrom('task', 'tasks', 'route', 'triage'), fc.array(word, { maxLength: 6 }), (name, words) => {
        const r = parseText(`/${name} ${words.join(' ')}`);
        assert.equal(r.kind, 'command');
        if (r.kind !== 'command') return;
        assert.ok(r.command.kind === name || r.command.kind === 'invalid', JSON.stringify(r.command));
        if (r.command.kind === 'invalid') assert.ok(r.command.error.length > 0);
        if (r.command.kind === 'route') {
          assert.match(r.command.id, /^t-[a-z0-9]{8}$/);
          if (r.command.priority) assert.ok(['p1', 'p2', 'p3'].includes(r.command.priority));
        }
        if (r.command.kind === 'task' && r.command.action !== 'add') assert.match(r.command.id, /^t-[a-z0-9]{8}$/);
      }),
      { numRuns: 2000 },
    );
  });
});

describe('inbound payloads (properties)', () => {
  it('the inbound schema never throws and accepts only well-formed messages', () => {
    const base = { id: 'm1', platform: 'telegram', account: '123', chatId: '-100', user: 'A', userId: '9', text: 'hi', at: new Date(0).toISOString() };
    fc.assert(
      fc.property(
        fc.record(
          {
            id: fc.oneof(fc.string({ maxLength: 250 }), fc.integer(), fc.constant(null)),
            platform: fc.oneof(fc.constantFrom('telegram', 'discord', 'openharness', 'http', 'cli', 'irc'), fc.string()),
            account: fc.oneof(fc.string({ maxLength: 140 }), fc.constant(undefined)),
            chatId: fc.oneof(fc.string({ maxLength: 140 }), fc.integer()),
            user: fc.string({ maxLength: 250 }),
            userId: fc.oneof(fc.string({ maxLength: 140 }), fc.constant(undefined)),
            chatType: fc.oneof(fc.constantFrom('dm', 'group', 'channel'), fc.constant(undefined)),
            addressed: fc.oneof(fc.boolean(), fc.constant('yes')),
            text: fc.oneof(fc.string({ unit: 'binary', maxLength: 200 }), fc.constant('x'.repeat(40_000))),
            attachments: fc.oneof(fc.constant(undefined), fc.array(fc.record({ hash: fc.string(), name: fc.string(), mediaType: fc.string(), size: fc.integer() }), { maxLength: 12 })),
            at: fc.string(),
          },
          { requiredKeys: [] },
        ),
        (partial) => {
          const r = InboundMessageSchema.safeParse({ ...base, ...partial });
          if (r.success) {
            assert.ok(r.data.text.length <= 32_000);
            assert.ok(/^[A-Za-z0-9._@+=-]+$/.test(r.data.chatId));
            assert.ok(r.data.text.trim().length > 0 || r.data.attachments.length > 0);
          } else {
            assert.ok(r.error.issues.length > 0 && r.error.issues.every((i) => typeof i.message === 'string' && i.message.length > 0));
          }
        },
      ),
      { numRuns: 2000 },
    );
  });
});
