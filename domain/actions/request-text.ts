/**
 * The text of an approval request, as the admins are asked in chat (the admin channel or their
 * DMs) and as the operator inbox shows it: one function, so every surface shows the same words.
 */
import type { Db } from '../db.js';
import { personOf } from '../knowledge/turn-knowledge.js';
import type { ProposalView } from './proposals.js';

export interface ApprovalRequestParts {
  id: string;
  /** Where the proposal came from (`telegram chat 42`). */
  where: string;
  /** What the agent wants to do, in words (describeToolCall, Steward's own secrets masked). */
  action: string;
  view: Pick<ProposalView, 'block' | 'invisible' | 'credentials' | 'hash'>;
  /** Everyone who shaped the proposal, when they may not approve it (empty: no line). */
  forbidden: readonly string[];
  deadline: Date;
  /** The run in the Temporal UI, when there is a link. */
  link?: string | undefined;
}

/** Who may not approve a proposal, by name: everyone whose message or steering shaped the turn. */
export async function mayNotApproveLine(db: Db, shapedBy: readonly string[]): Promise<string> {
  if (shapedBy.length === 1) return 'The person whose message led to this proposal may not approve it.';
  const names = await Promise.all(shapedBy.map(async (who) => (await personOf(db, who)).name));
  return `Those whose messages or steering shaped this proposal may not approve it: ${[...new Set(names)].join(', ')}.`;
}

/** The approval request's text, exactly as the chat shows it. */
export async function approvalRequestText(db: Db, p: ApprovalRequestParts): Promise<string> {
  return [
    `**Approval needed** (${p.id}): an agent in ${p.where} wants to ${p.action}.`,
    'Exactly what will be sent, every value as the agent wrote it:',
    p.view.block,
    ...(p.view.invisible ? ['Invisible or direction-changing characters in it are shown as \\u{…}.'] : []),
    ...(p.view.credentials.length ? [`⚠ It carries credentials the agent wrote itself: ${p.view.credentials.join(', ')}. Approve only if you know where they came from.`] : []),
    `Request sha256: ${p.view.hash} (the action runs only if what it sends is exactly this).`,
    ...(p.forbidden.length > 0 ? [await mayNotApproveLine(db, p.forbidden)] : []),
    `Deadline: ${p.deadline.toISOString()} (denied if nobody decides).`,
    `Approve with /approve-action ${p.id}, deny with /deny-action ${p.id} [reason].${p.link ? ` Run: ${p.link}` : ''}`,
  ].join('\n');
}
