/**
 * MCP servers as the CLI and the API manage them: register one (validated against the
 * registration schema; secrets only by reference), list and show them with the state a worker
 * last found, remove one, and list a server's tools with what Steward makes of each (offered or
 * why not, approval policy). Servers from the STEWARD_MCP_CONFIG file are the file's: they are
 * changed there, not here. Every refusal is an McpInputError and changes nothing.
 */
import { mcpApprovalOf, mcpDisplayName, McpServerNameSchema, McpServerSchema, type McpServerSpec } from '../common/mcp.js';
import type { Db } from '../domain/db.js';
import type { Actor } from '../domain/governance.js';
import type { McpManager } from '../domain/mcp/manager.js';
import { writeReceipt } from '../domain/receipts.js';
import { deleteMcpServer, findMcpServer, insertMcpServer, listMcpServers, type McpRegistration } from '../domain/store/mcp.js';
import { ServiceInputError } from './requests.js';

export class McpInputError extends ServiceInputError {
  override name = 'McpInputError';
}

export interface McpServerView {
  name: string;
  transport: 'stdio' | 'http';
  source: string;
  enabled: boolean;
  /** What a worker last found: unknown (not used yet), ready, down, connecting, idle. */
  state: string;
  tools: number;
  lastError: string | null;
  checkedAt: string | null;
  spec: McpServerSpec;
}

export interface McpToolView {
  name: string;
  /** `server.tool`, as people see it. */
  shown: string;
  /** `server__tool`, as the model calls it. */
  wire: string | null;
  offered: boolean;
  why?: string;
  approval: string;
  readOnly: boolean;
  description: string;
}

const view = (r: McpRegistration): McpServerView => ({
  name: r.spec.name,
  transport: r.spec.transport,
  source: r.source,
  enabled: r.spec.enabled,
  state: r.state,
  tools: r.toolCount,
  lastError: r.lastError,
  checkedAt: r.checkedAt?.toISOString() ?? null,
  spec: r.spec,
});

/**
 * The MCP registrations of the API and the CLI. `manager`: this process's MCP client (for
 * `tools`); `changed`: told after a registration is added or removed, so that this process's
 * turns read the registrations again at once (turns of other processes do within
 * REGISTRATIONS_TTL_MS, domain/mcp/tools.ts).
 */
export function createMcpService(opts: { db: Db; manager?: McpManager; changed?: () => void }) {
  const { db } = opts;
  const nameOf = (raw: string): string => {
    const r = McpServerNameSchema.safeParse(raw);
    if (!r.success) throw new McpInputError(r.error.issues[0]!.message);
    return r.data;
  };
  const existing = async (raw: string): Promise<McpRegistration> => {
    const name = nameOf(raw);
    const r = await findMcpServer(db, name);
    if (!r) throw new McpInputError(`no MCP server ${name}`, 404);
    return r;
  };
  return {
    async list(): Promise<McpServerView[]> {
      return (await listMcpServers(db)).map(view);
    },

    async show(name: string): Promise<McpServerView> {
      return view(await existing(name));
    },

    /** Register a server; the body is checked whole before anything is written. */
    async add(body: unknown, by: Actor): Promise<McpServerView> {
      const r = McpServerSchema.safeParse(body);
      if (!r.success) throw new McpInputError(r.error.issues.map((i) => `${i.path.join('.') || '(body)'}: ${i.message}`).join('; '));
      if (!(await insertMcpServer(db, r.data, 'api'))) throw new McpInputError(`an MCP server named ${r.data.name} exists already (remove it first)`, 409);
      opts.changed?.();
      await writeReceipt(db, { kind: 'mcp.change', actor: by.id, data: { action: 'add', server: r.data.name, transport: r.data.transport } });
      return view((await findMcpServer(db, r.data.name))!);
    },

    async remove(name: string, by: Actor): Promise<{ name: string }> {
      const r = await existing(name);
      if (r.source === 'config') throw new McpInputError(`the MCP server ${r.spec.name} comes from the STEWARD_MCP_CONFIG file: remove it there`, 409);
      await deleteMcpServer(db, r.spec.name);
      opts.changed?.();
      await opts.manager?.close(r.spec.name);
      await writeReceipt(db, { kind: 'mcp.change', actor: by.id, data: { action: 'remove', server: r.spec.name } });
      return { name: r.spec.name };
    },

    /** The server's tools, as this process's connection lists them (it connects when needed). */
    async tools(name: string): Promise<{ server: string; tools: McpToolView[] }> {
      const r = await existing(name);
      if (!opts.manager) throw new McpInputError('this Steward process runs no MCP client', 409);
      let listed;
      try {
        listed = await opts.manager.tools(r.spec);
      } catch (err) {
        throw new McpInputError(`the MCP server ${r.spec.name} is unavailable: ${(err as Error).message}`, 409);
      }
      return {
        server: r.spec.name,
        tools: listed.map((t) => ({
          name: t.name,
          shown: mcpDisplayName(r.spec.name, t.name),
          wire: t.wire ?? null,
          offered: t.offered,
          ...(t.why ? { why: t.why } : {}),
          approval: mcpApprovalOf(r.spec, t.name),
          readOnly: r.spec.readOnlyTools.includes(t.name),
          description: t.description.slice(0, 300),
        })),
      };
    },
  };
}

export type McpService = ReturnType<typeof createMcpService>;
