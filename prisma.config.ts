/**
 * Prisma configuration: the schema folder follows DATABASE_URL (SQLite by default,
 * PostgreSQL for postgres:// URLs). Migrations are applied by Steward itself at start
 * (platform/migrate.ts, Prisma's schema engine compiled to Wasm), so no native engine
 * download is needed for `prisma generate` or for running Steward.
 */
import path from 'node:path';
import { defineConfig } from 'prisma/config';

const url = process.env.DATABASE_URL || `file:${path.resolve(process.env.STEWARD_DATA_DIR || '.data', 'steward.db')}`;
const provider = /^postgres(ql)?:\/\//.test(url) ? 'postgres' : 'sqlite';

export default defineConfig({
  schema: path.join('prisma', provider),
  migrations: { path: path.join('prisma', provider, 'migrations') },
  datasource: { url },
});
