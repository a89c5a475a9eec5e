/**
 * Workspaces' IMAP inboxes: one connection per configured inbox (imapflow), IDLE where the
 * server offers it (else a poll every `pollMs`), each new message of the folder:
 *  1. parsed (mailparser) and written as a Markdown document under the workspace's `inbox/`
 *     (domain/knowledge/inbox-document.ts), then reindexed (the workspace's indexing workflow);
 *  2. handed on: to the objectives whose inbound address is among To/Cc (the routing of the SMTP
 *     trigger, adapters/inbound-email.ts: event `email:<Message-ID>`), and to each chat bound to
 *     the workspace as a notice through the outbox (keyed: sent once);
 *  3. recorded (InboxMessage: (UIDVALIDITY, UID) and the Message-ID; the last UID) with an
 *     `inbox.message` receipt.
 * Every step is idempotent, so a crash anywhere repeats the message's steps at the next start
 * and nothing is stored or posted twice; a UIDVALIDITY change reads the folder again, and the
 * Message-IDs already stored keep it from doubling. A malformed message gets a failed receipt and
 * the rest go on. A poll that fails (a refused login, no server) is stored as the inbox's
 * lastError (doctor shows it) and posted once to the admin channel (at once for a refused
 * login, after `alertAfterMs` for the rest); the next good connection clears it. The password is
 * read from its variable when connecting and is in no log, error, receipt or prompt.
 *
 * No Temporal here: the workspace service starts the indexing, the objective service the runs.
 */
