import { randomBytes } from 'node:crypto';
import Fastify, { type FastifyError } from 'fastify';
import cors from '@fastify/cors';
import swagger from '@fastify/swagger';
import helmet from 'helmet';
import swaggerUi from '@fastify/swagger-ui';
import {
  hasZodFastifySchemaValidationErrors,
  jsonSchemaTransform,
  jsonSchemaTransformObject,
  serializerCompiler,
  validatorCompiler,
  type ZodTypeProvider,
} from 'fastify-type-provider-zod';
import type { Logger } from '../logger.ts';
import type { Metrics } from '../metrics.ts';
import { ApiError, ERRORS, PROBLEM_CONTENT_TYPE, problem, type ErrorCode } from './errors.ts';
import { parseJsonBody } from './json-body.ts';
import { apiKeyRateLimit, type RateLimitOptions } from './rate-limit.ts';
import { Problem } from './schemas.ts';
import { serverTimeoutOptions, stalledBodies, type HttpTimeouts } from './timeouts.ts';

/** The HTTP app every service registers its routes on. */
export type App = Awaited<ReturnType<typeof buildHttpApp>>;

/** Routes that browsers call cross-origin (the player's intake). */
const CORS_PATHS = ['/v1/collect'];

/**
 * The dashboard's policy, sent with helmet's other headers on every response (a JSON
 * answer is not affected by it; /docs sends its own, see swaggerUi below).
 */
const CSP_DIRECTIVES = {
  defaultSrc: ["'self'"],
  scriptSrc: ["'self'"],
  styleSrc: ["'self'", "'unsafe-inline'"],
  imgSrc: ["'self'", 'data:'],
  connectSrc: ["'self'"],
  frameAncestors: ["'none'"],
  baseUri: ["'none'"],
  formAction: ["'self'"],
  objectSrc: ["'none'"],
};

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
 * response with its log lines and need not be secret; 9 random bytes per
 * request cost more CPU than the intake's whole fast check did.
 */
const REQUEST_ID_PREFIX = `req_${randomBytes(6).toString('base64url')}`;
let requestCount = 0;
const nextRequestId = (): string => `${REQUEST_ID_PREFIX}${(++requestCount).toString(36)}`;

/**
 * Builds the one Fastify instance a process serves every route from; routes
 * are registered by the services afterwards. Separate from listen() so tests
 * can use inject().
 */
