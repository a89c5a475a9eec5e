/**
 * Records real workflow histories for the replay tests: runs a scripted conversation on the
 * Temporal dev server with the real worker, then exports the histories as JSON (the format
 * `temporal workflow show -o json` writes) to test/replay/histories/.
 *
 *   node --import tsx scripts/record-histories.ts [foundation|channels|repo|objectives]
 *
 * - foundation (files `session-inl-nt-NN.json`): a turn, steering, /stop, /status, /new,
 *   continue-as-new, over the HTTP API (`session-inl-NN.json`: the same, recorded while every
 *   run traced).
 * - channels (files `session-ch-inl-NN.json`): a Telegram conversation of a known member: a
 *   turn with the progress panel, safe tools (save_note, send_file), an action approved by an
 *   admin's button, one denied, one stopped while it waits.
 *   Chat turns run inside the session (patch `steward-inline-turn`), so these two scenarios
 *   record session histories only; `session-NN`/`turn-NN` and `session-ch-NN`/`turn-ch-NN`
 *   are the same scenarios recorded when every turn was a child workflow, kept for replay.
 * - repo (files `change-rc-NN.json`): governed repository changes on a local bare repository:
 *   one with a clarifying question answered in chat, ending in a patch artifact; one that
 *   waits for an admin's approval and ends in a draft PR on the GitHub API double; one refused
 *   by the validation gate.
 * - objectives (files `objective-ob-NN.json`, `turn-ob-NN.json`): objective runs started by
 *   their Temporal Schedule (a trigger, a backfilled run, a skipped run) with their turns.
 * - budgets (files `objective-ob-bs-NN.json`, `turn-ob-bs-NN.json`): objective runs and a
 *   model budget (patch `steward-objective-budget-skip`): a run whose turn the ledger refused
 *   mid-way (no call fits in the objective's budget), recorded as skipped, and a run skipped
 *   before its turn (the budget spent).
 * - workspaces (files `workspace-ws-NN.json`): workspace indexing runs: a whole small
 *   workspace, one of 250 files (two batches), and a run for reported paths (a changed file
 *   and a deleted one).
 * - knowledge (files `session-kn-NN.json`): a chat session with a workspace: a grounded turn
 *   that a skill shaped (injected, its ledger entry recorded), a turn whose model calls
 *   `remember`, and after continue-as-new a grounded turn with the skill already in the
 *   carried ledger; then /new.
 * - intake (files `session-dd-NN.json`): a session that drops redelivered signals of a message
 *   it answered (an ingress that stopped between its signal and its handed-over mark signals
 *   again, services/handoff.ts; patch `steward-inbound-dedup`): in the run that answered it,
 *   and in the next run, which carried the key across continue-as-new; then a new message's
 *   turn, and /new.
 * - tasks (files `triage-tk-NN.json`, `reminder-tk-NN.json`): a Telegram group message triaged
 *   into a task (its classification, the task's record and its reminder started), the reminder
 *   whose timer fired and reminded the admins, and one ended by a signal (the task was closed).
 *
 * - budget-wait (files `session-bw-NN.json`): a chat turn refused by a budget (patch
 *   `steward-budget-wait`): it tells the chat, names the budget in `StewardBudget` and waits;
 *   the budget raised (its waiters signalled `budgetRaised`), it replies; a second turn waits
 *   past its wait and ends `budget-refused`; a third is stopped while it waits; then /new.
 *
 * A scenario replaces only its own files (`<kind>-<tag>NN.json`): histories recorded by earlier
 * code stay, so replay keeps proving that today's code can continue runs that older code
 * started. When a workflow change alters the shape of a scenario's histories, give the scenario
 * a new tag (below), so that recording it again keeps the earlier shape's files.
 */
