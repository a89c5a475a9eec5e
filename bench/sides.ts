/**
 * The two sides of a comparison as processes of their own (bench/compare.ts, bench/long-session.ts):
 * Steward runs with its own Node options and process environment, as the launcher starts it
 * (platform/node-options.ts); the floor with Node's and glibc's defaults (any of those options in
 * NODE_OPTIONS, and the environment's settings, are taken out for it).
 */
import { spawn } from 'node:child_process';
import { STEWARD_NODE_FLAGS, stewardProcessEnv } from '../platform/node-options.js';

export type Json = Record<string, unknown>;

/** NODE_OPTIONS without Steward's own flags (each side adds its own). */
export const inheritedOptions = (process.env.NODE_OPTIONS ?? '').split(/\s+/).filter((o) => o !== '' && !STEWARD_NODE_FLAGS.includes(o));
/** Steward's process environment, as the launcher sets it. */
export const stewardEnv = stewardProcessEnv();
/** The floor's: Steward's settings taken out (or, `asSteward`, the same as Steward's: what the setting alone gives the floor). */
export const floorEnvOf = (asSteward = false): Record<string, string | undefined> => (asSteward ? stewardEnv : Object.fromEntries(Object.keys(stewardEnv).map((k) => [k, undefined])));

/**
 * Run `script` with tsx as a process of its own and resolve with the JSON it prints on stdout;
 * a failure or no JSON rejects with `label` and the head and tail of its stderr (the head says
 * what failed, a server's crash log follows it; the tail where).
 */
export function runJsonProcess(o: { label: string; script: string; nodeFlags: readonly string[]; env: Record<string, string | undefined>; cwd?: string }): Promise<Json> {
  return new Promise((resolve, reject) => {
    const env: Record<string, string | undefined> = { ...process.env, NODE_OPTIONS: inheritedOptions.join(' '), ...o.env };
    for (const [k, v] of Object.entries(env)) if (v === undefined) delete env[k];
    const child = spawn(process.execPath, [...o.nodeFlags, '--expose-gc', '--import', 'tsx', o.script], { ...(o.cwd ? { cwd: o.cwd } : {}), stdio: ['ignore', 'pipe', 'pipe'], env });
    let out = '';
    let err = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.stderr.on('data', (b: Buffer) => (err += b.toString()));
    child.on('error', reject);
    child.on('close', (code) => {
      const start = out.indexOf('{');
      if (code !== 0 || start < 0) {
        const lines = err.split('\n').filter((l) => !l.includes('[INFO]'));
        const shown = lines.length > 40 ? [...lines.slice(0, 25), '…', ...lines.slice(-15)] : lines;
        return reject(new Error(`${o.label} exited with ${code}: ${shown.join('\n')}`));
      }
      try {
        resolve(JSON.parse(out.slice(start)) as Json);
      } catch (e) {
        reject(new Error(`${o.label} printed no JSON: ${(e as Error).message}`));
      }
    });
  });
}
