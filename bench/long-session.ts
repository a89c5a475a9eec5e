/**
 * One conversation of many turns (LONG_TURNS, 10,000), Steward against the plain-Temporal
 * floor: does a long session keep its latency, and is the turn at which it continues as new
 * seen? Both continue as new every STEWARD_SESSION_MAX_TURNS turns (100 by default): Steward's
 * session (workflows/chat/session.ts) with its bounded working set, the floor's conversation
 * (bench/floor/workflows.ts, floorLongConversation) with a counter, the smallest way plain
 * Temporal has. LONG_ROUNDS rounds (3), each running the floor and Steward as processes of
 * their own (the order swapped every round, as bench/compare.ts does), each process one
 * conversation of LONG_TURNS turns, back to back; then the medians of the rounds and the ratios
 * Steward / floor. Prints every round on stderr and JSON on stdout. Not a test.
 *
 * A turn is one message and its reply, sent back to back. Afterwards the benchmark reads the
 * conversation's runs (visibility): a turn during which a run closed is a continue-as-new turn
 * (Steward's session continues as new in the task that takes in the message after its last
 * turn, so that turn is the new run's first; the floor's in the task that returns its last
 * reply, so it is the old run's last). The turn after it is reported on its own (the floor's
 * new run answers its first message there); every other turn after the first is one of the
 * others. For each side: p50/p99 of all turns, of the first 100, of the continue-as-new turns,
 * of the turns after them and of the others; the two target ratios (continue-as-new p99 / the
 * others' p50, target <= 2; the whole run's p50 / the first 100's, target <= 1.1); where each
 * group's time went, from the histories (p50 of its workflow tasks' waits from scheduled to
 * started, of their run on the worker, of the activity, and the rest: message in, reply out);
 * p50 per LONG_WINDOW turns; the longest run's history; and the timeline of the last boundary
 * (the turn before, the continue-as-new turn and the turn after: both runs' history events, in
 * ms from the continue-as-new turn's message).
 *
 *   node --import tsx bench/long-session.ts                              (3 rounds of 10,000 turns a side)
 *   LONG_ROUNDS=3 LONG_TURNS=1000 node --import tsx bench/long-session.ts
 *   LONG_SIDE=steward LONG_TURNS=500 node --expose-gc --import tsx bench/long-session.ts   (one side only)
 *
 * Settings: LONG_TURNS (10000), LONG_ROUNDS (3), LONG_WINDOW (1000), STEWARD_SESSION_MAX_TURNS
 * (100; both sides), BENCH_CACHE (200), LONG_SIDE (floor | steward: that side only, in this
 * process). A run that lives less than a second is started late by the server (its
 * continue-as-new minimum interval, 1 s by default): keep STEWARD_SESSION_MAX_TURNS x a turn's
 * time above that, or both sides measure the server's back-off.
 */
import { cpus, loadavg } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Client } from '@temporalio/client';
import protoModule, { type temporal } from '@temporalio/proto';
import { STEWARD_NODE_FLAGS } from '../platform/node-options.js';
import { floorEnvOf, runJsonProcess, stewardEnv, type Json } from './sides.js';
import { applySourceMapSetting } from '../platform/source-maps.js';
import type { LatencyStats } from './phases.js';

const positive = (name: string, fallback: number): number => {
  const raw = process.env[name];
  const v = Number(raw === undefined || raw === '' ? fallback : raw);
  if (!Number.isInteger(v) || v < 1) throw new Error(`${name}: expected a positive whole number, got ${raw}`);
  return v;
};
const TURNS = positive('LONG_TURNS', 10_000);
const ROUNDS = positive('LONG_ROUNDS', 3);
const WINDOW = positive('LONG_WINDOW', 1_000);
const MAX_TURNS_PER_RUN = positive('STEWARD_SESSION_MAX_TURNS', 100);
const FIRST = Math.min(100, TURNS);
const SIDES = ['floor', 'steward'] as const;
type Side = (typeof SIDES)[number];


