/**
 * Skills: `SKILL.md` runbooks a turn may follow. Each is a folder with a `SKILL.md` whose YAML
 * front matter names it (name, description, when to use it, the roles that may use it) and
 * whose body is the procedure. They come from the operator's folder (STEWARD_SKILLS_DIR) and
 * the chat's workspace's `skills/` folder; on the same name the workspace's wins. A skill's
 * version is the SHA-256 of its file (its first 12 hex digits): an edit is a new version.
 *
 * Matching runs through the knowledge index: each catalogue (the operator's skills with a
 * workspace's) is indexed as documents of its own (`skills:<workspace>`; the name, description
 * and when-to-use as text, the version as the hash), kept in step when the files change, and
 * searched with the message. A hit counts when at least two of the message's words (or the
 * skill's whole name) appear in its description or when-to-use: one shared word is too weak
 * a signal to put a runbook in front of the model. Roles filter what is offered.
 *
 * The turn's model step injects a matched skill's body once per session: the session's working
 * set keeps a ledger (name -> version) that survives continue-as-new; a version the ledger does
 * not know is injected again.
 */
import { createHash } from 'node:crypto';
import { readdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { RoleSchema, type Role } from '../../common/roles.js';
import type { KnowledgeIndex } from './index-store.js';
import { queryTerms } from './index-store.js';

export const SKILL_FILE = 'SKILL.md';
/** A SKILL.md read at most (bytes); a body longer than this is cut. */
export const SKILL_MAX_BYTES = 32 * 1024;
const MAX_SKILLS = 200;

export interface Skill {
  name: string;
  description: string;
  when: string;
  /** Who may use it; empty: everyone. */
  roles: Role[];
  body: string;
  version: string;
  source: 'operator' | 'workspace';
  /** The SKILL.md file (absolute). */
  file: string;
}

export interface SkillCatalogue {
  skills: Skill[];
  /** Files that are not valid skills, and why (shown by /skills). */
  problems: Array<{ file: string; error: string }>;
}

const SkillFrontMatter = z.object({
  name: z
    .string()
    .trim()
    .regex(/^[a-z0-9][a-z0-9_-]{0,63}$/, 'name: lowercase letters, digits, - and _ (at most 64)'),
  description: z.string().trim().min(1, 'description: say what the skill does').max(500, 'description: at most 500 characters'),
  when: z.string().trim().max(500, 'when: at most 500 characters').optional(),
  when_to_use: z.string().trim().max(500, 'when_to_use: at most 500 characters').optional(),
  roles: z.array(RoleSchema).max(5).optional(),
});

/** Parse a SKILL.md: its front matter checked, its body the procedure. Throws with the reason. */
export function parseSkill(text: string, file: string, source: Skill['source']): Skill {
  const m = /^---\r?\n([\s\S]*?)\r?\n---\r?\n?([\s\S]*)$/.exec(text);
  if (!m) throw new Error('no YAML front matter (--- name, description, when, roles ---)');
  let raw: unknown;
  try {
    raw = parseYaml(m[1]!);
  } catch (err) {
    throw new Error(`the front matter is not YAML: ${(err as Error).message.split('\n')[0]}`);
  }
  const r = SkillFrontMatter.safeParse(raw ?? {});
  if (!r.success) throw new Error(r.error.issues.map((i) => (i.path.length ? `${i.path.join('.')}: ${i.message.replace(/^[a-z_]+: /, '')}` : i.message)).join('; '));
  const body = m[2]!.trim();
  if (!body) throw new Error('the body (the procedure) is empty');
  return {
    name: r.data.name,
    description: r.data.description,
    when: r.data.when ?? r.data.when_to_use ?? '',
    roles: r.data.roles ?? [],
    body,
    version: createHash('sha256').update(text).digest('hex').slice(0, 12),
    source,
    file,
  };
}

/** The skills of one folder: `<dir>/<skill>/SKILL.md`. A missing folder has none. */
async function readSkillDir(dir: string, source: Skill['source'], out: SkillCatalogue): Promise<Skill[]> {
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch {
    return [];
  }
  const found: Skill[] = [];
  for (const e of entries.sort((a, b) => (a.name < b.name ? -1 : 1)).slice(0, MAX_SKILLS)) {
    if (!e.isDirectory() || e.name.startsWith('.')) continue;
    const file = path.join(dir, e.name, SKILL_FILE);
    let bytes: Buffer;
    try {
      const st = await stat(file);
      if (!st.isFile()) continue;
      bytes = (await readFile(file)).subarray(0, SKILL_MAX_BYTES);
    } catch {
      continue;
    }
    try {
      found.push(parseSkill(bytes.toString('utf8'), file, source));
    } catch (err) {
      out.problems.push({ file, error: (err as Error).message });
    }
  }
  return found;
}

/** The operator's skills with the workspace's (the workspace's win on the same name), by name. */
export async function loadSkillCatalogue(operatorDir: string | undefined, workspaceRoot: string | undefined): Promise<SkillCatalogue> {
  const out: SkillCatalogue = { skills: [], problems: [] };
  const byName = new Map<string, Skill>();
  if (operatorDir) for (const s of await readSkillDir(operatorDir, 'operator', out)) byName.set(s.name, s);
  if (workspaceRoot) for (const s of await readSkillDir(path.join(workspaceRoot, 'skills'), 'workspace', out)) byName.set(s.name, s);
  out.skills = [...byName.values()].sort((a, b) => (a.name < b.name ? -1 : 1));
  return out;
}

/** Words that carry no topic: a match needs more than these. */
const STOP = new Set(
  'a an and are as at be but by can do does for from how i in is it me my of on or our please should so that the this to up us we what when where which who why will with you your'.split(' '),
);

/** Do two words name the same thing (equal, or one a form of the other: deploy / deploying)? */
function sameWord(a: string, b: string): boolean {
  if (a === b) return true;
  const [s, l] = a.length <= b.length ? [a, b] : [b, a];
  return s.length >= 4 && l.startsWith(s);
}

/** How strongly a message asks for a skill: its whole name, or 2+ of its topic words. */
export function skillMatches(skill: Pick<Skill, 'name' | 'description' | 'when'>, message: string): boolean {
  const words = queryTerms(message).filter((w) => !STOP.has(w));
  const name = skill.name.replace(/[-_]+/g, ' ');
  if (new RegExp(`\\b${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\b`, 'i').test(message.replace(/[-_]+/g, ' '))) return true;
  const topic = queryTerms(`${name} ${skill.description} ${skill.when}`).filter((w) => !STOP.has(w));
  let shared = 0;
  for (const w of words) if (topic.some((t) => sameWord(w, t))) shared++;
  return shared >= 2;
}

export interface SkillMatcher {
  /** The catalogue a chat sees (its workspace's skills with the operator's). */
  catalogue(workspace: { name: string; root: string } | null): Promise<SkillCatalogue>;
  /** The skills `message` asks for that `role` may use, best first (at most `limit`). */
  match(workspace: { name: string; root: string } | null, message: string, role: Role, limit?: number): Promise<Skill[]>;
}

/**
 * Skills matched through the knowledge index. A catalogue is read again at most once per
 * `ttlMs` and re-indexed only when a version changed, so a turn in steady state costs one
 * search of a handful of documents.
 */
export function createSkillMatcher(opts: { operatorDir?: string; knowledge: () => Promise<KnowledgeIndex>; ttlMs?: number }): SkillMatcher {
  const ttl = opts.ttlMs ?? 5000;
  const cached = new Map<string, { at: number; catalogue: SkillCatalogue; synced: Promise<void> }>();
  const keyOf = (ws: { name: string } | null) => `skills:${ws ? ws.name : '*'}`;
  const sync = async (key: string, catalogue: SkillCatalogue) => {
    const index = await opts.knowledge();
    const known = await index.documents(key);
    const wanted = new Map(catalogue.skills.map((s) => [s.name, s]));
    for (const [name, s] of wanted) {
      if (known.get(name) === s.version) continue;
      const text = `${s.description}\n${s.when}`;
      await index.putDocument(key, {
        path: name,
        hash: s.version,
        bytes: Buffer.byteLength(text),
        chunks: [{ ordinal: 0, heading: name.replace(/[-_]+/g, ' '), text, startLine: 1, endLine: 1 }],
      });
    }
    for (const name of known.keys()) if (!wanted.has(name)) await index.removeDocument(key, name);
  };
  const load = async (ws: { name: string; root: string } | null) => {
    const key = keyOf(ws);
    const hit = cached.get(key);
    if (hit && Date.now() - hit.at < ttl) {
      await hit.synced;
      return { key, catalogue: hit.catalogue };
    }
    const catalogue = await loadSkillCatalogue(opts.operatorDir, ws?.root);
    const synced = sync(key, catalogue);
    if (cached.size > 1000) cached.clear();
    cached.set(key, { at: Date.now(), catalogue, synced });
    try {
      await synced;
    } catch (err) {
      cached.delete(key);
      throw err;
    }
    return { key, catalogue };
  };
  return {
    async catalogue(ws) {
      return (await load(ws)).catalogue;
    },
    async match(ws, message, role, limit = 2) {
      const { key, catalogue } = await load(ws);
      if (catalogue.skills.length === 0 || message.trim() === '') return [];
      const hits = await (await opts.knowledge()).search(key, message, 10);
      const byName = new Map(catalogue.skills.map((s) => [s.name, s]));
      const out: Skill[] = [];
      for (const h of hits) {
        const s = byName.get(h.path);
        if (!s || out.includes(s)) continue;
        if (s.roles.length > 0 && !s.roles.includes(role)) continue;
        if (!skillMatches(s, message)) continue;
        out.push(s);
        if (out.length >= limit) break;
      }
      return out;
    },
  };
}

/** The system prompt's part for skills: the bodies injected now, and a line naming those applied earlier. */
export function skillsPromptText(injected: Skill[], earlier: Array<{ name: string; version: string }>): string | undefined {
  const parts: string[] = [];
  for (const s of injected) {
    parts.push(`Skill "${s.name}" (version ${s.version}, from the ${s.source === 'workspace' ? "chat's workspace" : 'operator'}): ${s.description}${s.when ? ` Use it when: ${s.when}` : ''}\nProcedure:\n${s.body}`);
  }
  if (earlier.length > 0) parts.push(`Skills already given earlier in this session (follow them as before): ${earlier.map((s) => `${s.name} (${s.version})`).join(', ')}.`);
  return parts.length ? parts.join('\n\n') : undefined;
}
