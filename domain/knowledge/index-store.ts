/**
 * The knowledge index: workspace documents' chunks, searchable by full text, on the database
 * Steward already runs.
 *
 * - SQLite: FTS5 (better-sqlite3 ships it) in a file of its own beside Steward's database
 *   (`knowledge.db`), an external-content table over the chunks kept in step by triggers,
 *   Porter stemming, ranked by FTS5's BM25 with the heading weighted 3 to the text's 1.
 * - PostgreSQL: the schema `steward_knowledge` in Steward's database, a stored tsvector per
 *   chunk (heading weight A, text B, the `english` configuration) under a GIN index, ranked
 *   by `ts_rank_cd` normalised by length (PostgreSQL has no BM25; this is its nearest).
 *
 * With an embedder (STEWARD_EMBEDDING_MODEL), each chunk also has a vector (table `chunk_vec`:
 * Float32 bytes with the model and dimensions beside it) and a search fuses full text with
 * vector similarity by reciprocal rank fusion (hybrid.ts). Without one, nothing of that runs.
 *
 * The index lives outside Prisma's migrations on purpose: Prisma's schema cannot express FTS5
 * virtual tables (their shadow tables read as drift) or generated tsvector columns. It is a
 * derived store, rebuilt from the files; its DDL is idempotent and versioned in its own
 * `meta` table. Queries are the user's words only: letters and digits, any of them matching
 * (OR), ranked; no query syntax reaches either engine.
 */
import Database from 'better-sqlite3';
import pg from 'pg';
import type { Chunk } from './chunk.js';
import { vectorBytes, bytesVector, type Embedder } from './embedder.js';
import { hybridSearcher, type ChunkRow, type HybridRow, type VectorMatrix } from './hybrid.js';

/** A document's chunk vectors: one per chunk, in order, normalised, all of one model and size. */
export interface DocumentVectors {
  /** The embedder's `provider:model`. */
  model: string;
  vectors: Float32Array[];
}

export interface IndexedDocument {
  /** Workspace-relative path. */
  path: string;
  /** SHA-256 of the content (hex). */
  hash: string;
  bytes: number;
  chunks: Chunk[];
  /** The chunks' vectors (hybrid search); absent: the document is found by full text alone. */
  vectors?: DocumentVectors;
}

export interface SearchHit {
  path: string;
  heading: string;
  text: string;
  startLine: number;
  endLine: number;
  /** Higher is better; comparable within one search only (a hybrid search's is the fused score). */
  score: number;
  /** A hybrid search's: which side found it. */
  match?: 'text' | 'vector' | 'both';
}

export interface KnowledgeIndex {
  readonly kind: 'sqlite' | 'postgres';
  /** Every indexed document of a workspace: path -> content hash. */
  documents(workspace: string): Promise<Map<string, string>>;
  /** Index a document, replacing what was indexed for its path. */
  putDocument(workspace: string, doc: IndexedDocument): Promise<void>;
  /** Take a document out of the index; false when it was not there. */
  removeDocument(workspace: string, path: string): Promise<boolean>;
  /** Drop a workspace's whole index. */
  removeWorkspace(workspace: string): Promise<void>;
  /** The best chunks for the words of `query` (none for a query without any word). */
  search(workspace: string, query: string, limit?: number): Promise<SearchHit[]>;
  stats(workspace: string): Promise<{ documents: number; chunks: number }>;
  close(): Promise<void>;
  /** The embedder this index was opened with (searches are hybrid), or undefined (full text alone). */
  readonly embedder?: Embedder;
  /** The documents of a workspace with a chunk that has no vector of `model` (to embed again). */
  staleVectors?(workspace: string, model: string): Promise<Set<string>>;
}

export interface KnowledgeIndexOptions {
  /** Hybrid search: chunks' vectors stored, queries embedded, rankings fused. */
  embedder?: Embedder;
  /** Where a search's fallback to full text is reported (default: a process warning). */
  warn?: (detail: Record<string, unknown>, message: string) => void;
}

