/**
 * The chat command catalog: one list that parsing, the role checks, `/help` and the platform
 * command menus (Telegram's setMyCommands, Discord's application commands) are rendered from.
 * Pure.
 */
import { isAdmin, RoleSchema, roleAtLeast, type Role } from './roles.js';
import { MAX_STEER_CHARS, ModelRefSchema, ThinkLevelSchema } from './schemas.js';
import { CLASSES, dueWindowMs, DUE_MESSAGE, LANES, PRIORITIES, resolveDue, TASK_ID_RE, type Lane, type Priority, type TriageClass } from './tasks.js';

export type { Role } from './roles.js';

export interface CommandArg {
  name: string;
  description: string;
  required: boolean;
  /** Fixed choices (rendered as Discord option choices). */
  choices?: readonly string[];
  /** Takes the rest of the line (free text). */
  rest?: boolean;
}

export interface CommandSpec {
  /** Canonical name; Telegram menus show it with `_` for `-` (Telegram allows no hyphens). */
  name: string;
  args: readonly CommandArg[];
  description: string;
  /** The lowest role that may use it; `null`: anyone, also people Steward does not know yet. */
  minRole: Role | null;
  /** Where it makes sense: a direct message, a group, or both. */
  where: 'any' | 'dm' | 'group';
}

const arg = (name: string, description: string, required = true, extra: Partial<CommandArg> = {}): CommandArg => ({ name, description, required, ...extra });

