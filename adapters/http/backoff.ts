/**
 * Back-off on wrong credentials, per client address, for every surface that takes a secret:
 * the API bearer token (`/api/v1`, `/metrics`), the codec endpoint and its sign-in, OpenHarness
 * shell tokens and webhook signatures (`/hooks/objectives/{name}`). One limiter is shared by
 * all of them, so an address guessing on one surface waits on every surface.
 *
 * After `after` wrong credentials (5) an address must wait before it may present another:
 * 1 s, then 2 s, 4 s, ... for each further wrong credential, up to `maxDelayMs` (15 min).
 * While it waits every request that needs a credential is answered 429 with `Retry-After`,
 * a correct credential too (otherwise a guesser would simply keep guessing); requests refused
 * that way are not checked and do not lengthen the wait. A request without any credential is
 * not a guess and is not counted. An address is forgotten `windowMs` (15 min) after its last
 * wrong credential or the end of its wait, whichever is later, and at once when it presents
 * the operator's credential (the API token, or the codec cookie signed with it) while not
 * waiting. Shell tokens and webhook signatures do not clear it: holding one credential does
 * not buy more guesses at another. The first wait of an episode writes one `auth.backoff`
 * receipt and a warning; later waits of the same episode write nothing.
 *
 * Loopback: the operator's CLI talks to 127.0.0.1, and its correct API token (on any surface)
 * is never refused, even while loopback waits; so a local process guessing tokens cannot lock
 * the operator out. Loopback is otherwise an address like any other: its wrong credentials
 * are counted, receipted and refused with 429, and shell tokens and webhook signatures from it
 * wait like any others'. The API token itself is at least 16 characters (generated ones are
 * long and random), which is what stands against a local guesser of that one token.
 *
 * The client address is the socket's peer address. `X-Forwarded-For` is believed only when the
 * peer is one of `trustedProxies` (STEWARD_TRUSTED_PROXIES): then the client is the rightmost
 * address in it that is not a trusted proxy. IPv6 clients are counted by their /64 prefix (one
 * host usually holds a whole /64); IPv4-mapped IPv6 addresses count as the IPv4 address. At
 * most `maxEntries` addresses are remembered; the oldest is forgotten first.
 */
import { BlockList, isIP } from 'node:net';
import { getConnInfo } from '@hono/node-server/conninfo';
import type { Context } from 'hono';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { Db } from '../../domain/db.js';
import { recordAuthBackoff } from '../../services/auth.js';

export type AuthSurface = 'api' | 'codec' | 'console' | 'openharness' | 'webhook';

export const BackoffSettingsSchema = z.object({
  /** Wrong credentials from one address before it must wait. */
  after: z.number().int().min(1).default(5),
  /** The first wait; each further wrong credential doubles it. */
  baseDelayMs: z.number().int().min(1).default(1000),
  /** The longest wait. */
  maxDelayMs: z.number().int().min(1).default(15 * 60_000),
  /** How long an address is remembered after its last wrong credential or the end of its wait. */
  windowMs: z.number().int().min(1).default(15 * 60_000),
  /** Addresses remembered at most (the least recently failing is forgotten first). */
  maxEntries: z.number().int().min(1).default(10_000),
  /** Peers whose X-Forwarded-For is believed: addresses or CIDR ranges (`10.0.0.0/8`). */
  trustedProxies: z.array(z.string().refine((v) => parseCidr(v) !== undefined, 'expected an IP address or a CIDR range')).default([]),
});
export type BackoffSettings = z.output<typeof BackoffSettingsSchema>;

/** Emitted once per episode, when an address first has to wait. */
export interface BackoffEngaged {
  address: string;
  surface: AuthSurface;
  failures: number;
  retryAfterSeconds: number;
}

export interface AuthBackoffOptions extends z.input<typeof BackoffSettingsSchema> {
  /** Where the `auth.backoff` receipt is written (none without a database). */
  db?: Db;
  log?: Logger;
  now?: () => number;
}

