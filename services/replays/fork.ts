/**
 * Fork a chat (docs/replay.md "Fork a chat"): a new HTTP session that starts from the state of
 * a chat just before a chosen turn, under a new chat id, so a person can take the conversation
 * another way. The state is the one the turn itself ran with: the input of the turn's first
 * model step in the session's Temporal history (read through the client, so through its payload
 * codec), its working set and settings. The new session is the ordinary session workflow,
 * started with that state as what it carries (`SessionInput.carried`, the input a
 * continue-as-new passes on: no workflow change); its transcript gets the entries before the
 * turn (domain/replays/fork.ts). The original chat is only read. Admins and the operator only.
 *
 * Every surface (the API's POST /api/v1/chats/{chatId}/fork, `steward replay fork`) calls
 * `fork` here: bad input, an unknown chat or turn, a turn of another chat, a new chat id in use
 * are refused before anything is written or started.
 *
 * Temporal is the ledger of a fork, as of every handoff: the new session's workflow is started
 * FIRST, once under the new chat's id (REJECT_DUPLICATE), and carries in its memo which fork it
 * is (the source session and turn). A second start under that id (a retry, the same request at
 * the same moment, a message to that chat that started its session first) meets the run: the
 * same fork (its memo, or its `chat.forked` claim) goes on and answers the same; anything else is
 * refused (409) and writes nothing. Only then are the claim (the `chat.forked` receipt, keyed by
 * the new session) and the transcript written, in one transaction, at most once. A keyed fork's
 * chat id is derived from the key (the API's Idempotency-Key; `steward replay fork` sends one
 * per invocation), so a retry lands on the same chat and finishes what the first call did not
 * get to; a fork without a key or a new chat id gets a fresh chat id.
 */
import { createHash, randomBytes } from 'node:crypto';
import { WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError, type Client } from '@temporalio/client';
import { arrayFromPayloads } from '@temporalio/common';
import type { temporal } from '@temporalio/proto';
import { z } from 'zod';
import { faultPoint } from '../../common/fault-points.js';
import { sessionWorkflowId, type ConversationKey } from '../../common/ids.js';
import { isAdmin, type Actor } from '../../common/roles.js';
import { THINK_LEVELS } from '../../common/limits.js';
import type { Db } from '../../domain/db.js';
import { findSession } from '../../domain/store/sessions.js';
import {
  forkClaimOf,
  forkedMessageKey,
  ForkRequestSchema,
  remapWorkingSet,
  sessionHasRecords,
  transcriptBeforeTurn,
  turnStartOf,
  writeFork,
  type ForkClaim,
} from '../../domain/replays/fork.js';
import { sessionWorkflow } from '../../workflows/chat/session.js';
import type { SessionInput, SessionLimits, WorkingSet } from '../../workflows/types.js';
import { sessionStartOptions } from '../chat/session-start.js';

/** A refused fork: its message and HTTP status; nothing was written or started. */
export class ForkError extends Error {
  constructor(
    message: string,
    readonly status: 400 | 403 | 404 | 409 = 400,
  ) {
    super(message);
  }
}

export interface ForkServiceDeps {
  client: Client;
  db: Db;
  /** The interactive queue sessions run on, the default model and the session limits (as the intake's). */
  taskQueue: string;
  defaultModel: string;
  limits: SessionLimits;
  /** The account HTTP chats belong to (the API's), where forks are made. */
  account?: string;
}

export interface ForkResult {
  chatId: string;
  sessionId: string;
  forkedFrom: { sessionId: string; turnId: string };
  /** Transcript entries copied. */
  copied: number;
}

export interface ForkService {
  /** Fork `input` ({chatId, platform?, account?, turnId, newChatId?}); `key`: a retry's key (the API's Idempotency-Key), which names the new chat when none is given. */
  fork(actor: Actor, input: unknown, opts?: { key?: string }): Promise<ForkResult>;
}

/** The part of a model step's input a fork needs (activities/chat.ts ModelStepInput), checked as it comes out of history. */
const StepInputSchema = z.object({
  sessionId: z.string(),
  turnId: z.string(),
  step: z.number(),
  inbound: z.array(z.string()),
  workingSet: z.object({
    goalKey: z.string().optional(),
    notes: z.array(z.string()),
    recentTurns: z.array(z.object({ inbound: z.array(z.string()), reply: z.string().optional() })),
    skills: z.record(z.string(), z.string()).optional(),
  }),
  settings: z.object({ model: z.string(), think: z.enum(THINK_LEVELS) }),
});
type StepInput = z.infer<typeof StepInputSchema>;

