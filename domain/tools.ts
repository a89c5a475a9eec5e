/**
 * Running the agent's tools. Each tool call's input is read from the model step's message
 * blob (history carries only its hash), validated with zod, and run keyed by the turn and
 * call id, so a retried activity repeats no effect. The result goes back to the model as a
 * tool message, stored as a blob.
 */
import type { ToolModelMessage } from 'ai';
import type { z } from 'zod';
import { sessionWorkflowId, type ConversationKey } from '../common/ids.js';
import type { Platform } from '../common/schemas.js';
import {
  HttpRequestInput,
  isToolName,
  PostToChatInput,
  ReadWorkspaceFileInput,
  RememberInput,
  RunCommandInput,
  SearchWorkspaceInput,
  SaveNoteInput,
  SendEmailInput,
  SendFileInput,
  StartRepoChangeInput,
  TOOLS,
  type ToolName,
} from '../common/tools.js';
import { performActionOnce, type ActionSettings, type HostResolver, type StartRepoChange } from './actions.js';
import type { AttachmentRef } from '../common/schemas.js';
import { putBlob } from './blobs.js';
import { boundHits, groundingText } from './knowledge/grounding.js';
import type { SearchHit } from './knowledge/index-store.js';
import { WorkspacePathError } from './knowledge/paths.js';
import { neutralise, wrapUntrusted } from '../common/untrusted.js';
import { mcpDisplayName, parseMcpWireName } from '../common/mcp.js';
import { redact } from './redaction.js';
import type { LoadedToolCall, ToolOutcome } from './tools/calls.js';
import type { Db } from './db.js';
import { deliverOnce, type Senders } from './outbox.js';

/** Validate a call's input; the error text goes back to the model. */
export function validateToolCall(name: string, input: unknown): { ok: true; tool: ToolName; input: unknown } | { ok: false; error: string } {
  if (!isToolName(name)) return { ok: false, error: `There is no tool named ${name}. Tools: ${Object.keys(TOOLS).join(', ')}.` };
  const r = TOOLS[name].input.safeParse(input);
  if (!r.success) return { ok: false, error: `Invalid input for ${name}: ${r.error.issues.map((i) => `${i.path.join('.') || '(input)'}: ${i.message}`).join('; ')}` };
  return { ok: true, tool: name, input: r.data };
}

/**
 * One line that says what a call does. `hide` decides what of the model's values is hidden:
 * secret-looking values by default (the proposer's chat, receipts); approvers get the line
 * with only Steward's own secrets masked, beside the exact request.
 */
export function describeToolCall(name: string, input: unknown, hide: (value: unknown) => unknown = redact): string {
  const text = (v: string) => String(hide(v));
  if (name === 'post_to_chat') {
    const p = PostToChatInput.safeParse(input);
    if (p.success) return `post to the chat "${p.data.chat}": ${JSON.stringify(String(hide(p.data.text)).slice(0, 300))}`;
  }
  if (name === 'http_request') {
    const p = HttpRequestInput.safeParse(input);
    if (p.success) {
      const headers = Object.keys(p.data.headers ?? {});
      const extras = [headers.length ? `headers ${headers.join(', ')}` : '', p.data.body !== undefined ? `a ${p.data.body.length}-character body` : ''].filter(Boolean);
      return `make an HTTP ${p.data.method} request to ${text(p.data.url).slice(0, 300)}${extras.length ? ` with ${extras.join(' and ')}` : ''}`;
    }
  }
  if (name === 'send_email') {
    const p = SendEmailInput.safeParse(input);
    if (p.success) {
      return `send an email to ${p.data.to.join(', ')}${p.data.cc?.length ? ` (cc ${p.data.cc.join(', ')})` : ''} with the subject ${JSON.stringify(text(p.data.subject))}`;
    }
  }
  if (name === 'run_command') {
    const p = RunCommandInput.safeParse(input);
    if (p.success) return `run the command ${JSON.stringify(hide(p.data.argv)).slice(0, 300)} in the sandbox`;
  }
  if (name === 'start_repo_change') {
    const p = StartRepoChangeInput.safeParse(input);
    if (p.success) {
      return `start a change on the repository ${p.data.repo}${p.data.base ? ` (base ${p.data.base})` : ''}: ${JSON.stringify(text(p.data.request).slice(0, 300))}`;
    }
  }
  const mcp = parseMcpWireName(name);
  if (mcp) return `call the MCP tool ${mcpDisplayName(mcp.server, mcp.tool)} with ${JSON.stringify(hide(input)).slice(0, 300)}`;
  return `${name} ${JSON.stringify(hide(input)).slice(0, 300)}`;
}

