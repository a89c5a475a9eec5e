/**
 * Worker Versioning (Temporal Worker Deployments). A worker process belongs to one deployment
 * version: the deployment name (STEWARD_DEPLOYMENT_NAME) and the build id of its workflow code
 * (STEWARD_BUILD_ID). Every workflow type is PINNED (the worker's default behaviour; a static
 * per-type annotation would break unversioned workers): turns, repo changes and objective runs
 * finish on the build they started on. A session is pinned during a run and moves to the
 * current build at its next continue-as-new, which it does between turns as soon as it sees
 * that the current version changed (workflows/chat/session.ts). Where the server has no Worker Deployments, or versioning is off,
 * workers are unversioned and workflow changes go through `patched()`.
 *
 * Here: the configuration into the SDK's `workerDeploymentOptions`, the server capability
 * check, and the operator helpers (make a version current, wake idle sessions on an old
 * version, drainage).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { isGrpcServiceError, type Client, type Connection, type ConnectionLike } from '@temporalio/client';
import type { WorkerDeploymentVersion } from '@temporalio/common';
import type { WorkerDeploymentOptions } from '@temporalio/worker';
import type { StewardConfig } from '../config/index.js';

/** STEWARD_WORKER_VERSIONING, STEWARD_DEPLOYMENT_NAME, STEWARD_BUILD_ID (validated in config/index.ts). */
export type VersioningConfig = StewardConfig['workers']['versioning'];

/** The decision of one worker process. */
export type VersioningDecision =
  | { enabled: true; version: WorkerDeploymentVersion; options: WorkerDeploymentOptions; reason: string }
  | { enabled: false; reason: string };

/** The versioning behaviour of every workflow type that does not declare its own: pinned. */
export const DEFAULT_VERSIONING_BEHAVIOR = 'PINNED' as const;

/** The worker option for a deployment version: versioned, workflows pinned unless they say otherwise. */
export function workerDeploymentOptionsFor(version: WorkerDeploymentVersion): WorkerDeploymentOptions {
  return { useWorkerVersioning: true, version, defaultVersioningBehavior: DEFAULT_VERSIONING_BEHAVIOR };
}

/** `steward:2026-11-23.1` (the form of the TemporalWorkerDeploymentVersion search attribute and the CLI). */
export function versionString(v: WorkerDeploymentVersion): string {
  return `${v.deploymentName}:${v.buildId}`;
}

/** A client connection (or a client's `connection`): only its workflow service is used. */
export type WorkflowServiceConnection = Pick<Connection, 'workflowService'>;

const GRPC_NOT_FOUND = 5;
const GRPC_PERMISSION_DENIED = 7;
const GRPC_FAILED_PRECONDITION = 9;
const GRPC_UNIMPLEMENTED = 12;

/**
 * Whether the server (and namespace) serves the Worker Deployment API. Answers false for a
 * server that does not implement it or has it turned off; throws when the server cannot be
 * asked at all (unreachable), so a network fault never silently turns versioning off.
 */
export async function serverSupportsWorkerDeployments(connection: WorkflowServiceConnection, namespace: string): Promise<{ supported: boolean; reason: string }> {
  try {
    await connection.workflowService.listWorkerDeployments({ namespace, pageSize: 1 });
    return { supported: true, reason: 'the server serves the Worker Deployment API' };
  } catch (err) {
    if (isGrpcServiceError(err) && [GRPC_UNIMPLEMENTED, GRPC_FAILED_PRECONDITION, GRPC_PERMISSION_DENIED].includes(err.code)) {
      return { supported: false, reason: `the server refused the Worker Deployment API (${err.details || err.message})` };
    }
    throw err;
  }
}

/** Decide, at start, whether this process's workers are versioned, and with which options. */
export async function resolveWorkerVersioning(cfg: VersioningConfig, connection: WorkflowServiceConnection, namespace: string): Promise<VersioningDecision> {
  if (cfg.mode === 'off') return { enabled: false, reason: 'STEWARD_WORKER_VERSIONING=off' };
  if (!cfg.buildId) {
    if (cfg.mode === 'on') throw new Error('STEWARD_WORKER_VERSIONING=on needs STEWARD_BUILD_ID (the build id of this image of the workflow code)');
    return { enabled: false, reason: 'no STEWARD_BUILD_ID is set' };
  }
  const support = await serverSupportsWorkerDeployments(connection, namespace);
  if (!support.supported) {
    if (cfg.mode === 'on') throw new Error(`STEWARD_WORKER_VERSIONING=on, but ${support.reason}; set STEWARD_WORKER_VERSIONING=auto or off to run unversioned`);
    return { enabled: false, reason: support.reason };
  }
  const version = { deploymentName: cfg.deploymentName, buildId: cfg.buildId };
  return { enabled: true, version, options: workerDeploymentOptionsFor(version), reason: `build ${versionString(version)}` };
}

