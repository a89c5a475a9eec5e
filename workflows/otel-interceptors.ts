/**
 * Workflow interceptors in every Steward bundle (part of the bundle, not a workflow): the runs
 * that an earlier Steward traced by a patch, replayed as they ran, and the run state the tracing
 * interceptors of a worker that traces (workflows/otel-tracing.ts) share with them.
 *
 * Tracing is decided per worker: a worker with an OTLP exporter runs the bundle that has
 * workflows/otel-tracing.ts (upstream's public OpenTelemetry interceptors), a worker without one
 * the bundle without it (workers/bundle.ts, workers/main.ts). Those interceptors leave the
 * run's commands and the points where its code resumes as they are without them, so a run
 * replays alike on a worker with tracing and on one without.
 *
 * Before that, tracing was a runtime switch: `patched('steward-otel-tracing')` at a run's first
 * intercepted call, declined by a worker without an exporter. Upstream's interceptors, as they
 * are, change where the workflow's code resumes (each awaits its span around the call), so a run
 * traced that way replays only with them, and a run that was not only without them (the corpus
 * has both: test/replay/replay.test.ts). `deprecatePatch` cannot tell the two apart (it answers
 * nothing), and dropping the call would make the Temporal core fail every replay that meets the
 * patch's marker. So, at the same first call, and only while the run is replaying, this module
 * reads the patch (`patched` records nothing then: it only reports the marker): a run that has
 * it is one traced the old way and is replayed (and continued) with upstream's interceptors as
 * they ran then, on any worker, its spans exported only by a worker with an exporter. A run
 * whose first call is live is a new run: it never reads the patch and records no marker.
 *
 * Remove the legacy path (LegacyInbound, LegacyOutbound, LegacyInternals and the patch read)
 * once no run traced by the patch can be replayed: every run with the marker has closed and
 * left its retention period.
 *
 * Memory. A worker keeps hundreds of runs cached in one V8 context, and every module a run
 * loads is instantiated again for it. Two things here keep a cached run cheap:
 * - The OpenTelemetry modules (about 115 of them) and their objects are loaded only by a run that
 *   traces, when it first needs them (a synchronous `require`, so no yield is added).
 * - Every traced run shares one AsyncLocalStorage for its span context (this module's own,
 *   created when the module loads). Upstream's workflow interceptors give each run an
 *   AsyncLocalStorage of its own, enabled while the run is cached; Node's async_hooks-based
 *   AsyncLocalStorage sets a property for every enabled instance on every promise the thread
 *   creates, so with 200 cached traced runs each promise carried 200 properties (about 12 KB),
 *   and the workflow thread's heap grew with the square of the cache: at a cache of 200, about
 *   1.7 MB of RSS per cached session, most of the worker's growth (bench/memory.ts). The
 *   workers preload this module (workers/bundle.ts `preloadModules`), so the V8 context shares
 *   it across runs, as the SDK shares its own cancellation-scope storage; a run's contexts live
 *   only in the promises that run creates. Without preloading (a bundle built otherwise, or
 *   `reuseV8Context: false`), each run has its own storage, as upstream's.
 */
import type { Context, ContextManager } from '@opentelemetry/api';
import type * as UpstreamOtel from '@temporalio/interceptors-opentelemetry';
import {
  AsyncLocalStorage,
  patched,
  workflowInfo,
  type ActivityInput,
  type ContinueAsNewInput,
  type DisposeInput,
  type GetLogAttributesInput,
  type GetMetricTagsInput,
  type LocalActivityInput,
  type Next,
  type QueryInput,
  type SignalInput,
  type SignalWorkflowInput,
  type StartChildWorkflowExecutionInput,
  type StartNexusOperationInput,
  type StartNexusOperationOutput,
  type UpdateInput,
  type WorkflowExecuteInput,
  type WorkflowInboundCallsInterceptor,
  type WorkflowInterceptorsFactory,
  type WorkflowInternalsInterceptor,
  type WorkflowOutboundCallsInterceptor,
} from '@temporalio/workflow';

/** The retired tracing patch: its marker is in the runs traced the old way. */
export const OTEL_PATCH = 'steward-otel-tracing';

/**
 * The span context's storage: created when this module loads, so in the workers' preloaded
 * module it is the V8 context's one (never disabled while the worker runs).
 */
const spanContextStorage = new AsyncLocalStorage<Context>();

