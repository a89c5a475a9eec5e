/**
 * Free loopback ports for the servers Steward starts itself (the embedded Temporal server's
 * HTTP and metrics ports, Core's Prometheus exporter) and for the tests' servers.
 *
 * A port is free when it is asked for and taken by a server a little later. A port from
 * `listen(0)` lies in the kernel's ephemeral range, the range every outgoing connection's local
 * port is drawn from too, so in that gap any connection (to Temporal, PostgreSQL, a model) may
 * take it and the server then fails with EADDRINUSE. These ports are drawn at random from below
 * that range instead, checked free, and never handed out twice by one process.
 */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

/** The lowest port drawn; below it lie many well-known services' ports. */
const LOWEST = 10_000;
/**
 * Ports from here up to the ephemeral range are never drawn: they are left for blocks of fixed
 * ports a caller lays out itself (a test's `steward cluster`, whose nodes keep their ports
 * across a restart). A port drawn by another process while a node is down would otherwise be
 * the one the node cannot get back.
 */
export const BLOCKS_LOW = 21_000;
/**
 * Ports from here up to the ephemeral range are left for single ports a caller keeps across a
 * restart (`freeKeptPort`: a test's Steward restarted on the same settings); the blocks end below it.
 */
export const KEPT_LOW = 29_000;
/** Draws before falling back to a kernel-chosen port. */
const ATTEMPTS = 50;

const handedOut = new Set<number>();

/** The first port of the kernel's ephemeral range (Linux's setting; 32768 elsewhere, the lowest default). */
export function ephemeralLow(readRange: () => string = () => readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8')): number {
  try {
    const low = Number(readRange().trim().split(/\s+/)[0]);
    if (Number.isInteger(low) && low > 0 && low <= 65_535) return low;
  } catch {
    // not Linux, or no /proc
  }
  return 32_768;
}

function listenOn(port: number, host: string): Promise<number | undefined> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.unref();
    srv.once('error', () => resolve(undefined));
    srv.listen({ port, host, exclusive: true }, () => {
      const addr = srv.address();
      const bound = typeof addr === 'object' && addr ? addr.port : undefined;
      srv.close(() => resolve(bound));
    });
  });
}

/** Whether nothing listens on `port` of `host` now. */
export async function portFree(port: number, host = '127.0.0.1'): Promise<boolean> {
  return (await listenOn(port, host)) === port;
}

/** A port free on `host` now, below the ephemeral range and the blocks' ports where there is room. */
export async function freePort(host = '127.0.0.1'): Promise<number> {
  const high = Math.min(ephemeralLow(), BLOCKS_LOW) - 1;
  return freePortIn(high - LOWEST >= 1_000 ? { low: LOWEST, high } : undefined, host);
}

/**
 * A port free on `host` now that the caller may stop listening on and take again later: drawn
 * above the blocks, where neither `freePort` nor a block draws, so no other process takes it
 * while it is closed. Below the blocks when the ephemeral range starts too low to leave room.
 */
export async function freeKeptPort(host = '127.0.0.1'): Promise<number> {
  const high = ephemeralLow() - 1;
  return high - KEPT_LOW >= 1_000 ? freePortIn({ low: KEPT_LOW, high }, host) : freePort(host);
}

/** A port free on `host` now, drawn from `range` (both ends included), else chosen by the kernel. */
export async function freePortIn(range: { low: number; high: number } | undefined, host = '127.0.0.1'): Promise<number> {
  if (range) {
    for (let i = 0; i < ATTEMPTS; i++) {
      const port = range.low + Math.floor(Math.random() * (range.high - range.low + 1));
      if (handedOut.has(port)) continue;
      if (await portFree(port, host)) {
        handedOut.add(port);
        return port;
      }
    }
  }
  const port = await listenOn(0, host);
  if (port === undefined) throw new Error(`no free port on ${host}`);
  handedOut.add(port);
  return port;
}