const median = (xs: number[]) => {
  const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

// ---------------------------------------------------------------------------------------------
// One side: one conversation, turn after turn

interface Conversation {
  client: Client;
  workflowId: string;
  /** One message in, resolved once its reply exists. */
  turn(i: number): Promise<void>;
  stop(): Promise<void>;
}

async function floorConversation(): Promise<Conversation> {
  const { WithStartWorkflowOperation } = await import('@temporalio/client');
  const { FLOOR_TASK_QUEUE, startFloorStack } = await import('./floor/stack.js');
  const { floorLongConversation, sayUpdate } = await import('./floor/workflows.js');
  const stack = await startFloorStack('steward-floor-long-');
  const workflowId = 'floor-long';
  return {
    client: stack.client,
    workflowId,
    async turn(i) {
      const reply = await stack.client.workflow.executeUpdateWithStart(sayUpdate, {
        args: [`ping ${i}`],
        startWorkflowOperation: new WithStartWorkflowOperation(floorLongConversation, {
          workflowId,
          taskQueue: FLOOR_TASK_QUEUE,
          args: [MAX_TURNS_PER_RUN],
          workflowIdConflictPolicy: 'USE_EXISTING',
        }),
      });
      if (!reply) throw new Error('no reply');
    },
    stop: () => stack.stop(),
  };
}

async function stewardConversation(): Promise<Conversation> {
  // as Steward's entry point does (platform/main.ts): the heap grows at most STEWARD_HEAP_GROWTH_PERCENT past its live objects
  const { applyHeapGrowthSetting } = await import('../platform/heap-growth.js');
  applyHeapGrowthSetting();
  const { sessionWorkflowId } = await import('../common/ids.js');
  const { startBenchStack } = await import('./stack.js');
  const stack = await startBenchStack({ STEWARD_SESSION_MAX_TURNS: String(MAX_TURNS_PER_RUN) });
  const chat = 'long';
  return {
    client: stack.steward.client,
    workflowId: sessionWorkflowId({ platform: 'http', account: 'default', chatId: chat }),
    async turn() {
      await stack.turn(chat);
    },
    stop: () => stack.stop(),
  };
}

// @temporalio/proto is CommonJS: under ESM its namespace arrives as the default export
const EventType = protoModule.temporal.api.enums.v1.EventType;
type HistoryEvent = temporal.api.history.v1.IHistoryEvent;

const eventMs = (e: HistoryEvent): number => {
  const t = e.eventTime;
  if (!t) return NaN;
  const s = t.seconds == null ? 0 : typeof t.seconds === 'number' ? t.seconds : Number(t.seconds);
  return s * 1000 + (t.nanos ?? 0) / 1e6;
};
const eventName = (e: HistoryEvent): string => (typeof e.eventType === 'number' ? (EventType[e.eventType] ?? String(e.eventType)) : String(e.eventType)).replace(/^EVENT_TYPE_/, '');

interface TurnRecord {
  ms: number;
  /** Wall clock at the message and at its reply (the server's event times are wall clock too). */
  sent: number;
  replied: number;
}

interface RunRecord {
  runId: string;
  start: number;
  /** When it closed (continued as new), wall clock; undefined while it runs. */
  close: number | undefined;
}

/**
 * The conversation's runs, oldest first, from visibility (written a moment after a run closes:
 * read until two reads agree and every run but the last has closed).
 */
async function runsOf(c: Conversation): Promise<RunRecord[]> {
  let last = '';
  for (let attempt = 0; attempt < 40; attempt++) {
    const runs: RunRecord[] = [];
    for await (const wf of c.client.workflow.list({ query: `WorkflowId = "${c.workflowId}"` })) {
      runs.push({ runId: wf.runId, start: wf.startTime.getTime(), close: wf.closeTime?.getTime() });
    }
    runs.sort((a, b) => a.start - b.start);
    const key = JSON.stringify(runs);
    if (key === last && runs.length > 0 && runs.slice(0, -1).every((r) => r.close !== undefined)) return runs;
    last = key;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`the runs of ${c.workflowId} are not all visible`);
}

/**
 * The history events of the runs around the continue-as-new turn `at` (the turn before it, it
 * and the turn after it), in ms from its message, with the turns' messages and replies among them.
 */
async function timeline(c: Conversation, turns: TurnRecord[], at: number, runs: RunRecord[]): Promise<string[]> {
  const first = Math.max(0, at - 1);
  const shown = turns.slice(first, at + 2);
  const zero = turns[at]!.sent;
  const from = shown[0]!.sent - 1;
  const to = shown.at(-1)!.replied + 1;
  const rows: Array<{ t: number; row: string }> = [];
  const rel = (t: number) => `${(t - zero).toFixed(1).padStart(8)} ms`;
  const around = runs.filter((r) => r.start <= to && (r.close === undefined || r.close >= from));
  for (const [k, run] of around.entries()) {
    const h = await c.client.workflow.getHandle(c.workflowId, run.runId).fetchHistory();
    for (const e of h.events ?? []) {
      const t = eventMs(e);
      if (t >= from && t <= to) rows.push({ t, row: `${rel(t)}  run ${k + 1} #${Number(e.eventId ?? 0)} ${eventName(e)}` });
    }
  }
  for (const [k, turn] of shown.entries()) {
    const n = first + k + 1;
    rows.push({ t: turn.sent, row: `${rel(turn.sent)}  client: turn ${n}'s message sent` });
    rows.push({ t: turn.replied, row: `${rel(turn.replied)}  client: turn ${n}'s reply seen (${turn.ms.toFixed(1)} ms)` });
  }
  return rows.sort((a, b) => a.t - b.t).map((r) => r.row);
}

/** Where a turn's time went, from the histories: the parts Temporal's events bound. */
interface TurnPhases {
  /** Workflow tasks the turn took. */
  workflow_tasks: number;
  /** Summed waits of its workflow tasks from scheduled to started (the server handing each to the worker). */
  wft_wait_ms: number;
  /** Summed time its workflow tasks ran on the worker (started to completed; the task that delivers the reply ends after it is seen). */
  wft_run_ms: number;
  /** Summed activity time, scheduled to completed (the model step). */
  activity_ms: number;
  /** The rest: the turn's time less the above (the message in: HTTP, ingress; 0 when the parts overlap it). */
  rest_ms: number;
}

const PHASES: ReadonlyArray<keyof TurnPhases> = ['workflow_tasks', 'wft_wait_ms', 'wft_run_ms', 'activity_ms', 'rest_ms'];

/** Every turn's phases, read from the histories of every run, and the longest run's history (events). */
async function turnPhases(c: Conversation, turns: TurnRecord[], runs: RunRecord[]): Promise<{ phases: TurnPhases[]; maxRunEvents: number }> {
  const ET = EventType;
  const out: TurnPhases[] = turns.map((t) => ({ workflow_tasks: 0, wft_wait_ms: 0, wft_run_ms: 0, activity_ms: 0, rest_ms: t.ms }));
  const starts = turns.map((t) => t.sent);
  // the turn whose message was the last sent at or before t (its window runs until the next message)
  const turnAt = (t: number): number => {
    let lo = 0;
    let hi = starts.length - 1;
    if (t < starts[0]!) return -1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (starts[mid]! <= t) lo = mid;
      else hi = mid - 1;
    }
    return t <= turns[lo]!.replied ? lo : -1;
  };
  let maxRunEvents = 0;
  for (const run of runs) {
    const h = await c.client.workflow.getHandle(c.workflowId, run.runId).fetchHistory();
    maxRunEvents = Math.max(maxRunEvents, h.events?.length ?? 0);
    const at = new Map<number, number>();
    for (const e of h.events ?? []) {
      const t = eventMs(e);
      at.set(Number(e.eventId ?? 0), t);
      // a task or an activity belongs to the turn during which it started (its whole time counted there)
      const add = (since: number | undefined, k: keyof TurnPhases, v: number) => {
        const i = since === undefined ? -1 : turnAt(since);
        if (i >= 0 && Number.isFinite(v)) out[i]![k] += v;
      };
      if (e.eventType === ET.EVENT_TYPE_WORKFLOW_TASK_STARTED) {
        add(t, 'workflow_tasks', 1);
        add(t, 'wft_wait_ms', t - (at.get(Number(e.workflowTaskStartedEventAttributes?.scheduledEventId ?? 0)) ?? NaN));
      } else if (e.eventType === ET.EVENT_TYPE_WORKFLOW_TASK_COMPLETED) {
        const started = at.get(Number(e.workflowTaskCompletedEventAttributes?.startedEventId ?? 0));
        add(started, 'wft_run_ms', t - (started ?? NaN));
      } else if (e.eventType === ET.EVENT_TYPE_ACTIVITY_TASK_COMPLETED) {
        const scheduled = at.get(Number(e.activityTaskCompletedEventAttributes?.scheduledEventId ?? 0));
        add(scheduled, 'activity_ms', t - (scheduled ?? NaN));
      }
    }
  }
  for (const p of out) p.rest_ms = Math.max(0, p.rest_ms - p.wft_wait_ms - p.wft_run_ms - p.activity_ms);
  return { phases: out, maxRunEvents };
}

