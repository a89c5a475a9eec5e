/**
 * A lookup the turn path makes at every model step, kept per key for `ttlMs`: what it reads
 * (bindings, prompt layers, whether a chat has memories, MCP registrations) changes rarely, and
 * a change reaches turns within that time. The pending lookup is kept, so steps that ask at
 * once share one; a failed lookup is not kept. Past `maxKeys` keys the cache starts afresh.
 */
export interface TtlCache<K, V> {
  /** The value for `key`: kept, or loaded now with `load`. */
  get(key: K, load: () => Promise<V>): Promise<V>;
  /** Forget the value for `key` (the caller changed what it was read from). */
  delete(key: K): void;
  /** Forget every kept value. */
  clear(): void;
}

export function ttlCache<K, V>(opts: { ttlMs: number; maxKeys?: number }): TtlCache<K, V> {
  const maxKeys = opts.maxKeys ?? 10_000;
  const kept = new Map<K, { at: number; value: Promise<V> }>();
  return {
    get(key, load) {
      const now = Date.now();
      const hit = kept.get(key);
      if (hit && now - hit.at < opts.ttlMs) return hit.value;
      const value = load();
      if (kept.size >= maxKeys) kept.clear();
      const entry = { at: now, value };
      kept.set(key, entry);
      value.catch(() => {
        if (kept.get(key) === entry) kept.delete(key);
      });
      return value;
    },
    delete(key) {
      kept.delete(key);
    },
    clear() {
      kept.clear();
    },
  };
}
