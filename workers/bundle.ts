/**
 * The workflow bundle. Development and tests bundle from source (`workflowsPath`);
 * `node --import tsx workers/bundle.ts <out.js>` writes the prebuilt bundles for production
 * workers (`STEWARD_WORKFLOW_BUNDLE`): `<out.js>` for workers without tracing and
 * `<out>.traced.js` for workers with it (tracingBundlePath).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundleWorkflowCode, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { failureConverterPath } from '../common/codec.js';

export const workflowsPath = fileURLToPath(new URL('../workflows/index.ts', import.meta.url));

/** Workflow interceptor modules in every bundle: the retired tracing patch (workflows/otel-interceptors.ts). */
export const workflowInterceptorModules = [fileURLToPath(new URL('../workflows/otel-interceptors.ts', import.meta.url))];

/**
 * Workflow interceptor modules in the bundle of a worker that traces: OpenTelemetry spans
 * (workflows/otel-tracing.ts). A worker running that bundle must register their `exporter` sink
 * (createStewardWorker registers one, dropping spans unless given an exporting one).
 */
export const tracingInterceptorModules = [fileURLToPath(new URL('../workflows/otel-tracing.ts', import.meta.url))];

/** The interceptor modules of a worker's bundle: tracing is chosen here, when the worker is built. */
export function workflowModulesFor(tracing: boolean): string[] {
  return tracing ? [...workflowInterceptorModules, ...tracingInterceptorModules] : [...workflowInterceptorModules];
}

/**
 * Modules the workflow sandbox loads once, before any run, and shares across the runs it keeps
 * cached (the SDK's `preloadModules`; a module not preloaded is instantiated again for each run,
 * its module scope run again and kept while the run is cached).
 * - The OpenTelemetry interceptor module holds no run's state: preloaded, its one span-context
 *   storage serves every traced run; loaded per run, each cached traced run's storage would add
 *   a property to every promise of every run (workflows/otel-interceptors.ts).
 * - The workflows themselves (workflows/index.ts and everything it imports): their module scope
 *   only defines signals, queries, updates, search attribute keys, activity proxies and
 *   constants, all reached by every run alike (an activity proxy finds its run when called), so
 *   a new or re-cached run no longer sets up every workflow module again. The SDK freezes what
 *   preloaded modules export; test/unit/workflow-bundle.test.ts keeps module scope free of state.
 */
export const preloadModules = [...workflowInterceptorModules, workflowsPath];

/** The preloaded modules of a worker's bundle (with the tracing module when it traces). */
export function preloadModulesFor(tracing: boolean): string[] {
  return [...workflowModulesFor(tracing), workflowsPath];
}

type BundlerLogger = NonNullable<Parameters<typeof bundleWorkflowCode>[0]['logger']>;

/** Webpack's progress and stats stay out of the log; its warnings and errors do not. */
const bundlerLogger: BundlerLogger = {
  trace: () => undefined,
  debug: () => undefined,
  info: () => undefined,
  log: () => undefined,
  warn: (message: string) => console.warn(message),
  error: (message: string) => console.error(message),
};

/** The options every Steward bundle is built with (tests build theirs with the same, quieter); tracing adds its module. */
export const bundleOptions = { workflowsPath, workflowInterceptorModules, preloadModules, failureConverterPath } as const;

export function bundleOptionsFor(tracing: boolean) {
  return { ...bundleOptions, workflowInterceptorModules: workflowModulesFor(tracing), preloadModules: preloadModulesFor(tracing) };
}

/**
 * Steward's bundle, as production and the tests run it (webpack's log through `logger`, else
 * warnings and errors only), for a worker with tracing (`tracing: true`) or without (the default).
 */
export async function buildWorkflowBundle(logger: BundlerLogger = bundlerLogger, opts: { tracing?: boolean } = {}): Promise<WorkflowBundleWithSourceMap> {
  const bundle = await bundleWorkflowCode({ ...bundleOptionsFor(opts.tracing === true), logger });
  return { ...bundle, code: latin1Code(bundle.code) };
}

/** Where the tracing bundle of a prebuilt bundle is: `<name>.traced.js` beside `<name>.js`. */
export function tracingBundlePath(file: string): string {
  return file.replace(/(\.js)?$/, '.traced.js');
}

/** Whether a bundle's code is one with the tracing interceptors (webpack names each module by its quoted path; comments may name the file, unquoted). */
export function bundleTraces(code: string): boolean {
  return code.includes('"./workflows/otel-tracing.ts"');
}

/**
 * The code with every character past Latin-1 written as a `\u` escape, which means the same in
 * a string, template or regular expression literal and in a comment. V8 keeps a string that has
 * one such character at two bytes a character: six dashes and ellipses in the sources' comments
 * and messages made the 3.6 MB bundle 7 MB in each thread that holds it (the main thread reads
 * it, the workflow thread keeps it as its script's source).
 */
export function latin1Code(code: string): string {
  return code.replace(/[^\u0000-\u00ff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/**
 * Bundle from source in a child process into a file of a fresh temporary directory, and return
 * its path (remove the directory once the workers have loaded it). Webpack's modules and the
 * memory it used while bundling leave with the child: the same bundle built in the server
 * process kept about 130 MB more RSS for the life of the process (bench/memory.ts).
 */
export async function buildWorkflowBundleFile(opts: { tracing?: boolean } = {}): Promise<{ file: string; dispose(): void }> {
  const dir = mkdtempSync(path.join(tmpdir(), 'steward-bundle-'));
  const file = path.join(dir, 'workflow-bundle.js');
  const self = fileURLToPath(import.meta.url);
  try {
    await new Promise<void>((resolve, reject) => {
      // the same Node and loader flags as this process (tsx), so the child reads the same sources
      // (without debugger or profiler flags: those are for this process)
      const flags = process.execArgv.filter((a) => !/^--(inspect|cpu-prof|heap-prof|prof)/.test(a));
      const child = spawn(process.execPath, [...flags, self, ...(opts.tracing ? ['--tracing-only'] : ['--untraced-only']), file], { stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr = (stderr + d).slice(-4000)));
      child.on('error', reject);
      child.on('exit', (code, signal) =>
        code === 0 ? resolve() : reject(new Error(`bundling the workflows failed (${signal ?? `exit ${code}`}): ${stderr.trim() || 'no output'}`)),
      );
    });
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return { file, dispose: () => rmSync(dir, { recursive: true, force: true }) };
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  // both bundles unless one is asked for (buildWorkflowBundleFile asks for one)
  const only = process.argv[2]?.startsWith('--') ? process.argv[2] : undefined;
  const out = process.argv[only ? 3 : 2] ?? 'generated/workflow-bundle.js';
  for (const tracing of [false, true]) {
    if ((only === '--tracing-only' && !tracing) || (only === '--untraced-only' && tracing)) continue;
    const file = tracing && !only ? tracingBundlePath(out) : out;
    const bundle = await buildWorkflowBundle(bundlerLogger, { tracing });
    await writeFile(file, bundle.code);
    console.log(`wrote ${file} (${Math.round(bundle.code.length / 1024)} KiB${tracing ? ', with tracing' : ''})`);
  }
}