/**
 * Upstream's workflow ContextManager (interceptors-opentelemetry's workflow/context-manager) over
 * the shared storage: the same calls, so a traced run yields exactly where it did.
 */
class SharedStorageContextManager implements ContextManager {
  constructor(private readonly root: Context) {}
  active(): Context {
    return spanContextStorage.getStore() || this.root;
  }
  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(context: Context, fn: F, thisArg?: ThisParameterType<F>, ...args: A): ReturnType<F> {
    const cb = thisArg == null ? fn : fn.bind(thisArg);
    return spanContextStorage.run(context, cb as (...args: A) => ReturnType<F>, ...args);
  }
  bind<T>(context: Context, target: T): T {
    if (typeof target !== 'function') throw new TypeError(`Only function binding is supported, got ${typeof target}`);
    const wrapper = (...args: unknown[]) => this.with(context, () => (target as (...a: unknown[]) => unknown).apply(this, args));
    Object.defineProperty(wrapper, 'length', { enumerable: false, configurable: true, writable: false, value: (target as (...a: unknown[]) => unknown).length });
    return wrapper as T;
  }
  enable(): this {
    return this;
  }
  /** The storage outlives the run (it is the context's): nothing to disable. */
  disable(): this {
    return this;
  }
}

/** A traced run's OpenTelemetry interceptors (upstream's). */
export interface RunOtel {
  inbound: UpstreamOtel.OpenTelemetryInboundInterceptor;
  outbound: UpstreamOtel.OpenTelemetryOutboundInterceptor;
  internals: UpstreamOtel.OpenTelemetryInternalsInterceptor;
}

/**
 * Load OpenTelemetry into this run (its own module instances: the bundle's module cache is the
 * run's) and make its context manager the shared-storage one. Upstream's interceptors register
 * a tracer provider with a context manager of their own; its storage is never enabled (nothing
 * calls it once the global one is replaced), and their dispose only disables it.
 */
export function loadRunOtel(): RunOtel {
  // synchronous: webpack bundles these; loading them adds no yield to the run
  const upstream = require('@temporalio/interceptors-opentelemetry') as typeof UpstreamOtel;
  const api = require('@opentelemetry/api') as typeof import('@opentelemetry/api');
  const otel: RunOtel = {
    inbound: new upstream.OpenTelemetryInboundInterceptor(),
    outbound: new upstream.OpenTelemetryOutboundInterceptor(),
    internals: new upstream.OpenTelemetryInternalsInterceptor(),
  };
  api.context.disable();
  api.context.setGlobalContextManager(new SharedStorageContextManager(api.ROOT_CONTEXT));
  return otel;
}

/**
 * One run's tracing state, shared by this module's interceptors and the tracing module's: whether
 * the run was traced by the retired patch (read once, at its first intercepted call that may
 * record a command, as the patch was) and its OpenTelemetry interceptors once loaded.
 */
export class RunState {
  private legacyTraced: boolean | undefined;
  private otelLoaded: RunOtel | undefined;
  /** Decides at the first call: only a replayed first call can meet a marker (a live one is a new run's). */
  legacy(): boolean {
    this.legacyTraced ??= workflowInfo().unsafe.isReplaying ? patched(OTEL_PATCH) : false;
    return this.legacyTraced;
  }
  /** The decision if made (queries, update validators and dispose record nothing, so never decide). */
  legacyIfDecided(): boolean | undefined {
    return this.legacyTraced;
  }
  otel(): RunOtel {
    return (this.otelLoaded ??= loadRunOtel());
  }
  loaded(): RunOtel | undefined {
    return this.otelLoaded;
  }
}

/**
 * The state of the run whose interceptors are being made: the SDK calls the bundle's interceptor
 * factories one after the other, synchronously, for one run; this module's comes first
 * (workers/bundle.ts), so workflows/otel-tracing.ts's factory finds its run's state here.
 */
let runBeingMade: RunState | undefined;
export function runStateBeingMade(): RunState | undefined {
  return runBeingMade;
}

