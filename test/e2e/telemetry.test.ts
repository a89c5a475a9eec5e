/**
 * Traces and metrics, end to end: `./steward start` with OTEL_EXPORTER_OTLP_ENDPOINT at a
 * loopback OTLP/HTTP collector double and the scripted model server. A chat message through
 * the HTTP API yields one trace (the API request, the client's update-with-start, the
 * session's run, and the turn's activity it schedules: the model step, which delivers the
 * reply; the turn runs inside the session), linked by parent ids; `/metrics`
 * serves the Temporal SDK's metrics and Steward's (turns, tokens, model calls) in valid
 * Prometheus text format, on the API (token) and on the metrics listener (no token), and a
 * worker-only process serves its own. Tracing is the worker's: no run records the retired
 * tracing patch, and the traced histories replay on the bundle with the tracing interceptors and
 * on the one without, as the untraced history does.
 * Without OTLP configured, a turn runs, nothing is exported and nothing logs an error.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { Client, Connection } from '@temporalio/client';
import { Worker } from '@temporalio/worker';
import { ConfigError, loadConfig } from '../../config/index.js';
import { droppingWorkflowSinks } from '../../platform/telemetry.js';
import { buildWorkflowBundle } from '../../workers/bundle.js';
import { OTEL_PATCH } from '../../workflows/otel-interceptors.js';
import { INLINE_TURN_PATCH } from '../../workflows/chat/session.js';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';
import { startOtlpCollector, type CollectedSpan, type OtlpCollector } from '../helpers/otlp-collector.js';
import { freePort, spawnProcess, type Spawned } from '../helpers/process.js';
import { freeStewardPorts, startEnv, startSteward, stopSteward, type StewardPorts } from '../helpers/started-steward.js';
import { testBundle } from '../helpers/steward.js';

/** The client's span of a message's handoff (services/handoff.ts: update-with-start of the `inbound` update, a worker accepting it). */
const HANDOFF_SPAN = 'UpdateWithStartWorkflow:inbound';

const TOKEN = 'telemetry-token-0123456789abcdef';

/** The patch markers of a history: each patch id and whether it was recorded deprecated. */
function patchMarkers(history: { events?: Array<{ markerRecordedEventAttributes?: { markerName?: string | null; details?: Record<string, { payloads?: Array<{ data?: Uint8Array | null }> | null }> | null } | null }> | null }): Array<{ id: string; deprecated: boolean }> {
  return (history.events ?? []).flatMap((e) => {
    const m = e.markerRecordedEventAttributes;
    const data = m?.markerName === 'core_patch' ? m.details?.['patch-data']?.payloads?.[0]?.data : undefined;
    if (!data) return [];
    const parsed = JSON.parse(Buffer.from(data).toString('utf8')) as { id?: string; deprecated?: boolean };
    return [{ id: parsed.id ?? '', deprecated: parsed.deprecated === true }];
  });
}

let tracingBundle: ReturnType<typeof buildWorkflowBundle> | undefined;
/** The bundle of a worker that traces (workflows/otel-tracing.ts in it). */
function testTracingBundle(): ReturnType<typeof buildWorkflowBundle> {
  const quiet = { trace: () => undefined, debug: () => undefined, info: () => undefined, log: () => undefined, warn: () => undefined, error: (m: string) => console.error(m) };
  return (tracingBundle ??= buildWorkflowBundle(quiet, { tracing: true }));
}

