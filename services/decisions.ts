/**
 * The operator inbox: everything waiting for a decision by the person asking, newest first, in
 * one list with a kind per item, and the decision taken in place.
 *
 * Kinds: `approval` (an action or tool call an agent proposed), `change` (a repository change
 * waiting for promotion: an approval its change workflow waits for), `pairing`, `memory` (a
 * member memory waiting for approval), `task` (open tasks), `mcp` (an MCP server a worker found
 * down, for admins: nothing to decide, since a worker reconnects on a later use after its
 * back-off, but someone has to look at it). Items decided in the last day are listed too, with
 * who decided and how.
 *
 * Nothing here decides anything itself: `decide` calls the service the chat buttons, commands,
 * CLI and API call for that kind (the ingress's decideApproval and decidePairing, the
 * knowledge service's decide, the task service's hand and close), so every rule, receipt and
 * workflow update is the one mechanism. The actions listed per item come from the same rules:
 * the command table's roles (common/commands.ts), and the requester set of a proposal (who
 * shaped it may not approve it; the workflow's validator is what refuses it). The approval's
 * text is the chat's (domain/actions/request-text.ts), rebuilt from the stored proposal.
 *
 * Refusals: 400 bad input, 404 no such item, 409 whenever the rules refuse (a role that may not
 * decide this, a self-approval, a wrong pairing code, already decided), whichever service said so.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { commandSpec, mayUse } from '../common/commands.js';
import { isAdmin, RoleSchema } from '../common/roles.js';
import { viewProposal } from '../domain/actions/proposals.js';
import { approvalRequestText } from '../domain/actions/request-text.js';
import type { Db } from '../domain/db.js';
import { sha256, type Actor } from '../domain/governance.js';
import { contributorsOf, type MemoryRow } from '../domain/knowledge/memory.js';
import { heldSecrets, maskHeldSecrets, maskHeldSecretsDeep, type HeldSecret } from '../domain/secrets.js';
import { describeToolCall } from '../domain/tools.js';
import type { Ingress } from './chat/intake.js';
import type { KnowledgeService } from './knowledge.js';
import { ServiceInputError } from './requests.js';
import * as store from '../domain/store/decisions.js';
import { listMcpServers, type McpRegistration } from '../domain/store/mcp.js';
import type { ApprovalDecisionRow, PairingDecisionRow, TaskDecisionRow } from '../domain/store/decisions.js';
import type { TaskService } from './tasks.js';

export const INBOX_KINDS = ['approval', 'change', 'pairing', 'memory', 'task', 'mcp'] as const;
export type InboxKind = (typeof INBOX_KINDS)[number];
export const InboxKindSchema = z.enum(INBOX_KINDS);

/** What may be done with an item. */
export const INBOX_DECISIONS = ['approve', 'deny', 'reject', 'hand', 'close'] as const;

export const InboxDecisionSchema = z
  .object({
    decision: z.enum(INBOX_DECISIONS),
    /** Why (a denied approval: told to the proposer; a closed task: its note). */
    reason: z.string().trim().min(1).max(500).optional(),
    /** A pairing approved: the role given. */
    role: RoleSchema.optional(),
    /** A pairing: the code the requester has (codes are never stored or shown). */
    code: z.string().trim().min(4).max(32).optional(),
  })
  .strict();
export type InboxDecision = z.infer<typeof InboxDecisionSchema>;

/** An item id: `<kind>:<id>`. */
export const InboxItemIdSchema = z
  .string()
  .max(200)
  .regex(/^(approval|change|pairing|memory|task|mcp):[A-Za-z0-9._:-]{1,150}$/, 'an inbox item id is <kind>:<id>, kind one of approval, change, pairing, memory, task, mcp');

export class InboxInputError extends ServiceInputError {}

export interface InboxItem {
  id: string;
  kind: InboxKind;
  created: string;
  /** Who asked (a name), when known. */
  askedBy: string | null;
  /** What it is, in one line. */
  title: string;
  /** The whole request (for an approval, the text the chat shows). */
  text: string;
  /** pending, or how it was decided (approved, denied, expired, cancelled, rejected, active, handed, closed). */
  status: string;
  /** What the person asking may do with it now (empty when decided, or when they may not). */
  actions: Array<(typeof INBOX_DECISIONS)[number]>;
  /** Why an action is not offered to this person. */
  notes: string[];
  /** The person asking asked for it or shaped it (a proposal of their turn, a memory their turn proposed). People below admin see only these. */
  mine?: boolean;
  /** Who decided and how, once decided. */
  decided: { by: string | null; at: string | null; how: string; reason?: string } | null;
}

