/**
 * Skills and memory as chat commands, the CLI and the API use them: the skills a chat may use
 * (the operator's with its workspace's), and the memories the agent proposed: listed, shown,
 * approved or rejected (admins), forgotten (admins; a chat-scope memory also by the person it
 * was proposed for), and exported as JSONL with their receipts. Every input is checked here; a
 * refusal is a KnowledgeInputError and changes nothing.
 */
import type { ConversationKey } from '../common/ids.js';
import { isAdmin } from '../common/roles.js';
import type { Db } from '../domain/db.js';
import type { Actor } from '../domain/governance.js';
import type { KnowledgeIndex } from '../domain/knowledge/index-store.js';
import { contributorsOf, decideMemory, exportMemories, findMemory, forgetMemory, listMemories, MemoryIdSchema, recentMemories, reindexMemories, type MemoryRow } from '../domain/knowledge/memory.js';
import { loadSkillCatalogue, type SkillCatalogue } from '../domain/knowledge/skills.js';
import { receiptsByKeys, writeReceipt } from '../domain/receipts.js';
import { WorkspaceNameSchema, type WorkspaceService } from './workspaces.js';
import { ServiceInputError } from './requests.js';

export class KnowledgeInputError extends ServiceInputError {
  override name = 'KnowledgeInputError';
}

export interface KnowledgeServiceOptions {
  db: Db;
  knowledge: () => Promise<KnowledgeIndex>;
  /** The operator's skills folder (STEWARD_SKILLS_DIR). */
  skillsDir?: string;
  workspaces: Pick<WorkspaceService, 'forChat' | 'show'>;
  /** Nobody who shaped the turn that proposed a memory approves it (STEWARD_FORBID_SELF_APPROVAL; default true). */
  forbidSelfApproval?: boolean;
}

const sameChat = (m: MemoryRow, chat: ConversationKey) => m.platform === chat.platform && m.account === chat.account && m.chatId === chat.chatId;

