/**
 * Authentication's records: what the HTTP adapters' back-off on wrong credentials
 * (adapters/http/backoff.ts) writes when an address first has to wait. The adapter decides who
 * waits; this writes the `auth.backoff` receipt of the episode.
 */
import type { Db } from '../domain/db.js';
import { writeReceipt } from '../domain/receipts.js';

/** The episode the receipt records (adapters/http/backoff.ts `BackoffEngaged`). */
export interface AuthBackoffEpisode {
  address: string;
  surface: string;
  failures: number;
  retryAfterSeconds: number;
}

/** One `auth.backoff` receipt for an address that now has to wait. */
export async function recordAuthBackoff(db: Db, e: AuthBackoffEpisode): Promise<void> {
  await writeReceipt(db, { kind: 'auth.backoff', actor: e.address, data: { ...e } });
}

/** A browser signed in (the /ui and console sign-in): by a one-time link or the token form, from an address. */
export interface SignInRecord {
  address: string;
  via: 'link' | 'token';
  /** Where the browser went on to (a /ui or /console path), when it asked. */
  next?: string;
}

/** One `auth.sign-in` receipt for a browser sign-in. */
export async function recordSignIn(db: Db, e: SignInRecord): Promise<void> {
  await writeReceipt(db, { kind: 'auth.sign-in', actor: e.address, data: { ...e } });
}
