/**
 * The MCP stdio transport over a sandboxed child: newline-delimited JSON-RPC on the process's
 * stdin and stdout (the SDK's framing: one JSON message a line), the process started by
 * `spawnSandboxed` (domain/sandbox.ts) rather than spawned directly, so a server runs under the
 * same bubblewrap sandbox as commands.
 *
 * Reads are bounded before they are buffered (the SDK's own `ReadBuffer` holds a whole line
 * first and throws from the stream's data handler past 10 MB, which ended the process):
 * - a line longer than `maxMessageBytes` is never held: its bytes are counted, not kept, and
 *   the server is ended with the reason;
 * - more than `maxUnaskedBytes` of output since Steward last wrote to the server, within
 *   UNASKED_WINDOW_MS (an endless stream of small messages), ends it too; a slow trickle of
 *   notifications from an idle server does not;
 * - a line that is not JSON-RPC is reported through `onerror` and counted; more than
 *   MAX_MALFORMED_IN_A_ROW of them end the server; one that is JSON with the id of a request
 *   (a malformed answer) fails that request at once with the reason.
 * Why the server was ended is `fatal` (and told to `onfatal` at once), so the caller can make it
 * the result of the calls that were waiting. No handler here throws: every error of the child's
 * streams becomes a reason, never an uncaught exception.
 */
import { deserializeMessage, serializeMessage } from '@modelcontextprotocol/sdk/shared/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { spawnSandboxed, type LongSandboxRequest, type SandboxedProcess } from '../sandbox.js';

/** The window `maxUnaskedBytes` is counted in (restarted whenever Steward writes). */
export const UNASKED_WINDOW_MS = 10_000;

/** Lines in a row that are not JSON-RPC before the server is ended. */
export const MAX_MALFORMED_IN_A_ROW = 100;

export interface StdioBounds {
  /** The longest line (one message) read from the server. */
  maxMessageBytes: number;
  /** Output read since Steward last wrote to the server, within UNASKED_WINDOW_MS (default 4x maxMessageBytes). */
  maxUnaskedBytes?: number;
}

/**
 * Splits a byte stream into lines without ever holding more than `maxLineBytes` of one line.
 * `push` returns the complete lines of a chunk, or `overflow` once a line has passed the bound
 * (the rest of the stream is then ignored).
 */
export class BoundedLineReader {
  private parts: Buffer[] = [];
  private held = 0;
  private over = false;

  constructor(private readonly maxLineBytes: number) {}

  push(chunk: Buffer): { lines: Buffer[]; overflow: boolean } {
    const lines: Buffer[] = [];
    if (this.over) return { lines, overflow: true };
    let rest = chunk;
    for (;;) {
      const at = rest.indexOf(0x0a);
      const piece = at === -1 ? rest : rest.subarray(0, at);
      if (this.held + piece.length > this.maxLineBytes) {
        this.over = true;
        this.parts = [];
        this.held = 0;
        return { lines, overflow: true };
      }
      if (at === -1) {
        if (piece.length > 0) {
          // a copy: the chunk's memory is not kept alive by a small tail
          this.parts.push(Buffer.from(piece));
          this.held += piece.length;
        }
        return { lines, overflow: false };
      }
      lines.push(this.parts.length === 0 ? piece : Buffer.concat([...this.parts, piece]));
      this.parts = [];
      this.held = 0;
      rest = rest.subarray(at + 1);
    }
  }
}

/** The id of a line that is JSON with an id and no method (an answer), else undefined. */
function answerId(text: string): string | number | undefined {
  try {
    const v = JSON.parse(text) as unknown;
    if (!v || typeof v !== 'object' || Array.isArray(v) || 'method' in v) return undefined;
    const id = (v as { id?: unknown }).id;
    return typeof id === 'string' || (typeof id === 'number' && Number.isSafeInteger(id)) ? id : undefined;
  } catch {
    return undefined;
  }
}