export interface InboxDecisionResult {
  applied: true;
  message: string;
  item: InboxItem | null;
}

export interface OperatorInboxDeps {
  db: Db;
  /** The chat ingress: approvals and pairing decisions (the chat's, the buttons', the API's). */
  ingress: Pick<Ingress, 'decideApproval' | 'decidePairing'>;
  knowledge?: KnowledgeService;
  tasks?: TaskService;
  /** Steward's own secrets (masked in an approval's text, as in chat). */
  heldSecrets?: readonly HeldSecret[];
  /** The From address of emails (shown in an email's approval, as in chat). */
  smtpFrom?: string;
  runLink?: (workflowId: string) => string | undefined;
  /** How long decided items stay listed (ms). Default one day. */
  recentMs?: number;
}

const iso = (d: Date | null | undefined) => (d ? d.toISOString() : null);
const DECIDE_APPROVAL = commandSpec('approve-action')!;
const DENY_APPROVAL = commandSpec('deny-action')!;
const APPROVE_PAIRING = commandSpec('approve')!;
const DENY_PAIRING = commandSpec('deny')!;
const TASK = commandSpec('task')!;


/** The requester set of an approval: recorded with its request (absent: its requester alone). */
async function requestersOf({ db }: OperatorInboxDeps, a: ApprovalDecisionRow): Promise<string[]> {
  return (await store.recordedRequesters(db, a.id)) ?? (a.requestedBy ? [a.requestedBy] : []);
}

async function nameOf({ db }: OperatorInboxDeps, who: string | null): Promise<string | null> {
  if (!who) return null;
  return (await store.identityName(db, who)) ?? who;
}

/** The approval's text as the chat shows it, rebuilt from the stored proposal. */
async function approvalText(deps: OperatorInboxDeps, a: ApprovalDecisionRow, requesters: string[], forbid: boolean): Promise<string> {
  let input: unknown;
  try {
    input = JSON.parse(a.payload);
  } catch {
    input = a.payload;
  }
  const held = heldSecrets(deps.heldSecrets ?? []);
  const view = viewProposal(a.tool, input, { heldSecrets: deps.heldSecrets ?? [], ...(deps.smtpFrom ? { smtpFrom: deps.smtpFrom } : {}) });
  const session = await store.sessionChat(deps.db, a.sessionId);
  return approvalRequestText(deps.db, {
    id: a.id,
    where: session ? `${session.platform} chat ${session.chatId}` : a.sessionId,
    action: describeToolCall(a.tool, input, (v) => maskHeldSecretsDeep(v, held)),
    view,
    forbidden: forbid ? requesters : [],
    deadline: a.deadline,
    link: deps.runLink?.(a.workflowId),
  });
}

async function approvalItem(deps: OperatorInboxDeps, a: ApprovalDecisionRow, actor: Actor): Promise<InboxItem> {
  const kind: InboxKind = a.workflowId.startsWith('chg-') ? 'change' : 'approval';
  const requesters = await requestersOf(deps, a);
  const pending = a.status === 'pending';
  const actions: InboxItem['actions'] = [];
  const notes: string[] = [];
  if (pending) {
    if (!mayUse(DECIDE_APPROVAL, actor.role)) notes.push(`Deciding approvals needs the admin role; you are ${actor.role === 'operator' || actor.role === 'admin' ? 'an' : 'a'} ${actor.role}.`);
    else if (requesters.includes(actor.id)) notes.push(kind === 'change' ? 'You shaped this change, so you may not approve its promotion; another admin decides.' : 'You shaped this proposal, so you may not approve it; another admin decides.');
    else actions.push('approve');
    if (mayUse(DENY_APPROVAL, actor.role)) actions.push('deny');
  }
  return {
    id: `${kind}:${a.id}`,
    kind,
    created: a.createdAt.toISOString(),
    askedBy: await nameOf(deps, a.requestedBy),
    title: kind === 'change' ? `Promote change ${a.workflowId}: ${a.summary}` : a.summary,
    text: await approvalText(deps, a, requesters, requesters.length > 0),
    status: a.status,
    actions,
    notes,
    ...(requesters.includes(actor.id) ? { mine: true } : {}),
    decided: pending ? null : { by: a.decidedBy, at: iso(a.decidedAt), how: a.status, ...(a.reason ? { reason: a.reason } : {}) },
  };
}