/** The chat id a keyed fork without one gets: the same for the same key. */
function chatIdFor(source: string, key: string | undefined): string {
  const suffix = key !== undefined ? createHash('sha256').update(`fork:${key}`).digest('hex').slice(0, 10) : randomBytes(5).toString('hex');
  return `${source.slice(0, 128 - 16)}-fork-${suffix}`;
}

/**
 * The input of the turn's first model step, from the history of the run that ran it (the
 * session's run, or the turn's own workflow for turns from before inline turns): decoded as the
 * client decodes (its codecs, last to first, then its payload converter).
 */
async function firstStepInput(client: Client, workflowId: string, runId: string, turnId: string): Promise<StepInput | { error: string }> {
  let events: temporal.api.history.v1.IHistoryEvent[];
  try {
    events = (await client.workflow.getHandle(workflowId, runId).fetchHistory()).events ?? [];
  } catch (err) {
    if (err instanceof WorkflowNotFoundError || /not found/i.test((err as Error).message)) return { error: `the history of turn ${turnId} is no longer in Temporal (past its retention)` };
    throw err;
  }
  const { payloadConverter, payloadCodecs } = client.workflow.options.loadedDataConverter;
  for (const e of events) {
    const a = e.activityTaskScheduledEventAttributes;
    if (a?.activityType?.name !== 'modelStep') continue;
    let payloads = a.input?.payloads ?? [];
    for (const codec of [...payloadCodecs].reverse()) payloads = await codec.decode(payloads);
    const parsed = StepInputSchema.safeParse(arrayFromPayloads(payloadConverter, payloads)[0]);
    if (parsed.success && parsed.data.turnId === turnId && parsed.data.step === 1) return parsed.data;
  }
  return { error: `turn ${turnId}'s first model step is not in its run's history` };
}

