import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { WEBHOOK_EVENT_NAMES } from '../../shared/event-names.ts';
import { keysetPages } from '../../shared/http/cursor-param.ts';
import { ApiError } from '../../shared/http/errors.ts';
import { isoTime, isoTimeOrNull, page, pageQuery, problems } from '../../shared/http/schemas.ts';
import { Delivery, DeliveryDetail, DeliveryStatus } from './admin.schema.ts';
import type { AttemptRow } from './delivery-log.repository.ts';
import { TenantParams, adminRoute, tenantOr404, type WebhookRouteDeps } from './routing.ts';

const errors = problems(401, 404, 409, 422, 429);
const DeliveryParams = TenantParams.extend({ delivery_id: z.uuid() });
const route = (operationId: string, summary: string, description?: string) => adminRoute('webhooks', operationId, summary, description);

/** A delivery's latest row (its status) and its attempts, from its rows in the log. Pure. */
export function deliveryState(rows: AttemptRow[]): { latest: AttemptRow; attempts: AttemptRow[] } {
  const latest = rows.reduce((a, b) => (b.recorded_at > a.recorded_at || (b.recorded_at === a.recorded_at && b.attempt > a.attempt) ? b : a));
  return { latest, attempts: rows.filter((r) => r.attempt > 0 && r.state !== 'pending') };
}

/** The delivery log: a keyset-paginated list, one delivery with its attempts, reprocessing a failed one. */
export async function deliveryRoutes(root: FastifyInstance, deps: WebhookRouteDeps): Promise<void> {
  const app = root.withTypeProvider<ZodTypeProvider>();
  const now = deps.now ?? Date.now;
  const pages = keysetPages('dlv', deps.cursorSecret);
  const base = '/tenants/:tenant_id/deliveries';

  const detailOf = async (tenantId: string, id: string) => {
    tenantOr404(deps.store, tenantId);
    const found = await deps.log.rows(id);
    if (!found || found.tenant_id !== tenantId) throw new ApiError('not_found', 'no such delivery');
    return { found, ...deliveryState(found.rows) };
  };

  app.get(
    base,
    {
      schema: {
        ...route('listDeliveries', 'Delivery log', 'Newest first, keyset-paginated. Status is exactly one of pending, retrying, succeeded, failed.'),
        params: TenantParams,
        querystring: z.object({
          status: DeliveryStatus.optional(),
          destination_id: z.uuid().optional(),
          event_name: z.enum(WEBHOOK_EVENT_NAMES as [string, ...string[]]).optional(),
          ...pageQuery(100, 1000),
        }),
        response: { 200: page(Delivery), ...errors },
      },
    },
    async (req) => {
      const tenant = tenantOr404(deps.store, req.params.tenant_id);
      const q = req.query;
      // A cursor belongs to the tenant and the filter it was issued for.
      const scope = [tenant.id, q.status ?? '', q.destination_id ?? '', q.event_name ?? ''];
      const before = pages.after(q.cursor, scope);
      const rows = await deps.log.list({ tenantId: tenant.id, status: q.status, destinationId: q.destination_id, eventName: q.event_name, before, limit: q.limit + 1 });
      return pages.page(
        rows,
        q.limit,
        scope,
        (r) => ({ ts: r.created_at, id: r.id }),
        ({ attempts, ...r }) => ({ ...r, attempt_count: attempts, next_attempt_at: isoTimeOrNull(r.next_attempt_at), created_at: isoTime(r.created_at) }),
      );
    },
  );

  app.get(
    `${base}/:delivery_id`,
    { schema: { ...route('getDelivery', 'A delivery with its attempt history'), params: DeliveryParams, response: { 200: DeliveryDetail, ...errors } } },
    async (req) => {
      const { found, latest, attempts } = await detailOf(req.params.tenant_id, req.params.delivery_id);
      return {
        id: req.params.delivery_id,
        destination_id: found.destination_id,
        event_name: found.event_name,
        status: DeliveryStatus.parse(latest.state),
        attempt_count: attempts.length === 0 ? 0 : Math.max(...attempts.map((a) => a.attempt)),
        next_attempt_at: latest.state === 'retrying' ? isoTimeOrNull(latest.next_attempt_at) : null,
        created_at: isoTime(found.created_at),
        attempts: attempts.map((a) => ({
          attempt: a.attempt,
          started_at: isoTimeOrNull(a.started_at),
          duration_ms: a.duration_ms,
          status_code: a.status_code,
          error_class: a.error_class,
          outcome: a.state as 'retrying' | 'succeeded' | 'failed',
          next_attempt_at: isoTimeOrNull(a.next_attempt_at),
        })),
      };
    },
  );

  app.post(
    `${base}/:delivery_id/reprocess`,
    {
      schema: {
        ...route(
          'reprocessDelivery',
          'Reprocess a failed delivery',
          'Only a `failed` delivery (409 otherwise). It becomes `pending` at once, is attempted once more right away with the same delivery id and body (signed afresh), and ends `succeeded`, or `failed` again (no automatic retries after a manual reprocess).',
        ),
        params: DeliveryParams,
        response: { 202: z.object({ id: z.uuid(), status: z.literal('pending') }), ...errors },
      },
    },
    async (req, reply) => {
      const { found, latest, attempts } = await detailOf(req.params.tenant_id, req.params.delivery_id);
      if (latest.state !== 'failed') throw new ApiError('conflict', `only a failed delivery can be reprocessed; this one is ${latest.state}`);
      if (!deps.store.destinations.has(found.destination_id)) throw new ApiError('conflict', 'the destination was deleted');
      await deps.queue.enqueue({
        delivery_id: req.params.delivery_id,
        tenant_id: found.tenant_id,
        destination_id: found.destination_id,
        event_id: latest.event_id,
        event_name: found.event_name,
        body: latest.body,
        attempt: Math.max(0, ...attempts.map((a) => a.attempt)) + 1,
        due_at: now(),
        created_at: found.created_at,
        origin: 'reprocess',
      });
      return reply.code(202).send({ id: req.params.delivery_id, status: 'pending' as const });
    },
  );
}
