/**
 * SQLite's WAL checkpoints off the main thread. In WAL mode a commit appends the pages it
 * changed to the `-wal` file; the connection whose commit takes the log past
 * `wal_autocheckpoint` pages (1,000 by default) then copies the log back into the database file
 * and syncs it, inside that commit. better-sqlite3 is synchronous, so that copy ran on the
 * process's main thread: under chat load one commit in about fifty took 1-13 ms (the turn path's
 * receipt inserts: p50 68 µs, p99 4.7 ms), holding every conversation, HTTP request and
 * workflow activation of the process meanwhile.
 *
 * Here a worker thread has a connection of its own to the same file and runs a PASSIVE
 * checkpoint every `everyMs`: it never waits for the main connection (a PASSIVE checkpoint
 * copies what no reader still needs and takes no lock a writer waits on), and the main
 * connection's automatic checkpoint moves to BACKSTOP_PAGES, so it runs only if this thread has
 * stopped keeping up. Durability is unchanged: a commit is in the log as before; the checkpoint
 * only moves it into the database file.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

/** How often the thread checkpoints (ms). */
export const CHECKPOINT_EVERY_MS = 250;

/**
 * The main connection's `wal_autocheckpoint` while the thread runs: 16,000 pages (64 MB with
 * 4 KB pages), far above what the thread lets the log reach, so it only matters if the thread
 * fell behind or died.
 */
export const BACKSTOP_PAGES = 16_000;

/** One checkpoint's outcome, as `PRAGMA wal_checkpoint` reports it. */
export interface CheckpointResult {
  /** 1 when a lock kept the checkpoint from running at all. */
  busy: number;
  /** Frames in the log. */
  log: number;
  /** Frames of the log now in the database file. */
  checkpointed: number;
}

export interface WalCheckpointer {
  /** Checkpoint now in the thread and answer with its result (the tests use it; Steward itself relies on the interval). */
  checkpoint(): Promise<CheckpointResult>;
  /** Checkpoints that moved frames (or were asked for) so far, and the last failure's message, if any. */
  readonly stats: { checkpoints: number; lastError?: string };
  /** Stop the thread and close its connection. */
  stop(): Promise<void>;
}

// CommonJS, run with `eval`: the thread needs no loader for TypeScript. better-sqlite3 is
// required by the path the main thread resolved, so the thread loads the same copy.
const THREAD_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.module);
const db = new Database(workerData.file, { fileMustExist: true });
const stmt = db.prepare('PRAGMA wal_checkpoint(PASSIVE)');
const run = () => {
  try {
    const r = stmt.get();
    return { busy: r.busy, log: r.log, checkpointed: r.checkpointed };
  } catch (err) {
    return { error: String(err && err.message || err) };
  }
};
// the main thread hears of a checkpoint that moved something, or failed: an idle process is left alone
let last = '';
const timer = setInterval(() => {
  const r = run();
  const seen = JSON.stringify(r);
  if (seen !== last && (r.error !== undefined || r.checkpointed > 0)) parentPort.postMessage({ kind: 'tick', ...r });
  last = seen;
}, workerData.everyMs);
parentPort.on('message', (m) => {
  if (m && m.kind === 'checkpoint') parentPort.postMessage({ kind: 'result', id: m.id, ...run() });
  if (m && m.kind === 'stop') {
    clearInterval(timer);
    try { db.close(); } catch {}
    parentPort.close();
  }
});
`;

type ThreadMessage = { kind: 'tick' | 'result'; id?: number; error?: string } & Partial<CheckpointResult>;

/**
 * What went wrong in the thread: a checkpoint that failed (the thread tries again on its next
 * interval; told once per distinct message), or the thread itself stopped (it could not open the
 * database, or died): then nothing checkpoints but the main connection's backstop.
 */
export interface CheckpointTrouble {
  message: string;
  stopped: boolean;
}

/**
 * Start checkpointing the SQLite database at `file` (already in WAL mode) from a worker thread.
 * The thread does not keep the process alive. `onTrouble` hears of a failure (see
 * CheckpointTrouble); `stats.lastError` keeps the last one.
 */
export function startWalCheckpointer(file: string, opts: { everyMs?: number; onTrouble?: (t: CheckpointTrouble) => void } = {}): WalCheckpointer {
  const module = createRequire(import.meta.url).resolve('better-sqlite3');
  const worker = new Worker(THREAD_SOURCE, { eval: true, workerData: { file, module, everyMs: opts.everyMs ?? CHECKPOINT_EVERY_MS } });
  const stats: WalCheckpointer['stats'] = { checkpoints: 0 };
  const waiting = new Map<number, { resolve: (r: CheckpointResult) => void; reject: (e: Error) => void }>();
  let next = 0;
  let exited = false;
  let stopping = false;
  let told: string | undefined;
  let toldStopped = false;
  const trouble = (message: string, stopped: boolean) => {
    stats.lastError = message;
    if (stopped ? toldStopped : told === message) return;
    told = message;
    toldStopped ||= stopped;
    opts.onTrouble?.({ message, stopped });
  };
  const exit = new Promise<void>((resolve) => {
    worker.once('exit', (code) => {
      exited = true;
      if (!stopping) trouble(stats.lastError ?? `the thread exited (code ${code})`, true);
      for (const w of waiting.values()) w.reject(new Error('the WAL checkpoint thread has stopped'));
      waiting.clear();
      resolve();
    });
  });
  worker.on('error', (err) => {
    // an error the thread did not catch ends it ('exit' follows)
    trouble(err.message, true);
  });
  worker.on('message', (m: ThreadMessage) => {
    if (m.error !== undefined) trouble(m.error, false);
    else stats.checkpoints++;
    if (m.kind !== 'result' || m.id === undefined) return;
    const w = waiting.get(m.id);
    waiting.delete(m.id);
    if (!w) return;
    if (m.error !== undefined) w.reject(new Error(`WAL checkpoint failed: ${m.error}`));
    else w.resolve({ busy: m.busy ?? 0, log: m.log ?? 0, checkpointed: m.checkpointed ?? 0 });
  });
  // after the listeners: adding a 'message' listener refs the worker's port again
  worker.unref();
  return {
    stats,
    checkpoint() {
      if (exited) return Promise.reject(new Error('the WAL checkpoint thread has stopped'));
      const id = next++;
      // an answer awaited keeps the process alive until it comes
      worker.ref();
      return new Promise<CheckpointResult>((resolve, reject) => {
        waiting.set(id, { resolve, reject });
        worker.postMessage({ kind: 'checkpoint', id });
      }).finally(() => {
        if (waiting.size === 0 && !exited) worker.unref();
      });
    },
    async stop() {
      stopping = true;
      if (!exited) {
        worker.ref();
        worker.postMessage({ kind: 'stop' });
      }
      await exit;
    },
  };
}