export function createForkService(deps: ForkServiceDeps): ForkService {
  const { client, db } = deps;
  const account = deps.account ?? 'default';

  const answer = (c: ForkClaim): ForkResult => ({ chatId: c.chatId, sessionId: c.sessionId, forkedFrom: { sessionId: c.sourceSessionId, turnId: c.turnId }, copied: c.copied });

  /** What a fork's session carries in its memo: which fork it is. */
  interface ForkMemo {
    stewardFork?: { sourceSessionId?: string; turnId?: string };
  }

  /**
   * The handoff: start the fork's session with the state it carries, at most once under its id.
   * A run already there is this fork's when its memo (or the fork's claim) names the same source
   * and turn: left as it is, running or closed (a retry never starts a closed fork again);
   * anything else under that id is another chat's, and the fork is refused before it writes.
   */
  async function startSession(conversation: ConversationKey, settings: StepInput['settings'], workingSet: WorkingSet, from: string, fork: { sourceSessionId: string; turnId: string }): Promise<void> {
    const opts = sessionStartOptions(deps, conversation);
    const input: SessionInput = {
      conversation,
      settings: { model: settings.model, think: settings.think },
      limits: deps.limits,
      carried: { queue: [], pendingSteers: [], turnsStarted: 0, tokens: { input: 0, output: 0, total: 0 }, workingSet, generation: 0, taken: [] },
    };
    const memo: ForkMemo = { stewardFork: fork };
    try {
      await client.workflow.start(sessionWorkflow, { ...opts, args: [input], memo: memo as Record<string, unknown>, staticSummary: `${opts.staticSummary}, forked from ${from}`, workflowIdReusePolicy: 'REJECT_DUPLICATE' });
      return;
    } catch (err) {
      if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
    }
    const theirs = ((await client.workflow.getHandle(opts.workflowId).describe()).memo as ForkMemo | undefined)?.stewardFork;
    if (theirs?.sourceSessionId === fork.sourceSessionId && theirs.turnId === fork.turnId) return;
    // a fork's session that continued as new keeps its claim, not necessarily its memo
    const claim = await forkClaimOf(db, opts.workflowId);
    if (claim && claim.sourceSessionId === fork.sourceSessionId && claim.turnId === fork.turnId) return;
    throw new ForkError(`chat ${conversation.chatId} is in use: choose another new chat id`, 409);
  }

  return {
    async fork(actor, raw, opts = {}) {
      if (!isAdmin(actor.role)) throw new ForkError('only admins and the operator may fork a chat', 403);
      const parsed = ForkRequestSchema.safeParse(raw);
      if (!parsed.success) throw new ForkError(`invalid fork: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(body)'}: ${i.message}`).join('; ')}`);
      const req = parsed.data;
      const source: ConversationKey = { platform: req.platform ?? 'http', account: req.account ?? account, chatId: req.chatId };
      const sourceSessionId = sessionWorkflowId(source);
      const sourceLabel = `${source.platform} chat ${source.chatId}`;
      if (!(await findSession(db, sourceSessionId))) throw new ForkError(`no ${sourceLabel}${source.platform !== 'http' || req.account ? ` in account ${source.account}` : ''}`, 404);
      const turn = await turnStartOf(db, req.turnId);
      if (!turn) throw new ForkError(`no turn ${req.turnId} is recorded`, 404);
      if (turn.sessionId !== sourceSessionId || !req.turnId.startsWith(`${sourceSessionId}:turn:`)) throw new ForkError(`turn ${req.turnId} is not a turn of ${sourceLabel}`, 404);

      const target: ConversationKey & { platform: 'http' } = { platform: 'http', account, chatId: req.newChatId ?? chatIdFor(req.chatId, opts.key) };
      const targetSessionId = sessionWorkflowId(target);
      if (targetSessionId === sourceSessionId) throw new ForkError('the new chat id is the chat being forked', 409);
      const same = (c: ForkClaim) => c.sourceSessionId === sourceSessionId && c.turnId === req.turnId;
      // records first, the claim after: both are written in one transaction, so records seen mean their claim is seen (a twin's)
      const hasRecords = await sessionHasRecords(db, targetSessionId);
      const claim = await forkClaimOf(db, targetSessionId);
      if (claim && !same(claim)) throw new ForkError(`chat ${target.chatId} is in use: forked from another chat or turn`, 409);
      if (!claim && hasRecords) throw new ForkError(`chat ${target.chatId} is in use: choose another new chat id`, 409);

      if (!turn.workflowId || !turn.runId) throw new ForkError(`turn ${req.turnId} has no run on record to read its state from`, 409);
      const step = await firstStepInput(client, turn.workflowId, turn.runId, req.turnId);
      if ('error' in step) throw new ForkError(`turn ${req.turnId} cannot be forked: ${step.error}`, 409);

      // what the fork copies (the transcript before the turn) and the working set naming the copies
      const { entries, truncated } = await transcriptBeforeTurn(db, sourceSessionId, turn, step.inbound);
      const map = new Map(entries.map((e) => [e.key, forkedMessageKey(targetSessionId, e.key)]));
      // the handoff first: the session, started once under the new chat's id (or this fork's, found)
      await startSession(target, step.settings, remapWorkingSet(step.workingSet, map), `${sourceLabel} before turn ${req.turnId}`, { sourceSessionId, turnId: req.turnId });
      faultPoint('fork.started');

      // then the claim and the transcript, in one transaction, once (a retry or a twin finds the claim)
      let done: ForkClaim;
      if (claim) done = claim;
      else {
        const w = await writeFork(db, {
          actor: actor.id,
          source: { sessionId: sourceSessionId, platform: source.platform, account: source.account, chatId: source.chatId, turnId: req.turnId },
          target: { sessionId: targetSessionId, platform: 'http', account, chatId: target.chatId },
          entries,
          truncated,
        });
        if (w.claimed) done = { sourceSessionId, turnId: req.turnId, chatId: target.chatId, sessionId: targetSessionId, copied: w.copied };
        else {
          // the same fork's twin claimed it in between (the session's start let only this fork through)
          const other = await forkClaimOf(db, targetSessionId);
          if (!other || !same(other)) throw new ForkError(`chat ${target.chatId} is in use: choose another new chat id`, 409);
          done = other;
        }
      }
      return answer(done);
    },
  };
}
