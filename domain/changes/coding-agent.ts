/**
 * The coding agent of a governed repository change. It works in an isolated work tree (a
 * fresh clone belonging to one run); its only output is what it leaves in that tree (the
 * caller diffs it into a patch) plus its transcript. Two kinds:
 *
 * - the built-in tool loop (`runBuiltinAgent`): one model step at a time through Steward's
 *   model layer; Steward runs the tools itself, every path confined to the work tree;
 * - an external agent command (`runExternalAgent`, e.g. Codex or Claude Code run
 *   non-interactively), under the same sandbox, with the task as JSON in `STEWARD_TASK` and
 *   on stdin.
 *
 * Path confinement (the heart of this file, `confine`): a path argument is relative to the
 * work tree. Refused as *blocked* (recorded, told to the model, never performed): absolute
 * paths, `..` escapes, anything under `.git` (any letter case, also when reached through a
 * symbolic link), a path whose deepest existing ancestor resolves (realpath) outside the work
 * tree, a dangling or looping symbolic link on the way, writing a symbolic link (write_file
 * writes regular files only) and a file with several hard links. The checked, resolved path
 * is the one operated on (symbolic links already resolved), and the final open of a write uses
 * O_NOFOLLOW. Nothing else runs in the work tree while a tool runs: commands run one at a time
 * in the sandbox, which ends every process it started before it returns.
 *
 * No Temporal imports: an activity wraps it.
 */
import { constants as fsc } from 'node:fs';
import { lstat, mkdir, open, readdir, readFile, realpath, stat } from 'node:fs/promises';
import path from 'node:path';
import vm from 'node:vm';
import { tool, type ModelMessage, type ToolModelMessage, type ToolSet } from 'ai';
import { z } from 'zod';
import { runModelStep, type ModelRegistry, type SpendContext } from '../model.js';
import { runSandboxed, SandboxRefusedError, type SandboxResult } from '../sandbox.js';

// ---------------------------------------------------------------------------------------------
// API

export interface AgentTask {
  changeId: string;
  goal: string;
  scope: string[];
  acceptance: string[];
  constraints: string[];
  plan: { steps: string[]; files: string[]; checks: string[] };
}

export interface AgentLimits {
  /** Model steps of the built-in loop. */
  maxSteps: number;
  /** Commands (bare names) run_command may run; the external agent's command is added to them. */
  commands: readonly string[];
  commandTimeoutMs: number;
  maxOutputBytes: number;
  /** Host paths bound read-only into the sandbox. */
  roBinds?: readonly string[];
  /** What one read_file returns at most (bytes; default 64 KiB). */
  maxReadBytes?: number;
  /** What one write_file or apply_patch may carry at most (bytes; default 1 MiB). */
  maxWriteBytes?: number;
}

export type AgentEvent = {
  at: string;
  kind: 'model' | 'tool' | 'blocked' | 'steer' | 'note' | 'external';
  text: string;
  tool?: string;
  ok?: boolean;
};

export interface AgentRunResult {
  finished: boolean;
  summary: string;
  steps: number;
  usage: { input: number; output: number; total: number };
  transcript: AgentEvent[];
  blocked: Array<{ tool: string; reason: string; detail: string }>;
}

/** The run was aborted by its signal. `name` is 'AbortError'; `partial` is what happened so far. */
export class AgentAbortedError extends Error {
  override readonly name = 'AbortError';
  constructor(
    readonly partial: AgentRunResult,
    reason?: unknown,
  ) {
    super('The coding agent was aborted', reason === undefined ? undefined : { cause: reason });
  }
}

export interface BuiltinAgentOptions {
  models: ModelRegistry;
  /** `provider:model`. */
  model: string;
  workTree: string;
  task: AgentTask;
  limits: AgentLimits;
  signal: AbortSignal;
  /** Called at the start of every step and every few seconds while a step runs. */
  heartbeat?: (d: { step: number }) => void;
  /** Steering messages from people; each becomes a user message before the next step. */
  takeSteers?: () => Promise<string[]>;
  /** Replaces the default system prompt. */
  systemPrompt?: string;
  /**
   * Whom the agent's model steps are spent for: step n is keyed `${key}:${n}` (the same on a
   * retry of the activity), kind 'coding-agent'. Required when the registry has a budget.
   */
  spend?: { key: string; scopes: SpendContext['scopes'] };
}

export interface ExternalAgentOptions {
  argv: string[];
  workTree: string;
  task: AgentTask;
  limits: AgentLimits;
  signal: AbortSignal;
  heartbeat?: (d: { step: number }) => void;
  timeoutMs: number;
}

// ---------------------------------------------------------------------------------------------
// Bounds

const DEFAULT_MAX_READ_BYTES = 64 * 1024;
const DEFAULT_MAX_WRITE_BYTES = 1024 * 1024;
/** read_file refuses files bigger than this (they are read whole to count lines). */
const MAX_READABLE_FILE = 16 * 1024 * 1024;
const DEFAULT_READ_LINES = 2000;
const LIST_MAX_ENTRIES = 500;
const SEARCH = {
  maxPatternChars: 500,
  maxFiles: 5000,
  maxFileBytes: 1024 * 1024,
  maxTotalBytes: 32 * 1024 * 1024,
  maxResults: 100,
  maxLineChars: 240,
  /** Time budget of one search, matching included (a regex is interrupted when it runs out). */
  timeMs: 3000,
};
const MAX_EVENT_CHARS = 4000;
const MAX_SUMMARY_CHARS = 4000;
const MAX_TAIL_CHARS = 8000;
const HEARTBEAT_EVERY_MS = 5000;

// ---------------------------------------------------------------------------------------------
// The task as text

const bullets = (items: readonly string[]) => (items.length ? items.map((s) => `- ${s}`).join('\n') : '- (none)');

/** The task as text, for the model and for an external agent. */
export function taskPrompt(task: AgentTask): string {
  return [
    `Change ${task.changeId}`,
    '',
    `Goal: ${task.goal}`,
    '',
    'Scope (the only parts of the repository you should change):',
    bullets(task.scope),
    '',
    'Acceptance criteria:',
    bullets(task.acceptance),
    '',
    'Constraints:',
    bullets(task.constraints),
    '',
    'Plan:',
    task.plan.steps.length ? task.plan.steps.map((s, i) => `${i + 1}. ${s}`).join('\n') : '(no steps given)',
    '',
    'Files expected to change:',
    bullets(task.plan.files),
    '',
    'Checks to run:',
    bullets(task.plan.checks),
  ].join('\n');
}

