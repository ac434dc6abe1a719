import { randomBytes } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Message, Producer } from 'kafkajs';
import { z } from 'zod';
import type { DeliveryRecord, DestinationRecord, TenantRecord } from '../../schemas/records.ts';
import type { SchemaRegistry } from '../../schemas/registry.ts';
import type { ConfigStore, ConfigWriter } from '../../shared/config-store/config-store.ts';
import { cursorCodec } from '../../shared/cursor.ts';
import { readCursor } from '../../shared/http/cursor-param.ts';
import { WEBHOOK_EVENT_NAMES } from '../../shared/event-names.ts';
import type { App } from '../../shared/http/app.ts';
import { Problem, isoTime, isoTimeOrNull } from '../../shared/http/schemas.ts';
import { ApiError } from '../../shared/http/errors.ts';
import { newId } from '../../shared/ids.ts';
import type { Topics } from '../../shared/kafka/topics.ts';
import { type SecretBox, secretHint } from '../../shared/secrets.ts';
import { attemptRecord, deliveryId, payloadOf } from '../../shared/webhooks/fanout-plan.ts';
import type { DeliveryLogRepository } from './delivery-log.repository.ts';

export interface WebhookAdminDeps {
  app: App;
  store: ConfigStore;
  writer: ConfigWriter;
  registry: SchemaRegistry;
  producer: Producer;
  topics: Topics;
  secrets: SecretBox;
  log: DeliveryLogRepository;
  cursorSecret: string;
  authenticate: (req: FastifyRequest) => Promise<void>;
  /** The tenant of a path, or 404. */
  tenantOr404: (id: string) => TenantRecord;
  /** Most destinations one tenant may have (MAX_DESTINATIONS_PER_TENANT). */
  maxDestinationsPerTenant: number;
  now?: () => number;
}

const errors = { 401: Problem, 404: Problem, 409: Problem, 422: Problem };

const EventNames = z
  .array(z.enum(WEBHOOK_EVENT_NAMES as [string, ...string[]], { error: () => `unknown event name; expected one of ${WEBHOOK_EVENT_NAMES.join(', ')}` }))
  .max(WEBHOOK_EVENT_NAMES.length * 2)
  .transform((list) => [...new Set(list)])
  .meta({ description: 'Event names of spec 6.1 to receive (coming-soon names may be selected); absent or empty: every active event' });
const HttpsUrl = z
  .url({ protocol: /^https$/, error: 'must be an https:// URL' })
  .max(2048)
  .refine((u) => !new URL(u).username && !new URL(u).password, 'must not carry credentials');
const Name = z.string().trim().min(1).max(200);

const CreateDestination = z.union([
  z.object({ kind: z.literal('webhook').optional(), name: Name, url: HttpsUrl, events: EventNames.optional() }).strict(),
  z
    .object({
      kind: z.literal('integration'),
      name: Name,
      url: HttpsUrl,
      events: EventNames.optional(),
      config: z.object({ webhook_secret: z.string().max(1024).optional() }).strict(),
    })
    .strict(),
]);
const PatchDestination = z
  .object({
    name: Name.optional(),
    url: HttpsUrl.optional(),
    events: EventNames.optional(),
    config: z.object({ webhook_secret: z.string().max(1024).optional() }).strict().optional(),
  })
  .strict();

const Destination = z
  .object({
    id: z.uuid(),
    kind: z.enum(['webhook', 'integration']),
    name: z.string(),
    url: z.string(),
    events: z.array(z.string()),
    secret_masked: z.string().nullable().meta({ description: 'Prefix and last characters only; null when there is no secret' }),
    created_at: z.string(),
    updated_at: z.string(),
  })
  .meta({ id: 'Destination' });
