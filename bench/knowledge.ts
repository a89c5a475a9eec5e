/**
 * The knowledge index: indexing throughput (documents and chunks per second, through
 * `indexWorkspaceFiles`: walk, read, hash, chunk, index) and search latency (p50/p99 of
 * `search`) at about 10,000 chunks, on SQLite and (when BENCH_PG_URL or STEWARD_TEST_PG_URL
 * names a server) PostgreSQL. Beside each, the floor: the same chunks inserted with one
 * prepared statement into a bare full-text table of the same engine and the same queries run
 * straight against it, in the same process, rounds alternating. Prints JSON. Not a test.
 *
 * The hybrid variant: the same workspace indexed and searched with an embedder (a local,
 * deterministic hashed-trigram one of BENCH_DIMS dimensions, so the figures are the index's
 * cost, not an endpoint's: vectors stored, loaded, compared by brute force, rankings fused),
 * beside full text alone.
 *
 *   node --import tsx bench/knowledge.ts      (BENCH_DOCS=1000 documents of 10 sections, BENCH_QUERIES=200, BENCH_ROUNDS=3, BENCH_DIMS=1536)
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { chunkDocument } from '../domain/knowledge/chunk.js';
import { normalise, type Embedder } from '../domain/knowledge/embedder.js';
import { openPostgresKnowledgeIndex, openSqliteKnowledgeIndex, queryTerms, type KnowledgeIndex } from '../domain/knowledge/index-store.js';
import { indexWorkspaceFiles } from '../domain/knowledge/indexer.js';

const int = (name: string, fallback: number) => Math.max(1, Number(process.env[name] ?? fallback) || fallback);
const DOCS = int('BENCH_DOCS', 1000);
const QUERIES = int('BENCH_QUERIES', 200);
const ROUNDS = int('BENCH_ROUNDS', 3);
const DIMS = int('BENCH_DIMS', 1536);
const pgUrl = process.env.BENCH_PG_URL ?? process.env.STEWARD_TEST_PG_URL;

// a deterministic vocabulary, so every round indexes and searches the same text
const WORDS = Array.from({ length: 5000 }, (_, i) => `w${(i * 7919) % 100_003}x`);
let seed = 42;
const rand = () => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31);
const word = () => WORDS[Math.floor(rand() * WORDS.length)]!;
const sentence = (n: number) => Array.from({ length: n }, word).join(' ');

/** The corpus, generated once: DOCS documents of 10 sections each. */
function corpus(): Array<{ path: string; text: string }> {
  seed = 42;
  return Array.from({ length: DOCS }, (_, d) => {
    const sections = Array.from({ length: 10 }, (_, s) => `## Section ${s} ${word()}\n${sentence(40)}.\n\n${sentence(30)}.\n`).join('\n');
    return { path: `area-${d % 20}/doc-${d}.md`, text: `# Document ${d}\n\n${sections}` };
  });
}

function writeCorpus(root: string, docs: Array<{ path: string; text: string }>): void {
  for (const doc of docs) {
    mkdirSync(path.dirname(path.join(root, doc.path)), { recursive: true });
    writeFileSync(path.join(root, doc.path), doc.text);
  }
}

/** A local embedder: character trigrams of the words hashed into DIMS dimensions (no endpoint, no weights). */
function localEmbedder(): Embedder {
  const vec = (text: string) => {
    const v = new Float32Array(DIMS);
    for (const w of text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []) {
      const p = `#${w}#`;
      for (let i = 0; i + 3 <= p.length; i++) {
        let h = 0x811c9dc5;
        for (let j = i; j < i + 3; j++) h = Math.imul(h ^ p.charCodeAt(j), 0x01000193) >>> 0;
        v[h % DIMS]! += 1;
      }
    }
    return normalise(v);
  };
  return { model: `bench:trigram-${DIMS}`, embed: async (texts) => texts.map(vec), embedQuery: async (text) => vec(text) };
}

const queries = (() => {
  seed = 7;
  return Array.from({ length: QUERIES }, () => `${word()} ${word()} ${word()}`);
})();

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return +s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!.toFixed(3);
};
const median = (xs: number[]) => pct(xs, 50);

interface Round {
  index_s: number;
  chunks: number;
  search_ms: number[];
}

async function timeSearches(run: (q: string) => Promise<unknown> | unknown): Promise<number[]> {
  for (const q of queries.slice(0, 10)) await run(q); // warm
  const out: number[] = [];
  for (const q of queries) {
    const t = performance.now();
    await run(q);
    out.push(performance.now() - t);
  }
  return out;
}