/** The median of each phase over a group of turns. */
function phaseMedians(ps: TurnPhases[]): Record<string, number> {
  return Object.fromEntries(PHASES.map((k) => [k, +median(ps.map((p) => p[k])).toFixed(1)]));
}

async function runSide(side: Side): Promise<void> {
  // as Steward's entry point does (platform/main.ts): no source maps unless STEWARD_SOURCE_MAPS, set before the rest loads
  applySourceMapSetting();
  const { stats } = await import('./phases.js');
  const c = side === 'floor' ? await floorConversation() : await stewardConversation();
  try {
    // back to back, nothing between a reply and the next message (a pause shifts the turns
    // against the server's transfer-queue reads: docs/performance.md)
    const turns: TurnRecord[] = [];
    for (let i = 0; i < TURNS; i++) {
      const t0 = performance.now();
      await c.turn(i);
      const t1 = performance.now();
      turns.push({ ms: t1 - t0, sent: performance.timeOrigin + t0, replied: performance.timeOrigin + t1 });
    }
    // a run closed (continued as new) during the turn whose message was the last sent before it
    // (not after its reply: a session that ran its turns continues as new on its own 2 s after the last)
    const runs = await runsOf(c);
    const canTurns = new Set<number>();
    for (const r of runs) {
      if (r.close === undefined) continue;
      const i = turns.findLastIndex((t) => t.sent <= r.close!);
      if (i > 0 && r.close <= turns[i]!.replied) canTurns.add(i);
    }
    const { phases, maxRunEvents } = await turnPhases(c, turns, runs);
    const group = (i: number) => (canTurns.has(i) ? 'can_turns' : canTurns.has(i - 1) ? 'after_can_turns' : 'others');
    const can: number[] = [];
    const afterCan: number[] = [];
    const others: number[] = [];
    const grouped: Record<string, TurnPhases[]> = { can_turns: [], after_can_turns: [], others: [] };
    for (const [i, t] of turns.entries()) {
      if (i === 0) continue; // the conversation's start
      const g = group(i);
      (g === 'can_turns' ? can : g === 'after_can_turns' ? afterCan : others).push(t.ms);
      grouped[g]!.push(phases[i]!);
    }
    const all = turns.map((t) => t.ms);
    const s = { all: stats(all), first_100: stats(all.slice(0, FIRST)), can_turns: stats(can), after_can_turns: stats(afterCan), others: stats(others) };
    const windows = [];
    for (let from = 0; from < TURNS; from += WINDOW) {
      const w = stats(all.slice(from, from + WINDOW));
      windows.push({ turns: `${from + 1}-${Math.min(TURNS, from + WINDOW)}`, p50_ms: w.p50_ms, p99_ms: w.p99_ms });
    }
    const lastCan = Math.max(-1, ...canTurns);
    console.log(
      JSON.stringify(
        {
          bench: 'long-session',
          side,
          turns: TURNS,
          max_turns_per_run: MAX_TURNS_PER_RUN,
          runs: runs.length,
          ...s,
          ratios: {
            can_p99_to_others_p50: ratio(s.can_turns.p99_ms, s.others.p50_ms),
            whole_p50_to_first_100_p50: ratio(s.all.p50_ms, s.first_100.p50_ms),
          },
          phases_p50: Object.fromEntries(Object.entries(grouped).map(([g, ps]) => [g, phaseMedians(ps)])),
          windows,
          max_run_history_events: maxRunEvents,
          boundary_timeline: lastCan > 0 ? await timeline(c, turns, lastCan, runs) : [],
        },
        null,
        2,
      ),
    );
  } finally {
    await c.stop();
  }
}

