/**
 * `steward histories record`: pull real workflow histories from a Temporal server (chosen by a
 * visibility query) into the replay corpus (test/replay/histories/), in the format the replay
 * test reads: the JSON that `temporal workflow show -o json` writes, one history per file, and
 * each file's workflow id in `workflow-ids.json` (replay needs it: child ids derive from it).
 *
 * A chat's turns run inside its session workflow (since the patch `steward-inline-turn`): their
 * activities, delivery markers, steering and approval updates are in the session's history, so
 * record sessions (`StewardKind = 'session'`, or by `StewardChat`, `StewardUser`). Turn workflows
 * (`StewardKind = 'turn'`) are objective runs' turns, and chat turns of sessions that started
 * them as children before that patch. Each recorded session says which shape it has.
 *
 * Payloads are decoded through the configured payload codec before they are written, so the
 * fixtures replay without keys: recorded histories hold plaintext. Only closed runs are recorded
 * unless asked (a running workflow's history is incomplete). Nothing is overwritten unless
 * `--force`; a conflict, a rejected query or an undecodable payload writes nothing at all.
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, type Connection } from '@temporalio/client';
import type { Payload, PayloadCodec } from '@temporalio/common';
import { z } from 'zod';
import { ENCODING_ENCRYPTED, resolveCodecKeys, StewardCodec } from '../common/codec.js';
import { describeIssues } from '../common/schemas.js';
import type { StewardConfig } from '../config/index.js';
import { historyToJSON, payloadFromJSON, payloadToJSON } from './history-json.js';
import { connectTemporal } from './temporal-server.js';
import { runCommand, usageOf, type HandlersOf } from './cli-commands.js';

/** The replay corpus in this checkout. */
export const DEFAULT_HISTORIES_DIR = fileURLToPath(new URL('../test/replay/histories/', import.meta.url));
/** The file that maps each history file to its workflow id (read by test/replay/replay.test.ts). */
export const WORKFLOW_IDS_FILE = 'workflow-ids.json';
/** The metadata encoding of payloads that the encrypting codec wrote. */
export const ENCRYPTED_ENCODING = ENCODING_ENCRYPTED;

const HISTORIES_USAGE = usageOf('histories');

/** File-name kinds of Steward's workflow types (the corpus test and replay test rely on them). */
const KIND_OF_TYPE: Record<string, string> = {
  sessionWorkflow: 'session',
  turnWorkflow: 'turn',
  objectiveRunWorkflow: 'objective',
  repoChangeWorkflow: 'change',
  workspaceIndexWorkflow: 'workspace',
  triageWorkflow: 'triage',
  taskReminderWorkflow: 'reminder',
};

export function fixtureKind(workflowType: string): string {
  return KIND_OF_TYPE[workflowType] ?? (workflowType.replace(/[^A-Za-z0-9]+/g, '-').toLowerCase() || 'workflow');
}

/** `turn-rec-9b9b4f5da37f.json`: kind, prefix and the last 12 hex digits of the run id (random in UUID v4 and v7). */
export function fixtureName(workflowType: string, prefix: string, runId: string): string {
  return `${fixtureKind(workflowType)}-${prefix}-${runId.replace(/[^0-9a-fA-F]/g, '').slice(-12).toLowerCase()}.json`;
}

export const RecordOptionsSchema = z.object({
  query: z.string().trim().min(1, "expected a visibility query, e.g. --query \"WorkflowType='sessionWorkflow' AND StewardChat='chat-1'\""),
  limit: z.coerce
    .number({ error: 'expected a whole number of histories (1-1000)' })
    .int('expected a whole number of histories (1-1000)')
    .min(1, 'expected a whole number of histories (1-1000)')
    .max(1000, 'expected a whole number of histories (1-1000)')
    .default(20),
  out: z.string().trim().min(1, 'expected a directory').default(DEFAULT_HISTORIES_DIR),
  prefix: z
    .string()
    .trim()
    .regex(/^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$/, 'expected letters, digits, - or _ (up to 40, no path separators), e.g. --prefix prod')
    .default('rec'),
  includeRunning: z.boolean().default(false),
  force: z.boolean().default(false),
});
export type RecordOptions = z.input<typeof RecordOptionsSchema>;

