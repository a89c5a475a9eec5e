/**
 * The Replays page (counterfactual replay, docs/replay.md): the replays newest first
 * (`/console/replays`, redrawn every 2 s while one runs), one replay (`/console/replays/{id}`)
 * with its state and, once it ended, its report drawn: the summary counts, and per turn the
 * recorded and the counterfactual reply side by side with their line diff (drawn as diff.tsx
 * draws a patch), the tool calls (same, different, new, dropped), the approvals (would wait,
 * would run, flipped), the divergences, tokens, cost and latency of both sides, or why the turn
 * was not replayable. The report's JSON, Markdown and JSONL download from here under the
 * console's sign-in. Cancel while it runs; its run in the Temporal UI.
 *
 * A replay is started from the form at `/console/replays/new` (one turn; a chat and a window; an
 * objective's last N runs; a sample; and the alternative: model, system prompt, skills, approval
 * list), which the chat page pre-fills with a turn ("Replay" beside a reply). The chat page's
 * "Fork from here" posts to `/console/chats/{chatId}/fork`, answered here.
 *
 * Everything goes through the services every surface uses: the replay service
 * (services/replays.ts: start, list, get, report, cancel; it checks the role, validates the
 * request whole and starts nothing on a refusal, whose message the page shows) and the fork
 * service (services/replays/fork.ts). The page decides no rule itself. What a report carries
 * from the record (replies, tool arguments, prompts) is drawn through JSX (escaped) with every
 * secret Steward holds masked (domain/secrets.ts), downloads included.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Context, Hono } from 'hono';
import type { Child } from 'hono/jsx';
import { z } from 'zod';
import { formatMoney } from '../../domain/budgets/prices.js';
import { renderedReport } from '../../domain/replays/formats.js';
import type { ApprovalRow, ReplayableTurnReport, ReplayReport, ReplayTurnReport, TextDiff, ToolCallComparison, TurnMetrics } from '../../domain/replays/report.js';
import { ServiceInputError } from '../../services/requests.js';
import type { ReplayService, ReplayView } from '../../services/replays.js';
import { ForkError, type ForkService } from '../../services/replays/fork.js';
import { ago } from './changes.js';
import { FileDiff, type DiffFileView, type DiffHunk as ViewHunk } from './diff.js';
import { fromHtmx, type ConsolePageContext } from './page.js';
import { CSRF_FIELD, csrfTokenOf } from './security.js';

const ReplayId = z.string().regex(/^rp[a-z0-9]{6,32}$/);
const ChatId = z.string().regex(/^[A-Za-z0-9._@+=-]{1,128}$/);
const FORMATS = { json: { ext: 'json', type: 'application/json; charset=utf-8' }, markdown: { ext: 'md', type: 'text/markdown; charset=utf-8' }, jsonl: { ext: 'jsonl', type: 'application/x-ndjson; charset=utf-8' } } as const;
type Format = keyof typeof FORMATS;

const STATUS_TEXT: Record<string, string> = { running: 'running', done: 'done', failed: 'failed', cancelled: 'cancelled' };
const plural = (n: number, one: string) => `${n} ${one}${n === 1 ? '' : 's'}`;
const str = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);
const rec = (v: unknown): Record<string, unknown> => (v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {});
const stamp = (iso: string | null | undefined) => (iso ? `${iso.slice(0, 10)} ${iso.slice(11, 19)} UTC` : '-');
const money = (micros: number | null) => (micros === null ? 'unknown' : formatMoney(micros));
const ms = (n: number | null) => (n === null ? 'unknown' : n < 1000 ? `${Math.round(n)} ms` : `${(n / 1000).toFixed(1)} s`);
const signed = (n: number | null, show: (n: number) => string) => (n === null ? 'unknown' : n === 0 ? '±0' : n > 0 ? `+${show(n)}` : `−${show(-n)}`);

// ---------------------------------------------------------------------------------------
// Words for a selection and an alternative
// ---------------------------------------------------------------------------------------

/** A selection in words (as the service resolved it). */
export function selectionText(selection: unknown): string {
  const s = rec(selection);
  if (str(s.turnId)) return `turn ${str(s.turnId)}`;
  if (str(s.chatId)) return `chat ${str(s.chatId)}${str(s.platform) && s.platform !== 'http' ? ` on ${str(s.platform)}` : ''} from ${stamp(str(s.since))} to ${stamp(str(s.until))}`;
  if (str(s.objectiveId)) return `objective ${str(s.objectiveId)}, its last ${String(s.last)} runs`;
  const sample = rec(s.sample);
  if (sample.size !== undefined) {
    const window = [str(sample.since) ? `since ${stamp(str(sample.since))}` : '', str(sample.until) ? `until ${stamp(str(sample.until))}` : ''].filter(Boolean).join(' ');
    return `a sample of ${String(sample.size)} turns${window ? ` ${window}` : ''}${sample.seed !== undefined ? ` (seed ${String(sample.seed)})` : ''}`;
  }
  return JSON.stringify(selection);
}

