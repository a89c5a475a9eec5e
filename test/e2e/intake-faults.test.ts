/**
 * Intake is exactly once through crashes: the fault-injection harness. For every ingress (the
 * HTTP API through its real app, Telegram, Discord and OpenHarness messages as their adapters
 * hand them to the ingress, chat commands, a task handed to the agent, webhooks, file events and
 * inbound email through the real SMTP listener), the process is stopped at each named checkpoint
 * between accepting the input and handing it over (common/fault-points.ts: the armed point throws
 * as if the process had died there), then the input is delivered again as its platform or client
 * would (the same message id, Idempotency-Key, event id, Message-ID, task).
 *
 * Over all points: nothing lost (every accepted message got its turn, every event its run, every
 * handed task its turn) and nothing doubled (one turn per session as Temporal counts them, one
 * reply, one run execution per event id, one model call per event; a command that makes
 * something, /task and /change, run again after a crash before its answer: one task and one
 * reminder, one change and one workflow, the same id answered). Checked through the real
 * workflows on the Temporal dev server and the real database. Each ingress also passes exactly
 * the points listed here, so a new step between accepting and handing over gets a point and a
 * case. The process-kill form of the same (SIGKILL of a child Steward at a point, restart,
 * redeliver) is test/e2e/intake-kill.test.ts.
 */
import assert from 'node:assert/strict';
import { createHmac, randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it } from 'node:test';
import { createTransport } from 'nodemailer';
import { createHttpApp, startHttpServer } from '../../adapters/http/app.js';
import { startInboundEmail } from '../../adapters/inbound-email.js';
import { inboundKey } from '../../services/chat/intake.js';
import { armFaultPoint, faultPointArmed, faultPointsPassed, InjectedFault, type FaultPointName } from '../../common/fault-points.js';
import { sessionWorkflowId, type ConversationKey } from '../../common/ids.js';
import type { InboundMessage } from '../../common/schemas.js';
import { bindChat, createIdentity, OPERATOR } from '../../domain/governance.js';
import { taskReminderWorkflowId, triageWorkflowId } from '../../common/tasks.js';
import { createGitFixture } from '../helpers/git-fixture.js';
import { recordingSender } from '../helpers/recording-sender.js';
import { statusQuery } from '../../workflows/messages.js';
import { testDatabases } from '../helpers/db.js';
import { useStack, waitFor, withHarness, type Harness } from '../helpers/steward.js';

const OP = { id: OPERATOR.id, name: OPERATOR.name };
const tag = () => randomBytes(4).toString('hex');

/** The points each kind of input passes between being accepted and being handed over, in order. */
const MESSAGE_POINTS: FaultPointName[] = ['ingress.session', 'ingress.receipted', 'ingress.recorded', 'handoff.delivered', 'handoff.marked'];
const COMMAND_POINTS: FaultPointName[] = ['ingress.session', 'ingress.receipted', 'ingress.recorded', 'ingress.command-run', 'ingress.command-answered'];
/** A command that makes something: its record, then its run (a task's reminder, a change's workflow) started once, then the answer. */
const TASK_COMMAND_POINTS: FaultPointName[] = ['ingress.session', 'ingress.receipted', 'ingress.recorded', 'task.created', 'run.started', 'run.marked', 'ingress.command-run', 'ingress.command-answered'];
const CHANGE_COMMAND_POINTS: FaultPointName[] = ['ingress.session', 'ingress.receipted', 'ingress.recorded', 'change.created', 'run.started', 'run.marked', 'ingress.command-run', 'ingress.command-answered'];
/** Points before the record: the redelivery is the first delivery that was recorded. */
const BEFORE_RECORD: ReadonlySet<FaultPointName> = new Set(['ingress.session', 'ingress.receipted']);
const TASK_POINTS: FaultPointName[] = ['task.recorded', 'handoff.delivered', 'handoff.marked', 'task.handed'];
const EVENT_POINTS: FaultPointName[] = ['event.recorded', 'run.started', 'run.marked'];
const TRIAGE_POINTS: FaultPointName[] = ['run.started', 'run.marked'];

/** Points after which the input already reached its workflow: the redelivery comes once that has answered, so the dedup of an answered key is what is tried. */
const HANDED: ReadonlySet<FaultPointName> = new Set(['handoff.delivered', 'handoff.marked', 'run.started', 'run.marked', 'task.handed']);

