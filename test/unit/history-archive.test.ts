/**
 * The archive of recorded histories (platform/history-archive.ts, STEWARD_REPLAY_HISTORIES): a run
 * by workflow and run id from a folder `steward histories record` wrote; files that are not
 * histories are left out with their reason, never fatal; the index follows the folder.
 */
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { openHistoryArchive } from '../../platform/history-archive.js';

const corpus = fileURLToPath(new URL('../replay/histories/', import.meta.url));

describe('the archive of recorded histories', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'steward-archive-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('finds a run by workflow id and run id, leaves out what is not a history with its reason, and sees files added later', async () => {
    const file = 'session-fd-rp-01.json';
    copyFileSync(path.join(corpus, file), path.join(dir, file));
    const raw = JSON.parse(readFileSync(path.join(corpus, file), 'utf8')) as { events: Array<{ workflowExecutionStartedEventAttributes: { workflowId: string; originalExecutionRunId: string } }> };
    const started = raw.events[0]!.workflowExecutionStartedEventAttributes;
    writeFileSync(path.join(dir, 'not-a-history.json'), JSON.stringify({ hello: 'world' }));
    const noRun = structuredClone(raw);
    (noRun.events[0]!.workflowExecutionStartedEventAttributes as Partial<typeof started>).originalExecutionRunId = undefined;
    writeFileSync(path.join(dir, 'no-run.json'), JSON.stringify(noRun));
    writeFileSync(path.join(dir, 'broken.json'), '{ not json');

    const archive = openHistoryArchive(dir);
    const h = await archive.history(started.workflowId, started.originalExecutionRunId);
    assert.ok(h, 'the run is found');
    assert.equal(h.events?.length, raw.events.length);
    assert.equal(await archive.history(started.workflowId, 'another-run'), undefined);
    assert.equal(await archive.history('another-workflow', started.originalExecutionRunId), undefined);
    const idx = await archive.index();
    assert.equal(idx.runs, 1);
    assert.deepEqual(
      idx.skipped.map((s) => s.file),
      ['broken.json', 'no-run.json', 'not-a-history.json'],
    );
    for (const s of idx.skipped) assert.ok(s.reason.length > 0, `${s.file}: a reason`);
    assert.match(idx.skipped.find((s) => s.file === 'no-run.json')!.reason, /run id/);

    // a file added later is found: the index follows the folder
    const second = 'session-fd-rp-02.json';
    await new Promise((r) => setTimeout(r, 20));
    copyFileSync(path.join(corpus, second), path.join(dir, second));
    const s2 = (JSON.parse(readFileSync(path.join(corpus, second), 'utf8')) as typeof raw).events[0]!.workflowExecutionStartedEventAttributes;
    assert.ok(await archive.history(s2.workflowId, s2.originalExecutionRunId));
    assert.equal((await archive.index()).runs, 2);
  });
});
