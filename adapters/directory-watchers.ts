/**
 * Directories watched for changes, recursively, each settled burst of changes handed on as one
 * batch: the mechanism under the objectives' file trigger (adapters/objectives/watchers.ts) and
 * the workspaces' reindexing (adapters/workspaces/watchers.ts).
 *
 * - Watching: chokidar (one `FSWatcher` per directory), with its native backend (one `fs.watch`,
 *   inotify, per directory) and symlinks not followed (a symlinked directory is not entered; a
 *   symlink is reported as one, its target never read); `.git/` is ignored (never watched or
 *   reported). When inotify is unavailable for the tree (no inotify, its limits reached: chokidar
 *   reports ENOSPC or EMFILE), or with `mode: 'poll'`, chokidar's polling backend compares
 *   `stat`s every `pollMs` instead. Both are bounded (`maxDirs` directories per root, and in poll
 *   mode `maxFiles` entries per root; the ones past the bound are ignored).
 * - Batching: changes settle for `debounceMs` (at most `maxWaitMs` after the first), then the
 *   changed paths are `lstat`ed once and handed on as one batch. At most `maxBatch` paths per batch.
 *   A new directory is not an entry of its own: chokidar reports the files in it.
 * - Batch id: `file:` + SHA-256 of the changed relative paths with their size and mtime (a
 *   deleted one with its parent directory's mtime): the same change reported twice (two
 *   watchers, a rewrite with the same content and mtime) is one id; a new change is a new one.
 * - Payload: `{ directory, files: [{ path, change, kind, size, mtime, text? }], more }`; the
 *   first 4 KiB of small UTF-8 text files (up to `maxPreviewTotal` bytes of previews per batch).
 * - The set follows its owner's list (`list()`): `refresh()` after each change and a reconcile
 *   every `reconcileMs` (changes made elsewhere, a directory that reappeared: a directory removed
 *   or made again is watched anew, told apart by its identity).
 *
 * No Temporal here: the owner's `deliver` decides what a batch starts.
 */
import { createHash } from 'node:crypto';
import { constants } from 'node:fs';
import { lstat, open, realpath, stat } from 'node:fs/promises';
import path from 'node:path';
import { FSWatcher } from 'chokidar';
import type { Logger } from 'pino';
import { checkWatchDirectory } from '../services/objectives.js';

export interface WatchedFile {
  /** Relative to the watched directory, with `/` separators. */
  path: string;
  change: 'changed' | 'deleted';
  kind?: 'file' | 'directory' | 'symlink' | 'other';
  size?: number;
  mtime?: string;
  /** The first 4 KiB of a small UTF-8 text file. */
  text?: string;
  /** The text is the beginning only. */
  truncated?: boolean;
}

export interface FileEventPayload {
  directory: string;
  files: WatchedFile[];
  /** Changed paths beyond the ones listed. */
  more: number;
}

/** How directories are watched (every field has a default). */
export interface WatchSettings {
  /** `watch` (default): chokidar's native backend (inotify), polling where that fails; `poll`: chokidar's polling only. */
  mode?: 'watch' | 'poll';
  /** Quiet time before a burst of changes becomes a batch (default 500 ms). */
  debounceMs?: number;
  /** The longest a burst is held back (default 5 s). */
  maxWaitMs?: number;
  /** Reconcile the watched set with the owner's list this often (default 5 s). */
  reconcileMs?: number;
  /** The interval of chokidar's polling in poll mode (default 2 s). */
  pollMs?: number;
  /** Directories watched per root (default 2000); deeper ones are not watched. */
  maxDirs?: number;
  /** Entries polled per root in poll mode (default 20000); the others are not watched. */
  maxFiles?: number;
  /** Changed paths per batch (default 500); the rest are counted. */
  maxBatch?: number;
  /** Files up to this size get a text preview (default 1 MiB). */
  maxPreviewFileBytes?: number;
  /** Preview bytes per batch (default 64 KiB). */
  maxPreviewTotal?: number;
}

export interface DirectoryWatchersOptions extends WatchSettings {
  /** The log field that names a watched thing ("objectiveId", "workspace"). */
  what: string;
  /** The thing in words, for messages ("an objective", "a workspace"). */
  noun: string;
  /** The directories to watch now: id -> absolute path. */
  list(): Promise<Map<string, string>>;
  /** Hand on one settled batch of a directory's changes; a rejection is retried a few times. */
  deliver(id: string, batchId: string, payload: FileEventPayload): Promise<void>;
  /** Subscribe to the owner's changes (refresh at once); returns the unsubscribe. */
  onChange?: (listener: () => void) => () => void;
  log?: Logger;
}

