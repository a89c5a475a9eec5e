/**
 * Embeddings for hybrid retrieval: an `Embedder` turns texts into L2-normalised vectors through
 * the model registry's embedding model (the AI SDK's `embedMany`: OpenAI or any
 * OpenAI-compatible `/embeddings` endpoint). Chunks are embedded by the indexing activity in
 * bounded batches; a search embeds its query once (a repeated query, as on every model step of
 * one turn, is answered from a small memory, not the endpoint). No retries here: indexing is
 * retried by Temporal, and a search without its vector falls back to full text.
 *
 * Vectors are stored as Float32 little-endian bytes (SQLite BLOB, PostgreSQL bytea) with the
 * model reference and the dimensions beside each, so vectors of two models are never compared.
 */
import { createHash, randomUUID } from 'node:crypto';
import { embedMany, type EmbeddingModel } from 'ai';
import { AI_SDK_TELEMETRY_OFF, currentStepKey, estimateTokens, redactSecrets, SpendContextMissingError, type ModelRegistry, type ModelSpend, type SpendScopes, type SpendTicket } from '../model.js';

/**
 * Whom an embeddings call is spent for: the key of the step that makes it (each request is
 * keyed under it by its texts, so a retry of the step reserves the same request under the
 * same key) and its scopes (the workspace).
 */
export interface EmbedSpend {
  key: string;
  scopes: SpendScopes;
}

export interface Embedder {
  /** `provider:model`, stored beside each vector. */
  readonly model: string;
  /** The vectors of `texts` (each cut to a bound), L2-normalised, in order; throws when the endpoint fails. With a budget, `spend` is required. */
  embed(texts: string[], opts?: { signal?: AbortSignal; spend?: EmbedSpend }): Promise<Float32Array[]>;
  /**
   * The vector of a search's query: at most one call per distinct query, within `queryTimeoutMs`.
   * With a budget it is spent for `scopes`, keyed under the running step (withStepKey), else
   * under a key of its own (a search outside any activity is never retried).
   */
  embedQuery(text: string, scopes?: SpendScopes): Promise<Float32Array>;
}

export interface EmbedderOptions {
  /** Texts per request at most (default 64). */
  maxBatch?: number;
  /** Characters of one text sent at most (default 8000; a chunk is at most 2000). */
  maxChars?: number;
  /** One request of the indexing side at most this long (default 60 s). */
  timeoutMs?: number;
  /** The query's request at most this long (default 5 s): a search never waits longer for it. */
  queryTimeoutMs?: number;
  /** The model budget (the registry's `spend`): every request reserves before and settles after, kind 'embedding'. */
  spend?: ModelSpend;
}

/** A vector scaled to length 1 (a zero vector stays zero), as Float32. */
export function normalise(v: ArrayLike<number>): Float32Array {
  const out = Float32Array.from(v);
  let sum = 0;
  for (const x of out) sum += x * x;
  const len = Math.sqrt(sum);
  if (len > 0) for (let i = 0; i < out.length; i++) out[i] = out[i]! / len;
  return out;
}

/** The stored form of a vector: its Float32 bytes, little-endian. */
export function vectorBytes(v: Float32Array): Buffer {
  const out = Buffer.alloc(v.length * 4);
  for (let i = 0; i < v.length; i++) out.writeFloatLE(v[i]!, i * 4);
  return out;
}

/** A stored vector read back. */
export function bytesVector(b: Uint8Array): Float32Array {
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const out = new Float32Array(Math.floor(b.byteLength / 4));
  for (let i = 0; i < out.length; i++) out[i] = view.getFloat32(i * 4, true);
  return out;
}

/** The text embedded for a chunk: its heading trail, then its text. */
export function chunkEmbeddingText(c: { heading: string; text: string }): string {
  return c.heading ? `${c.heading}\n${c.text}` : c.text;
}

/** The workspace an index key belongs to (a workspace's own, its skills', its memories'), for the spend scope of a search's query. */
export function workspaceScopeOf(indexKey: string): SpendScopes {
  const ws = /^(?:skills:|memory:workspace:)?([a-z0-9][a-z0-9_-]{0,63})$/.exec(indexKey)?.[1];
  return ws ? { workspace: ws } : {};
}

