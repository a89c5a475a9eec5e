/**
 * The Budgets and receipts page.
 *
 * `/console/budgets`: every budget with its current period's usage (the budget service's `list`,
 * services/budgets.ts: what `GET /api/v1/budgets` and `steward budgets` show): scope, limit,
 * period and renewal, used, reserved, raised, what is left (a meter with its text), and a Raise
 * form for the current period. A raise goes through `budgets.raise` with the person signed in
 * (`ctx.actorOf`): the service applies the rules (admins only, no self-raise, the period the page
 * showed) and its refusal is shown in place (409), a bad amount 400.
 *
 * `/console/receipts`: the receipts of a chat, a person or a change (and a kind and a time
 * window), newest first, a page at a time with the cursor of the next page, each masked as every
 * view masks them (domain/receipts.ts masks every held secret on the way out);
 * `/console/receipts/export` streams the same filter as JSONL: the rows `steward receipts
 * export` writes, from the same code (services/receipts.ts).
 */
import type { Context, Hono } from 'hono';
import { z } from 'zod';
import { formatMoney } from '../../domain/budgets/prices.js';
import type { BudgetService, BudgetView } from '../../services/budgets.js';
import { ExportArgsSchema, PAGE_MAX, type ExportArgs, type ReceiptService } from '../../services/receipts.js';
import { ServiceInputError } from '../../services/requests.js';
import type { ReceiptRecord } from '../../domain/receipts.js';
import { fromHtmx, type ConsolePageContext } from './page.js';

/** Receipts per page unless `size` says fewer (at most PAGE_MAX). */
const PAGE_SIZE = 50;

const money = (usd: number) => formatMoney(Math.round(usd * 1_000_000));
const tokens = (n: number) => `${n.toLocaleString('en-US')} tokens`;
/** An id for the budget's section that any budget id gives safely. */
const cardId = (id: string) => `budget-${Buffer.from(id, 'utf8').toString('hex')}`;

/** The Raise form's fields (text from a form: empty means not given). */
const blankToUndefined = (v: unknown) => (typeof v === 'string' && v.trim() === '' ? undefined : v);
const RaiseForm = z
  .object({
    budgetId: z.string().trim().min(1, 'which budget').max(200),
    periodStart: z.preprocess(blankToUndefined, z.iso.datetime({ message: 'periodStart: an ISO time' }).optional()),
    tokens: z.preprocess(blankToUndefined, z.coerce.number({ message: 'tokens: a whole number' }).int('tokens: a whole number').min(1, 'tokens: at least 1').max(1e12, 'tokens: too many').optional()),
    money: z.preprocess(blankToUndefined, z.coerce.number({ message: 'USD: a number' }).positive('USD: more than 0').max(1e9, 'USD: too much').optional()),
  })
  .refine((f) => f.tokens !== undefined || f.money !== undefined, { message: 'Give tokens, USD or both.' });

/** The receipts filter's fields, as the CLI's flags are named. */
const FILTER_FIELDS = ['chat', 'person', 'change', 'kind', 'since', 'until'] as const;
type FilterText = Partial<Record<(typeof FILTER_FIELDS)[number], string>>;
const PageArgs = z.object({
  before: z.preprocess(blankToUndefined, z.coerce.number().int().min(1).optional()),
  size: z.preprocess(blankToUndefined, z.coerce.number().int().min(1).max(PAGE_MAX).optional()),
});

/** The filter as the request gives it (empty fields dropped), and as parsed; errors when it is bad. */
function filterOf(c: Context): { text: FilterText; args?: ExportArgs; errors?: string[] } {
  const text: FilterText = {};
  for (const f of FILTER_FIELDS) {
    const v = c.req.query(f)?.trim();
    if (v) text[f] = v;
  }
  const r = ExportArgsSchema.safeParse(text);
  return r.success ? { text, args: r.data } : { text, errors: r.error.issues.map((i) => i.message.replace(/^--/, '')) };
}

const queryString = (text: FilterText, extra: Record<string, string> = {}) => new URLSearchParams({ ...text, ...extra }).toString();

