/**
 * Proposed actions, unit level: the address classifier (IPv4, IPv6, mapped and embedded
 * addresses), names resolving to private addresses, allowPrivate and allowHosts, redirects
 * (same origin followed, another host refused), the response size cap and the timeout, all
 * against node:http servers on 127.0.0.1; the tool schemas, the approval verdict, proposal
 * refusals, commands in the sandbox, and the redaction of what admins and receipts see.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  ActionFailedError,
  ActionRefusedError,
  addressRefusal,
  classifyAddress,
  DEFAULT_ACTION_SETTINGS,
  DEFAULT_HTTP_ACTION_POLICY,
  hostAllowed,
  performHttpAction,
  precheckHttpUrl,
  proposalRefusal,
  resolveChecked,
  runCommandAction,
  sendEmailAction,
  type HostResolver,
  type HttpActionPolicy,
} from '../../domain/actions.js';
import { approvalRequired } from '../../activities/index.js';
import { heldSecretsFrom, heldSecretsIn, literalCredentials, requestHash, showInvisible, viewProposal } from '../../domain/actions/proposals.js';
import { redact, redactText } from '../../domain/redaction.js';
import { describeToolCall, validateToolCall } from '../../domain/tools.js';
import { ACTION_TOOLS, DEFAULT_ACTION_COMMANDS } from '../../common/tools.js';
import { loadConfig } from '../../config/index.js';
import { needs } from '../helpers/requirements.js';

/** Why the sandboxed tests are skipped here (outside CI; with CI=true they run and fail), or false. */
const noSandbox = await needs('bubblewrap');

