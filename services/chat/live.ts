/**
 * What a chat's event stream (adapters/http/events.ts) reads besides the transcript and the
 * status: the running model step's text as it streams (the live draft the worker keeps in the
 * database, domain/live-drafts.ts: the stream is served by the API process, which in the cluster
 * shape is not the worker), and an approval as the operator inbox shows it (the chat's exact
 * request text, its state, who decided).
 */
import { OPERATOR } from '../../common/roles.js';
import type { Db } from '../../domain/db.js';
import { heldSecrets, maskHeldSecretsGrowing, type HeldSecret } from '../../domain/secrets.js';
import { findLiveDraft } from '../../domain/live-drafts.js';
import type { InboxItem, OperatorInbox } from '../decisions.js';
import { ServiceInputError } from '../requests.js';

/** The running model step's text so far. */
export interface LiveDraft {
  turnId: string;
  /** The model step's key (`model:<turnId>:<step>`). */
  stepKey: string;
  text: string;
  updatedAt: string;
}

/** The data of a `partial` event: the running model step's text so far (empty: the draft is over). */
export interface PartialEvent {
  turnId: string;
  stepKey: string;
  text: string;
}

/** An approval as the chat event stream sends it. */
export interface LiveApproval {
  id: string;
  /** pending, approved, denied, expired, cancelled */
  status: string;
  /** One line: what is proposed. */
  title: string;
  /** The request exactly as the chat shows it to the admins. */
  text: string;
  /** Who decided and how, once decided. */
  decided: InboxItem['decided'];
}

export interface ChatLive {
  /** The session's running model step's text, masked; undefined when no step is streaming (or it wrote nothing yet). */
  draft(sessionId: string): Promise<LiveDraft | undefined>;
  /** The approval (of a chat turn) with this id; undefined when there is none. */
  approval(approvalId: string): Promise<LiveApproval | undefined>;
}

export interface ChatLiveDeps {
  db: Db;
  /** The operator inbox: an approval's text and state (absent: no approval events). */
  inbox?: Pick<OperatorInbox, 'item'>;
  /** Steward's own secrets from its configuration (the environment's are read by the registry). */
  heldSecrets?: readonly HeldSecret[];
}

export function createChatLive(deps: ChatLiveDeps): ChatLive {
  return {
    async draft(sessionId) {
      const row = await findLiveDraft(deps.db, sessionId);
      if (!row) return undefined;
      // masked where it was written (the worker's secrets) and again here (this process's)
      const text = maskHeldSecretsGrowing(row.text, heldSecrets(deps.heldSecrets ?? []));
      return { turnId: row.turnId, stepKey: row.stepKey, text, updatedAt: row.updatedAt.toISOString() };
    },
    async approval(approvalId) {
      if (!deps.inbox) return undefined;
      try {
        // the operator sees every item; what the stream sends does not depend on who asks
        const item = await deps.inbox.item(`approval:${approvalId}`, OPERATOR);
        return { id: approvalId, status: item.status, title: item.title, text: item.text, decided: item.decided };
      } catch (err) {
        if (err instanceof ServiceInputError) return undefined;
        throw err;
      }
    },
  };
}