export const DEFAULT_SYSTEM_PROMPT = [
  'You are a careful software engineer making one change to a repository.',
  'You work in a private copy of the repository; the current directory is its root. Your only output is the change you leave in the files, plus a short summary.',
  'Tools: list_files, read_file, search (literal text, or a regular expression with regex: true), write_file (whole file), apply_patch (a unified diff with a/ and b/ prefixes, as git diff prints it), run_command (an allowlisted program, argv form, no shell unless a shell is allowlisted; no network), finish.',
  'Every path is relative to the repository root. Absolute paths, paths leaving the repository, symbolic links leading out of it and the .git directory are refused.',
  'Read before you change; keep the change within the scope; run the checks you are given; then call finish with a summary of what you changed and how you checked it.',
].join('\n');

// ---------------------------------------------------------------------------------------------
// Tools

const PathArg = z.string().min(1, 'the path is empty').max(4096);

export const AGENT_TOOL_INPUTS = {
  list_files: z.object({ path: z.string().max(4096).optional() }),
  read_file: z.object({
    path: PathArg,
    offset: z.number().int().min(1).optional(),
    limit: z.number().int().min(1).max(10_000).optional(),
  }),
  search: z.object({
    pattern: z.string().min(1, 'the pattern is empty').max(SEARCH.maxPatternChars),
    path: z.string().max(4096).optional(),
    regex: z.boolean().optional(),
  }),
  write_file: z.object({ path: PathArg, content: z.string() }),
  apply_patch: z.object({ patch: z.string().min(1, 'the patch is empty') }),
  run_command: z.object({ argv: z.array(z.string().min(1).max(4096)).min(1, 'argv is empty').max(100) }),
  finish: z.object({ summary: z.string().trim().min(1, 'the summary is empty').max(MAX_SUMMARY_CHARS) }),
} as const;

export type AgentToolName = keyof typeof AGENT_TOOL_INPUTS;

const DESCRIPTIONS: Record<AgentToolName, string> = {
  list_files: 'List files and directories (recursively, breadth first, at most 500 entries) under a path of the repository (default: its root). Directories end in /, symbolic links in @.',
  read_file: 'Read a text file of the repository. offset is the first line (1-based, default 1), limit the number of lines (default 2000); long reads are cut and say where to continue.',
  search: 'Search the text files of the repository (or of path, a file or directory) for pattern: literal text, or a JavaScript regular expression with regex: true. Returns up to 100 matching lines as path:line: text.',
  write_file: 'Write a whole text file (created, or replaced), creating missing directories.',
  apply_patch: 'Apply a unified diff (as git diff prints it: --- a/path, +++ b/path, @@ hunks with correct line counts) to the repository. All or nothing.',
  run_command: 'Run an allowlisted program with its arguments (argv, no shell expansion) in the repository root, without network. Returns its exit code and the tail of its output.',
  finish: 'End the work: summary says what you changed and how you checked it.',
};

/** Declared only (no execute): Steward runs them itself. */
/**
 * The output cap of one agent step under a budget: a write_file carries a whole file, so the
 * default cap of a budgeted step (4,096 tokens, about 16 KB) would cut larger files. The step
 * reserves this cap and asks the provider for it (domain/model.ts runModelStep); without a
 * budget no cap is sent.
 */
export const AGENT_MAX_OUTPUT_TOKENS = 16_384;

const AGENT_TOOLS: ToolSet = {
  list_files: tool({ description: DESCRIPTIONS.list_files, inputSchema: AGENT_TOOL_INPUTS.list_files }),
  read_file: tool({ description: DESCRIPTIONS.read_file, inputSchema: AGENT_TOOL_INPUTS.read_file }),
  search: tool({ description: DESCRIPTIONS.search, inputSchema: AGENT_TOOL_INPUTS.search }),
  write_file: tool({ description: DESCRIPTIONS.write_file, inputSchema: AGENT_TOOL_INPUTS.write_file }),
  apply_patch: tool({ description: DESCRIPTIONS.apply_patch, inputSchema: AGENT_TOOL_INPUTS.apply_patch }),
  run_command: tool({ description: DESCRIPTIONS.run_command, inputSchema: AGENT_TOOL_INPUTS.run_command }),
  finish: tool({ description: DESCRIPTIONS.finish, inputSchema: AGENT_TOOL_INPUTS.finish }),
};

const isAgentTool = (name: string): name is AgentToolName => Object.hasOwn(AGENT_TOOL_INPUTS, name);

/** The result of one tool call, as the model reads it (same shape as domain/tools.ts). */
function toolResult(call: { toolCallId: string; toolName: string }, text: string): ToolModelMessage {
  return { role: 'tool', content: [{ type: 'tool-result', toolCallId: call.toolCallId, toolName: call.toolName, output: { type: 'text', value: text } }] };
}

/** What a tool did: ok, an error (told to the model), or blocked (recorded as well). */
type ToolOutcome =
  | { kind: 'ok'; text: string }
  | { kind: 'error'; text: string }
  | { kind: 'blocked'; reason: string; detail: string };

const ok = (text: string): ToolOutcome => ({ kind: 'ok', text });
const fail = (text: string): ToolOutcome => ({ kind: 'error', text });
const block = (reason: string, detail: string): ToolOutcome => ({ kind: 'blocked', reason, detail });

// ---------------------------------------------------------------------------------------------
// Path confinement

type Confined =
  | {
      ok: true;
      /** Relative to the work tree, '/'-separated ('' for the root), as given. */
      rel: string;
      /** The resolved path to operate on: no symbolic link in it. */
      real: string;
      /** `real` relative to the work tree. */
      realRel: string;
      /** lstat of `real` when it exists. */
      st?: import('node:fs').Stats;
    }
  | { ok: false; outcome: ToolOutcome };

const errCode = (e: unknown) => (e && typeof e === 'object' && 'code' in e ? String((e as { code: unknown }).code) : '');
const errText = (e: unknown) => (e instanceof Error ? e.message : String(e));

const isGitSegment = (s: string) => s.toLowerCase() === '.git';

/** Inside `root` (both absolute, resolved): '' for root itself, else the relative path; undefined when outside. */
function within(root: string, p: string): string | undefined {
  const rel = path.relative(root, p);
  if (rel === '') return '';
  if (rel === '..' || rel.startsWith(`..${path.sep}`) || path.isAbsolute(rel)) return undefined;
  return rel.split(path.sep).join('/');
}

