/**
 * Traces and metrics.
 *
 * Traces: OpenTelemetry spans from the Temporal client (ingress starting or signalling a
 * session), the HTTP API, workflows (their run, signals, updates, child workflows and
 * activity scheduling, made inside the workflow sandbox and handed out through the
 * `exporter` sink) and activities, linked by parent ids, exported over OTLP/HTTP
 * (JSON) when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set.
 * A session run's span ends (and is exported) when the run ends; the turns it starts are its
 * children, so they sit in the trace of the message that started the run, while a later
 * message's request, signal and `HandleSignal` spans form a trace of their own.
 * Tracing is decided per worker: a worker with an exporter runs the workflow bundle with the
 * public OpenTelemetry workflow interceptors (workflows/otel-tracing.ts, workers/bundle.ts), a
 * worker without one the bundle without them, so its runs make no spans. Every worker registers
 * the `exporter` sink (dropping spans when there is no exporter).
 *
 * Metrics: the Temporal SDK's own (Core's Prometheus exporter on a loopback port chosen at
 * start) and Steward's (platform/metrics.ts), served together in Prometheus text format on
 * `/metrics`.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { createServer, type Server } from 'node:http';
import { hostname } from 'node:os';
import { diag, DiagLogLevel, ROOT_CONTEXT, SpanKind, SpanStatusCode, type Context, type ContextManager } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { Resource } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor, NoopSpanProcessor, type SpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { WorkflowClientInterceptor } from '@temporalio/client';
import {
  makeWorkflowExporter,
  OpenTelemetryActivityInboundInterceptor,
  OpenTelemetryActivityOutboundInterceptor,
  OpenTelemetryWorkflowClientInterceptor,
  type OpenTelemetryWorkflowExporter,
} from '@temporalio/interceptors-opentelemetry';
import type { InjectedSinks, WorkerInterceptors } from '@temporalio/worker';
import type { WorkflowInfo } from '@temporalio/workflow';
import type { MiddlewareHandler } from 'hono';
import type { Logger } from 'pino';
import { enableProcessMetrics, stewardRegistry } from '../common/metrics.js';

export interface TracingSettings {
  /** The OTLP/HTTP traces URL (e.g. http://collector:4318/v1/traces); no export when unset. */
  tracesUrl?: string;
  /** `service.name` of the spans. */
  serviceName: string;
}

/** OpenTelemetry's context manager on AsyncLocalStorage (so a span started in a handler is the parent of what it awaits). */
class AsyncLocalContextManager implements ContextManager {
  private readonly storage = new AsyncLocalStorage<Context>();
  active(): Context {
    return this.storage.getStore() ?? ROOT_CONTEXT;
  }
  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(ctx: Context, fn: F, thisArg?: ThisParameterType<F>, ...args: A): ReturnType<F> {
    return this.storage.run(ctx, () => Reflect.apply(fn, thisArg, args) as ReturnType<F>);
  }
  bind<T>(ctx: Context, target: T): T {
    if (typeof target !== 'function') return target;
    const run = (self: unknown, args: unknown[]): unknown => this.storage.run(ctx, () => Reflect.apply(target, self, args));
    return function (this: unknown, ...args: unknown[]) {
      return run(this, args);
    } as T;
  }
  enable(): this {
    return this;
  }
  disable(): this {
    this.storage.disable();
    return this;
  }
}

export interface Tracing {
  /** True when spans are exported (OTLP configured). */
  readonly enabled: boolean;
  /** Client interceptors (ingress: a span per workflow start/signal/update, its context in the headers). */
  readonly clientInterceptors: { workflow: WorkflowClientInterceptor[] } | undefined;
  /** Worker interceptors (activity spans, child of the workflow's scheduling span). */
  readonly workerInterceptors: WorkerInterceptors | undefined;
  /** The `exporter` sink the bundle's workflow interceptors call (drops spans when disabled). */
  readonly sinks: InjectedSinks<{ exporter: OpenTelemetryWorkflowExporter }>;
  /** An HTTP server span per API request (undefined when disabled). */
  readonly httpMiddleware: MiddlewareHandler | undefined;
  /** Export what is buffered (call after the workers stopped). */
  flush(): Promise<void>;
}

/** The sinks of a worker that exports nothing: the bundle's workflow spans are dropped. */
export function droppingWorkflowSinks(): InjectedSinks<{ exporter: OpenTelemetryWorkflowExporter }> {
  return { exporter: makeWorkflowExporter(new NoopSpanProcessor(), Resource.empty() as Resource) };
}

/**
 * The upstream exporter copies the whole WorkflowInfo onto every workflow span (memo, search
 * attributes, last failure, ...); spans carry only the run's identity here.
 */
function slimWorkflowInfo(sinks: InjectedSinks<{ exporter: OpenTelemetryWorkflowExporter }>): InjectedSinks<{ exporter: OpenTelemetryWorkflowExporter }> {
  const inner = sinks.exporter.export;
  return {
    exporter: {
      export: {
        ...inner,
        fn: (info, spans) => {
          const identity = { workflowId: info.workflowId, runId: info.runId, workflowType: info.workflowType, taskQueue: info.taskQueue, namespace: info.namespace };
          // the exporter only spreads the info into span attributes: these fields are all it reads
          return inner.fn(identity as WorkflowInfo, spans);
        },
      },
    },
  };
}

let installed: Tracing | undefined;

/**
 * Set up tracing for this process (once: the tracer provider, context manager and propagator
 * are process-wide; later calls return the first setup).
 */
