/**
 * platform/temporal-retry.ts: Steward's client connections retry a call refused because its
 * workflow is closing at once, and every other status as the SDK does. Built on the SDK's
 * public retry options: an SDK upgrade that changes their shape or defaults fails here.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Metadata, status, type StatusObject } from '@grpc/grpc-js';
import { defaultGrpcRetryOptions } from '@temporalio/client';
import proto from '@temporalio/proto';
import { CLOSING_RETRY_MS, refusedAsClosing, stewardRetryOptions } from '../../platform/temporal-retry.js';

const st = (code: status, details: string, metadata = new Metadata()): StatusObject => ({ code, details, metadata });
const CLOSING_MESSAGE = 'workflow operation can not be applied because workflow is closing';
/** What the server (1.32) answers an update-with-start whose update reached a run continuing as new: the operations' statuses are in the binary details. */
function multiOperationRefusal(updateMessage: string): StatusObject {
  const failure = proto.temporal.api.errordetails.v1.MultiOperationExecutionFailure.encode({
    statuses: [
      { code: status.ABORTED, message: 'Operation was aborted.' },
      { code: status.RESOURCE_EXHAUSTED, message: updateMessage },
    ],
  }).finish();
  const details = proto.google.rpc.Status.encode({
    code: status.RESOURCE_EXHAUSTED,
    message: 'Update-with-Start could not be executed.',
    details: [{ type_url: 'type.googleapis.com/temporal.api.errordetails.v1.MultiOperationExecutionFailure', value: failure }],
  }).finish();
  const metadata = new Metadata();
  metadata.set('grpc-status-details-bin', Buffer.from(details));
  return st(status.RESOURCE_EXHAUSTED, 'Update-with-Start could not be executed.', metadata);
}
const closing = multiOperationRefusal(CLOSING_MESSAGE);
const rateLimited = st(status.RESOURCE_EXHAUSTED, 'namespace rate limit exceeded');
const unavailable = st(status.UNAVAILABLE, 'connection reset');

describe('Temporal client retries', () => {
  it('knows the refusal of a closing workflow, and only that', () => {
    assert.ok(refusedAsClosing(closing), 'an update-with-start refused: the reason is in the binary details');
    assert.ok(refusedAsClosing(st(status.RESOURCE_EXHAUSTED, CLOSING_MESSAGE)), 'a plain call refused');
    assert.ok(!refusedAsClosing(multiOperationRefusal('namespace rate limit exceeded')), 'an update-with-start refused for another reason');
    assert.ok(!refusedAsClosing(st(status.RESOURCE_EXHAUSTED, 'Update-with-Start could not be executed.')), 'no details');
    const garbled = new Metadata();
    garbled.set('grpc-status-details-bin', Buffer.from([0xff, 0xff, 0x01]));
    assert.ok(!refusedAsClosing(st(status.RESOURCE_EXHAUSTED, 'Update-with-Start could not be executed.', garbled)), 'details that do not decode');
    assert.ok(!refusedAsClosing(rateLimited));
    assert.ok(!refusedAsClosing(st(status.UNAVAILABLE, CLOSING_MESSAGE)), 'a closing refusal is RESOURCE_EXHAUSTED');
  });

  it('retries a closing workflow within tens of milliseconds, where the SDK waits over a second', () => {
    const ours = stewardRetryOptions();
    const sdk = defaultGrpcRetryOptions();
    for (let i = 0; i < 50; i++) {
      assert.ok(ours.delayFunction(1, closing) <= CLOSING_RETRY_MS * 1.7 * 1.2, 'the first retry');
      assert.ok(ours.delayFunction(3, closing) < 100, 'the third');
      assert.ok(sdk.delayFunction(1, closing) >= 1000 * 1.7 * 0.8, "the SDK's own backoff for RESOURCE_EXHAUSTED (what this module exists for)");
    }
    assert.ok(ours.retryableDecider(1, closing), 'retried');
    assert.ok(!ours.retryableDecider(10, closing), 'within the 10 attempts of the SDK');
  });

  it("keeps the SDK's own backoff for every other status", () => {
    const ours = stewardRetryOptions();
    const sdk = defaultGrpcRetryOptions();
    const random = Math.random;
    try {
      for (const r of [0, 0.5, 0.999]) {
        // the same jitter on both sides: the delays are the SDK's, not values restated here
        Math.random = () => r;
        for (const s of [rateLimited, unavailable, st(status.ABORTED, 'aborted')]) {
          for (const attempt of [1, 2, 5, 9]) assert.equal(ours.delayFunction(attempt, s), sdk.delayFunction(attempt, s), `${s.details} attempt ${attempt}`);
        }
        assert.ok(ours.delayFunction(1, closing) < sdk.delayFunction(1, closing) / 10, 'only a closing workflow differs');
      }
    } finally {
      Math.random = random;
    }
    for (const s of [rateLimited, unavailable, closing, st(status.INVALID_ARGUMENT, 'bad')]) {
      for (const attempt of [1, 9, 10]) assert.equal(ours.retryableDecider(attempt, s), sdk.retryableDecider(attempt, s), `${s.details} attempt ${attempt}`);
    }
    assert.equal(ours.retryableDecider(1, st(status.INVALID_ARGUMENT, 'bad')), false);
  });
});