export const COMMANDS: readonly CommandSpec[] = [
  { name: 'stop', args: [], description: 'Stop the running turn at once (queued messages are kept).', minRole: 'member', where: 'any' },
  { name: 'steer', args: [arg('text', 'Guidance for the running turn', true, { rest: true })], description: 'Guide the running turn before its next model step.', minRole: 'member', where: 'any' },
  { name: 'new', args: [], description: 'Start a new task: the session forgets its context.', minRole: 'member', where: 'any' },
  { name: 'model', args: [arg('model', 'provider:model, e.g. openai:gpt-4.1', false)], description: 'Show or set the model for this chat.', minRole: 'operator', where: 'any' },
  { name: 'think', args: [arg('level', 'Reasoning effort', false, { choices: ['off', 'low', 'medium', 'high'] })], description: 'Show or set the reasoning effort.', minRole: 'operator', where: 'any' },
  { name: 'status', args: [], description: 'Show the running turn, step, queue, model and token use.', minRole: 'viewer', where: 'any' },
  { name: 'whoami', args: [], description: 'Show who Steward knows you as, and your role.', minRole: 'viewer', where: 'any' },
  { name: 'console', args: [], description: 'Get a one-time link that signs you in to the operator console (in a direct message).', minRole: 'viewer', where: 'dm' },
  { name: 'help', args: [], description: 'List the commands you may use.', minRole: 'viewer', where: 'any' },
  { name: 'change', args: [arg('repo', 'The registered repository'), arg('request', 'What to change', true, { rest: true })], description: 'Start a governed repository change (plan, sandboxed agent, validation gate, promotion).', minRole: 'operator', where: 'any' },
  { name: 'answer', args: [arg('text', "The answer to a change's clarifying question", true, { rest: true })], description: "Answer the clarifying question of this chat's change.", minRole: 'member', where: 'any' },
  { name: 'objectives', args: [], description: 'List the objectives: their schedule, next run and last result.', minRole: 'viewer', where: 'any' },
  { name: 'objective', args: [arg('action', 'add, show, pause, resume, trigger, skip-missed or delete', true, { choices: ['add', 'show', 'pause', 'resume', 'trigger', 'skip-missed', 'delete'] }), arg('name', 'The objective'), arg('details', 'For add: <interval like 30m, or "cron"> [tz=Zone] <prompt>', false, { rest: true })], description: 'Manage a scheduled objective that reports into this chat.', minRole: 'operator', where: 'any' },
  { name: 'search', args: [arg('query', 'Words to look for', true, { rest: true })], description: "Search this chat's workspace (no model call): the best excerpts with their paths.", minRole: 'member', where: 'any' },
  { name: 'open', args: [arg('path', 'A file of the workspace, such as notes/howto.md')], description: "Show a file of this chat's workspace.", minRole: 'member', where: 'any' },
  { name: 'skills', args: [], description: 'List the skills (SKILL.md runbooks) this chat may use, with their versions.', minRole: 'member', where: 'any' },
  { name: 'memory', args: [arg('action', 'list, show, forget, approve or reject', false, { choices: ['list', 'show', 'forget', 'approve', 'reject'] }), arg('id', 'The memory, such as m-1a2b3c4d', false)], description: 'What the agent remembers here: list, show or forget; admins approve or reject proposals.', minRole: 'member', where: 'any' },
  { name: 'tasks', args: [arg('lane', 'Only this lane', false, { choices: LANES })], description: "List open tasks (an admin's list has every chat's).", minRole: 'viewer', where: 'any' },
  { name: 'task', args: [arg('text', 'The task; or: hand <id>, close <id>', true, { rest: true })], description: 'Make a task by hand; hand one to the agent (a turn in its chat) or close it.', minRole: 'member', where: 'any' },
  { name: 'budget', args: [arg('action', 'show (the default) or raise (admins)', false, { choices: ['show', 'raise'] }), arg('budget', 'For raise: the budget id', false), arg('amount', 'For raise: tokens (5000) and/or USD ($2.50)', false, { rest: true })], description: "Show the model budgets of you and this chat (admins: all); admins raise one for its period.", minRole: 'viewer', where: 'any' },
  { name: 'workspace', args: [arg('action', 'show, list, create, use, off or reindex', false, { choices: ['show', 'list', 'create', 'use', 'off', 'reindex'] }), arg('name', 'The workspace', false), arg('folder', 'Not from chat: the operator names folders (steward workspaces create --folder)', false)], description: "Show, create or choose this chat's workspace of Markdown and text knowledge.", minRole: 'admin', where: 'any' },
  { name: 'prompt', args: [arg('action', 'show, set or clear', false, { choices: ['show', 'set', 'clear'] }), arg('text', 'For set: the instructions for this chat', false, { rest: true })], description: "Show the system prompt's layers, or set or clear this chat's own.", minRole: 'admin', where: 'any' },
  { name: 'pair', args: [], description: 'Ask for access: you get a one-time code for an admin.', minRole: null, where: 'dm' },
  { name: 'approve', args: [arg('code', 'The pairing code'), arg('role', 'The role to give', true, { choices: ['overlord', 'admin', 'operator', 'member', 'viewer'] })], description: 'Approve a pairing request with a role.', minRole: 'admin', where: 'any' },
  { name: 'deny', args: [arg('code', 'The pairing code')], description: 'Deny a pairing request.', minRole: 'admin', where: 'any' },
  { name: 'pending', args: [], description: 'List pending pairing requests and action approvals.', minRole: 'admin', where: 'any' },
  { name: 'approve-action', args: [arg('id', 'The approval id')], description: 'Approve an action an agent proposed.', minRole: 'admin', where: 'any' },
  { name: 'deny-action', args: [arg('id', 'The approval id'), arg('reason', 'Why (told to the proposer)', false, { rest: true })], description: 'Deny an action an agent proposed.', minRole: 'admin', where: 'any' },
  { name: 'bind', args: [arg('mode', 'mention: answer when mentioned or replied to; all: every message', false, { choices: ['mention', 'all'] }), arg('name', 'A short name for this chat', false)], description: 'Let Steward answer in this chat.', minRole: 'admin', where: 'group' },
  { name: 'unbind', args: [], description: 'Stop Steward answering in this chat.', minRole: 'admin', where: 'group' },
  { name: 'admin-channel', args: [arg('state', 'on or off', false, { choices: ['on', 'off'] })], description: 'Make this chat the admin channel (admin commands and notifications).', minRole: 'admin', where: 'group' },
  { name: 'route', args: [arg('task', 'The task, such as t-1a2b3c4d'), arg('class', 'The lane; noise closes the task', true, { choices: CLASSES }), arg('priority', 'p1, p2 or p3', false, { choices: PRIORITIES }), arg('due', 'A due window such as 4h or 2d', false)], description: 'Override a triage decision: lane, priority and due window.', minRole: 'admin', where: 'any' },
  { name: 'triage', args: [arg('state', 'on or off', false, { choices: ['on', 'off'] }), arg('model', 'provider:model of the classification step', false)], description: 'Sort messages here that do not address Steward into tasks (a cheap model step).', minRole: 'admin', where: 'group' },
];

