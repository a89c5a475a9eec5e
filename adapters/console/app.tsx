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
import { deleteCookie } from 'hono/cookie';
import type { Logger } from 'pino';
import { isAdmin, OPERATOR, type Actor } from '../../common/roles.js';
import type { ConsolePersons } from '../../services/auth.js';
import type { ConsoleChats } from '../../services/console.js';
import type { ReceiptService } from '../../services/receipts.js';
import type { HttpDeps } from '../http/app.js';
import { AuthBackoff, backoffMessage, retryAfterSeconds } from '../http/backoff.js';
import { bearerMatches, SIGN_IN_COOKIE, type BrowserSignIn } from '../http/sign-in.js';
import { Layout, type Viewer } from './layout.js';
import { csrfPasses, csrfTokenOf, securityHeaders } from './security.js';
import { addChatRoutes } from './chats.js';
import { addInboxRoutes } from './inbox.js';
import { addChangeRoutes } from './changes.js';
import { addObjectiveRoutes } from './objectives.js';
import { addKnowledgeRoutes } from './knowledge.js';
import { addBudgetRoutes } from './budgets.js';
import { addReplayRoutes } from './replays.js';
import type { AddPageRoutes, ConsolePageContext, Render } from './page.js';

export { chatEventHtml } from './chats.js';

/** The page modules, each mounted behind the sign-in and CSRF guard. */
const PAGES: AddPageRoutes[] = [addChatRoutes, addInboxRoutes, addChangeRoutes, addObjectiveRoutes, addKnowledgeRoutes, addBudgetRoutes, addReplayRoutes];

/** The services the pages use: the same objects the HTTP API's routes call (absent: the page says the feature is off). */
export type ConsoleServices = Pick<HttpDeps, 'changes' | 'objectives' | 'workspaces' | 'knowledge' | 'heartbeat' | 'mcp' | 'tasks' | 'inbox' | 'budgets' | 'replays' | 'forks'> & {
  /** The receipts (the Budgets and receipts page; `steward receipts export` reads the same). */
  receipts?: ReceiptService;
};

export interface ConsoleDeps {
  apiToken: string;
  signIn: BrowserSignIn;
  chats: ConsoleChats;
  /** The other pages' services. */
  services?: ConsoleServices;
  /** Who a request is (default: the person signed in through their console link, else the operator). */
  actorOf?: (c: Context) => Actor;
  /** People's own sign-in (the `/console` command's links); without it only the operator signs in. */
  persons?: ConsolePersons;
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
  // added to the Temporal UI's pages by the /ui proxy: the link back to the console's page of the run on screen
  'ui-link.js': { file: new URL('./ui-link.js', import.meta.url).pathname, type: 'text/javascript; charset=utf-8' },
};

/** Until per-person sign-in: the browser sign-in (and the bearer token) is the operator's. */
const operatorActor = (): Actor => OPERATOR;
const viewerOf = (a: Actor): Viewer => (a.kind === 'operator' ? { name: 'operator', role: 'admin', admin: true, operator: true } : { name: a.name, role: a.role, admin: isAdmin(a.role), operator: false });
/** What a person below admin may open: their inbox (what they asked for, and why they may not decide it). */
const PERSON_PATHS = ['/console/inbox', '/console/sign-out'];


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
    const path = new URL(c.req.url).pathname;
    if (path.startsWith('/console/assets/') || path.startsWith('/console/login/')) {
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
    const personId = deps.persons ? deps.signIn.personOfRequest(c) : undefined;
    const person = personId !== undefined ? await deps.persons?.actorOf(personId) : undefined;
    if (personId !== undefined && !person) {
      // the identity was removed (or its role is not one Steward knows): the sign-in is void
      deleteCookie(c, SIGN_IN_COOKIE, { path: '/' });
      return c.text('refused: this sign-in is no longer valid; send /console to Steward in a direct message for a new link', 401);
    }
    if (!person && !deps.signIn.signedIn(c)) {
      if (c.req.method === 'GET' || c.req.method === 'HEAD') return c.redirect(`/codec/login?next=${encodeURIComponent(`${url.pathname}${url.search}`)}`, 303);
      return c.text('sign in first', 401);
    }
    if (c.req.method !== 'GET' && c.req.method !== 'HEAD' && !(await csrfPasses(c, deps.apiToken, (v) => deps.signIn.cookieValid(v) || deps.signIn.personOf(v) !== undefined))) {
      deps.log?.warn({ path: url.pathname }, 'console: a state-changing request without its CSRF token was refused');
      return c.text('refused: this request needs the CSRF token of your sign-in (reload the page)', 403);
    }
    if (person) {
      if (!isAdmin(person.role) && path !== '/console' && !PERSON_PATHS.some((p) => path === p || path.startsWith(`${p}/`))) {
        return c.text(`refused: this page is for admins; you are ${person.name} (${person.role}). Your page is /console/inbox.`, 403);
      }
      actors.set(c.req.raw, person);
    }
    await next();
    return undefined;
  };
  app.use('/console', guard);
  app.use('/console/*', guard);

  const actors = new WeakMap<Request, Actor>();
  const actorOf = deps.actorOf ?? ((c: Context): Actor => actors.get(c.req.raw) ?? operatorActor());
  const render: Render = (c, title, page, body, status = 200, workflowId) =>
    c.html(
      '<!doctype html>' +
        String(
          <Layout title={title} page={page} viewer={viewerOf(actorOf(c))} csrf={csrfTokenOf(c, deps.apiToken)} uiLink={runLink(workflowId)}>
            {body}
          </Layout>,
        ),
      status,
    );

  // what waits for a decision comes first
  app.get('/console', (c) => c.redirect('/console/inbox', 303));

  // A person's one-time link (the `/console` chat command): checked by its signature, used up by
  // its receipt (services/auth.ts), then the person's cookie. Refused like any wrong credential.
  app.get('/console/login/:token', async (c) => {
    if (c.req.method === 'HEAD') return c.body(null, 200);
    const client = backoff.client(c);
    const wait = backoff.waitMs(client);
    if (wait > 0) return c.text(backoffMessage(wait), 429, { 'retry-after': String(retryAfterSeconds(wait)) });
    const link = deps.signIn.personLink(c.req.param('token'));
    const person = link && deps.persons ? await deps.persons.actorOf(link.identityId) : undefined;
    if (!link || !person || !deps.persons || !(await deps.persons.redeem(link, client.address))) {
      backoff.failure(client, 'console');
      return c.html(
        '<!doctype html>' +
          String(
            <html lang="en">
              <head>
                <meta charset="utf-8" />
                <title>Sign-in link refused · Steward console</title>
                <link rel="stylesheet" href="/console/assets/console.css" />
              </head>
              <body>
                <main id="main">
                  <h1>Sign-in link refused</h1>
                  <p id="link-refused">This console link was used already, has expired or was never issued. Send /console to Steward in a direct message for a new one.</p>
                </main>
              </body>
            </html>,
          ),
        401,
      );
    }
    backoff.success(client);
    deps.signIn.setPersonCookie(c, person.id);
    return c.redirect('/console/inbox', 303);
  });

  app.post('/console/sign-out', (c) => {
    deleteCookie(c, SIGN_IN_COOKIE, { path: '/' });
    return c.redirect('/codec/login?next=%2Fconsole', 303);
  });


  const ctx: ConsolePageContext = { deps, render, actorOf, runLink };
  for (const add of PAGES) add(app, ctx);
  return app;
}
