/**
 * Counterfactual replay end to end (docs/replay.md): the real Temporal dev server, the real
 * database, the workers (the background worker running the replay workflows and a worker on the
 * replay queue with the replay activities), the scripted model, and an HTTP capture listener on
 * 127.0.0.1. Turns are recorded for real (a reply, an approved http_request that reaches the
 * listener, a save_note), then replayed:
 * - unchanged configuration, the scripted model answering the same: every recorded reply again,
 *   exactly, the tool calls answered from the record;
 * - the listener sees no request while replayed turns call http_request;
 * - a changed approval list flips exactly the calls it names between "would run" and "would wait";
 * - a turn whose blobs were pruned is reported not replayable, with the reason;
 * - nothing a user sees is written: transcript, outbox, receipts (but the replay's own),
 *   approvals, memories, tasks.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createReplayActivities } from '../../activities/replays.js';
import { replayQueueOf } from '../../common/ids.js';
import { ReplayReportSchema, type ReplayAlternative, type ReplayReport } from '../../common/replays.js';
import { DEFAULT_SYSTEM_PROMPT } from '../../config/index.js';
import { getBlobText } from '../../domain/blobs.js';
import { OPERATOR } from '../../domain/governance.js';
import { createMcpTools, type McpTools } from '../../domain/mcp/tools.js';
import { createModelRegistry } from '../../domain/model.js';
import { createMcpService } from '../../services/mcp.js';
import { serverEntry, stdioServer } from '../helpers/mcp-servers.js';
import { recordedTurn } from '../../domain/replays/record.js';
import { replayReportFormats } from '../../domain/replays/formats.js';
import { createReplay, getReplay } from '../../domain/store/replays.js';
import { armFaultPoint, InjectedFault } from '../../common/fault-points.js';
import { createReplayService, replayIdFor, replayStoreOf, startReplayWorkflow, type ReplayService } from '../../services/replays.js';
import { replayTurnsWorkflow } from '../../workflows/replays/replay.js';
import { createStewardWorker } from '../../workers/main.js';
import { testDatabases } from '../helpers/db.js';
import { lastUserText, type RecordedRequest, type ScriptedReply } from '../helpers/model-server.js';
import { useStack, waitFor, withHarness, type Harness, type HarnessOptions } from '../helpers/steward.js';

interface Capture {
  port: number;
  requests: string[];
  /** TCP connections of any protocol (HTTP, SMTP). */
  readonly connections: number;
  close(): Promise<void>;
}

