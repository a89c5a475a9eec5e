/**
 * The live draft's pure parts: the throttle (domain/live-drafts.ts: nothing written for a short
 * step, then at most one write per interval with the newest text, one at a time, deleted at the
 * end only when something was written, a failed write never failing the step), and the masking
 * of growing text (domain/secrets.ts: a held secret masked once whole, its start held back before).
 * The store and the stream are tested end to end in test/e2e/chat-events.test.ts.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it } from 'node:test';
import { throttledDraft } from '../../domain/live-drafts.js';
import { maskHeldSecretsGrowing } from '../../domain/secrets.js';

function recorder(writeMs = 0, fail = false) {
  const writes: Array<{ text: string; at: number }> = [];
  let clears = 0;
  let inFlight = 0;
  let overlapped = false;
  const errors: unknown[] = [];
  const writer = (opts: { startAfterMs: number; everyMs: number }) =>
    throttledDraft({
      ...opts,
      write: async (text) => {
        inFlight++;
        if (inFlight > 1) overlapped = true;
        await sleep(writeMs);
        inFlight--;
        if (fail) throw new Error('the database is away');
        writes.push({ text, at: Date.now() });
      },
      clear: async () => {
        clears++;
      },
      onError: (err) => errors.push(err),
    });
  return { writes, errors, writer, clears: () => clears, overlapped: () => overlapped };
}

describe('the live draft throttle', () => {
  it('a step that ends before startAfterMs writes nothing and deletes nothing', async () => {
    const r = recorder();
    const w = r.writer({ startAfterMs: 2000, everyMs: 50 });
    for (let i = 0; i < 10; i++) {
      w.update('x'.repeat(i + 1));
      await sleep(5);
    }
    await w.finish();
    assert.equal(r.writes.length, 0);
    assert.equal(r.clears(), 0);
  });

  it('a long step writes after startAfterMs, at most once per everyMs, the newest text each time, one write at a time; deleted at the end', async () => {
    const r = recorder(30);
    const w = r.writer({ startAfterMs: 100, everyMs: 80 });
    const started = Date.now();
    let text = '';
    for (let i = 0; i < 60; i++) {
      text += `${i} `;
      w.update(text);
      await sleep(10);
    }
    await w.finish();
    assert.ok(r.writes.length >= 2, `writes: ${r.writes.length}`);
    assert.ok(r.writes.length <= 60, 'far fewer writes than chunks');
    assert.ok(r.writes[0]!.at - started >= 100, 'not before startAfterMs');
    for (let i = 1; i < r.writes.length; i++) {
      assert.ok(r.writes[i]!.at - r.writes[i - 1]!.at >= 80, 'at most one write per everyMs');
      assert.ok(r.writes[i]!.text.length > r.writes[i - 1]!.text.length, 'each write has the newer text');
    }
    assert.equal(r.overlapped(), false, 'never two writes at once');
    assert.equal(r.clears(), 1, 'deleted once at the end');
    const after = r.writes.length;
    w.update(`${text} more`);
    await sleep(150);
    assert.equal(r.writes.length, after, 'nothing is written after finish');
  });

  it('a failed write is reported, never thrown; the draft is still deleted at the end', async () => {
    const r = recorder(0, true);
    const w = r.writer({ startAfterMs: 10, everyMs: 10 });
    w.update('some text');
    await sleep(60);
    w.update('some more text');
    await sleep(60);
    await w.finish();
    assert.ok(r.errors.length >= 1);
    assert.equal(r.clears(), 1);
  });
});

describe('masking growing text', () => {
  const secrets = [{ name: 'STEWARD_API_TOKEN', value: 'tok-0123456789abcdef' }];
  it('masks a whole secret as every view does', () => {
    assert.equal(maskHeldSecretsGrowing('the key tok-0123456789abcdef is here', secrets), "the key [Steward's secret STEWARD_API_TOKEN] is here");
  });
  it("holds back an end that could be a secret's start, whatever its length", () => {
    const whole = 'the key tok-0123456789abcdef';
    for (let n = 'the key '.length; n < whole.length; n++) {
      const shown = maskHeldSecretsGrowing(whole.slice(0, n), secrets);
      assert.equal(shown, 'the key ', `after ${n} characters: ${shown}`);
    }
    // base64 and percent-encoded forms too
    const b64 = Buffer.from('tok-0123456789abcdef').toString('base64');
    assert.equal(maskHeldSecretsGrowing(`x ${b64.slice(0, 10)}`, secrets), 'x ');
  });
  it('leaves ordinary text whole', () => {
    assert.equal(maskHeldSecretsGrowing('nothing secret here', secrets), 'nothing secret here');
    assert.equal(maskHeldSecretsGrowing('', secrets), '');
  });
});
