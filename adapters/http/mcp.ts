/**
 * MCP servers over HTTP (bearer token = the operator):
 *   GET /api/v1/mcp/servers, POST /api/v1/mcp/servers (201) {registration, see common/mcp.ts},
 *   GET /api/v1/mcp/servers/{name}, DELETE /api/v1/mcp/servers/{name},
 *   GET /api/v1/mcp/servers/{name}/tools (connects: each tool, offered or why not, its approval).
 * Bodies are validated by the MCP service before anything changes.
 */
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { answer, errorResponses, json, parsedJsonBody, reply } from './common.js';
import { OPERATOR } from '../../common/roles.js';
import type { McpService } from '../../services/mcp.js';

const errors = errorResponses('McpError');
const Loose = z.record(z.string(), z.unknown());
const anyJson = { body: { content: { 'application/json': { schema: z.unknown().openapi({ type: 'object' }) } }, required: true } };
const NameParam = z.object({ name: z.string().min(1).max(64).openapi({ param: { name: 'name', in: 'path' } }) });

export function registerMcpRoutes(app: OpenAPIHono, mcp: McpService): void {
  const sec = [{ bearer: [] }];

  app.openapi(
    createRoute({ method: 'get', path: '/api/v1/mcp/servers', summary: 'Registered MCP servers with the state a worker last found them in', security: sec, responses: { 200: json(z.object({ servers: z.array(Loose) }), 'Servers'), ...errors } }),
    async (c) => c.json({ servers: (await mcp.list()) as unknown as Array<Record<string, unknown>> }, 200),
  );
  app.openapi(
    createRoute({
      method: 'post',
      path: '/api/v1/mcp/servers',
      summary: 'Register an MCP server: {"name", "transport": "stdio", "command", "roBinds"?, "network"?, "env"?} or {"name", "transport": "http", "url", "tokenRef"?}, with "allowTools"?, "readOnlyTools"?, "approval"?, "workspaces"?, "timeoutMs"?, "maxResultBytes"?, "maxMessageBytes"?',
      security: sec,
      request: anyJson,
      responses: { 201: json(Loose, 'Registered'), ...errors },
    }),
    async (c) => reply(c as never, await answer(async () => mcp.add(await parsedJsonBody(c), OPERATOR)), 201) as never,
  );
  app.openapi(
    createRoute({ method: 'get', path: '/api/v1/mcp/servers/{name}', summary: 'One MCP server: its registration and state', security: sec, request: { params: NameParam }, responses: { 200: json(Loose, 'Server'), ...errors } }),
    async (c) => reply(c as never, await answer(() => mcp.show(c.req.valid('param').name))) as never,
  );
  app.openapi(
    createRoute({ method: 'delete', path: '/api/v1/mcp/servers/{name}', summary: 'Remove an MCP server registered through the API (a STEWARD_MCP_CONFIG one is changed in its file)', security: sec, request: { params: NameParam }, responses: { 200: json(Loose, 'Removed'), ...errors } }),
    async (c) => reply(c as never, await answer(() => mcp.remove(c.req.valid('param').name, OPERATOR))) as never,
  );
  app.openapi(
    createRoute({ method: 'get', path: '/api/v1/mcp/servers/{name}/tools', summary: "A server's tools (this connects to it): each offered or why not, its approval policy", security: sec, request: { params: NameParam }, responses: { 200: json(Loose, 'Tools'), ...errors } }),
    async (c) => reply(c as never, await answer(() => mcp.tools(c.req.valid('param').name))) as never,
  );
}
