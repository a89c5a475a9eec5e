/**
 * Worker processes. The interactive task queue runs the workflows (sessions, turns, repo
 * changes) and the chat activities; the repo queue runs repo changes' activities only (coding
 * agent, gates, promotion), so a long change never holds a chat worker's slot and costs no
 * second workflow sandbox. The background queue (objectives) comes with its feature.
 */
import { NativeConnection, Worker, type WorkflowBundleOption } from '@temporalio/worker';
import { createActivities, type ActivityDeps } from '../activities/index.js';
import { workflowsPath } from './bundle.js';

export interface StewardWorkerOptions {
  connection: NativeConnection;
  namespace: string;
  taskQueue: string;
  deps: ActivityDeps;
  /** A prebuilt bundle (production); otherwise workflows are bundled from source. */
  workflowBundle?: WorkflowBundleOption;
  /** Poll for activity tasks only (no workflow thread, no bundle). */
  activitiesOnly?: boolean;
  maxCachedWorkflows?: number;
  identity?: string;
}

export async function createStewardWorker(opts: StewardWorkerOptions): Promise<Worker> {
  return Worker.create({
    connection: opts.connection,
    namespace: opts.namespace,
    taskQueue: opts.taskQueue,
    ...(opts.activitiesOnly ? {} : opts.workflowBundle ? { workflowBundle: opts.workflowBundle } : { workflowsPath }),
    activities: createActivities(opts.deps),
    // Heartbeats reach the server at least this often, so /stop reaches a running model
    // activity within about a third of a second.
    maxHeartbeatThrottleInterval: '300 milliseconds',
    defaultHeartbeatThrottleInterval: '300 milliseconds',
    shutdownGraceTime: '10 seconds',
    ...(opts.maxCachedWorkflows !== undefined && !opts.activitiesOnly ? { maxCachedWorkflows: opts.maxCachedWorkflows } : {}),
    ...(opts.identity ? { identity: opts.identity } : {}),
  });
}
