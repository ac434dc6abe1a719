import type { App } from '../../shared/http/app.ts';
import { readApiRoutes, type ReadApiRoutesOptions } from './read-api.routes.ts';

export interface ApiDeps extends ReadApiRoutesOptions {
  app: App;
}

/** The read API of spec 4.1–4.3 under /v1, API-key auth, tenant-scoped. */
export function startApi({ app, ...routes }: ApiDeps): { stop(): Promise<void> } {
  void app.register(readApiRoutes, { prefix: '/v1', ...routes });
  return { async stop() {} };
}
