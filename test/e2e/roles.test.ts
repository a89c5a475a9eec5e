/**
 * Process roles against "any Temporal cluster": a second dev server started here on another
 * namespace (`steward-ops`, without Steward's search attributes), reached only through a
 * TLS-terminating proxy that demands a client certificate (mutual TLS, as a self-hosted
 * cluster or Temporal Cloud's mTLS endpoint would). `steward api` serves the HTTP API without
 * workers; two `steward worker` processes poll the interactive+background and the repo
 * queues, the first from a prebuilt workflow bundle. A message goes in through the API and
 * its reply comes back; the session (its turn inside it) lives in the configured namespace.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect as netConnect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { createServer as createTlsServer, type Server as TlsServer, type TLSSocket } from 'node:tls';
import { Client, Connection } from '@temporalio/client';
import protoModule from '@temporalio/proto';
import { DEV_SERVER_DYNAMIC_CONFIG, findTemporalCli, indexedValueTypeName, SEARCH_ATTRIBUTES } from '../../platform/temporal-server.js';
import { testDatabases } from '../helpers/db.js';
import { startModelServer, type ModelServer } from '../helpers/model-server.js';
import { freePort, repoRoot, spawnProcess, type Spawned } from '../helpers/process.js';
import { needs } from '../helpers/requirements.js';

const TOKEN = 'roles-token-0123456789abcdef';
const NAMESPACE = 'steward-ops';
const database = testDatabases().at(-1)!; // PostgreSQL when available: several processes share it
const { IndexedValueType } = protoModule.temporal.api.enums.v1;

/** A CA, a server certificate for 127.0.0.1 / temporal.test and a client certificate, by openssl. */
function makeCertificates(dir: string): { ca: string; serverCert: string; serverKey: string; clientCert: string; clientKey: string } {
  const f = (name: string) => path.join(dir, name);
  const run = (...args: string[]) => execFileSync('openssl', args, { stdio: 'pipe' });
  run('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', f('ca.key'), '-out', f('ca.pem'), '-days', '2', '-subj', '/CN=steward-test-ca');
  writeFileSync(f('server.ext'), 'subjectAltName=IP:127.0.0.1,DNS:temporal.test\nextendedKeyUsage=serverAuth\n');
  run('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', f('server.key'), '-out', f('server.csr'), '-subj', '/CN=temporal.test');
  run('x509', '-req', '-in', f('server.csr'), '-CA', f('ca.pem'), '-CAkey', f('ca.key'), '-CAcreateserial', '-out', f('server.pem'), '-days', '2', '-extfile', f('server.ext'));
  writeFileSync(f('client.ext'), 'extendedKeyUsage=clientAuth\n');
  run('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', f('client.key'), '-out', f('client.csr'), '-subj', '/CN=steward-worker');
  run('x509', '-req', '-in', f('client.csr'), '-CA', f('ca.pem'), '-CAkey', f('ca.key'), '-CAcreateserial', '-out', f('client.pem'), '-days', '2', '-extfile', f('client.ext'));
  return { ca: f('ca.pem'), serverCert: f('server.pem'), serverKey: f('server.key'), clientCert: f('client.pem'), clientKey: f('client.key') };
}

/** TLS in front of a plaintext gRPC port: HTTP/2 over TLS (ALPN h2) becomes h2c behind it. */
function startTlsProxy(opts: { port: number; target: number; cert: string; key: string; ca: string }) {
  const stats = { authorized: 0, refused: 0 };
  const sockets = new Set<Socket>();
  const server: TlsServer = createTlsServer(
    {
      cert: readFileSync(opts.cert),
      key: readFileSync(opts.key),
      ca: readFileSync(opts.ca),
      requestCert: true,
      rejectUnauthorized: true,
      ALPNProtocols: ['h2'],
    },
    (tls: TLSSocket) => {
      stats.authorized += 1;
      const upstream = netConnect(opts.target, '127.0.0.1');
      sockets.add(tls);
      sockets.add(upstream);
      tls.pipe(upstream).pipe(tls);
      const close = () => {
        tls.destroy();
        upstream.destroy();
      };
      tls.on('error', close);
      upstream.on('error', close);
      tls.on('close', () => sockets.delete(tls));
      upstream.on('close', () => sockets.delete(upstream));
    },
  );
  server.on('tlsClientError', () => (stats.refused += 1));
  return new Promise<{ stats: typeof stats; close(): Promise<void> }>((resolve) => {
    server.listen(opts.port, '127.0.0.1', () =>
      resolve({
        stats,
        close: () =>
          new Promise<void>((done) => {
            for (const s of sockets) s.destroy();
            server.close(() => done());
          }),
      }),
    );
  });
}

