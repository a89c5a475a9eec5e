/**
 * The Inbox page: everything waiting for a decision by the person signed in, newest first,
 * filterable by kind (a GET form), each item decided in place.
 *
 * Everything comes from the operator inbox service (services/decisions.ts, the one the API's
 * `/api/v1/inbox` routes and `steward inbox` call): the items, the text of an approval exactly as
 * the chat shows it, what this person may do with each (`actions`) and why not (`notes`), and
 * the decision itself, which that service hands to the service every other surface uses for the
 * kind (the approval's workflow update, pairing, memories, tasks). The page decides no rule: a
 * refusal is the service's, answered 409 (the rules), 400 (bad input) or 404 (no such item)
 * with its reason shown in the item. A decision by htmx answers the item's fragment (the decided
 * item, with who decided, when and how); a plain form POST is redirected back to the list.
 */
import type { Context, Hono } from 'hono';
import { z } from 'zod';
import { ROLES } from '../../common/roles.js';
import { INBOX_DECISIONS, INBOX_KINDS, InboxKindSchema, type InboxItem, type InboxKind } from '../../services/decisions.js';
import { ServiceInputError } from '../../services/requests.js';
import { CSRF_FIELD, csrfTokenOf } from './security.js';
import { fromHtmx, type ConsolePageContext } from './page.js';

type Decision = (typeof INBOX_DECISIONS)[number];

export const KIND_LABELS: Record<InboxKind, string> = {
  approval: 'Approval',
  change: 'Change to promote',
  pairing: 'Pairing request',
  memory: 'Memory',
  task: 'Task',
  mcp: 'MCP server down',
};
const KIND_FILTER_LABELS: Record<InboxKind, string> = {
  approval: 'Approvals',
  change: 'Changes waiting for promotion',
  pairing: 'Pairing requests',
  memory: 'Memories',
  task: 'Open tasks',
  mcp: 'MCP servers down',
};
const DECISION_LABELS: Record<Decision, string> = { approve: 'Approve', deny: 'Deny', reject: 'Reject', hand: 'Hand to the agent', close: 'Close' };

/** The form a decision comes in (the CSRF field is the guard's; the rest is the service's to judge). */
const DecisionForm = z.object({
  decision: z.string().max(32),
  reason: z.string().max(2000).optional(),
  role: z.string().max(32).optional(),
  code: z.string().max(64).optional(),
  back: z.string().max(32).optional(),
});

/** An item's element id (letters, digits, - and _ only). */
export const itemDomId = (id: string) => `item-${id.replace(/[^A-Za-z0-9_-]/g, '-')}`;
const decisionPath = (id: string) => `/console/inbox/${encodeURIComponent(id)}/decision`;
const listPath = (kind?: InboxKind) => (kind ? `/console/inbox?kind=${kind}` : '/console/inbox');

/** The line saying who decided, when and how. */
function DecidedLine(props: { d: NonNullable<InboxItem['decided']> }) {
  const { d } = props;
  return (
    <p class="decided">
      <strong>Decided:</strong> {d.how}
      {d.by ? ` by ${d.by}` : ''}
      {d.at ? (
        <>
          {' '}at <time datetime={d.at}>{d.at.replace('T', ' ').slice(0, 19)} UTC</time>
        </>
      ) : (
        ''
      )}
      {d.reason ? ` (reason: ${d.reason})` : ''}
    </p>
  );
}

