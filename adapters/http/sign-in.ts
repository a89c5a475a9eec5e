/**
 * How a browser signs in to Steward: for the codec endpoint (so the Temporal UI can decode
 * payloads) and for the Temporal UI that `steward start` serves under its own origin (`/ui`).
 *
 * - The sign-in is an HttpOnly cookie (`steward_codec`, path `/`, SameSite=Lax, 12 hours): its
 *   expiry and an HMAC of it keyed by the API token, so a new token voids every cookie and
 *   nothing secret is in the browser.
 * - A browser gets it by posting the API token to `/codec/login`, or by opening a one-time
 *   sign-in link (`/codec/login/<token>`): a random token of 32 bytes, kept only as its SHA-256,
 *   redeemable once, within an hour of being issued. `steward start` prints one with its banner
 *   and `steward ui` asks the running API for another (`POST /codec/links`, bearer token).
 *
 * Links live in the memory of the process that issued them: a restart voids them (the banner of
 * the new process prints a new one).
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Context } from 'hono';
import { getCookie, setCookie } from 'hono/cookie';

export const SIGN_IN_COOKIE = 'steward_codec';
/** How long a sign-in lasts in a browser. */
export const SIGN_IN_TTL_SECONDS = 12 * 60 * 60;
/** How long a one-time sign-in link may wait to be opened. */
export const SIGN_IN_LINK_TTL_MS = 60 * 60 * 1000;
/** Links waiting at once; the oldest are dropped beyond this. */
const MAX_PENDING_LINKS = 200;
/** A link token: 32 random bytes, base64url. */
export const LINK_TOKEN = /^[A-Za-z0-9_-]{43}$/;

/** Constant-time equality of two secrets (the API token, shell tokens, cookie MACs). */
export function sameSecret(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** `Authorization: Bearer <token>` carries `token` (constant-time). */
export function bearerMatches(header: string | undefined, token: string): boolean {
  const presented = /^Bearer\s+(.+)$/i.exec(header ?? '')?.[1]?.trim();
  return presented ? sameSecret(presented, token) : false;
}

const digest = (token: string) => createHash('sha256').update(token).digest('hex');

export interface BrowserSignInOptions {
  /** The operator API token: keys the cookie's HMAC. */
  apiToken: string;
  now?: () => number;
  /** Default SIGN_IN_LINK_TTL_MS. */
  linkTtlMs?: number;
}

export class BrowserSignIn {
  private readonly now: () => number;
  readonly linkTtlMs: number;
  /** sha256(token) -> when the link expires (ms). */
  private readonly links = new Map<string, number>();

  constructor(private readonly opts: BrowserSignInOptions) {
    this.now = opts.now ?? (() => Date.now());
    this.linkTtlMs = opts.linkTtlMs ?? SIGN_IN_LINK_TTL_MS;
  }

  private mac(expires: number): string {
    return createHmac('sha256', this.opts.apiToken).update(`steward-codec-cookie/v1\n${expires}`).digest('base64url');
  }

  /** A fresh cookie value: `v1.<expiry seconds>.<hmac>`. */
  cookieValue(): string {
    const expires = Math.floor(this.now() / 1000) + SIGN_IN_TTL_SECONDS;
    return `v1.${expires}.${this.mac(expires)}`;
  }

  cookieValid(value: string | undefined): boolean {
    const m = /^v1\.(\d{1,12})\.([A-Za-z0-9_-]{43})$/.exec(value ?? '');
    if (!m) return false;
    const expires = Number(m[1]);
    return expires > this.now() / 1000 && sameSecret(m[2]!, this.mac(expires));
  }

  /** The request carries a valid sign-in cookie. */
  signedIn(c: Context): boolean {
    return this.cookieValid(getCookie(c, SIGN_IN_COOKIE));
  }

  /** The request carries a sign-in cookie at all (valid or not). */
  hasCookie(c: Context): boolean {
    return getCookie(c, SIGN_IN_COOKIE) !== undefined;
  }

  /** Sign the requesting browser in (sets the cookie on the response). */
  setCookie(c: Context): void {
    const https = new URL(c.req.url).protocol === 'https:' || c.req.header('x-forwarded-proto') === 'https';
    setCookie(c, SIGN_IN_COOKIE, this.cookieValue(), { httpOnly: true, sameSite: 'Lax', path: '/', maxAge: SIGN_IN_TTL_SECONDS, secure: https });
  }

  /** A new one-time link token, redeemable once until `expiresAt`. */
  issueLink(): { token: string; expiresAt: Date } {
    this.prune();
    while (this.links.size >= MAX_PENDING_LINKS) {
      const oldest = this.links.keys().next().value;
      if (oldest === undefined) break;
      this.links.delete(oldest);
    }
    const token = randomBytes(32).toString('base64url');
    const expiresAt = this.now() + this.linkTtlMs;
    this.links.set(digest(token), expiresAt);
    return { token, expiresAt: new Date(expiresAt) };
  }

  /** Redeem a link token: true once for an issued, unexpired token, false ever after. */
  redeem(token: string): boolean {
    if (!LINK_TOKEN.test(token)) return false;
    const key = digest(token);
    const expiresAt = this.links.get(key);
    if (expiresAt === undefined) return false;
    this.links.delete(key);
    return expiresAt > this.now();
  }

  private prune(): void {
    const now = this.now();
    for (const [key, expiresAt] of this.links) if (expiresAt <= now) this.links.delete(key);
  }
}
