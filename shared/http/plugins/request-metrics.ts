import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { Metrics } from '../../metrics.ts';

/**
 * `X-Request-Id` on every answer, and every request counted in
 * `http_requests_total` and `http_request_duration_seconds` by method, route
 * and status; a 5xx is logged as `request_failed`.
 */
async function requestMetricsPlugin(app: FastifyInstance, opts: { metrics: Metrics }): Promise<void> {
  const { metrics } = opts;
  /** When each request started, for a request whose client leaves before the answer (onRequestAbort has no reply). */
  const abortClock = new WeakMap<object, number>();
  app.addHook('onRequest', async (req, reply) => {
    abortClock.set(req, performance.now());
    reply.header('X-Request-Id', req.id);
  });
  app.addHook('onResponse', async (req, reply) => {
    const route = req.routeOptions.url ?? 'unmatched';
    metrics.httpRequests.inc({ method: req.method, route, status: String(reply.statusCode) });
    metrics.httpDuration.observe({ method: req.method, route }, reply.elapsedTime / 1000);
    if (reply.statusCode >= 500) req.log.warn({ req, status: reply.statusCode }, 'request_failed');
  });
  // A client that gives up before the answer closes its connection, and the
  // answer never finishes, so onResponse never runs: counted here instead
  // (status "aborted", its time until the client left), or the slowest
  // requests, the ones clients abandon, would be missing from the latency.
  app.addHook('onRequestAbort', async (req) => {
    const route = req.routeOptions.url ?? 'unmatched';
    metrics.httpRequests.inc({ method: req.method, route, status: 'aborted' });
    metrics.httpDuration.observe({ method: req.method, route }, (performance.now() - (abortClock.get(req) ?? performance.now())) / 1000);
  });
}

export const requestMetrics = fp(requestMetricsPlugin, { name: 'request-metrics', fastify: '5.x' });
