/**
 * Paths inside a workspace. A file is addressed by its workspace-relative path (`/`-separated);
 * a path that leaves the workspace is refused: absolute, `..`, a NUL or a backslash, and on
 * disk a symbolic link (anywhere along the path) whose target is outside the workspace. A path
 * with a dot segment (`.env`, `.git/config`, `notes/.secret.md`) is refused too, before and
 * after its links are resolved: an operator-named folder (a repository checkout) keeps its
 * credentials there. One rule (`dotSegment`) for every reader (/open, the API's file route,
 * the model's read_workspace_file) and for the walk of a workspace for indexing, which never
 * follows a link and never enters or reads a dot entry.
 */
import { lstat, opendir, realpath } from 'node:fs/promises';
import path from 'node:path';

export class WorkspacePathError extends Error {
  override name = 'WorkspacePathError';
}

/** Whether a file or directory name is hidden (a dot entry): never read, never indexed. */
export function isDotName(name: string): boolean {
  return name.startsWith('.');
}

/** The first dot segment of a `/`-separated path, if any. */
export function dotSegment(relative: string): string | undefined {
  return relative.split('/').find((s) => s !== '' && s !== '.' && s !== '..' && isDotName(s));
}

/** A workspace-relative path, checked and normalised (`a/b.md`); throws WorkspacePathError. */
export function normaliseWorkspacePath(p: string): string {
  if (typeof p !== 'string' || p.trim() === '') throw new WorkspacePathError('a workspace path is required (such as notes/howto.md)');
  if (p.includes('\0')) throw new WorkspacePathError('a workspace path cannot hold a NUL character');
  if (p.includes('\\')) throw new WorkspacePathError(`use / in workspace paths: ${JSON.stringify(p)}`);
  if (p.startsWith('/') || /^[A-Za-z]:/.test(p)) throw new WorkspacePathError(`${JSON.stringify(p)} is absolute: give a path inside the workspace (such as notes/howto.md)`);
  const parts = p.split('/').filter((s) => s !== '' && s !== '.');
  if (parts.includes('..')) throw new WorkspacePathError(`${JSON.stringify(p)} leaves the workspace (..)`);
  if (parts.length === 0) throw new WorkspacePathError('a workspace path is required (such as notes/howto.md)');
  const dot = dotSegment(parts.join('/'));
  if (dot !== undefined) throw new WorkspacePathError(`${JSON.stringify(p)} has a dot segment (${dot}): hidden files and folders of a workspace are not read`);
  if (p.length > 1024) throw new WorkspacePathError('a workspace path is at most 1,024 characters');
  return parts.join('/');
}

/** Is `inner` the same as or below `outer` (both absolute and resolved)? */
function within(outer: string, inner: string): boolean {
  const rel = path.relative(outer, inner);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

/**
 * The absolute path of a workspace file for reading: the relative path checked, then resolved
 * on disk with its links, which must stay inside the workspace. Throws WorkspacePathError;
 * a file that does not exist is an error too (ENOENT, with the relative path).
 */
export async function resolveInWorkspace(root: string, relative: string): Promise<{ path: string; relative: string }> {
  const rel = normaliseWorkspacePath(relative);
  const realRoot = await realpath(root);
  let real: string;
  try {
    real = await realpath(path.join(realRoot, rel));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new WorkspacePathError(`no file ${rel} in the workspace`);
    throw err;
  }
  if (!within(realRoot, real)) throw new WorkspacePathError(`${rel} is a link to a place outside the workspace`);
  const target = path.relative(realRoot, real).split(path.sep).join('/');
  const dot = dotSegment(target);
  if (dot !== undefined) throw new WorkspacePathError(`${rel} is a link to a hidden file or folder of the workspace (${dot}): it is not read`);
  return { path: real, relative: rel };
}

/**
 * What the index reads: text and Markdown (by extension), except the workspace's skills
 * (`skills/<name>/SKILL.md`): a runbook is given to the model by the skill ledger, once per
 * session, never as an excerpt (domain/knowledge/skills.ts).
 */
export function isIndexable(relative: string): boolean {
  return /\.(md|markdown|mdx|txt|text|rst|adoc|org)$/i.test(relative) && !/^skills\/[^/]+\/SKILL\.md$/.test(relative);
}

export interface WalkedFile {
  relative: string;
  size: number;
  mtimeMs: number;
}

/**
 * The indexable regular files of a workspace (links are not followed, dot entries such as
 * `.git/` or `.notes.md` are neither entered nor read), sorted by path; at most `maxFiles`, files up to `maxBytes`.
 */
export async function walkWorkspace(root: string, opts: { maxFiles?: number; maxBytes?: number } = {}): Promise<{ files: WalkedFile[]; skipped: Array<{ relative: string; reason: string }> }> {
  const maxFiles = opts.maxFiles ?? 20_000;
  const maxBytes = opts.maxBytes ?? 1024 * 1024;
  const files: WalkedFile[] = [];
  const skipped: Array<{ relative: string; reason: string }> = [];
  const visit = async (dir: string, prefix: string): Promise<void> => {
    const handle = await opendir(dir);
    for await (const entry of handle) {
      const relative = prefix ? `${prefix}/${entry.name}` : entry.name;
      if (isDotName(entry.name)) continue;
      if (entry.isDirectory()) {
        await visit(path.join(dir, entry.name), relative);
        continue;
      }
      if (!entry.isFile() || !isIndexable(relative)) continue;
      const st = await lstat(path.join(dir, entry.name));
      if (st.size > maxBytes) {
        skipped.push({ relative, reason: `larger than ${maxBytes} bytes` });
        continue;
      }
      if (files.length >= maxFiles) {
        skipped.push({ relative, reason: `beyond ${maxFiles} files` });
        continue;
      }
      files.push({ relative, size: st.size, mtimeMs: st.mtimeMs });
    }
  };
  await visit(root, '');
  files.sort((a, b) => (a.relative < b.relative ? -1 : a.relative > b.relative ? 1 : 0));
  return { files, skipped };
}
