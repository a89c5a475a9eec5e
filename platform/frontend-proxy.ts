/**
 * The cluster's frontend address: a loopback TCP balancer in front of the Temporal nodes'
 * frontends, what a load balancer or a Kubernetes Service is in a deployment. Each new
 * connection goes to the next node in turn that accepts it; a node that refuses (killed,
 * restarting) is skipped, so clients reconnect to a live one. Bytes pass through untouched
 * (gRPC over HTTP/2), each write at once: both sockets have Nagle's algorithm off, as gRPC's own
 * sockets do (with it on, a small gRPC frame waited for the peer's delayed ACK, about 40 ms, on
 * each side: a workflow task's completion took 85-95 ms instead of 5 ms, bench/cluster-shape.ts).
 * Run by `steward cluster up` as its own process:
 *
 *   node --import tsx platform/frontend-proxy.ts <listen port> <target port>...
 */
import { connect, createServer, type Socket } from 'node:net';

/** Connect to the first of `targets` (from `start`, in turn) that accepts; undefined when none does. */
async function firstAccepting(targets: number[], start: number): Promise<Socket | undefined> {
  for (let i = 0; i < targets.length; i++) {
    const port = targets[(start + i) % targets.length]!;
    const socket = await new Promise<Socket | undefined>((resolve) => {
      const s = connect({ port, host: '127.0.0.1', noDelay: true });
      const fail = () => {
        s.destroy();
        resolve(undefined);
      };
      s.setTimeout(2000, fail);
      s.once('error', fail);
      s.once('connect', () => {
        s.setTimeout(0);
        s.removeListener('error', fail);
        resolve(s);
      });
    });
    if (socket) return socket;
  }
  return undefined;
}

/** Listen on `port` and balance over `targets`; resolves once listening. */
export function startFrontendProxy(port: number, targets: number[]): Promise<{ close(): Promise<void> }> {
  let next = 0;
  const open = new Set<Socket>();
  const server = createServer({ noDelay: true }, (client) => {
    client.pause();
    open.add(client);
    client.once('close', () => open.delete(client));
    client.once('error', () => client.destroy());
    void firstAccepting(targets, next++).then((upstream) => {
      if (!upstream || client.destroyed) {
        upstream?.destroy();
        client.destroy();
        return;
      }
      open.add(upstream);
      upstream.once('close', () => {
        open.delete(upstream);
        client.destroy();
      });
      upstream.on('error', () => upstream.destroy());
      client.once('close', () => upstream.destroy());
      client.pipe(upstream).pipe(client);
      client.resume();
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.removeListener('error', reject);
      // a failure to accept one connection (out of file descriptors) is that connection's, not the balancer's
      server.on('error', (err) => process.stderr.write(`frontend proxy: ${err.message}\n`));
      resolve({
        close: () =>
          new Promise<void>((done) => {
            for (const s of open) s.destroy();
            server.close(() => done());
          }),
      });
    });
  });
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].replace(/^.*\//, '/'))) {
  const [port, ...targets] = process.argv.slice(2).map(Number);
  if (!port || targets.length === 0 || [port, ...targets].some((p) => !Number.isInteger(p))) {
    process.stderr.write('usage: frontend-proxy.ts <listen port> <target port>...\n');
    process.exit(2);
  }
  await startFrontendProxy(port, targets);
  process.stdout.write(`frontend proxy on 127.0.0.1:${port} -> ${targets.map((t) => `127.0.0.1:${t}`).join(', ')}\n`);
  process.on('SIGTERM', () => process.exit(0));
}
