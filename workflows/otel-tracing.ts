/**
 * OpenTelemetry tracing of workflows, in the bundle of a worker that traces (workers/bundle.ts
 * `workflowModulesFor`; part of the bundle, not a workflow): upstream's public workflow
 * interceptors (`@temporalio/interceptors-opentelemetry`) make spans for the workflow run, its
 * signals, updates and queries, and for scheduling activities and child workflows, with the
 * trace context passed on in Temporal headers. The spans leave the sandbox through the
 * `exporter` sink (platform/telemetry.ts). Span ids come from the workflow's seeded randomness
 * and sink calls are skipped during replay, so a replayed workflow exports nothing twice.
 *
 * Whether a run traces is its worker's choice, made when the worker is built, so one run can be
 * traced on one worker and not on the next: the interceptors must leave its commands and the
 * points where its code resumes exactly as they are without them. Upstream's do not quite: each
 * awaits its span around the call, so the workflow's code resumes a few microtasks later (enough
 * to reorder an update's completion and a timer's cancellation). So each call is handed to
 * upstream's interceptor with a `next` that keeps the workflow's own promise, and that promise
 * is what the workflow gets; the span still wraps the call and ends when upstream's does.
 *
 * Runs traced by the retired patch `steward-otel-tracing` are replayed by
 * workflows/otel-interceptors.ts with upstream's interceptors as they ran then: these step aside
 * for them. That module also holds what both share (the span context's storage, the lazily
 * loaded OpenTelemetry modules of a run, and its memory notes), and comes first in the bundle's
 * interceptor modules, so this one finds the run's state there.
 */
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
import { RunState, runStateBeingMade, type RunOtel } from './otel-interceptors.js';

/**
 * Upstream's interceptor call, the workflow handed its own promise: upstream calls `next` at once
 * (its span's context active), and what `next` returns goes back to the workflow unchanged;
 * upstream's own promise settles later and only ends the span. Should upstream yield before
 * calling `next` (it does for runs from SDKs before 1.13.2), its promise is returned, as upstream
 * has it.
 */
function keepTiming<I, R>(traced: (input: I, next: (input: I) => Promise<R>) => Promise<R>, input: I, next: (input: I) => Promise<R>): Promise<R> {
  let own: Promise<R> | undefined;
  const spanned = traced(input, (i) => (own = next(i)));
  if (own === undefined) return spanned;
  // the workflow handles its own promise's outcome; upstream's only records it on the span
  spanned.catch(() => undefined);
  return own;
}

/** This run's interceptors, unless it is one the retired patch traced (then workflows/otel-interceptors.ts traces it). */
class Tracing {
  constructor(private readonly run: RunState) {}
  on(): RunOtel | undefined {
    return this.run.legacy() ? undefined : this.run.otel();
  }
  peek(): RunOtel | undefined {
    return this.run.legacyIfDecided() === true ? undefined : this.run.otel();
  }
}

class Inbound implements WorkflowInboundCallsInterceptor {
  constructor(private readonly tracing: Tracing) {}
  execute(input: WorkflowExecuteInput, next: Next<WorkflowInboundCallsInterceptor, 'execute'>): Promise<unknown> {
    const otel = this.tracing.on();
    return otel ? keepTiming((i, n) => otel.inbound.execute(i, n), input, next) : next(input);
  }
  handleSignal(input: SignalInput, next: Next<WorkflowInboundCallsInterceptor, 'handleSignal'>): Promise<void> {
    const otel = this.tracing.on();
    return otel ? keepTiming((i, n) => otel.inbound.handleSignal(i, n), input, next) : next(input);
  }
  handleUpdate(input: UpdateInput, next: Next<WorkflowInboundCallsInterceptor, 'handleUpdate'>): Promise<unknown> {
    const otel = this.tracing.on();
    return otel ? keepTiming((i, n) => otel.inbound.handleUpdate(i, n), input, next) : next(input);
  }
  validateUpdate(input: UpdateInput, next: Next<WorkflowInboundCallsInterceptor, 'validateUpdate'>): void {
    const otel = this.tracing.peek();
    if (otel) otel.inbound.validateUpdate(input, next);
    else next(input);
  }
  handleQuery(input: QueryInput, next: Next<WorkflowInboundCallsInterceptor, 'handleQuery'>): Promise<unknown> {
    const otel = this.tracing.peek();
    return otel ? keepTiming((i, n) => otel.inbound.handleQuery(i, n), input, next) : next(input);
  }
}

class Outbound implements WorkflowOutboundCallsInterceptor {
  constructor(private readonly tracing: Tracing) {}
  scheduleActivity(input: ActivityInput, next: Next<WorkflowOutboundCallsInterceptor, 'scheduleActivity'>): Promise<unknown> {
    const otel = this.tracing.on();
    return otel ? keepTiming((i, n) => otel.outbound.scheduleActivity(i, n), input, next) : next(input);
  }
  scheduleLocalActivity(input: LocalActivityInput, next: Next<WorkflowOutboundCallsInterceptor, 'scheduleLocalActivity'>): Promise<unknown> {
    const otel = this.tracing.on();
    return otel ? keepTiming((i, n) => otel.outbound.scheduleLocalActivity(i, n), input, next) : next(input);
  }
  startNexusOperation(input: StartNexusOperationInput, next: Next<WorkflowOutboundCallsInterceptor, 'startNexusOperation'>): Promise<StartNexusOperationOutput> {
    const otel = this.tracing.on();
    return otel ? keepTiming((i, n) => otel.outbound.startNexusOperation(i, n), input, next) : next(input);
  }
  startChildWorkflowExecution(
    input: StartChildWorkflowExecutionInput,
    next: Next<WorkflowOutboundCallsInterceptor, 'startChildWorkflowExecution'>,
  ): Promise<[Promise<string>, Promise<unknown>]> {
    const otel = this.tracing.on();
    return otel ? keepTiming((i, n) => otel.outbound.startChildWorkflowExecution(i, n), input, next) : next(input);
  }
  continueAsNew(input: ContinueAsNewInput, next: Next<WorkflowOutboundCallsInterceptor, 'continueAsNew'>): Promise<never> {
    const otel = this.tracing.on();
    return otel ? keepTiming((i, n) => otel.outbound.continueAsNew(i, n), input, next) : next(input);
  }
  signalWorkflow(input: SignalWorkflowInput, next: Next<WorkflowOutboundCallsInterceptor, 'signalWorkflow'>): Promise<void> {
    const otel = this.tracing.on();
    return otel ? keepTiming((i, n) => otel.outbound.signalWorkflow(i, n), input, next) : next(input);
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
  constructor(private readonly run: RunState) {}
  async dispose(input: DisposeInput, next: Next<WorkflowInternalsInterceptor, 'dispose'>): Promise<void> {
    // a legacy run's are disposed by workflows/otel-interceptors.ts
    const otel = this.run.legacyIfDecided() === true ? undefined : this.run.loaded();
    if (otel) await otel.internals.dispose(input, next);
    else next(input);
  }
}

export const interceptors: WorkflowInterceptorsFactory = () => {
  // made just before, for this run, by workflows/otel-interceptors.ts (first in the bundle); a state of its own otherwise
  const run = runStateBeingMade() ?? new RunState();
  const tracing = new Tracing(run);
  return { inbound: [new Inbound(tracing)], outbound: [new Outbound(tracing)], internals: [new Internals(run)] };
};