function pairingItem(p: PairingDecisionRow, actor: Actor): InboxItem {
  const pending = p.status === 'pending';
  const actions: InboxItem['actions'] = [];
  const notes: string[] = [];
  if (pending) {
    if (mayUse(APPROVE_PAIRING, actor.role)) actions.push('approve');
    if (mayUse(DENY_PAIRING, actor.role)) actions.push('deny');
    if (actions.length === 0) notes.push('Deciding pairing requests needs the admin role.');
    else notes.push('Ask the requester for their code: a decision needs it (codes are never stored or shown).');
  }
  return {
    id: `pairing:${p.id}`,
    kind: 'pairing',
    created: p.createdAt.toISOString(),
    askedBy: p.displayName,
    title: `${p.displayName} (${p.platform} user ${p.userId}) asks to be paired`,
    text: `${p.displayName} (${p.platform} user ${p.userId}) asks to be paired; the code expires ${p.expiresAt.toISOString()}.`,
    status: p.status,
    actions,
    notes,
    decided: pending ? null : { by: p.decidedBy, at: iso(p.decidedAt), how: p.status === 'approved' && p.role ? `approved as ${p.role}` : p.status },
  };
}

function memoryItem(m: MemoryRow, actor: Actor): InboxItem {
  const pending = m.status === 'pending';
  const actions: InboxItem['actions'] = [];
  const notes: string[] = [];
  if (pending) {
    if (!isAdmin(actor.role)) notes.push('Deciding memories needs the admin role.');
    else {
      if (contributorsOf(m).includes(actor.id)) notes.push('You shaped the turn that proposed this memory, so you may not approve it; another admin decides.');
      else actions.push('approve');
      actions.push('reject');
    }
  }
  return {
    id: `memory:${m.id}`,
    kind: 'memory',
    created: m.createdAt.toISOString(),
    askedBy: m.proposedBy,
    title: `Remember (${m.kind}, ${m.scope === 'workspace' ? `workspace ${m.workspace}` : `${m.platform} chat ${m.chatId}`}): ${m.text.slice(0, 120)}`,
    text: m.text,
    status: m.status,
    actions,
    notes,
    ...(contributorsOf(m).includes(actor.id) ? { mine: true } : {}),
    decided: pending ? null : { by: m.decidedBy, at: iso(m.decidedAt), how: m.status === 'active' ? 'approved' : m.status },
  };
}

function taskItem(t: TaskDecisionRow, actor: Actor): InboxItem {
  const open = t.status === 'open';
  const actions: InboxItem['actions'] = [];
  const notes: string[] = [];
  if (open) {
    // the command table's rule for /task hand|close, from a chat that is not the task's: admins
    if (mayUse(TASK, actor.role) && isAdmin(actor.role)) actions.push('hand', 'close');
    else notes.push(`Task ${t.id} belongs to ${t.platform} chat ${t.chatId}; an admin or that chat can hand or close it.`);
  }
  return {
    id: `task:${t.id}`,
    kind: 'task',
    created: t.createdAt.toISOString(),
    askedBy: t.sender,
    title: `Task (${t.lane}, ${t.priority}${t.dueAt ? `, due ${t.dueAt.toISOString()}` : ''}) in ${t.platform} chat ${t.chatId}`,
    text: t.text,
    status: t.status,
    actions,
    notes,
    decided: open ? null : { by: null, at: iso(t.closedAt), how: t.status },
  };
}

/** The states in which a worker found an MCP server unusable (domain/mcp/manager.ts reports `down`). */
export const MCP_DOWN_STATES: readonly string[] = ['down', 'failed'];

/** An MCP server as an inbox item: listed while a worker finds it down; nothing to decide, something to look at. */
function mcpItem(deps: OperatorInboxDeps, r: McpRegistration, now: Date): InboxItem {
  const name = r.spec.name;
  const down = MCP_DOWN_STATES.includes(r.state);
  const held = heldSecrets(deps.heldSecrets ?? []);
  const error = r.lastError ? maskHeldSecrets(r.lastError, held) : null;
  const found = r.checkedAt ? ` at ${r.checkedAt.toISOString()}` : '';
  const where = r.source === 'config' ? 'the STEWARD_MCP_CONFIG file' : 'the API';
  return {
    id: `mcp:${name}`,
    kind: 'mcp',
    created: (r.checkedAt ?? now).toISOString(),
    askedBy: null,
    title: `MCP server ${name} is ${r.state}`,
    text: `The MCP server ${name} (${r.spec.transport}, registered through ${where}) was found ${r.state}${found}${error ? `: ${error}` : '.'}`,
    status: r.state,
    actions: [],
    notes: down
      ? [
          `Nothing to decide here: a worker tries ${name} again on its next use, after a back-off (up to 30 s) while it keeps failing; its tools are not offered meanwhile.`,
          r.source === 'config'
            ? `Fix the server, or take it out of the STEWARD_MCP_CONFIG file.`
            : `Fix the server, or remove it (an admin: steward mcp remove ${name}).`,
        ]
      : [`A worker found it ${r.state} again; nothing waits.`],
    decided: null,
  };
}