const defaultWarn = (detail: Record<string, unknown>, message: string) => process.emitWarning(`${message} ${JSON.stringify(detail)}`, 'StewardKnowledgeWarning');

/** Throws unless the vectors fit the document's chunks. */
function checkVectors(doc: IndexedDocument): void {
  const v = doc.vectors;
  if (!v) return;
  const dims = v.vectors[0]?.length ?? 0;
  if (v.vectors.length !== doc.chunks.length || v.vectors.some((x) => x.length !== dims || dims === 0)) {
    throw new Error(`${doc.path}: ${v.vectors.length} vectors for ${doc.chunks.length} chunks, or of differing dimensions`);
  }
}

/** Rows of (chunk id, vector bytes) as one matrix (of the first row's dimensions). */
function matrixOf(rows: Array<{ id: number; vec: Uint8Array }>): VectorMatrix {
  const dims = (rows[0]?.vec.byteLength ?? 0) / 4;
  const ok = rows.filter((r) => r.vec.byteLength === dims * 4);
  const matrix = new Float32Array(ok.length * dims);
  ok.forEach((r, i) => matrix.set(bytesVector(r.vec), i * dims));
  return { ids: ok.map((r) => Number(r.id)), dims, matrix };
}

/** The words of a query: letters and digits (Unicode), lowercased, distinct, at most 32. */
export function queryTerms(query: string): string[] {
  const words = query.normalize('NFKC').toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? [];
  return [...new Set(words)].slice(0, 32);
}

/**
 * The index layouts (SQLite, PostgreSQL); another value found at open is a derived index of an
 * older layout, dropped and rebuilt by the next reindex. 2 (SQLite) and 3 (PostgreSQL): chunk
 * vectors and the workspaces' write generations.
 */
const SCHEMA_VERSION = '2';
const PG_SCHEMA_VERSION = '3';

const SQLITE_DDL = `
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS doc (
  id INTEGER PRIMARY KEY,
  workspace TEXT NOT NULL,
  path TEXT NOT NULL,
  hash TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  indexed_at TEXT NOT NULL,
  UNIQUE (workspace, path)
);
CREATE TABLE IF NOT EXISTS chunk (
  id INTEGER PRIMARY KEY,
  doc_id INTEGER NOT NULL REFERENCES doc(id),
  ordinal INTEGER NOT NULL,
  heading TEXT NOT NULL,
  text TEXT NOT NULL,
  start_line INTEGER NOT NULL,
  end_line INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS chunk_doc ON chunk (doc_id);
CREATE VIRTUAL TABLE IF NOT EXISTS chunk_fts USING fts5(heading, text, content = 'chunk', content_rowid = 'id', tokenize = 'porter unicode61 remove_diacritics 2');
CREATE TRIGGER IF NOT EXISTS chunk_ai AFTER INSERT ON chunk BEGIN
  INSERT INTO chunk_fts (rowid, heading, text) VALUES (new.id, new.heading, new.text);
END;
CREATE TRIGGER IF NOT EXISTS chunk_ad AFTER DELETE ON chunk BEGIN
  INSERT INTO chunk_fts (chunk_fts, rowid, heading, text) VALUES ('delete', old.id, old.heading, old.text);
END;
CREATE TABLE IF NOT EXISTS chunk_vec (
  chunk_id INTEGER PRIMARY KEY,
  model TEXT NOT NULL,
  dims INTEGER NOT NULL,
  vec BLOB NOT NULL
);
CREATE TRIGGER IF NOT EXISTS chunk_vd AFTER DELETE ON chunk BEGIN
  DELETE FROM chunk_vec WHERE chunk_id = old.id;
END;
CREATE TABLE IF NOT EXISTS ws_gen (workspace TEXT PRIMARY KEY, gen INTEGER NOT NULL);
`;
/** An older layout's tables (their triggers go with them). */
const SQLITE_DROP = 'DROP TABLE IF EXISTS chunk_fts; DROP TABLE IF EXISTS chunk_vec; DROP TABLE IF EXISTS chunk; DROP TABLE IF EXISTS doc; DROP TABLE IF EXISTS ws_gen; DROP TABLE IF EXISTS meta;';