/** A refusal the operator can act on: nothing was written. */
export class HistoriesError extends Error {}

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type JsonObject = { [k: string]: Json };

const isObject = (v: Json | undefined): v is JsonObject => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Everything in a history (as proto JSON) shaped like a Payload: an object with a `metadata`
 * map of base64 strings that holds `encoding`, an optional base64 `data` and nothing else but
 * `externalPayloads`. Found wherever it sits (inputs, results, failures, headers, memos,
 * update and signal arguments, user metadata), without a list of event types to keep up to date.
 */
export function findPayloads(node: Json, found: JsonObject[] = []): JsonObject[] {
  if (Array.isArray(node)) {
    for (const v of node) findPayloads(v, found);
  } else if (isObject(node)) {
    if (isPayloadJson(node)) found.push(node);
    else for (const v of Object.values(node)) findPayloads(v, found);
  }
  return found;
}

function isPayloadJson(o: JsonObject): boolean {
  const meta = o.metadata;
  if (!isObject(meta) || typeof meta.encoding !== 'string') return false;
  if (!Object.values(meta).every((v) => typeof v === 'string')) return false;
  if (o.data !== undefined && typeof o.data !== 'string') return false;
  return Object.keys(o).every((k) => k === 'metadata' || k === 'data' || k === 'externalPayloads');
}

/** The `encoding` of a Payload in proto JSON (its metadata values are base64). */
export function payloadEncoding(p: JsonObject): string | undefined {
  const meta = p.metadata;
  return isObject(meta) && typeof meta.encoding === 'string' ? Buffer.from(meta.encoding, 'base64').toString('utf8') : undefined;
}

/**
 * Decode every payload of a history (proto JSON, changed in place) through the codec, in one
 * batch. Returns how many payloads it holds and how many the codec changed.
 */
export async function decodeHistoryPayloads(history: Json, codec: PayloadCodec): Promise<{ payloads: number; decoded: number }> {
  const found = findPayloads(history);
  if (found.length === 0) return { payloads: 0, decoded: 0 };
  const protos: Payload[] = found.map((p) => payloadFromJSON(p) as Payload);
  const decoded = await codec.decode(protos);
  if (decoded.length !== found.length) throw new Error(`the payload codec returned ${decoded.length} payloads for ${found.length}`);
  let changed = 0;
  found.forEach((target, i) => {
    const next = payloadToJSON(decoded[i]!) as JsonObject;
    const before = JSON.stringify(target);
    for (const k of Object.keys(target)) delete target[k];
    Object.assign(target, next);
    if (JSON.stringify(target) !== before) changed++;
  });
  return { payloads: found.length, decoded: changed };
}

/**
 * The payload codec that recorded histories are decoded through: Steward's codec
 * (common/codec.ts) with this configuration's keyring (STEWARD_CODEC_KEYS, else
 * `<data dir>/codec-keys.json`; never generated here). Undefined when there are no keys, so an
 * encrypted payload is then refused. Decoding works with STEWARD_CODEC=off too (old runs).
 */
export async function configuredPayloadCodec(cfg: StewardConfig): Promise<PayloadCodec | undefined> {
  const { keys } = await resolveCodecKeys({ ...(cfg.codec.keys ? { keys: cfg.codec.keys } : {}), dataDir: cfg.dataDir, generate: false });
  return keys.length > 0 ? new StewardCodec({ keys, encrypt: false }) : undefined;
}

export interface RecordedHistory {
  file: string;
  workflowId: string;
  runId: string;
  type: string;
  status: string;
  events: number;
  payloads: number;
  decoded: number;
  /** Sessions: the turns their history ran inside itself, and the child turn workflows it started. */
  turns?: SessionTurns;
}

export interface SessionTurns {
  /** Turns that ran inside the session (patch `steward-inline-turn`): distinct turn ids of its model steps. */
  inline: number;
  /** Turns started as child turn workflows (sessions from before that patch). */
  children: number;
}

