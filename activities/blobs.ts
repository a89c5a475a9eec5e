/**
 * Content-addressed blob store (claim-check): large data lives in the database by SHA-256
 * and only the hash travels through workflow history.
 */
import { createHash } from 'node:crypto';
import type { Db } from './db.js';
import { isUniqueViolation } from './prisma-errors.js';

export function sha256Hex(data: Uint8Array | string): string {
  return createHash('sha256').update(data).digest('hex');
}

export async function putBlob(db: Db, data: Uint8Array | string, mediaType = 'text/plain; charset=utf-8'): Promise<string> {
  const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : Buffer.from(data);
  const hash = sha256Hex(bytes);
  const existing = await db.blob.findUnique({ where: { hash }, select: { hash: true } });
  if (existing) return hash;
  try {
    await db.blob.create({ data: { hash, mediaType, size: bytes.length, data: new Uint8Array(bytes) } });
  } catch (err) {
    if (!isUniqueViolation(err)) throw err; // stored concurrently: same content, same hash
  }
  return hash;
}

export async function getBlob(db: Db, hash: string): Promise<{ data: Buffer; mediaType: string }> {
  const row = await db.blob.findUnique({ where: { hash } });
  if (!row) throw new Error(`blob ${hash} is missing from the store`);
  return { data: Buffer.from(row.data), mediaType: row.mediaType };
}

export async function getBlobText(db: Db, hash: string): Promise<string> {
  return (await getBlob(db, hash)).data.toString('utf8');
}
