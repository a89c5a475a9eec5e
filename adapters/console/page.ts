/**
 * What every console page module gets from the console (app.tsx): its dependencies, the page
 * renderer (the layout around a body, for the person signed in), who is asking (their Actor, as
 * the API's role rules take it: every decision a page offers is decided by the service with this
 * actor, never by the page) and links into the Temporal UI.
 *
 * A page lives in its own module (`adapters/console/<page>.tsx`) exporting
 * `add<Page>Routes(app, ctx)`; app.tsx mounts it behind the sign-in and CSRF guard.
 */
import type { Context, Hono } from 'hono';
import type { Child } from 'hono/jsx';
import type { Actor } from '../../common/roles.js';
import type { ConsoleDeps } from './app.js';
import type { PageId } from './layout.js';

export type Render = (c: Context, title: string, page: PageId | undefined, body: Child, status?: 200 | 400 | 403 | 404 | 409, workflowId?: string) => Response | Promise<Response>;

export interface ConsolePageContext {
  deps: ConsoleDeps;
  render: Render;
  /** The person (or the operator) signed in to this request. */
  actorOf(c: Context): Actor;
  /** The Temporal UI's page of a run (its list without an id), when the UI is served. */
  runLink(workflowId?: string): string | undefined;
}

export type AddPageRoutes = (app: Hono, ctx: ConsolePageContext) => void;

/** True when the request came from htmx (answer with a fragment, not a whole page). */
export function fromHtmx(c: Context): boolean {
  return c.req.header('hx-request') !== undefined;
}
