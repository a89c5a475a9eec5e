/** /budget: show (the default) and raise with tokens and/or USD; bad arguments are refused with usage, before anything runs. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { commandSpec, parseText, type ParsedCommand } from '../../common/commands.js';

const cmd = (text: string): ParsedCommand => {
  const p = parseText(text);
  assert.equal(p.kind, 'command', text);
  return (p as { command: ParsedCommand }).command;
};

describe('/budget parsing', () => {
  it('shows by default; raises by tokens, USD or both', () => {
    assert.deepEqual(cmd('/budget'), { kind: 'budget', action: 'show' });
    assert.deepEqual(cmd('/budget show'), { kind: 'budget', action: 'show' });
    assert.deepEqual(cmd('/budget raise chat:team 5000'), { kind: 'budget', action: 'raise', id: 'chat:team', tokens: 5000 });
    assert.deepEqual(cmd('/budget RAISE b1 $2.50'), { kind: 'budget', action: 'raise', id: 'b1', money: 2.5 });
    assert.deepEqual(cmd('/budget raise b1 3usd 100'), { kind: 'budget', action: 'raise', id: 'b1', tokens: 100, money: 3 });
    assert.deepEqual(cmd('/budget raise b1 1.5$'), { kind: 'budget', action: 'raise', id: 'b1', money: 1.5 });
  });

  it('refuses what is not an amount, a zero, a missing budget or amount, and extra words', () => {
    for (const text of ['/budget raise', '/budget raise b1', '/budget raise b1 0', '/budget raise b1 $0', '/budget raise b1 -5', '/budget raise b1 lots', '/budget raise b1 5 6', '/budget raise b1 $1 $2', '/budget raise b1 1e3', '/budget raise b1 5 $1 7', '/budget raise bad|id 5', '/budget show b1', '/budget lower b1 5', `/budget raise b1 ${'9'.repeat(20)}`]) {
      const c = cmd(text);
      assert.equal(c.kind, 'invalid', text);
    }
  });

  it('is open to every known role (the raise itself is decided by the budget service: admins only)', () => {
    assert.equal(commandSpec('budget')?.minRole, 'viewer');
  });
});
