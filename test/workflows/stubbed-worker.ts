/**
 * What the stubbed-activity workflow tests share (stubbed.test.ts on the time-skipping server,
 * session-stubbed.test.ts on the dev server): Steward's real workflow bundle on a worker of a
 * fresh task queue whose activities are stubs, each call recorded in order, and the scripted
 * answers the stubs give.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Context } from '@temporalio/activity';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker, type WorkerOptions } from '@temporalio/worker';
import type { createActivities, ModelStepResult } from '../../activities/index.js';
import { droppingWorkflowSinks } from '../../platform/telemetry.js';
import { OTEL_PATCH } from '../../workflows/otel-interceptors.js';
import { testBundle } from '../helpers/steward.js';

export type Activities = ReturnType<typeof createActivities>;
/** The activities a test scripts (the others are not registered: a call to one fails the test's workflow). */
export type Stubs = { [K in keyof Activities]?: (input: Parameters<Activities[K]>[0]) => Promise<Awaited<ReturnType<Activities[K]>>> };
/** One activity call as a stub saw it: its input, the workflow run it came from, and whether it ran as a local activity. */
export type Call = { name: string; input: Record<string, unknown>; runId: string; local: boolean };

export const USAGE = { input: 10, output: 5, total: 15 };
/** A model step that ends the turn with the reply stored under `hash`. */
export const reply = (hash: string): ModelStepResult => ({ kind: 'output', outputHash: hash, finishReason: 'stop', usage: USAGE, chars: 5 });
export const delivered = { sent: true, messageSeq: 1 };

/** Poll until `check` holds, within `ms` (a bounded loop). */
export async function until(what: string, check: () => boolean | Promise<boolean>, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  assert.fail(`timed out waiting for ${what}`);
}

/**
 * Run `body` with a worker on a fresh queue (`<queuePrefix>-<uuid>`) whose activities are
 * `stubs`, each call recorded in `calls`, in order. Workflows run untraced (no OpenTelemetry
 * patch), their sinks dropped; `workerOptions` adds to the worker's options.
 */
export async function withStubbedWorker(
  env: TestWorkflowEnvironment,
  stubs: Stubs,
  opts: { queuePrefix: string; workerOptions?: Partial<WorkerOptions> },
  body: (ctx: { taskQueue: string; calls: Call[] }) => Promise<void>,
): Promise<void> {
  const taskQueue = `${opts.queuePrefix}-${randomUUID()}`;
  const calls: Call[] = [];
  const activities = Object.fromEntries(
    Object.entries(stubs).map(([name, fn]) => [
      name,
      async (input: Record<string, unknown>) => {
        const info = Context.current().info;
        calls.push({ name, input, runId: info.workflowExecution?.runId ?? '', local: info.isLocal });
        return (fn as (i: unknown) => Promise<unknown>)(input);
      },
    ]),
  );
  const worker = await Worker.create({
    connection: env.nativeConnection,
    taskQueue,
    workflowBundle: await testBundle(),
    activities,
    sinks: droppingWorkflowSinks(),
    patchActivationCallback: ({ patchId }) => patchId !== OTEL_PATCH,
    ...opts.workerOptions,
  });
  await worker.runUntil(body({ taskQueue, calls }));
}
