import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import helmet from 'helmet';

/**
 * The dashboard's policy, sent with helmet's other headers on every response
 * (a JSON answer is not affected by it; /docs sends its own, openapi.ts).
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

/**
 * helmet's headers on every response. NOTE: helmet's middleware is built
 * once here and run on the raw response before routing, as @fastify/helmet
 * runs it; that plugin builds a new middleware from its options for every
 * request, a cost the intake pays per request. security-headers.test.ts pins
 * the headers.
 */
async function securityHeadersPlugin(app: FastifyInstance): Promise<void> {
  const securityHeaders = helmet({
    contentSecurityPolicy: { useDefaults: false, directives: CSP_DIRECTIVES },
    frameguard: { action: 'deny' },
    referrerPolicy: { policy: 'no-referrer' },
    // NOTE: no HSTS from here: TLS ends at the proxy, which owns that header.
    strictTransportSecurity: false,
    crossOriginEmbedderPolicy: false,
  });
  app.addHook('onRequest', (req, reply, done) => securityHeaders(req.raw, reply.raw, (err) => done(err as Error | undefined)));
}

export const securityHeaders = fp(securityHeadersPlugin, { name: 'security-headers', fastify: '5.x' });