export interface DirectoryWatchers {
  /** Re-read the list and watch exactly its directories (serialised). */
  refresh(): Promise<void>;
  /** The directories watched now, each listed once its watch (or first poll stats) is in place. */
  watching(): Array<{ id: string; path: string; mode: 'watch' | 'poll' }>;
  stop(): Promise<void>;
}

const PREVIEW_BYTES = 4096;

/** A path relative to the root that is (under) a `.git` directory. */
function ignored(rel: string): boolean {
  return rel.split('/').includes('.git');
}

function toRel(root: string, abs: string): string | undefined {
  const rel = path.relative(root, abs);
  if (!rel || rel.startsWith('..') || path.isAbsolute(rel)) return undefined;
  return rel.split(path.sep).join('/');
}

/** The text of a file's first bytes when it is UTF-8 text (no NUL bytes); undefined otherwise. */
function textPreview(buf: Buffer, whole: boolean): string | undefined {
  if (buf.includes(0)) return undefined;
  const dec = new TextDecoder('utf-8', { fatal: true });
  // a cut-off multi-byte character at the end is not a reason to call the file binary
  for (let cut = 0; cut <= (whole ? 0 : 3) && cut < buf.length; cut++) {
    try {
      return dec.decode(buf.subarray(0, buf.length - cut));
    } catch {
      // try a shorter prefix
    }
  }
  return buf.length === 0 ? '' : undefined;
}

