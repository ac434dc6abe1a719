import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { bearerToken } from '../../shared/http/api-key-auth.ts';
import { ApiError } from '../../shared/http/errors.ts';
import type { FailedAttemptLimit } from '../../shared/http/failed-attempts.ts';
import { managementRoutes, type ManagementRoutesOptions } from './management.routes.ts';

/** Who a management request acts as: the operator, with the admin token or a dashboard session. */
export interface AdminPrincipal {
  via: 'admin_token' | 'dashboard_session';
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the auth hook of /admin/v1 or of /dashboard/api. */
    admin: AdminPrincipal | null;
  }
}

export interface AdminTokenPluginOptions {
  adminToken: string;
  /** Failed tokens per client, shared with the dashboard's sign-in. */
  failures: FailedAttemptLimit;
  routes: ManagementRoutesOptions;
}

/** Constant-time comparison of two secrets of any length. */
export function sameSecret(given: string, expected: string): boolean {
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(expected).digest();
  return timingSafeEqual(a, b);
}

/**
 * /admin/v1 under the admin token: one onRequest hook checks
 * `Authorization: Bearer <ADMIN_TOKEN>` before the body is read and sets
 * `req.admin`; failed tokens count towards the per-client limit.
 */
export async function adminTokenPlugin(app: FastifyInstance, opts: AdminTokenPluginOptions): Promise<void> {
  if (opts.adminToken.trim() === '') throw new Error('the admin token is empty');
  app.decorateRequest('admin', null);
  app.addHook('onRequest', async (req: FastifyRequest) => {
    const token = bearerToken(req);
    const refusal = new ApiError('unauthorized', 'send the admin token as Authorization: Bearer <ADMIN_TOKEN>', {
      headers: { 'WWW-Authenticate': 'Bearer' },
    });
    // No credential is not a guess: only a wrong one counts.
    if (token === undefined) throw refusal;
    if (!sameSecret(token, opts.adminToken)) return opts.failures.refuse(req, refusal);
    req.admin = { via: 'admin_token' };
  });
  await app.register(managementRoutes, opts.routes);
}