/** An embedder over an AI SDK embedding model; `model` is its `provider:model` reference. */
export function createEmbedder(embeddingModel: EmbeddingModel, model: string, opts: EmbedderOptions = {}): Embedder {
  const maxBatch = Math.max(1, opts.maxBatch ?? 64);
  const maxChars = Math.max(100, opts.maxChars ?? 8000);
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const queryTimeoutMs = opts.queryTimeoutMs ?? 5000;
  const queries = new Map<string, Promise<Float32Array>>();
  const budget = opts.spend;
  const call = async (values: string[], signal: AbortSignal, spend: EmbedSpend | undefined): Promise<Float32Array[]> => {
    const cut = values.map((v) => v.slice(0, maxChars));
    const estimate = estimateTokens(cut.reduce((n, v) => n + v.length, 0));
    let ticket: SpendTicket | undefined;
    if (budget && (!budget.applies || (await budget.applies()))) {
      if (!spend) throw new SpendContextMissingError(`an embeddings call to ${model} came without its spend context while a model budget is set: refused (a bug of its caller)`);
      const digest = createHash('sha256');
      for (const v of cut) digest.update(v).update('\u0000');
      ticket = await budget.reserve({ key: `${spend.key}:embed:${digest.digest('hex').slice(0, 16)}`, model, inputTokens: estimate, maxOutputTokens: 0, scopes: spend.scopes, kind: 'embedding' });
    }
    // settled to the reported usage; a failed call at its estimate (over-counted, never under)
    let used = estimate;
    let r: Awaited<ReturnType<typeof embedMany>>;
    try {
      r = await embedMany({ model: embeddingModel, values: cut, maxRetries: 0, maxParallelCalls: 1, abortSignal: signal, telemetry: AI_SDK_TELEMETRY_OFF });
      if (r.usage.tokens > 0) used = r.usage.tokens;
    } catch (err) {
      // the message may quote the request; keys never leave here
      throw new Error(`embeddings ${model}: ${redactSecrets(err instanceof Error ? err.message : String(err))}`, { cause: err });
    } finally {
      if (ticket) await budget?.settle(ticket, { inputTokens: used, outputTokens: 0 }).catch(() => undefined);
    }
    if (r.embeddings.length !== values.length) throw new Error(`the embeddings endpoint answered ${r.embeddings.length} vectors for ${values.length} texts`);
    const out = r.embeddings.map(normalise);
    const dims = out[0]?.length ?? 0;
    if (dims === 0 || out.some((v) => v.length !== dims)) throw new Error('the embeddings endpoint answered vectors of no or differing dimensions');
    return out;
  };
  return {
    model,
    async embed(texts, o = {}) {
      const out: Float32Array[] = [];
      for (let i = 0; i < texts.length; i += maxBatch) {
        const signal = o.signal ? AbortSignal.any([o.signal, AbortSignal.timeout(timeoutMs)]) : AbortSignal.timeout(timeoutMs);
        out.push(...(await call(texts.slice(i, i + maxBatch), signal, o.spend)));
      }
      if (out.length > 0 && out.some((v) => v.length !== out[0]!.length)) throw new Error('the embeddings endpoint changed dimensions within one run');
      return out;
    },
    embedQuery(text, scopes = {}) {
      const key = text.slice(0, maxChars);
      const known = queries.get(key);
      if (known) {
        // most recently used last
        queries.delete(key);
        queries.set(key, known);
        return known;
      }
      // the promise is kept, so searches of one step running at once share one call; a failure is forgotten
      const p = call([key], AbortSignal.timeout(queryTimeoutMs), budget ? { key: currentStepKey() ?? `search:${randomUUID()}`, scopes } : undefined).then(([v]) => v!);
      void p.catch(() => {
        if (queries.get(key) === p) queries.delete(key);
      });
      if (queries.size >= 256) queries.delete(queries.keys().next().value as string);
      queries.set(key, p);
      return p;
    },
  };
}

/** The embedder of `ref` (STEWARD_EMBEDDING_MODEL) from the registry's providers (and its budget), or undefined when none is set. */
export function embedderFor(models: Pick<ModelRegistry, 'embeddingModel' | 'spend'>, ref: string | undefined, opts: EmbedderOptions = {}): Embedder | undefined {
  return ref ? createEmbedder(models.embeddingModel(ref), ref, { ...(models.spend ? { spend: models.spend } : {}), ...opts }) : undefined;
}
