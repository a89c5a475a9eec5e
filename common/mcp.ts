/**
 * Tools from MCP servers: what an operator's registration of a server is (zod), how a server's
 * tools are named to the model and to people, and the approval policy of each tool. Pure: the
 * config loader, the API, the CLI and the chat activities share it.
 *
 * Naming. OpenAI-compatible tool names match `^[a-zA-Z0-9_-]{1,64}$` (no dots), so a tool goes
 * on the wire as `<server>__<tool>` (a server name has no `_`, so the first `__` splits it) and
 * is shown to people as `<server>.<tool>`. A tool whose name does not fit (other characters, or
 * a wire name longer than 64) is not offered.
 */
import { z } from 'zod';
import { ROLES, roleAtLeast, type Role } from './roles.js';
import { referenceRefusal } from './secret-refs.js';

export const MCP_SERVER_NAME = /^[a-z][a-z0-9-]{0,23}$/;
/** A tool name as a server gives it that Steward can offer (`server__tool` within 64 characters). */
export const MCP_TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const ENV_REF = /^env:STEWARD_MCP_[A-Z0-9_]{1,64}$/;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;
/** As services/workspaces.ts names workspaces. */
const WORKSPACE_NAME = /^[a-z0-9][a-z0-9_-]{0,63}$/;

export const McpServerNameSchema = z.string().regex(MCP_SERVER_NAME, 'a server name is lowercase letters, digits and - (at most 24, starting with a letter)');
const ToolNameSchema = z.string().regex(MCP_TOOL_NAME, 'a tool name uses letters, digits, _ and - (at most 64)');
// the one rule of references (common/secret-refs.ts): never Steward's own settings, never its API token
const EnvRefSchema = z
  .string()
  .regex(ENV_REF, 'a secret is named by reference: env:STEWARD_MCP_<NAME>')
  .superRefine((ref, ctx) => {
    const why = referenceRefusal(ref, 'mcp');
    if (why) ctx.addIssue({ code: 'custom', message: why });
  });
const AbsolutePath = z
  .string()
  .min(1)
  .max(4096)
  .refine((p) => p.startsWith('/') && !p.includes('\0'), 'expected an absolute path');

/** never: runs at once; always: waits for an admin; a role: runs at once for that role and above, waits for the others. */
export const McpApprovalSchema = z.union([z.enum(['never', 'always']), z.enum(ROLES)], { error: 'an approval policy is never, always or a role (overlord, admin, operator, member, viewer)' });
export type McpApproval = z.infer<typeof McpApprovalSchema>;

const policyFields = {
  /** Only these tools are offered (absent: every tool the server lists). */
  allowTools: z.array(ToolNameSchema).max(200).optional(),
  /** Tools the operator marks read-only: they run without approval unless `approval` says otherwise. */
  readOnlyTools: z.array(ToolNameSchema).max(200).default([]),
  /** Per tool: never, always or a role; `*` for every tool. Absent: never for read-only tools, always for the rest. */
  approval: z.record(z.union([ToolNameSchema, z.literal('*')]), McpApprovalSchema).default({}),
  /** Only the chats of these workspaces are offered the server's tools (absent: every chat). */
  workspaces: z.array(z.string().regex(WORKSPACE_NAME, 'a workspace name')).max(100).optional(),
  /** One call's time limit. */
  timeoutMs: z.number().int().min(1000).max(90_000).default(30_000),
  /** Result text the model gets at most; the whole result is kept as a blob beyond it. */
  maxResultBytes: z.number().int().min(256).max(1_000_000).default(16_384),
  /**
   * The longest message read from the server (a stdio line, an HTTP answer's body): longer is cut
   * off before it is held and the connection reset, the call's result says so.
   */
  maxMessageBytes: z.number().int().min(65_536).max(64 * 1024 * 1024).default(8 * 1024 * 1024),
  enabled: z.boolean().default(true),
  description: z.string().max(500).optional(),
};

