/**
 * Types of workers/sdk-internals.cjs, written here as the shapes Steward uses (not imported from
 * the SDK's lib/ modules: only sdk-internals.cjs reaches them, and checks them when it loads).
 */
import type { Worker as NodeThread } from 'node:worker_threads';
import type { Logger } from '@temporalio/common';

/** The SDK's workflow bundle as the worker hands it to createWorkflowCreator. */
export interface SdkWorkflowBundle {
  code: string;
  filename: string;
  sourceMap?: unknown;
}

/** The compiled worker options createWorkflowCreator reads. */
export interface SdkCompiledWorkerOptions {
  workflowThreadPoolSize: number;
  isolateExecutionTimeoutMs: number;
  reuseV8Context?: boolean;
  debugMode?: boolean;
  activities: Map<string, unknown>;
  patchActivationCallback?: unknown;
}

/** The SDK's workflow creator (its WorkflowCreator interface). */
export interface SdkWorkflowCreator {
  createWorkflow(options: never): Promise<unknown>;
  destroy(): Promise<void>;
}

export interface SdkInternal {
  module: string;
  checks: Array<{ name: string; kind: 'class' | 'function' | 'source' | 'resolvable'; arity?: number; methods?: Record<string, number>; includes?: string[] }>;
}

export declare const SDK_VERSION: string;
export declare const EXPECTED_SDK_VERSION: string;
export declare const INTERNALS: readonly SdkInternal[];
export declare function findSdkInternalsProblems(load?: (module: string) => unknown, resolve?: (module: string) => string): string[];
export declare function assertSdkInternals(problems?: string[]): void;
export declare function createThreadedWorkflowCreator(threads: NodeThread[], bundle: SdkWorkflowBundle, options: SdkCompiledWorkerOptions, logger: Logger): Promise<SdkWorkflowCreator>;
export declare function runSdkWorkflowThread(settings: { stackTraces: boolean }): void;
