/**
 * The MCP stdio transport over a sandboxed child: newline-delimited JSON-RPC on the process's
 * stdin and stdout (the SDK's own framing, `ReadBuffer` and `serializeMessage`), the process
 * started by `spawnSandboxed` (domain/sandbox.ts) rather than spawned directly, so a server
 * runs under the same bubblewrap sandbox as commands. A line that is not JSON-RPC is reported
 * through `onerror` and counted; a flood of output without a line end ends the server.
 */
import { ReadBuffer, serializeMessage } from '@modelcontextprotocol/sdk/shared/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { spawnSandboxed, type LongSandboxRequest, type SandboxedProcess } from '../sandbox.js';

/** Output held without a complete message before the server counts as misbehaving. */
const MAX_PENDING_BYTES = 16 * 1024 * 1024;

export class SandboxedStdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;
  /** Lines that were not JSON-RPC messages. */
  malformed = 0;
  private proc: SandboxedProcess | undefined;
  private readonly buffer = new ReadBuffer();
  private pending = 0;
  private closed = false;

  constructor(private readonly request: LongSandboxRequest) {}

  async start(): Promise<void> {
    if (this.proc) throw new Error('the transport is started already');
    const proc = await spawnSandboxed(this.request);
    this.proc = proc;
    proc.stdout.on('data', (chunk: Buffer) => {
      this.pending += chunk.length;
      this.buffer.append(chunk);
      this.drain();
      if (this.pending > MAX_PENDING_BYTES) {
        this.onerror?.(new Error(`the server wrote more than ${MAX_PENDING_BYTES} bytes without a complete message`));
        proc.kill();
      }
    });
    void proc.exited.then(() => {
      this.closed = true;
      this.buffer.clear();
      this.onclose?.();
    });
  }

  private drain(): void {
    for (;;) {
      let message: JSONRPCMessage | null;
      try {
        message = this.buffer.readMessage();
      } catch (err) {
        this.pending = 0;
        this.malformed++;
        this.onerror?.(new Error(`malformed JSON-RPC from the server: ${(err as Error).message.slice(0, 200)}`));
        continue;
      }
      if (message === null) return;
      this.pending = 0;
      this.onmessage?.(message);
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
    if (!proc || this.closed || proc.stdin.destroyed) return Promise.reject(new Error('the server is not running'));
    return new Promise((resolvePromise) => {
      if (proc.stdin.write(serializeMessage(message))) resolvePromise();
      else proc.stdin.once('drain', resolvePromise);
    });
  }

  async close(): Promise<void> {
    const proc = this.proc;
    if (!proc || this.closed) return;
    proc.kill();
    await proc.exited;
  }
}
