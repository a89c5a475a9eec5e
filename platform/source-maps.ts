/**
 * Source maps for Steward's own stack traces: off unless STEWARD_SOURCE_MAPS is true.
 *
 * Steward runs its TypeScript through tsx, which appends each module's source map to the
 * transpiled code while the process has source maps enabled, and Node then keeps every map it
 * met, parsed, for the life of the process: about 20 MB of heap and 55-75 MB of RSS in the
 * all-in-one process (bench/memory.ts). Off, stack traces point into the transpiled code (the
 * same functions, lines a little off); STEWARD_SOURCE_MAPS=true maps them back for debugging.
 *
 * It must be applied before the modules it concerns are loaded: an entry point applies it,
 * then imports the rest dynamically (ES modules are all loaded before any of them runs).
 * No imports here, so that applying it loads nothing else.
 */
export function applySourceMapSetting(env: Record<string, string | undefined> = process.env): boolean {
  const on = /^(1|true|yes)$/.test((env.STEWARD_SOURCE_MAPS ?? '').trim());
  process.setSourceMapsEnabled(on);
  return on;
}
