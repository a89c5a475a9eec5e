/**
 * SQLite's WAL checkpoints in a thread of their own (domain/wal-checkpointer.ts): the thread
 * moves committed pages into the database file while the main connection, its automatic
 * checkpoint raised to the backstop, never does it inside a commit; and tuneDb wires it to a
 * migrated database and stops it, and a thread's trouble is told and answered.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { checkpointTrouble, tuneDb } from '../../domain/db.js';
import { BACKSTOP_PAGES, startWalCheckpointer, type CheckpointTrouble } from '../../domain/wal-checkpointer.js';
import { testDatabases, type TestDatabase } from '../helpers/db.js';

/** Rows in the database file alone: a copy of it opened without its -wal file. */
function rowsInFile(dbFile: string, dir: string): number {
  const copy = path.join(dir, `copy-${Math.random().toString(36).slice(2)}.db`);
  copyFileSync(dbFile, copy);
  const c = new Database(copy, { readonly: true });
  try {
    return (c.prepare('SELECT count(*) AS n FROM t').get() as { n: number }).n;
  } finally {
    c.close();
  }
}

/** A WAL database with the main connection's automatic checkpoint at the backstop, as tuneDb leaves it. */
function mainConnection(file: string): Database.Database {
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma(`wal_autocheckpoint = ${BACKSTOP_PAGES}`);
  db.exec('CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL)');
  // the table itself in the database file: what follows is the rows' commits only
  db.pragma('wal_checkpoint(TRUNCATE)');
  return db;
}

/** 2,000 commits of one row each: well past the default 1,000-page automatic checkpoint. */
function writeRows(db: Database.Database): void {
  const insert = db.prepare('INSERT INTO t (body) VALUES (?)');
  for (let i = 0; i < 2000; i++) insert.run('x'.repeat(600));
}

describe('the WAL checkpoint thread', () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'steward-wal-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('the main connection at the backstop leaves 2,000 commits in the log: none reaches the database file by itself', () => {
    const file = path.join(dir, 'alone.db');
    const db = mainConnection(file);
    try {
      writeRows(db);
      assert.equal(rowsInFile(file, dir), 0, 'no commit checkpointed by the writing connection');
      assert.ok(statSync(`${file}-wal`).size > 1000 * 4096, 'the log grew past the default checkpoint size');
    } finally {
      db.close();
    }
  });

  it('moves the log into the database file from its own thread, on its interval and on demand, and stops', async () => {
    const file = path.join(dir, 'threaded.db');
    const db = mainConnection(file);
    const cp = startWalCheckpointer(file, { everyMs: 20 });
    try {
      writeRows(db);
      // the interval's checkpoints: the thread ticks without being asked
      const t0 = Date.now();
      while (cp.stats.checkpoints < 1 && Date.now() - t0 < 10_000) await new Promise((r) => setTimeout(r, 20));
      assert.ok(cp.stats.checkpoints >= 1, `the thread checkpointed on its own (${cp.stats.checkpoints})`);
      const r = await cp.checkpoint();
      assert.equal(r.busy, 0);
      assert.ok(r.log > 0, 'the log had frames');
      assert.equal(r.checkpointed, r.log, 'every frame is in the database file');
      assert.equal(rowsInFile(file, dir), 2000, 'all the commits are in the database file');
      assert.equal(cp.stats.lastError, undefined);
      // the log is reused from its start once checkpointed: writing more does not grow it past what it was
      const size = statSync(`${file}-wal`).size;
      writeRows(db);
      await cp.checkpoint();
      writeRows(db);
      assert.ok(statSync(`${file}-wal`).size <= size * 1.5, 'the log is reused, not grown without end');
    } finally {
      await cp.stop();
      db.close();
    }
    await assert.rejects(cp.checkpoint(), /stopped/);
  });

  it('does not keep the process alive: a process that never stops it still exits', () => {
    const file = path.join(dir, 'exits.db');
    // a commit in the log (the connection kept open, so its close does not checkpoint it): the thread has work, and says so
    const db = mainConnection(file);
    db.prepare('INSERT INTO t (body) VALUES (?)').run('x');
    // a module file, as Steward's own are (a process evaluating \`-e\` ended regardless of the thread)
    const script = path.join(dir, 'exits.mts');
    const module = new URL('../../domain/wal-checkpointer.ts', import.meta.url).href;
    writeFileSync(
      script,
      `const { startWalCheckpointer } = await import(${JSON.stringify(module)});
      startWalCheckpointer(process.env.WAL_FILE, { everyMs: 10 });
      setTimeout(() => process.stdout.write('done'), 200);`,
    );
    const r = spawnSync(process.execPath, ['--import', 'tsx', script], {
      cwd: fileURLToPath(new URL('../../', import.meta.url)),
      env: { ...process.env, WAL_FILE: file },
      encoding: 'utf8',
      timeout: 20_000,
    });
    db.close();
    assert.equal(r.signal, null, `the process had to be killed: ${r.stderr}`);
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout, 'done');
  });

  it('a file that is not there: the thread fails and says so, once, as stopped, and stop still returns', async () => {
    const troubles: CheckpointTrouble[] = [];
    const cp = startWalCheckpointer(path.join(dir, 'missing', 'none.db'), { everyMs: 20, onTrouble: (t) => troubles.push(t) });
    const t0 = Date.now();
    while (troubles.length === 0 && Date.now() - t0 < 10_000) await new Promise((r) => setTimeout(r, 20));
    assert.match(cp.stats.lastError ?? '', /directory does not exist|unable to open|no such file/i);
    // the thread's error and its exit that follows are one trouble
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(troubles.length, 1, JSON.stringify(troubles));
    assert.equal(troubles[0]?.stopped, true);
    assert.equal(troubles[0]?.message, cp.stats.lastError);
    await cp.stop();
    await assert.rejects(cp.checkpoint(), /stopped/);
  });

  it('a thread stopped on purpose is no trouble', async () => {
    const file = path.join(dir, 'quiet.db');
    const db = mainConnection(file);
    const troubles: CheckpointTrouble[] = [];
    const cp = startWalCheckpointer(file, { everyMs: 20, onTrouble: (t) => troubles.push(t) });
    await cp.checkpoint();
    await cp.stop();
    db.close();
    assert.deepEqual(troubles, []);
  });
});

