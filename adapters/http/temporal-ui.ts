/**
 * The embedded Temporal UI under Steward's own origin: `steward start` runs the dev server's
 * Web UI with `--ui-public-path /ui` on a loopback port, and this reverse proxy serves it at
 * `<api>/ui/` (pages, assets and the UI's own `/ui/api/v1` calls, streamed both ways). Because
 * the UI and the codec endpoint (`/codec`) then share the origin, the browser's sign-in cookie
 * goes with the UI's decode calls, and the UI shows decoded payloads with nothing to set in it.
 *
 * Only a signed-in browser (sign-in.ts: the one-time link from the banner, or the API token at
 * `/codec/login`) gets through: a page request without it is sent to the sign-in form (and
 * back here afterwards), anything else is answered 401. So listening on a non-loopback address
 * does not open the Temporal UI (which can terminate workflows) to the network. Steward's cookie
 * is never forwarded to the UI server, and the UI's own cookies are kept to `/ui`.
 *
 * Each of the UI's HTML pages gets one script tag, `/console/assets/ui-link.js` (a page is asked
 * for uncompressed, so it can be read): the link from the run on screen back to its page in the
 * operator console (a chat, a change, an objective).
 */
import { request as httpRequest, type IncomingMessage, type OutgoingHttpHeaders } from 'node:http';
import { Readable } from 'node:stream';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';
import { Hono, type Context } from 'hono';
import type { Logger } from 'pino';
import { AuthBackoff, backoffMessage, retryAfterSeconds } from './backoff.js';
import { SIGN_IN_COOKIE, type BrowserSignIn } from './sign-in.js';

export interface TemporalUiProxyDeps {
  /** Where the UI is served here, e.g. `/ui` (the UI server's `--ui-public-path`). */
  basePath: string;
  /** The UI server: `http://127.0.0.1:<ui port>`. */
  upstream: string;
  signIn: BrowserSignIn;
  backoff?: AuthBackoff;
  log?: Logger;
}

/** The tag each UI page gets: the console link (adapters/console/ui-link.js). */
const CONSOLE_LINK_TAG = '<script src="/console/assets/ui-link.js" defer></script>';
/** The largest UI page read to add it (the UI's index is a few KB). */
const UI_PAGE_MAX_BYTES = 2 * 1024 * 1024;

/** Headers that belong to one connection, never forwarded. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'host']);

/** The request's cookies without Steward's sign-in cookie. */
function cookiesWithoutSignIn(header: string | undefined): string | undefined {
  if (!header) return undefined;
  const kept = header
    .split(';')
    .map((p) => p.trim())
    .filter((p) => p && !p.startsWith(`${SIGN_IN_COOKIE}=`));
  return kept.length ? kept.join('; ') : undefined;
}

/** A UI cookie, kept to the UI's path (the UI server sets `Path=/`). */
function scopeCookie(setCookie: string, basePath: string): string {
  return /;\s*path=/i.test(setCookie) ? setCookie.replace(/;\s*path=[^;]*/i, `; Path=${basePath}`) : `${setCookie}; Path=${basePath}`;
}