/** The first bytes of a regular file inside `rootReal`, never through a symlink. */
async function readPreview(abs: string, expectIno: bigint, rootReal: string): Promise<{ text: string; truncated: boolean } | undefined> {
  // a directory on the way that became a symlink must not lead out of the watched tree
  try {
    const dir = await realpath(path.dirname(abs));
    if (dir !== rootReal && !dir.startsWith(rootReal === '/' ? '/' : `${rootReal}/`)) return undefined;
  } catch {
    return undefined;
  }
  let fh;
  try {
    fh = await open(abs, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return undefined;
  }
  try {
    const st = await fh.stat({ bigint: true });
    if (!st.isFile() || st.ino !== expectIno) return undefined;
    const buf = Buffer.alloc(PREVIEW_BYTES);
    const { bytesRead } = await fh.read(buf, 0, PREVIEW_BYTES, 0);
    const whole = BigInt(bytesRead) >= st.size;
    const text = textPreview(buf.subarray(0, bytesRead), whole);
    return text === undefined ? undefined : { text, truncated: !whole };
  } catch {
    return undefined;
  } finally {
    await fh.close().catch(() => undefined);
  }
}

interface Settings {
  debounceMs: number;
  maxWaitMs: number;
  pollMs: number;
  maxDirs: number;
  maxFiles: number;
  maxBatch: number;
  maxPreviewFileBytes: number;
  maxPreviewTotal: number;
}

/** One watched directory: watched (or polled) by chokidar, its changes batched. */
class DirectoryTrigger {
  mode: 'watch' | 'poll';
  private watcher: FSWatcher | undefined;
  private readonly pending = new Set<string>();
  private overflow = 0;
  private firstPendingAt = 0;
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | undefined;
  private closed = false;
  private attempts = 0;
  private rootReal = '';
  private rootId = '';
  /** Directories (and in poll mode files) taken into the watch: bounded by maxDirs / maxFiles. */
  private readonly dirs = new Set<string>();
  private readonly files = new Set<string>();
  private warnedDirs = false;
  private warnedFiles = false;
  /** The root itself was removed (chokidar's `unlinkDir` of the root). */
  private broken = false;
  /** Switching from inotify to polling (the watch limit was reached). */
  private switching: Promise<void> | undefined;

  constructor(
    readonly id: string,
    readonly root: string,
    mode: 'watch' | 'poll',
    private readonly s: Settings,
    private readonly deliver: (eventId: string, payload: FileEventPayload) => Promise<void>,
    private readonly log?: Logger,
    private readonly what = 'directory',
  ) {
    this.mode = mode;
  }

  async start(): Promise<void> {
    this.rootReal = await realpath(this.root);
    this.rootId = await this.identity();
    if (this.mode === 'watch') {
      const failed = await this.open('watch');
      if (!failed) return;
      this.log?.warn({ err: failed, [this.what]: this.id, path: this.root }, 'cannot watch the directory; polling it instead');
      this.mode = 'poll';
    }
    const failed = await this.open('poll');
    if (failed) throw failed;
  }

  /**
   * A chokidar watcher of the tree in this mode, resolved once its initial scan is done (every
   * directory watched, or its first stats taken): an error that stops inotify (ENOSPC, EMFILE)
   * before then closes it and is returned.
   */
  private async open(mode: 'watch' | 'poll'): Promise<Error | undefined> {
    this.dirs.clear();
    this.files.clear();
    const watcher = new FSWatcher({
      backend: mode === 'poll' ? 'polling' : 'native',
      pollingInterval: this.s.pollMs,
      pollingBinaryInterval: this.s.pollMs,
      persistent: false,
      ignoreInitial: true,
      // an unreadable directory is left out, as before (nothing to report from it)
      ignorePermissionErrors: true,
      followSymlinks: false,
      // an editor's temp files and an unlink followed by an add are changes like any other
      atomic: false,
      ignored: (abs: string, stats?: { isDirectory(): boolean }) => this.ignores(abs, stats, mode),
    });
    this.watcher = watcher;
    let exhausted: Error | undefined;
    let isReady = false;
    const ready = new Promise<void>((resolve) => {
      watcher.once('ready', () => {
        isReady = true;
        resolve();
      });
      watcher.on('error', (e: unknown) => {
        const err = e instanceof Error ? e : new Error(String(e));
        const code = (err as NodeJS.ErrnoException).code;
        if (mode === 'watch' && (code === 'ENOSPC' || code === 'EMFILE')) {
          // before the watch is in place: start() polls instead; after: switch to polling now
          if (!isReady) {
            exhausted ??= err;
            resolve();
          } else if (this.watcher === watcher && !this.closed) void this.fallBack(err);
          return;
        }
        this.log?.warn({ err, [this.what]: this.id, path: this.root }, 'watching the directory failed');
      });
    });
    watcher.on('all', (event, abs) => this.onEvent(event, abs));
    // chokidar reports a change only when a file's stats differ from the ones it saw last; every
    // inotify event counts here (a rewrite with the same content and mtime is reported, and
    // its batch has the id of the first): its raw events name the entry of a watched directory
    if (mode === 'watch') watcher.on('raw', (_event, name, details) => this.onRaw(name, details));
    watcher.add(this.root);
    await ready;
    if (exhausted && this.watcher === watcher) {
      this.watcher = undefined;
      await watcher.close();
    }
    return exhausted;
  }

  /** The watch limit was reached after the watch was in place: poll from now on. */
  private async fallBack(err: Error): Promise<void> {
    if (this.switching || this.mode === 'poll') return;
    this.switching = (async () => {
      this.log?.warn({ err, [this.what]: this.id, path: this.root }, 'the watch limit was reached; polling the directory instead');
      const old = this.watcher;
      this.watcher = undefined;
      this.mode = 'poll';
      await old?.close();
      if (!this.closed) await this.open('poll');
    })();
    await this.switching;
  }

  /** chokidar's `ignored`: `.git/`, and what is past the bounds. */
  private ignores(abs: string, stats: { isDirectory(): boolean } | undefined, mode: 'watch' | 'poll'): boolean {
    const rel = toRel(this.root, abs);
    if (rel === undefined) return false; // the root and the directories above it
    if (ignored(rel)) return true;
    if (!stats) return false;
    if (stats.isDirectory()) {
      if (this.dirs.has(abs)) return false;
      if (this.dirs.size + 1 >= this.s.maxDirs) {
        if (!this.warnedDirs) this.log?.warn({ [this.what]: this.id, path: this.root, maxDirs: this.s.maxDirs }, 'too many directories to watch; deeper ones are not watched');
        this.warnedDirs = true;
        return true;
      }
      this.dirs.add(abs);
      return false;
    }
    if (mode !== 'poll' || this.files.has(abs)) return false;
    if (this.files.size >= this.s.maxFiles) {
      if (!this.warnedFiles) this.log?.warn({ [this.what]: this.id, path: this.root, maxFiles: this.s.maxFiles }, 'too many files to poll; the others are not watched');
      this.warnedFiles = true;
      return true;
    }
    this.files.add(abs);
    return false;
  }

  private onRaw(name: string | null, details: unknown): void {
    if (this.closed || name === null) return;
    const dir = (details as { watchedPath?: unknown } | undefined)?.watchedPath;
    if (typeof dir !== 'string' || (path.resolve(dir) !== path.resolve(this.root) && !this.dirs.has(dir))) return;
    // a directory's own removal comes under its own name (chokidar's unlink events report it; a
    // child named like its directory is reported by them too)
    if (name === path.basename(dir)) return;
    const rel = toRel(this.root, path.join(dir, name));
    if (rel) this.add(rel);
  }

  private onEvent(event: string, abs: string): void {
    if (this.closed) return;
    const rel = toRel(this.root, abs);
    if (rel === undefined) {
      // the root itself went away: watched anew once it is back (alive() says so)
      if (event === 'unlinkDir' && path.resolve(abs) === path.resolve(this.root)) this.broken = true;
      return;
    }
    if (event === 'unlinkDir') this.dirs.delete(abs);
    if (event === 'unlink') this.files.delete(abs);
    // a directory's own appearance is not a change: chokidar reports its entries
    if (event === 'addDir') return;
    this.add(rel);
  }

  private async identity(): Promise<string> {
    // the birth time tells a directory made again apart from the removed one (its inode number is often reused)
    const st = await stat(this.root, { bigint: true });
    return `${st.dev}:${st.ino}:${st.birthtimeNs}`;
  }

  /** Still watching the same directory: not removed or replaced since (then it is watched anew). */
  async alive(): Promise<boolean> {
    if (this.broken || (!this.watcher && !this.switching)) return false;
    try {
      return (await this.identity()) === this.rootId;
    } catch {
      return false;
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    await this.switching;
    await this.watcher?.close();
    this.watcher = undefined;
    await this.flushing;
  }

  // --- batching

  private add(rel: string): void {
    if (ignored(rel)) return;
    if (this.pending.size >= this.s.maxBatch && !this.pending.has(rel)) {
      this.overflow++;
    } else {
      this.pending.add(rel);
    }
    this.schedule(this.s.debounceMs);
  }

  private schedule(delay: number): void {
    if (this.closed) return;
    const now = Date.now();
    if (!this.firstPendingAt) this.firstPendingAt = now;
    const wait = Math.max(0, Math.min(delay, this.firstPendingAt + this.s.maxWaitMs - now));
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.flush(), wait);
    this.timer.unref();
  }

  private async flush(): Promise<void> {
    if (this.flushing) {
      // one delivery at a time: come back when it is done
      await this.flushing;
      if (this.pending.size) this.schedule(0);
      return;
    }
    const rels = [...this.pending];
    const overflow = this.overflow;
    this.pending.clear();
    this.overflow = 0;
    this.firstPendingAt = 0;
    if (!rels.length || this.closed) return;
    const run = (async () => {
      try {
        const batch = await this.describe(rels);
        if (!batch) return;
        batch.payload.more += overflow;
        await this.deliver(batch.eventId, batch.payload);
        this.attempts = 0;
      } catch (err) {
        // the database or Temporal is unavailable: try the same paths again (the id is stable), a few times
        this.attempts++;
        this.log?.warn({ err, [this.what]: this.id, attempt: this.attempts }, 'a file event could not be delivered');
        if (this.attempts <= 3 && !this.closed) {
          for (const r of rels) if (this.pending.size < this.s.maxBatch) this.pending.add(r);
          this.schedule(this.s.debounceMs * 4 * this.attempts);
        } else {
          this.attempts = 0;
        }
      }
    })();
    this.flushing = run;
    try {
      await run;
    } finally {
      this.flushing = undefined;
    }
  }

  /** lstat the changed paths once: the event id and the payload; undefined when nothing is left to report. */
  private async describe(rels: string[]): Promise<{ eventId: string; payload: FileEventPayload } | undefined> {
    const files: Array<WatchedFile & { sig: string; abs: string; ino?: bigint }> = [];
    for (const rel of rels.sort()) {
      const abs = path.join(this.root, rel);
      let st;
      try {
        st = await lstat(abs, { bigint: true });
      } catch {
        // deleted: tell it apart from an earlier deletion of the same name by its directory's mtime
        let parent = 'gone';
        try {
          parent = String((await lstat(path.dirname(abs), { bigint: true })).mtimeNs);
        } catch {
          // the directory went too
        }
        files.push({ path: rel, change: 'deleted', sig: `deleted:${parent}`, abs });
        continue;
      }
      // a directory's own mtime changes with every entry: its entries are the change
      if (st.isDirectory()) continue;
      const mtime = new Date(Number(st.mtimeMs)).toISOString();
      const kind = st.isSymbolicLink() ? 'symlink' : st.isFile() ? 'file' : 'other';
      files.push({ path: rel, change: 'changed', kind, size: Number(st.size), mtime, sig: `${kind}:${st.size}:${st.mtimeNs}`, abs, ino: st.ino });
    }
    if (!files.length) return undefined;
    files.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
    const hash = createHash('sha256');
    for (const f of files) hash.update(`${f.path}\0${f.sig}\n`);
    const eventId = `file:${hash.digest('hex').slice(0, 40)}`;
    let previewBudget = this.s.maxPreviewTotal;
    const listed: WatchedFile[] = [];
    for (const f of files) {
      const { sig: _sig, abs, ino, ...entry } = f;
      if (entry.kind === 'file' && ino !== undefined && (entry.size ?? 0) <= this.s.maxPreviewFileBytes && previewBudget > 0) {
        const p = await readPreview(abs, ino, this.rootReal);
        if (p) {
          const text = p.text.length > previewBudget ? p.text.slice(0, previewBudget) : p.text;
          previewBudget -= Buffer.byteLength(text);
          entry.text = text;
          if (p.truncated || text.length < p.text.length) entry.truncated = true;
        }
      }
      listed.push(entry);
    }
    return { eventId, payload: { directory: this.root, files: listed, more: 0 } };
  }
}

/** Watch the directories `list()` names; hand each settled burst of changes to `deliver`. */
export async function startDirectoryWatchers(opts: DirectoryWatchersOptions): Promise<DirectoryWatchers> {
  const s: Settings = {
    debounceMs: opts.debounceMs ?? 500,
    maxWaitMs: opts.maxWaitMs ?? 5000,
    pollMs: opts.pollMs ?? 2000,
    maxDirs: opts.maxDirs ?? 2000,
    maxFiles: opts.maxFiles ?? 20_000,
    maxBatch: opts.maxBatch ?? 500,
    maxPreviewFileBytes: opts.maxPreviewFileBytes ?? 1024 * 1024,
    maxPreviewTotal: opts.maxPreviewTotal ?? 64 * 1024,
  };
  const triggers = new Map<string, DirectoryTrigger>();
  const refusedOnce = new Map<string, string>();
  let stopped = false;
  let chain: Promise<void> = Promise.resolve();

  async function reconcile(): Promise<void> {
    if (stopped) return;
    const want = await opts.list();
    for (const id of refusedOnce.keys()) if (!want.has(id)) refusedOnce.delete(id);
    for (const [id, t] of triggers) {
      // gone, moved, paused, or its directory was removed (watched again once it is back)
      if (want.get(id) !== t.root || !(await t.alive())) {
        triggers.delete(id);
        await t.close();
      }
    }
    for (const [id, dir] of want) {
      if (triggers.has(id) || stopped) continue;
      const refused = await checkWatchDirectory(dir);
      if (refused) {
        // said once per id and reason; tried again on every reconcile
        if (refusedOnce.get(id) !== refused) opts.log?.warn({ [opts.what]: id, path: dir, reason: refused }, `cannot watch the directory of ${opts.noun}`);
        refusedOnce.set(id, refused);
        continue;
      }
      refusedOnce.delete(id);
      const t = new DirectoryTrigger(id, dir, opts.mode ?? 'watch', s, (batchId, payload) => opts.deliver(id, batchId, payload), opts.log, opts.what);
      // listed (watching()) only once its watch or first poll stats are in place: a change made
      // after the directory shows as watched is seen
      await t.start();
      triggers.set(id, t);
    }
  }

  const refresh = (): Promise<void> => {
    chain = chain.then(reconcile).catch((err: unknown) => opts.log?.warn({ err }, 'reconciling the watched directories failed'));
    return chain;
  };

  const unsubscribe = opts.onChange?.(() => void refresh());
  const reconcileTimer = setInterval(() => void refresh(), opts.reconcileMs ?? 5000);
  reconcileTimer.unref();
  await refresh();

  return {
    refresh,
    watching: () => [...triggers.values()].map((t) => ({ id: t.id, path: t.root, mode: t.mode })),
    async stop() {
      stopped = true;
      clearInterval(reconcileTimer);
      unsubscribe?.();
      await chain;
      await Promise.all([...triggers.values()].map((t) => t.close()));
      triggers.clear();
    },
  };
}