export type ParsedCommand =
  | { kind: 'stop' }
  | { kind: 'steer'; text: string }
  | { kind: 'new' }
  | { kind: 'model'; model?: string }
  | { kind: 'think'; level?: 'off' | 'low' | 'medium' | 'high' }
  | { kind: 'status' }
  | { kind: 'whoami' }
  | { kind: 'console' }
  | { kind: 'help' }
  | { kind: 'pair' }
  | { kind: 'approve'; code: string; role: Role }
  | { kind: 'deny'; code: string }
  | { kind: 'pending' }
  | { kind: 'approve-action'; id: string }
  | { kind: 'deny-action'; id: string; reason?: string }
  | { kind: 'change'; repo: string; request: string }
  | { kind: 'answer'; text: string }
  | { kind: 'objectives' }
  | { kind: 'objective'; action: 'show' | 'pause' | 'resume' | 'trigger' | 'skip-missed' | 'delete'; name: string }
  | { kind: 'objective'; action: 'add'; name: string; schedule: { every?: string; cron?: string; timezone?: string }; prompt: string }
  | { kind: 'workspace'; action: 'show' | 'list' | 'off' }
  | { kind: 'workspace'; action: 'use' | 'reindex'; name?: string }
  | { kind: 'workspace'; action: 'create'; name: string; folder?: string }
  | { kind: 'prompt'; action: 'show' | 'clear' }
  | { kind: 'prompt'; action: 'set'; text: string }
  | { kind: 'search'; query: string }
  | { kind: 'open'; path: string }
  | { kind: 'skills' }
  | { kind: 'memory'; action: 'list' }
  | { kind: 'memory'; action: 'show' | 'forget' | 'approve' | 'reject'; id: string }
  | { kind: 'bind'; mode?: 'mention' | 'all'; name?: string }
  | { kind: 'unbind' }
  | { kind: 'admin-channel'; on: boolean }
  | { kind: 'tasks'; lane?: Lane }
  | { kind: 'task'; action: 'add'; text: string }
  | { kind: 'task'; action: 'hand' | 'close'; id: string }
  | { kind: 'route'; id: string; class: TriageClass; priority?: Priority; due?: string }
  | { kind: 'triage'; state?: 'on' | 'off'; model?: string }
  | { kind: 'budget'; action: 'show' }
  | { kind: 'budget'; action: 'raise'; id: string; tokens?: number; money?: number }
  | { kind: 'invalid'; name: string; error: string }
  | { kind: 'unknown'; name: string };

export type ParsedText = { kind: 'message'; text: string } | { kind: 'command'; command: ParsedCommand };

const BY_NAME = new Map(COMMANDS.map((c) => [c.name, c]));

export function commandSpec(name: string): CommandSpec | undefined {
  return BY_NAME.get(name);
}

/** The spec a parsed command is checked against (invalid and unknown commands: anyone may get usage help). */
export function specOf(cmd: ParsedCommand): CommandSpec | undefined {
  if (cmd.kind === 'invalid') return BY_NAME.get(cmd.name);
  if (cmd.kind === 'unknown') return undefined;
  return BY_NAME.get(cmd.kind);
}

/** Whether text is a command: it starts with `/` followed by a letter. */
export function isCommandText(text: string): boolean {
  return /^\/[A-Za-z]/.test(text.trimStart());
}

/** Longest pairing code or approval id accepted (both are 8 characters). */
const CODE_RE = /^[A-Za-z0-9-]{4,16}$/;

/**
 * Parse one inbound text. `/cmd@botname args` is accepted (Telegram's group form); `_` and
 * `-` are the same in command names (`/approve_action` is Telegram's spelling).
 */
