import type { ConfigStore } from '../../shared/config-store/config-store.ts';
import type { App } from '../../shared/http/app.ts';
import type { ApiKeyAuth } from '../../shared/http/api-key-auth.ts';
import type { EventsReads, VisitorsReads } from './cached-reads.ts';
import type { AnalyticsRepository } from './analytics.repository.ts';
import { readApiPlugin } from './read-api.plugin.ts';

export interface ApiDeps {
  app: App;
  store: ConfigStore;
  events: EventsReads;
  analytics: AnalyticsRepository;
  visitors: VisitorsReads;
  cursorSecret: string;
  apiKeyAuth: ApiKeyAuth;
}

/** The read API of spec 4.1–4.3 under /v1, API-key auth, tenant-scoped. */
export function startApi(deps: ApiDeps): { stop(): Promise<void> } {
  void deps.app.register(readApiPlugin, {
    prefix: '/v1',
    authenticate: deps.apiKeyAuth,
    store: deps.store,
    events: deps.events,
    analytics: deps.analytics,
    visitors: deps.visitors,
    cursorSecret: deps.cursorSecret,
  });
  return { async stop() {} };
}