/** Steward's index: the workspace indexed from files, then searched. */
async function stewardRound(open: () => Promise<KnowledgeIndex>, root: string, name: string): Promise<Round> {
  const index = await open();
  try {
    const t = performance.now();
    const r = await indexWorkspaceFiles(index, { name, root });
    const index_s = (performance.now() - t) / 1000;
    const search_ms = await timeSearches((q) => index.search(name, q, 5));
    await index.removeWorkspace(name);
    return { index_s, chunks: r.chunks, search_ms };
  } finally {
    await index.close();
  }
}

/** The chunks of the corpus, cut once (the floor inserts exactly these). */
function corpusChunks(docs: Array<{ path: string; text: string }>): Array<{ heading: string; text: string }> {
  return docs.flatMap((doc) => chunkDocument(doc.path, doc.text).map((c) => ({ heading: c.heading, text: c.text })));
}

function sqliteFloor(file: string, chunks: Array<{ heading: string; text: string }>): Promise<Round> {
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.exec("CREATE VIRTUAL TABLE f USING fts5(heading, text, tokenize = 'porter unicode61 remove_diacritics 2')");
  const insert = db.prepare('INSERT INTO f (heading, text) VALUES (?, ?)');
  const t = performance.now();
  db.transaction(() => {
    for (const c of chunks) insert.run(c.heading, c.text);
  })();
  const index_s = (performance.now() - t) / 1000;
  const search = db.prepare('SELECT rowid, bm25(f) AS s FROM f WHERE f MATCH ? ORDER BY s LIMIT 5');
  return timeSearches((q) => search.all(queryTerms(q).map((w) => `"${w}"`).join(' OR '))).then((search_ms) => {
    db.close();
    return { index_s, chunks: chunks.length, search_ms };
  });
}

async function pgFloor(url: string, chunks: Array<{ heading: string; text: string }>): Promise<Round> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query('DROP TABLE IF EXISTS bench_floor');
    await c.query("CREATE TABLE bench_floor (id bigserial PRIMARY KEY, heading text, text text, tsv tsvector GENERATED ALWAYS AS (setweight(to_tsvector('english', regexp_replace(heading, '[[:punct:]]+', ' ', 'g')), 'A') || setweight(to_tsvector('english', regexp_replace(text, '[[:punct:]]+', ' ', 'g')), 'B')) STORED)");
    await c.query('CREATE INDEX bench_floor_tsv ON bench_floor USING gin (tsv)');
    const t = performance.now();
    for (let i = 0; i < chunks.length; i += 500) {
      const part = chunks.slice(i, i + 500);
      await c.query('INSERT INTO bench_floor (heading, text) SELECT * FROM unnest($1::text[], $2::text[])', [part.map((x) => x.heading), part.map((x) => x.text)]);
    }
    const index_s = (performance.now() - t) / 1000;
    // the floor at its best: statistics for the planner (Steward's tables get them from autovacuum)
    await c.query('ANALYZE bench_floor');
    const search_ms = await timeSearches((q) => c.query("SELECT id, ts_rank_cd(tsv, q, 1) AS s FROM bench_floor, to_tsquery('english', $1) q WHERE tsv @@ q ORDER BY s DESC LIMIT 5", [queryTerms(q).join(' | ')]));
    await c.query('DROP TABLE bench_floor');
    return { index_s, chunks: chunks.length, search_ms };
  } finally {
    await c.end();
  }
}

