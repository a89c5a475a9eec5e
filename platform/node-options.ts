/**
 * The Node options every Steward process runs with, for the Node that runs it: `./steward` (the
 * launcher) and the test command (scripts/test.sh, through NODE_OPTIONS) take them from
 * scripts/bootstrap.sh's STEWARD_NODE_FLAGS, the image's ENTRYPOINT (Dockerfile, Node 22) names
 * them, the processes `steward cluster` starts get this list; test/unit/node-options.test.ts
 * checks that they agree.
 *
 * --experimental-async-context-frame: AsyncLocalStorage (the Temporal SDK's activity context,
 * among others) kept on V8's continuation data instead of a promise hook on every promise the
 * process makes; the default from Node 24 on, where the flag is refused (so it is not passed
 * there). Under load that hook took 3% of the main thread; without it sustained turns/s rose 4%
 * (bench/turn-overhead.ts, 3 alternating rounds).
 */
export const STEWARD_NODE_FLAGS: readonly string[] = nodeFlags(Number(process.versions.node.split('.')[0]));

/** The options for a Node of this major version: on 24 and later async context frames are the default and the flag is refused. */
export function nodeFlags(major: number): string[] {
  return major < 24 ? ['--experimental-async-context-frame'] : [];
}