export function createOperatorInbox(deps: OperatorInboxDeps) {
  const { db } = deps;
  const recentMs = deps.recentMs ?? 24 * 3600_000;

  async function itemsOf(kind: InboxKind | undefined, actor: Actor, now: Date): Promise<InboxItem[]> {
    const since = new Date(now.getTime() - recentMs);
    const want = (k: InboxKind) => kind === undefined || kind === k;
    const out: InboxItem[] = [];
    if (want('approval') || want('change')) {
      const rows = await store.pendingOrDecidedApprovals(db, since);
      for (const a of rows) {
        const item = await approvalItem(deps, a, actor);
        if (want(item.kind)) out.push(item);
      }
    }
    if (want('pairing')) {
      const rows = await store.pendingOrDecidedPairings(db, since, now);
      out.push(...rows.map((p) => pairingItem(p, actor)));
    }
    if (want('memory')) {
      const rows = await store.pendingOrDecidedMemories(db, since);
      out.push(...rows.map((m) => memoryItem(m, actor)));
    }
    if (want('task')) {
      const rows = await store.openOrClosedTasks(db, since);
      out.push(...rows.map((t) => taskItem(t, actor)));
    }
    // MCP servers, for admins (as /status shows them): those a worker found down
    if (want('mcp') && isAdmin(actor.role)) {
      const rows = await listMcpServers(db);
      out.push(...rows.filter((r) => r.spec.enabled && MCP_DOWN_STATES.includes(r.state)).map((r) => mcpItem(deps, r, now)));
    }
    return out.filter((it) => visibleTo(it, actor)).sort((a, b) => (a.created < b.created ? 1 : a.created > b.created ? -1 : a.id < b.id ? 1 : -1));
  }

  /** Admins (and the operator) see the whole inbox; other people what they asked for or shaped. */
  const visibleTo = (it: InboxItem, actor: Actor) => isAdmin(actor.role) || it.mine === true;

  function parseId(raw: unknown): { kind: InboxKind; id: string } {
    const r = InboxItemIdSchema.safeParse(raw);
    if (!r.success) throw new InboxInputError(r.error.issues[0]!.message, 400);
    const at = r.data.indexOf(':');
    return { kind: r.data.slice(0, at) as InboxKind, id: r.data.slice(at + 1) };
  }

  async function item(raw: unknown, actor: Actor): Promise<InboxItem> {
    const it = await anyItem(raw, actor);
    if (!visibleTo(it, actor)) throw new InboxInputError(`no inbox item has the id ${it.id}`, 404);
    return it;
  }

  async function anyItem(raw: unknown, actor: Actor): Promise<InboxItem> {
    const { kind, id } = parseId(raw);
    const missing = () => new InboxInputError(`no inbox item has the id ${kind}:${id}`, 404);
    switch (kind) {
      case 'approval':
      case 'change': {
        const a = await store.approvalRow(db, id);
        if (!a) throw missing();
        const it = await approvalItem(deps, a, actor);
        if (it.kind !== kind) throw missing();
        return it;
      }
      case 'pairing': {
        const p = await store.pairingRow(db, id);
        if (!p) throw missing();
        return pairingItem(p, actor);
      }
      case 'memory': {
        const m = await store.memoryRow(db, id);
        if (!m) throw missing();
        return memoryItem(m, actor);
      }
      case 'task': {
        const t = await store.taskRow(db, id);
        if (!t) throw missing();
        return taskItem(t, actor);
      }
      case 'mcp': {
        const r = isAdmin(actor.role) ? (await listMcpServers(db)).find((x) => x.spec.name === id) : undefined;
        if (!r) throw missing();
        return mcpItem(deps, r, new Date());
      }
    }
  }

  /** A decision the kind does not take. */
  const unsupported = (kind: InboxKind, decision: string, allowed: string) => new InboxInputError(`a ${kind} item takes ${allowed}, not ${decision}`, 400);

  return {
    /** Everything waiting for `actor`'s decision (and what was decided in the last day), newest first. */
    async list(actor: Actor, query: { kind?: unknown } = {}, now = new Date()): Promise<InboxItem[]> {
      let kind: InboxKind | undefined;
      if (query.kind !== undefined) {
        const k = InboxKindSchema.safeParse(query.kind);
        if (!k.success) throw new InboxInputError(`kind: one of ${INBOX_KINDS.join(', ')}`, 400);
        kind = k.data;
      }
      return itemsOf(kind, actor, now);
    },

    item,

    /**
     * Decide an item through the service its kind has everywhere else. A refusal is an
     * InboxInputError (400 bad input, 404 no such item, 409 refused by the rules or already
     * decided) and nothing changes.
     */
    async decide(actor: Actor, rawId: unknown, rawDecision: unknown): Promise<InboxDecisionResult> {
      const { kind, id } = parseId(rawId);
      const parsed = InboxDecisionSchema.safeParse(rawDecision);
      if (!parsed.success) throw new InboxInputError(`invalid decision: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(body)'}: ${i.message}`).join('; ')}`, 400);
      const d = parsed.data;
      // the rules decide (409), whoever sees the item: a person below admin is refused by them, not by not seeing it
      const current = await anyItem(`${kind}:${id}`, actor);
      let message: string;
      switch (kind) {
        case 'approval':
        case 'change': {
          if (d.decision !== 'approve' && d.decision !== 'deny') throw unsupported(kind, d.decision, 'approve or deny');
          const r = await deps.ingress.decideApproval(id, d.decision, actor, d.reason);
          if (!r.applied) throw new InboxInputError(r.reply, /No approval has the id/.test(r.reply) ? 404 : 409);
          message = r.reply;
          // the run took the decision (its update); its row is written by the run's next step:
          // wait for it a little (bounded), so the item answered shows who decided
          for (let i = 0; i < 50 && (await store.approvalRow(db, id))?.status === 'pending'; i++) await sleep(100);
          break;
        }
        case 'pairing': {
          if (d.decision !== 'approve' && d.decision !== 'deny') throw unsupported(kind, d.decision, 'approve (with role and code) or deny (with code)');
          if (!mayUse(d.decision === 'approve' ? APPROVE_PAIRING : DENY_PAIRING, actor.role)) throw new InboxInputError('Deciding pairing requests needs the admin role; nothing changed.', 409);
          if (!d.code) throw new InboxInputError('a pairing decision needs the code the requester has (codes are never stored or shown)', 400);
          if (d.decision === 'approve' && !d.role) throw new InboxInputError('approving a pairing needs the role to give', 400);
          const row = await store.pairingRow(db, id);
          if (!row || row.tokenHash !== sha256(d.code.trim().toUpperCase())) throw new InboxInputError(`this code is not the code of pairing request ${id}; nothing changed`, 409);
          const r = await deps.ingress.decidePairing(d.code, d.decision === 'deny' ? 'deny' : { approve: d.role! }, actor);
          if (!r.ok) throw new InboxInputError(r.message, r.reason === 'unknown' ? 404 : 409);
          message = `${r.pairing.displayName} (${r.pairing.platform} user ${r.pairing.userId}): ${r.pairing.status}${r.pairing.role ? ` as ${r.pairing.role}` : ''}`;
          break;
        }
        case 'memory': {
          if (d.decision !== 'approve' && d.decision !== 'reject') throw unsupported(kind, d.decision, 'approve or reject');
          if (!deps.knowledge) throw new InboxInputError('memories are not enabled on this Steward', 409);
          // a role limit is a refusal by the rules (409), as for every other kind
          if (!isAdmin(actor.role)) throw new InboxInputError('Deciding memories needs the admin role; nothing changed.', 409);
          const m = await deps.knowledge.decide(id, d.decision, actor);
          message = `Memory ${m.id}: ${m.status}.`;
          break;
        }
        case 'task': {
          if (d.decision !== 'hand' && d.decision !== 'close') throw unsupported(kind, d.decision, 'hand or close');
          if (!deps.tasks) throw new InboxInputError('tasks are not enabled on this Steward', 409);
          if (!current.actions.includes(d.decision) && current.status === 'open') throw new InboxInputError(`${current.notes[0] ?? 'You may not decide this task.'} Nothing changed.`, 409);
          const who = { id: actor.id, name: actor.name };
          const t = d.decision === 'hand' ? await deps.tasks.hand(id, who) : await deps.tasks.close(id, who, d.reason);
          message = `Task ${t.id}: ${t.status}.`;
          break;
        }
        case 'mcp':
          throw new InboxInputError(`an MCP server that is down takes no decision here: ${current.notes.join(' ')}`, 400);
      }
      return { applied: true, message, item: await item(`${kind}:${id}`, actor).catch(() => null) };
    },
  };
}

export type OperatorInbox = ReturnType<typeof createOperatorInbox>;