/** An alternative in words: each thing it changes. */
export function alternativeText(alternative: unknown): string {
  const a = rec(alternative);
  const parts: string[] = [];
  if (str(a.model)) parts.push(`model ${str(a.model)}`);
  if (typeof a.systemPrompt === 'string') parts.push(`system prompt replaced (${plural(a.systemPrompt.length, 'character')})`);
  const layers = Object.keys(rec(a.promptLayers));
  if (layers.length) parts.push(`prompt layers ${layers.join(', ')} replaced`);
  if (str(a.skills)) parts.push(`skills ${str(a.skills)}`);
  if (Object.keys(rec(a.retrieval)).length) parts.push(`retrieval ${JSON.stringify(a.retrieval)}`);
  const tools = Array.isArray(a.approvalTools) ? a.approvalTools : Array.isArray(rec(a.toolPolicy).approvalTools) ? (rec(a.toolPolicy).approvalTools as unknown[]) : undefined;
  if (tools) parts.push(`approval list ${tools.length ? tools.map(String).join(', ') : '(empty: nothing waits)'}`);
  if (typeof rec(a.toolPolicy).forbidSelfApproval === 'boolean') parts.push(`self-approval ${rec(a.toolPolicy).forbidSelfApproval ? 'forbidden' : 'allowed'}`);
  return parts.length ? parts.join('; ') : 'the current configuration, unchanged';
}

// ---------------------------------------------------------------------------------------
// The start form
// ---------------------------------------------------------------------------------------

/** The start form's fields, as text (kept when the service refuses, so nothing typed is lost). */
const FORM_FIELDS = ['kind', 'turnId', 'chatId', 'since', 'until', 'objectiveId', 'last', 'sampleSize', 'sampleSince', 'sampleUntil', 'seed', 'model', 'systemPrompt', 'skills', 'approvalList', 'approvalTools', 'concurrency'] as const;
type FormText = Partial<Record<(typeof FORM_FIELDS)[number], string>>;
const KINDS = { turn: 'One turn', chat: 'A chat in a time window', objective: "An objective's last runs", sample: 'A sample across chats' } as const;

function formTextOf(body: Record<string, unknown>): FormText {
  const t: FormText = {};
  for (const f of FORM_FIELDS) {
    const v = body[f];
    if (typeof v === 'string' && v.trim() !== '') t[f] = f === 'systemPrompt' ? v : v.trim();
  }
  return t;
}

/** A whole number typed in a form; other text is passed on as typed, so the service names what is wrong with it. */
const numberOf = (v: string | undefined): number | string | undefined => (v === undefined ? undefined : /^-?\d{1,15}$/.test(v) ? Number(v) : v);
/** A time typed in a form: `7d`, `2h`, `90m` back from now (as the CLI's flags), else passed on as typed (the service wants ISO with its offset). */
function timeOf(v: string | undefined, now: number): string | undefined {
  if (v === undefined) return undefined;
  const m = /^(\d{1,6})\s*(m|min|h|d)$/.exec(v);
  if (!m) return v;
  const unit = m[2] === 'd' ? 86_400_000 : m[2] === 'h' ? 3_600_000 : 60_000;
  return new Date(now - Number(m[1]) * unit).toISOString();
}

/** The request the form stands for (`POST /api/v1/replays`'s body); the replay service checks it whole. */
export function startBodyOf(t: FormText, now = Date.now()): Record<string, unknown> {
  const drop = (o: Record<string, unknown>) => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
  let selection: Record<string, unknown> = {};
  if (t.kind === 'turn') selection = drop({ turnId: t.turnId ?? '' });
  else if (t.kind === 'chat') selection = drop({ chatId: t.chatId ?? '', since: timeOf(t.since, now), until: timeOf(t.until, now) ?? new Date(now).toISOString() });
  else if (t.kind === 'objective') selection = drop({ objectiveId: t.objectiveId ?? '', last: numberOf(t.last) });
  else if (t.kind === 'sample') selection = { sample: drop({ size: numberOf(t.sampleSize), since: timeOf(t.sampleSince, now), until: timeOf(t.sampleUntil, now), seed: numberOf(t.seed) }) };
  const approvalTools =
    t.approvalList === 'replace'
      ? (t.approvalTools ?? '')
          .split(/[\s,]+/)
          .map((x) => x.trim())
          .filter(Boolean)
      : undefined;
  const alternative = drop({ model: t.model, systemPrompt: t.systemPrompt, skills: t.skills === 'on' || t.skills === 'off' ? t.skills : undefined, approvalTools });
  return drop({ selection, alternative, concurrency: numberOf(t.concurrency) });
}