export interface DeploymentState {
  /** The current version's build id; undefined while new workflows go to unversioned workers. */
  currentBuildId?: string;
  rampingBuildId?: string;
  /** The versions that have registered (their workers polled), with their status. */
  versions: Array<{ buildId: string; status: string; drainage?: string }>;
  conflictToken: Uint8Array;
}

const VERSION_STATUS = ['unspecified', 'inactive', 'current', 'ramping', 'draining', 'drained', 'created'];
const DRAINAGE_STATUS = ['unspecified', 'draining', 'drained'];

/** The deployment's routing and versions; undefined when no worker of it has polled yet. */
export async function describeDeployment(client: Client, deploymentName: string): Promise<DeploymentState | undefined> {
  try {
    const res = await client.workflowService.describeWorkerDeployment({ namespace: client.options.namespace, deploymentName });
    const info = res.workerDeploymentInfo;
    const routing = info?.routingConfig;
    return {
      ...(routing?.currentDeploymentVersion?.buildId ? { currentBuildId: routing.currentDeploymentVersion.buildId } : {}),
      ...(routing?.rampingDeploymentVersion?.buildId ? { rampingBuildId: routing.rampingDeploymentVersion.buildId } : {}),
      versions: (info?.versionSummaries ?? []).map((v) => ({
        buildId: v.deploymentVersion?.buildId ?? '',
        status: VERSION_STATUS[v.status ?? 0] ?? String(v.status),
        ...(v.drainageInfo?.status ? { drainage: DRAINAGE_STATUS[v.drainageInfo.status] ?? String(v.drainageInfo.status) } : {}),
      })),
      conflictToken: res.conflictToken ?? new Uint8Array(),
    };
  } catch (err) {
    if (isGrpcServiceError(err) && err.code === GRPC_NOT_FOUND) return undefined;
    throw err;
  }
}

/** Wait (bounded) until the version's workers have registered with the deployment. */
export async function waitForVersionRegistered(client: Client, version: WorkerDeploymentVersion, timeoutMs = 30_000): Promise<DeploymentState> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const state = await describeDeployment(client, version.deploymentName);
    if (state?.versions.some((v) => v.buildId === version.buildId)) return state;
    if (Date.now() > deadline) {
      throw new Error(`build ${versionString(version)} did not register within ${Math.round(timeoutMs / 1000)} s: are its workers running and polling?`);
    }
    await sleep(200);
  }
}

/**
 * Make `version` the deployment's current version: new sessions, turns and runs start on it,
 * pinned ones stay where they are. `onlyIfUnset`: only when the deployment has no current
 * version yet (the first versioned deploy), never taking over from another build.
 */
export async function setCurrentVersion(
  client: Client,
  version: WorkerDeploymentVersion,
  opts: { onlyIfUnset?: boolean; identity?: string; timeoutMs?: number } = {},
): Promise<{ changed: boolean; previousBuildId?: string; currentBuildId: string }> {
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const state = await waitForVersionRegistered(client, version, Math.max(0, deadline - Date.now()));
    if (state.currentBuildId === version.buildId) return { changed: false, currentBuildId: version.buildId };
    if (opts.onlyIfUnset && state.currentBuildId) return { changed: false, currentBuildId: state.currentBuildId };
    try {
      await client.workflowService.setWorkerDeploymentCurrentVersion({
        namespace: client.options.namespace,
        deploymentName: version.deploymentName,
        buildId: version.buildId,
        conflictToken: state.conflictToken,
        identity: opts.identity ?? 'steward',
      });
      return { changed: true, ...(state.currentBuildId ? { previousBuildId: state.currentBuildId } : {}), currentBuildId: version.buildId };
    } catch (err) {
      // The version registers one task queue at a time (a worker per queue): until all of the
      // current version's queues have pollers on it, the server refuses the switch. Wait for
      // the rest, bounded; any other refusal, or the deadline, is the caller's.
      const missingQueues = isGrpcServiceError(err) && err.code === GRPC_FAILED_PRECONDITION && /missing active task queues/i.test(err.details ?? err.message);
      if (!missingQueues || Date.now() > deadline) throw err;
      await sleep(250);
    }
  }
}

/** The signal that wakes an idle session (no-op handler); a pinned one then sees the new current version and continues as new onto it. */
export const SESSION_UPGRADE_SIGNAL = 'upgradeCheck';