import { randomInt, randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rm, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { defineBudget, removeBudget } from '../domain/budgets/definitions.js';
import { closeKnowledgeIndexes, knowledgeIndexOpener } from '../domain/knowledge/open.js';
import { createSpend } from '../domain/limits.js';
import { indexWorkflowId } from '../services/workspaces.js';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { historyToJSON } from '../platform/history-json.js';
import { bindChat, createIdentity, OPERATOR } from '../domain/governance.js';
import { budgetWaitersQuery, wakeBudgetWaiters } from '../services/budgets/waiters.js';
import { createBudgetService } from '../services/budgets.js';
import { McpServerSchema } from '../common/mcp.js';
import { createMcpTools } from '../domain/mcp/tools.js';
import { insertMcpServer } from '../domain/store/mcp.js';
import { serverEntry, stdioServer } from '../test/helpers/mcp-servers.js';
import { sessionWorkflowId } from '../common/ids.js';
import { inboundKey } from '../services/chat/keys.js';
import { inboundSignal, statusQuery } from '../workflows/messages.js';
import { testDatabases } from '../test/helpers/db.js';
import { startModelServer, type ModelServer } from '../test/helpers/model-server.js';
import { recordingSender } from '../test/helpers/recording-sender.js';
import { changeModel } from '../test/helpers/change-model.js';
import { createGitFixture } from '../test/helpers/git-fixture.js';
import { startGitHubDouble } from '../test/helpers/github-double.js';
import { waitFor, withHarness } from '../test/helpers/steward.js';
import { createTestEnvironment } from '../test/helpers/temporal.js';

/** A history without its failures' stack traces: they name the recording machine's paths (never in the repo), and replay does not read them. */
function withoutStackTraces<T>(history: T): T {
  const strip = (v: unknown): void => {
    if (Array.isArray(v)) v.forEach(strip);
    else if (v && typeof v === 'object') {
      const o = v as Record<string, unknown>;
      if (typeof o.stackTrace === 'string') o.stackTrace = '';
      Object.values(o).forEach(strip);
    }
  };
  strip(history);
  return history;
}

const outDir = new URL('../test/replay/histories/', import.meta.url);
const scenario = process.argv[2] ?? 'foundation';
if (!['foundation', 'channels', 'repo', 'objectives', 'budgets', 'budget-wait', 'workspaces', 'knowledge', 'mcp', 'tasks', 'intake'].includes(scenario)) throw new Error(`unknown scenario ${scenario}: foundation, channels, repo, objectives, budgets, budget-wait, workspaces, knowledge, mcp, tasks or intake`);
/**
 * The scenario's file tag: `inl` marks the chat scenarios recorded with turns inside the
 * session; `nt` the foundation scenario recorded untraced (workers without an OTLP exporter
 * leave the patch `steward-otel-tracing` off), beside `session-inl-NN`, recorded traced; `cm`
 * the foundation scenario recorded with the patch `steward-continue-on-message` (its third turn
 * is stopped with a message queued, so its run continues as new carrying that message), beside
 * `session-inl-nt-NN`, recorded before it; `rs` the channels scenario recorded with the patch
 * `steward-requester-set` (the requester set goes to the approval request and the tool run),
 * beside `session-ch-inl-NN`, recorded before it. `rp` marks the session scenarios recorded with
 * their replay records (test/replay/records/<tag>.json: the rows and model answers a replay of
 * their turns reads), beside the same scenarios' earlier files (`session-inl-cm-NN`,
 * `session-ch-rs-NN`, `session-dd-NN`, `session-bw-NN`, `session-mcp-NN`, `session-kn-NN`). `up`
 * marks the intake scenario recorded with messages handed over by the `inbound` update
 * (update-with-start, services/handoff.ts), the redelivered signals of their keys dropped, beside
 * `session-dd-rp-NN`, recorded when every message was signalled. `so` marks the foundation
 * scenario recorded with the patch `steward-turn-over-before-notice` (its stopped turn is over
 * before the stop's notice is delivered), beside `session-fd-rp-NN`, recorded before it. `ds`
 * marks the foundation scenario recorded with the patch `steward-deliver-in-step` (a turn's
 * last model step delivers its reply; its steered turn's first step was told no and the turn
 * delivered), beside `session-fd-so-NN`, recorded before it.
 */
const TAGS: Record<string, string> = { foundation: 'fd-ds-', channels: 'ch-rp-', repo: 'rc-', objectives: 'ob-', budgets: 'ob-bs-', 'budget-wait': 'bw-rp-', workspaces: 'ws-', knowledge: 'kn-rp-', mcp: 'mcp-rp-', tasks: 'tk-', intake: 'dd-up-' };
const tag = TAGS[scenario]!;
/** This scenario's files (and only those: `session-inl-01.json` is not `session-ch-inl-01.json`'s scenario). */
const mine = (f: string) => new RegExp(`^[a-z]+-${tag}\\d+\\.json$`).test(f);

const env = await createTestEnvironment();
const model = await startModelServer();
const sqlite = testDatabases().find((d) => d.name === 'sqlite');
if (!sqlite) throw new Error('no SQLite test database');
const dbh = await sqlite.create();

/**
 * Write every closed run of the session as this scenario's files (its turns run inside it: a
 * session this code starts takes the `steward-inline-turn` path, so there is no child turn).
 */
async function exportRuns(e: TestWorkflowEnvironment, sessionId: string, harness: RecordHarness = 'plain'): Promise<void> {
  // the scenario ends with /new: wait until the run that took it has continued as new (its
  // notice goes out just before), so the latest run holds no newTask signal, and until
  // visibility lists every earlier run closed
  const session = e.client.workflow.getHandle(sessionId);
  await waitFor(async () => !(await session.fetchHistory()).events?.some((ev) => ev.workflowExecutionSignaledEventAttributes?.signalName === 'newTask'), `${sessionId} to continue as new`, 30_000);
  const { runId: current } = await session.describe();
  const runs = await waitFor(async () => {
    const listed: Array<{ workflowId: string; runId: string }> = [];
    let settled = true;
    for await (const wf of e.client.workflow.list({ query: `WorkflowId = "${sessionId}"` })) {
      listed.push({ workflowId: wf.workflowId, runId: wf.runId });
      if (wf.runId !== current && wf.status.name === 'RUNNING') settled = false;
    }
    return settled && listed.some((r) => r.runId === current) ? listed : undefined;
  }, `the closed runs of ${sessionId} in visibility`, 30_000);
  const indexFile = new URL('workflow-ids.json', outDir);
  const index = JSON.parse(await readFile(indexFile, 'utf8').catch(() => '{}')) as Record<string, string>;
  for (const f of await readdir(outDir)) {
    if (f !== 'workflow-ids.json' && mine(f)) await unlink(new URL(f, outDir));
  }
  for (const k of Object.keys(index)) if (mine(k)) delete index[k];
  let i = 0;
  for (const run of runs.reverse()) {
    const handle = e.client.workflow.getHandle(run.workflowId, run.runId);
    const desc = await handle.describe();
    if (desc.status.name === 'RUNNING') continue; // only closed runs make complete fixtures
    const history = await handle.fetchHistory();
    const name = `session-${tag}${String(++i).padStart(2, '0')}.json`;
    await writeFile(new URL(name, outDir), `${historyToJSON(withoutStackTraces(history))}\n`);
    index[name] = run.workflowId; // replay needs each history's workflow id (child ids derive from it)
    console.log(`wrote ${name} (${history.events?.length ?? 0} events, ${desc.type}, ${desc.status.name})`);
  }
  const sorted = Object.fromEntries(Object.entries(index).sort(([a], [b]) => a.localeCompare(b)));
  await writeFile(indexFile, `${JSON.stringify(sorted, null, 2)}\n`);
  await exportRecords(sessionId, harness);
}

/** The text files under `root` by their path relative to it (a workspace's, for its record). */
async function filesOf(root: string, rel = ''): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const e of await readdir(path.join(root, rel), { withFileTypes: true })) {
    const p = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory()) Object.assign(out, await filesOf(root, p));
    else if (e.isFile()) out[p] = await readFile(path.join(root, p), 'utf8');
  }
  return out;
}