/**
 * Resolve a path argument inside the work tree, or say why it is refused.
 * `forWrite`: the path will be created or replaced (a symbolic link there is refused).
 */
async function confine(root: string, input: string, forWrite: boolean): Promise<Confined> {
  const shown = JSON.stringify(input.length > 200 ? `${input.slice(0, 200)}…` : input);
  const refuse = (reason: string, why: string): Confined => ({ ok: false, outcome: block(reason, `${shown}: ${why}`) });
  if (input.includes('\0')) return refuse('bad-path', 'the path holds a NUL byte');
  const p = input.trim() === '' ? '.' : input;
  if (path.isAbsolute(p) || /^[A-Za-z]:[\\/]/.test(p) || p.startsWith('\\')) {
    return refuse('absolute-path', 'absolute paths are refused; paths are relative to the repository root');
  }
  const abs = path.resolve(root, p);
  const rel = within(root, abs);
  if (rel === undefined) return refuse('escapes-work-tree', 'the path leads out of the repository');
  if (rel.split('/').some(isGitSegment)) return refuse('git-metadata', 'the .git directory is off limits');

  // The deepest existing ancestor (lstat: a symbolic link counts as existing).
  let existing = abs;
  const rest: string[] = [];
  let st: import('node:fs').Stats | undefined;
  for (;;) {
    try {
      st = await lstat(existing);
      break;
    } catch (e) {
      const code = errCode(e);
      // ELOOP: a looping link on the way; the walk up finds it and realpath refuses it below.
      if ((code !== 'ENOENT' && code !== 'ENOTDIR' && code !== 'ELOOP') || existing === root) return { ok: false, outcome: fail(`${shown}: ${errText(e)}`) };
      rest.unshift(path.basename(existing));
      existing = path.dirname(existing);
    }
  }
  let realExisting: string;
  try {
    realExisting = await realpath(existing);
  } catch (e) {
    // lstat saw it, realpath cannot follow it: a dangling or looping symbolic link.
    return refuse('symlink', `the path goes through a symbolic link that leads nowhere (${errCode(e) || errText(e)})`);
  }
  const real = path.join(realExisting, ...rest);
  const realRel = within(root, real);
  if (realRel === undefined) return refuse('symlink-escape', 'the path goes through a symbolic link that leads out of the repository');
  if (realRel.split('/').some(isGitSegment)) return refuse('git-metadata', 'the path leads into the .git directory through a symbolic link');
  const target = rest.length === 0 ? st : undefined;
  if (target?.isSymbolicLink() && forWrite) return refuse('symlink', 'the path is a symbolic link; write_file writes regular files only');
  // realExisting has every link resolved, so `real` is the file itself: stat it without following.
  let realSt: import('node:fs').Stats | undefined;
  if (rest.length === 0) {
    try {
      realSt = await lstat(real);
    } catch (e) {
      return { ok: false, outcome: fail(`${shown}: ${errText(e)}`) };
    }
  }
  return { ok: true, rel, real, realRel, ...(realSt ? { st: realSt } : {}) };
}

// ---------------------------------------------------------------------------------------------
// The tools, one by one

interface ToolContext {
  root: string;
  limits: AgentLimits;
  signal: AbortSignal;
  /** Read-only binds of every sandboxed command: the operator's, plus the work tree's .git. */
  roBinds: readonly string[];
}

/**
 * The read-only binds of a sandboxed command: the operator's, and the work tree's own .git
 * directory, bound read-only over the writable work tree. A command may read the repository's
 * history but not change it: no hooks, no config (a `core.fsmonitor` or a hook planted there
 * would run on the host the next time the caller runs git in the work tree), no commits that
 * would hide the change from the caller's diff.
 */
async function sandboxBinds(root: string, limits: AgentLimits): Promise<string[]> {
  const binds = [...(limits.roBinds ?? [])];
  const git = path.join(root, '.git');
  try {
    const st = await lstat(git);
    if (st.isDirectory()) binds.push(git);
  } catch {
    // no .git directory: nothing to protect
  }
  return binds;
}

async function listFiles(ctx: ToolContext, input: z.infer<(typeof AGENT_TOOL_INPUTS)['list_files']>): Promise<ToolOutcome> {
  const c = await confine(ctx.root, input.path ?? '.', false);
  if (!c.ok) return c.outcome;
  if (!c.st) return fail(`${c.rel || '.'} does not exist`);
  if (!c.st.isDirectory()) return ok(`${c.rel} (${c.st.isFile() ? `file, ${c.st.size} bytes` : 'not a directory'})`);
  const out: string[] = [];
  const queue: string[] = [c.realRel];
  let truncated = false;
  while (queue.length > 0 && !truncated) {
    if (ctx.signal.aborted) break;
    const dirRel = queue.shift()!;
    let entries: import('node:fs').Dirent[];
    try {
      entries = await readdir(path.join(ctx.root, dirRel), { withFileTypes: true });
    } catch (e) {
      out.push(`${dirRel}/ (unreadable: ${errCode(e) || errText(e)})`);
      continue;
    }
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const d of entries) {
      if (isGitSegment(d.name)) continue;
      const rel = dirRel ? `${dirRel}/${d.name}` : d.name;
      if (out.length >= LIST_MAX_ENTRIES) {
        truncated = true;
        break;
      }
      if (d.isDirectory()) {
        out.push(`${rel}/`);
        queue.push(rel);
      } else if (d.isSymbolicLink()) out.push(`${rel}@`);
      else out.push(rel);
    }
  }
  if (out.length === 0) return ok(`${c.rel || '.'} is empty`);
  return ok(out.join('\n') + (truncated ? `\n… (stopped at ${LIST_MAX_ENTRIES} entries; list a subdirectory)` : ''));
}

/** A NUL byte near the start: a binary file. */
const looksBinary = (buf: Buffer) => buf.subarray(0, 8000).includes(0);