export function toolResultMessage(call: { toolCallId: string; toolName: string }, text: string): ToolModelMessage {
  return { role: 'tool', content: [{ type: 'tool-result', toolCallId: call.toolCallId, toolName: call.toolName, output: { type: 'text', value: text } }] };
}

export interface ToolRunContext {
  db: Db;
  senders: Senders;
  turnId: string;
  sessionId: string;
  conversation: ConversationKey;
  /** Proposed actions: HTTP, SMTP and command policy. */
  actions: ActionSettings;
  startRepoChange?: StartRepoChange;
  workflow?: { workflowId?: string; runId?: string };
  /** Everyone who shaped the turn (identity ids, or user names): a change it starts carries them. */
  requesters?: readonly string[];
  /** Tests: a resolver standing in for DNS. */
  resolve?: HostResolver;
  /** The chat's workspace (search_workspace, read_workspace_file); absent: the chat has none. */
  workspace?: WorkspaceAccess;
  /** The remember tool's proposals; absent: this Steward keeps no memories (no knowledge index). */
  remember?: (input: z.infer<typeof RememberInput>) => Promise<ToolOutcome>;
}

/** What the workspace tools may do: search the chat's workspace and read its files. */
export interface WorkspaceAccess {
  name: string;
  search(query: string, limit: number): Promise<SearchHit[]>;
  /** A file's text (at most `maxBytes`), or a WorkspacePathError for a path out of it or missing. */
  read(path: string, maxBytes: number): Promise<{ path: string; text: string; bytes: number }>;
}

const READ_MAX_BYTES = 16 * 1024;
const SEARCH_EXCERPT_BYTES = 800;

