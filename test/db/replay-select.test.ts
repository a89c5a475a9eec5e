/**
 * A replay's selection resolved to past turns (domain/replays/select.ts), on SQLite and PostgreSQL,
 * over turns recorded by the production code: each turn is the real model step activity (its
 * `turn.start` receipt; the scripted model server answers) and the real delivery activity (the
 * reply and its `turn.end` receipt), run in Temporal's activity environment; an objective's runs
 * are prepared by the production run preparation (ObjectiveRun rows naming their turns). One turn,
 * a chat in a window, an objective's last N runs and a seeded sample resolve to ended turns,
 * newest first, bounded; a selection naming no turn is refused by name; the schemas refuse no
 * kind, two kinds, an inverted window and N out of range.
 *
 * PostgreSQL runs when STEWARD_TEST_PG_URL is set (scripts/pg.sh start; scripts/pg.sh url).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createActivities, type ModelStepInput, type ModelStepResult } from '../../activities/index.js';
import type { DeliverInput } from '../../activities/chat.js';
import { sessionWorkflowId, type ConversationKey } from '../../common/ids.js';
import { createModelRegistry } from '../../domain/model.js';
import { prepareObjectiveRun } from '../../domain/objectives/runs.js';
import { MAX_REPLAY_TURNS, ReplayAlternativeSchema, ReplaySelectionSchema } from '../../common/replays.js';
import { resolveSelection, SelectionError } from '../../domain/replays/select.js';
import { insertObjective } from '../../domain/store/objectives.js';
import { ensureSession } from '../../domain/store/sessions.js';
import { testDatabases, type TestDatabase } from '../helpers/db.js';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';

const MODEL = 'openai-compatible:test-model';

describe('replay selection schemas', () => {
  const refused = (v: unknown) => {
    const r = ReplaySelectionSchema.safeParse(v);
    assert.equal(r.success, false, `refused: ${JSON.stringify(v)}`);
    return r.error!.issues.map((i) => i.message).join('; ');
  };
  it('refuses no kind, two kinds, an inverted window, N out of range, bad times and unknown fields, each by name', () => {
    assert.match(refused({}), /names one of turnId, chatId/);
    assert.match(refused('turn-1'), /a selection is an object/);
    assert.match(refused({ turnId: 't', chatId: 'c', since: '2026-11-01T00:00:00Z', until: '2026-11-02T00:00:00Z' }), /exactly one kind; got turnId and chatId/);
    assert.match(refused({ chatId: 'c', since: '2026-11-02T00:00:00Z', until: '2026-11-01T00:00:00Z' }), /inverted/);
    assert.match(refused({ chatId: 'c', since: '2026-11-02T00:00:00Z', until: '2026-11-02T00:00:00Z' }), /empty or inverted/);
    assert.match(refused({ chatId: 'c', since: 'yesterday', until: '2026-11-01T00:00:00Z' }), /since: expected an ISO time/);
    assert.match(refused({ chatId: 'c', until: '2026-11-01T00:00:00Z' }), /since: expected an ISO time/);
    assert.match(refused({ objectiveId: 'o', last: 0 }), /last: expected a whole number from 1 to 500/);
    assert.match(refused({ objectiveId: 'o', last: MAX_REPLAY_TURNS + 1 }), /last: at most 500 turns/);
    assert.match(refused({ objectiveId: 'o', last: 2.5 }), /last: expected a whole number/);
    assert.match(refused({ objectiveId: 'o' }), /last: expected a whole number/);
    assert.match(refused({ sample: { size: 0 } }), /sample.size: expected a whole number from 1/);
    assert.match(refused({ sample: { size: 3, since: '2026-11-02T00:00:00Z', until: '2026-11-01T00:00:00Z' } }), /inverted/);
    assert.match(refused({ turnId: 't', extra: 1 }), /extra/);
    assert.deepEqual(ReplaySelectionSchema.parse({ turnId: ' t-1 ' }), { turnId: 't-1' });
  });
  it('validates the alternative: provider:model, skills on|off, approval tools by name, no unknown field', () => {
    const msg = (v: unknown) => ReplayAlternativeSchema.safeParse(v).error?.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ') ?? 'accepted';
    assert.equal(msg({}), 'accepted');
    assert.equal(msg({ model: 'openai:gpt-4.1', skills: 'off', approvalTools: ['http_request', 'web.*', '*'], retrieval: { results: 0 }, promptLayers: { chat: '' } }), 'accepted');
    assert.match(msg({ model: 'gpt-4.1' }), /model: expected provider:model/);
    assert.match(msg({ model: 'mistral:large' }), /model: expected provider:model with provider one of openai, anthropic, openai-compatible/);
    assert.match(msg({ skills: 'maybe' }), /skills: expected on or off/);
    assert.match(msg({ approvalTools: ['launch_rockets'] }), /unknown tool launch_rockets/);
    assert.match(msg({ temperature: 1 }), /temperature/);
  });
});

for (const database of testDatabases()) {
  describe(`replay selection (${database.name})`, () => {
    let t: TestDatabase;
    let model: ModelServer;
    let acts: ReturnType<typeof createActivities>;
    const env = new MockActivityEnvironment({ startToCloseTimeout: '1 minute', heartbeatTimeout: '1 minute' } as never);
    const roomA: ConversationKey = { platform: 'http', account: 'default', chatId: 'room-a' };
    const roomB: ConversationKey = { platform: 'http', account: 'default', chatId: 'room-b' };
    const cliChat: ConversationKey = { platform: 'cli', account: 'local', chatId: 'term' };
    const marks: Date[] = [];
    const turns: Record<string, string> = {};
    let n = 0;

    /** One turn as the turn loop records it: its first model step, then (unless it is still running) its reply. */
    async function turn(conversation: ConversationKey, name: string, opts: { end?: boolean; turnId?: string } = {}): Promise<string> {
      const sessionId = sessionWorkflowId(conversation);
      await ensureSession(t.db, sessionId, conversation);
      const turnId = opts.turnId ?? `${sessionId}:turn:${++n}:abcd1234`;
      model.enqueue({ text: `answer ${name}` });
      const input: ModelStepInput = { sessionId, turnId, conversation, step: 1, inbound: [], workingSet: { notes: [], recentTurns: [] }, settings: { model: MODEL, think: 'off' }, steers: [] };
      const r = (await env.run(acts.modelStep, input)) as ModelStepResult;
      assert.equal(r.kind, 'output', JSON.stringify(r));
      const end: DeliverInput = { key: `${turnId}:reply`, sessionId, conversation, kind: 'reply', turnId, text: `answer ${name}`, usage: r.usage, steps: 1, outcome: 'replied' };
      if (opts.end !== false) await env.run(acts.deliver, end);
      turns[name] = turnId;
      await sleep(15); // receipts are timed by the database's clock: windows fall between turns
      return turnId;
    }
    const mark = async () => {
      marks.push(new Date());
      await sleep(15);
    };
    const refusal = async (p: Promise<unknown>) => {
      const err = await p.then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(err instanceof SelectionError, `a SelectionError: ${String(err)}`);
      return err.message;
    };

    before(async () => {
      t = await database.create();
      model = await startModelServer();
      acts = createActivities({ db: t.db, models: createModelRegistry({ openaiCompatible: { baseURL: model.baseURL } }), systemPrompt: 'test' });
      await mark(); // 0
      await turn(roomA, 'a1');
      await turn(roomB, 'b1');
      await mark(); // 1
      await turn(roomA, 'a2');
      await turn(cliChat, 'c1');
      await mark(); // 2
      await turn(roomA, 'a3');
      await turn(roomA, 'a4-running', { end: false });
      await turn(roomB, 'b2');
      await mark(); // 3
    });
    after(async () => {
      await model?.close();
      await t?.cleanup();
    });

    it('one turn: an ended turn resolves; an unknown or unended one is refused by name', async () => {
      assert.deepEqual((await resolveSelection(t.db, { turnId: turns.a2! }, { account: 'default' })).turnIds, [turns.a2]);
      assert.match(await refusal(resolveSelection(t.db, { turnId: 'session:http:default:room-a:turn:99:ffffffff' }, { account: 'default' })), /no turn session:http:default:room-a:turn:99:ffffffff: no turn.start receipt/);
      assert.match(await refusal(resolveSelection(t.db, { turnId: turns['a4-running']! }, { account: 'default' })), /has not ended/);
    });

    it("a chat and a window: its ended turns newest first, the HTTP API's chat by default, bounded", async () => {
      const all = await resolveSelection(t.db, { chatId: 'room-a', since: marks[0]!.toISOString(), until: marks[3]!.toISOString() }, { account: 'default' });
      assert.deepEqual(all.turnIds, [turns.a3, turns.a2, turns.a1], 'the running turn is not selected');
      assert.equal(all.truncated, false);
      assert.deepEqual(all.selection, { chatId: 'room-a', platform: 'http', account: 'default', since: marks[0]!.toISOString(), until: marks[3]!.toISOString() });
      const middle = await resolveSelection(t.db, { chatId: 'room-a', since: marks[1]!.toISOString(), until: marks[2]!.toISOString() }, { account: 'default' });
      assert.deepEqual(middle.turnIds, [turns.a2]);
      const other = await resolveSelection(t.db, { chatId: 'term', platform: 'cli', account: 'local', since: marks[0]!.toISOString(), until: marks[3]!.toISOString() }, { account: 'default' });
      assert.deepEqual(other.turnIds, [turns.c1]);
      const bounded = await resolveSelection(t.db, { chatId: 'room-a', since: marks[0]!.toISOString(), until: marks[3]!.toISOString() }, { account: 'default', max: 2 });
      assert.deepEqual(bounded.turnIds, [turns.a3, turns.a2]);
      assert.equal(bounded.truncated, true);
      const before0 = new Date(marks[0]!.getTime() - 3_600_000).toISOString();
      assert.match(await refusal(resolveSelection(t.db, { chatId: 'room-a', since: before0, until: marks[0]!.toISOString() }, { account: 'default' })), /chat http\/default\/room-a has no turn that ended between/);
      assert.match(await refusal(resolveSelection(t.db, { chatId: 'nowhere', since: marks[0]!.toISOString(), until: marks[3]!.toISOString() }, { account: 'default' })), /no chat http\/default\/nowhere: Steward has no session/);
    });

    it("an objective's last N runs: the turns of its runs that ended, newest first; by id or name; an unknown objective is refused", async () => {
      await insertObjective(t.db, { id: 'obj-digest', name: 'digest', prompt: 'Summarise the day.', platform: 'http', account: 'default', chatId: 'room-obj', model: null, schedule: JSON.stringify({ every: '1d' }), overlap: 'skip', catchupWindowMs: 60_000, pauseOnFailure: false, paused: false, webhookSecretRef: null, watchPath: null, inboundEmail: null, createdBy: 'test' });
      const runTurns: string[] = [];
      for (const runId of ['objective:obj-digest:r1', 'objective:obj-digest:r2', 'objective:obj-digest:r3']) {
        const p = await prepareObjectiveRun(t.db, { objectiveId: 'obj-digest', runId, maxSteps: 4 }, { execution: () => ({ workflowId: runId, runId: 'run' }), defaultModel: MODEL });
        assert.equal(p.kind, 'run');
        if (p.kind !== 'run') return;
        // the second run's turn never ended (it failed before its answer): not selected
        await turn(p.turn.conversation, runId, { turnId: p.turn.turnId, end: runId !== 'objective:obj-digest:r2' });
        runTurns.push(p.turn.turnId);
      }
      const last2 = await resolveSelection(t.db, { objectiveId: 'obj-digest', last: 2 }, { account: 'default' });
      assert.deepEqual(last2.turnIds, [runTurns[2], runTurns[0]]);
      assert.deepEqual((await resolveSelection(t.db, { objectiveId: 'digest', last: 1 }, { account: 'default' })).turnIds, [runTurns[2]], 'by name');
      assert.deepEqual((await resolveSelection(t.db, { objectiveId: 'digest', last: 10 }, { account: 'default' })).selection, { objectiveId: 'obj-digest', last: 10 });
      assert.match(await refusal(resolveSelection(t.db, { objectiveId: 'no-such', last: 2 }, { account: 'default' })), /no objective no-such/);
      await insertObjective(t.db, { id: 'obj-idle', name: 'idle', prompt: 'x', platform: 'http', account: 'default', chatId: 'room-obj', model: null, schedule: JSON.stringify({ every: '1d' }), overlap: 'skip', catchupWindowMs: 60_000, pauseOnFailure: false, paused: false, webhookSecretRef: null, watchPath: null, inboundEmail: null, createdBy: 'test' });
      assert.match(await refusal(resolveSelection(t.db, { objectiveId: 'idle', last: 2 }, { account: 'default' })), /objective idle has no run whose turn ended/);
    });

    it('a sample across chats: the same seed draws the same turns, newest first, within the window; the seed is kept', async () => {
      const window = { since: marks[0]!.toISOString(), until: marks[3]!.toISOString() };
      const ended = [turns.b2, turns.a3, turns.c1, turns.a2, turns.b1, turns.a1];
      const one = await resolveSelection(t.db, { sample: { size: 3, ...window, seed: 7 } }, { account: 'default' });
      const two = await resolveSelection(t.db, { sample: { size: 3, ...window, seed: 7 } }, { account: 'default' });
      assert.deepEqual(one.turnIds, two.turnIds);
      assert.equal(one.turnIds.length, 3);
      assert.deepEqual([...one.turnIds].sort((a, b) => ended.indexOf(a) - ended.indexOf(b)), one.turnIds, 'newest first');
      for (const id of one.turnIds) assert.ok(ended.includes(id), `${id} is an ended turn of the window`);
      assert.deepEqual(one.selection, { sample: { size: 3, ...window, seed: 7 } });
      const seeds = new Set<string>();
      for (let seed = 0; seed < 12; seed++) seeds.add((await resolveSelection(t.db, { sample: { size: 3, ...window, seed } }, { account: 'default' })).turnIds.join(','));
      assert.ok(seeds.size > 1, 'other seeds draw other turns');
      const everything = await resolveSelection(t.db, { sample: { size: 50, ...window, seed: 1 } }, { account: 'default' });
      assert.deepEqual(everything.turnIds, ended, 'a sample larger than the window takes it all, newest first');
      const unseeded = await resolveSelection(t.db, { sample: { size: 2, ...window } }, { account: 'default', randomSeed: () => 42 });
      assert.deepEqual(unseeded.selection, { sample: { size: 2, ...window, seed: 42 } }, 'a seed is chosen and kept, so the draw can be repeated');
      const middle = await resolveSelection(t.db, { sample: { size: 5, since: marks[1]!.toISOString(), until: marks[2]!.toISOString(), seed: 3 } }, { account: 'default' });
      assert.deepEqual(middle.turnIds, [turns.c1, turns.a2]);
      const empty = new Date(marks[0]!.getTime() - 3_600_000).toISOString();
      assert.match(await refusal(resolveSelection(t.db, { sample: { size: 2, since: empty, until: marks[0]!.toISOString() } }, { account: 'default' })), /no turn ended between/);
    });
  });
}
