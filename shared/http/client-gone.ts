import type { FastifyReply } from 'fastify';

/**
 * A signal that fires when the client leaves before its answer is written,
 * so the work done for it (a ClickHouse read) can be given up. The
 * response's `close` comes both after a complete answer and when the
 * connection drops; only the second leaves the answer unfinished.
 */
export function clientGoneSignal(reply: FastifyReply): AbortSignal {
  const controller = new AbortController();
  const res = reply.raw;
  if (res.destroyed && !res.writableFinished) controller.abort();
  else res.once('close', () => {
    if (!res.writableFinished) controller.abort();
  });
  return controller.signal;
}
