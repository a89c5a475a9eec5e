/**
 * What a turn's model step and tools take from the knowledge beyond grounding: the skills the
 * message asks for (injected once per session, by the ledger the workflow keeps), the memories
 * it recalls, and the `remember` tool's proposals. Each costs the turn nothing when there is
 * nothing to find: the skill catalogue and whether a chat has memories are looked up at most
 * once per `ttlMs` per chat.
 */
import type { ConversationKey } from '../../common/ids.js';
import { lowestRole, RoleSchema, type Role } from '../../common/roles.js';
import type { RememberInput } from '../../common/tools.js';
import type { z } from 'zod';
import type { Db } from '../db.js';
import { findIdentitiesByIds, notifyAdmins } from '../governance.js';
import type { Senders } from '../outbox.js';
import { writeReceipt } from '../receipts.js';
import type { ToolOutcome } from '../tools/calls.js';
import type { Retriever } from './grounding.js';
import type { KnowledgeIndex } from './index-store.js';
import { memoriesText, proposeMemory, recallMemories, type Contributor, type MemoryApproval, type MemoryRow } from './memory.js';
import { skillsPromptText, type Skill, type SkillMatcher } from './skills.js';
import { ttlCache } from '../ttl-cache.js';

export interface TurnKnowledgeOptions {
  db: Db;
  knowledge: () => Promise<KnowledgeIndex>;
  retriever: Retriever;
  skills?: SkillMatcher;
  /** Who waits for an admin when proposing a memory (default: members). */
  memoryApproval?: MemoryApproval;
  /** Memories recalled per model step at most (0: none). */
  recall?: number;
  senders?: Senders;
  ttlMs?: number;
}

/** Who a turn's sender is: an identity (governed platforms) or, on the operator's own chats, the operator. */
export async function personOf(db: Db, who: string | null | undefined): Promise<{ name: string; identityId: string | null; role: Role }> {
  if (who) {
    const [identity] = await findIdentitiesByIds(db, [who]);
    if (identity) {
      const role = RoleSchema.safeParse(identity.role);
      return { name: identity.name, identityId: identity.id, role: role.success ? role.data : 'viewer' };
    }
  }
  // the HTTP API, the CLI and the openharness shells without identities act as the operator
  return { name: who ?? 'the operator', identityId: null, role: 'overlord' };
}

export interface SkillUse {
  injected: Skill[];
  /** Matched and already in the session's ledger at this version. */
  applied: Skill[];
}

