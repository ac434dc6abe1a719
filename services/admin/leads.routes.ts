import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { ConfigStore } from '../../shared/config-store/config-store.ts';
import { isoTime, page, pageQuery, problems } from '../../shared/http/schemas.ts';
import { visitorPages, visitorView } from '../api/visitor-pages.ts';
import type { VisitorsRepository } from '../api/visitors.repository.ts';
import type { DeliveryLogRepository } from './delivery-log.repository.ts';
import { LEAD_DELIVERIES, Lead } from './admin.schema.ts';
import { TenantParams, adminRoute, tenantOr404 } from './routing.ts';

export interface LeadRoutesOptions {
  store: ConfigStore;
  visitors: VisitorsRepository;
  log: DeliveryLogRepository;
  cursorSecret: string;
}

/** Leads per page at most: each page also reads its leads' deliveries. */
export const MAX_LEADS_PAGE = 100;

/**
 * The tenant's high-intent leads: visitors whose score is at or above the
 * tenant's threshold, the newest lead first, each with the deliveries sent
 * about its events.
 */
export async function leadRoutes(root: FastifyInstance, deps: LeadRoutesOptions): Promise<void> {
  const app = root.withTypeProvider<ZodTypeProvider>();
  const pages = visitorPages('led', deps.cursorSecret);

  app.get(
    '/tenants/:tenant_id/leads',
    {
      schema: {
        ...adminRoute(
          'management',
          'listLeads',
          'High-intent leads',
          "Visitors whose Lead Intent Score is at or above the tenant's high_intent_threshold, newest lead first (lead_at, or last_seen for a visitor above a threshold lowered after its events), ties by visitor_id; keyset-paginated. Each carries its newest deliveries (webhooks sent about its events).",
        ),
        params: TenantParams,
        querystring: z.object(pageQuery(50, MAX_LEADS_PAGE)),
        response: { 200: page(Lead), ...problems(401, 404, 422, 429, 503) },
      },
    },
    async (req) => {
      const tenant = tenantOr404(deps.store, req.params.tenant_id);
      const threshold = tenant.high_intent_threshold;
      // The threshold is in the scope: a cursor of another threshold's list is refused.
      const scope = [tenant.id, threshold];
      const after = pages.after(req.query.cursor, scope);
      const rows = await deps.visitors.list({ tenantId: tenant.id, order: 'lead', minScore: threshold, after, limit: req.query.limit + 1 });
      const shown = rows.slice(0, req.query.limit);
      const byVisitor = Map.groupBy(await deps.log.ofVisitors(tenant.id, shown.map((v) => v.visitor_id), LEAD_DELIVERIES), (d) => d.visitor_id);
      return pages.page(rows, req.query.limit, scope, (v) => ({
        ...visitorView(v),
        deliveries: (byVisitor.get(v.visitor_id) ?? []).map((d) => ({
          id: d.id,
          destination_id: d.destination_id,
          event_name: d.event_name,
          status: d.status,
          attempt_count: d.attempts,
          created_at: isoTime(d.created_at),
        })),
      }));
    },
  );
}
