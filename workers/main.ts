/**
 * Worker processes. The interactive task queue runs the workflows (sessions, turns, repo
 * changes) and the chat activities; the background queue runs objective runs (their
 * workflows, turns and activities); the repo queue runs repo changes' activities only (coding
 * agent, gates, promotion), so a long change never holds a chat worker's slot and costs no
 * second workflow sandbox.
 */
import { readFileSync } from 'node:fs';
import type { DataConverter } from '@temporalio/common';
import { Worker, type NativeConnection, type WorkerOptions, type WorkflowBundleOption } from '@temporalio/worker';
import { createActivities, type ActivityDeps } from '../activities/index.js';
import { droppingWorkflowSinks } from '../platform/telemetry.js';
import { bundleTraces, preloadModulesFor, workflowModulesFor, workflowsPath } from './bundle.js';
import { stewardWorkerClass, type WorkflowWatchdog } from './workflow-threads.js';

/** How many tasks of each kind one worker runs at once (SDK defaults when unset). */
export interface WorkerConcurrency {
  maxConcurrentWorkflowTaskExecutions?: number;
  maxConcurrentActivityTaskExecutions?: number;
}

export interface StewardWorkerOptions {
  connection: NativeConnection;
  namespace: string;
  taskQueue: string;
  deps: ActivityDeps;
  /** A prebuilt bundle (production); otherwise workflows are bundled from source. */
  workflowBundle?: WorkflowBundleOption;
  /** Poll for activity tasks only (no workflow thread, no bundle). */
  activitiesOnly?: boolean;
  /** The activities this worker registers instead of createActivities(deps) (the replay queue's: activities/replay.ts). */
  activities?: object;
  maxCachedWorkflows?: number;
  /** How the workflow threads' deadlock limit is kept: `thread` (the default, workers/workflow-threads.ts) or `per-call` (the SDK's). */
  workflowWatchdog?: WorkflowWatchdog;
  /** Stack traces of workflow promises (the `__stack_trace` query) on Steward's workflow threads; off by default (workers/workflow-threads.ts). */
  workflowStackTraces?: boolean;
  identity?: string;
  concurrency?: WorkerConcurrency;
  /** The payload codec (encryption, compression): the same as every client's. */
  dataConverter?: DataConverter;
  /** Workflow and activity interceptors and sinks (OpenTelemetry). */
  interceptors?: WorkerOptions['interceptors'];
  sinks?: WorkerOptions['sinks'];
  /** Worker Versioning: deployment name, build id and the default behaviour. */
  workerDeploymentOptions?: WorkerOptions['workerDeploymentOptions'];
  /**
   * Whether this worker's workflows trace (true when OTLP is configured): its bundle has the
   * OpenTelemetry workflow interceptors (workflows/otel-tracing.ts) or not, chosen here, when
   * the worker is built. Bundled from source, the bundle follows it; a prebuilt bundle must
   * match it (workers/bundle.ts writes both). Without tracing, runs load no OpenTelemetry and
   * make no spans.
   */
  traceNewRuns?: boolean;
}

export async function createStewardWorker(opts: StewardWorkerOptions): Promise<Worker> {
  const fromSource = !opts.workflowBundle && !opts.activitiesOnly;
  // workflow threads without a watchdog thread per sandbox call (workers/workflow-threads.ts), unless per-call is asked for
  const tracing = opts.traceNewRuns === true;
  if (opts.workflowBundle && !opts.activitiesOnly) assertBundleTracing(opts.workflowBundle, tracing);
  const WorkerClass = opts.workflowWatchdog === 'per-call' ? Worker : stewardWorkerClass({ stackTraces: opts.workflowStackTraces === true });
  return WorkerClass.create({
    connection: opts.connection,
    namespace: opts.namespace,
    taskQueue: opts.taskQueue,
    // from source: bundled with the preloaded modules a prebuilt bundle has (workers/bundle.ts)
    ...(opts.activitiesOnly ? {} : opts.workflowBundle ? { workflowBundle: opts.workflowBundle } : { workflowsPath, bundlerOptions: { preloadModules: preloadModulesFor(tracing) } }),
    activities: opts.activities ?? createActivities(opts.deps),
    // Heartbeats reach the server at least this often, so /stop reaches a running model
    // activity within about a third of a second.
    maxHeartbeatThrottleInterval: '300 milliseconds',
    defaultHeartbeatThrottleInterval: '300 milliseconds',
    shutdownGraceTime: '10 seconds',
    ...(opts.maxCachedWorkflows !== undefined && !opts.activitiesOnly ? { maxCachedWorkflows: opts.maxCachedWorkflows } : {}),
    ...(opts.identity ? { identity: opts.identity } : {}),
    ...(opts.concurrency?.maxConcurrentActivityTaskExecutions ? { maxConcurrentActivityTaskExecutions: opts.concurrency.maxConcurrentActivityTaskExecutions } : {}),
    ...(opts.concurrency?.maxConcurrentWorkflowTaskExecutions && !opts.activitiesOnly ? { maxConcurrentWorkflowTaskExecutions: opts.concurrency.maxConcurrentWorkflowTaskExecutions } : {}),
    ...(opts.dataConverter ? { dataConverter: opts.dataConverter } : {}),
    // bundled here from source: with the interceptor modules a prebuilt bundle has
    ...(opts.interceptors || fromSource
      ? { interceptors: { ...opts.interceptors, ...(fromSource ? { workflowModules: [...workflowModulesFor(tracing), ...(opts.interceptors?.workflowModules ?? [])] } : {}) } }
      : {}),
    // the bundle's workflow interceptors call the `exporter` sink: always registered (dropping unless given)
    sinks: { ...droppingWorkflowSinks(), ...opts.sinks },
    ...(opts.workerDeploymentOptions ? { workerDeploymentOptions: opts.workerDeploymentOptions } : {}),
  });
}

/** A prebuilt bundle has the tracing interceptors exactly when the worker traces (else its runs would trace, or not, against the settings). */
function assertBundleTracing(bundle: WorkflowBundleOption, tracing: boolean): void {
  const code = 'code' in bundle ? bundle.code : readFileSync(bundle.codePath, 'utf8');
  if (bundleTraces(code) === tracing) return;
  const where = 'codePath' in bundle ? ` (${bundle.codePath})` : '';
  throw new Error(
    tracing
      ? `the workflow bundle${where} has no tracing interceptors but OTLP is configured: use the bundle built for tracing (workers/bundle.ts writes <name>.traced.js beside <name>.js)`
      : `the workflow bundle${where} is the one built for tracing but OTLP is not configured: use the bundle without tracing (workers/bundle.ts writes <name>.js)`,
  );
}