export function installTracing(settings: TracingSettings, log?: Logger): Tracing {
  if (installed) return installed;
  if (!settings.tracesUrl) {
    installed = {
      enabled: false,
      clientInterceptors: undefined,
      workerInterceptors: undefined,
      sinks: droppingWorkflowSinks(),
      httpMiddleware: undefined,
      flush: async () => undefined,
    };
    return installed;
  }
  if (log) {
    const l = log.child({ component: 'otel' });
    diag.setLogger(
      {
        error: (m, ...a) => l.warn({ detail: a.map(String).join(' ') || undefined }, `OpenTelemetry: ${m}`),
        warn: (m, ...a) => l.warn({ detail: a.map(String).join(' ') || undefined }, `OpenTelemetry: ${m}`),
        info: () => undefined,
        debug: () => undefined,
        verbose: () => undefined,
      },
      DiagLogLevel.WARN,
    );
  }
  const resource = Resource.default().merge(
    new Resource({ 'service.name': settings.serviceName, 'service.instance.id': `${hostname()}:${process.pid}` }),
  ) as Resource;
  const processor: SpanProcessor = new BatchSpanProcessor(new OTLPTraceExporter({ url: settings.tracesUrl }), {
    scheduledDelayMillis: 1000,
    maxExportBatchSize: 512,
    maxQueueSize: 4096,
  });
  const provider = new BasicTracerProvider({ resource, spanProcessors: [processor] });
  provider.register({ contextManager: new AsyncLocalContextManager(), propagator: new W3CTraceContextPropagator() });
  const tracer = provider.getTracer('steward');
  const httpMiddleware: MiddlewareHandler = async (c, next) => {
    // requests that change something (messages, commands, approvals, hooks); reads and polls are not traced
    if (c.req.method === 'GET' || c.req.method === 'HEAD' || c.req.method === 'OPTIONS') return next();
    // named by method only (paths carry chat and change ids); the path is an attribute
    await tracer.startActiveSpan(c.req.method, { kind: SpanKind.SERVER, attributes: { 'http.request.method': c.req.method, 'url.path': new URL(c.req.url).pathname } }, async (span) => {
      try {
        await next();
        span.setAttribute('http.response.status_code', c.res.status);
        if (c.res.status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      } finally {
        span.end();
      }
    });
  };
  installed = {
    enabled: true,
    clientInterceptors: { workflow: [new OpenTelemetryWorkflowClientInterceptor()] },
    workerInterceptors: {
      activity: [(ctx) => ({ inbound: new OpenTelemetryActivityInboundInterceptor(ctx), outbound: new OpenTelemetryActivityOutboundInterceptor(ctx) })],
    },
    sinks: slimWorkflowInfo({ exporter: makeWorkflowExporter(processor, resource) }),
    httpMiddleware,
    flush: () => provider.forceFlush(),
  };
  log?.info({ url: settings.tracesUrl, service: settings.serviceName }, 'exporting traces over OTLP');
  return installed;
}

// ---------------------------------------------------------------- metrics

let sdkMetricsAddress: string | undefined;

/** Core's Prometheus exporter options for Runtime.install (a loopback address the worker alone scrapes). */
export function sdkMetricsTelemetry(bindAddress: string): { metrics: { prometheus: { bindAddress: string; countersTotalSuffix: boolean; useSecondsForDurations: boolean } } } {
  return { metrics: { prometheus: { bindAddress, countersTotalSuffix: true, useSecondsForDurations: true } } };
}

/** Record where Core's Prometheus exporter listens, once Runtime.install took the options. */
export function useSdkMetrics(bindAddress: string): void {
  sdkMetricsAddress = bindAddress;
  enableProcessMetrics();
}

/** Steward's metrics and the Temporal SDK's, in Prometheus text format. */
export async function renderMetrics(): Promise<{ contentType: string; body: string }> {
  let sdk = '';
  if (sdkMetricsAddress) {
    try {
      const res = await fetch(`http://${sdkMetricsAddress}/metrics`, { signal: AbortSignal.timeout(3000) });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      sdk = await res.text();
    } catch (err) {
      sdk = `# Temporal SDK metrics unavailable: ${(err as Error).message.replace(/\s+/g, ' ')}\n`;
    }
  }
  if (sdk && !sdk.endsWith('\n')) sdk += '\n';
  const own = await stewardRegistry.metrics();
  return { contentType: stewardRegistry.contentType, body: `${sdk}${own}` };
}

export interface MetricsServer {
  url: string;
  close(): Promise<void>;
}

/**
 * A metrics listener of its own (`STEWARD_METRICS_PORT`, for worker processes and for
 * scrapers kept off the API port): `GET /metrics`, unauthenticated, so bind it to an
 * internal interface.
 */
export async function startMetricsServer(opts: { host: string; port: number; log?: Logger }): Promise<MetricsServer> {
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path !== '/metrics' || (req.method !== 'GET' && req.method !== 'HEAD')) {
      res.writeHead(path === '/metrics' ? 405 : 404, { 'content-type': 'text/plain; charset=utf-8' });
      res.end(path === '/metrics' ? 'method not allowed\n' : 'not found: metrics are at /metrics\n');
      return;
    }
    renderMetrics().then(
      (m) => {
        res.writeHead(200, { 'content-type': m.contentType });
        res.end(req.method === 'HEAD' ? undefined : m.body);
      },
      (err: unknown) => {
        opts.log?.warn({ err }, 'rendering metrics failed');
        res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' });
        res.end('metrics failed\n');
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : opts.port;
  const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host === '0.0.0.0' ? '127.0.0.1' : opts.host;
  const url = `http://${host}:${port}/metrics`;
  opts.log?.info({ url }, 'metrics listener started');
  return {
    url,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
