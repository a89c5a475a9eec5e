/**
 * The operator console at `/console`: server-rendered pages (Hono JSX, escaped output) that use
 * htmx and its SSE extension, both served here from node_modules (no third-party origin).
 *
 * Sign-in is the browser sign-in of `/ui` (sign-in.ts: the banner's one-time link or the token
 * form, the same cookie and back-off); a page request without it goes to the sign-in form and
 * back. Every response carries the console's security headers and every POST passes the CSRF
 * check (security.ts) before anything is read or changed. Chats' Stop and Steer go through the
 * intake (services/console.ts).
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { Hono, type Context } from 'hono';
import type { Child } from 'hono/jsx';
import { deleteCookie } from 'hono/cookie';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { SessionStatusView } from '../../services/chat/status.js';
import type { TranscriptEntry } from '../../services/chat/transcript.js';
import type { ConsoleChats } from '../../services/console.js';
import { AuthBackoff, backoffMessage, retryAfterSeconds } from '../http/backoff.js';
import { bearerMatches, SIGN_IN_COOKIE, type BrowserSignIn } from '../http/sign-in.js';
import { Layout, NAV, type PageId, type Viewer } from './layout.js';
import { csrfPasses, csrfTokenOf, securityHeaders } from './security.js';

export interface ConsoleDeps {
  apiToken: string;
  signIn: BrowserSignIn;
  chats: ConsoleChats;
  backoff?: AuthBackoff;
  /** Where the Temporal UI is served (`/ui`), when it is. */
  uiPath?: string;
  /** The Temporal namespace, for links to a run in the UI. */
  namespace?: string;
  log?: Logger;
}

const require = createRequire(import.meta.url);
const ASSETS: Record<string, { file: string; type: string }> = {
  'htmx.js': { file: require.resolve('htmx.org/dist/htmx.min.js'), type: 'text/javascript; charset=utf-8' },
  'htmx-sse.js': { file: require.resolve('htmx-ext-sse/dist/sse.min.js'), type: 'text/javascript; charset=utf-8' },
  'console.css': { file: new URL('./console.css', import.meta.url).pathname, type: 'text/css; charset=utf-8' },
};

const ChatId = z.string().regex(/^[A-Za-z0-9._@+=-]{1,128}$/);
const SteerForm = z.object({ text: z.string().trim().min(1, 'say how to steer').max(4000) });

/** Until per-person sign-in: the browser sign-in is the operator's. */
const OPERATOR: Viewer = { name: 'operator', role: 'admin' };
const OPERATOR_USER = 'api';

