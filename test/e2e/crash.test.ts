/**
 * Crash: a worker process is killed (SIGKILL) while a turn's model step runs; a new worker
 * process starts; the turn finishes and the reply is delivered exactly once.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { createIngress } from '../../services/chat/intake.js';
import { testDatabases } from '../helpers/db.js';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';
import { spawnProcess, type Spawned } from '../helpers/process.js';
import { createTestEnvironment } from '../helpers/temporal.js';

const database = testDatabases().at(-1)!; // PostgreSQL when available, else SQLite

describe(`crash recovery (${database.name})`, () => {
  let env: TestWorkflowEnvironment;
  let model: ModelServer;
  let dbh: Awaited<ReturnType<typeof database.create>>;
  let dataDir: string;
  const workers: Spawned[] = [];

  before(async () => {
    env = await createTestEnvironment();
    model = await startModelServer();
    dbh = await database.create();
    dataDir = mkdtempSync(path.join(tmpdir(), 'steward-crash-'));
  });
  after(async () => {
    for (const w of workers) {
      w.kill('SIGKILL');
      await w.exited;
    }
    await model?.close();
    await dbh?.cleanup();
    await env?.teardown();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('finishes the turn on a new worker and delivers the reply once', async () => {
    const taskQueue = `crash-${randomUUID()}`;
    const workerEnv = {
      ...process.env,
      TEMPORAL_ADDRESS: env.address,
      TEMPORAL_NAMESPACE: 'default',
      STEWARD_TASK_QUEUE: taskQueue,
      DATABASE_URL: dbh.url,
      STEWARD_DATA_DIR: dataDir,
      STEWARD_MODEL: 'openai-compatible:crash-model',
      STEWARD_MODEL_BASE_URL: model.baseURL,
      STEWARD_LOG_LEVEL: 'warn',
    };
    const startWorker = async () => {
      const w = spawnProcess('./steward', ['worker'], workerEnv);
      workers.push(w);
      await w.waitForOutput(/Steward worker polling/, 120_000);
      return w;
    };
    const first = await startWorker();
    const ingress = createIngress({
      client: env.client,
      db: dbh.db,
      taskQueue,
      defaultModel: 'openai-compatible:crash-model',
      configuredProviders: () => ['openai-compatible'],
      limits: { maxSteps: 4, maxTurnsPerRun: 100 },
    });
    const before = model.requests.length;
    model.enqueue({ text: 'lost with the worker', firstTokenDelayMs: 120_000 });
    model.enqueue({ text: 'survived the crash' });
    const chatId = `crash-${randomUUID().slice(0, 8)}`;
    const r = await ingress.handle({ id: randomUUID(), platform: 'http', account: 'default', chatId, user: 'u', text: 'do not lose me', at: new Date().toISOString() });
    await model.waitForRequest(before + 1, 30_000);

    first.kill('SIGKILL');
    await first.exited;
    const second = await startWorker();

    let reply: { role: string; text: string } | undefined;
    for (let i = 0; i < 600 && !reply; i++) {
      reply = (await ingress.transcript(r.workflowId)).find((m) => m.role === 'assistant');
      if (!reply) await sleep(100);
    }
    assert.equal(reply?.text, 'survived the crash');
    await sleep(1500); // nothing more arrives
    const rows = await ingress.transcript(r.workflowId);
    assert.equal(rows.filter((m) => m.role === 'assistant').length, 1);
    assert.equal(await dbh.db.delivery.count({ where: { sessionId: r.workflowId } }), 1);
    assert.ok(model.requests.length >= before + 2, 'the model step was retried on the new worker');

    second.kill('SIGTERM');
    const exit = await second.exited;
    assert.equal(exit.code, 0, second.output());
  });
});
