/**
 * A workspace's IMAP inbox, as the operator sets it (the API and CLI; never from chat): host,
 * port, TLS, user, folder and the password BY REFERENCE (`env:STEWARD_INBOX_<NAME>`, read from
 * Steward's environment when it connects; the value is never stored, shown or logged). At most
 * one per workspace. Every input is checked before anything changes; a refusal is a
 * WorkspaceInputError (400, 404 for a workspace or inbox that is not there).
 */
import { z } from 'zod';
import type { Db } from '../domain/db.js';
import { writeReceipt } from '../domain/receipts.js';
import { countInboxMessages, deleteInbox, findInbox, upsertInbox, type InboxSettings, type WorkspaceInboxRow } from '../domain/store/inbox.js';
import type { WorkspaceRow } from '../domain/store/workspaces.js';
import { ServiceInputError, type Requester } from './requests.js';
import { referenceRefusal } from '../common/secret-refs.js';
import { holdSecrets } from '../domain/secrets.js';

export const INBOX_TLS = ['implicit', 'starttls', 'none'] as const;
/** `env:STEWARD_INBOX_<NAME>`: only variables meant for inboxes, so no other secret of Steward's can be sent to a mail server. */
export const INBOX_PASSWORD_REF = /^env:(STEWARD_INBOX_[A-Z0-9_]{1,64})$/;
const LOOPBACK = new Set(['127.0.0.1', '::1', '[::1]', 'localhost']);

export const InboxSettingsSchema = z
  .strictObject({
    host: z
      .string()
      .trim()
      .min(1)
      .max(253)
      .regex(/^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})?)*\.?|\[?[0-9A-Fa-f:.]+\]?)$/, 'a host name or IP address'),
    port: z.number().int().min(1).max(65535).optional(),
    tls: z.enum(INBOX_TLS, { message: 'tls: implicit (TLS from the start, port 993), starttls (port 143) or none (loopback only)' }).default('implicit'),
    user: z.string().min(1).max(320).refine((u) => !/[\r\n\0]/.test(u), 'no line breaks'),
    passwordRef: z
      .string()
      .regex(INBOX_PASSWORD_REF, 'the password by reference: env:STEWARD_INBOX_<NAME> (uppercase letters, digits, _), the variable holding it; never the password itself')
      .superRefine((ref, ctx) => {
        const why = referenceRefusal(ref, 'inbox');
        if (why) ctx.addIssue({ code: 'custom', message: why });
      }),
    folder: z
      .string()
      .trim()
      .min(1)
      .max(200)
      .refine((f) => !/[\r\n\0]/.test(f), 'no line breaks')
      .default('INBOX'),
  })
  .refine((s) => s.tls !== 'none' || LOOPBACK.has(s.host.toLowerCase()), { message: 'tls none (the password in the clear) only to a loopback host (127.0.0.1, ::1, localhost)', path: ['tls'] });

/** The inbox as the API shows it: settings (the password as its reference), state and counts. */
export interface InboxView {
  workspace: string;
  host: string;
  port: number;
  tls: string;
  user: string;
  passwordRef: string;
  folder: string;
  uidValidity: string | null;
  lastUid: number;
  lastError: string | null;
  lastErrorAt: string | null;
  lastSuccessAt: string | null;
  messages: { stored: number; failed: number };
}

export function inboxView(row: WorkspaceInboxRow, messages: { stored: number; failed: number }): InboxView {
  return {
    workspace: row.workspace,
    host: row.host,
    port: row.port,
    tls: row.tls,
    user: row.user,
    passwordRef: row.passwordRef,
    folder: row.folder,
    uidValidity: row.uidValidity === null ? null : row.uidValidity.toString(),
    lastUid: Number(row.lastUid),
    lastError: row.lastError,
    lastErrorAt: row.lastErrorAt?.toISOString() ?? null,
    lastSuccessAt: row.lastSuccessAt?.toISOString() ?? null,
    messages,
  };
}

export interface InboxSettingsDeps {
  db: Db;
  /** The workspace, or a WorkspaceInputError. */
  existing: (name: string) => Promise<WorkspaceRow>;
  /** Tell the pollers (and other followers) that something changed. */
  changed: () => void;
  /** Steward's environment (the password's variable must be set). */
  readSecret?: (name: string) => string | undefined;
  inputError: (message: string, status?: 400 | 404 | 409) => ServiceInputError;
}

export function createInboxSettings(deps: InboxSettingsDeps) {
  const read = deps.readSecret ?? ((n: string) => process.env[n]);
  // a value read by reference joins the one registry of held secrets (domain/secrets.ts)
  const readSecret = (n: string): string | undefined => {
    const v = read(n);
    if (v) holdSecrets([{ name: n, value: v }]);
    return v;
  };
  return {
    /** Set (or replace) the workspace's inbox. */
    async set(workspace: string, input: unknown, by: Requester): Promise<InboxView> {
      const ws = await deps.existing(workspace);
      const r = InboxSettingsSchema.safeParse(input);
      if (!r.success) throw deps.inputError(`the inbox: ${r.error.issues.map((i) => `${i.path.join('.') || '(body)'}: ${i.message}`).join('; ')}`);
      const variable = INBOX_PASSWORD_REF.exec(r.data.passwordRef)![1]!;
      if (!readSecret(variable)) throw deps.inputError(`the inbox: passwordRef: ${variable} is not set in Steward's environment (set it, restart, then set the inbox)`);
      const settings: InboxSettings = { ...r.data, port: r.data.port ?? (r.data.tls === 'implicit' ? 993 : 143) };
      const row = await upsertInbox(deps.db, ws.name, settings, by.name);
      await writeReceipt(deps.db, { kind: 'inbox.change', actor: by.id, data: { action: 'set', workspace: ws.name, host: settings.host, port: settings.port, tls: settings.tls, user: settings.user, passwordRef: settings.passwordRef, folder: settings.folder, by: by.name } });
      deps.changed();
      return inboxView(row, await countInboxMessages(deps.db, ws.name));
    },
    async show(workspace: string): Promise<InboxView> {
      const ws = await deps.existing(workspace);
      const row = await findInbox(deps.db, ws.name);
      if (!row) throw deps.inputError(`workspace ${ws.name} has no inbox`, 404);
      return inboxView(row, await countInboxMessages(deps.db, ws.name));
    },
    /** Remove the inbox (the documents it wrote stay in the workspace). */
    async clear(workspace: string, by: Requester): Promise<{ workspace: string; cleared: true }> {
      const ws = await deps.existing(workspace);
      if (!(await deleteInbox(deps.db, ws.name))) throw deps.inputError(`workspace ${ws.name} has no inbox`, 404);
      await writeReceipt(deps.db, { kind: 'inbox.change', actor: by.id, data: { action: 'clear', workspace: ws.name, by: by.name } });
      deps.changed();
      return { workspace: ws.name, cleared: true };
    },
  };
}

export type InboxSettingsService = ReturnType<typeof createInboxSettings>;
