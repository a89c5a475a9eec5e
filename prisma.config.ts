/**
 * Prisma configuration. The schema folder follows DATABASE_URL: `file:` URLs use prisma/sqlite,
 * `postgres://` and `postgresql://` URLs use prisma/postgres; without DATABASE_URL, the SQLite
 * file .data/steward.db (under STEWARD_DATA_DIR when set).
 *
 * Prisma 7's CLI downloads its native schema engine on every command. Where none is installed
 * (no internet, as in CI here), the CLI is pointed at prisma/engine-bridge/schema-engine: the
 * same engine compiled to Wasm (@prisma/schema-engine-wasm) behind the native engine's
 * JSON-RPC interface, so every `prisma migrate ...` command works offline. Machines with a
 * native engine, or with PRISMA_SCHEMA_ENGINE_BINARY set, take Prisma's normal path.
 * STEWARD_SCHEMA_ENGINE=bridge forces the bridge, =native forbids it.
 */
import { existsSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'prisma/config';

const root = path.dirname(fileURLToPath(import.meta.url));

const url =
  process.env.DATABASE_URL || `file:${path.join(path.resolve(root, process.env.STEWARD_DATA_DIR || '.data'), 'steward.db')}`;
const provider = /^postgres(ql)?:\/\//i.test(url) ? 'postgres' : 'sqlite';

/** Is a native schema engine where the prisma CLI looks for one (so that it will not download)? */
function nativeSchemaEngineInstalled(): boolean {
  const require = createRequire(import.meta.url);
  const dirs: string[] = [];
  try {
    const prismaDir = path.dirname(require.resolve('prisma/package.json', { paths: [root] }));
    dirs.push(prismaDir, path.dirname(prismaDir), path.join(prismaDir, 'runtime'));
    dirs.push(path.dirname(require.resolve('@prisma/engines/package.json', { paths: [prismaDir] })));
  } catch {
    // prisma or @prisma/engines not installed
  }
  const engineFile = (f: string) => f.startsWith('schema-engine-') && !/\.(gz|sha256|sig|tmp|lock)$/.test(f);
  return dirs.some((dir) => existsSync(dir) && readdirSync(dir).some(engineFile));
}

function useEngineBridge(): boolean {
  const choice = process.env.STEWARD_SCHEMA_ENGINE;
  if (choice === 'bridge') return true;
  if (choice === 'native') return false;
  if (process.env.PRISMA_SCHEMA_ENGINE_BINARY || process.env.PRISMA_MIGRATION_ENGINE_BINARY) return false;
  return !nativeSchemaEngineInstalled();
}

if (useEngineBridge()) {
  process.env.PRISMA_SCHEMA_ENGINE_BINARY = path.join(root, 'prisma', 'engine-bridge', 'schema-engine');
  // the bridge loads better-sqlite3, a native module: run it with the CLI's own node
  process.env.STEWARD_ENGINE_BRIDGE_NODE = process.execPath;
}

export default defineConfig({
  schema: path.join(root, 'prisma', provider),
  migrations: { path: path.join(root, 'prisma', provider, 'migrations') },
  datasource: { url },
});