// ------------------------------------------------------------ Prometheus text format

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Parse Prometheus text exposition (0.0.4) strictly: every line must be a sample, HELP, TYPE, a comment or blank. */
function parseExposition(text: string): { samples: Sample[]; types: Map<string, string> } {
  const samples: Sample[] = [];
  const types = new Map<string, string>();
  const name = '[a-zA-Z_:][a-zA-Z0-9_:]*';
  const sampleRe = new RegExp(`^(${name})(\\{(.*)\\})?\\s+(\\S+)(\\s+-?\\d+)?$`);
  const labelRe = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\.)*)"\s*(,|$)/y;
  text.split('\n').forEach((line, i) => {
    const where = `line ${i + 1}: ${JSON.stringify(line.slice(0, 200))}`;
    if (line.trim() === '') return;
    if (line.startsWith('# TYPE ')) {
      const m = new RegExp(`^# TYPE (${name}) (counter|gauge|histogram|summary|untyped)$`).exec(line);
      assert.ok(m, `a TYPE line: ${where}`);
      assert.ok(!types.has(m[1]!), `${m[1]} has one TYPE (no two families share a name): ${where}`);
      types.set(m[1]!, m[2]!);
      return;
    }
    if (line.startsWith('# HELP ')) {
      assert.match(line, new RegExp(`^# HELP ${name}( .*)?$`), where);
      return;
    }
    if (line.startsWith('#')) return;
    const m = sampleRe.exec(line);
    assert.ok(m, `a sample line: ${where}`);
    const labels: Record<string, string> = {};
    const body = m[3] ?? '';
    labelRe.lastIndex = 0;
    while (labelRe.lastIndex < body.length) {
      const lm = labelRe.exec(body);
      assert.ok(lm, `well-formed labels: ${where}`);
      labels[lm[1]!] = lm[2]!.replace(/\\n/g, '\n').replace(/\\"/g, '"').replace(/\\\\/g, '\\');
    }
    const raw = m[4]!;
    // Prometheus parses floats with Go's ParseFloat: NaN in any case (prom-client writes `Nan`
    // for an event-loop lag not yet measured)
    const isNaNText = /^nan$/i.test(raw);
    const value = raw === '+Inf' ? Infinity : raw === '-Inf' ? -Infinity : isNaNText ? NaN : Number(raw);
    assert.ok(isNaNText || !Number.isNaN(value), `a numeric value: ${where}`);
    samples.push({ name: m[1]!, labels, value });
  });
  return { samples, types };
}

const sum = (samples: Sample[], metric: string, labels: Record<string, string> = {}) =>
  samples.filter((s) => s.name === metric && Object.entries(labels).every(([k, v]) => s.labels[k] === v)).reduce((a, s) => a + s.value, 0);

// ------------------------------------------------------------ helpers

async function waitForReply(api: string, chat: string, assistants: number): Promise<Array<{ role: string; text: string }>> {
  let messages: Array<{ role: string; text: string }> = [];
  for (let i = 0; i < 300; i++) {
    const r = await fetch(`${api}/api/v1/chats/${chat}/messages`, { headers: { authorization: `Bearer ${TOKEN}` } });
    messages = ((await r.json()) as { messages: Array<{ role: string; text: string }> }).messages;
    if (messages.filter((m) => m.role === 'assistant').length >= assistants) return messages;
    await sleep(100);
  }
  throw new Error(`no reply in ${chat}: ${JSON.stringify(messages)}`);
}

const post = (api: string, chat: string, text: string) =>
  fetch(`${api}/api/v1/chats/${chat}/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` },
    body: JSON.stringify({ text, user: 'alice' }),
  });

