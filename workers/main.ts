/**
 * Worker processes. The interactive task queue runs chat sessions and turns; background
 * (objectives) and repo (repository changes) queues come with their features.
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
  maxCachedWorkflows?: number;
  identity?: string;
}

export async function createStewardWorker(opts: StewardWorkerOptions): Promise<Worker> {
  return Worker.create({
    connection: opts.connection,
    namespace: opts.namespace,
    taskQueue: opts.taskQueue,
    ...(opts.workflowBundle ? { workflowBundle: opts.workflowBundle } : { workflowsPath }),
    activities: createActivities(opts.deps),
    // Heartbeats reach the server at least this often, so /stop reaches a running model
    // activity within about a third of a second.
    maxHeartbeatThrottleInterval: '300 milliseconds',
    defaultHeartbeatThrottleInterval: '300 milliseconds',
    shutdownGraceTime: '10 seconds',
    ...(opts.maxCachedWorkflows !== undefined ? { maxCachedWorkflows: opts.maxCachedWorkflows } : {}),
    ...(opts.identity ? { identity: opts.identity } : {}),
  });
}
