/**
 * The heartbeat: the state of each part of the platform (Temporal, the database, each task
 * queue's workers, each chat platform connection, the model provider, the MCP servers, the IMAP
 * inboxes) with the time of its last success, checked every `intervalMs` by the API process,
 * never with a model call (the model provider's state is read from the model calls' receipts).
 *
 * A part that stays degraded longer than `thresholdMs` is told to the admin channel once, and
 * its recovery once more; both transitions are receipted (`heartbeat.degraded`,
 * `heartbeat.recovered`). The states live in the database (PartHealth), so a restart or a second
 * API process neither forgets a degraded part nor tells the admins twice: the row that records
 * the notice is claimed with a conditional update.
 */
import type { Db } from './db.js';
import { notifyAdmins } from './governance.js';
import type { Senders } from './outbox.js';
import { writeReceipt } from './receipts.js';
import { listMcpServers } from './store/mcp.js';

export interface PartCheck {
  ok: boolean;
  /** What was seen, for people (no secret in it). */
  detail: string;
  /** The part's own record of its last success, when it keeps one (an inbox, the model's receipts). */
  lastOkAt?: Date;
}

/** One part and how to check it; `check` should answer within a few seconds (it is raced against a timeout). */
export interface HeartbeatProbe {
  part: string;
  check(): Promise<PartCheck>;
}

/** A source of probes whose set changes (the inboxes, the MCP servers): asked at each round. */
export type ProbeSource = () => Promise<HeartbeatProbe[]>;

export interface PartState {
  part: string;
  state: 'ok' | 'degraded';
  detail: string;
  since: string;
  lastOkAt: string | null;
  checkedAt: string;
  /** The admins were told of this degradation. */
  notified: boolean;
}

export interface HeartbeatOptions {
  db: Db;
  senders?: Senders;
  probes: Array<HeartbeatProbe | ProbeSource>;
  /** How long a part stays degraded before the admins are told (default 2 min). */
  thresholdMs?: number;
  /** A probe that does not answer in this time is degraded (default 5 s). */
  probeTimeoutMs?: number;
  now?: () => Date;
  onTransition?: (t: { part: string; to: 'degraded' | 'recovered' }) => void;
}

async function withTimeout(p: HeartbeatProbe, ms: number): Promise<PartCheck> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p.check(),
      new Promise<PartCheck>((resolve) => {
        timer = setTimeout(() => resolve({ ok: false, detail: `no answer within ${ms} ms` }), ms);
      }),
    ]);
  } catch (err) {
    return { ok: false, detail: (err as Error).message.split('\n')[0]!.slice(0, 300) };
  } finally {
    clearTimeout(timer);
  }
}

const toState = (r: { part: string; state: string; detail: string; since: Date; lastOkAt: Date | null; checkedAt: Date; notifiedAt: Date | null }): PartState => ({
  part: r.part,
  state: r.state === 'ok' ? 'ok' : 'degraded',
  detail: r.detail,
  since: r.since.toISOString(),
  lastOkAt: r.lastOkAt?.toISOString() ?? null,
  checkedAt: r.checkedAt.toISOString(),
  notified: r.notifiedAt !== null,
});

