/**
 * Counterfactual replay over the replay corpus's sessions (issue 36's guarantee, docs/replay.md):
 * with the configuration unchanged and the scripted model, a replay reproduces every recorded
 * reply exactly.
 *
 * The corpus's session histories (test/replay/histories/session-*-rp-NN.json) were recorded by
 * scripts/record-histories.ts together with their records (test/replay/records/<tag>.json): the
 * database rows a replay reads of their turns (receipts, the transcript, the blobs) and every
 * answer the scripted model gave, with the request it answered. Here each record is loaded into
 * a fresh database, and the runs are read from the corpus folder as an archive of recorded
 * histories (STEWARD_REPLAY_HISTORIES: this Temporal server never ran them, as for a run past its
 * retention). The scripted model answers a request only with the recorded answer to the same
 * request (its whole body, canonically), so a replay whose prompt building differed in any byte
 * would get no answer: every request the replay makes must be one the record has.
 *
 * Per turn: a turn that replied is replayed to the same reply, the same tool calls answered from
 * the record, no divergence; a turn that ended without a reply of the model's (stopped, refused
 * by a budget) is reported with its recorded outcome, never as a reproduced reply. The sessions'
 * legacy files (recorded before records were kept) have no records: they are not in this test.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { createReplayActivities } from '../../activities/replays.js';
import { replayQueueOf, replyKey } from '../../common/ids.js';
import { canonicalJson, ReplayReportSchema, type ReplayReport } from '../../common/replays.js';
import { DEFAULT_SYSTEM_PROMPT } from '../../config/index.js';
import { getBlobText } from '../../domain/blobs.js';
import type { Db } from '../../domain/db.js';
import { McpServerSchema } from '../../common/mcp.js';
import { PlatformSchema } from '../../common/schemas.js';
import { createMcpTools, type McpTools } from '../../domain/mcp/tools.js';
import { createSpend } from '../../domain/limits.js';
import { createModelRegistry, withSpend } from '../../domain/model.js';
import { OPERATOR } from '../../domain/governance.js';
import { closeKnowledgeIndexes, knowledgeIndexOpener } from '../../domain/knowledge/open.js';
import { insertMcpServer } from '../../domain/store/mcp.js';
import { serverEntry, stdioServer } from '../helpers/mcp-servers.js';
import { createReplay, getReplay } from '../../domain/store/replays.js';
import { openHistoryArchive } from '../../platform/history-archive.js';
import { replayTurnsWorkflow } from '../../workflows/replays/replay.js';
import { createStewardWorker } from '../../workers/main.js';
import { testDatabases } from '../helpers/db.js';
import type { RecordedRequest, ScriptedReply } from '../helpers/model-server.js';
import { recordingSender } from '../helpers/recording-sender.js';
import { useStack, waitFor, withHarness, type HarnessOptions } from '../helpers/steward.js';

const HISTORIES = fileURLToPath(new URL('../replay/histories/', import.meta.url));
const RECORDS = new URL('../replay/records/', import.meta.url);

const RecordFileSchema = z.object({
  scenario: z.string(),
  harness: z.enum(['plain', 'channels', 'mcp', 'knowledge', 'budgets']),
  sessionId: z.string(),
  receipts: z.array(z.object({ id: z.number(), key: z.string().nullable(), kind: z.string(), workflowId: z.string().nullable(), runId: z.string().nullable(), sessionId: z.string().nullable(), actor: z.string().nullable(), data: z.string(), createdAt: z.string() })),
  messages: z.array(
    z.object({
      seq: z.number(),
      key: z.string(),
      sessionId: z.string(),
      role: z.string(),
      text: z.string(),
      user: z.string().nullable(),
      identityId: z.string().nullable(),
      command: z.boolean(),
      attachments: z.string().nullable(),
      turnId: z.string().nullable(),
      createdAt: z.string(),
    }),
  ),
  blobs: z.array(z.object({ hash: z.string(), mediaType: z.string(), size: z.number(), data: z.string(), createdAt: z.string() })),
  budgets: z.array(
    z.object({
      id: z.string(),
      scope: z.string(),
      scopeId: z.string().nullable(),
      tokens: z.string().nullable(),
      micros: z.string().nullable(),
      period: z.string(),
      timezone: z.string(),
      windowSeconds: z.number().nullable(),
      source: z.string(),
      createdAt: z.string(),
      updatedAt: z.string(),
    }),
  ),
  workspaces: z.array(z.object({ name: z.string(), files: z.record(z.string(), z.string()) })),
  workspaceBindings: z.array(z.object({ platform: PlatformSchema, account: z.string(), chatId: z.string(), workspace: z.string() })),
  memories: z.array(
    z.object({
      id: z.string(),
      scope: z.string(),
      workspace: z.string().nullable(),
      platform: z.string(),
      account: z.string(),
      chatId: z.string(),
      kind: z.string(),
      text: z.string(),
      status: z.string(),
      proposedBy: z.string(),
      identityId: z.string().nullable(),
      contributors: z.string().nullable(),
      sessionId: z.string(),
      turnId: z.string(),
      toolCallId: z.string(),
      decidedBy: z.string().nullable(),
      decidedAt: z.string().nullable(),
      createdAt: z.string(),
      updatedAt: z.string(),
    }),
  ),
  exchanges: z.array(z.object({ body: z.unknown(), text: z.string(), toolCalls: z.array(z.object({ id: z.string(), name: z.string(), arguments: z.string() })) })),
});
type RecordFile = z.infer<typeof RecordFileSchema>;

const records = readdirSync(RECORDS)
  .filter((f) => f.endsWith('.json'))
  .sort()
  .map((file) => ({ file, record: RecordFileSchema.parse(JSON.parse(readFileSync(new URL(file, RECORDS), 'utf8'))) }));

/** The record's rows in a fresh database, as the recording left them (and its budgets: configuration). */
async function load(db: Db, r: RecordFile): Promise<void> {
  await db.blob.createMany({ data: r.blobs.map((b) => ({ ...b, data: new Uint8Array(Buffer.from(b.data, 'base64')), createdAt: new Date(b.createdAt) })) });
  await db.message.createMany({ data: r.messages.map((m) => ({ ...m, createdAt: new Date(m.createdAt) })) });
  await db.receipt.createMany({ data: r.receipts.map((x) => ({ ...x, createdAt: new Date(x.createdAt) })) });
  await db.budget.createMany({
    data: r.budgets.map((b) => ({ ...b, tokens: b.tokens === null ? null : BigInt(b.tokens), micros: b.micros === null ? null : BigInt(b.micros), createdAt: new Date(b.createdAt), updatedAt: new Date(b.updatedAt) })),
  });
}

