/** Recognise Prisma's known request errors without importing a generated client. */
export function prismaErrorCode(err: unknown): string | undefined {
  if (typeof err === 'object' && err !== null && 'code' in err && typeof (err as { code: unknown }).code === 'string') {
    return (err as { code: string }).code;
  }
  return undefined;
}

export function isUniqueViolation(err: unknown): boolean {
  return prismaErrorCode(err) === 'P2002';
}
