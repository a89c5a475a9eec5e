import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { COMMANDS, helpText, parseText } from '../../common/commands.js';

describe('command parsing', () => {
  it('treats plain text as a message', () => {
    assert.deepEqual(parseText('hello /stop'), { kind: 'message', text: 'hello /stop' });
    assert.deepEqual(parseText('/ not a command'), { kind: 'message', text: '/ not a command' });
  });
  it('parses each command', () => {
    assert.deepEqual(parseText('/stop'), { kind: 'command', command: { kind: 'stop' } });
    assert.deepEqual(parseText('  /STOP  '), { kind: 'command', command: { kind: 'stop' } });
    assert.deepEqual(parseText('/stop@steward_bot'), { kind: 'command', command: { kind: 'stop' } });
    assert.deepEqual(parseText('/steer use   tables\nplease'), { kind: 'command', command: { kind: 'steer', text: 'use   tables\nplease' } });
    assert.deepEqual(parseText('/new'), { kind: 'command', command: { kind: 'new' } });
    assert.deepEqual(parseText('/model openai:gpt-4.1'), { kind: 'command', command: { kind: 'model', model: 'openai:gpt-4.1' } });
    assert.deepEqual(parseText('/model'), { kind: 'command', command: { kind: 'model' } });
    assert.deepEqual(parseText('/think HIGH'), { kind: 'command', command: { kind: 'think', level: 'high' } });
    assert.deepEqual(parseText('/status'), { kind: 'command', command: { kind: 'status' } });
    assert.deepEqual(parseText('/help'), { kind: 'command', command: { kind: 'help' } });
  });
  it('rejects bad arguments with usage', () => {
    const steer = parseText('/steer');
    assert.equal(steer.kind === 'command' && steer.command.kind, 'invalid');
    const model = parseText('/model gpt4');
    assert.ok(model.kind === 'command' && model.command.kind === 'invalid' && /provider:model/.test(model.command.error));
    const think = parseText('/think max');
    assert.ok(think.kind === 'command' && think.command.kind === 'invalid');
    const long = parseText(`/steer ${'x'.repeat(5000)}`);
    assert.ok(long.kind === 'command' && long.command.kind === 'invalid');
  });
  it('names unknown commands and lists every command in help', () => {
    assert.deepEqual(parseText('/frob x'), { kind: 'command', command: { kind: 'unknown', name: 'frob' } });
    const help = helpText();
    for (const c of COMMANDS) assert.ok(help.includes(`/${c.name}`));
  });
});