/**
 * How a scenario's workers were set up, as far as a replay of its turns must set up the same
 * (test/e2e/replay-corpus.test.ts): `plain` (the harness's defaults), `channels` (a Telegram
 * sender), `mcp` (the MCP reference servers), `knowledge` (a workspace with a skill), `budgets`
 * (the spend ledger on, as the started platform runs it).
 */
type RecordHarness = 'plain' | 'channels' | 'mcp' | 'knowledge' | 'budgets';

/**
 * The rest of a session's record beside its histories, in test/replay/records/<tag>.json: the
 * database rows a replay reads of its turns (receipts, the transcript, the blobs: docs/replay.md
 * "The record"), the budgets defined (configuration: with one, every call reserves) and the
 * scripted model's answers, each with the request it answered. The
 * scenario's database holds only this scenario, so every row is the session's.
 */
async function exportRecords(sessionId: string, harness: RecordHarness): Promise<void> {
  const db = dbh.db;
  const receipts = await db.receipt.findMany({ orderBy: { id: 'asc' } });
  const messages = await db.message.findMany({ orderBy: { seq: 'asc' } });
  const blobs = await db.blob.findMany({ orderBy: { hash: 'asc' } });
  // the configuration a budget is part of: whether any budget exists decides whether a call reserves (and asks for max_tokens)
  const budgets = await db.budget.findMany({ orderBy: { id: 'asc' } });
  // knowledge: the workspaces (their files), the chats bound to them and the memories, as the scenario left them
  const workspaces = await Promise.all(
    (await db.workspace.findMany({ orderBy: { name: 'asc' } })).map(async (w) => ({ name: w.name, files: await filesOf(w.root) })),
  );
  const workspaceBindings = (await db.workspaceBinding.findMany()).map((b) => ({ platform: b.platform, account: b.account, chatId: b.chatId, workspace: b.workspace }));
  const memories = (await db.memory.findMany({ orderBy: { id: 'asc' } })).map((m) => ({ ...m, decidedAt: m.decidedAt?.toISOString() ?? null, createdAt: m.createdAt.toISOString(), updatedAt: m.updatedAt.toISOString() }));
  const record = {
    scenario,
    harness,
    sessionId,
    receipts: receipts.map((r) => ({ ...r, createdAt: r.createdAt.toISOString() })),
    messages: messages.map((m) => ({ ...m, createdAt: m.createdAt.toISOString() })),
    blobs: blobs.map((b) => ({ ...b, data: Buffer.from(b.data).toString('base64'), createdAt: b.createdAt.toISOString() })),
    workspaces,
    workspaceBindings,
    memories,
    budgets: budgets.map((b) => ({ ...b, tokens: b.tokens?.toString() ?? null, micros: b.micros?.toString() ?? null, createdAt: b.createdAt.toISOString(), updatedAt: b.updatedAt.toISOString() })),
    exchanges: model.exchanges,
  };
  const dir = new URL('../test/replay/records/', import.meta.url);
  await mkdir(dir, { recursive: true });
  const name = `${tag.replace(/-$/, '')}.json`;
  await writeFile(new URL(name, dir), `${JSON.stringify(record, null, 1)}\n`);
  console.log(`wrote records/${name} (${receipts.length} receipts, ${messages.length} messages, ${blobs.length} blobs, ${model.exchanges.length} model answers)`);
}

async function foundation(m: ModelServer): Promise<void> {
  await withHarness({ env, db: dbh.db, providers: { openaiCompatible: { baseURL: m.baseURL } }, maxTurnsPerRun: 3 }, async (h) => {
    // Turn 1: a plain reply.
    m.enqueue({ chunks: ['Durable ', 'execution ', 'means...'] });
    await h.send('what is durable execution?');
    await h.waitForMessage((x) => x.role === 'assistant' && x.text.startsWith('Durable'));

    // Turn 2: steered while its model step runs.
    let n = m.requests.length;
    m.enqueue({ text: 'a long answer', firstTokenDelayMs: 1200 });
    m.enqueue({ text: 'a short answer' });
    await h.send('explain event sourcing');
    await m.waitForRequest(n + 1, 15_000);
    await h.send('/steer keep it short');
    await h.send('/status');
    await h.waitForMessage((x) => x.role === 'assistant' && x.text === 'a short answer');

    // Turn 3: stopped; a queued message is answered by turn 4 after continue-as-new.
    n = m.requests.length;
    m.enqueue({ text: 'never delivered', firstTokenDelayMs: 20_000 });
    await h.send('write a novel');
    await m.waitForRequest(n + 1, 15_000);
    await h.send('and a haiku');
    await h.send('/stop');
    await h.waitForMessage((x) => x.text.startsWith('Stopped the running turn'));
    await h.waitForMessage((x) => x.role === 'assistant' && x.text.includes('and a haiku'));

    await h.send('/think low');
    await h.send('/new');
    await h.waitForMessage((x) => x.text.startsWith('New task started'));
    await exportRuns(env, h.sessionId);
  });
}

