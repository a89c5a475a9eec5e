/**
 * The console's security mechanism, one for every page: the response headers (a strict
 * Content-Security-Policy and friends) and the CSRF check every state-changing request passes.
 *
 * - CSRF: the token is an HMAC of the session cookie's value keyed by the API token, so it is
 *   bound to the one sign-in, changes with it, and keeps nothing on the server. htmx sends it as
 *   the `X-CSRF-Token` header (`hx-headers` on the page's body), plain forms as the `_csrf`
 *   field. A POST without the session cookie and a matching token (or the bearer token) is
 *   refused with 403 before anything is read or changed.
 * - Headers: `script-src 'self'` with no inline script or style (htmx is configured through its
 *   `htmx-config` meta tag not to inject its indicator style nor evaluate anything),
 *   `connect-src 'self'` (the live updates come from this origin), `frame-ancestors 'none'`.
 */
import { createHmac } from 'node:crypto';
import type { Context, MiddlewareHandler } from 'hono';
import { getCookie } from 'hono/cookie';
import { bearerMatches, sameSecret, SIGN_IN_COOKIE } from '../http/sign-in.js';

export const CSRF_HEADER = 'x-csrf-token';
export const CSRF_FIELD = '_csrf';

export const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "form-action 'self'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
].join('; ');

/** The CSRF token of a session cookie value. */
export function csrfToken(apiToken: string, sessionCookie: string): string {
  return createHmac('sha256', apiToken).update(`steward-console-csrf/v1\n${sessionCookie}`).digest('base64url');
}

/** The CSRF token for the request's own session cookie (empty without one). */
export function csrfTokenOf(c: Context, apiToken: string): string {
  const cookie = getCookie(c, SIGN_IN_COOKIE);
  return cookie ? csrfToken(apiToken, cookie) : '';
}

/** Every console response: the CSP, no sniffing, no referrer, no framing, not cached. */
export function securityHeaders(): MiddlewareHandler {
  return async (c, next) => {
    await next();
    c.header('content-security-policy', CONTENT_SECURITY_POLICY);
    c.header('x-content-type-options', 'nosniff');
    c.header('referrer-policy', 'no-referrer');
    c.header('x-frame-options', 'DENY');
    if (!c.res.headers.has('cache-control')) c.header('cache-control', 'no-store');
  };
}

/**
 * Whether a state-changing request carries its proof: the bearer token, or the session cookie
 * (valid, checked by `cookieValid`) and its CSRF token in the header or the form field.
 */
export async function csrfPasses(c: Context, apiToken: string, cookieValid: (v: string | undefined) => boolean): Promise<boolean> {
  if (bearerMatches(c.req.header('authorization'), apiToken)) return true;
  const cookie = getCookie(c, SIGN_IN_COOKIE);
  if (!cookie || !cookieValid(cookie)) return false;
  const expected = csrfToken(apiToken, cookie);
  const header = c.req.header(CSRF_HEADER);
  if (header) return sameSecret(header, expected);
  const type = c.req.header('content-type') ?? '';
  if (!/^(application\/x-www-form-urlencoded|multipart\/form-data)\b/i.test(type)) return false;
  const body = await c.req.parseBody();
  const field = body[CSRF_FIELD];
  return typeof field === 'string' && sameSecret(field, expected);
}
