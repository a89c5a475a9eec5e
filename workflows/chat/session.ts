/**
 * The conversation session: one long-running workflow per conversation (platform + account
 * + chat), reached with signal-with-start. It queues inbound messages and runs turns one at
 * a time, inside itself (the agent loop of turn-loop.ts; since the patch `steward-inline-turn`,
 * before it as child turn workflows, which running histories still replay); /stop, /steer,
 * /new, /model, /think, /status and approval decisions reach it as signals, updates and a
 * query. It continues as new with a bounded working set.
 */
import {
  allHandlersFinished,
  ApplicationFailure,
  CancellationScope,
  ChildWorkflowCancellationType,
  condition,
  defineSignal,
  isCancellation,
  makeContinueAsNewFunc,
  ParentClosePolicy,
  patched,
  proxyActivities,
  setCurrentDetails,
  setHandler,
  startChild,
  upsertSearchAttributes,
  workflowInfo,
  type ChildWorkflowHandle,
} from '@temporalio/workflow';
import type { createActivities } from '../../activities/index.js';
import { stoppedKey, turnWorkflowId } from '../../common/ids.js';
import { SessionState } from './session-state.js';
import {
  approvalDecisionUpdate,
  budgetRaisedSignal,
  DUPLICATE_MESSAGE_FAILURE,
  inboundSignal,
  inboundUpdate,
  newTaskSignal,
  settingsUpdate,
  replyGateQuery,
  statusQuery,
  steerUpdate,
  stopSignal,
  turnSteerSignal,
} from '../messages.js';
import { ChatAttr, KindAttr, PlatformAttr, UserAttr } from '../search-attributes.js';
import { turnWorkflow } from './turn.js';
import { DEFAULT_BUDGET_WAIT_MS, TurnLoop } from './turn-loop.js';
import type { SessionInput, SessionStatus, SteerNote, TurnInput, TurnResult } from '../types.js';

/**
 * Chat turns run inside the session (no child workflow per turn). Decided per turn: a session
 * whose history started a turn as a child before this patch replays that turn as a child and
 * runs its next turns inline.
 */
export const INLINE_TURN_PATCH = 'steward-inline-turn';

/**
 * A session that has run its turns (`maxTurnsPerRun`) continues as new when the next message
 * arrives within CONTINUE_GRACE, carrying it, or once the grace has passed, instead of in the
 * task that delivered its last reply (see SessionState.shouldContinueAsNew). Decided once per
 * run: runs started before this patch keep ending after their last turn.
 */
export const CONTINUE_ON_MESSAGE_PATCH = 'steward-continue-on-message';

/**
 * How long a run that has run its turns waits for a message to carry before it continues as
 * new on its own (CONTINUE_ON_MESSAGE_PATCH): past the moment the last reply is seen, when the
 * next message of a quick conversation comes.
 */
export const CONTINUE_GRACE = '2 seconds';

/**
 * A redelivered inbound signal is dropped when its key was queued or answered before (within
 * MAX_TAKEN_KEYS, carried across continue-as-new), not only while it is still queued: the
 * ingress signals again when it stopped between its signal and its mark (services/handoff.ts).
 * Decided once per run, before the first signal is taken in.
 */
export const INBOUND_DEDUP_PATCH = 'steward-inbound-dedup';

/**
 * A turn that was stopped (or failed) is over as soon as its scope ends: the session's status
 * shows no running turn from then on, while its notice ("Stopped the running turn.") is
 * delivered, instead of only after that delivery (an activity of its own, two more workflow
 * tasks). A /stop arriving meanwhile is answered "Nothing is running to stop", which it was not
 * before: decided per turn, so a history recorded before this patch replays as it ran.
 */
export const TURN_OVER_BEFORE_NOTICE_PATCH = 'steward-turn-over-before-notice';

/** How many of a conversation's most recent users the session lists in `StewardUser`. */
const MAX_LISTED_USERS = 20;

type Activities = ReturnType<typeof createActivities>;

const outbox = proxyActivities<Activities>({
  startToCloseTimeout: '1 minute',
  retry: { initialInterval: '500 milliseconds', backoffCoefficient: 2, maximumInterval: '1 minute', maximumAttempts: 20 },
});

interface RunningTurn {
  turnId: string;
  startedAt: string;
  scope: CancellationScope;
  handle?: ChildWorkflowHandle<typeof turnWorkflow>;
  /** The turn's loop when it runs inside the session. */
  loop?: TurnLoop;
  /** Steering that arrived before the child started; forwarded once it has. */
  buffered: SteerNote[];
  stoppedBy?: string;
}

