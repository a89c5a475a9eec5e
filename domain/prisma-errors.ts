/** Recognise Prisma's known request errors without importing a generated client. */
export function prismaErrorCode(err: unknown): string | undefined {
  if (typeof err === 'object' && err !== null && 'code' in err && typeof (err as { code: unknown }).code === 'string') {
    return (err as { code: string }).code;
  }
  return undefined;
}

/**
 * A unique constraint refused a write: P2002 from a model query, P2010 (a raw query failed)
 * whose driver adapter error is a unique violation, or that driver adapter error itself (a
 * statement sent to the adapter directly, domain/sql.ts). SQLite's and PostgreSQL's adapters
 * say so alike.
 */
export function isUniqueViolation(err: unknown): boolean {
  if (err instanceof Error && err.name === 'DriverAdapterError') return (err.cause as { kind?: unknown } | undefined)?.kind === 'UniqueConstraintViolation';
  const code = prismaErrorCode(err);
  if (code === 'P2002') return true;
  if (code !== 'P2010') return false;
  const meta = (err as { meta?: { driverAdapterError?: { cause?: { kind?: unknown } } } }).meta;
  return meta?.driverAdapterError?.cause?.kind === 'UniqueConstraintViolation';
}