async function pgDatabase(admin: string): Promise<{ url: string; drop: () => Promise<void> }> {
  const name = `bench_knowledge_${process.pid}`;
  const c = new pg.Client({ connectionString: admin });
  await c.connect();
  await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await c.query(`CREATE DATABASE ${name}`);
  const url = new URL(admin);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    drop: async () => {
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
}

/** The hybrid variant beside full text alone (the same engine, the same workspace and queries). */
function hybridSummary(hybrid: Round[], text: Round[]) {
  const h = { index_s: median(hybrid.map((r) => r.index_s)), search_p50_ms: median(hybrid.map((r) => pct(r.search_ms, 50))), search_p99_ms: median(hybrid.map((r) => pct(r.search_ms, 99))) };
  const t = { index_s: median(text.map((r) => r.index_s)), search_p50_ms: median(text.map((r) => pct(r.search_ms, 50))), search_p99_ms: median(text.map((r) => pct(r.search_ms, 99))) };
  return {
    chunks: hybrid[0]!.chunks,
    dims: DIMS,
    hybrid: { ...h, chunks_per_s: +(hybrid[0]!.chunks / h.index_s).toFixed(1) },
    ratios_to_full_text: { index_time: +(h.index_s / t.index_s).toFixed(2), search_p50: +(h.search_p50_ms / t.search_p50_ms).toFixed(2), search_p99: +(h.search_p99_ms / t.search_p99_ms).toFixed(2) },
  };
}

function summary(steward: Round[], floor: Round[]) {
  const s = { index_s: median(steward.map((r) => r.index_s)), search_p50_ms: median(steward.map((r) => pct(r.search_ms, 50))), search_p99_ms: median(steward.map((r) => pct(r.search_ms, 99))) };
  const f = { index_s: median(floor.map((r) => r.index_s)), search_p50_ms: median(floor.map((r) => pct(r.search_ms, 50))), search_p99_ms: median(floor.map((r) => pct(r.search_ms, 99))) };
  const chunks = steward[0]!.chunks;
  return {
    chunks,
    documents: DOCS,
    steward: { ...s, documents_per_s: +(DOCS / s.index_s).toFixed(1), chunks_per_s: +(chunks / s.index_s).toFixed(1) },
    floor: { ...f, chunks_per_s: +(chunks / f.index_s).toFixed(1) },
    ratios: { index_time: +(s.index_s / f.index_s).toFixed(2), search_p50: +(s.search_p50_ms / f.search_p50_ms).toFixed(2), search_p99: +(s.search_p99_ms / f.search_p99_ms).toFixed(2) },
    rounds: steward.map((r, i) => ({ steward_index_s: +r.index_s.toFixed(3), floor_index_s: +floor[i]!.index_s.toFixed(3), steward_p50_ms: pct(r.search_ms, 50), floor_p50_ms: pct(floor[i]!.search_ms, 50) })),
  };
}

const dir = mkdtempSync(path.join(tmpdir(), 'steward-bench-knowledge-'));
try {
  const root = path.join(dir, 'workspace');
  const docs = corpus();
  writeCorpus(root, docs);
  const chunks = corpusChunks(docs);
  const result: Record<string, unknown> = { bench: 'knowledge', settings: { documents: DOCS, queries: QUERIES, rounds: ROUNDS, query_words: 3, results: 5, hybrid_dims: DIMS } };

  const sq: Round[] = [];
  const sqFloor: Round[] = [];
  const sqHybrid: Round[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    // alternate which goes first
    const steward = () => stewardRound(async () => openSqliteKnowledgeIndex(path.join(dir, `k${r}.db`)), root, 'bench');
    const floor = () => sqliteFloor(path.join(dir, `f${r}.db`), chunks);
    if (r % 2 === 0) {
      sq.push(await steward());
      sqFloor.push(await floor());
    } else {
      sqFloor.push(await floor());
      sq.push(await steward());
    }
    sqHybrid.push(await stewardRound(async () => openSqliteKnowledgeIndex(path.join(dir, `h${r}.db`), { embedder: localEmbedder() }), root, 'bench'));
  }
  result.sqlite = summary(sq, sqFloor);
  result.sqlite_hybrid = hybridSummary(sqHybrid, sq);

  if (pgUrl) {
    const db = await pgDatabase(pgUrl);
    try {
      const pq: Round[] = [];
      const pqFloor: Round[] = [];
      const pqHybrid: Round[] = [];
      for (let r = 0; r < ROUNDS; r++) {
        const steward = () => stewardRound(() => openPostgresKnowledgeIndex(db.url), root, 'bench');
        const floor = () => pgFloor(db.url, chunks);
        if (r % 2 === 0) {
          pq.push(await steward());
          pqFloor.push(await floor());
        } else {
          pqFloor.push(await floor());
          pq.push(await steward());
        }
        pqHybrid.push(await stewardRound(() => openPostgresKnowledgeIndex(db.url, { embedder: localEmbedder() }), root, 'bench'));
      }
      result.postgresql = summary(pq, pqFloor);
      result.postgresql_hybrid = hybridSummary(pqHybrid, pq);
    } finally {
      await db.drop();
    }
  } else {
    result.postgresql = 'skipped: set BENCH_PG_URL (or STEWARD_TEST_PG_URL) to a PostgreSQL superuser URL';
  }
  console.log(JSON.stringify(result, null, 2));
} finally {
  rmSync(dir, { recursive: true, force: true });
}
