/**
 * Where the first turn of a woken session goes, read from Temporal's own history: makes
 * BENCH_IDLE_SESSIONS idle sessions (one turn each, BENCH_IDLE_CONCURRENCY at a time) on a worker
 * caching BENCH_CACHE workflows, then wakes the oldest BENCH_WAKE_SESSIONS one at a time with two
 * turns each: the first (cold: the session left the cache, its history is replayed) and the
 * second BENCH_WAKE_PAUSE_MS (300) after its reply (warm: cached; the pause lets the first turn's
 * last workflow task finish, so the second does not ride on it). Each turn's history events (those written from the moment
 * its message was sent until its reply was seen) are laid out as a timeline: message sent -> first
 * event (the ingress), each event -> the next, last event -> reply seen. Turns with the same
 * sequence of events are grouped, and the median of each gap printed, cold beside warm, for
 * Steward (BENCH_TARGET=steward, the default: bench/stack.ts) or the floor (BENCH_TARGET=floor).
 * Prints JSON. Not a test.
 *
 *   BENCH_IDLE_SESSIONS=1000 BENCH_WAKE_SESSIONS=100 node --expose-gc --import tsx bench/wake-timeline.ts
 *   BENCH_TARGET=floor BENCH_IDLE_SESSIONS=1000 BENCH_WAKE_SESSIONS=100 node --expose-gc --import tsx bench/wake-timeline.ts
 */
import { applyHeapGrowthSetting } from '../platform/heap-growth.js';
import { applySourceMapSetting } from '../platform/source-maps.js';

const TARGET = process.env.BENCH_TARGET ?? 'steward';
applySourceMapSetting();
if (TARGET !== 'floor') applyHeapGrowthSetting();

const { default: protoModule } = await import('@temporalio/proto');
const { temporal } = protoModule;
const { sessionWorkflowId } = await import('../common/ids.js');
const { idleChat, inLanes, phaseSettings, stats } = await import('./phases.js');

type HistoryEvent = { eventType?: number | null; eventTime?: { seconds?: number | { toNumber(): number } | null; nanos?: number | null } | null };
interface Side {
  cache: number;
  turn(chatId: string): Promise<number>;
  history(chatId: string): Promise<HistoryEvent[]>;
  stop(): Promise<void>;
}

async function side(): Promise<Side> {
  if (TARGET === 'floor') {
    const { startFloorStack } = await import('./floor/stack.js');
    const f = await startFloorStack('steward-wake-');
    return {
      cache: f.cache,
      async turn(chatId) {
        const t0 = performance.now();
        await f.turn(chatId);
        return performance.now() - t0;
      },
      history: async (chatId) => ((await f.client.workflow.getHandle(`floor-${chatId}`).fetchHistory()).events ?? []) as HistoryEvent[],
      stop: () => f.stop(),
    };
  }
  const { startBenchStack } = await import('./stack.js');
  const s = await startBenchStack();
  return {
    cache: s.cache,
    turn: (chatId) => s.turn(chatId),
    history: async (chatId) => ((await s.steward.client.workflow.getHandle(sessionWorkflowId({ platform: 'http', account: 'default', chatId })).fetchHistory()).events ?? []) as HistoryEvent[],
    stop: () => s.stop(),
  };
}

const ms = (ts: HistoryEvent['eventTime']): number => {
  if (!ts) return 0;
  const s = ts.seconds == null ? 0 : typeof ts.seconds === 'number' ? ts.seconds : ts.seconds.toNumber();
  return s * 1000 + (ts.nanos ?? 0) / 1e6;
};
const typeName = (t: number | null | undefined) =>
  String(temporal.api.enums.v1.EventType[t ?? 0] ?? t)
    .replace(/^EVENT_TYPE_/, '')
    .toLowerCase();
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s[Math.floor(s.length / 2)]!;
};

