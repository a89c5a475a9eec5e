/**
 * CPU time from Linux's /proc, for the benchmarks: a process's (bench/cluster-shape.ts, the
 * parts of a cluster), and this process's split by thread with its live child processes (the
 * turn benchmarks' phases, bench/phases.ts), so a ratio that misses its target shows whose CPU
 * it is. Clock ticks of 10 ms; elsewhere than Linux every reading is absent (undefined or 0).
 */
import { readdirSync, readFileSync } from 'node:fs';

/** The fields of a /proc stat line after the process's name: state is f[0], the parent's pid f[1], utime (field 14) f[11], stime f[12], cutime f[13], cstime f[14]. */
export function statFields(file: string): { comm: string; f: number[] } | undefined {
  try {
    const stat = readFileSync(file, 'utf8');
    return { comm: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')), f: stat.slice(stat.lastIndexOf(')') + 2).split(' ').map(Number) };
  } catch {
    return undefined;
  }
}

/** A process's CPU time in ms (user + system, with its reaped children's when `children`); 0 when it is gone. */
export function cpuMs(pid: number | null, children = false): number {
  if (!pid) return 0;
  const s = statFields(`/proc/${pid}/stat`);
  if (!s) return 0;
  return (s.f[11]! + s.f[12]! + (children ? s.f[13]! + s.f[14]! : 0)) * 10;
}

/**
 * This process's CPU so far (ms), by thread: the main thread (the event loop: HTTP, the
 * database, activities, the worker's activation pipeline), the Temporal SDK core's runtime
 * threads (Rust, named `tokio-runtime-w…`), every other thread (V8's helpers: garbage
 * collection and compilation; the workflow threads; libuv's pool); and its live descendants
 * (the embedded Temporal server). A thread or child that has exited is no longer counted, so
 * read it around a phase whose threads and children live through it.
 */
export interface ThreadCpu {
  main_thread: number;
  temporal_core: number;
  other_threads: number;
  child_processes: number;
}

export function threadCpu(): ThreadCpu | undefined {
  const me = process.pid;
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${me}/task`);
  } catch {
    return undefined;
  }
  const out: ThreadCpu = { main_thread: 0, temporal_core: 0, other_threads: 0, child_processes: 0 };
  for (const tid of tids) {
    const s = statFields(`/proc/${me}/task/${tid}/stat`);
    if (!s) continue;
    const ms = (s.f[11]! + s.f[12]!) * 10;
    if (tid === String(me)) out.main_thread += ms;
    else if (s.comm.startsWith('tokio-runtime')) out.temporal_core += ms;
    else out.other_threads += ms;
  }
  // live descendants: parent pids from every process's stat (field 4, f[1])
  const parent = new Map<number, number>();
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    const s = statFields(`/proc/${d}/stat`);
    if (s) parent.set(Number(d), s.f[1]!);
  }
  const descends = (pid: number): boolean => {
    for (let p = parent.get(pid), hops = 0; p !== undefined && p > 1 && hops < 32; p = parent.get(p), hops++) if (p === me) return true;
    return false;
  };
  for (const pid of parent.keys()) if (pid !== me && descends(pid)) out.child_processes += cpuMs(pid);
  return out;
}

/** CPU ms per turn between two readings: each part, and this process's total (its threads). */
export function threadCpuPerTurn(before: ThreadCpu | undefined, after: ThreadCpu | undefined, turns: number): (ThreadCpu & { process: number }) | null {
  if (!before || !after || turns <= 0) return null;
  const per = (k: keyof ThreadCpu) => +((after[k] - before[k]) / turns).toFixed(2);
  const p = { main_thread: per('main_thread'), temporal_core: per('temporal_core'), other_threads: per('other_threads'), child_processes: per('child_processes') };
  return { ...p, process: +(p.main_thread + p.temporal_core + p.other_threads).toFixed(2) };
}
