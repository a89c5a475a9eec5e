/**
 * The store of tasks (Task) and of bindings' triage settings (TriageSetting). Plain rows in
 * and out; the decisions (who may, what is receipted) are the task service's and the triage
 * activities'.
 */
import { randomInt } from 'node:crypto';
import type { Db } from '../db.js';
import { isUniqueViolation } from '../prisma-errors.js';

export interface TaskRow {
  id: string;
  sourceKey: string | null;
  platform: string;
  account: string;
  chatId: string;
  sender: string;
  senderId: string | null;
  text: string;
  lane: string;
  priority: string;
  dueAt: Date | null;
  assignee: string | null;
  status: string;
  origin: string;
  model: string | null;
  reason: string | null;
  createdBy: string;
  remindedAt: Date | null;
  closedAt: Date | null;
  createdAt: Date;
  updatedAt: Date;
}

export interface NewTaskRow {
  id: string;
  sourceKey?: string;
  platform: string;
  account: string;
  chatId: string;
  sender: string;
  senderId?: string | null;
  text: string;
  lane: string;
  priority: string;
  dueAt: Date | null;
  assignee?: string | null;
  origin: 'triage' | 'manual';
  model?: string | null;
  reason?: string | null;
  createdBy: string;
}

const ALPHABET = 'abcdefghjkmnpqrstuvwxyz23456789';

/** A new random task id (`t-` and 8 characters). */
export function newTaskId(): string {
  let id = 't-';
  for (let i = 0; i < 8; i++) id += ALPHABET[randomInt(ALPHABET.length)];
  return id;
}

/** Insert a task; `created: false` with the existing row when its id (or source message) was recorded before. */
export async function insertTask(db: Db, row: NewTaskRow): Promise<{ created: boolean; task: TaskRow }> {
  try {
    const task = await db.task.create({ data: { ...row, status: 'open' } });
    return { created: true, task };
  } catch (err) {
    if (!isUniqueViolation(err)) throw err;
    const existing = await db.task.findFirst({ where: { OR: [{ id: row.id }, ...(row.sourceKey ? [{ sourceKey: row.sourceKey }] : [])] } });
    if (!existing) throw err;
    return { created: false, task: existing };
  }
}

export async function findTask(db: Db, id: string): Promise<TaskRow | null> {
  return db.task.findUnique({ where: { id } });
}

export async function listTasks(db: Db, opts: { status?: string; lane?: string; chat?: { platform: string; account: string; chatId: string }; limit?: number } = {}): Promise<TaskRow[]> {
  return db.task.findMany({
    where: {
      ...(opts.status ? { status: opts.status } : {}),
      ...(opts.lane ? { lane: opts.lane } : {}),
      ...(opts.chat ? { platform: opts.chat.platform, account: opts.chat.account, chatId: opts.chat.chatId } : {}),
    },
    orderBy: [{ createdAt: 'asc' }, { id: 'asc' }],
    take: Math.min(opts.limit ?? 100, 500),
  });
}

/**
 * Change a task only while it has the status `from` (so two decisions on it cannot both
 * apply); the row afterwards, or null when it was not in that status.
 */
export async function updateTaskIf(
  db: Db,
  id: string,
  from: readonly string[],
  change: Partial<Pick<TaskRow, 'lane' | 'priority' | 'dueAt' | 'assignee' | 'status' | 'remindedAt' | 'closedAt'>>,
): Promise<TaskRow | null> {
  const r = await db.task.updateMany({ where: { id, status: { in: [...from] } }, data: change });
  if (r.count !== 1) return null;
  return db.task.findUnique({ where: { id } });
}

/** Mark the task reminded, once: true only for the call that marked it (open, due by `now`, not reminded yet). */
export async function markTaskReminded(db: Db, id: string, now: Date): Promise<boolean> {
  const r = await db.task.updateMany({ where: { id, status: 'open', remindedAt: null, dueAt: { lte: now } }, data: { remindedAt: now } });
  return r.count === 1;
}

export interface TriageSettingRow {
  bindingId: string;
  enabled: boolean;
  model: string | null;
  updatedBy: string;
  updatedAt: Date;
}

export async function findTriageSetting(db: Db, bindingId: string): Promise<TriageSettingRow | null> {
  return db.triageSetting.findUnique({ where: { bindingId } });
}

export async function listTriageSettings(db: Db): Promise<TriageSettingRow[]> {
  return db.triageSetting.findMany({ orderBy: { updatedAt: 'asc' } });
}

/** Switch triage of a binding on or off (and set its model; `null` clears it, undefined keeps it). */
export async function upsertTriageSetting(db: Db, bindingId: string, change: { enabled: boolean; model?: string | null; updatedBy: string }): Promise<TriageSettingRow> {
  const data = { enabled: change.enabled, updatedBy: change.updatedBy, ...(change.model !== undefined ? { model: change.model } : {}) };
  return db.triageSetting.upsert({ where: { bindingId }, create: { bindingId, ...data }, update: data });
}
