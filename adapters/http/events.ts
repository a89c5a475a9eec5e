/**
 * Live updates of one chat as server-sent events: `GET /api/v1/chats/{chatId}/events`, for API
 * clients (bearer token) and the console (its sign-in cookie). Events come from what is stored
 * and what the polling routes read (the transcript and the session's status query), so the
 * stream and `GET .../messages` / `.../status` never disagree:
 *
 * - `message`: a transcript entry (the user's message, progress and approval notices the session
 *   records, the reply); its event id is the entry's transcript seq, so a client resumed with
 *   `Last-Event-ID: <seq>` (or `?after=<seq>`) gets exactly the entries after it.
 * - `status`: the session's status (running turn, phase, tool, approval waited on, queue) when
 *   it changes; no id (it is recomputed, not stored).
 * - `partial`: the running model step's text so far, as the model streams it (with
 *   STEWARD_MODEL_STREAM): read from the live draft the worker keeps in the database
 *   (services/chat/live.ts, domain/live-drafts.ts), masked for held secrets; an event with empty
 *   text when the draft is over (after the reply's `message`, never before it; or when the step
 *   moves on to its tool calls). No id:
 *   a preview, not resumable state (the reply is).
 * - `approval`: an approval the running turn waits for (the status's `approvalId`), with the
 *   request text exactly as the chat shows it (the operator inbox's item), when it starts waiting
 *   and again when it is decided (approved, denied, expired, cancelled: by whom). No id.
 * - a `: heartbeat` comment every `heartbeatMs` so proxies keep the connection.
 *
 * Without `Last-Event-ID` or `after` the stream starts at the newest entry (only what comes
 * next). At most `maxStreams` streams are open at once (503 with Retry-After beyond); a stream
 * ends when its client goes away. A read that fails (the database, the status query) does not end
 * it: the poll is retried, backing off up to 5 s, and only reads failing for `failLimitMs` end the
 * stream (the client's EventSource then reconnects with `Last-Event-ID`, losing nothing). `?format=html` sends each event's data as an HTML fragment
 * (escaped by JSX) for the console's htmx SSE extension; the default is JSON. The route is in
 * the OpenAPI document (registered by hand: it streams, so it is not an `app.openapi` route).
 */
import { z, type OpenAPIHono } from '@hono/zod-openapi';
import { streamSSE } from 'hono/streaming';
import type { Logger } from 'pino';
import { sessionWorkflowId } from '../../common/ids.js';
import type { Ingress } from '../../services/chat/intake.js';
import type { ChatLive, LiveApproval, PartialEvent } from '../../services/chat/live.js';
import type { SessionStatusView } from '../../services/chat/status.js';
import type { TranscriptEntry } from '../../services/chat/transcript.js';
import { TranscriptEntrySchema } from './common.js';

export interface ChatEventOptions {
  ingress: Ingress;
  account: string;
  /** The live draft and approvals (absent: no `partial` or `approval` events). */
  live?: ChatLive;
  /** Streams open at once (default 32). */
  maxStreams?: number;
  /** How often the transcript (and the live draft, while a turn runs) is read (default 250 ms); the status and approvals every second poll. */
  pollMs?: number;
  /** Heartbeat comment interval (default 15 s). */
  heartbeatMs?: number;
  /** How long reads may keep failing before the stream ends (default 30 s); until then a failed poll is retried, backing off. */
  failLimitMs?: number;
  /** Where a failing read is told (once per run of failures). */
  log?: Pick<Logger, 'warn'>;
  /** HTML renderers for `?format=html` (the console's). */
  html?: {
    message(e: TranscriptEntry): string;
    status(s: SessionStatusView): string;
    partial(p: PartialEvent): string;
    approval(a: LiveApproval): string;
  };
}

const CHAT_ID = /^[A-Za-z0-9._@+=-]{1,128}$/;
const Seq = z.coerce.number().int().min(0);

/** The chat events path, for the API's authentication middleware. */
export const CHAT_EVENTS_PATH = /^\/api\/v1\/chats\/[^/]+\/events$/;

/** The status fields that make a `status` event when they change. */
const statusKey = (s: SessionStatusView) => JSON.stringify([s.exists, s.running, s.queueLength, s.turns]);

