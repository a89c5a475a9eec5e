/**
 * The codec endpoint (Temporal's remote codec protocol): `POST /codec/encode` and
 * `POST /codec/decode` take `{"payloads":[{"metadata":{"k":"<base64>"},"data":"<base64>"}]}`
 * (the proto3 JSON of Payloads) and answer the same shape, run through Steward's payload
 * codec, so the Temporal Web UI and `temporal --codec-endpoint` show decrypted payloads.
 *
 * Authentication: `Authorization: Bearer <operator API token>` (the CLI's `--codec-auth`), or
 * the `steward_codec` cookie that `POST /codec/login` sets after checking the token, for a
 * browser whose UI has no access token to pass (the UI must then send credentials).
 * CORS: only the configured origins (the Temporal UI's) get CORS headers, with credentials.
 * Wrong credentials (a wrong token at sign-in, a wrong bearer token or cookie) count towards
 * the back-off of the client's address (backoff.ts): past the threshold it is answered 429
 * with Retry-After, except the operator's correct credential from loopback.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { Payload, PayloadCodec } from '@temporalio/common';
import { Hono, type Context } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { getCookie, setCookie } from 'hono/cookie';
import type { Logger } from 'pino';
import { z } from 'zod';
import { AuthBackoff, backoffMessage, retryAfterSeconds } from './backoff.js';

export const CODEC_COOKIE = 'steward_codec';
/** Largest encode/decode request body (bytes). */
export const CODEC_MAX_BODY_BYTES = 16 * 1024 * 1024;
const COOKIE_TTL_SECONDS = 12 * 60 * 60;
const ALLOWED_HEADERS = 'content-type, authorization, x-namespace';

export interface CodecRoutesDeps {
  codec: PayloadCodec;
  /** The operator API token: the bearer token, and what the login form checks. */
  apiToken: string;
  /** Browser origins allowed to call the endpoint with credentials (the Temporal UI's). */
  corsOrigins: string[];
  log?: Logger;
  now?: () => number;
  /** Back-off on wrong credentials per client address (share the HTTP app's); default: one of its own. */
  backoff?: AuthBackoff;
}

const Base64 = z.string().regex(/^[A-Za-z0-9+/_-]*={0,2}$/, 'expected base64');
const PayloadJson = z.looseObject({
  metadata: z.record(z.string(), Base64).nullish(),
  data: Base64.nullish(),
});
const PayloadsBody = z.object({ payloads: z.array(PayloadJson, { error: 'expected payloads: an array of {metadata, data}' }) });
const LoginForm = z.object({ token: z.string({ error: 'expected a token field' }).trim().min(1, 'expected a token').max(4096, 'token too long') });

const fromB64 = (s: string) => new Uint8Array(Buffer.from(s, s.includes('-') || s.includes('_') ? 'base64url' : 'base64'));
const toB64 = (b: Uint8Array) => Buffer.from(b).toString('base64');

function fromJson(p: z.infer<typeof PayloadJson>): Payload {
  return {
    metadata: Object.fromEntries(Object.entries(p.metadata ?? {}).map(([k, v]) => [k, fromB64(v)])),
    data: fromB64(p.data ?? ''),
  };
}

function toJson(p: Payload): { metadata: Record<string, string>; data: string } {
  return {
    metadata: Object.fromEntries(Object.entries(p.metadata ?? {}).map(([k, v]) => [k, toB64(v)])),
    data: toB64(p.data ?? new Uint8Array()),
  };
}

function sameSecret(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);

