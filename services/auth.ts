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