const toHit = (r: ChunkRow & { match?: HybridRow['match'] }): SearchHit => ({
  path: r.path,
  heading: r.heading,
  text: r.text,
  startLine: Number(r.start_line),
  endLine: Number(r.end_line),
  score: Number(r.score),
  ...(r.match ? { match: r.match } : {}),
});

/** The SQLite index in `file` (created with its tables when missing; an older layout's dropped first). */
export function openSqliteKnowledgeIndex(file: string, opts: KnowledgeIndexOptions = {}): KnowledgeIndex {
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('busy_timeout = 5000');
  db.transaction(() => {
    const hasMeta = db.prepare("SELECT 1 AS x FROM sqlite_master WHERE type = 'table' AND name = 'meta'").get();
    const found = hasMeta ? db.prepare<[], { value: string }>("SELECT value FROM meta WHERE key = 'schema'").get()?.value : undefined;
    if (found !== undefined && found !== SCHEMA_VERSION) db.exec(SQLITE_DROP);
    db.exec(SQLITE_DDL);
    db.prepare('INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value').run('schema', SCHEMA_VERSION);
  }).immediate();
  const docId = db.prepare<[string, string], { id: number }>('SELECT id FROM doc WHERE workspace = ? AND path = ?');
  const deleteChunks = db.prepare<[number]>('DELETE FROM chunk WHERE doc_id = ?');
  const deleteDoc = db.prepare<[number]>('DELETE FROM doc WHERE id = ?');
  const insertDoc = db.prepare<[string, string, string, number, string], { id: number }>('INSERT INTO doc (workspace, path, hash, bytes, indexed_at) VALUES (?, ?, ?, ?, ?) RETURNING id');
  const insertChunk = db.prepare<[number, number, string, string, number, number]>('INSERT INTO chunk (doc_id, ordinal, heading, text, start_line, end_line) VALUES (?, ?, ?, ?, ?, ?)');
  const insertVec = db.prepare<[number, string, number, Buffer]>('INSERT INTO chunk_vec (chunk_id, model, dims, vec) VALUES (?, ?, ?, ?)');
  const bump = db.prepare<[string]>('INSERT INTO ws_gen (workspace, gen) VALUES (?, 1) ON CONFLICT (workspace) DO UPDATE SET gen = gen + 1');
  const remove = (workspace: string, path: string): boolean => {
    const row = docId.get(workspace, path);
    if (!row) return false;
    deleteChunks.run(row.id);
    deleteDoc.run(row.id);
    bump.run(workspace);
    return true;
  };
  const put = db.transaction((workspace: string, doc: IndexedDocument) => {
    remove(workspace, doc.path);
    const { id } = insertDoc.get(workspace, doc.path, doc.hash, doc.bytes, new Date().toISOString())!;
    doc.chunks.forEach((c, i) => {
      const chunkId = Number(insertChunk.run(id, c.ordinal, c.heading, c.text, c.startLine, c.endLine).lastInsertRowid);
      const v = doc.vectors?.vectors[i];
      if (v) insertVec.run(chunkId, doc.vectors!.model, v.length, vectorBytes(v));
    });
    bump.run(workspace);
  });
  const removeTx = db.transaction(remove);
  const search = db.prepare<[string, string, number], ChunkRow>(`
    SELECT c.id, d.path, c.heading, c.text, c.start_line, c.end_line, -bm25(chunk_fts, 3.0, 1.0) AS score
    FROM chunk_fts JOIN chunk c ON c.id = chunk_fts.rowid JOIN doc d ON d.id = c.doc_id
    WHERE chunk_fts MATCH ? AND d.workspace = ?
    ORDER BY bm25(chunk_fts, 3.0, 1.0), c.id LIMIT ?`);
  const textSearch = (workspace: string, query: string, limit: number): ChunkRow[] => {
    const terms = queryTerms(query);
    return terms.length === 0 ? [] : search.all(terms.map((t) => `"${t}"`).join(' OR '), workspace, limit);
  };
  const hybrid = opts.embedder
    ? hybridSearcher(
        {
          textSearch: async (workspace, query, limit) => textSearch(workspace, query, limit),
          generation: async (workspace) => db.prepare<[string], { gen: number }>('SELECT gen FROM ws_gen WHERE workspace = ?').get(workspace)?.gen ?? 0,
          loadVectors: async (workspace, model) =>
            matrixOf(
              db
                .prepare<[string, string], { id: number; vec: Buffer }>('SELECT v.chunk_id AS id, v.vec FROM chunk_vec v JOIN chunk c ON c.id = v.chunk_id JOIN doc d ON d.id = c.doc_id WHERE d.workspace = ? AND v.model = ? ORDER BY v.chunk_id')
                .all(workspace, model),
            ),
          rowsById: async (workspace, ids) =>
            db
              .prepare<[string, string], ChunkRow>('SELECT c.id, d.path, c.heading, c.text, c.start_line, c.end_line, 0 AS score FROM chunk c JOIN doc d ON d.id = c.doc_id WHERE d.workspace = ? AND c.id IN (SELECT value FROM json_each(?))')
              .all(workspace, JSON.stringify(ids)),
        },
        opts.embedder,
        opts.warn ?? defaultWarn,
      )
    : undefined;
  return {
    kind: 'sqlite',
    ...(opts.embedder ? { embedder: opts.embedder } : {}),
    async documents(workspace) {
      const rows = db.prepare<[string], { path: string; hash: string }>('SELECT path, hash FROM doc WHERE workspace = ?').all(workspace);
      return new Map(rows.map((r) => [r.path, r.hash]));
    },
    async putDocument(workspace, doc) {
      checkVectors(doc);
      put(workspace, doc);
    },
    async removeDocument(workspace, path) {
      return removeTx(workspace, path);
    },
    async removeWorkspace(workspace) {
      db.transaction(() => {
        for (const { path } of db.prepare<[string], { path: string }>('SELECT path FROM doc WHERE workspace = ?').all(workspace)) remove(workspace, path);
      })();
    },
    async search(workspace, query, limit = 10) {
      const n = Math.max(1, Math.min(100, limit));
      if (queryTerms(query).length === 0) return [];
      return (hybrid ? await hybrid(workspace, query, n) : textSearch(workspace, query, n)).map(toHit);
    },
    async staleVectors(workspace, model) {
      const rows = db
        .prepare<[string, string], { path: string }>('SELECT DISTINCT d.path FROM doc d JOIN chunk c ON c.doc_id = d.id LEFT JOIN chunk_vec v ON v.chunk_id = c.id AND v.model = ? WHERE d.workspace = ? AND v.chunk_id IS NULL')
        .all(model, workspace);
      return new Set(rows.map((r) => r.path));
    },
    async stats(workspace) {
      const r = db
        .prepare<[string], { documents: number; chunks: number }>('SELECT count(DISTINCT d.id) AS documents, count(c.id) AS chunks FROM doc d LEFT JOIN chunk c ON c.doc_id = d.id WHERE d.workspace = ?')
        .get(workspace)!;
      return { documents: Number(r.documents), chunks: Number(r.chunks) };
    },
    async close() {
      db.close();
    },
  };
}