/** A run traced by the retired patch: upstream's interceptors as they ran then. */
class LegacyTracing {
  constructor(private readonly run: RunState) {}
  on(): RunOtel | undefined {
    return this.run.legacy() ? this.run.otel() : undefined;
  }
  peek(): RunOtel | undefined {
    return this.run.legacyIfDecided() === true ? this.run.otel() : undefined;
  }
}
class LegacyInbound implements WorkflowInboundCallsInterceptor {
  constructor(private readonly tracing: LegacyTracing) {}
  execute(input: WorkflowExecuteInput, next: Next<WorkflowInboundCallsInterceptor, 'execute'>): Promise<unknown> {
    const otel = this.tracing.on();
    return otel ? otel.inbound.execute(input, next) : next(input);
  }
  handleSignal(input: SignalInput, next: Next<WorkflowInboundCallsInterceptor, 'handleSignal'>): Promise<void> {
    const otel = this.tracing.on();
    return otel ? otel.inbound.handleSignal(input, next) : next(input);
  }
  handleUpdate(input: UpdateInput, next: Next<WorkflowInboundCallsInterceptor, 'handleUpdate'>): Promise<unknown> {
    const otel = this.tracing.on();
    return otel ? otel.inbound.handleUpdate(input, next) : next(input);
  }
  validateUpdate(input: UpdateInput, next: Next<WorkflowInboundCallsInterceptor, 'validateUpdate'>): void {
    const otel = this.tracing.peek();
    if (otel) otel.inbound.validateUpdate(input, next);
    else next(input);
  }
  handleQuery(input: QueryInput, next: Next<WorkflowInboundCallsInterceptor, 'handleQuery'>): Promise<unknown> {
    const otel = this.tracing.peek();
    return otel ? otel.inbound.handleQuery(input, next) : next(input);
  }
}

class LegacyOutbound implements WorkflowOutboundCallsInterceptor {
  constructor(private readonly tracing: LegacyTracing) {}
  scheduleActivity(input: ActivityInput, next: Next<WorkflowOutboundCallsInterceptor, 'scheduleActivity'>): Promise<unknown> {
    const otel = this.tracing.on();
    return otel ? otel.outbound.scheduleActivity(input, next) : next(input);
  }
  scheduleLocalActivity(input: LocalActivityInput, next: Next<WorkflowOutboundCallsInterceptor, 'scheduleLocalActivity'>): Promise<unknown> {
    const otel = this.tracing.on();
    return otel ? otel.outbound.scheduleLocalActivity(input, next) : next(input);
  }
  startNexusOperation(input: StartNexusOperationInput, next: Next<WorkflowOutboundCallsInterceptor, 'startNexusOperation'>): Promise<StartNexusOperationOutput> {
    const otel = this.tracing.on();
    return otel ? otel.outbound.startNexusOperation(input, next) : next(input);
  }
  startChildWorkflowExecution(
    input: StartChildWorkflowExecutionInput,
    next: Next<WorkflowOutboundCallsInterceptor, 'startChildWorkflowExecution'>,
  ): Promise<[Promise<string>, Promise<unknown>]> {
    const otel = this.tracing.on();
    return otel ? otel.outbound.startChildWorkflowExecution(input, next) : next(input);
  }
  continueAsNew(input: ContinueAsNewInput, next: Next<WorkflowOutboundCallsInterceptor, 'continueAsNew'>): Promise<never> {
    const otel = this.tracing.on();
    return otel ? otel.outbound.continueAsNew(input, next) : next(input);
  }
  signalWorkflow(input: SignalWorkflowInput, next: Next<WorkflowOutboundCallsInterceptor, 'signalWorkflow'>): Promise<void> {
    const otel = this.tracing.on();
    return otel ? otel.outbound.signalWorkflow(input, next) : next(input);
  }
  getLogAttributes(input: GetLogAttributesInput, next: Next<WorkflowOutboundCallsInterceptor, 'getLogAttributes'>): Record<string, unknown> {
    const otel = this.tracing.peek();
    return otel ? otel.outbound.getLogAttributes(input, next) : next(input);
  }
  getMetricTags(input: GetMetricTagsInput, next: Next<WorkflowOutboundCallsInterceptor, 'getMetricTags'>): GetMetricTagsInput {
    return next(input);
  }
}

class LegacyInternals implements WorkflowInternalsInterceptor {
  constructor(private readonly tracing: LegacyTracing) {}
  async dispose(input: DisposeInput, next: Next<WorkflowInternalsInterceptor, 'dispose'>): Promise<void> {
    const otel = this.tracing.peek();
    if (otel) await otel.internals.dispose(input, next);
    else next(input);
  }
}

export const interceptors: WorkflowInterceptorsFactory = () => {
  const run = new RunState();
  runBeingMade = run;
  const tracing = new LegacyTracing(run);
  return { inbound: [new LegacyInbound(tracing)], outbound: [new LegacyOutbound(tracing)], internals: [new LegacyInternals(tracing)] };
};
