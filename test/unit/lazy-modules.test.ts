/**
 * Libraries of features a Steward may not use are loaded when the feature is: the chat
 * platforms (discord.js, grammY), the workspace inboxes (imapflow, mailparser), MCP servers
 * (the MCP SDK and its schemas), email actions (nodemailer). Loading the all-in-one start
 * loads none of them: together they were about 35 MB of heap in every process (bench/memory.ts).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));
const hook = fileURLToPath(new URL('../helpers/loaded-packages.mjs', import.meta.url));
const LAZY = ['discord.js', 'grammy', 'imapflow', 'mailparser', 'smtp-server', '@modelcontextprotocol/sdk', 'nodemailer'];

/** The npm packages a fresh process resolves when it imports `modules`, then runs `then` (an async function body). */
function packagesLoadedBy(modules: string[], then = ''): string[] {
  const script = `${modules.map((m) => `await import(${JSON.stringify(m)});`).join('\n')}\n${then}\nprocess.stdout.write(JSON.stringify([...globalThis.__loadedPackages]));`;
  const r = spawnSync(process.execPath, ['--import', 'tsx', '--import', hook, '--input-type=module', '-e', script], { cwd: root, encoding: 'utf8', timeout: 120_000 });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout.slice(r.stdout.indexOf('['))) as string[];
}

describe('libraries of unused features', () => {
  it('are not loaded by the all-in-one start, the CLI or the worker', () => {
    const loaded = packagesLoadedBy(['./platform/start.ts', './platform/cli-commands.ts', './workers/main.ts', './activities/index.ts']);
    assert.ok(loaded.includes('@temporalio/worker') && loaded.includes('ai'), `the probe saw the start's own packages: ${loaded.join(', ')}`);
    assert.deepEqual(LAZY.filter((p) => loaded.includes(p)), []);
  });

  it('are loaded when a chat platform is configured (the probe sees a lazy import)', () => {
    const loaded = packagesLoadedBy(
      ['./platform/channels.ts', './config/index.ts'],
      `const { loadConfig } = await import('./config/index.ts');
       const { createSenders } = await import('./platform/channels.ts');
       await createSenders(loadConfig({ STEWARD_DATA_DIR: '/tmp', DISCORD_BOT_TOKEN: 'MTIzNDU2Nzg5MDEyMzQ1Njc4.Gabcde.abcdefghijklmnopqrstuvwxyz0123456789AB' }));`,
    );
    assert.ok(loaded.includes('discord.js') || loaded.some((p) => p.startsWith('@discordjs/')), `discord.js not loaded: ${loaded.join(', ')}`);
    assert.ok(!loaded.includes('grammy'), 'grammY loaded without Telegram');
  });
});
