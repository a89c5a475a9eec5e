/**
 * Builds a model request from references: the working set's recent turns and the current
 * turn's messages are read from the transcript by key. Chat text is untrusted content; it
 * goes in user messages, never in the system prompt.
 */
import type { WorkingSet } from '../workflows/types.js';
import type { Db } from './db.js';
import type { ChatMessage } from './model.js';
import { messagesByKeys } from './transcript.js';

/** Characters of earlier turns kept in a prompt; older turns drop out first. */
export const HISTORY_CHAR_BUDGET = 48_000;

export interface PromptInput {
  systemPrompt: string;
  workingSet: WorkingSet;
  inbound: string[];
  steers: string[];
  draft?: string;
}

function userText(rows: { text: string; user: string | null }[]): string {
  return rows.map((r) => r.text).join('\n\n');
}

export async function buildPrompt(db: Db, input: PromptInput): Promise<ChatMessage[]> {
  const turnKeys = input.workingSet.recentTurns.flatMap((t) => [...t.inbound, ...(t.reply ? [t.reply] : [])]);
  const goalKeys = input.workingSet.goalKey ? [input.workingSet.goalKey] : [];
  const rows = await messagesByKeys(db, [...new Set([...goalKeys, ...turnKeys, ...input.inbound])]);
  const byKey = new Map(rows.map((r) => [r.key, r]));
  const pick = (keys: string[]) => keys.flatMap((k) => (byKey.has(k) ? [byKey.get(k)!] : []));

  const history: ChatMessage[] = [];
  let budget = HISTORY_CHAR_BUDGET;
  for (const turn of [...input.workingSet.recentTurns].reverse()) {
    const u = userText(pick(turn.inbound));
    const a = turn.reply ? pick([turn.reply])[0]?.text : undefined;
    const size = u.length + (a?.length ?? 0);
    if (size > budget) break;
    budget -= size;
    const pair: ChatMessage[] = [];
    if (u) pair.push({ role: 'user', content: u });
    pair.push({ role: 'assistant', content: a ?? '(no reply: this turn was stopped)' });
    history.unshift(...pair);
  }

  const system: ChatMessage[] = [{ role: 'system', content: input.systemPrompt }];
  const goalKey = input.workingSet.goalKey;
  const turnHasGoal = goalKey !== undefined && (turnKeys.includes(goalKey) || input.inbound.includes(goalKey));
  const goal = goalKey && !turnHasGoal ? byKey.get(goalKey)?.text : undefined;
  if (goal) system.push({ role: 'system', content: `The current task began with this request from the user:\n${goal.slice(0, 4000)}` });
  if (input.workingSet.notes.length > 0) {
    system.push({ role: 'system', content: `Notes kept for this task:\n${input.workingSet.notes.map((n) => `- ${n}`).join('\n')}` });
  }

  const current: ChatMessage[] = [{ role: 'user', content: userText(pick(input.inbound)) || '(empty message)' }];
  if (input.draft !== undefined) current.push({ role: 'assistant', content: input.draft });
  if (input.steers.length > 0) {
    current.push({
      role: 'user',
      content: `Steering for this turn from the user (take it into account${input.draft !== undefined ? ' and revise your answer' : ''}):\n${input.steers.map((s) => `- ${s}`).join('\n')}`,
    });
  }
  return [...system, ...history, ...current];
}
