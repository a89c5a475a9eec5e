/**
 * The workflow bundle. Development and tests bundle from source (`workflowsPath`);
 * `node --import tsx workers/bundle.ts <out.js>` writes a prebuilt bundle for production
 * workers (`STEWARD_WORKFLOW_BUNDLE`).
 */
import { writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { bundleWorkflowCode, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { failureConverterPath } from '../common/codec.js';

export const workflowsPath = fileURLToPath(new URL('../workflows/index.ts', import.meta.url));

/**
 * Workflow interceptor modules in every bundle: OpenTelemetry tracing. A worker running the
 * bundle must register their `exporter` sink (createStewardWorker does, dropping spans when
 * OTLP is not configured).
 */
export const workflowInterceptorModules = [fileURLToPath(new URL('../workflows/otel-interceptors.ts', import.meta.url))];

/**
 * Modules the workflow sandbox loads once, before any run, and shares across the runs it keeps
 * cached (the SDK's `preloadModules`; every other module is instantiated again for each run).
 * The OpenTelemetry interceptor module holds no run's state: preloaded, its one span-context
 * storage serves every traced run; loaded per run, each cached traced run's storage would add
 * a property to every promise of every run (workflows/otel-interceptors.ts).
 */
export const preloadModules = [...workflowInterceptorModules];

/** Webpack's progress and stats stay out of the log; its warnings and errors do not. */
const bundlerLogger = {
  trace: () => undefined,
  debug: () => undefined,
  info: () => undefined,
  log: () => undefined,
  warn: (message: string) => console.warn(message),
  error: (message: string) => console.error(message),
};

/** The options every Steward bundle is built with (tests build theirs with the same, quieter). */
export const bundleOptions = { workflowsPath, workflowInterceptorModules, preloadModules, failureConverterPath } as const;

export async function buildWorkflowBundle(): Promise<WorkflowBundleWithSourceMap> {
  return bundleWorkflowCode({ ...bundleOptions, logger: bundlerLogger });
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const out = process.argv[2] ?? 'generated/workflow-bundle.js';
  const bundle = await buildWorkflowBundle();
  await writeFile(out, bundle.code);
  console.log(`wrote ${out} (${Math.round(bundle.code.length / 1024)} KiB)`);
}
