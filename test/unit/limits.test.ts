/**
 * The limits' settings (one config section: STEWARD_TURN_RATE_LIMITS, STEWARD_TRIAGE_LIMITS,
 * STEWARD_OBJECTIVE_RUN_LIMIT) and the lowest role of a requester set. Pure: no database.
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { lowestRole, parseRate, parseTriageLimits } from '../../common/roles.js';
import { ConfigError, loadConfig } from '../../config/index.js';
import { limitSettings } from '../../platform/start.js';

const HOUR = 3_600_000;
const dir = () => mkdtempSync(path.join(tmpdir(), 'steward-limits-'));

describe('limit settings', () => {
  it('parses count/period, and group/sender budgets over their defaults', () => {
    assert.deepEqual(parseRate('30/h'), { count: 30, windowMs: HOUR });
    assert.deepEqual(parseRate('5/2m'), { count: 5, windowMs: 120_000 });
    assert.throws(() => parseRate('0/h'), /at least 1/);
    assert.throws(() => parseRate('30/w'), /expected count\/period/);
    const d = { perGroup: { count: 30, windowMs: HOUR }, perSender: { count: 10, windowMs: HOUR } };
    assert.deepEqual(parseTriageLimits('group:5/m', d), { perGroup: { count: 5, windowMs: 60_000 }, perSender: d.perSender });
    assert.deepEqual(parseTriageLimits('sender:2/d,group:100/h', d), { perGroup: { count: 100, windowMs: HOUR }, perSender: { count: 2, windowMs: 86_400_000 } });
    assert.throws(() => parseTriageLimits('chat:5/h', d), /expected group:count\/period or sender:count\/period/);
  });

  it('reads every limit from one config section, with defaults (no token budget unless set); a bad one is refused', () => {
    const c = loadConfig({}, dir());
    assert.deepEqual(limitSettings(c), {
      turns: { member: { count: 30, windowMs: HOUR }, operator: { count: 120, windowMs: HOUR } },
      triage: { perGroup: { count: 30, windowMs: HOUR }, perSender: { count: 10, windowMs: HOUR } },
      objectiveRuns: { count: 60, windowMs: HOUR },
    });
    const set = loadConfig({ STEWARD_TRIAGE_LIMITS: 'group:4/h,sender:2/h', STEWARD_OBJECTIVE_RUN_LIMIT: '3/d', STEWARD_TOKEN_BUDGET: '2000000/d' }, dir());
    assert.deepEqual(limitSettings(set).tokens, { count: 2_000_000, windowMs: 86_400_000 });
    assert.throws(() => loadConfig({ STEWARD_TOKEN_BUDGET: 'lots' }, dir()), (err: unknown) => err instanceof ConfigError && /STEWARD_TOKEN_BUDGET/.test(err.message));
    assert.deepEqual(limitSettings(set).triage, { perGroup: { count: 4, windowMs: HOUR }, perSender: { count: 2, windowMs: HOUR } });
    assert.deepEqual(limitSettings(set).objectiveRuns, { count: 3, windowMs: 86_400_000 });
    assert.throws(() => loadConfig({ STEWARD_TRIAGE_LIMITS: 'group:lots' }, dir()), (err: unknown) => err instanceof ConfigError && /STEWARD_TRIAGE_LIMITS/.test(err.message));
    assert.throws(() => loadConfig({ STEWARD_OBJECTIVE_RUN_LIMIT: 'many' }, dir()), (err: unknown) => err instanceof ConfigError && /STEWARD_OBJECTIVE_RUN_LIMIT/.test(err.message));
  });

  it('the lowest role of a requester set decides what the set may do together', () => {
    assert.equal(lowestRole(['admin', 'member', 'overlord']), 'member');
    assert.equal(lowestRole(['admin']), 'admin');
    assert.equal(lowestRole([]), undefined);
  });
});