interface Sent {
  chat: string;
  /** Wall clock (ms) when the message was sent and when its reply was seen. */
  sentAt: number;
  repliedAt: number;
}

/** One turn's timeline: the gaps from the message to its first event, between its events, and from its last event to the reply. */
function timeline(events: HistoryEvent[], t: Sent): { signature: string; gaps: number[] } {
  // the server's clock is this machine's: events from the send on (less a little for rounding), up to the reply
  const mine = events.filter((e) => ms(e.eventTime) >= t.sentAt - 1 && ms(e.eventTime) <= t.repliedAt + 1);
  const names = mine.map((e) => typeName(e.eventType));
  const times = mine.map((e) => ms(e.eventTime));
  const gaps = [(times[0] ?? t.repliedAt) - t.sentAt, ...times.slice(1).map((x, i) => x - times[i]!), t.repliedAt - (times.at(-1) ?? t.sentAt)];
  return { signature: names.join(' > '), gaps };
}

/** Turns grouped by their sequence of events; per group, the median of each gap. */
function summarise(label: string, turns: Array<{ signature: string; gaps: number[]; latency: number }>) {
  const groups = new Map<string, typeof turns>();
  for (const t of turns) groups.set(t.signature, [...(groups.get(t.signature) ?? []), t]);
  return {
    kind: label,
    latency: stats(turns.map((t) => t.latency)),
    groups: [...groups.entries()]
      .sort((a, b) => b[1].length - a[1].length)
      .map(([signature, list]) => {
        const steps = ['sent', ...signature.split(' > '), 'reply seen'];
        return {
          turns: list.length,
          latency_p50_ms: +median(list.map((t) => t.latency)).toFixed(1),
          timeline_p50_ms: steps.slice(1).map((to, i) => `${steps[i]} -> ${to}: ${median(list.map((t) => t.gaps[i]!)).toFixed(1)}`),
        };
      }),
  };
}

const s = phaseSettings();
const stack = await side();
try {
  for (let i = 0; i < s.warmupTurns; i++) await stack.turn('warmup');
  const t0 = performance.now();
  await inLanes(s.idleSessions, s.idleConcurrency, (i) => stack.turn(idleChat(i)));
  const idleSeconds = (performance.now() - t0) / 1000;
  const woken = Array.from({ length: Math.min(s.wakeSessions, s.idleSessions) }, (_, i) => idleChat(i));
  const cold: Array<Sent & { latency: number }> = [];
  const warm: Array<Sent & { latency: number }> = [];
  const pauseMs = Number(process.env.BENCH_WAKE_PAUSE_MS ?? 300);
  for (const chat of woken) {
    for (const list of [cold, warm]) {
      await new Promise((r) => setTimeout(r, pauseMs));
      const sentAt = Date.now();
      const latency = await stack.turn(chat);
      list.push({ chat, sentAt, repliedAt: Date.now(), latency });
    }
  }
  const histories = new Map<string, HistoryEvent[]>();
  for (const chat of woken) histories.set(chat, await stack.history(chat));
  const lay = (list: typeof cold) => list.map((t) => ({ ...timeline(histories.get(t.chat)!, t), latency: t.latency }));
  const idleEvents = woken.map((chat) => histories.get(chat)!.filter((e) => ms(e.eventTime) < cold.find((c) => c.chat === chat)!.sentAt - 1).length);
  console.log(
    JSON.stringify(
      {
        bench: 'wake-timeline',
        target: TARGET,
        cache: stack.cache,
        idle_sessions: s.idleSessions,
        idle_seconds: +idleSeconds.toFixed(1),
        woken: woken.length,
        evicted: s.idleSessions - woken.length >= stack.cache,
        history_events_before_waking_p50: median(idleEvents),
        cold: summarise('first turn of a woken session', lay(cold)),
        warm: summarise('the turn right after it (cached)', lay(warm)),
      },
      null,
      2,
    ),
  );
} finally {
  await stack.stop();
}
