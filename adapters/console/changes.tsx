/**
 * The Repository changes page: the changes newest first (filtered by state), and one change with
 * its phase timeline (from its receipts), task draft, plan, gate verdict with every check and
 * finding, the patch drawn as a diff (diff.tsx), the draft PR, its run in the Temporal UI, and
 * its clarifying question answered in place.
 *
 * Everything is read from and done through the change service (services/changes.ts), the one the
 * API, the CLI and chat use: the answer is its `answer` (the workflow's update, whose validator
 * refuses an answer when no question is open; the command table's role), refusals shown in
 * place with their reason (409). A change waiting for promotion approval links to its inbox
 * item: the decision is the inbox's. While a change runs, its page asks every 2 s whether it
 * moved (`/live?v=`: 204 when not) and redraws it when it did.
 */
import type { Context, Hono } from 'hono';
import type { Child } from 'hono/jsx';
import { z } from 'zod';
import type { GateVerdict, Plan, TaskDraft } from '../../common/changes.js';
import { ChangeInputError, type ChangeEvent, type ChangeListFilter, type ChangeService, type ChangeView } from '../../services/changes.js';
import { DiffView, readDiff } from './diff.js';
import { fromHtmx, type ConsolePageContext } from './page.js';
import { CSRF_FIELD, csrfTokenOf } from './security.js';

const ChangeId = z.string().regex(/^chg-[a-f0-9]{12}$/);

/** The list's state filter: a change's status, or a running change's waiting phase. */
const STATES: Record<string, { label: string; filter: ChangeListFilter }> = {
  all: { label: 'All', filter: {} },
  running: { label: 'Running', filter: { status: 'running' } },
  'needs-answer': { label: 'Waiting for an answer', filter: { status: 'running', phase: 'clarify' } },
  'needs-approval': { label: 'Waiting for promotion approval', filter: { status: 'running', phase: 'approval' } },
  done: { label: 'Done', filter: { status: 'done' } },
  failed: { label: 'Failed', filter: { status: 'failed' } },
  refused: { label: 'Refused', filter: { status: 'refused' } },
  cancelled: { label: 'Cancelled', filter: { status: 'cancelled' } },
};
const ListQuery = z.object({ state: z.enum(Object.keys(STATES) as [string, ...string[]], { error: 'not a state this page filters by' }).default('all') });
const AnswerForm = z.object({ text: z.string().trim().min(1, 'write an answer first').max(4000, 'an answer has at most 4000 characters') });

const PHASE_TEXT: Record<string, string> = {
  intake: 'intake',
  clarify: 'waiting for an answer',
  plan: 'planning',
  work: 'agent at work',
  validate: 'validation gate',
  approval: 'waiting for promotion approval',
  promote: 'promoting',
  done: 'done',
};

/** Where a change stands, in words: a running change's phase, or how it ended (and where). */
export function stateText(c: Pick<ChangeView, 'status' | 'phase'>): string {
  if (c.status === 'running') return PHASE_TEXT[c.phase] ?? c.phase;
  if (c.status === 'done') return 'done';
  return `${c.status} at ${PHASE_TEXT[c.phase] ?? c.phase}`;
}