function DecideForm(props: { item: InboxItem; csrf: string; back: InboxKind | undefined; titleId: string }) {
  const { item } = props;
  const path = decisionPath(item.id);
  const dom = itemDomId(item.id);
  const withReason = item.actions.includes('deny') && item.kind !== 'pairing' ? 'deny' : item.actions.includes('close') ? 'close' : undefined;
  return (
    <form method="post" action={path} hx-post={path} hx-target="closest li" hx-swap="outerHTML" class="decide">
      <input type="hidden" name={CSRF_FIELD} value={props.csrf} />
      {props.back ? <input type="hidden" name="back" value={props.back} /> : ''}
      {item.kind === 'pairing' ? (
        <>
          <label>
            The requester's code <input type="text" name="code" id={`${dom}-code`} required minlength={4} maxlength={32} autocomplete="off" spellcheck={false} />
          </label>
          {item.actions.includes('approve') ? (
            <label>
              Role to give{' '}
              <select name="role" id={`${dom}-role`}>
                {ROLES.map((r) => (
                  <option value={r} selected={r === 'member'}>
                    {r}
                  </option>
                ))}
              </select>
            </label>
          ) : (
            ''
          )}
        </>
      ) : (
        ''
      )}
      {withReason ? (
        <label>
          Reason (told with {withReason === 'deny' ? 'a denial' : 'the closing'}, optional) <input type="text" name="reason" id={`${dom}-reason`} maxlength={500} />
        </label>
      ) : (
        ''
      )}
      <div class="buttons">
        {item.actions.map((a) => (
          <button type="submit" name="decision" value={a} aria-describedby={props.titleId} data-decision={a}>
            {DECISION_LABELS[a]}
          </button>
        ))}
      </div>
    </form>
  );
}

/** One item, as listed and as answered after a decision (with the service's message or refusal). */
export function InboxEntry(props: { item: InboxItem; csrf: string; back?: InboxKind | undefined; message?: string | undefined; error?: string | undefined }) {
  const { item } = props;
  const dom = itemDomId(item.id);
  const titleId = `${dom}-title`;
  return (
    <li class="inbox-item" id={dom} data-id={item.id} data-kind={item.kind} data-status={item.status}>
      <article aria-labelledby={titleId}>
        <h2 id={titleId}>
          <span class="kind">{KIND_LABELS[item.kind]}</span> {item.title}
        </h2>
        <p class="meta">
          <time datetime={item.created}>{item.created.replace('T', ' ').slice(0, 19)} UTC</time>
          {item.askedBy ? ` · asked by ${item.askedBy}` : ''} · <span class="state">{item.status}</span>
        </p>
        {item.decided ? <DecidedLine d={item.decided} /> : ''}
        <pre class="request">{item.text}</pre>
        {item.notes.length > 0 ? (
          <ul class="notes">
            {item.notes.map((n) => (
              <li>{n}</li>
            ))}
          </ul>
        ) : (
          ''
        )}
        {item.kind === 'mcp' ? (
          <p>
            <a href="/console/knowledge">MCP servers and their tools on the Knowledge page</a>
          </p>
        ) : (
          ''
        )}
        {props.error ? (
          <p class="error" role="alert">
            Refused: {props.error}
          </p>
        ) : props.message ? (
          <p class="done" role="status">
            {props.message}
          </p>
        ) : (
          ''
        )}
        {item.actions.length > 0 ? <DecideForm item={item} csrf={props.csrf} back={props.back} titleId={titleId} /> : ''}
      </article>
    </li>
  );
}