async function intake(m: ModelServer): Promise<void> {
  await withHarness({ env, db: dbh.db, providers: { openaiCompatible: { baseURL: m.baseURL } }, maxTurnsPerRun: 1 }, async (h) => {
    const session = env.client.workflow.getHandle(h.sessionId);
    const id = randomUUID();
    const ref = { key: inboundKey({ platform: 'http', account: h.account, chatId: h.chatId, id }), user: 'tester', at: new Date().toISOString() };
    m.enqueue({ text: 'Answered once.' });
    await h.send('hello', { id });
    await h.waitForMessage((x) => x.role === 'assistant' && x.text === 'Answered once.');
    // the ingress's signal again, as after a crash before its mark: dropped by the run that answered it
    await session.signal(inboundSignal, ref);
    await waitFor(async () => ((await session.query(statusQuery)).generation >= 1 ? true : undefined), 'the run to continue as new', 30_000);
    // and by the next run, which carried the key
    await session.signal(inboundSignal, ref);
    m.enqueue({ text: 'The second message, answered.' });
    await h.send('a second message');
    await h.waitForMessage((x) => x.role === 'assistant' && x.text === 'The second message, answered.');
    const status = await session.query(statusQuery);
    if (status.turnsStarted !== 2) throw new Error(`expected 2 turns, the session started ${status.turnsStarted}`);
    await h.send('/new');
    await h.waitForMessage((x) => x.text.startsWith('New task started'));
    await exportRuns(env, h.sessionId);
  });
}

async function budgetWait(m: ModelServer): Promise<void> {
  const spend = createSpend({ db: dbh.db, budget: null });
  const budgets = createBudgetService(dbh.db, { wakeBudgetWaiters: (id) => wakeBudgetWaiters(env.client, env.namespace ?? 'default', id) });
  await withHarness({ env, db: dbh.db, providers: { openaiCompatible: { baseURL: m.baseURL } }, spend, budgetWaitMs: 8000 }, async (h) => {
    const binding = await bindChat(dbh.db, { platform: 'http', account: h.account, chatId: h.chatId, createdBy: 'record' });
    const id = `chat-${randomUUID().slice(0, 6)}`;
    const limit = (tokens: number) => budgets.set(OPERATOR, id, { scope: 'chat', scopeId: binding.id, tokens, period: 'day', timezone: 'UTC' }, 'api');
    await limit(100);
    // Turn 1: refused, told, waits; raised: it replies.
    m.enqueue({ text: 'Answered after the raise.' });
    await h.send('hello under a budget');
    await h.waitForMessage((x) => x.role === 'system' && x.text.startsWith('Waiting for a budget'));
    // listed by its budget first, so the raise's signal (not the wait's end) wakes it
    await waitFor(async () => {
      for await (const wf of env.client.workflow.list({ query: budgetWaitersQuery(id) })) if (wf.workflowId === h.sessionId) return true;
      return undefined;
    }, 'the waiting session in visibility');
    await limit(1_000_000);
    await h.waitForMessage((x) => x.role === 'assistant' && x.text === 'Answered after the raise.');
    // Turn 2: refused again (the limit back below what is spent); no raise: it ends budget-refused.
    await limit(100);
    await h.send('and now?');
    await h.waitForMessage((x) => x.role === 'system' && x.text.startsWith('No reply'), { timeoutMs: 30_000 });
    // Turn 3: stopped while it waits.
    const told = (await h.ingress.transcript(h.sessionId, { limit: 100 })).filter((x) => x.text.startsWith('Waiting for a budget')).length;
    await h.send('one more');
    await waitFor(async () => ((await h.ingress.transcript(h.sessionId, { limit: 100 })).filter((x) => x.text.startsWith('Waiting for a budget')).length > told ? true : undefined), 'the third turn to wait');
    await h.send('/stop');
    await h.waitForMessage((x) => x.text.startsWith('Stopped the running turn'));
    await h.send('/new');
    await h.waitForMessage((x) => x.text.startsWith('New task started'));
    await exportRuns(env, h.sessionId, 'budgets');
  });
}