/** One input and how it is delivered, redelivered and checked. */
interface Case {
  name: string;
  point: FaultPointName;
  /** Deliver it; 'crashed' when the armed point stopped it. */
  deliver(): Promise<'crashed' | 'ok'>;
  /** After the crash, before the redelivery: what reached a workflow has been answered. */
  afterCrash?(): Promise<void>;
  /** Deliver it again and check the answer. */
  redeliver(): Promise<void>;
  /** Exactly once: one turn or run, one answer. */
  settle(): Promise<void>;
}

/** Run a delivery with `point` armed: it must stop there. */
async function crashAt(c: Case): Promise<void> {
  const disarm = armFaultPoint(c.point);
  try {
    const outcome = await c.deliver().catch((err: unknown) => {
      if (err instanceof InjectedFault && err.point === c.point) return 'crashed' as const;
      throw err;
    });
    assert.equal(outcome, 'crashed', `${c.name}: the delivery stopped at the point`);
    assert.equal(faultPointArmed(), undefined, `${c.name}: the point was passed`);
  } finally {
    disarm();
  }
}

/** Crash every case at its point (one at a time: one point is armed at once), redeliver, settle; the slow waits run side by side. */
async function runCases(cases: Case[]): Promise<void> {
  for (const c of cases) await crashAt(c);
  await Promise.all(cases.map((c) => c.afterCrash?.()));
  for (const c of cases) await c.redeliver();
  await Promise.all(cases.map((c) => c.settle()));
  console.log(`intake faults: ${cases.length} crashes redelivered, 0 lost, 0 doubled (${[...new Set(cases.map((c) => c.name.split(' at ')[0]))].join('; ')})`);
}

