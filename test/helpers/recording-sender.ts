/**
 * An in-memory ChannelSender that records what the outbox asks of a platform: for tests of
 * the ingress, the outbox and the approval flow that are about Steward's decisions, not about
 * one platform's API (the Telegram and Discord adapters have their own tests against local
 * doubles of those APIs).
 */
import type { ChannelSender, OutboundPart } from '../../domain/outbox.js';
import type { ConversationKey } from '../../common/ids.js';

export interface RecordedPost {
  id: string;
  chatId: string;
  text: string;
  buttons: string[];
  files: string[];
  deleted: boolean;
  edits: Array<{ text: string; buttons: string[] | null }>;
}

export interface RecordingSender extends ChannelSender {
  posts: RecordedPost[];
  /** Posts in one chat that are not deleted. */
  live(chatId: string): RecordedPost[];
  waitForPost(pred: (p: RecordedPost) => boolean, timeoutMs?: number): Promise<RecordedPost>;
}

export function recordingSender(opts: { limit?: number; editIntervalMs?: number } = {}): RecordingSender {
  const posts: RecordedPost[] = [];
  let n = 0;
  const byId = (id: string) => {
    const p = posts.find((x) => x.id === id);
    if (!p) throw new Error(`no post ${id}`);
    return p;
  };
  return {
    posts,
    editIntervalMs: opts.editIntervalMs ?? 0,
    split(text) {
      const limit = opts.limit ?? 4000;
      const out: string[] = [];
      for (let i = 0; i < Math.max(text.length, 1); i += limit) out.push(text.slice(i, i + limit));
      return out;
    },
    async send(conv: ConversationKey, part: OutboundPart) {
      const id = `m${++n}`;
      posts.push({
        id,
        chatId: conv.chatId,
        text: part.text,
        buttons: (part.buttons ?? []).flat().map((b) => b.id),
        files: part.files.map((f) => f.name),
        deleted: false,
        edits: [],
      });
      return id;
    },
    async edit(_conv, id, text, buttons) {
      byId(id).edits.push({ text, buttons: buttons === null ? null : (buttons ?? []).flat().map((b) => b.id) });
    },
    async remove(_conv, id) {
      byId(id).deleted = true;
    },
    live: (chatId) => posts.filter((p) => p.chatId === chatId && !p.deleted),
    async waitForPost(pred, timeoutMs = 20_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const found = posts.find(pred);
        if (found) return found;
        if (Date.now() > deadline) throw new Error(`timed out waiting for a post; posts: ${JSON.stringify(posts.map((p) => [p.chatId, p.text.slice(0, 60)]))}`);
        await new Promise((r) => setTimeout(r, 25));
      }
    },
  };
}
