/**
 * The Objectives page: every objective with its schedule, state, next run and last run
 * (`/console/objectives`), and one objective (`/console/objectives/{id}`) with its settings, next
 * runs, recent runs (each linked to its run in the Temporal UI, and to the chat it reports into)
 * and the actions Pause (with a note), Resume, Trigger now and Backfill.
 *
 * Every action is the objective service's own call (services/objectives.ts), the one the HTTP API,
 * the CLI and chat make, with the person signed in as the requester: the service applies the role
 * rule (the `/objective` command's minimum role) and its limits, and the page shows its answer
 * (a refusal 409, bad input 400, in place). The Temporal Schedule is what pauses, resumes, runs
 * and backfills; the page never decides anything itself.
 */
import type { Context, Hono } from 'hono';
import { z } from 'zod';
import { ServiceInputError } from '../../services/requests.js';
import { PauseNoteSchema, type ObjectiveService, type ObjectiveView } from '../../services/objectives.js';
import { csrfTokenOf } from './security.js';
import { fromHtmx, type ConsolePageContext } from './page.js';

type ObjectiveDetail = Awaited<ReturnType<ObjectiveService['show']>>;
type RunView = ObjectiveDetail['runs'][number];

const ObjectiveId = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/);

/** A date and time from a form: `2026-11-28T09:00` (a `datetime-local` field, taken as UTC) or ISO 8601 with its offset. */
const FormTime = z
  .string()
  .trim()
  .regex(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?(Z|[+-]\d{2}:\d{2})?$/, 'expected a date and time such as 2026-11-28T09:00 (UTC)')
  .transform((v) => (/(Z|[+-]\d{2}:\d{2})$/.test(v) ? v : `${v.length === 16 ? `${v}:00` : v}Z`))
  .refine((v) => !Number.isNaN(Date.parse(v)), 'not a real date and time');

const BackfillForm = z.object({ start: FormTime, end: FormTime });
const PauseForm = z.object({ note: PauseNoteSchema.optional() });

const issues = (e: z.ZodError) => e.issues.map((i) => `${i.path.length ? `${i.path.join('.')}: ` : ''}${i.message}`).join('; ');