/** Approvals one stream follows at most (the oldest are forgotten first). */
const MAX_FOLLOWED_APPROVALS = 64;
/** A pending approval is read again this long after the status changed (a decision moves the turn on)... */
const APPROVAL_REREAD_AFTER_CHANGE_MS = 3000;
/** ...and at least this often while it waits (a decision the status does not show yet). */
const APPROVAL_REREAD_MS = 5000;

// ---- the OpenAPI description (the same shapes the stream sends) ----

const MessageData = TranscriptEntrySchema.openapi('ChatEventMessage', { description: 'A transcript entry, as GET /api/v1/chats/{chatId}/messages lists it' });

const StatusData = z
  .object({
    workflowId: z.string(),
    exists: z.boolean(),
    running: z
      .object({ turnId: z.string(), runWorkflowId: z.string(), step: z.number(), phase: z.string(), startedAt: z.string(), tool: z.string().optional(), approvalId: z.string().optional() })
      .nullable(),
    queueLength: z.number(),
    model: z.string(),
    think: z.string(),
    tokens: z.object({ input: z.number(), output: z.number(), total: z.number() }),
    turns: z.number(),
  })
  .openapi('ChatEventStatus', { description: "The session's status, as GET /api/v1/chats/{chatId}/status answers it" });

const PartialData = z
  .object({
    turnId: z.string(),
    stepKey: z.string().openapi({ description: 'The model step: model:<turnId>:<step>' }),
    text: z.string().openapi({ description: "The step's text so far, held secrets masked; empty when the draft is over (sent after the reply's message, or when the step moves on to its tool calls)" }),
  })
  .openapi('ChatEventPartial', { description: 'The running model step\'s text as the model streams it (STEWARD_MODEL_STREAM=true); written by the worker at most every ~300 ms once a step has streamed ~400 ms' });

const ApprovalData = z
  .object({
    id: z.string().openapi({ example: 'gqgg7fhk' }),
    status: z.string().openapi({ description: 'pending, approved, denied, expired, cancelled' }),
    title: z.string(),
    text: z.string().openapi({ description: 'The request exactly as the chat shows it to the admins' }),
    decided: z.object({ by: z.string().nullable(), at: z.string().nullable(), how: z.string(), reason: z.string().optional() }).nullable(),
  })
  .openapi('ChatEventApproval', { description: 'An approval the running turn waits for; sent when it starts waiting and again when it is decided' });

const EVENTS_DESCRIPTION = [
  'Server-sent events (text/event-stream). Each event has a type (`event:`) and data (`data:`): JSON, or with `format=html` an HTML fragment (escaped) for the console.',
  '- `message` (id: the transcript seq; resumable with Last-Event-ID or `after`): a transcript entry (ChatEventMessage).',
  '- `status` (no id): the session status when it changes (ChatEventStatus); the first is sent at once.',
  "- `partial` (no id): the running model step's text so far (ChatEventPartial), with STEWARD_MODEL_STREAM=true; empty text when the draft is over (after the reply's `message`, which replaces it).",
  '- `approval` (no id): an approval the turn waits for, with the request text as the chat shows it, and again when decided (ChatEventApproval).',
  '- a `: heartbeat` comment every 15 s.',
].join('\n');

