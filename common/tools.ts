/**
 * The tools an agent may call in a turn: name, description, input schema (zod, validated
 * before anything runs) and risk. Which tools need an admin's approval is policy
 * (STEWARD_APPROVAL_TOOLS), decided by the model activity and recorded in history. Pure.
 */
import { z } from 'zod';

export type RiskTier = 'safe' | 'caution' | 'dangerous';

export const SaveNoteInput = z.object({
  note: z.string().trim().min(1, 'the note is empty').max(500, 'a note is at most 500 characters'),
});

export const SendFileInput = z.object({
  name: z
    .string()
    .trim()
    .min(1)
    .max(100)
    .regex(/^[A-Za-z0-9][A-Za-z0-9 ._()-]*$/, 'a file name uses letters, digits, spaces and . _ ( ) -'),
  content: z.string().max(200_000, 'a file is at most 200,000 characters'),
  mediaType: z.enum(['text/plain', 'text/markdown', 'text/csv', 'application/json', 'text/html']).default('text/plain'),
});

export const PostToChatInput = z.object({
  chat: z
    .string()
    .trim()
    .min(1)
    .max(32)
    .regex(/^[a-z0-9][a-z0-9_-]*$/i, 'the chat is named by its binding name, e.g. announcements'),
  text: z.string().trim().min(1).max(4000),
});

export interface ToolSpec {
  name: string;
  description: string;
  input: z.ZodType;
  risk: RiskTier;
}

export const TOOLS = {
  save_note: {
    name: 'save_note',
    description:
      'Remember a short note about the current task (a decision, a preference, an open item). Notes are kept for the rest of the task, also after the conversation grows long.',
    input: SaveNoteInput,
    risk: 'safe',
  },
  send_file: {
    name: 'send_file',
    description: 'Create a text file (report, CSV, code, JSON) and send it to the chat as an attachment with your reply.',
    input: SendFileInput,
    risk: 'safe',
  },
  post_to_chat: {
    name: 'post_to_chat',
    description:
      'Post a message in another chat Steward is bound to, named by its binding name (e.g. "announcements"). An admin must approve it first; you are told the decision.',
    input: PostToChatInput,
    risk: 'caution',
  },
} as const satisfies Record<string, ToolSpec>;

export type ToolName = keyof typeof TOOLS;
export const TOOL_NAMES = Object.keys(TOOLS) as ToolName[];

export function isToolName(name: string): name is ToolName {
  return Object.hasOwn(TOOLS, name);
}

/** Tools that need approval by default: every tool above the safe tier. */
export const DEFAULT_APPROVAL_TOOLS: readonly ToolName[] = TOOL_NAMES.filter((n) => TOOLS[n].risk !== 'safe');
