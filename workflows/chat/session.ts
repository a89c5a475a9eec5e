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
import { turnWorkflowId } from '../../common/ids.js';
import { SessionState } from './session-state.js';
import {
  approvalDecisionUpdate,
  inboundSignal,
  newTaskSignal,
  settingsUpdate,
  statusQuery,
  steerUpdate,
  stopSignal,
  turnSteerSignal,
} from '../messages.js';
import { ChatAttr, KindAttr, PlatformAttr, UserAttr } from '../search-attributes.js';
import { turnWorkflow } from './turn.js';
import { TurnLoop } from './turn-loop.js';
import type { SessionInput, SessionStatus, SteerNote, TurnInput, TurnResult } from '../types.js';

/**
 * Chat turns run inside the session (no child workflow per turn). Decided per turn: a session
 * whose history started a turn as a child before this patch replays that turn as a child and
 * runs its next turns inline.
 */
export const INLINE_TURN_PATCH = 'steward-inline-turn';

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

// eslint-disable-next-line max-lines-per-function -- longer than 150 lines before the rule came; to be split (issue 13)
export async function sessionWorkflow(input: SessionInput): Promise<void> {
  const info = workflowInfo();
  const sessionId = info.workflowId;
  const epoch = info.firstExecutionRunId;
  const state = new SessionState(input);
  let running: RunningTurn | null = null;
  let newTaskBy: string | undefined;
  let noticeSeq = 0;

  const notify = async (text: string, keyHint?: string): Promise<void> => {
    const key = keyHint ?? `${sessionId}:${info.runId}:notice:${++noticeSeq}`;
    await outbox.deliver({ key, sessionId, conversation: input.conversation, kind: 'notice', text });
  };

  /**
   * `StewardUser` lists the identity ids (Steward's own pseudonymous ids, never names: search
   * attributes are not encrypted by the payload codec) of the people who wrote in this
   * conversation, the most recent ones, so the Temporal UI filters sessions, and the turns in
   * them, by person. Upserted only when someone new writes.
   */
  const listUsers = (users: string[]): void => {
    const listed = workflowInfo().typedSearchAttributes.get(UserAttr) ?? [];
    const fresh = [...new Set(users)].filter((u) => u && !listed.includes(u));
    if (fresh.length === 0) return;
    upsertSearchAttributes([{ key: UserAttr, value: [...listed, ...fresh].slice(-MAX_LISTED_USERS) }]);
  };

  setHandler(inboundSignal, (ref) => {
    state.enqueue(ref);
  });

  // any task re-checks `timeToContinue`, which includes a changed current version
  setHandler(upgradeCheckSignal, () => undefined);

  setHandler(stopSignal, async ({ by }) => {
    if (running) {
      running.stoppedBy = by;
      running.scope.cancel();
      return;
    }
    await notify(`Nothing is running to stop. ${plural(state.queue.length, 'message')} queued.`);
  });

  setHandler(newTaskSignal, ({ by }) => {
    newTaskBy = by;
    if (running) {
      running.stoppedBy = by;
      running.scope.cancel();
    }
  });

  setHandler(
    steerUpdate,
    async (note) => {
      const clean = { text: note.text.trim(), by: note.by };
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
      const tail = running ? ' (from the next turn on)' : '';
      return { settings, message: `OK: ${parts.join(', ')}${tail}.` };
    },
    { validator: (change) => SessionState.validateSettings(change) },
  );

  // An admin's decision on an approval the running (inline) turn waits for.
  setHandler(approvalDecisionUpdate, (d) => running!.loop!.decideApproval(d), {
    validator: (d) => {
      if (!running?.loop) throw new Error(`approval ${d.approvalId} is not waiting in this conversation's running turn`);
      running.loop.validateApproval(d);
    },
  });

  setHandler(statusQuery, (): SessionStatus => ({
    sessionId,
    running: running ? { turnId: running.turnId, startedAt: running.startedAt, ...(running.loop ? { turn: { ...running.loop.status } } : {}) } : null,
    queueLength: state.queue.length,
    settings: { ...state.settings },
    tokens: { ...state.tokens },
    turnsStarted: state.turnsStarted,
    generation: state.generation,
    pendingSteers: state.pendingSteers.length,
  }));

  // Between turns, a pinned session whose deployment has a new current version continues as
  // new onto it (recorded in the workflow task's history, so replay sees the same answer).
  const timeToContinue = () => {
    const now = workflowInfo();
    return state.shouldContinueAsNew(input.limits.maxTurnsPerRun, now.continueAsNewSuggested || now.targetWorkerDeploymentVersionChanged);
  };

  for (;;) {
    await condition(() => state.queue.length > 0 || newTaskBy !== undefined || timeToContinue());
    if (newTaskBy !== undefined || timeToContinue()) break;

    if (state.dropped > 0) {
      const n = state.dropped;
      state.dropped = 0;
      await notify(`The queue was full: ${plural(n, 'older message')} were dropped.`);
    }
    const batch = state.takeBatch();
    const turnNumber = ++state.turnsStarted;
    state.turnsThisRun++;
    const turnId = turnWorkflowId(sessionId, epoch, turnNumber);
    const steers = state.takeSteers();
    const turn: RunningTurn = {
      turnId,
      startedAt: new Date(Date.now()).toISOString(),
      scope: new CancellationScope(),
      buffered: [],
    };
    running = turn;
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
    try {
      let result: TurnResult;
      if (patched(INLINE_TURN_PATCH)) {
        listUsers(batch.flatMap((m) => (m.identityId ? [m.identityId] : [])));
        const loop = new TurnLoop(turnInput, { startedAt: turn.startedAt, inline: true, label: `Turn ${turnNumber}` });
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
      state.recordTurn({ inbound: batch.map((m) => m.key), ...(result.replyKey ? { reply: result.replyKey } : {}) }, result.usage, result.notes);
      state.pendingSteers.unshift(...result.unappliedSteers);
    } catch (err) {
      state.recordTurn({ inbound: batch.map((m) => m.key) }, { input: 0, output: 0, total: 0 });
      if (isCancellation(err)) {
        if (newTaskBy === undefined) {
          await notify(
            `Stopped the running turn. ${plural(state.queue.length, 'queued message')} kept.`,
            `${turnId}:stopped`,
          );
        }
      } else {
        await notify(`The turn failed unexpectedly and was abandoned: ${(err as Error).message}`, `${turnId}:failed`);
      }
    } finally {
      running = null;
      if (turn.loop) setCurrentDetails(`Idle after turn ${turnNumber}.`);
    }
  }

  await condition(allHandlersFinished);
  if (newTaskBy !== undefined) {
    const carried = state.carryForNewTask();
    await notify(
      `New task started: the earlier context is cleared.${carried.queue.length ? ` ${plural(carried.queue.length, 'queued message')} will be answered in the new task.` : ''}`,
    );
    await continueOnCurrentBuild({ ...input, settings: state.settings, carried });
  }
  await continueOnCurrentBuild({ ...input, settings: state.settings, carried: state.carry() });
}