/** Register the route in the OpenAPI document (the handler is a plain route: it streams). */
function describeRoute(app: OpenAPIHono): void {
  const Event = (name: string, data: z.ZodType, withId: boolean) =>
    z.object({ event: z.literal(name), ...(withId ? { id: z.string() } : {}), data });
  app.openAPIRegistry.registerPath({
    method: 'get',
    path: '/api/v1/chats/{chatId}/events',
    summary: "The chat's live events (server-sent events): transcript entries, status, the reply's text as it streams, approvals",
    description: EVENTS_DESCRIPTION,
    security: [{ bearer: [] }],
    request: {
      params: z.object({ chatId: z.string().min(1).max(128).regex(CHAT_ID).openapi({ param: { name: 'chatId', in: 'path' }, example: 'support-room' }) }),
      query: z.object({
        after: z.number().int().min(0).optional().openapi({ param: { name: 'after', in: 'query' }, description: 'Resume after this transcript seq (as Last-Event-ID); without either, only what comes next' }),
        format: z.enum(['json', 'html']).optional().openapi({ param: { name: 'format', in: 'query' }, description: 'Event data as JSON (default) or as HTML fragments' }),
      }),
      headers: z.object({ 'Last-Event-ID': z.string().optional().openapi({ param: { name: 'Last-Event-ID', in: 'header' }, description: 'The id of the last `message` event received: the stream resumes after it' }) }),
    },
    responses: {
      200: {
        description: 'The event stream: message, status, partial and approval events (see the description above), until the client goes away',
        content: {
          'text/event-stream': {
            schema: z
              .union([Event('message', MessageData, true), Event('status', StatusData, false), Event('partial', PartialData, false), Event('approval', ApprovalData, false)])
              .openapi({ description: 'One event of the stream, its data shown parsed (the wire carries it as the JSON text, or an HTML fragment with format=html)' }),
          },
        },
      },
      400: { description: 'A bad chat id or Last-Event-ID' },
      401: { description: 'Missing or wrong bearer token (or console sign-in)' },
      503: { description: 'Too many event streams open: retry after Retry-After seconds' },
    },
  });
}

