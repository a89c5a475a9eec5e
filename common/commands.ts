/**
 * The chat command catalog: one list that parsing, help text and (later) platform command
 * menus are rendered from. Pure.
 */
import { MAX_STEER_CHARS, ModelRefSchema, ThinkLevelSchema } from './schemas.js';

export type Role = 'overlord' | 'admin' | 'operator' | 'member' | 'viewer';

export interface CommandSpec {
  name: string;
  args: string;
  description: string;
  minRole: Role;
}

export const COMMANDS: readonly CommandSpec[] = [
  { name: 'stop', args: '', description: 'Stop the running turn at once (queued messages are kept).', minRole: 'member' },
  { name: 'steer', args: '<text>', description: 'Guide the running turn before its next model step.', minRole: 'member' },
  { name: 'new', args: '', description: 'Start a new task: the session forgets its context.', minRole: 'member' },
  { name: 'model', args: '[provider:model]', description: 'Show or set the model for this chat.', minRole: 'operator' },
  { name: 'think', args: '[off|low|medium|high]', description: 'Show or set the reasoning effort.', minRole: 'operator' },
  { name: 'status', args: '', description: 'Show the running turn, step, queue, model and token use.', minRole: 'viewer' },
  { name: 'help', args: '', description: 'List the commands.', minRole: 'viewer' },
];

export type ParsedCommand =
  | { kind: 'stop' }
  | { kind: 'steer'; text: string }
  | { kind: 'new' }
  | { kind: 'model'; model?: string }
  | { kind: 'think'; level?: 'off' | 'low' | 'medium' | 'high' }
  | { kind: 'status' }
  | { kind: 'help' }
  | { kind: 'invalid'; name: string; error: string }
  | { kind: 'unknown'; name: string };

export type ParsedText = { kind: 'message'; text: string } | { kind: 'command'; command: ParsedCommand };

/** Whether text is a command: it starts with `/` followed by a letter. */
export function isCommandText(text: string): boolean {
  return /^\/[A-Za-z]/.test(text.trimStart());
}

/** Parse one inbound text. `/cmd@botname args` is accepted (Telegram's group form). */
export function parseText(raw: string): ParsedText {
  const text = raw.trim();
  if (!isCommandText(text)) return { kind: 'message', text: raw };
  const match = /^\/([A-Za-z][A-Za-z0-9_]*)(?:@[A-Za-z0-9_]+)?(?:\s+([\s\S]*))?$/.exec(text);
  if (!match) return { kind: 'command', command: { kind: 'unknown', name: text.split(/\s/)[0] ?? text } };
  const name = (match[1] ?? '').toLowerCase();
  const rest = (match[2] ?? '').trim();
  return { kind: 'command', command: parseCommand(name, rest) };
}

function parseCommand(name: string, rest: string): ParsedCommand {
  switch (name) {
    case 'stop':
      return { kind: 'stop' };
    case 'new':
      return { kind: 'new' };
    case 'status':
      return { kind: 'status' };
    case 'help':
    case 'start':
      return { kind: 'help' };
    case 'steer':
      if (!rest) return { kind: 'invalid', name, error: 'usage: /steer <text>' };
      if (rest.length > MAX_STEER_CHARS) return { kind: 'invalid', name, error: `steering text is longer than ${MAX_STEER_CHARS} characters` };
      return { kind: 'steer', text: rest };
    case 'model': {
      if (!rest) return { kind: 'model' };
      const parsed = ModelRefSchema.safeParse(rest);
      if (!parsed.success) return { kind: 'invalid', name, error: `usage: /model <provider:model>: ${parsed.error.issues[0]?.message ?? 'invalid'}` };
      return { kind: 'model', model: parsed.data };
    }
    case 'think': {
      if (!rest) return { kind: 'think' };
      const parsed = ThinkLevelSchema.safeParse(rest.toLowerCase());
      if (!parsed.success) return { kind: 'invalid', name, error: 'usage: /think <off|low|medium|high>' };
      return { kind: 'think', level: parsed.data };
    }
    default:
      return { kind: 'unknown', name };
  }
}

export function helpText(): string {
  const lines = COMMANDS.map((c) => `/${c.name}${c.args ? ` ${c.args}` : ''} - ${c.description}`);
  return ['Commands:', ...lines].join('\n');
}
