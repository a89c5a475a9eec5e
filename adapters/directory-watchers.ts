/**
 * Directories watched for changes, recursively, each settled burst of changes handed on as one
 * batch: the mechanism under the objectives' file trigger (adapters/objective-watchers.ts) and
 * the workspaces' reindexing (adapters/workspace-watchers.ts).
 *
 * - Watching: one non-recursive `fs.watch` (inotify) per directory, walked by this module so
 *   that `.git/` is never watched or reported and symlinks are never followed (a symlinked
 *   directory is not entered; a symlink is reported as one, its target never read). When
 *   `fs.watch` is unavailable for a directory tree (no inotify, its limits reached), or with
 *   `mode: 'poll'`, snapshots of `lstat`s are compared every `pollMs` instead. Both are bounded
 *   (`maxDirs` watched directories, `maxFiles` snapshot entries per directory).
 * - Batching: changes settle for `debounceMs` (at most `maxWaitMs` after the first), then the
 *   changed paths are `lstat`ed once and handed on as one batch. At most `maxBatch` paths per batch.
 * - Batch id: `file:` + SHA-256 of the changed relative paths with their size and mtime (a
 *   deleted one with its parent directory's mtime): the same change reported twice (two
 *   watchers, a rewrite with the same content and mtime) is one id; a new change is a new one.
 * - Payload: `{ directory, files: [{ path, change, kind, size, mtime, text? }], more }`; the
 *   first 4 KiB of small UTF-8 text files (up to `maxPreviewTotal` bytes of previews per batch).
 * - The set follows its owner's list (`list()`): `refresh()` after each change and a reconcile
 *   every `reconcileMs` (changes made elsewhere, a directory that reappeared).
 *
 * No Temporal here: the owner's `deliver` decides what a batch starts.
 */
import { createHash } from 'node:crypto';
import { constants, watch, type FSWatcher } from 'node:fs';
import { lstat, open, opendir, realpath, stat } from 'node:fs/promises';
import path from 'node:path';
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
  /** `watch` (default): fs.watch per directory, polling where that fails; `poll`: snapshots only. */
  mode?: 'watch' | 'poll';
  /** Quiet time before a burst of changes becomes a batch (default 500 ms). */
  debounceMs?: number;
  /** The longest a burst is held back (default 5 s). */
  maxWaitMs?: number;
  /** Reconcile the watched set with the owner's list this often (default 5 s). */
  reconcileMs?: number;
  /** Snapshot interval in poll mode (default 2 s). */
  pollMs?: number;
  /** Directories watched per root (default 2000); deeper ones are not watched. */
  maxDirs?: number;
  /** Entries a poll snapshot holds per root (default 20000). */
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
  /** The directories watched now, each listed once its watch (or first poll snapshot) is in place. */
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

