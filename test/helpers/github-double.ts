/**
 * A test double of the GitHub REST API on 127.0.0.1 that real Octokit talks to, backed by REAL bare
 * git repositories on disk: blobs, trees, commits and refs created through the Git Data API are
 * written into the bare repository with git's plumbing commands, so a draft pull request the double
 * accepts really exists as a branch that `git diff` / `git show` can inspect. Nothing talks to
 * api.github.com.
 *
 *   const gh = await startGitHubDouble({ repos: [{ owner, repo, bareDir, defaultBranch: 'main' }], token });
 *   const octokit = new Octokit({ baseUrl: gh.baseUrl, auth: token });
 *   ...
 *   gh.assertNoViolations();
 *   await gh.close();
 *
 * Routes (GitHub's paths and shapes):
 *   GET    /repos/{owner}/{repo}
 *   GET    /repos/{owner}/{repo}/git/ref/{ref}            (ref like `heads/main`; exact match, 404 when missing)
 *   GET    /repos/{owner}/{repo}/git/commits/{commit_sha}
 *   POST   /repos/{owner}/{repo}/git/blobs                `git hash-object -w --stdin`
 *   POST   /repos/{owner}/{repo}/git/trees                temporary index: read-tree / update-index / write-tree
 *   POST   /repos/{owner}/{repo}/git/commits              `git commit-tree`
 *   POST   /repos/{owner}/{repo}/git/refs                 `git update-ref` (422 "Reference already exists")
 *   PATCH  /repos/{owner}/{repo}/git/refs/{ref}           fast-forward only unless `force`
 *   DELETE /repos/{owner}/{repo}/git/refs/{ref}           204; open pull requests from the branch are closed
 *   POST   /repos/{owner}/{repo}/pulls                    head/base must exist and differ by at least one commit
 *   GET    /repos/{owner}/{repo}/pulls/{pull_number}
 *   GET    /repos/{owner}/{repo}/pulls                    `state`, `head` (`owner:branch`), `base`, paging
 * Anything else answers 404 like GitHub does. Every request needs `authorization: token <token>` or
 * `Bearer <token>` (401 otherwise, checked before anything else as on GitHub).
 *
 * OpenAPI conformance: GitHub's own description (`@octokit/openapi`, the dereferenced
 * api.github.com document, loaded lazily once per process) is used to validate, with Ajv, every
 * request body and query string the double receives and every response body it sends, against the
 * operation matched by method + path template and the response's status. Each failure is appended to
 * `violations` (method, path, what was checked, Ajv's errors). A request body that fails the schema
 * also gets GitHub's 422 "Invalid request." answer. Statuses the description does not document for
 * an operation (401 everywhere, injected 5xx) are checked against GitHub's uniform error shape
 * `{ message, documentation_url }`; an undocumented 2xx is a violation.
 *
 * `failNext(method, path, status, body?, { apply })` scripts a failure for the next matching request
 * (once per call): by default the request changes nothing; with `apply: true` it takes effect and
 * only the response is replaced (a "created, but the answer was lost" failure). `status: 0` drops the
 * connection without an answer (a network error for the client).
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { z } from 'zod';

// ---------------------------------------------------------------------------------------------
// Public types

export interface DoubleRepoConfig {
  owner: string;
  repo: string;
  /** A bare git repository (`git init --bare`) that backs this repository. */
  bareDir: string;
  defaultBranch: string;
}

export interface GitHubDoubleOptions {
  repos: DoubleRepoConfig[];
  /** The only token accepted. */
  token: string;
  /** The login of the token's user (author of commits and pull requests). Default `steward-bot`. */
  login?: string;
  /** Host used for `html_url`s. Default `https://github.com`. */
  htmlBase?: string;
}

export interface RecordedRequest {
  /** Order of arrival, from 1. */
  seq: number;
  method: string;
  /** The raw path as received (percent-encoding kept), without the query string. */
  path: string;
  query: Record<string, string>;
  /** The OpenAPI path template that matched, e.g. `/repos/{owner}/{repo}/git/refs`; null for an unknown route. */
  operation: string | null;
  /** Decoded path parameters (`ref` is e.g. `heads/feature/x`). */
  params: Record<string, string>;
  /** The parsed JSON body (undefined when there was none). */
  body: unknown;
  status: number;
  /** The JSON body answered (undefined for 204 / dropped connections). */
  response: unknown;
  /** Answered by a `failNext` injection. */
  injected: boolean;
}

export interface PullRecord {
  owner: string;
  repo: string;
  number: number;
  id: number;
  title: string;
  body: string | null;
  /** Head branch name (no `refs/heads/`). */
  head: string;
  base: string;
  /** Head sha when created; refreshed from the bare repository while the branch exists. */
  headSha: string;
  baseSha: string;
  draft: boolean;
  state: 'open' | 'closed';
  maintainerCanModify: boolean;
  createdAt: string;
  updatedAt: string;
  closedAt: string | null;
}

export interface FailNextOptions {
  /** Let the request take effect and replace only the response. Default false. */
  apply?: boolean;
}

export interface GitHubDouble {
  /** `http://127.0.0.1:<port>`: pass as Octokit's `baseUrl`. */
  baseUrl: string;
  token: string;
  requests: RecordedRequest[];
  pulls: PullRecord[];
  violations: string[];
  /** Fail the next request whose method matches and whose raw path matches `path`. `status: 0` drops the connection. */
  failNext(method: string, path: RegExp, status: number, body?: unknown, opts?: FailNextOptions): void;
  /** Throws (listing them) when any OpenAPI violation or internal error was recorded. */
  assertNoViolations(): void;
  close(): Promise<void>;
}

// ---------------------------------------------------------------------------------------------
// OpenAPI description and Ajv validation (shared by every double in the process)

type JsonObject = Record<string, unknown>;

function isObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function child(v: unknown, ...keys: string[]): unknown {
  let cur = v;
  for (const k of keys) {
    if (!isObject(cur)) return undefined;
    cur = cur[k];
  }
  return cur;
}

let specCache: JsonObject | undefined;

/**
 * GitHub's OpenAPI 3.0 description, dereferenced (no `$ref` left). About 73 MB of JSON: parsed once
 * per process, on first use.
 */
function openApi(): JsonObject {
  if (!specCache) {
    const file = createRequire(import.meta.url).resolve('@octokit/openapi/generated/api.github.com.deref.json');
    const parsed: unknown = JSON.parse(readFileSync(file, 'utf8'));
    if (!isObject(parsed) || !isObject(parsed.paths)) throw new Error(`${file} is not an OpenAPI document`);
    specCache = parsed;
  }
  return specCache;
}

/** Loads the description and compiles the validators of every route ahead of time (slow: call in a `before` hook). */
export function preloadOpenApi(): void {
  openApi();
  for (const route of ROUTES) {
    const op = operation(route.method, route.template);
    if (!op) throw new Error(`OpenAPI description has no ${route.method} ${route.template}`);
    const body = child(op, 'requestBody', 'content', 'application/json', 'schema');
    if (isObject(body)) validatorFor(`${route.method} ${route.template} request`, body);
    const responses = child(op, 'responses');
    if (isObject(responses)) {
      for (const status of Object.keys(responses)) {
        const schema = child(responses, status, 'content', 'application/json', 'schema');
        if (isObject(schema)) validatorFor(`${route.method} ${route.template} ${status}`, schema);
      }
    }
  }
}

