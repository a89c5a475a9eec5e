/**
 * 50 concurrent turns against a small installation budget, through the real turn path (issue
 * 34), on SQLite and PostgreSQL: 50 chats post at once over the HTTP API (a real server on
 * 127.0.0.1), the real worker and Temporal run the turns, every model step reserves from the
 * budget ledger (the started platform's: on, no STEWARD_TOKEN_BUDGET), and the scripted model
 * counts usage as a provider does: the prompt is all it is sent (its JSON body, 4 characters a
 * token), the answer is up to the request's output cap (long, 8000, without one). The budget is
 * defined through the API, after a probe turn has measured a turn's worst case W, at 10.5 W.
 * - the overshoot bound: what is used and held exceeds the limit by at most one reservation
 *   while the turns run (sampled): the worst case is held before each call, the call is held at
 *   the provider to the output it reserved (`max_tokens`), and its prompt is estimated from all
 *   that is sent (its tools' input schemas too). Before, a turn's call reserved 4096 output
 *   tokens and asked for no cap (answers of 8000 went 3.6 reservations over a budget of 5.5),
 *   and its estimate left out the tools' schemas, most of a turn's prompt;
 * - no model call starts once the budget is spent: each model request is a reservation that
 *   fit (their counts are equal), at most the budget's worth of calls are made, and a turn sent
 *   after the flood calls no model;
 * - each refused turn tells its person, naming the budget; each is receipted (`limit.refused`),
 *   and the admins' `budget.exhausted` is written once.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it } from 'node:test';
import { createHttpApp, startHttpServer } from '../../adapters/http/app.js';
import { budgetUsage } from '../../domain/budgets/ledger.js';
import { listBudgets } from '../../domain/budgets/definitions.js';
import { createSpend } from '../../domain/limits.js';
import { lastUserText } from '../helpers/model-server.js';
import { testDatabases } from '../helpers/db.js';
import { useStack, waitFor, withHarness } from '../helpers/steward.js';

const TOKEN = 'budgets-concurrent-token-0123456789';
const TURNS = 50;

for (const kind of testDatabases()) {
  describe(`50 concurrent turns against a small installation budget (${kind.name})`, () => {
    const stack = useStack(kind);

    it(`${TURNS} chats post at once over the HTTP API: the budget is never overdrawn, no call once it is spent, each refused turn names the budget`, { timeout: 150_000 }, async () => {
      const spend = createSpend({ db: stack.db, budget: null });
      await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, spend, budgetWaitMs: 0 }, async (h) => {
        const app = createHttpApp({ ingress: h.ingress, apiToken: TOKEN, account: h.account, health: async () => ({ ok: true, checks: {} }), admin: { db: stack.db } });
        const server = await startHttpServer(app, { host: '127.0.0.1', port: 0 });
        try {
          const api = (method: string, route: string, body?: unknown) =>
            fetch(`${server.url}${route}`, { method, headers: { authorization: `Bearer ${TOKEN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
          const transcript = async (chatId: string) => ((await (await api('GET', `/api/v1/chats/${chatId}/messages`)).json()) as { messages: Array<{ role: string; text: string }> }).messages;
          /** The turn's end in its chat: the answer, or the notice of its refusal. */
          const outcome = (chatId: string, timeoutMs = 60_000) =>
            waitFor(async () => (await transcript(chatId)).find((m) => m.role === 'assistant' || (m.role === 'system' && m.text.includes('Not called'))), `the end of the turn in ${chatId}`, timeoutMs);
          const budgetId = `concurrent-${kind.name}-${randomUUID().slice(0, 8)}`;
          const define = async (tokens: number) => assert.ok([200, 201].includes((await api('PUT', `/api/v1/budgets/${budgetId}`, { scope: 'installation', tokens, period: 'day' })).status));
          const usage = async () => {
            const b = (await listBudgets(stack.db)).find((x) => x.id === budgetId)!;
            return budgetUsage(stack.db, b);
          };
          const chatCalls = () => stack.model.requests.filter((r) => /probe turn|turn \d+: what is|late \d+: and now/.test(lastUserText(r.body))).length;

          // a probe turn under a large budget measures a turn's worst case W (its prompt and the output cap)
          await define(10_000_000);
          stack.model.setDefault(() => ({ text: 'probed', usage: { prompt_tokens: 100, completion_tokens: 10 } }));
          const probeChat = `probe-${randomUUID().slice(0, 8)}`;
          assert.equal((await api('POST', `/api/v1/chats/${probeChat}/messages`, { text: 'probe turn', user: 'client' })).status, 202);
          assert.equal((await outcome(probeChat)).text, 'probed');
          const [probe] = await stack.db.budgetReservation.findMany({ where: { kind: 'chat' } });
          assert.ok(probe, 'the probe turn reserved');
          const W = Number(probe.tokens);
          assert.ok(W > 4096, `W: ${W}`);

          // the budget: ten and a half worst cases on top of the probe's use. The scripted model
          // counts a prompt as a provider does, all it is sent (its JSON body, 4 characters a token),
          // and writes up to the request's max_tokens (long, 8000, without one)
          const limit = 110 + Math.floor(10.5 * W);
          await define(limit);
          const caps: Array<number | undefined> = [];
          const reported: number[] = [];
          stack.model.setDefault((req) => {
            const cap = (req.body as { max_tokens?: number }).max_tokens;
            const usage = { prompt_tokens: Math.ceil(JSON.stringify(req.body).length / 4), completion_tokens: Math.min(cap ?? 8000, 8000) };
            caps.push(cap);
            reported.push(usage.prompt_tokens + usage.completion_tokens);
            return { text: `answered: ${lastUserText(req.body).slice(0, 40)}`, usage, firstTokenDelayMs: 300 };
          });
          const callsBefore = chatCalls();

          // used + held, sampled while the turns run
          let sampling = true;
          let peak = 0;
          const sampler = (async () => {
            for (let i = 0; sampling && i < 10_000; i++) {
              const u = await usage();
              peak = Math.max(peak, u.usedTokens + u.reservedTokens);
              await sleep(20);
            }
          })();

          const chats = Array.from({ length: TURNS }, (_, i) => `c${i}-${randomUUID().slice(0, 6)}`);
          const started = Date.now();
          const posted = await Promise.all(chats.map((c, i) => api('POST', `/api/v1/chats/${c}/messages`, { text: `turn ${i}: what is the status?`, user: `person-${i}` })));
          assert.deepEqual([...new Set(posted.map((r) => r.status))], [202]);
          // the turns' ends, polled a round of chats at a time (not 50 pollers at once)
          const found = new Map<string, { role: string; text: string }>();
          const ends = await waitFor(
            async () => {
              for (const c of chats.filter((x) => !found.has(x))) {
                const end = (await transcript(c)).find((m) => m.role === 'assistant' || (m.role === 'system' && m.text.includes('Not called')));
                if (end) found.set(c, end);
              }
              return found.size === chats.length ? chats.map((c) => found.get(c)!) : undefined;
            },
            `the ends of ${TURNS} turns`,
            90_000,
          );
          sampling = false;
          await sampler;
          const answered = ends.filter((m) => m.role === 'assistant');
          const refused = ends.filter((m) => m.role === 'system');
          assert.equal(answered.length + refused.length, TURNS);

          // the overshoot bound: at most one reservation over the limit
          assert.ok(peak <= limit + W, `used and held peaked at ${peak}: over ${limit} by more than one reservation (${W})`);
          const calls = chatCalls() - callsBefore;
          assert.equal(calls, answered.length, 'one model call per answered turn, none for a refused one');
          assert.deepEqual([...new Set(caps)], [4096], 'each call is held at the provider to the output it reserved');
          const reserved = (await stack.db.budgetReservation.findMany({ where: { kind: 'chat' } })).filter((r) => r.key !== probe.key);
          assert.equal(reserved.length, calls, 'every call reserved first');
          const sorted = (xs: number[]) => [...xs].sort((x, y) => x - y);
          assert.deepEqual(sorted(reserved.map((r) => Number(r.settledTokens))), sorted(reported), 'each settled to its reported usage');
          assert.ok(calls >= 1 && calls * Math.min(...reported) <= limit - 110 + W, `calls: ${calls}`);
          const u = await usage();
          const sum = (xs: number[]) => xs.reduce((n, x) => n + x, 0);
          assert.deepEqual([u.usedTokens, u.reservedTokens], [110 + sum(reported), 0]);

          // each refused turn told its person, naming the budget, what is left and when it renews
          for (const m of refused) {
            // a refused turn that does not wait (budgetWaitMs 0) ends with the refusal: "No reply: the budget ... Not called: ..."
            assert.match(m.text, new RegExp(`Not called: the budget of the installation, ${limit} tokens per day \\(UTC\\), has \\d+ tokens left, and a call to openai-compatible:test-model may need \\d+ tokens: no model is called for it until \\d{4}-\\d{2}-\\d{2} 00:00 UTC`));
          }
          for (const c of chats.filter((_, i) => ends[i]!.role === 'system')) assert.equal((await transcript(c)).filter((m) => m.role === 'assistant').length, 0);
          const receipts = async (k: string) => (await stack.db.receipt.findMany({ where: { kind: k } })).map((x) => JSON.parse(x.data) as Record<string, unknown>);
          assert.equal((await receipts('limit.refused')).filter((d) => d.budget === budgetId && d.kind === 'chat').length, refused.length);
          assert.equal((await receipts('budget.exhausted')).filter((d) => d.budget === budgetId).length, 1);

          // after the flood, turns one at a time: answered while one more worst case fits, then refused with no call
          let late: { role: string; text: string } | undefined;
          let lateCalls = 0;
          for (let i = 0; i < 6 && late?.role !== 'system'; i++) {
            const c = `late${i}-${randomUUID().slice(0, 6)}`;
            assert.equal((await api('POST', `/api/v1/chats/${c}/messages`, { text: `late ${i}: and now?`, user: 'late' })).status, 202);
            late = await outcome(c);
            if (late.role === 'assistant') lateCalls++;
          }
          assert.equal(late?.role, 'system', 'the budget stops the turns');
          assert.equal(chatCalls() - callsBefore, calls + lateCalls, 'no call for the refused turn');
          const end = await usage();
          assert.deepEqual([end.usedTokens, end.reservedTokens], [110 + sum(reported), 0]);
          assert.ok(end.usedTokens <= limit + W, 'at most one reservation over the limit');
          const last = (await receipts('limit.refused')).filter((d) => d.budget === budgetId).at(-1) as { left: { tokens: number }; need: { tokens: number } };
          assert.ok(last.left.tokens < last.need.tokens, `spent: what is left does not hold one more turn: ${JSON.stringify(last)}`);
          assert.ok(Date.now() - started < 120_000);
        } finally {
          await server.close();
        }
      });
    });
  });
}
