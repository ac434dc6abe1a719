import type { FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify';
import { ApiError } from './errors.ts';

/** How long the server waits on a client, each from its own setting (shared/config.ts). */
export interface HttpTimeouts {
  /** HTTP_HEADERS_TIMEOUT_MS: from the connection's first byte of a request to its last header. */
  headersMs: number;
  /** HTTP_BODY_IDLE_TIMEOUT_MS: longest silence of a connection while the server waits on the client. */
  bodyIdleMs: number;
  /** HTTP_REQUEST_TIMEOUT_MS: from the first byte of a request to the last byte of its body. */
  requestMs: number;
  /** HTTP_KEEP_ALIVE_TIMEOUT_MS: an idle kept-alive connection between two requests. */
  keepAliveMs: number;
}

/**
 * Fastify's and Node's server options for `t`. Without them a client that
 * sends part of a request and then waits holds its socket, and whatever the
 * service took for that request, for as long as it likes.
 *
 * NOTE: Node checks the headers and request timeouts on a timer
 * (connectionsCheckingInterval, 30 s by default), so a timeout is late by up
 * to one interval; the interval here is a fraction of the shorter one.
 */
export function serverTimeoutOptions(t: HttpTimeouts): Pick<FastifyServerOptions, 'connectionTimeout' | 'keepAliveTimeout' | 'requestTimeout'> & {
  http: { headersTimeout: number; requestTimeout: number; keepAliveTimeout: number; connectionsCheckingInterval: number };
} {
  const checkEvery = Math.max(50, Math.min(1000, Math.floor(Math.min(t.headersMs, t.requestMs) / 4)));
  return {
    // Node's server.timeout: a socket's idle limit, which raises 'timeout' on
    // the request while its body is incomplete (answered by stalledBodies' hook).
    connectionTimeout: t.bodyIdleMs,
    keepAliveTimeout: t.keepAliveMs,
    requestTimeout: t.requestMs,
    // Fastify sets requestTimeout only after creating the server, which
    // checks headersTimeout against it: both go in here too.
    http: { headersTimeout: t.headersMs, requestTimeout: t.requestMs, keepAliveTimeout: t.keepAliveMs, connectionsCheckingInterval: checkEvery },
  };
}

/**
 * An onRequest hook that answers 408 (problem+json, Connection: close) to a
 * request whose body has not moved for `bodyIdleMs`, through the app's
 * error handler like any other refusal; where an answer was already started, or nothing is reading
 * the body yet, the connection is dropped instead. A request whose body is
 * complete is the server's to answer: a slow handler keeps its connection,
 * unless its answer is stuck behind a client that does not read it.
 */
export function stalledBodies(bodyIdleMs: number) {
  return function onStalledBody(req: FastifyRequest, reply: FastifyReply, done: () => void): void {
    const raw = req.raw;
    // Node raises 'timeout' on the request only while its body is incomplete.
    raw.once('timeout', () => {
      // NOTE: the body reader (Fastify's content-type parser) listens for
      // 'error' on the request and sends the error it gets as the answer;
      // without that reader there is nobody to answer, so the socket goes.
      if (reply.raw.headersSent || raw.listenerCount('error') === 0) {
        raw.socket?.destroy();
        return;
      }
      raw.emit('error', new ApiError('request_timeout', `no byte of the request body for ${bodyIdleMs} ms`, { headers: { connection: 'close' } }));
    });
    // On the answer: a stalled answer (the client stopped reading) drops the
    // socket; an answer not yet started waits for the handler.
    reply.raw.on('timeout', () => {
      if (reply.raw.headersSent) raw.socket?.destroy();
    });
    done();
  };
}
