/**
 * Budget periods (domain/budgets/periods.ts): the day, ISO week and month that contain an
 * instant in a budget's time zone, across DST changes (a 23- and a 25-hour day, a zone whose
 * clocks skip midnight), the total and the setting's fixed window. Pure: no database.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { describeRenewal, isTimeZone, periodName, periodOf, startOfLocalDate, wallClock, type PeriodSpec } from '../../domain/budgets/periods.js';

const at = (iso: string) => Date.parse(iso);
const iso = (p: { start: Date; end?: Date }) => [p.start.toISOString(), p.end?.toISOString()];
const HOUR = 3_600_000;

describe('budget periods', () => {
  it('a day in UTC, in a zone ahead and in one behind', () => {
    assert.deepEqual(iso(periodOf({ period: 'day', timezone: 'UTC' }, at('2026-11-28T12:00:00Z'))), ['2026-11-28T00:00:00.000Z', '2026-11-29T00:00:00.000Z']);
    // 08:30 on the 29th in Tokyo (UTC+9) is still the 28th in UTC
    assert.deepEqual(iso(periodOf({ period: 'day', timezone: 'Asia/Tokyo' }, at('2026-11-28T23:30:00Z'))), ['2026-11-28T15:00:00.000Z', '2026-11-29T15:00:00.000Z']);
    // 23:30 on the 27th in Los Angeles (UTC-8)
    assert.deepEqual(iso(periodOf({ period: 'day', timezone: 'America/Los_Angeles' }, at('2026-11-28T07:30:00Z'))), ['2026-11-27T08:00:00.000Z', '2026-11-28T08:00:00.000Z']);
    // a zone at +14 and one at -11 (Kiribati, Niue)
    assert.deepEqual(iso(periodOf({ period: 'day', timezone: 'Pacific/Kiritimati' }, at('2026-11-28T12:00:00Z'))), ['2026-11-28T10:00:00.000Z', '2026-11-29T10:00:00.000Z']);
    assert.deepEqual(iso(periodOf({ period: 'day', timezone: 'Pacific/Niue' }, at('2026-11-28T12:00:00Z'))), ['2026-11-28T11:00:00.000Z', '2026-11-29T11:00:00.000Z']);
  });

  it('DST: the spring day is 23 hours long, the autumn day 25 (Berlin, New York)', () => {
    const spring = periodOf({ period: 'day', timezone: 'Europe/Berlin' }, at('2026-03-29T12:00:00Z'));
    assert.deepEqual(iso(spring), ['2026-03-28T23:00:00.000Z', '2026-03-29T22:00:00.000Z']);
    assert.equal(spring.end!.getTime() - spring.start.getTime(), 23 * HOUR);
    const autumn = periodOf({ period: 'day', timezone: 'Europe/Berlin' }, at('2026-10-25T12:00:00Z'));
    assert.deepEqual(iso(autumn), ['2026-10-24T22:00:00.000Z', '2026-10-25T23:00:00.000Z']);
    assert.equal(autumn.end!.getTime() - autumn.start.getTime(), 25 * HOUR);
    // New York: 02:00 EST -> 03:00 EDT on 8 March 2026, back on 1 November
    assert.deepEqual(iso(periodOf({ period: 'day', timezone: 'America/New_York' }, at('2026-03-08T06:59:59Z'))), ['2026-03-08T05:00:00.000Z', '2026-03-09T04:00:00.000Z']);
    assert.deepEqual(iso(periodOf({ period: 'day', timezone: 'America/New_York' }, at('2026-11-01T05:30:00Z'))), ['2026-11-01T04:00:00.000Z', '2026-11-02T05:00:00.000Z']);
    // the instants around the change belong to the period the wall clock says
    const justBefore = periodOf({ period: 'day', timezone: 'Europe/Berlin' }, at('2026-03-28T22:59:59.999Z'));
    assert.equal(justBefore.end!.toISOString(), '2026-03-28T23:00:00.000Z');
  });

  it('a day whose midnight the clocks skip starts at the first instant of that date', () => {
    // wherever a zone's clocks jump over local midnight, the date begins at the jump: found from the
    // wall clock itself, whatever the time zone data says for the year
    for (const tz of ['America/Santiago', 'America/Havana', 'Asia/Beirut', 'America/Asuncion', 'Europe/Berlin', 'Australia/Lord_Howe']) {
      for (const [y, m, d] of [
        [2026, 9, 6],
        [2026, 3, 8],
        [2026, 3, 29],
        [2026, 10, 4],
        [2026, 4, 5],
        [2026, 1, 1],
      ] as const) {
        const start = startOfLocalDate(y, m, d, tz).getTime();
        const w = wallClock(start, tz);
        assert.deepEqual([w.year, w.month, w.day], [y, m, d], `${tz} ${y}-${m}-${d} starts on its date`);
        const before = wallClock(start - 1000, tz);
        assert.notDeepEqual([before.year, before.month, before.day], [y, m, d], `${tz} ${y}-${m}-${d}: a second earlier is the day before`);
      }
    }
    // Chile, Cuba and Lebanon move their clocks from 00:00 to 01:00: those days start at 01:00 local, 23 hours long
    const skipped: Array<[string, [number, number, number], string, string]> = [
      ['America/Santiago', [2026, 9, 6], '2026-09-06T04:00:00.000Z', '2026-09-07T03:00:00.000Z'],
      ['America/Havana', [2026, 3, 8], '2026-03-08T05:00:00.000Z', '2026-03-09T04:00:00.000Z'],
      ['Asia/Beirut', [2026, 3, 29], '2026-03-28T22:00:00.000Z', '2026-03-29T21:00:00.000Z'],
    ];
    for (const [tz, [y, m, d], start, end] of skipped) {
      const p = periodOf({ period: 'day', timezone: tz }, Date.parse(start) + 6 * HOUR);
      assert.deepEqual(iso(p), [start, end], tz);
      assert.equal(wallClock(p.start.getTime(), tz).hour, 1, `${tz} ${y}-${m}-${d} starts at 01:00`);
    }
  });

  it('an ISO week from Monday, and a month, in the zone', () => {
    // Sunday 29 November, 23:30 in Tokyo: the week of Monday 23 November
    assert.deepEqual(iso(periodOf({ period: 'week', timezone: 'Asia/Tokyo' }, at('2026-11-29T14:30:00Z'))), ['2026-11-22T15:00:00.000Z', '2026-11-29T15:00:00.000Z']);
    // half an hour later it is Monday there: a new week
    assert.deepEqual(iso(periodOf({ period: 'week', timezone: 'Asia/Tokyo' }, at('2026-11-29T15:30:00Z'))), ['2026-11-29T15:00:00.000Z', '2026-12-06T15:00:00.000Z']);
    // a week across a DST change is 167 hours long
    const w = periodOf({ period: 'week', timezone: 'Europe/Berlin' }, at('2026-03-25T12:00:00Z'));
    assert.deepEqual(iso(w), ['2026-03-22T23:00:00.000Z', '2026-03-29T22:00:00.000Z']);
    // 1 March, 01:00 in Sydney (AEDT, UTC+11) is still February in UTC; April begins before DST ends
    assert.deepEqual(iso(periodOf({ period: 'month', timezone: 'Australia/Sydney' }, at('2026-02-28T14:00:00Z'))), ['2026-02-28T13:00:00.000Z', '2026-03-31T13:00:00.000Z']);
    // December to January: the year rolls over
    assert.deepEqual(iso(periodOf({ period: 'month', timezone: 'UTC' }, at('2026-12-31T23:59:59Z'))), ['2026-12-01T00:00:00.000Z', '2027-01-01T00:00:00.000Z']);
  });

  it('a total never renews; the setting window is fixed from the epoch', () => {
    assert.deepEqual(iso(periodOf({ period: 'none', timezone: 'UTC' }, at('2026-11-28T12:00:00Z'))), ['1970-01-01T00:00:00.000Z', undefined]);
    const hourly: PeriodSpec = { period: 'window', timezone: 'UTC', windowSeconds: 3600 };
    assert.deepEqual(iso(periodOf(hourly, at('2026-11-28T12:34:56Z'))), ['2026-11-28T12:00:00.000Z', '2026-11-28T13:00:00.000Z']);
    assert.equal(periodName(hourly), 'hour');
    assert.equal(periodName({ period: 'window', timezone: 'UTC', windowSeconds: 86_400 }), 'day');
    assert.equal(periodName({ period: 'week', timezone: 'UTC' }), 'week');
    assert.equal(describeRenewal(hourly, new Date('2026-11-28T13:00:00Z')), '13:00 UTC');
    assert.equal(describeRenewal({ period: 'day', timezone: 'Europe/Berlin' }, new Date('2026-11-28T23:00:00Z')), '2026-11-29 00:00 Europe/Berlin');
  });

  it('the period found is reused only within it', () => {
    const spec: PeriodSpec = { period: 'day', timezone: 'Europe/Paris' };
    const a = periodOf(spec, at('2026-06-01T12:00:00Z'));
    assert.equal(periodOf(spec, at('2026-06-01T21:59:59Z')), a);
    const b = periodOf(spec, at('2026-06-01T22:00:00Z'));
    assert.notEqual(b, a);
    assert.equal(b.start.toISOString(), '2026-06-01T22:00:00.000Z');
    // back in time (a clock set back): found again, not the cached one
    assert.deepEqual(iso(periodOf(spec, at('2026-05-31T12:00:00Z'))), ['2026-05-30T22:00:00.000Z', '2026-05-31T22:00:00.000Z']);
  });

  it('knows IANA zones and refuses others', () => {
    for (const tz of ['UTC', 'Europe/Berlin', 'America/New_York', 'Asia/Kolkata']) assert.equal(isTimeZone(tz), true, tz);
    for (const tz of ['', 'Mars/Olympus', 'Europe/Berlinn', 'x'.repeat(100)]) assert.equal(isTimeZone(tz), false, tz);
  });
});