export function createTemporalUiProxy(deps: TemporalUiProxyDeps): Hono {
  const base = deps.basePath.replace(/\/+$/, '');
  const upstream = new URL(deps.upstream);
  const backoff = deps.backoff ?? new AuthBackoff({ log: deps.log });
  const app = new Hono();

  const handler = async (c: Context): Promise<Response> => {
    const url = new URL(c.req.url);
    const client = backoff.client(c);
    const wait = backoff.waitMs(client);
    if (wait > 0) return c.json({ error: backoffMessage(wait) }, 429, { 'retry-after': String(retryAfterSeconds(wait)) });
    if (!deps.signIn.signedIn(c)) {
      // no failure counted: a cookie cannot be guessed (HMAC), and an expired one is no guess
      const page = (c.req.method === 'GET' || c.req.method === 'HEAD') && /text\/html/i.test(c.req.header('accept') ?? '');
      if (page) return c.redirect(`/codec/login?next=${encodeURIComponent(`${url.pathname}${url.search}`)}`, 303);
      return c.json({ error: `sign in first: open the sign-in link Steward printed, or ${url.origin}/codec/login` }, 401);
    }
    const headers: OutgoingHttpHeaders = {};
    c.req.raw.headers.forEach((value, name) => {
      if (HOP_BY_HOP.has(name) || name === 'cookie' || name === 'authorization') return;
      headers[name] = value;
    });
    const cookie = cookiesWithoutSignIn(c.req.header('cookie'));
    if (cookie) headers.cookie = cookie;
    // a page is read uncompressed, to add the console link to it
    const wantsPage = c.req.method === 'GET' && /text\/html/i.test(c.req.header('accept') ?? '');
    if (wantsPage) headers['accept-encoding'] = 'identity';
    headers.host = upstream.host;
    const body = c.req.method === 'GET' || c.req.method === 'HEAD' ? null : c.req.raw.body;

    let upstreamRes: IncomingMessage;
    try {
      upstreamRes = await new Promise<IncomingMessage>((resolve, reject) => {
        const req = httpRequest(
          { protocol: upstream.protocol, hostname: upstream.hostname, port: upstream.port, method: c.req.method, path: `${url.pathname}${url.search}`, headers, signal: c.req.raw.signal },
          resolve,
        );
        req.setTimeout(60_000, () => req.destroy(new Error('the Temporal UI server did not answer within 60 s')));
        req.on('error', reject);
        if (body) Readable.fromWeb(body as NodeReadableStream<Uint8Array>).on('error', (err) => req.destroy(err)).pipe(req);
        else req.end();
      });
    } catch (err) {
      // (when the browser went away meanwhile, nobody reads this answer)
      if (!c.req.raw.signal.aborted) deps.log?.warn({ err: (err as Error).message, path: url.pathname }, 'the embedded Temporal UI did not answer');
      return c.json({ error: `the embedded Temporal UI is not answering (${(err as Error).message})` }, 502);
    }

    const out = new Headers();
    for (const [name, value] of Object.entries(upstreamRes.headers)) {
      if (value === undefined || HOP_BY_HOP.has(name)) continue;
      if (name === 'set-cookie') {
        for (const v of Array.isArray(value) ? value : [value]) out.append('set-cookie', scopeCookie(v, base));
      } else if (name === 'location' && typeof value === 'string') {
        // a redirect to the UI server's own origin stays on this one
        out.set('location', value.startsWith(upstream.origin) ? value.slice(upstream.origin.length) || '/' : value);
      } else {
        out.set(name, Array.isArray(value) ? value.join(', ') : value);
      }
    }
    const status = upstreamRes.statusCode ?? 502;
    const empty = c.req.method === 'HEAD' || status === 204 || status === 304;
    if (empty) {
      upstreamRes.resume();
      return new Response(null, { status, headers: out });
    }
    const html = wantsPage && status === 200 && /^text\/html/i.test(String(upstreamRes.headers['content-type'] ?? '')) && !upstreamRes.headers['content-encoding'];
    if (html) {
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of upstreamRes) {
        size += (chunk as Buffer).length;
        if (size > UI_PAGE_MAX_BYTES) break;
        chunks.push(chunk as Buffer);
      }
      if (size <= UI_PAGE_MAX_BYTES) {
        const page = Buffer.concat(chunks).toString('utf8');
        const at = page.search(/<\/head>/i);
        const withLink = at >= 0 ? `${page.slice(0, at)}${CONSOLE_LINK_TAG}${page.slice(at)}` : page;
        out.delete('content-length');
        return new Response(withLink, { status, headers: out });
      }
      upstreamRes.destroy();
      return c.json({ error: 'the Temporal UI page is larger than this proxy reads' }, 502);
    }
    return new Response(Readable.toWeb(upstreamRes) as ReadableStream<Uint8Array>, { status, headers: out });
  };

  app.all(base, handler);
  app.all(`${base}/*`, handler);
  return app;
}
