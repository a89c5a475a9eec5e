/**
 * The knowledge benchmark cannot rot: `bench/knowledge.ts` runs once with tiny settings on
 * SQLite (and PostgreSQL when the suite has one), indexes every chunk, searches, and prints
 * the figures and ratios the README reports, the hybrid variant (vectors) included. Figures are not checked: this is not a timed test.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

describe('bench/knowledge.ts', () => {
  it('indexes a generated workspace and searches it beside the bare engine, printing JSON', () => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', 'bench/knowledge.ts'], {
      cwd: root,
      encoding: 'utf8',
      timeout: 120_000,
      env: { ...process.env, BENCH_DOCS: '20', BENCH_QUERIES: '5', BENCH_ROUNDS: '1' },
    });
    assert.equal(r.status, 0, r.stderr.slice(-3000));
    type Side = { chunks: number; steward: Record<string, number>; floor: Record<string, number>; ratios: Record<string, number> };
    const out = JSON.parse(r.stdout) as { bench: string; sqlite: Side; postgresql: Side | string };
    assert.equal(out.bench, 'knowledge');
    const sides = [out.sqlite, ...(typeof out.postgresql === 'string' ? [] : [out.postgresql])];
    if (process.env.STEWARD_TEST_PG_URL) assert.equal(sides.length, 2, 'PostgreSQL measured too');
    for (const side of sides) {
      assert.equal(side.chunks, 200, '20 documents of 10 sections');
      for (const k of ['index_s', 'search_p50_ms', 'search_p99_ms', 'documents_per_s', 'chunks_per_s']) assert.ok(Number.isFinite(side.steward[k]) && side.steward[k]! > 0, k);
      for (const k of ['index_time', 'search_p50', 'search_p99']) assert.ok(Number.isFinite(side.ratios[k]), k);
    }
    type Hybrid = { chunks: number; dims: number; hybrid: Record<string, number>; ratios_to_full_text: Record<string, number> };
    const full = JSON.parse(r.stdout) as { sqlite_hybrid: Hybrid; postgresql_hybrid?: Hybrid };
    for (const h of [full.sqlite_hybrid, ...(full.postgresql_hybrid ? [full.postgresql_hybrid] : [])]) {
      assert.equal(h.chunks, 200, 'every chunk indexed with its vector');
      for (const k of ['index_s', 'search_p50_ms', 'search_p99_ms']) assert.ok(Number.isFinite(h.hybrid[k]) && h.hybrid[k]! > 0, k);
      for (const k of ['index_time', 'search_p50', 'search_p99']) assert.ok(Number.isFinite(h.ratios_to_full_text[k]), k);
    }
    if (process.env.STEWARD_TEST_PG_URL) assert.ok(full.postgresql_hybrid, 'PostgreSQL hybrid measured too');
  });
});