describe('process roles on another cluster and namespace (mutual TLS)', { skip: await needs('openssl') }, () => {
  let dir: string;
  let server: ChildProcess | undefined;
  let serverPort: number;
  let proxy: Awaited<ReturnType<typeof startTlsProxy>>;
  let model: ModelServer;
  let dbh: Awaited<ReturnType<typeof database.create>>;
  let api: Spawned | undefined;
  const workers: Spawned[] = [];
  let apiUrl: string;
  let certs: ReturnType<typeof makeCertificates>;
  let env: NodeJS.ProcessEnv;
  const queue = `roles-${Date.now().toString(36)}`;

  before(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'steward-roles-'));
    certs = makeCertificates(dir);
    const cli = findTemporalCli();
    assert.ok(cli, 'the temporal CLI is installed');
    serverPort = await freePort();
    // a second dev server: namespace steward-ops only, and none of Steward's search attributes
    server = spawn(
      cli,
      [
        'server', 'start-dev', '--headless', '--ip', '127.0.0.1', '--port', String(serverPort),
        '--http-port', String(await freePort()), '--metrics-port', String(await freePort()),
        '--namespace', NAMESPACE, '--db-filename', path.join(dir, 'temporal.db'),
        ...DEV_SERVER_DYNAMIC_CONFIG.flatMap((v) => ['--dynamic-config-value', v]),
      ],
      { stdio: 'ignore' },
    );
    for (let i = 0; i < 300; i++) {
      try {
        const c = await Connection.connect({ address: `127.0.0.1:${serverPort}`, connectTimeout: 1000 });
        await c.workflowService.describeNamespace({ namespace: NAMESPACE });
        await c.close();
        break;
      } catch {
        await sleep(200);
      }
    }
    const proxyPort = await freePort();
    proxy = await startTlsProxy({ port: proxyPort, target: serverPort, cert: certs.serverCert, key: certs.serverKey, ca: certs.ca });
    model = await startModelServer();
    dbh = await database.create();
    const dataDir = path.join(dir, 'data');
    mkdirSync(dataDir);
    env = {
      ...process.env,
      STEWARD_DATA_DIR: dataDir,
      STEWARD_API_TOKEN: TOKEN,
      STEWARD_MODEL: 'openai-compatible:roles-model',
      STEWARD_MODEL_BASE_URL: model.baseURL,
      STEWARD_LOG_LEVEL: 'warn',
      DATABASE_URL: dbh.url,
      TEMPORAL_ADDRESS: `127.0.0.1:${proxyPort}`,
      TEMPORAL_NAMESPACE: NAMESPACE,
      TEMPORAL_TLS: 'true',
      TEMPORAL_TLS_CA: certs.ca,
      TEMPORAL_TLS_CERT: certs.clientCert,
      TEMPORAL_TLS_KEY: certs.clientKey,
      TEMPORAL_TLS_SERVER_NAME: 'temporal.test',
      STEWARD_TASK_QUEUE: `${queue}-interactive`,
      STEWARD_BACKGROUND_TASK_QUEUE: `${queue}-background`,
      STEWARD_REPO_TASK_QUEUE: `${queue}-repo`,
      STEWARD_WORKER_QUEUES: '',
      STEWARD_WORKER_CONCURRENCY: '',
      STEWARD_WORKFLOW_BUNDLE: '',
    };
    // the API first: it registers Steward's search attributes on the namespace
    api = spawnProcess('./steward', ['api'], { ...env, STEWARD_HTTP_PORT: String(await freePort()) });
    apiUrl = (await api.waitForOutput(/API:\s+(http:\/\/\S+)/, 180_000))[1] ?? '';
  });

  after(async () => {
    for (const p of [api, ...workers]) {
      p?.kill('SIGTERM');
      await Promise.race([p?.exited, sleep(20_000)]);
      p?.kill('SIGKILL');
    }
    server?.kill('SIGKILL');
    await proxy?.close();
    await model?.close();
    await dbh?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  const authed = { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' };

  it('steward api serves without workers and registered the search attributes on the namespace', async () => {
    const health = (await (await fetch(`${apiUrl}/healthz`)).json()) as { ok: boolean; checks: Record<string, string> };
    assert.equal(health.checks.temporal, 'ok');
    assert.match(health.checks.worker ?? '', /none in this process/);
    const plain = await Connection.connect({ address: `127.0.0.1:${serverPort}` });
    try {
      const { customAttributes } = await plain.operatorService.listSearchAttributes({ namespace: NAMESPACE });
      for (const [name, type] of Object.entries(SEARCH_ATTRIBUTES)) {
        assert.ok(customAttributes?.[name], `${name} registered on ${NAMESPACE}`);
        assert.equal(customAttributes[name], IndexedValueType[indexedValueTypeName(type) as keyof typeof IndexedValueType], `${name} registered as a ${type}`);
      }
    } finally {
      await plain.close();
    }
    assert.ok(proxy.stats.authorized > 0, 'the API reached Temporal through the TLS proxy');
  });

  it('refuses a bad --queues value with a clear message and starts nothing', async () => {
    const bad = spawnProcess('./steward', ['worker', '--queues', 'interactive,chatty'], env);
    const { code } = await bad.exited;
    assert.equal(code, 2);
    assert.match(bad.output(), /STEWARD_WORKER_QUEUES: expected queue roles .* \(got chatty\)/);
    const badSlots = spawnProcess('./steward', ['worker', '--concurrency', 'repo=0'], env);
    assert.equal((await badSlots.exited).code, 2);
    assert.match(badSlots.output(), /STEWARD_WORKER_CONCURRENCY: expected role=count pairs/);
  });

  it('workers by role (one from a prebuilt bundle) answer a message on the other namespace', async () => {
    // the production worker path: a prebuilt bundle, loaded instead of bundling at start
    const bundle = path.join(dir, 'workflow-bundle.js');
    execFileSync(process.execPath, ['--import', 'tsx', 'workers/bundle.ts', bundle], { cwd: repoRoot, stdio: 'pipe' });
    const chatWorker = spawnProcess('./steward', ['worker', '--queues', 'interactive,background', '--concurrency', 'interactive=20,background=4'], {
      ...env,
      STEWARD_WORKFLOW_BUNDLE: bundle,
    });
    workers.push(chatWorker);
    const repoWorker = spawnProcess('./steward', ['worker', '--queues', 'repo', '--concurrency', 'repo=1'], env);
    workers.push(repoWorker);
    const polling = await chatWorker.waitForOutput(/Steward worker polling (.*) on (\S+) \(namespace (\S+)\)/, 180_000);
    assert.match(polling[1] ?? '', new RegExp(`${queue}-interactive \\(interactive, 20 at once\\), ${queue}-background \\(background, 4 at once\\)`));
    assert.equal(polling[3], NAMESPACE);
    const repoPolling = await repoWorker.waitForOutput(/Steward worker polling (.*) on/, 180_000);
    assert.equal(repoPolling[1], `${queue}-repo (repo, 1 at once)`);

    model.enqueue({ text: 'Answered from the other namespace.' });
    const r = await fetch(`${apiUrl}/api/v1/chats/roles-chat/messages`, { method: 'POST', headers: authed, body: JSON.stringify({ text: 'hello cluster', user: 'ops' }) });
    assert.equal(r.status, 202);
    const { workflowId } = (await r.json()) as { workflowId: string };
    let messages: Array<{ role: string; text: string }> = [];
    for (let i = 0; i < 600 && !messages.some((m) => m.role === 'assistant'); i++) {
      await sleep(100);
      messages = ((await (await fetch(`${apiUrl}/api/v1/chats/roles-chat/messages`, { headers: authed })).json()) as { messages: typeof messages }).messages;
    }
    assert.deepEqual(
      messages.map((m) => [m.role, m.text]),
      [
        ['user', 'hello cluster'],
        ['assistant', 'Answered from the other namespace.'],
      ],
      `worker output:\n${chatWorker.output().slice(-3000)}\napi output:\n${api?.output().slice(-2000)}`,
    );
    // the session lives on the configured namespace of the second server, polled on the configured queue
    const plain = await Connection.connect({ address: `127.0.0.1:${serverPort}` });
    try {
      const client = new Client({ connection: plain, namespace: NAMESPACE });
      const desc = await client.workflow.getHandle(workflowId).describe();
      assert.equal(desc.taskQueue, `${queue}-interactive`);
      assert.equal(desc.status.name, 'RUNNING');
      const turns: string[] = [];
      for await (const w of client.workflow.list({ query: `StewardKind = 'turn'` })) turns.push(w.workflowId);
      assert.deepEqual(turns, [], 'no turn workflow: the chat turn ran inside the session');
      // not only as visibility lists it: the session's history started no child, and scheduled the turn's model step itself
      const events = (await client.workflow.getHandle(workflowId).fetchHistory()).events ?? [];
      assert.ok(!events.some((e) => e.startChildWorkflowExecutionInitiatedEventAttributes), 'the session started no child workflow');
      assert.ok(events.some((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'modelStep'), "the turn's model step is in the session's history");
      const other = new Client({ connection: plain, namespace: 'default' });
      await assert.rejects(other.workflow.getHandle(workflowId).describe(), /not found/i);
    } finally {
      await plain.close();
    }
  });

  it('the TLS endpoint refuses a client without a certificate', async () => {
    const before = proxy.stats.refused;
    await assert.rejects(
      (async () => {
        const c = await Connection.connect({
          address: env.TEMPORAL_ADDRESS!,
          tls: { serverRootCACertificate: readFileSync(certs.ca), serverNameOverride: 'temporal.test' },
          connectTimeout: 3000,
        });
        try {
          await c.workflowService.describeNamespace({ namespace: NAMESPACE });
        } finally {
          await c.close();
        }
      })(),
    );
    assert.ok(proxy.stats.refused > before, 'the handshake without a client certificate was refused');
  });
});