async function readFileTool(ctx: ToolContext, input: z.infer<(typeof AGENT_TOOL_INPUTS)['read_file']>): Promise<ToolOutcome> {
  const c = await confine(ctx.root, input.path, false);
  if (!c.ok) return c.outcome;
  if (!c.st) return fail(`${c.rel} does not exist`);
  if (c.st.isDirectory()) return fail(`${c.rel} is a directory; use list_files`);
  if (!c.st.isFile()) return fail(`${c.rel} is not a regular file`);
  if (c.st.nlink > 1) return block('hardlink', `${JSON.stringify(c.rel)}: the file has other hard links; refused`);
  if (c.st.size > MAX_READABLE_FILE) return fail(`${c.rel} is ${c.st.size} bytes, too big to read; use search`);
  const buf = await readFile(c.real, { flag: fsc.O_RDONLY | fsc.O_NOFOLLOW | fsc.O_NONBLOCK });
  if (looksBinary(buf)) return fail(`${c.rel} is a binary file (${buf.length} bytes)`);
  if (buf.length === 0) return ok(`${c.rel}: (empty file)`);
  const lines = buf.toString('utf8').split('\n');
  if (lines.length > 1 && lines[lines.length - 1] === '') lines.pop();
  const total = lines.length;
  const first = input.offset ?? 1;
  if (first > Math.max(total, 1)) return fail(`${c.rel} has ${total} lines; offset ${first} is past its end`);
  const maxBytes = ctx.limits.maxReadBytes ?? DEFAULT_MAX_READ_BYTES;
  const want = input.limit ?? DEFAULT_READ_LINES;
  const picked: string[] = [];
  let bytes = 0;
  let cut = false;
  for (let i = first - 1; i < total && picked.length < want; i++) {
    const line = lines[i] ?? '';
    const size = Buffer.byteLength(line, 'utf8') + 1;
    if (bytes + size > maxBytes) {
      if (picked.length === 0) picked.push(Buffer.from(line, 'utf8').subarray(0, maxBytes).toString('utf8'));
      cut = true;
      break;
    }
    picked.push(line);
    bytes += size;
  }
  const last = first + picked.length - 1;
  const more = last < total;
  const header = `${c.rel}: lines ${first}-${last} of ${total}`;
  const footer = more ? `\n… (${cut ? 'cut at the read limit; ' : ''}continue with offset=${last + 1})` : '';
  return ok(`${header}\n${picked.join('\n')}${footer}`);
}

/** Matching runs in a vm context with a timeout, so a pathological regex is interrupted. */
const SCAN_SOURCE = `
globalThis.__scan = function (text, max, pattern, isRegex) {
  const re = isRegex ? new RegExp(pattern) : null;
  const out = [];
  const lines = text.split('\\n');
  for (let i = 0; i < lines.length && out.length < max; i++) {
    const line = lines[i];
    const at = re ? line.search(re) : line.indexOf(pattern);
    if (at >= 0) out.push([i + 1, at, line]);
  }
  return out;
};`;

function clipLine(line: string, at: number): string {
  const s = line.replace(/\r$/, '');
  if (s.length <= SEARCH.maxLineChars) return s;
  const start = Math.max(0, Math.min(at - 40, s.length - SEARCH.maxLineChars));
  return `${start > 0 ? '…' : ''}${s.slice(start, start + SEARCH.maxLineChars)}…`;
}

async function searchTool(ctx: ToolContext, input: z.infer<(typeof AGENT_TOOL_INPUTS)['search']>): Promise<ToolOutcome> {
  const isRegex = input.regex === true;
  if (isRegex) {
    try {
      new RegExp(input.pattern);
    } catch (e) {
      return fail(`Invalid regular expression: ${errText(e)}`);
    }
  }
  const c = await confine(ctx.root, input.path ?? '.', false);
  if (!c.ok) return c.outcome;
  if (!c.st) return fail(`${c.rel || '.'} does not exist`);

  const started = Date.now();
  const context = vm.createContext({ __pattern: input.pattern, __isRegex: isRegex, __text: '' });
  vm.runInContext(SCAN_SOURCE, context);
  const results: string[] = [];
  const matchedFiles = new Set<string>();
  let scanned = 0;
  let skipped = 0;
  let totalBytes = 0;
  let stopped = '';

  const scanFile = async (rel: string, size: number) => {
    if (size > SEARCH.maxFileBytes) {
      skipped++;
      return;
    }
    if (totalBytes + size > SEARCH.maxTotalBytes) {
      stopped = `stopped after reading ${totalBytes} bytes`;
      return;
    }
    let buf: Buffer;
    try {
      buf = await readFile(path.join(ctx.root, rel), { flag: fsc.O_RDONLY | fsc.O_NOFOLLOW | fsc.O_NONBLOCK });
    } catch {
      skipped++;
      return;
    }
    totalBytes += buf.length;
    if (looksBinary(buf)) {
      skipped++;
      return;
    }
    scanned++;
    const left = SEARCH.timeMs - (Date.now() - started);
    if (left <= 0) {
      stopped = `stopped after ${SEARCH.timeMs} ms`;
      return;
    }
    let found: Array<[number, number, string]>;
    try {
      context.__text = buf.toString('utf8');
      found = vm.runInContext(`__scan(__text, ${SEARCH.maxResults - results.length}, __pattern, __isRegex)`, context, { timeout: left }) as Array<[number, number, string]>;
    } catch (e) {
      stopped = errCode(e) === 'ERR_SCRIPT_EXECUTION_TIMEOUT' ? `stopped after ${SEARCH.timeMs} ms (the pattern is too slow on ${rel})` : `stopped: ${errText(e)}`;
      return;
    } finally {
      context.__text = '';
    }
    for (const [line, at, text] of found) {
      results.push(`${rel}:${line}: ${clipLine(text, at)}`);
      matchedFiles.add(rel);
    }
  };

  if (c.st.isFile()) {
    await scanFile(c.realRel, c.st.size);
  } else if (c.st.isDirectory()) {
    const queue: string[] = [c.realRel];
    let visited = 0;
    while (queue.length > 0 && !stopped && results.length < SEARCH.maxResults) {
      if (ctx.signal.aborted) break;
      const dirRel = queue.shift()!;
      let entries: import('node:fs').Dirent[];
      try {
        entries = await readdir(path.join(ctx.root, dirRel), { withFileTypes: true });
      } catch {
        continue;
      }
      entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
      for (const d of entries) {
        if (stopped || results.length >= SEARCH.maxResults) break;
        if (isGitSegment(d.name)) continue;
        const rel = dirRel ? `${dirRel}/${d.name}` : d.name;
        // Symbolic links are not followed; only directories and regular files are looked at.
        if (d.isDirectory()) queue.push(rel);
        else if (d.isFile()) {
          if (++visited > SEARCH.maxFiles) {
            stopped = `stopped after ${SEARCH.maxFiles} files`;
            break;
          }
          let size: number;
          try {
            const s = await lstat(path.join(ctx.root, rel));
            if (!s.isFile()) continue;
            size = s.size;
          } catch {
            continue;
          }
          await scanFile(rel, size);
        }
      }
    }
  } else {
    return fail(`${c.rel} is neither a file nor a directory`);
  }
  const head = `${results.length}${results.length >= SEARCH.maxResults ? '+' : ''} matching line(s) in ${matchedFiles.size} file(s); ${scanned} file(s) searched${skipped ? `, ${skipped} skipped (binary, over ${SEARCH.maxFileBytes} bytes or unreadable)` : ''}${stopped ? `; ${stopped}` : ''}`;
  return ok(results.length ? `${head}\n${results.join('\n')}` : head);
}