export function createKnowledgeService(opts: KnowledgeServiceOptions) {
  const idOf = (raw: string): string => {
    const r = MemoryIdSchema.safeParse(raw);
    if (!r.success) throw new KnowledgeInputError(r.error.issues[0]!.message);
    return r.data;
  };
  /** A memory by id; with a chat, only one that chat sees (its own, its workspace's). */
  const visible = async (raw: string, chat?: ConversationKey): Promise<MemoryRow> => {
    const id = idOf(raw);
    const m = await findMemory(opts.db, id);
    const ws = chat ? await opts.workspaces.forChat(chat) : null;
    if (!m || (chat && !sameChat(m, chat) && !(m.scope === 'workspace' && ws && m.workspace === ws.name))) throw new KnowledgeInputError(`no memory ${id} here`, 404);
    return m;
  };
  const service = {
    /** The skills a chat may use: the operator's with its workspace's (the workspace's win). */
    async skills(chat: ConversationKey | null): Promise<SkillCatalogue & { workspace: string | null }> {
      const ws = chat ? await opts.workspaces.forChat(chat) : null;
      return { ...(await loadSkillCatalogue(opts.skillsDir, ws?.root)), workspace: ws?.name ?? null };
    },
    /** The operator's skills, with a workspace's when one is named (an unknown one is refused). */
    async skillsOf(workspace?: string): Promise<SkillCatalogue> {
      let root: string | undefined;
      if (workspace !== undefined) {
        try {
          root = (await opts.workspaces.show(workspace)).root;
        } catch (err) {
          if (err instanceof ServiceInputError) throw new KnowledgeInputError(err.message, err.status);
          throw err;
        }
      }
      return loadSkillCatalogue(opts.skillsDir, root);
    },
    /** A chat's memories (its own and its workspace's), pending and active, newest first. */
    async memories(chat: ConversationKey): Promise<MemoryRow[]> {
      const ws = await opts.workspaces.forChat(chat);
      return listMemories(opts.db, chat, ws?.name ?? null);
    },
    show: visible,
    /** The newest pending and active memories of every chat and workspace (1 to 200 of them): the console's list. */
    async recent(limit = 50): Promise<MemoryRow[]> {
      if (!Number.isInteger(limit) || limit < 1 || limit > 200) throw new KnowledgeInputError('limit: a whole number from 1 to 200');
      return recentMemories(opts.db, limit);
    },
    /** Approve or reject a pending memory (admins); an approved one is recalled from then on. */
    async decide(raw: string, decision: 'approve' | 'reject', by: Actor, chat?: ConversationKey): Promise<MemoryRow> {
      if (!isAdmin(by.role)) throw new KnowledgeInputError('deciding memories needs the admin role', 400);
      const m = await visible(raw, chat);
      if (decision === 'approve' && opts.forbidSelfApproval !== false && m.status === 'pending' && contributorsOf(m).includes(by.id)) {
        await writeReceipt(opts.db, { kind: 'approval.refused', actor: by.id, sessionId: m.sessionId, data: { memoryId: m.id, decision, by: by.name, why: 'shaped the proposing turn' } });
        throw new KnowledgeInputError(`you shaped the turn that proposed memory ${m.id} (a message in its batch, or steering), so you may not approve it (policy STEWARD_FORBID_SELF_APPROVAL); another admin decides`, 409);
      }
      const r = await decideMemory(opts.db, await opts.knowledge(), m.id, decision, by.name);
      if (typeof r === 'string') throw new KnowledgeInputError(r, 409);
      await writeReceipt(opts.db, { key: `memory:${m.id}:decision`, kind: 'memory.decision', sessionId: m.sessionId, actor: by.id, data: { id: m.id, decision, by: by.name } });
      return r;
    },
    /** Forget a memory: out of the index at once. Admins any; the person it was proposed for, their own chat-scope ones. */
    async forget(raw: string, by: Actor, chat?: ConversationKey): Promise<MemoryRow> {
      const m = await visible(raw, chat);
      if (m.status === 'forgotten' || m.status === 'rejected') throw new KnowledgeInputError(`memory ${m.id} is ${m.status} already`, 409);
      const own = m.scope === 'chat' && by.kind === 'person' && m.identityId === by.id;
      if (!isAdmin(by.role) && !own) throw new KnowledgeInputError(m.scope === 'workspace' ? "forgetting a workspace's memory needs the admin role" : 'only an admin, or the person it was proposed for, forgets a memory', 400);
      const r = await forgetMemory(opts.db, await opts.knowledge(), m, by.name);
      await writeReceipt(opts.db, { key: `memory:${m.id}:forget`, kind: 'memory.forget', sessionId: m.sessionId, actor: by.id, data: { id: m.id, by: by.name } });
      return r;
    },
    /** Index every active memory again (at start; the index is derived from the rows). */
    async reindexMemories(): Promise<number> {
      return reindexMemories(opts.db, await opts.knowledge());
    },
    /**
     * Every memory (of a workspace or a chat, or all), oldest first, as JSON lines: the memory
     * with its provenance and the receipts of its proposal, decision and forgetting.
     */
    async exportJsonl(filter: { workspace?: string; chat?: ConversationKey } = {}): Promise<string> {
      if (filter.workspace !== undefined) {
        const r = WorkspaceNameSchema.safeParse(filter.workspace);
        if (!r.success) throw new KnowledgeInputError(r.error.issues[0]!.message);
      }
      const rows = await exportMemories(opts.db, filter);
      const lines: string[] = [];
      for (let i = 0; i < rows.length; i += 500) {
        const part = rows.slice(i, i + 500);
        const keys = part.flatMap((m) => [`memory:${m.id}:propose`, `memory:${m.id}:decision`, `memory:${m.id}:forget`, `${m.turnId}:tool:${m.toolCallId}`]);
        const receipts = await receiptsByKeys(opts.db, keys);
        for (const m of part) {
          const own = receipts.filter((r) => r.key.startsWith(`memory:${m.id}:`) || r.key === `${m.turnId}:tool:${m.toolCallId}`);
          lines.push(
            JSON.stringify({
              ...m,
              decidedAt: m.decidedAt?.toISOString() ?? null,
              createdAt: m.createdAt.toISOString(),
              receipts: own.map((r) => ({ kind: r.kind, actor: r.actor, at: r.at, data: r.data })),
            }),
          );
        }
      }
      return lines.length ? `${lines.join('\n')}\n` : '';
    },
  };
  return service;
}

export type KnowledgeService = ReturnType<typeof createKnowledgeService>;