const DestinationWithSecret = Destination.extend({ secret: z.string().meta({ description: 'Shown only in this response' }) }).meta({ id: 'DestinationWithSecret' });
const DeliveryStatus = z.enum(['pending', 'retrying', 'succeeded', 'failed']);
const Delivery = z
  .object({
    id: z.uuid(),
    destination_id: z.uuid(),
    event_name: z.string(),
    status: DeliveryStatus,
    attempt_count: z.number().int().meta({ description: 'Attempts made so far' }),
    next_attempt_at: z.string().nullable(),
    created_at: z.string(),
  })
  .meta({ id: 'Delivery' });
const Attempt = z.object({
  attempt: z.number().int(),
  started_at: z.string().nullable(),
  duration_ms: z.number().int().nullable(),
  status_code: z.number().int().nullable(),
  error_class: z.string().nullable(),
  outcome: z.enum(['retrying', 'succeeded', 'failed']),
  next_attempt_at: z.string().nullable(),
});
const DeliveryDetail = Delivery.extend({ attempts: z.array(Attempt) }).meta({ id: 'DeliveryDetail' });
const SecurityEvent = z
  .object({
    id: z.uuid(),
    kind: z.string(),
    tenant_id: z.uuid(),
    endpoint_id: z.uuid(),
    host: z.string(),
    event_name: z.string().nullable(),
    occurred_at: z.string(),
  })
  .meta({ id: 'SecurityEvent' });

const TenantParams = z.object({ tenant_id: z.uuid() });
const DestinationParams = TenantParams.extend({ destination_id: z.uuid() });
const DeliveryParams = TenantParams.extend({ delivery_id: z.uuid() });
const limit = z.coerce.number().int().min(1).max(1000).default(100);
const cursor = z.string().max(512).optional();

const newSecret = () => `whsec_${randomBytes(24).toString('base64url')}`;

/**
 * Webhook destinations, the delivery log, reprocessing and security events
 * under /admin/v1/tenants/:tenant_id (admin token).
 */
