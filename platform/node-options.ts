/**
 * The Node options and process environment every Steward process runs with, for the Node that
 * runs it: `./steward` (the launcher) and the test command (scripts/test.sh, through
 * NODE_OPTIONS) take them from scripts/bootstrap.sh (STEWARD_NODE_FLAGS, MALLOC_ARENA_MAX), the
 * image names them (Dockerfile: ENTRYPOINT, ENV), the processes `steward cluster` starts get
 * these; test/unit/node-options.test.ts checks that they agree.
 *
 * --experimental-async-context-frame: AsyncLocalStorage (the Temporal SDK's activity context,
 * among others) kept on V8's continuation data instead of a promise hook on every promise the
 * process makes; the default from Node 24 on, where the flag is refused (so it is not passed
 * there). Under load that hook took 3% of the main thread; without it sustained turns/s rose 4%
 * (bench/turn-overhead.ts, 3 alternating rounds).
 *
 * --max-semi-space-size=64: the main thread's young generation may grow to 64 MB semi-spaces
 * (V8's default on 64-bit is 16). Under load a turn's objects live across its awaits for as
 * long as the turn takes (hundreds of milliseconds with 50 conversations at once), while the
 * main thread allocates enough to fill 16 MB semi-spaces several times in that span: what
 * outlives two scavenges is promoted, and the old generation's collections (their work on
 * V8's helper threads: 3.6 ms of CPU a turn against the floor's 0.7) clean up after it. With
 * 64 MB, sustained turns/s rose 10% (87.5 against 79.4, medians of 4 alternating rounds of
 * bench/turn-overhead.ts with BENCH_SECONDS=30), 50 conversations' p50 fell 9% (604 against
 * 664 ms), and RSS after 1,000 idle sessions was 284 against 278 MB; 32 MB gained nothing,
 * 128 MB no more than 64.
 * The young generation starts at 1 MB and grows only under allocation; an idle process's
 * compaction (platform/idle-memory.ts) shrinks it again. Workflow threads keep their own bound
 * (workers/workflow-threads.ts, WORKFLOW_THREAD_YOUNG_GENERATION_MB).
 */
/** The main thread's semi-space bound, in MB (see above). */
export const STEWARD_MAX_SEMI_SPACE_MB = 64;

export const STEWARD_NODE_FLAGS: readonly string[] = nodeFlags(Number(process.versions.node.split('.')[0]));

/** The options for a Node of this major version: on 24 and later async context frames are the default and the flag is refused. */
export function nodeFlags(major: number): string[] {
  const semiSpace = `--max-semi-space-size=${STEWARD_MAX_SEMI_SPACE_MB}`;
  return major < 24 ? ['--experimental-async-context-frame', semiSpace] : [semiSpace];
}

/** The arena count Steward starts its processes with unless MALLOC_ARENA_MAX is set (scripts/bootstrap.sh and the Dockerfile name the same). */
export const STEWARD_MALLOC_ARENA_MAX = '2';

/**
 * The environment the C library reads when a Steward process starts (so it is set by whoever
 * starts the process, never from .env, which Node reads after its allocator is running). A
 * value already in the environment wins.
 *
 * MALLOC_ARENA_MAX=2: glibc gives each thread that allocates an arena of its own, up to 8 per
 * core, and memory freed in one arena serves only that arena. A Steward process has about 20
 * threads (Temporal core's runtime, the workflow thread, V8's helpers, libuv's pool); under
 * load each arena grows and keeps its free pages scattered among live ones. With two arenas
 * the all-in-one process held 500-513 MB of RSS after a 30 s sustained phase and 1,100 idle
 * sessions, against 589-596 MB with glibc's default, at the same throughput
 * (bench/turn-overhead.ts, BENCH_SECONDS=30, 2 alternating rounds). musl ignores it.
 */
export function stewardProcessEnv(env: Readonly<Record<string, string | undefined>> = process.env): Record<string, string> {
  return { MALLOC_ARENA_MAX: env.MALLOC_ARENA_MAX || STEWARD_MALLOC_ARENA_MAX };
}
