/**
 * Operations commands against real parts: `steward trace` rebuilds a real chat turn (a tool call
 * an admin approved, steered while it waited), which ran inside its session workflow, from the
 * receipts and the session's Temporal history on the dev server, and a turn that runs as its own
 * workflow (an objective run's); `steward receipts
 * export` returns exactly the rows its filters name, paged; `steward doctor` passes on a
 * healthy stack and names each broken part with its fix (nothing listening at the Temporal
 * address, a namespace without Steward's search attributes, an unmigrated database, the model
 * server down, chat tokens a loopback double rejects). Each command also runs as the real CLI
 * (`node --import tsx platform/main.ts ...`).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { migrateDatabase } from '../../domain/db.js';
import { OPERATOR } from '../../domain/governance.js';
import { findTemporalCli } from '../../platform/temporal-server.js';
import { DoctorReportSchema, runDoctor, type DoctorReport } from '../../platform/doctor.js';
import { exportReceipts, ExportArgsSchema, parseInstant } from '../../platform/ops-cli.js';
import { buildTrace, TraceNotFoundError, TraceSchema, type Trace } from '../../platform/trace.js';
import { startDiscordDouble, type DiscordDouble } from '../helpers/discord-double.js';
import { freePort, spawnProcess } from '../helpers/process.js';
import { useStack, waitFor, withHarness } from '../helpers/steward.js';
import { startTelegramDouble, type TelegramDouble } from '../helpers/telegram-double.js';

const run = promisify(execFile);

/** Run the real CLI with exactly these Steward settings (none inherited); resolves with exit code and output. */
async function cli(args: string[], env: Record<string, string>, timeoutMs = 120_000): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const base: NodeJS.ProcessEnv = { ...process.env };
  for (const k of Object.keys(base)) if (k.startsWith('STEWARD_') || k.startsWith('TEMPORAL_') || k.startsWith('TELEGRAM_') || k.startsWith('DISCORD_') || k === 'DATABASE_URL' || k.endsWith('_API_KEY')) delete base[k];
  const p = spawnProcess(process.execPath, ['--import', 'tsx', 'platform/main.ts', ...args], { ...base, STEWARD_LOG_LEVEL: 'warn', ...env });
  let stdout = '';
  let stderr = '';
  p.child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
  p.child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
  const { code } = await p.exited;
  clearTimeout(timer);
  return { code, stdout, stderr };
}

const byId = (r: DoctorReport, id: string) => {
  const c = r.checks.find((x) => x.id === id);
  assert.ok(c, `no check ${id}`);
  return c;
};

/** A fix is one concrete line. */
function assertFix(fix: string | null, re: RegExp): void {
  assert.ok(fix, 'a fix is given');
  assert.doesNotMatch(fix, /\n/);
  assert.match(fix, re);
}

