/**
 * The knowledge index of a Steward: SQLite (`knowledge.db` in the data directory) beside a
 * SQLite database, PostgreSQL (its own schema) beside a PostgreSQL one. Opened once per
 * process, on first use.
 */
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { openPostgresKnowledgeIndex, openSqliteKnowledgeIndex, type KnowledgeIndex, type KnowledgeIndexOptions } from './index-store.js';

const opened = new Map<string, Promise<KnowledgeIndex>>();

/**
 * An opener of the index for Steward's database at `databaseUrl` (data directory `dataDir`);
 * with `opts.embedder`, searches are hybrid (one index per embeddings model and database).
 */
export function knowledgeIndexOpener(databaseUrl: string, dataDir: string, opts: KnowledgeIndexOptions = {}): () => Promise<KnowledgeIndex> {
  const postgres = /^postgres(ql)?:\/\//i.test(databaseUrl);
  const file = path.resolve(dataDir, 'knowledge.db');
  const key = `${postgres ? databaseUrl : file}\u0000${opts.embedder?.model ?? ''}`;
  return () => {
    let index = opened.get(key);
    if (!index) {
      index = postgres
        ? openPostgresKnowledgeIndex(databaseUrl, opts)
        : Promise.resolve().then(() => {
            mkdirSync(path.dirname(file), { recursive: true });
            return openSqliteKnowledgeIndex(file, opts);
          });
      index.catch(() => opened.delete(key));
      opened.set(key, index);
    }
    return index;
  };
}

/** Close every index this process opened (at shutdown). */
export async function closeKnowledgeIndexes(): Promise<void> {
  const all = [...opened.values()];
  opened.clear();
  for (const p of all) await (await p.catch(() => undefined))?.close();
}