describe('tuneDb on SQLite', () => {
  let t: TestDatabase;
  before(async () => {
    const sqlite = testDatabases().find((k) => k.name === 'sqlite');
    assert.ok(sqlite);
    t = await sqlite.create();
  });
  after(async () => t.cleanup());

  it('raises the connection checkpoint to the backstop while the thread runs, and restores it when stopped', async () => {
    const pragma = async () => Number(((await t.db.$queryRawUnsafe('PRAGMA wal_autocheckpoint')) as Array<Record<string, unknown>>)[0]?.wal_autocheckpoint);
    const stop = await tuneDb(t.db, t.url);
    assert.equal(await pragma(), BACKSTOP_PAGES);
    await stop();
    assert.equal(await pragma(), 1000);
    const none = await tuneDb(t.db, t.url, { checkpointThread: false });
    assert.equal(await pragma(), 1000, 'no thread, no backstop');
    await none();
  });

  it("tells of the thread's trouble in the log, and a stopped thread's backstop goes back to SQLite's own checkpoint", async () => {
    const pragma = async () => Number(((await t.db.$queryRawUnsafe('PRAGMA wal_autocheckpoint')) as Array<Record<string, unknown>>)[0]?.wal_autocheckpoint);
    const warned: Array<{ obj: object; msg: string }> = [];
    const log = { warn: (obj: object, msg: string) => warned.push({ obj, msg }) };
    const stop = await tuneDb(t.db, t.url, { log });
    try {
      assert.equal(await pragma(), BACKSTOP_PAGES);
      const answer = checkpointTrouble(t.db, log);
      answer({ message: 'disk I/O error', stopped: false });
      assert.equal(warned.length, 1);
      assert.match(warned[0]!.msg, /checkpoint failed.*tries again/);
      assert.deepEqual(warned[0]!.obj, { err: 'disk I/O error' });
      assert.equal(await pragma(), BACKSTOP_PAGES, 'a failed checkpoint leaves the thread in charge');
      answer({ message: 'the thread exited (code 1)', stopped: true });
      assert.match(warned[1]!.msg, /thread stopped: the main connection checkpoints itself again/);
      const t0 = Date.now();
      while ((await pragma()) !== 1000 && Date.now() - t0 < 5000) await new Promise((r) => setTimeout(r, 10));
      assert.equal(await pragma(), 1000, "the main connection's own automatic checkpoint is back");
    } finally {
      await stop();
    }
  });
});
