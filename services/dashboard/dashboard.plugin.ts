import { randomBytes } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import cookie from '@fastify/cookie';
import session from '@fastify/session';
import csrf from '@fastify/csrf-protection';
import { ApiError } from '../../shared/http/errors.ts';
import type { FailedAttemptLimit } from '../../shared/http/failed-attempts.ts';
import { sameSecret } from '../admin/admin-token.plugin.ts';
import { managementRoutes, type ManagementRoutesOptions } from '../admin/management.routes.ts';
import { BoundedMemoryStore } from './session-store.ts';

declare module 'fastify' {
  interface Session {
    signedIn?: boolean;
  }
}

export type Asset = { body: Buffer; type: string };

export interface DashboardPluginOptions {
  adminToken: string;
  /** Failed tokens per client, shared with /admin/v1. */
  failures: FailedAttemptLimit;
  /** The management routes, mounted again under /dashboard/api. */
  routes: ManagementRoutesOptions;
  /** The built single-page app by file name (app.js, app.css). */
  assets: Map<string, Asset>;
  shell: string;
  /** Absolute session lifetime from sign-in. */
  sessionTtlMs: number;
  store: BoundedMemoryStore;
}

export const SESSION_COOKIE = 'va_session';
const COOKIE_PATH = '/dashboard';

/**
 * The dashboard under /dashboard: the shell and its assets, sign-in (the
 * admin token for a server-side session in an HttpOnly, SameSite=Strict
 * cookie, Secure when the request came over https, through TRUST_PROXY
 * behind a proxy), and the management routes mounted a second time under
 * /dashboard/api behind the session and its CSRF token (X-CSRF-Token on
 * every state-changing request). No request is forwarded anywhere: the
 * routes answer here, so no path can leave /dashboard/api.
 */
export async function dashboardPlugin(app: FastifyInstance, opts: DashboardPluginOptions): Promise<void> {
  await app.register(cookie);
  await app.register(session, {
    // NOTE: sessions live in this process's memory, so a per-process secret
    // (for the cookie's signature) loses nothing at a restart.
    secret: randomBytes(32).toString('base64url'),
    cookieName: SESSION_COOKIE,
    // NOTE: not secure: 'auto', which downgrades SameSite to Lax over plain
    // http; Secure is set per session at sign-in instead.
    cookie: { path: COOKIE_PATH, httpOnly: true, sameSite: 'strict', secure: false, maxAge: opts.sessionTtlMs },
    saveUninitialized: false,
    // An absolute lifetime: the cookie's expiry is set once, at sign-in.
    rolling: false,
    store: opts.store,
  });
  await app.register(csrf, { sessionPlugin: '@fastify/session', getToken: (req) => header(req, 'x-csrf-token') });

  app.addHook('onRequest', async (_req, reply) => {
    reply.header('Cache-Control', 'no-store');
  });

  const requireSession = async (req: FastifyRequest): Promise<void> => {
    if (req.session?.get('signedIn') !== true) throw new ApiError('unauthorized', 'sign in to the dashboard first');
  };
  const requireCsrf = (req: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void): void => {
    if (req.method === 'GET' || req.method === 'HEAD') return done();
    app.csrfProtection(req, reply, done);
  };
  const sendShell = async (_req: FastifyRequest, reply: FastifyReply) => reply.type('text/html; charset=utf-8').send(opts.shell);

  app.get('/', { schema: { hide: true } }, sendShell);
  // NOTE: not @fastify/static: esbuild builds the assets into memory at
  // start (write: false), so there is no directory to serve, and
  // writing one only to read it back would add a build output to keep in
  // step with the sources. Two files, served from a Map.
  app.get('/assets/:name', { schema: { hide: true } }, async (req, reply) => {
    const asset = opts.assets.get((req.params as { name: string }).name);
    if (!asset) throw new ApiError('not_found', 'no such asset');
    return reply.header('Cache-Control', 'no-cache').type(asset.type).send(asset.body);
  });

  app.post('/session', { schema: { hide: true } }, async (req, reply) => {
    const token = (req.body as { token?: unknown } | undefined)?.token;
    const refusal = new ApiError('unauthorized', 'wrong admin token');
    if (typeof token !== 'string' || token === '') throw refusal;
    if (!sameSecret(token, opts.adminToken)) return opts.failures.refuse(req, refusal);
    await req.session.regenerate();
    // Over https (directly or through a proxy trusted by TRUST_PROXY) the cookie is Secure.
    req.session.cookie.secure = req.protocol === 'https';
    req.session.set('signedIn', true);
    return reply.send({ csrf_token: reply.generateCsrf() });
  });
  app.get('/session', { schema: { hide: true }, onRequest: requireSession }, async (_req, reply) => reply.send({ csrf_token: reply.generateCsrf() }));
  app.delete('/session', { schema: { hide: true }, onRequest: [requireSession, requireCsrf] }, async (req, reply) => {
    await req.session.destroy();
    return reply
      .setCookie(SESSION_COOKIE, '', { path: COOKIE_PATH, httpOnly: true, sameSite: 'strict', secure: req.protocol === 'https', maxAge: 0 })
      .code(204)
      .send();
  });

  await app.register(
    async (api) => {
      api.decorateRequest('admin', null);
      // The second mount is not part of the public document.
      api.addHook('onRoute', (route) => {
        route.schema = { ...route.schema, hide: true };
      });
      api.addHook('onRequest', requireSession);
      api.addHook('onRequest', requireCsrf);
      api.addHook('onRequest', async (req) => {
        req.admin = { via: 'dashboard_session' };
      });
      await api.register(managementRoutes, opts.routes);
      // Anything else under /dashboard/api is a 404 here (after the session check), never the shell.
      api.all('/*', async (req) => {
        throw new ApiError('not_found', `no route ${req.method} ${req.url.split('?')[0]}`);
      });
    },
    { prefix: '/api' },
  );

  // Client-side routes deep-link to the same shell.
  app.get('/*', { schema: { hide: true } }, sendShell);
}

function header(req: FastifyRequest, name: string): string | undefined {
  const v = req.headers[name];
  return typeof v === 'string' ? v : undefined;
}
