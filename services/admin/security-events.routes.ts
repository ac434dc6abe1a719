import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { keysetPages } from '../../shared/http/cursor-param.ts';
import { isoTime, page, pageQuery, problems } from '../../shared/http/schemas.ts';
import { SecurityEvent } from './admin.schema.ts';
import { TenantParams, adminRoute, tenantOr404, type WebhookRouteDeps } from './routing.ts';

/** Deliveries refused for lack of a secret, newest first. */
export async function securityEventRoutes(root: FastifyInstance, deps: WebhookRouteDeps): Promise<void> {
  const app = root.withTypeProvider<ZodTypeProvider>();
  const pages = keysetPages('sec', deps.cursorSecret);

  app.get(
    '/tenants/:tenant_id/security-events',
    {
      schema: {
        ...adminRoute('webhooks', 'listSecurityEvents', 'Security events', 'Deliveries refused for lack of a secret. Carries the destination host only.'),
        params: TenantParams,
        querystring: z.object(pageQuery(100, 1000)),
        response: { 200: page(SecurityEvent), ...problems(401, 404, 422, 429) },
      },
    },
    async (req) => {
      const tenant = tenantOr404(deps.store, req.params.tenant_id);
      const before = pages.after(req.query.cursor, tenant.id);
      const rows = await deps.log.securityEvents({ tenantId: tenant.id, before, limit: req.query.limit + 1 });
      return pages.page(
        rows,
        req.query.limit,
        tenant.id,
        (e) => ({ ts: e.occurred_at, id: e.id }),
        (e) => ({ id: e.id, kind: e.kind, tenant_id: e.tenant_id, endpoint_id: e.endpoint_id, host: e.host, event_name: e.event_name, occurred_at: isoTime(e.occurred_at) }),
      );
    },
  );
}