/** A time as UTC, and in the objective's time zone when it has another. */
export function when(iso: string, timezone?: string): string {
  const utc = `${iso.slice(0, 10)} ${iso.slice(11, 19)} UTC`;
  if (!timezone || timezone === 'UTC' || timezone === 'Etc/UTC') return utc;
  try {
    const local = new Intl.DateTimeFormat('en-CA', { timeZone: timezone, year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' })
      .format(new Date(iso))
      .replace(',', '');
    return `${utc} (${local} ${timezone})`;
  } catch {
    return utc;
  }
}

/** A duration in the largest whole unit (h, min, s). */
const duration = (ms: number) => (ms % 3_600_000 === 0 ? `${ms / 3_600_000} h` : ms % 60_000 === 0 ? `${ms / 60_000} min` : `${Math.round(ms / 1000)} s`);

function Time(props: { iso: string | null | undefined; tz?: string | undefined }) {
  return props.iso ? <time datetime={props.iso}>{when(props.iso, props.tz)}</time> : <span>-</span>;
}

/** The schedule in words: its cron expressions or interval, its jitter; the event triggers after it. */
export function scheduleText(o: Pick<ObjectiveView, 'schedule' | 'triggers'>): string {
  const s = o.schedule;
  const parts: string[] = [];
  if (s.cron !== undefined) parts.push(`cron ${Array.isArray(s.cron) ? s.cron.join(' | ') : s.cron}`);
  if (s.every) parts.push(`every ${s.every}`);
  if (s.jitter) parts.push(`jitter ${s.jitter}`);
  const on = [o.triggers.webhook ? 'a signed webhook' : '', o.triggers.watch ? `files in ${o.triggers.watch}` : '', o.triggers.email ? `mail to ${o.triggers.email}` : ''].filter(Boolean);
  if (on.length) parts.push(`on ${on.join(', ')}`);
  return parts.join(', ') || 'no schedule';
}

const stateOf = (o: ObjectiveView) => (o.paused ? 'paused' : o.spentBudget ? 'skipped' : 'active');

function State(props: { o: ObjectiveView }) {
  return (
    <span class={`objective-state objective-${stateOf(props.o)}`} data-state={stateOf(props.o)}>
      {props.o.status}
    </span>
  );
}

function RunOutcome(props: { r: { status: string; outcome: string | null; error: string | null } }) {
  const text = props.r.error ?? props.r.outcome;
  return (
    <span>
      <span class={`run-${props.r.status}`}>{props.r.status}</span>
      {text ? <span class="run-text">: {text.length > 200 ? `${text.slice(0, 200)}…` : text}</span> : null}
    </span>
  );
}

/** The part of an objective's page that changes: state, next runs, recent runs (polled, and sent along with every action's answer). */
function ObjectiveState(props: { o: ObjectiveDetail; runLink: (id: string) => string | undefined; oob?: boolean }) {
  const { o } = props;
  const tz = o.schedule.timezone;
  const base = `/console/objectives/${encodeURIComponent(o.id)}`;
  return (
    <section id="objective-state" aria-labelledby="state-heading" hx-get={`${base}/state`} hx-trigger="every 5s" hx-swap="outerHTML" hx-swap-oob={props.oob ? 'outerHTML' : undefined}>
      <h2 id="state-heading">State</h2>
      <p id="objective-status">
        <State o={o} />
        {o.scheduleNote ? <span class="note"> · {o.scheduleNote}</span> : null} · {o.runsTaken} {o.runsTaken === 1 ? 'run' : 'runs'} started by the schedule
      </p>
      <h3>Next runs</h3>
      {o.nextRuns.length === 0 ? (
        <p id="next-runs">{o.paused ? 'None while paused.' : 'None scheduled.'}</p>
      ) : (
        <ol id="next-runs">
          {o.nextRuns.map((t) => (
            <li>
              <Time iso={t} tz={tz} />
            </li>
          ))}
        </ol>
      )}
      <h3>Recent runs</h3>
      {o.runs.length === 0 ? (
        <p id="recent-runs">No runs yet.</p>
      ) : (
        <table id="recent-runs">
          <caption>The 20 most recent runs, newest first</caption>
          <thead>
            <tr>
              <th scope="col">Started</th>
              <th scope="col">Scheduled for</th>
              <th scope="col">Outcome</th>
              <th scope="col">Run</th>
            </tr>
          </thead>
          <tbody>
            {o.runs.map((r: RunView) => {
              const link = props.runLink(r.id);
              return (
                <tr data-run={r.id}>
                  <td>
                    <Time iso={r.startedAt} tz={tz} />
                  </td>
                  <td>{r.scheduledAt ? <Time iso={r.scheduledAt} tz={tz} /> : 'triggered or backfilled'}</td>
                  <td>
                    <RunOutcome r={r} />
                  </td>
                  <td class="run-id">{link ? <a href={link}>{r.id}</a> : r.id}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
    </section>
  );
}

function Settings(props: { o: ObjectiveDetail }) {
  const { o } = props;
  const chat = `${o.chat.platform}:${o.chat.chatId}`;
  return (
    <dl class="settings">
      <dt>Prompt</dt>
      <dd class="prompt">{o.prompt}</dd>
      <dt>Reports into</dt>
      <dd>{o.chat.platform === 'http' ? <a href={`/console/chats/${encodeURIComponent(o.chat.chatId)}`}>{chat}</a> : chat}</dd>
      <dt>Schedule</dt>
      <dd id="objective-schedule">{scheduleText(o)}</dd>
      <dt>Time zone</dt>
      <dd>{o.schedule.timezone ?? 'UTC'}</dd>
      <dt>Overlap policy</dt>
      <dd>{o.overlap}</dd>
      <dt>Catch-up window</dt>
      <dd>{duration(o.catchupWindowMs)}</dd>
      <dt>Pause on failure</dt>
      <dd>{o.pauseOnFailure ? 'yes' : 'no'}</dd>
      <dt>Model</dt>
      <dd>{o.model ?? 'the default'}</dd>
      {o.skipBefore ? (
        <>
          <dt>Missed runs skipped before</dt>
          <dd>
            <Time iso={o.skipBefore} tz={o.schedule.timezone} />
          </dd>
        </>
      ) : null}
      <dt>Temporal Schedule</dt>
      <dd class="run-id">{o.scheduleId}</dd>
    </dl>
  );
}

function Actions(props: { o: ObjectiveDetail; csrf: string }) {
  const base = `/console/objectives/${encodeURIComponent(props.o.id)}`;
  const hx = (action: string) => ({ method: 'post' as const, action: `${base}/${action}`, 'hx-post': `${base}/${action}`, 'hx-target': '#action-result', 'hx-swap': 'innerHTML' });
  const csrf = <input type="hidden" name="_csrf" value={props.csrf} />;
  return (
    <section aria-labelledby="actions-heading">
      <h2 id="actions-heading">Actions</h2>
      <div class="controls objective-actions">
        <form {...hx('pause')}>
          {csrf}
          <label>
            Note (optional) <input type="text" name="note" id="pause-note" maxlength={500} />
          </label>
          <button type="submit" id="pause">
            Pause
          </button>
        </form>
        <form {...hx('resume')}>
          {csrf}
          <button type="submit" id="resume">
            Resume
          </button>
        </form>
        <form {...hx('trigger')}>
          {csrf}
          <button type="submit" id="trigger">
            Trigger now
          </button>
        </form>
      </div>
      <form {...hx('backfill')} class="controls backfill">
        {csrf}
        <fieldset>
          <legend>Backfill: run what a past time range would have run (times in UTC, at most a year)</legend>
          <label>
            From <input type="datetime-local" name="start" id="backfill-start" step={1} required />
          </label>
          <label>
            To <input type="datetime-local" name="end" id="backfill-end" step={1} required />
          </label>
          <button type="submit" id="backfill">
            Backfill
          </button>
        </fieldset>
      </form>
      <p id="action-result" role="status" aria-live="polite"></p>
    </section>
  );
}

/** Every objective: its schedule and time zone, state, next run and last run, linked to its page. */
function ObjectivesTable(props: { all: ObjectiveView[] }) {
  return (
    <table id="objectives" class="objectives">
      <caption>Objectives by name</caption>
      <thead>
        <tr>
          <th scope="col">Objective</th>
          <th scope="col">Schedule</th>
          <th scope="col">State</th>
          <th scope="col">Next run</th>
          <th scope="col">Last run</th>
        </tr>
      </thead>
      <tbody>
        {props.all.map((o) => (
          <tr data-objective={o.id}>
            <td>
              <a href={`/console/objectives/${encodeURIComponent(o.id)}`}>{o.name}</a>
            </td>
            <td>
              {scheduleText(o)}
              {o.schedule.timezone ? <span class="tz"> ({o.schedule.timezone})</span> : null}
            </td>
            <td>
              <State o={o} />
            </td>
            <td>
              <Time iso={o.nextRuns[0]} tz={o.schedule.timezone} />
            </td>
            <td>
              {o.lastRun ? (
                <>
                  <RunOutcome r={o.lastRun} /> <Time iso={o.lastRun.at} tz={o.schedule.timezone} />
                </>
              ) : (
                'none yet'
              )}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** The Objectives page: the list, one objective, and its actions through the objective service. */
export function addObjectiveRoutes(app: Hono, { deps, render, actorOf, runLink }: ConsolePageContext): void {
  const service = () => deps.services?.objectives;
  const link = (id: string) => runLink(id);
  const off = (c: Context) => render(c, 'Objectives', 'objectives', <p>Objectives are not enabled on this Steward.</p>);

  app.get('/console/objectives', async (c) => {
    const objectives = service();
    if (!objectives) return off(c);
    const all = await objectives.list();
    return render(
      c,
      'Objectives',
      'objectives',
      all.length === 0 ? (
        <p>No objectives yet. Create one with <code>POST /api/v1/objectives</code>, <code>./steward objectives add</code> or <code>/objective add</code> in a chat.</p>
      ) : (
        <ObjectivesTable all={all} />
      ),
    );
  });

  /** One objective, or the service's refusal (a missing one is 404). */
  const load = async (objectives: ObjectiveService, rawId: string): Promise<ObjectiveDetail | { status: 400 | 404 | 409; error: string }> => {
    const id = ObjectiveId.safeParse(rawId);
    if (!id.success) return { status: 404, error: 'Objective ids and names use letters, digits, - and _.' };
    try {
      return await objectives.show(id.data);
    } catch (err) {
      if (err instanceof ServiceInputError) return { status: err.status, error: err.message };
      throw err;
    }
  };

  const detailPage = (c: Context, o: ObjectiveDetail, message?: { text: string; error: boolean }, status: 200 | 400 | 404 | 409 = 200) =>
    render(
      c,
      `Objective ${o.name}`,
      'objectives',
      <>
        <p>
          <a href="/console/objectives">All objectives</a>
        </p>
        {message ? (
          <p class={message.error ? 'error' : undefined} role={message.error ? 'alert' : 'status'} id="page-message">
            {message.text}
          </p>
        ) : null}
        <Settings o={o} />
        <Actions o={o} csrf={csrfTokenOf(c, deps.apiToken)} />
        <ObjectiveState o={o} runLink={link} />
      </>,
      status,
      o.lastRun?.id,
    );

  app.get('/console/objectives/:id', async (c) => {
    const objectives = service();
    if (!objectives) return off(c);
    const o = await load(objectives, c.req.param('id'));
    if ('error' in o) return render(c, 'No such objective', 'objectives', <p>{o.error}</p>, 404);
    return detailPage(c, o);
  });

  app.get('/console/objectives/:id/state', async (c) => {
    const objectives = service();
    if (!objectives) return c.text('objectives are not enabled', 404);
    if (!fromHtmx(c)) return c.redirect(`/console/objectives/${encodeURIComponent(c.req.param('id'))}`, 303);
    const o = await load(objectives, c.req.param('id'));
    if ('error' in o) return c.html(String(<p class="error">{o.error}</p>), 404);
    return c.html(String(<ObjectiveState o={o} runLink={link} />));
  });

  /**
   * An action: the form checked (400), then the service's call as the person signed in (its
   * refusal, 409 or 400, shown in place). htmx gets the message and the new state; a plain form
   * goes back to the objective's page (with the message when refused).
   */
  const action = (name: string, run: (objectives: ObjectiveService, id: string, form: Record<string, unknown>, c: Context) => Promise<string>) => {
    app.post(`/console/objectives/:id/${name}`, async (c) => {
      const objectives = service();
      if (!objectives) return c.text('objectives are not enabled', 404);
      const id = ObjectiveId.safeParse(c.req.param('id'));
      if (!id.success) return c.text('no such objective', 404);
      const form = (await c.req.parseBody()) as Record<string, unknown>;
      let text: string;
      let status: 200 | 400 | 404 | 409 = 200;
      try {
        text = await run(objectives, id.data, form, c);
      } catch (err) {
        if (!(err instanceof ServiceInputError)) throw err;
        status = err.status;
        text = `${status === 400 ? 'Not accepted' : 'Refused'}: ${err.message}${err.message.endsWith('.') ? '' : '.'}`;
      }
      const o = await load(objectives, id.data);
      if ('error' in o) return fromHtmx(c) ? c.html(String(<span class="error">{o.error}</span>), 404) : render(c, 'No such objective', 'objectives', <p>{o.error}</p>, 404);
      if (fromHtmx(c)) {
        return c.html(
          String(
            <>
              <span class={status === 200 ? undefined : 'error'} data-status={status}>
                {text}
              </span>
              <ObjectiveState o={o} runLink={link} oob />
            </>,
          ),
          status,
        );
      }
      return status === 200 ? c.redirect(`/console/objectives/${encodeURIComponent(o.id)}`, 303) : detailPage(c, o, { text, error: true }, status);
    });
  };

  /** The form's fields, checked with zod, or the caller's error (400). */
  const parsed = <T,>(schema: z.ZodType<T>, form: Record<string, unknown>): T => {
    const r = schema.safeParse(form);
    if (!r.success) throw new ServiceInputError(issues(r.error), 400);
    return r.data;
  };

  action('pause', async (objectives, id, form, c) => {
    const { note } = parsed(PauseForm, { note: typeof form.note === 'string' && form.note.trim() ? form.note : undefined });
    const o = await objectives.pause(id, actorOf(c), note);
    return `Paused ${o.name}: its schedule starts nothing until it is resumed.`;
  });

  action('resume', async (objectives, id, _form, c) => {
    const o = await objectives.resume(id, actorOf(c));
    return `Resumed ${o.name}${o.nextRuns[0] ? `: next run ${when(o.nextRuns[0], o.schedule.timezone)}` : ''}.`;
  });

  action('trigger', async (objectives, id, _form, c) => {
    const o = await objectives.trigger(id, actorOf(c));
    return `Triggered ${o.name}: a run starts now (overlap policy ${o.overlap}).`;
  });

  action('backfill', async (objectives, id, form, c) => {
    const b = parsed(BackfillForm, { start: form.start, end: form.end });
    const o = await objectives.backfill(id, { start: b.start, end: b.end }, actorOf(c));
    return `Backfill of ${when(b.start)} to ${when(b.end)} sent for ${o.name}: the runs that range would have had start now.`;
  });
}