async function writeFileTool(ctx: ToolContext, input: z.infer<(typeof AGENT_TOOL_INPUTS)['write_file']>): Promise<ToolOutcome> {
  const bytes = Buffer.from(input.content, 'utf8');
  const max = ctx.limits.maxWriteBytes ?? DEFAULT_MAX_WRITE_BYTES;
  if (bytes.length > max) return fail(`The content is ${bytes.length} bytes; write_file takes at most ${max}`);
  const c = await confine(ctx.root, input.path, true);
  if (!c.ok) return c.outcome;
  if (c.rel === '') return fail('The path names the repository root, not a file');
  if (c.st) {
    if (c.st.isDirectory()) return fail(`${c.rel} is a directory`);
    if (!c.st.isFile()) return block('special-file', `${JSON.stringify(c.rel)}: not a regular file; write_file writes regular files only`);
    if (c.st.nlink > 1) return block('hardlink', `${JSON.stringify(c.rel)}: the file has other hard links; refused`);
  }
  try {
    await mkdir(path.dirname(c.real), { recursive: true });
    const fh = await open(c.real, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_TRUNC | fsc.O_NOFOLLOW | fsc.O_NONBLOCK, 0o644);
    try {
      const s = await fh.stat();
      if (!s.isFile() || s.nlink > 1) return block('special-file', `${JSON.stringify(c.rel)}: not a plain regular file; refused`);
      await fh.writeFile(bytes);
    } finally {
      await fh.close();
    }
  } catch (e) {
    if (errCode(e) === 'ELOOP') return block('symlink', `${JSON.stringify(c.rel)}: the path is a symbolic link; write_file writes regular files only`);
    return fail(`Could not write ${c.rel}: ${errText(e)}`);
  }
  return ok(`${c.st ? 'Replaced' : 'Created'} ${c.rel} (${bytes.length} bytes)`);
}

// --- apply_patch --------------------------------------------------------------------------

/** A C-quoted git path ("a/x\tb") unquoted; other paths as they are. */
function unquoteGitPath(s: string): string {
  if (!s.startsWith('"')) return s;
  const end = s.lastIndexOf('"');
  const body = s.slice(1, end > 0 ? end : undefined);
  const bytes: number[] = [];
  for (let i = 0; i < body.length; i++) {
    const ch = body[i]!;
    if (ch !== '\\') {
      bytes.push(...Buffer.from(ch, 'utf8'));
      continue;
    }
    const n = body[++i] ?? '';
    const simple: Record<string, number> = { a: 7, b: 8, t: 9, n: 10, v: 11, f: 12, r: 13, '"': 34, '\\': 92 };
    if (n in simple) bytes.push(simple[n]!);
    else if (/[0-7]/.test(n)) {
      const oct = body.slice(i, i + 3);
      bytes.push(parseInt(oct, 8) & 0xff);
      i += 2;
    } else bytes.push(...Buffer.from(n, 'utf8'));
  }
  return Buffer.from(bytes).toString('utf8');
}

/** The path of a ---/+++ line: quoted or up to a tab (a timestamp follows). */
function headerPath(s: string): string {
  const t = s.startsWith('"') ? unquoteGitPath(s) : (s.split('\t')[0] ?? '').replace(/\s+$/, '');
  return t;
}

/** `git apply` strips one leading component (-p1) from ---/+++ and diff --git names. */
const stripOne = (p: string) => {
  const i = p.indexOf('/');
  return i >= 0 ? p.slice(i + 1) : p;
};

export interface PatchScan {
  /** Paths the patch touches, as given (unstripped) and as git apply reads them. */
  paths: Array<{ raw: string; path: string }>;
  /** Mode lines that make a symbolic link or a submodule. */
  specialModes: string[];
}

/**
 * The file names a unified diff touches, read the way `git apply` reads them: hunks are
 * skipped by their line counts, so a hunk line is never taken for a header and every header
 * git sees is seen here.
 */
export function scanPatch(patch: string): PatchScan {
  const lines = patch.split('\n');
  const paths: PatchScan['paths'] = [];
  const specialModes: string[] = [];
  let oldLeft = 0;
  let newLeft = 0;
  for (const raw of lines) {
    const line = raw.replace(/\r$/, '');
    if (oldLeft > 0 || newLeft > 0) {
      const c = line[0];
      if (c === '\\') continue;
      if (c === '-') {
        oldLeft--;
        continue;
      }
      if (c === '+') {
        newLeft--;
        continue;
      }
      if (c === ' ' || line === '') {
        oldLeft--;
        newLeft--;
        continue;
      }
      // Not a hunk line: git calls the patch corrupt; read it as a header all the same.
      oldLeft = newLeft = 0;
    }
    const hunk = /^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@/.exec(line);
    if (hunk) {
      oldLeft = hunk[1] === undefined ? 1 : Number(hunk[1]);
      newLeft = hunk[2] === undefined ? 1 : Number(hunk[2]);
      continue;
    }
    let m: RegExpExecArray | null;
    if ((m = /^(?:---|\+\+\+) (.*)$/.exec(line))) {
      const p = headerPath(m[1] ?? '');
      if (p && p !== '/dev/null') paths.push({ raw: p, path: stripOne(p) });
    } else if ((m = /^diff --git (.*)$/.exec(line))) {
      const rest = m[1] ?? '';
      const q = /^("(?:[^"\\]|\\.)*")\s+("(?:[^"\\]|\\.)*")$/.exec(rest);
      const names = q ? [unquoteGitPath(q[1]!), unquoteGitPath(q[2]!)] : rest.split(' ');
      for (const n of names) if (n) paths.push({ raw: n, path: stripOne(n) });
    } else if ((m = /^(?:rename|copy) (?:from|to) (.*)$/.exec(line))) {
      const p = headerPath(m[1] ?? '');
      if (p) paths.push({ raw: p, path: p });
    } else if ((m = /^(?:new file mode|new mode|index [0-9a-f]+\.\.[0-9a-f]+) ?(\d{6})?\s*$/.exec(line))) {
      // Making or changing a symbolic link (120000) or a submodule (160000).
      const mode = m[1];
      if (mode === '120000' || mode === '160000') specialModes.push(line);
    }
  }
  return { paths, specialModes };
}

