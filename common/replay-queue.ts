/**
 * The replay task queue's name: zod-free, so the replay workflow can import it (common/replay.ts
 * re-exports it for everything else).
 */

/** The replay's activities run on `<background queue>-replay` (e.g. `steward-background-replay`). */
export const REPLAY_QUEUE_SUFFIX = '-replay';

/** The replay task queue of a background queue. */
export function replayQueueOf(backgroundQueue: string): string {
  return `${backgroundQueue}${REPLAY_QUEUE_SUFFIX}`;
}
