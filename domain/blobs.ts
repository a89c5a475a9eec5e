/**
 * Content-addressed blob store (claim-check): large data lives in the database by SHA-256
 * and only the hash travels through workflow history.
 */
import { createHash } from 'node:crypto';
import type { Db } from './db.js';
import { isUniqueViolation } from './prisma-errors.js';
import { directSql } from './sql.js';

export function sha256Hex(data: Uint8Array | string): string {
  return createHash('sha256').update(data).digest('hex');
}

/**
 * Blobs this process has written or read, per database: a blob never changes (its key is its
 * content's hash) and is never deleted, so a hit is always right. It spares the turn path the
 * existence check before a write and the read of a blob just written (a reply stored by the
 * model step and read back by its delivery). Bounded in entries and bytes; large blobs are not
 * kept.
 */
const CACHE_MAX_ENTRIES = 2_000;
const CACHE_MAX_BYTES = 32 * 1024 * 1024;
const CACHE_MAX_BLOB_BYTES = 256 * 1024;

class BlobCache {
  private readonly entries = new Map<string, { data: Buffer; mediaType: string }>();
  private bytes = 0;
  get(hash: string): { data: Buffer; mediaType: string } | undefined {
    const hit = this.entries.get(hash);
    if (hit) {
      // most recently used last
      this.entries.delete(hash);
      this.entries.set(hash, hit);
    }
    return hit;
  }
  set(hash: string, blob: { data: Buffer; mediaType: string }): void {
    if (blob.data.length > CACHE_MAX_BLOB_BYTES || this.entries.has(hash)) return;
    this.entries.set(hash, blob);
    this.bytes += blob.data.length;
    for (const [oldest, b] of this.entries) {
      if (this.entries.size <= CACHE_MAX_ENTRIES && this.bytes <= CACHE_MAX_BYTES) break;
      this.entries.delete(oldest);
      this.bytes -= b.data.length;
    }
  }
}

const caches = new WeakMap<Db, BlobCache>();
function cacheOf(db: Db): BlobCache {
  let c = caches.get(db);
  if (!c) caches.set(db, (c = new BlobCache()));
  return c;
}

export async function putBlob(db: Db, data: Uint8Array | string, mediaType = 'text/plain; charset=utf-8'): Promise<string> {
  const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : Buffer.from(data);
  const hash = sha256Hex(bytes);
  const cache = cacheOf(db);
  if (cache.get(hash)) return hash;
  try {
    // every model step stores its output so: a direct statement (domain/sql.ts)
    await directSql(db).execute('INSERT INTO "Blob" ("hash", "mediaType", "size", "data", "createdAt") VALUES (?, ?, ?, ?, ?)', [hash, mediaType, bytes.length, bytes, new Date()]);
  } catch (err) {
    if (!isUniqueViolation(err)) throw err; // stored before (or concurrently): same content, same hash
  }
  cache.set(hash, { data: bytes, mediaType });
  return hash;
}

export async function getBlob(db: Db, hash: string): Promise<{ data: Buffer; mediaType: string }> {
  const cache = cacheOf(db);
  const hit = cache.get(hash);
  if (hit) return { data: Buffer.from(hit.data), mediaType: hit.mediaType };
  const row = await db.blob.findUnique({ where: { hash } });
  if (!row) throw new Error(`blob ${hash} is missing from the store`);
  const blob = { data: Buffer.from(row.data), mediaType: row.mediaType };
  cache.set(hash, { data: Buffer.from(blob.data), mediaType: blob.mediaType });
  return blob;
}

export async function getBlobText(db: Db, hash: string): Promise<string> {
  return (await getBlob(db, hash)).data.toString('utf8');
}
