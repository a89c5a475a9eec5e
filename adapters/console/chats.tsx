/**
 * The Chats page: the sessions with their last message; one chat's transcript updating live over
 * the chat event stream (`GET /api/v1/chats/{id}/events?format=html`, adapters/http/events.ts),
 * with Stop and Steer. Stop and Steer go through the intake as the chat's own `/stop` and
 * `/steer` (services/console.ts), so the session's stop signal and steer update do the work and
 * the role rules are the intake's.
 */
import type { Context, Hono } from 'hono';
import { z } from 'zod';
import type { LiveApproval, PartialEvent } from '../../services/chat/live.js';
import type { SessionStatusView } from '../../services/chat/status.js';
import type { TranscriptEntry } from '../../services/chat/transcript.js';
import type { Child } from 'hono/jsx';
import type { ConsolePageContext } from './page.js';
import { TurnActions } from './replays.js';
import { csrfTokenOf } from './security.js';

const ChatId = z.string().regex(/^[A-Za-z0-9._@+=-]{1,128}$/);
const SteerForm = z.object({ text: z.string().trim().min(1, 'say how to steer').max(4000) });

/** The intake user a console request speaks as: the operator is the HTTP API's `api`; a person signed in is themselves. */
export function intakeUserOf(actor: { kind: string; id: string }): string {
  return actor.kind === 'operator' ? 'api' : actor.id;
}

/** A transcript entry as the console shows it (JSX escapes the text); `actions`: what the page offers for its turn (replays.tsx). */
export function MessageItem(props: { e: TranscriptEntry; actions?: Child }) {
  return (
    <li id={props.e.seq !== undefined ? `m-${props.e.seq}` : undefined} data-role={props.e.role}>
      <span class="role">{props.e.role === 'user' ? (props.e.user ?? 'user') : props.e.role}</span>
      <time datetime={props.e.at}>{props.e.at.slice(11, 19)}</time> {props.e.text}
      {props.actions}
    </li>
  );
}

export function StatusLine(props: { s: SessionStatusView }) {
  const r = props.s.running;
  if (!props.s.exists) return <span>No session yet.</span>;
  if (!r) return <span>Idle · {props.s.turns} turns · queue {props.s.queueLength}</span>;
  return (
    <span>
      Working: {r.phase} (step {r.step}){r.tool ? ` · tool ${r.tool}` : ''}
      {r.approvalId ? ` · waiting for approval ${r.approvalId}` : ''} · queue {props.s.queueLength}
    </span>
  );
}

/** The running model step's text so far (empty: nothing is being typed). */
export function PartialText(props: { p: PartialEvent }) {
  if (props.p.text === '') return <></>;
  return (
    <span class="partial" data-step={props.p.stepKey}>
      {props.p.text}
    </span>
  );
}

const APPROVAL_STATE: Record<string, string> = { pending: 'waiting for a decision', approved: 'approved', denied: 'denied', expired: 'expired (counted as denied)', cancelled: 'cancelled' };

/** An approval the turn waits for (or that was decided), with the request as the chat shows it; decided in the inbox. */
export function ApprovalBox(props: { a: LiveApproval }) {
  const a = props.a;
  const d = a.decided;
  return (
    <div class="approval" data-approval={a.id} data-status={a.status}>
      <p>
        <strong>Approval {a.id}</strong>: {APPROVAL_STATE[a.status] ?? a.status}
        {d?.by ? ` by ${d.by}` : ''}
        {d?.reason ? ` (${d.reason})` : ''}
      </p>
      <pre class="approval-text">{a.text}</pre>
      <a href={`/console/inbox?kind=approval#approval:${a.id}`}>{a.status === 'pending' ? 'Decide it in the inbox' : 'See it in the inbox'}</a>
    </div>
  );
}

/** The HTML fragments of the chat event stream (`?format=html`). */
export const chatEventHtml = {
  message: (e: TranscriptEntry) => String(<MessageItem e={e} />),
  status: (s: SessionStatusView) => String(<StatusLine s={s} />),
  partial: (p: PartialEvent) => String(<PartialText p={p} />),
  approval: (a: LiveApproval) => String(<ApprovalBox a={a} />),
};