function operation(method: string, template: string): JsonObject | undefined {
  const op = child(openApi(), 'paths', template, method.toLowerCase());
  return isObject(op) ? op : undefined;
}

let ajvInstance: Ajv | undefined;

/**
 * Ajv for OpenAPI 3.0 schemas. `strict: false` lets the OpenAPI-only keywords (`example`,
 * `discriminator`, `x-*`, `readOnly`, ...) through as annotations; OpenAPI's `nullable: true` is a
 * keyword Ajv implements natively (it widens `type` to include null; every `nullable` in the
 * schemas used here sits next to a `type`, which Ajv requires). Formats come from ajv-formats
 * (`uri`, `date-time`, `int64`, ...) plus GitHub's own `repo.nwo` (`owner/name`).
 */
function ajv(): Ajv {
  if (!ajvInstance) {
    const instance = new Ajv({ strict: false, allErrors: true, validateFormats: true });
    addFormatsModule.default(instance);
    instance.addFormat('repo.nwo', /^[^/\s]+\/[^/\s]+$/);
    ajvInstance = instance;
  }
  return ajvInstance;
}

const validators = new Map<string, ValidateFunction>();

function validatorFor(key: string, schema: JsonObject): ValidateFunction {
  let v = validators.get(key);
  if (!v) {
    v = ajv().compile(schema);
    validators.set(key, v);
  }
  return v;
}

/** GitHub's uniform error body, for statuses an operation does not document (401, injected 5xx, ...). */
const ERROR_BODY_SCHEMA: JsonObject = {
  type: 'object',
  required: ['message', 'documentation_url'],
  properties: {
    message: { type: 'string' },
    documentation_url: { type: 'string' },
    status: { type: 'string' },
    errors: { type: 'array' },
  },
};

function formatErrors(errors: ErrorObject[] | null | undefined): string[] {
  const out = (errors ?? []).slice(0, 12).map((e) => {
    const extra = isObject(e.params) && 'allowedValues' in e.params ? ` (${JSON.stringify(e.params.allowedValues)})` : '';
    return `${e.instancePath || '(root)'} ${e.message ?? e.keyword}${extra}`;
  });
  if ((errors?.length ?? 0) > 12) out.push(`... ${(errors?.length ?? 0) - 12} more`);
  return out;
}

/**
 * Validates a request body against the operation's `requestBody` schema. Returns Ajv's errors as
 * readable strings (empty when valid). `body === undefined` means "no body".
 */
export function validateRequestBody(method: string, template: string, body: unknown): string[] {
  const op = operation(method, template);
  if (!op) return [`no operation ${method} ${template} in the OpenAPI description`];
  const requestBody = child(op, 'requestBody');
  if (!isObject(requestBody)) return body === undefined ? [] : ['the operation takes no request body'];
  if (body === undefined) return requestBody.required === true ? ['a request body is required'] : [];
  const schema = child(requestBody, 'content', 'application/json', 'schema');
  if (!isObject(schema)) return ['the operation documents no application/json request body'];
  const validate = validatorFor(`${method.toUpperCase()} ${template} request`, schema);
  return validate(body) ? [] : formatErrors(validate.errors);
}

/**
 * Validates a response body against the operation's schema for `status`. Documented statuses
 * without a JSON body (204, GitHub's bare 422 of DELETE refs) must come without a body, except that
 * error statuses may carry GitHub's error shape; undocumented error statuses are checked against
 * that shape; undocumented success statuses are errors.
 */
export function validateResponse(method: string, template: string, status: number, body: unknown): string[] {
  const op = operation(method, template);
  if (!op) return [`no operation ${method} ${template} in the OpenAPI description`];
  const documented = child(op, 'responses', String(status));
  if (!isObject(documented)) {
    if (status < 400) return [`status ${status} is not documented for ${method.toUpperCase()} ${template}`];
    const v = validatorFor('error-body', ERROR_BODY_SCHEMA);
    return v(body) ? [] : formatErrors(v.errors);
  }
  const schema = child(documented, 'content', 'application/json', 'schema');
  if (!isObject(schema)) {
    if (body === undefined) return [];
    if (status >= 400) {
      const v = validatorFor('error-body', ERROR_BODY_SCHEMA);
      return v(body) ? [] : formatErrors(v.errors);
    }
    return [`status ${status} of ${method.toUpperCase()} ${template} has no body, got one`];
  }
  if (body === undefined) return [`status ${status} of ${method.toUpperCase()} ${template} needs a JSON body`];
  const validate = validatorFor(`${method.toUpperCase()} ${template} ${status}`, schema);
  return validate(body) ? [] : formatErrors(validate.errors);
}

/** Validates query parameters against the operation's `in: query` parameters (strings coerced to integer/boolean first). */
export function validateQuery(method: string, template: string, query: Record<string, string>): string[] {
  const op = operation(method, template);
  if (!op) return [`no operation ${method} ${template} in the OpenAPI description`];
  const params = Array.isArray(op.parameters) ? op.parameters : [];
  const known = new Map<string, JsonObject>();
  for (const p of params) {
    if (isObject(p) && p.in === 'query' && typeof p.name === 'string' && isObject(p.schema)) known.set(p.name, p.schema);
  }
  const errors: string[] = [];
  for (const [name, raw] of Object.entries(query)) {
    const schema = known.get(name);
    if (!schema) {
      errors.push(`unknown query parameter ${name}`);
      continue;
    }
    let value: unknown = raw;
    if (schema.type === 'integer' && /^-?\d+$/.test(raw)) value = Number(raw);
    if (schema.type === 'boolean' && (raw === 'true' || raw === 'false')) value = raw === 'true';
    const v = validatorFor(`${method.toUpperCase()} ${template} query ${name}`, schema);
    if (!v(value)) errors.push(...formatErrors(v.errors).map((e) => `${name}: ${e}`));
  }
  return errors;
}

// ---------------------------------------------------------------------------------------------
// Routing

type Method = 'GET' | 'POST' | 'PATCH' | 'DELETE';

interface Route {
  method: Method;
  /** Exactly the OpenAPI path key. */
  template: string;
  pattern: RegExp;
  names: string[];
}

function route(method: Method, template: string): Route {
  const names: string[] = [];
  // `{ref}` may arrive percent-encoded (Octokit sends heads%2Fmain) or with raw slashes: greedy.
  const source = template.replace(/\{(\w+)\}/g, (_m, name: string) => {
    names.push(name);
    return name === 'ref' ? '(.+)' : '([^/]+)';
  });
  return { method, template, pattern: new RegExp(`^${source}$`), names };
}

const ROUTES: Route[] = [
  route('GET', '/repos/{owner}/{repo}'),
  route('GET', '/repos/{owner}/{repo}/git/ref/{ref}'),
  route('GET', '/repos/{owner}/{repo}/git/commits/{commit_sha}'),
  route('POST', '/repos/{owner}/{repo}/git/blobs'),
  route('POST', '/repos/{owner}/{repo}/git/trees'),
  route('POST', '/repos/{owner}/{repo}/git/commits'),
  route('POST', '/repos/{owner}/{repo}/git/refs'),
  route('PATCH', '/repos/{owner}/{repo}/git/refs/{ref}'),
  route('DELETE', '/repos/{owner}/{repo}/git/refs/{ref}'),
  route('POST', '/repos/{owner}/{repo}/pulls'),
  route('GET', '/repos/{owner}/{repo}/pulls'),
  route('GET', '/repos/{owner}/{repo}/pulls/{pull_number}'),
];

