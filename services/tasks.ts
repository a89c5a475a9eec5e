/**
 * Triage and tasks as chat, the API and the CLI use them. A message of a bound group chat with
 * triage on that does not address the agent is handed to a triage workflow (the message never
 * waits on the model); anything but noise becomes a task with its source message, lane,
 * priority, due time and assignee. Tasks are made by hand, listed, re-routed (lane, priority,
 * due), handed to the agent (a turn in the task's chat: its session is signalled as the
 * ingress does) and closed. Every input is validated with zod first (bad input changes
 * nothing); every decision writes a `task.*` receipt. A task's reminder is a workflow sleeping
 * until it is due: re-routing moves its timer, handing or closing ends it.
 */
import { WorkflowNotFoundError, type Client, type WorkflowStartOptions } from '@temporalio/client';
import type { Logger } from 'pino';
import type { ConversationKey } from '../common/ids.js';
import { sessionWorkflowId } from '../common/ids.js';
import { describeIssues, type NormalizedInbound } from '../common/schemas.js';
import {
  DEFAULT_DUE_MS,
  LANES,
  NewTaskSchema,
  resolveDue,
  RouteSchema,
  TaskIdSchema,
  TaskListQuerySchema,
  taskIdFor,
  taskReminderWorkflowId,
  TriageSettingSchema,
  triageWorkflowId,
  type Lane,
  type Priority,
} from '../common/tasks.js';
import { putBlob } from '../domain/blobs.js';
import type { Db } from '../domain/db.js';
import { findBinding, lookupBinding, type Actor, type BindingRecord } from '../domain/governance.js';
import { createLimiter, DEFAULT_LIMITS, type Limiter } from '../domain/limits.js';
import { writeReceipt } from '../domain/receipts.js';
import { ensureSession } from '../domain/store/sessions.js';
import { findTask, findTriageSetting, insertTask, listTasks, newTaskId, updateTaskIf, type TaskRow } from '../domain/store/tasks.js';
import { recordedSeq, recordInbound } from '../domain/transcript.js';
import { faultPoint } from '../common/fault-points.js';
import type { sessionWorkflow } from '../workflows/chat/session.js';
import { handOverMessage, startRunOnce, wasHandedOver } from './handoff.js';
import { taskChangedSignal } from '../workflows/tasks/messages.js';
import { taskReminderWorkflow } from '../workflows/tasks/reminder.js';
import { triageWorkflow } from '../workflows/tasks/triage.js';
import { ChatAttr, KindAttr, PlatformAttr } from '../workflows/search-attributes.js';
import { ServiceInputError, type Requester } from './requests.js';
import { createAdminService } from './admin.js';

export class TaskInputError extends ServiceInputError {
  override readonly name = 'TaskInputError';
}

export interface TaskServiceDeps {
  client: Client;
  db: Db;
  /** The queue triage and reminder workflows (and their activities) run on: the background queue. */
  taskQueue: string;
  /** The classification model when neither the triage setting nor the binding names one. */
  defaultModel: string;
  /** How the chat's session workflow is started (the ingress's options), for handing a task to the agent. */
  sessionStart: (conversation: ConversationKey, binding?: BindingRecord) => WorkflowStartOptions<typeof sessionWorkflow>;
  /** How long a task's handoff waits for a worker to accept its update before it signals (services/handoff.ts). */
  handoffAcceptMs?: number;
  /**
   * The limits of every path that causes a model call (domain/limits.ts): a classification claims
   * its group's and its sender's budget; making a task by hand and handing one to the agent count
   * as turns of the person. Absent: the defaults (DEFAULT_LIMITS).
   */
  limiter?: Limiter;
  log?: Logger;
}

export interface TaskView {
  id: string;
  chat: { platform: string; account: string; chatId: string };
  sourceKey: string | null;
  sender: string;
  text: string;
  lane: string;
  priority: string;
  dueAt: string | null;
  assignee: string | null;
  status: string;
  origin: string;
  model: string | null;
  reason: string | null;
  createdBy: string;
  remindedAt: string | null;
  closedAt: string | null;
  createdAt: string;
  updatedAt: string;
}