import { createHash } from 'node:crypto';
import { lstat, mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
// imapflow and mailparser (about 14 MB of heap) are loaded when an inbox first connects
import type { ImapFlow } from 'imapflow';
import type { ParsedMail } from 'mailparser';
import { sessionWorkflowId } from '../common/ids.js';
import type { Db } from '../domain/db.js';
import { notifyAdmins } from '../domain/governance.js';
import { renderInboxDocument, malformedReason } from '../domain/knowledge/inbox-document.js';
import { deliverOnce, type Senders } from '../domain/outbox.js';
import { writeReceipt } from '../domain/receipts.js';
import {
  advanceInboxUid,
  findInbox,
  findInboxMessageByKey,
  findInboxMessageByUid,
  listInboxes,
  markInboxFailed,
  markInboxOk,
  markInboxPolled,
  recordInboxMessage,
  resetInboxUids,
  workspaceChats,
  type WorkspaceInboxRow,
} from '../domain/store/inbox.js';
import { findWorkspace } from '../domain/store/workspaces.js';
import type { ObjectiveService } from '../services/objectives.js';
import { INBOX_PASSWORD_REF } from '../services/inbox.js';
import type { WorkspaceService } from '../services/workspaces.js';
import { deliverEmailToObjectives, htmlToText, parseEmail } from './inbound-email.js';

export interface InboxMessageOutcome {
  workspace: string;
  uid: number;
  status: 'stored' | 'duplicate' | 'failed';
  path?: string;
  reason?: string;
}

export interface WorkspaceInboxesOptions {
  db: Db;
  workspaces: Pick<WorkspaceService, 'reindex'> & Partial<Pick<WorkspaceService, 'onChange'>>;
  objectives: Pick<ObjectiveService, 'receiveInternalEvent'>;
  /** Chat platforms (bound chats and the admin channel); the HTTP API's chats need none. */
  senders?: Senders;
  log?: Logger;
  /** Steward's environment, where the passwords' variables are. */
  readSecret?: (name: string) => string | undefined;
  /** Without IDLE: the poll interval (default 60 s). */
  pollMs?: number;
  /** With IDLE: look anyway this often (default 5 min). */
  idleMs?: number;
  /** The first retry after a failure (default 5 s), doubling up to maxRetryMs (5 min). */
  retryMs?: number;
  maxRetryMs?: number;
  /** How often the settings are read again (default 30 s; changes through this process's service are followed at once). */
  reconcileMs?: number;
  /** A failure other than a refused login is posted to the admins once it lasts this long (default 5 min). */
  alertAfterMs?: number;
  /** A larger message is not stored (a failed receipt; default 25 MiB). */
  maxMessageBytes?: number;
  /** Connect, greeting and socket time limits (default 30 s). */
  timeoutMs?: number;
  onMessage?: (m: InboxMessageOutcome) => void;
  onPoll?: (p: { workspace: string; ok: boolean; error?: string }) => void;
}

export interface WorkspaceInboxes {
  /** The workspaces whose inbox is being polled. */
  running(): string[];
  stop(): Promise<void>;
}

type Resolved = Required<Pick<WorkspaceInboxesOptions, 'pollMs' | 'idleMs' | 'retryMs' | 'maxRetryMs' | 'reconcileMs' | 'alertAfterMs' | 'maxMessageBytes' | 'timeoutMs' | 'readSecret'>> & WorkspaceInboxesOptions;

/** A failure of a poll, with the text the operator sees (never the password). */
class InboxFailure extends Error {
  constructor(
    message: string,
    readonly auth = false,
  ) {
    super(message);
  }
}

const configKey = (r: WorkspaceInboxRow) => JSON.stringify([r.host, r.port, r.tls, r.user, r.passwordRef, r.folder]);
const sha = (x: string | Buffer) => createHash('sha256').update(x).digest('hex');

/** A message's key for dedupe: its Message-ID, else a hash of the raw message. */
export function messageKeyOf(messageId: string | undefined | null, raw: Buffer): string {
  const mid = messageId?.trim();
  if (mid) return mid.length <= 500 ? `mid:${mid}` : `mid-sha256:${sha(mid)}`;
  return `sha256:${sha(raw)}`;
}

/** What went wrong, for the operator: a refused login, no server, no folder; the password scrubbed. */
function describeFailure(err: unknown, row: WorkspaceInboxRow, password: string | undefined): InboxFailure {
  if (err instanceof InboxFailure) return err;
  const e = err as { message?: string; code?: string; authenticationFailed?: boolean; responseText?: string; serverResponseCode?: string };
  const scrub = (s: string) => (password ? s.split(password).join('***') : s).slice(0, 500);
  const server = `${row.host}:${row.port}`;
  if (e.authenticationFailed || e.serverResponseCode === 'AUTHENTICATIONFAILED') {
    return new InboxFailure(scrub(`the server ${server} refused the login of ${row.user}: wrong user or password (${e.responseText ?? e.message ?? 'authentication failed'}); check the variable of ${row.passwordRef}`), true);
  }
  if (e.serverResponseCode === 'NONEXISTENT' || /mailbox doesn't exist|nonexistent/i.test(e.responseText ?? '')) return new InboxFailure(scrub(`no folder ${row.folder} on ${server}`));
  if (e.code === 'ECONNREFUSED') return new InboxFailure(`cannot connect to ${server}: connection refused`);
  if (e.code === 'ENOTFOUND' || e.code === 'EAI_AGAIN') return new InboxFailure(`cannot connect to ${server}: unknown host`);
  if (e.code === 'ETIMEDOUT' || e.code === 'CONNECT_TIMEOUT' || e.code === 'GREETING_TIMEOUT') return new InboxFailure(`cannot connect to ${server}: timed out`);
  return new InboxFailure(scrub(`${server}: ${e.responseText ?? e.message ?? String(err)}${e.code ? ` (${e.code})` : ''}`));
}

/** One inbox's connection loop. */
class InboxRunner {
  readonly key: string;
  private stopped = false;
  private client: ImapFlow | undefined;
  private wakeUp: (() => void) | undefined;
  private alertedFor: string | undefined;
  private root: string | undefined;
  readonly done: Promise<void>;

  constructor(
    private readonly o: Resolved,
    private readonly row: WorkspaceInboxRow,
  ) {
    this.key = configKey(row);
    this.done = this.loop();
  }

  get workspace(): string {
    return this.row.workspace;
  }

  /** Try again now (after a change of settings). */
  poke(): void {
    this.wakeUp?.();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.wakeUp?.();
    this.client?.close();
    await this.done;
  }

  /** Wait `ms`, or until woken (new mail, a closed connection, stop). */
  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wakeUp = done;
    });
  }

  private async loop(): Promise<void> {
    let delay = this.o.retryMs;
    while (!this.stopped) {
      let password: string | undefined;
      try {
        password = this.password();
        await this.session(password);
        delay = this.o.retryMs;
      } catch (err) {
        if (this.stopped) break;
        await this.failed(describeFailure(err, this.row, password));
        await this.pause(delay);
        delay = Math.min(delay * 2, this.o.maxRetryMs);
      }
    }
  }

  private password(): string {
    const variable = INBOX_PASSWORD_REF.exec(this.row.passwordRef)?.[1];
    const value = variable ? this.o.readSecret(variable) : undefined;
    if (!variable || !value) throw new InboxFailure(`the password's variable ${variable ?? this.row.passwordRef} is not set in Steward's environment`);
    return value;
  }

  private async session(password: string): Promise<void> {
    const { row, o } = this;
    const ws = await findWorkspace(o.db, row.workspace);
    if (!ws) throw new InboxFailure(`workspace ${row.workspace} is gone`);
    this.root = ws.root;
    const { ImapFlow } = await import('imapflow');
    const client = new ImapFlow({
      host: row.host,
      port: row.port,
      secure: row.tls === 'implicit',
      ...(row.tls === 'implicit' ? {} : { doSTARTTLS: row.tls === 'starttls' }),
      auth: { user: row.user, pass: password },
      logger: false,
      emitLogs: false,
      disableAutoIdle: true,
      connectionTimeout: o.timeoutMs,
      greetingTimeout: o.timeoutMs,
      socketTimeout: Math.max(o.timeoutMs, o.idleMs + 60_000),
      clientInfo: { name: 'Steward' },
    });
    let closed = false;
    client.on('error', (err: Error) => o.log?.debug({ workspace: row.workspace, error: describeFailure(err, row, password).message }, 'inbox connection error'));
    client.on('close', () => {
      closed = true;
      this.wakeUp?.();
    });
    client.on('exists', () => this.wakeUp?.());
    this.client = client;
    try {
      if (this.stopped) return;
      await client.connect();
      const lock = await client.getMailboxLock(row.folder);
      try {
        await this.ok();
        while (!this.stopped) {
          await this.sync(client);
          if (this.stopped || closed) break;
          const idle = client.capabilities.has('IDLE');
          const woken = this.pause(idle ? o.idleMs : o.pollMs);
          if (idle) void client.idle().catch(() => undefined);
          await woken;
          if (!idle && !closed && !this.stopped) await client.noop();
        }
      } finally {
        if (!closed) lock.release();
      }
      if (closed && !this.stopped) throw new InboxFailure(`${row.host}:${row.port} closed the connection`);
    } finally {
      this.client = undefined;
      if (!closed) await client.logout().catch(() => client.close());
    }
  }

  /** Read what is new in the folder, in UID order. */
  private async sync(client: ImapFlow): Promise<void> {
    const { db } = this.o;
    const ws = this.row.workspace;
    const mailbox = client.mailbox;
    if (!mailbox) throw new InboxFailure(`no folder ${this.row.folder} open`);
    const uidValidity = BigInt(mailbox.uidValidity);
    const state = await findInbox(db, ws);
    if (!state) {
      this.stopped = true; // cleared meanwhile
      return;
    }
    let lastUid = state.lastUid;
    if (state.uidValidity !== uidValidity) {
      if (state.uidValidity !== null) this.o.log?.warn({ workspace: ws, before: String(state.uidValidity), now: String(uidValidity) }, 'the inbox folder\'s UIDVALIDITY changed: reading it again (Message-IDs already stored are not stored twice)');
      await resetInboxUids(db, ws, uidValidity);
      lastUid = 0n;
    }
    if (mailbox.exists > 0) {
      const found = await client.search({ uid: `${lastUid + 1n}:*` }, { uid: true });
      const uids = (found || []).map((u) => BigInt(u)).filter((u) => u > lastUid).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
      for (const uid of uids) {
        if (this.stopped) return;
        await this.handle(client, uidValidity, uid);
      }
    }
    await markInboxPolled(db, ws);
    this.o.onPoll?.({ workspace: ws, ok: true });
  }

  private async handle(client: ImapFlow, uidValidity: bigint, uid: bigint): Promise<void> {
    const { db } = this.o;
    const ws = this.row.workspace;
    if (await findInboxMessageByUid(db, ws, uidValidity, uid)) {
      await advanceInboxUid(db, ws, uidValidity, uid);
      return;
    }
    const meta = await client.fetchOne(String(uid), { uid: true, size: true }, { uid: true });
    if (!meta) return; // expunged meanwhile
    if ((meta.size ?? 0) > this.o.maxMessageBytes) {
      await this.reject(uidValidity, uid, `uid:${uidValidity}:${uid}`, `the message is larger than ${this.o.maxMessageBytes} bytes (${meta.size})`);
      return;
    }
    const msg = await client.fetchOne(String(uid), { uid: true, source: true }, { uid: true });
    if (!msg || !msg.source) return;
    await this.take(msg.source, uidValidity, uid);
  }

  /** One message: parsed, stored, handed on, recorded. */
  private async take(raw: Buffer, uidValidity: bigint, uid: bigint): Promise<void> {
    const { db, log } = this.o;
    const ws = this.row.workspace;
    let mail: ParsedMail;
    try {
      const { simpleParser } = await import('mailparser');
      mail = await simpleParser(raw, { skipImageLinks: true, skipTextToHtml: true, skipTextLinks: true, keepCidLinks: true });
    } catch (err) {
      await this.reject(uidValidity, uid, messageKeyOf(null, raw), `the message could not be parsed: ${(err as Error).message}`);
      return;
    }
    const bad = malformedReason(mail);
    const key = messageKeyOf(mail.messageId, raw);
    if (bad) {
      await this.reject(uidValidity, uid, key, bad);
      return;
    }
    const seen = await findInboxMessageByKey(db, ws, key);
    if (seen) {
      await advanceInboxUid(db, ws, uidValidity, uid);
      log?.info({ workspace: ws, uid: Number(uid), path: seen.path }, 'inbox message already stored (the same Message-ID)');
      this.o.onMessage?.({ workspace: ws, uid: Number(uid), status: 'duplicate', ...(seen.path ? { path: seen.path } : {}) });
      return;
    }
    // mailparser converts a lone HTML body only: an HTML part of a multipart message is converted here
    if (!mail.text?.trim() && typeof mail.html === 'string') mail.text = htmlToText(mail.html);
    const doc = renderInboxDocument(mail, { uid });
    const rel = `inbox/${doc.fileName}`;
    const dir = path.join(this.root!, 'inbox');
    await mkdir(dir, { recursive: true });
    if ((await lstat(dir)).isSymbolicLink()) throw new InboxFailure(`the workspace's inbox/ is a link: refusing to write through it`);
    await writeFile(path.join(dir, doc.fileName), doc.markdown);
    await this.o.workspaces.reindex(ws, { paths: [rel] });

    const handed = await deliverEmailToObjectives({ db, objectives: this.o.objectives, ...(log ? { log } : {}) }, parseEmail(raw), raw, doc.recipients, { inbox: { workspace: ws, path: rel } });
    if (handed.failed) throw new InboxFailure(`the message ${rel} could not be handed to every objective; it is tried again`);
    const chats = await this.tellChats(key, doc.headers, rel);
    await recordInboxMessage(db, { workspace: ws, uidValidity, uid, messageKey: key, status: 'stored', path: rel });
    await writeReceipt(db, {
      key: `inbox.message:${ws}:${uidValidity}:${uid}`,
      kind: 'inbox.message',
      actor: `inbox:${ws}`,
      data: { workspace: ws, uidValidity: String(uidValidity), uid: Number(uid), ok: true, path: rel, messageId: doc.headers.messageId, from: doc.headers.from, subject: doc.headers.subject, objectives: handed.objectives, chats },
    });
    log?.info({ workspace: ws, uid: Number(uid), path: rel, objectives: handed.objectives.length, chats }, 'inbox message stored');
    this.o.onMessage?.({ workspace: ws, uid: Number(uid), status: 'stored', path: rel });
  }

  /** A message that cannot be stored: recorded as failed with a receipt saying why; the rest go on. */
  private async reject(uidValidity: bigint, uid: bigint, key: string, reason: string): Promise<void> {
    const ws = this.row.workspace;
    await recordInboxMessage(this.o.db, { workspace: ws, uidValidity, uid, messageKey: key, status: 'failed', path: null });
    await writeReceipt(this.o.db, { key: `inbox.message:${ws}:${uidValidity}:${uid}`, kind: 'inbox.message', actor: `inbox:${ws}`, data: { workspace: ws, uidValidity: String(uidValidity), uid: Number(uid), ok: false, reason } });
    this.o.log?.warn({ workspace: ws, uid: Number(uid), reason }, 'inbox message not stored');
    this.o.onMessage?.({ workspace: ws, uid: Number(uid), status: 'failed', reason });
  }

  /** A notice to each chat bound to the workspace (outbox-keyed: once per chat). */
  private async tellChats(key: string, h: { subject: string | null; from: string | null }, rel: string): Promise<number> {
    const ws = this.row.workspace;
    const chats = await workspaceChats(this.o.db, ws);
    const subject = (h.subject ?? '(no subject)').slice(0, 200);
    const text = `New mail in inbox: ${subject} from ${(h.from ?? 'an unknown sender').slice(0, 200)} → ${rel}`;
    for (const conversation of chats) {
      await deliverOnce(this.o.db, this.o.senders ?? {}, {
        key: `inbox:${ws}:${sha(key).slice(0, 32)}:${conversation.platform}:${conversation.account}:${conversation.chatId}`,
        sessionId: sessionWorkflowId(conversation),
        conversation,
        kind: 'notice',
        text,
      });
    }
    return chats.length;
  }

  private async ok(): Promise<void> {
    const state = await findInbox(this.o.db, this.row.workspace);
    if (state?.lastError) this.o.log?.info({ workspace: this.row.workspace }, 'inbox connected again');
    await markInboxOk(this.o.db, this.row.workspace);
    this.alertedFor = undefined;
  }

  private async failed(f: InboxFailure): Promise<void> {
    const { db, log } = this.o;
    const ws = this.row.workspace;
    log?.warn({ workspace: ws, error: f.message }, 'inbox poll failed');
    this.o.onPoll?.({ workspace: ws, ok: false, error: f.message });
    try {
      await markInboxFailed(db, ws, f.message);
      const state = await findInbox(db, ws);
      const since = state?.lastErrorAt;
      if (!since) return;
      const streak = `inbox-error:${ws}:${since.getTime()}`;
      if (this.alertedFor === streak || !(f.auth || Date.now() - since.getTime() >= this.o.alertAfterMs)) return;
      this.alertedFor = streak;
      // keyed by the failure's start: posted once, even across restarts
      await notifyAdmins(db, this.o.senders ?? {}, {
        key: streak,
        text: `The IMAP inbox of workspace ${ws} (${this.row.user} at ${this.row.host}:${this.row.port}) is failing: ${f.message}. Steward keeps trying; \`steward doctor\` and \`steward workspaces inbox ${ws} show\` show it until it works again.`,
      });
    } catch (err) {
      log?.warn({ err, workspace: ws }, 'the inbox failure could not be recorded');
    }
  }
}

