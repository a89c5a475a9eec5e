/**
 * Mail into objectives: the routing both mail adapters share. The SMTP listener
 * (adapters/inbound-email.ts: the envelope's recipients) and the workspaces' IMAP inboxes
 * (services/inbox.ts: To and Cc) parse a message and hand it here; each objective whose
 * `inboundEmail` address is among the recipients gets one event (source `email`, id
 * `email:<Message-ID>`, so a message delivered twice runs nothing twice) through
 * `ObjectiveService.receiveInternalEvent`.
 */
import type { Logger } from 'pino';
import type { Db } from '../domain/db.js';
import { findInboundEmailOwner } from '../domain/store/objectives.js';
import type { ObjectiveEventResult, ObjectiveService } from './objectives.js';

/** Recipients of one message that are looked at, at most (the SMTP listener refuses more). */
export const MAX_EMAIL_RECIPIENTS = 20;

/** A parsed message as the mail adapters hand it on: its event id and what the event's payload carries. */
export interface InboundEmail {
  /** `email:<Message-ID>` (adapters/inbound-email.ts `emailEventId`). */
  eventId: string;
  from: string | null;
  subject: string | null;
  date: string | null;
  messageId: string | null;
  text: string;
  truncated: boolean;
}

export interface EmailDeliveryDeps {
  db: Db;
  objectives: Pick<ObjectiveService, 'receiveInternalEvent'>;
  log?: Logger;
  /** Each delivered message (tests, diagnostics). */
  onMessage?: (m: { objectiveId: string; eventId: string; result: ObjectiveEventResult }) => void;
}

/** The objective whose inbound address this is (any case), if any. */
export function inboundEmailOwner(db: Db, address: string): Promise<{ id: string; name: string; paused: boolean } | null> {
  return findInboundEmailOwner(db, address.toLowerCase());
}

/**
 * Hand a message to the objectives whose inbound address is among `recipients` (one event each).
 * `temporary`: objectives that could not take it now (paused, or an error; `failed`: an error):
 * a retry is safe.
 */
export async function deliverEmailToObjectives(
  deps: EmailDeliveryDeps,
  email: InboundEmail,
  recipients: readonly string[],
  extra: Record<string, unknown> = {},
): Promise<{ delivered: number; temporary: number; failed: number; objectives: string[] }> {
  const { eventId } = email;
  let delivered = 0;
  let temporary = 0;
  let failed = 0;
  const objectives: string[] = [];
  for (const to of [...new Set(recipients.map((r) => r.toLowerCase()))].slice(0, MAX_EMAIL_RECIPIENTS)) {
    try {
      const o = await findInboundEmailOwner(deps.db, to);
      if (!o) continue; // no objective's address (or deleted since RCPT)
      const payload = { from: email.from, to, subject: email.subject, date: email.date, messageId: email.messageId, text: email.text, ...(email.truncated ? { truncated: true } : {}), ...extra };
      const result = await deps.objectives.receiveInternalEvent(o.id, { source: 'email', eventId, payload });
      deps.log?.info({ objectiveId: o.id, eventId, status: result.status, ...('error' in result ? { error: result.error } : { runId: result.runId, duplicate: result.duplicate }) }, 'inbound email');
      deps.onMessage?.({ objectiveId: o.id, eventId, result });
      if (result.status === 200 || result.status === 202) {
        delivered++;
        objectives.push(o.name);
      } else if (result.status === 409) temporary++; // paused since RCPT
    } catch (err) {
      deps.log?.warn({ err, to }, 'an inbound email could not be delivered');
      temporary++;
      failed++;
    }
  }
  return { delivered, temporary, failed, objectives };
}
