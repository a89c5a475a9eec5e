/**
 * The configuration reference comes from the schema: every setting carries a description and a
 * topic (config/settings-docs.ts, attached with `.meta()`), and docs/configuration.md and
 * .env.example are what scripts/config-docs.ts renders from it, byte for byte.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { ConfigEnvSchema, loadConfig } from '../../config/index.js';
import { SETTING_DOCS, SETTING_GROUPS } from '../../config/settings-docs.js';
import { REGENERATE_COMMAND, REPO_ROOT, renderConfigFiles, settingsReference } from '../../scripts/config-docs.js';

const keys = Object.keys(ConfigEnvSchema.shape) as (keyof typeof ConfigEnvSchema.shape)[];

describe('configuration docs', () => {
  it('every setting of the schema has a description and a topic attached', () => {
    assert.ok(keys.length > 80, `only ${keys.length} settings`);
    for (const key of keys) {
      const meta = ConfigEnvSchema.shape[key].meta();
      assert.ok(meta, `${key}: no metadata on the schema`);
      assert.equal(typeof meta.description, 'string', `${key}: no description`);
      assert.ok((meta.description ?? '').trim().length >= 10, `${key}: description too short`);
      assert.ok(typeof meta.group === 'string' && meta.group in SETTING_GROUPS, `${key}: group ${String(meta.group)} is not one of ${Object.keys(SETTING_GROUPS).join(', ')}`);
    }
    assert.deepEqual(Object.keys(SETTING_DOCS).sort(), [...keys].sort(), 'config/settings-docs.ts documents exactly the schema\'s settings');
  });

  it('states a default only where the schema has none, and never a secret\'s value', () => {
    const settings = settingsReference();
    assert.equal(settings.length, keys.length);
    for (const s of settings) {
      if (s.unset !== undefined) assert.equal(s.schemaDefault, undefined, `${s.key}: says what leaving it out means, but the schema has a default (${s.schemaDefault}): show that one`);
      if (s.secret) {
        assert.equal(s.schemaDefault, undefined, `${s.key}: a secret with a default`);
        assert.equal(s.example, undefined, `${s.key}: a secret with an example value`);
      }
    }
    // every schema default shown is what the schema gives for an unset variable (spot check of the read-back)
    const e = ConfigEnvSchema.parse({});
    const byKey = new Map(settings.map((s) => [s.key, s]));
    assert.equal(byKey.get('STEWARD_HTTP_PORT')?.schemaDefault, String(e.STEWARD_HTTP_PORT));
    assert.equal(byKey.get('STEWARD_APPROVAL_TOOLS')?.schemaDefault, e.STEWARD_APPROVAL_TOOLS.join(','));
    assert.equal(byKey.get('STEWARD_WORKER_QUEUES')?.schemaDefault, e.STEWARD_WORKER_QUEUES.join(','));
    // and each default, given back as a value, parses to the same configuration as leaving it out
    const asDefaults = Object.fromEntries(settings.filter((s) => s.schemaDefault !== undefined).map((s) => [s.key, s.schemaDefault!]));
    const cwd = mkdtempSync(path.join(tmpdir(), 'steward-config-docs-'));
    assert.deepEqual(loadConfig(asDefaults, cwd), loadConfig({}, cwd));
  });

  it(`the committed docs/configuration.md and .env.example are up to date (else: ${REGENERATE_COMMAND})`, () => {
    for (const [file, expected] of Object.entries(renderConfigFiles())) {
      const committed = readFileSync(path.join(REPO_ROOT, file), 'utf8');
      if (committed !== expected) {
        const a = committed.split('\n');
        const b = expected.split('\n');
        const line = a.findIndex((l, i) => l !== b[i]);
        assert.fail(`${file} is out of date with the configuration schema: run \`${REGENERATE_COMMAND}\` and commit it (first difference at line ${line + 1}: ${JSON.stringify(a[line] ?? '(end of file)')} should be ${JSON.stringify(b[line] ?? '(end of file)')})`);
      }
    }
  });

  it('lists every setting once in the docs and once, commented out, in .env.example', () => {
    const files = renderConfigFiles();
    for (const key of keys) {
      assert.equal(files['docs/configuration.md']!.split(`| \`${key}\` |`).length - 1, 1, `${key} in docs/configuration.md`);
      assert.equal((files['.env.example']!.match(new RegExp(`^# ${key}=`, 'gm')) ?? []).length, 1, `${key} in .env.example`);
    }
    assert.doesNotMatch(files['.env.example']!, /^[A-Z_]+=/m, '.env.example sets nothing: every setting is commented out');
  });
});