/** The capture listener: counts every request that reaches it. */
async function startCapture(): Promise<Capture> {
  const requests: string[] = [];
  const server: Server = createServer((req, res) => {
    requests.push(`${req.method} ${req.url}`);
    req.resume();
    req.on('end', () => res.writeHead(201, { 'content-type': 'text/plain' }).end(`captured #${requests.length}`));
  });
  let connections = 0;
  server.on('connection', () => connections++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    requests,
    get connections() {
      return connections;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The text of the last tool message of an OpenAI chat body, or undefined when there is none. */
function lastToolText(body: unknown): string | undefined {
  const msgs = (body as { messages?: Array<{ role: string; content: unknown }> } | undefined)?.messages ?? [];
  const m = msgs.filter((x) => x.role === 'tool').at(-1);
  if (!m) return undefined;
  return typeof m.content === 'string' ? m.content : JSON.stringify(m.content);
}

for (const kind of testDatabases()) {
  describe(`counterfactual replay (${kind.name})`, () => {
    const stack = useStack(kind);
    let capture: Capture;
    before(async () => {
      capture = await startCapture();
    });
    after(async () => {
      await capture?.close();
    });

    /** The scripted model: the same answer to the same request, recorded or replayed. */
    const script = (req: RecordedRequest): ScriptedReply => {
      const user = lastUserText(req.body);
      const tool = lastToolText(req.body);
      if ((req.body as { model?: string }).model === 'slow-model') return { text: 'too late', firstTokenDelayMs: 20_000 };
      if (user.includes('say hello')) return { text: 'Hello back, recorded once.' };
      if (user.includes('post the event')) {
        if (tool === undefined) return { toolCalls: [{ id: 'call_post', name: 'http_request', arguments: JSON.stringify({ method: 'POST', url: `http://127.0.0.1:${capture.port}/hook`, body: '{"event":"deploy"}' }) }] };
        return { text: `Posted. The server said: ${tool.slice(0, 400)}` };
      }
      if (user.includes('note it')) {
        const note = /note it: ([^<\n]*)/.exec(user)?.[1]?.trim() ?? 'x';
        if (tool === undefined) return { toolCalls: [{ id: 'call_note', name: 'save_note', arguments: JSON.stringify({ note }) }] };
        return { text: `Noted (${note}). Tool: ${tool.slice(0, 200)}` };
      }
      if (user.includes('use the tools')) {
        const other = (req.body as { model?: string }).model === 'other-model';
        if (tool !== undefined) return { text: other ? 'Done, the other way.' : `Echoed: ${tool.slice(0, 200)}` };
        if (!other) return { toolCalls: [{ id: 'call_echo', name: 'every__echo', arguments: JSON.stringify({ message: 'recorded ping' }) }] };
        // the other model: the recorded echo, and calls the record cannot answer (every one an effect)
        return {
          toolCalls: [
            { id: 'call_echo', name: 'every__echo', arguments: JSON.stringify({ message: 'recorded ping' }) },
            { id: 'call_sum', name: 'every__get-sum', arguments: JSON.stringify({ a: 2, b: 3 }) },
            { id: 'call_http', name: 'http_request', arguments: JSON.stringify({ method: 'POST', url: `http://127.0.0.1:${capture.port}/other`, body: '{}' }) },
            { id: 'call_mail', name: 'send_email', arguments: JSON.stringify({ to: ['ops@example.test'], subject: 'Replayed', text: 'never sent' }) },
            { id: 'call_cmd', name: 'run_command', arguments: JSON.stringify({ argv: ['echo', 'never run'] }) },
          ],
        };
      }
      return { text: 'I do not know.' };
    };

    const actions = () => ({ http: { allowHosts: ['127.0.0.1'], timeoutMs: 5000 }, smtp: { url: `smtp://127.0.0.1:${capture.port}`, from: 'Steward <steward@example.test>' } });
    const opts = (mcp?: McpTools): HarnessOptions => ({
      env: stack.env,
      db: stack.db,
      providers: { openaiCompatible: { baseURL: stack.model.baseURL } },
      // save_note runs without an approval; the proposed actions (http_request) wait all the same
      toolPolicy: { approvalTools: [], approvalTimeoutMs: 10 * 60_000 },
      actions: actions(),
      ...(mcp ? { mcp } : {}),
    });

    /** The replay queue's worker, as the platform starts it beside the background worker. */
    const replayWorker = (h: Harness, mcp?: McpTools) =>
      createStewardWorker({
        connection: stack.env.nativeConnection,
        namespace: stack.env.namespace ?? 'default',
        taskQueue: replayQueueOf(h.backgroundQueue),
        activitiesOnly: true,
        deps: { db: stack.db, models: createModelRegistry({ openaiCompatible: { baseURL: stack.model.baseURL } }), systemPrompt: DEFAULT_SYSTEM_PROMPT },
        activities: createReplayActivities({
          db: stack.db,
          models: createModelRegistry({ openaiCompatible: { baseURL: stack.model.baseURL } }),
          systemPrompt: DEFAULT_SYSTEM_PROMPT,
          heartbeatEveryMs: 100,
          toolPolicy: { approvalTools: [], approvalTimeoutMs: 10 * 60_000 },
          actions: actions(),
          ...(mcp ? { mcp } : {}),
          maxSteps: 4,
          backgroundQueue: h.backgroundQueue,
        }),
      });

    /** The harness with the replay queue's worker running and the scripted model answering: `fn` runs inside. */
    const withReplayWorker = (mcp: McpTools | undefined, fn: (h: Harness) => Promise<void>) => {
      stack.model.setDefault(script);
      return withHarness(opts(mcp), async (h) => {
        const worker = await replayWorker(h, mcp);
        await worker.runUntil(() => fn(h));
      });
    };

    /** Start a replay as the service does (a Replay row, the workflow on the background queue) and wait for its report. */
    async function startReplay(h: Harness, turnIds: string[], alternative: ReplayAlternative = {}) {
      const id = `rp${randomUUID().replace(/-/g, '').slice(0, 12)}`;
      await createReplay(stack.db, { id, selection: { turnId: turnIds[0] }, alternative, turnIds, requestedBy: 'operator' });
      const handle = await stack.env.client.workflow.start(replayTurnsWorkflow, {
        taskQueue: h.backgroundQueue,
        workflowId: `replay:${id}`,
        args: [{ replayId: id, turnIds, alternative, concurrency: 2 }],
      });
      return { id, handle };
    }

    async function replay(h: Harness, turnIds: string[], alternative: ReplayAlternative = {}): Promise<ReplayReport> {
      const { id, handle } = await startReplay(h, turnIds, alternative);
      const result = await handle.result();
      const row = await getReplay(stack.db, id);
      assert.equal(row?.status, 'done');
      assert.equal(row?.reportHash, result.reportHash);
      return ReplayReportSchema.parse(JSON.parse(await getBlobText(stack.db, result.reportHash)));
    }

    /** What a user could see, counted. */
    async function visible(sessionId: string) {
      const db = stack.db;
      return {
        messages: await db.message.count(),
        deliveries: await db.delivery.count(),
        receipts: await db.receipt.count({ where: { NOT: { key: { startsWith: 'replay:' } } } }),
        approvals: await db.approval.count(),
        memories: await db.memory.count(),
        mcpCalls: await db.mcpCall.count(),
        tasks: await db.task.count(),
        liveDrafts: await db.liveDraft.count({ where: { sessionId } }),
      };
    }

    /** The session's turns in order, by their turn.start receipts. */
    const turnIdsOf = async (sessionId: string) =>
      (await stack.db.receipt.findMany({ where: { sessionId, kind: 'turn.start' }, orderBy: { id: 'asc' } })).map((r) => (JSON.parse(r.data) as { turnId: string }).turnId);

    it('replays recorded turns: the same replies exactly, effects answered from the record, approvals flipped by a changed list, pruned turns refused, nothing visible written', async () => {
      await withReplayWorker(undefined, async (h) => {
        // record: a plain reply, an approved http_request that reaches the listener, a save_note
        await h.send('say hello');
        await h.waitForMessage((m) => m.role === 'assistant' && m.text.startsWith('Hello back'));
        await h.send('post the event');
        const approval = await waitFor(async () => (await stack.db.approval.findFirst({ where: { sessionId: h.sessionId, toolCallId: 'call_post' } })) ?? undefined, 'the approval');
        const decided = await h.ingress.decideApproval(approval.id, 'approve', OPERATOR);
        assert.equal(decided.applied, true, decided.reply);
        await h.waitForMessage((m) => m.role === 'assistant' && m.text.startsWith('Posted.'));
        await h.send('note it: the deploy went out');
        await h.waitForMessage((m) => m.role === 'assistant' && m.text.startsWith('Noted (the deploy went out)'));
        assert.equal(capture.requests.length, 1, 'the recorded http_request reached the listener once');
        const turns = await turnIdsOf(h.sessionId);
        assert.equal(turns.length, 3);
        const recordedReplies = (await stack.db.message.findMany({ where: { sessionId: h.sessionId, role: 'assistant' }, orderBy: { seq: 'asc' } })).map((m) => m.text);

        // (a) unchanged configuration: every reply again, exactly; (b) the listener sees nothing; (e) nothing visible written
        const before = await visible(h.sessionId);
        const same = await replay(h, turns);
        assert.equal(same.status, 'done');
        assert.equal(same.turns.length, 3);
        for (const [i, t] of same.turns.entries()) {
          assert.equal(t.replayable, true, t.reason);
          assert.equal(t.recorded?.reply, recordedReplies[i], `turn ${i + 1}: the recorded reply`);
          assert.equal(t.counterfactual?.reply, t.recorded?.reply, `turn ${i + 1}: the replayed reply is the recorded one`);
          assert.equal(t.replyChanged, false);
          assert.equal(t.changed, false, JSON.stringify(t));
          assert.deepEqual(t.divergences, []);
        }
        const post = same.turns[1]!;
        assert.deepEqual(post.counterfactual?.toolCalls.map((c) => [c.name, c.answer]), [['http_request', 'recorded']]);
        assert.match(post.counterfactual!.toolCalls[0]!.result ?? '', /captured #1/);
        assert.deepEqual(post.approvals?.map((a) => [a.tool, a.verdict, a.recordedWaited, a.continuedAs]), [['http_request', 'would-wait', true, 'approved']]);
        assert.deepEqual(same.turns[2]!.counterfactual?.toolCalls.map((c) => [c.name, c.answer]), [['save_note', 'recorded']]);
        assert.equal(same.summary.changed, 0);
        // the same prompt building: each replayed model request carries the recorded request's messages and tools
        const bodies = (word: string) => stack.model.requests.filter((q) => lastUserText(q.body).includes(word)).map((q) => q.body as { messages: unknown; tools: unknown });
        for (const word of ['say hello', 'post the event', 'note it']) {
          const b = bodies(word);
          const steps = b.length / 2;
          assert.ok(Number.isInteger(steps) && steps >= 1, `${word}: recorded and replayed steps`);
          for (let i = 0; i < steps; i++) {
            assert.deepEqual(b[steps + i]!.messages, b[i]!.messages, `${word}, step ${i + 1}: the same messages`);
            assert.deepEqual(b[steps + i]!.tools, b[i]!.tools, `${word}, step ${i + 1}: the same tools`);
          }
        }
        assert.equal(capture.requests.length, 1, 'no request reached the listener during the replay');
        assert.deepEqual(await visible(h.sessionId), before, 'nothing a user sees was written');
        assert.equal(await stack.db.receipt.count({ where: { key: { startsWith: 'replay:' }, kind: 'replay.end' } }), 1, "the replay's own receipt");

        // (c) a changed approval list: exactly save_note flips to "would wait"; http_request waits either way
        const flipped = await replay(h, turns, { approvalTools: ['save_note'] });
        const verdicts = flipped.turns.flatMap((t) => (t.approvals ?? []).map((a) => [a.tool, a.verdict, a.recordedWaited]));
        assert.deepEqual(verdicts, [
          ['http_request', 'would-wait', true],
          ['save_note', 'would-wait', false],
        ]);
        assert.equal(flipped.summary.approvalsFlipped, 1);
        assert.deepEqual(
          flipped.turns.map((t) => t.counterfactual?.reply),
          recordedReplies,
          'the flipped call continues as recorded (it ran): the replies stay',
        );
        assert.equal(capture.requests.length, 1);

        // (d) pruned blobs: the note turn's tool result is gone from the blob store
        const rec = await recordedTurn(stack.db, stack.env.client, turns[2]!);
        assert.equal(rec.replayable, true);
        const resultHash = rec.replayable ? rec.toolCalls[0]!.resultHash! : '';
        await stack.db.blob.delete({ where: { hash: resultHash } });
        const pruned = await replay(h, [turns[0]!, turns[2]!]);
        assert.equal(pruned.turns[0]!.replayable, true);
        assert.equal(pruned.turns[1]!.replayable, false);
        assert.match(pruned.turns[1]!.reason ?? '', /blobs pruned: 1 of the turn's stored messages are gone/);
        assert.equal(pruned.summary.notReplayable, 1);
        assert.deepEqual(await visible(h.sessionId), before, 'still nothing a user sees was written');
      });
    });

    it('a replayed turn whose model calls other tools: nothing runs (an MCP tool, http_request, send_email, run_command), the model is told they were simulated, the report marks the divergences', async () => {
      const dataDir = mkdtempSync(path.join(tmpdir(), 'steward-replay-'));
      const mcp = createMcpTools({ db: stack.db, dataDir });
      try {
        await createMcpService({ db: stack.db, manager: mcp.manager }).add(stdioServer('every', [serverEntry('@modelcontextprotocol/server-everything'), 'stdio'], { allowTools: ['echo', 'get-sum'], readOnlyTools: ['echo', 'get-sum'] }), OPERATOR);
        await withReplayWorker(mcp, async (h) => {
          await h.send('use the tools');
          await h.waitForMessage((m) => m.role === 'assistant' && m.text.startsWith('Echoed:'), { timeoutMs: 60_000 });
          assert.equal(await stack.db.mcpCall.count(), 1, 'the recorded MCP call ran');
          const [turnId] = await turnIdsOf(h.sessionId);
          const before = await visible(h.sessionId);
          const connections = capture.connections;
          const requests = capture.requests.length;

          const r = await replay(h, [turnId!], { model: 'openai-compatible:other-model' });
          const t = r.turns[0]!;
          assert.equal(t.replayable, true, t.reason);
          assert.equal(t.counterfactual?.reply, 'Done, the other way.');
          assert.equal(t.counterfactual?.model, 'openai-compatible:other-model');
          assert.deepEqual(
            t.counterfactual?.toolCalls.map((c) => [c.name, c.answer]),
            [
              ['every__echo', 'recorded'],
              ['every__get-sum', 'simulated'],
              ['http_request', 'simulated'],
              ['send_email', 'simulated'],
              ['run_command', 'simulated'],
            ],
          );
          assert.equal(t.divergences?.length, 4);
          assert.deepEqual(t.toolCalls, { same: ['every__echo'], different: [], new: ['every__get-sum', 'http_request', 'send_email', 'run_command'], dropped: [] });
          assert.equal(t.changed, true);
          assert.equal(r.summary.replyChanged, 1);
          // the model was told, in the replay's second step, that the calls were simulated
          const told = stack.model.requests.filter((q) => (q.body as { model?: string }).model === 'other-model').map((q) => JSON.stringify(q.body)).at(-1) ?? '';
          assert.match(told, /Simulated \(counterfactual replay\): send_email was not executed/);
          assert.equal(capture.connections, connections, 'no connection reached the listener (HTTP or SMTP)');
          assert.equal(capture.requests.length, requests);
          assert.deepEqual(await visible(h.sessionId), before, 'no MCP call, nothing a user sees');
        });
      } finally {
        await mcp.close();
        rmSync(dataDir, { recursive: true, force: true });
      }
    });

    /** The replay service as `steward start` wires it, over this stack and the harness's background queue. */
    const serviceOf = (h: Harness): ReplayService =>
      createReplayService({
        db: stack.db,
        client: stack.env.client,
        taskQueue: h.backgroundQueue,
        account: 'default',
        configuredProviders: () => ['openai-compatible'],
        store: replayStoreOf(stack.db),
        formats: replayReportFormats,
      });
    /** The replay runs Temporal has under this replay id (the parent; its turns are children). */
    const runsOf = async (id: string) => {
      const runs: string[] = [];
      for await (const w of stack.env.client.workflow.list({ query: `WorkflowId = "replay:${id}"` })) runs.push(w.runId);
      return runs;
    };
    const ended = (id: string) =>
      waitFor(async () => {
        const r = await getReplay(stack.db, id);
        return r && r.status !== 'running' ? r : undefined;
      }, `replay ${id} ended`, 60_000);

    it('the run is the ledger, the row its projection: keyed starts give one replay, an API that dies after the start still ends with a row that reaches done, a failed or terminated run ends its row', async () => {
      await withReplayWorker(undefined, async (h) => {
        await h.send('say hello');
        await h.waitForMessage((m) => m.role === 'assistant' && m.text.startsWith('Hello back'));
        const [turnId] = await turnIdsOf(h.sessionId);
        const service = serviceOf(h);
        const body = { selection: { turnId } };
        const rowsBefore = await stack.db.replay.count();

        // the same key twice at once, then again: one id, one run, one row
        const key = `k-${randomUUID()}`;
        const [a, b] = await Promise.all([service.start(OPERATOR, body, { key }), service.start(OPERATOR, body, { key })]);
        assert.equal(a.id, b.id);
        assert.equal(a.id, replayIdFor(OPERATOR.id, key));
        assert.deepEqual([a.turns, b.turns], [1, 1]);
        const again = await service.start(OPERATOR, { selection: { turnId }, concurrency: 3 }, { key });
        assert.deepEqual(again, a, 'a retry answers with the first call’s replay, whatever its body says');
        assert.equal((await ended(a.id)).status, 'done');
        assert.deepEqual((await waitFor(async () => ((await runsOf(a.id)).length > 0 ? runsOf(a.id) : undefined), 'the run listed')).length, 1, 'one run');
        assert.equal(await stack.db.replay.count(), rowsBefore + 1, 'one row');
        // without a key, two starts are two replays
        const [x, y] = await Promise.all([service.start(OPERATOR, body), service.start(OPERATOR, body)]);
        assert.notEqual(x.id, y.id);
        await Promise.all([ended(x.id), ended(y.id)]);

        // the API dies between the run's start and its row write: the run writes the row, which reaches done
        const crashKey = `k-${randomUUID()}`;
        const crashed = replayIdFor(OPERATOR.id, crashKey);
        const disarm = armFaultPoint('replay.started');
        try {
          await assert.rejects(service.start(OPERATOR, body, { key: crashKey }), (err: unknown) => err instanceof InjectedFault);
        } finally {
          disarm();
        }
        const row = await ended(crashed);
        assert.equal(row.status, 'done', row.error ?? '');
        assert.ok(row.reportHash, 'its report is kept');
        assert.deepEqual(row.turnIds, [turnId]);
        assert.equal(row.requestedBy, OPERATOR.name);
        // the client retries after the crash: the same replay, nothing new started
        assert.equal((await service.start(OPERATOR, body, { key: crashKey })).id, crashed);
        assert.equal((await runsOf(crashed)).length, 1);
        assert.equal((await service.get(OPERATOR, crashed)).status, 'done');

        // a run that fails (its report does not hold its schema): the row ends failed, with the reason
        const failing = `rpfail${randomUUID().replace(/-/g, '').slice(0, 10)}`;
        await startReplayWorkflow(stack.env.client, h.backgroundQueue, { replayId: failing, turnIds: [turnId!], alternative: {}, concurrency: 1, selection: { everything: true }, requestedBy: 'test' });
        await assert.rejects(stack.env.client.workflow.getHandle(`replay:${failing}`).result(), /Workflow execution failed/);
        const failed = await ended(failing);
        assert.equal(failed.status, 'failed');
        assert.match(failed.error ?? '', /the report of replay rpfail\w+ is invalid: selection/);
        assert.equal((await service.get(OPERATOR, failing)).error, failed.error);

        // a run terminated from the Temporal UI writes nothing: reading the replay projects its end
        const slow = await service.start(OPERATOR, { selection: { turnId }, alternative: { model: 'openai-compatible:slow-model' } });
        await waitFor(async () => (await getReplay(stack.db, slow.id)) ?? undefined, 'the slow replay row');
        await stack.env.client.workflow.getHandle(slow.workflowId).terminate('test: terminated');
        const seen = await service.get(OPERATOR, slow.id);
        assert.equal(seen.status, 'failed');
        assert.match(seen.error ?? '', /ended terminated/);
        assert.equal((await getReplay(stack.db, slow.id))?.status, 'failed');
      });
    });

    it('a cancelled replay cancels the turn in flight and keeps its report, status cancelled', async () => {
      await withReplayWorker(undefined, async (h) => {
        await h.send('say hello');
        await h.waitForMessage((m) => m.role === 'assistant' && m.text.startsWith('Hello back'));
        const turns = await turnIdsOf(h.sessionId);
        const { id, handle } = await startReplay(h, turns, { model: 'openai-compatible:slow-model' });
        const aborted = stack.model.aborted;
        await waitFor(() => stack.model.requests.some((q) => (q.body as { model?: string }).model === 'slow-model') || undefined, 'the slow model call');
        await handle.cancel();
        await assert.rejects(handle.result(), /cancel/i);
        await stack.model.waitForAborted(aborted + 1, 15_000);
        const row = await waitFor(async () => {
          const r = await getReplay(stack.db, id);
          return r?.status === 'cancelled' ? r : undefined;
        }, 'the cancelled replay');
        const report = ReplayReportSchema.parse(JSON.parse(await getBlobText(stack.db, row.reportHash!)));
        assert.equal(report.status, 'cancelled');
        assert.equal(report.turns.length, 1);
        assert.match(report.turns[0]!.error ?? '', /cancelled/);
      });
    });
  });
}
