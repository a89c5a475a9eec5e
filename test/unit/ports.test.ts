/** Free ports for the servers Steward and its tests start (platform/ports.ts), against the real network stack. */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:net';
import { describe, it } from 'node:test';
import { BLOCKS_LOW, KEPT_LOW, ephemeralLow, freeKeptPort, freePort, freePortIn } from '../../platform/ports.js';

function listen(port: number): Promise<Server> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(port, '127.0.0.1', () => resolve(srv));
  });
}

const close = (srv: Server) => new Promise<void>((resolve) => srv.close(() => resolve()));

describe('free ports', () => {
  it("reads the ephemeral range's first port, and falls back to 32768 when it cannot", () => {
    assert.equal(ephemeralLow(() => '32768\t60999\n'), 32768);
    assert.equal(ephemeralLow(() => '49152 65535'), 49152);
    assert.equal(ephemeralLow(() => 'garbage'), 32768);
    assert.equal(
      ephemeralLow(() => {
        throw new Error('ENOENT');
      }),
      32768,
    );
  });

  it('hands out ports below the ephemeral range and the fixed blocks, each once, each free to listen on', async () => {
    const low = Math.min(ephemeralLow(), BLOCKS_LOW);
    const ports: number[] = [];
    for (let i = 0; i < 40; i++) ports.push(await freePort());
    assert.equal(new Set(ports).size, ports.length, 'no port handed out twice');
    for (const port of ports) assert.ok(port >= 10_000 && port < low, `${port} lies below the ephemeral range and the blocks (${low})`);
    const servers = await Promise.all(ports.map(listen));
    await Promise.all(servers.map(close));
  });

  it('hands out kept ports above the blocks and below the ephemeral range, where freePort never draws', async () => {
    const high = ephemeralLow();
    const kept: number[] = [];
    for (let i = 0; i < 20; i++) kept.push(await freeKeptPort());
    assert.equal(new Set(kept).size, kept.length, 'no port handed out twice');
    if (high - KEPT_LOW > 1_000) for (const port of kept) assert.ok(port >= KEPT_LOW && port < high, `${port} lies in [${KEPT_LOW}, ${high})`);
    assert.ok(KEPT_LOW > BLOCKS_LOW, 'the blocks end below the kept ports');
    const drawn = new Set<number>();
    for (let i = 0; i < 40; i++) drawn.add(await freePort());
    for (const port of drawn) assert.ok(port < BLOCKS_LOW, `freePort drew ${port}, in the kept or blocks range`);
  });

  it('skips a port something listens on, and asks the kernel when the whole range is taken', async () => {
    const held = await listen(0);
    const port = (held.address() as { port: number }).port;
    try {
      const other = await freePortIn({ low: port, high: port });
      assert.notEqual(other, port);
      const srv = await listen(other);
      await close(srv);
    } finally {
      await close(held);
    }
  });
});
