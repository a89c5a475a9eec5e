/**
 * One name per feature across the layers (issue 33): the files of a feature are found by its
 * name. In each layer (activities/, adapters/, common/, domain/, services/, workflows/) a file of
 * a feature carries the feature's name as its file name (`services/objectives.ts`,
 * `domain/store/objectives.ts`) or a folder's (`workflows/objectives/objective.ts`,
 * `domain/changes/gate.ts`); a file's feature is the first segment of its path, under its layer,
 * that is a feature's name (`domain/mcp/tools.ts` is mcp's).
 *
 * What fails, each with the file and the mend:
 *  - by word: a file of no feature whose path has a word of one (`adapters/objective-watchers.ts`,
 *    `domain/triage.ts`): a feature's file under another name;
 *  - by imports: a file of no feature, in a layer where feature F has files, whose importers in
 *    the product are all F's (`domain/model-steps.ts`, imported by the changes' files only): it
 *    serves F alone, so it goes under F's name (or into APART, saying why it stays apart);
 *  - the README's table of features: a row per feature, every path in it there, and every file
 *    of a feature in a layer covered by a path of the feature's row in that layer's column.
 * APART is checked too: each entry is there and still needed.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync, existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';

const root = fileURLToPath(new URL('../..', import.meta.url));

const LAYERS = ['workflows', 'activities', 'services', 'domain', 'common', 'adapters'] as const;

/**
 * Each feature's name, and the words its files would hide under: whole words of a path (split
 * at / - _ .), a plural (`-s`, `-es`, `-ies`) counting as its word.
 */
const FEATURES: Record<string, string[]> = {
  chat: ['chat', 'session', 'turn'],
  changes: ['change', 'repo', 'coding', 'git', 'github', 'promotion'],
  objectives: ['objective', 'schedule', 'trigger'],
  tasks: ['task', 'triage', 'reminder'],
  knowledge: ['knowledge', 'memory', 'skill', 'embedder', 'grounding'],
  workspaces: ['workspace'],
  inbox: ['inbox', 'imap'],
  mcp: ['mcp'],
  heartbeat: ['heartbeat'],
  budgets: ['budget'],
  approvals: ['approval'],
  actions: ['action', 'proposal'],
  tools: ['tool'],
  decisions: ['decision'],
  replays: ['replay', 'fork'],
};

/** Files that keep a name of their own, and why (each must exist and be needed). */
const APART: Record<string, string> = {
  'domain/store/sessions.ts': "the store names its aggregates: the sessions are the chat's",
  'adapters/http/memories.ts': "the knowledge's memory routes: an HTTP route module is named after its API path (/api/v1/memories)",
  'adapters/workspace-inbox.ts': "the inbox's IMAP poller, left where issue 33's adapters work put it (to move: adapters/inbox/)",
};

/** The product files of the layers, relative to the root (`domain/changes/gate.ts`). */
function productFiles(): string[] {
  const out: string[] = [];
  const walk = (rel: string): void => {
    for (const name of readdirSync(path.join(root, rel))) {
      const p = `${rel}/${name}`;
      if (statSync(path.join(root, p)).isDirectory()) walk(p);
      else if (/\.(ts|cjs|mjs|js)$/.test(name)) out.push(p);
    }
  };
  for (const l of LAYERS) walk(l);
  return out.sort();
}

/** A file's path under its layer, as segments, the last without its extension. */
function segments(file: string): string[] {
  const s = file.split('/').slice(1);
  s[s.length - 1] = s[s.length - 1]!.replace(/\.[^.]+$/, '');
  return s;
}

/** The feature a file belongs to: the first segment that is a feature's name. */
function featureOf(file: string): string | undefined {
  return segments(file).find((s) => s in FEATURES);
}

/** The features whose words the file's path has. */
function wordsOf(file: string): string[] {
  const words = new Set(segments(file).flatMap((s) => s.split(/[-_.]/)));
  const has = (w: string): boolean => [w, `${w}s`, `${w}es`, w.replace(/y$/, 'ies')].some((form) => words.has(form));
  return Object.entries(FEATURES)
    .filter(([name, ws]) => has(name) || ws.some(has))
    .map(([name]) => name);
}

/** Who imports each product file, among the product files (type imports too: they tie a file to its user). */
function importers(files: string[]): Map<string, string[]> {
  const known = new Set(files);
  const by = new Map<string, string[]>(files.map((f) => [f, []]));
  for (const f of files) {
    const text = readFileSync(path.join(root, f), 'utf8');
    for (const m of text.matchAll(/(?:\bfrom\s+|\bimport\s*\(\s*|\bimport\s+)'(\.{1,2}\/[^']+)'/g)) {
      const target = path.posix.normalize(path.posix.join(path.posix.dirname(f), m[1]!)).replace(/\.js$/, '.ts');
      if (known.has(target) && target !== f && !by.get(target)!.includes(f)) by.get(target)!.push(f);
    }
  }
  return by;
}

