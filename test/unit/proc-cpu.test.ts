/**
 * bench/proc-cpu.ts: the benchmarks' CPU split by thread and child process, read from /proc,
 * checked against work done on purpose: a busy main thread, a busy worker thread, a busy child.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { describe, it } from 'node:test';
import { runInThisContext } from 'node:vm';
import { Worker } from 'node:worker_threads';
import { cpuMs, threadCpu, threadCpuPerTurn } from '../../bench/proc-cpu.js';

/**
 * Spin until the calling thread has used `ms` of CPU (its own /proc/thread-self/stat), not of
 * wall time: on a loaded machine a thread gets only part of the wall time it spins. Capped at 20 s.
 */
const SPIN_SOURCE = `(ms) => {
  const fs = process.getBuiltinModule('node:fs');
  const own = () => { const f = fs.readFileSync('/proc/thread-self/stat', 'utf8'); const r = f.slice(f.lastIndexOf(')') + 2).split(' '); return (Number(r[11]) + Number(r[12])) * 10; };
  const start = own();
  const cap = performance.now() + 20000;
  while (own() - start < ms && performance.now() < cap) for (let i = 0; i < 1e5; i++);
}`;
const spin = runInThisContext(SPIN_SOURCE) as (ms: number) => void;

describe('bench/proc-cpu.ts', { skip: existsSync('/proc/self/task') ? false : 'no /proc here' }, () => {
  it('puts a busy main thread, a busy worker thread and a busy child process each in its part', async () => {
    const before = threadCpu();
    assert.ok(before);
    spin(300);
    // a thread's time is read while it lives (an exited thread leaves /proc): the worker stays
    const worker = new Worker(`const { parentPort } = require('node:worker_threads'); (${SPIN_SOURCE})(300); parentPort.postMessage('spun'); setInterval(() => {}, 1000);`, { eval: true });
    await new Promise((r) => worker.once('message', r));
    const child = spawn(process.execPath, ['-e', `(${SPIN_SOURCE})(300); process.stdout.write('spun'); setTimeout(() => {}, 20000)`], { stdio: ['ignore', 'pipe', 'ignore'] });
    // read while the child lives (a live descendant's own time), after its busy part
    await new Promise((r) => child.stdout.once('data', r));
    const after = threadCpu();
    const childMs = cpuMs(child.pid ?? null);
    child.kill();
    await worker.terminate();
    assert.ok(after);
    const d = threadCpuPerTurn(before, after, 1);
    assert.ok(d);
    assert.ok(d.main_thread >= 200, `main thread: ${d.main_thread} ms`);
    assert.ok(d.other_threads >= 200, `worker thread among the other threads: ${d.other_threads} ms`);
    assert.ok(d.child_processes >= 200, `child: ${d.child_processes} ms`);
    assert.ok(childMs >= 200, `cpuMs of the child: ${childMs} ms`);
    assert.equal(d.process, +(d.main_thread + d.temporal_core + d.other_threads).toFixed(2));
    assert.equal(threadCpuPerTurn(before, after, 0), null);
    assert.equal(cpuMs(null), 0);
  });
});
