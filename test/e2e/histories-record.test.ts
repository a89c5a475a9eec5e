/**
 * `steward histories record` end to end: real chats and an objective run on the Temporal dev
 * server (the real worker, the scripted model), then the real CLI (`node --import tsx
 * platform/main.ts histories record ...`) pulls their histories by a visibility query into a
 * directory. A chat's turns are in its session's history (they run inside it, patch
 * `steward-inline-turn`); the objective run's turn is a child turn workflow of its own. The files
 * parse, name their workflow ids in workflow-ids.json and replay against the workflow bundle;
 * running runs are skipped; an existing file is not replaced without --force; a bad query or bad
 * arguments write nothing. Runs whose payloads are encrypted by Steward's codec come out
 * decoded with the keys (and are refused without them).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Client } from '@temporalio/client';
import { Worker } from '@temporalio/worker';
import { createModelRegistry } from '../../domain/model.js';
import { createIngress } from '../../services/chat/intake.js';
import { codecDataConverter, formatCodecKeys, generateCodecKey, StewardCodec } from '../../common/codec.js';
import { sessionWorkflowId } from '../../common/ids.js';
import { DEFAULT_SYSTEM_PROMPT } from '../../config/index.js';
import { ENCRYPTED_ENCODING, findPayloads, payloadEncoding } from '../../platform/histories.js';
import { historyToJSON } from '../../platform/history-json.js';
import { droppingWorkflowSinks } from '../../platform/telemetry.js';
import { createStewardWorker } from '../../workers/main.js';
import { lastUserText } from '../helpers/model-server.js';
import { spawnProcess } from '../helpers/process.js';
import { testBundle, useStack, waitFor, withHarness } from '../helpers/steward.js';

type Json = Parameters<typeof findPayloads>[0];

/** Run the real CLI; resolves with its exit code and output. */
async function record(args: string[], env: Record<string, string>): Promise<{ code: number | null; out: string }> {
  const base: NodeJS.ProcessEnv = { ...process.env };
  for (const k of Object.keys(base)) if (k.startsWith('STEWARD_') || k.startsWith('TEMPORAL_') || k === 'DATABASE_URL') delete base[k];
  const p = spawnProcess(process.execPath, ['--import', 'tsx', 'platform/main.ts', 'histories', 'record', ...args], { ...base, STEWARD_LOG_LEVEL: 'warn', ...env });
  const timer = setTimeout(() => p.kill('SIGKILL'), 120_000);
  const { code } = await p.exited;
  clearTimeout(timer);
  return { code, out: p.output() };
}

/** The files of a recording directory with their parsed histories. */
function readRecording(dir: string): { ids: Record<string, string>; files: Array<{ file: string; json: { events: Array<Record<string, unknown>> } }> } {
  const ids = JSON.parse(readFileSync(path.join(dir, 'workflow-ids.json'), 'utf8')) as Record<string, string>;
  const files = readdirSync(dir)
    .filter((f) => f !== 'workflow-ids.json')
    .sort()
    .map((file) => ({ file, json: JSON.parse(readFileSync(path.join(dir, file), 'utf8')) as { events: Array<Record<string, unknown>> } }));
  return { ids, files };
}

async function replayAll(dir: string): Promise<number> {
  const { ids, files } = readRecording(dir);
  let replayed = 0;
  const histories = files.map((f) => ({ workflowId: ids[f.file] ?? f.file, history: f.json as unknown }));
  // the bundle's workflow interceptors call the `exporter` sink: registered (dropping), as workers do
  for await (const r of Worker.runReplayHistories({ workflowBundle: await testBundle(), replayName: 'histories-record-e2e', sinks: droppingWorkflowSinks() }, histories)) {
    assert.equal(r.error, undefined, `${r.workflowId}: ${String(r.error)}`);
    replayed++;
  }
  return replayed;
}

/** Every payload's data, decoded from base64, joined: what a reader of the file can see. */
function payloadText(history: unknown): string {
  return findPayloads(history as Json)
    .map((p) => (typeof p.data === 'string' ? Buffer.from(p.data, 'base64').toString('utf8') : ''))
    .join('\n');
}

const typeOf = (f: { json: { events: Array<Record<string, unknown>> } }) =>
  (f.json.events[0]?.workflowExecutionStartedEventAttributes as { workflowType?: { name?: string } } | undefined)?.workflowType?.name;

