import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { App } from '../../shared/http/app.ts';
import { ApiError } from '../../shared/http/errors.ts';
import { FixedWindowRateLimiter } from '../../shared/http/rate-limit.ts';
import type { Logger } from '../../shared/logger.ts';

export interface DashboardDeps {
  app: App;
  adminToken: string;
  log: Logger;
  /** Session lifetime from sign-in. */
  sessionTtlMs?: number;
  now?: () => number;
}

interface Session {
  csrf: string;
  expiresAt: number;
}

const WEB_DIR = join(import.meta.dirname, 'web');
const COOKIE = 'va_session';
const MAX_SESSIONS = 10_000;
const CSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

const SHELL = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Video analytics dashboard</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/dashboard/assets/app.css">
</head>
<body>
<div id="app"></div>
<noscript>The dashboard needs JavaScript.</noscript>
<script type="module" src="/dashboard/assets/app.js"></script>
</body>
</html>
`;

/** Builds the single-page app with esbuild into memory: a few hundred ms at start, no build step to forget. */
async function buildAssets(log: Logger): Promise<Map<string, { body: Buffer; type: string }>> {
  const assets = new Map<string, { body: Buffer; type: string }>();
  const entry = join(WEB_DIR, 'main.tsx');
  if (!existsSync(entry)) {
    log.warn({ entry }, 'dashboard_sources_missing');
    return assets;
  }
  const { build } = await import('esbuild');
  const started = performance.now();
  const result = await build({
    entryPoints: { app: entry },
    bundle: true,
    minify: true,
    format: 'esm',
    target: 'es2022',
    jsx: 'automatic',
    jsxImportSource: 'preact',
    outdir: '/dashboard-assets',
    write: false,
    legalComments: 'none',
    logLevel: 'silent',
  });
  for (const file of result.outputFiles) {
    const name = file.path.split('/').pop()!;
    assets.set(name, { body: Buffer.from(file.contents), type: name.endsWith('.css') ? 'text/css; charset=utf-8' : 'text/javascript; charset=utf-8' });
  }
  log.info({ ms: Math.round(performance.now() - started), files: [...assets.keys()] }, 'dashboard_built');
  return assets;
}

function parseCookies(header: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of (header ?? '').split(';')) {
    const i = part.indexOf('=');
    if (i > 0) out[part.slice(0, i).trim()] = part.slice(i + 1).trim();
  }
  return out;
}

function sameSecret(a: string, b: string): boolean {
  const ha = createHash('sha256').update(a).digest();
  const hb = createHash('sha256').update(b).digest();
  return timingSafeEqual(ha, hb);
}

/**
 * The dashboard: a single-page app under /dashboard and its back end. Sign-in
 * trades the admin token for a server-side session (HttpOnly, SameSite=Strict
 * cookie; the token never reaches the browser's storage or a URL), and
 * /dashboard/api/* forwards to the management API (/admin/v1/*) on the
 * session's behalf. Every state-changing request needs the session's CSRF
 * token in X-CSRF-Token.
 */
export async function startDashboard(deps: DashboardDeps): Promise<{ stop(): Promise<void> }> {
  const { app } = deps;
  const now = deps.now ?? Date.now;
  const ttl = deps.sessionTtlMs ?? 8 * 3600 * 1000;
  const sessions = new Map<string, Session>();
  const signInLimiter = new FixedWindowRateLimiter({ limit: 10, now });
  const assets = await buildAssets(deps.log).catch((err: unknown) => {
    deps.log.error({ err }, 'dashboard_build_failed');
    return new Map<string, { body: Buffer; type: string }>();
  });

  const securityHeaders = (reply: FastifyReply) =>
    reply
      .header('Content-Security-Policy', CSP)
      .header('X-Content-Type-Options', 'nosniff')
      .header('X-Frame-Options', 'DENY')
      .header('Referrer-Policy', 'no-referrer')
      .header('Cache-Control', 'no-store');

  const cookie = (req: FastifyRequest, value: string, maxAgeSec: number) =>
    `${COOKIE}=${value}; Path=/dashboard; HttpOnly; SameSite=Strict; Max-Age=${maxAgeSec}${req.protocol === 'https' ? '; Secure' : ''}`;

  const sessionOf = (req: FastifyRequest): [string, Session] | undefined => {
    const id = parseCookies(req.headers.cookie)[COOKIE];
    if (!id) return undefined;
    const s = sessions.get(id);
    if (!s) return undefined;
    // NOTE: an absolute lifetime, the same as the cookie's Max-Age.
    if (s.expiresAt < now()) {
      sessions.delete(id);
      return undefined;
    }
    return [id, s];
  };
  const requireSession = (req: FastifyRequest, stateChanging: boolean): [string, Session] => {
    const found = sessionOf(req);
    if (!found) throw new ApiError('unauthorized', 'sign in to the dashboard first');
    if (stateChanging) {
      const given = req.headers['x-csrf-token'];
      if (typeof given !== 'string' || !sameSecret(given, found[1].csrf)) {
        throw new ApiError('forbidden', 'missing or wrong X-CSRF-Token');
      }
    }
    return found;
  };

  app.get('/dashboard', { schema: { hide: true } }, async (_req, reply) => securityHeaders(reply).type('text/html; charset=utf-8').send(SHELL));
  app.get('/dashboard/assets/:name', { schema: { hide: true } }, async (req, reply) => {
    const asset = assets.get((req.params as { name: string }).name);
    if (!asset) throw new ApiError('not_found', 'no such asset');
    return securityHeaders(reply).header('Cache-Control', 'no-cache').type(asset.type).send(asset.body);
  });

  app.post('/dashboard/session', { schema: { hide: true } }, async (req, reply) => {
    // Only failed attempts count: guessing is limited, signing in is not.
    const limit = signInLimiter.peek(req.ip);
    if (!limit.allowed) throw new ApiError('rate_limited', 'too many failed sign-in attempts; wait a minute', { headers: { 'Retry-After': String(limit.resetSeconds) } });
    const token = (req.body as { token?: unknown } | undefined)?.token;
    if (typeof token !== 'string' || !sameSecret(token, deps.adminToken)) {
      signInLimiter.hit(req.ip);
      throw new ApiError('unauthorized', 'wrong admin token');
    }
    if (sessions.size >= MAX_SESSIONS) {
      for (const [id, s] of sessions) if (s.expiresAt < now()) sessions.delete(id);
      if (sessions.size >= MAX_SESSIONS) sessions.delete(sessions.keys().next().value!);
    }
    const id = randomBytes(32).toString('base64url');
    const session = { csrf: randomBytes(24).toString('base64url'), expiresAt: now() + ttl };
    sessions.set(id, session);
    return securityHeaders(reply).header('Set-Cookie', cookie(req, id, Math.floor(ttl / 1000))).send({ csrf_token: session.csrf });
  });
  app.get('/dashboard/session', { schema: { hide: true } }, async (req, reply) => {
    const [, s] = requireSession(req, false);
    return securityHeaders(reply).send({ csrf_token: s.csrf });
  });
  app.delete('/dashboard/session', { schema: { hide: true } }, async (req, reply) => {
    const [id] = requireSession(req, true);
    sessions.delete(id);
    return securityHeaders(reply).header('Set-Cookie', cookie(req, '', 0)).code(204).send();
  });

  const forward = async (req: FastifyRequest, reply: FastifyReply) => {
    requireSession(req, req.method !== 'GET' && req.method !== 'HEAD');
    const rest = (req.params as { '*': string })['*'];
    const query = req.url.includes('?') ? req.url.slice(req.url.indexOf('?')) : '';
    const res = await app.inject({
      method: req.method as 'GET',
      url: `/admin/v1/${rest}${query}`,
      headers: {
        authorization: `Bearer ${deps.adminToken}`,
        ...(req.body !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      ...(req.body !== undefined ? { payload: JSON.stringify(req.body) } : {}),
    });
    securityHeaders(reply).code(res.statusCode);
    const type = res.headers['content-type'];
    if (type) reply.header('Content-Type', type);
    return reply.send(res.rawPayload);
  };
  for (const method of ['GET', 'POST', 'PATCH', 'DELETE'] as const) {
    app.route({ method, url: '/dashboard/api/*', schema: { hide: true }, handler: forward });
  }
  // Client-side routes deep-link to the same shell.
  app.get('/dashboard/*', { schema: { hide: true } }, async (_req, reply) => securityHeaders(reply).type('text/html; charset=utf-8').send(SHELL));

  return {
    async stop() {
      sessions.clear();
    },
  };
}
