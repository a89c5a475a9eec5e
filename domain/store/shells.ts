/**
 * The store of OpenHarness shells: every query on ShellToken (a shell's bearer token, kept as
 * its SHA-256) and ShellContinuation (a token a shell resumes waiting for a turn's answer
 * with). The rules (token format, names, roles, who may resume) live in
 * adapters/openharness; this module only reads and writes the rows. Issuing a shell also
 * writes its identity link (Identity, PlatformAccount) in the same transaction, so that one
 * write lives here; other identity queries are domain/governance.ts's.
 */
import { randomUUID } from 'node:crypto';
import type { Db } from '../db.js';
import { findIdentitiesByIds } from '../governance.js';

/** A shell token row (never the token itself). */
export interface ShellRow {
  id: string;
  name: string;
  identityId: string;
  createdAt: Date;
  revokedAt: Date | null;
}

/** A shell with the name and role of its identity (undefined when the identity was removed). */
export interface ShellListing extends ShellRow {
  identity?: { name: string; role: string };
}

export interface NewShell {
  id: string;
  name: string;
  tokenHash: string;
  createdBy: string;
  /** Link the shell to this existing identity; otherwise a new identity with `role` is created. */
  identityId?: string;
  role: string;
}

/** What insertShell did: the shell and its identity link were written, or nothing was (and why). */
export type InsertShellResult = { kind: 'inserted'; identityId: string } | { kind: 'name-taken' } | { kind: 'unknown-identity' };

/** A continuation row: the shell that holds it and the inbound message whose answer it waits for. */
export interface ContinuationRow {
  tokenHash: string;
  shellId: string;
  sessionId: string;
  afterSeq: number;
  expiresAt: Date;
}

const SHELL_SELECT = { id: true, name: true, identityId: true, createdAt: true, revokedAt: true } as const;

/** Thrown inside insertShell's transaction to roll it back; never leaves this module. */
class Refused extends Error {
  constructor(readonly result: Exclude<InsertShellResult, { kind: 'inserted' }>) {
    super(result.kind);
  }
}

/**
 * Write a new shell in one transaction: its token row and a PlatformAccount
 * { platform: 'openharness', userId: <shell id> } on the linked identity, or on a new identity
 * created for it. A taken name or an unknown identity writes nothing. A unique violation (two
 * issues racing for one name) is thrown as it comes.
 */
export async function insertShell(db: Db, shell: NewShell): Promise<InsertShellResult> {
  const { id, name, tokenHash, createdBy, identityId, role } = shell;
  try {
    const linked = await db.$transaction(async (tx) => {
      if (await tx.shellToken.findUnique({ where: { name }, select: { id: true } })) throw new Refused({ kind: 'name-taken' });
      let identity = identityId;
      if (identity !== undefined) {
        const found = await tx.identity.findUnique({ where: { id: identity }, select: { id: true } });
        if (!found) throw new Refused({ kind: 'unknown-identity' });
        await tx.platformAccount.create({ data: { platform: 'openharness', userId: id, identityId: identity, displayName: name } });
      } else {
        identity = randomUUID();
        await tx.identity.create({
          data: { id: identity, name, role, createdBy, accounts: { create: [{ platform: 'openharness', userId: id, displayName: name }] } },
        });
      }
      await tx.shellToken.create({ data: { id, name, tokenHash, identityId: identity } });
      return identity;
    });
    return { kind: 'inserted', identityId: linked };
  } catch (err) {
    if (err instanceof Refused) return err.result;
    throw err;
  }
}

/** Every shell (revoked ones too), oldest first, with its identity's name and role. */
export async function listShellRows(db: Db): Promise<ShellListing[]> {
  const rows = await db.shellToken.findMany({ orderBy: { createdAt: 'asc' }, select: SHELL_SELECT });
  const identities = await findIdentitiesByIds(db, [...new Set(rows.map((r) => r.identityId))]);
  const byId = new Map(identities.map((i) => [i.id, { name: i.name, role: i.role }]));
  return rows.map((r) => {
    const identity = byId.get(r.identityId);
    return identity ? { ...r, identity } : r;
  });
}

/** The shell with this id, else the one with this name. */
export async function findShellByIdOrName(db: Db, key: string): Promise<ShellRow | undefined> {
  const row = (await db.shellToken.findUnique({ where: { id: key }, select: SHELL_SELECT })) ?? (await db.shellToken.findUnique({ where: { name: key }, select: SHELL_SELECT }));
  return row ?? undefined;
}

/** The shell a token hash belongs to (revoked or not). */
export async function findShellByTokenHash(db: Db, tokenHash: string): Promise<Pick<ShellRow, 'id' | 'name' | 'revokedAt'> | undefined> {
  const row = await db.shellToken.findUnique({ where: { tokenHash }, select: { id: true, name: true, revokedAt: true } });
  return row ?? undefined;
}

/**
 * Mark a shell revoked at `now` (unless it already was) and drop its continuations; the row
 * as it is afterwards.
 */
export async function markShellRevoked(db: Db, shellId: string, now: Date): Promise<ShellRow> {
  await db.shellToken.updateMany({ where: { id: shellId, revokedAt: null }, data: { revokedAt: now } });
  await db.shellContinuation.deleteMany({ where: { shellId } });
  return db.shellToken.findUniqueOrThrow({ where: { id: shellId }, select: SHELL_SELECT });
}

/** Drop every continuation that expired before `now`. */
export async function pruneExpiredContinuations(db: Db, now: Date): Promise<void> {
  await db.shellContinuation.deleteMany({ where: { expiresAt: { lt: now } } });
}

/** Store a newly issued continuation. */
export async function insertContinuation(db: Db, row: ContinuationRow): Promise<void> {
  await db.shellContinuation.create({ data: row });
}

/** The continuation with this token hash (expired or not). */
export async function findContinuation(db: Db, tokenHash: string): Promise<ContinuationRow | undefined> {
  const row = await db.shellContinuation.findUnique({ where: { tokenHash }, select: { tokenHash: true, shellId: true, sessionId: true, afterSeq: true, expiresAt: true } });
  return row ?? undefined;
}

/** Forget a continuation. */
export async function deleteContinuation(db: Db, tokenHash: string): Promise<void> {
  await db.shellContinuation.deleteMany({ where: { tokenHash } });
}

/** Move a continuation's expiry (sliding expiry: a shell that keeps resuming keeps its token). */
export async function extendContinuation(db: Db, tokenHash: string, expiresAt: Date): Promise<void> {
  await db.shellContinuation.updateMany({ where: { tokenHash }, data: { expiresAt } });
}
