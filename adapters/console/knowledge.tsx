/**
 * The Knowledge and tools page: workspaces with their index state, a search of each and Reindex;
 * skills; memories (pending ones are decided in the inbox; an approved one can be forgotten); MCP
 * servers with their state and tools; the heartbeat's parts.
 *
 * Everything goes through the services the HTTP API calls (`ctx.deps.services`): the workspace
 * service (`searchIn` is the search the agent's `search_workspace` and
 * `GET /api/v1/workspaces/{name}/search` use; `reindexAs` checks the role of who asks), the
 * knowledge service (`recent`, `forget` with its role rules), the MCP service (`list`, `tools`:
 * this process's MCP client connects when needed) and the heartbeat. The page decides no rule:
 * a service's refusal is shown where the action was (409), bad input is 400, an unknown name 404.
 *
 * Routes: GET /console/knowledge; GET /console/knowledge/workspaces/{name}[?q=] (index state,
 * skills, a search); GET .../workspaces/{name}/search?q= and .../state (htmx fragments);
 * POST .../workspaces/{name}/reindex; POST /console/knowledge/memories/{id}/forget;
 * GET /console/knowledge/mcp/{name} (a server and its tools) and .../tools (fragment).
 */
import type { Context, Hono } from 'hono';
import { z } from 'zod';
import { McpServerNameSchema } from '../../common/mcp.js';
import type { PartState } from '../../domain/heartbeat.js';
import type { SearchHit } from '../../domain/knowledge/index-store.js';
import type { MemoryRow } from '../../domain/knowledge/memory.js';
import type { Skill } from '../../domain/knowledge/skills.js';
import type { McpServerView, McpToolView } from '../../services/mcp.js';
import { ServiceInputError } from '../../services/requests.js';
import { WorkspaceNameSchema, type WorkspaceIndexState } from '../../services/workspaces.js';
import { fromHtmx, type ConsolePageContext } from './page.js';

const SearchQuery = z.object({
  q: z.string().trim().min(1, 'say what to search for').max(500, 'a query is at most 500 characters'),
  limit: z.coerce.number().int('limit: a whole number').min(1, 'limit: at least 1').max(50, 'limit: at most 50').default(10),
});

/** The outcome of a service call: its value, or the refusal with its HTTP status. */
type Outcome<T> = { ok: true; value: T } | { ok: false; status: 400 | 404 | 409; message: string };

async function attempt<T>(fn: () => Promise<T>): Promise<Outcome<T>> {
  try {
    return { ok: true, value: await fn() };
  } catch (err) {
    if (err instanceof ServiceInputError) return { ok: false, status: err.status, message: err.message };
    throw err;
  }
}

const issues = (e: z.ZodError) => e.issues.map((i) => i.message).join('; ');
const when = (iso: string | null | undefined) => (iso ? <time datetime={iso}>{iso.slice(0, 19).replace('T', ' ')}</time> : <span>never</span>);
const wsPath = (name: string) => `/console/knowledge/workspaces/${encodeURIComponent(name)}`;
const mcpPath = (name: string) => `/console/knowledge/mcp/${encodeURIComponent(name)}`;