function ratio(a: number, b: number): number | null {
  return b > 0 && Number.isFinite(a) ? +(a / b).toFixed(2) : null;
}

// ---------------------------------------------------------------------------------------------
// The comparison: rounds of both sides, each a process of its own

const here = path.dirname(fileURLToPath(import.meta.url));

const floorEnv = floorEnvOf();

function runProcess(side: Side): Promise<Json> {
  return runJsonProcess({
    label: `the ${side} side`,
    script: fileURLToPath(import.meta.url),
    nodeFlags: side === 'steward' ? STEWARD_NODE_FLAGS : [],
    env: { ...(side === 'steward' ? stewardEnv : floorEnv), LONG_SIDE: side },
    cwd: path.dirname(here),
  });
}

const GROUPS = ['all', 'first_100', 'can_turns', 'after_can_turns', 'others'] as const;

/** The figures compared, by name, from a side's JSON. */
function figures(j: Json): Record<string, number> {
  const f: Record<string, number> = {};
  for (const g of GROUPS) {
    const s = j[g] as LatencyStats | undefined;
    f[`${g}_p50_ms`] = s?.turns ? s.p50_ms : NaN;
    f[`${g}_p99_ms`] = s?.turns ? s.p99_ms : NaN;
  }
  const r = j.ratios as Record<string, number | null>;
  f.can_p99_to_others_p50 = r.can_p99_to_others_p50 ?? NaN;
  f.whole_p50_to_first_100_p50 = r.whole_p50_to_first_100_p50 ?? NaN;
  f.max_run_history_events = Number(j.max_run_history_events);
  f.runs = Number(j.runs);
  const phases = (j.phases_p50 ?? {}) as Record<string, Record<string, number>>;
  for (const [g, ps] of Object.entries(phases)) for (const [k, v] of Object.entries(ps)) f[`${g}_${k}`] = v;
  return f;
}