export interface TriageView {
  bindingId: string;
  enabled: boolean;
  model: string | null;
}

export function taskView(t: TaskRow): TaskView {
  const iso = (d: Date | null) => (d ? d.toISOString() : null);
  return {
    id: t.id,
    chat: { platform: t.platform, account: t.account, chatId: t.chatId },
    sourceKey: t.sourceKey,
    sender: t.sender,
    text: t.text,
    lane: t.lane,
    priority: t.priority,
    dueAt: iso(t.dueAt),
    assignee: t.assignee,
    status: t.status,
    origin: t.origin,
    model: t.model,
    reason: t.reason,
    createdBy: t.createdBy,
    remindedAt: iso(t.remindedAt),
    closedAt: iso(t.closedAt),
    createdAt: t.createdAt.toISOString(),
    updatedAt: t.updatedAt.toISOString(),
  };
}

const parse = <T>(schema: { safeParse(v: unknown): { success: true; data: T } | { success: false; error: { issues: ReadonlyArray<{ path: PropertyKey[]; message: string }> } } }, value: unknown, what: string): T => {
  const r = schema.safeParse(value);
  if (!r.success) throw new TaskInputError(`${what}: ${describeIssues(r.error)}`);
  return r.data;
};

export type TaskService = ReturnType<typeof createTaskService>;

