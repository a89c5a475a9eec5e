/**
 * Workspace reads refuse dot segments (issue 32, finding 4): an operator-named folder such as a
 * repository checkout keeps credentials in `.env` and `.git/config`. One path rule
 * (domain/knowledge/paths.ts) serves every reader; this test goes through each surface that
 * reads a file (the /open command, the API's file route, the CLI over it, the model's
 * read_workspace_file tool) and the indexer, with real files, a real stack and a scripted model:
 * none of them returns a dot file's bytes, not even through a link whose name has no dot.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createHttpApp, startHttpServer } from '../../adapters/http/app.js';
import { loadConfig } from '../../config/index.js';
import { closeKnowledgeIndexes, knowledgeIndexOpener } from '../../domain/knowledge/open.js';
import { adminCommand } from '../../platform/admin-cli.js';
import { testDatabases } from '../helpers/db.js';
import { useStack, waitFor, withHarness } from '../helpers/steward.js';

const SECRET = 'dotfile-secret-value-7f3a91c2';
/** Each hidden path, and how it may be asked for. */
const HIDDEN = ['.env', './.env', '.git/config', 'notes/.draft.md', '.github/notes.md', 'env-link.md', 'gitdir/config'];

for (const kind of testDatabases().slice(0, 1)) {
  describe(`workspace reads refuse dot segments (${kind.name})`, () => {
    after(() => closeKnowledgeIndexes());
    const stack = useStack(kind);
    let dataDir: string;
    let root: string;
    before(() => {
      dataDir = mkdtempSync(path.join(tmpdir(), 'steward-dot-data-'));
      // an operator-named folder: a repository checkout with its credentials
      root = mkdtempSync(path.join(tmpdir(), 'steward-dot-checkout-'));
      mkdirSync(path.join(root, '.git'));
      mkdirSync(path.join(root, '.github'));
      mkdirSync(path.join(root, 'notes'));
      writeFileSync(path.join(root, '.env'), `API_KEY=${SECRET}\n`);
      writeFileSync(path.join(root, '.git', 'config'), `[remote "origin"]\n\turl = https://x:${SECRET}@example.com/r.git\n`);
      writeFileSync(path.join(root, 'notes', '.draft.md'), `# Draft\n${SECRET}\n`);
      writeFileSync(path.join(root, '.github', 'notes.md'), `# CI\n${SECRET}\n`);
      writeFileSync(path.join(root, 'guide.md'), '# Guide\nThe rollback job restores the previous image.\n');
      // links without a dot in their own name, to a dot file and a dot folder inside the workspace
      symlinkSync(path.join(root, '.env'), path.join(root, 'env-link.md'));
      symlinkSync(path.join(root, '.git'), path.join(root, 'gitdir'));
    });
    after(() => {
      rmSync(dataDir, { recursive: true, force: true });
      rmSync(root, { recursive: true, force: true });
    });

    it('/open, the API file route, the CLI and read_workspace_file refuse every dot segment; the index holds none', { timeout: 120_000 }, async () => {
      const knowledge = knowledgeIndexOpener(stack.database.url, dataDir);
      await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, workspaces: { dataDir, knowledge } }, async (h) => {
        const TOKEN = 'dotfiles-test-token-0123456789';
        const server = await startHttpServer(createHttpApp({ ingress: h.ingress, apiToken: TOKEN, health: async () => ({ ok: true, checks: {} }), workspaces: h.workspaces!, account: h.account }), { host: '127.0.0.1', port: 0 });
        const api = async (method: string, route: string, body?: unknown) => {
          const r = await fetch(`${server.url}${route}`, { method, headers: { authorization: `Bearer ${TOKEN}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) }, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
          return { status: r.status, text: await r.text() };
        };
        const out: string[] = [];
        const err: string[] = [];
        const io = { config: () => loadConfig({}, tmpdir()), out: (x: string) => void out.push(x), err: (x: string) => void err.push(x), api: { url: server.url, token: TOKEN } };
        try {
          const name = `checkout-${kind.name}`;
          assert.equal((await api('POST', '/api/v1/workspaces', { name, folder: root })).status, 201);
          assert.equal((await api('POST', `/api/v1/workspaces/${name}/chats`, { chatId: h.chatId, account: h.account })).status, 200);
          await waitFor(async () => /1 documents/.test((await h.send('/workspace show')).reply ?? ''), 'the indexing run', 60_000);

          // the command
          assert.match((await h.send('/open guide.md')).reply ?? '', /^guide\.md \(\d+ bytes\)\n\n# Guide/);
          for (const p of HIDDEN) {
            const reply = (await h.send(`/open ${p}`)).reply ?? '';
            assert.match(reply, /dot segment|hidden file or folder/, `${p}: ${reply}`);
            assert.ok(!reply.includes(SECRET), p);
          }
          // the API's file route
          assert.equal((await api('GET', `/api/v1/workspaces/${name}/file?path=guide.md`)).status, 200);
          for (const p of HIDDEN) {
            const r = await api('GET', `/api/v1/workspaces/${name}/file?path=${encodeURIComponent(p)}`);
            assert.equal(r.status, 400, `${p}: ${r.text}`);
            assert.ok(!r.text.includes(SECRET), p);
          }
          // the CLI, through the API
          assert.equal(await adminCommand('workspaces', ['open', name, '.git/config'], io), 2);
          assert.match(err.join(''), /dot segment/);
          assert.ok(!out.join('').includes(SECRET));
          // the index: a search for the secret finds nothing, a dot file was never read
          const found = await api('GET', `/api/v1/workspaces/${name}/search?q=${SECRET}`);
          assert.equal(found.status, 200, found.text);
          assert.deepEqual((JSON.parse(found.text) as { hits: unknown[] }).hits, []);

          // the model's tool: each hidden path is refused, the secret never reaches the next request
          stack.model.enqueue({ toolCalls: HIDDEN.map((p, i) => ({ id: `call_${i}`, name: 'read_workspace_file', arguments: JSON.stringify({ path: p }) })) });
          stack.model.enqueue({ text: 'Nothing hidden was read.' });
          await h.send('Read the .env and .git/config of this checkout');
          await h.waitForMessage((m) => m.role === 'assistant' && m.text === 'Nothing hidden was read.', { timeoutMs: 30_000 });
          const last = JSON.stringify(stack.model.requests.at(-1)!.body);
          assert.equal(last.match(/"content":"Not read: .*?(has a dot segment|is a link to a hidden file or folder)/g)?.length, HIDDEN.length, last);
          assert.ok(!last.includes(SECRET), 'no dot file reached the model');
          const calls = (await stack.db.receipt.findMany({ where: { kind: 'tool.call' } })).map((r) => JSON.parse(r.data) as { tool: string; ok: boolean }).filter((d) => d.tool === 'read_workspace_file');
          assert.deepEqual(calls.map((c) => c.ok), HIDDEN.map(() => false));
          const receipts = JSON.stringify(await stack.db.receipt.findMany());
          assert.ok(!receipts.includes(SECRET), 'no receipt holds a dot file');
        } finally {
          await server.close();
        }
      });
    });
  });
}