async function channels(m: ModelServer): Promise<void> {
  const sender = recordingSender();
  await withHarness({ env, db: dbh.db, providers: { openaiCompatible: { baseURL: m.baseURL } }, senders: { telegram: sender } }, async (h) => {
    const account = String(randomInt(1e8, 1e9));
    const member = String(randomInt(1e8, 1e9));
    const adminId = String(randomInt(1e8, 1e9));
    await createIdentity(dbh.db, { name: 'Mia', role: 'member', accounts: [{ platform: 'telegram', userId: member, dmChatId: member, dmAccount: account }], createdBy: 'recorder' });
    const { id: adminIdentity } = await createIdentity(dbh.db, { name: 'Ada', role: 'admin', accounts: [{ platform: 'telegram', userId: adminId, dmChatId: adminId, dmAccount: account }], createdBy: 'recorder' });
    await bindChat(dbh.db, { platform: 'telegram', account, chatId: '-1001', name: 'news', createdBy: 'recorder' });
    const sessionId = sessionWorkflowId({ platform: 'telegram', account, chatId: member });
    const say = (text: string) =>
      h.ingress.handle({ id: randomUUID(), platform: 'telegram', account, chatId: member, chatType: 'dm', user: 'Mia', userId: member, text, at: new Date().toISOString() });
    const approvalIn = async (text: RegExp) => {
      const post = await sender.waitForPost((p) => p.chatId === adminId && text.test(p.text));
      return /^apr:([a-z0-9]+):y$/.exec(post.buttons[0] ?? '')![1]!;
    };

    // 1: a plain reply, with the progress panel
    m.enqueue({ text: 'Hello Mia.', firstTokenDelayMs: 300 });
    await say('hello');
    await sender.waitForPost((p) => p.chatId === member && p.text === 'Hello Mia.');

    // 2: safe tools run at once: a note and a file, then the reply with the file
    m.enqueue({
      toolCalls: [
        { id: 'call_note', name: 'save_note', arguments: JSON.stringify({ note: 'Mia prefers CSV' }) },
        { id: 'call_file', name: 'send_file', arguments: JSON.stringify({ name: 'data.csv', content: 'a,b\n1,2\n', mediaType: 'text/csv' }) },
      ],
    });
    m.enqueue({ text: 'Here is the file.' });
    await say('send me the data as CSV');
    await sender.waitForPost((p) => p.chatId === member && p.text === 'Here is the file.');

    // 3: an action approved by an admin's button
    m.enqueue({ toolCalls: [{ id: 'call_ok', name: 'post_to_chat', arguments: JSON.stringify({ chat: 'news', text: 'Release 2.0' }) }] });
    m.enqueue({ text: 'Announced.' });
    await say('announce release 2.0');
    const ok = await approvalIn(/Release 2\.0/);
    await h.ingress.handleAction({ platform: 'telegram', account, chatId: adminId, chatType: 'dm', userId: adminId, user: 'Ada', data: `apr:${ok}:y`, id: randomUUID() });
    await sender.waitForPost((p) => p.chatId === member && p.text === 'Announced.');

    // 4: an action denied with a reason
    m.enqueue({ toolCalls: [{ id: 'call_no', name: 'post_to_chat', arguments: JSON.stringify({ chat: 'news', text: 'Secret plans' }) }] });
    m.enqueue({ text: 'It was denied.' });
    await say('post the secret plans');
    const no = await approvalIn(/Secret plans/);
    await h.ingress.decideApproval(no, 'deny', { kind: 'person', id: adminIdentity, name: 'Ada', role: 'admin' }, 'not public');
    await sender.waitForPost((p) => p.chatId === member && p.text === 'It was denied.');

    // 5: stopped while it waits for approval
    m.enqueue({ toolCalls: [{ id: 'call_stop', name: 'post_to_chat', arguments: JSON.stringify({ chat: 'news', text: 'Never mind' }) }] });
    await say('post never mind');
    await approvalIn(/Never mind/);
    await say('/stop');
    await sender.waitForPost((p) => p.chatId === member && p.text.startsWith('Stopped the running turn'));
    await waitFor(async () => ((await dbh.db.approval.count({ where: { status: 'cancelled' } })) > 0 ? true : undefined), 'the approval to be cancelled');

    // close the session's run so its history is complete
    await say('/new');
    await sender.waitForPost((p) => p.chatId === member && p.text.startsWith('New task started'));
    await exportRuns(env, sessionId, 'channels');
  });
}

/** Write every closed repo-change run of this repository as this scenario's files. */
async function exportChanges(e: TestWorkflowEnvironment, repo: string): Promise<void> {
  const indexFile = new URL('workflow-ids.json', outDir);
  const index = JSON.parse(await readFile(indexFile, 'utf8').catch(() => '{}')) as Record<string, string>;
  for (const f of await readdir(outDir)) if (f !== 'workflow-ids.json' && mine(f)) await unlink(new URL(f, outDir));
  for (const k of Object.keys(index)) if (mine(k)) delete index[k];
  const runs: Array<{ workflowId: string; runId: string }> = [];
  for await (const wf of e.client.workflow.list({ query: `StewardKind = "repo-change" AND StewardRepo = "${repo}"` })) runs.push({ workflowId: wf.workflowId, runId: wf.runId });
  let i = 0;
  for (const run of runs.reverse()) {
    const handle = e.client.workflow.getHandle(run.workflowId, run.runId);
    const desc = await handle.describe();
    if (desc.status.name === 'RUNNING') continue;
    const history = await handle.fetchHistory();
    const name = `change-${tag}${String(++i).padStart(2, '0')}.json`;
    await writeFile(new URL(name, outDir), `${historyToJSON(withoutStackTraces(history))}\n`);
    index[name] = run.workflowId;
    console.log(`wrote ${name} (${history.events?.length ?? 0} events, ${desc.type}, ${desc.status.name})`);
  }
  const sorted = Object.fromEntries(Object.entries(index).sort(([a], [b]) => a.localeCompare(b)));
  await writeFile(indexFile, `${JSON.stringify(sorted, null, 2)}\n`);
}