function Meter(props: { id: string; unit: 'tokens' | 'USD'; limit: number; raised: number; used: number; reserved: number; left: number }) {
  const cap = props.limit + props.raised;
  const taken = props.used + props.reserved;
  const show = props.unit === 'tokens' ? tokens : money;
  const pct = cap > 0 ? Math.min(100, Math.round((taken / cap) * 100)) : 100;
  return (
    <div class="meter">
      <meter id={`${props.id}-m`} min={0} max={cap} value={Math.min(taken, cap)} low={cap * 0.75} high={cap * 0.9} optimum={0} aria-labelledby={`${props.id}-t`}></meter>
      <span id={`${props.id}-t`}>
        {props.unit}: {show(taken)} of {show(cap)} taken ({pct}%), {show(props.left)} left
      </span>
    </div>
  );
}

/** One budget: what it limits, its period's usage, and the Raise form (its answer shown inside it). */
export function BudgetCard(props: { b: BudgetView; message?: { text: string; error: boolean } }) {
  const { b } = props;
  const u = b.usage;
  const id = cardId(b.id);
  const limit = [b.tokens === null ? undefined : tokens(b.tokens), b.money === null ? undefined : money(b.money)].filter(Boolean).join(' and ') || 'nothing';
  const per = b.period === 'none' ? 'in total' : b.period === 'window' ? `per ${u.period}` : `per ${b.period}`;
  return (
    <section class="budget" id={id} aria-labelledby={`${id}-h`}>
      <h2 id={`${id}-h`}>{b.id}</h2>
      <dl>
        <dt>Scope</dt>
        <dd>
          {b.scope}
          {b.scopeId ? <> · {b.scopeId}</> : null}
          {b.scope === 'person' && b.scopeId ? (
            <>
              {' '}
              · <a href={`/console/receipts?${new URLSearchParams({ person: b.scopeId }).toString()}`}>their receipts</a>
            </>
          ) : null}
        </dd>
        <dt>Limit</dt>
        <dd>
          {limit} {per}
        </dd>
        <dt>Period</dt>
        <dd>
          {u.period}, since <time datetime={u.periodStart}>{u.periodStart.slice(0, 16).replace('T', ' ')} UTC</time>
          {u.renews ? <> · renews {u.renews}</> : ' · does not renew'}
        </dd>
        <dt>Used</dt>
        <dd>{[b.tokens === null ? undefined : tokens(u.used.tokens), b.money === null ? undefined : money(u.used.money)].filter(Boolean).join(' · ')}</dd>
        <dt>Reserved</dt>
        <dd>{[b.tokens === null ? undefined : tokens(u.reserved.tokens), b.money === null ? undefined : money(u.reserved.money)].filter(Boolean).join(' · ')}</dd>
        <dt>Raised this period</dt>
        <dd>{[b.tokens === null ? undefined : tokens(u.raised.tokens), b.money === null ? undefined : money(u.raised.money)].filter(Boolean).join(' · ')}</dd>
        <dt>Left</dt>
        <dd class="left">{[u.left.tokens === null ? undefined : tokens(u.left.tokens), u.left.money === null ? undefined : money(u.left.money)].filter(Boolean).join(' · ')}</dd>
      </dl>
      {b.tokens !== null && u.left.tokens !== null ? <Meter id={`${id}-tok`} unit="tokens" limit={b.tokens} raised={u.raised.tokens} used={u.used.tokens} reserved={u.reserved.tokens} left={u.left.tokens} /> : null}
      {b.money !== null && u.left.money !== null ? <Meter id={`${id}-usd`} unit="USD" limit={b.money} raised={u.raised.money} used={u.used.money} reserved={u.reserved.money} left={u.left.money} /> : null}
      <form class="controls raise" method="post" action="/console/budgets/raise" hx-post="/console/budgets/raise" hx-target={`#${id}`} hx-swap="outerHTML">
        <input type="hidden" name="budgetId" value={b.id} />
        <input type="hidden" name="periodStart" value={u.periodStart} />
        <fieldset>
          <legend>Raise {b.id} for this period</legend>
          {b.tokens !== null ? (
            <label>
              Tokens <input type="number" name="tokens" id={`${id}-tokens`} min={1} step={1} inputmode="numeric" />
            </label>
          ) : null}
          {b.money !== null ? (
            <label>
              USD <input type="number" name="money" id={`${id}-money`} min={0.000001} step="any" inputmode="decimal" />
            </label>
          ) : null}
          <button type="submit">Raise</button>
        </fieldset>
      </form>
      <p class={props.message?.error ? 'error' : 'status'} role="status" aria-live="polite" id={`${id}-result`}>
        {props.message?.text ?? ''}
      </p>
    </section>
  );
}

