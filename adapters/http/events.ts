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
 * - a `: heartbeat` comment every `heartbeatMs` so proxies keep the connection.
 *
 * Without `Last-Event-ID` or `after` the stream starts at the newest entry (only what comes
 * next). At most `maxStreams` streams are open at once (503 with Retry-After beyond); a stream
 * ends when its client goes away. `?format=html` sends each event's data as an HTML fragment
 * (escaped by JSX) for the console's htmx SSE extension; the default is JSON.
 */
import type { OpenAPIHono } from '@hono/zod-openapi';
import { streamSSE } from 'hono/streaming';
import { z } from 'zod';
import { sessionWorkflowId } from '../../common/ids.js';
import type { Ingress } from '../../services/chat/intake.js';
import type { SessionStatusView } from '../../services/chat/status.js';
import type { TranscriptEntry } from '../../services/chat/transcript.js';

export interface ChatEventOptions {
  ingress: Ingress;
  account: string;
  /** Streams open at once (default 32). */
  maxStreams?: number;
  /** How often the transcript and status are read (default 250 ms). */
  pollMs?: number;
  /** Heartbeat comment interval (default 15 s). */
  heartbeatMs?: number;
  /** HTML renderers for `?format=html` (the console's). */
  html?: { message(e: TranscriptEntry): string; status(s: SessionStatusView): string };
}

const CHAT_ID = /^[A-Za-z0-9._@+=-]{1,128}$/;
const Seq = z.coerce.number().int().min(0);

/** The chat events path, for the API's authentication middleware. */
export const CHAT_EVENTS_PATH = /^\/api\/v1\/chats\/[^/]+\/events$/;

/** The status fields that make a `status` event when they change. */
const statusKey = (s: SessionStatusView) => JSON.stringify([s.exists, s.running, s.queueLength, s.turns]);

export function registerChatEventRoutes(app: OpenAPIHono, opts: ChatEventOptions): void {
  const maxStreams = opts.maxStreams ?? 32;
  const pollMs = opts.pollMs ?? 250;
  const heartbeatMs = opts.heartbeatMs ?? 15_000;
  let open = 0;

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
      try {
        if (after === undefined) after = (await opts.ingress.transcript(sessionId, { limit: 1 })).at(-1)?.seq ?? 0;
        let lastStatus = '';
        let lastBeat = Date.now();
        let lastStatusRead = 0;
        while (!aborted) {
          for (const e of await opts.ingress.transcript(sessionId, { afterSeq: after, limit: 200 })) {
            if (e.seq === undefined || aborted) continue;
            await stream.writeSSE({ id: String(e.seq), event: 'message', data: html ? html.message(e) : JSON.stringify(e) });
            after = e.seq;
          }
          if (Date.now() - lastStatusRead >= pollMs * 2) {
            lastStatusRead = Date.now();
            const s = await opts.ingress.status(sessionId);
            const key = statusKey(s);
            if (key !== lastStatus && !aborted) {
              lastStatus = key;
              await stream.writeSSE({ event: 'status', data: html ? html.status(s) : JSON.stringify(s) });
            }
          }
          if (Date.now() - lastBeat >= heartbeatMs && !aborted) {
            lastBeat = Date.now();
            await stream.write(': heartbeat\n\n');
          }
          await new Promise<void>((resolve) => {
            const t = setTimeout(resolve, pollMs);
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