/** Who is asking: the address counted, and whether it is the machine itself. */
export interface Client {
  /** The key the limiter counts under: an IPv4 address, an IPv6 /64 prefix, or `unknown`. */
  address: string;
  loopback: boolean;
}

interface Entry {
  failures: number;
  lastFailureAt: number;
  lockedUntil: number;
  /** The `auth.backoff` receipt of this episode was written. */
  engaged: boolean;
}

/** An IP address or CIDR range as BlockList wants it; undefined when it is neither. */
function parseCidr(text: string): { address: string; prefix?: number; type: 'ipv4' | 'ipv6' } | undefined {
  const [ip = '', bits, extra] = text.trim().split('/');
  const family = isIP(ip);
  if (!family || extra !== undefined) return undefined;
  const type = family === 4 ? 'ipv4' : 'ipv6';
  if (bits === undefined) return { address: ip, type };
  if (!/^\d{1,3}$/.test(bits) || Number(bits) > (family === 4 ? 32 : 128)) return undefined;
  return { address: ip, prefix: Number(bits), type };
}

/** The eight 16-bit groups of an IPv6 address (a trailing dotted IPv4 part is two groups). */
function ipv6Groups(address: string): number[] {
  let text = address;
  const tail = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (tail) {
    const [a, b, c, d] = tail.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, tail.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head = '', rest] = text.split('::');
  const left = head ? head.split(':') : [];
  const right = rest ? rest.split(':') : [];
  const zeros = rest === undefined ? [] : Array<string>(8 - left.length - right.length).fill('0');
  return [...left, ...zeros, ...right].map((g) => parseInt(g, 16));
}

/** An IP address without zone, brackets or port, IPv4-mapped IPv6 as IPv4; undefined when it is not one. */
export function normalizeIp(raw: string): string | undefined {
  let a = raw.trim().toLowerCase();
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(a);
  if (bracketed) a = bracketed[1]!;
  else if (/^\d+\.\d+\.\d+\.\d+:\d+$/.test(a)) a = a.slice(0, a.lastIndexOf(':'));
  const zone = a.indexOf('%');
  if (zone >= 0) a = a.slice(0, zone);
  const family = isIP(a);
  if (family === 4) return a;
  if (family !== 6) return undefined;
  const g = ipv6Groups(a);
  if (g.slice(0, 5).every((x) => x === 0) && g[5] === 0xffff) return `${g[6]! >> 8}.${g[6]! & 255}.${g[7]! >> 8}.${g[7]! & 255}`;
  return g.map((x) => x.toString(16)).join(':');
}

function isLoopback(ip: string): boolean {
  if (isIP(ip) === 4) return ip.startsWith('127.');
  return ip === '0:0:0:0:0:0:0:1';
}

/** The key an address is counted under: IPv4 as it is, IPv6 by its /64 prefix. */
function keyOf(ip: string): string {
  return isIP(ip) === 6 ? `${ip.split(':').slice(0, 4).join(':')}::/64` : ip;
}

/** The socket's peer address; undefined for a request that did not come over a socket (app.request in-process). */
function peerAddress(c: Context): string | undefined {
  try {
    return getConnInfo(c).remote.address;
  } catch {
    return undefined;
  }
}

/** Whole seconds for `Retry-After` (at least 1). */
export function retryAfterSeconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}

export class AuthBackoff {
  readonly settings: BackoffSettings;
  private readonly entries = new Map<string, Entry>();
  private readonly trusted = new BlockList();
  private readonly now: () => number;

  constructor(private readonly opts: AuthBackoffOptions = {}) {
    this.settings = BackoffSettingsSchema.parse(opts); // only the settings (an object schema drops the rest)
    this.now = opts.now ?? (() => Date.now());
    for (const entry of this.settings.trustedProxies) {
      const r = parseCidr(entry)!;
      const ip = normalizeIp(r.address) ?? r.address;
      const type = isIP(ip) === 4 ? 'ipv4' : 'ipv6';
      if (r.prefix === undefined) this.trusted.addAddress(ip, type);
      else this.trusted.addSubnet(ip, type === r.type ? r.prefix : Math.max(0, r.prefix - 96), type);
    }
  }

