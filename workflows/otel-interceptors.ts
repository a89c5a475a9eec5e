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
 */
import {
  OpenTelemetryInboundInterceptor,
  OpenTelemetryInternalsInterceptor,
  OpenTelemetryOutboundInterceptor,
} from '@temporalio/interceptors-opentelemetry/lib/workflow/index.js';
import {
  patched,
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

export const OTEL_PATCH = 'steward-otel-tracing';

/** Whether this run traces: decided (and its marker recorded) at the first call that may record one. */
class TracingSwitch {
  private decided: boolean | undefined;
  /** From execute, signals, updates' handlers and outbound calls: may decide. */
  on(): boolean {
    this.decided ??= patched(OTEL_PATCH);
    return this.decided;
  }
  /** From update validators and queries (no commands allowed): only reads a decision. */
  peek(): boolean {
    return this.decided === true;
  }
}

class Inbound implements WorkflowInboundCallsInterceptor {
  private readonly otel = new OpenTelemetryInboundInterceptor();
  constructor(private readonly tracing: TracingSwitch) {}
  execute(input: WorkflowExecuteInput, next: Next<WorkflowInboundCallsInterceptor, 'execute'>): Promise<unknown> {
    return this.tracing.on() ? this.otel.execute(input, next) : next(input);
  }
  handleSignal(input: SignalInput, next: Next<WorkflowInboundCallsInterceptor, 'handleSignal'>): Promise<void> {
    return this.tracing.on() ? this.otel.handleSignal(input, next) : next(input);
  }
  handleUpdate(input: UpdateInput, next: Next<WorkflowInboundCallsInterceptor, 'handleUpdate'>): Promise<unknown> {
    return this.tracing.on() ? this.otel.handleUpdate(input, next) : next(input);
  }
  validateUpdate(input: UpdateInput, next: Next<WorkflowInboundCallsInterceptor, 'validateUpdate'>): void {
    if (this.tracing.peek()) this.otel.validateUpdate(input, next);
    else next(input);
  }
  handleQuery(input: QueryInput, next: Next<WorkflowInboundCallsInterceptor, 'handleQuery'>): Promise<unknown> {
    return this.tracing.peek() ? this.otel.handleQuery(input, next) : next(input);
  }
}

class Outbound implements WorkflowOutboundCallsInterceptor {
  private readonly otel = new OpenTelemetryOutboundInterceptor();
  constructor(private readonly tracing: TracingSwitch) {}
  scheduleActivity(input: ActivityInput, next: Next<WorkflowOutboundCallsInterceptor, 'scheduleActivity'>): Promise<unknown> {
    return this.tracing.on() ? this.otel.scheduleActivity(input, next) : next(input);
  }
  scheduleLocalActivity(input: LocalActivityInput, next: Next<WorkflowOutboundCallsInterceptor, 'scheduleLocalActivity'>): Promise<unknown> {
    return this.tracing.on() ? this.otel.scheduleLocalActivity(input, next) : next(input);
  }
  startNexusOperation(input: StartNexusOperationInput, next: Next<WorkflowOutboundCallsInterceptor, 'startNexusOperation'>): Promise<StartNexusOperationOutput> {
    return this.tracing.on() ? this.otel.startNexusOperation(input, next) : next(input);
  }
  startChildWorkflowExecution(
    input: StartChildWorkflowExecutionInput,
    next: Next<WorkflowOutboundCallsInterceptor, 'startChildWorkflowExecution'>,
  ): Promise<[Promise<string>, Promise<unknown>]> {
    return this.tracing.on() ? this.otel.startChildWorkflowExecution(input, next) : next(input);
  }
  continueAsNew(input: ContinueAsNewInput, next: Next<WorkflowOutboundCallsInterceptor, 'continueAsNew'>): Promise<never> {
    return this.tracing.on() ? this.otel.continueAsNew(input, next) : next(input);
  }
  signalWorkflow(input: SignalWorkflowInput, next: Next<WorkflowOutboundCallsInterceptor, 'signalWorkflow'>): Promise<void> {
    return this.tracing.on() ? this.otel.signalWorkflow(input, next) : next(input);
  }
  getLogAttributes(input: GetLogAttributesInput, next: Next<WorkflowOutboundCallsInterceptor, 'getLogAttributes'>): Record<string, unknown> {
    return this.tracing.peek() ? this.otel.getLogAttributes(input, next) : next(input);
  }
  getMetricTags(input: GetMetricTagsInput, next: Next<WorkflowOutboundCallsInterceptor, 'getMetricTags'>): GetMetricTagsInput {
    return next(input);
  }
}

class Internals implements WorkflowInternalsInterceptor {
  private readonly otel = new OpenTelemetryInternalsInterceptor();
  constructor(private readonly tracing: TracingSwitch) {}
  async dispose(input: DisposeInput, next: Next<WorkflowInternalsInterceptor, 'dispose'>): Promise<void> {
    if (this.tracing.peek()) await this.otel.dispose(input, next);
    else next(input);
  }
}

export const interceptors: WorkflowInterceptorsFactory = () => {
  const tracing = new TracingSwitch();
  return { inbound: [new Inbound(tracing)], outbound: [new Outbound(tracing)], internals: [new Internals(tracing)] };
};
