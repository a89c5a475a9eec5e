/**
 * Hybrid ranking: full text and vector similarity, fused by reciprocal rank fusion.
 *
 * Each side ranks its best `CANDIDATES` chunks of the workspace: full text by the engine's rank
 * (BM25 / ts_rank_cd), vectors by cosine similarity to the query's vector, brute force over the
 * workspace's vectors of the index's embedding model (normalised when stored, so a dot product
 * is the cosine; 10,000 chunks of 1,536 dimensions are 15 M multiply-adds). A chunk's fused
 * score is the sum over the sides that found it of 1 / (k + rank), k = 60 (Cormack, Clarke and
 * Büttcher, SIGIR 2009): found by both beats found by one; a chunk only the vectors found
 * (another word form, a misspelling, a synonym) still comes in.
 *
 * The workspace's vectors are held in memory, one Float32 matrix per workspace (128 MB in all at most),
 * reloaded when the workspace's generation (bumped by every write) moved. A workspace without
 * vectors of the model (documents put without them) is searched by full text alone, with no
 * query embedded. A failing or slow embeddings endpoint makes the search full text alone, with
 * a warning: a turn never fails for it.
 */
import { workspaceScopeOf, type Embedder } from './embedder.js';

/** Per side: the chunks ranked before fusion. */
export const CANDIDATES = 50;
/** Reciprocal rank fusion's constant. */
export const RRF_K = 60;
/** Vector floats held in memory across workspaces at most: 128 MB (10,000 chunks of 1,536 dimensions are 61 MB). */
const MAX_CACHED_FLOATS = 32 * 1024 * 1024;

/** A chunk row as the index returns it (its id, then what a hit shows). */
export interface ChunkRow {
  id: number;
  path: string;
  heading: string;
  text: string;
  start_line: number;
  end_line: number;
  score: number;
}

export interface VectorMatrix {
  ids: number[];
  dims: number;
  /** Row i is the vector of chunk ids[i]. */
  matrix: Float32Array;
}

/** What a hybrid search needs of an index backend. */
export interface HybridBackend {
  textSearch(workspace: string, query: string, limit: number): Promise<ChunkRow[]>;
  /** Bumped by every write to the workspace (0 when never written). */
  generation(workspace: string): Promise<number>;
  /** The workspace's vectors of `model` (of the first one's dimensions). */
  loadVectors(workspace: string, model: string): Promise<VectorMatrix>;
  /** The rows of these chunk ids (of the workspace). */
  rowsById(workspace: string, ids: number[]): Promise<ChunkRow[]>;
}

/** The `k` chunks of `m` most similar to `q` (both normalised), best first. */
export function nearest(m: VectorMatrix, q: Float32Array, k: number): Array<{ id: number; similarity: number }> {
  const { dims, matrix, ids } = m;
  const top: Array<{ id: number; similarity: number }> = [];
  const tail = dims - (dims % 4);
  for (let r = 0; r < ids.length; r++) {
    // four running sums: shorter chains of dependent adds (about a fifth faster in V8)
    let a = 0;
    let b = 0;
    let c = 0;
    let d = 0;
    const base = r * dims;
    for (let i = 0; i < tail; i += 4) {
      a += matrix[base + i]! * q[i]!;
      b += matrix[base + i + 1]! * q[i + 1]!;
      c += matrix[base + i + 2]! * q[i + 2]!;
      d += matrix[base + i + 3]! * q[i + 3]!;
    }
    for (let i = tail; i < dims; i++) a += matrix[base + i]! * q[i]!;
    const dot = a + b + c + d;
    if (top.length === k && dot <= top[k - 1]!.similarity) continue;
    let at = top.length;
    while (at > 0 && top[at - 1]!.similarity < dot) at--;
    top.splice(at, 0, { id: ids[r]!, similarity: dot });
    if (top.length > k) top.pop();
  }
  return top;
}