function ReceiptRow(props: { r: ReceiptRecord; runLink: string | undefined }) {
  const { r } = props;
  const json = JSON.stringify(r.data);
  return (
    <tr id={`r-${r.id}`}>
      <td>
        <time datetime={r.at}>{r.at.replace('T', ' ').slice(0, 19)}</time>
      </td>
      <td>
        <code>{r.kind}</code>
      </td>
      <td>{r.actor ?? '—'}</td>
      <td class="details">
        <details>
          <summary>{json.length > 100 ? `${json.slice(0, 100)}…` : json}</summary>
          <pre>{JSON.stringify(r.data, null, 2)}</pre>
          <p>
            Receipt {r.id}
            {r.workflowId ? <> · workflow {props.runLink ? <a href={props.runLink}>{r.workflowId}</a> : <code>{r.workflowId}</code>}</> : null}
            {r.sessionId && r.sessionId !== r.workflowId ? <> · session {r.sessionId}</> : null}
          </p>
        </details>
      </td>
    </tr>
  );
}

function FilterForm(props: { text: FilterText }) {
  const t = props.text;
  const field = (name: (typeof FILTER_FIELDS)[number], label: string, hint?: string) => (
    <label>
      {label}
      {hint ? <span class="hint"> ({hint})</span> : null} <input type="text" name={name} value={t[name] ?? ''} maxlength={500} />
    </label>
  );
  return (
    <form method="get" action="/console/receipts" class="filter" aria-label="Filter receipts">
      {field('chat', 'Chat', 'chat id or session id')}
      {field('person', 'Person', 'identity id, api, cli')}
      {field('change', 'Change', 'change id')}
      {field('kind', 'Kind', 'model.call, budget.raised, ...')}
      {field('since', 'Since', 'ISO time or 2h, 7d')}
      {field('until', 'Until', 'ISO time or 15m')}
      <div class="controls">
        <button type="submit">Filter</button>
        <a href="/console/receipts">Clear</a>
      </div>
    </form>
  );
}

