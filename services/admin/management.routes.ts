import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { ApiKeyRecord, TenantRecord, VideoRecord } from '../../schemas/records.ts';
import type { Config } from '../../shared/config.ts';
import type { ConfigStore, ConfigWriter } from '../../shared/config-store/config-store.ts';
import { normaliseOrigin } from '../../shared/http/origins.ts';
import { DisplayName, isoTime, isoTimeOrNull, list, problems } from '../../shared/http/schemas.ts';
import { hashApiKey, keyPrefix, newApiKey, newId, newPlayerKey, parseVideoId } from '../../shared/ids.ts';
import type { AnalyticsRepository } from '../api/analytics.repository.ts';
import type { VisitorsRepository } from '../api/visitors.repository.ts';
import { analyticsRoutes } from '../api/analytics.routes.ts';
import { videoView } from '../api/read-api.routes.ts';
import { DEFAULT_HIGH_INTENT_THRESHOLD, DEFAULT_OFFER_WINDOW_SEC } from '../../schemas/intent-settings.ts';
import {
  AdminVideo,
  ApiKey,
  ApiKeyCreated,
  CreateTenant,
  CreateVideo,
  DEFAULT_PLAYER_KEY_OVERLAP_S,
  MAX_ALLOWED_ORIGINS,
  MAX_PLAYER_KEY_OVERLAP_S,
  PatchTenant,
  PatchVideo,
  Tenant,
} from './admin.schema.ts';
import { TenantParams, adminRoute, ownedOr404, tenantOr404, type WebhookAdminOptions } from './routing.ts';
import { leadRoutes } from './leads.routes.ts';
import { deliveryRoutes } from './deliveries.routes.ts';
import { DeliveryQueue } from './delivery-queue.ts';
import { destinationRoutes } from './destinations.routes.ts';
import { securityEventRoutes } from './security-events.routes.ts';

export interface ManagementRoutesOptions {
  store: ConfigStore;
  writer: ConfigWriter;
  /** Destinations, delivery log, reprocessing, security events. */
  webhooks: WebhookAdminOptions;
  analytics: AnalyticsRepository;
  /** The visitor read model (leads). */
  visitors: VisitorsRepository;
  now?: () => number;
  /** The player intake's limits, shown with each tenant. */
  intakeLimits: Pick<Config, 'PLAYER_KEY_EVENTS_PER_MINUTE' | 'CLIENT_ADDRESS_REQUESTS_PER_MINUTE'>;
}

const errors = problems(401, 404, 422, 429);
const KeyParams = TenantParams.extend({ key_id: z.uuid() });
const VideoIdParam = z.string().refine((v) => parseVideoId(v) !== undefined, 'must be vid_<32 hex> or a UUID');
const TenantVideoParams = TenantParams.extend({ video_id: VideoIdParam });
const route = (operationId: string, summary: string, description?: string) => adminRoute('management', operationId, summary, description);

/** A video as the management API shows it: the read API's view and its intent settings. */
export const adminVideoView = (v: VideoRecord) => ({ ...videoView(v), pitch_at_sec: v.pitch_at_sec, offer_window_sec: v.offer_window_sec });

/**
 * The management API (the dashboard's back end), relative to its mount
 * point: /admin/v1 under the admin token (admin-token.plugin.ts) and
 * /dashboard/api under a dashboard session (dashboard.plugin.ts). Every
 * change is a record on a compacted config topic; a call returns once this
 * process's config store has applied it.
 */
