/**
 * The codec endpoint (Temporal's remote codec protocol): `POST /codec/encode` and
 * `POST /codec/decode` take `{"payloads":[{"metadata":{"k":"<base64>"},"data":"<base64>"}]}`
 * (the proto3 JSON of Payloads) and answer the same shape, run through Steward's payload
 * codec, so the Temporal Web UI and `temporal --codec-endpoint` show decrypted payloads.
 *
 * Authentication: `Authorization: Bearer <operator API token>` (the CLI's `--codec-auth`), or
 * the browser sign-in cookie (sign-in.ts), for a browser whose UI has no access token to pass:
 *  - `GET /codec/login` is a form; posting the API token to it sets the cookie;
 *  - `GET /codec/login/<token>` redeems a one-time sign-in link (the banner of `steward start`
 *    prints one; `POST /codec/links` with the bearer token issues another, for `steward ui`);
 *  - when Steward serves the embedded Temporal UI itself (`uiPath`, e.g. `/ui`), a sign-in sends
 *    the browser on to the UI (or to `next`, a path under it); the UI and this endpoint share
 *    the origin, so the cookie goes with the UI's decode calls and nothing needs setting in it.
 * CORS: only the configured origins (a Temporal UI elsewhere) get CORS headers, with credentials.
 * Wrong credentials (a wrong token at sign-in, a wrong or used sign-in link, a wrong bearer
 * token or cookie) count towards the back-off of the client's address (backoff.ts): past the
 * threshold it is answered 429 with Retry-After, except the operator's correct credential from
 * loopback.
 */
import type { Payload, PayloadCodec } from '@temporalio/common';
import { Hono, type Context } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import type { Logger } from 'pino';
import { z } from 'zod';
import { AuthBackoff, backoffMessage, retryAfterSeconds } from './backoff.js';
import type { Db } from '../../domain/db.js';
import { recordSignIn } from '../../services/auth.js';
import { bearerMatches, BrowserSignIn, LINK_TOKEN, sameSecret, SIGN_IN_TTL_SECONDS } from './sign-in.js';

/** Largest encode/decode request body (bytes). */
export const CODEC_MAX_BODY_BYTES = 16 * 1024 * 1024;
const ALLOWED_HEADERS = 'content-type, authorization, x-namespace';

export interface CodecRoutesDeps {
  codec: PayloadCodec;
  /** The operator API token: the bearer token, and what the login form checks. */
  apiToken: string;
  /** Browser origins allowed to call the endpoint with credentials (the Temporal UI's). */
  corsOrigins: string[];
  /** Where sign-ins are receipted (`auth.sign-in`); none without it. */
  db?: Db;
  log?: Logger;
  now?: () => number;
  /** Back-off on wrong credentials per client address (share the HTTP app's); default: one of its own. */
  backoff?: AuthBackoff;
  /** Browser sign-ins (share it with the Temporal UI proxy); default: one of its own keyed by apiToken. */
  signIn?: BrowserSignIn;
  /**
   * Where this server serves the embedded Temporal UI (e.g. `/ui`), if it does: a browser that
   * signs in is sent there, and `next` may name a path under it.
   */
  uiPath?: string;
}

const Base64 = z.string().regex(/^[A-Za-z0-9+/_-]*={0,2}$/, 'expected base64');
const PayloadJson = z.looseObject({
  metadata: z.record(z.string(), Base64).nullish(),
  data: Base64.nullish(),
});
const PayloadsBody = z.object({ payloads: z.array(PayloadJson, { error: 'expected payloads: an array of {metadata, data}' }) });
const LoginForm = z.object({
  token: z.string({ error: 'expected a token field' }).trim().min(1, 'expected a token').max(4096, 'token too long'),
  next: z.string().max(2048).optional(),
});

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

const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);

