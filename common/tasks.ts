/**
 * Triage and tasks: the classes a message is sorted into, priorities, due windows, task ids,
 * and the zod schemas of everything that crosses a boundary (the classification a model
 * returns, the API's and the CLI's requests, the chat commands' arguments). Pure: no I/O.
 */
import { z } from 'zod';
import { hash53 } from './ids.js';
import { ModelRefSchema, PlatformSchema } from './schemas.js';

/** The lanes a task can be in (the classes of a message that is not noise). */
export const LANES = ['question', 'issue', 'task', 'moderation'] as const;
export type Lane = (typeof LANES)[number];
/** What the classification step may answer: a lane, or noise (no task). */
export const CLASSES = [...LANES, 'noise'] as const;
export type TriageClass = (typeof CLASSES)[number];
export const PRIORITIES = ['p1', 'p2', 'p3'] as const;
export type Priority = (typeof PRIORITIES)[number];
export const TASK_STATUSES = ['open', 'handed', 'closed'] as const;
export type TaskStatus = (typeof TASK_STATUSES)[number];

/** The due window of a priority when nobody (or no model) gave one. */
export const DEFAULT_DUE_MS: Record<Priority, number> = { p1: 4 * 3_600_000, p2: 24 * 3_600_000, p3: 72 * 3_600_000 };
/** The longest due window: 30 days. */
export const MAX_DUE_MS = 30 * 86_400_000;

const UNITS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const DUE_RE = /^(\d{1,5})(s|m|h|d)$/;

/** A due window such as `30m`, `4h`, `2d` (seconds too, `45s`), in milliseconds; undefined when it is not one. */
export function dueWindowMs(text: string): number | undefined {
  const m = DUE_RE.exec(text.trim().toLowerCase());
  if (!m) return undefined;
  const ms = Number(m[1]) * UNITS[m[2]!]!;
  return ms >= 1000 && ms <= MAX_DUE_MS ? ms : undefined;
}

export const DUE_MESSAGE = 'a due window is a duration such as 30m, 4h or 2d (at most 30d), or an ISO time such as 2026-12-01T09:00:00Z';

/** A due window (duration from now) or an absolute ISO time: to the time it names, from `now`. */
export function resolveDue(text: string, now: number): Date | undefined {
  const ms = dueWindowMs(text);
  if (ms !== undefined) return new Date(now + ms);
  if (!/^\d{4}-\d{2}-\d{2}T/.test(text.trim())) return undefined;
  const t = Date.parse(text.trim());
  return Number.isNaN(t) ? undefined : new Date(t);
}

export const DueSchema = z.string().trim().min(1).max(40).refine((v) => resolveDue(v, 0) !== undefined, DUE_MESSAGE);

/** `t-` and 8 letters or digits. */
export const TASK_ID_RE = /^t-[a-z0-9]{8}$/;
export const TaskIdSchema = z.string().trim().toLowerCase().regex(TASK_ID_RE, 'a task id looks like t-1a2b3c4d');

const ID_ALPHABET = 'abcdefghjkmnpqrstuvwxyz23456789';

/** The task id of a triaged message: the same for the same message, so a retried activity finds its row. */
export function taskIdFor(sourceKey: string): string {
  let n = hash53(sourceKey);
  let id = '';
  for (let i = 0; i < 8; i++) {
    id += ID_ALPHABET[n % ID_ALPHABET.length];
    n = Math.floor(n / ID_ALPHABET.length);
  }
  return `t-${id}`;
}

/** The workflow that classifies one message (one per message: a redelivery starts nothing). */
export function triageWorkflowId(sourceKey: string): string {
  return `triage:${sourceKey}`;
}

/** The workflow that sleeps until a task is due and reminds the admins once. */
export function taskReminderWorkflowId(taskId: string): string {
  return `task-reminder:${taskId}`;
}

/**
 * What the classification step must answer (the model's output is a boundary: anything else
 * is refused). `due` is a window from now; absent, the priority's default.
 */
export const ClassificationSchema = z.strictObject({
  class: z.enum(CLASSES),
  priority: z.enum(PRIORITIES),
  due: z
    .string()
    .trim()
    .refine((v) => dueWindowMs(v) !== undefined, 'a due window such as 30m, 4h or 2d (at most 30d)')
    .optional(),
  reason: z.string().trim().max(300).optional(),
});
export type Classification = z.infer<typeof ClassificationSchema>;

/**
 * The classification in a model's answer: the first JSON object in the text (a code fence
 * around it is allowed), validated. An error names what was wrong.
 */
export function parseClassification(text: string): { ok: true; value: Classification } | { ok: false; error: string } {
  const start = text.indexOf('{');
  const end = text.lastIndexOf('}');
  if (start < 0 || end <= start) return { ok: false, error: 'the answer holds no JSON object' };
  let raw: unknown;
  try {
    raw = JSON.parse(text.slice(start, end + 1));
  } catch {
    return { ok: false, error: 'the answer is not valid JSON' };
  }
  if (raw && typeof raw === 'object' && !Array.isArray(raw)) {
    // models write classes and priorities in any case
    const o = raw as Record<string, unknown>;
    for (const k of ['class', 'priority'] as const) if (typeof o[k] === 'string') o[k] = o[k].trim().toLowerCase();
  }
  const r = ClassificationSchema.safeParse(raw);
  if (!r.success) return { ok: false, error: r.error.issues.map((i) => `${i.path.join('.') || '(answer)'}: ${i.message}`).join('; ').slice(0, 300) };
  return { ok: true, value: r.data };
}

/** A new task by hand (chat, API, CLI): its text and the chat it belongs to; lane, priority and due optional. */
export const NewTaskSchema = z.strictObject({
  text: z.string().trim().min(1, 'the task needs a text').max(4000, 'the text is longer than 4000 characters'),
  chatId: z.string().trim().min(1).max(200),
  platform: PlatformSchema.default('http'),
  account: z.string().trim().min(1).max(200).default('default'),
  lane: z.enum(LANES).default('task'),
  priority: z.enum(PRIORITIES).default('p2'),
  due: DueSchema.optional(),
  assignee: z.string().trim().min(1).max(200).optional(),
});
export type NewTask = z.input<typeof NewTaskSchema>;

/** A routing override: the lane (or noise: the task is closed), and optionally the priority and due. */
export const RouteSchema = z.strictObject({
  class: z.enum(CLASSES),
  priority: z.enum(PRIORITIES).optional(),
  due: DueSchema.optional(),
});
export type RouteInput = z.input<typeof RouteSchema>;

/** Triage of a binding: on or off, with the classification model. */
export const TriageSettingSchema = z.strictObject({
  enabled: z.boolean(),
  model: ModelRefSchema.optional(),
});

export const TaskListQuerySchema = z.strictObject({
  status: z.enum([...TASK_STATUSES, 'all']).default('open'),
  lane: z.enum(LANES).optional(),
  limit: z.coerce.number().int().min(1).max(500).default(100),
});

/** The one line a task is shown as in chat. */
export function taskLine(t: { id: string; lane: string; priority: string; status: string; dueAt: string | null; text: string; sender: string; assignee: string | null }): string {
  const text = t.text.replace(/\s+/g, ' ').trim();
  return `${t.id} [${t.lane}, ${t.priority}${t.status !== 'open' ? `, ${t.status}` : ''}] ${text.length > 100 ? `${text.slice(0, 100)}…` : text} (from ${t.sender}${t.dueAt ? `; due ${t.dueAt}` : ''}${t.assignee ? `; ${t.assignee}` : ''})`;
}
