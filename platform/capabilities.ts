/**
 * What this machine cannot do, said once at start (`steward start`'s banner) and by
 * `steward doctor`, instead of failing later inside a turn or a change:
 *  - no bubblewrap sandbox: proposed commands (run_command) and repository changes are refused;
 *  - no git: repository changes are refused.
 */
import { spawn } from 'node:child_process';
import { sandboxAvailable } from '../domain/sandbox.js';

export interface UnavailableFeature {
  /** What does not work here, e.g. "commands (run_command) and repository changes". */
  features: string;
  /** Why, in a few words. */
  reason: string;
  /** How to make it work. */
  fix: string;
}

export interface CapabilityProbes {
  sandbox?: () => Promise<{ ok: true } | { ok: false; reason: string }>;
  git?: () => Promise<{ ok: true } | { ok: false; reason: string }>;
}

/** `git --version` answers. */
export function gitAvailable(): Promise<{ ok: true } | { ok: false; reason: string }> {
  return new Promise((resolve) => {
    const child = spawn('git', ['--version'], { stdio: 'ignore' });
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    child.once('error', (err) => {
      clearTimeout(timer);
      resolve({ ok: false, reason: `git not found (${(err as NodeJS.ErrnoException).code ?? err.message})` });
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve(code === 0 ? { ok: true } : { ok: false, reason: `git --version exited ${String(code)}` });
    });
  });
}

/** The features this machine cannot offer, each with its reason and fix; empty when all work. */
export async function unavailableFeatures(probes: CapabilityProbes = {}): Promise<UnavailableFeature[]> {
  const [sandbox, git] = await Promise.all([(probes.sandbox ?? sandboxAvailable)(), (probes.git ?? gitAvailable)()]);
  const out: UnavailableFeature[] = [];
  if (!sandbox.ok) {
    // the probe's own "; install bubblewrap" would repeat the fix
    const reason = sandbox.reason.replace(/;\s*install bubblewrap\s*$/, '');
    out.push({
      features: 'commands (run_command) and repository changes',
      reason: `no sandbox: ${reason.length > 200 ? `${reason.slice(0, 200)}...` : reason}`,
      fix: 'install bubblewrap (`apt-get install bubblewrap`) and allow unprivileged user namespaces',
    });
  }
  if (!git.ok) {
    out.push({ features: 'repository changes', reason: git.reason, fix: 'install git (`apt-get install git`)' });
  }
  return out;
}

/** One line for the banner and doctor: "X refused (reason; fix); Y refused (...)". Undefined when nothing is missing. */
export function unavailableLine(list: readonly UnavailableFeature[]): string | undefined {
  if (list.length === 0) return undefined;
  return list.map((u) => `${u.features} refused (${u.reason}; ${u.fix})`).join('; ');
}
