/**
 * What a machine cannot do, in the one line `steward start` and `steward doctor` print: from the
 * probes' answers (injected here; the real probes run bwrap and git, see test/e2e/ops-cli.test.ts),
 * and nothing when everything works.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { gitAvailable, unavailableFeatures, unavailableLine } from '../../platform/capabilities.js';
import { formatDoctor, type DoctorReport } from '../../platform/doctor.js';

const ok = async () => ({ ok: true as const });
const no = (reason: string) => async () => ({ ok: false as const, reason });

describe('unavailable features', () => {
  it('says nothing when the sandbox and git work', async () => {
    assert.deepEqual(await unavailableFeatures({ sandbox: ok, git: ok }), []);
    assert.equal(unavailableLine([]), undefined);
  });

  it('no sandbox: commands and repository changes are refused, with the reason and the fix, in one line', async () => {
    const list = await unavailableFeatures({ sandbox: no('bwrap not found (looked at /usr/bin/bwrap)'), git: ok });
    assert.deepEqual(
      list.map((u) => u.features),
      ['commands (run_command) and repository changes'],
    );
    const line = unavailableLine(list) ?? '';
    assert.doesNotMatch(line, /\n/);
    assert.match(line, /^commands \(run_command\) and repository changes refused \(no sandbox: bwrap not found \(looked at \/usr\/bin\/bwrap\); install bubblewrap/);
    // the probe's own advice is not repeated
    const probe = unavailableLine(await unavailableFeatures({ sandbox: no('bwrap not found (looked at /usr/bin/bwrap); install bubblewrap'), git: ok })) ?? '';
    assert.doesNotMatch(probe, /install bubblewrap; install bubblewrap/);
    assert.match(probe, /\(no sandbox: bwrap not found \(looked at \/usr\/bin\/bwrap\); install bubblewrap \(`apt-get install bubblewrap`\)/);
  });

  it('no git as well: both, one line; a long probe failure is cut short', async () => {
    const list = await unavailableFeatures({ sandbox: no(`bwrap cannot build the sandbox here: ${'x'.repeat(500)}`), git: no('git not found (ENOENT)') });
    const line = unavailableLine(list) ?? '';
    assert.doesNotMatch(line, /\n/);
    assert.match(line, /commands \(run_command\) and repository changes refused \(no sandbox: bwrap cannot build the sandbox here: x+\.\.\.; install bubblewrap/);
    assert.match(line, /; repository changes refused \(git not found \(ENOENT\); install git/);
    assert.ok(line.length < 500, `${line.length} characters`);
  });

  it('git is found on this machine', async () => {
    assert.deepEqual(await gitAvailable(), { ok: true });
  });

  it('doctor ends its report with the line when something is unavailable, and without it otherwise', async () => {
    const base: DoctorReport = { ok: true, checks: [{ id: 'config', title: 'Configuration', status: 'ok', message: 'The configuration is valid.', fix: null }], unavailable: [] };
    assert.doesNotMatch(formatDoctor(base), /Unavailable/);
    const missing = { ...base, unavailable: await unavailableFeatures({ sandbox: no('bwrap not found'), git: ok }) };
    assert.match(formatDoctor(missing), /\nUnavailable on this machine: commands \(run_command\) and repository changes refused \(no sandbox: bwrap not found; install bubblewrap[^\n]*\)\.\n$/);
  });
});
