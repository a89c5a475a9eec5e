/**
 * Budget periods: the period of a budget that contains an instant, and when it renews.
 *
 * - day, week (ISO: from Monday) and month are counted in the budget's IANA time zone: a
 *   period starts at the first instant whose wall clock in that zone reads its first date (local
 *   midnight, or the time the clocks jump to where a DST change skips midnight), so a day is
 *   23 or 25 hours long across a DST change;
 * - none: one total from the epoch that never renews;
 * - window: fixed windows of `windowSeconds` counted from the epoch (STEWARD_TOKEN_BUDGET's).
 *
 * Only Intl (the time zone database Node ships); no dependency. Pure: no I/O, no clock.
 */
import { describeWindow } from '../../common/roles.js';

export const BUDGET_PERIODS = ['day', 'week', 'month', 'none'] as const;
export type BudgetPeriod = (typeof BUDGET_PERIODS)[number];

/** How a budget's periods are counted. */
export interface PeriodSpec {
  period: BudgetPeriod | 'window';
  /** IANA time zone (day, week, month). */
  timezone: string;
  /** The window's length (period `window`). */
  windowSeconds?: number | null;
}

/** One period: its first instant, and the instant it renews (absent for a total). */
export interface Period {
  start: Date;
  end?: Date;
}

const HOUR = 3_600_000;
const formats = new Map<string, Intl.DateTimeFormat>();

function formatOf(timezone: string): Intl.DateTimeFormat {
  let f = formats.get(timezone);
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', { timeZone: timezone, hourCycle: 'h23', year: 'numeric', month: 'numeric', day: 'numeric', hour: 'numeric', minute: 'numeric', second: 'numeric' });
    formats.set(timezone, f);
  }
  return f;
}

/** Is `timezone` an IANA time zone this runtime knows (e.g. Europe/Berlin, UTC)? */
export function isTimeZone(timezone: string): boolean {
  if (!timezone || timezone.length > 64) return false;
  try {
    formatOf(timezone);
    return true;
  } catch {
    return false;
  }
}

/** The wall clock in `timezone` at instant `t` (ms). */
export function wallClock(t: number, timezone: string): { year: number; month: number; day: number; hour: number; minute: number; second: number } {
  const out = { year: 0, month: 0, day: 0, hour: 0, minute: 0, second: 0 };
  for (const p of formatOf(timezone).formatToParts(t)) {
    if (p.type in out) out[p.type as keyof typeof out] = Number(p.value);
  }
  return out;
}

const dateKey = (t: number, timezone: string) => {
  const w = wallClock(t, timezone);
  return w.year * 10_000 + w.month * 100 + w.day;
};

/**
 * The first instant whose wall-clock date in `timezone` is year-month-day (month 1-12; days
 * out of range roll over, as Date.UTC does). Offsets lie within -12h..+14h, so that instant lies
 * within 15 hours of the date's UTC midnight: found hour by hour, then to the second.
 */
export function startOfLocalDate(year: number, month: number, day: number, timezone: string): Date {
  const base = Date.UTC(year, month - 1, day);
  const d = new Date(base);
  const key = d.getUTCFullYear() * 10_000 + (d.getUTCMonth() + 1) * 100 + d.getUTCDate();
  let after = base - 15 * HOUR;
  for (let i = 0; i <= 30 && dateKey(after, timezone) < key; i++) after += HOUR;
  // the date begins in (after - 1h, after]: to the second
  let before = (after - HOUR) / 1000;
  let first = after / 1000;
  while (first - before > 1) {
    const mid = Math.floor((before + first) / 2);
    if (dateKey(mid * 1000, timezone) < key) before = mid;
    else first = mid;
  }
  return new Date(first * 1000);
}

function computePeriod(spec: PeriodSpec, now: number): Period {
  if (spec.period === 'none') return { start: new Date(0) };
  if (spec.period === 'window') {
    const ms = Math.max(1, spec.windowSeconds ?? 0) * 1000;
    const start = Math.floor(now / ms) * ms;
    return { start: new Date(start), end: new Date(start + ms) };
  }
  const tz = spec.timezone;
  const { year, month, day } = wallClock(now, tz);
  if (spec.period === 'day') return { start: startOfLocalDate(year, month, day, tz), end: startOfLocalDate(year, month, day + 1, tz) };
  if (spec.period === 'week') {
    const monday = day - ((new Date(Date.UTC(year, month - 1, day)).getUTCDay() + 6) % 7);
    return { start: startOfLocalDate(year, month, monday, tz), end: startOfLocalDate(year, month, monday + 7, tz) };
  }
  return { start: startOfLocalDate(year, month, 1, tz), end: startOfLocalDate(year, month + 1, 1, tz) };
}

/** The last period found per spec: every call in the same period reuses it. */
const lastPeriod = new Map<string, Period>();

/** The period of `spec` that contains instant `now` (ms). */
export function periodOf(spec: PeriodSpec, now: number): Period {
  const id = `${spec.period}|${spec.timezone}|${spec.windowSeconds ?? ''}`;
  const last = lastPeriod.get(id);
  if (last && last.start.getTime() <= now && (last.end === undefined || now < last.end.getTime())) return last;
  const p = computePeriod(spec, now);
  if (lastPeriod.size > 1000) lastPeriod.clear();
  lastPeriod.set(id, p);
  return p;
}

/** The period's name for people: day, week, month, none, or the window's length (e.g. "hour"). */
export function periodName(spec: PeriodSpec): string {
  return spec.period === 'window' ? describeWindow(Math.max(1, spec.windowSeconds ?? 0) * 1000) : spec.period;
}

/** When a period renews, on the budget's wall clock: `2026-11-29 00:00 Europe/Berlin` (`18:00 UTC` for a window). */
export function describeRenewal(spec: PeriodSpec, end: Date): string {
  if (spec.period === 'window') return `${end.toISOString().slice(11, 16)} UTC`;
  const w = wallClock(end.getTime(), spec.timezone);
  const p2 = (n: number) => String(n).padStart(2, '0');
  return `${w.year}-${p2(w.month)}-${p2(w.day)} ${p2(w.hour)}:${p2(w.minute)} ${spec.timezone}`;
}
