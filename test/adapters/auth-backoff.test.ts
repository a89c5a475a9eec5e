/**
 * Back-off on wrong credentials (adapters/http/backoff.ts): the limiter on its own (a fake
 * clock, many addresses), and each surface over a real HTTP server: the API bearer token, the
 * codec sign-in and endpoint, OpenHarness shell tokens and webhook signatures. The servers
 * trust 127.0.0.1 as a proxy where a test needs other client addresses (X-Forwarded-For).
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { PayloadCodec } from '@temporalio/common';
import { Hono } from 'hono';
import { pino } from 'pino';
import { createHttpApp, startHttpServer } from '../../adapters/http/app.js';
import { AuthBackoff, normalizeIp, type Client } from '../../adapters/http/backoff.js';
import { createCodecRoutes } from '../../adapters/http/codec.js';
import type { Ingress } from '../../services/chat/intake.js';
import type { ObjectiveEventResult, ObjectiveService } from '../../services/objectives.js';
import { createOpenHarnessRoutes, OPENHARNESS_PATH, type OpenHarnessResponse } from '../../adapters/openharness/engine.js';
import { issueShell } from '../../services/shells.js';
import { loadConfig } from '../../config/index.js';
import { testDatabases } from '../helpers/db.js';

const TOKEN = 'backoff-test-token-0123456789';

function clock(start = 1_000_000) {
  let t = start;
  return { now: () => t, advance: (ms: number) => void (t += ms) };
}

const at = (address: string, loopback = false): Client => ({ address, loopback });

describe('AuthBackoff', () => {
  it('makes an address wait after the threshold, doubling per further wrong credential up to the cap; other addresses are unaffected', () => {
    const c = clock();
    const b = new AuthBackoff({ after: 3, baseDelayMs: 1000, maxDelayMs: 4000, windowMs: 60_000, now: c.now });
    const guesser = at('203.0.113.7');
    const other = at('198.51.100.2');
    b.failure(guesser, 'api');
    b.failure(guesser, 'api');
    assert.equal(b.waitMs(guesser), 0, 'below the threshold nobody waits');
    b.failure(guesser, 'api');
    assert.equal(b.waitMs(guesser), 1000);
    assert.equal(b.waitMs(other), 0, 'another address does not wait');
    const waits: number[] = [];
    for (let i = 0; i < 4; i++) {
      c.advance(b.waitMs(guesser));
      assert.equal(b.waitMs(guesser), 0, 'the wait ends');
      b.failure(guesser, 'codec');
      waits.push(b.waitMs(guesser));
    }
    assert.deepEqual(waits, [2000, 4000, 4000, 4000], 'doubling, capped');
    b.failure(other, 'api');
    assert.equal(b.waitMs(other), 0, "the other address counts its own failures");
  });

  it('engages once per episode: one warning (and receipt) however many failures follow', () => {
    const c = clock();
    const lines: string[] = [];
    const log = pino({ level: 'info' }, { write: (s: string) => void lines.push(s) });
    const b = new AuthBackoff({ after: 2, windowMs: 60_000, now: c.now, log });
    const a = at('203.0.113.8');
    for (let i = 0; i < 10; i++) {
      c.advance(b.waitMs(a));
      b.failure(a, 'openharness');
    }
    const warnings = lines.map((l) => JSON.parse(l) as { msg: string; address?: string; surface?: string; failures?: number }).filter((l) => /must wait/.test(l.msg));
    assert.equal(warnings.length, 1);
    assert.deepEqual([warnings[0]?.address, warnings[0]?.surface, warnings[0]?.failures], ['203.0.113.8', 'openharness', 2]);
    // a new episode (after the window) engages again
    c.advance(b.waitMs(a) + 60_000);
    b.failure(a, 'webhook');
    b.failure(a, 'webhook');
    assert.equal(lines.filter((l) => /must wait/.test(l)).length, 2);
  });

  it("the operator's credential clears an address that is not waiting; the window forgets it; a waiting one stays", () => {
    const c = clock();
    const b = new AuthBackoff({ after: 3, windowMs: 10_000, now: c.now });
    const a = at('203.0.113.9');
    b.failure(a, 'api');
    b.failure(a, 'api');
    b.success(a);
    b.failure(a, 'api');
    b.failure(a, 'api');
    assert.equal(b.waitMs(a), 0, 'the success cleared the earlier failures');
    b.failure(a, 'api');
    assert.equal(b.waitMs(a), 1000);
    b.success(a);
    assert.equal(b.waitMs(a), 1000, 'a success while waiting clears nothing');
    c.advance(1000 + 10_000);
    assert.equal(b.size, 1);
    b.failure(a, 'api');
    assert.equal(b.waitMs(a), 0, 'the window forgot the earlier failures');
  });

  it("loopback waits like any address, but the operator's credential from loopback never does", () => {
    const b = new AuthBackoff({ after: 1 });
    const local = at('127.0.0.1', true);
    const remote = at('203.0.113.10');
    b.failure(local, 'api');
    b.failure(remote, 'api');
    assert.ok(b.waitMs(local) > 0, 'a local guesser waits');
    assert.equal(b.waitMs(local, true), 0, "the operator's CLI does not");
    assert.ok(b.waitMs(remote, true) > 0, 'the exemption is for loopback only');
  });

  it('remembers at most maxEntries addresses, forgetting the least recently failing first', () => {
    const b = new AuthBackoff({ after: 1, maxEntries: 3 });
    for (const n of [1, 2, 3]) b.failure(at(`192.0.2.${n}`), 'api');
    b.failure(at('192.0.2.1'), 'api'); // fails again: now the most recent
    b.failure(at('192.0.2.4'), 'api');
    assert.equal(b.size, 3);
    assert.equal(b.waitMs(at('192.0.2.2')), 0, 'the oldest was forgotten');
    for (const n of [1, 3, 4]) assert.ok(b.waitMs(at(`192.0.2.${n}`)) > 0, `192.0.2.${n} is remembered`);
  });

  it('is configured by STEWARD_AUTH_BACKOFF_* and STEWARD_TRUSTED_PROXIES, with defaults', () => {
    const cwd = mkdtempSync(path.join(tmpdir(), 'steward-backoff-config-'));
    const defaults = loadConfig({}, cwd).http;
    assert.deepEqual([defaults.backoff, defaults.trustedProxies], [{ after: 5, maxDelayMs: 900_000, windowMs: 900_000 }, []]);
    const set = loadConfig({ STEWARD_AUTH_BACKOFF_AFTER: '3', STEWARD_AUTH_BACKOFF_MAX: '1m', STEWARD_AUTH_BACKOFF_WINDOW: '1h', STEWARD_TRUSTED_PROXIES: ' 127.0.0.1, 10.0.0.0/8,::1 ' }, cwd).http;
    assert.deepEqual([set.backoff, set.trustedProxies], [{ after: 3, maxDelayMs: 60_000, windowMs: 3_600_000 }, ['127.0.0.1', '10.0.0.0/8', '::1']]);
    assert.throws(() => loadConfig({ STEWARD_TRUSTED_PROXIES: 'proxy.example' }, cwd), /STEWARD_TRUSTED_PROXIES: expected IP addresses or CIDR ranges/);
    assert.throws(() => loadConfig({ STEWARD_TRUSTED_PROXIES: '10.0.0.0/40' }, cwd), /STEWARD_TRUSTED_PROXIES/);
    assert.throws(() => loadConfig({ STEWARD_AUTH_BACKOFF_AFTER: '0' }, cwd), /STEWARD_AUTH_BACKOFF_AFTER/);
    assert.throws(() => loadConfig({ STEWARD_AUTH_BACKOFF_MAX: 'forever' }, cwd), /STEWARD_AUTH_BACKOFF_MAX/);
    const b = new AuthBackoff({ ...set.backoff, trustedProxies: set.trustedProxies });
    assert.equal(b.settings.after, 3);
  });

  it('refuses bad settings', () => {
    assert.throws(() => new AuthBackoff({ after: 0 }));
    assert.throws(() => new AuthBackoff({ maxDelayMs: -1 }));
    assert.throws(() => new AuthBackoff({ trustedProxies: ['proxy.example'] }), /IP address or a CIDR range/);
    assert.throws(() => new AuthBackoff({ trustedProxies: ['10.0.0.0/33'] }));
  });

  it('normalizes addresses: zones, brackets, ports, IPv4-mapped IPv6', () => {
    assert.equal(normalizeIp('::ffff:192.0.2.1'), '192.0.2.1');
    assert.equal(normalizeIp('[2001:db8::1]:8080'), '2001:db8:0:0:0:0:0:1');
    assert.equal(normalizeIp('192.0.2.1:443'), '192.0.2.1');
    assert.equal(normalizeIp('fe80::1%eth0'), 'fe80:0:0:0:0:0:0:1');
    assert.equal(normalizeIp('::1'), '0:0:0:0:0:0:0:1');
    assert.equal(normalizeIp('not an address'), undefined);
    assert.equal(normalizeIp('unknown'), undefined);
  });

  it('takes the peer address, IPv6 by /64, and believes X-Forwarded-For only from a trusted proxy', async () => {
    const clientOf = async (b: AuthBackoff, peer: string | undefined, xff?: string): Promise<Client> => {
      const app = new Hono();
      app.get('/', (c) => c.json(b.client(c)));
      const env = peer === undefined ? undefined : { incoming: { socket: { remoteAddress: peer } } };
      const res = await app.request('/', xff ? { headers: { 'x-forwarded-for': xff } } : {}, env);
      return (await res.json()) as Client;
    };
    const plain = new AuthBackoff();
    assert.deepEqual(await clientOf(plain, '::ffff:127.0.0.1'), { address: '127.0.0.1', loopback: true });
    assert.deepEqual(await clientOf(plain, '::1'), { address: '0:0:0:0::/64', loopback: true });
    assert.deepEqual(await clientOf(plain, '2001:db8:1:2:aaaa::1'), { address: '2001:db8:1:2::/64', loopback: false });
    assert.deepEqual(await clientOf(plain, '2001:db8:1:2:bbbb::9'), { address: '2001:db8:1:2::/64', loopback: false }, 'one /64 is one client');
    assert.deepEqual(await clientOf(plain, '203.0.113.5', '198.51.100.1'), { address: '203.0.113.5', loopback: false }, 'X-Forwarded-For is ignored without a trusted proxy');
    assert.deepEqual(await clientOf(plain, '127.0.0.1', '198.51.100.1'), { address: '127.0.0.1', loopback: true }, 'even from loopback');
    assert.deepEqual(await clientOf(plain, undefined), { address: 'unknown', loopback: false });

    const proxied = new AuthBackoff({ trustedProxies: ['127.0.0.1', '10.0.0.0/8'] });
    assert.deepEqual(await clientOf(proxied, '127.0.0.1', '198.51.100.1'), { address: '198.51.100.1', loopback: false });
    assert.deepEqual(await clientOf(proxied, '127.0.0.1', '6.6.6.6, 198.51.100.1, 10.1.2.3'), { address: '198.51.100.1', loopback: false }, 'the rightmost untrusted hop: what a client writes to the left is not believed');
    assert.deepEqual(await clientOf(proxied, '127.0.0.1'), { address: '127.0.0.1', loopback: true }, 'no header: the proxy itself');
    assert.deepEqual(await clientOf(proxied, '127.0.0.1', 'garbage'), { address: '127.0.0.1', loopback: true });
    assert.deepEqual(await clientOf(proxied, '203.0.113.5', '198.51.100.1'), { address: '203.0.113.5', loopback: false }, 'an untrusted peer is the client');
  });
});

describe('back-off on every surface (HTTP)', () => {
  let dbh: Awaited<ReturnType<ReturnType<typeof testDatabases>[number]['create']>>;
  const servers: Array<{ url: string; close(): Promise<void> }> = [];
  before(async () => {
    dbh = await testDatabases()[0]!.create();
  });
  after(async () => {
    for (const s of servers.splice(0)) await s.close();
    await dbh?.cleanup();
  });

  const ingressCalls: string[] = [];
  const ingress: Ingress = {
    async handle(msg) {
      ingressCalls.push(msg.text);
      return { workflowId: `session:${msg.platform}:${msg.account}:${msg.chatId}`, kind: 'command', duplicate: false, seq: ingressCalls.length, reply: `ok: ${msg.text}` };
    },
    transcript: async () => [],
    status: async (sessionId) => ({ workflowId: sessionId, exists: false, running: null, queueLength: 0, model: 'm', think: 'off', tokens: { input: 0, output: 0, total: 0 }, turns: 0 }),
    handleAction: async () => ({ reply: 'unused', applied: false }),
    decidePairing: async () => ({ ok: false, reason: 'unknown', message: 'unused' }),
    decideApproval: async () => ({ reply: 'unused', applied: false }),
  };
  const hookCalls: string[] = [];
  const objectives = {
    async receiveEvent(name: string, _body: string, header: (h: string) => string | undefined): Promise<ObjectiveEventResult> {
      hookCalls.push(name);
      return header('x-steward-signature') === 'sha256=good' ? { status: 202, runId: `run-${hookCalls.length}`, duplicate: false } : { status: 401, error: 'invalid signature' };
    },
  } as unknown as ObjectiveService;
  const codec: PayloadCodec = { encode: async (p) => p, decode: async (p) => p };

  /** The whole HTTP surface on one server with one limiter, as platform/start.ts mounts it. */
  async function serve(backoff: AuthBackoff): Promise<string> {
    const app = createHttpApp({ ingress, apiToken: TOKEN, health: async () => ({ ok: true, checks: {} }), objectives, admin: { db: dbh.db }, backoff });
    app.route('/', createOpenHarnessRoutes({ ingress, db: dbh.db, operatorToken: TOKEN, waitMs: 0, backoff }));
    app.route('/', createCodecRoutes({ codec, apiToken: TOKEN, corsOrigins: [], backoff }));
    const server = await startHttpServer(app, { host: '127.0.0.1', port: 0 });
    servers.push(server);
    return server.url;
  }

  const receipts = async (address: string) =>
    (await dbh.db.receipt.findMany({ where: { kind: 'auth.backoff', actor: address } })).map((r) => JSON.parse(r.data) as { address: string; surface: string; failures: number });

  async function settled<T>(probe: () => Promise<T>, ok: (v: T) => boolean): Promise<T> {
    const deadline = Date.now() + 5_000;
    for (;;) {
      const v = await probe();
      if (ok(v) || Date.now() > deadline) return v;
      await sleep(25);
    }
  }

  it('API token: 429 with Retry-After after 5 wrong tokens, one receipt; the operator CLI on loopback and other addresses keep working', async () => {
    const c = clock();
    const url = await serve(new AuthBackoff({ db: dbh.db, now: c.now, trustedProxies: ['127.0.0.1'] }));
    const get = (token: string, from?: string) =>
      fetch(`${url}/api/v1/chats/room/status`, { headers: { authorization: `Bearer ${token}`, ...(from ? { 'x-forwarded-for': from } : {}) } });
    const guesser = '203.0.113.20';
    for (let i = 0; i < 5; i++) assert.equal((await get(`wrong-${i}`, guesser)).status, 401, `wrong token ${i + 1}`);
    const statuses: number[] = [];
    for (let i = 0; i < 20; i++) {
      const r = await get(`wrong-again-${i}`, guesser);
      statuses.push(r.status);
      if (r.status === 429) {
        assert.equal(r.headers.get('retry-after'), '1');
        assert.match(((await r.json()) as { error: string }).error, /too many wrong credentials from this address: try again in 1 second/);
      } else await r.body?.cancel();
    }
    assert.deepEqual(new Set(statuses), new Set([429]), 'every further try waits');
    const right = await get(TOKEN, guesser);
    assert.equal(right.status, 429, 'while it waits, even the right token is refused');
    await right.body?.cancel();
    assert.equal((await get(TOKEN, '198.51.100.20')).status, 200, 'another address is unaffected');
    const cli = await get(TOKEN);
    assert.equal(cli.status, 200, "the operator's CLI on loopback works");

    // after the wait, one more wrong token doubles it
    c.advance(1000);
    assert.equal((await get('wrong-later', guesser)).status, 401);
    const doubled = await get(TOKEN, guesser);
    assert.deepEqual([doubled.status, doubled.headers.get('retry-after')], [429, '2']);
    const written = await settled(() => receipts(guesser), (r) => r.length > 0);
    assert.deepEqual(written.map((r) => [r.address, r.surface, r.failures]), [[guesser, 'api', 5]], 'one receipt per episode');

    // a request without any token is not a guess
    c.advance(2000);
    for (let i = 0; i < 10; i++) assert.equal((await fetch(`${url}/api/v1/chats/room/status`, { headers: { 'x-forwarded-for': '198.51.100.21' } })).status, 401);
    assert.equal((await get(TOKEN, '198.51.100.21')).status, 200);
  });

  it("loopback guessing waits too, but the operator's token from loopback still passes", async () => {
    const url = await serve(new AuthBackoff({ db: dbh.db }));
    const get = (token: string) => fetch(`${url}/api/v1/chats/room/status`, { headers: { authorization: `Bearer ${token}` } });
    for (let i = 0; i < 5; i++) assert.equal((await get(`local-guess-${i}`)).status, 401);
    const next = await get('local-guess-5');
    assert.equal(next.status, 429);
    assert.ok(Number(next.headers.get('retry-after')) >= 1);
    assert.equal((await get(TOKEN)).status, 200, 'the CLI is not locked out');
    const written = await settled(() => receipts('127.0.0.1'), (r) => r.length > 0);
    assert.equal(written.length, 1);
    // the same address waits on every surface: a shell token from loopback waits too
    const shell = await issueShell(dbh.db, { name: `loopback-shell-${Date.now()}`, createdBy: 'test' });
    const oh = await fetch(`${url}${OPENHARNESS_PATH}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${shell.token}` },
      body: JSON.stringify({ protocol_version: '1.0.0', request: { context: { session_id: 's', user_intent: 'hi' } } }),
    });
    assert.equal(oh.status, 429);
    await oh.body?.cancel();
  });

  it('codec sign-in and endpoint: 429 after 5 wrong tokens; the right token from loopback signs in', async () => {
    const c = clock();
    const url = await serve(new AuthBackoff({ db: dbh.db, now: c.now, trustedProxies: ['127.0.0.1'] }));
    const login = (token: string, from?: string) =>
      fetch(`${url}/codec/login`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', ...(from ? { 'x-forwarded-for': from } : {}) },
        body: new URLSearchParams({ token }).toString(),
        redirect: 'manual',
      });
    const guesser = '203.0.113.30';
    for (let i = 0; i < 5; i++) {
      const r = await login(`not-the-token-${i}`, guesser);
      assert.equal(r.status, 401);
      await r.body?.cancel();
    }
    const locked = await login(TOKEN, guesser);
    assert.equal(locked.status, 429);
    assert.equal(locked.headers.get('retry-after'), '1');
    assert.equal(locked.headers.get('set-cookie'), null, 'no cookie while waiting');
    assert.match(await locked.text(), /Too many tries/);
    const decode = await fetch(`${url}/codec/decode`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}`, 'x-forwarded-for': guesser }, body: '{"payloads":[]}' });
    assert.equal(decode.status, 429, 'the codec endpoint waits too');
    assert.ok(decode.headers.get('retry-after'));
    await decode.body?.cancel();
    const local = await login(TOKEN);
    assert.equal(local.status, 200);
    assert.match(local.headers.get('set-cookie') ?? '', /^steward_codec=/);
    await local.body?.cancel();
    assert.deepEqual((await settled(() => receipts(guesser), (r) => r.length > 0)).map((r) => r.surface), ['codec']);

    // wrong bearer tokens and forged cookies on the endpoint count as well
    const other = '203.0.113.31';
    for (let i = 0; i < 5; i++) {
      const headers: Record<string, string> = i % 2 ? { authorization: `Bearer wrong-${i}` } : { cookie: `steward_codec=v1.9999999999.${'A'.repeat(43)}` };
      const r = await fetch(`${url}/codec/decode`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-forwarded-for': other, ...headers }, body: '{"payloads":[]}' });
      assert.equal(r.status, 401);
      await r.body?.cancel();
    }
    const after5 = await fetch(`${url}/codec/decode`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}`, 'x-forwarded-for': other }, body: '{"payloads":[]}' });
    assert.equal(after5.status, 429);
    await after5.body?.cancel();
  });

  it('OpenHarness: wrong shell tokens get rate_limited 429 with Retry-After; a valid shell token waits too; the operator token from loopback passes', async () => {
    const url = await serve(new AuthBackoff({ db: dbh.db, trustedProxies: ['127.0.0.1'] }));
    const shell = await issueShell(dbh.db, { name: `backoff-shell-${Date.now()}`, createdBy: 'test' });
    const post = async (token: string, from?: string) => {
      const res = await fetch(`${url}${OPENHARNESS_PATH}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}`, ...(from ? { 'x-forwarded-for': from } : {}) },
        body: JSON.stringify({ protocol_version: '1.0.0', request_id: `r-${Math.random()}`, request: { context: { session_id: 'sess', user_intent: '/whoami' } } }),
      });
      return { status: res.status, retryAfter: res.headers.get('retry-after'), body: (await res.json()) as OpenHarnessResponse };
    };
    const guesser = '203.0.113.40';
    for (let i = 0; i < 5; i++) {
      const r = await post(`oh_${String(i).repeat(43)}`, guesser);
      assert.deepEqual([r.status, r.body.response.error?.code], [401, 'unauthorized']);
    }
    const locked = await post(shell.token, guesser);
    assert.equal(locked.status, 429);
    assert.equal(locked.retryAfter, '1');
    assert.deepEqual([locked.body.response.error?.code, locked.body.response.error?.retryable, locked.body.response.error?.details?.reason], ['rate_limited', true, 'auth-backoff']);
    assert.equal(locked.body.response.error?.details?.retry_after_seconds, 1);
    const calls = ingressCalls.length;
    const fromElsewhere = await post(shell.token, '198.51.100.40');
    assert.deepEqual([fromElsewhere.status, fromElsewhere.body.response.status], [200, 'success'], 'another address is unaffected');
    assert.equal(ingressCalls.length, calls + 1);
    assert.deepEqual((await settled(() => receipts(guesser), (r) => r.length > 0)).map((r) => r.surface), ['openharness']);

    // loopback guessing: the shell waits, the operator's token does not
    for (let i = 0; i < 5; i++) assert.equal((await post(`nope-${i}`)).status, 401);
    assert.equal((await post(shell.token)).status, 429);
    const operator = await post(TOKEN);
    assert.deepEqual([operator.status, operator.body.response.status], [200, 'success']);
  });

  it('webhooks: a 401 from the objective service counts; past the threshold the service is not even asked', async () => {
    const url = await serve(new AuthBackoff({ db: dbh.db, trustedProxies: ['127.0.0.1'] }));
    const hook = (signature: string, from: string) =>
      fetch(`${url}/hooks/objectives/nightly`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-steward-signature': signature, 'x-forwarded-for': from }, body: '{}' });
    const guesser = '203.0.113.50';
    for (let i = 0; i < 5; i++) assert.equal((await hook(`sha256=${i}`, guesser)).status, 401);
    const asked = hookCalls.length;
    const locked = await hook('sha256=good', guesser);
    assert.equal(locked.status, 429);
    assert.equal(locked.headers.get('retry-after'), '1');
    assert.equal(hookCalls.length, asked, 'a waiting address does not reach the objective service');
    assert.equal((await hook('sha256=good', '198.51.100.50')).status, 202, 'another sender is unaffected');
    assert.deepEqual((await settled(() => receipts(guesser), (r) => r.length > 0)).map((r) => r.surface), ['webhook']);
    // an unknown name (404) is not a credential
    for (let i = 0; i < 8; i++) assert.equal((await fetch(`${url}/hooks/objectives/Bad%20Name`, { method: 'POST', headers: { 'x-forwarded-for': '198.51.100.51' }, body: '{}' })).status, 404);
    assert.equal((await hook('sha256=good', '198.51.100.51')).status, 202);
    // a call that presents no signature at all is answered 401 but is not a guess
    for (let i = 0; i < 8; i++) assert.equal((await fetch(`${url}/hooks/objectives/nightly`, { method: 'POST', headers: { 'x-forwarded-for': '198.51.100.52' }, body: '{}' })).status, 401);
    assert.equal((await hook('sha256=good', '198.51.100.52')).status, 202);
  });

  it('one limiter across surfaces: wrong webhook signatures make the API wait for that address', async () => {
    const url = await serve(new AuthBackoff({ db: dbh.db, trustedProxies: ['127.0.0.1'] }));
    const from = '203.0.113.60';
    for (let i = 0; i < 5; i++) {
      const r = await fetch(`${url}/hooks/objectives/nightly`, { method: 'POST', headers: { 'x-steward-signature': 'sha256=bad', 'x-forwarded-for': from }, body: '{}' });
      assert.equal(r.status, 401);
      await r.body?.cancel();
    }
    const api = await fetch(`${url}/api/v1/chats/room/status`, { headers: { authorization: `Bearer ${TOKEN}`, 'x-forwarded-for': from } });
    assert.equal(api.status, 429);
    await api.body?.cancel();
  });
});
