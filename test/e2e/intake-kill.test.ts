/**
 * Intake through a real kill -9: a whole Steward (`steward start` on the test's Temporal dev
 * server and database, its Telegram bot polling the Telegram double) is started with
 * STEWARD_FAULT_POINT naming a checkpoint between accepting an input and handing it over
 * (common/fault-points.ts), and kills itself with SIGKILL there: API, workers and bot at once.
 * It is started again without it, and the input comes again the way its platform sends it: the
 * HTTP client retries with the same Idempotency-Key; Telegram hands the update nobody confirmed
 * to the next getUpdates. One turn and one reply each, counted by the session workflow itself.
 * The in-process form over every point and ingress is test/e2e/intake-faults.test.ts.
 */
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { telegramAccountFromToken } from '../../adapters/telegram/sender.js';
import type { FaultPointName } from '../../common/fault-points.js';
import { sessionWorkflowId } from '../../common/ids.js';
import { createIdentity } from '../../domain/governance.js';
import { testDatabases } from '../helpers/db.js';
import { freePort, spawnProcess, type Spawned } from '../helpers/process.js';
import { useStack, waitFor } from '../helpers/steward.js';
import { startTelegramDouble, type TelegramDouble } from '../helpers/telegram-double.js';

const TOKEN = `intake-kill-${randomBytes(16).toString('hex')}`;
const tag = () => randomBytes(4).toString('hex');

