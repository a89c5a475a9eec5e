/**
 * The OpenHarness v1 engine endpoint over the real stack: the Temporal dev server, a SQLite
 * database, the real worker and ingress, and the scripted model server. Requests go over
 * HTTP (startHttpServer on port 0) and every response body is validated against the
 * OpenHarness JSON Schema (the copy vendored in adapters/openharness/schema/) with ajv.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { Hono } from 'hono';
import { pino } from 'pino';
import { bindChat, createIdentity, OPERATOR, sha256 } from '../../domain/governance.js';
import { createHttpApp, startHttpServer } from '../../adapters/http/app.js';
import { chatIdFor, createOpenHarnessRoutes, OPENHARNESS_PATH, type OpenHarnessDeps, type OpenHarnessResponse } from '../../adapters/openharness/engine.js';
import { issueShell, listShells, revokeShell, ShellError, verifyShellToken, type IssuedShell } from '../../services/shells.js';
import { sessionWorkflowId } from '../../common/ids.js';
import type { Role } from '../../common/roles.js';
import { testDatabases } from '../helpers/db.js';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';
import { waitFor, withHarness, type Harness } from '../helpers/steward.js';
import { createTestEnvironment } from '../helpers/temporal.js';

const OPERATOR_TOKEN = 'operator-token-for-openharness-tests-0123';
const schemaUrl = new URL('../../adapters/openharness/schema/openharness-v1.draft.json', import.meta.url);
const licenseUrl = new URL('../../adapters/openharness/schema/LICENSE', import.meta.url);
const sharedDir = new URL('../../../shared/specs/openharness/', import.meta.url);

const schema = JSON.parse(readFileSync(schemaUrl, 'utf8')) as Record<string, unknown>;
const ajv = new Ajv2020({ allErrors: true });
const validateWire = ajv.compile(schema);

interface Reply {
  status: number;
  headers: Headers;
  body: OpenHarnessResponse;
}

type Directive = NonNullable<OpenHarnessResponse['response']['action_directives']>[number];

function texts(r: Reply): string[] {
  return (r.body.response.action_directives ?? []).map((d) => String(d.payload?.text ?? ''));
}

describe('OpenHarness engine (POST /api/openharness/v1)', () => {
  let env: TestWorkflowEnvironment;
  let model: ModelServer;
  let dbh: Awaited<ReturnType<ReturnType<typeof testDatabases>[number]['create']>>;
  let h: Harness;
  let releaseHarness: (() => void) | undefined;
  let harnessRun: Promise<void> | undefined;
  const servers: Array<{ url: string; close(): Promise<void> }> = [];
  const logLines: string[] = [];
  let url: string;
  let n = 0;

  before(async () => {
    env = await createTestEnvironment();
    model = await startModelServer();
    dbh = await testDatabases()[0]!.create();
    const ready = new Promise<Harness>((resolve, reject) => {
      harnessRun = withHarness(
        { env, db: dbh.db, providers: { openaiCompatible: { baseURL: model.baseURL } }, rateLimits: { member: { count: 2, windowMs: 3_600_000 } } },
        (harness) => {
          resolve(harness);
          return new Promise<void>((release) => {
            releaseHarness = release;
          });
        },
      );
      harnessRun.catch(reject);
    });
    h = await ready;
    url = await serve({});
  });

  after(async () => {
    for (const s of servers.splice(0)) await s.close();
    releaseHarness?.();
    await harnessRun;
    await model?.close();
    await dbh?.cleanup();
    await env?.teardown();
  });

  /** Serve an engine app (the shared stack, with overrides) on a free port; returns its URL. */
  async function serve(over: Partial<OpenHarnessDeps>, mount?: (routes: Hono) => { fetch: (req: Request) => Response | Promise<Response> }): Promise<string> {
    const log = pino({ level: 'debug' }, { write: (s: string) => void logLines.push(s) });
    const routes = createOpenHarnessRoutes({ ingress: h.ingress, db: dbh.db, operatorToken: OPERATOR_TOKEN, waitMs: 10_000, pollMs: 50, log, ...over });
    const server = await startHttpServer(mount ? mount(routes) : routes, { host: '127.0.0.1', port: 0 });
    servers.push(server);
    return server.url;
  }

  /** POST to the endpoint; the body must be a schema-valid OpenHarness response, whatever the status. */
  async function post(token: string | undefined, payload: unknown, opts: { base?: string; headers?: Record<string, string>; method?: string } = {}): Promise<Reply> {
    const res = await fetch(`${opts.base ?? url}${OPENHARNESS_PATH}`, {
      method: opts.method ?? 'POST',
      headers: { 'content-type': 'application/json', ...(token !== undefined ? { authorization: `Bearer ${token}` } : {}), ...opts.headers },
      ...(opts.method === 'GET' ? {} : { body: typeof payload === 'string' ? payload : JSON.stringify(payload) }),
      signal: AbortSignal.timeout(20_000),
    });
    const body = (await res.json()) as OpenHarnessResponse;
    assert.ok(validateWire(body), `response is not a valid OpenHarness message: ${ajv.errorsText(validateWire.errors)}\n${JSON.stringify(body)}`);
    assert.ok('response' in body && !('request' in body), 'a response envelope');
    assert.equal(body.protocol_version, '1.0.0');
    assert.deepEqual(body.supported_protocol_versions, ['1.0.0']);
    assert.ok(Array.isArray(body.capability_denials));
    assert.ok(typeof body.supported_capabilities === 'object');
    assert.ok(body.response.engine_latency_ms >= 0);
    return { status: res.status, headers: res.headers, body };
  }

  const message = (intent: string, o: { session?: string; requestId?: string; context?: Record<string, unknown>; top?: Record<string, unknown> } = {}) => ({
    protocol_version: '1.0.0',
    request_id: o.requestId ?? `req-${randomUUID()}`,
    correlation_id: `corr-${++n}`,
    ...o.top,
    request: { context: { session_id: o.session ?? `sess-${randomUUID().slice(0, 8)}`, user_intent: intent, ...o.context } },
  });

  const resume = (token: string) => ({ protocol_version: '1.0.0', request_id: `resume-${randomUUID()}`, request: { context: { continuation: { continuation_token: token } } } });

  const shell = (role: Role = 'member') => issueShell(dbh.db, { name: `shell-${role}-${randomUUID().slice(0, 8)}`, role, createdBy: 'test' });

  const sessionOf = (account: string, session: string, conversation?: string) => sessionWorkflowId({ platform: 'openharness', account, chatId: chatIdFor(session, conversation) });

  const directives = (r: Reply): Directive[] => r.body.response.action_directives ?? [];

  it('vendors the OpenHarness schema and its license (equal to the shared spec when present)', () => {
    assert.match(readFileSync(licenseUrl, 'utf8'), /MIT License/);
    const shared = new URL('openharness-v1.draft.json', sharedDir);
    if (existsSync(shared)) {
      assert.equal(readFileSync(schemaUrl, 'utf8'), readFileSync(shared, 'utf8'), 'adapters/openharness/schema is a verbatim copy of shared/specs/openharness');
      assert.equal(readFileSync(licenseUrl, 'utf8'), readFileSync(new URL('LICENSE', sharedDir), 'utf8'));
    }
  });

  it('shell tokens: shown once, stored hashed, linked to an identity, listed and revoked', async () => {
    const s = await shell('operator');
    assert.match(s.token, /^oh_[A-Za-z0-9_-]{43}$/);
    const row = await dbh.db.shellToken.findUniqueOrThrow({ where: { id: s.id } });
    assert.equal(row.tokenHash, sha256(s.token));
    assert.notEqual(row.tokenHash, s.token);
    const account = await dbh.db.platformAccount.findUniqueOrThrow({ where: { platform_userId: { platform: 'openharness', userId: s.id } }, include: { identity: true } });
    assert.deepEqual([account.identityId, account.identity.role, account.identity.name], [s.identityId, 'operator', s.name]);
    assert.deepEqual(await verifyShellToken(dbh.db, s.token), { shellId: s.id, name: s.name });
    assert.equal(await verifyShellToken(dbh.db, `${s.token.slice(0, -1)}x`), undefined);
    assert.equal(await verifyShellToken(dbh.db, 'not-a-token'), undefined);

    const identities = await dbh.db.identity.count();
    await assert.rejects(issueShell(dbh.db, { name: s.name, createdBy: 'test' }), (e: unknown) => e instanceof ShellError && /already exists/.test(e.message));
    await assert.rejects(issueShell(dbh.db, { name: 'ghost', identityId: 'no-such-identity', createdBy: 'test' }), /no identity has the id/);
    await assert.rejects(issueShell(dbh.db, { name: ' ', createdBy: 'test' }), ShellError);
    await assert.rejects(issueShell(dbh.db, { name: 'x', role: 'emperor' as Role, createdBy: 'test' }), /role/);
    assert.equal(await dbh.db.identity.count(), identities, 'a refused issue creates nothing');
    assert.equal(await dbh.db.shellToken.count({ where: { name: 'ghost' } }), 0);

    // a second shell of an existing person (their laptop and their phone)
    const person = await createIdentity(dbh.db, { name: 'Petra', role: 'admin', accounts: [], createdBy: 'test' });
    const linked = await issueShell(dbh.db, { name: `petra-phone-${n++}`, identityId: person.id, createdBy: 'test' });
    assert.equal(linked.identityId, person.id);
    const listed = (await listShells(dbh.db)).find((x) => x.id === linked.id);
    assert.deepEqual([listed?.role, listed?.identityName, listed?.revokedAt], ['admin', 'Petra', null]);
    assert.ok(!JSON.stringify(await listShells(dbh.db)).includes(linked.token), 'listing never shows a token');

    const revoked = await revokeShell(dbh.db, linked.name);
    assert.equal(revoked?.alreadyRevoked, false);
    assert.ok(revoked?.revokedAt);
    assert.equal(await verifyShellToken(dbh.db, linked.token), undefined);
    assert.equal((await revokeShell(dbh.db, linked.id))?.alreadyRevoked, true);
    assert.equal(await revokeShell(dbh.db, 'no-such-shell'), undefined);
  });

  it("answers a message with the model's reply as render_message in the same response", async () => {
    const s = await shell();
    const session = `sess-${randomUUID().slice(0, 8)}`;
    model.enqueue({ text: 'Hello from Steward.' });
    const body = message('hello steward', { session, requestId: 'req-hello-1' });
    const r = await post(s.token, body);
    assert.equal(r.status, 200);
    assert.equal(r.body.request_id, 'req-hello-1');
    assert.equal(r.body.correlation_id, body.correlation_id);
    assert.equal(r.body.response.status, 'success');
    assert.ok('openharness.ui.approval' in r.body.supported_capabilities);
    assert.deepEqual(r.body.capability_denials, []);
    const [d, ...rest] = directives(r);
    assert.equal(rest.length, 0, JSON.stringify(directives(r)));
    assert.equal(d?.action_type, 'render_message');
    assert.deepEqual([d?.payload?.text, d?.payload?.message, d?.payload?.fallback_message, d?.payload?.kind], ['Hello from Steward.', 'Hello from Steward.', 'Hello from Steward.', 'reply']);
    assert.equal(r.body.response.continuation, undefined);

    // it went through ingress as the shell's identity, in the shell's own conversation
    const sessionId = sessionOf(s.id, session);
    const transcript = await h.ingress.transcript(sessionId);
    assert.deepEqual(transcript.map((m) => [m.role, m.text, m.user ?? null]), [['user', 'hello steward', s.name], ['assistant', 'Hello from Steward.', null]]);
    const userRow = await dbh.db.message.findFirstOrThrow({ where: { sessionId, role: 'user' } });
    assert.equal(userRow.identityId, s.identityId);
    assert.equal(userRow.key, `in:openharness:${s.id}:${session}:req-hello-1`);
  });

  it('a retried request_id returns the same reply and starts no second turn', async () => {
    const s = await shell();
    const session = `sess-${randomUUID().slice(0, 8)}`;
    model.enqueue({ text: 'Only once.' });
    const body = message('do it once', { session, requestId: 'retry-1' });
    const first = await post(s.token, body);
    assert.deepEqual(texts(first), ['Only once.']);
    const requests = model.requests.length;
    const second = await post(s.token, body);
    assert.equal(second.body.response.status, 'success');
    assert.deepEqual(directives(second), directives(first), 'the same answer');
    assert.equal(model.requests.length, requests, 'no second model call');
    const sessionId = sessionOf(s.id, session);
    assert.equal(await dbh.db.message.count({ where: { sessionId, role: 'user' } }), 1);
    assert.equal(await dbh.db.receipt.count({ where: { kind: 'turn.start', sessionId } }), 1, 'one turn');

    // the same request_id for a different text is refused, and changes nothing
    const clash = await post(s.token, message('something else', { session, requestId: 'retry-1' }));
    assert.equal(clash.status, 400);
    assert.equal(clash.body.response.error?.code, 'invalid_request');
    assert.match(clash.body.response.error?.message ?? '', /already used for a different user_intent/);
    assert.equal(await dbh.db.message.count({ where: { sessionId, role: 'user' } }), 1);
  });

  it('ignores unknown fields at every level', async () => {
    const s = await shell();
    model.enqueue({ text: 'Future-proof.' });
    const r = await post(s.token, {
      protocol_version: '1.0.0',
      request_id: `req-${randomUUID()}`,
      x_top: { anything: [1, 2] },
      capabilities: { 'com.example.off': false },
      extensions: { 'com.example': { a: 1 } },
      request: {
        x_request: true,
        auth: { tenant_id: 't1', credential_ref: 'cred-ref', x_auth: 1 },
        extensions: { 'com.example': {} },
        context: {
          session_id: `sess-${randomUUID().slice(0, 8)}`,
          user_intent: 'hello from the future',
          x_context: 'ignored',
          task_hint: { sop_id: 'sop', x_hint: [] },
          continuation: { run_id: 'run-from-elsewhere', x_cont: {} },
          environment_state: { privacy_tier: 'restricted', os: 'linux', x_env: null },
          shell: { shell_kind: 'com.example.kiosk', locale: 'en-GB', x_shell: 2 },
          extensions: { 'com.example': { b: 2 } },
        },
      },
    });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.response.status, 'success');
    assert.deepEqual(texts(r), ['Future-proof.']);
    assert.deepEqual(r.body.capability_denials, []);
  });

  it('an unknown protocol major is protocol_version_unsupported; a newer minor of 1 is served', async () => {
    const s = await shell();
    for (const version of ['2.0.0', '0.9.1']) {
      const r = await post(s.token, { ...message('hi'), protocol_version: version, request_id: `v-${version}` });
      assert.equal(r.status, 400);
      assert.equal(r.body.request_id, `v-${version}`);
      assert.equal(r.body.response.status, 'error');
      assert.deepEqual(r.body.response.error && [r.body.response.error.code, r.body.response.error.retryable], ['protocol_version_unsupported', false]);
      assert.deepEqual(r.body.response.error?.details?.supported_protocol_versions, ['1.0.0']);
    }
    const newer = await post(s.token, { ...message('/whoami'), protocol_version: '1.7.0-beta.1' });
    assert.equal(newer.body.response.status, 'success');
    assert.match(texts(newer)[0] ?? '', new RegExp(`You are ${s.name}, with the member role`));
  });

  it('malformed JSON, a missing request and wrong types are invalid_request, and nothing is recorded', async () => {
    const s = await shell();
    const session = `sess-${randomUUID().slice(0, 8)}`;
    const messages = await dbh.db.message.count();
    const receipts = await dbh.db.receipt.count();
    const requests = model.requests.length;
    const cases: Array<[unknown, number, RegExp, Record<string, string>?]> = [
      ['{"protocol_version": "1.0.0", "request": ', 400, /malformed JSON/],
      [{ protocol_version: '1.0.0', request_id: 'no-request' }, 400, /request is required/],
      [{ request: { context: { session_id: session, user_intent: 'hi' } } }, 400, /protocol_version is required/],
      [{ ...message('hi', { session }), protocol_version: 'one' }, 400, /semver/],
      [{ ...message('hi', { session }), protocol_version: 1 }, 400, /protocol_version must be a string/],
      [message('hi', { session, context: { user_intent: 42 } }), 400, /request\.context\.user_intent/],
      [message('hi', { session, context: { session_id: ['x'] } }), 400, /request\.context\.session_id/],
      [message('hi', { session, context: { environment_state: { privacy_tier: 'top-secret' } } }), 400, /privacy_tier is one of/],
      [{ ...message('hi', { session }), capabilities: ['openharness.streaming'] }, 400, /capabilities/],
      [{ ...message('hi', { session }), request: 'hello' }, 400, /request must be an object/],
      [{ ...message('hi', { session }), request_id: '' }, 400, /request_id must not be empty/],
      [message('   ', { session }), 400, /user_intent must not be empty/],
      [{ protocol_version: '1.0.0', request: { context: { user_intent: 'no session' } } }, 400, /session_id is required/],
      [{ protocol_version: '1.0.0', request: { context: { session_id: session } } }, 400, /user_intent .* or .*continuation_token/],
      [[message('hi', { session })], 400, /JSON object/],
      [message('x'.repeat(32_001), { session }), 400, /longer than 32000/],
      [JSON.stringify(message('hi', { session })), 415, /Content-Type/, { 'content-type': 'text/plain' }],
      [message('x'.repeat(200_000), { session }), 413, /larger than/],
    ];
    for (const [payload, status, re, headers] of cases) {
      const r = await post(s.token, payload, headers ? { headers } : {});
      const err = r.body.response.error;
      assert.equal(r.status, status, `${JSON.stringify(payload).slice(0, 120)} -> ${JSON.stringify(r.body)}`);
      assert.equal(r.body.response.status, 'error');
      assert.equal(err?.code, 'invalid_request');
      assert.equal(err?.retryable, false);
      assert.match(err?.message ?? '', re);
    }
    const get = await post(s.token, undefined, { method: 'GET' });
    assert.deepEqual([get.status, get.headers.get('allow'), get.body.response.error?.code], [405, 'POST', 'invalid_request']);
    const missing = await post(s.token, { protocol_version: '1.0.0', request_id: 'no-request' });
    assert.equal(missing.body.request_id, 'no-request', 'ids are echoed in errors too');
    assert.equal(await dbh.db.message.count(), messages, 'no message recorded');
    assert.equal(await dbh.db.receipt.count(), receipts, 'no receipt written');
    assert.equal(model.requests.length, requests);
  });

  it('no, a wrong or a revoked bearer token is 401 unauthorized; a token in the body is never read', async () => {
    const s = await shell();
    const gone = await shell();
    await revokeShell(dbh.db, gone.id);
    const messages = await dbh.db.message.count();
    const receipts = await dbh.db.receipt.count();
    const body = message('let me in', { requestId: 'req-401' });
    const cases: Array<[string | undefined, Record<string, string>?]> = [
      [undefined],
      ['nope'],
      [`${s.token}x`],
      [gone.token],
      [undefined, { authorization: `Basic ${Buffer.from(`x:${OPERATOR_TOKEN}`).toString('base64')}` }],
    ];
    for (const [token, headers] of cases) {
      const r = await post(token, body, headers ? { headers } : {});
      assert.equal(r.status, 401);
      assert.equal(r.headers.get('www-authenticate'), 'Bearer');
      assert.equal(r.body.request_id, 'req-401');
      assert.deepEqual(r.body.response.error && [r.body.response.error.code, r.body.response.error.retryable], ['unauthorized', false]);
    }
    const inBody = await post(undefined, { ...body, request: { ...body.request, auth: { token: s.token, credential_ref: s.token } } });
    assert.equal(inBody.status, 401);
    assert.equal(await dbh.db.message.count(), messages);
    assert.equal(await dbh.db.receipt.count(), receipts);
  });

  it('a viewer shell is forbidden to talk to the agent, but /status works', async () => {
    const viewer = await shell('viewer');
    const session = `sess-${randomUUID().slice(0, 8)}`;
    const requests = model.requests.length;
    const talk = await post(viewer.token, message('can I talk?', { session }));
    assert.equal(talk.status, 200);
    assert.equal(talk.body.response.status, 'error');
    assert.deepEqual([talk.body.response.error?.code, talk.body.response.error?.retryable], ['forbidden', false]);
    assert.match(talk.body.response.error?.message ?? '', /Viewers can use \/status and \/help, but not talk to the agent/);
    assert.equal(talk.body.response.error?.details?.reason, 'forbidden');
    const status = await post(viewer.token, message('/status', { session }));
    assert.equal(status.body.response.status, 'success');
    assert.match(texts(status)[0] ?? '', /No session yet/);
    const admin = await post(viewer.token, message('/pending', { session }));
    assert.equal(admin.body.response.error?.code, 'forbidden');
    assert.match(admin.body.response.error?.message ?? '', /\/pending needs the admin role; you are a viewer/);
    // a shell whose identity was removed is refused, and told why
    const orphan = await shell();
    await dbh.db.identity.delete({ where: { id: orphan.identityId } });
    const lost = await post(orphan.token, message('hello?', { session }));
    assert.deepEqual([lost.status, lost.body.response.error?.code, lost.body.response.error?.details?.reason], [200, 'forbidden', 'unknown-sender']);
    assert.match(lost.body.response.error?.message ?? '', /does not know this shell's identity/);
    assert.equal(model.requests.length, requests);
  });

  it('a shell whose identity was removed can /pair: the code comes back in the answer, and a retry uses no second request', async () => {
    const orphan = await shell();
    await dbh.db.identity.delete({ where: { id: orphan.identityId } });
    const session = `sess-${randomUUID().slice(0, 8)}`;
    const pairings = () => dbh.db.pairing.count({ where: { platform: 'openharness', userId: orphan.id } });
    const body = message('/pair', { session, requestId: `pair-${randomUUID()}` });
    const r = await post(orphan.token, body);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.response.status, 'success');
    const [d] = directives(r);
    assert.equal(d?.action_type, 'render_message');
    assert.equal(d?.payload?.kind, 'command');
    const code = /Your pairing code is ([A-Z0-9]+)\./.exec(String(d?.payload?.text))?.[1];
    assert.ok(code, `the code is in the answer: ${JSON.stringify(texts(r))}`);
    assert.equal(await pairings(), 1);
    const row = await dbh.db.pairing.findFirstOrThrow({ where: { platform: 'openharness', userId: orphan.id } });
    assert.equal(row.tokenHash, sha256(code), 'the code shown is the pending one');

    // the same request_id again (a shell that lost the answer): answered, no second request used
    const again = await post(orphan.token, body);
    assert.equal(again.status, 200, JSON.stringify(again.body));
    assert.equal(again.body.response.status, 'success');
    assert.match(texts(again)[0] ?? '', /already asked to pair/);
    assert.equal(await pairings(), 1);

    // an admin approves the code: the shell is known again
    const decided = await h.ingress.decidePairing(code, { approve: 'member' }, OPERATOR);
    assert.equal(decided.ok, true);
    const who = await post(orphan.token, message('/whoami', { session }));
    assert.match(texts(who)[0] ?? '', new RegExp(`You are ${orphan.name}`));
  });

  it('a member over the rate limit is rate_limited (retryable)', async () => {
    const s = await shell();
    const session = `sess-${randomUUID().slice(0, 8)}`;
    for (const text of ['one', 'two']) {
      model.enqueue({ text: `ok ${text}` });
      assert.deepEqual(texts(await post(s.token, message(text, { session }))), [`ok ${text}`]);
    }
    const third = await post(s.token, message('three', { session }));
    assert.equal(third.status, 200);
    assert.deepEqual([third.body.response.error?.code, third.body.response.error?.retryable], ['rate_limited', true]);
    assert.match(third.body.response.error?.message ?? '', /limit for the member role is 2/);
  });

  it('lists every requested capability Steward cannot honour in capability_denials', async () => {
    const s = await shell();
    const r = await post(
      s.token,
      message('/whoami', {
        top: {
          capabilities: {
            'openharness.streaming': true,
            'openharness.actions.parallel': true,
            'openharness.attachments.upload': { max_bytes: 1000 },
            'openharness.ui.rich_cards': 'v2',
            'openharness.ui.approval': true,
            'com.example.teleport': 1,
            'com.example.not-asked': false,
          },
        },
        context: { attachments: [{ ref_id: 'att-1', mime_type: 'image/png' }] },
      }),
    );
    assert.equal(r.body.response.status, 'success');
    const denied = r.body.capability_denials.map((d) => d.capability).sort();
    assert.deepEqual(denied, ['com.example.teleport', 'openharness.actions.parallel', 'openharness.attachments.upload', 'openharness.streaming', 'openharness.ui.rich_cards']);
    for (const d of r.body.capability_denials) {
      assert.equal(d.code, 'not_supported');
      assert.ok(d.message.length > 10, d.message);
    }
    assert.ok('openharness.ui.approval' in r.body.supported_capabilities);
    assert.ok('openharness.continuation' in r.body.supported_capabilities);
    // attachments sent without asking are not dropped silently either
    const att = await post(s.token, message('/whoami', { context: { attachments: [{ ref_id: 'a' }, { uri: 'https://example.com/x.png' }] } }));
    assert.deepEqual(att.body.capability_denials.map((d) => [d.capability, /2 attachment references were ignored/.test(d.message)]), [['openharness.attachments.upload', true]]);
  });

  it('a slow turn answers with a continuation; resuming returns the reply; other, unknown and expired tokens are continuation_invalid', async () => {
    const slow = await serve({ waitMs: 300 });
    const s = await shell();
    const other = await shell();
    const session = `sess-${randomUUID().slice(0, 8)}`;
    const sessionId = sessionOf(s.id, session);
    model.enqueue({ text: 'Slow answer.', firstTokenDelayMs: 1_500 });
    const started = Date.now();
    const r = await post(s.token, message('take your time', { session }), { base: slow });
    assert.ok(Date.now() - started < 1_400, 'answered before the turn finished');
    assert.equal(r.body.response.status, 'success');
    const [noop] = directives(r);
    assert.equal(noop?.action_type, 'noop');
    assert.equal(noop?.payload?.text, 'still working');
    const cont = r.body.response.continuation;
    assert.ok(cont);
    assert.equal(cont.run_id, sessionId);
    assert.match(cont.continuation_token, /^ohc_/);
    assert.deepEqual(noop?.payload?.continuation, cont);
    const stored = await dbh.db.shellContinuation.findUniqueOrThrow({ where: { tokenHash: sha256(cont.continuation_token) } });
    assert.deepEqual([stored.shellId, stored.sessionId], [s.id, sessionId]);
    assert.equal(await dbh.db.shellContinuation.count({ where: { tokenHash: cont.continuation_token } }), 0, 'stored hashed');

    for (const [who, token] of [
      [other.token, cont.continuation_token],
      [s.token, `ohc_${'A'.repeat(43)}`],
      [s.token, 'garbage'],
      [OPERATOR_TOKEN, cont.continuation_token],
    ] as const) {
      const bad = await post(who, resume(token));
      assert.equal(bad.status, 200);
      assert.deepEqual([bad.body.response.status, bad.body.response.error?.code, bad.body.response.error?.retryable], ['error', 'continuation_invalid', false]);
    }

    const resumed = await post(s.token, resume(cont.continuation_token));
    assert.equal(resumed.body.response.status, 'success');
    assert.deepEqual(texts(resumed), ['Slow answer.']);
    assert.equal(resumed.body.response.continuation, undefined);
    const again = await post(s.token, resume(cont.continuation_token));
    assert.deepEqual(directives(again), directives(resumed), 'resuming is idempotent');

    const late = await serve({ now: () => Date.now() + 2 * 3_600_000 });
    const expired = await post(s.token, resume(cont.continuation_token), { base: late });
    assert.equal(expired.body.response.error?.code, 'continuation_invalid');
    assert.match(expired.body.response.error?.message ?? '', /expired/);
  });

  it('a message queued behind a running turn gets its own answer, not the earlier turn\'s', async () => {
    const slow = await serve({ waitMs: 300 });
    const s = await shell('admin');
    const session = `sess-${randomUUID().slice(0, 8)}`;
    model.enqueue({ text: 'Answer A.', firstTokenDelayMs: 1_000 });
    model.enqueue({ text: 'Answer B.' });
    const seen = model.requests.length;
    const a = await post(s.token, message('first', { session }), { base: slow });
    assert.equal(directives(a)[0]?.action_type, 'noop');
    await model.waitForRequest(seen + 1, 10_000); // A's turn is running
    const b = await post(s.token, message('second', { session }));
    assert.deepEqual(texts(b), ['Answer B.']);
    const resumed = await post(s.token, resume(a.body.response.continuation!.continuation_token));
    assert.deepEqual(texts(resumed), ['Answer A.']);
  });

  it('/stop with nothing running answers with the session\'s notice', async () => {
    const s = await shell();
    const r = await post(s.token, message('/stop'));
    assert.equal(r.body.response.status, 'success');
    assert.match(texts(r).join('\n'), /Nothing is running to stop/);
  });

  it('a turn waiting for an approval answers with request_approval; an admin decides; resuming returns the reply', async () => {
    const member = await shell('member');
    const admin = await shell('admin');
    const name = `ann${randomUUID().slice(0, 6)}`;
    await bindChat(dbh.db, { platform: 'telegram', account: 'bot-oh', chatId: `-100${Date.now()}`, name, createdBy: 'test' });
    model.enqueue({ toolCalls: [{ id: 'call_oh_post', name: 'post_to_chat', arguments: JSON.stringify({ chat: name, text: 'Release 2.0 is out.' }) }] });
    model.enqueue({ text: 'Posted the announcement.' });
    const session = `sess-${randomUUID().slice(0, 8)}`;
    const r = await post(member.token, message('announce the release', { session }));
    assert.equal(r.body.response.status, 'success', JSON.stringify(r.body));
    const ds = directives(r);
    assert.deepEqual(ds.map((d) => d.action_type), ['request_approval']);
    const d = ds[0]!;
    const row = await dbh.db.approval.findFirstOrThrow({ where: { sessionId: sessionOf(member.id, session) } });
    assert.equal(row.status, 'pending');
    assert.equal(d.requires_user_approval, true);
    assert.equal(d.risk_tier, 'caution');
    assert.ok(typeof d.deadline_ms === 'number' && d.deadline_ms > 0 && d.deadline_ms <= 3_600_000, String(d.deadline_ms));
    assert.equal(d.payload?.approval_id, row.id);
    assert.deepEqual(d.payload?.proposed_payload, { chat: name, text: 'Release 2.0 is out.' });
    assert.match(String(d.payload?.summary), new RegExp(`post to the chat "${name}"`));
    assert.deepEqual(d.payload?.approve, { user_intent: `/approve-action ${row.id}` });
    assert.deepEqual(d.payload?.deny, { user_intent: `/deny-action ${row.id} [reason]` });
    assert.match(String(d.payload?.fallback_message), new RegExp(`/approve-action ${row.id}`));
    const cont = r.body.response.continuation;
    assert.ok(cont);
    assert.deepEqual(d.payload?.continuation, cont);

    // only admins decide (the ingress says so)
    const byMember = await post(member.token, message(`/approve-action ${row.id}`, { session }));
    assert.equal(byMember.body.response.error?.code, 'forbidden');
    assert.match(byMember.body.response.error?.message ?? '', /needs the admin role/);
    const byAdmin = await post(admin.token, message(`/approve-action ${row.id}`));
    assert.equal(byAdmin.body.response.status, 'success');
    assert.match(texts(byAdmin)[0] ?? '', /Approved: the action runs now/);

    const resumed = await post(member.token, resume(cont.continuation_token));
    assert.equal(resumed.body.response.status, 'success');
    const out = directives(resumed);
    assert.ok(out.every((x) => x.action_type === 'render_message'), JSON.stringify(out));
    assert.equal(out.at(-1)?.payload?.text, 'Posted the announcement.');
    assert.equal(out.at(-1)?.payload?.kind, 'reply');
    assert.ok(texts(resumed).some((t) => /was approved by/.test(t)), JSON.stringify(texts(resumed)));
    assert.equal((await dbh.db.approval.findUniqueOrThrow({ where: { id: row.id } })).status, 'approved');
  });

  it('the operator token works as a shell (acting as the operator)', async () => {
    const session = `ops-${randomUUID().slice(0, 8)}`;
    model.enqueue({ text: 'At your service.' });
    const r = await post(OPERATOR_TOKEN, message('hello, it is me', { session }));
    assert.deepEqual(texts(r), ['At your service.']);
    const sessionId = sessionWorkflowId({ platform: 'openharness', account: 'operator', chatId: session });
    assert.equal((await h.ingress.transcript(sessionId)).length, 2);
    const who = await post(OPERATOR_TOKEN, message('/whoami', { session }));
    assert.match(texts(who)[0] ?? '', /You are the operator/);
  });

  it('/status as user_intent answers at once, without a model call', async () => {
    const s = await shell();
    const requests = model.requests.length;
    const started = Date.now();
    const r = await post(s.token, message('/status'));
    assert.ok(Date.now() - started < 3_000);
    assert.equal(r.body.response.status, 'success');
    const [d] = directives(r);
    assert.equal(d?.action_type, 'render_message');
    assert.equal(d?.payload?.kind, 'command');
    assert.match(String(d?.payload?.text), /No session yet\. Model: openai-compatible:test-model/);
    assert.equal(model.requests.length, requests);
    // a retried command request returns the same answer
    const body = message('/whoami', { requestId: 'cmd-retry' });
    assert.deepEqual(directives(await post(s.token, body)), directives(await post(s.token, body)));
  });

  it('conversation_id and odd session ids map to deterministic, valid chat ids', async () => {
    assert.equal(chatIdFor('plain-session_1'), 'plain-session_1');
    const a = chatIdFor('sess/with spaces', undefined);
    assert.match(a, /^oh-[0-9a-f]{40}$/);
    assert.equal(chatIdFor('sess/with spaces'), a);
    assert.notEqual(chatIdFor('s', 'c1'), chatIdFor('s', 'c2'));
    assert.notEqual(chatIdFor('s', 'c1'), chatIdFor('s'));
    assert.match(chatIdFor('oh-looks-hashed'), /^oh-[0-9a-f]{40}$/);
    assert.match(chatIdFor('x'.repeat(129)), /^oh-/);
    const s = await shell();
    model.enqueue({ text: 'Tab two.' });
    const r = await post(s.token, message('in a sub-thread', { session: 'sess/ü', context: { conversation_id: 'tab 2' } }));
    assert.deepEqual(texts(r), ['Tab two.']);
    assert.equal((await h.ingress.transcript(sessionOf(s.id, 'sess/ü', 'tab 2'))).length, 2);
  });

  it("a 'secret' privacy tier never logs the text; 'public' logs the intent at debug level", async () => {
    const s = await shell('admin');
    logLines.length = 0;
    const secret = `classified-${randomUUID()}`;
    const answer = `reply-${randomUUID()}`;
    model.enqueue({ text: answer });
    const r = await post(s.token, message(secret, { requestId: 'req-secret', context: { environment_state: { privacy_tier: 'secret' } } }));
    assert.deepEqual(texts(r), [answer]);
    const logged = logLines.join('\n');
    assert.match(logged, /req-secret/, 'ids are logged');
    assert.ok(!logged.includes(secret), 'the request text is not logged');
    assert.ok(!logged.includes(answer), 'the reply is not logged');
    const open = `public-${randomUUID()}`;
    await post(s.token, message(`/whoami ${open}`, { context: { environment_state: { privacy_tier: 'public' } } }));
    assert.ok(logLines.join('\n').includes(open), 'a public intent is logged at debug');
  });

  it('wakes on transcript events instead of polling when the platform emits them', async () => {
    const events = new EventEmitter<{ transcript: [sessionId: string, role: 'user' | 'assistant' | 'system'] }>();
    const base = await serve({ events, pollMs: 60_000 });
    const s = await shell('admin');
    const session = `sess-${randomUUID().slice(0, 8)}`;
    const sessionId = sessionOf(s.id, session);
    model.enqueue({ text: 'Woken by an event.' });
    const pending = post(s.token, message('wake me', { session }), { base });
    // stand in for the worker's onTranscript: emit once the reply has landed
    await waitFor(async () => ((await dbh.db.message.count({ where: { sessionId, role: 'assistant' } })) > 0 ? true : undefined), 'the reply', 15_000);
    const ticker = setInterval(() => events.emit('transcript', sessionId, 'assistant'), 50);
    try {
      const started = Date.now();
      const r = await pending;
      assert.ok(Date.now() - started < 5_000);
      assert.deepEqual(texts(r), ['Woken by an event.']);
    } finally {
      clearInterval(ticker);
    }
    assert.equal(events.listenerCount('transcript'), 0, 'no listener left behind');
  });

  it('mounts into the HTTP API app; shell tokens do not open the operator API', async () => {
    const base = await serve({}, (routes) => {
      const app = createHttpApp({ ingress: h.ingress, apiToken: OPERATOR_TOKEN, health: async () => ({ ok: true, checks: {} }) });
      app.route('/', routes);
      return app;
    });
    const s: IssuedShell = await shell();
    const r = await post(s.token, message('/whoami'), { base });
    assert.match(texts(r)[0] ?? '', /You are shell-member/);
    const api = await fetch(`${base}/api/v1/chats/room/messages`, { headers: { authorization: `Bearer ${s.token}` } });
    assert.equal(api.status, 401);
    await api.body?.cancel();
    const unauth = await post(undefined, message('/whoami'), { base });
    assert.equal(unauth.status, 401);
  });
});
