/**
 * The heartbeat on both databases with the real Temporal server and a real worker: each part's
 * state with its last success; a task queue without a worker is degraded, told to the admin
 * channel once after the threshold (a receipt), and its recovery told once when a worker polls
 * it again; the model provider's state comes from the model calls' receipts (no model call);
 * GET /api/v1/heartbeat and an admin's /status show the parts.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it } from 'node:test';
import { Worker } from '@temporalio/worker';
import { createHttpApp, startHttpServer } from '../../adapters/http/app.js';
import { bindChat } from '../../domain/governance.js';
import { createHeartbeat, modelProbe, type PartState } from '../../domain/heartbeat.js';
import { writeReceipt } from '../../domain/receipts.js';
import { databaseProbe, queueProbe, temporalProbe } from '../../platform/heartbeat-probes.js';
import { recordingSender } from '../helpers/recording-sender.js';
import { testDatabases } from '../helpers/db.js';
import { useStack, waitFor, withHarness } from '../helpers/steward.js';

for (const kind of testDatabases()) {
  describe(`heartbeat (${kind.name})`, () => {
    const stack = useStack(kind);

    it('a queue without a worker is degraded, told once after the threshold and once when it recovers; receipts; the API and /status show it', { timeout: 120_000 }, async () => {
      const db = stack.db;
      const sender = recordingSender();
      const adminChat = `-100${Date.now() % 1e9}`;
      await bindChat(db, { platform: 'telegram', account: 'hb', chatId: adminChat, adminChannel: true, createdBy: 'test' });
      const queue = `hb-${randomUUID()}`;
      const transitions: string[] = [];
      const hb = createHeartbeat({
        db,
        senders: { telegram: sender },
        probes: [temporalProbe(stack.env.connection, 'the test server'), databaseProbe(db, kind.name), queueProbe(stack.env.client, 'default', { name: queue, role: `test-${kind.name}` }, 60_000), modelProbe(db)],
        thresholdMs: 400,
        onTransition: (t) => transitions.push(`${t.part}:${t.to}`),
      });
      const part = (states: PartState[], name: string) => states.find((s) => s.part === name)!;
      const qname = `queue test-${kind.name}`;

      let states = await hb.round();
      assert.equal(part(states, 'temporal').state, 'ok');
      assert.equal(part(states, 'database').state, 'ok');
      assert.ok(part(states, 'database').lastOkAt);
      assert.equal(part(states, qname).state, 'degraded');
      assert.match(part(states, qname).detail, new RegExp(`no worker has polled ${queue}`));
      assert.equal(part(states, qname).lastOkAt, null);
      assert.equal(transitions.length, 0, 'not told before the threshold');
      await sleep(450);
      await hb.round();
      await hb.round();
      assert.deepEqual(transitions, [`${qname}:degraded`], 'told once');
      const post = await sender.waitForPost((p) => p.chatId === adminChat && p.text.includes(`Degraded: ${qname}`));
      assert.match(post.text, /no success seen yet/);

      // the API and an admin's /status (the operator's own chat) show it
      const TOKEN = 'heartbeat-token-0123456789abcdef';
      const server = await startHttpServer(createHttpApp({ ingress: {} as never, apiToken: TOKEN, health: async () => ({ ok: true, checks: {} }), heartbeat: hb }), { host: '127.0.0.1', port: 0 });
      try {
        const res = await fetch(`${server.url}/api/v1/heartbeat`, { headers: { authorization: `Bearer ${TOKEN}` } });
        assert.equal(res.status, 200);
        const body = (await res.json()) as { ok: boolean; parts: PartState[] };
        assert.equal(body.ok, false);
        assert.deepEqual(body.parts.map((p) => p.part).sort(), ['database', 'model provider', qname, 'temporal'].sort());
        assert.equal((await fetch(`${server.url}/api/v1/heartbeat`)).status, 401);
      } finally {
        await server.close();
      }
      await withHarness({ env: stack.env, db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, heartbeat: () => hb.current() }, async (h) => {
        assert.match((await h.send('/status')).reply ?? '', new RegExp(`Parts: 1 of 4 degraded: ${qname} since .*no worker has polled`));
      });

      // a worker polls the queue: recovered, told once
      const worker = await Worker.create({ connection: stack.env.nativeConnection, taskQueue: queue, activities: { noop: async () => 1 } });
      await worker.runUntil(async () => {
        await waitFor(async () => (part(await hb.round(), qname).state === 'ok' ? true : undefined), 'the queue to recover', 30_000);
      });
      await hb.round();
      assert.deepEqual(transitions, [`${qname}:degraded`, `${qname}:recovered`]);
      await sender.waitForPost((p) => p.chatId === adminChat && p.text.includes(`Recovered: ${qname}`));
      const receipts = await db.receipt.findMany({ where: { kind: { in: ['heartbeat.degraded', 'heartbeat.recovered'] } }, orderBy: { id: 'asc' } });
      assert.deepEqual(
        receipts.filter((r) => (JSON.parse(r.data) as { part: string }).part === qname).map((r) => r.kind),
        ['heartbeat.degraded', 'heartbeat.recovered'],
      );
      // a second heartbeat (another API process) neither forgets nor tells again
      const again = createHeartbeat({ db, senders: { telegram: sender }, probes: [queueProbe(stack.env.client, 'default', { name: queue, role: `test-${kind.name}` }, 60_000)], thresholdMs: 400, onTransition: (t) => transitions.push(`second:${t.part}:${t.to}`) });
      assert.equal(part(await again.round(), qname).state, 'ok');
      assert.equal(transitions.length, 2);
    });

    it("the model provider's state comes from the model calls' receipts: two failures in a row degrade it, a success restores it", async () => {
      const db = stack.db;
      const probe = modelProbe(db);
      const call = (n: number, error?: string) => writeReceipt(db, { key: `hb-model-${kind.name}-${randomUUID()}-${n}`, kind: 'model.call', data: { model: 'openai:gpt-4.1', ...(error ? { error } : {}) } });
      await call(1);
      assert.equal((await probe.check()).ok, true);
      await call(2, 'HTTP 401: invalid api key');
      const one = await probe.check();
      assert.equal(one.ok, true, 'one failure is a blip');
      await call(3, 'HTTP 401: invalid api key');
      const two = await probe.check();
      assert.equal(two.ok, false);
      assert.match(two.detail, /the last 2 calls failed: HTTP 401/);
      assert.ok(two.lastOkAt, 'the last success is known');
      await call(4);
      assert.equal((await probe.check()).ok, true);
    });
  });
}