/** A Payload's value in proto JSON when it is plain JSON (undefined otherwise). */
function plainJson(p: Json | undefined): Json | undefined {
  if (!isObject(p) || payloadEncoding(p) !== 'json/plain' || typeof p.data !== 'string') return undefined;
  try {
    return JSON.parse(Buffer.from(p.data, 'base64').toString('utf8')) as Json;
  } catch {
    return undefined;
  }
}

/**
 * How a session history (proto JSON, payloads decoded) ran its turns: inside itself (the turn
 * ids in its model steps' inputs) or as child turn workflows.
 */
export function sessionTurns(history: Json): SessionTurns {
  const events = isObject(history) && Array.isArray(history.events) ? history.events : [];
  const inline = new Set<string>();
  let children = 0;
  for (const e of events) {
    if (!isObject(e)) continue;
    if (e.eventType === 'EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED') {
      const a = e.startChildWorkflowExecutionInitiatedEventAttributes;
      if (isObject(a) && isObject(a.workflowType) && a.workflowType.name === 'turnWorkflow') children++;
    } else if (e.eventType === 'EVENT_TYPE_ACTIVITY_TASK_SCHEDULED') {
      const a = e.activityTaskScheduledEventAttributes;
      if (!isObject(a) || !isObject(a.activityType) || a.activityType.name !== 'modelStep' || !isObject(a.input) || !Array.isArray(a.input.payloads)) continue;
      const input = plainJson(a.input.payloads[0]);
      if (isObject(input) && typeof input.turnId === 'string') inline.add(input.turnId);
    }
  }
  return { inline: inline.size, children };
}

export interface RecordResult {
  outDir: string;
  written: RecordedHistory[];
  /** Runs that matched but were still running (skipped unless includeRunning). */
  skippedRunning: Array<{ workflowId: string; runId: string; type: string }>;
  replaced: string[];
}

const MAX_SCANNED = 10_000;
const WorkflowIdsSchema = z.record(z.string(), z.string());

/**
 * Record the histories of runs matching the query into `out`. All or nothing: histories are
 * fetched and decoded first; a conflict with an existing file (without force), a rejected query
 * or a payload still encrypted after decoding throws HistoriesError and writes nothing.
 */
