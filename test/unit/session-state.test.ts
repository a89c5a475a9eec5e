import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SessionState } from '../../workflows/chat/session-state.js';
import { MAX_QUEUE, MAX_RECENT_TURNS, MAX_SKILL_LEDGER, MAX_TAKEN_KEYS, type SessionInput } from '../../workflows/types.js';

const input = (): SessionInput => ({
  conversation: { platform: 'http', account: 'a', chatId: 'c' },
  settings: { model: 'openai:gpt-4.1', think: 'off' },
  limits: { maxSteps: 4, maxTurnsPerRun: 3 },
});
const ref = (key: string) => ({ key, user: 'u', at: '2026-01-01T00:00:00Z' });

describe('session state', () => {
  it('queues, ignores redelivered signals and bounds the queue', () => {
    const s = new SessionState(input());
    s.enqueue(ref('a'));
    s.enqueue(ref('a'));
    assert.equal(s.queue.length, 1);
    for (let i = 0; i < MAX_QUEUE + 5; i++) s.enqueue(ref(`k${i}`));
    assert.equal(s.queue.length, MAX_QUEUE);
    assert.equal(s.dropped, 6);
  });

  it('with dedup on, drops a redelivered key that was answered, across continue-as-new and /new, within a bound', () => {
    const s = new SessionState(input());
    s.enqueue(ref('queued-before'));
    s.dedupTaken();
    assert.equal(s.enqueue(ref('queued-before')), false, 'a key queued before dedup was switched on');
    assert.equal(s.enqueue(ref('a')), true);
    s.takeBatch();
    assert.equal(s.enqueue(ref('a')), false, 'an answered key is not queued again');
    assert.equal(s.queue.length, 0);
    const next = new SessionState({ ...input(), carried: s.carry() });
    next.dedupTaken();
    assert.equal(next.enqueue(ref('a')), false, 'carried across continue-as-new');
    const fresh = new SessionState({ ...input(), carried: next.carryForNewTask() });
    fresh.dedupTaken();
    assert.equal(fresh.enqueue(ref('a')), false, 'and across /new');
    for (let i = 0; i < MAX_TAKEN_KEYS; i++) {
      fresh.enqueue(ref(`n${i}`));
      fresh.takeBatch();
    }
    assert.ok((fresh.carry().taken ?? []).length <= MAX_TAKEN_KEYS, 'bounded');
    assert.equal(fresh.enqueue(ref('a')), true, 'past the bound a key is forgotten');
  });

  it('with dedup off (runs before the patch), only a queued key is dropped and nothing is carried', () => {
    const s = new SessionState(input());
    assert.equal(s.enqueue(ref('a')), true);
    assert.equal(s.enqueue(ref('a')), false);
    s.takeBatch();
    assert.equal(s.enqueue(ref('a')), true);
    assert.equal(s.carry().taken, undefined);
  });

  it('takes a batch and remembers the goal of the task', () => {
    const s = new SessionState(input());
    s.enqueue(ref('a'));
    s.enqueue(ref('b'));
    assert.deepEqual(s.takeBatch().map((r) => r.key), ['a', 'b']);
    assert.equal(s.workingSet.goalKey, 'a');
    s.enqueue(ref('c'));
    s.takeBatch();
    assert.equal(s.workingSet.goalKey, 'a');
  });

  it('keeps a bounded skill ledger that survives continue-as-new and is dropped by /new', () => {
    const s = new SessionState(input());
    s.recordTurn({ inbound: ['a'] }, { input: 0, output: 0, total: 0 }, [], { deploy: 'v1' });
    s.recordTurn({ inbound: ['b'] }, { input: 0, output: 0, total: 0 }, [], { deploy: 'v2', backup: 'b1' });
    assert.deepEqual(s.workingSet.skills, { deploy: 'v2', backup: 'b1' });
    for (let i = 0; i < MAX_SKILL_LEDGER + 5; i++) s.recordTurn({ inbound: [`x${i}`] }, { input: 0, output: 0, total: 0 }, [], { [`s${i}`]: 'v' });
    assert.equal(Object.keys(s.workingSet.skills ?? {}).length, MAX_SKILL_LEDGER);
    assert.equal(s.workingSet.skills?.deploy, undefined, 'the oldest entries are forgotten');
    const next = new SessionState({ ...input(), carried: s.carry() });
    assert.deepEqual(next.workingSet.skills, s.workingSet.skills);
    assert.equal(new SessionState({ ...input(), carried: s.carryForNewTask() }).workingSet.skills, undefined);
    // a run started before skills carries no ledger
    const old = s.carry();
    delete old.workingSet.skills;
    assert.equal(new SessionState({ ...input(), carried: old }).workingSet.skills, undefined);
  });

  it('keeps the working set bounded and carries it across continue-as-new', () => {
    const s = new SessionState(input());
    for (let i = 0; i < 50; i++) s.recordTurn({ inbound: [`in${i}`], reply: `out${i}` }, { input: 1, output: 2, total: 3 });
    assert.equal(s.workingSet.recentTurns.length, MAX_RECENT_TURNS);
    assert.equal(s.workingSet.recentTurns.at(-1)?.reply, 'out49');
    assert.equal(s.tokens.total, 150);
    const carried = s.carry();
    assert.equal(carried.generation, 1);
    const next = new SessionState({ ...input(), carried });
    assert.deepEqual(next.workingSet, s.workingSet);
    assert.equal(next.tokens.total, 150);
    const fresh = s.carryForNewTask();
    assert.deepEqual(fresh.workingSet, { notes: [], recentTurns: [] });
  });

  it('decides when to continue as new', () => {
    const s = new SessionState(input());
    assert.equal(s.shouldContinueAsNew(3, false), false);
    assert.equal(s.shouldContinueAsNew(3, true), true);
    s.turnsThisRun = 3;
    assert.equal(s.shouldContinueAsNew(3, false), true);
    // on the next message: the turn limit alone waits for a message; the server's suggestion does not
    assert.equal(s.shouldContinueAsNew(3, false, true), false);
    assert.equal(s.shouldContinueAsNew(3, true, true), true);
    s.enqueue(ref('next'));
    assert.equal(s.shouldContinueAsNew(3, false, true), true);
    s.turnsThisRun = 2;
    assert.equal(s.shouldContinueAsNew(3, false, true), false, 'a waiting message under the limit is a turn of this run');
  });

  it('counts the marked commands it takes in, once each by key, across continue-as-new and /new; unknown when continued from a run without the count', () => {
    const s = new SessionState(input());
    s.dedupTaken();
    assert.equal(s.commandsTaken, 0, 'a new session has taken none');
    assert.equal(s.takeCommand('stop-1', true), true);
    assert.equal(s.takeCommand('stop-1', true), false, 'a redelivered command is not counted again');
    assert.equal(s.takeCommand('steer-1'), true, 'an unmarked command is taken, not counted');
    assert.equal(s.commandsTaken, 1);
    const next = new SessionState({ ...input(), carried: s.carry() });
    next.dedupTaken();
    next.takeCommand('new-1', true);
    assert.equal(next.commandsTaken, 2, 'carried across continue-as-new');
    assert.equal(new SessionState({ ...input(), carried: next.carryForNewTask() }).commandsTaken, 2, 'and across /new');
    const { commands: _, ...older } = next.carry();
    const unknown = new SessionState({ ...input(), carried: older });
    unknown.dedupTaken();
    unknown.takeCommand('stop-2', true);
    assert.equal(unknown.commandsTaken, undefined, 'a run continued from one without the count never knows it');
    assert.equal('commands' in unknown.carry(), false);
    const noDedup = new SessionState(input());
    assert.equal(noDedup.takeCommand('stop-3', true), true);
    assert.equal(noDedup.commandsTaken, 0, 'without dedup (a run from before it) nothing is counted');
  });

  it('validates steering and settings', () => {
    assert.throws(() => SessionState.validateSteer({ text: '  ', by: 'u' }, 0), /empty/);
    assert.throws(() => SessionState.validateSteer({ text: 'ok', by: 'u' }, 20), /too many/);
    SessionState.validateSteer({ text: 'ok', by: 'u' }, 0);
    assert.throws(() => SessionState.validateSettings({ by: 'u' }), /nothing to change/);
    assert.throws(() => SessionState.validateSettings({ model: 'bad', by: 'u' }), /provider:model/);
    SessionState.validateSettings({ model: 'anthropic:claude-sonnet-4-5', think: 'low', by: 'u' });
  });
});
