/**
 * The MCP servers of one Steward process: a client connection per registered server, opened on
 * first use and kept, with the official SDK (`Client`; stdio servers through a transport over a
 * sandboxed child, Streamable HTTP servers by URL with a bearer token by reference).
 *
 * A server that fails (cannot start, crashes, hangs past a call's time limit, speaks malformed
 * JSON-RPC, sends a message over its `maxMessageBytes` or an endless stream) is dropped and
 * reconnected on a later use, after a back-off that doubles with each failure in a row (1 s,
 * 2 s, 4 s, ... up to 30 s); meanwhile a use fails at once with the reason. Whatever a server
 * does stays in its client: reads are bounded before they are buffered (transport.ts for stdio,
 * http.ts for HTTP), and every failure is an error of the call that was waiting (with the reason
 * the transport found), never an exception of the process. Every change of a server's state is
 * reported (`onState`) for the doctor and /status. No Temporal imports.
 */
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
// the SDK's client (about 7 MB of heap with its schemas) is loaded when a first server is opened
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { CallToolResult, Tool } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { mcpToolAllowed, mcpWireName, type McpServerSpec } from '../../common/mcp.js';
import type { SandboxedStdioTransport } from './transport.js';

export type McpState = 'idle' | 'connecting' | 'ready' | 'down';

export interface McpToolInfo {
  /** The tool's name on its server. */
  name: string;
  /** `server__tool`; absent when the name does not fit a model API's tool names. */
  wire?: string;
  description: string;
  /** The tool's input JSON Schema as the server gave it. */
  inputSchema: Record<string, unknown>;
  /** Offered to the model: allowed by the registration, a name that fits, a schema Steward can check. */
  offered: boolean;
  /** Why it is not offered. */
  why?: string;
  /** The zod schema its arguments are checked with (offered tools only). */
  validator?: z.ZodType;
}

export interface McpServerStatus {
  name: string;
  state: McpState;
  tools: number;
  failures: number;
  lastError?: string;
  /** When the next connection may be tried (after a failure). */
  retryAt?: number;
}

export class McpUnavailableError extends Error {
  override name = 'McpUnavailableError';
}

/** A call ended because the transport cut its server off (the reason is the message). */
export class McpCallError extends Error {
  override name = 'McpCallError';
}

export interface McpManagerOptions {
  /** Each stdio server gets `<dataDir>/mcp/<name>/` as its writable directory. */
  dataDir: string;
  /** Where `env:STEWARD_MCP_*` references are read (default process.env). */
  env?: NodeJS.ProcessEnv;
  /** Connecting and listing tools (default 20 s). */
  connectTimeoutMs?: number;
  /** The first back-off after a failure (default 1 s), doubled per failure in a row up to 30 s. */
  backoffMs?: number;
  /** A state change, for the store (doctor, /status). */
  onState?: (status: McpServerStatus) => void;
  /** A root-run Steward may run stdio servers as this host user (see domain/sandbox.ts). */
  runAs?: { uid: number; gid: number };
  /** The fetch under HTTP servers' bounded fetch (default: the global one). */
  fetch?: typeof fetch;
  now?: () => number;
}

interface Conn {
  key: string;
  client: Client;
  transport: Transport;
  tools: McpToolInfo[];
  /** Why the transport ended the connection (a message too long, an endless stream, a body broken off). */
  fatal?: string;
}

interface Entry {
  status: McpServerStatus;
  conn?: Conn;
  connecting?: Promise<Conn>;
}

const MAX_BACKOFF_MS = 30_000;

/** An error's text; a schema's refusal of what the server sent (the SDK throws zod's issues as JSON) in one line. */
function errorText(err: unknown): string {
  const issues = (err as { issues?: unknown }).issues;
  if (Array.isArray(issues)) {
    const shown = (issues as Array<{ path?: unknown[]; message?: string }>).slice(0, 3).map((i) => `${(i.path ?? []).join('.') || '(message)'}: ${i.message ?? 'invalid'}`);
    return `the server's answer is not valid JSON-RPC (${shown.join('; ')})`;
  }
  return (err as Error).message;
}

/** The value of an `env:NAME` reference, or an error naming what is missing. */
function resolveRef(env: NodeJS.ProcessEnv, ref: string): string {
  const name = ref.slice('env:'.length);
  const v = env[name];
  if (v === undefined || v === '') throw new McpUnavailableError(`${name} is not set in Steward's environment`);
  return v;
}

/** The zod schema of a tool's input JSON Schema; throws when it cannot be read. */
export function toolValidator(schema: unknown): z.ZodType {
  if (!schema || typeof schema !== 'object' || (schema as { type?: unknown }).type !== 'object') throw new Error('the input schema is not a JSON Schema object');
  return z.fromJSONSchema(schema as Parameters<typeof z.fromJSONSchema>[0]);
}