/** How long ago, in words. */
export function ago(iso: string, now = Date.now()): string {
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86_400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86_400)} d ago`;
}

const str = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);
const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
const plural = (n: number, one: string) => `${n} ${one}${n === 1 ? '' : 's'}`;
const strs = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : []);

/** One receipt of the change as a timeline entry: the stage, and what it recorded. */
export function eventText(e: ChangeEvent): { stage: string; detail: string } {
  const d = e.data;
  switch (e.kind) {
    case 'change.start':
      return { stage: 'Requested', detail: `from ${str(d.from) ?? 'the API'}${str(d.base) ? `, base ${str(d.base)}` : ''}` };
    case 'change.intake':
      return { stage: 'Intake', detail: `task draft ${str(d.status)?.replace(/_/g, ' ') ?? 'made'}${str(d.question) ? `; question: ${str(d.question)}` : ''}` };
    case 'change.question':
      return { stage: 'Clarifying question', detail: str(d.question) ?? '' };
    case 'change.answer':
      return { stage: 'Answered', detail: `by ${e.actor ?? 'someone'} (${num(d.chars) ?? 0} characters)` };
    case 'change.plan':
      return { stage: 'Plan', detail: plural(num(d.steps) ?? 0, 'step') };
    case 'change.steer':
      return { stage: 'Steered', detail: `by ${e.actor ?? 'someone'}` };
    case 'change.work': {
      const blocked = num(d.blocked) ?? 0;
      return { stage: 'Agent run', detail: `${plural(num(d.files) ?? 0, 'file')} changed in ${plural(num(d.steps) ?? 0, 'step')}${d.finished === false ? ', stopped before it finished' : ''}${blocked ? `, ${blocked} commands refused by the sandbox` : ''}` };
    }
    case 'sandbox.blocked':
      return { stage: 'Sandbox refused', detail: str(d.reason) ?? str(d.detail) ?? str(d.command) ?? '' };
    case 'gate.verdict': {
      const reasons = strs(d.reasons);
      return { stage: d.revalidation === true ? 'Gate (base moved: validated again)' : 'Validation gate', detail: `${str(d.verdict) ?? '?'}${reasons.length ? `: ${reasons.join('; ')}` : ''}` };
    }
    case 'approval.requested':
      return { stage: 'Approval asked', detail: `${str(d.approvalId) ?? ''}${str(d.deadline) ? `, denied if nobody decides by ${str(d.deadline)}` : ''}` };
    case 'approval.decision':
      return { stage: 'Approval', detail: `${str(d.decision) ?? '?'}${str(d.by) ? ` by ${str(d.by)}` : ''}${str(d.reason) ? `: ${str(d.reason)}` : ''}` };
    case 'promotion':
      return str(d.refused)
        ? { stage: 'Promotion refused', detail: str(d.refused) ?? '' }
        : { stage: 'Promotion', detail: `${str(d.kind) === 'draft-pr' ? 'draft PR' : 'patch artifact'}${str(d.pr) ? ` ${str(d.pr)}` : ''}${d.revalidated === true ? ' (validated again on the moved base)' : ''}` };
    case 'change.end':
      return { stage: 'Ended', detail: `${str(d.status) ?? '?'}${str(d.reason) ? `: ${str(d.reason)}` : ''}` };
  }
}

function List(props: { title: string; items: readonly string[] }) {
  if (props.items.length === 0) return '';
  return (
    <>
      <dt>{props.title}</dt>
      <dd>
        {props.items.length === 1 ? (
          props.items[0]
        ) : (
          <ul>
            {props.items.map((i) => (
              <li>{i}</li>
            ))}
          </ul>
        )}
      </dd>
    </>
  );
}

function Draft(props: { d: TaskDraft }) {
  const d = props.d;
  return (
    <section aria-labelledby="h-draft">
      <h2 id="h-draft">Task draft</h2>
      <dl class="facts">
        <dt>Goal</dt>
        <dd>{d.goal}</dd>
        <dt>Intent</dt>
        <dd>
          {d.intent} ({d.mode}){d.derived?.risk_level ? `, risk ${d.derived.risk_level}` : ''}
        </dd>
        <List title="Scope" items={d.scope} />
        <List title="Acceptance" items={d.acceptance} />
        <List title="Constraints" items={d.constraints} />
        <List title="Assumptions" items={d.assumptions} />
        <List title="Open questions" items={d.open_questions} />
        <List title="Risk signals" items={d.risk_signals} />
      </dl>
    </section>
  );
}

function PlanView(props: { p: Plan }) {
  const p = props.p;
  return (
    <section aria-labelledby="h-plan">
      <h2 id="h-plan">Plan</h2>
      <p class="prose">{p.summary}</p>
      <ol>
        {p.steps.map((s) => (
          <li class="prose">{s}</li>
        ))}
      </ol>
      <dl class="facts">
        <List title="Files" items={p.files} />
        <List title="Checks" items={p.checks} />
      </dl>
    </section>
  );
}

function Verdict(props: { v: GateVerdict }) {
  const v = props.v;
  return (
    <section aria-labelledby="h-gate">
      <h2 id="h-gate">Gate verdict</h2>
      <p>
        <span class={`verdict verdict-${v.verdict}`}>{v.verdict === 'pass' ? 'Pass' : 'Fail'}</span> · {plural(v.stats.files, 'file')}, +{v.stats.additions} −{v.stats.deletions} · base <code>{v.baseSha.slice(0, 12)}</code> · promotion{' '}
        {v.promotion}
        {v.forbidSelfApproval ? ' (the requester may not approve)' : ''} · <time datetime={v.at}>{v.at}</time>
      </p>
      {v.reasons.length ? (
        <ul class="reasons">
          {v.reasons.map((r) => (
            <li>{r}</li>
          ))}
        </ul>
      ) : (
        ''
      )}
      <h3>Checks</h3>
      {v.checks.length === 0 ? (
        <p>The repository has no checks registered.</p>
      ) : (
        <ul class="checks">
          {v.checks.map((ch) => (
            <li>
              <span class={`verdict verdict-${ch.passed ? 'pass' : 'fail'}`}>{ch.passed ? 'passed' : 'failed'}</span> <strong>{ch.name}</strong> <code>{ch.argv.join(' ')}</code> · exit {ch.exitCode ?? 'none'}
              {ch.timedOut ? ' · timed out' : ''} · {(ch.durationMs / 1000).toFixed(1)} s
              {ch.outputTail ? (
                <details>
                  <summary>Output (last part)</summary>
                  <pre class="output">{ch.outputTail}</pre>
                </details>
              ) : (
                ''
              )}
            </li>
          ))}
        </ul>
      )}
      <h3>Policy findings</h3>
      {v.violations.length === 0 ? (
        <p>None.</p>
      ) : (
        <table class="findings">
          <caption class="vh">Policy findings</caption>
          <thead>
            <tr>
              <th scope="col">Rule</th>
              <th scope="col">Path</th>
              <th scope="col">Finding</th>
            </tr>
          </thead>
          <tbody>
            {v.violations.map((f) => (
              <tr>
                <td>{f.rule}</td>
                <td>{f.path ?? ''}</td>
                <td>{f.detail}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

function Timeline(props: { events: ChangeEvent[] }) {
  return (
    <section aria-labelledby="h-timeline">
      <h2 id="h-timeline">Timeline</h2>
      {props.events.length === 0 ? (
        <p>Nothing recorded yet.</p>
      ) : (
        <ol class="timeline" id="timeline">
          {props.events.map((e) => {
            const t = eventText(e);
            return (
              <li data-kind={e.kind}>
                <time datetime={e.at}>{e.at.replace('T', ' ').slice(0, 19)}</time> <strong>{t.stage}</strong>
                {t.detail ? ` ${t.detail}` : ''}
              </li>
            );
          })}
        </ol>
      )}
    </section>
  );
}

/** The change's live part: redrawn (outerHTML) when it moved, asked every 2 s while it runs. */
function ChangeBody(props: { c: ChangeView; events: ChangeEvent[]; patch: string | undefined; csrf: string; runHref: string | undefined; answer?: { text: string; error: boolean } | undefined }) {
  const { c, events } = props;
  const base = `/console/changes/${c.id}`;
  const running = c.status === 'running';
  const stamp = versionOf(c, events);
  const waitsForAnswer = running && c.phase === 'clarify' && c.question;
  return (
    <div id="change" data-version={stamp} {...(running ? { 'hx-get': `${base}/live?v=${encodeURIComponent(stamp)}`, 'hx-trigger': 'every 2s', 'hx-swap': 'outerHTML' } : {})}>
      <dl class="facts">
        <dt>State</dt>
        <dd id="state" data-status={c.status} data-phase={c.phase}>
          {stateText(c)}
        </dd>
        <dt>Repository</dt>
        <dd>
          {c.repo} · base {c.base}
          {c.baseSha ? (
            <>
              {' '}
              at <code>{c.baseSha.slice(0, 12)}</code>
            </>
          ) : (
            ''
          )}
        </dd>
        <dt>Requested by</dt>
        <dd>
          {c.requestedBy}, <time datetime={c.createdAt}>{ago(c.createdAt)}</time>
        </dd>
        <dt>Request</dt>
        <dd class="prose">{c.request}</dd>
        {c.error ? (
          <>
            <dt>Why it stopped</dt>
            <dd class="error prose">{c.error}</dd>
          </>
        ) : (
          ''
        )}
        <dt>Links</dt>
        <dd>
          <ul class="links">
            {props.runHref ? (
              <li>
                <a href={props.runHref}>Its run in the Temporal UI</a>
              </li>
            ) : (
              ''
            )}
            {c.result?.pr ? (
              <li>
                <a href={c.result.pr.url} id="pr-link">
                  Draft pull request #{c.result.pr.number}
                </a>{' '}
                (branch <code>{c.result.pr.branch}</code>)
              </li>
            ) : (
              ''
            )}
            {c.patchHash ? (
              <li>
                <a href={`${base}/patch`}>{c.result ? 'The patch artifact' : 'The raw patch (not promoted)'}</a>
              </li>
            ) : (
              ''
            )}
          </ul>
        </dd>
      </dl>

      {waitsForAnswer ? (
        <section aria-labelledby="h-question" class="callout">
          <h2 id="h-question">A question for you</h2>
          <p class="prose" id="question">
            {c.question}
          </p>
          <form id="answer-form" method="post" action={`${base}/answer`} hx-post={`${base}/answer`} hx-target="#answer-result" hx-swap="innerHTML" hx-preserve="true">
            <input type="hidden" name={CSRF_FIELD} value={props.csrf} />
            <label for="answer-text">Your answer</label>
            <textarea id="answer-text" name="text" required maxlength={4000} rows={3}></textarea>
            <button type="submit">Answer</button>
            <p id="answer-result" role="status" aria-live="polite">
              {props.answer ? <span class={props.answer.error ? 'error' : undefined}>{props.answer.text}</span> : ''}
            </p>
          </form>
        </section>
      ) : props.answer ? (
        <p id="answer-result" role="status" class={props.answer.error ? 'error' : undefined}>
          {props.answer.text}
        </p>
      ) : (
        ''
      )}
      {running && c.phase === 'approval' ? (
        <p class="callout" id="approval-wait">
          This change passed the gate and waits for an admin to approve its promotion. Decide it in the <a href="/console/inbox?kind=change">inbox</a>.
        </p>
      ) : (
        ''
      )}

      <Timeline events={events} />
      {c.draft ? <Draft d={c.draft} /> : ''}
      {c.plan ? <PlanView p={c.plan} /> : ''}
      {c.verdict ? <Verdict v={c.verdict} /> : ''}
      {c.report ? (
        <section aria-labelledby="h-report">
          <h2 id="h-report">Report</h2>
          <p class="prose">{c.report.conclusion}</p>
          <dl class="facts">
            <List title="Files changed" items={c.report.actual_scope} />
            <List title="Remaining risks" items={c.report.remaining_risks} />
            <List title="Next steps" items={c.report.next_steps} />
          </dl>
        </section>
      ) : (
        ''
      )}
      <section aria-labelledby="h-diff">
        <h2 id="h-diff">Patch</h2>
        {props.patch !== undefined ? <DiffView diff={readDiff(props.patch)} rawHref={`${base}/patch`} /> : <p>No patch yet{running ? ': the agent has not produced one.' : '.'}</p>}
      </section>
    </div>
  );
}

/** What changes when a change moves on: its row and its receipts. */
function versionOf(c: ChangeView, events: ChangeEvent[]): string {
  return `${c.updatedAt}/${events.length}`;
}

export function addChangeRoutes(app: Hono, { deps, render, actorOf, runLink }: ConsolePageContext): void {
  const service = (): ChangeService | undefined => deps.services?.changes;
  const off = (c: Context) => render(c, 'Repository changes', 'changes', <p>Repository changes are not served by this process (it has no change service).</p>);

  app.get('/console/changes', async (c) => {
    const changes = service();
    if (!changes) return off(c);
    const q = ListQuery.safeParse({ state: c.req.query('state') || undefined });
    const state = q.success ? q.data.state : 'all';
    const list = q.success ? await changes.listChanges({ ...STATES[state]!.filter, limit: 100 }) : [];
    const now = Date.now();
    return render(
      c,
      'Repository changes',
      'changes',
      <>
        <form method="get" action="/console/changes" class="controls">
          <label for="state-filter">State</label>
          <select id="state-filter" name="state">
            {Object.entries(STATES).map(([k, v]) => (
              <option value={k} selected={k === state}>
                {v.label}
              </option>
            ))}
          </select>
          <button type="submit">Filter</button>
        </form>
        {!q.success ? (
          <p class="error" role="alert">
            {q.error.issues[0]?.message ?? 'bad filter'}
          </p>
        ) : list.length === 0 ? (
          <p>No changes{state === 'all' ? ' yet' : ' in this state'}.</p>
        ) : (
          <table class="changes">
            <caption>{state === 'all' ? 'Changes, newest first' : `${STATES[state]!.label}: changes, newest first`}</caption>
            <thead>
              <tr>
                <th scope="col">Change</th>
                <th scope="col">Repository</th>
                <th scope="col">State</th>
                <th scope="col">Requested by</th>
                <th scope="col">Age</th>
              </tr>
            </thead>
            <tbody>
              {list.map((ch) => (
                <tr data-status={ch.status}>
                  <td>
                    <a href={`/console/changes/${ch.id}`}>{ch.id}</a>
                    <div class="request">{ch.request.length > 120 ? `${ch.request.slice(0, 119)}…` : ch.request}</div>
                  </td>
                  <td>{ch.repo}</td>
                  <td>{stateText(ch)}</td>
                  <td>{ch.requestedBy}</td>
                  <td>
                    <time datetime={ch.createdAt} title={ch.createdAt}>
                      {ago(ch.createdAt, now)}
                    </time>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </>,
      q.success ? 200 : 400,
    );
  });

  /** Everything the change's body draws (the patch left unread when the change is still at version `unless`). */
  const load = async (changes: ChangeService, id: string, unless?: string) => {
    const [view, events] = await Promise.all([changes.getChange(id), changes.events(id)]);
    if (!view) return undefined;
    const version = versionOf(view, events ?? []);
    if (version === unless) return { view, events: events ?? [], patch: undefined, unchanged: true };
    const patch = view.patchHash ? (await changes.getPatch(id))?.patch : undefined;
    return { view, events: events ?? [], patch, unchanged: false };
  };

  const detail = async (c: Context, id: string, answer?: { text: string; error: boolean }, status: 200 | 400 | 404 | 409 = 200) => {
    const changes = service();
    if (!changes) return off(c);
    const got = await load(changes, id);
    if (!got) return render(c, 'No such change', 'changes', <p>There is no change {id}. <a href="/console/changes">All changes</a></p>, 404);
    const body: Child = (
      <>
        <p>
          <a href="/console/changes">All changes</a>
        </p>
        <ChangeBody c={got.view} events={got.events} patch={got.patch} csrf={csrfTokenOf(c, deps.apiToken)} runHref={runLink(got.view.workflowId) ?? got.view.runUrl ?? undefined} answer={answer} />
      </>
    );
    return render(c, `Change ${id}`, 'changes', body, status, got.view.workflowId);
  };

  app.get('/console/changes/:id', async (c) => {
    const id = ChangeId.safeParse(c.req.param('id'));
    if (!id.success) return render(c, 'No such change', 'changes', <p>A change id looks like chg-0123456789ab. <a href="/console/changes">All changes</a></p>, 404);
    return detail(c, id.data);
  });

  // the live part, when it moved since version `v` (204: it did not)
  app.get('/console/changes/:id/live', async (c) => {
    const changes = service();
    const id = ChangeId.safeParse(c.req.param('id'));
    if (!changes || !id.success) return c.text('no such change', 404);
    const got = await load(changes, id.data, c.req.query('v'));
    if (!got) return c.text('no such change', 404);
    if (got.unchanged) return c.body(null, 204);
    return c.html(String(<ChangeBody c={got.view} events={got.events} patch={got.patch} csrf={csrfTokenOf(c, deps.apiToken)} runHref={runLink(got.view.workflowId) ?? got.view.runUrl ?? undefined} />));
  });

  // the raw patch, as the API's artifact route serves it (a download; the page says when it was not promoted)
  app.get('/console/changes/:id/patch', async (c) => {
    const changes = service();
    const id = ChangeId.safeParse(c.req.param('id'));
    if (!changes || !id.success) return c.text('no such change', 404);
    const p = await changes.getPatch(id.data);
    if (!p) return c.text('no patch for this change (no such change, or its agent has not produced one)', 404);
    return c.body(p.patch, 200, {
      'content-type': 'text/x-diff; charset=utf-8',
      'content-disposition': `attachment; filename="${id.data}.patch"`,
      'x-content-sha256': p.hash,
      'x-steward-change-status': p.status,
      'x-steward-gate-verdict': p.verdict ?? 'none',
      'x-steward-promoted': String(p.promoted),
    });
  });

  app.post('/console/changes/:id/answer', async (c) => {
    const changes = service();
    const id = ChangeId.safeParse(c.req.param('id'));
    if (!changes || !id.success) return c.text('no such change', 404);
    const answered = (text: string, status: 200 | 400 | 404 | 409) =>
      fromHtmx(c) ? c.html(String(<span class={status === 200 ? undefined : 'error'}>{text}</span>), status) : status === 200 ? c.redirect(`/console/changes/${id.data}`, 303) : detail(c, id.data, { text, error: true }, status);
    const form = AnswerForm.safeParse(await c.req.parseBody());
    if (!form.success) return answered(form.error.issues.map((i) => i.message).join('; '), 400);
    const actor = actorOf(c);
    try {
      const message = await changes.answer(id.data, { text: form.data.text }, { id: actor.id, name: actor.name, ...(actor.kind === 'person' ? { role: actor.role } : {}) });
      return answered(message, 200);
    } catch (err) {
      if (err instanceof ChangeInputError) return answered(`Refused: ${err.message}`, err.status);
      throw err;
    }
  });
}
