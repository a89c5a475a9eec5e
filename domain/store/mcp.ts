/**
 * The store of MCP servers: McpServer (an operator's registration, and the state a worker last
 * found it in) and McpCall (one tool call of a turn, claimed before the server is called and
 * recorded with its result, so a retried activity never calls twice; status started, repeated
 * (its one repeat taken) or done). Plain rows in and out;
 * the rules live in common/mcp.ts and the MCP service.
 */
import { McpServerSchema, type McpServerSpec } from '../../common/mcp.js';
import type { McpCall, McpServer } from '../../generated/prisma/sqlite/client.js';
import type { Db } from '../db.js';
import { isUniqueViolation } from '../prisma-errors.js';

export type McpServerRow = McpServer;
export type McpCallRow = McpCall;

/** A registration with its parsed spec; a row that no longer parses is left out (and logged by the caller). */
export interface McpRegistration {
  spec: McpServerSpec;
  source: string;
  state: string;
  toolCount: number;
  lastError: string | null;
  checkedAt: Date | null;
}

function registrationOf(row: McpServerRow): McpRegistration | undefined {
  let raw: unknown;
  try {
    raw = JSON.parse(row.spec);
  } catch {
    return undefined;
  }
  const r = McpServerSchema.safeParse(raw);
  if (!r.success) return undefined;
  return { spec: r.data, source: row.source, state: row.state, toolCount: row.toolCount, lastError: row.lastError, checkedAt: row.checkedAt };
}

/** Every registered server, by name. */
export async function listMcpServers(db: Db): Promise<McpRegistration[]> {
  const rows = await db.mcpServer.findMany({ orderBy: { name: 'asc' } });
  return rows.map(registrationOf).filter((r): r is McpRegistration => r !== undefined);
}

export async function findMcpServer(db: Db, name: string): Promise<McpRegistration | null> {
  const row = await db.mcpServer.findUnique({ where: { name } });
  return row ? (registrationOf(row) ?? null) : null;
}

/** Add a registration; false when the name is taken. */
export async function insertMcpServer(db: Db, spec: McpServerSpec, source: 'api' | 'config'): Promise<boolean> {
  try {
    await db.mcpServer.create({ data: { name: spec.name, spec: JSON.stringify(spec), source } });
    return true;
  } catch (err) {
    if (isUniqueViolation(err)) return false;
    throw err;
  }
}

/** Write the config file's registrations (source config): new ones added, changed ones replaced, ones gone from the file removed. */
export async function syncConfigMcpServers(db: Db, specs: readonly McpServerSpec[]): Promise<{ added: string[]; updated: string[]; removed: string[]; conflicts: string[] }> {
  const out = { added: [] as string[], updated: [] as string[], removed: [] as string[], conflicts: [] as string[] };
  const existing = new Map((await db.mcpServer.findMany()).map((r) => [r.name, r]));
  for (const spec of specs) {
    const row = existing.get(spec.name);
    const json = JSON.stringify(spec);
    if (!row) {
      if (await insertMcpServer(db, spec, 'config')) out.added.push(spec.name);
    } else if (row.source !== 'config') {
      out.conflicts.push(spec.name);
    } else if (row.spec !== json) {
      await db.mcpServer.update({ where: { name: spec.name }, data: { spec: json, state: 'unknown', toolCount: 0, lastError: null } });
      out.updated.push(spec.name);
    }
  }
  const names = new Set(specs.map((s) => s.name));
  for (const row of existing.values()) {
    if (row.source === 'config' && !names.has(row.name)) {
      await db.mcpServer.delete({ where: { name: row.name } });
      out.removed.push(row.name);
    }
  }
  return out;
}

export async function deleteMcpServer(db: Db, name: string): Promise<boolean> {
  const r = await db.mcpServer.deleteMany({ where: { name } });
  return r.count > 0;
}

/** What a worker last found: its state, tool count and error (the doctor and /status read it). */
export async function recordMcpState(db: Db, name: string, state: { state: string; toolCount?: number; lastError?: string | null }): Promise<void> {
  await db.mcpServer.updateMany({
    where: { name },
    data: { state: state.state, ...(state.toolCount !== undefined ? { toolCount: state.toolCount } : {}), ...(state.lastError !== undefined ? { lastError: state.lastError?.slice(0, 2000) ?? null } : {}), checkedAt: new Date() },
  });
}

/** `mcp:<turnId>:<toolCallId>`. */
export const mcpCallKey = (turnId: string, toolCallId: string): string => `mcp:${turnId}:${toolCallId}`;

export function findMcpCall(db: Db, key: string): Promise<McpCallRow | null> {
  return db.mcpCall.findUnique({ where: { key } });
}

/** Claim a call before the server is called; false when a row for it exists already. */
export async function claimMcpCall(db: Db, key: string, server: string, tool: string): Promise<boolean> {
  try {
    await db.mcpCall.create({ data: { key, server, tool, status: 'started' } });
    return true;
  } catch (err) {
    if (isUniqueViolation(err)) return false;
    throw err;
  }
}

/**
 * Take the one repeat a claimed call may have (its first attempt died while waiting): true for
 * the first attempt to ask, false once it has been repeated (status `repeated`) or recorded.
 */
export async function repeatMcpCall(db: Db, key: string): Promise<boolean> {
  const r = await db.mcpCall.updateMany({ where: { key, status: 'started' }, data: { status: 'repeated' } });
  return r.count === 1;
}

/** Record a call's outcome (the tool message blob the model gets, facts for the receipt). */
export async function finishMcpCall(db: Db, key: string, outcome: { ok: boolean; resultText: string; detail: Record<string, unknown> }): Promise<void> {
  await db.mcpCall.update({ where: { key }, data: { status: 'done', ok: outcome.ok, result: outcome.resultText, detail: JSON.stringify(outcome.detail), finishedAt: new Date() } });
}