export const McpStdioServerSchema = z.strictObject({
  name: McpServerNameSchema,
  transport: z.literal('stdio'),
  /** argv: an absolute program path (e.g. the Node binary) and its arguments, run in the sandbox. */
  command: z
    .array(z.string().max(4096).refine((a) => !a.includes('\0'), 'no NUL bytes'))
    .min(1, 'command names the program first')
    .max(64)
    .refine((a) => (a[0] ?? '').startsWith('/'), 'command[0] is an absolute path (e.g. the Node binary)'),
  /** Host paths the server needs to read (the Node install, the server package), bound read-only. */
  roBinds: z.array(AbsolutePath).max(32).default([]),
  /** true: the sandbox shares the host's network (default: none). */
  network: z.boolean().default(false),
  /** The server's environment: each value a reference to one of Steward's STEWARD_MCP_ variables. */
  env: z.record(z.string().regex(ENV_NAME, 'an environment variable name'), EnvRefSchema).default({}),
  ...policyFields,
});

export const McpHttpServerSchema = z.strictObject({
  name: McpServerNameSchema,
  transport: z.literal('http'),
  /** The Streamable HTTP endpoint. */
  url: z
    .string()
    .max(2048)
    .refine((u) => {
      try {
        const p = new URL(u);
        return (p.protocol === 'http:' || p.protocol === 'https:') && p.username === '' && p.password === '';
      } catch {
        return false;
      }
    }, 'expected an http(s) URL without credentials (a token goes by reference in tokenRef)'),
  /** A bearer token by reference. */
  tokenRef: EnvRefSchema.optional(),
  ...policyFields,
});

export const McpServerSchema = z.discriminatedUnion('transport', [McpStdioServerSchema, McpHttpServerSchema], { error: 'transport is stdio or http' });
export type McpServerSpec = z.infer<typeof McpServerSchema>;
export type McpServerInput = z.input<typeof McpServerSchema>;

/** The file STEWARD_MCP_CONFIG names: `{"servers": [...]}`. */
export const McpConfigFileSchema = z.strictObject({
  servers: z
    .array(McpServerSchema)
    .max(50)
    .refine((s) => new Set(s.map((x) => x.name)).size === s.length, 'server names are unique'),
});

export const MCP_SEPARATOR = '__';

/** `server__tool` on the wire, or undefined when it does not fit the 64 characters the model APIs allow. */
export function mcpWireName(server: string, tool: string): string | undefined {
  const wire = `${server}${MCP_SEPARATOR}${tool}`;
  return MCP_TOOL_NAME.test(tool) && wire.length <= 64 ? wire : undefined;
}

/** A wire name's server and tool, or undefined for Steward's own tools. */
export function parseMcpWireName(wire: string): { server: string; tool: string } | undefined {
  const at = wire.indexOf(MCP_SEPARATOR);
  if (at <= 0) return undefined;
  const server = wire.slice(0, at);
  const tool = wire.slice(at + MCP_SEPARATOR.length);
  return MCP_SERVER_NAME.test(server) && tool.length > 0 ? { server, tool } : undefined;
}

/** How people see a tool: `server.tool`. */
export function mcpDisplayName(server: string, tool: string): string {
  return `${server}.${tool}`;
}

/** A `server.tool` name's server and tool (as receipts and approvals name MCP tools), or undefined for Steward's own tools. */
export function parseMcpDisplayName(shown: string): { server: string; tool: string } | undefined {
  const at = shown.indexOf('.');
  if (at <= 0) return undefined;
  const server = shown.slice(0, at);
  const tool = shown.slice(at + 1);
  return MCP_SERVER_NAME.test(server) && MCP_TOOL_NAME.test(tool) ? { server, tool } : undefined;
}

/** Whether a server offers this tool at all (its allow list). */
export function mcpToolAllowed(spec: Pick<McpServerSpec, 'allowTools'>, tool: string): boolean {
  return spec.allowTools === undefined || spec.allowTools.includes(tool);
}

