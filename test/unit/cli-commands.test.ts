/**
 * The `steward` command table (platform/cli-commands.ts) is the one list of commands and flags:
 * commander parses every command from it, and the help, each command's own help, each
 * command's usage in its errors, the routing and the README's command table agree with it.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import { adminCommand } from '../../platform/admin-cli.js';
import { clusterCommand } from '../../platform/cluster.js';
import { historiesCommand } from '../../platform/histories.js';
import { opsCommand } from '../../platform/ops-cli.js';
import { CLI_COMMANDS, formsOf, helpText, usageOf, type CliCommand } from '../../platform/cli-commands.js';
import { loadConfig } from '../../config/index.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const steward = (...args: string[]) => spawnSync(process.execPath, ['--import', 'tsx', 'platform/main.ts', ...args], { cwd: root, encoding: 'utf8' });
/** The real CLI on its own data directory and SQLite database. */
const stewardIn = (dir: string, ...args: string[]) =>
  spawnSync(process.execPath, ['--import', 'tsx', 'platform/main.ts', ...args], { cwd: root, encoding: 'utf8', env: { ...process.env, STEWARD_DATA_DIR: dir, DATABASE_URL: `file:${path.join(dir, 'steward.db')}` } });

describe('the steward command table', () => {
  it('gives every command a line in the help, with each of its forms', () => {
    const help = helpText().replace(/\s+/g, ' ');
    for (const c of CLI_COMMANDS) {
      assert.match(help, new RegExp(`\\s${c.name}(\\s|$)`), `${c.name} is in the help`);
      for (const form of formsOf(c)) assert.ok(help.includes(form.replace(/\s+/g, ' ')), `${c.name} ${form}`);
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

  it('declares every flag its forms show, and shows every flag it declares (but the API target and hidden ones)', () => {
    for (const c of CLI_COMMANDS as readonly CliCommand[]) {
      const parts = c.subs ? c.subs.map((s) => ({ where: `${c.name} ${s.name}`, usage: [s.usage].flat().join(' '), flags: [...(s.flags ?? []), ...(c.common ?? [])] })) : [{ where: c.name, usage: c.usage ?? '', flags: [...(c.flags ?? [])] }];
      for (const p of parts) {
        const shown = new Set([...p.usage.matchAll(/--([a-z][a-z-]*)/g)].map((m) => m[1]));
        const declared = new Set(p.flags.map((f) => f.name));
        for (const f of shown) assert.ok(declared.has(f!), `steward ${p.where} shows --${f} in its form: the table declares it`);
        for (const f of p.flags) if (!f.hidden && !(c.common ?? []).includes(f) && c.name !== 'chat' && !['url', 'token'].includes(f.name)) assert.ok(shown.has(f.name), `steward ${p.where} declares --${f.name}: its form shows it`);
        for (const f of p.flags) assert.ok(f.description.length > 0, `--${f.name} of ${p.where} says what it is`);
      }
    }
  });

  it('parses with commander: an unknown flag, a missing value or argument, an extra argument exit 2 with the usage, and write nothing', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'steward-cli-'));
    try {
      for (const args of [
        ['identities', 'add', '--name', 'Root', '--role', 'overlord', '--telegram', '4242', '--bogus'],
        ['identities', 'add', '--name', 'Root', '--role', 'overlord', '--telegram'],
        ['identities', 'add', '--role', 'overlord', '--telegram', '4242'],
        ['identities', 'set-role', 'only-an-id'],
        ['identities', 'remove', 'a', 'b'],
        ['identities', 'nope'],
        ['identities'],
      ]) {
        const r = stewardIn(dir, ...args);
        assert.equal(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
        assert.match(r.stderr, /^steward identities: .+\nUsage: steward identities list \| add /, args.join(' '));
      }
      const list = stewardIn(dir, 'identities', 'list');
      assert.equal(list.status, 0, list.stderr);
      assert.equal(list.stdout.trim().split('\n').length, 1, `no identity was added: ${list.stdout}`);
      // the flags' values as the table declares them: a repeated one, a negative chat id after =
      const added = stewardIn(dir, 'identities', 'add', '--name', 'Root', '--role', 'overlord', '--telegram', '4242', '--telegram', '4343');
      assert.equal(added.status, 0, added.stderr);
      assert.match(stewardIn(dir, 'identities', 'list').stdout, /telegram:4242 telegram:4343/);
      const bound = stewardIn(dir, 'bindings', 'add', '--platform', 'telegram', '--chat=-1001', '--admin-channel');
      assert.equal(bound.status, 0, bound.stderr);
      assert.match(bound.stdout, /^Bound telegram chat -1001 \(mention, admin channel\)/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("derives each command's --help from the table: its subcommands, and each flag with its description", () => {
    const cmd = steward('identities', '--help');
    assert.equal(cmd.status, 0, cmd.stderr);
    for (const sub of ['list', 'add', 'set-role', 'remove']) assert.match(cmd.stdout, new RegExp(`\\n  ${sub}\\b`));
    const add = steward('bindings', 'add', '--help');
    assert.equal(add.status, 0, add.stderr);
    const entry = (CLI_COMMANDS as readonly CliCommand[]).find((c) => c.name === 'bindings')!.subs!.find((s) => s.name === 'add')!;
    for (const f of entry.flags ?? []) assert.ok(add.stdout.replace(/\s+/g, ' ').includes(f.description), `--${f.name}: ${f.description}`);
    assert.equal(steward('help', 'doctor').stdout, steward('doctor', '--help').stdout);
    assert.match(steward('doctor', '--help').stdout, /--skip-sandbox\s+do not check the sandbox/);
  });

  it('has a handler for every subcommand, whose --help lists each flag the table shows', async () => {
    const config = () => loadConfig({ STEWARD_DATA_DIR: '/nonexistent-steward-test', DATABASE_URL: 'file:/nonexistent-steward-test/x.db' });
    const runners: Record<string, (name: string, args: string[], io: { config: typeof config; out: (s: string) => void; err: (s: string) => void }) => Promise<number>> = {
      admin: (name, args, io) => adminCommand(name, args, io),
      ops: (name, args, io) => opsCommand(name as 'doctor', args, io),
      histories: (_name, args, io) => historiesCommand(args, io),
      cluster: (_name, args, io) => clusterCommand(args, io),
    };
    let checked = 0;
    for (const c of CLI_COMMANDS as readonly CliCommand[]) {
      const run = runners[c.runner];
      if (!run) continue; // main and launcher: cli.ts runs them (the real CLI is tested above)
      for (const sub of c.subs ?? [undefined]) {
        let out = '';
        let err = '';
        const args = sub ? [sub.name, '--help'] : ['--help'];
        assert.equal(await run(c.name, args, { config, out: (s) => void (out += s), err: (s) => void (err += s) }), 0, `steward ${c.name} ${args.join(' ')}: ${err}`);
        for (const f of [...(sub ? (sub.flags ?? []) : (c.flags ?? [])), ...(c.common ?? [])].filter((x) => !x.hidden)) assert.match(out, new RegExp(`--${f.name}\\b`), `steward ${c.name} ${sub?.name ?? ''} --help shows --${f.name}`);
        checked++;
      }
    }
    assert.ok(checked > 60, `every subcommand of the runner modules (${checked})`);
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