const PG_SCHEMA = 'steward_knowledge';
const PG_DDL = `
CREATE SCHEMA IF NOT EXISTS ${PG_SCHEMA};
CREATE TABLE IF NOT EXISTS ${PG_SCHEMA}.meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS ${PG_SCHEMA}.doc (
  id bigserial PRIMARY KEY,
  workspace text NOT NULL,
  path text NOT NULL,
  hash text NOT NULL,
  bytes integer NOT NULL,
  indexed_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (workspace, path)
);
CREATE TABLE IF NOT EXISTS ${PG_SCHEMA}.chunk (
  id bigserial PRIMARY KEY,
  doc_id bigint NOT NULL REFERENCES ${PG_SCHEMA}.doc(id) ON DELETE CASCADE,
  ordinal integer NOT NULL,
  heading text NOT NULL,
  text text NOT NULL,
  start_line integer NOT NULL,
  end_line integer NOT NULL,
  -- punctuation becomes spaces first, as SQLite's tokenizer splits on it: "rack-photo.png" is
  -- three words, not one file-name token no query word can match
  tsv tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('english', regexp_replace(heading, '[[:punct:]]+', ' ', 'g')), 'A') ||
    setweight(to_tsvector('english', regexp_replace(text, '[[:punct:]]+', ' ', 'g')), 'B')
  ) STORED
);
CREATE INDEX IF NOT EXISTS chunk_tsv ON ${PG_SCHEMA}.chunk USING gin (tsv);
CREATE INDEX IF NOT EXISTS chunk_doc ON ${PG_SCHEMA}.chunk (doc_id);
CREATE TABLE IF NOT EXISTS ${PG_SCHEMA}.chunk_vec (
  chunk_id bigint PRIMARY KEY REFERENCES ${PG_SCHEMA}.chunk(id) ON DELETE CASCADE,
  model text NOT NULL,
  dims integer NOT NULL,
  -- Float32 little-endian, normalised (brute-force cosine in the process; no pgvector needed)
  vec bytea NOT NULL
);
CREATE TABLE IF NOT EXISTS ${PG_SCHEMA}.ws_gen (workspace text PRIMARY KEY, gen bigint NOT NULL);
`;