function describeTools(spec: McpServerSpec, listed: Tool[]): McpToolInfo[] {
  return listed.map((t): McpToolInfo => {
    const base = { name: t.name, description: (t.description ?? '').slice(0, 2000), inputSchema: t.inputSchema as Record<string, unknown> };
    const wire = mcpWireName(spec.name, t.name);
    if (!wire) return { ...base, offered: false, why: 'its name does not fit a tool name (letters, digits, _ and -, at most 64 with the server name)' };
    if (!mcpToolAllowed(spec, t.name)) return { ...base, wire, offered: false, why: 'not on the allowTools list' };
    try {
      return { ...base, wire, offered: true, validator: toolValidator(t.inputSchema) };
    } catch (err) {
      return { ...base, wire, offered: false, why: `its input schema cannot be checked: ${(err as Error).message.slice(0, 200)}` };
    }
  });
}

/** A transport whose reads are bounded; `onfatal` is told why it cut a server off. */
async function transportFor(spec: McpServerSpec, opts: McpManagerOptions, env: NodeJS.ProcessEnv, onfatal: (reason: string) => void): Promise<Transport> {
  if (spec.transport === 'http') {
    const token = spec.tokenRef ? resolveRef(env, spec.tokenRef) : undefined;
    const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
    const { boundedFetch } = await import('./http.js');
    return new StreamableHTTPClientTransport(new URL(spec.url), {
      fetch: boundedFetch({ maxMessageBytes: spec.maxMessageBytes, onfatal, ...(opts.fetch ? { fetch: opts.fetch } : {}) }),
      // no reconnection of a stream that broke off: the connection is reset instead
      reconnectionOptions: { initialReconnectionDelay: 1000, maxReconnectionDelay: 1000, reconnectionDelayGrowFactor: 1, maxRetries: 0 },
      ...(token ? { requestInit: { headers: { Authorization: `Bearer ${token}` } } } : {}),
    });
  }
  const workTree = path.join(opts.dataDir, 'mcp', spec.name);
  await mkdir(workTree, { recursive: true, mode: 0o700 });
  const vars = Object.fromEntries(Object.entries(spec.env).map(([k, ref]) => [k, resolveRef(env, ref)]));
  // the stdio framing comes with the SDK's message schemas: loaded with a first stdio server
  const { SandboxedStdioTransport } = await import('./transport.js');
  const t = new SandboxedStdioTransport(
    {
      argv: spec.command,
      workTree,
      allowlist: ['*'], // the operator named the program; the allowlist gates agents' commands
      roBinds: spec.roBinds,
      env: vars,
      network: spec.network,
      ...(opts.runAs ? { runAs: opts.runAs } : {}),
    },
    { maxMessageBytes: spec.maxMessageBytes },
  );
  t.onfatal = onfatal;
  return t;
}