export function createHeartbeat(opts: HeartbeatOptions) {
  const threshold = opts.thresholdMs ?? 120_000;
  const timeout = opts.probeTimeoutMs ?? 5000;
  const now = opts.now ?? (() => new Date());
  const db = opts.db;

  const probes = async (): Promise<HeartbeatProbe[]> => {
    const out: HeartbeatProbe[] = [];
    for (const p of opts.probes) {
      if (typeof p === 'function') out.push(...(await p().catch(() => [])));
      else out.push(p);
    }
    return out;
  };

  /** Record one check; tell the admins when a degradation passes the threshold, and when a told one recovers. */
  async function record(part: string, c: PartCheck): Promise<void> {
    const at = now();
    const prev = await db.partHealth.findUnique({ where: { part } });
    const state = c.ok ? 'ok' : 'degraded';
    const lastOkAt = c.ok ? (c.lastOkAt ?? at) : (c.lastOkAt ?? prev?.lastOkAt ?? null);
    if (!prev) {
      await db.partHealth.create({ data: { part, state, detail: c.detail, since: at, lastOkAt, checkedAt: at } }).catch(() => undefined);
      return;
    }
    const changed = prev.state !== state;
    const since = changed ? at : prev.since;
    if (changed && state === 'ok' && prev.notifiedAt) {
      // a degradation the admins were told of has ended: tell them once (the claim clears notifiedAt)
      const claimed = await db.partHealth.updateMany({ where: { part, state: 'degraded', notifiedAt: prev.notifiedAt }, data: { state, detail: c.detail, since, lastOkAt, checkedAt: at, notifiedAt: null } });
      if (claimed.count === 1) await transition(part, 'recovered', c.detail, prev.since, at);
      return;
    }
    await db.partHealth.update({ where: { part }, data: { state, detail: c.detail, since, lastOkAt, checkedAt: at, ...(changed ? { notifiedAt: null } : {}) } });
    if (state === 'degraded' && !prev.notifiedAt && at.getTime() - since.getTime() >= threshold) {
      const claimed = await db.partHealth.updateMany({ where: { part, state: 'degraded', notifiedAt: null, since }, data: { notifiedAt: at } });
      if (claimed.count === 1) await transition(part, 'degraded', c.detail, since, at, lastOkAt);
    }
  }

  async function transition(part: string, to: 'degraded' | 'recovered', detail: string, since: Date, at: Date, lastOkAt?: Date | null): Promise<void> {
    const key = `heartbeat:${part}:${to}:${since.toISOString()}`;
    const minutes = Math.max(1, Math.round((at.getTime() - since.getTime()) / 60_000));
    await writeReceipt(db, { key, kind: to === 'degraded' ? 'heartbeat.degraded' : 'heartbeat.recovered', actor: 'heartbeat', data: { part, detail, since: since.toISOString(), ...(lastOkAt ? { lastOkAt: lastOkAt.toISOString() } : {}) } });
    const text =
      to === 'degraded'
        ? `**Degraded: ${part}** for ${minutes} min: ${detail}${lastOkAt ? ` (last success ${lastOkAt.toISOString()})` : ' (no success seen yet)'}. You will be told when it recovers.`
        : `**Recovered: ${part}** after ${minutes} min degraded: ${detail}.`;
    await notifyAdmins(db, opts.senders ?? {}, { key, text }).catch(() => undefined);
    opts.onTransition?.({ part, to });
  }

  let inFlight: Promise<PartState[]> | undefined;
  let lastRound = 0;
  const round = async (): Promise<PartState[]> => {
    const list = await probes();
    const results = await Promise.all(list.map(async (p) => ({ part: p.part, check: await withTimeout(p, timeout) })));
    for (const r of results) await record(r.part, r.check);
    lastRound = Date.now();
    const rows = await db.partHealth.findMany({ where: { part: { in: list.map((p) => p.part) } }, orderBy: { part: 'asc' } });
    return rows.map(toState);
  };
  return {
    /** Check every part once (in parallel), record the states, tell the admins of transitions; the states. One round at a time. */
    round(): Promise<PartState[]> {
      inFlight ??= round().finally(() => {
        inFlight = undefined;
      });
      return inFlight;
    },
    /** The states, checked again when the last round is older than `maxAgeMs` (the API, /status). */
    async current(maxAgeMs = 5000): Promise<PartState[]> {
      if (inFlight || Date.now() - lastRound > maxAgeMs) return this.round();
      return this.states((await probes()).map((p) => p.part));
    },
    /** The recorded states (of `parts`, or every part ever checked). */
    async states(parts?: string[]): Promise<PartState[]> {
      const rows = await db.partHealth.findMany({ where: parts ? { part: { in: parts } } : {}, orderBy: { part: 'asc' } });
      return rows.map(toState);
    },
    /** Check every `intervalMs` until the returned stop is called. */
    start(intervalMs: number, log?: { warn: (o: object, m: string) => void }): () => Promise<void> {
      let stopped = false;
      let current: Promise<unknown> = Promise.resolve();
      const tick = () => {
        if (stopped) return;
        current = this.round().catch((err: unknown) => log?.warn({ err }, 'a heartbeat round failed'));
      };
      const timer = setInterval(tick, intervalMs);
      timer.unref();
      tick();
      return async () => {
        stopped = true;
        clearInterval(timer);
        await current;
      };
    },
  };
}

export type Heartbeat = ReturnType<typeof createHeartbeat>;

/** The model provider's state from its calls' receipts (no model call): degraded when the latest calls failed. */
export function modelProbe(db: Db, opts: { lookback?: number } = {}): HeartbeatProbe {
  return {
    part: 'model provider',
    async check() {
      const rows = await db.receipt.findMany({ where: { kind: 'model.call' }, orderBy: { id: 'desc' }, take: opts.lookback ?? 5, select: { data: true, createdAt: true } });
      const calls = rows.map((r) => ({ at: r.createdAt, ...(JSON.parse(r.data) as { error?: string; model?: string }) }));
      const lastOk = calls.find((c) => !c.error);
      if (calls.length === 0) return { ok: true, detail: 'no model call yet' };
      if (!calls[0]!.error) return { ok: true, detail: `the last call (${calls[0]!.model ?? 'model'}) succeeded`, lastOkAt: calls[0]!.at };
      const failed = calls.findIndex((c) => !c.error);
      const n = failed === -1 ? calls.length : failed;
      // one failed call is a blip; the last two failing is a provider in trouble
      return { ok: n < 2, detail: `the last ${n} call${n === 1 ? '' : 's'} failed: ${String(calls[0]!.error).slice(0, 200)}`, ...(lastOk ? { lastOkAt: lastOk.at } : {}) };
    },
  };
}

/** The MCP servers' states as the workers last found them (their rows); a disabled server is not a part. */
export function mcpProbes(db: Db): ProbeSource {
  return async () =>
    (await listMcpServers(db))
      .filter((s) => s.spec.enabled !== false)
      .map((s) => ({
        part: `mcp ${s.spec.name}`,
        check: async () => ({
          ok: s.state !== 'down',
          detail: s.state === 'down' ? `down: ${s.lastError ?? 'no answer'}` : s.state === 'ready' ? `ready, ${s.toolCount} tool${s.toolCount === 1 ? '' : 's'}` : `${s.state} (connected on first use)`,
          ...(s.state === 'ready' && s.checkedAt ? { lastOkAt: s.checkedAt } : {}),
        }),
      }));
}

/** The IMAP inboxes' states from their rows (the inbox poller records each success and failure). */
export function inboxProbes(db: Db): ProbeSource {
  return async () => {
    const rows = await db.workspaceInbox.findMany({ select: { workspace: true, lastError: true, lastSuccessAt: true, host: true } });
    return rows.map((r) => ({
      part: `inbox ${r.workspace}`,
      check: async () => ({
        ok: !r.lastError,
        detail: r.lastError ? `IMAP at ${r.host}: ${r.lastError}` : r.lastSuccessAt ? `IMAP at ${r.host} polled` : `IMAP at ${r.host}: not polled yet`,
        ...(r.lastSuccessAt ? { lastOkAt: r.lastSuccessAt } : {}),
      }),
    }));
  };
}