export async function recordHistories(client: Client, input: RecordOptions, deps: { codec?: PayloadCodec } = {}): Promise<RecordResult> {
  const parsed = RecordOptionsSchema.safeParse(input);
  if (!parsed.success) throw new HistoriesError(describeIssues(parsed.error));
  const opts = parsed.data;
  const outDir = path.resolve(opts.out);

  // 1. the runs: the first `limit` closed ones the query matches (newest first, as listed)
  const picked: Array<{ workflowId: string; runId: string; type: string; status: string; startTime: Date }> = [];
  const skippedRunning: RecordResult['skippedRunning'] = [];
  let scanned = 0;
  try {
    for await (const wf of client.workflow.list({ query: opts.query, pageSize: Math.min(1000, opts.limit * 2 + 10) })) {
      if (++scanned > MAX_SCANNED) break;
      const open = wf.status.name === 'RUNNING' || wf.status.name === 'PAUSED';
      if (open && !opts.includeRunning) {
        skippedRunning.push({ workflowId: wf.workflowId, runId: wf.runId, type: wf.type });
        continue;
      }
      picked.push({ workflowId: wf.workflowId, runId: wf.runId, type: wf.type, status: wf.status.name, startTime: wf.startTime });
      if (picked.length >= opts.limit) break;
    }
  } catch (err) {
    throw new HistoriesError(`the server rejected the visibility query ${JSON.stringify(opts.query)}: ${errorText(err)}`);
  }
  if (picked.length === 0) return { outDir, written: [], skippedRunning, replaced: [] };

  // 2. their histories, decoded, in start order; named `<kind>-<prefix>-<run>.json` (the
  // random end of the run id), so one run gets the same name however often it is recorded
  picked.sort((a, b) => a.startTime.getTime() - b.startTime.getTime());
  const files: Array<{ rec: RecordedHistory; text: string }> = [];
  for (const run of picked) {
    const history = await client.workflow.getHandle(run.workflowId, run.runId).fetchHistory();
    const json = JSON.parse(historyToJSON(history)) as Json;
    let counts = { payloads: findPayloads(json).length, decoded: 0 };
    if (deps.codec) {
      try {
        counts = await decodeHistoryPayloads(json, deps.codec);
      } catch (err) {
        throw new HistoriesError(`could not decode the payloads of ${run.workflowId} (run ${run.runId}) with the configured codec: ${errorText(err)}`);
      }
    }
    const stillEncrypted = findPayloads(json).filter((p) => payloadEncoding(p) === ENCRYPTED_ENCODING).length;
    if (stillEncrypted > 0) {
      throw new HistoriesError(
        `${stillEncrypted} payload(s) of ${run.workflowId} (run ${run.runId}) are encrypted (${ENCRYPTED_ENCODING}) and ` +
          (deps.codec ? 'the configured codec could not decrypt them (is the key that wrote them configured?)' : 'no payload codec is configured: configure the codec keys that wrote them') +
          '. An encrypted history cannot be replayed without keys, so nothing was written.',
      );
    }
    const file = fixtureName(run.type, opts.prefix, run.runId);
    const events = Array.isArray((json as JsonObject).events) ? ((json as JsonObject).events as Json[]).length : 0;
    const turns = run.type === 'sessionWorkflow' ? { turns: sessionTurns(json) } : {};
    files.push({ rec: { file, workflowId: run.workflowId, runId: run.runId, type: run.type, status: run.status, events, ...counts, ...turns }, text: `${JSON.stringify(json, null, 2)}\n` });
  }

  // 3. never replace a fixture silently
  const replaced = files.map((f) => f.rec.file).filter((f) => existsSync(path.join(outDir, f)));
  if (replaced.length > 0 && !opts.force) {
    throw new HistoriesError(
      `${replaced.length} file(s) already exist in ${outDir}: ${replaced.join(', ')}. ` +
        'Choose another --prefix, or pass --force to replace them. Nothing was written.',
    );
  }

  // 4. the existing id index must be readable before anything is written
  const indexPath = path.join(outDir, WORKFLOW_IDS_FILE);
  let index: Record<string, string> = {};
  if (existsSync(indexPath)) {
    let parsedIndex: unknown;
    try {
      parsedIndex = JSON.parse(await readFile(indexPath, 'utf8'));
    } catch (err) {
      throw new HistoriesError(`${indexPath} is not JSON (${errorText(err)}): fix it or choose another --out. Nothing was written.`);
    }
    const checked = WorkflowIdsSchema.safeParse(parsedIndex);
    if (!checked.success) throw new HistoriesError(`${indexPath} is not a map of file names to workflow ids: fix it or choose another --out. Nothing was written.`);
    index = checked.data;
  }

  // 5. write the files, then the id index (each through a temporary file and a rename)
  await mkdir(outDir, { recursive: true });
  for (const f of files) {
    await writeAtomic(path.join(outDir, f.rec.file), f.text);
    index[f.rec.file] = f.rec.workflowId;
  }
  const sorted = Object.fromEntries(Object.entries(index).sort(([a], [b]) => a.localeCompare(b)));
  await writeAtomic(indexPath, `${JSON.stringify(sorted, null, 2)}\n`);
  return { outDir, written: files.map((f) => f.rec), skippedRunning, replaced };
}

async function writeAtomic(file: string, text: string): Promise<void> {
  const tmp = `${file}.${process.pid}.tmp`;
  await writeFile(tmp, text);
  await rename(tmp, file);
}

function errorText(err: unknown): string {
  const e = err as { details?: unknown; message?: unknown };
  return typeof e?.details === 'string' && e.details ? e.details : err instanceof Error ? err.message : String(err);
}

function describeTurns(t: SessionTurns): string {
  const n = (k: number, what: string) => `${k} ${what}${k === 1 ? '' : 's'}`;
  if (t.children === 0) return `${n(t.inline, 'turn')} inside the session`;
  if (t.inline === 0) return n(t.children, 'child turn workflow');
  return `${n(t.inline, 'turn')} inside the session, ${n(t.children, 'child turn workflow')}`;
}

