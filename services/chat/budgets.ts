/**
 * Budgets from chat: `/budget` (what a person may see of the model budgets: their own, their
 * chat's and the installation's; an admin every one), `/budget raise <budget> <amount>`, and the
 * Raise button on the admins' notice of a spent budget. Both raises go through the budget
 * service's `raise` (services/budgets.ts) as the person who sent or clicked: admins only, no
 * self-raise, receipted, the waiting runs woken.
 */
import type { Db } from '../../domain/db.js';
import { adminChannelExists, findActor, lookupBinding, type Actor } from '../../domain/governance.js';
import { parseRaiseButton } from '../../domain/budgets/raises.js';
import { formatMoney } from '../../domain/budgets/prices.js';
import { writeReceipt } from '../../domain/receipts.js';
import { isAdmin } from '../../common/roles.js';
import type { BudgetService, BudgetView } from '../budgets.js';
import { ServiceInputError } from '../requests.js';
import type { ActionResult, InboundAction } from './approvals.js';

const money = (usd: number) => formatMoney(Math.round(usd * 1_000_000));

/** One budget in a line: whose, its period, and per unit what is used, reserved, raised and left; when it renews. */
export function budgetLine(v: BudgetView, me?: string): string {
  const who = v.scope === 'installation' ? 'the installation' : v.scope === 'person' && v.scopeId === me ? 'you' : `${v.scope} ${v.scopeId ?? ''}`;
  const per = v.period === 'none' ? 'in total' : `per ${v.usage.period}${v.period === 'window' ? '' : ` (${v.timezone})`}`;
  const u = v.usage;
  const units: string[] = [];
  if (v.tokens !== null) units.push(`${u.used.tokens} of ${v.tokens}${u.raised.tokens ? ` + ${u.raised.tokens} raised` : ''} tokens used, ${u.reserved.tokens} reserved, ${u.left.tokens ?? 0} left`);
  if (v.money !== null) units.push(`${money(u.used.money)} of ${money(v.money)}${u.raised.money ? ` + ${money(u.raised.money)} raised` : ''} used, ${money(u.reserved.money)} reserved, ${money(u.left.money ?? 0)} left`);
  return `- ${v.id} (${who}, ${per}): ${units.join('; ')}${u.renews ? `; renews ${u.renews}` : ''}.`;
}

/** What `/budget` answers: the budgets `by` may see (their own, their chat's `chat` binding and the installation's; an admin all). */
export async function budgetReport(budgets: BudgetService, by: Actor, chat: string | undefined): Promise<string> {
  const admin = isAdmin(by.role);
  const views = await budgets.visibleTo(by, chat);
  if (views.length === 0) return admin ? 'No model budgets are defined.' : 'No model budget applies to you or this chat.';
  const head = admin ? `Model budgets (all ${views.length}):` : 'Model budgets of you and this chat:';
  const tail = admin ? '/budget raise <budget> <amount> raises one for its period (tokens such as 5000, USD such as $2.50).' : undefined;
  return [head, ...views.map((v) => budgetLine(v, by.kind === 'person' ? by.id : undefined)), ...(tail ? [tail] : [])].join('\n');
}

/** `/budget raise`: raised as the sender, or why not (nothing changed). */
export async function raiseFromChat(budgets: BudgetService, by: Actor, cmd: { id: string; tokens?: number; money?: number }): Promise<string> {
  try {
    const r = await budgets.raise({ budgetId: cmd.id, ...(cmd.tokens === undefined ? {} : { tokens: cmd.tokens }), ...(cmd.money === undefined ? {} : { money: cmd.money }), by });
    return r.message;
  } catch (err) {
    if (err instanceof ServiceInputError) return `Not raised: ${err.message}`;
    throw err;
  }
}

/**
 * A Raise button pressed on a chat platform: the budget it names raised by its own limit for
 * the period of the notice, once per notice, as the paired person who clicked (the service
 * decides: admins only, no self-raise), in the admin channel when there is one.
 */
export async function handleRaiseButton(db: Db, budgets: BudgetService, action: InboundAction): Promise<ActionResult> {
  const actor = await findActor(db, action.platform, action.userId);
  if (!actor) {
    await writeReceipt(db, { key: `act:${action.platform}:${action.id}`, kind: 'ingress.rejected', actor: action.userId, data: { platform: action.platform, chatId: action.chatId, reason: 'unknown-sender', action: action.data } });
    return { reply: 'Steward does not know you: only paired admins can raise a budget.', applied: false };
  }
  const button = await parseRaiseButton(db, action.data);
  if (!button) return { reply: 'This button is not Steward’s (or is out of date).', applied: false };
  if (!button.budget) return { reply: 'That budget no longer exists; nothing changed.', applied: false };
  if (action.chatType === 'group' && isAdmin(actor.role) && (await adminChannelExists(db))) {
    const found = await lookupBinding(db, action.platform, action.account, action.chatId);
    if (found.kind !== 'bound' || !found.binding.adminChannel) return { reply: 'Budgets are raised in the admin channel.', applied: false };
  }
  const b = button.budget;
  try {
    const r = await budgets.raise({
      budgetId: b.id,
      ...(b.tokens === null ? {} : { tokens: b.tokens }),
      ...(b.micros === null ? {} : { money: b.micros / 1_000_000 }),
      periodStart: button.periodStart,
      once: `${b.id}:${button.periodStart.getTime()}`,
      by: actor,
    });
    return { reply: r.message, applied: true };
  } catch (err) {
    if (err instanceof ServiceInputError) return { reply: err.message, applied: false };
    throw err;
  }
}