/** The Inbox page: the list, filterable by kind; a decision per item in place. */
export function addInboxRoutes(app: Hono, { deps, render, actorOf }: ConsolePageContext): void {
  const inbox = deps.services?.inbox;
  const csrfOf = (c: Context) => csrfTokenOf(c, deps.apiToken);
  const kindOf = (raw: string | undefined): InboxKind | undefined => {
    const k = InboxKindSchema.safeParse(raw);
    return k.success ? k.data : undefined;
  };

  /** The whole page; `refusal`: a plain form's decision refused, shown above the list with its status. */
  const page = async (c: Context, rawKind: string | undefined, refusal?: { id: string; status: 400 | 404 | 409; message: string }) => {
    if (!inbox) return render(c, 'Inbox', 'inbox', <p>The inbox is not enabled on this Steward process.</p>);
    const kind = kindOf(rawKind);
    const bad = rawKind !== undefined && rawKind !== '' && kind === undefined;
    let items: InboxItem[] = [];
    let error: string | undefined = bad ? `There is no kind "${rawKind}": choose one of the list.` : undefined;
    if (!bad) {
      try {
        items = await inbox.list(actorOf(c), kind ? { kind } : {});
      } catch (err) {
        if (!(err instanceof ServiceInputError)) throw err;
        error = err.message;
      }
    }
    const waiting = items.filter((i) => i.decided === null).length;
    const csrf = csrfOf(c);
    return render(
      c,
      'Inbox',
      'inbox',
      <>
        <form method="get" action="/console/inbox" class="controls">
          <label>
            Show{' '}
            <select name="kind" id="inbox-kind">
              <option value="" selected={kind === undefined}>
                Everything
              </option>
              {INBOX_KINDS.map((k) => (
                <option value={k} selected={kind === k}>
                  {KIND_FILTER_LABELS[k]}
                </option>
              ))}
            </select>
          </label>
          <button type="submit">Filter</button>
        </form>
        {refusal ? (
          <p class="error" role="alert" id="inbox-refusal">
            Refused: {refusal.message}
          </p>
        ) : (
          ''
        )}
        {error ? (
          <p class="error" role="alert">
            {error}
          </p>
        ) : (
          <p id="inbox-count" role="status">
            {waiting === 0 ? 'Nothing waits for a decision' : `${waiting} waiting for a decision`}
            {items.length > waiting ? `; ${items.length - waiting} decided in the last day` : ''}. Newest first.
          </p>
        )}
        {items.length > 0 ? (
          <ol class="inbox" id="inbox-items">
            {items.map((i) => (
              <InboxEntry item={i} csrf={csrf} back={kind} error={refusal?.id === i.id ? refusal.message : undefined} />
            ))}
          </ol>
        ) : (
          ''
        )}
      </>,
      refusal?.status ?? (error ? 400 : 200),
    );
  };

  app.get('/console/inbox', (c) => page(c, c.req.query('kind')));

  app.post('/console/inbox/:id/decision', async (c) => {
    const id = c.req.param('id');
    const htmx = fromHtmx(c);
    const answerRefusal = async (status: 400 | 404 | 409, message: string, back?: InboxKind) => {
      if (!htmx) return page(c, back, { id, status, message });
      const current = inbox ? await inbox.item(id, actorOf(c)).catch(() => null) : null;
      if (!current)
        return c.html(
          String(
            <li class="inbox-item">
              <p class="error" role="alert">
                Refused: {message}
              </p>
            </li>,
          ),
          status,
        );
      return c.html(String(<InboxEntry item={current} csrf={csrfOf(c)} back={back} error={message} />), status);
    };
    if (!inbox) return answerRefusal(404, 'the inbox is not enabled on this Steward process');
    const form = DecisionForm.safeParse(await c.req.parseBody());
    if (!form.success) return answerRefusal(400, `invalid decision: ${form.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
    const f = form.data;
    const back = kindOf(f.back);
    const nonEmpty = (v: string | undefined) => (v !== undefined && v.trim() !== '' ? v.trim() : undefined);
    const reason = f.decision === 'deny' || f.decision === 'close' ? nonEmpty(f.reason) : undefined;
    const role = f.decision === 'approve' ? nonEmpty(f.role) : undefined;
    const code = nonEmpty(f.code);
    const decision = { decision: f.decision, ...(reason ? { reason } : {}), ...(role ? { role } : {}), ...(code ? { code } : {}) };
    let result;
    try {
      result = await inbox.decide(actorOf(c), id, decision);
    } catch (err) {
      if (!(err instanceof ServiceInputError)) throw err;
      return answerRefusal(err.status, err.message, back);
    }
    if (!htmx) return c.redirect(`${listPath(back)}#${itemDomId(result.item?.id ?? id)}`, 303);
    if (!result.item)
      return c.html(
        String(
          <li class="inbox-item">
            <p class="done" role="status">
              {result.message}
            </p>
          </li>,
        ),
      );
    return c.html(String(<InboxEntry item={result.item} csrf={csrfOf(c)} back={back} message={result.message} />));
  });
}