/** Chat platforms where a running turn shows an edited-in-place progress message. */
const PANEL_PLATFORMS: readonly string[] = ['telegram', 'discord'];

/**
 * Worker Versioning: wakes an idle session (no-op) so it sees a changed current version and
 * moves to it (`SESSION_UPGRADE_SIGNAL` in workers/versioning.ts).
 */
const upgradeCheckSignal = defineSignal('upgradeCheck');

/**
 * Continue as new onto the deployment's current version: the next run starts as AUTO_UPGRADE
 * on the current build and is pinned there after its first task. Unversioned: a plain
 * continue-as-new.
 */
const continueOnCurrentBuild = (next: SessionInput): Promise<never> =>
  makeContinueAsNewFunc<typeof sessionWorkflow>({ initialVersioningBehavior: 'AUTO_UPGRADE' })(next);

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

/** A turn about to run: its number and id, the messages it takes in, its running state, its input and its summary for the UI. */
interface TurnStart {
  batch: TurnInput['inbound'];
  turnNumber: number;
  turnId: string;
  turn: RunningTurn;
  turnInput: TurnInput;
  summary: string;
}

/**
 * One run of a session: its state, the turn running (if any), and the signal, update and query
 * handlers that reach it. The run's loop itself is sessionWorkflow's.
 */
class SessionRun {
  readonly info = workflowInfo();
  readonly sessionId = this.info.workflowId;
  readonly epoch = this.info.firstExecutionRunId;
  readonly state: SessionState;
  running: RunningTurn | null = null;
  newTaskBy: string | undefined;
  /** CONTINUE_ON_MESSAGE_PATCH, decided at the start of the run. */
  continueOnMessage = false;
  private noticeSeq = 0;

  constructor(readonly input: SessionInput) {
    this.state = new SessionState(input);
  }

  /** A notice to the conversation through the outbox (keyed by `keyHint`, else by this run's notice count). */
  notify = async (text: string, keyHint?: string): Promise<void> => {
    const key = keyHint ?? `${this.sessionId}:${this.info.runId}:notice:${++this.noticeSeq}`;
    await outbox.deliver({ key, sessionId: this.sessionId, conversation: this.input.conversation, kind: 'notice', text });
  };

  /**
   * `StewardUser` lists the identity ids (Steward's own pseudonymous ids, never names: search
   * attributes are not encrypted by the payload codec) of the people who wrote in this
   * conversation, the most recent ones, so the Temporal UI filters sessions, and the turns in
   * them, by person. Upserted only when someone new writes.
   */
  listUsers(users: string[]): void {
    const listed = workflowInfo().typedSearchAttributes.get(UserAttr) ?? [];
    const fresh = [...new Set(users)].filter((u) => u && !listed.includes(u));
    if (fresh.length === 0) return;
    upsertSearchAttributes([{ key: UserAttr, value: [...listed, ...fresh].slice(-MAX_LISTED_USERS) }]);
  }

  /** The signals: inbound messages, the upgrade check, /stop and /new. */
  registerSignals(): void {
    const { state } = this;
    setHandler(inboundSignal, (ref) => {
      state.enqueue(ref);
    });

    // any task re-checks `timeToContinue`, which includes a changed current version
    setHandler(upgradeCheckSignal, () => undefined);

    // a budget was raised: the running turn, when it waits on that budget, tries its step again
    setHandler(budgetRaisedSignal, (r) => {
      this.running?.loop?.budgetRaised(r);
    });

    setHandler(stopSignal, async ({ by, key, marked }) => {
      // a command that a redelivery ran again: this session took it before
      if (key !== undefined && !state.takeCommand(key, marked)) return;
      if (this.running) {
        this.running.stoppedBy = by;
        this.running.scope.cancel();
        return;
      }
      await this.notify(`Nothing is running to stop. ${plural(state.queue.length, 'message')} queued.`);
    });

    setHandler(newTaskSignal, ({ by, key, marked }) => {
      if (key !== undefined && !state.takeCommand(key, marked)) return;
      this.newTaskBy = by;
      if (this.running) {
        this.running.stoppedBy = by;
        this.running.scope.cancel();
      }
    });
  }