export function registerWebhookAdmin(deps: WebhookAdminDeps): void {
  const app = deps.app.withTypeProvider<ZodTypeProvider>();
  const now = deps.now ?? Date.now;
  const deliveryCursor = cursorCodec('dlv', deps.cursorSecret);
  const securityCursor = cursorCodec('sec', deps.cursorSecret);
  const route = (summary: string, description?: string) => ({
    tags: ['webhooks'],
    summary,
    ...(description ? { description } : {}),
    security: [{ adminToken: [] }],
  });
  const pre = { preValidation: deps.authenticate };

  const { tenantOr404 } = deps;
  const destinationOr404 = (tenantId: string, id: string): DestinationRecord => {
    tenantOr404(tenantId);
    const d = deps.store.destinations.get(id);
    if (!d || d.tenant_id !== tenantId) throw new ApiError('not_found', 'no such destination');
    return d;
  };
  const view = (d: DestinationRecord) => ({
    id: d.id,
    kind: d.kind,
    name: d.name,
    url: d.url,
    events: d.events,
    secret_masked: d.secret_hint,
    created_at: isoTime(d.created_at),
    updated_at: isoTime(d.updated_at),
  });
  const withSecret = (d: DestinationRecord, secret: string): DestinationRecord => ({
    ...d,
    secret_enc: secret ? deps.secrets.seal(secret, d.id) : null,
    secret_hint: secret ? secretHint(secret) : null,
  });
  const pendingRecord = (d: DeliveryRecord): Message => ({
    key: d.delivery_id,
    value: deps.registry.encode('webhook-attempt', attemptRecord(d, now(), { state: 'pending' })),
  });
  /**
   * Queues a delivery for an attempt now (webhooks.manual.v1), logs it as
   * pending, and returns once the log shows it (or its attempt), so the next
   * read of the delivery sees it pending and a second reprocess gets 409.
   */
  const enqueue = async (d: DeliveryRecord) => {
    const queuedAt = now();
    const pending = pendingRecord(d);
    await deps.producer.sendBatch({
      acks: -1,
      topicMessages: [
        { topic: deps.topics.webhookAttempts, messages: [pending] },
        { topic: deps.topics.webhooksManual, messages: [{ key: d.delivery_id, value: deps.registry.encode('delivery', d) }] },
      ],
    });
    const deadline = Date.now() + 5000;
    while (Date.now() < deadline) {
      const found = await deps.log.rows(d.delivery_id);
      if (found?.rows.some((r) => r.recorded_at >= queuedAt && (r.state === 'pending' || r.attempt >= d.attempt))) return;
      await new Promise((r) => setTimeout(r, 50));
    }
  };

  const base = '/admin/v1/tenants/:tenant_id';

  app.post(
    `${base}/destinations`,
    {
      schema: {
        ...route(
          'Create a webhook destination or an external integration',
          'A webhook gets a generated `whsec_` secret, shown only in this response. An integration uses the `config.webhook_secret` the user entered (it may be empty: such a destination receives nothing and each skipped event is recorded as a security event).',
        ),
        params: TenantParams,
        body: CreateDestination,
        response: { 201: DestinationWithSecret, ...errors },
      },
      ...pre,
    },
    async (req, reply) => {
      const tenant = tenantOr404(req.params.tenant_id);
      if (deps.store.destinationsOf(tenant.id).length >= deps.maxDestinationsPerTenant) {
        throw new ApiError('validation_failed', `a tenant may have at most ${deps.maxDestinationsPerTenant} destinations; delete one first`, {
          errors: [{ path: 'tenant_id', message: 'destination limit reached' }],
        });
      }
      const b = req.body;
      const t = now();
      const base: DestinationRecord = {
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
      const secret = 'config' in b ? (b.config.webhook_secret ?? '') : newSecret();
      const record = withSecret(base, secret);
      await deps.writer.put('destinations', record.id, record);
      return reply.code(201).send({ ...view(record), secret });
    },
  );

  app.get(
    `${base}/destinations`,
    { schema: { ...route('List destinations (secrets masked)'), params: TenantParams, response: { 200: z.object({ data: z.array(Destination), next_cursor: z.null() }), ...errors } }, ...pre },
    async (req) => {
      tenantOr404(req.params.tenant_id);
      const list = deps.store.destinationsOf(req.params.tenant_id).sort((a, b) => a.created_at - b.created_at);
      return { data: list.map(view), next_cursor: null };
    },
  );

  app.get(
    `${base}/destinations/:destination_id`,
    { schema: { ...route('Get a destination (secret masked)'), params: DestinationParams, response: { 200: Destination, ...errors } }, ...pre },
    async (req) => view(destinationOr404(req.params.tenant_id, req.params.destination_id)),
  );

  app.patch(
    `${base}/destinations/:destination_id`,
    {
      schema: {
        ...route('Change name, URL or selected events (and an integration\'s webhook_secret)'),
        params: DestinationParams,
        body: PatchDestination,
        response: { 200: Destination, ...errors },
      },
      ...pre,
    },
    async (req) => {
      const d = destinationOr404(req.params.tenant_id, req.params.destination_id);
      const b = req.body;
      if (b.config && d.kind !== 'integration') throw new ApiError('validation_failed', 'body.config: only integrations have a config; use POST …/secret to regenerate a webhook secret');
      let next: DestinationRecord = { ...d, name: b.name ?? d.name, url: b.url ?? d.url, events: b.events ?? d.events, updated_at: now() };
      if (b.config?.webhook_secret !== undefined) next = withSecret(next, b.config.webhook_secret);
      await deps.writer.put('destinations', d.id, next);
      return view(next);
    },
  );

  app.delete(
    `${base}/destinations/:destination_id`,
    { schema: { ...route('Delete a destination', 'Deliveries still queued for it end as failed (destination_deleted) when their turn comes.'), params: DestinationParams, response: { 204: z.null(), ...errors } }, ...pre },
    async (req, reply) => {
      const d = destinationOr404(req.params.tenant_id, req.params.destination_id);
      await deps.writer.put('destinations', d.id, null);
      return reply.code(204).send(null);
    },
  );

  app.post(
    `${base}/destinations/:destination_id/secret`,
    {
      schema: {
        ...route(
          'Regenerate the secret (shown once)',
          'The old secret stops at once: every attempt signs with the secret current at that moment, so deliveries already queued (retries, Test) are signed with the new one.',
        ),
        params: DestinationParams,
        response: { 200: DestinationWithSecret, ...errors },
      },
      ...pre,
    },
    async (req) => {
      const d = destinationOr404(req.params.tenant_id, req.params.destination_id);
      if (d.kind === 'integration') throw new ApiError('validation_failed', 'an integration uses the webhook_secret entered for it: PATCH config.webhook_secret');
      const secret = newSecret();
      const next = withSecret({ ...d, updated_at: now() }, secret);
      await deps.writer.put('destinations', d.id, next);
      return { ...view(next), secret };
    },
  );

  app.post(
    `${base}/destinations/:destination_id/test`,
    {
      schema: {
        ...route('Send a test event', 'Queues one `player_loaded` delivery to this destination only; it is attempted at once and retried like any other.'),
        params: DestinationParams,
        response: { 202: z.object({ delivery_id: z.uuid(), event_id: z.uuid(), status: z.literal('pending') }), ...errors },
      },
      ...pre,
    },
    async (req, reply) => {
      const d = destinationOr404(req.params.tenant_id, req.params.destination_id);
      const t = now();
      const eventId = newId();
      const video = deps.store.videosOf(d.tenant_id)[0];
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
      const delivery: DeliveryRecord = {
        delivery_id: deliveryId(eventId, d.id),
        tenant_id: d.tenant_id,
        destination_id: d.id,
        event_id: eventId,
        event_name: 'player_loaded',
        body,
        attempt: 1,
        due_at: t,
        created_at: t,
        origin: 'test',
      };
      await enqueue(delivery);
      return reply.code(202).send({ delivery_id: delivery.delivery_id, event_id: eventId, status: 'pending' as const });
    },
  );

  app.get(
    `${base}/deliveries`,
    {
      schema: {
        ...route('Delivery log', 'Newest first, keyset-paginated. Status is exactly one of pending, retrying, succeeded, failed.'),
        params: TenantParams,
        querystring: z.object({
          status: DeliveryStatus.optional(),
          destination_id: z.uuid().optional(),
          event_name: z.enum(WEBHOOK_EVENT_NAMES as [string, ...string[]]).optional(),
          cursor,
          limit,
        }),
        response: { 200: z.object({ data: z.array(Delivery), next_cursor: z.string().nullable() }), ...errors },
      },
      ...pre,
    },
    async (req) => {
      const tenant = tenantOr404(req.params.tenant_id);
      const q = req.query;
      const filter = [q.status ?? '', q.destination_id ?? '', q.event_name ?? ''];
      const before = q.cursor
        ? readCursor(deliveryCursor, q.cursor, (p) =>
            p[0] === tenant.id && JSON.stringify(p[1]) === JSON.stringify(filter) && typeof p[2] === 'number' && typeof p[3] === 'string'
              ? { createdAt: p[2], id: p[3] }
              : undefined,
          )
        : undefined;
      const rows = await deps.log.list({ tenantId: tenant.id, status: q.status, destinationId: q.destination_id, eventName: q.event_name, before, limit: q.limit + 1 });
      const page = rows.slice(0, q.limit);
      const last = page.at(-1);
      return {
        data: page.map(({ attempts, ...r }) => ({ ...r, attempt_count: attempts, next_attempt_at: isoTimeOrNull(r.next_attempt_at), created_at: isoTime(r.created_at) })),
        next_cursor: rows.length > q.limit && last ? deliveryCursor.encode([tenant.id, filter, last.created_at, last.id]) : null,
      };
    },
  );

  const detailOf = async (tenantId: string, id: string) => {
    tenantOr404(tenantId);
    const found = await deps.log.rows(id);
    if (!found || found.tenant_id !== tenantId) throw new ApiError('not_found', 'no such delivery');
    const latest = found.rows.reduce((a, b) => (b.recorded_at > a.recorded_at || (b.recorded_at === a.recorded_at && b.attempt > a.attempt) ? b : a));
    const attempts = found.rows.filter((r) => r.attempt > 0 && r.state !== 'pending');
    return { found, latest, attempts };
  };

  app.get(
    `${base}/deliveries/:delivery_id`,
    {
      schema: { ...route('A delivery with its attempt history'), params: DeliveryParams, response: { 200: DeliveryDetail, ...errors } },
      ...pre,
    },
    async (req) => {
      const { found, latest, attempts } = await detailOf(req.params.tenant_id, req.params.delivery_id);
      return {
        id: req.params.delivery_id,
        destination_id: found.destination_id,
        event_name: found.event_name,
        status: latest.state as z.infer<typeof DeliveryStatus>,
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
    `${base}/deliveries/:delivery_id/reprocess`,
    {
      schema: {
        ...route(
          'Reprocess a failed delivery',
          'Only a `failed` delivery (409 otherwise). It becomes `pending` at once, is attempted once more right away with the same delivery id and body (signed afresh), and ends `succeeded`, or `failed` again (no automatic retries after a manual reprocess).',
        ),
        params: DeliveryParams,
        response: { 202: z.object({ id: z.uuid(), status: z.literal('pending') }), ...errors },
      },
      ...pre,
    },
    async (req, reply) => {
      const { found, latest, attempts } = await detailOf(req.params.tenant_id, req.params.delivery_id);
      if (latest.state !== 'failed') throw new ApiError('conflict', `only a failed delivery can be reprocessed; this one is ${latest.state}`);
      if (!deps.store.destinations.has(found.destination_id)) throw new ApiError('conflict', 'the destination was deleted');
      const t = now();
      await enqueue({
        delivery_id: req.params.delivery_id,
        tenant_id: found.tenant_id,
        destination_id: found.destination_id,
        event_id: latest.event_id,
        event_name: found.event_name,
        body: latest.body,
        attempt: Math.max(0, ...attempts.map((a) => a.attempt)) + 1,
        due_at: t,
        created_at: found.created_at,
        origin: 'reprocess',
      });
      return reply.code(202).send({ id: req.params.delivery_id, status: 'pending' as const });
    },
  );

  app.get(
    `${base}/security-events`,
    {
      schema: {
        ...route('Security events', 'Deliveries refused for lack of a secret. Carries the destination host only.'),
        params: TenantParams,
        querystring: z.object({ cursor, limit }),
        response: { 200: z.object({ data: z.array(SecurityEvent), next_cursor: z.string().nullable() }), ...errors },
      },
      ...pre,
    },
    async (req) => {
      const tenant = tenantOr404(req.params.tenant_id);
      const before = req.query.cursor
        ? readCursor(securityCursor, req.query.cursor, (p) => (p[0] === tenant.id && typeof p[1] === 'number' && typeof p[2] === 'string' ? { ts: p[1], id: p[2] } : undefined))
        : undefined;
      const rows = await deps.log.securityEvents({ tenantId: tenant.id, before, limit: req.query.limit + 1 });
      const page = rows.slice(0, req.query.limit);
      const last = page.at(-1);
      return {
        data: page.map((e) => ({ id: e.id, kind: e.kind, tenant_id: e.tenant_id, endpoint_id: e.endpoint_id, host: e.host, event_name: e.event_name, occurred_at: isoTime(e.occurred_at) })),
        next_cursor: rows.length > req.query.limit && last ? securityCursor.encode([tenant.id, last.occurred_at, last.id]) : null,
      };
    },
  );

}
