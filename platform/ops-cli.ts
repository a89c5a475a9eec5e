/**
 * The operations commands of the `steward` CLI: `receipts export` (JSONL, streamed in pages),
 * `trace` (one message's or turn's path from receipts and Temporal history: a chat turn's part of
 * its session's history, since turns run inside the session) and `doctor` (is everything
 * Steward needs there and working). Arguments are validated with zod; a bad argument prints
 * what is wrong and exits 2 without touching anything.
 */
import { readFile } from 'node:fs/promises';
import { Client } from '@temporalio/client';
import type { DataConverter } from '@temporalio/common';
import { z } from 'zod';
import { createDb } from '../domain/db.js';
import { formatWhatIf, policyWhatIf, WhatIfPolicySchema } from '../domain/changes/what-if.js';
import { createReceiptService, ExportArgsSchema, Id, Instant, wholeNumber } from '../services/receipts.js';
import { parseDuration, temporalUiBase, type StewardConfig } from '../config/index.js';
import { formatDoctor, runDoctor, tcpProbe } from './doctor.js';
import { configuredPayloadCodec } from './histories.js';
import { connectTemporal } from './temporal-server.js';
import { buildTrace, formatTrace, TraceNotFoundError } from './trace.js';
import { runCommand, UsageError as CliUsageError, type HandlersOf } from './cli-commands.js';

export interface OpsIo {
  /** The configuration (exits on an invalid one, as the other commands do). */
  config: () => StewardConfig;
  /** Write to stdout; awaited, so a slow reader holds the export back instead of filling memory. */
  out: (s: string) => void | Promise<void>;
  err: (s: string) => void;
  /** The environment doctor reads (default process.env). */
  env?: NodeJS.ProcessEnv;
  /** A data converter for trace (default: Steward's payload codec with the configured keys). */
  dataConverter?: DataConverter;
}

/** A bad argument: the message, then the command's usage, and exit 2. */
class UsageError extends CliUsageError {
  override readonly withUsage = true;
}

/** stdout with backpressure: resolves once the chunk is handed to the OS or the buffer drained. */
export function stdoutWriter(stream: NodeJS.WritableStream = process.stdout): (s: string) => Promise<void> {
  return (s) =>
    new Promise((resolve, reject) => {
      const ok = stream.write(s, (err) => {
        if (err) reject(err);
      });
      if (ok) resolve();
      else stream.once('drain', () => resolve());
    });
}

export { ExportArgsSchema, exportReceipts, parseInstant, type ExportArgs } from '../services/receipts.js';

function parse<T>(schema: z.ZodType<T>, value: unknown): T {
  const r = schema.safeParse(value);
  if (!r.success) throw new UsageError(r.error.issues.map((i) => i.message).join('; '));
  return r.data;
}

type Handlers = HandlersOf<'ops', OpsIo>;

const receiptsExport: Handlers['receipts']['export'] = async ({ values, io }) => {
  const parsed = parse(ExportArgsSchema, values);
  const cfg = io.config();
  const db = createDb(cfg.databaseUrl);
  try {
    const receipts = createReceiptService(db);
    const chat = parsed.chat ?? parsed.session;
    if (chat && !(await receipts.chatKnown(chat))) io.err(`No session has the chat id ${chat}: nothing to export.\n`);
    await receipts.export(parsed, io.out);
  } finally {
    await db.$disconnect();
  }
  return 0;
};

/** A client of the configured Temporal (TEMPORAL_ADDRESS or the embedded server), or why there is none. */
export async function openTemporal(cfg: StewardConfig, dataConverter: DataConverter | undefined): Promise<{ client: Client; close(): Promise<void> } | { error: string }> {
  const address = cfg.temporal.address ?? `127.0.0.1:${cfg.temporal.embedded.port}`;
  const probe = await tcpProbe(address, 3000);
  if (!probe.ok) return { error: `Temporal at ${address} is not reachable (${probe.error})` };
  const { connection, nativeConnection } = await connectTemporal(cfg.temporal, address);
  await nativeConnection.close().catch(() => undefined);
  // the payload codec (when keys are configured), so the turns' encrypted inputs can be read
  const codec = dataConverter ? undefined : await configuredPayloadCodec(cfg);
  const converter = dataConverter ?? (codec ? { payloadCodecs: [codec] } : undefined);
  const client = new Client({ connection, namespace: cfg.temporal.namespace, ...(converter ? { dataConverter: converter } : {}) });
  return { client, close: () => connection.close() };
}