  /** The updates: a chat message, /steer, /model and /think, and an admin's decision on an approval the running turn waits for. */
  registerUpdates(): void {
    const { state } = this;
    // a message handed over by update-with-start; a key taken before (it came by signal, or an
    // earlier update) is refused by the validator, so it leaves nothing in the history
    setHandler(
      inboundUpdate,
      (ref) => {
        state.enqueue(ref);
        return { queued: state.queue.length };
      },
      {
        validator: (ref) => {
          if (state.hasTaken(ref.key)) throw ApplicationFailure.create({ type: DUPLICATE_MESSAGE_FAILURE, message: `message ${ref.key} was taken in before`, nonRetryable: true });
        },
      },
    );
    setHandler(
      steerUpdate,
      async (note) => {
        if (note.key !== undefined && !state.takeCommand(note.key, note.marked)) {
          return { appliedTo: 'duplicate' as const, message: 'This steering was received before.' };
        }
        // who steered goes with the note: they join the requester set of the turn it shapes
        const clean: SteerNote = { text: note.text.trim(), by: note.by, ...(note.byId !== undefined ? { byId: note.byId } : {}) };
        const running = this.running;
        if (running) {
          if (running.loop) running.loop.steer(clean);
          else if (running.handle) await running.handle.signal(turnSteerSignal, clean);
          else running.buffered.push(clean);
          return {
            appliedTo: 'running-turn' as const,
            message: 'Steering received: the running turn takes it in before its next model step.',
          };
        }
        state.pendingSteers.push(clean);
        return { appliedTo: 'next-turn' as const, message: 'No turn is running: the steering will guide the next turn.' };
      },
      { validator: (note) => SessionState.validateSteer(note, state.pendingSteers.length) },
    );

    setHandler(
      settingsUpdate,
      (change) => {
        const settings = state.applySettings(change);
        const parts = [
          ...(change.model !== undefined ? [`model is now ${settings.model}`] : []),
          ...(change.think !== undefined ? [`thinking is now ${settings.think}`] : []),
        ];
        const tail = this.running ? ' (from the next turn on)' : '';
        return { settings, message: `OK: ${parts.join(', ')}${tail}.` };
      },
      { validator: (change) => SessionState.validateSettings(change) },
    );

    // An admin's decision on an approval the running (inline) turn waits for.
    setHandler(approvalDecisionUpdate, (d) => this.running!.loop!.decideApproval(d), {
      validator: (d) => {
        if (!this.running?.loop) throw new Error(`approval ${d.approvalId} is not waiting in this conversation's running turn`);
        this.running.loop.validateApproval(d);
      },
    });
  }

  /** The /status query: the running turn, the queue, settings, tokens and counters. */
  registerStatusQuery(): void {
    const { state, sessionId } = this;
    setHandler(statusQuery, (): SessionStatus => {
      const running = this.running;
      return {
        sessionId,
        running: running ? { turnId: running.turnId, startedAt: running.startedAt, ...(running.loop ? { turn: { ...running.loop.status } } : {}) } : null,
        queueLength: state.queue.length,
        settings: { ...state.settings },
        tokens: { ...state.tokens },
        turnsStarted: state.turnsStarted,
        generation: state.generation,
        pendingSteers: state.pendingSteers.length,
      };
    });
    // a turn's last model step asks before it delivers the reply itself (DELIVER_IN_STEP_PATCH)
    setHandler(replyGateQuery, ({ turnId, step }): boolean => {
      const running = this.running;
      return running !== null && running.turnId === turnId && running.stoppedBy === undefined && !running.scope.consideredCancelled && running.loop?.mayDeliverFromStep(step) === true;
    });
  }

  /**
   * Between turns, a pinned session whose deployment has a new current version continues as
   * new onto it (recorded in the workflow task's history, so replay sees the same answer).
   */
  timeToContinue(): boolean {
    const now = workflowInfo();
    return this.state.shouldContinueAsNew(this.input.limits.maxTurnsPerRun, now.continueAsNewSuggested || now.targetWorkerDeploymentVersionChanged, this.continueOnMessage);
  }

  /** Start the next turn: take the queued messages and pending steering, count it, make it the running turn and build its input. */
  beginTurn(): TurnStart {
    const { state, input, sessionId } = this;
    const batch = state.takeBatch();
    const turnNumber = ++state.turnsStarted;
    state.turnsThisRun++;
    const turnId = turnWorkflowId(sessionId, this.epoch, turnNumber);
    const steers = state.takeSteers();
    const turn: RunningTurn = {
      turnId,
      startedAt: new Date(Date.now()).toISOString(),
      scope: new CancellationScope(),
      buffered: [],
    };
    this.running = turn;
    const turnInput: TurnInput = {
      sessionId,
      turnId,
      conversation: input.conversation,
      inbound: batch,
      workingSet: state.workingSet,
      settings: { ...state.settings },
      steers,
      maxSteps: input.limits.maxSteps,
      ...(PANEL_PLATFORMS.includes(input.conversation.platform) ? { progress: true } : {}),
    };
    const summary = `Turn ${turnNumber} of ${input.conversation.platform} chat ${input.conversation.chatId} (${plural(batch.length, 'message')}, ${state.settings.model})`;
    return { batch, turnNumber, turnId, turn, turnInput, summary };
  }
}