export class SandboxedStdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;
  /** Told once, at once, when the server is ended for misbehaving (before its exit closes the transport). */
  onfatal?: (reason: string) => void;
  /** Lines that were not JSON-RPC messages. */
  malformed = 0;
  /** Why the transport ended the server, if it did. */
  fatal: string | undefined;
  private proc: SandboxedProcess | undefined;
  private readonly lines: BoundedLineReader;
  private readonly maxMessageBytes: number;
  private readonly maxUnaskedBytes: number;
  private unasked = 0;
  private unaskedSince = Date.now();
  private malformedInARow = 0;
  private closed = false;

  constructor(
    private readonly request: LongSandboxRequest,
    bounds: StdioBounds,
  ) {
    this.maxMessageBytes = bounds.maxMessageBytes;
    this.maxUnaskedBytes = bounds.maxUnaskedBytes ?? 4 * bounds.maxMessageBytes;
    this.lines = new BoundedLineReader(this.maxMessageBytes);
  }

  async start(): Promise<void> {
    if (this.proc) throw new Error('the transport is started already');
    const proc = await spawnSandboxed(this.request);
    this.proc = proc;
    proc.stdout.on('data', (chunk: Buffer) => {
      try {
        this.read(chunk);
      } catch (err) {
        // a handler of a message threw: never out of a stream's event
        this.end(`reading the server's output failed: ${(err as Error).message.slice(0, 200)}`);
      }
    });
    proc.stdout.on('error', (err: Error) => this.end(`the server's output failed: ${err.message.slice(0, 200)}`));
    proc.stdin.on('error', () => undefined); // the server may exit while we write (EPIPE)
    void proc.exited.then(() => {
      this.closed = true;
      this.onclose?.();
    });
  }

  private read(chunk: Buffer): void {
    if (this.fatal !== undefined) return;
    if (Date.now() - this.unaskedSince > UNASKED_WINDOW_MS) {
      this.unasked = 0;
      this.unaskedSince = Date.now();
    }
    this.unasked += chunk.length;
    if (this.unasked > this.maxUnaskedBytes) {
      this.end(`the server wrote more than ${this.maxUnaskedBytes} bytes without being asked for more (an endless stream); it was ended`);
      return;
    }
    const { lines, overflow } = this.lines.push(chunk);
    for (const line of lines) {
      if (this.fatal !== undefined) return;
      this.line(line);
    }
    if (overflow) this.end(`the server sent a message longer than ${this.maxMessageBytes} bytes (the limit of its registration's maxMessageBytes); it was cut off and the server ended`);
  }

  private line(raw: Buffer): void {
    const text = raw.toString('utf8').replace(/\r$/, '');
    if (text.trim() === '') return;
    let message: JSONRPCMessage;
    try {
      message = deserializeMessage(text);
    } catch (err) {
      this.malformed++;
      this.malformedInARow++;
      const why = `malformed JSON-RPC from the server: ${(err as Error).message.replace(/\s+/g, ' ').slice(0, 200)}`;
      this.onerror?.(new Error(why));
      if (this.malformedInARow > MAX_MALFORMED_IN_A_ROW) {
        this.end(`the server wrote more than ${MAX_MALFORMED_IN_A_ROW} lines in a row that are not JSON-RPC; it was ended`);
        return;
      }
      // an answer to a request, malformed: the request fails now with the reason, not at its time limit
      const id = answerId(text);
      if (id !== undefined) this.onmessage?.({ jsonrpc: '2.0', id, error: { code: -32603, message: `the server's answer is not valid JSON-RPC (${why})` } });
      return;
    }
    this.malformedInARow = 0;
    this.onmessage?.(message);
  }

  /** End the server for misbehaving: the reason is kept and told; its exit closes the transport. */
  private end(reason: string): void {
    if (this.fatal !== undefined) return;
    this.fatal = reason;
    try {
      this.onerror?.(new Error(reason));
      this.onfatal?.(reason);
    } finally {
      this.proc?.kill();
    }
  }

  /** The last of what the server wrote to stderr (for errors). */
  stderrTail(): string {
    return this.proc?.stderrTail() ?? '';
  }

  /** The sandbox's exit, once it has exited. */
  get exited(): Promise<{ code: number | null; signal: NodeJS.Signals | null }> | undefined {
    return this.proc?.exited;
  }

  send(message: JSONRPCMessage): Promise<void> {
    const proc = this.proc;
    if (!proc || this.closed || this.fatal !== undefined || proc.stdin.destroyed) return Promise.reject(new Error(this.fatal ?? 'the server is not running'));
    this.unasked = 0;
    this.unaskedSince = Date.now();
    return new Promise((resolvePromise, rejectPromise) => {
      if (proc.stdin.write(serializeMessage(message))) {
        resolvePromise();
        return;
      }
      // a full pipe: wait for it to drain, or for the server to end
      const onDrain = () => {
        resolvePromise();
      };
      proc.stdin.once('drain', onDrain);
      void proc.exited.then(() => {
        proc.stdin.removeListener('drain', onDrain);
        rejectPromise(new Error(this.fatal ?? 'the server ended'));
      });
    });
  }

  async close(): Promise<void> {
    const proc = this.proc;
    if (!proc || this.closed) return;
    proc.kill();
    await proc.exited;
  }
}