/** The decoded JSON value of a plain payload in a recorded (decoded) history. */
const plain = (p: unknown): unknown => {
  const d = (p as { data?: string } | undefined)?.data;
  return d ? JSON.parse(Buffer.from(d, 'base64').toString('utf8')) : undefined;
};
type Ev = Record<string, unknown> & { eventType?: string };
/** Child workflows a history started (their workflow types). */
const childTypes = (f: { json: { events: Ev[] } }) =>
  f.json.events
    .filter((e) => e.eventType === 'EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED')
    .map((e) => (e.startChildWorkflowExecutionInitiatedEventAttributes as { workflowType?: { name?: string } }).workflowType?.name);
/** The turns that ran inside a session history: each model step's turn id, step and Temporal UI summary. */
const inlineSteps = (f: { json: { events: Ev[] } }) =>
  f.json.events
    .filter((e) => e.eventType === 'EVENT_TYPE_ACTIVITY_TASK_SCHEDULED' && (e.activityTaskScheduledEventAttributes as { activityType?: { name?: string } }).activityType?.name === 'modelStep')
    .map((e) => {
      const input = plain((e.activityTaskScheduledEventAttributes as { input?: { payloads?: unknown[] } }).input?.payloads?.[0]) as { turnId: string; step: number };
      return { turnId: input.turnId, step: input.step, summary: plain((e.userMetadata as { summary?: unknown } | undefined)?.summary) as string | undefined };
    });
/** The patches a history records (`core_patch` markers). */
const patches = (f: { json: { events: Ev[] } }) =>
  f.json.events
    .filter((e) => e.eventType === 'EVENT_TYPE_MARKER_RECORDED' && (e.markerRecordedEventAttributes as { markerName?: string }).markerName === 'core_patch')
    .map((e) => (plain((e.markerRecordedEventAttributes as { details?: Record<string, { payloads?: unknown[] }> }).details?.['patch-data']?.payloads?.[0]) as { id?: string }).id);