export async function sessionWorkflow(input: SessionInput): Promise<void> {
  const session = new SessionRun(input);
  const { state, notify } = session;
  // before the handlers: signals buffered for the first task are taken in as they are set
  if (patched(INBOUND_DEDUP_PATCH)) state.dedupTaken();
  session.registerSignals();
  session.registerUpdates();
  session.registerStatusQuery();
  session.continueOnMessage = patched(CONTINUE_ON_MESSAGE_PATCH);

  const wake = () => state.queue.length > 0 || session.newTaskBy !== undefined || session.timeToContinue();
  for (;;) {
    if (session.continueOnMessage && state.turnsThisRun >= input.limits.maxTurnsPerRun) {
      // The run has run its turns: a message that comes within the grace is carried into the
      // next run by the task that takes it in; after the grace the run continues as new on
      // its own, so a later message finds the next run waiting (and cached).
      if (!(await condition(wake, CONTINUE_GRACE))) break;
    } else {
      await condition(wake);
    }
    if (session.newTaskBy !== undefined || session.timeToContinue()) break;

    if (state.dropped > 0) {
      const n = state.dropped;
      state.dropped = 0;
      await notify(`The queue was full: ${plural(n, 'older message')} were dropped.`);
    }
    const { batch, turnNumber, turnId, turn, turnInput, summary } = session.beginTurn();
    try {
      let result: TurnResult;
      if (patched(INLINE_TURN_PATCH)) {
        session.listUsers(batch.flatMap((m) => (m.identityId ? [m.identityId] : [])));
        const loop = new TurnLoop(turnInput, {
          startedAt: turn.startedAt,
          inline: true,
          label: `Turn ${turnNumber}`,
          budgetWaitMs: input.limits.budgetWaitMs ?? DEFAULT_BUDGET_WAIT_MS,
          commandsTaken: () => state.commandsTaken,
        });
        turn.loop = loop;
        setCurrentDetails(`Running: ${summary}`);
        result = await turn.scope.run(() => loop.run());
      } else {
        result = await turn.scope.run(async () => {
          const handle = await startChild(turnWorkflow, {
            workflowId: turnId,
            args: [turnInput],
            cancellationType: ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
            parentClosePolicy: ParentClosePolicy.REQUEST_CANCEL,
            typedSearchAttributes: [
              { key: PlatformAttr, value: input.conversation.platform },
              { key: ChatAttr, value: input.conversation.chatId },
              { key: KindAttr, value: 'turn' },
            ],
            staticSummary: summary,
          });
          turn.handle = handle;
          for (const note of turn.buffered.splice(0)) await handle.signal(turnSteerSignal, note);
          return await handle.result();
        });
      }
      state.recordTurn({ inbound: batch.map((m) => m.key), ...(result.replyKey ? { reply: result.replyKey } : {}) }, result.usage, result.notes, result.skills);
      state.pendingSteers.unshift(...result.unappliedSteers);
    } catch (err) {
      state.recordTurn({ inbound: batch.map((m) => m.key) }, { input: 0, output: 0, total: 0 });
      if (patched(TURN_OVER_BEFORE_NOTICE_PATCH)) session.running = null;
      if (isCancellation(err)) {
        if (session.newTaskBy === undefined) {
          await notify(
            `Stopped the running turn. ${plural(state.queue.length, 'queued message')} kept.`,
            stoppedKey(turnId),
          );
        }
      } else {
        await notify(`The turn failed unexpectedly and was abandoned: ${(err as Error).message}`, `${turnId}:failed`);
      }
    } finally {
      session.running = null;
      if (turn.loop) setCurrentDetails(`Idle after turn ${turnNumber}.`);
    }
  }

  await condition(allHandlersFinished);
  if (session.newTaskBy !== undefined) {
    const carried = state.carryForNewTask();
    await notify(
      `New task started: the earlier context is cleared.${carried.queue.length ? ` ${plural(carried.queue.length, 'queued message')} will be answered in the new task.` : ''}`,
    );
    await continueOnCurrentBuild({ ...input, settings: state.settings, carried });
  }
  await continueOnCurrentBuild({ ...input, settings: state.settings, carried: state.carry() });
}