describe('steward trace and receipts export', () => {
  const stack = useStack();

  it('trace rebuilds a turn that ran inside its session: ingress, its handoff (the inbound update), model calls, approval, steering, tool, delivery marker, in order, with the session run', async (t) => {
    await withHarness(
      {
        env: stack.env,
        db: stack.db,
        providers: { openaiCompatible: { baseURL: stack.model.baseURL } },
        toolPolicy: { approvalTools: ['save_note'], approvalTimeoutMs: 120_000 },
      },
      async (h) => {
        // turn 1 of the session: a plain reply (the trace of turn 2 must leave it out)
        stack.model.enqueue({ text: 'Hello there.' });
        const firstId = `m-${randomUUID().slice(0, 8)}`;
        await h.send('hello', { id: firstId });
        await h.waitForMessage((m) => m.role === 'assistant' && m.text === 'Hello there.');

        // turn 2: a tool call an admin approves, steered while it waits
        stack.model.enqueue({ toolCalls: [{ id: 'call_note', name: 'save_note', arguments: JSON.stringify({ note: 'ship on Friday' }) }] });
        stack.model.enqueue({ text: 'Noted for Friday.' });
        const messageId = `m-${randomUUID().slice(0, 8)}`;
        const sent = await h.send('remember: ship on Friday', { id: messageId });
        assert.equal(sent.kind, 'message');

        const approval = await waitFor(() => stack.db.approval.findFirst({ where: { sessionId: h.sessionId, status: 'pending' } }).then((a) => a ?? undefined), 'the approval request');
        // the admins have been asked (the receipt is written once they are): then steering, then the decision
        await waitFor(() => stack.db.receipt.findFirst({ where: { kind: 'approval.requested', sessionId: h.sessionId } }).then((r) => r ?? undefined), 'the approval.requested receipt');
        const steered = await h.send('/steer say it in one line');
        assert.match(steered.reply ?? '', /running turn/, JSON.stringify(steered));
        const decided = await h.ingress.decideApproval(approval.id, 'approve', OPERATOR);
        assert.equal(decided.applied, true, decided.reply);
        await h.waitForMessage((m) => m.role === 'assistant' && m.text === 'Noted for Friday.');
        const starts = await waitFor(async () => {
          const rows = await stack.db.receipt.findMany({ where: { kind: 'turn.start', sessionId: h.sessionId }, orderBy: { id: 'asc' } });
          return rows.length === 2 ? rows : undefined;
        }, 'two turn.start receipts');
        const turnIdOf = (r: { data: string }) => (JSON.parse(r.data) as { turnId: string }).turnId;
        const [turn1, turnId] = starts.map(turnIdOf) as [string, string];
        assert.match(turnId, new RegExp(`^${h.sessionId.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:turn:2:[0-9a-f]{8}$`));
        // the turn ran inside the session: its receipts name the session's workflow and run, no workflow has the turn's id
        const end = await waitFor(() => stack.db.receipt.findFirst({ where: { kind: 'turn.end', key: `${turnId}:end` } }).then((r) => r ?? undefined), 'the turn.end receipt');
        assert.equal(end.workflowId, h.sessionId);
        const runId = end.runId!;
        assert.equal(starts[1]!.runId, runId);
        await assert.rejects(stack.env.client.workflow.getHandle(turnId).describe(), (err: unknown) => /not found/i.test(String((err as Error).message)));

        const opts = { db: stack.db, client: stack.env.client, namespace: 'default', uiBase: 'http://127.0.0.1:8233' };
        // the last model step delivered the reply (steward-deliver-in-step): its completion is recorded just after turn.end
        const trace = await waitFor(async () => {
          const tr = await buildTrace(messageId, opts);
          return tr.timeline.some((e) => e.kind === 'activity.completed' && e.summary.includes('[Turn 2: model step 2')) ? tr : undefined;
        }, 'the last model step completed in the trace');
        TraceSchema.parse(trace);
        assert.equal(trace.matched, 'message');
        const key = `in:http:${h.account}:${h.chatId}:${messageId}`;
        assert.equal(trace.message?.key, key);
        assert.deepEqual(trace.notes, []);
        assert.deepEqual(trace.turn, { turnId, workflowId: h.sessionId, runId, inline: true, inbound: [key] });
        assert.deepEqual(
          trace.runs.map((r) => [r.workflowId, r.runId, r.workflowType, r.status, r.history]),
          [[h.sessionId, runId, 'sessionWorkflow', 'running', true]],
        );
        assert.equal(trace.runs[0]!.uiUrl, `http://127.0.0.1:8233/namespaces/default/workflows/${encodeURIComponent(h.sessionId)}/${runId}/history`);

        const tl = trace.timeline;
        const dump = (x: Trace['timeline']) => x.map((e) => `${e.ms} ${e.source} ${e.kind} ${e.summary}`).join('\n');
        const at = (pred: (e: Trace['timeline'][number]) => boolean, what: string, from = 0) => {
          const i = tl.findIndex((e, n) => n >= from && pred(e));
          assert.ok(i >= 0, `${what} in the timeline:\n${dump(tl)}`);
          return i;
        };
        const receipt = (kind: string, from = 0) => at((e) => e.source === 'receipt' && e.kind === kind, `receipt ${kind}`, from);
        const iIngress = receipt('ingress');
        const iSignal = at((e) => e.kind === 'update.accepted' && e.summary === `update inbound accepted (message ${key})`, "the message's inbound update to the session (its handoff)");
        const iScheduled = at((e) => e.kind === 'activity.scheduled' && /^modelStep scheduled .*: Turn 2: model step 1 \(openai-compatible:test-model\)$/.test(e.summary), "the turn's first model step, scheduled by the session");
        const iTurn = receipt('turn.start');
        const iModel1 = receipt('model.call');
        const iModel1Done = at((e) => e.kind === 'activity.completed' && e.summary.startsWith('modelStep') && e.summary.includes('[Turn 2: model step 1'), 'the first model step completed', iScheduled);
        const iAsked = receipt('approval.requested');
        const iSteer = at((e) => e.kind === 'update.accepted' && e.summary === 'update steer accepted', 'the steering update', iAsked);
        const iUpdate = at((e) => e.kind === 'update.accepted' && /approvalDecision accepted: approve approval/.test(e.summary), 'the approval update', iSteer);
        const iDecision = receipt('approval.decision');
        const iTool = receipt('tool.call');
        const iModel2 = receipt('model.call', iTool);
        const iDelivery = at((e) => e.source === 'receipt' && e.kind === 'delivery' && /^reply delivered/.test(e.summary), 'the reply delivery', iModel2);
        const iEnd = receipt('turn.end');
        const iStepDone = at((e) => e.kind === 'activity.completed' && e.summary.startsWith('modelStep') && e.summary.includes('[Turn 2: model step 2'), 'the step that delivered, completed in the session history', iDelivery);
        const order = [iIngress, iSignal, iScheduled, iTurn, iModel1, iModel1Done, iAsked, iSteer, iUpdate, iDecision, iTool, iModel2, iDelivery, iEnd, iStepDone];
        assert.deepEqual([...order].sort((a, b) => a - b), order, `in order: ${order.join(', ')}\n${dump(tl)}`);
        assert.match(tl[iTool]!.summary, /tool save_note \(call_note\) ok/);
        assert.match(tl[iDecision]!.summary, new RegExp(`approval ${approval.id} approved by the operator`));
        assert.equal(tl[iStepDone]!.workflowId, h.sessionId);
        assert.ok(!tl.some((e) => e.kind === 'local-activity.completed' && e.summary.includes('Turn 2: reply')), 'no delivery by local activity');
        // activities with their timings, all the turn's, all in the session's run
        const model = tl.filter((e) => e.kind === 'activity.completed' && e.summary.startsWith('modelStep'));
        assert.deepEqual(model.map((e) => /\[(Turn \d+: model step \d+)/.exec(e.summary)?.[1]), ['Turn 2: model step 1', 'Turn 2: model step 2']);
        for (const e of model) assert.ok(typeof e.durationMs === 'number' && e.durationMs >= 0);
        assert.ok(tl.some((e) => e.kind === 'activity.completed' && e.summary.startsWith('requestApproval')));
        assert.ok(tl.some((e) => e.kind === 'activity.completed' && e.summary.startsWith('settleApproval')));
        assert.ok(tl.some((e) => e.kind === 'activity.completed' && e.summary.startsWith('runTool') && e.summary.includes('[Turn 2: tool save_note]')));
        for (const e of tl) if (e.source === 'history') assert.deepEqual([e.workflowId, e.runId], [h.sessionId, runId]);
        // only this turn: not turn 1's message, model step, receipts or delivery, and not the session's own start
        assert.ok(!tl.some((e) => e.summary.includes('Turn 1:') || e.summary.includes(firstId)), dump(tl));
        assert.equal(tl.filter((e) => e.kind === 'update.accepted' && e.summary.startsWith('update inbound')).length, 1, dump(tl));
        assert.equal(tl.filter((e) => e.kind === 'signal').length, 0, dump(tl));
        assert.ok(!tl.some((e) => e.kind.startsWith('workflow.')), `the session run's start is not part of the turn:\n${dump(tl)}`);
        const turn1Receipts = await stack.db.receipt.findMany({ where: { OR: [{ key: { startsWith: `${turn1}:` } }, { key: `in:http:${h.account}:${h.chatId}:${firstId}:ingress` }] } });
        assert.ok(turn1Receipts.length >= 4, 'turn 1 has receipts of its own');
        assert.ok(!tl.some((e) => turn1Receipts.some((r) => r.id === e.receiptId)), "none of turn 1's receipts");
        assert.equal(tl[0]!.ms, 0);
        for (let i = 1; i < tl.length; i++) assert.ok(tl[i]!.ms >= tl[i - 1]!.ms, 'relative times never go back');

        // the same path by the turn id (no workflow has it) and by the transcript key
        const byTurn = await buildTrace(turnId, opts);
        assert.equal(byTurn.matched, 'turn');
        assert.deepEqual(byTurn.turn, trace.turn);
        assert.deepEqual(byTurn.runs, trace.runs);
        assert.deepEqual(byTurn.timeline.map((e) => [e.source, e.kind, e.receiptId ?? e.eventId]), tl.map((e) => [e.source, e.kind, e.receiptId ?? e.eventId]));
        assert.deepEqual((await buildTrace(key, opts)).turn, trace.turn);
        // turn 1 by its message: its own path only
        const first = await buildTrace(firstId, opts);
        assert.equal(first.turn?.turnId, turn1);
        assert.ok(first.timeline.some((e) => e.source === 'receipt' && e.kind === 'delivery' && /^reply delivered/.test(e.summary)), dump(first.timeline));
        assert.ok(first.timeline.some((e) => e.kind === 'activity.completed' && e.summary.includes('[Turn 1: model step 1')), dump(first.timeline));
        // (its own message's handoff is an update: the inbound one, and no other)
        assert.ok(!first.timeline.some((e) => e.summary.includes('Turn 2:') || e.kind.startsWith('approval') || (e.kind.startsWith('update') && !e.summary.startsWith('update inbound'))), dump(first.timeline));
        assert.equal(first.timeline.filter((e) => e.kind === 'update.accepted').length, 1, dump(first.timeline));
        // the session's run id and its workflow id: the whole run, both turns, from the session's start
        for (const ref of [runId, h.sessionId]) {
          const whole = await buildTrace(ref, opts);
          assert.equal(whole.matched, ref === runId ? 'run' : 'workflow');
          assert.deepEqual(whole.runs.map((r) => [r.runId, r.workflowType]), [[runId, 'sessionWorkflow']]);
          assert.equal(whole.timeline.filter((e) => e.source === 'receipt' && e.kind === 'turn.start').length, 2);
          assert.ok(whole.timeline.some((e) => e.kind === 'workflow.started' && e.summary.startsWith('sessionWorkflow')));
          assert.equal(whole.timeline.filter((e) => e.source === 'receipt' && e.kind === 'turn.end').length, 2, "both turns' ends");
        }
        await assert.rejects(buildTrace('no-such-message-or-run', opts), (err: unknown) => err instanceof TraceNotFoundError && /Nothing matches no-such-message-or-run: it is not an inbound message id/.test(err.message));
        await assert.rejects(buildTrace(`${h.sessionId}:turn:99:${runId.slice(0, 8)}`, opts), (err: unknown) => err instanceof TraceNotFoundError);

        // the real CLI: JSON and the human timeline with the session run's UI link
        const env = { DATABASE_URL: stack.database.url, TEMPORAL_ADDRESS: stack.env.address, TEMPORAL_NAMESPACE: 'default', STEWARD_TEMPORAL_UI_URL: 'http://ui.example:8080' };
        const json = await cli(['trace', messageId, '--json'], env);
        assert.equal(json.code, 0, json.stderr);
        const parsed = TraceSchema.parse(JSON.parse(json.stdout));
        assert.deepEqual(parsed.runs.map((r) => [r.runId, r.uiUrl]), [[runId, `http://ui.example:8080/namespaces/default/workflows/${encodeURIComponent(h.sessionId)}/${runId}/history`]]);
        assert.equal(parsed.turn?.turnId, turnId);
        assert.deepEqual(parsed.timeline.map((e) => e.kind), tl.map((e) => e.kind));
        const human = await cli(['trace', turnId], env);
        assert.equal(human.code, 0, human.stderr);
        t.diagnostic(`steward trace ${turnId}:\n${human.stdout}`);
        const esc = (x: string) => x.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
        assert.match(human.stdout, new RegExp(`^Turn ${esc(turnId)}, inside the session's run`, 'm'));
        assert.match(human.stdout, new RegExp(`Run ${esc(h.sessionId)}  run id ${runId}  sessionWorkflow \\(running\\)`));
        assert.match(human.stdout, new RegExp(`Temporal UI: http://ui\\.example:8080/namespaces/default/workflows/${esc(encodeURIComponent(h.sessionId))}/${runId}/history`));
        assert.match(human.stdout, /^ +\+0 ms  receipt  ingress /m);
        assert.match(human.stdout, /history  activity\.scheduled +modelStep scheduled \(activity \d+\): Turn 2: model step 1/);
        assert.match(human.stdout, /approval\.decision +approval \w+ approved by the operator/);
        assert.match(human.stdout, /receipt  delivery +reply delivered/);
        assert.match(human.stdout, /history  activity\.completed +modelStep completed .*Turn 2: model step 2/);
        const missing = await cli(['trace', 'nothing-like-this'], env);
        assert.equal(missing.code, 1);
        assert.match(missing.stderr, /Nothing matches nothing-like-this/);
        const noArg = await cli(['trace'], env);
        assert.equal(noArg.code, 2);
        assert.match(noArg.stderr, /Usage: steward trace/);
      },
    );
  });

  it("trace follows a turn that runs as its own workflow (an objective run's) by its id", async () => {
    await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } } }, async (h) => {
      const op = { id: 'operator', name: 'the operator' };
      stack.model.setDefault(() => ({ text: 'Here is the digest.' }));
      const o = await h.objectives.create({ name: `trace-${randomUUID().slice(0, 8)}`, prompt: 'Write the digest', chatId: h.chatId, account: h.account, schedule: { cron: '0 9 * * *', timezone: 'UTC' }, paused: true }, op);
      try {
        await h.objectives.trigger(o.id, op);
        const run = await waitFor(async () => {
          const r = await stack.db.objectiveRun.findFirst({ where: { objectiveId: o.id } });
          return r && r.status !== 'running' && r.turnId ? r : undefined;
        }, 'the objective run', 60_000);
        const turnId = run.turnId!;
        const handle = stack.env.client.workflow.getHandle(turnId);
        await handle.result();
        const { runId } = await handle.describe();
        const trace = await buildTrace(turnId, { db: stack.db, client: stack.env.client, namespace: 'default', uiBase: 'http://127.0.0.1:8233' });
        TraceSchema.parse(trace);
        assert.equal(trace.matched, 'workflow');
        assert.deepEqual(trace.runs.map((r) => [r.workflowId, r.runId, r.workflowType, r.status, r.history]), [[turnId, runId, 'turnWorkflow', 'completed', true]]);
        assert.equal(trace.runs[0]!.uiUrl, `http://127.0.0.1:8233/namespaces/default/workflows/${encodeURIComponent(turnId)}/${runId}/history`);
        assert.equal(trace.turn?.inline, false);
        const kinds = trace.timeline.map((e) => `${e.source} ${e.kind}`);
        for (const k of ['history workflow.started', 'receipt turn.start', 'receipt model.call', 'history activity.completed', 'receipt delivery', 'receipt turn.end', 'history workflow.completed']) {
          assert.ok(kinds.includes(k), `${k} in ${kinds.join(', ')}`);
        }
        assert.ok(trace.timeline.some((e) => e.kind === 'workflow.started' && /^turnWorkflow started .*\(child of objective-run:/.test(e.summary)));
        assert.ok(!trace.timeline.some((e) => e.kind === 'local-activity.completed'), 'a turn workflow delivers with a regular activity');
      } finally {
        await h.objectives.remove(o.id, op);
      }
    });
  });

  it('receipts export returns exactly the rows of a time window, a chat and a run, as JSONL in pages', async () => {
    const db = stack.db;
    const tag = randomUUID().slice(0, 8);
    const chatA = `chat-a-${tag}`;
    const chatB = `chat-b-${tag}`;
    const sA1 = `session:telegram:bot:${chatA}`;
    const sA2 = `session:discord:bot:${chatA}`;
    const sB = `session:telegram:bot:${chatB}`;
    for (const [id, platform, chatId] of [[sA1, 'telegram', chatA], [sA2, 'discord', chatA], [sB, 'telegram', chatB]] as const) {
      await db.session.create({ data: { id, platform, account: 'bot', chatId } });
    }
    const base = Date.parse('2001-02-03T10:00:00Z');
    const rows: Array<{ name: string; at: number; sessionId: string | null; workflowId: string | null; runId: string | null; kind: string }> = [
      { name: 'a1-early', at: base - 3_600_000, sessionId: sA1, workflowId: `wf-1-${tag}`, runId: `run-1-${tag}`, kind: 'ingress' },
      { name: 'a1-in', at: base + 60_000, sessionId: sA1, workflowId: `wf-1-${tag}`, runId: `run-1-${tag}`, kind: 'model.call' },
      { name: 'a2-in', at: base + 120_000, sessionId: sA2, workflowId: `wf-2-${tag}`, runId: `run-2-${tag}`, kind: 'delivery' },
      { name: 'b-in', at: base + 180_000, sessionId: sB, workflowId: `wf-3-${tag}`, runId: `run-3-${tag}`, kind: 'model.call' },
      { name: 'none-in', at: base + 240_000, sessionId: null, workflowId: null, runId: null, kind: 'binding.change' },
      { name: 'a1-late', at: base + 7_200_000, sessionId: sA1, workflowId: `wf-1-${tag}`, runId: `run-1b-${tag}`, kind: 'delivery' },
    ];
    const ids = new Map<string, number>();
    for (const r of rows) {
      const row = await db.receipt.create({ data: { kind: r.kind, sessionId: r.sessionId, workflowId: r.workflowId, runId: r.runId, data: JSON.stringify({ name: r.name, tag }), createdAt: new Date(r.at) } });
      ids.set(r.name, row.id);
    }
    const exported = async (args: Record<string, string>) => {
      let text = '';
      const pages: number[] = [];
      await exportReceipts(db, ExportArgsSchema.parse(args), (s) => {
        text += s;
        pages.push(s.split('\n').length - 1);
      });
      const lines = text.split('\n').filter(Boolean).map((l) => JSON.parse(l) as { id: number; data: { name: string }; at: string });
      return { names: lines.map((l) => l.data.name), lines, pages };
    };
    const window = { since: '2001-02-03T10:00:00Z', until: '2001-02-03T11:00:00Z' };
    assert.deepEqual((await exported(window)).names, ['a1-in', 'a2-in', 'b-in', 'none-in']);
    assert.deepEqual((await exported({ ...window, chat: chatA })).names, ['a1-in', 'a2-in'], 'both sessions of the chat id');
    assert.deepEqual((await exported({ chat: sA1 })).names, ['a1-early', 'a1-in', 'a1-late'], 'a session id');
    assert.deepEqual((await exported({ run: `wf-1-${tag}` })).names, ['a1-early', 'a1-in', 'a1-late'], 'a workflow id: all its runs');
    assert.deepEqual((await exported({ run: `run-1b-${tag}` })).names, ['a1-late'], 'a run id');
    assert.deepEqual((await exported({ chat: chatA, kind: 'delivery' })).names, ['a2-in', 'a1-late']);
    assert.deepEqual((await exported({ chat: chatA, limit: '2' })).names, ['a1-early', 'a1-in']);
    assert.deepEqual((await exported({ chat: `nobody-${tag}` })).names, []);
    const one = (await exported({ run: `run-2-${tag}` })).lines[0]!;
    assert.deepEqual(one, { id: ids.get('a2-in'), kind: 'delivery', workflowId: `wf-2-${tag}`, runId: `run-2-${tag}`, sessionId: sA2, actor: null, data: { name: 'a2-in', tag }, at: new Date(base + 120_000).toISOString() });

    // durations count back from now
    const now = Date.now();
    for (const [name, ago] of [['recent-3h', 3 * 3_600_000], ['recent-1h', 3_600_000], ['recent-10m', 600_000]] as const) {
      await db.receipt.create({ data: { kind: 'command', workflowId: `wf-recent-${tag}`, data: JSON.stringify({ name }), createdAt: new Date(now - ago) } });
    }
    assert.deepEqual((await exported({ run: `wf-recent-${tag}`, since: '2h' })).names, ['recent-1h', 'recent-10m']);
    assert.deepEqual((await exported({ run: `wf-recent-${tag}`, since: '2h', until: '30m' })).names, ['recent-1h']);
    assert.ok(Math.abs(parseInstant('2h', now)!.getTime() - (now - 7_200_000)) < 5);
    assert.equal(parseInstant('yesterday'), undefined);
    assert.equal(ExportArgsSchema.safeParse({ since: 'soon' }).success, false);
    assert.equal(ExportArgsSchema.safeParse({ since: '1h', until: '2h' }).success, false, 'since after until');
    assert.equal(ExportArgsSchema.safeParse({ limit: '0' }).success, false);

    // a large run: pages of 500, all rows in id order, never more than asked
    const big = `wf-big-${tag}`;
    await db.receipt.createMany({ data: Array.from({ length: 1203 }, (_, i) => ({ kind: 'model.call', workflowId: big, data: JSON.stringify({ name: `big-${i}` }) })) });
    const all = await exported({ run: big });
    assert.equal(all.names.length, 1203);
    assert.deepEqual(all.pages, [500, 500, 203]);
    assert.deepEqual(all.names.slice(0, 2), ['big-0', 'big-1']);
    assert.equal(all.names.at(-1), 'big-1202');
    assert.ok(all.lines.every((l, i) => i === 0 || l.id > all.lines[i - 1]!.id));
    const capped = await exported({ run: big, limit: '700' });
    assert.deepEqual(capped.pages, [500, 200]);

    // the real CLI: `receipts export`, the `receipts` alias with its old flags, and a bad argument
    const env = { DATABASE_URL: stack.database.url };
    const viaCli = await cli(['receipts', 'export', '--chat', chatA, '--since', window.since, '--until', window.until], env);
    assert.equal(viaCli.code, 0, viaCli.stderr);
    assert.deepEqual(viaCli.stdout.trim().split('\n').map((l) => (JSON.parse(l) as { data: { name: string } }).data.name), ['a1-in', 'a2-in']);
    const alias = await cli(['receipts', '--session', sA1, '--kind', 'delivery'], env);
    assert.equal(alias.code, 0, alias.stderr);
    assert.deepEqual(alias.stdout.trim().split('\n').map((l) => (JSON.parse(l) as { data: { name: string } }).data.name), ['a1-late']);
    const bigCli = await cli(['receipts', 'export', '--run', big], env);
    assert.equal(bigCli.stdout.trim().split('\n').length, 1203);
    const bad = await cli(['receipts', 'export', '--since', 'last tuesday'], env);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--since: expected an ISO time/);
    assert.equal(bad.stdout, '');
  });
});

