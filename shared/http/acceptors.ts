import net from 'node:net';
import type { Server } from 'node:http';

/**
 * More listening sockets on the HTTP server's port, each handing the
 * connections it accepts to the server.
 *
 * libuv (1.45 and later, Node 20 and 24 alike) accepts one connection per
 * listening socket per turn of the event loop, and a busy service turns its
 * loop slowly (time-slices.ts): with one socket, new connections under
 * overload wait in the kernel's accept queue before the service sees their
 * requests at all, where it could answer 503 at once. With SO_REUSEPORT the kernel
 * spreads new connections over the server's own socket and `count` more, and
 * each turn accepts up to one on each. The server must listen with
 * `reusePort: true` itself.
 */
export async function addAcceptors(server: Server, count: number): Promise<{ close(): Promise<void> }> {
  const address = server.address();
  if (count <= 0 || address === null || typeof address === 'string') return { close: async () => undefined };
  const extra: net.Server[] = [];
  /**
   * Stops accepting on the extra sockets at once; connections already
   * handed over stay with the server, which closes them. NOTE: close()'s
   * callback is not awaited: it waits for every connection its socket
   * accepted to end, which only the server's own close brings about.
   */
  const close = async () => {
    for (const a of extra) a.close();
  };
  try {
    for (let i = 0; i < count; i++) {
      const acceptor = net.createServer((socket) => server.emit('connection', socket));
      await new Promise<void>((resolve, reject) => {
        acceptor.once('error', reject);
        acceptor.listen({ port: address.port, host: address.address, reusePort: true }, () => {
          acceptor.off('error', reject);
          resolve();
        });
      });
      extra.push(acceptor);
    }
  } catch (err) {
    await close(); // none left listening when the caller gives up
    throw err;
  }
  return { close };
}