export function parseText(raw: string): ParsedText {
  const text = raw.trim();
  if (!isCommandText(text)) return { kind: 'message', text: raw };
  const match = /^\/([A-Za-z][A-Za-z0-9_-]*)(?:@[A-Za-z0-9_]+)?(?:\s+([\s\S]*))?$/.exec(text);
  if (!match) return { kind: 'command', command: { kind: 'unknown', name: (text.split(/\s/)[0] ?? text).slice(0, 64) } };
  const name = (match[1] ?? '').toLowerCase().replaceAll('_', '-').slice(0, 64);
  const rest = (match[2] ?? '').trim();
  return { kind: 'command', command: parseCommand(name, rest) };
}

/** The bot username a `/cmd@botname` text is addressed to, if any. */
export function commandAddressee(raw: string): string | undefined {
  const m = /^\/[A-Za-z][A-Za-z0-9_-]*@([A-Za-z0-9_]+)/.exec(raw.trim());
  return m?.[1];
}

function usage(name: string): string {
  const spec = BY_NAME.get(name);
  if (!spec) return `/${name}`;
  return `usage: /${name}${spec.args.map((a) => (a.required ? ` <${a.name}>` : ` [${a.name}]`)).join('')}`;
}

/** The knowledge commands: /workspace, /prompt, /search, /open, /skills, /memory. */
function parseKnowledgeCommand(name: 'workspace' | 'prompt' | 'search' | 'open' | 'skills' | 'memory', rest: string, words: string[]): ParsedCommand {
  const invalid = (error: string): ParsedCommand => ({ kind: 'invalid', name, error });
  switch (name) {
    case 'skills':
      return words.length ? invalid(usage(name)) : { kind: 'skills' };
    case 'memory': {
      const [action = 'list', id, ...more] = words;
      const a = action.toLowerCase();
      if (a === 'list') return id !== undefined ? invalid(usage(name)) : { kind: 'memory', action: 'list' };
      if (a !== 'show' && a !== 'forget' && a !== 'approve' && a !== 'reject') return invalid(usage(name));
      if (!id || more.length) return invalid(`${usage(name)} (/memory ${a} <id>)`);
      if (!/^m-[a-z0-9]{8}$/.test(id)) return invalid('a memory id looks like m-1a2b3c4d');
      return { kind: 'memory', action: a, id };
    }
    case 'workspace': {
      const [action = 'show', ws, ...more] = words;
      const a = action.toLowerCase();
      if (a === 'show' || a === 'list' || a === 'off') {
        if (ws !== undefined) return invalid(usage(name));
        return { kind: 'workspace', action: a };
      }
      if (ws !== undefined && !/^[a-z0-9][a-z0-9_-]{0,63}$/.test(ws)) return invalid('a workspace name uses lowercase letters, digits, - and _');
      if (a === 'reindex') return more.length ? invalid(usage(name)) : { kind: 'workspace', action: 'reindex', ...(ws ? { name: ws } : {}) };
      if (a === 'use') return !ws || more.length ? invalid(`${usage(name)} (/workspace use <name>)`) : { kind: 'workspace', action: 'use', name: ws };
      if (a === 'create') {
        if (!ws || more.length > 1) return invalid(`${usage(name)} (/workspace create <name> [/absolute/folder])`);
        return { kind: 'workspace', action: 'create', name: ws, ...(more[0] ? { folder: more[0] } : {}) };
      }
      return invalid(usage(name));
    }
    case 'prompt': {
      const m = /^(\S+)\s*([\s\S]*)$/.exec(rest);
      const action = (m?.[1] ?? 'show').toLowerCase();
      const text = (m?.[2] ?? '').trim();
      if (action === 'show' || action === 'clear') return text ? invalid(usage(name)) : { kind: 'prompt', action };
      if (action === 'set') {
        if (!text) return invalid(`${usage(name)} (/prompt set <instructions>)`);
        if (text.length > 4000) return invalid("a chat's prompt is at most 4000 characters");
        return { kind: 'prompt', action: 'set', text };
      }
      return invalid(usage(name));
    }
    case 'search':
      if (!rest) return invalid(usage(name));
      if (rest.length > 500) return invalid('the query is longer than 500 characters');
      return { kind: 'search', query: rest };
    case 'open':
      if (!rest || words.length > 1) return invalid(`${usage(name)} (a workspace path, such as notes/howto.md)`);
      if (rest.length > 1024) return invalid('the path is longer than 1,024 characters');
      return { kind: 'open', path: rest };
  }
}