function page(title: string, body: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer"><title>${escapeHtml(title)}</title>
<style>body{font-family:system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem;line-height:1.5}
input[type=password]{width:100%;padding:.4rem;font-family:monospace}button{margin-top:.8rem;padding:.4rem 1rem}code{background:#eee;padding:0 .2rem}</style>
</head><body>${body}</body></html>`;
}

export function createCodecRoutes(deps: CodecRoutesDeps): Hono {
  const now = deps.now ?? (() => Date.now());
  const backoff = deps.backoff ?? new AuthBackoff({ log: deps.log });
  const origins = new Set(deps.corsOrigins.map((o) => o.replace(/\/$/, '')));
  const app = new Hono();

  /** The cookie value: its expiry and an HMAC of it keyed by the API token (a new token voids every cookie). */
  const cookieMac = (expires: number) => createHmac('sha256', deps.apiToken).update(`steward-codec-cookie/v1\n${expires}`).digest('base64url');
  const cookieValue = () => {
    const expires = Math.floor(now() / 1000) + COOKIE_TTL_SECONDS;
    return `v1.${expires}.${cookieMac(expires)}`;
  };
  const cookieValid = (value: string | undefined): boolean => {
    const m = /^v1\.(\d{1,12})\.([A-Za-z0-9_-]{43})$/.exec(value ?? '');
    if (!m) return false;
    const expires = Number(m[1]);
    return expires > now() / 1000 && sameSecret(m[2]!, cookieMac(expires));
  };
  const authenticated = (c: Context): 'bearer' | 'cookie' | undefined => {
    const bearer = /^Bearer\s+(.+)$/i.exec(c.req.header('authorization') ?? '')?.[1]?.trim();
    if (bearer !== undefined && sameSecret(bearer, deps.apiToken)) return 'bearer';
    if (cookieValid(getCookie(c, CODEC_COOKIE))) return 'cookie';
    return undefined;
  };
  const isHttps = (c: Context) => new URL(c.req.url).protocol === 'https:' || c.req.header('x-forwarded-proto') === 'https';

  // CORS: the allowed origins only, with credentials; everyone else gets no CORS headers.
  app.use('/codec/*', async (c, next) => {
    const origin = c.req.header('origin');
    const allowed = origin !== undefined && origins.has(origin);
    if (c.req.method === 'OPTIONS') {
      if (!allowed) return c.json({ error: 'this origin may not call the codec endpoint (see STEWARD_CODEC_CORS_ORIGINS)' }, 403, { vary: 'Origin' });
      return c.body(null, 204, {
        'access-control-allow-origin': origin,
        'access-control-allow-credentials': 'true',
        'access-control-allow-methods': 'POST, GET, OPTIONS',
        'access-control-allow-headers': ALLOWED_HEADERS,
        'access-control-max-age': '600',
        ...(c.req.header('access-control-request-private-network') === 'true' ? { 'access-control-allow-private-network': 'true' } : {}),
        vary: 'Origin',
      });
    }
    await next();
    c.res.headers.append('vary', 'Origin');
    if (allowed) {
      c.res.headers.set('access-control-allow-origin', origin);
      c.res.headers.set('access-control-allow-credentials', 'true');
    }
    return undefined;
  });

  app.get('/codec/login', (c) =>
    c.html(
      page(
        'Steward codec sign-in',
        `<h1>Steward codec endpoint</h1>
<p>Sign in with the operator API token so this browser may decode payloads for the Temporal UI.</p>
<form method="post" action="/codec/login"><label for="token">API token</label><br>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus><br>
<button type="submit">Sign in</button></form>`,
      ),
      200,
      { 'cache-control': 'no-store' },
    ),
  );

  app.post('/codec/login', bodyLimit({ maxSize: 16 * 1024, onError: (c) => c.html(page('Too large', '<p>The form is too large.</p>'), 413) }), async (c) => {
    const type = c.req.header('content-type') ?? '';
    if (!/^(application\/x-www-form-urlencoded|multipart\/form-data)\b/i.test(type)) {
      return c.html(page('Not a form', '<p>Expected a form (application/x-www-form-urlencoded) with a <code>token</code> field.</p>'), 415);
    }
    let raw: Record<string, unknown>;
    try {
      raw = await c.req.parseBody();
    } catch {
      return c.html(page('Bad form', '<p>The form could not be read.</p>'), 400);
    }
    const form = LoginForm.safeParse(raw);
    if (!form.success) {
      return c.html(page('Bad form', `<p>${escapeHtml(form.error.issues.map((i) => i.message).join('; '))}. <a href="/codec/login">Try again</a>.</p>`), 400);
    }
    const client = backoff.client(c);
    const right = sameSecret(form.data.token, deps.apiToken);
    const wait = backoff.waitMs(client, right);
    if (wait > 0) {
      return c.html(page('Too many tries', `<h1>Too many tries</h1><p>${escapeHtml(backoffMessage(wait))}.</p>`), 429, { 'retry-after': String(retryAfterSeconds(wait)), 'cache-control': 'no-store' });
    }
    if (!right) {
      backoff.failure(client, 'codec');
      deps.log?.warn('codec: sign-in with a wrong token');
      return c.html(page('Wrong token', '<h1>Wrong token</h1><p>That is not the operator API token. <a href="/codec/login">Try again</a>.</p>'), 401);
    }
    backoff.success(client);
    setCookie(c, CODEC_COOKIE, cookieValue(), { httpOnly: true, sameSite: 'Lax', path: '/codec', maxAge: COOKIE_TTL_SECONDS, secure: isHttps(c) });
    deps.log?.info('codec: a browser signed in');
    const endpoint = `${new URL(c.req.url).origin}/codec`;
    return c.html(
      page(
        'Signed in',
        `<h1 id="signed-in">Signed in</h1>
<p>This browser may now decode payloads for the next ${COOKIE_TTL_SECONDS / 3600} hours.</p>
<p>In the Temporal UI, open the Codec Server settings, set the endpoint to <code>${escapeHtml(endpoint)}</code> and turn on
<em>Include cross-origin credentials</em> (the <code>temporalio/ui</code> image: <code>TEMPORAL_CODEC_INCLUDE_CREDENTIALS=true</code>).</p>`,
      ),
      200,
      { 'cache-control': 'no-store' },
    );
  });

  const convert = (direction: 'encode' | 'decode') =>
    app.post(`/codec/${direction}`, bodyLimit({ maxSize: CODEC_MAX_BODY_BYTES, onError: (c) => c.json({ error: `request body is larger than ${CODEC_MAX_BODY_BYTES} bytes` }, 413) }), async (c) => {
      const client = backoff.client(c);
      const by = authenticated(c);
      const wait = backoff.waitMs(client, by !== undefined);
      if (wait > 0) return c.json({ error: backoffMessage(wait) }, 429, { 'retry-after': String(retryAfterSeconds(wait)) });
      if (!by) {
        // no credential at all (a browser not signed in yet) is not a guess
        if (c.req.header('authorization') || getCookie(c, CODEC_COOKIE) !== undefined) backoff.failure(client, 'codec');
        return c.json({ error: 'missing or wrong credentials: send Authorization: Bearer <API token>, or sign in at /codec/login' }, 401, { 'www-authenticate': 'Bearer' });
      }
      backoff.success(client);
      if (!/^application\/json\b/i.test(c.req.header('content-type') ?? '')) return c.json({ error: 'expected Content-Type: application/json' }, 415);
      let raw: unknown;
      try {
        raw = JSON.parse(await c.req.text());
      } catch {
        return c.json({ error: 'malformed JSON in the request body' }, 400);
      }
      const body = PayloadsBody.safeParse(raw);
      if (!body.success) {
        return c.json({ error: `invalid request: ${body.error.issues.map((i) => `${i.path.join('.') || '(body)'}: ${i.message}`).join('; ')}` }, 400);
      }
      const payloads = body.data.payloads.map(fromJson);
      let out: Payload[];
      try {
        out = direction === 'encode' ? await deps.codec.encode(payloads) : await deps.codec.decode(payloads);
      } catch (err) {
        deps.log?.warn({ direction, error: (err as Error).message }, 'codec: payloads could not be converted');
        return c.json({ error: (err as Error).message }, 422);
      }
      deps.log?.debug({ direction, count: payloads.length, namespace: c.req.header('x-namespace'), by }, 'codec request');
      return c.json({ payloads: out.map(toJson) }, 200, { 'cache-control': 'no-store' });
    });
  convert('encode');
  convert('decode');
  return app;
}