export function createTurnKnowledge(opts: TurnKnowledgeOptions) {
  const ttl = opts.ttlMs ?? 5000;
  const recallLimit = opts.recall ?? 3;
  const hasMemories = ttlCache<string, boolean>({ ttlMs: ttl });
  const chatKey = (chat: ConversationKey) => `${chat.platform}\u0000${chat.account}\u0000${chat.chatId}`;
  const anyMemory = (chat: ConversationKey, workspace: string | null): Promise<boolean> =>
    hasMemories.get(`${chatKey(chat)}\u0000${workspace ?? ''}`, async () => {
      const n = await opts.db.memory.count({
        where: { status: 'active', OR: [{ scope: 'chat', platform: chat.platform, account: chat.account, chatId: chat.chatId }, ...(workspace ? [{ scope: 'workspace', workspace }] : [])] },
      });
      return n > 0;
    });

  return {
    /**
     * The skills a step's message asks for, split by the session's ledger: the ones to inject
     * now (not in it, or at another version) and the ones already given.
     */
    async skillsFor(chat: ConversationKey, query: string, identityId: string | null, ledger: Record<string, string>, requesters?: readonly string[]): Promise<SkillUse> {
      if (!opts.skills) return { injected: [], applied: [] };
      const ws = await opts.retriever.workspaceOf(chat);
      // no skills (the usual case): no lookup of the sender
      if ((await opts.skills.catalogue(ws)).skills.length === 0) return { injected: [], applied: [] };
      // a turn several people shaped gets the skills the least of them may use
      const role = requesters?.length
        ? (lowestRole(await Promise.all(requesters.map(async (who) => (await personOf(opts.db, who)).role))) ?? 'viewer')
        : (await personOf(opts.db, identityId)).role;
      const matched = await opts.skills.match(ws, query, role);
      return { injected: matched.filter((s) => ledger[s.name] !== s.version), applied: matched.filter((s) => ledger[s.name] === s.version) };
    },
    skillsText(use: SkillUse, ledger: Record<string, string>): string | undefined {
      const now = new Set(use.injected.map((s) => s.name));
      return skillsPromptText(
        use.injected,
        Object.entries(ledger)
          .filter(([name]) => !now.has(name))
          .map(([name, version]) => ({ name, version })),
      );
    },
    /** The memories a step's words recall (the chat's and its workspace's). */
    async recall(chat: ConversationKey, query: string): Promise<MemoryRow[]> {
      if (recallLimit <= 0 || query.trim() === '') return [];
      const ws = await opts.retriever.workspaceOf(chat);
      if (!(await anyMemory(chat, ws?.name ?? null))) return [];
      return recallMemories(opts.db, await opts.knowledge(), chat, ws?.name ?? null, query, recallLimit);
    },
    recallText: memoriesText,
    /** The remember tool: a proposal recorded once per call, receipted, and put to the admins when it waits. */
    async remember(
      ctx: { conversation: ConversationKey; sessionId: string; turnId: string; toolCallId: string; requestedBy?: string; requesters?: readonly string[] },
      input: z.infer<typeof RememberInput>,
    ): Promise<ToolOutcome> {
      const ws = await opts.retriever.workspaceOf(ctx.conversation);
      if (input.scope === 'workspace' && !ws) {
        return { text: 'Not remembered: this chat has no workspace; use the scope "chat".', ok: false, detail: { error: 'no workspace' } };
      }
      const proposer = await personOf(opts.db, ctx.requestedBy);
      // everyone who shaped the turn (its batch's senders, its steerers): each must be one whose
      // proposal would not wait, else it waits; none of them may approve it
      const contributors: Contributor[] | undefined = ctx.requesters
        ? await Promise.all(
            [...new Set(ctx.requesters)].map(async (who) => {
              const p = await personOf(opts.db, who);
              return { id: p.identityId ?? who, name: p.name, role: p.role };
            }),
          )
        : undefined;
      const { memory, created } = await proposeMemory(
        opts.db,
        await opts.knowledge(),
        { conversation: ctx.conversation, workspace: ws?.name ?? null, input, proposer, ...(contributors ? { contributors } : {}), sessionId: ctx.sessionId, turnId: ctx.turnId, toolCallId: ctx.toolCallId },
        opts.memoryApproval ?? 'members',
      );
      if (created) {
        await writeReceipt(opts.db, {
          key: `memory:${memory.id}:propose`,
          kind: 'memory.propose',
          sessionId: ctx.sessionId,
          actor: proposer.identityId ?? proposer.name,
          data: { id: memory.id, scope: memory.scope, workspace: memory.workspace, kind: memory.kind, status: memory.status, turnId: ctx.turnId, chars: memory.text.length, ...(contributors && contributors.length > 1 ? { contributors: contributors.map((c) => c.id) } : {}) },
        });
        hasMemories.clear();
        if (memory.status === 'pending') {
          const where = memory.scope === 'workspace' ? `the workspace ${memory.workspace}` : `the chat ${ctx.conversation.platform}:${ctx.conversation.chatId}`;
          await notifyAdmins(opts.db, opts.senders ?? {}, {
            key: `memory:${memory.id}:ask`,
            text: `**Memory to approve** (${memory.id}, a ${memory.kind} for ${where}), proposed by the agent for ${proposer.name}:\n"${memory.text}"\nKeep it with /memory approve ${memory.id}, or drop it with /memory reject ${memory.id}.${contributors && contributors.length > 1 ? ` It came from a turn that ${[...new Set(contributors.map((c) => c.name))].join(', ')} shaped: none of them may approve it.` : ''}`,
          });
        }
      }
      const detail = { id: memory.id, scope: memory.scope, kind: memory.kind, status: memory.status };
      return memory.status === 'active'
        ? { text: `Remembered as ${memory.id} (${memory.kind}, ${memory.scope} scope): it will be recalled when it matters.`, ok: true, detail }
        : { text: `Proposed as ${memory.id}: it waits for an admin's approval before it is recalled.`, ok: true, detail };
    },
  };
}

export type TurnKnowledge = ReturnType<typeof createTurnKnowledge>;