async function repoChanges(m: ModelServer): Promise<void> {
  const fx = createGitFixture(
    { 'greeting.txt': 'Hello\n', 'test.sh': '#!/bin/sh\ngrep -q "Hello, Steward" greeting.txt\n' },
    { executable: ['test.sh'] },
  );
  const token = `ghs_${randomUUID().replace(/-/g, '')}`;
  const gh = await startGitHubDouble({ repos: [{ owner: 'acme', repo: 'demo', bareDir: fx.bare, defaultBranch: 'main' }], token });
  const repo = `demo-${randomInt(1e5, 1e6)}`;
  const draft = { intent: 'feature', goal: 'Make the greeting say Hello, Steward', scope: ['greeting.txt'], acceptance: ['sh test.sh exits 0'], constraints: [], assumptions: [], open_questions: [], risk_signals: [], summary: 'Change the greeting.' };
  const op = { id: 'operator', name: 'the operator' };
  try {
    await withHarness(
      { env, db: dbh.db, providers: { openaiCompatible: { baseURL: m.baseURL } }, repoChanges: { githubApiUrl: gh.baseUrl, secret: (n) => (n === 'GH_TOKEN' ? token : undefined) } },
      async (h) => {
        await h.changes.registerRepo({ name: repo, cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }] }, op);
        const until = async (id: string, pred: (c: { status: string; phase: string }) => boolean) =>
          waitFor(async () => {
            const c = await h.changes.getChange(id);
            return c && pred(c) ? c : undefined;
          }, `change ${id}`, 60_000);

        // 1: a clarifying question answered in chat, then a patch artifact
        m.setDefault(changeModel({ intake: (_req, round) => (round === 0 ? { ...draft, scope: [] } : draft), agent: [{ name: 'write_file', args: { path: 'greeting.txt', content: 'Hello, Steward\n' } }] }));
        const r = await h.send(`/change ${repo} Fix the greeting`);
        const first = /Change (chg-[a-f0-9]+) started/.exec(r.reply ?? '')![1]!;
        await until(first, (c) => c.phase === 'clarify');
        await h.send('/answer only greeting.txt');
        await until(first, (c) => c.status !== 'running');

        // 2: a draft PR after an admin's approval
        await h.changes.registerRepo(
          { name: repo, cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['sh', 'test.sh'] }], policy: { promotion: 'draft-pr-after-approval' }, github: { owner: 'acme', repo: 'demo', tokenRef: 'env:GH_TOKEN' } },
          op,
        );
        m.setDefault(changeModel({ intake: () => draft, agent: [{ name: 'write_file', args: { path: 'greeting.txt', content: 'Hello, Steward\n' } }] }));
        const second = (await h.changes.startChange({ repo, request: 'Make the greeting say Hello, Steward' }, op)).id;
        await until(second, (c) => c.phase === 'approval');
        const approval = await waitFor(() => dbh.db.approval.findFirst({ where: { turnId: second } }).then((a) => a ?? undefined), 'the approval');
        const { id: admin } = await createIdentity(dbh.db, { name: 'Ada', role: 'admin', accounts: [{ platform: 'telegram', userId: String(randomInt(1e8, 1e9)) }], createdBy: 'recorder' });
        await h.ingress.decideApproval(approval.id, 'approve', { kind: 'person', id: admin, name: 'Ada', role: 'admin' });
        await until(second, (c) => c.status !== 'running');

        // 3: refused by the validation gate (a runtime artifact)
        m.setDefault(changeModel({ intake: () => draft, agent: [{ name: 'write_file', args: { path: 'debug.log', content: 'noise\n' } }] }));
        const third = (await h.changes.startChange({ repo, request: 'Make the greeting say Hello, Steward' }, op)).id;
        await until(third, (c) => c.status !== 'running');
        for (const id of [first, second, third]) await env.client.workflow.getHandle(id).result();
        await exportChanges(env, repo);
      },
    );
  } finally {
    await gh.close();
    fx.cleanup();
  }
}

/** Write the given closed runs as this scenario's files (`<kind>-<tag>NN.json`). */
async function exportRunIds(e: TestWorkflowEnvironment, runs: Array<{ workflowId: string; kind: string }>): Promise<void> {
  const indexFile = new URL('workflow-ids.json', outDir);
  const index = JSON.parse(await readFile(indexFile, 'utf8').catch(() => '{}')) as Record<string, string>;
  for (const f of await readdir(outDir)) if (f !== 'workflow-ids.json' && mine(f)) await unlink(new URL(f, outDir));
  for (const k of Object.keys(index)) if (mine(k)) delete index[k];
  const counters: Record<string, number> = {};
  for (const run of runs) {
    const handle = e.client.workflow.getHandle(run.workflowId);
    const desc = await handle.describe();
    if (desc.status.name === 'RUNNING') continue;
    const history = await handle.fetchHistory();
    counters[run.kind] = (counters[run.kind] ?? 0) + 1;
    const name = `${run.kind}-${tag}${String(counters[run.kind]).padStart(2, '0')}.json`;
    await writeFile(new URL(name, outDir), `${historyToJSON(withoutStackTraces(history))}\n`);
    index[name] = run.workflowId;
    console.log(`wrote ${name} (${history.events?.length ?? 0} events, ${desc.type}, ${desc.status.name})`);
  }
  const sorted = Object.fromEntries(Object.entries(index).sort(([a], [b]) => a.localeCompare(b)));
  await writeFile(indexFile, `${JSON.stringify(sorted, null, 2)}\n`);
}

async function objectives(m: ModelServer): Promise<void> {
  await withHarness({ env, db: dbh.db, providers: { openaiCompatible: { baseURL: m.baseURL } } }, async (h) => {
    const op = { id: 'operator', name: 'the operator' };
    m.setDefault(() => ({ text: 'Here is the daily digest.' }));
    const o = await h.objectives.create({ name: `digest-${randomInt(1e5, 1e6)}`, prompt: 'Write the daily digest', chatId: h.chatId, account: h.account, schedule: { cron: '0 9 * * *', timezone: 'Europe/Berlin' }, paused: true }, op);
    const settled = (n: number) =>
      waitFor(async () => {
        const runs = await dbh.db.objectiveRun.findMany({ where: { objectiveId: o.id } });
        return runs.length >= n && runs.every((r) => r.status !== 'running') ? runs : undefined;
      }, `${n} runs`, 60_000);
    await h.objectives.trigger(o.id, op);
    await settled(1);
    await h.objectives.backfill(o.id, { start: '2026-03-28T00:00:00Z', end: '2026-03-29T00:00:00Z' }, op);
    await settled(2);
    await h.objectives.skipMissed(o.id, op);
    await h.objectives.backfill(o.id, { start: '2026-03-29T00:00:00Z', end: '2026-03-30T00:00:00Z' }, op);
    const runs = await settled(3);
    for (const r of runs) await env.client.workflow.getHandle(r.id).result();
    await exportRunIds(env, [
      ...runs.map((r) => ({ workflowId: r.id, kind: 'objective' })),
      ...runs.flatMap((r) => (r.turnId ? [{ workflowId: r.turnId, kind: 'turn' }] : [])),
    ]);
    await h.objectives.remove(o.id, op);
  });
}

