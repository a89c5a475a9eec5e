// Copies prisma/models.prisma (the data model, written once) into each provider's schema
// folder (prisma/sqlite, prisma/postgres: a Prisma multi-file schema of schema.prisma with the
// datasource and generator, plus this copy). test/db/prisma.test.ts fails when a copy differs.
import { readFileSync, writeFileSync } from 'node:fs';

const models = readFileSync(new URL('../prisma/models.prisma', import.meta.url), 'utf8');
for (const provider of ['sqlite', 'postgres']) {
  const target = new URL(`../prisma/${provider}/models.prisma`, import.meta.url);
  let current = null;
  try {
    current = readFileSync(target, 'utf8');
  } catch {
    // not there yet
  }
  if (current !== models) {
    writeFileSync(target, models);
    console.log(`prisma-sync: updated prisma/${provider}/models.prisma`);
  }
}
