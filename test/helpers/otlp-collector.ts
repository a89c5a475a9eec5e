/**
 * A loopback OTLP/HTTP collector double: accepts `POST /v1/traces` in OTLP's JSON encoding
 * (what @opentelemetry/exporter-trace-otlp-http sends by default, gzip or not), validates
 * it and keeps the spans, with their resource attributes, for tests to look at. Anything
 * else (another path, protobuf, a body that is not an OTLP request) is answered with an
 * error and remembered in `rejected`.
 */
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { gunzipSync } from 'node:zlib';
import { z } from 'zod';

type AnyValueT = { stringValue?: string; boolValue?: boolean; intValue?: string | number; doubleValue?: number; arrayValue?: { values?: AnyValueT[] }; kvlistValue?: { values?: Array<{ key: string; value?: AnyValueT }> } };
const AnyValue: z.ZodType<AnyValueT> = z.lazy(() =>
  z.object({
    stringValue: z.string().optional(),
    boolValue: z.boolean().optional(),
    intValue: z.union([z.string(), z.number()]).optional(),
    doubleValue: z.number().optional(),
    arrayValue: z.object({ values: z.array(AnyValue).optional() }).optional(),
    kvlistValue: z.object({ values: z.array(z.object({ key: z.string(), value: AnyValue.optional() })).optional() }).optional(),
  }),
);
const KeyValues = z.array(z.object({ key: z.string(), value: AnyValue.optional() })).optional();
const Hex = (len: number) => z.string().regex(new RegExp(`^[0-9a-f]{${len}}$`), `expected ${len} hex digits`);

const Span = z.object({
  traceId: Hex(32),
  spanId: Hex(16),
  parentSpanId: z.union([Hex(16), z.literal('')]).optional(),
  name: z.string().min(1),
  kind: z.number().int().optional(),
  startTimeUnixNano: z.union([z.string(), z.number()]),
  endTimeUnixNano: z.union([z.string(), z.number()]),
  attributes: KeyValues,
  status: z.object({ code: z.number().int().optional(), message: z.string().optional() }).optional(),
});

export const ExportTraceRequest = z.object({
  resourceSpans: z.array(
    z.object({
      resource: z.object({ attributes: KeyValues }).optional(),
      scopeSpans: z.array(z.object({ scope: z.object({ name: z.string().optional() }).optional(), spans: z.array(Span) })),
    }),
  ),
});

export interface CollectedSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind?: number;
  scope?: string;
  startNs: bigint;
  endNs: bigint;
  statusCode?: number;
  attributes: Record<string, unknown>;
  resource: Record<string, unknown>;
}

export interface OtlpCollector {
  /** The base URL (OTEL_EXPORTER_OTLP_ENDPOINT). */
  url: string;
  readonly spans: CollectedSpan[];
  /** Requests not taken, with the reason. */
  readonly rejected: Array<{ method: string; path: string; contentType: string; reason: string }>;
  /** Export requests taken. */
  readonly requests: number;
  /** Wait until `check` returns a value for the spans so far (bounded). */
  waitFor<T>(check: (spans: CollectedSpan[]) => T | undefined, what: string, timeoutMs?: number): Promise<T>;
  close(): Promise<void>;
}

function plain(v: AnyValueT | undefined): unknown {
  if (!v) return undefined;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.arrayValue) return (v.arrayValue.values ?? []).map(plain);
  if (v.kvlistValue) return Object.fromEntries((v.kvlistValue.values ?? []).map((kv) => [kv.key, plain(kv.value)]));
  return undefined;
}
const attrs = (kvs: z.infer<typeof KeyValues>) => Object.fromEntries((kvs ?? []).map((kv) => [kv.key, plain(kv.value)]));

async function readBody(req: IncomingMessage, max = 16 * 1024 * 1024): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    const b = c as Buffer;
    size += b.length;
    if (size > max) throw new Error('body too large');
    chunks.push(b);
  }
  return Buffer.concat(chunks);
}

export async function startOtlpCollector(): Promise<OtlpCollector> {
  const spans: CollectedSpan[] = [];
  const rejected: OtlpCollector['rejected'] = [];
  let requests = 0;
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    const contentType = req.headers['content-type'] ?? '';
    const reject = (status: number, reason: string) => {
      rejected.push({ method: req.method ?? '', path, contentType, reason });
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: reason }));
    };
    if (req.method !== 'POST' || path !== '/v1/traces') {
      req.resume();
      return reject(404, `not a traces export: ${req.method} ${path}`);
    }
    if (!/^application\/json\b/i.test(contentType)) {
      req.resume();
      return reject(415, `only OTLP/JSON is understood here, got ${contentType || 'no content type'}`);
    }
    readBody(req).then(
      (raw) => {
        let parsed: z.infer<typeof ExportTraceRequest>;
        try {
          const body = req.headers['content-encoding'] === 'gzip' ? gunzipSync(raw) : raw;
          const r = ExportTraceRequest.safeParse(JSON.parse(body.toString('utf8')));
          if (!r.success) return reject(400, `not an OTLP trace export: ${r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).slice(0, 3).join('; ')}`);
          parsed = r.data;
        } catch (err) {
          return reject(400, `unreadable body: ${(err as Error).message}`);
        }
        requests++;
        for (const rs of parsed.resourceSpans) {
          const resource = attrs(rs.resource?.attributes);
          for (const ss of rs.scopeSpans) {
            for (const s of ss.spans) {
              spans.push({
                traceId: s.traceId,
                spanId: s.spanId,
                ...(s.parentSpanId ? { parentSpanId: s.parentSpanId } : {}),
                name: s.name,
                ...(s.kind !== undefined ? { kind: s.kind } : {}),
                ...(ss.scope?.name ? { scope: ss.scope.name } : {}),
                startNs: BigInt(s.startTimeUnixNano),
                endNs: BigInt(s.endTimeUnixNano),
                ...(s.status?.code !== undefined ? { statusCode: s.status.code } : {}),
                attributes: attrs(s.attributes),
                resource,
              });
            }
          }
        }
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"partialSuccess":{}}');
        return undefined;
      },
      (err: unknown) => reject(413, (err as Error).message),
    );
    return undefined;
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    rejected,
    get requests() {
      return requests;
    },
    async waitFor(check, what, timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const v = check(spans);
        if (v !== undefined && v !== false) return v;
        if (Date.now() > deadline) {
          throw new Error(`timed out waiting for ${what}; spans so far: ${JSON.stringify(spans.map((s) => s.name))}`);
        }
        await sleep(100);
      }
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