/** The Budgets and receipts page: budgets with their usage and Raise; receipts filtered, paged, exported. */
export function addBudgetRoutes(app: Hono, { deps, render, actorOf, runLink }: ConsolePageContext): void {
  const budgets: BudgetService | undefined = deps.services?.budgets;
  const receipts: ReceiptService | undefined = deps.services?.receipts;

  const budgetsPage = async (c: Context, answer?: { id: string; text: string; error: boolean }, status: 200 | 400 | 404 | 409 = 200) => {
    if (!budgets) return render(c, 'Budgets', 'budgets', <p>Budgets are not served by this process (no budget service).</p>);
    const list = await budgets.list();
    return render(
      c,
      'Budgets',
      'budgets',
      <>
        <p>
          What each budget allows in its current period, what is used, held by calls still running, raised and left. See also the <a href="/console/receipts">receipts</a>.
        </p>
        {answer && !list.some((b) => b.id === answer.id) ? (
          <p class="error" role="status">
            {answer.text}
          </p>
        ) : null}
        {list.length === 0 ? <p>No budgets are defined (STEWARD_TOKEN_BUDGET, STEWARD_BUDGETS_FILE, PUT /api/v1/budgets/{'{id}'} or ./steward budgets set).</p> : list.map((b) => <BudgetCard b={b} message={answer && answer.id === b.id ? answer : undefined} />)}
      </>,
      status,
    );
  };

  app.get('/console/budgets', (c) => budgetsPage(c));

  app.post('/console/budgets/raise', async (c) => {
    if (!budgets) return c.text('no budget service', 404);
    const body = await c.req.parseBody();
    const form = RaiseForm.safeParse(body);
    const budgetId = typeof body.budgetId === 'string' ? body.budgetId.trim() : '';
    /** The budget's card with the answer in it (htmx), or the page with it (a plain form). */
    const answered = async (text: string, error: boolean, status: 200 | 400 | 404 | 409) => {
      if (!fromHtmx(c)) return error ? budgetsPage(c, { id: budgetId, text, error }, status) : c.redirect('/console/budgets', 303);
      const b = budgetId ? await budgets.get(budgetId) : undefined;
      if (!b) return c.html(String(<p class="error" role="status">{text}</p>), status);
      return c.html(String(<BudgetCard b={b} message={{ text, error }} />), status);
    };
    if (!form.success) return answered(`Raise refused (nothing changed): ${form.error.issues.map((i) => i.message).join('; ')}`, true, 400);
    try {
      const r = await budgets.raise({
        budgetId: form.data.budgetId,
        ...(form.data.tokens !== undefined ? { tokens: form.data.tokens } : {}),
        ...(form.data.money !== undefined ? { money: form.data.money } : {}),
        ...(form.data.periodStart ? { periodStart: form.data.periodStart } : {}),
        by: actorOf(c),
      });
      return await answered(r.message, false, 200);
    } catch (err) {
      if (err instanceof ServiceInputError) return answered(err.message, true, err.status);
      throw err;
    }
  });

  app.get('/console/receipts', async (c) => {
    if (!receipts) return render(c, 'Receipts', 'budgets', <p>Receipts are not served by this process (no receipt service).</p>);
    const { text, args, errors } = filterOf(c);
    const paging = PageArgs.safeParse({ before: c.req.query('before'), size: c.req.query('size') });
    const problems = [...(errors ?? []), ...(paging.success ? [] : ['before and size: whole numbers (size 1 to 100)'])];
    const page = args && paging.success ? await receipts.page(args, { ...(paging.data.before ? { before: paging.data.before } : {}), size: paging.data.size ?? PAGE_SIZE }) : undefined;
    const size: Record<string, string> = paging.success && paging.data.size ? { size: String(paging.data.size) } : {};
    const filtered = Object.keys(text).length > 0;
    return render(
      c,
      'Receipts',
      'budgets',
      <>
        <p>
          The audit receipts, newest first, each with its details (secrets Steward holds are masked). Export JSONL gives the same filter as <code>./steward receipts export</code>, oldest first. Back to the <a href="/console/budgets">budgets</a>.
        </p>
        <FilterForm text={text} />
        {problems.length > 0 ? (
          <p class="error" role="alert" id="filter-error">
            {problems.join('; ')}
          </p>
        ) : null}
        {page ? (
          <>
            <p class="controls">
              <a href={`/console/receipts/export?${queryString(text)}`} id="export" download>
                Export JSONL{filtered ? ' (this filter)' : ' (every receipt)'}
              </a>
            </p>
            {page.rows.length === 0 ? (
              <p id="no-receipts">No receipts match{filtered ? ' this filter' : ''}.</p>
            ) : (
              <table class="receipts" id="receipts">
                <caption>
                  Receipts{paging.success && paging.data.before ? ` older than receipt ${paging.data.before}` : ''}, newest first ({page.rows.length})
                </caption>
                <thead>
                  <tr>
                    <th scope="col">Time (UTC)</th>
                    <th scope="col">Kind</th>
                    <th scope="col">Who</th>
                    <th scope="col">Details</th>
                  </tr>
                </thead>
                <tbody>
                  {page.rows.map((r) => (
                    <ReceiptRow r={r} runLink={r.workflowId ? runLink(r.workflowId) : undefined} />
                  ))}
                </tbody>
              </table>
            )}
            <nav aria-label="Receipt pages" class="controls">
              {paging.success && paging.data.before ? <a href={`/console/receipts?${queryString(text, size)}`}>Newest</a> : null}
              {page.next ? (
                <a href={`/console/receipts?${queryString(text, { ...size, before: String(page.next) })}`} rel="next" id="next-page">
                  Next page (older)
                </a>
              ) : null}
            </nav>
          </>
        ) : null}
      </>,
      problems.length > 0 ? 400 : 200,
    );
  });

  app.get('/console/receipts/export', (c) => {
    if (!receipts) return c.text('no receipt service', 404);
    const { args, errors } = filterOf(c);
    if (!args) return c.text(`bad filter (nothing exported): ${(errors ?? []).join('; ')}`, 400);
    const lines = receipts.lines(args);
    const encoder = new TextEncoder();
    // pulled a database page at a time: a slow reader holds the export back
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const next = await lines.next();
        if (next.done) controller.close();
        else controller.enqueue(encoder.encode(next.value));
      },
      async cancel() {
        await lines.return(0);
      },
    });
    const stamp = new Date().toISOString().replace(/[:.]/g, '-');
    return c.body(body, 200, { 'content-type': 'application/x-ndjson; charset=utf-8', 'content-disposition': `attachment; filename="receipts-${stamp}.jsonl"`, 'cache-control': 'no-store' });
  });
}
