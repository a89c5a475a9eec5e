/**
 * A workspace's IMAP inbox.
 *
 * The settings, as the operator sets them (the API and CLI; never from chat): host, port, TLS,
 * user, folder and the password BY REFERENCE (`env:STEWARD_INBOX_<NAME>`, read from Steward's
 * environment when it connects; the value is never stored, shown or logged). At most one per
 * workspace. Every input is checked before anything changes; a refusal is a WorkspaceInputError
 * (400, 404 for a workspace or inbox that is not there).
 *
 * The intake (`createInboxIntake`), what happens to each new message the IMAP adapter
 * (adapters/workspace-inbox.ts) fetches and parses:
 *  1. written as a Markdown document under the workspace's `inbox/`
 *     (domain/knowledge/inbox-document.ts), then reindexed (the workspace's indexing workflow);
 *  2. handed on: to the objectives whose inbound address is among To/Cc (services/email.ts, the
 *     routing of the SMTP trigger: event `email:<Message-ID>`), and to each chat bound to the
 *     workspace as a notice through the outbox (keyed: sent once);
 *  3. recorded (InboxMessage: (UIDVALIDITY, UID) and the Message-ID; the last UID) with an
 *     `inbox.message` receipt.
 * Every step is idempotent, so a crash anywhere repeats the message's steps at the next start
 * and nothing is stored or posted twice; the Message-IDs already stored keep a folder read again
 * from doubling. A malformed message gets a failed receipt. A failing poll is stored as the
 * inbox's lastError and posted once to the admin channel (at once for a refused login, after
 * `alertAfterMs` for the rest).
 */
