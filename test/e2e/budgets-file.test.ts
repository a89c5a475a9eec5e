/**
 * STEWARD_BUDGETS_FILE at start (`./steward start`, the process that runs the ledger): the file's
 * budgets are there once Steward answers (the API lists them, source `file`, receipted); started
 * again with a file that has a bad field, Steward refuses to start, naming the field, and the
 * budgets stay as they were.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createDb } from '../../domain/db.js';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';
import { spawnProcess } from '../helpers/process.js';
import { freeStewardPorts, startEnv, startSteward, stopSteward } from '../helpers/started-steward.js';

const TOKEN = 'e2e-budgets-file-token-0123456789';

describe('STEWARD_BUDGETS_FILE at start', () => {
  let model: ModelServer;
  let dataDir: string;
  let file: string;

  before(async () => {
    model = await startModelServer();
    dataDir = mkdtempSync(path.join(tmpdir(), 'steward-e2e-budgets-file-'));
    file = path.join(dataDir, 'budgets.json');
  });
  after(async () => {
    await model?.close();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it("applies the file's budgets before it answers, and a bad field stops the start and changes nothing", { timeout: 300_000 }, async () => {
    const env = async () => startEnv({ dataDir, ports: await freeStewardPorts(), token: TOKEN, model: 'openai-compatible:e2e-model', modelBaseURL: model.baseURL, extra: { STEWARD_BUDGETS_FILE: file } });
    writeFileSync(file, JSON.stringify({ budgets: [{ id: 'team', scope: 'chat', scopeId: 'c-team', tokens: 100_000, period: 'day', timezone: 'Europe/Berlin' }] }));
    const steward = await startSteward(await env());
    try {
      const r = await fetch(`${steward.api}/api/v1/budgets`, { headers: { authorization: `Bearer ${TOKEN}` } });
      assert.equal(r.status, 200);
      const budgets = ((await r.json()) as { budgets: Array<{ id: string; source: string; tokens: number | null; timezone: string }> }).budgets;
      assert.deepEqual(
        budgets.map((b) => [b.id, b.source, b.tokens, b.timezone]),
        [['team', 'file', 100_000, 'Europe/Berlin']],
      );
    } finally {
      assert.equal((await stopSteward(steward))?.code, 0, steward.output().slice(-3000));
    }

    // a bad field: the start stops with an error naming it
    writeFileSync(file, JSON.stringify({ budgets: [{ id: 'team', scope: 'chat', scopeId: 'c-team', tokens: 200_000, period: 'day', timezone: 'Mars/Olympus' }] }));
    const refused = spawnProcess('./steward', ['start'], await env());
    let exited: { code: number | null; signal: NodeJS.Signals | null };
    try {
      exited = await Promise.race([refused.exited, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`still running after 180 s:\n${refused.output().slice(-3000)}`)), 180_000).unref())]);
    } finally {
      refused.kill('SIGKILL');
    }
    assert.notEqual(exited.code, 0, refused.output().slice(-3000));
    assert.match(refused.output(), /STEWARD_BUDGETS_FILE .* refused \(nothing changed\): budgets\[0\] \(team\)\.timezone: not an IANA time zone/);

    // nothing changed: the budget as the good file left it, one receipt (its creation)
    const db = createDb(`file:${path.join(dataDir, 'steward.db')}`);
    try {
      const rows = await db.budget.findMany();
      assert.deepEqual(
        rows.map((b) => [b.id, b.source, Number(b.tokens), b.timezone]),
        [['team', 'file', 100_000, 'Europe/Berlin']],
      );
      const receipts = await db.receipt.findMany({ where: { kind: 'budget.change' } });
      assert.deepEqual(
        receipts.map((x) => [x.actor, (JSON.parse(x.data) as { action: string; budget: string }).action]),
        [['file', 'set']],
      );
    } finally {
      await db.$disconnect();
    }
  });
});