/** Poll every configured inbox, follow changes of the settings, stop cleanly. */
export async function startWorkspaceInboxes(opts: WorkspaceInboxesOptions): Promise<WorkspaceInboxes> {
  const o: Resolved = {
    pollMs: 60_000,
    idleMs: 5 * 60_000,
    retryMs: 5_000,
    maxRetryMs: 5 * 60_000,
    reconcileMs: 30_000,
    alertAfterMs: 5 * 60_000,
    maxMessageBytes: 25 * 1024 * 1024,
    timeoutMs: 30_000,
    readSecret: (n: string) => process.env[n],
    ...opts,
  };
  const runners = new Map<string, InboxRunner>();
  let stopped = false;
  let chain: Promise<void> = Promise.resolve();
  const reconcile = async (poke: boolean) => {
    if (stopped) return;
    const wanted = new Map((await listInboxes(o.db)).map((r) => [r.workspace, r]));
    for (const [ws, runner] of runners) {
      const row = wanted.get(ws);
      if (row && configKey(row) === runner.key) {
        if (poke) runner.poke();
        continue;
      }
      runners.delete(ws);
      await runner.stop();
    }
    for (const [ws, row] of wanted) if (!stopped && !runners.has(ws)) runners.set(ws, new InboxRunner(o, row));
  };
  const schedule = (poke = false) => {
    chain = chain.then(() => reconcile(poke)).catch((err: unknown) => o.log?.warn({ err }, 'reading the inboxes\' settings failed'));
    return chain;
  };
  await schedule();
  const timer = setInterval(() => void schedule(), o.reconcileMs);
  timer.unref();
  // a change made through this process's service: followed at once, and a failing inbox tries again
  const unsubscribe = o.workspaces.onChange?.(() => void schedule(true));
  return {
    running: () => [...runners.keys()],
    async stop() {
      stopped = true;
      clearInterval(timer);
      unsubscribe?.();
      await chain;
      await Promise.all([...runners.values()].map((r) => r.stop()));
      runners.clear();
    },
  };
}