import { createHash } from 'node:crypto';
import { lstat, mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { ParsedMail } from 'mailparser';
import type { Logger } from 'pino';
import { z } from 'zod';
import { sessionWorkflowId } from '../common/ids.js';
import type { Db } from '../domain/db.js';
import { notifyAdmins } from '../domain/governance.js';
import { malformedReason, renderInboxDocument } from '../domain/knowledge/inbox-document.js';
import { deliverOnce, type Senders } from '../domain/outbox.js';
import { writeReceipt } from '../domain/receipts.js';
import {
  advanceInboxUid,
  countInboxMessages,
  deleteInbox,
  findInbox,
  findInboxMessageByKey,
  findInboxMessageByUid,
  listInboxes,
  markInboxFailed,
  markInboxOk,
  markInboxPolled,
  recordInboxMessage,
  resetInboxUids,
  upsertInbox,
  workspaceChats,
  type InboxSettings,
  type WorkspaceInboxRow,
} from '../domain/store/inbox.js';
import { findWorkspace, type WorkspaceRow } from '../domain/store/workspaces.js';
import { deliverEmailToObjectives, type InboundEmail } from './email.js';
import type { ObjectiveService } from './objectives.js';
import type { WorkspaceService } from './workspaces.js';
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

// ---------------------------------------------------------------------------------------
// The intake: each new message of an inbox, stored, handed on and recorded

export type { WorkspaceInboxRow } from '../domain/store/inbox.js';

export interface InboxMessageOutcome {
  workspace: string;
  uid: number;
  status: 'stored' | 'duplicate' | 'failed';
  path?: string;
  reason?: string;
}

/** A failure of a poll, with the text the operator sees (never the password). */
export class InboxFailure extends Error {
  constructor(
    message: string,
    readonly auth = false,
  ) {
    super(message);
  }
}

const sha = (x: string | Buffer) => createHash('sha256').update(x).digest('hex');

/** A message's key for dedupe: its Message-ID, else a hash of the raw message. */
export function messageKeyOf(messageId: string | undefined | null, raw: Buffer): string {
  const mid = messageId?.trim();
  if (mid) return mid.length <= 500 ? `mid:${mid}` : `mid-sha256:${sha(mid)}`;
  return `sha256:${sha(raw)}`;
}

export interface InboxIntakeDeps {
  db: Db;
  workspaces: Pick<WorkspaceService, 'reindex'>;
  objectives: Pick<ObjectiveService, 'receiveInternalEvent'>;
  /** Chat platforms (bound chats and the admin channel); the HTTP API's chats need none. */
  senders?: Senders;
  log?: Logger;
  /** A failure other than a refused login is posted to the admins once it lasts this long. */
  alertAfterMs: number;
  onMessage?: (m: InboxMessageOutcome) => void;
}

/** A message fetched and parsed by the IMAP adapter. */
export interface FetchedMessage {
  uidValidity: bigint;
  uid: bigint;
  raw: Buffer;
  mail: ParsedMail;
  /** The message as the objectives' mail routing takes it (parsed when it is handed on). */
  email: () => InboundEmail;
}

export function createInboxIntake(deps: InboxIntakeDeps) {
  const { db, log } = deps;

  /** A notice to each chat bound to the workspace (outbox-keyed: once per chat). */
  async function tellChats(ws: string, key: string, h: { subject: string | null; from: string | null }, rel: string): Promise<number> {
    const chats = await workspaceChats(db, ws);
    const subject = (h.subject ?? '(no subject)').slice(0, 200);
    const text = `New mail in inbox: ${subject} from ${(h.from ?? 'an unknown sender').slice(0, 200)} → ${rel}`;
    for (const conversation of chats) {
      await deliverOnce(db, deps.senders ?? {}, {
        key: `inbox:${ws}:${sha(key).slice(0, 32)}:${conversation.platform}:${conversation.account}:${conversation.chatId}`,
        sessionId: sessionWorkflowId(conversation),
        conversation,
        kind: 'notice',
        text,
      });
    }
    return chats.length;
  }

  const intake = {
    /** Every configured inbox. */
    inboxes: (): Promise<WorkspaceInboxRow[]> => listInboxes(db),

    /** The directory of the inbox's workspace (an InboxFailure when the workspace is gone). */
    async workspaceRoot(ws: string): Promise<string> {
      const row = await findWorkspace(db, ws);
      if (!row) throw new InboxFailure(`workspace ${ws} is gone`);
      return row.root;
    },

    /** The last UID taken from the folder with this UIDVALIDITY (0 after a change: read it again); undefined when the inbox was cleared meanwhile. */
    async lastUid(ws: string, uidValidity: bigint): Promise<bigint | undefined> {
      const state = await findInbox(db, ws);
      if (!state) return undefined;
      if (state.uidValidity === uidValidity) return state.lastUid;
      if (state.uidValidity !== null) log?.warn({ workspace: ws, before: String(state.uidValidity), now: String(uidValidity) }, 'the inbox folder\'s UIDVALIDITY changed: reading it again (Message-IDs already stored are not stored twice)');
      await resetInboxUids(db, ws, uidValidity);
      return 0n;
    },

    /** A poll read the folder to its end. */
    polled: (ws: string): Promise<void> => markInboxPolled(db, ws),

    /** The message at this UID was taken before (the last UID moves past it). */
    async taken(ws: string, uidValidity: bigint, uid: bigint): Promise<boolean> {
      if (!(await findInboxMessageByUid(db, ws, uidValidity, uid))) return false;
      await advanceInboxUid(db, ws, uidValidity, uid);
      return true;
    },

    /** One message: stored, handed on, recorded (or refused when malformed; skipped when its Message-ID is stored). */
    async take(ws: string, root: string, m: FetchedMessage): Promise<void> {
      const { mail, raw, uidValidity, uid } = m;
      const bad = malformedReason(mail);
      const key = messageKeyOf(mail.messageId, raw);
      if (bad) {
        await intake.reject(ws, uidValidity, uid, key, bad);
        return;
      }
      const seen = await findInboxMessageByKey(db, ws, key);
      if (seen) {
        await advanceInboxUid(db, ws, uidValidity, uid);
        log?.info({ workspace: ws, uid: Number(uid), path: seen.path }, 'inbox message already stored (the same Message-ID)');
        deps.onMessage?.({ workspace: ws, uid: Number(uid), status: 'duplicate', ...(seen.path ? { path: seen.path } : {}) });
        return;
      }
      const doc = renderInboxDocument(mail, { uid });
      const rel = `inbox/${doc.fileName}`;
      const dir = path.join(root, 'inbox');
      await mkdir(dir, { recursive: true });
      if ((await lstat(dir)).isSymbolicLink()) throw new InboxFailure(`the workspace's inbox/ is a link: refusing to write through it`);
      await writeFile(path.join(dir, doc.fileName), doc.markdown);
      await deps.workspaces.reindex(ws, { paths: [rel] });

      const handed = await deliverEmailToObjectives({ db, objectives: deps.objectives, ...(log ? { log } : {}) }, m.email(), doc.recipients, { inbox: { workspace: ws, path: rel } });
      if (handed.failed) throw new InboxFailure(`the message ${rel} could not be handed to every objective; it is tried again`);
      const chats = await tellChats(ws, key, doc.headers, rel);
      await recordInboxMessage(db, { workspace: ws, uidValidity, uid, messageKey: key, status: 'stored', path: rel });
      await writeReceipt(db, {
        key: `inbox.message:${ws}:${uidValidity}:${uid}`,
        kind: 'inbox.message',
        actor: `inbox:${ws}`,
        data: { workspace: ws, uidValidity: String(uidValidity), uid: Number(uid), ok: true, path: rel, messageId: doc.headers.messageId, from: doc.headers.from, subject: doc.headers.subject, objectives: handed.objectives, chats },
      });
      log?.info({ workspace: ws, uid: Number(uid), path: rel, objectives: handed.objectives.length, chats }, 'inbox message stored');
      deps.onMessage?.({ workspace: ws, uid: Number(uid), status: 'stored', path: rel });
    },

    /** A message that cannot be stored: recorded as failed with a receipt saying why; the rest go on. */
    async reject(ws: string, uidValidity: bigint, uid: bigint, key: string, reason: string): Promise<void> {
      await recordInboxMessage(db, { workspace: ws, uidValidity, uid, messageKey: key, status: 'failed', path: null });
      await writeReceipt(db, { key: `inbox.message:${ws}:${uidValidity}:${uid}`, kind: 'inbox.message', actor: `inbox:${ws}`, data: { workspace: ws, uidValidity: String(uidValidity), uid: Number(uid), ok: false, reason } });
      log?.warn({ workspace: ws, uid: Number(uid), reason }, 'inbox message not stored');
      deps.onMessage?.({ workspace: ws, uid: Number(uid), status: 'failed', reason });
    },

    /** The inbox is connected: its last error is cleared. */
    async connected(ws: string): Promise<void> {
      const state = await findInbox(db, ws);
      if (state?.lastError) log?.info({ workspace: ws }, 'inbox connected again');
      await markInboxOk(db, ws);
    },

    /**
     * A poll failed: stored as the inbox's lastError, and posted to the admins once per streak of
     * failures (`alertedFor`: the streak already posted by this connection loop; the new one is
     * returned). Keyed by the failure's start, so it is posted once even across restarts.
     */
    async failed(row: WorkspaceInboxRow, f: InboxFailure, alertedFor: string | undefined): Promise<string | undefined> {
      const ws = row.workspace;
      let alerted = alertedFor;
      try {
        await markInboxFailed(db, ws, f.message);
        const state = await findInbox(db, ws);
        const since = state?.lastErrorAt;
        if (!since) return alerted;
        const streak = `inbox-error:${ws}:${since.getTime()}`;
        if (alerted === streak || !(f.auth || Date.now() - since.getTime() >= deps.alertAfterMs)) return alerted;
        alerted = streak;
        await notifyAdmins(db, deps.senders ?? {}, {
          key: streak,
          text: `The IMAP inbox of workspace ${ws} (${row.user} at ${row.host}:${row.port}) is failing: ${f.message}. Steward keeps trying; \`steward doctor\` and \`steward workspaces inbox ${ws} show\` show it until it works again.`,
        });
      } catch (err) {
        log?.warn({ err, workspace: ws }, 'the inbox failure could not be recorded');
      }
      return alerted;
    },
  };
  return intake;
}

export type InboxIntake = ReturnType<typeof createInboxIntake>;
