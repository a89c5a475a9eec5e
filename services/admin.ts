/**
 * Administration: the people Steward knows and their roles, the chats it answers in and their
 * triage, and OpenHarness shells. The HTTP admin routes (adapters/http/admin.ts), the task
 * service's triage route and the CLI (platform/admin-cli.ts) call these functions, and every
 * change writes its receipt here, so each surface writes the same receipts; only the actor
 * differs (the API's operator, `cli` for the command line). Inputs arrive validated by the
 * caller's zod schemas; a refusal (a name or an account in use, an unknown identity) throws
 * ServiceInputError (409 for a clash, 400 for a shell the input cannot make) and changes nothing.
 * Pending pairing requests and the approvals agents asked for are read here too; deciding them
 * is the chat intake's (it tells people and signals the waiting workflow).
 */
import type { Db } from '../domain/db.js';
import {
  bindChat,
  createIdentity,
  GovernanceError,
  listApprovals,
  pendingPairings,
  deleteBinding,
  deleteIdentity,
  findBinding,
  findIdentity,
  listBindings,
  listIdentities,
  updateIdentity,
  type BindInput,
  type BindingRecord,
  type BindingRow,
  type IdentityRow,
  type NewIdentity,
  type ApprovalRecord,
  type PairingRecord,
} from '../domain/governance.js';
import { writeReceipt } from '../domain/receipts.js';
import { listTriageSettings, upsertTriageSetting, type TriageSettingRow } from '../domain/store/tasks.js';
import { issueShell, listShells, revokeShell, ShellError, type IssuedShell, type ShellRecord } from './shells.js';
import type { Role } from '../common/roles.js';
import { ServiceInputError, type Requester } from './requests.js';

/** A governance refusal (a clash) as the service's: 409, nothing changed. */
async function refusing<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof GovernanceError) throw new ServiceInputError(err.message, 409);
    if (err instanceof ShellError) throw new ServiceInputError(err.message, 400);
    throw err;
  }
}

export type AdminService = ReturnType<typeof createAdminService>;

export function createAdminService(db: Db) {
  return {
    // ---- identities ----
    listIdentities: (): Promise<IdentityRow[]> => listIdentities(db),
    findIdentity: (id: string): Promise<IdentityRow | undefined> => findIdentity(db, id),

    /** Add a person with a role and their platform accounts. */
    async addIdentity(by: Requester, input: Omit<NewIdentity, 'createdBy'>): Promise<{ id: string }> {
      const { id } = await refusing(() => createIdentity(db, { ...input, createdBy: by.id }));
      await writeReceipt(db, { kind: 'identity.change', actor: by.id, data: { action: 'create', identityId: id, name: input.name, role: input.role, accounts: input.accounts } });
      return { id };
    },

    /** Change a person's name or role; undefined when there is no such identity. */
    async changeIdentity(by: Requester, id: string, change: { name?: string; role?: Role }): Promise<{ before: IdentityRow; after: IdentityRow } | undefined> {
      const before = await findIdentity(db, id);
      if (!before) return undefined;
      const after = await updateIdentity(db, id, { ...(change.name ? { name: change.name } : {}), ...(change.role ? { role: change.role } : {}) });
      await writeReceipt(db, { kind: 'identity.change', actor: by.id, data: { action: 'update', identityId: id, before: { name: before.name, role: before.role }, after: { name: after.name, role: after.role } } });
      return { before, after };
    },

    /** Forget a person (their accounts become unknown senders); false when there is no such identity. */
    async removeIdentity(by: Requester, id: string): Promise<boolean> {
      if (!(await deleteIdentity(db, id))) return false;
      await writeReceipt(db, { kind: 'identity.change', actor: by.id, data: { action: 'delete', identityId: id } });
      return true;
    },

    // ---- bindings and their triage ----
    listBindings: (): Promise<BindingRow[]> => listBindings(db),
    findBinding: (id: string): Promise<BindingRow | undefined> => findBinding(db, id),
    triageSettings: (): Promise<TriageSettingRow[]> => listTriageSettings(db),

    /** Bind a chat (or change its binding). */
    async bind(by: Requester, input: Omit<BindInput, 'createdBy'>): Promise<BindingRecord> {
      const b = await refusing(() => bindChat(db, { ...input, createdBy: by.id }));
      await writeReceipt(db, { kind: 'binding.change', actor: by.id, data: { action: 'bind', ...b } });
      return b;
    },

    /** Remove a binding; the removed one, or undefined when there is none. */
    async unbind(by: Requester, id: string): Promise<BindingRow | undefined> {
      const row = await findBinding(db, id);
      if (!row || !(await deleteBinding(db, id))) return undefined;
      await writeReceipt(db, { kind: 'binding.change', actor: by.id, data: { action: 'unbind', id, platform: row.platform, chatId: row.chatId } });
      return row;
    },

    /** Switch triage of a binding on (with its model; null clears it) or off; undefined when there is no such binding. */
    async setTriage(by: Requester, bindingId: string, setting: { enabled: boolean; model?: string | null }): Promise<{ binding: BindingRow; setting: TriageSettingRow } | undefined> {
      const binding = await findBinding(db, bindingId);
      if (!binding) return undefined;
      const row = await upsertTriageSetting(db, bindingId, { enabled: setting.enabled, ...(setting.model !== undefined ? { model: setting.model } : {}), updatedBy: by.id });
      await writeReceipt(db, { kind: 'binding.change', actor: by.id, data: { action: 'triage', bindingId, platform: binding.platform, chatId: binding.chatId, enabled: row.enabled, model: row.model, by: by.name } });
      return { binding, setting: row };
    },

    // ---- what waits for a decision ----
    /** Pending pairing requests (never their codes: the requester has theirs). */
    pendingPairings: (): Promise<PairingRecord[]> => pendingPairings(db),
    /** Actions agents proposed, pending first by default. */
    listApprovals: (opts: { status?: string } = {}): Promise<ApprovalRecord[]> => listApprovals(db, opts),

    // ---- OpenHarness shells ----
    listShells: (): Promise<ShellRecord[]> => listShells(db),

    /** Issue a shell and its token (shown once); a new identity with `role` unless `identityId` links one. */
    async issueShell(by: Requester, input: { name: string; role?: Role; identityId?: string }): Promise<IssuedShell> {
      const s = await refusing(() => issueShell(db, { name: input.name, createdBy: by.id, ...(input.role ? { role: input.role } : {}), ...(input.identityId ? { identityId: input.identityId } : {}) }));
      await writeReceipt(db, { kind: 'shell.change', actor: by.id, data: { action: 'issue', shellId: s.id, name: s.name, identityId: s.identityId, ...(input.role ? { role: input.role } : {}) } });
      return s;
    },

    /** Revoke a shell by name or id: its token stops working; undefined when there is none. */
    async revokeShell(by: Requester, nameOrId: string): Promise<(ShellRecord & { alreadyRevoked: boolean }) | undefined> {
      const r = await revokeShell(db, nameOrId);
      if (!r) return undefined;
      await writeReceipt(db, { kind: 'shell.change', actor: by.id, data: { action: 'revoke', shellId: r.id, name: r.name } });
      return r;
    },
  };
}