/** A transcript entry as the console shows it (JSX escapes the text). */
export function MessageItem(props: { e: TranscriptEntry }) {
  return (
    <li id={props.e.seq !== undefined ? `m-${props.e.seq}` : undefined} data-role={props.e.role}>
      <span class="role">{props.e.role === 'user' ? (props.e.user ?? 'user') : props.e.role}</span>
      <time datetime={props.e.at}>{props.e.at.slice(11, 19)}</time> {props.e.text}
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

/** The HTML fragments of the chat event stream (`?format=html`). */
export const chatEventHtml = {
  message: (e: TranscriptEntry) => String(<MessageItem e={e} />),
  status: (s: SessionStatusView) => String(<StatusLine s={s} />),
};

const PLACEHOLDERS: Record<Exclude<PageId, 'chats'>, { holds: string; meanwhile: string }> = {
  inbox: { holds: 'everything waiting for a decision: approvals, pairing requests, pending memories, open tasks, changes waiting for promotion', meanwhile: 'GET /api/v1/approvals, /api/v1/pairings, /api/v1/tasks; ./steward approvals' },
  changes: { holds: "repository changes: phase timeline, plan, gate verdicts, the patch as a diff, the draft PR link", meanwhile: 'GET /api/v1/changes; ./steward changes' },
  objectives: { holds: 'objectives: schedule, next and recent runs, pause, resume, trigger, backfill', meanwhile: 'GET /api/v1/objectives; ./steward objectives' },
  knowledge: { holds: 'workspaces, skills, memories, MCP servers and their tools, heartbeat parts', meanwhile: 'GET /api/v1/workspaces, /api/v1/memories, /api/v1/mcp/servers, /api/v1/heartbeat' },
  budgets: { holds: 'budgets and receipts for a chat, person or change, exportable as JSONL', meanwhile: 'GET /api/v1/budgets; ./steward budgets' },
};

type Render = (c: Context, title: string, page: PageId | undefined, body: Child, status?: 200 | 400 | 404, workflowId?: string) => Response | Promise<Response>;

export function createConsoleRoutes(deps: ConsoleDeps): Hono {
  const app = new Hono();
  const backoff = deps.backoff ?? new AuthBackoff({ log: deps.log });
  const assets = new Map(Object.entries(ASSETS).map(([name, a]) => [name, { body: readFileSync(a.file), type: a.type }]));
  const runLink = (workflowId?: string) =>
    deps.uiPath ? (workflowId ? `${deps.uiPath}/namespaces/${encodeURIComponent(deps.namespace ?? 'default')}/workflows/${encodeURIComponent(workflowId)}` : `${deps.uiPath}/`) : undefined;

  app.use('/console', securityHeaders());
  app.use('/console/*', securityHeaders());

  app.get('/console/assets/:name', (c) => {
    const a = assets.get(c.req.param('name'));
    if (!a) return c.text('no such asset', 404);
    return c.body(new Uint8Array(a.body), 200, { 'content-type': a.type, 'cache-control': 'public, max-age=3600' });
  });

  // Sign-in and CSRF, for every other console route.
  const guard = async (c: Context, next: () => Promise<void>): Promise<Response | undefined> => {
    if (new URL(c.req.url).pathname.startsWith('/console/assets/')) {
      await next();
      return undefined;
    }
    const wait = backoff.waitMs(backoff.client(c));
    if (wait > 0) return c.text(backoffMessage(wait), 429, { 'retry-after': String(retryAfterSeconds(wait)) });
    const url = new URL(c.req.url);
    const authorization = c.req.header('authorization');
    if (authorization) {
      // an API client: the bearer token stands for both the sign-in and the CSRF token
      if (!bearerMatches(authorization, deps.apiToken)) {
        backoff.failure(backoff.client(c), 'api');
        return c.text('missing or wrong bearer token', 401, { 'www-authenticate': 'Bearer' });
      }
      backoff.success(backoff.client(c));
      await next();
      return undefined;
    }
    if (!deps.signIn.signedIn(c)) {
      if (c.req.method === 'GET' || c.req.method === 'HEAD') return c.redirect(`/codec/login?next=${encodeURIComponent(`${url.pathname}${url.search}`)}`, 303);
      return c.text('sign in first', 401);
    }
    if (c.req.method !== 'GET' && c.req.method !== 'HEAD' && !(await csrfPasses(c, deps.apiToken, (v) => deps.signIn.cookieValid(v)))) {
      deps.log?.warn({ path: url.pathname }, 'console: a state-changing request without its CSRF token was refused');
      return c.text('refused: this request needs the CSRF token of your sign-in (reload the page)', 403);
    }
    await next();
    return undefined;
  };
  app.use('/console', guard);
  app.use('/console/*', guard);

  const render: Render = (c, title, page, body, status = 200, workflowId) =>
    c.html(
      '<!doctype html>' +
        String(
          <Layout title={title} page={page} viewer={OPERATOR} csrf={csrfTokenOf(c, deps.apiToken)} uiLink={runLink(workflowId)}>
            {body}
          </Layout>,
        ),
      status,
    );

  app.get('/console', (c) => c.redirect('/console/chats', 303));

  app.post('/console/sign-out', (c) => {
    deleteCookie(c, SIGN_IN_COOKIE, { path: '/' });
    return c.redirect('/codec/login?next=%2Fconsole', 303);
  });

  for (const id of Object.keys(PLACEHOLDERS) as Exclude<PageId, 'chats'>[]) {
    const p = PLACEHOLDERS[id];
    const label = NAV.find((n) => n.id === id)!.label;
    app.get(`/console/${id}`, (c) =>
      render(
        c,
        label,
        id,
        <>
          <p>This page will show {p.holds}.</p>
          <p>
            It is not built yet. Meanwhile use the API or the CLI: <code>{p.meanwhile}</code> (the API is described at <a href="/api/openapi.json">/api/openapi.json</a>).
          </p>
        </>,
      ),
    );
  }

  addChatRoutes(app, deps, render);
  return app;
}

/** The Chats page: the sessions, one chat's live transcript, Stop and Steer. */
function addChatRoutes(app: Hono, deps: ConsoleDeps, render: Render): void {
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
            <button type="submit" id="stop">
              Stop
            </button>
          </form>
          <form method="post" action={`${base}/steer`} hx-post={`${base}/steer`} hx-target="#action-result" hx-swap="innerHTML">
            <label>
              Steer the running turn <input type="text" name="text" id="steer-text" required maxlength={4000} />
            </label>
            <button type="submit">Steer</button>
          </form>
        </div>
        <p id="action-result" role="status" aria-live="polite"></p>
        <h2>Transcript</h2>
        <ol class="transcript" id="transcript" aria-live="polite" sse-swap="message" hx-swap="beforeend">
          {entries.map((e) => (
            <MessageItem e={e} />
          ))}
        </ol>
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
    const r = await deps.chats.stop(id.data, OPERATOR_USER);
    return answered(c, id.data, r.kind === 'rejected' ? `Refused: ${r.reply ?? r.reason ?? 'not allowed'}` : (r.reply ?? 'Stop sent.'), r.kind === 'rejected');
  });

  app.post('/console/chats/:chatId/steer', async (c) => {
    const id = ChatId.safeParse(c.req.param('chatId'));
    if (!id.success) return c.text('no such chat', 404);
    const form = SteerForm.safeParse(await c.req.parseBody());
    if (!form.success) return answered(c, id.data, form.error.issues.map((i) => i.message).join('; '), true);
    const r = await deps.chats.steer(id.data, form.data.text, OPERATOR_USER);
    return answered(c, id.data, r.kind === 'rejected' ? `Refused: ${r.reply ?? r.reason ?? 'not allowed'}` : (r.reply ?? 'Steer sent.'), r.kind === 'rejected');
  });

}