/** Whether a chat (by its workspace, or none) is offered the server's tools. */
export function mcpServerFor(spec: Pick<McpServerSpec, 'workspaces' | 'enabled'>, workspace: string | null): boolean {
  return spec.enabled && (spec.workspaces === undefined || (workspace !== null && spec.workspaces.includes(workspace)));
}

/** A tool's approval policy: its own entry, else `*`, else never for read-only tools and always for the rest. */
export function mcpApprovalOf(spec: Pick<McpServerSpec, 'approval' | 'readOnlyTools'>, tool: string): McpApproval {
  return spec.approval[tool] ?? spec.approval['*'] ?? (spec.readOnlyTools.includes(tool) ? 'never' : 'always');
}

/**
 * Whether a call waits for an admin: STEWARD_APPROVAL_TOOLS first (`*`, `server.tool` or
 * `server.*` there always wait), then the tool's own policy; by role, the person whose message
 * led to the call decides (no person, e.g. an objective: the operator's own run, no wait).
 */
export function mcpNeedsApproval(
  approvalTools: readonly string[],
  spec: Pick<McpServerSpec, 'name' | 'approval' | 'readOnlyTools'>,
  tool: string,
  requesterRole: Role | undefined,
): boolean {
  if (approvalTools.includes('*') || approvalTools.includes(mcpDisplayName(spec.name, tool)) || approvalTools.includes(`${spec.name}.*`)) return true;
  const policy = mcpApprovalOf(spec, tool);
  if (policy === 'never') return false;
  if (policy === 'always') return true;
  return requesterRole === undefined ? false : !roleAtLeast(requesterRole, policy);
}

/**
 * mcpNeedsApproval with its reason in words (for `steward policy what-if`). `requesterRole`:
 * the role of the person whose message led to the call, null for none (an objective's run),
 * undefined when it is not known (a role policy is then judged as waiting).
 */
export function mcpApprovalVerdict(
  approvalTools: readonly string[],
  spec: Pick<McpServerSpec, 'name' | 'approval' | 'readOnlyTools'>,
  tool: string,
  requesterRole: Role | null | undefined,
): { approval: boolean; reason: string } {
  const shown = mcpDisplayName(spec.name, tool);
  const policy = mcpApprovalOf(spec, tool);
  const approval = requesterRole === undefined && policy !== 'never' && policy !== 'always' ? true : mcpNeedsApproval(approvalTools, spec, tool, requesterRole ?? undefined);
  if (approvalTools.includes('*')) return { approval, reason: 'every tool waits for approval ("*")' };
  if (approvalTools.includes(shown) || approvalTools.includes(`${spec.name}.*`)) return { approval, reason: `${approvalTools.includes(shown) ? shown : `${spec.name}.*`} is in the approval list` };
  const own = `${shown} is not in the approval list; the MCP server ${spec.name}'s policy for it is ${policy}`;
  if (policy === 'never' || policy === 'always') return { approval, reason: `${own} (${policy === 'always' ? 'always waits' : 'never waits'})` };
  const who = requesterRole === undefined ? "the requester's role was not recorded, so it is judged as waiting" : requesterRole === null ? 'no person asked (an objective run), so it runs' : `the requester was ${requesterRole}`;
  return { approval, reason: `${own} (${policy} and above run it at once; ${who})` };
}

/** `/status` for admins: each server's state and tool count (undefined when none is registered). */
export function mcpStatusLine(servers: ReadonlyArray<{ spec: Pick<McpServerSpec, 'name' | 'enabled'>; state: string; toolCount: number; lastError: string | null }>): string | undefined {
  if (servers.length === 0) return undefined;
  const one = (s: (typeof servers)[number]) =>
    !s.spec.enabled ? `${s.spec.name} disabled` : s.state === 'ready' ? `${s.spec.name} ready (${s.toolCount} tool${s.toolCount === 1 ? '' : 's'})` : `${s.spec.name} ${s.state}${s.lastError ? ` (${s.lastError.slice(0, 120)})` : ''}`;
  return `MCP servers: ${servers.map(one).join('; ')}`;
}
