/**
 * A lookup the turn path makes at every model step, kept per key for `ttlMs`: what it reads
 * (bindings, prompt layers, whether a chat has memories, MCP registrations) changes rarely, and
 * a change reaches turns within that time. A thin typed wrapper around lru-cache's `LRUCache`
 * (its `ttl` and `max`): the pending lookup is kept, so steps that ask at once share one; a
 * failed lookup is not kept; past `maxKeys` keys the least recently used one is let go. A
 * `ttlMs` of 0 keeps nothing (every call loads).
 */
import { LRUCache } from 'lru-cache';

export interface TtlCache<K, V> {
  /** The value for `key`: kept, or loaded now with `load`. */
  get(key: K, load: () => Promise<V>): Promise<V>;
  /** Forget the value for `key` (the caller changed what it was read from). */
  delete(key: K): void;
  /** Forget every kept value. */
  clear(): void;
}

/** `K` is LRUCache's own bound on keys: anything but null and undefined. */
export function ttlCache<K extends {}, V>(opts: { ttlMs: number; maxKeys?: number }): TtlCache<K, V> {
  if (opts.ttlMs <= 0) return { get: (_key, load) => load(), delete: () => undefined, clear: () => undefined };
  const kept = new LRUCache<K, Promise<V>>({ max: opts.maxKeys ?? 10_000, ttl: opts.ttlMs });
  return {
    get(key, load) {
      const hit = kept.get(key);
      if (hit) return hit;
      const value = load();
      kept.set(key, value);
      value.catch(() => {
        if (kept.peek(key) === value) kept.delete(key);
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
