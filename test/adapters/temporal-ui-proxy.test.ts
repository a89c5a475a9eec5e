/**
 * The reverse proxy that serves the embedded Temporal UI at `<api>/ui`, through real HTTP
 * servers: an upstream standing in for the dev server's UI (it echoes what it receives) behind
 * Steward's HTTP app with the codec routes and the proxy, as `steward start` mounts them.
 * Checked: only a signed-in browser gets through (pages go to the sign-in form and back, the
 * rest is 401); requests and bodies reach the upstream byte for byte without Steward's cookie
 * or the bearer token; answers stream back as sent (compressed bodies untouched), the UI's
 * cookies kept to /ui, its redirects to its own origin kept on Steward's; a dead upstream is a
 * 502. The real UI in a browser: test/e2e/temporal-ui.test.ts.
 */
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import { after, before, describe, it } from 'node:test';
import type { PayloadCodec } from '@temporalio/common';
import { Hono } from 'hono';
import { startHttpServer } from '../../adapters/http/app.js';
import { createCodecRoutes } from '../../adapters/http/codec.js';
import { BrowserSignIn } from '../../adapters/http/sign-in.js';
import { createTemporalUiProxy } from '../../adapters/http/temporal-ui.js';
import { freePort } from '../helpers/process.js';

const TOKEN = 'ui-proxy-token-0123456789abcdef';
const BIG = 'x'.repeat(3 * 1024 * 1024);

interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

