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
 *
 * A person's own sign-in, for the operator console only (`/console`, docs/console.md): the
 * `/console` chat command (in a direct message) gives a paired person a one-time link
 * `/console/login/<token>`. The token is signed, not stored (`p1.<identity>.<expiry>.<nonce>.<mac>`,
 * keyed by the API token), so any API process can check it; it is used up by the `auth.sign-in`
 * receipt its nonce keys (services/auth.ts), which the database writes once. Redeemed, it sets the
 * same cookie with the person in it (`v2.<expiry>.<identity>.<mac>`). `cookieValid` and
 * `signedIn`, which the Temporal UI, the codec endpoint and the API's event stream check, accept
 * only the operator's cookie (`v1`); the console reads the person's with `personOf` and looks
 * their role up on every request, so a role changed or an identity removed takes effect at once.
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
/** A person's console link token: `p1.<identity, base64url>.<expiry seconds>.<nonce>.<mac>`. */
export const PERSON_LINK_TOKEN = /^p1\.([A-Za-z0-9_-]{1,200})\.(\d{1,12})\.([A-Za-z0-9_-]{22})\.([A-Za-z0-9_-]{43})$/;
const PERSON_COOKIE = /^v2\.(\d{1,12})\.([A-Za-z0-9_-]{1,200})\.([A-Za-z0-9_-]{43})$/;

/** A person's link, checked: who, and the nonce its one use is recorded by. */
export interface PersonLink {
  identityId: string;
  nonce: string;
  expiresAt: Date;
}

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

  private personMac(kind: 'link' | 'cookie', ...parts: string[]): string {
    return createHmac('sha256', this.opts.apiToken).update([`steward-console-person-${kind}/v1`, ...parts].join('\n')).digest('base64url');
  }

  /** A one-time console link token for a person (checked by `personLink`, used up by its nonce's receipt). */
  issuePersonLink(identityId: string): { token: string; expiresAt: Date } {
    const id = Buffer.from(identityId).toString('base64url');
    const expires = Math.floor((this.now() + this.linkTtlMs) / 1000);
    const nonce = randomBytes(16).toString('base64url');
    return { token: `p1.${id}.${expires}.${nonce}.${this.personMac('link', id, String(expires), nonce)}`, expiresAt: new Date(expires * 1000) };
  }

  /** A person's link token, if it is one this API token signed and it has not expired (its one use is checked by the caller). */
  personLink(token: string): PersonLink | undefined {
    const m = PERSON_LINK_TOKEN.exec(token);
    if (!m) return undefined;
    const [, id, exp, nonce, mac] = m as unknown as [string, string, string, string, string];
    if (!sameSecret(mac, this.personMac('link', id, exp, nonce))) return undefined;
    if (Number(exp) <= this.now() / 1000) return undefined;
    return { identityId: Buffer.from(id, 'base64url').toString(), nonce, expiresAt: new Date(Number(exp) * 1000) };
  }

  /** The identity a person's cookie value names, when it is valid (never for the operator's). */
  personOf(value: string | undefined): string | undefined {
    const m = PERSON_COOKIE.exec(value ?? '');
    if (!m) return undefined;
    const [, exp, id, mac] = m as unknown as [string, string, string, string];
    if (Number(exp) <= this.now() / 1000 || !sameSecret(mac, this.personMac('cookie', exp, id))) return undefined;
    return Buffer.from(id, 'base64url').toString();
  }

  /** The person signed in to this request (their identity id), if any. */
  personOfRequest(c: Context): string | undefined {
    return this.personOf(getCookie(c, SIGN_IN_COOKIE));
  }

  /** Sign the requesting browser in as a person (the console only). */
  setPersonCookie(c: Context, identityId: string): void {
    const expires = Math.floor(this.now() / 1000) + SIGN_IN_TTL_SECONDS;
    const id = Buffer.from(identityId).toString('base64url');
    const https = new URL(c.req.url).protocol === 'https:' || c.req.header('x-forwarded-proto') === 'https';
    setCookie(c, SIGN_IN_COOKIE, `v2.${expires}.${id}.${this.personMac('cookie', String(expires), id)}`, { httpOnly: true, sameSite: 'Lax', path: '/', maxAge: SIGN_IN_TTL_SECONDS, secure: https });
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