export async function managementRoutes(root: FastifyInstance, deps: ManagementRoutesOptions): Promise<void> {
  const app = root.withTypeProvider<ZodTypeProvider>();
  const now = deps.now ?? Date.now;
  const limits = {
    player_key_events_per_minute: deps.intakeLimits.PLAYER_KEY_EVENTS_PER_MINUTE,
    client_address_requests_per_minute: deps.intakeLimits.CLIENT_ADDRESS_REQUESTS_PER_MINUTE,
  };
  const tenantView = (t: TenantRecord) => {
    // A previous key past its overlap is refused, so it is no longer shown.
    const previous = t.previous_player_key !== null && t.previous_player_key_expires_at !== null && now() < t.previous_player_key_expires_at;
    return {
      id: t.id,
      name: t.name,
      player_key: t.player_key,
      created_at: isoTime(t.created_at),
      allowed_origins: t.allowed_origins,
      previous_player_key: previous ? t.previous_player_key : null,
      previous_player_key_expires_at: previous ? isoTime(t.previous_player_key_expires_at!) : null,
      suspended_at: isoTimeOrNull(t.suspended_at),
      high_intent_threshold: t.high_intent_threshold,
      limits,
    };
  };
  /** The tenant's video of a path, or 404 (also for another tenant's). */
  const videoOf = (tenantId: string, rawVideoId: string): VideoRecord => ownedOr404(deps.store, tenantId, deps.store.videos.get(parseVideoId(rawVideoId)!), 'video');
  const putTenant = async (t: TenantRecord) => {
    await deps.writer.put('tenants', t.id, t);
    return tenantView(t);
  };
  const keyView = (k: ApiKeyRecord) => ({
    id: k.id,
    name: k.name,
    prefix: k.prefix,
    created_at: isoTime(k.created_at),
    last_used_at: isoTimeOrNull(deps.store.usage.get(k.id) ?? null),
    revoked_at: isoTimeOrNull(k.revoked_at),
  });

  app.post(
    '/tenants',
    { schema: { ...route('createTenant', 'Create a tenant'), body: CreateTenant, response: { 201: Tenant, ...errors } } },
    async (req, reply) => {
      const tenant: TenantRecord = {
        id: newId(),
        name: req.body.name,
        player_key: newPlayerKey(),
        created_at: now(),
        allowed_origins: [],
        previous_player_key: null,
        previous_player_key_expires_at: null,
        suspended_at: null,
        high_intent_threshold: req.body.high_intent_threshold ?? DEFAULT_HIGH_INTENT_THRESHOLD,
      };
      return reply.code(201).send(await putTenant(tenant));
    },
  );

  app.get(
    '/tenants',
    { schema: { ...route('listTenants', 'List tenants'), response: { 200: list(Tenant), ...errors } } },
    async () => ({
      data: [...deps.store.tenants.values()].sort((a, b) => a.created_at - b.created_at).map(tenantView),
      next_cursor: null,
    }),
  );

  app.get(
    '/tenants/:tenant_id',
    { schema: { ...route('getTenant', 'Get a tenant'), params: TenantParams, response: { 200: Tenant, ...errors } } },
    async (req) => tenantView(tenantOr404(deps.store, req.params.tenant_id)),
  );

  app.patch(
    '/tenants/:tenant_id',
    {
      schema: {
        ...route(
          'updateTenant',
          "Change a tenant's settings",
          '`high_intent_threshold`: the Lead Intent Score (0–100) at or above which a visitor counts as a high-intent lead. Fields left out keep their value.',
        ),
        params: TenantParams,
        body: PatchTenant,
        response: { 200: Tenant, ...errors },
      },
    },
    async (req) => {
      const tenant = tenantOr404(deps.store, req.params.tenant_id);
      return putTenant({ ...tenant, high_intent_threshold: req.body.high_intent_threshold ?? tenant.high_intent_threshold });
    },
  );

  app.post(
    '/tenants/:tenant_id/player-key/rotate',
    {
      schema: {
        ...route(
          'rotatePlayerKey',
          'Rotate the player key',
          'Issues a new player key. The previous key keeps working for `overlap_seconds` (default 24 h; 0 retires it at once), then is refused 401. A rotation during an overlap retires the key before the previous one at once.',
        ),
        params: TenantParams,
        body: z
          .object({
            overlap_seconds: z
              .number()
              .int()
              .min(0)
              .max(MAX_PLAYER_KEY_OVERLAP_S)
              .optional()
              .meta({ description: `How long the previous key keeps working (default ${DEFAULT_PLAYER_KEY_OVERLAP_S} s)` }),
          })
          .nullish(),
        response: { 200: Tenant, ...errors },
      },
    },
    async (req) => {
      const tenant = tenantOr404(deps.store, req.params.tenant_id);
      const overlapMs = (req.body?.overlap_seconds ?? DEFAULT_PLAYER_KEY_OVERLAP_S) * 1000;
      return putTenant({ ...tenant, player_key: newPlayerKey(), previous_player_key: tenant.player_key, previous_player_key_expires_at: now() + overlapMs });
    },
  );

  app.post(
    '/tenants/:tenant_id/suspend',
    {
      schema: {
        ...route(
          'suspendTenant',
          'Suspend a tenant',
          "Refuses the tenant's player key and API keys (403 tenant_suspended) on intake and reads until it is resumed. Its data and settings stay.",
        ),
        params: TenantParams,
        response: { 200: Tenant, ...errors },
      },
    },
    async (req) => {
      const tenant = tenantOr404(deps.store, req.params.tenant_id);
      return tenant.suspended_at !== null ? tenantView(tenant) : putTenant({ ...tenant, suspended_at: now() });
    },
  );

  app.post(
    '/tenants/:tenant_id/resume',
    { schema: { ...route('resumeTenant', 'Resume a suspended tenant'), params: TenantParams, response: { 200: Tenant, ...errors } } },
    async (req) => {
      const tenant = tenantOr404(deps.store, req.params.tenant_id);
      return tenant.suspended_at === null ? tenantView(tenant) : putTenant({ ...tenant, suspended_at: null });
    },
  );

  app.put(
    '/tenants/:tenant_id/allowed-origins',
    {
      schema: {
        ...route(
          'setAllowedOrigins',
          'Set the origins a browser may send the player key from',
          'A browser request to /v1/collect whose Origin is not on the list is refused 403 origin_not_allowed; an empty list allows any. Requests without Origin (scripts, servers) are not affected: the list keeps other sites from embedding the key, it does not keep scripts from using it.',
        ),
        params: TenantParams,
        body: z.object({
          allowed_origins: z
            .array(
              z.string().max(300).refine((o) => normaliseOrigin(o) !== undefined, 'must be an origin: http(s)://host[:port], without a path'),
            )
            .max(MAX_ALLOWED_ORIGINS),
        }),
        response: { 200: Tenant, ...errors },
      },
    },
    async (req) => {
      const tenant = tenantOr404(deps.store, req.params.tenant_id);
      const origins = [...new Set(req.body.allowed_origins.map((o) => normaliseOrigin(o)!))];
      return putTenant({ ...tenant, allowed_origins: origins });
    },
  );

  app.post(
    '/tenants/:tenant_id/api-keys',
    {
      schema: { ...route('createApiKey', 'Create an API key (the key is shown only here)'), params: TenantParams, body: z.object({ name: DisplayName }), response: { 201: ApiKeyCreated, ...errors } },
    },
    async (req, reply) => {
      const tenant = tenantOr404(deps.store, req.params.tenant_id);
      const key = newApiKey();
      const record: ApiKeyRecord = {
        id: newId(),
        tenant_id: tenant.id,
        name: req.body.name,
        prefix: keyPrefix(key),
        key_hash: hashApiKey(key),
        created_at: now(),
        revoked_at: null,
      };
      await deps.writer.put('apiKeys', record.id, record);
      return reply.code(201).send({ id: record.id, name: record.name, key, prefix: record.prefix, created_at: isoTime(record.created_at) });
    },
  );

  app.get(
    '/tenants/:tenant_id/api-keys',
    { schema: { ...route('listApiKeys', 'List API keys'), params: TenantParams, response: { 200: list(ApiKey), ...errors } } },
    async (req) => {
      const tenant = tenantOr404(deps.store, req.params.tenant_id);
      const keys = [...deps.store.apiKeys.values()].filter((k) => k.tenant_id === tenant.id).sort((a, b) => a.created_at - b.created_at);
      return { data: keys.map(keyView), next_cursor: null };
    },
  );

  app.delete(
    '/tenants/:tenant_id/api-keys/:key_id',
    { schema: { ...route('revokeApiKey', 'Revoke an API key (at once)'), params: KeyParams, response: { 200: ApiKey, ...errors } } },
    async (req) => {
      const key = ownedOr404(deps.store, req.params.tenant_id, deps.store.apiKeys.get(req.params.key_id), 'API key');
      if (key.revoked_at !== null) return keyView(key);
      const revoked = { ...key, revoked_at: now() };
      await deps.writer.put('apiKeys', key.id, revoked);
      return keyView(revoked);
    },
  );

  app.post(
    '/tenants/:tenant_id/videos',
    {
      schema: {
        ...route('createVideo', 'Register a video'),
        params: TenantParams,
        body: CreateVideo,
        response: { 201: AdminVideo, ...errors },
      },
    },
    async (req, reply) => {
      const tenant = tenantOr404(deps.store, req.params.tenant_id);
      const b = req.body;
      const video: VideoRecord = {
        id: newId(),
        tenant_id: tenant.id,
        title: b.title,
        duration_sec: b.duration_sec,
        created_at: now(),
        pitch_at_sec: b.pitch_at_sec ?? null,
        offer_window_sec: b.offer_window_sec ?? DEFAULT_OFFER_WINDOW_SEC,
      };
      await deps.writer.put('videos', video.id, video);
      return reply.code(201).send(adminVideoView(video));
    },
  );

  app.patch(
    '/tenants/:tenant_id/videos/:video_id',
    {
      schema: {
        ...route(
          'updateVideo',
          "Change a video's title or intent settings",
          '`pitch_at_sec`: where the offer segment starts, in seconds of playback (null: none). `offer_window_sec`: after a `cta_shown`, a session that ends within this many seconds of stream time without a `cta_clicked` counts as abandoned after the offer. Fields left out keep their value.',
        ),
        params: TenantVideoParams,
        body: PatchVideo,
        response: { 200: AdminVideo, ...errors },
      },
    },
    async (req) => {
      const video = videoOf(req.params.tenant_id, req.params.video_id);
      const b = req.body;
      const next: VideoRecord = {
        ...video,
        title: b.title ?? video.title,
        pitch_at_sec: b.pitch_at_sec === undefined ? video.pitch_at_sec : b.pitch_at_sec,
        offer_window_sec: b.offer_window_sec ?? video.offer_window_sec,
      };
      await deps.writer.put('videos', video.id, next);
      return adminVideoView(next);
    },
  );

  app.get(
    '/tenants/:tenant_id/videos',
    { schema: { ...route('listTenantVideos', 'List videos'), params: TenantParams, response: { 200: list(AdminVideo), ...errors } } },
    async (req) => {
      const tenant = tenantOr404(deps.store, req.params.tenant_id);
      const videos = deps.store.videosOf(tenant.id).sort((a, b) => a.created_at - b.created_at || a.id.localeCompare(b.id));
      return { data: videos.map(adminVideoView), next_cursor: null };
    },
  );

  await app.register(analyticsRoutes, {
    base: '/tenants/:tenant_id/videos/:video_id',
    params: TenantVideoParams,
    tags: ['management'],
    security: [{ adminToken: [] }],
    operationIds: { stats: 'getTenantVideoStats', retention: 'getTenantVideoRetention', topVisitors: 'listTenantVideoTopVisitors' },
    videoOf: (req) => {
      const p = req.params as { tenant_id: string; video_id: string };
      return videoOf(p.tenant_id, p.video_id);
    },
    analytics: deps.analytics,
  });

  await app.register(leadRoutes, { store: deps.store, visitors: deps.visitors, log: deps.webhooks.log, cursorSecret: deps.webhooks.cursorSecret });

  // Webhook destinations, the delivery log, reprocessing and security events, sharing one queue of manual deliveries.
  const webhooks = { ...deps.webhooks, store: deps.store, writer: deps.writer, now: deps.now };
  const queue = new DeliveryQueue(webhooks);
  await app.register(destinationRoutes, { ...webhooks, queue });
  await app.register(deliveryRoutes, { ...webhooks, queue });
  await app.register(securityEventRoutes, { ...webhooks, queue });
}
