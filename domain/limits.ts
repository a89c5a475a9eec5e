/**
 * The limits of every path that causes a model call, in one place: the settings come from one
 * config section (STEWARD_TURN_RATE_LIMITS, STEWARD_TRIAGE_LIMITS, STEWARD_OBJECTIVE_RUN_LIMIT)
 * and every path asks this limiter before it hands work to a model:
 *
 * - turns: a chat message, `/task <text>`, a task handed to the agent (`/task hand`, the API) and
 *   a repository change asked for (`/change`) count against the person's per-role limit (admins
 *   exempt), over a sliding window of the turn-starting messages they sent (a handed task is
 *   recorded as such a message);
 * - triage: each classification of a group message claims one use of the group's budget and one
 *   of its sender's, per fixed window; over either, the message is not classified (no model
 *   call, no task, no routing post) and the admins are told once per window;
 * - objective runs: each run (schedule, trigger, event) claims one use of its objective's budget
 *   per fixed window; over it, the run is skipped and the admins are told once per window;
 * - model spend (`createSpend`): every model call reserves its estimated tokens before it is made
 *   and settles to its usage after (STEWARD_TOKEN_BUDGET; off unless set), through the budget
 *   ledger (domain/budgets/).
 *
 * A use is claimed by inserting the row of a free slot (LimitUse: scope, window, slot), so two
 * claims at once never share a slot and a budget is never overdrawn, on SQLite and PostgreSQL;
 * a claim is keyed (the message, the run): claimed again, it is the same use. Every refusal
 * writes a `limit.refused` receipt. No Temporal imports: services and activities call it.
 */
import { describeWindow, isAdmin, RoleSchema, type RateLimit, type RateLimits, type Role } from '../common/roles.js';
import type { ConversationKey } from '../common/ids.js';
import type { Db } from './db.js';
import { createBudgetLedger, type BudgetLedger } from './budgets/ledger.js';
import { createPriceTable, type ModelPrice } from './budgets/prices.js';
import { findIdentitiesByIds, notifyAdmins } from './governance.js';
import type { Senders } from './outbox.js';
import { isUniqueViolation } from './prisma-errors.js';
import { writeReceipt } from './receipts.js';
import { messagesSince, oldestMessageSince } from './transcript.js';

const HOUR = 3_600_000;

export interface LimitSettings {
  /** Turn-starting messages per role (admins and overlords are exempt). */
  turns: RateLimits;
  /** Model spend: tokens (`count`) per window, reserved before every model call and settled after; absent: no cap. */
  tokens?: RateLimit;
  /** Classifications of group messages: per group (binding) and per sender. */
  triage: { perGroup: RateLimit; perSender: RateLimit };
  /** Runs of one objective. */
  objectiveRuns: RateLimit;
}

export const DEFAULT_LIMITS: LimitSettings = {
  turns: {},
  triage: { perGroup: { count: 30, windowMs: HOUR }, perSender: { count: 10, windowMs: HOUR } },
  objectiveRuns: { count: 60, windowMs: HOUR },
};

/** Why a path was refused: the message for the person (or the admins), and what the receipt records. */
export interface LimitRefusal {
  message: string;
  data: Record<string, unknown>;
}

/** The path that asks for a turn: a chat message, `/task <text>`, a task handed to the agent, a repository change. */
export type TurnPath = 'message' | 'task' | 'hand' | 'change';

type Claim = { ok: true } | { ok: false; used: number; resetsAt: Date };

/** The start of the fixed window `now` falls in. */
function windowOf(limit: RateLimit, now: number): Date {
  return new Date(Math.floor(now / limit.windowMs) * limit.windowMs);
}

/**
 * Claim one use of `scope`'s budget in the current window for `key` (claimed before: the same
 * use). A free slot is taken by inserting its row; a slot taken at the same moment by another
 * claim makes this one look again (at most `count` times: each lost race is a slot used).
 */
export async function claimUse(db: Db, scope: string, limit: RateLimit, key: string, now = Date.now()): Promise<Claim> {
  const windowStart = windowOf(limit, now);
  const resetsAt = new Date(windowStart.getTime() + limit.windowMs);
  const claimed = async () => (await db.limitUse.findUnique({ where: { scope_key: { scope, key } }, select: { slot: true } })) !== null;
  if (await claimed()) return { ok: true };
  for (let attempt = 0; attempt <= limit.count; attempt++) {
    const taken = new Set((await db.limitUse.findMany({ where: { scope, windowStart }, select: { slot: true } })).map((r) => r.slot));
    if (taken.size >= limit.count) return { ok: false, used: taken.size, resetsAt };
    let slot = 0;
    while (taken.has(slot)) slot++;
    try {
      await db.limitUse.create({ data: { scope, windowStart, slot, key } });
      // the first use of a window: the scope's earlier windows are spent
      if (taken.size === 0) await db.limitUse.deleteMany({ where: { scope, windowStart: { lt: windowStart } } });
      return { ok: true };
    } catch (err) {
      if (!isUniqueViolation(err)) throw err;
      // the slot went to another claim (or this key was claimed at the same moment)
      if (await claimed()) return { ok: true };
    }
  }
  return { ok: false, used: limit.count, resetsAt };
}

