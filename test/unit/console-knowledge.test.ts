/**
 * The console's Knowledge and tools page over its real routes (adapters/console/knowledge.tsx)
 * on a Steward whose knowledge features are off: the page says so for each part, its sub-pages
 * are 404, and its actions are refused (409) after the sign-in and CSRF checks; and Reindex asked
 * by a member signed in, refused by the workspace service's role rule (real SQLite, the real
 * service; its Temporal connection is never used). The page with the real services and the
 * operator is tested in a browser (test/e2e/console-knowledge.test.ts).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { Client, Connection } from '@temporalio/client';
import { Hono } from 'hono';
import type { Actor } from '../../common/roles.js';
import { closeKnowledgeIndexes, knowledgeIndexOpener } from '../../domain/knowledge/open.js';
import { insertWorkspace } from '../../domain/store/workspaces.js';
import { createWorkspaceService } from '../../services/workspaces.js';
import { testDatabases } from '../helpers/db.js';
import { createConsoleRoutes } from '../../adapters/console/app.js';
import { csrfToken } from '../../adapters/console/security.js';
import { BrowserSignIn, SIGN_IN_COOKIE } from '../../adapters/http/sign-in.js';
import type { ConsoleChats } from '../../services/console.js';

const TOKEN = 'console-knowledge-token-0123456789abcdef';

function setup(more: { services?: Parameters<typeof createConsoleRoutes>[0]['services']; actor?: Actor } = {}) {
  const chats: ConsoleChats = {
    list: async () => [],
    transcript: async () => [],
    status: async (chatId) => ({ workflowId: chatId, exists: false, running: null, queueLength: 0, model: 'm', think: 'off', tokens: { input: 0, output: 0, total: 0 }, turns: 0 }),
    stop: async (chatId) => ({ workflowId: chatId, kind: 'command', duplicate: false }),
    steer: async (chatId) => ({ workflowId: chatId, kind: 'command', duplicate: false }),
  };
  const signIn = new BrowserSignIn({ apiToken: TOKEN });
  const app = new Hono();
  app.route('/', createConsoleRoutes({ apiToken: TOKEN, signIn, chats, services: more.services ?? {}, ...(more.actor ? { actorOf: () => more.actor! } : {}) }));
  const cookie = signIn.cookieValue();
  const csrf = csrfToken(TOKEN, cookie);
  const req = (path: string, init: RequestInit = {}) => {
    const headers = new Headers(init.headers);
    headers.set('cookie', `${SIGN_IN_COOKIE}=${cookie}`);
    return app.request(`http://127.0.0.1${path}`, { ...init, headers });
  };
  return { req, csrf };
}

describe('console: the Knowledge and tools page with its features off', () => {
  it('says for each part that it is not enabled', async () => {
    const { req } = setup();
    const res = await req('/console/knowledge');
    assert.equal(res.status, 200);
    const html = await res.text();
    for (const part of ['Workspaces', 'Skills', 'Memories', 'MCP servers', 'Heartbeat checks']) assert.match(html, new RegExp(`${part} are not enabled on this Steward`), part);
    assert.match(html, /aria-current="page"[^>]*>\s*Knowledge/);
  });

  it('has no sub-pages (404) and refuses its actions (409, or 403 without the CSRF token)', async () => {
    const { req, csrf } = setup();
    assert.equal((await req('/console/knowledge/workspaces/docs')).status, 404);
    assert.equal((await req('/console/knowledge/mcp/every')).status, 404);
    assert.equal((await req('/console/knowledge/workspaces/docs/reindex', { method: 'POST' })).status, 403);
    const reindex = await req('/console/knowledge/workspaces/docs/reindex', { method: 'POST', headers: { 'x-csrf-token': csrf, 'hx-request': 'true' } });
    assert.equal(reindex.status, 409);
    assert.match(await reindex.text(), /Refused: workspaces are not enabled/);
    const forget = await req('/console/knowledge/memories/m-12345678/forget', { method: 'POST', headers: { 'x-csrf-token': csrf } });
    assert.equal(forget.status, 409);
    assert.match(await forget.text(), /Refused: memories are not enabled/);
  });
});

describe('console: Reindex by the role rule of /workspace reindex', () => {
  it('a member signed in is refused by the workspace service (409, in place and as a page); nothing is asked of Temporal', async () => {
    const tdb = await testDatabases()[0]!.create();
    const dataDir = mkdtempSync(path.join(tmpdir(), 'steward-console-kb-unit-'));
    // a connection to a closed port: any use of it would fail with a connection error, not a 409
    const connection = Connection.lazy({ address: '127.0.0.1:1' });
    try {
      assert.ok(await insertWorkspace(tdb.db, { name: 'docs', root: path.join(dataDir, 'docs'), createdBy: 'test' }));
      const workspaces = createWorkspaceService({ db: tdb.db, client: new Client({ connection }), taskQueue: 'steward-background', dataDir, knowledge: knowledgeIndexOpener(tdb.url, dataDir) });
      const member: Actor = { kind: 'person', id: 'identity-mia', name: 'Mia', role: 'member' };
      const { req, csrf } = setup({ services: { workspaces }, actor: member });
      const inPlace = await req('/console/knowledge/workspaces/docs/reindex', { method: 'POST', headers: { 'x-csrf-token': csrf, 'hx-request': 'true' } });
      assert.equal(inPlace.status, 409);
      assert.match(await inPlace.text(), /Refused: reindexing a workspace needs the admin role \(as \/workspace reindex\)/);
      const plain = await req('/console/knowledge/workspaces/docs/reindex', { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ _csrf: csrf }).toString() });
      assert.equal(plain.status, 409);
      assert.match(await plain.text(), /<h1>Refused<\/h1>[\s\S]*needs the admin role/);
      // the same rule without the console
      await assert.rejects(workspaces.reindexAs('docs', member), (err: Error & { status?: number }) => err.status === 409);
    } finally {
      await connection.close().catch(() => undefined);
      await closeKnowledgeIndexes();
      await tdb.cleanup();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
