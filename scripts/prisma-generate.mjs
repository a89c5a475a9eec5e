// Generates the Prisma clients for SQLite and PostgreSQL. `prisma generate` needs no schema
// engine, but the CLI tries to download one first; where none is installed we point it at
// a stand-in so generation works offline. (Migrations never go through that stand-in:
// Steward applies them with Prisma's Wasm schema engine, see platform/migrate.ts.)
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

const env = { ...process.env };
if (!env.PRISMA_SCHEMA_ENGINE_BINARY) {
  const dir = path.join(tmpdir(), 'steward-prisma');
  mkdirSync(dir, { recursive: true });
  const standIn = path.join(dir, 'schema-engine-not-used');
  if (!existsSync(standIn)) {
    writeFileSync(standIn, '#!/bin/sh\necho "steward: the native schema engine is not used for generate" >&2\nexit 1\n');
    chmodSync(standIn, 0o755);
  }
  env.PRISMA_SCHEMA_ENGINE_BINARY = standIn;
}
for (const provider of ['sqlite', 'postgres']) {
  const r = spawnSync('npx', ['prisma', 'generate', '--schema', path.join('prisma', provider)], { stdio: ['ignore', 'pipe', 'inherit'], env });
  if (r.status !== 0) process.exit(r.status ?? 1);
}