describe('the Temporal UI behind Steward (/ui)', () => {
  let upstream: Server;
  let steward: { url: string; close(): Promise<void> };
  const seen: Seen[] = [];
  let cookie = '';
  let upHost = '';

  before(async () => {
    upstream = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks).toString('utf8');
        seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
        if (req.url === '/ui') {
          res.writeHead(308, { location: `http://${req.headers.host}/ui/` }).end();
        } else if (req.url === '/ui/gz') {
          res.writeHead(200, { 'content-type': 'text/plain', 'content-encoding': 'gzip' }).end(gzipSync('compressed text'));
        } else if (req.url === '/ui/page') {
          res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'content-length': '58' }).end('<!doctype html><html><head><title>UI</title></head></html>');
        } else if (req.url === '/ui/big') {
          res.writeHead(200, { 'content-type': 'text/plain' }).end(BIG);
        } else {
          res.setHeader('set-cookie', ['_csrf=abc; Path=/; SameSite=Strict', 'other=1']);
          res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ method: req.method, url: req.url, body }));
        }
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    upHost = `127.0.0.1:${(upstream.address() as AddressInfo).port}`;
    const up = `http://${upHost}`;
    const signIn = new BrowserSignIn({ apiToken: TOKEN });
    const codec: PayloadCodec = { encode: async (p) => p, decode: async (p) => p };
    const app = new Hono();
    app.route('/', createCodecRoutes({ codec, apiToken: TOKEN, corsOrigins: [], signIn, uiPath: '/ui' }));
    app.route('/', createTemporalUiProxy({ basePath: '/ui', upstream: up, signIn }));
    steward = await startHttpServer(app, { host: '127.0.0.1', port: 0 });
    const login = await fetch(`${steward.url}/codec/login`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `token=${TOKEN}`, redirect: 'manual' });
    assert.equal(login.status, 303);
    cookie = (login.headers.get('set-cookie') ?? '').split(';')[0]!;
    assert.match(cookie, /^steward_codec=v1\./);
  });
  after(async () => {
    await steward?.close();
    await new Promise<void>((resolve) => upstream?.close(() => resolve()));
  });

  it('lets only a signed-in browser through: a page goes to the sign-in form and back, anything else is 401', async () => {
    seen.length = 0;
    const page = await fetch(`${steward.url}/ui/namespaces/default/workflows?query=x`, { headers: { accept: 'text/html' }, redirect: 'manual' });
    assert.equal(page.status, 303);
    assert.equal(page.headers.get('location'), `/codec/login?next=${encodeURIComponent('/ui/namespaces/default/workflows?query=x')}`);
    const apiCall = await fetch(`${steward.url}/ui/api/v1/namespaces`);
    assert.equal(apiCall.status, 401);
    assert.equal((await fetch(`${steward.url}/ui/api/v1/namespaces`, { headers: { authorization: `Bearer ${TOKEN}` } })).status, 401, 'the bearer token is for the API, not a browser sign-in');
    const forged = await fetch(`${steward.url}/ui/api/v1/namespaces`, { headers: { cookie: `steward_codec=v1.9999999999.${'A'.repeat(43)}` } });
    assert.equal(forged.status, 401);
    assert.deepEqual(seen, [], 'nothing reached the UI server');
    // the form sends the browser back where it was going
    const back = await fetch(`${steward.url}/codec/login`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ token: TOKEN, next: '/ui/namespaces/default/workflows?query=x' }).toString(), redirect: 'manual' });
    assert.equal(back.headers.get('location'), '/ui/namespaces/default/workflows?query=x');
  });

  it('forwards method, path, query and body, without Steward\'s cookie or the bearer token; keeps the UI\'s cookies to /ui', async () => {
    seen.length = 0;
    const body = JSON.stringify({ reason: 'from the UI', big: 'y'.repeat(200_000) });
    const r = await fetch(`${steward.url}/ui/api/v1/namespaces/default/workflows/w1/terminate?x=1`, {
      method: 'POST',
      headers: { cookie: `${cookie}; _csrf=abc`, 'x-csrf-token': 'abc', 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` },
      body,
    });
    assert.equal(r.status, 200);
    const echoed = (await r.json()) as { method: string; url: string; body: string };
    assert.deepEqual([echoed.method, echoed.url, echoed.body === body], ['POST', '/ui/api/v1/namespaces/default/workflows/w1/terminate?x=1', true]);
    const got = seen[0]!;
    assert.equal(got.headers.cookie, '_csrf=abc', "the UI's own cookie only");
    assert.equal(got.headers['x-csrf-token'], 'abc');
    assert.equal(got.headers.authorization, undefined);
    assert.equal(got.headers.host, upHost, "the UI server's own host");
    assert.deepEqual(r.headers.getSetCookie(), ['_csrf=abc; Path=/ui; SameSite=Strict', 'other=1; Path=/ui']);
  });

  it('streams answers as the UI server sent them: compressed bodies untouched, large ones whole; redirects stay on this origin', async () => {
    const gz = await fetch(`${steward.url}/ui/gz`, { headers: { cookie } });
    assert.equal(gz.headers.get('content-encoding'), 'gzip');
    assert.equal(await gz.text(), 'compressed text', 'the browser (here fetch) decompresses it once');
    const big = await fetch(`${steward.url}/ui/big`, { headers: { cookie } });
    assert.equal((await big.text()).length, BIG.length);
    const redirect = await fetch(`${steward.url}/ui`, { headers: { cookie }, redirect: 'manual' });
    assert.equal(redirect.status, 308);
    assert.equal(redirect.headers.get('location'), '/ui/');
  });

  it("adds the console link to the UI's pages (asked for uncompressed), and to nothing else", async () => {
    seen.length = 0;
    const page = await fetch(`${steward.url}/ui/page`, { headers: { cookie, accept: 'text/html,application/xhtml+xml', 'accept-encoding': 'gzip, br' } });
    assert.equal(page.status, 200);
    assert.equal(await page.text(), '<!doctype html><html><head><title>UI</title><script src="/console/assets/ui-link.js" defer></script></head></html>');
    assert.equal(seen[0]!.headers['accept-encoding'], 'identity', 'a page is read uncompressed');
    const json = await fetch(`${steward.url}/ui/page`, { headers: { cookie, accept: 'application/json' } });
    assert.doesNotMatch(await json.text(), /ui-link/, 'not a page request: as sent');
    const gz = await fetch(`${steward.url}/ui/gz`, { headers: { cookie, accept: 'text/html' } });
    assert.equal(await gz.text(), 'compressed text', 'not HTML: as sent');
  });

  it('answers 502 when the UI server is not there', async () => {
    const signIn = new BrowserSignIn({ apiToken: TOKEN });
    const app = new Hono();
    app.route('/', createTemporalUiProxy({ basePath: '/ui', upstream: `http://127.0.0.1:${await freePort()}`, signIn }));
    const server = await startHttpServer(app, { host: '127.0.0.1', port: 0 });
    try {
      const r = await fetch(`${server.url}/ui/`, { headers: { cookie: `steward_codec=${signIn.cookieValue()}` } });
      assert.equal(r.status, 502);
      assert.match(((await r.json()) as { error: string }).error, /embedded Temporal UI is not answering/);
    } finally {
      await server.close();
    }
  });
});
