/**
 * The `steward` command table (platform/cli-commands.ts) is the one list of commands: the
 * help, each command's usage in its errors, the routing and the README's command table agree
 * with it.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import { adminCommand } from '../../platform/admin-cli.js';
import { CLI_COMMANDS, helpText, usageOf } from '../../platform/cli-commands.js';
import { loadConfig } from '../../config/index.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const steward = (...args: string[]) => spawnSync(process.execPath, ['--import', 'tsx', 'platform/main.ts', ...args], { cwd: root, encoding: 'utf8' });

describe('the steward command table', () => {
  it('gives every command a line in the help, with each of its forms', () => {
    const help = helpText().replace(/\s+/g, ' ');
    for (const c of CLI_COMMANDS) {
      assert.match(help, new RegExp(`\\s${c.name}(\\s|$)`), `${c.name} is in the help`);
      for (const form of c.forms) assert.ok(help.includes(form.replace(/\s+/g, ' ')), `${c.name} ${form}`);
      assert.ok(help.includes(c.summary.replace(/\s+/g, ' ')), `${c.name}'s summary`);
    }
    const printed = execFileSync(process.execPath, ['--import', 'tsx', 'platform/main.ts', 'help'], { cwd: root, encoding: 'utf8' });
    assert.equal(printed, `${helpText()}\n`);
    assert.ok(printed.split('\n').every((l) => l.length <= 96), 'lines fit 96 columns');
  });

  it('routes every command: an unknown one is refused with the help, the launcher-only one names the launcher', () => {
    const unknown = steward('bogus');
    assert.equal(unknown.status, 2);
    assert.match(unknown.stderr, /^Unknown command: bogus\n\nUsage: steward <command>/);
    const test = steward('test');
    assert.equal(test.status, 2);
    assert.match(test.stderr, /runs through the launcher: \.\/steward test \[files\.\.\.\]/);
    const receipts = steward('receipts', 'bogus');
    assert.equal(receipts.status, 2);
    assert.ok(receipts.stderr.includes(`Usage: ${usageOf('receipts')}`), receipts.stderr);
  });

  it('answers an admin command it cannot read with that command’s usage from the table', async () => {
    const config = () => loadConfig({ STEWARD_DATA_DIR: '/nonexistent-steward-test', DATABASE_URL: 'file:/nonexistent-steward-test/x.db', STEWARD_API_TOKEN: 'cli-table-test-token-0123456789' });
    for (const c of CLI_COMMANDS.filter((x) => x.runner === 'admin' && x.name !== 'ui')) {
      let err = '';
      const code = await adminCommand(c.name, ['no-such-subcommand'], { config, out: () => undefined, err: (s) => (err += s) });
      assert.equal(code, 2, `${c.name}: ${err}`);
      assert.ok(err.includes(usageOf(c.name)), `${c.name} answers with its usage: ${err}`);
    }
  });

  it('has every command in the README’s command table', () => {
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    const start = readme.indexOf('\n## Commands\n');
    assert.ok(start >= 0, 'the README has a "## Commands" section');
    const end = readme.indexOf('\n## ', start + 1);
    const section = readme.slice(start, end < 0 ? undefined : end);
    for (const c of CLI_COMMANDS) assert.match(section, new RegExp(`\\| \`\\./steward ${c.name}[ \`]`), `README lists ${c.name}`);
  });
});