/** A token in Discord's format (the configuration checks it), the double's own. */
const DC_TOKEN = 'MTIzNDU2Nzg5MDEyMzQ1Njc4.GdoCtr.abcdefghijklmnopqrstuvwxyz012345';

describe('steward doctor', () => {
  const stack = useStack();
  let tg: TelegramDouble;
  let dc: DiscordDouble;
  let dir: string;
  before(async () => {
    tg = await startTelegramDouble();
    dc = await startDiscordDouble({ token: DC_TOKEN });
    dir = mkdtempSync(path.join(tmpdir(), 'steward-doctor-'));
  });
  after(async () => {
    await tg?.close();
    await dc?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const healthy = (): Record<string, string> => ({
    STEWARD_DATA_DIR: dir,
    DATABASE_URL: stack.database.url,
    TEMPORAL_ADDRESS: stack.env.address,
    TEMPORAL_NAMESPACE: 'default',
    STEWARD_MODEL: 'openai-compatible:test-model',
    STEWARD_MODEL_BASE_URL: stack.model.baseURL,
    TELEGRAM_BOT_TOKEN: tg.token,
    TELEGRAM_API_ROOT: tg.apiRoot,
    DISCORD_BOT_TOKEN: DC_TOKEN,
    DISCORD_API_URL: dc.apiBase,
  });

  it('passes on the healthy stack; the CLI prints JSON that validates and exits 0', async () => {
    const env = healthy();
    const report = await runDoctor({ env, cwd: dir });
    DoctorReportSchema.parse(report);
    assert.deepEqual(report.checks.map((c) => c.id), ['config', 'temporal', 'namespace', 'search-attributes', 'database', 'migrations', 'sandbox', 'model', 'prices', 'telegram', 'discord', 'inbox', 'mcp']);
    // no workspace has an IMAP inbox here (test/e2e/inbox.test.ts checks a failing one), no MCP server is registered
    assert.equal(byId(report, 'inbox').status, 'skip');
    assert.equal(byId(report, 'mcp').status, 'skip');
    // the scripted model has no price: its calls count tokens only, and doctor says how to price it
    assert.equal(byId(report, 'prices').status, 'warn');
    assert.match(byId(report, 'prices').message, /No price for openai-compatible:test-model/);
    for (const c of report.checks) {
      if (c.id === 'sandbox' || c.id === 'inbox' || c.id === 'mcp' || c.id === 'prices') continue;
      assert.equal(c.status, 'ok', `${c.id}: ${c.message}`);
      assert.equal(c.fix, null);
    }
    // bwrap is installed here; where it cannot run the check warns (with a fix) and the report stays ok
    const sandbox = byId(report, 'sandbox');
    assert.ok(sandbox.status === 'ok' || (sandbox.status === 'warn' && sandbox.fix), sandbox.message);
    assert.equal(report.ok, true);
    assert.match(byId(report, 'telegram').message, /@steward_test_bot/);
    assert.match(byId(report, 'search-attributes').message, /All 7 Steward search attributes are registered/);
    assert.match(byId(report, 'migrations').message, /All \d+ migrations are applied/);

    const r = await cli(['doctor', '--json'], env);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const fromCli = DoctorReportSchema.parse(JSON.parse(r.stdout));
    assert.deepEqual(fromCli.checks.map((c) => [c.id, c.status]), report.checks.map((c) => [c.id, c.status]));
    const human = await cli(['doctor', '--skip-sandbox'], env);
    assert.equal(human.code, 0, human.stdout + human.stderr);
    assert.match(human.stdout, /^\[ok {2}\] Temporal reachable/m);
    assert.match(human.stdout, /Steward is ready: 9 ok, 1 warn, 3 skip\./);
    // the one line on what this machine cannot do: none where the sandbox works
    if (sandbox.status === 'ok') {
      assert.deepEqual(fromCli.unavailable, []);
      assert.doesNotMatch(human.stdout, /Unavailable/);
    } else {
      assert.match((await cli(['doctor'], env)).stdout, /\nUnavailable on this machine: commands \(run_command\) and repository changes refused \(no sandbox: /);
    }
  });

  it('nothing listening at TEMPORAL_ADDRESS: fails with how to start it; the CLI exits 1', async () => {
    const port = await freePort();
    const env = { ...healthy(), TEMPORAL_ADDRESS: `127.0.0.1:${port}` };
    const report = await runDoctor({ env, cwd: dir, skipSandbox: true, timeoutMs: 2000 });
    const t = byId(report, 'temporal');
    assert.equal(t.status, 'fail');
    assert.match(t.message, new RegExp(`Nothing answers at 127\\.0\\.0\\.1:${port} \\(TEMPORAL_ADDRESS\\): ECONNREFUSED`));
    assertFix(t.fix, new RegExp(`temporal server start-dev --port ${port}`));
    assert.deepEqual([byId(report, 'namespace').status, byId(report, 'search-attributes').status], ['skip', 'skip']);
    assert.equal(report.ok, false);
    // without TEMPORAL_ADDRESS and no embedded server running: a warning on how to start it
    const embedded = await runDoctor({ env: { ...healthy(), TEMPORAL_ADDRESS: '', STEWARD_TEMPORAL_PORT: String(port) }, cwd: dir, skipSandbox: true, timeoutMs: 2000 });
    assert.equal(byId(embedded, 'temporal').status, 'warn');
    assertFix(byId(embedded, 'temporal').fix, /\.\/steward start` starts the embedded server/);

    const r = await cli(['doctor', '--json', '--skip-sandbox', '--timeout', '2s'], env);
    assert.equal(r.code, 1, r.stderr);
    const parsed = DoctorReportSchema.parse(JSON.parse(r.stdout));
    assert.equal(parsed.checks.find((c) => c.id === 'temporal')?.status, 'fail');
    const badArg = await cli(['doctor', '--timeout', 'forever'], env);
    assert.equal(badArg.code, 2);
    assert.match(badArg.stderr, /--timeout: expected a duration/);
  });

  it('a missing namespace, then one without the search attributes: each fails with a fix that works', async () => {
    const cliPath = findTemporalCli();
    assert.ok(cliPath, 'the temporal CLI is installed');
    const ns = `doctor-${randomUUID().slice(0, 8)}`;
    const env = { ...healthy(), TEMPORAL_NAMESPACE: ns };
    const missing = await runDoctor({ env, cwd: dir, skipSandbox: true });
    const n = byId(missing, 'namespace');
    assert.equal(n.status, 'fail');
    assert.match(n.message, new RegExp(`Namespace ${ns} does not exist`));
    assertFix(n.fix, new RegExp(`temporal operator namespace create --namespace ${ns} --address ${stack.env.address}`));
    assert.equal(missing.ok, false);

    // follow the fix
    const create = /`(temporal operator namespace create [^`]+)`/.exec(n.fix!)![1]!.split(' ');
    await run(cliPath, create.slice(1), { timeout: 30_000 });
    const bare = await waitFor(async () => {
      const r = await runDoctor({ env, cwd: dir, skipSandbox: true });
      // a new namespace reaches the operator service a moment after it can be described
      return byId(r, 'namespace').status === 'ok' && /^Missing/.test(byId(r, 'search-attributes').message) ? r : undefined;
    }, 'the new namespace', 30_000);
    const sa = byId(bare, 'search-attributes');
    assert.equal(sa.status, 'fail', sa.message);
    assert.equal(sa.message, `Missing in namespace ${ns}: StewardPlatform, StewardChat, StewardKind, StewardRepo, StewardGate, StewardUser, StewardBudget.`);
    assertFix(sa.fix, /`temporal operator search-attribute create --namespace \S+ --address \S+ --name StewardPlatform --type Keyword && .* --name StewardUser --type KeywordList && .* --name StewardBudget --type KeywordList`/);
    assert.equal(bare.ok, false);

    const register = /`(temporal operator search-attribute create [^`]+)`/.exec(sa.fix!)![1]!.replaceAll('temporal operator', `${JSON.stringify(cliPath)} operator`);
    await run('bash', ['-c', register], { timeout: 60_000 });
    const fixed = await waitFor(async () => {
      const r = await runDoctor({ env, cwd: dir, skipSandbox: true });
      return byId(r, 'search-attributes').status === 'ok' ? r : undefined;
    }, 'the registered search attributes', 30_000);
    assert.equal(fixed.ok, true, JSON.stringify(fixed.checks.filter((c) => c.status === 'fail')));
  });

  it('an unmigrated database: no file, then an empty one; migrating fixes it', async () => {
    const file = path.join(dir, `fresh-${randomUUID().slice(0, 8)}.db`);
    const env = { ...healthy(), DATABASE_URL: `file:${file}` };
    const none = await runDoctor({ env, cwd: dir, skipSandbox: true });
    assert.equal(byId(none, 'database').status, 'fail');
    assert.match(byId(none, 'database').message, /No SQLite database at/);
    assertFix(byId(none, 'database').fix, /\.\/steward migrate` creates and migrates it/);
    assert.equal(byId(none, 'migrations').status, 'skip');

    writeFileSync(file, '');
    const empty = await runDoctor({ env, cwd: dir, skipSandbox: true });
    assert.equal(byId(empty, 'database').status, 'ok');
    const m = byId(empty, 'migrations');
    assert.equal(m.status, 'fail');
    assert.match(m.message, /The database is not migrated: none of this release's \d+ migrations is applied \(no _prisma_migrations table\)/);
    assertFix(m.fix, /\.\/steward migrate` applies them/);
    assert.equal(empty.ok, false);

    const r = await cli(['doctor', '--skip-sandbox'], env);
    assert.equal(r.code, 1);
    assert.match(r.stdout, /^\[FAIL\] Database migrations/m);
    assert.match(r.stdout, /fix: `\.\/steward migrate` applies them/);
    assert.match(r.stdout, /Steward is NOT ready/);

    await migrateDatabase(`file:${file}`);
    const migrated = await runDoctor({ env, cwd: dir, skipSandbox: true });
    assert.equal(byId(migrated, 'migrations').status, 'ok');
    assert.equal(migrated.ok, true);
  });

  it('the model server down, tokens the chat APIs reject, an invalid setting: each fails with its fix', async () => {
    const closed = await freePort();
    const env = { ...healthy(), STEWARD_MODEL_BASE_URL: `http://127.0.0.1:${closed}/v1`, TELEGRAM_BOT_TOKEN: `7000000001:${'Z'.repeat(35)}`, DISCORD_BOT_TOKEN: `${DC_TOKEN.slice(0, -5)}WRONG` };
    const report = await runDoctor({ env, cwd: dir, skipSandbox: true, timeoutMs: 3000 });
    const model = byId(report, 'model');
    assert.equal(model.status, 'fail');
    assert.match(model.message, new RegExp(`The openai-compatible provider at http://127\\.0\\.0\\.1:${closed}/v1 is not reachable: .*ECONNREFUSED`));
    assertFix(model.fix, /Start the model server or correct STEWARD_MODEL_BASE_URL/);
    const telegram = byId(report, 'telegram');
    assert.equal(telegram.status, 'fail');
    assert.match(telegram.message, /Telegram rejected TELEGRAM_BOT_TOKEN \(HTTP 401 Unauthorized\)/);
    assert.doesNotMatch(JSON.stringify(report), /ZZZZZZZZZZ/, 'the token is never shown');
    assertFix(telegram.fix, /@BotFather/);
    const discord = byId(report, 'discord');
    assert.equal(discord.status, 'fail');
    assert.match(discord.message, /Discord rejected DISCORD_BOT_TOKEN \(HTTP 401/);
    assertFix(discord.fix, /Developer Portal/);
    assert.equal(report.ok, false);
    // everything else is still checked and fine
    for (const id of ['config', 'temporal', 'namespace', 'search-attributes', 'database', 'migrations']) assert.equal(byId(report, id).status, 'ok', id);

    // no model configured: skipped with a note, not failed; no chat tokens: skipped
    const bare = { ...healthy(), STEWARD_MODEL: '', STEWARD_MODEL_BASE_URL: '', TELEGRAM_BOT_TOKEN: '', DISCORD_BOT_TOKEN: '' };
    const skipped = await runDoctor({ env: bare, cwd: dir, skipSandbox: true });
    assert.deepEqual(['model', 'telegram', 'discord'].map((id) => byId(skipped, id).status), ['skip', 'skip', 'skip']);
    assertFix(byId(skipped, 'model').fix, /OPENAI_API_KEY, ANTHROPIC_API_KEY or STEWARD_MODEL_BASE_URL/);
    assert.equal(skipped.ok, true);

    const invalid = await runDoctor({ env: { ...healthy(), TEMPORAL_ADDRESS: 'not an address' }, cwd: dir });
    const c = byId(invalid, 'config');
    assert.equal(c.status, 'fail');
    assert.match(c.message, /TEMPORAL_ADDRESS: expected host:port/);
    assertFix(c.fix, /Correct the listed variables/);
    assert.ok(invalid.checks.filter((x) => x.id !== 'config').every((x) => x.status === 'skip'));
    assert.equal(invalid.ok, false);
  });
});