/** The scripted model of a record: the recorded answer to the same request, and the requests it had none for. */
function recordedModel(r: RecordFile): { script: (req: RecordedRequest) => ScriptedReply; unmatched: unknown[] } {
  const answers = new Map<string, ScriptedReply>();
  for (const x of r.exchanges) answers.set(canonicalJson(x.body), { text: x.text, ...(x.toolCalls.length > 0 ? { toolCalls: x.toolCalls } : {}) });
  const unmatched: unknown[] = [];
  return {
    unmatched,
    script: (req) => {
      const hit = answers.get(canonicalJson(req.body));
      if (hit) return hit;
      unmatched.push(req.body);
      return { text: '(the record has no answer to this request)' };
    },
  };
}

const sqlite = testDatabases().find((d) => d.name === 'sqlite')!;

describe('replay over the replay corpus sessions: the unchanged configuration reproduces every recorded reply', () => {
  const stack = useStack(sqlite);
  const archive = openHistoryArchive(HISTORIES);

  it('the corpus has records of its sessions, and the archive indexes every history file', async () => {
    assert.ok(records.length >= 4, `records: ${records.map((r) => r.file).join(', ')}`);
    const idx = await archive.index();
    assert.deepEqual(idx.skipped, []);
    for (const { record } of records) {
      const turns = record.receipts.filter((x) => x.kind === 'turn.start');
      assert.ok(turns.length >= 1, `${record.scenario}: turns`);
      for (const t of turns) assert.ok(await archive.history(t.workflowId!, t.runId!), `${record.scenario}: the run of turn ${t.key} is in the corpus`);
    }
  });

  for (const { file, record } of records) {
    it(`${file} (${record.scenario}): every turn that replied is replayed to the same reply, tool calls answered from the record; the rest report their outcome`, { timeout: 240_000 }, async () => {
      const fresh = await sqlite.create();
      try {
        const db = fresh.db;
        await load(db, record);
        const model = recordedModel(record);
        stack.model.setDefault(model.script);
        const providers = { openaiCompatible: { baseURL: stack.model.baseURL } };
        // the scenario's setup (scripts/record-histories.ts): a Telegram sender; the MCP reference server as it was registered
        let mcp: McpTools | undefined;
        if (record.harness === 'mcp') {
          await insertMcpServer(db, McpServerSchema.parse(stdioServer('every', [serverEntry('@modelcontextprotocol/server-everything'), 'stdio'], { allowTools: ['echo', 'get-sum'], readOnlyTools: ['echo'] })), 'api');
          mcp = createMcpTools({ db, dataDir: mkdtempSync(path.join(tmpdir(), 'steward-corpus-mcp-')) });
        }
        // a workspace's files as they were, indexed again; its chats bound; the memories kept
        const dataDir = mkdtempSync(path.join(tmpdir(), 'steward-corpus-kn-'));
        const knowledge = record.harness === 'knowledge' ? knowledgeIndexOpener(fresh.url, dataDir) : undefined;
        const opts: HarnessOptions = {
          env: stack.env,
          db,
          providers,
          ...(record.harness === 'channels' ? { senders: { telegram: recordingSender() } } : {}),
          ...(mcp ? { mcp } : {}),
          ...(knowledge ? { workspaces: { dataDir, knowledge, memoryApproval: 'none' as const } } : {}),
        };
        try {
        await withHarness(opts, async (h) => {
          for (const w of record.workspaces) {
            const root = path.join(dataDir, 'workspaces', w.name);
            for (const [rel, text] of Object.entries(w.files)) {
              mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
              writeFileSync(path.join(root, rel), text);
            }
            await h.workspaces!.create(w.name, undefined, OPERATOR);
            await waitFor(async () => ((await h.workspaces!.indexStatus(w.name)).run?.phase === 'done' ? true : undefined), `${w.name} indexed`, 60_000);
          }
          for (const b of record.workspaceBindings) await h.workspaces!.bind({ platform: b.platform, account: b.account, chatId: b.chatId }, b.workspace, OPERATOR);
          await db.memory.createMany({ data: record.memories.map((m) => ({ ...m, decidedAt: m.decidedAt ? new Date(m.decidedAt) : null, createdAt: new Date(m.createdAt), updatedAt: new Date(m.updatedAt) })) });
          const worker = await createStewardWorker({
            connection: stack.env.nativeConnection,
            namespace: stack.env.namespace ?? 'default',
            taskQueue: replayQueueOf(h.backgroundQueue),
            activitiesOnly: true,
            deps: { db, models: createModelRegistry(providers), systemPrompt: DEFAULT_SYSTEM_PROMPT },
            activities: createReplayActivities({
              db,
              models: record.harness === 'budgets' ? withSpend(createModelRegistry(providers), createSpend({ db, budget: null })) : createModelRegistry(providers),
              systemPrompt: DEFAULT_SYSTEM_PROMPT,
              heartbeatEveryMs: 100,
              ...(opts.senders ? { senders: opts.senders } : {}),
              ...(mcp ? { mcp } : {}),
              ...(knowledge ? { knowledge, memoryApproval: 'none' as const } : {}),
              maxSteps: 4,
              backgroundQueue: h.backgroundQueue,
              archive,
            }),
          });
          await worker.runUntil(async () => {
            const turnIds = record.receipts.filter((x) => x.kind === 'turn.start').map((x) => (JSON.parse(x.data) as { turnId: string }).turnId);
            const visible = async () => ({ messages: await db.message.count(), receipts: await db.receipt.count({ where: { OR: [{ key: null }, { NOT: { key: { startsWith: 'replay:' } } }] } }) });
            const before = await visible();
            const id = `rp${randomUUID().replace(/-/g, '').slice(0, 12)}`;
            await createReplay(db, { id, selection: { turnId: turnIds[0]! }, alternative: {}, turnIds, requestedBy: 'operator' });
            const handle = await stack.env.client.workflow.start(replayTurnsWorkflow, {
              taskQueue: h.backgroundQueue,
              workflowId: `replay:${id}`,
              args: [{ replayId: id, turnIds, alternative: {}, concurrency: 2 }],
            });
            const result = await handle.result();
            assert.equal((await getReplay(db, id))?.status, 'done');
            const report: ReplayReport = ReplayReportSchema.parse(JSON.parse(await getBlobText(db, result.reportHash)));
            assert.equal(report.turns.length, turnIds.length);
            const replied = (turnId: string) => record.messages.find((m) => m.key === replyKey(turnId) && m.role === 'assistant');
            const outcomes: Record<string, number> = {};
            let reproduced = 0;
            for (const t of report.turns) {
              assert.equal(t.replayable, true, `${t.turnId}: ${t.reason ?? ''}`);
              const recorded = t.recorded!;
              const counterfactual = t.counterfactual!;
              outcomes[recorded.outcome] = (outcomes[recorded.outcome] ?? 0) + 1;
              const recordedReply = replied(t.turnId);
              if (recordedReply) {
                // a request the record has no answer for is answered with a text no recorded reply
                // has: any byte of difference in the prompt building fails here
                assert.equal(recorded.outcome, 'replied');
                assert.equal(recorded.reply, recordedReply.text, `${t.turnId}: the record's reply is the transcript's`);
                assert.equal(counterfactual.reply, recordedReply.text, `${t.turnId}: the replayed reply is the recorded one (requests without a recorded answer: ${JSON.stringify(model.unmatched).slice(0, 2000)})`);
                assert.equal(counterfactual.outcome, 'replied');
                assert.equal(t.changed, false, JSON.stringify(t, null, 1).slice(0, 3000));
                assert.deepEqual(t.divergences, []);
                for (const c of counterfactual.toolCalls) assert.equal(c.answer, 'recorded', `${t.turnId}: ${c.name} answered from the record`);
                reproduced++;
              } else if (recorded.outcome === 'stopped') {
                // /stop is replayed where it came: the replay stops in the same step, with no reply
                assert.equal(counterfactual.outcome, 'stopped', `${t.turnId}: ${JSON.stringify(t).slice(0, 2000)}`);
                assert.equal(counterfactual.reply, '');
                assert.equal(t.replyChanged, false);
              } else {
                // refused by a budget (the replay spends its own: docs/replay.md), or no reply delivered: its outcome is reported
                assert.notEqual(recorded.outcome, 'replied', `${t.turnId}: a turn without a reply is not reported as one that replied`);
              }
            }
            assert.ok(reproduced >= 1, `${file}: at least one reply reproduced`);
            // every recorded reply of the session is one a replayed turn reproduced
            assert.equal(reproduced, record.messages.filter((m) => m.role === 'assistant' && m.turnId !== null && m.key === replyKey(m.turnId)).length, JSON.stringify(outcomes));
            assert.deepEqual(await visible(), before, 'nothing a user sees was written');
          });
        });
        } finally {
          await mcp?.close();
          if (knowledge) await closeKnowledgeIndexes();
          rmSync(dataDir, { recursive: true, force: true });
        }
      } finally {
        await fresh.cleanup();
      }
    });
  }
});
