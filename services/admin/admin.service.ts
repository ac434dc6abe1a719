import type { ConfigStore, ConfigWriter } from '../../shared/config-store/config-store.ts';
import type { App } from '../../shared/http/app.ts';
import { failedAttemptLimit, type FailedAttemptLimit } from '../../shared/http/failed-attempts.ts';
import type { AnalyticsRepository } from '../api/analytics.repository.ts';
import type { VisitorsRepository } from '../api/visitors.repository.ts';
import { adminTokenPlugin } from './admin-token.plugin.ts';
import type { ManagementRoutesOptions } from './management.routes.ts';
import type { WebhookAdminOptions } from './webhooks.routes.ts';

export interface AdminDeps {
  app: App;
  store: ConfigStore;
  writer: ConfigWriter;
  adminToken: string;
  /** Destinations, delivery log, reprocessing, security events. */
  webhooks: WebhookAdminOptions;
  analytics: AnalyticsRepository;
  visitors: VisitorsRepository;
  now?: () => number;
  intakeLimits: ManagementRoutesOptions['intakeLimits'];
}

/** Failed admin tokens (here and at the dashboard's sign-in together) a client may send in a window. */
export const ADMIN_AUTH_FAILURES = { max: 20, windowMs: 60_000 };

/**
 * The management API under /admin/v1 (admin token). Returns the routes'
 * options and the shared failed-attempt limit, so the dashboard mounts the
 * same routes under its session.
 */
export function startAdmin(deps: AdminDeps): { stop(): Promise<void>; routes: ManagementRoutesOptions; failures: FailedAttemptLimit } {
  const failures = failedAttemptLimit(deps.app, { name: 'admin-auth', ...ADMIN_AUTH_FAILURES });
  const routes: ManagementRoutesOptions = {
    store: deps.store,
    writer: deps.writer,
    webhooks: deps.webhooks,
    analytics: deps.analytics,
    visitors: deps.visitors,
    now: deps.now,
    intakeLimits: deps.intakeLimits,
  };
  void deps.app.register(adminTokenPlugin, { prefix: '/admin/v1', adminToken: deps.adminToken, failures, routes });
  return { async stop() {}, routes, failures };
}