/** What fails the rule, one line each (APART not applied), given who imports each file. */
function violations(files: string[], users: Map<string, string[]>): Map<string, string> {
  const found = new Map<string, string>();
  const layerHas = (layer: string, feature: string): boolean => files.some((f) => f.startsWith(`${layer}/`) && featureOf(f) === feature);
  for (const f of files) {
    if (featureOf(f) !== undefined) continue;
    const words = wordsOf(f);
    if (words.length > 0) {
      found.set(f, `${f} has a word of ${words.join(', ')} but no feature's name: name it, or its folder, ${words.map((w) => `"${w}"`).join(' or ')}`);
      continue;
    }
    const layer = f.split('/')[0]!;
    const theirs = new Set((users.get(f) ?? []).map(featureOf));
    const [only] = [...theirs];
    if (theirs.size === 1 && only !== undefined && layerHas(layer, only)) {
      found.set(f, `${f} is imported by the ${only} files only (${users.get(f)!.join(', ')}): it is a file of ${only}, so it goes under the name "${only}" in ${layer}/`);
    }
  }
  return found;
}

/** The product files and their importers as if one file had another path (the self-test). */
function moved(files: string[], users: Map<string, string[]>, from: string, to: string): [string[], Map<string, string[]>] {
  const rename = (f: string): string => (f === from ? to : f);
  return [files.map(rename), new Map([...users].map(([f, us]) => [rename(f), us.map(rename)]))];
}

/** The README's table of features: feature -> layer -> the paths its cell names (relative to the layer). */
function readmeFeatures(): Map<string, Map<string, string[]>> {
  const lines = readFileSync(path.join(root, 'README.md'), 'utf8').split('\n');
  const head = lines.findIndex((l) => l.startsWith('| feature |'));
  assert.ok(head >= 0, 'README.md has a table whose header starts "| feature |"');
  const cols = lines[head]!.split('|').slice(1, -1).map((c) => c.trim().replace(/`/g, '').replace(/\/$/, ''));
  const table = new Map<string, Map<string, string[]>>();
  for (const line of lines.slice(head + 2)) {
    if (!line.startsWith('|')) break;
    const cells = line.split('|').slice(1, -1).map((c) => c.trim());
    const byLayer = new Map<string, string[]>();
    cells.slice(1).forEach((cell, i) => byLayer.set(cols[i + 1]!, [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1]!)));
    table.set(cells[0]!.replace(/`/g, ''), byLayer);
  }
  return table;
}

describe('one name per feature across the layers', () => {
  const files = productFiles();
  const users = importers(files);

  it('no feature file hides under another name (by its words, or by who imports it)', () => {
    const left = [...violations(files, users)].filter(([f]) => !(f in APART)).map(([, why]) => why);
    assert.deepEqual(left, [], left.join('\n'));
  });

  it('every file kept apart is there and still needs to be', () => {
    const found = violations(files, users);
    for (const f of Object.keys(APART)) {
      assert.ok(existsSync(path.join(root, f)), `APART names ${f}, which is not there: take it out`);
      assert.ok(found.has(f), `APART names ${f}, which the rule no longer refuses: take it out`);
    }
  });

  it('the checks refuse a feature file under another name, and pass it under the name', () => {
    // by word: the objectives' watchers and the tasks' triage as they were named before
    for (const [from, to] of [['adapters/objectives/watchers.ts', 'adapters/objective-watchers.ts'], ['domain/tasks/triage.ts', 'domain/triage.ts']] as const) {
      assert.equal(violations(files, users).has(from), false, `${from} passes`);
      assert.match(violations(...moved(files, users, from, to)).get(to) ?? '', /has a word of/, `${to} is refused`);
    }
    // by imports: the changes' model steps out of domain/changes/, with only the changes' files importing them
    const from = 'domain/changes/model-steps.ts';
    const to = 'domain/model-steps.ts';
    assert.ok(users.get(from)!.length > 0 && users.get(from)!.every((f) => featureOf(f) === 'changes'), `only the changes' files import ${from}`);
    assert.match(violations(...moved(files, users, from, to)).get(to) ?? '', /imported by the changes files only/);
  });

  it("the README's table of features lists each feature's files in each layer", () => {
    const table = readmeFeatures();
    assert.deepEqual([...table.keys()].sort(), Object.keys(FEATURES).sort(), "README's feature table: one row per feature of FEATURES");
    for (const [feature, byLayer] of table) {
      for (const [layer, cells] of byLayer) {
        assert.ok((LAYERS as readonly string[]).includes(layer), `README's feature table: column ${layer} is not a layer`);
        for (const c of cells) assert.ok(existsSync(path.join(root, layer, c)), `README's feature table: ${feature}'s ${layer}/${c} is not there`);
      }
    }
    for (const f of files) {
      const feature = featureOf(f);
      if (feature === undefined) continue;
      const layer = f.split('/')[0]!;
      const under = f.slice(layer.length + 1);
      const cells = table.get(feature)?.get(layer) ?? [];
      assert.ok(
        cells.some((c) => (c.endsWith('/') ? under.startsWith(c) : under === c)),
        `README's feature table: ${f} (${feature}) is in no path of the ${layer} cell of the ${feature} row`,
      );
    }
  });
});