async function objectiveBudgets(m: ModelServer): Promise<void> {
  // the ledger as the started platform builds it (on, no STEWARD_TOKEN_BUDGET)
  await withHarness({ env, db: dbh.db, providers: { openaiCompatible: { baseURL: m.baseURL } }, spend: createSpend({ db: dbh.db, budget: null }) }, async (h) => {
    const op = { id: 'operator', name: 'the operator' };
    m.setDefault(() => ({ text: 'Here is the digest.', usage: { prompt_tokens: 10, completion_tokens: 5 } }));
    const o = await h.objectives.create({ name: `budgeted-${randomInt(1e5, 1e6)}`, prompt: 'Write the digest', chatId: h.chatId, account: h.account, schedule: { cron: '0 9 * * *', timezone: 'UTC' }, paused: true }, op);
    const budget = `record-${o.id}`;
    // 100 tokens: not spent, but no call fits (its output cap alone is larger): the turn is refused mid-way
    await defineBudget(dbh.db, { id: budget, scope: 'objective', scopeId: o.id, tokens: 100, period: 'day' });
    const settled = (n: number) =>
      waitFor(async () => {
        const runs = await dbh.db.objectiveRun.findMany({ where: { objectiveId: o.id }, orderBy: { createdAt: 'asc' } });
        return runs.length >= n && runs.every((r) => r.status !== 'running') ? runs : undefined;
      }, `${n} runs`, 60_000);
    await h.objectives.trigger(o.id, op);
    await settled(1);
    // spent: the next run is skipped before its turn
    await dbh.db.budgetUsage.updateMany({ where: { budgetId: budget }, data: { usedTokens: 100 } });
    await new Promise((r) => setTimeout(r, 1_100));
    await h.objectives.trigger(o.id, op);
    const runs = await settled(2);
    for (const r of runs) await env.client.workflow.getHandle(r.id).result();
    await exportRunIds(env, [
      ...runs.map((r) => ({ workflowId: r.id, kind: 'objective' })),
      ...runs.flatMap((r) => (r.turnId ? [{ workflowId: r.turnId, kind: 'turn' }] : [])),
    ]);
    await h.objectives.remove(o.id, op);
    await removeBudget(dbh.db, budget);
  });
}

async function workspaces(m: ModelServer): Promise<void> {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'steward-record-ws-'));
  const knowledge = knowledgeIndexOpener(dbh.url, dataDir);
  try {
    await withHarness({ env, db: dbh.db, providers: { openaiCompatible: { baseURL: m.baseURL } }, workspaces: { dataDir, knowledge } }, async (h) => {
      const ws = h.workspaces!;
      const op = { id: 'operator', name: 'the operator' };
      const done = (name: string) => waitFor(async () => (await ws.indexStatus(name)).run?.phase === 'done', `${name} indexed`, 60_000);
      const suffix = randomInt(1e5, 1e6);
      const small = `small-${suffix}`;
      const large = `large-${suffix}`;
      const paths = `paths-${suffix}`;
      for (const name of [small, large, paths]) {
        const root = path.join(dataDir, 'workspaces', name);
        await mkdir(root, { recursive: true });
        if (name === large) for (let i = 0; i < 250; i++) await writeFile(path.join(root, `note-${i}.md`), `# Note ${i}\nText of note ${i}.\n`);
        else {
          await writeFile(path.join(root, 'guide.md'), '# Guide\n\n## Rollback\nRun the rollback job.\n');
          await writeFile(path.join(root, 'faq.txt'), 'Lunch is at noon.\n');
        }
        await ws.create(name, undefined, op);
        await done(name);
      }
      const root = path.join(dataDir, 'workspaces', paths);
      await writeFile(path.join(root, 'guide.md'), '# Guide\n\n## Canary\nShip to one percent first.\n');
      await unlink(path.join(root, 'faq.txt'));
      await ws.reindex(paths, { paths: ['guide.md', 'faq.txt'] });
      await waitFor(async () => (await ws.indexStatus(paths)).documents === 1, 'the reported paths indexed', 60_000);
      await done(paths);
      await exportRunIds(env, [small, large, paths].map((name) => ({ workflowId: indexWorkflowId(name), kind: 'workspace' })));
    });
  } finally {
    await closeKnowledgeIndexes();
    await rm(dataDir, { recursive: true, force: true });
  }
}

async function knowledgeSession(m: ModelServer): Promise<void> {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'steward-record-kn-'));
  const knowledge = knowledgeIndexOpener(dbh.url, dataDir);
  try {
    await withHarness({ env, db: dbh.db, providers: { openaiCompatible: { baseURL: m.baseURL } }, workspaces: { dataDir, knowledge, memoryApproval: 'none' }, maxTurnsPerRun: 2 }, async (h) => {
      const name = `kn-${randomInt(1e5, 1e6)}`;
      const root = path.join(dataDir, 'workspaces', name);
      await mkdir(path.join(root, 'skills', 'deploy-rollback'), { recursive: true });
      await writeFile(path.join(root, 'guide.md'), '# Guide\n\n## Rollback\nRun the rollback job, then restore the previous image tag.\n');
      await writeFile(path.join(root, 'skills', 'deploy-rollback', 'SKILL.md'), '---\nname: deploy-rollback\ndescription: Roll back a failed deployment\nwhen: a deploy failed\n---\n1. Freeze the pipeline.\n2. Run the rollback job.\n');
      await h.send(`/workspace create ${name}`);
      // guide.md (a skill is not knowledge: never indexed)
      await waitFor(async () => ((await h.workspaces!.indexStatus(name)).documents >= 1 ? true : undefined), `${name} indexed`, 60_000);
      m.enqueue({ text: 'Per guide.md: run the rollback job.' });
      await h.send('The deploy failed, roll it back');
      await h.waitForMessage((x) => x.role === 'assistant' && x.text.startsWith('Per guide.md'));
      m.enqueue({ toolCalls: [{ id: 'call_mem', name: 'remember', arguments: JSON.stringify({ text: 'Rollbacks need the release manager on the call.', kind: 'decision', scope: 'workspace' }) }] });
      m.enqueue({ text: 'I will remember that.' });
      await h.send('Remember: rollbacks need the release manager on the call');
      await h.waitForMessage((x) => x.role === 'assistant' && x.text === 'I will remember that.');
      m.enqueue({ text: 'Freeze the pipeline first, then roll back.' });
      await h.send('Another deploy failed, roll back again');
      await h.waitForMessage((x) => x.role === 'assistant' && x.text.startsWith('Freeze the pipeline first'));
      await h.send('/new');
      await h.waitForMessage((x) => x.text.startsWith('New task started'));
      await exportRuns(env, h.sessionId, 'knowledge');
    });
  } finally {
    await closeKnowledgeIndexes();
    await rm(dataDir, { recursive: true, force: true });
  }
}

