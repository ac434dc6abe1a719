import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { DeliveryRecord, DestinationRecord } from '../../schemas/records.ts';
import { ApiError } from '../../shared/http/errors.ts';
import { list, problems } from '../../shared/http/schemas.ts';
import { newId } from '../../shared/ids.ts';
import { firstAttempt, payloadOf } from '../../shared/webhooks/fanout-plan.ts';
import { Destination, DestinationWithSecret } from './admin.schema.ts';
import { CreateDestination, PatchDestination, destinationView, newSecret, withSecret } from './destination-input.ts';
import { TenantParams, adminRoute, destinationOr404, tenantOr404, type WebhookRouteDeps } from './routing.ts';

const errors = problems(401, 404, 409, 422, 429);
const DestinationParams = TenantParams.extend({ destination_id: z.uuid() });
const route = (operationId: string, summary: string, description?: string) => adminRoute('webhooks', operationId, summary, description);

/** Webhook destinations and integrations of a tenant: create, list, get, change, delete, new secret, Test. */
export async function destinationRoutes(root: FastifyInstance, deps: WebhookRouteDeps): Promise<void> {
  const app = root.withTypeProvider<ZodTypeProvider>();
  const now = deps.now ?? Date.now;
  const base = '/tenants/:tenant_id/destinations';

  app.post(
    base,
    {
      schema: {
        ...route(
          'createDestination',
          'Create a webhook destination or an external integration',
          'A webhook gets a generated `whsec_` secret, shown only in this response. An integration uses the `config.webhook_secret` the user entered (it may be empty: such a destination receives nothing and each skipped event is recorded as a security event).',
        ),
        params: TenantParams,
        body: CreateDestination,
        response: { 201: DestinationWithSecret, ...errors },
      },
    },
    async (req, reply) => {
      const tenant = tenantOr404(deps.store, req.params.tenant_id);
      if (deps.store.destinationsOf(tenant.id).length >= deps.MAX_DESTINATIONS_PER_TENANT) {
        throw new ApiError('validation_failed', `a tenant may have at most ${deps.MAX_DESTINATIONS_PER_TENANT} destinations; delete one first`, {
          errors: [{ path: 'tenant_id', message: 'destination limit reached' }],
        });
      }
      const b = req.body;
      const t = now();
      const record: DestinationRecord = {
        id: newId(),
        tenant_id: tenant.id,
        kind: b.kind === 'integration' ? 'integration' : 'webhook',
        name: b.name,
        url: b.url,
        events: b.events ?? [],
        secret_enc: null,
        secret_hint: null,
        created_at: t,
        updated_at: t,
      };
      const secret = b.kind === 'integration' ? (b.config?.webhook_secret ?? '') : newSecret();
      const sealed = withSecret(deps.secrets, record, secret);
      await deps.writer.put('destinations', sealed.id, sealed);
      return reply.code(201).send({ ...destinationView(sealed), secret });
    },
  );

  app.get(
    base,
    { schema: { ...route('listDestinations', 'List destinations (secrets masked)'), params: TenantParams, response: { 200: list(Destination), ...errors } } },
    async (req) => {
      tenantOr404(deps.store, req.params.tenant_id);
      const all = deps.store.destinationsOf(req.params.tenant_id).sort((a, b) => a.created_at - b.created_at);
      return { data: all.map(destinationView), next_cursor: null };
    },
  );

  app.get(
    `${base}/:destination_id`,
    { schema: { ...route('getDestination', 'Get a destination (secret masked)'), params: DestinationParams, response: { 200: Destination, ...errors } } },
    async (req) => destinationView(destinationOr404(deps.store, req.params.tenant_id, req.params.destination_id)),
  );

  app.patch(
    `${base}/:destination_id`,
    {
      schema: {
        ...route('updateDestination', "Change name, URL or selected events (and an integration's webhook_secret)"),
        params: DestinationParams,
        body: PatchDestination,
        response: { 200: Destination, ...errors },
      },
    },
    async (req) => {
      const d = destinationOr404(deps.store, req.params.tenant_id, req.params.destination_id);
      const b = req.body;
      if (b.config && d.kind !== 'integration') throw new ApiError('validation_failed', 'body.config: only integrations have a config; use POST …/secret to regenerate a webhook secret');
      let next: DestinationRecord = { ...d, name: b.name ?? d.name, url: b.url ?? d.url, events: b.events ?? d.events, updated_at: now() };
      if (b.config?.webhook_secret !== undefined) next = withSecret(deps.secrets, next, b.config.webhook_secret);
      await deps.writer.put('destinations', d.id, next);
      return destinationView(next);
    },
  );

  app.delete(
    `${base}/:destination_id`,
    {
      schema: {
        ...route('deleteDestination', 'Delete a destination', 'Deliveries still queued for it end as failed (destination_deleted) when their turn comes.'),
        params: DestinationParams,
        response: { 204: z.null(), ...errors },
      },
    },
    async (req, reply) => {
      const d = destinationOr404(deps.store, req.params.tenant_id, req.params.destination_id);
      await deps.writer.put('destinations', d.id, null);
      return reply.code(204).send(null);
    },
  );

  app.post(
    `${base}/:destination_id/secret`,
    {
      schema: {
        ...route(
          'regenerateDestinationSecret',
          'Regenerate the secret (shown once)',
          'The old secret stops at once: every attempt signs with the secret current at that moment, so deliveries already queued (retries, Test) are signed with the new one.',
        ),
        params: DestinationParams,
        response: { 200: DestinationWithSecret, ...errors },
      },
    },
    async (req) => {
      const d = destinationOr404(deps.store, req.params.tenant_id, req.params.destination_id);
      if (d.kind === 'integration') throw new ApiError('validation_failed', 'an integration uses the webhook_secret entered for it: PATCH config.webhook_secret');
      const secret = newSecret();
      const next = withSecret(deps.secrets, { ...d, updated_at: now() }, secret);
      await deps.writer.put('destinations', d.id, next);
      return { ...destinationView(next), secret };
    },
  );

  app.post(
    `${base}/:destination_id/test`,
    {
      schema: {
        ...route('testDestination', 'Send a test event', 'Queues one `player_loaded` delivery to this destination only; it is attempted at once and retried like any other.'),
        params: DestinationParams,
        response: { 202: z.object({ delivery_id: z.uuid(), event_id: z.uuid(), status: z.literal('pending') }), ...errors },
      },
    },
    async (req, reply) => {
      const d = destinationOr404(deps.store, req.params.tenant_id, req.params.destination_id);
      const delivery = testDelivery(d, deps.store.videosOf(d.tenant_id)[0], now());
      await deps.queue.enqueue(delivery);
      return reply.code(202).send({ delivery_id: delivery.delivery_id, event_id: delivery.event_id, status: 'pending' as const });
    },
  );
}

/** The `player_loaded` delivery a Test sends: about the tenant's first video, if it has one. */
export function testDelivery(d: DestinationRecord, video: { id: string; duration_sec: number } | undefined, t: number): DeliveryRecord {
  const eventId = newId();
  const body = payloadOf({
    tenant_id: d.tenant_id,
    video_id: video?.id ?? '00000000-0000-0000-0000-000000000000',
    session_id: 'ses_test',
    visitor_id: 'vis_test',
    event_name: 'player_loaded',
    current_time: 0,
    duration: video?.duration_sec ?? 0,
    watched_percentage: 0,
    utm_source: null,
    utm_campaign: null,
    ctwa_clid: null,
    external_lead_id: null,
    timestamp: t,
  });
  return firstAttempt(d, { event_id: eventId, event_name: 'player_loaded' }, body, t, 'test');
}
