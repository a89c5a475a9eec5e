/**
 * OpenHarness shells: each shell (a device, an IM bot, a CLI speaking OpenHarness) holds a
 * bearer token of its own and acts as one identity with one role. The token is shown once,
 * when it is issued; only its SHA-256 is stored (ShellToken). A PlatformAccount
 * { platform: 'openharness', userId: <shell id> } maps the shell to its identity, which is
 * what ingress decides roles, rate limits and approvals by.
 *
 * The operator's STEWARD_API_TOKEN is accepted as a shell too (adapters/openharness/engine.ts);
 * it is not a row here. The OpenHarness adapter authenticates with `verifyShellToken`; the CLI
 * issues, lists and revokes.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { z } from 'zod';
import type { Db } from '../domain/db.js';
import { GovernanceError, sha256 } from '../domain/governance.js';
import { isUniqueViolation } from '../domain/prisma-errors.js';
import { findShellByIdOrName, findShellByTokenHash, insertShell, listShellRows, markShellRevoked } from '../domain/store/shells.js';
import { RoleSchema, type Role } from '../common/roles.js';

/** Prefix of every shell token: tells a shell token from other secrets at a glance. */
export const SHELL_TOKEN_PREFIX = 'oh_';
/** `oh_` + 32 random bytes, base64url (43 characters). */
const SHELL_TOKEN_RE = /^oh_[A-Za-z0-9_-]{43}$/;

export const ShellNameSchema = z
  .string()
  .trim()
  .min(1, 'a shell name must not be empty')
  .max(64, 'a shell name is at most 64 characters')
  .regex(/^[A-Za-z0-9][A-Za-z0-9._ -]*$/, 'a shell name uses letters, digits, spaces and . _ - (starting with a letter or digit)');

export const IssueShellInputSchema = z.object({
  name: ShellNameSchema,
  role: RoleSchema.default('member'),
  /** Link the shell to this existing identity instead of creating one. */
  identityId: z.string().trim().min(1).max(200).optional(),
  /** Who issued it (an identity id, or "operator"/"cli"). */
  createdBy: z.string().min(1).max(200),
});
export type IssueShellInput = z.input<typeof IssueShellInputSchema>;

export interface IssuedShell {
  id: string;
  name: string;
  /** The bearer token: shown once, never stored in clear. */
  token: string;
  identityId: string;
}

export interface ShellRecord {
  id: string;
  name: string;
  identityId: string;
  /** The identity's name and role (undefined when the identity was removed). */
  identityName?: string;
  role?: Role;
  createdAt: Date;
  revokedAt: Date | null;
}

export interface VerifiedShell {
  shellId: string;
  name: string;
}

/** A refused shell operation (bad input, a name in use, an unknown identity): nothing changed. */
export class ShellError extends Error {
  override readonly name = 'ShellError';
}

export function newShellToken(): string {
  return `${SHELL_TOKEN_PREFIX}${randomBytes(32).toString('base64url')}`;
}

/**
 * Issue a shell token. A new identity with `role` (default member) is created for the shell
 * unless `identityId` links an existing one (which keeps its own role; giving both is refused).
 * All rows are written in one transaction: a refusal leaves nothing behind.
 */
export async function issueShell(db: Db, input: IssueShellInput): Promise<IssuedShell> {
  const parsed = IssueShellInputSchema.safeParse(input);
  if (!parsed.success) {
    throw new ShellError(parsed.error.issues.map((i) => `${i.path.join('.') || '(input)'}: ${i.message}`).join('; '));
  }
  const { name, role, identityId, createdBy } = parsed.data;
  if (identityId !== undefined && input.role !== undefined) {
    throw new ShellError('a role is given to a new identity only: a linked identity keeps its own role (change it with `steward identities set-role`)');
  }
  const id = randomUUID();
  const token = newShellToken();
  try {
    const r = await insertShell(db, { id, name, tokenHash: sha256(token), createdBy, role, ...(identityId !== undefined ? { identityId } : {}) });
    if (r.kind === 'name-taken') throw new ShellError(`a shell named "${name}" already exists (names stay taken after a revocation); pick another name`);
    if (r.kind === 'unknown-identity') throw new ShellError(`no identity has the id ${identityId}`);
    return { id, name, token, identityId: r.identityId };
  } catch (err) {
    if (err instanceof ShellError) throw err;
    if (isUniqueViolation(err)) throw new ShellError(`a shell named "${name}" already exists`);
    if (err instanceof GovernanceError) throw new ShellError(err.message);
    throw err;
  }
}

/** Every shell (revoked ones too), oldest first. Never the token or its hash. */
export async function listShells(db: Db): Promise<ShellRecord[]> {
  const rows = await listShellRows(db);
  return rows.map((r) => {
    const identity = r.identity;
    const role = identity ? RoleSchema.safeParse(identity.role) : undefined;
    return {
      id: r.id,
      name: r.name,
      identityId: r.identityId,
      ...(identity ? { identityName: identity.name } : {}),
      ...(role?.success ? { role: role.data } : identity ? { role: 'viewer' as const } : {}),
      createdAt: r.createdAt,
      revokedAt: r.revokedAt,
    };
  });
}

/**
 * Revoke a shell by id or name: its token stops working at once and its open continuations
 * are dropped. The identity and the platform account stay (for the audit trail). Undefined
 * when no shell matches; `alreadyRevoked` when it was revoked before (nothing changed).
 */
export async function revokeShell(db: Db, nameOrId: string, now = new Date()): Promise<(ShellRecord & { alreadyRevoked: boolean }) | undefined> {
  const key = nameOrId.trim();
  if (!key) return undefined;
  const row = await findShellByIdOrName(db, key);
  if (!row) return undefined;
  if (row.revokedAt) {
    return { id: row.id, name: row.name, identityId: row.identityId, createdAt: row.createdAt, revokedAt: row.revokedAt, alreadyRevoked: true };
  }
  const after = await markShellRevoked(db, row.id, now);
  return { id: after.id, name: after.name, identityId: after.identityId, createdAt: after.createdAt, revokedAt: after.revokedAt, alreadyRevoked: false };
}

/** The shell a bearer token belongs to; undefined for an unknown, malformed or revoked token. */
export async function verifyShellToken(db: Db, token: string): Promise<VerifiedShell | undefined> {
  if (!SHELL_TOKEN_RE.test(token)) return undefined;
  const row = await findShellByTokenHash(db, sha256(token));
  if (!row || row.revokedAt) return undefined;
  return { shellId: row.id, name: row.name };
}
