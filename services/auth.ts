/**
 * Authentication's records: what the HTTP adapters' back-off on wrong credentials
 * (adapters/http/backoff.ts) writes when an address first has to wait (the adapter decides who
 * waits; this writes the `auth.backoff` receipt of the episode), browser sign-ins, and the
 * console's people (who a signed-in person is now, and the one use of their link).
 */
import { RoleSchema, type Actor } from '../common/roles.js';
import type { Db } from '../domain/db.js';
import { findIdentity } from '../domain/governance.js';
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

/**
 * A person signed in to the operator console: who they are now, looked up on every request
 * (their current role, so a demotion or a removal takes effect at once), and the one use of their
 * one-time link, recorded by the `auth.sign-in` receipt its nonce keys: the database writes that
 * key once, so a link opened twice (or on two API processes) signs in once.
 */
export interface ConsolePersons {
  actorOf(identityId: string): Promise<Actor | undefined>;
  /** Use the link up; false when it was used already. */
  redeem(link: { identityId: string; nonce: string }, address: string, next?: string): Promise<boolean>;
}

export function createConsolePersons(db: Db): ConsolePersons {
  return {
    async actorOf(identityId) {
      const who = await findIdentity(db, identityId);
      if (!who) return undefined;
      const role = RoleSchema.safeParse(who.role);
      return role.success ? { kind: 'person', id: who.id, name: who.name, role: role.data } : undefined;
    },
    redeem: (link, address, next) =>
      writeReceipt(db, { key: `auth.sign-in:console-link:${link.nonce}`, kind: 'auth.sign-in', actor: link.identityId, data: { address, via: 'person-link', ...(next ? { next } : {}) } }),
  };
}
