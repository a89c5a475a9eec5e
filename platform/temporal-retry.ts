/**
 * How Steward's client connections retry a refused gRPC call: the SDK's defaults
 * (`defaultGrpcRetryOptions`: 10 attempts, backoff factor 1.7, 100 ms before the first retry,
 * 1 s for RESOURCE_EXHAUSTED), with one exception: a call the server refused because its workflow
 * is closing retries after about 25 ms.
 *
 * Why: an update-with-start that reaches a run in the instant it continues as new (a message
 * handed over just as its session's grace passed) is refused by the server with "workflow
 * operation can not be applied because workflow is closing" (RESOURCE_EXHAUSTED, cause
 * BUSY_WORKFLOW; for update-with-start in the operation's status, in the binary details), and
 * the retry lands on the next run, started in that instant. RESOURCE_EXHAUSTED usually means a
 * rate limit, so the SDK waits 1 s x 1.7 before it retries: when sessions were tried continuing
 * as new in their last reply's task, every message sent the moment that reply was written took
 * 1.6-2.1 s (docs/performance.md). A closing workflow is not a rate limit: its next run is there.
 * Every other status keeps the SDK's backoff.
 */
import { status as grpcStatus, type Interceptor, type StatusObject } from '@grpc/grpc-js';
import { defaultGrpcRetryOptions, makeGrpcRetryInterceptor, type GrpcRetryOptions } from '@temporalio/client';
import proto from '@temporalio/proto';

/** The server's refusal of a call on a workflow that is continuing as new (or completing). */
const CLOSING = /workflow is closing/;
const MULTI_OPERATION_FAILURE = 'type.googleapis.com/temporal.api.errordetails.v1.MultiOperationExecutionFailure';

/** Before the first retry of a call refused as closing (the SDK's backoff factor and jitter apply). */
export const CLOSING_RETRY_MS = 15;

/**
 * The messages of the operations of a refused update-with-start: its status says only
 * "Update-with-Start could not be executed.", each operation's status is in the binary details
 * (google.rpc.Status with a MultiOperationExecutionFailure).
 */
function operationMessages(status: Partial<Pick<StatusObject, 'metadata'>>): string[] {
  const bin = status.metadata?.get('grpc-status-details-bin')[0];
  if (!bin || typeof bin === 'string') return [];
  try {
    return proto.google.rpc.Status.decode(bin).details.flatMap((d) =>
      d.type_url === MULTI_OPERATION_FAILURE && d.value ? proto.temporal.api.errordetails.v1.MultiOperationExecutionFailure.decode(d.value).statuses.map((s) => s.message ?? '') : [],
    );
  } catch {
    return [];
  }
}

/** Whether the server refused the call because its workflow is closing (a plain call, or an operation of update-with-start). */
export function refusedAsClosing(status: Pick<StatusObject, 'code' | 'details'> & Partial<Pick<StatusObject, 'metadata'>>): boolean {
  if (status.code !== grpcStatus.RESOURCE_EXHAUSTED) return false;
  return CLOSING.test(status.details ?? '') || operationMessages(status).some((m) => CLOSING.test(m));
}

/**
 * The SDK's retry options, with a closing workflow retried at once: every other status goes to
 * the SDK's own default options (so its intervals are the SDK's, whatever version), a closing
 * one to the same defaults with CLOSING_RETRY_MS before the first retry.
 */
export function stewardRetryOptions(): GrpcRetryOptions {
  const sdk = defaultGrpcRetryOptions();
  const closing = defaultGrpcRetryOptions({ initialIntervalMs: () => CLOSING_RETRY_MS });
  return {
    retryableDecider: (attempt, status) => sdk.retryableDecider(attempt, status),
    delayFunction: (attempt, status) => (refusedAsClosing(status) ? closing : sdk).delayFunction(attempt, status),
  };
}

/** The interceptor every client connection Steward makes uses (platform/temporal-server.ts). */
export function stewardRetryInterceptor(): Interceptor {
  return makeGrpcRetryInterceptor(stewardRetryOptions());
}