/** One watched directory: watched (or polled), its changes batched. */
class DirectoryTrigger {
  mode: 'watch' | 'poll';
  private readonly watchers = new Map<string, FSWatcher>();
  private readonly pending = new Set<string>();
  private overflow = 0;
  private firstPendingAt = 0;
  private timer: NodeJS.Timeout | undefined;
  private pollTimer: NodeJS.Timeout | undefined;
  private snapshot: Map<string, string> | undefined;
  private flushing: Promise<void> | undefined;
  private polling = false;
  private closed = false;
  private warnedDirs = false;
  private attempts = 0;
  private rootReal = '';
  private rootId = '';
  /** The kernel's watch limit (or open files) ran out while walking the tree. */
  private exhausted = false;
  /** The root itself was removed or moved (inotify's events on the directory itself). */
  private broken = false;

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
      try {
        this.watchDir(this.root, true);
        await this.addTree(this.root);
        if (!this.exhausted) return;
        throw new Error('the watch limit was reached (fs.inotify.max_user_watches)');
      } catch (err) {
        this.log?.warn({ err, [this.what]: this.id, path: this.root }, 'cannot watch the directory; polling it instead');
        for (const w of this.watchers.values()) w.close();
        this.watchers.clear();
        this.mode = 'poll';
      }
    }
    this.snapshot = await this.scan();
    this.schedulePoll();
  }

  private async identity(): Promise<string> {
    // the birth time tells a directory made again apart from the removed one (its inode number is often reused)
    const st = await stat(this.root, { bigint: true });
    return `${st.dev}:${st.ino}:${st.birthtimeNs}`;
  }

  /** Still watching the same directory: not removed or replaced since (then it is watched anew). */
  async alive(): Promise<boolean> {
    if (this.broken || (this.mode === 'watch' && !this.watchers.has(this.root))) return false;
    try {
      return (await this.identity()) === this.rootId;
    } catch {
      return false;
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    clearTimeout(this.pollTimer);
    for (const w of this.watchers.values()) w.close();
    this.watchers.clear();
    await this.flushing;
  }

  // --- watch mode

  /** Watch one directory (not its subdirectories); the root's failure is thrown. */
  private watchDir(dir: string, isRoot = false): void {
    if (this.closed || this.watchers.has(dir)) return;
    if (this.watchers.size >= this.s.maxDirs) {
      if (!this.warnedDirs) this.log?.warn({ [this.what]: this.id, path: this.root, maxDirs: this.s.maxDirs }, 'too many directories to watch; deeper ones are not watched');
      this.warnedDirs = true;
      return;
    }
    let w: FSWatcher;
    try {
      w = watch(dir, { persistent: false }, (_event, name) => this.onFsEvent(dir, name === null ? null : String(name)));
    } catch (err) {
      if (isRoot) throw err;
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOSPC' || code === 'EMFILE') {
        if (!this.exhausted) this.log?.warn({ err, [this.what]: this.id, dir }, 'the watch limit was reached; changes below this directory are not seen');
        this.exhausted = true;
      }
      return;
    }
    w.on('error', () => {
      // the directory went away (or its watch broke): a later change or reconcile re-adds it
      w.close();
      if (this.watchers.get(dir) === w) this.watchers.delete(dir);
    });
    this.watchers.set(dir, w);
  }

  /** Watch a directory tree without entering .git or following symlinks; `collect` gets the files found (bounded). */
  private async addTree(top: string, collect?: string[]): Promise<void> {
    const queue = [top];
    let visited = 0;
    while (queue.length && !this.closed && visited++ < this.s.maxDirs) {
      const dir = queue.shift()!;
      if (dir !== top) {
        try {
          if (!(await lstat(dir)).isDirectory()) continue; // replaced by a symlink meanwhile: not entered
        } catch {
          continue;
        }
        this.watchDir(dir);
      }
      if (this.watchers.size >= this.s.maxDirs && !collect) break;
      let handle;
      try {
        handle = await opendir(dir);
      } catch {
        continue;
      }
      try {
        for await (const ent of handle) {
          if (ent.name === '.git') continue;
          const abs = path.join(dir, ent.name);
          if (ent.isDirectory()) queue.push(abs);
          else if (collect && collect.length < this.s.maxBatch) {
            const rel = toRel(this.root, abs);
            if (rel) collect.push(rel);
          }
        }
      } catch {
        // removed while being read
      }
    }
  }

  private onFsEvent(dir: string, name: string | null): void {
    if (this.closed) return;
    if (name === null) {
      // no name given: look at every entry of the directory
      void this.addEntries(dir);
      return;
    }
    if (dir === this.root && name === path.basename(this.root)) {
      // the root's own removal or move arrives under its own name: is it still there?
      void this.identity().then(
        (id) => void (id !== this.rootId && (this.broken = true)),
        () => void (this.broken = true),
      );
    }
    const rel = toRel(this.root, path.join(dir, name));
    if (rel) this.add(rel);
  }

  private async addEntries(dir: string): Promise<void> {
    try {
      let n = 0;
      for await (const ent of await opendir(dir)) {
        const rel = toRel(this.root, path.join(dir, ent.name));
        if (rel) this.add(rel);
        if (++n >= this.s.maxBatch) break;
      }
    } catch {
      // gone meanwhile
    }
  }

  // --- poll mode

  private schedulePoll(): void {
    if (this.closed) return;
    this.pollTimer = setTimeout(() => void this.poll(), this.s.pollMs);
    this.pollTimer.unref();
  }

  private async poll(): Promise<void> {
    if (this.closed || this.polling) return;
    this.polling = true;
    try {
      const next = await this.scan();
      const prev = this.snapshot ?? new Map<string, string>();
      for (const [rel, sig] of next) if (prev.get(rel) !== sig) this.add(rel);
      for (const rel of prev.keys()) if (!next.has(rel)) this.add(rel);
      this.snapshot = next;
    } catch (err) {
      this.log?.warn({ err, [this.what]: this.id, path: this.root }, 'polling the watched directory failed');
    } finally {
      this.polling = false;
      this.schedulePoll();
    }
  }

  /** rel -> size:mtime:kind of every entry (bounded), never entering .git or a symlink. */
  private async scan(): Promise<Map<string, string>> {
    const out = new Map<string, string>();
    const queue = [this.root];
    let visited = 0;
    while (queue.length && out.size < this.s.maxFiles && !this.closed && visited++ < this.s.maxDirs) {
      const dir = queue.shift()!;
      let handle;
      try {
        handle = await opendir(dir);
      } catch {
        continue;
      }
      try {
        for await (const ent of handle) {
          if (out.size >= this.s.maxFiles) break;
          if (ent.name === '.git') continue;
          const abs = path.join(dir, ent.name);
          const rel = toRel(this.root, abs);
          if (!rel) continue;
          if (ent.isDirectory()) {
            queue.push(abs);
            continue;
          }
          try {
            const st = await lstat(abs, { bigint: true });
            out.set(rel, `${st.size}:${st.mtimeNs}:${st.isSymbolicLink() ? 'l' : st.isFile() ? 'f' : 'o'}`);
          } catch {
            // gone meanwhile
          }
        }
      } catch {
        // removed while being read
      }
    }
    return out;
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
    const extra: string[] = [];
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
        const prefix = `${abs}${path.sep}`;
        for (const [dir, w] of this.watchers) {
          if (dir === abs || dir.startsWith(prefix)) {
            w.close();
            this.watchers.delete(dir);
          }
        }
        files.push({ path: rel, change: 'deleted', sig: `deleted:${parent}`, abs });
        continue;
      }
      const mtime = new Date(Number(st.mtimeMs)).toISOString();
      if (st.isDirectory()) {
        // a new directory: watch it, and report the files already in it (written before the watch)
        if (this.mode === 'watch' && !this.watchers.has(abs)) {
          const found: string[] = [];
          // the directory itself (addTree watches the ones below its top)
          this.watchDir(abs);
          await this.addTree(abs, found);
          for (const f of found) if (!ignored(f) && !rels.includes(f)) extra.push(f);
        }
        continue; // a directory's own mtime changes with every entry: its entries are the change
      }
      const kind = st.isSymbolicLink() ? 'symlink' : st.isFile() ? 'file' : 'other';
      files.push({ path: rel, change: 'changed', kind, size: Number(st.size), mtime, sig: `${kind}:${st.size}:${st.mtimeNs}`, abs, ino: st.ino });
    }
    for (const rel of extra.slice(0, Math.max(0, this.s.maxBatch - files.length))) {
      const abs = path.join(this.root, rel);
      try {
        const st = await lstat(abs, { bigint: true });
        if (st.isDirectory()) continue;
        const kind = st.isSymbolicLink() ? 'symlink' : st.isFile() ? 'file' : 'other';
        files.push({ path: rel, change: 'changed', kind, size: Number(st.size), mtime: new Date(Number(st.mtimeMs)).toISOString(), sig: `${kind}:${st.size}:${st.mtimeNs}`, abs, ino: st.ino });
      } catch {
        // gone meanwhile
      }
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
      // listed (watching()) only once its watch or first snapshot is in place: a change made
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
