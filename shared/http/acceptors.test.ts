import http from 'node:http';
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { addAcceptors } from './acceptors.ts';

/**
 * Connections accepted per turn of a busy event loop (20 ms of work per
 * turn), when `n` connections arrive at once, with `sockets` listening.
 * Every request is answered through the one HTTP server.
 */
async function acceptsPerTurn(sockets: number, n: number): Promise<{ mostPerTurn: number; answered: number }> {
  const server = http.createServer((_req, res) => res.end('ok'));
  await new Promise<void>((r) => server.listen({ port: 0, host: '127.0.0.1', reusePort: sockets > 1 }, () => r()));
  const acceptors = await addAcceptors(server, sockets - 1);
  let thisTurn = 0;
  let mostPerTurn = 0;
  server.on('connection', () => {
    thisTurn++;
    mostPerTurn = Math.max(mostPerTurn, thisTurn);
  });
  const busy = setInterval(() => {
    thisTurn = 0;
    const until = performance.now() + 20;
    while (performance.now() < until);
  }, 0);
  try {
    const { port } = server.address() as net.AddressInfo;
    const answers = await Promise.all(
      Array.from({ length: n }, () =>
        new Promise<number>((resolve, reject) => {
          http.get({ host: '127.0.0.1', port, path: '/', agent: false }, (res) => {
            res.resume();
            res.on('end', () => resolve(res.statusCode!));
          }).on('error', reject);
        }),
      ),
    );
    return { mostPerTurn, answered: answers.filter((s) => s === 200).length };
  } finally {
    clearInterval(busy);
    await acceptors.close();
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  }
}

describe('HTTP acceptors', () => {
  it('one listening socket accepts one connection per turn of a busy loop; four accept several', async () => {
    const one = await acceptsPerTurn(1, 60);
    expect(one.answered).toBe(60);
    expect(one.mostPerTurn).toBe(1);
    const four = await acceptsPerTurn(4, 60);
    expect(four.answered).toBe(60);
    expect(four.mostPerTurn).toBeGreaterThanOrEqual(2);
    expect(four.mostPerTurn).toBeLessThanOrEqual(4);
  }, 60_000);

  it('fails to add sockets to a server that did not listen with reusePort', async () => {
    const server = http.createServer((_req, res) => res.end('ok'));
    await new Promise<void>((r) => server.listen({ port: 0, host: '127.0.0.1' }, () => r()));
    try {
      await expect(addAcceptors(server, 2)).rejects.toThrow(/EADDRINUSE/);
    } finally {
      await new Promise<void>((r) => server.close(() => r()));
    }
  });
});
