/**
 * The system prompt in layers, in this order: Steward's own (STEWARD_SYSTEM_PROMPT replaces
 * it), the operator's file (STEWARD_PROMPT_FILE), the chat's workspace's file
 * (`.steward/prompt.md` in its folder: a dot directory, so never indexed as knowledge) and the
 * chat's own (/prompt set, admins). Files are read when they change (by mtime), each up to
 * 16 KB; the chat's own layer and its workspace are looked up at most once per `ttlMs`, so a
 * turn costs no query for them in steady state.
 */
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import type { ConversationKey } from '../../common/ids.js';
import type { Db } from '../db.js';
import { findChatPrompt } from '../store/prompts.js';
import { findWorkspace, findWorkspaceBinding } from '../store/workspaces.js';
import { ttlCache } from '../ttl-cache.js';

export const LAYER_MAX_BYTES = 16 * 1024;
export const WORKSPACE_PROMPT_FILE = '.steward/prompt.md';

export interface PromptLayer {
  layer: 'steward' | 'operator' | 'workspace' | 'chat';
  /** Where it comes from, for /prompt show. */
  source: string;
  text: string;
}

export interface PromptLayers {
  /** The layers that have text, in order. */
  layers(chat: ConversationKey): Promise<PromptLayer[]>;
  /** Forget what is cached for a chat (its layer or its workspace changed here). */
  forget(chat: ConversationKey): void;
}

const files = new Map<string, { mtimeMs: number; text: string }>();

/** A prompt file's text (up to LAYER_MAX_BYTES), re-read when its mtime changes; '' when it is missing. */
async function fileText(file: string): Promise<string> {
  let st;
  try {
    st = await stat(file);
  } catch {
    return '';
  }
  const hit = files.get(file);
  if (hit && hit.mtimeMs === st.mtimeMs) return hit.text;
  const text = (await readFile(file)).subarray(0, LAYER_MAX_BYTES).toString('utf8').trim();
  files.set(file, { mtimeMs: st.mtimeMs, text });
  return text;
}

export function createPromptLayers(opts: {
  db: Db;
  systemPrompt: string;
  operatorFile?: string;
  ttlMs?: number;
  /** The chat's workspace from a lookup the caller already keeps (the retriever's), else looked up here. */
  workspaceOf?: (chat: ConversationKey) => Promise<{ name: string; root: string } | null>;
}): PromptLayers {
  const ttl = opts.ttlMs ?? 5000;
  const cache = ttlCache<string, { chat: string | null; workspace: { name: string; root: string } | null }>({ ttlMs: ttl });
  const workspaceOf =
    opts.workspaceOf ??
    (async (c: ConversationKey) => {
      const binding = await findWorkspaceBinding(opts.db, c);
      const ws = binding ? await findWorkspace(opts.db, binding.workspace) : null;
      return ws ? { name: ws.name, root: ws.root } : null;
    });
  const keyOf = (chat: ConversationKey) => `${chat.platform}\u0000${chat.account}\u0000${chat.chatId}`;
  const chatState = (chat: ConversationKey) =>
    cache.get(keyOf(chat), async () => {
      const [own, workspace] = await Promise.all([findChatPrompt(opts.db, chat), workspaceOf(chat)]);
      return { chat: own?.text ?? null, workspace };
    });
  return {
    async layers(chat) {
      const out: PromptLayer[] = [{ layer: 'steward', source: 'Steward', text: opts.systemPrompt }];
      if (opts.operatorFile) {
        const text = await fileText(opts.operatorFile);
        if (text) out.push({ layer: 'operator', source: opts.operatorFile, text });
      }
      const s = await chatState(chat);
      if (s.workspace) {
        const file = path.join(s.workspace.root, WORKSPACE_PROMPT_FILE);
        const text = await fileText(file);
        if (text) out.push({ layer: 'workspace', source: `workspace ${s.workspace.name} (${WORKSPACE_PROMPT_FILE})`, text });
      }
      if (s.chat) out.push({ layer: 'chat', source: 'this chat (/prompt set)', text: s.chat });
      return out;
    },
    forget(chat) {
      cache.delete(keyOf(chat));
    },
  };
}

/** The system prompt the model gets: the layers, each after a line naming it. */
export function layeredSystemPrompt(layers: PromptLayer[]): string {
  if (layers.length === 1) return layers[0]!.text;
  return layers.map((l, i) => (i === 0 ? l.text : `Instructions from ${l.layer === 'operator' ? 'the operator' : l.layer === 'workspace' ? "this chat's workspace" : "this chat's admins"}:\n${l.text}`)).join('\n\n');
}