/** The PostgreSQL index in the database at `url` (its schema created when missing). */
export async function openPostgresKnowledgeIndex(url: string, opts: KnowledgeIndexOptions = {}): Promise<KnowledgeIndex> {
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  // an idle connection the server closed (a restart, an administrator) is dropped and replaced;
  // without a listener that error would end the process
  pool.on('error', () => undefined);
  const tx = async <T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T> => {
    const c = await pool.connect();
    try {
      await c.query('BEGIN');
      const out = await fn(c);
      await c.query('COMMIT');
      return out;
    } catch (err) {
      await c.query('ROLLBACK').catch(() => undefined);
      throw err;
    } finally {
      c.release();
    }
  };
  try {
    // concurrent first starts: one creates, the others wait for it
    await tx(async (c) => {
      await c.query("SELECT pg_advisory_xact_lock(hashtext('steward_knowledge ddl'))");
      const exists = (await c.query<{ t: string | null }>(`SELECT to_regclass('${PG_SCHEMA}.meta')::text AS t`)).rows[0]?.t;
      const found = exists ? (await c.query<{ value: string }>(`SELECT value FROM ${PG_SCHEMA}.meta WHERE key = 'schema'`)).rows[0]?.value : undefined;
      if (found !== undefined && found !== PG_SCHEMA_VERSION) await c.query(`DROP SCHEMA ${PG_SCHEMA} CASCADE`);
      await c.query(PG_DDL);
      await c.query(`INSERT INTO ${PG_SCHEMA}.meta (key, value) VALUES ('schema', $1) ON CONFLICT (key) DO UPDATE SET value = excluded.value`, [PG_SCHEMA_VERSION]);
    });
  } catch (err) {
    await pool.end();
    throw err;
  }
  const bump = (c: pg.PoolClient | pg.Pool, workspace: string) => c.query(`INSERT INTO ${PG_SCHEMA}.ws_gen (workspace, gen) VALUES ($1, 1) ON CONFLICT (workspace) DO UPDATE SET gen = ws_gen.gen + 1`, [workspace]);
  const remove = async (c: pg.PoolClient, workspace: string, path: string) => {
    const gone = (await c.query(`DELETE FROM ${PG_SCHEMA}.doc WHERE workspace = $1 AND path = $2`, [workspace, path])).rowCount! > 0;
    if (gone) await bump(c, workspace);
    return gone;
  };
  const textSearch = async (workspace: string, query: string, limit: number): Promise<ChunkRow[]> => {
    const terms = queryTerms(query);
    if (terms.length === 0) return [];
    // the terms are letters and digits only, so ' | ' between them is the whole tsquery syntax used
    const r = await pool.query<ChunkRow>(
      `SELECT c.id, d.path, c.heading, c.text, c.start_line, c.end_line, ts_rank_cd(c.tsv, q, 1) AS score
       FROM ${PG_SCHEMA}.chunk c JOIN ${PG_SCHEMA}.doc d ON d.id = c.doc_id, to_tsquery('english', $2) q
       WHERE d.workspace = $1 AND c.tsv @@ q
       ORDER BY score DESC, c.id LIMIT $3`,
      [workspace, terms.join(' | '), limit],
    );
    return r.rows.map((x) => ({ ...x, id: Number(x.id) }));
  };
  const hybrid = opts.embedder
    ? hybridSearcher(
        {
          textSearch,
          generation: async (workspace) => Number((await pool.query<{ gen: string }>(`SELECT gen FROM ${PG_SCHEMA}.ws_gen WHERE workspace = $1`, [workspace])).rows[0]?.gen ?? 0),
          loadVectors: async (workspace, model) => {
            const r = await pool.query<{ id: string; vec: Buffer }>(
              `SELECT v.chunk_id AS id, v.vec FROM ${PG_SCHEMA}.chunk_vec v JOIN ${PG_SCHEMA}.chunk c ON c.id = v.chunk_id JOIN ${PG_SCHEMA}.doc d ON d.id = c.doc_id
               WHERE d.workspace = $1 AND v.model = $2 ORDER BY v.chunk_id`,
              [workspace, model],
            );
            return matrixOf(r.rows.map((x) => ({ id: Number(x.id), vec: x.vec })));
          },
          rowsById: async (workspace, ids) => {
            const r = await pool.query<ChunkRow>(
              `SELECT c.id, d.path, c.heading, c.text, c.start_line, c.end_line, 0 AS score FROM ${PG_SCHEMA}.chunk c JOIN ${PG_SCHEMA}.doc d ON d.id = c.doc_id WHERE d.workspace = $1 AND c.id = ANY($2::bigint[])`,
              [workspace, ids],
            );
            return r.rows.map((x) => ({ ...x, id: Number(x.id) }));
          },
        },
        opts.embedder,
        opts.warn ?? defaultWarn,
      )
    : undefined;
  return {
    kind: 'postgres',
    ...(opts.embedder ? { embedder: opts.embedder } : {}),
    async documents(workspace) {
      const r = await pool.query<{ path: string; hash: string }>(`SELECT path, hash FROM ${PG_SCHEMA}.doc WHERE workspace = $1`, [workspace]);
      return new Map(r.rows.map((x) => [x.path, x.hash]));
    },
    async putDocument(workspace, doc) {
      checkVectors(doc);
      await tx(async (c) => {
        await remove(c, workspace, doc.path);
        const { rows } = await c.query<{ id: string }>(`INSERT INTO ${PG_SCHEMA}.doc (workspace, path, hash, bytes) VALUES ($1, $2, $3, $4) RETURNING id`, [workspace, doc.path, doc.hash, doc.bytes]);
        const id = rows[0]!.id;
        // one statement for all chunks: arrays unnested
        if (doc.chunks.length > 0 && !doc.vectors) {
          await c.query(
            `INSERT INTO ${PG_SCHEMA}.chunk (doc_id, ordinal, heading, text, start_line, end_line)
             SELECT $1, * FROM unnest($2::int[], $3::text[], $4::text[], $5::int[], $6::int[])`,
            [id, doc.chunks.map((x) => x.ordinal), doc.chunks.map((x) => x.heading), doc.chunks.map((x) => x.text), doc.chunks.map((x) => x.startLine), doc.chunks.map((x) => x.endLine)],
          );
        } else if (doc.chunks.length > 0 && doc.vectors) {
          // the chunks' ids taken first, so each vector goes with its chunk
          const ids = (await c.query<{ id: string }>(`SELECT nextval(pg_get_serial_sequence('${PG_SCHEMA}.chunk', 'id')) AS id FROM generate_series(1, $1)`, [doc.chunks.length])).rows.map((r) => r.id);
          await c.query(
            `INSERT INTO ${PG_SCHEMA}.chunk (id, doc_id, ordinal, heading, text, start_line, end_line)
             SELECT u.id, $1, u.o, u.h, u.t, u.s, u.e FROM unnest($2::bigint[], $3::int[], $4::text[], $5::text[], $6::int[], $7::int[]) AS u(id, o, h, t, s, e)`,
            [id, ids, doc.chunks.map((x) => x.ordinal), doc.chunks.map((x) => x.heading), doc.chunks.map((x) => x.text), doc.chunks.map((x) => x.startLine), doc.chunks.map((x) => x.endLine)],
          );
          await c.query(`INSERT INTO ${PG_SCHEMA}.chunk_vec (chunk_id, model, dims, vec) SELECT u.id, $2, $3, u.v FROM unnest($1::bigint[], $4::bytea[]) AS u(id, v)`, [
            ids,
            doc.vectors.model,
            doc.vectors.vectors[0]!.length,
            doc.vectors.vectors.map(vectorBytes),
          ]);
        }
        await bump(c, workspace);
      });
    },
    async removeDocument(workspace, path) {
      return tx((c) => remove(c, workspace, path));
    },
    async removeWorkspace(workspace) {
      await tx(async (c) => {
        await c.query(`DELETE FROM ${PG_SCHEMA}.doc WHERE workspace = $1`, [workspace]);
        await bump(c, workspace);
      });
    },
    async search(workspace, query, limit = 10) {
      const n = Math.max(1, Math.min(100, limit));
      if (queryTerms(query).length === 0) return [];
      return (hybrid ? await hybrid(workspace, query, n) : await textSearch(workspace, query, n)).map(toHit);
    },
    async staleVectors(workspace, model) {
      const r = await pool.query<{ path: string }>(
        `SELECT DISTINCT d.path FROM ${PG_SCHEMA}.doc d JOIN ${PG_SCHEMA}.chunk c ON c.doc_id = d.id
         LEFT JOIN ${PG_SCHEMA}.chunk_vec v ON v.chunk_id = c.id AND v.model = $2
         WHERE d.workspace = $1 AND v.chunk_id IS NULL`,
        [workspace, model],
      );
      return new Set(r.rows.map((x) => x.path));
    },
    async stats(workspace) {
      const r = await pool.query<{ documents: string; chunks: string }>(
        `SELECT count(DISTINCT d.id) AS documents, count(c.id) AS chunks FROM ${PG_SCHEMA}.doc d LEFT JOIN ${PG_SCHEMA}.chunk c ON c.doc_id = d.id WHERE d.workspace = $1`,
        [workspace],
      );
      return { documents: Number(r.rows[0]!.documents), chunks: Number(r.rows[0]!.chunks) };
    },
    async close() {
      await pool.end();
    },
  };
}
