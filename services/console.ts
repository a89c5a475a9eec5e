/**
 * What the operator console does with chats: the list of sessions, one chat's transcript and
 * status, and Stop and Steer. Stop and Steer go through the same intake as every chat platform
 * and the HTTP API (`/stop`, `/steer <text>` as the chat's commands, services/chat/commands.ts),
 * so the session's own stop signal and steer update do the work and the role rules are the
 * intake's.
 */
import { randomUUID } from 'node:crypto';
import { sessionWorkflowId } from '../common/ids.js';
import type { Db } from '../domain/db.js';
import { readTranscript, recentSessions } from '../domain/transcript.js';
import type { Ingress, IngressResult } from './chat/intake.js';
import type { SessionStatusView } from './chat/status.js';
import { transcriptEntry, type TranscriptEntry } from './chat/transcript.js';

export interface ChatSummary {
  sessionId: string;
  /** The HTTP chat id, when the session is an HTTP API chat of this account (the console opens those). */
  chatId?: string;
  lastAt: string;
  messages: number;
}

/** A transcript entry with the turn it belongs to (a reply's: its turn, which the chat page offers to replay or fork before). */
export type ConsoleTranscriptEntry = TranscriptEntry & { turnId?: string };

export interface ConsoleChats {
  list(): Promise<ChatSummary[]>;
  transcript(chatId: string, limit?: number): Promise<ConsoleTranscriptEntry[]>;
  status(chatId: string): Promise<SessionStatusView>;
  /** `/stop` to the chat, from `user` (the operator: `api`, as the HTTP API). */
  stop(chatId: string, user: string): Promise<IngressResult>;
  /** `/steer <text>` to the chat. */
  steer(chatId: string, text: string, user: string): Promise<IngressResult>;
}

export function createConsoleChats(deps: { ingress: Ingress; db: Db; account: string }): ConsoleChats {
  const sid = (chatId: string) => sessionWorkflowId({ platform: 'http', account: deps.account, chatId });
  const prefix = sid('');
  const command = (chatId: string, text: string, user: string) =>
    deps.ingress.handle({ id: randomUUID(), platform: 'http', account: deps.account, chatId, user, text, at: new Date().toISOString() });
  return {
    async list() {
      return (await recentSessions(deps.db)).map((s) => ({ ...s, ...(s.sessionId.startsWith(prefix) ? { chatId: s.sessionId.slice(prefix.length) } : {}) }));
    },
    // the intake's transcript (services/chat/transcript.ts) with each entry's turn
    transcript: async (chatId, limit = 200) => (await readTranscript(deps.db, sid(chatId), { limit })).map((r) => ({ ...transcriptEntry(r), ...(r.turnId ? { turnId: r.turnId } : {}) })),
    status: (chatId) => deps.ingress.status(sid(chatId)),
    stop: (chatId, user) => command(chatId, '/stop', user),
    steer: (chatId, text, user) => command(chatId, `/steer ${text}`, user),
  };
}