/**
 * Reciprocal rank fusion of rankings (ids, best first): each id's sum of 1 / (k + rank), rank
 * from 1; ties go to the better best rank, then to the earlier ranking.
 */
export function reciprocalRankFusion(rankings: number[][], k = RRF_K): Array<{ id: number; score: number }> {
  const fused = new Map<number, { score: number; best: number; first: number }>();
  rankings.forEach((ranking, which) => {
    ranking.forEach((id, i) => {
      const f = fused.get(id) ?? { score: 0, best: Number.POSITIVE_INFINITY, first: which };
      f.score += 1 / (k + i + 1);
      f.best = Math.min(f.best, i + 1);
      fused.set(id, f);
    });
  });
  return [...fused.entries()]
    .sort(([, a], [, b]) => b.score - a.score || a.best - b.best || a.first - b.first)
    .map(([id, f]) => ({ id, score: f.score }));
}

export type HybridRow = ChunkRow & { match: 'text' | 'vector' | 'both' };

/** A search over `backend` that fuses full text with the embedder's vectors. */
export function hybridSearcher(backend: HybridBackend, embedder: Embedder, warn: (detail: Record<string, unknown>, message: string) => void) {
  const cache = new Map<string, VectorMatrix & { generation: number }>();
  let cached = 0;
  const vectorsOf = async (workspace: string): Promise<VectorMatrix> => {
    const generation = await backend.generation(workspace);
    const known = cache.get(workspace);
    if (known && known.generation === generation) {
      // most recently used last
      cache.delete(workspace);
      cache.set(workspace, known);
      return known;
    }
    const loaded = { ...(await backend.loadVectors(workspace, embedder.model)), generation };
    if (known) cached -= known.matrix.length;
    cache.delete(workspace);
    cache.set(workspace, loaded);
    cached += loaded.matrix.length;
    // bounded by floats held (a workspace without vectors weighs nothing) and by entries; the one just loaded stays
    while (cache.size > 1 && (cached > MAX_CACHED_FLOATS || cache.size > 1000)) {
      const [oldest, m] = cache.entries().next().value as [string, VectorMatrix];
      cached -= m.matrix.length;
      cache.delete(oldest);
    }
    return loaded;
  };
  return async (workspace: string, query: string, limit: number): Promise<HybridRow[] | ChunkRow[]> => {
    const m = await vectorsOf(workspace);
    // nothing of this workspace has vectors of this model (documents put without them): full text, no query embedded
    if (m.ids.length === 0) return backend.textSearch(workspace, query, limit);
    let q: Float32Array | undefined;
    try {
      q = await embedder.embedQuery(query, workspaceScopeOf(workspace));
      if (q.length !== m.dims) throw new Error(`the query's vector has ${q.length} dimensions, the workspace's ${m.dims}`);
    } catch (err) {
      q = undefined;
      warn({ workspace, model: embedder.model, err: err instanceof Error ? err.message : String(err) }, 'the embeddings model failed: this search is full text alone');
    }
    if (!q) return backend.textSearch(workspace, query, limit);
    const text = await backend.textSearch(workspace, query, Math.max(limit, CANDIDATES));
    const vector = nearest(m, q, Math.max(limit, CANDIDATES));
    const fused = reciprocalRankFusion([text.map((r) => r.id), vector.map((v) => v.id)]).slice(0, limit);
    const rows = new Map(text.map((r) => [r.id, r]));
    const textIds = new Set(rows.keys());
    const vectorIds = new Set(vector.map((v) => v.id));
    const missing = fused.filter((f) => !rows.has(f.id)).map((f) => f.id);
    if (missing.length > 0) for (const r of await backend.rowsById(workspace, missing)) rows.set(r.id, r);
    return fused.flatMap((f): HybridRow[] => {
      const r = rows.get(f.id);
      // a chunk replaced since its vector was loaded is simply left out
      return r ? [{ ...r, score: f.score, match: textIds.has(f.id) ? (vectorIds.has(f.id) ? 'both' : 'text') : 'vector' }] : [];
    });
  };
}