const jsonNumber = (n: number) => (Number.isFinite(n) ? +n.toFixed(2) : null);

async function compare(): Promise<void> {
  const loadBefore = loadavg().map((l) => +l.toFixed(2));
  const rounds: Array<{ round: number; order: Side[]; floor: Record<string, number>; steward: Record<string, number> }> = [];
  const timelines: Partial<Record<Side, unknown>> = {};
  for (let r = 1; r <= ROUNDS; r++) {
    const order: Side[] = r % 2 === 1 ? ['floor', 'steward'] : ['steward', 'floor'];
    const got: Partial<Record<Side, Json>> = {};
    for (const side of order) got[side] = await runProcess(side);
    for (const side of SIDES) timelines[side] = got[side]!.boundary_timeline;
    const round = { round: r, order, floor: figures(got.floor!), steward: figures(got.steward!) };
    rounds.push(round);
    console.error(`round ${r}/${ROUNDS}: ${JSON.stringify(round)}`);
  }
  const names = Object.keys(rounds[0]!.floor);
  const medians = (side: Side) => Object.fromEntries(names.map((m) => [m, jsonNumber(median(rounds.map((r) => r[side][m]!)))]));
  const floor = medians('floor');
  const steward = medians('steward');
  const ratios = Object.fromEntries(names.map((m) => [m, floor[m] && steward[m] !== null ? +(steward[m]! / floor[m]!).toFixed(2) : null]));
  console.log(
    JSON.stringify(
      {
        bench: 'long-session-compare',
        rounds: ROUNDS,
        turns: TURNS,
        max_turns_per_run: MAX_TURNS_PER_RUN,
        node_flags: { floor: [], steward: STEWARD_NODE_FLAGS },
        // how busy the machine was (1, 5 and 15 minute load averages), before and after
        machine: { cpus: cpus().length, load_before: loadBefore, load_after: loadavg().map((l) => +l.toFixed(2)) },
        per_round: rounds,
        median: { floor, steward },
        ratio_steward_to_floor: ratios,
        targets: { can_p99_to_others_p50: '<= 2 (Steward)', whole_p50_to_first_100_p50: '<= 1.1 (Steward)' },
        boundary_timeline_last_round: timelines,
      },
      (_k, v: unknown) => (typeof v === 'number' && !Number.isFinite(v) ? null : v),
      2,
    ),
  );
}

const side = process.env.LONG_SIDE;
if (side === undefined || side === '') await compare();
else if ((SIDES as readonly string[]).includes(side)) await runSide(side as Side);
else throw new Error(`LONG_SIDE: expected floor or steward, got ${side}`);