/** The Chats page: the sessions, one chat's live transcript, Stop and Steer. */
export function addChatRoutes(app: Hono, { deps, render, actorOf }: ConsolePageContext): void {
  app.get('/console/chats', async (c) => {
    const chats = await deps.chats.list();
    return render(
      c,
      'Chats',
      'chats',
      <>
        <form method="get" action="/console/chats/open" class="controls">
          <label>
            Open an HTTP chat by id <input type="text" name="chatId" required pattern="[A-Za-z0-9._@+=\-]{1,128}" />
          </label>
          <button type="submit">Open</button>
        </form>
        {chats.length === 0 ? (
          <p>No chats yet.</p>
        ) : (
          <table>
            <caption>Sessions, newest message first</caption>
            <thead>
              <tr>
                <th scope="col">Session</th>
                <th scope="col">Messages</th>
                <th scope="col">Last message</th>
              </tr>
            </thead>
            <tbody>
              {chats.map((s) => (
                <tr>
                  <td>{s.chatId !== undefined ? <a href={`/console/chats/${encodeURIComponent(s.chatId)}`}>{s.chatId}</a> : s.sessionId}</td>
                  <td>{s.messages}</td>
                  <td>
                    <time datetime={s.lastAt}>{s.lastAt}</time>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </>,
    );
  });

  app.get('/console/chats/open', (c) => {
    const id = ChatId.safeParse(c.req.query('chatId'));
    return id.success ? c.redirect(`/console/chats/${encodeURIComponent(id.data)}`, 303) : c.redirect('/console/chats', 303);
  });

  app.get('/console/chats/:chatId', async (c) => {
    const id = ChatId.safeParse(c.req.param('chatId'));
    if (!id.success) return render(c, 'No such chat', 'chats', <p>Chat ids use letters, digits and . _ @ + = -.</p>, 404);
    const chatId = id.data;
    const [entries, status] = await Promise.all([deps.chats.transcript(chatId), deps.chats.status(chatId)]);
    const last = entries.at(-1)?.seq ?? 0;
    const base = `/console/chats/${encodeURIComponent(chatId)}`;
    const csrf = csrfTokenOf(c, deps.apiToken);
    // a reply's turn: Replay it, or fork the chat from just before it (admins: the page is theirs; the services check again)
    const turnActions = deps.services?.replays || deps.services?.forks;
    return render(
      c,
      `Chat ${chatId}`,
      'chats',
      <div hx-ext="sse" sse-connect={`/api/v1/chats/${encodeURIComponent(chatId)}/events?format=html&after=${last}`}>
        <p class="status" id="status" role="status" sse-swap="status" hx-swap="innerHTML">
          <StatusLine s={status} />
        </p>
        <div class="controls">
          <form method="post" action={`${base}/stop`} hx-post={`${base}/stop`} hx-target="#action-result" hx-swap="innerHTML">
            <input type="hidden" name="_csrf" value={csrfTokenOf(c, deps.apiToken)} />
            <button type="submit" id="stop">
              Stop
            </button>
          </form>
          <form method="post" action={`${base}/steer`} hx-post={`${base}/steer`} hx-target="#action-result" hx-swap="innerHTML">
            <input type="hidden" name="_csrf" value={csrfTokenOf(c, deps.apiToken)} />
            <label>
              Steer the running turn <input type="text" name="text" id="steer-text" required maxlength={4000} />
            </label>
            <button type="submit">Steer</button>
          </form>
        </div>
        <p id="action-result" role="status" aria-live="polite"></p>
        <section id="approval" class="approvals" aria-live="polite" aria-label="Approval" sse-swap="approval" hx-swap="innerHTML"></section>
        <h2>Transcript</h2>
        <ol class="transcript" id="transcript" aria-live="polite" sse-swap="message" hx-swap="beforeend">
          {entries.map((e) => (
            <MessageItem e={e} actions={turnActions && e.role === 'assistant' && e.turnId ? <TurnActions chatId={chatId} turnId={e.turnId} seq={e.seq} csrf={csrf} replay={!!deps.services?.replays} fork={!!deps.services?.forks} /> : undefined} />
          ))}
        </ol>
        {/* the reply as the model types it (partial events); not live for screen readers: the reply arrives in the transcript */}
        <p class="typing" id="typing" sse-swap="partial" hx-swap="innerHTML"></p>
      </div>,
      200,
      status.running?.runWorkflowId ?? (status.exists ? status.workflowId : undefined),
    );
  });

  /** The answer to a Stop or Steer: a fragment for htmx, the chat page again for a plain form. */
  const answered = (c: Context, chatId: string, text: string, error = false) =>
    c.req.header('hx-request') ? c.html(String(<span class={error ? 'error' : undefined}>{text}</span>), error ? 400 : 200) : c.redirect(`/console/chats/${encodeURIComponent(chatId)}`, 303);

  app.post('/console/chats/:chatId/stop', async (c) => {
    const id = ChatId.safeParse(c.req.param('chatId'));
    if (!id.success) return c.text('no such chat', 404);
    const r = await deps.chats.stop(id.data, intakeUserOf(actorOf(c)));
    return answered(c, id.data, r.kind === 'rejected' ? `Refused: ${r.reply ?? r.reason ?? 'not allowed'}` : (r.reply ?? 'Stop sent.'), r.kind === 'rejected');
  });

  app.post('/console/chats/:chatId/steer', async (c) => {
    const id = ChatId.safeParse(c.req.param('chatId'));
    if (!id.success) return c.text('no such chat', 404);
    const form = SteerForm.safeParse(await c.req.parseBody());
    if (!form.success) return answered(c, id.data, form.error.issues.map((i) => i.message).join('; '), true);
    const r = await deps.chats.steer(id.data, form.data.text, intakeUserOf(actorOf(c)));
    return answered(c, id.data, r.kind === 'rejected' ? `Refused: ${r.reply ?? r.reason ?? 'not allowed'}` : (r.reply ?? 'Steer sent.'), r.kind === 'rejected');
  });

}