async function applyPatchTool(ctx: ToolContext, input: z.infer<(typeof AGENT_TOOL_INPUTS)['apply_patch']>): Promise<ToolOutcome> {
  const max = ctx.limits.maxWriteBytes ?? DEFAULT_MAX_WRITE_BYTES;
  const size = Buffer.byteLength(input.patch, 'utf8');
  if (size > max) return fail(`The patch is ${size} bytes; apply_patch takes at most ${max}`);
  if (input.patch.includes('\0')) return fail('The patch holds a NUL byte');
  const scan = scanPatch(input.patch);
  if (scan.specialModes.length > 0) {
    return block('symlink', `the patch makes a symbolic link or submodule (${scan.specialModes[0]}); only regular files may be written`);
  }
  if (scan.paths.length === 0) return fail('No file headers found: a patch needs --- a/path and +++ b/path lines (or diff --git headers) before its @@ hunks');
  const seen = new Set<string>();
  for (const p of scan.paths) {
    if (seen.has(`${p.raw}\0${p.path}`)) continue;
    seen.add(`${p.raw}\0${p.path}`);
    if (p.raw.split('/').includes('..')) return block('escapes-work-tree', `patch path ${JSON.stringify(p.raw)}: the path leads out of the repository`);
    if (path.isAbsolute(p.raw)) return block('absolute-path', `patch path ${JSON.stringify(p.raw)}: absolute paths are refused`);
    const c = await confine(ctx.root, p.path, true);
    if (!c.ok) {
      if (c.outcome.kind === 'blocked') return block(c.outcome.reason, `patch path ${c.outcome.detail}`);
      // A path that cannot be resolved is git apply's to report.
    }
  }
  // git applies it, in the sandbox: only the work tree is writable there, and git apply itself
  // refuses paths outside the repository or beyond a symbolic link.
  let r: SandboxResult;
  try {
    r = await runSandboxed({
      argv: ['git', '-c', 'safe.directory=*', 'apply', '--whitespace=nowarn', '-'],
      workTree: ctx.root,
      cwd: '.',
      allowlist: ['git'],
      timeoutMs: Math.min(ctx.limits.commandTimeoutMs, 60_000),
      maxOutputBytes: ctx.limits.maxOutputBytes,
      stdin: input.patch.endsWith('\n') ? input.patch : `${input.patch}\n`,
      roBinds: ctx.roBinds,
      signal: ctx.signal,
    });
  } catch (e) {
    // No sandbox on this host: fail the run (fail closed), never fall back to running unsandboxed.
    if (e instanceof SandboxRefusedError && e.reason !== 'unavailable') return block(`sandbox-${e.reason}`, `git apply: ${e.message}`);
    throw e;
  }
  if (r.aborted) return fail('aborted');
  if (r.exitCode !== 0) {
    return fail(`The patch did not apply (nothing was changed)${r.timedOut ? ', timed out' : ''}:\n${tail(r.stderrTail || r.stdoutTail)}`);
  }
  const files = [...new Set(scan.paths.map((p) => p.path))];
  return ok(`Applied the patch to ${files.length} file(s): ${files.slice(0, 20).join(', ')}${files.length > 20 ? ', …' : ''}`);
}

// --- run_command --------------------------------------------------------------------------

const tail = (s: string, n = MAX_TAIL_CHARS) => (s.length > n ? `…${s.slice(-n)}` : s);

function describeRun(r: SandboxResult): string {
  const status = r.timedOut
    ? 'timed out'
    : r.signal
      ? `killed by ${r.signal}`
      : `exit code ${r.exitCode ?? 'none'}`;
  return [
    `${status} (${r.durationMs} ms${r.truncated ? `, output truncated at ${r.outputBytes} bytes` : ''})`,
    `--- stdout (tail) ---`,
    tail(r.stdoutTail),
    `--- stderr (tail) ---`,
    tail(r.stderrTail),
  ].join('\n');
}

async function runCommandTool(ctx: ToolContext, input: z.infer<(typeof AGENT_TOOL_INPUTS)['run_command']>): Promise<ToolOutcome> {
  const cmd = input.argv[0]!;
  const allowed = ctx.limits.commands;
  if (cmd.includes('/') || !allowed.includes(cmd)) {
    return block(
      'not-allowlisted',
      `${JSON.stringify(cmd)} is not an allowed command${cmd.includes('/') ? ' (name a command, not a path)' : ''}; allowed: ${allowed.length ? allowed.join(', ') : 'none'}`,
    );
  }
  let r: SandboxResult;
  try {
    r = await runSandboxed({
      argv: input.argv,
      workTree: ctx.root,
      cwd: '.',
      allowlist: allowed,
      timeoutMs: ctx.limits.commandTimeoutMs,
      maxOutputBytes: ctx.limits.maxOutputBytes,
      roBinds: ctx.roBinds,
      signal: ctx.signal,
    });
  } catch (e) {
    if (e instanceof SandboxRefusedError && e.reason !== 'unavailable') return block(e.reason === 'not-allowlisted' ? 'not-allowlisted' : `sandbox-${e.reason}`, `${input.argv.join(' ').slice(0, 300)}: ${e.message}`);
    throw e;
  }
  if (r.aborted) return fail('aborted');
  const text = describeRun(r);
  return r.exitCode === 0 ? ok(text) : fail(text);
}

// ---------------------------------------------------------------------------------------------
// The loop

const now = () => new Date().toISOString();
const clip = (s: string, n = MAX_EVENT_CHARS) => (s.length > n ? `${s.slice(0, n)}…` : s);

function describeInput(name: AgentToolName, input: unknown): string {
  const i = (input ?? {}) as Record<string, unknown>;
  switch (name) {
    case 'write_file':
      return `${String(i.path)} (${typeof i.content === 'string' ? Buffer.byteLength(i.content) : 0} bytes)`;
    case 'apply_patch':
      return `(${typeof i.patch === 'string' ? Buffer.byteLength(i.patch) : 0} bytes) ${clip(String(i.patch ?? ''), 600)}`;
    case 'run_command':
      return Array.isArray(i.argv) ? i.argv.map(String).join(' ') : '';
    default:
      return JSON.stringify(i);
  }
}

