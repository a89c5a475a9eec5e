/**
 * Workflow interceptors (part of the workflow bundle, not a workflow): OpenTelemetry spans for
 * the workflow run, its signals, updates and queries, and for scheduling activities and child
 * workflows, with the trace context passed on in Temporal headers. The spans leave the
 * sandbox through the `exporter` sink, which every Steward worker registers (dropping them
 * when OTLP is not configured). Span ids come from the workflow's seeded randomness and sink
 * calls are skipped during replay, so a replayed workflow exports nothing twice.
 *
 * The interceptors change when the workflow's code yields (each wraps its call in a span), so
 * runs recorded before tracing existed must replay without them: tracing is behind the patch
 * `steward-otel-tracing`, decided once per run at its first intercepted call (the run's start).
 * A worker without an exporter declines the patch for the runs it starts (its
 * `patchActivationCallback`, workers/main.ts): no marker, so the run never traces, on any
 * worker that replays it.
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
import type * as UpstreamOtel from '@temporalio/interceptors-opentelemetry/lib/workflow/index.js';
import type {
  ActivityInput,
  ContinueAsNewInput,
  DisposeInput,
  GetLogAttributesInput,
  GetMetricTagsInput,
  LocalActivityInput,
  Next,
  QueryInput,
  SignalInput,
  SignalWorkflowInput,
  StartChildWorkflowExecutionInput,
  StartNexusOperationInput,
  StartNexusOperationOutput,
  UpdateInput,
  WorkflowExecuteInput,
  WorkflowInboundCallsInterceptor,
  WorkflowInterceptorsFactory,
  WorkflowInternalsInterceptor,
  WorkflowOutboundCallsInterceptor,
} from '@temporalio/workflow';
// the modules the SDK's sandbox itself loads at start (shared by every run), not the package's index
import { AsyncLocalStorage } from '@temporalio/workflow/lib/cancellation-scope.js';
import { patched } from '@temporalio/workflow/lib/workflow.js';

export const OTEL_PATCH = 'steward-otel-tracing';

/**
 * The span context's storage: created when this module loads, so in the workers' preloaded
 * module it is the V8 context's one (never disabled while the worker runs).
 */
const spanContextStorage = new AsyncLocalStorage<Context>();

/**
 * Upstream's ContextManager (interceptors-opentelemetry/lib/workflow/context-manager.js) over
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
interface RunOtel {
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
function loadRunOtel(): RunOtel {
  // synchronous: webpack bundles these; loading them adds no yield to the run
  const upstream = require('@temporalio/interceptors-opentelemetry/lib/workflow/index.js') as typeof UpstreamOtel;
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

/** Whether this run traces: decided (and its marker recorded) at the first call that may record one. */
class TracingSwitch {
  private decided: boolean | undefined;
  private otel: RunOtel | undefined;
  /** From execute, signals, updates' handlers and outbound calls: may decide. The run's interceptors when it traces. */
  on(): RunOtel | undefined {
    this.decided ??= patched(OTEL_PATCH);
    return this.decided ? (this.otel ??= loadRunOtel()) : undefined;
  }
  /** From update validators, queries and dispose (no commands allowed): only reads a decision. */
  peek(): RunOtel | undefined {
    return this.decided === true ? (this.otel ??= loadRunOtel()) : undefined;
  }
}

class Inbound implements WorkflowInboundCallsInterceptor {
  constructor(private readonly tracing: TracingSwitch) {}
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

class Outbound implements WorkflowOutboundCallsInterceptor {
  constructor(private readonly tracing: TracingSwitch) {}
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

class Internals implements WorkflowInternalsInterceptor {
  constructor(private readonly tracing: TracingSwitch) {}
  async dispose(input: DisposeInput, next: Next<WorkflowInternalsInterceptor, 'dispose'>): Promise<void> {
    const otel = this.tracing.peek();
    if (otel) await otel.internals.dispose(input, next);
    else next(input);
  }
}

export const interceptors: WorkflowInterceptorsFactory = () => {
  const tracing = new TracingSwitch();
  return { inbound: [new Inbound(tracing)], outbound: [new Outbound(tracing)], internals: [new Internals(tracing)] };
};