/** A workspace's index: documents, sections, the indexing's state; polls itself while indexing runs. */
export function IndexState(props: { name: string; st: WorkspaceIndexState | { error: string }; oob?: boolean }) {
  // polls itself while indexing runs (and once more after a Reindex, sent out of band)
  const id = `state-${props.name}`;
  if (!('state' in props.st)) {
    return (
      <div id={id} class="index-state">
        <p class="error">Index state unavailable: {props.st.error}</p>
      </div>
    );
  }
  const st = props.st;
  const running = st.state === 'running';
  const poll = running || props.oob ? { 'hx-get': `${wsPath(props.name)}/state`, 'hx-trigger': 'every 2s', 'hx-swap': 'outerHTML' } : {};
  return (
    <div id={id} class="index-state" data-state={st.state} hx-swap-oob={props.oob ? 'true' : undefined} {...poll}>
      <dl>
        <dt>Files</dt>
        <dd data-field="documents">{st.documents}</dd>
        <dt>Sections</dt>
        <dd data-field="chunks">{st.chunks}</dd>
        <dt>Indexing</dt>
        <dd data-field="indexing" class={st.state === 'failed' ? 'error' : undefined}>
          {st.state === 'running'
            ? `running (${st.run?.phase ?? 'starting'}${st.run ? `, ${st.run.indexed} files so far` : ''})`
            : st.state === 'done'
              ? `done${st.run ? ` (its last run: ${st.run.indexed} changed files indexed, ${st.run.removed} removed)` : ''}`
              : st.state === 'failed'
                ? `failed: ${st.error ?? 'unknown'}`
                : 'never run'}
        </dd>
        <dt>Last indexed</dt>
        <dd data-field="last-indexed">{when(st.lastIndexedAt)}</dd>
      </dl>
    </div>
  );
}

/** Search hits: path and lines, heading, the excerpt (escaped by JSX), score. */
export function SearchResults(props: { workspace: string; query: string; hits: SearchHit[] }) {
  if (props.hits.length === 0) return <p>Nothing in {props.workspace} matches “{props.query}”.</p>;
  return (
    <ol class="hits">
      {props.hits.map((h) => (
        <li>
          <p class="hit-head">
            <code>
              {h.path}:{h.startLine}
              {h.endLine !== h.startLine ? `-${h.endLine}` : ''}
            </code>
            {h.heading ? ` · ${h.heading}` : ''} · <span class="score">score {h.score.toFixed(3)}</span>
            {h.match ? ` · ${h.match}` : ''}
          </p>
          <p class="snippet">{h.text.length > 400 ? `${h.text.slice(0, 400)}…` : h.text}</p>
        </li>
      ))}
    </ol>
  );
}

function SearchForm(props: { name: string; query?: string }) {
  const target = `hits-${props.name}`;
  return (
    <form method="get" action={wsPath(props.name)} hx-get={`${wsPath(props.name)}/search`} hx-target={`#${target}`} hx-swap="innerHTML" role="search" class="controls search">
      <label>
        Search {props.name} <input type="search" name="q" required maxlength={500} value={props.query ?? ''} />
      </label>
      <button type="submit">Search</button>
    </form>
  );
}

function ReindexForm(props: { name: string }) {
  const action = `${wsPath(props.name)}/reindex`;
  return (
    <form method="post" action={action} hx-post={action} hx-target={`#reindex-${props.name}`} hx-swap="innerHTML" class="controls">
      <button type="submit">Reindex {props.name}</button>
      <span id={`reindex-${props.name}`} role="status" aria-live="polite"></span>
    </form>
  );
}