class Recorder {
  transcript: AgentEvent[] = [];
  blocked: AgentRunResult['blocked'] = [];
  add(e: Omit<AgentEvent, 'at'>) {
    this.transcript.push({ at: now(), ...e, text: clip(e.text) });
  }
}

function isAbort(e: unknown, signal: AbortSignal): boolean {
  return signal.aborted || (e instanceof Error && (e.name === 'AbortError' || e.name === 'TimeoutError'));
}

/**
 * The built-in tool loop: model steps, tools run by Steward in the work tree, until `finish`,
 * a step without tool calls (its text is the summary) or `limits.maxSteps` (finished: false).
 * Rejects with AgentAbortedError (with the partial result) when `signal` aborts, with the model
 * layer's error when a model call fails (classifyModelError applies), and with
 * SandboxRefusedError('unavailable') when commands cannot be sandboxed on this host.
 */
export async function runBuiltinAgent(opts: BuiltinAgentOptions): Promise<AgentRunResult> {
  const { signal, limits } = opts;
  const rec = new Recorder();
  const usage = { input: 0, output: 0, total: 0 };
  let steps = 0;
  const result = (finished: boolean, summary: string): AgentRunResult => ({
    finished,
    summary: clip(summary.trim(), MAX_SUMMARY_CHARS),
    steps,
    usage: { ...usage },
    transcript: rec.transcript,
    blocked: rec.blocked,
  });
  const aborted = (reason?: unknown): AgentAbortedError => {
    rec.add({ kind: 'note', text: 'aborted' });
    return new AgentAbortedError(result(false, 'aborted'), reason ?? signal.reason);
  };
  if (signal.aborted) throw aborted();

  let root: string;
  try {
    root = await realpath(opts.workTree);
    if (!(await stat(root)).isDirectory()) throw new Error('not a directory');
  } catch (e) {
    throw new Error(`The work tree ${opts.workTree} is not usable: ${errText(e)}`);
  }
  const ctx: ToolContext = { root, limits, signal, roBinds: await sandboxBinds(root, limits) };
  const messages: ModelMessage[] = [
    { role: 'system', content: opts.systemPrompt ?? DEFAULT_SYSTEM_PROMPT },
    { role: 'user', content: taskPrompt(opts.task) },
  ];
  const beat = () => {
    try {
      opts.heartbeat?.({ step: steps });
    } catch {
      // a heartbeat never ends the run
    }
  };
  const ticker = setInterval(beat, HEARTBEAT_EVERY_MS);
  ticker.unref();
  let lastText = '';
  try {
    while (steps < limits.maxSteps) {
      if (signal.aborted) throw aborted();
      const steers = opts.takeSteers ? await opts.takeSteers() : [];
      for (const s of steers) {
        if (!s.trim()) continue;
        messages.push({ role: 'user', content: s });
        rec.add({ kind: 'steer', text: s });
      }
      steps++;
      beat();
      let out: Awaited<ReturnType<typeof runModelStep>>;
      try {
        out = await runModelStep(opts.models, { model: opts.model, think: 'off', messages, tools: AGENT_TOOLS, budgetOutputTokens: AGENT_MAX_OUTPUT_TOKENS, ...(opts.spend ? { spend: { key: `${opts.spend.key}:${steps}`, kind: 'coding-agent', scopes: opts.spend.scopes } } : {}) }, { signal });
      } catch (e) {
        if (isAbort(e, signal)) throw aborted(e);
        throw e;
      }
      usage.input += out.usage.inputTokens;
      usage.output += out.usage.outputTokens;
      usage.total += out.usage.totalTokens;
      if (out.text.trim()) lastText = out.text;
      rec.add({
        kind: 'model',
        text: `step ${steps}: ${out.text.trim() || '(no text)'}${out.toolCalls.length ? ` → ${out.toolCalls.map((c) => c.toolName).join(', ')}` : ''}`,
      });
      if (out.toolCalls.length === 0) {
        return result(true, out.text.trim() || '(the agent ended without a summary)');
      }
      messages.push({
        role: 'assistant',
        content: [
          ...(out.text ? [{ type: 'text' as const, text: out.text }] : []),
          ...out.toolCalls.map((c) => ({ type: 'tool-call' as const, toolCallId: c.toolCallId, toolName: c.toolName, input: c.input ?? {} })),
        ],
      });
      for (const call of out.toolCalls) {
        if (signal.aborted) throw aborted();
        const name = call.toolName;
        if (!isAgentTool(name)) {
          const text = `There is no tool named ${name}. Tools: ${Object.keys(AGENT_TOOL_INPUTS).join(', ')}.`;
          rec.add({ kind: 'tool', tool: name, ok: false, text });
          messages.push(toolResult(call, `Error: ${text}`));
          continue;
        }
        const parsed = AGENT_TOOL_INPUTS[name].safeParse(call.input);
        if (!parsed.success || call.invalid) {
          const why = parsed.success
            ? `the call could not be read: ${call.error ?? 'invalid'}`
            : parsed.error.issues.map((i) => `${i.path.join('.') || '(input)'}: ${i.message}`).join('; ');
          const text = `Invalid input for ${name}: ${why}. Nothing was done.`;
          rec.add({ kind: 'tool', tool: name, ok: false, text });
          messages.push(toolResult(call, `Error: ${text}`));
          continue;
        }
        if (name === 'finish') {
          const summary = (parsed.data as { summary: string }).summary;
          rec.add({ kind: 'tool', tool: name, ok: true, text: `finish: ${summary}` });
          return result(true, summary);
        }
        let outcome: ToolOutcome;
        try {
          outcome = await runTool(ctx, name, parsed.data);
        } catch (e) {
          if (isAbort(e, signal)) throw aborted(e);
          // no sandbox here: the run fails rather than going on without commands
          if (e instanceof SandboxRefusedError) throw e;
          outcome = fail(`${name} failed: ${errText(e)}`);
        }
        if (signal.aborted) throw aborted();
        const what = `${name} ${describeInput(name, parsed.data)}`;
        if (outcome.kind === 'blocked') {
          rec.blocked.push({ tool: name, reason: outcome.reason, detail: outcome.detail });
          rec.add({ kind: 'blocked', tool: name, ok: false, text: `${what} → BLOCKED (${outcome.reason}): ${outcome.detail}` });
          messages.push(toolResult(call, `BLOCKED (${outcome.reason}): ${outcome.detail}. Nothing was done; this is not allowed, so do not try it another way.`));
        } else {
          rec.add({ kind: 'tool', tool: name, ok: outcome.kind === 'ok', text: `${what} → ${outcome.text}` });
          messages.push(toolResult(call, outcome.kind === 'ok' ? outcome.text : `Error: ${outcome.text}`));
        }
      }
    }
    rec.add({ kind: 'note', text: `stopped after ${steps} steps (the limit) without finishing` });
    return result(false, `Stopped after ${steps} steps without finishing.${lastText.trim() ? ` Last words: ${lastText.trim()}` : ''}`);
  } finally {
    clearInterval(ticker);
  }
}