export async function buildHttpApp(opts: HttpAppOptions) {
  const app = Fastify({
    // NOTE: warn level: one info line per request would dominate the log at
    // intake rates; failures are logged by the hooks below.
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

  // One JSON parser for both media types. sendBeacon cannot set
  // Content-Type: application/json without a CORS preflight, so the player
  // sends its JSON as text/plain.
  const json = (_req: unknown, body: string | Buffer, done: (err: Error | null, body?: unknown) => void) => {
    try {
      done(null, parseJsonBody(body as string));
    } catch (err) {
      done(err as Error, undefined);
    }
  };
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, json);
  app.addContentTypeParser('text/plain', { parseAs: 'string' }, json);

  await app.register(cors, {
    hook: 'onRequest',
    delegator: (req, cb) => {
      const path = (req.url ?? '').split('?')[0] ?? '';
      if (!CORS_PATHS.includes(path)) return cb(null, { origin: false });
      cb(null, {
        origin: '*',
        methods: ['POST', 'OPTIONS'],
        allowedHeaders: ['Content-Type', 'X-Player-Key'],
        maxAge: 86400,
      });
    },
  });

  // helmet's middleware, built once and run on the raw response before
  // routing, as @fastify/helmet runs it; that plugin built a new one from
  // these options for every request (2.7 % of the intake's CPU,
  // docs/performance.md). security-headers.test.ts pins the headers.
  const securityHeaders = helmet({
    contentSecurityPolicy: { useDefaults: false, directives: CSP_DIRECTIVES },
    frameguard: { action: 'deny' },
    referrerPolicy: { policy: 'no-referrer' },
    // NOTE: no HSTS from here: TLS ends at the proxy, which owns that header.
    strictTransportSecurity: false,
    crossOriginEmbedderPolicy: false,
  });
  app.addHook('onRequest', (req, reply, done) => securityHeaders(req.raw, reply.raw, (err) => done(err as Error | undefined)));

  // Every operation can answer 400 (a malformed path escape, an empty JSON
  // body); one with a body also 400 invalid_json, 408 (its body stalled),
  // 413 and 415. Declared
  // here once so that the OpenAPI document lists them for every route,
  // including the ones other services register.
  app.addHook('onRoute', (route) => {
    const schema = route.schema as { hide?: boolean; body?: unknown; response?: Record<string, unknown> } | undefined;
    if (!schema || schema.hide || !schema.response) return;
    const response = { ...schema.response };
    response[400] ??= Problem;
    if (schema.body) {
      response[408] ??= Problem;
      response[413] ??= Problem;
      response[415] ??= Problem;
    }
    schema.response = response;
  });

  await app.register(apiKeyRateLimit, opts.rateLimit ?? { max: 1000 });

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Video analytics API',
        version: opts.version,
        description:
          'Read API for videos, per-video events and per-visitor Lead Intent Scores; the player intake; the server-side conversion intake; the management API.',
      },
      components: {
        securitySchemes: {
          apiKey: { type: 'http', scheme: 'bearer', description: 'API key (`sk_…`) from the management API' },
          adminToken: { type: 'http', scheme: 'bearer', description: 'ADMIN_TOKEN of the deployment' },
          playerKey: { type: 'apiKey', in: 'header', name: 'X-Player-Key', description: 'Public player key (`pk_…`)' },
        },
      },
    },
    transform: jsonSchemaTransform,
    // Puts the schemas named with .meta({ id }) into components.schemas, and
    // documents error bodies under the media type they are sent with.
    transformObject: (input) => problemMediaType(jsonSchemaTransformObject(input)),
  });
  // staticCSP: the UI answers with its own policy (hashes of its inline parts) instead of the dashboard's.
  await app.register(swaggerUi, { routePrefix: '/docs', staticCSP: true });
  app.get('/v1/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  /** When each request started, for a request whose client leaves before the answer (onRequestAbort has no reply). */
  const abortClock = new WeakMap<object, number>();
  app.addHook('onRequest', async (req, reply) => {
    abortClock.set(req, performance.now());
    reply.header('X-Request-Id', req.id);
  });
  app.addHook('onResponse', async (req, reply) => {
    const route = req.routeOptions.url ?? 'unmatched';
    opts.metrics.httpRequests.inc({ method: req.method, route, status: String(reply.statusCode) });
    opts.metrics.httpDuration.observe({ method: req.method, route }, reply.elapsedTime / 1000);
    if (reply.statusCode >= 500) req.log.warn({ req, status: reply.statusCode }, 'request_failed');
  });
  // A client that gives up before the answer closes its connection, and the
  // answer never finishes, so onResponse never runs: counted here instead
  // (status "aborted", its time until the client left), or the slowest
  // requests, the ones clients abandon, would be missing from the latency.
  app.addHook('onRequestAbort', async (req) => {
    const route = req.routeOptions.url ?? 'unmatched';
    opts.metrics.httpRequests.inc({ method: req.method, route, status: 'aborted' });
    opts.metrics.httpDuration.observe({ method: req.method, route }, (performance.now() - (abortClock.get(req) ?? performance.now())) / 1000);
  });

  app.setNotFoundHandler((req, reply) => {
    const path = (req.url ?? '').split('?')[0];
    sendProblem(reply, req.id, new ApiError('not_found', `no route ${req.method} ${path}`));
  });

  app.setErrorHandler((err: FastifyError, req, reply) => {
    if (err instanceof ApiError) return sendProblem(reply, req.id, err);
    if (hasZodFastifySchemaValidationErrors(err)) {
      const errors = err.validation.map((v) => ({
        path: [err.validationContext, ...(v.instancePath ? v.instancePath.split('/').filter(Boolean) : [])].join('.'),
        message: v.message ?? 'invalid',
      }));
      const detail = errors.map((e) => `${e.path}: ${e.message}`).slice(0, 5).join('; ');
      return sendProblem(reply, req.id, new ApiError('validation_failed', detail, { errors }));
    }
    const mapped = fastifyErrorCode(err);
    if (mapped) return sendProblem(reply, req.id, new ApiError(mapped, err.message));
    req.log.error({ err }, 'unhandled_error');
    return sendProblem(reply, req.id, new ApiError('internal', 'unexpected error; the request id identifies it in the logs'));
  });

  return app;
}

/** Trusts the nearest `hops` proxies (X-Forwarded-For read from the right). */
function trustHops(hops: number): (address: string, hop: number) => boolean {
  return (_address, hop) => hop < hops;
}

function fastifyErrorCode(err: FastifyError): ErrorCode | undefined {
  switch (err.code) {
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return 'invalid_json';
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return 'payload_too_large';
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return err.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE' ? 'unsupported_media_type' : 'bad_request';
    default:
      break;
  }
  if (err instanceof SyntaxError) return 'invalid_json';
  if (err.statusCode && err.statusCode >= 400 && err.statusCode < 500) {
    const byStatus = (Object.keys(ERRORS) as ErrorCode[]).find((c) => ERRORS[c].status === err.statusCode);
    return byStatus ?? 'bad_request';
  }
  return undefined;
}

type ProblemReply = { code(n: number): ProblemReply; header(k: string, v: string): ProblemReply; send(b: unknown): unknown };

export function sendProblem(reply: ProblemReply, requestId: string, err: ApiError): unknown {
  for (const [k, v] of Object.entries(err.headers ?? {})) reply.header(k, v);
  return reply.code(err.status).header('Content-Type', PROBLEM_CONTENT_TYPE).send(problem(err.code, err.message, requestId, err.errors));
}

/**
 * Error answers are sent as application/problem+json (errors.ts); the zod
 * provider documents every response body as application/json. Moves the body
 * of each 4xx/5xx response to the media type the server really sends.
 */
export function problemMediaType<T>(doc: T): T {
  const paths = (doc as { paths?: Record<string, Record<string, { responses?: Record<string, { content?: Record<string, unknown> }> }>> }).paths ?? {};
  for (const operations of Object.values(paths)) {
    for (const operation of Object.values(operations)) {
      for (const [status, response] of Object.entries(operation?.responses ?? {})) {
        const json = response?.content?.['application/json'];
        if (!/^[45]/.test(status) || json === undefined) continue;
        const { 'application/json': _, ...rest } = response.content!;
        response.content = { 'application/problem+json': json, ...rest };
      }
    }
  }
  return doc;
}
