/**
 * The fetch Steward gives the SDK's Streamable HTTP client transport: every response body read
 * through a bound, before anything is buffered (the SDK reads a JSON answer whole with
 * `response.json()` and an SSE answer event by event, with no limit of its own).
 * - A body longer than `maxMessageBytes` (by its Content-Length, or once that many bytes have
 *   been read, an endless stream too) is cut off: the request's connection is cancelled and
 *   `onfatal` is told why, so the caller resets its connection to that server and the waiting
 *   call gets the reason.
 * - A body that breaks off (the server crashed mid-answer) is told to `onfatal` the same way:
 *   the SDK would otherwise wait for the answer of an SSE stream that is gone until the time
 *   limit.
 * - An SSE answer whose event is not JSON is told to `onfatal` the same way: the SDK only logs
 *   such an event and would wait for the call's answer until the time limit.
 * - The optional standalone GET stream (server-initiated messages) is not opened: Steward asks
 *   for no server-initiated requests (no sampling, elicitation or roots) and its answers come on
 *   the POST that asked; the request is answered 405 here, which the SDK reads as "not offered".
 */

export interface BoundedFetchOptions {
  maxMessageBytes: number;
  /** A body cut off or broken off: why (the caller ends its connection to the server). */
  onfatal: (reason: string) => void;
  /** The underlying fetch (default: the global one). */
  fetch?: typeof fetch;
}

export function boundedFetch(opts: BoundedFetchOptions): typeof fetch {
  const base = opts.fetch ?? fetch;
  const max = opts.maxMessageBytes;
  const tooLong = `the server's answer is longer than ${max} bytes (the limit of its registration's maxMessageBytes); it was cut off and the connection reset`;
  return async (input, init) => {
    const method = (init?.method ?? (input instanceof Request ? input.method : 'GET')).toUpperCase();
    if (method === 'GET') return new Response(null, { status: 405, statusText: 'not opened by Steward' });
    const res = await base(input, init);
    if (!res.body) return res;
    const declared = Number(res.headers.get('content-length') ?? NaN);
    if (Number.isFinite(declared) && declared > max) {
      await res.body.cancel().catch(() => undefined);
      opts.onfatal(tooLong);
      throw new Error(tooLong);
    }
    const reader = res.body.getReader();
    const events = (res.headers.get('content-type') ?? '').toLowerCase().startsWith('text/event-stream') ? sseChecker() : undefined;
    let seen = 0;
    let done = false;
    const body = new ReadableStream<Uint8Array>({
      async pull(ctl) {
        let r: Awaited<ReturnType<typeof reader.read>>;
        try {
          r = await reader.read();
        } catch (err) {
          done = true;
          const why = `the server's answer broke off: ${(err as Error).message.slice(0, 200)}`;
          opts.onfatal(why);
          ctl.error(new Error(why));
          return;
        }
        if (r.done) {
          done = true;
          ctl.close();
          return;
        }
        seen += r.value.byteLength;
        if (seen > max) {
          done = true;
          void reader.cancel().catch(() => undefined);
          opts.onfatal(tooLong);
          ctl.error(new Error(tooLong));
          return;
        }
        const malformed = events?.(r.value);
        if (malformed !== undefined) {
          done = true;
          void reader.cancel().catch(() => undefined);
          const why = `the server's answer is not valid JSON-RPC (an event of its stream is not JSON: ${malformed}); the connection was reset`;
          opts.onfatal(why);
          ctl.error(new Error(why));
          return;
        }
        ctl.enqueue(r.value);
      },
      cancel(reason) {
        if (done) return;
        done = true;
        return reader.cancel(reason).catch(() => undefined);
      },
    });
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}

/**
 * Follows an SSE stream chunk by chunk (split anywhere) and answers the first event whose data
 * is not JSON (its start), else undefined. What it keeps is the unfinished event, which the
 * stream's bound already limits.
 */
function sseChecker(): (chunk: Uint8Array) => string | undefined {
  const decoder = new TextDecoder();
  let pending = '';
  return (chunk) => {
    pending += decoder.decode(chunk, { stream: true });
    const blocks = pending.split(/\r?\n\r?\n/);
    pending = blocks.pop() ?? '';
    for (const block of blocks) {
      const data = block
        .split(/\r?\n/)
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).replace(/^ /, ''))
        .join('\n');
      if (data === '') continue;
      try {
        JSON.parse(data);
      } catch {
        return JSON.stringify(data.slice(0, 80));
      }
    }
    return undefined;
  };
}
