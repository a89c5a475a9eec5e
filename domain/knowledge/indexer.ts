/**
 * Bring a workspace's index in step with its files: each indexable file read, hashed and, when
 * its content changed, chunked and indexed again; a file gone (or no longer indexable) taken
 * out. A file that is not UTF-8 text is skipped with its reason. `paths` limits the work to
 * the files a watcher reported (each checked again on disk: a change event may be a delete);
 * `limit` bounds the files indexed by one call (the rest are counted in `remaining`), so a large
 * workspace is indexed by several short activities.
 *
 * With an embedder on the index, each indexed document's chunks are embedded too, in batches of
 * about `EMBED_BATCH` chunks across documents (one request per batch, at most 64 texts each); a
 * document whose vectors are missing or of another model counts as changed, so a new model
 * re-embeds everything on the next reindex. When the endpoint fails, the text is indexed anyway
 * (full text stays current), the vectors are left missing and `embedError` says why: the
 * activity then fails so Temporal retries, and the retry embeds only what is missing.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { chunkDocument, type Chunk, type ChunkOptions } from './chunk.js';
import { chunkEmbeddingText } from './embedder.js';
import { currentStepKey } from '../model.js';
import type { IndexedDocument, KnowledgeIndex } from './index-store.js';
import { isIndexable, normaliseWorkspacePath, walkWorkspace } from './paths.js';

export interface IndexRunResult {
  indexed: string[];
  /** Changed files left for a later call (beyond `limit`). */
  remaining: number;
  unchanged: number;
  removed: string[];
  skipped: Array<{ path: string; reason: string }>;
  chunks: number;
  /** Chunks embedded (0 without an embedder). */
  embedded: number;
  /** Why the embeddings endpoint failed (the text was indexed, the vectors are missing). */
  embedError?: string;
}

/** Chunks embedded per request batch, across documents. */
const EMBED_BATCH = 128;

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

export async function indexWorkspaceFiles(index: KnowledgeIndex, workspace: { name: string; root: string }, opts: ChunkOptions & { paths?: string[]; maxFiles?: number; maxBytes?: number; limit?: number; spendKey?: string } = {}): Promise<IndexRunResult> {
  const result: IndexRunResult = { indexed: [], remaining: 0, unchanged: 0, removed: [], skipped: [], chunks: 0, embedded: 0 };
  const limit = opts.limit ?? Number.POSITIVE_INFINITY;
  const known = await index.documents(workspace.name);
  const embedder = index.embedder;
  const stale = embedder && index.staleVectors ? await index.staleVectors(workspace.name, embedder.model) : new Set<string>();
  const walked = await walkWorkspace(workspace.root, { ...(opts.maxFiles ? { maxFiles: opts.maxFiles } : {}), ...(opts.maxBytes ? { maxBytes: opts.maxBytes } : {}) });
  for (const s of walked.skipped) result.skipped.push({ path: s.relative, reason: s.reason });
  const present = new Set(walked.files.map((f) => f.relative));
  const wanted = opts.paths ? new Set(opts.paths.flatMap((p) => { try { return [normaliseWorkspacePath(p)]; } catch { return []; } })) : undefined;
  // documents read and cut, waiting for their batch's embeddings (one at a time without an embedder)
  let pending: IndexedDocument[] = [];
  const flush = async () => {
    const docs = pending;
    pending = [];
    const chunks: Chunk[] = docs.flatMap((d) => d.chunks);
    let vectors: Float32Array[] | undefined;
    if (embedder && chunks.length > 0 && result.embedError === undefined) {
      try {
        // spent for the workspace, keyed under the step that indexes (a retry embeds what is missing, under its own key)
        const stepKey = opts.spendKey ?? currentStepKey();
        vectors = await embedder.embed(chunks.map(chunkEmbeddingText), stepKey !== undefined ? { spend: { key: stepKey, scopes: { workspace: workspace.name } } } : {});
        result.embedded += vectors.length;
      } catch (err) {
        // one failure per run: the rest is indexed as text without asking the endpoint again
        result.embedError = err instanceof Error ? err.message : String(err);
      }
    }
    let at = 0;
    for (const d of docs) {
      const mine = vectors?.slice(at, at + d.chunks.length);
      at += d.chunks.length;
      await index.putDocument(workspace.name, { ...d, ...(mine && embedder ? { vectors: { model: embedder.model, vectors: mine } } : {}) });
      result.indexed.push(d.path);
      result.chunks += d.chunks.length;
    }
  };
  for (const f of walked.files) {
    if (wanted && !wanted.has(f.relative)) continue;
    const bytes = await readFile(path.join(workspace.root, f.relative));
    const hash = createHash('sha256').update(bytes).digest('hex');
    if (known.get(f.relative) === hash && !stale.has(f.relative)) {
      result.unchanged++;
      continue;
    }
    if (result.indexed.length + pending.length >= limit) {
      result.remaining++;
      continue;
    }
    const t = textOf(bytes);
    if ('reason' in t) {
      result.skipped.push({ path: f.relative, reason: t.reason });
      if (known.has(f.relative) && (await index.removeDocument(workspace.name, f.relative))) result.removed.push(f.relative);
      continue;
    }
    pending.push({ path: f.relative, hash, bytes: bytes.length, chunks: chunkDocument(f.relative, t.text, opts) });
    if (!embedder || pending.reduce((n, d) => n + d.chunks.length, 0) >= EMBED_BATCH) await flush();
  }
  await flush();
  for (const p of known.keys()) {
    if (wanted && !wanted.has(p)) continue;
    if (!present.has(p) || !isIndexable(p)) {
      if (await index.removeDocument(workspace.name, p)) result.removed.push(p);
    }
  }
  return result;
}
