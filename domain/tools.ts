/**
 * Running the agent's tools. Each tool call's input is read from the model step's message
 * blob (history carries only its hash), validated with zod, and run keyed by the turn and
 * call id, so a retried activity repeats no effect. The result goes back to the model as a
 * tool message, stored as a blob.
 */
import type { AssistantModelMessage, ToolModelMessage } from 'ai';
import { sessionWorkflowId, type ConversationKey } from '../common/ids.js';
import type { Platform } from '../common/schemas.js';
import {
  HttpRequestInput,
  isToolName,
  PostToChatInput,
  RunCommandInput,
  SaveNoteInput,
  SendEmailInput,
  SendFileInput,
  StartRepoChangeInput,
  TOOLS,
  type ToolName,
} from '../common/tools.js';
import { performActionOnce, type ActionSettings, type HostResolver, type StartRepoChange } from './actions.js';
import type { AttachmentRef } from '../common/schemas.js';
import { getBlobText, putBlob } from './blobs.js';
import type { Db } from './db.js';
import { deliverOnce, type Senders } from './outbox.js';

export interface LoadedToolCall {
  toolCallId: string;
  toolName: string;
  input: unknown;
}

/** The tool call `toolCallId` of a stored assistant message. */
export async function loadToolCall(db: Db, messageHash: string, toolCallId: string): Promise<LoadedToolCall> {
  const message = JSON.parse(await getBlobText(db, messageHash)) as AssistantModelMessage;
  const parts = Array.isArray(message.content) ? message.content : [];
  for (const p of parts) {
    if (p.type === 'tool-call' && p.toolCallId === toolCallId) return { toolCallId, toolName: p.toolName, input: p.input };
  }
  throw new Error(`tool call ${toolCallId} is not in message ${messageHash}`);
}

/** Validate a call's input; the error text goes back to the model. */
export function validateToolCall(name: string, input: unknown): { ok: true; tool: ToolName; input: unknown } | { ok: false; error: string } {
  if (!isToolName(name)) return { ok: false, error: `There is no tool named ${name}. Tools: ${Object.keys(TOOLS).join(', ')}.` };
  const r = TOOLS[name].input.safeParse(input);
  if (!r.success) return { ok: false, error: `Invalid input for ${name}: ${r.error.issues.map((i) => `${i.path.join('.') || '(input)'}: ${i.message}`).join('; ')}` };
  return { ok: true, tool: name, input: r.data };
}

/**
 * Names (object keys, header names, query and form fields) whose values never leave the
 * database unredacted in approval requests and receipts: anything naming a token, secret,
 * key or password, authorization, cookies, credentials and signatures.
 */
const SECRET_KEY = /(passw(or)?d|passphrase|^pass$|^pwd$|secret|token|key|auth(?!ors?(?![A-Za-z]))|cookie|credential|signature|^sig$|session[_-]?id)/i;
const SECRET_VALUE = /\b(sk-[A-Za-z0-9_-]{16,}|ghp_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|xox[abpr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|\d{6,}:[A-Za-z0-9_-]{30,})\b/g;
/** Credentials after an HTTP authentication scheme, wherever they appear in text. */
const AUTH_SCHEME = /\b(Bearer|Basic|Digest|Token)\s+[A-Za-z0-9._~+/=-]{6,}/g;
const URL_IN_TEXT = /\b[a-z][a-z0-9+.-]*:\/\/[^\s"'<>`]+/gi;
/** `name=value`, `name: value`, `"name": "value"` where the name looks secret (bodies, argv, prose). */
const SECRET_PAIR =
  /(["']?)([A-Za-z0-9_.-]*(?:passw(?:or)?d|passphrase|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|auth(?!ors?(?![A-Za-z]))[A-Za-z_-]*|credential|cookie)[A-Za-z0-9_.-]*)\1(\s*[:=]\s*)("(?:[^"\\]|\\.)*"|'[^']*'|[^\s&,;}"']+)/gi;
const R = '[redacted]';

function redactUrl(u: string): string {
  return u
    .replace(/^([a-z][a-z0-9+.-]*:\/\/)[^/?#\s@]*@/i, `$1${R}@`)
    .replace(/([?&;])([^=&#;]+)=([^&#;]*)/g, (m, sep: string, name: string) => (SECRET_KEY.test(name) ? `${sep}${name}=${R}` : m));
}

/** Redact secrets in free text: known token shapes, credentials after Bearer/Basic, URL userinfo and secret query values, secret-named pairs. */
export function redactText(text: string): string {
  return text
    .replace(SECRET_VALUE, R)
    .replace(AUTH_SCHEME, `$1 ${R}`)
    .replace(URL_IN_TEXT, redactUrl)
    .replace(SECRET_PAIR, (m, q: string, name: string, sep: string, value: string) => {
      if (value === R || value.startsWith('[redacted') || /^(Bearer|Basic|Digest|Token)$/i.test(value)) return m;
      const shown = value.startsWith('"') ? `"${R}"` : value.startsWith("'") ? `'${R}'` : R;
      return `${q}${name}${q}${sep}${shown}`;
    });
}

/** A value with its secrets redacted: secret-named keys (headers too) lose their values, strings go through redactText. */
export function redact(value: unknown): unknown {
  if (typeof value === 'string') return redactText(value);
  if (Array.isArray(value)) return value.map(redact);
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, SECRET_KEY.test(k) ? R : redact(v)]));
  }
  return value;
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
  /** Tests: a resolver standing in for DNS. */
  resolve?: HostResolver;
}

export interface ToolOutcome {
  /** What the model is told. */
  text: string;
  ok: boolean;
  note?: string;
  attachment?: AttachmentRef;
  /** Facts for the receipt. */
  detail: Record<string, unknown>;
}

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
      if (r.failed) return { text: `Posting in "${p.chat}" failed: ${r.failed}`, ok: false, detail: { chat: p.chat, error: r.failed } };
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
          ...(ctx.resolve ? { resolve: ctx.resolve } : {}),
        },
        call,
        tool,
      );
  }
}