function page(title: string, body: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer"><title>${escapeHtml(title)}</title>
<style>body{font-family:system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem;line-height:1.5}
input[type=password]{width:100%;padding:.4rem;font-family:monospace}button{margin-top:.8rem;padding:.4rem 1rem}code{background:#eee;padding:0 .2rem}</style>
</head><body>${body}</body></html>`;
}

/** Headers of the sign-in pages: never cached, never sent on as a referrer. */
const NO_STORE = { 'cache-control': 'no-store', 'referrer-policy': 'no-referrer' };

/** What the codec routes share: their deps, the back-off, the browser sign-ins and where the embedded UI is served. */
interface CodecRouteContext {
  deps: CodecRoutesDeps;
  backoff: AuthBackoff;
  signIn: BrowserSignIn;
  /** The embedded UI's path without a trailing slash, when this server serves it. */
  uiPath: string | undefined;
}

/** Whether the request carries the operator's bearer token. */
function bearerValid(ctx: CodecRouteContext, c: Context): boolean {
  return bearerMatches(c.req.header('authorization'), ctx.deps.apiToken);
}

/** How the request is authenticated: the bearer token, the sign-in cookie, or not at all. */
function authenticated(ctx: CodecRouteContext, c: Context): 'bearer' | 'cookie' | undefined {
  return bearerValid(ctx, c) ? 'bearer' : ctx.signIn.signedIn(c) ? 'cookie' : undefined;
}

/** Where a signed-in browser goes next: `next` when it is a path under the UI, else the UI; undefined without a UI. */
function nextPath(uiPath: string | undefined, next: string | undefined): string | undefined {
  const safe = next !== undefined && next.length <= 2048 && !/[\\\s]|%2e/i.test(next) && !next.includes('/..');
  if (safe && (next === '/console' || next.startsWith('/console/') || next.startsWith('/console?'))) return next; // the operator console
  if (!uiPath) return undefined;
  if (next !== undefined && next.length <= 2048 && (next === uiPath || next.startsWith(`${uiPath}/`) || next.startsWith(`${uiPath}?`)) && !/[\\\s]|%2e/i.test(next) && !next.includes('/..')) {
    return next;
  }
  return `${uiPath}/`;
}

/** The page of an address that must wait (429 with Retry-After). */
function tooManyTries(c: Context, wait: number): Response {
  return c.html(page('Too many tries', `<h1>Too many tries</h1><p>${escapeHtml(backoffMessage(wait))}.</p>`), 429, { 'retry-after': String(retryAfterSeconds(wait)), ...NO_STORE });
}

/** The sign-in form's HTML (with `next` carried along, and a notice above it). */
function loginForm(uiPath: string | undefined, next: string | undefined, notice = ''): string {
  return `<h1>Steward sign-in</h1>${notice}
<p>Sign in with the operator API token so this browser may ${uiPath ? 'open the Temporal UI and ' : ''}decode payloads (for ${SIGN_IN_TTL_SECONDS / 3600} hours).</p>
<form method="post" action="/codec/login"><label for="token">API token</label><br>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus><br>
${next !== undefined ? `<input type="hidden" name="next" value="${escapeHtml(next)}">` : ''}<button type="submit">Sign in</button></form>
<p>The token is in the data directory (<code>.data/api-token</code>) or <code>STEWARD_API_TOKEN</code>; <code>./steward ui</code> prints a one-time sign-in link instead.</p>`;
}

/** The answer to a browser that has just signed in: on to the UI, or a page saying what to set in a UI elsewhere. */
async function signedIn(ctx: CodecRouteContext, c: Context, next: string | undefined, via: 'link' | 'token'): Promise<Response> {
  ctx.signIn.setCookie(c);
  ctx.deps.log?.info('codec: a browser signed in');
  const to = nextPath(ctx.uiPath, next);
  if (ctx.deps.db) {
    await recordSignIn(ctx.deps.db, { address: ctx.backoff.client(c).address, via, ...(to ? { next: to } : {}) }).catch((err: unknown) => ctx.deps.log?.warn({ err }, 'codec: the sign-in receipt was not written'));
  }
  if (to !== undefined) return c.redirect(to, 303);
  const endpoint = `${new URL(c.req.url).origin}/codec`;
  return c.html(
    page(
      'Signed in',
      `<h1 id="signed-in">Signed in</h1>
<p>This browser may now decode payloads for the next ${SIGN_IN_TTL_SECONDS / 3600} hours.</p>
<p>In the Temporal UI, open the Codec Server settings, set the endpoint to <code>${escapeHtml(endpoint)}</code> and turn on
<em>Include cross-origin credentials</em> (the <code>temporalio/ui</code> image: <code>TEMPORAL_CODEC_INCLUDE_CREDENTIALS=true</code>).</p>`,
    ),
    200,
    NO_STORE,
  );
}

/** CORS on /codec/*: the allowed origins only, with credentials; everyone else gets no CORS headers. */
function addCors(app: Hono, origins: Set<string>): void {
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
}

/** The browser sign-in: the form (`GET /codec/login`) and posting the API token to it (`POST /codec/login`). */
function addLoginForm(app: Hono, ctx: CodecRouteContext): void {
  const { deps, backoff, uiPath } = ctx;
  app.get('/codec/login', (c) => c.html(page('Steward sign-in', loginForm(uiPath, c.req.query('next'))), 200, NO_STORE));

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
      return tooManyTries(c, wait);
    }
    if (!right) {
      backoff.failure(client, 'codec');
      deps.log?.warn('codec: sign-in with a wrong token');
      return c.html(page('Wrong token', '<h1>Wrong token</h1><p>That is not the operator API token. <a href="/codec/login">Try again</a>.</p>'), 401, NO_STORE);
    }
    backoff.success(client);
    return signedIn(ctx, c, form.data.next, 'token');
  });
}

/** One-time sign-in links: redeeming one (`GET /codec/login/<token>`) and issuing one to the operator (`POST /codec/links`, `steward ui`). */
function addSignInLinks(app: Hono, ctx: CodecRouteContext): void {
  const { deps, backoff, signIn, uiPath } = ctx;
  // A one-time sign-in link: redeemed once, then it is a wrong credential like any other.
  app.get('/codec/login/:token', async (c) => {
    // a HEAD (a link checker, a preview) never uses the link up
    if (c.req.method === 'HEAD') return c.body(null, 200, NO_STORE);
    const client = backoff.client(c);
    const wait = backoff.waitMs(client);
    if (wait > 0) {
      return tooManyTries(c, wait);
    }
    const token = c.req.param('token');
    if (!signIn.redeem(token)) {
      if (LINK_TOKEN.test(token)) deps.log?.warn('codec: a sign-in link that was used already, expired or never issued');
      backoff.failure(client, 'codec');
      const notice = `<p id="link-refused"><strong>This sign-in link was used already or has expired</strong> (a link works once, within ${Math.round(signIn.linkTtlMs / 60_000)} minutes of being printed). Sign in with the token below, or print a new link with <code>./steward ui</code>.</p>`;
      return c.html(page('Sign-in link refused', loginForm(uiPath, c.req.query('next'), notice)), 401, NO_STORE);
    }
    backoff.success(client);
    return signedIn(ctx, c, c.req.query('next'), 'link');
  });

  // A new one-time sign-in link for the operator (bearer token): `steward ui`.
  app.post('/codec/links', (c) => {
    const client = backoff.client(c);
    const right = bearerValid(ctx, c);
    const wait = backoff.waitMs(client, right);
    if (wait > 0) return c.json({ error: backoffMessage(wait) }, 429, { 'retry-after': String(retryAfterSeconds(wait)) });
    if (!right) {
      if (c.req.header('authorization')) backoff.failure(client, 'codec');
      return c.json({ error: 'missing or wrong bearer token' }, 401, { 'www-authenticate': 'Bearer' });
    }
    backoff.success(client);
    const link = signIn.issueLink();
    const origin = new URL(c.req.url).origin;
    return c.json({ url: `${origin}/codec/login/${link.token}`, expiresAt: link.expiresAt.toISOString(), ...(uiPath ? { ui: `${origin}${uiPath}/` } : {}) }, 201, { 'cache-control': 'no-store' });
  });
}

/** `POST /codec/encode` or `POST /codec/decode`: payloads through the codec, for the bearer token or a signed-in browser. */
function addConvertRoute(app: Hono, ctx: CodecRouteContext, direction: 'encode' | 'decode'): void {
  const { deps, backoff, signIn } = ctx;
  app.post(`/codec/${direction}`, bodyLimit({ maxSize: CODEC_MAX_BODY_BYTES, onError: (c) => c.json({ error: `request body is larger than ${CODEC_MAX_BODY_BYTES} bytes` }, 413) }), async (c) => {
    const client = backoff.client(c);
    const by = authenticated(ctx, c);
    const wait = backoff.waitMs(client, by !== undefined);
    if (wait > 0) return c.json({ error: backoffMessage(wait) }, 429, { 'retry-after': String(retryAfterSeconds(wait)) });
    if (!by) {
      // no credential at all (a browser not signed in yet) is not a guess
      if (c.req.header('authorization') || signIn.hasCookie(c)) backoff.failure(client, 'codec');
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
}

export function createCodecRoutes(deps: CodecRoutesDeps): Hono {
  const backoff = deps.backoff ?? new AuthBackoff({ log: deps.log });
  const signIn = deps.signIn ?? new BrowserSignIn({ apiToken: deps.apiToken, ...(deps.now ? { now: deps.now } : {}) });
  const origins = new Set(deps.corsOrigins.map((o) => o.replace(/\/$/, '')));
  const uiPath = deps.uiPath?.replace(/\/+$/, '');
  const app = new Hono();
  const ctx: CodecRouteContext = { deps, backoff, signIn, uiPath };
  addCors(app, origins);
  addLoginForm(app, ctx);
  addSignInLinks(app, ctx);
  addConvertRoute(app, ctx, 'encode');
  addConvertRoute(app, ctx, 'decode');
  return app;
}
