/**
 * The Node options every Steward process runs with: `./steward` (the launcher), the image's
 * ENTRYPOINT (Dockerfile), the processes `steward cluster` starts, and the test command
 * (scripts/test.sh, through NODE_OPTIONS) all pass them; test/unit/node-options.test.ts checks
 * that they agree.
 *
 * --experimental-async-context-frame: AsyncLocalStorage (the Temporal SDK's activity context,
 * among others) kept on V8's continuation data instead of a promise hook on every promise the
 * process makes; the default from Node 24 on. Under load it took 3% of the main thread, and
 * sustained turns/s rose 4% without it (bench/turn-overhead.ts, 3 alternating rounds).
 */
export const STEWARD_NODE_FLAGS: readonly string[] = ['--experimental-async-context-frame'];
