// Copies prisma/models.prisma into each provider's schema folder.
import { copyFileSync } from 'node:fs';
for (const provider of ['sqlite', 'postgres']) {
  copyFileSync(new URL('../prisma/models.prisma', import.meta.url), new URL(`../prisma/${provider}/models.prisma`, import.meta.url));
}