/** Give a claimed use back (the work it was for did not happen). */
export async function releaseUse(db: Db, scope: string, key: string): Promise<void> {
  await db.limitUse.deleteMany({ where: { scope, key } });
}

const hhmm = (d: Date) => `${d.toISOString().slice(11, 16)} UTC`;
const chatName = (c: ConversationKey, name?: string | null) => `${c.platform} chat ${name ? `"${name}"` : c.chatId}`;

export interface LimiterDeps {
  db: Db;
  settings: LimitSettings;
  /** Where the admins hear that a budget ran out (once per window). */
  senders?: Senders;
}

/** The limiter every path that causes a model call asks first (see the module comment). */
export function createLimiter(deps: LimiterDeps) {
  const { db, settings } = deps;

  async function refused(kind: string, actor: string | undefined, key: string | undefined, r: LimitRefusal): Promise<LimitRefusal> {
    await writeReceipt(db, { ...(key ? { key: `${key}:limit` } : {}), kind: 'limit.refused', ...(actor ? { actor } : {}), data: { limit: kind, ...r.data } });
    return r;
  }

  /**
   * Tell the admins that a budget ran out: once per window, however many are refused at once
   * (the one refusal that claims the single slot of `<scope>:told` in the window tells them).
   */
  async function tellAdmins(scope: string, limit: RateLimit, refusedKey: string, resetsAt: Date, text: string): Promise<void> {
    const first = await claimUse(db, `${scope}:told`, { count: 1, windowMs: limit.windowMs }, refusedKey);
    if (!first.ok) return;
    await notifyAdmins(db, deps.senders ?? {}, { key: `limit:${scope}:${resetsAt.getTime()}`, text }).catch(() => undefined);
  }

  /** The role of a person by identity id; undefined for the operator (no identity): exempt. */
  async function roleOf(who: { id: string; role?: Role }): Promise<Role | undefined> {
    if (who.role) return who.role;
    if (who.id === 'operator') return undefined;
    const [identity] = await findIdentitiesByIds(db, [who.id]);
    if (!identity) return undefined;
    const r = RoleSchema.safeParse(identity.role);
    return r.success ? r.data : 'viewer';
  }

  return {
    settings,

    /**
     * May this person start one more turn (a message, `/task <text>`, handing a task)? Undefined:
     * yes. Refused: why, with when to try again (receipted under `receiptKey` when given).
     */
    async turn(who: { id: string; role?: Role; kind?: 'person' | 'operator' }, path: TurnPath, receiptKey?: string): Promise<LimitRefusal | undefined> {
      if (who.kind === 'operator' || Object.keys(settings.turns).length === 0) return undefined;
      const role = await roleOf(who);
      if (role === undefined || isAdmin(role)) return undefined;
      const limit = settings.turns[role];
      if (!limit) return undefined;
      const since = new Date(Date.now() - limit.windowMs);
      const used = await messagesSince(db, who.id, since);
      if (used < limit.count) return undefined;
      const oldest = await oldestMessageSince(db, who.id, since);
      const waitMin = oldest ? Math.max(1, Math.ceil((oldest.getTime() + limit.windowMs - Date.now()) / 60_000)) : 1;
      const message = `You have sent ${used} messages in the last ${describeWindow(limit.windowMs)}; the limit for the ${role} role is ${limit.count}. Try again in ${waitMin} minute${waitMin === 1 ? '' : 's'}.`;
      const r = { message, data: { path, role, used, limit: limit.count, windowMs: limit.windowMs } };
      // a chat message's refusal is receipted by the ingress (ingress.rejected); the other paths here
      return path === 'message' ? r : refused('turns', who.id, receiptKey, r);
    },

    /**
     * May this group message be classified? Claims one use of the group's budget and one of the
     * sender's (keyed by the message). Refused: nothing is classified; receipted; the admins are
     * told once per window and budget.
     */
    async triage(m: { key: string; conversation: ConversationKey; chatName?: string | null; bindingId: string; senderId: string; sender: string }): Promise<LimitRefusal | undefined> {
      const { perGroup, perSender } = settings.triage;
      const groupScope = `triage:group:${m.bindingId}`;
      const senderScope = `triage:sender:${m.senderId}`;
      const sender = await claimUse(db, senderScope, perSender, m.key);
      if (!sender.ok) {
        await tellAdmins(senderScope, perSender, m.key, sender.resetsAt, `**Triage limit**: ${m.sender} sent ${sender.used} messages to classify in this ${describeWindow(perSender.windowMs)} (the limit per sender, STEWARD_TRIAGE_LIMITS); their messages until ${hhmm(sender.resetsAt)} are not sorted into tasks. Make a task by hand with /task <text>.`);
        return refused('triage-sender', m.senderId, m.key, {
          message: `Not classified: ${m.sender} is over the triage limit of ${perSender.count} messages per ${describeWindow(perSender.windowMs)}, until ${hhmm(sender.resetsAt)}.`,
          data: { scope: senderScope, used: sender.used, limit: perSender.count, windowMs: perSender.windowMs, resetsAt: sender.resetsAt.toISOString(), messageKey: m.key },
        });
      }
      const group = await claimUse(db, groupScope, perGroup, m.key);
      if (!group.ok) {
        // the sender's use was not spent
        await releaseUse(db, senderScope, m.key);
        await tellAdmins(groupScope, perGroup, m.key, group.resetsAt, `**Triage limit**: ${group.used} messages of ${chatName(m.conversation, m.chatName)} were classified in this ${describeWindow(perGroup.windowMs)} (the limit per group, STEWARD_TRIAGE_LIMITS); messages there until ${hhmm(group.resetsAt)} are not sorted into tasks. Make a task by hand with /task <text>.`);
        return refused('triage-group', m.senderId, m.key, {
          message: `Not classified: ${chatName(m.conversation, m.chatName)} is over its triage limit of ${perGroup.count} messages per ${describeWindow(perGroup.windowMs)}, until ${hhmm(group.resetsAt)}.`,
          data: { scope: groupScope, used: group.used, limit: perGroup.count, windowMs: perGroup.windowMs, resetsAt: group.resetsAt.toISOString(), messageKey: m.key },
        });
      }
      return undefined;
    },

    /** May this objective run (keyed by its run id)? Refused: the run is skipped; receipted; the admins told once per window. */
    async objectiveRun(o: { id: string; name: string }, runId: string): Promise<LimitRefusal | undefined> {
      const limit = settings.objectiveRuns;
      const scope = `objective:${o.id}`;
      const c = await claimUse(db, scope, limit, runId);
      if (c.ok) return undefined;
      await tellAdmins(scope, limit, runId, c.resetsAt, `**Objective limit**: objective ${o.name} ran ${c.used} times in this ${describeWindow(limit.windowMs)} (the limit, STEWARD_OBJECTIVE_RUN_LIMIT); its runs until ${hhmm(c.resetsAt)} are skipped.`);
      return refused('objective-runs', `objective:${o.name}`, `objective-run:${runId}`, {
        message: `objective ${o.name} is over its limit of ${limit.count} runs per ${describeWindow(limit.windowMs)}, until ${hhmm(c.resetsAt)}`,
        data: { scope, used: c.used, limit: limit.count, windowMs: limit.windowMs, resetsAt: c.resetsAt.toISOString(), runId },
      });
    },
  };
}

export type Limiter = ReturnType<typeof createLimiter>;

/**
 * The spend budget of every model call (STEWARD_TOKEN_BUDGET): the model registry's `spend`
 * (domain/model.ts), so every path that calls a model (chat and objective turns, triage, a
 * repository change's intake, plan and coding agent) reserves its estimate before the call and
 * settles to what it used after. It is the budget ledger (domain/budgets/ledger.ts) with the
 * setting as the installation budget in tokens over the setting's window: a reservation is a
 * conditional increment that succeeds only while the estimate fits, so concurrent calls never
 * overdraw the budget. Refused: the call is not made (ModelBudgetExceededError, not retried),
 * receipted, and the admins are told once per window.
 */
export function createSpend(deps: { db: Db; budget: RateLimit | null; senders?: Senders; prices?: Record<string, ModelPrice> }): BudgetLedger {
  // the operator's prices (STEWARD_MODEL_PRICES) merged over the defaults
  return createBudgetLedger({ db: deps.db, prices: createPriceTable(deps.prices ?? {}), installationTokens: deps.budget, ...(deps.senders ? { senders: deps.senders } : {}) });
}
