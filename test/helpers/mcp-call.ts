/**
 * One MCP call in a process of its own, as a worker's tool activity makes it: `node --import tsx
 * test/helpers/mcp-call.ts '<json>'` with {databaseUrl, dataDir, turnId, toolCallId, toolName,
 * input}. Prints `claimed` once the call reached the server's turn, and the outcome as a JSON
 * line when it ends. Tests kill it (SIGKILL) mid-call to stand for a worker that died.
 */
import { createDb } from '../../domain/db.js';
import { createMcpTools } from '../../domain/mcp/tools.js';

const args = JSON.parse(process.argv[2] ?? '{}') as { databaseUrl: string; dataDir: string; turnId: string; toolCallId: string; toolName: string; input: unknown };
const db = createDb(args.databaseUrl);
const mcp = createMcpTools({ db, dataDir: args.dataDir, registrationsTtlMs: 0 });
try {
  const outcome = await mcp.run({ db, turnId: args.turnId }, { toolCallId: args.toolCallId, toolName: args.toolName, input: args.input });
  process.stdout.write(`${JSON.stringify(outcome)}\n`);
} finally {
  await mcp.close();
  await db.$disconnect();
}
