/**
 * The heartbeat's probes of the parts outside the database: Temporal (its health service), each
 * task queue (Temporal's own list of the workers polling it: a queue nobody polled for
 * `staleMs` has no worker), and the chat platforms' connections (the adapters' own state). None
 * sends a message or calls a model.
 */
import type { Client, Connection } from '@temporalio/client';
import protoModule from '@temporalio/proto';

const { temporal } = protoModule;
import type { Db } from '../domain/db.js';
import type { HeartbeatProbe } from '../domain/heartbeat.js';
import { countSessions } from '../domain/store/sessions.js';

export function temporalProbe(connection: Connection, address: string): HeartbeatProbe {
  return {
    part: 'temporal',
    async check() {
      await connection.healthService.check({});
      return { ok: true, detail: `Temporal at ${address} answers` };
    },
  };
}

export function databaseProbe(db: Db, what: string): HeartbeatProbe {
  return {
    part: 'database',
    async check() {
      await countSessions(db);
      return { ok: true, detail: `${what} answers` };
    },
  };
}

/** A task queue has a worker when one polled it (for activities, which every Steward worker runs) within `staleMs`. */
export function queueProbe(client: Client, namespace: string, queue: { name: string; role: string }, staleMs = 120_000): HeartbeatProbe {
  return {
    part: `queue ${queue.role}`,
    async check() {
      const r = await client.workflowService.describeTaskQueue({
        namespace,
        taskQueue: { name: queue.name },
        taskQueueType: temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
      });
      const seen = (r.pollers ?? []).map((p) => Number(p.lastAccessTime?.seconds ?? 0) * 1000).filter((ms) => ms > 0);
      const last = seen.length ? Math.max(...seen) : 0;
      const fresh = seen.filter((ms) => Date.now() - ms <= staleMs).length;
      return {
        ok: fresh > 0,
        detail: fresh > 0 ? `${fresh} worker${fresh === 1 ? '' : 's'} polling ${queue.name}` : `no worker has polled ${queue.name}${last ? ` since ${new Date(last).toISOString()}` : ''}`,
        ...(fresh > 0 ? { lastOkAt: new Date(last) } : last ? { lastOkAt: new Date(last) } : {}),
      };
    },
  };
}

/** A chat platform's connection, by its adapter's own state (polling, gateway ready). */
export function channelProbe(platform: string, account: string, connected: () => boolean): HeartbeatProbe {
  return {
    part: `${platform} ${account}`,
    async check() {
      const ok = connected();
      return { ok, detail: ok ? `${platform} connected` : `${platform} is not connected (polling stopped or the gateway is down)` };
    },
  };
}