// eslint-disable-next-line max-lines-per-function -- one service object: its methods share the helpers above them
export function createTaskService(deps: TaskServiceDeps) {
  const { client, db } = deps;
  const limiter = deps.limiter ?? createLimiter({ db, settings: DEFAULT_LIMITS });

  /** A person over their turn limit makes no task and hands none to the agent (the operator and admins are exempt). */
  async function refuseOverLimit(by: Requester, path: 'task' | 'hand'): Promise<void> {
    const limited = await limiter.turn(by, path);
    // the command's answer ends the sentence ("Not done: ...")
    if (limited) throw new TaskInputError(limited.message.replace(/\.$/, ''), 409);
  }

  /** Tell the task's reminder: a new due time (started again when it ended), or the task ended. */
  async function tellReminder(task: TaskRow, change: { dueAt?: string; ended?: boolean }): Promise<void> {
    const workflowId = taskReminderWorkflowId(task.id);
    try {
      if (change.ended) {
        await client.workflow.getHandle(workflowId).signal(taskChangedSignal, { ended: true });
      } else if (change.dueAt) {
        await client.workflow.signalWithStart(taskReminderWorkflow, {
          workflowId,
          taskQueue: deps.taskQueue,
          args: [{ taskId: task.id, dueAt: change.dueAt }],
          signal: taskChangedSignal,
          signalArgs: [{ dueAt: change.dueAt }],
          typedSearchAttributes: [
            { key: PlatformAttr, value: task.platform },
            { key: ChatAttr, value: task.chatId },
            { key: KindAttr, value: 'task-reminder' },
          ],
          staticSummary: `Reminder of task ${task.id}`,
        });
      }
    } catch (err) {
      // no reminder runs (it reminded already, or the task had none): nothing to end
      if (err instanceof WorkflowNotFoundError) return;
      throw err;
    }
  }

  /** A new task's reminder, started at most once (REJECT_DUPLICATE), then the task's `task.create` receipt (keyed by the task). */
  async function startReminderOnce(task: TaskRow, by: Requester): Promise<void> {
    const dueAt = task.dueAt!.toISOString();
    await startRunOnce(
      client,
      db,
      taskReminderWorkflow,
      {
        workflowId: taskReminderWorkflowId(task.id),
        taskQueue: deps.taskQueue,
        args: [{ taskId: task.id, dueAt }],
        typedSearchAttributes: [
          { key: PlatformAttr, value: task.platform },
          { key: ChatAttr, value: task.chatId },
          { key: KindAttr, value: 'task-reminder' },
        ],
        staticSummary: `Reminder of task ${task.id}`,
      },
      {
        key: `task:${task.id}:create`,
        kind: 'task.create',
        actor: by.id,
        data: { taskId: task.id, by: by.name, chat: { platform: task.platform, account: task.account, chatId: task.chatId }, lane: task.lane, priority: task.priority, dueAt },
      },
    );
  }

  async function get(rawId: unknown): Promise<TaskRow> {
    const id = parse(TaskIdSchema, rawId, 'the task');
    const task = await findTask(db, id);
    if (!task) throw new TaskInputError(`no task ${id}`, 404);
    return task;
  }

  /** Refused unless the task is open (or, for closing, handed). */
  function refuseUnless(task: TaskRow, statuses: readonly string[], what: string): void {
    if (!statuses.includes(task.status)) throw new TaskInputError(`task ${task.id} is ${task.status}: it cannot be ${what}`, 409);
  }

  return {
    /**
     * A group message that does not address the agent, in a bound chat with triage on: its
     * triage workflow is started (once per message: a redelivery starts nothing). Undefined
     * when triage is off for the binding.
     */
    async triageInbound(msg: NormalizedInbound, who: Actor, binding: BindingRecord, key: string): Promise<{ workflowId: string; duplicate: boolean; refused?: string } | undefined> {
      const setting = await findTriageSetting(db, binding.id);
      if (!setting?.enabled || !msg.text.trim()) return undefined;
      const conversation: ConversationKey = { platform: msg.platform, account: msg.account, chatId: msg.chatId };
      const model = setting.model ?? binding.model ?? deps.defaultModel;
      const workflowId = triageWorkflowId(key);
      // each classification is a model call: one use of the group's budget and one of the sender's
      const limited = await limiter.triage({ key, conversation, chatName: binding.name, bindingId: binding.id, senderId: who.id, sender: msg.user });
      if (limited) return { workflowId, duplicate: false, refused: limited.message };
      const textHash = await putBlob(db, msg.text);
      // started once under the message's id (a redelivery finds it), then receipted (services/handoff.ts)
      const { started } = await startRunOnce(
        client,
        db,
        triageWorkflow,
        {
          workflowId,
          taskQueue: deps.taskQueue,
          args: [{ message: { sourceKey: key, conversation, ...(binding.name ? { chatName: binding.name } : {}), sender: msg.user, ...(who.kind === 'person' ? { senderId: who.id } : {}), textHash, model } }],
          typedSearchAttributes: [
            { key: PlatformAttr, value: msg.platform },
            { key: ChatAttr, value: msg.chatId },
            { key: KindAttr, value: 'triage' },
          ],
          staticSummary: `Triage of a message of ${msg.user} in ${msg.platform} chat ${binding.name ?? msg.chatId}`,
        },
        {
          key: `${key}:triage`,
          kind: 'task.triage',
          workflowId,
          actor: who.kind === 'person' ? who.id : msg.user,
          data: { platform: msg.platform, chatId: msg.chatId, messageId: msg.id, bindingId: binding.id, model, chars: msg.text.length },
        },
      );
      const duplicate = !started;
      return { workflowId, duplicate };
    },

    /**
     * A task by hand: its text and chat; lane, priority, due and assignee optional. Its reminder
     * starts. With `key` (a chat command's message key) the task's id is derived from it: a
     * repeat (the command run again after a crash before its answer) finds the task the first
     * run made, starts its reminder once (services/handoff.ts `startRunOnce`) and answers with it;
     * the limit is asked only before a task is made.
     */
    async create(input: unknown, by: Requester, opts: { key?: string } = {}): Promise<TaskView> {
      const t = parse(NewTaskSchema, input, 'the task');
      const id = opts.key !== undefined ? taskIdFor(`task:${opts.key}`) : newTaskId();
      let task = opts.key !== undefined ? await findTask(db, id) : null;
      if (!task) {
        await refuseOverLimit(by, 'task');
        const now = Date.now();
        const dueAt = t.due !== undefined ? resolveDue(t.due, now)! : new Date(now + DEFAULT_DUE_MS[t.priority]);
        if (dueAt.getTime() <= now) throw new TaskInputError('the task: the due time is in the past');
        ({ task } = await insertTask(db, {
          id,
          platform: t.platform,
          account: t.account,
          chatId: t.chatId,
          sender: by.name,
          senderId: by.id,
          text: t.text,
          lane: t.lane,
          priority: t.priority,
          dueAt,
          assignee: t.assignee ?? null,
          origin: 'manual',
          createdBy: by.id,
        }));
        faultPoint('task.created');
      }
      // the reminder starts once under the task's id, then the receipt (its mark); a task handed or closed meanwhile needs none
      if (task.status === 'open' && task.dueAt) await startReminderOnce(task, by);
      return taskView(task);
    },

    /** Tasks by status (open by default) and lane, oldest first; a chat's only when named. */
    async list(query: unknown = {}, chat?: ConversationKey): Promise<TaskView[]> {
      const q = parse(TaskListQuerySchema, query, 'the query');
      const rows = await listTasks(db, { ...(q.status !== 'all' ? { status: q.status } : {}), ...(q.lane ? { lane: q.lane } : {}), ...(chat ? { chat } : {}), limit: q.limit });
      return rows.map(taskView);
    },

    async show(id: unknown): Promise<TaskView> {
      return taskView(await get(id));
    },

    /**
     * Override a routing decision: another lane (noise closes the task), priority or due time.
     * Only an open task; receipted with before and after; its reminder follows the due time.
     */
    async route(id: unknown, input: unknown, by: Requester): Promise<TaskView> {
      const task = await get(id);
      const r = parse(RouteSchema, input, 'the route');
      refuseUnless(task, ['open'], 're-routed');
      const before = { lane: task.lane, priority: task.priority, dueAt: task.dueAt?.toISOString() ?? null };
      if (r.class === 'noise') {
        const closed = await updateTaskIf(db, task.id, ['open'], { status: 'closed', closedAt: new Date() });
        if (!closed) throw new TaskInputError(`task ${task.id} changed meanwhile; nothing was done`, 409);
        await writeReceipt(db, { kind: 'task.route', actor: by.id, data: { taskId: task.id, by: by.name, before, after: { class: 'noise', status: 'closed' } } });
        await tellReminder(closed, { ended: true });
        return taskView(closed);
      }
      const now = Date.now();
      const dueAt = r.due !== undefined ? resolveDue(r.due, now)! : r.priority && r.priority !== task.priority ? new Date(now + DEFAULT_DUE_MS[r.priority]) : task.dueAt;
      if (dueAt && r.due !== undefined && dueAt.getTime() <= now) throw new TaskInputError('the route: the due time is in the past');
      const dueMoved = (dueAt?.getTime() ?? null) !== (task.dueAt?.getTime() ?? null);
      const lane: Lane = (LANES as readonly string[]).includes(r.class) ? (r.class as Lane) : 'task';
      const priority: Priority = r.priority ?? (task.priority as Priority);
      const after = await updateTaskIf(db, task.id, ['open'], { lane, priority, dueAt, ...(dueMoved ? { remindedAt: null } : {}) });
      if (!after) throw new TaskInputError(`task ${task.id} changed meanwhile; nothing was done`, 409);
      await writeReceipt(db, { kind: 'task.route', actor: by.id, data: { taskId: task.id, by: by.name, before, after: { lane, priority, dueAt: dueAt?.toISOString() ?? null } } });
      if (dueMoved && dueAt) await tellReminder(after, { dueAt: dueAt.toISOString() });
      return taskView(after);
    },

    /**
     * Hand an open task to the agent: a turn in the task's chat with the task's text as the
     * message (recorded in that chat's transcript, handed to its session as the ingress does,
     * services/handoff.ts), and only then the task is marked handed. A retry after a failure or
     * a crash anywhere in between finishes the handoff once: the message's key is the task's.
     */
    async hand(id: unknown, by: Requester): Promise<TaskView> {
      const task = await get(id);
      refuseUnless(task, ['open'], 'handed to the agent');
      const conversation = { platform: task.platform, account: task.account, chatId: task.chatId } as ConversationKey;
      const sessionId = sessionWorkflowId(conversation);
      const key = `task:${task.id}:hand`;
      // the turn is the hander's: it counts against their limit (a retry of a hand-off recorded before is not counted again)
      if ((await recordedSeq(db, key)) === undefined) await refuseOverLimit(by, 'hand');
      const text = `Task ${task.id} (${task.lane}, ${task.priority}) from ${task.sender}, handed to you by ${by.name}:\n${task.text}`;
      // recorded once: a retry finds the first record (and its text)
      await recordInbound(db, { key, sessionId, text, user: by.name, identityId: by.id === 'operator' ? null : by.id, command: false });
      faultPoint('task.recorded');
      if (!(await wasHandedOver(db, key))) {
        await ensureSession(db, sessionId, conversation);
        const found = await lookupBinding(db, conversation.platform, conversation.account, conversation.chatId);
        await handOverMessage(client, db, {
          ref: { key, user: by.name, at: new Date().toISOString(), ...(by.id !== 'operator' ? { identityId: by.id } : {}) },
          start: deps.sessionStart(conversation, found.kind === 'bound' ? found.binding : undefined),
          actor: by.id,
          ...(deps.handoffAcceptMs !== undefined ? { acceptMs: deps.handoffAcceptMs } : {}),
        });
      }
      const handed = await updateTaskIf(db, task.id, ['open'], { status: 'handed', assignee: 'agent' });
      // changed meanwhile (handed by a concurrent call, or closed): the agent has the task either way
      if (!handed) return taskView(await get(task.id));
      faultPoint('task.handed');
      await writeReceipt(db, { key: `${key}:task`, kind: 'task.hand', actor: by.id, sessionId, data: { taskId: task.id, by: by.name, sessionId, messageKey: key } });
      await tellReminder(handed, { ended: true });
      return taskView(handed);
    },

    /** Close an open or handed task; receipted; its reminder ends. */
    async close(id: unknown, by: Requester, note?: string): Promise<TaskView> {
      const task = await get(id);
      refuseUnless(task, ['open', 'handed'], 'closed');
      const closed = await updateTaskIf(db, task.id, ['open', 'handed'], { status: 'closed', closedAt: new Date() });
      if (!closed) throw new TaskInputError(`task ${task.id} changed meanwhile; nothing was done`, 409);
      await writeReceipt(db, { kind: 'task.close', actor: by.id, data: { taskId: task.id, by: by.name, from: task.status, ...(note ? { note: note.slice(0, 500) } : {}) } });
      await tellReminder(closed, { ended: true });
      return taskView(closed);
    },

    /** A binding's triage: on or off, its model. */
    async triage(bindingId: string): Promise<TriageView> {
      if (!(await findBinding(db, bindingId))) throw new TaskInputError(`no binding ${bindingId}`, 404);
      const s = await findTriageSetting(db, bindingId);
      return { bindingId, enabled: s?.enabled ?? false, model: s?.model ?? null };
    },

    /** Switch triage of a binding on (with its model) or off; receipted as a binding change. */
    async setTriage(bindingId: string, input: unknown, by: Requester): Promise<TriageView> {
      const s = parse(TriageSettingSchema, input, 'the triage setting');
      const r = await createAdminService(db).setTriage(by, bindingId, s);
      if (!r) throw new TaskInputError(`no binding ${bindingId}`, 404);
      return { bindingId, enabled: r.setting.enabled, model: r.setting.model };
    },
  };
}
