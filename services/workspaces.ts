/**
 * The workspace service: what chat commands (and later the CLI and API) do with workspaces.
 * A workspace is a name and a folder: under the data directory (`workspaces/<name>`) unless
 * the operator names an existing directory. Creating one, or asking for it, starts its
 * indexing as Temporal work (`workspaceIndexWorkflow`, signal-with-start); a chat is bound to
 * one workspace at a time, and searches and opens files in it. Every input is checked here;
 * a refusal is a WorkspaceInputError and changes nothing.
 */
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import { z } from 'zod';
import { commandSpec, mayUse } from '../common/commands.js';
import type { ConversationKey } from '../common/ids.js';
import type { Actor } from '../common/roles.js';
import { PlatformSchema } from '../common/schemas.js';
import type { Db } from '../domain/db.js';
import type { KnowledgeIndex, SearchHit } from '../domain/knowledge/index-store.js';
import { isIndexable, resolveInWorkspace, WorkspacePathError } from '../domain/knowledge/paths.js';
import { getBlob } from '../domain/blobs.js';
import type { AttachmentRef } from '../common/schemas.js';
import {
  deleteWorkspaceBinding,
  findWorkspace,
  findWorkspaceBinding,
  insertWorkspace,
  listWorkspaces,
  upsertWorkspaceBinding,
  type WorkspaceRow,
} from '../domain/store/workspaces.js';
import { workspaceChangedSignal, workspaceIndexStatusQuery, workspaceIndexWorkflow, type WorkspaceChange, type WorkspaceIndexStatus } from '../workflows/knowledge/index-workspace.js';
import { checkWatchDirectory } from './objectives.js';
import { createInboxSettings } from './inbox.js';
import { ServiceInputError, type Requester } from './requests.js';

export class WorkspaceInputError extends ServiceInputError {
  override name = 'WorkspaceInputError';
}

export const WorkspaceNameSchema = z
  .string()
  .regex(/^[a-z0-9][a-z0-9_-]{0,63}$/, 'a workspace name uses lowercase letters, digits, - and _ (at most 64, starting with a letter or digit)');

/** A chat as the API and CLI name it (the HTTP API's own chats by default). */
export const ChatRefSchema = z.strictObject({
  chatId: z.string().trim().min(1).max(200),
  platform: PlatformSchema.default('http'),
  /** The bot account (the HTTP API's chats are under `default`). */
  account: z.string().trim().min(1).max(200).default('default'),
});

/** Sent files kept as text in a workspace (by type; `.md` and `.txt` names too). */
const RECEIVED_TEXT_TYPES = new Set(['text/plain', 'text/markdown', 'text/x-markdown']);

/** The text /open shows at most (the rest is cut, and says so). */
export const OPEN_MAX_BYTES = 16 * 1024;

export interface WorkspaceServiceOptions {
  db: Db;
  client: Client;
  /** The queue of the background worker, which runs the indexing workflow and its activities. */
  taskQueue: string;
  dataDir: string;
  knowledge: () => Promise<KnowledgeIndex>;
}

/** A workspace's index: what it holds, and the state of its indexing (see `indexStatus`). */
export interface WorkspaceIndexState {
  documents: number;
  chunks: number;
  state: 'running' | 'done' | 'failed' | 'never';
  /** The last or running round's counts. */
  run?: WorkspaceIndexStatus;
  startedAt?: string;
  lastIndexedAt?: string;
  error?: string;
}

export const indexWorkflowId = (workspace: string) => `workspace-index:${workspace}`;

/**
 * A workspace's index: what it holds, and its indexing workflow's state: running, done
 * (`lastIndexedAt`: when its last run ended), failed (its run ended without finishing: failed,
 * timed out, cancelled or terminated; `error` says how), or never (no run on record).
 */
async function readIndexState(opts: Pick<WorkspaceServiceOptions, 'client' | 'knowledge'>, name: string): Promise<WorkspaceIndexState> {
  const stats = await (await opts.knowledge()).stats(name);
  const handle = opts.client.workflow.getHandle(indexWorkflowId(name));
  const d = await handle.describe().catch(() => undefined);
  if (!d) return { ...stats, state: 'never' };
  const startedAt = d.startTime.toISOString();
  if (d.status.name === 'RUNNING') {
    const run = await handle.query(workspaceIndexStatusQuery).catch(() => undefined);
    return { ...(run ? { run } : {}), ...stats, state: 'running', startedAt };
  }
  const closed = d.closeTime ? { lastIndexedAt: d.closeTime.toISOString() } : {};
  if (d.status.name === 'COMPLETED') {
    const run = await handle.result().catch(() => undefined);
    return { ...(run ? { run } : {}), ...stats, state: 'done', startedAt, ...closed };
  }
  const error = await handle.result().then(
    () => d.status.name.toLowerCase(),
    (err: unknown) => {
      const e = err as Error & { cause?: Error };
      return `${d.status.name.toLowerCase()}: ${(e.cause?.message ?? e.message).slice(0, 500)}`;
    },
  );
  return { ...stats, state: 'failed', startedAt, ...closed, error };
}

