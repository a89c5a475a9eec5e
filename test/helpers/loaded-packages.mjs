// Preload (node --import) that records every npm package a process resolves a module of, in
// globalThis.__loadedPackages (test/unit/lazy-modules.test.ts). Plain JS: it runs before tsx.
import { registerHooks } from 'node:module';

const seen = new Set();
registerHooks({
  resolve(specifier, context, next) {
    const resolved = next(specifier, context);
    const m = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(resolved.url);
    if (m) seen.add(m[1]);
    return resolved;
  },
});
globalThis.__loadedPackages = seen;
