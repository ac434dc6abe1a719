import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { ApiKeyRecord, TenantRecord, VideoRecord } from '../../schemas/records.ts';
import type { Config } from '../../shared/config.ts';
import type { ConfigStore, ConfigWriter } from '../../shared/config-store/config-store.ts';
import { normaliseOrigin } from '../../shared/http/origins.ts';
import { DisplayName, isoTime, isoTimeOrNull, list, problems } from '../../shared/http/schemas.ts';
import { ApiError } from '../../shared/http/errors.ts';
import { hashApiKey, keyPrefix, newApiKey, newId, newPlayerKey, parseVideoId } from '../../shared/ids.ts';
import type { AnalyticsRepository } from '../api/analytics.repository.ts';
import { analyticsRoutes } from '../api/analytics.routes.ts';
import { videoView } from '../api/read-api.routes.ts';
import { AdminVideo, ApiKey, ApiKeyCreated, DEFAULT_PLAYER_KEY_OVERLAP_S, MAX_ALLOWED_ORIGINS, MAX_PLAYER_KEY_OVERLAP_S, Tenant } from './admin.schema.ts';
import { TenantParams, adminRoute, tenantOr404 } from './routing.ts';
import { webhookAdminRoutes, type WebhookAdminOptions } from './webhooks.routes.ts';

export interface ManagementRoutesOptions {
  store: ConfigStore;
  writer: ConfigWriter;
  /** Destinations, delivery log, reprocessing, security events. */
  webhooks: WebhookAdminOptions;
  analytics: AnalyticsRepository;
  now?: () => number;
  /** The player intake's limits, shown with each tenant. */
  intakeLimits: Pick<Config, 'PLAYER_KEY_EVENTS_PER_MINUTE' | 'CLIENT_ADDRESS_REQUESTS_PER_MINUTE'>;
}

const errors = problems(401, 404, 422, 429);
const KeyParams = TenantParams.extend({ key_id: z.uuid() });
const route = (summary: string, description?: string) => adminRoute('management', summary, description);

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
      limits,
    };
  };
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
    { schema: { ...route('Create a tenant'), body: z.object({ name: DisplayName }), response: { 201: Tenant, ...errors } } },
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
      };
      await deps.writer.put('tenants', tenant.id, tenant);
      return reply.code(201).send(tenantView(tenant));
    },
  );

  app.get(
    '/tenants',
    { schema: { ...route('List tenants'), response: { 200: list(Tenant), ...errors } } },
    async () => ({
      data: [...deps.store.tenants.values()].sort((a, b) => a.created_at - b.created_at).map(tenantView),
      next_cursor: null,
    }),
  );

  app.get(
    '/tenants/:tenant_id',
    { schema: { ...route('Get a tenant'), params: TenantParams, response: { 200: Tenant, ...errors } } },
    async (req) => tenantView(tenantOr404(deps.store, req.params.tenant_id)),
  );

  app.post(
    '/tenants/:tenant_id/player-key/rotate',
    {
      schema: {
        ...route(
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
    { schema: { ...route('Resume a suspended tenant'), params: TenantParams, response: { 200: Tenant, ...errors } } },
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
      schema: { ...route('Create an API key (the key is shown only here)'), params: TenantParams, body: z.object({ name: DisplayName }), response: { 201: ApiKeyCreated, ...errors } },
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
    { schema: { ...route('List API keys'), params: TenantParams, response: { 200: list(ApiKey), ...errors } } },
    async (req) => {
      const tenant = tenantOr404(deps.store, req.params.tenant_id);
      const keys = [...deps.store.apiKeys.values()].filter((k) => k.tenant_id === tenant.id).sort((a, b) => a.created_at - b.created_at);
      return { data: keys.map(keyView), next_cursor: null };
    },
  );

  app.delete(
    '/tenants/:tenant_id/api-keys/:key_id',
    { schema: { ...route('Revoke an API key (at once)'), params: KeyParams, response: { 200: ApiKey, ...errors } } },
    async (req) => {
      const tenant = tenantOr404(deps.store, req.params.tenant_id);
      const key = deps.store.apiKeys.get(req.params.key_id);
      if (!key || key.tenant_id !== tenant.id) throw new ApiError('not_found', 'no such API key');
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
        ...route('Register a video'),
        params: TenantParams,
        body: z.object({ title: DisplayName, duration_sec: z.number().int().min(0).max(1_000_000) }),
        response: { 201: AdminVideo, ...errors },
      },
    },
    async (req, reply) => {
      const tenant = tenantOr404(deps.store, req.params.tenant_id);
      const video: VideoRecord = { id: newId(), tenant_id: tenant.id, title: req.body.title, duration_sec: req.body.duration_sec, created_at: now() };
      await deps.writer.put('videos', video.id, video);
      return reply.code(201).send(videoView(video));
    },
  );

  app.get(
    '/tenants/:tenant_id/videos',
    { schema: { ...route('List videos'), params: TenantParams, response: { 200: list(AdminVideo), ...errors } } },
    async (req) => {
      const tenant = tenantOr404(deps.store, req.params.tenant_id);
      const videos = deps.store.videosOf(tenant.id).sort((a, b) => a.created_at - b.created_at || a.id.localeCompare(b.id));
      return { data: videos.map(videoView), next_cursor: null };
    },
  );

  await app.register(analyticsRoutes, {
    base: '/tenants/:tenant_id/videos/:video_id',
    params: z.object({ tenant_id: z.uuid(), video_id: z.string().refine((v) => parseVideoId(v) !== undefined, 'must be vid_<32 hex> or a UUID') }),
    tags: ['management'],
    security: [{ adminToken: [] }],
    videoOf: (req) => {
      const p = req.params as { tenant_id: string; video_id: string };
      tenantOr404(deps.store, p.tenant_id);
      const video = deps.store.videos.get(parseVideoId(p.video_id)!);
      if (!video || video.tenant_id !== p.tenant_id) throw new ApiError('not_found', 'no such video');
      return video;
    },
    analytics: deps.analytics,
  });

  await app.register(webhookAdminRoutes, { ...deps.webhooks, store: deps.store, writer: deps.writer, now: deps.now });
}
