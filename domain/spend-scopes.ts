/**
 * Whom a model call is spent for: the budget scopes of each path that calls a model, derived
 * from the data its activity already has (the conversation, the requester set, the objective
 * run, the repository change). Every lookup here is asked only when a budget is configured (the
 * scopes of a SpendContext are a function). No Temporal imports: activities call it.
 */
import type { ConversationKey } from '../common/ids.js';
import type { Db } from './db.js';
import { findIdentitiesByIds, lookupBinding } from './governance.js';
import type { SpendScopes } from './model.js';
import { findObjectiveRun } from './store/objectives.js';
import { findWorkspaceBinding } from './store/workspaces.js';

/** The binding id of a chat, when exactly one binding claims it. */
export async function chatBindingId(db: Db, chat: ConversationKey): Promise<string | undefined> {
  const b = await lookupBinding(db, chat.platform, chat.account, chat.chatId);
  return b.kind === 'bound' ? b.binding.id : undefined;
}

/** The identity ids among `who` (a requester set holds identity ids, and names of people without one): the people scope. */
export async function identityIds(db: Db, who: readonly string[]): Promise<string[]> {
  const wanted = [...new Set(who.filter((w) => w.length > 0))];
  if (wanted.length === 0) return [];
  const found = new Set((await findIdentitiesByIds(db, wanted)).map((i) => i.id));
  return wanted.filter((w) => found.has(w)).sort();
}

/** The suffix of an objective run's turn id (domain/objectives/runs.ts: `${runId}:turn`). */
const RUN_TURN = ':turn';

/** Whether a turn is an objective's run (its id is its run's id and `:turn`). */
export function isObjectiveTurn(turnId: string): boolean {
  return turnId.endsWith(RUN_TURN);
}

/** The objective whose run a turn is, if it is one. */
export async function objectiveOfTurn(db: Db, turnId: string): Promise<string | undefined> {
  if (!isObjectiveTurn(turnId)) return undefined;
  const run = await findObjectiveRun(db, turnId.slice(0, -RUN_TURN.length));
  return run && run.turnId === turnId ? run.objectiveId : undefined;
}

/** Scopes without the empty ones (no `people: []`, no undefined ids). */
export function scopesOf(s: SpendScopes): SpendScopes {
  return {
    ...(s.chat ? { chat: s.chat } : {}),
    ...(s.people && s.people.length > 0 ? { people: s.people } : {}),
    ...(s.objective ? { objective: s.objective } : {}),
    ...(s.workspace ? { workspace: s.workspace } : {}),
    ...(s.repository ? { repository: s.repository } : {}),
  };
}

/**
 * The scopes of a chat turn's model step: the chat's binding, the requester set's identities,
 * the objective when the turn is an objective's run, and the chat's workspace.
 */
export async function turnScopes(db: Db, t: { conversation: ConversationKey; turnId: string; requesters: readonly string[] }): Promise<SpendScopes> {
  const [chat, people, objective, ws] = await Promise.all([
    chatBindingId(db, t.conversation),
    identityIds(db, t.requesters),
    objectiveOfTurn(db, t.turnId),
    findWorkspaceBinding(db, t.conversation),
  ]);
  return scopesOf({ ...(chat ? { chat } : {}), people, ...(objective ? { objective } : {}), ...(ws ? { workspace: ws.workspace } : {}) });
}

/**
 * The scopes of an objective run's turn, known before it starts: the objective, the binding of
 * the chat it posts to and that chat's workspace (the run's prompt has no sender: no person),
 * as `turnScopes` finds them for the run's model steps.
 */
export async function objectiveRunScopes(db: Db, o: { id: string; platform: string; account: string; chatId: string }): Promise<SpendScopes> {
  const conversation = { platform: o.platform, account: o.account, chatId: o.chatId } as ConversationKey;
  const [chat, ws] = await Promise.all([chatBindingId(db, conversation), findWorkspaceBinding(db, conversation)]);
  return scopesOf({ ...(chat ? { chat } : {}), objective: o.id, ...(ws ? { workspace: ws.workspace } : {}) });
}
