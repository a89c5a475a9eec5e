/** The turn path's per-key lookups kept for a while (domain/ttl-cache.ts). */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, it } from 'node:test';
import { ttlCache } from '../../domain/ttl-cache.js';

describe('ttlCache', () => {
  it('keeps a value for its time, shares a pending lookup, and loads again after', async () => {
    const cache = ttlCache<string, number>({ ttlMs: 150 });
    let loads = 0;
    const load = async () => {
      loads++;
      await sleep(10);
      return loads;
    };
    const [a, b] = await Promise.all([cache.get('k', load), cache.get('k', load)]);
    assert.deepEqual([a, b, loads], [1, 1, 1], 'two steps at once share one lookup');
    assert.equal(await cache.get('k', load), 1);
    assert.equal(await cache.get('other', load), 2, 'keys are kept apart');
    await sleep(170);
    assert.equal(await cache.get('k', load), 3, 'read again once its time has passed');
  });

  it('does not keep a failed lookup; delete and clear forget', async () => {
    const cache = ttlCache<string, string>({ ttlMs: 60_000 });
    await assert.rejects(cache.get('k', async () => Promise.reject(new Error('db down'))), /db down/);
    assert.equal(await cache.get('k', async () => 'fresh'), 'fresh', 'a failure is not kept');
    assert.equal(await cache.get('k', async () => 'other'), 'fresh');
    cache.delete('k');
    assert.equal(await cache.get('k', async () => 'after delete'), 'after delete');
    cache.clear();
    assert.equal(await cache.get('k', async () => 'after clear'), 'after clear');
  });

  it('holds at most its number of keys, letting the least recently used go', async () => {
    const cache = ttlCache<number, number>({ ttlMs: 60_000, maxKeys: 3 });
    for (const k of [1, 2, 3]) await cache.get(k, async () => k);
    assert.equal(await cache.get(1, async () => -1), 1, 'kept, and now the most recently used');
    await cache.get(4, async () => 4);
    assert.equal(await cache.get(2, async () => -2), -2, 'the least recently used key was let go');
    assert.equal(await cache.get(1, async () => -1), 1, 'a recently used key stays');
  });

  it('lets expired values go while nobody asks (an idle process keeps no stale per-chat lookups)', async () => {
    const cache = ttlCache<string, number>({ ttlMs: 50 });
    for (let i = 0; i < 100; i++) await cache.get(`chat-${i}`, async () => i);
    assert.equal(cache.size, 100);
    // nobody asks again: within two of its times the purge has let every value go
    for (let i = 0; i < 40 && cache.size > 0; i++) await sleep(10);
    assert.equal(cache.size, 0, 'expired values purged without being read');
    assert.equal(await cache.get('chat-1', async () => -1), -1, 'and loaded again when asked');
  });

  it('keeps nothing with a time of 0 (tests that must see every change at once)', async () => {
    const cache = ttlCache<string, number>({ ttlMs: 0 });
    let loads = 0;
    const load = async () => ++loads;
    await cache.get('k', load);
    await cache.get('k', load);
    assert.equal(loads, 2);
  });
});
