/** Roles and what each may do. Pure: safe for the workflow bundle. */
import { z } from 'zod';

/** Highest first. */
export const ROLES = ['overlord', 'admin', 'operator', 'member', 'viewer'] as const;
export const RoleSchema = z.enum(ROLES, { error: 'a role is one of overlord, admin, operator, member, viewer' });
export type Role = z.infer<typeof RoleSchema>;

/** Who is acting: the operator (the API token holder, the CLI) or a known person. */
export type Actor =
  | { kind: 'operator'; id: 'operator'; name: string; role: 'overlord' }
  | { kind: 'person'; id: string; name: string; role: Role };

/** The operator: the holder of the API token and the CLI, acting as an overlord. */
export const OPERATOR: Actor = { kind: 'operator', id: 'operator', name: 'the operator', role: 'overlord' };

const RANK: Record<Role, number> = { overlord: 4, admin: 3, operator: 2, member: 1, viewer: 0 };

export function roleRank(role: Role): number {
  return RANK[role];
}

/** True when `role` is `min` or above. */
export function roleAtLeast(role: Role, min: Role): boolean {
  return RANK[role] >= RANK[min];
}

/** The lowest of some roles (undefined for none): what a group of people may do together is what the least of them may. */
export function lowestRole(roles: readonly Role[]): Role | undefined {
  let low: Role | undefined;
  for (const r of roles) if (low === undefined || RANK[r] < RANK[low]) low = r;
  return low;
}

/** Admins and overlords: pairing, approvals, bindings; exempt from turn rate limits. */
export function isAdmin(role: Role): boolean {
  return roleAtLeast(role, 'admin');
}

/**
 * Which roles `granter` may give: an overlord any role; an admin the roles below admin.
 * Nobody else grants roles.
 */
export function mayGrant(granter: Role, role: Role): boolean {
  if (granter === 'overlord') return true;
  if (granter === 'admin') return RANK[role] < RANK.admin;
  return false;
}

/** A per-role limit on model turns: at most `count` turn-starting messages per `windowMs`. */
export interface RateLimit {
  count: number;
  windowMs: number;
}

export type RateLimits = Partial<Record<Role, RateLimit>>;

const UNITS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * Parse `member:30/h,operator:120/h` (count per s, m, h or d, optionally `30/2h`). Admins and
 * overlords are always exempt, so they cannot be listed. Throws with a readable message.
 */
export function parseRateLimits(spec: string): RateLimits {
  const out: RateLimits = {};
  for (const raw of spec.split(',').map((s) => s.trim()).filter(Boolean)) {
    const m = /^([a-z]+):(\d+)\/(\d*)([smhd])$/.exec(raw);
    if (!m) throw new Error(`"${raw}": expected role:count/period, e.g. member:30/h`);
    const role = RoleSchema.safeParse(m[1]);
    if (!role.success) throw new Error(`"${raw}": ${m[1]} is not a role`);
    if (isAdmin(role.data)) throw new Error(`"${raw}": admins and overlords are exempt from turn rate limits`);
    const per = m[3] ? Number(m[3]) : 1;
    if (per < 1) throw new Error(`"${raw}": the period must be at least 1`);
    out[role.data] = { count: Number(m[2]), windowMs: per * (UNITS[m[4] ?? 'h'] ?? UNITS.h!) };
  }
  return out;
}

/** Parse one `count/period` such as `30/h` or `30/2h` (s, m, h or d). Throws with a readable message. */
export function parseRate(spec: string): RateLimit {
  const m = /^(\d+)\/(\d*)([smhd])$/.exec(spec.trim());
  if (!m) throw new Error(`"${spec}": expected count/period, e.g. 30/h`);
  const per = m[2] ? Number(m[2]) : 1;
  if (per < 1) throw new Error(`"${spec}": the period must be at least 1`);
  if (Number(m[1]) < 1) throw new Error(`"${spec}": the count must be at least 1`);
  return { count: Number(m[1]), windowMs: per * (UNITS[m[3] ?? 'h'] ?? UNITS.h!) };
}

/** Parse `group:30/h,sender:10/h` (either may be left out: its default stays). Throws with a readable message. */
export function parseTriageLimits(spec: string, defaults: { perGroup: RateLimit; perSender: RateLimit }): { perGroup: RateLimit; perSender: RateLimit } {
  const out = { ...defaults };
  for (const raw of spec.split(',').map((s) => s.trim()).filter(Boolean)) {
    const m = /^(group|sender):(.+)$/.exec(raw);
    if (!m) throw new Error(`"${raw}": expected group:count/period or sender:count/period`);
    const rate = parseRate(m[2]!);
    if (m[1] === 'group') out.perGroup = rate;
    else out.perSender = rate;
  }
  return out;
}

export function describeWindow(ms: number): string {
  if (ms % UNITS.d! === 0) return ms === UNITS.d ? 'day' : `${ms / UNITS.d!} days`;
  if (ms % UNITS.h! === 0) return ms === UNITS.h ? 'hour' : `${ms / UNITS.h!} hours`;
  if (ms % UNITS.m! === 0) return ms === UNITS.m ? 'minute' : `${ms / UNITS.m!} minutes`;
  return `${Math.round(ms / 1000)} seconds`;
}