/** Running workflows pinned to a version (the visibility query of the TemporalWorkerDeploymentVersion search attribute). */
export function pinnedQuery(version: WorkerDeploymentVersion, workflowType?: string): string {
  return `TemporalWorkerDeploymentVersion = '${versionString(version)}' AND ExecutionStatus = 'Running'${workflowType ? ` AND WorkflowType = '${workflowType}'` : ''}`;
}

/**
 * Wake the idle sessions still pinned to an old version, so each continues as new onto the
 * current one (a session only notices the change when it wakes). The old version's workers
 * must still be running. Bounded by `limit`. Returns the session ids signalled.
 */
export async function wakeSessionsOn(client: Client, version: WorkerDeploymentVersion, limit = 10_000): Promise<string[]> {
  const woken: string[] = [];
  for await (const wf of client.workflow.list({ query: pinnedQuery(version, 'sessionWorkflow') })) {
    if (woken.length >= limit) break;
    try {
      await client.workflow.getHandle(wf.workflowId, wf.runId).signal(SESSION_UPGRADE_SIGNAL);
      woken.push(wf.workflowId);
    } catch (err) {
      // it finished or continued as new in the meantime: nothing to wake
      if (!(isGrpcServiceError(err) && err.code === GRPC_NOT_FOUND) && !/not found|already completed/i.test(String(err))) throw err;
    }
  }
  return woken;
}

/** How many running workflows are still pinned to a version (0: its workers may stop). */
export async function countPinned(client: Client, version: WorkerDeploymentVersion): Promise<number> {
  const res = await client.workflow.count(pinnedQuery(version));
  return res.count;
}

/** Wait (bounded) until no running workflow is pinned to `version`; returns the count left (0 when drained). */
export async function waitForDrained(client: Client, version: WorkerDeploymentVersion, timeoutMs: number): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const left = await countPinned(client, version);
    if (left === 0 || Date.now() > deadline) return left;
    await sleep(250);
  }
}

/** What a starting process does about versioning: the worker option, and the step after its workers run. */
export interface WorkerVersioning {
  decision: VersioningDecision;
  /** For every worker of the process (absent: unversioned workers). */
  options?: WorkerDeploymentOptions;
  /**
   * Once the workers poll: make this build current when the deployment has no current version
   * yet (the first versioned deploy); otherwise log how to make it current. Never throws.
   */
  afterStart(): Promise<void>;
}

/** The CLI command that makes a build current (printed for operators). */
export function setCurrentCommand(v: WorkerDeploymentVersion, namespace: string): string {
  return `temporal worker deployment set-current-version --namespace ${namespace} --deployment-name ${v.deploymentName} --build-id ${v.buildId}`;
}

/**
 * Versioning for a starting process. `allInOne` (`steward start`): its restart replaces its
 * only build, so nothing could serve an old build's pinned workflows: `auto` means unversioned
 * there (workflow changes go through `patched()`); `on` still turns it on.
 */
export async function workerVersioningFor(
  cfg: VersioningConfig,
  connection: ConnectionLike,
  namespace: string,
  log: { info(obj: object, msg: string): void; warn(obj: object, msg: string): void; error(obj: object, msg: string): void },
  opts: { allInOne?: boolean } = {},
): Promise<WorkerVersioning> {
  const effective: VersioningConfig = opts.allInOne && cfg.mode === 'auto' ? { ...cfg, mode: 'off' } : cfg;
  const decision = await resolveWorkerVersioning(effective, connection, namespace);
  if (!decision.enabled) {
    log.info({ versioning: 'off', reason: opts.allInOne && cfg.mode === 'auto' ? 'the all-in-one start runs unversioned (STEWARD_WORKER_VERSIONING=on to change that)' : decision.reason }, 'workers are unversioned: workflow changes must be replay-safe (patched())');
    return { decision, afterStart: async () => undefined };
  }
  const version = decision.version;
  return {
    decision,
    options: decision.options,
    async afterStart() {
      try {
        const { Client } = await import('@temporalio/client');
        const client = new Client({ connection, namespace });
        const r = await setCurrentVersion(client, version, { onlyIfUnset: true, identity: `steward ${versionString(version)}`, timeoutMs: 60_000 });
        if (r.changed) log.info({ version: versionString(version) }, 'this build is now the current version (the deployment had none)');
        else if (r.currentBuildId === version.buildId) log.info({ version: versionString(version) }, 'this build is the current version');
        else {
          log.warn(
            { version: versionString(version), current: `${version.deploymentName}:${r.currentBuildId}`, command: setCurrentCommand(version, namespace) },
            'this build registered but is not current: new work still goes to the current build; make this one current when ready',
          );
        }
      } catch (err) {
        log.error({ err, version: versionString(version) }, 'could not check or set the current version of the worker deployment');
      }
    },
  };
}