function StartForm(props: { t: FormText; csrf: string; error?: string | undefined }) {
  const t = props.t;
  const kind = t.kind && t.kind in KINDS ? t.kind : 'turn';
  const text = (name: keyof FormText, label: string, hint?: string, attrs: Record<string, unknown> = {}) => (
    <label>
      {label}
      {hint ? <span class="hint"> ({hint})</span> : null} <input type="text" name={name} id={`f-${name}`} value={t[name] ?? ''} maxlength={400} {...attrs} />
    </label>
  );
  /** A kind of selection: its radio button as the group's legend, its fields under it. */
  const kindGroup = (k: keyof typeof KINDS, fields: Child[]) => (
    <fieldset class="kind" id={`kind-${k}`}>
      <legend>
        <label>
          <input type="radio" name="kind" value={k} checked={k === kind} /> {KINDS[k]}
        </label>
      </legend>
      <div class="fields">{fields}</div>
    </fieldset>
  );
  return (
    <form method="post" action="/console/replays" id="start-form" class="replay-form">
      <input type="hidden" name={CSRF_FIELD} value={props.csrf} />
      {props.error ? (
        <p class="error" role="alert" id="start-error">
          Not started: {props.error}
        </p>
      ) : null}
      <fieldset>
        <legend>Which turns (one of)</legend>
        {kindGroup('turn', [text('turnId', 'Turn id', 'steward trace shows them; a reply on a chat page has a Replay link')])}
        {kindGroup('chat', [text('chatId', 'Chat id', 'an HTTP chat of this installation'), text('since', 'Since', 'ISO time with offset, or 7d, 2h, 90m back'), text('until', 'Until', 'empty: now')])}
        {kindGroup('objective', [text('objectiveId', 'Objective', 'id or name'), text('last', 'Last runs', '1 to 500', { inputmode: 'numeric' })])}
        {kindGroup('sample', [
          text('sampleSize', 'Sample size', '1 to 500', { inputmode: 'numeric' }),
          text('sampleSince', 'Since', 'optional'),
          text('sampleUntil', 'Until', 'optional'),
          text('seed', 'Seed', 'optional: the same seed draws the same turns', { inputmode: 'numeric' }),
        ])}
      </fieldset>
      <fieldset>
        <legend>The alternative (empty: as configured now)</legend>
        <div class="fields">
          {text('model', 'Model', 'provider:model, e.g. openai:gpt-4.1-mini')}
          <label>
            Skills{' '}
            <select name="skills" id="f-skills">
              {[
                ['', 'as configured'],
                ['on', 'on'],
                ['off', 'off'],
              ].map(([v, l]) => (
                <option value={v} selected={(t.skills ?? '') === v}>
                  {l}
                </option>
              ))}
            </select>
          </label>
          <label>
            Approval list{' '}
            <select name="approvalList" id="f-approvalList">
              <option value="" selected={t.approvalList !== 'replace'}>
                as configured
              </option>
              <option value="replace" selected={t.approvalList === 'replace'}>
                replaced by the tools below
              </option>
            </select>
          </label>
          {text('approvalTools', 'Approval tools', 'comma separated, e.g. http_request, send_email, server.*')}
          {text('concurrency', 'Turns at once', '1 to 8, default 2', { inputmode: 'numeric' })}
        </div>
        <label for="f-systemPrompt">
          System prompt <span class="hint">(replaces every layer; empty: the current one)</span>
        </label>
        <textarea name="systemPrompt" id="f-systemPrompt" rows={4} maxlength={65536}>
          {t.systemPrompt ?? ''}
        </textarea>
      </fieldset>
      <p class="hint">Every effect of a replayed turn is answered from its record: nothing is sent, run or written where anyone sees it. Its model calls count against the budgets.</p>
      <button type="submit" id="start">
        Start the replay
      </button>
    </form>
  );
}

// ---------------------------------------------------------------------------------------
// The list
// ---------------------------------------------------------------------------------------

const listVersion = (list: ReplayView[]) => list.map((r) => `${r.id}:${r.status}`).join(',');

