import type { FastifyInstance } from 'fastify';
import type { ApiKeyAuth } from '../../shared/http/api-key-auth.ts';
import { readApiRoutes, type ReadApiRoutesOptions } from './read-api.routes.ts';

export interface ReadApiPluginOptions extends ReadApiRoutesOptions {
  authenticate: ApiKeyAuth;
}

/**
 * /v1 under API-key auth: one onRequest hook for every route of the
 * context authenticates the key and sets `req.principal` (the tenant and
 * key). The per-key rate limit (shared/http/plugins/rate-limit.ts) then counts it.
 * Encapsulated: the hook applies to these routes only.
 */
export async function readApiPlugin(app: FastifyInstance, opts: ReadApiPluginOptions): Promise<void> {
  app.decorateRequest('principal', null);
  app.addHook('onRequest', opts.authenticate);
  await app.register(readApiRoutes, { store: opts.store, events: opts.events, analytics: opts.analytics, visitors: opts.visitors, cursorSecret: opts.cursorSecret });
}