/** Run a validated call. Keyed by turn and call id: a retry repeats no effect. */
export async function runValidatedTool(ctx: ToolRunContext, call: LoadedToolCall, tool: ToolName): Promise<ToolOutcome> {
  switch (tool) {
    case 'save_note': {
      const { note } = SaveNoteInput.parse(call.input);
      return { text: 'Saved the note; it stays with this task.', ok: true, note, detail: { chars: note.length } };
    }
    case 'send_file': {
      const f = SendFileInput.parse(call.input);
      const bytes = Buffer.from(f.content, 'utf8');
      const hash = await putBlob(ctx.db, bytes, f.mediaType);
      const attachment: AttachmentRef = { hash, name: f.name, mediaType: f.mediaType, size: bytes.length };
      return { text: `The file ${f.name} (${bytes.length} bytes) is attached to your reply.`, ok: true, attachment, detail: { name: f.name, size: bytes.length, hash } };
    }
    case 'search_workspace': {
      const q = SearchWorkspaceInput.parse(call.input);
      if (!ctx.workspace) return { text: 'This chat has no workspace (an admin chooses one with /workspace use <name>).', ok: false, detail: { error: 'no workspace' } };
      const hits = await ctx.workspace.search(q.query, q.limit);
      if (hits.length === 0) return { text: `Nothing in the workspace "${ctx.workspace.name}" matches ${neutralise(JSON.stringify(q.query))}.`, ok: true, detail: { workspace: ctx.workspace.name, hits: 0 } };
      const g = { workspace: ctx.workspace.name, hits: boundHits(hits, { results: q.limit, excerptBytes: SEARCH_EXCERPT_BYTES, totalBytes: q.limit * SEARCH_EXCERPT_BYTES }) };
      return { text: groundingText(g), ok: true, detail: { workspace: g.workspace, hits: g.hits.map((h) => `${h.path}:${h.startLine}-${h.endLine}`) } };
    }
    case 'read_workspace_file': {
      const r = ReadWorkspaceFileInput.parse(call.input);
      if (!ctx.workspace) return { text: 'This chat has no workspace (an admin chooses one with /workspace use <name>).', ok: false, detail: { error: 'no workspace' } };
      try {
        const f = await ctx.workspace.read(r.path, READ_MAX_BYTES);
        const shown = f.bytes > READ_MAX_BYTES ? ` (the first ${READ_MAX_BYTES} of ${f.bytes} bytes)` : '';
        return {
          text: `The file ${f.path} of the workspace "${ctx.workspace.name}"${shown}, untrusted data:\n${wrapUntrusted('context', { workspace: ctx.workspace.name, path: f.path }, f.text)}`,
          ok: true,
          detail: { workspace: ctx.workspace.name, path: f.path, bytes: f.bytes },
        };
      } catch (err) {
        if (err instanceof WorkspacePathError) return { text: `Not read: ${err.message}.`, ok: false, detail: { workspace: ctx.workspace.name, error: err.message } };
        throw err;
      }
    }
    case 'remember': {
      const m = RememberInput.parse(call.input);
      if (!ctx.remember) return { text: 'Memory is not available on this Steward.', ok: false, detail: { error: 'no memory' } };
      return ctx.remember(m);
    }
    case 'post_to_chat': {
      const p = PostToChatInput.parse(call.input);
      const binding = await ctx.db.binding.findFirst({ where: { name: p.chat.toLowerCase() } });
      if (!binding) {
        const names = (await ctx.db.binding.findMany({ where: { name: { not: null } }, select: { name: true }, take: 50 })).map((b) => b.name);
        return { text: `No chat is named "${p.chat}". Named chats: ${names.length ? names.join(', ') : 'none'}.`, ok: false, detail: { chat: p.chat, error: 'unknown chat' } };
      }
      const conversation: ConversationKey = { platform: binding.platform as Platform, account: binding.account === '*' ? 'default' : binding.account, chatId: binding.chatId };
      const r = await deliverOnce(ctx.db, ctx.senders, {
        key: `${ctx.turnId}:tool:${call.toolCallId}`,
        sessionId: sessionWorkflowId(conversation),
        conversation,
        kind: 'reply',
        text: p.text,
        turnId: ctx.turnId,
      });
      if (r.failed) return { text: `Posting in "${p.chat}" failed: ${neutralise(r.failed)}`, ok: false, detail: { chat: p.chat, error: r.failed } };
      return { text: `Posted in "${p.chat}".`, ok: true, detail: { chat: p.chat, platform: binding.platform, chatId: binding.chatId, externalIds: r.externalIds } };
    }
    case 'http_request':
    case 'send_email':
    case 'run_command':
    case 'start_repo_change':
      // proposed actions: performed once, only with an approved row
      return performActionOnce(
        {
          db: ctx.db,
          turnId: ctx.turnId,
          sessionId: ctx.sessionId,
          conversation: ctx.conversation,
          settings: ctx.actions,
          ...(ctx.startRepoChange ? { startRepoChange: ctx.startRepoChange } : {}),
          ...(ctx.workflow ? { workflow: ctx.workflow } : {}),
          ...(ctx.requesters ? { requesters: ctx.requesters } : {}),
          ...(ctx.resolve ? { resolve: ctx.resolve } : {}),
        },
        call,
        tool,
      );
  }
}