interface Recorded {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

interface TestServer {
  port: number;
  base: string;
  requests: Recorded[];
  close(): Promise<void>;
}

async function serve(handler: (req: IncomingMessage, res: ServerResponse, body: string) => void): Promise<TestServer> {
  const requests: Recorded[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
      handler(req, res, body);
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    base: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

const LOCAL: HttpActionPolicy = { ...DEFAULT_HTTP_ACTION_POLICY, allowPrivate: true, timeoutMs: 5000 };

/** A resolver standing in for DNS: names map to fixed addresses; counts its calls. */
function fakeDns(table: Record<string, string[]>): HostResolver & { calls: string[] } {
  const calls: string[] = [];
  const fn = async (host: string) => {
    calls.push(host);
    const a = table[host];
    if (!a) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
    return a.map((address) => ({ address, family: address.includes(':') ? (6 as const) : (4 as const) }));
  };
  return Object.assign(fn, { calls });
}

describe('the address classifier', () => {
  const table: Array<[string, string]> = [
    ['8.8.8.8', 'public'],
    ['1.1.1.1', 'public'],
    ['93.184.216.34', 'public'],
    ['127.0.0.1', 'loopback'],
    ['127.255.255.254', 'loopback'],
    ['10.1.2.3', 'private'],
    ['172.16.0.1', 'private'],
    ['172.31.255.255', 'private'],
    ['172.32.0.1', 'public'],
    ['192.168.1.1', 'private'],
    ['100.64.0.1', 'cgnat'],
    ['100.127.255.255', 'cgnat'],
    ['100.128.0.1', 'public'],
    ['169.254.169.254', 'link-local'],
    ['0.0.0.0', 'unspecified'],
    ['0.1.2.3', 'unspecified'],
    ['224.0.0.1', 'multicast'],
    ['239.255.255.250', 'multicast'],
    ['255.255.255.255', 'broadcast'],
    ['240.0.0.1', 'reserved'],
    ['192.0.2.10', 'documentation'],
    ['198.51.100.7', 'documentation'],
    ['203.0.113.9', 'documentation'],
    ['198.18.0.1', 'reserved'],
    ['::', 'unspecified'],
    ['::1', 'loopback'],
    ['[::1]', 'loopback'],
    ['0:0:0:0:0:0:0:1', 'loopback'],
    ['fe80::1', 'link-local'],
    ['fe80::1%eth0', 'link-local'],
    ['febf::1', 'link-local'],
    ['fc00::1', 'unique-local'],
    ['fd12:3456:789a::1', 'unique-local'],
    ['fec0::1', 'private'],
    ['ff02::1', 'multicast'],
    ['2606:4700:4700::1111', 'public'],
    ['2a00:1450:4001:80b::200e', 'public'],
    ['2001:db8::1', 'documentation'],
    ['2001:0:4136:e378::1', 'reserved'],
    ['::ffff:127.0.0.1', 'loopback'],
    ['::ffff:7f00:1', 'loopback'],
    ['::ffff:10.0.0.1', 'private'],
    ['::ffff:169.254.169.254', 'link-local'],
    ['::ffff:8.8.8.8', 'public'],
    ['::127.0.0.1', 'loopback'],
    ['::8.8.8.8', 'reserved'],
    ['64:ff9b::10.0.0.1', 'private'],
    ['64:ff9b::8.8.8.8', 'public'],
    ['64:ff9b:1::1', 'private'],
    ['2002:7f00:1::1', 'loopback'],
    ['2002:c0a8:101::1', 'private'],
    ['2002:808:808::1', 'public'],
    ['not-an-ip', 'invalid'],
    ['1.2.3', 'invalid'],
    ['256.1.1.1', 'invalid'],
    ['1:2:3:4:5:6:7:8:9', 'invalid'],
    ['1::2::3', 'invalid'],
  ];
  for (const [ip, cls] of table) {
    it(`${ip} is ${cls}`, () => assert.equal(classifyAddress(ip), cls));
  }

  it('allowPrivate opens loopback, private, CGNAT and unique-local, not link-local; unspecified and multicast never', () => {
    const open = { allowPrivate: true, allowHosts: [] };
    for (const ip of ['127.0.0.1', '10.0.0.1', '100.64.0.1', 'fd00::1', '::ffff:192.168.0.1']) assert.equal(addressRefusal(ip, ip, open), undefined, ip);
    assert.match(addressRefusal('169.254.169.254', '169.254.169.254', open) ?? '', /link-local address; HTTP actions may not reach it unless .*STEWARD_ACTION_HTTP_ALLOW_HOSTS/);
    assert.equal(addressRefusal('169.254.169.254', '169.254.169.254', { allowPrivate: false, allowHosts: ['169.254.169.254'] }), undefined, 'named explicitly');
    for (const ip of ['0.0.0.0', '::', '224.0.0.1', '255.255.255.255']) {
      assert.match(addressRefusal(ip, ip, { allowPrivate: true, allowHosts: [ip] }) ?? '', /never go there/, ip);
    }
  });

  it('allowHosts matches names exactly or as subdomains of *.entries, and IPv6 literals in any spelling', () => {
    assert.equal(hostAllowed('hooks.corp.example', ['*.corp.example']), true);
    assert.equal(hostAllowed('corp.example', ['*.corp.example']), false);
    assert.equal(hostAllowed('evilcorp.example', ['*.corp.example']), false);
    assert.equal(hostAllowed('HOOKS.example.', ['hooks.example']), true);
    assert.equal(hostAllowed('[::1]', ['0:0:0:0:0:0:0:1']), true);
    assert.equal(hostAllowed('other.example', ['hooks.example']), false);
  });
});

describe('HTTP action targets', () => {
  it('refuses private and loopback literals and localhost names before any DNS; decimal and hex spellings too', () => {
    const closed = { allowPrivate: false, allowHosts: [] };
    for (const url of ['http://127.0.0.1/', 'http://10.0.0.1:8080/x', 'http://[::1]/', 'http://[::ffff:127.0.0.1]/', 'http://2130706433/', 'http://0x7f.1/', 'http://localhost/', 'http://api.localhost/', 'https://169.254.169.254/latest/meta-data/']) {
      assert.match(precheckHttpUrl(url, closed) ?? '', /may not reach|never go there/, url);
    }
    assert.equal(precheckHttpUrl('https://example.com/hook', closed), undefined, 'a name is resolved later');
    assert.match(precheckHttpUrl('http://0.0.0.0:80/', { allowPrivate: true, allowHosts: ['0.0.0.0'] }) ?? '', /never go there/);
  });

  it('a name resolving to a private address is refused, also when only one of its addresses is; allowHosts and allowPrivate open it', async () => {
    const dns = fakeDns({
      'internal.example': ['10.0.0.5'],
      'mixed.example': ['93.184.216.34', '::ffff:127.0.0.1'],
      'meta.example': ['169.254.169.254'],
      'public.example': ['93.184.216.34', '2606:2800:220:1::1'],
      'svc.corp.example': ['10.1.1.1'],
    });
    const closed = { allowPrivate: false, allowHosts: [] };
    await assert.rejects(resolveChecked('internal.example', closed, dns), (e: Error) => e instanceof ActionRefusedError && /internal\.example resolves to 10\.0\.0\.5, which is a private address/.test(e.message));
    await assert.rejects(resolveChecked('mixed.example', closed, dns), /resolves to ::ffff:127\.0\.0\.1, which is a loopback address/);
    await assert.rejects(resolveChecked('meta.example', { allowPrivate: true, allowHosts: [] }, dns), /link-local/);
    await assert.rejects(resolveChecked('nowhere.example', closed, dns), /cannot be resolved: ENOTFOUND/);
    assert.match(precheckHttpUrl('http://[::ffff:a9fe:a9fe]/', closed) ?? '', /^::ffff:a9fe:a9fe \(IPv4 169\.254\.169\.254\) is a link-local address/);
    assert.match(precheckHttpUrl('http://[64:ff9b::a00:1]/', closed) ?? '', /^64:ff9b::a00:1 \(IPv4 10\.0\.0\.1\) is a private address/);
    assert.deepEqual((await resolveChecked('public.example', closed, dns)).map((a) => a.address), ['93.184.216.34', '2606:2800:220:1::1']);
    assert.equal((await resolveChecked('svc.corp.example', { allowPrivate: false, allowHosts: ['*.corp.example'] }, dns))[0]?.address, '10.1.1.1');
    assert.equal((await resolveChecked('internal.example', { allowPrivate: true, allowHosts: [] }, dns))[0]?.address, '10.0.0.5');
  });
});

describe('performHttpAction against local servers', () => {
  let main: TestServer;
  let other: TestServer;
  before(async () => {
    other = await serve((_req, res) => res.end('other host'));
    main = await serve((req, res, body) => {
      const url = new URL(req.url ?? '/', 'http://x');
      switch (url.pathname) {
        case '/echo':
          res.setHeader('content-type', 'application/json');
          res.setHeader('set-cookie', 'sid=secret');
          res.end(JSON.stringify({ method: req.method, body, host: req.headers.host, auth: req.headers.authorization ?? null }));
          return;
        case '/hop1':
          res.writeHead(302, { location: '/hop2' }).end();
          return;
        case '/hop2':
          res.writeHead(307, { location: `http://127.0.0.1:${main.port}/echo` }).end('moving');
          return;
        case '/see-other':
          res.writeHead(303, { location: '/echo' }).end();
          return;
        case '/loop':
          res.writeHead(302, { location: `/loop?n=${Number(url.searchParams.get('n') ?? 0) + 1}` }).end();
          return;
        case '/away':
          res.writeHead(301, { location: `http://127.0.0.1:${other.port}/stolen` }).end();
          return;
        case '/away-by-name':
          res.writeHead(302, { location: `http://localhost:${main.port}/echo` }).end();
          return;
        case '/big':
          res.setHeader('content-type', 'text/plain');
          res.end('a'.repeat(200_000) + 'THE-END');
          return;
        case '/huge': {
          // 4 MiB; the client stops reading well before the end
          res.setHeader('content-type', 'application/octet-stream');
          let sent = 0;
          const more = () => {
            while (sent < 4 * 1024 * 1024) {
              sent += 64 * 1024;
              if (!res.write(Buffer.alloc(64 * 1024, 98))) return void res.once('drain', more);
            }
            res.end();
          };
          res.on('error', () => undefined);
          more();
          return;
        }
        case '/cut':
          res.writeHead(200, { 'content-length': '100' });
          res.write('only ten..');
          setTimeout(() => res.socket?.destroy(), 20);
          return;
        case '/slow':
          // never answers; the client's timeout ends it
          return;
        default:
          res.writeHead(404).end('no');
      }
    });
  });
  after(async () => {
    await main.close();
    await other.close();
  });

  it('an allowed local request: status, reported headers (no cookies), body; the server sees method, body and Authorization', async () => {
    const r = await performHttpAction({ method: 'POST', url: `${main.base}/echo`, headers: { Authorization: 'Bearer s3cret-token', 'Content-Type': 'text/plain' }, body: 'hello' }, LOCAL);
    assert.equal(r.status, 200);
    assert.equal(r.headers['content-type'], 'application/json');
    assert.equal(r.headers['set-cookie'], undefined);
    assert.deepEqual(JSON.parse(r.bodyTail), { method: 'POST', body: 'hello', host: `127.0.0.1:${main.port}`, auth: 'Bearer s3cret-token' });
    assert.equal(r.truncated, false);
    assert.equal(r.address, '127.0.0.1');
  });

  it('connects to the address that was checked, keeping the name in the Host header (no second DNS lookup)', async () => {
    const dns = fakeDns({ 'hooks.pinned.test': ['127.0.0.1'] });
    const r = await performHttpAction({ method: 'GET', url: `http://hooks.pinned.test:${main.port}/echo` }, { ...DEFAULT_HTTP_ACTION_POLICY, allowHosts: ['hooks.pinned.test'] }, { resolve: dns });
    assert.equal(r.status, 200);
    assert.equal((JSON.parse(r.bodyTail) as { host: string }).host, `hooks.pinned.test:${main.port}`);
    // the system resolver does not know the name: the connection used the checked address
    assert.deepEqual(dns.calls, ['hooks.pinned.test']);
  });

  it('refuses loopback without the policy, and sends nothing', async () => {
    const before = main.requests.length;
    await assert.rejects(
      performHttpAction({ method: 'GET', url: `${main.base}/echo` }, { ...DEFAULT_HTTP_ACTION_POLICY }),
      (e: Error) => e instanceof ActionRefusedError && /127\.0\.0\.1 is a loopback address/.test(e.message),
    );
    const dns = fakeDns({ 'rebind.example': ['127.0.0.1'] });
    await assert.rejects(performHttpAction({ method: 'GET', url: `http://rebind.example:${main.port}/echo` }, DEFAULT_HTTP_ACTION_POLICY, { resolve: dns }), /rebind\.example resolves to 127\.0\.0\.1/);
    assert.equal(main.requests.length, before);
  });

  it('follows same-origin redirects (each checked again), 303 turns into GET without the body', async () => {
    const r = await performHttpAction({ method: 'GET', url: `${main.base}/hop1` }, LOCAL);
    assert.equal(r.status, 200);
    assert.equal(r.redirects, 2);
    assert.equal(r.url, `${main.base}/echo`);
    const s = await performHttpAction({ method: 'POST', url: `${main.base}/see-other`, body: 'x' }, LOCAL);
    assert.equal(s.status, 200);
    assert.deepEqual((JSON.parse(s.bodyTail) as { method: string; body: string }).method, 'GET');
  });

  it('stops at a redirect to another host or port, and after 3 same-origin redirects', async () => {
    const before = other.requests.length;
    const r = await performHttpAction({ method: 'GET', url: `${main.base}/away` }, LOCAL);
    assert.equal(r.status, 301);
    assert.equal(r.redirectRefused?.location, `http://127.0.0.1:${other.port}/stolen`);
    assert.match(r.redirectRefused?.reason ?? '', /another scheme, host or port/);
    assert.equal(other.requests.length, before, 'the other host got nothing');
    const byName = await performHttpAction({ method: 'GET', url: `${main.base}/away-by-name` }, LOCAL);
    assert.equal(byName.status, 302);
    assert.ok(byName.redirectRefused, 'another host name is another host');
    const loop = await performHttpAction({ method: 'GET', url: `${main.base}/loop` }, LOCAL);
    assert.equal(loop.redirects, 3);
    assert.match(loop.redirectRefused?.reason ?? '', /more than 3 redirects/);
  });

  it('caps the body: the tail is kept, every byte counted', async () => {
    const r = await performHttpAction({ method: 'GET', url: `${main.base}/big` }, { ...LOCAL, maxResponseBytes: 1024 });
    assert.equal(r.bytes, 200_007);
    assert.equal(r.truncated, true);
    assert.equal(Buffer.byteLength(r.bodyTail), 1024);
    assert.ok(r.bodyTail.endsWith('aaaTHE-END'));
  });

  it('stops reading a body far beyond the cap, and reports a body cut short as a failure', async () => {
    const r = await performHttpAction({ method: 'GET', url: `${main.base}/huge` }, { ...LOCAL, maxResponseBytes: 1024 });
    assert.equal(r.truncated, true);
    assert.ok(r.bytes >= 1024 * 1024 && r.bytes < 4 * 1024 * 1024, `read ${r.bytes} bytes`);
    assert.equal(r.bodyTail, 'b'.repeat(1024));
    await assert.rejects(performHttpAction({ method: 'GET', url: `${main.base}/cut` }, LOCAL), (e: Error) => e instanceof ActionFailedError && /mid-response|aborted|socket hang up/.test(e.message));
  });

  it('gives up at the total timeout', async () => {
    const started = Date.now();
    await assert.rejects(performHttpAction({ method: 'GET', url: `${main.base}/slow` }, { ...LOCAL, timeoutMs: 300 }), (e: Error) => e instanceof ActionFailedError && /timed out after 300 ms/.test(e.message));
    assert.ok(Date.now() - started < 3000);
  });

  it('a connection refused is a failure, not a crash', async () => {
    const dead = await serve(() => undefined);
    const url = `${dead.base}/`;
    await dead.close();
    await assert.rejects(performHttpAction({ method: 'GET', url }, LOCAL), (e: Error) => e instanceof ActionFailedError && /ECONNREFUSED/.test(e.message));
  });
});

describe('proposed action tools', () => {
  it('always need approval, whatever STEWARD_APPROVAL_TOOLS says; the other tools as the policy lists them', () => {
    assert.deepEqual([...ACTION_TOOLS].sort(), ['http_request', 'run_command', 'send_email', 'start_repo_change']);
    for (const t of ACTION_TOOLS) {
      assert.equal(approvalRequired({ approvalTools: [] }, t), true, t);
      assert.equal(approvalRequired({ approvalTools: ['save_note'] }, t), true, t);
    }
    assert.equal(approvalRequired({ approvalTools: [] }, 'post_to_chat'), false);
    assert.equal(approvalRequired({ approvalTools: ['post_to_chat'] }, 'post_to_chat'), true);
    assert.equal(approvalRequired({ approvalTools: ['*'] }, 'save_note'), true);
    assert.equal(approvalRequired({ approvalTools: [] }, 'save_note'), false);
  });

  it('validate their input with zod', () => {
    const bad: Array<[string, unknown, RegExp]> = [
      ['http_request', { method: 'GET', url: 'ftp://example.com/' }, /http:\/\/ or https:\/\//],
      ['http_request', { method: 'TRACE', url: 'https://example.com/' }, /method/],
      ['http_request', { method: 'GET', url: 'https://example.com/', headers: { Host: 'evil' } }, /set by Steward/],
      ['http_request', { method: 'GET', url: 'https://example.com/', headers: { 'X-A': 'a\r\nX-B: b' } }, /no line breaks/],
      ['http_request', { method: 'POST', url: 'https://example.com/', body: 'x'.repeat(16_001) }, /at most 16000/],
      ['send_email', { to: [], subject: 's', text: 't' }, /at least one recipient/],
      ['send_email', { to: Array.from({ length: 11 }, (_, i) => `u${i}@example.com`), subject: 's', text: 't' }, /at most 10 recipients/],
      ['send_email', { to: ['not an address'], subject: 's', text: 't' }, /not an email address/],
      ['send_email', { to: ['a@example.com'], subject: 'a\nBcc: x@evil.example', text: 't' }, /one line/],
      ['run_command', { argv: ['/bin/sh', '-c', 'id'] }, /bare program name/],
      ['run_command', { argv: [] }, /argv names the program/],
      ['start_repo_change', { repo: '../x', request: 'do it' }, /repository name/],
      ['start_repo_change', { repo: 'demo', request: 'x', extra: 1 }, /Unrecognized key|extra/],
    ];
    for (const [tool, input, why] of bad) {
      const v = validateToolCall(tool, input);
      assert.equal(v.ok, false, `${tool} ${JSON.stringify(input)}`);
      if (!v.ok) assert.match(v.error, why);
    }
    assert.equal(validateToolCall('send_email', { to: ['a@example.com'], cc: ['b@example.com'], subject: 'Hi', text: 'Hello' }).ok, true);
    assert.equal(validateToolCall('run_command', { argv: ['wc', '-l'] }).ok, true);
  });

  it('are refused when proposed if they could not run: no SMTP, a program off the allowlist, no change service, a private literal', () => {
    const s = DEFAULT_ACTION_SETTINGS;
    assert.match(proposalRefusal('send_email', { to: ['a@example.com'], subject: 's', text: 't' }, s, { startRepoChange: true }) ?? '', /SMTP is not configured/);
    assert.match(proposalRefusal('run_command', { argv: ['curl', 'http://x'] }, s, { startRepoChange: true }) ?? '', /"curl" is not on the command allowlist/);
    assert.equal(proposalRefusal('run_command', { argv: ['wc', '-l'] }, s, { startRepoChange: true }), undefined);
    assert.match(proposalRefusal('start_repo_change', { repo: 'demo', request: 'x' }, s, { startRepoChange: false }) ?? '', /cannot be started from here/);
    assert.match(proposalRefusal('http_request', { method: 'GET', url: 'http://192.168.1.1/' }, s, { startRepoChange: true }) ?? '', /private address/);
    assert.equal(proposalRefusal('http_request', { method: 'GET', url: 'https://example.com/' }, s, { startRepoChange: true }), undefined);
  });

  it('send_email without SMTP is refused', async () => {
    await assert.rejects(sendEmailAction({ to: ['a@example.com'], subject: 's', text: 't' }, undefined), (e: Error) => e instanceof ActionRefusedError && /SMTP is not configured/.test(e.message));
  });

  it('run_command runs in the sandbox in a fresh directory that is removed; off-list programs never run', { skip: noSandbox }, async () => {
    const mine = () => readdirSync(tmpdir()).filter((n) => n.startsWith('steward-action-'));
    const before = mine();
    const r = await runCommandAction({ argv: ['sh', '-c', 'echo hello; pwd; ls -A | wc -l; echo oops >&2; exit 3'] }, { ...DEFAULT_ACTION_SETTINGS.commands, allowlist: ['sh'] });
    assert.equal(r.exitCode, 3);
    const [hello, cwd, count] = r.stdoutTail.trim().split('\n');
    assert.equal(hello, 'hello');
    assert.match(cwd ?? '', /steward-action-/);
    assert.equal(count?.trim(), '0', 'an empty directory');
    assert.equal(r.stderrTail.trim(), 'oops');
    assert.deepEqual(mine(), before, 'the directory is removed');
    const net = await runCommandAction({ argv: ['cat', '/etc/hostname'] }, { ...DEFAULT_ACTION_SETTINGS.commands });
    assert.notEqual(net.exitCode, 0, 'the host /etc is not visible');
    await assert.rejects(runCommandAction({ argv: ['curl', 'http://example.com'] }, DEFAULT_ACTION_SETTINGS.commands), /not on the command allowlist/);
    const slow = await runCommandAction({ argv: ['sh', '-c', 'sleep 5'] }, { ...DEFAULT_ACTION_SETTINGS.commands, allowlist: ['sh'], timeoutMs: 300 });
    assert.equal(slow.timedOut, true);
  });
});

describe('redaction of proposals and receipts', () => {
  it('hides secret-looking header values, URL userinfo and secret query values, secret fields in bodies', () => {
    const input = {
      method: 'POST',
      url: 'https://bob:hunter2@api.example.com/v1/hook?token=abc123&q=weather&api_key=zzz&X-Amz-Signature=sig1',
      headers: {
        Authorization: 'Bearer s3cret-value',
        Cookie: 'sid=1',
        'X-Api-Key': 'k-123',
        'X-Custom-Token': 't-456',
        'X-Webhook-Secret': 's-789',
        'Proxy-Password': 'p',
        'Content-Type': 'application/json',
        'X-Request-Author': 'ann',
      },
      body: '{"password":"hunter2","client_secret": "cs", "name":"x"} and token=raw&ok=1',
    };
    const out = redact(input) as typeof input;
    for (const h of ['Authorization', 'Cookie', 'X-Api-Key', 'X-Custom-Token', 'X-Webhook-Secret', 'Proxy-Password'] as const) assert.equal(out.headers[h], '[redacted]', h);
    assert.equal(out.headers['Content-Type'], 'application/json');
    assert.equal(out.headers['X-Request-Author'], 'ann');
    assert.equal(out.url, 'https://[redacted]@api.example.com/v1/hook?token=[redacted]&q=weather&api_key=[redacted]&X-Amz-Signature=[redacted]');
    assert.equal(out.body, '{"password":"[redacted]","client_secret": "[redacted]", "name":"x"} and token=[redacted]&ok=1');
    const shown = JSON.stringify(out);
    for (const secret of ['hunter2', 's3cret-value', 'k-123', 't-456', 's-789', 'abc123', 'zzz', 'sig1', 'bob:']) assert.ok(!shown.includes(secret), secret);
    const summary = describeToolCall('http_request', input);
    assert.match(summary, /^make an HTTP POST request to https:\/\/\[redacted\]@api\.example\.com\/v1\/hook\?token=\[redacted\]/);
    assert.ok(!summary.includes('hunter2') && !summary.includes('abc123'));
  });

  it('hides credentials in free text and argv', () => {
    assert.equal(redactText('curl -H "Authorization: Bearer abcdef123456" https://x'), 'curl -H "Authorization: Bearer [redacted]" https://x');
    assert.deepEqual(redact(['mysql', '--password=pw1', '-u', 'root']), ['mysql', '--password=[redacted]', '-u', 'root']);
    assert.equal(redactText('key sk-abcdefghijklmnopqrstuv'), 'key [redacted]');
    assert.match(describeToolCall('send_email', { to: ['a@example.com'], subject: 'Report', text: 'x' }), /^send an email to a@example\.com with the subject "Report"$/);
    assert.match(describeToolCall('run_command', { argv: ['wc', '-l'] }), /^run the command \["wc","-l"\] in the sandbox$/);
    assert.match(describeToolCall('start_repo_change', { repo: 'demo', request: 'fix it' }), /^start a change on the repository demo: "fix it"$/);
  });
});

describe('what an approver sees (finding: approvers approved blind)', () => {
  const hook = {
    method: 'POST' as const,
    url: 'https://bob:hunter2@api.example.com/v1/hook?token=abc123&q=weather',
    headers: { 'X-Api-Key': 'k-1234567', 'Content-Type': 'application/json', Authorization: 'Basic Ym9iOmh1bnRlcjI=' },
    body: '{"token":"smuggled-value","name":"x"}',
  };

  it('shows every value the model chose, in full: headers, body fields, URL userinfo and query', () => {
    const v = viewProposal('http_request', hook);
    for (const value of ['X-Api-Key: k-1234567', 'Authorization: Basic Ym9iOmh1bnRlcjI=', '"token":"smuggled-value"', 'https://bob:hunter2@api.example.com/v1/hook?token=abc123&q=weather']) {
      assert.ok(v.block.includes(value), `the approver sees ${value}`);
    }
    assert.ok(!v.block.includes('[redacted]'), 'nothing the model chose is hidden');
    assert.match(v.block, /^```\nPOST https:\/\/bob:hunter2@api\.example\.com/);
    assert.deepEqual(JSON.parse(v.payload), hook, 'the payload is the input as the model wrote it, in full');
    assert.deepEqual(v.credentials, ['header X-Api-Key', 'header Authorization', 'URL userinfo', 'URL query parameter token', 'body field token']);
  });

  it("masks only Steward's own secrets, in every form, and names where they come from", () => {
    const held = heldSecretsFrom({
      STEWARD_API_TOKEN: 'api-token-0123456789',
      TELEGRAM_BOT_TOKEN: '123456:ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef',
      STEWARD_SMTP_URL: 'smtp://steward:smtp-password-1@mail.example.com',
      STEWARD_CODEC_KEYS: 'k1:codec-key-aaaaaaaa,k2:codec-key-bbbbbbbb',
      STEWARD_HOOK_DEPLOY: 'hook-secret-0123456789abcdef0123456789',
      HOME: '/root/not-a-secret',
      SHORT_TOKEN: 'abc',
    });
    assert.deepEqual([...new Set(held.map((h) => h.name))].sort(), ['STEWARD_API_TOKEN', 'STEWARD_CODEC_KEYS', 'STEWARD_HOOK_DEPLOY', 'STEWARD_SMTP_URL', 'TELEGRAM_BOT_TOKEN']);
    assert.ok(held.some((h) => h.value === 'codec-key-aaaaaaaa'), 'each key of a key list');
    assert.ok(!held.some((h) => h.value.includes('/root')), 'HOME is not a secret');
    const b64 = Buffer.from('api-token-0123456789').toString('base64');
    const input = { method: 'POST', url: `https://x.example/?k=${encodeURIComponent('smtp-password-1')}`, headers: { 'X-A': `Basic ${b64}` }, body: 'codec-key-bbbbbbbb and api-token-0123456789' };
    assert.deepEqual(heldSecretsIn(input, held).sort(), ['STEWARD_API_TOKEN', 'STEWARD_CODEC_KEYS', 'STEWARD_SMTP_URL']);
    const v = viewProposal('http_request', input, { heldSecrets: held });
    for (const leak of ['api-token-0123456789', b64, 'smtp-password-1', 'codec-key-bbbbbbbb']) assert.ok(!v.block.includes(leak) && !v.payload.includes(leak), leak);
    assert.match(v.block, /\[Steward's secret STEWARD_API_TOKEN\]/);
    assert.deepEqual(v.heldSecrets.sort(), ['STEWARD_API_TOKEN', 'STEWARD_CODEC_KEYS', 'STEWARD_SMTP_URL']);
    // such a proposal is refused before any admin is asked
    const settings = { ...DEFAULT_ACTION_SETTINGS, literalCredentials: 'allow' as const, heldSecrets: held };
    assert.match(proposalRefusal('http_request', input, settings, { startRepoChange: true }) ?? '', /carries a secret Steward holds \(.*STEWARD_API_TOKEN.*\)/);
    assert.match(proposalRefusal('run_command', { argv: ['echo', 'api-token-0123456789'] }, settings, { startRepoChange: true }) ?? '', /STEWARD_API_TOKEN/);
  });

  it('refuses literal credentials by default; allowed, they are flagged; ordinary fields are not credentials', () => {
    const refuse = DEFAULT_ACTION_SETTINGS;
    assert.match(proposalRefusal('http_request', hook, refuse, { startRepoChange: true }) ?? '', /literal credentials.*STEWARD_ACTION_LITERAL_CREDENTIALS=allow/);
    assert.equal(proposalRefusal('http_request', hook, { ...refuse, literalCredentials: 'allow' }, { startRepoChange: true }), undefined);
    const cases: Array<[string, unknown, string[]]> = [
      ['http_request', { method: 'GET', url: 'https://u@x.example/' }, ['URL userinfo']],
      ['http_request', { method: 'GET', url: 'https://x.example/?api_key=1&page=2' }, ['URL query parameter api_key']],
      ['http_request', { method: 'POST', url: 'https://x.example/', body: 'user=a&password=b' }, ['body field password']],
      ['http_request', { method: 'POST', url: 'https://x.example/', body: '{"auth":{"client_secret":"s"},"list":[{"access_token":"t"}]}' }, ['body field auth', 'body field list[0].access_token']],
      ['http_request', { method: 'POST', url: 'https://x.example/', headers: { Cookie: 'sid=1' } }, ['header Cookie']],
      ['http_request', { method: 'POST', url: 'https://x.example/', body: 'see sk-abcdefghijklmnopqrstuvwx' }, ['a value shaped like an access token']],
      ['run_command', { argv: ['mysql', '--password=pw1'] }, ['argument 1 (password=…)']],
      ['run_command', { argv: ['tool', '--token', 'abc'] }, ['argument 2 (after --token)']],
      // not credentials
      ['http_request', { method: 'POST', url: 'https://x.example/v1/chat?page=2', headers: { 'Content-Type': 'application/json', 'Idempotency-Key': 'k1' }, body: '{"max_tokens":100,"token_type":"bearer","key":"name","monkey":"x"}' }, []],
      ['send_email', { to: ['a@example.com'], subject: 'Your password reset', text: 'Hello' }, []],
      ['run_command', { argv: ['wc', '-l'] }, []],
    ];
    for (const [tool, input, want] of cases) assert.deepEqual(literalCredentials(tool, input), want, JSON.stringify(input));
  });

  it('makes invisible and direction-changing characters visible, and no backtick run closes the block', () => {
    assert.equal(showInvisible('pay\u202Eevil\u200B\u0007ok\n\tline'), 'pay\\u{202E}evil\\u{200B}\\u{0007}ok\n\tline');
    const v = viewProposal('send_email', { to: ['a@example.com'], subject: 'Hi', text: 'a ```` b\u2066hidden\u2069' }, { smtpFrom: 'steward@example.com' });
    assert.match(v.block, /^`````\nFrom: steward@example\.com\nTo: a@example\.com\nSubject: Hi\n\na ```` b\\u\{2066\}hidden\\u\{2069\}\n`````$/);
    assert.equal(v.invisible, true);
  });

  it('hashes the exact request: the same request hashes the same whatever the header order; any change, a new hash', () => {
    const a = requestHash('http_request', { method: 'POST', url: 'https://x.example/', headers: { A: '1', B: '2' }, body: 'x' });
    assert.match(a, /^[0-9a-f]{64}$/);
    assert.equal(requestHash('http_request', { method: 'POST', url: 'https://x.example/', headers: { B: '2', A: '1' }, body: 'x' }), a);
    for (const changed of [
      { method: 'PUT', url: 'https://x.example/', headers: { A: '1', B: '2' }, body: 'x' },
      { method: 'POST', url: 'https://x.example/?', headers: { A: '1', B: '2' }, body: 'x' },
      { method: 'POST', url: 'https://x.example/', headers: { A: '1', B: '3' }, body: 'x' },
      { method: 'POST', url: 'https://x.example/', headers: { A: '1', B: '2' }, body: 'x ' },
    ]) {
      assert.notEqual(requestHash('http_request', changed), a, JSON.stringify(changed));
    }
    const mail = { to: ['a@example.com'], subject: 's', text: 't' };
    assert.notEqual(requestHash('send_email', mail, { smtpFrom: 'a@x.example' }), requestHash('send_email', mail, { smtpFrom: 'b@x.example' }), 'the From address Steward adds counts');
  });
});

describe('proposed action settings', () => {
  const cwd = () => mkdtempSync(path.join(tmpdir(), 'steward-config-'));

  it('default to no SMTP, no private addresses, the small command set and 64 KiB', () => {
    const c = loadConfig({}, cwd());
    assert.deepEqual(c.actions, {
      http: { allowPrivate: false, allowHosts: [], maxResponseBytes: 65536 },
      commands: { allowlist: [...DEFAULT_ACTION_COMMANDS] },
      literalCredentials: 'refuse',
      heldSecrets: [],
    });
  });

  it('read SMTP, the HTTP policy and the command allowlist; refuse bad values without showing the SMTP URL', () => {
    const c = loadConfig(
      {
        STEWARD_SMTP_URL: 'smtp://steward:pw@mail.example.com:587',
        STEWARD_SMTP_FROM: 'Steward <steward@example.com>',
        STEWARD_ACTION_HTTP_ALLOW_PRIVATE: 'true',
        STEWARD_ACTION_HTTP_ALLOW_HOSTS: 'Hooks.Internal.example, *.corp.example, 10.0.0.5, [fd00::1]',
        STEWARD_ACTION_COMMANDS: 'echo,wc',
        STEWARD_ACTION_MAX_RESPONSE_BYTES: '1024',
      },
      cwd(),
    );
    assert.deepEqual(c.actions, {
      smtp: { url: 'smtp://steward:pw@mail.example.com:587', from: 'Steward <steward@example.com>' },
      http: { allowPrivate: true, allowHosts: ['hooks.internal.example', '*.corp.example', '10.0.0.5', '[fd00::1]'], maxResponseBytes: 1024 },
      commands: { allowlist: ['echo', 'wc'] },
      literalCredentials: 'refuse',
      heldSecrets: [],
    });
    assert.equal(loadConfig({ STEWARD_ACTION_LITERAL_CREDENTIALS: 'allow' }, cwd()).actions.literalCredentials, 'allow');
    assert.throws(() => loadConfig({ STEWARD_ACTION_LITERAL_CREDENTIALS: 'maybe' }, cwd()), /STEWARD_ACTION_LITERAL_CREDENTIALS: expected refuse or allow/);
    assert.equal(loadConfig({}, cwd()).governance.forbidSelfApproval, true);
    assert.equal(loadConfig({ STEWARD_FORBID_SELF_APPROVAL: 'false' }, cwd()).governance.forbidSelfApproval, false);
    assert.throws(() => loadConfig({ STEWARD_SMTP_URL: 'smtp://mail.example.com' }, cwd()), /STEWARD_SMTP_FROM: expected the From address/);
    assert.throws(
      () => loadConfig({ STEWARD_SMTP_URL: 'http://user:hunter2@mail.example.com', STEWARD_SMTP_FROM: 'a@example.com' }, cwd()),
      (e: Error) => /STEWARD_SMTP_URL: expected an smtp:\/\/ or smtps:\/\/ URL/.test(e.message) && !e.message.includes('hunter2'),
    );
    assert.throws(() => loadConfig({ STEWARD_ACTION_COMMANDS: 'echo,/bin/sh' }, cwd()), /STEWARD_ACTION_COMMANDS: expected program names/);
    assert.throws(() => loadConfig({ STEWARD_ACTION_HTTP_ALLOW_HOSTS: 'http://x.example/' }, cwd()), /STEWARD_ACTION_HTTP_ALLOW_HOSTS: expected host names/);
    assert.throws(() => loadConfig({ STEWARD_SMTP_URL: 'smtp://m.example.com', STEWARD_SMTP_FROM: 'not an address' }, cwd()), /STEWARD_SMTP_FROM: expected a From address/);
  });
});