for (const kind of testDatabases()) {
  describe(`intake exactly once through crashes (fault points, real stack, ${kind.name})`, () => {
    const stack = useStack(kind);

    /** The session's own count of turns (Temporal's ledger), once it is idle with nothing queued. */
    async function idleSession(sessionId: string): Promise<{ turnsStarted: number; generation: number }> {
      return waitFor(async () => {
        const s = await stack.env.client.workflow.getHandle(sessionId).query(statusQuery);
        return !s.running && s.queueLength === 0 ? s : undefined;
      }, `session ${sessionId} idle`, 30_000);
    }

    /** The turn's reply came, and the session ran exactly one turn (a doubled signal would be queued, running or counted). */
    async function exactlyOneTurn(h: Harness, sessionId: string, text: string, what: string): Promise<void> {
      const replies = async () => (await h.ingress.transcript(sessionId, { limit: 100 })).filter((m) => m.role === 'assistant');
      await waitFor(async () => ((await replies()).some((m) => m.text.includes(text)) ? true : undefined), `the reply to ${what}`, 30_000);
      const s = await idleSession(sessionId);
      assert.equal(s.turnsStarted, 1, `${what}: one turn`);
      assert.equal((await replies()).length, 1, `${what}: one reply`);
      assert.equal(await stack.db.message.count({ where: { sessionId, role: 'user' } }), 1, `${what}: recorded once`);
    }

    /** Once the turn that a delivered signal started has answered, the session has continued as new (maxTurnsPerRun 1): the redelivery meets the carried keys. */
    async function answeredAndCarried(h: Harness, sessionId: string, text: string): Promise<void> {
      await waitFor(async () => ((await h.ingress.transcript(sessionId, { limit: 100 })).some((m) => m.role === 'assistant' && m.text.includes(text)) ? true : undefined), `the reply before the redelivery`, 30_000);
      await waitFor(async () => ((await stack.env.client.workflow.getHandle(sessionId).query(statusQuery)).generation >= 1 ? true : undefined), 'the session continued as new', 30_000);
    }

    /** How many executions of a workflow id Temporal has (visibility is eventually consistent: waits for the first). */
    async function executionsOf(workflowId: string): Promise<number> {
      const count = async () => {
        let n = 0;
        for await (const _ of stack.env.client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) n++;
        return n;
      };
      return waitFor(async () => ((await count()) > 0 ? count() : undefined), `${workflowId} listed`);
    }

    /** One task with the probe, the one the command answered with: one reminder execution, one receipt. */
    async function oneTaskMade(probe: string, id: string | undefined, what: string): Promise<void> {
      const tasks = await stack.db.task.findMany({ where: { text: { contains: probe } } });
      assert.deepEqual(tasks.map((t) => t.id), [id], `${what}: one task, the one answered`);
      assert.equal(await executionsOf(taskReminderWorkflowId(id!)), 1, `${what}: its reminder started once`);
      assert.equal(await stack.db.receipt.count({ where: { kind: 'task.create', data: { contains: id! } } }), 1, `${what}: receipted once`);
    }

    /** One change with the probe, the one the command answered with: one workflow execution, one receipt. Then it is ended (only its start is tried). */
    async function oneChangeStarted(probe: string, id: string | undefined, what: string): Promise<void> {
      const changes = await stack.db.repoChange.findMany({ where: { request: { contains: probe } } });
      assert.deepEqual(changes.map((c) => c.id), [id], `${what}: one change, the one answered`);
      assert.equal(await executionsOf(id!), 1, `${what}: its workflow started once`);
      assert.equal(await stack.db.receipt.count({ where: { kind: 'change.start', workflowId: id! } }), 1, `${what}: receipted once`);
      await stack.env.client.workflow.getHandle(id!).terminate('the test tried its start only').catch(() => undefined);
    }

    /** An objective's event runs, found by a marker in their payload. */
    function eventRuns(objectiveId: string) {
      const runsWith = (marker: string) => stack.model.requests.filter((r) => JSON.stringify(r.body).includes(marker)).length;
      const executions = async (runId: string) => {
        let n = 0;
        for await (const _ of stack.env.client.workflow.list({ query: `WorkflowId = '${runId}'` })) n++;
        return n;
      };
      const runIdOf = async (marker: string) => {
        const events = await stack.db.objectiveEvent.findMany({ where: { objectiveId } });
        const blobs = await Promise.all(events.map(async (e) => ({ e, text: (await stack.db.blob.findUnique({ where: { hash: e.payloadHash } }))?.data })));
        const found = blobs.filter((b) => b.text !== undefined && Buffer.from(b.text).toString('utf8').includes(marker));
        assert.equal(found.length, 1, `${marker}: recorded once`);
        return found[0]!.e.runId;
      };
      /** The event's run ran to its end, once: one execution of its id in Temporal, one model call with its payload, one mark. */
      const oneRun = async (marker: string, what: string) => {
        const runId = await runIdOf(marker);
        const run = await waitFor(async () => {
          const r = await stack.db.objectiveRun.findUnique({ where: { id: runId } });
          return r && r.status !== 'running' ? r : undefined;
        }, `the run of ${what}`, 60_000);
        assert.equal(run.status, 'done', `${what}: the run ended well`);
        await sleep(300);
        assert.equal(runsWith(marker), 1, `${what}: one model call with the event`);
        assert.equal(await waitFor(async () => ((await executions(runId)) > 0 ? executions(runId) : undefined), `${runId} listed`), 1, `${what}: one execution of ${runId}`);
        assert.equal(await stack.db.receipt.count({ where: { kind: 'objective.run', workflowId: runId, key: { startsWith: 'objective-event:' } } }), 1, `${what}: marked once`);
      };
      return { oneRun, runIdOf };
    }

    it('chat messages on every platform and chat commands: a crash at each point, then the redelivery: one turn, one answer', { timeout: 240_000 }, async () => {
      await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, maxTurnsPerRun: 1, commandRetryAfterMs: 0 }, async (h) => {
        stack.model.setDefault((req) => ({ text: `echo: ${JSON.stringify(req.body).match(/probe-[0-9a-f]{8}/g)?.at(-1) ?? 'none'}` }));
        const tgUser = String(700_000_000 + Math.floor(Math.random() * 1e8));
        const dcUser = String(800_000_000 + Math.floor(Math.random() * 1e8));
        await createIdentity(stack.db, { name: 'Tess', role: 'member', accounts: [{ platform: 'telegram', userId: tgUser }], createdBy: 'test' });
        await createIdentity(stack.db, { name: 'Dana', role: 'member', accounts: [{ platform: 'discord', userId: dcUser }], createdBy: 'test' });
        const token = `intake-${randomBytes(16).toString('hex')}`;
        const server = await startHttpServer(createHttpApp({ ingress: h.ingress, apiToken: token, account: h.account, health: async () => ({ ok: true, checks: {} }) }), { host: '127.0.0.1', port: 0 });
        try {
          /** How each platform delivers one message: a fresh conversation per case. */
          type Sent = { sessionId: string; deliver(): Promise<'crashed' | 'ok'>; redeliver(): Promise<{ kind: string; duplicate: boolean; reply?: string }> };
          const viaIngress = (msg: InboundMessage): Sent => {
            const sessionId = sessionWorkflowId({ platform: msg.platform, account: msg.account, chatId: msg.chatId } as ConversationKey);
            return {
              sessionId,
              deliver: async () => {
                await h.ingress.handle(msg);
                return 'ok';
              },
              redeliver: () => h.ingress.handle(msg),
            };
          };
          const platforms: Record<string, (text: string) => Sent> = {
            http: (text) => {
              const chatId = `api-${tag()}`;
              const idem = randomUUID();
              const post = () =>
                fetch(`${server.url}/api/v1/chats/${chatId}/messages`, {
                  method: 'POST',
                  headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'idempotency-key': idem },
                  body: JSON.stringify({ text, user: 'api-client' }),
                });
              return {
                sessionId: h.sessionIdOf(chatId),
                deliver: async () => {
                  const res = await post();
                  await res.body?.cancel();
                  return res.status === 500 ? 'crashed' : 'ok';
                },
                redeliver: async () => {
                  const res = await post();
                  assert.equal(res.status, 202);
                  return (await res.json()) as { kind: string; duplicate: boolean };
                },
              };
            },
            telegram: (text) => viaIngress({ id: String(Math.floor(Math.random() * 1e9)), platform: 'telegram', account: 'intake-bot', chatId: `${tgUser}${tag()}`, chatType: 'dm', user: 'Tess', userId: tgUser, text, at: new Date().toISOString() }),
            discord: (text) => viaIngress({ id: String(Math.floor(Math.random() * 1e15)), platform: 'discord', account: 'intake-app', chatId: `dm-${tag()}`, chatType: 'dm', user: 'Dana', userId: dcUser, text, at: new Date().toISOString() }),
            openharness: (text) => viaIngress({ id: randomUUID(), platform: 'openharness', account: 'shell', chatId: `oh-${tag()}`, chatType: 'dm', user: 'operator', userId: 'operator', text, at: new Date().toISOString() }),
          };

          // each platform passes exactly the message points, in order; a command the command points
          for (const [name, make] of Object.entries(platforms)) {
            const text = `probe-${tag()} hello`;
            const sent = make(text);
            assert.deepEqual(await faultPointsPassed(() => sent.deliver()), MESSAGE_POINTS, `${name} message`);
            await exactlyOneTurn(h, sent.sessionId, text.split(' ')[0]!, `${name}: a message without a crash`);
          }
          assert.deepEqual(await faultPointsPassed(() => h.send('/whoami', { chatId: `cmd-${tag()}` })), COMMAND_POINTS, 'a command');

          const cases: Case[] = [];
          for (const [name, make] of Object.entries(platforms)) {
            for (const point of MESSAGE_POINTS) {
              const probe = `probe-${tag()}`;
              const sent = make(`${probe} please answer`);
              cases.push({
                name: `${name} message at ${point}`,
                point,
                deliver: () => sent.deliver(),
                ...(HANDED.has(point) ? { afterCrash: () => answeredAndCarried(h, sent.sessionId, probe) } : {}),
                async redeliver() {
                  const r = await sent.redeliver();
                  // recorded before: a duplicate to the sender, whatever the first delivery reached
                  assert.deepEqual([r.kind, r.duplicate], ['message', !BEFORE_RECORD.has(point)], `${name} at ${point}`);
                },
                settle: () => exactlyOneTurn(h, sent.sessionId, probe, `${name} message at ${point}`),
              });
            }
          }
          // a command: done once handled and answered; before that a redelivery runs it again (here: /whoami)
          for (const point of COMMAND_POINTS) {
            const chatId = `cmd-${tag()}`;
            const id = randomUUID();
            const key = inboundKey({ platform: 'http', account: h.account, chatId, id });
            cases.push({
              name: `command at ${point}`,
              point,
              deliver: async () => {
                await h.send('/whoami', { chatId, id });
                return 'ok';
              },
              async redeliver() {
                const r = await h.send('/whoami', { chatId, id });
                assert.deepEqual([r.kind, r.duplicate], ['command', false], `command at ${point}: handled again`);
                assert.match(r.reply ?? '', /You are the operator/);
                const again = await h.send('/whoami', { chatId, id });
                assert.deepEqual([again.kind, again.duplicate], ['command', true], `command at ${point}: then a duplicate`);
              },
              async settle() {
                assert.equal(await stack.db.receipt.count({ where: { key: `${key}:command` } }), 1);
                assert.equal(await stack.db.message.count({ where: { key: `${key}:reply` } }), 1, 'answered once in the transcript');
                assert.equal(await stack.db.message.count({ where: { key } }), 1);
              },
            });
          }
          // a command that makes something (/task, /change): the thing's id is derived from the message's key, so the rerun finds the first run's
          const fx = createGitFixture({ 'greeting.txt': 'Hello\n' });
          const repo = `intake-${tag()}`;
          await h.changes.registerRepo({ name: repo, cloneUrl: fx.bare, checks: [{ name: 'test', argv: ['true'] }] }, OP);
          try {
            const makers = {
              task: { points: TASK_COMMAND_POINTS, text: (probe: string) => `/task ${probe} check the backups`, reply: /^Task (t-[a-z0-9]{8}) made/, one: oneTaskMade },
              change: { points: CHANGE_COMMAND_POINTS, text: (probe: string) => `/change ${repo} ${probe} make the greeting greet Steward`, reply: /^Change (chg-[a-f0-9]{12}) started/, one: oneChangeStarted },
            };
            for (const [name, m] of Object.entries(makers)) {
              const probe = `probe-${tag()}`;
              const chatId = `cmd-${tag()}`;
              let reply: string | undefined;
              assert.deepEqual(await faultPointsPassed(async () => ({ reply } = await h.send(m.text(probe), { chatId }))), m.points, `/${name}`);
              await m.one(probe, m.reply.exec(reply ?? '')?.[1], `/${name} without a crash`);
              // and a change whose run ended before the redelivery (its start's mark must follow the run all the same)
              const points = name === 'change' ? [...m.points.map((p) => ({ point: p, ended: false })), { point: 'run.started' as const, ended: true }] : m.points.map((p) => ({ point: p, ended: false }));
              for (const { point, ended } of points) {
                const c = { probe: `probe-${tag()}`, chatId: `cmd-${tag()}`, id: randomUUID() };
                const key = inboundKey({ platform: 'http', account: h.account, chatId: c.chatId, id: c.id });
                let made: string | undefined;
                cases.push({
                  name: `/${name} at ${point}${ended ? ' (its run ended before the redelivery)' : ''}`,
                  point,
                  deliver: async () => {
                    await h.send(m.text(c.probe), c);
                    return 'ok';
                  },
                  ...(ended
                    ? {
                        async afterCrash() {
                          const [change] = await stack.db.repoChange.findMany({ where: { request: { contains: c.probe } } });
                          assert.ok(change, `/${name} at ${point}: recorded before the crash`);
                          await stack.env.client.workflow.getHandle(change.id).terminate('ended before the redelivery');
                          await stack.db.repoChange.update({ where: { id: change.id }, data: { status: 'cancelled' } });
                        },
                      }
                    : {}),
                  async redeliver() {
                    const r = await h.send(m.text(c.probe), c);
                    assert.deepEqual([r.kind, r.duplicate], ['command', false], `/${name} at ${point}: run again`);
                    made = m.reply.exec(r.reply ?? '')?.[1];
                    assert.ok(made, `/${name} at ${point}: answered with what it made (${r.reply})`);
                    const again = await h.send(m.text(c.probe), c);
                    assert.deepEqual([again.kind, again.duplicate], ['command', true], `/${name} at ${point}: then a duplicate`);
                  },
                  async settle() {
                    await m.one(c.probe, made, `/${name} at ${point}${ended ? ' (its run ended before the redelivery)' : ''}`);
                    assert.equal(await stack.db.receipt.count({ where: { key: `${key}:command` } }), 1);
                  },
                });
              }
            }
            await runCases(cases);
          } finally {
            fx.cleanup();
          }
        } finally {
          await server.close();
        }
      });
    });

    it('tasks: a task handed to the agent, a group message triaged into a task: a crash at each point, then the retry or redelivery: one turn, one task', { timeout: 120_000 }, async () => {
      await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, maxTurnsPerRun: 1, senders: { telegram: recordingSender() } }, async (h) => {
        stack.model.setDefault((req) => {
          const body = JSON.stringify(req.body);
          if (body.includes('Classify the message')) return { text: '{"class": "task", "priority": "p2", "reason": "work"}' };
          return { text: `echo: ${body.match(/probe-[0-9a-f]{8}/g)?.at(-1) ?? 'none'}` };
        });
        const newTask = async () => {
          const chatId = `task-${tag()}`;
          const probe = `probe-${tag()}`;
          const task = await h.tasks.create({ platform: 'http', account: h.account, chatId, text: `${probe}: check the backups` }, OP);
          return { task, probe, sessionId: h.sessionIdOf(chatId) };
        };
        const clean = await newTask();
        assert.deepEqual(await faultPointsPassed(() => h.tasks.hand(clean.task.id, OP)), TASK_POINTS, 'a task hand');
        await exactlyOneTurn(h, clean.sessionId, clean.probe, 'a task without a crash');

        const cases: Case[] = [];
        for (const point of TASK_POINTS) {
          const t = await newTask();
          cases.push({
            name: `task hand at ${point}`,
            point,
            deliver: async () => {
              await h.tasks.hand(t.task.id, OP);
              return 'ok';
            },
            ...(HANDED.has(point) ? { afterCrash: () => answeredAndCarried(h, t.sessionId, t.probe) } : {}),
            async redeliver() {
              if (point === 'task.handed') {
                // the first call got as far as marking the task handed: the retry is told so
                await assert.rejects(h.tasks.hand(t.task.id, OP), /is handed: it cannot be handed/);
              } else {
                assert.equal((await h.tasks.hand(t.task.id, OP)).status, 'handed');
              }
            },
            async settle() {
              await exactlyOneTurn(h, t.sessionId, t.probe, `task hand at ${point}`);
              assert.equal((await h.tasks.show(t.task.id)).status, 'handed');
            },
          });
        }

        // triage: a member's group message that does not address Steward, in a chat with triage on
        const account = `bot-${tag()}`;
        const group = `-100${Math.floor(Math.random() * 1e9)}`;
        const member = String(600_000_000 + Math.floor(Math.random() * 1e8));
        await createIdentity(stack.db, { name: 'Max', role: 'member', accounts: [{ platform: 'telegram', userId: member }], createdBy: 'test' });
        const binding = await bindChat(stack.db, { platform: 'telegram', account, chatId: group, name: `team-${tag()}`, mode: 'mention', createdBy: 'test' });
        await h.tasks.setTriage(binding.id, { enabled: true }, OP);
        const groupMessage = () => {
          const probe = `probe-${tag()}`;
          const msg: InboundMessage = { id: randomUUID(), platform: 'telegram', account, chatId: group, chatType: 'group', addressed: false, user: 'Max', userId: member, text: `${probe}: the printer on floor 2 is jammed`, at: new Date().toISOString() };
          return { probe, msg, workflowId: triageWorkflowId(inboundKey(msg)) };
        };
        /** The message was classified once and became one task. */
        const oneTask = async (g: ReturnType<typeof groupMessage>, what: string) => {
          await stack.env.client.workflow.getHandle(g.workflowId).result();
          const tasks = (await h.tasks.list({ status: 'all', limit: 200 })).filter((t) => t.text.includes(g.probe));
          assert.equal(tasks.length, 1, `${what}: one task`);
          assert.equal(stack.model.requests.filter((r) => JSON.stringify(r.body).includes('Classify the message') && JSON.stringify(r.body).includes(g.probe)).length, 1, `${what}: classified once`);
          assert.equal(await stack.db.receipt.count({ where: { key: `${inboundKey(g.msg)}:triage` } }), 1, `${what}: receipted once`);
        };
        const cleanTriage = groupMessage();
        assert.deepEqual(await faultPointsPassed(() => h.ingress.handle(cleanTriage.msg)), TRIAGE_POINTS, 'a triaged message');
        await oneTask(cleanTriage, 'a triaged message without a crash');
        for (const point of TRIAGE_POINTS) {
          const g = groupMessage();
          cases.push({
            name: `triage at ${point}`,
            point,
            // triage never fails the message (the ingress logs its error): the point passed is the crash
            deliver: async () => {
              const r = await h.ingress.handle(g.msg);
              assert.equal(r.kind, 'ignored');
              return faultPointArmed() === undefined ? 'crashed' : 'ok';
            },
            async redeliver() {
              const r = await h.ingress.handle(g.msg);
              assert.deepEqual([r.kind, r.triage?.workflowId, r.triage?.duplicate], ['ignored', g.workflowId, true], `triage at ${point}: found started`);
            },
            settle: () => oneTask(g, `triage at ${point}`),
          });
        }
        await runCases(cases);
      });
    });

    it('objective events (a signed webhook, a file change, an inbound email over SMTP): a crash at each point, then the redelivery: one run', { timeout: 180_000 }, async () => {
      await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } } }, async (h) => {
        stack.model.setDefault(() => ({ text: 'ok' }));
        const secretVar = `STEWARD_HOOK_INTAKE${tag().toUpperCase()}`;
        const secret = randomBytes(32).toString('hex');
        process.env[secretVar] = secret;
        const dir = await mkdtemp(path.join(tmpdir(), 'steward-intake-'));
        const name = `intake-${tag()}`;
        const address = `${name}@steward.test`;
        const o = await h.objectives.create({ name, prompt: `Handle the event (${name})`, chatId: `events-${tag()}`, account: h.account, webhook: { secretRef: `env:${secretVar}` }, watch: { path: dir }, inboundEmail: address }, OP);
        const smtp = await startInboundEmail({ db: stack.db, objectives: h.objectives, port: 0 });
        const transport = createTransport({ host: '127.0.0.1', port: smtp.port, secure: false, ignoreTLS: true });
        try {
          /** One event of each source: its delivery (the same id every time) and its run's id. */
          type Event = { deliver(): Promise<'crashed' | 'ok'>; redeliver(): Promise<void>; marker: string };
          const sources: Record<string, () => Event> = {
            webhook: () => {
              const marker = `hook-${tag()}`;
              const body = JSON.stringify({ marker });
              const eventId = `ev-${tag()}`;
              const ts = String(Math.floor(Date.now() / 1000));
              const headers: Record<string, string> = { 'x-steward-timestamp': ts, 'x-steward-event-id': eventId, 'x-steward-signature': `sha256=${createHmac('sha256', secret).update(`${ts}.${eventId}.${body}`).digest('hex')}` };
              const call = () => h.objectives.receiveEvent(name, body, (k) => headers[k.toLowerCase()]);
              return {
                marker,
                deliver: async () => {
                  const r = await call();
                  assert.equal(r.status, 202);
                  return 'ok';
                },
                redeliver: async () => assert.equal((await call()).status, 200, 'a redelivered event is a duplicate to its sender'),
              };
            },
            file: () => {
              const marker = `file-${tag()}`;
              const eventId = `file:${randomBytes(20).toString('hex')}`;
              const call = () => h.objectives.receiveInternalEvent(o.id, { source: 'file', eventId, payload: { directory: dir, files: [{ path: `${marker}.txt`, change: 'changed', size: 4 }], more: 0 } });
              return {
                marker,
                deliver: async () => {
                  assert.equal((await call()).status, 202);
                  return 'ok';
                },
                // the watcher delivers a batch again until it is taken
                redeliver: async () => assert.equal((await call()).status, 200),
              };
            },
            email: () => {
              const marker = `mail-${tag()}`;
              const mail = { from: 'alice@example.com', to: address, subject: `report ${marker}`, text: `the ${marker} body`, messageId: `<${marker}@example.com>` };
              return {
                marker,
                deliver: async () => {
                  // the listener answers 451 (try again later) when the event could not be taken
                  const sent = await transport.sendMail(mail).then(
                    () => 'ok' as const,
                    (err: { responseCode?: number }) => {
                      assert.equal(err.responseCode, 451);
                      return 'crashed' as const;
                    },
                  );
                  return sent;
                },
                // the sending server retries the same message (its Message-ID is the event id)
                redeliver: async () => void (await transport.sendMail(mail)),
              };
            },
          };
          const { oneRun, runIdOf } = eventRuns(o.id);
          for (const [source, make] of Object.entries(sources)) {
            const ev = make();
            assert.deepEqual(await faultPointsPassed(() => ev.deliver()), EVENT_POINTS, `a ${source} event`);
            await oneRun(ev.marker, `a ${source} event without a crash`);
          }
          const cases: Case[] = [];
          for (const [source, make] of Object.entries(sources)) {
            for (const point of EVENT_POINTS) {
              const ev = make();
              cases.push({
                name: `${source} event at ${point}`,
                point,
                deliver: () => ev.deliver(),
                // the run that did start ends before the redelivery: its id is then closed, and still refused a second start
                ...(HANDED.has(point)
                  ? {
                      afterCrash: async () => {
                        const runId = await runIdOf(ev.marker);
                        await waitFor(async () => ((await stack.db.objectiveRun.findUnique({ where: { id: runId } }))?.status === 'done' ? true : undefined), `the run of ${ev.marker}`, 60_000);
                      },
                    }
                  : {}),
                redeliver: () => ev.redeliver(),
                settle: () => oneRun(ev.marker, `${source} event at ${point}`),
              });
            }
          }
          await runCases(cases);
        } finally {
          transport.close();
          await smtp.close();
          await h.objectives.remove(o.id, OP);
          delete process.env[secretVar];
          await rm(dir, { recursive: true, force: true });
        }
      });
    });

    it('no redelivery (Discord does not redeliver, a webhook sender may not retry): the sweep hands over what was accepted and not handed over, once; messages from before the handoff are left alone', { timeout: 120_000 }, async () => {
      await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, maxTurnsPerRun: 1 }, async (h) => {
        stack.model.setDefault((req) => ({ text: `echo: ${JSON.stringify(req.body).match(/probe-[0-9a-f]{8}/g)?.at(-1) ?? 'none'}` }));
        const dcUser = String(900_000_000 + Math.floor(Math.random() * 1e8));
        await createIdentity(stack.db, { name: 'Dina', role: 'member', accounts: [{ platform: 'discord', userId: dcUser }], createdBy: 'test' });
        const dir = await mkdtemp(path.join(tmpdir(), 'steward-intake-'));
        const o = await h.objectives.create({ name: `sweep-${tag()}`, prompt: 'Handle the file event', chatId: `sweep-events-${tag()}`, account: h.account, watch: { path: dir } }, OP);
        const { oneRun } = eventRuns(o.id);
        try {
          const messages: Array<{ probe: string; sessionId: string }> = [];
          for (const point of ['ingress.recorded', 'handoff.delivered'] as const) {
            const probe = `probe-${tag()}`;
            const msg: InboundMessage = { id: String(Math.floor(Math.random() * 1e15)), platform: 'discord', account: 'sweep-app', chatId: `dm-${tag()}`, chatType: 'dm', user: 'Dina', userId: dcUser, text: `${probe} are you there`, at: new Date().toISOString() };
            const sessionId = sessionWorkflowId({ platform: 'discord', account: msg.account, chatId: msg.chatId });
            await crashAt({ name: `discord message at ${point}`, point, deliver: async () => (await h.ingress.handle(msg), 'ok'), redeliver: async () => undefined, settle: async () => undefined });
            if (point === 'handoff.delivered') await answeredAndCarried(h, sessionId, probe);
            messages.push({ probe, sessionId });
          }
          const markers: string[] = [];
          for (const point of ['event.recorded', 'run.started'] as const) {
            const marker = `file-${tag()}`;
            const event = { source: 'file' as const, eventId: `file:${randomBytes(20).toString('hex')}`, payload: { directory: dir, files: [{ path: `${marker}.txt`, change: 'changed' as const }], more: 0 } };
            await crashAt({ name: `file event at ${point}`, point, deliver: async () => (await h.objectives.receiveInternalEvent(o.id, event), 'ok'), redeliver: async () => undefined, settle: async () => undefined });
            markers.push(marker);
          }
          // a message recorded by the ingress before this handoff existed (its receipt has no `handoff`): never signalled by the sweep
          const oldKey = `in:http:${h.account}:old-${tag()}:1`;
          const oldSession = h.sessionIdOf(`old-${tag()}`);
          await stack.db.message.create({ data: { key: oldKey, sessionId: oldSession, role: 'user', text: 'from an older Steward', user: 'api' } });
          await stack.db.receipt.create({ data: { key: `${oldKey}:ingress`, kind: 'ingress', sessionId: oldSession, data: JSON.stringify({ platform: 'http', chatId: 'old', messageId: '1', chars: 5, command: false }) } });

          assert.equal(await h.ingress.resumeHandoffs({ olderThanMs: 0 }), 2, 'both messages handed over by the sweep');
          assert.equal(await h.objectives.resumeEventRuns({ olderThanMs: 0 }), 2, 'both events started (or found started) by the sweep');
          assert.equal(await h.ingress.resumeHandoffs({ olderThanMs: 0 }), 0, 'a second sweep finds nothing');
          assert.equal(await h.objectives.resumeEventRuns({ olderThanMs: 0 }), 0);
          for (const [i, m] of messages.entries()) await exactlyOneTurn(h, m.sessionId, m.probe, `discord message ${i + 1}, handed over by the sweep`);
          for (const [i, marker] of markers.entries()) await oneRun(marker, `file event ${i + 1}, started by the sweep`);
          assert.equal(await stack.db.receipt.count({ where: { key: `${oldKey}:handed` } }), 0, 'the older message was left alone');
        } finally {
          await h.objectives.remove(o.id, OP);
          await rm(dir, { recursive: true, force: true });
        }
      });
    });
  });
}