function matchRoute(method: string, rawPath: string): { route: Route; params: Record<string, string> } | undefined {
  for (const r of ROUTES) {
    if (r.method !== method) continue;
    const m = r.pattern.exec(rawPath);
    if (!m) continue;
    const params: Record<string, string> = {};
    let ok = true;
    r.names.forEach((name, i) => {
      try {
        params[name] = decodeURIComponent(m[i + 1] ?? '');
      } catch {
        ok = false;
      }
    });
    if (ok) return { route: r, params };
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// Request bodies (typed after the OpenAPI check; the zod schemas mirror GitHub's)

const BlobBody = z.object({ content: z.string(), encoding: z.string().optional() });
const TreeEntryBody = z.object({
  path: z.string().optional(),
  mode: z.enum(['100644', '100755', '040000', '160000', '120000']).optional(),
  type: z.enum(['blob', 'tree', 'commit']).optional(),
  sha: z.string().nullable().optional(),
  content: z.string().optional(),
});
const TreeBody = z.object({ tree: z.array(TreeEntryBody), base_tree: z.string().optional() });
const PersonBody = z.object({ name: z.string().optional(), email: z.string().optional(), date: z.string().optional() });
const CommitBody = z.object({
  message: z.string(),
  tree: z.string(),
  parents: z.array(z.string()).optional(),
  author: PersonBody.optional(),
  committer: PersonBody.optional(),
  signature: z.string().optional(),
});
const CreateRefBody = z.object({ ref: z.string(), sha: z.string() });
const UpdateRefBody = z.object({ sha: z.string(), force: z.boolean().optional() });
const CreatePullBody = z.object({
  title: z.string().optional(),
  head: z.string(),
  head_repo: z.string().optional(),
  base: z.string(),
  body: z.string().optional(),
  maintainer_can_modify: z.boolean().optional(),
  draft: z.boolean().optional(),
  issue: z.number().int().optional(),
});

// ---------------------------------------------------------------------------------------------
// git plumbing

interface GitResult {
  code: number;
  stdout: string;
  stderr: string;
}

function git(gitDir: string, args: string[], opts: { input?: Buffer | string; env?: Record<string, string> } = {}): Promise<GitResult> {
  return new Promise((resolve, reject) => {
    const proc = spawn('git', ['--git-dir', gitDir, ...args], {
      env: { ...process.env, GIT_TERMINAL_PROMPT: '0', ...opts.env },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    proc.stdout.on('data', (c: Buffer) => out.push(c));
    proc.stderr.on('data', (c: Buffer) => err.push(c));
    proc.on('error', reject);
    proc.on('close', (code) => {
      resolve({ code: code ?? -1, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') });
    });
    proc.stdin.on('error', () => undefined); // git may exit before reading everything; its exit code tells
    proc.stdin.end(opts.input ?? '');
  });
}

async function gitOk(gitDir: string, args: string[], opts: { input?: Buffer | string; env?: Record<string, string> } = {}): Promise<string> {
  const r = await git(gitDir, args, opts);
  if (r.code !== 0) throw new Error(`git ${args.join(' ')} failed (${r.code}): ${r.stderr.trim()}`);
  return r.stdout;
}

const SHA_RE = /^[0-9a-f]{40}$/;

/** The object's type (`blob`, `tree`, `commit`, `tag`), or undefined when it does not exist. */
async function objectType(gitDir: string, sha: string): Promise<string | undefined> {
  if (!SHA_RE.test(sha)) return undefined;
  const r = await git(gitDir, ['cat-file', '-t', sha]);
  return r.code === 0 ? r.stdout.trim() : undefined;
}

/** The sha a fully qualified ref (`refs/heads/main`) points at, or undefined. */
async function refSha(gitDir: string, fullRef: string): Promise<string | undefined> {
  const r = await git(gitDir, ['show-ref', '--verify', '--hash', fullRef]);
  return r.code === 0 ? r.stdout.trim() : undefined;
}

interface GitPerson {
  name: string;
  email: string;
  date: string;
}

interface GitCommit {
  sha: string;
  tree: string;
  parents: string[];
  author: GitPerson;
  committer: GitPerson;
  message: string;
}

function parsePerson(line: string): GitPerson {
  const m = /^(.*) <([^>]*)> (\d+) ([+-]\d{4})$/.exec(line);
  if (!m) throw new Error(`unparseable identity line: ${line}`);
  return { name: m[1] ?? '', email: m[2] ?? '', date: isoSeconds(new Date(Number(m[3]) * 1000)) };
}

async function readCommit(gitDir: string, sha: string): Promise<GitCommit | undefined> {
  if ((await objectType(gitDir, sha)) !== 'commit') return undefined;
  const raw = await gitOk(gitDir, ['cat-file', 'commit', sha]);
  const split = raw.indexOf('\n\n');
  const header = split === -1 ? raw : raw.slice(0, split);
  const message = split === -1 ? '' : raw.slice(split + 2);
  let tree = '';
  const parents: string[] = [];
  let author: GitPerson | undefined;
  let committer: GitPerson | undefined;
  for (const line of header.split('\n')) {
    if (line.startsWith(' ')) continue; // continuation of a multi-line header (gpgsig)
    const space = line.indexOf(' ');
    const key = line.slice(0, space);
    const value = line.slice(space + 1);
    if (key === 'tree') tree = value;
    else if (key === 'parent') parents.push(value);
    else if (key === 'author') author = parsePerson(value);
    else if (key === 'committer') committer = parsePerson(value);
  }
  if (!author || !committer) throw new Error(`commit ${sha} has no author/committer`);
  return { sha, tree, parents, author, committer, message };
}

interface TreeListing {
  mode: string;
  type: string;
  sha: string;
  size: number | undefined;
  path: string;
}

async function lsTree(gitDir: string, tree: string): Promise<TreeListing[]> {
  const out = await gitOk(gitDir, ['ls-tree', '-l', '-z', tree]);
  return out
    .split('\0')
    .filter((l) => l.length > 0)
    .map((l) => {
      const tab = l.indexOf('\t');
      const [mode = '', type = '', sha = '', size = '-'] = l.slice(0, tab).trim().split(/\s+/);
      return { mode, type, sha, size: size === '-' ? undefined : Number(size), path: l.slice(tab + 1) };
    });
}

// ---------------------------------------------------------------------------------------------
// Small helpers

function isoSeconds(d: Date): string {
  return d.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function nodeId(prefix: string, value: string | number): string {
  return `${prefix}_kwDO${Buffer.from(String(value)).toString('base64url')}`;
}

const DOCS = 'https://docs.github.com/rest';

/** A GitHub-shaped error answer a handler throws. */
class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly body: JsonObject,
  ) {
    super(typeof body.message === 'string' ? body.message : `HTTP ${status}`);
  }
}

function fail(status: number, message: string, extra: JsonObject = {}, docs = DOCS): HttpError {
  return new HttpError(status, { message, documentation_url: docs, status: String(status), ...extra });
}

function validationFailed(errors: JsonObject[], docs = DOCS): HttpError {
  return fail(422, 'Validation Failed', { errors }, docs);
}

interface Reply {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

interface RepoState extends DoubleRepoConfig {
  id: number;
  createdAt: string;
  nextNumber: number;
}

interface Injection {
  method: string;
  path: RegExp;
  status: number;
  body: unknown;
  apply: boolean;
}

// ---------------------------------------------------------------------------------------------
// The double

export async function startGitHubDouble(options: GitHubDoubleOptions): Promise<GitHubDouble> {
  const token = options.token;
  const login = options.login ?? 'steward-bot';
  const htmlBase = options.htmlBase ?? 'https://github.com';
  const requests: RecordedRequest[] = [];
  const pulls: PullRecord[] = [];
  const violations: string[] = [];
  const injections: Injection[] = [];
  const sockets = new Set<Socket>();
  let nextId = 1000;
  const userId = 41000001;
  const ownerIds = new Map<string, number>();
  const startedAt = isoSeconds(new Date());
  let baseUrl = '';

  const repos = new Map<string, RepoState>();
  for (const r of options.repos) {
    repos.set(`${r.owner}/${r.repo}`.toLowerCase(), { ...r, id: 700000 + repos.size, createdAt: startedAt, nextNumber: 1 });
    if (!ownerIds.has(r.owner)) ownerIds.set(r.owner, 9100000 + ownerIds.size);
  }

  // ---- response objects (complete per GitHub's schemas: every required field, realistic values)

  function simpleUser(userLogin: string, id: number, type: 'User' | 'Organization'): JsonObject {
    const u = `${baseUrl}/users/${encodeURIComponent(userLogin)}`;
    return {
      login: userLogin,
      id,
      node_id: nodeId(type === 'User' ? 'U' : 'O', id),
      avatar_url: `https://avatars.githubusercontent.com/u/${id}?v=4`,
      gravatar_id: '',
      url: u,
      html_url: `${htmlBase}/${encodeURIComponent(userLogin)}`,
      followers_url: `${u}/followers`,
      following_url: `${u}/following{/other_user}`,
      gists_url: `${u}/gists{/gist_id}`,
      starred_url: `${u}/starred{/owner}{/repo}`,
      subscriptions_url: `${u}/subscriptions`,
      organizations_url: `${u}/orgs`,
      repos_url: `${u}/repos`,
      events_url: `${u}/events{/privacy}`,
      received_events_url: `${u}/received_events`,
      type,
      user_view_type: 'public',
      site_admin: false,
    };
  }

  const tokenUser = (): JsonObject => simpleUser(login, userId, 'User');
  const ownerUser = (r: RepoState): JsonObject => simpleUser(r.owner, ownerIds.get(r.owner) ?? 1, 'Organization');
  const repoApi = (r: RepoState): string => `${baseUrl}/repos/${r.owner}/${r.repo}`;

  /** A repository object: a superset of "Repository" (pull request heads/bases) and "Full Repository". */
  async function repository(r: RepoState): Promise<JsonObject> {
    const u = repoApi(r);
    const html = `${htmlBase}/${r.owner}/${r.repo}`;
    const openCount = pulls.filter((p) => p.owner === r.owner && p.repo === r.repo && p.state === 'open').length;
    const lastPush = (await gitOk(r.bareDir, ['for-each-ref', '--sort=-committerdate', '--count=1', '--format=%(committerdate:unix)', 'refs/heads'])).trim();
    const pushedAt = lastPush ? isoSeconds(new Date(Number(lastPush) * 1000)) : null;
    return {
      id: r.id,
      node_id: nodeId('R', r.id),
      name: r.repo,
      full_name: `${r.owner}/${r.repo}`,
      owner: ownerUser(r),
      private: true,
      html_url: html,
      description: null,
      fork: false,
      url: u,
      archive_url: `${u}/{archive_format}{/ref}`,
      assignees_url: `${u}/assignees{/user}`,
      blobs_url: `${u}/git/blobs{/sha}`,
      branches_url: `${u}/branches{/branch}`,
      collaborators_url: `${u}/collaborators{/collaborator}`,
      comments_url: `${u}/comments{/number}`,
      commits_url: `${u}/commits{/sha}`,
      compare_url: `${u}/compare/{base}...{head}`,
      contents_url: `${u}/contents/{+path}`,
      contributors_url: `${u}/contributors`,
      deployments_url: `${u}/deployments`,
      downloads_url: `${u}/downloads`,
      events_url: `${u}/events`,
      forks_url: `${u}/forks`,
      git_commits_url: `${u}/git/commits{/sha}`,
      git_refs_url: `${u}/git/refs{/sha}`,
      git_tags_url: `${u}/git/tags{/sha}`,
      git_url: `git://github.com/${r.owner}/${r.repo}.git`,
      issue_comment_url: `${u}/issues/comments{/number}`,
      issue_events_url: `${u}/issues/events{/number}`,
      issues_url: `${u}/issues{/number}`,
      keys_url: `${u}/keys{/key_id}`,
      labels_url: `${u}/labels{/name}`,
      languages_url: `${u}/languages`,
      merges_url: `${u}/merges`,
      milestones_url: `${u}/milestones{/number}`,
      notifications_url: `${u}/notifications{?since,all,participating}`,
      pulls_url: `${u}/pulls{/number}`,
      releases_url: `${u}/releases{/id}`,
      ssh_url: `git@github.com:${r.owner}/${r.repo}.git`,
      stargazers_url: `${u}/stargazers`,
      statuses_url: `${u}/statuses/{sha}`,
      subscribers_url: `${u}/subscribers`,
      subscription_url: `${u}/subscription`,
      tags_url: `${u}/tags`,
      teams_url: `${u}/teams`,
      trees_url: `${u}/git/trees{/sha}`,
      clone_url: `${html}.git`,
      mirror_url: null,
      hooks_url: `${u}/hooks`,
      svn_url: html,
      homepage: null,
      language: 'TypeScript',
      forks: 0,
      forks_count: 0,
      stargazers_count: 0,
      watchers_count: 0,
      watchers: 0,
      size: 0,
      default_branch: r.defaultBranch,
      open_issues: openCount,
      open_issues_count: openCount,
      is_template: false,
      topics: [],
      has_issues: true,
      has_projects: true,
      has_wiki: false,
      has_pages: false,
      has_downloads: true,
      has_discussions: false,
      archived: false,
      disabled: false,
      visibility: 'private',
      pushed_at: pushedAt,
      created_at: r.createdAt,
      updated_at: r.createdAt,
      permissions: { admin: false, maintain: false, push: true, triage: true, pull: true },
      allow_rebase_merge: true,
      allow_squash_merge: true,
      allow_merge_commit: true,
      allow_auto_merge: false,
      delete_branch_on_merge: false,
      allow_update_branch: false,
      use_squash_pr_title_as_default: false,
      squash_merge_commit_title: 'COMMIT_OR_PR_TITLE',
      squash_merge_commit_message: 'COMMIT_MESSAGES',
      merge_commit_title: 'MERGE_MESSAGE',
      merge_commit_message: 'PR_TITLE',
      allow_forking: false,
      web_commit_signoff_required: false,
      license: null,
      organization: ownerUser(r),
      network_count: 0,
      subscribers_count: 1,
    };
  }

  function gitRefObject(r: RepoState, fullRef: string, sha: string, type: string): JsonObject {
    const u = repoApi(r);
    return {
      ref: fullRef,
      node_id: nodeId('REF', `${r.id}:${fullRef}`),
      url: `${u}/git/${fullRef}`,
      object: { type, sha, url: `${u}/git/${type === 'tag' ? 'tags' : 'commits'}/${sha}` },
    };
  }

  function gitCommitObject(r: RepoState, c: GitCommit): JsonObject {
    const u = repoApi(r);
    const html = `${htmlBase}/${r.owner}/${r.repo}`;
    return {
      sha: c.sha,
      node_id: nodeId('C', `${r.id}:${c.sha}`),
      url: `${u}/git/commits/${c.sha}`,
      html_url: `${html}/commit/${c.sha}`,
      author: c.author,
      committer: c.committer,
      message: c.message,
      tree: { sha: c.tree, url: `${u}/git/trees/${c.tree}` },
      parents: c.parents.map((p) => ({ sha: p, url: `${u}/git/commits/${p}`, html_url: `${html}/commit/${p}` })),
      verification: { verified: false, reason: 'unsigned', signature: null, payload: null, verified_at: null },
    };
  }

  /** Refreshes the head sha of an open pull request from the bare repository. */
  async function refreshPull(r: RepoState, p: PullRecord): Promise<void> {
    if (p.state !== 'open') return;
    const sha = await refSha(r.bareDir, `refs/heads/${p.head}`);
    if (sha && sha !== p.headSha) {
      p.headSha = sha;
      p.updatedAt = isoSeconds(new Date());
    }
  }

  async function pullObject(r: RepoState, p: PullRecord, full: boolean): Promise<JsonObject> {
    await refreshPull(r, p);
    const u = repoApi(r);
    const html = `${htmlBase}/${r.owner}/${r.repo}`;
    const repo = await repository(r);
    const owner = ownerUser(r);
    const obj: JsonObject = {
      url: `${u}/pulls/${p.number}`,
      id: p.id,
      node_id: nodeId('PR', p.id),
      html_url: `${html}/pull/${p.number}`,
      diff_url: `${html}/pull/${p.number}.diff`,
      patch_url: `${html}/pull/${p.number}.patch`,
      issue_url: `${u}/issues/${p.number}`,
      commits_url: `${u}/pulls/${p.number}/commits`,
      review_comments_url: `${u}/pulls/${p.number}/comments`,
      review_comment_url: `${u}/pulls/comments{/number}`,
      comments_url: `${u}/issues/${p.number}/comments`,
      statuses_url: `${u}/statuses/${p.headSha}`,
      number: p.number,
      state: p.state,
      locked: false,
      title: p.title,
      user: tokenUser(),
      body: p.body,
      labels: [],
      milestone: null,
      active_lock_reason: null,
      created_at: p.createdAt,
      updated_at: p.updatedAt,
      closed_at: p.closedAt,
      merged_at: null,
      merge_commit_sha: null,
      assignee: null,
      assignees: [],
      requested_reviewers: [],
      requested_teams: [],
      head: { label: `${r.owner}:${p.head}`, ref: p.head, sha: p.headSha, user: owner, repo },
      base: { label: `${r.owner}:${p.base}`, ref: p.base, sha: p.baseSha, user: owner, repo },
      _links: {
        self: { href: `${u}/pulls/${p.number}` },
        html: { href: `${html}/pull/${p.number}` },
        issue: { href: `${u}/issues/${p.number}` },
        comments: { href: `${u}/issues/${p.number}/comments` },
        review_comments: { href: `${u}/pulls/${p.number}/comments` },
        review_comment: { href: `${u}/pulls/comments{/number}` },
        commits: { href: `${u}/pulls/${p.number}/commits` },
        statuses: { href: `${u}/statuses/${p.headSha}` },
      },
      author_association: 'CONTRIBUTOR',
      auto_merge: null,
      draft: p.draft,
    };
    if (full) {
      // The fields only the single-pull-request representation carries.
      const numstat = await gitOk(r.bareDir, ['diff', '--numstat', `${p.baseSha}...${p.headSha}`]);
      let additions = 0;
      let deletions = 0;
      const lines = numstat.split('\n').filter((l) => l.length > 0);
      for (const l of lines) {
        const [a = '0', d = '0'] = l.split('\t');
        additions += a === '-' ? 0 : Number(a);
        deletions += d === '-' ? 0 : Number(d);
      }
      const commits = Number((await gitOk(r.bareDir, ['rev-list', '--count', `${p.baseSha}..${p.headSha}`])).trim());
      Object.assign(obj, {
        merged: false,
        mergeable: null,
        rebaseable: null,
        mergeable_state: 'unknown',
        merged_by: null,
        comments: 0,
        review_comments: 0,
        maintainer_can_modify: p.maintainerCanModify,
        commits,
        additions,
        deletions,
        changed_files: lines.length,
      });
    }
    return obj;
  }

  // ---- handlers

  /** `heads/x` or `tags/x` from a `{ref}` path parameter, as the fully qualified ref. */
  function qualifiedRef(ref: string): string | undefined {
    return /^(heads|tags)\/.+/.test(ref) ? `refs/${ref}` : undefined;
  }

  async function getRepo(r: RepoState): Promise<Reply> {
    return { status: 200, body: await repository(r) };
  }

  async function getRef(r: RepoState, ref: string): Promise<Reply> {
    const full = qualifiedRef(ref);
    const sha = full ? await refSha(r.bareDir, full) : undefined;
    if (!full || !sha) throw fail(404, 'Not Found', {}, 'https://docs.github.com/rest/git/refs#get-a-reference');
    return { status: 200, body: gitRefObject(r, full, sha, (await objectType(r.bareDir, sha)) ?? 'commit') };
  }

  async function getCommit(r: RepoState, sha: string): Promise<Reply> {
    const c = await readCommit(r.bareDir, sha);
    if (!c) throw fail(404, 'Not Found', {}, 'https://docs.github.com/rest/git/commits#get-a-commit-object');
    return { status: 200, body: gitCommitObject(r, c) };
  }

  async function createBlob(r: RepoState, raw: unknown): Promise<Reply> {
    const body = BlobBody.parse(raw);
    const encoding = body.encoding ?? 'utf-8';
    let data: Buffer;
    if (encoding === 'utf-8' || encoding === 'utf8') data = Buffer.from(body.content, 'utf8');
    else if (encoding === 'base64') {
      if (!/^[A-Za-z0-9+/\s]*={0,2}\s*$/.test(body.content)) throw validationFailed([{ resource: 'Blob', field: 'content', code: 'invalid' }]);
      data = Buffer.from(body.content, 'base64');
    } else throw fail(422, `encoding must be one of: utf-8, base64 (got "${encoding}")`);
    const sha = (await gitOk(r.bareDir, ['hash-object', '-w', '--no-filters', '--stdin'], { input: data })).trim();
    return { status: 201, body: { url: `${repoApi(r)}/git/blobs/${sha}`, sha }, headers: { location: `${repoApi(r)}/git/blobs/${sha}` } };
  }

  const MODE_TYPE: Record<string, string> = { '100644': 'blob', '100755': 'blob', '120000': 'blob', '040000': 'tree', '160000': 'commit' };

  function badTreePath(p: string): boolean {
    return p === '' || p.startsWith('/') || p.endsWith('/') || p.split('/').some((s) => s === '' || s === '.' || s === '..' || s === '.git');
  }

  /**
   * Builds the tree in a temporary index: `read-tree <base_tree>` (or `--empty`), then each entry in
   * order with `update-index` (`--add --replace --cacheinfo` to add/replace, `--force-remove` for
   * `sha: null`, which removes a file or everything under a directory), `read-tree --prefix` for a
   * subtree, and `write-tree`. A throw-away work tree keeps the plumbing happy in a bare repository.
   */
  async function createTree(r: RepoState, raw: unknown): Promise<Reply> {
    const body = TreeBody.parse(raw);
    const docs = 'https://docs.github.com/rest/git/trees#create-a-tree';
    const scratch = await mkdtemp(path.join(tmpdir(), 'gh-double-tree-'));
    try {
      const workTree = path.join(scratch, 'wt');
      await mkdir(workTree);
      const env = { GIT_INDEX_FILE: path.join(scratch, 'index'), GIT_WORK_TREE: workTree };
      if (body.base_tree !== undefined) {
        if ((await objectType(r.bareDir, body.base_tree)) !== 'tree') throw fail(422, 'base_tree is not a valid tree oid', {}, docs);
        await gitOk(r.bareDir, ['read-tree', body.base_tree], { env });
      } else {
        await gitOk(r.bareDir, ['read-tree', '--empty'], { env });
      }
      const indexPaths = async (): Promise<string[]> =>
        (await gitOk(r.bareDir, ['ls-files', '-z', '--cached'], { env })).split('\0').filter((p) => p.length > 0);
      const remove = async (paths: string[]): Promise<void> => {
        for (const p of paths) await gitOk(r.bareDir, ['update-index', '--force-remove', '--', p], { env });
      };

      for (const [i, entry] of body.tree.entries()) {
        const where = `tree.${i}`;
        if (entry.path === undefined || badTreePath(entry.path)) throw fail(422, `${where}.path contains a malformed path component`, {}, docs);
        if (entry.mode === undefined || entry.type === undefined) throw fail(422, `${where} must have a mode and a type`, {}, docs);
        if (MODE_TYPE[entry.mode] !== entry.type) throw fail(422, `${where}.type "${entry.type}" does not match mode ${entry.mode}`, {}, docs);
        const p = entry.path;
        const hasSha = entry.sha !== undefined;
        if (hasSha && entry.content !== undefined) throw fail(422, `Must supply either ${where}.sha or ${where}.content, not both`, {}, docs);
        if (!hasSha && entry.content === undefined) throw fail(422, `Must supply ${where}.sha or ${where}.content`, {}, docs);

        const existing = await indexPaths();
        const under = existing.filter((e) => e === p || e.startsWith(`${p}/`));

        if (entry.sha === null) {
          // Deletion: GitHub refuses to delete what the base tree does not have.
          if (under.length === 0) throw fail(422, `GitRPC::BadObjectState: ${where}.path "${p}" does not exist in the base tree`, {}, docs);
          await remove(under);
          continue;
        }
        let sha: string;
        if (entry.content !== undefined) {
          if (entry.type !== 'blob') throw fail(422, `${where}.content can only be used for blobs`, {}, docs);
          sha = (await gitOk(r.bareDir, ['hash-object', '-w', '--no-filters', '--stdin'], { input: Buffer.from(entry.content, 'utf8') })).trim();
        } else {
          sha = entry.sha ?? '';
          if (entry.type !== 'commit' && (await objectType(r.bareDir, sha)) !== entry.type) {
            throw fail(422, `${where}.sha ${sha} is not a valid ${entry.type}`, {}, docs);
          }
        }
        if (entry.type === 'tree') {
          await remove(under);
          await gitOk(r.bareDir, ['read-tree', `--prefix=${p}/`, sha], { env });
        } else {
          // A file replacing a directory: drop what was under it; --replace handles a file replacing
          // a parent path that was a file.
          await remove(under.filter((e) => e !== p));
          await gitOk(r.bareDir, ['update-index', '--add', '--replace', '--cacheinfo', `${entry.mode},${sha},${p}`], { env });
        }
      }
      const tree = (await gitOk(r.bareDir, ['write-tree'], { env })).trim();
      const u = repoApi(r);
      const entries = (await lsTree(r.bareDir, tree)).map((e) => ({
        path: e.path,
        mode: e.mode,
        type: e.type,
        sha: e.sha,
        ...(e.size === undefined ? {} : { size: e.size }),
        url: `${u}/git/${e.type === 'tree' ? 'trees' : e.type === 'blob' ? 'blobs' : 'commits'}/${e.sha}`,
      }));
      return { status: 201, body: { sha: tree, url: `${u}/git/trees/${tree}`, tree: entries, truncated: false }, headers: { location: `${u}/git/trees/${tree}` } };
    } finally {
      await rm(scratch, { recursive: true, force: true });
    }
  }

  function gitDate(date: string | undefined, fallback: Date): string {
    const ms = date === undefined ? fallback.getTime() : Date.parse(date);
    if (Number.isNaN(ms)) throw fail(422, `Invalid date: ${date ?? ''}`);
    return `${Math.floor(ms / 1000)} +0000`;
  }

  async function createCommit(r: RepoState, raw: unknown): Promise<Reply> {
    const body = CommitBody.parse(raw);
    const docs = 'https://docs.github.com/rest/git/commits#create-a-commit';
    if ((await objectType(r.bareDir, body.tree)) !== 'tree') throw fail(422, 'Tree SHA does not exist', {}, docs);
    const parents = body.parents ?? [];
    for (const p of parents) {
      if ((await objectType(r.bareDir, p)) !== 'commit') throw fail(422, 'Parent SHA does not exist or is not a commit object', {}, docs);
    }
    const now = new Date();
    // GitHub's defaults: the author is the authenticated user, the committer is the author.
    const author = { name: body.author?.name ?? login, email: body.author?.email ?? `${userId}+${login}@users.noreply.github.com`, date: body.author?.date };
    const committer = {
      name: body.committer?.name ?? author.name,
      email: body.committer?.email ?? author.email,
      date: body.committer?.date ?? author.date,
    };
    const env = {
      GIT_AUTHOR_NAME: author.name,
      GIT_AUTHOR_EMAIL: author.email,
      GIT_AUTHOR_DATE: gitDate(author.date, now),
      GIT_COMMITTER_NAME: committer.name,
      GIT_COMMITTER_EMAIL: committer.email,
      GIT_COMMITTER_DATE: gitDate(committer.date, now),
    };
    const args = ['commit-tree', body.tree, ...parents.flatMap((p) => ['-p', p])];
    const sha = (await gitOk(r.bareDir, args, { input: body.message, env })).trim();
    const c = await readCommit(r.bareDir, sha);
    if (!c) throw new Error(`commit ${sha} vanished`);
    return { status: 201, body: gitCommitObject(r, c), headers: { location: `${repoApi(r)}/git/commits/${sha}` } };
  }

  async function createRef(r: RepoState, raw: unknown): Promise<Reply> {
    const body = CreateRefBody.parse(raw);
    const docs = 'https://docs.github.com/rest/git/refs#create-a-reference';
    if (!/^refs\/[^/]+\/.+/.test(body.ref)) throw fail(422, "Reference name must start with 'refs/' and have at least two slashes.", {}, docs);
    if ((await git(r.bareDir, ['check-ref-format', body.ref])).code !== 0) throw fail(422, `${body.ref} is not a valid ref name.`, {}, docs);
    const type = await objectType(r.bareDir, body.sha);
    if (!type) throw fail(422, 'Object does not exist', {}, docs);
    // An all-zero old value makes update-ref refuse to overwrite an existing ref (atomic create).
    const res = await git(r.bareDir, ['update-ref', body.ref, body.sha, '0'.repeat(40)]);
    if (res.code !== 0) {
      if (await refSha(r.bareDir, body.ref)) throw fail(422, 'Reference already exists', {}, docs);
      throw new Error(`update-ref failed: ${res.stderr.trim()}`);
    }
    const ref = gitRefObject(r, body.ref, body.sha, type);
    return { status: 201, body: ref, headers: { location: String(ref.url) } };
  }

  async function updateRef(r: RepoState, ref: string, raw: unknown): Promise<Reply> {
    const body = UpdateRefBody.parse(raw);
    const docs = 'https://docs.github.com/rest/git/refs#update-a-reference';
    const full = qualifiedRef(ref);
    const current = full ? await refSha(r.bareDir, full) : undefined;
    if (!full || !current) throw fail(422, 'Reference does not exist', {}, docs);
    const type = await objectType(r.bareDir, body.sha);
    if (!type) throw fail(422, 'Object does not exist', {}, docs);
    if (!body.force && current !== body.sha) {
      const ff = await git(r.bareDir, ['merge-base', '--is-ancestor', current, body.sha]);
      if (ff.code !== 0) throw fail(422, 'Update is not a fast forward', {}, docs);
    }
    // Compare-and-swap against the value read above.
    await gitOk(r.bareDir, ['update-ref', full, body.sha, current]);
    return { status: 200, body: gitRefObject(r, full, body.sha, type) };
  }

  async function deleteRef(r: RepoState, ref: string): Promise<Reply> {
    const full = qualifiedRef(ref);
    const current = full ? await refSha(r.bareDir, full) : undefined;
    if (!full || !current) throw fail(422, 'Reference does not exist', {}, 'https://docs.github.com/rest/git/refs#delete-a-reference');
    await gitOk(r.bareDir, ['update-ref', '-d', full, current]);
    // Deleting the head branch of an open pull request closes it.
    if (full.startsWith('refs/heads/')) {
      const branch = full.slice('refs/heads/'.length);
      const now = isoSeconds(new Date());
      for (const p of pulls) {
        if (p.owner === r.owner && p.repo === r.repo && p.head === branch && p.state === 'open') {
          p.state = 'closed';
          p.closedAt = now;
          p.updatedAt = now;
        }
      }
    }
    return { status: 204 };
  }

  async function createPull(r: RepoState, raw: unknown): Promise<Reply> {
    const body = CreatePullBody.parse(raw);
    const docs = 'https://docs.github.com/rest/pulls/pulls#create-a-pull-request';
    if (body.issue !== undefined) throw fail(422, 'Converting issues is not supported by this double', {}, docs);
    if (body.title === undefined) throw validationFailed([{ resource: 'PullRequest', field: 'title', code: 'missing_field' }], docs);
    let headBranch = body.head;
    const colon = body.head.indexOf(':');
    if (colon !== -1) {
      if (body.head.slice(0, colon).toLowerCase() !== r.owner.toLowerCase()) {
        throw validationFailed([{ resource: 'PullRequest', field: 'head', code: 'invalid' }], docs);
      }
      headBranch = body.head.slice(colon + 1);
    }
    const headSha = await refSha(r.bareDir, `refs/heads/${headBranch}`);
    const baseSha = await refSha(r.bareDir, `refs/heads/${body.base}`);
    const errors: JsonObject[] = [];
    if (!headSha) errors.push({ resource: 'PullRequest', field: 'head', code: 'invalid' });
    if (!baseSha) errors.push({ resource: 'PullRequest', field: 'base', code: 'invalid' });
    if (errors.length > 0 || !headSha || !baseSha) throw validationFailed(errors, docs);
    const dup = pulls.find((p) => p.owner === r.owner && p.repo === r.repo && p.head === headBranch && p.base === body.base && p.state === 'open');
    if (dup) {
      throw validationFailed([{ resource: 'PullRequest', code: 'custom', message: `A pull request already exists for ${r.owner}:${headBranch}.` }], docs);
    }
    const ahead = Number((await gitOk(r.bareDir, ['rev-list', '--count', `${baseSha}..${headSha}`])).trim());
    if (ahead === 0) {
      throw validationFailed([{ resource: 'PullRequest', code: 'custom', message: `No commits between ${body.base} and ${headBranch}` }], docs);
    }
    const now = isoSeconds(new Date());
    const record: PullRecord = {
      owner: r.owner,
      repo: r.repo,
      number: r.nextNumber++,
      id: nextId++,
      title: body.title,
      body: body.body ?? null,
      head: headBranch,
      base: body.base,
      headSha,
      baseSha,
      draft: body.draft ?? false,
      state: 'open',
      maintainerCanModify: body.maintainer_can_modify ?? false,
      createdAt: now,
      updatedAt: now,
      closedAt: null,
    };
    pulls.push(record);
    return { status: 201, body: await pullObject(r, record, true), headers: { location: `${repoApi(r)}/pulls/${record.number}` } };
  }

  async function getPull(r: RepoState, numberParam: string): Promise<Reply> {
    const n = /^\d+$/.test(numberParam) ? Number(numberParam) : NaN;
    const p = pulls.find((x) => x.owner === r.owner && x.repo === r.repo && x.number === n);
    if (!p) throw fail(404, 'Not Found', {}, 'https://docs.github.com/rest/pulls/pulls#get-a-pull-request');
    return { status: 200, body: await pullObject(r, p, true) };
  }

  async function listPulls(r: RepoState, query: Record<string, string>): Promise<Reply> {
    const state = query.state ?? 'open';
    const perPage = Math.min(Math.max(Number(query.per_page ?? 30) || 30, 1), 100);
    const page = Math.max(Number(query.page ?? 1) || 1, 1);
    let list = pulls.filter((p) => p.owner === r.owner && p.repo === r.repo);
    for (const p of list) await refreshPull(r, p);
    if (state !== 'all') list = list.filter((p) => p.state === state);
    // `head` must be `user:ref-name`; like GitHub, a value without the user part filters nothing.
    const head = query.head;
    if (head !== undefined && head.includes(':')) {
      const [user = '', ...rest] = head.split(':');
      list = list.filter((p) => user.toLowerCase() === r.owner.toLowerCase() && p.head === rest.join(':'));
    }
    if (query.base !== undefined) list = list.filter((p) => p.base === query.base);
    const direction = query.direction ?? 'desc';
    list = [...list].sort((a, b) => (direction === 'asc' ? a.number - b.number : b.number - a.number));
    const slice = list.slice((page - 1) * perPage, page * perPage);
    const body: JsonObject[] = [];
    for (const p of slice) body.push(await pullObject(r, p, false));
    return { status: 200, body };
  }

  async function dispatch(template: string, method: string, r: RepoState, params: Record<string, string>, query: Record<string, string>, body: unknown): Promise<Reply> {
    switch (`${method} ${template}`) {
      case 'GET /repos/{owner}/{repo}':
        return getRepo(r);
      case 'GET /repos/{owner}/{repo}/git/ref/{ref}':
        return getRef(r, params.ref ?? '');
      case 'GET /repos/{owner}/{repo}/git/commits/{commit_sha}':
        return getCommit(r, params.commit_sha ?? '');
      case 'POST /repos/{owner}/{repo}/git/blobs':
        return createBlob(r, body);
      case 'POST /repos/{owner}/{repo}/git/trees':
        return createTree(r, body);
      case 'POST /repos/{owner}/{repo}/git/commits':
        return createCommit(r, body);
      case 'POST /repos/{owner}/{repo}/git/refs':
        return createRef(r, body);
      case 'PATCH /repos/{owner}/{repo}/git/refs/{ref}':
        return updateRef(r, params.ref ?? '', body);
      case 'DELETE /repos/{owner}/{repo}/git/refs/{ref}':
        return deleteRef(r, params.ref ?? '');
      case 'POST /repos/{owner}/{repo}/pulls':
        return createPull(r, body);
      case 'GET /repos/{owner}/{repo}/pulls':
        return listPulls(r, query);
      case 'GET /repos/{owner}/{repo}/pulls/{pull_number}':
        return getPull(r, params.pull_number ?? '');
      default:
        throw fail(404, 'Not Found');
    }
  }

  // ---- HTTP plumbing

  function readBody(req: IncomingMessage): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => resolve(Buffer.concat(chunks)));
      req.on('error', reject);
    });
  }

  function send(res: ServerResponse, reply: Reply): void {
    const headers: Record<string, string> = {
      'x-github-request-id': `DBL:${requests.length}`,
      'x-github-api-version-selected': '2022-11-28',
      'x-ratelimit-limit': '5000',
      'x-ratelimit-remaining': '4999',
      'x-ratelimit-resource': 'core',
      ...reply.headers,
    };
    if (reply.body === undefined) {
      res.writeHead(reply.status, headers).end();
      return;
    }
    const text = JSON.stringify(reply.body);
    res.writeHead(reply.status, { ...headers, 'content-type': 'application/json; charset=utf-8', 'content-length': String(Buffer.byteLength(text)) }).end(text);
  }

  function authorized(header: string | undefined): boolean {
    const m = /^(token|bearer)\s+(.+)$/i.exec(header ?? '');
    return m?.[2] === token;
  }

  function takeInjection(method: string, rawPath: string): Injection | undefined {
    const i = injections.findIndex((x) => x.method === method && x.path.test(rawPath));
    return i === -1 ? undefined : injections.splice(i, 1)[0];
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const method = (req.method ?? 'GET').toUpperCase();
    const url = new URL(req.url ?? '/', 'http://127.0.0.1');
    const rawPath = url.pathname;
    const query: Record<string, string> = {};
    for (const [k, v] of url.searchParams) query[k] = v;
    const raw = await readBody(req);
    const matched = matchRoute(method, rawPath);
    const record: RecordedRequest = {
      seq: requests.length + 1,
      method,
      path: rawPath,
      query,
      operation: matched?.route.template ?? null,
      params: matched?.params ?? {},
      body: undefined,
      status: 0,
      response: undefined,
      injected: false,
    };
    requests.push(record);
    const where = `${method} ${rawPath}`;

    const finish = (reply: Reply): void => {
      record.status = reply.status;
      record.response = reply.body;
      if (matched) {
        const errs = validateResponse(method, matched.route.template, reply.status, reply.body);
        if (errs.length > 0) violations.push(`${where} -> ${reply.status}: response body does not match the OpenAPI schema: ${errs.join('; ')}`);
      }
      send(res, reply);
    };

    try {
      let body: unknown;
      let badJson = false;
      if (raw.length > 0) {
        try {
          body = JSON.parse(raw.toString('utf8'));
        } catch {
          badJson = true;
        }
      }
      record.body = body;

      // GitHub authenticates before it looks at anything else.
      if (!authorized(req.headers.authorization)) {
        throw fail(401, req.headers.authorization ? 'Bad credentials' : 'Requires authentication');
      }
      if (badJson) {
        if (matched) violations.push(`${where}: request body is not JSON`);
        throw fail(400, 'Problems parsing JSON');
      }
      if (!matched) throw fail(404, 'Not Found');

      const template = matched.route.template;
      const bodyErrors = validateRequestBody(method, template, body);
      if (bodyErrors.length > 0) violations.push(`${where}: request body does not match the OpenAPI schema: ${bodyErrors.join('; ')}`);
      const queryErrors = validateQuery(method, template, query);
      if (queryErrors.length > 0) violations.push(`${where}: query does not match the OpenAPI schema: ${queryErrors.join('; ')}`);

      const injection = takeInjection(method, rawPath);
      if (injection && injection.status === 0) {
        record.injected = true;
        req.socket.destroy();
        return;
      }
      const injected = (): Reply => {
        record.injected = true;
        const status = injection?.status ?? 500;
        return { status, body: injection?.body ?? { message: `Injected failure (${status})`, documentation_url: DOCS, status: String(status) } };
      };
      if (injection && !injection.apply) return finish(injected());

      const repoState = repos.get(`${matched.params.owner ?? ''}/${matched.params.repo ?? ''}`.toLowerCase());
      if (!repoState) throw fail(404, 'Not Found');
      if (bodyErrors.length > 0) throw fail(422, `Invalid request.\n\n${bodyErrors.join('\n')}`);

      const reply = await dispatch(template, method, repoState, matched.params, query, body);
      finish(injection ? injected() : reply);
    } catch (err) {
      if (err instanceof HttpError) return finish({ status: err.status, body: err.body });
      if (err instanceof z.ZodError) return finish({ status: 422, body: { message: `Invalid request.\n\n${err.message}`, documentation_url: DOCS, status: '422' } });
      // A bug in the double: make it loud.
      const message = err instanceof Error ? err.message : String(err);
      violations.push(`${where}: internal error in the GitHub double: ${message}`);
      finish({ status: 500, body: { message, documentation_url: DOCS, status: '500' } });
    }
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      violations.push(`internal error in the GitHub double: ${err instanceof Error ? err.message : String(err)}`);
      if (!res.headersSent) res.writeHead(500).end();
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  return {
    baseUrl,
    token,
    requests,
    pulls,
    violations,
    failNext(method, pathPattern, status, body, opts) {
      injections.push({ method: method.toUpperCase(), path: pathPattern, status, body, apply: opts?.apply ?? false });
    },
    assertNoViolations() {
      if (violations.length > 0) throw new Error(`GitHub double recorded ${violations.length} violation(s):\n${violations.join('\n')}`);
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