/** The triage and task commands: /tasks, /task, /route, /triage. */
function parseTaskCommand(name: 'tasks' | 'task' | 'route' | 'triage', rest: string, words: string[]): ParsedCommand {
  const invalid = (error: string): ParsedCommand => ({ kind: 'invalid', name, error });
  switch (name) {
    case 'tasks': {
      if (words.length > 1) return invalid(usage(name));
      const lane = words[0]?.toLowerCase();
      if (lane === undefined) return { kind: 'tasks' };
      return (LANES as readonly string[]).includes(lane) ? { kind: 'tasks', lane: lane as Lane } : invalid(`a lane is ${LANES.join(', ')}`);
    }
    case 'task': {
      if (!rest) return invalid(`${usage(name)} (/task <text>, /task hand <id>, /task close <id>)`);
      const action = words[0]?.toLowerCase();
      if ((action === 'hand' || action === 'close') && words.length === 2 && /^t-/i.test(words[1]!)) {
        const id = words[1]!.toLowerCase();
        return TASK_ID_RE.test(id) ? { kind: 'task', action, id } : invalid('a task id looks like t-1a2b3c4d');
      }
      if (rest.length > 4000) return invalid('the task is longer than 4000 characters');
      return { kind: 'task', action: 'add', text: rest };
    }
    case 'route': {
      const [rawId, rawClass, ...more] = words;
      if (!rawId || !rawClass || more.length > 2) return invalid(`${usage(name)} (e.g. /route t-1a2b3c4d issue p1 4h)`);
      const id = rawId.toLowerCase();
      if (!TASK_ID_RE.test(id)) return invalid('a task id looks like t-1a2b3c4d');
      const cls = rawClass.toLowerCase();
      if (!(CLASSES as readonly string[]).includes(cls)) return invalid(`a class is ${CLASSES.join(', ')}`);
      let priority: Priority | undefined;
      let due: string | undefined;
      for (const w of more) {
        const lw = w.toLowerCase();
        if (!priority && (PRIORITIES as readonly string[]).includes(lw)) priority = lw as Priority;
        else if (!due && (dueWindowMs(lw) !== undefined || resolveDue(w, 0) !== undefined)) due = w;
        else return invalid(`${w}: expected p1, p2 or p3, or ${DUE_MESSAGE}`);
      }
      return { kind: 'route', id, class: cls as TriageClass, ...(priority ? { priority } : {}), ...(due ? { due } : {}) };
    }
    case 'triage': {
      const [state, model, ...more] = words;
      if (state === undefined) return { kind: 'triage' };
      const s = state.toLowerCase();
      if (more.length || (s !== 'on' && s !== 'off') || (s === 'off' && model !== undefined)) return invalid(`${usage(name)} (/triage on [provider:model], /triage off)`);
      if (model === undefined) return { kind: 'triage', state: s };
      const m = ModelRefSchema.safeParse(model);
      if (!m.success) return invalid(`the model: ${m.error.issues[0]?.message ?? 'expected provider:model'}`);
      return { kind: 'triage', state: s, model: m.data };
    }
  }
}

/** /budget [show], /budget raise <budget> <amount>: tokens (`5000`) and/or USD (`$2.50`, `2.50usd`). */
function parseBudgetCommand(words: string[]): ParsedCommand {
  const invalid = (error: string): ParsedCommand => ({ kind: 'invalid', name: 'budget', error });
  const [action = 'show', id, ...amounts] = words;
  const a = action.toLowerCase();
  if (a === 'show') return id === undefined ? { kind: 'budget', action: 'show' } : invalid(usage('budget'));
  if (a !== 'raise') return invalid(`${usage('budget')} (/budget, or /budget raise <budget> <tokens and/or $usd>)`);
  if (!id || amounts.length === 0 || amounts.length > 2) return invalid('usage: /budget raise <budget> <amount>, the amount in tokens (5000), USD ($2.50) or both (5000 $2.50)');
  if (id.length > 200 || !/^[A-Za-z0-9._:@/-]+$/.test(id)) return invalid('a budget id uses letters, digits and . _ : @ / -');
  let tokens: number | undefined;
  let money: number | undefined;
  for (const w of amounts) {
    const usd = /^\$(\d+(?:\.\d+)?)$|^(\d+(?:\.\d+)?)(?:\$|usd)$/i.exec(w);
    if (usd && money === undefined) money = Number(usd[1] ?? usd[2]);
    else if (/^\d+$/.test(w) && tokens === undefined) tokens = Number(w);
    else return invalid(`${w}: an amount is tokens (5000) or USD ($2.50)`);
  }
  if ((tokens !== undefined && (!Number.isSafeInteger(tokens) || tokens <= 0)) || (money !== undefined && !(money > 0 && money <= 1e9))) return invalid('the amount must be more than 0');
  return { kind: 'budget', action: 'raise', id, ...(tokens === undefined ? {} : { tokens }), ...(money === undefined ? {} : { money }) };
}

