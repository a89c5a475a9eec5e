/**
 * The administration API and CLI against the real stack (Temporal dev server, database,
 * worker, ingress, scripted model): identities, bindings, pairing approvals and action
 * approvals; bad input is refused with a clear error and changes nothing.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { randomInt, randomUUID } from 'node:crypto';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { createDb } from '../../domain/db.js';
import { bindChat } from '../../domain/governance.js';
import { OpenAPIHono } from '@hono/zod-openapi';
import { registerAdminRoutes } from '../../adapters/http/admin.js';
import { createHttpApp, startHttpServer } from '../../adapters/http/app.js';
import type { Ingress } from '../../services/chat/intake.js';
import { loadConfig } from '../../config/index.js';
import { adminCommand } from '../../platform/admin-cli.js';
import { recordingSender } from '../helpers/recording-sender.js';
import { useStack, withHarness } from '../helpers/steward.js';

const TOKEN = 'admin-test-token-0123456789';
const uid = () => String(randomInt(100_000_000, 999_999_999));

describe('administration API and CLI', () => {
  const stack = useStack();

  it('manages identities and bindings, refusing bad input without changing anything', async () => {
    await withHarness({ env: stack.env, db: stack.db, providers: {} }, async (h) => {
      const server = await startHttpServer(createHttpApp({ ingress: h.ingress, apiToken: TOKEN, health: async () => ({ ok: true, checks: {} }), admin: { db: stack.db } }), { host: '127.0.0.1', port: 0 });
      const api = (method: string, route: string, body?: unknown, headers: Record<string, string> = {}) =>
        fetch(`${server.url}${route}`, {
          method,
          headers: { authorization: `Bearer ${TOKEN}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...headers },
          ...(body !== undefined ? { body: typeof body === 'string' ? body : JSON.stringify(body) } : {}),
        });
      try {
        const before = await stack.db.identity.count();
        assert.equal((await fetch(`${server.url}/api/v1/identities`)).status, 401);
        for (const bad of [
          { name: 'X', role: 'king', accounts: [{ platform: 'telegram', userId: '1' }] },
          { name: 'X', role: 'admin', accounts: [] },
          { name: 'X', role: 'admin', accounts: [{ platform: 'http', userId: '1' }] },
          { name: 'X', role: 'admin', accounts: [{ platform: 'telegram', userId: 'a b' }] },
          { name: 'X', role: 'admin', accounts: [{ platform: 'telegram', userId: '1' }], extra: true },
        ]) {
          const r = await api('POST', '/api/v1/identities', bad);
          assert.equal(r.status, 400, JSON.stringify(bad));
          assert.match(((await r.json()) as { error: string }).error, /invalid request/);
        }
        assert.equal((await api('POST', '/api/v1/identities', '{not json')).status, 400);
        assert.equal((await api('POST', '/api/v1/identities', 'name=x', { 'content-type': 'text/plain' })).status, 415);
        assert.equal(await stack.db.identity.count(), before, 'nothing was created');

        const tgId = uid();
        const created = await api('POST', '/api/v1/identities', { name: 'Olive', role: 'overlord', accounts: [{ platform: 'telegram', userId: tgId }] });
        assert.equal(created.status, 201);
        const olive = (await created.json()) as { id: string; role: string; accounts: Array<{ userId: string }> };
        assert.equal(olive.role, 'overlord');
        const dup = await api('POST', '/api/v1/identities', { name: 'Copy', role: 'member', accounts: [{ platform: 'telegram', userId: tgId }] });
        assert.equal(dup.status, 409);
        const patched = await api('PATCH', `/api/v1/identities/${olive.id}`, { role: 'admin' });
        assert.equal(((await patched.json()) as { role: string }).role, 'admin');
        const change = await stack.db.receipt.findFirstOrThrow({ where: { kind: 'identity.change', data: { contains: '"update"' } }, orderBy: { id: 'desc' } });
        assert.deepEqual((JSON.parse(change.data) as { before: unknown; after: unknown }).before, { name: 'Olive', role: 'overlord' });
        const list = (await (await api('GET', '/api/v1/identities')).json()) as { identities: Array<{ id: string }> };
        assert.ok(list.identities.some((i) => i.id === olive.id));

        const badBinding = await api('POST', '/api/v1/bindings', { platform: 'telegram', chatId: 'bad id!' });
        assert.equal(badBinding.status, 400);
        const chatId = `-100${uid()}`;
        const bound = await api('POST', '/api/v1/bindings', { platform: 'telegram', chatId, mode: 'all', name: `room${uid()}`, adminChannel: true });
        assert.equal(bound.status, 201);
        const b = (await bound.json()) as { id: string; account: string; mode: string; adminChannel: boolean };
        assert.deepEqual([b.account, b.mode, b.adminChannel], ['*', 'all', true]);
        assert.equal((await api('DELETE', `/api/v1/bindings/nope`)).status, 404);
        assert.equal((await api('DELETE', `/api/v1/bindings/${b.id}`)).status, 200);
        assert.equal(await stack.db.binding.count({ where: { id: b.id } }), 0);
        assert.equal((await api('DELETE', `/api/v1/identities/${olive.id}`)).status, 200);
        assert.equal(await stack.db.platformAccount.count({ where: { userId: tgId } }), 0);
      } finally {
        await server.close();
      }
    });
  });

  it('approves pairing codes and waiting actions through the API and the CLI, once', async () => {
    const sender = recordingSender();
    await withHarness({ env: stack.env, db: stack.db, providers: { openaiCompatible: { baseURL: stack.model.baseURL } }, senders: { telegram: sender } }, async (h) => {
      const server = await startHttpServer(createHttpApp({ ingress: h.ingress, apiToken: TOKEN, health: async () => ({ ok: true, checks: {} }), admin: { db: stack.db } }), { host: '127.0.0.1', port: 0 });
      const out: string[] = [];
      const err: string[] = [];
      const io = { config: () => loadConfig({}, tmpdir()), out: (s: string) => void out.push(s), err: (s: string) => void err.push(s), api: { url: server.url, token: TOKEN } };
      const account = `bot${uid()}`;
      const tg = (userId: string, name: string, text: string) =>
        h.ingress.handle({ id: randomUUID(), platform: 'telegram', account, chatId: userId, chatType: 'dm', user: name, userId, text, at: new Date().toISOString() });
      try {
        const newcomer = uid();
        const r = await tg(newcomer, 'Pia', '/pair');
        const code = /code is ([A-Z2-9]{8})/.exec(r.reply ?? '')?.[1];
        assert.ok(code);
        assert.equal(await adminCommand('pairing', ['approve', code, 'emperor'], io), 2, 'a bad role is a usage error');
        assert.match(err.join(''), /ROLE: a role is one of/);
        assert.equal(await adminCommand('pairing', ['list'], io), 0);
        assert.match(out.join(''), /Pia/);
        assert.equal(await adminCommand('pairing', ['approve', code, 'member'], io), 0);
        assert.match(out.join(''), /Pia \(telegram user \d+\): approved as member/);
        assert.equal(await adminCommand('pairing', ['approve', code, 'member'], io), 1, 'a code works once');
        assert.match(err.join(''), /cannot be used again/);
        await sender.waitForPost((p) => p.chatId === newcomer && p.text.startsWith('You are paired'));

        const name = `dest${uid()}`;
        await bindChat(stack.db, { platform: 'telegram', account, chatId: `-100${uid()}`, name, createdBy: 'test' });
        stack.model.enqueue({ toolCalls: [{ id: 'call_api', name: 'post_to_chat', arguments: JSON.stringify({ chat: name, text: 'via the API' }) }] });
        stack.model.enqueue({ text: 'done via API' });
        await tg(newcomer, 'Pia', 'post via the api');
        const deadline = Date.now() + 20_000;
        let pending: Array<{ id: string; summary: string }> = [];
        while (pending.length === 0 && Date.now() < deadline) {
          const list = (await (await fetch(`${server.url}/api/v1/approvals?status=pending`, { headers: { authorization: `Bearer ${TOKEN}` } })).json()) as { approvals: Array<{ id: string; summary: string; sessionId: string }> };
          pending = list.approvals.filter((a) => a.summary.includes('via the API'));
          if (pending.length === 0) await new Promise((res) => setTimeout(res, 50));
        }
        const id = pending[0]?.id;
        assert.ok(id, 'the approval is listed as pending');
        assert.equal(await adminCommand('approvals', ['list'], io), 0);
        assert.match(out.join(''), new RegExp(id));
        assert.equal(await adminCommand('approvals', ['approve', id], io), 0);
        assert.match(out.join(''), /Approved/);
        const again = await fetch(`${server.url}/api/v1/approvals/${id}/approve`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` } });
        assert.equal(again.status, 409);
        assert.match(((await again.json()) as { error: string }).error, /already approved by the operator/);
        await sender.waitForPost((p) => p.chatId === newcomer && p.text === 'done via API');
        assert.equal((await stack.db.approval.findUniqueOrThrow({ where: { id } })).decidedBy, 'the operator');
        assert.equal((await fetch(`${server.url}/api/v1/approvals/zzzzzz/deny`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` } })).status, 404);
      } finally {
        await server.close();
      }
    });
  });

  it('adds the first overlord and bindings from the CLI without a running Steward', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'steward-cli-'));
    const url = `file:${path.join(dir, 'cli.db')}`;
    const out: string[] = [];
    const err: string[] = [];
    const io = { config: () => loadConfig({ DATABASE_URL: url, STEWARD_DATA_DIR: dir }, dir), out: (s: string) => void out.push(s), err: (s: string) => void err.push(s) };
    try {
      assert.equal(await adminCommand('identities', ['add', '--name', 'Root', '--role', 'overlord'], io), 2);
      assert.match(err.join(''), /at least one account/);
      assert.equal(await adminCommand('identities', ['add', '--name', 'Root', '--role', 'overlord', '--telegram', 'abc'], io), 2);
      assert.equal(await adminCommand('identities', ['add', '--name', 'Root', '--role', 'overlord', '--telegram', '4242', '--discord', '123456789012345678'], io), 0);
      assert.equal(await adminCommand('identities', ['add', '--name', 'Again', '--role', 'member', '--telegram', '4242'], io), 1);
      assert.equal(await adminCommand('bindings', ['add', '--platform', 'telegram', '--chat=-1001', '--mode', 'sometimes'], io), 2);
      assert.equal(await adminCommand('bindings', ['add', '--platform', 'telegram', '--chat=-1001', '--mode', 'all', '--name', 'ops', '--admin-channel'], io), 0);
      assert.equal(await adminCommand('identities', ['list'], io), 0);
      assert.equal(await adminCommand('bindings', ['list'], io), 0);
      assert.match(out.join(''), /Root\s+overlord\s+telegram:4242 discord:123456789012345678/);
      assert.match(out.join(''), /telegram\s+\*\s+-1001\s+all\s+ops\s+yes/);
      assert.equal(await adminCommand('shells', ['issue', 'kiosk', '--role', 'emperor'], io), 2);
      assert.equal(await adminCommand('shells', ['issue', 'kiosk', '--role', 'member'], io), 0);
      const token = /\n(oh_[A-Za-z0-9_-]{40,})\n/.exec(out.join(''))?.[1];
      assert.ok(token, 'the token is printed once');
      assert.equal(await adminCommand('shells', ['list'], io), 0);
      assert.doesNotMatch(out.slice(-1).join(''), /oh_/, 'list never shows tokens');
      assert.match(out.slice(-1).join(''), /kiosk/);
      assert.equal(await adminCommand('shells', ['revoke', 'kiosk'], io), 0);
      assert.equal(await adminCommand('shells', ['revoke', 'nobody'], io), 1);
      const db = createDb(url);
      try {
        assert.equal(await db.identity.count(), 2, 'the overlord and the shell');
        const shell = await db.shellToken.findFirstOrThrow({ where: { name: 'kiosk' } });
        assert.notEqual(shell.tokenHash, token);
        assert.ok(shell.revokedAt);
        assert.equal(await db.receipt.count({ where: { kind: 'identity.change' } }), 1);
      } finally {
        await db.$disconnect();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('writes the same receipts from the API and the CLI: both call the administration service', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'steward-cli-'));
    const url = `file:${path.join(dir, 'same.db')}`;
    const io = { config: () => loadConfig({ DATABASE_URL: url, STEWARD_DATA_DIR: dir }, dir), out: () => undefined, err: () => undefined };
    try {
      // the CLI first (it migrates the database), then the HTTP admin routes on the same database
      assert.equal(await adminCommand('identities', ['add', '--name', 'Cli', '--role', 'member', '--telegram', '111'], io), 0);
      assert.equal(await adminCommand('bindings', ['add', '--platform', 'telegram', '--chat=-2001'], io), 0);
      const db = createDb(url);
      const app = new OpenAPIHono();
      // the identity and binding routes never reach the intake (pairing and approval decisions do)
      registerAdminRoutes(app, { db, ingress: {} as Ingress });
      const api = (method: string, route: string, body?: unknown) => app.request(route, { method, ...(body !== undefined ? { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) } : {}) });
      try {
        const cli = await db.identity.findFirstOrThrow({ where: { name: 'Cli' } });
        const cliBinding = await db.binding.findFirstOrThrow({ where: { chatId: '-2001' } });
        assert.equal(await adminCommand('identities', ['set-role', cli.id, 'admin'], io), 0);
        assert.equal(await adminCommand('bindings', ['remove', cliBinding.id], io), 0);
        assert.equal(await adminCommand('identities', ['remove', cli.id], io), 0);
        const made = (await (await api('POST', '/api/v1/identities', { name: 'Api', role: 'member', accounts: [{ platform: 'telegram', userId: '222' }] })).json()) as { id: string };
        const bound = (await (await api('POST', '/api/v1/bindings', { platform: 'telegram', chatId: '-2002' })).json()) as { id: string };
        assert.equal((await api('PATCH', `/api/v1/identities/${made.id}`, { role: 'admin' })).status, 200);
        assert.equal((await api('DELETE', `/api/v1/bindings/${bound.id}`)).status, 200);
        assert.equal((await api('DELETE', `/api/v1/identities/${made.id}`)).status, 200);
        const receipts = await db.receipt.findMany({ where: { kind: { in: ['identity.change', 'binding.change'] } }, orderBy: { id: 'asc' } });
        const shape = (actor: string) =>
          receipts
            .filter((r) => r.actor === actor)
            .map((r) => {
              const data = JSON.parse(r.data) as Record<string, unknown>;
              return `${r.kind} ${String(data.action)}: ${Object.keys(data).sort().join(',')}`;
            })
            .sort();
        assert.equal(shape('cli').length, 5);
        assert.deepEqual(shape('cli'), shape('operator'));
        const update = receipts.find((r) => r.actor === 'cli' && r.data.includes('"update"'))!;
        assert.deepEqual(JSON.parse(update.data), { action: 'update', identityId: cli.id, before: { name: 'Cli', role: 'member' }, after: { name: 'Cli', role: 'admin' } });
        const unbind = receipts.find((r) => r.actor === 'cli' && r.data.includes('"unbind"'))!;
        assert.deepEqual(JSON.parse(unbind.data), { action: 'unbind', id: cliBinding.id, platform: 'telegram', chatId: '-2001' });
      } finally {
        await db.$disconnect();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
