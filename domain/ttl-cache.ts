/**
 * A lookup the turn path makes at every model step, kept per key for `ttlMs`: what it reads
 * (bindings, prompt layers, whether a chat has memories, MCP registrations) changes rarely, and
 * a change reaches turns within that time. A thin typed wrapper around lru-cache's `LRUCache`
 * (its `ttl` and `max`): the pending lookup is kept, so steps that ask at once share one; a
 * failed lookup is not kept; past `maxKeys` keys the least recently used one is let go. A
 * `ttlMs` of 0 keeps nothing (every call loads).
 *
 * Expired values are let go too, not only when their key is asked again: lru-cache keeps an
 * expired entry until it is read or pushed out by `maxKeys`, so the per-chat lookups of 10,000
 * chats that each wrote once stayed in memory, stale, for as long as the process idled (the
 * scale phase of bench/phases.ts). While the cache holds anything, one timer (unref'd) purges
 * what has expired every `ttlMs`; an empty cache has no timer, and nothing keeps it alive.
 */
import { LRUCache } from 'lru-cache';

export interface TtlCache<K, V> {
  /** The value for `key`: kept, or loaded now with `load`. */
  get(key: K, load: () => Promise<V>): Promise<V>;
  /** Forget the value for `key` (the caller changed what it was read from). */
  delete(key: K): void;
  /** Forget every kept value. */
  clear(): void;
  /** How many values are kept now (expired ones until the next purge). */
  readonly size: number;
}

/** `K` is LRUCache's own bound on keys: anything but null and undefined. */
export function ttlCache<K extends {}, V>(opts: { ttlMs: number; maxKeys?: number }): TtlCache<K, V> {
  if (opts.ttlMs <= 0) return { get: (_key, load) => load(), delete: () => undefined, clear: () => undefined, size: 0 };
  const ttlMs = opts.ttlMs;
  const kept = new LRUCache<K, Promise<V>>({ max: opts.maxKeys ?? 10_000, ttl: ttlMs });
  let purging: NodeJS.Timeout | undefined;
  const purgeLater = () => {
    if (purging) return;
    purging = setTimeout(() => {
      purging = undefined;
      kept.purgeStale();
      if (kept.size > 0) purgeLater();
    }, ttlMs);
    purging.unref();
  };
  return {
    get(key, load) {
      const hit = kept.get(key);
      if (hit) return hit;
      const value = load();
      kept.set(key, value);
      purgeLater();
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
    get size() {
      return kept.size;
    },
  };
}
