/** The page every console page is drawn in: head (CSP-clean: only same-origin script and style), skip link, nav, who is signed in, sign out. */
import type { Child } from 'hono/jsx';

export type PageId = 'inbox' | 'chats' | 'changes' | 'objectives' | 'knowledge' | 'budgets' | 'replays';

export const NAV: { id: PageId; label: string; href: string }[] = [
  { id: 'inbox', label: 'Inbox', href: '/console/inbox' },
  { id: 'chats', label: 'Chats', href: '/console/chats' },
  { id: 'changes', label: 'Changes', href: '/console/changes' },
  { id: 'objectives', label: 'Objectives', href: '/console/objectives' },
  { id: 'knowledge', label: 'Knowledge', href: '/console/knowledge' },
  { id: 'budgets', label: 'Budgets', href: '/console/budgets' },
  { id: 'replays', label: 'Replays', href: '/console/replays' },
];

/** Who the page is for. */
export interface Viewer {
  name: string;
  role: string;
  /** Admins (and the operator) see every page; other people their inbox. */
  admin: boolean;
  /** The operator's sign-in (the Temporal UI is theirs). */
  operator: boolean;
}

/** htmx's settings: no inline style injected, nothing evaluated, requests to this origin only. */
export const HTMX_CONFIG = JSON.stringify({
  includeIndicatorStyles: false, allowEval: false, allowScriptTags: false, selfRequestsOnly: true, historyCacheSize: 0,
  // refusals (4xx) are shown in place too
  responseHandling: [{ code: '204', swap: false }, { code: '[23]..', swap: true }, { code: '[45]..', swap: true, error: true }],
});

export function Layout(props: { title: string; page: PageId | undefined; viewer: Viewer; csrf: string; uiLink?: string | undefined; children?: Child }) {
  return (
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <meta name="htmx-config" content={HTMX_CONFIG} />
        <title>{`${props.title} · Steward console`}</title>
        <link rel="stylesheet" href="/console/assets/console.css" />
        <script src="/console/assets/htmx.js" defer></script>
        <script src="/console/assets/htmx-sse.js" defer></script>
      </head>
      <body hx-headers={JSON.stringify({ 'X-CSRF-Token': props.csrf })}>
        <a class="skip" href="#main">
          Skip to content
        </a>
        <header class="top">
          <span class="brand">Steward console</span>
          <nav aria-label="Console pages">
            <ul>
              {NAV.filter((n) => props.viewer.admin || n.id === 'inbox').map((n) => (
                <li>
                  <a href={n.href} aria-current={n.id === props.page ? 'page' : undefined}>
                    {n.label}
                  </a>
                </li>
              ))}
              {props.viewer.operator ? (
                <li>
                  <a href={props.uiLink ?? '/ui/'}>Runs in the Temporal UI</a>
                </li>
              ) : null}
            </ul>
          </nav>
          <div class="who">
            <span id="viewer">
              {props.viewer.name} ({props.viewer.role})
            </span>
            <form method="post" action="/console/sign-out">
              <input type="hidden" name="_csrf" value={props.csrf} />
              <button type="submit">Sign out</button>
            </form>
          </div>
        </header>
        <main id="main" tabindex={-1}>
          <h1>{props.title}</h1>
          {props.children}
        </main>
      </body>
    </html>
  );
}