export function createMcpManager(opts: McpManagerOptions) {
  const env = opts.env ?? process.env;
  const now = opts.now ?? Date.now;
  const connectTimeoutMs = opts.connectTimeoutMs ?? 20_000;
  const backoffMs = opts.backoffMs ?? 1000;
  const entries = new Map<string, Entry>();

  const entryOf = (name: string): Entry => {
    let e = entries.get(name);
    if (!e) entries.set(name, (e = { status: { name, state: 'idle', tools: 0, failures: 0 } }));
    return e;
  };
  const report = (e: Entry) => opts.onState?.({ ...e.status });

  /** Drop a connection after a failure: the next use reconnects after the back-off. */
  const fail = (e: Entry, conn: Conn | undefined, why: string) => {
    if (conn && e.conn !== conn) return; // an older connection's late close
    e.conn = undefined;
    e.status.failures++;
    e.status.state = 'down';
    e.status.lastError = why;
    e.status.retryAt = now() + Math.min(MAX_BACKOFF_MS, backoffMs * 2 ** (e.status.failures - 1));
    report(e);
    if (conn) void conn.client.close().catch(() => undefined);
  };

  const isSandboxed = (t: Transport): t is SandboxedStdioTransport => typeof (t as Partial<SandboxedStdioTransport>).stderrTail === 'function';

  async function open(spec: McpServerSpec, e: Entry, key: string): Promise<Conn> {
    e.status.state = 'connecting';
    let conn: Conn | undefined;
    // why the transport cut the server off: the reason of the call (or the connection) that waited
    let fatal: string | undefined;
    let client: Client | undefined;
    const onfatal = (reason: string) => {
      if (fatal !== undefined) return;
      fatal = reason;
      if (conn) {
        conn.fatal = reason;
        fail(e, conn, reason.slice(0, 500));
      } else void client?.close().catch(() => undefined);
    };
    const transport = await transportFor(spec, opts, env, onfatal);
    const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
    client = new Client({ name: 'steward', version: '0.1.0' }, { capabilities: {} });
    let stderr = () => '';
    if (isSandboxed(transport)) stderr = () => transport.stderrTail().trim().slice(-500);
    client.onclose = () => {
      if (conn) fail(e, conn, fatal ?? `the server ended${stderr() ? `: ${stderr()}` : ''}`);
    };
    client.onerror = (err) => {
      e.status.lastError = err.message.slice(0, 500);
    };
    try {
      await client.connect(transport, { timeout: connectTimeoutMs });
      const listed: Tool[] = [];
      let cursor: string | undefined;
      for (let page = 0; page < 20; page++) {
        const r = await client.listTools(cursor ? { cursor } : {}, { timeout: connectTimeoutMs });
        listed.push(...r.tools);
        cursor = r.nextCursor;
        if (!cursor) break;
      }
      if (fatal !== undefined) throw new Error(fatal);
      conn = { key, client, transport, tools: describeTools(spec, listed) };
      return conn;
    } catch (err) {
      await client.close().catch(() => undefined);
      const why = `${fatal ?? (err as Error).message}${stderr() ? ` (stderr: ${stderr()})` : ''}`;
      throw new McpUnavailableError(why.slice(0, 1000));
    }
  }

  /** The server's open connection, connecting when there is none (unless it failed moments ago). */
  async function connection(spec: McpServerSpec): Promise<Conn> {
    const e = entryOf(spec.name);
    const key = JSON.stringify(spec);
    if (e.conn && e.conn.key !== key) {
      // the registration changed: start afresh
      const old = e.conn;
      e.conn = undefined;
      e.status.failures = 0;
      delete e.status.retryAt;
      void old.client.close().catch(() => undefined);
    }
    if (e.conn) return e.conn;
    if (e.connecting) return e.connecting;
    if (e.status.retryAt !== undefined && now() < e.status.retryAt) {
      const wait = Math.ceil((e.status.retryAt - now()) / 1000);
      throw new McpUnavailableError(`the MCP server ${spec.name} is down (${e.status.lastError ?? 'failed'}); it is tried again in ${wait} s`);
    }
    e.connecting = open(spec, e, key).then(
      (conn) => {
        e.conn = conn;
        e.status = { name: spec.name, state: 'ready', tools: conn.tools.filter((t) => t.offered).length, failures: 0 };
        report(e);
        return conn;
      },
      (err: unknown) => {
        fail(e, undefined, (err as Error).message);
        throw err;
      },
    );
    try {
      return await e.connecting;
    } finally {
      e.connecting = undefined;
    }
  }

  return {
    /** The server's tools (connecting first when needed); throws McpUnavailableError when it cannot be reached. */
    async tools(spec: McpServerSpec): Promise<McpToolInfo[]> {
      return (await connection(spec)).tools;
    },

    /**
     * Call a tool within the registration's time limit. A time-out, a broken connection or a
     * protocol error ends the connection (the server is restarted on a later use) and throws;
     * a tool's own error comes back as a result with `isError`.
     */
    async call(spec: McpServerSpec, tool: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<CallToolResult> {
      const conn = await connection(spec);
      const e = entryOf(spec.name);
      try {
        return (await conn.client.callTool({ name: tool, arguments: args }, undefined, { timeout: spec.timeoutMs, ...(signal ? { signal } : {}) })) as CallToolResult;
      } catch (err) {
        if (signal?.aborted) throw err;
        // the transport's reason when it cut the server off (the client only says the connection closed)
        if (conn.fatal !== undefined) throw new McpCallError(conn.fatal);
        const message = errorText(err);
        // a tool's refusal of its input (invalid params) leaves the server healthy
        if (!/Invalid params|-32602/i.test(message)) fail(e, conn, message.slice(0, 500));
        throw message === (err as Error).message ? err : new McpCallError(message);
      }
    },

    status(name: string): McpServerStatus {
      return { ...entryOf(name).status };
    },

    /** Close one server's connection (its registration changed or went), or all. */
    async close(name?: string): Promise<void> {
      const targets = name === undefined ? [...entries.values()] : [entries.get(name)].filter((x): x is Entry => x !== undefined);
      for (const e of targets) {
        const conn = e.conn;
        e.conn = undefined;
        e.status.state = 'idle';
        if (conn) await conn.client.close().catch(() => undefined);
      }
    },
  };
}

export type McpManager = ReturnType<typeof createMcpManager>;
