import type { App } from '../../shared/http/app.ts';
import { failedAttemptLimit, type FailedAttemptLimit } from '../../shared/http/failed-attempts.ts';
import { adminTokenPlugin } from './admin-token.plugin.ts';
import type { ManagementRoutesOptions } from './management.routes.ts';

/** The management routes' options (the repositories, the webhook parts, the intake limits), the app and the admin token. */
export type AdminDeps = ManagementRoutesOptions & { app: App; adminToken: string };

/** Failed admin tokens (here and at the dashboard's sign-in together) a client may send in a window. */
export const ADMIN_AUTH_FAILURES = { max: 20, windowMs: 60_000 };

/**
 * The management API under /admin/v1 (admin token). Returns the routes'
 * options and the shared failed-attempt limit, so the dashboard mounts the
 * same routes under its session.
 */
export function startAdmin(deps: AdminDeps): { stop(): Promise<void>; routes: ManagementRoutesOptions; failures: FailedAttemptLimit } {
  const { app, adminToken, ...routes } = deps;
  const failures = failedAttemptLimit(app, { name: 'admin-auth', ...ADMIN_AUTH_FAILURES });
  void app.register(adminTokenPlugin, { prefix: '/admin/v1', adminToken, failures, routes });
  return { async stop() {}, routes, failures };
}