function parseCommand(name: string, rest: string): ParsedCommand {
  const words = rest ? rest.split(/\s+/) : [];
  const invalid = (error: string): ParsedCommand => ({ kind: 'invalid', name, error });
  switch (name) {
    case 'stop':
      return { kind: 'stop' };
    case 'new':
      return { kind: 'new' };
    case 'status':
      return { kind: 'status' };
    case 'whoami':
      return { kind: 'whoami' };
    case 'console':
      return { kind: 'console' };
    case 'help':
    case 'start':
      return { kind: 'help' };
    case 'pair':
      return { kind: 'pair' };
    case 'pending':
      return { kind: 'pending' };
    case 'unbind':
      return { kind: 'unbind' };
    case 'change': {
      const [repo, ...more] = words;
      const request = more.length ? rest.slice(rest.indexOf(repo!) + repo!.length).trim() : '';
      if (!repo || !request) return invalid(usage('change'));
      if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(repo)) return invalid('the repository is named by its registered name (letters, digits, . _ -)');
      if (request.length > 8000) return invalid('the request is longer than 8000 characters');
      return { kind: 'change', repo, request };
    }
    case 'objectives':
      return { kind: 'objectives' };
    case 'objective': {
      const m = /^(\S+)\s+(\S+)\s*([\s\S]*)$/.exec(rest);
      const action = m?.[1];
      const name = m?.[2];
      if (!m || !action || !name) return invalid(usage('objective'));
      if (!/^[a-z0-9][a-z0-9_-]{0,63}$/.test(name)) return invalid('an objective name uses lowercase letters, digits, - and _');
      if (action === 'show' || action === 'pause' || action === 'resume' || action === 'trigger' || action === 'skip-missed' || action === 'delete') return { kind: 'objective', action, name };
      if (action !== 'add') return invalid(`unknown action ${action}: add, show, pause, resume, trigger, skip-missed or delete`);
      let details = (m[3] ?? '').trim();
      const schedule: { every?: string; cron?: string; timezone?: string } = {};
      const quoted = /^"([^"]+)"\s*/.exec(details);
      if (quoted) {
        schedule.cron = quoted[1]!.trim();
        details = details.slice(quoted[0].length);
      } else {
        const every = /^(\d+(?:\.\d+)?(?:ms|s|m|h|d))\s*/.exec(details);
        if (!every) return invalid('give the schedule first: an interval like 30m, or a cron expression in quotes like "0 9 * * 1-5"');
        schedule.every = every[1]!;
        details = details.slice(every[0].length);
      }
      const tz = /^tz=(\S+)\s*/.exec(details);
      if (tz) {
        schedule.timezone = tz[1]!;
        details = details.slice(tz[0].length);
      }
      if (!details.trim()) return invalid('give the prompt after the schedule');
      if (details.length > 8000) return invalid('the prompt is longer than 8000 characters');
      return { kind: 'objective', action: 'add', name, schedule, prompt: details.trim() };
    }
    case 'answer':
      if (!rest) return invalid(usage('answer'));
      if (rest.length > 4000) return invalid('the answer is longer than 4000 characters');
      return { kind: 'answer', text: rest };
    case 'steer':
      if (!rest) return invalid('usage: /steer <text>');
      if (rest.length > MAX_STEER_CHARS) return invalid(`steering text is longer than ${MAX_STEER_CHARS} characters`);
      return { kind: 'steer', text: rest };
    case 'model': {
      if (!rest) return { kind: 'model' };
      const parsed = ModelRefSchema.safeParse(rest);
      if (!parsed.success) return invalid(`usage: /model <provider:model>: ${parsed.error.issues[0]?.message ?? 'invalid'}`);
      return { kind: 'model', model: parsed.data };
    }
    case 'think': {
      if (!rest) return { kind: 'think' };
      const parsed = ThinkLevelSchema.safeParse(rest.toLowerCase());
      if (!parsed.success) return invalid('usage: /think <off|low|medium|high>');
      return { kind: 'think', level: parsed.data };
    }
    case 'approve': {
      const [code, role, ...extra] = words;
      if (!code || !role || extra.length > 0 || !CODE_RE.test(code)) return invalid(`${usage(name)} (e.g. /approve K7Q2M9XD member)`);
      const r = RoleSchema.safeParse(role.toLowerCase());
      if (!r.success) return invalid(`${role} is not a role: use overlord, admin, operator, member or viewer`);
      return { kind: 'approve', code: code.toUpperCase(), role: r.data };
    }
    case 'deny': {
      const [code, ...extra] = words;
      if (!code || extra.length > 0 || !CODE_RE.test(code)) return invalid(usage(name));
      return { kind: 'deny', code: code.toUpperCase() };
    }
    case 'approve-action': {
      const [id, ...extra] = words;
      if (!id || extra.length > 0 || !CODE_RE.test(id)) return invalid(usage(name));
      return { kind: 'approve-action', id: id.toLowerCase() };
    }
    case 'deny-action': {
      const [id] = words;
      if (!id || !CODE_RE.test(id)) return invalid(usage(name));
      const reason = rest.slice(rest.indexOf(id) + id.length).trim();
      if (reason.length > 500) return invalid('the reason is longer than 500 characters');
      return { kind: 'deny-action', id: id.toLowerCase(), ...(reason ? { reason } : {}) };
    }
    case 'bind': {
      let mode: 'mention' | 'all' | undefined;
      let label: string | undefined;
      for (const w of words) {
        const lw = w.toLowerCase();
        if (!mode && (lw === 'mention' || lw === 'all')) mode = lw;
        else if (!label && /^[a-z0-9][a-z0-9_-]{0,31}$/i.test(w)) label = w.toLowerCase();
        else return invalid(`${usage(name)}: a name uses letters, digits, - and _ (up to 32)`);
      }
      return { kind: 'bind', ...(mode ? { mode } : {}), ...(label ? { name: label } : {}) };
    }
    case 'workspace':
    case 'prompt':
    case 'search':
    case 'open':
    case 'skills':
    case 'memory':
      return parseKnowledgeCommand(name, rest, words);
    case 'tasks':
    case 'task':
    case 'route':
    case 'triage':
      return parseTaskCommand(name, rest, words);
    case 'budget':
      return parseBudgetCommand(words);
    case 'admin-channel': {
      const w = (words[0] ?? 'on').toLowerCase();
      if (words.length > 1 || (w !== 'on' && w !== 'off')) return invalid(usage(name));
      return { kind: 'admin-channel', on: w === 'on' };
    }
    default:
      return { kind: 'unknown', name };
  }
}

/** May `role` (undefined: not known yet) use `spec`? */
export function mayUse(spec: CommandSpec, role: Role | undefined): boolean {
  if (spec.minRole === null) return true;
  return role !== undefined && roleAtLeast(role, spec.minRole);
}

export function isAdminCommand(spec: CommandSpec): boolean {
  return spec.minRole !== null && isAdmin(spec.minRole);
}

export function formatCommand(c: CommandSpec): string {
  return `/${c.name}${c.args.map((a) => (a.required ? ` <${a.name}>` : ` [${a.name}]`)).join('')} - ${c.description}`;
}

/** The command list for `role` (every command when no role is given). */
export function helpText(role?: Role): string {
  const visible = role === undefined ? COMMANDS : COMMANDS.filter((c) => c.minRole !== null && mayUse(c, role));
  return ['Commands:', ...visible.map(formatCommand)].join('\n');
}

/** Telegram's spelling of a command name (lowercase letters, digits and underscores). */
export function telegramCommandName(name: string): string {
  return name.replaceAll('-', '_');
}