  private isTrusted(ip: string): boolean {
    return this.trusted.check(ip, isIP(ip) === 4 ? 'ipv4' : 'ipv6');
  }

  /** The client of a request: the peer address, or the forwarded one when the peer is a trusted proxy. */
  client(c: Context): Client {
    const raw = peerAddress(c);
    let ip = raw === undefined ? undefined : normalizeIp(raw);
    if (ip !== undefined && this.isTrusted(ip)) {
      const hops = (c.req.header('x-forwarded-for') ?? '').split(',').map((h) => h.trim()).filter(Boolean);
      for (let i = hops.length - 1; i >= 0; i--) {
        const hop = normalizeIp(hops[i]!);
        if (hop === undefined) break; // not an address: believe nothing further left
        ip = hop;
        if (!this.isTrusted(hop)) break;
      }
    }
    if (ip === undefined) return { address: 'unknown', loopback: false };
    return { address: keyOf(ip), loopback: isLoopback(ip) };
  }

  private entry(address: string): Entry | undefined {
    const e = this.entries.get(address);
    if (e && this.now() >= Math.max(e.lastFailureAt, e.lockedUntil) + this.settings.windowMs) {
      this.entries.delete(address);
      return undefined;
    }
    return e;
  }

  /**
   * How long (ms) the client must still wait before presenting a credential; 0 when it may.
   * `operatorOnLoopback`: the request carries the operator's correct credential from the
   * machine itself, which never waits.
   */
  waitMs(client: Client, operatorOnLoopback = false): number {
    if (operatorOnLoopback && client.loopback) return 0;
    const e = this.entry(client.address);
    return e ? Math.max(0, e.lockedUntil - this.now()) : 0;
  }

  /** A wrong credential from the client: counted, and past the threshold it must wait. */
  failure(client: Client, surface: AuthSurface): void {
    const now = this.now();
    const e = this.entry(client.address) ?? { failures: 0, lastFailureAt: now, lockedUntil: 0, engaged: false };
    e.failures += 1;
    e.lastFailureAt = now;
    const { after, baseDelayMs, maxDelayMs } = this.settings;
    if (e.failures >= after) {
      const delay = Math.min(baseDelayMs * 2 ** Math.min(e.failures - after, 40), maxDelayMs);
      e.lockedUntil = now + delay;
      if (!e.engaged) {
        e.engaged = true;
        this.engaged({ address: client.address, surface, failures: e.failures, retryAfterSeconds: retryAfterSeconds(delay) });
      }
    }
    // most recently failing last: the first key is the one forgotten when the map is full
    this.entries.delete(client.address);
    this.entries.set(client.address, e);
    while (this.entries.size > this.settings.maxEntries) {
      const oldest = this.entries.keys().next().value;
      if (oldest === undefined) break;
      this.entries.delete(oldest);
    }
  }

  /** The operator's credential was accepted from the client: its record is cleared (unless it is waiting). */
  success(client: Client): void {
    const e = this.entry(client.address);
    if (e && e.lockedUntil <= this.now()) this.entries.delete(client.address);
  }

  /** Addresses remembered (for tests and metrics). */
  get size(): number {
    return this.entries.size;
  }

  private engaged(e: BackoffEngaged): void {
    this.opts.log?.warn(e, 'auth: wrong credentials from this address; it must wait before trying again');
    const db = this.opts.db;
    if (!db) return;
    recordAuthBackoff(db, e).catch((err: unknown) =>
      this.opts.log?.error({ err, address: e.address }, 'auth: the auth.backoff receipt could not be written'),
    );
  }
}

/** The message of a 429 for a waiting address. */
export function backoffMessage(waitMs: number): string {
  const s = retryAfterSeconds(waitMs);
  return `too many wrong credentials from this address: try again in ${s} second${s === 1 ? '' : 's'}`;
}