describe('steward histories record', () => {
  const stack = useStack();
  const dirs: string[] = [];
  const tmp = (name: string) => {
    const d = mkdtempSync(path.join(tmpdir(), `steward-hist-${name}-`));
    dirs.push(d);
    return d;
  };
  let cliEnv: Record<string, string>;
  /** Visibility is eventually consistent: wait until the query lists `n` closed runs. */
  const closedRuns = async (query: string, n: number) => {
    let seen: string[] = [];
    try {
      await waitFor(async () => {
        seen = [];
        for await (const wf of stack.env.client.workflow.list({ query })) seen.push(`${wf.type} ${wf.workflowId} ${wf.status.name}`);
        return seen.filter((x) => !x.endsWith(' RUNNING')).length >= n ? true : undefined;
      }, 'visibility', 30_000);
    } catch {
      throw new Error(`visibility did not list ${n} closed runs for ${query}: ${JSON.stringify(seen)}`);
    }
  };
  before(() => {
    cliEnv = { TEMPORAL_ADDRESS: stack.env.address, TEMPORAL_NAMESPACE: 'default', STEWARD_DATA_DIR: tmp('data') };
  });
  after(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it('records closed runs by query (a session with its turns inside, an objective run with its child turn), skips running ones, refuses to overwrite, replays', async () => {
    const m = stack.model;
    m.setDefault((req) => {
      const msgs = (req.body as { messages?: Array<{ role: string }> }).messages ?? [];
      const text = lastUserText(req.body);
      if (text.includes('remember') && msgs.at(-1)?.role !== 'tool') {
        return { toolCalls: [{ id: 'call_note', name: 'save_note', arguments: JSON.stringify({ note: 'likes tea' }) }] };
      }
      return { text: `echo: ${text}` };
    });
    const chatA = `hist-a-${randomUUID().slice(0, 8)}`;
    const chatB = `hist-b-${randomUUID().slice(0, 8)}`;
    const query = `StewardChat = '${chatA}' OR StewardChat = '${chatB}'`;
    let sessionA = '';
    let sessionB = '';
    let objectiveTurn = '';
    await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: m.baseURL } } }, async (h) => {
      sessionA = h.sessionIdOf(chatA);
      sessionB = h.sessionIdOf(chatB);
      await h.send('hello there', { chatId: chatA });
      await h.waitForMessage((x) => x.role === 'assistant' && x.text.startsWith('echo:') && x.text.includes('hello there'), { chatId: chatA });
      await h.send('remember that I like tea', { chatId: chatA });
      await h.waitForMessage((x) => x.role === 'assistant' && x.text.startsWith('echo:') && x.text.includes('remember that I like tea'), { chatId: chatA, timeoutMs: 30_000 });
      await h.send('/new', { chatId: chatA });
      await h.waitForMessage((x) => x.text.startsWith('New task started'), { chatId: chatA });
      // an objective that posts into chat A: its run starts its turn as a child workflow
      const op = { id: 'operator', name: 'the operator' };
      const o = await h.objectives.create({ name: `hist-${randomUUID().slice(0, 8)}`, prompt: 'Write the digest', chatId: chatA, account: h.account, schedule: { cron: '0 9 * * *', timezone: 'UTC' }, paused: true }, op);
      await h.objectives.trigger(o.id, op);
      const run = await waitFor(async () => {
        const r = await stack.db.objectiveRun.findFirst({ where: { objectiveId: o.id } });
        return r && r.status !== 'running' && r.turnId ? r : undefined;
      }, 'the objective run', 60_000);
      objectiveTurn = run.turnId!;
      await stack.env.client.workflow.getHandle(run.id).result();
      await h.objectives.remove(o.id, op);
      // chat B: one turn, its session left running
      await h.send('still here', { chatId: chatB });
      await h.waitForMessage((x) => x.role === 'assistant' && x.text.startsWith('echo:') && x.text.includes('still here'), { chatId: chatB });
      // the worker runs until the session has continued as new (after its notice went out)
      await closedRuns(query, 3);
    });

    const out = tmp('out');
    const r = await record(['--query', query, '--out', out, '--prefix', 'e2e'], cliEnv);
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /PLAINTEXT/);
    assert.ok(r.out.includes(`skipped ${sessionB} (run `) && r.out.includes('sessionWorkflow): still running'), r.out);
    const { ids, files } = readRecording(out);
    // chat A: the session run closed by /new, with its two turns inside; the objective run and its turn
    assert.equal(files.length, 3, files.map((f) => f.file).join(', '));
    for (const f of files) assert.match(f.file, /^(session|objective|turn)-e2e-[0-9a-f]{12}\.json$/);
    const sessions = files.filter((f) => typeOf(f) === 'sessionWorkflow');
    const objectives = files.filter((f) => typeOf(f) === 'objectiveRunWorkflow');
    const turns = files.filter((f) => typeOf(f) === 'turnWorkflow');
    assert.deepEqual([sessions.length, objectives.length, turns.length], [1, 1, 1]);
    const session = sessions[0]!;
    assert.ok(session.file.startsWith('session-') && objectives[0]!.file.startsWith('objective-') && turns[0]!.file.startsWith('turn-'));
    assert.equal(ids[session.file], sessionA);
    assert.equal(ids[turns[0]!.file], objectiveTurn);
    assert.ok(!Object.values(ids).some((id) => id.startsWith(`${sessionA}:turn:`) || id.startsWith(`${sessionB}:turn:`)), 'no chat turn is a workflow of its own');
    // the session ran its turns inside itself: no child, the patch marker, each turn's model steps with their UI summaries
    assert.deepEqual(childTypes(session), []);
    assert.ok(patches(session).includes('steward-inline-turn'), `patches: ${patches(session).join(', ')}`);
    const steps = inlineSteps(session);
    const turnIds = [...new Set(steps.map((s) => s.turnId))];
    assert.equal(turnIds.length, 2, JSON.stringify(steps));
    assert.match(turnIds[0]!, new RegExp(`^${sessionA.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:turn:1:[0-9a-f]{8}$`));
    assert.deepEqual(steps.map((s) => s.summary), ['Turn 1: model step 1 (openai-compatible:test-model)', 'Turn 2: model step 1 (openai-compatible:test-model)', 'Turn 2: model step 2 (openai-compatible:test-model)']);
    assert.ok(payloadText(session.json).includes('save_note'), 'the session ran the save_note tool (its runTool input names the call)');
    assert.ok(patches(session).includes('steward-deliver-in-step'), `patches: ${patches(session).join(', ')}`);
    assert.ok(payloadText(session.json).includes('"delivered":true'), "a turn's reply delivered by its last model step (its decoded result)");
    assert.ok(r.out.includes(`${session.file} (sessionWorkflow ${sessionA}`) && /session-e2e-[0-9a-f]{12}\.json .*, 2 turns inside the session\)/.test(r.out), r.out);
    // the objective run still starts its turn as a child workflow
    assert.deepEqual(childTypes(objectives[0]!), ['turnWorkflow']);
    for (const f of files) {
      assert.ok(r.out.includes(`wrote ${path.join(out, f.file)}`), `the output names ${f.file}`);
      assert.equal(f.json.events[0]?.eventType, 'EVENT_TYPE_WORKFLOW_EXECUTION_STARTED');
      const startedId = (f.json.events[0]?.workflowExecutionStartedEventAttributes as { workflowId?: string } | undefined)?.workflowId;
      assert.equal(ids[f.file], startedId, `${f.file}'s workflow id is in workflow-ids.json`);
    }
    assert.equal(await replayAll(out), 3);

    // again: the files exist, so nothing is replaced (and nothing else is written)
    const someFile = path.join(out, turns[0]!.file);
    const before = statSync(someFile).mtimeMs;
    const again = await record(['--query', query, '--out', out, '--prefix', 'e2e'], cliEnv);
    assert.equal(again.code, 1, again.out);
    assert.ok(again.out.includes(session.file) && /already exist.*--force/s.test(again.out), again.out);
    assert.equal(statSync(someFile).mtimeMs, before);
    assert.equal(readdirSync(out).length, 4);

    // --force replaces them, and says so
    const forced = await record(['--query', query, '--out', out, '--prefix', 'e2e', '--force', '--limit', '2'], cliEnv);
    assert.equal(forced.code, 0, forced.out);
    assert.equal((forced.out.match(/^wrote .*replaced\)$/gm) ?? []).length, 2, forced.out);
    assert.equal(readdirSync(out).length, 4);
    assert.equal(await replayAll(out), 3);

    // --include-running records the open session run too (its history is incomplete)
    const withRunning = tmp('running');
    const open = await record(['--query', `WorkflowId = '${sessionB}'`, '--out', withRunning, '--prefix', 'open', '--include-running'], cliEnv);
    assert.equal(open.code, 0, open.out);
    assert.match(open.out, /RUNNING, .*1 turn inside the session\)/);
    const openFiles = readdirSync(withRunning).sort();
    assert.equal(openFiles.length, 2, openFiles.join(', '));
    assert.match(openFiles[0]!, /^session-open-[0-9a-f]{12}\.json$/);
  });

  it('writes nothing for a bad query, bad arguments or no match', async () => {
    const out = path.join(tmp('bad'), 'never');
    const bad = await record(['--query', "WorkflowType = 'turnWorkflow' AND", '--out', out], cliEnv);
    assert.equal(bad.code, 1, bad.out);
    assert.match(bad.out, /rejected the visibility query/);
    assert.equal(existsSync(out), false);

    const unknown = await record(['--query', "NoSuchAttribute = 'x'", '--out', out], cliEnv);
    assert.equal(unknown.code, 1, unknown.out);
    assert.match(unknown.out, /rejected the visibility query/);
    assert.equal(existsSync(out), false);

    const none = await record(['--query', `WorkflowId = 'no-such-${randomUUID()}'`, '--out', out], cliEnv);
    assert.equal(none.code, 1, none.out);
    assert.match(none.out, /Nothing recorded: no closed workflow/);
    assert.equal(existsSync(out), false);

    for (const args of [[], ['--query', 'x', '--prefix', '../evil'], ['--query', 'x', '--bogus']]) {
      const r = await record([...args, '--out', out], cliEnv);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.out}`);
      assert.match(r.out, /Usage: steward histories record/);
    }
    assert.equal(existsSync(out), false);
  });

  it("decodes payloads encrypted by Steward's codec (and refuses without the keys)", async () => {
    const key = generateCodecKey();
    const dataConverter = codecDataConverter(new StewardCodec({ keys: [key] }));
    const client = new Client({ connection: stack.env.connection, namespace: 'default', dataConverter });
    const taskQueue = `hist-codec-${randomUUID()}`;
    const models = createModelRegistry({ openaiCompatible: { baseURL: stack.model.baseURL } });
    stack.model.setDefault((req) => ({ text: `echo: ${lastUserText(req.body)}` }));
    const worker = await createStewardWorker({
      connection: stack.env.nativeConnection,
      namespace: 'default',
      taskQueue,
      workflowBundle: await testBundle(),
      dataConverter,
      deps: { db: stack.db, models, systemPrompt: DEFAULT_SYSTEM_PROMPT, heartbeatEveryMs: 100, defaultModel: 'openai-compatible:test-model' },
    });
    const ingress = createIngress({
      client,
      db: stack.db,
      taskQueue,
      defaultModel: 'openai-compatible:test-model',
      configuredProviders: () => models.configuredProviders(),
      limits: { maxSteps: 4, maxTurnsPerRun: 100 },
    });
    const account = `acct-${randomUUID().slice(0, 8)}`;
    const chatId = `hist-enc-${randomUUID().slice(0, 8)}`;
    const sessionId = sessionWorkflowId({ platform: 'http', account, chatId });
    // messages travel as references; the sender's name is in the turn's input itself
    const secret = `Agent-${randomUUID()}`;
    const query = `StewardChat = '${chatId}'`;
    const say = (text: string) => ingress.handle({ id: randomUUID(), platform: 'http', account, chatId, user: secret, text, at: new Date().toISOString() });
    const waitText = (pred: (t: string) => boolean) =>
      waitFor(async () => (await ingress.transcript(sessionId, { limit: 100 })).find((x) => pred(x.text)), 'a transcript message', 30_000);
    await worker.runUntil(async () => {
      await say('the launch code is safe');
      await waitText((t) => t.startsWith('echo:') && t.includes('the launch code is safe'));
      await say('/new');
      await waitText((t) => t.startsWith('New task started'));
      // the worker runs until the session has continued as new (after its notice went out)
      await closedRuns(query, 1);
    });

    // on the server, the secret is not readable: the payloads are encrypted (the turn ran inside the session)
    let closedRun = '';
    for await (const wf of stack.env.client.workflow.list({ query })) if (wf.status.name !== 'RUNNING') closedRun = wf.runId;
    const raw = JSON.parse(historyToJSON(await stack.env.client.workflow.getHandle(sessionId, closedRun).fetchHistory())) as unknown;
    assert.ok(findPayloads(raw as Json).some((p) => payloadEncoding(p) === ENCRYPTED_ENCODING), 'the server holds encrypted payloads');
    const holding = (raw as { events: Array<{ eventId: string; eventType: string }> }).events.filter((e) => payloadText(e).includes(secret)).map((e) => `${e.eventId} ${e.eventType}`);
    assert.ok(!payloadText(raw).includes(secret) && !JSON.stringify(raw).includes(secret), `the secret is not in the raw history (events holding it in plaintext: ${holding.join(', ')})`);

    // without the keys: refused, nothing written
    const refusedDir = path.join(tmp('enc-refused'), 'out');
    const refused = await record(['--query', query, '--out', refusedDir], cliEnv);
    assert.equal(refused.code, 1, refused.out);
    assert.match(refused.out, /encrypted \(binary\/encrypted\) and no payload codec is configured/);
    assert.equal(existsSync(refusedDir), false);

    // with the keys: decoded, plaintext, replayable
    const out = tmp('enc');
    const r = await record(['--query', query, '--out', out, '--prefix', 'enc'], { ...cliEnv, STEWARD_CODEC_KEYS: formatCodecKeys([key]) });
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /decoded through the configured codec, so these files hold PLAINTEXT/);
    assert.match(r.out, /session-enc-[0-9a-f]{12}\.json .* [1-9]\d* decoded, 1 turn inside the session\)/);
    const { files } = readRecording(out);
    assert.deepEqual(files.map(typeOf), ['sessionWorkflow']);
    for (const f of files) {
      assert.equal(findPayloads(f.json as unknown as Json).filter((p) => payloadEncoding(p) === ENCRYPTED_ENCODING).length, 0, `${f.file} holds no encrypted payload`);
    }
    assert.ok(payloadText(files[0]!.json).includes(secret), "the recorded session's inbound signal is decoded (it names the sender)");
    // and so are the turn's activity inputs and its summaries in the Temporal UI
    assert.deepEqual(inlineSteps(files[0]!).map((s) => [s.turnId.startsWith(`${sessionId}:turn:1:`), s.summary]), [[true, 'Turn 1: model step 1 (openai-compatible:test-model)']]);
    assert.equal(await replayAll(out), 1);
  });
});