function stewardEnv(dataDir: string, ports: StewardPorts, model: ModelServer, extra: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const env = startEnv({
    dataDir,
    ports,
    token: TOKEN,
    model: 'openai-compatible:e2e-model',
    modelBaseURL: model.baseURL,
    extra: {
      STEWARD_TEMPORAL_UI: 'false',
      // the cost metric: USD per million input/output tokens
      STEWARD_MODEL_PRICES: 'openai-compatible:e2e-model=2.5/10',
      // plaintext payloads, so that this test can replay the recorded histories without the keys
      STEWARD_CODEC: 'off',
      ...extra,
    },
  });

  // whatever the outer environment says about OpenTelemetry, this test decides it
  for (const k of ['OTEL_EXPORTER_OTLP_ENDPOINT', 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', 'OTEL_SERVICE_NAME', 'STEWARD_METRICS_PORT']) {
    if (!(k in extra)) delete env[k];
  }
  return env;
}

// ------------------------------------------------------------ settings

describe('telemetry settings', () => {
  const base = { STEWARD_DATA_DIR: path.join(tmpdir(), 'steward-telemetry-config-none') };
  it('takes the standard OTLP variables and the metrics listener', () => {
    assert.deepEqual(loadConfig({ ...base }).telemetry, { serviceName: 'steward', metrics: { host: '127.0.0.1' } });
    assert.equal(loadConfig({ ...base, OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' }).telemetry.tracesUrl, 'http://collector:4318/v1/traces');
    const both = loadConfig({
      ...base,
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://traces.example.com/otlp/v1/traces',
      OTEL_SERVICE_NAME: 'steward-prod',
      STEWARD_METRICS_PORT: '9464',
      STEWARD_METRICS_HOST: '0.0.0.0',
    }).telemetry;
    assert.deepEqual(both, { tracesUrl: 'https://traces.example.com/otlp/v1/traces', serviceName: 'steward-prod', metrics: { host: '0.0.0.0', port: 9464 } });
  });
  it('refuses bad values with the variable named', () => {
    assert.throws(() => loadConfig({ ...base, OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' }), (e: unknown) => e instanceof ConfigError && /OTEL_EXPORTER_OTLP_ENDPOINT: expected an http\(s\) URL/.test(e.message));
    assert.throws(() => loadConfig({ ...base, STEWARD_METRICS_PORT: '99999' }), (e: unknown) => e instanceof ConfigError && /STEWARD_METRICS_PORT: expected a TCP port/.test(e.message));
    assert.throws(() => loadConfig({ ...base, STEWARD_METRICS_PORT: 'nine' }), (e: unknown) => e instanceof ConfigError && /STEWARD_METRICS_PORT/.test(e.message));
  });
});

// ------------------------------------------------------------ with OTLP and metrics

describe('traces and metrics of the started stack', () => {
  let model: ModelServer;
  let collector: OtlpCollector;
  let steward: Spawned;
  let api: string;
  let dataDir: string;
  let temporalAddress: string;
  let metricsPort: number;
  const chat = 'telemetry-chat';
  const sessionId = `session:http:default:${chat}`;

  before(async () => {
    model = await startModelServer();
    collector = await startOtlpCollector();
    dataDir = mkdtempSync(path.join(tmpdir(), 'steward-telemetry-'));
    const ports = await freeStewardPorts();
    metricsPort = await freePort();
    const started = await startSteward(
      stewardEnv(dataDir, ports, model, {
        OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
        OTEL_SERVICE_NAME: 'steward-e2e',
        STEWARD_METRICS_PORT: String(metricsPort),
      }),
    );
    steward = started;
    api = started.api;
    temporalAddress = (await steward.waitForOutput(/Temporal:\s+(\S+:\d+)/))[1] ?? '';
  });

  after(async () => {
    await stopSteward(steward);
    await model?.close();
    await collector?.close();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  const scrape = async (url = `${api}/metrics`, token: string | undefined = TOKEN) => {
    const r = await fetch(url, token ? { headers: { authorization: `Bearer ${token}` } } : {});
    assert.equal(r.status, 200, `GET ${url}`);
    assert.match(r.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
    return parseExposition(await r.text());
  };

  let before1: Sample[] = [];
  /** The span the turn's activities were scheduled under: the session run's (exported when that run ends). */
  let scheduledUnder = '';

  it("exports one linked trace of a chat message: API request, the session's update-with-start, the turn's activities", async () => {
    before1 = (await scrape()).samples;
    model.enqueue({ chunks: ['Traced ', 'reply.'], usage: { prompt_tokens: 123, completion_tokens: 45 } });
    assert.equal((await post(api, chat, 'hello traces')).status, 202);
    const messages = await waitForReply(api, chat, 1);
    assert.equal(messages.at(-1)?.text, 'Traced reply.');

    const byName = (spans: CollectedSpan[], name: string, pred: (s: CollectedSpan) => boolean = () => true) => spans.find((s) => s.name === name && pred(s));
    const found = await collector.waitFor(
      (spans) => {
        const client = byName(spans, HANDOFF_SPAN, (s) => s.attributes.temporalWorkflowId === sessionId);
        if (!client) return undefined;
        const inTrace = (s: CollectedSpan) => s.traceId === client.traceId;
        const names = ['StartActivity:modelStep', 'RunActivity:modelStep'];
        return names.every((n) => byName(spans, n, inTrace)) ? { client } : undefined;
      },
      "the ingress span and the turn's activities (scheduled and run) in its trace",
    );
    const spans = collector.spans.filter((s) => s.traceId === found.client.traceId);
    const names = () => spans.map((x) => x.name).join(', ');
    const one = (name: string) => {
      const s = spans.find((x) => x.name === name);
      assert.ok(s, `span ${name} in the message's trace; names there: ${names()}`);
      return s;
    };
    // the trace starts at the API request
    const request = one('POST');
    assert.equal(request.parentSpanId, undefined, 'the API request is the root');
    assert.equal(request.attributes['url.path'], `/api/v1/chats/${chat}/messages`);
    assert.equal(request.kind, 2, 'a server span');
    assert.equal(found.client.parentSpanId, request.spanId, 'the client call is inside the request');
    // the turn runs inside the session: no turn workflow, child or otherwise
    assert.deepEqual(spans.filter((s) => s.name.endsWith(':turnWorkflow')).map((s) => s.name), [], 'no turn workflow in the trace');
    // the workflow side: the session schedules the turn's activity (the model step, which
    // delivers the reply: steward-deliver-in-step), run under its scheduling span
    const scheduledFrom = new Set<string>();
    for (const activity of ['modelStep']) {
      const scheduled = spans.filter((s) => s.name === `StartActivity:${activity}`);
      const ran = spans.filter((s) => s.name === `RunActivity:${activity}`);
      assert.equal(scheduled.length, 1, `${activity} scheduled once in this trace: ${names()}`);
      assert.equal(ran.length, 1, `${activity} ran once in this trace: ${names()}`);
      const [s, r] = [scheduled[0]!, ran[0]!];
      assert.equal(r.parentSpanId, s.spanId, `RunActivity:${activity} is a child of its StartActivity span`);
      assert.ok(r.startNs >= s.startNs, 'the activity runs after it was scheduled');
      assert.equal(r.attributes.temporalWorkflowId, sessionId, `RunActivity:${activity} names the session's workflow`);
      assert.ok(s.parentSpanId, `StartActivity:${activity} has a parent`);
      scheduledFrom.add(s.parentSpanId);
    }
    assert.equal(scheduledFrom.size, 1, "the model step is scheduled from one span (the session's run)");
    scheduledUnder = [...scheduledFrom][0]!;
    assert.ok(!spans.some((s) => s.spanId === scheduledUnder && s.name.startsWith('StartActivity:')), 'not from another activity');
    // the reply went out from the model step: no delivery activity in this trace
    assert.deepEqual(spans.filter((x) => /Activity:deliver$/.test(x.name)).map((x) => x.name), [], `no delivery activity: ${names()}`);
    for (const s of spans) {
      assert.equal(s.resource['service.name'], 'steward-e2e', `${s.name} carries the service name`);
      assert.ok(s.endNs >= s.startNs);
    }
    assert.equal(collector.rejected.length, 0, `nothing else was sent to the collector: ${JSON.stringify(collector.rejected)}`);
  });

  it("links the session's run to the ingress span once it ends (/new continues it as new), the turn's activities under it", async () => {
    assert.equal((await post(api, chat, '/new')).status, 202);
    const run = await collector.waitFor(
      (spans) => spans.find((s) => s.name === 'RunWorkflow:sessionWorkflow' && s.attributes.workflowId === sessionId),
      "the session's first run span",
    );
    const client = collector.spans.find((s) => s.name === HANDOFF_SPAN && s.traceId === run.traceId);
    assert.ok(client, 'the session run is in the trace of the message that started it');
    assert.equal(run.parentSpanId, client.spanId, "the session's run is a child of the ingress's update-with-start");
    assert.equal(run.spanId, scheduledUnder, "the turn's activities were scheduled from the session's run");
    // only the run's identity is copied onto workflow spans
    assert.deepEqual(Object.keys(run.attributes).sort(), ['namespace', 'runId', 'taskQueue', 'workflowId', 'workflowType']);
    const trace = collector.spans.filter((s) => s.traceId === run.traceId);
    for (const activity of ['modelStep']) {
      const scheduled = trace.find((s) => s.name === `StartActivity:${activity}`);
      assert.equal(scheduled?.parentSpanId, run.spanId, `StartActivity:${activity} is a child of the session's run`);
      const ran = trace.find((s) => s.name === `RunActivity:${activity}`);
      assert.equal(ran?.attributes.run_id, run.attributes.runId, `RunActivity:${activity} ran for that run`);
    }
  });

  it('serves the SDK metrics and Steward metrics on /metrics, counting the turn and its tokens', async () => {
    const unauth = await fetch(`${api}/metrics`);
    assert.equal(unauth.status, 401, 'the API port wants the API token');
    const wrong = await fetch(`${api}/metrics`, { headers: { authorization: 'Bearer wrong-token-0123456789' } });
    assert.equal(wrong.status, 401);

    const { samples, types } = await scrape();
    // the Temporal SDK's own metrics (Core's Prometheus exporter)
    const sdk = [...types.keys()].filter((n) => n.startsWith('temporal_'));
    assert.ok(sdk.length > 5, `SDK metric families: ${sdk.join(', ')}`);
    assert.ok(samples.some((s) => s.name.startsWith('temporal_') && s.labels.task_queue !== undefined), 'SDK samples by task queue');
    // Steward's
    for (const family of ['steward_turns_total', 'steward_model_tokens_total', 'steward_model_calls_total', 'steward_model_call_seconds', 'steward_gate_verdicts_total']) {
      assert.ok(types.has(family), `${family} is declared`);
    }
    assert.equal(types.get('steward_model_call_seconds'), 'histogram');
    const delta = (metric: string, labels: Record<string, string>) => sum(samples, metric, labels) - sum(before1, metric, labels);
    const m = { provider: 'openai-compatible', model: 'e2e-model' };
    assert.equal(delta('steward_turns_total', { outcome: 'replied' }), 1, 'one turn replied');
    assert.equal(delta('steward_model_tokens_total', { ...m, kind: 'input' }), 123, 'input tokens from the model server');
    assert.equal(delta('steward_model_tokens_total', { ...m, kind: 'output' }), 45, 'output tokens from the model server');
    assert.equal(delta('steward_model_calls_total', { ...m, outcome: 'ok' }), 1);
    // cost: 123 input tokens at $2.50 and 45 output tokens at $10 per million
    assert.ok(types.has('steward_model_cost_usd_total'), 'the cost metric is declared');
    assert.ok(Math.abs(delta('steward_model_cost_usd_total', m) - (123 * 2.5 + 45 * 10) / 1e6) < 1e-12, `cost ${delta('steward_model_cost_usd_total', m)}`);
    assert.equal(delta('steward_model_call_seconds_count', { ...m, outcome: 'ok' }), 1);
    assert.equal(sum(samples, 'steward_model_call_seconds_bucket', { ...m, outcome: 'ok', le: '+Inf' }), sum(samples, 'steward_model_call_seconds_count', { ...m, outcome: 'ok' }));
    assert.ok(samples.some((s) => s.name === 'steward_process_resident_memory_bytes' && s.value > 0), 'process metrics');

    // the metrics listener (STEWARD_METRICS_PORT): the same, without a token
    const listener = await scrape(`http://127.0.0.1:${metricsPort}/metrics`, undefined);
    assert.equal(sum(listener.samples, 'steward_turns_total', { outcome: 'replied' }), sum(samples, 'steward_turns_total', { outcome: 'replied' }));
    assert.ok([...listener.types.keys()].some((n) => n.startsWith('temporal_')));
    assert.equal((await fetch(`http://127.0.0.1:${metricsPort}/other`)).status, 404);
  });

  it('serves a worker-only process its own metrics listener', async () => {
    const port = await freePort();
    const worker = spawnProcess('./steward', ['worker', '--queues', 'repo'], {
      ...process.env,
      STEWARD_DATA_DIR: dataDir,
      TEMPORAL_ADDRESS: temporalAddress,
      STEWARD_REPO_TASK_QUEUE: 'telemetry-repo-only',
      STEWARD_METRICS_PORT: String(port),
      STEWARD_CODEC: 'off',
      STEWARD_LOG_LEVEL: 'warn',
      DATABASE_URL: '',
      OTEL_EXPORTER_OTLP_ENDPOINT: '',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: '',
    });
    try {
      await worker.waitForOutput(/Steward worker polling/, 120_000);
      let sdkFamilies: string[] = [];
      let last: ReturnType<typeof parseExposition> | undefined;
      for (let i = 0; i < 50 && sdkFamilies.length === 0; i++) {
        last = await scrape(`http://127.0.0.1:${port}/metrics`, undefined);
        sdkFamilies = [...last.types.keys()].filter((n) => n.startsWith('temporal_'));
        if (sdkFamilies.length === 0) await sleep(200);
      }
      assert.ok(sdkFamilies.length > 0, 'the worker process serves the SDK metrics');
      assert.ok(last?.types.has('steward_turns_total'), "and Steward's");
      assert.ok(last?.samples.some((s) => s.labels.task_queue === 'telemetry-repo-only'), "its worker's task queue is in the SDK metrics");
    } finally {
      worker.kill('SIGTERM');
      await worker.exited;
    }
    assert.doesNotMatch(worker.output(), /"level":(50|60)/, 'the worker logged no error');
  });

  it('replays the traced histories with the current bundle', async () => {
    const connection = await Connection.connect({ address: temporalAddress });
    try {
      const client = new Client({ connection });
      const runs: Array<{ workflowId: string; runId?: string }> = [];
      for await (const w of client.workflow.list({ query: `WorkflowId STARTS_WITH "${sessionId}"` })) {
        if (w.status.name !== 'RUNNING') runs.push({ workflowId: w.workflowId, runId: w.runId });
      }
      assert.ok(runs.some((r) => r.workflowId === sessionId), "the session's first run (closed by /new)");
      assert.deepEqual(runs.filter((r) => r.workflowId.includes(':turn:')), [], 'no turn workflow: the turn ran inside the session');
      const bundles = { untraced: await testBundle(), traced: await testTracingBundle() };
      for (const r of runs) {
        const history = await client.workflow.getHandle(r.workflowId, r.runId).fetchHistory();
        const markers = (history.events ?? []).flatMap((e) => Object.values(e.markerRecordedEventAttributes?.details ?? {}).flatMap((p) => p.payloads ?? []));
        const marked = (patch: string) => markers.some((p) => p.data && Buffer.from(p.data).toString('utf8').includes(patch));
        // the worker's bundle traced the run: no patch decided it
        assert.ok(patchMarkers(history).some((p) => p.id === INLINE_TURN_PATCH), `${r.workflowId}: its patch markers are read`);
        assert.deepEqual(patchMarkers(history).filter((p) => p.id === OTEL_PATCH), [], `${r.workflowId} recorded no tracing patch marker`);
        // the traced turn is in this history: the inline-turn patch, the model step (which delivered the reply)
        assert.ok(marked(INLINE_TURN_PATCH), `${r.workflowId} recorded the inline-turn patch marker`);
        const activities = (history.events ?? []).map((e) => e.activityTaskScheduledEventAttributes?.activityType?.name).filter(Boolean);
        assert.ok(activities.includes('modelStep'), `${r.workflowId} scheduled the model step: ${activities.join(', ')}`);
        for (const [name, bundle] of Object.entries(bundles)) {
          await Worker.runReplayHistory({ workflowBundle: bundle, sinks: droppingWorkflowSinks(), replayName: `telemetry-replay-${name}` }, history, r.workflowId);
        }
      }
    } finally {
      await connection.close();
    }
  });

  it('shuts down cleanly, having logged no error', async () => {
    steward.kill('SIGINT');
    const { code } = await steward.exited;
    assert.equal(code, 0);
    assert.doesNotMatch(steward.output(), /"level":(50|60)/, 'no error in the log');
    assert.doesNotMatch(steward.output(), /unregistered external sink/);
  });
});

// ------------------------------------------------------------ without OTLP

describe('the started stack without OTLP configured', () => {
  let model: ModelServer;
  let steward: Spawned;
  let dataDir: string;

  before(async () => {
    model = await startModelServer();
    dataDir = mkdtempSync(path.join(tmpdir(), 'steward-telemetry-off-'));
  });

  after(async () => {
    await stopSteward(steward);
    await model?.close();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  // Without an OTLP endpoint no exporter exists and the workers run the bundle without the
  // tracing interceptors: runs load no OpenTelemetry and make no spans. The run records no tracing
  // patch marker, and replays with and without tracing. The turn runs and nothing complains
  // about sinks or exports.
  it('runs a turn untraced and logs no error', async () => {
    const ports = await freeStewardPorts();
    const started = await startSteward(stewardEnv(dataDir, ports, model, {}));
    steward = started;
    const api = started.api;
    const temporalAddress = (await steward.waitForOutput(/Temporal:\s+(\S+:\d+)/))[1] ?? '';
    model.enqueue({ text: 'untraced reply', usage: { prompt_tokens: 7, completion_tokens: 3 } });
    assert.equal((await post(api, 'quiet-chat', 'hello')).status, 202);
    const messages = await waitForReply(api, 'quiet-chat', 1);
    assert.equal(messages.at(-1)?.text, 'untraced reply');
    const connection = await Connection.connect({ address: temporalAddress });
    try {
      const history = await new Client({ connection }).workflow.getHandle('session:http:default:quiet-chat').fetchHistory();
      const markers = (history.events ?? []).flatMap((e) => Object.values(e.markerRecordedEventAttributes?.details ?? {}).flatMap((p) => p.payloads ?? []));
      const marked = (patch: string) => markers.some((p) => p.data && Buffer.from(p.data).toString('utf8').includes(patch));
      assert.ok(marked(INLINE_TURN_PATCH), 'the other patches activate as usual');
      assert.ok(patchMarkers(history).some((p) => p.id === INLINE_TURN_PATCH), 'its patch markers are read');
      assert.deepEqual(patchMarkers(history).filter((p) => p.id === OTEL_PATCH), [], 'no tracing patch marker');
      for (const [name, bundle] of Object.entries({ untraced: await testBundle(), traced: await testTracingBundle() })) {
        await Worker.runReplayHistory({ workflowBundle: bundle, sinks: droppingWorkflowSinks(), replayName: `telemetry-off-replay-${name}` }, history, 'session:http:default:quiet-chat');
      }
    } finally {
      await connection.close();
    }
    // metrics still work without traces
    const r = await fetch(`${api}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
    const { samples } = parseExposition(await r.text());
    assert.equal(sum(samples, 'steward_model_tokens_total', { kind: 'input' }), 7);
    steward.kill('SIGINT');
    assert.equal((await steward.exited).code, 0);
    assert.doesNotMatch(steward.output(), /"level":(50|60)/, 'no error in the log');
    assert.doesNotMatch(steward.output(), /sink|OpenTelemetry/i);
  });
});
