/**
 * Named checkpoints between accepting an input and handing it over (a message to its session,
 * an event to its objective run, a task to the agent): the fault-injection harness of intake
 * (test/e2e/intake-faults.test.ts) stops the process at each one, then redelivers. Two more sit
 * in a model step that delivers the turn's reply (test/e2e/deliver-in-step.test.ts).
 *
 * In production nothing is armed and `faultPoint` returns at once. A test arms one point, in
 * this process (`armFaultPoint`: the next pass throws InjectedFault, as if the process had
 * died there, and disarms) or in a child process through its environment
 * (`STEWARD_FAULT_POINT=<point>`: the first pass kills that process with SIGKILL).
 */

/** The intake's checkpoints, in the order an input passes them (what faultPointsPassed reports). */
const INTAKE_POINTS = [
  // chat messages and commands (services/chat/intake.ts)
  'ingress.session',
  'ingress.receipted',
  'ingress.recorded',
  'ingress.command-run',
  'ingress.command-answered',
  // a task handed to the agent (services/tasks.ts)
  'task.handed',
  'task.recorded',
  // a task made, a change recorded by a chat command, before its reminder or workflow starts (services/tasks.ts, services/changes.ts)
  'task.created',
  'change.created',
  // the handoff of a recorded message to its session (services/handoff.ts)
  'handoff.delivered',
  'handoff.marked',
  // objective events: webhooks, file changes, email (services/objectives.ts)
  'event.recorded',
  // a run started under an id derived from its input (services/handoff.ts): event runs, triage
  'run.started',
  'run.marked',
  // a replay's run started, before the service wrote its row (services/replays.ts)
  'replay.started',
  // a fork's session started, before its claim and transcript are written (services/replays/fork.ts)
  'fork.started',
] as const;

/**
 * Checkpoints of a turn's work, not of an intake: passed by turns that run meanwhile, so they are
 * armed, never reported as points an input passed.
 */
const TURN_POINTS = [
  // a chat turn's reply delivered by its model step (activities/chat.ts deliverFromStep): about
  // to deliver (a fault there is a failed delivery: the turn delivers), and delivered (the step
  // dies before it completes: its retry finishes the delivery without asking the model again)
  'step.delivering',
  'step.delivered',
] as const;

/** Every checkpoint. */
export const FAULT_POINTS = [...INTAKE_POINTS, ...TURN_POINTS] as const;
const intake = new Set<string>(INTAKE_POINTS);

export type FaultPointName = (typeof FAULT_POINTS)[number];

/** The crash an armed point simulates in-process. */
export class InjectedFault extends Error {
  override readonly name = 'InjectedFault';
  constructor(readonly point: FaultPointName) {
    super(`injected fault at ${point}`);
  }
}

const fromEnv = process.env.STEWARD_FAULT_POINT;
let armed: { point: FaultPointName; kill: boolean } | undefined =
  fromEnv && (FAULT_POINTS as readonly string[]).includes(fromEnv) ? { point: fromEnv as FaultPointName, kill: true } : undefined;
let seen: ((point: FaultPointName) => void) | undefined;
if (armed) process.stderr.write(`STEWARD_FAULT_POINT=${armed.point} is set: this process kills itself (SIGKILL) when it first passes that point (a test hook)\n`);

/** A checkpoint: nothing unless a test armed it (or watches the points passed). */
export function faultPoint(point: FaultPointName): void {
  if (armed === undefined && seen === undefined) return;
  if (intake.has(point)) seen?.(point);
  if (armed?.point !== point) return;
  const { kill } = armed;
  armed = undefined;
  if (kill) process.kill(process.pid, 'SIGKILL');
  throw new InjectedFault(point);
}

/** Tests: the next pass of `point` in this process throws InjectedFault. Returns the disarm. */
export function armFaultPoint(point: FaultPointName): () => void {
  armed = { point, kill: false };
  return () => {
    if (armed?.point === point) armed = undefined;
  };
}

/** Tests: the point armed and not passed yet (undefined once it fired). */
export function faultPointArmed(): FaultPointName | undefined {
  return armed?.point;
}

/** Tests: the intake checkpoints passed while `fn` runs, in order (not a turn's, TURN_POINTS). */
export async function faultPointsPassed(fn: () => Promise<unknown>): Promise<FaultPointName[]> {
  const passed: FaultPointName[] = [];
  seen = (p) => passed.push(p);
  try {
    await fn();
  } finally {
    seen = undefined;
  }
  return passed;
}