describe('intake through a real kill -9 at a checkpoint (a whole Steward process)', () => {
  const stack = useStack(testDatabases().at(-1));
  let tg: TelegramDouble;
  let dir: string;
  const procs: Spawned[] = [];
  before(async () => {
    tg = await startTelegramDouble();
    dir = mkdtempSync(path.join(tmpdir(), 'steward-intake-kill-'));
  });
  after(async () => {
    for (const p of procs) {
      p.kill('SIGKILL');
      await p.exited;
    }
    await tg?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** `steward start` (with its settings only), armed at `point` when given; resolves once its API serves. */
  async function startSteward(point?: FaultPointName): Promise<{ p: Spawned; api: string }> {
    const base: NodeJS.ProcessEnv = { ...process.env };
    for (const k of Object.keys(base)) if (k.startsWith('STEWARD_') || k.startsWith('TEMPORAL_') || k.startsWith('TELEGRAM_') || k.startsWith('DISCORD_') || k === 'DATABASE_URL' || k.endsWith('_API_KEY')) delete base[k];
    const p = spawnProcess(process.execPath, ['--import', 'tsx', 'platform/main.ts', 'start'], {
      ...base,
      STEWARD_LOG_LEVEL: 'warn',
      STEWARD_DATA_DIR: dir,
      STEWARD_HTTP_PORT: String(await freePort()),
      STEWARD_API_TOKEN: TOKEN,
      DATABASE_URL: stack.database.url,
      TEMPORAL_ADDRESS: stack.env.address,
      TEMPORAL_NAMESPACE: 'default',
      STEWARD_MODEL: 'openai-compatible:kill-model',
      STEWARD_MODEL_BASE_URL: stack.model.baseURL,
      TELEGRAM_BOT_TOKEN: tg.token,
      TELEGRAM_API_ROOT: tg.apiRoot,
      ...(point ? { STEWARD_FAULT_POINT: point } : {}),
    });
    procs.push(p);
    const api = (await p.waitForOutput(/API:\s+(http:\/\/\S+)/, 180_000))[1] ?? '';
    return { p, api };
  }

  /** The process ended by its own SIGKILL at the armed point. */
  async function killedItself(p: Spawned): Promise<void> {
    const exit = await Promise.race([p.exited, sleep(60_000).then(() => undefined)]);
    assert.ok(exit, `the armed process did not die:\n${p.output().slice(-3000)}`);
    assert.equal(exit.signal, 'SIGKILL', p.output().slice(-3000));
  }

  async function stop(p: Spawned): Promise<void> {
    p.kill('SIGTERM');
    const exit = await Promise.race([p.exited, sleep(30_000).then(() => undefined)]);
    if (!exit) p.kill('SIGKILL');
  }

  /** The turns the session started, as its turn.start receipts count them (payloads in Temporal are encrypted by the child's codec). */
  const turnStarts = (sessionId: string) => stack.db.receipt.count({ where: { kind: 'turn.start', sessionId } });

  it('an HTTP message: killed right after it was recorded, the client retries with its Idempotency-Key: one turn, one reply', { timeout: 240_000 }, async () => {
    stack.model.setDefault((req) => ({ text: `echo: ${JSON.stringify(req.body).match(/probe-[0-9a-f]{8}/g)?.at(-1) ?? 'none'}` }));
    const chatId = `kill-${tag()}`;
    const probe = `probe-${tag()}`;
    const idem = randomUUID();
    const post = (api: string) =>
      fetch(`${api}/api/v1/chats/${chatId}/messages`, {
        method: 'POST',
        headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json', 'idempotency-key': idem },
        body: JSON.stringify({ text: `${probe} do not lose me`, user: 'client' }),
      });
    const armed = await startSteward('ingress.recorded');
    await assert.rejects(post(armed.api), 'the request dies with the process');
    await killedItself(armed.p);
    assert.equal(await stack.db.message.count({ where: { key: `in:http:default:${chatId}:${idem}` } }), 1, 'recorded before the kill');

    const { p, api } = await startSteward();
    try {
      const res = await post(api);
      assert.equal(res.status, 202);
      assert.deepEqual(((await res.json()) as { duplicate: boolean }).duplicate, true, 'a duplicate to the client: it was accepted before');
      const replies = async () => {
        const r = await fetch(`${api}/api/v1/chats/${chatId}/messages`, { headers: { authorization: `Bearer ${TOKEN}` } });
        return ((await r.json()) as { messages: Array<{ role: string; text: string }> }).messages.filter((m) => m.role === 'assistant');
      };
      await waitFor(async () => ((await replies()).some((m) => m.text.includes(probe)) ? true : undefined), 'the reply', 60_000);
      // the session's own count (the status API queries it): idle, nothing queued, one turn
      const status = await waitFor(async () => {
        const st = (await (await fetch(`${api}/api/v1/chats/${chatId}/status`, { headers: { authorization: `Bearer ${TOKEN}` } })).json()) as { running: unknown; queueLength: number; turns: number };
        return st.running === null && st.queueLength === 0 ? st : undefined;
      }, 'the session idle', 30_000);
      assert.equal(status.turns, 1);
      assert.equal(await turnStarts(sessionWorkflowId({ platform: 'http', account: 'default', chatId })), 1);
      assert.equal((await replies()).length, 1);
    } finally {
      await stop(p);
    }
  });

  it('a Telegram message: killed right after its session was signalled, Telegram hands the unconfirmed update again: one turn, one reply', { timeout: 240_000 }, async () => {
    stack.model.setDefault((req) => ({ text: `echo: ${JSON.stringify(req.body).match(/probe-[0-9a-f]{8}/g)?.at(-1) ?? 'none'}` }));
    const user = { id: 500_000_000 + Math.floor(Math.random() * 1e8), is_bot: false, first_name: 'Kim' };
    await createIdentity(stack.db, { name: 'Kim', role: 'member', accounts: [{ platform: 'telegram', userId: String(user.id) }], createdBy: 'test' });
    const sessionId = sessionWorkflowId({ platform: 'telegram', account: telegramAccountFromToken(tg.token), chatId: String(user.id) });
    const probe = `probe-${tag()}`;
    const echoes = () => tg.callsOf('sendMessage').filter((c) => String(c.params.chat_id) === String(user.id) && String(c.params.text).includes(probe)).length;

    const armed = await startSteward('handoff.delivered');
    tg.privateText(user, `${probe} are you there?`);
    await killedItself(armed.p);
    assert.equal(await stack.db.receipt.count({ where: { kind: 'ingress.handed', sessionId } }), 0, 'killed between the signal and the mark');

    const { p } = await startSteward();
    try {
      await waitFor(() => (echoes() > 0 ? true : undefined), 'the reply on Telegram', 90_000);
      // the session's own count, asked in the chat: idle, nothing queued, one turn
      tg.privateText(user, '/status');
      const status = await tg.waitForCall('sendMessage', (c) => String(c.params.chat_id) === String(user.id) && /Turns: \d+/.test(String(c.params.text)), 30_000);
      assert.match(String(status.params.text), /Idle: no turn is running\.[\s\S]*Queue: 0 messages[\s\S]*Turns: 1$/);
      assert.equal(await turnStarts(sessionId), 1);
      assert.equal(echoes(), 1, 'one reply');
      assert.equal(await stack.db.receipt.count({ where: { kind: 'ingress.handed', sessionId } }), 1, 'handed over once the update came again');
    } finally {
      await stop(p);
    }
  });
});
