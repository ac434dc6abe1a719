import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { ConfigStore } from '../../shared/config-store/config-store.ts';
import { cursorCodec } from '../../shared/cursor.ts';
import { readCursor } from '../../shared/http/cursor-param.ts';
import { Problem, isoTime } from '../../shared/http/schemas.ts';
import { SecurityEvent, page } from './admin.schema.ts';
import type { DeliveryLogRepository } from './delivery-log.repository.ts';
import { tenantOr404 } from './lookups.ts';

export interface SecurityEventRoutesOptions {
  store: ConfigStore;
  log: DeliveryLogRepository;
  cursorSecret: string;
}

const errors = { 401: Problem, 404: Problem, 422: Problem, 429: Problem };

/** Deliveries refused for lack of a secret, newest first. */
export async function securityEventRoutes(root: FastifyInstance, deps: SecurityEventRoutesOptions): Promise<void> {
  const app = root.withTypeProvider<ZodTypeProvider>();
  const cursor = cursorCodec('sec', deps.cursorSecret);

  app.get(
    '/tenants/:tenant_id/security-events',
    {
      schema: {
        tags: ['webhooks'],
        summary: 'Security events',
        description: 'Deliveries refused for lack of a secret. Carries the destination host only.',
        security: [{ adminToken: [] }],
        params: z.object({ tenant_id: z.uuid() }),
        querystring: z.object({ cursor: z.string().max(512).optional(), limit: z.coerce.number().int().min(1).max(1000).default(100) }),
        response: { 200: page(SecurityEvent), ...errors },
      },
    },
    async (req) => {
      const tenant = tenantOr404(deps.store, req.params.tenant_id);
      const before = req.query.cursor
        ? readCursor(cursor, req.query.cursor, (p) => (p[0] === tenant.id && typeof p[1] === 'number' && typeof p[2] === 'string' ? { ts: p[1], id: p[2] } : undefined))
        : undefined;
      const rows = await deps.log.securityEvents({ tenantId: tenant.id, before, limit: req.query.limit + 1 });
      const items = rows.slice(0, req.query.limit);
      const last = items.at(-1);
      return {
        data: items.map((e) => ({ id: e.id, kind: e.kind, tenant_id: e.tenant_id, endpoint_id: e.endpoint_id, host: e.host, event_name: e.event_name, occurred_at: isoTime(e.occurred_at) })),
        next_cursor: rows.length > req.query.limit && last ? cursor.encode([tenant.id, last.occurred_at, last.id]) : null,
      };
    },
  );
}
