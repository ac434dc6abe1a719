import { randomBytes } from 'node:crypto';
import Fastify from 'fastify';
import { serializerCompiler, validatorCompiler, type ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Logger } from '../logger.ts';
import type { Metrics } from '../metrics.ts';
import { ApiError } from './errors.ts';
import { jsonBody } from './json-body.ts';
import { playerCors } from './plugins/cors.ts';
import { problemErrors, sendProblem, type ProblemReply } from './plugins/errors.ts';
import { openApi } from './plugins/openapi.ts';
import { apiKeyRateLimit, type RateLimitOptions } from './plugins/rate-limit.ts';
import { requestMetrics } from './plugins/request-metrics.ts';
import { securityHeaders } from './plugins/security-headers.ts';
import { serverTimeoutOptions, stalledBodies, type HttpTimeouts } from './timeouts.ts';

/** The HTTP app every service registers its routes on. */
export type App = Awaited<ReturnType<typeof buildHttpApp>>;

export interface HttpAppOptions {
  log: Logger;
  metrics: Metrics;
  bodyLimit: number;
  version: string;
  /** Fastify's trustProxy (TRUST_PROXY): false, true, a hop count or the proxies' addresses. */
  trustProxy?: boolean | number | string[];
  /** The per-API-key limit (RATE_LIMIT_PER_MINUTE) and, for replicas, a shared store. */
  rateLimit?: RateLimitOptions;
  /** How long a client may take over its request (HTTP_*_TIMEOUT_MS); none when absent. */
  timeouts?: HttpTimeouts;
}

/**
 * Request ids: a random prefix per process and a counter. They correlate a
 * response with its log lines and need not be secret, and random bytes per
 * request would be a needless cost on the intake's hot path.
 */
const REQUEST_ID_PREFIX = `req_${randomBytes(6).toString('base64url')}`;
let requestCount = 0;
const nextRequestId = (): string => `${REQUEST_ID_PREFIX}${(++requestCount).toString(36)}`;

/**
 * Builds the one Fastify instance a process serves every route from; routes
 * are registered by the services afterwards. Separate from listen() so tests
 * can use inject(). Each cross-cutting concern is a plugin of its own
 * (./plugins/); NOTE: the order below is the order of their onRequest hooks.
 */
export async function buildHttpApp(opts: HttpAppOptions) {
  const app = Fastify({
    // NOTE: warn level: one info line per request would dominate the log at
    // intake rates; failures are logged by the hooks of the plugins.
    loggerInstance: opts.log.child({ component: 'http' }, { level: 'warn' }),
    bodyLimit: opts.bodyLimit,
    ...(opts.timeouts ? serverTimeoutOptions(opts.timeouts) : {}),
    genReqId: nextRequestId,
    requestIdHeader: false,
    // Behind a TLS proxy, req.protocol and req.ip come from X-Forwarded-* of
    // the proxies named here; the session cookie gets Secure from it.
    trustProxy: typeof opts.trustProxy === 'number' ? trustHops(opts.trustProxy) : (opts.trustProxy ?? false),
    // Long enough for any id we issue or accept (validation then answers 422).
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: 512 },
    // Errors raised before routing (a malformed percent-escape in the path)
    // get the same problem+json shape as everything else.
    frameworkErrors: (err, req, reply) => {
      reply.header('X-Request-Id', req.id);
      sendProblem(reply as unknown as ProblemReply, req.id, new ApiError('bad_request', err.message));
    },
  }).withTypeProvider<ZodTypeProvider>();

  // First of the hooks, so that a body stalled behind any later one is answered.
  if (opts.timeouts) app.addHook('onRequest', stalledBodies(opts.timeouts.bodyIdleMs));
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);

  await app.register(jsonBody);
  await app.register(playerCors);
  await app.register(securityHeaders);
  await app.register(apiKeyRateLimit, opts.rateLimit ?? { max: 1000 });
  await app.register(openApi, { version: opts.version });
  await app.register(requestMetrics, { metrics: opts.metrics });
  await app.register(problemErrors);
  return app;
}

/** Trusts the nearest `hops` proxies (X-Forwarded-For read from the right). */
function trustHops(hops: number): (address: string, hop: number) => boolean {
  return (_address, hop) => hop < hops;
}