export interface HistoriesIo {
  config: () => StewardConfig;
  out: (s: string) => void;
  err: (s: string) => void;
}

/** `steward histories record ...` (commander parses it from the command table): 0 written, 1 nothing to record or failed, 2 bad arguments. */
const record: HandlersOf<'histories', HistoriesIo>['histories']['record'] = async ({ values, io }) => {
  const opts = RecordOptionsSchema.safeParse({
    query: values.query ?? '',
    ...(values.limit !== undefined ? { limit: values.limit } : {}),
    ...(values.out !== undefined ? { out: path.resolve(values.out) } : {}),
    ...(values.prefix !== undefined ? { prefix: values.prefix } : {}),
    includeRunning: values['include-running'] ?? false,
    force: values.force ?? false,
  });
  if (!opts.success) {
    io.err(`steward histories record: ${describeIssues(opts.error)}\nUsage: ${HISTORIES_USAGE}\n`);
    return 2;
  }

  const cfg = io.config();
  const address = cfg.temporal.address ?? `127.0.0.1:${cfg.temporal.embedded.port}`;
  let connection: Connection;
  let closeNative: () => Promise<void>;
  try {
    const c = await connectTemporal(cfg.temporal, address);
    connection = c.connection;
    closeNative = () => c.nativeConnection.close();
  } catch (err) {
    io.err(`steward histories record: cannot reach Temporal at ${address} (namespace ${cfg.temporal.namespace}): ${errorText(err)}. Set TEMPORAL_ADDRESS (and TLS or TEMPORAL_API_KEY) to the server that ran the workflows.\n`);
    return 1;
  }
  try {
    const codec = await configuredPayloadCodec(cfg);
    const client = new Client({ connection, namespace: cfg.temporal.namespace, ...(codec ? { dataConverter: { payloadCodecs: [codec] } } : {}) });
    const result = await recordHistories(client, opts.data, codec ? { codec } : {});
    for (const s of result.skippedRunning) {
      io.out(`skipped ${s.workflowId} (run ${s.runId}, ${s.type}): still running, its history is incomplete (pass --include-running to record it anyway)\n`);
    }
    if (result.written.length === 0) {
      io.err(`Nothing recorded: no ${opts.data.includeRunning ? '' : 'closed '}workflow on ${address} (namespace ${cfg.temporal.namespace}) matched ${JSON.stringify(opts.data.query)}.\n`);
      return 1;
    }
    for (const w of result.written) {
      const replacedNote = result.replaced.includes(w.file) ? ', replaced' : '';
      io.out(`wrote ${path.join(result.outDir, w.file)} (${w.type} ${w.workflowId}, run ${w.runId}, ${w.status}, ${w.events} events, ${w.payloads} payloads${codec ? `, ${w.decoded} decoded` : ''}${w.turns ? `, ${describeTurns(w.turns)}` : ''}${replacedNote})\n`);
    }
    io.out(`Recorded ${result.written.length} histor${result.written.length === 1 ? 'y' : 'ies'} into ${result.outDir} (workflow ids in ${WORKFLOW_IDS_FILE}).\n`);
    io.out(
      codec
        ? 'Note: payloads were decoded through the configured codec, so these files hold PLAINTEXT (messages, tool arguments, results). Review them before you commit them.\n'
        : 'Note: no payload codec is configured, so payloads were written as stored; these files hold PLAINTEXT (messages, tool arguments, results). Review them before you commit them.\n',
    );
    return 0;
  } catch (err) {
    if (err instanceof HistoriesError) {
      io.err(`steward histories record: ${err.message}\n`);
      return 1;
    }
    throw err;
  } finally {
    await connection.close();
    await closeNative();
  }
};

/** `steward histories ...`: returns the exit code (0 written, 1 nothing to record or failed, 2 bad arguments). */
export function historiesCommand(args: readonly string[], io: HistoriesIo): Promise<number> {
  return runCommand('histories', args, io, { histories: { record } } satisfies HandlersOf<'histories', HistoriesIo>);
}