export function createWorkspaceService(opts: WorkspaceServiceOptions) {
  const name = (raw: string): string => {
    const r = WorkspaceNameSchema.safeParse(raw);
    if (!r.success) throw new WorkspaceInputError(r.error.issues[0]!.message);
    return r.data;
  };
  const existing = async (raw: string): Promise<WorkspaceRow> => {
    const ws = await findWorkspace(opts.db, name(raw));
    if (!ws) throw new WorkspaceInputError(`no workspace ${raw} (/workspace create ${raw} makes one)`, 404);
    return ws;
  };
  const bound = async (chat: ConversationKey): Promise<WorkspaceRow> => {
    const b = await findWorkspaceBinding(opts.db, chat);
    const ws = b ? await findWorkspace(opts.db, b.workspace) : null;
    if (!ws) throw new WorkspaceInputError('this chat has no workspace (/workspace use <name>, or /workspace create <name>)', 404);
    return ws;
  };

  const listeners = new Set<() => void>();
  const changed = () => {
    for (const l of listeners) l();
  };
  const service = {
    /** Be told when workspaces are created (the watchers follow); returns the unsubscribe. */
    onChange(listener: () => void): () => void {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    /** Create a workspace (its folder made under the data directory unless `root` names one) and index it. */
    async create(rawName: string, root: string | undefined, by: Requester): Promise<WorkspaceRow> {
      const n = name(rawName);
      let folder: string;
      if (root !== undefined) {
        if (!path.isAbsolute(root)) throw new WorkspaceInputError(`the folder must be an absolute path (got ${root})`);
        const refused = await checkWatchDirectory(root);
        if (refused) throw new WorkspaceInputError(refused);
        folder = path.resolve(root);
      } else {
        folder = path.join(path.resolve(opts.dataDir), 'workspaces', n);
      }
      if (await findWorkspace(opts.db, n)) throw new WorkspaceInputError(`a workspace named ${n} exists already`, 409);
      if (root === undefined) await mkdir(folder, { recursive: true });
      if (!(await insertWorkspace(opts.db, { name: n, root: folder, createdBy: by.name }))) throw new WorkspaceInputError(`a workspace named ${n} exists already`, 409);
      await service.reindex(n);
      changed();
      return (await findWorkspace(opts.db, n))!;
    },
    list: () => listWorkspaces(opts.db),
    show: existing,
    /** The chat's workspace, or null. */
    async forChat(chat: ConversationKey): Promise<WorkspaceRow | null> {
      const b = await findWorkspaceBinding(opts.db, chat);
      return b ? findWorkspace(opts.db, b.workspace) : null;
    },
    async bind(chat: ConversationKey, rawName: string, by: Requester): Promise<WorkspaceRow> {
      const ws = await existing(rawName);
      await upsertWorkspaceBinding(opts.db, chat, ws.name, by.name);
      return ws;
    },
    unbind: (chat: ConversationKey) => deleteWorkspaceBinding(opts.db, chat),
    /** The workspace's IMAP inbox: set, show, clear (services/inbox.ts). */
    inbox: createInboxSettings({ db: opts.db, existing, changed, inputError: (m, status) => new WorkspaceInputError(m, status) }),
    /** A chat named by the API or CLI, checked: platform, account and chat id. */
    chatOf(input: unknown): ConversationKey {
      const r = ChatRefSchema.safeParse(input);
      if (!r.success) throw new WorkspaceInputError(`the chat: ${r.error.issues.map((i) => `${i.path.join('.') || '(body)'}: ${i.message}`).join('; ')}`);
      return r.data;
    },
    /** Index the workspace again: the files given (workspace-relative), or all of them. */
    async reindex(rawName: string, change: WorkspaceChange = {}): Promise<void> {
      const n = name(rawName);
      await opts.client.workflow.signalWithStart(workspaceIndexWorkflow, {
        workflowId: indexWorkflowId(n),
        taskQueue: opts.taskQueue,
        args: [{ workspace: n }],
        signal: workspaceChangedSignal,
        signalArgs: [change],
      });
    },
    /** Index a workspace again for `by`, who needs the role of the chat's `/workspace reindex` (else 409). */
    async reindexAs(rawName: string, by: Actor): Promise<WorkspaceRow> {
      const spec = commandSpec('workspace')!;
      if (!mayUse(spec, by.role)) throw new WorkspaceInputError(`reindexing a workspace needs the ${spec.minRole ?? 'admin'} role (as /workspace reindex)`, 409);
      const ws = await existing(rawName);
      await service.reindex(ws.name);
      return ws;
    },
    /**
     * Index every workspace again (at start): changes made while no watcher ran are caught up,
     * and an index whose layout changed (dropped at open) is rebuilt. Unchanged files cost a
     * hash each. Returns the workspaces asked.
     */
    async catchUp(): Promise<string[]> {
      const all = await listWorkspaces(opts.db);
      for (const w of all) await service.reindex(w.name);
      return all.map((w) => w.name);
    },
    /** The indexing's state and what the index holds (see `readIndexState`). */
    indexStatus: async (rawName: string): Promise<WorkspaceIndexState> => readIndexState(opts, (await existing(rawName)).name),
    /**
     * Keep the files someone sent to a chat in its workspace (`received/`): text and Markdown as
     * files of their own (indexed like any other), anything else as a Markdown note that
     * references it (name, type, size, SHA-256, who, when), so it can be found. Returns the
     * workspace paths written; a chat without a workspace keeps nothing.
     */
    async keepReceived(chat: ConversationKey, files: AttachmentRef[], from: string): Promise<string[]> {
      const ws = await service.forChat(chat);
      if (!ws || files.length === 0) return [];
      const dir = path.join(ws.root, 'received');
      await mkdir(dir, { recursive: true });
      const day = new Date().toISOString().slice(0, 10);
      const written: string[] = [];
      for (const f of files) {
        const safe = (f.name.replace(/[^A-Za-z0-9._() -]/g, '_').replace(/^[.\s]+/, '').slice(0, 100) || 'file').trim();
        const text = RECEIVED_TEXT_TYPES.has(f.mediaType) || /\.(md|markdown|txt)$/i.test(safe);
        const base = text ? (isIndexable(safe) ? safe : `${safe}.txt`) : `${safe}.ref.md`;
        let name = `${day}-${base}`;
        const body = text
          ? (await getBlob(opts.db, f.hash)).data
          : Buffer.from(`# ${f.name}\n\nA file sent to this chat by ${from} on ${new Date().toISOString()}: ${f.mediaType}, ${f.size} bytes, SHA-256 ${f.hash}. Steward keeps it; it is not in this folder.\n`);
        const existing = await readFile(path.join(dir, name)).catch(() => undefined);
        if (existing?.equals(body)) continue;
        if (existing) name = name.replace(/(\.[^.]+)$/, `-${f.hash.slice(0, 8)}$1`);
        await writeFile(path.join(dir, name), body, { flag: 'w' });
        written.push(`received/${name}`);
      }
      if (written.length) await service.reindex(ws.name, { paths: written });
      return written;
    },
    /** The best excerpts of the chat's workspace for `query`. */
    async search(chat: ConversationKey, query: string, limit = 5): Promise<{ workspace: string; hits: SearchHit[] }> {
      return service.searchIn((await bound(chat)).name, query, limit);
    },
    /** The best excerpts of a workspace for `query` (1 to 50 of them). */
    async searchIn(rawName: string, query: string, limit = 5): Promise<{ workspace: string; hits: SearchHit[] }> {
      const ws = await existing(rawName);
      if (query.trim() === '') throw new WorkspaceInputError('what to search for: /search <words>');
      if (query.length > 500) throw new WorkspaceInputError('a query is at most 500 characters');
      if (!Number.isInteger(limit) || limit < 1 || limit > 50) throw new WorkspaceInputError('limit: a whole number from 1 to 50');
      return { workspace: ws.name, hits: await (await opts.knowledge()).search(ws.name, query, limit) };
    },
    /** A file of the chat's workspace (text, up to OPEN_MAX_BYTES). */
    async open(chat: ConversationKey, relative: string): Promise<{ workspace: string; path: string; text: string; truncated: boolean; bytes: number }> {
      return service.openIn((await bound(chat)).name, relative);
    },
    /** A file of a workspace (text, up to OPEN_MAX_BYTES). */
    async openIn(rawName: string, relative: string): Promise<{ workspace: string; path: string; text: string; truncated: boolean; bytes: number }> {
      const ws = await existing(rawName);
      let file: { path: string; relative: string };
      try {
        file = await resolveInWorkspace(ws.root, relative);
      } catch (err) {
        if (err instanceof WorkspacePathError) throw new WorkspaceInputError(err.message, /^no file/.test(err.message) ? 404 : 400);
        throw err;
      }
      const st = await stat(file.path);
      if (!st.isFile()) throw new WorkspaceInputError(`${file.relative} is not a file`);
      const bytes = await readFile(file.path);
      if (bytes.includes(0)) throw new WorkspaceInputError(`${file.relative} is not a text file (${st.size} bytes)`);
      const text = bytes.subarray(0, OPEN_MAX_BYTES).toString('utf8');
      return { workspace: ws.name, path: file.relative, text, truncated: bytes.length > OPEN_MAX_BYTES, bytes: bytes.length };
    },
  };
  return service;
}

export type WorkspaceService = ReturnType<typeof createWorkspaceService>;
