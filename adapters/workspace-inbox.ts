/**
 * Workspaces' IMAP inboxes: one connection per configured inbox (imapflow), IDLE where the
 * server offers it (else a poll every `pollMs`); each new message of the folder is fetched,
 * parsed (mailparser, and the mail parser of adapters/inbound-email.ts for the objectives' event)
 * and handed to the inbox intake (services/inbox.ts `createInboxIntake`), which stores it as a
 * document of the workspace, hands it on to objectives and bound chats, and records it.
 * A UIDVALIDITY change reads the folder again. A poll that fails (a refused login, no server)
 * is told to the intake (the inbox's lastError, which doctor shows, and one post to the admin
 * channel); the next good connection clears it. The password is read from its variable when
 * connecting and is in no log, error, receipt or prompt.
 *
 * No Temporal and no database here: the intake does the application's part.
 */
import type { Logger } from 'pino';
// imapflow and mailparser (about 14 MB of heap) are loaded when an inbox first connects
import type { ImapFlow } from 'imapflow';
import type { ParsedMail } from 'mailparser';
import type { Db } from '../domain/db.js';
import type { Senders } from '../domain/outbox.js';
import type { ObjectiveService } from '../services/objectives.js';
import { createInboxIntake, INBOX_PASSWORD_REF, InboxFailure, messageKeyOf, type InboxIntake, type InboxMessageOutcome, type WorkspaceInboxRow } from '../services/inbox.js';
import type { WorkspaceService } from '../services/workspaces.js';
import { htmlToText, inboundEmailOf, parseEmail } from './inbound-email.js';

export type { InboxMessageOutcome } from '../services/inbox.js';

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

const configKey = (r: WorkspaceInboxRow) => JSON.stringify([r.host, r.port, r.tls, r.user, r.passwordRef, r.folder]);

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
    private readonly intake: InboxIntake,
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
    this.root = await this.intake.workspaceRoot(row.workspace);
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
    const ws = this.row.workspace;
    const mailbox = client.mailbox;
    if (!mailbox) throw new InboxFailure(`no folder ${this.row.folder} open`);
    const uidValidity = BigInt(mailbox.uidValidity);
    const lastUid = await this.intake.lastUid(ws, uidValidity);
    if (lastUid === undefined) {
      this.stopped = true; // cleared meanwhile
      return;
    }
    if (mailbox.exists > 0) {
      const found = await client.search({ uid: `${lastUid + 1n}:*` }, { uid: true });
      const uids = (found || []).map((u) => BigInt(u)).filter((u) => u > lastUid).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
      for (const uid of uids) {
        if (this.stopped) return;
        await this.handle(client, uidValidity, uid);
      }
    }
    await this.intake.polled(ws);
    this.o.onPoll?.({ workspace: ws, ok: true });
  }

  private async handle(client: ImapFlow, uidValidity: bigint, uid: bigint): Promise<void> {
    const ws = this.row.workspace;
    if (await this.intake.taken(ws, uidValidity, uid)) return;
    const meta = await client.fetchOne(String(uid), { uid: true, size: true }, { uid: true });
    if (!meta) return; // expunged meanwhile
    if ((meta.size ?? 0) > this.o.maxMessageBytes) {
      await this.intake.reject(ws, uidValidity, uid, `uid:${uidValidity}:${uid}`, `the message is larger than ${this.o.maxMessageBytes} bytes (${meta.size})`);
      return;
    }
    const msg = await client.fetchOne(String(uid), { uid: true, source: true }, { uid: true });
    if (!msg || !msg.source) return;
    await this.take(msg.source, uidValidity, uid);
  }

  /** One message: parsed here, then stored, handed on and recorded by the intake. */
  private async take(raw: Buffer, uidValidity: bigint, uid: bigint): Promise<void> {
    const ws = this.row.workspace;
    let mail: ParsedMail;
    try {
      const { simpleParser } = await import('mailparser');
      mail = await simpleParser(raw, { skipImageLinks: true, skipTextToHtml: true, skipTextLinks: true, keepCidLinks: true });
    } catch (err) {
      await this.intake.reject(ws, uidValidity, uid, messageKeyOf(null, raw), `the message could not be parsed: ${(err as Error).message}`);
      return;
    }
    // mailparser converts a lone HTML body only: an HTML part of a multipart message is converted here
    if (!mail.text?.trim() && typeof mail.html === 'string') mail.text = htmlToText(mail.html);
    await this.intake.take(ws, this.root!, { uidValidity, uid, raw, mail, email: () => inboundEmailOf(parseEmail(raw), raw) });
  }

  private async ok(): Promise<void> {
    await this.intake.connected(this.row.workspace);
    this.alertedFor = undefined;
  }

  private async failed(f: InboxFailure): Promise<void> {
    const ws = this.row.workspace;
    this.o.log?.warn({ workspace: ws, error: f.message }, 'inbox poll failed');
    this.o.onPoll?.({ workspace: ws, ok: false, error: f.message });
    this.alertedFor = await this.intake.failed(this.row, f, this.alertedFor);
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
  const intake = createInboxIntake({
    db: o.db,
    workspaces: o.workspaces,
    objectives: o.objectives,
    alertAfterMs: o.alertAfterMs,
    ...(o.senders ? { senders: o.senders } : {}),
    ...(o.log ? { log: o.log } : {}),
    ...(o.onMessage ? { onMessage: o.onMessage } : {}),
  });
  const runners = new Map<string, InboxRunner>();
  let stopped = false;
  let chain: Promise<void> = Promise.resolve();
  const reconcile = async (poke: boolean) => {
    if (stopped) return;
    const wanted = new Map((await intake.inboxes()).map((r) => [r.workspace, r]));
    for (const [ws, runner] of runners) {
      const row = wanted.get(ws);
      if (row && configKey(row) === runner.key) {
        if (poke) runner.poke();
        continue;
      }
      runners.delete(ws);
      await runner.stop();
    }
    for (const [ws, row] of wanted) if (!stopped && !runners.has(ws)) runners.set(ws, new InboxRunner(o, intake, row));
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