const trace: Handlers['trace'] = async ({ args: [id], values, io }) => {
  const ref = parse(Id('id'), id);
  const chat = values.chat === undefined ? undefined : parse(Id('--chat'), values.chat);
  const cfg = io.config();
  const db = createDb(cfg.databaseUrl);
  const temporal = await openTemporal(cfg, io.dataConverter);
  const uiBase = temporalUiBase(cfg);
  try {
    const trace = await buildTrace(ref, {
      db,
      namespace: cfg.temporal.namespace,
      ...('client' in temporal ? { client: temporal.client } : {}),
      ...(uiBase ? { uiBase } : {}),
      ...(chat ? { chat } : {}),
      withData: values.json === true,
    });
    if ('error' in temporal) trace.notes.push(`${temporal.error}: the trace has the receipts only.`);
    await io.out(values.json ? `${JSON.stringify(trace, null, 2)}\n` : formatTrace(trace));
    return 0;
  } catch (err) {
    if (err instanceof TraceNotFoundError) {
      io.err(`${err.message}\n`);
      return 1;
    }
    throw err;
  } finally {
    if ('close' in temporal) await temporal.close().catch(() => undefined);
    await db.$disconnect();
  }
};

const doctor: Handlers['doctor'] = async ({ values, io }) => {
  const timeoutMs = values.timeout === undefined ? 5000 : parseDuration(values.timeout);
  if (timeoutMs === undefined || timeoutMs < 100 || timeoutMs > 120_000) throw new UsageError('--timeout: expected a duration from 100ms to 2m, such as 5s');
  const report = await runDoctor({ env: io.env ?? process.env, timeoutMs, ...(values['skip-sandbox'] ? { skipSandbox: true } : {}) });
  await io.out(values.json ? `${JSON.stringify(report, null, 2)}\n` : formatDoctor(report));
  return report.ok ? 0 : 1;
};

/** `policy what-if FILE`: past decisions under the policy in force and the file's; writes nothing. */
const whatIf: Handlers['policy']['what-if'] = async ({ args: [file = ''], values, io }) => {
  const parsed = parse(WhatIfArgsSchema, values);
  let raw: unknown;
  try {
    raw = JSON.parse(await readFile(file, 'utf8'));
  } catch (err) {
    throw new UsageError(`cannot read ${file} as JSON: ${(err as Error).message}`);
  }
  const policy = WhatIfPolicySchema.safeParse(raw);
  if (!policy.success) throw new UsageError(`${file}: ${policy.error.issues.map((i) => `${i.path.join('.') || '(file)'}: ${i.message}`).join('; ')}`);
  const cfg = io.config();
  const db = createDb(cfg.databaseUrl);
  try {
    const report = await policyWhatIf(db, {
      proposed: policy.data,
      current: { repoPolicy: cfg.repoChanges.globalPolicy, approvalTools: cfg.governance.approvalTools },
      ...(parsed.since ? { since: parsed.since } : {}),
      ...(parsed.repo ? { repo: parsed.repo } : {}),
      ...(parsed.limit ? { limit: parsed.limit } : {}),
      secret: (name) => (io.env ?? process.env)[name],
    });
    await io.out(values.json ? `${JSON.stringify(report, null, 2)}\n` : formatWhatIf(report));
  } finally {
    await db.$disconnect();
  }
  return 0;
};

const WhatIfArgsSchema = z.object({
  since: Instant('--since').optional(),
  repo: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, '--repo: a registered repository name').optional(),
  json: z.boolean().optional(),
  limit: wholeNumber('--limit', 1).optional(),
});

const HANDLERS = { receipts: { export: receiptsExport }, trace, doctor, policy: { 'what-if': whatIf } } satisfies Handlers;

/** Run `receipts [export]`, `trace`, `doctor` or `policy what-if`; returns the exit code (2 for bad arguments). */
export function opsCommand(command: 'receipts' | 'trace' | 'doctor' | 'policy', args: readonly string[], io: OpsIo): Promise<number> {
  return runCommand(command, args, io, HANDLERS);
}