function ReplayList(props: { list: ReplayView[] }) {
  const running = props.list.some((r) => r.status === 'running');
  const v = listVersion(props.list);
  const now = Date.now();
  return (
    <div id="replays" {...(running ? { 'hx-get': `/console/replays/live?v=${encodeURIComponent(v)}`, 'hx-trigger': 'every 2s', 'hx-swap': 'outerHTML' } : {})}>
      {props.list.length === 0 ? (
        <p>No replays yet.</p>
      ) : (
        <table class="replays">
          <caption>Replays, newest first{running ? ' (updating while one runs)' : ''}</caption>
          <thead>
            <tr>
              <th scope="col">Replay</th>
              <th scope="col">Status</th>
              <th scope="col">Turns</th>
              <th scope="col">Selection</th>
              <th scope="col">Alternative</th>
              <th scope="col">Requested by</th>
              <th scope="col">Started</th>
              <th scope="col">Ended</th>
            </tr>
          </thead>
          <tbody>
            {props.list.map((r) => (
              <tr data-id={r.id} data-status={r.status}>
                <td data-label="Replay">
                  <a href={`/console/replays/${r.id}`}>{r.id}</a>
                </td>
                <td data-label="Status" class={`replay-status replay-${r.status}`}>
                  {STATUS_TEXT[r.status] ?? r.status}
                </td>
                <td data-label="Turns">{r.turnCount}</td>
                <td data-label="Selection">{selectionText(r.selection)}</td>
                <td data-label="Alternative">{alternativeText(r.alternative)}</td>
                <td data-label="Requested by">{r.requestedBy ?? '-'}</td>
                <td data-label="Started">
                  <time datetime={r.createdAt} title={r.createdAt}>
                    {ago(r.createdAt, now)}
                  </time>
                </td>
                <td data-label="Ended">{r.finishedAt ? <time datetime={r.finishedAt}>{stamp(r.finishedAt)}</time> : '-'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}

// ---------------------------------------------------------------------------------------
// The report
// ---------------------------------------------------------------------------------------

/** The report's line diff of the replies, in diff.tsx's terms (one "file": the reply). */
export function replyDiffView(d: TextDiff): DiffFileView {
  const hunks: ViewHunk[] = d.hunks.map((h) => {
    let oldNo = h.recordedStart;
    let newNo = h.counterfactualStart;
    return {
      header: `@@ -${h.recordedStart},${h.recordedLines} +${h.counterfactualStart},${h.counterfactualLines} @@`,
      lines: h.lines.map((l) => (l.kind === 'added' ? { kind: 'add' as const, text: l.text, newNo: newNo++ } : l.kind === 'removed' ? { kind: 'del' as const, text: l.text, oldNo: oldNo++ } : { kind: 'ctx' as const, text: l.text, oldNo: oldNo++, newNo: newNo++ })),
    };
  });
  return { path: 'reply (recorded → counterfactual)', status: 'modified', binary: false, additions: d.added, deletions: d.removed, hunks };
}

function Summary(props: { r: ReplayReport }) {
  const s = props.r.summary;
  const t = s.turns;
  const sides = (x: { recorded: { sum: number | null }; counterfactual: { sum: number | null } }, show: (n: number | null) => string) => `${show(x.recorded.sum)} recorded → ${show(x.counterfactual.sum)} counterfactual`;
  return (
    <section aria-labelledby="h-summary">
      <h2 id="h-summary">Summary</h2>
      <dl class="facts" id="summary">
        <dt>Turns</dt>
        <dd data-count="total">{t.total}</dd>
        <dt>Changed</dt>
        <dd data-count="changed">{t.outcomeChanged}</dd>
        <dt>Replies changed</dt>
        <dd data-count="replies">{t.replyChanged}</dd>
        <dt>Tool calls changed</dt>
        <dd data-count="tools">
          {t.toolCallsChanged} ({s.toolCalls.same} same, {s.toolCalls.different} different, {s.toolCalls.new} new, {s.toolCalls.dropped} dropped)
        </dd>
        <dt>Approvals flipped</dt>
        <dd data-count="approvals">
          {s.approvals.flipped} ({s.approvals.nowAsked} would now wait, {s.approvals.nowSkipped} would now run)
        </dd>
        <dt>Diverged</dt>
        <dd data-count="diverged">
          {t.diverged} ({plural(s.divergences, 'call')} simulated with no recorded result)
        </dd>
        <dt>Not replayable</dt>
        <dd data-count="not-replayable">
          {t.notReplayable}
          {s.reasons.length ? ` (${s.reasons.map((r) => `${r.count}: ${r.reason}`).join('; ')})` : ''}
        </dd>
        <dt>Tokens</dt>
        <dd>{sides(s.tokens, (n) => (n === null ? 'unknown' : n.toLocaleString('en-US')))}</dd>
        <dt>Cost</dt>
        <dd>{sides(s.costMicros, money)}</dd>
        <dt>Latency</dt>
        <dd>{sides(s.latencyMs, ms)}</dd>
      </dl>
    </section>
  );
}

function Words(props: { d: TextDiff }) {
  if (!props.d.words) return null;
  return (
    <p class="words" aria-label="Word diff">
      {props.d.words.map((w) => (w.kind === 'added' ? <ins>{w.text}</ins> : w.kind === 'removed' ? <del>{w.text}</del> : <span>{w.text}</span>))}
    </p>
  );
}

function Replies(props: { t: ReplayableTurnReport; n: number }) {
  const { reply } = props.t;
  const side = (label: string, r: { text: string | null; chars: number; truncated: boolean }, cls: string) => (
    <div class={`side ${cls}`}>
      <h4>{label}</h4>
      {r.text === null ? <p class="muted">No reply.</p> : <pre class="reply">{r.text}</pre>}
      {r.truncated ? <p class="hint">Cut at {r.text?.length ?? 0} of {r.chars} characters.</p> : null}
    </div>
  );
  return (
    <>
      <div class="sides">
        {side(`Recorded (${props.t.model.recorded ?? 'model unknown'})`, reply.recorded, 'recorded')}
        {side(`Counterfactual (${props.t.model.counterfactual ?? 'model unknown'})`, reply.counterfactual, 'counterfactual')}
      </div>
      {reply.diff.identical ? (
        <p class="same-reply">The reply is the same, character for character.</p>
      ) : (
        <div class="reply-diff">
          <Words d={reply.diff} />
          {reply.diff.hunks.length ? <FileDiff f={replyDiffView(reply.diff)} index={props.n * 1000} /> : null}
          {reply.diff.notes.map((n) => (
            <p class="hint">{n}</p>
          ))}
        </div>
      )}
    </>
  );
}

function ToolCalls(props: { calls: ToolCallComparison[] }) {
  if (props.calls.length === 0) return <p>No tool calls on either side.</p>;
  const side = (c: { args: string; approval: string; error?: string | undefined } | undefined, extra: string | undefined) =>
    c ? (
      <>
        <code class="args">{c.args}</code>
        <div class="muted">
          {c.approval}
          {extra ? ` · ${extra}` : ''}
          {c.error ? ` · ${c.error}` : ''}
        </div>
      </>
    ) : (
      '-'
    );
  return (
    <table class="replay-calls">
      <caption class="vh">Tool calls compared</caption>
      <thead>
        <tr>
          <th scope="col">Call</th>
          <th scope="col">Tool</th>
          <th scope="col">Recorded</th>
          <th scope="col">Counterfactual</th>
        </tr>
      </thead>
      <tbody>
        {props.calls.map((c) => (
          <tr data-kind={c.kind}>
            <td data-label="Call" class={`call-${c.kind}`}>
              {c.kind}
            </td>
            <td data-label="Tool">
              <code>{c.tool}</code>
            </td>
            <td data-label="Recorded">{side(c.recorded, c.recorded?.decision)}</td>
            <td data-label="Counterfactual">{side(c.counterfactual, c.counterfactual?.result === 'simulated' ? 'simulated: not in the record, no result' : c.counterfactual?.result === 'recorded' ? 'answered from the record' : undefined)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function Approvals(props: { rows: ApprovalRow[] }) {
  if (props.rows.length === 0) return <p>No call would wait for an approval on either side.</p>;
  return (
    <table class="replay-approvals">
      <caption class="vh">Approvals</caption>
      <thead>
        <tr>
          <th scope="col">Tool</th>
          <th scope="col">Recorded</th>
          <th scope="col">Under the alternative</th>
          <th scope="col">Flipped</th>
        </tr>
      </thead>
      <tbody>
        {props.rows.map((a) => (
          <tr data-flipped={String(a.flipped)}>
            <td data-label="Tool">
              <code>{a.tool}</code>
            </td>
            <td data-label="Recorded">
              {a.recorded ?? 'not called'}
              {a.recordedDecision ? ` (${a.recordedDecision})` : ''}
            </td>
            <td data-label="Under the alternative">{a.counterfactual ?? 'not called'}</td>
            <td data-label="Flipped">{a.flipped ? 'yes' : 'no'}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function Metrics(props: { m: ReplayableTurnReport['metrics'] }) {
  const row = (label: string, m: TurnMetrics) => (
    <tr>
      <th scope="row">{label}</th>
      <td>{m.tokens.input.toLocaleString('en-US')}</td>
      <td>{m.tokens.output.toLocaleString('en-US')}</td>
      <td>{m.tokens.total.toLocaleString('en-US')}</td>
      <td>{money(m.costMicros)}</td>
      <td>{ms(m.latencyMs)}</td>
    </tr>
  );
  const d = props.m.delta;
  return (
    <table class="replay-metrics">
      <caption class="vh">Tokens, cost and latency</caption>
      <thead>
        <tr>
          <th scope="col">Side</th>
          <th scope="col">Input tokens</th>
          <th scope="col">Output tokens</th>
          <th scope="col">Total tokens</th>
          <th scope="col">Cost</th>
          <th scope="col">Latency</th>
        </tr>
      </thead>
      <tbody>
        {row('Recorded', props.m.recorded)}
        {row('Counterfactual', props.m.counterfactual)}
        <tr>
          <th scope="row">Difference</th>
          <td>{signed(d.tokens.input, (n) => n.toLocaleString('en-US'))}</td>
          <td>{signed(d.tokens.output, (n) => n.toLocaleString('en-US'))}</td>
          <td>{signed(d.tokens.total, (n) => n.toLocaleString('en-US'))}</td>
          <td>{signed(d.costMicros, formatMoney)}</td>
          <td>{signed(d.latencyMs, (n) => ms(n))}</td>
        </tr>
      </tbody>
    </table>
  );
}

function Turn(props: { t: ReplayTurnReport; n: number }) {
  const t = props.t;
  const id = `turn-${props.n + 1}`;
  const head = (
    <h3 id={`${id}-h`}>
      Turn {props.n + 1}: <code>{t.turnId}</code>
    </h3>
  );
  if (!t.replayable) {
    return (
      <section class="replay-turn" id={id} data-replayable="false" aria-labelledby={`${id}-h`}>
        {head}
        <p class="error not-replayable">Not replayable: {t.reason}</p>
      </section>
    );
  }
  const changed = Object.entries(t.changes)
    .filter(([, v]) => v)
    .map(([k]) => (k === 'toolCalls' ? 'tool calls' : k));
  return (
    <section class="replay-turn" id={id} data-replayable="true" data-changed={String(t.outcomeChanged)} aria-labelledby={`${id}-h`}>
      {head}
      <p class={t.outcomeChanged ? 'changed' : 'unchanged'}>
        {t.outcomeChanged ? `Changed: ${changed.join(', ')}.` : 'Unchanged.'} Outcome: {t.outcome.recorded}
        {t.outcome.counterfactual !== t.outcome.recorded ? ` → ${t.outcome.counterfactual}` : ''}
        {t.at ? (
          <>
            {' '}
            · recorded <time datetime={t.at}>{stamp(t.at)}</time>
          </>
        ) : null}
      </p>
      <Replies t={t} n={props.n} />
      <h4>Tool calls</h4>
      <ToolCalls calls={t.toolCalls} />
      <h4>Approvals</h4>
      <Approvals rows={t.approvals} />
      {t.divergences.length ? (
        <>
          <h4>Divergences</h4>
          <ul class="divergences">
            {t.divergences.map((d) => (
              <li>
                <code>{d.tool}</code> <code class="args">{d.args}</code>: not in the record, simulated with no result
              </li>
            ))}
          </ul>
        </>
      ) : null}
      <h4>Tokens, cost and latency</h4>
      <Metrics m={t.metrics} />
    </section>
  );
}

/** The replay's live part: its state, links, Cancel while it runs, and its report once it has one (redrawn every 2 s while it runs). */
function ReplayBody(props: { r: ReplayView; report: ReplayReport | undefined; reportError?: string | undefined; csrf: string; runHref: string | undefined; answer?: { text: string; error: boolean } | undefined }) {
  const { r } = props;
  const base = `/console/replays/${r.id}`;
  const running = r.status === 'running';
  return (
    <div id="replay" data-status={r.status} {...(running ? { 'hx-get': `${base}/live?v=${r.status}`, 'hx-trigger': 'every 2s', 'hx-swap': 'outerHTML' } : {})}>
      <dl class="facts">
        <dt>Status</dt>
        <dd id="status" class={`replay-status replay-${r.status}`}>
          {STATUS_TEXT[r.status] ?? r.status}
          {running ? ` (${plural(r.turnCount, 'turn')})` : ''}
        </dd>
        <dt>Selection</dt>
        <dd>{selectionText(r.selection)}</dd>
        <dt>Alternative</dt>
        <dd id="alternative">{alternativeText(r.alternative)}</dd>
        <dt>Turns</dt>
        <dd>{r.turnCount}</dd>
        <dt>Requested by</dt>
        <dd>{r.requestedBy ?? '-'}</dd>
        <dt>Started</dt>
        <dd>
          <time datetime={r.createdAt}>{stamp(r.createdAt)}</time>
        </dd>
        <dt>Ended</dt>
        <dd>{r.finishedAt ? <time datetime={r.finishedAt}>{stamp(r.finishedAt)}</time> : '-'}</dd>
        {r.error ? (
          <>
            <dt>Why it stopped</dt>
            <dd class="error prose">{r.error}</dd>
          </>
        ) : null}
        <dt>Links</dt>
        <dd>
          <ul class="links">
            {props.runHref ? (
              <li>
                <a href={props.runHref} id="run-link">
                  Its run in the Temporal UI
                </a>{' '}
                (<code>{r.workflowId}</code>)
              </li>
            ) : (
              <li>
                Its run: <code>{r.workflowId}</code>
              </li>
            )}
            {props.report ? (
              <li>
                The report as{' '}
                <a href={`${base}/report/json`} id="download-json" download>
                  JSON
                </a>
                ,{' '}
                <a href={`${base}/report/markdown`} id="download-markdown" download>
                  Markdown
                </a>{' '}
                or{' '}
                <a href={`${base}/report/jsonl`} id="download-jsonl" download>
                  JSONL
                </a>
              </li>
            ) : null}
          </ul>
        </dd>
      </dl>
      {running ? (
        <form method="post" action={`${base}/cancel`} hx-post={`${base}/cancel`} hx-target="#cancel-result" hx-swap="innerHTML" class="controls">
          <input type="hidden" name={CSRF_FIELD} value={props.csrf} />
          <button type="submit" id="cancel">
            Cancel the replay
          </button>
          <span class="hint">The turns still running are cancelled; the report keeps what was replayed.</span>
        </form>
      ) : null}
      <p id="cancel-result" role="status" aria-live="polite" class={props.answer?.error ? 'error' : undefined}>
        {props.answer?.text ?? ''}
      </p>
      {props.reportError ? <p class="error">The report could not be read: {props.reportError}</p> : null}
      {props.report ? (
        <>
          <Summary r={props.report} />
          <section aria-labelledby="h-turns">
            <h2 id="h-turns">Turns</h2>
            {props.report.turns.length === 0 ? <p>No turn was replayed.</p> : props.report.turns.map((t, i) => <Turn t={t} n={i} />)}
          </section>
        </>
      ) : !props.reportError ? (
        <p id="no-report">{running ? 'The report is drawn here when the replay ends.' : 'This replay ended without a report.'}</p>
      ) : null}
    </div>
  );
}

// ---------------------------------------------------------------------------------------
// The chat page's turn actions
// ---------------------------------------------------------------------------------------

/** Beside a reply of a chat's transcript: Replay (the start form with the turn) and Fork from here (a new chat with everything before this turn). */
export function TurnActions(props: { chatId: string; turnId: string; seq: number | undefined; csrf: string; replay: boolean; fork: boolean }) {
  const base = `/console/chats/${encodeURIComponent(props.chatId)}`;
  const result = `fork-result-${props.seq ?? 'x'}`;
  return (
    <div class="turn-actions">
      {props.replay ? (
        <a href={`/console/replays/new?${new URLSearchParams({ turnId: props.turnId }).toString()}`} class="replay-turn-link">
          Replay
        </a>
      ) : null}
      {props.fork ? (
        <form method="post" action={`${base}/fork`} hx-post={`${base}/fork`} hx-target={`#${result}`} hx-swap="innerHTML">
          <input type="hidden" name={CSRF_FIELD} value={props.csrf} />
          <input type="hidden" name="turnId" value={props.turnId} />
          {/* a double click forks once: the same key answers the same fork */}
          <input type="hidden" name="key" value={randomUUID()} />
          <button type="submit" class="fork" title="A new chat that starts from this chat's state just before this turn">
            Fork from here
          </button>
        </form>
      ) : null}
      <span id={result} role="status" aria-live="polite"></span>
    </div>
  );
}

const ForkForm = z.object({ turnId: z.string().trim().min(1, 'which turn').max(400), key: z.string().trim().max(200).optional() });

// ---------------------------------------------------------------------------------------
// Routes
// ---------------------------------------------------------------------------------------

/** The kept report (masked by the service) read into the report module's terms; or why it could not be. */
function reportOf(kept: unknown): { report?: ReplayReport; error?: string } {
  if (kept === null || kept === undefined) return {};
  try {
    return { report: renderedReport(kept) };
  } catch (err) {
    return { error: (err as Error).message.slice(0, 500) };
  }
}

/** A refusal of a service as the page shows it; anything else is not the person's doing. */
function refusal(err: unknown): { text: string; status: 400 | 404 | 409 } {
  if (err instanceof ServiceInputError) return { text: err.message, status: err.status };
  throw err;
}

/** The page's routes: the list, the start form, one replay (live), its report's downloads, Cancel; and the chat page's Fork. */
export function addReplayRoutes(app: Hono, ctx: ConsolePageContext): void {
  addListRoutes(app, ctx);
  addReplayDetailRoutes(app, ctx);
  addDownloadRoute(app, ctx);
  addForkRoute(app, ctx);
}

function addListRoutes(app: Hono, { deps, render, actorOf }: ConsolePageContext): void {
  const service = (): ReplayService | undefined => deps.services?.replays;
  const off = (c: Context) => render(c, 'Replays', 'replays', <p>Replays are not served by this process (it has no replay service).</p>);
  app.get('/console/replays', async (c) => {
    const replays = service();
    if (!replays) return off(c);
    let list: ReplayView[];
    try {
      list = await replays.list(actorOf(c));
    } catch (err) {
      const r = refusal(err);
      return render(c, 'Replays', 'replays', <p class="error">{r.text}</p>, r.status === 409 ? 403 : r.status);
    }
    return render(
      c,
      'Replays',
      'replays',
      <>
        <p>
          Past chat turns re-run under another model, prompt, skills or approval list, every effect answered from the record (<a href="/console/replays/new">start a replay</a>; a chat's reply has a Replay link too).
        </p>
        <p class="controls">
          <a href="/console/replays/new" id="new-replay">
            Start a replay
          </a>
        </p>
        <ReplayList list={list} />
      </>,
    );
  });

  app.get('/console/replays/live', async (c) => {
    const replays = service();
    if (!replays) return c.text('no replay service', 404);
    try {
      const list = await replays.list(actorOf(c));
      if (listVersion(list) === c.req.query('v')) return c.body(null, 204);
      return c.html(String(<ReplayList list={list} />));
    } catch (err) {
      const r = refusal(err);
      return c.text(r.text, r.status);
    }
  });

  const newPage = (c: Context, t: FormText, error?: string, status: 200 | 400 | 404 | 409 = 200) =>
    render(
      c,
      'Start a replay',
      'replays',
      <>
        <p>
          <a href="/console/replays">All replays</a>
        </p>
        <StartForm t={t} csrf={csrfTokenOf(c, deps.apiToken)} error={error} />
      </>,
      status,
    );

  app.get('/console/replays/new', (c) => {
    if (!service()) return off(c);
    const turnId = c.req.query('turnId')?.trim();
    return newPage(c, turnId ? { kind: 'turn', turnId: turnId.slice(0, 400) } : { kind: 'turn' });
  });

  app.post('/console/replays', async (c) => {
    const replays = service();
    if (!replays) return c.text('no replay service', 404);
    const t = formTextOf(await c.req.parseBody());
    try {
      const actor = actorOf(c);
      const started = await replays.start(actor, startBodyOf(t));
      // its page is opened once the service lists it (its row may be written by its workflow): a bounded wait
      for (let i = 0; i < 25; i++) {
        try {
          await replays.get(actor, started.id);
          break;
        } catch (err) {
          if (!(err instanceof ServiceInputError && err.status === 404)) throw err;
          await sleep(200);
        }
      }
      return c.redirect(`/console/replays/${started.id}`, 303);
    } catch (err) {
      const r = refusal(err);
      return newPage(c, t, r.text, r.status);
    }
  });

}

function addReplayDetailRoutes(app: Hono, { deps, render, actorOf, runLink }: ConsolePageContext): void {
  const service = (): ReplayService | undefined => deps.services?.replays;
  const off = (c: Context) => render(c, 'Replays', 'replays', <p>Replays are not served by this process (it has no replay service).</p>);
  /** The replay, its report (masked) and the answer to a Cancel, or the service's refusal. */
  const load = async (c: Context, id: string) => {
    const replays = service();
    if (!replays) return undefined;
    const got = await replays.report(actorOf(c), id, 'json');
    if (got.format !== 'json') return undefined;
    return { view: got.replay, ...reportOf(got.report) };
  };

  const detail = async (c: Context, id: string, answer?: { text: string; error: boolean }, status: 200 | 400 | 404 | 409 = 200) => {
    if (!service()) return off(c);
    let got: Awaited<ReturnType<typeof load>>;
    try {
      got = await load(c, id);
    } catch (err) {
      const r = refusal(err);
      return render(c, r.status === 404 ? 'No such replay' : 'Replay', 'replays', <p class="error">{r.text}. <a href="/console/replays">All replays</a></p>, r.status === 409 ? 403 : r.status);
    }
    if (!got) return render(c, 'No such replay', 'replays', <p>There is no replay {id}.</p>, 404);
    const body: Child = (
      <>
        <p>
          <a href="/console/replays">All replays</a>
        </p>
        <ReplayBody r={got.view} report={got.report} reportError={got.error} csrf={csrfTokenOf(c, deps.apiToken)} runHref={runLink(got.view.workflowId)} answer={answer} />
      </>
    );
    return render(c, `Replay ${id}`, 'replays', body, status, got.view.workflowId);
  };

  app.get('/console/replays/:id', async (c) => {
    const id = ReplayId.safeParse(c.req.param('id'));
    if (!id.success) return render(c, 'No such replay', 'replays', <p>A replay id looks like rpk3m9x2q7ab. <a href="/console/replays">All replays</a></p>, 404);
    return detail(c, id.data);
  });

  // the live part, when the replay's status moved since `v` (204: it did not)
  app.get('/console/replays/:id/live', async (c) => {
    const id = ReplayId.safeParse(c.req.param('id'));
    if (!service() || !id.success) return c.text('no such replay', 404);
    try {
      const got = await load(c, id.data);
      if (!got) return c.text('no such replay', 404);
      if (got.view.status === c.req.query('v')) return c.body(null, 204);
      return c.html(String(<ReplayBody r={got.view} report={got.report} reportError={got.error} csrf={csrfTokenOf(c, deps.apiToken)} runHref={runLink(got.view.workflowId)} />));
    } catch (err) {
      const r = refusal(err);
      return c.text(r.text, r.status);
    }
  });

  app.post('/console/replays/:id/cancel', async (c) => {
    const replays = service();
    const id = ReplayId.safeParse(c.req.param('id'));
    if (!replays || !id.success) return c.text('no such replay', 404);
    const answered = (text: string, status: 200 | 400 | 404 | 409) =>
      fromHtmx(c) ? c.html(String(<span class={status === 200 ? undefined : 'error'}>{text}</span>), status) : status === 200 ? c.redirect(`/console/replays/${id.data}`, 303) : detail(c, id.data, { text, error: true }, status);
    try {
      await replays.cancel(actorOf(c), id.data);
      return answered('Cancelling: the turns still running are being cancelled.', 200);
    } catch (err) {
      const r = refusal(err);
      return answered(`Refused: ${r.text}`, r.status);
    }
  });
}

/** The report as the API serves it (?format=json|markdown|jsonl): a download under the console's sign-in, secrets masked. */
function addDownloadRoute(app: Hono, { deps, actorOf }: ConsolePageContext): void {
  const service = (): ReplayService | undefined => deps.services?.replays;
  app.get('/console/replays/:id/report/:format', async (c) => {
    const replays = service();
    const id = ReplayId.safeParse(c.req.param('id'));
    const format = (Object.keys(FORMATS) as Format[]).find((f) => f === c.req.param('format'));
    if (!replays || !id.success || !format) return c.text('no such report', 404);
    try {
      const got = await replays.report(actorOf(c), id.data, format);
      let text: string;
      if (got.format === 'json') {
        if (got.report === null) return c.text(`replay ${id.data} has no report yet (${got.replay.status})`, 409);
        text = `${JSON.stringify({ replay: got.replay, report: got.report }, null, 2)}\n`;
      } else text = got.text;
      return c.body(text, 200, { 'content-type': FORMATS[format].type, 'content-disposition': `attachment; filename="replay-${id.data}.${FORMATS[format].ext}"` });
    } catch (err) {
      const r = refusal(err);
      return c.text(r.text, r.status);
    }
  });
}

/** "Fork from here" on the chat page: the fork service, as the API's POST /api/v1/chats/{chatId}/fork. */
function addForkRoute(app: Hono, { deps, actorOf }: ConsolePageContext): void {
  const forks = (): ForkService | undefined => deps.services?.forks;
  app.post('/console/chats/:chatId/fork', async (c) => {
    const service = forks();
    const chat = ChatId.safeParse(c.req.param('chatId'));
    if (!service || !chat.success) return c.text('no such chat', 404);
    const form = ForkForm.safeParse(await c.req.parseBody());
    const answered = (body: Child, status: 200 | 400 | 403 | 404 | 409, to?: string) =>
      fromHtmx(c) ? c.html(String(body), status) : status === 200 && to ? c.redirect(`/console/chats/${encodeURIComponent(to)}`, 303) : c.html(String(body), status);
    if (!form.success) return answered(<span class="error">{form.error.issues.map((i) => i.message).join('; ')}</span>, 400);
    try {
      const r = await service.fork(actorOf(c), { chatId: chat.data, turnId: form.data.turnId }, form.data.key ? { key: form.data.key } : {});
      return answered(
        <span class="forked">
          Forked: <a href={`/console/chats/${encodeURIComponent(r.chatId)}`}>{r.chatId}</a> ({plural(r.copied, 'message')} before this turn)
        </span>,
        200,
        r.chatId,
      );
    } catch (err) {
      if (!(err instanceof ForkError)) throw err;
      return answered(<span class="error">Refused: {err.message}</span>, err.status);
    }
  });
}