function SkillsTable(props: { skills: Skill[]; caption: string; workspace?: string }) {
  if (props.skills.length === 0) return <p>No skills.</p>;
  return (
    <table class="skills">
      <caption>{props.caption}</caption>
      <thead>
        <tr>
          <th scope="col">Skill</th>
          <th scope="col">What it does</th>
          <th scope="col">From</th>
          <th scope="col">Offered to</th>
        </tr>
      </thead>
      <tbody>
        {props.skills.map((s) => (
          <tr>
            <td data-label="Skill">
              <code>{s.name}</code> <span class="muted">v{s.version.slice(0, 8)}</span>
            </td>
            <td data-label="What it does">
              {s.description}
              {s.when ? <span class="muted"> (when: {s.when})</span> : ''}
            </td>
            <td data-label="From">{s.source === 'workspace' ? `workspace ${props.workspace ?? ''}`.trim() : "the operator's skills folder"}</td>
            <td data-label="Offered to">{s.roles.length ? s.roles.join(', ') : 'everyone'}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function Problems(props: { problems: Array<{ file: string; error: string }> }) {
  if (props.problems.length === 0) return <></>;
  return (
    <>
      <p>Not offered (not a valid SKILL.md):</p>
      <ul class="problems">
        {props.problems.map((p) => (
          <li>
            <code>{p.file}</code>: <span class="error">{p.error}</span>
          </li>
        ))}
      </ul>
    </>
  );
}

/** One memory as a table row, with its action: Forget (approved), a link to the inbox (pending). */
export function MemoryRowView(props: { m: MemoryRow; runLink?: string | undefined; note?: { text: string; error: boolean } }) {
  const m = props.m;
  const forget = `/console/knowledge/memories/${encodeURIComponent(m.id)}/forget`;
  return (
    <tr id={`memory-${m.id}`} data-status={m.status}>
      <td data-label="Id">
        <code>{m.id}</code>
      </td>
      <td data-label="Memory" class="memory-text">{m.text}</td>
      <td data-label="Kind, scope">
        {m.kind}, {m.scope === 'workspace' ? `workspace ${m.workspace ?? ''}` : 'this chat only'}
      </td>
      <td data-label="Status">
        {m.status === 'active' ? 'approved' : m.status}
        {m.decidedBy ? (
          <span class="muted">
            {' '}
            by {m.decidedBy} {when(m.decidedAt?.toISOString())}
          </span>
        ) : (
          ''
        )}
      </td>
      <td data-label="Provenance">
        proposed for {m.proposedBy} in {m.platform} chat <code>{m.chatId}</code> {when(m.createdAt.toISOString())}
        {props.runLink ? (
          <>
            {' '}
            · <a href={props.runLink}>the session's run</a>
          </>
        ) : (
          ''
        )}
      </td>
      <td data-label="Action">
        {m.status === 'pending' ? (
          <a href="/console/inbox?kind=memory">Decide in the inbox</a>
        ) : m.status === 'active' ? (
          <form method="post" action={forget} hx-post={forget} hx-target={`#memory-${m.id}`} hx-swap="outerHTML">
            <button type="submit" aria-label={`Forget memory ${m.id}`}>
              Forget
            </button>
          </form>
        ) : (
          ''
        )}
        {props.note ? (
          <span role="status" class={props.note.error ? 'error' : undefined}>
            {props.note.text}
          </span>
        ) : (
          ''
        )}
      </td>
    </tr>
  );
}

function MemoriesTable(props: { rows: MemoryRow[]; runLink: (id?: string) => string | undefined }) {
  if (props.rows.length === 0) return <p>No pending or approved memories.</p>;
  return (
    <table class="memories">
      <caption>The newest pending and approved memories</caption>
      <thead>
        <tr>
          <th scope="col">Id</th>
          <th scope="col">Memory</th>
          <th scope="col">Kind, scope</th>
          <th scope="col">Status</th>
          <th scope="col">Provenance</th>
          <th scope="col">Action</th>
        </tr>
      </thead>
      <tbody>
        {props.rows.map((m) => (
          <MemoryRowView m={m} runLink={props.runLink(m.sessionId)} />
        ))}
      </tbody>
    </table>
  );
}

/** A server's tools: name, description, whether offered (or why not), approval policy, read-only mark. */
export function ToolsTable(props: { server: string; tools: McpToolView[] }) {
  if (props.tools.length === 0) return <p>{props.server} lists no tools.</p>;
  return (
    <table class="tools" data-server={props.server}>
      <caption>Tools of {props.server}</caption>
      <thead>
        <tr>
          <th scope="col">Tool</th>
          <th scope="col">Description</th>
          <th scope="col">Offered</th>
          <th scope="col">Approval</th>
          <th scope="col">Read-only</th>
        </tr>
      </thead>
      <tbody>
        {props.tools.map((t) => (
          <tr data-tool={t.name}>
            <td data-label="Tool">
              <code>{t.shown}</code>
            </td>
            <td data-label="Description">{t.description}</td>
            <td data-label="Offered">{t.offered ? 'yes' : `no: ${t.why ?? ''}`}</td>
            <td data-label="Approval">{t.approval}</td>
            <td data-label="Read-only">{t.readOnly ? 'read-only' : 'no'}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function McpServerCard(props: { s: McpServerView; lazyTools: boolean }) {
  const s = props.s;
  return (
    <article class="card" id={`mcp-${s.name}`}>
      <h3>
        <a href={mcpPath(s.name)}>{s.name}</a>
      </h3>
      <dl>
        <dt>Transport</dt>
        <dd>{s.transport}</dd>
        <dt>Registered by</dt>
        <dd>{s.source === 'config' ? 'the STEWARD_MCP_CONFIG file' : 'the API or CLI'}</dd>
        <dt>Enabled</dt>
        <dd>{s.enabled ? 'yes' : 'no'}</dd>
        <dt>State</dt>
        <dd data-field="state" class={s.state === 'down' ? 'error' : undefined}>
          {s.state} ({s.tools} tools) · checked {when(s.checkedAt)}
        </dd>
        <dt>Last error</dt>
        <dd class={s.lastError ? 'error' : undefined}>{s.lastError ?? 'none'}</dd>
      </dl>
      {props.lazyTools ? (
        <div class="tools-slot" hx-get={`${mcpPath(s.name)}/tools`} hx-trigger="load" hx-swap="innerHTML" aria-live="polite">
          <a href={mcpPath(s.name)}>The tools of {s.name}</a> (connects to the server)
        </div>
      ) : (
        ''
      )}
    </article>
  );
}

function HeartbeatTable(props: { parts: PartState[] }) {
  if (props.parts.length === 0) return <p>No parts checked yet.</p>;
  return (
    <table class="heartbeat">
      <caption>Each part's state and last success</caption>
      <thead>
        <tr>
          <th scope="col">Part</th>
          <th scope="col">State</th>
          <th scope="col">Since</th>
          <th scope="col">Last success</th>
          <th scope="col">Checked</th>
        </tr>
      </thead>
      <tbody>
        {props.parts.map((p) => (
          <tr data-part={p.part}>
            <td data-label="Part">{p.part}</td>
            <td data-label="State" class={p.state === 'ok' ? undefined : 'error'}>
              {p.state}
              {p.detail ? `: ${p.detail}` : ''}
            </td>
            <td data-label="Since">{when(p.since)}</td>
            <td data-label="Last success">{when(p.lastOkAt)}</td>
            <td data-label="Checked">{when(p.checkedAt)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

const off = (what: string) => <p>{what} are not enabled on this Steward.</p>;

/** A refusal where the action was: a fragment for htmx, a small page for a plain form. */
const refusal =
  (render: ConsolePageContext['render']) =>
  (c: Context, status: 400 | 404 | 409, message: string, back: string) =>
    fromHtmx(c)
      ? c.html(String(<span class="error">Refused: {message}</span>), status)
      : render(
          c,
          'Refused',
          'knowledge',
          <>
            <p class="error" role="alert">
              Refused: {message}
            </p>
            <p>
              <a href={back}>Back</a>
            </p>
          </>,
          status,
        );

type Services = NonNullable<ConsolePageContext['deps']['services']>;

/** A workspace's index state, or why it could not be read. */
const indexOf = (workspaces: NonNullable<Services['workspaces']>) => async (name: string): Promise<WorkspaceIndexState | { error: string }> => {
  const r = await attempt(() => workspaces.indexStatus(name));
  return r.ok ? r.value : { error: r.message };
};

export function addKnowledgeRoutes(app: Hono, ctx: ConsolePageContext): void {
  const { deps, render, runLink } = ctx;
  const services: Services = deps.services ?? {};
  const { workspaces, knowledge, mcp, heartbeat } = services;

  app.get('/console/knowledge', async (c) => {
    const [wsList, skills, memories, servers, parts] = await Promise.all([
      workspaces ? workspaces.list() : undefined,
      knowledge ? knowledge.skillsOf() : undefined,
      knowledge ? knowledge.recent(50) : undefined,
      mcp ? mcp.list() : undefined,
      heartbeat ? heartbeat.current() : undefined,
    ]);
    const states = wsList && workspaces ? await Promise.all(wsList.map((w) => indexOf(workspaces)(w.name))) : [];
    return render(
      c,
      'Knowledge and tools',
      'knowledge',
      <>
        <nav aria-label="On this page" class="toc">
          <ul>
            <li>
              <a href="#workspaces">Workspaces</a>
            </li>
            <li>
              <a href="#skills">Skills</a>
            </li>
            <li>
              <a href="#memories">Memories</a>
            </li>
            <li>
              <a href="#mcp">MCP servers</a>
            </li>
            <li>
              <a href="#heartbeat">Heartbeat</a>
            </li>
          </ul>
        </nav>
        <section aria-labelledby="workspaces">
          <h2 id="workspaces">Workspaces</h2>
          {!wsList ? (
            off('Workspaces')
          ) : wsList.length === 0 ? (
            <p>
              No workspaces. <code>/workspace create &lt;name&gt;</code> in a chat, <code>steward workspaces create</code> or <code>POST /api/v1/workspaces</code> makes one.
            </p>
          ) : (
            wsList.map((w, i) => (
              <article class="card" id={`ws-${w.name}`}>
                <h3>
                  <a href={wsPath(w.name)}>{w.name}</a>
                </h3>
                <p class="muted">
                  <code>{w.root}</code> · {w.chats} chat{w.chats === 1 ? '' : 's'}
                </p>
                <IndexState name={w.name} st={states[i]!} />
                <SearchForm name={w.name} />
                <div id={`hits-${w.name}`} aria-live="polite"></div>
                <ReindexForm name={w.name} />
              </article>
            ))
          )}
        </section>
        <section aria-labelledby="skills">
          <h2 id="skills">Skills</h2>
          {skills ? (
            <>
              <SkillsTable skills={skills.skills} caption="The operator's skills (a workspace's own are on its page)" />
              <Problems problems={skills.problems} />
            </>
          ) : (
            off('Skills')
          )}
        </section>
        <section aria-labelledby="memories">
          <h2 id="memories">Memories</h2>
          {memories ? (
            <>
              <p>
                Pending memories are decided in the <a href="/console/inbox?kind=memory">inbox</a>; an approved one is recalled until it is forgotten (all of them with their receipts as JSONL: <code>steward memories export</code>, <code>GET /api/v1/memories/export</code>).
              </p>
              <MemoriesTable rows={memories} runLink={runLink} />
            </>
          ) : (
            off('Memories')
          )}
        </section>
        <section aria-labelledby="mcp">
          <h2 id="mcp">MCP servers</h2>
          {!servers ? off('MCP servers') : servers.length === 0 ? <p>No MCP servers registered.</p> : servers.map((s) => <McpServerCard s={s} lazyTools={true} />)}
        </section>
        <section aria-labelledby="heartbeat">
          <h2 id="heartbeat">Heartbeat</h2>
          {parts ? <HeartbeatTable parts={parts} /> : off('Heartbeat checks')}
        </section>
      </>,
    );
  });

  addWorkspacePages(app, ctx, services);
  addMemoryActions(app, ctx, services);
  addMcpPages(app, ctx, services);
}

/** A workspace's page (index state, Reindex, a search, its skills) and its fragments. */
function addWorkspacePages(app: Hono, { render, actorOf }: ConsolePageContext, { workspaces, knowledge }: Services): void {
  const refused = refusal(render);
  const stateOf = workspaces ? indexOf(workspaces) : undefined;

  app.get('/console/knowledge/workspaces/:name', async (c) => {
    if (!workspaces) return render(c, 'Workspaces', 'knowledge', off('Workspaces'), 404);
    const name = WorkspaceNameSchema.safeParse(c.req.param('name'));
    if (!name.success) return render(c, 'No such workspace', 'knowledge', <p>{name.error.issues[0]?.message}</p>, 404);
    const ws = await attempt(() => workspaces.show(name.data));
    if (!ws.ok) return render(c, 'No such workspace', 'knowledge', <p>{ws.message}</p>, ws.status);
    const raw = c.req.query('q');
    const query = raw === undefined ? undefined : SearchQuery.safeParse({ q: raw, limit: c.req.query('limit') });
    const [st, skills, found] = await Promise.all([
      stateOf!(ws.value.name),
      knowledge ? attempt(() => knowledge.skillsOf(ws.value.name)) : undefined,
      query?.success ? attempt(() => workspaces.searchIn(ws.value.name, query.data.q, query.data.limit)) : undefined,
    ]);
    const n = ws.value.name;
    const status = query && !query.success ? 400 : found && !found.ok ? found.status : 200;
    return render(
      c,
      `Workspace ${n}`,
      'knowledge',
      <>
        <p>
          <a href="/console/knowledge#workspaces">All workspaces</a> · <code>{ws.value.root}</code>
        </p>
        <IndexState name={n} st={st} />
        <ReindexForm name={n} />
        <h2>Search</h2>
        <SearchForm name={n} query={raw ?? ''} />
        <div id={`hits-${n}`} aria-live="polite">
          {query && !query.success ? (
            <p class="error">{issues(query.error)}</p>
          ) : found ? (
            found.ok ? (
              <SearchResults workspace={n} query={query!.data!.q} hits={found.value.hits} />
            ) : (
              <p class="error">{found.message}</p>
            )
          ) : (
            ''
          )}
        </div>
        <h2>Skills of this workspace</h2>
        {skills === undefined ? (
          off('Skills')
        ) : skills.ok ? (
          <>
            <SkillsTable skills={skills.value.skills.filter((s) => s.source === 'workspace')} caption={`Skills in ${n}/skills (they win over the operator's of the same name)`} workspace={n} />
            <Problems problems={skills.value.problems} />
          </>
        ) : (
          <p class="error">{skills.message}</p>
        )}
      </>,
      status,
    );
  });

  app.get('/console/knowledge/workspaces/:name/search', async (c) => {
    if (!workspaces) return c.html(String(off('Workspaces')), 404);
    const name = WorkspaceNameSchema.safeParse(c.req.param('name'));
    if (!name.success) return c.html(String(<p class="error">{name.error.issues[0]?.message}</p>), 404);
    const query = SearchQuery.safeParse({ q: c.req.query('q') ?? '', limit: c.req.query('limit') });
    if (!fromHtmx(c)) {
      const qs = new URLSearchParams({ q: c.req.query('q') ?? '' });
      return c.redirect(`${wsPath(name.data)}?${qs.toString()}`, 303);
    }
    if (!query.success) return c.html(String(<p class="error">{issues(query.error)}</p>), 400);
    const found = await attempt(() => workspaces.searchIn(name.data, query.data.q, query.data.limit));
    if (!found.ok) return c.html(String(<p class="error">{found.message}</p>), found.status);
    return c.html(String(<SearchResults workspace={found.value.workspace} query={query.data.q} hits={found.value.hits} />));
  });

  app.get('/console/knowledge/workspaces/:name/state', async (c) => {
    if (!workspaces) return c.html(String(off('Workspaces')), 404);
    const name = WorkspaceNameSchema.safeParse(c.req.param('name'));
    if (!name.success) return c.html(String(<p class="error">{name.error.issues[0]?.message}</p>), 404);
    if (!fromHtmx(c)) return c.redirect(wsPath(name.data), 303);
    return c.html(String(<IndexState name={name.data} st={await stateOf!(name.data)} />));
  });

  app.post('/console/knowledge/workspaces/:name/reindex', async (c) => {
    const back = '/console/knowledge#workspaces';
    if (!workspaces) return refused(c, 409, 'workspaces are not enabled on this Steward', back);
    const name = WorkspaceNameSchema.safeParse(c.req.param('name'));
    if (!name.success) return refused(c, 404, name.error.issues[0]?.message ?? 'no such workspace', back);
    const r = await attempt(() => workspaces.reindexAs(name.data, actorOf(c)));
    if (!r.ok) return refused(c, r.status, r.message, wsPath(name.data));
    if (!fromHtmx(c)) return c.redirect(wsPath(name.data), 303);
    // the message, and the index state (out of band), which polls until the round is done
    const st = await stateOf!(name.data);
    return c.html(
      String(
        <>
          <span>Indexing {name.data} again.</span>
          <IndexState name={name.data} st={st} oob={true} />
        </>,
      ),
    );
  });

}

/** Forget an approved memory (the knowledge service's rules). */
function addMemoryActions(app: Hono, { render, actorOf, runLink }: ConsolePageContext, { knowledge }: Services): void {
  const refused = refusal(render);

  app.post('/console/knowledge/memories/:id/forget', async (c) => {
    const back = '/console/knowledge#memories';
    if (!knowledge) return refused(c, 409, 'memories are not enabled on this Steward', back);
    // the service checks the id (400), that it exists (404) and who may forget it
    const id = c.req.param('id').slice(0, 64);
    const r = await attempt(() => knowledge.forget(id, actorOf(c)));
    if (!fromHtmx(c)) return r.ok ? c.redirect(back, 303) : refused(c, r.status, r.message, back);
    if (r.ok) return c.html(String(<MemoryRowView m={r.value} runLink={runLink(r.value.sessionId)} note={{ text: 'Forgotten: no longer recalled.', error: false }} />));
    // the row as it is now, with the refusal in it
    const now = await attempt(() => knowledge.show(id));
    if (!now.ok) return c.html(String(<span class="error">Refused: {r.message}</span>), r.status);
    return c.html(String(<MemoryRowView m={now.value} runLink={runLink(now.value.sessionId)} note={{ text: `Refused: ${r.message}`, error: true }} />), r.status);
  });

}

/** An MCP server's page with its tools, and the tools fragment the overview loads. */
function addMcpPages(app: Hono, { render }: ConsolePageContext, { mcp }: Services): void {
  const toolsOf = async (name: string) => attempt(() => mcp!.tools(name));

  app.get('/console/knowledge/mcp/:name', async (c) => {
    if (!mcp) return render(c, 'MCP servers', 'knowledge', off('MCP servers'), 404);
    const name = McpServerNameSchema.safeParse(c.req.param('name'));
    if (!name.success) return render(c, 'No such MCP server', 'knowledge', <p>{name.error.issues[0]?.message}</p>, 404);
    const s = await attempt(() => mcp.show(name.data));
    if (!s.ok) return render(c, 'No such MCP server', 'knowledge', <p>{s.message}</p>, s.status);
    const tools = await toolsOf(name.data);
    return render(
      c,
      `MCP server ${name.data}`,
      'knowledge',
      <>
        <p>
          <a href="/console/knowledge#mcp">All MCP servers</a>
        </p>
        <McpServerCard s={s.value} lazyTools={false} />
        {tools.ok ? <ToolsTable server={tools.value.server} tools={tools.value.tools} /> : <p class="error">{tools.message}</p>}
      </>,
    );
  });

  app.get('/console/knowledge/mcp/:name/tools', async (c) => {
    if (!mcp) return c.html(String(off('MCP servers')), 404);
    const name = McpServerNameSchema.safeParse(c.req.param('name'));
    if (!name.success) return c.html(String(<p class="error">{name.error.issues[0]?.message}</p>), 404);
    if (!fromHtmx(c)) return c.redirect(mcpPath(name.data), 303);
    const tools = await toolsOf(name.data);
    if (!tools.ok) return c.html(String(<p class="error">{tools.message}</p>), tools.status);
    return c.html(String(<ToolsTable server={tools.value.server} tools={tools.value.tools} />));
  });
}