/** A session whose turns call MCP tools (server-everything over stdio in the sandbox): one at once, one after an approval. */
async function mcpSession(m: ModelServer): Promise<void> {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'steward-record-mcp-'));
  const mcp = createMcpTools({ db: dbh.db, dataDir });
  try {
    await insertMcpServer(dbh.db, McpServerSchema.parse(stdioServer('every', [serverEntry('@modelcontextprotocol/server-everything'), 'stdio'], { allowTools: ['echo', 'get-sum'], readOnlyTools: ['echo'] })), 'api');
    await withHarness({ env, db: dbh.db, providers: { openaiCompatible: { baseURL: m.baseURL } }, mcp }, async (h) => {
      m.enqueue({ toolCalls: [{ id: 'call_echo', name: 'every__echo', arguments: JSON.stringify({ message: 'hello' }) }] });
      m.enqueue({ text: 'The server said hello.' });
      await h.send('echo hello through the MCP server');
      await h.waitForMessage((x) => x.role === 'assistant' && x.text === 'The server said hello.', { timeoutMs: 60_000 });
      m.enqueue({ toolCalls: [{ id: 'call_sum', name: 'every__get-sum', arguments: JSON.stringify({ a: 2, b: 3 }) }] });
      m.enqueue({ text: 'It is 5.' });
      await h.send('add 2 and 3');
      const approval = await waitFor(async () => (await dbh.db.approval.findFirst({ where: { sessionId: h.sessionId, toolCallId: 'call_sum' } })) ?? undefined, 'the approval', 60_000);
      await h.ingress.decideApproval(approval.id, 'approve', OPERATOR);
      await h.waitForMessage((x) => x.role === 'assistant' && x.text === 'It is 5.', { timeoutMs: 60_000 });
      await h.send('/new');
      await h.waitForMessage((x) => x.text.startsWith('New task started'));
      await exportRuns(env, h.sessionId, 'mcp');
    });
  } finally {
    await mcp.close();
    await rm(dataDir, { recursive: true, force: true });
  }
}

/**
 * tasks (files `triage-tk-NN.json`, `reminder-tk-NN.json`): a Telegram group message that does
 * not address the agent, classified by triage into a task due in seconds; its reminder that
 * came due and reminded the admins; and the reminder of a task made by hand that was closed.
 */
async function tasksScenario(m: ModelServer): Promise<void> {
  const sender = recordingSender();
  await withHarness({ env, db: dbh.db, providers: { openaiCompatible: { baseURL: m.baseURL } }, senders: { telegram: sender } }, async (h) => {
    const account = `bot${randomInt(1e5, 1e6)}`;
    const group = `-100${randomInt(1e8, 1e9)}`;
    const userId = String(randomInt(1e8, 1e9));
    await createIdentity(dbh.db, { name: 'Bo', role: 'member', accounts: [{ platform: 'telegram', userId }], createdBy: 'recorder' });
    const b = await bindChat(dbh.db, { platform: 'telegram', account, chatId: group, name: `team${randomInt(1e5, 1e6)}`, createdBy: 'recorder' });
    await bindChat(dbh.db, { platform: 'telegram', account, chatId: `-200${randomInt(1e8, 1e9)}`, adminChannel: true, createdBy: 'recorder' });
    await h.tasks.setTriage(b.id, { enabled: true }, OPERATOR);
    m.setDefault(() => ({ text: '{"class": "issue", "priority": "p1", "due": "3s", "reason": "the build is broken"}' }));
    const r = await h.ingress.handle({ id: randomUUID(), platform: 'telegram', account, chatId: group, chatType: 'group', addressed: false, user: 'Bo', userId, text: 'the nightly build is broken again', at: new Date().toISOString() });
    const triage = r.triage!.workflowId;
    const result = (await env.client.workflow.getHandle(triage).result()) as { taskId?: string };
    const reminded = `task-reminder:${result.taskId!}`;
    await env.client.workflow.getHandle(reminded).result();
    const manual = await h.tasks.create({ text: 'Write the release notes', chatId: h.chatId, account: h.account }, OPERATOR);
    await h.tasks.close(manual.id, OPERATOR);
    const closed = `task-reminder:${manual.id}`;
    await env.client.workflow.getHandle(closed).result();
    await exportRunIds(env, [
      { workflowId: triage, kind: 'triage' },
      { workflowId: reminded, kind: 'reminder' },
      { workflowId: closed, kind: 'reminder' },
    ]);
  });
}

try {
  if (scenario === 'foundation') await foundation(model);
  else if (scenario === 'tasks') await tasksScenario(model);
  else if (scenario === 'intake') await intake(model);
  else if (scenario === 'budget-wait') await budgetWait(model);
  else if (scenario === 'mcp') await mcpSession(model);
  else if (scenario === 'knowledge') await knowledgeSession(model);
  else if (scenario === 'workspaces') await workspaces(model);
  else if (scenario === 'channels') await channels(model);
  else if (scenario === 'repo') await repoChanges(model);
  else if (scenario === 'budgets') await objectiveBudgets(model);
  else await objectives(model);
} finally {
  await model.close();
  await dbh.cleanup();
  await env.teardown();
}