function runTool(ctx: ToolContext, name: Exclude<AgentToolName, 'finish'>, input: unknown): Promise<ToolOutcome> {
  switch (name) {
    case 'list_files':
      return listFiles(ctx, input as z.infer<(typeof AGENT_TOOL_INPUTS)['list_files']>);
    case 'read_file':
      return readFileTool(ctx, input as z.infer<(typeof AGENT_TOOL_INPUTS)['read_file']>);
    case 'search':
      return searchTool(ctx, input as z.infer<(typeof AGENT_TOOL_INPUTS)['search']>);
    case 'write_file':
      return writeFileTool(ctx, input as z.infer<(typeof AGENT_TOOL_INPUTS)['write_file']>);
    case 'apply_patch':
      return applyPatchTool(ctx, input as z.infer<(typeof AGENT_TOOL_INPUTS)['apply_patch']>);
    case 'run_command':
      return runCommandTool(ctx, input as z.infer<(typeof AGENT_TOOL_INPUTS)['run_command']>);
  }
}

// ---------------------------------------------------------------------------------------------
// External agent

/**
 * Run an external agent command in the sandbox, in the work tree, with the task as JSON in
 * STEWARD_TASK and on stdin. finished = exit code 0; summary = the last non-empty line of its
 * stdout. A request the sandbox refuses is recorded as blocked (finished: false); no sandbox on
 * this host rejects with SandboxRefusedError('unavailable'); an abort with AgentAbortedError.
 */
export async function runExternalAgent(opts: ExternalAgentOptions): Promise<AgentRunResult> {
  const { signal, limits } = opts;
  const rec = new Recorder();
  const result = (finished: boolean, summary: string): AgentRunResult => ({
    finished,
    summary: clip(summary.trim(), MAX_SUMMARY_CHARS),
    steps: 1,
    usage: { input: 0, output: 0, total: 0 },
    transcript: rec.transcript,
    blocked: rec.blocked,
  });
  const cmd = opts.argv[0];
  if (!cmd) throw new Error('runExternalAgent: argv is empty');
  if (signal.aborted) throw new AgentAbortedError(result(false, 'aborted'), signal.reason);
  let root: string;
  try {
    root = await realpath(opts.workTree);
  } catch (e) {
    throw new Error(`The work tree ${opts.workTree} is not usable: ${errText(e)}`);
  }
  const json = JSON.stringify(opts.task);
  const allowlist = [...new Set([path.basename(cmd), ...limits.commands])];
  rec.add({ kind: 'external', text: `run: ${opts.argv.join(' ').slice(0, 1000)}` });
  const beat = () => {
    try {
      opts.heartbeat?.({ step: 1 });
    } catch {
      // never fatal
    }
  };
  beat();
  const ticker = setInterval(beat, HEARTBEAT_EVERY_MS);
  ticker.unref();
  let r: SandboxResult;
  try {
    r = await runSandboxed({
      argv: opts.argv,
      workTree: root,
      cwd: '.',
      allowlist,
      timeoutMs: opts.timeoutMs,
      maxOutputBytes: limits.maxOutputBytes,
      env: { STEWARD_TASK: json },
      stdin: json,
      roBinds: await sandboxBinds(root, limits),
      signal,
    });
  } catch (e) {
    if (e instanceof SandboxRefusedError && e.reason !== 'unavailable') {
      rec.blocked.push({ tool: 'external', reason: e.reason, detail: e.message });
      rec.add({ kind: 'blocked', tool: 'external', ok: false, text: `refused by the sandbox (${e.reason}): ${e.message}` });
      return result(false, `The external agent was not run: ${e.message}`);
    }
    if (isAbort(e, signal)) throw new AgentAbortedError(result(false, 'aborted'), e);
    throw e;
  } finally {
    clearInterval(ticker);
  }
  if (r.aborted || signal.aborted) {
    rec.add({ kind: 'note', text: 'aborted' });
    throw new AgentAbortedError(result(false, 'aborted'), signal.reason);
  }
  const done = r.exitCode === 0 && !r.timedOut;
  rec.add({
    kind: 'external',
    ok: done,
    text: r.timedOut ? `timed out after ${r.durationMs} ms` : r.signal ? `killed by ${r.signal} after ${r.durationMs} ms` : `exit code ${r.exitCode} after ${r.durationMs} ms`,
  });
  if (r.stdoutTail) rec.add({ kind: 'external', text: `stdout (tail${r.truncated ? ', truncated' : ''}):\n${tail(r.stdoutTail, MAX_EVENT_CHARS - 40)}` });
  if (r.stderrTail) rec.add({ kind: 'external', text: `stderr (tail):\n${tail(r.stderrTail, MAX_EVENT_CHARS - 40)}` });
  const lastLine = r.stdoutTail.split('\n').map((l) => l.trim()).filter(Boolean).pop() ?? '';
  const summary = lastLine
    ? clip(lastLine, 1000)
    : done
      ? '(the external agent printed no summary)'
      : `The external agent failed (${r.timedOut ? 'timed out' : r.signal ? `signal ${r.signal}` : `exit code ${r.exitCode}`}).`;
  return result(done, summary);
}

/** Exposed for tests: the path check the tools use. */
export async function checkAgentPath(workTree: string, p: string, forWrite: boolean): Promise<{ ok: true; rel: string } | { ok: false; blocked: boolean; reason: string; detail: string }> {
  const root = await realpath(workTree);
  const c = await confine(root, p, forWrite);
  if (c.ok) return { ok: true, rel: c.rel };
  const o = c.outcome;
  return o.kind === 'blocked' ? { ok: false, blocked: true, reason: o.reason, detail: o.detail } : { ok: false, blocked: false, reason: 'error', detail: o.kind === 'error' ? o.text : '' };
}