export function registerChatEventRoutes(app: OpenAPIHono, opts: ChatEventOptions): void {
  const maxStreams = opts.maxStreams ?? 32;
  const pollMs = opts.pollMs ?? 250;
  const heartbeatMs = opts.heartbeatMs ?? 15_000;
  const failLimitMs = opts.failLimitMs ?? 30_000;
  const live = opts.live;
  let open = 0;
  describeRoute(app);

  app.get('/api/v1/chats/:chatId/events', async (c) => {
    const chatId = c.req.param('chatId');
    if (!CHAT_ID.test(chatId)) return c.json({ error: 'chat ids use letters, digits and . _ @ + = -' }, 400);
    const resume = c.req.header('last-event-id') ?? c.req.query('after');
    let after: number | undefined;
    if (resume !== undefined) {
      const p = Seq.safeParse(resume);
      if (!p.success) return c.json({ error: 'Last-Event-ID (or after) must be a transcript seq: a whole number' }, 400);
      after = p.data;
    }
    const html = c.req.query('format') === 'html' ? opts.html : undefined;
    if (open >= maxStreams) return c.json({ error: `too many event streams open (${maxStreams}): retry later` }, 503, { 'retry-after': '5' });
    const sessionId = sessionWorkflowId({ platform: 'http', account: opts.account, chatId });
    open++;
    c.header('cache-control', 'no-store');
    c.header('x-accel-buffering', 'no');
    return streamSSE(c, async (stream) => {
      let aborted = false;
      let wake: (() => void) | undefined;
      stream.onAbort(() => {
        aborted = true;
        wake?.();
      });
      const send = async (event: string, data: string, id?: string) => {
        if (!aborted) await stream.writeSSE({ event, data, ...(id !== undefined ? { id } : {}) });
      };
      try {
        let lastStatus = '';
        let status: SessionStatusView | undefined;
        let lastBeat = Date.now();
        let lastStatusRead = 0;
        let lastStatusChange = 0;
        let lastApprovalRead = 0;
        /** The partial last sent (its step and text), while one shows. */
        let shown: PartialEvent | undefined;
        /** Steps whose draft is over (their reply came, or the turn moved on). */
        const ended = new Set<string>();
        /** Sends the transcript's entries after `after` (moving it on); true when one of them is a reply. */
        const pump = async (): Promise<boolean> => {
          let r = false;
          for (const e of await opts.ingress.transcript(sessionId, { afterSeq: after, limit: 200 })) {
            if (e.seq === undefined || aborted) continue;
            await send('message', html ? html.message(e) : JSON.stringify(e), String(e.seq));
            after = e.seq;
            if (e.role !== 'user') r = true;
          }
          return r;
        };
        /** Approvals followed: id -> the state last sent ('' before the first). */
        const approvals = new Map<string, string>();
        /** When the current run of failed reads began (undefined while reads succeed), and its length. */
        let failingSince: number | undefined;
        let failures = 0;
        while (!aborted) {
          try {
            if (after === undefined) after = (await opts.ingress.transcript(sessionId, { limit: 1 })).at(-1)?.seq ?? 0;
            let replied = await pump();
            if (Date.now() - lastStatusRead >= pollMs * 2) {
              lastStatusRead = Date.now();
              status = await opts.ingress.status(sessionId);
              const key = statusKey(status);
              if (key !== lastStatus) {
                lastStatus = key;
                lastStatusChange = Date.now();
                await send('status', html ? html.status(status) : JSON.stringify(status));
              }
              if (live) {
                // a decision moves the turn on (the status changes): pending approvals are read again
                // then, and every few seconds besides, not at every poll of a long wait
                const soon = Date.now() - lastStatusChange < APPROVAL_REREAD_AFTER_CHANGE_MS;
                const due = soon || Date.now() - lastApprovalRead >= APPROVAL_REREAD_MS;
                if (due) lastApprovalRead = Date.now();
                await followApprovals(live, status, approvals, due, async (a) => send('approval', html ? html.approval(a) : JSON.stringify(a)));
              }
            }
            if (live && (status?.running || shown)) {
              const running = status?.running;
              const d = running ? await live.draft(sessionId) : undefined;
              if (d && running && d.turnId === running.turnId && d.text !== '' && !(replied || ended.has(d.stepKey))) {
                if (!shown || shown.stepKey !== d.stepKey || shown.text !== d.text) {
                  shown = { turnId: d.turnId, stepKey: d.stepKey, text: d.text };
                  await send('partial', html ? html.partial(shown) : JSON.stringify(shown));
                }
              } else if (shown && (replied || !running || running.turnId !== shown.turnId || !['model', 'delivering'].includes(running.phase))) {
                // the draft is over: its reply came (or the turn moved on to tools, an approval, its end).
                // The status can show the turn over before this poll's transcript read showed its reply
                // (written between the two reads): the transcript is read again first, so the reply
                // comes before the empty partial that ends the draft, never after it.
                if (!replied) replied = await pump();
                const over: PartialEvent = { turnId: shown.turnId, stepKey: shown.stepKey, text: '' };
                // a draft row its step failed to clear is not shown again
                ended.add(shown.stepKey);
                if (ended.size > 64) ended.delete(ended.values().next().value as string);
                shown = undefined;
                await send('partial', html ? html.partial(over) : JSON.stringify(over));
              }
            }
            failingSince = undefined;
            failures = 0;
          } catch (err) {
            failingSince ??= Date.now();
            if (failures++ === 0) opts.log?.warn({ err, chatId }, 'chat event stream: a read failed; retrying');
            if (Date.now() - failingSince >= failLimitMs) break;
          }
          if (Date.now() - lastBeat >= heartbeatMs && !aborted) {
            lastBeat = Date.now();
            await stream.write(': heartbeat\n\n');
          }
          await new Promise<void>((resolve) => {
            const t = setTimeout(resolve, failures === 0 ? pollMs : Math.min(pollMs * 2 ** failures, 5_000));
            wake = () => {
              clearTimeout(t);
              resolve();
            };
          });
        }
      } finally {
        open--;
      }
    });
  });
}

/**
 * The approval events of one status reading: the approval the running turn waits for is followed
 * from when it is first seen (and read at once); each followed approval is sent when its state
 * differs from the one last sent (pending, then its decision); a pending one is read again when
 * `due`, a decided one no more.
 */
async function followApprovals(live: ChatLive, status: SessionStatusView, followed: Map<string, string>, due: boolean, send: (a: LiveApproval) => Promise<void>): Promise<void> {
  const waiting = status.running?.approvalId;
  if (waiting && !followed.has(waiting)) {
    if (followed.size >= MAX_FOLLOWED_APPROVALS) followed.delete(followed.keys().next().value as string);
    followed.set(waiting, '');
  }
  for (const [id, sent] of followed) {
    if (sent !== '' && (sent !== 'pending' || !due)) continue;
    const a = await live.approval(id);
    if (!a) continue;
    if (a.status !== sent) {
      followed.set(id, a.status);
      await send(a);
    }
  }
}
