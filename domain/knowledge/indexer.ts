/**
 * Bring a workspace's index in step with its files: each indexable file read, hashed and, when
 * its content changed, chunked and indexed again; a file gone (or no longer indexable) taken
 * out. A file that is not UTF-8 text is skipped with its reason. `paths` limits the work to
 * the files a watcher reported (each checked again on disk: a change event may be a delete);
 * `limit` bounds the files indexed by one call (the rest are counted in `remaining`), so a large
 * workspace is indexed by several short activities.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { chunkDocument, type ChunkOptions } from './chunk.js';
import type { KnowledgeIndex } from './index-store.js';
import { isIndexable, normaliseWorkspacePath, walkWorkspace } from './paths.js';

export interface IndexRunResult {
  indexed: string[];
  /** Changed files left for a later call (beyond `limit`). */
  remaining: number;
  unchanged: number;
  removed: string[];
  skipped: Array<{ path: string; reason: string }>;
  chunks: number;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The text of a file, or why it is not text. */
function textOf(bytes: Buffer): { text: string } | { reason: string } {
  if (bytes.includes(0)) return { reason: 'binary (a NUL byte)' };
  try {
    return { text: utf8.decode(bytes) };
  } catch {
    return { reason: 'not UTF-8 text' };
  }
}

export async function indexWorkspaceFiles(index: KnowledgeIndex, workspace: { name: string; root: string }, opts: ChunkOptions & { paths?: string[]; maxFiles?: number; maxBytes?: number; limit?: number } = {}): Promise<IndexRunResult> {
  const result: IndexRunResult = { indexed: [], remaining: 0, unchanged: 0, removed: [], skipped: [], chunks: 0 };
  const limit = opts.limit ?? Number.POSITIVE_INFINITY;
  const known = await index.documents(workspace.name);
  const walked = await walkWorkspace(workspace.root, { ...(opts.maxFiles ? { maxFiles: opts.maxFiles } : {}), ...(opts.maxBytes ? { maxBytes: opts.maxBytes } : {}) });
  for (const s of walked.skipped) result.skipped.push({ path: s.relative, reason: s.reason });
  const present = new Set(walked.files.map((f) => f.relative));
  const wanted = opts.paths ? new Set(opts.paths.flatMap((p) => { try { return [normaliseWorkspacePath(p)]; } catch { return []; } })) : undefined;
  for (const f of walked.files) {
    if (wanted && !wanted.has(f.relative)) continue;
    const bytes = await readFile(path.join(workspace.root, f.relative));
    const hash = createHash('sha256').update(bytes).digest('hex');
    if (known.get(f.relative) === hash) {
      result.unchanged++;
      continue;
    }
    if (result.indexed.length >= limit) {
      result.remaining++;
      continue;
    }
    const t = textOf(bytes);
    if ('reason' in t) {
      result.skipped.push({ path: f.relative, reason: t.reason });
      if (known.has(f.relative) && (await index.removeDocument(workspace.name, f.relative))) result.removed.push(f.relative);
      continue;
    }
    const chunks = chunkDocument(f.relative, t.text, opts);
    await index.putDocument(workspace.name, { path: f.relative, hash, bytes: bytes.length, chunks });
    result.indexed.push(f.relative);
    result.chunks += chunks.length;
  }
  for (const p of known.keys()) {
    if (wanted && !wanted.has(p)) continue;
    if (!present.has(p) || !isIndexable(p)) {
      if (await index.removeDocument(workspace.name, p)) result.removed.push(p);
    }
  }
  return result;
}
